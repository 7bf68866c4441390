/*
 * test_onecycle_step.c — OneCycle with cycle_momentum, through zinc_step:
 * each step uses the schedule's lr and beta1 for that step (and beta2 0.99,
 * as DeepSpeed's OneCycle sets it), at stages 0 and 3, 1 and 2 ranks.
 *
 * The reference is Adam in double written here with the OneCycle formulas
 * (the triangular cycle over cycle_first_step_size up and as many down,
 * then the decay phase at the cycle's end values, with both decay rates
 * 0): lr = min + (max - min) * scale(t), beta1 = max_mom - (max_mom -
 * min_mom) * scale(t), where zinc's step s (from 0) runs at iteration s,
 * t = s + 1 (docs/config.md: DeepSpeed's engine runs its step s at
 * iteration s - 1, one step behind). The schedule's own values are checked bit for bit
 * against DeepSpeed's classes in tests/optim/test_sched_reference; this
 * test checks that the step applies them. A step that kept the config's
 * betas ends 1e-2 (relative) away, far above the 1e-6 bound.
 */
#include <mpi.h>

#include "engine_test.h"

enum { N = 8, STEPS = 7, UP = 2 };
static const double MIN_LR = 0.002, MAX_LR = 0.02, MIN_MOM = 0.8, MAX_MOM = 0.95;

static zinc_status init(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  (void)p, (void)ctx;
  for (int64_t j = 0; j < numel; j++)
    dst[j] = 0.5f - 0.1f * (float)j;
  return ZINC_OK;
}

/* The gradient every rank reports at step s (the mean is the same). */
static float grad_at(int s, int j) { return (float)(0.3 * sin(1.0 + s * 0.7 + j * 1.3)); }

static double scale_at(int t) {
  if (t >= 2 * UP)
    return 0; /* decay phase, rates 0: the cycle's end values */
  double x = (double)t / (2 * UP);
  return x <= 0.5 ? x / 0.5 : (x - 1) / (0.5 - 1);
}

static void reference(double *w) {
  double m[N] = {0}, v[N] = {0};
  for (int j = 0; j < N; j++)
    w[j] = (double)(0.5f - 0.1f * (float)j);
  for (int s = 0; s < STEPS; s++) {
    double sc = scale_at(s + 1), lr = MIN_LR + (MAX_LR - MIN_LR) * sc;
    double b1 = MAX_MOM - (MAX_MOM - MIN_MOM) * sc, b2 = 0.99, t = s + 1;
    for (int j = 0; j < N; j++) {
      double g = grad_at(s, j);
      m[j] = b1 * m[j] + (1 - b1) * g;
      v[j] = b2 * v[j] + (1 - b2) * g * g;
      double mh = m[j] / (1 - pow(b1, t)), vh = v[j] / (1 - pow(b2, t));
      w[j] -= lr * mh / (sqrt(vh) + 1e-8);
    }
  }
}

static void run(int stage, float *out) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1,"
           " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": %g, \"betas\": [0.9, 0.999],"
           " \"eps\": 1e-8, \"weight_decay\": 0}},"
           " \"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": %g,"
           " \"cycle_max_lr\": %g, \"cycle_first_step_size\": %d, \"cycle_momentum\": true,"
           " \"cycle_min_mom\": %g, \"cycle_max_mom\": %g}},"
           " \"zero_optimization\": {\"stage\": %d}}",
           MIN_LR, MIN_LR, MAX_LR, UP, MIN_MOM, MAX_MOM, stage);
  zinc_config *cfg;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  zinc_module *mod = zinc_module_add(e, "m");
  int64_t shape[1] = {N};
  zinc_param *p = zinc_param_add(e, mod, "w", ZINC_F32, 1, shape);
  ET_CHECK(p != NULL, "param: %s", zinc_last_error());
  ET_OK(zinc_engine_build(e, init, NULL));
  for (int s = 0; s < STEPS; s++) {
    ET_OK(zinc_module_fetch(e, mod));
    float *g = zinc_param_grad(p);
    ET_CHECK(g != NULL, "gradient: %s", zinc_last_error());
    for (int j = 0; g && j < N; j++)
      g[j] = grad_at(s, j);
    ET_OK(zinc_module_grads_ready(e, mod));
    ET_OK(zinc_module_release(e, mod));
    ET_OK(zinc_backward_end(e));
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    double want_lr = MIN_LR + (MAX_LR - MIN_LR) * scale_at(s + 1);
    ET_CHECK(fabs(info.lr - want_lr) <= 1e-6 * want_lr, /* info.lr is a float */ "stage %d step %d: lr %.17g, want %.17g",
             stage, s, info.lr, want_lr);
  }
  ET_OK(zinc_param_get_full(e, p, ZINC_STATE_PARAM, out));
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  double want[N];
  reference(want);
  const int stages[] = {0, 3};
  for (int k = 0; k < 2; k++) {
    float got[N];
    run(stages[k], got);
    for (int j = 0; j < N; j++) {
      double d = fabs(got[j] - want[j]) / fmax(fabs(want[j]), 1e-3);
      ET_CHECK(d <= 1e-6, "stage %d w[%d] = %.9g, reference %.9g (relative %.2e)", stages[k], j,
               got[j], want[j], d);
    }
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "OneCycle step checks FAILED\n" : "OneCycle step checks passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
