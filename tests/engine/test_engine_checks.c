/*
 * test_engine_checks.c — what the stages issue asks beyond the oracle:
 *  - overflow: an inf injected in one rank's gradient skips the step on
 *    every rank, leaves parameters and optimizer state byte-identical, lowers
 *    the loss scale; the scale rises again after loss_scale_window steps;
 *  - memory: per-rank model-state bytes within 2% of the ZeRO formula for
 *    stages 0-3, f32 and bf16;
 *  - stage 3 holds at most stage3_max_live_parameters gathered elements
 *    (from the profiler's peak), and prefetch really runs ahead when allowed;
 *  - API misuse returns ZINC_ERR_INVALID with a message, never crashes;
 *  - ranks that fetch modules in different orders get ZINC_ERR_INVALID on
 *    every rank, in the first micro-batch and afterwards.
 */
#include "engine_test.h"


static void get_state(zinc_engine *e, et_model *m, zinc_state_kind kind, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m->par[i], kind, out[i]));
}

/* ------------------------------------------------------------ overflow */

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
    zinc_step_info info;
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

/* -------------------------------------------------------------- memory */

static zinc_status zero_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.001f * (float)(i % 17);
  return ZINC_OK;
}

static void test_memory(int stage, zinc_dtype dt, const char *offload) {
  et_run r = et_defaults();
  r.stage = stage;
  r.dtype = dt;
  r.offload = offload;
  r.reduce_bucket = 200000;
  zinc_engine *e = et_create(&r, NULL);
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof name, "block%d", k);
    zinc_module *mod = zinc_module_add(e, name);
    int64_t w[2] = {311, 257 + k}, b[1] = {257 + k};
    ET_CHECK(zinc_param_add(e, mod, "weight", dt, 2, w) != NULL, "%s", zinc_last_error());
    ET_CHECK(zinc_param_add(e, mod, "bias", dt, 1, b) != NULL, "%s", zinc_last_error());
  }
  ET_OK(zinc_engine_build(e, zero_init, NULL));
  zinc_mem_stats st;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t measured = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    measured += st.current[l][ZINC_MEM_PARAMS] + st.current[l][ZINC_MEM_GRADS] +
                st.current[l][ZINC_MEM_OPTIM];
  double diff = ((double)measured - (double)st.theoretical_model_states) /
                (double)st.theoretical_model_states;
  ET_CHECK(fabs(diff) <= 0.02, "stage %d %s offload %s: model states %llu bytes, formula %llu "
           "(%.2f%%)", stage, zinc_dtype_name(dt), offload, (unsigned long long)measured,
           (unsigned long long)st.theoretical_model_states, 100 * diff);
  if (et_rank == 0)
    printf("memory stage %d %-4s offload %-4s %d ranks: measured %9llu formula %9llu "
           "(%+.3f%%)\n", stage, zinc_dtype_name(dt), offload, et_world, (unsigned long long)measured,
           (unsigned long long)st.theoretical_model_states, 100 * diff);
  zinc_engine_destroy(e);
}

/* ----------------------------------------------------- stage-3 live */

static int64_t gathered_peak_bytes(int64_t max_live, int64_t prefetch) {
  et_run r = et_defaults();
  r.stage = 3;
  r.max_live = max_live;
  r.prefetch = prefetch;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  zinc_mem_stats st;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t fixed = st.current[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS]; /* the gradient ring */
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < 4; s++) {
    et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)s * N + me) * r.micro, r.micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  ET_OK(zinc_memory_stats(e, &st));
  et_model_free(&m);
  zinc_engine_destroy(e);
  return (int64_t)(st.peak[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] - fixed);
}

static void test_max_live(void) {
  /* the largest module ("mid") gathers 1073 + 29 elements, padded to at most
   * 1152 (4 ranks): a limit of 1200 allows one module at a time */
  int64_t bounded = gathered_peak_bytes(1200, 5000);
  ET_CHECK(bounded <= 1200 * 4, "stage 3 gathered %lld bytes at peak, limit 1200 elements",
           (long long)bounded);
  int64_t free_run = gathered_peak_bytes(1000000, 5000);
  ET_CHECK(free_run > 1200 * 4, "prefetch did not run ahead: peak %lld bytes",
           (long long)free_run);
  if (et_rank == 0)
    printf("stage 3 gathered peak: %lld bytes with max_live 1200 elements, %lld without\n",
           (long long)bounded, (long long)free_run);
}

/* --------------------------------------------------------- API misuse */

#define EXPECT_INVALID(expr)                                                          \
  do {                                                                                \
    zinc_status st_ = (expr);                                                         \
    ET_CHECK(st_ == ZINC_ERR_INVALID && zinc_last_error()[0], "%s gave %s (%s)", #expr, \
             zinc_status_name(st_), zinc_last_error());                               \
  } while (0)

static void test_misuse(void) {
  et_run r = et_defaults();
  r.stage = 3;
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  et_register_run(&m, e, &r);
  /* before build */
  EXPECT_INVALID(zinc_step(e, NULL));
  EXPECT_INVALID(zinc_module_fetch(e, m.mod[0]));
  EXPECT_INVALID(zinc_backward_end(e));
  ET_OK(zinc_engine_build(e, et_init, &m.ictx));
  EXPECT_INVALID(zinc_engine_build(e, et_init, &m.ictx));
  ET_CHECK(zinc_module_add(e, "late") == NULL, "module added after build");
  /* a module of another engine, NULL */
  zinc_engine *other = et_create(&r, NULL);
  zinc_module *foreign = zinc_module_add(other, "foreign");
  EXPECT_INVALID(zinc_module_fetch(e, foreign));
  EXPECT_INVALID(zinc_module_fetch(e, NULL));
  zinc_engine_destroy(other);
  /* data and grad outside fetch/release */
  ET_CHECK(zinc_param_data(m.par[0]) == NULL && zinc_last_error()[0], "data of unfetched");
  ET_CHECK(zinc_param_grad(m.par[0]) == NULL && zinc_last_error()[0], "grad of unfetched");
  EXPECT_INVALID(zinc_module_release(e, m.mod[0]));
  EXPECT_INVALID(zinc_step(e, NULL)); /* no backward_end yet */
  /* a whole correct micro-batch, then grad of a released parameter */
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro, NULL);
  (void)N;
  ET_CHECK(zinc_param_grad(m.par[2]) == NULL && zinc_last_error()[0], "grad of released");
  ET_OK(zinc_step(e, NULL));
  /* grads_ready twice */
  ET_OK(zinc_module_fetch(e, m.mod[0]));
  ET_OK(zinc_module_release(e, m.mod[0]));
  ET_OK(zinc_module_fetch(e, m.mod[1]));
  ET_OK(zinc_module_release(e, m.mod[1]));
  ET_OK(zinc_module_fetch(e, m.mod[2]));
  ET_OK(zinc_module_release(e, m.mod[2]));
  ET_OK(zinc_module_fetch(e, m.mod[3]));
  ET_OK(zinc_module_release(e, m.mod[3]));
  ET_OK(zinc_module_fetch(e, m.mod[3]));
  ET_CHECK(zinc_param_grad(m.par[5]) != NULL, "grad: %s", zinc_last_error());
  ET_OK(zinc_module_grads_ready(e, m.mod[3]));
  EXPECT_INVALID(zinc_module_grads_ready(e, m.mod[3]));
  ET_CHECK(zinc_param_grad(m.par[5]) == NULL, "grad handed out after grads_ready");
  /* bad arguments */
  EXPECT_INVALID(zinc_param_get_full(e, m.par[0], ZINC_STATE_PARAM, NULL));
  EXPECT_INVALID(zinc_param_set_full(e, m.par[0], ZINC_STATE_GRAD, m.P[0]));
  EXPECT_INVALID(zinc_allreduce_host(e, NULL, 3, ZINC_REDUCE_SUM));
  ET_CHECK(zinc_param_add(e, m.mod[0], "x", ZINC_F32, 0, NULL) == NULL, "ndim 0 accepted");
  et_model_free(&m);
  zinc_engine_destroy(e);
  zinc_engine_destroy(NULL);
}

/* ------------------------------------------------------- divergence */

static void test_divergence(int first_micro) {
  if (et_world < 2)
    return;
  et_run r = et_defaults();
  r.stage = 3;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int me = zinc_dp_rank(e);
  if (!first_micro) {
    et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  /* the last rank fetches "mid" where the others fetch "in" */
  zinc_module *first = me == et_world - 1 ? m.mod[1] : m.mod[0];
  zinc_status st = zinc_module_fetch(e, first);
  if (first_micro) {
    ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"mid\"") &&
             strstr(zinc_last_error(), "\"in\""),
             "first micro-batch divergence: %s: %s", zinc_status_name(st), zinc_last_error());
  } else {
    /* served in the recorded order; the deviation is reported at backward_end */
    ET_OK(st);
    ET_OK(zinc_module_release(e, first));
    for (int k = 1; k < 4; k++) {
      ET_OK(zinc_module_fetch(e, m.mod[k]));
      ET_OK(zinc_module_release(e, m.mod[k]));
    }
    for (int k = 3; k >= 0; k--) {
      ET_OK(zinc_module_fetch(e, m.mod[k]));
      ET_OK(zinc_module_grads_ready(e, m.mod[k]));
      ET_OK(zinc_module_release(e, m.mod[k]));
    }
    st = zinc_backward_end(e);
    ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"in\""),
             "later divergence: %s: %s", zinc_status_name(st), zinc_last_error());
    ET_CHECK(zinc_step(e, NULL) == ZINC_ERR_INVALID, "engine went on after a divergence");
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* an init function that gives different values on different ranks */
static zinc_status rank_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = strcmp(zinc_param_name(p), "W1") == 0 ? (float)et_rank : 0.5f;
  return ZINC_OK;
}

static void test_init_mismatch(void) {
  if (et_world < 2)
    return;
  et_run r = et_defaults();
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  et_model_register(&m, e, &r.shape, r.dtype);
  zinc_status st = zinc_engine_build(e, rank_init, NULL);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "mid.W1"),
           "init values differing across ranks: %s \"%s\"", zinc_status_name(st),
           zinc_last_error());
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  for (int stage = 0; stage <= 3; stage++)
    test_overflow(stage);
  for (int stage = 0; stage <= 3; stage++) {
    test_memory(stage, ZINC_F32, "none");
    test_memory(stage, ZINC_BF16, "none");
    if (stage > 0) {
      test_memory(stage, ZINC_F32, "cpu");
      test_memory(stage, ZINC_BF16, "cpu");
    }
  }
  test_max_live();
  test_misuse();
  test_init_mismatch();
  test_divergence(1);
  test_divergence(0);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("all engine checks passed at %d ranks\n", et_world);
  return 0;
}
