/*
 * test_auto_buckets.c — "auto" bucket sizes come from the hidden size the
 * trainer gives (zinc_options.hidden_size), as Hugging Face's DeepSpeed
 * integration computes them: reduce_bucket_size = h*h,
 * stage3_prefetch_bucket_size = 0.9*h*h, stage3_param_persistence_threshold
 * = 10*h. The model has an MLP bias (4h) and a vocabulary-sized bias, which
 * a guess from the widest 1-D parameter would take for the hidden size.
 *  - hidden_size 64: the resolved sizes are HF's, whatever the biases;
 *  - hidden_size not given and a size "auto": ZINC_ERR_CONFIG at build on
 *    every rank, naming the key and zinc_options.hidden_size;
 *  - stage 2 with stage-3 keys "auto" and a numeric reduce_bucket_size
 *    needs no hidden size (those keys have no effect there);
 *  - a negative hidden_size, or one that differs across ranks:
 *    ZINC_ERR_INVALID at create on every rank.
 */
#include <mpi.h>

#include "engine/engine.h"
#include "engine_test.h"

enum { H = 64, VOCAB = 1000 };

static zinc_status init_small(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t j = 0; j < numel; j++)
    dst[j] = 0.01f * (float)(j % 7);
  return ZINC_OK;
}

/* A transformer-like block: W_up [h, 4h], b_up [4h], ln [h], and a head
 * bias as wide as the vocabulary. */
static void register_model(zinc_engine *e) {
  zinc_module *blk = zinc_module_add(e, "block");
  zinc_module *head = zinc_module_add(e, "head");
  ET_CHECK(blk && head, "zinc_module_add: %s", zinc_last_error());
  int64_t w[2] = {H, 4 * H}, b[1] = {4 * H}, ln[1] = {H}, v[1] = {VOCAB};
  ET_CHECK(zinc_param_add(e, blk, "w_up", ZINC_F32, 2, w), "w_up: %s", zinc_last_error());
  ET_CHECK(zinc_param_add(e, blk, "b_up", ZINC_F32, 1, b), "b_up: %s", zinc_last_error());
  ET_CHECK(zinc_param_add(e, blk, "ln", ZINC_F32, 1, ln), "ln: %s", zinc_last_error());
  ET_CHECK(zinc_param_add(e, head, "bias", ZINC_F32, 1, v), "bias: %s", zinc_last_error());
}

static zinc_engine *create(const char *zero, int64_t hidden, zinc_status *st) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zinc\": {\"comm_timeout_s\": 60},"
           " \"zero_optimization\": {%s}}", zero);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  ET_CHECK(opt.hidden_size == 0, "ZINC_OPTIONS_INIT: hidden_size %lld, expected 0",
           (long long)opt.hidden_size);
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.hidden_size = hidden;
  zinc_engine *e = NULL;
  *st = zinc_engine_create(cfg, &opt, &e);
  zinc_config_free(cfg);
  return e;
}

static zinc_engine *build(const char *zero, int64_t hidden, zinc_status *st) {
  zinc_engine *e = create(zero, hidden, st);
  if (*st != ZINC_OK)
    return e;
  register_model(e);
  *st = zinc_engine_build(e, init_small, NULL);
  return e;
}

static void sizes_from_hidden(void) {
  zinc_status st;
  zinc_engine *e = build("\"stage\": 3, \"reduce_bucket_size\": \"auto\", "
                         "\"stage3_prefetch_bucket_size\": \"auto\", "
                         "\"stage3_param_persistence_threshold\": \"auto\"", H, &st);
  ET_CHECK(st == ZINC_OK, "stage 3, hidden_size %d: %s: %s", H, zinc_status_name(st),
           zinc_last_error());
  if (st == ZINC_OK) {
    ET_CHECK(e->cfg.reduce_bucket_size == (int64_t)H * H, "reduce_bucket_size %lld, expected "
             "h*h = %d", (long long)e->cfg.reduce_bucket_size, H * H);
    ET_CHECK(e->cfg.stage3_prefetch_bucket_size == (int64_t)(0.9 * H * H),
             "stage3_prefetch_bucket_size %lld, expected 0.9*h*h = %lld",
             (long long)e->cfg.stage3_prefetch_bucket_size, (long long)(0.9 * H * H));
    ET_CHECK(e->cfg.stage3_param_persistence_threshold == 10 * H,
             "stage3_param_persistence_threshold %lld, expected 10*h = %d",
             (long long)e->cfg.stage3_param_persistence_threshold, 10 * H);
  }
  zinc_engine_destroy(e);

  e = build("\"stage\": 2, \"reduce_bucket_size\": \"auto\"", H, &st);
  ET_CHECK(st == ZINC_OK, "stage 2, hidden_size %d: %s", H, zinc_last_error());
  if (st == ZINC_OK)
    ET_CHECK(e->cfg.reduce_bucket_size == (int64_t)H * H, "stage 2: reduce_bucket_size %lld, "
             "expected %d", (long long)e->cfg.reduce_bucket_size, H * H);
  zinc_engine_destroy(e);
}

static void expect_config_error(const char *zero, const char *key) {
  zinc_status st;
  double t0 = MPI_Wtime();
  zinc_engine *e = build(zero, 0, &st);
  double dt = MPI_Wtime() - t0;
  ET_CHECK(st == ZINC_ERR_CONFIG, "%s without hidden_size: %s, expected ZINC_ERR_CONFIG (%s)",
           key, zinc_status_name(st), zinc_last_error());
  ET_CHECK(strstr(zinc_last_error(), key) && strstr(zinc_last_error(), "zinc_options.hidden_size"),
           "message names neither %s nor zinc_options.hidden_size: %s", key, zinc_last_error());
  ET_CHECK(dt < 10.0, "the build took %.1f s to fail", dt);
  zinc_engine_destroy(e);
}

static void missing_hidden_size(void) {
  expect_config_error("\"stage\": 2, \"reduce_bucket_size\": \"auto\"",
                      "zero_optimization.reduce_bucket_size");
  expect_config_error("\"stage\": 3, \"reduce_bucket_size\": 1000, "
                      "\"stage3_prefetch_bucket_size\": \"auto\"",
                      "zero_optimization.stage3_prefetch_bucket_size");
  expect_config_error("\"stage\": 3, \"reduce_bucket_size\": 1000, "
                      "\"stage3_param_persistence_threshold\": \"auto\"",
                      "zero_optimization.stage3_param_persistence_threshold");

  /* stage 2 never reads the stage-3 sizes */
  zinc_status st;
  zinc_engine *e = build("\"stage\": 2, \"reduce_bucket_size\": 1000, "
                         "\"stage3_prefetch_bucket_size\": \"auto\", "
                         "\"stage3_param_persistence_threshold\": \"auto\"", 0, &st);
  ET_CHECK(st == ZINC_OK, "stage 2 with unused stage-3 \"auto\" keys: %s", zinc_last_error());
  zinc_engine_destroy(e);

  if (et_world > 1) { /* it fixes the layout: every rank must give the same */
    double t0 = MPI_Wtime();
    e = create("\"stage\": 2", H + et_rank, &st);
    double dt = MPI_Wtime() - t0;
    ET_CHECK(st == ZINC_ERR_INVALID && e == NULL &&
             strstr(zinc_last_error(), "hidden_size differs across ranks"),
             "hidden_size %d on rank %d: %s: %s", H + et_rank, et_rank, zinc_status_name(st),
             zinc_last_error());
    ET_CHECK(dt < 10.0, "the create took %.1f s to fail", dt);
    zinc_engine_destroy(e);
  }

  e = create("\"stage\": 2", -5, &st);
  ET_CHECK(st == ZINC_ERR_INVALID && e == NULL && strstr(zinc_last_error(), "hidden_size"),
           "negative hidden_size: %s: %s", zinc_status_name(st), zinc_last_error());
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  sizes_from_hidden();
  missing_hidden_size();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf("auto bucket checks %s at %d ranks\n", bad ? "FAILED" : "passed", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
