/*
 * stage3.c — partitioned parameters: gather on fetch, free on release,
 * prefetch ahead along the recorded module order.
 *
 * A module's non-persistent segments are gathered into one buffer
 * (gather_bytes): each unit is an all-gather from every rank's shard.
 * Segments smaller than stage3_param_persistence_threshold stay whole on
 * every rank (gathered once after each step).
 *
 * After the first micro-batch (trace.c) the engine knows the order of
 * fetches. On fetch it starts gathers for the modules that come next, up to
 * stage3_prefetch_bucket_size elements ahead, as long as the gathered
 * elements stay within stage3_max_live_parameters (the module being fetched
 * is always allowed). On release it keeps the copy when the same module is
 * fetched again within stage3_max_reuse_distance elements. Every decision
 * depends only on the recorded order and the calls made so far, so every
 * rank starts the same gathers in the same order.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static zinc_status gather_start(zinc_engine *e, zinc_module *m) {
  zinc_status st = zinc_engine_alloc(e, m->gather_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                     &m->gathered, "gathered parameters");
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "fetching module \"%s\"", m->name);
  e->live_elems += m->gather_numel;
  if (e->live_elems > e->live_peak)
    e->live_peak = e->live_elems;
  int ncoll = 0;
  for (int s = 0; s < m->nsegs; s++)
    if (!m->segs[s].persistent)
      ncoll += m->segs[s].nunits;
  zinc_coll *colls = NULL;
  ZINC_CHECK(zinc_calloc((void **)&colls, (size_t)ncoll, sizeof *colls, "gather batch"));
  int k = 0;
  for (int s = 0; s < m->nsegs; s++) {
    zinc_segment *seg = &m->segs[s];
    if (seg->persistent)
      continue;
    seg->full = (char *)m->gathered + seg->gather_offset;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      colls[k++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                               .send = (char *)e->param_shard + u->shard_byte,
                               .recv = zinc_unit_ptr(seg->full, u),
                               .count = (size_t)u->chunk,
                               .dtype = u->dtype};
    }
  }
  st = e->dp->ops->start(e->dp, colls, ncoll, &m->gather_req);
  free(colls);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering module \"%s\"", m->name);
  return ZINC_OK;
}

static zinc_status gather_wait(zinc_engine *e, zinc_module *m) {
  if (!m->gather_req)
    return ZINC_OK;
  zinc_comm_req *req = m->gather_req;
  m->gather_req = NULL;
  zinc_status st = zinc_engine_wait(e, e->dp, req);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering module \"%s\"", m->name);
  return ZINC_OK;
}

static zinc_status gather_free(zinc_engine *e, zinc_module *m) {
  if (!m->gathered)
    return ZINC_OK;
  ZINC_CHECK(gather_wait(e, m));
  zinc_engine_free(e, m->gathered, m->gather_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  m->gathered = NULL;
  e->live_elems -= m->gather_numel;
  for (int s = 0; s < m->nsegs; s++)
    if (!m->segs[s].persistent)
      m->segs[s].full = NULL;
  return ZINC_OK;
}

/* Start gathers for the fetches after trace index `pos`. */
static zinc_status prefetch(zinc_engine *e, int pos) {
  int64_t ahead = 0;
  for (int j = pos + 1; j < e->ntrace; j++) {
    if (e->trace[j].kind != ZINC_EV_FETCH)
      continue;
    zinc_module *n = e->modules[e->trace[j].module];
    if (n->gather_numel == 0 || n->gathered)
      continue;
    ahead += n->gather_numel;
    if (ahead > e->cfg.stage3_prefetch_bucket_size ||
        e->live_elems + n->gather_numel > e->cfg.stage3_max_live_parameters)
      break;
    ZINC_CHECK(gather_start(e, n));
  }
  return ZINC_OK;
}

zinc_status zinc_stage3_fetch(zinc_engine *e, zinc_module *m) {
  if (m->gather_numel == 0)
    return ZINC_OK;
  if (!m->gathered) {
    /* Over the live limit: drop copies kept for reuse (not in use) first. */
    for (int mi = 0; mi < e->nmodules &&
                     e->live_elems + m->gather_numel > e->cfg.stage3_max_live_parameters;
         mi++) {
      zinc_module *o = e->modules[mi];
      if (o != m && o->gathered && o->fetched == 0 && !o->gather_req)
        ZINC_CHECK(gather_free(e, o));
    }
    ZINC_CHECK(gather_start(e, m));
  }
  if (!e->recording && m->use_event >= 0)
    ZINC_CHECK(prefetch(e, m->use_event));
  return gather_wait(e, m);
}

zinc_status zinc_stage3_release(zinc_engine *e, zinc_module *m) {
  if (m->gather_numel == 0)
    return ZINC_OK;
  int keep = !e->recording && m->use_event >= 0 && e->keep_after &&
             e->keep_after[m->use_event];
  if (keep)
    return ZINC_OK;
  return gather_free(e, m);
}

zinc_status zinc_stage3_invalidate(zinc_engine *e) {
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    if (m->gathered && m->fetched == 0)
      ZINC_CHECK(gather_free(e, m));
  }
  return ZINC_OK;
}

/* Persistent segments: all-gather every unit from the shards into the
 * whole copy (after init and after every step). */
zinc_status zinc_stage3_gather_persistent(zinc_engine *e) {
  int ncoll = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++)
      if (e->modules[mi]->segs[s].persistent)
        ncoll += e->modules[mi]->segs[s].nunits;
  if (ncoll == 0)
    return ZINC_OK;
  zinc_coll *colls = NULL;
  ZINC_CHECK(zinc_calloc((void **)&colls, (size_t)ncoll, sizeof *colls, "gather batch"));
  int k = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++) {
      zinc_segment *seg = &e->modules[mi]->segs[s];
      if (!seg->persistent)
        continue;
      for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
        const zinc_unit *u = &e->units[ui];
        colls[k++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                                 .send = (char *)e->param_shard + u->shard_byte,
                                 .recv = zinc_unit_ptr(seg->full, u),
                                 .count = (size_t)u->chunk,
                                 .dtype = u->dtype};
      }
    }
  double t0 = zinc_now();
  zinc_status st = e->dp->ops->run(e->dp, colls, ncoll);
  e->t_comm_wait += zinc_now() - t0;
  free(colls);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering persistent parameters");
  return ZINC_OK;
}
