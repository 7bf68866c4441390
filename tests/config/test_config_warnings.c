/*
 * test_config_warnings.c — what a config that loads says about itself: the
 * count and the text of its warnings (captured from the logger), and that
 * "zinc.log_level" governs them.
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

/* Parse json (must load), return its warning count and the logged text. */
static int parse_warnings(const char *json, char **text) {
  test_stderr cap;
  zinc_config *cfg = NULL;
  test_stderr_begin(&cap);
  zinc_status st = zinc_config_parse(json, &cfg);
  *text = test_stderr_end(&cap);
  if (st != ZINC_OK)
    fail_msg("%s: %s", json, zinc_last_error());
  int n = zinc_config_warning_count(cfg);
  zinc_config_free(cfg);
  return n;
}

static void expect_warning(const char *json, int count, const char *const *needles) {
  char *text;
  int n = parse_warnings(json, &text);
  if (n != count || test_count_lines(text, "[zinc warn") != count)
    fail_msg("%s: %d warnings counted, %d logged, expected %d:\n%s", json, n,
             test_count_lines(text, "[zinc warn"), count, text);
  for (; needles && *needles; needles++)
    if (!strstr(text, *needles))
      fail_msg("%s: warning text lacks \"%s\":\n%s", json, *needles, text);
  free(text);
}

static void unknown_keys_suggest(void **state) {
  (void)state;
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"overlap_com\":true}}", 1,
                 (const char *[]){"unknown key zero_optimization.overlap_com",
                                  "did you mean \"overlap_comm\"", NULL});
  expect_warning("{\"zero_optimisation\":{\"stage\":2}}", 1,
                 (const char *[]){"unknown key zero_optimisation",
                                  "did you mean \"zero_optimization\"", NULL});
  expect_warning("{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"lr\":1e-4,"
                 "\"adamw_mode\":true,\"weight_decay\":0.1}}}", 1,
                 (const char *[]){"optimizer.params.adamw_mode",
                                  "did you mean \"adam_w_mode\"", NULL});
  expect_warning("{\"aio\":{\"queue_deepth\":8},\"fp16\":{\"enabled\":true,"
                 "\"initial_scale\":12}}", 2,
                 (const char *[]){"aio.queue_deepth", "\"queue_depth\"",
                                  "fp16.initial_scale", "\"initial_scale_power\"", NULL});
  /* nothing close: no suggestion */
  expect_warning("{\"activation_checkpointing\":{\"frobnicate\":1}}", 1,
                 (const char *[]){"unknown key activation_checkpointing.frobnicate; ignored",
                                  NULL});
}

static void ignored_sections_one_warning(void **state) {
  (void)state;
  expect_warning("{\"wandb\":{\"enabled\":false},"
                 "\"flops_profiler\":{\"enabled\":false},\"compression_training\":{},"
                 "\"data_efficiency\":{\"enabled\":false},\"elasticity\":{\"enabled\":false}}",
                 1,
                 (const char *[]){"flops_profiler, compression_training, data_efficiency, "
                                  "elasticity, wandb", "does not implement", NULL});
  /* comms_logger is read: no warning, and it is not among the ignored */
  expect_warning("{\"comms_logger\":{\"enabled\":true,\"verbose\":false,\"prof_all\":true,"
                 "\"debug\":false,\"prof_ops\":[\"all_reduce\"]}}", 0, NULL);
  /* counting nothing is said */
  expect_warning("{\"comms_logger\":{\"enabled\":true,\"prof_all\":false}}", 1,
                 (const char *[]){"no collective will be counted", NULL});
  /* csv_monitor and tensorboard are written: no warning */
  expect_warning("{\"tensorboard\":{\"enabled\":false,\"job_name\":\"j\"},"
                 "\"csv_monitor\":{\"enabled\":false,\"output_path\":\"o\"}}", 0, NULL);
  /* enabled monitors zinc does not write: a warning each, naming the way */
  expect_warning("{\"wandb\":{\"enabled\":true,\"project\":\"p\"}}", 1,
                 (const char *[]){"wandb.enabled is true but zinc does not write wandb logs",
                                  "\"csv_monitor\" or \"tensorboard\"", NULL});
  expect_warning("{\"comet\":{\"enabled\":true},\"wandb\":{\"enabled\":true}}", 2,
                 (const char *[]){"zinc does not write comet logs", NULL});
  /* an unknown key inside a monitor section is named */
  expect_warning("{\"csv_monitor\":{\"enabled\":false,\"job_nam\":\"x\"}}", 1,
                 (const char *[]){"csv_monitor.job_nam", "job_name", NULL});
}

static void inert_keys_say_so(void **state) {
  (void)state;
  /* DeepSpeed's default value: silent */
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"round_robin_gradients\":false,"
                 "\"load_from_fp32_weights\":true,\"ignore_unused_parameters\":true},"
                 "\"fp16\":{\"enabled\":true,\"auto_cast\":false}}", 0, NULL);
  /* another value: a warning that says zinc does not act on it (not "unknown") */
  char *text;
  int n = parse_warnings("{\"zero_optimization\":{\"stage\":3,"
                         "\"zero_quantized_nontrainable_weights\":true,"
                         "\"mics_shard_size\":8},\"dump_state\":true}", &text);
  assert_int_equal(n, 3);
  assert_int_equal(test_count_lines(text, "accepts but does not act on"), 3);
  assert_null(strstr(text, "unknown"));
  assert_non_null(strstr(text, "zero_optimization.mics_shard_size = 8"));
  free(text);
  /* hpZ acts at stage 3 (silent there) and, as in DeepSpeed, not below */
  expect_warning("{\"zero_optimization\":{\"stage\":3,\"zero_hpz_partition_size\":8}}", 0, NULL);
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"zero_hpz_partition_size\":8}}", 1,
                 (const char *[]){"zero_hpz_partition_size = 8", "no effect at stage 2", NULL});
}

static void special_cases_warn(void **state) {
  (void)state;
  expect_warning("{\"aio\":{\"use_gds\":true}}", 1,
                 (const char *[]){"aio.use_gds = true", "not supported", NULL});
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"device\":\"cpu\","
                 "\"nvme_path\":\"/nvme\"}}}", 1,
                 (const char *[]){"offload_optimizer.nvme_path is ignored", "\"cpu\"", NULL});
  /* offload_optimizer.ratio: honoured with device cpu (no warning), said
   * with device none, read as 1 with NVMe on either side */
  expect_warning("{\"zero_optimization\":{\"stage\":1,\"offload_optimizer\":{\"device\":\"cpu\","
                 "\"ratio\":0.25}}}", 0, NULL);
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"offload_optimizer\":{\"ratio\":0.5}}}", 1,
                 (const char *[]){"ratio 0.5 has no effect", "\"none\"", NULL});
  expect_warning("{\"zero_optimization\":{\"stage\":3,\"offload_optimizer\":{\"device\":\"cpu\","
                 "\"ratio\":0.5},\"offload_param\":{\"device\":\"nvme\",\"nvme_path\":\"/n\"}}}",
                 1, (const char *[]){"ratio 0.5 is read as 1", "offload_param.device is \"nvme\"",
                                     NULL});
  expect_warning("{\"optimizer\":{\"type\":\"AdamW\",\"params\":{\"adam_w_mode\":false}}}", 1,
                 (const char *[]){"adam_w_mode = false has no effect", NULL});
  expect_warning("{\"zero_optimization\":{\"stage\":2,\"cpu_offload\":true}}", 1,
                 (const char *[]){"cpu_offload is deprecated", NULL});
  expect_warning("{\"zero_optimization\":true}", 1,
                 (const char *[]){"deprecated form", "{\"stage\": 1}", NULL});
  expect_warning("{\"scheduler\":{\"type\":\"WarmupDecayLR\",\"params\":{\"total_num_steps\":10,"
                 "\"warmup_num_steps\":100}}}", 1,
                 (const char *[]){"total_num_steps 10 is less than warmup_num_steps 100", NULL});
  /* several at once are counted one by one */
  expect_warning("{\"aio\":{\"use_gds\":true,\"bogus\":1},\"wandb\":{},\"dump_state\":true}", 4,
                 NULL);
}

/* comms_logger's keys land in the settings; absent keys keep DeepSpeed's
 * defaults (prof_all true, the rest false); prof_ops takes DeepSpeed's
 * names, its aliases included. */
static void comms_logger_read(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse("{\"comms_logger\":{\"enabled\":true}}", &cfg), ZINC_OK);
  const zinc_comms_logger_settings *cl = &cfg->s.comms_logger;
  assert_true(cl->enabled && cl->prof_all && !cl->verbose && !cl->debug && !cl->prof_ops);
  zinc_config_free(cfg);
  assert_int_equal(zinc_config_parse("{\"comms_logger\":{\"enabled\":true,\"verbose\":true,"
                                     "\"debug\":true,\"prof_all\":false,\"prof_ops\":["
                                     "\"reduce_scatter_tensor\",\"all_gather_into_tensor\","
                                     "\"send\"]}}", &cfg), ZINC_OK);
  cl = &cfg->s.comms_logger;
  assert_true(cl->enabled && !cl->prof_all && cl->verbose && cl->debug);
  assert_int_equal(cl->prof_ops, (1u << ZINC_COMMS_REDUCE_SCATTER) | (1u << ZINC_COMMS_ALL_GATHER));
  zinc_config_free(cfg);
}

static void log_level_governs_warnings(void **state) {
  (void)state;
  char *text;
  /* "error" silences the file's own warnings; they are still counted */
  int n = parse_warnings("{\"zinc\":{\"log_level\":\"error\"},\"flops_profiler\":{},"
                         "\"fp16\":{\"enabld\":true}}", &text);
  assert_int_equal(n, 2);
  assert_int_equal(test_count_lines(text, "[zinc warn"), 0);
  free(text);
  assert_false(zinc_log_enabled(ZINC_LOG_WARN));
  n = parse_warnings("{\"zinc\":{\"log_level\":\"debug\"}}", &text);
  assert_int_equal(n, 0);
  assert_true(zinc_log_enabled(ZINC_LOG_DEBUG));
  free(text);
  zinc_log_set_level(ZINC_LOG_WARN);
}

int main(void) {
  zinc_log_set_level(ZINC_LOG_WARN);
  if (getenv("ZINC_LOG_LEVEL")) {
    print_message("SKIPPED: ZINC_LOG_LEVEL is set; it overrides the level this test needs\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unknown_keys_suggest),
      cmocka_unit_test(ignored_sections_one_warning),
      cmocka_unit_test(inert_keys_say_so),
      cmocka_unit_test(special_cases_warn),
      cmocka_unit_test(comms_logger_read),
      cmocka_unit_test(log_level_governs_warnings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
