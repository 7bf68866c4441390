/*
 * config.h — the validated, fully resolved settings that a DeepSpeed-style
 * JSON file turns into (the files of config/). jansson is used here and
 * for the two other JSON documents zinc reads and writes, the checkpoint
 * manifest (engine/checkpoint/manifest.c) and the memory timeline
 * (engine/memory/timeline.c); no jansson type appears in a header but
 * config/config_internal.h.
 *
 * Every field has its DeepSpeed default unless it says otherwise. A key a
 * file writes as "auto" (Hugging Face's placeholder for the trainer's
 * value) is kept as "auto": its bit in auto_mask is set and its field holds
 * a placeholder (ZINC_AUTO for integers and flags, ZINC_AUTO_F64 = NaN for
 * numbers, so that a use before resolution shows) until the trainer gives
 * the value (zinc_config_fill_auto, config/auto.c) or the engine resolves
 * it: at creation from DeepSpeed's default where one is safe, else an error
 * naming the key (zinc_settings_resolve_auto); bucket sizes and precision
 * at build from the model (zinc_settings_resolve_model). The batch triad
 * keeps its own bits in batch_given_mask. After both resolutions nothing is
 * "auto".
 *
 * Every size is in elements (DeepSpeed's convention) unless it says bytes.
 */
#ifndef ZINC_CONFIG_H
#define ZINC_CONFIG_H

#include <math.h>
#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZINC_AUTO (-1)
#define ZINC_AUTO_F64 ((double)NAN)

/* The keys other than the batch triad that a file may write as "auto": one
 * bit each in zinc_settings.auto_mask (config/auto.c holds their table:
 * JSON path, field, and where the value comes from). */
typedef enum {
  ZINC_AUTO_GRADIENT_CLIPPING = 0,
  ZINC_AUTO_FP16_ENABLED,
  ZINC_AUTO_BF16_ENABLED,
  ZINC_AUTO_LR,
  ZINC_AUTO_BETA1,
  ZINC_AUTO_BETA2,
  ZINC_AUTO_EPS,
  ZINC_AUTO_WEIGHT_DECAY,
  ZINC_AUTO_WARMUP_MIN_LR,
  ZINC_AUTO_WARMUP_MAX_LR,
  ZINC_AUTO_WARMUP_NUM_STEPS,
  ZINC_AUTO_TOTAL_NUM_STEPS,
  ZINC_AUTO_REDUCE_BUCKET_SIZE,
  ZINC_AUTO_PREFETCH_BUCKET_SIZE,
  ZINC_AUTO_PARAM_PERSISTENCE_THRESHOLD,
  ZINC_AUTO_MAX_LIVE_PARAMETERS,
  ZINC_AUTO_MAX_REUSE_DISTANCE,
  ZINC_AUTO_GATHER_16BIT_WEIGHTS,
  ZINC_AUTO_OPTIMIZER_PIN_MEMORY,
  ZINC_AUTO_PARAM_PIN_MEMORY,
  ZINC_AUTO_OPTIMIZER_BUFFER_COUNT,
  ZINC_AUTO_PARAM_BUFFER_COUNT,
  ZINC_AUTO_KEY_COUNT
} zinc_auto_key;
#define ZINC_AUTO_BIT(k) (1u << (k))

/* DeepSpeed's "csv_monitor" and "tensorboard" sections (its monitor/config.py):
 * world rank 0 writes under output_path/job_name. */
#define ZINC_MONITOR_PATH_MAX 1024
typedef struct {
  int enabled;                            /* false                         */
  char output_path[ZINC_MONITOR_PATH_MAX];/* "": the working directory     */
  char job_name[256];                     /* "DeepSpeedJobName"            */
} zinc_monitor_settings;

/* DeepSpeed's "comms_logger" section (its comm/config.py). */
typedef struct {
  int enabled;                            /* false                         */
  int verbose;                            /* false: log every op (rank 0)  */
  int prof_all;                           /* true: count every op          */
  int debug;                              /* false: rows per group         */
  uint32_t prof_ops;                      /* 0: bit (1 << zinc_comms_op)
                                             per op prof_ops names; with
                                             prof_all false only those are
                                             counted                      */
} zinc_comms_logger_settings;

typedef enum { ZINC_OFFLOAD_NONE = 0, ZINC_OFFLOAD_CPU, ZINC_OFFLOAD_NVME } zinc_offload_device;
typedef enum { ZINC_COMPRESS_INTER_NODE = 0, ZINC_COMPRESS_ALL } zinc_compress_scope;
/* zinc.compression.gradient_codec: the codec of the compressed gradient
 * reduce-scatter (zero_quantized_gradients). */
typedef enum {
  ZINC_GRAD_CODEC_QUANT = 0, /* "quant": gradient_bits' block codec     */
  ZINC_GRAD_CODEC_TERNGRAD,  /* "terngrad": TernGrad (kernels/codec.h) */
  ZINC_GRAD_CODEC_DGC,       /* "dgc": top-k with a residual (Deep
                                Gradient Compression)                   */
  ZINC_GRAD_CODEC_POWERSGD,  /* "powersgd": low-rank all-reduce at
                                stages 0/1 (engine/reduce/powersgd.c)          */
} zinc_gradient_codec;
/* optimizer.type; the optimizer's own kind (kernels/zinc_math.h) follows
 * from it (Adam and AdamW are one kind). */
typedef enum { ZINC_OPTIM_ADAM = 0, ZINC_OPTIM_ADAMW, ZINC_OPTIM_LAMB, ZINC_OPTIM_LION,
               ZINC_OPTIM_ADAGRAD, ZINC_OPTIM_SGD,
               ZINC_OPTIM_ONEBIT_ADAM,   /* "OneBitAdam" (engine/reduce/onebit_adam.c) */
               ZINC_OPTIM_ZERO_ONE_ADAM, /* DeepSpeed's ZeroOneAdam (engine/reduce/zoadam.c) */
               ZINC_OPTIM_ONEBIT_LAMB    /* DeepSpeed's OneBitLamb (engine/reduce/onebit_lamb.c) */
} zinc_optim_type;
typedef enum {
  ZINC_SCHED_NONE = 0,     /* constant lr */
  ZINC_SCHED_WARMUP_LR,    /* WarmupLR */
  ZINC_SCHED_WARMUP_DECAY, /* WarmupDecayLR */
  ZINC_SCHED_WARMUP_COSINE, /* WarmupCosineLR */
  ZINC_SCHED_ONE_CYCLE,    /* OneCycle (lr and Adam's beta1) */
  ZINC_SCHED_LR_RANGE_TEST /* LRRangeTest */
} zinc_sched_type;
typedef enum { ZINC_WARMUP_LOG = 0, ZINC_WARMUP_LINEAR } zinc_warmup_type;

#define ZINC_MAX_NVME_PATHS 16

/* What the NVMe I/O engine can run (offload/aio.c, offload/swap.c check
 * them again at build): the config refuses anything else at load, naming
 * the key. A swap block is a 4096-byte header page and at least one page
 * of data. */
#define ZINC_AIO_MIN_BLOCK_SIZE 8192
#define ZINC_AIO_MAX_BLOCK_SIZE (1 << 30)
#define ZINC_AIO_MAX_QUEUE_DEPTH 4096
#define ZINC_AIO_MAX_THREADS 64

typedef struct {
  zinc_offload_device device;     /* "none" | "cpu" | "nvme"                     */
  char *nvme_paths[ZINC_MAX_NVME_PATHS]; /* nvme_path: a string or (zinc) a list */
  int nvme_path_count;
  int pin_memory;                 /* false                                       */
  int64_t buffer_count;           /* optimizer: 4; param: 5                      */
  int pipeline_read;              /* optimizer only: false                       */
  int pipeline_write;             /* optimizer only: false                       */
  int fast_init;                  /* optimizer only: false                       */
  double ratio;                   /* optimizer only: 1.0 (fraction offloaded)    */
  int64_t buffer_size;            /* param only: 1e8 elements                    */
  int64_t max_in_cpu;             /* param only: 0 elements (DeepSpeed: 1e9)     */
} zinc_offload_settings;

typedef struct {
  /* ---- batch (resolved against the data-parallel size, as DeepSpeed) */
  int64_t train_batch_size;               /* ZINC_AUTO until resolved */
  int64_t train_micro_batch_size_per_gpu; /* ZINC_AUTO until resolved */
  int64_t gradient_accumulation_steps;    /* ZINC_AUTO until resolved */
  int batch_given_mask;                   /* bit 0: train_batch_size, 1: micro, 2: gas
                                             were given as numbers in the file;
                                             bits 3-5: written "auto" */
  uint32_t auto_mask;                     /* ZINC_AUTO_BIT(zinc_auto_key): the key
                                             is "auto" and not resolved yet */

  double gradient_clipping;               /* 0 = off; "auto" -> 1.0 at create; a
                                             negative value reads as 0 */
  int64_t steps_per_print;                /* 10; 0 = never (DeepSpeed
                                             would divide by it)          */
  int wall_clock_breakdown;               /* false                        */
  int zero_allow_untested_optimizer;      /* false                        */
  int prescale_gradients;                 /* false                        */
  double gradient_predivide_factor;       /* 1.0                          */

  /* ---- precision: at most one of fp16/bf16 enabled; ZINC_AUTO = follow
   *      the registered parameters' dtype (resolved at build) */
  int fp16_enabled;                       /* false                        */
  double fp16_loss_scale;                 /* 0 = dynamic                  */
  double fp16_initial_scale_power;        /* 16; the scale starts at 2^this,
                                             a number (DeepSpeed computes
                                             2**power) in [-126, 127]: the
                                             fp32 range (clamped at load) */
  int fp16_loss_scale_window;             /* 1000                         */
  int fp16_hysteresis;                    /* 2                            */
  int fp16_consecutive_hysteresis;        /* false                        */
  double fp16_min_loss_scale;             /* 1; 0 = no floor              */
  int bf16_enabled;                       /* false                        */
  /* bf16.bf16_master_weights_and_grads: the optimizer's master weights in
   * bf16 (2 bytes per trained element instead of 4); bf16.
   * bf16_optimizer_states (needs the first, as DeepSpeed): its moments too.
   * Each value is computed in fp32 and rounded as bf16_rounding says. The
   * reduced gradients stay fp32 (docs/config.md, bf16). */
  int bf16_master_weights_and_grads;      /* false                        */
  int bf16_optimizer_states;              /* false                        */
  int bf16_rounding;                      /* zinc.bf16_rounding: ZINC_ROUND_
                                             NEAREST_EVEN (0, DeepSpeed's)
                                             or ZINC_ROUND_STOCHASTIC      */
  int64_t bf16_rounding_seed;             /* zinc.bf16_rounding_seed: 0   */

  /* ---- optimizer */
  zinc_optim_type optimizer;              /* Adam                          */
  double lr;                              /* 1e-3                          */
  double beta1, beta2;                    /* 0.9, 0.999                    */
  double eps;                             /* 1e-8                          */
  double weight_decay;                    /* 0                             */
  int adam_w_mode;                        /* true (DeepSpeed's default:
                                             type Adam is decoupled unless
                                             adam_w_mode is false)         */
  int bias_correction;                    /* true                          */
  /* Defaults of lr, betas, eps follow the type (docs/config.md): Lamb
   * 1e-3, (0.9, 0.999), 1e-8; Lion 1e-3, (0.9, 0.999); Adagrad 1e-2, eps
   * 1e-10; SGD 1e-3. */
  double max_coeff, min_coeff;            /* Lamb: 10, 0.01                */
  double lamb_max_grad_norm;              /* Lamb: 0 = off; else FusedLamb's
                                             own clipping, after
                                             gradient_clipping's (step.c) */
  double momentum, dampening;             /* SGD: 0, 0                     */
  int nesterov;                           /* SGD: false                    */
  /* ZeroOneAdam (DeepSpeed's defaults; engine/reduce/zoadam.c) */
  int64_t var_freeze_step;                /* 100000                        */
  int64_t var_update_scaler;              /* 16                            */
  int64_t local_step_scaler;              /* 32678                         */
  int64_t local_step_clipper;             /* 16                            */
  /* OneBitLamb (DeepSpeed's defaults; parsed, not implemented) */
  int64_t freeze_step;                    /* 100000                        */
  double coeff_beta;                      /* 0.9                           */
  double factor_max, factor_min;          /* 4.0, 0.5                      */
  double factor_threshold;                /* 0.1                           */
  /* OneBitAdam (DeepSpeed's 1-bit Adam, engine/reduce/onebit_adam.c) */
  int64_t onebit_freeze_step;             /* 100000: exact Adam steps before
                                             the compressed ones          */
  int onebit_cuda_aware;                  /* false: stored, no effect      */

  /* ---- scheduler */
  zinc_sched_type scheduler;
  double warmup_min_lr;                   /* 0                             */
  double warmup_max_lr;                   /* 1e-3                          */
  int64_t warmup_num_steps;               /* 1000                          */
  zinc_warmup_type warmup_type;           /* log                           */
  int64_t total_num_steps;                /* WarmupDecay/Cosine: required  */
  double warmup_min_ratio;                /* cosine: 0                     */
  double cos_min_ratio;                   /* cosine: 1e-4                  */
  /* OneCycle (DeepSpeed's defaults; cycle_min_lr / cycle_max_lr have none:
   * NAN until given, checked at engine creation) */
  double cycle_min_lr, cycle_max_lr;      /* required                      */
  double decay_lr_rate;                   /* 0                             */
  double cycle_first_step_size;           /* 2000 (DeepSpeed floats it)    */
  double cycle_second_step_size;          /* NAN: as the first             */
  int64_t cycle_first_stair_count;        /* 0: stored, DeepSpeed never
                                             reads it in its formulas     */
  int64_t cycle_second_stair_count;       /* -1: as the first; likewise    */
  double decay_step_size;                 /* 0: no decay after the cycle   */
  int cycle_momentum;                     /* true: beta1 cycles            */
  double cycle_min_mom, cycle_max_mom;    /* 0.8, 0.9                      */
  double decay_mom_rate;                  /* 0                             */
  /* LRRangeTest */
  double lr_range_test_min_lr;            /* 1e-3                          */
  double lr_range_test_step_size;         /* 2000                          */
  double lr_range_test_step_rate;         /* 1.0                           */
  int lr_range_test_staircase;            /* false                         */

  /* ---- zero_optimization */
  int stage;                              /* 0                             */
  int contiguous_gradients;               /* true                          */
  int overlap_comm;                       /* false (stage 3: true)         */
  int reduce_scatter;                     /* true                          */
  int64_t reduce_bucket_size;             /* 5e8 (ZINC_AUTO until build)   */
  int allgather_partitions;               /* true                          */
  int64_t allgather_bucket_size;          /* 5e8                           */
  int round_robin_gradients;              /* false (accepted, no effect)   */
  int64_t sub_group_size;                 /* 1e9                           */
  zinc_offload_settings offload_optimizer;
  zinc_offload_settings offload_param;
  int64_t stage3_prefetch_bucket_size;    /* 5e7 (ZINC_AUTO until build)   */
  int64_t stage3_param_persistence_threshold; /* 1e5 (ZINC_AUTO until build) */
  int64_t stage3_max_live_parameters;     /* 1e9                           */
  int64_t stage3_max_reuse_distance;      /* 1e9                           */
  int stage3_gather_16bit_weights_on_model_save; /* false (also the older
                                             ..._fp16_weights_... spelling) */
  int zero_hpz_partition_size;            /* 1; stage 3: ranks per secondary
                                             parameter partition (hpZ)     */
  /* ---- compressed communication (docs/config.md "Compressed
   * communication"; engine/reduce/compress.c) */
  int communication_data_type;            /* -1 (null: the gradient dtype),
                                             else ZINC_F32/BF16/F16: the
                                             dtype gradients travel in      */
  int zero_quantized_gradients;           /* false: qgZ                     */
  int zero_quantized_weights;             /* false: qwZ (the stage-3
                                             parameter gather)              */
  int loco_enabled;                       /* zeropp_loco_param given (an
                                             object, not null)              */
  double loco_err_beta;                   /* 0.8                            */
  int64_t loco_reset_T;                   /* 1024                           */

  /* ---- aio (NVMe offload) */
  int64_t aio_block_size;                 /* 1048576 bytes                 */
  int aio_queue_depth;                    /* 8                             */
  int aio_intra_op_parallelism;           /* 1 (older name: thread_count)  */
  int aio_single_submit;                  /* false                         */
  int aio_overlap_events;                 /* true                          */
  int aio_use_gds;                        /* false; true is reported as
                                             unsupported (warning)         */
  int aio_allow_buffered_io;              /* zinc: false. true lets NVMe
                                             offload fall back to buffered
                                             I/O where O_DIRECT or io_uring
                                             is refused (with a warning)   */
  int aio_swap_checksums;                 /* zinc: true. crc32c per swap
                                             block, verified on read       */

  /* ---- activation_checkpointing */
  int ac_partition_activations;           /* false                         */
  int ac_cpu_checkpointing;               /* false                         */
  int ac_contiguous_memory_optimization;  /* false                         */
  int64_t ac_number_checkpoints;          /* 0 (null)                      */
  int ac_synchronize_checkpoint_boundary; /* false                         */
  int ac_profile;                         /* false                         */

  /* ---- monitors */
  zinc_monitor_settings csv_monitor, tensorboard;
  zinc_comms_logger_settings comms_logger;

  /* ---- pipeline (DeepSpeed's "pipeline" section; its other keys belong
   * to the trainer's model and are accepted without effect) */
  int64_t pipeline_stages;                /* 0: "auto" or not given (the
                                             trainer's zinc_options decide);
                                             n >= 1: must equal
                                             pipeline_parallel_size
                                             (engine/pipe.c)               */

  /* ---- "zinc" section: options DeepSpeed has no key for */
  int log_level;                          /* -1: leave the logger as is;
                                             else a zinc_log_level         */
  double comm_timeout_s;                  /* 600: a collective that does not
                                             complete in this time fails
                                             with ZINC_ERR_COMM            */
  char *memory_timeline;                  /* NULL, or a JSON file path the
                                             profiler samples into         */
  int placement_verbose;                  /* false: print thread/NUMA placement */
  /* zinc.compression: what DeepSpeed's keys leave fixed */
  int compress_gradient_bits;             /* 4: qgZ codec, 4 / 8 / 1 (1 = sign
                                             with a mean-|x| scale)          */
  int compress_gradient_codec;            /* ZINC_GRAD_CODEC_QUANT (default),
                                             _TERNGRAD or _DGC              */
  int compress_weight_bits;               /* 8: qwZ codec, 8 / 4             */
  int64_t compress_block_size;            /* 256 elements per fp32 scale     */
  int compress_scope;                     /* ZINC_COMPRESS_INTER_NODE (default:
                                             compress only what crosses nodes)
                                             or ZINC_COMPRESS_ALL           */
  double dgc_density;                     /* 0.001: top-k's kept fraction    */
  int64_t dgc_warmup_steps;               /* 0: optimizer steps of the
                                             exponential density warm-up   */
  int dgc_residual;                       /* true: the unsent values wait in
                                             an fp32 residual (false: dropped,
                                             an experiment)                */
  int dgc_momentum_correction;            /* false: DGC's momentum correction
                                             and factor masking, SGD's
                                             momentum moved into the codec
                                             path (engine/reduce/dgc.c)           */
  int dgc_local_clipping;                 /* false: with momentum correction,
                                             each rank's local gradient
                                             clipped to gradient_clipping
                                             N^-1/2 (stage 1)              */
  int64_t dga_delay;                      /* 0: off; D >= 1: delayed gradient
                                             averaging at stage 0 (engine/reduce/dga.c):
                                             the all-reduce of step t's
                                             gradient is applied at t + D   */
  /* zinc.compression.powersgd: PyTorch's PowerSGDState (engine/reduce/powersgd.c) */
  int64_t psgd_rank;                      /* 1: matrix_approximation_rank  */
  int64_t psgd_start_iter;                /* 1000: start_powerSGD_iter     */
  double psgd_min_compression_rate;       /* 2: min_compression_rate       */
  int psgd_error_feedback;                /* true: use_error_feedback      */
  int psgd_warm_start;                    /* true: warm_start              */
  double psgd_orth_epsilon;               /* 0: orthogonalization_epsilon  */
  int64_t psgd_random_seed;               /* 0: random_seed                */
  int64_t psgd_stats_frequency;           /* 10000: compression_stats_
                                             logging_frequency (iterations) */
  int psgd_batch_same_shape;              /* false: batch_tensors_with_same_
                                             shape (no effect on numbers)  */
  int64_t max_consecutive_skips;          /* 50: zinc_step fails after this many
                                             consecutive steps skipped for
                                             inf/NaN gradients that lowering
                                             the loss scale cannot cure (fp16
                                             at min_loss_scale or with a static
                                             scale; every skip with bf16 or
                                             fp32); 0 = never               */
  double checkpoint_timeout_s;            /* 1800: how long a rank waits for
                                             peers busy with checkpoint I/O
                                             (save, load, export, pretrained
                                             load); comm_timeout_s when that
                                             is larger                      */
} zinc_settings;

struct zinc_config {
  zinc_settings s;
  uint32_t file_mask;   /* ZINC_AUTO_BIT(zinc_auto_key): the file wrote a
                           number there (a fact that differs is a mismatch) */
  uint32_t filled_mask; /* ZINC_AUTO_BIT(zinc_auto_key): the trainer gave the
                           value (zinc_config_fill_auto) */
  int batch_filled_mask;/* ZINC_BATCH_GIVEN bits the trainer gave            */
  int warnings;         /* warnings the load produced */
  char *source;         /* where it came from: a path or "<string>" */
};

/* Defaults for every field (what an empty JSON object "{}" gives). */
void zinc_settings_defaults(zinc_settings *s);
/* Deep copy (paths and strings duplicated). */
zinc_status zinc_settings_copy(zinc_settings *dst, const zinc_settings *src);
void zinc_settings_free(zinc_settings *s);

/* Resolve the batch triad against the data-parallel size exactly as
 * DeepSpeed does; errors name the keys and values. */
zinc_status zinc_settings_resolve_batch(zinc_settings *s, int dp_size);

/* Resolve every "auto" left that does not depend on the model, at engine
 * creation: warmup_max_lr from the optimizer's lr when the file or the
 * trainer gave it, the rest from DeepSpeed's default where it is safe, each
 * with a log line; ZINC_ERR_CONFIG naming the key and zinc_config_fill_auto
 * where no default is safe (lr, weight_decay, warmup_num_steps,
 * total_num_steps). Then the cross-key checks that values filled since the
 * load could break. `file_mask` and `filled_mask` are the config's.
 * docs/config.md lists the rule of every key. */
zinc_status zinc_settings_resolve_auto(zinc_settings *s, uint32_t file_mask,
                                       uint32_t filled_mask);

/* The checks DeepSpeed makes when its engine constructs the scheduler, made
 * at zinc_engine_create, once the trainer could have supplied what the file
 * leaves open: WarmupDecayLR / WarmupCosineLR need total_num_steps (0 = not
 * given), WarmupCosineLR's total must differ from the effective warmup
 * max(2, warmup_num_steps) (DeepSpeed divides by their difference), and
 * OneCycle needs cycle_min_lr and cycle_max_lr (NAN = not given; the
 * constructor has no default). ZINC_ERR_CONFIG naming the JSON path. */
zinc_status zinc_settings_check_scheduler(const zinc_settings *s);

/* Resolve what depends on the model: "auto" bucket sizes from the hidden
 * size (reduce_bucket_size = h*h, stage3_prefetch_bucket_size = 0.9*h*h,
 * stage3_param_persistence_threshold = 10*h, as DeepSpeed's HF integration
 * does; hidden_size 0 = unknown: ZINC_ERR_CONFIG naming the key for an
 * "auto" size that has an effect at this stage), and fp16/bf16 "auto" from
 * the parameters' dtype. */
zinc_status zinc_settings_resolve_model(zinc_settings *s, int64_t hidden_size,
                                        int any_f16, int any_bf16);

/* The resolved settings as JSON text (malloc'ed) — used by the printer, by
 * zinc_config_to_json and stored in checkpoints. */
char *zinc_settings_to_json(const zinc_settings *s);
/* The first setting in which two texts of zinc_settings_to_json differ, in
 * document order, skipping settings that may differ between ranks (NVMe
 * paths on node-local disks, logging): 1 with its dotted path and both
 * values rendered ("absent" for a missing one), else 0. */
int zinc_settings_json_diff(const char *a, const char *b, char *path, size_t cap, char *va,
                            char *vb, size_t vcap);

const char *zinc_offload_device_name(zinc_offload_device d);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_CONFIG_H */
