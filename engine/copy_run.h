/*
 * copy_run.h — coalescing many small device copies (place/cpu.c,
 * place/nvme_step.c, stage3/stage3.c): a sub-group is many pieces of optimizer runs, each a
 * (device range, staging range) pair, and consecutive pieces usually lie
 * back to back on both sides (the runs of one parameter partition, the
 * parameters of one module). A copy_run holds the pending range; a piece
 * that extends it on both sides grows it, any other flushes it as one
 * device copy and starts anew. Bytes, not elements: pieces of different
 * dtypes still join when their bytes abut, since the staging side packs
 * bytes in piece order.
 *
 * Why not a gather kernel or cudaMemcpyBatchAsync for the pieces that do
 * not abut: a sub-group's pieces break only where the engine's layout
 * does (between a rank's chunks of two partition units at stages 1-2 over
 * several ranks, each unit up to the reduce bucket; between two modules'
 * gradient areas at stages 0-1), so after joining a sub-group costs about
 * one copy per unit it touches, not one per parameter; a gather would add
 * a kernel and a device scratch buffer per slot for those few, and the
 * batch call a CUDA 12.8 floor and a device op the cpu backend has
 * nothing to test with. The union of two abutting pieces is
 * one mapped range of one memory kind (each piece is a valid range of the
 * engine's device or host buffers), which cudaMemcpyAsync with
 * cudaMemcpyDefault copies as one.
 */
#ifndef ZINC_ENGINE_COPY_RUN_H
#define ZINC_ENGINE_COPY_RUN_H

#include <stddef.h>

#include "device/device.h"

typedef struct {
  char *dst;       /* pending destination range start */
  const char *src; /* pending source range start */
  size_t bytes;    /* 0: nothing pending */
} zinc_copy_run;

/* Queue the pending range (if any) on stream s and empty it. */
static inline zinc_status zinc_copy_run_flush(zinc_device *d, zinc_copy_run *r, zinc_stream *s) {
  if (!r->bytes)
    return ZINC_OK;
  zinc_status st = d->ops->copy(d, r->dst, r->src, r->bytes, s);
  r->bytes = 0;
  return st;
}

/* Add bytes src -> dst: joined to the pending range when both sides abut
 * it, else the pending range is queued first. */
static inline zinc_status zinc_copy_run_add(zinc_device *d, zinc_copy_run *r, void *dst,
                                            const void *src, size_t bytes, zinc_stream *s) {
  if (!bytes)
    return ZINC_OK;
  if (r->bytes && r->dst + r->bytes == (char *)dst && r->src + r->bytes == (const char *)src) {
    r->bytes += bytes;
    return ZINC_OK;
  }
  zinc_status st = zinc_copy_run_flush(d, r, s);
  *r = (zinc_copy_run){(char *)dst, (const char *)src, bytes};
  return st;
}

#endif /* ZINC_ENGINE_COPY_RUN_H */
