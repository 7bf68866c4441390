/*
 * stage3.c — partitioned parameters: gathered on fetch, freed on release,
 * prefetched ahead along the recorded module order.
 *
 * A module's non-persistent segments are gathered into one buffer
 * (gather_bytes): each unit is an all-gather from every rank's shard.
 * Segments smaller than stage3_param_persistence_threshold stay whole on
 * every rank (gathered once after each step).
 *
 * Two sides:
 *  - the *replay* decides when gathers start and buffers are freed. It is
 *    driven by the recorded trace event by event (trace.c): a FETCH event
 *    starts the module's gather if it is not resident and prefetches the
 *    modules that come next, up to stage3_prefetch_bucket_size elements
 *    ahead and within stage3_max_live_parameters; a RELEASE event frees the
 *    copy unless the module is fetched again within
 *    stage3_max_reuse_distance elements. The replay depends only on the
 *    trace and the number of calls made, so every rank starts the same
 *    gathers in the same order, even a rank that deviates.
 *  - *serving* hands the trainer the module it asked for: wait for its
 *    gather and point the segments at it. A module that is not resident
 *    cannot be served (only possible when a rank deviates) and fails.
 * While recording (the first micro-batch) the replay is the trainer's own
 * call: gather at fetch, free at release, no prefetch.
 *
 * A buffer the replay frees while the trainer still holds it (a deviating
 * rank) becomes the module's orphan and is freed at the trainer's release.
 *
 * hpZ (zero_hpz_partition_size h > 1): a module's gather uses the
 * secondary partition in the group once a gather over every rank filled
 * it (hpz.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/copy_run.h"
#include "engine/place/place.h"
#include "engine/reduce/reduce.h"
#include "engine/stage3/stage3.h"
#include "engine/support.h"
#include "engine/trace.h"

/* What a fetch reads of this rank's partition: the module's
 * non-persistent units form at most two runs of consecutive units, its
 * trained units and its frozen ones (laid out after every trained unit,
 * engine.h), each [first[k], last[k]] (-1: none). */
typedef struct {
  int first[2], last[2]; /* [0] trained units, [1] frozen units */
} read_runs;

static void read_range(const zinc_engine *e, const zinc_module *m, read_runs *r) {
  for (int k = 0; k < 2; k++)
    r->first[k] = r->last[k] = -1;
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    if (seg->persistent || seg->nunits == 0)
      continue;
    int k = seg->first_unit >= e->ntrain_units;
    int a = seg->first_unit, b = seg->first_unit + seg->nunits - 1;
    if (r->first[k] < 0 || a < r->first[k])
      r->first[k] = a;
    if (b > r->last[k])
      r->last[k] = b;
  }
}

static size_t run_bytes(const zinc_engine *e, const read_runs *r, int k) {
  if (r->first[k] < 0)
    return 0;
  const zinc_unit *a = &e->units[r->first[k]], *b = &e->units[r->last[k]];
  return b->shard_byte + (size_t)b->chunk * zinc_dtype_size(b->dtype) - a->shard_byte;
}

static size_t range_bytes(const zinc_engine *e, const read_runs *r) {
  return run_bytes(e, r, 0) + run_bytes(e, r, 1);
}

size_t zinc_stage3_largest_read(const zinc_engine *e, const char **name) {
  size_t most = 0;
  for (int mi = 0; mi < e->nmodules; mi++) {
    read_runs r;
    read_range(e, e->modules[mi], &r);
    size_t b = range_bytes(e, &r);
    if (b > most) {
      most = b;
      if (name)
        *name = e->modules[mi]->name;
    }
  }
  return most;
}

static zinc_status gather_wait(zinc_engine *e, zinc_module *m);

/* A parameter read buffer; when all are busy, complete the oldest gather
 * still reading from one (every rank started it, in the same order). */
static zinc_status read_buffer(zinc_engine *e, size_t bytes, void **out) {
  for (;;) {
    *out = zinc_place_param_buffer_take(e, bytes);
    if (*out)
      return ZINC_OK;
    zinc_module *oldest = NULL;
    for (int mi = 0; mi < e->nmodules; mi++) {
      zinc_module *o = e->modules[mi];
      if (o->read_staging && (!oldest || o->read_seq < oldest->read_seq))
        oldest = o;
    }
    if (!oldest)
      return zinc_error(ZINC_ERR_INVALID, "no parameter read buffer of %zu bytes", bytes);
    ZINC_CHECK(gather_wait(e, oldest));
  }
}

/* This rank's chunks of the module's units as send buffers: the partition
 * itself, or (on NVMe) a host copy of each run read into one parameter
 * read buffer, run 0 then run 1. base[k] + u->shard_byte is unit u's chunk
 * for a unit of run k. */
static zinc_status shard_source(zinc_engine *e, zinc_module *m, const read_runs *r,
                                const char *base[2]) {
  m->read_staging = NULL;
  m->read_staging_bytes = 0;
  if (e->param_location != ZINC_LOC_NVME) {
    base[0] = base[1] = (const char *)e->param_shard;
    return ZINC_OK;
  }
  size_t bytes = range_bytes(e, r);
  void *buf = NULL;
  ZINC_CHECK(read_buffer(e, bytes, &buf));
  zinc_status st = ZINC_OK;
  size_t at = 0;
  for (int k = 0; k < 2; k++) {
    base[k] = NULL;
    if (r->first[k] < 0)
      continue;
    size_t from = e->units[r->first[k]].shard_byte, n = run_bytes(e, r, k);
    if (st == ZINC_OK)
      st = zinc_pshard_read(e, from, n, (char *)buf + at);
    base[k] = (const char *)buf + at - from; /* so that base + shard_byte lands in it */
    at += n;
  }
  if (st != ZINC_OK && e->dp_size > 1) {
    /* the peers gather from this rank too: send zeros so that none waits
     * on a collective this rank never joins, and report the failure where
     * every rank agrees (zinc_backward_end, zinc_eval_end, the step), before
     * anything computed from these values can be stepped */
    zinc_engine_defer(e, zinc_error_wrap(st, "reading module \"%s\"'s parameters from NVMe",
                                         m->name));
    memset(buf, 0, bytes);
    st = ZINC_OK;
  }
  if (st != ZINC_OK) {
    zinc_place_param_buffer_give(e, buf);
    return st;
  }
  m->read_staging = buf;
  m->read_staging_bytes = bytes;
  m->read_seq = ++e->read_seq;
  return ZINC_OK;
}

static void source_free(zinc_engine *e, zinc_module *m) {
  if (m->read_staging)
    zinc_place_param_buffer_give(e, m->read_staging);
  m->read_staging = NULL;
  m->read_staging_bytes = 0;
}

/* This rank's chunk of unit u inside a gathered buffer `base`: where the
 * all-gather puts it, and (in place) where it sends it from. */
static char *own_slot(const zinc_engine *e, char *base, const zinc_unit *u) {
  return zinc_unit_ptr(base, u) + (size_t)e->dp_rank * (size_t)u->chunk * zinc_dtype_size(u->dtype);
}

/* Parameters on NVMe: the chunks read into the host buffer go to their own
 * slots of the gathered buffer (device memory: NCCL gathers from there, not
 * from pinned host memory), and the gather runs in place. The read buffer
 * is free again once the copies are done. */
static zinc_status shard_to_device(zinc_engine *e, zinc_module *m, const char *src[2]) {
  /* chunks back to back on both sides (one rank: the module's units) go as
   * one copy (copy_run.h); with several ranks each own slot is a copy */
  zinc_copy_run run = {0};
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    if (seg->persistent)
      continue;
    char *base = (char *)m->gathered + seg->gather_offset;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      ZINC_CHECK(zinc_copy_run_add(e->dev, &run, own_slot(e, base, u),
                                   src[ui >= e->ntrain_units] + u->shard_byte,
                                   (size_t)u->chunk * zinc_dtype_size(u->dtype), e->stream));
    }
  }
  ZINC_CHECK(zinc_copy_run_flush(e->dev, &run, e->stream));
  ZINC_CHECK(zinc_engine_sync(e));
  source_free(e, m);
  return ZINC_OK;
}

/* The send buffer of unit u's all-gather (not hpZ's group gather). */
static const char *unit_send(const zinc_engine *e, const zinc_module *m, const zinc_segment *seg,
                             int ui, const char *src[2]) {
  const zinc_unit *u = &e->units[ui];
  if (e->param_location == ZINC_LOC_NVME) /* in place: shard_to_device */
    return own_slot(e, (char *)m->gathered + seg->gather_offset, u);
  return src[ui >= e->ntrain_units] + u->shard_byte;
}

/* offload_param cpu with host memory across PCIe (the cuda device, or the
 * cpu device with ZINC_OFFLOAD_STAGING=1): this rank's chunks of the module
 * are copied to the device first, on a copy stream the compute stream then
 * waits for on the device (no host sync), so that the all-gather, which is
 * ordered after the compute stream (comm.h), reads device memory instead of
 * pinned host memory over PCIe. The copy runs beside the trainer's kernels
 * queued before it; only kernels queued after the gather starts wait. */
static zinc_status chunks_to_device(zinc_engine *e, zinc_module *m, const read_runs *r,
                                   const char *base[2]) {
  if (e->param_location != ZINC_LOC_HOST || !zinc_place_host_remote(e))
    return ZINC_OK;
  const zinc_device_ops *d = e->dev->ops;
  if (!e->param_copy)
    ZINC_CHECK(d->stream_create(e->dev, &e->param_copy));
  if (!e->param_copied)
    ZINC_CHECK(d->event_create(e->dev, &e->param_copied));
  size_t bytes = range_bytes(e, r);
  ZINC_CHECK(zinc_engine_buffer_alloc_unzeroed(e, bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                               &m->shard_copy, "parameter chunks to gather"));
  m->shard_copy_bytes = bytes;
  size_t at = 0;
  for (int k = 0; k < 2; k++) {
    if (r->first[k] < 0)
      continue;
    size_t from = e->units[r->first[k]].shard_byte, n = run_bytes(e, r, k);
    ZINC_CHECK(d->copy(e->dev, (char *)m->shard_copy + at, base[k] + from, n, e->param_copy));
    base[k] = (const char *)m->shard_copy + at - from; /* base + shard_byte lands in it */
    at += n;
  }
  ZINC_CHECK(d->event_record(e->dev, e->param_copied, e->param_copy));
  ZINC_CHECK(d->stream_wait_event(e->dev, e->stream, e->param_copied));
  e->param_device_copies++;
  return ZINC_OK;
}

static void shard_copy_free(zinc_engine *e, zinc_module *m) {
  if (m->shard_copy)
    zinc_engine_buffer_free(e, m->shard_copy, m->shard_copy_bytes, ZINC_LOC_DEVICE,
                            ZINC_MEM_BUFFERS);
  m->shard_copy = NULL;
  m->shard_copy_bytes = 0;
}

/* ------------------------------------------------ qwZ (compress.c) */

/* The encoded bytes of unit u's chunk and where the module's units start
 * in the send staging (units in gather order, non-persistent only). */
static size_t qw_bytes(const zinc_engine *e, const zinc_module *m) {
  size_t total = 0;
  for (int s = 0; s < m->nsegs; s++)
    for (int ui = m->segs[s].first_unit; !m->segs[s].persistent &&
                                         ui < m->segs[s].first_unit + m->segs[s].nunits; ui++)
      total += zinc_compress_weight_bytes(e, e->units[ui].chunk);
  return total;
}

static void qw_free(zinc_engine *e, zinc_module *m) {
  if (m->cx_wsend)
    zinc_engine_buffer_free(e, m->cx_wsend, m->cx_wbytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  if (m->cx_wrecv)
    zinc_engine_buffer_free(e, m->cx_wrecv, m->cx_wbytes * (size_t)e->dp_size, ZINC_LOC_DEVICE,
                            ZINC_MEM_BUFFERS);
  m->cx_wsend = m->cx_wrecv = NULL;
  m->cx_wbytes = 0;
}

static zinc_status qw_alloc(zinc_engine *e, zinc_module *m) {
  m->cx_wbytes = qw_bytes(e, m);
  if (m->cx_wbytes == 0)
    m->cx_wbytes = 16;
  zinc_status st = zinc_engine_buffer_alloc(e, m->cx_wbytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                            &m->cx_wsend, "compressed parameters to send");
  if (st == ZINC_OK)
    st = zinc_engine_buffer_alloc(e, m->cx_wbytes * (size_t)e->dp_size, ZINC_LOC_DEVICE,
                                  ZINC_MEM_BUFFERS, &m->cx_wrecv, "compressed parameters received");
  if (st != ZINC_OK)
    qw_free(e, m);
  return st;
}

/* Every rank's encoded chunks, decoded into the gathered buffer: this
 * rank's too, so that every rank computes with the same values. */
static zinc_status qw_decode(zinc_engine *e, zinc_module *m) {
  size_t off = 0;
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    if (seg->persistent)
      continue;
    char *base = (char *)m->gathered + seg->gather_offset;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      size_t b = zinc_compress_weight_bytes(e, u->chunk), es = zinc_dtype_size(u->dtype);
      for (int p = 0; p < e->dp_size; p++)
        ZINC_CHECK(zinc_compress_weight_decode(
            e, zinc_unit_ptr(base, u) + (size_t)p * (size_t)u->chunk * es, u->dtype,
            (const char *)m->cx_wrecv + (size_t)e->dp_size * off + (size_t)p * b, u->chunk));
      off += b;
    }
  }
  return zinc_engine_sync(e);
}

static zinc_status gather_start(zinc_engine *e, zinc_module *m) {
  read_runs runs;
  read_range(e, m, &runs);
  const char *src[2] = {NULL, NULL};
  int group = zinc_hpz_uses_secondary(e, m);
  zinc_status st = group ? ZINC_OK : shard_source(e, m, &runs, src);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "fetching module \"%s\"", m->name);
  if (!group) /* agreed below with the other local work */
    st = chunks_to_device(e, m, &runs, src);
  int ncoll = 0;
  for (int s = 0; s < m->nsegs; s++)
    if (!m->segs[s].persistent)
      ncoll += m->segs[s].nunits;
  zinc_coll *colls = NULL;
  /* not zeroed: every unit (padding included) is written by its all-gather
   * or, with qwZ, by the decode of every rank's chunk */
  if (st == ZINC_OK)
    st = zinc_engine_buffer_alloc_unzeroed(e, m->gather_bytes, ZINC_LOC_DEVICE,
                                           ZINC_MEM_BUFFERS, &m->gathered,
                                           "gathered parameters");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&colls, (size_t)ncoll, sizeof *colls, "gather batch");
  if (st == ZINC_OK && !group && e->param_location == ZINC_LOC_NVME)
    st = shard_to_device(e, m, src);
  /* qwZ: this rank's chunks encoded once, one all-gather of bytes */
  int quantized = !group && zinc_compress_weights(e);
  if (st == ZINC_OK && quantized)
    st = qw_alloc(e, m);
  size_t woff = 0;
  for (int s = 0; st == ZINC_OK && quantized && s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    for (int ui = seg->first_unit; !seg->persistent && st == ZINC_OK &&
                                   ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      st = zinc_compress_weight_encode(e, (char *)m->cx_wsend + woff,
                                       unit_send(e, m, seg, ui, src), u->dtype,
                                       u->chunk);
      woff += zinc_compress_weight_bytes(e, u->chunk);
    }
  }
  /* no host sync before the gather: it runs after the encoding queued on
   * the compute stream (comm.h, "Streams") */
  if (st != ZINC_OK)
    zinc_error_wrap(st, "fetching module \"%s\"", m->name);
  /* the gather is collective: a rank that could not prepare it tells its
   * peers now instead of leaving them inside it */
  st = zinc_engine_agree_at(e, e->dp_host, st, zinc_trace_key(ZINC_KEY_GATHER, 0, m->index),
                            NULL);
  if (st != ZINC_OK) {
    free(colls);
    if (m->gathered)
      zinc_engine_buffer_free(e, m->gathered, m->gather_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
    m->gathered = NULL;
    source_free(e, m);
    shard_copy_free(e, m);
    qw_free(e, m);
    return st;
  }
  e->live_elems += m->gather_numel;
  if (e->live_elems > e->live_peak)
    e->live_peak = e->live_elems;
  int k = 0;
  woff = 0;
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    if (seg->persistent)
      continue;
    char *base = (char *)m->gathered + seg->gather_offset;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      if (quantized) {
        size_t b = zinc_compress_weight_bytes(e, u->chunk);
        /* each unit gathers into its own block of N x b bytes */
        colls[k++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                                 .send = (const char *)m->cx_wsend + woff,
                                 .recv = (char *)m->cx_wrecv + (size_t)e->dp_size * woff,
                                 .count = b,
                                 .dtype = ZINC_DT_U8,
                                 /* the comms logger: what the plain
                                  * all-gather would send from here */
                                 .logical_bytes = (uint64_t)(e->dp_size - 1) *
                                                  (uint64_t)u->chunk * zinc_dtype_size(u->dtype),
                                 .codec_name = zinc_compress_weight_codec_name(e)};
        woff += b;
        continue;
      }
      /* in the group: the slices, in group-rank order, make the unit */
      colls[k++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                               .send = group ? (const char *)e->param_secondary +
                                                   u->secondary_byte
                                             : unit_send(e, m, seg, ui, src),
                               .recv = zinc_unit_ptr(base, u),
                               .count = (size_t)(group ? zinc_hpz_slice_numel(e, u) : u->chunk),
                               .dtype = u->dtype};
    }
  }
  m->gather_comm = group ? e->hpz_comm : e->dp;
  if (e->hpz > 1 && !group)
    m->secondary = ZINC_SECONDARY_FILLING;
  st = m->gather_comm->ops->start(m->gather_comm, colls, ncoll, &m->gather_req);
  free(colls);
  if (st != ZINC_OK) {
    m->secondary = ZINC_SECONDARY_STALE;
    qw_free(e, m);
    return zinc_error_wrap(st, "gathering module \"%s\"", m->name);
  }
  return ZINC_OK;
}

static zinc_status gather_wait(zinc_engine *e, zinc_module *m) {
  if (!m->gather_req)
    return ZINC_OK;
  zinc_comm_req *req = m->gather_req;
  m->gather_req = NULL;
  double w0 = e->t_comm_wait;
  zinc_status st = zinc_engine_wait(e, m->gather_comm, req);
  e->t_inner_wait += e->t_comm_wait - w0; /* a gather: the model's own wait */
  source_free(e, m);
  shard_copy_free(e, m);
  if (st == ZINC_OK && m->cx_wrecv)
    st = qw_decode(e, m);
  qw_free(e, m);
  if (st == ZINC_OK && m->secondary == ZINC_SECONDARY_FILLING)
    st = zinc_hpz_secondary_fill(e, m);
  if (m->secondary == ZINC_SECONDARY_FILLING)
    m->secondary = st == ZINC_OK ? ZINC_SECONDARY_VALID : ZINC_SECONDARY_STALE;
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "gathering module \"%s\"", m->name);
  return ZINC_OK;
}

static void point_segments(zinc_module *m, void *buffer) {
  for (int s = 0; s < m->nsegs; s++)
    if (!m->segs[s].persistent)
      m->segs[s].full = buffer ? (char *)buffer + m->segs[s].gather_offset : NULL;
}

static void buffer_free(zinc_engine *e, zinc_module *m, void *buffer) {
  zinc_engine_buffer_free(e, buffer, m->gather_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  e->live_elems -= m->gather_numel;
}

/* The replay drops m's copy: now, or at the trainer's release when the
 * trainer still holds it (then it becomes the orphan). */
static zinc_status replay_free(zinc_engine *e, zinc_module *m) {
  if (!m->gathered)
    return ZINC_OK;
  ZINC_CHECK(gather_wait(e, m));
  if (m->fetched > 0 && m->served == m->gathered) {
    if (m->orphan)
      buffer_free(e, m, m->orphan);
    m->orphan = m->gathered;
  } else {
    buffer_free(e, m, m->gathered);
  }
  m->gathered = NULL;
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

zinc_status zinc_stage3_replay_fetch(zinc_engine *e, zinc_module *m, int event) {
  m->replay_held++;
  if (m->gather_numel == 0)
    return ZINC_OK;
  if (!m->gathered) {
    /* Over the live limit: drop copies kept for reuse (not in use) first. */
    for (int mi = 0; mi < e->nmodules &&
                     e->live_elems + m->gather_numel > e->cfg.stage3_max_live_parameters;
         mi++) {
      zinc_module *o = e->modules[mi];
      if (o != m && o->gathered && o->replay_held == 0 && !o->gather_req)
        ZINC_CHECK(replay_free(e, o));
    }
    ZINC_CHECK(gather_start(e, m));
  }
  if (!e->recording && !e->eval)
    ZINC_CHECK(prefetch(e, event));
  return ZINC_OK;
}

zinc_status zinc_stage3_replay_release(zinc_engine *e, zinc_module *m, int event) {
  if (m->replay_held > 0)
    m->replay_held--;
  if (m->gather_numel == 0 || m->replay_held > 0)
    return ZINC_OK;
  int keep = !e->recording && !e->eval && e->keep_at_release && e->keep_at_release[event];
  return keep ? ZINC_OK : replay_free(e, m);
}

zinc_status zinc_stage3_serve(zinc_engine *e, zinc_module *m) {
  if (m->gather_numel == 0)
    return ZINC_OK;
  if (!m->gathered) {
    if (m->served)
      return ZINC_OK; /* still holding an earlier copy: same values */
    return zinc_error(ZINC_ERR_INVALID, "zinc_module_fetch(\"%s\"): this rank's calls left "
                      "the recorded module order and \"%s\" is not gathered; every "
                      "data-parallel rank must fetch modules in the same order", m->name,
                      m->name);
  }
  ZINC_CHECK(gather_wait(e, m));
  if (m->orphan && m->orphan != m->gathered) {
    buffer_free(e, m, m->orphan);
    m->orphan = NULL;
  }
  m->served = m->gathered;
  point_segments(m, m->served);
  return ZINC_OK;
}

void zinc_stage3_unserve(zinc_engine *e, zinc_module *m) {
  if (m->gather_numel == 0 || m->fetched > 0)
    return;
  if (m->orphan) {
    buffer_free(e, m, m->orphan);
    m->orphan = NULL;
  }
  m->served = NULL;
  point_segments(m, NULL);
}

zinc_status zinc_stage3_invalidate(zinc_engine *e) {
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    m->replay_held = 0;
    ZINC_CHECK(replay_free(e, m));
    m->secondary = ZINC_SECONDARY_STALE; /* the shards change (or may) */
  }
  return ZINC_OK;
}

void zinc_stage3_free(zinc_engine *e) {
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    if (m->gather_req)
      m->gather_comm->ops->wait(m->gather_comm, m->gather_req);
    m->gather_req = NULL;
    m->secondary = ZINC_SECONDARY_STALE;
    source_free(e, m);
    shard_copy_free(e, m);
    if (m->gathered)
      buffer_free(e, m, m->gathered);
    if (m->orphan)
      buffer_free(e, m, m->orphan);
    m->gathered = m->orphan = m->served = NULL;
  }
  if (e->param_copy)
    e->dev->ops->stream_destroy(e->dev, e->param_copy);
  if (e->param_copied)
    e->dev->ops->event_destroy(e->dev, e->param_copied);
  e->param_copy = NULL;
  e->param_copied = NULL;
}

/* Persistent segments: all-gather every unit from the shards into the
 * whole copy (after every step). */
zinc_status zinc_stage3_gather_persistent(zinc_engine *e) {
  int ncoll = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++)
      if (e->modules[mi]->segs[s].persistent)
        ncoll += e->modules[mi]->segs[s].nunits;
  if (ncoll == 0)
    return ZINC_OK;
  /* Local work first (the batch, and on NVMe the persistent units' chunks
   * read into one staging buffer), then agreement: a rank that failed tells
   * its peers before the gather instead of leaving them inside it. */
  zinc_coll *colls = NULL;
  zinc_status st = zinc_calloc((void **)&colls, (size_t)ncoll, sizeof *colls, "gather batch");
  int on_disk = e->param_location == ZINC_LOC_NVME;
  void *staging = NULL;
  size_t staging_bytes = 0, used = 0;
  if (on_disk && st == ZINC_OK) {
    for (int ui = 0; ui < e->nunits; ui++)
      if (e->modules[e->units[ui].module]->segs[e->units[ui].segment].persistent)
        staging_bytes += (size_t)e->units[ui].chunk * zinc_dtype_size(e->units[ui].dtype);
    st = zinc_engine_buffer_alloc(e, staging_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &staging,
                                  "persistent parameters read from NVMe");
  }
  int k = 0;
  for (int mi = 0; mi < e->nmodules && st == ZINC_OK; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs && st == ZINC_OK; s++) {
      zinc_segment *seg = &e->modules[mi]->segs[s];
      if (!seg->persistent)
        continue;
      for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits && st == ZINC_OK;
           ui++) {
        const zinc_unit *u = &e->units[ui];
        size_t bytes = (size_t)u->chunk * zinc_dtype_size(u->dtype);
        const char *send = (const char *)e->param_shard + u->shard_byte;
        if (on_disk) { /* NVMe -> host staging -> own slot; gathered in place */
          char *slot = own_slot(e, seg->full, u);
          st = zinc_pshard_read(e, u->shard_byte, bytes, (char *)staging + used);
          if (st == ZINC_OK)
            st = e->dev->ops->copy(e->dev, slot, (char *)staging + used, bytes, e->stream);
          send = slot;
          used += bytes;
        }
        colls[k++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                                 .send = send,
                                 .recv = zinc_unit_ptr(seg->full, u),
                                 .count = (size_t)u->chunk,
                                 .dtype = u->dtype};
      }
    }
  if (st == ZINC_OK && on_disk)
    st = zinc_engine_sync(e); /* the copies into the slots */
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st == ZINC_OK) {
    double t0 = zinc_now();
    st = e->dp->ops->run(e->dp, colls, ncoll);
    e->t_comm_wait += zinc_now() - t0;
    if (st != ZINC_OK)
      zinc_error_wrap(st, "gathering persistent parameters");
  }
  free(colls);
  if (staging)
    zinc_engine_buffer_free(e, staging, staging_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  return st;
}
