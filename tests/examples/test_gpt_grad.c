/*
 * test_gpt_grad.c — the hand-written backward pass of the GPT example
 * against central finite differences, everything in double precision
 * (examples/gpt/gpt_model.c is compiled into this test with
 * -DGPT_REAL=double: the same source the trainer runs in float).
 *
 * Each case draws random inputs and parameters, defines a scalar loss (the
 * model's cross-entropy, or sum(out * R) for a random R so that every
 * output element matters), runs the backward pass once, and compares every
 * element of every gradient (or an evenly spaced sample of 400 for larger
 * tensors) with (loss(x + h) - loss(x - h)) / 2h, h = 1e-5.
 *
 * Tolerance: |analytic - numeric| <= 1e-7 + 1e-5 |numeric|. In double the
 * difference quotient is accurate to about h^2 |f'''| ~ 1e-10 plus rounding
 * eps |f| / h ~ 1e-10, so a correct backward lands near 1e-9; a wrong term
 * (a missing scale, a dropped path) is off by O(|gradient|) ~ 1e-3..1.
 * Shapes are small, odd and uneven on purpose: T not a multiple of the
 * heads, sizes that leave partial register tiles in the matmul, a vocabulary
 * with repeated tokens, position rows that are never used.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/rng.h"
#include "gpt_model.h"

_Static_assert(sizeof(real) == sizeof(double), "compile with -DGPT_REAL=double");

#define FD_STEP 1e-5
#define FD_ATOL 1e-7
#define FD_RTOL 1e-5
#define FD_MAX_CHECKS 400

/* ---------------------------------------------------------------- helpers */

static test_rng rng; /* each case seeds it */
static double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_u64(&rng) >> 11) * 0x1.0p-53;
}

static double *randn_array(int64_t n, double scale) {
  double *x = malloc((size_t)n * sizeof(double));
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++)
    x[i] = uniform(-scale, scale);
  return x;
}

static double *zeros(int64_t n) {
  double *x = calloc((size_t)n, sizeof(double));
  assert_non_null(x);
  return x;
}

static double dot_array(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

typedef double (*loss_fn)(void *ctx);

/* Compare grad with central differences of loss over the elements of x;
 * print the largest errors; return the number of elements out of tolerance. */
static int fd_check(const char *name, double *x, const double *grad, int64_t n,
                    loss_fn loss, void *ctx) {
  int64_t step = n > FD_MAX_CHECKS ? (n + FD_MAX_CHECKS - 1) / FD_MAX_CHECKS : 1;
  double max_abs = 0, max_rel = 0, max_grad = 0;
  int bad = 0;
  for (int64_t i = 0; i < n; i += step) {
    double saved = x[i];
    x[i] = saved + FD_STEP;
    double up = loss(ctx);
    x[i] = saved - FD_STEP;
    double down = loss(ctx);
    x[i] = saved;
    double numeric = (up - down) / (2 * FD_STEP), err = fabs(grad[i] - numeric);
    double rel = err / fmax(fabs(numeric), 1e-12);
    if (err > max_abs)
      max_abs = err;
    if (fabs(numeric) > 1e-6 && rel > max_rel)
      max_rel = rel;
    if (fabs(numeric) > max_grad)
      max_grad = fabs(numeric);
    if (err > FD_ATOL + FD_RTOL * fabs(numeric) && bad++ < 5)
      fprintf(stderr, "  MISMATCH %s[%lld]: analytic %.10g numeric %.10g\n", name,
              (long long)i, grad[i], numeric);
  }
  printf("  %-14s n=%-6lld max |grad| %.3e  max abs err %.2e  max rel err %.2e%s\n",
         name, (long long)n, max_grad, max_abs, max_rel, bad ? "  FAIL" : "");
  return bad;
}

/* ------------------------------------------------------------ primitives */

typedef struct {
  int N, C;
  double *x, *w, *b, *out, *mean, *rstd, *r;
} ln_case;

static double ln_loss(void *p) {
  ln_case *k = p;
  gpt_layernorm_forward(k->out, k->mean, k->rstd, k->x, k->w, k->b, k->N, k->C);
  return dot_array(k->out, k->r, (int64_t)k->N * k->C);
}

static void layernorm_matches_fd(void **state) {
  (void)state;
  rng.s = 1;
  ln_case k = {.N = 7, .C = 10};
  int64_t NC = (int64_t)k.N * k.C;
  k.x = randn_array(NC, 2.0), k.w = randn_array(k.C, 1.5), k.b = randn_array(k.C, 1.0);
  k.r = randn_array(NC, 1.0), k.out = zeros(NC), k.mean = zeros(k.N), k.rstd = zeros(k.N);
  double *dx = zeros(NC), *dw = zeros(k.C), *db = zeros(k.C);
  ln_loss(&k);
  gpt_layernorm_backward(dx, dw, db, k.r, k.x, k.w, k.mean, k.rstd, k.N, k.C);
  printf("layernorm N=%d C=%d\n", k.N, k.C);
  int bad = fd_check("inp", k.x, dx, NC, ln_loss, &k) +
            fd_check("weight", k.w, dw, k.C, ln_loss, &k) +
            fd_check("bias", k.b, db, k.C, ln_loss, &k);
  assert_int_equal(bad, 0);
  free(k.x), free(k.w), free(k.b), free(k.r), free(k.out), free(k.mean), free(k.rstd);
  free(dx), free(dw), free(db);
}

typedef struct {
  int N, C, OC;
  double *x, *w, *b, *out, *r;
} mm_case;

static double mm_loss(void *p) {
  mm_case *k = p;
  gpt_matmul_forward(k->out, k->x, k->w, k->b, k->N, k->C, k->OC);
  return dot_array(k->out, k->r, (int64_t)k->N * k->OC);
}

/* Shapes with full and partial register tiles in every dimension. */
static void matmul_matches_fd(void **state) {
  (void)state;
  static const int shapes[][3] = {{5, 9, 11}, {9, 16, 8}, {3, 300, 5}, {1, 1, 1}};
  rng.s = 2;
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    mm_case k = {.N = shapes[s][0], .C = shapes[s][1], .OC = shapes[s][2]};
    int64_t NC = (int64_t)k.N * k.C, OCC = (int64_t)k.OC * k.C, NOC = (int64_t)k.N * k.OC;
    k.x = randn_array(NC, 1.0), k.w = randn_array(OCC, 1.0), k.b = randn_array(k.OC, 1.0);
    k.r = randn_array(NOC, 1.0), k.out = zeros(NOC);
    double *dx = randn_array(NC, 1.0), *dx0 = malloc((size_t)NC * sizeof(double));
    double *dw = zeros(OCC), *db = zeros(k.OC);
    memcpy(dx0, dx, (size_t)NC * sizeof(double));
    mm_loss(&k);
    gpt_matmul_backward(dx, dw, db, k.r, k.x, k.w, k.N, k.C, k.OC);
    for (int64_t i = 0; i < NC; i++) /* it accumulates: take the old values off */
      dx[i] -= dx0[i];
    printf("matmul N=%d C=%d OC=%d\n", k.N, k.C, k.OC);
    int bad = fd_check("inp", k.x, dx, NC, mm_loss, &k) +
              fd_check("weight", k.w, dw, OCC, mm_loss, &k) +
              fd_check("bias", k.b, db, k.OC, mm_loss, &k);
    assert_int_equal(bad, 0);
    free(k.x), free(k.w), free(k.b), free(k.r), free(k.out);
    free(dx), free(dx0), free(dw), free(db);
  }
}

typedef struct {
  int B, T, C, NH;
  double *qkv, *att, *out, *r;
} att_case;

static double att_loss(void *p) {
  att_case *k = p;
  gpt_attention_forward(k->out, k->att, k->qkv, k->B, k->T, k->C, k->NH);
  return dot_array(k->out, k->r, (int64_t)k->B * k->T * k->C);
}

static void attention_matches_fd(void **state) {
  (void)state;
  rng.s = 3;
  att_case k = {.B = 2, .T = 5, .C = 12, .NH = 3}; /* T=5: not a multiple of NH */
  int64_t n_qkv = (int64_t)k.B * k.T * 3 * k.C, n_out = (int64_t)k.B * k.T * k.C;
  int64_t n_att = (int64_t)k.B * k.NH * k.T * k.T;
  k.qkv = randn_array(n_qkv, 1.5), k.r = randn_array(n_out, 1.0);
  k.out = zeros(n_out), k.att = zeros(n_att);
  double *dqkv = zeros(n_qkv), *datt = zeros(n_att), *dpre = zeros(n_att);
  att_loss(&k);
  gpt_attention_backward(dqkv, datt, dpre, k.r, k.qkv, k.att, k.B, k.T, k.C, k.NH);
  printf("attention B=%d T=%d C=%d NH=%d\n", k.B, k.T, k.C, k.NH);
  assert_int_equal(fd_check("qkv", k.qkv, dqkv, n_qkv, att_loss, &k), 0);
  free(k.qkv), free(k.r), free(k.out), free(k.att), free(dqkv), free(datt), free(dpre);
}

typedef struct {
  int64_t n;
  double *x, *out, *r;
} gelu_case;

static double gelu_loss(void *p) {
  gelu_case *k = p;
  gpt_gelu_forward(k->out, k->x, k->n);
  return dot_array(k->out, k->r, k->n);
}

static void gelu_matches_fd(void **state) {
  (void)state;
  rng.s = 4;
  gelu_case k = {.n = 61};
  k.x = zeros(k.n), k.out = zeros(k.n), k.r = randn_array(k.n, 1.0);
  for (int64_t i = 0; i < k.n; i++) /* -6 .. 6, both tails and the middle */
    k.x[i] = -6.0 + 12.0 * (double)i / (double)(k.n - 1) + 1e-3;
  double *dx = zeros(k.n);
  gelu_loss(&k);
  gpt_gelu_backward(dx, k.x, k.r, k.n);
  printf("gelu n=%lld\n", (long long)k.n);
  assert_int_equal(fd_check("inp", k.x, dx, k.n, gelu_loss, &k), 0);
  free(k.x), free(k.out), free(k.r), free(dx);
}

/* The MLP of a block on its own: fc -> GELU -> fc_proj. */
typedef struct {
  int N, C;
  double *x, *fc_w, *fc_b, *proj_w, *proj_b, *h, *hg, *out, *r;
} mlp_case;

static double mlp_loss(void *p) {
  mlp_case *k = p;
  gpt_matmul_forward(k->h, k->x, k->fc_w, k->fc_b, k->N, k->C, 4 * k->C);
  gpt_gelu_forward(k->hg, k->h, (int64_t)k->N * 4 * k->C);
  gpt_matmul_forward(k->out, k->hg, k->proj_w, k->proj_b, k->N, 4 * k->C, k->C);
  return dot_array(k->out, k->r, (int64_t)k->N * k->C);
}

static void mlp_matches_fd(void **state) {
  (void)state;
  rng.s = 5;
  mlp_case k = {.N = 6, .C = 7};
  int64_t NC = (int64_t)k.N * k.C, N4C = 4 * NC, W = 4 * (int64_t)k.C * k.C;
  k.x = randn_array(NC, 1.0), k.fc_w = randn_array(W, 0.5), k.fc_b = randn_array(4 * k.C, 0.5);
  k.proj_w = randn_array(W, 0.5), k.proj_b = randn_array(k.C, 0.5);
  k.h = zeros(N4C), k.hg = zeros(N4C), k.out = zeros(NC), k.r = randn_array(NC, 1.0);
  double *dx = zeros(NC), *dfc_w = zeros(W), *dfc_b = zeros(4 * k.C);
  double *dproj_w = zeros(W), *dproj_b = zeros(k.C), *dhg = zeros(N4C), *dh = zeros(N4C);
  mlp_loss(&k);
  gpt_matmul_backward(dhg, dproj_w, dproj_b, k.r, k.hg, k.proj_w, k.N, 4 * k.C, k.C);
  gpt_gelu_backward(dh, k.h, dhg, N4C);
  gpt_matmul_backward(dx, dfc_w, dfc_b, dh, k.x, k.fc_w, k.N, k.C, 4 * k.C);
  printf("mlp N=%d C=%d\n", k.N, k.C);
  int bad = fd_check("inp", k.x, dx, NC, mlp_loss, &k) +
            fd_check("fc_w", k.fc_w, dfc_w, W, mlp_loss, &k) +
            fd_check("fc_b", k.fc_b, dfc_b, 4 * k.C, mlp_loss, &k) +
            fd_check("fc_proj_w", k.proj_w, dproj_w, W, mlp_loss, &k) +
            fd_check("fc_proj_b", k.proj_b, dproj_b, k.C, mlp_loss, &k);
  assert_int_equal(bad, 0);
  free(k.x), free(k.fc_w), free(k.fc_b), free(k.proj_w), free(k.proj_b), free(k.h);
  free(k.hg), free(k.out), free(k.r), free(dx), free(dfc_w), free(dfc_b), free(dproj_w);
  free(dproj_b), free(dhg), free(dh);
}

/* --------------------------------------------------------------- modules */

/* Model pieces on a small config: vocabulary 11, max_seq_len 6 > T = 5
 * (the last position row gets no gradient), C = 12, 3 heads. */
typedef struct {
  gpt_config cfg;
  int B, T;
  gpt_params p, g;
  gpt_acts a;
  int32_t *inputs, *targets;
  double *x, *r;   // a block's or the head's input (B, T, C); output weights
  int which;       // module under test: 0 embed, 1 block 0, 2 head, 3 model
} model_case;

static void model_case_init(model_case *k, int which) {
  memset(k, 0, sizeof(*k));
  k->cfg = (gpt_config){.vocab_size = 11, .max_seq_len = 6, .num_layers = 2,
                        .num_heads = 3, .channels = 12};
  k->B = 2, k->T = 5, k->which = which;
  assert_int_equal(gpt_params_alloc(&k->p, &k->cfg), 0);
  assert_int_equal(gpt_params_alloc(&k->g, &k->cfg), 0);
  assert_int_equal(gpt_acts_alloc(&k->a, &k->cfg, k->B, k->T), 0);
  /* random values everywhere, larger than the GPT-2 init so that every
   * path (LayerNorm gains, biases, attention) carries real gradient */
  for (int64_t i = 0; i < k->p.num_params; i++)
    k->p.memory[i] = uniform(-0.5, 0.5);
  int n = k->B * k->T, NC = n * k->cfg.channels;
  k->inputs = malloc((size_t)n * sizeof(int32_t));
  k->targets = malloc((size_t)n * sizeof(int32_t));
  for (int i = 0; i < n; i++) {
    k->inputs[i] = (int32_t)(uniform(0, 1) * 4);  /* tokens 0..3: repeats */
    k->targets[i] = (int32_t)(uniform(0, 1) * k->cfg.vocab_size);
  }
  k->x = randn_array(NC, 1.0);
  k->r = randn_array(NC, 1.0);
}

static double model_case_loss(void *ctx) {
  model_case *k = ctx;
  const gpt_config *c = &k->cfg;
  int64_t NC = (int64_t)k->B * k->T * c->channels;
  switch (k->which) {
  case 0:
    gpt_embed_forward(c, &k->p.embed, &k->a, k->inputs, k->B, k->T);
    return dot_array(k->a.encoded, k->r, NC);
  case 1:
    gpt_block_forward(c, &k->p.blocks[0], &k->a, 0, k->x, k->B, k->T);
    return dot_array(k->a.blocks[0].out, k->r, NC);
  case 2:
    return gpt_head_forward(c, &k->p.head, k->p.embed.wte, &k->a, k->x, k->targets,
                            k->B, k->T);
  default:
    return gpt_model_forward(c, &k->p, &k->a, k->inputs, k->targets, k->B, k->T);
  }
}

static void model_case_free(model_case *k) {
  gpt_params_free(&k->p);
  gpt_params_free(&k->g);
  gpt_acts_free(&k->a);
  free(k->inputs), free(k->targets), free(k->x), free(k->r);
}

static int check_tensors(model_case *k, const char *prefix, real *const *params,
                         real *const *grads, const gpt_tensor_spec *specs, int count) {
  int bad = 0;
  for (int i = 0; i < count; i++) {
    char name[64];
    snprintf(name, sizeof(name), "%s%s", prefix, specs[i].name);
    bad += fd_check(name, params[i], grads[i], gpt_spec_numel(&specs[i]),
                    model_case_loss, k);
  }
  return bad;
}

static void embed_matches_fd(void **state) {
  (void)state;
  rng.s = 6;
  model_case k;
  model_case_init(&k, 0);
  model_case_loss(&k);
  memcpy(k.a.dres, k.r, (size_t)k.B * k.T * k.cfg.channels * sizeof(double));
  gpt_embed_backward(&k.cfg, &k.g.embed, &k.a, k.inputs, k.B, k.T);
  gpt_tensor_spec specs[GPT_EMBED_NPARAMS];
  gpt_embed_specs(&k.cfg, specs);
  printf("embed V=%d maxT=%d B=%d T=%d C=%d\n", k.cfg.vocab_size, k.cfg.max_seq_len,
         k.B, k.T, k.cfg.channels);
  assert_int_equal(check_tensors(&k, "", k.p.embed.t, k.g.embed.t, specs,
                                 GPT_EMBED_NPARAMS), 0);
  model_case_free(&k);
}

static void block_matches_fd(void **state) {
  (void)state;
  rng.s = 7;
  model_case k;
  model_case_init(&k, 1);
  int64_t NC = (int64_t)k.B * k.T * k.cfg.channels;
  model_case_loss(&k);
  memcpy(k.a.dres, k.r, (size_t)NC * sizeof(double));
  gpt_block_backward(&k.cfg, &k.p.blocks[0], &k.g.blocks[0], &k.a, 0, k.x, k.B, k.T);
  double *dx = zeros(NC);
  memcpy(dx, k.a.dres, (size_t)NC * sizeof(double));
  gpt_tensor_spec specs[GPT_BLOCK_NPARAMS];
  gpt_block_specs(&k.cfg, specs);
  printf("block B=%d T=%d C=%d NH=%d\n", k.B, k.T, k.cfg.channels, k.cfg.num_heads);
  int bad = check_tensors(&k, "", k.p.blocks[0].t, k.g.blocks[0].t, specs,
                          GPT_BLOCK_NPARAMS) +
            fd_check("inp", k.x, dx, NC, model_case_loss, &k);
  assert_int_equal(bad, 0);
  free(dx);
  model_case_free(&k);
}

/* Final LayerNorm + logits through the tied wte + cross-entropy. */
static void head_matches_fd(void **state) {
  (void)state;
  rng.s = 8;
  model_case k;
  model_case_init(&k, 2);
  int64_t NC = (int64_t)k.B * k.T * k.cfg.channels;
  model_case_loss(&k);
  gpt_head_backward(&k.cfg, &k.p.head, &k.g.head, k.p.embed.wte, k.g.embed.wte, &k.a,
                    k.x, k.targets, 1, k.B, k.T);
  double *dx = zeros(NC);
  memcpy(dx, k.a.dres, (size_t)NC * sizeof(double));
  gpt_tensor_spec specs[GPT_HEAD_NPARAMS], es[GPT_EMBED_NPARAMS];
  gpt_head_specs(&k.cfg, specs);
  gpt_embed_specs(&k.cfg, es);
  printf("head V=%d B=%d T=%d C=%d\n", k.cfg.vocab_size, k.B, k.T, k.cfg.channels);
  int bad = check_tensors(&k, "", k.p.head.t, k.g.head.t, specs, GPT_HEAD_NPARAMS) +
            fd_check("wte (tied)", k.p.embed.wte, k.g.embed.wte, gpt_spec_numel(&es[0]),
                     model_case_loss, &k) +
            fd_check("inp", k.x, dx, NC, model_case_loss, &k);
  assert_int_equal(bad, 0);
  free(dx);
  model_case_free(&k);
}

/* Every tensor of the whole model, the tied wte receiving both the
 * embedding's and the output projection's gradient. */
static void model_matches_fd(void **state) {
  (void)state;
  rng.s = 9;
  model_case k;
  model_case_init(&k, 3);
  model_case_loss(&k);
  gpt_model_backward(&k.cfg, &k.p, &k.g, &k.a, k.inputs, k.targets, k.B, k.T);
  gpt_tensor_spec es[GPT_EMBED_NPARAMS], bs[GPT_BLOCK_NPARAMS], hs[GPT_HEAD_NPARAMS];
  gpt_embed_specs(&k.cfg, es);
  gpt_block_specs(&k.cfg, bs);
  gpt_head_specs(&k.cfg, hs);
  printf("model V=%d L=%d C=%d NH=%d B=%d T=%d (%lld parameters)\n", k.cfg.vocab_size,
         k.cfg.num_layers, k.cfg.channels, k.cfg.num_heads, k.B, k.T,
         (long long)k.p.num_params);
  int bad = check_tensors(&k, "embed.", k.p.embed.t, k.g.embed.t, es, GPT_EMBED_NPARAMS);
  for (int l = 0; l < k.cfg.num_layers; l++) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "block%d.", l);
    bad += check_tensors(&k, prefix, k.p.blocks[l].t, k.g.blocks[l].t, bs,
                         GPT_BLOCK_NPARAMS);
  }
  bad += check_tensors(&k, "head.", k.p.head.t, k.g.head.t, hs, GPT_HEAD_NPARAMS);
  assert_int_equal(bad, 0);
  /* the unused last position row gets exactly zero */
  for (int i = 0; i < k.cfg.channels; i++)
    assert_true(k.g.embed.wpe[(size_t)(k.cfg.max_seq_len - 1) * k.cfg.channels + i] == 0);
  model_case_free(&k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layernorm_matches_fd), cmocka_unit_test(matmul_matches_fd),
      cmocka_unit_test(attention_matches_fd), cmocka_unit_test(gelu_matches_fd),
      cmocka_unit_test(mlp_matches_fd),       cmocka_unit_test(embed_matches_fd),
      cmocka_unit_test(block_matches_fd),     cmocka_unit_test(head_matches_fd),
      cmocka_unit_test(model_matches_fd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
