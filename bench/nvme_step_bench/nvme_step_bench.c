/*
 * nvme_step_bench — an optimizer step over NVMe-resident optimizer state
 * (ZeRO-Infinity): the step's time beside the time the disk needs just to
 * read and write the same bytes through the same swap path, measured in
 * the same run. overlap efficiency = I/O time / step time: 1.0 means the
 * Adam arithmetic is entirely hidden under the I/O (target >= 0.85).
 *
 *   nvme_step_bench [--state-gib 4] [--dir DIR] [--sub-group ELEMS]
 *                   [--buffers N] [--steps 2] [--block-mib 1] [--queue-depth 8]
 * One rank (run it directly or under mpirun -n 1). The state is fp32
 * master + exp_avg + exp_avg_sq (12 bytes per parameter); parameters bf16.
 * --bf16-states keeps the master and moments in bf16 (the bf16 section's
 * bf16_master_weights_and_grads and bf16_optimizer_states): the same
 * model (the parameter count --state-gib gives at 12 bytes), 6 bytes per
 * parameter to read and write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "config/config.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "zinc.h"
#include "bench/common/disk_rate.h"
#include "kernels/zinc_math.h"

static void die(const char *what) {
  fprintf(stderr, "nvme_step_bench: %s: %s\n", what, zinc_last_error());
  exit(1);
}

static zinc_status init_fn(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.01f * (float)((i * 7) % 13 - 6);
  return ZINC_OK;
}

int main(int argc, char **argv) {
  double gib = 4;
  const char *dir = "/tmp/zinc_nvme_bench";
  int64_t sub_group = 100000000;
  int buffers = 4, steps = 2, block_mib = 1, qd = 8, bf16_states = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(argv[i], "--state-gib")) gib = atof(v), i++;
    else if (!strcmp(argv[i], "--dir")) dir = v, i++;
    else if (!strcmp(argv[i], "--sub-group")) sub_group = atoll(v), i++;
    else if (!strcmp(argv[i], "--buffers")) buffers = atoi(v), i++;
    else if (!strcmp(argv[i], "--steps")) steps = atoi(v), i++;
    else if (!strcmp(argv[i], "--block-mib")) block_mib = atoi(v), i++;
    else if (!strcmp(argv[i], "--queue-depth")) qd = atoi(v), i++;
    else if (!strcmp(argv[i], "--bf16-states")) bf16_states = 1;
    else {
      fprintf(stderr, "usage: %s [--state-gib G] [--dir DIR] [--sub-group N] [--buffers N] "
              "[--steps N] [--block-mib M] [--queue-depth Q] [--bf16-states]\n", argv[0]);
      return 2;
    }
  }
  mkdir(dir, 0755);
  int64_t params = (int64_t)(gib * (1ull << 30) / 12) / (1 << 20) * (1 << 20);
  int64_t per_module = 64ll << 20;
  int modules = (int)((params + per_module - 1) / per_module);
  char json[2048];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true%s},"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}},"
           " \"zero_optimization\": {\"stage\": 2, \"sub_group_size\": %lld,"
           " \"reduce_bucket_size\": 50000000,"
           " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\","
           " \"buffer_count\": %d}},"
           " \"aio\": {\"block_size\": %d, \"queue_depth\": %d, \"intra_op_parallelism\": 2}}",
           bf16_states ? ", \"bf16_master_weights_and_grads\": true, "
                         "\"bf16_optimizer_states\": true" : "",
           (long long)sub_group, dir, buffers, block_mib << 20, qd);
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    die("config");
  double read_bw = 0, write_bw = 0;
  uint64_t state_bytes = (uint64_t)params * (bf16_states ? 6 : 12);
  printf("nvme_step_bench: %.2f G parameters (bf16), %s optimizer state %.2f GiB on %s, "
         "sub-groups of %lld, %d buffers, aio %d MiB x %d\n", (double)params / 1e9,
         bf16_states ? "bf16" : "fp32",
         (double)state_bytes / (1ull << 30), dir, (long long)sub_group, buffers, block_mib, qd);
  uint64_t rate_bytes = state_bytes < (2ull << 30) ? state_bytes : (2ull << 30);
  /* 256 MiB regions, like large sub-groups; two in flight */
  if (bench_disk_rate(&cfg->s, dir, rate_bytes, 256ull << 20, 2, &read_bw, &write_bw) != ZINC_OK)
    die("disk rate");
  printf("disk through the swap path (no compute): read %.2f GB/s, write %.2f GB/s\n",
         read_bw / 1e9, write_bw / 1e9);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    die("engine");
  zinc_config_free(cfg);
  zinc_module **mods = calloc((size_t)modules, sizeof *mods);
  zinc_param **pars = calloc((size_t)modules, sizeof *pars);
  for (int i = 0; i < modules; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d", i);
    mods[i] = zinc_module_add(e, name);
    int64_t n = params - (int64_t)i * per_module < per_module ? params - (int64_t)i * per_module
                                                              : per_module;
    int64_t shape[2] = {n / 1024, 1024};
    pars[i] = zinc_param_add(e, mods[i], "weight", ZINC_BF16, 2, shape);
  }
  double t0 = zinc_now();
  if (zinc_engine_build(e, init_fn, NULL) != ZINC_OK)
    die("build");
  printf("build (writes the state once): %.1f s\n", zinc_now() - t0);
  double best = 1e30;
  for (int s = 0; s < steps; s++) {
    for (int i = 0; i < modules; i++) {
      zinc_module_fetch(e, mods[i]);
      zinc_module_release(e, mods[i]);
    }
    for (int i = modules - 1; i >= 0; i--) {
      zinc_module_fetch(e, mods[i]);
      uint16_t *g = zinc_param_grad(pars[i]);
      int64_t n = zinc_param_numel(pars[i]);
      for (int64_t j = 0; j < n; j++)
        g[j] = zinc_f32_to_bf16(1e-3f * (float)((j * 7) % 13 - 6));
      zinc_module_grads_ready(e, mods[i]);
      zinc_module_release(e, mods[i]);
    }
    if (zinc_backward_end(e) != ZINC_OK)
      die("backward_end");
    t0 = zinc_now();
    if (zinc_step(e, NULL) != ZINC_OK)
      die("step");
    double dt = zinc_now() - t0;
    printf("step %d: %.2f s\n", s + 1, dt);
    if (dt < best)
      best = dt;
  }
  double io = (double)state_bytes / read_bw + (double)state_bytes / write_bw;
  double eff = io / best;
  printf("\noptimizer step %.2f s; reading and writing its %.2f GiB alone takes %.2f s "
         "(read %.2f + write %.2f): overlap efficiency %.2f (target >= 0.85) %s\n", best,
         (double)state_bytes / (1ull << 30), io, (double)state_bytes / read_bw,
         (double)state_bytes / write_bw, eff, eff >= 0.85 ? "PASS" : "FAIL");
  zinc_engine_destroy(e);
  free(mods);
  free(pars);
  return 0;
}
