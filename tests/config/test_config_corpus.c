/*
 * test_config_corpus.c — every file of tests/config/valid loads, with the
 * values and warning count its entry asserts; every file of
 * tests/config/invalid fails with ZINC_ERR_CONFIG and a message naming the
 * JSON path and the value found. Both tables must cover their folder
 * exactly, so that a file added without an assertion fails the test.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "config_test_util.h"

/* ------------------------------------------------------------ valid files */

typedef void (*check_fn)(const zinc_settings *s);

#define BIT(k) ZINC_AUTO_BIT(ZINC_AUTO_##k)
/* HF's optimizer and WarmupLR/WarmupDecayLR params, all "auto" */
#define HF_OPTIM_SCHED_AUTO                                                              \
  (BIT(LR) | BIT(BETA1) | BIT(BETA2) | BIT(EPS) | BIT(WEIGHT_DECAY) | BIT(WARMUP_MIN_LR) | \
   BIT(WARMUP_MAX_LR) | BIT(WARMUP_NUM_STEPS))
#define ZERO3_SIZES_AUTO \
  (BIT(REDUCE_BUCKET_SIZE) | BIT(PREFETCH_BUCKET_SIZE) | BIT(PARAM_PERSISTENCE_THRESHOLD))
#define PRECISION_AUTO (BIT(FP16_ENABLED) | BIT(BF16_ENABLED))

static void hf_zero3_auto(const zinc_settings *s) {
  assert_int_equal(s->stage, 3);
  assert_int_equal(s->fp16_enabled, ZINC_AUTO);
  assert_int_equal(s->bf16_enabled, ZINC_AUTO);
  assert_int_equal(s->train_batch_size, ZINC_AUTO);
  assert_int_equal(s->train_micro_batch_size_per_gpu, ZINC_AUTO);
  assert_int_equal(s->gradient_accumulation_steps, ZINC_AUTO);
  assert_int_equal(s->batch_given_mask, 070); /* all three "auto" */
  /* "auto" is kept (the trainer fills it, or the engine resolves it) */
  assert_true(isnan(s->gradient_clipping));
  assert_int_equal(s->optimizer, ZINC_OPTIM_ADAMW);
  assert_true(isnan(s->lr) && isnan(s->beta1) && isnan(s->beta2) && isnan(s->eps));
  assert_true(isnan(s->weight_decay));
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_LR);
  assert_true(isnan(s->warmup_min_lr) && isnan(s->warmup_max_lr));
  assert_int_equal(s->warmup_num_steps, ZINC_AUTO);
  assert_int_equal(s->auto_mask, HF_OPTIM_SCHED_AUTO | ZINC_AUTO_BIT(ZINC_AUTO_GRADIENT_CLIPPING) |
                                     ZINC_AUTO_BIT(ZINC_AUTO_FP16_ENABLED) |
                                     ZINC_AUTO_BIT(ZINC_AUTO_BF16_ENABLED) | ZERO3_SIZES_AUTO);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->offload_optimizer.pin_memory, 1);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->sub_group_size, 1000000000);
  assert_int_equal(s->reduce_bucket_size, ZINC_AUTO);
  assert_int_equal(s->stage3_prefetch_bucket_size, ZINC_AUTO);
  assert_int_equal(s->stage3_param_persistence_threshold, ZINC_AUTO);
  assert_int_equal(s->stage3_max_live_parameters, 1000000000);
  assert_int_equal(s->stage3_gather_16bit_weights_on_model_save, 1);
  assert_int_equal(s->steps_per_print, 2000);
  assert_int_equal(s->fp16_initial_scale_power, 16);
}

static void hf_zero2_auto(const zinc_settings *s) {
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->fp16_enabled, ZINC_AUTO);
  assert_int_equal(s->bf16_enabled, 0);
  assert_int_equal(s->allgather_bucket_size, 200000000);
  assert_int_equal(s->reduce_bucket_size, ZINC_AUTO);
  assert_int_equal(s->overlap_comm, 1);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_NONE);
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_DECAY);
  assert_int_equal(s->total_num_steps, 20000);
}

static void hf_zero3_bf16_nvme(const zinc_settings *s) {
  assert_int_equal(s->bf16_enabled, 1);
  assert_int_equal(s->fp16_enabled, 0);
  assert_true(s->lr == 2e-5 && s->weight_decay == 0.01);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NVME);
  assert_int_equal(s->offload_optimizer.nvme_path_count, 1);
  assert_string_equal(s->offload_optimizer.nvme_paths[0], "/local_nvme");
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_NVME);
  assert_int_equal(s->offload_param.buffer_count, 5);
  assert_int_equal(s->offload_param.buffer_size, 100000000);
  assert_int_equal(s->offload_param.max_in_cpu, 1000000000);
  assert_int_equal(s->aio_intra_op_parallelism, 1); /* thread_count */
  assert_int_equal(s->gradient_accumulation_steps, 4);
  assert_int_equal(s->train_micro_batch_size_per_gpu, 2);
  assert_int_equal(s->batch_given_mask, 006 | 010);
}

static void hf_zero3_warmup_decay_auto(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_DECAY);
  assert_int_equal(s->total_num_steps, ZINC_AUTO); /* DeepSpeed rejects it; HF fills it */
  assert_int_equal(s->auto_mask, HF_OPTIM_SCHED_AUTO | BIT(TOTAL_NUM_STEPS) |
                                     BIT(GRADIENT_CLIPPING) | PRECISION_AUTO | ZERO3_SIZES_AUTO);
  assert_int_equal(s->offload_optimizer.pin_memory, 1);
  assert_int_equal(s->batch_given_mask, 070);
}

static void hf_zero2_warmup_decay_auto(const zinc_settings *s) {
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->reduce_bucket_size, 200000000);
  assert_int_equal(s->auto_mask, HF_OPTIM_SCHED_AUTO | BIT(TOTAL_NUM_STEPS) |
                                     BIT(GRADIENT_CLIPPING) | PRECISION_AUTO);
}

static void accelerate_zero3_offload_template(const zinc_settings *s) {
  assert_int_equal(s->fp16_enabled, 1);
  assert_int_equal(s->gradient_accumulation_steps, 1);
  assert_int_equal(s->batch_given_mask, 004 | 030);
  assert_true(s->beta1 == 0.9 && s->beta2 == 0.999 && s->eps == 1e-8); /* not in the file */
  assert_int_equal(s->stage3_gather_16bit_weights_on_model_save, ZINC_AUTO);
  assert_int_equal(s->auto_mask, BIT(LR) | BIT(WEIGHT_DECAY) | BIT(WARMUP_MIN_LR) |
                                     BIT(WARMUP_MAX_LR) | BIT(WARMUP_NUM_STEPS) |
                                     BIT(TOTAL_NUM_STEPS) | BIT(GRADIENT_CLIPPING) |
                                     ZERO3_SIZES_AUTO | BIT(GATHER_16BIT_WEIGHTS));
}

static void lora_zero3_offload_no_optimizer(const zinc_settings *s) {
  assert_int_equal(s->zero_allow_untested_optimizer, 1);
  assert_int_equal(s->overlap_comm, 0);
  assert_true(s->lr == 1e-3); /* DeepSpeed's default until the trainer gives its own */
  assert_int_equal(s->auto_mask, BIT(GRADIENT_CLIPPING) | PRECISION_AUTO | ZERO3_SIZES_AUTO);
}

static void every_key_auto(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_COSINE);
  assert_int_equal(s->auto_mask, (1u << ZINC_AUTO_KEY_COUNT) - 1 - BIT(WARMUP_MIN_LR) -
                                     BIT(WARMUP_MAX_LR)); /* not WarmupCosineLR keys */
  assert_int_equal(s->offload_optimizer.buffer_count, ZINC_AUTO);
  assert_int_equal(s->offload_param.pin_memory, ZINC_AUTO);
  assert_int_equal(s->stage3_max_live_parameters, ZINC_AUTO);
  assert_int_equal(s->stage3_max_reuse_distance, ZINC_AUTO);
}

static void total_steps_auto(const zinc_settings *s) {
  assert_int_equal(s->total_num_steps, ZINC_AUTO);
  assert_int_equal(s->auto_mask, BIT(WARMUP_MIN_LR) | BIT(WARMUP_MAX_LR) |
                                     BIT(WARMUP_NUM_STEPS) | BIT(TOTAL_NUM_STEPS));
}

static void megatron_ds_gpt_fp16(const zinc_settings *s) {
  assert_int_equal(s->train_batch_size, 256);
  assert_int_equal(s->train_micro_batch_size_per_gpu, 4);
  assert_int_equal(s->gradient_accumulation_steps, ZINC_AUTO);
  assert_int_equal(s->batch_given_mask, 003);
  assert_int_equal(s->stage, 1);
  assert_int_equal(s->overlap_comm, 0);
  assert_int_equal(s->fp16_enabled, 1);
  assert_int_equal(s->fp16_loss_scale_window, 500);
  assert_int_equal(s->fp16_initial_scale_power, 11);
  assert_true(s->fp16_loss_scale == 0.0 && s->fp16_min_loss_scale == 1.0);
  assert_true(s->gradient_clipping == 1.0);
}

static void megatron_ds_bf16_stage1(const zinc_settings *s) {
  assert_int_equal(s->bf16_enabled, 1);
  assert_int_equal(s->train_batch_size, 512);
  assert_int_equal(s->steps_per_print, 1);
}

static void zero_infinity_nvme(const zinc_settings *s) {
  assert_int_equal(s->stage, 3);
  assert_int_equal(s->overlap_comm, 1); /* stage 3 default */
  assert_int_equal(s->sub_group_size, 100000000);
  assert_int_equal(s->stage3_prefetch_bucket_size, 50000000);
  assert_int_equal(s->stage3_param_persistence_threshold, 10000);
  assert_string_equal(s->offload_param.nvme_paths[0], "/mnt/nvme0/zero_infinity");
  assert_int_equal(s->offload_param.buffer_count, 6);
  assert_int_equal(s->offload_param.buffer_size, 200000000);
  assert_int_equal(s->offload_param.max_in_cpu, 2000000000);
  assert_int_equal(s->offload_optimizer.pipeline_read, 1);
  assert_int_equal(s->offload_optimizer.pipeline_write, 1);
  assert_int_equal(s->offload_optimizer.fast_init, 1);
  assert_int_equal(s->aio_block_size, 262144);
  assert_int_equal(s->aio_queue_depth, 32);
  assert_int_equal(s->aio_intra_op_parallelism, 2);
  assert_int_equal(s->optimizer, ZINC_OPTIM_ADAM);
  assert_int_equal(s->adam_w_mode, 1);
  assert_true(s->beta2 == 0.95 && s->weight_decay == 0.1 && s->lr == 3e-4);
}

static void zero_infinity_striped_nvme(const zinc_settings *s) {
  assert_int_equal(s->offload_optimizer.nvme_path_count, 4);
  assert_string_equal(s->offload_optimizer.nvme_paths[3], "/mnt/nvme3/zinc");
  assert_null(s->offload_optimizer.nvme_paths[4]);
  /* 0.3 in the file: read as 1 with device nvme (partial offload needs cpu) */
  assert_true(s->offload_optimizer.ratio == 1.0);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->offload_param.max_in_cpu, 0); /* zinc's default (DeepSpeed: 1e9) */
  assert_int_equal(s->aio_queue_depth, 64);
  assert_int_equal(s->aio_intra_op_parallelism, 8);
  assert_int_equal(s->aio_single_submit, 1);
  assert_int_equal(s->aio_allow_buffered_io, 1);
  assert_int_equal(s->aio_swap_checksums, 1);
  assert_int_equal(s->batch_given_mask, 007);
}

static void bloom_style_fp16(const zinc_settings *s) {
  assert_int_equal(s->stage, 0);
  assert_int_equal(s->train_batch_size, 2048);
  assert_int_equal(s->train_micro_batch_size_per_gpu, 2);
  assert_int_equal(s->fp16_initial_scale_power, 12);
  assert_int_equal(s->fp16_hysteresis, 2);
  assert_int_equal(s->steps_per_print, 2000);
}

static void opt_style_fp16_static(const zinc_settings *s) {
  assert_true(s->fp16_loss_scale == 128.0);
  assert_int_equal(s->fp16_initial_scale_power, 32);
  assert_int_equal(s->fp16_consecutive_hysteresis, 1);
  assert_int_equal(s->optimizer, ZINC_OPTIM_ADAM);
  assert_int_equal(s->adam_w_mode, 0); /* explicit false keeps L2 Adam */
  assert_true(s->lr == 1.2e-4);
  assert_int_equal(s->overlap_comm, 0);
  assert_int_equal(s->contiguous_gradients, 0);
  assert_int_equal(s->reduce_bucket_size, 500000000);
}

static void minimal_micro_batch(const zinc_settings *s) {
  assert_int_equal(s->train_micro_batch_size_per_gpu, 1);
  assert_int_equal(s->batch_given_mask, 002);
  assert_int_equal(s->stage, 0);
}

static void minimal_train_batch(const zinc_settings *s) {
  assert_int_equal(s->train_batch_size, 8);
  assert_int_equal(s->batch_given_mask, 001);
}

static void empty_object(const zinc_settings *s) {
  zinc_settings d;
  zinc_settings_defaults(&d);
  assert_true(settings_same(s, &d));
}

static void deepspeed_cifar_tutorial(const zinc_settings *s) {
  assert_int_equal(s->train_batch_size, 16);
  assert_true(s->beta1 == 0.8 && s->weight_decay == 3e-7);
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_LR);
  assert_true(s->warmup_max_lr == 0.001);
  assert_int_equal(s->warmup_num_steps, 1000);
  assert_int_equal(s->fp16_initial_scale_power, 15);
  assert_int_equal(s->allgather_bucket_size, 50000000);
  assert_int_equal(s->reduce_bucket_size, 50000000);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NONE); /* cpu_offload false */
}

static void bert_warmup_decay(const zinc_settings *s) {
  assert_int_equal(s->bias_correction, 0);
  assert_true(s->gradient_predivide_factor == 8.0);
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_DECAY);
  assert_int_equal(s->total_num_steps, 7038);
  assert_int_equal(s->warmup_num_steps, 704);
  assert_int_equal(s->warmup_type, ZINC_WARMUP_LINEAR);
  assert_int_equal(s->reduce_bucket_size, 200000000);
}

static void llama_warmup_cosine_bf16(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_COSINE);
  assert_int_equal(s->total_num_steps, 10000);
  assert_int_equal(s->warmup_num_steps, 2000);
  assert_true(s->warmup_min_ratio == 0.01 && s->cos_min_ratio == 0.1);
  assert_int_equal(s->warmup_type, ZINC_WARMUP_LINEAR);
  assert_true(s->eps == 1e-5);
  assert_int_equal(s->stage3_max_live_parameters, 3000000000LL);
  assert_int_equal(s->stage3_prefetch_bucket_size, 200000000);
  assert_int_equal(s->stage3_param_persistence_threshold, 1000000);
  assert_int_equal(s->gradient_accumulation_steps, 8);
}

static void monitoring_sections(const zinc_settings *s) {
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->wall_clock_breakdown, 0); /* flops_profiler is ignored */
  assert_int_equal(s->csv_monitor.enabled, 1);
  assert_string_equal(s->csv_monitor.output_path, "output/ds_logs/");
  assert_string_equal(s->csv_monitor.job_name, "train_bert");
  assert_int_equal(s->tensorboard.enabled, 1);
  assert_string_equal(s->tensorboard.job_name, "train_bert");
}

static void zinc_section(const zinc_settings *s) {
  assert_int_equal(s->log_level, ZINC_LOG_WARN);
  assert_true(s->comm_timeout_s == 120.0);
  assert_string_equal(s->memory_timeline, "memory_timeline.json");
  assert_int_equal(s->placement_verbose, 1);
  assert_int_equal(s->max_consecutive_skips, 200);
  assert_int_equal(s->aio_allow_buffered_io, 1);
  assert_int_equal(s->aio_swap_checksums, 0);
  assert_string_equal(s->offload_optimizer.nvme_paths[0], "/scratch/zinc");
}

static void older_spellings(const zinc_settings *s) {
  assert_int_equal(s->bf16_enabled, 1);
  assert_int_equal(s->stage3_prefetch_bucket_size, 10000000);
  assert_int_equal(s->stage3_param_persistence_threshold, 50000);
  assert_int_equal(s->stage3_max_live_parameters, 200000000);
  assert_int_equal(s->stage3_max_reuse_distance, 300000000);
  assert_int_equal(s->stage3_gather_16bit_weights_on_model_save, 1);
  assert_int_equal(s->aio_intra_op_parallelism, 4);
  assert_int_equal(s->aio_queue_depth, 16);
}

static void deprecated_cpu_offload(const zinc_settings *s) {
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->fp16_enabled, 1);
}

static void activation_checkpointing(const zinc_settings *s) {
  assert_int_equal(s->ac_partition_activations, 1);
  assert_int_equal(s->ac_cpu_checkpointing, 1);
  assert_int_equal(s->ac_contiguous_memory_optimization, 1);
  assert_int_equal(s->ac_number_checkpoints, 24);
  assert_int_equal(s->ac_synchronize_checkpoint_boundary, 0);
  assert_int_equal(s->ac_profile, 1);
}

static void accelerate_generated(const zinc_settings *s) {
  assert_int_equal(s->batch_given_mask, 004 | 030);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NONE);
  assert_int_equal(s->offload_optimizer.nvme_path_count, 0);
  assert_int_equal(s->steps_per_print, 2147483647);
  assert_int_equal(s->zero_allow_untested_optimizer, 1);
}

static void integers_as_reals(const zinc_settings *s) {
  assert_int_equal(s->train_batch_size, 32);
  assert_int_equal(s->reduce_bucket_size, 500000000);
  assert_int_equal(s->allgather_bucket_size, 200000000);
  assert_int_equal(s->sub_group_size, 1000000000);
  assert_int_equal(s->stage3_max_reuse_distance, 1000000000);
  assert_int_equal(s->aio_block_size, 1048576);
  assert_int_equal(s->steps_per_print, 1000);
}

static void inert_deepspeed_keys(const zinc_settings *s) {
  assert_int_equal(s->round_robin_gradients, 1);
  assert_int_equal(s->communication_data_type, ZINC_F32); /* read, no longer inert */
  assert_int_equal(s->stage, 2);
}

/* ZeRO++ as DeepSpeed's tutorial writes it, with LoCo and zinc's codecs */
static void zeropp_compressed(const zinc_settings *s) {
  assert_int_equal(s->communication_data_type, ZINC_F16);
  assert_int_equal(s->zero_quantized_weights, 1);
  assert_int_equal(s->zero_quantized_gradients, 1);
  assert_int_equal(s->loco_enabled, 1);
  assert_true(s->loco_err_beta == 0.9);
  assert_int_equal(s->loco_reset_T, 512);
  assert_int_equal(s->compress_gradient_bits, 8);
  assert_int_equal(s->compress_weight_bits, 4);
  assert_int_equal(s->compress_block_size, 128);
  assert_int_equal(s->compress_scope, ZINC_COMPRESS_ALL);
}

static void gpt_neox_style(const zinc_settings *s) {
  assert_int_equal(s->fp16_enabled, 1);
  assert_int_equal(s->wall_clock_breakdown, 1);
  assert_true(s->lr == 0.0006 && s->beta2 == 0.95);
  assert_int_equal(s->reduce_scatter, 1);
}

static void gradient_clipping_negative(const zinc_settings *s) {
  assert_true(s->gradient_clipping == 0.0); /* DeepSpeed clips only when > 0 */
}

static void min_loss_scale_zero(const zinc_settings *s) {
  assert_int_equal(s->fp16_enabled, 1);
  assert_true(s->fp16_min_loss_scale == 0.0);
}

static void steps_per_print_zero(const zinc_settings *s) {
  assert_int_equal(s->steps_per_print, 0);
}

static void steps_per_print_huge(const zinc_settings *s) {
  assert_int_equal(s->steps_per_print, 20000000000000000LL);
}

static void zero_sizes_zero(const zinc_settings *s) {
  assert_int_equal(s->stage, 3);
  assert_int_equal(s->reduce_bucket_size, 0);
  assert_int_equal(s->allgather_bucket_size, 0);
  assert_int_equal(s->sub_group_size, 0);
  assert_int_equal(s->stage3_prefetch_bucket_size, 0);
  assert_int_equal(s->stage3_param_persistence_threshold, 0);
  assert_int_equal(s->stage3_max_live_parameters, 0);
  assert_int_equal(s->stage3_max_reuse_distance, 0);
}

static void offload_param_below_stage3(const zinc_settings *s) {
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_NONE); /* ignored, as DeepSpeed */
}

static void offload_optimizer_at_stage0(const zinc_settings *s) {
  assert_int_equal(s->stage, 0);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NONE);
}

static void deprecated_cpu_offload_param_stage2(const zinc_settings *s) {
  assert_int_equal(s->stage, 2);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_CPU);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_NONE);
}

static void zero_optimization_false(const zinc_settings *s) {
  assert_int_equal(s->stage, 0);
  assert_int_equal(s->train_batch_size, 16);
}

static void initial_scale_power_100(const zinc_settings *s) {
  assert_true(s->fp16_initial_scale_power == 100.0);
  assert_true(s->fp16_min_loss_scale == 0.25);
}

static void initial_scale_power_beyond_fp32(const zinc_settings *s) {
  assert_true(s->fp16_initial_scale_power == 127.0); /* clamped: 2^200 is no fp32 */
}

static void initial_scale_power_negative(const zinc_settings *s) {
  assert_true(s->fp16_initial_scale_power == -3.0);
}

static void initial_scale_power_fraction(const zinc_settings *s) {
  assert_true(s->fp16_initial_scale_power == 16.5);
}

static void partial_offload_stage2(const zinc_settings *s) {
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_CPU);
  assert_true(s->offload_optimizer.ratio == 0.5); /* half the sub-groups stay on the device */
}

static void scheduler_onecycle(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_ONE_CYCLE);
  assert_true(s->cycle_min_lr == 1e-4 && s->cycle_max_lr == 1e-3);
  assert_true(s->decay_lr_rate == 0.001 && s->decay_step_size == 1000);
  assert_true(s->cycle_first_step_size == 1000 && s->cycle_second_step_size == 1500);
  assert_int_equal(s->cycle_first_stair_count, 0);
  assert_int_equal(s->cycle_second_stair_count, 0);
  assert_int_equal(s->cycle_momentum, 1);
  assert_true(s->cycle_min_mom == 0.85 && s->cycle_max_mom == 0.99 && s->decay_mom_rate == 0);
}

static void scheduler_lr_range_test(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_LR_RANGE_TEST);
  assert_true(s->lr_range_test_min_lr == 1e-5 && s->lr_range_test_step_size == 200);
  assert_true(s->lr_range_test_step_rate == 5);
  assert_int_equal(s->lr_range_test_staircase, 1);
}

/* Files DeepSpeed's config accepts and its engine refuses when it
 * constructs the schedule: they load, and zinc_settings_check_scheduler
 * (run by zinc_engine_create) refuses them naming the key. */
static void decay_without_total(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_DECAY);
  assert_int_equal(s->total_num_steps, 0);
}

static void cosine_without_params(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_WARMUP_COSINE);
  assert_int_equal(s->total_num_steps, 0);
}

static void scheduler_onecycle_without_max_lr(const zinc_settings *s) {
  assert_int_equal(s->scheduler, ZINC_SCHED_ONE_CYCLE);
  assert_true(s->cycle_min_lr == 1e-4 && isnan(s->cycle_max_lr));
  /* a heap-held setting beside a scheduler that fails only at create: the
   * fuzz target once leaked it on that path (this file is one of its seeds) */
  assert_int_equal(s->offload_optimizer.nvme_path_count, 1);
  assert_string_equal(s->offload_optimizer.nvme_paths[0], "/local_nvme");
}

static void optimizer_lamb(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_LAMB);
  assert_true(s->lr == 0.011 && s->max_coeff == 0.3 && s->min_coeff == 0.01);
  assert_true(s->beta1 == 0.9 && s->beta2 == 0.999 && s->eps == 1e-8 && s->bias_correction);
}

/* DeepSpeed's 1-bit LAMB tutorial keys, every one away from its default
 * (test_config_roundtrip writes and reads them back: the ranks' settings
 * are compared in that form). */
static void onebit_lamb_tuned(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_ONEBIT_LAMB);
  assert_true(s->lr == 0.011 && s->beta1 == 0.85 && s->beta2 == 0.995 && s->eps == 1e-6);
  assert_true(s->weight_decay == 0.01 && !s->bias_correction);
  assert_true(s->max_coeff == 0.3 && s->min_coeff == 0.02 && s->coeff_beta == 0.8);
  assert_int_equal(s->freeze_step, 1000);
  assert_true(s->factor_max == 3.0 && s->factor_min == 0.4 && s->factor_threshold == 0.2);
}

/* DeepSpeed asks zero_allow_untested_optimizer for FusedLamb under ZeRO;
 * zinc implements and tests Lamb, so the flag is accepted and not needed. */
static void untested_optimizer_lamb(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_LAMB);
  assert_true(s->lr == 0.002 && s->weight_decay == 0.01 && s->zero_allow_untested_optimizer);
}

/* torch.optim.SGD under ZeRO with the flag DeepSpeed asks for it. */
static void untested_optimizer_sgd(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_SGD);
  assert_true(s->lr == 0.1 && s->momentum == 0.9 && s->dampening == 0.0 && !s->nesterov);
}

static void bucket_size_fraction(const zinc_settings *s) {
  assert_int_equal(s->reduce_bucket_size, 15099494); /* truncated, as pydantic's int() */
  assert_int_equal(s->allgather_bucket_size, 200000000);
  assert_int_equal(s->sub_group_size, 1500);
}

/* an op name DeepSpeed's logger would never match: a warning, and it
 * counts nothing (all_gather alone is counted) */
static void comms_logger_prof_ops_unknown(const zinc_settings *s) {
  assert_int_equal(s->comms_logger.enabled, 1);
  assert_int_equal(s->comms_logger.prof_all, 0);
  assert_int_equal(s->comms_logger.prof_ops, 1u << ZINC_COMMS_ALL_GATHER);
}

/* Lamb's own clipping (DeepSpeed's FusedLamb), kept for the step */
static void lamb_max_grad_norm(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_LAMB);
  assert_true(s->lr == 0.002 && s->lamb_max_grad_norm == 1.0);
  assert_true(s->gradient_clipping == 0.0);
}

static void lamb_max_grad_norm_negative(const zinc_settings *s) {
  assert_true(s->lamb_max_grad_norm == 0.0); /* FusedLamb clips only when > 0 */
}

/* DeepSpeed's BERT pre-training shape: both clips, fp16 */
static void bert_lamb_max_grad_norm_fp16(const zinc_settings *s) {
  assert_int_equal(s->optimizer, ZINC_OPTIM_LAMB);
  assert_true(s->lr == 11e-3 && s->weight_decay == 0.01 && !s->bias_correction);
  assert_true(s->max_coeff == 0.3 && s->min_coeff == 0.01);
  assert_true(s->lamb_max_grad_norm == 1.0 && s->gradient_clipping == 1.0);
  assert_int_equal(s->fp16_enabled, 1);
  assert_int_equal(s->train_batch_size, 4096);
}

/* Megatron-DeepSpeed's BERT shape: Lamb under ZeRO stage 1 */
static void megatron_ds_bert_lamb(const zinc_settings *s) {
  assert_int_equal(s->stage, 1);
  assert_int_equal(s->optimizer, ZINC_OPTIM_LAMB);
  assert_true(s->lamb_max_grad_norm == 2.0 && s->gradient_clipping == 1.0 && s->eps == 1e-6);
  assert_int_equal(s->steps_per_print, 10);
}

/* Accelerate's template with the offload devices, the parameter buffer and
 * steps_per_print left "auto": DeepSpeed's defaults, the trainer's keys
 * still marked */
static void accelerate_offload_auto(const zinc_settings *s) {
  assert_int_equal(s->stage, 3);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NONE);
  assert_int_equal(s->offload_param.device, ZINC_OFFLOAD_NONE);
  assert_int_equal(s->offload_optimizer.pin_memory, 1);
  assert_int_equal(s->offload_param.buffer_size, 100000000);
  assert_int_equal(s->steps_per_print, 10);
  assert_int_equal(s->overlap_comm, 1); /* stage 3's default */
  assert_int_equal(s->sub_group_size, 1000000000);
  assert_int_equal(s->auto_mask, BIT(GRADIENT_CLIPPING) | BIT(BF16_ENABLED) | ZERO3_SIZES_AUTO |
                                     BIT(MAX_LIVE_PARAMETERS) | BIT(MAX_REUSE_DISTANCE) |
                                     BIT(GATHER_16BIT_WEIGHTS));
}

/* Every key DeepSpeed's parser lets "auto" through (its pydantic models
 * drop it, its scalar reads keep it) and no trainer fills: each reads as
 * if the file did not write it, so the settings are exactly those of the
 * file without them. */
static void auto_deepspeed_defaults(const zinc_settings *s) {
  zinc_config *plain = NULL;
  assert_int_equal(zinc_config_parse("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, "
                                     "\"zero_optimization\": {\"stage\": 3}}", &plain), ZINC_OK);
  assert_true(settings_same(s, &plain->s));
  zinc_config_free(plain);
  assert_int_equal(s->steps_per_print, 10);
  assert_int_equal(s->offload_param.buffer_size, 100000000);
  assert_int_equal(s->offload_optimizer.device, ZINC_OFFLOAD_NONE);
  assert_int_equal(s->auto_mask, 0);
}

typedef struct {
  const char *file;
  int warnings;
  check_fn check;
} valid_case;

#define VALID(name, warnings) {#name ".json", warnings, name}
static const valid_case valid_cases[] = {
    VALID(accelerate_generated, 0),
    VALID(accelerate_zero3_offload_template, 0),
    VALID(accelerate_offload_auto, 0),
    VALID(auto_deepspeed_defaults, 0),
    VALID(bert_lamb_max_grad_norm_fp16, 0),
    VALID(activation_checkpointing, 0),
    VALID(bert_warmup_decay, 0),
    VALID(bloom_style_fp16, 0),
    VALID(bucket_size_fraction, 1), /* reduce_bucket_size truncated */
    VALID(comms_logger_prof_ops_unknown, 1), /* "allreduce": did you mean */
    VALID(cosine_without_params, 0),
    VALID(deepspeed_cifar_tutorial, 0),
    VALID(decay_without_total, 0),
    VALID(deprecated_cpu_offload, 1),
    VALID(deprecated_cpu_offload_param_stage2, 3), /* two deprecated, offload_param ignored */
    VALID(empty_object, 0),
    VALID(every_key_auto, 0),
    VALID(gpt_neox_style, 1),     /* fp16.fp16 is not a key */
    VALID(gradient_clipping_negative, 1), /* read as no clipping */
    VALID(hf_zero2_auto, 0),
    VALID(hf_zero3_auto, 0),
    VALID(hf_zero2_warmup_decay_auto, 0),
    VALID(hf_zero3_bf16_nvme, 0),
    VALID(hf_zero3_warmup_decay_auto, 0),
    VALID(inert_deepspeed_keys, 1), /* round_robin_gradients */
    VALID(initial_scale_power_100, 0),
    VALID(initial_scale_power_beyond_fp32, 1), /* clamped to 127 */
    VALID(initial_scale_power_fraction, 0),
    VALID(initial_scale_power_negative, 0),
    VALID(integers_as_reals, 0),
    VALID(lamb_max_grad_norm, 0),
    VALID(lamb_max_grad_norm_negative, 1), /* read as 0 */
    VALID(llama_warmup_cosine_bf16, 0),
    VALID(lora_zero3_offload_no_optimizer, 0),
    VALID(megatron_ds_bf16_stage1, 1), /* data_types */
    VALID(megatron_ds_gpt_fp16, 0),
    VALID(megatron_ds_bert_lamb, 0),
    VALID(minimal_micro_batch, 0),
    VALID(min_loss_scale_zero, 0),
    VALID(minimal_train_batch, 0),
    VALID(monitoring_sections, 2), /* one names the ignored sections, one says
                                      zinc does not write wandb logs */
    VALID(offload_optimizer_at_stage0, 1), /* ignored at stage 0, as DeepSpeed */
    VALID(offload_param_below_stage3, 1),  /* ignored below stage 3, as DeepSpeed */
    VALID(older_spellings, 0),
    VALID(opt_style_fp16_static, 0),
    VALID(total_steps_auto, 0),
    VALID(partial_offload_stage2, 0), /* ratio 0.5: partial offload at stage 2 */
    VALID(optimizer_lamb, 0),
    VALID(onebit_lamb_tuned, 0),
    VALID(untested_optimizer_lamb, 0),
    VALID(untested_optimizer_sgd, 0),
    VALID(scheduler_lr_range_test, 0),
    VALID(scheduler_onecycle, 0),
    VALID(scheduler_onecycle_without_max_lr, 0),
    VALID(steps_per_print_huge, 0),
    VALID(steps_per_print_zero, 1), /* read as never */
    VALID(zero_optimization_false, 1), /* the deprecated form */
    VALID(zero_sizes_zero, 0),
    VALID(zero_infinity_nvme, 0),
    VALID(zero_infinity_striped_nvme, 1), /* ratio 0.3 with device nvme: read as 1 */
    VALID(zinc_section, 0),
    VALID(zeropp_compressed, 0),
};

static const valid_case *find_valid(const char *file) {
  for (size_t i = 0; i < sizeof valid_cases / sizeof valid_cases[0]; i++)
    if (strcmp(valid_cases[i].file, file) == 0)
      return &valid_cases[i];
  return NULL;
}

static void valid_corpus_loads(void **state) {
  (void)state;
  char dir[1024], path[1400];
  corpus_dir("valid", dir, sizeof dir);
  char **names;
  int n = list_json(dir, &names);
  assert_true(n >= 20);
  assert_int_equal(n, (int)(sizeof valid_cases / sizeof valid_cases[0]));
  for (int i = 0; i < n; i++) {
    const valid_case *c = find_valid(names[i]);
    if (!c)
      fail_msg("valid/%s has no entry in valid_cases", names[i]);
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_load(path, &cfg);
    if (st != ZINC_OK)
      fail_msg("valid/%s: %s: %s", names[i], zinc_status_name(st), zinc_last_error());
    if (zinc_config_warning_count(cfg) != c->warnings)
      fail_msg("valid/%s: %d warnings, expected %d", names[i], zinc_config_warning_count(cfg),
               c->warnings);
    c->check(&cfg->s);
    zinc_config_free(cfg);
  }
  free_names(names, n);
}

/* ------------------------------------------------------------ invalid files */

typedef struct {
  const char *file;
  const char *path;  /* the JSON path the message must name */
  const char *value; /* the value (as rendered) it must show */
} invalid_case;

static const invalid_case invalid_cases[] = {
    {"accumulation_negative.json", "gradient_accumulation_steps:", "found -2"},
    {"aio_block_size_unaligned.json", "aio.block_size:", "found 1000"},
    /* documented as valid once, and refused by the I/O engine at build: a
     * swap block is a 4096-byte header and at least a page of data */
    {"aio_block_size_4096.json", "aio.block_size:", "from 8192"},
    {"aio_queue_depth_above_engine.json", "aio.queue_depth:", "found 8192"},
    {"aio_intra_op_above_engine.json", "aio.intra_op_parallelism:", "found 128"},
    /* another optimizer type's key: DeepSpeed's constructor refuses it */
    {"adagrad_betas.json", "optimizer.params.betas:", "not a parameter of optimizer.type \"Adagrad\""},
    {"sgd_eps.json", "optimizer.params.eps:", "not a parameter of optimizer.type \"SGD\""},
    {"lion_eps.json", "optimizer.params.eps:", "not a parameter of optimizer.type \"Lion\""},
    {"lamb_max_coeff_zero.json", "optimizer.params.max_coeff:", "found 0"},
    {"onebit_lamb_freeze_step_zero.json", "optimizer.params.freeze_step:", "found 0"},
    {"onebit_lamb_factor_min_above_max.json", "optimizer.params.factor_min:",
     "<= factor_max (1.5)"},
    {"aio_queue_depth_zero.json", "aio.queue_depth:", "found 0"},
    {"aio_thread_count_and_intra_op.json", "aio.intra_op_parallelism:", "found 4"},
    {"amsgrad.json", "optimizer.params.amsgrad:", "found true"},
    {"batch_as_string.json", "train_batch_size:", "found \"32\""},
    {"batch_not_multiple.json", "train_batch_size:", "found 10"},
    {"batch_too_big.json", "train_batch_size:", "found 1e30"},
    {"batch_triad_mismatch.json", "train_batch_size:", "found 64"},
    {"beta2_is_one.json", "optimizer.params.betas[1]:", "found 1.0"},
    {"betas_as_string.json", "optimizer.params.betas:", "found \"0.9,0.999\""},
    {"betas_three_values.json", "optimizer.params.betas:", "found [0.9,0.99,0.999]"},
    {"bf16_and_bfloat16.json", "bfloat16:", "found {\"enabled\":true}"},
    {"comm_timeout_zero.json", "zinc.comm_timeout_s:", "found 0"},
    {"comms_logger_verbose_string.json", "comms_logger.verbose:", "found \"yes\""},
    {"csv_monitor_job_name_number.json", "csv_monitor.job_name:", "found 7"},
    {"comm_timeout_huge.json", "zinc.comm_timeout_s:", "[1, 1e+06]"},
    {"comm_timeout_tiny.json", "zinc.comm_timeout_s:", "found 1e-300"},
    /* positive, but 0 or infinite in the fp32 zinc computes them in */
    {"eps_zero_in_fp32.json", "optimizer.params.eps:", "found 1e-300"},
    {"gradient_predivide_factor_huge.json", "gradient_predivide_factor:", "found 1e300"},
    {"max_consecutive_skips_negative.json", "zinc.max_consecutive_skips:", "found -1"},
    {"cosine_total_equals_warmup.json", "scheduler.params.total_num_steps:", "found 1000"},
    {"cosine_with_warmup_max_lr.json", "scheduler.params.warmup_max_lr:", "found 0.0003"},
    {"cpu_offload_and_offload_optimizer.json", "zero_optimization.cpu_offload:", "found true"},
    {"duplicate_offload_device.json", "zero_optimization.offload_optimizer.device:",
     "\"device\""},
    {"duplicate_stage.json", "zero_optimization.stage:", "\"stage\""},
    {"duplicate_top_level.json", "train_batch_size:", "\"train_batch_size\""},
    {"eps_zero.json", "optimizer.params.eps:", "found 0"},
    {"fp16_and_bf16.json", "bf16.enabled:", "found true"},
    {"fp16_as_bool.json", "fp16:", "found true"},
    {"fp16_enabled_yes.json", "fp16.enabled:", "found \"yes\""},
    {"gradient_predivide_factor_zero.json", "gradient_predivide_factor:", "found 0"},
    {"hysteresis_zero.json", "fp16.hysteresis:", "found 0"},
    {"log_level_unknown.json", "zinc.log_level:", "found \"verbose\""},
    {"loss_scale_negative.json", "fp16.loss_scale:", "found -1"},
    {"loss_scale_window_fraction.json", "fp16.loss_scale_window:", "found 100.5"},
    {"lr_range_test_step_size_zero.json", "scheduler.params.lr_range_test_step_size:",
     "found 0"},
    {"lr_negative.json", "optimizer.params.lr:", "found -0.001"},
    {"memory_timeline_empty.json", "zinc.memory_timeline:", "found \"\""},
    {"micro_batch_zero.json", "train_micro_batch_size_per_gpu:", "found 0"},
    {"number_checkpoints_negative.json", "activation_checkpointing.number_checkpoints:",
     "found -1"},
    {"nvme_buffer_count_zero.json", "zero_optimization.offload_optimizer.buffer_count:",
     "found 0"},
    {"nvme_path_empty.json", "zero_optimization.offload_param.nvme_path:", "found \"\""},
    {"nvme_path_list_number.json", "zero_optimization.offload_optimizer.nvme_path[1]:",
     "found 1"},
    {"nvme_path_too_many.json", "zero_optimization.offload_optimizer.nvme_path:",
     "found [\"/mnt/nvme0\""},
    {"nvme_without_path.json", "zero_optimization.offload_optimizer.nvme_path:",
     "found nothing"},
    {"offload_device_gpu.json", "zero_optimization.offload_optimizer.device:", "found \"gpu\""},
    {"offload_ratio_above_one.json", "zero_optimization.offload_optimizer.ratio:",
     "found 1.5"},
    {"optimizer_params_list.json", "optimizer.params:", "found [0.001,0.9]"},
    {"optimizer_typo.json", "optimizer.type:", "found \"AdamX\""},
    {"optimizer_without_type.json", "optimizer.type:", "found nothing"},
    {"overlap_comm_two.json", "zero_optimization.overlap_comm:", "found 2"},
    {"param_nvme_without_path.json", "zero_optimization.offload_param.nvme_path:",
     "found null"},
    {"optimizer_param_auto.json", "optimizer.params.max_coeff:", "found \"auto\""},
    {"optimizer_type_auto.json", "optimizer.type:", "found \"auto\""},
    {"scheduler_type_auto.json", "scheduler.type:", "found \"auto\""},
    {"prefetch_two_spellings.json", "zero_optimization.prefetch_bucket_size:",
     "found 20000000"},
    {"reduce_bucket_size_negative.json", "zero_optimization.reduce_bucket_size:", "found -1"},
    {"reduce_bucket_size_string.json", "zero_optimization.reduce_bucket_size:",
     "found \"5e8\""},
    {"scheduler_onecycle_warmup_key.json", "scheduler.params.warmup_num_steps:", "found 100"},
    {"scheduler_unknown.json", "scheduler.type:", "found \"CosineAnnealingLR\""},
    {"scheduler_without_type.json", "scheduler.type:", "found nothing"},
    {"stage_as_string.json", "zero_optimization.stage:", "found \"3\""},
    {"stage_fraction.json", "zero_optimization.stage:", "found 2.5"},
    {"stage_out_of_range.json", "zero_optimization.stage:", "found 4"},
    {"top_level_array.json", "(top level):", "found [{\"train_batch_size\":8}]"},
    {"sgd_zero_without_untested_flag.json", "optimizer.type:", "zero_allow_untested_optimizer"},
    {"sgd_nesterov_without_momentum.json", "optimizer.params.nesterov:", "momentum > 0"},
    {"unterminated_string.json", "(in optimizer.type)", "near '\"Adam,'"},
    {"warmup_type_unknown.json", "scheduler.params.warmup_type:", "found \"exp\""},
    {"weight_decay_auto_string.json", "optimizer.params.weight_decay:", "found \"0.01\""},
    {"zero_optimization_number.json", "zero_optimization:", "found 3"},
};

static const invalid_case *find_invalid(const char *file) {
  for (size_t i = 0; i < sizeof invalid_cases / sizeof invalid_cases[0]; i++)
    if (strcmp(invalid_cases[i].file, file) == 0)
      return &invalid_cases[i];
  return NULL;
}

static void invalid_corpus_fails_with_path(void **state) {
  (void)state;
  char dir[1024], path[1400];
  corpus_dir("invalid", dir, sizeof dir);
  char **names;
  int n = list_json(dir, &names);
  assert_true(n >= 40);
  assert_int_equal(n, (int)(sizeof invalid_cases / sizeof invalid_cases[0]));
  for (int i = 0; i < n; i++) {
    const invalid_case *c = find_invalid(names[i]);
    if (!c)
      fail_msg("invalid/%s has no entry in invalid_cases", names[i]);
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    zinc_config *cfg = (zinc_config *)&cfg; /* must be reset to NULL */
    zinc_status st = zinc_config_load(path, &cfg);
    const char *msg = zinc_last_error();
    if (st != ZINC_ERR_CONFIG)
      fail_msg("invalid/%s: status %s, expected ZINC_ERR_CONFIG", names[i],
               zinc_status_name(st));
    assert_null(cfg);
    if (!strstr(msg, c->path) || !strstr(msg, c->value) || !strstr(msg, names[i]))
      fail_msg("invalid/%s: message does not name the file, path \"%s\" and value \"%s\":\n  %s",
               names[i], c->path, c->value, msg);
  }
  free_names(names, n);
}

/* A key of another optimizer type is an error naming its JSON path and the
 * type, for every type (DeepSpeed hands optimizer.params to the type's
 * constructor as keyword arguments, which refuses one it does not take);
 * the same key under a type that takes it loads without a warning; a key
 * of no type stays a warning with a did-you-mean (test_config_warnings). */
static void foreign_optimizer_keys_refused(void **state) {
  (void)state;
  static const struct {
    const char *type, *key, *value, *owner; /* owner: a type that takes the key */
  } cases[] = {
      {"Adam", "momentum", "0.9", "SGD"},          {"Adam", "freeze_step", "10", "OneBitAdam"},
      {"Adam", "dampening", "0", "SGD"},           {"AdamW", "max_coeff", "1", "Lamb"},
      {"AdamW", "nesterov", "false", "SGD"},       {"Lamb", "adam_w_mode", "true", "Adam"},
      {"Lamb", "torch_adam", "false", "Adam"},     {"Lion", "eps", "1e-8", "Adam"},
      {"Lion", "bias_correction", "true", "Adam"}, {"Lion", "amsgrad", "false", "Adam"},
      {"Adagrad", "betas", "[0.9, 0.999]", "Adam"}, {"Adagrad", "adam_w_mode", "false", "Adam"},
      {"SGD", "eps", "1e-8", "Adagrad"},           {"SGD", "betas", "[0.9, 0.999]", "Lion"},
      {"SGD", "lr_decay", "0", "Adagrad"},         {"OneBitAdam", "max_coeff", "1", "Lamb"},
      {"OneBitAdam", "var_freeze_step", "10", "ZeroOneAdam"},
      {"ZeroOneAdam", "freeze_step", "10", "OneBitLamb"},
      {"ZeroOneAdam", "coeff_beta", "0.9", "OneBitLamb"},
      {"OneBitLamb", "var_freeze_step", "10", "ZeroOneAdam"},
      {"OneBitLamb", "momentum", "0.9", "SGD"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[256], path[96], type[64];
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"%s\", "
             "\"params\": {\"lr\": 0.01, \"%s\": %s}}}", cases[i].type, cases[i].key,
             cases[i].value);
    snprintf(path, sizeof path, "optimizer.params.%s:", cases[i].key);
    snprintf(type, sizeof type, "optimizer.type \"%s\"", cases[i].type);
    zinc_config *cfg = (zinc_config *)&cfg;
    zinc_status st = zinc_config_parse(json, &cfg);
    const char *msg = zinc_last_error();
    if (st != ZINC_ERR_CONFIG || cfg || !strstr(msg, path) || !strstr(msg, type) ||
        !strstr(msg, cases[i].owner))
      fail_msg("%s: %s: %s (want CONFIG naming %s, %s and %s)", json, zinc_status_name(st),
               st == ZINC_OK ? "loaded" : msg, path, type, cases[i].owner);
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"%s\", "
             "\"params\": {\"lr\": 0.01, \"%s\": %s}}}", cases[i].owner, cases[i].key,
             cases[i].value);
    if (zinc_config_parse(json, &cfg) != ZINC_OK)
      fail_msg("%s: %s", json, zinc_last_error());
    if (zinc_config_warning_count(cfg) != 0)
      fail_msg("%s: %d warnings", json, zinc_config_warning_count(cfg));
    zinc_config_free(cfg);
  }
}

/* An optimizer zinc does not implement is an error whatever
 * zero_allow_untested_optimizer says: zinc never runs Adam in its place
 * with another optimizer's params (SGD's lr 0.1 would be a very different
 * training). The flag with Adam or AdamW loads without a warning. */
static void untested_optimizer_never_runs_adam(void **state) {
  (void)state;
  static const char *const types[] = {"MuAdam", "MuSGD"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    for (int allow = 0; allow < 2; allow++) {
      char json[256], quoted[64];
      snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"zero_allow_untested_optimizer\": "
               "%s, \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.1}}}",
               allow ? "true" : "false", types[i]);
      snprintf(quoted, sizeof quoted, "\"%s\"", types[i]);
      zinc_config *cfg = NULL;
      zinc_status st = zinc_config_parse(json, &cfg);
      const char *msg = zinc_last_error();
      if (st != ZINC_ERR_CONFIG || cfg)
        fail_msg("%s: status %s, expected ZINC_ERR_CONFIG", json, zinc_status_name(st));
      static const char *const words[] = {"optimizer.type", "does not implement",
                                          "\"Lamb\", \"Lion\", \"Adagrad\", \"SGD\", "
                                          "\"OneBitAdam\", \"ZeroOneAdam\" or \"OneBitLamb\""};
      if (!strstr(msg, quoted))
        fail_msg("%s: message does not name %s: %s", json, quoted, msg);
      for (size_t w = 0; w < sizeof words / sizeof words[0]; w++)
        if (!strstr(msg, words[w]))
          fail_msg("%s: message lacks \"%s\": %s", json, words[w], msg);
    }
  static const char *const ours[] = {"Adam", "AdamW", "adamw", "Lamb", "Lion", "Adagrad", "SGD",
                                     "OneBitAdam", "ZeroOneAdam", "OneBitLamb"};
  for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
    char json[256];
    snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"zero_allow_untested_optimizer\": "
             "true, \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.1}}}", ours[i]);
    zinc_config *cfg = NULL;
    if (zinc_config_parse(json, &cfg) != ZINC_OK)
      fail_msg("%s: %s", json, zinc_last_error());
    assert_int_equal(zinc_config_warning_count(cfg), 0);
    assert_true(cfg->s.lr == 0.1);
    zinc_config_free(cfg);
  }
}

static void scheduler_checked_at_engine_create(void **state) {
  (void)state;
  static const struct {
    const char *file, *message;
  } cases[] = {
      {"decay_without_total.json", "scheduler.params.total_num_steps: found nothing"},
      {"cosine_without_params.json", "scheduler.params.total_num_steps: found nothing"},
      {"scheduler_onecycle_without_max_lr.json", "scheduler.params.cycle_max_lr: found nothing"},
      {"scheduler_onecycle.json", NULL},
      {"llama_warmup_cosine_bf16.json", NULL},
  };
  char dir[1024], path[1400];
  corpus_dir("valid", dir, sizeof dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
    zinc_config *cfg = NULL;
    if (zinc_config_load(path, &cfg) != ZINC_OK)
      fail_msg("%s: %s", cases[i].file, zinc_last_error());
    zinc_status st = zinc_settings_check_scheduler(&cfg->s);
    if (!cases[i].message && st != ZINC_OK)
      fail_msg("%s: %s", cases[i].file, zinc_last_error());
    if (cases[i].message && (st != ZINC_ERR_CONFIG || !strstr(zinc_last_error(), cases[i].message)))
      fail_msg("%s: %s: %s, expected ZINC_ERR_CONFIG with \"%s\"", cases[i].file,
               zinc_status_name(st), zinc_last_error(), cases[i].message);
    zinc_config_free(cfg);
  }
  /* a trainer-supplied total makes the same settings pass */
  zinc_config *cfg = NULL;
  snprintf(path, sizeof path, "%s/cosine_without_params.json", dir);
  assert_int_equal(zinc_config_load(path, &cfg), ZINC_OK);
  cfg->s.total_num_steps = 5000;
  assert_int_equal(zinc_settings_check_scheduler(&cfg->s), ZINC_OK);
  cfg->s.total_num_steps = 1000; /* == the warmup: DeepSpeed divides by 0 */
  assert_int_equal(zinc_settings_check_scheduler(&cfg->s), ZINC_ERR_CONFIG);
  zinc_config_free(cfg);
}

int main(void) {
  /* The corpus is about values; its warnings are counted, not shown. */
  zinc_log_set_level(ZINC_LOG_ERROR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_corpus_loads),
      cmocka_unit_test(invalid_corpus_fails_with_path),
      cmocka_unit_test(untested_optimizer_never_runs_adam),
      cmocka_unit_test(foreign_optimizer_keys_refused),
      cmocka_unit_test(scheduler_checked_at_engine_create),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
