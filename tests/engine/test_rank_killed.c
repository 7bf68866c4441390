/*
 * test_rank_killed.c — a rank killed in the middle of a step (SIGKILL) must
 * not hang the others: every survivor's next collective fails with
 * ZINC_ERR_COMM within zinc.comm_timeout_s (here 4 s), and the message
 * names the missing rank. Run by rank_killed.sh under
 * `mpirun --enable-recovery`, so that mpirun lets the survivors report
 * instead of killing them itself.
 * usage: test_rank_killed STAGE (3 uses overlap_comm: asynchronous gathers)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "zinc.h"

int main(int argc, char **argv) {
  int stage = argc > 1 ? atoi(argv[1]) : 2;
  char json[512];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d,"
           " \"overlap_comm\": %s, \"stage3_param_persistence_threshold\": 0},"
           " \"zinc\": {\"comm_timeout_s\": 4}}", stage, stage == 3 ? "true" : "false");
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    return 2;
  zinc_options o = ZINC_OPTIONS_INIT;
  o.device = ZINC_DEVICE_CPU;
  o.threads = 1;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &o, &e) != ZINC_OK)
    return 2;
  zinc_config_free(cfg);
  zinc_module *m[2] = {zinc_module_add(e, "a"), zinc_module_add(e, "b")};
  int64_t shape[1] = {1000};
  zinc_param *w[2] = {zinc_param_add(e, m[0], "w", ZINC_F32, 1, shape),
                      zinc_param_add(e, m[1], "w", ZINC_F32, 1, shape)};
  if (zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return 2;
  int rank = zinc_rank(e), victim = zinc_world_size(e) - 1;
  double t0 = 0;
  zinc_status st = ZINC_OK;
  for (int step = 0; step < 4 && st == ZINC_OK; step++) {
    for (int k = 0; k < 2 && st == ZINC_OK; k++) {
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    for (int k = 1; k >= 0 && st == ZINC_OK; k--) {
      if (step == 2 && k == 0) {
        if (rank == victim)
          raise(SIGKILL); /* dies in the middle of the backward pass */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
      }
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK) {
        float *g = zinc_param_grad(w[k]);
        g[0] += 1.0f;
        st = zinc_module_grads_ready(e, m[k]);
      }
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    if (st == ZINC_OK)
      st = zinc_backward_end(e);
    if (st == ZINC_OK)
      st = zinc_step(e, NULL);
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double waited = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0;
  printf("survivor %d: %s after %.1f s: %s\n", rank, zinc_status_name(st), waited,
         zinc_last_error());
  fflush(stdout);
  /* the comm is broken: leave without the collective destroy */
  _exit(st == ZINC_ERR_COMM ? 0 : 1);
}
