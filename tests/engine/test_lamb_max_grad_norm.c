/*
 * test_lamb_max_grad_norm.c — Lamb's optimizer.params.max_grad_norm, under
 * mpirun, as DeepSpeed's FusedLamb clips: the engine hands it the global
 * gradient norm and the scale it already divides by (the loss scale times
 * gradient_clipping's clip), FusedLamb takes the norm those leave,
 *     n' = norm x coef            (coef: gradient_clipping's clip, or 1)
 *     c  = (n' + 1e-6) / max_grad_norm
 * and divides the gradient by c too when c > 1. So gradient_clipping clips
 * first and max_grad_norm clips what it left.
 *
 * This file's own double-precision reference does exactly that (written
 * here, from the formula above) over the tiny model's global gradient and
 * Lamb's update (et_reference_update). Per case, at 1 and 2 ranks:
 *  - stage 0 within relative L2 1e-5 of the reference with the clip;
 *  - the clip shows: the reference without max_grad_norm is more than 100x
 *    that far (so an engine that ignored the key fails here);
 *  - stages 1, 2 (overlap) and 3 (overlap), and stage 1 with the optimizer
 *    on the CPU, bitwise identical to stage 0.
 * The trust ratio is clamped to 1 (min_coeff = max_coeff = 1) and eps is
 * large against the gradient, so that the update scales with the gradient:
 * Lamb's own normalisation would otherwise hide most of the clip.
 */
#include "engine_test.h"

#define STEPS 6

/* The reference trainer: run r with Lamb o, max_grad_norm applied as
 * FusedLamb does when `lamb_clip` (else ignored). final: fp32 parameters.
 * *clipped_steps: the steps whose Lamb clip was below 1. */
static void reference(const et_run *r, const et_optim *o, int lamb_clip, float **final,
                      int *clipped_steps) {
  const tm_shape *sh = &r->shape;
  float *P[TM_NPARAM], *G[TM_NPARAM], *Gl[TM_NPARAM];
  double *Pd[TM_NPARAM], *M[TM_NPARAM], *V[TM_NPARAM], *g[TM_NPARAM];
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(sh, i);
    P[i] = calloc((size_t)n, 4);
    G[i] = calloc((size_t)n, 4);
    Gl[i] = calloc((size_t)n, 4);
    Pd[i] = calloc((size_t)n, 8);
    M[i] = calloc((size_t)n, 8);
    V[i] = calloc((size_t)n, 8);
    g[i] = calloc((size_t)n, 8);
    for (int64_t j = 0; j < n; j++)
      Pd[i][j] = P[i][j] = tm_init_value(sh, i, j);
  }
  *clipped_steps = 0;
  for (int s = 0; s < r->steps; s++) {
    double coef, avg = et_reference_grads(r, et_world, s, P, G, Gl, &coef);
    double sq = 0;
    for (int i = 0; i < TM_NPARAM; i++)
      for (int64_t j = 0; j < tm_numel(sh, i); j++)
        sq += ((double)G[i][j] * avg) * ((double)G[i][j] * avg);
    double left = sqrt(sq) * coef; /* the norm gradient_clipping leaves */
    double c = (left + 1e-6) / o->max_grad_norm;
    if (lamb_clip && o->max_grad_norm > 0 && c > 1) {
      coef /= c;
      (*clipped_steps)++;
    }
    for (int i = 0; i < TM_NPARAM; i++) {
      for (int64_t j = 0; j < tm_numel(sh, i); j++)
        g[i][j] = G[i][j] * avg * coef;
      et_reference_update(o, s + 1, et_param_decays(i), tm_numel(sh, i), Pd[i], M[i], V[i],
                          g[i]);
      for (int64_t j = 0; j < tm_numel(sh, i); j++)
        P[i][j] = (float)Pd[i][j];
    }
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    memcpy(final[i], P[i], (size_t)tm_numel(sh, i) * 4);
    free(P[i]);
    free(G[i]);
    free(Gl[i]);
    free(Pd[i]);
    free(M[i]);
    free(V[i]);
    free(g[i]);
  }
}

/* The global norm of the mean gradient at the first step. */
static double first_norm(const et_run *r) {
  const tm_shape *sh = &r->shape;
  float **P = et_alloc_params(sh), **G = et_alloc_params(sh), **Gl = et_alloc_params(sh);
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      P[i][j] = tm_init_value(sh, i, j);
  double coef, avg = et_reference_grads(r, et_world, 0, P, G, Gl, &coef), sq = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      sq += ((double)G[i][j] * avg) * ((double)G[i][j] * avg);
  et_free_params(P);
  et_free_params(G);
  et_free_params(Gl);
  return sqrt(sq);
}

/* One case: gradient_clipping `gc` (0: off) and max_grad_norm `frac` x the
 * first step's norm. */
static void check_case(const char *label, double gc, double frac) {
  et_run base = et_defaults();
  base.steps = STEPS;
  base.clip = 0;
  double n0 = first_norm(&base);
  et_optim o = {.type = "Lamb", .lr = 0.5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1.0,
                .weight_decay = 0.01, .min_coeff = 1.0, .max_coeff = 1.0,
                .max_grad_norm = frac * n0};
  base.optim = &o;
  base.clip = gc * n0;
  const struct {
    int stage, overlap;
    const char *offload;
  } runs[] = {{0, 0, "none"}, {1, 0, "none"}, {2, 1, "none"}, {3, 1, "none"}, {1, 0, "cpu"}};
  float **first = et_alloc_params(&base.shape), **ref = et_alloc_params(&base.shape);
  float **unclipped = et_alloc_params(&base.shape);
  int clipped = 0, ignored;
  reference(&base, &o, 1, ref, &clipped);
  reference(&base, &o, 0, unclipped, &ignored);
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    et_run r = base;
    r.stage = runs[k].stage;
    r.overlap = runs[k].overlap;
    r.offload = runs[k].offload;
    char what[160];
    snprintf(what, sizeof what, "%s: stage %d%s offload %s", label, r.stage,
             r.overlap ? " overlap" : "", r.offload);
    float **out = k == 0 ? first : et_alloc_params(&r.shape);
    et_train(&r, out, NULL, NULL);
    if (k > 0) {
      ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical to stage 0",
               what);
      et_free_params(out);
      continue;
    }
    double rel = et_rel_l2(&r.shape, first, ref), off = et_rel_l2(&r.shape, first, unclipped);
    ET_CHECK(rel <= 1e-5, "%s vs the reference with FusedLamb's clip: relative L2 %.3g > 1e-5 "
             "(without the clip: %.3g)", what, rel, off);
    ET_CHECK(off > 100 * 1e-5, "%s: the reference without max_grad_norm is only %.3g away: "
             "the case does not show the clip", what, off);
    if (et_rank == 0)
      printf("%s, %d ranks: norm %.4g, gradient_clipping %.4g, max_grad_norm %.4g: %d of %d "
             "steps clipped by Lamb; vs reference %.3g, vs no max_grad_norm %.3g\n", label,
             et_world, n0, base.clip, o.max_grad_norm, clipped, STEPS, rel, off);
  }
  ET_CHECK(clipped > 0, "%s: max_grad_norm never clipped in the reference", label);
  if (et_rank == 0 && et_failures == 0)
    printf("%s, %d ranks: stages 0-3 and cpu offload bitwise identical\n", label, et_world);
  et_free_params(first);
  et_free_params(ref);
  et_free_params(unclipped);
}

int main(void) {
  /* an engine first, so that et_rank/et_world are known to the reference */
  et_run probe = et_defaults();
  probe.steps = 1;
  float **p = et_alloc_params(&probe.shape);
  et_train(&probe, p, NULL, NULL);
  et_free_params(p);
  check_case("max_grad_norm alone", 0, 0.25);
  check_case("after gradient_clipping", 0.5, 0.2);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  return 0;
}
