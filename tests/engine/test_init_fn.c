/*
 * test_init_fn.c — the trainer's zinc_init_fn, under mpirun at 1-3 ranks:
 *  - it reaches the trainer's own record of each parameter through the
 *    parameter's user tag (zinc_param_set_user / zinc_param_user), and the
 *    values it writes from there are the parameters' values;
 *  - when it fails on the last rank with a message (zinc_error_set), every
 *    rank's zinc_engine_build returns its status, and the message carries
 *    the callback's own words, the parameter and (on the other ranks) the
 *    failing rank — not a message that stops after the parameter's name;
 *  - a failure without a message says so.
 */
#include <mpi.h>

#include "engine_test.h"

/* The trainer's record of a tensor, as a loader of pretrained weights
 * would keep it. */
typedef struct {
  const char *file;   /* where its values would come from */
  float first, step;  /* its values: first + step * j */
  int fail;           /* 1: fail with a message, 2: fail without one */
} it_record;

static zinc_status it_init(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  int *calls = ctx;
  const it_record *rec = zinc_param_user(p);
  if (!rec)
    return zinc_error_set(ZINC_ERR_INVALID, "no record for %s", zinc_param_name(p));
  (*calls)++;
  if (rec->fail == 1)
    return zinc_error_set(ZINC_ERR_IO, "cannot read %s: no such file", rec->file);
  if (rec->fail == 2)
    return ZINC_ERR_IO;
  for (int64_t j = 0; j < numel; j++)
    dst[j] = rec->first + rec->step * (float)j;
  return ZINC_OK;
}

/* Two modules of one parameter each; `fail` on the last rank for "m1.w". */
static void run(int stage, int fail) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 60}";
  zinc_engine *e = et_create(&r, NULL);
  int odd = et_world - 1;
  it_record recs[2] = {{"w0.bin", 0.25f, 0.125f, 0},
                       {"w1.bin", -1.0f, 0.5f, et_rank == odd ? fail : 0}};
  zinc_param *ps[2];
  for (int k = 0; k < 2; k++) {
    char name[8];
    snprintf(name, sizeof name, "m%d", k);
    int64_t shape[1] = {10 + k};
    ps[k] = zinc_param_add(e, zinc_module_add(e, name), "w", ZINC_F32, 1, shape);
    ET_CHECK(ps[k] != NULL, "param_add: %s", zinc_last_error());
    ET_CHECK(zinc_param_user(ps[k]) == NULL, "a new parameter's tag is not NULL");
    ET_OK(zinc_param_set_user(ps[k], &recs[k]));
  }
  ET_CHECK(zinc_param_set_user(NULL, recs) == ZINC_ERR_INVALID, "set_user(NULL) accepted");
  ET_CHECK(zinc_param_user(NULL) == NULL, "zinc_param_user(NULL) is not NULL");
  int calls = 0;
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_build(e, it_init, &calls);
  double dt = MPI_Wtime() - t0;
  char what[96];
  if (fail == 1) {
    snprintf(what, sizeof what, "stage %d, init fails with a message on rank %d", stage, odd);
    et_expect_everywhere(st, ZINC_ERR_IO, dt, what,
                         (const char *const[]){"\"m1.w\"", "cannot read w1.bin: no such file",
                                               NULL}, odd);
  } else if (fail == 2) {
    snprintf(what, sizeof what, "stage %d, init fails silently on rank %d", stage, odd);
    et_expect_everywhere(st, ZINC_ERR_IO, dt, what,
                         (const char *const[]){"\"m1.w\"", "set no message", NULL}, odd);
  } else {
    ET_OK(st);
    ET_CHECK(calls == 2, "stage %d: the init function ran %d times (want 2)", stage, calls);
    for (int k = 0; k < 2; k++) {
      float got[11];
      ET_OK(zinc_param_get_full(e, ps[k], ZINC_STATE_PARAM, got));
      for (int j = 0; j < 10 + k; j++)
        ET_CHECK(got[j] == recs[k].first + recs[k].step * (float)j,
                 "stage %d: m%d.w[%d] = %g, the record gives %g", stage, k, j, got[j],
                 recs[k].first + recs[k].step * (float)j);
    }
  }
  zinc_engine_destroy(e);
}

int main(void) {
  et_run r = et_defaults();
  zinc_engine_destroy(et_create(&r, NULL));
  for (int stage = 0; stage <= 3; stage++)
    for (int fail = 0; fail <= 2; fail++)
      run(stage, fail);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("init function tags and messages checked at %d ranks\n", et_world);
  return 0;
}
