/*
 * test_dga.c — delayed gradient averaging (zinc.compression.delayed_averaging,
 * engine/reduce/dga.c). Under mpirun (2 or 4 ranks), stage 0, the tiny model:
 *
 *  - reference: 10 steps with D = 1 and D = 2, SGD with momentum and AdamW,
 *    against a double-precision simulation of every rank written here
 *    (each rank's own parameters, its local gradient at them, the update
 *    g_t^i + (avg_{t-D} - g_{t-D}^i) from step D on; and with gradient
 *    clipping at 0.5, each local gradient clipped by its own norm; and with
 *    gradient_accumulation_steps 2, the window's sum); each rank's
 *    parameters within 1e-5 + 1e-4 |ref|. The same simulation with the
 *    correction dropped (pure local steps) must be farther than that
 *    (the comparison can tell a missing correction).
 *  - overflow: an inf in rank 1's local gradient skips the step on every
 *    rank, the ring unchanged; against the reference with that step
 *    skipped (fp32 delay 1 and 2, fp16 with its loss scale halved).
 *  - failure: an allocation failing on rank 1 in the step fails the step on
 *    every rank with rank 1's message; destroy returns.
 *  - config: delay at stage 1 is refused with ZINC_ERR_CONFIG naming stage 0,
 *    beside PowerSGD (both replace stage 0's all-reduce) and beside the 1-bit
 *    optimizers (which keep the gradients rank-local), as is PowerSGD.
 *  - the wire: the comms logger's bytes of DGA's all-reduces equal the
 *    exact run's reduce-scatter + all-gather bytes over the same steps
 *    (2 (N - 1) x 4 bytes per padded trained element per step: the same
 *    bytes, only later), one all-reduce of N x S fp32 elements per step.
 *  - resume: saved at step 5 with delay 2 and continued equals loaded +
 *    continued, bit for bit; with the ring zeroed after the load it differs.
 *  - memory: the estimator's host gradient bytes grow by the ring,
 *    2 x D x N x S x 4 bytes (+ the counters).
 */
#include <math.h>
#include <mpi.h>

#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/reduce/reduce.h"
#include "engine/support.h"
#include "engine_test.h"

#define DGA_JSON(d) "\"zinc\": {\"compression\": {\"delayed_averaging\": {\"delay\": " d "}}}"

static et_run base_run(int steps, const et_optim *o) {
  et_run r = et_defaults();
  r.stage = 0;
  r.steps = steps;
  r.optim = o;
  return r;
}

/* Every rank's training under DGA with delay D, in double (Adam's moments
 * and the parameters rounded to fp32 between steps, as the engine keeps
 * them), over world ranks; rank `me`'s final parameters into out. drop: no
 * correction (pure local steps). r->clip > 0: each rank's local gradient
 * clipped by its own norm (DeepSpeed's clip / (norm + 1e-6)) before
 * anything else, counted in *clipped. skip >= 0: that step is skipped on
 * every rank (an overflow): no update and nothing pushed, so the
 * correction due then comes at the next step (the D-th pushed gradient
 * back, not the D-th step back). */
static void dga_reference(const et_run *r, int world, int D, int drop, int me, float **out,
                          int *clipped, int skip) {
  const tm_shape *sh = &r->shape;
  const et_optim *o = r->optim;
  int adam = et_optim_is_adam(o);
  int S = r->steps;
  float *P[8][TM_NPARAM], *G[TM_NPARAM], *Gm[TM_NPARAM];
  double *Pd[8][TM_NPARAM], *M[8][TM_NPARAM], *V[8][TM_NPARAM], *d[TM_NPARAM];
  double *hist[64][8][TM_NPARAM]; /* hist[s][rank]: local gradient of step s */
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(sh, i);
    G[i] = calloc((size_t)n, 4);
    Gm[i] = calloc((size_t)n, 4);
    d[i] = calloc((size_t)n, 8);
    for (int k = 0; k < world; k++) {
      P[k][i] = calloc((size_t)n, 4);
      Pd[k][i] = calloc((size_t)n, 8);
      M[k][i] = calloc((size_t)n, 8);
      V[k][i] = calloc((size_t)n, 8);
      for (int64_t j = 0; j < n; j++)
        Pd[k][i][j] = P[k][i][j] = tm_init_value(sh, i, j);
      for (int s = 0; s < S; s++)
        hist[s][k][i] = calloc((size_t)n, 8);
    }
  }
  int pushed[64], npushed = 0;
  for (int s = 0; s < S; s++) {
    if (s == skip)
      continue;
    int back = npushed >= D ? pushed[npushed - D] : -1;
    for (int k = 0; k < world; k++) {
      /* the window's micro-batches summed in fp32 as a trainer adds them */
      for (int i = 0; i < TM_NPARAM; i++)
        memset(G[i], 0, (size_t)tm_numel(sh, i) * 4);
      for (int a = 0; a < r->gas; a++) {
        for (int i = 0; i < TM_NPARAM; i++)
          memset(Gm[i], 0, (size_t)tm_numel(sh, i) * 4);
        tm_forward_backward(sh, P[k], Gm, (((int64_t)s * r->gas + a) * world + k) * r->micro,
                            r->micro, 1.0f);
        for (int i = 0; i < TM_NPARAM; i++)
          for (int64_t j = 0; j < tm_numel(sh, i); j++)
            G[i][j] += Gm[i][j];
      }
      double sq = 0, coef = 1.0; /* local clipping, by this rank's own norm */
      for (int i = 0; i < TM_NPARAM; i++)
        for (int64_t j = 0; j < tm_numel(sh, i); j++)
          sq += (double)G[i][j] * G[i][j] / ((double)r->gas * r->gas);
      if (r->clip > 0 && sqrt(sq) > r->clip) {
        coef = r->clip / (sqrt(sq) + 1e-6);
        (*clipped)++;
      }
      for (int i = 0; i < TM_NPARAM; i++)
        for (int64_t j = 0; j < tm_numel(sh, i); j++)
          hist[s][k][i][j] = (double)(float)(coef * G[i][j]) / r->gas;
    }
    double t = npushed + 1, b1 = o->beta1, b2 = o->beta2, lr = o->lr;
    for (int k = 0; k < world; k++)
      for (int i = 0; i < TM_NPARAM; i++) {
        int64_t n = tm_numel(sh, i);
        for (int64_t j = 0; j < n; j++) {
          d[i][j] = hist[s][k][i][j];
          if (back >= 0 && !drop) {
            double avg = 0;
            for (int q = 0; q < world; q++)
              avg += hist[back][q][i][j];
            d[i][j] += avg / world - hist[back][k][i][j];
          }
        }
        if (!adam) {
          et_reference_update(o, npushed + 1, et_param_decays(i), n, Pd[k][i], M[k][i], V[k][i],
                              d[i]);
          for (int64_t j = 0; j < n; j++)
            P[k][i][j] = (float)Pd[k][i][j];
          continue;
        }
        double wd = et_param_decays(i) ? o->weight_decay : 0.0;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (int64_t j = 0; j < n; j++) { /* AdamW (decoupled decay) */
          double g = d[i][j];
          M[k][i][j] = (float)(b1 * M[k][i][j] + (1 - b1) * g);
          V[k][i][j] = (float)(b2 * V[k][i][j] + (1 - b2) * g * g);
          double p = P[k][i][j] * (1 - lr * wd);
          p -= lr / bc1 * M[k][i][j] / (sqrt(V[k][i][j]) / sqrt(bc2) + o->eps);
          P[k][i][j] = (float)p;
        }
      }
    pushed[npushed++] = s;
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    memcpy(out[i], P[me][i], (size_t)tm_numel(sh, i) * 4);
    free(G[i]);
    free(Gm[i]);
    free(d[i]);
    for (int k = 0; k < world; k++) {
      free(P[k][i]);
      free(Pd[k][i]);
      free(M[k][i]);
      free(V[k][i]);
      for (int s = 0; s < S; s++)
        free(hist[s][k][i]);
    }
  }
}

/* Elements of got outside abs + rel |want|; prints the first few and the
 * largest difference when report. */
static int64_t outside(const tm_shape *sh, float **got, float **want, double abs_tol,
                       double rel_tol, int report, const char *what) {
  int64_t bad = 0;
  double worst = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++) {
      double diff = fabs((double)got[i][j] - want[i][j]);
      if (diff > worst)
        worst = diff;
      if (diff > abs_tol + rel_tol * fabs(want[i][j])) {
        if (report && bad < 4)
          fprintf(stderr, "[rank %d] %s: %s[%lld] = %.9g, reference %.9g\n", et_rank, what,
                  tm_names[i], (long long)j, got[i][j], want[i][j]);
        bad++;
      }
    }
  if (report && bad)
    fprintf(stderr, "[rank %d] %s: %lld elements outside, largest difference %.3g\n", et_rank,
            what, (long long)bad, worst);
  return bad;
}

/* Train r through zinc and return this rank's own parameters (its compute
 * copy, read through a fetch): zinc_param_get_full at stage 0 assembles
 * chunk q of every unit from rank q, which under DGA mixes the ranks. */
static float **train_own(et_run r, const char *extra) {
  r.extra = extra;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e);
  for (int s = 0; s < r.steps; s++)
    for (int a = 0; a < r.gas; a++) {
      et_micro_batch(&m, &r.shape, r.dtype, (((int64_t)s * r.gas + a) * N + et_rank) * r.micro,
                     r.micro, NULL);
      ET_OK(zinc_step(e, NULL));
    }
  float **p = et_alloc_params(&r.shape);
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(e, m.mod[k]));
    ET_OK(et_load_module(&m, &r.shape, r.dtype, k));
    ET_OK(zinc_module_release(e, m.mod[k]));
  }
  for (int i = 0; i < TM_NPARAM; i++)
    memcpy(p[i], m.P[i], (size_t)tm_numel(&r.shape, i) * 4);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return p;
}

static void test_reference(const et_optim *o, int D, double clip, int gas) {
  et_run r = base_run(10, o);
  r.clip = clip;
  r.gas = gas;
  char extra[256];
  snprintf(extra, sizeof extra, "\"zinc\": {\"compression\": {\"delayed_averaging\": "
           "{\"delay\": %d}}}", D);
  float **got = train_own(r, extra);
  float **ref = et_alloc_params(&r.shape), **local = et_alloc_params(&r.shape);
  int clipped = 0, clipped_local = 0;
  dga_reference(&r, et_world, D, 0, et_rank, ref, &clipped, -1);
  dga_reference(&r, et_world, D, 1, et_rank, local, &clipped_local, -1);
  char what[128];
  snprintf(what, sizeof what, "%s, delay %d, clipping %g, accumulation %d", o->type, D, clip,
           gas);
  ET_CHECK(clip == 0 || clipped > 0, "%s: no local gradient was clipped; lower the threshold",
           what);
  int64_t bad = outside(&r.shape, got, ref, 1e-5, 1e-4, 1, what);
  ET_CHECK(bad == 0, "%s: the parameters differ from the DGA reference", what);
  int64_t far = outside(&r.shape, got, local, 1e-5, 1e-4, 0, what);
  ET_CHECK(far > 0, "%s: the parameters also match pure local steps (no correction): the "
           "comparison cannot tell the correction", what);
  if (et_rank == 0)
    printf("%s: within the reference (%d local gradients clipped); %lld elements off the "
           "uncorrected one\n", what, clipped, (long long)far);
  et_free_params(got);
  et_free_params(ref);
  et_free_params(local);
}

/* This rank's own parameters (fetched), fp32. */
static float **own_params(et_model *m, const et_run *r) {
  float **p = et_alloc_params(&r->shape);
  ET_OK(zinc_eval_begin(m->e));
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(m->e, m->mod[k]));
    ET_OK(et_load_module(m, &r->shape, r->dtype, k));
    ET_OK(zinc_module_release(m->e, m->mod[k]));
  }
  ET_OK(zinc_eval_end(m->e));
  for (int i = 0; i < TM_NPARAM; i++)
    memcpy(p[i], m->P[i], (size_t)tm_numel(&r->shape, i) * 4);
  return p;
}

/* Overflow: an inf in rank 1's local gradient at step 2 skips that step on
 * every rank; the ring is left as it was, so step 3 applies the correction
 * of the D-th gradient pushed before it (step 1 at delay 1, step 0 at
 * delay 2), not of step 3 - D. Against
 * the reference with step 2 skipped: fp32 at the reference's tolerance;
 * fp16 (dynamic loss scale, halved by the overflow: the delayed term is
 * rescaled by the ratio of the scales) at fp16's, 2e-3 + 2e-2 |ref|, far
 * inside what a wrong ratio (a factor 2 on the correction) would give. */
static void test_overflow(zinc_dtype dt, int D) {
  et_optim o = {.type = "SGD", .lr = 0.05, .momentum = 0.9};
  et_run r = base_run(6, &o);
  r.clip = 0;
  r.dtype = dt;
  r.shape.dtype = dt;
  char extra[160];
  snprintf(extra, sizeof extra, "\"zinc\": {\"compression\": {\"delayed_averaging\": "
           "{\"delay\": %d}}}", D);
  r.extra = extra;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e);
  double scale0 = zinc_loss_scale(e);
  for (int s = 0; s < r.steps; s++) {
    float inf = INFINITY;
    const float *inject = s == 2 && et_rank == 1 ? &inf : NULL;
    et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)s * N + et_rank) * r.micro, r.micro, inject);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    ET_CHECK(info.skipped == (s == 2), "step %d: skipped %d on rank %d (an inf on rank 1 at "
             "step 2 only)", s, info.skipped, et_rank);
  }
  ET_CHECK(dt != ZINC_F16 || zinc_loss_scale(e) < scale0, "fp16: the loss scale did not drop "
           "(%g, was %g)", zinc_loss_scale(e), scale0);
  float **got = own_params(&m, &r);
  et_model_free(&m);
  zinc_engine_destroy(e);
  float **ref = et_alloc_params(&r.shape);
  int clipped = 0;
  dga_reference(&r, et_world, D, 0, et_rank, ref, &clipped, 2);
  char what[96];
  snprintf(what, sizeof what, "%s, delay %d, step 2 skipped", zinc_dtype_name(dt), D);
  double abs_tol = dt == ZINC_F16 ? 2e-3 : 1e-5, rel_tol = dt == ZINC_F16 ? 2e-2 : 1e-4;
  ET_CHECK(outside(&r.shape, got, ref, abs_tol, rel_tol, 1, what) == 0,
           "%s: the parameters differ from the reference", what);
  et_free_params(got);
  et_free_params(ref);
}

/* A failure on one rank in the step (an allocation of rank 1's overflow
 * check) reaches every rank as the same error, within ET_AGREE_SECONDS;
 * destroy then returns although an all-reduce is in flight. */
static void test_failure(void) {
  et_optim o = {.type = "SGD", .lr = 0.05, .momentum = 0.9};
  et_run r = base_run(3, &o);
  r.extra = DGA_JSON("1");
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 2));
  int N = zinc_dp_size(e);
  et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)2 * N + et_rank) * r.micro, r.micro, NULL);
  if (et_rank == 1)
    zinc_engine_inject_alloc_fault(e, 1);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_step(e, NULL);
  const char *needles[] = {"overflow check", NULL};
  et_expect_everywhere(st, ZINC_ERR_NOMEM, MPI_Wtime() - t0, "an allocation failed on rank 1",
                       needles, 1);
  et_model_free(&m);
  t0 = MPI_Wtime();
  zinc_engine_destroy(e);
  ET_CHECK(MPI_Wtime() - t0 < ET_AGREE_SECONDS, "destroy took %.1f s", MPI_Wtime() - t0);
}

static void test_config(void) {
  const char *json = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                     "{\"stage\": 1}, " DGA_JSON("2") "}";
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  ET_CHECK(st == ZINC_ERR_CONFIG && strstr(zinc_last_error(), "stage 0"),
           "delay at stage 1: %s (want ZINC_ERR_CONFIG naming stage 0): %s",
           zinc_status_name(st), zinc_last_error());
  zinc_config_free(cfg);
  cfg = NULL;
  st = zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, " DGA_JSON("-1") "}", &cfg);
  ET_CHECK(st == ZINC_ERR_CONFIG && strstr(zinc_last_error(), "delay"),
           "delay -1: %s (want ZINC_ERR_CONFIG naming the key): %s", zinc_status_name(st),
           zinc_last_error());
  zinc_config_free(cfg);
  cfg = NULL;
  st = zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, " DGA_JSON("3") "}", &cfg);
  ET_CHECK(st == ZINC_OK && cfg->s.dga_delay == 3, "delay 3 at stage 0: %s: %s",
           zinc_status_name(st), zinc_last_error());
  zinc_config_free(cfg);
  cfg = NULL;
  st = zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zinc\": {\"compression\": "
                         "{\"gradient_codec\": \"powersgd\", \"delayed_averaging\": "
                         "{\"delay\": 1}}}}", &cfg);
  ET_CHECK(st == ZINC_ERR_CONFIG && strstr(zinc_last_error(), "powersgd"),
           "delay with PowerSGD: %s (want ZINC_ERR_CONFIG naming both): %s",
           zinc_status_name(st), zinc_last_error());
  zinc_config_free(cfg);
  /* the 1-bit optimizers communicate themselves: neither DGA nor PowerSGD */
  static const char *const beside[] = {DGA_JSON("1"),
                                        "\"zinc\": {\"compression\": {\"gradient_codec\": "
                                        "\"powersgd\"}}"};
  static const char *const types[] = {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"};
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < 3; t++) {
      char text[512];
      snprintf(text, sizeof text, "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": "
               "0, \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 1e-3}}, %s}",
               types[t], beside[b]);
      cfg = NULL;
      st = zinc_config_parse(text, &cfg);
      ET_CHECK(st == ZINC_ERR_CONFIG && strstr(zinc_last_error(), "optimizer.type") &&
               strstr(zinc_last_error(), b ? "powersgd" : "delayed_averaging"),
               "%s with %s: %s (want ZINC_ERR_CONFIG naming both): %s", types[t],
               b ? "PowerSGD" : "delayed averaging", zinc_status_name(st), zinc_last_error());
      zinc_config_free(cfg);
    }
}

/* Bytes this rank sent, over the comms logger's rows of `name` whose
 * message is at least min_msg bytes (the gradients', not the agreements'). */
static uint64_t wire_of(zinc_engine *e, const char *name, uint64_t min_msg, uint64_t *calls) {
  zinc_comms_stat rows[64];
  for (int i = 0; i < 64; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  ET_OK(zinc_comms_stats(e, rows, 64, &n));
  uint64_t bytes = 0;
  *calls = 0;
  for (int i = 0; i < n && i < 64; i++)
    if (!strcmp(rows[i].name, name) && rows[i].msg_bytes >= min_msg) {
      bytes += rows[i].wire_intra + rows[i].wire_inter;
      *calls += rows[i].count;
    }
  return bytes;
}

static void test_wire(void) {
  et_optim o = {.type = "SGD", .lr = 0.05, .momentum = 0.9};
  int steps = 3;
  et_run r = base_run(steps, &o);
  r.reduce_bucket = 1 << 20; /* one unit per module at most */
  uint64_t got[2] = {0, 0}, calls[2] = {0, 0}, want = 0;
  for (int dga = 0; dga < 2; dga++) {
    r.extra = dga ? "\"comms_logger\": {\"enabled\": true}, " DGA_JSON("1")
                  : "\"comms_logger\": {\"enabled\": true}";
    et_model m;
    zinc_engine *e = et_open(&r, NULL, &m);
    ET_OK(zinc_comms_reset(e));
    ET_OK(et_steps(&m, &r, 0, steps));
    uint64_t S = (uint64_t)e->train_shard_numel;
    want = (uint64_t)steps * 2 * (uint64_t)(et_world - 1) * S * 4;
    if (dga) {
      ET_OK(zinc_reduce_sync(e, 0)); /* the last all-reduce is still in flight: count it */
      got[1] = wire_of(e, "all_reduce", (uint64_t)et_world * S * 4, &calls[1]);
    } else {
      uint64_t c1, c2;
      got[0] = wire_of(e, "reduce_scatter", 1, &c1) + wire_of(e, "all_gather", 64, &c2);
      calls[0] = c1 + c2;
    }
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  if (et_rank == 0)
    printf("wire over %d steps: exact %llu bytes, DGA %llu bytes in %llu all-reduces; closed "
           "form %llu\n", steps, (unsigned long long)got[0], (unsigned long long)got[1],
           (unsigned long long)calls[1], (unsigned long long)want);
  ET_CHECK(got[1] == want && got[0] == want && calls[1] == (uint64_t)steps,
           "the wire: DGA sent %llu bytes in %llu all-reduces, the exact run %llu; want %llu "
           "(2 (N-1) x 4 bytes per padded element per step) in %d", (unsigned long long)got[1],
           (unsigned long long)calls[1], (unsigned long long)got[0], (unsigned long long)want,
           steps);
}

/* Resume, delay 2, AdamW: 5 steps, save, 5 more equals load + the same 5,
 * bit for bit on every rank (the pending local gradients and the finished
 * sums travel in rank_NNNNN.zms; the save first gives every rank rank 0's
 * model, so the checkpoint holds one). The same load with the ring zeroed
 * afterwards (the corrections lost) ends elsewhere: the state is really
 * restored. */
static void test_resume(void) {
  et_optim o = et_adamw_default();
  et_run r = base_run(10, &o);
  r.extra = DGA_JSON("2");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/dga_resume_np%d", et_binary_dir(), et_world);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (et_rank == 0 && system(cmd) != 0)
    ET_CHECK(0, "%s failed", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 5));
  ET_OK(zinc_save_checkpoint(e, dir, "step5"));
  float **saved = own_params(&m, &r);
  int64_t n0 = tm_numel(&r.shape, 0);
  float *rank0 = malloc((size_t)n0 * 4);
  memcpy(rank0, saved[0], (size_t)n0 * 4);
  MPI_Bcast(rank0, (int)n0, MPI_FLOAT, 0, MPI_COMM_WORLD);
  ET_CHECK(!memcmp(rank0, saved[0], (size_t)n0 * 4), "after the save rank %d's W0 is not rank "
           "0's", et_rank);
  free(rank0);
  et_free_params(saved);
  ET_OK(et_steps(&m, &r, 5, 10));
  float **straight = own_params(&m, &r);
  et_model_free(&m);
  zinc_engine_destroy(e);
  for (int zeroed = 0; zeroed < 2; zeroed++) {
    e = et_open(&r, NULL, &m);
    ET_OK(zinc_load_checkpoint(e, dir, "step5"));
    int found = 0;
    for (int i = 0; i < e->nmstate; i++)
      if (!strncmp(e->mstate[i].name, "dga.", 4)) {
        found++;
        if (zeroed)
          memset(e->mstate[i].ptr, 0, e->mstate[i].bytes);
      }
    ET_CHECK(found == 3, "%d method-state entries named dga.*, want 3", found);
    ET_OK(et_steps(&m, &r, 5, 10));
    float **resumed = own_params(&m, &r);
    if (!zeroed) {
      ET_CHECK(et_same_bits(&r.shape, resumed, straight, "resumed vs straight"),
               "the resumed run is not bitwise the straight one");
    } else {
      int64_t diff = 0;
      for (int i = 0; i < TM_NPARAM; i++)
        diff += memcmp(resumed[i], straight[i], (size_t)tm_numel(&r.shape, i) * 4) != 0;
      ET_CHECK(diff > 0, "resuming with the ring zeroed gave the straight run's bits: the "
               "state is not what carries the resume");
    }
    et_free_params(resumed);
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  et_free_params(straight);
  MPI_Barrier(MPI_COMM_WORLD);
  if (et_rank == 0 && !et_failures && system(cmd) != 0)
    ET_CHECK(0, "%s failed", cmd);
}

static uint64_t estimate_host_grads(const et_run *r) {
  zinc_est_param p[TM_NPARAM];
  memset(p, 0, sizeof p);
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = ZINC_F32;
    p[i].ndim = 1;
    p[i].shape[0] = tm_numel(&r->shape, i);
  }
  char *json = et_config_json(r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_estimate est;
  ET_OK(zinc_estimate_model(&cfg->s, et_world, 0, p, TM_NPARAM, &est));
  zinc_config_free(cfg);
  return est.bytes[ZINC_LOC_HOST][ZINC_MEM_GRADS];
}

static void test_memory(void) {
  et_optim o = {.type = "SGD", .lr = 0.05, .momentum = 0.9};
  et_run plain = base_run(1, &o), dga = base_run(1, &o);
  dga.extra = DGA_JSON("3");
  et_model m;
  zinc_engine *e = et_open(&plain, NULL, &m);
  uint64_t want = 2 * 3 * (uint64_t)et_world * (uint64_t)e->train_shard_numel * 4 + 4 * 8;
  et_model_free(&m);
  zinc_engine_destroy(e);
  uint64_t with = estimate_host_grads(&dga), without = estimate_host_grads(&plain);
  ET_CHECK(with - without == want, "the estimator's host gradient bytes grew by %llu with "
           "delay 3, want %llu (2 x D x N x S x 4 + the counters)",
           (unsigned long long)(with - without), (unsigned long long)want);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2 || et_world > 8) {
    if (et_rank == 0)
      printf("SKIPPED: delayed gradient averaging needs 2 to 8 ranks\n");
    MPI_Finalize();
    return 77;
  }
  et_optim sgd = {.type = "SGD", .lr = 0.05, .momentum = 0.9};
  et_optim adamw = et_adamw_default();
  test_reference(&sgd, 1, 0, 1);
  test_reference(&sgd, 2, 0, 1);
  test_reference(&adamw, 1, 0, 1);
  test_reference(&adamw, 2, 0, 1);
  test_reference(&sgd, 2, 0.5, 1);
  test_reference(&adamw, 1, 0.5, 1);
  test_reference(&sgd, 2, 0.5, 2);
  test_overflow(ZINC_F32, 1);
  test_overflow(ZINC_F32, 2);
  test_overflow(ZINC_F16, 1);
  test_failure();
  test_config();
  test_wire();
  test_memory();
  test_resume();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "DGA tests FAILED\n" : "DGA tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
