/*
 * gpt_model.c — forward and backward of the small GPT in gpt_model.h:
 * tensor specs and initialisation, the primitives (LayerNorm, matmul,
 * causal attention, GELU), the three module kinds (embed, block, head) and
 * the whole model composed from them.
 *
 * Every loop that OpenMP splits writes disjoint outputs, and every sum is
 * taken in an order fixed by the source (dot products keep eight partial
 * sums combined pairwise), so the bits do not depend on the thread count.
 * The file is also compiled with -DGPT_REAL=double for the gradient check;
 * <tgmath.h> picks expf/exp, tanhf/tanh, ... from `real`.
 */
#include "gpt_model.h"

#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#define GPT_LN_EPS ((real)1e-5)
#define GPT_GELU_SCALE ((real)0.7978845608028654) /* sqrt(2 / pi) */
#define GPT_GELU_CUBIC ((real)0.044715)

/* ----------------------------------------------------------- specs, init */

static gpt_tensor_spec spec_vec(const char *name, int64_t n, gpt_init_kind init) {
  gpt_tensor_spec s = {name, 1, {n, 1}, init, 0.0f, 0};
  return s;
}

static gpt_tensor_spec spec_mat(const char *name, int64_t rows, int64_t cols,
                                float std) {
  gpt_tensor_spec s = {name, 2, {rows, cols}, GPT_INIT_NORMAL, std, 1};
  return s;
}

void gpt_embed_specs(const gpt_config *c, gpt_tensor_spec out[GPT_EMBED_NPARAMS]) {
  out[GPT_EMBED_WTE] = spec_mat("wte", c->vocab_size, c->channels, 0.02f);
  out[GPT_EMBED_WPE] = spec_mat("wpe", c->max_seq_len, c->channels, 0.01f);
}

/* GPT-2's initialisation: N(0, 0.02), the two projections that write into
 * the residual stream scaled by 1/sqrt(2L). */
void gpt_block_specs(const gpt_config *c, gpt_tensor_spec out[GPT_BLOCK_NPARAMS]) {
  int64_t C = c->channels;
  float proj_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  out[GPT_BLOCK_LN1_W] = spec_vec("ln1_w", C, GPT_INIT_ONES);
  out[GPT_BLOCK_LN1_B] = spec_vec("ln1_b", C, GPT_INIT_ZEROS);
  out[GPT_BLOCK_QKV_W] = spec_mat("qkv_w", 3 * C, C, 0.02f);
  out[GPT_BLOCK_QKV_B] = spec_vec("qkv_b", 3 * C, GPT_INIT_ZEROS);
  out[GPT_BLOCK_ATTN_PROJ_W] = spec_mat("attn_proj_w", C, C, proj_std);
  out[GPT_BLOCK_ATTN_PROJ_B] = spec_vec("attn_proj_b", C, GPT_INIT_ZEROS);
  out[GPT_BLOCK_LN2_W] = spec_vec("ln2_w", C, GPT_INIT_ONES);
  out[GPT_BLOCK_LN2_B] = spec_vec("ln2_b", C, GPT_INIT_ZEROS);
  out[GPT_BLOCK_FC_W] = spec_mat("fc_w", 4 * C, C, 0.02f);
  out[GPT_BLOCK_FC_B] = spec_vec("fc_b", 4 * C, GPT_INIT_ZEROS);
  out[GPT_BLOCK_FC_PROJ_W] = spec_mat("fc_proj_w", C, 4 * C, proj_std);
  out[GPT_BLOCK_FC_PROJ_B] = spec_vec("fc_proj_b", C, GPT_INIT_ZEROS);
}

void gpt_head_specs(const gpt_config *c, gpt_tensor_spec out[GPT_HEAD_NPARAMS]) {
  out[GPT_HEAD_LNF_W] = spec_vec("lnf_w", c->channels, GPT_INIT_ONES);
  out[GPT_HEAD_LNF_B] = spec_vec("lnf_b", c->channels, GPT_INIT_ZEROS);
}

int64_t gpt_spec_numel(const gpt_tensor_spec *s) {
  return s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1];
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so log() below is finite. */
static double uniform01(uint64_t *state) {
  return ((double)(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
}

void gpt_tensor_init(const gpt_tensor_spec *s, uint64_t seed, uint64_t stream,
                     real *dst) {
  int64_t n = gpt_spec_numel(s);
  if (s->init != GPT_INIT_NORMAL) {
    for (int64_t i = 0; i < n; i++)
      dst[i] = s->init == GPT_INIT_ONES ? (real)1 : (real)0;
    return;
  }
  uint64_t state = seed ^ (stream * 0xd1b54a32d192ed03ull);
  splitmix64(&state);
  for (int64_t i = 0; i < n; i += 2) { /* Box-Muller, two values per draw */
    double r = sqrt(-2.0 * log(uniform01(&state)));
    double theta = 6.283185307179586 * uniform01(&state);
    dst[i] = (real)(s->std * r * cos(theta));
    if (i + 1 < n)
      dst[i + 1] = (real)(s->std * r * sin(theta));
  }
}

/* --------------------------------------------------- whole-model params */

int gpt_params_alloc(gpt_params *p, const gpt_config *c) {
  gpt_tensor_spec es[GPT_EMBED_NPARAMS], bs[GPT_BLOCK_NPARAMS], hs[GPT_HEAD_NPARAMS];
  gpt_embed_specs(c, es);
  gpt_block_specs(c, bs);
  gpt_head_specs(c, hs);
  int64_t n = 0;
  for (int i = 0; i < GPT_EMBED_NPARAMS; i++)
    n += gpt_spec_numel(&es[i]);
  for (int i = 0; i < GPT_BLOCK_NPARAMS; i++)
    n += (int64_t)c->num_layers * gpt_spec_numel(&bs[i]);
  for (int i = 0; i < GPT_HEAD_NPARAMS; i++)
    n += gpt_spec_numel(&hs[i]);

  memset(p, 0, sizeof(*p));
  p->memory = calloc((size_t)n, sizeof(real));
  p->blocks = calloc((size_t)c->num_layers, sizeof(gpt_block_params));
  if (!p->memory || !p->blocks) {
    gpt_params_free(p);
    return -1;
  }
  p->num_params = n;
  real *next = p->memory;
  for (int i = 0; i < GPT_EMBED_NPARAMS; i++, next += gpt_spec_numel(&es[i - 1]))
    p->embed.t[i] = next;
  for (int l = 0; l < c->num_layers; l++)
    for (int i = 0; i < GPT_BLOCK_NPARAMS; i++, next += gpt_spec_numel(&bs[i - 1]))
      p->blocks[l].t[i] = next;
  for (int i = 0; i < GPT_HEAD_NPARAMS; i++, next += gpt_spec_numel(&hs[i - 1]))
    p->head.t[i] = next;
  return 0;
}

void gpt_params_init(gpt_params *p, const gpt_config *c, uint64_t seed) {
  gpt_tensor_spec es[GPT_EMBED_NPARAMS], bs[GPT_BLOCK_NPARAMS], hs[GPT_HEAD_NPARAMS];
  gpt_embed_specs(c, es);
  gpt_block_specs(c, bs);
  gpt_head_specs(c, hs);
  for (int i = 0; i < GPT_EMBED_NPARAMS; i++)
    gpt_tensor_init(&es[i], seed, (uint64_t)i, p->embed.t[i]);
  for (int l = 0; l < c->num_layers; l++)
    for (int i = 0; i < GPT_BLOCK_NPARAMS; i++)
      gpt_tensor_init(&bs[i], seed, (uint64_t)(l + 1) * 64 + (uint64_t)i,
                      p->blocks[l].t[i]);
  for (int i = 0; i < GPT_HEAD_NPARAMS; i++)
    gpt_tensor_init(&hs[i], seed, (uint64_t)(c->num_layers + 1) * 64 + (uint64_t)i,
                    p->head.t[i]);
}

void gpt_params_free(gpt_params *p) {
  free(p->memory);
  free(p->blocks);
  memset(p, 0, sizeof(*p));
}

/* ----------------------------------------------------------- activations */

/* Lay the buffers out from base (or, with base NULL, only count them). */
static size_t acts_layout(gpt_acts *a, const gpt_config *c, int B, int T,
                          real *base) {
  size_t C = (size_t)c->channels, V = (size_t)c->vocab_size;
  size_t N = (size_t)B * (size_t)T, NHTT = (size_t)B * (size_t)c->num_heads * T * T;
  size_t off = 0;
#define TAKE(n) (off += (n), base ? base + off - (n) : NULL)
  a->encoded = TAKE(N * C);
  for (int l = 0; l < c->num_layers; l++) {
    gpt_block_acts *b = &a->blocks[l];
    b->ln1 = TAKE(N * C);
    b->ln1_mean = TAKE(N);
    b->ln1_rstd = TAKE(N);
    b->qkv = TAKE(N * 3 * C);
    b->att = TAKE(NHTT);
    b->atty = TAKE(N * C);
    b->residual2 = TAKE(N * C);
    b->ln2 = TAKE(N * C);
    b->ln2_mean = TAKE(N);
    b->ln2_rstd = TAKE(N);
    b->fch = TAKE(N * 4 * C);
    b->fch_gelu = TAKE(N * 4 * C);
    b->out = TAKE(N * C);
  }
  a->lnf = TAKE(N * C);
  a->lnf_mean = TAKE(N);
  a->lnf_rstd = TAKE(N);
  a->probs = TAKE(N * V);
  a->losses = TAKE(N);
  a->dres = TAKE(N * C);
  a->dres2 = TAKE(N * C);
  a->dln = TAKE(N * C);
  a->datty = TAKE(N * C);
  a->dqkv = TAKE(N * 3 * C);
  a->datt = TAKE(NHTT);
  a->dpreatt = TAKE(NHTT);
  a->dfch = TAKE(N * 4 * C);
  a->dfch_gelu = TAKE(N * 4 * C);
  a->dlogits = TAKE(N * V);
#undef TAKE
  return off;
}

int gpt_acts_alloc(gpt_acts *a, const gpt_config *c, int B, int T) {
  memset(a, 0, sizeof(*a));
  a->blocks = calloc((size_t)c->num_layers, sizeof(gpt_block_acts));
  if (!a->blocks)
    return -1;
  size_t count = acts_layout(a, c, B, T, NULL);
  a->memory = calloc(count, sizeof(real));
  if (!a->memory) {
    gpt_acts_free(a);
    return -1;
  }
  acts_layout(a, c, B, T, a->memory);
  a->B = B;
  a->T = T;
  a->bytes = count * sizeof(real);
  return 0;
}

void gpt_acts_free(gpt_acts *a) {
  free(a->memory);
  free(a->blocks);
  memset(a, 0, sizeof(*a));
}

/* ------------------------------------------------------------ primitives */

/* Dot product with eight partial sums in a fixed order: vectorisable
 * without reassociating, and the same bits for every thread count. */
static real sum8(const real *acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static real dot(const real *a, const real *b, int n) {
  real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++)
      acc[k] += a[i + k] * b[i + k];
  for (; i < n; i++)
    acc[i & 7] += a[i] * b[i];
  return sum8(acc);
}

/* y += alpha * x */
static void axpy(real *y, real alpha, const real *x, int n) {
  for (int i = 0; i < n; i++)
    y[i] += alpha * x[i];
}

void gpt_layernorm_forward(real *out, real *mean, real *rstd, const real *inp,
                           const real *weight, const real *bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const real *x = inp + (size_t)n * C;
    real m = 0;
    for (int i = 0; i < C; i++)
      m += x[i];
    m /= (real)C;
    real v = 0;
    for (int i = 0; i < C; i++)
      v += (x[i] - m) * (x[i] - m);
    v /= (real)C;
    real s = (real)1 / sqrt(v + GPT_LN_EPS);
    real *o = out + (size_t)n * C;
    for (int i = 0; i < C; i++)
      o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

void gpt_layernorm_backward(real *dinp, real *dweight, real *dbias,
                            const real *dout, const real *inp,
                            const real *weight, const real *mean,
                            const real *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const real *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    real m = mean[n], s = rstd[n];
    /* dnorm = dy * w; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
    real dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = 0; i < C; i++) {
      real norm = (x[i] - m) * s;
      real dnorm = weight[i] * dy[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= (real)C;
    dnorm_norm_mean /= (real)C;
    real *dx = dinp + (size_t)n * C;
    for (int i = 0; i < C; i++) {
      real norm = (x[i] - m) * s;
      real dnorm = weight[i] * dy[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  /* Parameter gradients sum over rows: one pass in row order. */
  for (int n = 0; n < N; n++) {
    const real *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    real m = mean[n], s = rstd[n];
    for (int i = 0; i < C; i++) {
      dweight[i] += (x[i] - m) * s * dy[i];
      dbias[i] += dy[i];
    }
  }
}

/* ---- matmuls: one register-tile kernel for all three products.
 * A tile of MR x NR outputs stays in registers (vectors of VL lanes, GCC's
 * vector extension: element-wise, so exact) while the kernel runs over the
 * reduction index k. Every output is summed over k in plain order, the
 * same bits as one element at a time, whichever path or thread computes it. */
typedef real vec __attribute__((vector_size(16)));
typedef real vec_unaligned __attribute__((vector_size(16), aligned(sizeof(real)), may_alias));
#define VL ((int)(sizeof(vec) / sizeof(real)))
#define MR 4             /* rows of a register tile */
#define NR (2 * VL)      /* columns: two vectors */
#define KC 256           /* reduction chunk of the forward's transposed weights */

static inline vec vload(const real *p) { return *(const vec_unaligned *)p; }
static inline void vstore(real *p, vec v) { *(vec_unaligned *)p = v; }

/* c[r][j] += sum over k of a(r, k) * b(k, j), for r < rows <= MR and
 * j < cols <= NR, where c[r][j] = c[r * ldc + j], a(r, k) = a[r * ars + k * aks]
 * and b(k, j) = b[k * bks + j]. */
static void tile_accumulate(real *c, size_t ldc, const real *a, size_t ars,
                            size_t aks, const real *b, size_t bks, int K, int rows,
                            int cols) {
  if (rows < MR || cols < NR) {
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < cols; j++) {
        real sum = c[(size_t)r * ldc + j];
        for (int k = 0; k < K; k++)
          sum += b[(size_t)k * bks + j] * a[(size_t)r * ars + (size_t)k * aks];
        c[(size_t)r * ldc + j] = sum;
      }
    return;
  }
  real *c0 = c, *c1 = c + ldc, *c2 = c + 2 * ldc, *c3 = c + 3 * ldc;
  vec c00 = vload(c0), c01 = vload(c0 + VL), c10 = vload(c1), c11 = vload(c1 + VL);
  vec c20 = vload(c2), c21 = vload(c2 + VL), c30 = vload(c3), c31 = vload(c3 + VL);
  for (int k = 0; k < K; k++) {
    const real *bk = b + (size_t)k * bks, *ak = a + (size_t)k * aks;
    vec b0 = vload(bk), b1 = vload(bk + VL);
    real a0 = ak[0], a1 = ak[ars], a2 = ak[2 * ars], a3 = ak[3 * ars];
    c00 += b0 * a0, c01 += b1 * a0;
    c10 += b0 * a1, c11 += b1 * a1;
    c20 += b0 * a2, c21 += b1 * a2;
    c30 += b0 * a3, c31 += b1 * a3;
  }
  vstore(c0, c00), vstore(c0 + VL, c01), vstore(c1, c10), vstore(c1 + VL, c11);
  vstore(c2, c20), vstore(c2 + VL, c21), vstore(c3, c30), vstore(c3 + VL, c31);
}

static int min_int(int a, int b) { return a < b ? a : b; }

void gpt_matmul_forward(real *out, const real *inp, const real *weight,
                        const real *bias, int N, int C, int OC) {
  /* Each thread owns NR output columns; their weight rows are transposed
   * KC at a time so that the kernel reads them as contiguous vectors. */
  int blocks = (OC + NR - 1) / NR;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    int o0 = blk * NR, cols = min_int(NR, OC - o0);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < cols; j++)
        out[(size_t)n * OC + o0 + j] = 0;
    for (int k0 = 0; k0 < C; k0 += KC) {
      int kc = min_int(KC, C - k0);
      real wt[KC * NR]; /* wt[k * NR + j] = weight[o0 + j][k0 + k] */
      for (int k = 0; k < kc; k++)
        for (int j = 0; j < NR; j++)
          wt[k * NR + j] = j < cols ? weight[(size_t)(o0 + j) * C + k0 + k] : (real)0;
      for (int n0 = 0; n0 < N; n0 += MR)
        tile_accumulate(out + (size_t)n0 * OC + o0, (size_t)OC,
                        inp + (size_t)n0 * C + k0, (size_t)C, 1, wt, NR, kc,
                        min_int(MR, N - n0), cols);
    }
    if (bias)
      for (int n = 0; n < N; n++)
        for (int j = 0; j < cols; j++)
          out[(size_t)n * OC + o0 + j] += bias[o0 + j];
  }
}

/* c (rows, cols) += a (rows, K) @ b (K, cols), one register tile per task;
 * a(r, k) = a[r * ars + k * aks], b(k, j) = b[k * bks + j]. */
static void matmul_accumulate(real *c, int rows, int cols, const real *a, size_t ars,
                              size_t aks, const real *b, size_t bks, int K) {
  int row_tiles = (rows + MR - 1) / MR, col_blocks = (cols + NR - 1) / NR;
#pragma omp parallel for collapse(2) schedule(static)
  for (int t = 0; t < row_tiles; t++)
    for (int blk = 0; blk < col_blocks; blk++)
      tile_accumulate(c + (size_t)t * MR * cols + blk * NR, (size_t)cols,
                      a + (size_t)t * MR * ars, ars, aks, b + blk * NR, bks, K,
                      min_int(MR, rows - t * MR), min_int(NR, cols - blk * NR));
}

void gpt_matmul_backward(real *dinp, real *dweight, real *dbias,
                         const real *dout, const real *inp, const real *weight,
                         int N, int C, int OC) {
  if (dinp) /* dinp (N, C) += dout (N, OC) @ weight (OC, C) */
    matmul_accumulate(dinp, N, C, dout, (size_t)OC, 1, weight, (size_t)C, OC);
  if (dweight) /* dweight (OC, C) += dout^T (OC, N) @ inp (N, C) */
    matmul_accumulate(dweight, OC, C, dout, 1, (size_t)OC, inp, (size_t)C, N);
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
      real db = 0;
      for (int n = 0; n < N; n++)
        db += dout[(size_t)n * OC + o];
      dbias[o] += db;
    }
  }
}

/* qkv row of position t: [q (C) | k (C) | v (C)], head h at offset h*hs. */
void gpt_attention_forward(real *out, real *att, const real *qkv, int B, int T,
                           int C, int NH) {
  int hs = C / NH;
  real scale = (real)1 / sqrt((real)hs);
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const real *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        real *row = att + (((size_t)b * NH + h) * T + t) * T;
        real maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const real *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          row[t2] = dot(q, k, hs) * scale;
          if (row[t2] > maxval)
            maxval = row[t2];
        }
        real sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          row[t2] = exp(row[t2] - maxval);
          sum += row[t2];
        }
        real inv = (real)1 / sum;
        for (int t2 = 0; t2 < T; t2++)
          row[t2] = t2 <= t ? row[t2] * inv : (real)0;
        real *y = out + ((size_t)b * T + t) * C + h * hs;
        memset(y, 0, (size_t)hs * sizeof(real));
        for (int t2 = 0; t2 <= t; t2++)
          axpy(y, row[t2], qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs, hs);
      }
}

/* One task per (b, h): the keys and values of a head receive gradient from
 * every later query, so a head is never split between threads. */
void gpt_attention_backward(real *dqkv, real *datt, real *dpreatt,
                            const real *dout, const real *qkv, const real *att,
                            int B, int T, int C, int NH) {
  int hs = C / NH;
  real scale = (real)1 / sqrt((real)hs);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        size_t row_off = (((size_t)b * NH + h) * T + t) * T;
        const real *p = att + row_off;
        real *dp = datt + row_off, *dz = dpreatt + row_off;
        const real *dy = dout + ((size_t)b * T + t) * C + h * hs;
        const real *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        real *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        /* y = sum p[t2] v[t2]: dp[t2] = dy . v[t2]; dv[t2] += p[t2] dy */
        real pdp = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          size_t kv = ((size_t)b * T + t2) * 3 * C + h * hs;
          dp[t2] = dot(dy, qkv + kv + 2 * C, hs);
          axpy(dqkv + kv + 2 * C, p[t2], dy, hs);
          pdp += p[t2] * dp[t2];
        }
        /* softmax: dz = p * (dp - sum p dp); z = scale q . k */
        for (int t2 = 0; t2 <= t; t2++) {
          size_t kv = ((size_t)b * T + t2) * 3 * C + h * hs;
          dz[t2] = p[t2] * (dp[t2] - pdp);
          axpy(dq, dz[t2] * scale, qkv + kv + C, hs);
          axpy(dqkv + kv + C, dz[t2] * scale, q, hs);
        }
      }
}

/* GPT-2's tanh approximation, gelu(x) = x/2 (1 + tanh(u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3). tanh(u) is taken as 1 - 2/(e^2u + 1):
 * one exp instead of libm's tanh (the model's largest cost after the
 * matmuls), exact at both tails (e^2u -> inf gives 1, -> 0 gives -1). */
static inline real gelu_tanh(real x) {
  real u = GPT_GELU_SCALE * (x + GPT_GELU_CUBIC * x * x * x);
  return (real)1 - (real)2 / (exp((real)2 * u) + (real)1);
}

void gpt_gelu_forward(real *out, const real *inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    out[i] = (real)0.5 * inp[i] * ((real)1 + gelu_tanh(inp[i]));
}

void gpt_gelu_backward(real *dinp, const real *inp, const real *dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    real x = inp[i];
    real th = gelu_tanh(x);
    real du = GPT_GELU_SCALE * ((real)1 + (real)3 * GPT_GELU_CUBIC * x * x);
    dinp[i] += ((real)0.5 * ((real)1 + th) + (real)0.5 * x * ((real)1 - th * th) * du) *
               dout[i];
  }
}

/* --------------------------------------------------------------- modules */

void gpt_embed_forward(const gpt_config *c, const gpt_embed_params *p,
                       gpt_acts *a, const int32_t *tokens, int B, int T) {
  int C = c->channels;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * T; n++) {
    const real *te = p->wte + (size_t)tokens[n] * C;
    const real *pe = p->wpe + (size_t)(n % T) * C;
    real *x = a->encoded + (size_t)n * C;
    for (int i = 0; i < C; i++)
      x[i] = te[i] + pe[i];
  }
}

void gpt_embed_backward(const gpt_config *c, const gpt_embed_params *grad,
                        const gpt_acts *a, const int32_t *tokens, int B, int T) {
  int C = c->channels;
  /* Rows of wte repeat across positions: one pass in row order. */
  for (int n = 0; n < B * T; n++) {
    const real *d = a->dres + (size_t)n * C;
    if (grad->wte) /* NULL: wte frozen */
      axpy(grad->wte + (size_t)tokens[n] * C, 1, d, C);
    axpy(grad->wpe + (size_t)(n % T) * C, 1, d, C);
  }
}

void gpt_block_forward(const gpt_config *c, const gpt_block_params *p,
                       gpt_acts *a, int l, const real *inp, int B, int T) {
  int C = c->channels, NH = c->num_heads, N = B * T;
  gpt_block_acts *k = &a->blocks[l];
  gpt_layernorm_forward(k->ln1, k->ln1_mean, k->ln1_rstd, inp, p->ln1_w, p->ln1_b, N, C);
  gpt_matmul_forward(k->qkv, k->ln1, p->qkv_w, p->qkv_b, N, C, 3 * C);
  gpt_attention_forward(k->atty, k->att, k->qkv, B, T, C, NH);
  gpt_matmul_forward(k->residual2, k->atty, p->attn_proj_w, p->attn_proj_b, N, C, C);
  for (size_t i = 0; i < (size_t)N * C; i++)
    k->residual2[i] += inp[i];
  gpt_layernorm_forward(k->ln2, k->ln2_mean, k->ln2_rstd, k->residual2, p->ln2_w,
                        p->ln2_b, N, C);
  gpt_matmul_forward(k->fch, k->ln2, p->fc_w, p->fc_b, N, C, 4 * C);
  gpt_gelu_forward(k->fch_gelu, k->fch, (int64_t)N * 4 * C);
  gpt_matmul_forward(k->out, k->fch_gelu, p->fc_proj_w, p->fc_proj_b, N, 4 * C, C);
  for (size_t i = 0; i < (size_t)N * C; i++)
    k->out[i] += k->residual2[i];
}

static void zero(real *x, size_t n) { memset(x, 0, n * sizeof(real)); }

void gpt_block_backward(const gpt_config *c, const gpt_block_params *p,
                        const gpt_block_params *grad, gpt_acts *a, int l,
                        const real *inp, int B, int T) {
  int C = c->channels, NH = c->num_heads, N = B * T;
  size_t NC = (size_t)N * C;
  gpt_block_acts *k = &a->blocks[l];

  /* MLP half: out = residual2 + fc_proj(gelu(fc(ln2(residual2)))) */
  memcpy(a->dres2, a->dres, NC * sizeof(real));
  zero(a->dfch_gelu, 4 * NC);
  gpt_matmul_backward(a->dfch_gelu, grad->fc_proj_w, grad->fc_proj_b, a->dres,
                      k->fch_gelu, p->fc_proj_w, N, 4 * C, C);
  zero(a->dfch, 4 * NC);
  gpt_gelu_backward(a->dfch, k->fch, a->dfch_gelu, (int64_t)(4 * NC));
  zero(a->dln, NC);
  gpt_matmul_backward(a->dln, grad->fc_w, grad->fc_b, a->dfch, k->ln2, p->fc_w, N, C, 4 * C);
  gpt_layernorm_backward(a->dres2, grad->ln2_w, grad->ln2_b, a->dln, k->residual2,
                         p->ln2_w, k->ln2_mean, k->ln2_rstd, N, C);

  /* attention half: residual2 = inp + attn_proj(attention(qkv(ln1(inp)))) */
  memcpy(a->dres, a->dres2, NC * sizeof(real));
  zero(a->datty, NC);
  gpt_matmul_backward(a->datty, grad->attn_proj_w, grad->attn_proj_b, a->dres2,
                      k->atty, p->attn_proj_w, N, C, C);
  zero(a->dqkv, 3 * NC);
  gpt_attention_backward(a->dqkv, a->datt, a->dpreatt, a->datty, k->qkv, k->att,
                         B, T, C, NH);
  zero(a->dln, NC);
  gpt_matmul_backward(a->dln, grad->qkv_w, grad->qkv_b, a->dqkv, k->ln1, p->qkv_w,
                      N, C, 3 * C);
  gpt_layernorm_backward(a->dres, grad->ln1_w, grad->ln1_b, a->dln, inp, p->ln1_w,
                         k->ln1_mean, k->ln1_rstd, N, C);
}

real gpt_head_forward(const gpt_config *c, const gpt_head_params *p,
                      const real *wte, gpt_acts *a, const real *inp,
                      const int32_t *targets, int B, int T) {
  int C = c->channels, V = c->vocab_size, N = B * T;
  gpt_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, inp, p->lnf_w, p->lnf_b, N, C);
  gpt_matmul_forward(a->probs, a->lnf, wte, NULL, N, C, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    real *row = a->probs + (size_t)n * V;
    real maxval = row[0];
    for (int v = 1; v < V; v++)
      if (row[v] > maxval)
        maxval = row[v];
    real sum = 0;
    for (int v = 0; v < V; v++) {
      row[v] = exp(row[v] - maxval);
      sum += row[v];
    }
    real inv = (real)1 / sum;
    for (int v = 0; v < V; v++)
      row[v] *= inv;
    if (targets)
      a->losses[n] = -log(row[targets[n]]);
  }
  if (!targets)
    return 0;
  double sum = 0;
  for (int n = 0; n < N; n++)
    sum += (double)a->losses[n];
  return (real)(sum / N);
}

void gpt_head_backward(const gpt_config *c, const gpt_head_params *p,
                       const gpt_head_params *grad, const real *wte,
                       real *dwte, gpt_acts *a, const real *inp,
                       const int32_t *targets, real dloss, int B, int T) {
  int C = c->channels, V = c->vocab_size, N = B * T;
  real d = dloss / (real)N;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const real *pr = a->probs + (size_t)n * V;
    real *dl = a->dlogits + (size_t)n * V;
    for (int v = 0; v < V; v++)
      dl[v] = (pr[v] - (v == targets[n] ? (real)1 : (real)0)) * d;
  }
  zero(a->dln, (size_t)N * C);
  gpt_matmul_backward(a->dln, dwte, NULL, a->dlogits, a->lnf, wte, N, C, V);
  zero(a->dres, (size_t)N * C);
  gpt_layernorm_backward(a->dres, grad->lnf_w, grad->lnf_b, a->dln, inp, p->lnf_w,
                         a->lnf_mean, a->lnf_rstd, N, C);
}

/* ----------------------------------------------------------- whole model */

real gpt_model_forward(const gpt_config *c, const gpt_params *p, gpt_acts *a,
                       const int32_t *inputs, const int32_t *targets, int B,
                       int T) {
  gpt_embed_forward(c, &p->embed, a, inputs, B, T);
  for (int l = 0; l < c->num_layers; l++)
    gpt_block_forward(c, &p->blocks[l], a, l, gpt_block_input(a, l), B, T);
  return gpt_head_forward(c, &p->head, p->embed.wte, a,
                          gpt_block_input(a, c->num_layers), targets, B, T);
}

void gpt_model_backward(const gpt_config *c, const gpt_params *p,
                        const gpt_params *grads, gpt_acts *a,
                        const int32_t *inputs, const int32_t *targets,
                        int B, int T) {
  gpt_head_backward(c, &p->head, &grads->head, p->embed.wte, grads->embed.wte, a,
                    gpt_block_input(a, c->num_layers), targets, 1, B, T);
  for (int l = c->num_layers - 1; l >= 0; l--)
    gpt_block_backward(c, &p->blocks[l], &grads->blocks[l], a, l,
                       gpt_block_input(a, l), B, T);
  gpt_embed_backward(c, &grads->embed, a, inputs, B, T);
}

int gpt_sample_token(const real *probs, int V, float temp, uint64_t *rng) {
  double total = 0;
  for (int v = 0; v < V; v++)
    total += pow((double)probs[v], 1.0 / temp);
  double r = uniform01(rng) * total, acc = 0;
  for (int v = 0; v < V; v++) {
    acc += pow((double)probs[v], 1.0 / temp);
    if (r <= acc)
      return v;
  }
  return V - 1;
}
