/*
 * test_skip_limit.c — steps skipped for inf/NaN gradients do not go on
 * forever ("zinc": {"max_consecutive_skips": N}), under mpirun with the
 * bad value injected on the last rank only:
 *  - fp16, inf every step: the dynamic scale halves from 2^12 down to
 *    min_loss_scale (1) in 12 skips, which do not count; the next N skips
 *    at the minimum do, and the N-th returns an error on every rank (the
 *    same step, within seconds) naming the count, the loss scale and
 *    min_loss_scale; the engine then refuses further steps;
 *  - bf16 and fp32, NaN every step: every skip counts (no scale to lower);
 *  - the default (50) applies without the key; 0 never stops;
 *  - a step that is not skipped resets the count.
 */
#include <mpi.h>

#include "engine_test.h"


/* Run up to `steps` steps with `bad` injected on the last rank in the steps
 * `pattern` marks '1' (the last character repeats). Returns the index of
 * the first step whose zinc_step failed (its status in *st), or -1. */
static int run_skips(zinc_dtype dt, const char *zinc_section, const char *pattern, int steps,
                     float bad, zinc_status *st_out, char *msg, size_t msg_cap) {
  et_run r = et_defaults();
  r.stage = 2;
  r.dtype = dt;
  r.extra = zinc_section;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  size_t plen = strlen(pattern);
  int failed_at = -1;
  *st_out = ZINC_OK;
  for (int s = 0; s < steps; s++) {
    int inject = pattern[(size_t)s < plen ? (size_t)s : plen - 1] == '1';
    et_micro_batch(&m, &r.shape, dt, ((int64_t)s * N + me) * r.micro, r.micro,
                   inject && me == N - 1 ? &bad : NULL);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    double t0 = MPI_Wtime();
    zinc_status st = zinc_step(e, &info);
    double dt_s = MPI_Wtime() - t0;
    ET_CHECK(dt_s < ET_AGREE_SECONDS, "step %d took %.1f s on rank %d", s, dt_s, et_rank);
    if (st != ZINC_OK) {
      failed_at = s;
      *st_out = st;
      snprintf(msg, msg_cap, "%s", zinc_last_error());
      /* the engine stopped: the next step is refused with the same status */
      ET_CHECK(zinc_step(e, &info) == st, "step after the skip limit not refused");
      break;
    }
    ET_CHECK(info.skipped == inject, "step %d: skipped %d, injected %d", s, info.skipped,
             inject);
  }
  /* every rank fails at the same step */
  int lo = failed_at, hi = failed_at;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ET_CHECK(lo == hi, "ranks stopped at different steps (%d..%d)", lo, hi);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return failed_at;
}

static void expect_stop(const char *what, int got, int want, zinc_status st, const char *msg,
                        const char *const *words) {
  ET_CHECK(got == want, "%s: stopped at step %d, expected step %d", what, got, want);
  if (got < 0)
    return;
  ET_CHECK(st == ZINC_ERR_INVALID, "%s: status %s, expected ZINC_ERR_INVALID", what,
           zinc_status_name(st));
  for (int i = 0; words[i]; i++)
    ET_CHECK(strstr(msg, words[i]) != NULL, "%s: message lacks \"%s\": %s", what, words[i],
             msg);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  char msg[1024];
  zinc_status st;
  int at;

  /* fp16: 12 skips lower the scale 4096 -> 1, then 5 at the minimum stop */
  at = run_skips(ZINC_F16, "\"zinc\": {\"max_consecutive_skips\": 5, \"comm_timeout_s\": 60}",
                 "1", 40, INFINITY, &st, msg, sizeof msg);
  expect_stop("fp16 inf", at, 16, st, msg,
              (const char *const[]){"5 consecutive", "loss scale 1", "min_loss_scale",
                                    "max_consecutive_skips", NULL});

  /* bf16 and fp32: every skip counts */
  at = run_skips(ZINC_BF16, "\"zinc\": {\"max_consecutive_skips\": 3, \"comm_timeout_s\": 60}",
                 "1", 20, NAN, &st, msg, sizeof msg);
  expect_stop("bf16 NaN", at, 2, st, msg,
              (const char *const[]){"3 consecutive", "max_consecutive_skips", NULL});
  at = run_skips(ZINC_F32, "\"zinc\": {\"max_consecutive_skips\": 3, \"comm_timeout_s\": 60}",
                 "1", 20, NAN, &st, msg, sizeof msg);
  expect_stop("fp32 NaN", at, 2, st, msg,
              (const char *const[]){"3 consecutive", "max_consecutive_skips", NULL});

  /* a good step resets the count: 2 skips, a step, 2 skips, then the 3rd */
  at = run_skips(ZINC_F32, "\"zinc\": {\"max_consecutive_skips\": 3, \"comm_timeout_s\": 60}",
                 "110111", 20, NAN, &st, msg, sizeof msg);
  expect_stop("fp32 NaN after a good step", at, 5, st, msg,
              (const char *const[]){"3 consecutive", NULL});

  /* the default, 50 */
  at = run_skips(ZINC_F32, "\"zinc\": {\"comm_timeout_s\": 60}", "1", 80, NAN, &st, msg,
                 sizeof msg);
  expect_stop("fp32 NaN, default limit", at, 49, st, msg,
              (const char *const[]){"50 consecutive", NULL});

  /* 0: never */
  at = run_skips(ZINC_F32, "\"zinc\": {\"max_consecutive_skips\": 0, \"comm_timeout_s\": 60}",
                 "1", 60, NAN, &st, msg, sizeof msg);
  ET_CHECK(at == -1, "max_consecutive_skips 0 stopped at step %d: %s", at, msg);

  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    MPI_Finalize();
    return 1;
  }
  if (et_rank == 0)
    printf("skip limit checks passed at %d ranks\n", et_world);
  MPI_Finalize();
  return 0;
}
