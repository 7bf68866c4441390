/*
 * test_predivide.c — prescale_gradients and gradient_predivide_factor at
 * stages 0-3, under mpirun (1-3 ranks). DeepSpeed's order around the
 * gradient sum (its all-reduce path):
 *   prescale_gradients:            g x 1/dp_size, then the sum;
 *   gradient_predivide_factor f:   g x 1/f, the sum, then x f/dp_size;
 * each product in f32 rounded to the gradient's dtype. zinc folds the
 * factor after the sum into the step's f64 scale, so the averaged gradient
 * read with ZINC_STATE_GRAD is (float)(stored sum x factor / gas).
 *
 *  - exact: one fp16 parameter (padded to the rank count), two micro-batches
 *    of rank- and element-dependent gradients, f = 3 (1/3 is inexact in
 *    binary, so a missing or misplaced division changes the bits); the
 *    reference below redoes the arithmetic: per rank the window's f32 sum
 *    rounded to fp16 (stages 0/1) or each micro-batch (stages 2/3), times
 *    float(1/f), rounded to fp16, summed over ranks in rank order in f32
 *    and rounded once (comm.h), then (stages 2/3) accumulated in f32 over
 *    the micro-batches. Compared bit for bit.
 *  - overflow: every rank's fp16 gradient is 40000; their sum (80000 at
 *    two ranks) is past fp16's 65504, so without a division the step is
 *    skipped as an overflow; with gradient_predivide_factor = dp_size or
 *    prescale_gradients it is not, and the averaged gradient is the
 *    reference's.
 *  - compressed (communication_data_type fp32, two or more ranks): the
 *    same mean within 2^-9 relative (the sum is rounded differently);
 *  - refused: prescale_gradients with delayed averaging, PowerSGD, DGC or a
 *    1-bit optimizer (they replace the reduction the division wraps).
 */
#include <math.h>
#include <mpi.h>

#include "engine_test.h"

enum { N_ELEMS = 37, GAS = 2 };

static zinc_status zero_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.0f;
  return ZINC_OK;
}

/* The gradient rank r writes in micro-batch k at element i (fp16-exact). */
static float grad_value(int r, int k, int i, float big) {
  if (big != 0.0f)
    return big;
  return zinc_f16_to_f32(zinc_f32_to_f16(1000.7f * (float)(r + 1) + 3.3f * (float)i -
                                         517.1f * (float)k));
}

static float round16(float x) { return zinc_f16_to_f32(zinc_f32_to_f16(x)); }

/* The averaged gradient of element i as DeepSpeed's order gives it. */
static float reference(int stage, int world, int gas, int prescale, double f, float big,
                       int i) {
  float pre = prescale ? 1.0f / (float)world : (float)(1.0 / f);
  double post = prescale ? 1.0 : f / (double)world;
  float part = 0.0f; /* stages 2/3: the f32 partition */
  float reduced = 0.0f;
  if (stage <= 1) {
    float sum = 0.0f;
    for (int r = 0; r < world; r++) {
      float acc = 0.0f;
      for (int k = 0; k < gas; k++)
        acc += grad_value(r, k, i, big);
      sum += round16(round16(acc) * pre);
    }
    reduced = round16(sum);
  } else {
    for (int k = 0; k < gas; k++) {
      float sum = 0.0f;
      for (int r = 0; r < world; r++)
        sum += round16(grad_value(r, k, i, big) * pre);
      part += round16(sum);
    }
    reduced = part;
  }
  return (float)((double)reduced * (post / (double)gas));
}

/* One window; *got: the averaged gradient; returns whether the step was
 * skipped. */
static int run_with(int stage, int gas, int prescale, double f, float big, const char *extra,
                    float *got) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
           " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.0}},"
           " \"zero_allow_untested_optimizer\": true,"
           " \"fp16\": {\"enabled\": true, \"loss_scale\": 1},%s"
           " \"prescale_gradients\": %s, \"gradient_predivide_factor\": %.17g,"
           " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0}}",
           gas, extra, prescale ? "true" : "false", f, stage);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "layer");
  int64_t shape[1] = {N_ELEMS};
  zinc_param *p = zinc_param_add(e, m, "w", ZINC_F16, 1, shape);
  ET_CHECK(m && p, "registering the parameter failed: %s", zinc_last_error());
  ET_OK(zinc_engine_build(e, zero_init, NULL));
  zinc_step_info info = ZINC_STEP_INFO_INIT;
  for (int k = 0; k < gas; k++) {
    ET_OK(zinc_module_fetch(e, m));
    uint16_t *g = zinc_param_grad(p);
    for (int i = 0; i < N_ELEMS; i++) /* the trainer accumulates (+=) */
      g[i] = zinc_f32_to_f16(zinc_f16_to_f32(g[i]) + grad_value(et_rank, k, i, big));
    ET_OK(zinc_module_grads_ready(e, m));
    ET_OK(zinc_module_release(e, m));
    ET_OK(zinc_backward_end(e));
    if (k == gas - 1)
      ET_OK(zinc_param_get_full(e, p, ZINC_STATE_GRAD, got));
    ET_OK(zinc_step(e, &info));
  }
  zinc_engine_destroy(e);
  return info.skipped;
}

static int run(int stage, int gas, int prescale, double f, float big, float *got) {
  return run_with(stage, gas, prescale, f, big, "", got);
}

/* A compressed reduction (communication_data_type fp32: the fp16 slices
 * travel cast to f32 and are summed in f32): the division happens before
 * the encoding, so the mean is the reference's within an fp16 rounding or
 * two (a missing or doubled division is off by 3x). */
static void check_compressed(int stage) {
  float got[N_ELEMS];
  int skipped = run_with(stage, GAS, 0, 3.0, 0.0f, " \"communication_data_type\": \"fp32\",",
                         got);
  ET_CHECK(!skipped, "stage %d, compressed, predivide 3: step skipped", stage);
  for (int i = 0; i < N_ELEMS; i++) {
    float want = reference(stage, et_world, GAS, 0, 3.0, 0.0f, i);
    if (fabsf(got[i] - want) > ldexpf(fabsf(want), -9)) {
      ET_CHECK(0, "stage %d, compressed, predivide 3, element %d: %.9g, want %.9g within "
               "2^-9 relative", stage, i, got[i], want);
      break;
    }
  }
}

static void check_exact(int stage, int prescale, double f) {
  float got[N_ELEMS];
  int skipped = run(stage, GAS, prescale, f, 0.0f, got);
  ET_CHECK(!skipped, "stage %d, prescale %d, f %g: step skipped", stage, prescale, f);
  int bad = 0;
  for (int i = 0; i < N_ELEMS; i++) {
    float want = reference(stage, et_world, GAS, prescale, f, 0.0f, i);
    if (memcmp(&got[i], &want, 4) != 0 && bad++ < 4)
      ET_CHECK(0, "stage %d, prescale %d, predivide %g, element %d: averaged gradient %.9g, "
               "want %.9g", stage, prescale, f, i, got[i], want);
  }
  ET_CHECK(bad == 0, "stage %d, prescale %d, predivide %g: %d of %d elements differ", stage,
           prescale, f, bad, N_ELEMS);
}

static void check_overflow(int stage) {
  float got[N_ELEMS];
  const float big = 40000.0f; /* x 2 ranks > 65504 */
  int skipped = run(stage, 1, 0, 1.0, big, got);
  ET_CHECK(skipped, "stage %d: the undivided fp16 sum of %d x %g did not overflow", stage,
           et_world, big);
  for (int prescale = 0; prescale <= 1; prescale++) {
    double f = prescale ? 1.0 : (double)et_world;
    skipped = run(stage, 1, prescale, f, big, got);
    ET_CHECK(!skipped, "stage %d, prescale %d, predivide %g: the divided sum overflowed",
             stage, prescale, f);
    float want = reference(stage, et_world, 1, prescale, f, big, 0);
    for (int i = 0; i < N_ELEMS; i++)
      if (memcmp(&got[i], &want, 4) != 0) {
        ET_CHECK(0, "stage %d, prescale %d, predivide %g, element %d: %.9g, want %.9g",
                 stage, prescale, f, i, got[i], want);
        break;
      }
  }
}

static void check_refused(void) {
  static const char *others[] = {
      "\"zinc\": {\"compression\": {\"delayed_averaging\": {\"delay\": 1}}}",
      "\"zinc\": {\"compression\": {\"gradient_codec\": \"powersgd\"}}",
      "\"zinc\": {\"compression\": {\"gradient_codec\": \"dgc\"}}",
      "\"optimizer\": {\"type\": \"OneBitAdam\", \"params\": {\"lr\": 0.001}}"};
  for (int k = 0; k < 4; k++)
    for (int prescale = 0; prescale <= 1; prescale++) {
      char json[512];
      snprintf(json, sizeof json,
               "{\"train_micro_batch_size_per_gpu\": 1, %s, %s,"
               " \"zero_optimization\": {\"stage\": 0}}",
               prescale ? "\"prescale_gradients\": true" : "\"gradient_predivide_factor\": 2",
               others[k]);
      zinc_config *cfg = NULL;
      zinc_status st = zinc_config_parse(json, &cfg);
      ET_CHECK(st == ZINC_ERR_CONFIG && strstr(zinc_last_error(), prescale
                                                   ? "prescale_gradients"
                                                   : "gradient_predivide_factor"),
               "%s with %s: %s (%s), expected a config error naming the key",
               prescale ? "prescale_gradients" : "gradient_predivide_factor", others[k],
               zinc_status_name(st), st == ZINC_OK ? "accepted" : zinc_last_error());
      zinc_config_free(cfg);
    }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  for (int stage = 0; stage <= 3; stage++) {
    check_exact(stage, 0, 1.0);
    check_exact(stage, 0, 3.0);
    check_exact(stage, 1, 1.0);
    if (et_world > 1) {
      check_overflow(stage);
      check_compressed(stage);
    }
  }
  check_refused();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "gradient pre-division tests FAILED\n"
               : "gradient pre-division tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
