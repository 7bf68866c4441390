/*
 * test_model_state_bytes.c — the memory the engine accounts for model
 * states (parameters, gradients, optimizer state; every location) is within
 * 2% of the ZeRO formula at stages 0-3, f32 and bf16, offload none and
 * (stages 1-3) cpu, under mpirun. The formula is computed here from the
 * shapes the test registers and the ZeRO paper's per-stage table (an
 * independent count), and the engine's own figure
 * (zinc_mem_stats.theoretical_model_states) must agree with it too. The model (four blocks of ~80k elements) is large enough that
 * alignment padding is negligible; test_profiler.c checks the exact
 * figures on the tiny model.
 */
#include "engine/engine_test.h"

static zinc_status zero_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.001f * (float)(i % 17);
  return ZINC_OK;
}

static void test_memory(int stage, zinc_dtype dt, const char *offload) {
  et_run r = et_defaults();
  r.stage = stage;
  r.dtype = dt;
  r.offload = offload;
  r.reduce_bucket = 200000;
  zinc_engine *e = et_create(&r, NULL);
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof name, "block%d", k);
    zinc_module *mod = zinc_module_add(e, name);
    int64_t w[2] = {311, 257 + k}, b[1] = {257 + k};
    ET_CHECK(zinc_param_add(e, mod, "weight", dt, 2, w) != NULL, "%s", zinc_last_error());
    ET_CHECK(zinc_param_add(e, mod, "bias", dt, 1, b) != NULL, "%s", zinc_last_error());
  }
  ET_OK(zinc_engine_build(e, zero_init, NULL));
  /* the formula, from the shapes above: psi elements, N data-parallel ranks;
   * parameters in their dtype (1/N at stage 3), gradients in their dtype
   * (stages 0-1) or an fp32 partition (stages 2-3), Adam's m and v in fp32
   * plus an fp32 master unless an all-f32 model on the device updates its
   * parameters in place (1/N from stage 1) */
  double psi = 0, n = et_world, es = (double)zinc_dtype_size(dt);
  for (int k = 0; k < 4; k++)
    psi += 311.0 * (257 + k) + (257 + k);
  int in_place = dt == ZINC_F32 && !strcmp(offload, "none");
  double params = stage == 3 ? es * psi / n : es * psi;
  double grads = stage <= 1 ? es * psi : 4 * psi / n;
  double optim = (in_place ? 8 : 12) * psi / (stage == 0 ? 1 : n);
  double formula = params + grads + optim;
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t measured = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    measured += st.current[l][ZINC_MEM_PARAMS] + st.current[l][ZINC_MEM_GRADS] +
                st.current[l][ZINC_MEM_OPTIM];
  double diff = ((double)measured - formula) / formula;
  ET_CHECK(fabs(diff) <= 0.02, "stage %d %s offload %s: model states %llu bytes, formula %.0f "
           "(%.2f%%)", stage, zinc_dtype_name(dt), offload, (unsigned long long)measured,
           formula, 100 * diff);
  double own = ((double)st.theoretical_model_states - formula) / formula;
  ET_CHECK(fabs(own) <= 0.02, "stage %d %s offload %s: the engine's formula says %llu bytes, "
           "the test's %.0f (%.2f%%)", stage, zinc_dtype_name(dt), offload,
           (unsigned long long)st.theoretical_model_states, formula, 100 * own);
  if (et_rank == 0)
    printf("memory stage %d %-4s offload %-4s %d ranks: measured %9llu formula %9llu "
           "(%+.3f%%)\n", stage, zinc_dtype_name(dt), offload, et_world, (unsigned long long)measured,
           (unsigned long long)formula, 100 * diff);
  zinc_engine_destroy(e);
}

int main(void) {
  for (int stage = 0; stage <= 3; stage++) {
    test_memory(stage, ZINC_F32, "none");
    test_memory(stage, ZINC_BF16, "none");
    if (stage > 0) {
      test_memory(stage, ZINC_F32, "cpu");
      test_memory(stage, ZINC_BF16, "cpu");
    }
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("model-state bytes checks passed at %d ranks\n", et_world);
  return 0;
}
