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
 * (local_grads); on every other step they stay this rank's
 * own, the norm and the inf/NaN check are summed over the ranks
 * (zoadam_norm), so every rank skips the same steps.
 *
 * The compressed all-reduce C is engine/reduce/onebit.h's (DeepSpeed's
 * NcclBackend.compressed_allreduce for every trained parameter at once, one
 * segment and one scale per parameter, its formulas and padding there):
 * worker signs through one all-to-all-v, the worker scales through one
 * all-gather, the server signs and scales through one all-gather. Wire
 * bytes per rank per C (the comms logger's closed form, onebit.h), B =
 * sum over parameters of padded(n) / N / 8:
 *   (N - 1) (2 B + 8 nparams);
 * plus, on every step whose gradients stay rank-local, the all-gather of
 * two doubles that agrees the norm and the inf/NaN flag: 16 (N - 1); and
 * nothing else on the frozen phase's local steps.
 * With one rank C is the identity (DeepSpeed skips its momentum update on
 * the compressed steps there; zinc applies the gradient).
 * Arithmetic per element in double, the state stored in f32 (DeepSpeed's
 * fp32 tensors).
 *
 * State (ZINC_MEM_OPTIM; checkpointed through engine/checkpoint/mstate.h,
 * restored bitwise at the same layout — DeepSpeed resets the errors on
 * load): the engine's master / exp_avg / exp_avg_sq (stage 0: every
 * element on every rank; in the shards, loaded and resharded as every
 * optimizer's), and here
 *   u             (opt_numel) f32, the momentum accumulator, stage-0 index
 *   worker_error  onebit.h's, padded per parameter
 *   server_error  onebit.h's, this rank's server chunks
 *   lrs           (ZINC_MAX_PARAM_GROUPS) f64, host: sum of lr since the
 *                 last sync per parameter group (not a function of s)
 * all four reset to zero by any other load (the local steps since the
 * loaded parameters then start a sync interval of their own: u and lrs
 * agree); and, registered beside them as rank copies, this rank's whole
 * master and exp_avg (the ranks' own between syncs; the shards hold each
 * chunk's owner's), given back only by a load at the same layout. The
 * schedule's counters are a function of s (recomputed after a load).
 * ZINC_ZOADAM_NO_ERROR_FEEDBACK=1 (docs/environment.md) zeroes both errors
 * before every C: the broken setting the GPT gap test must catch.
 * Scratch (ZINC_MEM_BUFFERS): what C reduces (opt_numel f32, stage-0
 * index); onebit.h's plan keeps its own host wire buffers.
 * The cpu device only: the loops below run on the host, each parameter
 * split over the cpu device's threads (element by element: the same bits
 * with any number of threads).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/threadpool.h"
#include "device/device_cpu.h"
#include "engine/engine.h"
#include "engine/reduce/methods.h"
#include "engine/reduce/onebit.h"
#include "engine/support.h"
#include "optim/lr_schedule.h"

typedef struct {
  const zinc_param *p;
  int64_t n;          /* elements */
  int64_t opt;        /* first element in master / m / v / u / x */
} zo_param;

typedef struct {
  int64_t step;       /* the step these counters are the state before */
  int64_t var_interval, var_counter, local_interval, local_counter;
} zo_sched;

/* Its state, behind e->rd->priv. */
typedef struct zinc_zoadam {
  zo_param *params;
  int np;
  zinc_onebit_plan plan; /* one segment per parameter, offsets into x */
  float *u;           /* (opt_numel) */
  float *werr;        /* (plan.worker_error_elems) */
  float *serr;        /* (plan.server_error_elems) */
  double *lrs;        /* (ZINC_MAX_PARAM_GROUPS) host */
  float *x;           /* (opt_numel) scratch: what C reduces, in place */
  zo_sched sched;
  double *norms;      /* (2 N) host: the norm agreement's (methods.h) */
} zinc_zoadam;

static zinc_zoadam *zoadam_of(const zinc_engine *e) { return e->rd->priv; }

/* The trained parameters, each one run of stage 0's optimizer index. */
static zinc_status plan_params(const zinc_engine *e, zinc_zoadam *z) {
  int np = 0;
  for (int i = 0; i < e->nparams; i++)
    np += !e->params[i]->frozen && e->params[i]->numel > 0;
  ZINC_CHECK(zinc_calloc((void **)&z->params, (size_t)np + 1, sizeof *z->params,
                         "0/1 Adam parameter plan"));
  z->np = 0;
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
      return zinc_error(ZINC_ERR_UNSUPPORTED, "0/1 Adam: parameter \"%s\" is not one run of "
                        "the stage-0 optimizer state", p->name);
    zo_param *q = &z->params[z->np++];
    q->p = p;
    q->n = p->numel;
    q->opt = u0->full_offset + (p->seg_offset - u0->seg_offset);
  }
  return ZINC_OK;
}

/* The engine memory 0/1 Adam adds: state (u and both errors) and scratch
 * (x), in bytes. */
static void zoadam_bytes(const zinc_engine *e, uint64_t *state, uint64_t *scratch) {
  uint64_t werr = 0, serr = 0;
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    if (p->frozen || p->numel == 0)
      continue;
    int64_t padded = zinc_onebit_padded(p->numel, e->dp_size);
    werr += (uint64_t)padded;
    serr += (uint64_t)(padded / e->dp_size);
  }
  *state = 4 * ((uint64_t)e->opt_numel + werr + serr);
  *scratch = 4 * (uint64_t)e->opt_numel;
}

/* The row's sizes (the registry and layout only). */
static void zoadam_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (e->cfg.optimizer != ZINC_OPTIM_ZERO_ONE_ADAM)
    return;
  uint64_t state, scratch;
  zoadam_bytes(e, &state, &scratch);
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] += state;
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] += scratch;
  bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] += ZINC_MAX_PARAM_GROUPS * sizeof(double);
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

/* 1 when the coming step keeps the gradients rank-local (no all-reduce by
 * the engine): the compressed and local steps over several ranks. */
static int zoadam_local_grads(zinc_engine *e) {
  if (!zoadam_of(e) || e->dp_size < 2)
    return 0;
  int64_t s = e->step + 1;
  const zo_sched *k = sched_at(zoadam_of(e), &e->cfg, s);
  return frozen_at(&e->cfg, s) || s % k->var_interval != 0;
}

/* ---------------------------------------------------------------- init */

static void zoadam_free(zinc_engine *e) {
  zinc_zoadam *z = zoadam_of(e);
  if (!z)
    return;
  zinc_engine_buffer_free(e, z->u, (size_t)e->opt_numel * 4, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->werr, z->plan.worker_error_bytes, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->serr, z->plan.server_error_bytes, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->lrs, ZINC_MAX_PARAM_GROUPS * sizeof(double), ZINC_LOC_HOST,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->x, (size_t)e->opt_numel * 4, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_onebit_plan_free(&z->plan);
  free(z->params);
  free(z->norms);
  free(z);
  e->rd->priv = NULL;
}

/* An engine buffer of `bytes`, zeroed (memory the host reads: the cpu
 * device). */
static zinc_status alloc_zeroed(zinc_engine *e, size_t bytes, int loc, int cat, void **out,
                                const char *what) {
  ZINC_CHECK(zinc_engine_buffer_alloc(e, bytes, loc, cat, out, what));
  memset(*out, 0, bytes);
  return ZINC_OK;
}

/* Its state, buffers and registered method state (after layout); the
 * norm agreement's buffer is the row's init's. */
static zinc_status zoadam_init(zinc_engine *e) {
  const zinc_settings *c = &e->cfg;
  if (c->optimizer != ZINC_OPTIM_ZERO_ONE_ADAM)
    return ZINC_OK;
  if (c->stage != 0) /* the config refuses it; an engine made another way too */
    return zinc_error(ZINC_ERR_CONFIG, "optimizer.type \"ZeroOneAdam\" at ZeRO stage %d: 0/1 "
                      "Adam keeps and all-reduces the whole optimizer state on every rank; "
                      "set zero_optimization.stage to 0", c->stage);
  if (e->dev->ops->is_gpu)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "optimizer.type \"ZeroOneAdam\" on the %s device: "
                      "zinc's 0/1 Adam runs on the cpu device only so far; use \"Adam\" there "
                      "or the cpu device", e->dev->ops->name);
  zinc_zoadam *z = NULL;
  ZINC_CHECK(zinc_calloc((void **)&z, 1, sizeof *z, "0/1 Adam state"));
  e->rd->priv = z;
  ZINC_CHECK(plan_params(e, z));
  zinc_onebit_seg *segs = NULL;
  ZINC_CHECK(zinc_calloc((void **)&segs, (size_t)z->np + 1, sizeof *segs, "0/1 Adam segments"));
  for (int i = 0; i < z->np; i++)
    segs[i] = (zinc_onebit_seg){z->params[i].opt, z->params[i].n};
  zinc_status st = z->np > 0 ? zinc_onebit_plan_init(&z->plan, segs, z->np, e->dp_size,
                                                     e->dp_rank)
                             : ZINC_OK;
  free(segs);
  ZINC_CHECK(st);
  size_t opt_bytes = (size_t)e->opt_numel * 4;
  ZINC_CHECK(alloc_zeroed(e, opt_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM, (void **)&z->u,
                          "0/1 Adam momentum accumulator"));
  ZINC_CHECK(alloc_zeroed(e, z->plan.worker_error_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->werr, "0/1 Adam worker error"));
  ZINC_CHECK(alloc_zeroed(e, z->plan.server_error_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->serr, "0/1 Adam server error"));
  ZINC_CHECK(alloc_zeroed(e, ZINC_MAX_PARAM_GROUPS * sizeof(double), ZINC_LOC_HOST,
                          ZINC_MEM_OPTIM, (void **)&z->lrs, "0/1 Adam lr sums"));
  ZINC_CHECK(alloc_zeroed(e, opt_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, (void **)&z->x,
                          "0/1 Adam compress buffer"));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.momentum_accumulator", z->u, opt_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.worker_error", z->werr,
                                  z->plan.worker_error_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.server_error", z->serr,
                                  z->plan.server_error_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "zoadam.lrs", z->lrs,
                                  ZINC_MAX_PARAM_GROUPS * sizeof(double), 1));
  /* Between syncs every rank's parameters and momentum are its own; the
   * shards of a checkpoint keep each chunk's owner's values (DeepSpeed
   * keeps rank 0's), which every other load gets. So that a resume at the
   * same layout continues bit for bit whatever the step, this rank's
   * whole copy is kept beside the state: not the method's state, the
   * engine's arrays, given back only then (mstate.h). (The variance is the
   * same on every rank.) */
  ZINC_CHECK(zinc_mstate_register_ex(e, "zoadam.master",
                                     e->master_in_params ? e->param_full : (void *)e->master,
                                     e->master_in_params ? e->full_bytes
                                                         : (size_t)e->opt_numel * 4,
                                     0, ZINC_MSTATE_RANK_COPY, NULL));
  ZINC_CHECK(zinc_mstate_register_ex(e, "zoadam.exp_avg", e->exp_avg, opt_bytes, 0,
                                     ZINC_MSTATE_RANK_COPY, NULL));
  zinc_log0(ZINC_LOG_INFO, "0/1 Adam: compressed communication of %d parameters, %zu bytes "
            "of signs per rank and all-reduce, var_freeze_step %lld", z->np,
            z->plan.bits_bytes, (long long)c->var_freeze_step);
  if (zinc_env_flag("ZINC_ZOADAM_NO_ERROR_FEEDBACK", 0))
    zinc_log0(ZINC_LOG_WARN, "ZINC_ZOADAM_NO_ERROR_FEEDBACK: 0/1 Adam's error buffers are "
              "zeroed before every compressed all-reduce (a deliberately broken setting for "
              "tests)");
  return ZINC_OK;
}

/* C (the header) of the parameters' runs of z->x, in place. Collective
 * over the data-parallel group (nothing with one rank). */
static zinc_status compressed_allreduce(zinc_engine *e, zinc_zoadam *z) {
  if (e->dp_size < 2 || z->np == 0)
    return ZINC_OK;
  if (zinc_env_flag("ZINC_ZOADAM_NO_ERROR_FEEDBACK", 0)) { /* the broken setting of tests */
    memset(z->werr, 0, z->plan.worker_error_bytes);
    memset(z->serr, 0, z->plan.server_error_bytes);
  }
  double waited = z->plan.comm_seconds; /* the time inside its collectives */
  zinc_status st = zinc_onebit_allreduce(&z->plan, e->dev, e->stream, e->dp_host, z->x, z->werr,
                                         z->serr);
  e->t_comm_wait += z->plan.comm_seconds - waited;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "0/1 Adam's compressed all-reduce");
  return ZINC_OK;
}

/* ---------------------------------------------------------------- step */

/* On a rank-local step: the gradient norm's sum of squares and the
 * inf/NaN flag agreed over the data-parallel ranks (collective);
 * otherwise a no-op. */
static zinc_status zoadam_norm(zinc_engine *e, double *total, int *overflow) {
  if (!zoadam_local_grads(e))
    return ZINC_OK;
  /* each rank's own gradients: an inf/NaN on any rank skips the step on
   * every rank (onebit_adam.c) */
  return zinc_onebit_norm_agree(e, zoadam_of(e)->norms, "0/1 Adam", total, overflow);
}

typedef struct {
  double lr, wd, b1, b2, eps;
} zo_coef;

/* The master (f32) of parameter q. */
static float *master_of(const zinc_engine *e, const zo_param *q) {
  if (e->master_in_params)
    return (float *)q->p->module->segs[q->p->segment].full + q->p->seg_offset;
  return (float *)e->master + q->opt;
}

/* One pass of the update over elements [begin, end) of one parameter:
 * every element on its own, so the cpu device's threads split a
 * parameter with the same bits as one thread. */
enum { ZO_GRAD, ZO_STEP, ZO_UNDO, ZO_SYNC, ZO_COPY };

typedef struct {
  const zinc_engine *e;
  const zinc_zoadam *z;
  const zo_param *q;
  const zo_coef *c;
  int pass, frozen, full, compressed;
  double gscale, wd, lrs;
} zo_job;

static void zo_part(void *ctx, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const zo_job *jb = ctx;
  const zo_param *q = jb->q;
  const zo_coef *c = jb->c;
  const zinc_segment *seg = &q->p->module->segs[q->p->segment];
  float *p = master_of(jb->e, q), *m = (float *)jb->e->exp_avg + q->opt, *v = (float *)jb->e->exp_avg_sq + q->opt;
  float *u = jb->z->u + q->opt, *y = jb->z->x + q->opt;
  for (int64_t j = begin; j < end; j++) {
    switch (jb->pass) {
    case ZO_GRAD:
      y[j] = (float)((double)zinc_load_as_f32(seg->grad, q->p->seg_offset + j, seg->dtype) *
                     jb->gscale);
      break;
    case ZO_STEP: {
      double g = jb->compressed ? (double)y[j]
                                : (double)zinc_load_as_f32(seg->grad, q->p->seg_offset + j,
                                                           seg->dtype) * jb->gscale;
      if (jb->full)
        v[j] = (float)(c->b2 * v[j] + (1.0 - c->b2) * g * g);
      m[j] = (float)(c->b1 * m[j] + (1.0 - c->b1) * g);
      double d = (double)m[j] / (sqrt((double)v[j]) + c->eps) + jb->wd * p[j];
      p[j] = (float)((double)p[j] - c->lr * d);
      if (jb->frozen)
        u[j] = (float)((double)u[j] - c->lr * d);
      break;
    }
    case ZO_UNDO:
      p[j] = (float)((double)p[j] - (double)u[j]);
      y[j] = (float)((double)u[j] * (sqrt((double)v[j]) + c->eps));
      break;
    case ZO_SYNC:
      m[j] = (float)(-(double)y[j] / jb->lrs);
      p[j] = (float)((double)p[j] + (double)y[j] / (sqrt((double)v[j]) + c->eps));
      u[j] = 0.0f;
      break;
    default: /* ZO_COPY: the compute copy from the master */
      zinc_store_from_f32(seg->full, q->p->seg_offset + j, seg->dtype, p[j]);
      break;
    }
  }
}

/* Pass `pass` over every parameter, each split over the threads. */
static void zo_pass(const zinc_engine *e, zo_job *jb, const zo_coef *co, int pass) {
  zinc_threadpool *pool = zinc_device_cpu_pool(e->dev);
  jb->pass = pass;
  for (int i = 0; i < jb->z->np; i++) {
    jb->q = &jb->z->params[i];
    jb->c = &co[jb->q->p->group];
    jb->wd = jb->q->p->decay ? jb->c->wd : 0.0;
    jb->lrs = jb->z->lrs[jb->q->p->group];
    zinc_threadpool_for(pool, jb->q->n, 1024, zo_part, jb);
  }
}

/* 0/1 Adam's communication and update of step e->step + 1 (lr before the
 * group scales; grad_scale step.c's 1 / (loss scale x dp_size x
 * accumulation)). Collective over the data-parallel group. */
static zinc_status zoadam_update(zinc_engine *e, double lr, double grad_scale) {
  zinc_zoadam *z = zoadam_of(e);
  const zinc_settings *cfg = &e->cfg;
  int64_t s = e->step + 1;
  const zo_sched *k = sched_at(z, cfg, s);
  int frozen = frozen_at(cfg, s), full = !frozen && s % k->var_interval == 0;
  int sync = frozen && s % k->local_interval == 0;
  int n = e->dp_size;
  double b1, b2;
  zinc_betas_at(cfg, e->step, &b1, &b2);
  zo_coef co[ZINC_MAX_PARAM_GROUPS];
  for (int g = 0; g < e->ngroups; g++)
    co[g] = (zo_coef){lr * e->groups[g].lr_scale, e->groups[g].weight_decay, b1, b2, cfg->eps};
  /* local gradients are this rank's sum over its micro-batches: no
   * division by the ranks */
  zo_job jb = {.e = e, .z = z, .frozen = frozen, .full = full,
               .compressed = !frozen && !full && n > 1,
               .gscale = zoadam_local_grads(e) ? grad_scale * n : grad_scale};
  zinc_status st = ZINC_OK;
  if (jb.compressed) { /* the compressed gradient */
    zo_pass(e, &jb, co, ZO_GRAD);
    st = compressed_allreduce(e, z);
  }
  if (st == ZINC_OK)
    zo_pass(e, &jb, co, ZO_STEP);
  if (st == ZINC_OK && frozen)
    for (int g = 0; g < e->ngroups; g++)
      z->lrs[g] += co[g].lr;
  if (st == ZINC_OK && sync) {
    /* undo the local steps, all-reduce the accumulated momentum in the
     * variance's scale, and take the averaged step */
    zo_pass(e, &jb, co, ZO_UNDO);
    st = compressed_allreduce(e, z);
    if (st == ZINC_OK) {
      zo_pass(e, &jb, co, ZO_SYNC);
      memset(z->lrs, 0, ZINC_MAX_PARAM_GROUPS * sizeof(double));
    }
  }
  if (st == ZINC_OK && !e->master_in_params)
    zo_pass(e, &jb, co, ZO_COPY);
  if (st == ZINC_OK && !frozen && s == cfg->var_freeze_step + 1) {
    /* the last variance step: the errors carried gradients, from now on
     * they carry accumulated momenta */
    memset(z->werr, 0, z->plan.worker_error_bytes);
    memset(z->serr, 0, z->plan.server_error_bytes);
  }
  if (st == ZINC_OK)
    sched_advance(cfg, &z->sched);
  return st;
}

/* ------------------------------------------------------ the table row */

static int selects(const zinc_settings *s) { return s->optimizer == ZINC_OPTIM_ZERO_ONE_ADAM; }

static zinc_status init(zinc_engine *e) {
  ZINC_CHECK(zoadam_init(e));
  zinc_zoadam *z = zoadam_of(e);
  return z ? zinc_onebit_norms_init(e, &z->norms) : ZINC_OK;
}

static void release(zinc_engine *e) {
  zoadam_free(e);
}

static int local_grads(zinc_engine *e) { return zoadam_local_grads(e); }

static zinc_status whole_grads(zinc_engine *e, int *done) {
  *done = zoadam_local_grads(e); /* the local step reads each rank's own */
  return ZINC_OK;
}

/* Its own communication and update, on every rank whatever st (it reads
 * no segs); a failure before it is agreed after its collectives. */
static zinc_status update(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                          int *done) {
  if (!zoadam_of(e))
    return st;
  *done = 1;
  zinc_status ust = zoadam_update(e, a->lr, a->grad_scale);
  return st == ZINC_OK ? ust : st;
}

const zinc_reducer zinc_reducer_zoadam = {
    .name = "zoadam",
    .selects = selects,
    .cpu_only = "optimizer.type \"ZeroOneAdam\"",
    .sizes = zoadam_sizes,
    .init = init,
    .free = release,
    .local_grads = local_grads,
    .whole_grads = whole_grads,
    .norm = zoadam_norm,
    .update = update,
};
