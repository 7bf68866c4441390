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
#include "engine/place/placements.h"
#include "engine/reduce/onebit.h"
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
       ZINC_KEY_END };      /* backward_end, after this many calls */
typedef struct {
  int kind;               /* zinc_event_kind */
  int module;
} zinc_trace_event;

/* ----------------------------------------------------------------- engine */

typedef enum { ZINC_PHASE_IDLE = 0, ZINC_PHASE_FORWARD, ZINC_PHASE_BACKWARD,
               ZINC_PHASE_STEP, ZINC_PHASE_N } zinc_phase;

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

/* --------------------------------------------------------- engine.c */
void zinc_engine_phase(zinc_engine *e, zinc_phase p);
/* The cpu device the CPU offload of a GPU rank runs on: its threads on the
 * cores of its GPU's NUMA node, split among the local ranks near it (the
 * local-rank split where hwloc has no I/O information). */
zinc_status zinc_engine_offload_cpu_device(zinc_engine *e, zinc_device **out);

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
/* The optimizer's hyperparameters from the resolved config. */
void zinc_opt_from_config(zinc_engine *e);

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
