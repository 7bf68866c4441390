/*
 * comm_mpi_reduce.c — the element-wise reduction of the mpi comm: for every
 * element, the contributions of ranks 0, 1, ..., n-1 combined in the
 * canonical tree order (comm.h): T(lo, hi) = T(lo, mid) + T(mid, hi) with
 * mid = lo + the largest power of two strictly below hi - lo, so
 * (x0 + x1) + x2 at three ranks, (x0 + x1) + (x2 + x3) at four,
 * ((x0 + x1) + (x2 + x3)) + x4 at five — whatever the count or where the
 * sources live. A block of ranks whose size is a power of two and whose
 * first rank is a multiple of it is a subtree, so a node holding such a
 * block can add its ranks first and send one partial (comm_mpi_hier.c)
 * without changing a bit. The ZeRO stages oracle rests on this order being
 * the only one. The tree is evaluated on a small stack in postfix order
 * (tree_plan), max and min too (max(+0, -0) depends on the order).
 *
 * Layout: src[k] points at rank k's `count` elements (dtype), dst at the
 * result. dst may be exactly one of the sources (in-place reduce-scatter and
 * all-reduce), so results go through a block-sized local accumulator and are
 * stored only after every source of the block has been read.
 *
 * 16-bit floats are widened with zinc_math.h, accumulated in fp32 and
 * rounded once; zinc_mpi_reduce_wide reads or writes fp32 partials of them
 * instead, so that a sum split over two levels still rounds once. Integer sums wrap (computed unsigned). Max and min propagate
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

/* --------------------------------------------------------- the tree */

/* The postfix form of the canonical tree over `nsrc` leaves: after leaf k
 * is pushed, merges[k] times the two top entries are combined (left +
 * right). T(lo, hi) = T(lo, mid) + T(mid, hi), mid = lo + the largest power
 * of two below hi - lo; a subtree's merges all follow its last leaf. */
static int pow2_below(int n) { /* n >= 2 */
  int p = 1;
  while (2 * p < n)
    p *= 2;
  return p;
}

static void tree_plan(int lo, int hi, uint8_t *merges) {
  if (hi - lo < 2)
    return;
  int mid = lo + pow2_below(hi - lo);
  tree_plan(lo, mid, merges);
  tree_plan(mid, hi, merges);
  merges[hi - 1]++;
}

/* Entries the evaluation stack can hold: one per tree level plus one. */
static int tree_depth(int nsrc) {
  int d = 1;
  while ((1 << (d - 1)) < nsrc)
    d++;
  return d + 1;
}

/* Combine two partial results; NaN-propagating for floats. */
#define COMBINE_SUM(a, x) ((a) + (x))
#define COMBINE_MAX(a, x) (((x) != (x) || (x) > (a)) ? (x) : (a))
#define COMBINE_MIN(a, x) (((x) != (x) || (x) < (a)) ? (x) : (a))

/* One block of a type that is its own accumulator (f32, f64, integers as
 * their unsigned twins for sums), evaluated on a stack of blocks. */
#define REDUCE_NATIVE_BLOCK(T, COMBINE)                                        \
  do {                                                                         \
    _Alignas(16) T acc_[depth][REDUCE_BLOCK];                                  \
    int sp_ = 0;                                                               \
    for (int k = 0; k < nsrc; k++) {                                           \
      const T *sk_ = (const T *)src[k] + start;                                \
      for (size_t j = 0; j < len; j++)                                         \
        acc_[sp_][j] = sk_[j];                                                 \
      sp_++;                                                                   \
      for (int m_ = 0; m_ < merges[k]; m_++, sp_--)                            \
        for (size_t j = 0; j < len; j++)                                       \
          acc_[sp_ - 2][j] = COMBINE(acc_[sp_ - 2][j], acc_[sp_ - 1][j]);      \
    }                                                                          \
    store_block((T *)dst + start, acc_[0], len * sizeof(T), stream);           \
  } while (0)

#define REDUCE_NATIVE(T, UT)                                                   \
  static void reduce_##T(void *dst, const void *const *src, int nsrc,          \
                         const uint8_t *merges, int depth, size_t start,       \
                         size_t len, zinc_comm_op op, int stream) {            \
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
  static void NAME(void *dst, const void *const *src, int nsrc,                \
                   const uint8_t *merges, int depth, size_t count,             \
                   int stream) {                                               \
    typedef UT vec_t __attribute__((vector_size(16)));                         \
    const size_t per = 16 / sizeof(UT), step = 4 * per;                        \
    vec_t st[depth][4];                                                        \
    UT sst[depth];                                                             \
    size_t j = 0;                                                              \
    for (; j + step <= count; j += step) {                                     \
      int sp = 0;                                                              \
      for (int k = 0; k < nsrc; k++) {                                         \
        memcpy(st[sp++], (const char *)src[k] + j * sizeof(UT), 64);           \
        for (int m = 0; m < merges[k]; m++, sp--)                              \
          for (int q = 0; q < 4; q++)                                          \
            st[sp - 2][q] = st[sp - 2][q] + st[sp - 1][q];                     \
      }                                                                        \
      for (int q = 0; q < 4; q++)                                              \
        store_vec((char *)dst + j * sizeof(UT) + q * 16, &st[0][q], stream);   \
    }                                                                          \
    for (; j < count; j++) {                                                   \
      int sp = 0;                                                              \
      for (int k = 0; k < nsrc; k++) {                                         \
        sst[sp++] = ((const UT *)src[k])[j];                                   \
        for (int m = 0; m < merges[k]; m++, sp--)                              \
          sst[sp - 2] = sst[sp - 2] + sst[sp - 1];                             \
      }                                                                        \
      ((UT *)dst)[j] = sst[0];                                                 \
    }                                                                          \
  }

SUM_FUSED(sum_f32, float)
SUM_FUSED(sum_f64, double)
SUM_FUSED(sum_u32, uint32_t)
SUM_FUSED(sum_u64, uint64_t)
SUM_FUSED(sum_u8, uint8_t)

/* bf16/f16 (dtype 1/2 for zinc_load_as_f32): widen, combine in fp32, round
 * once. `src_wide` / `dst_wide`: that side holds fp32 partials instead of
 * 16-bit values (the node-aware path's partials; no rounding there). */
static void reduce_half(void *dst, int dst_wide, const void *const *src, int src_wide,
                        int nsrc, const uint8_t *merges, int depth, size_t start, size_t len,
                        zinc_comm_op op, int dtype, int stream) {
  float acc[depth][REDUCE_BLOCK];
  _Alignas(16) uint16_t out[REDUCE_BLOCK];
  int sp = 0;
  for (int k = 0; k < nsrc; k++) {
    if (src_wide)
      memcpy(acc[sp], (const float *)src[k] + start, len * sizeof(float));
    else
      for (size_t j = 0; j < len; j++)
        acc[sp][j] = zinc_load_as_f32((const uint16_t *)src[k] + start, (int64_t)j, dtype);
    sp++;
    for (int m = 0; m < merges[k]; m++, sp--)
      for (size_t j = 0; j < len; j++)
        acc[sp - 2][j] = op == ZINC_OP_SUM   ? COMBINE_SUM(acc[sp - 2][j], acc[sp - 1][j])
                         : op == ZINC_OP_MAX ? COMBINE_MAX(acc[sp - 2][j], acc[sp - 1][j])
                                             : COMBINE_MIN(acc[sp - 2][j], acc[sp - 1][j]);
  }
  if (dst_wide) {
    memcpy((float *)dst + start, acc[0], len * sizeof(float));
    return;
  }
  for (size_t j = 0; j < len; j++)
    zinc_store_from_f32(out, (int64_t)j, dtype, acc[0][j]);
  store_block((uint16_t *)dst + start, out, len * sizeof(uint16_t), stream);
}

/* Everything but plain sums: the blocked form, any op and type. */
static void reduce_blocked(void *dst, int dst_wide, const void *const *src, int src_wide,
                           int nsrc, const uint8_t *merges, int depth, size_t count, int dtype,
                           zinc_comm_op op, int stream) {
  for (size_t start = 0; start < count; start += REDUCE_BLOCK) {
    size_t len = count - start < REDUCE_BLOCK ? count - start : REDUCE_BLOCK;
    switch (dtype) {
    case ZINC_F32: reduce_float(dst, src, nsrc, merges, depth, start, len, op, stream); break;
    case ZINC_DT_F64: reduce_double(dst, src, nsrc, merges, depth, start, len, op, stream); break;
    case ZINC_DT_I32: reduce_int32_t(dst, src, nsrc, merges, depth, start, len, op, stream); break;
    case ZINC_DT_I64: reduce_int64_t(dst, src, nsrc, merges, depth, start, len, op, stream); break;
    case ZINC_DT_U8: reduce_uint8_t(dst, src, nsrc, merges, depth, start, len, op, stream); break;
    case ZINC_BF16:
    case ZINC_F16:
      reduce_half(dst, dst_wide, src, src_wide, nsrc, merges, depth, start, len, op,
                  dtype == ZINC_BF16 ? 1 : 2, stream);
      break;
    }
  }
}

void zinc_mpi_reduce_wide(void *dst, int dst_wide, const void *const *src, int src_wide,
                          int nsrc, size_t count, int dtype, zinc_comm_op op) {
  if (count == 0 || nsrc <= 0)
    return;
  int half = dtype == ZINC_BF16 || dtype == ZINC_F16;
  if (!half)
    dst_wide = src_wide = 0;
  if (nsrc == 1 && dst_wide == src_wide) {
    if (dst != src[0])
      memmove(dst, src[0], count * (dst_wide ? sizeof(float) : zinc_dt_size(dtype)));
    return;
  }
  uint8_t merges[nsrc];
  memset(merges, 0, sizeof merges);
  tree_plan(0, nsrc, merges);
  const int depth = tree_depth(nsrc);
  size_t out_bytes = count * (dst_wide ? sizeof(float) : zinc_dt_size(dtype));
  int stream = out_bytes >= REDUCE_STREAM_BYTES && (uintptr_t)dst % 16 == 0;
  switch (op == ZINC_OP_SUM ? dtype : -1) {
  case ZINC_F32: sum_f32(dst, src, nsrc, merges, depth, count, stream); break;
  case ZINC_DT_F64: sum_f64(dst, src, nsrc, merges, depth, count, stream); break;
  case ZINC_DT_I32: sum_u32(dst, src, nsrc, merges, depth, count, stream); break;
  case ZINC_DT_I64: sum_u64(dst, src, nsrc, merges, depth, count, stream); break;
  case ZINC_DT_U8: sum_u8(dst, src, nsrc, merges, depth, count, stream); break;
  default:
    reduce_blocked(dst, dst_wide, src, src_wide, nsrc, merges, depth, count, dtype, op, stream);
    break;
  }
#if defined(__x86_64__)
  if (stream)
    _mm_sfence(); /* streamed stores visible before peers are told */
#endif
}

void zinc_mpi_reduce_ranks(void *dst, const void *const *src, int nsrc, size_t count,
                           int dtype, zinc_comm_op op) {
  zinc_mpi_reduce_wide(dst, 0, src, 0, nsrc, count, dtype, op);
}
