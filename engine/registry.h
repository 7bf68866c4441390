/*
 * registry.h — the model as the trainer registers it (parameters, modules)
 * and as the layout cuts it (segments, units, parameter groups, optimizer
 * runs): the types, with registry.c's and layout.c's calls. The layout
 * picture is engine.h's header.
 */
#ifndef ZINC_ENGINE_REGISTRY_H
#define ZINC_ENGINE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "zinc.h"

#define ZINC_ALIGN_ELEMS 32 /* 128 B of f32, 64 B of 16-bit */
#define ZINC_MAX_NDIM 8

struct zinc_param {
  zinc_engine *engine;
  zinc_module *module;
  char *name;
  zinc_dtype dtype;
  int ndim;
  int64_t shape[ZINC_MAX_NDIM];
  int64_t numel;
  int decay;              /* weight decay applies */
  double wd;              /* its value; < 0: the config's weight_decay */
  double lr_scale;        /* lr multiplier (zinc_param_set_lr_scale) */
  int frozen;             /* not trained: no gradient, no optimizer state */
  int group;              /* index into engine->groups (-1: frozen) */
  int replicated;         /* the same full tensor on every model-parallel rank
                             (the norm counts it on mp rank 0 only) */
  int index;              /* registration order, whole model */
  int segment;            /* index into module->segs */
  int64_t seg_offset;     /* first element inside the segment */
  void *user;             /* the trainer's tag (zinc_param_set_user); never
                             read by the engine */
};

typedef struct {
  zinc_dtype dtype;
  int64_t used;           /* elements up to the end of the last parameter */
  int64_t numel;          /* padded: a multiple of N * ZINC_ALIGN_ELEMS */
  int first_unit, nunits; /* into engine->units */
  int persistent;         /* stage 3: kept whole on every rank */
  int frozen;             /* holds frozen parameters: no gradient area, no
                             optimizer runs, no reduction, not in the norm */
  void *full;             /* (numel) dtype on the device: where the full
                             segment is now (param_full, persistent copy, or
                             the module's gathered buffer); NULL when absent */
  void *grad;             /* (numel) dtype on the device: gradient area while
                             handed out; NULL otherwise */
  float *acc;             /* stages 0/1, 16-bit, gradient_accumulation_steps
                             > 1: (numel) f32 on the device, the window's
                             sum of the micro-batches' gradients (grads.c);
                             NULL otherwise */
  size_t gather_offset;   /* stage 3: byte offset inside the gathered buffer */
} zinc_segment;

typedef enum {
  ZINC_GRAD_NONE = 0,     /* not handed out in this window/micro-batch */
  ZINC_GRAD_OPEN,         /* handed out, accumulating */
  ZINC_GRAD_READY         /* grads_ready called; reduction pending/launched */
} zinc_grad_state;

struct zinc_module {
  zinc_engine *engine;
  char *name;
  int index;
  zinc_param **params;
  int nparams, cap;
  zinc_segment *segs;
  int nsegs;
  int64_t numel;          /* padded elements of all segments */
  int64_t gather_numel;   /* stage 3: padded elements gathered on fetch */
  size_t gather_bytes;    /* stage 3: bytes of the gathered buffer */
  size_t grad_bytes;      /* bytes of a gradient area (all segments) */

  int fetched;            /* trainer holds it (fetch count minus releases) */
  /* stage 3 */
  void *gathered;         /* (gather_bytes) on the device: the replay's copy */
  zinc_comm_req *gather_req; /* in-flight all-gather into gathered, or NULL */
  zinc_comm *gather_comm; /* the comm it runs on (dp, or hpz) */
  int secondary;          /* hpZ: ZINC_SECONDARY_* */
  void *served;           /* the copy the trainer was handed */
  void *orphan;           /* a copy the replay dropped while the trainer held it */
  int replay_held;        /* FETCH minus RELEASE events replayed */
  void *read_staging;     /* partition on NVMe: this rank's chunks read for
                             the gather in flight (a parameter read buffer) */
  int64_t read_seq;       /* when that read started (oldest is freed first) */
  size_t read_staging_bytes;
  void *shard_copy;       /* offload_param cpu across PCIe: (shard_copy_bytes)
                             on the device, this rank's chunks copied from
                             the host partition for the gather in flight */
  size_t shard_copy_bytes;
  void *cx_wsend, *cx_wrecv; /* qwZ: (cx_wbytes) this rank's encoded chunks;
                             (N x cx_wbytes) every rank's, for the gather
                             in flight; device                           */
  size_t cx_wbytes;
  /* gradients */
  zinc_grad_state grad_state;
  int64_t grad_window;    /* stage 0/1: window whose zeroing was done */
  int64_t grad_micro;     /* stage 0/1 with acc: micro-batch whose zeroing
                             was done */
  int64_t acc_window;     /* stage 0/1 with acc: window its sum belongs to */
  void *grad_area;        /* stage 2/3: (grad_bytes) in the ring, or dedicated */
  size_t area_offset;     /* ring offset of grad_area */
  size_t area_span;       /* bytes the ring gave (incl. any wrap skip) */
  int area_dedicated;     /* grad_area is its own allocation */
  int area_done;          /* its reduction retired: the ring may free it */
  int64_t reduced_window; /* stage 2/3: window whose partition it wrote */
};

/* hpZ: what a module's slices in the secondary partition hold. */
enum { ZINC_SECONDARY_STALE = 0, /* nothing current: gather from every rank */
       ZINC_SECONDARY_FILLING,   /* the gather in flight fills them */
       ZINC_SECONDARY_VALID };   /* the current parameters: gather in the group */

/* A partition unit (see the header comment). */
typedef struct {
  int module, segment;
  zinc_dtype dtype;
  int64_t seg_offset;     /* first element inside the segment */
  int64_t numel;          /* N * chunk */
  int64_t chunk;          /* elements per rank, multiple of ZINC_ALIGN_ELEMS */
  int64_t shard_offset;   /* this unit's chunk in every rank's shard (elements) */
  size_t shard_byte;      /* same, in bytes of a param_shard (stage 3) */
  size_t secondary_byte;  /* stage 3 with hpZ: this unit's slice in the
                             secondary partition (non-persistent units) */
  int64_t full_offset;    /* N * shard_offset: the unit in a whole-model
                             f32 index space (stage 0 optimizer) */
  int frozen;             /* of a frozen segment: units [ntrain_units,
                             nunits), after every trained unit */
} zinc_unit;

/* A parameter group: parameters that share an lr scale and a weight decay
 * value (the run's decay flag still says whether decay applies). The step
 * builds one optimizer coefficient per group; runs name theirs. */
typedef struct {
  double lr_scale;
  double weight_decay;
} zinc_param_group;

/* One contiguous run of optimizer work: a chunk (or the part of one with a
 * single weight-decay flag and parameter group). Offsets are into the
 * optimizer arrays. */
typedef struct {
  int unit;
  int owner;              /* rank whose chunk this is */
  int64_t opt_offset;     /* into master/m/v */
  int64_t unit_offset;    /* first element inside the unit */
  int64_t n;
  int decay;
  int param;              /* Lamb: the parameter (zinc_param.index) every
                             element belongs to (padding: the one before);
                             -1 for the other optimizers, whose runs may
                             span parameters */
  int group;              /* index into engine->groups */
} zinc_opt_run;

/* ----------------------------------------------------------- registry.c */
void zinc_registry_free(zinc_engine *e);
/* Collective over the world: INVALID on every rank, naming the first
 * parameter that differs, unless every rank registered the same names,
 * dtypes, shapes, weight-decay flags and values, lr scales and frozen
 * flags in the same order. */
zinc_status zinc_registry_agree(zinc_engine *e);

/* ------------------------------------------------------------- layout.c */
/* Partition of `count` elements over `ranks`: chunk per rank (a multiple of
 * align) and the padded total. Pure. */
void zinc_partition(int64_t count, int ranks, int64_t align, int64_t *chunk,
                    int64_t *padded);
/* Build segments, units, shard offsets and optimizer runs. */
zinc_status zinc_layout_build(zinc_engine *e);
/* Position of a unit's chunk for rank r in the optimizer arrays. */
int64_t zinc_layout_opt_offset(const zinc_engine *e, const zinc_unit *u, int r);
/* Visit every piece of parameter p as (unit, rank, offset in chunk, offset
 * in p, length). */
typedef zinc_status (*zinc_piece_fn)(zinc_engine *e, const zinc_unit *u, int unit_index,
                                     int r, int64_t chunk_off, int64_t param_off,
                                     int64_t len, void *ctx);
zinc_status zinc_layout_for_each_piece(zinc_engine *e, const zinc_param *p,
                                       zinc_piece_fn fn, void *ctx);
/* Byte pointer of a unit inside a segment buffer. */
static inline char *zinc_unit_ptr(void *seg_base, const zinc_unit *u) {
  return (char *)seg_base + (size_t)u->seg_offset * zinc_dtype_size(u->dtype);
}

#endif /* ZINC_ENGINE_REGISTRY_H */
