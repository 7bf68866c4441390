/*
 * state.c — full-state access for trainers and tools (DeepSpeed's
 * safe_get_full_* / safe_set_full_* family): the full fp32 value, reduced
 * gradient, exp_avg or exp_avg_sq of one parameter, from any stage.
 *
 * A parameter's elements are spread over (unit, rank) pieces (layout.c).
 * Reading: each rank contributes the pieces it owns, in the piece order
 * every rank enumerates identically, through one all-gatherv; every rank
 * then has the whole tensor. Writing: every rank passes the same full
 * tensor and keeps its own pieces (and its copy of the compute parameter).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/place/place.h"
#include "engine/support.h"

typedef struct {
  zinc_state_kind kind;
  float *dst;             /* (numel) host, read */
  const float *src;       /* (numel) host, write */
  float *local;           /* this rank's pieces, in piece order */
  size_t *counts;         /* per rank, elements */
  size_t *cursor;         /* per rank, running offset */
  int pass;               /* 0 count, 1 copy out, 2 scatter in */
  float *gathered;        /* all ranks' pieces (displs by rank) */
  size_t *displs;
  void *scratch;
} state_ctx;

static int owns(const zinc_engine *e, zinc_state_kind kind, int r) {
  if (kind == ZINC_STATE_GRAD)
    return r == e->dp_rank;
  return e->cfg.stage == 0 || r == e->dp_rank;
}

static int state_array_index(zinc_state_kind kind) {
  return kind == ZINC_STATE_PARAM ? 0 : kind == ZINC_STATE_EXP_AVG ? 1 : 2;
}

static zinc_status read_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                              int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  state_ctx *c = vctx;
  int who = r; /* chunk r's owner contributes it (at stage 0 every rank has it) */
  if (c->pass == 0) {
    c->counts[who] += (size_t)len;
    return ZINC_OK;
  }
  if (c->pass == 1) {
    if (who != e->dp_rank)
      return ZINC_OK;
    float *out = c->local + c->cursor[who];
    c->cursor[who] += (size_t)len;
    if (c->kind == ZINC_STATE_GRAD) {
      int dt;
      const char *g = zinc_grads_chunk(e, ui, r, &dt);
      /* device -> host, then to f32 and averaged */
      size_t es = zinc_dt_size(dt);
      if (!g) { /* the partition on NVMe (f32) */
        ZINC_CHECK(zinc_place_grad_read(e, u->shard_offset + chunk_off, len, c->scratch));
      } else {
        ZINC_CHECK(e->dev->ops->copy(e->dev, c->scratch, g + (size_t)chunk_off * es,
                                     (size_t)len * es, e->stream));
        ZINC_CHECK(zinc_engine_sync(e));
      }
      double base = zinc_grads_mean_base(e);
      for (int64_t i = 0; i < len; i++)
        out[i] = (float)(zinc_load_as_f32(c->scratch, i, dt) * base);
      return ZINC_OK;
    }
    return zinc_opt_read(e, state_array_index(c->kind), zinc_layout_opt_offset(e, u, r) + chunk_off,
                         len, out);
  }
  /* pass 2: place rank who's piece into dst */
  memcpy(c->dst + param_off, c->gathered + c->displs[who] + c->cursor[who], (size_t)len * 4);
  c->cursor[who] += (size_t)len;
  return ZINC_OK;
}

static zinc_status check_args(zinc_engine *e, zinc_param *p, zinc_state_kind kind,
                              const void *buf, const char *what) {
  ZINC_CHECK(zinc_engine_usable(e, what));
  if (!p || p->engine != e)
    return zinc_error(ZINC_ERR_INVALID, "%s: parameter is NULL or belongs to another engine",
                      what);
  if (!buf)
    return zinc_error(ZINC_ERR_INVALID, "%s(\"%s.%s\"): buffer is NULL", what,
                      p->module->name, p->name);
  if ((unsigned)kind > ZINC_STATE_EXP_AVG_SQ)
    return zinc_error(ZINC_ERR_INVALID, "%s: unknown state kind %d", what, (int)kind);
  int slot = kind == ZINC_STATE_EXP_AVG ? ZINC_OPT_SLOT_EXP_AVG
             : kind == ZINC_STATE_EXP_AVG_SQ ? ZINC_OPT_SLOT_EXP_AVG_SQ : 0;
  if (slot && !(e->opt_slots & slot))
    return zinc_error(ZINC_ERR_INVALID, "%s(\"%s.%s\"): optimizer \"%s\" keeps no %s (its "
                      "state: optim/optimizer.h)", what, p->module->name, p->name,
                      zinc_opt_kind_str(e->optim.kind),
                      kind == ZINC_STATE_EXP_AVG ? "exp_avg" : "exp_avg_sq");
  return ZINC_OK;
}

zinc_status zinc_param_get_full(zinc_engine *e, zinc_param *p, zinc_state_kind kind,
                                float *dst) {
  ZINC_CHECK(check_args(e, p, kind, dst, "zinc_param_get_full"));
  int n = e->dp_size;
  state_ctx c = {.kind = kind, .dst = dst};
  /* local: the buffers and this rank's pieces; agreed before the gather so
   * that a rank that failed leaves no peer inside it */
  zinc_status st = zinc_engine_host_calloc(e, (void **)&c.counts, (size_t)n, sizeof(size_t),
                                           "zinc_param_get_full counts");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&c.cursor, (size_t)n, sizeof(size_t),
                                 "zinc_param_get_full cursors");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&c.displs, (size_t)n, sizeof(size_t),
                                 "zinc_param_get_full offsets");
  if (st == ZINC_OK)
    st = zinc_layout_for_each_piece(e, p, read_piece, &c);
  size_t total = 0;
  for (int r = 0; r < n && st == ZINC_OK; r++) {
    c.displs[r] = total;
    total += c.counts[r];
  }
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&c.local, c.counts[e->dp_rank] + 1, 4,
                                 "zinc_param_get_full local values");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, (void **)&c.gathered, total + 1, 4,
                                 "zinc_param_get_full gathered values");
  if (st == ZINC_OK)
    st = zinc_engine_host_calloc(e, &c.scratch, (size_t)p->numel + 1, 4,
                                 "zinc_param_get_full scratch");
  c.pass = 1;
  if (st == ZINC_OK)
    st = zinc_layout_for_each_piece(e, p, read_piece, &c);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "zinc_param_get_full(\"%s.%s\")", p->module->name, p->name);
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->dp_host, st), st, out);
  ZINC_CHECK_GOTO(zinc_comm_allgatherv(e->dp_host, c.local, c.counts[e->dp_rank], c.gathered,
                                       c.counts, c.displs, ZINC_F32), st, out);
  memset(c.cursor, 0, (size_t)n * sizeof(size_t));
  c.pass = 2;
  ZINC_CHECK_GOTO(zinc_layout_for_each_piece(e, p, read_piece, &c), st, out);
  st = ZINC_OK;
out:
  free(c.counts);
  free(c.cursor);
  free(c.displs);
  free(c.local);
  free(c.gathered);
  free(c.scratch);
  return st;
}

static zinc_status write_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                               int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  state_ctx *c = vctx;
  if (!owns(e, c->kind, r))
    return ZINC_OK;
  ZINC_CHECK(zinc_opt_write(e, state_array_index(c->kind),
                            zinc_layout_opt_offset(e, u, r) + chunk_off, len, c->src + param_off));
  if (c->kind == ZINC_STATE_PARAM) /* the stage-3 partition's copy */
    ZINC_CHECK(zinc_put_owned_piece(e, u, r, chunk_off, c->src + param_off, len, 0, c->scratch));
  return ZINC_OK;
}

zinc_status zinc_param_set_full(zinc_engine *e, zinc_param *p, zinc_state_kind kind,
                                const float *src) {
  ZINC_CHECK(check_args(e, p, kind, src, "zinc_param_set_full"));
  if (kind == ZINC_STATE_GRAD)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_full(\"%s.%s\"): the gradient cannot "
                      "be set; the backward pass produces it", p->module->name, p->name);
  state_ctx c = {.kind = kind, .src = src};
  ZINC_CHECK(zinc_calloc(&c.scratch, (size_t)p->numel + 1, 4, "state"));
  if (kind == ZINC_STATE_PARAM) /* hpZ: the module's next gather reads the shards */
    p->module->secondary = ZINC_SECONDARY_STALE;
  zinc_status st = zinc_layout_for_each_piece(e, p, write_piece, &c);
  const zinc_segment *seg = &p->module->segs[p->segment];
  if (st == ZINC_OK && kind == ZINC_STATE_PARAM && seg->full)
    st = zinc_engine_put(e, (char *)seg->full + (size_t)p->seg_offset * zinc_dtype_size(p->dtype),
                         p->dtype, src, p->numel, c.scratch);
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  free(c.scratch);
  return st;
}
