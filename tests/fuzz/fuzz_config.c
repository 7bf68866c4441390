/*
 * fuzz_config.c — libFuzzer target for the config loader, the one parser of
 * outside input in config/. Every input either fails with a status and a
 * message (and no object), or loads, and then:
 *   - its JSON form loads back to the same settings and the same JSON;
 *   - batch resolution at world sizes 1-3 either fails or multiplies out;
 *   - "auto" resolution at create fails with a message or leaves only
 *     the model's keys, and model resolution leaves no "auto" behind;
 *   - the LR schedule is finite and >= 0, the loss scale > 0.
 * A broken invariant traps, so that libFuzzer keeps the input.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/config.h"
#include "config_test_util.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

#define REQUIRE(cond)                                                       \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_config: invariant failed: %s (line %d)\n", #cond, \
              __LINE__);                                                    \
      __builtin_trap();                                                     \
    }                                                                       \
  } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* The environment wins over "zinc.log_level" in the inputs: stay quiet. */
  setenv("ZINC_LOG_LEVEL", "error", 0);
  return 0;
}

static void check_resolution(const zinc_config *cfg) {
  /* "auto" without a safe default fails with a message; else only what the
   * model decides is left */
  zinc_settings resolved;
  REQUIRE(zinc_settings_copy(&resolved, &cfg->s) == ZINC_OK);
  if (zinc_settings_resolve_auto(&resolved, cfg->file_mask, cfg->filled_mask) != ZINC_OK) {
    REQUIRE(zinc_last_error()[0] != '\0');
    zinc_settings_free(&resolved);
    return;
  }
  const zinc_settings *loaded = &resolved;
  for (int dp = 1; dp <= 3; dp++) {
    zinc_settings s;
    REQUIRE(zinc_settings_copy(&s, loaded) == ZINC_OK);
    if (zinc_settings_resolve_batch(&s, dp) == ZINC_OK) {
      REQUIRE(s.train_micro_batch_size_per_gpu > 0 && s.gradient_accumulation_steps > 0);
      REQUIRE(s.train_batch_size ==
              s.train_micro_batch_size_per_gpu * s.gradient_accumulation_steps * dp);
    } else {
      REQUIRE(zinc_last_error()[0] != '\0');
    }
    if (zinc_settings_resolve_model(&s, dp == 1 ? 0 : 4096, dp == 2, dp == 3) == ZINC_OK) {
      REQUIRE(s.reduce_bucket_size != ZINC_AUTO && s.stage3_prefetch_bucket_size != ZINC_AUTO &&
              s.stage3_param_persistence_threshold != ZINC_AUTO);
      REQUIRE(s.fp16_enabled != ZINC_AUTO && s.bf16_enabled != ZINC_AUTO);
      REQUIRE(s.auto_mask == 0);
      zinc_loss_scaler ls;
      zinc_loss_scaler_init(&ls, &s);
      for (int i = 0; i < 8; i++) {
        zinc_loss_scaler_update(&ls, i % 3 == 0);
        REQUIRE(zinc_loss_scaler_scale(&ls) > 0);
      }
    }
    zinc_settings_free(&s);
  }
  /* the rate is defined once the engine's scheduler checks pass (OneCycle
   * without cycle_max_lr loads, and fails at zinc_engine_create) */
  if (zinc_settings_check_scheduler(loaded) != ZINC_OK) {
    zinc_settings_free(&resolved);
    return;
  }
  static const int64_t its[] = {0, 1, 2, 999, 1000, 1001, 1 << 20};
  for (size_t i = 0; i < sizeof its / sizeof its[0]; i++) {
    double lr = zinc_lr_at(loaded, its[i]);
    REQUIRE(isfinite(lr) && lr >= 0);
  }
  zinc_settings_free(&resolved);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';

  zinc_config *cfg = (zinc_config *)&cfg;
  zinc_status st = zinc_config_parse(text, &cfg);
  if (st != ZINC_OK) {
    REQUIRE(cfg == NULL);
    REQUIRE(zinc_last_error()[0] != '\0');
    free(text);
    return 0;
  }
  char *json = zinc_settings_to_json(&cfg->s);
  REQUIRE(json != NULL);
  zinc_config *back = NULL;
  REQUIRE(zinc_config_parse(json, &back) == ZINC_OK);
  REQUIRE(settings_same(&cfg->s, &back->s));
  char *again = zinc_settings_to_json(&back->s);
  REQUIRE(again && strcmp(json, again) == 0);
  check_resolution(cfg);

  free(again);
  free(json);
  zinc_config_free(back);
  zinc_config_free(cfg);
  free(text);
  return 0;
}
