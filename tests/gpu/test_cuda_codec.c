/* test_cuda_codec.c — the codecs of kernels/codec.h on the GPU, byte for
 * byte and bit for bit against the CPU's scalar path (zinc_cpu_codec_*,
 * itself held to a reference in double by tests/kernels/test_codec.c), with
 * no tolerance: every codec (TERN2 with the same seeds: its draws are
 * codec_math.h's hash on both sides), blocks 1, 7, 32, 256, odd lengths, f32 and
 * 16-bit sources, error feedback over three steps (beta 0.8), decode to
 * every dtype and decode-accumulate. Values: spread magnitudes, zero
 * blocks, rounding ties, subnormals, tiny blocks (the 2^64 pre-scale),
 * -0.0, inf and NaN blocks. Outputs are poisoned and nothing outside the
 * encoding may change. TOPK (DGC) likewise, with its fp32 residual. */
#include "gpu_test.h"

#include "kernels/codec.h"
#include "kernels/cpu_kernels.h"

static float bits_f(uint32_t u) { return zinc_bits_f32(u); }

static void fill_cases(test_rng *r, float *x, int64_t n, int block, int qmax) {
  for (int64_t lo = 0, b = 0; lo < n; lo += block, b++) {
    int64_t hi = lo + block < n ? lo + block : n;
    for (int64_t i = lo; i < hi; i++) {
      float u = rng_uniform(r, -1.0f, 1.0f);
      switch (b % 8) {
      case 0: x[i] = u * powf(10.0f, rng_uniform(r, -3, 1)); break;
      case 1: x[i] = 0.0f; break;
      case 2: x[i] = i == lo ? 3.5f : (i == hi - 1 ? -3.5f : u); break;
      case 3: x[i] = bits_f((rng_u32(r) & 0x807fffffu) | 1u); break;
      case 4: x[i] = i == (lo + hi) / 2 ? ((b & 8) ? NAN : INFINITY) : u; break;
      case 5: x[i] = i == lo ? (float)qmax : (float)((int)(rng_u32(r) % (unsigned)(2 * qmax)) - qmax) + 0.5f; break;
      case 6: x[i] = u * 1e-25f; break;
      case 7: x[i] = (i & 1) ? -0.0f : u; break;
      }
    }
  }
}

static size_t compare_bytes(const char *what, const uint8_t *got, const uint8_t *want,
                            size_t bytes) {
  size_t bad = 0;
  for (size_t i = 0; i < bytes; i++)
    if (got[i] != want[i] && bad++ < MAX_REPORTED)
      fprintf(stderr, "%s: byte %zu of %zu: got 0x%02x, want 0x%02x\n", what, i, bytes, got[i],
              want[i]);
  return bad;
}

static void codecs_match_cpu(void **state) {
  zinc_device *d = *state;
  test_rng rng = {0xC0DEC5ull};
  static const int kinds[] = {ZINC_CODEC_F32,  ZINC_CODEC_BF16, ZINC_CODEC_F16,
                              ZINC_CODEC_INT8, ZINC_CODEC_INT4, ZINC_CODEC_SIGN1,
                              ZINC_CODEC_TERN2};
  static const int blocks[] = {1, 7, 32, 256};
  size_t bad = 0;
  for (int k = 0; k < 7; k++)
    for (int bi = 0; bi < 4; bi++) {
      int is_block = kinds[k] >= ZINC_CODEC_INT8;
      if (!is_block && bi > 0)
        continue;
      zinc_codec c = {kinds[k], is_block ? blocks[bi] : 0, 0};
      const int64_t ns[] = {1, blocks[bi] + 1, 3 * blocks[bi] + 5, 100003};
      for (int ni = 0; ni < 4; ni++)
        for (int sdt = ZINC_F32; sdt <= ZINC_BF16; sdt++)
          for (int use_ef = 0; use_ef <= is_block; use_ef++) {
            const int64_t n = ns[ni];
            const size_t bytes = zinc_codec_bytes(c, n);
            const size_t ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, c.block, 0}, n);
            float *x = malloc((size_t)n * 4), *acc0 = malloc((size_t)n * 4);
            void *src = malloc((size_t)n * 4);
            uint8_t *want = malloc(bytes), *got = malloc(bytes);
            uint8_t *want_ef = calloc(1, ebytes + 1), *got_ef = malloc(ebytes + 1);
            float *want_v = malloc((size_t)n * 4), *got_v = malloc((size_t)n * 4);
            fill_cases(&rng, x, n, c.block ? c.block : 7, c.kind == ZINC_CODEC_INT4 ? 7 : 127);
            for (int64_t i = 0; i < n; i++) {
              zinc_store_from_f32(src, i, sdt, x[i]);
              acc0[i] = rng_uniform(&rng, -4, 4);
            }
            guarded_buf s, e, ef, v;
            guarded_alloc(d, &s, (size_t)n * dtype_bytes(sdt), 4);
            guarded_alloc(d, &e, bytes, 0);
            guarded_alloc(d, &ef, ebytes, 0);
            guarded_alloc(d, &v, (size_t)n * 4, 4);
            guarded_upload(&s, src);
            CUOK(cudaMemset(ef.at, 0, ebytes));
            for (int step = 0; step < (use_ef ? 3 : 1); step++) {
              /* TERN2 draws afresh every step, as the engine seeds it */
              uint64_t seed = 0x7e4a5eedull + 7919ull * (uint64_t)step;
              ZOK(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, want, src, sdt, n,
                                        use_ef ? want_ef : NULL, 0.8f, seed));
              ZOK(d->ops->encode(d, NULL, c, e.at, s.at, sdt, n, use_ef ? ef.at : NULL, 0.8f,
                                 seed));
            }
            ZOK(d->ops->stream_sync(d, NULL));
            char what[128];
            snprintf(what, sizeof what, "%s block %d n %lld src %s ef %d", zinc_codec_name(c),
                     c.block, (long long)n, dtype_label(sdt), use_ef);
            bad += guarded_download(&e, got, what);
            bad += compare_bytes(what, got, want, bytes);
            if (use_ef) {
              bad += guarded_download(&ef, got_ef, what);
              bad += compare_bytes(what, got_ef, want_ef, ebytes);
            }
            /* decode to f32 and f16, then accumulate into acc0 */
            for (int ddt = ZINC_F32; ddt <= ZINC_F16; ddt += 2) {
              guarded_poison(&v);
              ZOK(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, want_v, ddt, want, n, 0));
              ZOK(d->ops->decode(d, NULL, c, v.at, ddt, e.at, n, 0));
              ZOK(d->ops->stream_sync(d, NULL));
              v.bytes = (size_t)n * dtype_bytes(ddt);
              bad += guarded_download(&v, got_v, what);
              bad += test_compare_bits(what, got_v, want_v, n, ddt);
              v.bytes = (size_t)n * 4;
            }
            guarded_upload(&v, acc0);
            memcpy(want_v, acc0, (size_t)n * 4);
            ZOK(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, want_v, ZINC_F32, want, n, 1));
            ZOK(d->ops->decode(d, NULL, c, v.at, ZINC_F32, e.at, n, 1));
            ZOK(d->ops->stream_sync(d, NULL));
            bad += guarded_download(&v, got_v, what);
            bad += test_compare_bits(what, got_v, want_v, n, ZINC_F32);
            guarded_free(d, &s);
            guarded_free(d, &e);
            guarded_free(d, &ef);
            guarded_free(d, &v);
            free(x);
            free(acc0);
            free(src);
            free(want);
            free(got);
            free(want_ef);
            free(got_ef);
            free(want_v);
            free(got_v);
          }
    }
  assert_int_equal(bad, 0);
}

/* A 16-bit cast codec from its own dtype copies the bits on both sides:
 * every pattern, signalling NaNs included; decode likewise. */
static void cast_codecs_every_16bit_pattern(void **state) {
  zinc_device *d = *state;
  const int64_t n = 65536;
  size_t bad = 0;
  for (int k = ZINC_CODEC_BF16; k <= ZINC_CODEC_F16; k++) {
    zinc_codec c = {k, 0, 0};
    int dt = k == ZINC_CODEC_BF16 ? ZINC_BF16 : ZINC_F16;
    uint16_t *src = malloc((size_t)n * 2), *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
      src[i] = (uint16_t)i;
    guarded_buf s, e, v;
    guarded_alloc(d, &s, (size_t)n * 2, 2);
    guarded_alloc(d, &e, zinc_codec_bytes(c, n), 0);
    guarded_alloc(d, &v, (size_t)n * 2, 6);
    guarded_upload(&s, src);
    ZOK(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, want, src, dt, n, NULL, 0.0f, 0));
    ZOK(d->ops->encode(d, NULL, c, e.at, s.at, dt, n, NULL, 0.0f, 0));
    ZOK(d->ops->decode(d, NULL, c, v.at, dt, e.at, n, 0));
    ZOK(d->ops->stream_sync(d, NULL));
    bad += guarded_download(&e, got, zinc_codec_name(c));
    bad += compare_bytes(zinc_codec_name(c), (const uint8_t *)got, (const uint8_t *)want,
                         (size_t)n * 2);
    bad += guarded_download(&v, got, "decode");
    bad += compare_bytes("decode", (const uint8_t *)got, (const uint8_t *)src, (size_t)n * 2);
    guarded_free(d, &s);
    guarded_free(d, &e);
    guarded_free(d, &v);
    free(src);
    free(want);
    free(got);
  }
  assert_int_equal(bad, 0);
}

/* TOPK (DGC's top-k with its fp32 residual): three steps of encode
 * through the residual, then decode and decode-accumulate, against the
 * CPU's scalar path byte for byte; blocks 1, 7, 32, 256 and 4096, k from
 * 1 to the block, ties and inf/NaN blocks among the values. */
static void topk_matches_cpu(void **state) {
  zinc_device *d = *state;
  test_rng rng = {0x7095ull};
  static const int blocks[] = {1, 7, 32, 256, 4096};
  size_t bad = 0;
  for (int bi = 0; bi < 5; bi++)
    for (int ki = 0; ki < 3; ki++) {
      int B = blocks[bi], k = ki == 0 ? 1 : ki == 1 ? (B + 3) / 4 : B;
      zinc_codec c = {ZINC_CODEC_TOPK, B, k};
      const int64_t n = 20 * (int64_t)B + 3 + bi;
      float *x = malloc((size_t)n * 4), *acc0 = malloc((size_t)n * 4);
      fill_cases(&rng, x, n, B, 127);
      for (int64_t i = 0; i < n; i++)
        acc0[i] = rng_uniform(&rng, -1.0f, 1.0f);
      size_t bytes = zinc_codec_bytes(c, n), eb = zinc_codec_ef_bytes(c, n);
      uint8_t *want = malloc(bytes), *got = malloc(bytes);
      float *want_ef = calloc(eb, 1), *got_ef = malloc(eb);
      float *want_v = malloc((size_t)n * 4), *got_v = malloc((size_t)n * 4);
      guarded_buf s, e, r, v;
      guarded_alloc(d, &s, (size_t)n * 4, 0);
      guarded_alloc(d, &e, bytes, 16);
      guarded_alloc(d, &r, eb, 4);
      guarded_alloc(d, &v, (size_t)n * 4, 8);
      guarded_upload(&s, x);
      guarded_upload(&r, want_ef); /* zeros */
      for (int step = 0; step < 3; step++) {
        ZOK(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, want, x, ZINC_F32, n, want_ef,
                                  0.0f, 0));
        ZOK(d->ops->encode(d, NULL, c, e.at, s.at, ZINC_F32, n, r.at, 0.0f, 0));
      }
      ZOK(d->ops->stream_sync(d, NULL));
      char what[64];
      snprintf(what, sizeof what, "topk block %d k %d", B, k);
      bad += guarded_download(&e, got, what);
      bad += compare_bytes(what, got, want, bytes);
      bad += guarded_download(&r, got_ef, "topk residual");
      bad += compare_bytes("topk residual", (const uint8_t *)got_ef, (const uint8_t *)want_ef, eb);
      for (int acc = 0; acc < 2; acc++) {
        memcpy(want_v, acc0, (size_t)n * 4);
        guarded_upload(&v, acc0);
        ZOK(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, want_v, ZINC_F32, want, n, acc));
        ZOK(d->ops->decode(d, NULL, c, v.at, ZINC_F32, e.at, n, acc));
        ZOK(d->ops->stream_sync(d, NULL));
        bad += guarded_download(&v, got_v, "topk decode");
        bad += compare_bytes(acc ? "topk decode-accumulate" : "topk decode",
                             (const uint8_t *)got_v, (const uint8_t *)want_v, (size_t)n * 4);
      }
      guarded_free(d, &s);
      guarded_free(d, &e);
      guarded_free(d, &r);
      guarded_free(d, &v);
      free(x);
      free(acc0);
      free(want);
      free(got);
      free(want_ef);
      free(got_ef);
      free(want_v);
      free(got_v);
    }
  assert_int_equal(bad, 0);
}

static void bad_arguments(void **state) {
  zinc_device *d = *state;
  float x = 0;
  assert_int_equal(d->ops->encode(d, NULL, (zinc_codec){ZINC_CODEC_INT8, 0, 0}, &x, &x, ZINC_F32,
                                  1, NULL, 0.0f, 0), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_int_equal(d->ops->decode(d, NULL, (zinc_codec){ZINC_CODEC_INT4, 32, 0}, &x, ZINC_F16, &x,
                                  1, 1), ZINC_ERR_INVALID);
  assert_int_equal(d->ops->encode(d, NULL, (zinc_codec){ZINC_CODEC_BF16, 0, 0}, &x, &x, ZINC_F32,
                                  1, &x, 0.5f, 0), ZINC_ERR_INVALID);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(codecs_match_cpu),
      cmocka_unit_test(cast_codecs_every_16bit_pattern),
      cmocka_unit_test(topk_matches_cpu),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
