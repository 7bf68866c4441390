/*
 * test_activations.c — activation checkpoints under mpirun, with every rank
 * in one model-parallel group (model_parallel_size = world size):
 *  - partitioned: each rank stores exactly its slice (profiler bytes under
 *    activations), slices of sizes not divisible by mp; restore returns the
 *    exact bytes on every rank (also asynchronously);
 *  - cpu_checkpointing: nothing on the device, the slices in host memory;
 *  - contiguous: one allocation for all checkpoints, ids beyond
 *    number_checkpoints and growing sizes refused;
 *  - model-parallel all-reduce sums in rank order;
 *  - a restore refused on one rank only (a wrong size) fails on every rank
 *    within seconds, not after the comm timeout, and the engine goes on.
 */
#include <mpi.h>

#include "engine_test.h"

static zinc_engine *make(int cpu, int contiguous, int nckpt) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"activation_checkpointing\": {"
           "\"partition_activations\": true, \"cpu_checkpointing\": %s,"
           " \"contiguous_memory_optimization\": %s, \"number_checkpoints\": %d,"
           " \"synchronize_checkpoint_boundary\": true, \"profile\": true},"
           " \"zinc\": {\"comm_timeout_s\": 60}}",
           cpu ? "true" : "false", contiguous ? "true" : "false", nckpt);
  zinc_config *cfg;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = et_world;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "m");
  int64_t shape[1] = {5};
  ET_CHECK(zinc_param_add(e, m, "p", ZINC_F32, 1, shape) != NULL, "param");
  ET_OK(zinc_engine_build(e, NULL, NULL));
  return e;
}

static void fill(unsigned char *buf, size_t n, int id) {
  for (size_t i = 0; i < n; i++)
    buf[i] = (unsigned char)(i * 7 + (size_t)id * 13 + 1);
}

static void test_partitioned(int cpu) {
  zinc_engine *e = make(cpu, 0, 0);
  int mp = zinc_mp_size(e), me = zinc_mp_rank(e);
  const size_t sizes[] = {1, 7, 1001, 4096 + 3, 65537};
  uint64_t expect_stored = 0;
  for (int k = 0; k < 5; k++) {
    size_t n = sizes[k], piece = (n + (size_t)mp - 1) / (size_t)mp;
    size_t a = piece * (size_t)me < n ? piece * (size_t)me : n;
    size_t b = a + piece < n ? a + piece : n;
    expect_stored += b > a ? b - a : 1; /* an empty slice still takes a byte */
    unsigned char *buf = malloc(n);
    fill(buf, n, k);
    ET_OK(zinc_activation_save(e, k, buf, n));
    free(buf);
  }
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  int loc = cpu ? ZINC_LOC_HOST : ZINC_LOC_DEVICE;
  ET_CHECK(st.current[loc][ZINC_MEM_ACTIVATIONS] == expect_stored,
           "rank %d of %d stores %llu activation bytes, expected its slices: %llu", me, mp,
           (unsigned long long)st.current[loc][ZINC_MEM_ACTIVATIONS],
           (unsigned long long)expect_stored);
  if (cpu)
    ET_CHECK(st.current[ZINC_LOC_DEVICE][ZINC_MEM_ACTIVATIONS] == 0,
             "cpu_checkpointing left %llu bytes on the device",
             (unsigned long long)st.current[ZINC_LOC_DEVICE][ZINC_MEM_ACTIVATIONS]);
  for (int k = 4; k >= 0; k--) {
    size_t n = sizes[k];
    unsigned char *want = malloc(n), *got = malloc(n);
    fill(want, n, k);
    memset(got, 0xEE, n);
    if (k % 2) {
      ET_OK(zinc_activation_restore_start(e, k, got, n));
      ET_OK(zinc_activation_wait(e, k));
    } else {
      ET_OK(zinc_activation_restore(e, k, got, n));
    }
    size_t bad = 0;
    while (bad < n && got[bad] == want[bad])
      bad++;
    ET_CHECK(bad == n, "checkpoint %d (%zu bytes) restored wrong from byte %zu", k, n, bad);
    ET_OK(zinc_activation_free(e, k));
    free(want);
    free(got);
  }
  ET_OK(zinc_memory_stats(e, &st));
  ET_CHECK(st.current[loc][ZINC_MEM_ACTIVATIONS] == 0, "freed checkpoints still hold bytes");
  zinc_engine_destroy(e);
}

static void test_contiguous(void) {
  zinc_engine *e = make(1, 1, 4);
  const size_t n = 3001;
  unsigned char *buf = malloc(n), *got = malloc(n);
  for (int round = 0; round < 3; round++)
    for (int k = 0; k < 4; k++) {
      fill(buf, n, k + round);
      ET_OK(zinc_activation_save(e, k, buf, n));
    }
  zinc_activation_stats as = ZINC_ACTIVATION_STATS_INIT;
  ET_OK(zinc_activation_stats_get(e, &as));
  ET_CHECK(as.allocations == 1, "contiguous mode made %lld allocations", (long long)as.allocations);
  ET_CHECK(zinc_activation_save(e, 4, buf, n) == ZINC_ERR_INVALID, "id past number_checkpoints");
  unsigned char *big = calloc(n * 2, 1);
  ET_CHECK(zinc_activation_save(e, 0, big, n * 2) == ZINC_ERR_INVALID, "a larger save fit");
  free(big);
  ET_OK(zinc_activation_save(e, 0, buf, n)); /* replaced after the refused one */
  fill(buf, n, 3 + 2);
  ET_OK(zinc_activation_restore(e, 3, got, n));
  ET_CHECK(test_compare_bits("contiguous checkpoint 3", got, buf, n, ZINC_DT_U8) == 0,
           "contiguous checkpoint 3 restored wrong");
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  ET_CHECK(st.current[ZINC_LOC_DEVICE][ZINC_MEM_ACTIVATIONS] == 0, "device bytes with cpu ckpt");
  free(buf);
  free(got);
  zinc_engine_destroy(e);
}

static void test_mp_allreduce(void) {
  zinc_engine *e = make(0, 0, 0);
  float v[3] = {(float)et_rank + 1, 0.1f * (float)et_rank, -1};
  ET_OK(zinc_mp_allreduce_sum(e, v, 3));
  float want0 = 0, want1 = 0;
  for (int r = 0; r < et_world; r++) {
    want0 += (float)r + 1;
    want1 += 0.1f * (float)r;
  }
  ET_CHECK(v[0] == want0 && v[1] == want1 && v[2] == -(float)et_world,
           "mp all-reduce gave %g %g %g", v[0], v[1], v[2]);
  zinc_engine_destroy(e);
}

/* The last rank alone asks for the wrong size: before the restore agreed,
 * it returned at once and its peers sat in the all-gather until the comm
 * timeout (60 s here). */
static void test_restore_refused_on_one_rank(void) {
  if (et_world < 2)
    return;
  zinc_engine *e = make(0, 0, 0);
  const size_t n = 1001;
  unsigned char *buf = malloc(n), *got = malloc(n + 1);
  fill(buf, n, 5);
  ET_OK(zinc_activation_save(e, 0, buf, n));
  int odd = et_rank == et_world - 1;
  double t0 = MPI_Wtime();
  zinc_status st = zinc_activation_restore(e, 0, got, odd ? n + 1 : n);
  double took = MPI_Wtime() - t0;
  ET_CHECK(st == ZINC_ERR_INVALID, "restore with a wrong size on rank %d: status %d, want "
           "INVALID on every rank", et_world - 1, (int)st);
  ET_CHECK(took < 10, "the refusal took %.1f s (the comm timeout is 60 s)", took);
  char want[32];
  snprintf(want, sizeof want, "rank %d", et_world - 1);
  ET_CHECK(odd || strstr(zinc_last_error(), want), "peer's message does not name %s: %s", want,
           zinc_last_error());
  ET_OK(zinc_activation_restore(e, 0, got, n)); /* refused, not stopped */
  ET_CHECK(memcmp(got, buf, n) == 0, "restore after the refusal gave wrong bytes");
  free(buf);
  free(got);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  test_partitioned(0);
  test_partitioned(1);
  test_contiguous();
  test_mp_allreduce();
  test_restore_refused_on_one_rank();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "activation tests FAILED\n" : "activation tests passed at mp %d\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
