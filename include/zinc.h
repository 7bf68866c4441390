/*
 * zinc.h — the one public header of zinc ("ZeRO in C").
 *
 * zinc trains models data-parallel with ZeRO (stages 0-3): optimizer state,
 * gradients and parameters are partitioned across the data-parallel ranks,
 * the optimizer runs on each rank's shard (on the device, on the CPU, or
 * streamed from NVMe), and full parameters are rebuilt with all-gather when
 * the trainer needs them. It is configured with a DeepSpeed-style JSON file.
 *
 * Conventions
 *  - Every call that can fail returns zinc_status; results come back through
 *    out-parameters; zinc_last_error() gives a message for the calling thread
 *    that names the thing that failed and what to do.
 *  - Handles are opaque, created and destroyed in pairs; every destroy/free
 *    accepts NULL.
 *  - No MPI, NCCL, CUDA or JSON-library type appears here.
 *  - The library never exits the process and prints only through its logger
 *    (rank aware; level from the config's "zinc.log_level" or the environment
 *    variable ZINC_LOG_LEVEL = error|warn|info|debug).
 *  - Errors: a failing call either logs or returns, never both. It returns
 *    the status and sets the message (zinc_last_error); it does not print
 *    it. The trainer prints it, once, if it wants to. Only what nobody can
 *    be returned to (a failure inside zinc_engine_destroy, a config
 *    warning) goes to the logger.
 *  - Caller-allocated structs (zinc_options, zinc_step_info, zinc_timers,
 *    zinc_mem_stats, zinc_activation_stats, zinc_comms_stat) begin with
 *    `size_t size`, which their ZINC_*_INIT initialiser sets to the sizeof
 *    the caller was compiled with. Fields are only ever added at the end.
 *    zinc reads (zinc_options) or writes (the others) only the bytes within the
 *    caller's size: a trainer compiled against an older 0.x header runs on
 *    a newer library, the fields it does not know keeping their defaults
 *    (input) or being left unwritten (output); a newer header's extra
 *    fields are left alone by an older library. A size below
 *    sizeof(size_t) or above ZINC_STRUCT_SIZE_MAX (an uninitialised struct)
 *    is ZINC_ERR_INVALID naming the struct and its initialiser. In C++
 *    before C++20, value-initialise the struct and set size = sizeof.
 *  - Thread safety, tagged on each call:
 *      [any thread]  may be called from any thread at any time;
 *      [engine]      one thread at a time per engine (the engine's calls are
 *                    not re-entrant; two engines are independent);
 *      [collective]  [engine], and every rank of the scope named must make
 *                    the same call in the same order;
 *      [no engine]   touches only its arguments: any thread, any time;
 *      [config]      one thread at a time per zinc_config (reading calls
 *                    may run together when none changes or frees it).
 *  - Collective scope: a [collective] call that takes no zinc_scope runs
 *    over the group its description names, the world where it names none;
 *    the trainer's own host collectives take an explicit zinc_scope
 *    (zinc_allreduce_host_scope, zinc_allgather_host_scope; the two 0.1.0
 *    calls without one keep their groups, as stated there).
 *
 * A trainer's loop, for every stage:
 *
 *   for each micro-batch:
 *     for each module m in forward order:  fetch(m); forward(m); release(m)
 *     for each module m in reverse order:  fetch(m); backward(m) into grad(p);
 *                                          grads_ready(m); release(m)
 *     backward_end()
 *     step()      // after every micro-batch: it counts the micro-batch and
 *                 // runs the optimizer only at the accumulation boundary
 *
 * A weight two modules share (a tied embedding) is fetched through its
 * owner module by both: see "Shared (tied) weights" below.
 * Generation or evaluation between steps goes inside eval_begin/eval_end.
 *
 * Streams (the cuda device; the cpu device finishes its work inside each
 * call). The compute stream is zinc_options.cuda_stream, or the legacy
 * default stream when it is NULL.
 *  - The trainer reads parameters (zinc_param_data) and writes gradients
 *    (zinc_param_grad) with kernels on the compute stream. Work on another
 *    stream must be ordered against the compute stream by the trainer
 *    (cudaEventRecord / cudaStreamWaitEvent both ways) before it touches
 *    those buffers and before the zinc call that follows it.
 *  - No call needs the trainer to synchronise first. zinc queues its own
 *    device work on the compute stream after the trainer's (zeroing a
 *    gradient buffer it hands out, gradient sums and casts, the
 *    optimizer), and every collective, and every copy of gradients or
 *    parameters zinc makes on a stream of its own, starts only after an
 *    event recorded on the compute stream when zinc starts it (a copy of
 *    offloaded parameters from host memory, which reads nothing of the
 *    trainer's, is instead waited for by the compute stream before the
 *    gather that reads it). So zinc_module_grads_ready may follow the
 *    launch of the backward kernels at once, and zinc_module_release the
 *    launch of the kernels that read the module's parameters (memory zinc
 *    frees is handed out again only after the work queued on it before the
 *    free has completed).
 *  - What a call hands out is ready for kernels queued on the compute
 *    stream after it returns: zinc_module_fetch returns when the gathered
 *    parameters are complete (stage 3, a host wait on the gather; stages
 *    0-2 need none); a gradient buffer's zeroing is queued before any
 *    kernel the trainer queues after zinc_param_grad; zinc_step returns
 *    with the updated parameters in place (it synchronises the compute
 *    stream at the boundary). To read such a buffer from the host, or from
 *    another stream, first wait for the compute stream.
 *  - A gradient buffer belongs to zinc from zinc_module_grads_ready on: the
 *    trainer's kernels queued before that call may still be writing it
 *    (the reduction waits for them), none queued after it may touch it.
 */
#ifndef ZINC_H
#define ZINC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ZINC_API __attribute__((visibility("default")))
#else
#define ZINC_API
#endif

/* The one place the version is written: zinc_version() and the CMake
 * project version (library soname, zinc.pc) are made from these. */
#define ZINC_VERSION_MAJOR 0
#define ZINC_VERSION_MINOR 1
#define ZINC_VERSION_PATCH 0

/* ------------------------------------------------------------------ status */

typedef enum {
  ZINC_OK = 0,
  ZINC_ERR_INVALID,     /* bad argument or API misuse                       */
  ZINC_ERR_CONFIG,      /* the JSON config is malformed or contradictory    */
  ZINC_ERR_NOMEM,       /* an allocation (device, host or disk space) failed */
  ZINC_ERR_IO,          /* a file or disk operation failed                   */
  ZINC_ERR_COMM,        /* a collective failed or a peer was lost            */
  ZINC_ERR_DEVICE,      /* the device (CUDA) reported an error               */
  ZINC_ERR_UNSUPPORTED, /* asked for something this build cannot do          */
  ZINC_ERR_CORRUPT      /* a checkpoint or swap file failed its checks       */
} zinc_status;

/* Message of the last failure on the calling thread ("" if none).
 * [any thread] */
ZINC_API const char *zinc_last_error(void);

/* The largest size a caller-allocated struct may declare (see Conventions). */
#define ZINC_STRUCT_SIZE_MAX 65536
/* For the trainer's own callbacks (zinc_init_fn): set the calling thread's
 * message, printf-style, and return st, so that `return zinc_error_set(
 * ZINC_ERR_IO, "cannot read %s", path);` makes the failing zinc call report
 * why. zinc adds the rank and the parameter around it. */
ZINC_API zinc_status zinc_error_set(zinc_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;  /* [any thread] */
/* Name of a status ("ZINC_ERR_IO"). */
ZINC_API const char *zinc_status_name(zinc_status s);  /* [any thread] */
/* "MAJOR.MINOR.PATCH" of the library that is running (ZINC_VERSION_* are
 * those of the header compiled against), e.g. "0.1.0". */
ZINC_API const char *zinc_version(void);  /* [any thread] */

typedef enum { ZINC_F32, ZINC_BF16, ZINC_F16 } zinc_dtype;

/* Bytes per element of a dtype (4 or 2); 0 for an unknown value. */
ZINC_API size_t zinc_dtype_size(zinc_dtype dt);  /* [no engine] */
/* "f32", "bf16", "f16" */
ZINC_API const char *zinc_dtype_name(zinc_dtype dt);  /* [no engine] */
/* dst (n elements of dst_dtype) = src (n elements of src_dtype) in host
 * memory, on the calling thread, with the engine's own rounding (to nearest
 * even, as every cast inside zinc): a trainer that keeps fp32 copies of
 * 16-bit parameters or gradients gets the bits the engine would. dst and src
 * must not overlap unless they are equal with equal dtypes. INVALID for a
 * negative n, an unknown dtype or a NULL buffer with n > 0. */
ZINC_API zinc_status zinc_convert(void *dst, zinc_dtype dst_dtype, const void *src,
                                  zinc_dtype src_dtype, int64_t n);  /* [no engine] */

/* ------------------------------------------------------------------ config */

typedef struct zinc_config zinc_config;

/* Load and validate a DeepSpeed config file: JSON, or Hjson as DeepSpeed
 * reads it (comments, optional commas and quotes). As with DeepSpeed, a
 * `path` that names no file may be the config itself, URL-safe base64 of
 * any length (longer than a file name may be; a file that exists wins).
 * On failure *out is NULL and the message gives the JSON path, the value
 * found and what is expected.
 * Warnings (unknown keys, sections zinc does not implement) go to the logger. */
ZINC_API zinc_status zinc_config_load(const char *path, zinc_config **out);  /* [no engine] */
/* Same, from a string. */
ZINC_API zinc_status zinc_config_parse(const char *json_text, zinc_config **out);  /* [no engine] */
ZINC_API void zinc_config_free(zinc_config *cfg);  /* [config] */
/* Copy of the resolved settings as a JSON text (caller frees with free()).
 * Values still "auto" at this point (they resolve at engine creation/build)
 * are written as "auto". */
ZINC_API zinc_status zinc_config_to_json(const zinc_config *cfg, char **json_out);  /* [config] */
/* Print the resolved settings through the logger, as DeepSpeed prints its
 * config at start-up. */
ZINC_API void zinc_config_print(const zinc_config *cfg);  /* [config] */
/* Number of warnings the load produced (unknown keys, ignored sections). */
ZINC_API int zinc_config_warning_count(const zinc_config *cfg);  /* [config] */

/* Give the trainer's value for a key that configs write as "auto" (as
 * Hugging Face's Trainer fills them from its arguments before DeepSpeed
 * reads the file). `path` is the key's dotted JSON path in DeepSpeed's
 * spelling (either spelling where DeepSpeed has two):
 *   "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
 *   "train_batch_size" (HF: micro x accumulation x world size; or leave it
 *   to be derived at zinc_engine_create), "gradient_clipping",
 *   "fp16.enabled", "bf16.enabled" (0 or 1), "optimizer.params.lr",
 *   "optimizer.params.betas[0]", "optimizer.params.betas[1]",
 *   "optimizer.params.eps", "optimizer.params.weight_decay",
 *   "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr",
 *   "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps",
 *   "zero_optimization.reduce_bucket_size",
 *   "zero_optimization.stage3_prefetch_bucket_size",
 *   "zero_optimization.stage3_param_persistence_threshold",
 *   "zero_optimization.stage3_max_live_parameters",
 *   "zero_optimization.stage3_max_reuse_distance",
 *   "zero_optimization.stage3_gather_16bit_weights_on_model_save",
 *   "zero_optimization.offload_optimizer.pin_memory" / ".buffer_count",
 *   "zero_optimization.offload_param.pin_memory" / ".buffer_count".
 * What happens, by what the file has at `path`:
 *   "auto"          -> the key takes `value`: ZINC_OK.
 *   the same number -> nothing changes: ZINC_OK.
 *   another number  -> ZINC_ERR_CONFIG naming the path and both values (the
 *                      trainer and the file disagree; write "auto" in the
 *                      file or the same value in both). The settings are
 *                      unchanged.
 *   nothing         -> the key takes `value` (where DeepSpeed would take
 *                      its default: the trainer's value is the one its
 *                      user asked for), logged at info: ZINC_OK. Except a
 *                      scheduler parameter the file's schedule does not
 *                      have (no scheduler section, or total_num_steps with
 *                      WarmupLR): not used, logged at info, ZINC_OK.
 * ZINC_ERR_INVALID for a path zinc does not know (the message suggests the
 * nearest), a value that is not finite, out of the key's range, not an
 * integer for an integer key or not 0/1 for a flag; nothing changes then.
 * Call it before zinc_engine_create, with the same values on every rank
 * (create checks that the settings agree); the engine copies the config
 * and later calls change nothing in it. Values left "auto" resolve at
 * zinc_engine_create (DeepSpeed's default where one is safe, with a log
 * line; otherwise ZINC_ERR_CONFIG naming the key and this call) and at
 * zinc_engine_build (bucket sizes, fp16/bf16); docs/config.md lists each. */
ZINC_API zinc_status zinc_config_fill_auto(zinc_config *cfg, const char *path,
                                           double value);  /* [config] */

/* ------------------------------------------------------------------ engine */

typedef struct zinc_engine zinc_engine;
typedef struct zinc_module zinc_module;
typedef struct zinc_param zinc_param;

typedef struct {                 /* what a JSON file should not carry */
  size_t size;                   /* sizeof(zinc_options): ZINC_OPTIONS_INIT sets it */
  int   device;                  /* ZINC_DEVICE_AUTO: cuda_stream's GPU when one is
                                    given, else the local rank's GPU if CUDA is
                                    built and a GPU exists, else the CPU (more
                                    ranks on a node than GPUs it sees is
                                    ZINC_ERR_DEVICE on every rank, unless each
                                    rank sees one GPU: CUDA_VISIBLE_DEVICES per
                                    rank); ZINC_DEVICE_CPU; or a CUDA ordinal
                                    >= 0. Two ranks of one node on one GPU, or a
                                    device that fails on any rank, fail
                                    zinc_engine_create on every rank */
  void *mpi_comm;                /* MPI_Comm* to use instead of MPI_COMM_WORLD, or NULL;
                                    duplicated by zinc_engine_create, so it need not
                                    outlive the call */
  int   model_parallel_size;     /* 1 = pure data parallel */
  void *cuda_stream;             /* cudaStream_t the trainer computes on, or NULL
                                    (the legacy default stream); ignored on the CPU.
                                    Its GPU is the device under ZINC_DEVICE_AUTO; an
                                    explicit device other than the stream's GPU is
                                    ZINC_ERR_DEVICE naming both and the rank */
  int   threads;                 /* optimizer/kernel threads on the CPU;
                                    0 = this rank's share of its cpuset */
  int64_t hidden_size;           /* the model's hidden size h (d_model), for the
                                    config's "auto" bucket sizes, as Hugging Face
                                    computes them: reduce_bucket_size = h*h,
                                    stage3_prefetch_bucket_size = 0.9*h*h,
                                    stage3_param_persistence_threshold = 10*h.
                                    0 = not given: a size written "auto" is then
                                    ZINC_ERR_CONFIG at zinc_engine_build */
  int   pipeline_parallel_size;  /* pipeline stages p; 0 or 1 = no pipeline. The
                                    world is p x d x t ranks (t =
                                    model_parallel_size, d data-parallel) in
                                    Megatron-LM's order, tensor-parallel rank
                                    fastest, then data-parallel, then stage:
                                    world rank = (stage*d + dp_rank)*t + mp_rank
                                    ("Pipeline parallelism" below) */
} zinc_options;
#define ZINC_DEVICE_AUTO (-2)
#define ZINC_DEVICE_CPU  (-1)
/* Fields are only ever added at the end; initialise with this and set the
 * ones you need: fields beyond opt->size (a trainer compiled against an
 * older header) take these defaults. */
#define ZINC_OPTIONS_INIT \
  { sizeof(zinc_options), ZINC_DEVICE_AUTO, NULL, 1, NULL, 0, 0, 0 }

/* Create an engine. Collective over the communicator: every rank calls it.
 * Under an MPI launcher (mpirun, srun) with MPI not initialised, zinc
 * initialises it (MPI_THREAD_MULTIPLE) and finalises it at process exit; a
 * process started on its own is a world of one and uses no MPI. cfg is
 * copied; the caller may free it. */
ZINC_API zinc_status zinc_engine_create(const zinc_config *cfg,
                                        const zinc_options *opt,
                                        zinc_engine **out);  /* [collective] */
/* Free everything the engine owns: memory, threads, files (swap files are
 * removed). Accepts NULL. Collective when the engine was built, except
 * after ZINC_ERR_COMM from a lost or frozen peer: then it returns at once,
 * skipping the collective frees (the node's shared windows stay mapped
 * until the process ends), and the process can exit with its own status.
 * MPI_Finalize would wait for the lost rank: when zinc initialised MPI it
 * does not finalise it at exit after such a failure; a trainer that
 * initialised MPI should then exit, or MPI_Abort, rather than finalise. */
ZINC_API void zinc_engine_destroy(zinc_engine *e);  /* [collective] */

/* Rank and size in the whole world. */
ZINC_API int zinc_rank(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_world_size(const zinc_engine *e);  /* [any thread] */
/* Rank and size in the data-parallel group (ZeRO partitions over it). */
ZINC_API int zinc_dp_rank(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_dp_size(const zinc_engine *e);  /* [any thread] */
/* Rank and size in the model-parallel group (consecutive world ranks). */
ZINC_API int zinc_mp_rank(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_mp_size(const zinc_engine *e);  /* [any thread] */
/* Pipeline stage and number of stages (1 without a pipeline); the rest of
 * the pipeline's queries are under "Pipeline parallelism" below. */
ZINC_API int zinc_pp_rank(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_pp_size(const zinc_engine *e);  /* [any thread] */
/* 1 when the engine computes on a CUDA device, 0 on the CPU. */
ZINC_API int zinc_engine_on_gpu(const zinc_engine *e);  /* [any thread] */

/* --------------------------------------------------------------- registry */

/* Register a module (a unit that is fetched, computed and released together,
 * e.g. a transformer block). Modules are laid out in registration order;
 * register them in forward order. Returns NULL on error (zinc_last_error). */
ZINC_API zinc_module *zinc_module_add(zinc_engine *e, const char *name);  /* [engine] */

/* Register a parameter of module m: name (unique within m), dtype (the
 * compute dtype: the full tensor the trainer reads), shape (ndim 1..8, each
 * dimension > 0). Returns NULL on error. */
ZINC_API zinc_param *zinc_param_add(zinc_engine *e, zinc_module *m,
                                    const char *name, zinc_dtype dtype,
                                    int ndim, const int64_t *shape);  /* [engine] */

/* Weight decay applies to a parameter unless turned off here (biases and
 * norm scales usually are). enabled = 1 restores the config's
 * weight_decay (dropping a value set below). Call before
 * zinc_engine_build. */
ZINC_API zinc_status zinc_param_set_weight_decay(zinc_param *p, int enabled);  /* [engine] */
/* Parameter groups. The weight decay of p is `wd` instead of the config's
 * weight_decay (and decay is enabled for p; wd 0 is the same as
 * zinc_param_set_weight_decay(p, 0)). wd must be >= 0 and finite.
 * The learning rate of p is `scale` x the schedule's lr (or x the lr of
 * zinc_engine_set_lr); scale must be >= 0 and finite, default 1; 0 leaves
 * p unchanged by the step (its optimizer state still advances: freeze it
 * with zinc_param_set_frozen to save that memory too).
 * The distinct (lr scale, weight decay) pairs of the model form its
 * parameter groups, at most ZINC_MAX_PARAM_GROUPS (zinc_engine_build fails
 * with ZINC_ERR_INVALID naming the parameter beyond it). Call before
 * zinc_engine_build; every rank must make the same calls (the build fails
 * on every rank otherwise, naming the parameter and the rank). */
#define ZINC_MAX_PARAM_GROUPS 64
ZINC_API zinc_status zinc_param_set_weight_decay_value(zinc_param *p, double wd);  /* [engine] */
ZINC_API zinc_status zinc_param_set_lr_scale(zinc_param *p, double scale);  /* [engine] */
/* A frozen parameter (frozen = 1) is not trained: zinc_param_grad returns
 * NULL for it (zinc_last_error says why) and the engine holds no gradient
 * memory, no optimizer state and no reduction for it; it is left out of
 * the gradient norm and never changed by the step. It stays a parameter:
 * partitioned (stage 3 gathers it with its module), readable, exported,
 * and saved in checkpoints as parameter values (its exp_avg/exp_avg_sq
 * read and save as zeros; loaded values of those are ignored). A
 * checkpoint saved with p frozen loads where p is trainable (p takes the
 * saved value and starts from zero moments, as a parameter DeepSpeed
 * unfreezes does) and the reverse (p keeps the saved value, its saved
 * moments are dropped). Default 0.
 * Call before zinc_engine_build; every rank
 * must freeze the same parameters. */
ZINC_API zinc_status zinc_param_set_frozen(zinc_param *p, int frozen);  /* [engine] */

/* With model parallelism (zinc_options.model_parallel_size > 1), each
 * model-parallel rank registers its own shard of a tensor-parallel layer
 * under the same name; the gradient norm used for clipping and the inf/NaN
 * check that skips a step cover the whole model across the model-parallel
 * group. A parameter is sharded across the group unless marked here:
 * replicated = 1 means the same full tensor on every model-parallel rank
 * (layer norms, the bias of a row-parallel layer, anything not split), so
 * that the norm counts it once (on model-parallel rank 0). The gradients of
 * a replicated parameter must be the same on every model-parallel rank (the
 * trainer all-reduces them, as Megatron does). Default 0. No effect with
 * model_parallel_size 1. Call before zinc_engine_build; every rank must
 * mark the same parameters. */
ZINC_API zinc_status zinc_param_set_replicated(zinc_param *p, int replicated);  /* [engine] */

/* The trainer's own tag on p (its tensor record, a file offset, ...): any
 * pointer, stored and handed back by zinc_param_user, never read or freed
 * by zinc. Any time, any thread that owns p's engine; default NULL. It is
 * how a zinc_init_fn (which receives p) reaches the trainer's data for p. */
ZINC_API zinc_status zinc_param_set_user(zinc_param *p, void *user);
/* The tag set by zinc_param_set_user, or NULL (also for a NULL p). */
ZINC_API void *zinc_param_user(const zinc_param *p);

/* Fill the full tensor of `p` (numel fp32 values in host memory) with the same
 * values on every rank; the engine converts and partitions it. p's tag
 * (zinc_param_user) reaches the trainer's own data for p. To fail, return
 * a status other than ZINC_OK, best through zinc_error_set, whose message
 * the build then carries: zinc_engine_build returns that status on every
 * rank, with a message naming the lowest failing rank, the parameter and
 * the callback's own words ("... cannot read pretrained.bin ..."). */
typedef zinc_status (*zinc_init_fn)(const zinc_param *p, float *dst,
                                    int64_t numel, void *ctx);

/* Lay the registered parameters out, allocate every buffer, partition, and
 * initialise the parameters through `init` (called once per parameter, in
 * registration order, on every rank). Resolves config values that depend on
 * the model: "auto" bucket sizes from zinc_options.hidden_size (CONFIG naming
 * the key when it was not given), "auto" fp16/bf16 from the parameters'
 * dtypes. Collective. */
ZINC_API zinc_status zinc_engine_build(zinc_engine *e, zinc_init_fn init,
                                       void *ctx);  /* [collective] */

ZINC_API const char *zinc_module_name(const zinc_module *m);  /* [engine] */
ZINC_API zinc_module *zinc_module_find(const zinc_engine *e, const char *name);  /* [engine] */
ZINC_API const char *zinc_param_name(const zinc_param *p);  /* [engine] */
ZINC_API int64_t zinc_param_numel(const zinc_param *p);  /* [engine] */
ZINC_API zinc_dtype zinc_param_dtype(const zinc_param *p);  /* [engine] */
/* Shape of p: returns ndim and, if shape is not NULL, writes ndim values. */
ZINC_API int zinc_param_shape(const zinc_param *p, int64_t *shape);  /* [engine] */
ZINC_API zinc_module *zinc_param_module(const zinc_param *p);  /* [engine] */
/* Number of registered modules/parameters and access by index. */
ZINC_API int zinc_module_count(const zinc_engine *e);  /* [engine] */
ZINC_API zinc_module *zinc_module_at(const zinc_engine *e, int index);  /* [engine] */
ZINC_API int zinc_module_param_count(const zinc_module *m);  /* [engine] */
ZINC_API zinc_param *zinc_module_param_at(const zinc_module *m, int index);  /* [engine] */

/* --------------------------------------------------------------- training */

/* Make the full parameters of m available (stage 3: all-gather, or wait for
 * the prefetch started earlier; other stages: nothing to do). Collective in
 * stage 3: every rank fetches the same modules in the same order. */
ZINC_API zinc_status zinc_module_fetch(zinc_engine *e, zinc_module *m);  /* [collective] */
/* The trainer is done with m's parameters for now (stage 3 frees the
 * gathered copy unless it is reused soon). */
ZINC_API zinc_status zinc_module_release(zinc_engine *e, zinc_module *m);  /* [collective] */

/* The full tensor of p in its compute dtype, on the engine's device; valid
 * between fetch and release. NULL (and zinc_last_error) when not fetched. */
ZINC_API void *zinc_param_data(zinc_param *p);  /* [engine] */
/* The gradient buffer of p (p's dtype, p's shape, on the device) that the
 * backward pass accumulates into (+=). It is zeroed by the engine when it is
 * first handed out in an accumulation window (stages 0-1) or micro-batch
 * (stages 2-3); the trainer never zeroes it. Valid until grads_ready(m).
 * NULL (and zinc_last_error) when p's module is not fetched or p is
 * frozen (zinc_param_set_frozen). */
ZINC_API void *zinc_param_grad(zinc_param *p);  /* [engine] */
/* m's gradients for this micro-batch are complete: the engine may start
 * reducing them (stage 2/3: reduce-scatter, overlapped with the trainer's
 * next module when overlap_comm is on). Every module whose gradient was
 * handed out in the micro-batch must be reported before backward_end.
 *
 * The order of fetch/release/grads_ready calls is recorded in the first
 * micro-batch and followed afterwards (stage-3 prefetch). It may change
 * (a dropped layer, an unused expert) when every data-parallel rank changes
 * it the same way at the same call: the ranks agree there and record the
 * order again. A rank that changes it alone fails on every rank with
 * ZINC_ERR_INVALID, and the engine stops. */
ZINC_API zinc_status zinc_module_grads_ready(zinc_engine *e, zinc_module *m);  /* [collective] */
/* Shared (tied) weights: a parameter that two modules read (GPT-2's token
 * embedding wte is also its output projection) stays a parameter of ONE
 * module, its owner; the other module fetches the owner too while it needs
 * the weight. The trainer's micro-batch, with wte owned by embed and read
 * by head:
 *
 *   forward:   fetch(embed) ... release(embed)          wte: embedding
 *              (the blocks)
 *              fetch(head); fetch(embed)                wte: projection
 *              ... release(embed); release(head)
 *   backward:  fetch(head); fetch(embed)
 *              grad(lnf) += ...; grad(wte) += ...       first use's share
 *              grads_ready(head)
 *              release(embed)       no grads_ready: wte's gradient is not
 *              release(head)        complete yet
 *              (the blocks, in reverse)
 *              fetch(embed)
 *              grad(wte) += ...                         second use's share
 *              grads_ready(embed); release(embed)
 *              backward_end()
 *
 * The contract, at every stage, with or without overlap_comm and offload:
 *  - A module may be fetched more than once in a micro-batch, also while
 *    another module is fetched (the owner inside the module that borrows
 *    its weight), and is released once per fetch.
 *  - Once a module's gradient is handed out in a micro-batch, its buffer
 *    and what was added to it survive release: every later zinc_param_grad
 *    of the module in the micro-batch returns the same buffer, unzeroed,
 *    so each use adds (+=) its share to the earlier ones. The engine
 *    reduces the sum once, at the module's zinc_module_grads_ready, which
 *    the trainer calls once, after the last use in the backward pass.
 *  - Refused with ZINC_ERR_INVALID: a gradient asked for after that
 *    grads_ready (the share would be lost: zinc_param_grad returns NULL),
 *    a second grads_ready of the module, and zinc_backward_end while a
 *    handed-out gradient was never reported.
 *  - Like any module, the owner is fetched in the same order on every
 *    rank and in every micro-batch (the order is recorded; see
 *    zinc_module_grads_ready).
 *  - Freezing the shared parameter freezes both uses (zinc_param_set_frozen).
 * Bitwise: stages 0-3 give the same bits for a tied weight when each
 * micro-batch is its own accumulation window. With gradient accumulation,
 * stages 0-1 add the next micro-batch's shares into the same buffer before
 * reducing while stages 2-3 reduce each micro-batch first, so the fp32
 * sums may round differently between the two.
 * The memory cost: the owner's gradient buffer is held from the first use's
 * backward to the last (stages 2-3: a slot in the bucket ring, or, when
 * the ring is full, its own buffer with a warning). */

/* The micro-batch's backward pass is over: every pending reduction is
 * finished before this returns. Collective. Refused with ZINC_ERR_INVALID
 * on every rank, changing nothing, when on any rank a module is still
 * fetched or a module's gradient was handed out but not reported with
 * zinc_module_grads_ready: put it right and call again. Until zinc_step,
 * fetch and grads_ready are refused (the micro-batch is over). A
 * micro-batch that only fetched and released modules, handing out no
 * gradient (forward-only work outside eval_begin/eval_end), is refused the
 * same way, on every rank and changing nothing, saying "use
 * zinc_eval_begin/zinc_eval_end" (in the first micro-batch too); one that
 * starts over after such a pass (fetches its first module again) fails
 * there on every rank, saying the same, and the engine stops. In the very
 * first micro-batch such a pass is recorded with the module order (a model
 * may run its forward twice); the next micro-batch that does not run it
 * again fails the same way. */
ZINC_API zinc_status zinc_backward_end(zinc_engine *e);  /* [collective] */

typedef struct {
  size_t  size;        /* sizeof(zinc_step_info): ZINC_STEP_INFO_INIT sets it */
  int64_t step;        /* optimizer steps taken so far */
  int     boundary;    /* 1 if this call ended an accumulation window */
  int     skipped;     /* 1 if the step was skipped for overflow */
  float   grad_norm;   /* global L2 norm before clipping */
  float   loss_scale;  /* scale in force after this call */
  float   lr;          /* learning rate used (before each parameter's lr scale):
                          the scheduler's, or zinc_engine_set_lr's */
  int64_t micro_step;  /* micro-batches seen so far */
} zinc_step_info;
#define ZINC_STEP_INFO_INIT { .size = sizeof(zinc_step_info) }

/* Count one micro-batch; at the accumulation boundary run the optimizer:
 * gradients summed over ranks and micro-batches are divided by
 * (data-parallel size x gradient_accumulation_steps) and by the loss scale
 * (prescale_gradients and gradient_predivide_factor move part of the first
 * division before the sum over ranks, as DeepSpeed's; docs/config.md),
 * checked for inf/nan on every rank (a skipped step changes no parameter and
 * no optimizer state), clipped by the global L2 norm, and Adam/AdamW updates
 * the fp32 master shard; parameters are then gathered as the stage needs.
 * After "zinc": {"max_consecutive_skips": N} (50) skipped steps in a row
 * that a lower loss scale cannot cure (fp16 at min_loss_scale, any skip
 * with bf16/fp32), it fails with ZINC_ERR_INVALID on every rank and the
 * engine stops. info may be NULL. */
ZINC_API zinc_status zinc_step(zinc_engine *e, zinc_step_info *info);  /* [collective] */

/* Drive the learning rate from the trainer: from the next zinc_step on,
 * the optimizer uses `lr` (times each parameter's lr scale) instead of the
 * config's scheduler, until called again; a negative lr goes back to the
 * scheduler (at the engine's step count). lr must be finite. Call after
 * zinc_engine_build, between steps; every rank must pass the same value
 * (not checked: it involves no collective). zinc_step_info.lr reports the
 * lr used. The setting is not saved in checkpoints: a trainer that drives
 * its own schedule sets it again after zinc_load_checkpoint. */
ZINC_API zinc_status zinc_engine_set_lr(zinc_engine *e, double lr);  /* [engine] */

/* The factor the trainer multiplies its loss gradient by (fp16 dynamic or
 * static loss scaling); 1 for fp32/bf16. */
ZINC_API float zinc_loss_scale(const zinc_engine *e);  /* [engine] */
/* Optimizer steps taken so far (after a load, the saved count), and
 * micro-batches counted by zinc_step. */
ZINC_API int64_t zinc_step_count(const zinc_engine *e);  /* [engine] */
ZINC_API int64_t zinc_micro_step_count(const zinc_engine *e);  /* [engine] */
/* The ZeRO stage, and the offload target of the optimizer state
 * (params = 0) or of the parameters (params = 1): "none", "cpu", "nvme". */
ZINC_API int zinc_zero_stage(const zinc_engine *e);  /* [engine] */
ZINC_API const char *zinc_offload_name(const zinc_engine *e, int params);  /* [engine] */

/* Forward-only work between steps (evaluation, sampling): inside
 * eval_begin/eval_end, fetch and release follow the trainer's own order
 * (stage 3 gathers on every fetch, no prefetch) and nothing is recorded or
 * compared with the training order; gradients cannot be handed out.
 * Collective at every stage: every data-parallel rank makes the same
 * calls, and each fetch and eval_end are checked across the ranks (one
 * small all-reduce each), so work on some ranks only (sampling on rank 0
 * alone) fails on every rank with ZINC_ERR_INVALID at its first fetch, at
 * stages 0-2 as at stage 3, which cannot serve it; the engine stops.
 * Call between zinc_step and the next micro-batch. */
ZINC_API zinc_status zinc_eval_begin(zinc_engine *e);  /* [collective] */
ZINC_API zinc_status zinc_eval_end(zinc_engine *e);  /* [collective] */
/* Learning rate the next step will use. */
ZINC_API float zinc_lr(const zinc_engine *e);  /* [engine] */
/* Micro-batch size per rank and accumulation steps, as resolved. */
ZINC_API int zinc_micro_batch_size(const zinc_engine *e);  /* [engine] */
ZINC_API int zinc_gradient_accumulation_steps(const zinc_engine *e);  /* [engine] */
ZINC_API int64_t zinc_train_batch_size(const zinc_engine *e);  /* [engine] */
/* Configured steps_per_print (a file's 0, "never", and anything above
 * INT_MAX come back as INT_MAX) and wall_clock_breakdown. */
ZINC_API int zinc_steps_per_print(const zinc_engine *e);  /* [engine] */
ZINC_API int zinc_wall_clock_breakdown(const zinc_engine *e);  /* [engine] */
/* The settings the engine runs with, as zinc_config_to_json writes them
 * (caller frees with free()): after zinc_engine_create every "auto" is
 * resolved but the bucket sizes and fp16/bf16, which resolve at
 * zinc_engine_build. */
/* [engine] */
ZINC_API zinc_status zinc_engine_config_to_json(const zinc_engine *e, char **json_out);

typedef enum { ZINC_REDUCE_SUM, ZINC_REDUCE_MAX, ZINC_REDUCE_MIN,
               ZINC_REDUCE_MEAN } zinc_reduce_op;
/* The group a trainer's host collective runs over: every rank, the ranks
 * that hold the same model shard (data-parallel group, zinc_dp_rank and
 * zinc_dp_size), the ranks of one stage that hold one replica's shards
 * (model-parallel group, consecutive world ranks, zinc_mp_rank), or the
 * stages of one replica's shard (pipeline group, zinc_pp_rank; a group
 * of one without a pipeline). "Pipeline parallelism" lists each. */
typedef enum { ZINC_SCOPE_WORLD, ZINC_SCOPE_DP, ZINC_SCOPE_MP,
               ZINC_SCOPE_PP } zinc_scope;
/* All-reduce n host doubles over `scope`, in place, for a trainer's own
 * figures (mean loss, token counts); MEAN divides the sum by the group's
 * size. Every rank of the group calls it with the same n and op.
 * [collective] */
ZINC_API zinc_status zinc_allreduce_host_scope(zinc_engine *e, zinc_scope scope,
                                               double *values, int n, zinc_reduce_op op);
/* All-gather n host doubles from every rank of `scope` into out (group
 * size x n), rank r's values at out + r*n, r its rank in that group.
 * [collective] */
ZINC_API zinc_status zinc_allgather_host_scope(zinc_engine *e, zinc_scope scope,
                                               const double *values, int n, double *out);
/* The two calls of 0.1.0, kept as they were: zinc_allreduce_host is
 * zinc_allreduce_host_scope(ZINC_SCOPE_DP) (with model parallelism, a
 * loss mean over replicas) and zinc_allgather_host is
 * zinc_allgather_host_scope(ZINC_SCOPE_WORLD). New code names its scope.
 * [collective] */
ZINC_API zinc_status zinc_allreduce_host(zinc_engine *e, double *values,
                                         int n, zinc_reduce_op op);
ZINC_API zinc_status zinc_allgather_host(zinc_engine *e, const double *values,
                                         int n, double *out);  /* [collective] */

/* Wall-clock seconds spent by the engine in its phases since the last call
 * (forward = fetch..first grad, backward, step, comm waits: the waits for
 * collectives and for the agreements before them, in any phase), for
 * wall_clock_breakdown reporting. Resets the counters. */
typedef struct {
  size_t size;         /* sizeof(zinc_timers): ZINC_TIMERS_INIT sets it */
  double forward, backward, step, comm_wait;
} zinc_timers;
#define ZINC_TIMERS_INIT { .size = sizeof(zinc_timers) }
ZINC_API zinc_status zinc_timers_take(zinc_engine *e, zinc_timers *out);  /* [engine] */

/* -------------------------------------------------------------- monitors */

/* DeepSpeed's "csv_monitor" and "tensorboard" sections ({"enabled",
 * "output_path", "job_name"}; "wandb" and "comet" are accepted with a
 * warning: zinc does not write them). World rank 0 writes under
 * output_path/job_name: csv, one file per metric as DeepSpeed's
 * csv_monitor ("Train/Samples/lr" -> Train_Samples_lr.csv, rows
 * "step,<value>"); tensorboard, an events.out.tfevents.* file TensorBoard
 * opens. The step of every row is the samples trained so far
 * (zinc_global_samples). At each accumulation boundary zinc_step writes
 * Train/Samples/lr, Train/Samples/loss_scale (fp16), Train/Samples/grad_norm,
 * Train/Samples/step_time_ms and Train/Samples/memory_<location>_<category>
 * (bytes held), and with "wall_clock_breakdown" DeepSpeed's
 * Train/Samples/elapsed_time_ms_{forward,backward,backward_inner,
 * backward_allreduce,step}; it also prints DeepSpeed's "[Rank 0] time (ms)
 * | fwd_microstep: ..." line after every call and "| fwd: ..." at each
 * boundary. A monitor write that fails inside zinc_step is logged once and
 * stops the monitors; the step is not failed. */

/* Samples trained so far: accumulation boundaries (skipped steps included)
 * x train_batch_size, as DeepSpeed's global_samples. [engine] */
ZINC_API int64_t zinc_global_samples(const zinc_engine *e);
/* Write the trainer's own figure `name` = value at zinc_global_samples:
 * DeepSpeed's name for the loss is "Train/Samples/train_loss". Pass the
 * same value on every rank (its mean over ranks); only world rank 0
 * writes, every other rank returns ZINC_OK at once. Not collective.
 * ZINC_ERR_IO when rank 0's write fails (the message names the file).
 * [engine] */
ZINC_API zinc_status zinc_monitor_scalar(zinc_engine *e, const char *name, double value);
/* Push the event file's buffered records to disk (the engine flushes at
 * each boundary and at destroy). [engine] */
ZINC_API zinc_status zinc_monitor_flush(zinc_engine *e);

/* ---------------------------------------------------------- comms logger */

/* DeepSpeed's "comms_logger" section ({"enabled", "verbose", "prof_all",
 * "prof_ops", "debug"}): with enabled, every collective the engine issues
 * (its data-parallel, model-parallel and world groups) is counted on the
 * rank that issues it, in one row per (op, message size, algorithm), and
 * world rank 0 prints DeepSpeed's summary table to stdout at
 * zinc_engine_destroy, as DeepSpeed prints it (stdout is flushed first and
 * the table written as one block, so it follows what the trainer printed
 * and none of the trainer's lines fall inside it). Message size is DeepSpeed's: the op's input
 * (all-reduce and broadcast: the buffer; reduce-scatter: the whole input,
 * every rank's slice; all-gather(v): this rank's part; barrier: 0). Wire
 * bytes are what this rank put on the way to its peers (a peer reading this
 * rank's shared memory counts as sent to that peer), split by whether the
 * peer shares this rank's node; the nccl backend cannot see its wire
 * traffic and reports the ring algorithm's bytes as wire_estimated. A
 * compressed collective (a quantized reduce-scatter, sent as an
 * all-to-all-v of encoded blocks) is counted in a row of the op it stands
 * for with its codec ("reduce_scatter (int4)"): message size and wire
 * bytes are the compressed ones, logical_bytes what the uncompressed op
 * would have put on the wire. */
typedef enum {
  ZINC_COMMS_ALL_REDUCE = 0,
  ZINC_COMMS_REDUCE_SCATTER,
  ZINC_COMMS_ALL_GATHER,
  ZINC_COMMS_ALL_GATHERV,
  ZINC_COMMS_BROADCAST,
  ZINC_COMMS_BARRIER,
  ZINC_COMMS_ALL_TO_ALL_V,  /* "all_to_all_v": DeepSpeed's all_to_all_single with
                               per-rank counts; the engine's compressed
                               reduce-scatters run on it but are counted as
                               reduce_scatter rows with a codec             */
  ZINC_COMMS_NOPS
} zinc_comms_op;

typedef struct {
  size_t size;            /* sizeof(zinc_comms_stat): ZINC_COMMS_STAT_INIT sets it */
  int op;                 /* zinc_comms_op                                       */
  const char *name;       /* "all_reduce", "reduce_scatter", ... (static)        */
  const char *algo;       /* the path that ran it: "shm", "p2p", "nccl", "self",
                             ... (static)                                        */
  const char *group;      /* "data_parallel", "model_parallel", "world" with
                             "debug": true; NULL otherwise (static)              */
  uint64_t msg_bytes;     /* the row's message size (see above)                 */
  uint64_t count;         /* calls                                               */
  double total_ms;        /* summed latency                                      */
  double algbw_gbps, busbw_gbps; /* mean over the calls (DeepSpeed's tput, busbw) */
  uint64_t wire_intra, wire_inter; /* bytes this rank sent to peers on its own
                                      node / on other nodes                      */
  uint64_t wire_estimated;  /* nccl: the ring algorithm's bytes, not measured */
  int ranks;              /* size of the group the calls ran on (the n of the
                             bandwidths); groups of two sizes get two rows   */
  /* Compressed collectives (communication_data_type, quantized gradients
   * or weights) get rows of their own, under the op they stand for: */
  uint64_t logical_bytes; /* the wire bytes the uncompressed op would have
                             sent from this rank (closed form, nccl's ring
                             formula; the mpi paths measure the same for
                             plain ops); 0 on a plain row                   */
  const char *codec;      /* "int4", "int8", "bf16", ...; NULL on a plain row
                             (static)                                        */
} zinc_comms_stat;
#define ZINC_COMMS_STAT_INIT { .size = sizeof(zinc_comms_stat) }

/* This rank's counters since the engine began (or zinc_comms_reset): up to
 * cap rows into out, *n = the number of rows there are (call with cap 0 to
 * size the array). Every element of out must be initialised with
 * ZINC_COMMS_STAT_INIT: out[0].size is the stride. Rows come in op order,
 * then by message size. ZINC_ERR_UNSUPPORTED when comms_logger is not
 * enabled. [engine] */
ZINC_API zinc_status zinc_comms_stats(const zinc_engine *e, zinc_comms_stat *out, int cap,
                                      int *n);
/* Print the summary now, to stdout as at destroy (world rank 0 prints;
 * others print nothing): per
 * op and message size DeepSpeed's columns (count, total and average
 * latency in ms, tput and busbw in Gbps), then zinc's (algorithm, wire
 * bytes intra-node and inter-node; with compressed rows also the
 * uncompressed bytes and the ratio, and one line per compressed row after
 * the table). Not collective. ZINC_ERR_UNSUPPORTED
 * when comms_logger is not enabled. [engine] */
ZINC_API zinc_status zinc_comms_log_summary(zinc_engine *e);
/* Forget every row (DeepSpeed's reset_log). [engine] */
ZINC_API zinc_status zinc_comms_reset(zinc_engine *e);

/* --------------------------------------------------- full-state access */

typedef enum {
  ZINC_STATE_PARAM,      /* master value of the parameter (fp32, or bf16
                            widened with bf16_master_weights_and_grads)  */
  ZINC_STATE_GRAD,       /* reduced, averaged gradient (valid after the
                            last backward_end of a window, before step)  */
  ZINC_STATE_EXP_AVG,    /* Adam and Lamb m; Lion m; SGD's momentum buffer */
  ZINC_STATE_EXP_AVG_SQ  /* Adam and Lamb v; Adagrad's sum of squares      */
} zinc_state_kind;

/* Read the full fp32 tensor of p's state into dst (numel floats, host
 * memory), gathering from every rank. Collective: every rank calls it with
 * the same p and kind. (DeepSpeed's safe_get_full_*.) A state slot the
 * optimizer does not keep (EXP_AVG_SQ with Lion) is ZINC_ERR_INVALID. */
ZINC_API zinc_status zinc_param_get_full(zinc_engine *e, zinc_param *p,
                                         zinc_state_kind kind, float *dst);  /* [collective] */
/* Overwrite the full fp32 state of p from src (numel floats, identical on
 * every rank); PARAM also updates the compute-dtype copy. Collective.
 * GRAD cannot be set. */
ZINC_API zinc_status zinc_param_set_full(zinc_engine *e, zinc_param *p,
                                         zinc_state_kind kind, const float *src);  /* [collective] */

/* ------------------------------------------------------------- memory */

/* What a byte the engine holds is for (ZINC_MEM_NCAT: the number of
 * categories, for array sizes). */
typedef enum {
  ZINC_MEM_PARAMS,
  ZINC_MEM_GRADS,
  ZINC_MEM_OPTIM,
  ZINC_MEM_BUFFERS,
  ZINC_MEM_ACTIVATIONS,
  ZINC_MEM_OTHER,
  ZINC_MEM_NCAT
} zinc_mem_category;
/* Where it lives (ZINC_LOC_N: the number of locations, for array sizes). */
typedef enum { ZINC_LOC_DEVICE, ZINC_LOC_HOST, ZINC_LOC_NVME, ZINC_LOC_N } zinc_mem_location;
enum { ZINC_PHASE_FWD, ZINC_PHASE_BWD, ZINC_PHASE_OPT, ZINC_MEM_NPHASE };
typedef struct {
  size_t   size;       /* sizeof(zinc_mem_stats): ZINC_MEM_STATS_INIT sets it */
  uint64_t current[ZINC_LOC_N][ZINC_MEM_NCAT];
  uint64_t peak[ZINC_LOC_N][ZINC_MEM_NCAT];
  uint64_t peak_total[ZINC_LOC_N];
  uint64_t theoretical_model_states;   /* ZeRO formula, bytes per rank */
  /* The fields below came later and are appended at the end, so the offsets
   * of the fields above stay as they were (ABI order): add new ones last. */
  uint64_t phase_peak[ZINC_MEM_NPHASE][ZINC_LOC_N]; /* peak total while in
                                          forward / backward / step        */
  uint64_t last_step_peak[ZINC_LOC_N];   /* peak total during the last
                                          complete step (micro-batches
                                          through the optimizer)           */
  int64_t device_free, device_total;     /* as the driver sees it (CUDA:
                                          cudaMemGetInfo; cpu: MemAvailable
                                          and MemTotal); -1 unknown        */
  int64_t device_process;                /* this process's usage (NVML), or -1 */
} zinc_mem_stats;
#define ZINC_MEM_STATS_INIT { .size = sizeof(zinc_mem_stats) }

/* Current and peak bytes the engine holds, by location and category.
 * Model states = PARAMS + GRADS + OPTIM. BUFFERS holds communication
 * buckets and stage-3 gathered parameters. */
ZINC_API zinc_status zinc_memory_stats(const zinc_engine *e, zinc_mem_stats *out);  /* [engine] */
/* This rank's memory as a table (json = 0) or a JSON object (json = 1):
 * current and peak bytes per location and category, the ZeRO formula and
 * the difference to it, phase peaks. *text is malloc'ed; free() it. */
ZINC_API zinc_status zinc_memory_report(const zinc_engine *e, int json, char **text);  /* [engine] */
/* Collective: every rank's figures gathered; on rank 0 *text is one table
 * (or JSON) with each rank and the min/max/mean across ranks; on other
 * ranks *text is NULL. */
/* [collective] */
ZINC_API zinc_status zinc_memory_report_all(zinc_engine *e, int json, char **text);
/* Write the memory timeline sampled so far (config "zinc.memory_timeline")
 * now; it is also written at zinc_engine_destroy. */
ZINC_API zinc_status zinc_memory_timeline_flush(zinc_engine *e);  /* [engine] */
/* Name of a zinc_mem_category ("params") or zinc_mem_location ("device").
 * [no engine] */
ZINC_API const char *zinc_mem_category_name(int cat);
ZINC_API const char *zinc_mem_location_name(int loc);  /* [no engine] */
/* What a location is on this engine, for reports: on a GPU engine the
 * names above; on the CPU device the device's memory is host memory, so
 * ZINC_LOC_DEVICE is "host" and ZINC_LOC_HOST (pinned offload buffers)
 * "host_offload". The reports (zinc_memory_report, the monitors) use
 * these; the JSON report keeps the zinc_mem_location_name keys and says
 * "device_is_host". [engine] */
ZINC_API const char *zinc_engine_location_name(const zinc_engine *e, int loc);
/* Memory the trainer holds for its activations, counted in every report
 * and in zinc_mem_stats under ZINC_MEM_ACTIVATIONS at `location`
 * (ZINC_LOC_DEVICE or ZINC_LOC_HOST): `name` (1..63 bytes) names the
 * block; registering a name again replaces its bytes and location;
 * unregistering a name that is not registered is ZINC_ERR_INVALID. The
 * engine allocates nothing for it. [engine] */
ZINC_API zinc_status zinc_memory_register_activations(zinc_engine *e, const char *name,
                                                      int location, uint64_t bytes);
/* [engine] */
ZINC_API zinc_status zinc_memory_unregister_activations(zinc_engine *e, const char *name);

/* ------------------------------------------- activation checkpointing */

/* Keep a layer's input activation for recomputation in the backward pass
 * (DeepSpeed's activation_checkpointing section). `id` names the checkpoint
 * (a layer index, >= 0); data holds `bytes` bytes in device memory,
 * identical on every rank of the model-parallel group. With
 * partition_activations each rank of the group keeps its 1/mp slice; with
 * cpu_checkpointing the copy lives in pinned host memory; with
 * contiguous_memory_optimization all copies share one buffer of
 * number_checkpoints slots allocated at the first save (then id must be
 * below number_checkpoints and no save larger than the first). Saving an id
 * again replaces it. Not collective. */
ZINC_API zinc_status zinc_activation_save(zinc_engine *e, int id, const void *data,
                                          size_t bytes);  /* [engine] */
/* Bring checkpoint id back whole into dst (bytes, device memory): the
 * slices are all-gathered across the model-parallel group. Collective over
 * the group when partitioned. _start queues it (the comm's own thread does
 * the transfer) and zinc_activation_wait completes it. */
/* [collective] */
ZINC_API zinc_status zinc_activation_restore(zinc_engine *e, int id, void *dst, size_t bytes);
ZINC_API zinc_status zinc_activation_restore_start(zinc_engine *e, int id, void *dst,
                                                   size_t bytes);  /* [collective] */
ZINC_API zinc_status zinc_activation_wait(zinc_engine *e, int id);  /* [collective] */
/* Drop checkpoint id (its memory returns to the engine). */
ZINC_API zinc_status zinc_activation_free(zinc_engine *e, int id);  /* [engine] */

typedef struct {
  size_t size;                       /* ZINC_ACTIVATION_STATS_INIT sets it */
  double save_s, restore_s;          /* wall time in save / restore (profile) */
  uint64_t saved_bytes, restored_bytes; /* bytes kept by this rank / restored */
  int64_t saves, restores;
  int64_t allocations;               /* buffers allocated for checkpoints */
} zinc_activation_stats;
#define ZINC_ACTIVATION_STATS_INIT { .size = sizeof(zinc_activation_stats) }
/* [engine] */
ZINC_API zinc_status zinc_activation_stats_get(const zinc_engine *e, zinc_activation_stats *out);

/* Sum n floats (device memory) over the model-parallel group, in place:
 * the partial sums of tensor-parallel layers. Collective over the group. */
/* [collective] */
ZINC_API zinc_status zinc_mp_allreduce_sum(zinc_engine *e, float *data, int64_t n);

/* --------------------------------------------------- pipeline parallelism */

/* 3D parallelism. With zinc_options.pipeline_parallel_size p > 1 the
 * trainer splits its layers into p consecutive stages, and zinc owns the
 * groups and the transfers between stages; the trainer owns its schedule
 * (GPipe, 1F1B). The world's w ranks form a grid of p stages x d
 * data-parallel ranks x t model-parallel (tensor-parallel) ranks, t =
 * model_parallel_size, d = w / (p t), numbered as Megatron-LM numbers
 * them, tensor-parallel rank fastest, then data-parallel rank, then stage:
 *
 *     world rank = (stage * d + dp_rank) * t + mp_rank
 *
 * A stage is a block of d t consecutive world ranks. The groups of a rank
 * (each ordered by world rank):
 *   model-parallel (ZINC_SCOPE_MP)  same stage and dp_rank: t consecutive
 *                                   ranks, one replica's shards of a stage
 *   data-parallel (ZINC_SCOPE_DP)   same stage and mp_rank: the d ranks
 *                                   ZeRO partitions over
 *   pipeline (ZINC_SCOPE_PP)        same dp_rank and mp_rank: p ranks, one
 *                                   per stage, in stage order
 * E.g. w = 8, p = 2, t = 2 (d = 2): stage 0 is ranks 0-3, stage 1 ranks
 * 4-7; rank 5 is stage 1, dp_rank 0, mp_rank 1; its model-parallel group
 * is {4, 5}, its data-parallel group {5, 7}, its pipeline group {1, 5}.
 * Without a pipeline (p = 1) this is the layout of zinc_mp_rank and
 * zinc_dp_rank as before.
 *
 * zinc_engine_create refuses, with ZINC_ERR_INVALID on every rank naming
 * the sizes, a pipeline_parallel_size below 0, sizes that differ across
 * ranks, and a world that p x t does not divide; and a config whose
 * "pipeline": {"stages": n} gives a number other than p with
 * ZINC_ERR_CONFIG naming both (write the same in both, or "auto").
 *
 * Training across stages (ZeRO stages 0-2): each stage registers and
 * builds only its own modules; the registered model is compared within a
 * stage. A micro-batch is one backward pass (grads_ready per module,
 * zinc_backward_end, zinc_step) and the gradient_accumulation_steps-th
 * zinc_step runs the optimizer; that step is collective over every stage:
 * the gradient norm (summed exactly, so any p gives the bits of p = 1),
 * clipping, the overflow skip and the loss scale cover the whole model,
 * and a step is skipped on every stage or none. Call zinc_step after the
 * micro-batch's input gradient was sent to the previous stage (it needs
 * it to reach its own step). With a pipeline only grads_ready is recorded
 * in the module order (fetch and release may interleave other micro-
 * batches' forward passes, as 1F1B does). Refused at zinc_engine_create
 * with ZINC_ERR_CONFIG and the reason: ZeRO stage 3, and the gradient
 * methods that agree their own norm (delayed averaging, the 1-bit
 * family). Checkpoints: each stage's part under <tag>/pp_stage_SS,
 * published together; a load needs the pipeline size of the save (another
 * is refused naming both). Not yet (ZINC_ERR_INVALID naming the pipeline
 * size, nothing changes): safetensors files of the model. The schedule of
 * examples/mlp3d (pp_schedule.h) shows the calls; docs/3d.md. */

/* World rank of this rank's neighbour in its pipeline group: the previous
 * stage's (same dp_rank and mp_rank), or the next one's; -1 on the first
 * (prev) or last (next) stage, without a pipeline, and for NULL. */
ZINC_API int zinc_pp_prev(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_pp_next(const zinc_engine *e);  /* [any thread] */
/* 1 when this rank is on the first / last stage (both without a
 * pipeline), else 0 (also for NULL). */
ZINC_API int zinc_pp_is_first(const zinc_engine *e);  /* [any thread] */
ZINC_API int zinc_pp_is_last(const zinc_engine *e);  /* [any thread] */
/* The coordinates of any world rank of e's grid: its stage, dp_rank and
 * mp_rank (each output may be NULL). ZINC_ERR_INVALID for a rank outside
 * 0 .. world size - 1. */
ZINC_API zinc_status zinc_rank_coords(const zinc_engine *e, int world_rank, int *stage,
                                      int *dp_rank, int *mp_rank);  /* [any thread] */
/* The world rank at (stage, dp_rank, mp_rank), or -1 outside the grid. */
ZINC_API int zinc_coords_rank(const zinc_engine *e, int stage, int dp_rank,
                              int mp_rank);  /* [any thread] */

/* Transfers between neighbouring stages of a pipeline group: activations
 * forward to the next stage, their gradients backward to the previous one
 * (Megatron-LM's send_forward / recv_forward / send_backward /
 * recv_backward).
 *
 * Pairing: stage s's SEND_NEXT transfers pair with stage s+1's RECV_PREV
 * ones, and s+1's SEND_PREV with s's RECV_NEXT, the k-th one each side
 * starts with the k-th one the other side starts (as MPI pairs messages).
 * Both ends of a pair give the same count and dtype.
 *
 * A batch (zinc_pp_start with n ops) starts its ops together and completes
 * them together (zinc_pp_wait). Transfers that cross between two stages at
 * the same time — 1F1B's send-forward-receive-backward (SEND_NEXT with
 * RECV_NEXT) and send-backward-receive-forward (SEND_PREV with RECV_PREV)
 * — go in one batch: on the cuda device a batch is one NCCL group, and
 * two stages that each start a send before the receive that pairs with
 * the other's send wait for each other until the comm timeout, as two
 * MPI_Send calls would. The cpu device starts transfers without waiting
 * for the peer, so there the order of separate starts does not matter.
 *
 * Overlap: zinc_pp_start returns once the transfers are under way (cpu:
 * the messages are posted, and MPI moves them as its progress allows —
 * Open MPI moves a large message inside MPI calls, so much of it may move
 * at the wait; cuda: the peer has started its matching transfers, the
 * size check below is done, and the NCCL group is queued after the work
 * already on the compute stream); the trainer computes and
 * calls zinc_pp_wait when it needs the data (cpu: returns when the batch
 * is complete; cuda: orders the compute stream after it and returns
 * without blocking the host, as the comm's waits do: "Streams" above). A
 * send buffer must not be changed, nor a receive buffer read, until the
 * wait (cuda: until the compute stream has passed it).
 *
 * Checks: both ends compare each pair's count and dtype. A difference is
 * ZINC_ERR_INVALID on both ends, each message naming both stages and
 * ranks and both sizes (count, dtype and bytes); the cpu device finds it
 * at zinc_pp_wait (the receive buffer's contents are then undefined), the
 * cuda device at zinc_pp_start (nothing moved). The pair is used up on
 * both ends, the transfers that follow pair as before and the engine goes
 * on. Misuse that starts nothing is ZINC_ERR_INVALID on the calling rank
 * only, and the engine goes on: no such neighbour (SEND_NEXT on the last
 * stage, any transfer without a pipeline), n < 1, a negative count, a
 * NULL buffer with count > 0, an unknown dtype or direction, a NULL
 * handle.
 *
 * Failure: a lost or frozen peer is ZINC_ERR_COMM within the engine's
 * comm timeout (zinc.comm_timeout_s; cpu: counted from zinc_pp_wait, cuda:
 * from zinc_pp_start, as the comm's other batches) plus up to 2 s, naming
 * the lost rank: a stage whose neighbour is itself stuck waiting for a
 * lost rank further along the pipeline names that rank, and a stage whose
 * neighbour failed repeats the neighbour's message at once. The engine then
 * stops (every later call returns that status and message) and
 * zinc_engine_destroy returns at once. Ranks of other pipeline groups
 * learn of it at their next collective with a rank that failed.
 *
 * Transfers need no zinc_engine_build and are not collective: only the
 * two stages of a pair take part. [engine] */
typedef enum {
  ZINC_PP_SEND_NEXT = 0, /* buf -> the next stage (forward: activations)     */
  ZINC_PP_RECV_PREV,     /* the previous stage -> buf                        */
  ZINC_PP_SEND_PREV,     /* buf -> the previous stage (backward: gradients)  */
  ZINC_PP_RECV_NEXT      /* the next stage -> buf                            */
} zinc_pp_dir;
typedef struct {
  zinc_pp_dir dir;
  void *buf;             /* count elements of dtype in the engine's device
                            memory (host memory on the cpu device): read by
                            a send, written by a receive                    */
  int64_t count;         /* elements, >= 0                                   */
  zinc_dtype dtype;
} zinc_pp_op;
/* A started batch; zinc_pp_wait consumes it, whatever it returns. */
typedef struct zinc_pp_handle zinc_pp_handle;
/* Start a batch of n transfers (ops may be reused once this returns).
 * *out is NULL on failure. */
ZINC_API zinc_status zinc_pp_start(zinc_engine *e, const zinc_pp_op *ops, int n,
                                   zinc_pp_handle **out);  /* [engine] */
/* Complete a started batch (see Overlap) and free its handle. */
ZINC_API zinc_status zinc_pp_wait(zinc_engine *e, zinc_pp_handle *h);  /* [engine] */
/* Start and wait: a blocking batch. */
ZINC_API zinc_status zinc_pp_transfer(zinc_engine *e, const zinc_pp_op *ops,
                                      int n);  /* [engine] */
/* zinc_engine_destroy frees the handles never waited for: their receives
 * are cancelled, while a send may still read its buffer until the peer
 * receives it or the process ends; wait for every batch first. */

/* -------------------------------------------------------- checkpoints */

/* Save every rank's shards and a manifest under dir/tag, crash-safe, and
 * point dir/latest at it. Collective. With model parallelism
 * (model_parallel_size N > 1) each model-parallel rank's shard of the model
 * is saved by its data-parallel group under dir/tag/mp_rank_NN/ (shards,
 * manifest, checksums, client state), and dir/tag is published as a whole
 * once every part is complete; such a checkpoint loads at the same
 * model_parallel_size (any data-parallel size and stage), and another size
 * is refused with ZINC_ERR_INVALID naming both. With a pipeline each
 * stage's part is under dir/tag/pp_stage_SS/ (its mp_rank_NN/ parts
 * inside), published the same way, and loads at the same
 * pipeline_parallel_size (another is refused naming both). The ranks wait for peers
 * still writing up to the config's zinc.checkpoint_timeout_s (default
 * 1800 s; comm_timeout_s if larger), not comm_timeout_s: a slow peer is
 * not a lost one (the same holds for zinc_load_checkpoint,
 * zinc_export_safetensors and zinc_load_safetensors). */
ZINC_API zinc_status zinc_save_checkpoint(zinc_engine *e, const char *dir,
                                          const char *tag);  /* [collective] */
/* Load dir/tag (tag NULL: the one dir/latest names) into the engine's
 * current world size, stage and offload, re-partitioning as needed.
 * Collective. Each rank resolves the tag and reads the manifest itself; the
 * ranks then compare the tag, step and manifest checksum they read and
 * refuse together (ZINC_ERR_INVALID naming each rank and what it read) when
 * they differ. Every check (checksums, manifest, the registered model, each
 * shard's crc32c) runs before anything is changed: a failure there leaves
 * the engine's state unchanged and the engine usable. A failure after the
 * checks passed (an I/O error reading a shard, out of memory) leaves the
 * state partial: the call returns that status on every rank, the engine
 * stops (every later call but destroy returns it), and the way on is
 * zinc_engine_destroy and a new engine that loads again. */
ZINC_API zinc_status zinc_load_checkpoint(zinc_engine *e, const char *dir,
                                          const char *tag);  /* [collective] */

/* The trainer's own state (data-loader position, RNG state, anything in
 * bytes), saved with the checkpoint — DeepSpeed's client_state. The engine
 * keeps a copy of the `bytes` bytes at data (bytes 0: none; data may then
 * be NULL) and every later zinc_save_checkpoint writes it beside the
 * shards, published with them: a crash leaves the old checkpoint with its
 * blob or the new one with its own, never a mix. Data-parallel rank 0's
 * blob is the one saved (a trainer whose ranks differ puts every rank's
 * part in it). Not collective. */
ZINC_API zinc_status zinc_checkpoint_set_client_state(zinc_engine *e, const void *data,
                                                      size_t bytes);
/* The blob the last zinc_load_checkpoint brought back (the same on every
 * rank), or the one last set: *data (owned by the engine, valid until the
 * next set, load or destroy) and *bytes; 0 bytes and NULL when there is
 * none (a checkpoint saved without one). The blob is verified (size and
 * crc32c in the manifest) with everything else before a load changes
 * anything. */
ZINC_API zinc_status zinc_checkpoint_client_state(const zinc_engine *e, const void **data,
                                                  size_t *bytes);

/* zinc_load_checkpoint with flags (0: the same). ZINC_LOAD_WEIGHTS_ONLY
 * (DeepSpeed's load_module_only): only the weights (the fp32 master, and
 * the compute copy from it) and the client state are loaded; the optimizer
 * moments start fresh (zero), and the step counters, the schedule's
 * position and the loss scaler stay the engine's own (0 and the config's
 * initial values on a new engine): fine-tuning from a checkpoint, also with
 * another optimizer type than the one that saved it. The checks and the
 * all-or-nothing contract are zinc_load_checkpoint's. */
#define ZINC_LOAD_WEIGHTS_ONLY 1u
ZINC_API zinc_status zinc_load_checkpoint_ex(zinc_engine *e, const char *dir, const char *tag,
                                             unsigned flags);

/* Write the consolidated weights — every parameter whole, from the fp32
 * master, converted to `dtype` (ZINC_F32/BF16/F16) or to each parameter's
 * own dtype when dtype is -1 — to a .safetensors file at path, one
 * parameter at a time (data-parallel rank 0 writes — with model
 * parallelism, once per model-parallel rank, so give each its own path; a
 * temporary file is renamed into place). Tensor names are "module.param".
 * DeepSpeed's
 * stage3_gather_16bit_weights_on_model_save equivalent. Collective. */
/* [collective] */
ZINC_API zinc_status zinc_export_safetensors(zinc_engine *e, const char *path, int dtype);

/* ------------------------------------------------ pretrained weights in */

/* How zinc_load_safetensors matches the file to the model. */
typedef struct {
  /* Nonzero: a parameter the file lacks or a tensor of the file no
   * parameter takes is an error (PyTorch's load_state_dict(strict=True));
   * zero: they are counted in the report and logged (strict=False). */
  int strict;
  /* The name map, for a file whose names are not zinc's "module.param":
   * called once per registered parameter with its zinc name; write the
   * file's name for it into buf (cap bytes, NUL-terminated) and return 1,
   * or return 0 to leave the parameter alone (neither loaded nor missing).
   * NULL: the file uses zinc's names. A table of pairs is a map whose ctx
   * is the table. Called on every rank, in registration order; it must
   * answer alike on every rank. */
  int (*map)(void *ctx, const char *name, char *buf, size_t cap);
  void *map_ctx;
} zinc_load_weights_options;
#define ZINC_LOAD_WEIGHTS_OPTIONS_INIT {0, NULL, NULL}

/* What zinc_load_safetensors did (the same on every rank). */
typedef struct {
  int loaded;             /* parameters loaded */
  int skipped;            /* parameters the map left alone */
  int missing;            /* parameters whose tensor the file lacks */
  int unexpected;         /* tensors of the file that no parameter took */
  /* Their names, one per line (missing: zinc's names; unexpected: the
   * file's), or NULL when there are none; free with
   * zinc_load_weights_report_free. */
  char *missing_names, *unexpected_names;
} zinc_load_weights_report;
ZINC_API void zinc_load_weights_report_free(zinc_load_weights_report *r);

/* Set the weights of a built engine from a .safetensors file, by name:
 * fine-tuning from a pretrained model (after zinc_engine_build, or to
 * overwrite the weights later, between steps). Every parameter the map
 * names is read from its tensor (F32, BF16 or F16 in the file) and rounded
 * to the parameter's own dtype; the fp32 master is that rounded value (as
 * when DeepSpeed loads a state dict into a 16-bit module and copies it to
 * the master), so a file that zinc_export_safetensors wrote with dtype -1
 * loads back bitwise at any stage and world size. The optimizer state, the
 * step and the schedule are not changed (fresh after a build).
 *
 * Checks before anything changes: the file's header (a damaged file is
 * ZINC_ERR_CORRUPT naming the tensor and field), each mapped tensor's shape
 * against the parameter (ZINC_ERR_INVALID naming the parameter, the tensor
 * and both shapes, strict or not, as PyTorch does) and dtype (another
 * dtype, e.g. I64, is ZINC_ERR_INVALID only when a parameter maps to it),
 * and with opt->strict the missing and unexpected tensors (ZINC_ERR_INVALID
 * naming them). opt NULL: ZINC_LOAD_WEIGHTS_OPTIONS_INIT. report may be
 * NULL; on failure it holds zeros.
 *
 * Reads one tensor at a time, and of it only the pieces this rank owns
 * (stage 3: its partition; stage 0: the whole tensor): no rank holds the
 * file. Collective over the world: every rank reads the file itself (the
 * same path, or its node's copy; with model parallelism each
 * model-parallel rank gives the file of its own shard of the model, as
 * zinc_export_safetensors wrote it) and every rank gets the same status,
 * message and report. So the ranks also check, before anything changes,
 * that they read the same thing: the map's answers, each file's size and
 * header, and the bytes of every piece loaded (a crc32c; at stages 1-3
 * each piece is also read by a second rank to compare, so a rank reads
 * about three times its share of the file). A difference is
 * ZINC_ERR_INVALID on every rank naming the rank(s) that differ and the
 * parameter or tensor. A read error after the checks (or a file that
 * changed since them) leaves the weights partial and stops the engine, as
 * zinc_load_checkpoint does. */
ZINC_API zinc_status zinc_load_safetensors(zinc_engine *e, const char *path,
                                           const zinc_load_weights_options *opt,
                                           zinc_load_weights_report *report);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_H */
