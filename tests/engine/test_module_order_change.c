/*
 * test_module_order_change.c — the trainer's module order may change during
 * training (a dropped layer, an unused expert, a branch not taken) when every
 * data-parallel rank changes it the same way, under mpirun at 1-3 ranks:
 *  - every rank leaves out module "scale" from micro-batch 3 on: training
 *    goes on (the ranks agree to record the new order) and stages 1-3, with
 *    and without stage-3 prefetch, end bitwise equal to stage 0 on the same
 *    sequence; a module that comes back later is recorded again too;
 *  - ranks that change differently (the last rank drops "mid", the others
 *    "scale") fail with ZINC_ERR_INVALID on every rank within 10 s.
 */
#include <mpi.h>

#include "engine_test.h"

#define STEPS 6

/* micro-batch s leaves out "scale" for s in [2, 4), and again from 5 on */
static int skipped_at(int s) { return (s >= 2 && s < 4) || s >= 5 ? 2 : -1; }

static float **train(int stage, int64_t prefetch) {
  et_run r = et_defaults();
  r.stage = stage;
  r.prefetch = prefetch;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < STEPS; s++) {
    zinc_status st = et_micro_batch_skip(&m, &r.shape, r.dtype, ((int64_t)s * N + me) * r.micro,
                                         r.micro, skipped_at(s));
    if (st == ZINC_OK)
      st = zinc_step(e, NULL);
    if (st != ZINC_OK) {
      ET_CHECK(0, "stage %d prefetch %lld, micro-batch %d (\"scale\" %s): %s: %s", stage,
               (long long)prefetch, s, skipped_at(s) >= 0 ? "left out" : "used",
               zinc_status_name(st), zinc_last_error());
      break;
    }
  }
  float **p = et_alloc_params(&r.shape);
  if (!et_failures)
    et_get_params(&m, p);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return p;
}

static void test_same_change_everywhere(void) {
  tm_shape sh = et_defaults().shape;
  float **ref = train(0, 1500);
  struct { int stage; int64_t prefetch; } runs[] = {{1, 1500}, {2, 1500}, {3, 0}, {3, 1500}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0] && !et_failures; i++) {
    float **got = train(runs[i].stage, runs[i].prefetch);
    char what[64];
    snprintf(what, sizeof what, "stage %d prefetch %lld vs stage 0", runs[i].stage,
             (long long)runs[i].prefetch);
    if (!et_failures)
      ET_CHECK(et_same_bits(&sh, got, ref, what), "%s differs", what);
    et_free_params(got);
  }
  et_free_params(ref);
}

/* Inside an accumulation window: "scale" gets a gradient in the first
 * micro-batch of each window and is left out of the second (windows 2 on).
 * Its accumulated gradient must still be reduced over the ranks at the
 * boundary: every stage against one rank that takes all ranks' samples in
 * each micro-batch (the same mean gradient), a relative L2 difference of
 * at most 1e-5. */
static float **train_window(int stage, void *comm, int ranks, int me) {
  et_run r = et_defaults();
  r.stage = stage;
  r.gas = 2;
  r.micro = comm ? 3 * ranks : 3;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, comm, &m);
  for (int s = 0; s < 2 * STEPS; s++) {
    int skip = s >= 2 && s % 2 == 1 ? 2 : -1;
    int64_t start = comm ? (int64_t)s * 3 * ranks : ((int64_t)s * ranks + me) * 3;
    zinc_status st = et_micro_batch_skip(&m, &r.shape, r.dtype, start, r.micro, skip);
    if (st == ZINC_OK)
      st = zinc_step(e, NULL);
    if (st != ZINC_OK) {
      ET_CHECK(0, "stage %d, window micro-batch %d: %s: %s", stage, s, zinc_status_name(st),
               zinc_last_error());
      break;
    }
  }
  float **p = et_alloc_params(&r.shape);
  et_get_params(&m, p);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return p;
}

static void test_change_inside_window(void) {
  if (et_world < 2)
    return;
  int world = et_world, me = et_rank;
  MPI_Comm self = MPI_COMM_SELF;
  float **ref = train_window(0, &self, world, me);
  et_rank = me;
  et_world = world;
  tm_shape sh = et_defaults().shape;
  for (int stage = 0; stage <= 3; stage++) {
    float **got = train_window(stage, NULL, world, me);
    double d = et_rel_l2(&sh, got, ref);
    ET_CHECK(d <= 1e-5, "stage %d: a module left out of the last micro-batch of its window: "
             "relative L2 %.3g from one rank taking every sample (limit 1e-5)", stage, d);
    et_free_params(got);
  }
  et_free_params(ref);
}

static void test_different_changes(int stage, int64_t prefetch) {
  if (et_world < 2)
    return;
  et_run r = et_defaults();
  r.stage = stage;
  r.prefetch = prefetch;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  ET_OK(et_steps(&m, &r, 0, 2));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int skip = me == N - 1 ? 1 : 2;
  zinc_status st = et_micro_batch_skip(&m, &r.shape, r.dtype, (2 * (int64_t)N + me) * r.micro,
                                       r.micro, skip);
  double dt = MPI_Wtime() - t0;
  ET_CHECK(st == ZINC_ERR_INVALID, "stage %d prefetch %lld: ranks leaving out different "
           "modules gave %s: %s", stage, (long long)prefetch, zinc_status_name(st),
           zinc_last_error());
  ET_CHECK(dt < 10.0, "stage %d: the failure took %.1f s to reach this rank", stage, dt);
  ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "stage %d: the engine went on after ranks diverged",
           stage);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  et_run r = et_defaults();
  zinc_engine_destroy(et_create(&r, NULL));
  test_same_change_everywhere();
  test_change_inside_window();
  for (int stage = 0; stage <= 3; stage++)
    test_different_changes(stage, stage == 3 ? 0 : 1500);
  test_different_changes(3, 1500);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("module order change checks passed at %d ranks\n", et_world);
  return 0;
}
