/*
 * validate.c — contradictions between keys of a loaded config: checks that
 * need more than one value, run once every section has been read.
 *
 * Each error names the key at fault (its JSON path), the value found there,
 * the other key it contradicts, and what would be accepted. Checks that
 * need the data-parallel size run later, in zinc_settings_resolve_batch.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

/* The value at a dotted path of root (NULL when absent). */
static const json_t *json_at(const json_t *root, const char *dotted) {
  char part[64];
  const json_t *v = root;
  while (v && *dotted) {
    size_t n = strcspn(dotted, ".");
    if (n >= sizeof part)
      return NULL;
    memcpy(part, dotted, n);
    part[n] = '\0';
    v = json_is_object(v) ? json_object_get(v, part) : NULL;
    dotted += n + (dotted[n] == '.');
  }
  return v;
}

/* Set r->path to `dotted` for a message about a key not being read now. */
static void point_at(zinc_cfg_reader *r, const char *dotted) {
  zinc_cfg_pop(r, 0);
  zinc_cfg_push(r, dotted);
}

static zinc_status check_precision(zinc_cfg_reader *r, const json_t *root,
                                   const zinc_settings *s) {
  if (s->fp16_enabled == 1 && s->bf16_enabled == 1) {
    const char *bf = json_object_get(root, "bfloat16") ? "bfloat16" : "bf16";
    point_at(r, bf);
    zinc_cfg_push(r, "enabled");
    return zinc_cfg_bad(r, json_at(json_object_get(root, bf), "enabled"),
                        "false while fp16.enabled is true: fp16 and bf16 cannot both be "
                        "enabled");
  }
  return ZINC_OK;
}

/* An offload section below the stage that uses it (offload_param below 3,
 * offload_optimizer at 0) is ignored with a warning, as DeepSpeed ignores
 * it; zinc resets its device to none so that nothing acts on it. */
static zinc_status check_offload(zinc_cfg_reader *r, const json_t *root,
                                 const zinc_settings *s, const char *name,
                                 zinc_offload_settings *o, int min_stage) {
  char at[96];
  if (o->device != ZINC_OFFLOAD_NONE && s->stage < min_stage) {
    zinc_cfg_warn(r, "zero_optimization.%s.device = \"%s\" is ignored at "
                  "zero_optimization.stage %d (as DeepSpeed does): %s needs stage %s",
                  name, zinc_offload_device_name(o->device), s->stage, name,
                  min_stage == 3 ? "3" : "1, 2 or 3");
    o->device = ZINC_OFFLOAD_NONE;
    return ZINC_OK;
  }
  if (o->device == ZINC_OFFLOAD_NVME && o->nvme_path_count == 0) {
    snprintf(at, sizeof at, "zero_optimization.%s.nvme_path", name);
    point_at(r, at);
    return zinc_cfg_bad(r, json_at(root, at),
                        "a directory path (or a list of up to %d) because %s.device is "
                        "\"nvme\"", ZINC_MAX_NVME_PATHS, name);
  }
  if (o->device == ZINC_OFFLOAD_NVME && o->buffer_count < 1 && o->buffer_count != ZINC_AUTO) {
    snprintf(at, sizeof at, "zero_optimization.%s.buffer_count", name);
    point_at(r, at);
    return zinc_cfg_bad(r, json_at(root, at), "at least 1 buffer for NVMe offload");
  }
  if (o->device != ZINC_OFFLOAD_NVME && o->nvme_path_count > 0)
    zinc_cfg_warn(r, "zero_optimization.%s.nvme_path is ignored: device is \"%s\", not "
                  "\"nvme\"", name, zinc_offload_device_name(o->device));
  return ZINC_OK;
}

/* 0/1 Adam (engine/reduce/zoadam.c) and 1-bit LAMB (engine/reduce/onebit_lamb.c) keep
 * the whole model's momentum and variance on every rank and all-reduce
 * them compressed themselves, which is stage 0's layout; DeepSpeed runs
 * them without ZeRO too. On their rank-local steps gradient_clipping clips
 * by the ranks' agreed root-mean-square norm (engine/reduce/onebit_adam.c). */
static zinc_status check_zero_one_adam(zinc_cfg_reader *r, const json_t *root,
                                       const zinc_settings *s) {
  if (s->optimizer != ZINC_OPTIM_ZERO_ONE_ADAM && s->optimizer != ZINC_OPTIM_ONEBIT_LAMB)
    return ZINC_OK;
  const char *type = zinc_optim_type_name(s->optimizer);
  if (s->stage != 0) {
    point_at(r, "zero_optimization.stage");
    return zinc_cfg_bad(r, json_at(root, "zero_optimization.stage"),
                        "0 with optimizer.type \"%s\" (found stage %d): it keeps and "
                        "all-reduces the whole model's optimizer state on every rank, so it "
                        "does not partition; set zero_optimization.stage to 0, or use \"%s\" "
                        "with ZeRO stage %d", type, s->stage,
                        s->optimizer == ZINC_OPTIM_ONEBIT_LAMB ? "Lamb" : "Adam", s->stage);
  }
  if (s->offload_optimizer.device != ZINC_OFFLOAD_NONE) {
    point_at(r, "zero_optimization.offload_optimizer.device");
    return zinc_cfg_bad(r, json_at(root, "zero_optimization.offload_optimizer.device"),
                        "\"none\" with optimizer.type \"%s\" (zinc updates its state where "
                        "the parameters live)", type);
  }
  return ZINC_OK;
}

static zinc_status check_zero(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  /* DeepSpeed builds torch.optim.SGD from optimizer.type "SGD" and runs it
   * under ZeRO only with zero_allow_untested_optimizer; zinc asks the same
   * so that a file moves between the two unchanged. */
  if (s->optimizer == ZINC_OPTIM_SGD && s->stage >= 1 && !s->zero_allow_untested_optimizer) {
    point_at(r, "optimizer.type");
    return zinc_cfg_bad(r, json_at(root, "optimizer.type"),
                        "an optimizer DeepSpeed supports under ZeRO, or set "
                        "\"zero_allow_untested_optimizer\": true: \"SGD\" is a torch "
                        "optimizer, which DeepSpeed runs with ZeRO stage %d only with that "
                        "flag (zinc implements it as torch.optim.SGD)", s->stage);
  }
  /* Delayed gradient averaging (engine/reduce/dga.c) corrects the full local
   * gradient with the full averaged one: every rank must hold both. */
  if (s->dga_delay > 0 && s->stage != 0)
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.delayed_averaging.delay = %lld at "
                      "zero_optimization.stage %d: delayed gradient averaging runs at stage 0 "
                      "only (every rank corrects its full local gradient with the full "
                      "averaged one, D steps late); set stage 0, or delay 0 to turn it off",
                      (long long)s->dga_delay, s->stage);
  /* Both replace stage 0's gradient all-reduce: one of them at a time. */
  if (s->dga_delay > 0 && s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD)
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.delayed_averaging.delay = %lld with "
                      "zinc.compression.gradient_codec \"powersgd\": both replace stage 0's "
                      "gradient all-reduce and zinc runs one at a time; remove one of them",
                      (long long)s->dga_delay);
  /* The 1-bit optimizers communicate themselves (the momentum, 1-bit) and
   * keep the gradients rank-local: nothing for PowerSGD or delayed
   * averaging to reduce. */
  int onebit_family = s->optimizer == ZINC_OPTIM_ONEBIT_ADAM ||
                      s->optimizer == ZINC_OPTIM_ZERO_ONE_ADAM ||
                      s->optimizer == ZINC_OPTIM_ONEBIT_LAMB;
  if (onebit_family && (s->dga_delay > 0 ||
                        s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD)) {
    point_at(r, "optimizer.type");
    return zinc_cfg_bad(r, json_at(root, "optimizer.type"),
                        "an optimizer other than the 1-bit ones with %s: OneBitAdam, "
                        "ZeroOneAdam and OneBitLamb all-reduce their own compressed momentum "
                        "and leave the gradients rank-local; remove %s or use Adam/AdamW",
                        s->dga_delay > 0 ? "zinc.compression.delayed_averaging"
                                         : "zinc.compression.gradient_codec \"powersgd\"",
                        s->dga_delay > 0 ? "delayed_averaging" : "gradient_codec");
  }
  ZINC_CHECK(check_zero_one_adam(r, root, s));
  /* prescale_gradients and gradient_predivide_factor divide around the
   * engine's gradient reduction (engine/grads.c); these replace it or keep
   * the gradients rank-local (and DGC clips and corrects them locally). */
  if (s->prescale_gradients || s->gradient_predivide_factor != 1.0) {
    char onebit[64];
    snprintf(onebit, sizeof onebit, "optimizer.type \"%s\"", zinc_optim_type_name(s->optimizer));
    const char *other = onebit_family ? onebit
                        : s->dga_delay > 0 ? "zinc.compression.delayed_averaging"
                        : s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD
                            ? "zinc.compression.gradient_codec \"powersgd\""
                        : s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC
                            ? "zinc.compression.gradient_codec \"dgc\""
                            : NULL;
    const char *key = s->prescale_gradients ? "prescale_gradients" : "gradient_predivide_factor";
    if (other) {
      point_at(r, key);
      return zinc_cfg_bad(r, json_object_get(root, key),
                          "%s with %s: it replaces the gradient reduction that %s divides "
                          "around (or keeps the gradients rank-local); remove %s or %s",
                          s->prescale_gradients ? "false" : "1.0", other, key, key, other);
    }
  }
  /* 1-bit Adam: every rank updates its whole momentum with its own
   * gradient and all-reduces it compressed, so it needs the whole momentum
   * on every rank (DeepSpeed refuses ZeRO with it too). */
  if (s->optimizer == ZINC_OPTIM_ONEBIT_ADAM && s->stage >= 1) {
    point_at(r, "zero_optimization.stage");
    return zinc_cfg_bad(r, json_at(root, "zero_optimization.stage"),
                        "0 with optimizer.type \"OneBitAdam\" (stage %d asked): 1-bit Adam "
                        "all-reduces every rank's whole momentum, which stages 1-3 partition; "
                        "DeepSpeed refuses ZeRO with it too. Set zero_optimization.stage to 0, "
                        "or use Adam/AdamW with stage %d", s->stage, s->stage);
  }
  ZINC_CHECK(check_offload(r, root, s, "offload_optimizer", &s->offload_optimizer, 1));
  ZINC_CHECK(check_offload(r, root, s, "offload_param", &s->offload_param, 3));
  /* DeepSpeed 0.14.4 means to reject a ratio < 1 below stage 3, but its
   * check never fires (it looks the section up with getattr on a dict), so
   * such files load there; zinc honours it at stages 1-3 with device
   * "cpu" (engine/place/partial.c). With NVMe on either side the whole
   * optimizer state is offloaded: said, and the ratio read as 1. */
  zinc_offload_settings *oo = &s->offload_optimizer;
  if (oo->ratio < 1.0 && oo->device == ZINC_OFFLOAD_NONE && s->stage >= 1) /* stage 0: said */
    zinc_cfg_warn(r, "zero_optimization.offload_optimizer.ratio %g has no effect: "
                  "offload_optimizer.device is \"none\" (nothing is offloaded)", oo->ratio);
  if (oo->ratio < 1.0 && (oo->device == ZINC_OFFLOAD_NVME ||
                          (s->stage == 3 && s->offload_param.device == ZINC_OFFLOAD_NVME))) {
    zinc_cfg_warn(r, "zero_optimization.offload_optimizer.ratio %g is read as 1: partial "
                  "optimizer offload needs offload_optimizer.device \"cpu\" and the "
                  "parameters in memory (offload_param.device \"none\" or \"cpu\"); %s, so "
                  "the whole optimizer state is offloaded", oo->ratio,
                  oo->device == ZINC_OFFLOAD_NVME ? "offload_optimizer.device is \"nvme\""
                                                  : "offload_param.device is \"nvme\"");
    oo->ratio = 1.0;
  }
  return ZINC_OK;
}

/* Whatever the data-parallel size, train_batch_size must be a multiple of
 * the product of the other given batch keys. */
static zinc_status check_batch(zinc_cfg_reader *r, const json_t *root, const zinc_settings *s) {
  int m = s->batch_given_mask;
  if (!(m & ZINC_BATCH_GIVEN(ZINC_BATCH_TRAIN)))
    return ZINC_OK;
  int64_t train = s->train_batch_size;
  int64_t micro = (m & ZINC_BATCH_GIVEN(ZINC_BATCH_MICRO)) ? s->train_micro_batch_size_per_gpu : 1;
  int64_t gas = (m & ZINC_BATCH_GIVEN(ZINC_BATCH_GAS)) ? s->gradient_accumulation_steps : 1;
  int64_t per_rank;
  if (__builtin_mul_overflow(micro, gas, &per_rank) || train % per_rank != 0) {
    point_at(r, "train_batch_size");
    return zinc_cfg_bad(r, json_object_get(root, "train_batch_size"),
                        "a multiple of train_micro_batch_size_per_gpu x "
                        "gradient_accumulation_steps = %lld x %lld (train_batch_size = "
                        "micro x accumulation x data-parallel size)",
                        (long long)micro, (long long)gas);
  }
  return ZINC_OK;
}

static zinc_status check_scheduler(zinc_cfg_reader *r, const json_t *root,
                                   const zinc_settings *s) {
  if (s->scheduler != ZINC_SCHED_WARMUP_DECAY && s->scheduler != ZINC_SCHED_WARMUP_COSINE)
    return ZINC_OK;
  /* "auto" steps: checked once known, at engine creation (config/auto.c);
   * not given: zinc_settings_check_scheduler at engine creation */
  if (s->total_num_steps == 0 ||
      s->auto_mask & (ZINC_AUTO_BIT(ZINC_AUTO_WARMUP_NUM_STEPS) |
                      ZINC_AUTO_BIT(ZINC_AUTO_TOTAL_NUM_STEPS)))
    return ZINC_OK;
  /* DeepSpeed warms up over max(2, warmup_num_steps) steps. */
  int64_t warmup = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
  if (s->scheduler == ZINC_SCHED_WARMUP_COSINE && s->total_num_steps == warmup) {
    point_at(r, "scheduler.params.total_num_steps");
    return zinc_cfg_bad(r, json_at(root, "scheduler.params.total_num_steps"),
                        "more than the %lld warmup steps: WarmupCosineLR divides by "
                        "total_num_steps - warmup_num_steps", (long long)warmup);
  }
  if (s->total_num_steps < warmup)
    zinc_cfg_warn(r, "scheduler.params.total_num_steps %lld is less than warmup_num_steps "
                  "%lld (DeepSpeed warns too)", (long long)s->total_num_steps,
                  (long long)warmup);
  return ZINC_OK;
}

/* bf16 master weights and optimizer states (bf16 section). DeepSpeed
 * asserts that the states need the master weights in bf16; so does zinc.
 * It also asserts ZeRO stages 1-3, which zinc does not need: the stage-0
 * optimizer runs the same fused passes over every chunk. The 1-bit
 * optimizers update their own fp32 state (engine/reduce/): refused with
 * them, naming both. Every placement keeps the arrays in their dtype. */
static zinc_status check_bf16_state(zinc_cfg_reader *r, const json_t *root,
                                    const zinc_settings *s) {
  const char *bf = json_object_get(root, "bfloat16") ? "bfloat16" : "bf16";
  char key[96];
  if (s->bf16_optimizer_states && !s->bf16_master_weights_and_grads) {
    snprintf(key, sizeof key, "%s.bf16_optimizer_states", bf);
    point_at(r, key);
    return zinc_cfg_bad(r, json_at(json_object_get(root, bf), "bf16_optimizer_states"),
                        "false while %s.bf16_master_weights_and_grads is false: bf16 "
                        "optimizer states need bf16 master weights (as DeepSpeed asserts); "
                        "set both to true, or remove bf16_optimizer_states", bf);
  }
  if (!s->bf16_master_weights_and_grads)
    return ZINC_OK;
  snprintf(key, sizeof key, "%s.bf16_master_weights_and_grads", bf);
  const json_t *at = json_at(json_object_get(root, bf), "bf16_master_weights_and_grads");
  if (s->optimizer == ZINC_OPTIM_ONEBIT_ADAM || s->optimizer == ZINC_OPTIM_ZERO_ONE_ADAM ||
      s->optimizer == ZINC_OPTIM_ONEBIT_LAMB) {
    point_at(r, key);
    return zinc_cfg_bad(r, at, "false with optimizer.type \"%s\": the 1-bit optimizers keep "
                        "their master weights and moments in fp32 (and DeepSpeed runs them "
                        "at stage 0 only, where it refuses bf16 master weights); remove the "
                        "key or use Adam/AdamW, Lamb, Lion, Adagrad or SGD",
                        zinc_optim_type_name(s->optimizer));
  }
  return ZINC_OK;
}

zinc_status zinc_cfg_validate(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  ZINC_CHECK(check_precision(r, root, s));
  ZINC_CHECK(check_zero(r, root, s));
  ZINC_CHECK(check_bf16_state(r, root, s));
  ZINC_CHECK(check_batch(r, root, s));
  ZINC_CHECK(check_scheduler(r, root, s));
  zinc_cfg_pop(r, 0);
  return ZINC_OK;
}
