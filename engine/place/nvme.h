/*
 * nvme.h — the NVMe placement's own state, shared by nvme.c (the swap
 * areas, their set-up, the block-aligned reads and writes) and
 * nvme_step.c (the optimizer step's sub-group pipeline); nothing else
 * reads it. The layout of the swap areas is nvme.c's header.
 */
#ifndef ZINC_ENGINE_PLACE_NVME_H
#define ZINC_ENGINE_PLACE_NVME_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/place/placements.h"
#include "offload/aio.h"
#include "offload/swap.h"

#define NVME_MAX_BUFFERS 16
#define NVME_MAX_PARAM_BUFFERS 64
#define BOUNCE_BLOCKS 8

struct zinc_nvme {
  zinc_aio *aio;
  zinc_swap *opt;              /* regions: sub-groups                       */
  int64_t group;               /* G, elements per sub-group                 */
  int ngroups;
  int arrays;                  /* A: master + kept slots, arrays per region */
  int at[3];                   /* array (0 master, 1 exp_avg, 2 exp_avg_sq)
                                  -> position in a region, -1: not kept     */
  uint64_t elem_bytes;         /* E: bytes of one element of every array (4
                                  each fp32, 2 each bf16: place.h's dtypes) */
  uint64_t pre[3];             /* bytes per element of the arrays before
                                  array a: it starts at pre[a] x len         */
  int nbuf;
  float *buf[NVME_MAX_BUFFERS];      /* (E G bytes) host, registered         */
  size_t buf_bytes;
  zinc_aio_handle *rd[NVME_MAX_BUFFERS], *wr[NVME_MAX_BUFFERS];
  zinc_swap *grad;             /* regions: sub-groups' gradients, or NULL   */
  float *gbuf[NVME_MAX_BUFFERS]; /* (G) f32 host, registered                */
  size_t gbuf_bytes;
  zinc_aio_handle *grd[NVME_MAX_BUFFERS];
  zinc_swap *param;            /* one region: the parameter partition       */
  void *pbuf[NVME_MAX_PARAM_BUFFERS]; /* fetch reads (offload_param buffer_count) */
  int npbuf;
  unsigned char pbuf_busy[NVME_MAX_PARAM_BUFFERS];
  size_t pbuf_bytes;
  void *bounce;                /* covering blocks for the accessors         */
  size_t bounce_bytes;
  size_t host_bytes;           /* accounted host memory (buffers, bounce)   */
};

/* The engine's NVMe state, or NULL (none, or before the placement's init:
 * the estimator's bare engine). */
static inline zinc_nvme *nvme_of(const zinc_engine *e) { return e->pl ? e->pl->nvme : NULL; }

static inline int64_t group_len(const zinc_nvme *n, int64_t total, int k) {
  int64_t a = (int64_t)k * n->group;
  return total - a < n->group ? total - a : n->group;
}

/* Bytes of a region of `len` elements of elem_bytes each (every array's
 * element: nvme->elem_bytes; 4 for a gradient region); an empty rank keeps
 * one element. */
static inline uint64_t region_bytes(uint64_t elem_bytes, int64_t len) {
  return (uint64_t)(len > 0 ? len : 1) * elem_bytes;
}

#endif /* ZINC_ENGINE_PLACE_NVME_H */
