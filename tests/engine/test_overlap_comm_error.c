/*
 * test_overlap_comm_error.c — an overlapped reduction (or gather) that
 * fails in the background is reported once, and the engine is then
 * destroyed without touching the request the comm consumed (comm.h,
 * "Requests": `test` consumes a request when it says done, and every error
 * says done). Under ASan a second wait on it (zinc_grads_free, stage3.c's
 * gather cleanup) is a use after free; in a plain build it waits for the
 * comm timeout (20 s here), which the test refuses (destroy within 5 s).
 *
 * The comm's first started batch fails at once on every rank
 * (ZINC_TEST_COMM_FAIL_STARTED=1, comm/comm_mpi.c), so nothing waits for a
 * timeout: stage 1 and 2 start the reduction of module b at its
 * grads_ready, whose poll (`test`) finds it failed (the hook's `start`
 * returns once the progress thread has failed the batch, so no sleep is
 * needed for the poll to see it, whatever the load; stage 3's first
 * started batch is a gather, waited for by the fetch that needs it).
 * Every rank must get
 * ZINC_ERR_COMM naming the injected failure, a later call must be refused,
 * and zinc_engine_destroy must return.
 *
 * usage (under mpirun, 2+ ranks; 1 rank: skipped, a lone process has no
 * progress thread): test_overlap_comm_error
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"

static int failures; /* this rank's failed checks */

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* One engine at `stage` with overlap_comm, trained until the injected
 * failure stops it; returns the name of the call that reported it. */
static void run_stage(int stage, int rank) {
  char json[512];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d,"
           " \"overlap_comm\": true, \"reduce_bucket_size\": 600,"
           " \"stage3_param_persistence_threshold\": 0},"
           " \"zinc\": {\"comm_timeout_s\": 20}}", stage);
  zinc_config *cfg = NULL;
  if (zinc_config_parse(json, &cfg) != ZINC_OK) {
    CHECK(0, "config: %s", zinc_last_error());
    return;
  }
  zinc_options o = ZINC_OPTIONS_INIT;
  o.device = ZINC_DEVICE_CPU;
  o.threads = 1;
  zinc_engine *e = NULL;
  setenv("ZINC_TEST_COMM_FAIL_STARTED", "1", 1); /* read as the engine makes its comms */
  zinc_status st = zinc_engine_create(cfg, &o, &e);
  unsetenv("ZINC_TEST_COMM_FAIL_STARTED");
  zinc_config_free(cfg);
  if (st != ZINC_OK) {
    CHECK(0, "engine: %s", zinc_last_error());
    return;
  }
  zinc_module *m[2] = {zinc_module_add(e, "a"), zinc_module_add(e, "b")};
  int64_t shape[1] = {1000};
  zinc_param *w[2] = {zinc_param_add(e, m[0], "w", ZINC_F32, 1, shape),
                      zinc_param_add(e, m[1], "w", ZINC_F32, 1, shape)};
  st = zinc_engine_build(e, NULL, NULL);
  const char *where = "build";
  for (int step = 0; step < 3 && st == ZINC_OK; step++) {
    for (int k = 0; k < 2 && st == ZINC_OK; k++) {
      where = k ? "forward fetch b" : "forward fetch a";
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m[k]);
    }
    for (int k = 1; k >= 0 && st == ZINC_OK; k--) {
      where = k ? "backward fetch b" : "backward fetch a";
      st = zinc_module_fetch(e, m[k]);
      if (st == ZINC_OK) {
        float *g = zinc_param_grad(w[k]);
        g[0] += 1.0f;
        where = k ? "grads_ready b" : "grads_ready a";
        st = zinc_module_grads_ready(e, m[k]);
      }
      if (st == ZINC_OK) {
        where = k ? "release b" : "release a";
        st = zinc_module_release(e, m[k]);
      }
    }
    if (st == ZINC_OK) {
      where = "backward_end";
      st = zinc_backward_end(e);
    }
    if (st == ZINC_OK) {
      where = "step";
      st = zinc_step(e, NULL);
    }
  }
  printf("rank %d stage %d: %s from %s: %s\n", rank, stage, zinc_status_name(st), where,
         zinc_last_error());
  CHECK(st == ZINC_ERR_COMM, "stage %d: the injected comm failure gave %s from %s (%s)", stage,
        zinc_status_name(st), where, zinc_last_error());
  /* the rank whose batch failed names it; a peer that reached its next
   * collective first learns it there from the broken comm, which names the
   * failed rank (under a slow build, e.g. ASan, at stage 3: the gather's
   * agreement all-reduce) */
  int peer = -1;
  const char *on_peer = strstr(zinc_last_error(), "failed on peer rank ");
  if (on_peer)
    peer = atoi(on_peer + strlen("failed on peer rank "));
  CHECK(strstr(zinc_last_error(), "ZINC_TEST_COMM_FAIL_STARTED") != NULL ||
            (peer >= 0 && peer != rank),
        "stage %d: the message names neither the failed batch nor the failed peer: %s", stage,
        zinc_last_error());
  if (stage <= 2) /* found by a poll (`test`): grads_ready's after the start, or the fetch's */
    CHECK(!strcmp(where, "grads_ready b") || !strcmp(where, "backward fetch a"),
          "stage %d: the failure came from %s, not from a poll after b's reduction started",
          stage, where);
  zinc_status again = zinc_module_fetch(e, m[0]);
  CHECK(again == ZINC_ERR_COMM, "stage %d: a call after the failure gave %s", stage,
        zinc_status_name(again));
  /* waits on no request the comm already consumed: a second wait on one is
   * a use after free (ASan), and in a plain build it sits out the 20 s
   * comm timeout on whatever the freed memory holds */
  double t0 = MPI_Wtime();
  zinc_engine_destroy(e);
  double took = MPI_Wtime() - t0;
  CHECK(took < 5.0, "stage %d: zinc_engine_destroy took %.1f s after the comm failed (comm "
        "timeout 20 s): it waited on a request again", stage, took);
}

int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0)
      printf("SKIPPED: needs 2 or more ranks and MPI_THREAD_MULTIPLE (a started batch runs "
             "in the comm's progress thread)\n");
    MPI_Finalize();
    return 77;
  }
  for (int stage = 1; stage <= 3; stage++)
    run_stage(stage, rank);
  /* every rank is alive: finalising is safe although the comms failed
   * (comm.h, "After a failure") */
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s: %d failed checks over %d ranks\n", total ? "FAIL" : "PASS", total, size);
  MPI_Finalize();
  return total ? 1 : 0;
}
