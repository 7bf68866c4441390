/*
 * cpu_kernels_scalar.c — the scalar path: the per-element functions of
 * kernels/zinc_math.h applied in a plain loop. This is the reference the
 * SIMD paths are tested against, and the path of a CPU without AVX2+FMA.
 */
#include "kernels/cpu_kernels_isa.h"

static void scalar_adam(const zinc_opt_coef *c, int decay, float *p, float *m, float *v,
                        const void *g, int gdt, void *out, int odt, int64_t n) {
  zinc_cpu_adam_tail(c, decay, p, m, v, g, gdt, out, odt, 0, n);
}

static double scalar_sumsq_block(const void *data, int dtype, int64_t n) {
  return zinc_sumsq_block_ref(data, 0, n, dtype);
}

static void scalar_convert(void *dst, int ddt, const void *src, int sdt, int64_t n,
                           int accumulate) {
  zinc_cpu_convert_tail(dst, ddt, src, sdt, accumulate, 0, n);
}

const zinc_cpu_isa_ops zinc_cpu_ops_scalar = {
    .adam = scalar_adam,
    .sumsq_block = scalar_sumsq_block,
    .convert = scalar_convert,
};
