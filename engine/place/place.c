/*
 * place.c — the placement table, the choice of a row, and the dispatch
 * wrappers of place.h: each calls the engine's row's hook, or the device
 * row's where the row leaves it unset, so that no caller tests a hook or
 * asks which placement is on.
 */
#include <stdlib.h>

#include "base/env.h"
#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

/* First match wins: the order is the precedence (place.h). Partial before
 * nvme_param: the pair is refused by partial's init, as it always was. */
static const zinc_placement *const table[] = {
    &zinc_place_nvme_row, &zinc_place_partial_row, &zinc_place_nvme_param_row,
    &zinc_place_cpu_row, &zinc_place_device_row,
};

const zinc_placement *zinc_place_row(const zinc_engine *e) {
  if (e->pl)
    return e->pl->ops;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!table[i]->selects || table[i]->selects(e))
      return table[i];
  return &zinc_place_device_row;
}

/* The hook of the engine's row, or the device row's. */
#define HOOK(e, h) (zinc_place_row(e)->h ? zinc_place_row(e)->h : zinc_place_device_row.h)

void zinc_place_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  HOOK(e, sizes)(e, bytes);
}

zinc_status zinc_place_init(zinc_engine *e) {
  const zinc_placement *row = zinc_place_row(e);
  ZINC_CHECK(zinc_calloc((void **)&e->pl, 1, sizeof *e->pl, "placement state"));
  e->pl->ops = row;
  return HOOK(e, init)(e);
}

void zinc_place_free(zinc_engine *e) {
  if (!e->pl)
    return;
  HOOK(e, free)(e);
  free(e->pl);
  e->pl = NULL;
}

zinc_status zinc_place_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                             const zinc_opt_seg *segs, int nseg, int pass, double *norms) {
  return HOOK(e, optim)(e, c, ncoef, segs, nseg, pass, norms);
}

int zinc_place_grad_location(const zinc_engine *e) { return HOOK(e, grad_location)(e); }

zinc_status zinc_place_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst) {
  return HOOK(e, grad_read)(e, off, count, dst);
}

zinc_status zinc_place_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                       int64_t count, int overwrite) {
  return HOOK(e, grad_accumulate)(e, off, src, dtype, count, overwrite);
}

void *zinc_place_param_buffer_take(zinc_engine *e, size_t bytes) {
  return HOOK(e, param_buffer_take)(e, bytes);
}

void zinc_place_param_buffer_give(zinc_engine *e, void *buf) {
  HOOK(e, param_buffer_give)(e, buf);
}

int zinc_place_host_remote(const zinc_engine *e) {
  return (e->dev ? e->dev->ops->is_gpu : e->sized_as_gpu) ||
         zinc_env_flag("ZINC_OFFLOAD_STAGING", 0);
}

zinc_status zinc_place_opt_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                              int write) {
  return HOOK(e, opt_io)(e, array, off, count, data, write);
}

zinc_status zinc_place_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data,
                                 int write) {
  return HOOK(e, pshard_io)(e, off, bytes, data, write);
}
