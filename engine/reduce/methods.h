/*
 * methods.h — the gradient-communication methods' calls into each other
 * and the core's calls into them, one banner per file of engine/reduce/:
 * the compressed reduce-scatter and its codecs (compress.c), DGC's
 * momentum correction (dgc.c), PowerSGD (powersgd.c), delayed gradient
 * averaging (dga.c), and the 1-bit family on onebit.h's compressed
 * all-reduce (onebit_adam.c, zoadam.c, onebit_lamb.c). A reducer table
 * is to replace the core's part of it.
 */
#ifndef ZINC_ENGINE_REDUCE_METHODS_H
#define ZINC_ENGINE_REDUCE_METHODS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/reduce/onebit.h"
#include "engine/reduce/reduce.h"

typedef struct zinc_powersgd zinc_powersgd;
typedef struct zinc_zoadam zinc_zoadam;

/* The reducer's state (e->rd): the selected row, the codec transport's
 * fields (compress.c, every method's buckets use it) and each method's own
 * state (NULL or zero when it is not the one selected). */
struct zinc_reduce_state {
  const zinc_reducer *method; /* the selected row (reduce.c) */
  void *priv;             /* the selected method's own state, read by its
                             file only (delayed averaging's ring: dga.c);
                             NULL: none (off, or nothing to keep)        */
  /* ---- compressed communication (compress.c) */
  zinc_codec cx_grad;     /* gradient slices to peers on other nodes (NONE:
                             the plain reduce-scatter)                  */
  zinc_codec cx_local;    /* ... to peers on this node when cx_local_raw
                             (NONE: raw, the unit's dtype)              */
  int cx_local_raw;       /* scope inter_node: pairs on a node use cx_local */
  zinc_codec cx_weight;   /* stage-3 parameter gather (NONE: exact)     */
  void *cx_ef;            /* (cx_ef_bytes) device: INT8 residuals (fp32
                             for TOPK: DGC), per trained unit (N-1)
                             slices (cx_ef_off)                         */
  size_t cx_ef_bytes;
  size_t *cx_ef_off;      /* (ntrain_units) byte offset of each unit's  */
  float *cx_scratch;      /* stages 0/1: (largest chunk) f32 sum        */
  size_t cx_scratch_bytes;
  struct zinc_dgc *dgc;   /* DGC's momentum correction (dgc.c); NULL: off */
  zinc_powersgd *psgd;    /* PowerSGD at stages 0/1 (powersgd.c)        */
  zinc_zoadam *zoadam;    /* 0/1 Adam (zoadam.c): ZeroOneAdam            */
  struct zinc_onebit_lamb *onebit_lamb; /* onebit_lamb.c: OneBitLamb     */
  /* 1-bit Adam (onebit_adam.c; optimizer.type "OneBitAdam", stage 0) */
  zinc_onebit_plan ob_plan; /* one segment per trained parameter, in the
                               optimizer arrays (N*S)                     */
  float *ob_worker_error;  /* (ob_worker_bytes) device: padded momentum  */
  float *ob_server_error;  /* (ob_server_bytes) device: this rank's chunks */
  size_t ob_worker_bytes, ob_server_bytes;
  double *ob_norms;        /* (2 N) host: the 1-bit optimizers' norm gather */
};

/* ---------------------------------------------------------------- dga.c */
/* Delayed gradient averaging (zinc.compression.delayed_averaging, stage 0;
 * dga.c's header): the ring of snapshots and its comm, after the layout
 * (e->rd->dga stays NULL when off); free waits for the all-reduces in flight. */
zinc_status zinc_dga_init(zinc_engine *e);
void zinc_dga_free(zinc_engine *e);
/* In the step, in place of stage 0's gradient all-gather: this rank's
 * corrected gradient (the all-reduce sum's units) into its gradient
 * buffer, the all-reduce of its local gradient started. Collective over
 * the data-parallel group. */
zinc_status zinc_dga_step(zinc_engine *e);
/* The step must be skipped: an inf/NaN in some rank's local gradient
 * (agreed in zinc_dga_step); 0 when off. */
int zinc_dga_skipped(const zinc_engine *e);
/* Before a checkpoint: wait for the all-reduces in flight (agreed over
 * the data-parallel group); adopt_rank0 (a save): then every rank takes
 * rank 0's parameters, optimizer state and pending local gradients, so
 * that the checkpoint holds one model and the run goes on from it, as a
 * resumed one does. Collective. */
zinc_status zinc_dga_sync(zinc_engine *e, int adopt_rank0);
/* The ring's bytes per rank (host memory) for the estimator: 0 when off. */
size_t zinc_dga_state_bytes(const zinc_settings *s, int dp_size, int64_t train_elems);

/* ----------------------------------------------------------- compress.c */
/* The codecs for this layout and config (policy: compress.c's header),
 * the error-feedback residuals and the stage 0/1 scratch. After layout. */
zinc_status zinc_compress_init(zinc_engine *e);
zinc_status zinc_compress_scratch(zinc_engine *e);
void zinc_compress_scratch_free(zinc_engine *e);
void zinc_compress_free(zinc_engine *e);
/* After each optimizer step: zero the residuals every reset_T steps. */
zinc_status zinc_compress_step_end(zinc_engine *e);
/* DGC's density at optimizer step `step`: zinc.compression.dgc.density,
 * raised during the first warmup_steps to 0.25, 0.0625, 0.015625,
 * 0.00390625 over four equal quarters (whichever is larger). */
double zinc_compress_dgc_density(const zinc_settings *s, int64_t step);
/* Bytes of one error-feedback slice of `chunk` elements for gradient
 * codec `grad`: fp32 for TOPK (DGC), INT8 blocks otherwise. */
size_t zinc_compress_ef_slice_bytes(zinc_codec grad, int64_t chunk);
/* ---------------------------------------------------------------- dgc.c */
/* DGC's momentum correction (zinc.compression.dgc.momentum_correction)
 * is on for this configuration over dp_size ranks: SGD then runs with
 * momentum 0 (the momentum is in what was sent). */
int zinc_dgc_momentum_on(const zinc_settings *s, int dp_size);
/* Its velocities, the owner's residuals and encoded slices, after
 * zinc_compress_init (e->rd->dgc stays NULL when off); registered as method
 * state. ZINC_ERR_CONFIG for a configuration it cannot serve,
 * ZINC_ERR_UNSUPPORTED on the cuda device. */
zinc_status zinc_dgc_init(zinc_engine *e);
void zinc_dgc_free(zinc_engine *e);
/* Bytes zinc_dgc_init allocates (gradient memory on the device). */
uint64_t zinc_dgc_state_bytes(const zinc_engine *e);
/* Encode unit ui's slice src for rank p into dst through the velocity,
 * the residual ef and top-k with codec c, then mask the velocity at the
 * kept indices (p == me: the owner's own slice, its own residual, kept
 * for zinc_dgc_own_decode; dst and ef ignored). */
zinc_status zinc_dgc_encode_slice(zinc_engine *e, zinc_codec c, int ui, int p, const char *src,
                                  void *dst, void *ef);
/* DGC's local gradient clipping is on (stage 1): the window's reductions
 * wait for the flush, which reduces them as one batch; the step's global
 * clipping is off. */
int zinc_dgc_clips_locally(const zinc_engine *e);
/* The local clipping of that batch: the norm over every unit's whole
 * local gradient (norm_add), then each scaled by
 * min(1, gradient_clipping N^-1/2 / (norm + 1e-6)) (scale). */
zinc_status zinc_dgc_local_norm_add(zinc_engine *e, int ui, const char *grad);
zinc_status zinc_dgc_local_scale(zinc_engine *e, int ui, char *grad);
/* dst (f32) (+)= the owner's own encoded slice of unit ui. */
zinc_status zinc_dgc_own_decode(zinc_engine *e, zinc_codec c, int ui, float *dst,
                                int accumulate);

/* ----------------------------------------------------------- powersgd.c */
/* gradient_codec "powersgd" at stage 0 or 1. */
int zinc_powersgd_enabled(const zinc_settings *s);
/* Its Q matrices, errors and scratch (after layout; ZINC_ERR_UNSUPPORTED
 * on the cuda device), registered as method state. */
zinc_status zinc_powersgd_init(zinc_engine *e);
void zinc_powersgd_free(zinc_engine *e);
/* Bytes zinc_powersgd_init allocates: state (Q's and errors, gradient
 * memory) and scratch (buffers); 0 when off. Needs the registry only. */
void zinc_powersgd_sizes(const zinc_engine *e, uint64_t *state, uint64_t *scratch);
/* This window's reduction is PowerSGD's (iteration >= start_powerSGD_iter). */
int zinc_powersgd_active(const zinc_engine *e);
/* A launched reduction of these modules: kept for the flush (every module
 * is launched once per window). */
zinc_status zinc_powersgd_defer(zinc_engine *e, const int *mods, int nmods);
/* At the window's flush (collective over dp): the deferred modules reduced
 * together; every rank's gradient buffer ends with the sum over ranks
 * (approximated for the compressed parameters). */
zinc_status zinc_powersgd_flush(zinc_engine *e);
/* 1 (once) when the last window's gradients are whole on every rank (the
 * stage-0 all-gather is not needed). */
int zinc_powersgd_take_whole(zinc_engine *e);
/* ------------------------------------------------------------- zoadam.c */
/* 0/1 Adam (optimizer.type "ZeroOneAdam", stage 0): its state, buffers and
 * registered method state (no-op for another optimizer); after layout. */
zinc_status zinc_zoadam_init(zinc_engine *e);
void zinc_zoadam_free(zinc_engine *e);
/* Its state and scratch bytes (the estimator's and the build's sizes). */
void zinc_zoadam_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* 1 when the coming step keeps the gradients rank-local (no all-reduce by
 * the engine): 0/1 Adam's compressed and local steps over several ranks. */
int zinc_zoadam_local_grads(zinc_engine *e);
/* On such a step: the gradient norm's sum of squares and the inf/NaN flag
 * agreed over the data-parallel ranks (collective); otherwise a no-op. */
zinc_status zinc_zoadam_norm(zinc_engine *e, double *total, int *overflow);
/* 0/1 Adam's communication and update of step e->step + 1 (lr before the
 * group scales; grad_scale step.c's 1 / (loss scale x dp_size x
 * accumulation)). Collective over the data-parallel group. */
zinc_status zinc_zoadam_update(zinc_engine *e, double lr, double grad_scale);
/* -------------------------------------------------------- onebit_lamb.c */
/* 1-bit LAMB (optimizer.type "OneBitLamb", stage 0), the same five calls
 * as 0/1 Adam's above. */
zinc_status zinc_onebit_lamb_init(zinc_engine *e);
void zinc_onebit_lamb_free(zinc_engine *e);
void zinc_onebit_lamb_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
int zinc_onebit_lamb_local_grads(const zinc_engine *e);
zinc_status zinc_onebit_lamb_norm(zinc_engine *e, double *total, int *overflow);
zinc_status zinc_onebit_lamb_update(zinc_engine *e, double lr, double grad_scale);
/* -------------------------------------------------------- onebit_adam.c */
/* OneBitAdam at stage 0: the plan and the worker/server errors (registered
 * as method state); nothing for another optimizer. After layout. */
zinc_status zinc_onebit_adam_init(zinc_engine *e);
void zinc_onebit_adam_free(zinc_engine *e);
/* 1 when this step's gradients stay local (OneBitAdam, e->step >=
 * freeze_step): grads.c reduces nothing, step.c gathers nothing. */
int zinc_onebit_local_grads(const zinc_engine *e);
/* The 1-bit optimizers' rank-local steps, after the local norm: every
 * rank's squared norm and overflow gathered (into e->rd->ob_norms, allocated
 * at build by zinc_onebit_norms_init) and summed in rank order; *total
 * becomes N x the sum, *overflow any rank's (onebit_adam.c's header says
 * what the norm means). Collective over the data-parallel group. */
zinc_status zinc_onebit_norm_agree(zinc_engine *e, const char *who, double *total,
                                   int *overflow);
zinc_status zinc_onebit_norms_init(zinc_engine *e);
void zinc_onebit_norms_free(zinc_engine *e);
/* The compressed step over the runs (segs as step.c builds them); every
 * rank calls it with st, its status so far (segs unused unless ZINC_OK),
 * which is agreed before the collectives; local_scale turns a rank's
 * gradient into its mean gradient, times the clipping coefficient.
 * Returns the update's local status (the caller agrees on it). Collective
 * over the data-parallel group. */
zinc_status zinc_onebit_adam_step(zinc_engine *e, const zinc_opt_coef *c,
                                  const zinc_opt_seg *segs, zinc_status st,
                                  double local_scale);
/* Bytes of the error buffers zinc_onebit_adam_init allocates (estimator). */
uint64_t zinc_onebit_adam_state_bytes(const zinc_engine *e);

#endif /* ZINC_ENGINE_REDUCE_METHODS_H */
