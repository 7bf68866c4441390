/* test_codec_topk.c — kernels/codec.h's TOPK codec (Deep Gradient
 * Compression's top-k) on the CPU.
 *
 *  - encode against a reference written here: per block, the indices
 *    sorted by |x| (in double; a NaN above everything) descending, ties by
 *    the lower index, the first k_b kept and written in index order, as
 *    fp32 values then uint16 indices, byte for byte with the zero padding;
 *    blocks 1, 7, 32, 256 and 65536, k from 1 to the block, n = 0, 1,
 *    block +- 1, odd; blocks of zeros (all ties), of equal magnitudes with
 *    both signs, subnormals, inf and NaN;
 *  - sizes and bits: zinc_codec_bytes and zinc_codec_bits against the
 *    closed form 6 K padded to 16, 48 k / block;
 *  - decode into f32 / bf16 (the kept values, zeros elsewhere) and
 *    decode-accumulate (one fp32 add at each kept index);
 *  - the residual: at every step, for every element, sent + new residual
 *    == fp32(g + old residual) exactly; over 60 steps the sum of all that
 *    was sent plus the residual equals the sum of the inputs within the
 *    steps' fp32 roundings; a block holding inf/NaN leaves a zero residual;
 *  - pools of 1 and 3 threads, every ISA and the cpu device's ops give the
 *    scalar path's bytes;
 *  - bad arguments (k 0 or above the block, block > 65536, beta != 0 with
 *    a residual) are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/threadpool.h"
#include "device/device.h"
#include "kernels/codec.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static zinc_codec topk(int block, int k) { return (zinc_codec){ZINC_CODEC_TOPK, block, k}; }

/* n values whose blocks take turns at the interesting cases. */
static void fill_cases(test_rng *r, float *x, int64_t n, int block) {
  for (int64_t lo = 0, b = 0; lo < n; lo += block, b++) {
    int64_t hi = lo + block < n ? lo + block : n;
    for (int64_t i = lo; i < hi; i++) {
      switch (b % 6) {
      case 0: x[i] = rng_decades(r, -3.0f, 1.0f); break;                          /* spread */
      case 1: x[i] = (i & 1) ? -0.0f : 0.0f; break;                                /* zeros */
      case 2: x[i] = (rng_u32(r) & 1) ? 0.5f : -0.5f; break;                      /* ties */
      case 3: x[i] = bits_f((rng_u32(r) & 0x807fffffu) | 1u); break;              /* subnormal */
      case 4: x[i] = rng_decades(r, -1, 1);                                        /* inf/NaN */
        if (i == (lo + hi) / 2)
          x[i] = (b & 8) ? NAN : -INFINITY;
        break;
      default: x[i] = (float)((i * 7919) % 13) - 6.0f; break; /* few values, many ties */
      }
    }
  }
}

/* ------------------------------------------------------------ reference */

typedef struct {
  double mag; /* |x|, +inf for inf, 2 x DBL_MAX-ish rank for NaN */
  int64_t i;
} ranked;

static int by_rank(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->mag != y->mag)
    return x->mag > y->mag ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

static int by_index(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  return x->i < y->i ? -1 : x->i > y->i;
}

static double magnitude(float v) {
  if (isnan(v))
    return 1e300; /* above inf's place: codec.h ranks a NaN first */
  if (isinf(v))
    return 1e299;
  return fabs((double)v);
}

/* out: the TOPK bytes of x (zinc_codec_bytes(c, n)); kept[i] = 1 where
 * element i is sent. */
static void ref_encode(zinc_codec c, const float *x, int64_t n, uint8_t *out, uint8_t *kept) {
  int64_t total = 0, nb = (n + c.block - 1) / c.block;
  for (int64_t b = 0; b < nb; b++) {
    int64_t len = n - b * c.block < c.block ? n - b * c.block : c.block;
    total += c.k < len ? c.k : len;
  }
  size_t bytes = (size_t)((6 * total + 15) / 16 * 16);
  memset(out, 0, bytes);
  memset(kept, 0, (size_t)n);
  ranked *v = malloc((size_t)c.block * sizeof *v);
  int64_t e = 0;
  for (int64_t b = 0; b < nb; b++) {
    int64_t lo = b * c.block, len = n - lo < c.block ? n - lo : c.block;
    int64_t kb = c.k < len ? c.k : len;
    for (int64_t j = 0; j < len; j++)
      v[j] = (ranked){magnitude(x[lo + j]), j};
    qsort(v, (size_t)len, sizeof *v, by_rank);
    qsort(v, (size_t)kb, sizeof *v, by_index);
    for (int64_t j = 0; j < kb; j++, e++) {
      memcpy(out + 4 * e, &x[lo + v[j].i], 4);
      uint16_t idx = (uint16_t)v[j].i;
      memcpy(out + 4 * total + 2 * e, &idx, 2);
      kept[lo + v[j].i] = 1;
    }
  }
  free(v);
}

static int64_t compare_bytes(const char *what, const uint8_t *got, const uint8_t *want,
                             size_t n) {
  int64_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i] && bad++ < 5)
      print_error("%s: byte %zu is %02x, want %02x\n", what, i, got[i], want[i]);
  return bad;
}

/* ---------------------------------------------------------------- tests */

static const int kBlocks[] = {1, 7, 32, 256, 65536};

static void encode_vs_reference(void **state) {
  test_rng r = {0x70F4ull};
  int64_t bad = 0, cases = 0;
  for (size_t bi = 0; bi < sizeof kBlocks / sizeof kBlocks[0]; bi++) {
    int B = kBlocks[bi];
    int ks[] = {1, 2, 3, B / 4 + 1, B - 1, B};
    int64_t ns[] = {0, 1, B - 1, B + 1, 3 * B + 5, 8 * B + 1};
    for (size_t ki = 0; ki < 6; ki++) {
      int k = ks[ki];
      if (k < 1 || k > B)
        continue;
      for (size_t ni = 0; ni < 6; ni++) {
        int64_t n = ns[ni];
        if (n < 0 || (B == 65536 && ni > 3))
          continue;
        zinc_codec c = topk(B, k);
        float *x = malloc((size_t)n * 4 + 4);
        fill_cases(&r, x, n, B);
        size_t bytes = zinc_codec_bytes(c, n);
        uint8_t *got = malloc(bytes + 16), *want = malloc(bytes + 16), *kept = malloc((size_t)n + 1);
        memset(got, 0xAB, bytes + 16);
        ref_encode(c, x, n, want, kept);
        assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, got, x, ZINC_F32, n,
                                               NULL, 0.0f, 0),
                         ZINC_OK);
        char what[96];
        snprintf(what, sizeof what, "topk block %d k %d n %lld", B, k, (long long)n);
        int64_t b = compare_bytes(what, got, want, bytes);
        bad += b;
        for (size_t j = bytes; j < bytes + 16; j++) /* nothing written past the encoding */
          bad += got[j] != 0xAB;
        /* decode: the kept values at their indices, 0 elsewhere */
        float *dec = malloc((size_t)n * 4 + 4), *acc = malloc((size_t)n * 4 + 4);
        uint16_t *d16 = malloc((size_t)n * 2 + 2);
        for (int64_t i = 0; i < n; i++)
          acc[i] = 0.25f * (float)(i % 5);
        assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, dec, ZINC_F32, got, n,
                                               0), ZINC_OK);
        assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, d16, ZINC_BF16, got,
                                               n, 0), ZINC_OK);
        assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, acc, ZINC_F32, got, n,
                                               1), ZINC_OK);
        for (int64_t i = 0; i < n; i++) {
          float want_dec = kept[i] ? x[i] : 0.0f;
          float want_acc = kept[i] ? 0.25f * (float)(i % 5) + x[i] : 0.25f * (float)(i % 5);
          uint16_t want16 = zinc_f32_to_bf16(want_dec);
          int ok = memcmp(&dec[i], &want_dec, 4) == 0 && d16[i] == want16 &&
                   (memcmp(&acc[i], &want_acc, 4) == 0 || (isnan(acc[i]) && isnan(want_acc)));
          if (!ok && bad++ < 5)
            print_error("%s: decode of %lld: %g / bf16 %04x / acc %g, want %g / %04x / %g\n",
                        what, (long long)i, (double)dec[i], d16[i], (double)acc[i],
                        (double)want_dec, want16, (double)want_acc);
        }
        cases++;
        free(x);
        free(got);
        free(want);
        free(kept);
        free(dec);
        free(acc);
        free(d16);
      }
    }
  }
  print_message("topk: %lld cases against the sort-based reference\n", (long long)cases);
  assert_int_equal(bad, 0);
}

static void sizes_and_bits(void **state) {
  for (int B = 1; B <= 300; B += 37)
    for (int k = 1; k <= B; k += 5)
      for (int64_t n = 0; n < 4 * B + 3; n += 1 + B / 3) {
        int64_t K = 0;
        for (int64_t lo = 0; lo < n; lo += B)
          K += (n - lo < B ? n - lo : B) < k ? (n - lo < B ? n - lo : B) : k;
        assert_int_equal(zinc_codec_bytes(topk(B, k), n), (size_t)((6 * K + 15) / 16 * 16));
        assert_int_equal(zinc_codec_topk_entries(topk(B, k), n), K);
      }
  assert_true(fabs(zinc_codec_bits(topk(1024, 2)) - 48.0 * 2 / 1024) < 1e-12);
  assert_int_equal(zinc_codec_topk_k(0.001, 1024), 2);   /* ceil(1.024) */
  assert_int_equal(zinc_codec_topk_k(0.001, 256), 1);    /* at least 1 */
  assert_int_equal(zinc_codec_topk_k(0.25, 256), 64);
  assert_int_equal(zinc_codec_topk_k(1.0, 7), 7);
  assert_int_equal(zinc_codec_ef_bytes(topk(256, 3), 1001), 4016); /* fp32, padded */
  assert_string_equal(zinc_codec_name(topk(256, 3)), "topk");
}

/* The residual's bookkeeping over many steps (error feedback, beta 0). */
static void residual_bookkeeping(void **state) {
  test_rng r = {0x5E5Dull};
  const int64_t n = 5000;
  const int T = 60;
  zinc_codec c = topk(256, 3);
  float *g = malloc((size_t)n * 4), *res = calloc((size_t)zinc_codec_ef_bytes(c, n), 1);
  float *old = malloc((size_t)n * 4), *sent = malloc((size_t)n * 4);
  double *sum_g = calloc((size_t)n, sizeof(double)), *sum_sent = calloc((size_t)n, sizeof(double));
  double slack = 0; /* the fp32 roundings of x = g + residual, summed over the steps */
  uint8_t *enc = malloc(zinc_codec_bytes(c, n));
  int64_t bad = 0;
  for (int t = 0; t < T; t++) {
    fill_decades(&r, g, ZINC_F32, n, -3, 0);
    memcpy(old, res, (size_t)n * 4);
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, enc, g, ZINC_F32, n, res,
                                           0.0f, 0), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, sent, ZINC_F32, enc, n,
                                           0), ZINC_OK);
    double most = 0;
    for (int64_t i = 0; i < n; i++) {
      float x = g[i] + old[i];
      float back = sent[i] + res[i]; /* one of the two is 0: exact */
      if (memcmp(&back, &x, 4) != 0 || (sent[i] != 0.0f && res[i] != 0.0f)) {
        if (bad++ < 5)
          print_error("step %d element %lld: sent %g + residual %g != g %g + old residual %g\n",
                      t, (long long)i, (double)sent[i], (double)res[i], (double)g[i],
                      (double)old[i]);
      }
      sum_g[i] += g[i];
      sum_sent[i] += sent[i];
      most = fabs((double)x) > most ? fabs((double)x) : most;
    }
    slack += ldexp(most, -24);
  }
  int64_t far = 0;
  size_t never = 0;
  for (int64_t i = 0; i < n; i++) {
    if (fabs(sum_sent[i] + res[i] - sum_g[i]) > slack && far++ < 5)
      print_error("element %lld: sent %g + residual %g, fed %g (slack %g)\n", (long long)i,
                  sum_sent[i], (double)res[i], sum_g[i], slack);
    never += sum_sent[i] == 0.0;
  }
  print_message("topk residual: %d steps, %zu of %lld elements never sent\n", T, never,
                (long long)n);
  assert_int_equal(bad, 0);
  assert_int_equal(far, 0);
  /* an inf in a block zeroes that block's residual, and only that block's */
  g[300] = INFINITY;
  assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, enc, g, ZINC_F32, n, res,
                                         0.0f, 0), ZINC_OK);
  for (int64_t i = 256; i < 512; i++)
    assert_true(res[i] == 0.0f);
  int nonzero = 0;
  for (int64_t i = 0; i < 256; i++)
    nonzero += res[i] != 0.0f;
  assert_true(nonzero > 0);
  free(g);
  free(res);
  free(old);
  free(sent);
  free(sum_g);
  free(sum_sent);
  free(enc);
}

/* Every ISA, pools of 1 and 3 threads, 16-bit sources and the cpu
 * device: the scalar path's bytes, residual and decoded values. */
static void paths_agree(void **state) {
  test_rng r = {0xA9EEull};
  zinc_threadpool *pools[2] = {NULL, NULL};
  assert_int_equal(zinc_threadpool_create(1, NULL, NULL, &pools[0]), ZINC_OK);
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pools[1]), ZINC_OK);
  zinc_device *d = NULL;
  assert_int_equal(zinc_device_cpu_create(2, 0, &d), ZINC_OK);
  const int64_t n = 100003;
  float *x = malloc((size_t)n * 4);
  uint16_t *x16 = malloc((size_t)n * 2);
  fill_cases(&r, x, n, 32);
  int64_t bad = 0;
  for (int sdt = 0; sdt < 3; sdt++) {
    const void *src = x;
    if (sdt != ZINC_F32) {
      for (int64_t i = 0; i < n; i++)
        zinc_store_from_f32(x16, i, sdt, x[i]);
      src = x16;
    }
    zinc_codec c = topk(32, 3);
    size_t bytes = zinc_codec_bytes(c, n), eb = zinc_codec_ef_bytes(c, n);
    uint8_t *want = malloc(bytes), *got = malloc(bytes);
    float *wres = calloc(eb, 1), *gres = calloc(eb, 1);
    float *wdec = malloc((size_t)n * 4), *gdec = malloc((size_t)n * 4);
    for (int step = 0; step < 3; step++)
      assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, want, src, sdt, n,
                                             wres, 0.0f, 0), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, wdec, ZINC_F32, want, n,
                                           0), ZINC_OK);
    for (int path = 0; path < 2 * ZINC_CPU_ISA_N + 1; path++) {
      int isa = path % ZINC_CPU_ISA_N;
      if (path < 2 * ZINC_CPU_ISA_N && !zinc_cpu_isa_supported((zinc_cpu_isa)isa))
        continue;
      memset(gres, 0, eb);
      for (int step = 0; step < 3; step++) {
        if (path == 2 * ZINC_CPU_ISA_N)
          assert_int_equal(d->ops->encode(d, NULL, c, got, src, sdt, n, gres, 0.0f, 0), ZINC_OK);
        else
          assert_int_equal(zinc_cpu_codec_encode(pools[path / ZINC_CPU_ISA_N], (zinc_cpu_isa)isa,
                                                 c, got, src, sdt, n, gres, 0.0f, 0), ZINC_OK);
      }
      if (path == 2 * ZINC_CPU_ISA_N)
        assert_int_equal(d->ops->decode(d, NULL, c, gdec, ZINC_F32, got, n, 0), ZINC_OK);
      else
        assert_int_equal(zinc_cpu_codec_decode(pools[path / ZINC_CPU_ISA_N], (zinc_cpu_isa)isa, c,
                                               gdec, ZINC_F32, got, n, 0), ZINC_OK);
      bad += compare_bytes("topk path bytes", got, want, bytes);
      bad += compare_bytes("topk path residual", (uint8_t *)gres, (uint8_t *)wres, eb);
      bad += compare_bytes("topk path decode", (uint8_t *)gdec, (uint8_t *)wdec, (size_t)n * 4);
    }
    free(want);
    free(got);
    free(wres);
    free(gres);
    free(wdec);
    free(gdec);
  }
  free(x);
  free(x16);
  zinc_threadpool_destroy(pools[0]);
  zinc_threadpool_destroy(pools[1]);
  zinc_device_destroy(d);
  assert_int_equal(bad, 0);
}

static void bad_arguments(void **state) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, res[8] = {0};
  uint8_t out[64];
  const zinc_cpu_isa s = ZINC_CPU_ISA_SCALAR;
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, topk(4, 0), out, x, ZINC_F32, 8, NULL, 0.0f, 0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, topk(4, 5), out, x, ZINC_F32, 8, NULL, 0.0f, 0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, topk(65537, 1), out, x, ZINC_F32, 8, NULL,
                                         0.0f, 0), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, topk(4, 1), out, x, ZINC_F32, 8, res, 0.5f, 0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, topk(4, 1), x, ZINC_BF16, out, 8, 1),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, topk(4, 1), out, x, ZINC_F32, 8, res, 0.0f, 0),
                   ZINC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(encode_vs_reference), cmocka_unit_test(sizes_and_bits),
      cmocka_unit_test(residual_bookkeeping), cmocka_unit_test(paths_agree),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
