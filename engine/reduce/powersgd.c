/*
 * powersgd.c — PowerSGD (Vogels, Karimireddy, Jaggi 2019, "PowerSGD:
 * Practical Low-Rank Gradient Compression for Distributed Optimization")
 * for the data-parallel gradient reduction at ZeRO stages 0 and 1, where
 * every rank holds its whole local gradient when the reduction starts. It
 * follows PyTorch's DDP communication hook (torch.distributed.algorithms.
 * ddp_comm_hooks.powerSGD_hook, PowerSGDState): the same parameter names,
 * defaults and phases (zinc.compression.powersgd, docs/config.md).
 *
 * Which parameters: a trained parameter with ndim >= 2 is viewed as the
 * row-major matrix M (n x m), n = shape[0], m = numel / n (PyTorch's
 * tensor.view(n, -1)), with rank r = min(n, m, matrix_approximation_rank);
 * it is compressed when (n + m) r min_compression_rate < n m (PyTorch's
 * strict test). Every other trained parameter (vectors, small matrices)
 * takes the exact reduction.
 *
 * Iteration t = the accumulation window's index (micro_step / gas at its
 * boundary micro-batch, where zinc reduces: one compression per optimizer
 * step; the counter is in checkpoints). t < start_powerSGD_iter: the
 * engine's own exact reduction (PyTorch's vanilla all-reduce phase; this
 * file does nothing). From t = start_powerSGD_iter on, the window's
 * launched reductions (buckets of modules, grads.c) are kept
 * (defer) and reduced together at the window's flush
 * (zinc_grads_flush, from zinc_backward_end), once every gradient is
 * complete, so that a step skipped for an inf or NaN anywhere can leave
 * the state untouched (below); this runs on the caller's thread, without
 * overlap_comm's overlap:
 *
 *   rest:  the exact parameters' gradients packed per dtype into one
 *          buffer, all-reduced (sum; 16-bit added in fp32 and rounded
 *          once, as the exact reduce-scatter does), copied back
 *   M_i  = G_i + E_i            (E_i: this rank's error; 0 without
 *                                use_error_feedback or before the first
 *                                compressed iteration)
 *   Q    = a copy of the kept Q (warm_start, after the matrix's first
 *          compressed iteration), else fresh normal draws (below);
 *          orthogonalized (Gram-Schmidt)
 *   P_i  = M_i Q;   P = sum_i P_i       (one all-reduce, in the same
 *                                        batch as the rest's)
 *   P    = orthogonalize(P)
 *   Q_i  = M_i^T P; Q = sum_i Q_i       (one all-reduce)
 *   G    = P Q^T                        written into the gradient buffer:
 *                                       the SUM over ranks the exact
 *                                       reduction would leave there (the
 *                                       step divides by dp_size), on every
 *                                       rank (stage 0: the whole gradient,
 *                                       so step.c skips its all-gather;
 *                                       stage 1: every chunk, the rank's own
 *                                       included)
 *   E_i  = M_i - P Q^T / N              (PyTorch's local error against the
 *                                        average)
 *   kept Q = Q / N                      (PyTorch keeps the averaged Q)
 *
 * Gram-Schmidt over the columns, as PyTorch's _orthogonalize_gram_schmidt:
 * column c /= ||c|| (|| c || + orthogonalization_epsilon when that is not
 * 0), then every later column loses its projection on c. A column of norm
 * exactly 0 with epsilon 0 stays 0 (PyTorch divides by 0 and gets NaN);
 * a kept Q with such a column (an all-zero gradient) is drawn afresh for
 * that parameter, or it would stay 0 for good. PyTorch orthogonalizes
 * with torch.linalg.qr (Householder) for r > 2 in fp32: the same column
 * space, columns equal up to sign and rounding; zinc is Gram-Schmidt for
 * every r.
 *
 * Error feedback covers the compressed parameters only: PyTorch keeps an
 * error for the whole bucket, but for an exactly reduced tensor its errors
 * sum to 0 over ranks, so adding them changes no sum (up to rounding).
 *
 * Fresh Q (zinc's own generator, identical on every rank, nothing to
 * checkpoint): element k of the Q of parameter number j (registration
 * order) at iteration t is the standard normal
 *     h1 = mix(random_seed, t, j, k), h2 = splitmix64(h1),
 *     u1 = ((h1 >> 11) + 1) / 2^53, u2 = (h2 >> 11) / 2^53,
 *     z  = sqrt(-2 ln u1) cos(2 pi u2)    (Box-Muller, in double)
 * with mix(s, t, j, k) = splitmix64(s ^ splitmix64(t ^ splitmix64(j ^
 * splitmix64(k)))), rounded to fp32. PyTorch seeds torch.randn from a
 * numpy RandomState(random_seed) instead: other numbers, the same law.
 *
 * Arithmetic: on the cpu device, plain C loops in a fixed order — fp32
 * storage, every sum in double (M Q's dot products as four partial sums
 * by element index mod 4, added (s0 + s1) + (s2 + s3); M^T P's and
 * P Q^T's in index order) — so results are the
 * same bits run to run and identical on every rank (P and Q are all-reduced
 * before anything reads them). 16-bit gradients are read into fp32 and the
 * result rounded once into the parameter dtype; P, Q and the errors are
 * fp32 whatever the parameter dtype (PyTorch computes in the gradient's
 * dtype). No GPU path yet: on the cuda device its init fails
 * with ZINC_ERR_UNSUPPORTED.
 *
 * Non-finite gradients (fp16 overflow): when the summed P or the exact
 * parameters' sums hold an inf or NaN (the same on every rank; an inf in
 * any rank's M reaches P), the compressed gradients are set to NaN so that
 * the step is skipped as it would be after the exact reduction, Q's
 * all-reduce is not run, and the kept Q's, the errors and the flags stay
 * bit for bit as they were: the skipped iteration leaves no trace (PyTorch
 * would keep the NaN in both for good).
 *
 * State (checkpointed, engine/checkpoint/mstate.h): "powersgd.q" (fp32,
 * sum of m r over the compressed parameters), "powersgd.error" (fp32, sum
 * of n m; only with use_error_feedback), "powersgd.q_ready" (host, one
 * int64 per compressed parameter: its kept Q exists).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/reduce/methods.h"
#include "engine/support.h"

/* One compressed parameter. */
typedef struct {
  int param;              /* index into e->params */
  int64_t n, m, r;        /* the matrix (n x m) and its rank */
  int64_t q_off;          /* floats into q (m x r, row-major) */
  int64_t err_off;        /* floats into err (n x m, row-major) */
} psgd_matrix;

/* Its state, behind e->rd->priv. */
typedef struct zinc_powersgd zinc_powersgd;
struct zinc_powersgd {
  psgd_matrix *mats;      /* compressed parameters, registration order */
  int nmats;
  int *mat_of;            /* (nparams) index into mats, or -1 */
  float *q;               /* (q_numel) f32 device: the kept Q's (state) */
  float *err;             /* (err_numel) f32 device: the errors (state), or NULL */
  int64_t *q_ready;       /* (nmats) host: 1 once the matrix's kept Q exists
                             (state) */
  int64_t q_numel, err_numel, p_numel;
  float *p_wire, *q_wire; /* (p_numel), (q_numel) f32, comm memory: one
                             step's P's and Q's, packed in launch order */
  size_t p_wire_bytes, q_wire_bytes;
  int p_shared, q_shared;
  char *rest;             /* (rest_bytes) comm memory: the exact
                             parameters' gradients, one section per dtype */
  size_t rest_bytes;
  int rest_shared;
  double *acc;            /* (acc_numel) f64 device: psgd_work's sums, the
                             largest m r + the largest m */
  float *fwork;           /* (acc_numel) f32 device: psgd_work's row and Q */
  int64_t acc_numel;
  int *deferred;          /* (nmodules) modules launched this window, in
                             launch order, reduced together at the flush */
  int ndeferred;
  int whole;              /* this window's reduction was PowerSGD's */
  int64_t before, after;  /* elements before / after compression (stats) */
  int64_t next_report;
};

/* --------------------------------------------------- the plan */

/* The compression test of one parameter: 1 and its matrix when
 * compressed. */
static int plan_param(const zinc_settings *s, const zinc_param *p, int64_t *n, int64_t *m,
                      int64_t *r) {
  if (p->frozen || p->ndim < 2 || p->numel == 0)
    return 0;
  *n = p->shape[0];
  *m = p->numel / p->shape[0];
  *r = s->psgd_rank;
  if (*r > *n)
    *r = *n;
  if (*r > *m)
    *r = *m;
  return (double)(*n + *m) * (double)*r * s->psgd_min_compression_rate <
         (double)*n * (double)*m;
}

static zinc_powersgd *psgd_of(const zinc_engine *e) { return e->rd->priv; }

/* gradient_codec "powersgd" at stage 0 or 1 (the row's selects). */
static int psgd_enabled(const zinc_settings *s) {
  return s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD && s->stage <= 1;
}

/* Sizes of everything this file allocates, as psgd_init does. */
typedef struct {
  int64_t q, err, p, acc; /* acc: the largest m r + the largest m */
  size_t rest[3];         /* bytes of the exact parameters, per dtype */
} psgd_sizes;

static size_t rest_section(size_t bytes) { return (size_t)zinc_round_up((int64_t)bytes, 64); }

static void plan_sizes(const zinc_engine *e, psgd_sizes *z) {
  memset(z, 0, sizeof *z);
  int64_t mr = 0, mm = 0;
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    int64_t n, m, r;
    if (plan_param(&e->cfg, p, &n, &m, &r)) {
      z->q += m * r;
      z->p += n * r;
      z->err += e->cfg.psgd_error_feedback ? n * m : 0;
      mr = m * r > mr ? m * r : mr;
      mm = m > mm ? m : mm;
    } else if (!p->frozen) {
      z->rest[p->dtype] += (size_t)p->numel * zinc_dtype_size(p->dtype);
    }
  }
  z->acc = mr + mm;
}

/* The row's sizes: the state (Q's and errors, gradient memory) and the
 * scratch (buffers), on the device; the registry only. */
static void state_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (!psgd_enabled(&e->cfg))
    return;
  psgd_sizes z;
  plan_sizes(e, &z);
  uint64_t scratch = (uint64_t)(z.p + z.q) * 4 + (uint64_t)(z.acc + 1) * 12;
  for (int d = 0; d < 3; d++)
    scratch += rest_section(z.rest[d]);
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += (uint64_t)(z.q + 1 + z.err) * 4;
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] += scratch;
}

/* ----------------------------------------------------- setup */

/* This rank's own part of psgd_init: the plan, the state, the row work
 * (nothing collective). */
static zinc_status init_local(zinc_engine *e) {
  ZINC_CHECK(zinc_calloc(&e->rd->priv, 1, sizeof(zinc_powersgd), "PowerSGD state"));
  zinc_powersgd *ps = psgd_of(e);
  psgd_sizes z;
  plan_sizes(e, &z);
  ZINC_CHECK(zinc_calloc((void **)&ps->mat_of, (size_t)e->nparams + 1, sizeof *ps->mat_of,
                         "PowerSGD parameter map"));
  ZINC_CHECK(zinc_calloc((void **)&ps->mats, (size_t)e->nparams + 1, sizeof *ps->mats,
                         "PowerSGD matrices"));
  ZINC_CHECK(zinc_calloc((void **)&ps->deferred, (size_t)e->nmodules + 1, sizeof *ps->deferred,
                         "PowerSGD modules"));
  for (int i = 0; i < e->nparams; i++) {
    psgd_matrix *x = &ps->mats[ps->nmats];
    ps->mat_of[i] = -1;
    if (!plan_param(&e->cfg, e->params[i], &x->n, &x->m, &x->r))
      continue;
    x->param = i;
    x->q_off = ps->q_numel;
    x->err_off = ps->err_numel;
    ps->q_numel += x->m * x->r;
    ps->p_numel += x->n * x->r;
    ps->err_numel += e->cfg.psgd_error_feedback ? x->n * x->m : 0;
    ps->mat_of[i] = ps->nmats++;
  }
  ps->acc_numel = z.acc;
  for (int d = 0; d < 3; d++)
    ps->rest_bytes += rest_section(z.rest[d]);
  /* the state: Q's and errors (zero until the first compressed iteration) */
  ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)ps->q_numel * 4 + 4, ZINC_LOC_DEVICE,
                                      ZINC_MEM_GRADS, (void **)&ps->q, "PowerSGD Q matrices"));
  memset(ps->q, 0, (size_t)ps->q_numel * 4);
  if (ps->err_numel) {
    ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)ps->err_numel * 4, ZINC_LOC_DEVICE,
                                        ZINC_MEM_GRADS, (void **)&ps->err, "PowerSGD errors"));
    memset(ps->err, 0, (size_t)ps->err_numel * 4);
  }
  ZINC_CHECK(zinc_calloc((void **)&ps->q_ready, (size_t)ps->nmats + 1, sizeof *ps->q_ready,
                         "PowerSGD flags"));
  ZINC_CHECK(zinc_mstate_register(e, "powersgd.q", ps->q, (size_t)ps->q_numel * 4, 0));
  if (ps->err)
    ZINC_CHECK(zinc_mstate_register(e, "powersgd.error", ps->err, (size_t)ps->err_numel * 4,
                                    0));
  ZINC_CHECK(zinc_mstate_register(e, "powersgd.q_ready", ps->q_ready,
                                  (size_t)ps->nmats * sizeof *ps->q_ready, 1));
  /* the row work */
  ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)ps->acc_numel * 8 + 8, ZINC_LOC_DEVICE,
                                      ZINC_MEM_BUFFERS, (void **)&ps->acc, "PowerSGD sums"));
  return zinc_engine_buffer_alloc(e, (size_t)ps->acc_numel * 4 + 4, ZINC_LOC_DEVICE,
                                  ZINC_MEM_BUFFERS, (void **)&ps->fwork, "PowerSGD rows");
}

/* Its Q matrices, errors and scratch (after layout; ZINC_ERR_UNSUPPORTED
 * on the cuda device), registered as method state. */
static zinc_status psgd_init(zinc_engine *e) {
  if (!psgd_enabled(&e->cfg))
    return ZINC_OK;
  if (e->dev->ops->is_gpu) /* every rank alike */
    return zinc_error(ZINC_ERR_UNSUPPORTED, "zinc.compression.gradient_codec = \"powersgd\": "
                      "PowerSGD has no GPU path yet (its matrix products run on the cpu device "
                      "only); use another gradient_codec or the cpu device");
  /* a rank that failed on its own stops every rank here, before the
   * collective allocations of one step's wire buffers */
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, init_local(e)));
  zinc_powersgd *ps = psgd_of(e);
  ps->p_wire_bytes = (size_t)ps->p_numel * 4;
  ps->q_wire_bytes = (size_t)ps->q_numel * 4;
  ZINC_CHECK(zinc_engine_comm_buffer_alloc(e, ps->p_wire_bytes, ZINC_MEM_BUFFERS,
                                           (void **)&ps->p_wire, &ps->p_shared, "PowerSGD P"));
  ZINC_CHECK(zinc_engine_comm_buffer_alloc(e, ps->q_wire_bytes, ZINC_MEM_BUFFERS,
                                           (void **)&ps->q_wire, &ps->q_shared, "PowerSGD Q"));
  ZINC_CHECK(zinc_engine_comm_buffer_alloc(e, ps->rest_bytes, ZINC_MEM_BUFFERS,
                                           (void **)&ps->rest, &ps->rest_shared,
                                           "PowerSGD uncompressed gradients"));
  zinc_log0(ZINC_LOG_INFO, "compressed communication: PowerSGD on %d of %d parameters at rank "
            "%lld from iteration %lld (Q %lld, error %lld fp32 elements per rank)", ps->nmats,
            e->nparams, (long long)e->cfg.psgd_rank, (long long)e->cfg.psgd_start_iter,
            (long long)ps->q_numel, (long long)ps->err_numel);
  return ZINC_OK;
}

static void psgd_free(zinc_engine *e) {
  zinc_powersgd *ps = psgd_of(e);
  if (!ps)
    return;
  zinc_engine_buffer_free(e, ps->q, (size_t)ps->q_numel * 4 + 4, ZINC_LOC_DEVICE, ZINC_MEM_GRADS);
  zinc_engine_buffer_free(e, ps->err, (size_t)ps->err_numel * 4, ZINC_LOC_DEVICE,
                          ZINC_MEM_GRADS);
  zinc_engine_buffer_free(e, ps->acc, (size_t)ps->acc_numel * 8 + 8, ZINC_LOC_DEVICE,
                          ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, ps->fwork, (size_t)ps->acc_numel * 4 + 4, ZINC_LOC_DEVICE,
                          ZINC_MEM_BUFFERS);
  if (ps->p_wire)
    zinc_engine_comm_buffer_free(e, ps->p_wire, ps->p_wire_bytes, ZINC_MEM_BUFFERS, ps->p_shared);
  if (ps->q_wire)
    zinc_engine_comm_buffer_free(e, ps->q_wire, ps->q_wire_bytes, ZINC_MEM_BUFFERS, ps->q_shared);
  if (ps->rest)
    zinc_engine_comm_buffer_free(e, ps->rest, ps->rest_bytes, ZINC_MEM_BUFFERS, ps->rest_shared);
  free(ps->q_ready);
  free(ps->mats);
  free(ps->mat_of);
  free(ps->deferred);
  free(ps);
  e->rd->priv = NULL;
}

/* ------------------------------------------------ the numbers */

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The standard normal draw of the header comment. */
static float normal_draw(uint64_t seed, uint64_t t, uint64_t j, uint64_t k) {
  uint64_t h1 = splitmix64(seed ^ splitmix64(t ^ splitmix64(j ^ splitmix64(k))));
  uint64_t h2 = splitmix64(h1);
  double u1 = (double)((h1 >> 11) + 1) * 0x1p-53, u2 = (double)(h2 >> 11) * 0x1p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Gram-Schmidt over the r columns of a (rows x r) row-major matrix (see the
 * header comment); returns 1 when a column had norm 0. */
static int orthogonalize(float *a, int64_t rows, int64_t r, double eps) {
  int zero = 0;
  for (int64_t c = 0; c < r; c++) {
    double ss = 0;
    for (int64_t i = 0; i < rows; i++)
      ss += (double)a[i * r + c] * a[i * r + c];
    double norm = sqrt(ss), div = eps == 0 ? norm : norm + eps;
    if (norm == 0) { /* 0 / 0 with epsilon 0; stays 0 with epsilon */
      zero = 1;
      continue;
    }
    for (int64_t i = 0; i < rows; i++)
      a[i * r + c] = (float)(a[i * r + c] / div);
    for (int64_t d = c + 1; d < r; d++) {
      double dot = 0;
      for (int64_t i = 0; i < rows; i++)
        dot += (double)a[i * r + c] * a[i * r + d];
      for (int64_t i = 0; i < rows; i++)
        a[i * r + d] = (float)(a[i * r + d] - dot * a[i * r + c]);
    }
  }
  return zero;
}

static void fresh_q(const zinc_engine *e, const psgd_matrix *x, float *q, int64_t t) {
  for (int64_t k = 0; k < x->m * x->r; k++)
    q[k] = normal_draw((uint64_t)e->cfg.psgd_random_seed, (uint64_t)t, (uint64_t)x->param,
                       (uint64_t)k);
}

/* The matrix loops' scratch: one row of M and one transposed Q (fp32),
 * their double sums. */
typedef struct {
  float *row;             /* (m) M's row i */
  float *qt;              /* (r x m) a Q transposed */
  double *acc;            /* (r x m) Q_i's sums */
  double *drow;           /* (m) a row of P Q^T */
} psgd_work;

/* Row i of M in fp32: the gradient plus the error (one fp32 add). */
static void load_row(const void *g, int dtype, const float *err, int64_t i, int64_t m,
                     float *row) {
  const int64_t base = i * m;
  if (dtype == ZINC_F32)
    memcpy(row, (const float *)g + base, (size_t)m * sizeof *row);
  else
    for (int64_t j = 0; j < m; j++)
      row[j] = zinc_load_as_f32(g, base + j, dtype);
  if (err)
    for (int64_t j = 0; j < m; j++)
      row[j] += err[base + j];
}

/* sum_j a[j] b[j] in double: four partial sums (by j mod 4) added as
 * (s0 + s1) + (s2 + s3), a fixed order. */
static double dot4(const float *a, const float *b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += (double)a[j] * b[j];
    s1 += (double)a[j + 1] * b[j + 1];
    s2 += (double)a[j + 2] * b[j + 2];
    s3 += (double)a[j + 3] * b[j + 3];
  }
  if (j < n)
    s0 += (double)a[j] * b[j];
  if (j + 1 < n)
    s1 += (double)a[j + 1] * b[j + 1];
  if (j + 2 < n)
    s2 += (double)a[j + 2] * b[j + 2];
  return (s0 + s1) + (s2 + s3);
}

/* (rows x r) row-major -> (r x rows). */
static void transpose(const float *a, int64_t rows, int64_t r, float *at) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t k = 0; k < r; k++)
      at[k * rows + i] = a[i * r + k];
}

/* p (n x r) = M q. */
static void times_q(const void *g, int dtype, const float *err, const psgd_matrix *x,
                    const float *q, float *p, const psgd_work *w) {
  transpose(q, x->m, x->r, w->qt);
  for (int64_t i = 0; i < x->n; i++) {
    load_row(g, dtype, err, i, x->m, w->row);
    for (int64_t k = 0; k < x->r; k++)
      p[i * x->r + k] = (float)dot4(w->row, w->qt + k * x->m, x->m);
  }
}

/* q (m x r) = M^T p, rows of M in order. */
static void times_p(const void *g, int dtype, const float *err, const psgd_matrix *x,
                    const float *p, float *q, const psgd_work *w) {
  const int64_t m = x->m, r = x->r;
  memset(w->acc, 0, (size_t)(m * r) * sizeof *w->acc);
  for (int64_t i = 0; i < x->n; i++) {
    load_row(g, dtype, err, i, m, w->row);
    for (int64_t k = 0; k < r; k++) {
      const double pk = p[i * r + k];
      double *acc = w->acc + k * m;
      for (int64_t j = 0; j < m; j++)
        acc[j] += (double)w->row[j] * pk;
    }
  }
  for (int64_t j = 0; j < m; j++)
    for (int64_t k = 0; k < r; k++)
      q[j * r + k] = (float)w->acc[k * m + j];
}

/* G = P Q^T (the sum; over k in order), E = M - G / N, the kept Q = Q / N. */
static void decompress(void *g, int dtype, float *err, const psgd_matrix *x, const float *p,
                       const float *q, float *kept, int nranks, const psgd_work *w) {
  const int64_t m = x->m, r = x->r;
  transpose(q, m, r, w->qt);
  for (int64_t i = 0; i < x->n; i++) {
    if (err)
      load_row(g, dtype, err, i, m, w->row);
    for (int64_t j = 0; j < m; j++)
      w->drow[j] = 0;
    for (int64_t k = 0; k < r; k++) {
      const double pk = p[i * r + k];
      const float *qk = w->qt + k * m;
      for (int64_t j = 0; j < m; j++)
        w->drow[j] += pk * qk[j];
    }
    for (int64_t j = 0; j < m; j++) {
      if (err)
        err[i * m + j] = (float)((double)w->row[j] - w->drow[j] / nranks);
      zinc_store_from_f32(g, i * m + j, dtype, (float)w->drow[j]);
    }
  }
  for (int64_t k = 0; k < m * r; k++)
    kept[k] = (float)((double)q[k] / nranks);
}

/* ------------------------------------------------- the reduction */

/* This window's reduction is PowerSGD's (iteration >= start_powerSGD_iter). */
static int psgd_active(const zinc_engine *e) {
  return psgd_of(e) && e->micro_step / e->cfg.gradient_accumulation_steps >= e->cfg.psgd_start_iter;
}

/* 1 (once) when the last window's gradients are whole on every rank (the
 * stage-0 all-gather is not needed). */
static int psgd_take_whole(zinc_engine *e) {
  zinc_powersgd *ps = psgd_of(e);
  if (!ps)
    return 0;
  int w = ps->whole;
  ps->whole = 0;
  return w;
}

static void *param_grad(const zinc_engine *e, const zinc_param *p) {
  const zinc_segment *seg = &p->module->segs[p->segment];
  return (char *)seg->grad + (size_t)p->seg_offset * zinc_dtype_size(p->dtype);
}

/* Visit the trained parameters of the launched modules in launch order. */
#define FOR_PARAMS(e, mods, nmods, p)                                                         \
  for (int mi_ = 0; mi_ < (nmods); mi_++)                                                     \
    for (int pi_ = 0; pi_ < (e)->modules[(mods)[mi_]]->nparams; pi_++)                         \
      for (zinc_param *p = (e)->modules[(mods)[mi_]]->params[pi_]; p; p = NULL)                \
        if (!p->frozen && p->module->segs[p->segment].grad)

static void log_stats(zinc_engine *e, int64_t t) {
  zinc_powersgd *ps = psgd_of(e);
  if (t < ps->next_report)
    return;
  int64_t f = e->cfg.psgd_stats_frequency > 1 ? e->cfg.psgd_stats_frequency : 1;
  zinc_log0(ZINC_LOG_INFO, "PowerSGD compression stats: iteration %lld, %lld elements before "
            "compression, %lld after, rate %.2f", (long long)t, (long long)ps->before,
            (long long)ps->after, ps->after ? (double)ps->before / (double)ps->after : 0.0);
  ps->next_report = t + f;
}

static zinc_status reduce_modules(zinc_engine *e, const int *mods, int nmods) {
  zinc_powersgd *ps = psgd_of(e);
  const zinc_settings *s = &e->cfg;
  const int64_t t = e->micro_step / s->gradient_accumulation_steps;
  const int N = e->dp_size;
  ZINC_CHECK(zinc_engine_sync(e)); /* the trainer's gradients are complete */
  int64_t mr = 0; /* the scratch's halves: the largest m r, then the largest m */
  for (int xi = 0; xi < ps->nmats; xi++)
    mr = ps->mats[xi].m * ps->mats[xi].r > mr ? ps->mats[xi].m * ps->mats[xi].r : mr;
  const psgd_work w = {.row = ps->fwork + mr, .qt = ps->fwork, .acc = ps->acc,
                       .drow = ps->acc + mr};

  /* 1. the exact parameters packed per dtype; fresh or kept Q's; P = M Q */
  size_t sect[3], off[3] = {0, 0, 0};
  int64_t before = 0, after = 0, pn = 0, qn = 0;
  {
    psgd_sizes z;
    plan_sizes(e, &z);
    sect[0] = 0;
    sect[1] = rest_section(z.rest[0]);
    sect[2] = sect[1] + rest_section(z.rest[1]);
  }
  FOR_PARAMS(e, mods, nmods, p) {
    const void *g = param_grad(e, p);
    int xi = ps->mat_of[p->index];
    before += p->numel;
    if (xi < 0) {
      size_t b = (size_t)p->numel * zinc_dtype_size(p->dtype);
      memcpy(ps->rest + sect[p->dtype] + off[p->dtype], g, b);
      off[p->dtype] += b;
      after += p->numel;
      continue;
    }
    const psgd_matrix *x = &ps->mats[xi];
    float *q = ps->q_wire + qn; /* the kept Q changes only when the step is taken */
    if (!s->psgd_warm_start || !ps->q_ready[xi])
      fresh_q(e, x, q, t);
    else
      memcpy(q, ps->q + x->q_off, (size_t)(x->m * x->r) * sizeof *q);
    if (orthogonalize(q, x->m, x->r, s->psgd_orth_epsilon)) {
      fresh_q(e, x, q, t); /* a kept Q with a zero column would stay 0 */
      orthogonalize(q, x->m, x->r, s->psgd_orth_epsilon);
    }
    times_q(g, p->dtype, ps->err ? ps->err + x->err_off : NULL, x, q, ps->p_wire + pn, &w);
    pn += x->n * x->r;
    qn += x->m * x->r;
    after += (x->n + x->m) * x->r;
  }

  /* 2. one batch: the rest's all-reduces and P's */
  zinc_coll colls[4];
  int nc = 0;
  for (int d = 0; d < 3; d++)
    if (off[d])
      colls[nc++] = (zinc_coll){.kind = ZINC_COLL_ALLREDUCE, .send = ps->rest + sect[d],
                                .recv = ps->rest + sect[d], .count = off[d] / zinc_dtype_size(d),
                                .dtype = d, .op = ZINC_OP_SUM};
  /* the logger: P and Q stand for the exact all-reduce of the compressed
   * gradients (ring: 2 (N - 1) / N of their bytes), shared in proportion */
  uint64_t logical = 0;
  FOR_PARAMS(e, mods, nmods, p)
    if (ps->mat_of[p->index] >= 0)
      logical += (uint64_t)p->numel * zinc_dtype_size(p->dtype);
  logical = N > 1 ? 2 * (uint64_t)(N - 1) * logical / (uint64_t)N : 0;
  uint64_t logical_p = pn + qn ? logical * (uint64_t)pn / (uint64_t)(pn + qn) : 0;
  if (pn)
    colls[nc++] = (zinc_coll){.kind = ZINC_COLL_ALLREDUCE, .send = ps->p_wire,
                              .recv = ps->p_wire, .count = (size_t)pn, .dtype = ZINC_F32,
                              .op = ZINC_OP_SUM, .logical_bytes = logical_p,
                              .codec_name = "powersgd"};
  double t0 = zinc_now();
  zinc_status st = nc ? e->dp->ops->run(e->dp, colls, nc) : ZINC_OK;
  e->t_comm_wait += zinc_now() - t0;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "PowerSGD: all-reducing P and the uncompressed gradients");
  memset(off, 0, sizeof off);
  FOR_PARAMS(e, mods, nmods, p) {
    if (ps->mat_of[p->index] >= 0)
      continue;
    size_t b = (size_t)p->numel * zinc_dtype_size(p->dtype);
    memcpy(param_grad(e, p), ps->rest + sect[p->dtype] + off[p->dtype], b);
    off[p->dtype] += b;
  }
  ps->before += before;
  ps->after += after;
  ps->whole = 1;
  if (!pn) {
    log_stats(e, t);
    return ZINC_OK;
  }

  /* 3. an inf or NaN in the summed P or the exact sums (identical on every
   * rank: the step will be skipped): NaN gradients, the state kept */
  int finite = 1;
  for (int64_t k = 0; k < pn && finite; k++)
    finite = isfinite(ps->p_wire[k]);
  for (int d = 0; d < 3 && finite; d++)
    for (size_t k = 0; k < off[d] / zinc_dtype_size(d) && finite; k++)
      finite = isfinite(zinc_load_as_f32(ps->rest + sect[d], (int64_t)k, d));
  if (!finite) {
    FOR_PARAMS(e, mods, nmods, p)
      if (ps->mat_of[p->index] >= 0)
        for (int64_t k = 0; k < p->numel; k++)
          zinc_store_from_f32(param_grad(e, p), k, p->dtype, NAN);
    log_stats(e, t);
    return ZINC_OK;
  }

  /* 4. orthogonalize P; Q = M^T P; one all-reduce */
  pn = qn = 0;
  FOR_PARAMS(e, mods, nmods, p) {
    int xi = ps->mat_of[p->index];
    if (xi < 0)
      continue;
    const psgd_matrix *x = &ps->mats[xi];
    orthogonalize(ps->p_wire + pn, x->n, x->r, s->psgd_orth_epsilon);
    times_p(param_grad(e, p), p->dtype, ps->err ? ps->err + x->err_off : NULL, x,
            ps->p_wire + pn, ps->q_wire + qn, &w);
    pn += x->n * x->r;
    qn += x->m * x->r;
  }
  zinc_coll qc = {.kind = ZINC_COLL_ALLREDUCE, .send = ps->q_wire, .recv = ps->q_wire,
                  .count = (size_t)qn, .dtype = ZINC_F32, .op = ZINC_OP_SUM,
                  .logical_bytes = logical - logical_p, .codec_name = "powersgd"};
  t0 = zinc_now();
  st = e->dp->ops->run(e->dp, &qc, 1);
  e->t_comm_wait += zinc_now() - t0;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "PowerSGD: all-reducing Q");

  /* 5. G = P Q^T, the errors, the kept Q */
  pn = qn = 0;
  FOR_PARAMS(e, mods, nmods, p) {
    int xi = ps->mat_of[p->index];
    if (xi < 0)
      continue;
    const psgd_matrix *x = &ps->mats[xi];
    decompress(param_grad(e, p), p->dtype, ps->err ? ps->err + x->err_off : NULL, x,
               ps->p_wire + pn, ps->q_wire + qn, ps->q + x->q_off, N, &w);
    ps->q_ready[xi] = 1;
    pn += x->n * x->r;
    qn += x->m * x->r;
  }
  log_stats(e, t);
  return ZINC_OK;
}

/* A launched reduction of these modules: kept for the flush (every module
 * is launched once per window). */
static zinc_status psgd_defer(zinc_engine *e, const int *mods, int nmods) {
  zinc_powersgd *ps = psgd_of(e);
  memcpy(ps->deferred + ps->ndeferred, mods, (size_t)nmods * sizeof *mods);
  ps->ndeferred += nmods;
  return ZINC_OK;
}

/* At the window's flush (collective over dp): the deferred modules reduced
 * together; every rank's gradient buffer ends with the sum over ranks
 * (approximated for the compressed parameters). */
static zinc_status psgd_flush(zinc_engine *e) {
  zinc_powersgd *ps = psgd_of(e);
  if (!ps || ps->ndeferred == 0)
    return ZINC_OK;
  int n = ps->ndeferred;
  ps->ndeferred = 0;
  return reduce_modules(e, ps->deferred, n);
}

/* ------------------------------------------------------ the table row */

static zinc_status take_bucket(zinc_engine *e, const int *mods, int nmods, int *taken) {
  if (!psgd_active(e))
    return ZINC_OK;
  *taken = 1; /* reduced with the window's others at the flush */
  return psgd_defer(e, mods, nmods);
}

static zinc_status whole_grads(zinc_engine *e, int *done) {
  *done = psgd_take_whole(e);
  return ZINC_OK;
}

/* It rewrites the gradient buffers at the flush. */
static int keeps_grads(const zinc_settings *s, int dp_size) {
  (void)dp_size;
  return psgd_enabled(s);
}

const zinc_reducer zinc_reducer_powersgd = {
    .name = "powersgd",
    .selects = psgd_enabled,
    .cpu_only = "zinc.compression.gradient_codec \"powersgd\"",
    .sizes = state_sizes,
    .init = psgd_init,
    .free = psgd_free,
    .keeps_grads = keeps_grads,
    .take_bucket = take_bucket,
    .flush = psgd_flush,
    .whole_grads = whole_grads,
};
