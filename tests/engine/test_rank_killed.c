/*
 * test_rank_killed.c — a rank killed (SIGKILL) or frozen (SIGSTOP) in the
 * middle of a step must not hang the others: every survivor's next
 * collective fails with ZINC_ERR_COMM within zinc.comm_timeout_s (here 4 s)
 * naming the missing rank; a later call still names it; then
 * zinc_engine_destroy returns promptly and the process exits with its own
 * status (zinc's exit handler, which skips MPI_Finalize after a comm
 * failure). Run by rank_killed.sh under `mpirun --enable-recovery`, so
 * that mpirun lets the survivors report instead of killing them itself;
 * the script checks the lines printed here.
 *
 * usage: test_rank_killed STAGE OVERLAP SIGNAL
 *   STAGE 1..3, OVERLAP 0|1 (overlap_comm: asynchronous reductions and
 *   gathers), SIGNAL kill|stop. With OVERLAP the survivors "compute" for
 *   5 s (longer than the timeout) after the kill, so that the overlapped
 *   reduction fails in the background and the engine learns it from the
 *   comm's `test`, not `wait`: the request it then holds must not be
 *   touched again (destroy under ASan proves it).
 *
 * Printed by each survivor:
 *   survivor R: STATUS after T s: MESSAGE        (the first failure)
 *   survivor R: later call: STATUS: MESSAGE      (the engine refuses on)
 *   survivor R: destroy returned after T s       (since the kill)
 *   survivor R: exited after T s                 (atexit, after zinc's exit handler)
 * The frozen victim prints "victim R: pid P stopping" first, so that the
 * script can kill it once the survivors are done.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zinc.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int my_rank = -1;
static double kill_time = 0;

/* Registered before the engine creates its comm, so it runs after the
 * comm's own atexit handler (which leaves MPI unfinalised after a comm
 * failure, comm.h): the line proves exit finished. */
static void report_exit(void) {
  if (my_rank >= 0 && kill_time > 0) {
    printf("survivor %d: exited after %.1f s\n", my_rank, now_s() - kill_time);
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  int stage = argc > 1 ? atoi(argv[1]) : 2;
  int overlap = argc > 2 ? atoi(argv[2]) : 0;
  int freeze = argc > 3 && !strcmp(argv[3], "stop");
  atexit(report_exit);
  char json[512];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d,"
           " \"overlap_comm\": %s, \"reduce_bucket_size\": 600,"
           " \"stage3_param_persistence_threshold\": 0},"
           " \"zinc\": {\"comm_timeout_s\": 4}}", stage, overlap ? "true" : "false");
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
  if (zinc_world_size(e) < 2) {
    printf("SKIPPED: needs 2 or more ranks\n");
    zinc_engine_destroy(e);
    return 77;
  }
  zinc_module *m[2] = {zinc_module_add(e, "a"), zinc_module_add(e, "b")};
  int64_t shape[1] = {1000};
  zinc_param *w[2] = {zinc_param_add(e, m[0], "w", ZINC_F32, 1, shape),
                      zinc_param_add(e, m[1], "w", ZINC_F32, 1, shape)};
  if (zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return 2;
  int rank = zinc_rank(e), victim = zinc_world_size(e) - 1;
  zinc_status st = ZINC_OK;
  for (int step = 0; step < 4 && st == ZINC_OK; step++) {
    for (int k = 0; k < 2 && st == ZINC_OK; k++) {
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    for (int k = 1; k >= 0 && st == ZINC_OK; k--) {
      if (step == 2 && k == 1) {
        if (rank == victim) {
          if (freeze) {
            printf("victim %d: pid %ld stopping\n", rank, (long)getpid());
            fflush(stdout);
            raise(SIGSTOP); /* frozen at the start of the backward pass */
            _exit(3);       /* continued by mistake: leave, reporting nothing */
          }
          raise(SIGKILL); /* dies at the start of the backward pass */
        }
        kill_time = now_s();
      }
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK) {
        float *g = zinc_param_grad(w[k]);
        g[0] += 1.0f;
        st = zinc_module_grads_ready(e, m[k]);
      }
      if (st == ZINC_OK && overlap && step == 2 && k == 1) {
        /* compute for longer than the comm timeout: the overlapped
         * reduction of module b fails meanwhile, and the next poll (the
         * comm's `test`, from module a's grads_ready) is what reports it */
        struct timespec nap = {5, 0};
        nanosleep(&nap, NULL);
      }
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    if (st == ZINC_OK)
      st = zinc_backward_end(e);
    if (st == ZINC_OK)
      st = zinc_step(e, NULL);
  }
  my_rank = rank;
  printf("survivor %d: %s after %.1f s: %s\n", rank, zinc_status_name(st),
         now_s() - kill_time, zinc_last_error());
  fflush(stdout);
  /* the engine refuses on, and still says which rank was lost */
  zinc_status again = zinc_module_fetch(e, m[0]);
  printf("survivor %d: later call: %s: %s\n", rank, zinc_status_name(again), zinc_last_error());
  fflush(stdout);
  zinc_engine_destroy(e);
  printf("survivor %d: destroy returned after %.1f s\n", rank, now_s() - kill_time);
  fflush(stdout);
  return st == ZINC_ERR_COMM && again == ZINC_ERR_COMM ? 0 : 1;
}
