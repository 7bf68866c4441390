/*
 * reduce.h — the reduction seam: how the engine's gradients travel between
 * the data-parallel ranks, as a table of hooks (zinc_reducer), one row per
 * gradient-communication method, chosen from the configuration the way
 * NCCL picks a transport. The core (grads.c, step.c, build.c, stage3/,
 * checkpoint/) calls the zinc_reduce_* wrappers below and names no method.
 *
 * The plain reducer is what runs when no row is selected, and what every
 * hook a row leaves NULL falls back to: each bucket of ready modules is
 * reduce-scattered unit by unit (or, with a gradient codec, through the
 * codec transport declared at the end of this header: qgZ,
 * communication_data_type, TernGrad, top-k), the step all-gathers the
 * reduced chunks at stage 0, the norm is the core's, the optimizer of the
 * placement updates. A row replaces parts of that:
 *
 *   selects       the configuration asks for this method (pure function of
 *                 the settings; the first row of reduce.c's table that
 *                 answers 1 is the method, at most one can: config/
 *                 validate.c refuses the pairs that would both match)
 *   cpu_only      (a string, not a hook) the setting that selects the row,
 *                 named when the cuda device refuses it (the estimator
 *                 says so rather than size it); NULL: it runs there
 *   sizes         bytes it allocates by location and category (build's
 *                 zinc_build_sizes, the profiler, the estimator); needs the
 *                 registry and layout only, never e->rd (the estimator's
 *                 bare engine has none, nor a device: e->sized_as_gpu)
 *   init / free   its state, after the layout and the codec transport's:
 *                 a struct its own file defines, behind e->rd->priv, which
 *                 no other file reads (init sets it, free frees it and
 *                 sets it NULL); init registers the rank-local state a
 *                 checkpoint must keep with zinc_mstate_register
 *                 (checkpoint/mstate.h): the names it gives are part of
 *                 the checkpoint format and never change. free accepts a
 *                 failed or partial init and waits for anything it started.
 *   owns_momentum SGD's momentum lives in what the method sends: the
 *                 optimizer runs with momentum 0 (pure, like selects)
 *   keeps_grads   the method reads or rewrites the gradient buffers beyond
 *                 the plain reduce-scatter, so a placement must keep them
 *                 in memory (the NVMe placement's gradient swap) (pure)
 *   local_grads   this window keeps the gradients rank-local: the buckets
 *                 launch nothing (their f32 sums are rounded into the
 *                 gradient buffer as a reduction would read them)
 *   holds_window  the window's buckets wait for the flush (launched as one)
 *   take_bucket   a launched bucket's modules, after every rank agreed to
 *                 launch it: *taken = 1 when the method reduces them itself
 *                 (later, at the flush), so the plain collective is skipped
 *   flush         at backward_end, after the plain buckets retired
 *   whole_grads   stage 0, at the step: *done = 1 when the method left every
 *                 rank's whole gradient in its gradient buffer (or keeps it
 *                 rank-local), so the plain all-gather is skipped
 *   norm          after the core's sum of squares: adds the method's part
 *                 (or agrees a rank-local norm) and its overflow
 *   clips_locally the method clipped the gradients itself: no global
 *                 clipping coefficient
 *   update        the method's own communication and update in place of the
 *                 placement's optimizer: *done = 1 when it ran; it is given
 *                 st, the step's status so far, and must agree it before
 *                 any collective (every rank calls it, whatever st)
 *   step_end      after each optimizer step taken (not skipped)
 *   sync          before a checkpoint is saved (adopt_rank0 = 1) or loaded
 *                 (0): nothing of the method may be in flight afterwards
 *
 * Ordering, per window: [local_grads / holds_window / take_bucket per
 * bucket] ... flush; then at the step: whole_grads (stage 0), norm,
 * clips_locally, update, step_end. init before any of them, free last.
 *
 * Agreement: take_bucket, flush, whole_grads, norm, update and sync are
 * collective over the data-parallel group: every rank calls them at the
 * same point with the same arguments' shape, and they return a status that
 * every rank shares (zinc_engine_agree before any collective that could
 * otherwise wait for a failed peer). local_grads, holds_window,
 * clips_locally, owns_momentum and keeps_grads must answer the same on
 * every rank (they read the configuration, the step counters and agreed
 * state only). init may fail locally (the build agrees).
 *
 * What a hook may touch: its own state (e->rd->priv), the gradient
 * buffers of the modules it is handed or of the window (seg->grad,
 * grad_full, grad_acc at stages 0/1, grad_part at 2/3), the optimizer
 * state only in update, the data-parallel comms, the engine's allocation
 * helpers (support.h) and the comms logger. It must not change the layout,
 * the registry, the trace or the ring of gradient areas.
 */
#ifndef ZINC_ENGINE_REDUCE_H
#define ZINC_ENGINE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* What a method's own update gets (the step's numbers). */
typedef struct {
  const zinc_opt_coef *c;   /* (ncoef) per parameter group */
  int ncoef;
  const zinc_opt_seg *segs; /* the optimizer runs (unused unless st is ZINC_OK) */
  double lr;                /* before the group scales */
  double grad_scale;        /* 1 / (loss scale x dp_size x accumulation) x the
                               clipping coefficient */
  double local_scale;       /* grad_scale x dp_size: a rank's own gradient to
                               its mean gradient */
} zinc_reduce_update_args;

typedef struct zinc_reducer {
  const char *name;
  int (*selects)(const zinc_settings *s);
  const char *cpu_only;
  void (*sizes)(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
  zinc_status (*init)(zinc_engine *e);
  void (*free)(zinc_engine *e);
  int (*owns_momentum)(const zinc_settings *s, int dp_size);
  int (*keeps_grads)(const zinc_settings *s, int dp_size);
  int (*local_grads)(zinc_engine *e);
  int (*holds_window)(const zinc_engine *e);
  zinc_status (*take_bucket)(zinc_engine *e, const int *mods, int nmods, int *taken);
  zinc_status (*flush)(zinc_engine *e);
  zinc_status (*whole_grads)(zinc_engine *e, int *done);
  zinc_status (*norm)(zinc_engine *e, double *total, int *overflow);
  int (*clips_locally)(const zinc_engine *e);
  zinc_status (*update)(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                        int *done);
  zinc_status (*step_end)(zinc_engine *e);
  zinc_status (*sync)(zinc_engine *e, int adopt_rank0);
} zinc_reducer;

/* The row these settings select (the plain reducer's when none does). */
const zinc_reducer *zinc_reducer_select(const zinc_settings *s);

/* ---- the dispatch wrappers (each: the method's hook, or the plain
 * reducer's behaviour when unset) */
zinc_status zinc_reduce_init(zinc_engine *e); /* after the layout; e->rd */
void zinc_reduce_free(zinc_engine *e);        /* any state; e->rd NULL after */
/* The selected row's sizes plus the codec transport's error-feedback
 * residuals, added into bytes (the registry and layout only: no e->rd). */
void zinc_reduce_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* The selected row's cpu_only (NULL: none, or it runs on the cuda device). */
const char *zinc_reduce_cpu_only(const zinc_settings *s);
int zinc_reduce_owns_momentum(const zinc_engine *e);
int zinc_reduce_keeps_grads(const zinc_engine *e);
int zinc_reduce_local_grads(zinc_engine *e);
int zinc_reduce_holds_window(const zinc_engine *e);
zinc_status zinc_reduce_take_bucket(zinc_engine *e, const int *mods, int nmods, int *taken);
zinc_status zinc_reduce_flush(zinc_engine *e);
zinc_status zinc_reduce_whole_grads(zinc_engine *e, int *done);
zinc_status zinc_reduce_norm(zinc_engine *e, double *total, int *overflow);
int zinc_reduce_clips_locally(const zinc_engine *e);
zinc_status zinc_reduce_update(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                               int *done);
zinc_status zinc_reduce_step_end(zinc_engine *e);
zinc_status zinc_reduce_sync(zinc_engine *e, int adopt_rank0);

/* ---- the plain reducer's codec transport (quant: compress.c), which the
 * bucket reduction and the stage-3 gather use whatever the method */
/* Gradients travel through a codec (the buckets take the all-to-all-v). */
int zinc_compress_grads(const zinc_engine *e);
/* Encode reduction r's units and fill *coll with its all-to-all-v. */
zinc_status zinc_compress_reduce_prepare(zinc_engine *e, zinc_reduction *r, zinc_coll *coll);
/* After r's all-to-all-v: unit ui's rank-order sum into partition (f32;
 * overwrite or add), or with partition NULL (stages 0/1) into this rank's
 * slot of grad in the unit's dtype. Units in launch order. */
zinc_status zinc_compress_reduce_unit(zinc_engine *e, zinc_reduction *r, int ui,
                                      const char *grad, float *partition, int overwrite);
void zinc_compress_reduction_free(zinc_engine *e, zinc_reduction *r);
/* The stage-3 parameter gather's codec (qwZ): on, bytes of a chunk, encode,
 * decode, and its name for the comms logger. */
int zinc_compress_weights(const zinc_engine *e);
size_t zinc_compress_weight_bytes(const zinc_engine *e, int64_t chunk);
zinc_status zinc_compress_weight_encode(zinc_engine *e, void *dst, const void *src, int dtype,
                                        int64_t chunk);
zinc_status zinc_compress_weight_decode(zinc_engine *e, void *dst, int dtype, const void *src,
                                        int64_t chunk);
const char *zinc_compress_weight_codec_name(const zinc_engine *e);

#endif /* ZINC_ENGINE_REDUCE_H */
