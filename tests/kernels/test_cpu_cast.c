/* test_cpu_cast.c — casts between every pair of dtypes and fp32
 * accumulation, each SIMD path against the scalar path bit for bit: every
 * 16-bit pattern (signalling NaNs, subnormals, infinities included) and
 * random fp32 bit patterns plus values at the 16-bit rounding ties and the
 * f16 overflow edge; odd lengths and misaligned starts. The scalar path is
 * itself checked against zinc_math.h's per-element functions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"

#define N16 (65536 + 37) /* every 16-bit pattern, then a few again */
#define N32 (200003)

/* Source values of dtype sdt: exhaustive for 16-bit, adversarial for f32. */
static void fill_source(test_rng *r, void *src, int sdt, int64_t n) {
  if (sdt != ZINC_F32) {
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)src)[i] = (uint16_t)i;
    return;
  }
  uint32_t *u = src;
  for (int64_t i = 0; i < n; i++) {
    uint32_t x = rng_u32(r) ^ (rng_u32(r) << 16);
    switch (i % 4) {
    case 0: break;                                          /* any pattern */
    case 1: x = (x & 0xffff0000u) | 0x8000u; break;         /* bf16 ties   */
    case 2: x = (x & 0x8003e000u) | 0x38000000u | (x & 0x1000u) |
                ((x >> 3) & 0x07ffc000u); break;            /* f16 range, ties */
    case 3: x = (x & 0x80000000u) | (0x477fe000u + (x & 0x3fffu)); break; /* f16 max */
    }
    u[i] = x;
  }
}

static void cast_reference(void *dst, int ddt, const void *src, int sdt, int64_t n) {
  if (ddt == sdt) {
    memcpy(dst, src, (size_t)n * dt_bytes(sdt));
    return;
  }
  for (int64_t i = 0; i < n; i++)
    zinc_store_from_f32(dst, i, ddt, zinc_load_as_f32(src, i, sdt));
}

static void casts_on(zinc_cpu_isa isa) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  test_rng r = {0xC0FFEEull + (uint64_t)isa};
  int64_t bad = 0;
  for (int sdt = 0; sdt < 3; sdt++)
    for (int ddt = 0; ddt < 3; ddt++)
      for (int shift = 0; shift < 3; shift++) {
        int64_t n = (sdt == ZINC_F32 ? N32 : N16) - shift;
        test_buf src = buf_alloc(n, dt_bytes(sdt), shift + 1);
        test_buf want = buf_alloc(n, dt_bytes(ddt), shift + 3);
        test_buf got = buf_alloc(n, dt_bytes(ddt), 2 * shift);
        fill_source(&r, src.p, sdt, n);
        cast_reference(want.p, ddt, src.p, sdt, n);
        assert_int_equal(zinc_cpu_cast(NULL, isa, got.p, ddt, src.p, sdt, n), ZINC_OK);
        int64_t b = test_compare_bits("cast", got.p, want.p, n, ddt);
        if (b)
          fprintf(stderr, "%s: cast %s -> %s, n %lld: %lld mismatches\n",
                  zinc_cpu_isa_name(isa), zinc_dtype_name(sdt), zinc_dtype_name(ddt),
                  (long long)n, (long long)b);
        bad += b;
        free(src.block);
        free(want.block);
        free(got.block);
      }
  assert_int_equal(bad, 0);
}

static void accumulate_on(zinc_cpu_isa isa) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  test_rng r = {0xACC0ull + (uint64_t)isa};
  int64_t bad = 0;
  for (int sdt = 0; sdt < 3; sdt++)
    for (int overwrite = 0; overwrite < 2; overwrite++) {
      int64_t n = (sdt == ZINC_F32 ? N32 : N16) - overwrite;
      test_buf src = buf_alloc(n, dt_bytes(sdt), 3);
      test_buf want = buf_alloc(n, 4, 1);
      test_buf got = buf_alloc(n, 4, 5);
      fill_source(&r, src.p, sdt, n);
      /* finite destinations, so that a NaN result has one NaN operand */
      fill_decades(&r, want.p, ZINC_F32, n, -6.0f, 6.0f);
      memcpy(got.p, want.p, (size_t)n * 4);
      float *w = want.p;
      for (int64_t i = 0; i < n; i++) {
        float x = zinc_load_as_f32(src.p, i, sdt);
        w[i] = overwrite ? x : w[i] + x;
      }
      assert_int_equal(zinc_cpu_accumulate_f32(NULL, isa, got.p, src.p, sdt, n, overwrite),
                       ZINC_OK);
      int64_t b = test_compare_bits("accumulate", got.p, want.p, n, ZINC_F32);
      if (b)
        fprintf(stderr, "%s: accumulate from %s, overwrite %d: %lld mismatches\n",
                zinc_cpu_isa_name(isa), zinc_dtype_name(sdt), overwrite, (long long)b);
      bad += b;
      free(src.block);
      free(want.block);
      free(got.block);
    }
  assert_int_equal(bad, 0);
}

static void scalar_casts(void **state) { casts_on(ZINC_CPU_ISA_SCALAR); }
static void avx2_casts(void **state) { casts_on(ZINC_CPU_ISA_AVX2); }
static void avx512_casts(void **state) { casts_on(ZINC_CPU_ISA_AVX512); }
static void scalar_accumulate(void **state) { accumulate_on(ZINC_CPU_ISA_SCALAR); }
static void avx2_accumulate(void **state) { accumulate_on(ZINC_CPU_ISA_AVX2); }
static void avx512_accumulate(void **state) { accumulate_on(ZINC_CPU_ISA_AVX512); }

static void bad_arguments(void **state) {
  float x = 0.0f;
  assert_int_equal(zinc_cpu_cast(NULL, ZINC_CPU_ISA_SCALAR, &x, 3, &x, 0, 1), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_int_equal(zinc_cpu_cast(NULL, ZINC_CPU_ISA_SCALAR, &x, 0, NULL, 0, 1), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_accumulate_f32(NULL, ZINC_CPU_ISA_SCALAR, &x, &x, 0, -2, 0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_cast(NULL, ZINC_CPU_ISA_SCALAR, NULL, 1, NULL, 2, 0), ZINC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scalar_casts),      cmocka_unit_test(avx2_casts),
      cmocka_unit_test(avx512_casts),      cmocka_unit_test(scalar_accumulate),
      cmocka_unit_test(avx2_accumulate),   cmocka_unit_test(avx512_accumulate),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
