/*
 * cpu.c — the offloaded optimizer step (offload_optimizer.device cpu)
 * when gradients or parameters live where the CPU cannot compute on them:
 * the cuda device. DeepSpeed's ZeRO-Offload pipeline:
 *
 *   for each sub-group k (at most sub_group_size elements, and at most
 *   ZINC_STAGING_MAX so the pinned staging stays small):
 *     copy stream A: gradients of k+1, device -> pinned staging (16-bit
 *                    stays 16-bit on the wire; the CPU Adam widens it)
 *     host:          CPU Adam of k (SIMD, the host device's thread pool)
 *                    over the pinned fp32 master, m, v, writing the 16-bit
 *                    parameter copy into pinned staging
 *     copy stream B: parameters of k, pinned staging -> device
 *
 * Two staging slots alternate, so the copies of k+1 (in) and k-1 (out) run
 * while the CPU updates k. What is already host memory is used in place: at
 * stages 2-3 the reduced fp32 gradient partition lives in pinned host memory
 * (the reduction wrote it there), and with offload_param cpu the stage-3
 * parameter partition does too.
 *
 * Lamb runs the pipeline twice (the step's two passes): UPDATE copies the gradients in,
 * moves the moments and returns each run's two sums of squares, writing no
 * parameter; after the trust ratios, APPLY copies no gradient and copies
 * the parameters out. Its sub-groups are made of whole runs (each at most
 * zinc_lamb_grid elements, the sub-group's size), so a run's sums are
 * computed in one piece, the same bits as without offload.
 *
 * nvme_step.c runs the NVMe sub-groups (ZeRO-Infinity) through the same
 * slots, streams and events, the swap area's reads and writes beside them.
 *
 * On the cpu device nothing needs copying and the device's op runs the CPU
 * Adam over the buffers directly (zinc_offload_optim). ZINC_OFFLOAD_STAGING=1 (tests) makes the cpu device
 * take this path, copies included, so the CPU build exercises the same
 * pipeline logic, sub-group cuts and staging offsets as a GPU run.
 */
#include <stdlib.h>
#include <string.h>

#include "device/device_cpu.h"
#include "engine/engine.h"
#include "engine/copy_run.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

enum { ZINC_STAGING_MAX = 16 << 20 }; /* elements per staging slot */

int64_t zinc_lamb_grid(const zinc_engine *e) {
  int64_t g = e->cfg.sub_group_size > 0 ? e->cfg.sub_group_size : ZINC_SUB_GROUP_FOR_ZERO;
  if (g > ZINC_STAGING_MAX)
    g = ZINC_STAGING_MAX;
  if (g > e->shard_numel)
    g = e->shard_numel;
  return g > 0 ? g : 1;
}

int64_t zinc_offload_sub_group(const zinc_engine *e) {
  if (e->optim.kind == ZINC_OPT_LAMB)
    return zinc_lamb_grid(e);
  int64_t g = e->cfg.sub_group_size > 0 ? e->cfg.sub_group_size : ZINC_SUB_GROUP_FOR_ZERO;
  if (g > e->opt_numel)
    g = e->opt_numel;
  return g > 0 ? g : 1;
}

/* One contiguous piece of an Adam segment inside a sub-group. */
typedef struct {
  int seg;
  int64_t off, n;
} piece;

/* Offloaded optimizer state, in host memory or on NVMe (ZeRO-Infinity:
 * nvme_step.c runs its sub-groups through the same staging slots). */
int zinc_offload_staged(const zinc_engine *e) {
  if (e->cfg.offload_optimizer.device != ZINC_OFFLOAD_CPU &&
      e->cfg.offload_optimizer.device != ZINC_OFFLOAD_NVME)
    return 0;
  return zinc_place_host_remote(e);
}

/* Gradients to copy in: stage 0-1 keep them on the device in the compute
 * dtype; stage 2-3 reduce them into the host fp32 partition. */
static int grads_on_device(const zinc_engine *e) { return e->cfg.stage <= 1; }
/* Parameters to copy out: everything but an offloaded stage-3 partition. */
static int params_on_device(const zinc_engine *e) {
  /* from the config, not param_location: the estimator's bare engine has none */
  return e->cfg.stage < 3 || e->cfg.offload_param.device == ZINC_OFFLOAD_NONE;
}

static int64_t group_elems(const zinc_engine *e) {
  int64_t g = zinc_offload_sub_group(e);
  return g < ZINC_STAGING_MAX ? g : ZINC_STAGING_MAX;
}

/* Bytes of one staging slot's gradient and parameter halves. */
static void slot_bytes(const zinc_engine *e, size_t *grad, size_t *param) {
  size_t g = (size_t)group_elems(e);
  *grad = grads_on_device(e) ? g * 4 : 0;
  *param = params_on_device(e) ? g * 4 : 0;
}

size_t zinc_offload_staging_bytes(const zinc_engine *e) {
  if (!zinc_offload_staged(e))
    return 0;
  size_t g, p;
  slot_bytes(e, &g, &p);
  return 2 * (g + p);
}

zinc_status zinc_offload_init(zinc_engine *e) {
  if (!zinc_offload_staged(e))
    return ZINC_OK;
  zinc_offload *o = &e->pl->off;
  o->host = e->dev;
  if (e->dev->ops->is_gpu) {
    /* the CPU Adam runs on a cpu device of its own: this rank's share of
     * the cores near its GPU, its threads bound there (device/topology.c) */
    ZINC_CHECK(zinc_engine_offload_cpu_device(e, &o->host));
    o->host_owned = 1;
  }
  for (int i = 0; i < 2; i++) {
    ZINC_CHECK(e->dev->ops->stream_create(e->dev, &o->copy[i]));
    ZINC_CHECK(e->dev->ops->event_create(e->dev, &o->in_done[i]));
    ZINC_CHECK(e->dev->ops->event_create(e->dev, &o->out_done[i]));
  }
  ZINC_CHECK(e->dev->ops->event_create(e->dev, &o->grads_done));
  size_t gb, pb;
  slot_bytes(e, &gb, &pb);
  o->grad_bytes = gb;
  o->param_bytes = pb;
  for (int s = 0; s < 2; s++) {
    if (gb)
      ZINC_CHECK(zinc_engine_buffer_alloc(e, gb, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &o->grad[s],
                                          "offload gradient staging"));
    if (pb)
      ZINC_CHECK(zinc_engine_buffer_alloc(e, pb, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &o->param[s],
                                          "offload parameter staging"));
  }
  o->ready = 1;
  return ZINC_OK;
}

void zinc_offload_free(zinc_engine *e) {
  zinc_offload *o = &e->pl->off;
  if (!e->dev)
    return;
  for (int s = 0; s < 2; s++) {
    if (o->grad[s])
      zinc_engine_buffer_free(e, o->grad[s], o->grad_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
    if (o->param[s])
      zinc_engine_buffer_free(e, o->param[s], o->param_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
    if (o->copy[s])
      e->dev->ops->stream_destroy(e->dev, o->copy[s]);
    if (o->in_done[s])
      e->dev->ops->event_destroy(e->dev, o->in_done[s]);
    if (o->out_done[s])
      e->dev->ops->event_destroy(e->dev, o->out_done[s]);
  }
  if (o->grads_done)
    e->dev->ops->event_destroy(e->dev, o->grads_done);
  if (o->host_owned)
    zinc_device_destroy(o->host);
  memset(o, 0, sizeof *o);
}

/* Cut segs into sub-groups of at most `g` elements: pieces[first[k] ..
 * first[k+1]) make group k. whole: never cut a segment (a group ends early
 * instead); a segment longer than g is then an error. */
static zinc_status cut_groups(const zinc_opt_seg *segs, int nseg, int64_t g, int whole,
                              piece **pieces, int **first, int *ngroups) {
  for (int i = 0; whole && i < nseg; i++)
    if (segs[i].n > g)
      return zinc_error(ZINC_ERR_INVALID, "offloaded Lamb step: optimizer run %d has %lld "
                        "elements, more than the staging sub-group's %lld; its norms would be "
                        "summed in pieces", i, (long long)segs[i].n, (long long)g);
  int64_t total = 0;
  for (int i = 0; i < nseg; i++)
    total += segs[i].n;
  int maxg = (int)((total + g - 1) / g) + 1 + (whole ? nseg : 0);
  int maxp = nseg + maxg;
  ZINC_CHECK(zinc_calloc((void **)pieces, (size_t)maxp, sizeof **pieces, "sub-groups"));
  ZINC_CHECK(zinc_calloc((void **)first, (size_t)maxg + 1, sizeof **first, "sub-groups"));
  int np = 0, ng = 0;
  int64_t room = 0;
  for (int i = 0; i < nseg; i++)
    for (int64_t off = 0; off < segs[i].n;) {
      if (whole && room < segs[i].n)
        room = 0;
      if (room == 0) {
        (*first)[ng++] = np;
        room = g;
      }
      int64_t n = segs[i].n - off < room ? segs[i].n - off : room;
      (*pieces)[np++] = (piece){i, off, n};
      off += n;
      room -= n;
    }
  (*first)[ng] = np;
  *ngroups = ng;
  return ZINC_OK;
}

/* Queue the gradient copies of group k into slot k & 1 (none for a pass
 * that reads no gradient). */
static zinc_status copy_in(zinc_engine *e, const zinc_opt_seg *segs, const piece *p, int np,
                           int slot, int pass) {
  zinc_offload *o = &e->pl->off;
  if (grads_on_device(e) && pass == ZINC_OPT_PASS_UPDATE) {
    size_t at = 0;
    zinc_copy_run run = {0}; /* pieces back to back: one copy (copy_run.h) */
    for (int i = 0; i < np; i++) {
      const zinc_opt_seg *s = &segs[p[i].seg];
      size_t es = zinc_dt_size(s->grad_dtype);
      ZINC_CHECK(zinc_copy_run_add(e->dev, &run, (char *)o->grad[slot] + at,
                                   (const char *)s->grad + (size_t)p[i].off * es,
                                   (size_t)p[i].n * es, o->copy[0]));
      at += (size_t)p[i].n * es;
    }
    ZINC_CHECK(zinc_copy_run_flush(e->dev, &run, o->copy[0]));
  }
  return e->dev->ops->event_record(e->dev, o->in_done[slot], o->copy[0]);
}

/* One pass of the CPU optimizer over one group: staged gradients in,
 * parameters to staging. Lamb's UPDATE: norms[2 i], norms[2 i + 1] for
 * piece i (a whole run). */
static zinc_status update(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                          const piece *p, int np, int slot, zinc_opt_seg *work, int pass,
                          double *norms) {
  zinc_offload *o = &e->pl->off;
  size_t gat = 0, pat = 0;
  for (int i = 0; i < np; i++) {
    const zinc_opt_seg *s = &segs[p[i].seg];
    zinc_opt_seg *w = &work[i];
    *w = *s;
    w->n = p[i].n;
    zinc_opt_seg_slots_at(w, s, p[i].off); /* NULL: a slot not kept */
    w->global_offset = s->global_offset + p[i].off;
    size_t ges = zinc_dt_size(s->grad_dtype), pes = zinc_dtype_size(s->param_dtype);
    if (pass != ZINC_OPT_PASS_UPDATE) { /* Lamb's APPLY reads no gradient */
      w->grad = NULL;
    } else if (grads_on_device(e)) {
      w->grad = (char *)o->grad[slot] + gat;
      gat += (size_t)p[i].n * ges;
    } else {
      w->grad = (const char *)s->grad + (size_t)p[i].off * ges;
    }
    if (!s->param_out) {
      w->param_out = NULL;
    } else if (params_on_device(e)) {
      w->param_out = (char *)o->param[slot] + pat;
      pat += (size_t)p[i].n * pes;
    } else {
      w->param_out = (char *)s->param_out + (size_t)p[i].off * pes;
    }
  }
  return o->host->ops->optim(o->host, NULL, c, ncoef, work, np, pass, norms);
}

/* Queue the parameter copies of group k out of slot k & 1. */
static zinc_status copy_out(zinc_engine *e, const zinc_opt_seg *segs, const piece *p, int np,
                            int slot) {
  zinc_offload *o = &e->pl->off;
  if (params_on_device(e)) {
    size_t at = 0;
    zinc_copy_run run = {0}; /* pieces back to back: one copy (copy_run.h) */
    for (int i = 0; i < np; i++) {
      const zinc_opt_seg *s = &segs[p[i].seg];
      if (!s->param_out)
        continue;
      size_t es = zinc_dtype_size(s->param_dtype);
      ZINC_CHECK(zinc_copy_run_add(e->dev, &run, (char *)s->param_out + (size_t)p[i].off * es,
                                   (char *)o->param[slot] + at, (size_t)p[i].n * es,
                                   o->copy[1]));
      at += (size_t)p[i].n * es;
    }
    ZINC_CHECK(zinc_copy_run_flush(e->dev, &run, o->copy[1]));
  }
  return e->dev->ops->event_record(e->dev, o->out_done[slot], o->copy[1]);
}

zinc_status zinc_offload_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                              int nseg, int pass, double *norms) {
  zinc_offload *o = &e->pl->off;
  const zinc_device_ops *d = e->dev->ops;
  /* the gradients are final once the engine's queued work is */
  ZINC_CHECK(d->event_record(e->dev, o->grads_done, e->stream));
  ZINC_CHECK(d->stream_wait_event(e->dev, o->copy[0], o->grads_done));
  piece *pieces = NULL;
  int *first = NULL, ng = 0;
  zinc_opt_seg *work = NULL;
  double *piece_norms = NULL; /* Lamb UPDATE: two sums per piece of a group */
  zinc_status st = cut_groups(segs, nseg, group_elems(e), zinc_opt_two_pass(c->kind), &pieces,
                              &first, &ng);
  int most = 0;
  for (int k = 0; st == ZINC_OK && k < ng; k++)
    if (first[k + 1] - first[k] > most)
      most = first[k + 1] - first[k];
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&work, (size_t)most + 1, sizeof *work, "sub-group");
  if (st == ZINC_OK && norms)
    st = zinc_calloc((void **)&piece_norms, 2 * (size_t)most + 2, sizeof *piece_norms,
                     "Lamb norms");
  if (st == ZINC_OK && ng > 0)
    st = copy_in(e, segs, pieces + first[0], first[1] - first[0], 0, pass);
  for (int k = 0; st == ZINC_OK && k < ng; k++) {
    int slot = k & 1, np = first[k + 1] - first[k];
    if (k + 1 < ng) /* slot !slot's gradients were consumed by group k-1 */
      st = copy_in(e, segs, pieces + first[k + 1], first[k + 2] - first[k + 1], !slot, pass);
    if (st == ZINC_OK)
      st = d->event_sync(e->dev, o->in_done[slot]);
    if (st == ZINC_OK && k >= 2) /* group k-2's parameters have left the slot */
      st = d->event_sync(e->dev, o->out_done[slot]);
    if (st == ZINC_OK)
      st = update(e, c, ncoef, segs, pieces + first[k], np, slot, work, pass, piece_norms);
    /* each piece is a whole run (cut_groups' whole): its sums are the run's */
    for (int i = 0; st == ZINC_OK && norms && i < np; i++) {
      const piece *pc = &pieces[first[k] + i];
      norms[2 * (size_t)pc->seg] = piece_norms[2 * i];
      norms[2 * (size_t)pc->seg + 1] = piece_norms[2 * i + 1];
    }
    if (st == ZINC_OK)
      st = copy_out(e, segs, pieces + first[k], np, slot);
  }
  /* every copy done before the gathers read the parameters, or before an
   * error returns and the staging is reused */
  for (int i = 0; i < 2; i++) {
    zinc_status s2 = d->stream_sync(e->dev, o->copy[i]);
    if (st == ZINC_OK)
      st = s2;
  }
  free(pieces);
  free(first);
  free(work);
  free(piece_norms);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "offloaded optimizer step (%d sub-groups)", ng);
  return ZINC_OK;
}

/* For nvme_step.c's sub-group pipeline, which stages through the same
 * slots: the slot's size in elements, and which side needs copies. */
int64_t zinc_offload_staging_group(const zinc_engine *e) { return group_elems(e); }
int zinc_offload_grads_on_device(const zinc_engine *e) { return grads_on_device(e); }
int zinc_offload_params_on_device(const zinc_engine *e) { return params_on_device(e); }

zinc_status zinc_offload_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                               const zinc_opt_seg *segs, int nseg, int pass, double *norms) {
  if (e->pl->off.ready) /* zinc_offload_init decided: staged copies */
    return zinc_offload_step(e, c, ncoef, segs, nseg, pass, norms);
  return zinc_place_device_optim(e, c, ncoef, segs, nseg, pass, norms);
}

/* ------------------------------------------------------- the cpu row */

static int cpu_selects(const zinc_engine *e) {
  return e->cfg.offload_optimizer.device == ZINC_OFFLOAD_CPU;
}

static void cpu_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  zinc_place_grads_sizes(e, bytes);
  zinc_place_state_sizes(e, bytes);
  bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += zinc_offload_staging_bytes(e);
}

static zinc_status cpu_init(zinc_engine *e) {
  ZINC_CHECK(zinc_place_grads_alloc(e));
  ZINC_CHECK(zinc_place_state_alloc(e));
  return zinc_offload_init(e);
}

static void cpu_free(zinc_engine *e) {
  zinc_offload_free(e);
  zinc_place_memory_free(e);
}

const zinc_placement zinc_place_cpu_row = {
    .name = "cpu",
    .selects = cpu_selects,
    .sizes = cpu_sizes,
    .init = cpu_init,
    .free = cpu_free,
    .optim = zinc_offload_optim,
};
