/*
 * dgc.c — Deep Gradient Compression's momentum correction and momentum
 * factor masking (Lin et al., "Deep Gradient Compression", ICLR 2018,
 * Algorithm 1 with Sections 3.2 and 3.3), on top of engine/reduce/compress.c's
 * compressed reduce-scatter with the TOPK codec (kernels/codec.h).
 * zinc.compression.dgc.momentum_correction (docs/config.md "Deep Gradient
 * Compression").
 *
 * Every rank r keeps, for every element it encodes (each slice it sends to
 * a peer AND its own slice of every trained unit), a velocity u and a
 * residual v (fp32); with SGD's momentum m and the local gradient g:
 *   u <- m u + g                      (momentum correction)
 *   v <- v + u;  send top-k of v      (per block of block_size, codec.h)
 *   v <- v with the kept elements 0   (the TOPK codec's residual)
 *   u <- u with the kept elements 0   (momentum factor masking)
 * The owner of a slice sums the N sparse v's in rank order in fp32 — its
 * own slice decoded from its own top-k like the others, so every
 * contribution is of the same kind — and SGD then runs with momentum 0:
 * p <- p - lr (sum / N + wd p) (the momentum is already in what was sent).
 *
 * State: the velocities (N slices of each trained unit's chunk), the
 * owner's residuals (one slice per unit; the peers' residuals are
 * compress.c's cx_ef) and the owner's encoded slices (one TOPK slice per
 * unit at the warm-up's largest k, consumed in the same reduction);
 * gradient memory on the device (the row's sizes: the build's and the
 * estimator's count). The velocities and residuals are method state
 * in checkpoints (engine/checkpoint/mstate.h: "dgc.velocity",
 * "dgc.own_residual").
 *
 * The masking reads the kept indices from the TOPK bytes (codec.h's
 * uint16 index arrays) with a host loop: the cpu device only; on the cuda
 * device its init fails with ZINC_ERR_UNSUPPORTED.
 *
 * Local gradient clipping (zinc.compression.dgc.local_clipping, the
 * paper's Section 3.3 and Algorithm 1): before g enters the velocity,
 *   g <- g min(1, c N^-1/2 / (||g|| + 1e-6)),  c = gradient_clipping,
 * ||g|| over the rank's whole local gradient; the step's global clipping
 * is then off. The norm must be known before the first slice is encoded:
 * at stage 1 the window's reductions wait for the flush
 * (zinc_dgc_clips_locally stops grads.c's bucket launches), which reduces
 * them as one batch whose prepare clips them first (compress.c); stages
 * 2/3 reduce bucket by bucket as backward produces the gradient and are
 * refused.
 *
 * ZINC_TEST_DGC_NO_MASK=1 (tests only, docs/environment.md) skips the
 * masking, the mutation the GPT gap test shows diverging.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "engine/checkpoint/mstate.h"
#include "engine/engine.h"
#include "engine/reduce/methods.h"
#include "engine/support.h"
#include "kernels/codec.h"
#include "kernels/zinc_math.h"

typedef struct zinc_dgc zinc_dgc;

/* Its state, behind e->rd->priv while this row is the selected one. */
struct zinc_dgc {
  float *vel;          /* velocities: unit ui's slice p at vel_off[ui] + p chunk */
  float *own_res;      /* the owner's residuals: unit ui's at res_off[ui]       */
  char *own_bytes;     /* the owner's encoded slices: unit ui's at bytes_off[ui] */
  size_t vel_bytes, res_bytes, own_bytes_total;
  size_t *vel_off, *res_off, *bytes_off; /* (ntrain_units) in elements / bytes */
  float m;             /* SGD's momentum                                          */
  int local_clip;      /* zinc.compression.dgc.local_clipping                     */
  double sq;           /* local clipping: the sum of squares so far               */
  int have_coef;       /* ... and the coefficient of this batch, once computed    */
  float coef;
  int no_mask;         /* ZINC_TEST_DGC_NO_MASK                                   */
};

extern const zinc_reducer zinc_reducer_dgc;

/* Its state, or NULL (off; or another row selected, whose priv this is
 * not: the codec transport asks whatever the method). */
static zinc_dgc *dgc_of(const zinc_engine *e) {
  return e->rd && e->rd->method == &zinc_reducer_dgc ? e->rd->priv : NULL;
}

int zinc_dgc_corrects(const zinc_engine *e) { return dgc_of(e) != NULL; }

/* Momentum correction (zinc.compression.dgc.momentum_correction) is on
 * for this configuration over dp_size ranks: SGD then runs with momentum
 * 0 (the momentum is in what was sent). */
static int momentum_on(const zinc_settings *s, int dp_size) {
  return s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC && s->dgc_momentum_correction &&
         s->zero_quantized_gradients && s->stage >= 1 && dp_size > 1;
}

/* The largest TOPK slice of `chunk` elements over the warm-up (k at step
 * 0 is the largest). */
static size_t own_slice_bytes(const zinc_settings *s, int64_t chunk) {
  int block = (int)s->compress_block_size;
  zinc_codec c = {ZINC_CODEC_TOPK, block,
                  zinc_codec_topk_k(zinc_compress_dgc_density(s, 0), block)};
  return zinc_codec_bytes(c, chunk);
}

/* Sizes of the three buffers, and each unit's offsets when off != NULL. */
static void sizes(const zinc_engine *e, size_t *vel, size_t *res, size_t *own, size_t *vel_off,
                  size_t *res_off, size_t *bytes_off) {
  size_t v = 0, r = 0, b = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    int64_t chunk = e->units[ui].chunk;
    if (vel_off) {
      vel_off[ui] = v;
      res_off[ui] = r;
      bytes_off[ui] = b;
    }
    v += (size_t)e->dp_size * (size_t)chunk;
    r += (size_t)chunk;
    b += own_slice_bytes(&e->cfg, chunk);
  }
  *vel = v * 4 > 0 ? v * 4 : 16;
  *res = r * 4 > 0 ? r * 4 : 16;
  *own = b > 0 ? b : 16;
}

/* The row's sizes: the three buffers, gradient memory on the device. */
static void state_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (!momentum_on(&e->cfg, e->dp_size))
    return;
  size_t v, r, b;
  sizes(e, &v, &r, &b, NULL, NULL, NULL);
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += (uint64_t)v + r + b;
}

/* Some pair of data-parallel ranks travels exact (scope inter_node, two
 * ranks on one node): the same answer on every rank. */
static int exact_pairs(const zinc_engine *e) {
  if (!e->rd->cx_local_raw)
    return 0;
  for (int p = 0; p < e->dp_size; p++)
    for (int q = p + 1; q < e->dp_size; q++)
      if ((e->dp->node_of ? e->dp->node_of[p] : 0) == (e->dp->node_of ? e->dp->node_of[q] : 0))
        return 1;
  return 0;
}

/* What momentum correction needs of the rest of the configuration. */
static zinc_status check_config(const zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  const char *key = "zinc.compression.dgc.momentum_correction";
  if (s->optimizer != ZINC_OPTIM_SGD || !(s->momentum > 0.0))
    return zinc_error(ZINC_ERR_CONFIG, "%s = true needs optimizer.type \"SGD\" with momentum > 0: "
                      "DGC moves SGD's momentum into the compressed gradient path (the velocity "
                      "each rank accumulates before top-k) and then runs SGD with momentum 0; "
                      "set optimizer.type SGD and params.momentum, or set %s false", key, key);
  if (s->nesterov || s->dampening != 0.0)
    return zinc_error(ZINC_ERR_CONFIG, "%s = true: SGD's nesterov (%d) and dampening (%g) are "
                      "not part of DGC's velocity u <- m u + g; set nesterov false and "
                      "dampening 0", key, s->nesterov, s->dampening);
  if (!s->dgc_residual)
    return zinc_error(ZINC_ERR_CONFIG, "%s = true needs zinc.compression.dgc.residual true: the "
                      "velocity is accumulated into the residual before top-k", key);
  if (e->rd->cx_grad.kind != ZINC_CODEC_TOPK || exact_pairs(e))
    return zinc_error(ZINC_ERR_CONFIG, "%s = true needs every pair of data-parallel ranks on "
                      "the top-k codec (SGD's momentum is off, so an exact pair would lose it), "
                      "but with zinc.compression.scope \"inter_node\" the ranks of one node "
                      "exchange exact gradients; set zinc.compression.scope \"all\"", key);
  if (s->stage >= 2 && s->gradient_accumulation_steps > 1)
    return zinc_error(ZINC_ERR_CONFIG, "%s = true at stage %d with gradient_accumulation_steps "
                      "%lld: stages 2/3 reduce every micro-batch, and the velocity must see "
                      "one gradient per optimizer step; use stage 1 or "
                      "gradient_accumulation_steps 1", key, s->stage,
                      (long long)s->gradient_accumulation_steps);
  if (s->fp16_enabled)
    return zinc_error(ZINC_ERR_CONFIG, "%s = true with fp16.enabled: the velocity would carry "
                      "loss-scaled gradients across skipped steps; use bf16 or fp32", key);
  if (s->dgc_local_clipping && s->stage != 1)
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.dgc.local_clipping = true at stage %d: "
                      "the local gradient's norm must be known before its first slice is "
                      "encoded, which zinc arranges at stage 1 only (the window's reductions "
                      "wait for the flush); at stages 2/3 the gradient is reduced bucket by "
                      "bucket as backward produces it; use stage 1 or set local_clipping false",
                      s->stage);
  if (s->dgc_local_clipping && !(s->gradient_clipping > 0))
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.dgc.local_clipping = true needs "
                      "gradient_clipping > 0 (each rank clips to gradient_clipping N^-1/2); set "
                      "gradient_clipping or local_clipping false");
  if (e->dev->ops->is_gpu)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "%s = true: momentum factor masking has no GPU "
                      "path yet (it runs on the cpu device only); set it false or use the cpu "
                      "device", key);
  return ZINC_OK;
}

/* Its velocities, the owner's residuals and encoded slices, after the
 * codec transport's init (no state when momentum correction is off);
 * registered as method state. ZINC_ERR_CONFIG for a configuration it
 * cannot serve, ZINC_ERR_UNSUPPORTED on the cuda device. */
static zinc_status dgc_init(zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  if (s->dgc_local_clipping && s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC &&
      !s->dgc_momentum_correction)
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.dgc.local_clipping = true needs "
                      "zinc.compression.dgc.momentum_correction true (zinc clips the local "
                      "gradient on its way into the velocity); set both or neither");
  if (!momentum_on(s, e->dp_size))
    return ZINC_OK;
  ZINC_CHECK(check_config(e));
  zinc_dgc *g;
  ZINC_CHECK(zinc_calloc((void **)&g, 1, sizeof *g, "DGC momentum correction"));
  e->rd->priv = g;
  size_t n = (size_t)e->ntrain_units + 1;
  ZINC_CHECK(zinc_calloc((void **)&g->vel_off, 3 * n, sizeof(size_t), "DGC offsets"));
  g->res_off = g->vel_off + n;
  g->bytes_off = g->vel_off + 2 * n;
  sizes(e, &g->vel_bytes, &g->res_bytes, &g->own_bytes_total, g->vel_off, g->res_off,
        g->bytes_off);
  g->m = (float)e->cfg.momentum;
  g->no_mask = zinc_env_flag("ZINC_TEST_DGC_NO_MASK", 0);
  g->local_clip = e->cfg.dgc_local_clipping;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, g->vel_bytes, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                      (void **)&g->vel, "DGC velocities"));
  ZINC_CHECK(zinc_engine_buffer_alloc(e, g->res_bytes, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                      (void **)&g->own_res, "DGC residuals of the own slices"));
  ZINC_CHECK(zinc_engine_buffer_alloc(e, g->own_bytes_total, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                      (void **)&g->own_bytes, "DGC encoded own slices"));
  ZINC_CHECK(e->dev->ops->fill_zero(e->dev, g->vel, g->vel_bytes, e->stream));
  ZINC_CHECK(e->dev->ops->fill_zero(e->dev, g->own_res, g->res_bytes, e->stream));
  ZINC_CHECK(e->dev->ops->fill_zero(e->dev, g->own_bytes, g->own_bytes_total, e->stream));
  ZINC_CHECK(zinc_mstate_register(e, "dgc.velocity", g->vel, g->vel_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "dgc.own_residual", g->own_res, g->res_bytes, 0));
  zinc_log0(ZINC_LOG_INFO, "DGC: momentum correction with momentum %g and factor masking%s "
            "(SGD runs with momentum 0); velocities and residuals %zu bytes per rank",
            e->cfg.momentum, g->no_mask ? " OFF (ZINC_TEST_DGC_NO_MASK)" : "",
            g->vel_bytes + g->res_bytes);
  return ZINC_OK;
}

static void dgc_free(zinc_engine *e) {
  zinc_dgc *g = dgc_of(e);
  if (!g)
    return;
  if (g->vel)
    zinc_engine_buffer_free(e, g->vel, g->vel_bytes, ZINC_LOC_DEVICE, ZINC_MEM_GRADS);
  if (g->own_res)
    zinc_engine_buffer_free(e, g->own_res, g->res_bytes, ZINC_LOC_DEVICE, ZINC_MEM_GRADS);
  if (g->own_bytes)
    zinc_engine_buffer_free(e, g->own_bytes, g->own_bytes_total, ZINC_LOC_DEVICE,
                            ZINC_MEM_GRADS);
  free(g->vel_off);
  free(g);
  e->rd->priv = NULL;
}

/* u <- u with the elements TOPK slice `bytes` kept (chunk n) set to 0:
 * block b's entries start at b min(k, block), values then uint16
 * indices (kernels/codec.h). */
static void mask_kept(float *u, const void *bytes, zinc_codec c, int64_t n) {
  int64_t entries = zinc_codec_topk_entries(c, n);
  const uint16_t *index = (const uint16_t *)((const char *)bytes + (size_t)entries * 4);
  int64_t per = c.k < c.block ? c.k : c.block;
  for (int64_t j = 0; j < entries; j++)
    u[(j / per) * c.block + index[j]] = 0.0f;
}

zinc_status zinc_dgc_encode_slice(zinc_engine *e, zinc_codec c, int ui, int p, const char *src,
                                  void *dst, void *ef) {
  zinc_dgc *g = dgc_of(e);
  const zinc_unit *un = &e->units[ui];
  int64_t n = un->chunk;
  float *u = g->vel + g->vel_off[ui] + (size_t)p * (size_t)n;
  if (p == e->dp_rank) {
    dst = g->own_bytes + g->bytes_off[ui];
    ef = g->own_res + g->res_off[ui];
  }
  ZINC_CHECK(zinc_engine_sync(e)); /* the host scales u */
  for (int64_t i = 0; i < n; i++)
    u[i] *= g->m;
  ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, u, src, un->dtype, n, 0));
  ZINC_CHECK(e->dev->ops->encode(e->dev, e->stream, c, dst, u, ZINC_F32, n, ef, 0.0f, 0));
  ZINC_CHECK(zinc_engine_sync(e)); /* the host reads the kept indices */
  if (!g->no_mask)
    mask_kept(u, dst, c, n);
  return ZINC_OK;
}

zinc_status zinc_dgc_own_decode(zinc_engine *e, zinc_codec c, int ui, float *dst,
                                int accumulate) {
  zinc_dgc *g = dgc_of(e);
  return e->dev->ops->decode(e->dev, e->stream, c, dst, ZINC_F32, g->own_bytes + g->bytes_off[ui],
                             e->units[ui].chunk, accumulate);
}

/* ------------------------------------------------ local gradient clipping */

int zinc_dgc_clips_locally(const zinc_engine *e) {
  const zinc_dgc *g = dgc_of(e);
  return g && g->local_clip;
}

zinc_status zinc_dgc_local_norm_add(zinc_engine *e, int ui, const char *grad) {
  zinc_dgc *g = dgc_of(e);
  const zinc_unit *u = &e->units[ui];
  if (g->have_coef) { /* a new batch */
    g->have_coef = 0;
    g->sq = 0;
  }
  ZINC_CHECK(zinc_engine_sync(e)); /* the host reads the gradient */
  for (int64_t i = 0; i < u->numel; i++) {
    double x = zinc_load_as_f32(grad, i, u->dtype);
    g->sq += x * x;
  }
  return ZINC_OK;
}

zinc_status zinc_dgc_local_scale(zinc_engine *e, int ui, char *grad) {
  zinc_dgc *g = dgc_of(e);
  const zinc_unit *u = &e->units[ui];
  if (!g->have_coef) {
    double norm = sqrt(g->sq), thr = e->cfg.gradient_clipping / sqrt((double)e->dp_size);
    g->coef = norm > thr ? (float)(thr / (norm + 1e-6)) : 1.0f;
    g->have_coef = 1;
  }
  if (g->coef == 1.0f)
    return ZINC_OK;
  for (int64_t i = 0; i < u->numel; i++)
    zinc_store_from_f32(grad, i, u->dtype, zinc_load_as_f32(grad, i, u->dtype) * g->coef);
  return ZINC_OK;
}

/* ------------------------------------------------------ the table row */

static int selects(const zinc_settings *s) {
  return s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC;
}

/* Top-k itself is the codec transport's (compress.c); this row adds the
 * momentum correction and the local clipping. */
const zinc_reducer zinc_reducer_dgc = {
    .name = "dgc",
    .selects = selects,
    .sizes = state_sizes,
    .init = dgc_init,
    .free = dgc_free,
    .owns_momentum = momentum_on,
    .keeps_grads = momentum_on,
    .holds_window = zinc_dgc_clips_locally,
    .clips_locally = zinc_dgc_clips_locally,
};
