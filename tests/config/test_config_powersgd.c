/*
 * test_config_powersgd.c — zinc.compression.gradient_codec "powersgd" and
 * zinc.compression.powersgd (docs/config.md "PowerSGD"): PyTorch's
 * PowerSGDState names and defaults.
 *
 * Each key given a non-default value lands in its field and nowhere else
 * (the settings equal those of "{}" with the named field changed, byte for
 * byte); each bad value is ZINC_ERR_CONFIG naming its JSON path; stages 2
 * and 3 are refused saying why and what to do; qgZ beside it warns once;
 * the settings write out and load back.
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

#define PSGD(body) "{\"zinc\":{\"compression\":{\"gradient_codec\":\"powersgd\"," \
                   "\"powersgd\":{" body "}}}}"

static void defaults_are_pytorchs(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse(PSGD(""), &cfg), ZINC_OK);
  assert_int_equal(cfg->s.compress_gradient_codec, ZINC_GRAD_CODEC_POWERSGD);
  assert_int_equal(cfg->s.psgd_rank, 1);
  assert_int_equal(cfg->s.psgd_start_iter, 1000);
  assert_true(cfg->s.psgd_min_compression_rate == 2);
  assert_int_equal(cfg->s.psgd_error_feedback, 1);
  assert_int_equal(cfg->s.psgd_warm_start, 1);
  assert_true(cfg->s.psgd_orth_epsilon == 0);
  assert_int_equal(cfg->s.psgd_random_seed, 0);
  assert_int_equal(cfg->s.psgd_stats_frequency, 10000);
  assert_int_equal(cfg->s.psgd_batch_same_shape, 0);
  zinc_config_free(cfg);
}

static void keys_land_in_their_fields(void **state) {
  (void)state;
  zinc_config *base = NULL;
  assert_int_equal(zinc_config_parse(PSGD(""), &base), ZINC_OK);
  zinc_config *cfg = NULL;
#define CASE(json, field, value)                                                              \
  do {                                                                                        \
    if (zinc_config_parse(PSGD(json), &cfg) != ZINC_OK)                                       \
      fail_msg("%s: %s", json, zinc_last_error());                                            \
    zinc_settings want = base->s;                                                             \
    want.field = value;                                                                       \
    if (!settings_same(&want, &cfg->s))                                                       \
      fail_msg("%s: not the defaults with %s changed", json, #field);                         \
    zinc_config_free(cfg);                                                                    \
  } while (0)
  CASE("\"matrix_approximation_rank\":4", psgd_rank, 4);
  CASE("\"start_powerSGD_iter\":10", psgd_start_iter, 10);
  CASE("\"start_powerSGD_iter\":0", psgd_start_iter, 0);
  CASE("\"min_compression_rate\":0.5", psgd_min_compression_rate, 0.5);
  CASE("\"use_error_feedback\":false", psgd_error_feedback, 0);
  CASE("\"warm_start\":false", psgd_warm_start, 0);
  CASE("\"orthogonalization_epsilon\":1e-8", psgd_orth_epsilon, 1e-8);
  CASE("\"random_seed\":42", psgd_random_seed, 42);
  CASE("\"compression_stats_logging_frequency\":5", psgd_stats_frequency, 5);
  CASE("\"batch_tensors_with_same_shape\":true", psgd_batch_same_shape, 1);
#undef CASE
  zinc_config_free(base);
}

static void bad_values_name_their_path(void **state) {
  (void)state;
  static const struct {
    const char *json, *path, *expect;
  } cases[] = {
      {PSGD("\"matrix_approximation_rank\":0"),
       "zinc.compression.powersgd.matrix_approximation_rank: found 0", ">= 1"},
      {PSGD("\"start_powerSGD_iter\":-1"), "zinc.compression.powersgd.start_powerSGD_iter: "
       "found -1", ">= 0"},
      {PSGD("\"min_compression_rate\":-2"), "zinc.compression.powersgd.min_compression_rate: "
       "found -2", ">= 0"},
      {PSGD("\"orthogonalization_epsilon\":-1e-8"),
       "zinc.compression.powersgd.orthogonalization_epsilon: found -1e-8", ">= 0"},
      {PSGD("\"use_error_feedback\":\"yes\""),
       "zinc.compression.powersgd.use_error_feedback: found \"yes\"", "true or false"},
      {PSGD("\"random_seed\":-3"), "zinc.compression.powersgd.random_seed: found -3", ">= 0"},
      {"{\"zinc\":{\"compression\":{\"powersgd\":4}}}", "zinc.compression.powersgd: found 4",
       "an object"},
      {"{\"zinc\":{\"compression\":{\"gradient_codec\":\"power\"}}}",
       "zinc.compression.gradient_codec: found \"power\"", "\"powersgd\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_parse(cases[i].json, &cfg);
    if (st != ZINC_ERR_CONFIG || cfg)
      fail_msg("%s: status %s, expected ZINC_ERR_CONFIG", cases[i].json, zinc_status_name(st));
    const char *msg = zinc_last_error();
    if (!strstr(msg, cases[i].path) || !strstr(msg, cases[i].expect))
      fail_msg("%s: the message lacks \"%s\" or \"%s\":\n  %s", cases[i].json, cases[i].path,
               cases[i].expect, msg);
  }
}

/* Stages 2 and 3 produce the gradient partitioned: refused, saying so. */
static void stages_2_and_3_are_refused(void **state) {
  (void)state;
  for (int stage = 0; stage <= 3; stage++) {
    char json[256];
    snprintf(json, sizeof json, "{\"zero_optimization\":{\"stage\":%d},\"zinc\":{\"compression\":"
             "{\"gradient_codec\":\"powersgd\"}}}", stage);
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_parse(json, &cfg);
    if (stage <= 1) {
      if (st != ZINC_OK)
        fail_msg("stage %d: %s", stage, zinc_last_error());
      zinc_config_free(cfg);
      continue;
    }
    if (st != ZINC_ERR_CONFIG || cfg)
      fail_msg("stage %d: status %s, expected ZINC_ERR_CONFIG", stage, zinc_status_name(st));
    const char *msg = zinc_last_error();
    char want[64];
    snprintf(want, sizeof want, "zero_optimization.stage = %d", stage);
    if (!strstr(msg, "powersgd") || !strstr(msg, want) || !strstr(msg, "no rank") ||
        !strstr(msg, "set stage 0 or 1"))
      fail_msg("stage %d: the message does not say why and what to do:\n  %s", stage, msg);
  }
}

static void qgz_beside_it_warns_once(void **state) {
  (void)state;
  const char *json = "{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true},"
                     "\"zinc\":{\"compression\":{\"gradient_codec\":\"powersgd\"}}}";
  test_stderr cap;
  zinc_config *cfg = NULL;
  test_stderr_begin(&cap);
  zinc_status st = zinc_config_parse(json, &cfg);
  char *text = test_stderr_end(&cap);
  if (st != ZINC_OK)
    fail_msg("%s: %s", json, zinc_last_error());
  int n = zinc_config_warning_count(cfg);
  zinc_config_free(cfg);
  if (n != 1 || !strstr(text, "zero_quantized_gradients is not used with"))
    fail_msg("%d warnings, expected 1:\n%s", n, text);
  free(text);
}

static void settings_write_out_and_load_back(void **state) {
  (void)state;
  const char *file = PSGD("\"matrix_approximation_rank\":3,\"start_powerSGD_iter\":7,"
                          "\"min_compression_rate\":1.5,\"use_error_feedback\":false,"
                          "\"warm_start\":false,\"orthogonalization_epsilon\":1e-6,"
                          "\"random_seed\":9,\"compression_stats_logging_frequency\":100,"
                          "\"batch_tensors_with_same_shape\":true");
  zinc_config *cfg = NULL, *back = NULL;
  assert_int_equal(zinc_config_parse(file, &cfg), ZINC_OK);
  char *json = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
  if (zinc_config_parse(json, &back) != ZINC_OK)
    fail_msg("written as\n%s\ndoes not load back: %s", json, zinc_last_error());
  if (!settings_same(&cfg->s, &back->s))
    fail_msg("settings differ after the round trip:\n%s", json);
  static const char *const written[] = {"\"gradient_codec\": \"powersgd\"",
                                        "\"matrix_approximation_rank\": 3",
                                        "\"start_powerSGD_iter\": 7", "\"random_seed\": 9"};
  for (size_t w = 0; w < sizeof written / sizeof written[0]; w++)
    if (!strstr(json, written[w]))
      fail_msg("the JSON written lacks %s:\n%s", written[w], json);
  free(json);
  zinc_config_free(back);
  zinc_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_are_pytorchs),
      cmocka_unit_test(keys_land_in_their_fields),
      cmocka_unit_test(bad_values_name_their_path),
      cmocka_unit_test(stages_2_and_3_are_refused),
      cmocka_unit_test(qgz_beside_it_warns_once),
      cmocka_unit_test(settings_write_out_and_load_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
