/*
 * onebit_lamb.c — 1-bit LAMB (optimizer.type "OneBitLamb") at ZeRO stage
 * 0: DeepSpeed's OnebitLamb (deepspeed/runtime/fp16/onebit/lamb.py; Li et
 * al., "1-bit LAMB: Communication Efficient Large-Scale Large-Batch
 * Training with LAMB's Convergence Speed", arXiv:2104.06069), its
 * compressed all-reduce engine/reduce/onebit.h's.
 *
 * Step s (1-based: e->step + 1; a skipped step does not count), per
 * trained parameter (norms over the parameter's elements), g the gradient
 * unscaled (and averaged over the ranks where the engine reduces it), lr
 * and wd the parameter group's (wd 0 without decay):
 *
 *   warm-up (s <= freeze_step): the engine all-reduces the gradients;
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *     at s == freeze_step: v_fresh = v
 *     d = m / (sqrt(v) + eps) + wd p
 *     c = clamp(||p|| / ||d||, min_coeff, max_coeff)  (1 when a norm is 0)
 *     when c != 1: coeff_freeze = coeff_beta coeff_freeze + (1 - coeff_beta) c
 *     p -= lr c d
 *   compression (s >= freeze_step + 1): gradients rank-local;
 *     at the first such step, per parameter: scaling = mean over the
 *       parameters of rms(m) / rms(m)  (rms = ||m|| / sqrt(n): one scale
 *       for the whole model's momentum)
 *     m_last = m;  m = (b1 m + (1 - b1) g) scaling
 *     every parameter's m, concatenated, through ONE segment of the
 *       compressed all-reduce C (one scale for the whole model)
 *     m = m / scaling;  r = (m - b1 m_last) / (1 - b1)
 *     v_fresh = b2 v_fresh + (1 - b2) r^2
 *     u0 = m / (sqrt(v) + eps);  d = u0 + wd p
 *     f = max over elements of (sqrt(v) + eps) / (sqrt(v_fresh) + eps)
 *     with wd > 0: q = min(1, ||u0|| / ||d||);  f = f q + (1 - q)
 *     f clamped to [factor_min, factor_max], then to
 *       [last (1 - factor_threshold), last (1 + factor_threshold)];
 *     last = f;  p -= lr coeff_freeze f d
 *   no bias correction (DeepSpeed's has none), eps outside the root.
 *
 * Wire bytes per rank of a compression step, B = padded(sum n) / (8 N):
 *   (N - 1) (2 B + 8)   (one segment), plus 16 (N - 1) for the norm's
 *   agreement; warm-up steps are the plain stage-0 all-reduce.
 * With one rank C is the identity.
 *
 * State (every rank; method state through engine/checkpoint/mstate.h,
 * given back bitwise by a load at the same layout; another load resets
 * what depends on the layout):
 *   v_fresh        (opt_numel) f32, stage-0 optimizer index; reset to the
 *                  loaded v (as at the freeze)
 *   worker_error, server_error   onebit.h's, one segment of sum n; reset
 *                  to zero (as DeepSpeed's load)
 *   coeff          (4 nparams) f64, host: coeff_freeze, last factor,
 *                  scaling, and whether scaling is set; the same on every
 *                  rank and layout, so restored at any world size (as
 *                  DeepSpeed keeps them in its state dict); reset as at
 *                  the start by a weights-only load
 *   and, beside them, this rank's master and exp_avg (the parameters are
 *   the same on every rank here, but m_last / scaling make the momentum's
 *   bits a rank's own only through C's identical output: kept for a
 *   bitwise resume as 0/1 Adam's are), the engine's arrays, which every
 *   other load takes from the shards.
 * ZINC_ONEBIT_LAMB_NO_ERROR_FEEDBACK=1 (docs/environment.md) zeroes both
 * errors before every C: the broken setting the GPT gap test must catch.
 * Scratch: the concatenated momentum (sum n f32) and m_last (opt_numel).
 * The cpu device only (the loops run on the host).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "engine/engine.h"
#include "engine/reduce/methods.h"
#include "engine/reduce/onebit.h"
#include "engine/support.h"
#include "optim/lr_schedule.h"

typedef struct {
  const zinc_param *p;
  int64_t n;
  int64_t opt;        /* first element in master / m / v / v_fresh */
  int64_t flat;       /* first element in the concatenated momentum */
} lb_param;

/* Its state, behind e->rd->priv. */
struct zinc_onebit_lamb {
  lb_param *params;
  int np;
  int64_t flat_n;     /* sum of n */
  zinc_onebit_plan plan; /* one segment: [0, flat_n) of flat */
  float *v_fresh;     /* (opt_numel) */
  float *werr, *serr;
  double *coeff;      /* (4 np) host: coeff_freeze, last factor, scaling, set */
  float *flat;        /* (flat_n) scratch */
  float *m_last;      /* (opt_numel) scratch */
  double *norms;      /* (2 N) host: the norm agreement's (methods.h) */
};

static struct zinc_onebit_lamb *lamb_of(const zinc_engine *e) { return e->rd->priv; }

static int lamb_on(const zinc_engine *e) {
  return e->cfg.optimizer == ZINC_OPTIM_ONEBIT_LAMB;
}

static int compressing(const zinc_engine *e) { return e->step + 1 > e->cfg.freeze_step; }

/* 1 when the coming step keeps the gradients rank-local: the compressed
 * steps over several ranks. */
static int lamb_local_grads(const zinc_engine *e) {
  return lamb_of(e) && e->dp_size > 1 && compressing(e);
}

static int64_t trained_numel(const zinc_engine *e, int *np) {
  int64_t total = 0;
  *np = 0;
  for (int i = 0; i < e->nparams; i++)
    if (!e->params[i]->frozen && e->params[i]->numel > 0) {
      total += e->params[i]->numel;
      (*np)++;
    }
  return total;
}

/* The row's sizes (the registry and layout only). */
static void lamb_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (!lamb_on(e))
    return;
  int np;
  int64_t n = trained_numel(e, &np);
  int64_t padded = n > 0 ? zinc_onebit_padded(n, e->dp_size) : 0;
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] +=
      4 * ((uint64_t)e->opt_numel + (uint64_t)padded + (uint64_t)(padded / e->dp_size));
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] += 4 * ((uint64_t)n + (uint64_t)e->opt_numel);
  bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] += 4 * (uint64_t)np * sizeof(double);
}

static void lamb_free(zinc_engine *e) {
  struct zinc_onebit_lamb *z = lamb_of(e);
  if (!z)
    return;
  size_t ob = (size_t)e->opt_numel * 4;
  zinc_engine_buffer_free(e, z->v_fresh, ob, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->werr, z->plan.worker_error_bytes, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->serr, z->plan.server_error_bytes, ZINC_LOC_DEVICE,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->coeff, 4 * (size_t)z->np * sizeof(double), ZINC_LOC_HOST,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, z->flat, (size_t)z->flat_n * 4, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, z->m_last, ob, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  zinc_onebit_plan_free(&z->plan);
  free(z->params);
  free(z->norms);
  free(z);
  e->rd->priv = NULL;
}

static zinc_status alloc_zeroed(zinc_engine *e, size_t bytes, int loc, int cat, void **out,
                                const char *what) {
  ZINC_CHECK(zinc_engine_buffer_alloc(e, bytes, loc, cat, out, what));
  memset(*out, 0, bytes);
  return ZINC_OK;
}

/* Resets for a load that does not give the state back as saved (mstate.h):
 * the coefficients as at the start (the warm-up's mean 0, the last factor
 * 1, no scaling yet: it is taken again from the loaded momentum at the
 * next compression step); the fresh variance as at the freeze, the loaded
 * frozen variance. */
static zinc_status coefficients_reset(zinc_engine *e, void *ptr, size_t bytes) {
  double *k = ptr;
  memset(ptr, 0, bytes);
  for (int i = 0; i < lamb_of(e)->np; i++)
    k[4 * i + 1] = 1.0;
  return ZINC_OK;
}

static zinc_status fresh_variance_reset(zinc_engine *e, void *ptr, size_t bytes) {
  memcpy(ptr, e->exp_avg_sq, bytes);
  return ZINC_OK;
}

/* Its state, buffers and registered method state (after layout); the
 * norm agreement's buffer is the row's init's. */
static zinc_status lamb_init(zinc_engine *e) {
  const zinc_settings *c = &e->cfg;
  if (!lamb_on(e))
    return ZINC_OK;
  if (c->stage != 0)
    return zinc_error(ZINC_ERR_CONFIG, "optimizer.type \"OneBitLamb\" at ZeRO stage %d: 1-bit "
                      "LAMB keeps and all-reduces the whole momentum on every rank; set "
                      "zero_optimization.stage to 0", c->stage);
  if (e->dev->ops->is_gpu)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "optimizer.type \"OneBitLamb\" on the %s device: "
                      "zinc's 1-bit LAMB runs on the cpu device only so far", e->dev->ops->name);
  struct zinc_onebit_lamb *z = NULL;
  ZINC_CHECK(zinc_calloc((void **)&z, 1, sizeof *z, "1-bit LAMB state"));
  e->rd->priv = z;
  int np;
  z->flat_n = trained_numel(e, &np);
  ZINC_CHECK(zinc_calloc((void **)&z->params, (size_t)np + 1, sizeof *z->params,
                         "1-bit LAMB parameters"));
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
      if (u0 && u->seg_offset < p->seg_offset + p->numel &&
          u->seg_offset + u->numel > p->seg_offset &&
          u->full_offset - u->seg_offset != u0->full_offset - u0->seg_offset)
        return zinc_error(ZINC_ERR_UNSUPPORTED, "1-bit LAMB: parameter \"%s\" is not one run "
                          "of the stage-0 optimizer state", p->name);
    }
    lb_param *q = &z->params[z->np];
    q->p = p;
    q->n = p->numel;
    q->opt = u0->full_offset + (p->seg_offset - u0->seg_offset);
    q->flat = z->np > 0 ? z->params[z->np - 1].flat + z->params[z->np - 1].n : 0;
    z->np++;
  }
  if (z->flat_n > 0) {
    zinc_onebit_seg one = {0, z->flat_n};
    ZINC_CHECK(zinc_onebit_plan_init(&z->plan, &one, 1, e->dp_size, e->dp_rank));
  }
  size_t ob = (size_t)e->opt_numel * 4;
  ZINC_CHECK(alloc_zeroed(e, ob, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM, (void **)&z->v_fresh,
                          "1-bit LAMB fresh variance"));
  ZINC_CHECK(alloc_zeroed(e, z->plan.worker_error_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->werr, "1-bit LAMB worker error"));
  ZINC_CHECK(alloc_zeroed(e, z->plan.server_error_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OPTIM,
                          (void **)&z->serr, "1-bit LAMB server error"));
  ZINC_CHECK(alloc_zeroed(e, 4 * (size_t)z->np * sizeof(double), ZINC_LOC_HOST, ZINC_MEM_OPTIM,
                          (void **)&z->coeff, "1-bit LAMB coefficients"));
  ZINC_CHECK(alloc_zeroed(e, (size_t)z->flat_n * 4, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                          (void **)&z->flat, "1-bit LAMB momentum buffer"));
  ZINC_CHECK(alloc_zeroed(e, ob, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, (void **)&z->m_last,
                          "1-bit LAMB previous momentum"));
  for (int i = 0; i < z->np; i++)
    z->coeff[4 * i + 1] = 1.0; /* last factor */
  ZINC_CHECK(zinc_mstate_register_ex(e, "onebit_lamb.exp_avg_sq_fresh", z->v_fresh, ob, 0,
                                     ZINC_MSTATE_RANK, fresh_variance_reset));
  ZINC_CHECK(zinc_mstate_register(e, "onebit_lamb.worker_error", z->werr,
                                  z->plan.worker_error_bytes, 0));
  ZINC_CHECK(zinc_mstate_register(e, "onebit_lamb.server_error", z->serr,
                                  z->plan.server_error_bytes, 0));
  ZINC_CHECK(zinc_mstate_register_ex(e, "onebit_lamb.coefficients", z->coeff,
                                     4 * (size_t)z->np * sizeof(double), 1,
                                     ZINC_MSTATE_REPLICATED, coefficients_reset));
  /* not the method's state: this rank's copies of the engine's arrays,
   * given back only at the same layout (mstate.h) */
  ZINC_CHECK(zinc_mstate_register_ex(e, "onebit_lamb.master",
                                     e->master_in_params ? e->param_full : (void *)e->master,
                                     e->master_in_params ? e->full_bytes : ob, 0,
                                     ZINC_MSTATE_RANK_COPY, NULL));
  ZINC_CHECK(zinc_mstate_register_ex(e, "onebit_lamb.exp_avg", e->exp_avg, ob, 0,
                                     ZINC_MSTATE_RANK_COPY, NULL));
  zinc_log0(ZINC_LOG_INFO, "1-bit LAMB: compressed communication of %lld elements in one "
            "segment after freeze_step %lld", (long long)z->flat_n, (long long)c->freeze_step);
  return ZINC_OK;
}

/* On a rank-local step: the norm and overflow agreed (collective). */
static zinc_status lamb_norm(zinc_engine *e, double *total, int *overflow) {
  if (!lamb_local_grads(e))
    return ZINC_OK;
  return zinc_onebit_norm_agree(e, lamb_of(e)->norms, "1-bit LAMB", total, overflow);
}

static float *master_of(const zinc_engine *e, const lb_param *q) {
  if (e->master_in_params)
    return (float *)q->p->module->segs[q->p->segment].full + q->p->seg_offset;
  return (float *)e->master + q->opt;
}

static double grad_at(const lb_param *q, int64_t j, double scale) {
  const zinc_segment *seg = &q->p->module->segs[q->p->segment];
  return (double)zinc_load_as_f32(seg->grad, q->p->seg_offset + j, seg->dtype) * scale;
}

/* 1-bit LAMB's communication and update of step e->step + 1, as 0/1
 * Adam's (zoadam.c). Collective over the data-parallel group. */
static zinc_status lamb_update(zinc_engine *e, double lr_base, double grad_scale) {
  struct zinc_onebit_lamb *z = lamb_of(e);
  const zinc_settings *cfg = &e->cfg;
  int64_t s = e->step + 1;
  int comp = compressing(e), n = e->dp_size;
  double gscale = lamb_local_grads(e) ? grad_scale * n : grad_scale;
  double b1, b2;
  zinc_betas_at(cfg, e->step, &b1, &b2);
  double eps = cfg->eps;
  zinc_status st = ZINC_OK;
  if (comp) {
    if (z->np > 0 && z->coeff[3] == 0.0) { /* the first compression step: the scalings */
      double sum = 0.0;
      for (int i = 0; i < z->np; i++) {
        const float *m = (float *)e->exp_avg + z->params[i].opt;
        double sq = 0.0;
        for (int64_t j = 0; j < z->params[i].n; j++)
          sq += (double)m[j] * m[j];
        z->coeff[4 * i + 2] = sqrt(sq) / sqrt((double)z->params[i].n);
        sum += z->coeff[4 * i + 2];
      }
      double united = sum / z->np;
      for (int i = 0; i < z->np; i++) {
        z->coeff[4 * i + 2] = united / z->coeff[4 * i + 2];
        z->coeff[4 * i + 3] = 1.0;
      }
    }
    for (int i = 0; i < z->np; i++) {
      const lb_param *q = &z->params[i];
      float *m = (float *)e->exp_avg + q->opt, *last = z->m_last + q->opt, *f = z->flat + q->flat;
      double scaling = z->coeff[4 * i + 2];
      for (int64_t j = 0; j < q->n; j++) {
        last[j] = m[j];
        float mj = (float)(b1 * m[j] + (1.0 - b1) * grad_at(q, j, gscale));
        f[j] = (float)((double)mj * scaling);
      }
    }
    if (zinc_env_flag("ZINC_ONEBIT_LAMB_NO_ERROR_FEEDBACK", 0)) { /* tests' broken setting */
      memset(z->werr, 0, z->plan.worker_error_bytes);
      memset(z->serr, 0, z->plan.server_error_bytes);
    }
    double waited = z->plan.comm_seconds; /* the time inside its collectives */
    if (n > 1 && z->flat_n > 0)
      st = zinc_onebit_allreduce(&z->plan, e->dev, e->stream, e->dp_host, z->flat, z->werr,
                                 z->serr);
    e->t_comm_wait += z->plan.comm_seconds - waited;
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "1-bit LAMB's compressed all-reduce");
  }
  for (int i = 0; i < z->np; i++) {
    const lb_param *q = &z->params[i];
    const zinc_param_group *g = &e->groups[q->p->group];
    double lr = lr_base * g->lr_scale, wd = q->p->decay ? g->weight_decay : 0.0;
    float *p = master_of(e, q), *m = (float *)e->exp_avg + q->opt, *v = (float *)e->exp_avg_sq + q->opt;
    float *vf = z->v_fresh + q->opt;
    double *k = z->coeff + 4 * i;
    double wsq = 0.0, dsq = 0.0, u0sq = 0.0, fmax = -INFINITY;
    if (!comp) {
      for (int64_t j = 0; j < q->n; j++) {
        double gj = grad_at(q, j, gscale);
        m[j] = (float)(b1 * m[j] + (1.0 - b1) * gj);
        v[j] = (float)(b2 * v[j] + (1.0 - b2) * gj * gj);
        if (s == cfg->freeze_step)
          vf[j] = v[j];
        double d = (double)m[j] / (sqrt((double)v[j]) + eps) + wd * p[j];
        wsq += (double)p[j] * p[j];
        dsq += d * d;
      }
      double c = 1.0;
      if (wsq != 0.0 && dsq != 0.0) {
        c = sqrt(wsq) / sqrt(dsq);
        c = c > cfg->max_coeff ? cfg->max_coeff : c < cfg->min_coeff ? cfg->min_coeff : c;
      }
      if (c != 1.0)
        k[0] = cfg->coeff_beta * k[0] + (1.0 - cfg->coeff_beta) * c;
      for (int64_t j = 0; j < q->n; j++) {
        double d = (double)m[j] / (sqrt((double)v[j]) + eps) + wd * p[j];
        p[j] = (float)((double)p[j] - lr * c * d);
      }
      continue;
    }
    const float *f = z->flat + q->flat, *last = z->m_last + q->opt;
    double scaling = k[2];
    for (int64_t j = 0; j < q->n; j++) {
      m[j] = (float)((double)f[j] / scaling);
      double r = ((double)m[j] - (double)last[j] * b1) / (1.0 - b1);
      vf[j] = (float)(b2 * vf[j] + (1.0 - b2) * r * r);
      double den = sqrt((double)v[j]) + eps, u0 = (double)m[j] / den, d = u0 + wd * p[j];
      double ratio = den / (sqrt((double)vf[j]) + eps);
      u0sq += u0 * u0;
      dsq += d * d;
      if (ratio > fmax)
        fmax = ratio;
    }
    double factor = fmax;
    if (wd > 0.0) {
      double qr = sqrt(u0sq) / sqrt(dsq);
      qr = qr < 1.0 ? qr : 1.0;
      factor = factor * qr + (1.0 - qr);
    }
    factor = factor > cfg->factor_max ? cfg->factor_max : factor;
    factor = factor < cfg->factor_min ? cfg->factor_min : factor;
    factor = factor > k[1] * (1.0 + cfg->factor_threshold) ? k[1] * (1.0 + cfg->factor_threshold)
                                                          : factor;
    factor = factor < k[1] * (1.0 - cfg->factor_threshold) ? k[1] * (1.0 - cfg->factor_threshold)
                                                          : factor;
    k[1] = factor;
    double coeff = k[0] * factor;
    for (int64_t j = 0; j < q->n; j++) {
      double d = (double)m[j] / (sqrt((double)v[j]) + eps) + wd * p[j];
      p[j] = (float)((double)p[j] - lr * coeff * d);
    }
  }
  for (int i = 0; !e->master_in_params && i < z->np; i++) {
    const lb_param *q = &z->params[i];
    const zinc_segment *seg = &q->p->module->segs[q->p->segment];
    const float *p = master_of(e, q);
    for (int64_t j = 0; j < q->n; j++)
      zinc_store_from_f32(seg->full, q->p->seg_offset + j, seg->dtype, p[j]);
  }
  return ZINC_OK;
}

/* ------------------------------------------------------ the table row */

static int selects(const zinc_settings *s) { return s->optimizer == ZINC_OPTIM_ONEBIT_LAMB; }

static zinc_status init(zinc_engine *e) {
  ZINC_CHECK(lamb_init(e));
  struct zinc_onebit_lamb *z = lamb_of(e);
  return z ? zinc_onebit_norms_init(e, &z->norms) : ZINC_OK;
}

static void release(zinc_engine *e) {
  lamb_free(e);
}

static int local_grads(zinc_engine *e) { return lamb_local_grads(e); }

static zinc_status whole_grads(zinc_engine *e, int *done) {
  *done = lamb_local_grads(e); /* the local step reads each rank's own */
  return ZINC_OK;
}

/* Its own communication and update, on every rank whatever st (it reads
 * no segs); a failure before it is agreed after its collectives. */
static zinc_status update(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                          int *done) {
  if (!lamb_of(e))
    return st;
  *done = 1;
  zinc_status ust = lamb_update(e, a->lr, a->grad_scale);
  return st == ZINC_OK ? ust : st;
}

const zinc_reducer zinc_reducer_onebit_lamb = {
    .name = "onebit_lamb",
    .selects = selects,
    .cpu_only = "optimizer.type \"OneBitLamb\"",
    .sizes = lamb_sizes,
    .init = init,
    .free = release,
    .local_grads = local_grads,
    .whole_grads = whole_grads,
    .norm = lamb_norm,
    .update = update,
};
