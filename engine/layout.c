/*
 * layout.c — partition math: segments, units, chunks, shard offsets and the
 * optimizer's runs (see engine.h for the picture).
 *
 * Invariants
 *  - every unit's numel is dp_size * chunk and chunk % ZINC_ALIGN_ELEMS == 0;
 *  - padding elements (between parameters, at a segment's end) are zero in
 *    every buffer and stay zero through Adam (zero grad, zero param), so they
 *    never leak into results;
 *  - nothing here depends on the stage except which chunks this rank owns.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/stage3/stage3.h"

void zinc_partition(int64_t count, int ranks, int64_t align, int64_t *chunk,
                    int64_t *padded) {
  int64_t c = (int64_t)zinc_round_up(zinc_div_up((uint64_t)count, (uint64_t)ranks),
                                     (uint64_t)align);
  *chunk = c;
  *padded = c * ranks;
}

int64_t zinc_layout_opt_offset(const zinc_engine *e, const zinc_unit *u, int r) {
  if (e->cfg.stage == 0)
    return u->full_offset + (int64_t)r * u->chunk;
  return u->shard_offset;
}

/* Segments of one module: parameters of one dtype and frozen flag, in
 * registration order. */
static zinc_status layout_segments(zinc_engine *e, zinc_module *m) {
  int64_t group = (int64_t)e->dp_size * ZINC_ALIGN_ELEMS;
  ZINC_CHECK(zinc_calloc((void **)&m->segs, (size_t)m->nparams, sizeof *m->segs,
                         "module segments"));
  m->nsegs = 0;
  for (int i = 0; i < m->nparams; i++) {
    zinc_param *p = m->params[i];
    int s = 0;
    while (s < m->nsegs && (m->segs[s].dtype != p->dtype || m->segs[s].frozen != p->frozen))
      s++;
    if (s == m->nsegs) {
      m->segs[m->nsegs].dtype = p->dtype;
      m->segs[m->nsegs++].frozen = p->frozen;
    }
    zinc_segment *seg = &m->segs[s];
    p->segment = s;
    p->seg_offset = (int64_t)zinc_round_up((uint64_t)seg->used, ZINC_ALIGN_ELEMS);
    seg->used = p->seg_offset + p->numel;
  }
  m->numel = 0;
  m->grad_bytes = 0;
  m->gather_numel = 0;
  m->gather_bytes = 0;
  for (int s = 0; s < m->nsegs; s++) {
    zinc_segment *seg = &m->segs[s];
    seg->numel = (int64_t)zinc_round_up((uint64_t)seg->used, (uint64_t)group);
    seg->persistent = e->cfg.stage == 3 &&
                      seg->used < e->cfg.stage3_param_persistence_threshold;
    m->numel += seg->numel;
    if (!seg->frozen)
      m->grad_bytes += (size_t)seg->numel * zinc_dtype_size(seg->dtype);
    if (e->cfg.stage == 3 && !seg->persistent) {
      seg->gather_offset = m->gather_bytes;
      m->gather_numel += seg->numel;
      m->gather_bytes += (size_t)seg->numel * zinc_dtype_size(seg->dtype);
    }
  }
  return ZINC_OK;
}

/* Decay flag, group and parameter of element x of a segment: those of the
 * last parameter that starts at or before x (padding after a parameter
 * inherits them; it is zero either way). Returns the end of that
 * parameter's run. */
static int64_t decay_run(const zinc_module *m, int seg, int64_t x, int *decay, int *group,
                         int *param) {
  int flag = 1, at = -1;
  *group = 0;
  int64_t end = m->segs[seg].numel;
  for (int i = 0; i < m->nparams; i++) {
    const zinc_param *p = m->params[i];
    if (p->segment != seg)
      continue;
    if (p->seg_offset <= x) {
      flag = p->decay;
      at = p->index;
      *group = p->group;
    } else {
      end = p->seg_offset;
      break;
    }
  }
  *decay = flag;
  *param = at;
  return end;
}

static zinc_status runs_add(zinc_engine *e, int *cap, zinc_opt_run run) {
  if (e->nruns > 0) {
    zinc_opt_run *last = &e->runs[e->nruns - 1];
    if (run.param < 0 && last->unit == run.unit && last->owner == run.owner &&
        last->decay == run.decay && last->group == run.group &&
        last->unit_offset + last->n == run.unit_offset &&
        last->opt_offset + last->n == run.opt_offset) {
      last->n += run.n;
      return ZINC_OK;
    }
  }
  ZINC_CHECK(zinc_grow((void **)&e->runs, cap, e->nruns + 1, sizeof *e->runs,
                       "optimizer runs"));
  e->runs[e->nruns++] = run;
  return ZINC_OK;
}

/* The optimizer's runs: every owned chunk of a trained unit, cut where the
 * decay flag or the parameter group changes; for Lamb also at every
 * parameter and every zinc_lamb_grid elements of the shard (see engine.h). */
static zinc_status layout_runs(zinc_engine *e) {
  int cap = 0;
  int lamb = e->optim.kind == ZINC_OPT_LAMB;
  int64_t grid = lamb ? zinc_lamb_grid(e) : 0;
  e->nruns = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    const zinc_unit *u = &e->units[ui];
    const zinc_module *m = e->modules[u->module];
    int r0 = e->cfg.stage == 0 ? 0 : e->dp_rank;
    int r1 = e->cfg.stage == 0 ? e->dp_size : e->dp_rank + 1;
    for (int r = r0; r < r1; r++) {
      int64_t a = (int64_t)r * u->chunk, b = a + u->chunk;
      while (a < b) {
        int decay, group, param;
        int64_t end = decay_run(m, u->segment, u->seg_offset + a, &decay, &group, &param) -
                      u->seg_offset;
        if (end > b)
          end = b;
        if (lamb) { /* the next grid point in shard coordinates */
          int64_t sx = u->shard_offset + (a - (int64_t)r * u->chunk);
          int64_t next = (sx / grid + 1) * grid - sx + a;
          if (end > next)
            end = next;
        } else {
          param = -1;
        }
        zinc_opt_run run = {.unit = ui,
                            .owner = r,
                            .opt_offset = zinc_layout_opt_offset(e, u, r) + (a - (int64_t)r * u->chunk),
                            .unit_offset = a,
                            .n = end - a,
                            .decay = decay,
                            .group = group,
                            .param = param};
        ZINC_CHECK(runs_add(e, &cap, run));
        a = end;
      }
    }
  }
  return ZINC_OK;
}

/* The parameter groups: distinct (lr scale, weight decay value) pairs of
 * the trained parameters in registration order (a parameter without decay
 * joins whichever group has its lr scale and the config's value; its runs
 * apply no decay). */
static zinc_status layout_groups(zinc_engine *e) {
  e->ngroups = 0;
  for (int i = 0; i < e->nparams; i++) {
    zinc_param *p = e->params[i];
    p->group = -1;
    if (p->frozen)
      continue;
    double wd = p->decay && p->wd >= 0 ? p->wd : e->cfg.weight_decay;
    int g = 0;
    while (g < e->ngroups && !(e->groups[g].lr_scale == p->lr_scale &&
                               e->groups[g].weight_decay == wd))
      g++;
    if (g == e->ngroups) {
      if (g == ZINC_MAX_PARAM_GROUPS)
        return zinc_error(ZINC_ERR_INVALID, "parameter \"%s.%s\" (lr scale %g, weight decay "
                          "%g) would start parameter group %d; at most ZINC_MAX_PARAM_GROUPS "
                          "(%d) distinct (lr scale, weight decay) pairs are supported",
                          p->module->name, p->name, p->lr_scale, wd, g + 1,
                          ZINC_MAX_PARAM_GROUPS);
      e->groups[g] = (zinc_param_group){.lr_scale = p->lr_scale, .weight_decay = wd};
      e->ngroups++;
    }
    p->group = g;
  }
  return ZINC_OK;
}

/* The units of module m's segments that are (frozen) or are not frozen. */
static zinc_status layout_units(zinc_engine *e, int mi, int frozen, int *cap) {
  zinc_module *m = e->modules[mi];
  for (int s = 0; s < m->nsegs; s++) {
    zinc_segment *seg = &m->segs[s];
    if (seg->frozen != frozen)
      continue;
    seg->first_unit = e->nunits;
    for (int64_t off = 0; off < seg->numel; off += e->unit_max) {
      ZINC_CHECK(zinc_grow((void **)&e->units, cap, e->nunits + 1, sizeof *e->units,
                           "partition units"));
      int64_t len = seg->numel - off < e->unit_max ? seg->numel - off : e->unit_max;
      zinc_unit *u = &e->units[e->nunits++];
      u->module = mi;
      u->segment = s;
      u->dtype = seg->dtype;
      u->seg_offset = off;
      u->numel = len;
      u->chunk = len / e->dp_size;
      u->shard_offset = e->shard_numel;
      u->shard_byte = e->shard_bytes;
      u->full_offset = u->shard_offset * e->dp_size;
      u->frozen = frozen;
      e->shard_numel += u->chunk;
      e->shard_bytes += (size_t)u->chunk * zinc_dtype_size(u->dtype);
    }
    seg->nunits = e->nunits - seg->first_unit;
    if (!frozen)
      e->train_bytes += (size_t)seg->numel * zinc_dtype_size(seg->dtype);
  }
  return ZINC_OK;
}

zinc_status zinc_layout_build(zinc_engine *e) {
  int64_t group = (int64_t)e->dp_size * ZINC_ALIGN_ELEMS;
  /* reduce_bucket_size 0 (DeepSpeed: every gradient reduced on its own)
   * leaves segments uncut: one unit per segment */
  int64_t bucket = e->cfg.reduce_bucket_size > 0 ? e->cfg.reduce_bucket_size : INT64_MAX / 2;
  e->unit_max = bucket / group * group;
  if (e->unit_max < group)
    e->unit_max = group;

  int cap = 0;
  e->nunits = 0;
  e->shard_numel = 0;
  e->shard_bytes = 0;
  e->full_bytes = 0;
  e->train_bytes = 0;
  memset(e->psi, 0, sizeof e->psi);
  memset(e->psi_frozen, 0, sizeof e->psi_frozen);
  ZINC_CHECK(layout_groups(e));
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    ZINC_CHECK(layout_segments(e, m));
    for (int i = 0; i < m->nparams; i++) {
      e->psi[m->params[i]->dtype] += m->params[i]->numel;
      if (m->params[i]->frozen)
        e->psi_frozen[m->params[i]->dtype] += m->params[i]->numel;
    }
    for (int s = 0; s < m->nsegs; s++)
      e->full_bytes += (size_t)m->segs[s].numel * zinc_dtype_size(m->segs[s].dtype);
  }
  /* trained units first, then the frozen ones (see engine.h) */
  for (int frozen = 0; frozen <= 1; frozen++) {
    for (int mi = 0; mi < e->nmodules; mi++)
      ZINC_CHECK(layout_units(e, mi, frozen, &cap));
    if (!frozen) {
      e->ntrain_units = e->nunits;
      e->train_shard_numel = e->shard_numel;
    }
  }
  e->total_numel = e->shard_numel * e->dp_size;
  e->opt_numel = e->train_shard_numel * (e->cfg.stage == 0 ? e->dp_size : 1);
  e->secondary_bytes = zinc_stage3_secondary_layout(e);
  return layout_runs(e);
}

zinc_status zinc_layout_for_each_piece(zinc_engine *e, const zinc_param *p,
                                       zinc_piece_fn fn, void *ctx) {
  const zinc_module *m = p->module;
  const zinc_segment *seg = &m->segs[p->segment];
  int64_t a = p->seg_offset, b = p->seg_offset + p->numel;
  for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
    const zinc_unit *u = &e->units[ui];
    int64_t lo = a > u->seg_offset ? a : u->seg_offset;
    int64_t hi = b < u->seg_offset + u->numel ? b : u->seg_offset + u->numel;
    if (lo >= hi)
      continue;
    lo -= u->seg_offset;
    hi -= u->seg_offset;
    for (int r = (int)(lo / u->chunk); r < e->dp_size && (int64_t)r * u->chunk < hi; r++) {
      int64_t c0 = (int64_t)r * u->chunk;
      int64_t s = lo > c0 ? lo : c0;
      int64_t t = hi < c0 + u->chunk ? hi : c0 + u->chunk;
      if (s >= t)
        continue;
      ZINC_CHECK(fn(e, u, ui, r, s - c0, u->seg_offset + s - p->seg_offset, t - s, ctx));
    }
  }
  return ZINC_OK;
}
