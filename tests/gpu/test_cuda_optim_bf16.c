/* test_cuda_optim_bf16.c — every optimizer (Adam, AdamW, Lamb's two
 * passes, Lion, Adagrad, SGD with momentum and Nesterov) with master
 * and/or state slots stored in bf16 (zinc_opt_seg.master_dtype,
 * state_dtype), rounded to nearest even and stochastically, through the
 * cuda device's `optim` op, bitwise against zinc_cpu_optim's scalar path on
 * host copies of the same inputs: masters, state slots, the compute copy
 * and Lamb's norms, with no tolerance.
 *
 * Segments of odd sizes (0 .. 65537) at misaligned offsets, two parameter
 * groups, decay on and off, bf16 and f32 gradients, a bf16 compute copy or
 * none, three storage pairs, two steps; segments whose global offsets
 * cross 2^32 (the draws' counter); Adam with fp32 and bf16 segments in one
 * call (two kernels); and a bad storage dtype refused. */
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
  int mdt, sdt, gdt, pdt; /* pdt < 0: no compute copy */
  /* host (n elements of each dtype): the CPU reference runs on these */
  void *master, *m, *v, *grad, *out;
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

enum { NCASES = 8 };
static void all_cases(optim_case *c) {
  c[0] = make_case("Adam", ZINC_OPT_ADAM);
  c[1] = make_case("AdamW", ZINC_OPT_ADAM);
  c[1].h.adamw = 1;
  c[2] = make_case("Lion", ZINC_OPT_LION);
  c[3] = make_case("Adagrad", ZINC_OPT_ADAGRAD);
  c[4] = make_case("SGD", ZINC_OPT_SGD);
  c[5] = make_case("SGD momentum dampening", ZINC_OPT_SGD);
  c[5].h.momentum = 0.9;
  c[5].h.dampening = 0.2;
  c[6] = make_case("SGD nesterov", ZINC_OPT_SGD);
  c[6].h.momentum = 0.8;
  c[6].h.nesterov = 1;
  c[7] = make_case("Lamb", ZINC_OPT_LAMB);
}

static void *host_alloc(int64_t n, int dt) {
  void *p = malloc(((size_t)n + 1) * dtype_bytes(dt));
  assert_non_null(p);
  return p;
}

static void seg_init(zinc_device *d, seg_case *s, int64_t n, size_t offset, int mdt, int sdt,
                     int gdt, int pdt, test_rng *rng) {
  memset(s, 0, sizeof *s);
  *s = (seg_case){.n = n, .offset = offset, .mdt = mdt, .sdt = sdt, .gdt = gdt, .pdt = pdt};
  s->master = host_alloc(n, mdt);
  s->m = host_alloc(n, sdt);
  s->v = host_alloc(n, sdt);
  s->grad = host_alloc(n, gdt);
  s->out = host_alloc(n, pdt < 0 ? ZINC_F32 : pdt);
  for (int64_t i = 0; i < n; i++) {
    zinc_store_from_f32(s->master, i, mdt, rng_uniform(rng, -1.0f, 1.0f));
    zinc_store_from_f32(s->m, i, sdt, rng_uniform(rng, -1e-3f, 1e-3f));
    zinc_store_from_f32(s->v, i, sdt, rng_uniform(rng, 0.0f, 1e-5f));
    zinc_store_from_f32(s->grad, i, gdt, rng_uniform(rng, -2.0f, 2.0f));
  }
  guarded_alloc(d, &s->d_master, (size_t)n * dtype_bytes(mdt), offset * dtype_bytes(mdt));
  guarded_alloc(d, &s->d_m, (size_t)n * dtype_bytes(sdt), offset * dtype_bytes(sdt));
  guarded_alloc(d, &s->d_v, (size_t)n * dtype_bytes(sdt), offset * dtype_bytes(sdt));
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

static size_t compare_one(guarded_buf *g, const void *want, int64_t n, int dt, const char *label,
                          const char *slot) {
  void *got = malloc((size_t)n * dtype_bytes(dt) + 4);
  assert_non_null(got);
  char what[200];
  snprintf(what, sizeof what, "%s %s", label, slot);
  size_t bad = guarded_download(g, got, what);
  bad += (size_t)test_compare_bits(what, got, want, n, dt);
  free(got);
  return bad;
}

static size_t compare_seg(seg_case *g, int use_m, int use_v, int write_out, const char *label) {
  size_t bad = compare_one(&g->d_master, g->master, g->n, g->mdt, label, "master");
  if (use_m)
    bad += compare_one(&g->d_m, g->m, g->n, g->sdt, label, "exp_avg");
  if (use_v)
    bad += compare_one(&g->d_v, g->v, g->n, g->sdt, label, "exp_avg_sq");
  if (g->pdt >= 0 && write_out)
    bad += compare_one(&g->d_param, g->out, g->n, g->pdt, label, "param_out");
  return bad;
}

static zinc_opt_seg seg_of(seg_case *s, int device, int use_m, int use_v, int decay, int coef,
                           int64_t global_offset) {
  return (zinc_opt_seg){
      .master = device ? (float *)s->d_master.at : s->master,
      .exp_avg = use_m ? (device ? (float *)s->d_m.at : s->m) : NULL,
      .exp_avg_sq = use_v ? (device ? (float *)s->d_v.at : s->v) : NULL,
      .grad = device ? (const void *)s->d_grad.at : s->grad,
      .param_out = s->pdt < 0 ? NULL : device ? (void *)s->d_param.at : s->out,
      .n = s->n,
      .grad_dtype = s->gdt,
      .param_dtype = s->pdt < 0 ? 0 : s->pdt,
      .decay = decay,
      .coef = coef,
      .lamb_ratio = 1.0f,
      .master_dtype = s->mdt,
      .state_dtype = s->sdt,
      .global_offset = global_offset};
}

/* One pass on the device and on the host (scalar path); everything the
 * pass writes must agree bit for bit. */
static size_t pass_both(zinc_device *d, const zinc_opt_coef *coefs, zinc_opt_seg *dev,
                        zinc_opt_seg *host, seg_case *s, int nseg, int pass, int use_m,
                        int use_v, const char *label) {
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
    char what[160];
    snprintf(what, sizeof what, "%s pass %d seg %d (n=%lld, offset %zu, master %s, state %s)",
             label, pass, k, (long long)s[k].n, s[k].offset, dtype_label(s[k].mdt),
             dtype_label(s[k].sdt));
    bad += compare_seg(&s[k], use_m, use_v, !lamb_update, what);
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

/* store: 0 bf16 master, 1 bf16 state, 2 both, 3 alternating fp32 / both
 * per segment (Adam: both kernels in one call). */
static void run_segments(zinc_device *d, const optim_case *c, const int64_t *sizes, int nseg,
                         int store, int rounding, int gdt, int pdt, int64_t offset0,
                         uint64_t seed) {
  test_rng rng = {seed};
  int slots = zinc_opt_state_slots(&c->h);
  int use_m = (slots & ZINC_OPT_SLOT_EXP_AVG) != 0, use_v = (slots & ZINC_OPT_SLOT_EXP_AVG_SQ) != 0;
  seg_case *s = calloc((size_t)nseg, sizeof *s);
  zinc_opt_seg *dev = calloc((size_t)nseg, sizeof *dev), *host = calloc((size_t)nseg, sizeof *host);
  assert_true(s && dev && host);
  int64_t global = offset0;
  for (int k = 0; k < nseg; k++) {
    int st = store == 3 ? (k & 1 ? 2 : -1) : store;
    int mdt = st == 0 || st == 2 ? ZINC_BF16 : ZINC_F32;
    int sdt = st == 1 || st == 2 ? ZINC_BF16 : ZINC_F32;
    seg_init(d, &s[k], sizes[k], (size_t)(k % 4), mdt, sdt, gdt, pdt, &rng);
    int decay = k % 3 != 1, coef = (k / 3) % NGROUPS;
    dev[k] = seg_of(&s[k], 1, use_m, use_v, decay, coef, global);
    host[k] = seg_of(&s[k], 0, use_m, use_v, decay, coef, global);
    global += sizes[k];
  }
  size_t bad = 0;
  for (int step = 1; step <= STEPS && !bad; step++) {
    zinc_opt_coef coefs[NGROUPS];
    for (int g = 0; g < NGROUPS; g++) {
      zinc_opt_hparams h = c->h;
      h.lr *= 1.0 + g;
      h.weight_decay *= 0.5 * g;
      ZOK(zinc_opt_coef_init(&coefs[g], &h, step, 1.0 / (1.0 + step)));
      coefs[g].bf16_rounding = rounding;
      coefs[g].rounding_seed = seed;
      coefs[g].rounding_step = step;
    }
    bad += pass_both(d, coefs, dev, host, s, nseg, ZINC_OPT_PASS_UPDATE, use_m, use_v, c->name);
    if (c->h.kind == ZINC_OPT_LAMB)
      bad += pass_both(d, coefs, dev, host, s, nseg, ZINC_OPT_PASS_APPLY, use_m, use_v, c->name);
  }
  if (bad)
    fprintf(stderr, "%s: storage %d, %s, grad %s, param %s, offset %lld: %zu mismatches\n",
            c->name, store, rounding ? "stochastic" : "nearest even", dtype_label(gdt),
            pdt >= 0 ? dtype_label(pdt) : "none", (long long)offset0, bad);
  for (int k = 0; k < nseg; k++)
    seg_fini(d, &s[k]);
  free(s);
  free(dev);
  free(host);
  assert_int_equal(bad, 0);
}

static const int64_t odd_sizes[] = {1, 3, 4, 5, 4095, 4096, 4097, 12345, 65537, 0, 7};

static void every_kind_storage_and_rounding(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  int nseg = (int)(sizeof odd_sizes / sizeof odd_sizes[0]);
  for (int ci = 0; ci < NCASES; ci++)
    for (int store = 0; store < 3; store++)
      for (int rounding = 0; rounding < 2; rounding++)
        for (int gd = ZINC_F32; gd <= ZINC_BF16; gd++)
          for (int pd = -1; pd <= ZINC_BF16; pd += 1 + (pd == -1)) /* none, bf16 */
            run_segments(d, &cases[ci], odd_sizes, nseg, store, rounding, gd, pd, 1000,
                         0xbf16u + (uint64_t)(ci * 1000 + store * 100 + rounding * 10 + gd));
}

/* The draws' counter across 2^32, and fp32 and bf16 segments in one call. */
static void across_2_32_and_mixed(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  int nseg = (int)(sizeof odd_sizes / sizeof odd_sizes[0]);
  const int64_t near = ((int64_t)1 << 32) - 20000;
  for (int ci = 0; ci < NCASES; ci++) {
    run_segments(d, &cases[ci], odd_sizes, nseg, 2, ZINC_ROUND_STOCHASTIC, ZINC_BF16, ZINC_BF16,
                 near, 0x2320u + (uint64_t)ci);
    run_segments(d, &cases[ci], odd_sizes, nseg, 3, ZINC_ROUND_STOCHASTIC, ZINC_BF16, -1, 5,
                 0x2330u + (uint64_t)ci);
  }
}

static void rejects_bad_storage(void **state) {
  zinc_device *d = *state;
  optim_case cases[NCASES];
  all_cases(cases);
  zinc_opt_coef adam;
  ZOK(zinc_opt_coef_init(&adam, &cases[0].h, 1, 1.0));
  uint16_t x = 0x3f80;
  zinc_opt_seg seg = {.master_bf16 = &x, .exp_avg_bf16 = &x, .exp_avg_sq_bf16 = &x,
                      .grad = &x, .n = 1, .grad_dtype = ZINC_BF16,
                      .master_dtype = ZINC_F16, .state_dtype = ZINC_BF16};
  assert_int_equal(d->ops->optim(d, NULL, &adam, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  fprintf(stderr, "refused: %s\n", zinc_last_error());
  seg.master_dtype = ZINC_BF16;
  adam.bf16_rounding = 3;
  assert_int_equal(d->ops->optim(d, NULL, &adam, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL),
                   ZINC_ERR_INVALID);
  assert_true(x == 0x3f80);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_kind_storage_and_rounding),
      cmocka_unit_test(across_2_32_and_mixed),
      cmocka_unit_test(rejects_bad_storage),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
