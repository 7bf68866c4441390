/*
 * kernel_test.h — helpers shared by the CPU kernel tests: random values
 * over many decades (from common/rng.h's generator) and misaligned buffers.
 * Results are compared with common/compare.h.
 */
#ifndef ZINC_KERNEL_TEST_H
#define ZINC_KERNEL_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/compare.h"
#include "common/rng.h"
#include "kernels/zinc_math.h"

/* uniform in [0, 1) */
static inline float rng_unit(test_rng *r) { return (float)(rng_u32(r) >> 8) * 0x1p-24f; }

/* sign * 10^[lo, hi): values over many decades */
static inline float rng_decades(test_rng *r, float lo, float hi) {
  float e = lo + (hi - lo) * rng_unit(r);
  float x = powf(10.0f, e);
  return (rng_u32(r) & 1) ? -x : x;
}

/* Fill n elements of dtype with rng_decades values. */
static inline void fill_decades(test_rng *r, void *dst, int dtype, int64_t n, float lo,
                                float hi) {
  for (int64_t i = 0; i < n; i++)
    zinc_store_from_f32(dst, i, dtype, rng_decades(r, lo, hi));
}

static inline size_t dt_bytes(int dt) { return dt == ZINC_F32 ? 4 : 2; }

/* n elements starting offset_elems (< 64) past a 64-byte boundary, filled
 * with a 0x5a pattern; release with free(buf.block). */
typedef struct {
  void *block;
  void *p;
} test_buf;

static inline test_buf buf_alloc(int64_t n, size_t esize, int offset_elems) {
  size_t bytes = ((size_t)(n + 64) * esize + 127) / 64 * 64;
  test_buf b = {aligned_alloc(64, bytes), NULL};
  if (!b.block)
    abort();
  memset(b.block, 0x5a, bytes);
  b.p = (char *)b.block + (size_t)offset_elems * esize;
  return b;
}

#endif /* ZINC_KERNEL_TEST_H */
