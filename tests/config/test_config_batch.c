/*
 * test_config_batch.c — zinc_settings_resolve_batch against DeepSpeed's
 * rules: a table of hand-worked cases (each combination of given / "auto" /
 * absent keys, successes and failures), then an exhaustive sweep over small
 * values checking the invariants, and idempotence across world sizes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "config_test_util.h"

typedef struct {
  const char *json;
  int dp;
  zinc_status status;
  int64_t train, micro, gas;  /* expected when status is ZINC_OK */
  const char *message;        /* expected in the message otherwise */
} batch_case;

static const batch_case cases[] = {
    /* all three given */
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4,"
     "\"gradient_accumulation_steps\":2}", 4, ZINC_OK, 32, 4, 2, NULL},
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4,"
     "\"gradient_accumulation_steps\":2}", 2, ZINC_ERR_CONFIG, 0, 0, 0,
     "do not multiply out: train_batch_size 32, train_micro_batch_size_per_gpu 4, "
     "gradient_accumulation_steps 2, data-parallel size 2"},
    /* T, M -> G = T / M / W */
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4}", 2, ZINC_OK, 32, 4, 4, NULL},
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4}", 8, ZINC_OK, 32, 4, 1, NULL},
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4}", 3, ZINC_ERR_CONFIG, 0, 0,
     0, "gradient_accumulation_steps 2, data-parallel size 3"},
    {"{\"train_batch_size\":32,\"train_micro_batch_size_per_gpu\":4}", 16, ZINC_ERR_CONFIG, 0, 0,
     0, "gradient_accumulation_steps resolves to 0"},
    /* T, G -> M = T / W / G */
    {"{\"train_batch_size\":32,\"gradient_accumulation_steps\":2}", 4, ZINC_OK, 32, 4, 2, NULL},
    {"{\"train_batch_size\":30,\"gradient_accumulation_steps\":2}", 4, ZINC_ERR_CONFIG, 0, 0, 0,
     "train_micro_batch_size_per_gpu 3, gradient_accumulation_steps 2, data-parallel size 4"},
    {"{\"train_batch_size\":4,\"gradient_accumulation_steps\":4}", 2, ZINC_ERR_CONFIG, 0, 0, 0,
     "train_micro_batch_size_per_gpu resolves to 0"},
    /* M, G -> T = M * G * W */
    {"{\"train_micro_batch_size_per_gpu\":4,\"gradient_accumulation_steps\":2}", 3, ZINC_OK,
     24, 4, 2, NULL},
    /* T -> G = 1, M = T / W */
    {"{\"train_batch_size\":32}", 4, ZINC_OK, 32, 8, 1, NULL},
    {"{\"train_batch_size\":32}", 3, ZINC_ERR_CONFIG, 0, 0, 0,
     "train_batch_size 32, train_micro_batch_size_per_gpu 10"},
    {"{\"train_batch_size\":2}", 4, ZINC_ERR_CONFIG, 0, 0, 0,
     "train_micro_batch_size_per_gpu resolves to 0"},
    /* M -> G = 1, T = M * W */
    {"{\"train_micro_batch_size_per_gpu\":4}", 3, ZINC_OK, 12, 4, 1, NULL},
    /* G alone or nothing: DeepSpeed's assertion */
    {"{\"gradient_accumulation_steps\":2}", 1, ZINC_ERR_CONFIG, 0, 0, 0,
     "neither is given"},
    {"{}", 1, ZINC_ERR_CONFIG, 0, 0, 0, "neither is given"},
    /* "auto" counts as absent ... */
    {"{\"train_batch_size\":16,\"train_micro_batch_size_per_gpu\":\"auto\","
     "\"gradient_accumulation_steps\":\"auto\"}", 2, ZINC_OK, 16, 8, 1, NULL},
    {"{\"train_batch_size\":\"auto\",\"train_micro_batch_size_per_gpu\":2,"
     "\"gradient_accumulation_steps\":\"auto\"}", 2, ZINC_OK, 4, 2, 1, NULL},
    /* ... except that with neither T nor M a number the micro-batch is 1 */
    {"{\"train_batch_size\":\"auto\",\"train_micro_batch_size_per_gpu\":\"auto\","
     "\"gradient_accumulation_steps\":\"auto\"}", 2, ZINC_OK, 2, 1, 1, NULL},
    {"{\"train_batch_size\":\"auto\",\"train_micro_batch_size_per_gpu\":\"auto\","
     "\"gradient_accumulation_steps\":4}", 2, ZINC_OK, 8, 1, 4, NULL},
    {"{\"train_batch_size\":\"auto\",\"gradient_accumulation_steps\":3}", 4, ZINC_OK, 12, 1, 3,
     NULL},
    /* an absurd product overflows instead of wrapping */
    {"{\"train_micro_batch_size_per_gpu\":4611686018427387904,"
     "\"gradient_accumulation_steps\":4}", 2, ZINC_ERR_CONFIG, 0, 0, 0, "overflows"},
};

static void resolve_table(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const batch_case *c = &cases[i];
    zinc_config *cfg;
    assert_int_equal(zinc_config_parse(c->json, &cfg), ZINC_OK);
    zinc_status st = zinc_settings_resolve_batch(&cfg->s, c->dp);
    if (st != c->status)
      fail_msg("case %zu (%s, dp %d): %s, expected %s: %s", i, c->json, c->dp,
               zinc_status_name(st), zinc_status_name(c->status), zinc_last_error());
    if (st == ZINC_OK) {
      if (cfg->s.train_batch_size != c->train || cfg->s.train_micro_batch_size_per_gpu != c->micro ||
          cfg->s.gradient_accumulation_steps != c->gas)
        fail_msg("case %zu (%s, dp %d): T M G = %lld %lld %lld, expected %lld %lld %lld", i,
                 c->json, c->dp, (long long)cfg->s.train_batch_size,
                 (long long)cfg->s.train_micro_batch_size_per_gpu,
                 (long long)cfg->s.gradient_accumulation_steps, (long long)c->train,
                 (long long)c->micro, (long long)c->gas);
    } else if (!strstr(zinc_last_error(), c->message)) {
      fail_msg("case %zu (%s, dp %d): message lacks \"%s\": %s", i, c->json, c->dp, c->message,
               zinc_last_error());
    }
    zinc_config_free(cfg);
  }
}

/* Every combination of given keys with values 1..6 and world sizes 1..4:
 * a success keeps the given values and multiplies out; a failure names the
 * keys. Files that cannot multiply out at any world size fail at load. */
static void resolve_sweep(void **state) {
  (void)state;
  int ok = 0, failed = 0, rejected_at_load = 0;
  for (int mask = 1; mask < 8; mask++)
    for (int t = 1; t <= 24; t++)
      for (int m = 1; m <= 6; m++)
        for (int g = 1; g <= 6; g++)
          for (int dp = 1; dp <= 4; dp++) {
            if ((!(mask & 1) && t > 1) || (!(mask & 2) && m > 1) || (!(mask & 4) && g > 1))
              continue; /* one value per absent key */
            char json[256];
            int n = snprintf(json, sizeof json, "{");
            if (mask & 1)
              n += snprintf(json + n, sizeof json - n, "\"train_batch_size\":%d,", t);
            if (mask & 2)
              n += snprintf(json + n, sizeof json - n, "\"train_micro_batch_size_per_gpu\":%d,", m);
            if (mask & 4)
              n += snprintf(json + n, sizeof json - n, "\"gradient_accumulation_steps\":%d,", g);
            json[n - 1] = '}';
            zinc_config *cfg;
            zinc_status st = zinc_config_parse(json, &cfg);
            if (st != ZINC_OK) {
              /* only a train_batch_size that is not a multiple of M x G */
              assert_true(mask & 1);
              assert_true(t % ((mask & 2 ? m : 1) * (mask & 4 ? g : 1)) != 0);
              assert_non_null(strstr(zinc_last_error(), "train_batch_size"));
              rejected_at_load++;
              continue;
            }
            st = zinc_settings_resolve_batch(&cfg->s, dp);
            const zinc_settings *s = &cfg->s;
            if (mask == 4) { /* G alone */
              assert_int_equal(st, ZINC_ERR_CONFIG);
            } else if (st == ZINC_OK) {
              ok++;
              assert_int_equal(s->train_batch_size,
                               s->train_micro_batch_size_per_gpu *
                                   s->gradient_accumulation_steps * dp);
              if (mask & 1) assert_int_equal(s->train_batch_size, t);
              if (mask & 2) assert_int_equal(s->train_micro_batch_size_per_gpu, m);
              if (mask & 4) assert_int_equal(s->gradient_accumulation_steps, g);
              if (!(mask & 4) && mask != 7) assert_int_equal(s->gradient_accumulation_steps,
                                                             mask == 3 ? t / m / dp : 1);
            } else {
              failed++;
              assert_int_equal(st, ZINC_ERR_CONFIG);
              assert_non_null(strstr(zinc_last_error(), "data-parallel size"));
            }
            zinc_config_free(cfg);
          }
  print_message("batch sweep: %d resolved, %d failed at resolve, %d rejected at load\n", ok,
                failed, rejected_at_load);
  assert_true(ok > 100 && failed > 100 && rejected_at_load > 10);
}

static void resolve_is_idempotent(void **state) {
  (void)state;
  zinc_config *cfg;
  assert_int_equal(zinc_config_parse("{\"train_batch_size\":48,"
                                     "\"train_micro_batch_size_per_gpu\":4}", &cfg), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_batch(&cfg->s, 2), ZINC_OK);
  assert_int_equal(cfg->s.gradient_accumulation_steps, 6);
  assert_int_equal(zinc_settings_resolve_batch(&cfg->s, 4), ZINC_OK);
  assert_int_equal(cfg->s.gradient_accumulation_steps, 3);
  assert_int_equal(zinc_settings_resolve_batch(&cfg->s, 4), ZINC_OK);
  assert_int_equal(cfg->s.gradient_accumulation_steps, 3);
  assert_int_equal(zinc_settings_resolve_batch(&cfg->s, 0), ZINC_ERR_INVALID);
  zinc_config_free(cfg);
}

static void resolve_model_auto(void **state) {
  (void)state;
  zinc_config *cfg;
  assert_int_equal(zinc_config_parse(
                       "{\"fp16\":{\"enabled\":\"auto\"},\"bf16\":{\"enabled\":\"auto\"},"
                       "\"zero_optimization\":{\"stage\":3,\"reduce_bucket_size\":\"auto\","
                       "\"stage3_prefetch_bucket_size\":\"auto\","
                       "\"stage3_param_persistence_threshold\":\"auto\"}}", &cfg),
                   ZINC_OK);
  zinc_settings s;
  assert_int_equal(zinc_settings_copy(&s, &cfg->s), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&s, 4096, 0, 1), ZINC_OK);
  assert_int_equal(s.reduce_bucket_size, 4096LL * 4096);
  assert_int_equal(s.stage3_prefetch_bucket_size, (int64_t)(0.9 * 4096.0 * 4096.0));
  assert_int_equal(s.stage3_param_persistence_threshold, 40960);
  assert_int_equal(s.fp16_enabled, 0);
  assert_int_equal(s.bf16_enabled, 1);
  zinc_settings_free(&s);

  assert_int_equal(zinc_settings_copy(&s, &cfg->s), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&s, 64, 1, 0), ZINC_OK);
  assert_int_equal(s.fp16_enabled, 1);
  assert_int_equal(s.bf16_enabled, 0);
  zinc_settings_free(&s);

  assert_int_equal(zinc_settings_copy(&s, &cfg->s), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&s, 64, 0, 0), ZINC_OK);
  assert_int_equal(s.fp16_enabled, 0);
  assert_int_equal(s.bf16_enabled, 0);
  zinc_settings_free(&s);

  /* no hidden size: an "auto" size is an error naming the key, never a
   * guess; at stage 2 the stage-3 sizes have no effect and need none */
  assert_int_equal(zinc_settings_copy(&s, &cfg->s), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&s, 0, 1, 0), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), "zero_optimization.reduce_bucket_size"));
  assert_non_null(strstr(zinc_last_error(), "zinc_options.hidden_size"));
  s.reduce_bucket_size = 1000;
  assert_int_equal(zinc_settings_resolve_model(&s, 0, 1, 0), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), "zero_optimization.stage3_prefetch_bucket_size"));
  s.stage = 2;
  assert_int_equal(zinc_settings_resolve_model(&s, 0, 1, 0), ZINC_OK);
  assert_int_equal(s.reduce_bucket_size, 1000);
  assert_int_equal(s.stage3_prefetch_bucket_size, 50000000);
  assert_int_equal(s.stage3_param_persistence_threshold, 100000);
  zinc_settings_free(&s);

  assert_int_equal(zinc_settings_copy(&s, &cfg->s), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&s, 1024, 1, 1), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), "both f16 and bf16"));
  zinc_settings_free(&s);
  zinc_config_free(cfg);

  assert_int_equal(zinc_config_parse("{\"fp16\":{\"enabled\":true}}", &cfg), ZINC_OK);
  assert_int_equal(zinc_settings_resolve_model(&cfg->s, 64, 0, 1), ZINC_ERR_CONFIG);
  assert_non_null(strstr(zinc_last_error(), "fp16.enabled is true"));
  zinc_config_free(cfg);
}

int main(void) {
  zinc_log_set_level(ZINC_LOG_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resolve_table),
      cmocka_unit_test(resolve_sweep),
      cmocka_unit_test(resolve_is_idempotent),
      cmocka_unit_test(resolve_model_auto),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
