/* test_optim_reference.c — zinc_cpu_optim for every optimizer kind against
 * references that do not share its code, on every path this CPU runs
 * (scalar, AVX2, AVX-512; a path the CPU lacks is reported SKIPPED and the
 * others still run):
 *  - SGD (momentum 0 and 0.9, heavy ball and Nesterov, dampening, L2 decay)
 *    and Adagrad (eps, L2 decay) against PyTorch: trajectories of
 *    torch.optim.SGD / torch.optim.Adagrad made by
 *    make_sgd_adagrad_reference.py (sgd_adagrad_reference.bin), replayed
 *    step by step; each path follows its own trajectory, as torch did;
 *  - Adam/AdamW, Lamb and Lion against a double-precision step written here
 *    from the formulas of optim/optimizer.h (DeepSpeed's FusedLamb and CPU
 *    Lion), applied to the kernel's own fp32 state before each step. Lamb's
 *    trust ratio comes from whole-tensor norms summed in double over every
 *    segment of a tensor (a tensor is cut into several segments, as a shard
 *    cuts a parameter); the kernel's per-segment norms are checked against
 *    the same sums. Tensors cover the clamps (max_coeff, min_coeff) and a
 *    zero-weight tensor (ratio 1), elements with a zero gradient (Lion's
 *    sign of +0 is +1).
 * Tolerance, fp32 values: |zinc - ref| <= 1e-6 + 1e-5 |ref| per element for
 * parameters and state (torch folds its operations differently; the double
 * step rounds once); Lamb's norms within relative 1e-5. Beyond that, every
 * path gives the same bits as the scalar path, and the 16-bit compute copy
 * (param_out, bf16) is the rounding of the new master. Gradients are stored
 * doubled and the kernels run with grad_scale 0.5 (exact), so a kernel that
 * ignores grad_scale fails. Kinds the kernels do not run yet fail with the
 * kernel's message (ZINC_ERR_UNSUPPORTED), never skip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu_kernels.h"
#include "optim/optimizer.h"

#define TOL_ABS 1e-6
#define TOL_REL 1e-5
#define TOL_NORM_REL 1e-5
#define GRAD_SCALE 0.5 /* gradients are stored times 2 */

#ifndef ZINC_SGD_ADAGRAD_REFERENCE
#error "the build passes ZINC_SGD_ADAGRAD_REFERENCE, the path of sgd_adagrad_reference.bin"
#endif

/* --------------------------------------------------- tensors and segments */

#define MAX_TENSORS 4
#define MAX_SEGS 16

/* The tensors of a case, laid end to end in flat buffers; tensor k is cut
 * into nsplit[k] segments of near-equal length. */
typedef struct {
  int ntensor;
  int64_t n[MAX_TENSORS];
  int decay[MAX_TENSORS];
  int nsplit[MAX_TENSORS];
  int64_t total;
} layout;

static int64_t tensor_offset(const layout *L, int k) {
  int64_t off = 0;
  for (int i = 0; i < k; i++)
    off += L->n[i];
  return off;
}

/* Which fp32 state slots a kind keeps (zinc_math.h's table, written again
 * here): bit 0 exp_avg, bit 1 exp_avg_sq. */
static int slots_of(const zinc_opt_hparams *h) {
  switch (h->kind) {
  case ZINC_OPT_ADAM:
  case ZINC_OPT_LAMB:
    return 3;
  case ZINC_OPT_LION:
    return 1;
  case ZINC_OPT_ADAGRAD:
    return 2;
  default:
    return h->momentum != 0.0 ? 1 : 0;
  }
}

/* One step of the kernel on path isa: the segments of every tensor, the
 * second segment of tensor 0 also writing a bf16 copy to param_out. Lamb:
 * UPDATE, the trust ratio of each tensor from its segments' norms (summed
 * here), APPLY. wsum/usum (per tensor, may be NULL) get Lamb's summed norms. */
static zinc_status kernel_step(zinc_cpu_isa isa, const zinc_opt_hparams *h, const layout *L,
                               int64_t step, float *p, float *m, float *v, const float *g,
                               uint16_t *param_out, double *wsum, double *usum) {
  zinc_opt_coef c;
  zinc_status st = zinc_opt_coef_init(&c, h, step, GRAD_SCALE);
  if (st != ZINC_OK)
    return st;
  int slots = slots_of(h);
  zinc_opt_seg segs[MAX_SEGS];
  int owner[MAX_SEGS], nseg = 0;
  for (int k = 0; k < L->ntensor; k++) {
    int64_t off = tensor_offset(L, k);
    for (int s = 0; s < L->nsplit[k]; s++) {
      int64_t lo = off + L->n[k] * s / L->nsplit[k], hi = off + L->n[k] * (s + 1) / L->nsplit[k];
      zinc_opt_seg sg = {.master = p + lo,
                         .exp_avg = slots & 1 ? m + lo : NULL,
                         .exp_avg_sq = slots & 2 ? v + lo : NULL,
                         .grad = g + lo,
                         .param_out = k == 0 && s == 1 ? param_out + lo : NULL,
                         .n = hi - lo,
                         .grad_dtype = ZINC_F32,
                         .param_dtype = ZINC_BF16,
                         .decay = L->decay[k],
                         .coef = 0,
                         .lamb_ratio = 0.0f};
      owner[nseg] = k;
      segs[nseg++] = sg;
    }
  }
  if (!zinc_opt_two_pass(h->kind))
    return zinc_cpu_optim(NULL, isa, &c, 1, segs, nseg, ZINC_OPT_PASS_UPDATE, NULL);
  double norms[2 * MAX_SEGS];
  st = zinc_cpu_optim(NULL, isa, &c, 1, segs, nseg, ZINC_OPT_PASS_UPDATE, norms);
  if (st != ZINC_OK)
    return st;
  for (int k = 0; k < L->ntensor; k++) {
    double w = 0.0, u = 0.0;
    for (int s = 0; s < nseg; s++)
      if (owner[s] == k) {
        w += norms[2 * s];
        u += norms[2 * s + 1];
      }
    float ratio = zinc_lamb_ratio(w, u, c.min_coeff, c.max_coeff);
    for (int s = 0; s < nseg; s++)
      if (owner[s] == k)
        segs[s].lamb_ratio = ratio;
    if (wsum)
      wsum[k] = w;
    if (usum)
      usum[k] = u;
  }
  return zinc_cpu_optim(NULL, isa, &c, 1, segs, nseg, ZINC_OPT_PASS_APPLY, norms);
}

/* Largest |got - want| / (TOL_ABS + TOL_REL |want|) over n values (> 1
 * fails), the first few failures printed; skip[i] set: not compared. */
static double worst(const char *what, const double *want, const float *got, int64_t n,
                    const unsigned char *skip, double *max_abs) {
  double w = 0.0;
  int printed = 0;
  for (int64_t i = 0; i < n; i++) {
    if (skip && skip[i])
      continue;
    double d = fabs((double)got[i] - want[i]);
    double q = d / (TOL_ABS + TOL_REL * fabs(want[i]));
    if (d > *max_abs)
      *max_abs = d;
    if (q > w)
      w = q;
    if (q > 1.0 && printed++ < 5)
      fprintf(stderr, "  %s[%lld]: reference %.9g, zinc %.9g\n", what, (long long)i, want[i],
              (double)got[i]);
  }
  return w;
}

/* param_out holds the bf16 rounding of the master wherever it was written. */
static int copy_matches(const layout *L, const float *p, const uint16_t *param_out) {
  int64_t lo = L->n[0] / L->nsplit[0], hi = L->n[0] * 2 / L->nsplit[0];
  for (int64_t i = lo; i < hi && L->nsplit[0] > 1; i++)
    if (param_out[i] != zinc_f32_to_bf16(p[i])) {
      fprintf(stderr, "  param_out[%lld] = 0x%04x, master %.9g rounds to 0x%04x\n",
              (long long)i, param_out[i], (double)p[i], zinc_f32_to_bf16(p[i]));
      return 0;
    }
  return 1;
}

static int path_runs(zinc_cpu_isa isa) {
  if (zinc_cpu_isa_supported(isa))
    return 1;
  fprintf(stderr, "SKIPPED: this CPU cannot run the %s path (the others are checked)\n",
          zinc_cpu_isa_name(isa));
  return 0;
}

static void expect_ok(zinc_status st, const char *what) {
  if (st != ZINC_OK)
    fprintf(stderr, "%s: %s: %s\n", what, zinc_status_name(st), zinc_last_error());
  assert_int_equal(st, ZINC_OK);
}

/* ------------------------------------------------ PyTorch: SGD and Adagrad */

typedef struct {
  uint32_t ncases, n, steps;
  unsigned char *data; /* the whole file */
  size_t size;
} reference;

#define CASE_HEADER 48 /* int32 kind, nesterov; float64 lr, momentum, dampening, wd, eps */

static size_t case_bytes(const reference *ref) {
  return CASE_HEADER + (size_t)ref->n * 4 * (1 + 2 * ref->steps + 1);
}

static int load_reference(reference *ref) {
  FILE *f = fopen(ZINC_SGD_ADAGRAD_REFERENCE, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", ZINC_SGD_ADAGRAD_REFERENCE);
    return 0;
  }
  fseek(f, 0, SEEK_END);
  ref->size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  ref->data = malloc(ref->size);
  size_t got = fread(ref->data, 1, ref->size, f);
  fclose(f);
  uint32_t hdr[4];
  if (got != ref->size || ref->size < 24 || memcmp(ref->data, "ZOPTREF1", 8) != 0)
    return 0;
  memcpy(hdr, ref->data + 8, sizeof hdr);
  ref->ncases = hdr[1];
  ref->n = hdr[2];
  ref->steps = hdr[3];
  return hdr[0] == 1 && ref->size == 24 + ref->ncases * case_bytes(ref);
}

static void to_double(double *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    dst[i] = src[i];
}

/* Every case of `kind` (0 SGD, 1 Adagrad) on every path; each path's final
 * state also bit for bit against the scalar path's. */
static void torch_cases(int want_kind) {
  reference ref = {0};
  assert_true(load_reference(&ref));
  int64_t n = ref.n;
  float *p = malloc((size_t)n * 4), *m = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
  float *g2 = malloc((size_t)n * 4), *scalar_final = malloc((size_t)n * 8);
  uint16_t *copy = calloc((size_t)n, 2);
  double *want = malloc((size_t)n * 8);
  int failed = 0, cases = 0;
  const unsigned char *at = ref.data + 24;
  for (uint32_t k = 0; k < ref.ncases; k++, at += case_bytes(&ref)) {
    int32_t kind_nesterov[2];
    double hp[5];
    memcpy(kind_nesterov, at, 8);
    memcpy(hp, at + 8, sizeof hp);
    if (kind_nesterov[0] != want_kind)
      continue;
    cases++;
    const float *arr = (const float *)(at + CASE_HEADER);
    const float *p0 = arr, *grads = arr + n, *params = grads + (size_t)ref.steps * n;
    const float *state_final = params + (size_t)ref.steps * n;
    zinc_opt_hparams h = {0};
    h.kind = want_kind == 0 ? ZINC_OPT_SGD : ZINC_OPT_ADAGRAD;
    h.lr = hp[0];
    h.momentum = hp[1];
    h.dampening = hp[2];
    h.weight_decay = hp[3];
    h.eps = hp[4];
    h.nesterov = kind_nesterov[1];
    layout L = {1, {n}, {hp[3] > 0.0}, {3}, n};
    int slots = slots_of(&h);
    char label[160];
    snprintf(label, sizeof label, "%s (lr %g, momentum %g, dampening %g, weight_decay %g%s, "
             "eps %g)", zinc_opt_kind_name(h.kind), h.lr, h.momentum, h.dampening,
             h.weight_decay, h.nesterov ? ", nesterov" : "", h.eps);
    for (int isa = ZINC_CPU_ISA_SCALAR; isa < ZINC_CPU_ISA_N; isa++) {
      if (!path_runs(isa))
        continue;
      memcpy(p, p0, (size_t)n * 4);
      memset(m, 0, (size_t)n * 4);
      memset(v, 0, (size_t)n * 4);
      double q = 0.0, max_abs = 0.0;
      for (uint32_t t = 0; t < ref.steps; t++) {
        for (int64_t i = 0; i < n; i++)
          g2[i] = 2.0f * grads[(size_t)t * n + i];
        expect_ok(kernel_step(isa, &h, &L, t + 1, p, m, v, g2, copy, NULL, NULL), label);
        to_double(want, params + (size_t)t * n, n);
        q = fmax(q, worst("param", want, p, n, NULL, &max_abs));
        failed += !copy_matches(&L, p, copy);
      }
      to_double(want, state_final, n);
      if (slots)
        q = fmax(q, worst(slots & 1 ? "momentum_buffer" : "sum", want, slots & 1 ? m : v, n,
                          NULL, &max_abs));
      fprintf(stderr, "%s vs torch %s: largest difference %.3g, %.3f of the tolerance "
              "(abs %g + rel %g)\n", zinc_cpu_isa_name(isa), label, max_abs, q, TOL_ABS, TOL_REL);
      failed += q > 1.0;
      float *state = slots & 1 ? m : v;
      if (isa == ZINC_CPU_ISA_SCALAR) {
        memcpy(scalar_final, p, (size_t)n * 4);
        memcpy(scalar_final + n, state, (size_t)n * 4);
      } else if (memcmp(scalar_final, p, (size_t)n * 4) ||
                 (slots && memcmp(scalar_final + n, state, (size_t)n * 4))) {
        fprintf(stderr, "%s %s: the final state differs from the scalar path's bits\n",
                zinc_cpu_isa_name(isa), label);
        failed++;
      }
    }
  }
  free(p);
  free(m);
  free(v);
  free(g2);
  free(scalar_final);
  free(copy);
  free(want);
  free(ref.data);
  assert_true(cases > 0);
  assert_int_equal(failed, 0);
}

static void sgd_vs_torch(void **state) { torch_cases(0); }
static void adagrad_vs_torch(void **state) { torch_cases(1); }

/* ------------------------------------- double-precision Adam, Lamb, Lion */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static double unit(uint64_t key) { /* [-1, 1) */
  return (double)(mix(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* One step in double from the fp32 state (p, m, v) and stored gradient g:
 * the new values into P, M, V; Lamb's whole-tensor sums of squares into
 * W2/U2; ambiguous[i] = 1 where Lion's sign is within rounding of 0. */
static void reference_step(const zinc_opt_hparams *h, const layout *L, int64_t step,
                           const float *p, const float *m, const float *v, const float *g,
                           double *P, double *M, double *V, double *W2, double *U2,
                           unsigned char *ambiguous) {
  double t = (double)step, lr = h->lr, b1 = h->beta1, b2 = h->beta2, eps = h->eps;
  double wd = h->weight_decay;
  for (int k = 0; k < L->ntensor; k++) {
    int64_t off = tensor_offset(L, k);
    int decay = L->decay[k];
    double w2 = 0.0, u2 = 0.0;
    for (int64_t i = off; i < off + L->n[k]; i++) {
      double gi = (double)g[i] * GRAD_SCALE, pi = p[i];
      ambiguous[i] = 0;
      switch (h->kind) {
      case ZINC_OPT_ADAM: {
        double bc1 = h->bias_correction ? 1.0 - pow(b1, t) : 1.0;
        double bc2 = h->bias_correction ? 1.0 - pow(b2, t) : 1.0;
        if (decay && !h->adamw)
          gi += wd * pi;
        M[i] = b1 * m[i] + (1.0 - b1) * gi;
        V[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        if (decay && h->adamw)
          pi *= 1.0 - lr * wd;
        P[i] = pi - lr / bc1 * M[i] / (sqrt(V[i]) / sqrt(bc2) + eps);
        break;
      }
      case ZINC_OPT_LAMB: {
        M[i] = b1 * m[i] + (1.0 - b1) * gi;
        V[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        double u = M[i] / (sqrt(V[i]) + eps) + (decay ? wd * pi : 0.0);
        P[i] = u; /* the update, until the ratio is known */
        w2 += pi * pi;
        u2 += u * u;
        break;
      }
      case ZINC_OPT_LION: {
        double a = b1 * m[i], b = (1.0 - b1) * gi, c = a + b;
        ambiguous[i] = fabs(c) <= 1e-6 * (fabs(a) + fabs(b)) && c != 0.0;
        if (decay)
          pi *= 1.0 - lr * wd;
        P[i] = pi - lr * copysign(1.0, c);
        M[i] = b2 * m[i] + (1.0 - b2) * gi;
        break;
      }
      default:
        fail_msg("no double reference for %s", zinc_opt_kind_name(h->kind));
      }
    }
    if (h->kind == ZINC_OPT_LAMB) {
      double bc1 = h->bias_correction ? 1.0 - pow(b1, t) : 1.0;
      double bc2 = h->bias_correction ? 1.0 - pow(b2, t) : 1.0;
      double ratio = 1.0;
      if (w2 > 0.0 && u2 > 0.0)
        ratio = fmin(fmax(sqrt(w2) / sqrt(u2), h->min_coeff), h->max_coeff);
      for (int64_t i = off; i < off + L->n[k]; i++)
        P[i] = (double)p[i] - lr * sqrt(bc2) / bc1 * ratio * P[i];
      W2[k] = w2;
      U2[k] = u2;
    }
  }
}

/* Three tensors: 1000 weights (decay, three segments), 77 small weights
 * (no decay: Lamb's ratio falls below min_coeff), 40 zero weights (decay,
 * two segments: Lamb's ratio is 1). Every 97th gradient is 0. */
static const layout three_tensors = {3, {1000, 77, 40}, {1, 0, 1}, {3, 1, 2}, 1117};

static void init_data(const layout *L, int steps, float *p0, float *grads) {
  for (int k = 0; k < L->ntensor; k++) {
    int64_t off = tensor_offset(L, k);
    double scale = k == 0 ? 0.5 : k == 1 ? 1e-3 : 0.0;
    for (int64_t i = off; i < off + L->n[k]; i++)
      p0[i] = (float)(scale * unit(0x100000ull + (uint64_t)i));
  }
  for (int t = 0; t < steps; t++)
    for (int64_t i = 0; i < L->total; i++) {
      uint64_t key = ((uint64_t)t << 32) ^ (uint64_t)i;
      double mag = pow(10.0, 2.0 * unit(key ^ 0x5a5a) - 1.0); /* 0.1 .. 10 */
      grads[(size_t)t * L->total + i] =
          i % 97 == 0 ? 0.0f : (float)(2.0 * mag * unit(key ^ 0xa5a5));
    }
}

typedef struct {
  const char *label;
  zinc_opt_hparams h;
} double_case;

#define STEPS 6

static void double_cases(const double_case *cases, int ncases) {
  const layout *L = &three_tensors;
  int64_t n = L->total;
  float *p0 = malloc((size_t)n * 4), *grads = malloc((size_t)n * 4 * STEPS);
  float *p = malloc((size_t)n * 4), *m = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
  float *scalar_final = malloc((size_t)n * 12);
  uint16_t *copy = calloc((size_t)n, 2);
  double *P = malloc((size_t)n * 8), *M = malloc((size_t)n * 8), *V = malloc((size_t)n * 8);
  unsigned char *ambiguous = malloc((size_t)n);
  init_data(L, STEPS, p0, grads);
  int failed = 0;
  for (int c = 0; c < ncases; c++) {
    const zinc_opt_hparams *h = &cases[c].h;
    int slots = slots_of(h);
    for (int isa = ZINC_CPU_ISA_SCALAR; isa < ZINC_CPU_ISA_N; isa++) {
      if (!path_runs(isa))
        continue;
      memcpy(p, p0, (size_t)n * 4);
      memset(m, 0, (size_t)n * 4);
      memset(v, 0, (size_t)n * 4);
      double q = 0.0, max_abs = 0.0, worst_norm = 0.0;
      int64_t nambiguous = 0;
      int clamped_max = 0, clamped_min = 0, ratio_one = 0;
      for (int t = 0; t < STEPS; t++) {
        const float *g = grads + (size_t)t * n;
        double W2[MAX_TENSORS], U2[MAX_TENSORS], wsum[MAX_TENSORS], usum[MAX_TENSORS];
        reference_step(h, L, t + 1, p, m, v, g, P, M, V, W2, U2, ambiguous);
        expect_ok(kernel_step(isa, h, L, t + 1, p, m, v, g, copy, wsum, usum), cases[c].label);
        q = fmax(q, worst("param", P, p, n, ambiguous, &max_abs));
        if (slots & 1)
          q = fmax(q, worst("exp_avg", M, m, n, NULL, &max_abs));
        if (slots & 2)
          q = fmax(q, worst("exp_avg_sq", V, v, n, NULL, &max_abs));
        failed += !copy_matches(L, p, copy);
        for (int64_t i = 0; i < n; i++)
          nambiguous += ambiguous[i];
        if (!zinc_opt_two_pass(h->kind))
          continue;
        for (int k = 0; k < L->ntensor; k++) {
          double dw = fabs(wsum[k] - W2[k]) / fmax(W2[k], 1e-30);
          double du = fabs(usum[k] - U2[k]) / fmax(U2[k], 1e-30);
          if (W2[k] == 0.0)
            dw = wsum[k] != 0.0;
          worst_norm = fmax(worst_norm, fmax(dw, du));
          double ratio = W2[k] > 0 && U2[k] > 0 ? sqrt(W2[k]) / sqrt(U2[k]) : -1.0;
          clamped_max += ratio > h->max_coeff;
          clamped_min += ratio >= 0 && ratio < h->min_coeff;
          ratio_one += ratio < 0;
        }
      }
      fprintf(stderr, "%s vs double %s: largest difference %.3g, %.3f of the tolerance (abs %g "
              "+ rel %g)", zinc_cpu_isa_name(isa), cases[c].label, max_abs, q, TOL_ABS, TOL_REL);
      if (zinc_opt_two_pass(h->kind))
        fprintf(stderr, "; norms within relative %.3g (limit %g); tensor-steps clamped to "
                "max_coeff %d, to min_coeff %d, ratio 1 %d", worst_norm, TOL_NORM_REL,
                clamped_max, clamped_min, ratio_one);
      if (nambiguous)
        fprintf(stderr, "; %lld elements with a sign within rounding of 0 not compared",
                (long long)nambiguous);
      fprintf(stderr, "\n");
      failed += q > 1.0 || worst_norm > TOL_NORM_REL;
      if (isa == ZINC_CPU_ISA_SCALAR) {
        memcpy(scalar_final, p, (size_t)n * 4);
        memcpy(scalar_final + n, m, (size_t)n * 4);
        memcpy(scalar_final + 2 * n, v, (size_t)n * 4);
      } else if (memcmp(scalar_final, p, (size_t)n * 4) ||
                 ((slots & 1) && memcmp(scalar_final + n, m, (size_t)n * 4)) ||
                 ((slots & 2) && memcmp(scalar_final + 2 * n, v, (size_t)n * 4))) {
        fprintf(stderr, "%s %s: the final state differs from the scalar path's bits\n",
                zinc_cpu_isa_name(isa), cases[c].label);
        failed++;
      }
    }
  }
  free(p0);
  free(grads);
  free(p);
  free(m);
  free(v);
  free(scalar_final);
  free(copy);
  free(P);
  free(M);
  free(V);
  free(ambiguous);
  assert_int_equal(failed, 0);
}

static void adam_vs_double(void **state) {
  const double_case cases[] = {
      {"AdamW (lr 1e-3, betas 0.9 0.999, eps 1e-8, wd 0.01)",
       {.kind = ZINC_OPT_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
        .weight_decay = 0.01, .adamw = 1, .bias_correction = 1}},
      {"Adam, L2 decay, no bias correction (lr 2e-3, betas 0.8 0.99, eps 1e-6, wd 0.1)",
       {.kind = ZINC_OPT_ADAM, .lr = 2e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6,
        .weight_decay = 0.1, .adamw = 0, .bias_correction = 0}},
  };
  double_cases(cases, 2);
}

static void lamb_vs_double(void **state) {
  const double_case cases[] = {
      {"Lamb (lr 1e-2, betas 0.9 0.999, eps 1e-8, wd 0.01, coeff [0.01, 10])",
       {.kind = ZINC_OPT_LAMB, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
        .weight_decay = 0.01, .bias_correction = 1, .min_coeff = 0.01, .max_coeff = 10.0}},
      {"Lamb clamped, no bias correction (lr 5e-3, betas 0.85 0.99, eps 1e-6, wd 0.1, "
       "coeff [0.05, 0.1])",
       {.kind = ZINC_OPT_LAMB, .lr = 5e-3, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-6,
        .weight_decay = 0.1, .bias_correction = 0, .min_coeff = 0.05, .max_coeff = 0.1}},
  };
  double_cases(cases, 2);
}

static void lion_vs_double(void **state) {
  const double_case cases[] = {
      {"Lion (lr 1e-3, betas 0.9 0.99, wd 0.1)",
       {.kind = ZINC_OPT_LION, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}},
      {"Lion (lr 3e-4, betas 0.95 0.98, wd 0)",
       {.kind = ZINC_OPT_LION, .lr = 3e-4, .beta1 = 0.95, .beta2 = 0.98, .weight_decay = 0.0}},
  };
  double_cases(cases, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(adam_vs_double),  cmocka_unit_test(sgd_vs_torch),
      cmocka_unit_test(adagrad_vs_torch), cmocka_unit_test(lamb_vs_double),
      cmocka_unit_test(lion_vs_double),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
