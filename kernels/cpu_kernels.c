/*
 * cpu_kernels.c — argument checks, instruction-set choice and the split of
 * each kernel over the thread pool; the inner loops live in
 * cpu_kernels_{scalar,avx2,avx512}.c.
 *
 * Splits are static (zinc_threadpool_split): the optimizers, casts and
 * accumulation are elementwise, so any split gives the same bits. The sum
 * of squares and Lamb's UPDATE (which returns sums of squares) are split
 * over whole ZINC_SUMSQ_BLOCK blocks: each block's sum is computed
 * once into a table, then every chunk adds its blocks in order on the
 * calling thread — the canonical order, whatever the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "kernels/cpu_kernels.h"
#include "kernels/cpu_kernels_isa.h"

/* Elements per unit of work handed to a thread: large enough that waking a
 * thread (microseconds) is small beside the pass over the unit. */
#define KERNEL_GRAIN 16384
#define SUMSQ_GRAIN_BLOCKS (KERNEL_GRAIN / ZINC_SUMSQ_BLOCK)
/* Block sums kept on the stack before falling back to the heap. */
#define SUMSQ_STACK_BLOCKS 512

/* ------------------------------------------------------------- dispatch */

/* Every kernel call checks its instruction set, so the check must not run
 * cpuid (a VM exit under a hypervisor, microseconds): __builtin_cpu_supports
 * reads what libgcc/compiler-rt found once at start-up. clang before 16
 * does not know "f16c"; every CPU with AVX2 has F16C. */
static int cpu_has_f16c(void) {
#if defined(__clang__) && __clang_major__ < 16
  return __builtin_cpu_supports("avx2");
#else
  return __builtin_cpu_supports("f16c");
#endif
}

int zinc_cpu_isa_supported(zinc_cpu_isa isa) {
  switch (isa) {
  case ZINC_CPU_ISA_SCALAR:
    return 1;
#if defined(__x86_64__)
  case ZINC_CPU_ISA_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  case ZINC_CPU_ISA_AVX512:
    return __builtin_cpu_supports("avx512f") && zinc_cpu_isa_supported(ZINC_CPU_ISA_AVX2);
#endif
  default:
    return 0;
  }
}

const char *zinc_cpu_isa_name(zinc_cpu_isa isa) {
  switch (isa) {
  case ZINC_CPU_ISA_SCALAR:
    return "scalar";
  case ZINC_CPU_ISA_AVX2:
    return "avx2";
  case ZINC_CPU_ISA_AVX512:
    return "avx512";
  default:
    return "unknown";
  }
}

zinc_cpu_isa zinc_cpu_isa_select(void) {
  zinc_cpu_isa best = ZINC_CPU_ISA_SCALAR;
  for (int i = ZINC_CPU_ISA_N - 1; i > 0; i--)
    if (zinc_cpu_isa_supported((zinc_cpu_isa)i)) {
      best = (zinc_cpu_isa)i;
      break;
    }
  const char *names[ZINC_CPU_ISA_N];
  for (int i = 0; i < ZINC_CPU_ISA_N; i++)
    names[i] = zinc_cpu_isa_name((zinc_cpu_isa)i);
  int asked = zinc_env_choice("ZINC_CPU_ISA", names, ZINC_CPU_ISA_N, (int)best);
  if (asked <= (int)best)
    return (zinc_cpu_isa)asked;
  zinc_log(ZINC_LOG_WARN, "ZINC_CPU_ISA=%s: this CPU cannot run it; using %s",
           zinc_env_str("ZINC_CPU_ISA"), zinc_cpu_isa_name(best));
  return best;
}

zinc_status zinc_cpu_isa_table(zinc_cpu_isa isa, const char *kernel,
                               const zinc_cpu_isa_ops **out) {
  if (!zinc_cpu_isa_supported(isa))
    return zinc_error(ZINC_ERR_UNSUPPORTED,
                      "cpu %s: instruction set %s (%d) is not available on this CPU; "
                      "use zinc_cpu_isa_select()", kernel, zinc_cpu_isa_name(isa), (int)isa);
  switch (isa) {
#if defined(__x86_64__)
  case ZINC_CPU_ISA_AVX512:
    *out = &zinc_cpu_ops_avx512;
    break;
  case ZINC_CPU_ISA_AVX2:
    *out = &zinc_cpu_ops_avx2;
    break;
#endif
  default:
    *out = &zinc_cpu_ops_scalar;
  }
  return ZINC_OK;
}

static int dtype_ok(int dt) { return dt == ZINC_F32 || dt == ZINC_BF16 || dt == ZINC_F16; }
/* Master and state slots: fp32 or bf16 (zinc_opt_seg). */
static int storage_ok(int dt) { return dt == ZINC_F32 || dt == ZINC_BF16; }
static int rounding_ok(const zinc_opt_coef *c) {
  return c->bf16_rounding == ZINC_ROUND_NEAREST_EVEN || c->bf16_rounding == ZINC_ROUND_STOCHASTIC;
}
static size_t dtype_bytes(int dt) { return dt == ZINC_F32 ? 4 : 2; }

/* ------------------------------------------------------------ optimizers */

typedef struct {
  const zinc_cpu_isa_ops *ops;
  const zinc_opt_coef *coefs;
  const zinc_opt_seg *segs;
  int nseg;
  int kind, pass;
  double *block_sums;       /* Lamb UPDATE: (2 * total blocks), (weights, update)
                               per block, segment order then block order */
} optim_job;

static float *offset_f32(float *p, int64_t lo) { return p ? p + lo : NULL; }

/* Element lo of a slot of dtype dt (NULL stays NULL). */
static void *offset_dt(void *p, int dt, int64_t lo) {
  return p ? (char *)p + (size_t)lo * dtype_bytes(dt) : NULL;
}

/* A segment whose master or state slots are stored in bf16. */
static int seg_bf16(const zinc_opt_seg *g) {
  return g->master_dtype != ZINC_F32 || g->state_dtype != ZINC_F32;
}

/* Elements [lo, hi) of segment g with a slot in bf16, every pass but Lamb's
 * UPDATE. */
static void optim_span_st(const optim_job *j, const zinc_opt_seg *g, int64_t lo, int64_t hi) {
  const zinc_opt_coef *c = &j->coefs[g->coef];
  const zinc_opt_store st = zinc_opt_store_of(c, g->master_dtype, g->state_dtype);
  void *p = offset_dt(g->master, g->master_dtype, lo);
  void *m = offset_dt(g->exp_avg, g->state_dtype, lo);
  void *v = offset_dt(g->exp_avg_sq, g->state_dtype, lo);
  const void *grad = offset_dt((void *)g->grad, g->grad_dtype, lo);
  void *out = offset_dt(g->param_out, g->param_dtype, lo);
  const int64_t n = hi - lo, idx0 = g->global_offset + lo;
  switch (j->kind) {
  case ZINC_OPT_ADAM:
    j->ops->adam_st(c, g->decay, &st, p, m, v, grad, g->grad_dtype, out, g->param_dtype, idx0,
                    n);
    break;
  case ZINC_OPT_LAMB: /* APPLY */
    j->ops->lamb_apply_st(c, g->decay, g->lamb_ratio, &st, p, m, v, out, g->param_dtype, idx0,
                          n);
    break;
  case ZINC_OPT_LION:
    j->ops->lion_st(c, g->decay, &st, p, m, grad, g->grad_dtype, out, g->param_dtype, idx0, n);
    break;
  case ZINC_OPT_ADAGRAD:
    j->ops->adagrad_st(c, g->decay, &st, p, v, grad, g->grad_dtype, out, g->param_dtype, idx0,
                       n);
    break;
  case ZINC_OPT_SGD:
    j->ops->sgd_st(c, g->decay, &st, p, c->momentum != 0.0f ? m : NULL, grad, g->grad_dtype,
                   out, g->param_dtype, idx0, n);
    break;
  }
}

/* Elements [lo, hi) of segment g, every pass but Lamb's UPDATE. A span
 * over bf16 slots is cut where the global index crosses a multiple of 2^32,
 * so that the draws of each piece share their upper index half (the SIMD
 * loops count on it). */
static void optim_span(const optim_job *j, const zinc_opt_seg *g, int64_t lo, int64_t hi) {
  if (seg_bf16(g)) {
    while (lo < hi) {
      int64_t next = (int64_t)((((uint64_t)(g->global_offset + lo) >> 32) + 1) << 32) -
                     g->global_offset;
      int64_t end = next < hi ? next : hi;
      optim_span_st(j, g, lo, end);
      lo = end;
    }
    return;
  }
  const zinc_opt_coef *c = &j->coefs[g->coef];
  float *p = g->master + lo, *m = offset_f32(g->exp_avg, lo), *v = offset_f32(g->exp_avg_sq, lo);
  const void *grad =
      g->grad ? (const char *)g->grad + (size_t)lo * dtype_bytes(g->grad_dtype) : NULL;
  void *out =
      g->param_out ? (char *)g->param_out + (size_t)lo * dtype_bytes(g->param_dtype) : NULL;
  int64_t n = hi - lo;
  switch (j->kind) {
  case ZINC_OPT_ADAM:
    j->ops->adam(c, g->decay, p, m, v, grad, g->grad_dtype, out, g->param_dtype, n);
    break;
  case ZINC_OPT_LAMB: /* APPLY */
    j->ops->lamb_apply(c, g->decay, g->lamb_ratio, p, m, v, out, g->param_dtype, n);
    break;
  case ZINC_OPT_LION:
    j->ops->lion(c, g->decay, p, m, grad, g->grad_dtype, out, g->param_dtype, n);
    break;
  case ZINC_OPT_ADAGRAD:
    j->ops->adagrad(c, g->decay, p, v, grad, g->grad_dtype, out, g->param_dtype, n);
    break;
  case ZINC_OPT_SGD:
    j->ops->sgd(c, g->decay, p, c->momentum != 0.0f ? m : NULL, grad, g->grad_dtype, out,
                g->param_dtype, n);
    break;
  }
}

/* Elements [begin, end) of the concatenation of the segments. */
static void optim_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const optim_job *j = ctx;
  int64_t base = 0;
  for (int s = 0; s < j->nseg && base < end; s++) {
    const zinc_opt_seg *g = &j->segs[s];
    int64_t lo = begin > base ? begin - base : 0;
    int64_t hi = end - base < g->n ? end - base : g->n;
    base += g->n;
    if (lo < hi)
      optim_span(j, g, lo, hi);
  }
}

static int64_t blocks_of(int64_t n) { return (n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK; }

/* Lamb UPDATE over blocks [begin, end) of the concatenation of every
 * segment's ZINC_SUMSQ_BLOCK blocks: the moments move and each block's sums
 * of squares of the weights and of the update come back as
 * zinc_sumsq_block_ref would give them. */
static void lamb_update_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const optim_job *j = ctx;
  int64_t base = 0;
  for (int s = 0; s < j->nseg && base < end; s++) {
    const zinc_opt_seg *g = &j->segs[s];
    int64_t nb = blocks_of(g->n);
    int64_t lo = begin > base ? begin - base : 0;
    int64_t hi = end - base < nb ? end - base : nb;
    for (int64_t b = lo; b < hi; b++) {
      int64_t first = b * ZINC_SUMSQ_BLOCK;
      int64_t len = g->n - first < ZINC_SUMSQ_BLOCK ? g->n - first : ZINC_SUMSQ_BLOCK;
      if (seg_bf16(g)) {
        const zinc_opt_coef *c = &j->coefs[g->coef];
        const zinc_opt_store st = zinc_opt_store_of(c, g->master_dtype, g->state_dtype);
        j->ops->lamb_update_st(c, g->decay, &st, offset_dt(g->master, g->master_dtype, first),
                               offset_dt(g->exp_avg, g->state_dtype, first),
                               offset_dt(g->exp_avg_sq, g->state_dtype, first),
                               offset_dt((void *)g->grad, g->grad_dtype, first), g->grad_dtype,
                               g->global_offset + first, len, &j->block_sums[2 * (base + b)]);
        continue;
      }
      j->ops->lamb_update(&j->coefs[g->coef], g->decay, g->master + first, g->exp_avg + first,
                          g->exp_avg_sq + first,
                          (const char *)g->grad + (size_t)first * dtype_bytes(g->grad_dtype),
                          g->grad_dtype, len, &j->block_sums[2 * (base + b)]);
    }
    base += nb;
  }
}

/* Which arrays a segment of this kind and pass needs (n > 0). */
static int optim_needs(int kind, int pass, const zinc_opt_coef *c, int *m, int *v) {
  *m = kind == ZINC_OPT_ADAM || kind == ZINC_OPT_LAMB || kind == ZINC_OPT_LION ||
       (kind == ZINC_OPT_SGD && c->momentum != 0.0f);
  *v = kind == ZINC_OPT_ADAM || kind == ZINC_OPT_LAMB || kind == ZINC_OPT_ADAGRAD;
  return !(kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_APPLY); /* the gradient */
}

static zinc_status lamb_update_run(zinc_threadpool *pool, optim_job *job, double *norms) {
  int64_t total = 0;
  for (int s = 0; s < job->nseg; s++)
    total += blocks_of(job->segs[s].n);
  double stack_sums[2 * SUMSQ_STACK_BLOCKS];
  job->block_sums = stack_sums;
  if (total > SUMSQ_STACK_BLOCKS)
    ZINC_CHECK(zinc_calloc((void **)&job->block_sums, (size_t)(2 * total), sizeof(double),
                           "Lamb norm block sums"));
  zinc_threadpool_for(pool, total, SUMSQ_GRAIN_BLOCKS, lamb_update_part, job);
  int64_t b = 0;
  for (int s = 0; s < job->nseg; s++) { /* block order, from 0.0: the canonical sum */
    double w = 0.0, u = 0.0;
    for (int64_t k = blocks_of(job->segs[s].n); k > 0; k--, b++) {
      w += job->block_sums[2 * b];
      u += job->block_sums[2 * b + 1];
    }
    norms[2 * s] = w;
    norms[2 * s + 1] = u;
  }
  if (job->block_sums != stack_sums)
    free(job->block_sums);
  return ZINC_OK;
}

zinc_status zinc_cpu_optim(zinc_threadpool *pool, zinc_cpu_isa isa,
                           const zinc_opt_coef *coefs, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms) {
  if (!coefs || ncoef < 1 || nseg < 0 || (nseg > 0 && !segs))
    return zinc_error(ZINC_ERR_INVALID, "cpu optimizer: %d coefficients at %p, %d segments at %p",
                      ncoef, (const void *)coefs, nseg, (const void *)segs);
  const int kind = coefs[0].kind;
  const char *name = zinc_opt_kind_str(kind);
  if (kind < 0 || kind >= ZINC_OPT_KINDS)
    return zinc_error(ZINC_ERR_INVALID, "cpu optimizer: unknown optimizer kind %d", kind);
  for (int k = 0; k < ncoef; k++)
    if (coefs[k].kind != kind)
      return zinc_error(ZINC_ERR_INVALID, "cpu optimizer: coefficient %d is for %s, "
                        "coefficient 0 for %s; one pass runs one optimizer", k,
                        zinc_opt_kind_str(coefs[k].kind), name);
  if (pass != ZINC_OPT_PASS_UPDATE && !(pass == ZINC_OPT_PASS_APPLY && kind == ZINC_OPT_LAMB))
    return zinc_error(ZINC_ERR_INVALID, "cpu %s: pass %d; %s", name, pass,
                      kind == ZINC_OPT_LAMB ? "UPDATE (0) or APPLY (1)" : "one UPDATE pass (0)");
  const int lamb_update = kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_UPDATE;
  if (lamb_update && nseg > 0 && !norms)
    return zinc_error(ZINC_ERR_INVALID, "cpu Lamb UPDATE: norms is NULL; it receives two sums "
                      "of squares per segment");
  int64_t total = 0;
  for (int s = 0; s < nseg; s++) {
    const zinc_opt_seg *g = &segs[s];
    if (g->coef < 0 || g->coef >= ncoef)
      return zinc_error(ZINC_ERR_INVALID, "cpu %s: segment %d uses coefficient %d of %d", name,
                        s, g->coef, ncoef);
    int need_m, need_v;
    int need_g = optim_needs(kind, pass, &coefs[g->coef], &need_m, &need_v);
    if (g->n < 0 || (need_g && !dtype_ok(g->grad_dtype)) ||
        (g->param_out && !dtype_ok(g->param_dtype)))
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu %s: segment %d has n %lld, grad dtype %d, param dtype %d; n must "
                        "be >= 0, dtypes f32, bf16 or f16", name, s, (long long)g->n,
                        g->grad_dtype, g->param_dtype);
    if (!storage_ok(g->master_dtype) || !storage_ok(g->state_dtype) ||
        (seg_bf16(g) && !rounding_ok(&coefs[g->coef])))
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu %s: segment %d stores master as dtype %d and state as dtype %d "
                        "with rounding %d; each is f32 (0) or bf16 (1), the rounding nearest "
                        "even (0) or stochastic (1)", name, s, g->master_dtype, g->state_dtype,
                        coefs[g->coef].bf16_rounding);
    if (g->n > 0 && (!g->master || (need_g && !g->grad) || (need_m && !g->exp_avg) ||
                     (need_v && !g->exp_avg_sq)))
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu %s: segment %d (%lld elements) needs master%s%s%s; one is NULL",
                        name, s, (long long)g->n, need_g ? ", grad" : "", need_m ? ", exp_avg" : "",
                        need_v ? ", exp_avg_sq" : "");
    total += g->n;
  }
  optim_job job = {.coefs = coefs, .segs = segs, .nseg = nseg, .kind = kind, .pass = pass};
  ZINC_CHECK(zinc_cpu_isa_table(isa, name, &job.ops));
  if (lamb_update)
    return lamb_update_run(pool, &job, norms);
  zinc_threadpool_for(pool, total, KERNEL_GRAIN, optim_part, &job);
  return ZINC_OK;
}

/* ------------------------------------------------------- sum of squares */

typedef struct {
  const zinc_cpu_isa_ops *ops;
  const zinc_sumsq_chunk *chunks;
  int nchunks;
  double *block_sums;       /* (total blocks) in chunk order, block order */
} sumsq_job;

static int64_t chunk_blocks(const zinc_sumsq_chunk *c) { return blocks_of(c->n); }

/* Blocks [begin, end) of the concatenation of every chunk's blocks. */
static void sumsq_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const sumsq_job *j = ctx;
  int64_t base = 0;
  for (int i = 0; i < j->nchunks && base < end; i++) {
    const zinc_sumsq_chunk *c = &j->chunks[i];
    int64_t nb = chunk_blocks(c);
    int64_t lo = begin > base ? begin - base : 0;
    int64_t hi = end - base < nb ? end - base : nb;
    for (int64_t b = lo; b < hi; b++) {
      int64_t first = b * ZINC_SUMSQ_BLOCK;
      int64_t len = c->n - first < ZINC_SUMSQ_BLOCK ? c->n - first : ZINC_SUMSQ_BLOCK;
      const char *data = (const char *)c->data + (size_t)first * dtype_bytes(c->dtype);
      j->block_sums[base + b] = j->ops->sumsq_block(data, c->dtype, len);
    }
    base += nb;
  }
}

zinc_status zinc_cpu_sumsq(zinc_threadpool *pool, zinc_cpu_isa isa,
                           const zinc_sumsq_chunk *chunks, int nchunks,
                           double *partials) {
  if (nchunks < 0 || (nchunks > 0 && (!chunks || !partials)))
    return zinc_error(ZINC_ERR_INVALID, "cpu sumsq: %d chunks at %p, partials at %p",
                      nchunks, (const void *)chunks, (void *)partials);
  int64_t total = 0;
  for (int i = 0; i < nchunks; i++) {
    if (chunks[i].n < 0 || !dtype_ok(chunks[i].dtype) || (chunks[i].n > 0 && !chunks[i].data))
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu sumsq: chunk %d has n %lld, dtype %d, data %p; n must be "
                        ">= 0, dtype f32, bf16 or f16", i, (long long)chunks[i].n,
                        chunks[i].dtype, chunks[i].data);
    total += chunk_blocks(&chunks[i]);
  }
  sumsq_job job = {.chunks = chunks, .nchunks = nchunks};
  ZINC_CHECK(zinc_cpu_isa_table(isa, "sumsq", &job.ops));
  double stack_sums[SUMSQ_STACK_BLOCKS];
  job.block_sums = stack_sums;
  if (total > SUMSQ_STACK_BLOCKS)
    ZINC_CHECK(zinc_calloc((void **)&job.block_sums, (size_t)total, sizeof(double),
                           "sum-of-squares block sums"));
  zinc_threadpool_for(pool, total, SUMSQ_GRAIN_BLOCKS, sumsq_part, &job);
  int64_t b = 0;
  for (int i = 0; i < nchunks; i++) {
    double s = 0.0;
    for (int64_t k = chunk_blocks(&chunks[i]); k > 0; k--)
      s += job.block_sums[b++];
    partials[i] = s;
  }
  if (job.block_sums != stack_sums)
    free(job.block_sums);
  return ZINC_OK;
}

/* ------------------------------------------------- accumulate and casts */

typedef struct {
  const zinc_cpu_isa_ops *ops;
  void *dst;
  const void *src;
  int ddt, sdt, accumulate;
} convert_job;

static void convert_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const convert_job *j = ctx;
  j->ops->convert((char *)j->dst + (size_t)begin * dtype_bytes(j->ddt), j->ddt,
                  (const char *)j->src + (size_t)begin * dtype_bytes(j->sdt), j->sdt,
                  end - begin, j->accumulate);
}

static void copy_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const convert_job *j = ctx;
  size_t es = dtype_bytes(j->sdt);
  memcpy((char *)j->dst + (size_t)begin * es, (const char *)j->src + (size_t)begin * es,
         (size_t)(end - begin) * es);
}

static zinc_status convert_run(zinc_threadpool *pool, zinc_cpu_isa isa, const char *kernel,
                               void *dst, int ddt, const void *src, int sdt, int64_t n,
                               int accumulate) {
  if (n < 0 || !dtype_ok(ddt) || !dtype_ok(sdt) || (n > 0 && (!dst || !src)))
    return zinc_error(ZINC_ERR_INVALID,
                      "cpu %s: n %lld, dst %p (dtype %d), src %p (dtype %d); n must be "
                      ">= 0 and dtypes f32, bf16 or f16", kernel, (long long)n, dst, ddt,
                      src, sdt);
  convert_job job = {.dst = dst, .src = src, .ddt = ddt, .sdt = sdt, .accumulate = accumulate};
  ZINC_CHECK(zinc_cpu_isa_table(isa, kernel, &job.ops));
  if (!accumulate && ddt == sdt) {
    if (dst != src)
      zinc_threadpool_for(pool, n, KERNEL_GRAIN, copy_part, &job);
    return ZINC_OK;
  }
  zinc_threadpool_for(pool, n, KERNEL_GRAIN, convert_part, &job);
  return ZINC_OK;
}

zinc_status zinc_cpu_accumulate_f32(zinc_threadpool *pool, zinc_cpu_isa isa, float *dst,
                                    const void *src, int src_dtype, int64_t n,
                                    int overwrite) {
  return convert_run(pool, isa, "accumulate_f32", dst, ZINC_F32, src, src_dtype, n,
                     !overwrite);
}

zinc_status zinc_cpu_cast(zinc_threadpool *pool, zinc_cpu_isa isa, void *dst, int dst_dtype,
                          const void *src, int src_dtype, int64_t n) {
  return convert_run(pool, isa, "cast", dst, dst_dtype, src, src_dtype, n, 0);
}

typedef struct {
  void *x;
  int dtype;
  float factor;
} scale_job;

static void scale_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const scale_job *j = ctx;
  (void)tid;
  for (int64_t i = begin; i < end; i++)
    zinc_store_from_f32(j->x, i, j->dtype, zinc_load_as_f32(j->x, i, j->dtype) * j->factor);
}

zinc_status zinc_cpu_scale(zinc_threadpool *pool, void *x, int dtype, int64_t n, float factor) {
  if (n < 0 || !dtype_ok(dtype) || (n > 0 && !x))
    return zinc_error(ZINC_ERR_INVALID, "cpu scale: n %lld, x %p (dtype %d); n must be >= 0 "
                      "and the dtype f32, bf16 or f16", (long long)n, x, dtype);
  scale_job job = {.x = x, .dtype = dtype, .factor = factor};
  zinc_threadpool_for(pool, n, KERNEL_GRAIN, scale_part, &job);
  return ZINC_OK;
}

/* The public conversion (zinc.h): the same kernel on the caller's thread. */
ZINC_API zinc_status zinc_convert(void *dst, zinc_dtype dst_dtype, const void *src,
                                  zinc_dtype src_dtype, int64_t n) {
  return convert_run(NULL, zinc_cpu_isa_select(), "zinc_convert", dst, (int)dst_dtype, src,
                     (int)src_dtype, n, 0);
}
