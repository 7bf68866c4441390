/* test_math.c — the shared ZINC_HD conversions against the CPU's own F16C
 * and a bf16 rounding reference, over every 16-bit pattern and many fp32
 * values; the sum-of-squares order against a direct restatement of it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cpuid.h>
#include <immintrin.h>

#include "zinc.h"
#include "common/rng.h"
#include "kernels/zinc_math.h"

static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) {
  return _cvtsh_ss(h);
}

static test_rng rng = {0x9E3779B97F4A7C15ull}; /* one sequence through the whole program */

static void f16_all_patterns_roundtrip(void **state) {
  (void)state;
  if (!has_f16c())
    skip();
  for (uint32_t h = 0; h < 65536; h++) {
    float a = zinc_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
    if (isnan(b)) {
      assert_true(isnan(a));
      continue;
    }
    if (zinc_f32_bits(a) != zinc_f32_bits(b)) {
      fprintf(stderr, "f16 %04x: zinc %a, hardware %a\n", h, a, b);
      fail();
    }
    assert_int_equal(zinc_f32_to_f16(a), hw_f32_to_f16(b));
  }
}

static void f16_rounding_matches_hardware(void **state) {
  (void)state;
  if (!has_f16c())
    skip();
  int bad = 0;
  for (int i = 0; i < 4000000; i++) {
    uint32_t u = rng_u32(&rng);
    /* half the samples near the f16 range, where rounding matters */
    if (i & 1)
      u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
    float f = zinc_bits_f32(u);
    uint16_t a = zinc_f32_to_f16(f), b = hw_f32_to_f16(f);
    if (isnan(f)) {
      assert_true((a & 0x7c00) == 0x7c00 && (a & 0x3ff));
      continue;
    }
    if (a != b && bad++ < 10)
      fprintf(stderr, "f32 %08x (%a): zinc f16 %04x, hardware %04x\n", u, f, a, b);
  }
  assert_int_equal(bad, 0);
}

static uint16_t bf16_reference(float f) {
  /* round to nearest even by exact arithmetic on the value */
  if (isnan(f))
    return 0x7fc0;
  uint32_t u = zinc_f32_bits(f);
  uint32_t lo = u & 0xffff, hi = u >> 16;
  if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
    hi++;
  return (uint16_t)hi;
}

static void bf16_rounding(void **state) {
  (void)state;
  for (int i = 0; i < 4000000; i++) {
    float f = zinc_bits_f32(rng_u32(&rng) ^ ((uint32_t)i << 31));
    if (isnan(f)) {
      assert_true(isnan(zinc_bf16_to_f32(zinc_f32_to_bf16(f))));
      continue;
    }
    assert_int_equal(zinc_f32_to_bf16(f), bf16_reference(f));
  }
  /* ties: exactly halfway rounds to even */
  assert_int_equal(zinc_f32_to_bf16(zinc_bits_f32(0x3f808000u)), 0x3f80);
  assert_int_equal(zinc_f32_to_bf16(zinc_bits_f32(0x3f818000u)), 0x3f82);
  /* the largest finite value rounds to inf only above the halfway point */
  assert_int_equal(zinc_f32_to_bf16(zinc_bits_f32(0x7f7fffffu)), 0x7f80);
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zinc_bf16_to_f32((uint16_t)h);
    if (!isnan(f))
      assert_int_equal(zinc_f32_to_bf16(f), h);
  }
}

static void sumsq_order(void **state) {
  (void)state;
  int64_t n = 3 * ZINC_SUMSQ_BLOCK + 77;
  float *x = malloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((int)(rng_u32(&rng) % 2001) - 1000) * 1e-3f;
  /* restate the order: per block, 16 lanes, the fixed tree, blocks in order */
  double total = 0.0;
  for (int64_t b = 0; b < n; b += ZINC_SUMSQ_BLOCK) {
    double l[16] = {0};
    int64_t len = n - b < ZINC_SUMSQ_BLOCK ? n - b : ZINC_SUMSQ_BLOCK;
    for (int64_t i = 0; i < len; i++)
      l[i % 16] += (double)x[b + i] * (double)x[b + i];
    double t8[8], t4[4], t2[2];
    for (int j = 0; j < 8; j++) t8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) t4[j] = t8[j] + t8[j + 4];
    for (int j = 0; j < 2; j++) t2[j] = t4[j] + t4[j + 2];
    total += t2[0] + t2[1];
  }
  double got = zinc_sumsq_chunk_ref(x, n, ZINC_F32);
  assert_memory_equal(&got, &total, sizeof got);
  x[100] = INFINITY;
  assert_false(isfinite(zinc_sumsq_chunk_ref(x, n, ZINC_F32)));
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f16_all_patterns_roundtrip),
      cmocka_unit_test(f16_rounding_matches_hardware),
      cmocka_unit_test(bf16_rounding),
      cmocka_unit_test(sumsq_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
