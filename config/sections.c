/*
 * sections.c — the top level of a DeepSpeed config and the sections that
 * are not about ZeRO itself: the batch triad, fp16/bf16, optimizer,
 * scheduler, activation_checkpointing and zinc's own "zinc" section.
 * (zero_optimization and aio are in zero.c; contradictions between
 * sections in validate.c.)
 *
 * Sections are read in a fixed order whatever the file's order: "zinc"
 * first, so that its log_level governs the warnings of the rest; top-level
 * flags before the optimizer (zero_allow_untested_optimizer); the optimizer
 * before the scheduler.
 *
 * "auto" (Hugging Face's placeholder) is accepted where HF writes it and
 * kept: the field holds a placeholder until the trainer's value or the
 * engine resolves it (config/auto.c; docs/config.md lists each rule).
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

#define T zinc_settings
#define INF HUGE_VAL

/* ---------------------------------------------------------------- names */

const char *zinc_sched_type_name(zinc_sched_type t) {
  switch (t) {
  case ZINC_SCHED_NONE: return "none";
  case ZINC_SCHED_WARMUP_LR: return "WarmupLR";
  case ZINC_SCHED_WARMUP_DECAY: return "WarmupDecayLR";
  case ZINC_SCHED_WARMUP_COSINE: return "WarmupCosineLR";
  case ZINC_SCHED_ONE_CYCLE: return "OneCycle";
  case ZINC_SCHED_LR_RANGE_TEST: return "LRRangeTest";
  }
  return "unknown";
}

const char *zinc_optim_type_name(zinc_optim_type t) {
  switch (t) {
  case ZINC_OPTIM_ADAM: return "Adam";
  case ZINC_OPTIM_ADAMW: return "AdamW";
  case ZINC_OPTIM_LAMB: return "Lamb";
  case ZINC_OPTIM_LION: return "Lion";
  case ZINC_OPTIM_ADAGRAD: return "Adagrad";
  case ZINC_OPTIM_SGD: return "SGD";
  case ZINC_OPTIM_ZERO_ONE_ADAM: return "ZeroOneAdam";
  case ZINC_OPTIM_ONEBIT_LAMB: return "OneBitLamb";
  case ZINC_OPTIM_ONEBIT_ADAM: return "OneBitAdam";
  }
  return "unknown";
}

/* The section `name` of obj as an object (NULL when absent or null), with
 * the path pushed; the caller pops `*mark`. */
static zinc_status section(zinc_cfg_reader *r, const json_t *obj, const char *name,
                           const json_t **out, size_t *mark) {
  *mark = zinc_cfg_push(r, name);
  return zinc_cfg_object(r, json_object_get(obj, name), out);
}

/* ------------------------------------------------------------- top level */

static const zinc_key top_keys[] = {
    ZINC_KCUSTOM("train_batch_size"),
    ZINC_KCUSTOM("train_micro_batch_size_per_gpu"),
    ZINC_KCUSTOM("gradient_accumulation_steps"),
    ZINC_KF(T, "gradient_clipping", gradient_clipping, -INF, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KL(T, "steps_per_print", steps_per_print, 0, 0, 0),
    ZINC_KB(T, "wall_clock_breakdown", wall_clock_breakdown),
    ZINC_KB(T, "zero_allow_untested_optimizer", zero_allow_untested_optimizer),
    ZINC_KB(T, "prescale_gradients", prescale_gradients),
    ZINC_KF(T, "gradient_predivide_factor", gradient_predivide_factor, 0, INF,
            ZINC_KEY_LO_OPEN, 0),
    ZINC_KCUSTOM("fp16"),
    ZINC_KCUSTOM("bf16"),
    ZINC_KCUSTOM("bfloat16"),
    ZINC_KCUSTOM("optimizer"),
    ZINC_KCUSTOM("scheduler"),
    ZINC_KCUSTOM("zero_optimization"),
    ZINC_KCUSTOM("aio"),
    ZINC_KCUSTOM("activation_checkpointing"),
    ZINC_KCUSTOM("zinc"),
    ZINC_KCUSTOM("communication_data_type"),
    /* DeepSpeed options with no effect in zinc (silent at their default) */
    ZINC_KINERT("dump_state", "false"),
    ZINC_KINERT("disable_allgather", "false"),
    ZINC_KINERT("seq_parallel_communication_data_type", "\"fp32\""),
    ZINC_KINERT("sparse_gradients", "false"),
    ZINC_KINERT("memory_breakdown", "false"),
    ZINC_KINERT("dataloader_drop_last", "false"),
    ZINC_KINERT("zero_force_ds_cpu_optimizer", "true"),
    ZINC_KINERT("graph_harvesting", "false"),
    ZINC_KINERT("use_data_before_expert_parallelism", "false"),
    ZINC_KINERT("sequence_parallel_size", "1"),
    ZINC_KINERT("vocabulary_size", NULL),
    /* DeepSpeed sections zinc does not implement: one warning names them */
    ZINC_KCUSTOM("tensorboard"),
    ZINC_KCUSTOM("csv_monitor"),
    ZINC_KCUSTOM("wandb"),
    ZINC_KCUSTOM("comet"),
    ZINC_KIGNORED("monitor_config"),
    ZINC_KIGNORED("comms_config"),
    ZINC_KCUSTOM("comms_logger"),
    ZINC_KCUSTOM("pipeline"),
    ZINC_KIGNORED("flops_profiler"),
    ZINC_KIGNORED("compression_training"),
    ZINC_KIGNORED("data_efficiency"),
    ZINC_KIGNORED("curriculum_learning"),
    ZINC_KIGNORED("elasticity"),
    ZINC_KIGNORED("autotuning"),
    ZINC_KIGNORED("amp"),
    ZINC_KIGNORED("sparse_attention"),
    ZINC_KIGNORED("checkpoint"),
    ZINC_KIGNORED("data_types"),
    ZINC_KIGNORED("eigenvalue"),
    ZINC_KIGNORED("progressive_layer_drop"),
    ZINC_KIGNORED("quantize_training"),
    ZINC_KIGNORED("nebula"),
    ZINC_KIGNORED("datastates"),
    ZINC_KIGNORED("weight_quantization"),
    ZINC_KIGNORED("hybrid_engine"),
    ZINC_KIGNORED("compile"),
    ZINC_KIGNORED("timers"),
    ZINC_KIGNORED("tensor_parallel"),
    ZINC_KIGNORED("torch_autocast"),
};

/* One of the batch triad: a positive integer, "auto" or null (absent). */
static zinc_status read_batch_key(zinc_cfg_reader *r, const json_t *root,
                                  const char *name, int bit, int64_t *field,
                                  int *mask) {
  const json_t *v = json_object_get(root, name);
  *field = ZINC_AUTO;
  if (!v || json_is_null(v))
    return ZINC_OK;
  size_t mark = zinc_cfg_push(r, name);
  if (zinc_cfg_is_auto(v)) {
    *mask |= ZINC_BATCH_IS_AUTO(bit);
  } else {
    int64_t x = 0;
    if (!json_is_number(v) || zinc_cfg_int64(r, v, 1, INT64_MAX, &x) != ZINC_OK)
      return zinc_cfg_bad(r, v, "a positive integer or \"auto\"");
    *field = x;
    *mask |= ZINC_BATCH_GIVEN(bit);
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

static zinc_status read_batch(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  s->batch_given_mask = 0;
  ZINC_CHECK(read_batch_key(r, root, "train_batch_size", ZINC_BATCH_TRAIN,
                            &s->train_batch_size, &s->batch_given_mask));
  ZINC_CHECK(read_batch_key(r, root, "train_micro_batch_size_per_gpu", ZINC_BATCH_MICRO,
                            &s->train_micro_batch_size_per_gpu, &s->batch_given_mask));
  ZINC_CHECK(read_batch_key(r, root, "gradient_accumulation_steps", ZINC_BATCH_GAS,
                            &s->gradient_accumulation_steps, &s->batch_given_mask));
  return ZINC_OK;
}

/* Values DeepSpeed accepts and reads in a way worth saying: a negative
 * gradient_clipping (DeepSpeed clips only when it is > 0) and a
 * steps_per_print of 0 (DeepSpeed divides the step count by it). */
static void read_top_level_notes(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  if (s->gradient_clipping < 0) {
    zinc_cfg_warn(r, "gradient_clipping = %g: negative, read as 0 (no clipping), as DeepSpeed "
                  "clips only when it is > 0", s->gradient_clipping);
    s->gradient_clipping = 0;
  }
  if (s->steps_per_print == 0 && json_object_get(root, "steps_per_print"))
    zinc_cfg_warn(r, "steps_per_print = 0: read as never (zinc_steps_per_print returns "
                  "INT_MAX; DeepSpeed would divide by 0 at its first step)");
}

/* Whether x is positive and finite as the fp32 number zinc computes with
 * (1e-300 is 0 there, 1e39 infinite). */
static int fp32_positive(double x) {
  float f = (float)x;
  return f > 0.0f && isfinite(f);
}

/* gradient_predivide_factor f: the gradients are multiplied by 1/f in fp32
 * before the sum (engine/grads.c); an f whose inverse is 0 or infinite
 * there would zero every gradient or make every step overflow. */
static zinc_status check_predivide(zinc_cfg_reader *r, const json_t *root, const zinc_settings *s) {
  double f = s->gradient_predivide_factor;
  if (fp32_positive(f) && fp32_positive(1.0 / f))
    return ZINC_OK;
  size_t mark = zinc_cfg_push(r, "gradient_predivide_factor");
  zinc_status st = zinc_cfg_bad(r, json_object_get(root, "gradient_predivide_factor"),
                                "a number from %g to %g: the gradients are multiplied by its "
                                "inverse in fp32, where 1/%g is %s (DeepSpeed's default is 1)",
                                1.0 / FLT_MAX, FLT_MAX, f,
                                (float)(1.0 / f) == 0.0f ? "0 (every gradient zeroed)"
                                                         : "infinite (every step skipped)");
  zinc_cfg_pop(r, mark);
  return st;
}

/* communication_data_type: the dtype gradients travel in. DeepSpeed
 * lower-cases the string and takes "fp32", "fp16" or "bf16" (its
 * get_communication_data_type; "float32", "bfloat16" are refused there
 * too); null, its default, means the gradients' own dtype. */
static zinc_status read_communication_data_type(zinc_cfg_reader *r, const json_t *root,
                                                zinc_settings *s) {
  static const struct {
    const char *name;
    zinc_dtype dtype;
  } types[] = {{"fp32", ZINC_F32}, {"fp16", ZINC_F16}, {"bf16", ZINC_BF16}};
  size_t mark;
  const json_t *v = zinc_cfg_enter(r, root, "communication_data_type", &mark);
  if (!v)
    return ZINC_OK;
  s->communication_data_type = -1;
  if (!json_is_null(v)) {
    size_t i = 0;
    while (json_is_string(v) && i < ZINC_KEY_COUNT(types) &&
           strcasecmp(json_string_value(v), types[i].name) != 0)
      i++;
    if (!json_is_string(v) || i == ZINC_KEY_COUNT(types))
      return zinc_cfg_bad(r, v, "\"fp32\", \"fp16\", \"bf16\" or null (the gradients' "
                          "own dtype), as DeepSpeed accepts");
    s->communication_data_type = (int)types[i].dtype;
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ------------------------------------------------------------- precision */

static const zinc_key fp16_keys[] = {
    ZINC_KB_AUTO(T, "enabled", fp16_enabled),
    ZINC_KF(T, "loss_scale", fp16_loss_scale, 0, INF, 0, 0),
    ZINC_KF(T, "initial_scale_power", fp16_initial_scale_power, -INF, INF, 0, 0),
    ZINC_KI(T, "loss_scale_window", fp16_loss_scale_window, 1, INT_MAX),
    ZINC_KI(T, "hysteresis", fp16_hysteresis, 1, INT_MAX),
    ZINC_KB(T, "consecutive_hysteresis", fp16_consecutive_hysteresis),
    ZINC_KF(T, "min_loss_scale", fp16_min_loss_scale, 0, INF, 0, 0),
    ZINC_KINERT("auto_cast", "false"),
    ZINC_KINERT("fp16_master_weights_and_grads", "false"),
};

static const zinc_key bf16_keys[] = {
    ZINC_KB_AUTO(T, "enabled", bf16_enabled),
    ZINC_KINERT("immediate_grad_update", "false"),
    ZINC_KINERT("check_grad_overflow", "false"),
    ZINC_KB(T, "bf16_master_weights_and_grads", bf16_master_weights_and_grads),
    ZINC_KB(T, "bf16_optimizer_states", bf16_optimizer_states),
};

static zinc_status read_precision(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, "fp16", &obj, &mark));
  if (obj) {
    ZINC_CHECK(zinc_cfg_walk(r, obj, fp16_keys, ZINC_KEY_COUNT(fp16_keys), s, sizeof *s));
    /* DeepSpeed starts at 2**power, a Python number of any size; zinc
     * multiplies in fp32, whose powers of two run from 2^-126 to 2^127. */
    double p = s->fp16_initial_scale_power, lo = -126, hi = 127;
    if (p < lo || p > hi) {
      s->fp16_initial_scale_power = p < lo ? lo : hi;
      zinc_cfg_warn(r, "fp16.initial_scale_power = %g: 2^%g is outside fp32, where zinc "
                    "applies the loss scale; starting at 2^%g instead (DeepSpeed would skip "
                    "steps for overflow until the scale is in range)", p, p,
                    s->fp16_initial_scale_power);
    }
  }
  zinc_cfg_pop(r, mark);

  /* "bfloat16" is DeepSpeed's older spelling of "bf16". */
  const char *name = "bf16";
  if (json_object_get(root, "bfloat16")) {
    if (json_object_get(root, "bf16")) {
      mark = zinc_cfg_push(r, "bfloat16");
      return zinc_cfg_bad(r, json_object_get(root, "bfloat16"),
                          "one of \"bf16\" and its older spelling \"bfloat16\", not both");
    }
    name = "bfloat16";
  }
  ZINC_CHECK(section(r, root, name, &obj, &mark));
  if (obj)
    ZINC_CHECK(zinc_cfg_walk(r, obj, bf16_keys, ZINC_KEY_COUNT(bf16_keys), s, sizeof *s));
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ------------------------------------------------------------- optimizer */

static const zinc_key optimizer_keys[] = {
    ZINC_KCUSTOM("type"),
    ZINC_KCUSTOM("params"),
    ZINC_KINERT("legacy_fusion", "false"),
};

static const zinc_key adam_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KB(T, "adam_w_mode", adam_w_mode),
    ZINC_KB(T, "bias_correction", bias_correction),
    ZINC_KCUSTOM("amsgrad"),
    ZINC_KINERT("torch_adam", "false"),
};

/* DeepSpeed's FusedLamb. max_grad_norm is its own clipping, applied by
 * the step after gradient_clipping's (engine/step.c says how the two
 * combine); eps_inside_sqrt is another formula: only its default is
 * accepted. */
static const zinc_key lamb_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KB(T, "bias_correction", bias_correction),
    ZINC_KF(T, "max_coeff", max_coeff, 0, INF, 0, 0),
    ZINC_KF(T, "min_coeff", min_coeff, 0, INF, 0, 0),
    ZINC_KCUSTOM("amsgrad"),
    /* FusedLamb clips only when it is > 0: a negative value reads as 0 */
    ZINC_KF(T, "max_grad_norm", lamb_max_grad_norm, -INF, INF, 0, 0),
    ZINC_KCUSTOM("eps_inside_sqrt"),
};

/* DeepSpeed's FusedLion / DeepSpeedCPULion. */
static const zinc_key lion_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
};

/* torch.optim.Adagrad (what DeepSpeed builds on the GPU; its CPU Adagrad
 * takes the same keys). lr_decay and a non-zero initial accumulator are
 * not implemented: only their defaults are accepted. */
static const zinc_key adagrad_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("amsgrad"),
    ZINC_KCUSTOM("lr_decay"),
    ZINC_KCUSTOM("initial_accumulator_value"),
    ZINC_KCUSTOM("maximize"),
    ZINC_KIGNORED("foreach"),
};

/* torch.optim.SGD, which DeepSpeed builds from optimizer.type "SGD". */
static const zinc_key sgd_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KF(T, "momentum", momentum, 0, INF, 0, 0),
    ZINC_KF(T, "dampening", dampening, 0, 1, 0, 0),
    ZINC_KB(T, "nesterov", nesterov),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("maximize"),
    ZINC_KIGNORED("foreach"),
    ZINC_KIGNORED("differentiable"),
};

/* DeepSpeed's OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py): Adam
 * until freeze_step, then the variance frozen and the momentum all-reduced
 * 1-bit compressed (engine/reduce/onebit_adam.c). It never applies a bias
 * correction whatever bias_correction says, and reads neither
 * eps_inside_sqrt (only its default is accepted here) nor max_grad_norm
 * (stored by its constructor, never read: any value, with a warning when
 * not 0); cuda_aware and comm_backend_name pick DeepSpeed's transport:
 * zinc's runs over its own data-parallel comm. */
static const zinc_key onebit_adam_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KL(T, "freeze_step", onebit_freeze_step, 0, 0, 0),
    ZINC_KB_NOOP(T, "bias_correction", bias_correction,
                 "DeepSpeed's OneBitAdam never applies a bias correction, nor does zinc's"),
    ZINC_KB_NOOP(T, "cuda_aware", onebit_cuda_aware,
                 "DeepSpeed's MPI transport option; zinc's compressed all-reduce runs over "
                 "its own data-parallel comm"),
    ZINC_KCUSTOM("comm_backend_name"),
    ZINC_KCUSTOM("amsgrad"),
    ZINC_KINERT("max_grad_norm", "0"), /* stored by DeepSpeed's constructor, never read */
    ZINC_KCUSTOM("eps_inside_sqrt"),
};

/* DeepSpeed's ZeroOneAdam (0/1 Adam, engine/reduce/zoadam.c). It applies no bias
 * correction whatever bias_correction says; cuda_aware and
 * comm_backend_name pick DeepSpeed's transport, zinc's is the engine's
 * data-parallel comm. */
static const zinc_key zero_one_adam_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KB_NOOP(T, "bias_correction", bias_correction,
                 "DeepSpeed's 0/1 Adam applies no bias correction, nor does zinc's"),
    ZINC_KL(T, "var_freeze_step", var_freeze_step, 0, 0, 0),
    ZINC_KL(T, "var_update_scaler", var_update_scaler, 1, 0, 0),
    ZINC_KL(T, "local_step_scaler", local_step_scaler, 1, 0, 0),
    ZINC_KL(T, "local_step_clipper", local_step_clipper, 1, 0, 0),
    ZINC_KINERT("cuda_aware", "false"),
    ZINC_KINERT("comm_backend_name", "\"nccl\""),
    ZINC_KCUSTOM("amsgrad"),
    ZINC_KINERT("max_grad_norm", "0"), /* stored by DeepSpeed's constructor, never read */
    ZINC_KCUSTOM("eps_inside_sqrt"),
};

/* DeepSpeed's OneBitLamb (1-bit LAMB, engine/reduce/onebit_lamb.c); cuda_aware
 * and comm_backend_name as for ZeroOneAdam. */
static const zinc_key onebit_lamb_keys[] = {
    ZINC_KF(T, "lr", lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("betas"),
    ZINC_KF(T, "eps", eps, 0, INF, ZINC_KEY_AUTO | ZINC_KEY_LO_OPEN, ZINC_AUTO_F64),
    ZINC_KF(T, "weight_decay", weight_decay, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KB(T, "bias_correction", bias_correction),
    ZINC_KF(T, "max_coeff", max_coeff, 0, INF, 0, 0),
    ZINC_KF(T, "min_coeff", min_coeff, 0, INF, 0, 0),
    ZINC_KL(T, "freeze_step", freeze_step, 0, 0, 0),
    /* 1 would keep coeff_freeze at its start, 0, and no step after
     * freeze_step would move a parameter */
    ZINC_KF(T, "coeff_beta", coeff_beta, 0, 1, ZINC_KEY_HI_OPEN, 0),
    ZINC_KF(T, "factor_max", factor_max, 0, INF, 0, 0),
    ZINC_KF(T, "factor_min", factor_min, 0, INF, 0, 0),
    ZINC_KF(T, "factor_threshold", factor_threshold, 0, INF, 0, 0),
    ZINC_KINERT("cuda_aware", "false"),
    ZINC_KINERT("comm_backend_name", "\"nccl\""),
    ZINC_KCUSTOM("amsgrad"),
    ZINC_KINERT("max_grad_norm", "0"), /* stored by DeepSpeed's constructor, never read */
    ZINC_KCUSTOM("eps_inside_sqrt"),
};

typedef struct {
  const char *name;         /* optimizer.type, as written out */
  zinc_optim_type type;
  const zinc_key *keys;
  size_t nkeys;
  int has_betas, has_amsgrad;
} optim_spec;

static const optim_spec optim_specs[] = {
    {"Adam", ZINC_OPTIM_ADAM, adam_keys, ZINC_KEY_COUNT(adam_keys), 1, 1},
    {"AdamW", ZINC_OPTIM_ADAMW, adam_keys, ZINC_KEY_COUNT(adam_keys), 1, 1},
    {"Lamb", ZINC_OPTIM_LAMB, lamb_keys, ZINC_KEY_COUNT(lamb_keys), 1, 1},
    {"Lion", ZINC_OPTIM_LION, lion_keys, ZINC_KEY_COUNT(lion_keys), 1, 0},
    {"Adagrad", ZINC_OPTIM_ADAGRAD, adagrad_keys, ZINC_KEY_COUNT(adagrad_keys), 0, 1},
    {"SGD", ZINC_OPTIM_SGD, sgd_keys, ZINC_KEY_COUNT(sgd_keys), 0, 0},
    {"OneBitAdam", ZINC_OPTIM_ONEBIT_ADAM, onebit_adam_keys, ZINC_KEY_COUNT(onebit_adam_keys),
     1, 1},
    {"ZeroOneAdam", ZINC_OPTIM_ZERO_ONE_ADAM, zero_one_adam_keys,
     ZINC_KEY_COUNT(zero_one_adam_keys), 1, 1},
    {"OneBitLamb", ZINC_OPTIM_ONEBIT_LAMB, onebit_lamb_keys, ZINC_KEY_COUNT(onebit_lamb_keys), 1,
     1},
};

/* The defaults that depend on the type (DeepSpeed's and torch's
 * constructors); the shared ones are zinc_settings_defaults'. */
static void optim_defaults(zinc_settings *s) {
  s->max_coeff = 10.0;
  s->min_coeff = 0.01;
  switch (s->optimizer) {
  case ZINC_OPTIM_ADAGRAD:
    s->lr = 1e-2;
    s->eps = 1e-10;
    break;
  default:
    break;
  }
}

/* Keys of the optimizers' constructors whose other values change the
 * formula: only the default is accepted (any other would train on with
 * a different optimizer than the one asked for). */
static const struct {
  const char *key, *value, *why;
} fixed_params[] = {
    {"eps_inside_sqrt", "false", "zinc's Lamb adds eps outside the square root"},
    {"lr_decay", "0", "zinc's Adagrad has no learning-rate decay; use a scheduler"},
    {"initial_accumulator_value", "0", "zinc's Adagrad starts its sum of squares at 0"},
    {"maximize", "false", "zinc minimises the loss"},
};

static zinc_status check_fixed_params(zinc_cfg_reader *r, const json_t *params) {
  for (size_t i = 0; i < ZINC_KEY_COUNT(fixed_params); i++) {
    const json_t *v = json_object_get(params, fixed_params[i].key);
    if (!v)
      continue;
    json_t *def = json_loads(fixed_params[i].value, JSON_DECODE_ANY, NULL);
    int same = def && (json_equal(def, (json_t *)v) ||
                       (json_is_number(def) && json_is_number(v) &&
                        json_number_value(def) == json_number_value(v)));
    json_decref(def);
    if (!same) {
      zinc_cfg_push(r, fixed_params[i].key);
      return zinc_cfg_bad(r, v, "%s (%s)", fixed_params[i].value, fixed_params[i].why);
    }
  }
  return ZINC_OK;
}

/* Whether `name` is a key of spec's table. */
static int spec_has_key(const optim_spec *spec, const char *name) {
  for (size_t i = 0; i < spec->nkeys; i++)
    if (strcmp(spec->keys[i].name, name) == 0)
      return 1;
  return 0;
}

/* A key of another optimizer type (Adagrad's "betas", SGD's "eps") is an
 * error, as in DeepSpeed, which passes the params to the type's
 * constructor as keyword arguments, and the constructor refuses one it
 * does not take (a TypeError at start-up). Keys of no type stay warnings
 * with a did-you-mean (zinc_cfg_walk), as everywhere in the file. */
static zinc_status check_foreign_optimizer_params(zinc_cfg_reader *r, const json_t *params,
                                                  const optim_spec *spec) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)params, key, v) {
    if (spec_has_key(spec, key))
      continue;
    char owners[160] = "";
    for (size_t i = 0; i < ZINC_KEY_COUNT(optim_specs); i++) {
      size_t len = strlen(owners);
      if (spec_has_key(&optim_specs[i], key))
        snprintf(owners + len, sizeof owners - len, "%s%s", len ? ", " : "", optim_specs[i].name);
    }
    if (!owners[0])
      continue;
    char takes[320] = "";
    for (size_t j = 0; j < spec->nkeys; j++) {
      size_t len = strlen(takes);
      snprintf(takes + len, sizeof takes - len, "%s%s", j ? ", " : "", spec->keys[j].name);
    }
    zinc_cfg_push(r, key);
    return zinc_cfg_fail(r, "not a parameter of optimizer.type \"%s\" (it is one of %s); "
                         "\"%s\" takes %s. DeepSpeed passes these to the optimizer's "
                         "constructor, which refuses it at start-up: remove the key or change "
                         "the type", spec->name, owners, spec->name, takes);
  }
  return ZINC_OK;
}

/* lo_key's value must not exceed hi_key's: the message points at the key
 * the file wrote (min's when it wrote both), naming the other's value and
 * whether it is the default. */
static zinc_status check_ordered(zinc_cfg_reader *r, const json_t *params, const char *lo_key,
                                 double lo, const char *hi_key, double hi, const char *rule) {
  if (lo <= hi)
    return ZINC_OK;
  const json_t *lo_v = json_object_get(params, lo_key), *hi_v = json_object_get(params, hi_key);
  if (lo_v || !hi_v) {
    zinc_cfg_push(r, lo_key);
    return zinc_cfg_bad(r, lo_v, "a number <= %s (%g%s): %s", hi_key, hi,
                        hi_v ? "" : ", its default", rule);
  }
  zinc_cfg_push(r, hi_key);
  return zinc_cfg_bad(r, hi_v, "a number >= %s (%g, its default): %s", lo_key, lo, rule);
}

/* The values that pass each key's own range but cannot train: a bound of
 * 0 on LAMB's trust ratio or 1-bit LAMB's factor (no parameter would ever
 * move), a lower bound above the upper one, and a 1-bit freeze_step of 0
 * (the compression stage freezes what the warm-up steps learned). */
static zinc_status check_optimizer_ranges(zinc_cfg_reader *r, const json_t *params,
                                          const zinc_settings *s) {
  int lamb = s->optimizer == ZINC_OPTIM_LAMB || s->optimizer == ZINC_OPTIM_ONEBIT_LAMB;
  const char *trust = "LAMB clamps its trust ratio ||p|| / ||update|| to [min_coeff, max_coeff]";
  if (lamb && s->max_coeff <= 0.0) {
    zinc_cfg_push(r, "max_coeff");
    return zinc_cfg_bad(r, json_object_get(params, "max_coeff"), "a number > 0: %s, and with "
                        "max_coeff 0 no step would move a parameter", trust);
  }
  if (lamb)
    ZINC_CHECK(check_ordered(r, params, "min_coeff", s->min_coeff, "max_coeff", s->max_coeff,
                             trust));
  if (s->optimizer == ZINC_OPTIM_ONEBIT_LAMB) {
    const char *factor = "after freeze_step 1-bit LAMB scales its frozen trust ratio by a "
                         "factor clamped to [factor_min, factor_max]";
    if (s->factor_max <= 0.0) {
      zinc_cfg_push(r, "factor_max");
      return zinc_cfg_bad(r, json_object_get(params, "factor_max"), "a number > 0: %s, and "
                          "with factor_max 0 no step after freeze_step would move a "
                          "parameter", factor);
    }
    ZINC_CHECK(check_ordered(r, params, "factor_min", s->factor_min, "factor_max",
                             s->factor_max, factor));
    if (s->freeze_step == 0) {
      zinc_cfg_push(r, "freeze_step");
      return zinc_cfg_bad(r, json_object_get(params, "freeze_step"),
                          "an integer >= 1: 1-bit LAMB's compression stage keeps the variance "
                          "and the trust ratio its warm-up steps learned (and scales the "
                          "momentum by its size at the end of the warm-up); with no warm-up "
                          "step all three are zero and the first step turns the state into "
                          "NaN. DeepSpeed's first call only allocates buffers, so it always "
                          "warms up at least one step: give freeze_step 1 for that");
    }
  }
  /* eps is added in fp32 (kernels/zinc_math.h): a positive eps that is 0
   * there divides a zero gradient's 0 by 0 (NaN), an infinite one stops
   * every update */
  if (!isnan(s->eps) && !fp32_positive(s->eps) && s->optimizer != ZINC_OPTIM_LION &&
      s->optimizer != ZINC_OPTIM_SGD) {
    zinc_cfg_push(r, "eps");
    return zinc_cfg_bad(r, json_object_get(params, "eps"), "a number from %g to %g: zinc's "
                        "optimizers add eps in fp32, where %g is %s", (double)FLT_TRUE_MIN,
                        FLT_MAX, s->eps, (float)s->eps == 0.0f
                                             ? "0 (a zero gradient would give 0/0 = NaN)"
                                             : "infinite (no update would move a parameter)");
  }
  if (s->optimizer == ZINC_OPTIM_ONEBIT_ADAM && s->onebit_freeze_step == 0) {
    zinc_cfg_push(r, "freeze_step");
    return zinc_cfg_bad(r, json_object_get(params, "freeze_step"),
                        "an integer >= 1: 1-bit Adam freezes the variance its warm-up steps "
                        "learned; with no warm-up step it is zero and every update is the "
                        "momentum divided by eps. DeepSpeed's first call only allocates "
                        "buffers, so it always warms up at least one step: give freeze_step 1 "
                        "for that");
  }
  return ZINC_OK;
}

/* DeepSpeed's optimizer names zinc does not implement (lower case), for a
 * precise message. */
static const char *const deepspeed_optimizers[] = {
    "muadam", "muadamw", "musgd", "muon",
};

/* [b1, b2] or "auto" (both kept "auto"); an element may be "auto" too, as
 * zinc writes a config whose betas the trainer filled one at a time. */
static zinc_status read_betas(zinc_cfg_reader *r, const json_t *v, zinc_settings *s) {
  if (zinc_cfg_is_auto(v)) {
    s->beta1 = s->beta2 = ZINC_AUTO_F64;
    return ZINC_OK;
  }
  const char *expect = "a list of two numbers in [0, 1), e.g. [0.9, 0.999], or \"auto\"";
  if (!json_is_array(v) || json_array_size(v) != 2)
    return zinc_cfg_bad(r, v, "%s", expect);
  double b[2];
  for (size_t i = 0; i < 2; i++) {
    const json_t *e = json_array_get(v, i);
    if (zinc_cfg_is_auto(e)) {
      b[i] = ZINC_AUTO_F64;
      continue;
    }
    if (!json_is_number(e) || json_number_value(e) < 0 || json_number_value(e) >= 1) {
      zinc_cfg_push_index(r, i);
      return zinc_cfg_bad(r, e, "a number in [0, 1)");
    }
    b[i] = json_number_value(e);
  }
  s->beta1 = b[0];
  s->beta2 = b[1];
  return ZINC_OK;
}

static zinc_status read_optimizer_type(zinc_cfg_reader *r, const json_t *obj,
                                       zinc_settings *s, const optim_spec **spec) {
  const json_t *v = json_object_get(obj, "type");
  size_t mark = zinc_cfg_push(r, "type");
  const char *type;
  const char *expect = "\"Adam\", \"AdamW\", \"Lamb\", \"Lion\", \"Adagrad\", \"SGD\", "
                       "\"OneBitAdam\", \"ZeroOneAdam\" or \"OneBitLamb\"";
  if (!v)
    return zinc_cfg_bad(r, NULL, "%s", expect);
  ZINC_CHECK(zinc_cfg_string(r, v, &type));
  *spec = NULL;
  for (size_t i = 0; i < ZINC_KEY_COUNT(optim_specs); i++)
    if (strcasecmp(type, optim_specs[i].name) == 0)
      *spec = &optim_specs[i];
  if (!*spec) {
    /* Never another optimizer in the place of the one asked for:
     * zero_allow_untested_optimizer lets DeepSpeed run a client optimizer,
     * and zinc has none to run. */
    int deepspeed_has = 0;
    for (size_t i = 0; i < ZINC_KEY_COUNT(deepspeed_optimizers); i++)
      deepspeed_has |= strcasecmp(type, deepspeed_optimizers[i]) == 0;
    const char *ours[ZINC_KEY_COUNT(optim_specs)];
    for (size_t i = 0; i < ZINC_KEY_COUNT(optim_specs); i++)
      ours[i] = optim_specs[i].name;
    const char *guess =
        deepspeed_has ? NULL : zinc_cfg_suggest(type, ours, (int)ZINC_KEY_COUNT(optim_specs));
    char hint[64] = "";
    if (guess)
      snprintf(hint, sizeof hint, " (did you mean \"%s\"?)", guess);
    return zinc_cfg_bad(r, v, "%s%s: zinc does not implement \"%s\"%s", expect, hint, type,
                        s->zero_allow_untested_optimizer
                            ? "; zero_allow_untested_optimizer does not change that, zinc "
                              "never runs another optimizer in its place"
                            : "");
  }
  s->optimizer = (*spec)->type;
  optim_defaults(s);
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

static zinc_status read_optimizer(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  const json_t *obj, *params;
  size_t mark, pmark;
  const optim_spec *spec = NULL;
  ZINC_CHECK(section(r, root, "optimizer", &obj, &mark));
  if (!obj)
    goto done;
  ZINC_CHECK(zinc_cfg_walk(r, obj, optimizer_keys, ZINC_KEY_COUNT(optimizer_keys), s,
                           sizeof *s));
  ZINC_CHECK(read_optimizer_type(r, obj, s, &spec));
  ZINC_CHECK(section(r, obj, "params", &params, &pmark));
  if (params) {
    ZINC_CHECK(check_foreign_optimizer_params(r, params, spec));
    ZINC_CHECK(zinc_cfg_walk(r, params, spec->keys, spec->nkeys, s, sizeof *s));
    ZINC_CHECK(check_fixed_params(r, params));
    if (s->lamb_max_grad_norm < 0) {
      zinc_cfg_warn(r, "%s.max_grad_norm = %g: negative, read as 0 (no clipping), as "
                    "DeepSpeed's FusedLamb clips only when it is > 0", r->path,
                    s->lamb_max_grad_norm);
      s->lamb_max_grad_norm = 0;
    }
    const json_t *v;
    size_t m;
    if (spec->has_betas && (v = zinc_cfg_enter(r, params, "betas", &m))) {
      ZINC_CHECK(read_betas(r, v, s));
      zinc_cfg_pop(r, m);
    }
    if (spec->has_amsgrad && (v = zinc_cfg_enter(r, params, "amsgrad", &m))) {
      int amsgrad;
      ZINC_CHECK(zinc_cfg_bool(r, v, &amsgrad));
      if (amsgrad)
        return zinc_cfg_bad(r, v, "false (zinc's %s, like DeepSpeed's fused optimizers, has "
                            "no AMSGrad variant)", spec->name);
      zinc_cfg_pop(r, m);
    }
    if (s->optimizer == ZINC_OPTIM_ONEBIT_ADAM &&
        (v = zinc_cfg_enter(r, params, "comm_backend_name", &m))) {
      const char *name;
      ZINC_CHECK(zinc_cfg_string(r, v, &name));
      if (strcmp(name, "nccl") && strcmp(name, "mpi") && strcmp(name, "compressed"))
        return zinc_cfg_bad(r, v, "\"nccl\", \"mpi\" or \"compressed\" (DeepSpeed's "
                            "transports for OneBitAdam; zinc runs its compressed all-reduce "
                            "over its own data-parallel comm whichever is named)");
      zinc_cfg_pop(r, m);
    }
    /* DeepSpeed: type AdamW is decoupled whatever adam_w_mode says. */
    v = json_object_get(params, "adam_w_mode");
    if (s->optimizer == ZINC_OPTIM_ADAMW && v && !s->adam_w_mode)
      zinc_cfg_warn(r, "%s.adam_w_mode = false has no effect with type \"AdamW\" (decoupled "
                    "weight decay is used, as DeepSpeed does)", r->path);
    ZINC_CHECK(check_optimizer_ranges(r, params, s));
    if (s->optimizer == ZINC_OPTIM_SGD && s->nesterov &&
        (s->momentum <= 0.0 || s->dampening != 0.0)) {
      v = json_object_get(params, "nesterov");
      zinc_cfg_push(r, "nesterov");
      return zinc_cfg_bad(r, v, "false: Nesterov momentum needs momentum > 0 and dampening 0 "
                          "(momentum %g, dampening %g), as torch.optim.SGD requires",
                          s->momentum, s->dampening);
    }
  }
  zinc_cfg_pop(r, pmark);
  if (s->optimizer == ZINC_OPTIM_ADAMW)
    s->adam_w_mode = 1;
done:
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ------------------------------------------------------------- scheduler */

static const zinc_key warmup_lr_keys[] = {
    ZINC_KF(T, "warmup_min_lr", warmup_min_lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("warmup_max_lr"),
    ZINC_KL(T, "warmup_num_steps", warmup_num_steps, 0, ZINC_KEY_AUTO, ZINC_AUTO),
    ZINC_KCUSTOM("warmup_type"),
    ZINC_KINERT("last_batch_iteration", "-1"),
};

static const zinc_key warmup_decay_keys[] = {
    ZINC_KF(T, "warmup_min_lr", warmup_min_lr, 0, INF, ZINC_KEY_AUTO, ZINC_AUTO_F64),
    ZINC_KCUSTOM("warmup_max_lr"),
    ZINC_KL(T, "warmup_num_steps", warmup_num_steps, 0, ZINC_KEY_AUTO, ZINC_AUTO),
    ZINC_KCUSTOM("warmup_type"),
    ZINC_KCUSTOM("total_num_steps"),
    ZINC_KINERT("last_batch_iteration", "-1"),
};

static const zinc_key warmup_cosine_keys[] = {
    ZINC_KCUSTOM("total_num_steps"),
    ZINC_KF(T, "warmup_min_ratio", warmup_min_ratio, 0, 1, 0, 0),
    ZINC_KL(T, "warmup_num_steps", warmup_num_steps, 0, ZINC_KEY_AUTO, ZINC_AUTO),
    ZINC_KF(T, "cos_min_ratio", cos_min_ratio, 0, 1, 0, 0),
    ZINC_KCUSTOM("warmup_type"),
    ZINC_KINERT("last_batch_iteration", "-1"),
};

/* DeepSpeed checks none of these values; zinc refuses the ones its
 * formulas divide by when zero (a step size), betas outside [0, 1) and
 * negative rates (the lr would turn negative or infinite). */
static const zinc_key one_cycle_keys[] = {
    ZINC_KF(T, "cycle_min_lr", cycle_min_lr, 0, INF, 0, 0),
    ZINC_KF(T, "cycle_max_lr", cycle_max_lr, 0, INF, 0, 0),
    ZINC_KF(T, "decay_lr_rate", decay_lr_rate, 0, INF, 0, 0),
    ZINC_KF(T, "cycle_first_step_size", cycle_first_step_size, 0, INF, ZINC_KEY_LO_OPEN, 0),
    {"cycle_second_step_size", ZINC_KEY_F64, offsetof(T, cycle_second_step_size), 0, INF,
     ZINC_KEY_NULL_OK, 0, NULL},
    ZINC_KL(T, "cycle_first_stair_count", cycle_first_stair_count, 0, 0, 0),
    {"cycle_second_stair_count", ZINC_KEY_I64, offsetof(T, cycle_second_stair_count), 0, INF,
     ZINC_KEY_NULL_OK, 0, NULL},
    ZINC_KF(T, "decay_step_size", decay_step_size, 0, INF, 0, 0),
    ZINC_KB(T, "cycle_momentum", cycle_momentum),
    ZINC_KF(T, "cycle_min_mom", cycle_min_mom, 0, 1, ZINC_KEY_HI_OPEN, 0),
    ZINC_KF(T, "cycle_max_mom", cycle_max_mom, 0, 1, ZINC_KEY_HI_OPEN, 0),
    ZINC_KF(T, "decay_mom_rate", decay_mom_rate, 0, INF, 0, 0),
    ZINC_KINERT("last_batch_iteration", "-1"),
};

static const zinc_key lr_range_test_keys[] = {
    ZINC_KF(T, "lr_range_test_min_lr", lr_range_test_min_lr, 0, INF, 0, 0),
    ZINC_KF(T, "lr_range_test_step_size", lr_range_test_step_size, 0, INF, ZINC_KEY_LO_OPEN, 0),
    ZINC_KF(T, "lr_range_test_step_rate", lr_range_test_step_rate, 0, INF, 0, 0),
    ZINC_KB(T, "lr_range_test_staircase", lr_range_test_staircase),
    ZINC_KINERT("last_batch_iteration", "-1"),
};

typedef struct {
  const char *name;
  zinc_sched_type type;
  const zinc_key *keys;
  size_t nkeys;
} sched_spec;

static const sched_spec schedules[] = {
    {"WarmupLR", ZINC_SCHED_WARMUP_LR, warmup_lr_keys, ZINC_KEY_COUNT(warmup_lr_keys)},
    {"WarmupDecayLR", ZINC_SCHED_WARMUP_DECAY, warmup_decay_keys,
     ZINC_KEY_COUNT(warmup_decay_keys)},
    {"WarmupCosineLR", ZINC_SCHED_WARMUP_COSINE, warmup_cosine_keys,
     ZINC_KEY_COUNT(warmup_cosine_keys)},
    {"OneCycle", ZINC_SCHED_ONE_CYCLE, one_cycle_keys, ZINC_KEY_COUNT(one_cycle_keys)},
    {"LRRangeTest", ZINC_SCHED_LR_RANGE_TEST, lr_range_test_keys,
     ZINC_KEY_COUNT(lr_range_test_keys)},
};

static int table_has(const zinc_key *keys, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].name, name) == 0)
      return 1;
  return 0;
}

/* A parameter of another Warmup schedule is an error, as DeepSpeed's
 * constructor rejects an unexpected keyword; other unknown keys warn. */
static zinc_status check_foreign_params(zinc_cfg_reader *r, const json_t *params,
                                        const sched_spec *spec) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)params, key, v) {
    if (table_has(spec->keys, spec->nkeys, key))
      continue;
    for (size_t i = 0; i < ZINC_KEY_COUNT(schedules); i++)
      if (table_has(schedules[i].keys, schedules[i].nkeys, key)) {
        char takes[256] = "";
        for (size_t j = 0; j < spec->nkeys; j++) {
          size_t len = strlen(takes);
          snprintf(takes + len, sizeof takes - len, "%s%s", j ? ", " : "", spec->keys[j].name);
        }
        zinc_cfg_push(r, key);
        return zinc_cfg_bad(r, v, "no such key: %s is a parameter of %s, and %s takes only %s",
                            key, schedules[i].name, spec->name, takes);
      }
  }
  return ZINC_OK;
}

static zinc_status read_schedule_params(zinc_cfg_reader *r, const json_t *params,
                                        const sched_spec *spec, zinc_settings *s) {
  ZINC_CHECK(check_foreign_params(r, params, spec));
  ZINC_CHECK(zinc_cfg_walk(r, params, spec->keys, spec->nkeys, s, sizeof *s));
  const json_t *v;
  size_t m;
  if ((v = zinc_cfg_enter(r, params, "warmup_max_lr", &m))) {
    if (zinc_cfg_is_auto(v))
      s->warmup_max_lr = ZINC_AUTO_F64; /* HF: the optimizer's lr (config/auto.c) */
    else if (json_is_number(v) && json_number_value(v) >= 0)
      s->warmup_max_lr = json_number_value(v);
    else
      return zinc_cfg_bad(r, v, "a number >= 0 or \"auto\"");
    zinc_cfg_pop(r, m);
  }
  if ((v = zinc_cfg_enter(r, params, "warmup_type", &m))) {
    const char *name = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(name, "log") == 0)
      s->warmup_type = ZINC_WARMUP_LOG;
    else if (strcmp(name, "linear") == 0)
      s->warmup_type = ZINC_WARMUP_LINEAR;
    else
      return zinc_cfg_bad(r, v, "\"log\" or \"linear\"");
    zinc_cfg_pop(r, m);
  }
  v = json_object_get(params, "total_num_steps");
  if (table_has(spec->keys, spec->nkeys, "total_num_steps")) {
    m = zinc_cfg_push(r, "total_num_steps");
    if (!v || json_is_null(v)) {
      /* checked at engine creation (zinc_settings_check_scheduler), where
       * DeepSpeed constructs the schedule and a trainer may supply it */
      s->total_num_steps = 0;
      zinc_cfg_pop(r, m);
      return ZINC_OK;
    }
    if (zinc_cfg_is_auto(v))
      s->total_num_steps = ZINC_AUTO; /* the trainer's (config/auto.c) */
    else if (!json_is_number(v) || zinc_cfg_int64(r, v, 1, INT64_MAX, &s->total_num_steps) != ZINC_OK)
      return zinc_cfg_bad(r, v, "a positive integer or \"auto\"");
    zinc_cfg_pop(r, m);
  }
  return ZINC_OK;
}

static zinc_status read_scheduler(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  static const zinc_key scheduler_keys[] = {ZINC_KCUSTOM("type"), ZINC_KCUSTOM("params")};
  const json_t *obj, *params;
  size_t mark, pmark;
  ZINC_CHECK(section(r, root, "scheduler", &obj, &mark));
  if (!obj)
    goto done;
  ZINC_CHECK(zinc_cfg_walk(r, obj, scheduler_keys, 2, s, sizeof *s));
  const json_t *v = json_object_get(obj, "type");
  size_t tmark = zinc_cfg_push(r, "type");
  const char *name = json_is_string(v) ? json_string_value(v) : NULL;
  const sched_spec *spec = NULL;
  for (size_t i = 0; name && i < ZINC_KEY_COUNT(schedules); i++)
    if (strcmp(name, schedules[i].name) == 0)
      spec = &schedules[i];
  if (!spec) {
    static const char *const known[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                        "OneCycle", "LRRangeTest"};
    const char *guess = name ? zinc_cfg_suggest(name, known, 5) : NULL;
    return zinc_cfg_bad(r, v, "\"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", "
                        "\"OneCycle\" or \"LRRangeTest\"%s%s%s",
                        guess ? " (did you mean \"" : "", guess ? guess : "",
                        guess ? "\"?)" : "");
  }
  zinc_cfg_pop(r, tmark);
  s->scheduler = spec->type;
  ZINC_CHECK(section(r, obj, "params", &params, &pmark));
  json_t *empty = json_object();
  zinc_status st = read_schedule_params(r, params ? params : empty, spec, s);
  json_decref(empty);
  ZINC_CHECK(st);
  zinc_cfg_pop(r, pmark);
done:
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ------------------------------------------------ activation checkpointing */

static const zinc_key activation_keys[] = {
    ZINC_KB(T, "partition_activations", ac_partition_activations),
    ZINC_KB(T, "cpu_checkpointing", ac_cpu_checkpointing),
    ZINC_KB(T, "contiguous_memory_optimization", ac_contiguous_memory_optimization),
    {"number_checkpoints", ZINC_KEY_I64, offsetof(T, ac_number_checkpoints), 0, INF,
     ZINC_KEY_NULL_OK, 0, NULL},
    ZINC_KB(T, "synchronize_checkpoint_boundary", ac_synchronize_checkpoint_boundary),
    ZINC_KB(T, "profile", ac_profile),
};

/* ---------------------------------------------------------------- "zinc" */

static const zinc_key zinc_keys[] = {
    ZINC_KCUSTOM("log_level"),
    /* at most 1e6 s (11.6 days): a bound a deadline can be computed for;
     * at least 1 s: a shorter wait declares busy but healthy peers dead
     * (1e-300 made every collective report a lost peer) */
    ZINC_KF(T, "comm_timeout_s", comm_timeout_s, 1, 1e6, 0, 0),
    ZINC_KCUSTOM("memory_timeline"),
    ZINC_KB(T, "placement_verbose", placement_verbose),
    ZINC_KL(T, "max_consecutive_skips", max_consecutive_skips, 0, 0, 0),
    ZINC_KF(T, "checkpoint_timeout_s", checkpoint_timeout_s, 0, 1e6, ZINC_KEY_LO_OPEN, 0),
    ZINC_KCUSTOM("compression"),
    ZINC_KCUSTOM("bf16_rounding"),
    ZINC_KL(T, "bf16_rounding_seed", bf16_rounding_seed, 0, 0, 0),
};

/* "zinc": {"compression": {...}}: the codecs of compressed communication,
 * which DeepSpeed's keys (zero_quantized_gradients / _weights) leave fixed.
 * Each bit width is a codec of kernels/codec.h; a block of block_size
 * elements carries one fp32 scale (32 / block_size more bits per element). */
static const zinc_key compression_keys[] = {
    ZINC_KCUSTOM("gradient_bits"),
    ZINC_KCUSTOM("gradient_codec"),
    ZINC_KCUSTOM("weight_bits"),
    {"block_size", ZINC_KEY_I64, offsetof(T, compress_block_size), 1, 1 << 20, 0, 0, NULL},
    ZINC_KCUSTOM("scope"),
    ZINC_KCUSTOM("dgc"),
    ZINC_KCUSTOM("delayed_averaging"),
    ZINC_KCUSTOM("powersgd"),
};

/* "zinc": {"compression": {"delayed_averaging": {"delay": D}}}: Delayed
 * Gradient Averaging (engine/reduce/dga.c); D = 0 is off. Stage 0 only (validate.c). */
static const zinc_key dga_keys[] = {
    {"delay", ZINC_KEY_I64, offsetof(T, dga_delay), 0, 1024, 0, 0, NULL},
};

/* "zinc": {"compression": {"dgc": {...}}}: Deep Gradient Compression's
 * top-k codec (kernels/codec.h ZINC_CODEC_TOPK, engine/reduce/compress.c). The
 * density is at most 1 and above 0; the codec keeps at least one element
 * per block. */
static const zinc_key dgc_keys[] = {
    ZINC_KF(T, "density", dgc_density, 0, 1, ZINC_KEY_LO_OPEN, 0),
    ZINC_KL(T, "warmup_steps", dgc_warmup_steps, 0, 0, 0),
    ZINC_KB(T, "residual", dgc_residual),
    ZINC_KB(T, "momentum_correction", dgc_momentum_correction),
    ZINC_KB(T, "local_clipping", dgc_local_clipping),
};

/* "zinc": {"compression": {"powersgd": {...}}}: PowerSGD's parameters with
 * the names and defaults of PyTorch's PowerSGDState (engine/reduce/powersgd.c). */
static const zinc_key powersgd_keys[] = {
    ZINC_KL(T, "matrix_approximation_rank", psgd_rank, 1, 0, 0),
    ZINC_KL(T, "start_powerSGD_iter", psgd_start_iter, 0, 0, 0),
    ZINC_KF(T, "min_compression_rate", psgd_min_compression_rate, 0, HUGE_VAL, 0, 0),
    ZINC_KB(T, "use_error_feedback", psgd_error_feedback),
    ZINC_KB(T, "warm_start", psgd_warm_start),
    ZINC_KF(T, "orthogonalization_epsilon", psgd_orth_epsilon, 0, HUGE_VAL, 0, 0),
    ZINC_KL(T, "random_seed", psgd_random_seed, 0, 0, 0),
    ZINC_KL(T, "compression_stats_logging_frequency", psgd_stats_frequency, 0, 0, 0),
    ZINC_KB(T, "batch_tensors_with_same_shape", psgd_batch_same_shape),
};

/* An integer key of obj that takes one of a few values (ascending, for the
 * message). */
static zinc_status read_bits(zinc_cfg_reader *r, const json_t *obj, const char *key,
                             const int *allowed, size_t n, const char *what, int *out) {
  size_t mark;
  const json_t *v = zinc_cfg_enter(r, obj, key, &mark);
  if (!v)
    return ZINC_OK;
  int64_t x = 0;
  int ok = json_is_number(v) && zinc_cfg_int64(r, v, INT_MIN, INT_MAX, &x) == ZINC_OK;
  size_t i = 0;
  while (ok && i < n && allowed[i] != x)
    i++;
  if (!ok || i == n)
    return zinc_cfg_bad(r, v, "%s", what);
  *out = (int)x;
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

static zinc_status read_compression(zinc_cfg_reader *r, const json_t *zinc, zinc_settings *s) {
  size_t mark = zinc_cfg_push(r, "compression");
  const json_t *obj;
  ZINC_CHECK(zinc_cfg_object(r, json_object_get(zinc, "compression"), &obj));
  if (!obj)
    goto done;
  ZINC_CHECK(zinc_cfg_walk(r, obj, compression_keys, ZINC_KEY_COUNT(compression_keys), s,
                           sizeof *s));
  static const int gradient_bits[] = {1, 4, 8}, weight_bits[] = {4, 8};
  ZINC_CHECK(read_bits(r, obj, "gradient_bits", gradient_bits, 3,
                       "1, 4 or 8 (bits per gradient element; 1 is the sign, an experiment "
                       "that needs zeropp_loco_param)", &s->compress_gradient_bits));
  ZINC_CHECK(read_bits(r, obj, "weight_bits", weight_bits, 2,
                       "4 or 8 (bits per weight element)", &s->compress_weight_bits));
  size_t m;
  const json_t *v = zinc_cfg_enter(r, obj, "gradient_codec", &m);
  if (v) {
    const char *name = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(name, "quant") == 0)
      s->compress_gradient_codec = ZINC_GRAD_CODEC_QUANT;
    else if (strcmp(name, "terngrad") == 0)
      s->compress_gradient_codec = ZINC_GRAD_CODEC_TERNGRAD;
    else if (strcmp(name, "dgc") == 0)
      s->compress_gradient_codec = ZINC_GRAD_CODEC_DGC;
    else if (strcmp(name, "powersgd") == 0)
      s->compress_gradient_codec = ZINC_GRAD_CODEC_POWERSGD;
    else
      return zinc_cfg_bad(r, v, "\"quant\" (gradient_bits' block codec), \"terngrad\" "
                          "(TernGrad: stochastic ternary, 2 bits per element), \"dgc\" "
                          "(Deep Gradient Compression's top-k with a residual) or "
                          "\"powersgd\" (PowerSGD's low-rank all-reduce, stages 0 and 1)");
    zinc_cfg_pop(r, m);
  }
  v = zinc_cfg_enter(r, obj, "scope", &m);
  if (v) {
    const char *name = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(name, "inter_node") == 0)
      s->compress_scope = ZINC_COMPRESS_INTER_NODE;
    else if (strcmp(name, "all") == 0)
      s->compress_scope = ZINC_COMPRESS_ALL;
    else
      return zinc_cfg_bad(r, v, "\"inter_node\" (compress only what crosses nodes) or "
                          "\"all\"");
    zinc_cfg_pop(r, m);
  }
  const json_t *dgc;
  size_t md = zinc_cfg_push(r, "dgc");
  ZINC_CHECK(zinc_cfg_object(r, json_object_get(obj, "dgc"), &dgc));
  if (dgc)
    ZINC_CHECK(zinc_cfg_walk(r, dgc, dgc_keys, ZINC_KEY_COUNT(dgc_keys), s, sizeof *s));
  zinc_cfg_pop(r, md);
  const json_t *dga;
  md = zinc_cfg_push(r, "delayed_averaging");
  ZINC_CHECK(zinc_cfg_object(r, json_object_get(obj, "delayed_averaging"), &dga));
  if (dga)
    ZINC_CHECK(zinc_cfg_walk(r, dga, dga_keys, ZINC_KEY_COUNT(dga_keys), s, sizeof *s));
  zinc_cfg_pop(r, md);
  const json_t *psgd;
  md = zinc_cfg_push(r, "powersgd");
  ZINC_CHECK(zinc_cfg_object(r, json_object_get(obj, "powersgd"), &psgd));
  if (psgd)
    ZINC_CHECK(zinc_cfg_walk(r, psgd, powersgd_keys, ZINC_KEY_COUNT(powersgd_keys), s,
                             sizeof *s));
  zinc_cfg_pop(r, md);
  if (s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC && s->compress_block_size > 65536)
    return zinc_error(ZINC_ERR_CONFIG, "%s.block_size = %lld: gradient_codec \"dgc\" stores "
                      "16-bit indices inside a block, so the block is at most 65536 elements; "
                      "lower block_size", r->path, (long long)s->compress_block_size);
done:
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

static zinc_status read_zinc(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, "zinc", &obj, &mark));
  if (!obj)
    goto done;
  /* The log level first, so that it governs this file's own warnings. */
  const json_t *v;
  size_t m;
  if ((v = zinc_cfg_enter(r, obj, "log_level", &m)) && !json_is_null(v)) {
    int level = json_is_string(v) ? zinc_log_level_parse(json_string_value(v)) : -1;
    if (level < 0)
      return zinc_cfg_bad(r, v, "\"error\", \"warn\", \"info\" or \"debug\"");
    s->log_level = level;
    zinc_log_set_level((zinc_log_level)level);
  }
  if (v)
    zinc_cfg_pop(r, m);
  ZINC_CHECK(zinc_cfg_walk(r, obj, zinc_keys, ZINC_KEY_COUNT(zinc_keys), s, sizeof *s));
  if ((v = zinc_cfg_enter(r, obj, "memory_timeline", &m)) && !json_is_null(v)) {
    if (!json_is_string(v) || json_string_length(v) == 0)
      return zinc_cfg_bad(r, v, "a file path or null");
    free(s->memory_timeline);
    s->memory_timeline = zinc_strdup(json_string_value(v));
    if (!s->memory_timeline)
      return zinc_error(ZINC_ERR_NOMEM, "out of memory copying %s", r->path);
  }
  if (v)
    zinc_cfg_pop(r, m);
  /* How a value computed in fp32 is stored in bf16 (bf16 master weights or
   * optimizer states): DeepSpeed's round to nearest even, or stochastic
   * rounding, drawn from a hash of the seed, the step and the element's
   * place in the model, so that runs stay reproducible bit for bit. */
  if ((v = zinc_cfg_enter(r, obj, "bf16_rounding", &m)) && !json_is_null(v)) {
    const char *name = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(name, "nearest"))
      s->bf16_rounding = 0;
    else if (!strcmp(name, "stochastic"))
      s->bf16_rounding = 1;
    else
      return zinc_cfg_bad(r, v, "\"nearest\" (round to nearest even) or \"stochastic\"");
  }
  if (v)
    zinc_cfg_pop(r, m);
  ZINC_CHECK(read_compression(r, obj, s));
done:
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ---------------------------------------------------------------- monitors */

/* "csv_monitor" and "tensorboard": {enabled, output_path, job_name}, as
 * DeepSpeed's CSVConfig and TensorBoardConfig. */
static const zinc_key monitor_keys[] = {
    ZINC_KB(zinc_monitor_settings, "enabled", enabled),
    ZINC_KCUSTOM("output_path"),
    ZINC_KCUSTOM("job_name"),
};

static zinc_status read_monitor_string(zinc_cfg_reader *r, const json_t *obj, const char *key,
                                       char *out, size_t cap) {
  size_t m;
  const json_t *v = zinc_cfg_enter(r, obj, key, &m);
  if (!v)
    return ZINC_OK;
  if (zinc_cfg_is_auto(v)) {
    zinc_cfg_auto_default(r, "\"%s\", DeepSpeed's default", out);
    zinc_cfg_pop(r, m);
    return ZINC_OK;
  }
  const char *str;
  ZINC_CHECK(zinc_cfg_string(r, v, &str));
  if (strlen(str) >= cap)
    return zinc_cfg_bad(r, v, "a string shorter than %zu bytes", cap);
  snprintf(out, cap, "%s", str);
  zinc_cfg_pop(r, m);
  return ZINC_OK;
}

static zinc_status read_monitor(zinc_cfg_reader *r, const json_t *root, const char *name,
                                zinc_monitor_settings *ms) {
  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, name, &obj, &mark));
  if (obj) {
    ZINC_CHECK(zinc_cfg_walk(r, obj, monitor_keys, ZINC_KEY_COUNT(monitor_keys), ms,
                             sizeof *ms));
    ZINC_CHECK(read_monitor_string(r, obj, "output_path", ms->output_path,
                                   sizeof ms->output_path));
    ZINC_CHECK(read_monitor_string(r, obj, "job_name", ms->job_name, sizeof ms->job_name));
    if (ms->enabled && !ms->job_name[0])
      return zinc_cfg_fail(r, "%s.job_name is empty: the logs go to output_path/job_name",
                           name);
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ------------------------------------------------------------ comms_logger */

/* DeepSpeed's CommsLoggerConfig. prof_ops names DeepSpeed's ops (its
 * log_name defaults: the function names of deepspeed.comm); the ones zinc
 * never issues are accepted and count nothing. */
static const zinc_key comms_logger_keys[] = {
    ZINC_KB(zinc_comms_logger_settings, "enabled", enabled),
    ZINC_KB(zinc_comms_logger_settings, "verbose", verbose),
    ZINC_KB(zinc_comms_logger_settings, "prof_all", prof_all),
    ZINC_KB(zinc_comms_logger_settings, "debug", debug),
    ZINC_KCUSTOM("prof_ops"),
};

static const struct {
  const char *name;
  int op; /* zinc_comms_op, or -1: an op zinc never issues */
} comms_op_names[] = {
    {"all_reduce", ZINC_COMMS_ALL_REDUCE},
    {"all_reduce_coalesced", ZINC_COMMS_ALL_REDUCE},
    {"inference_all_reduce", ZINC_COMMS_ALL_REDUCE},
    {"reduce_scatter", ZINC_COMMS_REDUCE_SCATTER},
    {"reduce_scatter_tensor", ZINC_COMMS_REDUCE_SCATTER},
    {"reduce_scatter_fn", ZINC_COMMS_REDUCE_SCATTER},
    {"all_gather", ZINC_COMMS_ALL_GATHER},
    {"all_gather_into_tensor", ZINC_COMMS_ALL_GATHER},
    {"allgather_fn", ZINC_COMMS_ALL_GATHER},
    {"all_gather_coalesced", ZINC_COMMS_ALL_GATHER},
    {"all_gatherv", ZINC_COMMS_ALL_GATHERV},
    {"broadcast", ZINC_COMMS_BROADCAST},
    {"barrier", ZINC_COMMS_BARRIER},
    {"all_to_all_single", ZINC_COMMS_ALL_TO_ALL_V},
    {"all_to_all_v", ZINC_COMMS_ALL_TO_ALL_V},
    {"send", -1},
    {"recv", -1},
    {"isend", -1},
    {"irecv", -1},
    {"reduce", -1},
    {"gather", -1},
    {"scatter", -1},
    {"all_gather_object", -1},
    {"broadcast_object_list", -1},
    {"monitored_barrier", -1},
};

static zinc_status read_prof_ops(zinc_cfg_reader *r, const json_t *obj,
                                 zinc_comms_logger_settings *cl) {
  size_t mark;
  const json_t *v = zinc_cfg_enter(r, obj, "prof_ops", &mark);
  if (!v)
    return ZINC_OK;
  if (zinc_cfg_is_auto(v)) {
    zinc_cfg_auto_default(r, "[] (no op singled out), DeepSpeed's default");
    zinc_cfg_pop(r, mark);
    return ZINC_OK;
  }
  if (!json_is_array(v))
    return zinc_cfg_bad(r, v, "a list of op names, e.g. [\"all_reduce\", \"all_gather\"]");
  const char *known[ZINC_KEY_COUNT(comms_op_names)];
  for (size_t k = 0; k < ZINC_KEY_COUNT(comms_op_names); k++)
    known[k] = comms_op_names[k].name;
  for (size_t i = 0; i < json_array_size(v); i++) {
    const json_t *e = json_array_get(v, i);
    size_t m = zinc_cfg_push_index(r, i);
    const char *name;
    ZINC_CHECK(zinc_cfg_string(r, e, &name));
    size_t k = 0;
    while (k < ZINC_KEY_COUNT(comms_op_names) && strcmp(name, known[k]) != 0)
      k++;
    if (k == ZINC_KEY_COUNT(comms_op_names)) {
      /* DeepSpeed's logger matches no call against it and runs on */
      const char *near = zinc_cfg_suggest(name, known, ZINC_KEY_COUNT(comms_op_names));
      zinc_cfg_warn(r, "%s = \"%s\" is not a DeepSpeed communication op (all_reduce, "
                    "reduce_scatter, all_gather, all_gatherv, broadcast, barrier, ...)%s%s%s; "
                    "it counts nothing, as in DeepSpeed", r->path, name,
                    near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
    } else if (comms_op_names[k].op >= 0)
      cl->prof_ops |= 1u << comms_op_names[k].op;
    zinc_cfg_pop(r, m);
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

static zinc_status read_comms_logger(zinc_cfg_reader *r, const json_t *root,
                                     zinc_comms_logger_settings *cl) {
  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, "comms_logger", &obj, &mark));
  if (obj) {
    ZINC_CHECK(zinc_cfg_walk(r, obj, comms_logger_keys, ZINC_KEY_COUNT(comms_logger_keys), cl,
                             sizeof *cl));
    ZINC_CHECK(read_prof_ops(r, obj, cl));
    if (cl->enabled && !cl->prof_all && !cl->prof_ops)
      zinc_cfg_warn(r, "comms_logger is enabled with prof_all false and no prof_ops: no "
                    "collective will be counted; set prof_all true or name ops in prof_ops");
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ---------------------------------------------------------------- pipeline */

/* DeepSpeed's "pipeline" section (its runtime/config.py get_pipeline_config,
 * read by its PipelineEngine). DeepSpeed takes the number of stages from
 * the PipelineModule, never from "stages" (default "auto"); zinc takes it
 * from zinc_options.pipeline_parallel_size, and a number written here must
 * agree with it (engine/pipe.c). The other keys shape the trainer's model
 * (how layers are split, seeded and checkpointed, whether activations are
 * sent partitioned over the tensor-parallel group): zinc sends whole
 * buffers and leaves the model to the trainer. */
static const zinc_key pipeline_keys[] = {
    ZINC_KCUSTOM("stages"),
    ZINC_KINERT("partition", "\"best\""),
    ZINC_KINERT("seed_layers", "false"),
    ZINC_KINERT("activation_checkpoint_interval", "0"),
    ZINC_KINERT("pipe_partitioned", "true"),
    ZINC_KINERT("grad_partitioned", "true"),
    ZINC_KINERT("use_reentrant", "true"),
};

static zinc_status read_pipeline(zinc_cfg_reader *r, const json_t *root, zinc_settings *s) {
  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, "pipeline", &obj, &mark));
  if (obj) {
    ZINC_CHECK(zinc_cfg_walk(r, obj, pipeline_keys, ZINC_KEY_COUNT(pipeline_keys), s,
                             sizeof *s));
    size_t m;
    const json_t *v = zinc_cfg_enter(r, obj, "stages", &m);
    if (v) {
      if (json_is_null(v) || zinc_cfg_is_auto(v))
        s->pipeline_stages = 0;
      else if (!json_is_number(v) ||
               zinc_cfg_int64(r, v, 1, 1 << 20, &s->pipeline_stages) != ZINC_OK)
        return zinc_cfg_bad(r, v, "\"auto\" or the number of pipeline stages (1 to %d), "
                            "the same as zinc_options.pipeline_parallel_size", 1 << 20);
      zinc_cfg_pop(r, m);
    }
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* "wandb" and "comet" are accepted; zinc does not write them. Enabled, they
 * get a warning of their own (the trainer expects logs that will not come). */
static void note_unwritten_monitor(zinc_cfg_reader *r, const json_t *root, const char *name) {
  const json_t *v = json_object_get(root, name);
  if (!v)
    return;
  const json_t *en = json_is_object(v) ? json_object_get(v, "enabled") : NULL;
  if (en && json_is_true(en)) {
    zinc_cfg_warn(r, "%s.enabled is true but zinc does not write %s logs; use "
                  "\"csv_monitor\" or \"tensorboard\"", name, name);
    return;
  }
  size_t len = strlen(r->ignored);
  snprintf(r->ignored + len, sizeof r->ignored - len, "%s%s", len ? ", " : "", name);
}

/* ---------------------------------------------------------------- document */

zinc_status zinc_cfg_read_document(zinc_cfg_reader *r, const json_t *root,
                                   zinc_settings *s) {
  if (!json_is_object(root))
    return zinc_cfg_bad(r, root, "a JSON object {...} at the top level");
  ZINC_CHECK(read_zinc(r, root, s));
  ZINC_CHECK(zinc_cfg_walk(r, root, top_keys, ZINC_KEY_COUNT(top_keys), s, sizeof *s));
  read_top_level_notes(r, root, s);
  ZINC_CHECK(check_predivide(r, root, s));
  ZINC_CHECK(read_communication_data_type(r, root, s));
  ZINC_CHECK(read_batch(r, root, s));
  ZINC_CHECK(read_precision(r, root, s));
  ZINC_CHECK(read_optimizer(r, root, s));
  ZINC_CHECK(read_scheduler(r, root, s));
  ZINC_CHECK(zinc_cfg_read_zero(r, json_object_get(root, "zero_optimization"), s));
  ZINC_CHECK(zinc_cfg_read_aio(r, json_object_get(root, "aio"), s));

  const json_t *obj;
  size_t mark;
  ZINC_CHECK(section(r, root, "activation_checkpointing", &obj, &mark));
  if (obj)
    ZINC_CHECK(zinc_cfg_walk(r, obj, activation_keys, ZINC_KEY_COUNT(activation_keys), s,
                             sizeof *s));
  zinc_cfg_pop(r, mark);

  ZINC_CHECK(read_monitor(r, root, "csv_monitor", &s->csv_monitor));
  ZINC_CHECK(read_monitor(r, root, "tensorboard", &s->tensorboard));
  ZINC_CHECK(read_comms_logger(r, root, &s->comms_logger));
  ZINC_CHECK(read_pipeline(r, root, s));
  note_unwritten_monitor(r, root, "wandb");
  note_unwritten_monitor(r, root, "comet");

  if (r->ignored[0])
    zinc_cfg_warn(r, "DeepSpeed sections zinc does not implement were accepted and are "
                  "ignored: %s", r->ignored);
  return ZINC_OK;
}
