/*
 * hpz.c — hpZ, ZeRO++'s secondary parameter partition (stage 3,
 * zero_hpz_partition_size h > 1): the group size, the partition's layout,
 * and the copy of this rank's group slices out of a gathered module.
 *
 * A module's first gather after the shards changed runs over every
 * data-parallel rank, and when it completes each rank copies its group
 * slice of every unit into the secondary partition (engine.h). Every
 * later gather of the module, until the next
 * step or load, all-gathers those slices inside the group of h ranks: the
 * backward pass's fetches (and its prefetches, and a later micro-batch's
 * forward) never leave the node. Whether a gather uses the slices depends
 * only on the replay (the same on every rank) and the slices are the
 * gathered bits, so the result is the same bits as without hpZ.
 */
#include "engine/engine.h"
#include "engine/stage3/stage3.h"

zinc_status zinc_hpz_size(const zinc_settings *cfg, int dp_size, int *out) {
  int h = cfg->zero_hpz_partition_size;
  *out = 1;
  if (cfg->stage < 3 || h <= 1)
    return ZINC_OK; /* below stage 3 the config reader warned */
  if (h > dp_size || dp_size % h != 0)
    return zinc_error(ZINC_ERR_CONFIG, "zero_optimization.zero_hpz_partition_size is %d but "
                      "there are %d data-parallel ranks: it must divide the data-parallel "
                      "size; set it to the ranks of one node if that divides %d (any "
                      "divisor works), or 1 to turn hpZ off", h, dp_size, dp_size);
  *out = h;
  return ZINC_OK;
}

/* The slice of a unit a group rank holds: elements per group rank. */
int64_t zinc_hpz_slice_numel(const zinc_engine *e, const zinc_unit *u) {
  return u->chunk * (e->dp_size / e->hpz);
}

size_t zinc_stage3_secondary_layout(zinc_engine *e) {
  size_t bytes = 0;
  for (int ui = 0; ui < e->nunits; ui++) {
    zinc_unit *u = &e->units[ui];
    u->secondary_byte = bytes;
    if (e->hpz > 1 && !e->modules[u->module]->segs[u->segment].persistent)
      bytes += (size_t)zinc_hpz_slice_numel(e, u) * zinc_dtype_size(u->dtype);
  }
  return bytes;
}

int zinc_hpz_uses_secondary(const zinc_engine *e, const zinc_module *m) {
  return e->hpz > 1 && m->secondary == ZINC_SECONDARY_VALID;
}

/* A gather over every rank completed: keep this rank's group slice of
 * every unit (hpZ). */
zinc_status zinc_hpz_secondary_fill(zinc_engine *e, zinc_module *m) {
  int l = e->dp_rank % e->hpz;
  for (int s = 0; s < m->nsegs; s++) {
    const zinc_segment *seg = &m->segs[s];
    if (seg->persistent)
      continue;
    char *base = (char *)m->gathered + seg->gather_offset;
    for (int ui = seg->first_unit; ui < seg->first_unit + seg->nunits; ui++) {
      const zinc_unit *u = &e->units[ui];
      size_t bytes = (size_t)zinc_hpz_slice_numel(e, u) * zinc_dtype_size(u->dtype);
      ZINC_CHECK(e->dev->ops->copy(e->dev, (char *)e->param_secondary + u->secondary_byte,
                                   zinc_unit_ptr(base, u) + (size_t)l * bytes, bytes,
                                   e->stream));
    }
  }
  return ZINC_OK;
}
