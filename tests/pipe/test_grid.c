/*
 * test_grid.c — the 3D grid's arithmetic (engine/grid.h), exhaustively
 * for worlds of 1 to 64 ranks, 0 to 9 stages and 1 to 9 model-parallel
 * ranks: a grid is made exactly when the sizes factor the world (else the
 * message names the sizes); coordinates follow Megatron-LM's formula
 * written out here, rank = (stage * dp + dp_rank) * tp + tp_rank, and
 * back; every split color gives groups whose members differ only along
 * their own axis and, ordered by world rank, are ordered along it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grid.h"

static void sizes_that_factor(void **state) {
  (void)state;
  for (int world = 1; world <= 64; world++)
    for (int pp = 0; pp <= 9; pp++)
      for (int tp = 1; tp <= 9; tp++) {
        zinc_grid g = {-1, -1, -1, -1};
        zinc_status st = zinc_grid_make(world, pp, tp, &g);
        int stages = pp ? pp : 1;
        if (world % (stages * tp) != 0) {
          assert_int_equal(st, ZINC_ERR_INVALID);
          assert_int_equal(g.world, -1); /* untouched */
          char want[64];
          snprintf(want, sizeof want, "%d ranks", world);
          assert_non_null(strstr(zinc_last_error(), want));
          snprintf(want, sizeof want, stages > 1 ? "model_parallel_size %d" : "size is %d", tp);
          assert_non_null(strstr(zinc_last_error(), want));
          if (stages > 1) {
            snprintf(want, sizeof want, "pipeline_parallel_size %d", stages);
            assert_non_null(strstr(zinc_last_error(), want));
          }
          continue;
        }
        assert_int_equal(st, ZINC_OK);
        assert_int_equal(g.world, world);
        assert_int_equal(g.pp, stages);
        assert_int_equal(g.tp, tp);
        assert_int_equal(g.dp, world / stages / tp);
      }
  zinc_grid g;
  assert_int_equal(zinc_grid_make(4, -1, 1, &g), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "pipeline_parallel_size is -1"));
  assert_int_equal(zinc_grid_make(4, 2, 0, &g), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "model_parallel_size 0"));
}

static void coordinates_and_groups(void **state) {
  (void)state;
  for (int world = 1; world <= 64; world++)
    for (int pp = 1; pp <= world; pp++)
      for (int tp = 1; tp <= world; tp++) {
        zinc_grid g;
        if (world % (pp * tp) || zinc_grid_make(world, pp, tp, &g) != ZINC_OK)
          continue;
        int dp = world / pp / tp;
        for (int r = 0; r < world; r++) {
          zinc_coord c = zinc_grid_coord(&g, r);
          assert_int_equal((c.stage * dp + c.dp) * tp + c.tp, r);
          assert_true(c.stage >= 0 && c.stage < pp && c.dp >= 0 && c.dp < dp && c.tp >= 0 &&
                      c.tp < tp);
          assert_int_equal(zinc_grid_rank(&g, c), r);
          /* groups: members share two coordinates; the previous member in
           * world order is one step before along the third */
          int last_mp = -1, last_dp = -1, last_pp = -1;
          for (int v = 0; v < world; v++) {
            zinc_coord d = zinc_grid_coord(&g, v);
            int same_mp = zinc_grid_mp_color(&g, v) == zinc_grid_mp_color(&g, r);
            int same_dp = zinc_grid_dp_color(&g, v) == zinc_grid_dp_color(&g, r);
            int same_pp = zinc_grid_pp_color(&g, v) == zinc_grid_pp_color(&g, r);
            assert_int_equal(same_mp, d.stage == c.stage && d.dp == c.dp);
            assert_int_equal(same_dp, d.stage == c.stage && d.tp == c.tp);
            assert_int_equal(same_pp, d.dp == c.dp && d.tp == c.tp);
            if (same_mp) {
              assert_int_equal(d.tp, last_mp + 1);
              last_mp = d.tp;
            }
            if (same_dp) {
              assert_int_equal(d.dp, last_dp + 1);
              last_dp = d.dp;
            }
            if (same_pp) {
              assert_int_equal(d.stage, last_pp + 1);
              last_pp = d.stage;
            }
          }
          assert_int_equal(last_mp, tp - 1);
          assert_int_equal(last_dp, dp - 1);
          assert_int_equal(last_pp, pp - 1);
          assert_true(zinc_grid_mp_color(&g, r) >= 0 && zinc_grid_dp_color(&g, r) >= 0 &&
                      zinc_grid_pp_color(&g, r) >= 0);
        }
        zinc_coord out[] = {{-1, 0, 0}, {pp, 0, 0}, {0, -1, 0}, {0, dp, 0}, {0, 0, -1},
                            {0, 0, tp}};
        for (size_t k = 0; k < sizeof out / sizeof out[0]; k++)
          assert_int_equal(zinc_grid_rank(&g, out[k]), -1);
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_that_factor),
      cmocka_unit_test(coordinates_and_groups),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
