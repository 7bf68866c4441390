/*
 * test_mp_clip.c — gradient clipping and the overflow skip with model
 * parallelism (model_parallel_size 2), at world 2 (data-parallel 1) and
 * world 4 (data-parallel 2), stages 0-3:
 *  - each model-parallel rank holds one half of the sharded parameters
 *    (w1, b1, w2) and the whole of the replicated ones (b2, ln, marked with
 *    zinc_param_set_replicated); the trainer's gradients are a fixed
 *    function of the full tensor's index, the step and the data-parallel
 *    rank (the replicated ones the same on both model-parallel ranks);
 *  - the reported norm is the whole model's (replicated parameters counted
 *    once), and after two clipped AdamW steps (eps large, so the update
 *    depends on the clipping coefficient) every rank's parameters equal a
 *    double-precision reference of the whole model within fp32 rounding;
 *  - an inf in one model-parallel rank's shard (on the last data-parallel
 *    rank only), and a NaN in a replicated gradient on model-parallel
 *    rank 1 only, skip the step on every rank: no parameter changes.
 * Run at 2 and 4 ranks; 1 or 3 ranks cannot hold model_parallel_size 2
 * and say SKIPPED.
 */
#include <mpi.h>

#include "engine_test.h"

enum { MP = 2, NPAR = 5 };
static const char *names[NPAR] = {"w1", "b1", "w2", "b2", "ln"};
static const int module_of[NPAR] = {0, 0, 1, 1, 1};
static const int replicated[NPAR] = {0, 0, 0, 1, 1};
static const int decay[NPAR] = {1, 0, 1, 0, 0};
/* elements per model-parallel rank (sharded) or whole (replicated) */
static const int64_t local_numel[NPAR] = {24 * 40, 40, 40 * 24, 24, 24};

static const double LR = 0.01, B1 = 0.9, B2 = 0.999, EPS = 1e-3, WD = 0.01, CLIP = 0.5;

static int64_t full_numel(int i) { return replicated[i] ? local_numel[i] : local_numel[i] * MP; }

static double init_value(int i, int64_t j) { return 0.05 * sin(0.3 + 0.11 * (double)j + i); }

/* The gradient the trainer computes for element j of the full tensor i at
 * step s on data-parallel rank d; step 1 is 30x step 0, so the clipping
 * coefficients differ. */
static double grad_value(int i, int64_t j, int s, int d) {
  double amp = s == 0 ? 0.02 : 0.6;
  return amp * cos(0.7 + 0.37 * (double)j + 1.3 * i + 0.71 * d + 2.1 * s);
}

typedef struct {
  int mp_rank;
} init_ctx;

static zinc_status init_param(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  const init_ctx *c = ctx;
  int i = 0;
  while (strcmp(names[i], zinc_param_name(p)) != 0)
    i++;
  int64_t first = replicated[i] ? 0 : (int64_t)c->mp_rank * local_numel[i];
  for (int64_t j = 0; j < numel; j++)
    dst[j] = (float)init_value(i, first + j);
  return ZINC_OK;
}

typedef struct {
  zinc_engine *e;
  zinc_module *mod[2];
  zinc_param *par[NPAR];
  init_ctx ictx;
} mp_model;

static zinc_engine *open_engine(int stage, mp_model *m) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": %g,"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g, \"betas\": [%g, %g],"
           " \"eps\": %g, \"weight_decay\": %g}},"
           " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 500,"
           " \"stage3_param_persistence_threshold\": 0},"
           " \"zinc\": {\"comm_timeout_s\": 60}}",
           CLIP, LR, B1, B2, EPS, WD, stage);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = MP;
  ET_OK(zinc_engine_create(cfg, &opt, &m->e));
  zinc_config_free(cfg);
  static const char *mods[2] = {"up", "down"};
  for (int k = 0; k < 2; k++)
    m->mod[k] = zinc_module_add(m->e, mods[k]);
  for (int i = 0; i < NPAR; i++) {
    int64_t shape[1] = {local_numel[i]};
    m->par[i] = zinc_param_add(m->e, m->mod[module_of[i]], names[i], ZINC_F32, 1, shape);
    if (!m->par[i]) {
      fprintf(stderr, "zinc_param_add: %s\n", zinc_last_error());
      exit(1);
    }
    ET_OK(zinc_param_set_weight_decay(m->par[i], decay[i]));
    ET_OK(zinc_param_set_replicated(m->par[i], replicated[i]));
  }
  m->ictx.mp_rank = zinc_mp_rank(m->e);
  ET_OK(zinc_engine_build(m->e, init_param, &m->ictx));
  return m->e;
}

/* One micro-batch and the step; bad_param >= 0 puts `bad` into element 3
 * of that parameter's gradient on this rank. */
static zinc_step_info step(mp_model *m, int s, int bad_param, float bad) {
  zinc_engine *e = m->e;
  int d = zinc_dp_rank(e), mpr = zinc_mp_rank(e);
  for (int k = 1; k >= 0; k--) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    for (int i = 0; i < NPAR; i++) {
      if (module_of[i] != k)
        continue;
      float *g = zinc_param_grad(m->par[i]);
      ET_CHECK(g != NULL, "zinc_param_grad(%s): %s", names[i], zinc_last_error());
      int64_t first = replicated[i] ? 0 : (int64_t)mpr * local_numel[i];
      for (int64_t j = 0; j < local_numel[i]; j++)
        g[j] += (float)grad_value(i, first + j, s, d);
      if (i == bad_param)
        g[3] = bad;
    }
    ET_OK(zinc_module_grads_ready(e, m->mod[k]));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  ET_OK(zinc_backward_end(e));
  zinc_step_info info = ZINC_STEP_INFO_INIT;
  ET_OK(zinc_step(e, &info));
  return info;
}

/* The whole model in double: `steps` clipped AdamW steps of the gradient
 * averaged over `dp` data-parallel ranks. norms[s]: the norm at step s. */
static void reference(int steps, int dp, double **P, double *norms) {
  double *M[NPAR], *V[NPAR], *G[NPAR];
  for (int i = 0; i < NPAR; i++) {
    int64_t n = full_numel(i);
    M[i] = calloc((size_t)n, sizeof(double));
    V[i] = calloc((size_t)n, sizeof(double));
    G[i] = calloc((size_t)n, sizeof(double));
    for (int64_t j = 0; j < n; j++)
      P[i][j] = init_value(i, j);
  }
  for (int s = 0; s < steps; s++) {
    double sq = 0;
    for (int i = 0; i < NPAR; i++)
      for (int64_t j = 0; j < full_numel(i); j++) {
        double g = 0;
        for (int d = 0; d < dp; d++)
          g += grad_value(i, j, s, d);
        G[i][j] = g / dp;
        sq += G[i][j] * G[i][j];
      }
    double norm = sqrt(sq), coef = norm > CLIP ? CLIP / (norm + 1e-6) : 1.0;
    norms[s] = norm;
    double t = s + 1, bc1 = 1 - pow(B1, t), bc2 = 1 - pow(B2, t);
    for (int i = 0; i < NPAR; i++)
      for (int64_t j = 0; j < full_numel(i); j++) {
        double g = G[i][j] * coef;
        M[i][j] = B1 * M[i][j] + (1 - B1) * g;
        V[i][j] = B2 * V[i][j] + (1 - B2) * g * g;
        double p = P[i][j];
        if (decay[i])
          p *= 1 - LR * WD;
        P[i][j] = p - LR / bc1 * M[i][j] / (sqrt(V[i][j]) / sqrt(bc2) + EPS);
      }
  }
  for (int i = 0; i < NPAR; i++) {
    free(M[i]);
    free(V[i]);
    free(G[i]);
  }
}

static void get_params(mp_model *m, float **out) {
  for (int i = 0; i < NPAR; i++)
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, out[i]));
}

static float **alloc_local(void) {
  float **p = calloc(NPAR, sizeof *p);
  for (int i = 0; i < NPAR; i++)
    p[i] = calloc((size_t)local_numel[i], sizeof(float));
  return p;
}

static void free_local(float **p) {
  for (int i = 0; i < NPAR; i++)
    free(p[i]);
  free(p);
}

static void test_clip(int stage) {
  mp_model m;
  zinc_engine *e = open_engine(stage, &m);
  int dp = zinc_dp_size(e), mpr = zinc_mp_rank(e);
  double *ref[NPAR], norms[2];
  for (int i = 0; i < NPAR; i++)
    ref[i] = calloc((size_t)full_numel(i), sizeof(double));
  reference(2, dp, ref, norms);
  for (int s = 0; s < 2; s++) {
    zinc_step_info info = step(&m, s, -1, 0);
    ET_CHECK(!info.skipped, "stage %d step %d skipped", stage, s);
    double rel = fabs(info.grad_norm - norms[s]) / norms[s];
    ET_CHECK(rel < 1e-5, "stage %d step %d, mp rank %d: grad_norm %.7g, the whole model's is "
             "%.7g (relative difference %.2g)", stage, s, mpr, info.grad_norm, norms[s], rel);
  }
  float **got = alloc_local();
  get_params(&m, got);
  double worst = 0; /* largest error / tolerance */
  const char *worst_name = "";
  int64_t worst_j = 0;
  for (int i = 0; i < NPAR; i++) {
    int64_t first = replicated[i] ? 0 : (int64_t)mpr * local_numel[i];
    for (int64_t j = 0; j < local_numel[i]; j++) {
      double want = ref[i][first + j];
      /* fp32 against double: abs 1e-7 + rel 1e-5 (the parameters are
       * about 0.05, an fp32 ulp there 4e-9) */
      double err = fabs(got[i][j] - want) / (1e-7 + 1e-5 * fabs(want));
      if (err > worst) {
        worst = err;
        worst_name = names[i];
        worst_j = j;
      }
    }
  }
  ET_CHECK(worst <= 1.0, "stage %d, mp rank %d: parameters differ from the double reference "
           "by up to %.3g x the tolerance, at %s[%lld]", stage, mpr, worst, worst_name,
           (long long)worst_j);
  free_local(got);
  for (int i = 0; i < NPAR; i++)
    free(ref[i]);
  zinc_engine_destroy(e);
}

/* bad on (mp rank bad_mp, last dp rank) in parameter bad_param: every
 * rank skips and keeps its parameters. */
static void test_overflow(int stage, int bad_param, int bad_mp, float bad, const char *what) {
  mp_model m;
  zinc_engine *e = open_engine(stage, &m);
  int me_bad = zinc_mp_rank(e) == bad_mp && zinc_dp_rank(e) == zinc_dp_size(e) - 1;
  step(&m, 0, -1, 0);
  float **before = alloc_local(), **after = alloc_local();
  get_params(&m, before);
  zinc_step_info info = step(&m, 1, me_bad ? bad_param : -1, bad);
  ET_CHECK(info.skipped == 1, "stage %d, %s on mp rank %d: rank %d did not skip", stage, what,
           bad_mp, et_rank);
  get_params(&m, after);
  for (int i = 0; i < NPAR; i++)
    ET_CHECK(!memcmp(before[i], after[i], (size_t)local_numel[i] * sizeof(float)),
             "stage %d, %s: %s changed on rank %d in a skipped step", stage, what, names[i],
             et_rank);
  /* the next step is whole again */
  info = step(&m, 1, -1, 0);
  ET_CHECK(!info.skipped, "stage %d, %s: the step after the skip was skipped", stage, what);
  free_local(before);
  free_local(after);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world % MP != 0) {
    if (et_rank == 0)
      printf("SKIPPED: model_parallel_size %d needs a multiple of %d ranks, have %d\n", MP, MP,
             et_world);
    MPI_Finalize();
    return 77;
  }
  for (int stage = 0; stage <= 3; stage++) {
    test_clip(stage);
    test_overflow(stage, 0, MP - 1, INFINITY, "inf in a shard of w1");
    test_overflow(stage, 2, 0, INFINITY, "inf in a shard of w2");
    test_overflow(stage, 3, MP - 1, NAN, "NaN in the replicated b2");
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf("model-parallel clipping checks %s at %d ranks\n", bad ? "FAILED" : "passed",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
