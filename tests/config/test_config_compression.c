/*
 * test_config_compression.c — the keys of compressed communication
 * (docs/config.md "Compressed communication"): communication_data_type,
 * zero_optimization.zero_quantized_gradients / zero_quantized_weights /
 * zeropp_loco_param and "zinc": {"compression": {...}}.
 *
 * Each key given a non-default value lands in its field and nowhere else
 * (the settings equal those of "{}" with the named fields changed, byte
 * for byte); each bad value is ZINC_ERR_CONFIG whose message starts with
 * the JSON path and the value found; each warning fires once, and the
 * settings that act say nothing; the settings write out and load back.
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

/* ------------------------------------------------------------ defaults */

/* What docs/config.md states for an absent key, written out here. */
static void defaults_when_absent(void **state) {
  (void)state;
  zinc_config *cfg = NULL;
  assert_int_equal(zinc_config_parse("{}", &cfg), ZINC_OK);
  const zinc_settings *s = &cfg->s;
  assert_int_equal(s->communication_data_type, -1);
  assert_int_equal(s->zero_quantized_gradients, 0);
  assert_int_equal(s->zero_quantized_weights, 0);
  assert_int_equal(s->loco_enabled, 0);
  assert_true(s->loco_err_beta == 0.8);
  assert_int_equal(s->loco_reset_T, 1024);
  assert_int_equal(s->compress_gradient_bits, 4);
  assert_int_equal(s->compress_gradient_codec, ZINC_GRAD_CODEC_QUANT);
  assert_int_equal(s->compress_weight_bits, 8);
  assert_int_equal(s->compress_block_size, 256);
  assert_int_equal(s->compress_scope, ZINC_COMPRESS_INTER_NODE);
  zinc_config_free(cfg);
}

/* ------------------------------------------------------- keys land */

typedef enum { F_INT, F_I64, F_F64 } field_kind;

typedef struct {
  const char *name;
  size_t offset;
  field_kind kind;
  double value;
} field_set;

#define FI(f, v) {#f, offsetof(zinc_settings, f), F_INT, v}
#define FL(f, v) {#f, offsetof(zinc_settings, f), F_I64, v}
#define FD(f, v) {#f, offsetof(zinc_settings, f), F_F64, v}

typedef struct {
  const char *json;
  field_set fields[6]; /* ends at the first without a name */
} land_case;

static const land_case land_cases[] = {
    {"{\"communication_data_type\":\"fp32\"}", {FI(communication_data_type, ZINC_F32)}},
    {"{\"communication_data_type\":\"fp16\"}", {FI(communication_data_type, ZINC_F16)}},
    {"{\"communication_data_type\":\"bf16\"}", {FI(communication_data_type, ZINC_BF16)}},
    /* DeepSpeed lower-cases the string first */
    {"{\"communication_data_type\":\"BF16\"}", {FI(communication_data_type, ZINC_BF16)}},
    {"{\"communication_data_type\":\"Fp16\"}", {FI(communication_data_type, ZINC_F16)}},
    /* null is DeepSpeed's default: the gradients' own dtype */
    {"{\"communication_data_type\":null}", {{NULL, 0, F_INT, 0}}},
    /* the type is its own choice, whatever the training precision */
    {"{\"bf16\":{\"enabled\":true},\"communication_data_type\":\"fp16\"}",
     {FI(bf16_enabled, 1), FI(communication_data_type, ZINC_F16)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":1}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1)}},
    /* lands at stage 1 too (where it warns: qwZ acts at stage 3 only) */
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_weights\":true}}",
     {FI(stage, 1), FI(zero_quantized_weights, 1)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true,"
     "\"zeropp_loco_param\":{\"err_beta\":0.5,\"reset_T\":7}}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1), FI(loco_enabled, 1),
      FD(loco_err_beta, 0.5), FL(loco_reset_T, 7)}},
    /* a partial object keeps the other key's default; {} is LoCo with both */
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true,"
     "\"zeropp_loco_param\":{\"reset_T\":2048}}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1), FI(loco_enabled, 1),
      FL(loco_reset_T, 2048)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true,"
     "\"zeropp_loco_param\":{\"err_beta\":0}}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1), FI(loco_enabled, 1),
      FD(loco_err_beta, 0)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zero_quantized_gradients\":true,"
     "\"zeropp_loco_param\":{}}}",
     {FI(stage, 1), FI(zero_quantized_gradients, 1), FI(loco_enabled, 1)}},
    {"{\"zero_optimization\":{\"stage\":1,\"zeropp_loco_param\":null}}", {FI(stage, 1)}},
    {"{\"zinc\":{\"compression\":{\"gradient_bits\":8}}}", {FI(compress_gradient_bits, 8)}},
    {"{\"zinc\":{\"compression\":{\"gradient_bits\":1}}}", {FI(compress_gradient_bits, 1)}},
    {"{\"zinc\":{\"compression\":{\"gradient_bits\":4.0}}}", {{NULL, 0, F_INT, 0}}},
    {"{\"zinc\":{\"compression\":{\"gradient_codec\":\"terngrad\"}}}",
     {FI(compress_gradient_codec, ZINC_GRAD_CODEC_TERNGRAD)}},
    {"{\"zinc\":{\"compression\":{\"gradient_codec\":\"quant\"}}}", {{NULL, 0, F_INT, 0}}},
    {"{\"zinc\":{\"compression\":{\"weight_bits\":4}}}", {FI(compress_weight_bits, 4)}},
    {"{\"zinc\":{\"compression\":{\"block_size\":100}}}", {FL(compress_block_size, 100)}},
    {"{\"zinc\":{\"compression\":{\"block_size\":1}}}", {FL(compress_block_size, 1)}},
    {"{\"zinc\":{\"compression\":{\"block_size\":1048576}}}",
     {FL(compress_block_size, 1048576)}},
    {"{\"zinc\":{\"compression\":{\"scope\":\"all\"}}}", {FI(compress_scope, ZINC_COMPRESS_ALL)}},
    {"{\"zinc\":{\"compression\":{\"scope\":\"inter_node\"}}}", {{NULL, 0, F_INT, 0}}},
    {"{\"zinc\":{\"compression\":null}}", {{NULL, 0, F_INT, 0}}},
};

static void set_field(zinc_settings *s, const field_set *f) {
  char *p = (char *)s + f->offset;
  switch (f->kind) {
  case F_INT: *(int *)p = (int)f->value; break;
  case F_I64: *(int64_t *)p = (int64_t)f->value; break;
  case F_F64: *(double *)p = f->value; break;
  }
}

static void keys_land_in_their_fields(void **state) {
  (void)state;
  zinc_config *base = NULL;
  assert_int_equal(zinc_config_parse("{}", &base), ZINC_OK);
  for (size_t i = 0; i < sizeof land_cases / sizeof land_cases[0]; i++) {
    const land_case *c = &land_cases[i];
    zinc_config *cfg = NULL;
    if (zinc_config_parse(c->json, &cfg) != ZINC_OK)
      fail_msg("%s: %s", c->json, zinc_last_error());
    zinc_settings want = base->s;
    for (const field_set *f = c->fields; f->name; f++)
      set_field(&want, f);
    if (!settings_same(&want, &cfg->s)) {
      fprintf(stderr, "%s: expected", c->json);
      for (const field_set *f = c->fields; f->name; f++)
        fprintf(stderr, " %s = %g", f->name, f->value);
      fprintf(stderr, " and every other field at its default\n");
      fail();
    }
    zinc_config_free(cfg);
  }
  zinc_config_free(base);
}

/* ------------------------------------------------------- bad values */

typedef struct {
  const char *json;
  const char *path;  /* the message starts with "<path>: found <value>" */
  const char *value;
  const char *expect; /* and names what is accepted */
} bad_case;

#define CDT(v) "{\"communication_data_type\":" v "}"
#define ZERO(k, v) "{\"zero_optimization\":{\"stage\":2,\"" k "\":" v "}}"
#define LOCO(v) ZERO("zeropp_loco_param", v)
#define COMP(k, v) "{\"zinc\":{\"compression\":{\"" k "\":" v "}}}"

static const bad_case bad_cases[] = {
    {CDT("\"float32\""), "communication_data_type", "\"float32\"", "\"fp32\", \"fp16\", \"bf16\""},
    {CDT("\"bfloat16\""), "communication_data_type", "\"bfloat16\"", "or null"},
    {CDT("\"fp8\""), "communication_data_type", "\"fp8\"", "\"bf16\""},
    {CDT("\"\""), "communication_data_type", "\"\"", "\"fp32\""},
    {CDT("16"), "communication_data_type", "16", "\"fp16\""},
    {CDT("true"), "communication_data_type", "true", "\"fp16\""},
    {ZERO("zero_quantized_gradients", "\"yes\""), "zero_optimization.zero_quantized_gradients",
     "\"yes\"", "true or false"},
    {ZERO("zero_quantized_gradients", "2"), "zero_optimization.zero_quantized_gradients", "2",
     "true or false"},
    {ZERO("zero_quantized_weights", "\"true\""), "zero_optimization.zero_quantized_weights",
     "\"true\"", "true or false"},
    {LOCO("true"), "zero_optimization.zeropp_loco_param", "true", "null or an object"},
    {LOCO("[0.8,1024]"), "zero_optimization.zeropp_loco_param", "[0.8,1024]", "an object"},
    {LOCO("{\"err_beta\":1}"), "zero_optimization.zeropp_loco_param.err_beta", "1", "[0, 1)"},
    {LOCO("{\"err_beta\":1.5}"), "zero_optimization.zeropp_loco_param.err_beta", "1.5", "[0, 1)"},
    {LOCO("{\"err_beta\":-0.1}"), "zero_optimization.zeropp_loco_param.err_beta", "-0.1",
     "[0, 1)"},
    {LOCO("{\"err_beta\":\"0.8\"}"), "zero_optimization.zeropp_loco_param.err_beta", "\"0.8\"",
     "a number"},
    {LOCO("{\"reset_T\":0}"), "zero_optimization.zeropp_loco_param.reset_T", "0", ">= 1"},
    {LOCO("{\"reset_T\":-5}"), "zero_optimization.zeropp_loco_param.reset_T", "-5", ">= 1"},
    {LOCO("{\"reset_T\":\"1024\"}"), "zero_optimization.zeropp_loco_param.reset_T", "\"1024\"",
     ">= 1"},
    {COMP("gradient_bits", "2"), "zinc.compression.gradient_bits", "2", "1, 4 or 8"},
    {COMP("gradient_bits", "16"), "zinc.compression.gradient_bits", "16", "1, 4 or 8"},
    {COMP("gradient_bits", "0"), "zinc.compression.gradient_bits", "0", "1, 4 or 8"},
    {COMP("gradient_bits", "4.5"), "zinc.compression.gradient_bits", "4.5", "1, 4 or 8"},
    {COMP("gradient_bits", "\"4\""), "zinc.compression.gradient_bits", "\"4\"", "1, 4 or 8"},
    {COMP("gradient_codec", "\"TernGrad\""), "zinc.compression.gradient_codec",
     "\"TernGrad\"", "\"quant\" (gradient_bits' block codec), \"terngrad\""},
    {COMP("gradient_codec", "\"int4\""), "zinc.compression.gradient_codec", "\"int4\"",
     "\"terngrad\""},
    {COMP("gradient_codec", "2"), "zinc.compression.gradient_codec", "2", "\"quant\""},
    {COMP("weight_bits", "1"), "zinc.compression.weight_bits", "1", "4 or 8"},
    {COMP("weight_bits", "16"), "zinc.compression.weight_bits", "16", "4 or 8"},
    {COMP("block_size", "0"), "zinc.compression.block_size", "0", "1..1048576"},
    {COMP("block_size", "1048577"), "zinc.compression.block_size", "1048577", "1..1048576"},
    {COMP("block_size", "-256"), "zinc.compression.block_size", "-256", "1..1048576"},
    {COMP("block_size", "2.5"), "zinc.compression.block_size", "2.5", "1..1048576"},
    {COMP("scope", "\"intra_node\""), "zinc.compression.scope", "\"intra_node\"",
     "\"inter_node\""},
    {COMP("scope", "\"ALL\""), "zinc.compression.scope", "\"ALL\"", "\"all\""},
    {COMP("scope", "1"), "zinc.compression.scope", "1", "\"inter_node\""},
    {"{\"zinc\":{\"compression\":true}}", "zinc.compression", "true", "an object"},
    {"{\"zinc\":{\"compression\":[4,8]}}", "zinc.compression", "[4,8]", "an object"},
};

static void bad_values_name_their_path(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case *c = &bad_cases[i];
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_parse(c->json, &cfg);
    if (st != ZINC_ERR_CONFIG || cfg)
      fail_msg("%s: status %s, expected ZINC_ERR_CONFIG", c->json, zinc_status_name(st));
    /* "config <string>: <path>: found <value>, expected <what>" */
    const char *msg = zinc_last_error();
    const char *after_source = strstr(msg, "<string>: ");
    char head[256];
    snprintf(head, sizeof head, "%s: found %s, expected ", c->path, c->value);
    if (!after_source || strncmp(after_source + strlen("<string>: "), head, strlen(head)) != 0 ||
        !strstr(msg, c->expect))
      fail_msg("%s: the message does not start with \"%s\" or lacks \"%s\":\n  %s", c->json,
               head, c->expect, msg);
  }
}

/* ------------------------------------------------------------ warnings */

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

/* json loads with `count` warnings, each needle in the text exactly once. */
static void expect_warnings(const char *json, int count, const char *const *needles) {
  char *text;
  int n = parse_warnings(json, &text);
  if (n != count || test_count_lines(text, "[zinc warn") != count)
    fail_msg("%s: %d warnings counted, %d logged, expected %d:\n%s", json, n,
             test_count_lines(text, "[zinc warn"), count, text);
  for (; needles && *needles; needles++) {
    const char *at = strstr(text, *needles);
    if (!at || strstr(at + 1, *needles))
      fail_msg("%s: warning text has \"%s\" %s:\n%s", json, *needles,
               at ? "more than once" : "not at all", text);
  }
  free(text);
}

static void idle_settings_warn_once(void **state) {
  (void)state;
  /* qgZ acts at stages 1, 2 and 3 (1/2: a zinc extension) */
  for (int stage = 1; stage <= 3; stage++) {
    char json[256];
    snprintf(json, sizeof json, "{\"zero_optimization\":{\"stage\":%d,"
             "\"zero_quantized_gradients\":true}}", stage);
    expect_warnings(json, 0, NULL);
  }
  expect_warnings("{\"zero_optimization\":{\"stage\":0,\"zero_quantized_gradients\":true}}", 1,
                  (const char *[]){"zero_optimization.zero_quantized_gradients = true has no "
                                   "effect at stage 0", NULL});
  /* qwZ acts on the stage-3 parameter gather only: stages 0, 1 and 2 warn */
  expect_warnings("{\"zero_optimization\":{\"stage\":3,\"zero_quantized_gradients\":true,"
                  "\"zero_quantized_weights\":true}}", 0, NULL);
  for (int stage = 0; stage <= 2; stage++) {
    char json[256], needle[160];
    snprintf(json, sizeof json, "{\"zero_optimization\":{\"stage\":%d,"
             "\"zero_quantized_weights\":true}}", stage);
    snprintf(needle, sizeof needle, "zero_optimization.zero_quantized_weights = true has no "
             "effect at stage %d", stage);
    expect_warnings(json, 1, (const char *[]){needle, "stage 3 only", NULL});
  }
  expect_warnings("{\"zero_optimization\":{\"stage\":0,\"zero_quantized_gradients\":true,"
                  "\"zero_quantized_weights\":true}}", 2,
                  (const char *[]){"zero_quantized_gradients = true", "zero_quantized_weights "
                                   "= true", NULL});
  /* false at stage 0: nothing to say */
  expect_warnings("{\"zero_optimization\":{\"stage\":0,\"zero_quantized_gradients\":false,"
                  "\"zero_quantized_weights\":false,\"zeropp_loco_param\":null}}", 0, NULL);

  /* LoCo is error feedback for qgZ only: qwZ quantizes the exact master
   * afresh at every gather, so its error does not accumulate */
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zeropp_loco_param\":{\"err_beta\":0.8,"
                  "\"reset_T\":1024}}}", 1,
                  (const char *[]){"zero_optimization.zeropp_loco_param has no effect without "
                                   "zero_quantized_gradients", NULL});
  expect_warnings("{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":true,"
                  "\"zeropp_loco_param\":{}}}", 1,
                  (const char *[]){"zeropp_loco_param has no effect", NULL});
  {
    char *text;
    parse_warnings("{\"zero_optimization\":{\"stage\":3,\"zeropp_loco_param\":{}}}", &text);
    if (strstr(text, "weight_error_feedback"))
      fail_msg("the LoCo warning names a key that no longer exists:\n%s", text);
    free(text);
  }
  expect_warnings("{\"zero_optimization\":{\"stage\":3,\"zero_quantized_gradients\":true,"
                  "\"zeropp_loco_param\":{}}}", 0, NULL);
  /* the keys zinc does not implement (docs/config.md: not (yet) supported)
   * are unknown keys: a warning each, ignored */
  expect_warnings("{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":true,"
                  "\"zero_quantized_gradients\":true,\"zeropp_loco_param\":{}},"
                  "\"zinc\":{\"compression\":{\"weight_error_feedback\":true,"
                  "\"activation_bits\":4}}}", 2,
                  (const char *[]){"unknown key zinc.compression.weight_error_feedback",
                                   "unknown key zinc.compression.activation_bits", NULL});

  /* one-bit signs without error feedback: allowed, said once */
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true},"
                  "\"zinc\":{\"compression\":{\"gradient_bits\":1}}}", 1,
                  (const char *[]){"zinc.compression.gradient_bits = 1 without "
                                   "zero_optimization.zeropp_loco_param",
                                   "will not converge", NULL});
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true,"
                  "\"zeropp_loco_param\":{}},\"zinc\":{\"compression\":{\"gradient_bits\":1}}}",
                  0, NULL);
  /* TernGrad takes the place of the bit width's codec: no sign warning, and
   * TernGrad without error feedback is its normal use */
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true},"
                  "\"zinc\":{\"compression\":{\"gradient_bits\":1,"
                  "\"gradient_codec\":\"terngrad\"}}}", 0, NULL);
  /* not in use (no qgZ): the bit width is idle, not wrong */
  expect_warnings("{\"zero_optimization\":{\"stage\":2},"
                  "\"zinc\":{\"compression\":{\"gradient_bits\":1}}}", 0, NULL);

  /* DeepSpeed allows a communication type other than the training type */
  expect_warnings("{\"bf16\":{\"enabled\":true},\"communication_data_type\":\"fp16\"}", 0, NULL);
  expect_warnings("{\"fp16\":{\"enabled\":true},\"communication_data_type\":\"bf16\"}", 0, NULL);
  expect_warnings("{\"communication_data_type\":\"fp32\"}", 0, NULL);
  /* every compression key at once, in use: silent */
  expect_warnings("{\"communication_data_type\":\"bf16\",\"zero_optimization\":{\"stage\":3,"
                  "\"zero_quantized_gradients\":true,\"zero_quantized_weights\":true,"
                  "\"zeropp_loco_param\":{\"err_beta\":0.9,\"reset_T\":64}},"
                  "\"zinc\":{\"compression\":{\"gradient_bits\":8,\"weight_bits\":4,"
                  "\"block_size\":64,\"scope\":\"all\"}}}", 0, NULL);
  /* an unknown key inside the new objects is named */
  expect_warnings("{\"zinc\":{\"compression\":{\"blocksize\":64}}}", 1,
                  (const char *[]){"zinc.compression.blocksize", "\"block_size\"", NULL});
  expect_warnings("{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true,"
                  "\"zeropp_loco_param\":{\"err_bta\":0.5}}}", 1,
                  (const char *[]){"zero_optimization.zeropp_loco_param.err_bta",
                                   "\"err_beta\"", NULL});
  /* the key DeepSpeed has and zinc does not implement stays inert */
  expect_warnings("{\"zero_optimization\":{\"stage\":3,"
                  "\"zero_quantized_nontrainable_weights\":true}}", 1,
                  (const char *[]){"accepts but does not act on", NULL});
}

/* ------------------------------------------------------------ round trip */

static void settings_write_out_and_load_back(void **state) {
  (void)state;
  static const char *const files[] = {
      "{}",
      "{\"communication_data_type\":\"fp16\",\"zero_optimization\":{\"stage\":3,"
      "\"zero_quantized_gradients\":true,\"zero_quantized_weights\":true,"
      "\"zeropp_loco_param\":{\"err_beta\":0.3,\"reset_T\":33}},"
      "\"zinc\":{\"compression\":{\"gradient_bits\":1,\"weight_bits\":4,\"block_size\":96,"
      "\"scope\":\"all\",\"gradient_codec\":\"terngrad\"}}}",
      "{\"communication_data_type\":\"bf16\"}",
      "{\"communication_data_type\":\"fp32\"}",
  };
  static const char *const written[] = {
      "\"communication_data_type\": \"fp16\"", "\"zero_quantized_gradients\": true",
      "\"zero_quantized_weights\": true", "\"err_beta\": 0.29999999999999999",
      "\"reset_T\": 33", "\"gradient_bits\": 1", "\"weight_bits\": 4", "\"block_size\": 96",
      "\"scope\": \"all\"", "\"gradient_codec\": \"terngrad\"",
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    zinc_config *cfg = NULL, *back = NULL;
    if (zinc_config_parse(files[i], &cfg) != ZINC_OK)
      fail_msg("%s: %s", files[i], zinc_last_error());
    char *json = NULL;
    assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
    if (zinc_config_parse(json, &back) != ZINC_OK)
      fail_msg("%s written as\n%s\ndoes not load back: %s", files[i], json, zinc_last_error());
    if (!settings_same(&cfg->s, &back->s))
      fail_msg("%s: settings differ after the round trip:\n%s", files[i], json);
    if (i == 0 && (!strstr(json, "\"communication_data_type\": null") ||
                   !strstr(json, "\"zeropp_loco_param\": null") ||
                   !strstr(json, "\"scope\": \"inter_node\"") ||
                   !strstr(json, "\"gradient_codec\": \"quant\"")))
      fail_msg("defaults not written as DeepSpeed's null / zinc's inter_node:\n%s", json);
    for (size_t w = 0; i == 1 && w < sizeof written / sizeof written[0]; w++)
      if (!strstr(json, written[w]))
        fail_msg("%s: the JSON written lacks %s:\n%s", files[i], written[w], json);
    free(json);
    zinc_config_free(back);
    zinc_config_free(cfg);
  }
}

/* Ranks must agree on every compression setting (zinc_engine_create
 * compares the written settings): a difference is named by its path. */
static void ranks_that_disagree_are_named(void **state) {
  (void)state;
  static const struct {
    const char *a, *b, *path;
  } cases[] = {
      {"{\"communication_data_type\":\"bf16\"}", "{}", "communication_data_type"},
      {"{\"zero_optimization\":{\"stage\":2,\"zero_quantized_gradients\":true}}",
       "{\"zero_optimization\":{\"stage\":2}}", "zero_optimization.zero_quantized_gradients"},
      {"{\"zero_optimization\":{\"stage\":3,\"zero_quantized_weights\":true}}",
       "{\"zero_optimization\":{\"stage\":3}}", "zero_optimization.zero_quantized_weights"},
      {"{\"zero_optimization\":{\"stage\":2,\"zeropp_loco_param\":{\"reset_T\":8}}}",
       "{\"zero_optimization\":{\"stage\":2,\"zeropp_loco_param\":{\"reset_T\":9}}}",
       "zero_optimization.zeropp_loco_param.reset_T"},
      {"{\"zinc\":{\"compression\":{\"block_size\":64}}}", "{}", "zinc.compression.block_size"},
      {"{\"zinc\":{\"compression\":{\"scope\":\"all\"}}}", "{}", "zinc.compression.scope"},
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
               differ ? path : "no difference found", cases[i].path);
    free(ja);
    free(jb);
    zinc_config_free(a);
    zinc_config_free(b);
  }
}

int main(void) {
  zinc_log_set_level(ZINC_LOG_WARN);
  if (getenv("ZINC_LOG_LEVEL")) {
    print_message("SKIPPED: ZINC_LOG_LEVEL is set; it overrides the level this test needs\n");
    return 77;
  }
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
