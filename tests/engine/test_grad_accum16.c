/*
 * test_grad_accum16.c — 16-bit gradients accumulated over micro-batches
 * are summed in f32 at every stage. Under mpirun (1 or 2 ranks), one bf16
 * parameter, gradient_accumulation_steps 4: micro-batch 0 writes 1.0, the
 * three others 2^-9 each — below half a bf16 ulp of 1.0, so a sum kept in
 * bf16 stays 1.0 (each small term is rounded away) while the true sum is
 * 1 + 3 * 2^-9. The reduced, averaged gradient (ZINC_STATE_GRAD, read
 * before the step) must be that sum / 4:
 *  - stages 2 and 3 (the f32 partition): exactly;
 *  - stages 0 and 1 (the f32 sum rounded to bf16 once, before the
 *    reduction): within one bf16 rounding (2^-8 relative), which the old
 *    bf16 accumulation (0.25, off by 5.8e-3 relative) is not.
 * The reference is this arithmetic, written here.
 */
#include <math.h>
#include <mpi.h>

#include "engine_test.h"

enum { N_ELEMS = 64, GAS = 4 };

static zinc_status zero_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.0f;
  return ZINC_OK;
}

static void run(int stage) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
           " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}},"
           " \"zero_allow_untested_optimizer\": true, \"bf16\": {\"enabled\": true},"
           " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0}}",
           GAS, stage);
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
  zinc_param *p = zinc_param_add(e, m, "w", ZINC_BF16, 1, shape);
  ET_CHECK(m && p, "registering the parameter failed: %s", zinc_last_error());
  ET_OK(zinc_engine_build(e, zero_init, NULL));
  float got[N_ELEMS];
  for (int k = 0; k < GAS; k++) {
    ET_OK(zinc_module_fetch(e, m));
    uint16_t *g = zinc_param_grad(p);
    float v = k == 0 ? 1.0f : ldexpf(1.0f, -9);
    for (int i = 0; i < N_ELEMS; i++) /* the trainer accumulates (+=) */
      g[i] = zinc_f32_to_bf16(zinc_bf16_to_f32(g[i]) + v);
    ET_OK(zinc_module_grads_ready(e, m));
    ET_OK(zinc_module_release(e, m));
    ET_OK(zinc_backward_end(e));
    if (k == GAS - 1)
      ET_OK(zinc_param_get_full(e, p, ZINC_STATE_GRAD, got));
    ET_OK(zinc_step(e, NULL));
  }
  double want = (1.0 + 3 * ldexp(1.0, -9)) / GAS;
  double tol = stage >= 2 ? 0.0 : want * ldexp(1.0, -8);
  for (int i = 0; i < N_ELEMS; i++)
    ET_CHECK(fabs(got[i] - want) <= tol, "stage %d, element %d: averaged gradient %.9g, want "
             "%.9g within %.3g (a bf16 sum gives 0.25)", stage, i, got[i], want, tol);
  if (et_rank == 0)
    printf("stage %d: averaged gradient %.9g (exact %.9g)\n", stage, got[0], want);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  for (int stage = 0; stage <= 3; stage++)
    run(stage);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "16-bit accumulation tests FAILED\n" : "16-bit accumulation tests passed at "
           "%d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
