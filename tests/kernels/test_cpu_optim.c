/* test_cpu_optim.c — the fused optimizer kernels of every kind and pass
 * (Adam, AdamW, Lamb UPDATE and APPLY, Lion, Adagrad, SGD plain, with
 * momentum and dampening, on its first step, Nesterov):
 *  - each SIMD path, and each path on a thread pool, bit for bit against
 *    the scalar path on one thread: every grad dtype x parameter-copy dtype
 *    (none, f32, bf16, f16) x decay on/off, odd lengths, misaligned starts,
 *    gradients with zeros, infinities and NaNs, spans long enough for the
 *    streaming stores and for several sum-of-squares blocks; Lamb's norms
 *    included;
 *  - each element function of zinc_math.h against the formulas of
 *    optim/optimizer.h written here in double;
 *  - Lamb UPDATE's norms bit for bit zinc_sumsq_chunk_ref of the weights and
 *    of an update computed separately;
 *  - invalid calls refused with ZINC_ERR_INVALID, nothing touched. */
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

/* ------------------------------------------------------------ buffers */

typedef struct {
  test_buf p, m, v, g, out;
  double norms[2];
} optim_bufs;

static optim_bufs bufs_alloc(int64_t n, int gdt, int odt, int shift) {
  optim_bufs b;
  b.p = buf_alloc(n, 4, (shift + 1) % 16);
  b.m = buf_alloc(n, 4, (shift + 2) % 16);
  b.v = buf_alloc(n, 4, (shift + 3) % 16);
  b.g = buf_alloc(n, dt_bytes(gdt), (shift + 5) % 32);
  b.out = buf_alloc(n, odt < 0 ? 2 : dt_bytes(odt), (shift + 7) % 32);
  b.norms[0] = b.norms[1] = -1.0;
  return b;
}

static void bufs_free(optim_bufs *b) {
  free(b->p.block);
  free(b->m.block);
  free(b->v.block);
  free(b->g.block);
  free(b->out.block);
}

static void fill_state(test_rng *r, optim_bufs *b, int gdt, int64_t n) {
  float *p = b->p.p, *m = b->m.p, *v = b->v.p;
  for (int64_t i = 0; i < n; i++) {
    p[i] = rng_decades(r, -9.0f, 5.5f); /* f16 subnormals .. beyond f16 max */
    m[i] = rng_decades(r, -6.0f, 0.0f);
    v[i] = fabsf(rng_decades(r, -12.0f, 0.0f));
    float g = rng_decades(r, -8.0f, 4.0f);
    switch (rng_u32(r) % 64) {
    case 0: g = 0.0f; break;
    case 1: g = INFINITY; break;
    case 2: g = -INFINITY; break;
    case 3: g = NAN; break;
    case 4: m[i] = 0.0f; g = 0.0f; break; /* Lion: sign of a zero */
    default: break;
    }
    zinc_store_from_f32(b->g.p, i, gdt, g);
  }
}

#define LAMB_TEST_RATIO 0.73f

static zinc_opt_seg make_seg(const optim_case *c, optim_bufs *b, int64_t n, int gdt, int odt,
                             int decay) {
  int use_m, use_v, use_g;
  case_slots(c, &use_m, &use_v, &use_g);
  return (zinc_opt_seg){.master = b->p.p,
                        .exp_avg = use_m ? b->m.p : NULL,
                        .exp_avg_sq = use_v ? b->v.p : NULL,
                        .grad = use_g ? b->g.p : NULL,
                        .param_out = odt < 0 ? NULL : b->out.p,
                        .n = n,
                        .grad_dtype = gdt,
                        .param_dtype = odt < 0 ? ZINC_F32 : odt,
                        .decay = decay,
                        .coef = 0,
                        .lamb_ratio = LAMB_TEST_RATIO};
}

/* Run one case on isa (and pool) over copies of src's inputs, into *dst. */
static void run_case(zinc_threadpool *pool, zinc_cpu_isa isa, const optim_case *c,
                     const zinc_opt_coef *k, const optim_bufs *src, optim_bufs *dst, int64_t n,
                     int gdt, int odt, int decay) {
  memcpy(dst->p.p, src->p.p, (size_t)n * 4);
  memcpy(dst->m.p, src->m.p, (size_t)n * 4);
  memcpy(dst->v.p, src->v.p, (size_t)n * 4);
  memcpy(dst->g.p, src->g.p, (size_t)n * dt_bytes(gdt));
  memset(dst->out.p, 0x5a, (size_t)n * (odt < 0 ? 2 : dt_bytes(odt)));
  zinc_opt_seg seg = make_seg(c, dst, n, gdt, odt, decay);
  assert_int_equal(zinc_cpu_optim(pool, isa, k, 1, &seg, 1, c->pass, dst->norms), ZINC_OK);
}

static int64_t compare(const char *what, const optim_bufs *want, const optim_bufs *got,
                       int64_t n, int odt) {
  int64_t bad = test_compare_bits("master", got->p.p, want->p.p, n, ZINC_F32) +
                test_compare_bits("exp_avg", got->m.p, want->m.p, n, ZINC_F32) +
                test_compare_bits("exp_avg_sq", got->v.p, want->v.p, n, ZINC_F32);
  if (odt >= 0)
    bad += test_compare_bits("param_out", got->out.p, want->out.p, n, odt);
  for (int i = 0; i < 2; i++)
    if (memcmp(&got->norms[i], &want->norms[i], sizeof(double)) &&
        !(isnan(got->norms[i]) && isnan(want->norms[i]))) {
      fprintf(stderr, "%s: norms[%d] %.17g, want %.17g\n", what, i, got->norms[i],
              want->norms[i]);
      bad++;
    }
  return bad;
}

/* Every case x length x dtype pair x decay on `isa` with `pool`, against
 * the scalar path on the calling thread alone. */
static void path_matches_scalar(zinc_cpu_isa isa, zinc_threadpool *pool) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  optim_case cases[NCASES];
  all_cases(cases);
  test_rng r = {0x13198A2E03707344ull + (uint64_t)isa};
  int64_t failures = 0, runs = 0;
  for (int li = 0; li < NLEN; li++) {
    int64_t n = lengths[li];
    for (int gdt = 0; gdt < 3; gdt++)
      for (int odt = -1; odt < 3; odt++) {
        optim_bufs in = bufs_alloc(n, gdt, odt, li);
        optim_bufs want = bufs_alloc(n, gdt, odt, li + 1);
        optim_bufs got = bufs_alloc(n, gdt, odt, li + 2);
        fill_state(&r, &in, gdt, n);
        for (int ci = 0; ci < NCASES; ci++)
          for (int decay = 0; decay < 2; decay++) {
            zinc_opt_coef k = case_coef(&cases[ci], (li & 1) ? 0.5 : 1.0);
            run_case(NULL, ZINC_CPU_ISA_SCALAR, &cases[ci], &k, &in, &want, n, gdt, odt, decay);
            run_case(pool, isa, &cases[ci], &k, &in, &got, n, gdt, odt, decay);
            int64_t bad = compare(cases[ci].name, &want, &got, n, odt);
            if (bad)
              fprintf(stderr, "%s, %d threads: %s, n %lld, grad %s, param_out %s, decay %d: "
                      "%lld mismatches\n", zinc_cpu_isa_name(isa), zinc_threadpool_size(pool),
                      cases[ci].name, (long long)n, zinc_dtype_name(gdt),
                      odt < 0 ? "none" : zinc_dtype_name(odt), decay, (long long)bad);
            failures += bad != 0;
            runs++;
          }
        bufs_free(&in);
        bufs_free(&want);
        bufs_free(&got);
      }
  }
  fprintf(stderr, "%s, %d threads: %lld of %lld configurations bitwise equal to the scalar "
          "path\n", zinc_cpu_isa_name(isa), zinc_threadpool_size(pool),
          (long long)(runs - failures), (long long)runs);
  assert_int_equal(failures, 0);
}

static void avx2_matches_scalar(void **state) { path_matches_scalar(ZINC_CPU_ISA_AVX2, NULL); }
static void avx512_matches_scalar(void **state) {
  path_matches_scalar(ZINC_CPU_ISA_AVX512, NULL);
}

/* Three threads: parts of uneven sizes, boundaries inside segments. */
static void pool_matches_one_thread(void **state) {
  zinc_threadpool *pool = NULL;
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pool), ZINC_OK);
  path_matches_scalar(ZINC_CPU_ISA_SCALAR, pool);
  path_matches_scalar(zinc_cpu_isa_select(), pool);
  zinc_threadpool_destroy(pool);
}

/* ------------------------------------- element functions vs the formulas */

/* Each float result within tol of the formula in double: the functions
 * round a handful of times (about 6 ulp at most in a step's direction), so
 * tol = 1e-5 * (|ref| + |the step's size|) + 1e-30. */
static int near(const char *what, int64_t i, double got, double ref, double scale) {
  double tol = 1e-5 * (fabs(ref) + fabs(scale)) + 1e-30;
  if (fabs(got - ref) <= tol)
    return 1;
  fprintf(stderr, "%s element %lld: %.9g, formula %.9g (tolerance %.3g)\n", what,
          (long long)i, got, ref, tol);
  return 0;
}

static void elements_match_formulas(void **state) {
  optim_case cases[NCASES];
  all_cases(cases);
  test_rng r = {99};
  int64_t bad = 0, checked = 0;
  for (int ci = 0; ci < NCASES; ci++) {
    const zinc_opt_hparams *h = &cases[ci].h;
    const double gs = 0.25, lr = h->lr, wd = h->weight_decay, t = (double)cases[ci].step;
    zinc_opt_coef k = case_coef(&cases[ci], gs);
    for (int64_t i = 0; i < 20000; i++) {
      int decay = (int)(i & 1);
      float p = rng_decades(&r, -3.0f, 1.0f), m = rng_decades(&r, -4.0f, 0.0f);
      float v = fabsf(rng_decades(&r, -6.0f, 0.0f)), g = rng_decades(&r, -3.0f, 1.0f);
      double P = p, M = m, V = v, G = (double)g * gs, W = decay ? wd : 0.0;
      float p1 = p, m1 = m, v1 = v;
      int ok = 1;
      switch (h->kind) {
      case ZINC_OPT_LAMB: {
        double bc1 = h->bias_correction ? 1.0 - pow(h->beta1, t) : 1.0;
        double bc2 = h->bias_correction ? 1.0 - pow(h->beta2, t) : 1.0;
        double M2 = h->beta1 * M + (1.0 - h->beta1) * G;
        double V2 = h->beta2 * V + (1.0 - h->beta2) * G * G;
        double U = M2 / (sqrt(V2) + h->eps) + W * P;
        if (cases[ci].pass == ZINC_OPT_PASS_UPDATE) {
          float u = zinc_lamb_update_elem(&k, decay, p, &m1, &v1, g);
          double terms = fabs(M) + fabs(G);
          ok = near("Lamb m", i, m1, M2, terms) && near("Lamb v", i, v1, V2, 0) &&
               near("Lamb u", i, u, U, (terms / (sqrt(V2) + h->eps)) + fabs(W * P)) && p1 == p;
        } else { /* APPLY from the moments as they are */
          double U0 = M / (sqrt(V) + h->eps) + W * P;
          double ratio = 0.37, size = lr * sqrt(bc2) / bc1 * ratio;
          zinc_lamb_apply_elem(&k, decay, (float)ratio, &p1, m, v);
          ok = near("Lamb p", i, p1, P - size * U0,
                    size * (fabs(M) / (sqrt(V) + h->eps) + fabs(W * P)));
        }
        break;
      }
      case ZINC_OPT_ADAM: {
        double Gd = h->adamw ? G : G + W * P;
        double M2 = h->beta1 * M + (1.0 - h->beta1) * Gd;
        double V2 = h->beta2 * V + (1.0 - h->beta2) * Gd * Gd;
        double bc1 = 1.0 - pow(h->beta1, t), bc2 = 1.0 - pow(h->beta2, t);
        double step = lr / bc1 * M2 / (sqrt(V2) / sqrt(bc2) + h->eps);
        double P2 = (h->adamw ? P * (1.0 - lr * W) : P) - step;
        zinc_adam_elem(&k, decay, &p1, &m1, &v1, g);
        ok = near("Adam m", i, m1, M2, fabs(M) + fabs(G) + fabs(W * P)) &&
             near("Adam v", i, v1, V2, 0) && near("Adam p", i, p1, P2, fabs(step) * 2);
        break;
      }
      case ZINC_OPT_LION: {
        double C = h->beta1 * M + (1.0 - h->beta1) * G;
        if (fabs(C) < 1e-4 * (fabs(M) + fabs(G)))
          continue; /* the sign of a value this close to 0 is the rounding's */
        double P2 = P * (1.0 - lr * W) - copysign(lr, C);
        double M2 = h->beta2 * M + (1.0 - h->beta2) * G;
        zinc_lion_elem(&k, decay, &p1, &m1, g);
        ok = near("Lion p", i, p1, P2, lr) && near("Lion m", i, m1, M2, fabs(M) + fabs(G));
        break;
      }
      case ZINC_OPT_ADAGRAD: {
        double Gd = G + W * P, S = V + Gd * Gd;
        double step = lr * Gd / (sqrt(S) + h->eps);
        zinc_adagrad_elem(&k, decay, &p1, &v1, g);
        ok = near("Adagrad s", i, v1, S, 0) &&
             near("Adagrad p", i, p1, P - step, lr * (fabs(G) + fabs(W * P)) / (sqrt(S) + h->eps));
        break;
      }
      case ZINC_OPT_SGD: {
        double D = G + W * P, B = M;
        if (h->momentum != 0.0) {
          B = cases[ci].step == 1 ? D : h->momentum * M + (1.0 - h->dampening) * D;
          D = h->nesterov ? D + h->momentum * B : B;
        }
        zinc_sgd_elem(&k, decay, &p1, h->momentum != 0.0 ? &m1 : NULL, g);
        double terms = fabs(G) + fabs(W * P) + fabs(M); /* cancellation in d and buf */
        ok = near("SGD p", i, p1, P - lr * D, 2.0 * lr * terms) &&
             (h->momentum == 0.0 ? m1 == m : near("SGD buf", i, m1, B, terms));
        break;
      }
      }
      bad += !ok;
      checked++;
      if (bad > 10)
        break;
    }
  }
  fprintf(stderr, "%lld of %lld elements within tolerance of the formulas\n",
          (long long)(checked - bad), (long long)checked);
  assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------ Lamb norms */

/* Several segments (one of several blocks, misaligned, mixed dtypes) in one
 * call: norms equal zinc_sumsq_chunk_ref of the weights and of the update
 * computed here element by element, on every path and thread count. */
static void lamb_norms_are_canonical(void **state) {
  optim_case c = make_case("Lamb", ZINC_OPT_LAMB, 3, ZINC_OPT_PASS_UPDATE);
  zinc_opt_coef k[2];
  k[0] = case_coef(&c, 1.0);
  c.h.weight_decay = 0.3;
  c.h.lr = 3e-3;
  k[1] = case_coef(&c, 0.125);
  enum { NSEG = 4 };
  const int64_t n[NSEG] = {3 * ZINC_SUMSQ_BLOCK + 77, 5, 40000, ZINC_SUMSQ_BLOCK};
  const int gdt[NSEG] = {ZINC_F32, ZINC_BF16, ZINC_F16, ZINC_F32};
  test_rng r = {4242};
  optim_bufs in[NSEG], got[NSEG];
  double want[2 * NSEG];
  for (int s = 0; s < NSEG; s++) {
    in[s] = bufs_alloc(n[s], gdt[s], -1, s);
    got[s] = bufs_alloc(n[s], gdt[s], -1, s + 3);
    fill_state(&r, &in[s], gdt[s], n[s]);
    for (int64_t i = 0; i < n[s]; i++) /* finite gradients: norms worth comparing */
      if (!isfinite(zinc_load_as_f32(in[s].g.p, i, gdt[s])))
        zinc_store_from_f32(in[s].g.p, i, gdt[s], 0.5f);
    float *u = malloc((size_t)n[s] * 4), *m = malloc((size_t)n[s] * 4);
    float *v = malloc((size_t)n[s] * 4);
    assert_non_null(u);
    assert_non_null(m);
    assert_non_null(v);
    memcpy(m, in[s].m.p, (size_t)n[s] * 4);
    memcpy(v, in[s].v.p, (size_t)n[s] * 4);
    for (int64_t i = 0; i < n[s]; i++)
      u[i] = zinc_lamb_update_elem(&k[s & 1], s != 1, ((float *)in[s].p.p)[i], &m[i], &v[i],
                                   zinc_load_as_f32(in[s].g.p, i, gdt[s]));
    want[2 * s] = zinc_sumsq_chunk_ref(in[s].p.p, n[s], ZINC_F32);
    want[2 * s + 1] = zinc_sumsq_chunk_ref(u, n[s], ZINC_F32);
    free(u);
    free(m);
    free(v);
  }
  int64_t bad = 0;
  for (int isa = 0; isa < ZINC_CPU_ISA_N; isa++) {
    if (!zinc_cpu_isa_supported((zinc_cpu_isa)isa))
      continue;
    for (int threads = 1; threads <= 3; threads++) {
      zinc_threadpool *pool = NULL;
      assert_int_equal(zinc_threadpool_create(threads, NULL, NULL, &pool), ZINC_OK);
      zinc_opt_seg segs[NSEG];
      for (int s = 0; s < NSEG; s++) {
        memcpy(got[s].p.p, in[s].p.p, (size_t)n[s] * 4);
        memcpy(got[s].m.p, in[s].m.p, (size_t)n[s] * 4);
        memcpy(got[s].v.p, in[s].v.p, (size_t)n[s] * 4);
        memcpy(got[s].g.p, in[s].g.p, (size_t)n[s] * dt_bytes(gdt[s]));
        segs[s] = make_seg(&c, &got[s], n[s], gdt[s], -1, s != 1);
        segs[s].coef = s & 1;
      }
      double norms[2 * NSEG];
      assert_int_equal(zinc_cpu_optim(pool, (zinc_cpu_isa)isa, k, 2, segs, NSEG,
                                      ZINC_OPT_PASS_UPDATE, norms), ZINC_OK);
      for (int i = 0; i < 2 * NSEG; i++)
        if (memcmp(&norms[i], &want[i], sizeof(double))) {
          fprintf(stderr, "%s, %d threads: norms[%d] %.17g, want %.17g\n",
                  zinc_cpu_isa_name((zinc_cpu_isa)isa), threads, i, norms[i], want[i]);
          bad++;
        }
      for (int s = 0; s < NSEG; s++) /* UPDATE leaves the weights */
        bad += test_compare_bits("master", got[s].p.p, in[s].p.p, n[s], ZINC_F32);
      zinc_threadpool_destroy(pool);
    }
  }
  for (int s = 0; s < NSEG; s++) {
    bufs_free(&in[s]);
    bufs_free(&got[s]);
  }
  assert_int_equal(bad, 0);
}

/* ------------------------------------------------------ invalid arguments */

static void refused(const zinc_opt_coef *k, int ncoef, const zinc_opt_seg *seg, int pass,
                    double *norms, const float *x, const char *why) {
  assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, k, ncoef, seg, 1, pass, norms),
                   ZINC_ERR_INVALID);
  fprintf(stderr, "%s: %s\n", why, zinc_last_error());
  for (int i = 0; i < 4; i++)
    assert_true(x[i] == 1.0f); /* nothing touched */
}

static void bad_arguments(void **state) {
  optim_case cases[NCASES];
  all_cases(cases);
  float x[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  double norms[2];
  for (int ci = 0; ci < NCASES; ci++) {
    zinc_opt_coef k = case_coef(&cases[ci], 1.0);
    int use_m, use_v, use_g;
    case_slots(&cases[ci], &use_m, &use_v, &use_g);
    zinc_opt_seg full = {.master = x,
                         .exp_avg = x + 1,
                         .exp_avg_sq = x + 2,
                         .grad = x + 3,
                         .param_out = NULL,
                         .n = 1,
                         .grad_dtype = ZINC_F32,
                         .param_dtype = ZINC_F32,
                         .decay = 1,
                         .coef = 0,
                         .lamb_ratio = 1.0f};
    zinc_opt_seg seg = full;
    if (use_m) {
      seg.exp_avg = NULL;
      refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    }
    seg = full;
    if (use_v) {
      seg.exp_avg_sq = NULL;
      refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    }
    seg = full;
    if (use_g) {
      seg.grad = NULL;
      refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    }
    seg = full;
    seg.master = NULL;
    refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    seg = full;
    seg.coef = 1;
    refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    seg.coef = -1;
    refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    seg = full;
    seg.n = -1;
    refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    seg = full;
    if (use_g) {
      seg.grad_dtype = 7;
      refused(&k, 1, &seg, cases[ci].pass, norms, x, cases[ci].name);
    }
    /* mixed kinds: this case's coefficients beside another kind's */
    zinc_opt_coef two[2] = {k, case_coef(&cases[(ci + 4) % NCASES], 1.0)};
    if (two[1].kind != two[0].kind)
      refused(two, 2, &full, cases[ci].pass, norms, x, cases[ci].name);
    /* APPLY for a one-pass optimizer, a pass number that is neither */
    if (k.kind != ZINC_OPT_LAMB)
      refused(&k, 1, &full, ZINC_OPT_PASS_APPLY, norms, x, cases[ci].name);
    refused(&k, 1, &full, 5, norms, x, cases[ci].name);
    /* the slots an optimizer does not use may be NULL */
    seg = full;
    if (!use_m)
      seg.exp_avg = NULL;
    if (!use_v)
      seg.exp_avg_sq = NULL;
    if (!use_g)
      seg.grad = NULL;
    float keep[4] = {x[0], x[1], x[2], x[3]};
    assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, &k, 1, &seg, 1, cases[ci].pass,
                                    norms), ZINC_OK);
    memcpy(x, keep, sizeof keep);
  }
  /* Lamb UPDATE without somewhere for the norms; an unknown kind */
  zinc_opt_coef lamb = case_coef(&cases[2], 1.0);
  zinc_opt_seg seg = {.master = x,
                      .exp_avg = x + 1,
                      .exp_avg_sq = x + 2,
                      .grad = x + 3,
                      .param_out = NULL,
                      .n = 1,
                      .grad_dtype = ZINC_F32,
                      .param_dtype = ZINC_F32,
                      .decay = 1,
                      .coef = 0,
                      .lamb_ratio = 1.0f};
  refused(&lamb, 1, &seg, ZINC_OPT_PASS_UPDATE, NULL, x, "Lamb without norms");
  lamb.kind = ZINC_OPT_KINDS;
  refused(&lamb, 1, &seg, ZINC_OPT_PASS_UPDATE, norms, x, "unknown kind");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(avx2_matches_scalar),
      cmocka_unit_test(avx512_matches_scalar),
      cmocka_unit_test(pool_matches_one_thread),
      cmocka_unit_test(elements_match_formulas),
      cmocka_unit_test(lamb_norms_are_canonical),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
