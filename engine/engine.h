/*
 * engine.h — the ZeRO engine's internal state, shared by the engine/ files:
 * the engine struct, each field with its extent and location, and
 * engine.c's calls. The model's types are registry.h's (included here);
 * every other part declares its calls in a header of its own: support.h
 * and failure.h (the bottom: any part may call them), grads.h, trace.h,
 * step.h, build.h, activations.h, pipe.h (pipeline parallelism),
 * stage3/stage3.h, monitor/monitor.h, the reducer table reduce/reduce.h
 * (the methods' own: reduce/methods.h), and the placement seam's
 * place/place.h.
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
 * from the group only (stage3/hpz.c).
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
#include "engine/registry.h"
#include "device/device.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "zinc.h"
#include "kernels/zinc_math.h"

typedef struct zinc_prof zinc_prof;
typedef struct zinc_reduction zinc_reduction; /* grads.h */
typedef struct zinc_trace_event zinc_trace_event; /* trace.h */

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
                             split that node's cores (place/cpu.c) */
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
                             (NULL: on NVMe, zinc_place_grad_location) */
  float *grad_window_sum; /* stage 2/3, grad_part in host memory across
                             PCIe, gradient_accumulation_steps > 1: (S) f32
                             on the device, the window's sum, copied into
                             grad_part once at the boundary (grads.c), or
                             NULL */
  int64_t grad_host_writes; /* writes of reduced gradients into host memory
                             across PCIe (one per module reduction, or one
                             per window with grad_window_sum; tests)    */
  void *master, *exp_avg, *exp_avg_sq; /* (opt_numel) each in its dtype:
                             zinc_master_dtype, zinc_state_dtype (place.h;
                             fp32 unless the bf16 section says bf16) */
  int64_t opt_numel;      /* S, or N*S at stage 0 (trained units only) */
  zinc_opt_hparams optim;  /* the optimizer (optimizer.type and params) */
  int opt_slots;          /* its state slots (ZINC_OPT_SLOT_* bits)     */
  int opt_location;       /* ZINC_LOC_DEVICE or ZINC_LOC_HOST (offload); with
                             NVMe offload or partial offload master/m/v are
                             NULL and live where the placement keeps them
                             (place/place.h) */
  struct zinc_place *pl;  /* the placement's state (place/place.h), NULL
                             outside zinc_place_init .. zinc_place_free */
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

  /* ---- gradient communication (reduce/reduce.h) */
  struct zinc_reduce_state *rd; /* the selected method and its state (the
                             reducer's own: reduce/methods.h); NULL until
                             zinc_reduce_init and after zinc_reduce_free */
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
  int64_t read_seq;       /* parameter reads from NVMe started (stage3/) */
  int64_t alloc_count;    /* engine allocations so far (support.c) */
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

  /* ---- the trainer's blob saved with checkpoints (checkpoint/load.c) */
  void *client_state;
  int64_t client_state_bytes; /* 0: none set or loaded */

  /* ---- timers */
  zinc_phase phase;
  double phase_start;
  double t_forward, t_backward, t_step, t_comm_wait;
  double t_taken[4];      /* the four above summed at each zinc_timers_take */
  double t_inner_wait;    /* the part of t_comm_wait that is the model's own
                             forward/backward work, as DeepSpeed books it
                             in bwd_inner: stage 3's parameter gathers,
                             activation restores, the trainer's
                             model-parallel sums (never reset)            */
  double t_bwd_wait;      /* the other comm waits inside backward phases
                             (gradient reductions and the agreements
                             before them), since the engine began:
                             wall_clock_breakdown's bwd_allreduce         */
  double phase_waited;    /* at the phase's start: t_taken[3] + t_comm_wait
                             less t_inner_wait                            */

  /* ---- the trainer's registered activations (memory/profiler.c) */
  struct zinc_trainer_mem *tmem;
  int ntmem, captmem;

  /* ---- monitors (monitor/monitor.c) */
  struct zinc_monitor *mon; /* world rank 0 with a monitor enabled, else NULL */
  double mon_micro[5], mon_window[5]; /* timer totals at the last step call
                                         and at the last boundary        */
  int timeline_warned;

  /* ---- activation checkpoints (activations.c) */
  struct zinc_act_store *acts;
};

/* ------------------------------------------------------------- engine.c */
void zinc_engine_phase(zinc_engine *e, zinc_phase p);
/* The cpu device the CPU offload of a GPU rank runs on: its threads on the
 * cores of its GPU's NUMA node, split among the local ranks near it (the
 * local-rank split where hwloc has no I/O information). */
zinc_status zinc_engine_offload_cpu_device(zinc_engine *e, zinc_device **out);

#endif /* ZINC_ENGINE_H */
