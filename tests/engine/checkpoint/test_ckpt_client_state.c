/*
 * test_ckpt_client_state.c — the trainer's state in checkpoints and
 * weights-only loads, under mpirun:
 *  - client state: the blob set before each save comes back with the load
 *    of that save (two tags, latest and explicit), on every rank, as data-
 *    parallel rank 0 set it; a save without one loads none; a damaged blob
 *    is refused (ZINC_ERR_CORRUPT) and nothing changes;
 *  - weights only: the saved weights bitwise, the moments zero, the step 0
 *    and training from there exactly as a fresh engine whose weights were
 *    set to the saved ones (zinc_param_set_full); also into an engine of
 *    another optimizer type, which a full load refuses; at stages 0-3.
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_test.h"

static char root[512];

static void set_blob(zinc_engine *e, const char *text) {
  ET_OK(zinc_checkpoint_set_client_state(e, text, strlen(text) + 1));
}

static void expect_blob(zinc_engine *e, const char *want, const char *what) {
  const void *data = NULL;
  size_t bytes = 0;
  ET_OK(zinc_checkpoint_client_state(e, &data, &bytes));
  if (!want) {
    ET_CHECK(!data && bytes == 0, "%s: a blob of %zu bytes, want none", what, bytes);
    return;
  }
  ET_CHECK(data && bytes == strlen(want) + 1 && !memcmp(data, want, bytes),
           "%s: blob \"%.*s\" (%zu bytes), want \"%s\"", what, (int)bytes,
           data ? (const char *)data : "", bytes, want);
}

static void test_client_state(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  char dir[700], mine[64];
  snprintf(dir, sizeof dir, "%s/client_s%d", root, stage);
  et_model a, b;
  zinc_engine *e = et_open(&r, NULL, &a);
  expect_blob(e, NULL, "a new engine");
  ET_OK(et_steps(&a, &r, 0, 2));
  /* rank-dependent: only data-parallel rank 0's is saved */
  snprintf(mine, sizeof mine, "position 2 of rank %d", et_rank);
  set_blob(e, mine);
  ET_OK(zinc_save_checkpoint(e, dir, "two"));
  ET_OK(et_steps(&a, &r, 2, 3));
  set_blob(e, "position 3");
  ET_OK(zinc_save_checkpoint(e, dir, "three"));
  ET_OK(zinc_checkpoint_set_client_state(e, NULL, 0));
  ET_OK(zinc_save_checkpoint(e, dir, "none"));
  et_model_free(&a);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &b);
  ET_OK(zinc_load_checkpoint(e, dir, "two"));
  expect_blob(e, "position 2 of rank 0", "load of two");
  ET_OK(zinc_load_checkpoint(e, dir, "three"));
  expect_blob(e, "position 3", "load of three");
  ET_OK(zinc_load_checkpoint(e, dir, NULL)); /* latest: "none" */
  expect_blob(e, NULL, "load of a save without a blob");
  ET_OK(zinc_load_checkpoint(e, dir, "three"));
  /* damage the blob of "two": refused, and the blob and step stay three's */
  MPI_Barrier(MPI_COMM_WORLD);
  if (et_rank == 0) {
    char path[800];
    snprintf(path, sizeof path, "%s/two/client_state.bin", dir);
    FILE *f = fopen(path, "r+b");
    ET_CHECK(f, "open %s", path);
    if (f) {
      fseek(f, 3, SEEK_SET);
      fputc('#', f);
      fclose(f);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  zinc_status st = zinc_load_checkpoint(e, dir, "two");
  ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), "client_state.bin") &&
               strstr(zinc_last_error(), "nothing was changed"),
           "a damaged blob: %s: %s", zinc_status_name(st), zinc_last_error());
  expect_blob(e, "position 3", "after a refused load");
  ET_CHECK(zinc_step_count(e) == 3, "after a refused load: step %lld, want 3",
           (long long)zinc_step_count(e));
  et_model_free(&b);
  zinc_engine_destroy(e);
}

static void get_state(et_model *m, zinc_state_kind kind, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(m->e, m->par[i], kind, out[i]));
}

static void test_weights_only(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  char dir[700], what[64];
  snprintf(dir, sizeof dir, "%s/weights_s%d", root, stage);
  snprintf(what, sizeof what, "weights only, stage %d", stage);
  et_model a, b, c, d;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 3));
  set_blob(e, "data at 3");
  ET_OK(zinc_save_checkpoint(e, dir, "w"));
  float **saved = et_alloc_params(&r.shape);
  get_state(&a, ZINC_STATE_PARAM, saved);
  et_model_free(&a);
  zinc_engine_destroy(e);

  /* B: trains 2 steps of its own, then loads the weights only */
  e = et_open(&r, NULL, &b);
  ET_OK(et_steps(&b, &r, 0, 2));
  ET_OK(zinc_load_checkpoint_ex(e, dir, "w", ZINC_LOAD_WEIGHTS_ONLY));
  float **got = et_alloc_params(&r.shape);
  get_state(&b, ZINC_STATE_PARAM, got);
  ET_CHECK(et_same_bits(&r.shape, got, saved, what), "%s: the weights differ", what);
  get_state(&b, ZINC_STATE_EXP_AVG, got);
  int zero = 1;
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(&r.shape, i); j++)
      zero &= got[i][j] == 0.0f;
  ET_CHECK(zero, "%s: exp_avg is not zero after the load", what);
  ET_CHECK(zinc_step_count(e) == 2, "%s: step %lld, want the engine's own 2", what,
           (long long)zinc_step_count(e));
  expect_blob(e, "data at 3", "weights only");
  et_model_free(&b);
  zinc_engine_destroy(e);

  /* C: a fresh engine loads the weights only and trains 3 steps; D: a fresh
   * engine given the saved weights by zinc_param_set_full trains the same */
  e = et_open(&r, NULL, &c);
  ET_OK(zinc_load_checkpoint_ex(e, dir, NULL, ZINC_LOAD_WEIGHTS_ONLY));
  ET_CHECK(zinc_step_count(e) == 0, "%s: step %lld on a fresh engine, want 0", what,
           (long long)zinc_step_count(e));
  ET_OK(et_steps(&c, &r, 3, 6));
  get_state(&c, ZINC_STATE_PARAM, got);
  et_model_free(&c);
  zinc_engine_destroy(e);
  e = et_open(&r, NULL, &d);
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_set_full(e, d.par[i], ZINC_STATE_PARAM, saved[i]));
  ET_OK(et_steps(&d, &r, 3, 6));
  float **ref = et_alloc_params(&r.shape);
  get_state(&d, ZINC_STATE_PARAM, ref);
  ET_CHECK(et_same_bits(&r.shape, got, ref, what), "%s: training after the load differs from "
           "training from the same weights set directly", what);
  et_model_free(&d);
  zinc_engine_destroy(e);

  /* another optimizer type: a full load refuses, weights only loads */
  et_optim sgd = {.type = "SGD", .lr = 0.01, .momentum = 0.9};
  et_run rs = r;
  rs.optim = &sgd;
  et_model s;
  e = et_open(&rs, NULL, &s);
  zinc_status st = zinc_load_checkpoint(e, dir, "w");
  ET_CHECK(st == ZINC_ERR_INVALID, "%s: a full load into SGD: %s", what, zinc_status_name(st));
  ET_OK(zinc_load_checkpoint_ex(e, dir, "w", ZINC_LOAD_WEIGHTS_ONLY));
  get_state(&s, ZINC_STATE_PARAM, got);
  ET_CHECK(et_same_bits(&r.shape, got, saved, what), "%s: weights into SGD differ", what);
  ET_OK(et_steps(&s, &rs, 3, 4));
  et_model_free(&s);
  zinc_engine_destroy(e);
  et_free_params(saved);
  et_free_params(got);
  et_free_params(ref);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/ckpt_client_np%d", et_binary_dir(), et_world);
  if (et_rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    if (system(cmd) != 0)
      ET_CHECK(0, "%s failed", cmd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int stage = 0; stage <= 3; stage++) {
    test_client_state(stage);
    test_weights_only(stage);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "client state tests FAILED\n" : "client state tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
