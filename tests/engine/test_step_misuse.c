/*
 * test_step_misuse.c — the end of a micro-batch with a module still
 * fetched, under mpirun at 1-3 ranks, stages 0-3:
 *  - zinc_backward_end with "out" still fetched (its last release
 *    forgotten) is refused with ZINC_ERR_INVALID naming it, and zinc_step
 *    before a successful backward_end too; after the release the
 *    micro-batch ends and the step gives the same bits as a run without the
 *    misuse;
 *  - zinc_module_fetch between zinc_backward_end and zinc_step is refused
 *    (the micro-batch is over; zinc_eval_begin is the way to read
 *    parameters there) and the step that follows is the clean run's.
 */
#include "engine_test.h"

#define STEPS 4
#define OUT 3

/* One micro-batch; the backward's release of "out" is left out when
 * forget_release is set. */
static zinc_status micro(et_model *m, const et_run *r, int s, int forget_release) {
  int N = zinc_dp_size(m->e), me = zinc_dp_rank(m->e);
  const tm_shape *sh = &r->shape;
  zinc_engine *e = m->e;
  et_clear_grads(m, sh, -1);
  for (int k = 0; k < 4; k++) {
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_load_module(m, sh, r->dtype, k));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  tm_forward_backward(sh, m->P, m->G, ((int64_t)s * N + me) * r->micro, r->micro,
                      zinc_loss_scale(e));
  for (int k = 3; k >= 0; k--) {
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_add_module_grads(m, sh, r->dtype, k));
    ET_TRY(zinc_module_grads_ready(e, m->mod[k]));
    if (!(forget_release && k == OUT))
      ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  return zinc_backward_end(e);
}

#define EXPECT_INVALID(expr, what)                                                       \
  do {                                                                                   \
    zinc_status st_ = (expr);                                                            \
    ET_CHECK(st_ == ZINC_ERR_INVALID, "stage %d, step %d: %s gave %s (%s)", stage, s, what, \
             zinc_status_name(st_), zinc_last_error());                                  \
  } while (0)

/* misuse: 0 none, 1 a forgotten release, 2 a fetch after backward_end */
static float **run(int stage, int misuse) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  for (int s = 0; s < STEPS; s++) {
    int here = misuse && (s == 0 || s == 2); /* in the first and in a later micro-batch */
    if (here && misuse == 1) {
      zinc_status st = micro(&m, &r, s, 1);
      ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"out\""),
               "stage %d, step %d: backward_end with \"out\" fetched gave %s: %s", stage, s,
               zinc_status_name(st), zinc_last_error());
      EXPECT_INVALID(zinc_step(e, NULL), "step after the refused backward_end");
      ET_OK(zinc_module_release(e, m.mod[OUT]));
      ET_OK(zinc_backward_end(e));
    } else {
      ET_OK(micro(&m, &r, s, 0));
    }
    if (here && misuse == 2) {
      EXPECT_INVALID(zinc_module_fetch(e, m.mod[OUT]), "fetch between backward_end and step");
      EXPECT_INVALID(zinc_module_release(e, m.mod[OUT]), "release of the refused fetch");
    }
    ET_OK(zinc_step(e, NULL));
  }
  float **p = et_alloc_params(&r.shape);
  et_get_params(&m, p);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return p;
}

int main(void) {
  tm_shape sh = et_defaults().shape;
  for (int stage = 0; stage <= 3; stage++) {
    float **clean = run(stage, 0);
    for (int misuse = 1; misuse <= 2; misuse++) {
      float **got = run(stage, misuse);
      char what[96];
      snprintf(what, sizeof what, "stage %d after %s", stage,
               misuse == 1 ? "a refused backward_end" : "a refused fetch before the step");
      ET_CHECK(et_same_bits(&sh, got, clean, what), "%s differs from a clean run", what);
      et_free_params(got);
    }
    et_free_params(clean);
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("step misuse checks passed at %d ranks\n", et_world);
  return 0;
}
