/*
 * grid.c — the 3D grid's arithmetic (grid.h): sizes checked,
 * coordinates and back, the colors that split the world into groups.
 *
 * Invariants: for every rank r of a grid made here,
 * zinc_grid_rank(g, zinc_grid_coord(g, r)) == r; a group's members
 * (equal color) differ only in their own axis, and ordered by world rank
 * they are ordered along it (a pipeline group by stage).
 */
#include "base/base.h"
#include "engine/grid.h"

zinc_status zinc_grid_make(int world, int pp, int tp, zinc_grid *out) {
  if (pp < 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_options.pipeline_parallel_size is %d: give the "
                      "number of pipeline stages (>= 1; 0 or 1 for no pipeline)", pp);
  int stages = pp == 0 ? 1 : pp;
  if (stages == 1) { /* the model-parallel check as it always was */
    if (tp < 1 || world % tp != 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_options.model_parallel_size is %d but the "
                        "world has %d ranks: it must be >= 1 and divide the world size",
                        tp, world);
  } else if (tp < 1 || world % stages != 0 || (world / stages) % tp != 0) {
    return zinc_error(ZINC_ERR_INVALID, "zinc_options.pipeline_parallel_size %d x "
                      "model_parallel_size %d does not divide the world of %d ranks: the "
                      "world is pipeline x data-parallel x model-parallel ranks, so launch "
                      "a multiple of %lld ranks or change the sizes", stages, tp, world,
                      tp >= 1 ? (long long)stages * tp : (long long)stages);
  }
  out->world = world;
  out->pp = stages;
  out->tp = tp;
  out->dp = world / stages / tp;
  return ZINC_OK;
}

zinc_coord zinc_grid_coord(const zinc_grid *g, int rank) {
  zinc_coord c;
  c.tp = rank % g->tp;
  c.dp = rank / g->tp % g->dp;
  c.stage = rank / g->tp / g->dp;
  return c;
}

int zinc_grid_rank(const zinc_grid *g, zinc_coord c) {
  if (c.stage < 0 || c.stage >= g->pp || c.dp < 0 || c.dp >= g->dp || c.tp < 0 ||
      c.tp >= g->tp)
    return -1;
  return (c.stage * g->dp + c.dp) * g->tp + c.tp;
}

int zinc_grid_mp_color(const zinc_grid *g, int rank) { return rank / g->tp; }

int zinc_grid_dp_color(const zinc_grid *g, int rank) {
  zinc_coord c = zinc_grid_coord(g, rank);
  return c.stage * g->tp + c.tp;
}

int zinc_grid_pp_color(const zinc_grid *g, int rank) {
  zinc_coord c = zinc_grid_coord(g, rank);
  return c.dp * g->tp + c.tp;
}
