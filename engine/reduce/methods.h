/*
 * methods.h — what crosses files inside engine/reduce/: the reducer's
 * state behind e->rd, the codec transport's calls that the table
 * (reduce.c) and DGC make (compress.c), DGC's calls from the transport's
 * reduce-scatter (dgc.c), and the norm agreement the 1-bit family shares
 * (onebit_adam.c). Each method keeps its own state in a struct that its
 * own file defines, behind e->rd->priv; nothing else of a method is
 * declared here. Outside engine/reduce/ only the checkpoint's
 * error-feedback files (engine/checkpoint/) read the codec transport's
 * fields; the core reaches the methods through reduce.h.
 */
#ifndef ZINC_ENGINE_REDUCE_METHODS_H
#define ZINC_ENGINE_REDUCE_METHODS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/reduce/reduce.h"

/* The reducer's state (e->rd): the selected row, its method's own state
 * and the codec transport's fields (compress.c: every method's buckets
 * that it does not take travel through it). */
struct zinc_reduce_state {
  const zinc_reducer *method; /* the selected row (reduce.c) */
  void *priv;             /* the selected method's own state, a struct its
                             file defines and alone reads (NULL: none:
                             off, or nothing to keep); its init sets it,
                             its free frees it and sets NULL             */
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
};

/* ----------------------------------------------------------- compress.c */
/* The codecs for this layout and config (policy: compress.c's header),
 * the error-feedback residuals and the stage 0/1 scratch. After layout,
 * before the selected row's init (reduce.c). */
zinc_status zinc_compress_init(zinc_engine *e);
zinc_status zinc_compress_scratch(zinc_engine *e);
void zinc_compress_scratch_free(zinc_engine *e);
void zinc_compress_free(zinc_engine *e);
/* The residuals zinc_compress_init allocates, by location and category
 * (zinc_reduce_sizes adds them for every row); the registry and layout
 * only, no e->rd: the estimator's count (compress.c says what it
 * leaves out). */
void zinc_compress_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
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
/* DGC's momentum correction runs (its row is selected and its state
 * exists): the transport's reduce-scatter encodes every slice, the own
 * one too, through the calls below. */
int zinc_dgc_corrects(const zinc_engine *e);
/* Encode unit ui's slice src for rank p into dst through the velocity,
 * the residual ef and top-k with codec c, then mask the velocity at the
 * kept indices (p == me: the owner's own slice, its own residual, kept
 * for zinc_dgc_own_decode; dst and ef ignored). */
zinc_status zinc_dgc_encode_slice(zinc_engine *e, zinc_codec c, int ui, int p, const char *src,
                                  void *dst, void *ef);
/* dst (f32) (+)= the owner's own encoded slice of unit ui. */
zinc_status zinc_dgc_own_decode(zinc_engine *e, zinc_codec c, int ui, float *dst,
                                int accumulate);
/* DGC's local gradient clipping is on (stage 1): the window's reductions
 * wait for the flush, which reduces them as one batch; the step's global
 * clipping is off. */
int zinc_dgc_clips_locally(const zinc_engine *e);
/* The local clipping of that batch: the norm over every unit's whole
 * local gradient (norm_add), then each scaled by
 * min(1, gradient_clipping N^-1/2 / (norm + 1e-6)) (scale). */
zinc_status zinc_dgc_local_norm_add(zinc_engine *e, int ui, const char *grad);
zinc_status zinc_dgc_local_scale(zinc_engine *e, int ui, char *grad);

/* -------------------------------------------------------- onebit_adam.c */
/* The 1-bit optimizers' (OneBitAdam, ZeroOneAdam, OneBitLamb) norm
 * agreement on their rank-local steps. norms_init allocates, with the
 * method's state, the (2 N) host doubles the agreement gathers into, so
 * that no step allocates before that collective (the method frees them
 * with free()). norm_agree: every rank's squared norm and overflow
 * gathered into norms and summed in rank order; *total becomes N x the
 * sum, *overflow any rank's (onebit_adam.c's header says what the norm
 * means). Collective over the data-parallel group. */
zinc_status zinc_onebit_norms_init(const zinc_engine *e, double **norms);
zinc_status zinc_onebit_norm_agree(zinc_engine *e, double *norms, const char *who,
                                   double *total, int *overflow);

#endif /* ZINC_ENGINE_REDUCE_METHODS_H */
