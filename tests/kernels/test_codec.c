/* test_codec.c — the codecs of kernels/codec.h on the CPU.
 *
 *  - every codec, block sizes 1, 7, 32, 256, n = 0, 1, block - 1,
 *    block + 1, odd n, against a reference written here (max and scale in
 *    double, then codec.h's fp32 rounding rule: double rounding of one
 *    float operation is innocuous, so (float)(a op b) in double is the
 *    fp32 operation), byte for byte including the zero padding; blocks of
 *    zeros, +-max, ties, subnormals, tiny normals, -0.0, inf and NaN;
 *  - zinc_codec_error_bound holds for every element of a finite block;
 *  - decode to every dtype and decode-accumulate (one fp32 add);
 *  - error feedback: beta 0 keeps the running sum of 200 decodings of a
 *    constant vector within a few block maxima of 200 x, where SIGN1
 *    without it drifts away; beta 0.8 follows codec.h step by step; a
 *    zero-filled ef is no residual;
 *  - every ISA path and pools of 1 and 3 threads give the scalar path's
 *    bytes and values, and so do the cpu device's encode/decode ops;
 *  - TERN2 (TernGrad): the reference draws from its own splitmix64 written
 *    here (every test above covers it, at seed kSeed); over 4000 seeds the
 *    mean of the decodings is x within a few standard errors per element
 *    and overall, every decoded value is 0 or s with x's sign; other seeds
 *    give other bytes;
 *  - bad arguments are refused and nothing is written.
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

static const int kBlocks[] = {1, 7, 32, 256};
static const int kKinds[] = {ZINC_CODEC_F32,  ZINC_CODEC_BF16, ZINC_CODEC_F16,
                             ZINC_CODEC_INT8, ZINC_CODEC_INT4, ZINC_CODEC_SIGN1,
                             ZINC_CODEC_TERN2};
#define NKINDS 7
/* The draws of TERN2 (ignored by the other codecs). */
static const uint64_t kSeed = 0x5eed0f7e57c0dec5ull;
#define NAN_SCALE 0x7fc00000u

static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int is_block(int kind) { return kind >= ZINC_CODEC_INT8; }

/* --------------------------------------------------------- test values */

/* n values whose blocks of `block` take turns at the interesting cases. */
static void fill_cases(test_rng *r, float *x, int64_t n, int block, int qmax) {
  for (int64_t lo = 0, b = 0; lo < n; lo += block, b++) {
    int64_t hi = lo + block < n ? lo + block : n;
    for (int64_t i = lo; i < hi; i++) {
      switch (b % 8) {
      case 0: x[i] = rng_decades(r, -3.0f, 1.0f); break;                  /* spread */
      case 1: x[i] = 0.0f; break;                                          /* zeros  */
      case 2: x[i] = (i == lo) ? 3.5f : (i == hi - 1 ? -3.5f : rng_decades(r, -2, 0.5f)); break;
      case 3: x[i] = bits_f((rng_u32(r) & 0x807fffffu) | 1u); break;      /* subnormal */
      case 4: x[i] = rng_decades(r, -1, 1);                                /* inf / NaN */
        if (i == (lo + hi) / 2)
          x[i] = (b & 8) ? NAN : ((b & 16) ? -INFINITY : INFINITY);
        break;
      case 5: /* ties: with max qmax, inv = 1 and x + 0.5 rounds to even */
        x[i] = i == lo ? (float)qmax
                       : (float)((int)(rng_u32(r) % (unsigned)(2 * qmax)) - qmax) + 0.5f;
        break;
      case 6: x[i] = rng_decades(r, -30, -20); break;                      /* m < 2^-64 */
      case 7: x[i] = (i & 1) ? -0.0f : rng_decades(r, -1, 0); break;       /* -0.0 */
      }
    }
  }
}

/* ------------------------------------------------- reference (in double) */

typedef struct {
  uint8_t *bytes; /* (zinc_codec_bytes(c, n)) the expected encoding */
  float *values;  /* (n) the expected decoded values               */
} ref_out;

/* TERN2's draw of element i, from codec.h's words: splitmix64 (Vigna's
 * constants) at counter i + 1, the top 24 bits as u in [0, 1). */
static double ref_tern_u(uint64_t seed, int64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return ldexp((double)(z >> 40), -24);
}

/* The expected encoding of the n fp32 values x under a block codec and the
 * values it decodes to; seed: TERN2's draws. */
static void ref_block_encode(zinc_codec c, const float *x, int64_t n, uint8_t *out, float *dec,
                             uint64_t seed) {
  const int64_t B = c.block, nb = (n + B - 1) / B;
  const int qmax = c.kind == ZINC_CODEC_INT8 ? 127 : 7;
  memset(out, 0, zinc_codec_bytes(c, n));
  uint8_t *pl = out + 4 * nb;
  for (int64_t b = 0; b < nb; b++) {
    int64_t lo = b * B, hi = lo + B < n ? lo + B : n;
    int finite = 1;
    double m = 0;
    for (int64_t i = lo; i < hi; i++) {
      if (!isfinite(x[i]))
        finite = 0;
      else if (fabs((double)x[i]) > m)
        m = fabs((double)x[i]);
    }
    float scale;
    if (c.kind == ZINC_CODEC_SIGN1) {
      float l[8] = {0}; /* codec.h's lanes: k % 8, then (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
      for (int64_t i = lo; i < hi; i++)
        l[(i - lo) % 8] += fabsf(x[i]);
      float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
      scale = finite ? (float)((double)s / (double)(hi - lo)) : bits_f(NAN_SCALE);
      for (int64_t i = lo; i < hi; i++) {
        int neg = signbit(x[i]) != 0;
        pl[i / 8] |= (uint8_t)(neg << (i % 8));
        dec[i] = neg ? -scale : scale;
      }
    } else if (c.kind == ZINC_CODEC_TERN2) {
      /* s = m; keep +-s with probability |x| / m (the fp32 quotient) */
      scale = !finite ? bits_f(NAN_SCALE) : (float)m;
      for (int64_t i = lo; i < hi; i++) {
        int q = 0;
        if (finite && m > 0 && ref_tern_u(seed, i) < (double)(float)(fabs((double)x[i]) / m))
          q = signbit(x[i]) ? -1 : 1;
        pl[i / 4] |= (uint8_t)((q & 3) << (2 * (i % 4)));
        dec[i] = (float)((double)q * (double)scale);
      }
    } else {
      scale = !finite ? bits_f(NAN_SCALE) : (float)(m / qmax);
      double pre = m < 0x1p-64 ? 0x1p64 : 1.0;
      float inv = finite && m > 0 ? (float)(qmax / (m * pre)) : 0.0f;
      for (int64_t i = lo; i < hi; i++) {
        int q = 0;
        if (finite && m > 0) {
          float y = (float)((double)(float)((double)x[i] * pre) * (double)inv);
          double qd = nearbyint((double)y); /* the default mode: to nearest even */
          qd = qd > qmax ? qmax : qd < -qmax ? -qmax : qd;
          q = (int)qd;
        }
        if (c.kind == ZINC_CODEC_INT8)
          pl[i] = (uint8_t)(int8_t)q;
        else
          pl[i / 2] |= (uint8_t)((q & 15) << (4 * (i % 2)));
        dec[i] = (float)((double)q * (double)scale);
      }
    }
    memcpy(out + 4 * b, &scale, 4);
  }
}

static int cast_dt(int kind) {
  return kind == ZINC_CODEC_F32 ? ZINC_F32 : kind == ZINC_CODEC_BF16 ? ZINC_BF16 : ZINC_F16;
}

/* Any codec: casts are zinc_math.h's element conversions (themselves held
 * by test_cpu_cast), block codecs the reference above. */
static void ref_encode(zinc_codec c, const float *x, int64_t n, uint8_t *out, float *dec) {
  if (is_block(c.kind)) {
    ref_block_encode(c, x, n, out, dec, kSeed);
    return;
  }
  memset(out, 0, zinc_codec_bytes(c, n));
  for (int64_t i = 0; i < n; i++) {
    zinc_store_from_f32(out, i, cast_dt(c.kind), x[i]);
    dec[i] = zinc_load_as_f32(out, i, cast_dt(c.kind));
  }
}

/* The largest |x| of the block holding element i (casts: |x[i]|), -1 when
 * that block is not finite. */
static double block_max(zinc_codec c, const float *x, int64_t n, int64_t i) {
  int64_t lo = is_block(c.kind) ? i / c.block * c.block : i;
  int64_t hi = is_block(c.kind) ? (lo + c.block < n ? lo + c.block : n) : i + 1;
  double m = 0;
  for (int64_t k = lo; k < hi; k++) {
    if (!isfinite(x[k]))
      return -1;
    m = fmax(m, fabs((double)x[k]));
  }
  return m;
}

/* -------------------------------------------------- encode vs reference */

static int64_t compare_bytes(const char *what, const uint8_t *got, const uint8_t *want,
                             size_t bytes) {
  int64_t bad = 0;
  for (size_t i = 0; i < bytes; i++)
    if (got[i] != want[i] && bad++ < TEST_MAX_REPORTED)
      fprintf(stderr, "%s: byte %zu of %zu: got 0x%02x, want 0x%02x\n", what, i, bytes,
              got[i], want[i]);
  return bad;
}

static void codec_vs_reference(void **state) {
  test_rng r = {0x0C0DECull};
  int64_t bad = 0;
  for (int k = 0; k < NKINDS; k++)
    for (size_t bi = 0; bi < sizeof kBlocks / sizeof kBlocks[0]; bi++) {
      const int B = kBlocks[bi];
      zinc_codec c = {kKinds[k], is_block(kKinds[k]) ? B : 0, 0};
      const int64_t ns[] = {0, 1, B - 1, B + 1, 2 * B + 3, 8 * B + 5, 1001};
      for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int64_t n = ns[ni];
        const size_t bytes = zinc_codec_bytes(c, n);
        float *x = malloc((size_t)(n + 1) * 4), *want_v = malloc((size_t)(n + 1) * 4);
        float *got_v = malloc((size_t)(n + 1) * 4);
        uint8_t *want = malloc(bytes + 1), *got = malloc(bytes + 16);
        fill_cases(&r, x, n, B, c.kind == ZINC_CODEC_INT4 ? 7 : 127);
        ref_encode(c, x, n, want, want_v);
        memset(got, 0x5a, bytes + 16);
        char what[96];
        snprintf(what, sizeof what, "%s block %d n %lld", zinc_codec_name(c), B, (long long)n);
        assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, got, x, ZINC_F32,
                                               n, NULL, 0.0f, kSeed), ZINC_OK);
        assert_true(bytes % 16 == 0);
        bad += compare_bytes(what, got, want, bytes);
        for (int t = 0; t < 16; t++) /* nothing beyond the encoding */
          bad += got[bytes + (size_t)t] != 0x5a;
        memset(got_v, 0x5a, (size_t)(n + 1) * 4);
        assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, got_v, ZINC_F32,
                                               want, n, 0), ZINC_OK);
        bad += test_compare_bits(what, got_v, want_v, n, ZINC_F32);
        /* the bound, and NaN for a non-finite block */
        for (int64_t i = 0; i < n; i++) {
          double m = block_max(c, x, n, i);
          if (m < 0) {
            if (is_block(c.kind) && !isnan(got_v[i]) && bad++ < 8)
              fprintf(stderr, "%s: element %lld of a non-finite block decodes to %g\n", what,
                      (long long)i, (double)got_v[i]);
            continue;
          }
          double bound = zinc_codec_error_bound(c, m);
          double err = fabs((double)got_v[i] - (double)x[i]);
          if (!(err <= bound) && isfinite(bound) && bad++ < 8)
            fprintf(stderr, "%s: element %lld: |%.9g - %.9g| = %g above the bound %g (m %g)\n",
                    what, (long long)i, (double)got_v[i], (double)x[i], err, bound, m);
        }
        free(x);
        free(want_v);
        free(got_v);
        free(want);
        free(got);
      }
    }
  assert_int_equal(bad, 0);
}

/* Source dtypes: the encoder reads bf16/f16 through zinc_math.h's loads. */
static void codec_from_16bit(void **state) {
  test_rng r = {0x16B17ull};
  int64_t bad = 0;
  const int64_t n = 777;
  for (int k = 0; k < NKINDS; k++)
    for (int sdt = ZINC_BF16; sdt <= ZINC_F16; sdt++) {
      zinc_codec c = {kKinds[k], is_block(kKinds[k]) ? 32 : 0, 0};
      size_t bytes = zinc_codec_bytes(c, n);
      uint16_t src[777];
      float x[777], want_v[777];
      uint8_t *want = malloc(bytes), *got = malloc(bytes);
      fill_decades(&r, src, sdt, n, -3, 3);
      for (int64_t i = 0; i < n; i++)
        x[i] = zinc_load_as_f32(src, i, sdt);
      ref_encode(c, x, n, want, want_v);
      assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, got, src, sdt, n,
                                             NULL, 0.0f, kSeed), ZINC_OK);
      bad += compare_bytes(zinc_codec_name(c), got, want, bytes);
      free(want);
      free(got);
    }
  assert_int_equal(bad, 0);
}

/* decode to bf16 / f16 stores the f32 value rounded; accumulate adds it. */
static void decode_dtypes_and_accumulate(void **state) {
  test_rng r = {0xACCull};
  int64_t bad = 0;
  const int64_t n = 1001;
  float x[1001], dec[1001], acc[1001], want_acc[1001];
  for (int k = 0; k < NKINDS; k++) {
    zinc_codec c = {kKinds[k], is_block(kKinds[k]) ? 7 : 0, 0};
    size_t bytes = zinc_codec_bytes(c, n);
    uint8_t *enc = malloc(bytes);
    fill_cases(&r, x, n, 7, c.kind == ZINC_CODEC_INT4 ? 7 : 127);
    ref_encode(c, x, n, enc, dec);
    for (int ddt = ZINC_BF16; ddt <= ZINC_F16; ddt++) {
      uint16_t got[1001], want[1001];
      for (int64_t i = 0; i < n; i++)
        zinc_store_from_f32(want, i, ddt, dec[i]);
      assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, got, ddt, enc, n, 0),
                       ZINC_OK);
      bad += test_compare_bits(zinc_codec_name(c), got, want, n, ddt);
    }
    fill_decades(&r, acc, ZINC_F32, n, -2, 2);
    for (int64_t i = 0; i < n; i++)
      want_acc[i] = (float)((double)acc[i] + (double)dec[i]);
    assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, acc, ZINC_F32, enc, n, 1),
                     ZINC_OK);
    bad += test_compare_bits("accumulate", acc, want_acc, n, ZINC_F32);
    free(enc);
  }
  assert_int_equal(bad, 0);
}

/* ------------------------------------------------------ error feedback */

/* One step of codec.h's error feedback in the reference: out (the wire
 * bytes) and ef (rewritten), with beta. */
static void ref_ef_step(zinc_codec c, const float *src, int64_t n, uint8_t *out, uint8_t *ef,
                        float beta) {
  zinc_codec ec = {ZINC_CODEC_INT8, c.block, 0};
  const int64_t B = c.block, nb = (n + B - 1) / B;
  float *d = calloc((size_t)n, 4), *x = calloc((size_t)n, 4), *dq = calloc((size_t)n, 4);
  float *rr = malloc((size_t)n * 4), *unused = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    float s;
    memcpy(&s, ef + 4 * (i / B), 4);
    d[i] = (float)((double)(int8_t)ef[4 * nb + i] * s);
    x[i] = (float)((double)src[i] + d[i]);
  }
  ref_block_encode(c, x, n, out, dq, kSeed);
  float omb = (float)(1.0 - (double)beta);
  for (int64_t i = 0; i < n; i++) {
    float err = (float)((double)x[i] - dq[i]);
    rr[i] = (float)((double)(float)((double)beta * d[i]) + (double)(float)((double)omb * err));
  }
  /* a block whose x or r is not finite leaves a zero residual */
  for (int64_t b = 0; b < nb; b++)
    for (int64_t i = b * B; i < n && i < (b + 1) * B; i++)
      if (!isfinite(x[i]) || !isfinite(rr[i])) {
        for (int64_t k = b * B; k < n && k < (b + 1) * B; k++)
          rr[k] = 0.0f;
        break;
      }
  ref_block_encode(ec, rr, n, ef, unused, 0);
  free(d);
  free(x);
  free(dq);
  free(rr);
  free(unused);
}

static void ef_follows_formula(void **state) {
  test_rng r = {0xEF08ull};
  int64_t bad = 0;
  const float beta = 0.8f;
  for (int k = ZINC_CODEC_INT8; k <= ZINC_CODEC_TERN2; k++)
    for (size_t bi = 0; bi < 4; bi++) {
      zinc_codec c = {k, kBlocks[bi], 0};
      const int64_t n = 3 * kBlocks[bi] + 5;
      zinc_codec ec = {ZINC_CODEC_INT8, c.block, 0};
      size_t bytes = zinc_codec_bytes(c, n), ebytes = zinc_codec_bytes(ec, n);
      uint8_t *got = malloc(bytes), *want = malloc(bytes);
      uint8_t *ef = calloc(1, ebytes), *ref_ef = calloc(1, ebytes);
      float *x = malloc((size_t)n * 4);
      for (int step = 0; step < 6; step++) {
        fill_cases(&r, x, n, c.block, k == ZINC_CODEC_INT4 ? 7 : 127);
        if (step % 2) /* plain steps between the case mixes */
          fill_decades(&r, x, ZINC_F32, n, -2, 1);
        ref_ef_step(c, x, n, want, ref_ef, beta);
        assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, got, x, ZINC_F32,
                                               n, ef, beta, kSeed), ZINC_OK);
        char what[64];
        snprintf(what, sizeof what, "%s block %d step %d", zinc_codec_name(c), c.block, step);
        bad += compare_bytes(what, got, want, bytes);
        bad += compare_bytes("ef", ef, ref_ef, ebytes);
      }
      free(got);
      free(want);
      free(ef);
      free(ref_ef);
      free(x);
    }
  assert_int_equal(bad, 0);
}

/* Running sum over T encodings of one constant vector, each decoded;
 * returns the worst |sum - T x| in units of the block's max |x|. With
 * error feedback (beta 0) the sum telescopes: decoded_t = x + d_{t-1} -
 * err_t and d_t = INT8(err_t), so
 *   sum = T x - d_T + sum_t (d_t - err_t),
 * each term within the INT8 bound of that step's residual block (plus the
 * fp32 roundings of x + d and err, 2^-24 of a few block maxima each);
 * *identity_bad counts the elements where this does not hold. */
static double ef_drift(zinc_codec c, const float *x, int64_t n, int use_ef, int T,
                       int64_t *identity_bad) {
  const zinc_codec ec = {ZINC_CODEC_INT8, c.block, 0};
  size_t bytes = zinc_codec_bytes(c, n);
  uint8_t *enc = malloc(bytes), *ef = calloc(1, zinc_codec_bytes(ec, n));
  float *dec = malloc((size_t)n * 4), *res = malloc((size_t)n * 4);
  double *sum = calloc((size_t)n, sizeof(double)), *slack = calloc((size_t)n, sizeof(double));
  for (int t = 0; t < T; t++) {
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, enc, x, ZINC_F32, n,
                                           use_ef ? ef : NULL, 0.0f, kSeed), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, dec, ZINC_F32, enc, n,
                                           0), ZINC_OK);
    for (int64_t i = 0; i < n; i++) {
      sum[i] += dec[i];
      if (use_ef) {
        float s;
        memcpy(&s, ef + 4 * (i / c.block), 4);
        slack[i] += zinc_codec_error_bound(ec, 127.0 * s) +
                    ldexp(8.0 * (fabs(dec[i]) + 127.0 * s + fabs(x[i])), -24);
      }
    }
  }
  double worst = 0;
  assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, ec, res, ZINC_F32, ef, n, 0),
                   ZINC_OK);
  for (int64_t i = 0; i < n; i++) {
    double m = block_max(c, x, n, i);
    worst = fmax(worst, fabs(sum[i] - (double)T * x[i]) / m);
    double off = fabs(sum[i] + res[i] - (double)T * x[i]);
    if (use_ef && !(off <= slack[i]) && (*identity_bad)++ < 8)
      fprintf(stderr, "%s element %lld: |sum + d_T - T x| = %g above %g\n", zinc_codec_name(c),
              (long long)i, off, slack[i]);
  }
  free(enc);
  free(ef);
  free(dec);
  free(res);
  free(sum);
  free(slack);
  return worst;
}

/* beta 0: what error feedback promises is that the sum of what was sent
 * stays T x minus the residual carried (the identity above), so its
 * distance to T x does not grow with T; without it SIGN1 sends
 * +-mean|x| every time and drifts by T ||x| - mean|x||. */
static void ef_tracks_the_sum(void **state) {
  test_rng r = {0x5E1Full};
  const int64_t n = 1000;
  float x[1000];
  for (int64_t i = 0; i < n; i++)
    x[i] = rng_decades(&r, -2, 0);
  int64_t identity_bad = 0;
  for (int k = ZINC_CODEC_INT8; k <= ZINC_CODEC_SIGN1; k++) {
    zinc_codec c = {k, 32, 0};
    double with100 = ef_drift(c, x, n, 1, 100, &identity_bad);
    double with = ef_drift(c, x, n, 1, 200, &identity_bad);
    double without = ef_drift(c, x, n, 0, 200, &identity_bad);
    fprintf(stderr, "%s: |sum of T decodings - T x| / block max: %.3g (T 100), %.3g (T 200) "
            "with error feedback, %.3g (T 200) without\n", zinc_codec_name(c), with100, with,
            without);
    assert_true(with <= 1.2 * with100 + 0.01); /* bounded, not growing */
    /* INT8/INT4: the carried residual is within one bound of the block, its
     * own INT8 roundings add at most another (the identity above is exact) */
    if (k != ZINC_CODEC_SIGN1)
      assert_true(with <= 2.0 * zinc_codec_error_bound(c, 1.0));
    if (k == ZINC_CODEC_SIGN1)
      assert_true(without > 5.0 * with);
  }
  assert_int_equal(identity_bad, 0);
}

/* A zero-filled ef is no residual: the wire bytes are those without ef,
 * and the new residual (beta 0.5) is INT8 of half the error. */
static void zero_ef_is_no_residual(void **state) {
  test_rng r = {0x2E80ull};
  const int64_t n = 515;
  float x[515];
  fill_decades(&r, x, ZINC_F32, n, -3, 1);
  for (int k = ZINC_CODEC_INT8; k <= ZINC_CODEC_TERN2; k++) {
    zinc_codec c = {k, 32, 0};
    size_t bytes = zinc_codec_bytes(c, n), ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, 32, 0}, n);
    uint8_t *a = malloc(bytes), *b = malloc(bytes), *ef = calloc(1, ebytes), *ref_ef = calloc(1, ebytes);
    uint8_t *unused = malloc(bytes);
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, a, x, ZINC_F32, n, NULL,
                                           0.0f, kSeed), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, b, x, ZINC_F32, n, ef,
                                           0.5f, kSeed), ZINC_OK);
    assert_int_equal(compare_bytes("wire with a zero ef", b, a, bytes), 0);
    ref_ef_step(c, x, n, unused, ref_ef, 0.5f);
    assert_int_equal(compare_bytes("residual", ef, ref_ef, ebytes), 0);
    free(a);
    free(b);
    free(ef);
    free(ref_ef);
    free(unused);
  }
}

/* ---------------------------------------------- every path, any threads */

typedef struct {
  uint8_t *enc, *ef;
  float *dec, *acc;
  uint16_t *dec16;
} run_out;

static void run_path(zinc_threadpool *pool, zinc_cpu_isa isa, zinc_codec c, const void *src,
                     int sdt, int64_t n, int use_ef, const float *acc0, run_out *o) {
  size_t bytes = zinc_codec_bytes(c, n);
  size_t ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, c.block, 0}, n);
  o->enc = malloc(bytes + 1);
  o->ef = use_ef ? calloc(1, ebytes + 1) : NULL;
  o->dec = malloc((size_t)n * 4 + 4);
  o->acc = malloc((size_t)n * 4 + 4);
  o->dec16 = malloc((size_t)n * 2 + 2);
  memcpy(o->acc, acc0, (size_t)n * 4);
  for (int step = 0; step < (use_ef ? 3 : 1); step++)
    assert_int_equal(zinc_cpu_codec_encode(pool, isa, c, o->enc, src, sdt, n, o->ef, 0.8f, kSeed),
                     ZINC_OK);
  assert_int_equal(zinc_cpu_codec_decode(pool, isa, c, o->dec, ZINC_F32, o->enc, n, 0), ZINC_OK);
  assert_int_equal(zinc_cpu_codec_decode(pool, isa, c, o->dec16, ZINC_BF16, o->enc, n, 0),
                   ZINC_OK);
  assert_int_equal(zinc_cpu_codec_decode(pool, isa, c, o->acc, ZINC_F32, o->enc, n, 1), ZINC_OK);
}

static void run_free(run_out *o) {
  free(o->enc);
  free(o->ef);
  free(o->dec);
  free(o->acc);
  free(o->dec16);
}

static void paths_agree(void **state) {
  test_rng r = {0xB175ull};
  zinc_threadpool *pools[2] = {NULL, NULL};
  assert_int_equal(zinc_threadpool_create(1, NULL, NULL, &pools[0]), ZINC_OK);
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pools[1]), ZINC_OK);
  int64_t bad = 0, runs = 0;
  const int64_t n = 100003;
  float *x = malloc((size_t)n * 4), *acc0 = malloc((size_t)n * 4);
  uint16_t *x16 = malloc((size_t)n * 2);
  fill_decades(&r, acc0, ZINC_F32, n, -2, 2);
  for (int k = 0; k < NKINDS; k++)
    for (size_t bi = 0; bi < 4; bi++)
      for (int sdt = 0; sdt < 3; sdt++) {
        zinc_codec c = {kKinds[k], is_block(kKinds[k]) ? kBlocks[bi] : 0, 0};
        if (!is_block(c.kind) && bi > 0)
          continue;
        int64_t nn = n - (int64_t)bi; /* odd and even lengths */
        fill_cases(&r, x, nn, kBlocks[bi], c.kind == ZINC_CODEC_INT4 ? 7 : 127);
        const void *src = x;
        if (sdt != ZINC_F32) {
          for (int64_t i = 0; i < nn; i++)
            zinc_store_from_f32(x16, i, sdt, x[i]);
          src = x16;
        }
        for (int use_ef = 0; use_ef <= is_block(c.kind); use_ef++) {
          run_out ref;
          run_path(NULL, ZINC_CPU_ISA_SCALAR, c, src, sdt, nn, use_ef, acc0, &ref);
          size_t bytes = zinc_codec_bytes(c, nn);
          size_t ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, c.block, 0}, nn);
          for (int isa = 0; isa < ZINC_CPU_ISA_N; isa++) {
            if (!zinc_cpu_isa_supported((zinc_cpu_isa)isa))
              continue;
            for (int p = 0; p < 2; p++) {
              run_out got;
              run_path(pools[p], (zinc_cpu_isa)isa, c, src, sdt, nn, use_ef, acc0, &got);
              char what[128];
              snprintf(what, sizeof what, "%s %s block %d src %d ef %d, %d threads",
                       zinc_cpu_isa_name((zinc_cpu_isa)isa), zinc_codec_name(c), c.block, sdt,
                       use_ef, p ? 3 : 1);
              int64_t b = compare_bytes(what, got.enc, ref.enc, bytes);
              if (use_ef)
                b += compare_bytes(what, got.ef, ref.ef, ebytes);
              b += test_compare_bits(what, got.dec, ref.dec, nn, ZINC_F32);
              b += test_compare_bits(what, got.dec16, ref.dec16, nn, ZINC_BF16);
              b += test_compare_bits(what, got.acc, ref.acc, nn, ZINC_F32);
              bad += b;
              runs++;
              run_free(&got);
            }
          }
          run_free(&ref);
        }
      }
  fprintf(stderr, "%lld path runs compared\n", (long long)runs);
  free(x);
  free(x16);
  free(acc0);
  zinc_threadpool_destroy(pools[0]);
  zinc_threadpool_destroy(pools[1]);
  assert_int_equal(bad, 0);
}

/* The cpu device's encode/decode ops are these kernels on its pool. */
static void cpu_device_ops(void **state) {
  zinc_device *d = NULL;
  assert_int_equal(zinc_device_cpu_create(2, 0, &d), ZINC_OK);
  test_rng r = {0xDE71CEull};
  const int64_t n = 70001;
  float *x = malloc((size_t)n * 4);
  fill_cases(&r, x, n, 32, 7);
  for (int k = 0; k < NKINDS; k++) {
    zinc_codec c = {kKinds[k], is_block(kKinds[k]) ? 32 : 0, 0};
    int use_ef = is_block(c.kind);
    run_out want, got;
    run_path(NULL, ZINC_CPU_ISA_SCALAR, c, x, ZINC_F32, n, use_ef, x, &want);
    size_t bytes = zinc_codec_bytes(c, n);
    size_t ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, 32, 0}, n);
    got.enc = malloc(bytes);
    got.ef = use_ef ? calloc(1, ebytes) : NULL;
    got.acc = malloc((size_t)n * 4);
    memcpy(got.acc, x, (size_t)n * 4);
    for (int step = 0; step < (use_ef ? 3 : 1); step++)
      assert_int_equal(d->ops->encode(d, NULL, c, got.enc, x, ZINC_F32, n, got.ef, 0.8f, kSeed), ZINC_OK);
    assert_int_equal(d->ops->decode(d, NULL, c, got.acc, ZINC_F32, got.enc, n, 1), ZINC_OK);
    assert_int_equal(compare_bytes("cpu device encode", got.enc, want.enc, bytes), 0);
    if (use_ef)
      assert_int_equal(compare_bytes("cpu device ef", got.ef, want.ef, ebytes), 0);
    assert_int_equal(test_compare_bits("cpu device decode", got.acc, want.acc, n, ZINC_F32), 0);
    assert_int_equal(d->ops->decode(d, NULL, c, got.acc, ZINC_BF16, got.enc, n, 1),
                     ZINC_ERR_INVALID);
    free(got.enc);
    free(got.ef);
    free(got.acc);
    run_free(&want);
  }
  free(x);
  zinc_device_destroy(d);
}

/* ------------------------------------------------------------- TernGrad */

/* E[decoded] = x: over S seeds the mean of each element's decodings is
 * within 6 standard errors (the draw is Bernoulli(|x| / s): variance
 * |x| (s - |x|)) of x, plus the draw's 2^-24 s resolution; the sum over
 * all elements of (mean - x), whose standard error is the root of the
 * summed variances, within 5 of them. Every decoded value is 0 or s with
 * x's sign, s the block's max |x|. */
static void tern_unbiased(void **state) {
  test_rng r = {0x7E44ull};
  const int64_t n = 2000, S = 4000;
  const zinc_codec c = {ZINC_CODEC_TERN2, 256, 0};
  float x[2000], dec[2000];
  double sum[2000] = {0};
  uint8_t *enc = malloc(zinc_codec_bytes(c, n));
  for (int64_t i = 0; i < n; i++)
    x[i] = (i % 97 == 0) ? 0.0f : rng_decades(&r, -3, 0) * ((i & 1) ? -1.0f : 1.0f);
  int64_t bad = 0;
  for (int64_t t = 0; t < S; t++) {
    uint64_t seed = 0x1234567ull * (uint64_t)t + 99;
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, enc, x, ZINC_F32, n,
                                           NULL, 0.0f, seed), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_decode(NULL, ZINC_CPU_ISA_SCALAR, c, dec, ZINC_F32, enc, n,
                                           0), ZINC_OK);
    for (int64_t i = 0; i < n; i++) {
      double m = block_max(c, x, n, i);
      int ok = dec[i] == 0.0f || (dec[i] == (float)m && x[i] > 0) ||
               (dec[i] == -(float)m && x[i] < 0);
      if (!ok && bad++ < 8)
        fprintf(stderr, "seed %lld element %lld: x %g decodes to %g, not 0 or %s%g\n",
                (long long)t, (long long)i, (double)x[i], (double)dec[i], x[i] < 0 ? "-" : "",
                m);
      sum[i] += dec[i];
    }
  }
  double total = 0, total_var = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double m = block_max(c, x, n, i), a = fabs((double)x[i]);
    double var = a * (m - a), mean = sum[i] / (double)S;
    double se = sqrt(var / (double)S), dev = fabs(mean - (double)x[i]);
    worst = fmax(worst, se > 0 ? dev / se : 0);
    if (!(dev <= 6.0 * se + ldexp(m, -23)) && bad++ < 8)
      fprintf(stderr, "element %lld: mean of %lld decodings %.9g, x %.9g: %.3g standard "
              "errors (%g) off\n", (long long)i, (long long)S, mean, (double)x[i],
              se > 0 ? dev / se : INFINITY, se);
    total += mean - (double)x[i];
    total_var += var / (double)S;
  }
  fprintf(stderr, "terngrad: worst element %.2f standard errors off, the sum %.2f\n", worst,
          total / sqrt(total_var));
  if (!(fabs(total) <= 5.0 * sqrt(total_var)))
    fail_msg("sum of (mean - x) %g, %g standard errors", total, total / sqrt(total_var));
  free(enc);
  assert_int_equal(bad, 0);
}

/* The seed changes the draws (and only for TERN2): two seeds give other
 * bytes; INT8 ignores it. */
static void tern_seed_matters(void **state) {
  test_rng r = {0x5EEDull};
  const int64_t n = 1000;
  float x[1000];
  fill_decades(&r, x, ZINC_F32, n, -2, 0);
  for (int k = ZINC_CODEC_INT8; k <= ZINC_CODEC_TERN2; k++) {
    zinc_codec c = {k, 64, 0};
    size_t bytes = zinc_codec_bytes(c, n);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, a, x, ZINC_F32, n,
                                           NULL, 0.0f, 1), ZINC_OK);
    assert_int_equal(zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, c, b, x, ZINC_F32, n,
                                           NULL, 0.0f, 2), ZINC_OK);
    int differ = memcmp(a, b, bytes) != 0;
    if (differ != (k == ZINC_CODEC_TERN2))
      fail_msg("%s: seeds 1 and 2 give %s bytes", zinc_codec_name(c),
               differ ? "different" : "the same");
    free(a);
    free(b);
  }
}

/* ------------------------------------------------------- bad arguments */

static void bad_arguments(void **state) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t out[64], ef[64];
  memset(out, 0x77, sizeof out);
  memset(ef, 0, sizeof ef);
  const zinc_cpu_isa s = ZINC_CPU_ISA_SCALAR;
  struct {
    zinc_codec c;
    int dtype;
    int64_t n;
    int use_ef;
    float beta;
  } enc_cases[] = {
      {{ZINC_CODEC_NONE, 0, 0}, ZINC_F32, 8, 0, 0},   {{ZINC_CODEC_NKINDS, 0, 0}, ZINC_F32, 8, 0, 0},
      {{-1, 0, 0}, ZINC_F32, 8, 0, 0},                {{ZINC_CODEC_INT8, 0, 0}, ZINC_F32, 8, 0, 0},
      {{ZINC_CODEC_INT4, -3, 0}, ZINC_F32, 8, 0, 0},  {{ZINC_CODEC_INT8, 4, 0}, 3, 8, 0, 0},
      {{ZINC_CODEC_INT8, 4, 0}, ZINC_F32, -1, 0, 0},  {{ZINC_CODEC_BF16, 0, 0}, ZINC_F32, 8, 1, 0},
      {{ZINC_CODEC_SIGN1, 4, 0}, ZINC_F32, 8, 1, 1.5f}, {{ZINC_CODEC_SIGN1, 4, 0}, ZINC_F32, 8, 1, NAN},
      {{ZINC_CODEC_SIGN1, 4, 0}, ZINC_F32, 8, 1, -0.1f},
  };
  for (size_t i = 0; i < sizeof enc_cases / sizeof enc_cases[0]; i++) {
    assert_int_equal(zinc_cpu_codec_encode(NULL, s, enc_cases[i].c, out, x, enc_cases[i].dtype,
                                           enc_cases[i].n, enc_cases[i].use_ef ? ef : NULL,
                                           enc_cases[i].beta, kSeed), ZINC_ERR_INVALID);
    fprintf(stderr, "encode case %zu: %s\n", i, zinc_last_error());
  }
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, (zinc_codec){ZINC_CODEC_INT8, 4, 0}, NULL, x,
                                         ZINC_F32, 8, NULL, 0, kSeed), ZINC_ERR_INVALID);
  /* decode: accumulate into a 16-bit dtype, a bad dtype, negative n */
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, (zinc_codec){ZINC_CODEC_INT8, 4, 0}, out,
                                         ZINC_BF16, x, 8, 1), ZINC_ERR_INVALID);
  fprintf(stderr, "decode: %s\n", zinc_last_error());
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, (zinc_codec){ZINC_CODEC_INT8, 4, 0}, out, 7, x,
                                         8, 0), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, (zinc_codec){ZINC_CODEC_INT8, 4, 0}, out,
                                         ZINC_F32, x, -8, 0), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, (zinc_codec){ZINC_CODEC_NONE, 0, 0}, out,
                                         ZINC_F32, x, 8, 0), ZINC_ERR_INVALID);
  for (size_t i = 0; i < sizeof out; i++) /* nothing was written */
    assert_int_equal(out[i], 0x77);
  for (size_t i = 0; i < sizeof ef; i++)
    assert_int_equal(ef[i], 0);
  /* n = 0 needs no buffers */
  assert_int_equal(zinc_cpu_codec_encode(NULL, s, (zinc_codec){ZINC_CODEC_INT4, 4, 0}, NULL, NULL,
                                         ZINC_F32, 0, NULL, 0, kSeed), ZINC_OK);
  assert_int_equal(zinc_cpu_codec_decode(NULL, s, (zinc_codec){ZINC_CODEC_SIGN1, 4, 0}, NULL,
                                         ZINC_F32, NULL, 0, 1), ZINC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(codec_vs_reference),
      cmocka_unit_test(codec_from_16bit),
      cmocka_unit_test(decode_dtypes_and_accumulate),
      cmocka_unit_test(ef_follows_formula),
      cmocka_unit_test(ef_tracks_the_sum),
      cmocka_unit_test(zero_ef_is_no_residual),
      cmocka_unit_test(paths_agree),
      cmocka_unit_test(cpu_device_ops),
      cmocka_unit_test(tern_unbiased),
      cmocka_unit_test(tern_seed_matters),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
