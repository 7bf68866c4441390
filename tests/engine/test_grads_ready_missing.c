/*
 * test_grads_ready_missing.c — a module whose gradient is handed out and
 * written but never reported with zinc_module_grads_ready, under mpirun at
 * 1-3 ranks, stages 0-3. Its gradient would never be reduced (stages 0/1
 * would step on this rank's own gradient, stages 2/3 on zeros), so:
 *  - zinc_backward_end fails with ZINC_ERR_INVALID on every rank, naming the
 *    module, and changes nothing: zinc_step is refused until the micro-batch
 *    ends properly;
 *  - the engine goes on: reporting the module then and ending the
 *    micro-batch trains bitwise like a run that reported it there all along.
 */
#include "engine_test.h"

#define STEPS 4
#define MID 1

/* One micro-batch; "mid" is reported ready only at the end (after "in"), or
 * never when report_mid is 0. The first failing call's status. */
static zinc_status micro(et_model *m, const et_run *r, int s, int report_mid) {
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
    if (k != MID)
      ET_TRY(zinc_module_grads_ready(e, m->mod[k]));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  if (report_mid)
    ET_TRY(zinc_module_grads_ready(e, m->mod[MID]));
  return zinc_backward_end(e);
}

static float **run(int stage, int misuse) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 30}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  for (int s = 0; s < STEPS; s++) {
    if (misuse && s == 0) {
      zinc_status st = micro(&m, &r, s, 0);
      ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"mid\""),
               "stage %d: \"mid\" never reported ready: backward_end gave %s: %s", stage,
               zinc_status_name(st), zinc_last_error());
      st = zinc_step(e, NULL);
      ET_CHECK(st == ZINC_ERR_INVALID, "stage %d: step after the refused backward_end gave "
               "%s", stage, zinc_status_name(st));
      ET_OK(zinc_module_grads_ready(e, m.mod[MID]));
      ET_OK(zinc_backward_end(e));
    } else {
      ET_OK(micro(&m, &r, s, 1));
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
    float **got = run(stage, 1);
    char what[64];
    snprintf(what, sizeof what, "stage %d after the refused backward_end", stage);
    ET_CHECK(et_same_bits(&sh, got, clean, what), "%s differs from a run without it", what);
    et_free_params(clean);
    et_free_params(got);
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("missing grads_ready checks passed at %d ranks\n", et_world);
  return 0;
}
