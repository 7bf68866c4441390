/*
 * test_powersgd.c — PowerSGD in the engine (zinc.compression.gradient_codec
 * "powersgd", engine/reduce/powersgd.c) against a reference written here: the
 * algorithm of Vogels et al. / PyTorch's powerSGD_hook in plain double
 * loops over every rank's local gradients (the test knows them all: each
 * is a hash of (rank, iteration, parameter, element)). Under mpirun with 2
 * and 4 ranks.
 *
 * The model: two modules, reported in reverse (as backward does), with
 * reduce_bucket_size 300 so that each is its own launch (PowerSGD reduces
 * the window's launches together at its end):
 *   a: w (24 x 40, compressed), border (4 x 4: (4 + 4) x 1 x 2 = 16 is
 *      not < 16, so exact at every rank), bias (40, a vector: exact)
 *   b: conv (8 x 4 x 10, viewed 8 x 40: compressed), over (4 x 5:
 *      compressed at rank 1, (4 + 5) x 2 x 2 > 20 exact at rank 2)
 * SGD with lr 1 and no momentum: each step moves a parameter by minus the
 * averaged reduced gradient, read back as the difference of the fp32
 * parameters before and after.
 *
 *  - reference: stages 0 and 1, rank 1 and 2 (2 exercises the
 *    orthogonalization), warm start on and off, start_powerSGD_iter 2
 *    (the exact phase first; errors start at 2) and 0, without error
 *    feedback, with gradient accumulation 2 (compressed once per window),
 *    with bf16 parameters (fp32 arithmetic, the result rounded once), with
 *    an inf gradient in a compressed iteration (the step skipped, the
 *    errors and Q's kept: the reference skips that iteration whole).
 *  - warm start matters: the same run without it ends elsewhere.
 *  - stages 0 and 1 give the same bits (every rank computes the same P and
 *    Q; stage 0 skips its all-gather).
 *  - the wire: the comms logger's all_reduce rows marked "powersgd" carry
 *    sum (n + m) r 4 bytes per compressed step, the plain row the exact
 *    parameters' 4 numel, and the uncompressed figure (logical bytes) is
 *    the ring all-reduce of the compressed parameters, 2 (N - 1) / N x 4
 *    numel.
 *  - resume: saved mid-compression and loaded into a new engine, a run
 *    continues bit for bit (stages 0 and 1; warm start on and off); with
 *    PowerSGD's state zeroed after the load it does not.
 *  - out of memory at each allocation of the build on the last rank: every
 *    rank fails with ZINC_ERR_NOMEM (comm_timeout_s 60: a rank left waiting
 *    in a collective fails the check instead of passing).
 *  - memory: the profiler's and the estimator's gradient bytes grow by the
 *    kept Q's and errors, their buffers by the scratch, in closed form.
 */
#include <math.h>
#include <mpi.h>

#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/support.h"
#include "engine_test.h"

#define NPAR 5
#define MAXR 4
static const struct {
  const char *module, *name;
  int ndim;
  int64_t shape[3];
} SPEC[NPAR] = {
    {"a", "w", 2, {24, 40, 0}},    {"a", "border", 2, {4, 4, 0}}, {"a", "bias", 1, {40, 0, 0}},
    {"b", "conv", 3, {8, 4, 10}},  {"b", "over", 2, {4, 5, 0}},
};

static int64_t numel_of(int j) {
  int64_t n = 1;
  for (int d = 0; d < SPEC[j].ndim; d++)
    n *= SPEC[j].shape[d];
  return n;
}

typedef struct {
  int stage, rank, warm, ef, gas, steps;
  zinc_dtype dtype;       /* of every parameter (F32 = 0 unless set) */
  int64_t start;
  double eps;
  int64_t seed;
  int off;                /* gradient_codec left at "quant" (PowerSGD off) */
  int64_t inf_at;         /* > 0: rank 0's w[0] is inf in this micro-batch */
} psgd_case;

static int64_t g_inf_at = 0; /* the running case's inf_at */

/* ------------------------------------------------ local gradients */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Rank r's gradient of parameter j, element k, in micro-batch mb: a value
 * in [-1, 1) with a rank-one part so that the low-rank approximation has
 * something to find. */
static float local_grad_f32(int r, int64_t mb, int j, int64_t k) {
  uint64_t h = mix(mix(mix((uint64_t)r * 1000003u + (uint64_t)mb) ^ (uint64_t)j) ^ (uint64_t)k);
  double u = (double)(h >> 11) * 0x1p-53 * 2 - 1;
  int64_t cols = numel_of(j) / SPEC[j].shape[0], i = k / cols, c = k % cols;
  double low = sin(0.3 * (double)i + 0.1 * (double)r) * cos(0.2 * (double)c + 0.05 * (double)mb);
  return (float)(0.5 * u + low);
}

static zinc_dtype g_dtype = ZINC_F32; /* the case's parameter dtype */

/* The same, rounded to the parameters' dtype (what the trainer writes). */
static float local_grad(int r, int64_t mb, int j, int64_t k) {
  float v = local_grad_f32(r, mb, j, k), back = v;
  uint16_t h;
  if (g_dtype != ZINC_F32) {
    ET_OK(zinc_convert(&h, g_dtype, &v, ZINC_F32, 1));
    ET_OK(zinc_convert(&back, ZINC_F32, &h, g_dtype, 1));
  }
  return back;
}

/* ------------------------------------------------ the reference */

/* engine/reduce/powersgd.c's documented draw for a fresh Q (its header). */
static float ref_draw(uint64_t seed, uint64_t t, uint64_t j, uint64_t k) {
  uint64_t h1 = mix(seed ^ mix(t ^ mix(j ^ mix(k)))), h2 = mix(h1);
  double u1 = (double)((h1 >> 11) + 1) * 0x1p-53, u2 = (double)(h2 >> 11) * 0x1p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2));
}

/* Gram-Schmidt on the columns of a (rows x r) row-major matrix. */
static void ref_orthogonalize(double *a, int64_t rows, int64_t r, double eps) {
  for (int64_t c = 0; c < r; c++) {
    double ss = 0;
    for (int64_t i = 0; i < rows; i++)
      ss += a[i * r + c] * a[i * r + c];
    double div = eps == 0 ? sqrt(ss) : sqrt(ss) + eps;
    for (int64_t i = 0; i < rows; i++)
      a[i * r + c] /= div;
    for (int64_t d = c + 1; d < r; d++) {
      double dot = 0;
      for (int64_t i = 0; i < rows; i++)
        dot += a[i * r + c] * a[i * r + d];
      for (int64_t i = 0; i < rows; i++)
        a[i * r + d] -= dot * a[i * r + c];
    }
  }
}

typedef struct {
  int64_t n, m, r;
  int compressed;
  double *q;          /* (m x r) the kept Q */
  double *err[8];     /* (n x m) per rank */
  int ready;
} ref_param;

static void ref_plan(const psgd_case *c, ref_param *rp) {
  for (int j = 0; j < NPAR; j++) {
    ref_param *x = &rp[j];
    memset(x, 0, sizeof *x);
    x->n = SPEC[j].shape[0];
    x->m = numel_of(j) / x->n;
    x->r = c->rank < x->n ? c->rank : x->n;
    x->r = x->r < x->m ? x->r : x->m;
    x->compressed = SPEC[j].ndim >= 2 && (double)(x->n + x->m) * (double)x->r * 2.0 <
                                             (double)(x->n * x->m);
    x->q = calloc((size_t)(x->m * x->r), sizeof(double));
    for (int r = 0; r < et_world; r++)
      x->err[r] = calloc((size_t)numel_of(j), sizeof(double));
  }
}

static void ref_free(ref_param *rp) {
  for (int j = 0; j < NPAR; j++) {
    free(rp[j].q);
    for (int r = 0; r < et_world; r++)
      free(rp[j].err[r]);
  }
}

/* The averaged gradient the step applies for parameter j at step t
 * (window t: micro-batches t*gas .. t*gas + gas - 1). */
static void ref_step(const psgd_case *c, ref_param *x, int j, int64_t t, double *avg) {
  const int N = et_world;
  int64_t numel = numel_of(j);
  double *M[8];
  for (int r = 0; r < N; r++) {
    M[r] = calloc((size_t)numel, sizeof(double));
    for (int64_t k = 0; k < numel; k++) {
      float g = 0; /* the window's sum, in fp32 as the gradient buffer adds */
      for (int mb = 0; mb < c->gas; mb++)
        g += local_grad(r, t * c->gas + mb, j, k);
      M[r][k] = g;
    }
  }
  if (!x->compressed || t < c->start) {
    for (int64_t k = 0; k < numel; k++) {
      double s = 0;
      for (int r = 0; r < N; r++)
        s += M[r][k];
      avg[k] = s / N / c->gas;
    }
  } else {
    int64_t n = x->n, m = x->m, R = x->r;
    if (c->ef)
      for (int r = 0; r < N; r++)
        for (int64_t k = 0; k < numel; k++)
          M[r][k] += x->err[r][k];
    if (!c->warm || !x->ready) {
      for (int64_t k = 0; k < m * R; k++)
        x->q[k] = ref_draw((uint64_t)c->seed, (uint64_t)t, (uint64_t)j, (uint64_t)k);
      x->ready = 1;
    }
    ref_orthogonalize(x->q, m, R, c->eps);
    double *P = calloc((size_t)(n * R), sizeof(double));
    double *Q = calloc((size_t)(m * R), sizeof(double));
    for (int r = 0; r < N; r++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < R; k++)
          for (int64_t l = 0; l < m; l++)
            P[i * R + k] += M[r][i * m + l] * x->q[l * R + k];
    ref_orthogonalize(P, n, R, c->eps);
    for (int r = 0; r < N; r++)
      for (int64_t l = 0; l < m; l++)
        for (int64_t k = 0; k < R; k++)
          for (int64_t i = 0; i < n; i++)
            Q[l * R + k] += M[r][i * m + l] * P[i * R + k];
    for (int64_t i = 0; i < n; i++)
      for (int64_t l = 0; l < m; l++) {
        double s = 0;
        for (int64_t k = 0; k < R; k++)
          s += P[i * R + k] * Q[l * R + k];
        double a = s / N; /* the averaged approximation */
        for (int r = 0; r < N; r++)
          x->err[r][i * m + l] = c->ef ? M[r][i * m + l] - a : 0;
        avg[i * m + l] = a / c->gas;
      }
    for (int64_t k = 0; k < m * R; k++)
      x->q[k] = Q[k] / N;
    free(P);
    free(Q);
  }
  for (int r = 0; r < N; r++)
    free(M[r]);
}

/* ------------------------------------------------ the engine */

static zinc_status zero_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  memset(dst, 0, (size_t)n * sizeof *dst);
  return ZINC_OK;
}

typedef struct {
  zinc_engine *e;
  zinc_module *mod[2];
  zinc_param *par[NPAR];
} psgd_model;

/* The engine of case c; the last rank's allocation number `fault` fails
 * (0: none). The build's status. */
static zinc_status open_engine_fault(const psgd_case *c, int logger, psgd_model *pm,
                                     int64_t fault) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
           " \"zero_allow_untested_optimizer\": true,"
           " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0, \"momentum\": 0,"
           " \"weight_decay\": 0}}, \"comms_logger\": {\"enabled\": %s},"
           " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 300},"
           " \"zinc\": {\"comm_timeout_s\": 60, \"compression\": {\"gradient_codec\": \"%s\","
           " \"powersgd\": {"
           "\"matrix_approximation_rank\": %d, \"start_powerSGD_iter\": %lld,"
           " \"use_error_feedback\": %s, \"warm_start\": %s, \"orthogonalization_epsilon\": %g,"
           " \"random_seed\": %lld}}}}",
           c->gas, logger ? "true" : "false", c->stage, c->off ? "quant" : "powersgd", c->rank,
           (long long)c->start,
           c->ef ? "true" : "false", c->warm ? "true" : "false", c->eps, (long long)c->seed);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  ET_OK(zinc_engine_create(cfg, &opt, &pm->e));
  zinc_config_free(cfg);
  pm->mod[0] = zinc_module_add(pm->e, "a");
  pm->mod[1] = zinc_module_add(pm->e, "b");
  for (int j = 0; j < NPAR; j++)
    pm->par[j] = zinc_param_add(pm->e, pm->mod[SPEC[j].module[0] - 'a'], SPEC[j].name, c->dtype,
                                SPEC[j].ndim, SPEC[j].shape);
  if (fault && et_rank == et_world - 1)
    zinc_engine_inject_alloc_fault(pm->e, fault);
  return zinc_engine_build(pm->e, zero_init, NULL);
}

static void open_engine(const psgd_case *c, int logger, psgd_model *pm) {
  ET_OK(open_engine_fault(c, logger, pm, 0));
}

/* One micro-batch: this rank's local gradients, modules b then a. */
static void micro_batch(psgd_model *pm, int64_t mb) {
  ET_OK(zinc_module_fetch(pm->e, pm->mod[0]));
  ET_OK(zinc_module_fetch(pm->e, pm->mod[1]));
  for (int j = 0; j < NPAR; j++) {
    void *g = zinc_param_grad(pm->par[j]);
    for (int64_t k = 0; k < numel_of(j); k++) {
      float v = local_grad(et_rank, mb, j, k);
      if (g_inf_at > 0 && mb == g_inf_at && et_rank == 0 && j == 0 && k == 0)
        v = INFINITY; /* an overflow: the step is skipped on every rank */
      if (g_dtype == ZINC_F32)
        ((float *)g)[k] += v; /* accumulation 2 is tested in fp32 only */
      else
        ET_OK(zinc_convert((uint16_t *)g + k, g_dtype, &v, ZINC_F32, 1));
    }
  }
  ET_OK(zinc_module_grads_ready(pm->e, pm->mod[1]));
  ET_OK(zinc_module_grads_ready(pm->e, pm->mod[0]));
  ET_OK(zinc_module_release(pm->e, pm->mod[1]));
  ET_OK(zinc_module_release(pm->e, pm->mod[0]));
  ET_OK(zinc_backward_end(pm->e));
}

static void read_params(psgd_model *pm, float **out) {
  for (int j = 0; j < NPAR; j++)
    ET_OK(zinc_param_get_full(pm->e, pm->par[j], ZINC_STATE_PARAM, out[j]));
}

static float **alloc_set(void) {
  float **s = calloc(NPAR, sizeof *s);
  for (int j = 0; j < NPAR; j++)
    s[j] = calloc((size_t)numel_of(j), sizeof(float));
  return s;
}

static void free_set(float **s) {
  for (int j = 0; j < NPAR; j++)
    free(s[j]);
  free(s);
}

/* Train c->steps steps, checking each against the reference; the final
 * parameters into out (may be NULL). */
static void run_case(const psgd_case *c, const char *what, float **out) {
  psgd_model pm;
  g_dtype = c->dtype;
  g_inf_at = c->inf_at;
  open_engine(c, 0, &pm);
  ref_param rp[NPAR];
  ref_plan(c, rp);
  float **before = alloc_set(), **after = alloc_set();
  double worst = 0;
  int bad = 0;
  for (int64_t t = 0; t < c->steps; t++) {
    read_params(&pm, before);
    for (int mb = 0; mb < c->gas; mb++) { /* zinc_step after each: it steps at the boundary */
      micro_batch(&pm, t * c->gas + mb);
      ET_OK(zinc_step(pm.e, NULL));
    }
    read_params(&pm, after);
    for (int j = 0; j < NPAR; j++) {
      int64_t numel = numel_of(j);
      double *avg = calloc((size_t)numel, sizeof(double));
      if (t != c->inf_at || c->inf_at <= 0) /* a skipped step changes nothing */
        ref_step(c, &rp[j], j, t, avg);
      for (int64_t k = 0; k < numel; k++) {
        double got = (double)before[j][k] - (double)after[j][k];
        /* fp32: float arithmetic against double; 16-bit: the reduced gradient
         * is rounded to 8 bits of mantissa once */
        double d = fabs(got - avg[k]), tol = c->dtype == ZINC_F32
                                                 ? 2e-5 + 2e-4 * fabs(avg[k])
                                                 : 1e-4 + 8e-3 * fabs(avg[k]);
        worst = d > worst ? d : worst;
        if (d > tol && bad++ < 5)
          fprintf(stderr, "[rank %d] %s: step %lld, %s[%lld]: reduced %.9g, reference %.9g\n",
                  et_rank, what, (long long)t, SPEC[j].name, (long long)k, got, avg[k]);
      }
      free(avg);
    }
  }
  ET_CHECK(bad == 0, "%s: %d elements off the double-precision reference", what, bad);
  if (et_rank == 0)
    printf("%s: %d steps, largest difference from the reference %.3g\n", what, c->steps,
           worst);
  if (out)
    read_params(&pm, out);
  free_set(before);
  free_set(after);
  ref_free(rp);
  zinc_engine_destroy(pm.e);
}

static int same_bits(float **a, float **b) {
  for (int j = 0; j < NPAR; j++)
    if (memcmp(a[j], b[j], (size_t)numel_of(j) * sizeof(float)))
      return 0;
  return 1;
}

static void test_reference(void) {
  psgd_case base = {.stage = 0, .rank = 1, .warm = 1, .ef = 1, .gas = 1, .steps = 7,
                    .start = 2, .eps = 0, .seed = 0};
  char what[160];
  for (int stage = 0; stage <= 1; stage++)
    for (int rank = 1; rank <= 2; rank++) {
      psgd_case c = base;
      c.stage = stage;
      c.rank = rank;
      snprintf(what, sizeof what, "%d ranks, stage %d, rank %d, warm start, from iteration 2",
               et_world, stage, rank);
      run_case(&c, what, NULL);
    }
  psgd_case c = base;
  c.stage = 1;
  c.rank = 2;
  c.start = 0;
  c.ef = 0;
  c.eps = 1e-8;
  c.seed = 7;
  snprintf(what, sizeof what, "%d ranks, rank 2, no error feedback, epsilon 1e-8, seed 7, "
           "from iteration 0", et_world);
  run_case(&c, what, NULL);
  c = base;
  c.rank = 2;
  c.inf_at = 4;
  snprintf(what, sizeof what, "%d ranks, rank 2, an inf gradient at iteration 4 (skipped)",
           et_world);
  run_case(&c, what, NULL);
  g_inf_at = 0;
  c = base;
  c.stage = 1;
  c.rank = 2;
  c.dtype = ZINC_BF16;
  snprintf(what, sizeof what, "%d ranks, rank 2, bf16 parameters (fp32 arithmetic)", et_world);
  run_case(&c, what, NULL);
  c = base;
  c.rank = 3;
  c.gas = 2;
  c.steps = 5;
  snprintf(what, sizeof what, "%d ranks, rank 3, gradient accumulation 2", et_world);
  run_case(&c, what, NULL);
}

/* Warm start against fresh draws every step; and stage 0 against 1. */
static void test_warm_start(void) {
  psgd_case c = {.stage = 1, .rank = 2, .warm = 1, .ef = 1, .gas = 1, .steps = 6,
                 .start = 2, .eps = 0, .seed = 0};
  float **warm = alloc_set(), **cold = alloc_set(), **stage0 = alloc_set();
  char what[160];
  snprintf(what, sizeof what, "%d ranks, rank 2, warm start", et_world);
  run_case(&c, what, warm);
  c.warm = 0;
  snprintf(what, sizeof what, "%d ranks, rank 2, fresh Q every step", et_world);
  run_case(&c, what, cold);
  ET_CHECK(!same_bits(warm, cold), "warm start and fresh Q's gave the same parameters");
  c.warm = 1;
  c.stage = 0;
  snprintf(what, sizeof what, "%d ranks, rank 2, warm start, stage 0", et_world);
  run_case(&c, what, stage0);
  ET_CHECK(same_bits(warm, stage0), "stages 0 and 1 differ with PowerSGD");
  free_set(warm);
  free_set(cold);
  free_set(stage0);
}

/* The comms logger against the closed form. */
static void test_wire(int rank) {
  psgd_case c = {.stage = 1, .rank = rank, .warm = 1, .ef = 1, .gas = 1, .steps = 5,
                 .start = 2, .eps = 0, .seed = 0};
  psgd_model pm;
  open_engine(&c, 1, &pm);
  ET_OK(zinc_comms_reset(pm.e));
  for (int64_t t = 0; t < c.steps; t++) {
    micro_batch(&pm, t);
    ET_OK(zinc_step(pm.e, NULL));
  }
  ref_param rp[NPAR];
  ref_plan(&c, rp);
  /* per compressed step: (n + m) r fp32 per compressed parameter; the exact
   * ones 4 numel in one all-reduce */
  uint64_t low = 0, rest[2] = {0, 0}, full = 0, logical = 0;
  for (int j = 0; j < NPAR; j++) {
    if (rp[j].compressed) {
      low += (uint64_t)((rp[j].n + rp[j].m) * rp[j].r * 4);
      full += (uint64_t)numel_of(j) * 4;
    } else {
      rest[SPEC[j].module[0] - 'a'] += (uint64_t)numel_of(j) * 4;
    }
  }
  /* the uncompressed figure: the ring all-reduce of the compressed
   * gradients (modules a and b, launched apart, reduced together) */
  logical = 2 * (uint64_t)(et_world - 1) * full / (uint64_t)et_world;
  ref_free(rp);
  uint64_t steps = (uint64_t)(c.steps - c.start);
  zinc_comms_stat rows[64];
  for (int i = 0; i < 64; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  ET_OK(zinc_comms_stats(pm.e, rows, 64, &n));
  uint64_t got_low = 0, got_logical = 0, got_rest = 0;
  for (int i = 0; i < n && i < 64; i++) {
    const zinc_comms_stat *r = &rows[i];
    if (strcmp(r->name, "all_reduce"))
      continue;
    if (r->codec && !strcmp(r->codec, "powersgd")) {
      got_low += r->msg_bytes * r->count;
      got_logical += r->logical_bytes;
    } else if (!r->codec && r->msg_bytes == rest[0] + rest[1]) {
      got_rest += r->msg_bytes * r->count;
    }
  }
  if (et_rank == 0)
    printf("%d ranks, rank %d, %llu compressed steps: all_reduce (powersgd) %llu bytes for "
           "%llu uncompressed (ring), exact parameters %llu bytes\n", et_world, rank,
           (unsigned long long)steps, (unsigned long long)got_low,
           (unsigned long long)got_logical, (unsigned long long)got_rest);
  ET_CHECK(got_low == steps * low, "all_reduce (powersgd): %llu bytes, the closed form "
           "sum (n + m) r 4 x %llu steps is %llu", (unsigned long long)got_low,
           (unsigned long long)steps, (unsigned long long)(steps * low));
  ET_CHECK(got_logical == steps * logical, "all_reduce (powersgd): %llu uncompressed bytes, "
           "the ring all-reduce of the compressed gradients is %llu",
           (unsigned long long)got_logical, (unsigned long long)(steps * logical));
  ET_CHECK(got_rest == steps * (rest[0] + rest[1]), "all_reduce of the exact parameters: %llu "
           "bytes, expected %llu", (unsigned long long)got_rest,
           (unsigned long long)(steps * (rest[0] + rest[1])));
  ET_CHECK(steps * low < steps * full, "no compression: %llu >= %llu",
           (unsigned long long)low, (unsigned long long)full);
  zinc_engine_destroy(pm.e);
}

static char root[400];

/* Out of memory at each allocation of the build in turn, on the last rank
 * only: every rank fails with ZINC_ERR_NOMEM (none is left inside a
 * collective), until the build needs no more. */
static void test_nomem(void) {
  psgd_case c = {.stage = 1, .rank = 2, .warm = 1, .ef = 1, .gas = 1, .start = 2};
  int64_t n = 1;
  for (;; n++) {
    psgd_model pm;
    zinc_status st = open_engine_fault(&c, 0, &pm, n);
    int failed = st != ZINC_OK, nomem = st == ZINC_ERR_NOMEM, all = failed, any = failed;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ET_CHECK(all == any && (!failed || nomem), "allocation %lld: rank %d returned %s (%s) "
             "while another rank %s", (long long)n, et_rank, zinc_status_name(st),
             failed ? zinc_last_error() : "", any ? "failed" : "did not");
    zinc_engine_destroy(pm.e);
    if (!any)
      break;
  }
  if (et_rank == 0)
    printf("%d ranks: NOMEM at each of the build's %lld allocations fails every rank\n",
           et_world, (long long)n - 1);
}

/* Steps [from, to) of the case's training loop (accumulation 1). */
static void steps(psgd_model *pm, int64_t from, int64_t to) {
  for (int64_t t = from; t < to; t++) {
    micro_batch(pm, t);
    ET_OK(zinc_step(pm->e, NULL));
  }
}

/* Resume: 4 steps (PowerSGD from iteration 2), save, 4 more; against a new
 * engine that loads and takes the same 4: the same bits. And the state
 * really travels: the same load with PowerSGD's registered buffers zeroed
 * afterwards (its errors and Q's lost) ends elsewhere. */
static void test_resume(int stage, int warm) {
  psgd_case c = {.stage = stage, .rank = 2, .warm = warm, .ef = 1, .gas = 1, .start = 2};
  g_dtype = ZINC_F32;
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck_stage%d_warm%d", root, stage, warm);
  float **a = alloc_set(), **b = alloc_set(), **lost = alloc_set();
  psgd_model pm;
  open_engine(&c, 0, &pm);
  steps(&pm, 0, 4);
  ET_OK(zinc_save_checkpoint(pm.e, ck, "mid"));
  steps(&pm, 4, 8);
  read_params(&pm, a);
  zinc_engine_destroy(pm.e);
  for (int zero = 0; zero <= 1; zero++) {
    open_engine(&c, 0, &pm);
    ET_OK(zinc_load_checkpoint(pm.e, ck, "mid"));
    int found = 0;
    for (int i = 0; zero && i < pm.e->nmstate; i++)
      if (!strncmp(pm.e->mstate[i].name, "powersgd.", 9)) {
        memset(pm.e->mstate[i].ptr, 0, pm.e->mstate[i].bytes);
        found++;
      }
    ET_CHECK(!zero || found == 3, "PowerSGD registered %d buffers, want 3 (q, error, q_ready)",
             found);
    steps(&pm, 4, 8);
    read_params(&pm, zero ? lost : b);
    zinc_engine_destroy(pm.e);
  }
  char what[96];
  snprintf(what, sizeof what, "stage %d%s resumed with PowerSGD's state", stage,
           warm ? "" : " (fresh Q's)");
  ET_CHECK(same_bits(a, b), "%s differs from the unbroken run", what);
  ET_CHECK(!same_bits(a, lost), "%s zeroed after the load gives the unbroken run's bits: "
           "the test cannot tell whether the state is restored", what);
  if (et_rank == 0)
    printf("%s: the unbroken run's bits; with the state zeroed after the load: other bits\n",
           what);
  free_set(a);
  free_set(b);
  free_set(lost);
}

/* Memory: the engine's device gradient bytes (the profiler) and the
 * estimator's grow by the kept Q's and the errors, 4 (sum m r + 1) + 4 sum
 * n m; the estimator's buffers by the scratch (none of either when off). */
static void test_memory(int ef) {
  psgd_case c = {.stage = 1, .rank = 2, .warm = 1, .ef = ef, .gas = 1, .steps = 1,
                 .start = 2};
  ref_param rp[NPAR];
  ref_plan(&c, rp);
  uint64_t want = 4, scratch = 12;
  int64_t largest = 0, widest = 0;
  uint64_t rest[3] = {0, 0, 0};
  for (int j = 0; j < NPAR; j++) {
    if (rp[j].compressed) {
      want += 4 * (uint64_t)(rp[j].m * rp[j].r) + (ef ? 4 * (uint64_t)numel_of(j) : 0);
      scratch += 4 * (uint64_t)((rp[j].n + rp[j].m) * rp[j].r);
      largest = rp[j].m * rp[j].r > largest ? rp[j].m * rp[j].r : largest;
      widest = rp[j].m > widest ? rp[j].m : widest;
    } else {
      rest[ZINC_F32] += 4 * (uint64_t)numel_of(j);
    }
  }
  /* the row work: (the largest m r + the largest m) doubles and floats */
  scratch += 12 * (uint64_t)(largest + widest) + (rest[ZINC_F32] + 63) / 64 * 64;
  ref_free(rp);
  uint64_t grads[2], buffers[2], est_grads[2], est_buffers[2];
  for (int off = 0; off <= 1; off++) {
    c.off = off;
    psgd_model pm;
    open_engine(&c, 0, &pm);
    zinc_mem_stats ms = ZINC_MEM_STATS_INIT;
    ET_OK(zinc_memory_stats(pm.e, &ms));
    grads[off] = ms.current[ZINC_LOC_DEVICE][ZINC_MEM_GRADS];
    buffers[off] = ms.current[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS];
    zinc_engine_destroy(pm.e);
    char json[1024];
    snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": "
             "{\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}, \"zero_optimization\": "
             "{\"stage\": 1, \"reduce_bucket_size\": 300}, \"zinc\": {\"compression\": "
             "{\"gradient_codec\": \"%s\", \"powersgd\": {\"matrix_approximation_rank\": 2, "
             "\"use_error_feedback\": %s}}}}", off ? "quant" : "powersgd", ef ? "true" : "false");
    zinc_config *cfg = NULL;
    ET_OK(zinc_config_parse(json, &cfg));
    zinc_est_param ep[NPAR];
    memset(ep, 0, sizeof ep);
    for (int j = 0; j < NPAR; j++) {
      snprintf(ep[j].module, sizeof ep[j].module, "%s", SPEC[j].module);
      snprintf(ep[j].name, sizeof ep[j].name, "%s", SPEC[j].name);
      ep[j].dtype = ZINC_F32;
      ep[j].ndim = SPEC[j].ndim;
      memcpy(ep[j].shape, SPEC[j].shape, sizeof SPEC[j].shape);
    }
    zinc_estimate est;
    ET_OK(zinc_estimate_model(&cfg->s, et_world, 0, ep, NPAR, &est));
    zinc_config_free(cfg);
    est_grads[off] = est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS];
    est_buffers[off] = est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS];
  }
  if (et_rank == 0)
    printf("%d ranks, error feedback %s: PowerSGD's state %llu bytes (engine +%llu, estimator "
           "+%llu), scratch %llu (estimator +%llu)\n", et_world, ef ? "on" : "off",
           (unsigned long long)want, (unsigned long long)(grads[0] - grads[1]),
           (unsigned long long)(est_grads[0] - est_grads[1]), (unsigned long long)scratch,
           (unsigned long long)(est_buffers[0] - est_buffers[1]));
  ET_CHECK(grads[0] - grads[1] == want, "the engine's gradient bytes grew by %llu with "
           "PowerSGD, want %llu", (unsigned long long)(grads[0] - grads[1]),
           (unsigned long long)want);
  ET_CHECK(est_grads[0] - est_grads[1] == want, "the estimator's gradient bytes grew by %llu "
           "with PowerSGD, want %llu", (unsigned long long)(est_grads[0] - est_grads[1]),
           (unsigned long long)want);
  ET_CHECK(est_buffers[0] - est_buffers[1] == scratch && buffers[0] - buffers[1] == scratch,
           "buffers grew by %llu (estimator) and %llu (engine) with PowerSGD, want %llu",
           (unsigned long long)(est_buffers[0] - est_buffers[1]),
           (unsigned long long)(buffers[0] - buffers[1]), (unsigned long long)scratch);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2 || et_world > 8) {
    if (et_rank == 0)
      printf("SKIPPED: PowerSGD's test needs 2 to 8 ranks\n");
    MPI_Finalize();
    return 77;
  }
  test_reference();
  test_warm_start();
  test_wire(1);
  test_wire(2);
  test_memory(1);
  test_memory(0);
  snprintf(root, sizeof root, "%s/powersgd_test_np%d", et_binary_dir(), et_world);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_nomem();
  test_resume(1, 1);
  test_resume(0, 1);
  test_resume(1, 0);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (!bad && system(cmd) != 0)
      bad = 1;
    printf(bad ? "FAILED\n" : "PASSED\n");
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
