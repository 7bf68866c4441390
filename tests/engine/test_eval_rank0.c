/*
 * test_eval_rank0.c — forward-only work on one rank only (sampling text on
 * rank 0, as llm.c does), under mpirun at 2 and 3 ranks, stages 0-3: the
 * same program must get the same answer at every stage, since stages 0-3
 * give the same bits.
 *
 * The rule (zinc.h, zinc_eval_begin): evaluation is collective at every
 * stage. Stage 3 cannot serve a fetch on one rank (the parameters are
 * gathered from every rank's partition), so a fetch made by some ranks
 * only is refused at every stage: each fetch inside
 * zinc_eval_begin/zinc_eval_end and zinc_eval_end itself agree across the
 * data-parallel ranks. Checked, at every stage:
 *  - every rank evaluates (eval_begin, a forward pass, eval_end): ZINC_OK,
 *    and training goes on;
 *  - every rank calls eval_begin/eval_end, only rank 0 fetches: every rank
 *    gets ZINC_ERR_INVALID within 10 s, rank 0 at its first fetch and the
 *    others at eval_end, the message naming both points (at stages 0-2
 *    rank 0's fetches used to be accepted, at stage 3 refused);
 *  - rank 0 alone runs a forward pass outside evaluation, then every rank
 *    trains: every rank gets ZINC_ERR_INVALID within 10 s.
 */
#include <mpi.h>

#include "engine_test.h"

static zinc_status forward_pass(et_model *m) {
  for (int k = 0; k < 4; k++) {
    ET_TRY(zinc_module_fetch(m->e, m->mod[k]));
    ET_TRY(et_load_module(m, &(tm_shape){{TM_D0, TM_D1, TM_D2, TM_D3}, ZINC_F32}, ZINC_F32, k));
    ET_TRY(zinc_module_release(m->e, m->mod[k]));
  }
  return ZINC_OK;
}

/* how: 0 every rank evaluates; 1 inside evaluation on rank 0 only; 2 outside
 * evaluation on rank 0 only, then a training micro-batch everywhere */
static void test_case(int stage, int how) {
  static const char *names[3] = {"every rank evaluates", "rank 0 alone fetches inside "
                                 "eval_begin/eval_end", "rank 0 alone runs a forward pass "
                                 "outside evaluation"};
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  ET_OK(et_steps(&m, &r, 0, 2));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = ZINC_OK;
  if (how < 2) {
    st = zinc_eval_begin(e);
    if (st == ZINC_OK && (how == 0 || me == 0))
      st = forward_pass(&m);
    if (st == ZINC_OK)
      st = zinc_eval_end(e);
  } else {
    if (me == 0)
      st = forward_pass(&m);
    if (st == ZINC_OK)
      st = et_micro_batch_skip(&m, &r.shape, r.dtype, (2 * (int64_t)N + me) * r.micro, r.micro,
                               -1);
  }
  double dt = MPI_Wtime() - t0;
  char what[160];
  snprintf(what, sizeof what, "stage %d, %d ranks: %s", stage, N, names[how]);
  if (how == 0) {
    ET_CHECK(st == ZINC_OK, "%s: %s: %s", what, zinc_status_name(st), zinc_last_error());
    ET_OK(et_steps(&m, &r, 2, 3));
  } else {
    const char *msg = zinc_last_error();
    ET_CHECK(st == ZINC_ERR_INVALID, "%s: %s (want ZINC_ERR_INVALID on every rank): %s", what,
             zinc_status_name(st), msg);
    if (how == 1)
      ET_CHECK(strstr(msg, "zinc_eval_end") && strstr(msg, "zinc_module_fetch(\"in\")"),
               "%s: the message does not name both points (rank 0's fetch of \"in\" and the "
               "others' zinc_eval_end): %s", what, msg);
    ET_CHECK(dt < 10.0, "%s: the failure took %.1f s", what, dt);
    int mine = (int)st, lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ET_CHECK(lo == hi, "%s: the ranks return different statuses (%d .. %d)", what, lo, hi);
    if (me == 0 && st != ZINC_OK)
      printf("%s: %s\n", what, msg);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  et_run r = et_defaults();
  zinc_engine_destroy(et_create(&r, NULL));
  if (et_world < 2) {
    printf("SKIPPED: evaluation on one rank of several needs 2 or more ranks\n");
    return 77;
  }
  for (int stage = 0; stage <= 3; stage++)
    for (int how = 0; how < 3; how++)
      test_case(stage, how);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("forward-only work on one rank refused alike at stages 0-3 at %d ranks\n", et_world);
  return 0;
}
