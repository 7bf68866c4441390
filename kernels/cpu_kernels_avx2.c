/*
 * cpu_kernels_avx2.c — the AVX2 + FMA + F16C path (8 floats per vector),
 * for CPUs without AVX-512; function-level target attributes, chosen at run
 * time by cpu_kernels.c. The 16-bit conversions keep zinc_math.h's bits in
 * the same way as the AVX-512 path (see cpu_kernels_avx512.c).
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cpu_kernels_isa.h"

#define SIMD_FN __attribute__((target("avx2,fma,f16c")))
#define SIMD_W 8
typedef __m256 vf;

#define vf_loadu(p) _mm256_loadu_ps(p)
#define vf_storeu(p, x) _mm256_storeu_ps((p), (x))
#define vf_set1(x) _mm256_set1_ps(x)
#define vf_add(a, b) _mm256_add_ps((a), (b))
#define vf_mul(a, b) _mm256_mul_ps((a), (b))
#define vf_div(a, b) _mm256_div_ps((a), (b))
#define vf_sqrt(a) _mm256_sqrt_ps(a)
#define vf_fmadd(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define vf_fnmadd(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define vf_sub(a, b) _mm256_sub_ps((a), (b))
/* |mag| with the sign bit of sgn, as copysignf */
#define vf_copysign(mag, sgn)                                                          \
  _mm256_or_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), (mag)),                       \
               _mm256_and_ps(_mm256_set1_ps(-0.0f), (sgn)))

static inline SIMD_FN __attribute__((always_inline)) vf vf_load_bf16(const uint16_t *p) {
  __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 16));
}

static inline SIMD_FN __attribute__((always_inline)) vf vf_load_f16(const uint16_t *p) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  vf f = _mm256_cvtph_ps(h);
  vf nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  if (ZINC_UNLIKELY(_mm256_movemask_ps(nan))) { /* as zinc_f16_to_f32 */
    __m256i e = _mm256_cvtepu16_epi32(h);
    __m256i bits = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0x8000)), 16),
                        _mm256_set1_epi32(0x7f800000)),
        _mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0x3ff)), 13));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), nan);
  }
  return f;
}

typedef __m128i vh; /* 8 16-bit values */
#define vh_storeu(p, h) _mm_storeu_si128((__m128i *)(p), (h))
#define vh_stream(p, h) _mm_stream_si128((__m128i *)(p), (h))
#define vf_stream(p, x) _mm256_stream_ps((p), (x))

static inline SIMD_FN __attribute__((always_inline)) vh vf_to_bf16(vf x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  /* every lane is <= 0xffff, so the unsigned-saturating pack is exact */
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static inline SIMD_FN __attribute__((always_inline)) vh vf_to_f16(vf x) {
  vf nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  if (ZINC_UNLIKELY(_mm256_movemask_ps(nan))) { /* -> zinc's sign | 0x7e00 */
    __m256i sign = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32((int)0x80000000u));
    vf quiet = _mm256_castsi256_ps(_mm256_or_si256(sign, _mm256_set1_epi32(0x7fc00000)));
    x = _mm256_blendv_ps(x, quiet, nan);
  }
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
}

/* The canonical lanes, four per register: l[0] lanes 0-3 ... l[3] lanes
 * 12-15; a vector of 8 at element i fills lanes i % 16 .. i % 16 + 7. x*x
 * is exact in double, so fusing gives the reference's bits. */
typedef struct {
  __m256d l[4];
} sq_lanes;

static inline SIMD_FN __attribute__((always_inline)) void sq_zero(sq_lanes *a) {
  a->l[0] = a->l[1] = a->l[2] = a->l[3] = _mm256_setzero_pd();
}

static inline SIMD_FN __attribute__((always_inline)) void sq_add(sq_lanes *a, vf x, int64_t i) {
  __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  int h = (i & 8) ? 2 : 0;
  a->l[h] = _mm256_fmadd_pd(x0, x0, a->l[h]);
  a->l[h + 1] = _mm256_fmadd_pd(x1, x1, a->l[h + 1]);
}

static inline SIMD_FN __attribute__((always_inline)) void sq_store(const sq_lanes *a,
                                                                   double *lanes) {
  for (int k = 0; k < 4; k++)
    _mm256_storeu_pd(lanes + 4 * k, a->l[k]);
}

/* The codec primitives (see the codecs section of cpu_kernels_simd.h). */
#define AVX2_INLINE static inline SIMD_FN __attribute__((always_inline))
typedef __m256i vi;
#define vi_zero() _mm256_setzero_si256()
#define vi_absmax(acc, x)                                                                    \
  _mm256_max_epu32((acc), _mm256_and_si256(_mm256_castps_si256(x),                         \
                                           _mm256_set1_epi32(0x7fffffff)))
#define vf_round(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vf_min(a, b) _mm256_min_ps((a), (b))
#define vf_max(a, b) _mm256_max_ps((a), (b))
#define vf_abs(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (x))
#define vf_xor_sign(s, x) _mm256_xor_ps((s), _mm256_and_ps(_mm256_set1_ps(-0.0f), (x)))
#define sum8_add(acc, ax) (*(acc) = _mm256_add_ps(*(acc), (ax)))

AVX2_INLINE uint32_t vi_hmax(vi v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return (uint32_t)_mm_cvtsi128_si32(m);
}

AVX2_INLINE vf vf_from_i8(const uint8_t *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* y holds integers in [-127, 127]: the saturating packs are exact. */
AVX2_INLINE void store_i8(uint8_t *p, vf y) {
  __m256i q = _mm256_cvtps_epi32(y);
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(w, w));
}

/* Elements 2k, 2k+1 (the 32-bit halves of 64-bit lane k) -> byte k. */
AVX2_INLINE void store_i4(uint8_t *p, vf y) {
  __m256i q = _mm256_and_si256(_mm256_cvtps_epi32(y), _mm256_set1_epi32(0xf));
  q = _mm256_or_si256(q, _mm256_srli_epi64(q, 28));
  const __m256i pick = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, -1, -1);
  q = _mm256_shuffle_epi8(q, pick);
  uint32_t lo = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(q)) & 0xffffu;
  uint32_t hi = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(q, 1)) & 0xffffu;
  uint32_t w = lo | (hi << 16);
  memcpy(p, &w, 4);
}

AVX2_INLINE vf load_i4(const uint8_t *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  __m256i q = _mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  q = _mm256_and_si256(q, _mm256_set1_epi32(0xf));
  q = _mm256_sub_epi32(_mm256_xor_si256(q, _mm256_set1_epi32(8)), _mm256_set1_epi32(8));
  return _mm256_cvtepi32_ps(q);
}

/* 8 TERN2 2-bit fields (2 bytes) sign-extended, as floats. */
AVX2_INLINE vf load_i2(const uint8_t *p) {
  uint16_t w;
  memcpy(&w, p, 2);
  __m256i q = _mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
  q = _mm256_srai_epi32(_mm256_slli_epi32(q, 30), 30);
  return _mm256_cvtepi32_ps(q);
}

AVX2_INLINE void store_sign(uint8_t *p, vf x) { *p = (uint8_t)_mm256_movemask_ps(x); }

AVX2_INLINE vf load_sign(const uint8_t *p, vf s) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(*p), bit), bit);
  return _mm256_xor_ps(s, _mm256_and_ps(_mm256_castsi256_ps(set), _mm256_set1_ps(-0.0f)));
}

/* The bf16-storage primitives (see its section of cpu_kernels_simd.h). */
#define vi_set1(x) _mm256_set1_epi32((int)(x))
#define vi_xor(a, b) _mm256_xor_si256((a), (b))
#define vi_and(a, b) _mm256_and_si256((a), (b))
#define vi_or(a, b) _mm256_or_si256((a), (b))
#define vi_add(a, b) _mm256_add_epi32((a), (b))
#define vi_srli(a, k) _mm256_srli_epi32((a), (k))
#define vi_slli(a, k) _mm256_slli_epi32((a), (k))
#define vi_mullo(a, b) _mm256_mullo_epi32((a), (b))
#define vi_iota() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define vf_as_vi(x) _mm256_castps_si256(x)
#define vi_as_vf(x) _mm256_castsi256_ps(x)
/* every lane is <= 0xffff, so the unsigned-saturating pack is exact */
#define vi_pack_u16(b) _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256((b), 1))
#define vi_loadu(p) _mm256_loadu_si256((const __m256i *)(p))
#define vi_storeu(p, x) _mm256_storeu_si256((__m256i *)(p), (x))
#define vi_stream(p, x) _mm256_stream_si256((__m256i *)(p), (x))
/* the odd 16-bit words (each lane's upper half) from hi, the even ones
 * from lo's upper halves shifted down */
#define vi_merge_bf16(lo, hi) _mm256_blend_epi16(_mm256_srli_epi32((lo), 16), (hi), 0xaa)
typedef __m256 vm; /* a lane mask, all ones or zero per lane */
#define vm_unord(a, b) _mm256_cmp_ps((a), (b), _CMP_UNORD_Q)
#define vm_or(a, b) _mm256_or_ps((a), (b))
#define vm_any(m) _mm256_movemask_ps(m)
#define vi_select(m, a, b) _mm256_blendv_epi8((a), (b), _mm256_castps_si256(m))

#include "kernels/cpu_kernels_simd.h"

/* Lanes 0-3, 4-7, 8-11, 12-15 of the canonical order in l0, l1, l2, l3. */
static SIMD_FN double avx2_sumsq_block(const void *data, int dtype, int64_t n) {
  __m256d l0 = _mm256_setzero_pd(), l1 = l0, l2 = l0, l3 = l0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vf a = simd_load(data, i, dtype), b = simd_load(data, i + 8, dtype);
    __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
    __m256d a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(b));
    __m256d b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
    /* x*x is exact in double, so fusing gives the reference's bits */
    l0 = _mm256_fmadd_pd(a0, a0, l0);
    l1 = _mm256_fmadd_pd(a1, a1, l1);
    l2 = _mm256_fmadd_pd(b0, b0, l2);
    l3 = _mm256_fmadd_pd(b1, b1, l3);
  }
  double lanes[ZINC_SUMSQ_LANES];
  _mm256_storeu_pd(lanes, l0);
  _mm256_storeu_pd(lanes + 4, l1);
  _mm256_storeu_pd(lanes + 8, l2);
  _mm256_storeu_pd(lanes + 12, l3);
  return zinc_cpu_sumsq_tail(lanes, data, dtype, i, n);
}

const zinc_cpu_isa_ops zinc_cpu_ops_avx2 = {
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
    .sumsq_block = avx2_sumsq_block,
    .convert = simd_convert,
    .codec_encode = simd_codec_encode,
    .codec_decode = simd_codec_decode,
};
#endif /* __x86_64__ */
