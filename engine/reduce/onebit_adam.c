/*
 * onebit_adam.c — optimizer.type "OneBitAdam": DeepSpeed's 1-bit Adam
 * (Tang et al. 2021, arXiv:2102.02888; deepspeed/runtime/fp16/onebit/
 * adam.py) at ZeRO stage 0, over the layout's optimizer arrays (every rank
 * holds the whole master, exp_avg and exp_avg_sq at stage 0).
 *
 * Formulas (t counts the optimizer steps taken, e->step before the step;
 * lr, wd per parameter group; decay only where the parameter's flag says):
 *   warm-up, t < freeze_step — Adam on the exactly all-reduced gradient
 *   (the engine's normal stage-0 path, the fused Adam kernel):
 *     g = (sum over ranks and micro-batches) / (loss_scale N gas) * clip
 *     m = b1 m + (1 - b1) g
 *     v = b2 v + (1 - b2) g^2
 *     p = p - lr (m / (sqrt(v) + eps) + wd p)
 *   compressed, t >= freeze_step — no gradient reduction (grads.c skips it,
 *   step.c skips the stage-0 gather); on every rank r:
 *     g_r = (this rank's sum over its micro-batches) / (loss_scale gas) * clip
 *     m   = b1 m + (1 - b1) g_r
 *     m   = compressed_allreduce(m)     (engine/reduce/onebit.h: the average of
 *                                        the ranks' m, 1-bit with worker and
 *                                        server error feedback, per parameter;
 *                                        the same on every rank)
 *     p   = p - lr (m / (sqrt(v) + eps) + wd p)        (v frozen)
 * DeepSpeed's semantics kept: no bias correction in either phase
 * (adam.py stores bias_correction in the group and never reads it); the
 * weight decay is added to the update, not to the gradient, so it never
 * enters m or v (zinc's decoupled form p = p (1 - lr wd) - lr m / d: the
 * same formula); eps outside the square root; the first compressed step is
 * the one after freeze_step exact ones; the errors start at zero then.
 * Zinc's differences: DeepSpeed's first optimizer call only allocates its
 * buffers (parameters and moments unchanged, the step counted); zinc's first
 * step is a real Adam step. DeepSpeed resets both errors on every
 * checkpoint load; zinc saves every rank's (zinc_mstate_register) and gives
 * them back bitwise at the same layout (zero otherwise, as DeepSpeed).
 * exp_avg_mask and "non_freeze" parameter groups are not implemented.
 *
 * Norm, overflow and clipping after freeze_step: each rank's gradient is
 * its own, so the norm is sqrt(mean over ranks of |g_r|^2) (g_r as above,
 * before clipping), the ranks' squared norms gathered and summed in rank
 * order: the same number on every rank, so every rank clips alike; an
 * inf/NaN on any rank makes it non-finite everywhere and every rank skips
 * the step (DeepSpeed agrees on the overflow flag and clips with each
 * rank's own norm). With the same gradient on every rank it is the exact
 * norm; otherwise it is at least the norm of the average.
 *
 * The momentum update and the parameter update run on the host: in place
 * on the cpu device, through host copies of each run on a GPU device (as
 * the compressed all-reduce does; no CUDA kernel yet).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/reduce/methods.h"
#include "engine/reduce/onebit.h"
#include "engine/support.h"

/* Its state, behind e->rd->priv (OneBitAdam at stage 0; none otherwise). */
typedef struct {
  zinc_onebit_plan plan;   /* one segment per trained parameter, in the
                              optimizer arrays (N*S)                    */
  float *worker_error;     /* (worker_bytes) device: padded momentum    */
  float *server_error;     /* (server_bytes) device: this rank's chunks */
  size_t worker_bytes, server_bytes;
  double *norms;           /* (2 N) host: the norm agreement's          */
} onebit_adam;

static onebit_adam *adam_of(const zinc_engine *e) { return e->rd->priv; }

/* 1 when this step's gradients stay local (OneBitAdam, e->step >=
 * freeze_step): the buckets reduce nothing, the step gathers nothing. */
static int onebit_local_grads(const zinc_engine *e) {
  return e->cfg.optimizer == ZINC_OPTIM_ONEBIT_ADAM && e->cfg.stage == 0 &&
         e->step >= e->cfg.onebit_freeze_step;
}

/* The optimizer index of element `x` of segment `seg` of module m at stage
 * 0 (the unit's full_offset + its place in the unit), or -1 if frozen. */
static int64_t opt_index(const zinc_engine *e, const zinc_module *m, int seg, int64_t x) {
  const zinc_segment *s = &m->segs[seg];
  if (s->frozen)
    return -1;
  for (int ui = s->first_unit; ui < s->first_unit + s->nunits; ui++) {
    const zinc_unit *u = &e->units[ui];
    if (x >= u->seg_offset && x < u->seg_offset + u->numel)
      return u->full_offset + (x - u->seg_offset);
  }
  return -1;
}

/* One segment per trained parameter, where it lies in the optimizer
 * arrays (a parameter's elements are contiguous there at stage 0). */
static zinc_status param_segments(const zinc_engine *e, zinc_onebit_seg **out, int *nout) {
  zinc_onebit_seg *seg = NULL;
  int n = 0;
  ZINC_CHECK(zinc_calloc((void **)&seg, (size_t)e->nparams + 1, sizeof *seg,
                         "1-bit Adam segments"));
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    if (p->frozen || p->numel == 0)
      continue;
    int64_t a = opt_index(e, p->module, p->segment, p->seg_offset);
    int64_t b = opt_index(e, p->module, p->segment, p->seg_offset + p->numel - 1);
    if (a < 0 || b - a != p->numel - 1) {
      free(seg);
      return zinc_error(ZINC_ERR_INVALID, "1-bit Adam: parameter \"%s\" is not contiguous in "
                        "the stage-0 optimizer arrays", p->name);
    }
    seg[n++] = (zinc_onebit_seg){a, p->numel};
  }
  *out = seg;
  *nout = n;
  return ZINC_OK;
}

/* Tests: the worker and server errors zeroed before every compressed
 * all-reduce (error feedback removed), the broken variant the GPT gap test
 * must see fail. */
static int no_error_feedback(void) { return zinc_env_flag("ZINC_ONEBIT_NO_ERROR_FEEDBACK", 0); }

/* The row's sizes: the error buffers, optimizer memory on the device. */
static void adam_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (e->cfg.optimizer != ZINC_OPTIM_ONEBIT_ADAM || e->cfg.stage != 0)
    return;
  uint64_t total = 0;
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    if (p->frozen || p->numel == 0)
      continue;
    int64_t padded = zinc_onebit_padded(p->numel, e->dp_size);
    total += 4 * (uint64_t)(padded + padded / e->dp_size); /* worker + server */
  }
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] += total;
}

/* OneBitAdam at stage 0: the plan and the worker/server errors (registered
 * as method state); nothing for another optimizer. After layout. */
static zinc_status adam_init(zinc_engine *e) {
  if (e->cfg.optimizer != ZINC_OPTIM_ONEBIT_ADAM || e->cfg.stage != 0)
    return ZINC_OK;
  onebit_adam *ob = NULL;
  ZINC_CHECK(zinc_calloc((void **)&ob, 1, sizeof *ob, "1-bit Adam state"));
  e->rd->priv = ob;
  zinc_onebit_seg *seg = NULL;
  int n = 0;
  ZINC_CHECK(param_segments(e, &seg, &n));
  zinc_status st = zinc_onebit_plan_init(&ob->plan, seg, n, e->dp_size, e->dp_rank);
  free(seg);
  ZINC_CHECK(st);
  zinc_onebit_plan *p = &ob->plan;
  p->staged = zinc_env_flag("ZINC_TEST_ONEBIT_STAGED", 0); /* tests: onebit.h */
  ob->worker_bytes = p->worker_error_bytes ? p->worker_error_bytes : 16;
  ob->server_bytes = p->server_error_bytes ? p->server_error_bytes : 16;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, ob->worker_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                                      (void **)&ob->worker_error, "1-bit Adam worker error"));
  ZINC_CHECK(zinc_engine_buffer_alloc(e, ob->server_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                                      (void **)&ob->server_error, "1-bit Adam server error"));
  ZINC_CHECK(e->dev->ops->fill_zero(e->dev, ob->worker_error, ob->worker_bytes, e->stream));
  ZINC_CHECK(e->dev->ops->fill_zero(e->dev, ob->server_error, ob->server_bytes, e->stream));
  ZINC_CHECK(zinc_mstate_register(e, "onebit_adam.worker_error", ob->worker_error,
                                  ob->worker_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "onebit_adam.server_error", ob->server_error,
                                  ob->server_bytes, 0));
  zinc_log0(ZINC_LOG_INFO, "compressed communication (OneBitAdam): exact Adam for %lld "
            "steps, then the momentum all-reduced 1-bit over %d ranks (%d parameters, %zu + "
            "%zu bytes of error buffers per rank)%s", (long long)e->cfg.onebit_freeze_step, e->dp_size, p->nseg,
            p->worker_error_bytes, p->server_error_bytes,
            no_error_feedback() ? "; ZINC_ONEBIT_NO_ERROR_FEEDBACK: the errors are dropped "
                                  "(a broken variant for tests)" : "");
  return ZINC_OK;
}

static void adam_free(zinc_engine *e) {
  onebit_adam *ob = adam_of(e);
  if (!ob)
    return;
  if (ob->worker_error)
    zinc_engine_buffer_free(e, ob->worker_error, ob->worker_bytes, ZINC_LOC_DEVICE,
                            ZINC_MEM_OPTIM);
  if (ob->server_error)
    zinc_engine_buffer_free(e, ob->server_error, ob->server_bytes, ZINC_LOC_DEVICE,
                            ZINC_MEM_OPTIM);
  zinc_onebit_plan_free(&ob->plan);
  free(ob->norms);
  free(ob);
  e->rd->priv = NULL;
}

/* ------------------------------- the 1-bit family's norm agreement (methods.h) */

/* The 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb) at stage 0. */
static int onebit_family(const zinc_engine *e) {
  int o = e->cfg.optimizer;
  return e->cfg.stage == 0 && (o == ZINC_OPTIM_ONEBIT_ADAM || o == ZINC_OPTIM_ZERO_ONE_ADAM ||
                               o == ZINC_OPTIM_ONEBIT_LAMB);
}

zinc_status zinc_onebit_norms_init(const zinc_engine *e, double **norms) {
  if (!onebit_family(e))
    return ZINC_OK;
  return zinc_calloc((void **)norms, 2 * (size_t)e->dp_size, sizeof **norms,
                     "the 1-bit optimizers' norm agreement");
}

zinc_status zinc_onebit_norm_agree(zinc_engine *e, double *norms, const char *who,
                                   double *total, int *overflow) {
  int n = e->dp_size;
  double mine[2] = {*overflow ? 1.0 : *total, *overflow ? 1.0 : 0.0}, *all = norms;
  zinc_status st = ZINC_OK;
  if (n > 1)
    st = zinc_comm_allgather(e->dp_host, mine, all, 2, ZINC_DT_F64);
  else
    memcpy(all, mine, sizeof mine);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "%s: agreeing on the gradient norm", who);
  double sum = 0.0;
  int any = 0;
  for (int r = 0; r < n; r++) {
    sum += all[2 * r];
    any |= all[2 * r + 1] != 0.0;
  }
  /* the step scales sqrt(total) by 1 / (loss_scale N gas): N x the sum
   * gives sqrt(sum / N) / (loss_scale gas), the ranks' root mean square */
  *total = sum * (double)n;
  *overflow = any || !isfinite(*total);
  return ZINC_OK;
}

/* ------------------------------------------------------------ the step */

/* A run's arrays where the host can compute on them. */
typedef struct {
  float *master, *m, *v;
  const void *grad;
  void *param_out;
  float *owned;             /* host copies (GPU device), or NULL */
} host_run;

static zinc_status host_open(zinc_engine *e, const zinc_opt_seg *s, host_run *h) {
  memset(h, 0, sizeof *h);
  if (!e->dev->ops->is_gpu && !adam_of(e)->plan.staged) { /* staged: tests, onebit.h */
    *h = (host_run){s->master, s->exp_avg, s->exp_avg_sq, s->grad, s->param_out, NULL};
    return ZINC_OK;
  }
  size_t n = (size_t)s->n, f = n * 4;
  ZINC_CHECK(zinc_calloc((void **)&h->owned, 5 * n + 4, 4, "1-bit Adam host copy"));
  h->master = h->owned;
  h->m = h->owned + n;
  h->v = h->owned + 2 * n;
  h->grad = h->owned + 3 * n;
  h->param_out = s->param_out ? h->owned + 4 * n : NULL;
  zinc_status st = e->dev->ops->copy(e->dev, h->master, s->master, f, e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->copy(e->dev, h->m, s->exp_avg, f, e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->copy(e->dev, h->v, s->exp_avg_sq, f, e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->copy(e->dev, (void *)h->grad, s->grad, n * zinc_dt_size(s->grad_dtype),
                           e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->stream_sync(e->dev, e->stream);
  if (st != ZINC_OK)
    free(h->owned);
  return st;
}

static zinc_status host_close(zinc_engine *e, const zinc_opt_seg *s, host_run *h) {
  if (!h->owned)
    return ZINC_OK;
  size_t f = (size_t)s->n * 4;
  zinc_status st = e->dev->ops->copy(e->dev, s->master, h->master, f, e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->copy(e->dev, s->exp_avg, h->m, f, e->stream);
  if (st == ZINC_OK && s->param_out)
    st = e->dev->ops->copy(e->dev, s->param_out, h->param_out,
                           (size_t)s->n * zinc_dt_size(s->param_dtype), e->stream);
  if (st == ZINC_OK)
    st = e->dev->ops->stream_sync(e->dev, e->stream);
  free(h->owned);
  h->owned = NULL;
  return st;
}

/* m = b1 m + (1 - b1) g scale, over every run. */
static zinc_status momentum_pass(zinc_engine *e, const zinc_opt_coef *c,
                                 const zinc_opt_seg *segs, float scale) {
  for (int i = 0; i < e->nruns; i++) {
    const zinc_opt_seg *s = &segs[i];
    const zinc_opt_coef *k = &c[s->coef];
    host_run h;
    ZINC_CHECK(host_open(e, s, &h));
    float b1 = k->beta1, c1 = k->one_minus_beta1 * scale;
    float *restrict m = h.m;
    if (s->grad_dtype == ZINC_F32) {
      const float *restrict g = h.grad;
      for (int64_t j = 0; j < s->n; j++)
        m[j] = b1 * m[j] + c1 * g[j];
    } else {
      for (int64_t j = 0; j < s->n; j++)
        m[j] = b1 * m[j] + c1 * zinc_load_as_f32(h.grad, j, s->grad_dtype);
    }
    ZINC_CHECK(host_close(e, s, &h));
  }
  return ZINC_OK;
}

/* p = p (1 - lr wd) - lr m / (sqrt(v) + eps), v frozen; the compute copy. */
static zinc_status update_pass(zinc_engine *e, const zinc_opt_coef *c,
                               const zinc_opt_seg *segs) {
  for (int i = 0; i < e->nruns; i++) {
    const zinc_opt_seg *s = &segs[i];
    const zinc_opt_coef *k = &c[s->coef];
    host_run h;
    ZINC_CHECK(host_open(e, s, &h));
    float decay = s->decay ? k->decay_factor : 1.0f, lr = k->step_size, eps = k->eps;
    float *restrict p = h.master;
    const float *restrict m = h.m, *restrict v = h.v;
    for (int64_t j = 0; j < s->n; j++)
      p[j] = p[j] * decay - lr * (m[j] / (sqrtf(v[j]) + eps));
    if (h.param_out)
      for (int64_t j = 0; j < s->n; j++)
        zinc_store_from_f32(h.param_out, j, s->param_dtype, h.master[j]);
    ZINC_CHECK(host_close(e, s, &h));
  }
  return ZINC_OK;
}

/* The compressed step over the runs (segs as step.c builds them); every
 * rank calls it with st, its status so far (segs unused unless ZINC_OK),
 * which is agreed before the collectives; local_scale turns a rank's
 * gradient into its mean gradient, times the clipping coefficient.
 * Returns the update's local status (the caller agrees on it). Collective
 * over the data-parallel group. */
static zinc_status adam_step(zinc_engine *e, const zinc_opt_coef *c, const zinc_opt_seg *segs,
                             zinc_status st, double local_scale) {
  onebit_adam *ob = adam_of(e);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st == ZINC_OK) {
    st = momentum_pass(e, c, segs, (float)local_scale);
    if (st != ZINC_OK)
      zinc_error_wrap(st, "1-bit Adam: momentum (step %lld)", (long long)e->step + 1);
  }
  /* local failures (this one's, the caller's) reach every rank before the
   * collectives; every rank agrees exactly once here */
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
  if (no_error_feedback()) {
    ZINC_CHECK(e->dev->ops->fill_zero(e->dev, ob->worker_error, ob->worker_bytes, e->stream));
    ZINC_CHECK(e->dev->ops->fill_zero(e->dev, ob->server_error, ob->server_bytes, e->stream));
    ZINC_CHECK(zinc_engine_sync(e));
  }
  double waited = ob->plan.comm_seconds;
  st = zinc_onebit_allreduce(&ob->plan, e->dev, e->stream, e->dp_host, e->exp_avg,
                             ob->worker_error, ob->server_error);
  e->t_comm_wait += ob->plan.comm_seconds - waited;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "1-bit Adam: compressed momentum all-reduce (step %lld)",
                           (long long)e->step + 1);
  return update_pass(e, c, segs);
}

/* ------------------------------------------------------ the table row */

static int selects(const zinc_settings *s) { return s->optimizer == ZINC_OPTIM_ONEBIT_ADAM; }

static zinc_status init(zinc_engine *e) {
  ZINC_CHECK(adam_init(e));
  onebit_adam *ob = adam_of(e);
  return ob ? zinc_onebit_norms_init(e, &ob->norms) : ZINC_OK;
}

static int local_grads(zinc_engine *e) { return onebit_local_grads(e); }

static zinc_status whole_grads(zinc_engine *e, int *done) {
  *done = onebit_local_grads(e); /* the local step reads each rank's own */
  return ZINC_OK;
}

static zinc_status norm(zinc_engine *e, double *total, int *overflow) {
  return onebit_local_grads(e)
             ? zinc_onebit_norm_agree(e, adam_of(e)->norms, "1-bit Adam", total, overflow)
             : ZINC_OK;
}

static zinc_status update(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                          int *done) {
  if (!onebit_local_grads(e))
    return st; /* the warm-up: the optimizer's exact step */
  *done = 1;
  return adam_step(e, a->c, a->segs, st, a->local_scale);
}

const zinc_reducer zinc_reducer_onebit_adam = {
    .name = "onebit_adam",
    .selects = selects,
    .sizes = adam_sizes,
    .init = init,
    .free = adam_free,
    .local_grads = local_grads,
    .whole_grads = whole_grads,
    .norm = norm,
    .update = update,
};
