/*
 * test_stage3_max_live.c — stage 3 holds at most
 * stage3_max_live_parameters gathered elements (the profiler's peak of
 * device buffers beyond the gradient ring), and prefetch really runs ahead
 * when the limit allows it; under mpirun.
 */
#include "engine_test.h"

static int64_t gathered_peak_bytes(int64_t max_live, int64_t prefetch) {
  et_run r = et_defaults();
  r.stage = 3;
  r.max_live = max_live;
  r.prefetch = prefetch;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t fixed = st.current[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS]; /* the gradient ring */
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < 4; s++) {
    et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)s * N + me) * r.micro, r.micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  ET_OK(zinc_memory_stats(e, &st));
  et_model_free(&m);
  zinc_engine_destroy(e);
  return (int64_t)(st.peak[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] - fixed);
}

static void test_max_live(void) {
  /* the largest module ("mid") gathers 1073 + 29 elements, padded to at most
   * 1152 (4 ranks): a limit of 1200 allows one module at a time */
  int64_t bounded = gathered_peak_bytes(1200, 5000);
  ET_CHECK(bounded <= 1200 * 4, "stage 3 gathered %lld bytes at peak, limit 1200 elements",
           (long long)bounded);
  int64_t free_run = gathered_peak_bytes(1000000, 5000);
  ET_CHECK(free_run > 1200 * 4, "prefetch did not run ahead: peak %lld bytes",
           (long long)free_run);
  if (et_rank == 0)
    printf("stage 3 gathered peak: %lld bytes with max_live 1200 elements, %lld without\n",
           (long long)bounded, (long long)free_run);
}

int main(void) {
  test_max_live();
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("stage-3 live-parameter checks passed at %d ranks\n", et_world);
  return 0;
}
