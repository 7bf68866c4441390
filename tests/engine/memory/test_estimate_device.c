/*
 * test_estimate_device.c — the estimator sizes for the device it is told
 * (zinc_estimate_model_on, tools/zinc-mem --device): on cuda it counts the
 * two pinned staging slots of the offloaded optimizer step and delayed
 * averaging's pinned gradient staging, host buffers the cpu device's
 * build does not allocate; every other figure is the same on both.
 *
 * One parameter of P elements, bf16, over N ranks: the segment is padded
 * to a multiple of N x 32 elements (the layout's alignment), so a rank's
 * shard is E = round_up(P, N x 32) / N elements. The staging sub-group is
 * g = min(sub_group_size, E, 16 Mi) elements and a slot holds
 *   a gradient half of 4 g bytes  where the gradients stay on the device
 *                                 (stages 0-1),
 *   a parameter half of 4 g bytes where the parameters stay on the device
 *                                 (all but stage 3 with offload_param),
 * two slots: cuda - cpu = 2 (grad + param) host buffer bytes with
 * offload_optimizer cpu, 0 without offload. With delayed averaging (stage
 * 0, N >= 2, delay 2) cuda adds the trained gradients' bytes,
 * round_up(P, N x 32) x 2. The cpu estimate without ZINC_OFFLOAD_STAGING
 * counts no staging. PowerSGD, ZeroOneAdam and OneBitLamb, which the cuda
 * build refuses, are ZINC_ERR_UNSUPPORTED for cuda and estimated for cpu.
 */
#include <mpi.h>

#include "engine/engine_test.h"
#include "engine/memory/estimate.h"

enum { P = 10000, ALIGN = 32 };

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static void estimate(const char *json, zinc_est_device dev, int ranks, zinc_estimate *out) {
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_est_param p = {.module = "block", .name = "weight", .dtype = ZINC_BF16, .ndim = 1,
                      .shape = {P}};
  ET_OK(zinc_estimate_model_on(&cfg->s, dev, ranks, 0, &p, 1, out));
  zinc_config_free(cfg);
}

/* cuda - cpu for one configuration, every location and category; want: the
 * host buffers' difference, every other one 0. */
static void compare(const char *json, int ranks, uint64_t want, const char *what) {
  zinc_estimate cpu, cuda;
  estimate(json, ZINC_EST_DEVICE_CPU, ranks, &cpu);
  estimate(json, ZINC_EST_DEVICE_CUDA, ranks, &cuda);
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++) {
      uint64_t w = l == ZINC_LOC_HOST && c == ZINC_MEM_BUFFERS ? want : 0;
      int64_t got = (int64_t)(cuda.bytes[l][c] - cpu.bytes[l][c]);
      ET_CHECK(got == (int64_t)w, "%s, %d ranks: %s/%s cuda - cpu %lld bytes, want %llu", what,
               ranks, zinc_mem_location_name(l), zinc_mem_category_name(c), (long long)got,
               (unsigned long long)w);
    }
  ET_CHECK(cuda.peak[ZINC_LOC_HOST] - cpu.peak[ZINC_LOC_HOST] == want &&
               cuda.peak[ZINC_LOC_DEVICE] == cpu.peak[ZINC_LOC_DEVICE],
           "%s, %d ranks: peaks differ by other than the staging", what, ranks);
  if (et_failures == 0)
    printf("%s, %d ranks: cuda counts %llu more host buffer bytes\n", what, ranks,
           (unsigned long long)want);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  if (et_rank == 0) { /* the estimate is local: one rank computes it */
    static const int64_t sub_groups[2] = {1000, 1000000000};
    for (int ranks = 1; ranks <= 4; ranks *= 2) {
      int64_t E = round_up(P, (int64_t)ranks * ALIGN) / ranks;
      for (int stage = 1; stage <= 3; stage++)
        for (int k = 0; k < 2; k++)
          for (int op = 0; op < (stage == 3 ? 2 : 1); op++) {
            int64_t g = sub_groups[k] < E ? sub_groups[k] : E;
            uint64_t grad = stage <= 1 ? 4 * (uint64_t)g : 0;
            uint64_t param = op ? 0 : 4 * (uint64_t)g;
            char json[768], what[160];
            snprintf(json, sizeof json,
                     "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                     " \"zero_optimization\": {\"stage\": %d, \"sub_group_size\": %lld,"
                     " \"offload_optimizer\": {\"device\": \"cpu\"}%s}}",
                     stage, (long long)sub_groups[k],
                     op ? ", \"offload_param\": {\"device\": \"cpu\"}" : "");
            snprintf(what, sizeof what, "stage %d offload cpu%s, sub_group_size %lld", stage,
                     op ? " + offload_param cpu" : "", (long long)sub_groups[k]);
            compare(json, ranks, 2 * (grad + param), what);
            if (op)
              continue;
            snprintf(json, sizeof json,
                     "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                     " \"zero_optimization\": {\"stage\": %d, \"sub_group_size\": %lld}}",
                     stage, (long long)sub_groups[k]);
            snprintf(what, sizeof what, "stage %d no offload", stage);
            compare(json, ranks, 0, what);
          }
      if (ranks >= 2)
        compare("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                " \"zinc\": {\"compression\": {\"delayed_averaging\": {\"delay\": 2}}}}",
                ranks, (uint64_t)round_up(P, (int64_t)ranks * ALIGN) * 2,
                "stage 0 delayed averaging");
    }
    /* what the cuda build refuses is refused by the cuda estimate */
    static const char *cpu_only[] = {
        "\"zinc\": {\"compression\": {\"gradient_codec\": \"powersgd\"}}",
        "\"optimizer\": {\"type\": \"ZeroOneAdam\", \"params\": {\"lr\": 0.001}}",
        "\"optimizer\": {\"type\": \"OneBitLamb\", \"params\": {\"lr\": 0.001}}"};
    for (int i = 0; i < 3; i++) {
      char json[512];
      snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, %s}", cpu_only[i]);
      zinc_config *cfg = NULL;
      ET_OK(zinc_config_parse(json, &cfg));
      zinc_est_param p = {.module = "block", .name = "weight", .dtype = ZINC_F32, .ndim = 1,
                          .shape = {P}};
      zinc_estimate est;
      ET_OK(zinc_estimate_model_on(&cfg->s, ZINC_EST_DEVICE_CPU, 2, 0, &p, 1, &est));
      zinc_status st = zinc_estimate_model_on(&cfg->s, ZINC_EST_DEVICE_CUDA, 2, 0, &p, 1, &est);
      ET_CHECK(st == ZINC_ERR_UNSUPPORTED && strstr(zinc_last_error(), "cuda"),
               "%s on cuda: %s (%s), want ZINC_ERR_UNSUPPORTED", cpu_only[i],
               zinc_status_name(st), zinc_last_error());
      zinc_config_free(cfg);
    }
  }
  int bad = et_failures;
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "estimate device tests FAILED\n" : "estimate device tests passed\n");
  MPI_Finalize();
  return bad ? 1 : 0;
}
