/*
 * step_bench — one training step of a >= 50 M parameter model at stages
 * 0-3 (world size 2 under mpirun), as a ratio to stage 0 in the same run;
 * the engine's overhead against the same arithmetic without the engine
 * (rank 0 alone: the gradient writes plus the fused Adam kernel called
 * directly, and a plain hand-written C Adam loop); and, when Debian's
 * python3-torch is present, PyTorch's ZeroRedundancyOptimizer (gloo, one
 * thread per rank) on the same parameter count beside zinc's stage-1
 * iteration (gradient reduction + Adam on the shard + parameter gather).
 *
 * The "trainer" here does no model arithmetic: its backward writes a
 * gradient pattern (a memory copy per parameter), so the step time is the
 * engine's work: collectives, the optimizer and the copies a real trainer
 * would also pay for.
 *
 *   mpirun -n 2 --oversubscribe step_bench [--params 67108864] [--modules 16]
 *          [--steps 3] [--dtype f32|bf16] [--no-torch] [--hpz H] [--compress]
 *          [--compress-codec int4|terngrad] [--dgc DENSITY [--dgc-momentum]] [--dga D]
 *          [--powersgd RANK [--powersgd-stage 0|1]] [--onebit] [--zoadam]
 *          [--zoadam-local H] [--onebit-lamb] [--compute-ms MS]
 *
 * --compute-ms MS: the backward pass also waits MS milliseconds per step,
 * spread over the modules (a sleep: an accelerator computing while the
 * host is idle), so that a method that overlaps communication with
 * computation (delayed averaging, the overlapped reductions) has
 * computation to hide behind. 0 by default: the step is the engine's work.
 *
 * --hpz H times only stage 3, with zero_hpz_partition_size 1 and H in
 * alternating steps of the same run, and prints both and their ratio. Both
 * runs release a gathered module after use (stage3_max_reuse_distance 0),
 * as a model larger than the live-parameter limit does, so that the
 * backward pass gathers again: that gather is what hpZ keeps inside the
 * groups of H ranks (a node's, under tests/cluster/cluster.sh).
 *
 * --compress likewise times stage 3 exact against int4 gradients (LoCo
 * error feedback) and int8 weights (qgZ + qwZ), target 2.5x on two nodes
 * over a 1 Gbit/s link; --compress-codec terngrad takes TernGrad
 * gradients (zinc.compression.gradient_codec, no error feedback) instead
 * of int4.
 *
 * --dgc DENSITY likewise: exact against DGC's top-k gradients (block 256,
 * the fp32 residual) at that density, parameters gathered exactly;
 * --dgc-momentum: SGD (momentum 0.9) in both runs and DGC's momentum
 * correction (engine/reduce/dgc.c) with scope "all".
 *
 * --dga D: stage 0 only, the synchronous all-reduce against delayed
 * gradient averaging with delay D (the all-reduce in the background for D
 * steps), each run back to back, the mean of --steps steps.
 * --powersgd RANK likewise at stage 1 (--powersgd-stage 0 for stage 0):
 * the exact reduction against PowerSGD at matrix_approximation_rank RANK
 * from the first step (start_powerSGD_iter 0, error feedback, warm start;
 * every weight here is a (params / modules / 1024) x 1024 matrix).

 * --onebit times stage 0: exact AdamW against OneBitAdam (same lr and
 * decay) after its freeze_step 1 (the warm-up step is untimed): no
 * gradient reduction, the momentum all-reduced 1-bit (engine/reduce/onebit.h).
 *
 * --zoadam likewise: exact AdamW against ZeroOneAdam (0/1 Adam) with its
 * variance frozen after the warm-up step and a sync every step
 * (--zoadam-local H: a sync every H steps, the local steps between move
 * nothing but the norm's agreement).
 *
 * --onebit-lamb likewise: exact AdamW against OneBitLamb (1-bit LAMB)
 * after its freeze_step 1: the whole momentum all-reduced 1-bit.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "device/device.h"
#include "device/device_cpu.h"
#include "base/threadpool.h"
#include "zinc.h"
#include "kernels/zinc_math.h"

typedef struct {
  int64_t params;
  int modules;
  int steps;
  zinc_dtype dtype;
  int torch;
  int hpz;              /* > 0: only stage 3, hpZ 1 against this */
  int compress;         /* only stage 3, exact against qgZ + qwZ */
  int terngrad;         /* --compress-codec terngrad: qgZ's codec is TernGrad */
  double dgc;           /* > 0: only stage 3, exact against DGC at this density */
  int dgc_momentum;     /* with --dgc: SGD (momentum 0.9) in both, DGC's
                           momentum correction on, scope "all" */
  int dga;              /* > 0: only stage 0, synchronous against DGA's delay */
  int wire;             /* the pairs: comms_logger on, bytes per step printed */
  double compute_ms;    /* --compute-ms: the model's backward, emulated per step */
  int psgd_rank;        /* > 0: only psgd_stage, exact against PowerSGD */
  int psgd_stage;       /* 0 or 1 (default 1) */
  int onebit;           /* only stage 0, exact AdamW against OneBitAdam */
  int zoadam;           /* only stage 0, exact AdamW against ZeroOneAdam */
  int zoadam_local;     /* > 1: its local_step_clipper (a sync every H steps) */
  int onebit_lamb;      /* only stage 0, exact AdamW against OneBitLamb */
  int pair_stage;       /* the stage run_pair times (3; 0 for --onebit) */
  const char *pair_optimizer[2]; /* run_pair's two "optimizer" values (NULL:
                                    open_stage_with's AdamW) */
} bench_args;

static void die(const char *what) {
  fprintf(stderr, "step_bench: %s: %s\n", what, zinc_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static zinc_status init_fn(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.02f * (float)((i * 7) % 13 - 6);
  return ZINC_OK;
}

/* Gradient-like values (about 1e-3; never denormal, which would make any
 * CPU arithmetic on them crawl). */
static void fill_pattern(void *dst, int64_t n, zinc_dtype dt) {
  for (int64_t i = 0; i < n; i++)
    zinc_store_from_f32(dst, i, dt, 1e-3f * (float)((i * 7) % 13 - 6));
}

/* An engine on the cpu device over comm, from a JSON config. */
static zinc_engine *create_engine(const char *json, MPI_Comm comm, int threads) {
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    die("config");
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.mpi_comm = &comm; /* read during zinc_engine_create only */
  opt.threads = threads;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    die("engine create");
  zinc_config_free(cfg);
  return e;
}

typedef struct {
  double step, forward, backward, optim, comm, iteration;
} timing;

/* Median-free: the minimum over steps (after one warm-up step) is the
 * figure least disturbed by the other rank sharing the 2 cores. */
/* A stage's engine and its model. */
typedef struct {
  zinc_engine *e;
  zinc_module **mods;
  zinc_param **pars;
  char *pattern;
  size_t gbytes;
} bench_model;

/* extra: more zero_optimization members (each after a comma), top: more
 * top-level members (each after a comma); NULL for none. optimizer: the
 * "optimizer" member's value (NULL: AdamW, lr 1e-3, weight_decay 0.01). */
static void open_stage_with(const bench_args *a, int stage, const char *extra, const char *top,
                            const char *optimizer, MPI_Comm comm, int threads,
                            bench_model *b) {
  char json[2400];
  if (!extra)
    extra = "";
  if (!top)
    top = "";
  if (!optimizer)
    optimizer = "{\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"weight_decay\": 0.01}}";
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
           " \"gradient_clipping\": %s,"
           " \"optimizer\": %s,"
           " \"bf16\": {\"enabled\": %s},"
           " \"zero_optimization\": {\"stage\": %d, \"overlap_comm\": %s,"
           " \"reduce_bucket_size\": 50000000, \"allgather_bucket_size\": 50000000,"
           " \"stage3_prefetch_bucket_size\": 50000000, \"stage3_param_persistence_threshold\": 0"
           "%s}%s%s}",
           /* 0/1 Adam and 1-bit LAMB refuse clipping: their gradients are
            * rank-local */
           strstr(optimizer, "ZeroOneAdam") || strstr(optimizer, "OneBitLamb") ? "0" : "1.0",
           optimizer,
           a->dtype == ZINC_BF16 ? "true" : "false", stage, stage >= 2 ? "true" : "false",
           extra, top, a->wire ? ", \"comms_logger\": {\"enabled\": true}" : "");
  zinc_engine *e = create_engine(json, comm, threads);
  int64_t per = a->params / a->modules;
  zinc_module **mods = calloc((size_t)a->modules, sizeof *mods);
  zinc_param **pars = calloc((size_t)a->modules, sizeof *pars);
  for (int i = 0; i < a->modules; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d", i);
    mods[i] = zinc_module_add(e, name);
    int64_t shape[2] = {per / 1024, 1024};
    pars[i] = zinc_param_add(e, mods[i], "weight", a->dtype, 2, shape);
    if (!pars[i])
      die("param add");
  }
  if (zinc_engine_build(e, init_fn, NULL) != ZINC_OK)
    die("build");
  size_t gbytes = (size_t)(per / 1024 * 1024) * zinc_dtype_size(a->dtype);
  char *pattern = malloc(gbytes);
  fill_pattern(pattern, (int64_t)(gbytes / zinc_dtype_size(a->dtype)), a->dtype);
  *b = (bench_model){e, mods, pars, pattern, gbytes};
}

/* hpz > 0: stage 3 with zero_hpz_partition_size hpz and no reuse. */
static void open_stage(const bench_args *a, int stage, int hpz, MPI_Comm comm, int threads,
                       bench_model *b) {
  char extra[128] = "";
  if (hpz > 0)
    snprintf(extra, sizeof extra, ", \"zero_hpz_partition_size\": %d,"
             " \"stage3_max_reuse_distance\": 0", hpz);
  open_stage_with(a, stage, extra, NULL, NULL, comm, threads, b);
}

static void close_stage(bench_model *b) {
  free(b->pattern);
  free(b->mods);
  free(b->pars);
  zinc_engine_destroy(b->e);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

/* One timed step. */
static timing one_step(const bench_args *a, bench_model *b, MPI_Comm comm) {
  zinc_engine *e = b->e;
  zinc_module **mods = b->mods;
  zinc_param **pars = b->pars;
  char *pattern = b->pattern;
  size_t gbytes = b->gbytes;
  {
    zinc_timers tm = ZINC_TIMERS_INIT;
    zinc_timers_take(e, &tm);
    MPI_Barrier(comm);
    double t0 = zinc_now();
    for (int i = 0; i < a->modules; i++) {
      if (zinc_module_fetch(e, mods[i]) != ZINC_OK || !zinc_param_data(pars[i]))
        die("fetch");
      zinc_module_release(e, mods[i]);
    }
    double t_bwd = zinc_now();
    for (int i = a->modules - 1; i >= 0; i--) {
      zinc_module_fetch(e, mods[i]);
      void *g = zinc_param_grad(pars[i]);
      if (!g)
        die("grad");
      memcpy(g, pattern, gbytes);
      if (a->compute_ms > 0) /* an accelerator's backward: the host waits, idle */
        sleep_s(a->compute_ms / 1e3 / a->modules);
      if (zinc_module_grads_ready(e, mods[i]) != ZINC_OK)
        die("grads_ready");
      zinc_module_release(e, mods[i]);
    }
    double t_be = zinc_now();
    if (zinc_backward_end(e) != ZINC_OK)
      die("backward_end");
    double t_step = zinc_now();
    if (zinc_step(e, NULL) != ZINC_OK)
      die("step");
    double t1 = zinc_now();
    zinc_timers_take(e, &tm);
    timing t = {t1 - t0, t_bwd - t0, t_step - t_bwd, t1 - t_step, tm.comm_wait,
                (t_step - t_be) + (t1 - t_step)};
    return t;
  }
}

static timing run_stage(const bench_args *a, int stage, MPI_Comm comm, int threads) {
  bench_model b;
  open_stage(a, stage, 0, comm, threads, &b);
  timing best = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
  for (int s = 0; s <= a->steps; s++) {
    timing t = one_step(a, &b, comm);
    if (s > 0 && t.step < best.step)
      best = t;
  }
  close_stage(&b);
  return best;
}

/* Two stage-3 engines side by side (labels, zero_optimization extras and
 * top-level extras), their steps alternating (after one warm-up step each)
 * so that the machine's noise hits both; the best step of each, and the
 * first's over the second's against `target`. */
typedef struct {
  const char *label, *extra, *top;
} variant;

/* Bytes this rank sent per step since the counters were reset (the comms
 * logger's wire bytes), and what the same ops would have sent
 * uncompressed (their logical bytes; a plain row's wire bytes). */
static void wire_per_step(zinc_engine *e, int steps, double *wire, double *logical) {
  zinc_comms_stat rows[64];
  for (int i = 0; i < 64; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  *wire = *logical = 0;
  if (zinc_comms_stats(e, rows, 64, &n) != ZINC_OK)
    die("comms stats");
  for (int i = 0; i < n && i < 64; i++) {
    double w = (double)(rows[i].wire_intra + rows[i].wire_inter);
    *wire += w / steps;
    *logical += (rows[i].codec ? (double)rows[i].logical_bytes : w) / steps;
  }
}

static void run_pair(const bench_args *a, int rank, const variant v[2], const char *what,
                     double target) {
  bench_args aw = *a;
  aw.wire = 1;
  a = &aw;
  bench_model b[2];
  for (int k = 0; k < 2; k++)
    open_stage_with(a, a->pair_stage, v[k].extra, v[k].top, a->pair_optimizer[k],
                    MPI_COMM_WORLD, 0, &b[k]);
  timing best[2] = {{1e30, 1e30, 1e30, 1e30, 1e30, 1e30}, {1e30, 1e30, 1e30, 1e30, 1e30, 1e30}};
  for (int s = 0; s <= a->steps; s++)
    for (int k = 0; k < 2; k++) {
      timing t = one_step(a, &b[k], MPI_COMM_WORLD);
      if (s == 0 && zinc_comms_reset(b[k].e) != ZINC_OK) /* count the timed steps */
        die("comms reset");
      if (s > 0 && t.step < best[k].step)
        best[k] = t;
    }
  double wire[2], logical[2];
  for (int k = 0; k < 2; k++)
    wire_per_step(b[k].e, a->steps, &wire[k], &logical[k]);
  close_stage(&b[0]);
  close_stage(&b[1]);
  if (rank == 0) {
    char stage[16];
    snprintf(stage, sizeof stage, "stage %d", a->pair_stage);
    printf("\n%-22s %10s %10s %10s %10s %10s\n", stage, "step s", "fetch s", "bwd s",
           "optim s", "comm wait");
    for (int k = 0; k < 2; k++)
      printf("%-22s %10.3f %10.3f %10.3f %10.3f %10.3f\n", v[k].label, best[k].step,
             best[k].forward, best[k].backward, best[k].optim, best[k].comm);
    double ratio = best[0].step / best[1].step;
    printf("%s: step %.3f s vs %.3f s without: %.2fx faster (target >= %.2fx) %s\n", what,
           best[1].step, best[0].step, ratio, target, ratio >= target ? "PASS" : "FAIL");
    printf("%s: rank 0 sent %.2f MB per step vs %.2f MB without: %.1fx fewer bytes (the same "
           "ops uncompressed: %.2f MB)\n", what, wire[1] / 1e6, wire[0] / 1e6,
           wire[1] > 0 ? wire[0] / wire[1] : 0.0, logical[1] / 1e6);
  }
}

/* hpZ: zero_hpz_partition_size 1 against H, no reuse (the backward pass
 * gathers again: that gather is what hpZ keeps inside a group). */
static void run_hpz(const bench_args *a, int rank) {
  char with[128], what[32];
  snprintf(with, sizeof with, ", \"zero_hpz_partition_size\": %d,"
           " \"stage3_max_reuse_distance\": 0", a->hpz);
  snprintf(what, sizeof what, "hpZ %d", a->hpz);
  variant v[2] = {{"hpz 1", ", \"zero_hpz_partition_size\": 1, \"stage3_max_reuse_distance\": 0",
                   NULL},
                  {what, with, NULL}};
  run_pair(a, rank, v, what, 1.25);
}

/* Compressed communication: exact against int4 gradients with LoCo error
 * feedback and int8 weights (qgZ + qwZ), no reuse. The default scope
 * compresses only across nodes: run it on tests/cluster/cluster.sh's
 * nodes (or with ZINC_COMM_NODE_SIZE faking them). */
static void run_compress(const bench_args *a, int rank) {
  variant v[2] = {{"exact", ", \"stage3_max_reuse_distance\": 0", NULL},
                  {"qgZ int4 + qwZ int8",
                   ", \"stage3_max_reuse_distance\": 0, \"zero_quantized_gradients\": true,"
                   " \"zero_quantized_weights\": true,"
                   " \"zeropp_loco_param\": {\"err_beta\": 0.8, \"reset_T\": 1024}",
                   NULL}};
  if (a->terngrad)
    v[1] = (variant){"qgZ terngrad + qwZ int8",
                     ", \"stage3_max_reuse_distance\": 0, \"zero_quantized_gradients\": true,"
                     " \"zero_quantized_weights\": true",
                     ", \"zinc\": {\"compression\": {\"gradient_codec\": \"terngrad\"}}"};
  run_pair(a, rank, v, "qgZ + qwZ", 2.5);
}

/* 1-bit Adam at stage 0 after its freeze_step (1: the untimed warm-up
 * step) against exact AdamW, same lr and decay. */
static void run_onebit(const bench_args *a, int rank) {
  bench_args s0 = *a;
  s0.pair_stage = 0;
  s0.pair_optimizer[1] = "{\"type\": \"OneBitAdam\", \"params\": {\"lr\": 1e-3,"
                         " \"weight_decay\": 0.01, \"freeze_step\": 1}}";
  variant v[2] = {{"exact adamw", NULL, NULL}, {"onebit adam", NULL, NULL}};
  run_pair(&s0, rank, v, "OneBitAdam", 2.0);
}

/* 0/1 Adam at stage 0 against exact AdamW, same lr and decay: the
 * variance frozen after the first (untimed) step, then a sync every step
 * (DeepSpeed's local_step_scaler 32678 keeps the interval at 1 this
 * early): no gradient reduction, the momentum accumulator all-reduced
 * 1-bit (engine/reduce/zoadam.c, engine/reduce/onebit.h). With --zoadam-local H the
 * interval doubles every step up to H (local_step_scaler 1,
 * local_step_clipper H): one sync every H steps, the local steps between
 * move nothing but the norm's two doubles. */
static void run_zoadam(const bench_args *a, int rank) {
  bench_args s0 = *a;
  s0.pair_stage = 0;
  static char zo[320];
  if (a->zoadam_local > 1)
    snprintf(zo, sizeof zo, "{\"type\": \"ZeroOneAdam\", \"params\": {\"lr\": 1e-3,"
             " \"weight_decay\": 0.01, \"var_freeze_step\": 0, \"local_step_scaler\": 1,"
             " \"local_step_clipper\": %d}}", a->zoadam_local);
  else
    snprintf(zo, sizeof zo, "{\"type\": \"ZeroOneAdam\", \"params\": {\"lr\": 1e-3,"
             " \"weight_decay\": 0.01, \"var_freeze_step\": 0}}");
  s0.pair_optimizer[1] = zo;
  variant v[2] = {{"exact adamw", NULL, NULL}, {"0/1 adam", NULL, NULL}};
  run_pair(&s0, rank, v, "ZeroOneAdam", 2.0);
}

/* 1-bit LAMB at stage 0 after its freeze_step (1: the untimed warm-up
 * step) against exact AdamW, same lr and decay: no gradient reduction,
 * the whole momentum all-reduced 1-bit as one segment
 * (engine/reduce/onebit_lamb.c). */
static void run_onebit_lamb(const bench_args *a, int rank) {
  bench_args s0 = *a;
  s0.pair_stage = 0;
  s0.pair_optimizer[1] = "{\"type\": \"OneBitLamb\", \"params\": {\"lr\": 1e-3,"
                         " \"weight_decay\": 0.01, \"freeze_step\": 1}}";
  variant v[2] = {{"exact adamw", NULL, NULL}, {"1-bit lamb", NULL, NULL}};
  run_pair(&s0, rank, v, "OneBitLamb", 2.0);
}

/* DGC (zinc.compression.gradient_codec "dgc", top-k of every block of
 * 256 with its fp32 residual) at density a->dgc against exact, no reuse,
 * the parameters gathered exactly. Scope inter_node, as --compress. */
static void run_dgc(const bench_args *a, int rank) {
  char top[384], label[64];
  bench_args am = *a;
  if (a->dgc_momentum) { /* engine/reduce/dgc.c: SGD with momentum in both runs */
    am.pair_optimizer[0] = am.pair_optimizer[1] =
        "{\"type\": \"SGD\", \"params\": {\"lr\": 1e-3, \"momentum\": 0.9}}";
    a = &am;
  }
  snprintf(top, sizeof top, ", \"zinc\": {\"compression\": {\"gradient_codec\": \"dgc\",%s"
           " \"dgc\": {\"density\": %.17g%s}}}%s", a->dgc_momentum ? " \"scope\": \"all\"," : "",
           a->dgc, a->dgc_momentum ? ", \"momentum_correction\": true" : "",
           a->dgc_momentum ? ", \"zero_allow_untested_optimizer\": true" : "");
  snprintf(label, sizeof label, "dgc %g%s", a->dgc, a->dgc_momentum ? " momentum" : "");
  variant v[2] = {{"exact", ", \"stage3_max_reuse_distance\": 0",
                   a->dgc_momentum ? ", \"zero_allow_untested_optimizer\": true" : NULL},
                  {label, ", \"stage3_max_reuse_distance\": 0, \"zero_quantized_gradients\": true",
                   top}};
  run_pair(a, rank, v, "DGC", 1.0);
}

/* Delayed gradient averaging (zinc.compression.delayed_averaging, stage 0)
 * with delay D against stage 0's synchronous all-reduce: the step waits
 * for the all-reduce started D steps earlier, so on a slow link the step
 * time approaches the compute time (here: the gradient writes, the
 * corrections and Adam). Not alternated as the pairs are: another engine's
 * step between two of DGA's would give its all-reduce free time. Each
 * variant runs its steps back to back; the figure is the mean of the steps
 * after 1 + D warm-up steps (the pipeline full). */
static timing mean_steps(const bench_args *a, const char *top, int warm, double *wire) {
  bench_args aw = *a;
  aw.wire = 1;
  a = &aw;
  bench_model b;
  open_stage_with(a, 0, "", top, NULL, MPI_COMM_WORLD, 0, &b);
  timing sum = {0, 0, 0, 0, 0, 0};
  for (int s = 0; s < warm + a->steps; s++) {
    if (s == warm && zinc_comms_reset(b.e) != ZINC_OK)
      die("comms reset");
    timing t = one_step(a, &b, MPI_COMM_WORLD);
    if (s < warm)
      continue;
    sum.step += t.step / a->steps;
    sum.forward += t.forward / a->steps;
    sum.backward += t.backward / a->steps;
    sum.optim += t.optim / a->steps;
    sum.comm += t.comm / a->steps;
  }
  /* the comms logger counts an all-reduce when it completes, and DGA's
   * last D are still in flight: bytes per gradient all-reduce counted
   * (the row of the largest message), about one per step */
  zinc_comms_stat rows[64];
  for (int i = 0; i < 64; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  if (zinc_comms_stats(b.e, rows, 64, &n) != ZINC_OK)
    die("comms stats");
  double total = 0;
  uint64_t largest = 0, calls = (uint64_t)a->steps;
  for (int i = 0; i < n && i < 64; i++) {
    total += (double)(rows[i].wire_intra + rows[i].wire_inter);
    if (top && rows[i].msg_bytes > largest) {
      largest = rows[i].msg_bytes;
      calls = rows[i].count;
    }
  }
  *wire = calls ? total / (double)calls : 0;
  close_stage(&b);
  return sum;
}

static void run_dga(const bench_args *a, int rank) {
  char top[160], label[64];
  snprintf(top, sizeof top, ", \"zinc\": {\"compression\": {\"delayed_averaging\": "
           "{\"delay\": %d}}}", a->dga);
  snprintf(label, sizeof label, "dga %d", a->dga);
  double wire[2];
  timing t[2] = {mean_steps(a, NULL, 1, &wire[0]), mean_steps(a, top, 1 + a->dga, &wire[1])};
  const char *names[2] = {"synchronous", label};
  if (rank == 0) {
    printf("\n%-20s %d %10s %10s %10s %10s %10s\n", "stage", 0, "step s", "fetch s", "bwd s",
           "optim s", "comm wait");
    for (int k = 0; k < 2; k++)
      printf("%-22s %10.3f %10.3f %10.3f %10.3f %10.3f\n", names[k], t[k].step, t[k].forward,
             t[k].backward, t[k].optim, t[k].comm);
    /* the pairs' wording, which methods_cluster.sh reads */
    printf("DGA: step %.3f s vs %.3f s without: %.2fx faster (mean of %d steps back to back)\n",
           t[1].step, t[0].step, t[0].step / t[1].step, a->steps);
    printf("DGA: rank 0 sent %.2f MB per step vs %.2f MB without: %.1fx fewer bytes\n",
           wire[1] / 1e6, wire[0] / 1e6, wire[1] > 0 ? wire[0] / wire[1] : 0.0);
  }
}

/* PowerSGD (zinc.compression.gradient_codec "powersgd") at rank
 * a->psgd_rank against the exact reduction, at stage a->psgd_stage. */
static void run_powersgd(const bench_args *a, int rank) {
  char top[256], label[64];
  snprintf(top, sizeof top, ", \"zinc\": {\"compression\": {\"gradient_codec\": \"powersgd\","
           " \"powersgd\": {\"matrix_approximation_rank\": %d, \"start_powerSGD_iter\": 0}}}",
           a->psgd_rank);
  snprintf(label, sizeof label, "powersgd %d", a->psgd_rank);
  variant v[2] = {{"exact", "", NULL}, {label, "", top}};
  bench_args ap = *a;
  ap.pair_stage = a->psgd_stage;
  run_pair(&ap, rank, v, label, 1.0);
}

/* Engine overhead, one rank: zinc's stage-0 step (the trainer's gradient
 * writes through the engine, reduction, norm, Adam) alternated with the
 * same arithmetic without the engine — zero and write the gradients (a
 * trainer's zero_grad + backward), the global norm for clipping, Adam —
 * with zinc's kernels called directly, and with a plain C loop. Pairs run
 * back to back so that the machine's noise hits both; the figure is the
 * median of the per-pair ratios. */
typedef struct {
  double zinc, kernel, plain, ratio;
} overhead;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static overhead run_overhead(const bench_args *a, int threads) {
  char json[512];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 1.0,"
           " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"weight_decay\": 0.01}},"
           " \"bf16\": {\"enabled\": %s}, \"zero_optimization\": {\"stage\": 0,"
           " \"reduce_bucket_size\": 50000000}}", a->dtype == ZINC_BF16 ? "true" : "false");
  zinc_engine *e = create_engine(json, MPI_COMM_SELF, threads);
  int64_t per = a->params / a->modules / 1024 * 1024, n = per * a->modules;
  size_t es = zinc_dtype_size(a->dtype);
  zinc_module **mods = calloc((size_t)a->modules, sizeof *mods);
  zinc_param **pars = calloc((size_t)a->modules, sizeof *pars);
  for (int i = 0; i < a->modules; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d", i);
    mods[i] = zinc_module_add(e, name);
    int64_t shape[2] = {per / 1024, 1024};
    pars[i] = zinc_param_add(e, mods[i], "weight", a->dtype, 2, shape);
  }
  if (zinc_engine_build(e, init_fn, NULL) != ZINC_OK)
    die("build");
  char *pattern = malloc((size_t)per * es);
  fill_pattern(pattern, per, a->dtype);
  /* the bare arrays */
  float *p = malloc((size_t)n * 4), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
  char *g = malloc((size_t)n * es), *p16 = malloc((size_t)n * es);
  for (int64_t i = 0; i < n; i++)
    p[i] = 0.02f * (float)((i * 7) % 13 - 6);
  zinc_device *dev;
  if (zinc_device_cpu_create(threads, 0, &dev) != ZINC_OK)
    die("cpu device");
  zinc_opt_coef c = {.grad_scale = 1, .beta1 = 0.9f, .one_minus_beta1 = 0.1f, .beta2 = 0.999f,
                      .one_minus_beta2 = 0.001f, .eps = 1e-8f, .step_size = 1e-3f,
                      .inv_sqrt_bc2 = 1, .weight_decay = 0.01f, .decay_factor = 1 - 1e-5f,
                      .adamw = 1};
  zinc_opt_seg seg = {.master = p, .exp_avg = m, .exp_avg_sq = v, .grad = g,
                       .param_out = a->dtype == ZINC_F32 ? NULL : p16, .n = n,
                       .grad_dtype = a->dtype, .param_dtype = a->dtype, .decay = 1};
  int rounds = 2 * a->steps + 3;
  double *ratios = calloc((size_t)rounds, sizeof *ratios);
  overhead o = {1e30, 1e30, 1e30, 0};
  for (int s = 0; s < rounds; s++) {
    double t0 = zinc_now();
    for (int i = 0; i < a->modules; i++) {
      zinc_module_fetch(e, mods[i]);
      zinc_module_release(e, mods[i]);
    }
    for (int i = a->modules - 1; i >= 0; i--) {
      zinc_module_fetch(e, mods[i]);
      memcpy(zinc_param_grad(pars[i]), pattern, (size_t)per * es);
      zinc_module_grads_ready(e, mods[i]);
      zinc_module_release(e, mods[i]);
    }
    if (zinc_backward_end(e) != ZINC_OK || zinc_step(e, NULL) != ZINC_OK)
      die("step");
    double t1 = zinc_now();
    memset(g, 0, (size_t)n * es);
    for (int i = 0; i < a->modules; i++)
      memcpy(g + (size_t)i * per * es, pattern, (size_t)per * es);
    zinc_sumsq_chunk chunk = {.data = g, .n = n, .dtype = a->dtype};
    double sq;
    if (dev->ops->sumsq(dev, NULL, &chunk, 1, &sq) != ZINC_OK ||
        dev->ops->optim(dev, NULL, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL) != ZINC_OK)
      die("adam");
    double t2 = zinc_now();
    memset(g, 0, (size_t)n * es);
    for (int i = 0; i < a->modules; i++)
      memcpy(g + (size_t)i * per * es, pattern, (size_t)per * es);
    double sq2 = 0;
    for (int64_t i = 0; i < n; i++) {
      double x = zinc_load_as_f32(g, i, a->dtype);
      sq2 += x * x;
    }
    float clip = sq2 > 1.0 ? (float)(1.0 / sqrt(sq2)) : 1.0f;
    for (int64_t i = 0; i < n; i++) { /* the textbook loop */
      float gi = zinc_load_as_f32(g, i, a->dtype) * clip;
      m[i] = 0.9f * m[i] + 0.1f * gi;
      v[i] = 0.999f * v[i] + 0.001f * gi * gi;
      p[i] = p[i] * (1 - 1e-5f) - 1e-3f * m[i] / (sqrtf(v[i]) + 1e-8f);
      if (a->dtype != ZINC_F32)
        zinc_store_from_f32(p16, i, a->dtype, p[i]);
    }
    double t3 = zinc_now();
    if (s == 0)
      continue; /* warm-up */
    ratios[s - 1] = (t1 - t0) / (t2 - t1);
    o.zinc = fmin(o.zinc, t1 - t0);
    o.kernel = fmin(o.kernel, t2 - t1);
    o.plain = fmin(o.plain, t3 - t2);
  }
  qsort(ratios, (size_t)rounds - 1, sizeof *ratios, cmp_double);
  o.ratio = ratios[(rounds - 1) / 2];
  zinc_device_destroy(dev);
  zinc_engine_destroy(e);
  free(mods);
  free(pars);
  free(pattern);
  free(p);
  free(m);
  free(v);
  free(g);
  free(p16);
  free(ratios);
  return o;
}

static int run_torch(const bench_args *a, int ranks, double *iteration) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 %s/bench/step_bench/torch_zero.py --params %lld --ranks %d "
           "--iters %d 2>&1",
           ZINC_SOURCE_DIR, (long long)a->params, ranks, a->steps);
  FILE *f = popen(cmd, "r");
  if (!f)
    return 0;
  char line[512];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char *it = strstr(line, "iteration_s=");
    if (strstr(line, "torch_zero") && it) {
      *iteration = atof(it + 12);
      found = 1;
      printf("  %s", line);
    } else if (strstr(line, "SKIPPED") || strstr(line, "Error")) {
      printf("  %s", line);
    }
  }
  pclose(f);
  return found;
}

int main(int argc, char **argv) {
  bench_args a = {.params = 64ll << 20, .modules = 16, .steps = 3, .dtype = ZINC_F32,
                  .torch = 1, .psgd_stage = 1, .pair_stage = 3};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--params") && i + 1 < argc)
      a.params = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--modules") && i + 1 < argc)
      a.modules = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      a.steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
      a.dtype = !strcmp(argv[++i], "bf16") ? ZINC_BF16 : ZINC_F32;
    else if (!strcmp(argv[i], "--no-torch"))
      a.torch = 0;
    else if (!strcmp(argv[i], "--hpz") && i + 1 < argc)
      a.hpz = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compress"))
      a.compress = 1;
    else if (!strcmp(argv[i], "--compress-codec") && i + 1 < argc &&
             (!strcmp(argv[i + 1], "int4") || !strcmp(argv[i + 1], "terngrad")))
      a.terngrad = !strcmp(argv[++i], "terngrad");
    else if (!strcmp(argv[i], "--dgc") && i + 1 < argc)
      a.dgc = atof(argv[++i]);
    else if (!strcmp(argv[i], "--dgc-momentum"))
      a.dgc_momentum = 1;
    else if (!strcmp(argv[i], "--dga") && i + 1 < argc)
      a.dga = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compute-ms") && i + 1 < argc)
      a.compute_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--powersgd") && i + 1 < argc)
      a.psgd_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--powersgd-stage") && i + 1 < argc &&
             (!strcmp(argv[i + 1], "0") || !strcmp(argv[i + 1], "1")))
      a.psgd_stage = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--onebit"))
      a.onebit = 1;
    else if (!strcmp(argv[i], "--zoadam"))
      a.zoadam = 1;
    else if (!strcmp(argv[i], "--onebit-lamb"))
      a.onebit_lamb = 1;
    else if (!strcmp(argv[i], "--zoadam-local") && i + 1 < argc)
      a.zoadam = 1, a.zoadam_local = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--params N] [--modules M] [--steps S] [--dtype f32|bf16] "
              "[--no-torch] [--hpz H] [--compress] [--compress-codec int4|terngrad] "
              "[--dgc DENSITY [--dgc-momentum]] [--dga D] [--powersgd RANK [--powersgd-stage 0|1]] "
              "[--onebit] [--zoadam] [--zoadam-local H] [--onebit-lamb] "
              "[--compute-ms MS]\n", argv[0]);
      return 2;
    }
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0)
    printf("step_bench: %lld %s parameters in %d modules, %d ranks, best of %d steps\n",
           (long long)a.params, zinc_dtype_name(a.dtype), a.modules, size, a.steps);
  if (a.hpz > 0 || a.compress || a.dgc > 0 || a.dga > 0 || a.psgd_rank > 0 || a.onebit ||
      a.zoadam || a.onebit_lamb) {
    if (a.hpz > 0)
      run_hpz(&a, rank);
    if (a.compress)
      run_compress(&a, rank);
    if (a.dgc > 0)
      run_dgc(&a, rank);
    if (a.dga > 0)
      run_dga(&a, rank);
    if (a.psgd_rank > 0)
      run_powersgd(&a, rank);
    if (a.onebit)
      run_onebit(&a, rank);
    if (a.zoadam)
      run_zoadam(&a, rank);
    if (a.onebit_lamb)
      run_onebit_lamb(&a, rank);
    MPI_Finalize();
    return 0;
  }
  timing t[4];
  for (int stage = 0; stage <= 3; stage++)
    t[stage] = run_stage(&a, stage, MPI_COMM_WORLD, 0);
  if (rank == 0) {
    printf("\n%-6s %10s %10s %10s %10s %10s %12s\n", "stage", "step s", "fetch s", "bwd s",
           "optim s", "comm wait", "vs stage 0");
    for (int s = 0; s <= 3; s++)
      printf("%-6d %10.3f %10.3f %10.3f %10.3f %10.3f %11.2fx\n", s, t[s].step, t[s].forward,
             t[s].backward, t[s].optim, t[s].comm, t[s].step / t[0].step);
  }
  /* engine overhead: rank 0 alone, engine on MPI_COMM_SELF vs no engine,
   * both with the same threads (this rank's share of the node: the other
   * ranks are waiting in a barrier meanwhile) */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    zinc_device *probe;
    if (zinc_device_cpu_create(0, 0, &probe) != ZINC_OK)
      die("cpu device");
    int threads = zinc_threadpool_size(zinc_device_cpu_pool(probe));
    zinc_device_destroy(probe);
    overhead o = run_overhead(&a, threads);
    double pct = 100 * (o.ratio - 1);
    printf("\nsingle rank (%d thread%s), stage 0, %d alternating pairs: zinc step %.3f s, the "
           "same gradient writes, norm and fused Adam without the engine %.3f s (best of "
           "each); median per-pair engine overhead %+.1f%% (target <= 5%%) %s\n", threads,
           threads > 1 ? "s" : "", 2 * a.steps + 2, o.zinc, o.kernel, pct,
           pct <= 5 ? "PASS" : "FAIL");
    printf("plain hand-written C Adam loop: %.3f s (zinc is %.2fx faster)\n", o.plain,
           o.plain / o.zinc);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && a.torch && size >= 2) {
    double torch_it = 0;
    printf("\nPyTorch ZeroRedundancyOptimizer, %d ranks (gloo, 1 thread each):\n", size);
    if (run_torch(&a, size, &torch_it) && torch_it > 0) {
      double ratio = torch_it / t[1].iteration;
      printf("zinc stage-1 iteration (reduce + Adam on shard + gather) %.3f s vs torch %.3f s: "
             "zinc %.2fx faster (target >= 3x) %s\n", t[1].iteration, torch_it, ratio,
             ratio >= 3 ? "PASS" : "FAIL");
    } else {
      printf("SKIPPED: PyTorch comparison (install Debian's python3-torch)\n");
    }
  }
  MPI_Finalize();
  return 0;
}
