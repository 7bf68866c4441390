/*
 * test_model_state_bytes.c — the memory the engine accounts for model
 * states (parameters, gradients, optimizer state; every location) is within
 * 2% of the ZeRO formula (zinc_mem_stats.theoretical_model_states) at
 * stages 0-3, f32 and bf16, offload none and (stages 1-3) cpu, under
 * mpirun. The model (four blocks of ~80k elements) is large enough that
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
  zinc_mem_stats st;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t measured = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    measured += st.current[l][ZINC_MEM_PARAMS] + st.current[l][ZINC_MEM_GRADS] +
                st.current[l][ZINC_MEM_OPTIM];
  double diff = ((double)measured - (double)st.theoretical_model_states) /
                (double)st.theoretical_model_states;
  ET_CHECK(fabs(diff) <= 0.02, "stage %d %s offload %s: model states %llu bytes, formula %llu "
           "(%.2f%%)", stage, zinc_dtype_name(dt), offload, (unsigned long long)measured,
           (unsigned long long)st.theoretical_model_states, 100 * diff);
  if (et_rank == 0)
    printf("memory stage %d %-4s offload %-4s %d ranks: measured %9llu formula %9llu "
           "(%+.3f%%)\n", stage, zinc_dtype_name(dt), offload, et_world, (unsigned long long)measured,
           (unsigned long long)st.theoretical_model_states, 100 * diff);
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
