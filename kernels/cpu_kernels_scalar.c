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

static void scalar_lion(const zinc_opt_coef *c, int decay, float *p, float *m, const void *g,
                        int gdt, void *out, int odt, int64_t n) {
  zinc_cpu_lion_tail(c, decay, p, m, g, gdt, out, odt, 0, n);
}

static void scalar_adagrad(const zinc_opt_coef *c, int decay, float *p, float *s,
                           const void *g, int gdt, void *out, int odt, int64_t n) {
  zinc_cpu_adagrad_tail(c, decay, p, s, g, gdt, out, odt, 0, n);
}

static void scalar_sgd(const zinc_opt_coef *c, int decay, float *p, float *buf, const void *g,
                       int gdt, void *out, int odt, int64_t n) {
  zinc_cpu_sgd_tail(c, decay, p, buf, g, gdt, out, odt, 0, n);
}

static void scalar_lamb_update(const zinc_opt_coef *c, int decay, const float *p, float *m,
                               float *v, const void *g, int gdt, int64_t n, double sums[2]) {
  double w_lanes[ZINC_SUMSQ_LANES] = {0}, u_lanes[ZINC_SUMSQ_LANES] = {0};
  zinc_cpu_lamb_update_tail(c, decay, p, m, v, g, gdt, w_lanes, u_lanes, 0, n);
  sums[0] = zinc_sumsq_lanes_combine(w_lanes);
  sums[1] = zinc_sumsq_lanes_combine(u_lanes);
}

static void scalar_lamb_apply(const zinc_opt_coef *c, int decay, float ratio, float *p,
                              const float *m, const float *v, void *out, int odt, int64_t n) {
  zinc_cpu_lamb_apply_tail(c, decay, ratio, p, m, v, out, odt, 0, n);
}

static void scalar_adam_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                           void *p, void *m, void *v, const void *g, int gdt, void *out,
                           int odt, int64_t idx0, int64_t n) {
  zinc_cpu_adam_st_tail(c, decay, st, p, m, v, g, gdt, out, odt, idx0, 0, n);
}

static void scalar_lion_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                           void *p, void *m, const void *g, int gdt, void *out, int odt,
                           int64_t idx0, int64_t n) {
  zinc_cpu_lion_st_tail(c, decay, st, p, m, g, gdt, out, odt, idx0, 0, n);
}

static void scalar_adagrad_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                              void *p, void *s, const void *g, int gdt, void *out, int odt,
                              int64_t idx0, int64_t n) {
  zinc_cpu_adagrad_st_tail(c, decay, st, p, s, g, gdt, out, odt, idx0, 0, n);
}

static void scalar_sgd_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                          void *p, void *buf, const void *g, int gdt, void *out, int odt,
                          int64_t idx0, int64_t n) {
  zinc_cpu_sgd_st_tail(c, decay, st, p, buf, g, gdt, out, odt, idx0, 0, n);
}

static void scalar_lamb_update_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                                  const void *p, void *m, void *v, const void *g, int gdt,
                                  int64_t idx0, int64_t n, double sums[2]) {
  double w_lanes[ZINC_SUMSQ_LANES] = {0}, u_lanes[ZINC_SUMSQ_LANES] = {0};
  zinc_cpu_lamb_update_st_tail(c, decay, st, p, m, v, g, gdt, idx0, w_lanes, u_lanes, 0, n);
  sums[0] = zinc_sumsq_lanes_combine(w_lanes);
  sums[1] = zinc_sumsq_lanes_combine(u_lanes);
}

static void scalar_lamb_apply_st(const zinc_opt_coef *c, int decay, float ratio,
                                 const zinc_opt_store *st, void *p, const void *m,
                                 const void *v, void *out, int odt, int64_t idx0, int64_t n) {
  zinc_cpu_lamb_apply_st_tail(c, decay, ratio, st, p, m, v, out, odt, idx0, 0, n);
}

static double scalar_sumsq_block(const void *data, int dtype, int64_t n) {
  return zinc_sumsq_block_ref(data, 0, n, dtype);
}

static void scalar_convert(void *dst, int ddt, const void *src, int sdt, int64_t n,
                           int accumulate) {
  zinc_cpu_convert_tail(dst, ddt, src, sdt, accumulate, 0, n);
}

/* The codec loops, specialised on (kind, source dtype, error feedback) and
 * (kind, destination) so that the per-element branches of codec_math.h
 * fold away; the arithmetic is zinc_codec_encode_block's as written. */
static void scalar_codec_encode(int kind, int64_t block, float *scales, uint8_t *payload,
                                const void *src, int sdt, int64_t n, int64_t b0, int64_t b1,
                                float *ef_scales, uint8_t *ef_q, float beta, float omb,
                                uint64_t seed) {
#define ENCODE_CASE(K, S)                                                                   \
  case (K) * 3 + (S):                                                                       \
    for (int64_t b = b0; b < b1; b++)                                                       \
      zinc_codec_encode_block((K), block, scales, payload, src, (S), n, b, ef_scales, ef_q,  \
                              beta, omb, seed);                                             \
    return;
#define ENCODE_KIND(K) ENCODE_CASE(K, ZINC_F32) ENCODE_CASE(K, ZINC_BF16) ENCODE_CASE(K, ZINC_F16)
  switch (kind * 3 + sdt) {
    ENCODE_KIND(ZINC_CODEC_INT8)
    ENCODE_KIND(ZINC_CODEC_INT4)
    ENCODE_KIND(ZINC_CODEC_SIGN1)
    ENCODE_KIND(ZINC_CODEC_TERN2)
  default:
    for (int64_t b = b0; b < b1; b++)
      zinc_codec_encode_block(kind, block, scales, payload, src, sdt, n, b, ef_scales, ef_q,
                              beta, omb, seed);
  }
#undef ENCODE_KIND
#undef ENCODE_CASE
}

static void scalar_codec_decode(int kind, int64_t block, void *dst, int ddt,
                                const float *scales, const uint8_t *payload, int64_t lo,
                                int64_t hi, int accumulate) {
#define DECODE_CASE(K, D, A)                                                                \
  case ((K) * 3 + (D)) * 2 + (A):                                                           \
    zinc_cpu_codec_decode_tail((K), block, dst, (D), scales, payload, (A), lo, hi);         \
    return;
#define DECODE_KIND(K)                                                                      \
  DECODE_CASE(K, ZINC_F32, 0) DECODE_CASE(K, ZINC_F32, 1) DECODE_CASE(K, ZINC_BF16, 0)      \
  DECODE_CASE(K, ZINC_F16, 0)
  switch ((kind * 3 + ddt) * 2 + (accumulate != 0)) {
    DECODE_KIND(ZINC_CODEC_INT8)
    DECODE_KIND(ZINC_CODEC_INT4)
    DECODE_KIND(ZINC_CODEC_SIGN1)
    DECODE_KIND(ZINC_CODEC_TERN2)
  default:
    zinc_cpu_codec_decode_tail(kind, block, dst, ddt, scales, payload, accumulate, lo, hi);
  }
#undef DECODE_KIND
#undef DECODE_CASE
}

const zinc_cpu_isa_ops zinc_cpu_ops_scalar = {
    .adam = scalar_adam,
    .lion = scalar_lion,
    .adagrad = scalar_adagrad,
    .sgd = scalar_sgd,
    .lamb_update = scalar_lamb_update,
    .lamb_apply = scalar_lamb_apply,
    .adam_st = scalar_adam_st,
    .lion_st = scalar_lion_st,
    .adagrad_st = scalar_adagrad_st,
    .sgd_st = scalar_sgd_st,
    .lamb_update_st = scalar_lamb_update_st,
    .lamb_apply_st = scalar_lamb_apply_st,
    .sumsq_block = scalar_sumsq_block,
    .convert = scalar_convert,
    .codec_encode = scalar_codec_encode,
    .codec_decode = scalar_codec_decode,
};
