/*
 * cpu_kernels.c — argument checks, instruction-set choice and the split of
 * each kernel over the thread pool; the inner loops live in
 * cpu_kernels_{scalar,avx2,avx512}.c.
 *
 * Splits are static (zinc_threadpool_split): Adam, casts and accumulation
 * are elementwise, so any split gives the same bits. The sum of squares is
 * split over whole ZINC_SUMSQ_BLOCK blocks: each block's sum is computed
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

static zinc_status isa_ops(zinc_cpu_isa isa, const char *kernel,
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
static size_t dtype_bytes(int dt) { return dt == ZINC_F32 ? 4 : 2; }

/* ------------------------------------------------------------------ Adam */

typedef struct {
  const zinc_cpu_isa_ops *ops;
  const zinc_opt_coef *coefs;
  const zinc_opt_seg *segs;
  int nseg;
} adam_job;

/* Elements [begin, end) of the concatenation of the segments. */
static void adam_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const adam_job *j = ctx;
  int64_t base = 0;
  for (int s = 0; s < j->nseg && base < end; s++) {
    const zinc_opt_seg *g = &j->segs[s];
    int64_t lo = begin > base ? begin - base : 0;
    int64_t hi = end - base < g->n ? end - base : g->n;
    base += g->n;
    if (lo >= hi)
      continue;
    void *out = g->param_out
                    ? (char *)g->param_out + (size_t)lo * dtype_bytes(g->param_dtype)
                    : NULL;
    j->ops->adam(&j->coefs[g->coef], g->decay, g->master + lo, g->exp_avg + lo, g->exp_avg_sq + lo,
                 (const char *)g->grad + (size_t)lo * dtype_bytes(g->grad_dtype),
                 g->grad_dtype, out, g->param_dtype, hi - lo);
  }
}

zinc_status zinc_cpu_optim(zinc_threadpool *pool, zinc_cpu_isa isa,
                           const zinc_opt_coef *coefs, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms) {
  if (!coefs || ncoef < 1 || nseg < 0 || (nseg > 0 && !segs))
    return zinc_error(ZINC_ERR_INVALID, "cpu optimizer: %d coefficients at %p, %d segments at %p",
                      ncoef, (const void *)coefs, nseg, (const void *)segs);
  for (int k = 0; k < ncoef; k++)
    if (coefs[k].kind != coefs[0].kind)
      return zinc_error(ZINC_ERR_INVALID, "cpu optimizer: coefficient %d is for %s, "
                        "coefficient 0 for %s; one pass runs one optimizer", k,
                        zinc_opt_kind_str(coefs[k].kind), zinc_opt_kind_str(coefs[0].kind));
  if (coefs[0].kind != ZINC_OPT_ADAM || pass != ZINC_OPT_PASS_UPDATE)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "cpu optimizer: %s pass %d is not built yet",
                      zinc_opt_kind_str(coefs[0].kind), pass);
  (void)norms;
  int64_t total = 0;
  for (int s = 0; s < nseg; s++) {
    const zinc_opt_seg *g = &segs[s];
    if (g->n < 0 || !dtype_ok(g->grad_dtype) || (g->param_out && !dtype_ok(g->param_dtype)) ||
        g->coef < 0 || g->coef >= ncoef)
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu optimizer: segment %d has n %lld, grad dtype %d, param dtype %d, "
                        "coefficient %d of %d; n must be >= 0, dtypes f32, bf16 or f16",
                        s, (long long)g->n, g->grad_dtype, g->param_dtype, g->coef, ncoef);
    if (g->n > 0 && (!g->master || !g->exp_avg || !g->exp_avg_sq || !g->grad))
      return zinc_error(ZINC_ERR_INVALID,
                        "cpu adam: segment %d (%lld elements) lacks master, exp_avg, "
                        "exp_avg_sq or grad", s, (long long)g->n);
    total += g->n;
  }
  adam_job job = {.coefs = coefs, .segs = segs, .nseg = nseg};
  ZINC_CHECK(isa_ops(isa, "adam", &job.ops));
  zinc_threadpool_for(pool, total, KERNEL_GRAIN, adam_part, &job);
  return ZINC_OK;
}

/* ------------------------------------------------------- sum of squares */

typedef struct {
  const zinc_cpu_isa_ops *ops;
  const zinc_sumsq_chunk *chunks;
  int nchunks;
  double *block_sums;       /* (total blocks) in chunk order, block order */
} sumsq_job;

static int64_t chunk_blocks(const zinc_sumsq_chunk *c) {
  return (c->n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK;
}

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
  ZINC_CHECK(isa_ops(isa, "sumsq", &job.ops));
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
  ZINC_CHECK(isa_ops(isa, kernel, &job.ops));
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

/* The public conversion (zinc.h): the same kernel on the caller's thread. */
ZINC_API zinc_status zinc_convert(void *dst, zinc_dtype dst_dtype, const void *src,
                                  zinc_dtype src_dtype, int64_t n) {
  return convert_run(NULL, zinc_cpu_isa_select(), "zinc_convert", dst, (int)dst_dtype, src,
                     (int)src_dtype, n, 0);
}
