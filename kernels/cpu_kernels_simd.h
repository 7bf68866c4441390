/*
 * cpu_kernels_simd.h — internal template: the Adam and conversion loops
 * written once for every vector width. Included by cpu_kernels_avx2.c and
 * cpu_kernels_avx512.c after they define
 *
 *   SIMD_FN                 function attributes (the target instruction set)
 *   SIMD_W                  floats per vector
 *   vf                      the vector type
 *   vf_loadu vf_storeu vf_set1 vf_add vf_mul vf_div vf_sqrt
 *   vf_fmadd(a, b, c)       a*b + c, one rounding
 *   vf_fnmadd(a, b, c)      c - a*b, one rounding (= fmaf(-a, b, c))
 *   vf_load_bf16 vf_load_f16   16-bit loads with zinc_math.h's bits
 *   vh                      a vector of SIMD_W 16-bit values
 *   vf_to_bf16 vf_to_f16    rounding with zinc_math.h's bits
 *   vh_storeu vh_stream vf_stream   plain and non-temporal stores
 *   sq_lanes sq_zero sq_add sq_store  the 16 double lanes of the canonical
 *                           sum of squares (sq_add(acc, x, i): the squares
 *                           of x, elements i .. i + SIMD_W - 1 of a block)
 *
 * Each optimizer loop is its zinc_math.h element function (zinc_adam_elem,
 * zinc_lion_elem, zinc_adagrad_elem, zinc_sgd_elem, zinc_lamb_update_elem,
 * zinc_lamb_apply_elem) written with vectors, operation for operation, so it
 * gives the scalar path's bits (vf_sub, vf_copysign as well for Lion). Each loop is specialised
 * for its dtypes (the switch in the entry points), so nothing but the
 * arithmetic is left inside it.
 */
#ifndef SIMD_FN
#error "define the SIMD_* macros before including cpu_kernels_simd.h"
#endif

#define SIMD_INLINE static inline SIMD_FN __attribute__((always_inline))

SIMD_INLINE vf simd_load(const void *base, int64_t i, int dt) {
  if (dt == ZINC_F32)
    return vf_loadu((const float *)base + i);
  if (dt == ZINC_BF16)
    return vf_load_bf16((const uint16_t *)base + i);
  return vf_load_f16((const uint16_t *)base + i);
}

/* stream: a non-temporal store (the address must be vector-aligned). */
SIMD_INLINE void simd_store(void *base, int64_t i, int dt, vf x, int stream) {
  if (dt == ZINC_F32) {
    float *q = (float *)base + i;
    if (stream)
      vf_stream(q, x);
    else
      vf_storeu(q, x);
    return;
  }
  vh h = dt == ZINC_BF16 ? vf_to_bf16(x) : vf_to_f16(x);
  uint16_t *q = (uint16_t *)base + i;
  if (stream)
    vh_stream(q, h);
  else
    vh_storeu(q, h);
}

/* The 16-bit (or fp32) parameter copy is written and not read again by
 * this pass: on long spans it bypasses the cache, saving the read of each
 * line before it is overwritten. Shorter spans keep it in cache for the
 * copy to the device that follows. */
#define SIMD_STREAM_MIN (1 << 18)

/* Elements to do one by one before out + i is aligned for streaming;
 * -1 when streaming does not apply. */
SIMD_INLINE int64_t simd_stream_peel(const void *out, int odt, int64_t n) {
  if (odt < 0 || n < SIMD_STREAM_MIN)
    return -1;
  uintptr_t es = odt == ZINC_F32 ? 4 : 2, vb = SIMD_W * es, a = (uintptr_t)out;
  if (a % es)
    return -1;
  return (int64_t)(((vb - a % vb) % vb) / es);
}

/* ------------------------------------------------------------------ Adam */

/* gdt, odt are compile-time constants at every call (odt < 0: no copy). */
SIMD_INLINE void simd_adam_span(const zinc_opt_coef *c, int decay, float *p, float *m,
                                float *v, const void *g, int gdt, void *out, int odt,
                                int64_t n) {
  const vf grad_scale = vf_set1(c->grad_scale);
  const vf beta1 = vf_set1(c->beta1), one_minus_beta1 = vf_set1(c->one_minus_beta1);
  const vf beta2 = vf_set1(c->beta2), one_minus_beta2 = vf_set1(c->one_minus_beta2);
  const vf eps = vf_set1(c->eps), inv_sqrt_bc2 = vf_set1(c->inv_sqrt_bc2);
  const vf step_size = vf_set1(c->step_size);
  const vf weight_decay = vf_set1(c->weight_decay), decay_factor = vf_set1(c->decay_factor);
  const int l2 = decay && !c->adamw, decoupled = decay && c->adamw;
  int64_t i = simd_stream_peel(out, odt, n);
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adam_tail(c, decay, p, m, v, g, gdt, out, odt, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf gv = simd_load(g, i, gdt);
    vf pv = vf_loadu(p + i), mv = vf_loadu(m + i), vv = vf_loadu(v + i);
    gv = vf_mul(gv, grad_scale);
    if (l2)
      gv = vf_fmadd(weight_decay, pv, gv);
    mv = vf_fmadd(beta1, mv, vf_mul(one_minus_beta1, gv));
    vv = vf_fmadd(beta2, vv, vf_mul(vf_mul(one_minus_beta2, gv), gv));
    vf d = vf_fmadd(vf_sqrt(vv), inv_sqrt_bc2, eps);
    if (decoupled)
      pv = vf_mul(pv, decay_factor);
    pv = vf_fnmadd(step_size, vf_div(mv, d), pv);
    vf_storeu(p + i, pv);
    vf_storeu(m + i, mv);
    vf_storeu(v + i, vv);
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence(); /* order the non-temporal stores before the pool's hand-back */
  zinc_cpu_adam_tail(c, decay, p, m, v, g, gdt, out, odt, i, n);
}

static SIMD_FN void simd_adam(const zinc_opt_coef *c, int decay, float *p, float *m,
                              float *v, const void *g, int gdt, void *out, int odt,
                              int64_t n) {
  if (!out)
    odt = -1;
#define ADAM_CASE(G, O)                                                    \
  case (G) * 4 + (O) + 1:                                                  \
    simd_adam_span(c, decay, p, m, v, g, (G), out, (O), n);                \
    return;
  switch (gdt * 4 + odt + 1) {
    ADAM_CASE(ZINC_F32, -1) ADAM_CASE(ZINC_F32, ZINC_F32)
    ADAM_CASE(ZINC_F32, ZINC_BF16) ADAM_CASE(ZINC_F32, ZINC_F16)
    ADAM_CASE(ZINC_BF16, -1) ADAM_CASE(ZINC_BF16, ZINC_F32)
    ADAM_CASE(ZINC_BF16, ZINC_BF16) ADAM_CASE(ZINC_BF16, ZINC_F16)
    ADAM_CASE(ZINC_F16, -1) ADAM_CASE(ZINC_F16, ZINC_F32)
    ADAM_CASE(ZINC_F16, ZINC_BF16) ADAM_CASE(ZINC_F16, ZINC_F16)
  default:
    zinc_cpu_adam_tail(c, decay, p, m, v, g, gdt, out, odt, 0, n);
  }
#undef ADAM_CASE
}

/* The twelve (grad dtype, copy dtype) pairs a loop is specialised for:
 * CASE(G, O) for every G in f32, bf16, f16 and O in none (-1), f32, bf16,
 * f16; the switch key is G * 4 + O + 1. */
#define SIMD_EVERY_DTYPE_PAIR(CASE)                                        \
  CASE(ZINC_F32, -1) CASE(ZINC_F32, ZINC_F32)                              \
  CASE(ZINC_F32, ZINC_BF16) CASE(ZINC_F32, ZINC_F16)                       \
  CASE(ZINC_BF16, -1) CASE(ZINC_BF16, ZINC_F32)                            \
  CASE(ZINC_BF16, ZINC_BF16) CASE(ZINC_BF16, ZINC_F16)                     \
  CASE(ZINC_F16, -1) CASE(ZINC_F16, ZINC_F32)                              \
  CASE(ZINC_F16, ZINC_BF16) CASE(ZINC_F16, ZINC_F16)

/* ------------------------------------------------------------------ Lion */

SIMD_INLINE void simd_lion_span(const zinc_opt_coef *c, int decay, float *p, float *m,
                                const void *g, int gdt, void *out, int odt, int64_t n) {
  const vf grad_scale = vf_set1(c->grad_scale);
  const vf beta1 = vf_set1(c->beta1), one_minus_beta1 = vf_set1(c->one_minus_beta1);
  const vf beta2 = vf_set1(c->beta2), one_minus_beta2 = vf_set1(c->one_minus_beta2);
  const vf step_size = vf_set1(c->step_size), decay_factor = vf_set1(c->decay_factor);
  int64_t i = simd_stream_peel(out, odt, n); /* as in simd_adam_span */
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lion_tail(c, decay, p, m, g, gdt, out, odt, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf gv = vf_mul(simd_load(g, i, gdt), grad_scale);
    vf pv = vf_loadu(p + i), mv = vf_loadu(m + i);
    vf cv = vf_fmadd(beta1, mv, vf_mul(one_minus_beta1, gv));
    if (decay)
      pv = vf_mul(pv, decay_factor);
    pv = vf_sub(pv, vf_copysign(step_size, cv));
    mv = vf_fmadd(beta2, mv, vf_mul(one_minus_beta2, gv));
    vf_storeu(p + i, pv);
    vf_storeu(m + i, mv);
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lion_tail(c, decay, p, m, g, gdt, out, odt, i, n);
}

static SIMD_FN void simd_lion(const zinc_opt_coef *c, int decay, float *p, float *m,
                              const void *g, int gdt, void *out, int odt, int64_t n) {
  if (!out)
    odt = -1;
#define LION_CASE(G, O)                                                    \
  case (G) * 4 + (O) + 1:                                                  \
    simd_lion_span(c, decay, p, m, g, (G), out, (O), n);                   \
    return;
  switch (gdt * 4 + odt + 1) {
    SIMD_EVERY_DTYPE_PAIR(LION_CASE)
  default:
    zinc_cpu_lion_tail(c, decay, p, m, g, gdt, out, odt, 0, n);
  }
#undef LION_CASE
}

/* --------------------------------------------------------------- Adagrad */

SIMD_INLINE void simd_adagrad_span(const zinc_opt_coef *c, int decay, float *p, float *s,
                                   const void *g, int gdt, void *out, int odt, int64_t n) {
  const vf grad_scale = vf_set1(c->grad_scale), weight_decay = vf_set1(c->weight_decay);
  const vf eps = vf_set1(c->eps), step_size = vf_set1(c->step_size);
  int64_t i = simd_stream_peel(out, odt, n); /* as in simd_adam_span */
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adagrad_tail(c, decay, p, s, g, gdt, out, odt, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf gv = vf_mul(simd_load(g, i, gdt), grad_scale);
    vf pv = vf_loadu(p + i);
    if (decay)
      gv = vf_fmadd(weight_decay, pv, gv);
    vf sv = vf_fmadd(gv, gv, vf_loadu(s + i));
    pv = vf_fnmadd(step_size, vf_div(gv, vf_add(vf_sqrt(sv), eps)), pv);
    vf_storeu(p + i, pv);
    vf_storeu(s + i, sv);
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_adagrad_tail(c, decay, p, s, g, gdt, out, odt, i, n);
}

static SIMD_FN void simd_adagrad(const zinc_opt_coef *c, int decay, float *p, float *s,
                                 const void *g, int gdt, void *out, int odt, int64_t n) {
  if (!out)
    odt = -1;
#define ADAGRAD_CASE(G, O)                                                 \
  case (G) * 4 + (O) + 1:                                                  \
    simd_adagrad_span(c, decay, p, s, g, (G), out, (O), n);                \
    return;
  switch (gdt * 4 + odt + 1) {
    SIMD_EVERY_DTYPE_PAIR(ADAGRAD_CASE)
  default:
    zinc_cpu_adagrad_tail(c, decay, p, s, g, gdt, out, odt, 0, n);
  }
#undef ADAGRAD_CASE
}

/* ------------------------------------------------------------------- SGD */

SIMD_INLINE void simd_sgd_span(const zinc_opt_coef *c, int decay, float *p, float *buf,
                               const void *g, int gdt, void *out, int odt, int64_t n) {
  const vf grad_scale = vf_set1(c->grad_scale), weight_decay = vf_set1(c->weight_decay);
  const vf momentum = vf_set1(c->momentum), step_size = vf_set1(c->step_size);
  const vf one_minus_dampening = vf_set1(c->one_minus_dampening);
  const int has_buf = c->momentum != 0.0f, first = c->first_step, nesterov = c->nesterov;
  int64_t i = simd_stream_peel(out, odt, n); /* as in simd_adam_span */
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_sgd_tail(c, decay, p, buf, g, gdt, out, odt, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf d = vf_mul(simd_load(g, i, gdt), grad_scale);
    vf pv = vf_loadu(p + i);
    if (decay)
      d = vf_fmadd(weight_decay, pv, d);
    if (has_buf) {
      vf b = first ? d : vf_fmadd(momentum, vf_loadu(buf + i), vf_mul(one_minus_dampening, d));
      vf_storeu(buf + i, b);
      d = nesterov ? vf_fmadd(momentum, b, d) : b;
    }
    pv = vf_fnmadd(step_size, d, pv);
    vf_storeu(p + i, pv);
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_sgd_tail(c, decay, p, buf, g, gdt, out, odt, i, n);
}

static SIMD_FN void simd_sgd(const zinc_opt_coef *c, int decay, float *p, float *buf,
                             const void *g, int gdt, void *out, int odt, int64_t n) {
  if (!out)
    odt = -1;
#define SGD_CASE(G, O)                                                     \
  case (G) * 4 + (O) + 1:                                                  \
    simd_sgd_span(c, decay, p, buf, g, (G), out, (O), n);                  \
    return;
  switch (gdt * 4 + odt + 1) {
    SIMD_EVERY_DTYPE_PAIR(SGD_CASE)
  default:
    zinc_cpu_sgd_tail(c, decay, p, buf, g, gdt, out, odt, 0, n);
  }
#undef SGD_CASE
}

/* ------------------------------------------------------------------ Lamb */

/* zinc_lamb_dir with vectors */
SIMD_INLINE vf simd_lamb_dir(vf pv, vf mv, vf vv, vf eps, vf weight_decay, int decay) {
  vf u = vf_div(mv, vf_add(vf_sqrt(vv), eps));
  return decay ? vf_fmadd(weight_decay, pv, u) : u;
}

/* One block: the moments move and the squares of the weights and of the
 * update go straight into the canonical lanes (sq_lanes, sq_add: element
 * i of the block into lane i % 16), so the update is never stored. */
SIMD_INLINE void simd_lamb_update_span(const zinc_opt_coef *c, int decay, const float *p,
                                       float *m, float *v, const void *g, int gdt, int64_t n,
                                       double sums[2]) {
  const vf grad_scale = vf_set1(c->grad_scale);
  const vf beta1 = vf_set1(c->beta1), one_minus_beta1 = vf_set1(c->one_minus_beta1);
  const vf beta2 = vf_set1(c->beta2), one_minus_beta2 = vf_set1(c->one_minus_beta2);
  const vf eps = vf_set1(c->eps), weight_decay = vf_set1(c->weight_decay);
  sq_lanes w_acc, u_acc;
  sq_zero(&w_acc);
  sq_zero(&u_acc);
  int64_t i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf gv = vf_mul(simd_load(g, i, gdt), grad_scale);
    vf pv = vf_loadu(p + i);
    vf mv = vf_fmadd(beta1, vf_loadu(m + i), vf_mul(one_minus_beta1, gv));
    vf vv = vf_fmadd(beta2, vf_loadu(v + i), vf_mul(vf_mul(one_minus_beta2, gv), gv));
    vf_storeu(m + i, mv);
    vf_storeu(v + i, vv);
    sq_add(&w_acc, pv, i);
    sq_add(&u_acc, simd_lamb_dir(pv, mv, vv, eps, weight_decay, decay), i);
  }
  double w_lanes[ZINC_SUMSQ_LANES], u_lanes[ZINC_SUMSQ_LANES];
  sq_store(&w_acc, w_lanes);
  sq_store(&u_acc, u_lanes);
  zinc_cpu_lamb_update_tail(c, decay, p, m, v, g, gdt, w_lanes, u_lanes, i, n);
  sums[0] = zinc_sumsq_lanes_combine(w_lanes);
  sums[1] = zinc_sumsq_lanes_combine(u_lanes);
}

static SIMD_FN void simd_lamb_update(const zinc_opt_coef *c, int decay, const float *p,
                                     float *m, float *v, const void *g, int gdt, int64_t n,
                                     double sums[2]) {
  switch (gdt) {
  case ZINC_F32:
    simd_lamb_update_span(c, decay, p, m, v, g, ZINC_F32, n, sums);
    return;
  case ZINC_BF16:
    simd_lamb_update_span(c, decay, p, m, v, g, ZINC_BF16, n, sums);
    return;
  default:
    simd_lamb_update_span(c, decay, p, m, v, g, ZINC_F16, n, sums);
    return;
  }
}

SIMD_INLINE void simd_lamb_apply_span(const zinc_opt_coef *c, int decay, float ratio, float *p,
                                      const float *m, const float *v, void *out, int odt,
                                      int64_t n) {
  const vf step = vf_set1(c->step_size * ratio); /* as zinc_lamb_apply_elem */
  const vf eps = vf_set1(c->eps), weight_decay = vf_set1(c->weight_decay);
  int64_t i = simd_stream_peel(out, odt, n); /* as in simd_adam_span */
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lamb_apply_tail(c, decay, ratio, p, m, v, out, odt, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = vf_loadu(p + i);
    vf u = simd_lamb_dir(pv, vf_loadu(m + i), vf_loadu(v + i), eps, weight_decay, decay);
    pv = vf_fnmadd(step, u, pv);
    vf_storeu(p + i, pv);
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lamb_apply_tail(c, decay, ratio, p, m, v, out, odt, i, n);
}

static SIMD_FN void simd_lamb_apply(const zinc_opt_coef *c, int decay, float ratio, float *p,
                                    const float *m, const float *v, void *out, int odt,
                                    int64_t n) {
  if (!out)
    odt = -1;
  switch (odt) {
  case -1:
    simd_lamb_apply_span(c, decay, ratio, p, m, v, out, -1, n);
    return;
  case ZINC_F32:
    simd_lamb_apply_span(c, decay, ratio, p, m, v, out, ZINC_F32, n);
    return;
  case ZINC_BF16:
    simd_lamb_apply_span(c, decay, ratio, p, m, v, out, ZINC_BF16, n);
    return;
  case ZINC_F16:
    simd_lamb_apply_span(c, decay, ratio, p, m, v, out, ZINC_F16, n);
    return;
  default:
    zinc_cpu_lamb_apply_tail(c, decay, ratio, p, m, v, out, odt, 0, n);
  }
}

/* ----------------------------------------------------- casts, accumulate */

/* sdt, ddt constant at every call; ddt < 0: dst (f32) += src. */
SIMD_INLINE void simd_convert_span(void *dst, int ddt, const void *src, int sdt,
                                   int64_t n) {
  int64_t i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf x = simd_load(src, i, sdt);
    if (ddt < 0)
      vf_storeu((float *)dst + i, vf_add(vf_loadu((const float *)dst + i), x));
    else
      simd_store(dst, i, ddt, x, 0);
  }
  zinc_cpu_convert_tail(dst, ddt, src, sdt, ddt < 0, i, n);
}

static SIMD_FN void simd_convert(void *dst, int ddt, const void *src, int sdt, int64_t n,
                                 int accumulate) {
  if (accumulate)
    ddt = -1;
#define CONVERT_CASE(S, D)                                                 \
  case (S) * 4 + (D) + 1:                                                  \
    simd_convert_span(dst, (D), src, (S), n);                              \
    return;
  switch (sdt * 4 + ddt + 1) {
    CONVERT_CASE(ZINC_F32, -1) CONVERT_CASE(ZINC_F32, ZINC_F32)
    CONVERT_CASE(ZINC_F32, ZINC_BF16) CONVERT_CASE(ZINC_F32, ZINC_F16)
    CONVERT_CASE(ZINC_BF16, -1) CONVERT_CASE(ZINC_BF16, ZINC_F32)
    CONVERT_CASE(ZINC_BF16, ZINC_BF16) CONVERT_CASE(ZINC_BF16, ZINC_F16)
    CONVERT_CASE(ZINC_F16, -1) CONVERT_CASE(ZINC_F16, ZINC_F32)
    CONVERT_CASE(ZINC_F16, ZINC_BF16) CONVERT_CASE(ZINC_F16, ZINC_F16)
  default:
    zinc_cpu_convert_tail(dst, ddt, src, sdt, accumulate, 0, n);
  }
#undef CONVERT_CASE
}

/* ---------------------------------------------------------------- codecs */

/* The codec loops (kernels/codec_math.h with vectors): per block the same
 * passes as zinc_codec_encode_block, vectors from the block's start for the
 * statistics and the residual (the SIGN1 lanes: element k of the block in
 * lane k % 8 of an 8-float accumulator, sum8_add adding a 16-wide vector's
 * halves in turn), vectors on payload-byte-aligned elements (i % 8 == 0)
 * for the payload, and codec_math.h's scalar helpers for the rest.
 * Each ISA file defines, besides the macros above:
 *   vi vi_zero vi_absmax(acc, x) vi_hmax   max of |x|'s bits
 *   vf_round vf_min vf_max vf_abs vf_xor_sign(s, x) (s with x's sign flipped in)
 *   sum8_add(__m256 *acc, vf ax)
 *   vf_from_i8(p)  SIMD_W int8 -> floats;   store_i8(p, y) the reverse
 *   store_i4(p, y) SIMD_W / 2 bytes;  load_i4(p) SIMD_W nibbles as floats
 *   store_sign(p, x) SIMD_W / 8 bytes of sign bits;  load_sign(p, s) +-s
 *   load_i2(p) SIMD_W TERN2 2-bit fields as floats (decode only: TERN2's
 *   encode is the scalar reference, its draw a 64-bit hash per element) */

SIMD_INLINE vf simd_codec_x(const void *src, int sdt, const uint8_t *ef_q, vf efs, int64_t i,
                            int has_ef) {
  vf x = simd_load(src, i, sdt);
  if (has_ef)
    x = vf_add(x, vf_mul(vf_from_i8(ef_q + i), efs));
  return x;
}

/* zinc_codec_quantize with vectors: min then max, as the scalar clamps. */
SIMD_INLINE vf simd_codec_quantize(vf x, vf pre, vf inv, vf qmax, vf nqmax) {
  vf y = vf_round(vf_mul(vf_mul(x, pre), inv));
  return vf_max(vf_min(y, qmax), nqmax);
}

SIMD_INLINE void simd_codec_block(int kind, int has_ef, int sdt, int64_t block, float *scales,
                                  uint8_t *payload, const void *src, int64_t n, int64_t b,
                                  float *ef_scales, uint8_t *ef_q, float beta, float omb,
                                  uint64_t seed) {
  const int64_t lo = b * block, hi = n - lo < block ? n : lo + block;
  const float old_scale = has_ef ? ef_scales[b] : 0.0f;
  const uint8_t *ef_p = has_ef ? ef_q : NULL;
  const vf efs = vf_set1(old_scale);
  /* statistics */
  vi mx = vi_zero();
  __m256 acc8 = _mm256_setzero_ps();
  int64_t i = lo;
  for (; i + SIMD_W <= hi; i += SIMD_W) {
    vf x = simd_codec_x(src, sdt, ef_q, efs, i, has_ef);
    mx = vi_absmax(mx, x);
    if (kind == ZINC_CODEC_SIGN1)
      sum8_add(&acc8, vf_abs(x));
  }
  uint32_t mbits = vi_hmax(mx);
  float lanes[ZINC_CODEC_SIGN1_LANES];
  _mm256_storeu_ps(lanes, acc8);
  zinc_codec_stats_tail(kind, src, sdt, old_scale, ef_p, lo, i, hi, &mbits, lanes);
  zinc_codec_quant p;
  const float scale = zinc_codec_block_scale(kind, mbits, lanes, hi - lo, &p);
  /* payload */
  const vf pre = vf_set1(p.pre), inv = vf_set1(p.inv), qmax = vf_set1(p.qmax);
  const vf nqmax = vf_set1(-p.qmax), vscale = vf_set1(scale), zero = vf_set1(0.0f);
  int64_t head = (lo + 7) & ~(int64_t)7;
  head = head < hi ? head : hi;
  zinc_codec_payload_tail(kind, &p, scale, payload, src, sdt, old_scale, ef_p, lo, head, seed);
  for (i = head; i + SIMD_W <= hi; i += SIMD_W) {
    vf x = simd_codec_x(src, sdt, ef_q, efs, i, has_ef);
    if (kind == ZINC_CODEC_SIGN1) {
      store_sign(payload + i / 8, x);
      continue;
    }
    vf y = p.zero ? zero : simd_codec_quantize(x, pre, inv, qmax, nqmax);
    if (kind == ZINC_CODEC_INT8)
      store_i8(payload + i, y);
    else
      store_i4(payload + i / 2, y);
  }
  zinc_codec_payload_tail(kind, &p, scale, payload, src, sdt, old_scale, ef_p, i, hi, seed);
  scales[b] = scale;
  if (!has_ef)
    return;
  /* the residual: its max, then INT8 (zinc_codec_ef_elem with vectors) */
  const vf vbeta = vf_set1(beta), vomb = vf_set1(omb);
#define SIMD_EF_R(r, i)                                                                     \
  do {                                                                                      \
    vf d_ = vf_mul(vf_from_i8(ef_q + (i)), efs);                                            \
    vf x_ = vf_add(simd_load(src, (i), sdt), d_);                                           \
    vf dq_ = kind == ZINC_CODEC_SIGN1 ? vf_xor_sign(vscale, x_)                             \
             : vf_mul(p.zero ? zero : simd_codec_quantize(x_, pre, inv, qmax, nqmax),       \
                      vscale);                                                              \
    (r) = vf_add(vf_mul(vbeta, d_), vf_mul(vomb, vf_sub(x_, dq_)));                         \
  } while (0)
  mx = vi_zero();
  for (i = lo; i + SIMD_W <= hi; i += SIMD_W) {
    vf r;
    SIMD_EF_R(r, i);
    mx = vi_absmax(mx, r);
  }
  uint32_t rbits = vi_hmax(mx);
  zinc_codec_ef_max_tail(kind, &p, scale, src, sdt, ef_q, old_scale, beta, omb, i, hi, &rbits,
                         seed);
  const zinc_codec_quant rp = zinc_codec_ef_quant(mbits, rbits);
  const vf rpre = vf_set1(rp.pre), rinv = vf_set1(rp.inv), rq = vf_set1(rp.qmax);
  const vf nrq = vf_set1(-rp.qmax);
  for (i = lo; i + SIMD_W <= hi; i += SIMD_W) {
    vf r;
    SIMD_EF_R(r, i);
    store_i8(ef_q + i, rp.zero ? zero : simd_codec_quantize(r, rpre, rinv, rq, nrq));
  }
#undef SIMD_EF_R
  zinc_codec_ef_store_tail(kind, &p, scale, &rp, src, sdt, ef_q, old_scale, beta, omb, i, hi,
                           seed);
  ef_scales[b] = rp.scale;
}

static SIMD_FN void simd_codec_encode(int kind, int64_t block, float *scales, uint8_t *payload,
                                      const void *src, int sdt, int64_t n, int64_t b0,
                                      int64_t b1, float *ef_scales, uint8_t *ef_q, float beta,
                                      float omb, uint64_t seed) {
  const int has_ef = ef_q != NULL;
#define ENCODE_CASE(K, S, E)                                                                \
  case ((K) * 3 + (S)) * 2 + (E):                                                           \
    for (int64_t b = b0; b < b1; b++)                                                       \
      simd_codec_block((K), (E), (S), block, scales, payload, src, n, b, ef_scales, ef_q,    \
                       beta, omb, seed);                                                    \
    return;
#define ENCODE_CASES(K, S) ENCODE_CASE(K, S, 0) ENCODE_CASE(K, S, 1)
#define ENCODE_KIND(K) ENCODE_CASES(K, ZINC_F32) ENCODE_CASES(K, ZINC_BF16) ENCODE_CASES(K, ZINC_F16)
  switch ((kind * 3 + sdt) * 2 + has_ef) {
    ENCODE_KIND(ZINC_CODEC_INT8)
    ENCODE_KIND(ZINC_CODEC_INT4)
    ENCODE_KIND(ZINC_CODEC_SIGN1)
  default: /* TERN2: the reference, element by element (its hash is scalar),
            * specialised on the kind */
    if (kind == ZINC_CODEC_TERN2)
      for (int64_t b = b0; b < b1; b++)
        zinc_codec_encode_block(ZINC_CODEC_TERN2, block, scales, payload, src, sdt, n, b,
                                ef_scales, ef_q, beta, omb, seed);
    else
      for (int64_t b = b0; b < b1; b++)
        zinc_codec_encode_block(kind, block, scales, payload, src, sdt, n, b, ef_scales, ef_q,
                                beta, omb, seed);
  }
#undef ENCODE_KIND
#undef ENCODE_CASES
#undef ENCODE_CASE
}

/* ddt < 0: dst (f32) += value. */
SIMD_INLINE void simd_codec_decode_span(int kind, int ddt, int64_t block, void *dst,
                                        const float *scales, const uint8_t *payload,
                                        int64_t lo, int64_t hi) {
  const int tdt = ddt < 0 ? ZINC_F32 : ddt, acc = ddt < 0;
  int64_t i = lo;
  while (i < hi) {
    const int64_t b = i / block;
    const int64_t e = (b + 1) * block < hi ? (b + 1) * block : hi;
    const vf vs = vf_set1(scales[b]);
    int64_t head = (i + 7) & ~(int64_t)7;
    head = head < e ? head : e;
    zinc_cpu_codec_decode_tail(kind, block, dst, tdt, scales, payload, acc, i, head);
    for (i = head; i + SIMD_W <= e; i += SIMD_W) {
      vf v;
      if (kind == ZINC_CODEC_INT8)
        v = vf_mul(vf_from_i8(payload + i), vs);
      else if (kind == ZINC_CODEC_INT4)
        v = vf_mul(load_i4(payload + i / 2), vs);
      else if (kind == ZINC_CODEC_TERN2)
        v = vf_mul(load_i2(payload + i / 4), vs);
      else
        v = load_sign(payload + i / 8, vs);
      if (acc)
        vf_storeu((float *)dst + i, vf_add(vf_loadu((const float *)dst + i), v));
      else
        simd_store(dst, i, ddt, v, 0);
    }
    zinc_cpu_codec_decode_tail(kind, block, dst, tdt, scales, payload, acc, i, e);
    i = e;
  }
}

static SIMD_FN void simd_codec_decode(int kind, int64_t block, void *dst, int ddt,
                                      const float *scales, const uint8_t *payload, int64_t lo,
                                      int64_t hi, int accumulate) {
  if (accumulate)
    ddt = -1;
#define DECODE_CASE(K, D)                                                                   \
  case (K) * 4 + (D) + 1:                                                                   \
    simd_codec_decode_span((K), (D), block, dst, scales, payload, lo, hi);                  \
    return;
#define DECODE_KIND(K)                                                                      \
  DECODE_CASE(K, -1) DECODE_CASE(K, ZINC_F32) DECODE_CASE(K, ZINC_BF16) DECODE_CASE(K, ZINC_F16)
  switch (kind * 4 + ddt + 1) {
    DECODE_KIND(ZINC_CODEC_INT8)
    DECODE_KIND(ZINC_CODEC_INT4)
    DECODE_KIND(ZINC_CODEC_SIGN1)
    DECODE_KIND(ZINC_CODEC_TERN2)
  default:
    zinc_cpu_codec_decode_tail(kind, block, dst, accumulate ? ZINC_F32 : ddt, scales, payload,
                               accumulate, lo, hi);
  }
#undef DECODE_KIND
#undef DECODE_CASE
}

/* ------------------------------------------- master and state in bf16 */

/* The loops over master and state slots stored in bf16 (either or both):
 * the element functions *_elem_st of zinc_math.h with vectors. Slots load
 * and widen bf16, the arithmetic is the fp32 loop's above operation for
 * operation (the simd_*_math functions, shared by both layouts below), and
 * each new value is rounded as it is stored, to nearest even or with the
 * element's draws (stochastic).
 *
 * A store rounds in two steps: the "raw" 32-bit sum (the value's bits plus
 * 0x7fff plus the kept half's lowest bit, or plus the draw), whose upper
 * half is the bf16 value, then a shift or a merge into 16-bit lanes; the
 * value as stored is the raw sum with its lower half cleared. A NaN lane
 * takes zinc_f32_to_bf16's quiet NaN (raw = bits | 0x400000, upper half
 * (bits >> 16) | 0x40); NaNs being rare, a loop tests every value it
 * stores for one at once (vm_unord, two vectors a compare) and patches the
 * raw sums only when there is one.
 *
 * Two layouts, chosen per call:
 *  - natural: lane k of a vector holds element i + k. Used when any array
 *    (a slot, the gradient, the compute copy) is 32-bit or fp16, and for
 *    Lamb's UPDATE, whose sums of squares follow the element order.
 *  - paired: every array is bf16 (master, state, gradient, and the compute
 *    copy when there is one). One load of 2 * SIMD_W values gives two
 *    vectors without a shuffle: lane k's lower 16 bits (element i + 2k)
 *    shifted up, and its upper 16 bits (element i + 2k + 1) masked; the
 *    results go back with one shift and one blend (vi_merge_bf16), where
 *    the natural layout widens and packs across 128-bit lanes. Elements
 *    are independent, so the order they are computed in changes no bit;
 *    each draw is that of its element's global index.
 *
 * The draws of a vector are zinc_sr_draw's for its elements' global
 * indices: the span never crosses a multiple of 2^32 (cpu_kernels.c cuts it
 * there; Lamb's UPDATE takes the scalar path for a block that does), so
 * the index's upper half and the stream bases are fixed for the span. Each
 * ISA file defines, besides the macros above:
 *   vi_set1 vi_xor vi_and vi_or vi_add vi_srli vi_slli vi_mullo
 *   vi_iota (0, 1, ..)  vf_as_vi vi_as_vf (bit casts)
 *   vi_pack_u16(b)      the lanes' lower halves as a vh
 *   vi_loadu vi_storeu vi_stream   2 * SIMD_W bf16 values (vi_stream: at
 *                       an address aligned to their size)
 *   vi_merge_bf16(lo, hi)  per 32-bit lane: lo's upper half in the lower
 *                       half, hi's upper half kept
 *   vm vm_unord(a, b)   the lanes where a or b is NaN; vm_or, vm_any (any
 *                       lane set), vi_select(m, a, b) (b where m, else a) */

SIMD_INLINE vi simd_mix32(vi x) { /* zinc_sr_mix32 */
  x = vi_xor(x, vi_srli(x, 16));
  x = vi_mullo(x, vi_set1(0x21f0aaadu));
  x = vi_xor(x, vi_srli(x, 15));
  x = vi_mullo(x, vi_set1(0x735a2d97u));
  return vi_xor(x, vi_srli(x, 15));
}

/* The draws of a span at global index idx0 (fixed upper half). */
typedef struct {
  vi base0, base1; /* zinc_sr_base of streams 0 and 1 */
  uint32_t lo0;    /* lower half of idx0 */
} simd_sr;

SIMD_INLINE simd_sr simd_sr_init(const zinc_opt_store *st, int64_t idx0) {
  simd_sr s;
  uint64_t u = (uint64_t)idx0;
  s.base0 = vi_set1(zinc_sr_base(st->key, (uint32_t)(u >> 32), 0));
  s.base1 = vi_set1(zinc_sr_base(st->key, (uint32_t)(u >> 32), 1));
  s.lo0 = (uint32_t)u;
  return s;
}

/* h_s of elements i .. i + SIMD_W - 1 of the span (zinc_sr_draw). */
SIMD_INLINE vi simd_sr_hash(const simd_sr *s, int64_t i, int stream) {
  vi idx = vi_add(vi_set1(s->lo0 + (uint32_t)i), vi_iota());
  return simd_mix32(vi_xor(idx, stream ? s->base1 : s->base0));
}

/* h_s of the even (odd 0) or odd (odd 1) elements of the pair at i:
 * elements i + 2k + odd, k = 0 .. SIMD_W - 1. */
SIMD_INLINE vi simd_sr_hash_pair(const simd_sr *s, int64_t i, int stream, int odd) {
  vi idx = vi_add(vi_set1(s->lo0 + (uint32_t)i + (uint32_t)odd), vi_add(vi_iota(), vi_iota()));
  return simd_mix32(vi_xor(idx, stream ? s->base1 : s->base0));
}

/* A slot's 16-bit draw from its stream's hash (zinc_sr_draw): master and
 * exp_avg_sq the lower half, exp_avg the upper half. */
#define SIMD_DRAW_LO(h) vi_and((h), vi_set1(0xffff))
#define SIMD_DRAW_HI(h) vi_srli((h), 16)

/* The raw sum of x rounded to nearest even (sr 0) or with the draw r. */
SIMD_INLINE vi simd_bf16_raw(vf x, int sr, vi r) {
  vi u = vf_as_vi(x);
  if (sr)
    return vi_add(u, r);
  return vi_add(u, vi_add(vi_and(vi_srli(u, 16), vi_set1(1)), vi_set1(0x7fff)));
}

/* The raw sum with x's NaN lanes quieted as zinc_f32_to_bf16 does. */
SIMD_INLINE vi simd_bf16_raw_nan(vf x, vi raw) {
  return vi_select(vm_unord(x, x), raw, vi_or(vf_as_vi(x), vi_set1(0x400000)));
}

/* The value as stored: the raw sum's upper half, widened. */
SIMD_INLINE vf simd_bf16_stored(vi raw) {
  return vi_as_vf(vi_and(raw, vi_set1(0xffff0000u)));
}

/* The even and odd elements of 2 * SIMD_W bf16 values (paired layout). */
SIMD_INLINE vf simd_bf16_even(vi b) { return vi_as_vf(vi_slli(b, 16)); }
SIMD_INLINE vf simd_bf16_odd(vi b) { return vi_as_vf(vi_and(b, vi_set1(0xffff0000u))); }

SIMD_INLINE vf simd_slot_load(const void *base, int64_t i, int bf16) {
  return bf16 ? vf_load_bf16((const uint16_t *)base + i) : vf_loadu((const float *)base + i);
}

/* Stores x to a slot (bf16 rounded to nearest even, or with the draws r
 * when sr) and returns it as stored (natural layout). */
SIMD_INLINE vf simd_slot_store(void *base, int64_t i, int bf16, vf x, int sr, vi r) {
  if (!bf16) {
    vf_storeu((float *)base + i, x);
    return x;
  }
  vi raw = simd_bf16_raw(x, sr, r);
  if (ZINC_UNLIKELY(vm_any(vm_unord(x, x))))
    raw = simd_bf16_raw_nan(x, raw);
  vh_storeu((uint16_t *)base + i, vi_pack_u16(vi_srli(raw, 16)));
  return simd_bf16_stored(raw);
}

/* The span's storage with mb, sb (compile-time constants at every call)
 * in place of st's, so that the scalar tails fold their branches too. */
SIMD_INLINE zinc_opt_store simd_store_of(const zinc_opt_store *st, int mb, int sb) {
  zinc_opt_store s = *st;
  s.master_bf16 = mb;
  s.state_bf16 = sb;
  return s;
}

/* The paired layout applies: master, state, gradient (gdt < 0: none read)
 * and the compute copy (odt < 0: none) all bf16. */
SIMD_INLINE int simd_paired(const zinc_opt_store *st, int gdt, int odt) {
  return st->master_bf16 && st->state_bf16 && (gdt < 0 || gdt == ZINC_BF16) &&
         (odt < 0 || odt == ZINC_BF16);
}

/* As simd_stream_peel for the paired layout's bf16 compute copy (stores of
 * 2 * SIMD_W values). */
SIMD_INLINE int64_t simd_pair_stream_peel(const uint16_t *out, int64_t n) {
  if (!out || n < SIMD_STREAM_MIN)
    return -1;
  uintptr_t vb = 2 * SIMD_W * 2, a = (uintptr_t)out;
  if (a % 2)
    return -1;
  return (int64_t)(((vb - a % vb) % vb) / 2);
}

/* The master as stored, merged, to p and to the compute copy. */
SIMD_INLINE void simd_pair_store_master(uint16_t *p, uint16_t *out, int64_t i, vi pw,
                                        int has_out, int stream) {
  vi_storeu(p + i, pw);
  if (has_out) {
    if (stream)
      vi_stream(out + i, pw);
    else
      vi_storeu(out + i, pw);
  }
}

/* The (master, state) storage pairs a loop is specialised for: CASE(MB, SB)
 * for the three pairs with a bf16 slot; the switch key is MB * 2 + SB. */
#define SIMD_EVERY_BF16_STORE(CASE) CASE(0, 1) CASE(1, 0) CASE(1, 1)

/* The paired loops are specialised for (compute copy, stochastic): CASE(O,
 * SR) for O none (0) or bf16 (1); the switch key is O * 2 + SR. */
#define SIMD_EVERY_PAIR_CASE(CASE) CASE(0, 0) CASE(0, 1) CASE(1, 0) CASE(1, 1)

/* ------------------------------------------------------- Adam, bf16 slots */

typedef struct {
  vf grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, inv_sqrt_bc2, step_size;
  vf weight_decay, decay_factor;
  int l2, decoupled;
} simd_adam_k;

SIMD_INLINE simd_adam_k simd_adam_k_of(const zinc_opt_coef *c, int decay) {
  simd_adam_k k;
  k.grad_scale = vf_set1(c->grad_scale);
  k.beta1 = vf_set1(c->beta1);
  k.one_minus_beta1 = vf_set1(c->one_minus_beta1);
  k.beta2 = vf_set1(c->beta2);
  k.one_minus_beta2 = vf_set1(c->one_minus_beta2);
  k.eps = vf_set1(c->eps);
  k.inv_sqrt_bc2 = vf_set1(c->inv_sqrt_bc2);
  k.step_size = vf_set1(c->step_size);
  k.weight_decay = vf_set1(c->weight_decay);
  k.decay_factor = vf_set1(c->decay_factor);
  k.l2 = decay && !c->adamw;
  k.decoupled = decay && c->adamw;
  return k;
}

/* zinc_adam_elem with vectors (g: the gradient as loaded). */
SIMD_INLINE void simd_adam_math(const simd_adam_k *k, vf g, vf *p, vf *m, vf *v) {
  vf pv = *p;
  g = vf_mul(g, k->grad_scale);
  if (k->l2)
    g = vf_fmadd(k->weight_decay, pv, g);
  vf mv = vf_fmadd(k->beta1, *m, vf_mul(k->one_minus_beta1, g));
  vf vv = vf_fmadd(k->beta2, *v, vf_mul(vf_mul(k->one_minus_beta2, g), g));
  vf d = vf_fmadd(vf_sqrt(vv), k->inv_sqrt_bc2, k->eps);
  if (k->decoupled)
    pv = vf_mul(pv, k->decay_factor);
  *p = vf_fnmadd(k->step_size, vf_div(mv, d), pv);
  *m = mv;
  *v = vv;
}

SIMD_INLINE void simd_adam_st_span(const zinc_opt_coef *c, int decay, const zinc_opt_store *st0,
                                   int mb, int sb, void *p, void *m, void *v, const void *g,
                                   int gdt, void *out, int odt, int64_t idx0, int64_t n) {
  const simd_adam_k k = simd_adam_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = simd_stream_peel(out, odt, n); /* as in simd_adam_span */
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adam_st_tail(c, decay, &st, p, m, v, g, gdt, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = simd_slot_load(p, i, mb), mv = simd_slot_load(m, i, sb);
    vf vv = simd_slot_load(v, i, sb);
    simd_adam_math(&k, simd_load(g, i, gdt), &pv, &mv, &vv);
    vi h0 = vi_set1(0), h1 = vi_set1(0);
    if (sr) {
      h0 = simd_sr_hash(&draws, i, 0);
      if (sb)
        h1 = simd_sr_hash(&draws, i, 1);
    }
    simd_slot_store(m, i, sb, mv, sr, SIMD_DRAW_HI(h0));
    simd_slot_store(v, i, sb, vv, sr, SIMD_DRAW_LO(h1));
    pv = simd_slot_store(p, i, mb, pv, sr, SIMD_DRAW_LO(h0));
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_adam_st_tail(c, decay, &st, p, m, v, g, gdt, out, odt, idx0, i, n);
}

/* Every array bf16 (simd_paired); has_out and sr are constants. */
SIMD_INLINE void simd_adam_pair_span(const zinc_opt_coef *c, int decay,
                                     const zinc_opt_store *st0, uint16_t *p, uint16_t *m,
                                     uint16_t *v, const uint16_t *g, uint16_t *out, int has_out,
                                     int sr, int64_t idx0, int64_t n) {
  const simd_adam_k k = simd_adam_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, 1, 1);
  const int odt = has_out ? ZINC_BF16 : -1;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = has_out ? simd_pair_stream_peel(out, n) : -1;
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adam_st_tail(c, decay, &st, p, m, v, g, ZINC_BF16, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + 2 * SIMD_W <= n; i += 2 * SIMD_W) {
    vi gb = vi_loadu(g + i), pb = vi_loadu(p + i), mb = vi_loadu(m + i), vb = vi_loadu(v + i);
    vf pe = simd_bf16_even(pb), me = simd_bf16_even(mb), ve = simd_bf16_even(vb);
    vf po = simd_bf16_odd(pb), mo = simd_bf16_odd(mb), vo = simd_bf16_odd(vb);
    simd_adam_math(&k, simd_bf16_even(gb), &pe, &me, &ve);
    simd_adam_math(&k, simd_bf16_odd(gb), &po, &mo, &vo);
    vi h0e = vi_set1(0), h0o = h0e, h1e = h0e, h1o = h0e;
    if (sr) {
      h0e = simd_sr_hash_pair(&draws, i, 0, 0);
      h0o = simd_sr_hash_pair(&draws, i, 0, 1);
      h1e = simd_sr_hash_pair(&draws, i, 1, 0);
      h1o = simd_sr_hash_pair(&draws, i, 1, 1);
    }
    vi rme = simd_bf16_raw(me, sr, SIMD_DRAW_HI(h0e));
    vi rmo = simd_bf16_raw(mo, sr, SIMD_DRAW_HI(h0o));
    vi rve = simd_bf16_raw(ve, sr, SIMD_DRAW_LO(h1e));
    vi rvo = simd_bf16_raw(vo, sr, SIMD_DRAW_LO(h1o));
    vi rpe = simd_bf16_raw(pe, sr, SIMD_DRAW_LO(h0e));
    vi rpo = simd_bf16_raw(po, sr, SIMD_DRAW_LO(h0o));
    if (ZINC_UNLIKELY(vm_any(vm_or(vm_or(vm_unord(pe, po), vm_unord(me, mo)), vm_unord(ve, vo))))) {
      rme = simd_bf16_raw_nan(me, rme);
      rmo = simd_bf16_raw_nan(mo, rmo);
      rve = simd_bf16_raw_nan(ve, rve);
      rvo = simd_bf16_raw_nan(vo, rvo);
      rpe = simd_bf16_raw_nan(pe, rpe);
      rpo = simd_bf16_raw_nan(po, rpo);
    }
    vi_storeu(m + i, vi_merge_bf16(rme, rmo));
    vi_storeu(v + i, vi_merge_bf16(rve, rvo));
    simd_pair_store_master(p, out, i, vi_merge_bf16(rpe, rpo), has_out, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_adam_st_tail(c, decay, &st, p, m, v, g, ZINC_BF16, out, odt, idx0, i, n);
}

static SIMD_FN void simd_adam_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                                 void *p, void *m, void *v, const void *g, int gdt, void *out,
                                 int odt, int64_t idx0, int64_t n) {
  if (!out)
    odt = -1;
  if (simd_paired(st, gdt, odt)) {
#define ADAM_PAIR_CASE(O, SR)                                                              \
  case (O) * 2 + (SR):                                                                     \
    simd_adam_pair_span(c, decay, st, p, m, v, g, (O) ? out : NULL, (O), (SR), idx0, n);   \
    return;
    switch ((odt >= 0) * 2 + st->stochastic) {
      SIMD_EVERY_PAIR_CASE(ADAM_PAIR_CASE)
    }
#undef ADAM_PAIR_CASE
  }
#define ADAM_ST_CASE(MB, SB)                                                               \
  case (MB) * 2 + (SB):                                                                    \
    simd_adam_st_span(c, decay, st, (MB), (SB), p, m, v, g, gdt, out, odt, idx0, n);       \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(ADAM_ST_CASE)
  default:
    zinc_cpu_adam_st_tail(c, decay, st, p, m, v, g, gdt, out, odt, idx0, 0, n);
  }
#undef ADAM_ST_CASE
}

/* ------------------------------------------------------- Lion, bf16 slots */

typedef struct {
  vf grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, decay_factor;
  int decay;
} simd_lion_k;

SIMD_INLINE simd_lion_k simd_lion_k_of(const zinc_opt_coef *c, int decay) {
  simd_lion_k k;
  k.grad_scale = vf_set1(c->grad_scale);
  k.beta1 = vf_set1(c->beta1);
  k.one_minus_beta1 = vf_set1(c->one_minus_beta1);
  k.beta2 = vf_set1(c->beta2);
  k.one_minus_beta2 = vf_set1(c->one_minus_beta2);
  k.step_size = vf_set1(c->step_size);
  k.decay_factor = vf_set1(c->decay_factor);
  k.decay = decay;
  return k;
}

/* zinc_lion_elem with vectors. */
SIMD_INLINE void simd_lion_math(const simd_lion_k *k, vf g, vf *p, vf *m) {
  vf pv = *p;
  g = vf_mul(g, k->grad_scale);
  vf cv = vf_fmadd(k->beta1, *m, vf_mul(k->one_minus_beta1, g));
  if (k->decay)
    pv = vf_mul(pv, k->decay_factor);
  *p = vf_sub(pv, vf_copysign(k->step_size, cv));
  *m = vf_fmadd(k->beta2, *m, vf_mul(k->one_minus_beta2, g));
}

SIMD_INLINE void simd_lion_st_span(const zinc_opt_coef *c, int decay, const zinc_opt_store *st0,
                                   int mb, int sb, void *p, void *m, const void *g, int gdt,
                                   void *out, int odt, int64_t idx0, int64_t n) {
  const simd_lion_k k = simd_lion_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = simd_stream_peel(out, odt, n);
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lion_st_tail(c, decay, &st, p, m, g, gdt, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = simd_slot_load(p, i, mb), mv = simd_slot_load(m, i, sb);
    simd_lion_math(&k, simd_load(g, i, gdt), &pv, &mv);
    vi h0 = sr ? simd_sr_hash(&draws, i, 0) : vi_set1(0);
    simd_slot_store(m, i, sb, mv, sr, SIMD_DRAW_HI(h0));
    pv = simd_slot_store(p, i, mb, pv, sr, SIMD_DRAW_LO(h0));
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lion_st_tail(c, decay, &st, p, m, g, gdt, out, odt, idx0, i, n);
}

SIMD_INLINE void simd_lion_pair_span(const zinc_opt_coef *c, int decay,
                                     const zinc_opt_store *st0, uint16_t *p, uint16_t *m,
                                     const uint16_t *g, uint16_t *out, int has_out, int sr,
                                     int64_t idx0, int64_t n) {
  const simd_lion_k k = simd_lion_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, 1, 1);
  const int odt = has_out ? ZINC_BF16 : -1;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = has_out ? simd_pair_stream_peel(out, n) : -1;
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lion_st_tail(c, decay, &st, p, m, g, ZINC_BF16, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + 2 * SIMD_W <= n; i += 2 * SIMD_W) {
    vi gb = vi_loadu(g + i), pb = vi_loadu(p + i), mb = vi_loadu(m + i);
    vf pe = simd_bf16_even(pb), me = simd_bf16_even(mb);
    vf po = simd_bf16_odd(pb), mo = simd_bf16_odd(mb);
    simd_lion_math(&k, simd_bf16_even(gb), &pe, &me);
    simd_lion_math(&k, simd_bf16_odd(gb), &po, &mo);
    vi h0e = vi_set1(0), h0o = h0e;
    if (sr) {
      h0e = simd_sr_hash_pair(&draws, i, 0, 0);
      h0o = simd_sr_hash_pair(&draws, i, 0, 1);
    }
    vi rme = simd_bf16_raw(me, sr, SIMD_DRAW_HI(h0e));
    vi rmo = simd_bf16_raw(mo, sr, SIMD_DRAW_HI(h0o));
    vi rpe = simd_bf16_raw(pe, sr, SIMD_DRAW_LO(h0e));
    vi rpo = simd_bf16_raw(po, sr, SIMD_DRAW_LO(h0o));
    if (ZINC_UNLIKELY(vm_any(vm_or(vm_unord(pe, po), vm_unord(me, mo))))) {
      rme = simd_bf16_raw_nan(me, rme);
      rmo = simd_bf16_raw_nan(mo, rmo);
      rpe = simd_bf16_raw_nan(pe, rpe);
      rpo = simd_bf16_raw_nan(po, rpo);
    }
    vi_storeu(m + i, vi_merge_bf16(rme, rmo));
    simd_pair_store_master(p, out, i, vi_merge_bf16(rpe, rpo), has_out, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lion_st_tail(c, decay, &st, p, m, g, ZINC_BF16, out, odt, idx0, i, n);
}

static SIMD_FN void simd_lion_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                                 void *p, void *m, const void *g, int gdt, void *out, int odt,
                                 int64_t idx0, int64_t n) {
  if (!out)
    odt = -1;
  if (simd_paired(st, gdt, odt)) {
#define LION_PAIR_CASE(O, SR)                                                              \
  case (O) * 2 + (SR):                                                                     \
    simd_lion_pair_span(c, decay, st, p, m, g, (O) ? out : NULL, (O), (SR), idx0, n);      \
    return;
    switch ((odt >= 0) * 2 + st->stochastic) {
      SIMD_EVERY_PAIR_CASE(LION_PAIR_CASE)
    }
#undef LION_PAIR_CASE
  }
#define LION_ST_CASE(MB, SB)                                                               \
  case (MB) * 2 + (SB):                                                                    \
    simd_lion_st_span(c, decay, st, (MB), (SB), p, m, g, gdt, out, odt, idx0, n);          \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(LION_ST_CASE)
  default:
    zinc_cpu_lion_st_tail(c, decay, st, p, m, g, gdt, out, odt, idx0, 0, n);
  }
#undef LION_ST_CASE
}

/* ---------------------------------------------------- Adagrad, bf16 slots */

typedef struct {
  vf grad_scale, weight_decay, eps, step_size;
  int decay;
} simd_adagrad_k;

SIMD_INLINE simd_adagrad_k simd_adagrad_k_of(const zinc_opt_coef *c, int decay) {
  simd_adagrad_k k;
  k.grad_scale = vf_set1(c->grad_scale);
  k.weight_decay = vf_set1(c->weight_decay);
  k.eps = vf_set1(c->eps);
  k.step_size = vf_set1(c->step_size);
  k.decay = decay;
  return k;
}

/* zinc_adagrad_elem with vectors. */
SIMD_INLINE void simd_adagrad_math(const simd_adagrad_k *k, vf g, vf *p, vf *s) {
  vf pv = *p;
  g = vf_mul(g, k->grad_scale);
  if (k->decay)
    g = vf_fmadd(k->weight_decay, pv, g);
  vf sv = vf_fmadd(g, g, *s);
  *p = vf_fnmadd(k->step_size, vf_div(g, vf_add(vf_sqrt(sv), k->eps)), pv);
  *s = sv;
}

SIMD_INLINE void simd_adagrad_st_span(const zinc_opt_coef *c, int decay,
                                      const zinc_opt_store *st0, int mb, int sb, void *p,
                                      void *s, const void *g, int gdt, void *out, int odt,
                                      int64_t idx0, int64_t n) {
  const simd_adagrad_k k = simd_adagrad_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = simd_stream_peel(out, odt, n);
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adagrad_st_tail(c, decay, &st, p, s, g, gdt, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = simd_slot_load(p, i, mb), sv = simd_slot_load(s, i, sb);
    simd_adagrad_math(&k, simd_load(g, i, gdt), &pv, &sv);
    vi h0 = sr && mb ? simd_sr_hash(&draws, i, 0) : vi_set1(0);
    vi h1 = sr && sb ? simd_sr_hash(&draws, i, 1) : vi_set1(0);
    simd_slot_store(s, i, sb, sv, sr, SIMD_DRAW_LO(h1));
    pv = simd_slot_store(p, i, mb, pv, sr, SIMD_DRAW_LO(h0));
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_adagrad_st_tail(c, decay, &st, p, s, g, gdt, out, odt, idx0, i, n);
}

SIMD_INLINE void simd_adagrad_pair_span(const zinc_opt_coef *c, int decay,
                                        const zinc_opt_store *st0, uint16_t *p, uint16_t *s,
                                        const uint16_t *g, uint16_t *out, int has_out, int sr,
                                        int64_t idx0, int64_t n) {
  const simd_adagrad_k k = simd_adagrad_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, 1, 1);
  const int odt = has_out ? ZINC_BF16 : -1;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = has_out ? simd_pair_stream_peel(out, n) : -1;
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_adagrad_st_tail(c, decay, &st, p, s, g, ZINC_BF16, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + 2 * SIMD_W <= n; i += 2 * SIMD_W) {
    vi gb = vi_loadu(g + i), pb = vi_loadu(p + i), sb = vi_loadu(s + i);
    vf pe = simd_bf16_even(pb), se = simd_bf16_even(sb);
    vf po = simd_bf16_odd(pb), so = simd_bf16_odd(sb);
    simd_adagrad_math(&k, simd_bf16_even(gb), &pe, &se);
    simd_adagrad_math(&k, simd_bf16_odd(gb), &po, &so);
    vi h0e = vi_set1(0), h0o = h0e, h1e = h0e, h1o = h0e;
    if (sr) {
      h0e = simd_sr_hash_pair(&draws, i, 0, 0);
      h0o = simd_sr_hash_pair(&draws, i, 0, 1);
      h1e = simd_sr_hash_pair(&draws, i, 1, 0);
      h1o = simd_sr_hash_pair(&draws, i, 1, 1);
    }
    vi rse = simd_bf16_raw(se, sr, SIMD_DRAW_LO(h1e));
    vi rso = simd_bf16_raw(so, sr, SIMD_DRAW_LO(h1o));
    vi rpe = simd_bf16_raw(pe, sr, SIMD_DRAW_LO(h0e));
    vi rpo = simd_bf16_raw(po, sr, SIMD_DRAW_LO(h0o));
    if (ZINC_UNLIKELY(vm_any(vm_or(vm_unord(pe, po), vm_unord(se, so))))) {
      rse = simd_bf16_raw_nan(se, rse);
      rso = simd_bf16_raw_nan(so, rso);
      rpe = simd_bf16_raw_nan(pe, rpe);
      rpo = simd_bf16_raw_nan(po, rpo);
    }
    vi_storeu(s + i, vi_merge_bf16(rse, rso));
    simd_pair_store_master(p, out, i, vi_merge_bf16(rpe, rpo), has_out, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_adagrad_st_tail(c, decay, &st, p, s, g, ZINC_BF16, out, odt, idx0, i, n);
}

static SIMD_FN void simd_adagrad_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                                    void *p, void *s, const void *g, int gdt, void *out,
                                    int odt, int64_t idx0, int64_t n) {
  if (!out)
    odt = -1;
  if (simd_paired(st, gdt, odt)) {
#define ADAGRAD_PAIR_CASE(O, SR)                                                           \
  case (O) * 2 + (SR):                                                                     \
    simd_adagrad_pair_span(c, decay, st, p, s, g, (O) ? out : NULL, (O), (SR), idx0, n);   \
    return;
    switch ((odt >= 0) * 2 + st->stochastic) {
      SIMD_EVERY_PAIR_CASE(ADAGRAD_PAIR_CASE)
    }
#undef ADAGRAD_PAIR_CASE
  }
#define ADAGRAD_ST_CASE(MB, SB)                                                            \
  case (MB) * 2 + (SB):                                                                    \
    simd_adagrad_st_span(c, decay, st, (MB), (SB), p, s, g, gdt, out, odt, idx0, n);       \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(ADAGRAD_ST_CASE)
  default:
    zinc_cpu_adagrad_st_tail(c, decay, st, p, s, g, gdt, out, odt, idx0, 0, n);
  }
#undef ADAGRAD_ST_CASE
}

/* -------------------------------------------------------- SGD, bf16 slots */

typedef struct {
  vf grad_scale, weight_decay, momentum, step_size, one_minus_dampening;
  int decay, has_buf, first, nesterov;
} simd_sgd_k;

SIMD_INLINE simd_sgd_k simd_sgd_k_of(const zinc_opt_coef *c, int decay) {
  simd_sgd_k k;
  k.grad_scale = vf_set1(c->grad_scale);
  k.weight_decay = vf_set1(c->weight_decay);
  k.momentum = vf_set1(c->momentum);
  k.step_size = vf_set1(c->step_size);
  k.one_minus_dampening = vf_set1(c->one_minus_dampening);
  k.decay = decay;
  k.has_buf = c->momentum != 0.0f;
  k.first = c->first_step;
  k.nesterov = c->nesterov;
  return k;
}

/* zinc_sgd_elem with vectors: *buf is read (unless on the first step) and
 * receives the new buffer when k->has_buf. */
SIMD_INLINE void simd_sgd_math(const simd_sgd_k *k, vf g, vf *p, vf *buf) {
  vf pv = *p;
  vf d = vf_mul(g, k->grad_scale);
  if (k->decay)
    d = vf_fmadd(k->weight_decay, pv, d);
  if (k->has_buf) {
    vf b = k->first ? d : vf_fmadd(k->momentum, *buf, vf_mul(k->one_minus_dampening, d));
    *buf = b;
    d = k->nesterov ? vf_fmadd(k->momentum, b, d) : b;
  }
  *p = vf_fnmadd(k->step_size, d, pv);
}

SIMD_INLINE void simd_sgd_st_span(const zinc_opt_coef *c, int decay, const zinc_opt_store *st0,
                                  int mb, int sb, void *p, void *buf, const void *g, int gdt,
                                  void *out, int odt, int64_t idx0, int64_t n) {
  const simd_sgd_k k = simd_sgd_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = simd_stream_peel(out, odt, n);
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_sgd_st_tail(c, decay, &st, p, buf, g, gdt, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = simd_slot_load(p, i, mb);
    vf b = k.has_buf && !k.first ? simd_slot_load(buf, i, sb) : pv;
    simd_sgd_math(&k, simd_load(g, i, gdt), &pv, &b);
    vi h0 = sr ? simd_sr_hash(&draws, i, 0) : vi_set1(0);
    if (k.has_buf)
      simd_slot_store(buf, i, sb, b, sr, SIMD_DRAW_HI(h0));
    pv = simd_slot_store(p, i, mb, pv, sr, SIMD_DRAW_LO(h0));
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_sgd_st_tail(c, decay, &st, p, buf, g, gdt, out, odt, idx0, i, n);
}

SIMD_INLINE void simd_sgd_pair_span(const zinc_opt_coef *c, int decay,
                                    const zinc_opt_store *st0, uint16_t *p, uint16_t *buf,
                                    const uint16_t *g, uint16_t *out, int has_out, int sr,
                                    int64_t idx0, int64_t n) {
  const simd_sgd_k k = simd_sgd_k_of(c, decay);
  const zinc_opt_store st = simd_store_of(st0, 1, 1);
  const int odt = has_out ? ZINC_BF16 : -1;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = has_out ? simd_pair_stream_peel(out, n) : -1;
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_sgd_st_tail(c, decay, &st, p, buf, g, ZINC_BF16, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + 2 * SIMD_W <= n; i += 2 * SIMD_W) {
    vi gb = vi_loadu(g + i), pb = vi_loadu(p + i);
    vi bb = k.has_buf && !k.first ? vi_loadu(buf + i) : pb;
    vf pe = simd_bf16_even(pb), be = simd_bf16_even(bb);
    vf po = simd_bf16_odd(pb), bo = simd_bf16_odd(bb);
    simd_sgd_math(&k, simd_bf16_even(gb), &pe, &be);
    simd_sgd_math(&k, simd_bf16_odd(gb), &po, &bo);
    vi h0e = vi_set1(0), h0o = h0e;
    if (sr) {
      h0e = simd_sr_hash_pair(&draws, i, 0, 0);
      h0o = simd_sr_hash_pair(&draws, i, 0, 1);
    }
    vi rbe = simd_bf16_raw(be, sr, SIMD_DRAW_HI(h0e));
    vi rbo = simd_bf16_raw(bo, sr, SIMD_DRAW_HI(h0o));
    vi rpe = simd_bf16_raw(pe, sr, SIMD_DRAW_LO(h0e));
    vi rpo = simd_bf16_raw(po, sr, SIMD_DRAW_LO(h0o));
    /* without a buffer be, bo are the loaded master: their NaNs patch
     * raw sums that are not stored */
    if (ZINC_UNLIKELY(vm_any(vm_or(vm_unord(pe, po), vm_unord(be, bo))))) {
      rbe = simd_bf16_raw_nan(be, rbe);
      rbo = simd_bf16_raw_nan(bo, rbo);
      rpe = simd_bf16_raw_nan(pe, rpe);
      rpo = simd_bf16_raw_nan(po, rpo);
    }
    if (k.has_buf)
      vi_storeu(buf + i, vi_merge_bf16(rbe, rbo));
    simd_pair_store_master(p, out, i, vi_merge_bf16(rpe, rpo), has_out, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_sgd_st_tail(c, decay, &st, p, buf, g, ZINC_BF16, out, odt, idx0, i, n);
}

static SIMD_FN void simd_sgd_st(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                                void *p, void *buf, const void *g, int gdt, void *out, int odt,
                                int64_t idx0, int64_t n) {
  if (!out)
    odt = -1;
  if (simd_paired(st, gdt, odt)) {
#define SGD_PAIR_CASE(O, SR)                                                               \
  case (O) * 2 + (SR):                                                                     \
    simd_sgd_pair_span(c, decay, st, p, buf, g, (O) ? out : NULL, (O), (SR), idx0, n);     \
    return;
    switch ((odt >= 0) * 2 + st->stochastic) {
      SIMD_EVERY_PAIR_CASE(SGD_PAIR_CASE)
    }
#undef SGD_PAIR_CASE
  }
#define SGD_ST_CASE(MB, SB)                                                                \
  case (MB) * 2 + (SB):                                                                    \
    simd_sgd_st_span(c, decay, st, (MB), (SB), p, buf, g, gdt, out, odt, idx0, n);         \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(SGD_ST_CASE)
  default:
    zinc_cpu_sgd_st_tail(c, decay, st, p, buf, g, gdt, out, odt, idx0, 0, n);
  }
#undef SGD_ST_CASE
}

/* ------------------------------------------------------- Lamb, bf16 slots */

/* One block, as simd_lamb_update_span; u from the moments as stored
 * (natural layout: the lanes of the sums follow the element order). */
SIMD_INLINE void simd_lamb_update_st_span(const zinc_opt_coef *c, int decay,
                                          const zinc_opt_store *st0, int mb, int sb,
                                          const void *p, void *m, void *v, const void *g,
                                          int gdt, int64_t idx0, int64_t n, double sums[2]) {
  const vf grad_scale = vf_set1(c->grad_scale);
  const vf beta1 = vf_set1(c->beta1), one_minus_beta1 = vf_set1(c->one_minus_beta1);
  const vf beta2 = vf_set1(c->beta2), one_minus_beta2 = vf_set1(c->one_minus_beta2);
  const vf eps = vf_set1(c->eps), weight_decay = vf_set1(c->weight_decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic && sb;
  const simd_sr draws = simd_sr_init(&st, idx0);
  sq_lanes w_acc, u_acc;
  sq_zero(&w_acc);
  sq_zero(&u_acc);
  int64_t i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf gv = vf_mul(simd_load(g, i, gdt), grad_scale);
    vf pv = simd_slot_load(p, i, mb);
    vf mv = vf_fmadd(beta1, simd_slot_load(m, i, sb), vf_mul(one_minus_beta1, gv));
    vf vv = vf_fmadd(beta2, simd_slot_load(v, i, sb), vf_mul(vf_mul(one_minus_beta2, gv), gv));
    vi h0 = sr ? simd_sr_hash(&draws, i, 0) : vi_set1(0);
    vi h1 = sr ? simd_sr_hash(&draws, i, 1) : vi_set1(0);
    mv = simd_slot_store(m, i, sb, mv, sr, SIMD_DRAW_HI(h0));
    vv = simd_slot_store(v, i, sb, vv, sr, SIMD_DRAW_LO(h1));
    sq_add(&w_acc, pv, i);
    sq_add(&u_acc, simd_lamb_dir(pv, mv, vv, eps, weight_decay, decay), i);
  }
  double w_lanes[ZINC_SUMSQ_LANES], u_lanes[ZINC_SUMSQ_LANES];
  sq_store(&w_acc, w_lanes);
  sq_store(&u_acc, u_lanes);
  zinc_cpu_lamb_update_st_tail(c, decay, &st, p, m, v, g, gdt, idx0, w_lanes, u_lanes, i, n);
  sums[0] = zinc_sumsq_lanes_combine(w_lanes);
  sums[1] = zinc_sumsq_lanes_combine(u_lanes);
}

static SIMD_FN void simd_lamb_update_st(const zinc_opt_coef *c, int decay,
                                        const zinc_opt_store *st, const void *p, void *m,
                                        void *v, const void *g, int gdt, int64_t idx0,
                                        int64_t n, double sums[2]) {
  uint64_t first = (uint64_t)idx0, last = first + (uint64_t)(n > 0 ? n - 1 : 0);
  if (st->stochastic && (first >> 32) != (last >> 32)) { /* the draws cross 2^32: rare */
    double w_lanes[ZINC_SUMSQ_LANES] = {0}, u_lanes[ZINC_SUMSQ_LANES] = {0};
    zinc_cpu_lamb_update_st_tail(c, decay, st, p, m, v, g, gdt, idx0, w_lanes, u_lanes, 0, n);
    sums[0] = zinc_sumsq_lanes_combine(w_lanes);
    sums[1] = zinc_sumsq_lanes_combine(u_lanes);
    return;
  }
#define LAMB_UPDATE_ST_CASE(MB, SB)                                                        \
  case (MB) * 2 + (SB):                                                                    \
    simd_lamb_update_st_span(c, decay, st, (MB), (SB), p, m, v, g, gdt, idx0, n, sums);    \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(LAMB_UPDATE_ST_CASE)
  default:
    simd_lamb_update_st_span(c, decay, st, 0, 0, p, m, v, g, gdt, idx0, n, sums);
  }
#undef LAMB_UPDATE_ST_CASE
}

SIMD_INLINE void simd_lamb_apply_st_span(const zinc_opt_coef *c, int decay, float ratio,
                                         const zinc_opt_store *st0, int mb, int sb, void *p,
                                         const void *m, const void *v, void *out, int odt,
                                         int64_t idx0, int64_t n) {
  const vf step = vf_set1(c->step_size * ratio); /* as zinc_lamb_apply_elem */
  const vf eps = vf_set1(c->eps), weight_decay = vf_set1(c->weight_decay);
  const zinc_opt_store st = simd_store_of(st0, mb, sb);
  const int sr = st.stochastic && mb;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = simd_stream_peel(out, odt, n);
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lamb_apply_st_tail(c, decay, ratio, &st, p, m, v, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + SIMD_W <= n; i += SIMD_W) {
    vf pv = simd_slot_load(p, i, mb);
    vf u = simd_lamb_dir(pv, simd_slot_load(m, i, sb), simd_slot_load(v, i, sb), eps,
                         weight_decay, decay);
    pv = vf_fnmadd(step, u, pv);
    vi h0 = sr ? simd_sr_hash(&draws, i, 0) : vi_set1(0);
    pv = simd_slot_store(p, i, mb, pv, sr, SIMD_DRAW_LO(h0));
    if (odt >= 0)
      simd_store(out, i, odt, pv, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lamb_apply_st_tail(c, decay, ratio, &st, p, m, v, out, odt, idx0, i, n);
}

SIMD_INLINE void simd_lamb_apply_pair_span(const zinc_opt_coef *c, int decay, float ratio,
                                           const zinc_opt_store *st0, uint16_t *p,
                                           const uint16_t *m, const uint16_t *v, uint16_t *out,
                                           int has_out, int sr, int64_t idx0, int64_t n) {
  const vf step = vf_set1(c->step_size * ratio); /* as zinc_lamb_apply_elem */
  const vf eps = vf_set1(c->eps), weight_decay = vf_set1(c->weight_decay);
  const zinc_opt_store st = simd_store_of(st0, 1, 1);
  const int odt = has_out ? ZINC_BF16 : -1;
  const simd_sr draws = simd_sr_init(&st, idx0);
  int64_t i = has_out ? simd_pair_stream_peel(out, n) : -1;
  const int stream = i >= 0;
  if (stream)
    zinc_cpu_lamb_apply_st_tail(c, decay, ratio, &st, p, m, v, out, odt, idx0, 0, i);
  else
    i = 0;
  for (; i + 2 * SIMD_W <= n; i += 2 * SIMD_W) {
    vi pb = vi_loadu(p + i), mb = vi_loadu(m + i), vb = vi_loadu(v + i);
    vf pe = simd_bf16_even(pb), po = simd_bf16_odd(pb);
    pe = vf_fnmadd(step, simd_lamb_dir(pe, simd_bf16_even(mb), simd_bf16_even(vb), eps,
                                       weight_decay, decay), pe);
    po = vf_fnmadd(step, simd_lamb_dir(po, simd_bf16_odd(mb), simd_bf16_odd(vb), eps,
                                       weight_decay, decay), po);
    vi h0e = vi_set1(0), h0o = h0e;
    if (sr) {
      h0e = simd_sr_hash_pair(&draws, i, 0, 0);
      h0o = simd_sr_hash_pair(&draws, i, 0, 1);
    }
    vi rpe = simd_bf16_raw(pe, sr, SIMD_DRAW_LO(h0e));
    vi rpo = simd_bf16_raw(po, sr, SIMD_DRAW_LO(h0o));
    if (ZINC_UNLIKELY(vm_any(vm_unord(pe, po)))) {
      rpe = simd_bf16_raw_nan(pe, rpe);
      rpo = simd_bf16_raw_nan(po, rpo);
    }
    simd_pair_store_master(p, out, i, vi_merge_bf16(rpe, rpo), has_out, stream);
  }
  if (stream)
    _mm_sfence();
  zinc_cpu_lamb_apply_st_tail(c, decay, ratio, &st, p, m, v, out, odt, idx0, i, n);
}

static SIMD_FN void simd_lamb_apply_st(const zinc_opt_coef *c, int decay, float ratio,
                                       const zinc_opt_store *st, void *p, const void *m,
                                       const void *v, void *out, int odt, int64_t idx0,
                                       int64_t n) {
  if (!out)
    odt = -1;
  if (simd_paired(st, -1, odt)) {
#define LAMB_APPLY_PAIR_CASE(O, SR)                                                        \
  case (O) * 2 + (SR):                                                                     \
    simd_lamb_apply_pair_span(c, decay, ratio, st, p, m, v, (O) ? out : NULL, (O), (SR),   \
                              idx0, n);                                                    \
    return;
    switch ((odt >= 0) * 2 + st->stochastic) {
      SIMD_EVERY_PAIR_CASE(LAMB_APPLY_PAIR_CASE)
    }
#undef LAMB_APPLY_PAIR_CASE
  }
#define LAMB_APPLY_ST_CASE(MB, SB)                                                         \
  case (MB) * 2 + (SB):                                                                    \
    simd_lamb_apply_st_span(c, decay, ratio, st, (MB), (SB), p, m, v, out, odt, idx0, n);  \
    return;
  switch (st->master_bf16 * 2 + st->state_bf16) {
    SIMD_EVERY_BF16_STORE(LAMB_APPLY_ST_CASE)
  default:
    zinc_cpu_lamb_apply_st_tail(c, decay, ratio, st, p, m, v, out, odt, idx0, 0, n);
  }
#undef LAMB_APPLY_ST_CASE
}
