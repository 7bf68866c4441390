/*
 * comm_check.h — what the comm tests share: reproducible per-rank data for
 * every element type, the expected result of a reduction in the
 * canonical tree order computed here independently of the library (a
 * recursion written from comm.h's definition, fp32 accumulation and one
 * rounding for 16-bit types), the bitwise comparison
 * of common/compare.h counted as a failed check, and the pass/fail
 * bookkeeping agreed over MPI_COMM_WORLD.
 *
 * Values: element i of rank k for seed s is a hash of (s, k, i); floats get
 * a random sign, mantissa and an exponent in [-8, 8] (so 16-bit sums of four
 * ranks stay finite and the order of additions shows in the low bits).
 */
#ifndef ZINC_TEST_COMM_CHECK_H
#define ZINC_TEST_COMM_CHECK_H

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm.h"
#include "common/compare.h"
#include "kernels/zinc_math.h"

static const int check_dtypes[] = {ZINC_F32, ZINC_BF16, ZINC_F16, ZINC_DT_F64,
                                   ZINC_DT_I32, ZINC_DT_I64, ZINC_DT_U8};
#define CHECK_NDTYPES ((int)(sizeof check_dtypes / sizeof check_dtypes[0]))

static int check_failures;

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      check_failures++;                                                         \
      fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", check_rank(),       \
              __FILE__, __LINE__, #cond);                                       \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
    }                                                                           \
  } while (0)

/* A zinc call that must succeed. */
#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    zinc_status st_ = (expr);                                                   \
    CHECK(st_ == ZINC_OK, "%s -> %s: %s", #expr, zinc_status_name(st_),         \
          zinc_last_error());                                                   \
  } while (0)

static inline int check_rank(void) {
  int init = 0, rank = 0;
  MPI_Initialized(&init);
  if (init)
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

static inline uint64_t check_hash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static inline uint64_t check_bits(uint32_t seed, int rank, size_t i) {
  return check_hash(((uint64_t)seed << 40) ^ ((uint64_t)(rank + 1) << 32) ^ (uint64_t)i);
}

static inline double check_random_real(uint64_t h) {
  double mant = 1.0 + (double)(h >> 11 & ((1ull << 40) - 1)) / (double)(1ull << 40);
  int exp = (int)(h % 17) - 8;
  return (h >> 63 ? -1.0 : 1.0) * ldexp(mant, exp);
}

/* Store element i of rank `rank` into buf[at]. */
static inline void check_gen(void *buf, size_t at, int dtype, uint32_t seed, int rank, size_t i) {
  uint64_t h = check_bits(seed, rank, i);
  double v = check_random_real(h);
  switch (dtype) {
  case ZINC_F32: ((float *)buf)[at] = (float)v; break;
  case ZINC_BF16: ((uint16_t *)buf)[at] = zinc_f32_to_bf16((float)v); break;
  case ZINC_F16: ((uint16_t *)buf)[at] = zinc_f32_to_f16((float)v); break;
  case ZINC_DT_F64: ((double *)buf)[at] = v; break;
  case ZINC_DT_I32: ((int32_t *)buf)[at] = (int32_t)(uint32_t)h; break;
  case ZINC_DT_I64: ((int64_t *)buf)[at] = (int64_t)h; break;
  case ZINC_DT_U8: ((uint8_t *)buf)[at] = (uint8_t)h; break;
  }
}

static inline void check_fill(void *buf, size_t count, int dtype, uint32_t seed, int rank,
                       size_t first) {
  for (size_t i = 0; i < count; i++)
    check_gen(buf, i, dtype, seed, rank, first + i);
}

static inline float check_max_f(float a, float x) { return isnan(a) ? a : isnan(x) ? x : (x > a ? x : a); }
static inline float check_min_f(float a, float x) { return isnan(a) ? a : isnan(x) ? x : (x < a ? x : a); }
static inline double check_max_d(double a, double x) { return isnan(a) ? a : isnan(x) ? x : (x > a ? x : a); }
static inline double check_min_d(double a, double x) { return isnan(a) ? a : isnan(x) ? x : (x < a ? x : a); }

/* The canonical tree over ranks [lo, hi) (comm.h), written here from its
 * definition: T(lo, hi) = T(lo, mid) (op) T(mid, hi) with mid = lo + the
 * largest power of two strictly below hi - lo. Floats combine in the type
 * of their accumulator (fp32 for 16-bit, f64 for f64); integer sums wrap. */
typedef struct {
  float f;
  double d;
  uint64_t u; /* integer sum (wrapping) or, for max/min, the int64 value */
} check_acc;

static inline check_acc check_tree(int dtype, zinc_comm_op op, uint32_t seed, int lo, int hi,
                                   size_t i, int nan_rank, size_t nan_at) {
  check_acc a = {0, 0, 0};
  if (hi - lo == 1) {
    union { float f; double d; int32_t i32; int64_t i64; uint8_t u8; uint16_t h; } v;
    check_gen(&v, 0, dtype, seed, lo, i);
    int nan = lo == nan_rank && i == nan_at;
    switch (dtype) {
    case ZINC_F32: a.f = nan ? NAN : v.f; break;
    case ZINC_BF16: a.f = nan ? NAN : zinc_bf16_to_f32(v.h); break;
    case ZINC_F16: a.f = nan ? NAN : zinc_f16_to_f32(v.h); break;
    case ZINC_DT_F64: a.d = nan ? NAN : v.d; break;
    case ZINC_DT_I32: a.u = (uint64_t)(int64_t)v.i32; break;
    case ZINC_DT_I64: a.u = (uint64_t)v.i64; break;
    case ZINC_DT_U8: a.u = v.u8; break;
    }
    return a;
  }
  int half = 1;
  while (2 * half < hi - lo)
    half *= 2;
  check_acc l = check_tree(dtype, op, seed, lo, lo + half, i, nan_rank, nan_at);
  check_acc r = check_tree(dtype, op, seed, lo + half, hi, i, nan_rank, nan_at);
  if (op == ZINC_OP_SUM) {
    a.f = l.f + r.f;
    a.d = l.d + r.d;
    a.u = l.u + r.u;
  } else if (op == ZINC_OP_MAX) {
    a.f = check_max_f(l.f, r.f);
    a.d = check_max_d(l.d, r.d);
    a.u = (int64_t)r.u > (int64_t)l.u ? r.u : l.u;
  } else {
    a.f = check_min_f(l.f, r.f);
    a.d = check_min_d(l.d, r.d);
    a.u = (int64_t)r.u < (int64_t)l.u ? r.u : l.u;
  }
  return a;
}

/* out[at] = element i of ranks 0..n-1 combined in the canonical tree
 * order. `nan_rank` >= 0 replaces that rank's element nan_at with NaN
 * (float types). */
static inline void check_expect_reduce(void *out, size_t at, int dtype, zinc_comm_op op,
                                uint32_t seed, int nranks, size_t i, int nan_rank,
                                size_t nan_at) {
  check_acc a = check_tree(dtype, op, seed, 0, nranks, i, nan_rank, nan_at);
  switch (dtype) {
  case ZINC_F32: ((float *)out)[at] = a.f; break;
  case ZINC_BF16: ((uint16_t *)out)[at] = zinc_f32_to_bf16(a.f); break;
  case ZINC_F16: ((uint16_t *)out)[at] = zinc_f32_to_f16(a.f); break;
  case ZINC_DT_F64: ((double *)out)[at] = a.d; break;
  case ZINC_DT_I32: ((uint32_t *)out)[at] = (uint32_t)a.u; break;
  case ZINC_DT_I64: ((uint64_t *)out)[at] = a.u; break;
  case ZINC_DT_U8: ((uint8_t *)out)[at] = (uint8_t)a.u; break;
  }
}

/* Bitwise comparison (NaNs compare by "both NaN"), reported under
 * "rank R: what" by test_compare; a mismatch counts as a failed check.
 * Returns 1 when equal. */
static inline int check_equal(const void *got, const void *want, size_t count, int dtype,
                              const char *what) {
  char label[256];
  snprintf(label, sizeof label, "rank %d: %s", check_rank(), what);
  if (test_compare(label, got, want, (int64_t)count, dtype, TEST_NAN_MATCHES_NAN) == 0)
    return 1;
  check_failures++;
  return 0;
}

/* Every rank's verdict: 0 when all passed, 1 otherwise (the exit code). */
static inline int check_finish(const char *name) {
  int mine = check_failures, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (check_rank() == 0)
    fprintf(stderr, "%s: %s (%d failed checks over all ranks)\n", name,
            total ? "FAILED" : "passed", total);
  return total ? 1 : 0;
}

#endif /* ZINC_TEST_COMM_CHECK_H */
