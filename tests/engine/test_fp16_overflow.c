/*
 * test_fp16_overflow.c — fp16 overflow under mpirun, stages 0-3: an inf
 * (step 4) and a NaN (step 6) injected in the last rank's gradient skip the
 * step on every rank, leave parameters and optimizer state byte-identical,
 * and halve the loss scale; the scale doubles again after
 * loss_scale_window (3) steps without overflow.
 */
#include "engine_test.h"

static void get_state(zinc_engine *e, et_model *m, zinc_state_kind kind, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m->par[i], kind, out[i]));
}

static void test_overflow(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  r.dtype = ZINC_F16;
  r.fp16_window = 3;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  float **before[3], **after[3];
  for (int k = 0; k < 3; k++) {
    before[k] = et_alloc_params(&r.shape);
    after[k] = et_alloc_params(&r.shape);
  }
  float inf = INFINITY, nan_ = NAN;
  float scale_at_overflow = 0;
  for (int s = 0; s < 10; s++) {
    const float *inject = NULL;
    if (me == N - 1 && (s == 4 || s == 6))
      inject = s == 4 ? &inf : &nan_;
    et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)s * N + me) * r.micro, r.micro, inject);
    if (s == 4 || s == 6)
      for (int k = 0; k < 3; k++)
        get_state(e, &m, (zinc_state_kind[]){ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                             ZINC_STATE_EXP_AVG_SQ}[k], before[k]);
    float scale_before = zinc_loss_scale(e);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    if (s == 4 || s == 6) {
      ET_CHECK(info.skipped == 1, "stage %d step %d: overflow on rank %d not skipped here",
               stage, s, N - 1);
      ET_CHECK(info.loss_scale == scale_before / 2, "stage %d step %d: scale %g, expected %g",
               stage, s, info.loss_scale, scale_before / 2);
      for (int k = 0; k < 3; k++) {
        get_state(e, &m, (zinc_state_kind[]){ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                             ZINC_STATE_EXP_AVG_SQ}[k], after[k]);
        char what[64];
        snprintf(what, sizeof what, "stage %d skipped step, state %d", stage, k);
        ET_CHECK(et_same_bits(&r.shape, after[k], before[k], what), "%s changed", what);
      }
    } else {
      ET_CHECK(info.skipped == 0, "stage %d step %d skipped without overflow", stage, s);
    }
    /* DeepSpeed's rule: the scale doubles when (iteration - last overflow)
     * is a multiple of loss_scale_window (3): after the overflow at 6 it
     * holds at 7 and 8 and doubles at 9 */
    if (s == 6)
      scale_at_overflow = info.loss_scale;
    if (s == 7 || s == 8)
      ET_CHECK(info.loss_scale == scale_at_overflow, "stage %d step %d: scale %g, expected %g",
               stage, s, info.loss_scale, scale_at_overflow);
    if (s == 9)
      ET_CHECK(info.loss_scale == 2 * scale_at_overflow, "stage %d: scale %g after recovery, "
               "expected %g", stage, info.loss_scale, 2 * scale_at_overflow);
  }
  for (int k = 0; k < 3; k++) {
    et_free_params(before[k]);
    et_free_params(after[k]);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  for (int stage = 0; stage <= 3; stage++)
    test_overflow(stage);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("fp16 overflow checks passed at %d ranks\n", et_world);
  return 0;
}
