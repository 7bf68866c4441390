/*
 * comm_mpi_reduce.c — the element-wise reduction of the mpi comm: for every
 * element, the contributions of ranks 0, 1, ..., n-1 combined left to right,
 * ((x0 + x1) + x2) + x3, whatever the count or where the sources live. The
 * ZeRO stages oracle rests on this order being the only one.
 *
 * Layout: src[k] points at rank k's `count` elements (dtype), dst at the
 * result. dst may be exactly one of the sources (in-place reduce-scatter and
 * all-reduce), so results go through a block-sized local accumulator and are
 * stored only after every source of the block has been read.
 *
 * 16-bit floats are widened with zinc_math.h, accumulated in fp32 and
 * rounded once. Integer sums wrap (computed unsigned). Max and min propagate
 * NaN: a NaN anywhere makes the element NaN, so an overflow flag reduced
 * with max can never be lost.
 */
#include <string.h>

/* The loops below are element-wise (no reassociation), so vectorising them
 * cannot change a bit; GCC's -O2 cost model would leave them scalar, at
 * half the memory bandwidth. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

#include "comm/comm_mpi_impl.h"
#include "kernels/zinc_math.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Elements per block: the accumulator stays in L1 (8 KiB of doubles). */
#define REDUCE_BLOCK 1024
/* Results at least this large are written with non-temporal stores: they
 * will not fit in cache anyway, and skipping the read-for-ownership of the
 * destination saves a quarter of the memory traffic of a two-rank sum. */
#define REDUCE_STREAM_BYTES (4u << 20)

/* Store one block of results; `stream`: dst is 16-byte aligned and large. */
static void store_block(void *dst, const void *acc, size_t bytes, int stream) {
#if defined(__x86_64__)
  if (stream) {
    size_t vec = bytes / 16 * 16;
    for (size_t b = 0; b < vec; b += 16)
      _mm_stream_si128((__m128i *)((char *)dst + b),
                       _mm_load_si128((const __m128i *)((const char *)acc + b)));
    memcpy((char *)dst + vec, (const char *)acc + vec, bytes - vec);
    return;
  }
#endif
  memcpy(dst, acc, bytes);
}

/* Combine acc with the next rank's value; NaN-propagating for floats. */
#define COMBINE_SUM(a, x) ((a) + (x))
#define COMBINE_MAX(a, x) (((x) != (x) || (x) > (a)) ? (x) : (a))
#define COMBINE_MIN(a, x) (((x) != (x) || (x) < (a)) ? (x) : (a))

/* One block of a type that is its own accumulator (f32, f64, integers as
 * their unsigned twins for sums). */
#define REDUCE_NATIVE_BLOCK(T, COMBINE)                                        \
  do {                                                                         \
    _Alignas(16) T acc_[REDUCE_BLOCK];                                         \
    const T *s0_ = (const T *)src[0] + start;                                  \
    for (size_t j = 0; j < len; j++)                                           \
      acc_[j] = s0_[j];                                                        \
    for (int k = 1; k < nsrc; k++) {                                           \
      const T *sk_ = (const T *)src[k] + start;                                \
      for (size_t j = 0; j < len; j++)                                         \
        acc_[j] = COMBINE(acc_[j], sk_[j]);                                    \
    }                                                                          \
    store_block((T *)dst + start, acc_, len * sizeof(T), stream);              \
  } while (0)

#define REDUCE_NATIVE(T, UT)                                                   \
  static void reduce_##T(void *dst, const void *const *src, int nsrc,          \
                         size_t start, size_t len, zinc_comm_op op,            \
                         int stream) {                                         \
    if (op == ZINC_OP_SUM)                                                     \
      REDUCE_NATIVE_BLOCK(UT, COMBINE_SUM);                                    \
    else if (op == ZINC_OP_MAX)                                                \
      REDUCE_NATIVE_BLOCK(T, COMBINE_MAX);                                     \
    else                                                                       \
      REDUCE_NATIVE_BLOCK(T, COMBINE_MIN);                                     \
  }

REDUCE_NATIVE(float, float)
REDUCE_NATIVE(double, double)
REDUCE_NATIVE(int32_t, uint32_t)
REDUCE_NATIVE(int64_t, uint64_t)
REDUCE_NATIVE(uint8_t, uint8_t)

/* Sums, the hot path (gradients): one pass that reads every rank's stream
 * at once, 64 bytes per step, and stores each result once — 1.5x faster
 * than the blocked form at memory speed. Element-wise vector adds round
 * exactly like scalar ones, and every output vector is stored after all
 * its inputs were loaded, so dst may be one of the sources. */
static void store_vec(void *dst, const void *v, int stream) {
#if defined(__x86_64__)
  if (stream) {
    __m128i x;
    memcpy(&x, v, 16);
    _mm_stream_si128((__m128i *)dst, x);
    return;
  }
#endif
  memcpy(dst, v, 16);
}

#define SUM_FUSED(NAME, UT)                                                    \
  static void NAME(void *dst, const void *const *src, int nsrc, size_t count,  \
                   int stream) {                                               \
    typedef UT vec_t __attribute__((vector_size(16)));                         \
    const size_t per = 16 / sizeof(UT), step = 4 * per;                        \
    size_t j = 0;                                                              \
    for (; j + step <= count; j += step) {                                     \
      vec_t v[4], x;                                                           \
      const char *s0 = (const char *)src[0] + j * sizeof(UT);                  \
      memcpy(v, s0, sizeof v);                                                 \
      for (int k = 1; k < nsrc; k++) {                                         \
        const char *sk = (const char *)src[k] + j * sizeof(UT);                \
        for (int q = 0; q < 4; q++) {                                          \
          memcpy(&x, sk + q * 16, 16);                                         \
          v[q] = v[q] + x;                                                     \
        }                                                                      \
      }                                                                        \
      for (int q = 0; q < 4; q++)                                              \
        store_vec((char *)dst + j * sizeof(UT) + q * 16, &v[q], stream);       \
    }                                                                          \
    for (; j < count; j++) {                                                   \
      UT acc = ((const UT *)src[0])[j];                                        \
      for (int k = 1; k < nsrc; k++)                                           \
        acc = acc + ((const UT *)src[k])[j];                                   \
      ((UT *)dst)[j] = acc;                                                    \
    }                                                                          \
  }

SUM_FUSED(sum_f32, float)
SUM_FUSED(sum_f64, double)
SUM_FUSED(sum_u32, uint32_t)
SUM_FUSED(sum_u64, uint64_t)
SUM_FUSED(sum_u8, uint8_t)

/* bf16/f16 (dtype 1/2 for zinc_load_as_f32): widen, combine in fp32, round
 * once. */
static void reduce_half(void *dst, const void *const *src, int nsrc, size_t start,
                        size_t len, zinc_comm_op op, int dtype, int stream) {
  float acc[REDUCE_BLOCK];
  _Alignas(16) uint16_t out[REDUCE_BLOCK];
  const uint16_t *s0 = (const uint16_t *)src[0] + start;
  for (size_t j = 0; j < len; j++)
    acc[j] = zinc_load_as_f32(s0, (int64_t)j, dtype);
  for (int k = 1; k < nsrc; k++) {
    const uint16_t *sk = (const uint16_t *)src[k] + start;
    for (size_t j = 0; j < len; j++) {
      float x = zinc_load_as_f32(sk, (int64_t)j, dtype);
      acc[j] = op == ZINC_OP_SUM   ? COMBINE_SUM(acc[j], x)
               : op == ZINC_OP_MAX ? COMBINE_MAX(acc[j], x)
                                   : COMBINE_MIN(acc[j], x);
    }
  }
  for (size_t j = 0; j < len; j++)
    zinc_store_from_f32(out, (int64_t)j, dtype, acc[j]);
  store_block((uint16_t *)dst + start, out, len * sizeof(uint16_t), stream);
}

/* Everything but plain sums: the blocked form, any op and type. */
static void reduce_blocked(void *dst, const void *const *src, int nsrc, size_t count,
                           int dtype, zinc_comm_op op, int stream) {
  for (size_t start = 0; start < count; start += REDUCE_BLOCK) {
    size_t len = count - start < REDUCE_BLOCK ? count - start : REDUCE_BLOCK;
    switch (dtype) {
    case ZINC_F32: reduce_float(dst, src, nsrc, start, len, op, stream); break;
    case ZINC_DT_F64: reduce_double(dst, src, nsrc, start, len, op, stream); break;
    case ZINC_DT_I32: reduce_int32_t(dst, src, nsrc, start, len, op, stream); break;
    case ZINC_DT_I64: reduce_int64_t(dst, src, nsrc, start, len, op, stream); break;
    case ZINC_DT_U8: reduce_uint8_t(dst, src, nsrc, start, len, op, stream); break;
    case ZINC_BF16: reduce_half(dst, src, nsrc, start, len, op, 1, stream); break;
    case ZINC_F16: reduce_half(dst, src, nsrc, start, len, op, 2, stream); break;
    }
  }
}

void zinc_mpi_reduce_ranks(void *dst, const void *const *src, int nsrc, size_t count,
                           int dtype, zinc_comm_op op) {
  if (count == 0 || nsrc <= 0)
    return;
  if (nsrc == 1) {
    if (dst != src[0])
      memmove(dst, src[0], count * zinc_dt_size(dtype));
    return;
  }
  int stream = count * zinc_dt_size(dtype) >= REDUCE_STREAM_BYTES && (uintptr_t)dst % 16 == 0;
  switch (op == ZINC_OP_SUM ? dtype : -1) {
  case ZINC_F32: sum_f32(dst, src, nsrc, count, stream); break;
  case ZINC_DT_F64: sum_f64(dst, src, nsrc, count, stream); break;
  case ZINC_DT_I32: sum_u32(dst, src, nsrc, count, stream); break;
  case ZINC_DT_I64: sum_u64(dst, src, nsrc, count, stream); break;
  case ZINC_DT_U8: sum_u8(dst, src, nsrc, count, stream); break;
  default: reduce_blocked(dst, src, nsrc, count, dtype, op, stream); break;
  }
#if defined(__x86_64__)
  if (stream)
    _mm_sfence(); /* streamed stores visible before peers are told */
#endif
}
