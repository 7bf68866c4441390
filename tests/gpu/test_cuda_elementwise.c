/* test_cuda_elementwise.c — dtype casts, fp32 accumulation, gradient
 * unscale with inf/NaN detection and zero-fill on the GPU, bitwise against
 * the zinc_math.h scalar functions on the host.
 *
 * Sources hold every kind of value (16-bit sources: random bit patterns,
 * so NaN, inf and subnormals too; fp32 sources: values across the whole
 * exponent range, near the 16-bit rounding boundaries, plus specials).
 * Sizes are odd, starts misaligned, outputs poisoned with 0xFF bytes, and
 * nothing outside the range may change. */
#include "gpu_test.h"

#include "kernels/kernels.h"

#define N_ELEMS 10007

static void fill_source(void *host, int dtype, int64_t n, test_rng *rng) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype != ZINC_F32) {
      ((uint16_t *)host)[i] = (uint16_t)rng_u32(rng);
      continue;
    }
    uint32_t u = rng_u32(rng);
    if (i % 3 == 0) /* near and inside the f16 range, where rounding matters */
      u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
    float f = zinc_bits_f32(u);
    if (i % 97 == 0)
      f = i % 2 ? INFINITY : -0.0f;
    if (i % 101 == 0)
      f = NAN;
    ((float *)host)[i] = f;
  }
}

static void casts_every_pair(void **state) {
  zinc_device *d = *state;
  test_rng rng = {31};
  size_t bad = 0;
  for (int src_dt = ZINC_F32; src_dt <= ZINC_F16; src_dt++) {
    for (int dst_dt = ZINC_F32; dst_dt <= ZINC_F16; dst_dt++) {
      for (size_t off = 0; off < 4; off += 3) {
        int64_t n = N_ELEMS - (int64_t)off;
        void *src = malloc((size_t)n * 4), *want = malloc((size_t)n * 4),
             *got = malloc((size_t)n * 4);
        assert_true(src && want && got);
        fill_source(src, src_dt, n, &rng);
        for (int64_t i = 0; i < n; i++)
          zinc_store_from_f32(want, i, dst_dt, zinc_load_as_f32(src, i, src_dt));
        guarded_buf s, t;
        guarded_alloc(d, &s, (size_t)n * dtype_bytes(src_dt), off * dtype_bytes(src_dt));
        guarded_alloc(d, &t, (size_t)n * dtype_bytes(dst_dt), (off + 1) * dtype_bytes(dst_dt));
        guarded_upload(&s, src);
        ZOK(d->ops->cast(d, NULL, t.at, dst_dt, s.at, src_dt, n));
        ZOK(d->ops->stream_sync(d, NULL));
        char what[64];
        snprintf(what, sizeof what, "cast %s->%s offset %zu", dtype_label(src_dt),
                 dtype_label(dst_dt), off);
        bad += guarded_download(&t, got, what);
        bad += test_compare_bits(what, got, want, n, dst_dt); /* no arithmetic: NaN bits too */
        guarded_free(d, &s);
        guarded_free(d, &t);
        free(src);
        free(want);
        free(got);
      }
    }
  }
  assert_int_equal(bad, 0);
}

static void accumulate_overwrite_and_add(void **state) {
  zinc_device *d = *state;
  test_rng rng = {41};
  size_t bad = 0;
  for (int src_dt = ZINC_F32; src_dt <= ZINC_F16; src_dt++) {
    for (int overwrite = 0; overwrite <= 1; overwrite++) {
      int64_t n = N_ELEMS;
      float *acc = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
      void *src = malloc((size_t)n * 4);
      assert_true(acc && got && src);
      for (int64_t i = 0; i < n; i++) {
        acc[i] = rng_uniform(&rng, -10.0f, 10.0f);
        zinc_store_from_f32(src, i, src_dt, rng_uniform(&rng, -10.0f, 10.0f));
      }
      guarded_buf s, t;
      guarded_alloc(d, &s, (size_t)n * dtype_bytes(src_dt), 3 * dtype_bytes(src_dt));
      guarded_alloc(d, &t, (size_t)n * 4, 4);
      guarded_upload(&s, src);
      guarded_upload(&t, acc);
      ZOK(d->ops->accumulate_f32(d, NULL, (float *)t.at, s.at, src_dt, n, overwrite));
      ZOK(d->ops->stream_sync(d, NULL));
      for (int64_t i = 0; i < n; i++) {
        float x = zinc_load_as_f32(src, i, src_dt);
        acc[i] = overwrite ? x : acc[i] + x;
      }
      char what[64];
      snprintf(what, sizeof what, "accumulate %s overwrite=%d", dtype_label(src_dt), overwrite);
      bad += guarded_download(&t, got, what);
      bad += test_compare_bits(what, got, acc, n, ZINC_F32);
      guarded_free(d, &s);
      guarded_free(d, &t);
      free(acc);
      free(got);
      free(src);
    }
  }
  assert_int_equal(bad, 0);
}

/* The device scale op (the gradient pre-division): every 16-bit pattern
 * and random f32, times 1/3 and times 4096 (fp16 overflow to inf), bitwise
 * against the host's load x factor, rounded by zinc_math.h's store. */
static void scale_in_place(void **state) {
  zinc_device *d = *state;
  test_rng rng = {67};
  size_t bad = 0;
  const float factors[2] = {1.0f / 3.0f, 4096.0f};
  for (int dt = ZINC_F32; dt <= ZINC_F16; dt++)
    for (int k = 0; k < 2; k++) {
      int64_t n = dt == ZINC_F32 ? N_ELEMS : 65536;
      void *data = malloc((size_t)n * 4), *want = malloc((size_t)n * 4),
           *got = malloc((size_t)n * 4);
      assert_true(data && want && got);
      for (int64_t i = 0; i < n; i++) {
        if (dt == ZINC_F32)
          ((float *)data)[i] = rng_uniform(&rng, -1e4f, 1e4f);
        else
          ((uint16_t *)data)[i] = (uint16_t)i;
        zinc_store_from_f32(want, i, dt, zinc_load_as_f32(data, i, dt) * factors[k]);
      }
      guarded_buf t;
      guarded_alloc(d, &t, (size_t)n * dtype_bytes(dt), 3 * dtype_bytes(dt));
      guarded_upload(&t, data);
      ZOK(d->ops->scale(d, NULL, t.at, dt, n, factors[k]));
      ZOK(d->ops->stream_sync(d, NULL));
      char what[64];
      snprintf(what, sizeof what, "scale %s by %g", dtype_label(dt), factors[k]);
      bad += guarded_download(&t, got, what);
      bad += test_compare_bits(what, got, want, n, dt);
      guarded_free(d, &t);
      free(data);
      free(want);
      free(got);
    }
  assert_int_equal(bad, 0);
}

/* zinc_cuda_unscale (no device op yet: the engine folds unscaling into
 * Adam's grad_scale and detects overflow with sumsq; this kernel serves a
 * separate unscale pass). */
static void unscale_and_detect(void **state) {
  zinc_device *d = *state;
  test_rng rng = {53};
  size_t bad = 0;
  int *flag = NULL;
  CUOK(cudaMalloc((void **)&flag, sizeof *flag));
  for (int dt = ZINC_F32; dt <= ZINC_F16; dt++) {
    /* case 0: finite, scale 1/1024; case 1: one inf; case 2: one NaN;
     * case 3: f16 overflow after scaling by 4096 (for f16; others stay finite) */
    for (int which = 0; which < 4; which++) {
      int64_t n = N_ELEMS;
      float scale = which == 3 ? 4096.0f : 1.0f / 1024.0f;
      void *data = malloc((size_t)n * 4), *want = malloc((size_t)n * 4),
           *got = malloc((size_t)n * 4);
      assert_true(data && want && got);
      for (int64_t i = 0; i < n; i++)
        zinc_store_from_f32(data, i, dt, rng_uniform(&rng, -60.0f, 60.0f));
      if (which == 1)
        zinc_store_from_f32(data, n / 2, dt, -INFINITY);
      if (which == 2)
        zinc_store_from_f32(data, n - 1, dt, NAN);
      int want_flag = 0;
      for (int64_t i = 0; i < n; i++) {
        float x = zinc_load_as_f32(data, i, dt);
        zinc_store_from_f32(want, i, dt, x * scale);
        want_flag |= !isfinite(x) || !isfinite(zinc_load_as_f32(want, i, dt));
      }
      assert_int_equal(want_flag, which == 1 || which == 2 || (which == 3 && dt == ZINC_F16));
      guarded_buf g;
      guarded_alloc(d, &g, (size_t)n * dtype_bytes(dt), dtype_bytes(dt));
      guarded_upload(&g, data);
      CUOK(cudaMemset(flag, 0, sizeof *flag));
      CUOK(zinc_cuda_unscale(g.at, dt, n, scale, flag, 0));
      CUOK(cudaDeviceSynchronize());
      int got_flag = -1;
      CUOK(cudaMemcpy(&got_flag, flag, sizeof got_flag, cudaMemcpyDeviceToHost));
      char what[64];
      snprintf(what, sizeof what, "unscale %s case %d", dtype_label(dt), which);
      if (got_flag != want_flag) {
        fprintf(stderr, "%s: non-finite flag %d, want %d\n", what, got_flag, want_flag);
        bad++;
      }
      bad += guarded_download(&g, got, what);
      bad += test_compare(what, got, want, n, dt, TEST_NAN_MATCHES_NAN);
      guarded_free(d, &g);
      free(data);
      free(want);
      free(got);
    }
  }
  cudaFree(flag);
  assert_int_equal(bad, 0);
}

static void fill_zero_any_alignment(void **state) {
  zinc_device *d = *state;
  static const size_t lengths[] = {1, 15, 16, 17, 33, 4097, 1000003};
  size_t bad = 0;
  for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
    for (size_t off = 0; off < 16; off += 5) {
      size_t bytes = lengths[li];
      unsigned char *got = malloc(bytes);
      assert_non_null(got);
      guarded_buf g;
      guarded_alloc(d, &g, bytes, off);
      ZOK(d->ops->fill_zero(d, g.at, bytes, NULL));
      ZOK(d->ops->stream_sync(d, NULL));
      char what[64];
      snprintf(what, sizeof what, "fill_zero %zu bytes at offset %zu", bytes, off);
      bad += guarded_download(&g, got, what);
      size_t nonzero = 0;
      for (size_t i = 0; i < bytes; i++)
        if (got[i] && nonzero++ < MAX_REPORTED)
          fprintf(stderr, "%s: byte %zu is 0x%02x\n", what, i, got[i]);
      bad += nonzero;
      guarded_free(d, &g);
      free(got);
    }
  }
  assert_int_equal(bad, 0);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(casts_every_pair),
      cmocka_unit_test(accumulate_overwrite_and_add),
      cmocka_unit_test(scale_in_place),
      cmocka_unit_test(unscale_and_detect),
      cmocka_unit_test(fill_zero_any_alignment),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
