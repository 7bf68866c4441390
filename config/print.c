/*
 * print.c — settings out: as a JSON object in DeepSpeed's spelling (which
 * zinc_config_parse loads back to equal settings; checkpoints store it) and
 * as the start-up listing DeepSpeed prints, one "key ..... value" line per
 * setting through the logger.
 *
 * Values still "auto" (auto_mask; resolved at engine creation or build)
 * are written as "auto"; batch keys the file did not give are left out, so that the
 * text loads back to the same batch_given_mask.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

static json_t *int_or_auto(int64_t v) {
  return v == ZINC_AUTO ? json_string("auto") : json_integer(v);
}

static json_t *bool_or_auto(int v) {
  return v == ZINC_AUTO ? json_string("auto") : json_boolean(v);
}

/* A number, or "auto" while its key's bit is set. */
static json_t *real_or_auto(const zinc_settings *s, zinc_auto_key key, double v) {
  return (s->auto_mask & ZINC_AUTO_BIT(key)) ? json_string("auto") : json_real(v);
}

static void put(json_t *obj, const char *key, json_t *value) {
  json_object_set_new(obj, key, value);
}

static void put_batch(json_t *root, const zinc_settings *s, const char *key, int bit,
                      int64_t value) {
  int mask = s->batch_given_mask;
  /* A resolved value is written as the number it became. */
  if (value != ZINC_AUTO)
    put(root, key, json_integer(value));
  else if (mask & ZINC_BATCH_IS_AUTO(bit))
    put(root, key, json_string("auto"));
}

static json_t *offload_json(const zinc_offload_settings *o, int is_param) {
  json_t *obj = json_object();
  put(obj, "device", json_string(zinc_offload_device_name(o->device)));
  if (o->nvme_path_count == 1) {
    put(obj, "nvme_path", json_string(o->nvme_paths[0]));
  } else if (o->nvme_path_count > 1) {
    json_t *list = json_array();
    for (int i = 0; i < o->nvme_path_count; i++)
      json_array_append_new(list, json_string(o->nvme_paths[i]));
    put(obj, "nvme_path", list);
  }
  put(obj, "pin_memory", bool_or_auto(o->pin_memory));
  put(obj, "buffer_count", int_or_auto(o->buffer_count));
  if (is_param) {
    put(obj, "buffer_size", json_integer(o->buffer_size));
    put(obj, "max_in_cpu", json_integer(o->max_in_cpu));
  } else {
    put(obj, "pipeline_read", json_boolean(o->pipeline_read));
    put(obj, "pipeline_write", json_boolean(o->pipeline_write));
    put(obj, "fast_init", json_boolean(o->fast_init));
    put(obj, "ratio", json_real(o->ratio));
  }
  return obj;
}

static json_t *zero_json(const zinc_settings *s) {
  json_t *z = json_object();
  put(z, "stage", json_integer(s->stage));
  put(z, "contiguous_gradients", json_boolean(s->contiguous_gradients));
  put(z, "overlap_comm", json_boolean(s->overlap_comm));
  put(z, "reduce_scatter", json_boolean(s->reduce_scatter));
  put(z, "reduce_bucket_size", int_or_auto(s->reduce_bucket_size));
  put(z, "allgather_partitions", json_boolean(s->allgather_partitions));
  put(z, "allgather_bucket_size", json_integer(s->allgather_bucket_size));
  put(z, "round_robin_gradients", json_boolean(s->round_robin_gradients));
  put(z, "sub_group_size", json_integer(s->sub_group_size));
  put(z, "offload_optimizer", offload_json(&s->offload_optimizer, 0));
  put(z, "offload_param", offload_json(&s->offload_param, 1));
  put(z, "stage3_prefetch_bucket_size", int_or_auto(s->stage3_prefetch_bucket_size));
  put(z, "stage3_param_persistence_threshold",
      int_or_auto(s->stage3_param_persistence_threshold));
  put(z, "stage3_max_live_parameters", int_or_auto(s->stage3_max_live_parameters));
  put(z, "stage3_max_reuse_distance", int_or_auto(s->stage3_max_reuse_distance));
  put(z, "stage3_gather_16bit_weights_on_model_save",
      bool_or_auto(s->stage3_gather_16bit_weights_on_model_save));
  put(z, "zero_hpz_partition_size", json_integer(s->zero_hpz_partition_size));
  put(z, "zero_quantized_weights", json_boolean(s->zero_quantized_weights));
  put(z, "zero_quantized_gradients", json_boolean(s->zero_quantized_gradients));
  json_t *loco = json_null();
  if (s->loco_enabled) {
    loco = json_object();
    put(loco, "err_beta", json_real(s->loco_err_beta));
    put(loco, "reset_T", json_integer(s->loco_reset_T));
  }
  put(z, "zeropp_loco_param", loco);
  return z;
}

static json_t *scheduler_json(const zinc_settings *s) {
  json_t *sched = json_object(), *p = json_object();
  put(sched, "type", json_string(zinc_sched_type_name(s->scheduler)));
  if (s->scheduler == ZINC_SCHED_ONE_CYCLE) {
    /* not given (NAN, -1) stays absent, to load back the same */
    if (!isnan(s->cycle_min_lr))
      put(p, "cycle_min_lr", json_real(s->cycle_min_lr));
    if (!isnan(s->cycle_max_lr))
      put(p, "cycle_max_lr", json_real(s->cycle_max_lr));
    put(p, "decay_lr_rate", json_real(s->decay_lr_rate));
    put(p, "cycle_first_step_size", json_real(s->cycle_first_step_size));
    if (!isnan(s->cycle_second_step_size))
      put(p, "cycle_second_step_size", json_real(s->cycle_second_step_size));
    put(p, "cycle_first_stair_count", json_integer(s->cycle_first_stair_count));
    if (s->cycle_second_stair_count >= 0)
      put(p, "cycle_second_stair_count", json_integer(s->cycle_second_stair_count));
    put(p, "decay_step_size", json_real(s->decay_step_size));
    put(p, "cycle_momentum", json_boolean(s->cycle_momentum));
    put(p, "cycle_min_mom", json_real(s->cycle_min_mom));
    put(p, "cycle_max_mom", json_real(s->cycle_max_mom));
    put(p, "decay_mom_rate", json_real(s->decay_mom_rate));
    put(sched, "params", p);
    return sched;
  }
  if (s->scheduler == ZINC_SCHED_LR_RANGE_TEST) {
    put(p, "lr_range_test_min_lr", json_real(s->lr_range_test_min_lr));
    put(p, "lr_range_test_step_size", json_real(s->lr_range_test_step_size));
    put(p, "lr_range_test_step_rate", json_real(s->lr_range_test_step_rate));
    put(p, "lr_range_test_staircase", json_boolean(s->lr_range_test_staircase));
    put(sched, "params", p);
    return sched;
  }
  if (s->scheduler == ZINC_SCHED_WARMUP_COSINE) {
    if (s->total_num_steps != 0) /* 0: not given, absent again */
      put(p, "total_num_steps", int_or_auto(s->total_num_steps));
    put(p, "warmup_min_ratio", json_real(s->warmup_min_ratio));
    put(p, "cos_min_ratio", json_real(s->cos_min_ratio));
  } else {
    put(p, "warmup_min_lr", real_or_auto(s, ZINC_AUTO_WARMUP_MIN_LR, s->warmup_min_lr));
    put(p, "warmup_max_lr", real_or_auto(s, ZINC_AUTO_WARMUP_MAX_LR, s->warmup_max_lr));
    if (s->scheduler == ZINC_SCHED_WARMUP_DECAY && s->total_num_steps != 0)
      put(p, "total_num_steps", int_or_auto(s->total_num_steps));
  }
  put(p, "warmup_num_steps", int_or_auto(s->warmup_num_steps));
  put(p, "warmup_type", json_string(s->warmup_type == ZINC_WARMUP_LINEAR ? "linear" : "log"));
  put(sched, "params", p);
  return sched;
}

static json_t *settings_json(const zinc_settings *s) {
  json_t *root = json_object();
  put_batch(root, s, "train_batch_size", ZINC_BATCH_TRAIN, s->train_batch_size);
  put_batch(root, s, "train_micro_batch_size_per_gpu", ZINC_BATCH_MICRO,
            s->train_micro_batch_size_per_gpu);
  put_batch(root, s, "gradient_accumulation_steps", ZINC_BATCH_GAS,
            s->gradient_accumulation_steps);
  put(root, "gradient_clipping",
      real_or_auto(s, ZINC_AUTO_GRADIENT_CLIPPING, s->gradient_clipping));
  put(root, "steps_per_print", json_integer(s->steps_per_print));
  put(root, "wall_clock_breakdown", json_boolean(s->wall_clock_breakdown));
  put(root, "zero_allow_untested_optimizer", json_boolean(s->zero_allow_untested_optimizer));
  put(root, "prescale_gradients", json_boolean(s->prescale_gradients));
  put(root, "gradient_predivide_factor", json_real(s->gradient_predivide_factor));
  put(root, "communication_data_type",
      s->communication_data_type < 0
          ? json_null()
          : json_string(s->communication_data_type == ZINC_F32   ? "fp32"
                        : s->communication_data_type == ZINC_F16 ? "fp16"
                                                                 : "bf16"));

  json_t *fp16 = json_object();
  put(fp16, "enabled", bool_or_auto(s->fp16_enabled));
  put(fp16, "loss_scale", json_real(s->fp16_loss_scale));
  put(fp16, "initial_scale_power",
      s->fp16_initial_scale_power == floor(s->fp16_initial_scale_power)
          ? json_integer((json_int_t)s->fp16_initial_scale_power)
          : json_real(s->fp16_initial_scale_power));
  put(fp16, "loss_scale_window", json_integer(s->fp16_loss_scale_window));
  put(fp16, "hysteresis", json_integer(s->fp16_hysteresis));
  put(fp16, "consecutive_hysteresis", json_boolean(s->fp16_consecutive_hysteresis));
  put(fp16, "min_loss_scale", json_real(s->fp16_min_loss_scale));
  put(root, "fp16", fp16);
  json_t *bf16 = json_object();
  put(bf16, "enabled", bool_or_auto(s->bf16_enabled));
  put(bf16, "bf16_master_weights_and_grads", json_boolean(s->bf16_master_weights_and_grads));
  put(bf16, "bf16_optimizer_states", json_boolean(s->bf16_optimizer_states));
  put(root, "bf16", bf16);

  json_t *opt = json_object(), *params = json_object(), *betas = json_array();
  zinc_optim_type t = s->optimizer;
  int adam = t == ZINC_OPTIM_ADAM || t == ZINC_OPTIM_ADAMW;
  int onebit = t == ZINC_OPTIM_ONEBIT_ADAM, onebit_lamb = t == ZINC_OPTIM_ONEBIT_LAMB;
  put(opt, "type", json_string(zinc_optim_type_name(t)));
  put(params, "lr", real_or_auto(s, ZINC_AUTO_LR, s->lr));
  uint32_t both = ZINC_AUTO_BIT(ZINC_AUTO_BETA1) | ZINC_AUTO_BIT(ZINC_AUTO_BETA2);
  if ((s->auto_mask & both) == both) {
    json_decref(betas);
    betas = json_string("auto");
  } else { /* one filled, the other "auto": zinc's own form, it loads back */
    json_array_append_new(betas, real_or_auto(s, ZINC_AUTO_BETA1, s->beta1));
    json_array_append_new(betas, real_or_auto(s, ZINC_AUTO_BETA2, s->beta2));
  }
  if (adam || onebit || onebit_lamb || t == ZINC_OPTIM_LAMB || t == ZINC_OPTIM_LION ||
      t == ZINC_OPTIM_ZERO_ONE_ADAM)
    put(params, "betas", betas);
  else
    json_decref(betas);
  if (t != ZINC_OPTIM_LION && t != ZINC_OPTIM_SGD)
    put(params, "eps", real_or_auto(s, ZINC_AUTO_EPS, s->eps));
  put(params, "weight_decay", real_or_auto(s, ZINC_AUTO_WEIGHT_DECAY, s->weight_decay));
  if (adam)
    put(params, "adam_w_mode", json_boolean(s->adam_w_mode));
  if (adam || t == ZINC_OPTIM_LAMB || onebit_lamb)
    put(params, "bias_correction", json_boolean(s->bias_correction));
  if (t == ZINC_OPTIM_LAMB || onebit_lamb) {
    put(params, "max_coeff", json_real(s->max_coeff));
    put(params, "min_coeff", json_real(s->min_coeff));
  }
  if (t == ZINC_OPTIM_LAMB)
    put(params, "max_grad_norm", json_real(s->lamb_max_grad_norm));
  if (onebit_lamb) { /* (the ranks' settings are compared in this form too) */
    put(params, "freeze_step", json_integer(s->freeze_step));
    put(params, "coeff_beta", json_real(s->coeff_beta));
    put(params, "factor_max", json_real(s->factor_max));
    put(params, "factor_min", json_real(s->factor_min));
    put(params, "factor_threshold", json_real(s->factor_threshold));
  }
  if (t == ZINC_OPTIM_ZERO_ONE_ADAM) {
    put(params, "var_freeze_step", json_integer(s->var_freeze_step));
    put(params, "var_update_scaler", json_integer(s->var_update_scaler));
    put(params, "local_step_scaler", json_integer(s->local_step_scaler));
    put(params, "local_step_clipper", json_integer(s->local_step_clipper));
  }
  if (onebit)
    put(params, "freeze_step", json_integer(s->onebit_freeze_step));
  if (t == ZINC_OPTIM_SGD) {
    put(params, "momentum", json_real(s->momentum));
    put(params, "dampening", json_real(s->dampening));
    put(params, "nesterov", json_boolean(s->nesterov));
  }
  put(opt, "params", params);
  put(root, "optimizer", opt);

  if (s->scheduler != ZINC_SCHED_NONE)
    put(root, "scheduler", scheduler_json(s));
  put(root, "zero_optimization", zero_json(s));

  json_t *aio = json_object();
  put(aio, "block_size", json_integer(s->aio_block_size));
  put(aio, "queue_depth", json_integer(s->aio_queue_depth));
  put(aio, "intra_op_parallelism", json_integer(s->aio_intra_op_parallelism));
  put(aio, "single_submit", json_boolean(s->aio_single_submit));
  put(aio, "overlap_events", json_boolean(s->aio_overlap_events));
  put(aio, "use_gds", json_boolean(s->aio_use_gds));
  put(aio, "allow_buffered_io", json_boolean(s->aio_allow_buffered_io));
  put(aio, "swap_checksums", json_boolean(s->aio_swap_checksums));
  put(root, "aio", aio);

  json_t *ac = json_object();
  put(ac, "partition_activations", json_boolean(s->ac_partition_activations));
  put(ac, "cpu_checkpointing", json_boolean(s->ac_cpu_checkpointing));
  put(ac, "contiguous_memory_optimization", json_boolean(s->ac_contiguous_memory_optimization));
  put(ac, "number_checkpoints",
      s->ac_number_checkpoints ? json_integer(s->ac_number_checkpoints) : json_null());
  put(ac, "synchronize_checkpoint_boundary",
      json_boolean(s->ac_synchronize_checkpoint_boundary));
  put(ac, "profile", json_boolean(s->ac_profile));
  put(root, "activation_checkpointing", ac);

  const zinc_monitor_settings *mons[] = {&s->csv_monitor, &s->tensorboard};
  const char *mon_names[] = {"csv_monitor", "tensorboard"};
  for (int i = 0; i < 2; i++) {
    json_t *mo = json_object();
    put(mo, "enabled", json_boolean(mons[i]->enabled));
    put(mo, "output_path", json_string(mons[i]->output_path));
    put(mo, "job_name", json_string(mons[i]->job_name));
    put(root, mon_names[i], mo);
  }

  json_t *cl = json_object();
  put(cl, "enabled", json_boolean(s->comms_logger.enabled));
  put(cl, "verbose", json_boolean(s->comms_logger.verbose));
  put(cl, "prof_all", json_boolean(s->comms_logger.prof_all));
  put(cl, "debug", json_boolean(s->comms_logger.debug));
  json_t *ops = json_array();
  static const char *const op_names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                         "all_gatherv", "broadcast", "barrier",
                                         "all_to_all_single"};
  _Static_assert(sizeof op_names / sizeof op_names[0] == ZINC_COMMS_NOPS,
                 "a prof_ops name per zinc_comms_op");
  for (int k = 0; k < ZINC_COMMS_NOPS; k++)
    if (s->comms_logger.prof_ops & (1u << k))
      json_array_append_new(ops, json_string(op_names[k]));
  put(cl, "prof_ops", ops);
  put(root, "comms_logger", cl);

  if (s->pipeline_stages > 0) { /* "auto" and absent read back the same */
    json_t *pipe = json_object();
    put(pipe, "stages", json_integer(s->pipeline_stages));
    put(root, "pipeline", pipe);
  }

  static const char *const levels[] = {"error", "warn", "info", "debug"};
  json_t *z = json_object();
  put(z, "log_level", s->log_level >= 0 && s->log_level <= 3 ? json_string(levels[s->log_level])
                                                             : json_null());
  put(z, "comm_timeout_s", json_real(s->comm_timeout_s));
  put(z, "memory_timeline", s->memory_timeline ? json_string(s->memory_timeline) : json_null());
  put(z, "placement_verbose", json_boolean(s->placement_verbose));
  put(z, "max_consecutive_skips", json_integer(s->max_consecutive_skips));
  put(z, "checkpoint_timeout_s", json_real(s->checkpoint_timeout_s));
  put(z, "bf16_rounding", json_string(s->bf16_rounding ? "stochastic" : "nearest"));
  put(z, "bf16_rounding_seed", json_integer(s->bf16_rounding_seed));
  json_t *cz = json_object();
  put(cz, "gradient_bits", json_integer(s->compress_gradient_bits));
  static const char *const grad_codecs[] = {"quant", "terngrad", "dgc", "powersgd"};
  put(cz, "gradient_codec", json_string(grad_codecs[s->compress_gradient_codec]));
  put(cz, "weight_bits", json_integer(s->compress_weight_bits));
  put(cz, "block_size", json_integer(s->compress_block_size));
  put(cz, "scope", json_string(s->compress_scope == ZINC_COMPRESS_ALL ? "all" : "inter_node"));
  json_t *dgc = json_object();
  put(dgc, "density", json_real(s->dgc_density));
  put(dgc, "warmup_steps", json_integer(s->dgc_warmup_steps));
  put(dgc, "residual", json_boolean(s->dgc_residual));
  put(dgc, "momentum_correction", json_boolean(s->dgc_momentum_correction));
  put(dgc, "local_clipping", json_boolean(s->dgc_local_clipping));
  put(cz, "dgc", dgc);
  json_t *dga = json_object();
  put(dga, "delay", json_integer(s->dga_delay));
  put(cz, "delayed_averaging", dga);
  json_t *psgd = json_object();
  put(psgd, "matrix_approximation_rank", json_integer(s->psgd_rank));
  put(psgd, "start_powerSGD_iter", json_integer(s->psgd_start_iter));
  put(psgd, "min_compression_rate", json_real(s->psgd_min_compression_rate));
  put(psgd, "use_error_feedback", json_boolean(s->psgd_error_feedback));
  put(psgd, "warm_start", json_boolean(s->psgd_warm_start));
  put(psgd, "orthogonalization_epsilon", json_real(s->psgd_orth_epsilon));
  put(psgd, "random_seed", json_integer(s->psgd_random_seed));
  put(psgd, "compression_stats_logging_frequency", json_integer(s->psgd_stats_frequency));
  put(psgd, "batch_tensors_with_same_shape", json_boolean(s->psgd_batch_same_shape));
  put(cz, "powersgd", psgd);
  put(z, "compression", cz);
  put(root, "zinc", z);
  return root;
}

char *zinc_settings_to_json(const zinc_settings *s) {
  json_t *root = settings_json(s);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  json_decref(root);
  return text;
}

/* ------------------------------------------------------------ comparison */

/* Leaves that may differ between ranks: node-local paths and logging. */
static int rank_local(const char *path) {
  static const char *const local[] = {
      "zero_optimization.offload_optimizer.nvme_path", "zero_optimization.offload_param.nvme_path",
      "zinc.log_level", "zinc.memory_timeline", "zinc.placement_verbose",
      "csv_monitor.output_path", "tensorboard.output_path"};
  for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
    if (!strcmp(path, local[i]))
      return 1;
  return 0;
}

/* Depth-first over a's members, then b's members that a lacks. */
static int first_difference(const json_t *a, const json_t *b, char *path, size_t len,
                            size_t cap, char *va, char *vb, size_t vcap) {
  if (json_is_object(a) && json_is_object(b)) {
    for (int pass = 0; pass < 2; pass++) {
      const json_t *x = pass ? b : a, *y = pass ? a : b;
      const char *key;
      json_t *child;
      json_object_foreach((json_t *)x, key, child) {
        const json_t *other = json_object_get(y, key);
        if (pass && other)
          continue; /* both have it: the first pass compared it */
        int n = snprintf(path + len, cap - len, "%s%s", len ? "." : "", key);
        size_t sub = n > 0 && (size_t)n < cap - len ? len + (size_t)n : cap - 1;
        int found = other ? first_difference(pass ? other : child, pass ? child : other, path,
                                             sub, cap, va, vb, vcap)
                          : !rank_local(path);
        if (found && !other) {
          snprintf(pass ? va : vb, vcap, "absent");
          zinc_cfg_render(child, pass ? vb : va, vcap);
        }
        if (found)
          return 1;
        path[len] = '\0';
      }
    }
    return 0;
  }
  if (json_equal((json_t *)a, (json_t *)b) || rank_local(path))
    return 0;
  zinc_cfg_render(a, va, vcap);
  zinc_cfg_render(b, vb, vcap);
  return 1;
}

int zinc_settings_json_diff(const char *a, const char *b, char *path, size_t cap, char *va,
                            char *vb, size_t vcap) {
  path[0] = va[0] = vb[0] = '\0';
  json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, 0, NULL);
  int found = ja && jb ? first_difference(ja, jb, path, 0, cap, va, vb, vcap)
                       : strcmp(a, b) != 0;
  json_decref(ja);
  json_decref(jb);
  return found;
}

zinc_status zinc_config_to_json(const zinc_config *cfg, char **json_out) {
  if (!cfg || !json_out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_to_json: %s is NULL",
                      cfg ? "json_out" : "cfg");
  *json_out = zinc_settings_to_json(&cfg->s);
  if (!*json_out)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing config %s as JSON", cfg->source);
  return ZINC_OK;
}

/* ------------------------------------------------------------------ listing */

/* One line per leaf: "  zero_optimization.stage ............ 3". */
static void print_leaves(const json_t *v, char *path, size_t len, size_t cap) {
  if (json_is_object(v)) {
    const char *key;
    json_t *child;
    json_object_foreach((json_t *)v, key, child) {
      int n = snprintf(path + len, cap - len, "%s%s", len ? "." : "", key);
      size_t sub = n > 0 && (size_t)n < cap - len ? len + (size_t)n : cap - 1;
      print_leaves(child, path, sub, cap);
      path[len] = '\0';
    }
    return;
  }
  char value[160];
  zinc_cfg_render(v, value, sizeof value);
  int width = (int)len < 50 ? 50 - (int)len : 1;
  zinc_log0(ZINC_LOG_INFO, "  %s %.*s %s", path, width,
            "..................................................", value);
}

void zinc_config_print(const zinc_config *cfg) {
  if (!cfg || !zinc_log_enabled(ZINC_LOG_INFO))
    return;
  json_t *root = settings_json(&cfg->s);
  zinc_log0(ZINC_LOG_INFO, "zinc config (%s, %d warning%s):", cfg->source, cfg->warnings,
            cfg->warnings == 1 ? "" : "s");
  char path[ZINC_CFG_PATH_MAX] = "";
  print_leaves(root, path, 0, sizeof path);
  json_decref(root);
}
