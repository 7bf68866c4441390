/*
 * test_pp_topology.c — the 3D grid as an engine sees it, at every
 * (pipeline, model-parallel) size pair that factors the world (2, 3, 4 and
 * 8 ranks): each rank's stage, data-parallel and model-parallel rank and
 * sizes, its pipeline neighbours and first/last flags, every rank's
 * coordinates and back, all against Megatron-LM's numbering written out
 * here (world rank = (stage * d + dp_rank) * t + mp_rank); and the groups
 * themselves: a world-rank gather over each zinc_scope must list exactly
 * the ranks that share the scope's coordinates, in world order.
 *
 * Refused, on every rank with the same status: sizes that do not factor
 * the world (the message names them), sizes that differ across ranks,
 * a config's pipeline.stages other than the options' (naming both;
 * "auto" and the same number pass). With a pipeline each stage builds
 * the modules it registered (test_pp_train trains them).
 */
#include <mpi.h>

#include "engine/engine_test.h"

static zinc_status create(int pp, int tp, const char *extra, zinc_engine **e) {
  zinc_config *cfg;
  char json[512];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zinc\": "
           "{\"comm_timeout_s\": 20}%s}", extra ? extra : "");
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = tp;
  opt.pipeline_parallel_size = pp;
  zinc_status st = zinc_engine_create(cfg, &opt, e);
  zinc_config_free(cfg);
  return st;
}

/* Every rank must return `want` within a few seconds (the same status on
 * every rank), and the message must hold each of the words. */
static void expect_refused(zinc_status st, zinc_status want, const char *what,
                           const char *word1, const char *word2) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", zinc_last_error());
  ET_CHECK(st == want, "%s: %s (%s), expected %s", what, zinc_status_name(st), msg,
           zinc_status_name(want));
  ET_CHECK(!word1 || strstr(msg, word1), "%s: the message does not name \"%s\": %s", what,
           word1, msg);
  ET_CHECK(!word2 || strstr(msg, word2), "%s: the message does not name \"%s\": %s", what,
           word2, msg);
  int mine = (int)st, lo = mine, hi = mine;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ET_CHECK(lo == hi, "%s: the ranks returned different statuses (%d .. %d)", what, lo, hi);
}

/* The ranks of w's group in `scope`, in world order, by the formula. */
static int group_of(int scope, int w, int pp, int tp, int *members) {
  int d = et_world / pp / tp, n = 0;
  int ws = w / (d * tp), wd = w / tp % d, wt = w % tp;
  for (int v = 0; v < et_world; v++) {
    int vs = v / (d * tp), vd = v / tp % d, vt = v % tp, in = 1;
    if (scope == ZINC_SCOPE_MP)
      in = vs == ws && vd == wd;
    else if (scope == ZINC_SCOPE_DP)
      in = vs == ws && vt == wt;
    else if (scope == ZINC_SCOPE_PP)
      in = vd == wd && vt == wt;
    if (in)
      members[n++] = v;
  }
  return n;
}

static void check_grid(zinc_engine *e, int pp, int tp) {
  int W = et_world, w = et_rank, d = W / pp / tp;
  int stage = w / (d * tp), dp = w / tp % d, mp = w % tp;
  char at[64];
  snprintf(at, sizeof at, "pp %d x dp %d x tp %d", pp, d, tp);
  ET_CHECK(zinc_pp_size(e) == pp && zinc_dp_size(e) == d && zinc_mp_size(e) == tp,
           "%s: sizes pp %d dp %d mp %d", at, zinc_pp_size(e), zinc_dp_size(e),
           zinc_mp_size(e));
  ET_CHECK(zinc_pp_rank(e) == stage && zinc_dp_rank(e) == dp && zinc_mp_rank(e) == mp,
           "%s: rank %d is stage %d dp %d mp %d, expected %d %d %d", at, w, zinc_pp_rank(e),
           zinc_dp_rank(e), zinc_mp_rank(e), stage, dp, mp);
  int prev = stage > 0 ? w - d * tp : -1, next = stage < pp - 1 ? w + d * tp : -1;
  ET_CHECK(zinc_pp_prev(e) == prev && zinc_pp_next(e) == next,
           "%s: rank %d's neighbours %d %d, expected %d %d", at, w, zinc_pp_prev(e),
           zinc_pp_next(e), prev, next);
  ET_CHECK(zinc_pp_is_first(e) == (stage == 0) && zinc_pp_is_last(e) == (stage == pp - 1),
           "%s: rank %d first %d last %d", at, w, zinc_pp_is_first(e), zinc_pp_is_last(e));
  for (int v = 0; v < W; v++) {
    int s = -1, r = -1, t = -1;
    ET_OK(zinc_rank_coords(e, v, &s, &r, &t));
    ET_CHECK(s == v / (d * tp) && r == v / tp % d && t == v % tp,
             "%s: coordinates of rank %d: %d %d %d", at, v, s, r, t);
    ET_CHECK(zinc_coords_rank(e, s, r, t) == v, "%s: rank at (%d, %d, %d) is %d, not %d", at, s,
             r, t, zinc_coords_rank(e, s, r, t), v);
  }
  ET_CHECK(zinc_rank_coords(e, W, NULL, NULL, NULL) == ZINC_ERR_INVALID,
           "%s: rank %d outside the world was given coordinates", at, W);
  ET_CHECK(zinc_coords_rank(e, pp, 0, 0) == -1 && zinc_coords_rank(e, 0, d, 0) == -1 &&
               zinc_coords_rank(e, 0, 0, tp) == -1 && zinc_coords_rank(e, -1, 0, 0) == -1,
           "%s: a place outside the grid has a rank", at);
  /* the groups: gather the world ranks over each scope */
  static const int scopes[] = {ZINC_SCOPE_WORLD, ZINC_SCOPE_DP, ZINC_SCOPE_MP, ZINC_SCOPE_PP};
  static const char *const names[] = {"world", "data-parallel", "model-parallel", "pipeline"};
  for (int k = 0; k < 4; k++) {
    int members[64];
    int n = group_of(scopes[k], w, pp, tp, members);
    double mine = w, got[64];
    ET_OK(zinc_allgather_host_scope(e, (zinc_scope)scopes[k], &mine, 1, got));
    for (int i = 0; i < n; i++)
      ET_CHECK(got[i] == members[i], "%s: rank %d's %s group member %d is rank %g, expected %d",
               at, w, names[k], i, got[i], members[i]);
    double count = 1;
    ET_OK(zinc_allreduce_host_scope(e, (zinc_scope)scopes[k], &count, 1, ZINC_REDUCE_SUM));
    ET_CHECK(count == n, "%s: rank %d's %s group has %g ranks, expected %d", at, w, names[k],
             count, n);
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  int W = et_world, grids = 0;
  for (int pp = 1; pp <= W; pp++)
    for (int tp = 1; tp <= W; tp++) {
      if (W % (pp * tp))
        continue;
      zinc_engine *e = NULL;
      ET_OK(create(pp == 1 && tp == 1 ? 0 : pp, tp, NULL, &e)); /* 0: the default */
      check_grid(e, pp, tp);
      zinc_engine_destroy(e);
      grids++;
    }

  /* sizes that do not factor the world: refused on every rank, naming them */
  zinc_engine *e = NULL;
  char words[2][64];
  int bad_pp = W + 1;
  snprintf(words[0], sizeof words[0], "pipeline_parallel_size %d", bad_pp);
  snprintf(words[1], sizeof words[1], "%d ranks", W);
  expect_refused(create(bad_pp, 1, NULL, &e), ZINC_ERR_INVALID, "pp = world + 1", words[0],
                 words[1]);
  ET_CHECK(e == NULL, "a refused create handed out an engine");
  snprintf(words[0], sizeof words[0], "model_parallel_size %d", W);
  expect_refused(create(2, W, NULL, &e), ZINC_ERR_INVALID, "pp 2 x tp = world", words[0],
                 words[1]);
  expect_refused(create(-1, 1, NULL, &e), ZINC_ERR_INVALID, "pp -1",
                 "pipeline_parallel_size is -1", NULL);
  /* sizes that differ across ranks: refused on every rank */
  if (W > 1) {
    expect_refused(create(et_rank == W - 1 ? W : 1, 1, NULL, &e), ZINC_ERR_INVALID,
                   "pp differing across ranks", "differs across ranks", NULL);
    expect_refused(create(1, et_rank == 0 ? W : 1, NULL, &e), ZINC_ERR_INVALID,
                   "tp differing across ranks", "model_parallel_size differs", NULL);
  }

  /* the config's pipeline.stages against the options */
  snprintf(words[0], sizeof words[0], "pipeline.stages is %d", W);
  expect_refused(create(1, 1, ", \"pipeline\": {\"stages\": 2}", &e), ZINC_ERR_CONFIG,
                 "stages 2 with no pipeline", "pipeline.stages is 2",
                 "pipeline_parallel_size is 1");
  char extra[96];
  snprintf(extra, sizeof extra, ", \"pipeline\": {\"stages\": %d}", W);
  if (W > 1)
    expect_refused(create(0, 1, extra, &e), ZINC_ERR_CONFIG,
                   "stages W with the default options", words[0],
                   "pipeline_parallel_size is 0 (no pipeline)");
  ET_OK(create(W, 1, extra, &e));
  zinc_engine_destroy(e);
  ET_OK(create(W, 1, ", \"pipeline\": {\"stages\": \"auto\", \"partition\": \"uniform\"}", &e));
  ET_CHECK(zinc_pp_size(e) == W, "stages \"auto\": %d stages", zinc_pp_size(e));

  /* each stage builds its own modules (tests/pipe/test_pp_train trains them) */
  char mod[32];
  snprintf(mod, sizeof mod, "layer%d", zinc_pp_rank(e));
  zinc_module *m = zinc_module_add(e, mod);
  int64_t shape[1] = {64 + zinc_pp_rank(e)};
  ET_CHECK(m && zinc_param_add(e, m, "w", ZINC_F32, 1, shape), "register: %s", zinc_last_error());
  zinc_status st = zinc_engine_build(e, NULL, NULL);
  ET_CHECK(st == ZINC_OK, "build at %d stages: %s", W, zinc_last_error());
  double one = 1;
  ET_OK(zinc_allreduce_host_scope(e, ZINC_SCOPE_PP, &one, 1, ZINC_REDUCE_SUM));
  ET_CHECK(one == W, "after the build: a pipeline sum of %g, expected %d", one, W);
  zinc_engine_destroy(e);

  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "pipeline topology tests FAILED\n"
               : "pipeline topology tests passed at %d ranks (%d grids)\n", W, grids);
  MPI_Finalize();
  return bad ? 1 : 0;
}
