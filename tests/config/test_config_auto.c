/*
 * test_config_auto.c — "auto" (Hugging Face's placeholder) from the load to
 * the engine, through the public API only:
 *  - every file of tests/config/valid (and the Hjson corpus) that writes
 *    "auto" has an entry here: it loads, the trainer's facts go in with
 *    zinc_config_fill_auto (as HF's trainer_config_process / _finalize fill
 *    them), an engine is created and built (one rank, CPU), and the
 *    settings it runs with (zinc_engine_config_to_json) hold the facts, the
 *    documented defaults and the model's sizes, with no "auto" left;
 *  - a fact the engine cannot do without (lr, weight_decay,
 *    warmup_num_steps, total_num_steps, warmup_max_lr with the lr unknown)
 *    fails zinc_engine_create with ZINC_ERR_CONFIG naming the key and
 *    zinc_config_fill_auto;
 *  - a default taken for "auto" is said in a log line;
 *  - zinc_config_fill_auto's contract: "auto" takes the value, the same
 *    number is fine, another number is a mismatch naming both, an absent
 *    key takes the trainer's value, a scheduler key the schedule lacks is
 *    not used, unknown paths and bad values are ZINC_ERR_INVALID.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/base.h"
#include "common/capture.h"
#include "config_test_util.h"
#include "zinc.h"

enum { HIDDEN = 64 };

typedef struct {
  const char *path;
  double value;
} fact;

typedef struct {
  const char *path; /* dotted path in the engine's settings JSON */
  double value;     /* numbers; true/false as 1/0 */
} expect;

typedef struct {
  const char *file;     /* under tests/config/ */
  int create_only;      /* no build (NVMe paths of another machine): the
                           bucket sizes stay "auto" */
  zinc_dtype dtype;     /* of the model's parameters (decides "auto" fp16/bf16) */
  fact facts[24];
  expect expects[24];
} auto_case;

/* HF's facts for TrainingArguments(per_device_train_batch_size=4,
 * gradient_accumulation_steps=2, learning_rate=2e-5, adam_beta2=0.95,
 * adam_epsilon=1e-6, weight_decay=0.01, max_grad_norm=0.5, warmup_steps=30)
 * over 300 steps on one rank. */
#define HF_BATCH {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 2}, \
                 {"train_batch_size", 8}
#define HF_OPTIM {"gradient_clipping", 0.5}, {"optimizer.params.lr", 2e-5},           \
                 {"optimizer.params.betas[0]", 0.9}, {"optimizer.params.betas[1]", 0.95}, \
                 {"optimizer.params.eps", 1e-6}, {"optimizer.params.weight_decay", 0.01}
#define HF_SCHED {"scheduler.params.warmup_min_lr", 0}, {"scheduler.params.warmup_max_lr", 2e-5}, \
                 {"scheduler.params.total_num_steps", 300},                             \
                 {"scheduler.params.warmup_num_steps", 30}
#define X_BATCH {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 2}, \
                {"train_batch_size", 8}
#define X_OPTIM {"gradient_clipping", 0.5}, {"optimizer.params.lr", 2e-5},              \
                {"optimizer.params.betas[0]", 0.9}, {"optimizer.params.betas[1]", 0.95}, \
                {"optimizer.params.eps", 1e-6}, {"optimizer.params.weight_decay", 0.01}
#define X_SCHED {"scheduler.params.warmup_min_lr", 0}, {"scheduler.params.warmup_max_lr", 2e-5}, \
                {"scheduler.params.warmup_num_steps", 30}
#define X_H3 {"zero_optimization.reduce_bucket_size", HIDDEN * HIDDEN},              \
             {"zero_optimization.stage3_prefetch_bucket_size", (int)(0.9 * HIDDEN * HIDDEN)}, \
             {"zero_optimization.stage3_param_persistence_threshold", 10 * HIDDEN}

static const auto_case cases[] = {
    {"valid/hf_zero3_auto.json", 0, ZINC_BF16,
     {HF_BATCH, HF_OPTIM, {"scheduler.params.warmup_min_lr", 0},
      {"scheduler.params.warmup_max_lr", 2e-5}, {"scheduler.params.warmup_num_steps", 30},
      /* WarmupLR has no total_num_steps: HF fills it, nothing uses it */
      {"scheduler.params.total_num_steps", 300}},
     {X_BATCH, X_OPTIM, X_SCHED, X_H3, {"bf16.enabled", 1}, {"fp16.enabled", 0}}},
    {"valid/hf_zero2_auto.json", 0, ZINC_F16,
     {HF_BATCH, HF_OPTIM, {"scheduler.params.warmup_min_lr", 0},
      {"scheduler.params.warmup_max_lr", 2e-5}, {"scheduler.params.warmup_num_steps", 30},
      {"scheduler.params.total_num_steps", 20000}},
     {X_BATCH, X_OPTIM, X_SCHED, {"scheduler.params.total_num_steps", 20000},
      {"zero_optimization.reduce_bucket_size", HIDDEN * HIDDEN}, {"fp16.enabled", 1}}},
    {"valid/hf_zero3_warmup_decay_auto.json", 0, ZINC_F16,
     {HF_BATCH, HF_OPTIM, HF_SCHED, {"fp16.enabled", 1}, {"bf16.enabled", 0}},
     {X_BATCH, X_OPTIM, X_SCHED, X_H3, {"scheduler.params.total_num_steps", 300},
      {"fp16.enabled", 1}, {"bf16.enabled", 0}}},
    {"valid/hf_zero2_warmup_decay_auto.json", 0, ZINC_F32,
     {HF_BATCH, HF_OPTIM, HF_SCHED},
     {X_BATCH, X_OPTIM, X_SCHED, {"scheduler.params.total_num_steps", 300},
      {"zero_optimization.reduce_bucket_size", 200000000}, {"fp16.enabled", 0},
      {"bf16.enabled", 0}}},
    /* accelerate: DummyOptim(lr, weight_decay), DummyScheduler(warmup 30,
     * total 300); no betas or eps in the file, so nothing to fill */
    {"valid/accelerate_zero3_offload_template.json", 0, ZINC_F16,
     {{"train_micro_batch_size_per_gpu", 4}, {"train_batch_size", 4}, {"gradient_clipping", 1.0},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", 0},
      {"optimizer.params.lr", 1e-4}, {"optimizer.params.weight_decay", 0},
      {"scheduler.params.warmup_min_lr", 0}, {"scheduler.params.warmup_max_lr", 1e-4},
      {"scheduler.params.warmup_num_steps", 30}, {"scheduler.params.total_num_steps", 300},
      {"zero_optimization.reduce_bucket_size", HIDDEN * HIDDEN},
      {"zero_optimization.stage3_prefetch_bucket_size", (int)(0.9 * HIDDEN * HIDDEN)},
      {"zero_optimization.stage3_param_persistence_threshold", 10 * HIDDEN}},
     {{"train_batch_size", 4}, {"gradient_accumulation_steps", 1}, {"gradient_clipping", 1.0},
      {"optimizer.params.lr", 1e-4}, {"optimizer.params.betas[1]", 0.999},
      {"scheduler.params.total_num_steps", 300}, {"scheduler.params.warmup_max_lr", 1e-4},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", 0}, X_H3,
      {"fp16.enabled", 1}}},
    /* no optimizer section: the trainer's lr and weight decay fill the
     * keys the file does not have (zinc runs Adam with them) */
    {"valid/lora_zero3_offload_no_optimizer.json", 0, ZINC_BF16,
     {HF_BATCH, HF_OPTIM},
     {X_BATCH, X_OPTIM, X_H3, {"bf16.enabled", 1},
      {"zero_optimization.offload_optimizer.pin_memory", 1}}},
    {"valid/every_key_auto.json", 0, ZINC_BF16,
     {HF_BATCH, HF_OPTIM, {"scheduler.params.total_num_steps", 300},
      {"scheduler.params.warmup_num_steps", 30},
      {"zero_optimization.offload_param.buffer_count", 8}},
     {X_BATCH, X_OPTIM, X_H3, {"scheduler.params.total_num_steps", 300},
      {"scheduler.params.warmup_num_steps", 30},
      /* DeepSpeed's defaults, each with a log line */
      {"zero_optimization.offload_optimizer.pin_memory", 0},
      {"zero_optimization.offload_param.pin_memory", 0},
      {"zero_optimization.offload_optimizer.buffer_count", 4},
      {"zero_optimization.offload_param.buffer_count", 8},
      {"zero_optimization.stage3_max_live_parameters", 1e9},
      {"zero_optimization.stage3_max_reuse_distance", 1e9},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", 0},
      {"bf16.enabled", 1}}},
    /* no batch key at all: the trainer's micro-batch is taken */
    {"valid/total_steps_auto.json", 0, ZINC_F32,
     {{"train_micro_batch_size_per_gpu", 2}, {"optimizer.params.lr", 3e-4},
      {"scheduler.params.warmup_num_steps", 10}, {"scheduler.params.total_num_steps", 100}},
     {{"train_batch_size", 2}, {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 1}, {"optimizer.params.lr", 3e-4},
      {"scheduler.params.warmup_min_lr", 0}, {"scheduler.params.warmup_max_lr", 3e-4},
      {"scheduler.params.warmup_num_steps", 10}, {"scheduler.params.total_num_steps", 100}}},
    {"valid/accelerate_generated.json", 0, ZINC_F16,
     {{"train_micro_batch_size_per_gpu", 4}, {"train_batch_size", 4},
      {"gradient_accumulation_steps", 1}, {"gradient_clipping", 1.0}},
     {{"train_batch_size", 4}, {"gradient_clipping", 1.0}, {"fp16.enabled", 1}}},
    {"hjson/hf_auto_trailing.hjson", 0, ZINC_F16, {HF_BATCH, HF_OPTIM}, {X_BATCH}},
    /* Accelerate's template with the offload devices, the parameter
     * buffer, sub-groups, overlap and steps_per_print left "auto": nothing
     * fills those, they read as DeepSpeed's defaults at load */
    {"valid/accelerate_offload_auto.json", 0, ZINC_BF16,
     {{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 2},
      {"gradient_clipping", 1.0}},
     {{"train_batch_size", 8}, {"gradient_clipping", 1.0}, {"steps_per_print", 10},
      {"zero_optimization.sub_group_size", 1e9}, {"zero_optimization.overlap_comm", 1},
      {"zero_optimization.stage3_max_live_parameters", 1e9}, X_H3, {"bf16.enabled", 1}}},
    /* every key DeepSpeed's parser passes "auto" through and no trainer
     * fills: the defaults, nothing left to fill */
    {"valid/auto_deepspeed_defaults.json", 0, ZINC_F16,
     {{"train_batch_size", 8}},
     {{"train_batch_size", 8}, {"steps_per_print", 10}, {"fp16.loss_scale_window", 1000},
      {"fp16.hysteresis", 2}, {"zero_optimization.allgather_bucket_size", 5e8},
      {"zero_optimization.overlap_comm", 1}, {"aio.block_size", 1048576},
      {"aio.queue_depth", 8}, {"zero_optimization.zero_hpz_partition_size", 1}}},
    {"valid/hf_zero3_bf16_nvme.json", 1, ZINC_BF16,
     {{"train_batch_size", 8}, {"optimizer.params.lr", 2e-5}},
     {{"train_batch_size", 8}, {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 4}, {"optimizer.params.lr", 2e-5}}},
};

/* ------------------------------------------------------------- helpers */

/* The value at a dotted path ("optimizer.params.betas[1]") of a JSON text
 * as a double (true/false as 1/0); 0 with *found = 0 when absent. */
static double json_value_at(const json_t *root, const char *dotted, int *found, int *is_auto) {
  const json_t *v = root;
  char part[128];
  *found = *is_auto = 0;
  while (v && *dotted) {
    size_t n = strcspn(dotted, ".[");
    memcpy(part, dotted, n);
    part[n] = '\0';
    v = json_object_get(v, part);
    dotted += n;
    if (*dotted == '[') {
      v = json_array_get(v, (size_t)strtoul(dotted + 1, NULL, 10));
      dotted = strchr(dotted, ']') + 1;
    }
    if (*dotted == '.')
      dotted++;
  }
  if (!v)
    return 0;
  *found = 1;
  if (json_is_string(v))
    *is_auto = strcmp(json_string_value(v), "auto") == 0;
  if (json_is_boolean(v))
    return json_is_true(v);
  return json_is_number(v) ? json_number_value(v) : 0;
}

static zinc_status init_small(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t j = 0; j < numel; j++)
    dst[j] = 0.01f * (float)(j % 5);
  return ZINC_OK;
}

static zinc_status create_engine(const zinc_config *cfg, zinc_engine **e) {
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.hidden_size = HIDDEN;
  return zinc_engine_create(cfg, &opt, e);
}

static zinc_status build_engine(zinc_engine *e, zinc_dtype dt) {
  zinc_module *m = zinc_module_add(e, "block");
  int64_t w[2] = {HIDDEN, HIDDEN}, b[1] = {HIDDEN};
  if (!m || !zinc_param_add(e, m, "w", dt, 2, w) || !zinc_param_add(e, m, "b", dt, 1, b))
    return ZINC_ERR_INVALID;
  return zinc_engine_build(e, init_small, NULL);
}

static zinc_config *load(const char *rel) {
  char dir[1024], path[1400];
  corpus_dir("", dir, sizeof dir);
  snprintf(path, sizeof path, "%s%s", dir, rel);
  zinc_config *cfg = NULL;
  if (zinc_config_load(path, &cfg) != ZINC_OK)
    fail_msg("%s: %s", rel, zinc_last_error());
  return cfg;
}

static int file_has_auto(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, "\"auto\"") != NULL;
}

/* ------------------------------------------------------------- the cases */

static void run_case(const auto_case *c) {
  zinc_config *cfg = load(c->file);
  for (const fact *f = c->facts; f->path; f++)
    if (zinc_config_fill_auto(cfg, f->path, f->value) != ZINC_OK)
      fail_msg("%s: fill %s = %g: %s", c->file, f->path, f->value, zinc_last_error());
  zinc_engine *e = NULL;
  if (create_engine(cfg, &e) != ZINC_OK)
    fail_msg("%s: create: %s", c->file, zinc_last_error());
  zinc_config_free(cfg); /* the engine has its own copy */
  if (!c->create_only && build_engine(e, c->dtype) != ZINC_OK)
    fail_msg("%s: build: %s", c->file, zinc_last_error());
  char *text = NULL;
  assert_int_equal(zinc_engine_config_to_json(e, &text), ZINC_OK);
  if (!c->create_only && strstr(text, "\"auto\""))
    fail_msg("%s: \"auto\" left after the build:\n%s", c->file, text);
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  for (const expect *x = c->expects; x->path; x++) {
    int found, is_auto;
    double v = json_value_at(root, x->path, &found, &is_auto);
    if (!found || v != x->value)
      fail_msg("%s: %s is %s%.17g, expected %.17g", c->file, x->path, found ? "" : "absent ",
               v, x->value);
  }
  json_decref(root);
  free(text);
  zinc_engine_destroy(e);
}

static void auto_files_resolve_from_the_facts(void **state) {
  (void)state;
  size_t ncases = sizeof cases / sizeof cases[0];
  /* every corpus file that writes "auto" has a case */
  static const char *const dirs[] = {"valid", "hjson"};
  for (size_t d = 0; d < 2; d++) {
    char dir[1024], path[1400], rel[256];
    corpus_dir(dirs[d], dir, sizeof dir);
    char **names;
    int n = list_json(dir, &names);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      if (d == 1) { /* the Hjson twin of each .json */
        size_t len = strlen(path);
        snprintf(path + len - 5, sizeof path - (len - 5), ".hjson");
      }
      if (!file_has_auto(path))
        continue;
      snprintf(rel, sizeof rel, "%s/%s", dirs[d], strrchr(path, '/') + 1);
      int covered = 0;
      for (size_t k = 0; k < ncases; k++)
        covered |= strcmp(cases[k].file, rel) == 0;
      if (!covered)
        fail_msg("%s writes \"auto\" and has no case in test_config_auto.c", rel);
    }
    free_names(names, n);
  }
  for (size_t k = 0; k < ncases; k++)
    run_case(&cases[k]);
}

/* The file as the trainer leaves it short of the facts in `skip` (paths
 * separated by "|"): create fails naming `key` and the call that gives it. */
static void expect_missing(const char *file, const char *skip, const char *key) {
  zinc_config *cfg = load(file);
  static const fact all[] = {HF_BATCH, HF_OPTIM, HF_SCHED};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strstr(skip, all[i].path))
      assert_int_equal(zinc_config_fill_auto(cfg, all[i].path, all[i].value), ZINC_OK);
  zinc_engine *e = (zinc_engine *)&e;
  zinc_status st = create_engine(cfg, &e);
  const char *msg = zinc_last_error();
  if (st != ZINC_ERR_CONFIG || e)
    fail_msg("%s without %s: %s, expected ZINC_ERR_CONFIG", file, skip, zinc_status_name(st));
  if (strncmp(msg, key, strlen(key)) != 0 || !strstr(msg, "zinc_config_fill_auto") ||
      !strstr(msg, "\"auto\""))
    fail_msg("%s without %s: the message does not start with %s and name "
             "zinc_config_fill_auto: %s", file, skip, key, msg);
  zinc_config_free(cfg);
}

static void missing_facts_fail_at_create(void **state) {
  (void)state;
  const char *f = "valid/hf_zero3_warmup_decay_auto.json";
  expect_missing(f, "scheduler.params.total_num_steps", "scheduler.params.total_num_steps");
  expect_missing(f, "scheduler.params.warmup_num_steps", "scheduler.params.warmup_num_steps");
  expect_missing(f, "optimizer.params.lr", "optimizer.params.lr");
  expect_missing(f, "optimizer.params.weight_decay", "optimizer.params.weight_decay");
  /* warmup_max_lr "auto" is the optimizer's lr only when that is known */
  expect_missing("valid/total_steps_auto.json",
                 "optimizer.params.lr|scheduler.params.warmup_max_lr",
                 "scheduler.params.warmup_max_lr");

  /* with every fact it loads (and the failures above changed nothing) */
  zinc_config *cfg = load(f);
  static const fact all[] = {HF_BATCH, HF_OPTIM, HF_SCHED};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    assert_int_equal(zinc_config_fill_auto(cfg, all[i].path, all[i].value), ZINC_OK);
  zinc_engine *e = NULL;
  if (create_engine(cfg, &e) != ZINC_OK)
    fail_msg("%s with every fact: %s", f, zinc_last_error());
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
}

/* A default taken for "auto" is logged, naming the key and the value. */
static void defaults_are_logged(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, "
                                     "\"gradient_clipping\": \"auto\", \"optimizer\": {\"type\": "
                                     "\"AdamW\", \"params\": {\"lr\": 1e-4, \"betas\": \"auto\", "
                                     "\"eps\": \"auto\", \"weight_decay\": 0}}}", &cfg),
                   ZINC_OK);
  zinc_log_set_level(ZINC_LOG_INFO);
  test_stderr cap;
  test_stderr_begin(&cap);
  zinc_engine *e = NULL;
  zinc_status st = create_engine(cfg, &e);
  char *text = test_stderr_end(&cap);
  zinc_log_set_level(ZINC_LOG_ERROR);
  if (st != ZINC_OK)
    fail_msg("create: %s", zinc_last_error());
  static const char *const lines[] = {
      "gradient_clipping is \"auto\" and the trainer gave no value: using 1 (",
      "optimizer.params.betas[0] is \"auto\" and the trainer gave no value: using 0.9 (",
      "optimizer.params.betas[1] is \"auto\" and the trainer gave no value: using 0.999 (",
      "optimizer.params.eps is \"auto\" and the trainer gave no value: using 1e-08 ("};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    if (!strstr(text, lines[i]))
      fail_msg("the log does not say \"%s\":\n%s", lines[i], text);
  free(text);
  char *json = NULL;
  assert_int_equal(zinc_engine_config_to_json(e, &json), ZINC_OK);
  json_t *root = json_loads(json, 0, NULL);
  int found, is_auto;
  assert_true(json_value_at(root, "gradient_clipping", &found, &is_auto) == 1.0);
  assert_true(json_value_at(root, "optimizer.params.eps", &found, &is_auto) == 1e-8);
  json_decref(root);
  free(json);
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
}

/* ------------------------------------------------------------- the call */

static double cfg_value(const zinc_config *cfg, const char *path, int *found, int *is_auto) {
  char *text = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &text), ZINC_OK);
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  double v = json_value_at(root, path, found, is_auto);
  json_decref(root);
  free(text);
  return v;
}

static void fill_auto_contract(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse(
                       "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 2,"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\","
                       " \"betas\": [0.9, 0.95], \"eps\": 1e-8}},"
                       " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {"
                       "\"warmup_max_lr\": \"auto\"}},"
                       " \"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": \"auto\"}}",
                       &cfg),
                   ZINC_OK);
  int found, is_auto;
  /* loaded: "auto" is kept, and written back as "auto" */
  cfg_value(cfg, "optimizer.params.lr", &found, &is_auto);
  assert_true(found && is_auto);
  cfg_value(cfg, "scheduler.params.warmup_max_lr", &found, &is_auto);
  assert_true(found && is_auto);

  /* "auto" takes the value */
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.lr", 3e-5), ZINC_OK);
  assert_true(cfg_value(cfg, "optimizer.params.lr", &found, &is_auto) == 3e-5 && !is_auto);
  /* the other spelling of a key */
  assert_int_equal(zinc_config_fill_auto(cfg, "zero_optimization.stage3_prefetch_bucket_size",
                                         1000), ZINC_OK);
  assert_true(cfg_value(cfg, "zero_optimization.stage3_prefetch_bucket_size", &found,
                        &is_auto) == 1000);
  /* the same number: fine; the same fact twice: fine */
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.betas[1]", 0.95), ZINC_OK);
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.lr", 3e-5), ZINC_OK);
  assert_int_equal(zinc_config_fill_auto(cfg, "train_micro_batch_size_per_gpu", 2), ZINC_OK);

  /* another number: a mismatch naming the path and both values */
  static const struct {
    const char *path;
    double value;
    const char *file_value, *trainer_value;
  } mismatches[] = {
      {"optimizer.params.betas[1]", 0.999, "0.95", "0.999"},
      {"optimizer.params.eps", 1e-6, "1e-08", "1e-06"},
      {"optimizer.params.lr", 1e-4, "3e-05", "0.0001"}, /* filled before */
      {"train_micro_batch_size_per_gpu", 4, "2", "4"},
  };
  for (size_t i = 0; i < sizeof mismatches / sizeof mismatches[0]; i++) {
    assert_int_equal(zinc_config_fill_auto(cfg, mismatches[i].path, mismatches[i].value),
                     ZINC_ERR_CONFIG);
    const char *msg = zinc_last_error();
    if (strncmp(msg, mismatches[i].path, strlen(mismatches[i].path)) != 0 ||
        !strstr(msg, mismatches[i].file_value) || !strstr(msg, mismatches[i].trainer_value) ||
        !strstr(msg, "\"auto\""))
      fail_msg("mismatch of %s: %s", mismatches[i].path, msg);
  }
  assert_true(cfg_value(cfg, "optimizer.params.lr", &found, &is_auto) == 3e-5);

  /* absent: the trainer's value, where DeepSpeed would take its default */
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.weight_decay", 0.1), ZINC_OK);
  assert_true(cfg_value(cfg, "optimizer.params.weight_decay", &found, &is_auto) == 0.1);
  assert_int_equal(zinc_config_fill_auto(cfg, "gradient_accumulation_steps", 3), ZINC_OK);
  assert_true(cfg_value(cfg, "gradient_accumulation_steps", &found, &is_auto) == 3);
  /* ... and once given, another value is a mismatch */
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.weight_decay", 0.2),
                   ZINC_ERR_CONFIG);
  /* a scheduler key WarmupLR does not have: not used */
  assert_int_equal(zinc_config_fill_auto(cfg, "scheduler.params.total_num_steps", 500), ZINC_OK);
  cfg_value(cfg, "scheduler.params.total_num_steps", &found, &is_auto);
  assert_false(found);

  /* unknown paths and bad values: INVALID, nothing changes */
  static const struct {
    const char *path;
    double value;
    const char *says;
  } invalid[] = {
      {"optimizer.params.weight_decy", 1e-3, "\"optimizer.params.weight_decay\"?"},
      {"optimizer.params.betas", 0.9, "betas[0]"},
      {"zero_optimization.stage", 2, "zero_optimization.stage"},
      {"optimizer.params.lr", -1, ">= 0"},
      {"optimizer.params.lr", NAN, "nan"},
      {"optimizer.params.eps", 0, "> 0"},
      {"optimizer.params.betas[0]", 1.0, "[0, 1)"},
      {"train_micro_batch_size_per_gpu", 2.5, "integer"},
      {"scheduler.params.warmup_num_steps", 0.5, "integer"},
      {"fp16.enabled", 2, "0 or 1"},
      {"", 1, "not a key"},
  };
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    char *before = NULL, *after = NULL;
    assert_int_equal(zinc_config_to_json(cfg, &before), ZINC_OK);
    zinc_status st = zinc_config_fill_auto(cfg, invalid[i].path, invalid[i].value);
    if (st != ZINC_ERR_INVALID || !strstr(zinc_last_error(), invalid[i].says))
      fail_msg("fill %s = %g: %s (%s), expected ZINC_ERR_INVALID saying %s", invalid[i].path,
               invalid[i].value, zinc_status_name(st), zinc_last_error(), invalid[i].says);
    assert_int_equal(zinc_config_to_json(cfg, &after), ZINC_OK);
    assert_string_equal(before, after);
    free(before);
    free(after);
  }
  assert_int_equal(zinc_config_fill_auto(NULL, "optimizer.params.lr", 1), ZINC_ERR_INVALID);
  assert_int_equal(zinc_config_fill_auto(cfg, NULL, 1), ZINC_ERR_INVALID);
  zinc_config_free(cfg);
}

/* A filled config round-trips through its JSON, auto keys and all; the
 * betas can be filled one at a time. */
static void partly_filled_round_trips(void **state) {
  (void)state;
  zinc_config *cfg = load("valid/every_key_auto.json");
  assert_int_equal(zinc_config_fill_auto(cfg, "optimizer.params.betas[0]", 0.8), ZINC_OK);
  assert_int_equal(zinc_config_fill_auto(cfg, "scheduler.params.total_num_steps", 77), ZINC_OK);
  char *text = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &text), ZINC_OK);
  zinc_config *back = NULL;
  if (zinc_config_parse(text, &back) != ZINC_OK)
    fail_msg("does not load back: %s\n%s", zinc_last_error(), text);
  char *again = NULL;
  assert_int_equal(zinc_config_to_json(back, &again), ZINC_OK);
  assert_string_equal(text, again);
  int found, is_auto;
  assert_true(cfg_value(back, "optimizer.params.betas[0]", &found, &is_auto) == 0.8);
  cfg_value(back, "optimizer.params.betas[1]", &found, &is_auto);
  assert_true(found && is_auto);
  assert_true(cfg_value(back, "scheduler.params.total_num_steps", &found, &is_auto) == 77);
  free(text);
  free(again);
  zinc_config_free(back);
  zinc_config_free(cfg);
}

int main(void) {
  zinc_log_set_level(ZINC_LOG_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(auto_files_resolve_from_the_facts),
      cmocka_unit_test(missing_facts_fail_at_create),
      cmocka_unit_test(defaults_are_logged),
      cmocka_unit_test(fill_auto_contract),
      cmocka_unit_test(partly_filled_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
