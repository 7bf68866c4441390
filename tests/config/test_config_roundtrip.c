/*
 * test_config_roundtrip.c — settings out and back in: for every valid
 * corpus file, zinc_config_to_json loads back to equal settings (before and
 * after resolution); copies are deep; the printer lists every setting;
 * zinc_config_load of a missing file or of a file that is not JSON names
 * the file, and the line and column.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "common/capture.h"
#include "config_test_util.h"

/* Load `path`, write it as JSON, parse that back: the same settings, and
 * the same JSON again. */
static void roundtrip_one(const zinc_settings *s, const char *what) {
  char *json = zinc_settings_to_json(s);
  assert_non_null(json);
  zinc_config *back = NULL;
  if (zinc_config_parse(json, &back) != ZINC_OK)
    fail_msg("%s: its JSON does not load back: %s\n%s", what, zinc_last_error(), json);
  if (!settings_same(s, &back->s))
    fail_msg("%s: settings differ after the round trip\n%s", what, json);
  char *again = zinc_settings_to_json(&back->s);
  assert_string_equal(json, again);
  free(again);
  free(json);
  zinc_config_free(back);
}

static void corpus_round_trips(void **state) {
  (void)state;
  char dir[1024], path[1400];
  corpus_dir("valid", dir, sizeof dir);
  char **names;
  int n = list_json(dir, &names);
  assert_true(n >= 20);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    zinc_config *cfg;
    assert_int_equal(zinc_config_load(path, &cfg), ZINC_OK);
    roundtrip_one(&cfg->s, names[i]);

    /* resolved: every "auto" gone, the numbers written out (the facts
     * without a default first; a file's own number is a mismatch, kept) */
    static const struct {
      const char *path;
      double value;
    } facts[] = {{"optimizer.params.lr", 1e-4}, {"optimizer.params.weight_decay", 0.01},
                 {"scheduler.params.warmup_num_steps", 10},
                 {"scheduler.params.total_num_steps", 100}};
    for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++)
      (void)zinc_config_fill_auto(cfg, facts[f].path, facts[f].value);
    zinc_settings r;
    assert_int_equal(zinc_settings_copy(&r, &cfg->s), ZINC_OK);
    if (zinc_settings_resolve_auto(&r, cfg->file_mask, cfg->filled_mask) != ZINC_OK)
      fail_msg("%s: %s", names[i], zinc_last_error());
    if (!(r.batch_given_mask & 3))
      r.batch_given_mask |= 1 << 4; /* as if micro were "auto" (bit 3 + 1) */
    /* the smallest world size the file's batch triad fits */
    int dp = 1;
    while (dp < 4096 && zinc_settings_resolve_batch(&r, dp) != ZINC_OK)
      dp++;
    if (dp == 4096)
      fail_msg("%s: no world size resolves the batch: %s", names[i], zinc_last_error());
    if (zinc_settings_resolve_model(&r, 1024, r.fp16_enabled == 1, r.bf16_enabled == 1) !=
        ZINC_OK)
      fail_msg("%s: %s", names[i], zinc_last_error());
    char *json = zinc_settings_to_json(&r);
    assert_null(strstr(json, "auto"));
    zinc_config *back;
    assert_int_equal(zinc_config_parse(json, &back), ZINC_OK);
    assert_int_equal(zinc_settings_resolve_batch(&back->s, dp), ZINC_OK);
    back->s.batch_given_mask = r.batch_given_mask; /* what the file gave differs */
    if (!settings_same(&r, &back->s))
      fail_msg("%s: resolved settings differ after the round trip\n%s", names[i], json);
    free(json);
    zinc_config_free(back);
    zinc_settings_free(&r);
    zinc_config_free(cfg);
  }
  free_names(names, n);
}

static void non_default_values_round_trip(void **state) {
  (void)state;
  /* every field away from its default, as settings a program could build */
  zinc_settings s;
  zinc_settings_defaults(&s);
  s.train_batch_size = 96;
  s.train_micro_batch_size_per_gpu = 3;
  s.batch_given_mask = 003;
  s.gradient_clipping = 0.5;
  s.steps_per_print = 7;
  s.wall_clock_breakdown = s.zero_allow_untested_optimizer = s.prescale_gradients = 1;
  s.gradient_predivide_factor = 1.0 / 3.0;
  s.fp16_enabled = 1;
  s.fp16_loss_scale = 0.1;
  s.fp16_initial_scale_power = 5;
  s.fp16_loss_scale_window = 17;
  s.fp16_hysteresis = 4;
  s.fp16_consecutive_hysteresis = 1;
  s.fp16_min_loss_scale = 1.0 / 1024;
  s.optimizer = ZINC_OPTIM_ADAM;
  s.adam_w_mode = 0;
  s.lr = 6.0e-4 / 7;
  s.beta1 = 0.85;
  s.beta2 = 0.98765;
  s.eps = 3e-9;
  s.weight_decay = 0.05;
  s.bias_correction = 0;
  s.scheduler = ZINC_SCHED_WARMUP_DECAY;
  s.warmup_min_lr = 1e-7;
  s.warmup_max_lr = 2e-4;
  s.warmup_num_steps = 123;
  s.warmup_type = ZINC_WARMUP_LINEAR;
  s.total_num_steps = 4567;
  s.stage = 3;
  s.contiguous_gradients = s.reduce_scatter = s.allgather_partitions = 0;
  s.overlap_comm = 0;
  s.reduce_bucket_size = 12345;
  s.allgather_bucket_size = 23456;
  s.round_robin_gradients = 1;
  s.sub_group_size = 34567;
  s.offload_optimizer.device = ZINC_OFFLOAD_NVME;
  s.offload_optimizer.nvme_paths[0] = strdup("/a");
  s.offload_optimizer.nvme_paths[1] = strdup("/b b");
  s.offload_optimizer.nvme_path_count = 2;
  s.offload_optimizer.pin_memory = s.offload_optimizer.pipeline_read = 1;
  s.offload_optimizer.pipeline_write = s.offload_optimizer.fast_init = 1;
  s.offload_optimizer.buffer_count = 9;
  /* ratio < 1 is read as 1 with device nvme; corpus file partial_offload_stage2
   * round-trips ratio 0.5 */
  s.offload_optimizer.ratio = 1.0;
  s.offload_param.device = ZINC_OFFLOAD_NVME;
  s.offload_param.nvme_paths[0] = strdup("/p");
  s.offload_param.nvme_path_count = 1;
  s.offload_param.buffer_count = 11;
  s.offload_param.buffer_size = 4321;
  s.offload_param.max_in_cpu = 5432;
  s.stage3_prefetch_bucket_size = ZINC_AUTO;
  s.auto_mask = ZINC_AUTO_BIT(ZINC_AUTO_PREFETCH_BUCKET_SIZE);
  s.stage3_param_persistence_threshold = 77;
  s.stage3_max_live_parameters = 88;
  s.stage3_max_reuse_distance = 99;
  s.stage3_gather_16bit_weights_on_model_save = 1;
  s.aio_block_size = 8192;
  s.aio_queue_depth = 3;
  s.aio_intra_op_parallelism = 5;
  s.aio_single_submit = s.aio_use_gds = s.aio_allow_buffered_io = 1;
  s.aio_overlap_events = s.aio_swap_checksums = 0;
  s.ac_partition_activations = s.ac_cpu_checkpointing = 1;
  s.ac_contiguous_memory_optimization = s.ac_synchronize_checkpoint_boundary = 1;
  s.ac_profile = 1;
  s.ac_number_checkpoints = 6;
  s.log_level = ZINC_LOG_ERROR;
  s.comm_timeout_s = 12.5;
  s.memory_timeline = strdup("timeline.json");
  s.placement_verbose = 1;
  s.max_consecutive_skips = 7;
  zinc_log_set_level(ZINC_LOG_ERROR); /* use_gds warns on the way back */
  roundtrip_one(&s, "non-default settings");

  s.scheduler = ZINC_SCHED_WARMUP_COSINE;
  s.warmup_min_ratio = 0.125;
  s.cos_min_ratio = 0.03;
  s.warmup_min_lr = 0;            /* not a WarmupCosineLR parameter */
  s.warmup_max_lr = 1e-3;
  roundtrip_one(&s, "cosine settings");

  zinc_settings copy;
  assert_int_equal(zinc_settings_copy(&copy, &s), ZINC_OK);
  assert_true(settings_same(&copy, &s));
  assert_ptr_not_equal(copy.offload_optimizer.nvme_paths[1], s.offload_optimizer.nvme_paths[1]);
  assert_ptr_not_equal(copy.memory_timeline, s.memory_timeline);
  zinc_settings_free(&s);
  assert_string_equal(copy.offload_optimizer.nvme_paths[1], "/b b");
  zinc_settings_free(&copy);
}

static void print_lists_every_setting(void **state) {
  (void)state;
  zinc_config *cfg;
  assert_int_equal(zinc_config_parse("{\"train_batch_size\":32,\"zero_optimization\":{\"stage\":2,"
                                     "\"reduce_bucket_size\":5e8}}", &cfg), ZINC_OK);
  zinc_log_set_level(ZINC_LOG_INFO);
  test_stderr cap;
  test_stderr_begin(&cap);
  zinc_config_print(cfg);
  char *text = test_stderr_end(&cap);
  zinc_log_set_level(ZINC_LOG_ERROR);
  assert_non_null(strstr(text, "zinc config (<string>, 0 warnings):"));
  assert_non_null(strstr(text, "zero_optimization.stage ...."));
  assert_non_null(strstr(text, " 2\n"));
  assert_non_null(strstr(text, "zero_optimization.reduce_bucket_size"));
  assert_non_null(strstr(text, "500000000"));
  assert_non_null(strstr(text, "zinc.comm_timeout_s"));
  /* one line per leaf of the JSON form */
  assert_true(test_count_lines(text, "[zinc info]") > 60);
  free(text);
  char *json;
  assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
  assert_non_null(strstr(json, "\"train_batch_size\": 32"));
  free(json);
  assert_int_equal(zinc_config_to_json(NULL, &json), ZINC_ERR_INVALID);
  zinc_config_free(cfg);
  zinc_config_free(NULL);
  assert_int_equal(zinc_config_warning_count(NULL), 0);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void load_errors_name_the_file(void **state) {
  (void)state;
  zinc_config *cfg = (zinc_config *)&cfg;
  assert_int_equal(zinc_config_load("/nonexistent/dir/ds_config.json", &cfg), ZINC_ERR_IO);
  assert_null(cfg);
  assert_non_null(strstr(zinc_last_error(), "/nonexistent/dir/ds_config.json"));
  assert_non_null(strstr(zinc_last_error(), "No such file"));

  char path[] = "/tmp/zinc_config_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  write_file(path, "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_ERR_CONFIG);
  const char *msg = zinc_last_error();
  if (!strstr(msg, path) || !strstr(msg, "line 3") || !strstr(msg, "column") ||
      !strstr(msg, "fp16.enabled"))
    fail_msg("message lacks file, line, column or path: %s", msg);

  /* Hjson, as DeepSpeed reads it: loads; a broken one names line and column */
  write_file(path, "# DeepSpeed config\ntrain_batch_size: 8\n");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_OK);
  assert_int_equal(cfg->s.train_batch_size, 8);
  zinc_config_free(cfg);
  write_file(path, "# DeepSpeed config\ntrain_batch_size: 8\nfp16: {enabled: true\n");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_ERR_CONFIG);
  if (!strstr(zinc_last_error(), "line 3, column 7") || !strstr(zinc_last_error(), "not closed"))
    fail_msg("unclosed Hjson object: %s", zinc_last_error());

  write_file(path, "");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), path));
  assert_non_null(strstr(zinc_last_error(), "empty"));
  write_file(path, "// nothing but a comment\n");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), "empty"));

  write_file(path, "{\"train_batch_size\": 8}\n");
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_OK);
  assert_string_equal(cfg->source, path);
  zinc_config_free(cfg);
  unlink(path);

  /* as DeepSpeed: a string that names no file may be the config itself,
   * URL-safe base64 of JSON or Hjson */
  assert_int_equal(zinc_config_load("eyJ0cmFpbl9taWNyb19iYXRjaF9zaXplX3Blcl9ncHUiOiAyLCAiemVyb19vc"
                                    "HRpbWl6YXRpb24iOiB7InN0YWdlIjogMn19", &cfg), ZINC_OK);
  assert_int_equal(cfg->s.train_micro_batch_size_per_gpu, 2);
  assert_int_equal(cfg->s.stage, 2);
  zinc_config_free(cfg);
  assert_int_equal(zinc_config_load("IyBoanNvbgp0cmFpbl9iYXRjaF9zaXplOiAxNgpiZjE2OiB7CiAgZW5hYmxlZ"
                                    "DogdHJ1ZQp9Cg==", &cfg), ZINC_OK);
  assert_int_equal(cfg->s.train_batch_size, 16);
  assert_int_equal(cfg->s.bf16_enabled, 1);
  zinc_config_free(cfg);
  /* neither a file nor base64 text: the file's error, and the other reading */
  assert_int_equal(zinc_config_load("conf", &cfg), ZINC_ERR_IO); /* base64 letters, binary */
  assert_non_null(strstr(zinc_last_error(), "No such file"));
  assert_int_equal(zinc_config_load("ds_config_missing.json", &cfg), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "No such file"));
  assert_non_null(strstr(zinc_last_error(), "base64"));
  assert_null(cfg);

  assert_int_equal(zinc_config_load(NULL, &cfg), ZINC_ERR_INVALID);
  assert_int_equal(zinc_config_parse(NULL, &cfg), ZINC_ERR_INVALID);
  assert_int_equal(zinc_config_parse("{}", NULL), ZINC_ERR_INVALID);
}

/* base64 of n bytes (URL-safe alphabet when url, else the standard one with
 * '+' and '/'), '=' padded; the caller frees. */
static char *base64_of(const char *in, size_t n, int url) {
  const char *abc = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                        : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = malloc((n + 2) / 3 * 4 + 1);
  assert_non_null(out);
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t q = (uint32_t)(unsigned char)in[i] << 16;
    if (i + 1 < n)
      q |= (uint32_t)(unsigned char)in[i + 1] << 8;
    if (i + 2 < n)
      q |= (unsigned char)in[i + 2];
    out[o++] = abc[q >> 18 & 63];
    out[o++] = abc[q >> 12 & 63];
    out[o++] = i + 1 < n ? abc[q >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? abc[q & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

static char *settings_json(const char *path_or_base64) {
  zinc_config *cfg = NULL;
  if (zinc_config_load(path_or_base64, &cfg) != ZINC_OK)
    fail_msg("loading %.80s... (%zu characters): %s", path_or_base64, strlen(path_or_base64),
             zinc_last_error());
  char *json = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
  zinc_config_free(cfg);
  return json;
}

/* As DeepSpeed (os.path.exists, else base64): a real config passed as
 * base64, far longer than a file name may be, loads to the settings of
 * its file, in either alphabet; a file of that name wins over the decoding;
 * a long string that is neither says what the open said, shortened. */
static void long_base64_config_loads(void **state) {
  (void)state;
  char dir[1024], path[1400];
  corpus_dir("valid", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/hf_zero3_auto.json", dir);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char text[16384];
  size_t n = fread(text, 1, sizeof text, f);
  fclose(f);
  assert_true(n > 1000 && n < sizeof text);
  char *want = settings_json(path);
  for (int url = 0; url < 2; url++) {
    char *b64 = base64_of(text, n, url);
    assert_true(strlen(b64) > 1000);
    char *got = settings_json(b64);
    if (strcmp(want, got) != 0)
      fail_msg("the base64 config resolves to\n%s\nits file to\n%s", got, want);
    free(got);
    free(b64);
  }
  free(want);

  /* a file named like a base64 config: the file is read, not the name */
  char tmp[] = "/tmp/zinc_b64_XXXXXX", cwd[4096];
  assert_non_null(mkdtemp(tmp));
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmp), 0);
  const char *eight = "{\"train_batch_size\": 8}";
  char *name = base64_of(eight, strlen(eight), 1);
  f = fopen(name, "w");
  assert_non_null(f);
  fputs("{\"train_batch_size\": 16}", f);
  fclose(f);
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_load(name, &cfg), ZINC_OK);
  assert_int_equal(cfg->s.train_batch_size, 16);
  assert_string_equal(cfg->source, name);
  zinc_config_free(cfg);
  unlink(name);
  assert_int_equal(zinc_config_load(name, &cfg), ZINC_OK);
  assert_int_equal(cfg->s.train_batch_size, 8);
  zinc_config_free(cfg);
  free(name);
  assert_int_equal(chdir(cwd), 0);
  rmdir(tmp);

  /* neither: a missing file with a long name, a long string of other letters */
  char missing[600];
  snprintf(missing, sizeof missing, "/tmp/%0400d.json", 7);
  assert_int_equal(zinc_config_load(missing, &cfg), ZINC_ERR_IO);
  assert_null(cfg);
  const char *msg = zinc_last_error();
  if (!strstr(msg, "/tmp/0000") || !strstr(msg, "(410 characters)") ||
      !strstr(msg, "File name too long") || !strstr(msg, "base64") || strlen(msg) > 400)
    fail_msg("a missing file with a long name: %s", msg);
  memset(missing, '!', 500);
  missing[500] = '\0';
  assert_int_equal(zinc_config_load(missing, &cfg), ZINC_ERR_IO);
  if (!strstr(zinc_last_error(), "(500 characters)") || !strstr(zinc_last_error(), "base64"))
    fail_msg("a long string of other letters: %s", zinc_last_error());
}

int main(void) {
  zinc_log_set_level(ZINC_LOG_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(corpus_round_trips),
      cmocka_unit_test(non_default_values_round_trip),
      cmocka_unit_test(print_lists_every_setting),
      cmocka_unit_test(load_errors_name_the_file),
      cmocka_unit_test(long_base64_config_loads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
