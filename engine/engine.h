/*
 * engine.h — the ZeRO engine's internal state, shared by the engine/ files.
 *
 * Layout (the one idea everything else follows)
 * ---------------------------------------------
 * Parameters are registered per module. Inside a module, parameters of one
 * dtype form a *segment*: a flat buffer in registration order, each
 * parameter starting at a multiple of ZINC_ALIGN_ELEMS elements, the
 * segment padded to a multiple of dp_size * ZINC_ALIGN_ELEMS. A segment is
 * cut into *units* of at most unit_max elements (a multiple of
 * dp_size * ZINC_ALIGN_ELEMS); every unit splits into dp_size equal
 * *chunks*, and rank r owns chunk r of every unit. A rank's *shard* is the
 * concatenation of its chunks in unit order, so every rank's shard has the
 * same size and the same offsets.
 *
 * The layout depends only on the registered model, dp_size and unit_max
 * (from reduce_bucket_size), never on the stage: that is what makes stages
 * 0-3 compute bitwise the same numbers. Gradients are reduce-scattered unit
 * by unit (the comm sums each element in its canonical order over ranks), the norm is summed
 * chunk by chunk in unit order and then rank by rank, and Adam is
 * elementwise.
 *
 * Where each stage keeps things (P = parameter bytes, S = shard elements,
 * N = dp_size):
 *   stage 0: param_full (P), grad_full (P), master/m/v for all N chunks (N*S)
 *   stage 1: param_full (P), grad_full (P), master/m/v (S)
 *   stage 2: param_full (P), grad_part f32 (S), master/m/v (S), grad areas
 *   stage 3: param_shard (S, param dtype), persistent segments whole,
 *            gathered modules on demand, grad_part f32 (S), master/m/v (S)
 *            and, with hpZ (zero_hpz_partition_size h > 1), a secondary
 *            partition (N*S/h of the non-persistent units, param dtype)
 *
 * hpZ: the data-parallel ranks form groups of h consecutive ranks (a
 * node's). Group rank l keeps, of every non-persistent unit, the slice
 * [l*N/h*chunk, (l+1)*N/h*chunk): the chunks of ranks l*N/h .. (l+1)*N/h-1,
 * copied out of the unit when a gather over every rank completes. Until the
 * shards change (a step, a load), a module whose slice is held gathers it
 * from the group only (stage3.c).
 * With offload_optimizer cpu, master/m/v (and grad_part) live in pinned host
 * memory and the CPU optimizer updates them there.
 */
#ifndef ZINC_ENGINE_H
#define ZINC_ENGINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"
#include "comm/comm.h"
#include "comm/comm_log.h"
#include "engine/checkpoint/mstate.h"
#include "engine/onebit.h"
#include "device/device.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "zinc.h"
#include "kernels/zinc_math.h"

#define ZINC_ALIGN_ELEMS 32 /* 128 B of f32, 64 B of 16-bit */
#define ZINC_MAX_NDIM 8

typedef struct zinc_prof zinc_prof;
typedef struct zinc_nvme zinc_nvme;
typedef struct zinc_powersgd zinc_powersgd;
typedef struct zinc_zoadam zinc_zoadam;

/* ------------------------------------------------------------- registry */

struct zinc_param {
  zinc_engine *engine;
  zinc_module *module;
  char *name;
  zinc_dtype dtype;
  int ndim;
  int64_t shape[ZINC_MAX_NDIM];
  int64_t numel;
  int decay;              /* weight decay applies */
  double wd;              /* its value; < 0: the config's weight_decay */
  double lr_scale;        /* lr multiplier (zinc_param_set_lr_scale) */
  int frozen;             /* not trained: no gradient, no optimizer state */
  int group;              /* index into engine->groups (-1: frozen) */
  int replicated;         /* the same full tensor on every model-parallel rank
                             (the norm counts it on mp rank 0 only) */
  int index;              /* registration order, whole model */
  int segment;            /* index into module->segs */
  int64_t seg_offset;     /* first element inside the segment */
  void *user;             /* the trainer's tag (zinc_param_set_user); never
                             read by the engine */
};

typedef struct {
  zinc_dtype dtype;
  int64_t used;           /* elements up to the end of the last parameter */
  int64_t numel;          /* padded: a multiple of N * ZINC_ALIGN_ELEMS */
  int first_unit, nunits; /* into engine->units */
  int persistent;         /* stage 3: kept whole on every rank */
  int frozen;             /* holds frozen parameters: no gradient area, no
                             optimizer runs, no reduction, not in the norm */
  void *full;             /* (numel) dtype on the device: where the full
                             segment is now (param_full, persistent copy, or
                             the module's gathered buffer); NULL when absent */
  void *grad;             /* (numel) dtype on the device: gradient area while
                             handed out; NULL otherwise */
  float *acc;             /* stages 0/1, 16-bit, gradient_accumulation_steps
                             > 1: (numel) f32 on the device, the window's
                             sum of the micro-batches' gradients (grads.c);
                             NULL otherwise */
  size_t gather_offset;   /* stage 3: byte offset inside the gathered buffer */
} zinc_segment;

typedef enum {
  ZINC_GRAD_NONE = 0,     /* not handed out in this window/micro-batch */
  ZINC_GRAD_OPEN,         /* handed out, accumulating */
  ZINC_GRAD_READY         /* grads_ready called; reduction pending/launched */
} zinc_grad_state;

struct zinc_module {
  zinc_engine *engine;
  char *name;
  int index;
  zinc_param **params;
  int nparams, cap;
  zinc_segment *segs;
  int nsegs;
  int64_t numel;          /* padded elements of all segments */
  int64_t gather_numel;   /* stage 3: padded elements gathered on fetch */
  size_t gather_bytes;    /* stage 3: bytes of the gathered buffer */
  size_t grad_bytes;      /* bytes of a gradient area (all segments) */

  int fetched;            /* trainer holds it (fetch count minus releases) */
  /* stage 3 */
  void *gathered;         /* (gather_bytes) on the device: the replay's copy */
  zinc_comm_req *gather_req; /* in-flight all-gather into gathered, or NULL */
  zinc_comm *gather_comm; /* the comm it runs on (dp, or hpz) */
  int secondary;          /* hpZ: ZINC_SECONDARY_* */
  void *served;           /* the copy the trainer was handed */
  void *orphan;           /* a copy the replay dropped while the trainer held it */
  int replay_held;        /* FETCH minus RELEASE events replayed */
  void *read_staging;     /* partition on NVMe: this rank's chunks read for
                             the gather in flight (a parameter read buffer) */
  int64_t read_seq;       /* when that read started (oldest is freed first) */
  size_t read_staging_bytes;
  void *shard_copy;       /* offload_param cpu across PCIe: (shard_copy_bytes)
                             on the device, this rank's chunks copied from
                             the host partition for the gather in flight */
  size_t shard_copy_bytes;
  void *cx_wsend, *cx_wrecv; /* qwZ: (cx_wbytes) this rank's encoded chunks;
                             (N x cx_wbytes) every rank's, for the gather
                             in flight; device                           */
  size_t cx_wbytes;
  /* gradients */
  zinc_grad_state grad_state;
  int64_t grad_window;    /* stage 0/1: window whose zeroing was done */
  int64_t grad_micro;     /* stage 0/1 with acc: micro-batch whose zeroing
                             was done */
  int64_t acc_window;     /* stage 0/1 with acc: window its sum belongs to */
  void *grad_area;        /* stage 2/3: (grad_bytes) in the ring, or dedicated */
  size_t area_offset;     /* ring offset of grad_area */
  size_t area_span;       /* bytes the ring gave (incl. any wrap skip) */
  int area_dedicated;     /* grad_area is its own allocation */
  int area_done;          /* its reduction retired: the ring may free it */
  int64_t reduced_window; /* stage 2/3: window whose partition it wrote */
};

/* hpZ: what a module's slices in the secondary partition hold. */
enum { ZINC_SECONDARY_STALE = 0, /* nothing current: gather from every rank */
       ZINC_SECONDARY_FILLING,   /* the gather in flight fills them */
       ZINC_SECONDARY_VALID };   /* the current parameters: gather in the group */

/* A partition unit (see the header comment). */
typedef struct {
  int module, segment;
  zinc_dtype dtype;
  int64_t seg_offset;     /* first element inside the segment */
  int64_t numel;          /* N * chunk */
  int64_t chunk;          /* elements per rank, multiple of ZINC_ALIGN_ELEMS */
  int64_t shard_offset;   /* this unit's chunk in every rank's shard (elements) */
  size_t shard_byte;      /* same, in bytes of a param_shard (stage 3) */
  size_t secondary_byte;  /* stage 3 with hpZ: this unit's slice in the
                             secondary partition (non-persistent units) */
  int64_t full_offset;    /* N * shard_offset: the unit in a whole-model
                             f32 index space (stage 0 optimizer) */
  int frozen;             /* of a frozen segment: units [ntrain_units,
                             nunits), after every trained unit */
} zinc_unit;

/* A parameter group: parameters that share an lr scale and a weight decay
 * value (the run's decay flag still says whether decay applies). The step
 * builds one optimizer coefficient per group; runs name theirs. */
typedef struct {
  double lr_scale;
  double weight_decay;
} zinc_param_group;

/* One contiguous run of optimizer work: a chunk (or the part of one with a
 * single weight-decay flag and parameter group). Offsets are into the
 * optimizer arrays. */
typedef struct {
  int unit;
  int owner;              /* rank whose chunk this is */
  int64_t opt_offset;     /* into master/m/v */
  int64_t unit_offset;    /* first element inside the unit */
  int64_t n;
  int decay;
  int param;              /* Lamb: the parameter (zinc_param.index) every
                             element belongs to (padding: the one before);
                             -1 for the other optimizers, whose runs may
                             span parameters */
  int group;              /* index into engine->groups */
} zinc_opt_run;

/* ------------------------------------------------------------- gradients */

/* A launched gradient reduction: the modules whose areas it reduces.
 * Reductions retire strictly in launch order. */
typedef struct {
  zinc_comm_req *req;
  int first_module;       /* index into engine->launched_modules */
  int nmodules;
  /* compressed (compress.c): the encoded slices, peer-major */
  void *cx_send, *cx_recv; /* (cx_send_bytes) device: sent / received    */
  size_t cx_send_bytes;
  size_t *cx_counts;      /* (5 N) bytes: counts, displs, rcounts, rdispls,
                             and a cursor per peer                       */
  size_t *cx_cursor;      /* into cx_counts                              */
  zinc_codec cx_codec;    /* the gradient codec this reduction was
                             encoded with (DGC's k is the step's)       */
} zinc_reduction;

/* ------------------------------------------------------------- trace */

/* The trainer's calls in one micro-batch, recorded in the first one (and
 * again from the call where every rank changed them alike). Every later
 * micro-batch is compared with it event by event; collectives are issued in
 * the order these events dictate, so ranks that make the same calls issue
 * the same collectives (trace.c). */
typedef enum { ZINC_EV_FETCH = 0, ZINC_EV_RELEASE, ZINC_EV_READY,
               ZINC_EV_END /* backward_end: never recorded, only compared */ } zinc_event_kind;
/* Where a rank is when it agrees with its peers (zinc_trace_key): every
 * collective point of the training loop agrees first, with its own key, so
 * that ranks at different points learn it instead of waiting. */
enum { ZINC_KEY_EVENT = 1,  /* recording: this call (kind, module) */
       ZINC_KEY_DEVIATE,    /* this rank's call differs from the recording */
       ZINC_KEY_GATHER,     /* stage 3: the gather of a module */
       ZINC_KEY_REDUCE,     /* a gradient reduction */
       ZINC_KEY_CHECK,      /* backward_end's checks, before anything changes */
       ZINC_KEY_END,        /* backward_end, after this many calls */
       ZINC_KEY_EVAL_FETCH, /* a fetch inside eval_begin/eval_end (module) */
       ZINC_KEY_EVAL_END }; /* eval_end */
typedef struct {
  int kind;               /* zinc_event_kind */
  int module;
} zinc_trace_event;

/* ----------------------------------------------------------------- engine */

typedef enum { ZINC_PHASE_IDLE = 0, ZINC_PHASE_FORWARD, ZINC_PHASE_BACKWARD,
               ZINC_PHASE_STEP, ZINC_PHASE_N } zinc_phase;

/* The offloaded optimizer's copy pipeline (offload.c), when gradients or
 * parameters live where the CPU cannot compute on them. */
typedef struct {
  int ready;
  zinc_device *host;      /* runs the CPU Adam: the engine's device on the
                             cpu build, a cpu device of its own on cuda */
  int host_owned;
  zinc_stream *copy[2];   /* 0: gradients in, 1: parameters out */
  zinc_event *in_done[2], *out_done[2]; /* per staging slot */
  zinc_event *grads_done;
  void *grad[2], *param[2]; /* pinned staging slots (NULL: not needed) */
  size_t grad_bytes, param_bytes;
} zinc_offload;

/* Partial optimizer offload (offload_partial.c): optimizer elements
 * [0, device_numel) keep master/m/v on the device, the rest in host
 * memory; e->master, exp_avg, exp_avg_sq are then NULL. */
typedef struct {
  int on;
  int64_t device_numel;   /* D: a whole number of sub-groups */
  float *dev[3];          /* (D) f32 on the device: master, exp_avg,
                             exp_avg_sq (NULL: a slot not kept) */
  float *host[3];         /* (opt_numel - D) f32 in host memory: the same */
} zinc_partial;

/* The host cache in front of the NVMe parameter partition
 * (offload_param.max_in_cpu, offload_pcache.c): partition bytes
 * [0, bytes) live here, the rest in the swap area. */
typedef struct {
  size_t bytes;           /* a prefix of whole modules' units; 0: none */
  int64_t elems;          /* its elements (this rank's chunks) */
  void *host;             /* (bytes) host memory, the partition's dtype */
} zinc_pcache;

struct zinc_engine {
  zinc_settings cfg;
  zinc_options opt;
  int built;
  zinc_status failed;     /* sticky failure: the engine refuses to go on */
  char failed_msg[512];
  zinc_status deferred;   /* a local failure the peers must hear of at the
                             next point where every rank agrees */
  char deferred_msg[512];

  /* ---- ranks and groups */
  int world_rank, world_size;
  int dp_rank, dp_size;
  int mp_rank, mp_size;
  int local_rank, local_size;  /* ranks on this node */
  int gpu_numa;           /* NUMA node near this rank's GPU (-1: unknown, CPU) */
  int gpu_near_rank, gpu_near_size; /* this rank among the local ranks whose
                             GPUs are near gpu_numa: the CPU offload threads
                             split that node's cores (engine/offload_cpu.c) */
  zinc_comm *world;       /* every rank; host buffers */
  zinc_comm *dp;          /* ZeRO partitions over this one; device buffers
                             (NCCL on the cuda device) */
  zinc_comm *mp;          /* model-parallel group; device buffers */
  zinc_comm *dp_host;     /* the data-parallel group for host buffers (MPI);
                             the same comm as dp on the cpu device */
  zinc_comm *mp_host;     /* likewise for the model-parallel group */
  zinc_comm_log *comms_log; /* comms_logger's counters, shared by the comms
                               above (NULL when not enabled)               */
  int hpz;                /* stage 3: zero_hpz_partition_size in effect (1: off) */
  zinc_comm *hpz_comm;    /* hpZ: this rank's group of hpz consecutive
                             data-parallel ranks; device buffers */
  zinc_comm *hpz_host;    /* the same group for host buffers (MPI) */
  struct zinc_pipe *pipe; /* pipeline parallelism: the grid, the pipeline
                             group, transfers (engine/pipe.h)             */

  /* ---- device and accounting */
  zinc_device *dev;
  int sized_as_gpu;       /* no dev (the estimator's bare engine): size the
                             buffers the cuda device allocates (staging) */
  zinc_stream *stream;    /* NULL: the device's compute stream (the trainer's
                             on CUDA), so engine kernels are ordered with the
                             trainer's work; synchronised with
                             zinc_engine_sync where the host reads results */
  zinc_prof *prof;

  /* ---- registry */
  zinc_module **modules;
  int nmodules, modules_cap;
  zinc_param **params;    /* registration order */
  int nparams, params_cap;

  /* ---- layout */
  int64_t unit_max;
  zinc_unit *units;
  int nunits;
  int64_t shard_numel;    /* S */
  size_t shard_bytes;     /* param shard bytes (stage 3) */
  int64_t total_numel;    /* N * S: padded elements of the whole model */
  size_t full_bytes;      /* P (padded) */
  int64_t psi[3];         /* unpadded parameter count per zinc_dtype */
  zinc_opt_run *runs;
  int nruns;
  /* Frozen parameters (zinc_param_set_frozen) are laid out in segments of
   * their own whose units come after every trained unit: the trained units
   * fill shard offsets [0, train_shard_numel), so the optimizer arrays,
   * the gradient partition and the full gradient buffer cover only those,
   * and an optimizer index >= opt_numel is a frozen unit's (read and
   * written as parameter memory by zinc_frozen_io). */
  int ntrain_units;       /* units [0, ntrain_units) are trained */
  int64_t train_shard_numel; /* S of the trained units */
  size_t train_bytes;     /* padded bytes of the trained segments */
  int64_t psi_frozen[3];  /* frozen parameter count per zinc_dtype */
  zinc_param_group groups[ZINC_MAX_PARAM_GROUPS];
  int ngroups;
  double lr_override;     /* zinc_engine_set_lr; < 0: the scheduler */

  /* ---- model states (device unless offloaded) */
  void *param_full;       /* stage 0-2: (P bytes) every segment whole */
  void *param_shard;      /* stage 3: (shard_bytes) this rank's chunks; pinned
                             host memory with offload_param cpu */
  int param_location;     /* ZINC_LOC_DEVICE or ZINC_LOC_HOST */
  void *persist;          /* stage 3: (persist_bytes) persistent segments */
  void *param_secondary;  /* stage 3 with hpZ: (secondary_bytes) on the device */
  size_t secondary_bytes;
  size_t persist_bytes;
  void *grad_full;        /* stage 0/1: (P bytes) accumulated gradients */
  int grad_full_shared;   /* allocated with comm alloc_shared */
  float *grad_acc;        /* stage 0/1: (grad_acc_bytes) f32 sums of the
                             16-bit segments (zinc_segment.acc), or NULL */
  size_t grad_acc_bytes;
  float *grad_part;       /* stage 2/3: (S) f32 reduced gradient partition
                             (NULL: on NVMe, zinc_nvme_grads_on_disk) */
  float *grad_window_sum; /* stage 2/3, grad_part in host memory across
                             PCIe, gradient_accumulation_steps > 1: (S) f32
                             on the device, the window's sum, copied into
                             grad_part once at the boundary (grads.c), or
                             NULL */
  int64_t grad_host_writes; /* writes of reduced gradients into host memory
                             across PCIe (one per module reduction, or one
                             per window with grad_window_sum; tests)    */
  float *master, *exp_avg, *exp_avg_sq; /* (opt_numel) f32 */
  int64_t opt_numel;      /* S, or N*S at stage 0 (trained units only) */
  zinc_opt_hparams optim;  /* the optimizer (optimizer.type and params) */
  int opt_slots;          /* its state slots (ZINC_OPT_SLOT_* bits)     */
  int opt_location;       /* ZINC_LOC_DEVICE or ZINC_LOC_HOST (offload); with
                             NVMe offload master/m/v are NULL and live in
                             nvme's swap area, the gradient partition on the
                             host */
  zinc_nvme *nvme;        /* NVMe offload (nvme.c), or NULL */
  zinc_offload off;       /* offload cpu with staging copies (offload.c) */
  zinc_partial partial;   /* offload_optimizer.ratio < 1 (offload_partial.c) */
  zinc_pcache pcache;     /* offload_param.max_in_cpu (offload_pcache.c) */
  int master_in_params;   /* every parameter is f32 and the optimizer state is
                             on the device: the fp32 master is the parameter
                             memory itself (param_full / param_shard chunks),
                             e->master is NULL and nothing is copied */

  /* ---- gradient reduction */
  void *arena_base;       /* stage 2/3: (arena_bytes) gradient areas, a ring */
  size_t arena_bytes;
  int arena_shared;
  size_t arena_head, arena_tail, arena_used; /* ring: allocate at head,
                             free at tail in allocation order */
  int *ring_mods;         /* modules holding ring areas, allocation order */
  int ring_first, ring_n;
  int *pending;           /* modules ready, not launched, in launch order */
  int npending;
  int64_t pending_elems;
  zinc_reduction *inflight; /* FIFO: [inflight_first, ninflight) */
  int inflight_first, ninflight, inflight_cap;
  int *launched_modules;  /* modules of the in-flight reductions, in order */
  int nlaunched, launched_cap;
  int dedicated_warned;

  /* ---- compressed communication (compress.c) */
  zinc_codec cx_grad;     /* gradient slices to peers on other nodes (NONE:
                             the plain reduce-scatter)                  */
  zinc_codec cx_local;    /* ... to peers on this node when cx_local_raw
                             (NONE: raw, the unit's dtype)              */
  int cx_local_raw;       /* scope inter_node: pairs on a node use cx_local */
  zinc_codec cx_weight;   /* stage-3 parameter gather (NONE: exact)     */
  void *cx_ef;            /* (cx_ef_bytes) device: INT8 residuals (fp32
                             for TOPK: DGC), per
                             trained unit (N-1) slices (cx_ef_off)      */
  size_t cx_ef_bytes;
  size_t *cx_ef_off;      /* (ntrain_units) byte offset of each unit's  */
  float *cx_scratch;      /* stages 0/1: (largest chunk) f32 sum        */
  size_t cx_scratch_bytes;
  struct zinc_dgc *dgc;   /* DGC's momentum correction (dgc.c); NULL: off */
  /* ---- delayed gradient averaging (dga.c) */
  struct zinc_dga *dga;   /* NULL: off (the synchronous reduction)       */
  zinc_powersgd *psgd;    /* PowerSGD at stages 0/1 (powersgd.c); NULL: off */
  zinc_zoadam *zoadam;    /* 0/1 Adam (zoadam.c): optimizer.type ZeroOneAdam */
  struct zinc_onebit_lamb *onebit_lamb; /* 1-bit LAMB (onebit_lamb.c): OneBitLamb */
  /* 1-bit Adam (onebit_adam.c; optimizer.type "OneBitAdam", stage 0) */
  zinc_onebit_plan ob_plan; /* one segment per trained parameter, in the
                               optimizer arrays (N*S)                     */
  float *ob_worker_error;  /* (ob_worker_bytes) device: padded momentum  */
  float *ob_server_error;  /* (ob_server_bytes) device: this rank's chunks */
  size_t ob_worker_bytes, ob_server_bytes;
  double *ob_norms;        /* (2 N) host: the 1-bit optimizers' norm gather */
  /* rank-local state of the compression methods, saved in checkpoints
   * (engine/checkpoint/mstate.h) */
  zinc_mstate_entry mstate[ZINC_MSTATE_MAX];
  int nmstate;

  /* ---- trace */
  int recording;          /* first micro-batch: record and agree per event */
  zinc_trace_event *trace;
  int ntrace, trace_cap;
  int trace_pos;          /* events seen in this micro-batch */
  int *ready_seq;         /* modules of the READY events, in trace order */
  int nready_seq;
  int ready_pos;          /* next READY event to launch */
  unsigned char *ready_now; /* (nmodules) reported ready this micro-batch */
  unsigned char *keep_at_release; /* (ntrace) stage 3: at this RELEASE event
                             keep the copy (next fetch within reuse distance) */
  int rerecorded;         /* this micro-batch changed the order: recording
                             again from the call where it changed */

  /* ---- stage 3 */
  int64_t live_elems;     /* gathered elements currently allocated */
  int64_t live_peak;
  int64_t read_seq;       /* parameter reads from NVMe started (stage3.c) */
  int64_t alloc_count;    /* engine allocations so far (build.c) */
  int64_t alloc_fault_at; /* test hook: that allocation fails (0: none) */
  int poison_unzeroed;    /* test hook: 1 + the byte unzeroed allocations
                             are filled with (0: none)                  */
  zinc_stream *param_copy; /* stage 3, offload_param cpu across PCIe: the
                             stream that copies chunks to the device     */
  zinc_event *param_copied; /* recorded after each such copy             */
  int64_t param_device_copies; /* such copies (one per gather; tests)    */

  /* ---- step state */
  int64_t micro_step;     /* micro-batches completed (backward_end calls) */
  int64_t step;           /* optimizer steps taken (not skipped) */
  int64_t skipped_steps;
  int64_t window;         /* accumulation window index */
  int mb_open;            /* micro-batch has started (fetch/grad seen) */
  int mb_ended;           /* backward_end called, step not yet */
  int eval;               /* between zinc_eval_begin and zinc_eval_end */
  zinc_loss_scaler scaler;
  float last_grad_norm;
  double last_lr;         /* the lr of the last zinc_step, unrounded (monitors) */

  /* ---- the trainer's blob saved with checkpoints (checkpoint.c) */
  void *client_state;
  int64_t client_state_bytes; /* 0: none set or loaded */

  /* ---- timers */
  zinc_phase phase;
  double phase_start;
  double t_forward, t_backward, t_step, t_comm_wait;
  double t_taken[4];      /* the four above summed at each zinc_timers_take */

  /* ---- the trainer's registered activations (memory/profiler.c) */
  struct zinc_trainer_mem *tmem;
  int ntmem, captmem;

  /* ---- monitors (monitor.c) */
  struct zinc_monitor *mon; /* world rank 0 with a monitor enabled, else NULL */
  double mon_micro[5], mon_window[5]; /* timer totals at the last step call
                                         and at the last boundary        */
  int timeline_warned;

  /* ---- activation checkpoints (activations.c) */
  struct zinc_act_store *acts;
};

/* --------------------------------------------------------- monitor.c */
/* Open the monitors the config enables (world rank 0); close them. */
/* comms_logger.c: counters on every comm of the engine from creation on
 * (attach again after a comm is added: it hangs them on the new ones);
 * the summary and the counters freed at destroy (before and after the
 * comms go). */
zinc_status zinc_comms_logger_attach(zinc_engine *e);
void zinc_comms_logger_report(zinc_engine *e);
void zinc_comms_logger_free(zinc_engine *e);
zinc_status zinc_monitor_open(zinc_engine *e);
void zinc_monitor_close(zinc_engine *e);
/* After every successful zinc_step: the wall_clock_breakdown lines, and at
 * a boundary the engine's figures to the monitors. Never fails. */
void zinc_monitor_step(zinc_engine *e, const zinc_step_info *info);

/* --------------------------------------------------------- engine.c */
/* Wait for the engine's queued device work (a no-op on the cpu device),
 * the NCCL batches the compute stream waits for included (settled with the
 * comm timeout first: comm.h, "Streams"); call it before the host reads
 * what device work or a comm wait produced. */
zinc_status zinc_engine_sync(zinc_engine *e);
void zinc_engine_phase(zinc_engine *e, zinc_phase p);
/* The cpu device the CPU offload of a GPU rank runs on: its threads on the
 * cores of its GPU's NUMA node, split among the local ranks near it (the
 * local-rank split where hwloc has no I/O information). */
zinc_status zinc_engine_offload_cpu_device(zinc_engine *e, zinc_device **out);

/* --------------------------------------------------------- failure.c */
/* Fail the engine for good (after an error mid-step) and return st. */
zinc_status zinc_engine_fail(zinc_engine *e, zinc_status st);
/* ZINC_OK when e may take a training call named `what`; otherwise the
 * error: NULL engine, not built, or stopped by an earlier failure (its
 * status and message). */
zinc_status zinc_engine_usable(const zinc_engine *e, const char *what);
/* Collective over c: the common outcome of a step that may fail on some
 * ranks, with the lowest failing rank's message on every rank. */
zinc_status zinc_engine_agree(zinc_engine *e, zinc_comm *c, zinc_status st);
/* The same, where every rank also says where it is in the training loop
 * (key, made by zinc_trace_key; 0 outside it): ranks at different points
 * fail with ZINC_ERR_INVALID naming both points. *out (may be NULL) gets
 * the lowest and highest key and whether every rank failed, so that a
 * caller can tell "every rank failed the same way here" (a change of the
 * module order made by every rank alike) from a failure of some. */
typedef struct {
  int64_t lo, hi;         /* lowest and highest key of any rank */
  int all_failed;         /* every rank passed a failure */
} zinc_agreement;
zinc_status zinc_engine_agree_at(zinc_engine *e, zinc_comm *c, zinc_status st, int64_t key,
                                 zinc_agreement *out);
/* A failure on this rank while its peers are inside a collective with it
 * (an NVMe read for a gather): the rank goes on with the collective and
 * the failure is reported on every rank by zinc_engine_agree_deferred. */
void zinc_engine_defer(zinc_engine *e, zinc_status st);
/* Collective over the data-parallel group: the first deferred failure of
 * any rank, on every rank (ZINC_OK when none). Cleared afterwards. */
zinc_status zinc_engine_agree_deferred(zinc_engine *e);
/* Collective over c, for what must match across ranks (the settings, the
 * registered model): every rank gets rank 0's text in *ref (free() it),
 * having agreed that every rank could make its own (`mine`, NULL for out
 * of memory) and hold rank 0's; `what` names it in messages. The caller
 * compares, then agrees on the result. */
zinc_status zinc_engine_agree_rank0_text(zinc_engine *e, zinc_comm *c, const char *mine,
                                         const char *what, char **ref);

/* --------------------------------------------------------- registry.c */
void zinc_registry_free(zinc_engine *e);
/* Collective over the world: INVALID on every rank, naming the first
 * parameter that differs, unless every rank registered the same names,
 * dtypes, shapes, weight-decay flags and values, lr scales and frozen
 * flags in the same order. */
zinc_status zinc_registry_agree(zinc_engine *e);

/* --------------------------------------------------------- layout.c */
/* Partition of `count` elements over `ranks`: chunk per rank (a multiple of
 * align) and the padded total. Pure. */
void zinc_partition(int64_t count, int ranks, int64_t align, int64_t *chunk,
                    int64_t *padded);
/* Build segments, units, shard offsets and optimizer runs. */
zinc_status zinc_layout_build(zinc_engine *e);
/* Position of a unit's chunk for rank r in the optimizer arrays. */
int64_t zinc_layout_opt_offset(const zinc_engine *e, const zinc_unit *u, int r);
/* Visit every piece of parameter p as (unit, rank, offset in chunk, offset
 * in p, length). */
typedef zinc_status (*zinc_piece_fn)(zinc_engine *e, const zinc_unit *u, int unit_index,
                                     int r, int64_t chunk_off, int64_t param_off,
                                     int64_t len, void *ctx);
zinc_status zinc_layout_for_each_piece(zinc_engine *e, const zinc_param *p,
                                       zinc_piece_fn fn, void *ctx);
/* Byte pointer of a unit inside a segment buffer. */
static inline char *zinc_unit_ptr(void *seg_base, const zinc_unit *u) {
  return (char *)seg_base + (size_t)u->seg_offset * zinc_dtype_size(u->dtype);
}

/* --------------------------------------------------------- build.c */
zinc_status zinc_build_buffers(zinc_engine *e, zinc_init_fn init, void *ctx);
void zinc_build_free(zinc_engine *e);
/* An engine buffer of `bytes` at `location` from the engine's device,
 * accounted to `category`, zero-filled: host memory already on return (no
 * zeroing left queued), device memory by work queued on e->stream;
 * zinc_engine_buffer_free gives it back (same bytes, location and
 * category; NULL p is a no-op). */
zinc_status zinc_engine_buffer_alloc(zinc_engine *e, size_t bytes, int location, int category,
                                     void **out, const char *what);
/* The same, not zeroed: for a buffer whose every byte is written before
 * anything reads it (a gathered module: every unit's all-gather fills it). */
zinc_status zinc_engine_buffer_alloc_unzeroed(zinc_engine *e, size_t bytes, int location,
                                              int category, void **out, const char *what);
void zinc_engine_buffer_free(zinc_engine *e, void *p, size_t bytes, int location, int category);
/* Zeroed host memory for a call's own work (not accounted to the profiler;
 * the test hook below can fail it like any engine allocation). */
zinc_status zinc_engine_host_calloc(zinc_engine *e, void **out, size_t n, size_t size,
                                    const char *what);
/* Tests: make the nth engine allocation from now fail with ZINC_ERR_NOMEM
 * (0: never). */
void zinc_engine_inject_alloc_fault(zinc_engine *e, int64_t nth);
/* Tests: fill every later unzeroed allocation with `byte` (cpu device; < 0:
 * stop), to prove that nothing reads a byte the code did not write. */
void zinc_engine_poison_unzeroed(zinc_engine *e, int byte);
/* Memory that collectives read from (comm-shared on the cpu device). */
zinc_status zinc_engine_comm_buffer_alloc(zinc_engine *e, size_t bytes, int category, void **out,
                                          int *shared, const char *what);
void zinc_engine_comm_buffer_free(zinc_engine *e, void *p, size_t bytes, int category, int shared);
/* Host f32 values -> device memory in dtype (scratch: n elements of 4 B). */
zinc_status zinc_engine_put(zinc_engine *e, void *dst, int dtype, const float *src, int64_t n,
                            void *scratch);
/* Write f32 values of piece (unit, rank r, chunk_off, len) into the fp32
 * master (when `master`) and, at stage 3 for this rank, into the
 * parameter partition in its dtype (scratch: len x 4 bytes). */
zinc_status zinc_put_owned_piece(zinc_engine *e, const zinc_unit *u, int r, int64_t chunk_off,
                                 const float *src, int64_t len, int master, void *scratch);
/* Optimizer elements [off, off + count) of a frozen unit (off >=
 * opt_numel, inside one chunk): array 0 (the master) reads/writes the
 * parameter memory as f32, arrays 1-2 read zeros and drop writes. */
zinc_status zinc_frozen_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                           int write);
/* Wait for a comm request, timing the wait: on the host (mpi), or by
 * ordering the compute stream after it (nccl; the host reads only after
 * zinc_engine_sync). Consumes the request whatever it returns. */
zinc_status zinc_engine_wait(zinc_engine *e, zinc_comm *c, zinc_comm_req *req);

/* Whether the fp32 master can be the parameter memory (see master_in_params). */
int zinc_master_aliases_params(const zinc_engine *e);
/* What the build allocates for good, by location and category. */
void zinc_build_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);

/* --------------------------------------------------------- grads.c */
size_t zinc_grads_ring_bytes(const zinc_engine *e);
/* Stages 0/1: bytes of the f32 sums of 16-bit gradients (0 when none). */
size_t zinc_grads_sum_bytes(const zinc_engine *e);
zinc_status zinc_grads_init(zinc_engine *e);
void zinc_grads_free(zinc_engine *e);
/* Hand out (allocating/zeroing as needed) the gradient buffers of m. */
zinc_status zinc_grads_open(zinc_engine *e, zinc_module *m);
/* Replay of a READY event: the module's gradients go to the reduction in
 * the recorded order (zeros if the trainer has not reported it). */
zinc_status zinc_grads_replay_ready(zinc_engine *e, zinc_module *m);
/* The trainer reported m (its gradients are complete). */
zinc_status zinc_grads_ready(zinc_engine *e, zinc_module *m);
/* Launch what is pending and wait for every reduction. */
zinc_status zinc_grads_flush(zinc_engine *e);
/* Complete finished reductions without blocking (progress). */
zinc_status zinc_grads_poll(zinc_engine *e);
/* Start of an accumulation window / micro-batch bookkeeping. */
void zinc_grads_micro_begin(zinc_engine *e);
int zinc_grads_is_boundary_micro(const zinc_engine *e);
/* Pointer to the reduced gradient of a unit's chunk for rank r (and its
 * dtype), where the step reads it; NULL when the partition is on NVMe
 * (zinc_nvme_grad_read). */
const void *zinc_grads_chunk(const zinc_engine *e, int unit, int r, int *dtype);
/* prescale_gradients / gradient_predivide_factor: the factor each rank's
 * gradient is multiplied by before the sum (1: none), and the one that
 * turns the stored sum into the averaged, unscaled gradient. */
float zinc_grads_prescale(const zinc_engine *e);
double zinc_grads_mean_base(const zinc_engine *e);
/* Device bytes of grad_window_sum (0 when none). */
size_t zinc_grads_window_bytes(const zinc_engine *e);

/* --------------------------------------------------------- stage3.c */
/* Replay of a FETCH/RELEASE event (gathers, prefetch, frees). */
zinc_status zinc_stage3_replay_fetch(zinc_engine *e, zinc_module *m, int event);
/* Bytes of the largest range of this rank's partition one fetch reads (the
 * module's non-persistent units); *name (may be NULL) gets that module. */
size_t zinc_stage3_largest_read(const zinc_engine *e, const char **name);
zinc_status zinc_stage3_replay_release(zinc_engine *e, zinc_module *m, int event);
/* Hand the trainer module m (after its fetch event); fails when m is not
 * gathered (a rank that left the recorded order). */
zinc_status zinc_stage3_serve(zinc_engine *e, zinc_module *m);
/* The trainer released m for the last time. */
void zinc_stage3_unserve(zinc_engine *e, zinc_module *m);
/* Drop every gathered copy (after a step the shards changed). */
zinc_status zinc_stage3_invalidate(zinc_engine *e);
/* hpZ: the group size zero_hpz_partition_size gives at dp_size ranks (1
 * below stage 3), or ZINC_ERR_CONFIG naming the key when it cannot be. */
zinc_status zinc_hpz_size(const zinc_settings *cfg, int dp_size, int *out);
/* Bytes of the secondary partition (0 without hpZ); sets each unit's
 * secondary_byte. Needs the layout and e->hpz. */
size_t zinc_stage3_secondary_layout(zinc_engine *e);
/* -------------------------------------------------------------- dga.c */
/* Delayed gradient averaging (zinc.compression.delayed_averaging, stage 0;
 * dga.c's header): the ring of snapshots and its comm, after the layout
 * (e->dga stays NULL when off); free waits for the all-reduces in flight. */
zinc_status zinc_dga_init(zinc_engine *e);
void zinc_dga_free(zinc_engine *e);
/* In the step, in place of stage 0's gradient all-gather: this rank's
 * corrected gradient (the all-reduce sum's units) into its gradient
 * buffer, the all-reduce of its local gradient started. Collective over
 * the data-parallel group. */
zinc_status zinc_dga_step(zinc_engine *e);
/* The step must be skipped: an inf/NaN in some rank's local gradient
 * (agreed in zinc_dga_step); 0 when off. */
int zinc_dga_skipped(const zinc_engine *e);
/* Before a checkpoint: wait for the all-reduces in flight (agreed over
 * the data-parallel group); adopt_rank0 (a save): then every rank takes
 * rank 0's parameters, optimizer state and pending local gradients, so
 * that the checkpoint holds one model and the run goes on from it, as a
 * resumed one does. Collective. */
zinc_status zinc_dga_sync(zinc_engine *e, int adopt_rank0);
/* The ring's bytes per rank (host memory) for the estimator: 0 when off. */
size_t zinc_dga_state_bytes(const zinc_settings *s, int dp_size, int64_t train_elems);

/* --------------------------------------------------------- compress.c */
/* The codecs for this layout and config (policy: compress.c's header),
 * the error-feedback residuals and the stage 0/1 scratch. After layout. */
zinc_status zinc_compress_init(zinc_engine *e);
zinc_status zinc_compress_scratch(zinc_engine *e);
void zinc_compress_scratch_free(zinc_engine *e);
void zinc_compress_free(zinc_engine *e);
/* After each optimizer step: zero the residuals every reset_T steps. */
zinc_status zinc_compress_step_end(zinc_engine *e);
/* DGC's density at optimizer step `step`: zinc.compression.dgc.density,
 * raised during the first warmup_steps to 0.25, 0.0625, 0.015625,
 * 0.00390625 over four equal quarters (whichever is larger). */
double zinc_compress_dgc_density(const zinc_settings *s, int64_t step);
/* Bytes of one error-feedback slice of `chunk` elements for gradient
 * codec `grad`: fp32 for TOPK (DGC), INT8 blocks otherwise. */
size_t zinc_compress_ef_slice_bytes(zinc_codec grad, int64_t chunk);
int zinc_compress_grads(const zinc_engine *e);
/* Encode reduction r's units and fill *coll with its all-to-all-v. */
zinc_status zinc_compress_reduce_prepare(zinc_engine *e, zinc_reduction *r, zinc_coll *coll);
/* After r's all-to-all-v: unit ui's rank-order sum into partition (f32;
 * overwrite or add), or with partition NULL (stages 0/1) into this rank's
 * slot of grad in the unit's dtype. Units in launch order. */
zinc_status zinc_compress_reduce_unit(zinc_engine *e, zinc_reduction *r, int ui,
                                      const char *grad, float *partition, int overwrite);
void zinc_compress_reduction_free(zinc_engine *e, zinc_reduction *r);
int zinc_compress_weights(const zinc_engine *e);
size_t zinc_compress_weight_bytes(const zinc_engine *e, int64_t chunk);
zinc_status zinc_compress_weight_encode(zinc_engine *e, void *dst, const void *src, int dtype,
                                        int64_t chunk);
zinc_status zinc_compress_weight_decode(zinc_engine *e, void *dst, int dtype, const void *src,
                                        int64_t chunk);

/* -------------------------------------------------------------- dgc.c */
/* DGC's momentum correction (zinc.compression.dgc.momentum_correction)
 * is on for this configuration over dp_size ranks: SGD then runs with
 * momentum 0 (the momentum is in what was sent). */
int zinc_dgc_momentum_on(const zinc_settings *s, int dp_size);
/* Its velocities, the owner's residuals and encoded slices, after
 * zinc_compress_init (e->dgc stays NULL when off); registered as method
 * state. ZINC_ERR_CONFIG for a configuration it cannot serve,
 * ZINC_ERR_UNSUPPORTED on the cuda device. */
zinc_status zinc_dgc_init(zinc_engine *e);
void zinc_dgc_free(zinc_engine *e);
/* Bytes zinc_dgc_init allocates (gradient memory on the device). */
uint64_t zinc_dgc_state_bytes(const zinc_engine *e);
/* Encode unit ui's slice src for rank p into dst through the velocity,
 * the residual ef and top-k with codec c, then mask the velocity at the
 * kept indices (p == me: the owner's own slice, its own residual, kept
 * for zinc_dgc_own_decode; dst and ef ignored). */
zinc_status zinc_dgc_encode_slice(zinc_engine *e, zinc_codec c, int ui, int p, const char *src,
                                  void *dst, void *ef);
/* DGC's local gradient clipping is on (stage 1): the window's reductions
 * wait for the flush, which reduces them as one batch; the step's global
 * clipping is off. */
int zinc_dgc_clips_locally(const zinc_engine *e);
/* The local clipping of that batch: the norm over every unit's whole
 * local gradient (norm_add), then each scaled by
 * min(1, gradient_clipping N^-1/2 / (norm + 1e-6)) (scale). */
zinc_status zinc_dgc_local_norm_add(zinc_engine *e, int ui, const char *grad);
zinc_status zinc_dgc_local_scale(zinc_engine *e, int ui, char *grad);
/* dst (f32) (+)= the owner's own encoded slice of unit ui. */
zinc_status zinc_dgc_own_decode(zinc_engine *e, zinc_codec c, int ui, float *dst,
                                int accumulate);

/* --------------------------------------------------------- powersgd.c */
/* gradient_codec "powersgd" at stage 0 or 1. */
int zinc_powersgd_enabled(const zinc_settings *s);
/* Its Q matrices, errors and scratch (after layout; ZINC_ERR_UNSUPPORTED
 * on the cuda device), registered as method state. */
zinc_status zinc_powersgd_init(zinc_engine *e);
void zinc_powersgd_free(zinc_engine *e);
/* Bytes zinc_powersgd_init allocates: state (Q's and errors, gradient
 * memory) and scratch (buffers); 0 when off. Needs the registry only. */
void zinc_powersgd_sizes(const zinc_engine *e, uint64_t *state, uint64_t *scratch);
/* This window's reduction is PowerSGD's (iteration >= start_powerSGD_iter). */
int zinc_powersgd_active(const zinc_engine *e);
/* A launched reduction of these modules: kept for the flush (every module
 * is launched once per window). */
zinc_status zinc_powersgd_defer(zinc_engine *e, const int *mods, int nmods);
/* At the window's flush (collective over dp): the deferred modules reduced
 * together; every rank's gradient buffer ends with the sum over ranks
 * (approximated for the compressed parameters). */
zinc_status zinc_powersgd_flush(zinc_engine *e);
/* 1 (once) when the last window's gradients are whole on every rank (the
 * stage-0 all-gather is not needed). */
int zinc_powersgd_take_whole(zinc_engine *e);
/* --------------------------------------------------------- zoadam.c */
/* 0/1 Adam (optimizer.type "ZeroOneAdam", stage 0): its state, buffers and
 * registered method state (no-op for another optimizer); after layout. */
zinc_status zinc_zoadam_init(zinc_engine *e);
void zinc_zoadam_free(zinc_engine *e);
/* Its state and scratch bytes (the estimator's and the build's sizes). */
void zinc_zoadam_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* 1 when the coming step keeps the gradients rank-local (no all-reduce by
 * the engine): 0/1 Adam's compressed and local steps over several ranks. */
int zinc_zoadam_local_grads(zinc_engine *e);
/* On such a step: the gradient norm's sum of squares and the inf/NaN flag
 * agreed over the data-parallel ranks (collective); otherwise a no-op. */
zinc_status zinc_zoadam_norm(zinc_engine *e, double *total, int *overflow);
/* 0/1 Adam's communication and update of step e->step + 1 (lr before the
 * group scales; grad_scale step.c's 1 / (loss scale x dp_size x
 * accumulation)). Collective over the data-parallel group. */
zinc_status zinc_zoadam_update(zinc_engine *e, double lr, double grad_scale);
/* --------------------------------------------------------- onebit_lamb.c */
/* 1-bit LAMB (optimizer.type "OneBitLamb", stage 0), the same five calls
 * as 0/1 Adam's above. */
zinc_status zinc_onebit_lamb_init(zinc_engine *e);
void zinc_onebit_lamb_free(zinc_engine *e);
void zinc_onebit_lamb_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
int zinc_onebit_lamb_local_grads(const zinc_engine *e);
zinc_status zinc_onebit_lamb_norm(zinc_engine *e, double *total, int *overflow);
zinc_status zinc_onebit_lamb_update(zinc_engine *e, double lr, double grad_scale);
/* --------------------------------------------------------- onebit_adam.c */
/* OneBitAdam at stage 0: the plan and the worker/server errors (registered
 * as method state); nothing for another optimizer. After layout. */
zinc_status zinc_onebit_adam_init(zinc_engine *e);
void zinc_onebit_adam_free(zinc_engine *e);
/* 1 when this step's gradients stay local (OneBitAdam, e->step >=
 * freeze_step): grads.c reduces nothing, step.c gathers nothing. */
int zinc_onebit_local_grads(const zinc_engine *e);
/* The 1-bit optimizers' rank-local steps, after the local norm: every
 * rank's squared norm and overflow gathered (into e->ob_norms, allocated
 * at build by zinc_onebit_norms_init) and summed in rank order; *total
 * becomes N x the sum, *overflow any rank's (onebit_adam.c's header says
 * what the norm means). Collective over the data-parallel group. */
zinc_status zinc_onebit_norm_agree(zinc_engine *e, const char *who, double *total,
                                   int *overflow);
zinc_status zinc_onebit_norms_init(zinc_engine *e);
void zinc_onebit_norms_free(zinc_engine *e);
/* The compressed step over the runs (segs as step.c builds them); every
 * rank calls it with st, its status so far (segs unused unless ZINC_OK),
 * which is agreed before the collectives; local_scale turns a rank's
 * gradient into its mean gradient, times the clipping coefficient.
 * Returns the update's local status (the caller agrees on it). Collective
 * over the data-parallel group. */
zinc_status zinc_onebit_adam_step(zinc_engine *e, const zinc_opt_coef *c,
                                  const zinc_opt_seg *segs, zinc_status st,
                                  double local_scale);
/* Bytes of the error buffers zinc_onebit_adam_init allocates (estimator). */
uint64_t zinc_onebit_adam_state_bytes(const zinc_engine *e);

/* Gather the whole copy of persistent segments from the shards. */
zinc_status zinc_stage3_gather_persistent(zinc_engine *e);
void zinc_stage3_free(zinc_engine *e);

/* --------------------------------------------------------- trace.c */
/* Record (first micro-batch) or check one event of the trainer, and replay
 * the recorded event at this position (collectives follow the recording,
 * whatever this rank's trainer did). While recording, events that lead to
 * collectives are agreed across ranks first, so a rank that diverges gets
 * ZINC_ERR_INVALID (on every rank) instead of a collective that never
 * completes. */
zinc_status zinc_trace_event_add(zinc_engine *e, zinc_event_kind kind, zinc_module *m);
/* Replay the recorded events this micro-batch has not reached. */
zinc_status zinc_trace_replay_rest(zinc_engine *e);
/* One all-reduce that fails on every rank unless every rank is making the
 * same call (kind, module) now. */
zinc_status zinc_trace_agree(zinc_engine *e, zinc_event_kind kind, zinc_module *m);
/* Evaluation is collective at every stage: one all-reduce per fetch inside
 * eval_begin/eval_end (m) and one at eval_end (m NULL), failing on every
 * rank unless every rank makes the same call, so that work on some ranks
 * only is refused alike at stages 0-3 (stage 3 could not serve it). */
zinc_status zinc_trace_eval_agree(zinc_engine *e, zinc_module *m);
/* backward_end, before anything changes: a micro-batch that made fewer
 * calls than recorded is a deviation (collective only then, see
 * trace.c). */
zinc_status zinc_trace_end_check(zinc_engine *e);
/* zinc_backward_end's own check, before anything changes: ZINC_ERR_INVALID
 * (saying to use zinc_eval_begin/zinc_eval_end) when this micro-batch made
 * calls but handed out no gradient and reported no module, a forward pass
 * only; ZINC_OK otherwise. Local: the caller agrees on it. */
zinc_status zinc_trace_forward_only_check(const zinc_engine *e);
/* End of a micro-batch: every rank made the same number of calls (one
 * agreement); fix the trace after a recording micro-batch. */
zinc_status zinc_trace_end_micro(zinc_engine *e);
/* The agreement key for `tag` at call `pos` with event code `code`, and
 * its text for messages. */
int64_t zinc_trace_key(int tag, int64_t pos, int code);
void zinc_trace_key_text(const zinc_engine *e, int64_t key, char *buf, size_t n);
void zinc_trace_free(zinc_engine *e);

/* --------------------------------------------------------- step.c */
zinc_status zinc_step_run(zinc_engine *e, zinc_step_info *info);
/* The compute copy of the parameters from the fp32 master (cast of the
 * owned chunks, then the gathers the stage needs): after a load. */
zinc_status zinc_params_from_master(zinc_engine *e);

/* --------------------------------------------------------- offload.c */
/* 1 when the offloaded optimizer goes through staging copies: offload cpu
 * or nvme on the cuda device (or on the cpu device with
 * ZINC_OFFLOAD_STAGING=1). */
int zinc_offload_staged(const zinc_engine *e);
/* For the NVMe sub-group pipeline (offload_nvme.c), which stages its
 * gradients and parameters through the same slots: elements per slot, and
 * whether gradients come from / parameters go to device memory. */
int64_t zinc_offload_staging_group(const zinc_engine *e);
int zinc_offload_grads_on_device(const zinc_engine *e);
int zinc_offload_params_on_device(const zinc_engine *e);
/* 1 on the cuda device, or on the cpu device with ZINC_OFFLOAD_STAGING=1:
 * host memory is across PCIe and worth copying to the device first. */
int zinc_offload_host_remote(const zinc_engine *e);
/* Elements per sub-group of the offloaded step (cpu and NVMe):
 * zero_optimization.sub_group_size, at most the optimizer partition, at
 * least 1. DeepSpeed's 0 makes every parameter its own sub-group; zinc's
 * sub-groups are element ranges of the partition, and 0 takes
 * ZINC_SUB_GROUP_FOR_ZERO elements (the staging slot's size) instead of
 * ranges of one element. */
#define ZINC_SUB_GROUP_FOR_ZERO ((int64_t)16 << 20)
int64_t zinc_offload_sub_group(const zinc_engine *e);
/* Lamb: its runs are also cut every zinc_lamb_grid elements of the shard
 * (the same cut on every rank and at stage 0), and its sub-groups have
 * that size, so that no offload path cuts a run further: each run's norms
 * are then the same bits whatever the stage or offload target. */
int64_t zinc_lamb_grid(const zinc_engine *e);
/* The optimizer's hyperparameters from the resolved config. */
void zinc_opt_from_config(zinc_engine *e);
/* Pinned staging the build allocates for it (0 when not staged). */
size_t zinc_offload_staging_bytes(const zinc_engine *e);
zinc_status zinc_offload_init(zinc_engine *e);
void zinc_offload_free(zinc_engine *e);
/* One pass of the CPU optimizer in sub-groups with gradient copies in and
 * parameter copies out overlapping it (segs: one per run, as step.c builds
 * them). Lamb's UPDATE pass (segs without param_out) copies gradients in,
 * writes no parameter and fills norms[2 j], norms[2 j + 1] for run j; its
 * APPLY pass copies no gradient. norms is NULL otherwise. */
zinc_status zinc_offload_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                              int nseg, int pass, double *norms);

/* --------------------------------------------------------- offload_partial.c */
/* offload_optimizer.ratio < 1 applies: device cpu, stages 1-3. */
int zinc_partial_enabled(const zinc_engine *e);
/* D: the optimizer elements that stay on the device (0 when off). */
int64_t zinc_partial_device_numel(const zinc_engine *e);
/* Move D elements' master and state from host to device in bytes (the
 * build's sizes; a no-op when off). */
void zinc_partial_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* Allocate both sides (instead of e->master/exp_avg/exp_avg_sq); free. */
zinc_status zinc_partial_alloc(zinc_engine *e);
void zinc_partial_free(zinc_engine *e);
/* zinc_opt_read/zinc_opt_write's copy when partial.on. */
zinc_status zinc_partial_opt_io(zinc_engine *e, int array, int64_t off, int64_t count,
                                float *host, int write);
/* One optimizer pass (segs: one per run, as step.c builds them): the
 * device's op over [0, D), the CPU optimizer over the rest (through the
 * staged pipeline when e->off.ready). norms as zinc_offload_step's. */
zinc_status zinc_partial_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                              const zinc_opt_seg *segs, int nseg, int pass, double *norms);

/* --------------------------------------------------------- offload_pcache.c */
/* Bytes of the partition max_in_cpu keeps in host memory (0 when off):
 * the longest prefix of whole modules' units within max_in_cpu elements;
 * *elems (may be NULL) its elements, *units (may be NULL) its units. Needs
 * the layout only (the estimator calls it). */
size_t zinc_pcache_plan(const zinc_engine *e, int64_t *elems, int *units);
/* Bytes of the partition's swap region: the rest (at least 1). */
uint64_t zinc_pcache_disk_bytes(const zinc_engine *e);
zinc_status zinc_pcache_init(zinc_engine *e);
void zinc_pcache_free(zinc_engine *e);
/* The head of partition range [*off, *off + *bytes) the cache holds is
 * copied to (write: from) *data; off, bytes and data advance past it. */
void zinc_pcache_io(zinc_engine *e, size_t *off, size_t *bytes, char **data, int write);

/* --------------------------------------------------------- nvme.c */
zinc_status zinc_nvme_init(zinc_engine *e);
void zinc_nvme_free(zinc_engine *e);
/* Add what NVMe offload holds (swap area on disk, host buffers) to bytes:
 * exactly what zinc_nvme_init accounts. */
void zinc_nvme_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* ZINC_ERR_CONFIG when offload_param.buffer_size cannot hold a fetch. */
zinc_status zinc_nvme_check_config(const zinc_engine *e);
/* A free parameter read buffer of at least `bytes`, or NULL (all busy). */
void *zinc_nvme_param_buffer_take(zinc_engine *e, size_t bytes);
void zinc_nvme_param_buffer_give(zinc_engine *e, void *buf);
int zinc_nvme_opt_on_disk(const zinc_engine *e);
int zinc_nvme_param_on_disk(const zinc_engine *e);
/* The reduced gradient partition lives in the NVMe swap area instead of
 * host memory (grad_part NULL): offload_optimizer nvme at stages 2-3 on a
 * host device without gradient compression, communication_data_type,
 * PowerSGD, DGC momentum or the
 * 1-bit/0-1 optimizers (zinc_nvme_grads_swapped: from the settings, for the
 * build and the estimator; zinc_nvme_grads_on_disk: this engine's). */
int zinc_nvme_grads_swapped(const zinc_engine *e);
int zinc_nvme_grads_on_disk(const zinc_engine *e);
/* Elements [off, off + count) of the partition on disk into dst (f32). */
zinc_status zinc_nvme_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst);
/* Partition elements [off, off + count) = (overwrite ? 0 : themselves) +
 * src (count elements of dtype, host-readable), with the device's
 * accumulate_f32; src NULL writes zeros. Synchronous. */
zinc_status zinc_nvme_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                      int64_t count, int overwrite);
/* Tests: inject I/O faults (ZINC_AIO_FAULT syntax) from now on. */
zinc_status zinc_nvme_inject(zinc_engine *e, const char *spec);
/* Tests: payload bytes the NVMe swap areas have read and written so far
 * (0 without NVMe offload). */
void zinc_nvme_io_bytes(const zinc_engine *e, uint64_t *read, uint64_t *written);
/* The optimizer state (array 0 master, 1 exp_avg, 2 exp_avg_sq) and the
 * stage-3 parameter partition, wherever they live, to/from host memory. */
zinc_status zinc_opt_read(zinc_engine *e, int array, int64_t off, int64_t count, float *dst);
zinc_status zinc_opt_write(zinc_engine *e, int array, int64_t off, int64_t count,
                           const float *src);
zinc_status zinc_pshard_read(zinc_engine *e, size_t off, size_t bytes, void *dst);
zinc_status zinc_pshard_write(zinc_engine *e, size_t off, size_t bytes, const void *src);
/* The f32 master of optimizer element x..x+n (n within one chunk) when it
 * lives in the parameter memory (master_in_params). */
float *zinc_master_in_params(const zinc_engine *e, int64_t x, int64_t *chunk_left);
/* One optimizer pass over NVMe-resident state in sub-groups (segs: one per
 * run, with gradient and in-memory parameter pointers). Lamb's UPDATE pass
 * writes no parameters and fills norms[2 j], norms[2 j + 1] for run j (its
 * runs never cross a sub-group: zinc_lamb_grid); norms is NULL otherwise. */
zinc_status zinc_nvme_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms);

/* --------------------------------------------------------- activations.c */
/* Free the engine's whole activation-checkpoint store (every checkpoint
 * still held and the store itself); the public zinc_activation_free drops
 * one checkpoint. */
void zinc_activation_store_destroy(zinc_engine *e);

/* --------------------------------------------------------- profiler.c */
zinc_status zinc_prof_create(zinc_prof **out);
void zinc_prof_destroy(zinc_prof *p);
void zinc_prof_account(void *prof, int location, int category, int64_t bytes);
void zinc_prof_stats(const zinc_prof *p, zinc_mem_stats *out);
/* Free the list of the trainer's registered activations. */
void zinc_memory_trainer_free(zinc_engine *e);
void zinc_prof_phase(zinc_prof *p, int phase);
uint64_t zinc_formula_model_states(const zinc_engine *e);

#endif /* ZINC_ENGINE_H */
