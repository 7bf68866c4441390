/*
 * test_config_dgc.c — zinc.compression.gradient_codec and
 * zinc.compression.dgc (docs/config.md "Compressed communication", Deep
 * Gradient Compression).
 *
 * Each key given a non-default value lands in its field and nowhere else
 * (the settings equal those of "{}" with the named fields changed, byte
 * for byte); each bad value is ZINC_ERR_CONFIG naming its JSON path; the
 * idle combinations warn once; the settings write out and load back; two
 * ranks that disagree are named by the path.
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

static void defaults_when_absent(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse("{}", &cfg), ZINC_OK);
  assert_int_equal(cfg->s.compress_gradient_codec, ZINC_GRAD_CODEC_QUANT);
  assert_true(cfg->s.dgc_density == 0.001);
  assert_int_equal(cfg->s.dgc_warmup_steps, 0);
  assert_int_equal(cfg->s.dgc_residual, 1);
  zinc_config_free(cfg);
}

#define COMP(body) "{\"zinc\":{\"compression\":{" body "}}}"

static void keys_land_in_their_fields(void **state) {
  (void)state;
  zinc_config *base = NULL;
  assert_int_equal(zinc_config_parse("{}", &base), ZINC_OK);
  static const struct {
    const char *json;
    int codec, residual;
    double density;
    int64_t warmup, block;
  } cases[] = {
      {COMP("\"gradient_codec\":\"dgc\""), ZINC_GRAD_CODEC_DGC, 1, 0.001, 0, 256},
      {COMP("\"gradient_codec\":\"quant\""), ZINC_GRAD_CODEC_QUANT, 1, 0.001, 0, 256},
      {COMP("\"dgc\":{\"density\":0.01}"), ZINC_GRAD_CODEC_QUANT, 1, 0.01, 0, 256},
      {COMP("\"dgc\":{\"density\":1}"), ZINC_GRAD_CODEC_QUANT, 1, 1.0, 0, 256},
      {COMP("\"dgc\":{\"warmup_steps\":400}"), ZINC_GRAD_CODEC_QUANT, 1, 0.001, 400, 256},
      {COMP("\"dgc\":{\"residual\":false}"), ZINC_GRAD_CODEC_QUANT, 0, 0.001, 0, 256},
      {COMP("\"dgc\":null"), ZINC_GRAD_CODEC_QUANT, 1, 0.001, 0, 256},
      {COMP("\"gradient_codec\":\"dgc\",\"block_size\":65536,\"dgc\":{\"density\":0.002,"
            "\"warmup_steps\":8,\"residual\":false}"),
       ZINC_GRAD_CODEC_DGC, 0, 0.002, 8, 65536},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zinc_config *cfg = NULL;
    if (zinc_config_parse(cases[i].json, &cfg) != ZINC_OK)
      fail_msg("%s: %s", cases[i].json, zinc_last_error());
    zinc_settings want = base->s;
    want.compress_gradient_codec = cases[i].codec;
    want.dgc_residual = cases[i].residual;
    want.dgc_density = cases[i].density;
    want.dgc_warmup_steps = cases[i].warmup;
    want.compress_block_size = cases[i].block;
    if (!settings_same(&want, &cfg->s))
      fail_msg("%s: not the defaults with codec %d, residual %d, density %g, warm-up %lld, "
               "block %lld", cases[i].json, cases[i].codec, cases[i].residual, cases[i].density,
               (long long)cases[i].warmup, (long long)cases[i].block);
    zinc_config_free(cfg);
  }
  zinc_config_free(base);
}

static void bad_values_name_their_path(void **state) {
  (void)state;
  static const struct {
    const char *json, *path, *expect;
  } cases[] = {
      {COMP("\"gradient_codec\":\"topk\""), "zinc.compression.gradient_codec: found \"topk\"",
       "\"dgc\""},
      {COMP("\"gradient_codec\":1"), "zinc.compression.gradient_codec: found 1", "\"quant\""},
      {COMP("\"dgc\":{\"density\":0}"), "zinc.compression.dgc.density: found 0", "(0, 1]"},
      {COMP("\"dgc\":{\"density\":1.5}"), "zinc.compression.dgc.density: found 1.5", "(0, 1]"},
      {COMP("\"dgc\":{\"density\":-0.1}"), "zinc.compression.dgc.density: found -0.1", "(0, 1]"},
      {COMP("\"dgc\":{\"density\":\"0.1\"}"), "zinc.compression.dgc.density: found \"0.1\"",
       "a number"},
      {COMP("\"dgc\":{\"warmup_steps\":-1}"), "zinc.compression.dgc.warmup_steps: found -1",
       ">= 0"},
      {COMP("\"dgc\":{\"warmup_steps\":2.5}"), "zinc.compression.dgc.warmup_steps: found 2.5",
       ""},
      {COMP("\"dgc\":{\"residual\":\"yes\"}"), "zinc.compression.dgc.residual: found \"yes\"",
       "true or false"},
      {COMP("\"dgc\":[0.001]"), "zinc.compression.dgc: found [0.001]", "an object"},
      {COMP("\"gradient_codec\":\"dgc\",\"block_size\":65537"), "zinc.compression.block_size = "
       "65537", "at most 65536"},
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

static void expect_warnings(const char *json, int count, const char *needle) {
  test_stderr cap;
  zinc_config *cfg = NULL;
  test_stderr_begin(&cap);
  zinc_status st = zinc_config_parse(json, &cfg);
  char *text = test_stderr_end(&cap);
  if (st != ZINC_OK)
    fail_msg("%s: %s", json, zinc_last_error());
  int n = zinc_config_warning_count(cfg);
  zinc_config_free(cfg);
  if (n != count || (needle && !strstr(text, needle)))
    fail_msg("%s: %d warnings, expected %d with \"%s\":\n%s", json, n, count,
             needle ? needle : "", text);
  free(text);
}

static void idle_settings_warn_once(void **state) {
  (void)state;
  expect_warnings("{\"zero_optimization\":{\"stage\":2},"
                  "\"zinc\":{\"compression\":{\"gradient_codec\":\"dgc\"}}}", 1,
                  "gradient_codec = \"dgc\" has no effect without "
                  "zero_optimization.zero_quantized_gradients");
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true,"
                  "\"zeropp_loco_param\":{}},"
                  "\"zinc\":{\"compression\":{\"gradient_codec\":\"dgc\"}}}", 1,
                  "zeropp_loco_param is not used with zinc.compression.gradient_codec");
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true},"
                  "\"zinc\":{\"compression\":{\"gradient_codec\":\"dgc\",\"dgc\":{\"density\":"
                  "0.01,\"warmup_steps\":100}}}}", 0, NULL);
  expect_warnings(COMP("\"dgc\":{\"densty\":0.01}"), 1, "zinc.compression.dgc.densty");
}

static void settings_write_out_and_load_back(void **state) {
  (void)state;
  const char *file = "{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true},"
                     "\"zinc\":{\"compression\":{\"gradient_codec\":\"dgc\",\"dgc\":{"
                     "\"density\":0.004,\"warmup_steps\":33,\"residual\":false}}}}";
  zinc_config *cfg = NULL, *back = NULL;
  assert_int_equal(zinc_config_parse(file, &cfg), ZINC_OK);
  char *json = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
  if (zinc_config_parse(json, &back) != ZINC_OK)
    fail_msg("written as\n%s\ndoes not load back: %s", json, zinc_last_error());
  if (!settings_same(&cfg->s, &back->s))
    fail_msg("settings differ after the round trip:\n%s", json);
  static const char *const written[] = {"\"gradient_codec\": \"dgc\"", "\"density\": 0.004",
                                        "\"warmup_steps\": 33", "\"residual\": false"};
  for (size_t w = 0; w < sizeof written / sizeof written[0]; w++)
    if (!strstr(json, written[w]))
      fail_msg("the JSON written lacks %s:\n%s", written[w], json);
  free(json);
  zinc_config_free(back);
  zinc_config_free(cfg);
}

static void ranks_that_disagree_are_named(void **state) {
  (void)state;
  static const struct {
    const char *a, *b, *path;
  } cases[] = {
      {COMP("\"gradient_codec\":\"dgc\""), "{}", "zinc.compression.gradient_codec"},
      {COMP("\"dgc\":{\"density\":0.01}"), "{}", "zinc.compression.dgc.density"},
      {COMP("\"dgc\":{\"warmup_steps\":5}"), "{}", "zinc.compression.dgc.warmup_steps"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zinc_config *a = NULL, *b = NULL;
    assert_int_equal(zinc_config_parse(cases[i].a, &a), ZINC_OK);
    assert_int_equal(zinc_config_parse(cases[i].b, &b), ZINC_OK);
    char *ja = zinc_settings_to_json(&a->s), *jb = zinc_settings_to_json(&b->s);
    char path[256], va[96], vb[96];
    int differ = zinc_settings_json_diff(ja, jb, path, sizeof path, va, vb, sizeof va);
    if (!differ || strcmp(path, cases[i].path) != 0)
      fail_msg("%s vs %s: %s, expected the difference at %s", cases[i].a, cases[i].b,
               differ ? path : "no difference", cases[i].path);
    free(ja);
    free(jb);
    zinc_config_free(a);
    zinc_config_free(b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_when_absent),
      cmocka_unit_test(keys_land_in_their_fields),
      cmocka_unit_test(bad_values_name_their_path),
      cmocka_unit_test(idle_settings_warn_once),
      cmocka_unit_test(settings_write_out_and_load_back),
      cmocka_unit_test(ranks_that_disagree_are_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
