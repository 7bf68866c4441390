/* test_cpu_sumsq.c — the sum-of-squares kernel on every path against
 * zinc_sumsq_chunk_ref bit for bit (the canonical order of zinc_math.h):
 * lengths around the block and lane sizes, every dtype, misaligned starts,
 * chunks holding inf or NaN, many chunks in one call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"

static const int64_t lengths[] = {0,    1,    15,   16,   17,   255,   4095,
                                  4096, 4097, 8192, 12365, 65537, 100003};
#define NLEN (int)(sizeof lengths / sizeof lengths[0])
#define NCHUNK (3 * NLEN)

static int same_sum(double want, double got) {
  if (isnan(want))
    return isnan(got); /* NaN-ness is promised, not the payload */
  return memcmp(&want, &got, sizeof want) == 0;
}

static void sumsq_on(zinc_cpu_isa isa) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  test_rng r = {0x5EED5ull + (uint64_t)isa};
  zinc_sumsq_chunk chunks[NCHUNK];
  test_buf bufs[NCHUNK];
  double want[NCHUNK], got[NCHUNK];
  for (int k = 0; k < NCHUNK; k++) {
    int dt = k % 3;
    int64_t n = lengths[k / 3];
    bufs[k] = buf_alloc(n, dt_bytes(dt), k % 7);
    fill_decades(&r, bufs[k].p, dt, n, -20.0f, 20.0f);
    if (n > 100 && k % 5 == 1)
      zinc_store_from_f32(bufs[k].p, n / 2, dt, INFINITY);
    if (n > 100 && k % 5 == 3)
      zinc_store_from_f32(bufs[k].p, n - 1, dt, NAN);
    chunks[k] = (zinc_sumsq_chunk){bufs[k].p, n, dt};
    want[k] = zinc_sumsq_chunk_ref(bufs[k].p, n, dt);
  }
  /* all chunks in one call, then each alone */
  int bad = 0;
  assert_int_equal(zinc_cpu_sumsq(NULL, isa, chunks, NCHUNK, got), ZINC_OK);
  for (int k = 0; k < NCHUNK; k++) {
    double alone;
    assert_int_equal(zinc_cpu_sumsq(NULL, isa, &chunks[k], 1, &alone), ZINC_OK);
    if (!same_sum(want[k], got[k]) || !same_sum(want[k], alone)) {
      if (bad++ < 5)
        fprintf(stderr, "%s: chunk %d (%s, n %lld): want %a, got %a together, %a alone\n",
                zinc_cpu_isa_name(isa), k, zinc_dtype_name(chunks[k].dtype),
                (long long)chunks[k].n, want[k], got[k], alone);
    }
  }
  int nonfinite = 0;
  for (int k = 0; k < NCHUNK; k++)
    nonfinite += !isfinite(want[k]);
  assert_true(nonfinite >= 4); /* the inf and NaN chunks were exercised */
  assert_int_equal(bad, 0);
  for (int k = 0; k < NCHUNK; k++)
    free(bufs[k].block);
}

static void scalar_sumsq(void **state) { sumsq_on(ZINC_CPU_ISA_SCALAR); }
static void avx2_sumsq(void **state) { sumsq_on(ZINC_CPU_ISA_AVX2); }
static void avx512_sumsq(void **state) { sumsq_on(ZINC_CPU_ISA_AVX512); }

static void bad_arguments(void **state) {
  float x = 1.0f;
  double out = -1.0;
  zinc_sumsq_chunk c = {&x, 1, 5};
  assert_int_equal(zinc_cpu_sumsq(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, &out), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_true(out == -1.0);
  c.dtype = ZINC_F32;
  assert_int_equal(zinc_cpu_sumsq(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, NULL), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_sumsq(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, &out), ZINC_OK);
  assert_true(out == 1.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scalar_sumsq),
      cmocka_unit_test(avx2_sumsq),
      cmocka_unit_test(avx512_sumsq),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
