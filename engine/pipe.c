/*
 * pipe.c — pipeline parallelism in the engine (include/zinc.h, "Pipeline
 * parallelism"; engine/pipe.h): the grid of this engine's world, agreed
 * before any group is split; the pipeline group; the queries; the
 * transfers between neighbouring stages, which run on the group's comm
 * (comm.h, "Transfers": the mpi comm on the cpu device, an NCCL comm
 * bootstrapped over it on a GPU), one comm request per handle.
 *
 * Invariants:
 *  - every rank passed the same pipeline and model-parallel sizes (agreed
 *    over the world before the grid is made), so every rank makes the same
 *    grid, and a size that does not factor the world fails every rank
 *    alike, before any split;
 *  - the pipeline group holds one rank per stage, ordered by world rank,
 *    hence by stage: its comm rank is the stage, and a transfer's peer is
 *    the neighbouring stage's number;
 *  - every handle started and not yet waited for is on the pipe's list,
 *    so that destroy drops what the trainer never waited for;
 *  - a transfer's ZINC_ERR_COMM stops the engine (zinc_engine_fail, which
 *    fails every comm of its fate); a size mismatch (ZINC_ERR_INVALID)
 *    and misuse do not.
 */
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/pipe.h"
#include "engine/reduce/reduce.h"

struct zinc_pipe {
  zinc_grid grid;
  zinc_coord me;          /* this rank's coordinates                        */
  int prev, next;         /* world ranks of the neighbouring stages, -1 at
                             the ends                                       */
  zinc_comm *host;        /* the pipeline group (pp ranks, rank = stage),
                             host buffers; self without a pipeline          */
  zinc_comm *nccl;        /* the same group for device buffers on a GPU
                             engine with a pipeline, else NULL              */
  zinc_comm *stage;       /* the ranks of this stage (dp x tp of them, in
                             world order), host buffers; NULL without a
                             pipeline (the world is the one stage)          */
  zinc_pp_handle *open;   /* handles started, not yet waited for           */
};

struct zinc_pp_handle {
  zinc_xfer_req *req;     /* the comm's request                            */
  zinc_comm *comm;        /* the comm it runs on                           */
  zinc_pp_handle *prev, *next; /* the pipe's list of open handles          */
};

/* ---------------------------------------------------------------- grid */

/* The sizes every rank passed, compared over the world: one all-reduce
 * of (max, -min) of each. */
static zinc_status agree_sizes(zinc_engine *e, int pp, int tp) {
  if (e->world_size == 1)
    return ZINC_OK;
  int64_t v[4] = {pp, -(int64_t)pp, tp, -(int64_t)tp};
  ZINC_CHECK(zinc_comm_allreduce(e->world, v, v, 4, ZINC_DT_I64, ZINC_OP_MAX));
  if (v[0] != -v[1])
    return zinc_error(ZINC_ERR_INVALID, "zinc_options.pipeline_parallel_size differs across "
                      "ranks (from %lld to %lld; %d on rank %d): give every rank the same "
                      "number of stages", (long long)-v[1], (long long)v[0], pp,
                      e->world_rank);
  if (v[2] != -v[3])
    return zinc_error(ZINC_ERR_INVALID, "zinc_options.model_parallel_size differs across "
                      "ranks (from %lld to %lld; %d on rank %d): give every rank the same "
                      "model-parallel size", (long long)-v[3], (long long)v[2], tp,
                      e->world_rank);
  return ZINC_OK;
}

zinc_status zinc_pipe_grid(zinc_engine *e, zinc_grid *out) {
  int pp = e->opt.pipeline_parallel_size == 0 ? 1 : e->opt.pipeline_parallel_size;
  int tp = e->opt.model_parallel_size;
  ZINC_CHECK(agree_sizes(e, pp, tp));
  zinc_grid g;
  ZINC_CHECK(zinc_grid_make(e->world_size, pp, tp, &g));
  ZINC_CHECK(zinc_calloc((void **)&e->pipe, 1, sizeof *e->pipe, "the pipeline's state"));
  zinc_pipe *p = e->pipe;
  p->grid = g;
  p->me = zinc_grid_coord(&g, e->world_rank);
  zinc_coord c = p->me;
  c.stage = p->me.stage - 1;
  p->prev = zinc_grid_rank(&g, c);
  c.stage = p->me.stage + 1;
  p->next = zinc_grid_rank(&g, c);
  *out = g;
  return ZINC_OK;
}

zinc_status zinc_pipe_create(zinc_engine *e) {
  zinc_pipe *p = e->pipe;
  if (p->grid.pp == 1)
    return zinc_comm_self_create(&p->host);
  ZINC_CHECK(e->world->ops->split(e->world, zinc_grid_pp_color(&p->grid, e->world_rank),
                                  e->world_rank, &p->host));
  p->host->xfer_label = "stage"; /* comm rank = stage: "stage 1 (rank 5)" */
  ZINC_CHECK(e->world->ops->split(e->world, p->me.stage, e->world_rank, &p->stage));
  if (p->host->rank != p->me.stage || p->host->size != p->grid.pp) /* the invariant */
    return zinc_error(ZINC_ERR_COMM, "pipeline group of rank %d: rank %d of %d, expected "
                      "stage %d of %d", e->world_rank, p->host->rank, p->host->size,
                      p->me.stage, p->grid.pp);
  return ZINC_OK;
}

zinc_status zinc_pipe_create_device(zinc_engine *e, int cuda_device) {
  zinc_pipe *p = e->pipe;
  if (p->grid.pp == 1)
    return ZINC_OK;
  ZINC_CHECK(zinc_comm_nccl_create(p->host, cuda_device, e->opt.cuda_stream,
                                   e->cfg.comm_timeout_s, &p->nccl));
  p->nccl->xfer_label = "stage";
  return ZINC_OK;
}

zinc_status zinc_pipe_check_config(const zinc_engine *e) {
  int64_t stages = e->cfg.pipeline_stages;
  if (stages > 0 && stages != e->pipe->grid.pp)
    return zinc_error(ZINC_ERR_CONFIG, "pipeline.stages is %lld in the config but "
                      "zinc_options.pipeline_parallel_size is %d%s: the trainer's options "
                      "give the stages; write the same number in the config, or \"auto\"",
                      (long long)stages, e->opt.pipeline_parallel_size,
                      e->pipe->grid.pp == 1 ? " (no pipeline)" : "");
  if (e->pipe->grid.pp == 1)
    return ZINC_OK;
  /* Stage 3 gathers a module at each fetch and follows the fetch order
   * recorded in the first micro-batch; a 1F1B stage runs the forward
   * passes of later micro-batches between a micro-batch's backward passes,
   * a different order in the warm-up, the steady state and the drain. */
  if (e->cfg.stage == 3)
    return zinc_error(ZINC_ERR_CONFIG, "zero_optimization.stage 3 with "
                      "pipeline_parallel_size %d: stage 3 gathers parameters in the order of "
                      "one micro-batch's forward then backward pass, and a pipeline schedule "
                      "interleaves the forward passes of later micro-batches; use stage 0, 1 "
                      "or 2 with a pipeline (each stage's ranks hold only its own layers)",
                      e->pipe->grid.pp);
  /* These methods agree the norm and the overflow skip over their own
   * data-parallel state, not yet over every stage. */
  const zinc_reducer *method = zinc_reducer_select(&e->cfg);
  if (method->norm)
    return zinc_error(ZINC_ERR_CONFIG, "the %s gradient reduction with "
                      "pipeline_parallel_size %d: its gradient norm and overflow skip are "
                      "agreed over the data-parallel group only, not yet over every pipeline "
                      "stage; use the plain reduction (compressed or not), DGC or PowerSGD "
                      "with a pipeline", method->name, e->pipe->grid.pp);
  return ZINC_OK;
}

zinc_status zinc_pipe_refuse(const zinc_engine *e, const char *what) {
  if (!e->pipe || e->pipe->grid.pp == 1)
    return ZINC_OK;
  return zinc_error(ZINC_ERR_INVALID, "%s: pipeline_parallel_size %d: not implemented yet "
                    "with a pipeline (each stage holds only its own modules, and one file of "
                    "the whole model needs every stage's; save a checkpoint instead, "
                    "docs/3d.md)", what, e->pipe->grid.pp);
}

zinc_comm *zinc_pipe_stage_comm(const zinc_engine *e) {
  return e->pipe && e->pipe->stage ? e->pipe->stage : e->world;
}

zinc_comm *zinc_pipe_host_comm(const zinc_engine *e) { return e->pipe ? e->pipe->host : NULL; }

void zinc_pipe_destroy(zinc_engine *e) {
  zinc_pipe *p = e->pipe;
  if (!p)
    return;
  int dropped = 0;
  while (p->open) {
    zinc_pp_handle *h = p->open;
    p->open = h->next;
    h->comm->ops->xfer_drop(h->comm, h->req);
    free(h);
    dropped++;
  }
  if (dropped && e->failed == ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "zinc_engine_destroy: %d pipeline transfer batch(es) started and "
             "never waited for: dropped (receives cancelled; a send may still read its "
             "buffer); call zinc_pp_wait for every batch", dropped);
  zinc_comm_destroy(p->nccl);
  zinc_comm_destroy(p->stage);
  zinc_comm_destroy(p->host);
  free(p);
  e->pipe = NULL;
}

/* ------------------------------------------------------------- queries */

int zinc_pp_rank(const zinc_engine *e) { return e && e->pipe ? e->pipe->me.stage : -1; }
int zinc_pp_size(const zinc_engine *e) { return e && e->pipe ? e->pipe->grid.pp : 0; }
int zinc_pp_prev(const zinc_engine *e) { return e && e->pipe ? e->pipe->prev : -1; }
int zinc_pp_next(const zinc_engine *e) { return e && e->pipe ? e->pipe->next : -1; }
int zinc_pp_is_first(const zinc_engine *e) { return e && e->pipe && e->pipe->prev < 0; }
int zinc_pp_is_last(const zinc_engine *e) { return e && e->pipe && e->pipe->next < 0; }

zinc_status zinc_rank_coords(const zinc_engine *e, int world_rank, int *stage, int *dp_rank,
                             int *mp_rank) {
  if (!e || !e->pipe)
    return zinc_error(ZINC_ERR_INVALID, "zinc_rank_coords: engine is NULL");
  if (world_rank < 0 || world_rank >= e->pipe->grid.world)
    return zinc_error(ZINC_ERR_INVALID, "zinc_rank_coords: rank %d is outside the world of "
                      "%d ranks", world_rank, e->pipe->grid.world);
  zinc_coord c = zinc_grid_coord(&e->pipe->grid, world_rank);
  if (stage)
    *stage = c.stage;
  if (dp_rank)
    *dp_rank = c.dp;
  if (mp_rank)
    *mp_rank = c.tp;
  return ZINC_OK;
}

int zinc_coords_rank(const zinc_engine *e, int stage, int dp_rank, int mp_rank) {
  if (!e || !e->pipe)
    return -1;
  zinc_coord c = {stage, dp_rank, mp_rank};
  return zinc_grid_rank(&e->pipe->grid, c);
}

/* ----------------------------------------------------------- transfers */

static const char *dir_name(zinc_pp_dir d) {
  switch (d) {
  case ZINC_PP_SEND_NEXT: return "ZINC_PP_SEND_NEXT";
  case ZINC_PP_RECV_PREV: return "ZINC_PP_RECV_PREV";
  case ZINC_PP_SEND_PREV: return "ZINC_PP_SEND_PREV";
  case ZINC_PP_RECV_NEXT: return "ZINC_PP_RECV_NEXT";
  }
  return "unknown";
}

/* One op as the comm's transfer: its peer is the neighbouring stage.
 * ZINC_ERR_INVALID for misuse. */
static zinc_status to_xfer(const zinc_pipe *p, const zinc_pp_op *o, int i, zinc_xfer *x) {
  if ((unsigned)o->dir > ZINC_PP_RECV_NEXT)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: ops[%d].dir is %d: give "
                      "ZINC_PP_SEND_NEXT, _RECV_PREV, _SEND_PREV or _RECV_NEXT", i, (int)o->dir);
  int towards_next = o->dir == ZINC_PP_SEND_NEXT || o->dir == ZINC_PP_RECV_NEXT;
  int stage = p->me.stage + (towards_next ? 1 : -1);
  if (stage < 0 || stage >= p->grid.pp)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: ops[%d] is %s but this rank is stage "
                      "%d of %d: %s; the first stage receives nothing forward and the last "
                      "sends nothing forward", i, dir_name(o->dir), p->me.stage, p->grid.pp,
                      p->grid.pp == 1 ? "there is no pipeline (pipeline_parallel_size 1)"
                      : towards_next ? "there is no next stage" : "there is no previous stage");
  if (o->count < 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: ops[%d] (%s): count is %lld: give the "
                      "number of elements, >= 0", i, dir_name(o->dir), (long long)o->count);
  if (zinc_dtype_size(o->dtype) == 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: ops[%d] (%s): unknown dtype %d", i,
                      dir_name(o->dir), (int)o->dtype);
  if (o->count > 0 && !o->buf)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: ops[%d] (%s): %lld elements with a "
                      "NULL buffer", i, dir_name(o->dir), (long long)o->count);
  *x = (zinc_xfer){.peer = stage, .send = o->dir == ZINC_PP_SEND_NEXT ||
                                          o->dir == ZINC_PP_SEND_PREV,
                   .buf = o->buf, .count = (size_t)o->count, .dtype = (int)o->dtype};
  return ZINC_OK;
}

/* The engine stopped earlier: every transfer call says so. */
static zinc_status stopped(const zinc_engine *e, const char *what) {
  return zinc_error(e->failed, "%s: the engine stopped after an earlier failure (%s); "
                    "destroy it", what, e->failed_msg);
}

zinc_status zinc_pp_start(zinc_engine *e, const zinc_pp_op *ops, int n, zinc_pp_handle **out) {
  if (out)
    *out = NULL;
  if (!e || !out || !e->pipe)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: NULL engine or handle pointer");
  if (e->failed != ZINC_OK)
    return stopped(e, "zinc_pp_start");
  if (!ops || n < 1)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_start: %s: give 1 or more transfers",
                      ops ? "n < 1" : "ops is NULL");
  zinc_pipe *p = e->pipe;
  zinc_xfer *x = NULL;
  ZINC_CHECK(zinc_calloc((void **)&x, (size_t)n, sizeof *x, "the pipeline's transfer batch"));
  zinc_status st = ZINC_OK;
  for (int i = 0; i < n && st == ZINC_OK; i++)
    st = to_xfer(p, &ops[i], i, &x[i]);
  zinc_pp_handle *h = NULL;
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&h, 1, sizeof *h, "a pipeline transfer handle");
  if (st == ZINC_OK) {
    h->comm = p->nccl ? p->nccl : p->host;
    st = h->comm->ops->xfer_start(h->comm, x, n, &h->req);
  }
  free(x);
  if (st != ZINC_OK) {
    free(h);
    if (st == ZINC_ERR_COMM) /* a lost peer: every comm of the engine fails with it */
      zinc_engine_fail(e, st);
    return st;
  }
  h->next = p->open;
  if (p->open)
    p->open->prev = h;
  p->open = h;
  *out = h;
  return ZINC_OK;
}

zinc_status zinc_pp_wait(zinc_engine *e, zinc_pp_handle *h) {
  if (!e || !h || !e->pipe)
    return zinc_error(ZINC_ERR_INVALID, "zinc_pp_wait: NULL engine or handle");
  zinc_pipe *p = e->pipe;
  if (h->prev)
    h->prev->next = h->next;
  else
    p->open = h->next;
  if (h->next)
    h->next->prev = h->prev;
  /* consumed whatever happens: on a stopped engine the comm fails it at once */
  zinc_status st = h->comm->ops->xfer_wait(h->comm, h->req);
  free(h);
  if (e->failed != ZINC_OK)
    return stopped(e, "zinc_pp_wait");
  if (st == ZINC_ERR_COMM)
    zinc_engine_fail(e, st);
  return st;
}

zinc_status zinc_pp_transfer(zinc_engine *e, const zinc_pp_op *ops, int n) {
  zinc_pp_handle *h;
  ZINC_CHECK(zinc_pp_start(e, ops, n, &h));
  return zinc_pp_wait(e, h);
}
