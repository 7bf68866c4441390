/*
 * ds_peer_zinc — zinc's side of the DeepSpeed peer (bench/ds_peer/ds_peer.py
 * runs both sides and prints the table): a C trainer of 16 linear modules of
 * 1024 x 1024 + bias (16.8 M parameters), batch 16 per rank, mean squared
 * error, AdamW from a DeepSpeed JSON config, every matrix product through
 * OpenBLAS's cblas_sgemm. ds_peer.py's DeepSpeed worker trains the same
 * model from the same file: same layers, initial values, data and loss.
 *
 *   mpirun -n 2 --bind-to none ds_peer_zinc --config ds.json [--dtype f32|bf16]
 *          [--steps 8] [--threads 1] [--layers 16] [--width 1024]
 *
 * OpenBLAS is opened at run time (libopenblas.so.0, Debian's libopenblas0)
 * so that zinc builds without it; without it this prints SKIPPED and exits
 * 0. --dtype must agree with the config's bf16.enabled (zinc checks): bf16
 * registers the parameters bf16 (zinc keeps the fp32 master), each layer widens its
 * weight to fp32 for sgemm and rounds its output to bf16, as torch's bf16
 * nn.Linear returns a bf16 tensor.
 *
 * What is timed, per step, on rank 0 after a barrier (ds_peer.py times the
 * DeepSpeed side at the same boundaries):
 *   forward  — every module fetched, its product computed, released; the loss
 *   backward — the loss gradient, every module in reverse: fetched, its
 *              weight/bias gradients and the input gradient computed,
 *              grads_ready, released; then zinc_backward_end (the last
 *              reductions: DeepSpeed's engine.backward does them too)
 *   step     — zinc_step (clipping, AdamW, parameter updates and gathers)
 * The first step is a warm-up and is not counted; each figure is the median
 * over the counted steps. Peak RSS is getrusage's ru_maxrss, the largest
 * over the ranks, taken at the end.
 *
 * Output (rank 0), one line that ds_peer.py reads:
 *   zinc iter_s=... fwd_s=... bwd_s=... step_s=... rss_mb=... loss0=... loss=...
 */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "zinc.h"

/* cblas_sgemm's enums, as cblas.h defines them (no header needed at build) */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
typedef void (*set_threads_fn)(int n);
static sgemm_fn sgemm;

#define CHECK(call)                                                                       \
  do {                                                                                    \
    if ((call) != ZINC_OK) {                                                              \
      fprintf(stderr, "ds_peer_zinc: %s failed: %s\n", #call, zinc_last_error());         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                       \
    }                                                                                     \
  } while (0)

/* The value both sides compute for element i of stream `seed`: a
 * multiplicative hash of the index, uniform in [-0.5, 0.5). ds_peer.py
 * computes the same in int64 torch arithmetic. */
static float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t h = ((seed * 1000003u + i) * 2654435761u + 12345u) & 0xffffffffu;
  return (float)((double)h / 4294967296.0 - 0.5);
}

static float bf16_round(float x) { /* round to nearest even, as torch's cast */
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}
static float bf16_load(const uint16_t *p, int64_t i) {
  uint32_t u = (uint32_t)p[i] << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static uint16_t bf16_store(float x) {
  uint32_t u;
  x = bf16_round(x);
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}

typedef struct {
  int layers, width, batch, bf16;
  zinc_module **mods;
  zinc_param **w, **b;
} model;

/* Layer l's weight (out, in) is stream 2l, its bias stream 2l+1; both
 * scaled to the variance of torch's default Linear init, 1 / (3 in). */
static zinc_status init_param(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  const model *m = ctx;
  int layer = -1, is_bias = 0;
  for (int l = 0; l < m->layers && layer < 0; l++)
    if (p == m->w[l] || p == m->b[l])
      layer = l, is_bias = p == m->b[l];
  if (layer < 0)
    return ZINC_ERR_INVALID;
  float scale = 2.0f / sqrtf((float)m->width);
  for (int64_t i = 0; i < n; i++) {
    dst[i] = scale * hash_uniform((uint64_t)(2 * layer + is_bias), (uint64_t)i);
    if (m->bf16) /* DeepSpeed casts the module to bf16 and takes its fp32 master
                    from that, so zinc's master starts from the same values */
      dst[i] = bf16_round(dst[i]);
  }
  return ZINC_OK;
}

static double now(void) { return MPI_Wtime(); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  const char *config = NULL;
  int steps = 8, threads = 1;
  model m = {.layers = 16, .width = 1024};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc)
      config = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
      m.bf16 = !strcmp(argv[++i], "bf16");
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
      m.layers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--width") && i + 1 < argc)
      m.width = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s --config ds.json [--dtype f32|bf16] [--steps N] [--threads T] "
              "[--layers L] [--width W]\n", argv[0]);
      return 2;
    }
  }
  if (!config || steps < 1 || threads < 1 || m.layers < 1 || m.width < 1) {
    fprintf(stderr, "ds_peer_zinc: --config is required; --steps, --threads, --layers and "
            "--width must be >= 1\n");
    return 2;
  }
  int provided, rank, world;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  void *blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (blas)
    sgemm = (sgemm_fn)dlsym(blas, "cblas_sgemm");
  if (!sgemm) {
    if (rank == 0)
      printf("ds_peer_zinc SKIPPED: OpenBLAS not found (%s); install Debian's libopenblas0\n",
             dlerror());
    MPI_Finalize();
    return 0;
  }
  set_threads_fn set_threads = (set_threads_fn)dlsym(blas, "openblas_set_num_threads");
  if (set_threads)
    set_threads(threads);

  zinc_config *cfg;
  zinc_engine *e;
  CHECK(zinc_config_load(config, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  MPI_Comm comm = MPI_COMM_WORLD;
  opt.device = ZINC_DEVICE_CPU;
  opt.mpi_comm = &comm;
  opt.threads = threads;
  opt.hidden_size = m.width;
  CHECK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  m.batch = zinc_micro_batch_size(e);
  int W = m.width, B = m.batch, L = m.layers;

  zinc_dtype dt = m.bf16 ? ZINC_BF16 : ZINC_F32;

  m.mods = calloc((size_t)L, sizeof *m.mods);
  m.w = calloc((size_t)L, sizeof *m.w);
  m.b = calloc((size_t)L, sizeof *m.b);
  for (int l = 0; l < L; l++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d", l);
    m.mods[l] = zinc_module_add(e, name);
    int64_t ws[2] = {W, W}, bs[1] = {W};
    m.w[l] = zinc_param_add(e, m.mods[l], "weight", dt, 2, ws);
    m.b[l] = zinc_param_add(e, m.mods[l], "bias", dt, 1, bs);
    if (!m.w[l] || !m.b[l]) {
      fprintf(stderr, "ds_peer_zinc: registering layer %d: %s\n", l, zinc_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  CHECK(zinc_engine_build(e, init_param, &m));

  /* activations: act[l] is layer l's input (B, W), act[L] the output */
  float **act = calloc((size_t)L + 1, sizeof *act);
  for (int l = 0; l <= L; l++)
    act[l] = malloc((size_t)B * W * sizeof(float));
  float *target = malloc((size_t)B * W * sizeof(float));
  float *dy = malloc((size_t)B * W * sizeof(float)), *dx = malloc((size_t)B * W * sizeof(float));
  float *wf = malloc((size_t)W * W * sizeof(float)); /* a bf16 weight widened */
  float *gf = malloc((size_t)W * W * sizeof(float)); /* a bf16 layer's weight gradient */
  float *bg = malloc((size_t)W * sizeof(float));
  /* each rank's own batch: stream 1000 + rank inputs, 2000 + rank targets */
  for (int64_t i = 0; i < (int64_t)B * W; i++) {
    act[0][i] = 2.0f * hash_uniform(1000u + (uint64_t)rank, (uint64_t)i);
    target[i] = 2.0f * hash_uniform(2000u + (uint64_t)rank, (uint64_t)i);
    if (m.bf16)
      act[0][i] = bf16_round(act[0][i]);
  }

  double *t_it = calloc((size_t)steps, sizeof(double)), *t_f = calloc((size_t)steps, sizeof(double));
  double *t_b = calloc((size_t)steps, sizeof(double)), *t_s = calloc((size_t)steps, sizeof(double));
  double loss0 = 0, loss = 0;
  for (int s = 0; s <= steps; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    /* forward: y = x w^T + b */
    for (int l = 0; l < L; l++) {
      CHECK(zinc_module_fetch(e, m.mods[l]));
      const float *w = zinc_param_data(m.w[l]), *bias = zinc_param_data(m.b[l]);
      float *y = act[l + 1];
      if (m.bf16) {
        for (int64_t i = 0; i < (int64_t)W * W; i++)
          wf[i] = bf16_load((const uint16_t *)w, i);
        w = wf;
      }
      for (int r = 0; r < B; r++)
        for (int o = 0; o < W; o++)
          y[(int64_t)r * W + o] = m.bf16 ? bf16_load((const uint16_t *)bias, o) : bias[o];
      sgemm(ROW_MAJOR, NO_TRANS, TRANS, B, W, W, 1.0f, act[l], W, w, W, 1.0f, y, W);
      if (m.bf16)
        for (int64_t i = 0; i < (int64_t)B * W; i++)
          y[i] = bf16_round(y[i]);
      CHECK(zinc_module_release(e, m.mods[l]));
    }
    /* loss = mean((y - t)^2) in fp32; dy = 2 (y - t) / (B W) */
    double sum = 0;
    float scale = zinc_loss_scale(e) * 2.0f / (float)((int64_t)B * W);
    for (int64_t i = 0; i < (int64_t)B * W; i++) {
      float d = act[L][i] - target[i];
      sum += (double)d * d;
      dy[i] = scale * d;
    }
    loss = sum / ((double)B * W);
    if (s == 0)
      loss0 = loss;
    double t1 = now();
    /* backward: dw += dy^T x, db += sum_rows dy, dx = dy w */
    for (int l = L - 1; l >= 0; l--) {
      CHECK(zinc_module_fetch(e, m.mods[l]));
      const float *w = zinc_param_data(m.w[l]);
      if (m.bf16) {
        for (int64_t i = 0; i < (int64_t)W * W; i++)
          wf[i] = bf16_load((const uint16_t *)w, i);
        w = wf;
      }
      void *gw = zinc_param_grad(m.w[l]), *gb = zinc_param_grad(m.b[l]);
      if (!gw || !gb) {
        fprintf(stderr, "ds_peer_zinc: no gradient buffer for layer %d: %s\n", l,
                zinc_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      for (int o = 0; o < W; o++)
        bg[o] = 0;
      for (int r = 0; r < B; r++)
        for (int o = 0; o < W; o++)
          bg[o] += dy[(int64_t)r * W + o];
      if (m.bf16) {
        sgemm(ROW_MAJOR, TRANS, NO_TRANS, W, W, B, 1.0f, dy, W, act[l], W, 0.0f, gf, W);
        uint16_t *g16 = gw, *b16 = gb;
        for (int64_t i = 0; i < (int64_t)W * W; i++)
          g16[i] = bf16_store(bf16_load(g16, i) + gf[i]);
        for (int o = 0; o < W; o++)
          b16[o] = bf16_store(bf16_load(b16, o) + bg[o]);
      } else {
        sgemm(ROW_MAJOR, TRANS, NO_TRANS, W, W, B, 1.0f, dy, W, act[l], W, 1.0f, gw, W);
        for (int o = 0; o < W; o++)
          ((float *)gb)[o] += bg[o];
      }
      if (l > 0) {
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, B, W, W, 1.0f, dy, W, w, W, 0.0f, dx, W);
        if (m.bf16)
          for (int64_t i = 0; i < (int64_t)B * W; i++)
            dx[i] = bf16_round(dx[i]);
      }
      CHECK(zinc_module_grads_ready(e, m.mods[l]));
      CHECK(zinc_module_release(e, m.mods[l]));
      float *tmp = dy;
      dy = dx;
      dx = tmp;
    }
    CHECK(zinc_backward_end(e));
    double t2 = now();
    CHECK(zinc_step(e, NULL));
    double t3 = now();
    if (s > 0) { /* the first step is a warm-up */
      t_it[s - 1] = t3 - t0;
      t_f[s - 1] = t1 - t0;
      t_b[s - 1] = t2 - t1;
      t_s[s - 1] = t3 - t2;
    }
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss = (double)ru.ru_maxrss / 1024.0, rss_max = rss;
  MPI_Reduce(&rss, &rss_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("zinc iter_s=%.4f fwd_s=%.4f bwd_s=%.4f step_s=%.4f rss_mb=%.0f loss0=%.6f "
           "loss=%.6f ranks=%d\n", median(t_it, steps), median(t_f, steps), median(t_b, steps),
           median(t_s, steps), rss_max, loss0, loss, world);
  zinc_engine_destroy(e);
  for (int l = 0; l <= L; l++)
    free(act[l]);
  free(act), free(target), free(dy), free(dx), free(wf), free(gf), free(bg);
  free(t_it), free(t_f), free(t_b), free(t_s);
  free(m.mods), free(m.w), free(m.b);
  dlclose(blas);
  MPI_Finalize();
  return 0;
}
