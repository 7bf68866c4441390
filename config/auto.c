/*
 * auto.c — "auto", the placeholder Hugging Face's Trainer (and Accelerate)
 * write for values they fill from their own arguments before DeepSpeed
 * reads the file. DeepSpeed itself rejects it; zinc keeps it and resolves
 * it in three moments:
 *   load    zinc_cfg_note_auto: a key written "auto" gets its bit in
 *           auto_mask and a placeholder in its field (ZINC_AUTO, or NaN for
 *           numbers, so that a use before resolution shows); a key written
 *           as a number gets its bit in the config's file_mask.
 *   fill    zinc_config_fill_auto: the trainer's facts, as HF's fill_match:
 *           "auto" takes the value, a different number is a mismatch.
 *   create  zinc_settings_resolve_auto: what is left takes DeepSpeed's
 *           default where one is safe (with a log line) or fails naming
 *           the key and the call that gives it. Bucket sizes and
 *           fp16/bf16 wait for the model (zinc_settings_resolve_model).
 * The batch triad keeps its own bits (batch_given_mask) and rules
 * (resolve.c); fill handles it here too.
 *
 * One table, auto_keys, says for each key its spellings, its field, the
 * range a trainer's value must be in and where the value comes from; the
 * "auto" section of docs/config.md is the same table in prose.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

typedef enum {
  FROM_DEFAULT, /* DeepSpeed's default (what the file's author gets with
                   nothing set), logged */
  FROM_LR,      /* the optimizer's lr, as HF fills it from learning_rate */
  FROM_TRAINER, /* no safe default: create fails without the fact */
  FROM_MODEL    /* resolved at build (resolve.c) */
} auto_source;

typedef struct {
  const char *path[3];  /* DeepSpeed's spellings; [0] is the one messages use */
  zinc_auto_key key;
  zinc_key_kind kind;   /* ZINC_KEY_BOOL (int field), I64 or F64 */
  size_t offset;        /* in zinc_settings */
  double lo, hi;        /* the range of a trainer's value */
  unsigned flags;       /* ZINC_KEY_LO_OPEN / ZINC_KEY_HI_OPEN */
  auto_source source;
  double fallback;      /* FROM_DEFAULT */
  int loud;             /* FROM_DEFAULT: the default changes the training
                           arithmetic: logged at warn, else at info */
  unsigned schedules;   /* scheduler keys: the schedules that have it */
  const char *why;      /* FROM_DEFAULT: whose default; FROM_TRAINER: what the
                           value is and where HF takes it from */
} auto_spec;

#define S zinc_settings
#define INF HUGE_VAL
#define SCHED(t) (1u << (t))
#define WARMUP_LR_DECAY (SCHED(ZINC_SCHED_WARMUP_LR) | SCHED(ZINC_SCHED_WARMUP_DECAY))
#define ALL_SCHEDULES (WARMUP_LR_DECAY | SCHED(ZINC_SCHED_WARMUP_COSINE))
#define DECAYING (SCHED(ZINC_SCHED_WARMUP_DECAY) | SCHED(ZINC_SCHED_WARMUP_COSINE))

static const auto_spec auto_keys[] = {
    {{"gradient_clipping"}, ZINC_AUTO_GRADIENT_CLIPPING, ZINC_KEY_F64,
     offsetof(S, gradient_clipping), 0, INF, 0, FROM_DEFAULT, 1.0, 1, 0,
     "Hugging Face's max_grad_norm default; DeepSpeed's own default is 0, no clipping"},
    {{"fp16.enabled"}, ZINC_AUTO_FP16_ENABLED, ZINC_KEY_BOOL, offsetof(S, fp16_enabled), 0, 1, 0,
     FROM_MODEL, 0, 0, 0, NULL},
    {{"bf16.enabled", "bfloat16.enabled"}, ZINC_AUTO_BF16_ENABLED, ZINC_KEY_BOOL,
     offsetof(S, bf16_enabled), 0, 1, 0, FROM_MODEL, 0, 0, 0, NULL},
    {{"optimizer.params.lr"}, ZINC_AUTO_LR, ZINC_KEY_F64, offsetof(S, lr), 0, INF, 0,
     FROM_TRAINER, 0, 0, 0, "the learning rate; Hugging Face: learning_rate"},
    {{"optimizer.params.betas[0]"}, ZINC_AUTO_BETA1, ZINC_KEY_F64, offsetof(S, beta1), 0, 1,
     ZINC_KEY_HI_OPEN, FROM_DEFAULT, 0.9, 1, 0,
     "DeepSpeed's default and Hugging Face's adam_beta1 default"},
    {{"optimizer.params.betas[1]"}, ZINC_AUTO_BETA2, ZINC_KEY_F64, offsetof(S, beta2), 0, 1,
     ZINC_KEY_HI_OPEN, FROM_DEFAULT, 0.999, 1, 0,
     "DeepSpeed's default and Hugging Face's adam_beta2 default"},
    {{"optimizer.params.eps"}, ZINC_AUTO_EPS, ZINC_KEY_F64, offsetof(S, eps), 0, INF,
     ZINC_KEY_LO_OPEN, FROM_DEFAULT, 1e-8, 1, 0,
     "DeepSpeed's default and Hugging Face's adam_epsilon default"},
    {{"optimizer.params.weight_decay"}, ZINC_AUTO_WEIGHT_DECAY, ZINC_KEY_F64,
     offsetof(S, weight_decay), 0, INF, 0, FROM_TRAINER, 0, 0, 0,
     "the weight decay; Hugging Face: weight_decay"},
    {{"scheduler.params.warmup_min_lr"}, ZINC_AUTO_WARMUP_MIN_LR, ZINC_KEY_F64,
     offsetof(S, warmup_min_lr), 0, INF, 0, FROM_DEFAULT, 0.0, 0, WARMUP_LR_DECAY,
     "DeepSpeed's default, and what Hugging Face fills: it is no trainer argument"},
    {{"scheduler.params.warmup_max_lr"}, ZINC_AUTO_WARMUP_MAX_LR, ZINC_KEY_F64,
     offsetof(S, warmup_max_lr), 0, INF, 0, FROM_LR, 0, 0, WARMUP_LR_DECAY, NULL},
    {{"scheduler.params.warmup_num_steps"}, ZINC_AUTO_WARMUP_NUM_STEPS, ZINC_KEY_I64,
     offsetof(S, warmup_num_steps), 0, INF, 0, FROM_TRAINER, 0, 0, ALL_SCHEDULES,
     "the warmup steps; Hugging Face: warmup_steps, or warmup_ratio x the total steps "
     "(its default 0 and DeepSpeed's 1000 differ)"},
    {{"scheduler.params.total_num_steps"}, ZINC_AUTO_TOTAL_NUM_STEPS, ZINC_KEY_I64,
     offsetof(S, total_num_steps), 1, INF, 0, FROM_TRAINER, 0, 0, DECAYING,
     "the optimizer steps of the whole run; Hugging Face: max_steps, or epochs x "
     "update steps per epoch"},
    {{"zero_optimization.reduce_bucket_size"}, ZINC_AUTO_REDUCE_BUCKET_SIZE, ZINC_KEY_I64,
     offsetof(S, reduce_bucket_size), 1, INF, 0, FROM_MODEL, 0, 0, 0, NULL},
    {{"zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.prefetch_bucket_size"},
     ZINC_AUTO_PREFETCH_BUCKET_SIZE, ZINC_KEY_I64, offsetof(S, stage3_prefetch_bucket_size), 0,
     INF, 0, FROM_MODEL, 0, 0, 0, NULL},
    {{"zero_optimization.stage3_param_persistence_threshold",
      "zero_optimization.param_persistence_threshold"},
     ZINC_AUTO_PARAM_PERSISTENCE_THRESHOLD, ZINC_KEY_I64,
     offsetof(S, stage3_param_persistence_threshold), 0, INF, 0, FROM_MODEL, 0, 0, 0, NULL},
    {{"zero_optimization.stage3_max_live_parameters", "zero_optimization.max_live_parameters"},
     ZINC_AUTO_MAX_LIVE_PARAMETERS, ZINC_KEY_I64, offsetof(S, stage3_max_live_parameters), 0,
     INF, 0, FROM_DEFAULT, 1e9, 0, 0, "DeepSpeed's default"},
    {{"zero_optimization.stage3_max_reuse_distance", "zero_optimization.max_reuse_distance"},
     ZINC_AUTO_MAX_REUSE_DISTANCE, ZINC_KEY_I64, offsetof(S, stage3_max_reuse_distance), 0, INF,
     0, FROM_DEFAULT, 1e9, 0, 0, "DeepSpeed's default"},
    {{"zero_optimization.stage3_gather_16bit_weights_on_model_save",
      "zero_optimization.gather_16bit_weights_on_model_save",
      "zero_optimization.stage3_gather_fp16_weights_on_model_save"},
     ZINC_AUTO_GATHER_16BIT_WEIGHTS, ZINC_KEY_BOOL,
     offsetof(S, stage3_gather_16bit_weights_on_model_save), 0, 1, 0, FROM_DEFAULT, 0, 0, 0,
     "DeepSpeed's default, and Accelerate's zero3_save_16bit_model default"},
    {{"zero_optimization.offload_optimizer.pin_memory"}, ZINC_AUTO_OPTIMIZER_PIN_MEMORY,
     ZINC_KEY_BOOL, offsetof(S, offload_optimizer.pin_memory), 0, 1, 0, FROM_DEFAULT, 0, 0, 0,
     "DeepSpeed's default"},
    {{"zero_optimization.offload_param.pin_memory"}, ZINC_AUTO_PARAM_PIN_MEMORY, ZINC_KEY_BOOL,
     offsetof(S, offload_param.pin_memory), 0, 1, 0, FROM_DEFAULT, 0, 0, 0,
     "DeepSpeed's default"},
    {{"zero_optimization.offload_optimizer.buffer_count"}, ZINC_AUTO_OPTIMIZER_BUFFER_COUNT,
     ZINC_KEY_I64, offsetof(S, offload_optimizer.buffer_count), 0, INF, 0, FROM_DEFAULT, 4, 0,
     0, "DeepSpeed's default"},
    {{"zero_optimization.offload_param.buffer_count"}, ZINC_AUTO_PARAM_BUFFER_COUNT,
     ZINC_KEY_I64, offsetof(S, offload_param.buffer_count), 0, INF, 0, FROM_DEFAULT, 5, 0, 0,
     "DeepSpeed's default"},
};

#define AUTO_KEYS (sizeof auto_keys / sizeof auto_keys[0])
_Static_assert(AUTO_KEYS == (size_t)ZINC_AUTO_KEY_COUNT, "one auto_keys row per zinc_auto_key");

/* ------------------------------------------------------------- fields */

static double field_get(const zinc_settings *s, const auto_spec *a) {
  const char *f = (const char *)s + a->offset;
  switch (a->kind) {
  case ZINC_KEY_BOOL: return *(const int *)f;
  case ZINC_KEY_I64: return (double)*(const int64_t *)f;
  default: return *(const double *)f;
  }
}

static void field_set(zinc_settings *s, const auto_spec *a, double v) {
  char *f = (char *)s + a->offset;
  switch (a->kind) {
  case ZINC_KEY_BOOL: *(int *)f = (int)v; break;
  case ZINC_KEY_I64: *(int64_t *)f = (int64_t)v; break;
  default: *(double *)f = v; break;
  }
}

static void set_placeholder(zinc_settings *s, const auto_spec *a) {
  if (a->kind == ZINC_KEY_F64)
    *(double *)((char *)s + a->offset) = ZINC_AUTO_F64;
  else
    field_set(s, a, ZINC_AUTO);
}

/* ---------------------------------------------------------------- load */

/* The value at a dotted path with optional [i] ("optimizer.params.betas[0]");
 * an element of the string "auto" (betas: "auto") is "auto" itself. */
static const json_t *value_at(const json_t *root, const char *dotted) {
  const json_t *v = root;
  char part[96];
  while (v && *dotted) {
    size_t n = strcspn(dotted, ".[");
    if (n >= sizeof part)
      return NULL;
    memcpy(part, dotted, n);
    part[n] = '\0';
    v = json_is_object(v) ? json_object_get(v, part) : NULL;
    dotted += n;
    if (v && *dotted == '[') {
      size_t index = (size_t)strtoul(dotted + 1, NULL, 10);
      if (!zinc_cfg_is_auto(v))
        v = json_is_array(v) ? json_array_get(v, index) : NULL;
      dotted = strchr(dotted, ']') ? strchr(dotted, ']') + 1 : dotted + strlen(dotted);
    }
    if (*dotted == '.')
      dotted++;
  }
  return v;
}

void zinc_cfg_note_auto(const json_t *root, zinc_settings *s, uint32_t *file_mask) {
  s->auto_mask = 0;
  *file_mask = 0;
  for (size_t i = 0; i < AUTO_KEYS; i++) {
    const auto_spec *a = &auto_keys[i];
    for (size_t k = 0; k < 3 && a->path[k]; k++) {
      const json_t *v = value_at(root, a->path[k]);
      if (!v || json_is_null(v))
        continue;
      if (zinc_cfg_is_auto(v)) {
        s->auto_mask |= ZINC_AUTO_BIT(a->key);
        set_placeholder(s, a);
      } else {
        *file_mask |= ZINC_AUTO_BIT(a->key);
      }
    }
  }
}

/* ---------------------------------------------------------------- fill */

typedef struct {
  const char *path;
  int bit;
  size_t offset;
} batch_spec;

static const batch_spec batch_keys[] = {
    {"train_batch_size", ZINC_BATCH_TRAIN, offsetof(S, train_batch_size)},
    {"train_micro_batch_size_per_gpu", ZINC_BATCH_MICRO, offsetof(S, train_micro_batch_size_per_gpu)},
    {"gradient_accumulation_steps", ZINC_BATCH_GAS, offsetof(S, gradient_accumulation_steps)},
};

static int is_integral(double v) { return v == floor(v) && fabs(v) < 9e15; }

/* "a number >= 0", "an integer >= 1", "0 or 1", "a number in [0, 1)". */
static void describe(const auto_spec *a, char *out, size_t cap) {
  if (a->kind == ZINC_KEY_BOOL)
    snprintf(out, cap, "0 or 1 (false or true)");
  else if (isfinite(a->hi))
    snprintf(out, cap, "a number in %c%g, %g%c", (a->flags & ZINC_KEY_LO_OPEN) ? '(' : '[',
             a->lo, a->hi, (a->flags & ZINC_KEY_HI_OPEN) ? ')' : ']');
  else
    snprintf(out, cap, "%s %s %g", a->kind == ZINC_KEY_I64 ? "an integer" : "a number",
             (a->flags & ZINC_KEY_LO_OPEN) ? ">" : ">=", a->lo);
}

static int in_range(const auto_spec *a, double v) {
  if (a->kind != ZINC_KEY_F64 && !is_integral(v))
    return 0;
  if (v < a->lo || v > a->hi)
    return 0;
  if (((a->flags & ZINC_KEY_LO_OPEN) && v == a->lo) || ((a->flags & ZINC_KEY_HI_OPEN) && v == a->hi))
    return 0;
  return 1;
}

static zinc_status mismatch(const char *path, double has, int filled_before, double value) {
  return zinc_error(ZINC_ERR_CONFIG, "%s: the config has %.15g (%s) and the trainer gives %.15g "
                    "(zinc_config_fill_auto): write \"auto\" in the file to take the trainer's "
                    "value, or give the same value in both", path, has,
                    filled_before ? "from an earlier zinc_config_fill_auto" : "written in the file",
                    value);
}

static zinc_status fill_batch(zinc_config *cfg, const batch_spec *b, double value) {
  zinc_settings *s = &cfg->s;
  if (!isfinite(value) || !is_integral(value) || value < 1)
    return zinc_error(ZINC_ERR_INVALID, "%s: zinc_config_fill_auto got %g, expected a positive "
                      "integer", b->path, value);
  int64_t *field = (int64_t *)((char *)s + b->offset);
  int64_t v = (int64_t)value;
  if (s->batch_given_mask & ZINC_BATCH_GIVEN(b->bit)) {
    if (*field != v)
      return mismatch(b->path, (double)*field,
                      (cfg->batch_filled_mask & ZINC_BATCH_GIVEN(b->bit)) != 0, value);
    return ZINC_OK;
  }
  zinc_log0(ZINC_LOG_INFO, "config %s: %s = %lld from the trainer%s", cfg->source, b->path,
            (long long)v, (s->batch_given_mask & ZINC_BATCH_IS_AUTO(b->bit))
                              ? " (was \"auto\")" : " (not in the file)");
  *field = v;
  s->batch_given_mask = (s->batch_given_mask & ~ZINC_BATCH_IS_AUTO(b->bit)) |
                        ZINC_BATCH_GIVEN(b->bit);
  cfg->batch_filled_mask |= ZINC_BATCH_GIVEN(b->bit);
  return ZINC_OK;
}

static zinc_status unknown_path(const char *path) {
  const char *known[AUTO_KEYS * 3 + 3];
  size_t n = 0;
  for (size_t i = 0; i < AUTO_KEYS; i++)
    for (size_t k = 0; k < 3 && auto_keys[i].path[k]; k++)
      known[n++] = auto_keys[i].path[k];
  for (size_t i = 0; i < 3; i++)
    known[n++] = batch_keys[i].path;
  if (strcmp(path, "optimizer.params.betas") == 0)
    return zinc_error(ZINC_ERR_INVALID, "%s: zinc_config_fill_auto takes one number: give "
                      "\"optimizer.params.betas[0]\" and \"optimizer.params.betas[1]\"", path);
  const char *guess = zinc_cfg_suggest(path, known, n);
  return zinc_error(ZINC_ERR_INVALID, "%s: not a key zinc_config_fill_auto knows%s%s%s (the keys "
                    "are listed in zinc.h and docs/config.md)", path[0] ? path : "(empty path)",
                    guess ? " (did you mean \"" : "", guess ? guess : "", guess ? "\"?)" : "");
}

zinc_status zinc_config_fill_auto(zinc_config *cfg, const char *path, double value) {
  if (!cfg || !path)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_fill_auto: %s is NULL",
                      cfg ? "path" : "cfg");
  for (size_t i = 0; i < 3; i++)
    if (strcmp(path, batch_keys[i].path) == 0)
      return fill_batch(cfg, &batch_keys[i], value);
  const auto_spec *a = NULL;
  for (size_t i = 0; i < AUTO_KEYS && !a; i++)
    for (size_t k = 0; k < 3 && auto_keys[i].path[k]; k++)
      if (strcmp(path, auto_keys[i].path[k]) == 0)
        a = &auto_keys[i];
  if (!a)
    return unknown_path(path);
  if (!isfinite(value) || !in_range(a, value)) {
    char what[64];
    describe(a, what, sizeof what);
    return zinc_error(ZINC_ERR_INVALID, "%s: zinc_config_fill_auto got %g, expected %s", path,
                      value, what);
  }
  zinc_settings *s = &cfg->s;
  uint32_t bit = ZINC_AUTO_BIT(a->key);
  if (a->schedules && !(a->schedules & SCHED(s->scheduler))) {
    zinc_log0(ZINC_LOG_INFO, "config %s: %s = %g from the trainer is not used: %s", cfg->source,
              path, value, s->scheduler == ZINC_SCHED_NONE
                               ? "the file has no scheduler (the lr stays optimizer.params.lr)"
                               : "the file's schedule has no such parameter");
    return ZINC_OK;
  }
  if (!(s->auto_mask & bit) && ((cfg->file_mask | cfg->filled_mask) & bit)) {
    double has = field_get(s, a);
    return has == value ? ZINC_OK : mismatch(path, has, (cfg->filled_mask & bit) != 0, value);
  }
  if (s->auto_mask & bit)
    zinc_log0(ZINC_LOG_INFO, "config %s: %s = %g from the trainer (was \"auto\")", cfg->source,
              path, value);
  else
    zinc_log0(ZINC_LOG_INFO, "config %s: %s = %g from the trainer (not in the file, where "
              "DeepSpeed would take %g)", cfg->source, path, value, field_get(s, a));
  field_set(s, a, value);
  s->auto_mask &= ~bit;
  cfg->filled_mask |= bit;
  return ZINC_OK;
}

/* ------------------------------------------------------------- create */

/* The checks of validate.c that a filled or resolved value could break. */
static zinc_status check_filled(const zinc_settings *s, uint32_t file_mask) {
  if (s->fp16_enabled == 1 && s->bf16_enabled == 1)
    return zinc_error(ZINC_ERR_CONFIG, "bf16.enabled: true while fp16.enabled is true: fp16 and "
                      "bf16 cannot both be enabled (check what zinc_config_fill_auto gave)");
  const zinc_offload_settings *o[2] = {&s->offload_optimizer, &s->offload_param};
  for (int i = 0; i < 2; i++)
    if (o[i]->device == ZINC_OFFLOAD_NVME && o[i]->buffer_count < 1)
      return zinc_error(ZINC_ERR_CONFIG, "zero_optimization.%s.buffer_count: %lld, expected at "
                        "least 1 buffer for NVMe offload", i ? "offload_param" : "offload_optimizer",
                        (long long)o[i]->buffer_count);
  if (s->scheduler == ZINC_SCHED_WARMUP_DECAY || s->scheduler == ZINC_SCHED_WARMUP_COSINE) {
    int64_t warmup = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
    if (s->scheduler == ZINC_SCHED_WARMUP_COSINE && s->total_num_steps == warmup)
      return zinc_error(ZINC_ERR_CONFIG, "scheduler.params.total_num_steps: %lld, expected more "
                        "than the %lld warmup steps: WarmupCosineLR divides by total_num_steps - "
                        "warmup_num_steps", (long long)s->total_num_steps, (long long)warmup);
    uint32_t pair = ZINC_AUTO_BIT(ZINC_AUTO_WARMUP_NUM_STEPS) |
                    ZINC_AUTO_BIT(ZINC_AUTO_TOTAL_NUM_STEPS);
    /* the load warned already when the file gave both */
    if (s->total_num_steps < warmup && (file_mask & pair) != pair)
      zinc_log0(ZINC_LOG_WARN, "config: scheduler.params.total_num_steps %lld is less than "
                "warmup_num_steps %lld (DeepSpeed warns too)", (long long)s->total_num_steps,
                (long long)warmup);
  }
  return ZINC_OK;
}

zinc_status zinc_settings_resolve_auto(zinc_settings *s, uint32_t file_mask,
                                       uint32_t filled_mask) {
  const auto_spec *first = NULL;
  char others[384] = "";
  for (size_t i = 0; i < AUTO_KEYS; i++) {
    const auto_spec *a = &auto_keys[i];
    uint32_t bit = ZINC_AUTO_BIT(a->key);
    if (!(s->auto_mask & bit) || a->source == FROM_MODEL)
      continue;
    uint32_t lr = ZINC_AUTO_BIT(ZINC_AUTO_LR);
    if (a->source == FROM_DEFAULT) {
      field_set(s, a, a->fallback);
      s->auto_mask &= ~bit;
      zinc_log0(a->loud ? ZINC_LOG_WARN : ZINC_LOG_INFO, "config: %s is \"auto\" and the trainer "
                "gave no value: using %g (%s; give it with zinc_config_fill_auto)", a->path[0],
                a->fallback, a->why);
    } else if (a->source == FROM_LR && !(s->auto_mask & lr) && ((file_mask | filled_mask) & lr)) {
      s->warmup_max_lr = s->lr;
      s->auto_mask &= ~bit;
      zinc_log0(ZINC_LOG_INFO, "config: %s is \"auto\": using optimizer.params.lr %g, as Hugging "
                "Face fills it", a->path[0], s->lr);
    } else if (!first) {
      first = a;
    } else {
      size_t len = strlen(others);
      snprintf(others + len, sizeof others - len, "%s%s", len ? ", " : "", a->path[0]);
    }
  }
  if (first) {
    char also[448] = "";
    if (others[0])
      snprintf(also, sizeof also, " (also \"auto\" with no value: %s)", others);
    if (first->source == FROM_LR)
      return zinc_error(ZINC_ERR_CONFIG, "%s: \"auto\" is the optimizer's learning rate (as "
                        "Hugging Face fills it), which neither the file nor the trainer gave: "
                        "call zinc_config_fill_auto(cfg, \"optimizer.params.lr\", lr) or "
                        "zinc_config_fill_auto(cfg, \"%s\", lr) before zinc_engine_create%s",
                        first->path[0], first->path[0], also);
    return zinc_error(ZINC_ERR_CONFIG, "%s: \"auto\" and the trainer gave no value, and there is "
                      "no safe default (%s): call zinc_config_fill_auto(cfg, \"%s\", value) "
                      "before zinc_engine_create%s", first->path[0], first->why, first->path[0],
                      also);
  }
  return check_filled(s, file_mask);
}
