/*
 * test_rank_killed.c — a rank killed (SIGKILL) or frozen (SIGSTOP) in the
 * middle of a step must not hang the others: every survivor's next
 * collective fails with ZINC_ERR_COMM within zinc.comm_timeout_s (here 4 s)
 * naming the missing rank and the operation; a later call still names the
 * rank; then zinc_engine_destroy returns at once and the process exits with
 * its own status (zinc's exit handler, which skips MPI_Finalize after a
 * comm failure). Run by rank_killed.sh under `mpirun --enable-recovery`, so
 * that mpirun lets the survivors report instead of killing them itself;
 * the script checks the lines printed here.
 *
 * usage: test_rank_killed STAGE OVERLAP SIGNAL [VARIANT [WHEN]]
 *   STAGE 0..3, OVERLAP 0|1 (overlap_comm: asynchronous reductions and
 *   gathers), SIGNAL kill|stop. With OVERLAP the survivors "compute" for
 *   5 s (longer than the timeout) after the kill, so that the overlapped
 *   reduction fails in the background and the engine learns it from the
 *   comm's `test`, not `wait`: the request it then holds must not be
 *   touched again (destroy under ASan proves it).
 *   VARIANT (default plain) adds what owns more comms or other collective
 *   paths, so that every comm the engine owns is seen to learn the failure
 *   (destroy must not wait for the lost rank on any of them):
 *     dga   zinc.compression.delayed_averaging (its own comm and thread;
 *           stage 0)
 *     hpz   zero_hpz_partition_size = the world size (the hpZ group comm;
 *           stage 3)
 *     mp    zinc_options.model_parallel_size 2 (the model-parallel and
 *           data-parallel comms split from the world)
 *     qgz   zero_quantized_gradients (all-to-all-v of int4 blocks)
 *     dgc   qgZ with gradient_codec "dgc"
 *     cpu   offload_optimizer cpu
 *     nvme  offload_optimizer nvme (swap in $RANK_KILLED_NVME_DIR)
 *   WHEN (default bwd) is where the victim goes: bwd, at the start of the
 *   third step's backward pass; bwd_now, the same, but the survivors go on
 *   at once (no 5 s of "compute" with OVERLAP: their next blocking
 *   collective meets the overlapped one still running, and whichever gives
 *   up first must name the rank and the collective); reducing, right
 *   after module b's zinc_module_grads_ready (with OVERLAP its reduction
 *   has just started: the survivors' next collective meets it unfinished);
 *   step, after that step's zinc_backward_end,
 *   before its zinc_step; started, right after the second step's zinc_step
 *   returns (with delayed averaging its all-reduce has just started and
 *   the victim never finishes it).
 *
 * Printed by each survivor:
 *   survivor R: STATUS after T s: MESSAGE        (the first failure)
 *   survivor R: failed in CALL                   (the call that returned it)
 *   survivor R: later call: STATUS: MESSAGE      (the engine refuses on)
 *   survivor R: destroy took T s                 (zinc_engine_destroy alone)
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

#include "common/killed.h"
#include "zinc.h"


/* The config's variable parts for VARIANT, or 0 when it is unknown. */
static int variant_json(const char *variant, int world, char *zero, size_t zn, char *zinc,
                        size_t kn, int *mp) {
  *zero = *zinc = '\0';
  *mp = 1;
  if (!strcmp(variant, "plain"))
    return 1;
  if (!strcmp(variant, "dga")) {
    snprintf(zinc, kn, ", \"compression\": {\"delayed_averaging\": {\"delay\": 1}}");
  } else if (!strcmp(variant, "hpz")) {
    snprintf(zero, zn, ", \"zero_hpz_partition_size\": %d", world);
  } else if (!strcmp(variant, "mp")) {
    *mp = 2;
  } else if (!strcmp(variant, "qgz") || !strcmp(variant, "dgc")) {
    snprintf(zero, zn, ", \"zero_quantized_gradients\": true");
    snprintf(zinc, kn, ", \"compression\": {\"scope\": \"all\", \"block_size\": 256%s}",
             strcmp(variant, "dgc") ? ""
                                    : ", \"gradient_codec\": \"dgc\", \"dgc\": {\"density\": 0.1}");
  } else if (!strcmp(variant, "cpu")) {
    snprintf(zero, zn, ", \"offload_optimizer\": {\"device\": \"cpu\"}");
  } else if (!strcmp(variant, "nvme")) {
    const char *dir = getenv("RANK_KILLED_NVME_DIR"); /* rank_killed.sh's, removed after */
    snprintf(zero, zn, ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
             "\"%s\"}", dir ? dir : "/tmp");
  } else {
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  int stage = argc > 1 ? atoi(argv[1]) : 2;
  int overlap = argc > 2 ? atoi(argv[2]) : 0;
  int freeze = argc > 3 && !strcmp(argv[3], "stop");
  const char *variant = argc > 4 ? argv[4] : "plain";
  const char *when = argc > 5 ? argv[5] : "bwd";
  if (strcmp(when, "bwd") && strcmp(when, "bwd_now") && strcmp(when, "reducing") &&
      strcmp(when, "step") && strcmp(when, "started")) {
    fprintf(stderr, "test_rank_killed: WHEN is bwd, bwd_now, reducing, step or started, not "
            "%s\n", when);
    return 2;
  }
  atexit(killed_report_exit);
  const char *size_env = getenv("OMPI_COMM_WORLD_SIZE");
  int world = size_env ? atoi(size_env) : 1;
  char zero[512], zinc[512], json[1536];
  int mp = 1;
  if (!variant_json(variant, world, zero, sizeof zero, zinc, sizeof zinc, &mp)) {
    fprintf(stderr, "test_rank_killed: unknown VARIANT %s\n", variant);
    return 2;
  }
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d,"
           " \"overlap_comm\": %s, \"reduce_bucket_size\": 600,"
           " \"stage3_param_persistence_threshold\": 0%s},"
           " \"aio\": {\"allow_buffered_io\": true},"
           " \"zinc\": {\"comm_timeout_s\": 4%s}}", stage, overlap ? "true" : "false", zero,
           zinc);
  zinc_engine *e = killed_engine(json, mp, 0);
  if (zinc_world_size(e) < 2) {
    printf("SKIPPED: needs 2 or more ranks\n");
    zinc_engine_destroy(e);
    return 77;
  }
  zinc_module *m[2] = {zinc_module_add(e, "a"), zinc_module_add(e, "b")};
  int64_t shape[1] = {1000};
  zinc_param *w[2] = {zinc_param_add(e, m[0], "w", ZINC_F32, 1, shape),
                      zinc_param_add(e, m[1], "w", ZINC_F32, 1, shape)};
  if (zinc_engine_build(e, NULL, NULL) != ZINC_OK) {
    fprintf(stderr, "build: %s\n", zinc_last_error());
    return 2;
  }
  int rank = zinc_rank(e), victim = zinc_world_size(e) - 1;
  zinc_status st = ZINC_OK;
  const char *where = "build";
  /* the victim goes here: SIGKILL, or SIGSTOP and never continues */
#define LOSE_VICTIM() do { killed_lose(rank, victim, freeze); killed_time = killed_now(); } while (0)
  for (int step = 0; step < 4 && st == ZINC_OK; step++) {
    for (int k = 0; k < 2 && st == ZINC_OK; k++) {
      where = "forward fetch";
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    for (int k = 1; k >= 0 && st == ZINC_OK; k--) {
      if (step == 2 && k == 1 && !strncmp(when, "bwd", 3))
        LOSE_VICTIM(); /* at the start of the backward pass */
      where = "backward fetch";
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK) {
        float *g = zinc_param_grad(w[k]);
        g[0] += 1.0f + (float)rank;
        where = "zinc_module_grads_ready";
        st = zinc_module_grads_ready(e, m[k]);
      }
      if (st == ZINC_OK && step == 2 && k == 1 && !strcmp(when, "reducing"))
        LOSE_VICTIM(); /* with module b's reduction started (overlap_comm) */
      if (st == ZINC_OK && overlap && step == 2 && k == 1 && !strcmp(when, "bwd")) {
        /* compute for longer than the comm timeout: the overlapped
         * reduction of module b fails meanwhile, and the next poll (the
         * comm's `test`, from module a's grads_ready) is what reports it */
        struct timespec nap = {5, 0};
        nanosleep(&nap, NULL);
      }
      if (st == ZINC_OK) {
        where = "zinc_module_release";
        st = zinc_module_release(e, m[k]);
      }
    }
    where = "zinc_backward_end";
    if (st == ZINC_OK)
      st = zinc_backward_end(e);
    if (st == ZINC_OK && step == 2 && !strcmp(when, "step"))
      LOSE_VICTIM(); /* before zinc_step */
    if (st == ZINC_OK) {
      where = "zinc_step";
      st = zinc_step(e, NULL);
    }
    if (st == ZINC_OK && step == 1 && !strcmp(when, "started"))
      LOSE_VICTIM(); /* with the step's started collectives in flight */
  }
  killed_rank = rank;
  printf("survivor %d: %s after %.1f s: %s\n", rank, zinc_status_name(st),
         killed_now() - killed_time, zinc_last_error());
  printf("survivor %d: failed in %s\n", rank, where);
  fflush(stdout);
  /* the engine refuses on, and still says which rank was lost */
  zinc_status again = zinc_module_fetch(e, m[0]);
  printf("survivor %d: later call: %s: %s\n", rank, zinc_status_name(again), zinc_last_error());
  fflush(stdout);
  double t0 = killed_now();
  zinc_engine_destroy(e);
  printf("survivor %d: destroy took %.2f s\n", rank, killed_now() - t0);
  printf("survivor %d: destroy returned after %.1f s\n", rank, killed_now() - killed_time);
  fflush(stdout);
  return st == ZINC_ERR_COMM && again == ZINC_ERR_COMM ? 0 : 1;
}
