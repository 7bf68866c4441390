/* test_cpu_optim_bf16.c — the fused optimizers with master and/or state
 * slots stored in bf16 (zinc_opt_seg.master_dtype, state_dtype; DeepSpeed's
 * bf16_master_weights_and_grads and bf16_optimizer_states), rounded to
 * nearest even or stochastically (zinc_opt_coef.bf16_rounding):
 *  - each SIMD path, and a pool of three threads, bit for bit against the
 *    scalar path: every optimizer case x storage pair (bf16 master, bf16
 *    state, both) x rounding x grad dtype x compute-copy dtype x decay, odd
 *    lengths, misaligned starts, spans long enough for the streaming
 *    stores and several Lamb blocks, inf/NaN gradients, Lamb's norms;
 *  - an independent reference (every fp32 operation emulated in double and
 *    rounded once, a bf16 rounding written arithmetically) over three steps
 *    of Adam, AdamW, Lion, Adagrad, SGD with momentum and Lamb: every
 *    stored bf16 value is the round-to-nearest-even of the fp32 result,
 *    element by element, and Lamb's norms are those of the update from the
 *    stored moments; ties (exact bf16 midpoints) go to even on every path;
 *  - stochastic rounding: the mean of the stored values over 2^18 elements
 *    that compute the same fp32 value is that value within 5 standard
 *    deviations of a fair draw, for each slot; the same bits run to run, a
 *    different seed or step draws differently; the bits do not depend on
 *    how a segment is cut into pieces (global_offset), on threads or ISA,
 *    also across a global index that crosses 2^32; pinned draw values;
 *  - fp32 storage ignores the rounding mode; bad storage dtypes or
 *    rounding modes are refused with nothing touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/threadpool.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"
#include "kernels/optim_cases.h"

static const int64_t lengths[] = {1, 7, 17, 33, 1001, 4099, 9000, 300007};
#define NLEN (int)(sizeof lengths / sizeof lengths[0])
#define LAMB_TEST_RATIO 0.73f

/* The three storage pairs with a bf16 slot: (master dtype, state dtype). */
static const int stores[3][2] = {{ZINC_BF16, ZINC_F32}, {ZINC_F32, ZINC_BF16},
                                 {ZINC_BF16, ZINC_BF16}};

/* ------------------------------------------------------------ buffers */

typedef struct {
  test_buf p, m, v, g, out;
  int mdt, sdt, gdt, odt; /* odt < 0: no compute copy */
  double norms[2];
} bufs;

static bufs bufs_alloc(int64_t n, int mdt, int sdt, int gdt, int odt, int shift) {
  bufs b = {.mdt = mdt, .sdt = sdt, .gdt = gdt, .odt = odt, .norms = {-1.0, -1.0}};
  b.p = buf_alloc(n, dt_bytes(mdt), (shift + 1) % 16);
  b.m = buf_alloc(n, dt_bytes(sdt), (shift + 2) % 16);
  b.v = buf_alloc(n, dt_bytes(sdt), (shift + 3) % 16);
  b.g = buf_alloc(n, dt_bytes(gdt), (shift + 5) % 32);
  b.out = buf_alloc(n, odt < 0 ? 2 : dt_bytes(odt), (shift + 7) % 32);
  return b;
}

static void bufs_free(bufs *b) {
  free(b->p.block);
  free(b->m.block);
  free(b->v.block);
  free(b->g.block);
  free(b->out.block);
}

static void copy_inputs(bufs *dst, const bufs *src, int64_t n) {
  memcpy(dst->p.p, src->p.p, (size_t)n * dt_bytes(src->mdt));
  memcpy(dst->m.p, src->m.p, (size_t)n * dt_bytes(src->sdt));
  memcpy(dst->v.p, src->v.p, (size_t)n * dt_bytes(src->sdt));
  memcpy(dst->g.p, src->g.p, (size_t)n * dt_bytes(src->gdt));
  memset(dst->out.p, 0x5a, (size_t)n * (src->odt < 0 ? 2 : dt_bytes(src->odt)));
}

static void fill_state(test_rng *r, bufs *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float p = rng_decades(r, -6.0f, 3.0f), m = rng_decades(r, -6.0f, 0.0f);
    float v = fabsf(rng_decades(r, -12.0f, 0.0f)), g = rng_decades(r, -8.0f, 4.0f);
    switch (rng_u32(r) % 64) {
    case 0: g = 0.0f; break;
    case 1: g = INFINITY; break;
    case 2: g = -INFINITY; break;
    case 3: g = NAN; break;
    case 4: m = 0.0f; g = 0.0f; break; /* Lion: sign of a zero */
    default: break;
    }
    zinc_store_from_f32(b->p.p, i, b->mdt, p);
    zinc_store_from_f32(b->m.p, i, b->sdt, m);
    zinc_store_from_f32(b->v.p, i, b->sdt, v);
    zinc_store_from_f32(b->g.p, i, b->gdt, g);
  }
}

static zinc_opt_seg make_seg(const optim_case *c, bufs *b, int64_t n, int decay,
                             int64_t global_offset) {
  int use_m, use_v, use_g;
  case_slots(c, &use_m, &use_v, &use_g);
  return (zinc_opt_seg){.master = b->p.p,
                        .exp_avg = use_m ? b->m.p : NULL,
                        .exp_avg_sq = use_v ? b->v.p : NULL,
                        .grad = use_g ? b->g.p : NULL,
                        .param_out = b->odt < 0 ? NULL : b->out.p,
                        .n = n,
                        .grad_dtype = b->gdt,
                        .param_dtype = b->odt < 0 ? ZINC_F32 : b->odt,
                        .decay = decay,
                        .lamb_ratio = LAMB_TEST_RATIO,
                        .master_dtype = b->mdt,
                        .state_dtype = b->sdt,
                        .global_offset = global_offset};
}

static zinc_opt_coef rounded_coef(const optim_case *c, double grad_scale, int rounding,
                                  uint64_t seed) {
  zinc_opt_coef k = case_coef(c, grad_scale);
  k.bf16_rounding = rounding;
  k.rounding_seed = seed;
  k.rounding_step = c->step;
  return k;
}

static void run_case(zinc_threadpool *pool, zinc_cpu_isa isa, const optim_case *c,
                     const zinc_opt_coef *k, const bufs *src, bufs *dst, int64_t n, int decay,
                     int64_t global_offset) {
  copy_inputs(dst, src, n);
  zinc_opt_seg seg = make_seg(c, dst, n, decay, global_offset);
  assert_int_equal(zinc_cpu_optim(pool, isa, k, 1, &seg, 1, c->pass, dst->norms), ZINC_OK);
}

static int64_t compare(const char *what, const bufs *want, const bufs *got, int64_t n) {
  int64_t bad = test_compare_bits("master", got->p.p, want->p.p, n, want->mdt) +
                test_compare_bits("exp_avg", got->m.p, want->m.p, n, want->sdt) +
                test_compare_bits("exp_avg_sq", got->v.p, want->v.p, n, want->sdt);
  if (want->odt >= 0)
    bad += test_compare_bits("param_out", got->out.p, want->out.p, n, want->odt);
  for (int i = 0; i < 2; i++)
    if (memcmp(&got->norms[i], &want->norms[i], sizeof(double)) &&
        !(isnan(got->norms[i]) && isnan(want->norms[i]))) {
      fprintf(stderr, "%s: norms[%d] %.17g, want %.17g\n", what, i, got->norms[i],
              want->norms[i]);
      bad++;
    }
  return bad;
}

/* ------------------------------------------------ SIMD paths vs scalar */

/* Every case x storage x rounding x length x dtype pair x decay on `isa`
 * with `pool`, against the scalar path on the calling thread. The dtype
 * pairs are all twelve up to 9000 elements, two on the longest span. */
static void path_matches_scalar(zinc_cpu_isa isa, zinc_threadpool *pool) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  optim_case cases[NCASES];
  all_cases(cases);
  test_rng r = {0xA4093822299F31D0ull + (uint64_t)isa};
  int64_t failures = 0, runs = 0;
  for (int si = 0; si < 3; si++)
    for (int li = 0; li < NLEN; li++) {
      const int64_t n = lengths[li];
      for (int gdt = 0; gdt < 3; gdt++)
        for (int odt = -1; odt < 3; odt++) {
          if (n > 9000 && !((gdt == ZINC_BF16 && odt == ZINC_BF16) ||
                            (gdt == ZINC_F32 && odt == ZINC_F16)))
            continue;
          const int mdt = stores[si][0], sdt = stores[si][1];
          bufs in = bufs_alloc(n, mdt, sdt, gdt, odt, li + si);
          bufs want = bufs_alloc(n, mdt, sdt, gdt, odt, li + si + 1);
          bufs got = bufs_alloc(n, mdt, sdt, gdt, odt, li + si + 2);
          fill_state(&r, &in, n);
          const int64_t offset = (int64_t)(rng_u64(&r) >> 24); /* up to 2^40 */
          for (int ci = 0; ci < NCASES; ci++)
            for (int rounding = 0; rounding < 2; rounding++)
              for (int decay = 0; decay < 2; decay++) {
                zinc_opt_coef k = rounded_coef(&cases[ci], (li & 1) ? 0.5 : 1.0, rounding,
                                               0x5eed0000u + (uint64_t)ci);
                run_case(NULL, ZINC_CPU_ISA_SCALAR, &cases[ci], &k, &in, &want, n, decay,
                         offset);
                run_case(pool, isa, &cases[ci], &k, &in, &got, n, decay, offset);
                int64_t bad = compare(cases[ci].name, &want, &got, n);
                if (bad)
                  fprintf(stderr, "%s, %d threads: %s, master %s, state %s, %s, n %lld, grad "
                          "%s, param_out %s, decay %d: %lld mismatches\n",
                          zinc_cpu_isa_name(isa), zinc_threadpool_size(pool), cases[ci].name,
                          zinc_dtype_name(mdt), zinc_dtype_name(sdt),
                          rounding ? "stochastic" : "nearest even", (long long)n,
                          zinc_dtype_name(gdt), odt < 0 ? "none" : zinc_dtype_name(odt), decay,
                          (long long)bad);
                failures += bad != 0;
                runs++;
              }
          bufs_free(&in);
          bufs_free(&want);
          bufs_free(&got);
        }
    }
  fprintf(stderr, "%s, %d threads: %lld of %lld bf16-storage configurations bitwise equal to "
          "the scalar path\n", zinc_cpu_isa_name(isa), zinc_threadpool_size(pool),
          (long long)(runs - failures), (long long)runs);
  assert_int_equal(failures, 0);
}

static void avx2_matches_scalar(void **state) { path_matches_scalar(ZINC_CPU_ISA_AVX2, NULL); }
static void avx512_matches_scalar(void **state) {
  path_matches_scalar(ZINC_CPU_ISA_AVX512, NULL);
}

static void pool_matches_one_thread(void **state) {
  zinc_threadpool *pool = NULL;
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pool), ZINC_OK);
  path_matches_scalar(zinc_cpu_isa_select(), pool);
  zinc_threadpool_destroy(pool);
}

/* ---------------------------------------------- independent reference */

/* fp32 operations emulated in double: +, -, *, /, sqrt of two floats are
 * correctly rounded when computed in double and rounded once to float
 * (53 >= 2 * 24 + 2); a fused multiply-add is not, so ref_fma rounds the
 * exact a*b + c (two-sum) with the tie case resolved by the residual. */
static float ref_add(float a, float b) { return (float)((double)a + (double)b); }
static float ref_sub(float a, float b) { return (float)((double)a - (double)b); }
static float ref_mul(float a, float b) { return (float)((double)a * (double)b); }
static float ref_div(float a, float b) { return (float)((double)a / (double)b); }
static float ref_sqrt(float a) { return (float)sqrt((double)a); }

static float ref_fma(float a, float b, float c) {
  double p = (double)a * (double)b; /* exact */
  double s = p + (double)c, bb = s - p;
  double err = (p - (s - bb)) + ((double)c - bb); /* p + c = s + err exactly */
  float f = (float)s;
  if (err == 0.0 || (double)f == s || !isfinite(s))
    return f;
  float lo = (double)f < s ? f : nextafterf(f, -INFINITY);
  float hi = nextafterf(lo, INFINITY);
  if (s - (double)lo != (double)hi - s)
    return f; /* not a midpoint: the double s rounds as the exact value does */
  return err > 0.0 ? hi : lo;
}

/* bf16 round to nearest even written arithmetically: 8 significant bits,
 * the spacing of the binade (2^-133 below 2^-126), ties to even, above
 * the largest bf16 + half a spacing to inf. Returns the bits. */
static uint16_t ref_bf16(float x) {
  if (isnan(x))
    return (uint16_t)0x7fc0u;
  if (isinf(x) || x == 0.0f) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
  }
  int e;
  frexp((double)x, &e);                         /* |x| in [2^(e-1), 2^e) */
  double ulp = ldexp(1.0, e - 8 < -133 ? -133 : e - 8);
  double q = (double)x / ulp, r = floor(q), frac = q - r;
  if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) != 0.0))
    r += 1.0;
  double y = r * ulp;
  const double max = ldexp(255.0, 127 - 7); /* 0x7f7f: (2 - 2^-7) 2^127 */
  float f = fabs(y) > max ? copysignf(INFINITY, x) : (float)y;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t h) { return zinc_bf16_to_f32(h); }

/* One element of each optimizer, the fp32 operations of zinc_math.h's
 * order written with the ref_ helpers (values widened from bf16). */
typedef struct {
  float p, m, v;
} ref_elem;

static float ref_lamb_dir(const zinc_opt_coef *c, int decay, float p, float m, float v) {
  float u = ref_div(m, ref_add(ref_sqrt(v), c->eps));
  return decay ? ref_fma(c->weight_decay, p, u) : u;
}

/* Returns Lamb UPDATE's u (from the moments rounded as stored) or 0. */
static float ref_step(const zinc_opt_coef *c, int pass, int decay, float ratio, ref_elem *e,
                      float g) {
  float p = e->p, m = e->m, v = e->v;
  switch (c->kind) {
  case ZINC_OPT_ADAM: {
    g = ref_mul(g, c->grad_scale);
    if (decay && !c->adamw)
      g = ref_fma(c->weight_decay, p, g);
    m = ref_fma(c->beta1, m, ref_mul(c->one_minus_beta1, g));
    v = ref_fma(c->beta2, v, ref_mul(ref_mul(c->one_minus_beta2, g), g));
    float d = ref_fma(ref_sqrt(v), c->inv_sqrt_bc2, c->eps);
    if (decay && c->adamw)
      p = ref_mul(p, c->decay_factor);
    p = ref_fma(-c->step_size, ref_div(m, d), p);
    break;
  }
  case ZINC_OPT_LION: {
    g = ref_mul(g, c->grad_scale);
    float cv = ref_fma(c->beta1, m, ref_mul(c->one_minus_beta1, g));
    if (decay)
      p = ref_mul(p, c->decay_factor);
    p = ref_sub(p, copysignf(c->step_size, cv));
    m = ref_fma(c->beta2, m, ref_mul(c->one_minus_beta2, g));
    break;
  }
  case ZINC_OPT_ADAGRAD:
    g = ref_mul(g, c->grad_scale);
    if (decay)
      g = ref_fma(c->weight_decay, p, g);
    v = ref_fma(g, g, v);
    p = ref_fma(-c->step_size, ref_div(g, ref_add(ref_sqrt(v), c->eps)), p);
    break;
  case ZINC_OPT_SGD: {
    float d = ref_mul(g, c->grad_scale);
    if (decay)
      d = ref_fma(c->weight_decay, p, d);
    if (c->momentum != 0.0f) {
      m = c->first_step ? d : ref_fma(c->momentum, m, ref_mul(c->one_minus_dampening, d));
      d = c->nesterov ? ref_fma(c->momentum, m, d) : m;
    }
    p = ref_fma(-c->step_size, d, p);
    break;
  }
  case ZINC_OPT_LAMB:
    if (pass == ZINC_OPT_PASS_UPDATE) {
      g = ref_mul(g, c->grad_scale);
      m = bf16_value(ref_bf16(ref_fma(c->beta1, m, ref_mul(c->one_minus_beta1, g))));
      v = bf16_value(ref_bf16(ref_fma(c->beta2, v, ref_mul(ref_mul(c->one_minus_beta2, g), g))));
      e->m = m;
      e->v = v;
      return ref_lamb_dir(c, decay, p, m, v);
    }
    p = bf16_value(ref_bf16(ref_fma(-ref_mul(c->step_size, ratio), ref_lamb_dir(c, decay, p, m, v), p)));
    e->p = p;
    return 0.0f;
  }
  e->p = bf16_value(ref_bf16(p));
  e->m = bf16_value(ref_bf16(m));
  e->v = bf16_value(ref_bf16(v));
  return 0.0f;
}

/* Three steps of each optimizer with master and state in bf16, nearest
 * even: after each step every stored value equals the reference's bits;
 * Lamb's norms are zinc_sumsq_chunk_ref of the reference weights and
 * update. Some elements are built to land on exact bf16 midpoints. */
static void equals_rounded_fp32(void **state) {
  optim_case cases[NCASES];
  all_cases(cases);
  const int picks[] = {0, 1, 2, 4, 5, 7, 9}; /* Adam AdamW Lamb Lion Adagrad SGD-m SGD-n */
  const int64_t n = 5003;
  test_rng r = {2718};
  int64_t bad = 0;
  for (int pi = 0; pi < (int)(sizeof picks / sizeof picks[0]); pi++) {
    optim_case oc = cases[picks[pi]];
    bufs b = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_F32, -1, pi);
    fill_state(&r, &b, n);
    ref_elem *ref = calloc((size_t)n, sizeof *ref);
    float *u = calloc((size_t)n, sizeof *u), *w = calloc((size_t)n, sizeof *w);
    assert_true(ref && u && w);
    for (int64_t i = 0; i < n; i++) {
      float g = zinc_load_as_f32(b.g.p, i, ZINC_F32);
      if (!isfinite(g)) /* finite: every value worth comparing */
        zinc_store_from_f32(b.g.p, i, ZINC_F32, 0.25f);
      ref[i].p = zinc_load_as_f32(b.p.p, i, ZINC_BF16);
      ref[i].m = zinc_load_as_f32(b.m.p, i, ZINC_BF16);
      ref[i].v = zinc_load_as_f32(b.v.p, i, ZINC_BF16);
    }
    for (int64_t step = oc.step; step < oc.step + 3; step++) {
      optim_case sc = oc;
      sc.step = step;
      zinc_opt_coef k = rounded_coef(&sc, 0.5, ZINC_ROUND_NEAREST_EVEN, 0);
      zinc_opt_seg seg = make_seg(&sc, &b, n, 1, 0);
      seg.decay = 1;
      for (int64_t i = 0; i < n; i++) {
        float g = zinc_load_as_f32(b.g.p, i, ZINC_F32);
        w[i] = ref[i].p;
        u[i] = ref_step(&k, ZINC_OPT_PASS_UPDATE, 1, 0.0f, &ref[i], g);
      }
      assert_int_equal(zinc_cpu_optim(NULL, zinc_cpu_isa_select(), &k, 1, &seg, 1,
                                      ZINC_OPT_PASS_UPDATE, b.norms), ZINC_OK);
      if (k.kind == ZINC_OPT_LAMB) {
        double want_w = zinc_sumsq_chunk_ref(w, n, ZINC_F32);
        double want_u = zinc_sumsq_chunk_ref(u, n, ZINC_F32);
        if (b.norms[0] != want_w || b.norms[1] != want_u) {
          fprintf(stderr, "Lamb step %lld: norms %.17g %.17g, reference %.17g %.17g\n",
                  (long long)step, b.norms[0], b.norms[1], want_w, want_u);
          bad++;
        }
        float ratio = zinc_lamb_ratio(b.norms[0], b.norms[1], k.min_coeff, k.max_coeff);
        seg.lamb_ratio = ratio;
        for (int64_t i = 0; i < n; i++)
          ref_step(&k, ZINC_OPT_PASS_APPLY, 1, ratio, &ref[i], 0.0f);
        assert_int_equal(zinc_cpu_optim(NULL, zinc_cpu_isa_select(), &k, 1, &seg, 1,
                                        ZINC_OPT_PASS_APPLY, NULL), ZINC_OK);
      }
      int use_m, use_v, use_g;
      case_slots(&sc, &use_m, &use_v, &use_g);
      uint16_t *want = malloc((size_t)n * 2);
      assert_non_null(want);
      char what[96];
      for (int slot = 0; slot < 3; slot++) {
        if ((slot == 1 && !use_m) || (slot == 2 && !use_v))
          continue;
        for (int64_t i = 0; i < n; i++)
          want[i] = ref_bf16(slot == 0 ? ref[i].p : slot == 1 ? ref[i].m : ref[i].v);
        snprintf(what, sizeof what, "%s step %lld %s", oc.name, (long long)step,
                 slot == 0 ? "master" : slot == 1 ? "exp_avg" : "exp_avg_sq");
        bad += test_compare_bits(what, slot == 0 ? b.p.p : slot == 1 ? b.m.p : b.v.p, want, n,
                                 ZINC_BF16);
      }
      free(want);
    }
    free(ref);
    free(u);
    free(w);
    bufs_free(&b);
  }
  assert_int_equal(bad, 0);
}

/* SGD, lr 1, no decay, master in [1, 2): p - g lands on bf16 midpoints
 * (odd multiples of 2^-8), which go to the even neighbour on every path
 * and thread count; the state (the gradient, a few bits) is exact. */
static void ties_go_to_even(void **state) {
  optim_case c = make_case("SGD", ZINC_OPT_SGD, 1, ZINC_OPT_PASS_UPDATE);
  c.h.lr = 1.0;
  c.h.momentum = 0.5;
  zinc_opt_coef k = rounded_coef(&c, 1.0, ZINC_ROUND_NEAREST_EVEN, 0);
  const int64_t n = 4099;
  zinc_threadpool *pool = NULL;
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pool), ZINC_OK);
  int64_t bad = 0;
  for (int isa = 0; isa < ZINC_CPU_ISA_N; isa++) {
    if (!zinc_cpu_isa_supported((zinc_cpu_isa)isa))
      continue;
    for (int threads = 0; threads < 2; threads++) {
      bufs b = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_F32, ZINC_BF16, isa + threads);
      uint16_t *want = malloc((size_t)n * 2);
      assert_non_null(want);
      for (int64_t i = 0; i < n; i++) {
        int j = (int)(i % 64);                          /* master 1 + j 2^-7 */
        int odd = 2 * (int)((i / 64) % 7) + 1;          /* 1, 3, ..., 13 */
        float p = 1.0f + (float)j * 0x1p-7f;
        float g = -(float)odd * 0x1p-8f;                /* p - g: a midpoint */
        zinc_store_from_f32(b.p.p, i, ZINC_BF16, p);
        zinc_store_from_f32(b.g.p, i, ZINC_F32, g);
        /* (2j + odd) / 2 units of 2^-7 above 1; ties to an even count */
        int twice = 2 * j + odd, units = twice / 2 + ((twice / 2) & 1);
        want[i] = ref_bf16(1.0f + (float)units * 0x1p-7f);
      }
      zinc_opt_seg seg = make_seg(&c, &b, n, 0, 0);
      assert_int_equal(zinc_cpu_optim(threads ? pool : NULL, (zinc_cpu_isa)isa, &k, 1, &seg, 1,
                                      ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
      bad += test_compare_bits("tie master", b.p.p, want, n, ZINC_BF16);
      bad += test_compare_bits("tie param_out", b.out.p, want, n, ZINC_BF16);
      for (int64_t i = 0; i < n; i++) /* the momentum buffer: the gradient, exactly */
        want[i] = ref_bf16(zinc_load_as_f32(b.g.p, i, ZINC_F32));
      bad += test_compare_bits("tie exp_avg", b.m.p, want, n, ZINC_BF16);
      free(want);
      bufs_free(&b);
    }
  }
  zinc_threadpool_destroy(pool);
  assert_int_equal(bad, 0);
}

/* ------------------------------------------------- stochastic rounding */

/* Mean of the stored values of n elements that all compute x, against x:
 * each draw is lo or lo + ulp, up with probability f = (x - lo) / ulp, so
 * the mean's standard deviation is ulp sqrt(f (1 - f) / n); bound 5 of
 * them (plus 2^-30 ulp for the double sums). */
static int mean_is_unbiased(const char *what, const uint16_t *h, int64_t n, float x) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++)
    sum += (double)bf16_value(h[i]);
  double mean = sum / (double)n;
  uint32_t u;
  memcpy(&u, &x, 4);
  /* the bf16 neighbours: x truncated (toward 0) and the next one out */
  double lo = (double)bf16_value((uint16_t)(u >> 16));
  double hi = (double)bf16_value((uint16_t)((u >> 16) + 1));
  double ulp = fabs(hi - lo), f = fabs((double)x - lo) / ulp;
  double bound = 5.0 * ulp * sqrt(f * (1.0 - f) / (double)n) + ulp * 0x1p-30;
  int ok = fabs(mean - (double)x) <= bound;
  fprintf(stderr, "%s: x %.9g between %.9g and %.9g (f %.4f): mean of %lld draws %.9g, "
          "|error| %.3g, bound %.3g%s\n", what, (double)x, lo, hi, f, (long long)n, mean,
          fabs(mean - (double)x), bound, ok ? "" : "  FAIL");
  return ok;
}

/* 2^18 elements with the same inputs compute the same fp32 values; their
 * stored bf16 values (different draws) average to those values. Adam
 * covers master, exp_avg, exp_avg_sq; SGD's momentum buffer and Adagrad's
 * sum too, on every path. */
static void stochastic_is_unbiased(void **state) {
  const int64_t n = (int64_t)1 << 18;
  optim_case cases[NCASES];
  all_cases(cases);
  const int picks[] = {0, 5, 7};
  int ok = 1;
  for (int isa = 0; isa < ZINC_CPU_ISA_N; isa++) {
    if (!zinc_cpu_isa_supported((zinc_cpu_isa)isa))
      continue;
    for (int pi = 0; pi < 3; pi++) {
      optim_case c = cases[picks[pi]];
      bufs b = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_F32, -1, isa);
      float p0 = 0.3f, m0 = 0.01f, v0 = 2e-4f, g = 0.0123f;
      for (int64_t i = 0; i < n; i++) {
        zinc_store_from_f32(b.p.p, i, ZINC_BF16, p0);
        zinc_store_from_f32(b.m.p, i, ZINC_BF16, m0);
        zinc_store_from_f32(b.v.p, i, ZINC_BF16, v0);
        zinc_store_from_f32(b.g.p, i, ZINC_F32, g);
      }
      zinc_opt_coef k = rounded_coef(&c, 1.0, ZINC_ROUND_STOCHASTIC, 77 + (uint64_t)pi);
      /* the fp32 values every element computes */
      float p = bf16_value(zinc_f32_to_bf16(p0)), m = bf16_value(zinc_f32_to_bf16(m0));
      float v = bf16_value(zinc_f32_to_bf16(v0));
      if (k.kind == ZINC_OPT_ADAM)
        zinc_adam_elem(&k, 1, &p, &m, &v, g);
      else if (k.kind == ZINC_OPT_ADAGRAD)
        zinc_adagrad_elem(&k, 1, &p, &v, g);
      else
        zinc_sgd_elem(&k, 1, &p, &m, g);
      zinc_opt_seg seg = make_seg(&c, &b, n, 1, 12345);
      assert_int_equal(zinc_cpu_optim(NULL, (zinc_cpu_isa)isa, &k, 1, &seg, 1,
                                      ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
      char what[96];
      snprintf(what, sizeof what, "%s %s master", zinc_cpu_isa_name((zinc_cpu_isa)isa), c.name);
      ok &= mean_is_unbiased(what, b.p.p, n, p);
      if (k.kind != ZINC_OPT_ADAGRAD) {
        snprintf(what, sizeof what, "%s %s exp_avg", zinc_cpu_isa_name((zinc_cpu_isa)isa),
                 c.name);
        ok &= mean_is_unbiased(what, b.m.p, n, m);
      }
      if (k.kind != ZINC_OPT_SGD) {
        snprintf(what, sizeof what, "%s %s exp_avg_sq", zinc_cpu_isa_name((zinc_cpu_isa)isa),
                 c.name);
        ok &= mean_is_unbiased(what, b.v.p, n, v);
      }
      bufs_free(&b);
    }
  }
  /* the rounding itself: every fraction of a few binades, 4096 indices each */
  uint64_t key = zinc_sr_key(9, 4);
  for (int t = 0; t < 64 && ok; t++) {
    uint32_t bits = 0x3f800000u + (uint32_t)t * 0x00012345u + (uint32_t)t * 37u;
    float x;
    memcpy(&x, &bits, 4);
    if (t & 1)
      x = -x;
    uint16_t h[4096];
    for (int64_t i = 0; i < 4096; i++)
      h[i] = zinc_f32_to_bf16_sr(x, zinc_sr_draw(key, i * 977 + t, t % 3));
    char what[64];
    snprintf(what, sizeof what, "zinc_f32_to_bf16_sr %d", t);
    ok &= mean_is_unbiased(what, h, 4096, x);
  }
  assert_true(ok);
}

/* The same bits run to run; another seed or step changes most draws;
 * pieces with their global offsets (cut anywhere: even Lamb's moments do
 * not depend on the blocks) give the bits of the whole segment on every
 * path and thread count, also where the global index crosses 2^32 (a Lamb
 * block across it included). */
static void stochastic_is_reproducible(void **state) {
  optim_case cases[NCASES];
  all_cases(cases);
  const int64_t n = 20011;
  const int64_t offsets[2] = {1000003, ((int64_t)1 << 32) - 9001};
  zinc_threadpool *pool = NULL;
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pool), ZINC_OK);
  test_rng r = {31337};
  int64_t bad = 0;
  for (int oi = 0; oi < 2; oi++)
    for (int ci = 0; ci < NCASES; ci++) {
      const optim_case *c = &cases[ci];
      bufs in = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_BF16, ZINC_BF16, ci);
      bufs whole = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_BF16, ZINC_BF16, ci + 1);
      bufs again = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_BF16, ZINC_BF16, ci + 2);
      bufs cut = bufs_alloc(n, ZINC_BF16, ZINC_BF16, ZINC_BF16, ZINC_BF16, ci + 3);
      fill_state(&r, &in, n);
      zinc_opt_coef k = rounded_coef(c, 1.0, ZINC_ROUND_STOCHASTIC, 424242);
      run_case(NULL, ZINC_CPU_ISA_SCALAR, c, &k, &in, &whole, n, 1, offsets[oi]);
      for (int isa = 0; isa < ZINC_CPU_ISA_N; isa++) {
        if (!zinc_cpu_isa_supported((zinc_cpu_isa)isa))
          continue;
        run_case(pool, (zinc_cpu_isa)isa, c, &k, &in, &again, n, 1, offsets[oi]);
        bad += compare("run to run", &whole, &again, n);
        /* pieces: cut at uneven places, each with its global offset; Lamb's
         * UPDATE pieces on block boundaries (its norms are per piece) */
        copy_inputs(&cut, &in, n);
        const int64_t at[] = {0, 4096, 8192 + 3, 12288, n};
        zinc_opt_seg segs[4];
        for (int s = 0; s < 4; s++) {
          const int64_t lo = at[s];
          segs[s] = make_seg(c, &cut, n, 1, offsets[oi]);
          segs[s].master_bf16 += lo;
          if (segs[s].exp_avg)
            segs[s].exp_avg_bf16 += lo;
          if (segs[s].exp_avg_sq)
            segs[s].exp_avg_sq_bf16 += lo;
          if (segs[s].grad)
            segs[s].grad = (const uint16_t *)segs[s].grad + lo;
          segs[s].param_out = (uint16_t *)segs[s].param_out + lo;
          segs[s].n = at[s + 1] - lo;
          segs[s].global_offset = offsets[oi] + lo;
        }
        double norms[8];
        assert_int_equal(zinc_cpu_optim(isa & 1 ? pool : NULL, (zinc_cpu_isa)isa, &k, 1, segs,
                                        4, c->pass, norms), ZINC_OK);
        cut.norms[0] = whole.norms[0]; /* the norms are per piece */
        cut.norms[1] = whole.norms[1];
        bad += compare("pieces", &whole, &cut, n);
      }
      /* another seed, another step: most stored values differ somewhere */
      for (int change = 0; change < 2; change++) {
        zinc_opt_coef k2 = k;
        if (change)
          k2.rounding_step++;
        else
          k2.rounding_seed++;
        run_case(NULL, ZINC_CPU_ISA_SCALAR, c, &k2, &in, &again, n, 1, offsets[oi]);
        int64_t differ = 0;
        const uint16_t *a = c->pass == ZINC_OPT_PASS_UPDATE && k.kind == ZINC_OPT_LAMB
                                ? whole.m.p : whole.p.p;
        const uint16_t *b2 = c->pass == ZINC_OPT_PASS_UPDATE && k.kind == ZINC_OPT_LAMB
                                 ? again.m.p : again.p.p;
        for (int64_t i = 0; i < n; i++)
          differ += a[i] != b2[i];
        if (differ < n / 20) {
          fprintf(stderr, "%s: a changed %s changed only %lld of %lld values\n", c->name,
                  change ? "step" : "seed", (long long)differ, (long long)n);
          bad++;
        }
      }
      bufs_free(&in);
      bufs_free(&whole);
      bufs_free(&again);
      bufs_free(&cut);
    }
  zinc_threadpool_destroy(pool);
  assert_int_equal(bad, 0);
}

/* The draws are part of the format of a run: pinned values. */
static void draws_are_pinned(void **state) {
  uint64_t key = zinc_sr_key(1234, 7);
  const int64_t idx[4] = {0, 1, 1000003, ((int64_t)1 << 32) + 5};
  uint32_t got[12];
  for (int i = 0; i < 4; i++)
    for (int s = 0; s < 3; s++)
      got[3 * i + s] = zinc_sr_draw(key, idx[i], s);
  static const uint32_t want[12] = {0x6bc3, 0x618e, 0x214e, 0x0145, 0xa4b6, 0xd0a6,
                                     0x10ef, 0x2a45, 0xb457, 0x5646, 0x2151, 0xe2d5};
  int bad = 0;
  for (int i = 0; i < 12; i++)
    if (got[i] != want[i]) {
      fprintf(stderr, "draw %d: 0x%04x, pinned 0x%04x\n", i, got[i], want[i]);
      bad++;
    }
  fprintf(stderr, "key 0x%016llx; draws", (unsigned long long)key);
  for (int i = 0; i < 12; i++)
    fprintf(stderr, " 0x%04x", got[i]);
  fprintf(stderr, "\n");
  assert_int_equal(bad, 0);
}

/* Special values under both roundings: +-0, +-inf and bf16 values stay
 * exact whatever the draw; NaN stays a quiet NaN of its sign; the largest
 * finite fp32 rounds to inf to nearest, and stochastically with the
 * probability of its low half (documented). */
static void special_values(void **state) {
  const struct {
    uint32_t f;
    uint16_t rne, sr_lo, sr_hi; /* sr with draws 0 and 0xffff */
  } t[] = {
      {0x00000000u, 0x0000, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000, 0x8000},
      {0x7f800000u, 0x7f80, 0x7f80, 0x7f80}, {0xff800000u, 0xff80, 0xff80, 0xff80},
      {0x3f810000u, 0x3f81, 0x3f81, 0x3f81}, {0x7fc00001u, 0x7fc0, 0x7fc0, 0x7fc0},
      {0xff800001u, 0xffc0, 0xffc0, 0xffc0}, {0x7f7fffffu, 0x7f80, 0x7f7f, 0x7f80},
      {0x00000001u, 0x0000, 0x0000, 0x0001}, {0x3f808000u, 0x3f80, 0x3f80, 0x3f81},
      {0x3f818000u, 0x3f82, 0x3f81, 0x3f82},
  };
  for (int i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
    float x;
    memcpy(&x, &t[i].f, 4);
    assert_int_equal(zinc_f32_to_bf16(x), t[i].rne);
    assert_int_equal(ref_bf16(x) == t[i].rne || isnan(x), 1);
    assert_int_equal(zinc_f32_to_bf16_sr(x, 0), t[i].sr_lo);
    assert_int_equal(zinc_f32_to_bf16_sr(x, 0xffff), t[i].sr_hi);
  }
}

/* ----------------------------------------- fp32 storage, bad arguments */

/* With fp32 master and state the rounding mode changes nothing. */
static void fp32_ignores_rounding(void **state) {
  optim_case cases[NCASES];
  all_cases(cases);
  const int64_t n = 3001;
  test_rng r = {5};
  int64_t bad = 0;
  for (int ci = 0; ci < NCASES; ci++) {
    bufs in = bufs_alloc(n, ZINC_F32, ZINC_F32, ZINC_BF16, ZINC_BF16, ci);
    bufs a = bufs_alloc(n, ZINC_F32, ZINC_F32, ZINC_BF16, ZINC_BF16, ci + 1);
    bufs b = bufs_alloc(n, ZINC_F32, ZINC_F32, ZINC_BF16, ZINC_BF16, ci + 2);
    fill_state(&r, &in, n);
    zinc_opt_coef k = case_coef(&cases[ci], 1.0);
    zinc_opt_coef ks = rounded_coef(&cases[ci], 1.0, ZINC_ROUND_STOCHASTIC, 99);
    run_case(NULL, zinc_cpu_isa_select(), &cases[ci], &k, &in, &a, n, 1, 0);
    run_case(NULL, zinc_cpu_isa_select(), &cases[ci], &ks, &in, &b, n, 1, 777);
    bad += compare(cases[ci].name, &a, &b, n);
    bufs_free(&in);
    bufs_free(&a);
    bufs_free(&b);
  }
  assert_int_equal(bad, 0);
}

static void bad_storage_refused(void **state) {
  optim_case c = make_case("Adam", ZINC_OPT_ADAM, 3, ZINC_OPT_PASS_UPDATE);
  uint16_t x[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
  zinc_opt_seg seg = {.master_bf16 = x, .exp_avg_bf16 = x + 1, .exp_avg_sq_bf16 = x + 2,
                      .grad = x + 3, .n = 1, .grad_dtype = ZINC_BF16,
                      .master_dtype = ZINC_BF16, .state_dtype = ZINC_BF16};
  zinc_opt_coef k = case_coef(&c, 1.0);
  const struct {
    int mdt, sdt, rounding;
  } bad[] = {{ZINC_F16, ZINC_BF16, 0}, {ZINC_BF16, ZINC_F16, 0}, {7, ZINC_F32, 0},
             {ZINC_BF16, -1, 0},       {ZINC_BF16, ZINC_BF16, 2}, {ZINC_F32, ZINC_BF16, -1}};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
    seg.master_dtype = bad[i].mdt;
    seg.state_dtype = bad[i].sdt;
    k.bf16_rounding = bad[i].rounding;
    assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, &k, 1, &seg, 1,
                                    ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
    fprintf(stderr, "refused: %s\n", zinc_last_error());
    for (int j = 0; j < 4; j++)
      assert_int_equal(x[j], 0x3f80); /* nothing touched */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(avx2_matches_scalar),
      cmocka_unit_test(avx512_matches_scalar),
      cmocka_unit_test(pool_matches_one_thread),
      cmocka_unit_test(equals_rounded_fp32),
      cmocka_unit_test(ties_go_to_even),
      cmocka_unit_test(stochastic_is_unbiased),
      cmocka_unit_test(stochastic_is_reproducible),
      cmocka_unit_test(draws_are_pinned),
      cmocka_unit_test(special_values),
      cmocka_unit_test(fp32_ignores_rounding),
      cmocka_unit_test(bad_storage_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
