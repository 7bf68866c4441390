/*
 * test_eval_outside.c — forward-only work (evaluation, sampling) done
 * without zinc_eval_begin/zinc_eval_end, under mpirun at 1-3 ranks, stages
 * 0-3: a micro-batch that fetches and releases the modules in forward order
 * and then starts over (or ends) without any backward is recognised where
 * it happens, and every rank gets ZINC_ERR_INVALID saying "use
 * zinc_eval_begin/zinc_eval_end" — not a module-order message one step
 * late. A pass ended by backward_end is refused changing nothing (the
 * same call is refused again), also when it is the engine's first
 * micro-batch, while the module order is being recorded (then it used to
 * pass silently). A pass before the first training micro-batch, recorded
 * with it, fails at the next micro-batch that does not repeat it (it used
 * to be recorded away silently and to stop the engine at the next
 * evaluation, hours later); a model that runs its forward twice in every
 * micro-batch trains on.
 */
#include <mpi.h>

#include "engine_test.h"

static zinc_status forward_only(et_model *m) {
  for (int k = 0; k < 4; k++) {
    ET_TRY(zinc_module_fetch(m->e, m->mod[k]));
    ET_TRY(zinc_module_release(m->e, m->mod[k]));
  }
  return ZINC_OK;
}

/* then_train: a training micro-batch follows the forward-only pass; else
 * zinc_backward_end does. first: the forward-only pass is the engine's
 * first micro-batch (while the module order is being recorded) */
static void test_forward_only(int stage, int then_train, int first) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  if (!first)
    ET_OK(et_steps(&m, &r, 0, 2));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = forward_only(&m);
  if (st == ZINC_OK)
    st = then_train ? et_micro_batch_skip(&m, &r.shape, r.dtype, (2 * (int64_t)N + me) * r.micro,
                                          r.micro, -1)
                    : zinc_backward_end(e);
  double dt = MPI_Wtime() - t0;
  ET_CHECK(st == ZINC_ERR_INVALID &&
               strstr(zinc_last_error(), "use zinc_eval_begin/zinc_eval_end"),
           "stage %d: a forward-only pass outside evaluation%s%s gave %s: %s", stage,
           first ? " as the first micro-batch" : "",
           then_train ? ", then a training micro-batch," : " ended by backward_end",
           zinc_status_name(st), zinc_last_error());
  ET_CHECK(dt < 10.0, "stage %d: the failure took %.1f s", stage, dt);
  ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "stage %d: a step followed", stage);
  if (!then_train) /* refused, nothing changed: the same call is refused again */
    ET_CHECK(zinc_backward_end(e) == ZINC_ERR_INVALID &&
                 strstr(zinc_last_error(), "use zinc_eval_begin/zinc_eval_end"),
             "stage %d: backward_end again after the refusal: %s", stage, zinc_last_error());
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* A forward-only pass before the very first training micro-batch, in the
 * same micro-batch (evaluation at step 0, outside eval_begin/eval_end):
 * the module order is recorded with it, so the engine cannot tell it
 * there from a model that runs its forward twice; the next micro-batch,
 * which does not repeat it, must fail on every rank saying "use
 * zinc_eval_begin/zinc_eval_end" (it used to record the order again
 * silently, and the same evaluation stopped the engine hours later, at
 * its next run). A model that runs its forward twice in EVERY micro-batch
 * (two views of one batch) trains on. */
static void test_forward_before_first(int stage, int every_micro_batch) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  ET_OK(forward_only(&m));
  ET_OK(et_steps(&m, &r, 0, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = every_micro_batch ? forward_only(&m) : ZINC_OK;
  if (st == ZINC_OK)
    st = et_micro_batch_skip(&m, &r.shape, r.dtype, ((int64_t)N + me) * r.micro, r.micro, -1);
  double dt = MPI_Wtime() - t0;
  if (every_micro_batch) {
    ET_CHECK(st == ZINC_OK, "stage %d: forward twice in every micro-batch: %s: %s", stage,
             zinc_status_name(st), zinc_last_error());
    ET_OK(zinc_step(e, NULL));
  } else {
    ET_CHECK(st == ZINC_ERR_INVALID &&
                 strstr(zinc_last_error(), "use zinc_eval_begin/zinc_eval_end"),
             "stage %d: a forward-only pass before the first training micro-batch, then a "
             "micro-batch without it, gave %s: %s", stage, zinc_status_name(st),
             zinc_last_error());
    ET_CHECK(dt < 10.0, "stage %d: the failure took %.1f s", stage, dt);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  et_run r = et_defaults();
  zinc_engine_destroy(et_create(&r, NULL));
  for (int stage = 0; stage <= 3; stage++)
    for (int first = 0; first <= 1; first++) {
      if (!first) /* while recording, a forward pass that starts over is
                     recorded as the order (zinc.h, trace.c) */
        test_forward_only(stage, 1, first);
      test_forward_only(stage, 0, first);
    }
  for (int stage = 0; stage <= 3; stage++) {
    test_forward_before_first(stage, 0);
    test_forward_before_first(stage, 1);
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("evaluation outside eval_begin checks passed at %d ranks\n", et_world);
  return 0;
}
