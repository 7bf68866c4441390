/*
 * test_collective_scope.c — the trainer's host collectives over each
 * zinc_scope, at model_parallel_size 1 and 2 (world 2 and 4): the groups
 * are written here from the layout zinc.h states (model-parallel groups of
 * consecutive world ranks; the data-parallel group of world rank w is the
 * ranks with w's position in its model-parallel group), and every sum,
 * mean and gather order is compared with them. The 0.1.0 calls keep their
 * scopes: zinc_allreduce_host over the data-parallel group,
 * zinc_allgather_host over the world.
 */
#include <mpi.h>

#include "engine_test.h"

static zinc_engine *create(int mp) {
  zinc_config *cfg;
  ET_OK(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": "
                          "\"AdamW\", \"params\": {\"lr\": 0.01}}}", &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = mp;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  return e;
}

/* Is world rank v in world rank w's group of `scope`? Its index there. */
static int member(int scope, int mp, int w, int v, int *index) {
  int in = scope == ZINC_SCOPE_WORLD ? 1 :
           scope == ZINC_SCOPE_MP ? v / mp == w / mp : v % mp == w % mp;
  *index = scope == ZINC_SCOPE_WORLD ? v : scope == ZINC_SCOPE_MP ? v % mp : v / mp;
  return in;
}

static double value_of(int v, int k) { return 1000.0 * (v + 1) + k; }

static void check_scope(zinc_engine *e, int mp, int scope, const char *name) {
  int w = et_rank, W = et_world;
  double sum[2] = {0, 0}, maxv = -1;
  int size = 0;
  double gathered_want[8][2];
  for (int v = 0; v < W; v++) {
    int idx;
    if (!member(scope, mp, w, v, &idx))
      continue;
    size++;
    for (int k = 0; k < 2; k++) {
      sum[k] += value_of(v, k);
      gathered_want[idx][k] = value_of(v, k);
    }
    if (value_of(v, 0) > maxv)
      maxv = value_of(v, 0);
  }
  double mine[2] = {value_of(w, 0), value_of(w, 1)};
  double x[2] = {mine[0], mine[1]};
  ET_OK(zinc_allreduce_host_scope(e, (zinc_scope)scope, x, 2, ZINC_REDUCE_SUM));
  ET_CHECK(x[0] == sum[0] && x[1] == sum[1], "%s mp %d: sum %g %g, expected %g %g", name, mp,
           x[0], x[1], sum[0], sum[1]);
  x[0] = mine[0];
  x[1] = mine[1];
  ET_OK(zinc_allreduce_host_scope(e, (zinc_scope)scope, x, 2, ZINC_REDUCE_MEAN));
  ET_CHECK(x[0] == sum[0] / size, "%s mp %d: mean %g, expected %g", name, mp, x[0],
           sum[0] / size);
  x[0] = mine[0];
  ET_OK(zinc_allreduce_host_scope(e, (zinc_scope)scope, x, 1, ZINC_REDUCE_MAX));
  ET_CHECK(x[0] == maxv, "%s mp %d: max %g, expected %g", name, mp, x[0], maxv);
  double got[16];
  ET_OK(zinc_allgather_host_scope(e, (zinc_scope)scope, mine, 2, got));
  for (int i = 0; i < size; i++)
    ET_CHECK(got[2 * i] == gathered_want[i][0] && got[2 * i + 1] == gathered_want[i][1],
             "%s mp %d: gathered[%d] = %g %g, expected %g %g", name, mp, i, got[2 * i],
             got[2 * i + 1], gathered_want[i][0], gathered_want[i][1]);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  for (int mp = 1; mp <= 2; mp++) {
    if (et_world % mp)
      continue;
    zinc_engine *e = create(mp);
    check_scope(e, mp, ZINC_SCOPE_WORLD, "world");
    check_scope(e, mp, ZINC_SCOPE_DP, "data-parallel");
    check_scope(e, mp, ZINC_SCOPE_MP, "model-parallel");
    /* the 0.1.0 calls: data-parallel reduce, world gather */
    double x = value_of(et_rank, 0), dp_sum = 0, got[8];
    for (int v = et_rank % mp; v < et_world; v += mp)
      dp_sum += value_of(v, 0);
    ET_OK(zinc_allreduce_host(e, &x, 1, ZINC_REDUCE_SUM));
    ET_CHECK(x == dp_sum, "zinc_allreduce_host mp %d: %g, expected the data-parallel sum %g",
             mp, x, dp_sum);
    x = value_of(et_rank, 0);
    ET_OK(zinc_allgather_host(e, &x, 1, got));
    for (int v = 0; v < et_world; v++)
      ET_CHECK(got[v] == value_of(v, 0), "zinc_allgather_host mp %d: [%d] = %g", mp, v, got[v]);
    ET_CHECK(zinc_allreduce_host_scope(e, (zinc_scope)7, &x, 1, ZINC_REDUCE_SUM) ==
                 ZINC_ERR_INVALID, "an unknown scope was accepted");
    zinc_engine_destroy(e);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "collective scope tests FAILED\n" : "collective scope tests passed at %d "
           "ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
