/*
 * tp_mlp — tensor parallelism (Megatron-LM's column-parallel then
 * row-parallel linear layers) with ZeRO over the data-parallel group and
 * activation checkpointing with recomputation in the backward pass.
 *
 * The model: L residual MLP blocks on D-wide vectors,
 *     Y = X + GeLU(X A) B + c      A: (D, F) split by columns over the
 *                                  model-parallel group, B: (F, D) split by
 *                                  rows; each rank computes a partial
 *                                  G_r B_r and the group sums them. The
 *                                  bias c: (D) is added after the sum, so
 *                                  every rank holds all of it: it is marked
 *                                  replicated (zinc_param_set_replicated),
 *                                  and the gradient norm that clipping uses
 *                                  counts it once across the group.
 * and a mean-squared-error loss against a fixed target function of X.
 *
 *   mpirun -n 4 tp_mlp --mp 2 --stage 2 --steps 30 [--checkpoint]
 *          [--cpu-checkpointing] [--contiguous] [--export final.safetensors]
 *
 * With --checkpoint the forward pass keeps only each block's input X
 * (zinc_activation_save: 1/mp of it per rank) and the backward pass
 * restores it and recomputes the block; without it every activation is
 * kept. Both give bitwise the same training (fp32).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"

typedef struct {
  int layers, d, f, batch, steps, mp, stage, checkpoint, cpu_ckpt, contiguous;
  const char *export_path;
} args;

typedef struct {
  int fr;               /* F / mp: this rank's share of the hidden width */
  zinc_module **mod;
  zinc_param **A, **B;  /* (D, fr) and (fr, D) per layer */
  zinc_param **c;       /* (D) per layer, the same on every model-parallel rank */
  float **X;            /* block inputs (batch, D), kept when not checkpointing */
  float **Z;            /* X A_r (batch, fr), kept when not checkpointing */
} model;

static void die(const char *what) {
  fprintf(stderr, "tp_mlp: %s: %s\n", what, zinc_last_error());
  exit(1);
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
  int mp_rank;
} init_ctx;

/* The full A and B are the same whatever the model-parallel size: rank r
 * holds columns [r*fr, (r+1)*fr) of A and the same rows of B. */
static zinc_status init_fn(const zinc_param *p, float *dst, int64_t numel, void *vctx) {
  const init_ctx *c = vctx;
  int layer = atoi(zinc_module_name(zinc_param_module(p)) + 5);
  if (zinc_param_name(p)[0] == 'c') { /* replicated: no model-parallel index */
    for (int64_t i = 0; i < numel; i++)
      dst[i] = 0.01f * uniform(((uint64_t)layer << 48) ^ (3ull << 40) ^ (uint64_t)i);
    return ZINC_OK;
  }
  int d = c->a->d, fr = c->a->f / c->a->mp, col0 = c->mp_rank * fr;
  int is_a = zinc_param_name(p)[0] == 'A';
  for (int64_t i = 0; i < numel; i++) {
    int row = is_a ? (int)(i / fr) : (int)(i / d) + col0;
    int col = is_a ? (int)(i % fr) + col0 : (int)(i % d);
    uint64_t key = ((uint64_t)layer << 48) ^ ((uint64_t)is_a << 40) ^ ((uint64_t)row << 20) ^ (uint64_t)col;
    dst[i] = uniform(key) / sqrtf((float)(is_a ? d : c->a->f));
  }
  return ZINC_OK;
}

/* Z = X A_r, H = GeLU(Z) B_r (partial; the caller sums over the group) */
static void block_forward(const args *a, int fr, const float *X, const float *A, const float *B,
                          float *Z, float *H) {
  int d = a->d;
  for (int b = 0; b < a->batch; b++) {
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

int main(int argc, char **argv) {
  args a = {.layers = 4, .d = 24, .f = 64, .batch = 8, .steps = 30, .mp = 2, .stage = 2};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(argv[i], "--layers")) a.layers = atoi(v), i++;
    else if (!strcmp(argv[i], "--mp")) a.mp = atoi(v), i++;
    else if (!strcmp(argv[i], "--stage")) a.stage = atoi(v), i++;
    else if (!strcmp(argv[i], "--steps")) a.steps = atoi(v), i++;
    else if (!strcmp(argv[i], "--export")) a.export_path = v, i++;
    else if (!strcmp(argv[i], "--checkpoint")) a.checkpoint = 1;
    else if (!strcmp(argv[i], "--cpu-checkpointing")) a.cpu_ckpt = 1;
    else if (!strcmp(argv[i], "--contiguous")) a.contiguous = 1;
    else {
      fprintf(stderr, "usage: tp_mlp [--layers L] [--mp M] [--stage S] [--steps N] "
              "[--checkpoint] [--cpu-checkpointing] [--contiguous] [--export FILE]\n");
      return 2;
    }
  }
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": %d, \"gradient_clipping\": 1.0,"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
           " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0},"
           " \"activation_checkpointing\": {\"partition_activations\": true,"
           " \"cpu_checkpointing\": %s, \"contiguous_memory_optimization\": %s,"
           " \"number_checkpoints\": %d, \"profile\": true}}",
           a.batch, a.stage, a.cpu_ckpt ? "true" : "false", a.contiguous ? "true" : "false",
           a.layers);
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    die("config");
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.model_parallel_size = a.mp;
  opt.hidden_size = a.d;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    die("engine");
  zinc_config_free(cfg);
  if (a.f % a.mp)
    die("--mp must divide the hidden width 64");
  model m = {.fr = a.f / a.mp};
  m.mod = calloc((size_t)a.layers, sizeof *m.mod);
  m.A = calloc((size_t)a.layers, sizeof *m.A);
  m.B = calloc((size_t)a.layers, sizeof *m.B);
  m.c = calloc((size_t)a.layers, sizeof *m.c);
  m.X = calloc((size_t)a.layers + 1, sizeof *m.X);
  m.Z = calloc((size_t)a.layers, sizeof *m.Z);
  for (int l = 0; l < a.layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "block%d", l);
    m.mod[l] = zinc_module_add(e, name);
    int64_t sa[2] = {a.d, m.fr}, sb[2] = {m.fr, a.d};
    m.A[l] = zinc_param_add(e, m.mod[l], "A", ZINC_F32, 2, sa);
    m.B[l] = zinc_param_add(e, m.mod[l], "B", ZINC_F32, 2, sb);
    int64_t sc[1] = {a.d};
    m.c[l] = zinc_param_add(e, m.mod[l], "c", ZINC_F32, 1, sc);
    if (!m.A[l] || !m.B[l] || !m.c[l])
      die("param");
    if (zinc_param_set_replicated(m.c[l], 1) != ZINC_OK ||
        zinc_param_set_weight_decay(m.c[l], 0) != ZINC_OK)
      die("param flags");
  }
  for (int l = 0; l <= a.layers; l++)
    m.X[l] = calloc((size_t)a.batch * a.d, sizeof(float));
  for (int l = 0; l < a.layers; l++)
    m.Z[l] = calloc((size_t)a.batch * m.fr, sizeof(float));
  init_ctx ic = {&a, zinc_mp_rank(e)};
  if (zinc_engine_build(e, init_fn, &ic) != ZINC_OK)
    die("build");
  size_t act = (size_t)a.batch * a.d;
  float *H = calloc(act, 4), *dY = calloc(act, 4), *dX = calloc(act, 4), *T = calloc(act, 4);
  float *dZ = calloc((size_t)a.batch * m.fr, 4);
  int dp = zinc_dp_size(e), dpr = zinc_dp_rank(e);
  for (int s = 0; s < a.steps; s++) {
    /* data: this data-parallel rank's batch (the same on its model-parallel group) */
    for (int b = 0; b < a.batch; b++)
      for (int i = 0; i < a.d; i++) {
        uint64_t g = (((uint64_t)s * dp + dpr) * a.batch + b) * 1000 + i;
        m.X[0][b * a.d + i] = uniform(g);
      }
    for (int b = 0; b < a.batch; b++)
      for (int i = 0; i < a.d; i++)
        T[b * a.d + i] = sinf(2 * m.X[0][b * a.d + i]) * 0.5f + m.X[0][b * a.d + (i + 1) % a.d] * 0.3f;
    /* forward */
    for (int l = 0; l < a.layers; l++) {
      if (zinc_module_fetch(e, m.mod[l]) != ZINC_OK)
        die("fetch");
      const float *A = zinc_param_data(m.A[l]), *B = zinc_param_data(m.B[l]);
      const float *c = zinc_param_data(m.c[l]);
      if (a.checkpoint && zinc_activation_save(e, l, m.X[l], act * 4) != ZINC_OK)
        die("activation save");
      block_forward(&a, m.fr, m.X[l], A, B, m.Z[l], H);
      if (zinc_mp_allreduce_sum(e, H, (int64_t)act) != ZINC_OK)
        die("mp all-reduce");
      for (size_t i = 0; i < act; i++)
        m.X[l + 1][i] = m.X[l][i] + H[i] + c[i % (size_t)a.d];
      if (a.checkpoint && l > 0) { /* only the checkpoint survives */
        memset(m.X[l], 0, act * 4);
        memset(m.Z[l], 0, (size_t)a.batch * m.fr * 4);
      }
      zinc_module_release(e, m.mod[l]);
    }
    double loss = 0;
    for (size_t i = 0; i < act; i++) {
      float diff = m.X[a.layers][i] - T[i];
      loss += diff * diff;
      dY[i] = 2 * diff / (float)act * zinc_loss_scale(e);
    }
    /* backward */
    for (int l = a.layers - 1; l >= 0; l--) {
      if (zinc_module_fetch(e, m.mod[l]) != ZINC_OK)
        die("fetch");
      const float *A = zinc_param_data(m.A[l]), *B = zinc_param_data(m.B[l]);
      float *gA = zinc_param_grad(m.A[l]), *gB = zinc_param_grad(m.B[l]);
      float *gc = zinc_param_grad(m.c[l]);
      if (!gA || !gB || !gc)
        die("grad");
      /* dY is whole on every model-parallel rank, so c's gradient is the
       * same on each: what a replicated parameter needs */
      for (int b = 0; b < a.batch; b++)
        for (int k = 0; k < a.d; k++)
          gc[k] += dY[b * a.d + k];
      if (a.checkpoint) { /* bring the input back and recompute the block */
        if (zinc_activation_restore(e, l, m.X[l], act * 4) != ZINC_OK)
          die("activation restore");
        block_forward(&a, m.fr, m.X[l], A, B, m.Z[l], H);
        zinc_activation_free(e, l);
      }
      for (int b = 0; b < a.batch; b++) {
        for (int j = 0; j < m.fr; j++) {
          float z = m.Z[l][b * m.fr + j], g = gelu(z), dg = 0;
          for (int k = 0; k < a.d; k++) {
            gB[j * a.d + k] += g * dY[b * a.d + k];
            dg += B[j * a.d + k] * dY[b * a.d + k];
          }
          dZ[b * m.fr + j] = dg * gelu_grad(z);
        }
        for (int i = 0; i < a.d; i++) {
          float s2 = 0;
          for (int j = 0; j < m.fr; j++) {
            gA[i * m.fr + j] += m.X[l][b * a.d + i] * dZ[b * m.fr + j];
            s2 += A[i * m.fr + j] * dZ[b * m.fr + j];
          }
          dX[b * a.d + i] = s2;
        }
      }
      if (zinc_mp_allreduce_sum(e, dX, (int64_t)act) != ZINC_OK)
        die("mp all-reduce");
      for (size_t i = 0; i < act; i++)
        dY[i] += dX[i];
      if (zinc_module_grads_ready(e, m.mod[l]) != ZINC_OK)
        die("grads_ready");
      zinc_module_release(e, m.mod[l]);
    }
    if (zinc_backward_end(e) != ZINC_OK)
      die("backward_end");
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    if (zinc_step(e, &info) != ZINC_OK)
      die("step");
    double mean = loss / (double)act;
    zinc_allreduce_host(e, &mean, 1, ZINC_REDUCE_MEAN);
    if (zinc_rank(e) == 0 && (s % 10 == 0 || s == a.steps - 1))
      printf("step %3d  loss %.6f  grad norm %.4f\n", s, mean, info.grad_norm);
  }
  zinc_activation_stats as = ZINC_ACTIVATION_STATS_INIT;
  zinc_activation_stats_get(e, &as);
  zinc_mem_stats ms = ZINC_MEM_STATS_INIT;
  zinc_memory_stats(e, &ms);
  if (zinc_rank(e) == 0)
    printf("activation checkpoints: %lld saves (%llu bytes kept by this rank), %lld restores, "
           "%lld allocations, %.4f s saving, %.4f s restoring; peak activation bytes: device "
           "%llu, host %llu\n", (long long)as.saves, (unsigned long long)as.saved_bytes,
           (long long)as.restores, (long long)as.allocations, as.save_s, as.restore_s,
           (unsigned long long)ms.peak[ZINC_LOC_DEVICE][ZINC_MEM_ACTIVATIONS],
           (unsigned long long)ms.peak[ZINC_LOC_HOST][ZINC_MEM_ACTIVATIONS]);
  if (a.export_path) {
    /* each model-parallel rank exports its shard: FILE.mp<r> */
    char path[1024];
    snprintf(path, sizeof path, "%s.mp%d", a.export_path, zinc_mp_rank(e));
    if (zinc_export_safetensors(e, path, ZINC_F32) != ZINC_OK)
      die("export");
  }
  zinc_engine_destroy(e);
  for (int l = 0; l <= a.layers; l++)
    free(m.X[l]);
  for (int l = 0; l < a.layers; l++)
    free(m.Z[l]);
  free(m.mod);
  free(m.A);
  free(m.B);
  free(m.c);
  free(m.X);
  free(m.Z);
  free(H);
  free(dY);
  free(dX);
  free(T);
  free(dZ);
  return 0;
}
