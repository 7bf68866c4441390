/* test_cuda_adam.c — the fused multi-tensor Adam/AdamW kernel, through the
 * cuda device's `adam` op, bitwise against zinc_adam_elem on the host.
 *
 * Segments of odd sizes (1 .. 65537 elements) start at misaligned offsets
 * (so both the vector and the scalar path run), with every gradient dtype,
 * every compute-copy dtype (or none), Adam with L2 and AdamW, weight decay
 * on and off per segment, over three steps with changing coefficients.
 * The compute copy is poisoned before every step; no byte outside a
 * segment may change. With nvcc --fmad=false the GPU must give exactly the
 * host's bits: no tolerance. */
#include "gpu_test.h"

#define STEPS 3

typedef struct {
  int64_t n;
  size_t offset;      /* elements past 16-byte alignment */
  int decay;
  /* host copies: (n) each */
  float *master, *m, *v;
  void *grad;         /* grad_dtype */
  /* device */
  guarded_buf d_master, d_m, d_v, d_grad, d_param;
} seg_case;

static zinc_opt_coef coef_for(int step, int adamw) {
  /* as zinc_adam_coef_init would make them for lr 1e-3, betas (0.9, 0.999),
   * eps 1e-8, weight decay 0.01, loss scale 1/1024 * 1/2 ranks */
  double lr = 1e-3, b1 = 0.9, b2 = 0.999, wd = 0.01;
  int t = step + 1;
  zinc_opt_coef c = {0};
  c.kind = ZINC_OPT_ADAM;
  c.grad_scale = (float)(1.0 / 2048.0);
  c.beta1 = (float)b1;
  c.one_minus_beta1 = (float)(1.0 - b1);
  c.beta2 = (float)b2;
  c.one_minus_beta2 = (float)(1.0 - b2);
  c.eps = 1e-8f;
  c.step_size = (float)(lr / (1.0 - pow(b1, t)));
  c.inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(b2, t)));
  c.weight_decay = (float)wd;
  c.decay_factor = (float)(1.0 - lr * wd);
  c.adamw = adamw;
  return c;
}

static void seg_init(zinc_device *d, seg_case *s, int64_t n, size_t offset, int decay,
                     int grad_dtype, int param_dtype, test_rng *rng) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->offset = offset;
  s->decay = decay;
  size_t room = (size_t)n + 1; /* malloc(0) may be NULL */
  s->master = malloc(room * 4);
  s->m = malloc(room * 4);
  s->v = malloc(room * 4);
  s->grad = malloc(room * 4);
  assert_true(s->master && s->m && s->v && s->grad);
  for (int64_t i = 0; i < n; i++) {
    s->master[i] = rng_uniform(rng, -1.0f, 1.0f);
    s->m[i] = rng_uniform(rng, -1e-3f, 1e-3f);
    s->v[i] = rng_uniform(rng, 0.0f, 1e-5f);
    /* gradients as a loss-scaled backward pass would leave them */
    zinc_store_from_f32(s->grad, i, grad_dtype, rng_uniform(rng, -2048.0f, 2048.0f));
  }
  if (n % 5 == 0 && n > 2) { /* some exact zeros and a tiny v */
    s->v[1] = 0.0f;
    zinc_store_from_f32(s->grad, 1, grad_dtype, 0.0f);
  }
  guarded_alloc(d, &s->d_master, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_m, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_v, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_grad, (size_t)n * dtype_bytes(grad_dtype),
                offset * dtype_bytes(grad_dtype));
  if (param_dtype >= 0)
    guarded_alloc(d, &s->d_param, (size_t)n * dtype_bytes(param_dtype),
                  offset * dtype_bytes(param_dtype));
  guarded_upload(&s->d_master, s->master);
  guarded_upload(&s->d_m, s->m);
  guarded_upload(&s->d_v, s->v);
  guarded_upload(&s->d_grad, s->grad);
}

static void seg_fini(zinc_device *d, seg_case *s) {
  guarded_free(d, &s->d_master);
  guarded_free(d, &s->d_m);
  guarded_free(d, &s->d_v);
  guarded_free(d, &s->d_grad);
  if (s->d_param.base)
    guarded_free(d, &s->d_param);
  free(s->master);
  free(s->m);
  free(s->v);
  free(s->grad);
}

/* Run STEPS steps over the segments on the device and on the host; every
 * array must agree bit for bit after every step. */
static void run_segments(zinc_device *d, const int64_t *sizes, int nseg, int grad_dtype,
                         int param_dtype, int adamw, uint64_t seed) {
  test_rng rng = {seed};
  seg_case *s = calloc((size_t)nseg, sizeof *s);
  zinc_opt_seg *segs = calloc((size_t)nseg, sizeof *segs);
  assert_true(s && segs);
  for (int k = 0; k < nseg; k++) {
    seg_init(d, &s[k], sizes[k], (size_t)(k % 4), k % 3 != 1, grad_dtype, param_dtype, &rng);
    segs[k] = (zinc_opt_seg){
        .master = (float *)s[k].d_master.at, .exp_avg = (float *)s[k].d_m.at,
        .exp_avg_sq = (float *)s[k].d_v.at, .grad = s[k].d_grad.at,
        .param_out = param_dtype >= 0 ? (void *)s[k].d_param.at : NULL, .n = sizes[k],
        .grad_dtype = grad_dtype, .param_dtype = param_dtype >= 0 ? param_dtype : 0,
        .decay = s[k].decay};
  }
  size_t bad = 0;
  for (int step = 0; step < STEPS && !bad; step++) {
    zinc_opt_coef c = coef_for(step, adamw);
    for (int k = 0; k < nseg; k++)
      if (s[k].d_param.base)
        guarded_poison(&s[k].d_param);
    ZOK(d->ops->optim(d, NULL, &c, 1, segs, nseg, ZINC_OPT_PASS_UPDATE, NULL));
    ZOK(d->ops->stream_sync(d, NULL));
    for (int k = 0; k < nseg && !bad; k++) {
      seg_case *g = &s[k];
      size_t n = (size_t)g->n;
      float *got = malloc(n * 4 + 4);
      void *want_out = malloc(n * 4 + 4);
      assert_true(got && want_out);
      for (size_t i = 0; i < n; i++) {
        float gv = zinc_load_as_f32(g->grad, (int64_t)i, grad_dtype);
        zinc_adam_elem(&c, g->decay, &g->master[i], &g->m[i], &g->v[i], gv);
        if (param_dtype >= 0)
          zinc_store_from_f32(want_out, (int64_t)i, param_dtype, g->master[i]);
      }
      char what[96];
      snprintf(what, sizeof what, "step %d seg %d (n=%zu, offset %zu) master", step, k, n,
               g->offset);
      bad += guarded_download(&g->d_master, got, what);
      bad += test_compare_bits(what, got, g->master, g->n, ZINC_F32);
      snprintf(what, sizeof what, "step %d seg %d exp_avg", step, k);
      bad += guarded_download(&g->d_m, got, what);
      bad += test_compare_bits(what, got, g->m, g->n, ZINC_F32);
      snprintf(what, sizeof what, "step %d seg %d exp_avg_sq", step, k);
      bad += guarded_download(&g->d_v, got, what);
      bad += test_compare_bits(what, got, g->v, g->n, ZINC_F32);
      if (param_dtype >= 0) {
        snprintf(what, sizeof what, "step %d seg %d param_out", step, k);
        bad += guarded_download(&g->d_param, got, what);
        bad += test_compare_bits(what, got, want_out, g->n, param_dtype);
      }
      free(got);
      free(want_out);
    }
  }
  if (bad)
    fprintf(stderr, "adam: grad %s, param %s, %s: %zu mismatches\n", dtype_label(grad_dtype),
            param_dtype >= 0 ? dtype_label(param_dtype) : "none", adamw ? "AdamW" : "Adam",
            bad);
  for (int k = 0; k < nseg; k++)
    seg_fini(d, &s[k]);
  free(s);
  free(segs);
  assert_int_equal(bad, 0);
}

static const int64_t odd_sizes[] = {1, 3, 4, 5, 4095, 4096, 4097, 12345, 65537, 0, 7};

static void every_dtype_pair(void **state) {
  zinc_device *d = *state;
  int nseg = (int)(sizeof odd_sizes / sizeof odd_sizes[0]);
  for (int adamw = 0; adamw <= 1; adamw++)
    for (int gd = ZINC_F32; gd <= ZINC_F16; gd++)
      for (int pd = -1; pd <= ZINC_F16; pd++)
        run_segments(d, odd_sizes, nseg, gd, pd, adamw,
                     0x1234u + (uint64_t)(adamw * 100 + gd * 10 + pd + 1));
}

/* More segments than one launch takes (ZINC_CUDA_ADAM_SEGS_PER_LAUNCH). */
static void many_segments(void **state) {
  zinc_device *d = *state;
  int64_t sizes[131];
  test_rng rng = {77};
  for (int k = 0; k < 131; k++)
    sizes[k] = k % 17 == 0 ? 0 : 1 + (int64_t)(rng_u32(&rng) % 9000);
  run_segments(d, sizes, 131, ZINC_BF16, ZINC_BF16, 1, 991);
}

/* One large aligned segment: the vector path over many tiles. */
static void large_segment(void **state) {
  zinc_device *d = *state;
  int64_t sizes[1] = {(int64_t)3 << 20};
  run_segments(d, sizes, 1, ZINC_F16, ZINC_F16, 0, 4242);
}

static void rejects_bad_segments(void **state) {
  zinc_device *d = *state;
  zinc_opt_coef c = coef_for(0, 1);
  zinc_opt_seg bad = {.n = 10, .grad_dtype = 7};
  assert_int_equal(d->ops->optim(d, NULL, &c, 1, &bad, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "Adam segment 0"));
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_dtype_pair),
      cmocka_unit_test(many_segments),
      cmocka_unit_test(large_segment),
      cmocka_unit_test(rejects_bad_segments),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
