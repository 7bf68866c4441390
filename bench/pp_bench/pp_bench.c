/*
 * pp_bench — the pipeline bubble of a 1F1B step against its theory, and
 * the overlap of started transfers with compute (include/zinc.h,
 * "Pipeline parallelism"; docs/3d.md).
 *
 *   mpirun -n 4 pp_bench [--fwd-ms F] [--act-kib A] [--micro 1,2,4,8,16]
 *                        [--steps N] [--overlap-ms C] [--overlap-kib K]
 *
 * 1. The bubble. p = world stages, each one module of zinc at ZeRO 1; a
 *    micro-batch's forward takes F ms and its backward 2F ms (the host
 *    sleeps: an accelerator's compute time, as step_bench --compute-ms),
 *    and A KiB of activations cross each stage boundary each way. A step
 *    is m micro-batches in 1F1B order (examples/mlp3d/pp_schedule.h), the
 *    optimizer at the m-th. Without a bubble a step would take m x 3F; 1F1B
 *    idles (p-1) x 3F of it, a fraction (p-1)/(m+p-1). Printed per m: the
 *    step's median over N steps (the slowest rank's), that ideal, the
 *    bubble measured (1 - ideal/step) beside its theory, and what is left
 *    over (the transfers, zinc's step, the scheduler).
 * 2. The overlap, between stages 0 and 1: K KiB sent while the sender
 *    computes C ms. Blocking (transfer, then compute) takes X + C, X the
 *    transfer alone; started (zinc_pp_start, compute, zinc_pp_wait) takes
 *    S; the overlap is (X + C - S) / min(X, C): 1 when the transfer hides
 *    entirely behind the compute, 0 when it moves only at the wait.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pp_schedule.h"
#include "zinc.h"

typedef struct {
  double fwd_ms, overlap_ms;
  int act_kib, overlap_kib, steps;
  int micro[16], nmicro;
} bench_args;

typedef struct {
  zinc_engine *e;
  zinc_module *m;
  zinc_param *w;
  double fwd_s;
  float *in, *out; /* one slot each: the bench's stages compute nothing */
  zinc_step_info info;
} bench_stage;

static void die(const char *what) {
  fprintf(stderr, "pp_bench: %s: %s\n", what, zinc_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static void *in_of(void *ctx, int k) { (void)k; return ((bench_stage *)ctx)->in; }
static void *out_of(void *ctx, int k) { (void)k; return ((bench_stage *)ctx)->out; }
static void feed(void *ctx, int k) { (void)ctx, (void)k; }

static void forward(void *ctx, int k) {
  bench_stage *B = ctx;
  (void)k;
  if (zinc_module_fetch(B->e, B->m) != ZINC_OK)
    die("fetch");
  sleep_s(B->fwd_s);
  zinc_module_release(B->e, B->m);
}

static void backward(void *ctx, int k) {
  bench_stage *B = ctx;
  (void)k;
  if (zinc_module_fetch(B->e, B->m) != ZINC_OK)
    die("fetch");
  float *g = zinc_param_grad(B->w);
  if (!g)
    die("grad");
  g[0] += 1e-3f;
  sleep_s(2 * B->fwd_s);
  if (zinc_module_grads_ready(B->e, B->m) != ZINC_OK)
    die("grads_ready");
  zinc_module_release(B->e, B->m);
  if (zinc_backward_end(B->e) != ZINC_OK)
    die("backward_end");
}

static zinc_status done(void *ctx, int k) {
  bench_stage *B = ctx;
  (void)k;
  return zinc_step(B->e, &B->info);
}

static zinc_engine *create(int gas) {
  char json[512];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, "
           "\"gradient_accumulation_steps\": %d, \"zero_optimization\": {\"stage\": 1}, "
           "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}}", gas);
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    die("config");
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.pipeline_parallel_size = world;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    die("engine");
  zinc_config_free(cfg);
  return e;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median over the steps of the slowest rank's step time, for m micro-batches. */
static double bubble_step(const bench_args *a, int m, float *in, float *out, float *grad) {
  bench_stage B = {.e = create(m), .fwd_s = a->fwd_ms / 1e3, .in = in, .out = out,
                   .info = ZINC_STEP_INFO_INIT};
  char name[32];
  snprintf(name, sizeof name, "stage%d", zinc_pp_rank(B.e));
  B.m = zinc_module_add(B.e, name);
  int64_t shape[1] = {1024};
  B.w = zinc_param_add(B.e, B.m, "w", ZINC_F32, 1, shape);
  if (!B.w || zinc_engine_build(B.e, NULL, NULL) != ZINC_OK)
    die("build");
  int64_t count = (int64_t)a->act_kib * 1024 / 4;
  pp_stage S = {.ctx = &B, .count = count, .dtype = ZINC_F32, .input = in_of, .output = out_of,
                .grad = grad, .feed = feed, .forward = forward, .backward = backward,
                .done = done};
  double *t = calloc((size_t)a->steps, sizeof *t);
  for (int s = -1; s < a->steps; s++) { /* step -1: warm-up, not timed */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (pp_1f1b(B.e, m, &S) != ZINC_OK)
      die("1F1B step");
    double dt = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (s >= 0)
      t[s] = dt;
  }
  qsort(t, (size_t)a->steps, sizeof *t, cmp_double);
  double med = t[a->steps / 2];
  free(t);
  zinc_engine_destroy(B.e);
  return med;
}

/* Stage 0 sends K KiB to stage 1 while computing C ms: blocking, started,
 * and the transfer alone; the medians of 9 (times on stage 0). */
static void overlap(const bench_args *a, int rank) {
  zinc_engine *e = create(1);
  int64_t count = (int64_t)a->overlap_kib * 1024 / 4;
  float *buf = calloc((size_t)count, sizeof *buf);
  double c = a->overlap_ms / 1e3, tx[9], tb[9], ts[9];
  for (int mode = 0; mode < 3; mode++)
    for (int r = 0; r < 9; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (rank == 0) {
        zinc_pp_op o = {ZINC_PP_SEND_NEXT, buf, count, ZINC_F32};
        zinc_pp_handle *h;
        if (mode == 2) { /* started: under way during the compute */
          if (zinc_pp_start(e, &o, 1, &h) != ZINC_OK)
            die("start");
          sleep_s(c);
          if (zinc_pp_wait(e, h) != ZINC_OK)
            die("wait");
        } else {
          if (zinc_pp_transfer(e, &o, 1) != ZINC_OK)
            die("transfer");
          if (mode == 1)
            sleep_s(c);
        }
      } else if (rank == 1) {
        zinc_pp_op o = {ZINC_PP_RECV_PREV, buf, count, ZINC_F32};
        if (zinc_pp_transfer(e, &o, 1) != ZINC_OK)
          die("receive");
      }
      double dt = MPI_Wtime() - t0;
      (mode == 0 ? tx : mode == 1 ? tb : ts)[r] = dt;
    }
  qsort(tx, 9, sizeof *tx, cmp_double);
  qsort(tb, 9, sizeof *tb, cmp_double);
  qsort(ts, 9, sizeof *ts, cmp_double);
  if (rank == 0) {
    double x = tx[4], b = tb[4], s = ts[4], hide = x < c ? x : c;
    printf("\noverlap: %d KiB to stage 1 while computing %.1f ms (medians of 9, stage 0)\n"
           "  transfer alone %.3f ms; blocking then compute %.3f ms; started %.3f ms\n"
           "  overlap %.2f (1: the transfer hides behind the compute; 0: it moves at the "
           "wait)\n", a->overlap_kib, a->overlap_ms, x * 1e3, b * 1e3, s * 1e3,
           hide > 0 ? (x + c - s) / hide : 0.0);
  }
  free(buf);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  bench_args a = {.fwd_ms = 4, .act_kib = 256, .steps = 7, .overlap_ms = 20,
                  .overlap_kib = 4096};
  const char *micro = "1,2,4,8,16";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "pp_bench: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--fwd-ms")) a.fwd_ms = atof(v), i++;
    else if (!strcmp(argv[i], "--act-kib")) a.act_kib = atoi(v), i++;
    else if (!strcmp(argv[i], "--micro")) micro = v, i++;
    else if (!strcmp(argv[i], "--steps")) a.steps = atoi(v), i++;
    else if (!strcmp(argv[i], "--overlap-ms")) a.overlap_ms = atof(v), i++;
    else if (!strcmp(argv[i], "--overlap-kib")) a.overlap_kib = atoi(v), i++;
    else {
      fprintf(stderr, "usage: pp_bench [--fwd-ms F] [--act-kib A] [--micro 1,2,4] "
              "[--steps N] [--overlap-ms C] [--overlap-kib K]\n");
      return 2;
    }
  }
  for (const char *p = micro; *p && a.nmicro < 16; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
    a.micro[a.nmicro++] = atoi(p);
  int provided, rank, world;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) {
    printf("SKIPPED: pp_bench needs at least 2 ranks (pipeline stages)\n");
    MPI_Finalize();
    return 0;
  }
  int64_t count = (int64_t)a.act_kib * 1024 / 4;
  float *in = calloc((size_t)count, sizeof *in), *out = calloc((size_t)count, sizeof *out);
  float *grad = calloc((size_t)count, sizeof *grad);
  if (rank == 0)
    printf("pipeline bubble, 1F1B: %d stages, forward %.1f ms + backward %.1f ms per "
           "micro-batch, %d KiB activations, median of %d steps\n\n"
           "| m | step ms | ideal m x 3F | bubble measured | theory (p-1)/(m+p-1) | left over ms |\n"
           "| --- | --- | --- | --- | --- | --- |\n", world, a.fwd_ms, 2 * a.fwd_ms,
           a.act_kib, a.steps);
  for (int i = 0; i < a.nmicro; i++) {
    int m = a.micro[i];
    double step = bubble_step(&a, m, in, out, grad) * 1e3, ideal = m * 3 * a.fwd_ms;
    double theory = (double)(world - 1) / (m + world - 1);
    double with_bubble = (m + world - 1) * 3 * a.fwd_ms;
    if (rank == 0)
      printf("| %d | %.2f | %.2f | %.3f | %.3f | %.2f |\n", m, step, ideal, 1 - ideal / step,
             theory, step - with_bubble);
  }
  overlap(&a, rank);
  free(in);
  free(out);
  free(grad);
  MPI_Finalize();
  return 0;
}
