/*
 * step.c — the optimizer step at the accumulation boundary.
 *
 *   1. stage 0: all-gather the reduced gradients (its all-reduce is
 *      reduce-scatter + all-gather, so the arithmetic matches stages 1-3);
 *   2. sum of squares of every owned chunk (canonical order, kernels/
 *      zinc_math.h), summed per rank in unit order, then over ranks in rank
 *      order: the same bits at every stage; inf/NaN anywhere means overflow,
 *      seen identically by every rank;
 *   3. overflow: skip — no parameter or optimizer state changes, the loss
 *      scale drops;
 *   4. scale = 1 / (loss_scale * dp_size * gradient_accumulation_steps),
 *      times the clipping coefficient when the norm exceeds
 *      gradient_clipping (DeepSpeed's max_norm / (norm + 1e-6));
 *   5. fused Adam/AdamW over the owned runs, writing the compute copy;
 *   6. all-gather updated parameters (stages 1-2; stage 3's persistent
 *      segments) and drop stage 3's gathered copies.
 *
 * Who divides by what: the trainer's loss is a mean over its micro-batch;
 * zinc sums gradients over ranks and micro-batches and divides the sum by
 * dp_size x gradient_accumulation_steps (and the loss scale) here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
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

/* In-place all-gather of every unit of the segments' buffers selected by
 * `grads` (gradient buffers at stage 0, parameter buffers at 1-2). */
static zinc_status gather_units_in_place(zinc_engine *e, int grads) {
  if (e->dp_size == 1 || e->nunits == 0)
    return ZINC_OK;
  zinc_coll *colls = NULL;
  ZINC_CHECK(zinc_calloc((void **)&colls, (size_t)e->nunits, sizeof *colls, "gather batch"));
  for (int ui = 0; ui < e->nunits; ui++) {
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
  zinc_status st = gather_batches(e, colls, e->nunits);
  free(colls);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering %s", grads ? "gradients" : "updated parameters");
  return ZINC_OK;
}

/* After the owned chunks of the parameters changed: all-gather them into
 * every rank's full copy (stages 1-2), or drop stage 3's gathered copies and
 * gather its persistent segments again. Collective over the data-parallel
 * group. */
static zinc_status gather_updated_params(zinc_engine *e) {
  if (e->cfg.stage == 1 || e->cfg.stage == 2)
    ZINC_CHECK(gather_units_in_place(e, 0));
  if (e->cfg.stage == 3) {
    ZINC_CHECK(zinc_stage3_invalidate(e));
    ZINC_CHECK(zinc_stage3_gather_persistent(e));
  }
  return ZINC_OK;
}

/* Global squared L2 norm of the gradient sum (still scaled), canonical. */
static zinc_status grad_sumsq(zinc_engine *e, double *total) {
  int r0 = e->cfg.stage == 0 ? 0 : e->dp_rank;
  int nr = e->cfg.stage == 0 ? e->dp_size : 1;
  int nchunks = e->nunits * nr;
  zinc_sumsq_chunk *chunks = NULL;
  double *partials = NULL, *per_rank = NULL;
  zinc_status st;
  ZINC_CHECK_GOTO(zinc_calloc((void **)&chunks, (size_t)nchunks + 1, sizeof *chunks, "norm"),
                  st, out);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&partials, (size_t)nchunks + 1, sizeof *partials,
                              "norm"), st, out);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&per_rank, (size_t)e->dp_size, sizeof *per_rank,
                              "norm"), st, out);
  for (int r = 0; r < nr; r++)
    for (int ui = 0; ui < e->nunits; ui++) {
      zinc_sumsq_chunk *c = &chunks[r * e->nunits + ui];
      c->data = zinc_grads_chunk(e, ui, r0 + r, &c->dtype);
      c->n = e->units[ui].chunk;
    }
  ZINC_CHECK_GOTO(e->dev->ops->sumsq(e->dev, e->stream, chunks, nchunks, partials), st, out);
  ZINC_CHECK_GOTO(zinc_engine_sync(e), st, out);
  for (int r = 0; r < nr; r++) {
    double s = 0.0;
    for (int ui = 0; ui < e->nunits; ui++)
      s += partials[r * e->nunits + ui];
    per_rank[r0 + r] = s;
  }
  if (e->cfg.stage != 0 && e->dp_size > 1) {
    double mine = per_rank[e->dp_rank];
    ZINC_CHECK_GOTO(zinc_comm_allgather(e->dp_host, &mine, per_rank, 1, ZINC_DT_F64), st, out);
  }
  *total = 0.0;
  for (int r = 0; r < e->dp_size; r++)
    *total += per_rank[r];
  st = ZINC_OK;
out:
  free(chunks);
  free(partials);
  free(per_rank);
  return st;
}

static zinc_status adam_segments(zinc_engine *e, zinc_adam_seg **out) {
  zinc_adam_seg *segs = NULL;
  ZINC_CHECK(zinc_calloc((void **)&segs, (size_t)e->nruns + 1, sizeof *segs, "optimizer runs"));
  for (int i = 0; i < e->nruns; i++) {
    const zinc_opt_run *run = &e->runs[i];
    const zinc_unit *u = &e->units[run->unit];
    const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
    int64_t in_chunk = run->unit_offset - (int64_t)run->owner * u->chunk;
    int gdt;
    const char *g = zinc_grads_chunk(e, run->unit, run->owner, &gdt);
    zinc_adam_seg *s = &segs[i];
    if (e->exp_avg) { /* in memory; with NVMe offload nvme.c points into its buffers */
      s->master = e->master ? e->master + run->opt_offset : NULL; /* NULL: below */
      s->exp_avg = e->exp_avg + run->opt_offset;
      s->exp_avg_sq = e->exp_avg_sq + run->opt_offset;
    }
    s->grad = g + (size_t)in_chunk * zinc_dt_size(gdt);
    s->grad_dtype = gdt;
    s->n = run->n;
    s->decay = run->decay;
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

/* Optimizer state in memory, parameter partition on NVMe: each run's
 * updated parameters go through a staging buffer to the swap area. */
static zinc_status adam_params_on_disk(zinc_engine *e, const zinc_adam_coef *c,
                                       zinc_adam_seg *segs) {
  size_t most = 0;
  for (int i = 0; i < e->nruns; i++)
    if ((size_t)segs[i].n * 4 > most)
      most = (size_t)segs[i].n * 4;
  void *staging = NULL;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, most, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &staging,
                                      "parameter staging"));
  zinc_status st = ZINC_OK;
  for (int i = 0; i < e->nruns && st == ZINC_OK; i++) {
    const zinc_opt_run *run = &e->runs[i];
    const zinc_unit *u = &e->units[run->unit];
    zinc_adam_seg s = segs[i];
    s.param_out = staging;
    st = e->dev->ops->adam(e->dev, e->stream, c, &s, 1);
    size_t es = zinc_dtype_size(u->dtype);
    if (st == ZINC_OK)
      st = zinc_pshard_write(e, u->shard_byte + (size_t)(run->unit_offset - (int64_t)run->owner * u->chunk) * es,
                             (size_t)s.n * es, staging);
  }
  zinc_engine_buffer_free(e, staging, most, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  return st;
}

static void fill_info(zinc_engine *e, zinc_step_info *info, int boundary, double lr) {
  info->step = e->step;
  info->boundary = boundary;
  info->grad_norm = e->last_grad_norm;
  info->loss_scale = zinc_loss_scaler_scale(&e->scaler);
  info->lr = (float)lr;
  info->micro_step = e->micro_step;
}

zinc_status zinc_step_run(zinc_engine *e, zinc_step_info *info) {
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_step: module \"%s\" is still fetched; release "
                        "every module before the step", e->modules[mi]->name);
  int boundary = zinc_grads_is_boundary_micro(e);
  double lr = zinc_lr_at(&e->cfg, e->step);
  e->micro_step++;
  if (!boundary) {
    fill_info(e, info, 0, lr);
    return ZINC_OK;
  }
  if (e->cfg.stage == 0)
    ZINC_CHECK(gather_units_in_place(e, 1));

  double total = 0.0;
  ZINC_CHECK(grad_sumsq(e, &total));
  double scale = zinc_loss_scaler_scale(&e->scaler);
  double base = 1.0 / (scale * (double)e->dp_size * (double)e->cfg.gradient_accumulation_steps);
  int overflow = !isfinite(total);
  double norm = overflow ? INFINITY : sqrt(total) * base;
  e->last_grad_norm = (float)norm;
  if (overflow) {
    zinc_loss_scaler_update(&e->scaler, 1);
    e->skipped_steps++;
    info->skipped = 1;
    zinc_log0(ZINC_LOG_INFO, "step %lld skipped: gradient overflow; loss scale now %g",
              (long long)e->step, (double)zinc_loss_scaler_scale(&e->scaler));
    fill_info(e, info, 1, lr);
    return ZINC_OK;
  }
  double coef = 1.0;
  if (e->cfg.gradient_clipping > 0 && norm > e->cfg.gradient_clipping)
    coef = e->cfg.gradient_clipping / (norm + 1e-6);

  zinc_adam_coef c;
  int adamw = e->cfg.optimizer == ZINC_OPTIM_ADAMW ? 1 : e->cfg.adam_w_mode;
  ZINC_CHECK(zinc_adam_coef_init(&c, lr, e->cfg.beta1, e->cfg.beta2, e->cfg.eps,
                                 e->cfg.weight_decay, adamw, e->cfg.bias_correction, e->step + 1,
                                 base * coef));
  zinc_adam_seg *segs = NULL;
  ZINC_CHECK(adam_segments(e, &segs));
  zinc_status st;
  if (zinc_nvme_opt_on_disk(e))
    st = zinc_nvme_step(e, &c, segs, e->nruns);
  else if (zinc_nvme_param_on_disk(e))
    st = adam_params_on_disk(e, &c, segs);
  else if (e->off.ready) /* zinc_offload_init decided: staged copies */
    st = zinc_offload_step(e, &c, segs, e->nruns);
  else
    st = e->dev->ops->adam(e->dev, e->stream, &c, segs, e->nruns);
  free(segs);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "optimizer step %lld", (long long)e->step + 1);
  /* A local failure (an NVMe read or write, a device error) must reach every
   * rank before anyone enters the gathers below, or they would wait for it. */
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));

  ZINC_CHECK(gather_updated_params(e));
  zinc_loss_scaler_update(&e->scaler, 0);
  e->step++;
  fill_info(e, info, 1, lr);
  return ZINC_OK;
}

zinc_status zinc_params_from_master(zinc_engine *e) {
  zinc_adam_seg *segs = NULL;
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
  return gather_updated_params(e);
}
