/*
 * grid.h — the grid of ranks of 3D parallelism: pipeline stages x
 * data-parallel ranks x model-parallel (tensor-parallel) ranks, numbered
 * in Megatron-LM's order (include/zinc.h, "Pipeline parallelism"):
 *
 *     world rank = (stage * dp + dp_rank) * tp + tp_rank
 *
 * Pure functions of the sizes: no comm, no engine, no I/O, so that every
 * rank computes the same grid and tests can check it exhaustively.
 */
#ifndef ZINC_ENGINE_GRID_H
#define ZINC_ENGINE_GRID_H

#include "zinc.h"

typedef struct {
  int world;              /* ranks: pp * dp * tp                            */
  int pp, dp, tp;         /* stages, data-parallel and model-parallel sizes */
} zinc_grid;

typedef struct {
  int stage, dp, tp;      /* a rank's place on each axis                    */
} zinc_coord;

/* The grid of `world` ranks with pp stages (0 counts as 1) and tp
 * model-parallel ranks. ZINC_ERR_INVALID naming the sizes (as
 * zinc_options' fields) when pp < 0, tp < 1 or pp * tp does not divide
 * world; *out is untouched then. */
zinc_status zinc_grid_make(int world, int pp, int tp, zinc_grid *out);
/* The coordinates of world rank `rank` (0 <= rank < g->world). */
zinc_coord zinc_grid_coord(const zinc_grid *g, int rank);
/* The world rank at c, or -1 when c is outside the grid. */
int zinc_grid_rank(const zinc_grid *g, zinc_coord c);

/* Split colors (comm split, key = world rank): the ranks with the same
 * color form the group, ordered by world rank. */
int zinc_grid_mp_color(const zinc_grid *g, int rank); /* same stage, dp     */
int zinc_grid_dp_color(const zinc_grid *g, int rank); /* same stage, tp     */
int zinc_grid_pp_color(const zinc_grid *g, int rank); /* same dp, tp        */

#endif /* ZINC_ENGINE_GRID_H */
