/*
 * grads.c — gradient buffers handed to the trainer and their reduction.
 *
 * Stages 0/1: one full gradient buffer (param dtype, comm-shared on the cpu
 * device). A module's region is zeroed the first time it is handed out in an
 * accumulation window; the trainer accumulates into it across the window's
 * micro-batches; in the boundary micro-batch each module's units are
 * reduce-scattered in place as the module reports grads_ready.
 * With 16-bit gradients and gradient_accumulation_steps > 1 the window's
 * sum is kept in f32 instead (zinc_segment.acc), as stages 2/3 keep theirs
 * in the f32 partition: the 16-bit region is zeroed in every micro-batch,
 * added into the f32 sum at grads_ready, and the sum is rounded to the
 * 16-bit region once, just before its reduction (summing in 16 bits would
 * round at every micro-batch and lose small contributions to a large sum).
 *
 * Stages 2/3: a module's gradient area comes from a ring of comm-shared
 * memory when its first gradient is handed out in a micro-batch; when the
 * module reports grads_ready its units are reduce-scattered (bucketed by
 * reduce_bucket_size, asynchronously with overlap_comm) and this rank's
 * reduced chunks are added, in fp32, into the gradient partition; then the
 * area goes back to the ring.
 *
 * With the partition in host memory across PCIe (offload_optimizer on the
 * cuda device, or the cpu device with ZINC_OFFLOAD_STAGING=1) and
 * gradient_accumulation_steps > 1, the chunks are added into a device
 * partition instead (grad_window_sum) and copied into the host one once, at the
 * boundary: one transfer per window instead of one per module and
 * micro-batch, the same f32 additions in the same order (DeepSpeed's stage
 * 3 keeps its gradient partitions on the device until the boundary too).
 *
 * With the partition on NVMe (zinc_place_grad_location) the chunks go
 * there through the placement's grad_accumulate (the same f32 additions),
 * and the window's device sum, if any, at the boundary.
 *
 * Frozen parameters (zinc_param_set_frozen) sit in segments of their own
 * that get no gradient memory (seg->grad stays NULL) and no reduction.
 *
 * Determinism across ranks: every decision that issues a collective depends
 * only on the trainer's calls (identical on every rank, see trace.c), never
 * on when a reduction happens to complete. Reductions retire strictly in
 * launch order and the ring frees in allocation order, so "does the next
 * area fit once everything in flight has retired" has the same answer on
 * every rank.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/place/place.h"
#include "engine/reduce/reduce.h"
#include "engine/support.h"
#include "engine/trace.h"

static int64_t window_of(const zinc_engine *e) {
  return e->micro_step / e->cfg.gradient_accumulation_steps;
}

int zinc_grads_is_boundary_micro(const zinc_engine *e) {
  int64_t gas = e->cfg.gradient_accumulation_steps;
  return e->micro_step % gas == gas - 1;
}

/* Reductions run in every micro-batch at stages 2/3, at the boundary at 0/1. */
static int reduce_this_micro(const zinc_engine *e) {
  return e->cfg.stage >= 2 || zinc_grads_is_boundary_micro(e);
}

/* ------------------------------------------------------------ the ring */

static int ring_alloc(zinc_engine *e, size_t bytes, size_t *offset, size_t *span) {
  size_t cap = e->arena_bytes;
  bytes = (size_t)zinc_round_up(bytes, 256);
  if (bytes > cap)
    return 0;
  if (e->arena_used == 0) {
    e->arena_head = e->arena_tail = 0;
  }
  size_t head = e->arena_head, tail = e->arena_tail;
  if (e->arena_used == 0 || head > tail || (head == tail && e->arena_used == 0)) {
    /* free space: [head, cap) and [0, tail) */
    if (cap - head >= bytes) {
      *offset = head;
      *span = bytes;
    } else if (tail >= bytes) {
      *offset = 0;
      *span = bytes + (cap - head); /* the skipped end counts until freed */
    } else {
      return 0;
    }
  } else {
    /* head < tail (or full): free space is [head, tail) */
    if (tail - head < bytes)
      return 0;
    *offset = head;
    *span = bytes;
  }
  e->arena_head = (*offset + bytes) % cap;
  e->arena_used += *span;
  return 1;
}

static void ring_free(zinc_engine *e, size_t span) {
  e->arena_tail = (e->arena_tail + span) % e->arena_bytes;
  e->arena_used -= span;
  if (e->arena_used == 0)
    e->arena_head = e->arena_tail = 0;
}

/* --------------------------------------------------------- setup */

/* Ring size: two buckets plus two of the largest module (one filling, one
 * in flight), never more than the whole model's gradients. */
size_t zinc_grads_ring_bytes(const zinc_engine *e) {
  size_t largest = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->grad_bytes > largest)
      largest = e->modules[mi]->grad_bytes;
  /* a bucket holds reduce_bucket_size gradient elements of the widest dtype */
  uint64_t width = e->psi[ZINC_F32] > 0 ? 4 : 2, bucket = 0;
  if (!zinc_mul_ok((uint64_t)e->cfg.reduce_bucket_size, width, &bucket))
    bucket = UINT64_MAX / 4;
  uint64_t want = 2 * bucket + 2 * (uint64_t)zinc_round_up(largest, 256);
  uint64_t all = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    all += zinc_round_up(e->modules[mi]->grad_bytes, 256);
  size_t bytes = (size_t)(want < all ? want : all);
  if (bytes < zinc_round_up(largest, 256))
    bytes = zinc_round_up(largest, 256);
  return bytes ? bytes : 256;
}

size_t zinc_grads_sum_bytes(const zinc_engine *e) {
  size_t acc = 0;
  if (e->cfg.stage > 1 || e->cfg.gradient_accumulation_steps <= 1)
    return 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++) {
      const zinc_segment *seg = &e->modules[mi]->segs[s];
      if (!seg->frozen && seg->dtype != ZINC_F32)
        acc += (size_t)seg->numel * 4;
    }
  return acc;
}

size_t zinc_grads_window_bytes(const zinc_engine *e) {
  if (e->cfg.stage < 2 || e->cfg.gradient_accumulation_steps <= 1 ||
      zinc_place_grad_location(e) == ZINC_LOC_DEVICE || !zinc_place_host_remote(e))
    return 0;
  return (size_t)e->train_shard_numel * 4;
}

int zinc_grads_plain(const zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  return !s->zero_quantized_gradients && s->communication_data_type < 0 &&
         !zinc_reduce_keeps_grads(e);
}

/* Where this micro-batch's reduced chunks are added: the window's device
 * sum, or the partition itself. */
static float *partition_sum(zinc_engine *e) {
  return e->grad_window_sum ? e->grad_window_sum : e->grad_part;
}

/* Count a write into the partition when it is host memory across PCIe. */
static void count_host_write(zinc_engine *e) {
  if (!e->grad_window_sum && zinc_place_grad_location(e) != ZINC_LOC_DEVICE &&
      zinc_place_host_remote(e))
    e->grad_host_writes++;
}

zinc_status zinc_grads_init(zinc_engine *e) {
  ZINC_CHECK(zinc_calloc((void **)&e->pending, (size_t)e->nmodules + 1, sizeof *e->pending,
                         "pending reductions"));
  ZINC_CHECK(zinc_calloc((void **)&e->ready_now, (size_t)e->nmodules + 1, 1,
                         "gradient states"));
  ZINC_CHECK(zinc_calloc((void **)&e->ring_mods, (size_t)e->nmodules + 1,
                         sizeof *e->ring_mods, "gradient ring"));
  if (e->cfg.stage <= 1) {
    size_t off = 0, acc = zinc_grads_sum_bytes(e);
    for (int mi = 0; mi < e->nmodules; mi++)
      for (int s = 0; s < e->modules[mi]->nsegs; s++) {
        zinc_segment *seg = &e->modules[mi]->segs[s];
        if (seg->frozen)
          continue;
        seg->grad = (char *)e->grad_full + off;
        off += (size_t)seg->numel * zinc_dtype_size(seg->dtype);
      }
    if (acc) {
      e->grad_acc_bytes = acc;
      ZINC_CHECK(zinc_engine_buffer_alloc(e, acc, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                          (void **)&e->grad_acc, "f32 gradient sums"));
      acc = 0;
      for (int mi = 0; mi < e->nmodules; mi++)
        for (int s = 0; s < e->modules[mi]->nsegs; s++) {
          zinc_segment *seg = &e->modules[mi]->segs[s];
          if (seg->frozen || seg->dtype == ZINC_F32)
            continue;
          seg->acc = e->grad_acc + acc;
          acc += (size_t)seg->numel;
        }
    }
  }
  size_t window = zinc_grads_window_bytes(e);
  if (window)
    ZINC_CHECK(zinc_engine_buffer_alloc(e, window, ZINC_LOC_DEVICE, ZINC_MEM_GRADS,
                                        (void **)&e->grad_window_sum, "window gradient sum"));
  ZINC_CHECK(zinc_reduce_init(e));
  return ZINC_OK; /* the bucket ring: zinc_build_buffers, with the other comm memory */
}

void zinc_grads_free(zinc_engine *e) {
  /* Requests still in flight must finish before their buffers go away. */
  for (int i = e->inflight_first; i < e->ninflight; i++) {
    if (e->inflight[i].req)
      e->dp->ops->wait(e->dp, e->inflight[i].req);
    zinc_compress_reduction_free(e, &e->inflight[i]);
  }
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    if (m->grad_area && m->area_dedicated)
      zinc_engine_buffer_free(e, m->grad_area, m->grad_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
    m->grad_area = NULL;
  }
  zinc_reduce_free(e);
  if (e->grad_acc)
    zinc_engine_buffer_free(e, e->grad_acc, e->grad_acc_bytes, ZINC_LOC_DEVICE, ZINC_MEM_GRADS);
  e->grad_acc = NULL;
  if (e->grad_window_sum)
    zinc_engine_buffer_free(e, e->grad_window_sum, zinc_grads_window_bytes(e), ZINC_LOC_DEVICE,
                            ZINC_MEM_GRADS);
  e->grad_window_sum = NULL;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++)
      e->modules[mi]->segs[s].acc = NULL;
  zinc_engine_comm_buffer_free(e, e->arena_base, e->arena_bytes, ZINC_MEM_BUFFERS, e->arena_shared);
  e->arena_base = NULL;
  free(e->pending);
  free(e->inflight);
  free(e->launched_modules);
  free(e->ready_now);
  free(e->ring_mods);
  e->ring_mods = NULL;
  e->pending = NULL;
  e->inflight = NULL;
  e->launched_modules = NULL;
  e->ready_now = NULL;
  e->ninflight = e->inflight_first = e->inflight_cap = 0;
  e->nlaunched = e->launched_cap = 0;
}

void zinc_grads_micro_begin(zinc_engine *e) {
  for (int mi = 0; mi < e->nmodules; mi++)
    e->modules[mi]->grad_state = ZINC_GRAD_NONE;
  memset(e->ready_now, 0, (size_t)e->nmodules);
  e->ready_pos = 0;
  e->npending = 0;
  e->pending_elems = 0;
}

/* ------------------------------------------------------ retirement */

/* This rank's reduced chunks of m, now in m's area, go into the f32
 * partition (overwriting in the window's first micro-batch). */
static zinc_status absorb(zinc_engine *e, zinc_module *m) {
  int overwrite = m->reduced_window != window_of(e);
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      const char *src = zinc_unit_ptr(seg->grad, u) +
                        (size_t)e->dp_rank * (size_t)u->chunk * zinc_dtype_size(u->dtype);
      if (!partition_sum(e)) { /* on NVMe */
        ZINC_CHECK(zinc_place_grad_accumulate(e, u->shard_offset, src, u->dtype, u->chunk,
                                              overwrite));
        continue;
      }
      ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream,
                                             partition_sum(e) + u->shard_offset, src, u->dtype,
                                             u->chunk, overwrite));
    }
  }
  count_host_write(e);
  m->reduced_window = window_of(e);
  return ZINC_OK;
}

/* Compressed (compress.c): m's units, summed in rank order from what r
 * received, into the f32 partition (stages 2/3) or into this rank's slot
 * of the gradient buffer (stages 0/1). */
static zinc_status absorb_compressed(zinc_engine *e, zinc_reduction *r, zinc_module *m) {
  int overwrite = m->reduced_window != window_of(e);
  if (e->cfg.stage >= 2 && !partition_sum(e)) /* the NVMe placement excludes these */
    return zinc_error(ZINC_ERR_UNSUPPORTED, "compressed gradients of module \"%s\" with the "
                      "gradient partition on NVMe", m->name);
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits; ui++)
      ZINC_CHECK(zinc_compress_reduce_unit(
          e, r, ui, zinc_unit_ptr(seg->grad, &e->units[ui]),
          e->cfg.stage >= 2 ? partition_sum(e) + e->units[ui].shard_offset : NULL, overwrite));
  }
  if (e->cfg.stage >= 2) {
    count_host_write(e);
    m->reduced_window = window_of(e);
  }
  return ZINC_OK;
}

static void area_release(zinc_engine *e, zinc_module *m) {
  if (!m->grad_area)
    return;
  if (m->area_dedicated) /* area_get's fallback: the engine's own allocation */
    zinc_engine_buffer_free(e, m->grad_area, m->grad_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  m->grad_area = NULL;
  m->area_dedicated = 0;
  for (int s = 0; s < m->nsegs; s++)
    m->segs[s].grad = NULL;
}

/* Ring areas are freed in allocation order: pop the queue's front while
 * the module holding it has retired its reduction. */
static void ring_collect(zinc_engine *e) {
  while (e->ring_first < e->ring_n) {
    zinc_module *m = e->modules[e->ring_mods[e->ring_first]];
    if (!m->area_done)
      return;
    ring_free(e, m->area_span);
    area_release(e, m);
    e->ring_first++;
  }
  e->ring_first = e->ring_n = 0;
}

static zinc_status retire_oldest(zinc_engine *e) {
  zinc_reduction *r = &e->inflight[e->inflight_first];
  zinc_status st = ZINC_OK;
  if (r->req) {
    st = zinc_engine_wait(e, e->dp, r->req);
    r->req = NULL;
  }
  if (st != ZINC_OK) {
    zinc_compress_reduction_free(e, r);
    return zinc_error_wrap(st, "reducing gradients");
  }
  for (int i = 0; i < r->nmodules; i++) {
    zinc_module *m = e->modules[e->launched_modules[r->first_module + i]];
    if (r->cx_recv) {
      st = absorb_compressed(e, r, m);
      if (st != ZINC_OK) {
        zinc_compress_reduction_free(e, r);
        return zinc_error_wrap(st, "reducing gradients");
      }
    }
    if (e->cfg.stage >= 2) {
      if (!r->cx_recv)
        ZINC_CHECK(absorb(e, m));
      if (m->area_dedicated)
        area_release(e, m);
      else
        m->area_done = 1;
    }
  }
  if (r->cx_recv) {
    /* the sums read the received bytes: done before they are freed */
    st = zinc_engine_sync(e);
    zinc_compress_reduction_free(e, r);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "reducing gradients");
  }
  e->inflight_first++;
  if (e->inflight_first == e->ninflight) {
    e->inflight_first = e->ninflight = 0;
    e->nlaunched = 0;
  }
  ring_collect(e);
  return ZINC_OK;
}

zinc_status zinc_grads_poll(zinc_engine *e) {
  while (e->inflight_first < e->ninflight) {
    zinc_reduction *r = &e->inflight[e->inflight_first];
    int done = 1;
    if (r->req) {
      zinc_status st = e->dp->ops->test(e->dp, r->req, &done);
      if (st != ZINC_OK || done)
        r->req = NULL; /* the comm consumed it (comm.h: who owns a request) */
      if (st != ZINC_OK)
        return zinc_error_wrap(st, "reducing gradients");
    }
    if (!done)
      return ZINC_OK;
    ZINC_CHECK(retire_oldest(e));
  }
  return ZINC_OK;
}

static zinc_status retire_all(zinc_engine *e) {
  while (e->inflight_first < e->ninflight)
    ZINC_CHECK(retire_oldest(e));
  return ZINC_OK;
}

/* ------------------------------------------- stage 0/1 f32 sums */

/* Stage 0/1 with f32 sums: the 16-bit regions hold one micro-batch. */
static zinc_status zero_micro_grads(zinc_engine *e, zinc_module *m) {
  for (int s = 0; s < m->nsegs; s++)
    if (m->segs[s].acc)
      ZINC_CHECK(e->dev->ops->fill_zero(e->dev, m->segs[s].grad,
                                        (size_t)m->segs[s].numel * zinc_dtype_size(m->segs[s].dtype),
                                        e->stream));
  return ZINC_OK;
}

/* Stage 0/1: this micro-batch's 16-bit gradients into the f32 sums. */
static zinc_status add_to_sums(zinc_engine *e, zinc_module *m) {
  int overwrite = m->acc_window != window_of(e);
  for (int s = 0; s < m->nsegs; s++)
    if (m->segs[s].acc)
      ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, m->segs[s].acc, m->segs[s].grad,
                                             m->segs[s].dtype, m->segs[s].numel, overwrite));
  m->acc_window = window_of(e);
  return ZINC_OK;
}

/* Stage 0/1: the window's f32 sums rounded into the 16-bit regions the
 * reduction reads. */
static zinc_status sums_to_grads(zinc_engine *e, zinc_module *m) {
  if (m->acc_window != window_of(e))
    return ZINC_OK; /* no gradient this window: the region holds zeros */
  for (int s = 0; s < m->nsegs; s++)
    if (m->segs[s].acc)
      ZINC_CHECK(e->dev->ops->cast(e->dev, e->stream, m->segs[s].grad, m->segs[s].dtype,
                                   m->segs[s].acc, ZINC_F32, m->segs[s].numel));
  return ZINC_OK;
}

/* ------------------------------------------- division around the sum */

/* DeepSpeed's division around its gradient all-reduce (engine.py's
 * allreduce_bucket, stage_1_and_2.py's gradient_reduction_w_predivide):
 *   prescale_gradients:               x 1/dp_size before the sum;
 *   else gradient_predivide_factor f: x 1/f before the sum, x f/dp_size after;
 *   (f = 1: the plain sum, then 1/dp_size).
 * zinc multiplies the buffer the reduction reads by the first factor (each
 * element in f32, rounded to the gradient's dtype, as torch's mul_) and
 * folds the second into the step's f64 scale (zinc_grads_mean_base), so
 * the sum in 16 bits sees the smaller values and no extra rounding follows
 * it. Returns 1 when nothing is divided before the sum. */
float zinc_grads_prescale(const zinc_engine *e) {
  if (e->cfg.prescale_gradients)
    return 1.0f / (float)e->dp_size;
  if (e->cfg.gradient_predivide_factor != 1.0)
    return (float)(1.0 / e->cfg.gradient_predivide_factor);
  return 1.0f;
}

/* The factor that turns the reduced gradient as stored (summed over ranks
 * after the pre-division, summed over the window's micro-batches, times
 * the loss scale) into the averaged, unscaled gradient. */
double zinc_grads_mean_base(const zinc_engine *e) {
  double loss_scale = zinc_loss_scaler_scale(&e->scaler);
  double gas = (double)e->cfg.gradient_accumulation_steps;
  if (e->cfg.prescale_gradients)
    return 1.0 / (loss_scale * gas);
  return e->cfg.gradient_predivide_factor / (loss_scale * (double)e->dp_size * gas);
}

/* Multiply the pending modules' gradients by the pre-division factor, the
 * whole of every unit (its padding holds zeros and stays zero). */
static zinc_status prescale_pending(zinc_engine *e) {
  float factor = zinc_grads_prescale(e);
  if (factor == 1.0f)
    return ZINC_OK;
  for (int i = 0; i < e->npending; i++) {
    zinc_module *m = e->modules[e->pending[i]];
    for (int s = 0; s < m->nsegs; s++) {
      const zinc_segment *seg = &m->segs[s];
      for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits; ui++) {
        const zinc_unit *u = &e->units[ui];
        ZINC_CHECK(e->dev->ops->scale(e->dev, e->stream, zinc_unit_ptr(seg->grad, u), u->dtype,
                                      (int64_t)u->chunk * e->dp_size, factor));
      }
    }
  }
  return ZINC_OK;
}

/* ------------------------------------------------------------ launch */

/* The method keeps this window's gradients rank-local (reduce.h): the
 * pending modules keep them (their f32 sums rounded in as the reduction
 * would read them). */
static zinc_status keep_local(zinc_engine *e) {
  for (int i = 0; e->grad_acc && i < e->npending; i++)
    ZINC_CHECK(sums_to_grads(e, e->modules[e->pending[i]]));
  e->npending = 0;
  e->pending_elems = 0;
  return ZINC_OK;
}

static zinc_status launch(zinc_engine *e) {
  if (e->npending == 0)
    return ZINC_OK;
  if (zinc_reduce_local_grads(e))
    return keep_local(e);
  int ncoll = 0;
  for (int i = 0; i < e->npending; i++) {
    zinc_module *m = e->modules[e->pending[i]];
    for (int s = 0; s < m->nsegs; s++)
      ncoll += m->segs[s].frozen ? 0 : m->segs[s].nunits;
  }
  zinc_coll *colls = NULL;
  zinc_status ast = ZINC_OK;
  for (int i = 0; e->grad_acc && ast == ZINC_OK && i < e->npending; i++)
    ast = sums_to_grads(e, e->modules[e->pending[i]]);
  if (ast == ZINC_OK)
    ast = prescale_pending(e);
  if (ast == ZINC_OK)
    ast = zinc_calloc((void **)&colls, (size_t)ncoll + 1, sizeof *colls, "reduction batch");
  /* record the reduction (committed below, once every rank is ready) */
  if (ast == ZINC_OK)
    ast = zinc_grow((void **)&e->inflight, &e->inflight_cap, e->ninflight + 1,
                    sizeof *e->inflight, "reductions");
  if (ast == ZINC_OK)
    ast = zinc_grow((void **)&e->launched_modules, &e->launched_cap,
                    e->nlaunched + e->npending, sizeof *e->launched_modules, "reductions");
  zinc_reduction *r = NULL;
  if (ast == ZINC_OK) {
    r = &e->inflight[e->ninflight];
    memset(r, 0, sizeof *r);
    r->first_module = e->nlaunched;
    r->nmodules = e->npending;
    memcpy(e->launched_modules + e->nlaunched, e->pending, (size_t)e->npending * sizeof(int));
  }
  /* compressed: the encoded slices and one all-to-all-v instead */
  int compressed = zinc_compress_grads(e);
  if (ast == ZINC_OK && compressed)
    ast = zinc_compress_reduce_prepare(e, r, &colls[0]);
  /* a collective point: a peer that left the module order meets it here
   * (trace.c) instead of in the reduction; so does a rank that could not
   * prepare it */
  ast = zinc_engine_agree_at(e, e->dp_host, ast, zinc_trace_key(ZINC_KEY_REDUCE, 0, 0), NULL);
  if (ast != ZINC_OK) {
    if (r)
      zinc_compress_reduction_free(e, r);
    free(colls);
    return ast;
  }
  int taken = 0; /* the method reduces these modules itself, at the flush */
  ast = zinc_reduce_take_bucket(e, e->launched_modules + e->nlaunched, r->nmodules, &taken);
  if (taken || ast != ZINC_OK) {
    free(colls);
    e->npending = 0;
    e->pending_elems = 0;
    return ast;
  }
  /* compressed: colls[0] is the exchange; else one reduce-scatter per unit */
  for (int i = 0, k = 0; !compressed && i < e->npending; i++) {
    zinc_module *m = e->modules[e->pending[i]];
    for (int s = 0; s < m->nsegs; s++) {
      const zinc_segment *seg = &m->segs[s];
      for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits; ui++) {
        const zinc_unit *u = &e->units[ui];
        char *send = zinc_unit_ptr(seg->grad, u);
        colls[k++] = (zinc_coll){
            .kind = ZINC_COLL_REDUCE_SCATTER,
            .send = send,
            .recv = send + (size_t)e->dp_rank * (size_t)u->chunk * zinc_dtype_size(u->dtype),
            .count = (size_t)u->chunk,
            .dtype = u->dtype};
      }
    }
  }
  if (compressed)
    ncoll = 1;
  e->nlaunched += e->npending;
  e->npending = 0;
  e->pending_elems = 0;

  zinc_status st;
  if (e->cfg.overlap_comm) {
    st = e->dp->ops->start(e->dp, colls, ncoll, &r->req);
  } else {
    double t0 = zinc_now();
    st = e->dp->ops->run(e->dp, colls, ncoll);
    e->t_comm_wait += zinc_now() - t0;
    r->req = NULL;
  }
  free(colls);
  if (st != ZINC_OK) {
    zinc_compress_reduction_free(e, r);
    return zinc_error_wrap(st, "starting a gradient reduction");
  }
  e->ninflight++;
  if (!e->cfg.overlap_comm)
    return retire_all(e);
  return ZINC_OK;
}

/* ------------------------------------------------------- hand-out */

static zinc_status area_get(zinc_engine *e, zinc_module *m) {
  size_t offset = 0, span = 0;
  if (!ring_alloc(e, m->grad_bytes, &offset, &span)) {
    /* Deterministic make-room: retire everything in flight, then launch
     * what is pending; only then fall back to a dedicated buffer. */
    ZINC_CHECK(retire_all(e));
    if (!ring_alloc(e, m->grad_bytes, &offset, &span) && e->npending > 0) {
      ZINC_CHECK(launch(e));
      ZINC_CHECK(retire_all(e));
    }
    if (!span && !ring_alloc(e, m->grad_bytes, &offset, &span)) {
      if (!e->dedicated_warned) {
        zinc_log0(ZINC_LOG_WARN, "gradient buckets full (%zu bytes) with modules still "
                  "accumulating; giving \"%s\" its own buffer (report modules ready sooner "
                  "or raise reduce_bucket_size)", e->arena_bytes, m->name);
        e->dedicated_warned = 1;
      }
      /* Rank-local memory (zeroed), freed with the engine's own free when
       * the reduction retires: comm-shared memory would need a collective
       * free, and retirement under overlap_comm is not at the same call on
       * every rank; the comm stages a reduction from it through its
       * scratch window (a copy, on this fallback only). */
      ZINC_CHECK(zinc_engine_buffer_alloc(e, m->grad_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS,
                                          &m->grad_area, "dedicated gradient area"));
      m->area_dedicated = 1;
      m->area_span = 0;
      return ZINC_OK;
    }
  }
  m->grad_area = (char *)e->arena_base + offset;
  m->area_offset = offset;
  m->area_span = span;
  m->area_dedicated = 0;
  m->area_done = 0;
  e->ring_mods[e->ring_n++] = m->index;
  return e->dev->ops->fill_zero(e->dev, m->grad_area, m->grad_bytes, e->stream);
}

/* Stage 0/1: zero m's gradients for the accumulation window now open. */
static zinc_status zero_window_grads(zinc_engine *e, zinc_module *m) {
  for (int s = 0; s < m->nsegs; s++)
    if (!m->segs[s].frozen)
      ZINC_CHECK(e->dev->ops->fill_zero(e->dev, m->segs[s].grad,
                                      (size_t)m->segs[s].numel * zinc_dtype_size(m->segs[s].dtype),
                                      e->stream));
  m->grad_window = window_of(e);
  return ZINC_OK;
}

zinc_status zinc_grads_open(zinc_engine *e, zinc_module *m) {
  if (e->cfg.stage <= 1) {
    if (m->grad_window != window_of(e)) {
      ZINC_CHECK(zero_window_grads(e, m));
    } else if (e->grad_acc && m->grad_micro != e->micro_step) {
      ZINC_CHECK(zero_micro_grads(e, m));
    }
    m->grad_micro = e->micro_step;
  } else {
    ZINC_CHECK(area_get(e, m));
    size_t off = 0;
    for (int s = 0; s < m->nsegs; s++) {
      if (m->segs[s].frozen)
        continue;
      m->segs[s].grad = (char *)m->grad_area + off;
      off += (size_t)m->segs[s].numel * zinc_dtype_size(m->segs[s].dtype);
    }
  }
  m->grad_state = ZINC_GRAD_OPEN;
  return ZINC_OK;
}

static zinc_status enqueue(zinc_engine *e, zinc_module *m) {
  e->pending[e->npending++] = m->index;
  e->pending_elems += m->numel;
  if (e->pending_elems >= e->cfg.reduce_bucket_size && !zinc_reduce_holds_window(e))
    return launch(e); /* (a method may reduce the window as one, at the flush) */
  return ZINC_OK;
}

/* Push ready modules to the pending bucket in the recorded order. */
static zinc_status advance(zinc_engine *e) {
  while (e->ready_pos < e->nready_seq && e->ready_now[e->ready_seq[e->ready_pos]]) {
    ZINC_CHECK(enqueue(e, e->modules[e->ready_seq[e->ready_pos]]));
    e->ready_pos++;
  }
  return ZINC_OK;
}

zinc_status zinc_grads_ready(zinc_engine *e, zinc_module *m) {
  if (m->grad_state == ZINC_GRAD_NONE)
    ZINC_CHECK(zinc_grads_open(e, m)); /* reported without gradients: zeros */
  m->grad_state = ZINC_GRAD_READY;
  e->ready_now[m->index] = 1;
  return ZINC_OK;
}

zinc_status zinc_grads_replay_ready(zinc_engine *e, zinc_module *m) {
  ZINC_CHECK(zinc_grads_ready(e, m));
  if (e->grad_acc)
    ZINC_CHECK(add_to_sums(e, m));
  if (!reduce_this_micro(e))
    return ZINC_OK;
  if (e->recording)
    ZINC_CHECK(enqueue(e, m));
  else
    ZINC_CHECK(advance(e));
  return zinc_grads_poll(e);
}

zinc_status zinc_grads_flush(zinc_engine *e) {
  /* Stages 0/1 reduce at the window's last micro-batch the modules that
   * report ready in it; a module that took gradients earlier in the window
   * and sat this one out (a dropped layer, an unused expert) is reduced
   * too, in module order on every rank, or the step would use this rank's
   * own unreduced sum. */
  if (e->cfg.stage <= 1 && zinc_grads_is_boundary_micro(e))
    for (int mi = 0; mi < e->nmodules; mi++)
      if (e->modules[mi]->grad_window == window_of(e) && !e->ready_now[mi])
        ZINC_CHECK(enqueue(e, e->modules[mi]));
  ZINC_CHECK(launch(e));
  ZINC_CHECK(retire_all(e));
  ZINC_CHECK(zinc_reduce_flush(e));
  /* Modules that produced no gradient this window hold zeros. */
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    if (e->cfg.stage >= 2) {
      if (m->reduced_window != window_of(e))
        for (int s = 0; s < m->nsegs; s++) {
          const zinc_segment *seg = &m->segs[s];
          for (int ui = seg->first_unit; !seg->frozen && ui < seg->first_unit + seg->nunits;
               ui++)
            if (!partition_sum(e)) /* on NVMe */
              ZINC_CHECK(zinc_place_grad_accumulate(e, e->units[ui].shard_offset, NULL,
                                                    ZINC_F32, e->units[ui].chunk, 1));
            else
              ZINC_CHECK(e->dev->ops->fill_zero(e->dev, partition_sum(e) + e->units[ui].shard_offset,
                                              (size_t)e->units[ui].chunk * 4, e->stream));
        }
      m->reduced_window = window_of(e);
      area_release(e, m);
    } else if (zinc_grads_is_boundary_micro(e) && m->grad_window != window_of(e)) {
      ZINC_CHECK(zero_window_grads(e, m));
    }
  }
  /* the window's sum to the host partition, once (queued on the stream the
   * step's readers wait for) */
  if (e->grad_window_sum && zinc_grads_is_boundary_micro(e)) {
    if (zinc_place_grad_location(e) == ZINC_LOC_NVME)
      ZINC_CHECK(zinc_place_grad_accumulate(e, 0, e->grad_window_sum, ZINC_F32,
                                            e->train_shard_numel, 1));
    else
      ZINC_CHECK(e->dev->ops->copy(e->dev, e->grad_part, e->grad_window_sum,
                                   (size_t)e->train_shard_numel * 4, e->stream));
    e->grad_host_writes++;
  }
  e->ring_first = e->ring_n = 0;
  e->arena_used = 0;
  e->arena_head = e->arena_tail = 0;
  return ZINC_OK;
}

const void *zinc_grads_chunk(const zinc_engine *e, int unit, int r, int *dtype) {
  const zinc_unit *u = &e->units[unit];
  if (e->cfg.stage >= 2) {
    *dtype = ZINC_F32;
    return e->grad_part ? e->grad_part + u->shard_offset : NULL; /* NULL: on NVMe */
  }
  const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
  *dtype = u->dtype;
  return zinc_unit_ptr(seg->grad, u) + (size_t)r * (size_t)u->chunk * zinc_dtype_size(u->dtype);
}
