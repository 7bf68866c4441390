/*
 * test_config_zoadam.c — optimizer.type "ZeroOneAdam" (0/1 Adam) and
 * "OneBitLamb" (docs/config.md "0/1 Adam and 1-bit LAMB"): DeepSpeed's
 * defaults when absent, every param landing in its field, 0/1 Adam refused
 * at ZeRO stages 1-3 (the message names the stage and what to do) and
 * with an offloaded optimizer, gradient_clipping accepted (DeepSpeed clips
 * with them); OneBitLamb's keys likewise. Values of the 1-bit family that
 * cannot train (a freeze_step of 0, factor_min above factor_max, ...) are
 * refused at load naming the key the file wrote.
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

static zinc_config *parse_ok(const char *json) {
  zinc_config *cfg = NULL;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    fail_msg("%s: %s", json, zinc_last_error());
  return cfg;
}

static void parse_fails(const char *json, const char *const *words, int nwords) {
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  if (st != ZINC_ERR_CONFIG || cfg)
    fail_msg("%s: status %s, expected ZINC_ERR_CONFIG", json, zinc_status_name(st));
  const char *msg = zinc_last_error();
  for (int i = 0; i < nwords; i++)
    if (!strstr(msg, words[i]))
      fail_msg("%s: message lacks \"%s\": %s", json, words[i], msg);
}

/* DeepSpeed's ZeroOneAdam constructor defaults. */
static void zoadam_defaults(void **state) {
  (void)state;
  zinc_config *cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
                              "\"ZeroOneAdam\"}}");
  const zinc_settings *s = &cfg->s;
  assert_int_equal(s->optimizer, ZINC_OPTIM_ZERO_ONE_ADAM);
  assert_true(s->lr == 1e-3 && s->beta1 == 0.9 && s->beta2 == 0.999 && s->eps == 1e-8);
  assert_true(s->weight_decay == 0.0);
  assert_int_equal(s->var_freeze_step, 100000);
  assert_int_equal(s->var_update_scaler, 16);
  assert_int_equal(s->local_step_scaler, 32678);
  assert_int_equal(s->local_step_clipper, 16);
  assert_int_equal(zinc_config_warning_count(cfg), 0);
  zinc_config_free(cfg);
}

/* Every param with a non-default value; cuda_aware / comm_backend_name
 * pick DeepSpeed's transport: accepted, a warning each when not the default. */
static void zoadam_params_land(void **state) {
  (void)state;
  zinc_config *cfg = parse_ok(
      "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0}, \"optimizer\": "
      "{\"type\": \"ZeroOneAdam\", \"params\": {\"lr\": 0.002, \"betas\": [0.8, 0.99], "
      "\"eps\": 1e-6, \"weight_decay\": 0.01, \"bias_correction\": true, "
      "\"var_freeze_step\": 123, \"var_update_scaler\": 3, \"local_step_scaler\": 7, "
      "\"local_step_clipper\": 4, \"cuda_aware\": false, \"comm_backend_name\": \"nccl\"}}}");
  const zinc_settings *s = &cfg->s;
  assert_true(s->lr == 0.002 && s->beta1 == 0.8 && s->beta2 == 0.99 && s->eps == 1e-6);
  assert_true(s->weight_decay == 0.01);
  assert_int_equal(s->var_freeze_step, 123);
  assert_int_equal(s->var_update_scaler, 3);
  assert_int_equal(s->local_step_scaler, 7);
  assert_int_equal(s->local_step_clipper, 4);
  assert_int_equal(zinc_config_warning_count(cfg), 0);
  zinc_config_free(cfg);
  cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"zerooneadam\", "
                 "\"params\": {\"cuda_aware\": true, \"comm_backend_name\": \"mpi\", "
                 "\"bias_correction\": false}}}");
  assert_int_equal(zinc_config_warning_count(cfg), 3);
  zinc_config_free(cfg);
  const char *const w1[] = {"optimizer.params.var_update_scaler", "0"};
  parse_fails("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"ZeroOneAdam\", "
              "\"params\": {\"var_update_scaler\": 0}}}", w1, 2);
  const char *const w2[] = {"optimizer.params.amsgrad", "AMSGrad"};
  parse_fails("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"ZeroOneAdam\", "
              "\"params\": {\"amsgrad\": true}}}", w2, 2);
}

/* Stages 1-3: refused, naming the stage and the way out. */
static void zoadam_stage_refused(void **state) {
  (void)state;
  for (int stage = 1; stage <= 3; stage++) {
    char json[256], found[64], adam[64];
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": "
             "%d}, \"optimizer\": {\"type\": \"ZeroOneAdam\"}}", stage);
    snprintf(found, sizeof found, "found stage %d", stage);
    snprintf(adam, sizeof adam, "\"Adam\" with ZeRO stage %d", stage);
    const char *const words[] = {"zero_optimization.stage", found,
                                 "set zero_optimization.stage to 0", adam};
    parse_fails(json, words, 4);
  }
  /* DeepSpeed's 0/1 Adam tutorial config clips at 1.0: accepted */
  zinc_config *cfg = parse_ok("{\"train_batch_size\": 8, \"gradient_clipping\": 1.0, "
                              "\"optimizer\": {\"type\": \"ZeroOneAdam\"}}");
  assert_true(cfg->s.gradient_clipping == 1.0);
  zinc_config_free(cfg);
}

/* OneBitLamb: DeepSpeed's defaults, every key landing, stages 1-3 and
 * clipping accepted. */
static void onebit_lamb_keys(void **state) {
  (void)state;
  zinc_config *cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
                              "\"OneBitLamb\"}}");
  const zinc_settings *s = &cfg->s;
  assert_int_equal(s->optimizer, ZINC_OPTIM_ONEBIT_LAMB);
  assert_int_equal(s->freeze_step, 100000);
  assert_true(s->max_coeff == 10.0 && s->min_coeff == 0.01 && s->coeff_beta == 0.9);
  assert_true(s->factor_max == 4.0 && s->factor_min == 0.5 && s->factor_threshold == 0.1);
  zinc_config_free(cfg);
  cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitLamb\", "
                 "\"params\": {\"lr\": 0.01, \"betas\": [0.8, 0.99], \"eps\": 1e-6, "
                 "\"weight_decay\": 0.1, \"max_coeff\": 0.3, \"min_coeff\": 0.02, "
                 "\"freeze_step\": 10, \"coeff_beta\": 0.8, \"factor_max\": 3.0, "
                 "\"factor_min\": 0.4, \"factor_threshold\": 0.2, \"cuda_aware\": false, "
                 "\"comm_backend_name\": \"nccl\"}}}");
  s = &cfg->s;
  assert_true(s->lr == 0.01 && s->beta1 == 0.8 && s->beta2 == 0.99 && s->eps == 1e-6);
  assert_true(s->weight_decay == 0.1 && s->max_coeff == 0.3 && s->min_coeff == 0.02);
  assert_int_equal(s->freeze_step, 10);
  assert_true(s->coeff_beta == 0.8 && s->factor_max == 3.0 && s->factor_min == 0.4 &&
              s->factor_threshold == 0.2);
  assert_int_equal(zinc_config_warning_count(cfg), 0);
  zinc_config_free(cfg);
  const char *const bad[] = {"optimizer.params.coeff_beta", "2"};
  parse_fails("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitLamb\", \"params\": "
              "{\"coeff_beta\": 2}}}", bad, 2);
  const char *const stage[] = {"zero_optimization.stage", "found stage 2",
                               "\"Lamb\" with ZeRO stage 2"};
  parse_fails("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2}, "
              "\"optimizer\": {\"type\": \"OneBitLamb\"}}", stage, 3);
  cfg = parse_ok("{\"train_batch_size\": 8, \"gradient_clipping\": 1.0, \"optimizer\": "
                 "{\"type\": \"OneBitLamb\"}}");
  assert_true(cfg->s.gradient_clipping == 1.0);
  zinc_config_free(cfg);
}

/* The 1-bit family's values that pass each key's own range but cannot
 * train are refused at load, naming the key written: a freeze_step of 0
 * (1-bit LAMB's state turned NaN at step 1; 1-bit Adam's frozen variance
 * would be zero), a lower bound above its upper one (min_coeff/max_coeff,
 * factor_min/factor_max, whichever the file wrote), an upper bound or a
 * coeff_beta that would never move a parameter. What works loads:
 * freeze_step 1, 0/1 Adam's var_freeze_step 0 (its step 1 updates the
 * variance before it freezes). */
static void onebit_ranges(void **state) {
  (void)state;
  static const struct {
    const char *type, *params;
    const char *words[3];
  } refused[] = {
      {"OneBitLamb", "\"freeze_step\": 0", {"optimizer.params.freeze_step:", "found 0", ">= 1"}},
      {"OneBitAdam", "\"freeze_step\": 0", {"optimizer.params.freeze_step:", "found 0", ">= 1"}},
      {"OneBitLamb", "\"factor_min\": 5",
       {"optimizer.params.factor_min:", "found 5", "<= factor_max (4, its default)"}},
      {"OneBitLamb", "\"factor_min\": 0.5, \"factor_max\": 0.4",
       {"optimizer.params.factor_min:", "found 0.5", "<= factor_max (0.4)"}},
      {"OneBitLamb", "\"factor_max\": 0.3",
       {"optimizer.params.factor_max:", "found 0.3", ">= factor_min (0.5, its default)"}},
      {"OneBitLamb", "\"factor_max\": 0, \"factor_min\": 0",
       {"optimizer.params.factor_max:", "found 0", "> 0"}},
      {"OneBitLamb", "\"min_coeff\": 1, \"max_coeff\": 0.5",
       {"optimizer.params.min_coeff:", "found 1", "<= max_coeff (0.5)"}},
      {"OneBitLamb", "\"max_coeff\": 0.001",
       {"optimizer.params.max_coeff:", "found 0.001", ">= min_coeff (0.01, its default)"}},
      {"OneBitLamb", "\"max_coeff\": 0, \"min_coeff\": 0",
       {"optimizer.params.max_coeff:", "found 0", "> 0"}},
      {"OneBitLamb", "\"coeff_beta\": 1", {"optimizer.params.coeff_beta:", "found 1", "1)"}},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char json[256];
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"%s\", "
             "\"params\": {%s}}}", refused[i].type, refused[i].params);
    parse_fails(json, refused[i].words, 3);
  }
  zinc_config *cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
                              "\"OneBitLamb\", \"params\": {\"freeze_step\": 1, \"factor_min\": "
                              "1, \"factor_max\": 1, \"min_coeff\": 0.5, \"max_coeff\": 0.5}}}");
  assert_int_equal(cfg->s.freeze_step, 1);
  assert_int_equal(zinc_config_warning_count(cfg), 0);
  zinc_config_free(cfg);
  cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitAdam\", "
                 "\"params\": {\"freeze_step\": 1}}}");
  assert_int_equal(cfg->s.onebit_freeze_step, 1);
  zinc_config_free(cfg);
  cfg = parse_ok("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"ZeroOneAdam\", "
                 "\"params\": {\"var_freeze_step\": 0}}}");
  assert_int_equal(cfg->s.var_freeze_step, 0);
  zinc_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zoadam_defaults),
      cmocka_unit_test(zoadam_params_land),
      cmocka_unit_test(zoadam_stage_refused),
      cmocka_unit_test(onebit_lamb_keys),
      cmocka_unit_test(onebit_ranges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
