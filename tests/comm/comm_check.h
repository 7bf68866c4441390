/*
 * comm_check.h — what the comm tests share: reproducible per-rank data for
 * every element type, the expected result of a rank-ordered reduction
 * computed here independently of the library (plain loops, fp32
 * accumulation and one rounding for 16-bit types), the bitwise comparison
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

/* out[at] = element i of ranks 0..n-1 combined in rank order. `nan_rank`
 * >= 0 replaces that rank's element nan_at with NaN (float types). */
static inline void check_expect_reduce(void *out, size_t at, int dtype, zinc_comm_op op,
                                uint32_t seed, int nranks, size_t i, int nan_rank,
                                size_t nan_at) {
  union { float f; double d; int32_t i32; int64_t i64; uint8_t u8; uint16_t h; } v;
  float accf = 0;
  double accd = 0;
  uint64_t accu = 0;
  int64_t acci = 0;
  for (int k = 0; k < nranks; k++) {
    check_gen(&v, 0, dtype, seed, k, i);
    int nan = k == nan_rank && i == nan_at;
    if (dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16) {
      float x = dtype == ZINC_F32 ? v.f : dtype == ZINC_BF16 ? zinc_bf16_to_f32(v.h)
                                                             : zinc_f16_to_f32(v.h);
      if (nan)
        x = NAN;
      accf = k == 0 ? x : op == ZINC_OP_SUM ? accf + x
                        : op == ZINC_OP_MAX ? check_max_f(accf, x) : check_min_f(accf, x);
    } else if (dtype == ZINC_DT_F64) {
      double x = nan ? NAN : v.d;
      accd = k == 0 ? x : op == ZINC_OP_SUM ? accd + x
                        : op == ZINC_OP_MAX ? check_max_d(accd, x) : check_min_d(accd, x);
    } else {
      int64_t x = dtype == ZINC_DT_I32 ? v.i32 : dtype == ZINC_DT_I64 ? v.i64 : v.u8;
      if (op == ZINC_OP_SUM)
        accu = k == 0 ? (uint64_t)x : accu + (uint64_t)x;
      else
        acci = k == 0 ? x : op == ZINC_OP_MAX ? (x > acci ? x : acci) : (x < acci ? x : acci);
    }
  }
  uint64_t ires = op == ZINC_OP_SUM ? accu : (uint64_t)acci;
  switch (dtype) {
  case ZINC_F32: ((float *)out)[at] = accf; break;
  case ZINC_BF16: ((uint16_t *)out)[at] = zinc_f32_to_bf16(accf); break;
  case ZINC_F16: ((uint16_t *)out)[at] = zinc_f32_to_f16(accf); break;
  case ZINC_DT_F64: ((double *)out)[at] = accd; break;
  case ZINC_DT_I32: ((uint32_t *)out)[at] = (uint32_t)ires; break;
  case ZINC_DT_I64: ((uint64_t *)out)[at] = ires; break;
  case ZINC_DT_U8: ((uint8_t *)out)[at] = (uint8_t)ires; break;
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
