/*
 * activations.c — activation checkpoints (DeepSpeed's
 * activation_checkpointing) for C trainers.
 *
 * A checkpoint is a layer's input, identical on every rank of a
 * model-parallel group. Stored, by the settings:
 *  - whole, or (partition_activations, mp > 1) only this rank's slice:
 *    slice r of `bytes` is [r*piece, min((r+1)*piece, bytes)) with
 *    piece = ceil(bytes / mp), so sizes need not divide;
 *  - on the device, or (cpu_checkpointing) in pinned host memory;
 *  - in its own allocation, or (contiguous_memory_optimization) in a slot
 *    of one buffer of number_checkpoints slots allocated at the first save.
 * Restore copies this rank's slice into its place in the trainer's buffer,
 * then all-gathers the slices in place across the group (uneven counts).
 *
 * Every stored byte is accounted under ZINC_MEM_ACTIVATIONS at its location.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/activations.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/support.h"

typedef struct {
  void *data;              /* the stored slice (or whole), NULL if free */
  size_t stored;           /* bytes stored here */
  size_t bytes;            /* the whole activation's size */
  int dedicated;           /* own allocation (not a contiguous slot) */
  zinc_comm_req *req;      /* restore in flight */
  size_t *counts, *displs; /* the restore's all-gatherv layout (mp entries) */
} act_entry;

struct zinc_act_store {
  act_entry *entries;
  int nentries;
  void *contiguous;        /* number_checkpoints * slot bytes */
  size_t slot;
  int nslots;
  int location;
  zinc_activation_stats stats;
};

static int partitioned(const zinc_engine *e) {
  return e->cfg.ac_partition_activations && e->mp_size > 1;
}

static void slice_of(const zinc_engine *e, size_t bytes, int r, size_t *off, size_t *len) {
  if (!partitioned(e)) {
    *off = 0;
    *len = bytes;
    return;
  }
  size_t piece = (bytes + (size_t)e->mp_size - 1) / (size_t)e->mp_size;
  size_t a = piece * (size_t)r, b = a + piece;
  if (a > bytes)
    a = bytes;
  if (b > bytes)
    b = bytes;
  *off = a;
  *len = b - a;
}

static zinc_status store_get(zinc_engine *e, struct zinc_act_store **out) {
  if (!e->acts) {
    ZINC_CHECK(zinc_calloc((void **)&e->acts, 1, sizeof *e->acts, "activation checkpoints"));
    e->acts->location = e->cfg.ac_cpu_checkpointing ? ZINC_LOC_HOST : ZINC_LOC_DEVICE;
  }
  *out = e->acts;
  return ZINC_OK;
}

static zinc_status entry_get(zinc_engine *e, int id, act_entry **out) {
  struct zinc_act_store *s;
  ZINC_CHECK(store_get(e, &s));
  if (id < 0)
    return zinc_error(ZINC_ERR_INVALID, "activation checkpoint id %d is negative", id);
  if (id >= s->nentries) {
    int n = id + 16;
    act_entry *ne = realloc(s->entries, (size_t)n * sizeof *ne);
    if (!ne)
      return zinc_error(ZINC_ERR_NOMEM, "out of memory for activation checkpoint %d", id);
    memset(ne + s->nentries, 0, (size_t)(n - s->nentries) * sizeof *ne);
    s->entries = ne;
    s->nentries = n;
  }
  *out = &s->entries[id];
  return ZINC_OK;
}

static void entry_drop(zinc_engine *e, act_entry *a) {
  struct zinc_act_store *s = e->acts;
  if (a->req) {
    e->mp->ops->wait(e->mp, a->req);
    a->req = NULL;
  }
  if (a->data && a->dedicated)
    zinc_engine_buffer_free(e, a->data, a->stored, s->location, ZINC_MEM_ACTIVATIONS);
  free(a->counts);
  free(a->displs);
  memset(a, 0, sizeof *a);
}

static void boundary_sync(zinc_engine *e) {
  if (e->cfg.ac_synchronize_checkpoint_boundary)
    zinc_engine_sync(e);
}

zinc_status zinc_activation_save(zinc_engine *e, int id, const void *data, size_t bytes) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_activation_save"));
  if (!data && bytes)
    return zinc_error(ZINC_ERR_INVALID, "zinc_activation_save(%d): data is NULL", id);
  double t0 = zinc_now();
  act_entry *a;
  ZINC_CHECK(entry_get(e, id, &a));
  struct zinc_act_store *s = e->acts;
  entry_drop(e, a);
  size_t off, len;
  slice_of(e, bytes, e->mp_rank, &off, &len);
  size_t piece = partitioned(e) ? (bytes + (size_t)e->mp_size - 1) / (size_t)e->mp_size : bytes;
  if (e->cfg.ac_contiguous_memory_optimization) {
    if (!s->contiguous) {
      s->nslots = e->cfg.ac_number_checkpoints > 0 ? (int)e->cfg.ac_number_checkpoints : 0;
      if (s->nslots <= 0)
        return zinc_error(ZINC_ERR_CONFIG, "activation_checkpointing.contiguous_memory_"
                          "optimization needs number_checkpoints (the number of layers "
                          "checkpointed per forward pass)");
      s->slot = (size_t)zinc_round_up(piece ? piece : 1, 64);
      ZINC_CHECK(zinc_engine_buffer_alloc(e, s->slot * (size_t)s->nslots, s->location,
                                          ZINC_MEM_ACTIVATIONS, &s->contiguous,
                                          "contiguous activation checkpoints"));
      s->stats.allocations++;
    }
    if (id >= s->nslots)
      return zinc_error(ZINC_ERR_INVALID, "zinc_activation_save(%d): contiguous checkpoints "
                        "have %d slots (number_checkpoints); use ids 0..%d", id, s->nslots,
                        s->nslots - 1);
    if (piece > s->slot)
      return zinc_error(ZINC_ERR_INVALID, "zinc_activation_save(%d): %zu bytes do not fit the "
                        "contiguous slots of %zu bytes sized by the first save; checkpoints "
                        "must not grow", id, bytes, s->slot);
    a->data = (char *)s->contiguous + s->slot * (size_t)id;
    a->dedicated = 0;
  } else {
    ZINC_CHECK(zinc_engine_buffer_alloc(e, len ? len : 1, s->location, ZINC_MEM_ACTIVATIONS,
                                        &a->data, "activation checkpoint"));
    a->dedicated = 1;
    s->stats.allocations++;
  }
  a->stored = len ? len : 1;
  a->bytes = bytes;
  if (len)
    ZINC_CHECK(e->dev->ops->copy(e->dev, a->data, (const char *)data + off, len, e->stream));
  boundary_sync(e);
  s->stats.saves++;
  s->stats.saved_bytes += len;
  if (e->cfg.ac_profile)
    s->stats.save_s += zinc_now() - t0;
  return ZINC_OK;
}

/* What a restore does on this rank before the all-gather: its checks, its
 * slice copied into place, the all-gather's counts. */
static zinc_status restore_local(zinc_engine *e, int id, void *dst, size_t bytes,
                                 act_entry **out, size_t *off, size_t *len) {
  act_entry *a;
  ZINC_CHECK(entry_get(e, id, &a));
  *out = a;
  if (!a->data)
    return zinc_error(ZINC_ERR_INVALID, "zinc_activation_restore(%d): no checkpoint saved "
                      "under this id (or it was freed)", id);
  if (bytes != a->bytes || (!dst && bytes))
    return zinc_error(ZINC_ERR_INVALID, "zinc_activation_restore(%d): %zu bytes asked, %zu "
                      "saved", id, bytes, a->bytes);
  if (a->req)
    return zinc_error(ZINC_ERR_INVALID, "zinc_activation_restore(%d): a restore of it is "
                      "already in flight", id);
  slice_of(e, bytes, e->mp_rank, off, len);
  if (*len)
    ZINC_CHECK(e->dev->ops->copy(e->dev, (char *)dst + *off, a->data, *len, e->stream));
  if (!partitioned(e))
    return ZINC_OK;
  /* no host sync: the all-gatherv runs after the copy queued on the
   * compute stream (comm.h, "Streams") */
  if (!a->counts) {
    a->counts = calloc((size_t)e->mp_size, sizeof *a->counts);
    a->displs = calloc((size_t)e->mp_size, sizeof *a->displs);
    if (!a->counts || !a->displs)
      return zinc_error(ZINC_ERR_NOMEM, "zinc_activation_restore(%d): no host memory for "
                        "the all-gather's %d counts", id, e->mp_size);
  }
  for (int r = 0; r < e->mp_size; r++)
    slice_of(e, bytes, r, &a->displs[r], &a->counts[r]);
  return ZINC_OK;
}

zinc_status zinc_activation_restore_start(zinc_engine *e, int id, void *dst, size_t bytes) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_activation_restore"));
  double t0 = zinc_now();
  act_entry *a = NULL;
  size_t off = 0, len = 0;
  zinc_status st = restore_local(e, id, dst, bytes, &a, &off, &len);
  if (partitioned(e)) {
    /* compute locally, agree, then the collective (engine/failure.c): a
     * rank refused here must not leave its peers in the all-gather */
    ZINC_CHECK(zinc_engine_agree(e, e->mp_host, st));
    zinc_coll c = {.kind = ZINC_COLL_ALLGATHERV, .send = (char *)dst + off, .recv = dst,
                   .count = len, .dtype = ZINC_DT_U8, .counts = a->counts, .displs = a->displs};
    st = e->mp->ops->start(e->mp, &c, 1, &a->req);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "restoring activation checkpoint %d", id);
  } else if (st != ZINC_OK) {
    return st;
  }
  struct zinc_act_store *s = e->acts;
  s->stats.restores++;
  s->stats.restored_bytes += bytes;
  if (e->cfg.ac_profile)
    s->stats.restore_s += zinc_now() - t0;
  return ZINC_OK;
}

zinc_status zinc_activation_wait(zinc_engine *e, int id) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_activation_wait"));
  act_entry *a;
  ZINC_CHECK(entry_get(e, id, &a));
  double t0 = zinc_now();
  if (a->req) {
    zinc_comm_req *req = a->req;
    a->req = NULL;
    double w0 = e->t_comm_wait;
    zinc_status st = zinc_engine_wait(e, e->mp, req);
    e->t_inner_wait += e->t_comm_wait - w0; /* a restore: the model's own wait */
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "restoring activation checkpoint %d", id);
  }
  ZINC_CHECK(zinc_engine_sync(e));
  boundary_sync(e);
  if (e->cfg.ac_profile)
    e->acts->stats.restore_s += zinc_now() - t0;
  return ZINC_OK;
}

zinc_status zinc_activation_restore(zinc_engine *e, int id, void *dst, size_t bytes) {
  ZINC_CHECK(zinc_activation_restore_start(e, id, dst, bytes));
  return zinc_activation_wait(e, id);
}

zinc_status zinc_activation_free(zinc_engine *e, int id) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_activation_free"));
  act_entry *a;
  ZINC_CHECK(entry_get(e, id, &a));
  entry_drop(e, a);
  return ZINC_OK;
}

zinc_status zinc_activation_stats_get(const zinc_engine *e, zinc_activation_stats *out) {
  if (!e || !out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_activation_stats_get: NULL argument");
  zinc_activation_stats s = ZINC_ACTIVATION_STATS_INIT;
  if (e->acts)
    s = e->acts->stats;
  s.size = sizeof s;
  return zinc_abi_write(out, &s, sizeof s, "zinc_activation_stats",
                        "ZINC_ACTIVATION_STATS_INIT");
}

void zinc_activation_store_destroy(zinc_engine *e) {
  struct zinc_act_store *s = e->acts;
  if (!s)
    return;
  for (int i = 0; i < s->nentries; i++)
    entry_drop(e, &s->entries[i]);
  if (s->contiguous)
    zinc_engine_buffer_free(e, s->contiguous, s->slot * (size_t)s->nslots, s->location,
                            ZINC_MEM_ACTIVATIONS);
  free(s->entries);
  free(s);
  e->acts = NULL;
}

zinc_status zinc_mp_allreduce_sum(zinc_engine *e, float *data, int64_t n) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_mp_allreduce_sum"));
  if (n < 0 || (!data && n > 0))
    return zinc_error(ZINC_ERR_INVALID, "zinc_mp_allreduce_sum: NULL data or n < 0");
  if (e->mp_size == 1 || n == 0)
    return ZINC_OK;
  ZINC_CHECK(zinc_engine_sync(e));
  double t0 = zinc_now();
  zinc_status st = zinc_comm_allreduce(e->mp, data, data, (size_t)n, ZINC_F32, ZINC_OP_SUM);
  double dt = zinc_now() - t0;
  e->t_comm_wait += dt;
  e->t_inner_wait += dt; /* the trainer's own sum, not a reduction's wait */
  return st;
}
