/*
 * test_ckpt_mp.c — checkpoints of model-parallel runs (model_parallel_size
 * 2), under mpirun at 2 and 4 ranks (1 or 3 cannot hold it: SKIPPED):
 *  - every state (parameter, exp_avg, exp_avg_sq) of each model-parallel
 *    rank's shard of the model, and its client state, come back bitwise in
 *    a fresh engine at another stage; each model-parallel rank's files are
 *    in <tag>/mp_rank_NN/; at 4 ranks also into 2 ranks (data-parallel 2 ->
 *    1, over a sub-communicator);
 *  - a checkpoint saved at model_parallel_size 1 loaded at 2, and one saved
 *    at 2 loaded at 1, are refused with ZINC_ERR_INVALID naming both sizes,
 *    and nothing changes;
 *  - zinc-ckpt verifies a part (DIR/TAG mp_rank_NN), its client state
 *    included, finds a damaged client state, and for the checkpoint as a
 *    whole says how to name a part.
 * The values are a formula of (model-parallel rank, parameter, element,
 * state), written in this test.
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_test.h"

enum { NPAR = 3 };
static const char *names[NPAR] = {"w1", "b1", "ln"};
static const int64_t numel[NPAR] = {12 * 20, 20, 37};

static float value(int mp, int i, int64_t j, int state) {
  return (float)(0.001 * (double)j + 0.5 * i + 3.0 * mp + 10.0 * state);
}

static zinc_status init_zero(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  memset(dst, 0, (size_t)n * 4);
  return ZINC_OK;
}

typedef struct {
  zinc_engine *e;
  zinc_param *par[NPAR];
} model;

static void open_model(model *m, int stage, int mp, void *comm) {
  char json[512];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
           "{\"stage\": %d, \"stage3_param_persistence_threshold\": 0}}", stage);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = mp;
  opt.mpi_comm = comm;
  ET_OK(zinc_engine_create(cfg, &opt, &m->e));
  zinc_config_free(cfg);
  zinc_module *mod = zinc_module_add(m->e, "layer");
  for (int i = 0; i < NPAR; i++) {
    m->par[i] = zinc_param_add(m->e, mod, names[i], ZINC_F32, 1, &numel[i]);
    ET_CHECK(m->par[i], "register %s: %s", names[i], zinc_last_error());
  }
  ET_OK(zinc_engine_build(m->e, init_zero, NULL));
}

static const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                         ZINC_STATE_EXP_AVG_SQ};

static void set_states(model *m) {
  int mp = zinc_mp_rank(m->e);
  for (int i = 0; i < NPAR; i++)
    for (int k = 0; k < 3; k++) {
      float *v = malloc((size_t)numel[i] * 4);
      for (int64_t j = 0; j < numel[i]; j++)
        v[j] = value(mp, i, j, k);
      ET_OK(zinc_param_set_full(m->e, m->par[i], kinds[k], v));
      free(v);
    }
  char blob[64];
  snprintf(blob, sizeof blob, "mp rank %d", mp);
  ET_OK(zinc_checkpoint_set_client_state(m->e, blob, strlen(blob) + 1));
}

/* The number of elements that differ from the formula (expect_zero: from 0). */
static int64_t count_wrong(model *m, int expect_zero) {
  int mp = zinc_mp_rank(m->e);
  int64_t wrong = 0;
  for (int i = 0; i < NPAR; i++)
    for (int k = 0; k < 3; k++) {
      float *v = malloc((size_t)numel[i] * 4);
      ET_OK(zinc_param_get_full(m->e, m->par[i], kinds[k], v));
      for (int64_t j = 0; j < numel[i]; j++)
        wrong += v[j] != (expect_zero ? 0.0f : value(mp, i, j, k));
      free(v);
    }
  return wrong;
}

static void expect_blob(model *m, const char *what) {
  const void *data;
  size_t bytes;
  char want[64];
  snprintf(want, sizeof want, "mp rank %d", zinc_mp_rank(m->e));
  ET_OK(zinc_checkpoint_client_state(m->e, &data, &bytes));
  ET_CHECK(bytes == strlen(want) + 1 && !memcmp(data, want, bytes), "%s: client state \"%s\", "
           "want \"%s\"", what, bytes ? (const char *)data : "", want);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world % 2) {
    if (et_rank == 0)
      printf("SKIPPED: model_parallel_size 2 needs an even number of ranks, have %d\n",
             et_world);
    MPI_Finalize();
    return 77;
  }
  char root[600], dir[700], dir1[700];
  snprintf(root, sizeof root, "%s/ckpt_mp_np%d", et_binary_dir(), et_world);
  snprintf(dir, sizeof dir, "%s/mp2", root);
  snprintf(dir1, sizeof dir1, "%s/mp1", root);
  if (et_rank == 0) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    ET_CHECK(system(cmd) == 0, "%s", cmd);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  for (int stage = 0; stage <= 3; stage++) {
    model a, b;
    char tag[32];
    snprintf(tag, sizeof tag, "s%d", stage);
    open_model(&a, stage, 2, NULL);
    set_states(&a);
    ET_OK(zinc_save_checkpoint(a.e, dir, tag));
    zinc_engine_destroy(a.e);
    if (et_rank == 0) {
      char path[900];
      struct stat sb;
      for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/%s/mp_rank_%02d/manifest.json", dir, tag, r);
        ET_CHECK(stat(path, &sb) == 0, "no %s", path);
      }
    }
    int to = (stage + 1) % 4;
    open_model(&b, to, 2, NULL);
    ET_CHECK(count_wrong(&b, 1) == 0, "a new engine is not zero");
    ET_OK(zinc_load_checkpoint(b.e, dir, NULL));
    int64_t wrong = count_wrong(&b, 0);
    ET_CHECK(wrong == 0, "saved at stage %d, loaded at stage %d, model-parallel rank %d: %lld "
             "elements differ", stage, to, zinc_mp_rank(b.e), (long long)wrong);
    expect_blob(&b, "mp load");
    zinc_engine_destroy(b.e);
  }
  /* data-parallel 2 -> 1: the first two ranks load the 4-rank save */
  if (et_world == 4) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, et_rank < 2, et_rank, &half);
    if (et_rank < 2) {
      model c;
      open_model(&c, 3, 2, &half);
      ET_OK(zinc_load_checkpoint(c.e, dir, "s1"));
      ET_CHECK(count_wrong(&c, 0) == 0, "4 ranks (stage 1) into 2 ranks (stage 3): states "
               "differ");
      expect_blob(&c, "4 ranks into 2");
      zinc_engine_destroy(c.e);
    }
    MPI_Comm_free(&half);
  }
#ifdef ZINC_CKPT_TOOL
  if (et_rank == 0) {
    char cmd[4096], out[700];
    snprintf(out, sizeof out, "%s/tool.out", root);
    snprintf(cmd, sizeof cmd, "%s verify %s/s1 mp_rank_01 > %s 2>&1 && grep -q "
             "'client_state.bin: ok' %s", ZINC_CKPT_TOOL, dir, out, out);
    ET_CHECK(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s verify %s s1 > %s 2>&1; test $? = 1 && grep -q "
             "'model-parallel checkpoint.*mp_rank_NN' %s", ZINC_CKPT_TOOL, dir, out, out);
    ET_CHECK(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "printf X | dd of=%s/s1/mp_rank_01/client_state.bin bs=1 seek=2 "
             "conv=notrunc 2>/dev/null && %s verify %s/s1 mp_rank_01 > %s 2>&1; test $? = 1 "
             "&& grep -q 'client_state.bin: size or crc32c differs' %s", dir, ZINC_CKPT_TOOL,
             dir, out, out);
    ET_CHECK(system(cmd) == 0, "%s failed", cmd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
#endif
  /* another model_parallel_size: refused, naming both */
  model one, two;
  open_model(&one, 1, 1, NULL);
  ET_OK(zinc_save_checkpoint(one.e, dir1, "flat"));
  zinc_status st = zinc_load_checkpoint(one.e, dir, "s2");
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "model_parallel_size 2") &&
               strstr(zinc_last_error(), "model_parallel_size 1"),
           "mp 2 into mp 1: %s: %s", zinc_status_name(st), zinc_last_error());
  ET_CHECK(count_wrong(&one, 1) == 0, "a refused load changed the engine");
  zinc_engine_destroy(one.e);
  open_model(&two, 1, 2, NULL);
  st = zinc_load_checkpoint(two.e, dir1, NULL);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "model_parallel_size 1") &&
               strstr(zinc_last_error(), "model_parallel_size 2"),
           "mp 1 into mp 2: %s: %s", zinc_status_name(st), zinc_last_error());
  zinc_engine_destroy(two.e);

  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "model-parallel checkpoint tests FAILED\n"
               : "model-parallel checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
