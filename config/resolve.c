/*
 * resolve.c — the settings that a config file cannot fix alone: the batch
 * triad (needs the data-parallel size, at engine creation) and the "auto"
 * values that follow the model (bucket sizes from the hidden size the
 * trainer gives, fp16/bf16 from the parameters' dtype, at engine build).
 *
 * Batch rules are DeepSpeed's (runtime/config.py, _set_batch_related_
 * parameters and _batch_assertion), with T = train_batch_size,
 * M = train_micro_batch_size_per_gpu, G = gradient_accumulation_steps,
 * W = data-parallel size:
 *   T, M, G given     -> nothing derived
 *   T, M              -> G = T / M / W      (integer division)
 *   T, G              -> M = T / W / G
 *   M, G              -> T = M * G * W
 *   T                 -> G = 1, M = T / W
 *   M                 -> G = 1, T = M * W
 *   G or nothing      -> error
 * then T, M, G > 0 and T == M * G * W, else an error naming the values.
 * A key written "auto" counts as not given (a value the trainer gave with
 * zinc_config_fill_auto counts as given), except that when neither T nor M
 * is a number but one of them is "auto", M is taken as 1, with a warning.
 *
 * Resolution is idempotent: it starts again from the keys the file gave,
 * so an engine may resolve the same settings for another world size.
 */
#include <math.h>
#include <stdio.h>

#include "config/config_internal.h"

static zinc_status batch_error(const char *what, int64_t t, int64_t m, int64_t g, int w) {
  return zinc_error(ZINC_ERR_CONFIG,
                    "%s: train_batch_size %lld, train_micro_batch_size_per_gpu %lld, "
                    "gradient_accumulation_steps %lld, data-parallel size %d; DeepSpeed's "
                    "rule is train_batch_size = train_micro_batch_size_per_gpu x "
                    "gradient_accumulation_steps x data-parallel size",
                    what, (long long)t, (long long)m, (long long)g, w);
}

zinc_status zinc_settings_check_scheduler(const zinc_settings *s) {
  if (s->scheduler == ZINC_SCHED_ONE_CYCLE) {
    const char *missing = isnan(s->cycle_min_lr) ? "cycle_min_lr"
                          : isnan(s->cycle_max_lr) ? "cycle_max_lr" : NULL;
    if (missing)
      return zinc_error(ZINC_ERR_CONFIG, "scheduler.params.%s: found nothing, expected a number "
                        ">= 0: OneCycle has no default for it (DeepSpeed's constructor requires "
                        "it too); give it in the scheduler's params", missing);
  }
  if (s->scheduler != ZINC_SCHED_WARMUP_DECAY && s->scheduler != ZINC_SCHED_WARMUP_COSINE)
    return ZINC_OK;
  const char *name = zinc_sched_type_name(s->scheduler);
  if (s->total_num_steps < 1)
    return zinc_error(ZINC_ERR_CONFIG, "scheduler.params.total_num_steps: found nothing, "
                      "expected a positive integer: %s decays over total_num_steps (DeepSpeed's "
                      "constructor requires it); give it in the scheduler's params", name);
  int64_t warmup = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
  if (s->scheduler == ZINC_SCHED_WARMUP_COSINE && s->total_num_steps == warmup)
    return zinc_error(ZINC_ERR_CONFIG, "scheduler.params.total_num_steps: found %lld, expected "
                      "more than the %lld warmup steps: WarmupCosineLR divides by "
                      "total_num_steps - warmup_num_steps", (long long)s->total_num_steps,
                      (long long)warmup);
  return ZINC_OK;
}

zinc_status zinc_settings_resolve_batch(zinc_settings *s, int dp_size) {
  if (dp_size < 1)
    return zinc_error(ZINC_ERR_INVALID, "resolving the batch size: data-parallel size %d, "
                      "expected >= 1", dp_size);
  int mask = s->batch_given_mask;
  int has_t = (mask & ZINC_BATCH_GIVEN(ZINC_BATCH_TRAIN)) != 0;
  int has_m = (mask & ZINC_BATCH_GIVEN(ZINC_BATCH_MICRO)) != 0;
  int has_g = (mask & ZINC_BATCH_GIVEN(ZINC_BATCH_GAS)) != 0;
  int64_t t = has_t ? s->train_batch_size : 0;
  int64_t m = has_m ? s->train_micro_batch_size_per_gpu : 0;
  int64_t g = has_g ? s->gradient_accumulation_steps : 0;
  int64_t w = dp_size;

  if (!has_t && !has_m) {
    if (!(mask & (ZINC_BATCH_IS_AUTO(ZINC_BATCH_TRAIN) | ZINC_BATCH_IS_AUTO(ZINC_BATCH_MICRO))))
      return zinc_error(ZINC_ERR_CONFIG,
                        "train_batch_size and train_micro_batch_size_per_gpu: neither is "
                        "given; give at least one of them (DeepSpeed requires it too)");
    m = 1; /* "auto" and the trainer gave no batch size */
    has_m = 1;
    zinc_log0(ZINC_LOG_WARN, "config: train_micro_batch_size_per_gpu is \"auto\" and the "
              "trainer gave no batch size: using 1 (give it with zinc_config_fill_auto)");
  }

  int overflow = 0;
  if (has_t && has_m && has_g) {
    /* all given: nothing to derive */
  } else if (has_t && has_m) {
    g = t / m / w;
  } else if (has_t && has_g) {
    m = t / w / g;
  } else if (has_m && has_g) {
    overflow = __builtin_mul_overflow(m, g, &t) || __builtin_mul_overflow(t, w, &t);
  } else if (has_t) {
    g = 1;
    m = t / w;
  } else {
    g = 1;
    overflow = __builtin_mul_overflow(m, w, &t);
  }
  if (overflow)
    return batch_error("train_batch_size overflows", t, m, g, dp_size);
  if (t <= 0 || m <= 0 || g <= 0)
    return batch_error(m <= 0 ? "train_micro_batch_size_per_gpu resolves to 0"
                              : "gradient_accumulation_steps resolves to 0",
                       t, m, g, dp_size);
  int64_t product;
  if (__builtin_mul_overflow(m, g, &product) || __builtin_mul_overflow(product, w, &product) ||
      product != t)
    return batch_error("the batch sizes do not multiply out", t, m, g, dp_size);
  s->train_batch_size = t;
  s->train_micro_batch_size_per_gpu = m;
  s->gradient_accumulation_steps = g;
  return ZINC_OK;
}

/* An "auto" size with no hidden size to compute it from. */
static zinc_status no_hidden_size(const char *key) {
  return zinc_error(ZINC_ERR_CONFIG, "zero_optimization.%s is \"auto\" but the model's hidden "
                    "size was not given: set zinc_options.hidden_size (Hugging Face's rule: "
                    "reduce_bucket_size = h*h, stage3_prefetch_bucket_size = 0.9*h*h, "
                    "stage3_param_persistence_threshold = 10*h), or write the size in elements",
                    key);
}

/* Hugging Face's rules for "auto" bucket sizes (transformers'
 * integrations/deepspeed.py): from the model's hidden size h, which only
 * the trainer knows (a guess from the parameters' shapes takes an MLP or a
 * vocabulary-sized bias for it). The stage-3 sizes have no effect at
 * stages 0-2, where "auto" takes DeepSpeed's defaults without h. */
zinc_status zinc_settings_resolve_model(zinc_settings *s, int64_t hidden_size,
                                        int any_f16, int any_bf16) {
  int64_t h = hidden_size;
  /* h*h saturates: past ~3e9 one bucket holds any model anyway */
  int64_t hh = h > 0 ? (h > 3000000000LL ? INT64_MAX / 16 : h * h) : 0;
  int stage3 = s->stage == 3;
  if (h <= 0) {
    if (s->reduce_bucket_size == ZINC_AUTO)
      return no_hidden_size("reduce_bucket_size");
    if (stage3 && s->stage3_prefetch_bucket_size == ZINC_AUTO)
      return no_hidden_size("stage3_prefetch_bucket_size");
    if (stage3 && s->stage3_param_persistence_threshold == ZINC_AUTO)
      return no_hidden_size("stage3_param_persistence_threshold");
  }
  if (s->reduce_bucket_size == ZINC_AUTO)
    s->reduce_bucket_size = hh;
  if (s->stage3_prefetch_bucket_size == ZINC_AUTO)
    s->stage3_prefetch_bucket_size = h > 0 ? (int64_t)(0.9 * (double)hh) : 50000000;
  if (s->stage3_param_persistence_threshold == ZINC_AUTO)
    s->stage3_param_persistence_threshold = h > 0 ? 10 * h : 100000;
  s->auto_mask &= ~(ZINC_AUTO_BIT(ZINC_AUTO_REDUCE_BUCKET_SIZE) |
                    ZINC_AUTO_BIT(ZINC_AUTO_PREFETCH_BUCKET_SIZE) |
                    ZINC_AUTO_BIT(ZINC_AUTO_PARAM_PERSISTENCE_THRESHOLD));

  if (any_f16 && any_bf16 && (s->fp16_enabled == ZINC_AUTO || s->bf16_enabled == ZINC_AUTO))
    return zinc_error(ZINC_ERR_CONFIG, "fp16.enabled / bf16.enabled are \"auto\" but the model "
                      "registers both f16 and bf16 parameters; register one 16-bit dtype or "
                      "set the precision explicitly");
  if (s->fp16_enabled == ZINC_AUTO)
    s->fp16_enabled = any_f16 && s->bf16_enabled != 1;
  if (s->bf16_enabled == ZINC_AUTO)
    s->bf16_enabled = any_bf16 && !s->fp16_enabled;
  s->auto_mask &= ~(ZINC_AUTO_BIT(ZINC_AUTO_FP16_ENABLED) | ZINC_AUTO_BIT(ZINC_AUTO_BF16_ENABLED));
  if (s->fp16_enabled && any_bf16)
    return zinc_error(ZINC_ERR_CONFIG, "fp16.enabled is true but the model registers bf16 "
                      "parameters; use bf16.enabled or register f16 parameters");
  if (s->bf16_enabled && any_f16)
    return zinc_error(ZINC_ERR_CONFIG, "bf16.enabled is true but the model registers f16 "
                      "parameters; use fp16.enabled or register bf16 parameters");
  return ZINC_OK;
}
