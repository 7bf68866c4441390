/*
 * zoadam.c — 0/1 Adam (optimizer.type "ZeroOneAdam") at ZeRO stage 0:
 * DeepSpeed's ZeroOneAdam (deepspeed/runtime/fp16/onebit/zoadam.py; Lu et
 * al., "Maximizing Communication Efficiency for Large-scale Training via
 * 0/1 Adam", arXiv:2202.06009), its compressed all-reduce that of
 * DeepSpeed's NcclBackend.compressed_allreduce (1-bit Adam's, Tang et al.,
 * arXiv:2102.02888).
 *
 * Step s (1-based: e->step + 1; a skipped step does not count), per
 * trained element, g the gradient already unscaled (1 / (loss_scale x
 * accumulation), and 1 / dp_size where it is a sum over ranks), lr and wd
 * the parameter group's (wd 0 for a parameter without decay):
 *
 *   variance phase (s <= var_freeze_step + 1):
 *     s % var_interval == 0 ("full" step): the engine all-reduces the
 *       gradients as always (grads.c, step.c) and
 *         v = b2 v + (1 - b2) g^2;  m = b1 m + (1 - b1) g
 *     otherwise: the engine leaves the gradients rank-local and
 *         m = b1 m + (1 - b1) C(g)              (C: the compressed all-reduce)
 *     p -= lr (m / (sqrt(v) + eps) + wd p)
 *   frozen phase (s >= var_freeze_step + 2): gradients rank-local, v fixed,
 *         m = b1 m + (1 - b1) g;  lrs += lr
 *         d = m / (sqrt(v) + eps) + wd p;  p -= lr d;  u -= lr d
 *     and when s % local_step_interval == 0 (a "sync" step):
 *         p -= u;  u = C(u (sqrt(v) + eps));  m = -u / lrs;
 *         p += u / (sqrt(v) + eps);  u = 0;  lrs = 0
 *   no bias correction (DeepSpeed's 0/1 Adam has none), eps outside the
 *   square root.
 *
 * Schedule (zoadam.py's counters, all a function of s): var_interval
 * starts at 1 and var_counter at 0; after each full step of the variance
 * phase var_counter += 1, and when it reaches var_update_scaler (kappa)
 * it returns to 0 and var_interval doubles. With kappa = 16 the full steps
 * are 1..16, then every 2nd step up to 48, every 4th up to 112, every 8th
 * up to 240, ...: the variance is updated at exponentially spaced steps.
 * After the last variance step (s = var_freeze_step + 1) both error
 * buffers are zeroed (they carried gradients; from now on they carry
 * accumulated momenta). local_step_interval starts at 1 and
 * local_step_counter at 0; after each frozen step local_step_counter += 1,
 * and when it reaches local_step_scaler it returns to 0 and
 * local_step_interval = min(local_step_clipper, 2 local_step_interval).
 * The engine all-reduces the gradients on full steps only
 * (zinc_zoadam_local_grads); on every other step they stay this rank's
 * own, the norm and the inf/NaN check are summed over the ranks
 * (zinc_zoadam_norm), so every rank skips the same steps.
 *
 * The compressed all-reduce C of x (every trained parameter at once, one
 * scale per parameter; n its elements, N = dp_size, P = n rounded up to a
 * multiple of N x lcm(N, 8), the padding zero):
 *   worker:  y = x + worker_error;  a = ||y|| / sqrt(P);
 *            worker_error = y - a sign(y);  (sign(0) = +1)
 *            chunk j (P / N elements) of sign(y) goes to rank j as bits,
 *            a to every rank: one all-to-all-v of bytes and one all-gather
 *   server (rank j, its chunk): c = sum_i a_i sign_i / N (rank order)
 *            + server_error;  b = ||c|| / sqrt(P / N);
 *            server_error = c - b sign(c)
 *            sign(c) as bits and b to every rank: two all-gathers
 *   result:  chunk j = b_j sign(c_j).
 * Wire bytes per rank per C (the comms logger's ring closed form):
 *   2 (N - 1) (sum_p P_p / (8 N) + 4 nparams); nothing on steps that
 *   neither compress nor all-reduce (the frozen phase's local steps).
 * With one rank C is the identity (DeepSpeed skips its momentum update on
 * the compressed steps there; zinc applies the gradient).
 * Bits: 1 = +1, the first element in a byte's most significant bit
 * (cupy.packbits' order). Arithmetic per element in double, the state
 * stored in f32 (DeepSpeed's fp32 tensors); norms summed in double in
 * element order.
 *
 * State (ZINC_MEM_OPTIM; checkpointed through engine/checkpoint/mstate.h,
 * restored bitwise at the same layout — DeepSpeed resets the errors on
 * load): the engine's master / exp_avg / exp_avg_sq (stage 0: every
 * element on every rank), and here
 *   u             (opt_numel) f32, the momentum accumulator, stage-0 index
 *   worker_error  (sum_p P_p) f32, parameter-major
 *   server_error  (sum_p P_p / N) f32, parameter-major
 *   lrs           (ZINC_MAX_PARAM_GROUPS) f64, host: sum of lr since the
 *                 last sync per parameter group (not a function of s)
 * Scratch (ZINC_MEM_BUFFERS): the buffer being compressed (sum_p P_p f32),
 * the sign bits sent, received and gathered, the scales.
 * The cpu device only (the loops below run on the host).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "optim/lr_schedule.h"

typedef struct {
  const zinc_param *p;
  int64_t n;          /* elements */
  int64_t padded;     /* P: n rounded up to N x lcm(N, 8) */
  int64_t chunk;      /* P / N: each server's piece, a multiple of 8 */
  int64_t opt;        /* first element in master / m / v / u */
  int64_t werr_off;   /* into worker_error and the compress buffer */
  int64_t serr_off;   /* into server_error */
  int64_t bits_off;   /* byte offset of its chunk inside one rank's block */
} zo_param;

typedef struct {
  int64_t step;       /* the step these counters are the state before */
  int64_t var_interval, var_counter, local_interval, local_counter;
} zo_sched;

struct zinc_zoadam {
  zo_param *params;
  int np;
  int64_t total_padded, total_chunk; /* sum of P, sum of P / N */
  size_t block;       /* bytes of sign bits per rank: total_chunk / 8 */
  float *u;           /* (opt_numel) */
  float *werr;        /* (total_padded) */
  float *serr;        /* (total_chunk) */
  double *lrs;        /* (ZINC_MAX_PARAM_GROUPS) host */
  float *x;           /* (total_padded) scratch: what C reduces, in place */
  uint8_t *bits_send; /* (N x block) [rank j][param] chunk j's worker signs */
  uint8_t *bits_recv; /* (N x block) [rank i][param] my chunk's, from i */
  uint8_t *bits_srv;  /* (block) my chunk's server signs */
  uint8_t *bits_all;  /* (N x block) [rank j][param] every server's */
  float *scales;      /* (4 np) worker scales mine, server scales mine,
                         then (N np) every rank's worker, (N np) server */
  size_t *counts;     /* (4 N) all-to-all-v counts / displs both ways */
  zo_sched sched;
};

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The per-parameter plan (sizes and offsets) for the layout; 0 on success.
 * Fills z->params (allocated here) and the totals. */
static zinc_status plan(const zinc_engine *e, zinc_zoadam *z) {
  int64_t n_ranks = e->dp_size, lcm8 = 8 * n_ranks / gcd64(n_ranks, 8);
  int64_t align = n_ranks * lcm8;
  int np = 0;
  for (int i = 0; i < e->nparams; i++)
    np += !e->params[i]->frozen && e->params[i]->numel > 0;
  ZINC_CHECK(zinc_calloc((void **)&z->params, (size_t)np + 1, sizeof *z->params,
                         "0/1 Adam parameter plan"));
  z->np = 0;
  z->total_padded = z->total_chunk = 0;
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    if (p->frozen || p->numel == 0)
      continue;
    const zinc_segment *seg = &p->module->segs[p->segment];
    const zinc_unit *u0 = NULL;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      if (p->seg_offset >= u->seg_offset && p->seg_offset < u->seg_offset + u->numel)
        u0 = u;
    }
    /* stage 0's optimizer index is full_offset + (element - seg_offset)
     * within a unit and the units of a segment follow each other, so a
     * parameter is one run; checked, not assumed */
    for (int ui = seg->first_unit; u0 && ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      if (u->seg_offset < p->seg_offset + p->numel &&
          u->seg_offset + u->numel > p->seg_offset &&
          u->full_offset - u->seg_offset != u0->full_offset - u0->seg_offset)
        u0 = NULL;
    }
    if (!u0)
      return zinc_error(ZINC_ERR_UNSUPPORTED, "0/1 Adam: parameter \"%s\" is not one run of the "
                        "stage-0 optimizer state", p->name);
    zo_param *q = &z->params[z->np++];
    q->p = p;
    q->n = p->numel;
    q->padded = (int64_t)zinc_round_up((uint64_t)p->numel, (uint64_t)align);
    q->chunk = q->padded / n_ranks;
    q->opt = u0->full_offset + (p->seg_offset - u0->seg_offset);
    q->werr_off = z->total_padded;
    q->serr_off = z->total_chunk;
    q->bits_off = z->total_chunk / 8;
    z->total_padded += q->padded;
    z->total_chunk += q->chunk;
  }
  z->block = (size_t)(z->total_chunk / 8);
  return ZINC_OK;
}

/* Bytes of the state and of the scratch for a plan. */
static void plan_bytes(const zinc_engine *e, const zinc_zoadam *z, uint64_t *state,
                       uint64_t *scratch) {
  uint64_t n = (uint64_t)e->dp_size;
  *state = 4 * (uint64_t)e->opt_numel + 4 * (uint64_t)z->total_padded +
           4 * (uint64_t)z->total_chunk;
  *scratch = 4 * (uint64_t)z->total_padded + (2 * n + 1) * z->block +
             4 * (2 + 2 * n) * (uint64_t)z->np + 4 * n * sizeof(size_t);
}

void zinc_zoadam_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (e->cfg.optimizer != ZINC_OPTIM_ZERO_ONE_ADAM)
    return;
  zinc_zoadam z = {0};
  if (plan(e, &z) != ZINC_OK) {
    free(z.params);
    return;
  }
  uint64_t state, scratch;
  plan_bytes(e, &z, &state, &scratch);
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] += state;
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] += scratch;
  bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] += ZINC_MAX_PARAM_GROUPS * sizeof(double);
  free(z.params);
}

/* ------------------------------------------------------------ schedule */

static int frozen_at(const zinc_settings *c, int64_t s) { return s >= c->var_freeze_step + 2; }

/* The counters before step s, advanced from those before step s - 1. */
static void sched_advance(const zinc_settings *c, zo_sched *k) {
  int64_t s = k->step;
  if (!frozen_at(c, s)) {
    if (s % k->var_interval == 0 && ++k->var_counter == c->var_update_scaler) {
      k->var_counter = 0;
      k->var_interval *= 2;
    }
  } else if (++k->local_counter == c->local_step_scaler) {
    k->local_counter = 0;
    k->local_interval = k->local_interval * 2 < c->local_step_clipper
                            ? k->local_interval * 2
                            : c->local_step_clipper;
  }
  k->step++;
}

/* The counters before step s: replayed from step 1 unless cached (a load
 * or the first step replays; every other step advances by one). */
static const zo_sched *sched_at(zinc_zoadam *z, const zinc_settings *c, int64_t s) {
  if (z->sched.step > s || z->sched.step < 1)
    z->sched = (zo_sched){1, 1, 0, 1, 0};
  while (z->sched.step < s)
    sched_advance(c, &z->sched);
  return &z->sched;
}

int zinc_zoadam_local_grads(zinc_engine *e) {
  if (!e->zoadam || e->dp_size < 2)
    return 0;
  int64_t s = e->step + 1;
  const zo_sched *k = sched_at(e->zoadam, &e->cfg, s);
  return frozen_at(&e->cfg, s) || s % k->var_interval != 0;
}

/* ---------------------------------------------------------------- init */

void zinc_zoadam_free(zinc_engine *e) {
  zinc_zoadam *z = e->zoadam;
  if (!z)
    return;
  uint64_t n = (uint64_t)e->dp_size;
  zinc_engine_buffer_free(e, z->u, (size_t)e->opt_numel * 4, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->werr, (size_t)z->total_padded * 4, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->serr, (size_t)z->total_chunk * 4, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->lrs, ZINC_MAX_PARAM_GROUPS * sizeof(double), ZINC_LOC_HOST,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->x, (size_t)z->total_padded * 4, ZINC_LOC_DEVICE,
                          ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->bits_send, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->bits_recv, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->bits_srv, z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->bits_all, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->scales, 4 * (2 + 2 * n) * (size_t)z->np, ZINC_LOC_DEVICE,
                          ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->counts, 4 * n * sizeof(size_t), ZINC_LOC_HOST,
                          ZINC_MEM_BUFFERS);
  free(z->params);
  free(z);
  e->zoadam = NULL;
}

static zinc_status alloc_zeroed(zinc_engine *e, size_t bytes, int loc, int cat, void **out,
                                const char *what) {
  ZINC_CHECK(zinc_engine_buffer_alloc(e, bytes ? bytes : 16, loc, cat, out, what));
  memset(*out, 0, bytes ? bytes : 16);
  return ZINC_OK;
}

zinc_status zinc_zoadam_init(zinc_engine *e) {
  const zinc_settings *c = &e->cfg;
  if (c->optimizer != ZINC_OPTIM_ZERO_ONE_ADAM)
    return ZINC_OK;
  if (c->stage != 0) /* the config refuses it; an engine made another way too */
    return zinc_error(ZINC_ERR_CONFIG, "optimizer.type \"ZeroOneAdam\" at ZeRO stage %d: 0/1 "
                      "Adam keeps and all-reduces the whole optimizer state on every rank; "
                      "set zero_optimization.stage to 0", c->stage);
  if (c->gradient_clipping > 0)
    return zinc_error(ZINC_ERR_CONFIG, "gradient_clipping = %g with optimizer.type "
                      "\"ZeroOneAdam\": its gradients are rank-local on the steps it "
                      "compresses, so there is no global norm to clip by; set "
                      "gradient_clipping to 0", c->gradient_clipping);
  if (e->dev->ops->is_gpu)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "optimizer.type \"ZeroOneAdam\" on the %s device: "
                      "zinc's 0/1 Adam runs on the cpu device only so far; use \"Adam\" there "
                      "or the cpu device", e->dev->ops->name);
  zinc_zoadam *z = NULL;
  ZINC_CHECK(zinc_calloc((void **)&z, 1, sizeof *z, "0/1 Adam state"));
  e->zoadam = z;
  ZINC_CHECK(plan(e, z));
  size_t n = (size_t)e->dp_size;
  ZINC_CHECK(alloc_zeroed(e, (size_t)e->opt_numel * 4, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->u, "0/1 Adam momentum accumulator"));
  ZINC_CHECK(alloc_zeroed(e, (size_t)z->total_padded * 4, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->werr, "0/1 Adam worker error"));
  ZINC_CHECK(alloc_zeroed(e, (size_t)z->total_chunk * 4, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->serr, "0/1 Adam server error"));
  ZINC_CHECK(alloc_zeroed(e, ZINC_MAX_PARAM_GROUPS * sizeof(double), ZINC_LOC_HOST,
                          ZINC_MEM_OPTIM, (void **)&z->lrs, "0/1 Adam lr sums"));
  ZINC_CHECK(alloc_zeroed(e, (size_t)z->total_padded * 4, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->x, "0/1 Adam compress buffer"));
  ZINC_CHECK(alloc_zeroed(e, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->bits_send, "0/1 Adam sign bits"));
  ZINC_CHECK(alloc_zeroed(e, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->bits_recv, "0/1 Adam sign bits"));
  ZINC_CHECK(alloc_zeroed(e, z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->bits_srv, "0/1 Adam sign bits"));
  ZINC_CHECK(alloc_zeroed(e, n * z->block, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->bits_all, "0/1 Adam sign bits"));
  ZINC_CHECK(alloc_zeroed(e, 4 * (2 + 2 * n) * (size_t)z->np, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->scales, "0/1 Adam scales"));
  ZINC_CHECK(alloc_zeroed(e, 4 * n * sizeof(size_t), ZINC_LOC_HOST, ZINC_MEM_BUFFERS,
                          (void **)&z->counts, "0/1 Adam exchange counts"));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.momentum_accumulator", z->u,
                                  (size_t)e->opt_numel * 4, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.worker_error", z->werr,
                                  (size_t)z->total_padded * 4, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.server_error", z->serr,
                                  (size_t)z->total_chunk * 4, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.lrs", z->lrs,
                                  ZINC_MAX_PARAM_GROUPS * sizeof(double), 1));
  zinc_log0(ZINC_LOG_INFO, "0/1 Adam: %d parameters, %lld elements compressed per all-reduce "
            "(%zu bytes of signs per rank), var_freeze_step %lld", z->np,
            (long long)z->total_padded, z->block, (long long)c->var_freeze_step);
  return ZINC_OK;
}

/* ------------------------------------------------ compressed all-reduce */

static int sign_bit(const uint8_t *bits, int64_t i) { return (bits[i >> 3] >> (7 - (i & 7))) & 1; }

/* Signs of y[0, n) into bits (n a multiple of 8): 1 where y >= 0 (or NaN). */
static void pack_signs(const float *y, int64_t n, uint8_t *bits) {
  for (int64_t i = 0; i < n; i += 8) {
    uint8_t b = 0;
    for (int k = 0; k < 8; k++)
      b = (uint8_t)(b << 1 | !(y[i + k] < 0.0f));
    bits[i >> 3] = b;
  }
}

static double rms(const float *y, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++)
    s += (double)y[i] * (double)y[i];
  return sqrt(s / (double)n);
}

/* C (the header) of z->x in place: every parameter's padded buffer
 * replaced by the compressed average over the data-parallel ranks.
 * Collective over e->dp. */
static zinc_status compressed_allreduce(zinc_engine *e, zinc_zoadam *z) {
  int n = e->dp_size, me = e->dp_rank, np = z->np;
  float *wscale = z->scales, *sscale = z->scales + np;
  float *all_w = z->scales + 2 * (size_t)np, *all_s = all_w + (size_t)n * np;
  /* worker: error feedback, scale, signs chunk by chunk to their servers */
  for (int i = 0; i < np; i++) {
    const zo_param *q = &z->params[i];
    float *y = z->x + q->werr_off, *err = z->werr + q->werr_off;
    for (int64_t k = 0; k < q->padded; k++)
      y[k] = (float)((double)y[k] + (double)err[k]);
    float a = (float)rms(y, q->padded);
    wscale[i] = a;
    for (int64_t k = 0; k < q->padded; k++)
      err[k] = (float)((double)y[k] - (y[k] < 0.0f ? -(double)a : (double)a));
    for (int j = 0; j < n; j++)
      pack_signs(y + (int64_t)j * q->chunk, q->chunk, z->bits_send + (size_t)j * z->block +
                                                          (size_t)q->bits_off);
  }
  size_t *counts = z->counts, *displs = counts + n, *rcounts = displs + n,
         *rdispls = rcounts + n;
  for (int j = 0; j < n; j++) {
    counts[j] = rcounts[j] = z->block;
    displs[j] = rdispls[j] = (size_t)j * z->block;
  }
  zinc_coll phase1[2] = {
      {.kind = ZINC_COLL_ALLTOALLV, .send = z->bits_send, .recv = z->bits_recv,
       .dtype = ZINC_DT_U8, .counts = counts, .displs = displs, .rcounts = rcounts,
       .rdispls = rdispls, .codec_name = "sign1", .logical_kind = ZINC_COLL_ALLREDUCE,
       .logical_bytes = 2 * (uint64_t)(n - 1) * 4 * (uint64_t)z->total_padded / (uint64_t)n},
      {.kind = ZINC_COLL_ALLGATHER, .send = wscale, .recv = all_w, .count = (size_t)np,
       .dtype = ZINC_F32},
  };
  double t0 = zinc_now();
  zinc_status st = e->dp->ops->run(e->dp, phase1, 2);
  e->t_comm_wait += zinc_now() - t0;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "0/1 Adam compressed all-reduce (signs to the servers)");
  /* server: my chunk of every parameter, summed over the workers in rank
   * order, error feedback, scale, signs */
  for (int i = 0; i < np; i++) {
    const zo_param *q = &z->params[i];
    float *c = z->x + q->werr_off + (int64_t)me * q->chunk; /* my chunk's slot: free now */
    float *err = z->serr + q->serr_off;
    for (int64_t k = 0; k < q->chunk; k++) {
      double sum = 0.0;
      for (int r = 0; r < n; r++) {
        double a = (double)all_w[(size_t)r * np + i] / (double)n;
        sum += sign_bit(z->bits_recv + (size_t)r * z->block + (size_t)q->bits_off, k) ? a : -a;
      }
      c[k] = (float)(sum + (double)err[k]);
    }
    float b = (float)rms(c, q->chunk);
    sscale[i] = b;
    for (int64_t k = 0; k < q->chunk; k++)
      err[k] = (float)((double)c[k] - (c[k] < 0.0f ? -(double)b : (double)b));
    pack_signs(c, q->chunk, z->bits_srv + q->bits_off);
  }
  zinc_coll phase2[2] = {
      {.kind = ZINC_COLL_ALLGATHER, .send = z->bits_srv, .recv = z->bits_all,
       .count = z->block, .dtype = ZINC_DT_U8},
      {.kind = ZINC_COLL_ALLGATHER, .send = sscale, .recv = all_s, .count = (size_t)np,
       .dtype = ZINC_F32},
  };
  t0 = zinc_now();
  st = e->dp->ops->run(e->dp, phase2, 2);
  e->t_comm_wait += zinc_now() - t0;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "0/1 Adam compressed all-reduce (server signs)");
  for (int i = 0; i < np; i++) {
    const zo_param *q = &z->params[i];
    for (int j = 0; j < n; j++) {
      float b = all_s[(size_t)j * np + i];
      const uint8_t *bits = z->bits_all + (size_t)j * z->block + (size_t)q->bits_off;
      float *out = z->x + q->werr_off + (int64_t)j * q->chunk;
      for (int64_t k = 0; k < q->chunk; k++)
        out[k] = sign_bit(bits, k) ? b : -b;
    }
  }
  return ZINC_OK;
}

/* ---------------------------------------------------------------- step */

zinc_status zinc_zoadam_norm(zinc_engine *e, double *total, int *overflow) {
  if (!zinc_zoadam_local_grads(e))
    return ZINC_OK;
  /* each rank's own gradients: sum the squares over the ranks (N x the
   * mean, so that step.c's division by dp_size gives the ranks' root mean
   * square) and let an inf/NaN on any rank skip the step on every rank */
  int n = e->dp_size;
  double mine[2] = {*overflow ? 1.0 : *total, *overflow ? 1.0 : 0.0};
  double *all = NULL;
  ZINC_CHECK(zinc_engine_host_calloc(e, (void **)&all, 2 * (size_t)n, sizeof *all,
                                     "0/1 Adam norms"));
  zinc_status st = zinc_comm_allgather(e->dp_host, mine, all, 2, ZINC_DT_F64);
  double sum = 0.0;
  int bad = 0;
  for (int r = 0; r < n; r++) {
    sum += all[2 * r];
    bad |= all[2 * r + 1] != 0.0;
  }
  free(all);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "0/1 Adam: agreeing the gradient norm");
  *total = sum * n;
  *overflow = bad || !isfinite(sum);
  return ZINC_OK;
}

typedef struct {
  double lr, wd, b1, b2, eps;
} zo_coef;

/* The master (f32) of parameter q. */
static float *master_of(const zinc_engine *e, const zo_param *q) {
  if (e->master_in_params)
    return (float *)q->p->module->segs[q->p->segment].full + q->p->seg_offset;
  return e->master + q->opt;
}

zinc_status zinc_zoadam_update(zinc_engine *e, double lr, double grad_scale) {
  zinc_zoadam *z = e->zoadam;
  const zinc_settings *cfg = &e->cfg;
  int64_t s = e->step + 1;
  const zo_sched *k = sched_at(z, cfg, s);
  int frozen = frozen_at(cfg, s), full = !frozen && s % k->var_interval == 0;
  int sync = frozen && s % k->local_interval == 0;
  int local = zinc_zoadam_local_grads(e);
  int n = e->dp_size;
  /* local gradients are this rank's sum over its micro-batches: no
   * division by the ranks */
  double gscale = local ? grad_scale * n : grad_scale;
  double b1, b2;
  zinc_betas_at(cfg, e->step, &b1, &b2);
  zo_coef co[ZINC_MAX_PARAM_GROUPS];
  for (int g = 0; g < e->ngroups; g++)
    co[g] = (zo_coef){lr * e->groups[g].lr_scale, e->groups[g].weight_decay, b1, b2, cfg->eps};
  zinc_status st = ZINC_OK;

  if (!frozen && !full && n > 1) { /* the compressed gradient */
    for (int i = 0; i < z->np; i++) {
      const zo_param *q = &z->params[i];
      const zinc_segment *seg = &q->p->module->segs[q->p->segment];
      float *y = z->x + q->werr_off;
      for (int64_t j = 0; j < q->n; j++)
        y[j] = (float)((double)zinc_load_as_f32(seg->grad, q->p->seg_offset + j, seg->dtype) *
                       gscale);
      memset(y + q->n, 0, (size_t)(q->padded - q->n) * 4);
    }
    st = compressed_allreduce(e, z);
  }
  for (int i = 0; st == ZINC_OK && i < z->np; i++) {
    const zo_param *q = &z->params[i];
    const zinc_segment *seg = &q->p->module->segs[q->p->segment];
    const zo_coef *c = &co[q->p->group];
    double wd = q->p->decay ? c->wd : 0.0;
    float *p = master_of(e, q), *m = e->exp_avg + q->opt, *v = e->exp_avg_sq + q->opt;
    float *u = z->u + q->opt;
    const float *compressed = z->x + q->werr_off;
    for (int64_t j = 0; j < q->n; j++) {
      double g = (double)zinc_load_as_f32(seg->grad, q->p->seg_offset + j, seg->dtype) * gscale;
      if (!frozen && !full && n > 1)
        g = compressed[j];
      if (full)
        v[j] = (float)(c->b2 * v[j] + (1.0 - c->b2) * g * g);
      m[j] = (float)(c->b1 * m[j] + (1.0 - c->b1) * g);
      double d = (double)m[j] / (sqrt((double)v[j]) + c->eps) + wd * p[j];
      p[j] = (float)((double)p[j] - c->lr * d);
      if (frozen)
        u[j] = (float)((double)u[j] - c->lr * d);
    }
  }
  if (st == ZINC_OK && frozen)
    for (int g = 0; g < e->ngroups; g++)
      z->lrs[g] += co[g].lr;
  if (st == ZINC_OK && sync) {
    /* undo the local steps, all-reduce the accumulated momentum in the
     * variance's scale, and take the averaged step */
    for (int i = 0; i < z->np; i++) {
      const zo_param *q = &z->params[i];
      const zo_coef *c = &co[q->p->group];
      float *p = master_of(e, q), *v = e->exp_avg_sq + q->opt, *u = z->u + q->opt;
      float *y = z->x + q->werr_off;
      for (int64_t j = 0; j < q->n; j++) {
        p[j] = (float)((double)p[j] - (double)u[j]);
        y[j] = (float)((double)u[j] * (sqrt((double)v[j]) + c->eps));
      }
      memset(y + q->n, 0, (size_t)(q->padded - q->n) * 4);
    }
    if (n > 1)
      st = compressed_allreduce(e, z);
    for (int i = 0; st == ZINC_OK && i < z->np; i++) {
      const zo_param *q = &z->params[i];
      const zo_coef *c = &co[q->p->group];
      double lrs = z->lrs[q->p->group];
      float *p = master_of(e, q), *m = e->exp_avg + q->opt, *v = e->exp_avg_sq + q->opt;
      const float *y = z->x + q->werr_off;
      for (int64_t j = 0; j < q->n; j++) {
        m[j] = (float)(-(double)y[j] / lrs);
        p[j] = (float)((double)p[j] + (double)y[j] / (sqrt((double)v[j]) + c->eps));
      }
      memset(z->u + q->opt, 0, (size_t)q->n * 4);
    }
    if (st == ZINC_OK)
      memset(z->lrs, 0, ZINC_MAX_PARAM_GROUPS * sizeof(double));
  }
  /* the compute copy from the master */
  for (int i = 0; st == ZINC_OK && !e->master_in_params && i < z->np; i++) {
    const zo_param *q = &z->params[i];
    const zinc_segment *seg = &q->p->module->segs[q->p->segment];
    const float *p = master_of(e, q);
    for (int64_t j = 0; j < q->n; j++)
      zinc_store_from_f32(seg->full, q->p->seg_offset + j, seg->dtype, p[j]);
  }
  if (st == ZINC_OK && !frozen && s == cfg->var_freeze_step + 1) {
    /* the last variance step: the errors carried gradients, from now on
     * they carry accumulated momenta */
    memset(z->werr, 0, (size_t)z->total_padded * 4);
    memset(z->serr, 0, (size_t)z->total_chunk * 4);
  }
  if (st == ZINC_OK)
    sched_advance(cfg, &z->sched);
  return st;
}
