/*
 * step.c — the optimizer step at the accumulation boundary.
 *
 *   1. stage 0: all-gather the reduced gradients (its all-reduce is
 *      reduce-scatter + all-gather, so the arithmetic matches stages 1-3);
 *      none after OneBitAdam's freeze_step (onebit_adam.c: local gradients,
 *      the norm agreed over the ranks, its own compressed step in 5);
 *   2. sum of squares of every owned chunk (canonical order, kernels/
 *      zinc_math.h), summed per rank in unit order, then over ranks in rank
 *      order: the same bits at every stage; with model parallelism also
 *      over the model-parallel ranks, a replicated parameter counted once
 *      (zinc_param_set_replicated); inf/NaN anywhere in the whole model
 *      means overflow, seen identically by every rank;
 *   3. overflow: skip — no parameter or optimizer state changes, the loss
 *      scale drops; zinc.max_consecutive_skips skips in a row that the
 *      scale cannot cure (at min_loss_scale, or no dynamic scale) stop
 *      the engine with an error on every rank;
 *   4. scale = 1 / (loss_scale * dp_size * gradient_accumulation_steps),
 *      times the clipping coefficient when the norm exceeds
 *      gradient_clipping (DeepSpeed's max_norm / (norm + 1e-6)), and for
 *      Lamb with max_grad_norm FusedLamb's own clip of what is left;
 *   5. the fused optimizer (optimizer.type; Lamb in two passes with its
 *      per-parameter trust ratios between) over the owned runs, writing the
 *      compute copy, one coefficient per parameter group (lr x lr scale,
 *      its weight decay; lr: zinc_engine_set_lr's, or the scheduler's);
 *   6. all-gather updated parameters (stages 1-2; stage 3's persistent
 *      segments) and drop stage 3's gathered copies.
 *
 * Who divides by what: the trainer's loss is a mean over its micro-batch;
 * zinc sums gradients over ranks and micro-batches and divides the sum by
 * dp_size x gradient_accumulation_steps (and the loss scale) here, less
 * what prescale_gradients or gradient_predivide_factor divided before the
 * sum (zinc_grads_mean_base).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/exact_sum.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/pipe.h"
#include "engine/place/place.h"
#include "engine/reduce/reduce.h"
#include "engine/stage3/stage3.h"
#include "engine/step.h"
#include "engine/support.h"
#include "optim/adam.h"
#include "optim/lr_schedule.h"

/* Run a list of all-gathers in batches of about allgather_bucket_size. */
static zinc_status gather_batches(zinc_engine *e, zinc_coll *colls, int n) {
  int start = 0;
  int64_t elems = 0;
  for (int i = 0; i < n; i++) {
    elems += (int64_t)colls[i].count * e->dp_size;
    if (elems >= e->cfg.allgather_bucket_size || i == n - 1) {
      double t0 = zinc_now();
      zinc_status st = e->dp->ops->run(e->dp, colls + start, i + 1 - start);
      e->t_comm_wait += zinc_now() - t0;
      if (st != ZINC_OK)
        return st;
      start = i + 1;
      elems = 0;
    }
  }
  return ZINC_OK;
}

/* In-place all-gather of the units [0, nunits) of the segments' buffers
 * selected by `grads` (gradient buffers at stage 0, parameter buffers at
 * 1-2). */
static zinc_status gather_units_in_place(zinc_engine *e, int grads, int nunits) {
  if (e->dp_size == 1 || nunits == 0)
    return ZINC_OK;
  zinc_coll *colls = NULL;
  ZINC_CHECK(zinc_calloc((void **)&colls, (size_t)nunits, sizeof *colls, "gather batch"));
  for (int ui = 0; ui < nunits; ui++) {
    const zinc_unit *u = &e->units[ui];
    const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
    char *base = zinc_unit_ptr(grads ? seg->grad : seg->full, u);
    colls[ui] = (zinc_coll){
        .kind = ZINC_COLL_ALLGATHER,
        .send = base + (size_t)e->dp_rank * (size_t)u->chunk * zinc_dtype_size(u->dtype),
        .recv = base,
        .count = (size_t)u->chunk,
        .dtype = u->dtype};
  }
  zinc_status st = gather_batches(e, colls, nunits);
  free(colls);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering %s", grads ? "gradients" : "updated parameters");
  return ZINC_OK;
}

/* After the owned chunks of the parameters changed: all-gather them into
 * every rank's full copy (stages 1-2; the frozen units too when `frozen`),
 * or drop stage 3's gathered copies and gather its persistent segments
 * again. Collective over the data-parallel group. */
static zinc_status gather_updated_params(zinc_engine *e, int frozen) {
  if (e->cfg.stage == 1 || e->cfg.stage == 2)
    ZINC_CHECK(gather_units_in_place(e, 0, frozen ? e->nunits : e->ntrain_units));
  if (e->cfg.stage == 3) {
    ZINC_CHECK(zinc_stage3_invalidate(e));
    ZINC_CHECK(zinc_stage3_gather_persistent(e));
  }
  return ZINC_OK;
}

/* The pieces of chunk `owner` of unit ui that the norm sums: the whole
 * chunk, or with model parallelism the runs between and inside the
 * replicated parameters (rep[k] = 1 inside one), in segment order. Returns
 * the number of pieces written to out (at most 2 x replicated + 1). */
static int chunk_pieces(const zinc_engine *e, int ui, int owner, zinc_sumsq_chunk *out,
                        unsigned char *rep, const float *read) {
  const zinc_unit *u = &e->units[ui];
  int dt;
  const char *base = zinc_grads_chunk(e, ui, owner, &dt);
  if (read) /* the chunk as read from NVMe */
    base = (const char *)read;
  size_t es = zinc_dt_size(dt);
  int64_t a = u->seg_offset + (int64_t)owner * u->chunk, b = a + u->chunk, pos = a;
  int n = 0;
  const zinc_module *m = e->modules[u->module];
  for (int i = 0; e->mp_size > 1 && i < m->nparams; i++) {
    const zinc_param *p = m->params[i];
    int64_t ps = p->seg_offset, pe = p->seg_offset + p->numel;
    if (!p->replicated || p->segment != u->segment || pe <= a || ps >= b)
      continue;
    if (ps < a)
      ps = a;
    if (pe > b)
      pe = b;
    if (ps > pos) {
      out[n] = (zinc_sumsq_chunk){base + (size_t)(pos - a) * es, ps - pos, dt};
      rep[n++] = 0;
    }
    out[n] = (zinc_sumsq_chunk){base + (size_t)(ps - a) * es, pe - ps, dt};
    rep[n++] = 1;
    pos = pe;
  }
  if (pos < b || n == 0) {
    out[n] = (zinc_sumsq_chunk){base + (size_t)(pos - a) * es, b - pos, dt};
    rep[n++] = 0;
  }
  return n;
}

/* The pieces' sums of squares with the partition on NVMe (stages 2-3,
 * this rank's chunks): a unit's chunk at a time read into one host buffer
 * of the largest chunk, each piece summed whole by the device's kernel, so
 * the partials are those of the partition in memory. */
static zinc_status sumsq_on_disk(zinc_engine *e, zinc_sumsq_chunk *pieces, unsigned char *rep,
                                 double *partials, int *npieces) {
  int nu = e->ntrain_units;
  int64_t most = 1;
  for (int ui = 0; ui < nu; ui++)
    if (e->units[ui].chunk > most)
      most = e->units[ui].chunk;
  float *buf = NULL;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)most * 4, ZINC_LOC_HOST, ZINC_MEM_GRADS,
                                      (void **)&buf, "gradient norm reads"));
  zinc_status st = ZINC_OK;
  int np = 0;
  for (int ui = 0; ui < nu && st == ZINC_OK; ui++) {
    st = zinc_place_grad_read(e, e->units[ui].shard_offset, e->units[ui].chunk, buf);
    int k = chunk_pieces(e, ui, e->dp_rank, pieces + np, rep + np, buf);
    if (st == ZINC_OK)
      st = e->dev->ops->sumsq(e->dev, e->stream, pieces + np, k, partials + np);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e); /* before the buffer is read into again */
    np += k;
  }
  *npieces = np;
  zinc_engine_buffer_free(e, buf, (size_t)most * 4, ZINC_LOC_HOST, ZINC_MEM_GRADS);
  return st;
}

/* Squared L2 norm of the whole model's gradient sum (still scaled): every
 * piece's sum of squares (the device's kernel, one piece at a time) added
 * exactly (base/exact_sum.h), over this rank's pieces, the data-parallel
 * ranks, the model-parallel ranks and the pipeline stages, then rounded
 * once: the same double for any layout that has the same pieces, whatever
 * rank holds them (a pipeline of p stages equals one stage holding every
 * module). A replicated parameter counts on model-parallel rank 0 only.
 * *overflow: an inf or NaN anywhere, replicated parameters on every
 * model-parallel rank included — the same answer on every rank. Without
 * replicated parameters the pieces are the chunks. Collective over the
 * data-parallel group (stages 1-3), the model-parallel group and the
 * pipeline group. */
typedef struct {
  zinc_xsum counted;   /* the norm's terms                                 */
  zinc_xsum elsewhere; /* replicated pieces counted on mp rank 0: checked
                          for inf/NaN only                                 */
} norm_sums;
_Static_assert(sizeof(norm_sums) == ZINC_NORM_SUMS_BYTES, "the norm's message, as step.h says");

/* Every rank's sums of `c` merged into *mine (an all-gather of the bytes
 * into `all`, c->size of them; the merge is exact, so its order does not
 * matter). */
static zinc_status merge_over(zinc_comm *c, norm_sums *mine, norm_sums *all) {
  if (c->size == 1)
    return ZINC_OK;
  ZINC_CHECK(zinc_comm_allgather(c, mine, all, sizeof *mine, ZINC_DT_U8));
  memset(mine, 0, sizeof *mine);
  for (int r = 0; r < c->size; r++) {
    zinc_xsum_merge(&mine->counted, &all[r].counted);
    zinc_xsum_merge(&mine->elsewhere, &all[r].elsewhere);
  }
  return ZINC_OK;
}

static zinc_status grad_sumsq(zinc_engine *e, double *total, int *overflow) {
  int r0 = e->cfg.stage == 0 ? 0 : e->dp_rank;
  int nr = e->cfg.stage == 0 ? e->dp_size : 1;
  int most_rep = 0;
  for (int mi = 0; e->mp_size > 1 && mi < e->nmodules; mi++) {
    int k = 0;
    for (int i = 0; i < e->modules[mi]->nparams; i++)
      k += e->modules[mi]->params[i]->replicated;
    if (k > most_rep)
      most_rep = k;
  }
  int nu = e->ntrain_units; /* frozen units take no gradient */
  int cap = nu * nr * (2 * most_rep + 1);
  zinc_sumsq_chunk *pieces = NULL;
  unsigned char *rep = NULL;
  double *partials = NULL;
  norm_sums *gathered = NULL; /* the largest group's sums, gathered */
  zinc_comm *pipe = zinc_pipe_host_comm(e);
  int most = e->dp_size > e->mp_size ? e->dp_size : e->mp_size;
  most = pipe->size > most ? pipe->size : most;
  /* local: the pieces and their sums of squares (allocations, the device's
   * kernel); then every rank learns whether any failed before the gathers */
  zinc_status st = zinc_engine_host_calloc(e, (void **)&pieces, (size_t)cap + 1, sizeof *pieces,
                                           "norm pieces");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&rep, (size_t)cap + 1, 1, "norm pieces");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&partials, (size_t)cap + 1, sizeof *partials,
                                 "norm partial sums");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&gathered, (size_t)most, sizeof *gathered,
                                 "norm partial sums");
  int npieces = 0;
  if (st == ZINC_OK && zinc_place_grad_location(e) == ZINC_LOC_NVME) {
    st = sumsq_on_disk(e, pieces, rep, partials, &npieces);
  } else if (st == ZINC_OK) {
    for (int r = 0; r < nr; r++)
      for (int ui = 0; ui < nu; ui++)
        npieces += chunk_pieces(e, ui, r0 + r, pieces + npieces, rep + npieces, NULL);
    st = e->dev->ops->sumsq(e->dev, e->stream, pieces, npieces, partials);
  }
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "gradient norm");
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->world, st), st, out);
  /* stage 0 holds every rank's chunks and adds them all here; stages 1-3
   * add their own and merge over the data-parallel group */
  norm_sums sums;
  memset(&sums, 0, sizeof sums);
  for (int k = 0; k < npieces; k++)
    zinc_xsum_add(rep[k] && e->mp_rank != 0 ? &sums.elsewhere : &sums.counted, partials[k]);
  if (e->cfg.stage != 0)
    ZINC_CHECK_GOTO(merge_over(e->dp_host, &sums, gathered), st, out);
  ZINC_CHECK_GOTO(merge_over(e->mp_host, &sums, gathered), st, out);
  ZINC_CHECK_GOTO(merge_over(pipe, &sums, gathered), st, out);
  *total = zinc_xsum_value(&sums.counted);
  *overflow = !isfinite(*total) || !isfinite(zinc_xsum_value(&sums.elsewhere));
  st = ZINC_OK;
out:
  free(pieces);
  free(rep);
  free(partials);
  free(gathered);
  return st;
}

static zinc_status adam_segments(zinc_engine *e, zinc_opt_seg **out) {
  zinc_opt_seg *segs = NULL;
  ZINC_CHECK(zinc_engine_host_calloc(e, (void **)&segs, (size_t)e->nruns + 1, sizeof *segs,
                                     "optimizer runs"));
  for (int i = 0; i < e->nruns; i++) {
    const zinc_opt_run *run = &e->runs[i];
    const zinc_unit *u = &e->units[run->unit];
    const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
    int64_t in_chunk = run->unit_offset - (int64_t)run->owner * u->chunk;
    int gdt;
    const char *g = zinc_grads_chunk(e, run->unit, run->owner, &gdt);
    zinc_opt_seg *s = &segs[i];
    /* in memory; with NVMe offload nvme_step.c points into its buffers */
    /* the arrays in their dtypes (fp32, or bf16 with the bf16 section) */
    s->master_dtype = zinc_master_dtype(e);
    s->state_dtype = zinc_state_dtype(e);
    zinc_opt_seg base = {.master = e->master, .exp_avg = e->exp_avg,
                         .exp_avg_sq = e->exp_avg_sq, .master_dtype = s->master_dtype,
                         .state_dtype = s->state_dtype};
    zinc_opt_seg_slots_at(s, &base, run->opt_offset); /* master NULL: below */
    /* stochastic rounding's counter: the element's place in its segment,
     * the segment's in the model; the same whatever the stage, the data-
     * parallel size or the placement (bitwise across stages) */
    s->global_offset = ((int64_t)u->module << 40) + ((int64_t)u->segment << 36) +
                       u->seg_offset + run->unit_offset;
    s->grad = g ? g + (size_t)in_chunk * zinc_dt_size(gdt) : NULL; /* NULL: on NVMe */
    s->grad_dtype = gdt;
    s->n = run->n;
    s->decay = run->decay;
    s->coef = run->group;
    s->param_dtype = u->dtype;
    if (e->cfg.stage == 3)
      s->param_out = e->param_shard ? (char *)e->param_shard + u->shard_byte +
                                          (size_t)in_chunk * zinc_dtype_size(u->dtype)
                                    : NULL; /* on NVMe: written through zinc_pshard_write */
    else
      s->param_out = zinc_unit_ptr(seg->full, u) +
                     (size_t)run->unit_offset * zinc_dtype_size(u->dtype);
    if (e->master_in_params) { /* the parameter is the master: update it in place */
      s->master = s->param_out;
      s->param_out = NULL;
    }
  }
  *out = segs;
  return ZINC_OK;
}

void zinc_opt_from_config(zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  zinc_opt_hparams h = {0};
  switch (s->optimizer) {
  case ZINC_OPTIM_LAMB: h.kind = ZINC_OPT_LAMB; break;
  case ZINC_OPTIM_LION: h.kind = ZINC_OPT_LION; break;
  case ZINC_OPTIM_ADAGRAD: h.kind = ZINC_OPT_ADAGRAD; break;
  case ZINC_OPTIM_SGD: h.kind = ZINC_OPT_SGD; break;
  default: h.kind = ZINC_OPT_ADAM; break;
  }
  /* OneBitAdam's exact steps: DeepSpeed's adam.py, no bias correction,
   * the decay added to the update (onebit_adam.c) */
  int onebit = s->optimizer == ZINC_OPTIM_ONEBIT_ADAM;
  h.lr = s->lr;
  h.beta1 = s->beta1;
  h.beta2 = s->beta2;
  h.eps = s->eps;
  h.weight_decay = s->weight_decay;
  h.adamw = s->optimizer == ZINC_OPTIM_ADAMW || onebit ? 1 : s->adam_w_mode;
  h.bias_correction = onebit ? 0 : s->bias_correction;
  h.momentum = zinc_reduce_owns_momentum(e) ? 0.0 : s->momentum; /* sent by the method */
  h.dampening = s->dampening;
  h.nesterov = s->nesterov;
  h.min_coeff = s->min_coeff;
  h.max_coeff = s->max_coeff;
  e->optim = h;
  e->opt_slots = zinc_opt_state_slots(&h);
}

/* Lamb between its passes: every parameter's squared weight and update
 * norms, from the UPDATE pass's per-run sums (norms[2i], norms[2i+1]), in
 * one order at every stage: per owner rank the runs of a parameter in
 * shard order, then the owners in rank order (at stage 0 every rank holds
 * every owner's runs; at stages 1-3 one all-gather over the data-parallel
 * group brings them). Sets each segment's clamped trust ratio. Collective
 * over the data-parallel group at stages 1-3. */
static zinc_status lamb_ratios(zinc_engine *e, const zinc_opt_coef *c, zinc_opt_seg *segs,
                               const double *norms) {
  int np = e->nparams, owners = e->dp_size;
  int local_owners = e->cfg.stage == 0 ? owners : 1;
  double *all = NULL, *mine = NULL;
  float *ratio = NULL;
  size_t per = 2 * (size_t)np;
  zinc_status st = zinc_engine_host_calloc(e, (void **)&all, per * (size_t)owners + 1,
                                           sizeof *all, "Lamb norms");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&mine, per * (size_t)local_owners + 1,
                                 sizeof *mine, "Lamb norms");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&ratio, (size_t)np + 1, sizeof *ratio,
                                 "Lamb trust ratios");
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->dp_host, st), st, out);
  for (int i = 0; i < e->nruns; i++) {
    const zinc_opt_run *r = &e->runs[i];
    double *at = mine + per * (size_t)(e->cfg.stage == 0 ? r->owner : 0) + 2 * (size_t)r->param;
    at[0] += norms[2 * i];
    at[1] += norms[2 * i + 1];
  }
  if (e->cfg.stage == 0 || e->dp_size == 1)
    memcpy(all, mine, per * (size_t)local_owners * sizeof *all);
  else
    ZINC_CHECK_GOTO(zinc_comm_allgather(e->dp_host, mine, all, per, ZINC_DT_F64), st, out);
  for (int p = 0; p < np; p++) {
    double w = 0.0, u = 0.0;
    for (int r = 0; r < owners; r++) {
      w += all[per * (size_t)r + 2 * (size_t)p];
      u += all[per * (size_t)r + 2 * (size_t)p + 1];
    }
    ratio[p] = zinc_lamb_ratio(w, u, c->min_coeff, c->max_coeff);
  }
  for (int i = 0; i < e->nruns; i++)
    segs[i].lamb_ratio = ratio[e->runs[i].param];
out:
  free(all);
  free(mine);
  free(ratio);
  return st;
}

/* Lamb's UPDATE pass over the runs in memory, then the trust ratios (a
 * collective); the caller runs the APPLY pass. Failures are agreed over
 * the data-parallel group before the collective. */
static zinc_status lamb_update(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                               zinc_opt_seg *segs) {
  double *norms = NULL;
  zinc_opt_seg *upd = NULL;
  zinc_status st = zinc_engine_host_calloc(e, (void **)&norms, 2 * (size_t)e->nruns + 1,
                                           sizeof *norms, "Lamb norms");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&upd, (size_t)e->nruns + 1, sizeof *upd,
                                 "optimizer runs");
  if (st == ZINC_OK) {
    memcpy(upd, segs, (size_t)e->nruns * sizeof *upd);
    for (int i = 0; i < e->nruns; i++)
      upd[i].param_out = NULL; /* the weights move in APPLY */
    st = zinc_place_optim(e, c, ncoef, upd, e->nruns, ZINC_OPT_PASS_UPDATE, norms);
  }
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "Lamb moments (step %lld)", (long long)e->step + 1);
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st == ZINC_OK)
    st = lamb_ratios(e, c, segs, norms);
  free(norms);
  free(upd);
  return st;
}

/* After a skipped step: every rank saw the same overflow (the norm is
 * summed over every rank), so every rank counts the same skips and stops
 * at the same step without a further collective. */
static zinc_status skip_limit(zinc_engine *e) {
  int64_t stuck = e->scaler.stuck_skips, limit = e->cfg.max_consecutive_skips;
  if (limit <= 0 || stuck < limit)
    return ZINC_OK;
  double scale = zinc_loss_scaler_scale(&e->scaler);
  if (e->scaler.dynamic)
    return zinc_error(ZINC_ERR_INVALID,
                      "%lld consecutive steps skipped for inf/NaN gradients with the loss "
                      "scale at fp16.min_loss_scale (loss scale %g); training cannot go on "
                      "(zinc.max_consecutive_skips = %lld). Look for inf/NaN in the loss or "
                      "the data, lower the learning rate, or reload the last checkpoint in a "
                      "new engine", (long long)stuck, scale, (long long)limit);
  return zinc_error(ZINC_ERR_INVALID,
                    "%lld consecutive steps skipped for inf/NaN gradients (%s, loss scale %g "
                    "cannot be lowered); training cannot go on (zinc.max_consecutive_skips = "
                    "%lld). Look for inf/NaN in the loss or the data, lower the learning rate, "
                    "or reload the last checkpoint in a new engine", (long long)stuck,
                    e->cfg.fp16_enabled == 1 ? "fp16 with a static fp16.loss_scale"
                    : e->cfg.bf16_enabled == 1 ? "bf16" : "fp32",
                    scale, (long long)limit);
}

static void fill_info(zinc_engine *e, zinc_step_info *info, int boundary, double lr) {
  info->step = e->step;
  info->boundary = boundary;
  info->grad_norm = e->last_grad_norm;
  info->loss_scale = zinc_loss_scaler_scale(&e->scaler);
  info->lr = (float)lr;
  e->last_lr = lr;
  info->micro_step = e->micro_step;
}

zinc_status zinc_step_run(zinc_engine *e, zinc_step_info *info) {
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_step: module \"%s\" is still fetched; release "
                        "every module before the step", e->modules[mi]->name);
  int boundary = zinc_grads_is_boundary_micro(e);
  double lr = e->lr_override >= 0 ? e->lr_override : zinc_lr_at(&e->cfg, e->step);
  e->micro_step++;
  if (!boundary) {
    fill_info(e, info, 0, lr);
    return ZINC_OK;
  }
  /* stage 0: the whole gradient on every rank, by the method (or kept
   * rank-local for its own step), otherwise by the all-gather */
  if (e->cfg.stage == 0) {
    int whole = 0;
    ZINC_CHECK(zinc_reduce_whole_grads(e, &whole));
    if (!whole)
      ZINC_CHECK(gather_units_in_place(e, 1, e->ntrain_units));
  }

  double total = 0.0;
  int overflow = 0;
  ZINC_CHECK(grad_sumsq(e, &total, &overflow));
  ZINC_CHECK(zinc_reduce_norm(e, &total, &overflow)); /* the method's part, agreed */
  double base = zinc_grads_mean_base(e); /* 1 / (scale x dp_size x gas), grads.c */
  double norm = overflow ? INFINITY : sqrt(total) * base;
  e->last_grad_norm = (float)norm;
  if (overflow) {
    zinc_loss_scaler_update(&e->scaler, 1);
    e->skipped_steps++;
    info->skipped = 1;
    fill_info(e, info, 1, lr);
    zinc_log0(ZINC_LOG_WARN, "step %lld skipped: inf/NaN in the gradients; loss scale now %g",
              (long long)e->step + 1, (double)zinc_loss_scaler_scale(&e->scaler));
    return skip_limit(e);
  }
  double coef = 1.0;
  if (e->cfg.gradient_clipping > 0 && norm > e->cfg.gradient_clipping &&
      !zinc_reduce_clips_locally(e)) /* (or the method clipped locally) */
    coef = e->cfg.gradient_clipping / (norm + 1e-6);
  /* Lamb's max_grad_norm, as DeepSpeed's FusedLamb: given the norm and the
   * scale the engine divides by (gradient_clipping's included), it clips
   * the norm those leave, dividing once more by (norm' + 1e-6) / max when
   * that exceeds 1. The same agreed norm on every rank: every stage alike. */
  if (e->cfg.optimizer == ZINC_OPTIM_LAMB && e->cfg.lamb_max_grad_norm > 0) {
    double lamb_clip = (norm * coef + 1e-6) / e->cfg.lamb_max_grad_norm;
    if (lamb_clip > 1)
      coef /= lamb_clip;
  }

  zinc_opt_coef c[ZINC_MAX_PARAM_GROUPS]; /* one per parameter group */
  int ncoef = e->ngroups > 0 ? e->ngroups : 1; /* 0: every parameter frozen */
  for (int g = 0; g < ncoef; g++) {
    zinc_opt_hparams h = e->optim;
    h.lr = e->ngroups > 0 ? lr * e->groups[g].lr_scale : lr;
    if (e->ngroups > 0)
      h.weight_decay = e->groups[g].weight_decay;
    /* OneCycle cycles beta1 (and sets beta2 0.99) */
    zinc_betas_at(&e->cfg, e->step, &h.beta1, &h.beta2);
    ZINC_CHECK(zinc_opt_coef_init(&c[g], &h, e->step + 1, base * coef));
    /* bf16 master weights or states: how a value is stored (zinc.bf16_rounding) */
    c[g].bf16_rounding = e->cfg.bf16_rounding;
    c[g].rounding_seed = (uint64_t)e->cfg.bf16_rounding_seed;
    c[g].rounding_step = e->step + 1;
  }
  zinc_opt_seg *segs = NULL;
  zinc_status st = adam_segments(e, &segs);
  if (st == ZINC_OK && zinc_opt_two_pass(c[0].kind)) {
    /* Lamb: moments and norms, trust ratios; APPLY below */
    st = zinc_engine_agree(e, e->dp_host, st);
    if (st == ZINC_OK)
      st = lamb_update(e, c, ncoef, segs);
    if (st != ZINC_OK) {
      free(segs);
      return st; /* agreed: every rank has it */
    }
  }
  /* the method's own communication and update, on every rank whatever st */
  zinc_reduce_update_args ua = {c, ncoef, segs, lr, base * coef, base * coef * (double)e->dp_size};
  int done = 0;
  st = zinc_reduce_update(e, &ua, st, &done);
  if (done || st != ZINC_OK)
    ; /* agreed below, with the update's own failures */
  else /* wherever the state lives (place/place.h) */
    st = zinc_place_optim(e, c, ncoef, segs, e->nruns,
                          zinc_opt_two_pass(c[0].kind) ? ZINC_OPT_PASS_APPLY
                                                       : ZINC_OPT_PASS_UPDATE, NULL);
  free(segs);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "optimizer step %lld", (long long)e->step + 1);
  /* A local failure (an NVMe read or write, a device error) must reach every
   * rank before anyone enters the gathers below, or they would wait for it. */
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));

  ZINC_CHECK(gather_updated_params(e, 0));
  zinc_loss_scaler_update(&e->scaler, 0);
  e->step++;
  ZINC_CHECK(zinc_reduce_step_end(e));
  fill_info(e, info, 1, lr);
  return ZINC_OK;
}

zinc_status zinc_params_from_master(zinc_engine *e) {
  zinc_opt_seg *segs = NULL;
  enum { PIECE = 1 << 20 };
  float *master = NULL;
  void *cast = NULL;
  zinc_status st = adam_segments(e, &segs);
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&master, PIECE, 4, "parameter refresh");
  if (st == ZINC_OK)
    st = zinc_calloc(&cast, PIECE, 4, "parameter refresh");
  /* with the master in the parameter memory the owned chunks are current */
  for (int i = 0; i < e->nruns && st == ZINC_OK && !e->master_in_params; i++) {
    const zinc_opt_run *run = &e->runs[i];
    const zinc_unit *u = &e->units[run->unit];
    size_t es = zinc_dtype_size(u->dtype);
    for (int64_t off = 0; off < run->n && st == ZINC_OK; off += PIECE) {
      int64_t n = run->n - off < PIECE ? run->n - off : PIECE;
      st = zinc_opt_read(e, 0, run->opt_offset + off, n, master);
      for (int64_t j = 0; st == ZINC_OK && j < n; j++)
        zinc_store_from_f32(cast, j, u->dtype, master[j]);
      if (st != ZINC_OK)
        break;
      if (segs[i].param_out)
        st = e->dev->ops->copy(e->dev, (char *)segs[i].param_out + (size_t)off * es, cast,
                               (size_t)n * es, e->stream);
      else /* the stage-3 partition on NVMe */
        st = zinc_pshard_write(e, u->shard_byte + (size_t)(run->unit_offset + off -
                                                           (int64_t)run->owner * u->chunk) * es,
                               (size_t)n * es, cast);
    }
  }
  free(segs);
  free(master);
  free(cast);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "refreshing parameters from the fp32 master");
  /* the refresh is local (a device copy, an NVMe write): agree before the
   * gathers so that a rank that failed leaves no peer inside them */
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
  return gather_updated_params(e, 1);
}
