/* test_cuda_optim.c — Lion, Adagrad, SGD (plain, momentum with dampening,
 * its first step, Nesterov) and Lamb's two passes through the cuda
 * device's `optim` op, bitwise against zinc_cpu_optim on host copies of
 * the same inputs: masters, state slots, the compute copy and Lamb's norms
 * (which the GPU adds in the CPU's canonical order, so no tolerance).
 *
 * Segments of odd sizes (0 .. 65537 elements) at misaligned offsets, two
 * parameter groups (coefficient tables of two entries, runs of segments on
 * each), weight decay on and off per segment, every gradient dtype and
 * compute-copy dtype (or none), two steps; Lamb runs UPDATE, takes the
 * trust ratios from the norms with zinc_lamb_ratio, then APPLY. Slots an
 * optimizer does not use are passed as NULL. More segments than one launch
 * takes, and malformed calls refused. */
#include "gpu_test.h"
#include "kernels/cpu_kernels.h"
#include "optim/optimizer.h"

#define STEPS 2
#define NGROUPS 2

typedef struct {
  const char *name;
  zinc_opt_hparams h;
} optim_case;

typedef struct {
  int64_t n;
  size_t offset;
  /* host: (n) each; the CPU reference runs on these */
  float *master, *m, *v;
  void *grad, *out;
  /* device */
  guarded_buf d_master, d_m, d_v, d_grad, d_param;
} seg_case;

static optim_case make_case(const char *name, int kind) {
  optim_case c = {name, {0}};
  c.h.kind = kind;
  c.h.lr = 1e-2;
  c.h.beta1 = 0.9;
  c.h.beta2 = 0.99;
  c.h.eps = 1e-8;
  c.h.weight_decay = 0.05;
  c.h.bias_correction = 1;
  c.h.min_coeff = 0.01;
  c.h.max_coeff = 10.0;
  return c;
}

enum { NCASES = 6 };
static void all_cases(optim_case *c) {
  c[0] = make_case("Lion", ZINC_OPT_LION);
  c[1] = make_case("Adagrad", ZINC_OPT_ADAGRAD);
  c[2] = make_case("SGD", ZINC_OPT_SGD);
  c[3] = make_case("SGD momentum dampening", ZINC_OPT_SGD);
  c[3].h.momentum = 0.9;
  c[3].h.dampening = 0.2;
  c[4] = make_case("SGD nesterov", ZINC_OPT_SGD);
  c[4].h.momentum = 0.8;
  c[4].h.nesterov = 1;
  c[5] = make_case("Lamb", ZINC_OPT_LAMB);
}

static void seg_init(zinc_device *d, seg_case *s, int64_t n, size_t offset, int gdt, int pdt,
                     test_rng *rng) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->offset = offset;
  size_t room = (size_t)n + 1;
  s->master = malloc(room * 4);
  s->m = malloc(room * 4);
  s->v = malloc(room * 4);
  s->grad = malloc(room * 4);
  s->out = malloc(room * 4);
  assert_true(s->master && s->m && s->v && s->grad && s->out);
  for (int64_t i = 0; i < n; i++) {
    s->master[i] = rng_uniform(rng, -1.0f, 1.0f);
    s->m[i] = rng_uniform(rng, -1e-3f, 1e-3f);
    s->v[i] = rng_uniform(rng, 0.0f, 1e-5f);
    zinc_store_from_f32(s->grad, i, gdt, rng_uniform(rng, -2.0f, 2.0f));
  }
  if (n > 2) { /* a zero gradient on a zero momentum: Lion's sign of 0 */
    s->m[1] = 0.0f;
    zinc_store_from_f32(s->grad, 1, gdt, 0.0f);
  }
  guarded_alloc(d, &s->d_master, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_m, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_v, (size_t)n * 4, offset * 4);
  guarded_alloc(d, &s->d_grad, (size_t)n * dtype_bytes(gdt), offset * dtype_bytes(gdt));
  if (pdt >= 0)
    guarded_alloc(d, &s->d_param, (size_t)n * dtype_bytes(pdt), offset * dtype_bytes(pdt));
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
  free(s->out);
}

static size_t compare_seg(seg_case *g, int use_m, int use_v, int pdt, int write_out,
                          const char *label) {
  size_t n = (size_t)g->n, bad = 0;
  float *got = malloc(n * 4 + 4);
  assert_non_null(got);
  char what[160];
  snprintf(what, sizeof what, "%s master", label);
  bad += guarded_download(&g->d_master, got, what);
  bad += test_compare_bits(what, got, g->master, g->n, ZINC_F32);
  if (use_m) {
    snprintf(what, sizeof what, "%s exp_avg", label);
    bad += guarded_download(&g->d_m, got, what);
    bad += test_compare_bits(what, got, g->m, g->n, ZINC_F32);
  }
  if (use_v) {
    snprintf(what, sizeof what, "%s exp_avg_sq", label);
    bad += guarded_download(&g->d_v, got, what);
    bad += test_compare_bits(what, got, g->v, g->n, ZINC_F32);
  }
  if (pdt >= 0 && write_out) {
    snprintf(what, sizeof what, "%s param_out", label);
    bad += guarded_download(&g->d_param, got, what);
    bad += test_compare_bits(what, got, g->out, g->n, pdt);
  }
  free(got);
  return bad;
}

/* One pass on the device and on the host (scalar path); everything the
 * pass writes must agree bit for bit. */
static size_t pass_both(zinc_device *d, const zinc_opt_coef *coefs, zinc_opt_seg *dev,
                        zinc_opt_seg *host, seg_case *s, int nseg, int pass, int use_m,
                        int use_v, int pdt, const char *label) {
  double *norms_gpu = calloc(2 * (size_t)nseg + 1, sizeof(double));
  double *norms_cpu = calloc(2 * (size_t)nseg + 1, sizeof(double));
  assert_true(norms_gpu && norms_cpu);
  for (int k = 0; k < nseg; k++)
    if (s[k].d_param.base)
      guarded_poison(&s[k].d_param);
  ZOK(d->ops->optim(d, NULL, coefs, NGROUPS, dev, nseg, pass, norms_gpu));
  ZOK(d->ops->stream_sync(d, NULL));
  ZOK(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, coefs, NGROUPS, host, nseg, pass, norms_cpu));
  const int lamb_update = coefs[0].kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_UPDATE;
  size_t bad = 0;
  for (int k = 0; k < nseg; k++) {
    char what[128];
    snprintf(what, sizeof what, "%s pass %d seg %d (n=%lld, offset %zu)", label, pass, k,
             (long long)s[k].n, s[k].offset);
    bad += compare_seg(&s[k], use_m, use_v, pdt, !lamb_update, what);
    if (lamb_update) {
      for (int j = 0; j < 2; j++)
        if (memcmp(&norms_gpu[2 * k + j], &norms_cpu[2 * k + j], sizeof(double))) {
          fprintf(stderr, "%s: norm %d %.17g on the GPU, %.17g on the CPU\n", what, j,
                  norms_gpu[2 * k + j], norms_cpu[2 * k + j]);
          bad++;
        }
      float r = zinc_lamb_ratio(norms_cpu[2 * k], norms_cpu[2 * k + 1], coefs[0].min_coeff,
                                coefs[0].max_coeff);
      dev[k].lamb_ratio = host[k].lamb_ratio = r;
    }
  }
  free(norms_gpu);
  free(norms_cpu);
  return bad;
}

static void run_segments(zinc_device *d, const optim_case *c, const int64_t *sizes, int nseg,
                         int gdt, int pdt, uint64_t seed) {
  test_rng rng = {seed};
  int slots = zinc_opt_state_slots(&c->h);
  int use_m = (slots & ZINC_OPT_SLOT_EXP_AVG) != 0, use_v = (slots & ZINC_OPT_SLOT_EXP_AVG_SQ) != 0;
  seg_case *s = calloc((size_t)nseg, sizeof *s);
  zinc_opt_seg *dev = calloc((size_t)nseg, sizeof *dev), *host = calloc((size_t)nseg, sizeof *host);
  assert_true(s && dev && host);
  for (int k = 0; k < nseg; k++) {
    seg_init(d, &s[k], sizes[k], (size_t)(k % 4), gdt, pdt, &rng);
    int decay = k % 3 != 1, coef = (k / 3) % NGROUPS;
    dev[k] = (zinc_opt_seg){.master = (float *)s[k].d_master.at,
                            .exp_avg = use_m ? (float *)s[k].d_m.at : NULL,
                            .exp_avg_sq = use_v ? (float *)s[k].d_v.at : NULL,
                            .grad = s[k].d_grad.at,
                            .param_out = pdt >= 0 ? (void *)s[k].d_param.at : NULL,
                            .n = sizes[k],
                            .grad_dtype = gdt,
                            .param_dtype = pdt >= 0 ? pdt : 0,
                            .decay = decay,
                            .coef = coef,
                            .lamb_ratio = 1.0f};
    host[k] = (zinc_opt_seg){.master = s[k].master,
                             .exp_avg = use_m ? s[k].m : NULL,
                             .exp_avg_sq = use_v ? s[k].v : NULL,
                             .grad = s[k].grad,
                             .param_out = pdt >= 0 ? s[k].out : NULL,
                             .n = sizes[k],
                             .grad_dtype = gdt,
                             .param_dtype = pdt >= 0 ? pdt : 0,
                             .decay = decay,
                             .coef = coef,
                             .lamb_ratio = 1.0f};
  }
  size_t bad = 0;
  for (int step = 1; step <= STEPS && !bad; step++) {
    zinc_opt_coef coefs[NGROUPS];
    for (int g = 0; g < NGROUPS; g++) { /* the second group: its own lr and decay */
      zinc_opt_hparams h = c->h;
      h.lr *= 1.0 + g;
      h.weight_decay *= 0.5 * g;
      ZOK(zinc_opt_coef_init(&coefs[g], &h, step, 1.0 / (1.0 + step)));
    }
    bad += pass_both(d, coefs, dev, host, s, nseg, ZINC_OPT_PASS_UPDATE, use_m, use_v, pdt,
                     c->name);
    if (c->h.kind == ZINC_OPT_LAMB)
      bad += pass_both(d, coefs, dev, host, s, nseg, ZINC_OPT_PASS_APPLY, use_m, use_v, pdt,
                       c->name);
  }
  if (bad)
    fprintf(stderr, "%s: grad %s, param %s: %zu mismatches\n", c->name, dtype_label(gdt),
            pdt >= 0 ? dtype_label(pdt) : "none", bad);
  for (int k = 0; k < nseg; k++)
    seg_fini(d, &s[k]);
  free(s);
  free(dev);
  free(host);
  assert_int_equal(bad, 0);
}

static const int64_t odd_sizes[] = {1, 3, 4, 5, 4095, 4096, 4097, 12345, 65537, 0, 7};

static void every_kind_and_dtype_pair(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  int nseg = (int)(sizeof odd_sizes / sizeof odd_sizes[0]);
  for (int ci = 0; ci < NCASES; ci++)
    for (int gd = ZINC_F32; gd <= ZINC_F16; gd++)
      for (int pd = -1; pd <= ZINC_F16; pd++)
        run_segments(d, &cases[ci], odd_sizes, nseg, gd, pd,
                     0x5678u + (uint64_t)(ci * 100 + gd * 10 + pd + 1));
}

/* More segments than one launch takes (ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH),
 * Lamb's norms across the launches, and one segment of many blocks. */
static void many_segments(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  int64_t sizes[101];
  test_rng rng = {77};
  for (int k = 0; k < 101; k++)
    sizes[k] = k % 17 == 0 ? 0 : 1 + (int64_t)(rng_u32(&rng) % 9000);
  sizes[50] = (int64_t)1 << 20;
  run_segments(d, &cases[5], sizes, 101, ZINC_BF16, ZINC_BF16, 991);
  run_segments(d, &cases[3], sizes, 101, ZINC_F16, -1, 992);
}

static void rejects_bad_segments(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  zinc_opt_coef lion, lamb;
  ZOK(zinc_opt_coef_init(&lion, &cases[0].h, 1, 1.0));
  ZOK(zinc_opt_coef_init(&lamb, &cases[5].h, 1, 1.0));
  float x = 1.0f;
  zinc_opt_seg seg = {.master = &x,
                      .exp_avg = NULL,
                      .exp_avg_sq = NULL,
                      .grad = &x,
                      .param_out = NULL,
                      .n = 1,
                      .grad_dtype = ZINC_F32,
                      .param_dtype = ZINC_F32,
                      .decay = 1,
                      .coef = 0,
                      .lamb_ratio = 1.0f};
  /* Lion without its momentum, Lamb without norms, APPLY for Lion, mixed kinds */
  assert_int_equal(d->ops->optim(d, NULL, &lion, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "Lion segment 0"));
  seg.exp_avg = seg.exp_avg_sq = &x;
  assert_int_equal(d->ops->optim(d, NULL, &lamb, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  assert_int_equal(d->ops->optim(d, NULL, &lion, 1, &seg, 1, ZINC_OPT_PASS_APPLY, NULL),
                   ZINC_ERR_INVALID);
  zinc_opt_coef mixed[2] = {lion, lamb};
  seg.coef = 1;
  assert_int_equal(d->ops->optim(d, NULL, mixed, 2, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  seg.coef = 2;
  assert_int_equal(d->ops->optim(d, NULL, mixed, 2, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  assert_true(x == 1.0f);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_kind_and_dtype_pair),
      cmocka_unit_test(many_segments),
      cmocka_unit_test(rejects_bad_segments),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
