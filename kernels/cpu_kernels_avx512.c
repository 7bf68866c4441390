/*
 * cpu_kernels_avx512.c — the AVX-512F path (16 floats per vector), built
 * with function-level target attributes so that the library still runs on
 * a CPU without AVX-512 (cpu_kernels.c only calls this after cpuid says
 * yes).
 *
 * 16-bit conversions keep zinc_math.h's bits: bf16 stores round with the
 * integer trick of zinc_f32_to_bf16 (not vcvtneps2bf16, which flushes
 * denormals); f16 goes through vcvtps2ph/vcvtph2ps, whose rounding matches
 * zinc_f32_to_f16, with NaN lanes patched to zinc_math.h's NaN encodings
 * (the hardware keeps payloads and quiets signalling NaNs differently).
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cpu_kernels_isa.h"

#define SIMD_FN __attribute__((target("avx512f,avx2,fma,f16c")))
#define SIMD_W 16
typedef __m512 vf;

#define vf_loadu(p) _mm512_loadu_ps(p)
#define vf_storeu(p, x) _mm512_storeu_ps((p), (x))
#define vf_set1(x) _mm512_set1_ps(x)
#define vf_add(a, b) _mm512_add_ps((a), (b))
#define vf_mul(a, b) _mm512_mul_ps((a), (b))
#define vf_div(a, b) _mm512_div_ps((a), (b))
#define vf_sqrt(a) _mm512_sqrt_ps(a)
#define vf_fmadd(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define vf_fnmadd(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define vf_sub(a, b) _mm512_sub_ps((a), (b))
/* |mag| with the sign bit of sgn, as copysignf (integer ops: AVX-512F has
 * no float and/or without DQ; 0xca is the bitwise select a ? b : c) */
#define vf_copysign(mag, sgn)                                                          \
  _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_set1_epi32((int)0x80000000u),   \
                                                _mm512_castps_si512(sgn),               \
                                                _mm512_castps_si512(mag), 0xca))

static inline SIMD_FN __attribute__((always_inline)) __m512i
widen_u16(const uint16_t *p) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
}

static inline SIMD_FN __attribute__((always_inline)) vf vf_load_bf16(const uint16_t *p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(widen_u16(p), 16));
}

static inline SIMD_FN __attribute__((always_inline)) vf vf_load_f16(const uint16_t *p) {
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  vf f = _mm512_cvtph_ps(h);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  if (ZINC_UNLIKELY(nan)) { /* sign | exponent ones | payload << 13, as zinc_f16_to_f32 */
    __m512i e = _mm512_cvtepu16_epi32(h);
    __m512i bits = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(e, _mm512_set1_epi32(0x8000)), 16),
                        _mm512_set1_epi32(0x7f800000)),
        _mm512_slli_epi32(_mm512_and_si512(e, _mm512_set1_epi32(0x3ff)), 13));
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
  }
  return f;
}

typedef __m256i vh; /* 16 16-bit values */
#define vh_storeu(p, h) _mm256_storeu_si256((__m256i *)(p), (h))
#define vh_stream(p, h) _mm256_stream_si256((__m256i *)(p), (h))
#define vf_stream(p, x) _mm512_stream_ps((p), (x))

static inline SIMD_FN __attribute__((always_inline)) vh vf_to_bf16(vf x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

static inline SIMD_FN __attribute__((always_inline)) vh vf_to_f16(vf x) {
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  if (ZINC_UNLIKELY(nan)) { /* sign | 0x7fc00000 converts to zinc's sign | 0x7e00 */
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    x = _mm512_mask_mov_ps(x, nan, _mm512_castsi512_ps(
                                       _mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000))));
  }
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
}

/* The canonical lanes: lane j in lo (j < 8) or hi (j >= 8); a vector of 16
 * always starts at a lane-0 element. x*x is exact in double, so fusing
 * gives the reference's bits. */
typedef struct {
  __m512d lo, hi;
} sq_lanes;

static inline SIMD_FN __attribute__((always_inline)) void sq_zero(sq_lanes *a) {
  a->lo = a->hi = _mm512_setzero_pd();
}

static inline SIMD_FN __attribute__((always_inline)) void sq_add(sq_lanes *a, vf x, int64_t i) {
  (void)i;
  __m512d xl = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  __m512d xh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  a->lo = _mm512_fmadd_pd(xl, xl, a->lo);
  a->hi = _mm512_fmadd_pd(xh, xh, a->hi);
}

static inline SIMD_FN __attribute__((always_inline)) void sq_store(const sq_lanes *a,
                                                                   double *lanes) {
  _mm512_storeu_pd(lanes, a->lo);
  _mm512_storeu_pd(lanes + 8, a->hi);
}

/* The codec primitives (see the codecs section of cpu_kernels_simd.h);
 * AVX-512F only (no DQ/BW): float bit operations go through integers. */
#define AVX512_INLINE static inline SIMD_FN __attribute__((always_inline))
#define AVX512_SIGN _mm512_set1_epi32((int)0x80000000u)
typedef __m512i vi;
#define vi_zero() _mm512_setzero_si512()
#define vi_absmax(acc, x)                                                                    \
  _mm512_max_epu32((acc), _mm512_and_si512(_mm512_castps_si512(x),                         \
                                           _mm512_set1_epi32(0x7fffffff)))
#define vi_hmax(v) ((uint32_t)_mm512_reduce_max_epu32(v))
#define vf_round(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vf_min(a, b) _mm512_min_ps((a), (b))
#define vf_max(a, b) _mm512_max_ps((a), (b))
#define vf_abs(x)                                                                            \
  _mm512_castsi512_ps(_mm512_andnot_si512(AVX512_SIGN, _mm512_castps_si512(x)))
#define vf_xor_sign(s, x)                                                                    \
  _mm512_castsi512_ps(_mm512_xor_si512(                                                    \
      _mm512_castps_si512(s), _mm512_and_si512(AVX512_SIGN, _mm512_castps_si512(x))))

/* Elements 0-7 then 8-15 into the 8 lanes, in that order. */
AVX512_INLINE void sum8_add(__m256 *acc, vf ax) {
  *acc = _mm256_add_ps(*acc, _mm512_castps512_ps256(ax));
  *acc = _mm256_add_ps(*acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ax), 1)));
}

AVX512_INLINE vf vf_from_i8(const uint8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

AVX512_INLINE void store_i8(uint8_t *p, vf y) {
  _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(y)));
}

/* Elements 2k, 2k+1 (the 32-bit halves of 64-bit lane k) -> byte k. */
AVX512_INLINE void store_i4(uint8_t *p, vf y) {
  __m512i q = _mm512_and_si512(_mm512_cvtps_epi32(y), _mm512_set1_epi32(0xf));
  q = _mm512_or_si512(q, _mm512_srli_epi64(q, 28));
  _mm_storel_epi64((__m128i *)p, _mm512_cvtepi64_epi8(q));
}

AVX512_INLINE vf load_i4(const uint8_t *p) {
  uint32_t w[2];
  memcpy(w, p, 8);
  __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)w[0])),
                                 _mm256_set1_epi32((int)w[1]), 1);
  __m512i q = _mm512_srlv_epi32(v, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12,
                                                     16, 20, 24, 28));
  q = _mm512_and_si512(q, _mm512_set1_epi32(0xf));
  q = _mm512_sub_epi32(_mm512_xor_si512(q, _mm512_set1_epi32(8)), _mm512_set1_epi32(8));
  return _mm512_cvtepi32_ps(q);
}

/* 16 TERN2 2-bit fields (4 bytes) sign-extended, as floats. */
AVX512_INLINE vf load_i2(const uint8_t *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  __m512i q = _mm512_srlv_epi32(_mm512_set1_epi32((int)w),
                                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                  24, 26, 28, 30));
  q = _mm512_srai_epi32(_mm512_slli_epi32(q, 30), 30);
  return _mm512_cvtepi32_ps(q);
}

AVX512_INLINE void store_sign(uint8_t *p, vf x) {
  uint16_t m = (uint16_t)_mm512_cmplt_epi32_mask(_mm512_castps_si512(x), _mm512_setzero_si512());
  memcpy(p, &m, 2);
}

AVX512_INLINE vf load_sign(const uint8_t *p, vf s) {
  uint16_t m;
  memcpy(&m, p, 2);
  __m512i si = _mm512_castps_si512(s);
  return _mm512_castsi512_ps(_mm512_mask_xor_epi32(si, (__mmask16)m, si, AVX512_SIGN));
}

/* The bf16-storage primitives (see its section of cpu_kernels_simd.h). */
#define vi_set1(x) _mm512_set1_epi32((int)(x))
#define vi_xor(a, b) _mm512_xor_si512((a), (b))
#define vi_and(a, b) _mm512_and_si512((a), (b))
#define vi_or(a, b) _mm512_or_si512((a), (b))
#define vi_add(a, b) _mm512_add_epi32((a), (b))
#define vi_srli(a, k) _mm512_srli_epi32((a), (k))
#define vi_slli(a, k) _mm512_slli_epi32((a), (k))
#define vi_mullo(a, b) _mm512_mullo_epi32((a), (b))
#define vi_iota() _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define vf_as_vi(x) _mm512_castps_si512(x)
#define vi_as_vf(x) _mm512_castsi512_ps(x)
#define vi_pack_u16(b) _mm512_cvtepi32_epi16(b)
#define vi_loadu(p) _mm512_loadu_si512((const void *)(p))
#define vi_storeu(p, x) _mm512_storeu_si512((void *)(p), (x))
#define vi_stream(p, x) _mm512_stream_si512((void *)(p), (x))
/* each lane's upper half from hi, its lower half from lo's upper half
 * (0xca: the bitwise select a ? b : c) */
#define vi_merge_bf16(lo, hi)                                                                \
  _mm512_ternarylogic_epi32(_mm512_set1_epi32((int)0xffff0000u), (hi),                     \
                            _mm512_srli_epi32((lo), 16), 0xca)
typedef __mmask16 vm; /* a lane mask */
#define vm_unord(a, b) _mm512_cmp_ps_mask((a), (b), _CMP_UNORD_Q)
#define vm_or(a, b) ((vm)((a) | (b)))
#define vm_any(m) ((int)(m))
#define vi_select(m, a, b) _mm512_mask_mov_epi32((a), (m), (b))

#include "kernels/cpu_kernels_simd.h"

/* Lane j of the canonical order is lane j of lo (j < 8) or of hi (j >= 8). */
static SIMD_FN double avx512_sumsq_block(const void *data, int dtype, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vf x = simd_load(data, i, dtype);
    __m512d xl = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d xh = _mm512_cvtps_pd(
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    /* x*x is exact in double, so fusing gives the reference's bits */
    lo = _mm512_fmadd_pd(xl, xl, lo);
    hi = _mm512_fmadd_pd(xh, xh, hi);
  }
  double lanes[ZINC_SUMSQ_LANES];
  _mm512_storeu_pd(lanes, lo);
  _mm512_storeu_pd(lanes + 8, hi);
  return zinc_cpu_sumsq_tail(lanes, data, dtype, i, n);
}

const zinc_cpu_isa_ops zinc_cpu_ops_avx512 = {
    .adam = simd_adam,
    .lion = simd_lion,
    .adagrad = simd_adagrad,
    .sgd = simd_sgd,
    .lamb_update = simd_lamb_update,
    .lamb_apply = simd_lamb_apply,
    .adam_st = simd_adam_st,
    .lion_st = simd_lion_st,
    .adagrad_st = simd_adagrad_st,
    .sgd_st = simd_sgd_st,
    .lamb_update_st = simd_lamb_update_st,
    .lamb_apply_st = simd_lamb_apply_st,
    .sumsq_block = avx512_sumsq_block,
    .convert = simd_convert,
    .codec_encode = simd_codec_encode,
    .codec_decode = simd_codec_decode,
};
#endif /* __x86_64__ */
