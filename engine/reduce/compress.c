/*
 * compress.c — compressed collectives of the ZeRO engine: the gradient
 * reduce-scatter in another dtype or quantized (communication_data_type,
 * zero_quantized_gradients: qgZ), the stage-3 parameter gather quantized
 * (zero_quantized_weights: qwZ), the error-feedback residuals of the
 * gradients (zeropp_loco_param), and the policy that picks a codec for
 * every pair of ranks. The codecs are kernels/codec.h's, run by the device.
 * (The design's layout puts codecs in comm/; they live in kernels/ because
 * every loop over tensor elements is a kernel there, with its CUDA twin,
 * and the compressed collectives are composed here from the comm's byte
 * all-to-all-v and all-gather, so that comm/ keeps no element arithmetic
 * beyond its sums and every backend gets compression for one new
 * primitive.)
 *
 * Policy (docs/config.md "Compressed communication"), fixed at build:
 *   - gradients: pairs of data-parallel ranks on different nodes use the
 *     quantizing codec (int4 by default: aggressive; or TernGrad's
 *     stochastic ternary, zinc.compression.gradient_codec "terngrad",
 *     seeded per slice by slice_seed); pairs on one node
 *     use communication_data_type's cast, or travel raw in the gradient
 *     dtype (zinc.compression.scope "inter_node", the default). With
 *     scope "all" every pair is quantized. All ranks on one node with
 *     scope inter_node: nothing is quantized, said once at build.
 *   - parameters (stage 3): int8 (mild) when the data-parallel group spans
 *     nodes or scope is "all". An all-gather sends one encoding to every
 *     rank, so there is no per-pair choice; hpZ's in-group gather stays
 *     exact (it is inside a node).
 *
 * Compressed reduce-scatter of one batch of units (the modules of one
 * gradient reduction, in launch order):
 *   1. encode: for every peer p != me, slice p of each unit's gradient
 *      (chunk elements, the unit's dtype) with pair_codec(p), through the
 *      slice's residual when error feedback is on; into the send staging,
 *      peer-major: [p][unit] encoded slices.
 *   2. one all-to-all-v of bytes over the data-parallel comm.
 *   3. retire: for each unit, the owner adds rank 0, 1, ..., N-1's
 *      contributions in fp32 in rank order — its own slice exactly (with
 *      DGC's momentum correction: through its own top-k, engine/reduce/dgc.c),
 *      the others decoded — into the gradient partition (stages 2/3), or into
 *      an f32 scratch cast into its own slot of the gradient buffer
 *      (stages 0/1, where the step reads the reduced chunk there).
 * Reproducible: every decision depends on the layout and the config only,
 * and the adds run in rank order, so compressed runs give the same bits
 * run to run; stages 0-3 give the same bits with gradient_accumulation_steps
 * 1 and fp32 parameters (the same units, codecs and order), qwZ aside
 * (stage 3 only).
 *
 * Error feedback (LoCo, kernels/codec.h): one INT8 residual per (unit,
 * peer p != me) slice: (N-1) x zinc_codec_bytes(INT8, chunk) bytes per
 * unit, about (N-1)/N x (1 + 4/block) bytes per trained element. Reset
 * (zeroed) every zeropp_loco_param.reset_T optimizer steps; saved in
 * checkpoints (engine/checkpoint/ef.c): every rank's bytes as they are,
 * given back bytewise to an engine of the same layout (dp_size, block,
 * every trained unit's shard offset and chunk, every parameter in the same
 * places). Into another layout they
 * are resharded: every saved slice decoded to fp32 and summed per model
 * element over its senders in rank order (E, the error the old ranks
 * carried for that element); in the new layout the lowest rank other than
 * p (rank 0, or rank 1 for p == 0) carries all of E for chunk p of each
 * unit, re-encoded INT8, and the other senders' slots for that chunk are
 * zero. No residuals in the checkpoint: they start at zero.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/grads.h"
#include "engine/reduce/methods.h"
#include "engine/support.h"

static zinc_codec codec_none(void) { return (zinc_codec){ZINC_CODEC_NONE, 0, 0}; }

static zinc_codec cast_codec(int dtype) {
  switch (dtype) {
  case ZINC_F32: return (zinc_codec){ZINC_CODEC_F32, 0, 0};
  case ZINC_BF16: return (zinc_codec){ZINC_CODEC_BF16, 0, 0};
  case ZINC_F16: return (zinc_codec){ZINC_CODEC_F16, 0, 0};
  default: return codec_none();
  }
}

static zinc_codec quant_codec(int bits, int64_t block) {
  int kind = bits == 8 ? ZINC_CODEC_INT8 : bits == 4 ? ZINC_CODEC_INT4 : ZINC_CODEC_SIGN1;
  return (zinc_codec){kind, (int)block, 0};
}

double zinc_compress_dgc_density(const zinc_settings *s, int64_t step) {
  double d = s->dgc_density;
  if (step >= 0 && step < s->dgc_warmup_steps) {
    int64_t stage = 4 * step / s->dgc_warmup_steps; /* 0..3 */
    double w = 0.25;
    for (int64_t i = 0; i < stage; i++)
      w *= 0.25;
    d = w > d ? w : d;
  }
  return d;
}

/* The gradient codec of this reduction: DGC's k follows the density
 * schedule of the optimizer step (the same on every rank). */
static zinc_codec grad_codec(const zinc_engine *e) {
  zinc_codec c = e->rd->cx_grad;
  if (c.kind == ZINC_CODEC_TOPK)
    c.k = zinc_codec_topk_k(zinc_compress_dgc_density(&e->cfg, e->step), c.block);
  return c;
}

static int node_of(const zinc_engine *e, int p) {
  return e->dp->node_of ? e->dp->node_of[p] : 0;
}

/* The codec of gradient slices between this rank and peer p in
 * reduction r (whose cx_codec was fixed when it was encoded). NONE: raw
 * bytes of the unit's dtype. */
static zinc_codec pair_codec(const zinc_engine *e, const zinc_reduction *r, int p) {
  if (e->rd->cx_local_raw && node_of(e, p) == node_of(e, e->dp_rank))
    return e->rd->cx_local;
  return r->cx_codec;
}

static size_t slice_bytes(zinc_codec c, int dtype, int64_t n) {
  if (c.kind == ZINC_CODEC_NONE)
    return (size_t)zinc_round_up((int64_t)zinc_dtype_size(dtype) * n, 16);
  return zinc_codec_bytes(c, n);
}

static int ef_on(const zinc_engine *e, zinc_codec c) {
  return e->rd->cx_ef != NULL && (zinc_codec_is_block(c) || c.kind == ZINC_CODEC_TOPK);
}

size_t zinc_compress_ef_slice_bytes(zinc_codec grad, int64_t chunk) {
  return zinc_codec_ef_bytes(grad, chunk);
}

/* The residuals zinc_compress_init allocates: (N - 1) slices of each
 * trained unit's chunk, INT8 blocks (LoCo: about (N - 1) / N x (1 + 4 /
 * block) bytes per trained element) or fp32 (DGC: (N - 1) / N x 4 bytes),
 * gradient memory on the device. Without the node map (the estimator has
 * none) they count whenever qgZ and LoCo (or DGC's residual) are on over
 * several ranks, as when the group spans nodes (with
 * zinc.compression.scope "inter_node" on one node the engine quantizes
 * nothing and keeps none). The stage 0/1 scratch is not counted. */
void zinc_compress_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  const zinc_settings *s = &e->cfg;
  int dgc = s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC;
  if (e->dp_size < 2 || !s->zero_quantized_gradients || s->stage < 1 ||
      !(dgc ? s->dgc_residual : s->loco_enabled))
    return;
  uint64_t total = 0;
  zinc_codec c = {dgc ? ZINC_CODEC_TOPK : ZINC_CODEC_INT8, (int)s->compress_block_size, 0};
  for (int ui = 0; ui < e->ntrain_units; ui++)
    total += (uint64_t)(e->dp_size - 1) * zinc_compress_ef_slice_bytes(c, e->units[ui].chunk);
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += total ? total : 16;
}

/* The seed of a stochastic codec's draws (TERN2) for the slice of unit ui
 * this rank sends to peer p: a mix of (optimizer step, micro-step, unit,
 * sender, receiver), so every slice of every micro-step draws afresh,
 * two senders of one slice draw independently (their rounding noise
 * averages out in the owner's sum instead of adding up), and a run, a
 * resumed run (both counters are in checkpoints) and another stage (the
 * same units) draw the same bits. */
static uint64_t mix64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}

static uint64_t slice_seed(const zinc_engine *e, int ui, int p) {
  uint64_t h = mix64(0x7465726e67726164ull, (uint64_t)e->step);
  h = mix64(h, (uint64_t)e->micro_step);
  h = mix64(h, (uint64_t)ui);
  h = mix64(h, (uint64_t)e->dp_rank);
  return mix64(h, (uint64_t)p);
}

/* The residual slot of (unit ui, peer p != me). */
static void *ef_slice(const zinc_engine *e, int ui, int p) {
  const zinc_unit *u = &e->units[ui];
  size_t one = zinc_compress_ef_slice_bytes(e->rd->cx_grad, u->chunk);
  int slot = p < e->dp_rank ? p : p - 1;
  return (char *)e->rd->cx_ef + e->rd->cx_ef_off[ui] + (size_t)slot * one;
}

/* ---------------------------------------------------------------- build */

zinc_status zinc_compress_init(zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  e->rd->cx_grad = e->rd->cx_local = e->rd->cx_weight = codec_none();
  e->rd->cx_local_raw = 0;
  int n = e->dp_size, nnodes = e->dp->nnodes > 0 ? e->dp->nnodes : 1;
  int all = s->compress_scope == ZINC_COMPRESS_ALL;
  if (n == 1)
    return ZINC_OK;
  /* the cast of communication_data_type, needed when it differs from a
   * trained unit's dtype */
  zinc_codec cast = codec_none();
  if (s->communication_data_type >= 0)
    for (int ui = 0; ui < e->ntrain_units; ui++)
      if ((int)e->units[ui].dtype != s->communication_data_type)
        cast = cast_codec(s->communication_data_type);
  int qgz = s->zero_quantized_gradients && s->stage >= 1 &&
            s->compress_gradient_codec != ZINC_GRAD_CODEC_POWERSGD; /* powersgd.c's */
  if (qgz && nnodes == 1 && !all)
    zinc_log0(ZINC_LOG_WARN, "zero_quantized_gradients: all %d data-parallel ranks are on one "
              "node and zinc.compression.scope is \"inter_node\", so no gradient is quantized "
              "(nothing crosses a node); set zinc.compression.scope to \"all\" to quantize "
              "anyway", n);
  int dgc = s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC;
  if (qgz && (nnodes > 1 || all)) {
    e->rd->cx_grad = s->compress_gradient_codec == ZINC_GRAD_CODEC_TERNGRAD
                     ? (zinc_codec){ZINC_CODEC_TERN2, (int)s->compress_block_size, 0}
                 : dgc ? (zinc_codec){ZINC_CODEC_TOPK, (int)s->compress_block_size,
                                      zinc_codec_topk_k(s->dgc_density, (int)s->compress_block_size)}
                     : quant_codec(s->compress_gradient_bits, s->compress_block_size);
    e->rd->cx_local = cast;
    e->rd->cx_local_raw = !all;
  } else {
    e->rd->cx_grad = cast;
  }
  if (s->zero_quantized_weights && s->stage == 3 && (nnodes > 1 || all))
    e->rd->cx_weight = quant_codec(s->compress_weight_bits, s->compress_block_size);
  else if (s->zero_quantized_weights && s->stage == 3)
    zinc_log0(ZINC_LOG_WARN, "zero_quantized_weights: all %d data-parallel ranks are on one "
              "node and zinc.compression.scope is \"inter_node\", so parameters are gathered "
              "exactly; set zinc.compression.scope to \"all\" to quantize anyway", n);

  int residual = dgc ? s->dgc_residual : s->loco_enabled;
  if (residual && (zinc_codec_is_block(e->rd->cx_grad) || e->rd->cx_grad.kind == ZINC_CODEC_TOPK)) {
    size_t total = 0;
    ZINC_CHECK(zinc_calloc((void **)&e->rd->cx_ef_off, (size_t)e->ntrain_units + 1,
                           sizeof *e->rd->cx_ef_off, "error-feedback offsets"));
    for (int ui = 0; ui < e->ntrain_units; ui++) {
      e->rd->cx_ef_off[ui] = total;
      total += (size_t)(n - 1) * zinc_compress_ef_slice_bytes(e->rd->cx_grad, e->units[ui].chunk);
    }
    e->rd->cx_ef_bytes = total;
    ZINC_CHECK(zinc_engine_buffer_alloc(e, total ? total : 16, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                        &e->rd->cx_ef, "gradient error-feedback residuals"));
    ZINC_CHECK(e->dev->ops->fill_zero(e->dev, e->rd->cx_ef, total ? total : 16, e->stream));
  }
  if (e->rd->cx_grad.kind == ZINC_CODEC_TOPK)
    zinc_log0(ZINC_LOG_INFO, "DGC: top-k of every %d gradient elements at density %g (k = %d "
              "after %lld warm-up steps), %s", e->rd->cx_grad.block, s->dgc_density, e->rd->cx_grad.k,
              (long long)s->dgc_warmup_steps,
              e->rd->cx_ef ? "the unsent values kept in an fp32 residual"
                       : "the unsent values dropped (zinc.compression.dgc.residual false)");
  if (e->rd->cx_grad.kind != ZINC_CODEC_NONE || e->rd->cx_weight.kind != ZINC_CODEC_NONE)
    zinc_log0(ZINC_LOG_INFO, "compressed communication over %d ranks on %d node(s): gradients "
              "%s across nodes, %s inside a node%s; stage-3 parameters %s",
              n, nnodes, zinc_codec_name(e->rd->cx_grad),
              e->rd->cx_local_raw ? (e->rd->cx_local.kind ? zinc_codec_name(e->rd->cx_local) : "raw")
                              : zinc_codec_name(e->rd->cx_grad),
              e->rd->cx_ef ? " with error feedback" : "", zinc_codec_name(e->rd->cx_weight));
  return ZINC_OK;
}

void zinc_compress_free(zinc_engine *e) {
  if (e->rd->cx_ef)
    zinc_engine_buffer_free(e, e->rd->cx_ef, e->rd->cx_ef_bytes ? e->rd->cx_ef_bytes : 16, ZINC_LOC_DEVICE,
                            ZINC_MEM_GRADS);
  e->rd->cx_ef = NULL;
  free(e->rd->cx_ef_off);
  e->rd->cx_ef_off = NULL;
  e->rd->cx_ef_bytes = 0;
}

zinc_status zinc_compress_step_end(zinc_engine *e) {
  if (!e->rd->cx_ef || e->rd->cx_grad.kind == ZINC_CODEC_TOPK || e->cfg.loco_reset_T <= 0 ||
      e->step % e->cfg.loco_reset_T != 0)
    return ZINC_OK;
  return e->dev->ops->fill_zero(e->dev, e->rd->cx_ef, e->rd->cx_ef_bytes ? e->rd->cx_ef_bytes : 16,
                                e->stream);
}

/* ------------------------------------------------- the reduce-scatter */

/* The units of reduction r, in launch order, through fn. */
typedef zinc_status (*unit_fn)(zinc_engine *e, zinc_reduction *r, int ui, const char *grad);

static zinc_status for_units(zinc_engine *e, zinc_reduction *r, unit_fn fn) {
  for (int i = 0; i < r->nmodules; i++) {
    zinc_module *m = e->modules[e->launched_modules[r->first_module + i]];
    for (int s = 0; s < m->nsegs; s++) {
      const zinc_segment *seg = &m->segs[s];
      for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits; ui++)
        ZINC_CHECK(fn(e, r, ui, zinc_unit_ptr(seg->grad, &e->units[ui])));
    }
  }
  return ZINC_OK;
}

static zinc_status size_unit(zinc_engine *e, zinc_reduction *r, int ui, const char *grad) {
  const zinc_unit *u = &e->units[ui];
  for (int p = 0; p < e->dp_size; p++)
    if (p != e->dp_rank)
      r->cx_counts[p] += slice_bytes(pair_codec(e, r, p), u->dtype, u->chunk);
  return ZINC_OK;
}

static zinc_status encode_unit(zinc_engine *e, zinc_reduction *r, int ui, const char *grad) {
  const zinc_unit *u = &e->units[ui];
  size_t es = zinc_dtype_size(u->dtype);
  for (int p = 0; p < e->dp_size; p++) {
    const char *src = grad + (size_t)p * (size_t)u->chunk * es;
    if (p == e->dp_rank) {
      if (zinc_dgc_corrects(e)) /* momentum correction: the own slice through top-k too */
        ZINC_CHECK(zinc_dgc_encode_slice(e, r->cx_codec, ui, p, src, NULL, NULL));
      continue;
    }
    zinc_codec c = pair_codec(e, r, p);
    char *dst = (char *)r->cx_send + r->cx_cursor[p];
    size_t b = slice_bytes(c, u->dtype, u->chunk);
    if (zinc_dgc_corrects(e))
      ZINC_CHECK(zinc_dgc_encode_slice(e, c, ui, p, src, dst, ef_slice(e, ui, p)));
    else if (c.kind == ZINC_CODEC_NONE)
      ZINC_CHECK(e->dev->ops->copy(e->dev, dst, src, (size_t)u->chunk * es, e->stream));
    else
      ZINC_CHECK(e->dev->ops->encode(e->dev, e->stream, c, dst, src, u->dtype, u->chunk,
                                     ef_on(e, c) ? ef_slice(e, ui, p) : NULL,
                                     c.kind == ZINC_CODEC_TOPK ? 0.0f
                                                               : (float)e->cfg.loco_err_beta,
                                     slice_seed(e, ui, p)));
    r->cx_cursor[p] += b;
  }
  return ZINC_OK;
}

/* DGC's local clipping (dgc.c): the batch is the window's whole local
 * gradient */
static zinc_status local_norm_unit(zinc_engine *e, zinc_reduction *r, int ui, const char *grad) {
  (void)r;
  return zinc_dgc_local_norm_add(e, ui, grad);
}

static zinc_status local_scale_unit(zinc_engine *e, zinc_reduction *r, int ui, const char *grad) {
  (void)r;
  return zinc_dgc_local_scale(e, ui, (char *)grad);
}

static void release_staging(zinc_engine *e, zinc_reduction *r) {
  if (r->cx_send)
    zinc_engine_buffer_free(e, r->cx_send, r->cx_send_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  if (r->cx_recv)
    zinc_engine_buffer_free(e, r->cx_recv, r->cx_send_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  free(r->cx_counts);
  r->cx_send = r->cx_recv = NULL;
  r->cx_counts = NULL;
  r->cx_cursor = NULL;
  r->cx_send_bytes = 0;
}

void zinc_compress_reduction_free(zinc_engine *e, zinc_reduction *r) { release_staging(e, r); }

int zinc_compress_grads(const zinc_engine *e) {
  return e->rd && e->rd->cx_grad.kind != ZINC_CODEC_NONE;
}

/* Encode reduction r's units and describe its all-to-all-v in *coll.
 * Counts are symmetric (the pair codec is), so what this rank sends to p
 * is what it receives from p. */
zinc_status zinc_compress_reduce_prepare(zinc_engine *e, zinc_reduction *r, zinc_coll *coll) {
  int n = e->dp_size;
  r->cx_codec = grad_codec(e);
  /* counts, displs, rcounts, rdispls, cursor */
  ZINC_CHECK(zinc_calloc((void **)&r->cx_counts, 5 * (size_t)n, sizeof(size_t),
                         "compressed reduction plan"));
  size_t *displs = r->cx_counts + n, *cursor = r->cx_counts + 4 * (size_t)n;
  r->cx_cursor = cursor;
  zinc_status st = for_units(e, r, size_unit);
  size_t total = 0;
  for (int p = 0; p < n; p++) {
    displs[p] = total;
    total += r->cx_counts[p];
  }
  r->cx_send_bytes = total ? total : 16;
  if (st == ZINC_OK)
    st = zinc_engine_buffer_alloc(e, r->cx_send_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                  &r->cx_send, "compressed gradients to send");
  if (st == ZINC_OK)
    st = zinc_engine_buffer_alloc(e, r->cx_send_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                  &r->cx_recv, "compressed gradients received");
  if (st == ZINC_OK && zinc_dgc_clips_locally(e))
    st = for_units(e, r, local_norm_unit);
  if (st == ZINC_OK && zinc_dgc_clips_locally(e))
    st = for_units(e, r, local_scale_unit);
  if (st == ZINC_OK) {
    memcpy(cursor, displs, (size_t)n * sizeof *cursor);
    st = for_units(e, r, encode_unit);
  }
  /* no host sync: the comm's batch runs after the encoding queued on the
   * compute stream (comm.h, "Streams") */
  if (st != ZINC_OK) {
    release_staging(e, r);
    return zinc_error_wrap(st, "compressing gradients");
  }
  memcpy(r->cx_counts + 2 * n, r->cx_counts, (size_t)n * sizeof(size_t));
  memcpy(r->cx_counts + 3 * n, displs, (size_t)n * sizeof(size_t));
  /* what the plain reduce-scatter would have put on the wire from here */
  uint64_t logical = 0;
  for (int i = 0; i < r->nmodules; i++) {
    zinc_module *m = e->modules[e->launched_modules[r->first_module + i]];
    for (int s = 0; s < m->nsegs; s++)
      for (int ui = m->segs[s].first_unit;
           !m->segs[s].frozen && ui < m->segs[s].first_unit + m->segs[s].nunits; ui++)
        logical += (uint64_t)(n - 1) * (uint64_t)e->units[ui].chunk *
                   zinc_dtype_size(e->units[ui].dtype);
  }
  *coll = (zinc_coll){.kind = ZINC_COLL_ALLTOALLV,
                      .send = r->cx_send,
                      .recv = r->cx_recv,
                      .count = r->cx_counts[e->dp_rank],
                      .dtype = ZINC_DT_U8,
                      .counts = r->cx_counts,
                      .displs = displs,
                      .rcounts = r->cx_counts + 2 * n,
                      .rdispls = r->cx_counts + 3 * n,
                      .logical_bytes = logical,
                      .codec_name = zinc_codec_name(r->cx_codec),
                      .logical_kind = ZINC_COLL_REDUCE_SCATTER};
  /* the cursor now walks the received bytes */
  memcpy(cursor, displs, (size_t)n * sizeof *cursor);
  return ZINC_OK;
}

/* dst (f32, chunk elements) = the sum over ranks 0..N-1 in rank order of
 * unit ui's slice for this rank; with `accumulate`, dst += each in turn. */
static zinc_status sum_unit(zinc_engine *e, zinc_reduction *r, int ui, const char *grad,
                            float *dst, int accumulate) {
  const zinc_unit *u = &e->units[ui];
  size_t es = zinc_dtype_size(u->dtype);
  for (int p = 0; p < e->dp_size; p++) {
    int first = p == 0 && !accumulate;
    if (p == e->dp_rank && zinc_dgc_corrects(e)) {
      ZINC_CHECK(zinc_dgc_own_decode(e, r->cx_codec, ui, dst, !first));
      continue;
    }
    if (p == e->dp_rank) {
      ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, dst,
                                             grad + (size_t)p * (size_t)u->chunk * es, u->dtype,
                                             u->chunk, first));
      continue;
    }
    zinc_codec c = pair_codec(e, r, p);
    const char *src = (const char *)r->cx_recv + r->cx_cursor[p];
    if (c.kind == ZINC_CODEC_NONE)
      ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, dst, src, u->dtype, u->chunk,
                                             first));
    else
      ZINC_CHECK(e->dev->ops->decode(e->dev, e->stream, c, dst, ZINC_F32, src, u->chunk,
                                     !first));
    r->cx_cursor[p] += slice_bytes(c, u->dtype, u->chunk);
  }
  return ZINC_OK;
}

zinc_status zinc_compress_reduce_unit(zinc_engine *e, zinc_reduction *r, int ui,
                                      const char *grad, float *partition, int overwrite) {
  const zinc_unit *u = &e->units[ui];
  if (partition)
    return sum_unit(e, r, ui, grad, partition, !overwrite);
  /* stages 0/1: the reduced chunk goes to this rank's own slot, in the
   * unit's dtype */
  char *own = (char *)grad + (size_t)e->dp_rank * (size_t)u->chunk * zinc_dtype_size(u->dtype);
  ZINC_CHECK(sum_unit(e, r, ui, grad, e->rd->cx_scratch, 0));
  return e->dev->ops->cast(e->dev, e->stream, own, u->dtype, e->rd->cx_scratch, ZINC_F32, u->chunk);
}

zinc_status zinc_compress_scratch(zinc_engine *e) {
  if (e->rd->cx_grad.kind == ZINC_CODEC_NONE || e->cfg.stage >= 2)
    return ZINC_OK;
  int64_t most = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++)
    if (e->units[ui].chunk > most)
      most = e->units[ui].chunk;
  e->rd->cx_scratch_bytes = (size_t)(most ? most : 4) * 4;
  return zinc_engine_buffer_alloc(e, e->rd->cx_scratch_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                  (void **)&e->rd->cx_scratch, "reduced-gradient scratch");
}

void zinc_compress_scratch_free(zinc_engine *e) {
  if (e->rd->cx_scratch)
    zinc_engine_buffer_free(e, e->rd->cx_scratch, e->rd->cx_scratch_bytes, ZINC_LOC_DEVICE,
                            ZINC_MEM_BUFFERS);
  e->rd->cx_scratch = NULL;
}

/* ------------------------------------------------- the parameter gather */

/* The weight codec; NONE before zinc_reduce_init (the estimator's bare
 * engine sizes the gather without one). */
static zinc_codec weight_codec(const zinc_engine *e) {
  return e->rd ? e->rd->cx_weight : codec_none();
}

int zinc_compress_weights(const zinc_engine *e) { return weight_codec(e).kind != ZINC_CODEC_NONE; }

const char *zinc_compress_weight_codec_name(const zinc_engine *e) {
  return zinc_codec_name(weight_codec(e));
}

size_t zinc_compress_weight_bytes(const zinc_engine *e, int64_t chunk) {
  return zinc_codec_bytes(weight_codec(e), chunk);
}

zinc_status zinc_compress_weight_encode(zinc_engine *e, void *dst, const void *src, int dtype,
                                        int64_t chunk) {
  return e->dev->ops->encode(e->dev, e->stream, e->rd->cx_weight, dst, src, dtype, chunk, NULL, 0.0f,
                             0);
}

zinc_status zinc_compress_weight_decode(zinc_engine *e, void *dst, int dtype, const void *src,
                                        int64_t chunk) {
  return e->dev->ops->decode(e->dev, e->stream, e->rd->cx_weight, dst, dtype, src, chunk, 0);
}
