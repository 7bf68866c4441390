/*
 * test_error_once.c — a failure is returned, not also logged (zinc.h,
 * "Conventions"): when zinc_step stops the engine (here: the skip limit,
 * "max_consecutive_skips": 1, a NaN gradient on the last rank), every rank
 * gets the status and the message from zinc_last_error, and nothing the
 * library wrote to stderr repeats it, even at log level info. The trainer
 * prints it once.
 */
#include <math.h>
#include <mpi.h>

#include "common/capture.h"
#include "engine_test.h"

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  et_run r = et_defaults();
  r.stage = 2;
  r.extra = "  \"zinc\": {\"max_consecutive_skips\": 1, \"log_level\": \"info\"}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  float bad = NAN;
  et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro,
                 me == N - 1 ? &bad : NULL);
  test_stderr cap;
  test_stderr_begin(&cap);
  zinc_step_info info = ZINC_STEP_INFO_INIT;
  zinc_status st = zinc_step(e, &info);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", zinc_last_error());
  zinc_status again = zinc_step(e, &info);
  char *printed = test_stderr_end(&cap);
  ET_CHECK(st == ZINC_ERR_INVALID && again == st, "the skip limit: %s then %s",
           zinc_status_name(st), zinc_status_name(again));
  ET_CHECK(strlen(msg) > 20 && strstr(msg, "skip"), "the message does not say why: \"%s\"",
           msg);
  /* the first 40 characters of the message: none of the library's lines has them */
  char head[41];
  snprintf(head, sizeof head, "%s", msg);
  ET_CHECK(test_count_lines(printed, head) == 0 && test_count_lines(printed, "[zinc error") == 0,
           "the library printed the failure it returned:\n%s", printed);
  free(printed);
  et_model_free(&m);
  zinc_engine_destroy(e);
  int bad_n = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad_n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad_n ? "error-once tests FAILED\n" : "error-once tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad_n ? 1 : 0;
}
