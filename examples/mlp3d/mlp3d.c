/*
 * mlp3d — 3D parallelism: pipeline stages x data-parallel ZeRO x tensor
 * parallelism, with a 1F1B schedule written against zinc's transfer API
 * (include/zinc.h, "Pipeline parallelism"; docs/3d.md).
 *
 * The model is tp_mlp's: L residual MLP blocks on D-wide vectors,
 *     Y = X + GeLU(X A) B + c
 * with A split by columns and B by rows over the tensor-parallel group
 * (Megatron-LM's column- then row-parallel layers; c replicated), and a
 * mean-squared-error loss against a fixed target function of the input.
 * Stage s of p holds blocks [s L / p, (s+1) L / p): it registers only
 * those with zinc, receives its input from stage s-1 and sends its output
 * to stage s+1, and gradients flow back the same way. The blocks' names
 * and initial values do not depend on p, d or the tensor-parallel rank's
 * stage, so every layout trains the same model.
 *
 * A step is m micro-batches (gradient_accumulation_steps) in 1F1B order
 * (pp_schedule.h, with the transfers): stage s runs min(p-s-1, m) forward
 * passes ahead, then alternates one forward and one backward, then drains
 * the backward passes; it holds the activations of at most p-s micro-
 * batches. zinc counts a micro-batch at each backward (zinc_backward_end,
 * zinc_step) and runs the optimizer at the m-th.
 *
 *   mpirun -n 8 mlp3d --pp 2 --tp 2 --zero 1 --micro 4 --steps 20
 *
 * With the same d, m and seed every p gives bitwise the same losses and
 * weights as p = 1 (fp32, ZeRO stages 0-2, offload none or cpu):
 * tests/examples/mlp3d_check.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pp_schedule.h"
#include "zinc.h"

typedef struct {
  int layers, d, f, batch, micro, steps, pp, tp, zero, memory;
  double clip;
  const char *offload, *nvme_path, *dump, *ckpt_dir;
  int save_every, resume;
} args;

typedef struct {
  const args *a;
  zinc_engine *e;
  int first, last;      /* this stage is the pipeline's first / last        */
  int l0, nl;           /* its blocks: global indices [l0, l0 + nl)           */
  int fr;               /* F / tp: this rank's share of the hidden width      */
  int slots;            /* micro-batches in flight: min(m, p - s)             */
  int step;             /* optimizer step being trained                        */
  zinc_module **mod;
  zinc_param **A, **B, **c;
  float **X;            /* [slot][j]: block j's input (batch, D); j = nl: output */
  float **Z;            /* [slot][j]: X A_r (batch, fr)                        */
  float *H, *dY, *dX, *T, *dZ;
  double loss;          /* last stage: sum of this step's micro-batch losses  */
  zinc_step_info info;  /* the last zinc_step's                               */
} stage;

static void die(const char *what) {
  fprintf(stderr, "mlp3d: %s: %s\n", what, zinc_last_error());
  exit(1);
}

static void check(zinc_status st, const char *what) {
  if (st != ZINC_OK)
    die(what);
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
static float uniform(uint64_t k) { return (float)((double)(mix(k) >> 11) / 9007199254740992.0 * 2 - 1); }

static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
static float gelu_grad(float x) {
  float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
}

typedef struct {
  const args *a;
  int tp_rank;
} init_ctx;

/* The full A and B are the same whatever the layout: tensor-parallel rank r
 * holds columns [r fr, (r+1) fr) of A and the same rows of B; the block's
 * global index (its name) seeds it. */
static zinc_status init_fn(const zinc_param *p, float *dst, int64_t numel, void *vctx) {
  const init_ctx *c = vctx;
  int layer = atoi(zinc_module_name(zinc_param_module(p)) + 5);
  if (zinc_param_name(p)[0] == 'c') { /* replicated: no tensor-parallel index */
    for (int64_t i = 0; i < numel; i++)
      dst[i] = 0.01f * uniform(((uint64_t)layer << 48) ^ (3ull << 40) ^ (uint64_t)i);
    return ZINC_OK;
  }
  int d = c->a->d, fr = c->a->f / c->a->tp, col0 = c->tp_rank * fr;
  int is_a = zinc_param_name(p)[0] == 'A';
  for (int64_t i = 0; i < numel; i++) {
    int row = is_a ? (int)(i / fr) : (int)(i / d) + col0;
    int col = is_a ? (int)(i % fr) + col0 : (int)(i % d);
    uint64_t key = ((uint64_t)layer << 48) ^ ((uint64_t)is_a << 40) ^ ((uint64_t)row << 20) ^ (uint64_t)col;
    dst[i] = uniform(key) / sqrtf((float)(is_a ? d : c->a->f));
  }
  return ZINC_OK;
}

/* Micro-batch k of step t on data-parallel rank r: the input, which the
 * first stage feeds in and the last stage needs for the target. */
static void input(const stage *S, int k, float *X) {
  const args *a = S->a;
  int dp = zinc_dp_size(S->e), r = zinc_dp_rank(S->e);
  for (int b = 0; b < a->batch; b++)
    for (int i = 0; i < a->d; i++) {
      uint64_t g = ((((uint64_t)S->step * a->micro + k) * dp + r) * a->batch + b) * 1000 + i;
      X[b * a->d + i] = uniform(g);
    }
}

static void target(const stage *S, int k, float *T) {
  const args *a = S->a;
  float *X = malloc((size_t)a->batch * a->d * sizeof *X);
  if (!X)
    die("out of memory");
  input(S, k, X);
  for (int b = 0; b < a->batch; b++)
    for (int i = 0; i < a->d; i++)
      T[b * a->d + i] = sinf(2 * X[b * a->d + i]) * 0.5f + X[b * a->d + (i + 1) % a->d] * 0.3f;
  free(X);
}

/* Z = X A_r, H = GeLU(Z) B_r (partial; the tensor-parallel group sums it) */
static void block_forward(const stage *S, const float *X, const float *A, const float *B,
                          float *Z, float *H) {
  int d = S->a->d, fr = S->fr;
  for (int b = 0; b < S->a->batch; b++) {
    for (int j = 0; j < fr; j++) {
      float s = 0;
      for (int i = 0; i < d; i++)
        s += X[b * d + i] * A[i * fr + j];
      Z[b * fr + j] = s;
    }
    for (int k = 0; k < d; k++) {
      float s = 0;
      for (int j = 0; j < fr; j++)
        s += gelu(Z[b * fr + j]) * B[j * d + k];
      H[b * d + k] = s;
    }
  }
}

/* Forward pass of micro-batch k through this stage's blocks; its input is
 * in slot k's X[0]. The last stage adds the loss. */
static void forward(stage *S, int k) {
  const args *a = S->a;
  size_t act = (size_t)a->batch * a->d;
  float **X = S->X + (size_t)(k % S->slots) * (S->nl + 1);
  float **Z = S->Z + (size_t)(k % S->slots) * S->nl;
  for (int j = 0; j < S->nl; j++) {
    check(zinc_module_fetch(S->e, S->mod[j]), "fetch");
    const float *A = zinc_param_data(S->A[j]), *B = zinc_param_data(S->B[j]);
    const float *c = zinc_param_data(S->c[j]);
    block_forward(S, X[j], A, B, Z[j], S->H);
    check(zinc_mp_allreduce_sum(S->e, S->H, (int64_t)act), "tensor-parallel all-reduce");
    for (size_t i = 0; i < act; i++)
      X[j + 1][i] = X[j][i] + S->H[i] + c[i % (size_t)a->d];
    check(zinc_module_release(S->e, S->mod[j]), "release");
  }
  if (S->last) {
    target(S, k, S->T);
    double loss = 0;
    for (size_t i = 0; i < act; i++) {
      float diff = X[S->nl][i] - S->T[i];
      loss += diff * diff;
    }
    S->loss += loss / (double)act;
  }
}

/* Backward pass of micro-batch k: the gradient of its output is in dY (the
 * last stage makes it from the loss); on return dY holds the gradient of
 * the stage's input and the micro-batch's backward is over in zinc. */
static void backward(stage *S, int k) {
  const args *a = S->a;
  size_t act = (size_t)a->batch * a->d;
  int d = a->d, fr = S->fr;
  float **X = S->X + (size_t)(k % S->slots) * (S->nl + 1);
  float **Z = S->Z + (size_t)(k % S->slots) * S->nl;
  if (S->last) {
    target(S, k, S->T);
    for (size_t i = 0; i < act; i++)
      S->dY[i] = 2 * (X[S->nl][i] - S->T[i]) / (float)act * zinc_loss_scale(S->e);
  }
  for (int j = S->nl - 1; j >= 0; j--) {
    check(zinc_module_fetch(S->e, S->mod[j]), "fetch");
    const float *A = zinc_param_data(S->A[j]), *B = zinc_param_data(S->B[j]);
    float *gA = zinc_param_grad(S->A[j]), *gB = zinc_param_grad(S->B[j]);
    float *gc = zinc_param_grad(S->c[j]);
    if (!gA || !gB || !gc)
      die("grad");
    for (int b = 0; b < a->batch; b++)
      for (int q = 0; q < d; q++)
        gc[q] += S->dY[b * d + q];
    for (int b = 0; b < a->batch; b++) {
      for (int j2 = 0; j2 < fr; j2++) {
        float z = Z[j][b * fr + j2], g = gelu(z), dg = 0;
        for (int q = 0; q < d; q++) {
          gB[j2 * d + q] += g * S->dY[b * d + q];
          dg += B[j2 * d + q] * S->dY[b * d + q];
        }
        S->dZ[b * fr + j2] = dg * gelu_grad(z);
      }
      for (int i = 0; i < d; i++) {
        float s2 = 0;
        for (int j2 = 0; j2 < fr; j2++) {
          gA[i * fr + j2] += X[j][b * d + i] * S->dZ[b * fr + j2];
          s2 += A[i * fr + j2] * S->dZ[b * fr + j2];
        }
        S->dX[b * d + i] = s2;
      }
    }
    check(zinc_mp_allreduce_sum(S->e, S->dX, (int64_t)act), "tensor-parallel all-reduce");
    for (size_t i = 0; i < act; i++)
      S->dY[i] += S->dX[i];
    check(zinc_module_grads_ready(S->e, S->mod[j]), "grads_ready");
    check(zinc_module_release(S->e, S->mod[j]), "release");
  }
  check(zinc_backward_end(S->e), "backward_end");
}

/* Where micro-batch k's activations live: slot k mod (p - s). */
static void *in_of(void *ctx, int k) {
  stage *S = ctx;
  return S->X[(size_t)(k % S->slots) * (S->nl + 1)];
}
static void *out_of(void *ctx, int k) {
  stage *S = ctx;
  return S->X[(size_t)(k % S->slots) * (S->nl + 1) + S->nl];
}
static void feed(void *ctx, int k) { input(ctx, k, in_of(ctx, k)); }
static void forward_cb(void *ctx, int k) { forward(ctx, k); }
static void backward_cb(void *ctx, int k) { backward(ctx, k); }
/* zinc counts the micro-batch; the m-th runs the optimizer, whose norm,
 * clipping and overflow skip cover every stage */
static zinc_status count_micro(void *ctx, int k) {
  stage *S = ctx;
  (void)k;
  return zinc_step(S->e, &S->info);
}

static uint64_t fnv(const void *data, size_t n) {
  const unsigned char *b = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Every parameter's bytes as a hash, one line each, from data-parallel
 * rank 0 of each (stage, tensor-parallel rank): DIR/stage<s>.tp<r>. */
static void dump(stage *S, const char *dir) {
  mkdir(dir, 0755);
  FILE *f = NULL;
  if (zinc_dp_rank(S->e) == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/stage%d.tp%d", dir, zinc_pp_rank(S->e), zinc_mp_rank(S->e));
    if (!(f = fopen(path, "w")))
      die("dump file");
  }
  for (int j = 0; j < S->nl; j++)
    for (int q = 0; q < zinc_module_param_count(S->mod[j]); q++) {
      zinc_param *p = zinc_module_param_at(S->mod[j], q);
      size_t n = (size_t)zinc_param_numel(p);
      float *w = malloc(n * sizeof *w);
      if (!w)
        die("out of memory");
      check(zinc_param_get_full(S->e, p, ZINC_STATE_PARAM, w), "get_full");
      if (f)
        fprintf(f, "%s.%s tp%d %016llx\n", zinc_module_name(S->mod[j]), zinc_param_name(p),
                zinc_mp_rank(S->e), (unsigned long long)fnv(w, n * sizeof *w));
      free(w);
    }
  if (f)
    fclose(f);
}

static void usage(void) {
  fprintf(stderr, "usage: mlp3d [--pp P] [--tp T] [--zero 0|1|2] [--offload none|cpu|nvme] "
          "[--nvme-path DIR] "
          "[--layers L] [--micro M] [--batch B] [--steps N] [--clip C] [--dump DIR] [--memory]\n"
          "             [--ckpt-dir DIR [--save-every K] [--resume]]\n");
  exit(2);
}

int main(int argc, char **argv) {
  args a = {.layers = 4, .d = 24, .f = 64, .batch = 8, .micro = 4, .steps = 20, .pp = 1,
            .tp = 1, .zero = 1, .clip = 1.0, .offload = "none",
            .nvme_path = "/tmp/zinc_nvme"};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v && strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i], "--memory") &&
        strcmp(argv[i], "--resume"))
      usage();
    if (!strcmp(argv[i], "--pp")) a.pp = atoi(v), i++;
    else if (!strcmp(argv[i], "--tp")) a.tp = atoi(v), i++;
    else if (!strcmp(argv[i], "--zero")) a.zero = atoi(v), i++;
    else if (!strcmp(argv[i], "--offload")) a.offload = v, i++;
    else if (!strcmp(argv[i], "--nvme-path")) a.nvme_path = v, i++;
    else if (!strcmp(argv[i], "--layers")) a.layers = atoi(v), i++;
    else if (!strcmp(argv[i], "--micro")) a.micro = atoi(v), i++;
    else if (!strcmp(argv[i], "--batch")) a.batch = atoi(v), i++;
    else if (!strcmp(argv[i], "--steps")) a.steps = atoi(v), i++;
    else if (!strcmp(argv[i], "--clip")) a.clip = atof(v), i++;
    else if (!strcmp(argv[i], "--dump")) a.dump = v, i++;
    else if (!strcmp(argv[i], "--memory")) a.memory = 1;
    else if (!strcmp(argv[i], "--ckpt-dir")) a.ckpt_dir = v, i++;
    else if (!strcmp(argv[i], "--save-every")) a.save_every = atoi(v), i++;
    else if (!strcmp(argv[i], "--resume")) a.resume = 1;
    else usage();
  }
  if (a.pp < 1 || a.tp < 1 || a.micro < 1 || a.batch < 1 || a.steps < 0 || a.layers < a.pp ||
      a.f % a.tp)
    usage();
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_accumulation_steps\": %d,"
           " \"gradient_clipping\": %g,"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
           " \"zero_optimization\": {\"stage\": %d, \"offload_optimizer\": {\"device\": \"%s\""
           "%s%s%s}}}",
           a.batch, a.micro, a.clip, a.zero, a.offload,
           strcmp(a.offload, "nvme") ? "" : ", \"nvme_path\": \"",
           strcmp(a.offload, "nvme") ? "" : a.nvme_path, strcmp(a.offload, "nvme") ? "" : "\"");
  zinc_config *cfg;
  check(zinc_config_parse(json, &cfg), "config");
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.pipeline_parallel_size = a.pp;
  opt.model_parallel_size = a.tp;
  zinc_engine *e;
  check(zinc_engine_create(cfg, &opt, &e), "engine");
  zinc_config_free(cfg);

  /* this stage's blocks, registered under their global names */
  stage S = {.a = &a, .e = e, .first = zinc_pp_is_first(e), .last = zinc_pp_is_last(e),
             .fr = a.f / a.tp};
  int s = zinc_pp_rank(e);
  S.l0 = s * a.layers / a.pp;
  S.nl = (s + 1) * a.layers / a.pp - S.l0;
  S.slots = a.pp - s < a.micro ? a.pp - s : a.micro;
  S.mod = calloc((size_t)S.nl, sizeof *S.mod);
  S.A = calloc((size_t)S.nl, sizeof *S.A);
  S.B = calloc((size_t)S.nl, sizeof *S.B);
  S.c = calloc((size_t)S.nl, sizeof *S.c);
  S.X = calloc((size_t)S.slots * (S.nl + 1), sizeof *S.X);
  S.Z = calloc((size_t)S.slots * S.nl, sizeof *S.Z);
  size_t act = (size_t)a.batch * a.d;
  for (int j = 0; j < S.nl; j++) {
    char name[32];
    snprintf(name, sizeof name, "block%d", S.l0 + j);
    S.mod[j] = zinc_module_add(e, name);
    int64_t sa[2] = {a.d, S.fr}, sb[2] = {S.fr, a.d}, sc[1] = {a.d};
    S.A[j] = zinc_param_add(e, S.mod[j], "A", ZINC_F32, 2, sa);
    S.B[j] = zinc_param_add(e, S.mod[j], "B", ZINC_F32, 2, sb);
    S.c[j] = zinc_param_add(e, S.mod[j], "c", ZINC_F32, 1, sc);
    if (!S.A[j] || !S.B[j] || !S.c[j])
      die("param");
    check(zinc_param_set_replicated(S.c[j], 1), "replicated");
    check(zinc_param_set_weight_decay(S.c[j], 0), "weight decay");
  }
  for (int k = 0; k < S.slots * (S.nl + 1); k++)
    S.X[k] = calloc(act, sizeof(float));
  for (int k = 0; k < S.slots * S.nl; k++)
    S.Z[k] = calloc((size_t)a.batch * S.fr, sizeof(float));
  S.H = calloc(act, 4), S.dY = calloc(act, 4), S.dX = calloc(act, 4), S.T = calloc(act, 4);
  S.dZ = calloc((size_t)a.batch * S.fr, 4);
  /* the activations of the micro-batches in flight: what a stage holds
   * beside zinc's state, p - s of them on stage s */
  uint64_t in_flight = (uint64_t)S.slots * ((uint64_t)(S.nl + 1) * act +
                                            (uint64_t)S.nl * a.batch * S.fr) * sizeof(float);
  check(zinc_memory_register_activations(e, "1F1B micro-batches in flight", ZINC_LOC_DEVICE,
                                         in_flight), "activation memory");
  init_ctx ic = {&a, zinc_mp_rank(e)};
  check(zinc_engine_build(e, init_fn, &ic), "build");

  pp_stage sched = {.ctx = &S, .count = (int64_t)act, .dtype = ZINC_F32, .input = in_of,
                    .output = out_of, .grad = S.dY, .feed = feed, .forward = forward_cb,
                    .backward = backward_cb, .done = count_micro};
  int world = zinc_world_size(e);
  double *all = calloc((size_t)world, sizeof *all);
  int first_step = 0;
  if (a.ckpt_dir && a.resume) { /* each stage loads its own part; the data goes on */
    check(zinc_load_checkpoint(e, a.ckpt_dir, NULL), "resume");
    first_step = (int)zinc_step_count(e);
    if (zinc_rank(e) == 0)
      printf("resumed from %s at step %d\n", a.ckpt_dir, first_step);
  }
  for (S.step = first_step; S.step < a.steps; S.step++) {
    /* one step: m micro-batches in 1F1B order (pp_schedule.h) */
    S.loss = 0;
    S.info = (zinc_step_info)ZINC_STEP_INFO_INIT;
    check(pp_1f1b(e, a.micro, &sched), "1F1B step");
    zinc_step_info info = S.info;
    /* the loss lives on the last stage: every rank's share gathered and
     * summed in rank order, so that any layout adds the same numbers in
     * the same order (the other stages add zeros) */
    double mine = S.last ? S.loss / a.micro : 0.0, mean = 0;
    check(zinc_allgather_host_scope(e, ZINC_SCOPE_WORLD, &mine, 1, all), "loss gather");
    for (int r = 0; r < world; r++)
      mean += all[r];
    mean /= (double)zinc_dp_size(e) * a.tp;
    if (zinc_rank(e) == 0)
      printf("step %3d  loss %.9f (%a)  grad norm %.6f (%a)%s\n", S.step, mean, mean,
             info.grad_norm, info.grad_norm, info.skipped ? "  skipped" : "");
    int done = S.step + 1;
    if (a.ckpt_dir && ((a.save_every > 0 && done % a.save_every == 0) || done == a.steps)) {
      char tag[32];
      snprintf(tag, sizeof tag, "global_step%d", done);
      check(zinc_save_checkpoint(e, a.ckpt_dir, tag), "save"); /* every stage's part */
    }
  }
  if (a.dump)
    dump(&S, a.dump);
  if (a.memory) { /* every rank's bytes: each stage's own parameters and activations */
    char *text = NULL;
    check(zinc_memory_report_all(e, 0, &text), "memory report");
    if (text)
      fputs(text, stdout);
    free(text);
  }
  zinc_engine_destroy(e);
  for (int k = 0; k < S.slots * (S.nl + 1); k++)
    free(S.X[k]);
  for (int k = 0; k < S.slots * S.nl; k++)
    free(S.Z[k]);
  free(S.mod), free(S.A), free(S.B), free(S.c), free(S.X), free(S.Z);
  free(S.H), free(S.dY), free(S.dX), free(S.T), free(S.dZ), free(all);
  return 0;
}
