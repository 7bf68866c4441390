/*
 * access.c — the optimizer state and the stage-3 parameter partition,
 * wherever they live, to and from host memory; every reader and writer
 * that does not stream them through a step's own buffers (the build's
 * initial values, state.c's full-state access, checkpoints, safetensors,
 * the NVMe step's parameter write-back) goes through these:
 *   zinc_opt_read/zinc_opt_write        fp32 master, exp_avg, exp_avg_sq
 *   zinc_pshard_read/zinc_pshard_write  the stage-3 parameter partition
 *   zinc_put_owned_piece                a piece of both at once
 *   zinc_frozen_io                      a frozen unit's "optimizer" elements:
 *                                       its parameter memory
 * They check what every placement shares (the array kept, a frozen
 * unit's elements) and leave the bytes to the placement's opt_io and
 * pshard_io (place.h): in memory (device.c), split between device and host
 * (partial.c), or on NVMe with the host cache in front of the parameter
 * partition (nvme.c, pcache.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

static const char *array_name(int array) {
  return array == 0 ? "master" : array == 1 ? "exp_avg" : array == 2 ? "exp_avg_sq" : "?";
}

/* ZINC_ERR_INVALID unless the engine keeps optimizer array `array`. */
static zinc_status array_kept(const zinc_engine *e, int array, int write) {
  if (array < 0 || array > 2)
    return zinc_error(ZINC_ERR_INVALID, "optimizer state array %d: 0 (master), 1 (exp_avg) "
                      "or 2 (exp_avg_sq)", array);
  int slot = array == 1 ? ZINC_OPT_SLOT_EXP_AVG : array == 2 ? ZINC_OPT_SLOT_EXP_AVG_SQ : 0;
  if (slot && !(e->opt_slots & slot))
    return zinc_error(ZINC_ERR_INVALID, "%s optimizer state \"%s\": optimizer %s keeps no %s",
                      write ? "writing" : "reading", array_name(array),
                      zinc_opt_kind_name(e->optim.kind), array_name(array));
  return ZINC_OK;
}

float *zinc_master_in_params(const zinc_engine *e, int64_t x, int64_t *chunk_left) {
  /* the unit holding optimizer element x (opt offsets grow with units) */
  int lo = 0, hi = e->nunits - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (zinc_layout_opt_offset(e, &e->units[mid], 0) <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const zinc_unit *u = &e->units[lo];
  int64_t in_unit = x - zinc_layout_opt_offset(e, u, 0); /* stage 0: r*chunk + i */
  if (e->cfg.stage != 0)
    in_unit += (int64_t)e->dp_rank * u->chunk;
  *chunk_left = u->chunk - in_unit % u->chunk;
  if (e->cfg.stage == 3)
    return (float *)((char *)e->param_shard + u->shard_byte) + (in_unit - (int64_t)e->dp_rank * u->chunk);
  const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
  return (float *)zinc_unit_ptr(seg->full, u) + in_unit;
}

zinc_status zinc_opt_read(zinc_engine *e, int array, int64_t off, int64_t count, float *dst) {
  if (count <= 0)
    return ZINC_OK;
  if (off >= e->opt_numel) /* a frozen parameter's: its parameter memory */
    return zinc_frozen_io(e, array, off, count, dst, 0);
  ZINC_CHECK(array_kept(e, array, 0));
  return zinc_place_opt_io(e, array, off, count, dst, 0);
}

zinc_status zinc_opt_write(zinc_engine *e, int array, int64_t off, int64_t count,
                           const float *src) {
  if (count <= 0)
    return ZINC_OK;
  if (off >= e->opt_numel) /* a frozen parameter's: its parameter memory */
    return zinc_frozen_io(e, array, off, count, (float *)src, 1);
  ZINC_CHECK(array_kept(e, array, 1));
  return zinc_place_opt_io(e, array, off, count, (float *)src, 1);
}

zinc_status zinc_pshard_read(zinc_engine *e, size_t off, size_t bytes, void *dst) {
  return bytes ? zinc_place_pshard_io(e, off, bytes, dst, 0) : ZINC_OK;
}

zinc_status zinc_pshard_write(zinc_engine *e, size_t off, size_t bytes, const void *src) {
  return bytes ? zinc_place_pshard_io(e, off, bytes, (void *)src, 1) : ZINC_OK;
}

zinc_status zinc_frozen_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                           int write) {
  if (array != 0) { /* a frozen parameter has no moments */
    if (!write)
      memset(data, 0, (size_t)count * sizeof *data);
    return ZINC_OK;
  }
  /* the frozen unit holding optimizer element off (offsets grow with units) */
  int lo = e->ntrain_units, hi = e->nunits - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (zinc_layout_opt_offset(e, &e->units[mid], 0) <= off)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo >= e->nunits || off < zinc_layout_opt_offset(e, &e->units[lo], 0))
    return zinc_error(ZINC_ERR_INVALID, "optimizer element %lld is past the model's %lld",
                      (long long)off, (long long)e->opt_numel);
  const zinc_unit *u = &e->units[lo];
  int64_t in_unit = off - zinc_layout_opt_offset(e, u, 0); /* stage 0: r*chunk + i */
  if (e->cfg.stage != 0)
    in_unit += (int64_t)e->dp_rank * u->chunk;
  if (in_unit % u->chunk + count > u->chunk)
    return zinc_error(ZINC_ERR_INVALID, "optimizer elements %lld..%lld cross a chunk of a "
                      "frozen unit", (long long)off, (long long)(off + count));
  size_t es = zinc_dtype_size(u->dtype), bytes = (size_t)count * es;
  void *host = NULL;
  ZINC_CHECK(zinc_calloc(&host, (size_t)count, es, "frozen parameter staging"));
  zinc_status st = ZINC_OK;
  const zinc_segment *seg = &e->modules[u->module]->segs[u->segment];
  /* stage 3 keeps the parameter in the partition (and, for a persistent
   * segment, whole: gathered again from the partition after a write) */
  size_t pbyte = u->shard_byte + (size_t)(in_unit - (int64_t)e->dp_rank * u->chunk) * es;
  char *full = e->cfg.stage == 3 ? NULL : zinc_unit_ptr(seg->full, u) + (size_t)in_unit * es;
  if (write) {
    for (int64_t i = 0; i < count; i++)
      zinc_store_from_f32(host, i, u->dtype, data[i]);
    st = full ? e->dev->ops->copy(e->dev, full, host, bytes, e->stream)
              : zinc_pshard_write(e, pbyte, bytes, host);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e);
  } else {
    st = full ? e->dev->ops->copy(e->dev, host, full, bytes, e->stream)
              : zinc_pshard_read(e, pbyte, bytes, host);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e);
    for (int64_t i = 0; st == ZINC_OK && i < count; i++)
      data[i] = zinc_load_as_f32(host, i, u->dtype);
  }
  free(host);
  return st;
}

/* The piece's part of the optimizer state and (stage 3) the partition. */
zinc_status zinc_put_owned_piece(zinc_engine *e, const zinc_unit *u, int r, int64_t chunk_off,
                                 const float *src, int64_t len, int master, void *scratch) {
  if (master && (e->cfg.stage == 0 || r == e->dp_rank))
    ZINC_CHECK(zinc_opt_write(e, 0, zinc_layout_opt_offset(e, u, r) + chunk_off, len, src));
  if (e->cfg.stage == 3 && r == e->dp_rank) {
    for (int64_t i = 0; i < len; i++)
      zinc_store_from_f32(scratch, i, u->dtype, src[i]);
    ZINC_CHECK(zinc_pshard_write(e, u->shard_byte + (size_t)chunk_off * zinc_dtype_size(u->dtype),
                                 (size_t)len * zinc_dtype_size(u->dtype), scratch));
  }
  return ZINC_OK;
}
