/*
 * dga.c — Delayed Gradient Averaging (Zhu, Lin, Han et al., "Delayed
 * Gradient Averaging: Tolerate the Communication Latency for Federated
 * Learning", NeurIPS 2021), at ZeRO stage 0: the gradient all-reduce runs
 * in the background for D optimizer steps instead of blocking the step.
 *
 * With g_t^i rank i's local gradient of step t (its sum over the window's
 * micro-batches) and avg_t = (1/N) sum_j g_t^j, the optimizer of rank i
 * consumes at step t
 *
 *   t <  D:  g_t^i
 *   t >= D:  g_t^i + (avg_{t-D} - g_{t-D}^i)
 *
 * so that after the correction every step's local term is replaced by the
 * average, D steps late. The all-reduce of g_t starts at step t and is
 * waited for at step t + D: the communication overlaps D steps of
 * computation. (The paper's update, with the optimizer as the map from
 * gradient to update.) step.c divides the gradient it reads by
 * N x gradient_accumulation_steps x loss scale, the units of the exact
 * path's all-reduce sum, so this file writes N x that gradient:
 *
 *   G_t^i = N g_t^i + r (S_{t-D} - N g_{t-D}^i),   S = sum_j g^j,
 *
 * r = loss scale at t / loss scale at t - D (1 without fp16's dynamic
 * scale), in fp32, rounded once to the gradient's dtype.
 *
 * The ring: D slots, slot k holding the step pushed as number c with
 * c mod D = k: `local` (g_c^i, fp32, every trained unit in the whole-model
 * index space of zinc_unit.full_offset) and `sum` (the buffer the
 * all-reduce of `local` writes S_c into). 2 x D x 4 bytes per trained
 * element, in host memory (the element loops run on the host; on the cuda
 * device the gradient goes through a host staging copy each step). The
 * all-reduce runs over a comm of its own (a split of the data-parallel
 * host comm): a blocking collective on the data-parallel comm drains that
 * comm's worker (comm_mpi.c), which would wait for the all-reduce at once.
 * Its bytes are the exact all-reduce's (the logger's ring form,
 * 2 (N - 1) / N x 4 bytes per element, as reduce-scatter + all-gather of
 * fp32 gradients), only later, in an "all_reduce" row.
 *
 * Gradient clipping is local: each rank's gradient g_t^i is clipped by its
 * own norm (DeepSpeed's coefficient, gradient_clipping / (norm + 1e-6),
 * when the norm exceeds gradient_clipping) before it enters the ring, so
 * the term applied at t and the one taken back at t + D are the same, and
 * the average is of clipped local gradients; step.c clips nothing more.
 * (Clipping the corrected gradient by its own norm would scale the two
 * copies of a local term differently, and they would not cancel.)
 *
 * Overflow: an inf/NaN in any rank's local gradient skips the step on
 * every rank (agreed here, one small all-reduce), and the ring is left as
 * it was: the skipped step's gradient is never sent, and the pending
 * correction is applied at the next step that is not skipped.
 *
 * The ranks' parameters differ: rank i's carries its own last D local
 * terms instead of the average. Nothing re-synchronises them during
 * training (zinc_param_get_full assembles chunk r of every unit from rank
 * r: a mix). A checkpoint save does (the row's sync): it waits for the
 * all-reduces in flight, then every rank takes rank 0's parameters,
 * optimizer state and pending local gradients (broadcasts), so that the
 * checkpoint holds one model, rank 0's, and the ring (local gradients,
 * finished sums, counters: mstate.h's "dga.*") is the same on every rank;
 * the run goes on from that model exactly as a run resumed from the
 * checkpoint does, bit for bit. A load first waits for the all-reduces in
 * flight; a checkpoint without the ring (another world size, delay or
 * method) starts it empty: plain local steps for D steps, as at the start.
 * The pending corrections of the last D steps are
 * never applied: zinc_engine_destroy waits for the all-reduces in flight
 * (every rank started the same ones, and the comm's worker completes them
 * without the caller) and drops them. A failed wait (a lost peer, the
 * comm timeout) is agreed over the data-parallel group in the step, so
 * every rank returns the error. The comm is a split of the data-parallel
 * one, so it shares the engine's fate (comm/comm.h): when any comm of the
 * engine gives up on a lost rank, the all-reduce in flight here gives up
 * too (and the agreement after a failed wait here fails at once), so
 * neither the step nor destroy waits a second timeout for the same rank.
 *
 * Test-only: ZINC_DGA_DROP_CORRECTION=1 (base/env.h) leaves the correction
 * out (pure local steps, the all-reduces still run), the broken variant the
 * GPT gap test must tell apart.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/threadpool.h"
#include "device/device_cpu.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/reduce/methods.h"
#include "engine/support.h"

struct zinc_dga {
  int delay;              /* D >= 1 */
  int64_t n;              /* fp32 elements of every trained unit: N x S  */
  size_t ring_bytes;      /* D x n x 4, each of local and sum           */
  float *local;           /* (D, n) host: the local gradients in flight  */
  float *sum;             /* (D, n) host: their all-reduce sums          */
  double *hdr;            /* (1 + D) host: [0] steps pushed; [1 + k]
                             slot k's loss scale                        */
  zinc_comm_req **req;    /* (D) the all-reduce of slot k, or NULL: done */
  zinc_comm *comm;        /* the all-reduces' own comm (header comment)  */
  void *staging;          /* cuda: (train_bytes) host copy of the
                             gradient buffer; NULL on the cpu device    */
  int drop_correction;    /* ZINC_DGA_DROP_CORRECTION (test-only)        */
  int skip;               /* this step is skipped on every rank          */
};

/* Its state, behind the reducer's method-private pointer (e->rd->priv). */
static struct zinc_dga *dga_of(const zinc_engine *e) { return e->rd->priv; }

/* ------------------------------------------------------------ setup */

static size_t ring_bytes(int64_t n, int delay) { return (size_t)delay * (size_t)n * 4; }

/* The row's sizes: the ring (host gradient memory) and, on a GPU device
 * (sized_as_gpu: the estimator's), the gradients' host staging. */
static void state_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  const zinc_settings *s = &e->cfg;
  if (s->dga_delay <= 0 || s->stage != 0 || e->dp_size < 2)
    return;
  int64_t n = (int64_t)e->dp_size * e->train_shard_numel;
  bytes[ZINC_LOC_HOST][ZINC_MEM_GRADS] +=
      2 * ring_bytes(n, (int)s->dga_delay) + (size_t)(1 + s->dga_delay) * 8;
  if (e->dev ? e->dev->ops->is_gpu : e->sized_as_gpu)
    bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += e->train_bytes ? e->train_bytes : 16;
}

/* The ring of snapshots and its comm, after the layout (no state when off
 * or on one rank). */
static zinc_status dga_init(zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  if (s->dga_delay <= 0 || s->stage != 0)
    return ZINC_OK;
  if (e->dp_size < 2) {
    zinc_log0(ZINC_LOG_INFO, "zinc.compression.delayed_averaging: one data-parallel rank, "
              "nothing to average; the exact step runs");
    return ZINC_OK;
  }
  if (e->mp_size > 1)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "zinc.compression.delayed_averaging with model "
                      "parallelism (model_parallel_size %d) is not implemented; use "
                      "model_parallel_size 1 or delay 0", e->mp_size);
  if (s->offload_optimizer.device != ZINC_OFFLOAD_NONE ||
      s->offload_param.device != ZINC_OFFLOAD_NONE)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "zinc.compression.delayed_averaging with an offloaded "
                      "optimizer or parameters is not implemented; remove the offload sections "
                      "or set delay 0");
  struct zinc_dga *d = NULL;
  ZINC_CHECK(zinc_calloc((void **)&d, 1, sizeof *d, "delayed averaging"));
  e->rd->priv = d;
  d->delay = (int)s->dga_delay;
  d->n = (int64_t)e->dp_size * e->train_shard_numel;
  d->ring_bytes = ring_bytes(d->n, d->delay);
  d->drop_correction = zinc_env_flag("ZINC_DGA_DROP_CORRECTION", 0);
  ZINC_CHECK(zinc_calloc((void **)&d->req, (size_t)d->delay, sizeof *d->req,
                         "delayed averaging requests"));
  size_t bytes = d->ring_bytes ? d->ring_bytes : 16;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, bytes, ZINC_LOC_HOST, ZINC_MEM_GRADS,
                                      (void **)&d->local, "delayed averaging: local gradients"));
  ZINC_CHECK(zinc_engine_buffer_alloc(e, bytes, ZINC_LOC_HOST, ZINC_MEM_GRADS,
                                      (void **)&d->sum, "delayed averaging: averaged gradients"));
  ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)(1 + d->delay) * 8, ZINC_LOC_HOST,
                                      ZINC_MEM_GRADS, (void **)&d->hdr,
                                      "delayed averaging: counters"));
  memset(d->local, 0, bytes);
  memset(d->sum, 0, bytes);
  memset(d->hdr, 0, (size_t)(1 + d->delay) * 8);
  if (e->dev->ops->is_gpu)
    ZINC_CHECK(zinc_engine_buffer_alloc(e, e->train_bytes ? e->train_bytes : 16, ZINC_LOC_HOST,
                                        ZINC_MEM_BUFFERS, &d->staging,
                                        "delayed averaging: gradient staging"));
  ZINC_CHECK(zinc_mstate_register(e, "dga.local", d->local, bytes, 1));
  ZINC_CHECK(zinc_mstate_register(e, "dga.sum", d->sum, bytes, 1));
  ZINC_CHECK(zinc_mstate_register(e, "dga.counters", d->hdr, (size_t)(1 + d->delay) * 8, 1));
  ZINC_CHECK(e->dp_host->ops->split(e->dp_host, 0, e->dp_rank, &d->comm));
  d->comm->log = e->comms_log;
  d->comm->log_group = "data_parallel";
  zinc_log0(ZINC_LOG_INFO, "delayed gradient averaging: delay %d steps, %zu bytes of snapshots "
            "per rank", d->delay, 2 * d->ring_bytes);
  return ZINC_OK;
}

/* Wait for the all-reduces in flight. Collective in effect: every rank
 * waits for the same all-reduces, which the comm's worker completes. */
static zinc_status settle(zinc_engine *e) {
  struct zinc_dga *d = dga_of(e);
  zinc_status st = ZINC_OK;
  for (int k = 0; d && d->req && k < d->delay; k++) {
    if (!d->req[k])
      continue;
    zinc_status w = zinc_engine_wait(e, d->comm, d->req[k]);
    d->req[k] = NULL; /* consumed whatever wait returned (comm.h) */
    if (w != ZINC_OK && st == ZINC_OK)
      st = zinc_error_wrap(w, "delayed gradient averaging: the all-reduce of slot %d", k);
  }
  return st;
}

/* Before a checkpoint: wait for the all-reduces in flight (agreed over
 * the data-parallel group); adopt_rank0 (a save): then every rank takes
 * rank 0's parameters, optimizer state and pending local gradients, so
 * that the checkpoint holds one model and the run goes on from it, as a
 * resumed one does. Collective. */
static zinc_status dga_sync(zinc_engine *e, int adopt_rank0) {
  struct zinc_dga *d = dga_of(e);
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, settle(e)));
  if (!adopt_rank0)
    return ZINC_OK;
  /* every rank the same model: rank 0's parameters, optimizer state and
   * pending local gradients (the sums and counters agree already) */
  zinc_coll c[4];
  int n = 0;
  c[n++] = (zinc_coll){.kind = ZINC_COLL_BROADCAST, .recv = e->param_full,
                       .count = e->full_bytes, .dtype = ZINC_DT_U8};
  float *state[3] = {e->master, e->exp_avg, e->exp_avg_sq}; /* fp32: stage 0, no bf16 (validate.c) */
  for (int k = 0; k < 3; k++)
    if (state[k])
      c[n++] = (zinc_coll){.kind = ZINC_COLL_BROADCAST, .recv = state[k],
                           .count = (size_t)e->opt_numel, .dtype = ZINC_F32};
  zinc_status st = e->dp->ops->run(e->dp, c, n);
  if (st == ZINC_OK)
    st = zinc_comm_broadcast(e->dp_host, d->local, d->ring_bytes / 4, ZINC_F32, 0);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "delayed gradient averaging: taking rank 0's model before the "
                           "checkpoint");
  return ZINC_OK;
}

/* Waits for the all-reduces in flight, then frees. */
static void dga_free(zinc_engine *e) {
  struct zinc_dga *d = dga_of(e);
  if (!d)
    return;
  /* the buffers must outlive the all-reduces that read and write them */
  if (settle(e) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "%s (at destroy; the pending corrections are dropped)",
             zinc_last_error());
  zinc_comm_destroy(d->comm);
  size_t bytes = d->ring_bytes ? d->ring_bytes : 16;
  zinc_engine_buffer_free(e, d->local, bytes, ZINC_LOC_HOST, ZINC_MEM_GRADS);
  zinc_engine_buffer_free(e, d->sum, bytes, ZINC_LOC_HOST, ZINC_MEM_GRADS);
  zinc_engine_buffer_free(e, d->hdr, (size_t)(1 + d->delay) * 8, ZINC_LOC_HOST, ZINC_MEM_GRADS);
  zinc_engine_buffer_free(e, d->staging, e->train_bytes ? e->train_bytes : 16, ZINC_LOC_HOST,
                          ZINC_MEM_BUFFERS);
  free(d->req);
  free(d);
  e->rd->priv = NULL;
}

/* The step must be skipped: an inf/NaN in some rank's local gradient
 * (agreed in dga_step); 0 when off. */
static int dga_skipped(const zinc_engine *e) { return dga_of(e) ? dga_of(e)->skip : 0; }

/* ------------------------------------------------------------ the step */

/* Unit ui's gradient where the host reads it: the gradient buffer (cpu
 * device) or its staging copy (cuda). */
static char *unit_grad(zinc_engine *e, int ui) {
  const zinc_unit *u = &e->units[ui];
  const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
  char *p = zinc_unit_ptr(seg->grad, u);
  if (dga_of(e)->staging)
    p = (char *)dga_of(e)->staging + (p - (char *)e->grad_full);
  return p;
}

/* *over = 1 when this rank's local gradient holds an inf or NaN: the
 * device's sum of squares of every trained unit (non-finite then), on the
 * gradient buffer itself; *sumsq: the sum of squares (units in order). */
static zinc_status local_overflow(zinc_engine *e, double *over, double *sumsq) {
  int n = e->ntrain_units;
  zinc_sumsq_chunk *chunks = NULL;
  double *partials = NULL;
  zinc_status st = zinc_engine_host_calloc(e, (void **)&chunks, (size_t)n + 1, sizeof *chunks,
                                           "delayed averaging: overflow check");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&partials, (size_t)n + 1, sizeof *partials,
                                 "delayed averaging: overflow check");
  for (int ui = 0; st == ZINC_OK && ui < n; ui++) {
    const zinc_unit *u = &e->units[ui];
    const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
    chunks[ui] = (zinc_sumsq_chunk){zinc_unit_ptr(seg->grad, u), u->numel, u->dtype};
  }
  if (st == ZINC_OK)
    st = e->dev->ops->sumsq(e->dev, e->stream, chunks, n, partials);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  *over = 0.0;
  *sumsq = 0.0;
  for (int ui = 0; st == ZINC_OK && ui < n; ui++) {
    if (!isfinite(partials[ui]))
      *over = 1.0;
    *sumsq += partials[ui];
  }
  free(chunks);
  free(partials);
  return st;
}

/* One unit's elements [begin, end) of the correction (correct below). */
typedef struct {
  float N, r, c;          /* dp_size, the loss-scale ratio, the clip factor */
  int apply;              /* the slot holds a finished sum to apply */
  char *g;                /* the unit's gradient (dtype) */
  int dtype;
  float *lo;              /* its local gradient in the slot */
  const float *su;        /* its sum in the slot */
} correct_ctx;

static void correct_part(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const correct_ctx *x = ctx;
  if (x->dtype == ZINC_F32) { /* the same arithmetic, without the casts */
    float *g32 = (float *)(void *)x->g;
    for (int64_t j = begin; j < end; j++) {
      float now = x->c * g32[j];
      float v = x->N * now;
      if (x->apply)
        v += x->r * (x->su[j] - x->N * x->lo[j]);
      x->lo[j] = now;
      g32[j] = v;
    }
    return;
  }
  for (int64_t j = begin; j < end; j++) {
    float now = x->c * zinc_load_as_f32(x->g, j, x->dtype);
    float v = x->N * now;
    if (x->apply)
      v += x->r * (x->su[j] - x->N * x->lo[j]);
    x->lo[j] = now;
    zinc_store_from_f32(x->g, j, x->dtype, v);
  }
}

/* The corrected gradient (header comment) into the gradient buffer, this
 * step's local gradient times `clip` into the slot; `old`: the slot holds a
 * finished sum to apply. Element-wise, so split over the cpu device's
 * threads (the caller alone on the cuda device, over the staging copy). */
static void correct(zinc_engine *e, int slot, int old, double ratio, double clip) {
  struct zinc_dga *d = dga_of(e);
  zinc_threadpool *pool = e->dev->ops->is_gpu ? NULL : zinc_device_cpu_pool(e->dev);
  float *local = d->local + (size_t)slot * (size_t)d->n;
  const float *sum = d->sum + (size_t)slot * (size_t)d->n;
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    const zinc_unit *u = &e->units[ui];
    correct_ctx x = {(float)e->dp_size, (float)ratio, (float)clip, old && !d->drop_correction,
                     unit_grad(e, ui), u->dtype, local + u->full_offset, sum + u->full_offset};
    zinc_threadpool_for(pool, u->numel, 4096, correct_part, &x);
  }
}

/* In the step, in place of stage 0's gradient all-gather: this rank's
 * corrected gradient (the all-reduce sum's units) into its gradient
 * buffer, the all-reduce of its local gradient started. Collective over
 * the data-parallel group. */
static zinc_status dga_step(zinc_engine *e) {
  struct zinc_dga *d = dga_of(e);
  d->skip = 0;
  double over = 0.0, any = 0.0, sumsq = 0.0;
  zinc_status st = local_overflow(e, &over, &sumsq);
  if (st == ZINC_OK && d->staging)
    st = e->dev->ops->copy(e->dev, d->staging, e->grad_full, e->train_bytes, e->stream);
  if (st == ZINC_OK && d->staging)
    st = zinc_engine_sync(e);
  int64_t pushed = (int64_t)d->hdr[0];
  int slot = (int)(pushed % d->delay), old = pushed >= d->delay;
  /* the slot's all-reduce (D steps ago) must be done before it is reused */
  if (st == ZINC_OK && d->req[slot]) {
    st = zinc_engine_wait(e, d->comm, d->req[slot]);
    d->req[slot] = NULL;
    if (st != ZINC_OK)
      zinc_error_wrap(st, "delayed gradient averaging: the all-reduce of step %lld's gradient",
                      (long long)(pushed - d->delay + 1));
  }
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
  ZINC_CHECK(zinc_comm_allreduce(e->dp_host, &over, &any, 1, ZINC_DT_F64, ZINC_OP_MAX));
  if (any != 0.0) {
    d->skip = 1; /* the ring stays as it was (header comment) */
    return ZINC_OK;
  }
  double scale = zinc_loss_scaler_scale(&e->scaler);
  double ratio = old && d->hdr[1 + slot] > 0 ? scale / d->hdr[1 + slot] : 1.0;
  /* local clipping: this rank's gradient by its own norm, before it enters
   * the ring (step.c then clips nothing) */
  double norm = sqrt(sumsq) / (scale * (double)e->cfg.gradient_accumulation_steps), clip = 1.0;
  if (e->cfg.gradient_clipping > 0 && norm > e->cfg.gradient_clipping)
    clip = e->cfg.gradient_clipping / (norm + 1e-6);
  correct(e, slot, old, ratio, clip);
  d->hdr[1 + slot] = scale;
  d->hdr[0] = (double)(pushed + 1);
  if (d->staging) {
    ZINC_CHECK(e->dev->ops->copy(e->dev, e->grad_full, d->staging, e->train_bytes, e->stream));
    ZINC_CHECK(zinc_engine_sync(e));
  }
  size_t off = (size_t)slot * (size_t)d->n;
  zinc_coll c = {.kind = ZINC_COLL_ALLREDUCE, .send = d->local + off, .recv = d->sum + off,
                 .count = (size_t)d->n, .dtype = ZINC_F32, .op = ZINC_OP_SUM};
  st = d->comm->ops->start(d->comm, &c, 1, &d->req[slot]);
  if (st != ZINC_OK)
    d->req[slot] = NULL;
  /* a rank that could not start it must not leave its peers waiting for it
   * at step t + D */
  return zinc_engine_agree(e, e->dp_host, st == ZINC_OK ? ZINC_OK
                           : zinc_error_wrap(st, "delayed gradient averaging: starting the "
                                             "all-reduce"));
}

/* ------------------------------------------------------ the table row */

static int selects(const zinc_settings *s) { return s->dga_delay > 0 && s->stage == 0; }

/* The step reduces, in the background: the buckets keep the local
 * gradients (one rank: no ring, the exact step). */
static int keeps_local(zinc_engine *e) { return dga_of(e) != NULL; }
static int clips_locally(const zinc_engine *e) { return dga_of(e) != NULL; }

static zinc_status whole_grads(zinc_engine *e, int *done) {
  if (!dga_of(e))
    return ZINC_OK;
  *done = 1; /* the corrected gradient in place of the all-gather */
  return dga_step(e);
}

static zinc_status norm(zinc_engine *e, double *total, int *overflow) {
  (void)total;
  *overflow = *overflow || dga_skipped(e); /* some rank's local gradient */
  return ZINC_OK;
}

static zinc_status sync_before_checkpoint(zinc_engine *e, int adopt_rank0) {
  return dga_of(e) ? dga_sync(e, adopt_rank0) : ZINC_OK;
}

const zinc_reducer zinc_reducer_dga = {
    .name = "delayed_averaging",
    .selects = selects,
    .sizes = state_sizes,
    .init = dga_init,
    .free = dga_free,
    .local_grads = keeps_local,
    .whole_grads = whole_grads,
    .norm = norm,
    .clips_locally = clips_locally,
    .sync = sync_before_checkpoint,
};
