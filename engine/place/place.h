/*
 * place.h — the placement seam: where the optimizer state, the reduced
 * gradient partition (stages 2-3) and the stage-3 parameter partition
 * live, and how the step and every other reader reach them. The core
 * (engine/'s top-level files, stage3/, monitor/) asks this header and
 * names no placement.
 *
 * Placements (one table row each, place.c's table, the first row whose
 * `selects` is true wins; the order is the precedence):
 *   nvme        offload_optimizer.device "nvme": the optimizer state (and,
 *               on the cpu device at stages 2-3, the gradient partition)
 *               in swap areas; with offload_param "nvme" the parameter
 *               partition too (nvme.c, nvme_step.c, pcache.c)
 *   partial     offload_optimizer.ratio < 1 with device "cpu", stages 1-3:
 *               the state split between device and host memory
 *               (partial.c; with offload_param "nvme" its init refuses)
 *   nvme_param  stage 3, offload_param.device "nvme": the parameter
 *               partition in a swap area behind the host cache
 *               (offload_param.max_in_cpu), the optimizer state in memory
 *               (nvme_param.c)
 *   cpu         offload_optimizer.device "cpu": the state in host memory,
 *               stepped by the CPU optimizer, through staging copies when
 *               host memory is across PCIe (cpu.c)
 *   device      the default: the state where the device's optimizer op
 *               reads it (device.c)
 * A row's unset hook is the device row's: the dispatch wrappers below
 * (place.c) fall back, so no caller tests a hook for NULL and no caller
 * asks which placement is on.
 *
 * Selection depends on the settings and the device only (the estimator's
 * bare engine, which has no device and never runs init, sizes through the
 * same row). The placement's state is one struct behind e->pl (place/
 * only: placements.h), allocated by zinc_place_init and gone after
 * zinc_place_free.
 *
 * Contract of the hooks (every row keeps it; the wrappers add nothing):
 *  - Ordering: sizes any time (from the settings and the layout). init
 *    once, at build, after the core allocated the parameters
 *    (param_full, param_shard at param_location, persistent segments)
 *    and before the collectives' buffers; free once, at destroy or after
 *    a failed build (it frees what init got, whatever point init reached;
 *    zinc_place_free also takes an engine whose init never ran). optim
 *    at the accumulation boundary, after the gradients are final on
 *    e->stream; the rest between init and free.
 *  - Collectives: none. Every hook is local to the rank: a failure is
 *    returned with its message, and the caller agrees on it before its
 *    next collective (init: zinc_build_buffers over the world; optim: the
 *    step over the data-parallel group; a stage-3 parameter read at fetch:
 *    deferred and agreed at backward_end or eval_end). A hook never
 *    blocks on a peer.
 *  - What a hook may touch: the state behind e->pl; the core fields the
 *    placement owns by this contract: e->master, e->exp_avg, e->exp_avg_sq
 *    (init sets them, or leaves them NULL when the state is not one
 *    array in memory) and e->grad_part (init sets it, or leaves it NULL
 *    when the partition is not in memory); the buffers the hook's
 *    arguments point into; device work on e->stream or on streams of its
 *    own, complete (or ordered before e->stream's later work) when the
 *    hook returns. It reads but never changes the layout, the registry,
 *    the settings or the step state, and it allocates through the
 *    engine's buffer calls (support.h), so the profiler sees every byte.
 *  - optim: one pass of the fused optimizer over nseg segments (one per
 *    optimizer run, e->runs order, as the step builds them), with the
 *    device op's meaning of pass and norms (device/device.h): Lamb's
 *    UPDATE pass writes no parameter and fills norms[2 j], norms[2 j + 1]
 *    for run j, summed over the run in one piece; otherwise norms is
 *    NULL. A segment's master/exp_avg/exp_avg_sq are the in-memory
 *    arrays' (NULL where the placement keeps them elsewhere), its grad
 *    NULL where the partition is not in memory, its param_out NULL where
 *    the stage-3 partition is not. Bits: every placement computes the
 *    bits of the device row (the same per-element math, the same cuts of
 *    Lamb's norms).
 *  - opt_io: optimizer elements [off, off + count) of array 0 (master),
 *    1 (exp_avg) or 2 (exp_avg_sq), kept by the optimizer and below
 *    opt_numel (the wrappers check), to (write: from) host memory;
 *    synchronous.
 *  - grad_location: where the reduced gradient partition lives
 *    (ZINC_LOC_DEVICE, ZINC_LOC_HOST, or ZINC_LOC_NVME when e->grad_part
 *    is NULL); from the settings and the device only. grad_read and
 *    grad_accumulate reach it wherever it is; synchronous.
 *  - pshard_io: bytes of the stage-3 parameter partition to (write: from)
 *    host memory; synchronous. param_buffer_take/give: the host buffers a
 *    fetch reads a partition that is not memory into (NULL: none free, or
 *    none as large; the fetch then completes an older gather first).
 */
#ifndef ZINC_ENGINE_PLACE_H
#define ZINC_ENGINE_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct zinc_placement {
  const char *name;
  /* This row applies (settings and device only). */
  int (*selects)(const zinc_engine *e);
  /* Add what the placement holds for good (optimizer state, gradient
   * partition at stages 2-3, its buffers and swap areas) to bytes, by
   * location and category: exactly what init accounts. */
  void (*sizes)(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
  zinc_status (*init)(zinc_engine *e);
  void (*free)(zinc_engine *e);
  zinc_status (*optim)(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                       const zinc_opt_seg *segs, int nseg, int pass, double *norms);
  zinc_status (*opt_io)(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                        int write);
  int (*grad_location)(const zinc_engine *e);
  zinc_status (*grad_read)(zinc_engine *e, int64_t off, int64_t count, float *dst);
  /* Partition elements [off, off + count) = (overwrite ? 0 : themselves) +
   * src (count elements of dtype, device-readable), in f32 with the
   * device's accumulate_f32; src NULL writes zeros. */
  zinc_status (*grad_accumulate)(zinc_engine *e, int64_t off, const void *src, int dtype,
                                 int64_t count, int overwrite);
  zinc_status (*pshard_io)(zinc_engine *e, size_t off, size_t bytes, void *data, int write);
  void *(*param_buffer_take)(zinc_engine *e, size_t bytes);
  void (*param_buffer_give)(zinc_engine *e, void *buf);
} zinc_placement;

/* ------------------------------------------------ place.c: the table */
/* The row the settings select (the engine's own after init). */
const zinc_placement *zinc_place_row(const zinc_engine *e);
void zinc_place_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
zinc_status zinc_place_init(zinc_engine *e);
void zinc_place_free(zinc_engine *e);
zinc_status zinc_place_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                             const zinc_opt_seg *segs, int nseg, int pass, double *norms);
int zinc_place_grad_location(const zinc_engine *e);
zinc_status zinc_place_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst);
zinc_status zinc_place_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                       int64_t count, int overwrite);
void *zinc_place_param_buffer_take(zinc_engine *e, size_t bytes);
void zinc_place_param_buffer_give(zinc_engine *e, void *buf);

/* Capabilities the core may ask, whatever the placement. */
/* Host memory is across PCIe from the device (the cuda device, or the cpu
 * device with ZINC_OFFLOAD_STAGING=1): host-resident data is worth
 * copying to the device before a collective or kernel reads it. */
int zinc_place_host_remote(const zinc_engine *e);
/* Lamb: its runs are also cut every zinc_lamb_grid elements of the shard
 * (the same cut on every rank and at stage 0), and the offloaded steps'
 * sub-groups have that size, so that no placement cuts a run further:
 * each run's norms are then the same bits whatever the stage or
 * placement (cpu.c). */
int64_t zinc_lamb_grid(const zinc_engine *e);

/* Whether the fp32 master can be the parameter memory (master_in_params):
 * all parameters f32, optimizer state on the device, parameters not on
 * NVMe: the fp32 master would duplicate the parameters bit for bit. From
 * the settings and the registry only (the estimator's bare engine asks
 * too). */
static inline int zinc_master_aliases_params(const zinc_engine *e) {
  return e->psi[ZINC_BF16] == 0 && e->psi[ZINC_F16] == 0 &&
         !e->cfg.bf16_master_weights_and_grads &&
         e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NONE &&
         !(e->cfg.stage == 3 && e->cfg.offload_param.device != ZINC_OFFLOAD_NONE);
}

/* The dtypes the optimizer keeps its master weights (array 0) and its
 * moments (arrays 1, 2) in: ZINC_F32, or ZINC_BF16 with the bf16 section's
 * bf16_master_weights_and_grads and bf16_optimizer_states. Every value is
 * computed in fp32 by the optimizer and rounded when stored (zinc_math.h). */
static inline int zinc_master_dtype(const zinc_engine *e) {
  return e->cfg.bf16_master_weights_and_grads ? ZINC_BF16 : ZINC_F32;
}
static inline int zinc_state_dtype(const zinc_engine *e) {
  return e->cfg.bf16_optimizer_states ? ZINC_BF16 : ZINC_F32;
}
static inline int zinc_array_dtype(const zinc_engine *e, int array) {
  return array == 0 ? zinc_master_dtype(e) : zinc_state_dtype(e);
}
/* Bytes per trained element of the optimizer state: the master (none when
 * it is the parameter memory) and the slots the optimizer keeps. */
static inline uint64_t zinc_opt_elem_bytes(const zinc_engine *e) {
  return (zinc_master_aliases_params(e) ? 0 : zinc_dtype_size(zinc_master_dtype(e))) +
         (uint64_t)zinc_opt_state_bytes(&e->optim) / 4 * zinc_dtype_size(zinc_state_dtype(e));
}

/* ------------------------------------------------------------- access.c */
/* The optimizer state (array 0 master, 1 exp_avg, 2 exp_avg_sq) and the
 * stage-3 parameter partition, wherever they live, to/from host memory
 * (the row's opt_io and pshard_io, after the checks every row shares). */
zinc_status zinc_opt_read(zinc_engine *e, int array, int64_t off, int64_t count, float *dst);
zinc_status zinc_opt_write(zinc_engine *e, int array, int64_t off, int64_t count,
                           const float *src);
zinc_status zinc_pshard_read(zinc_engine *e, size_t off, size_t bytes, void *dst);
zinc_status zinc_pshard_write(zinc_engine *e, size_t off, size_t bytes, const void *src);
/* The f32 master of optimizer element x..x+n (n within one chunk) when it
 * lives in the parameter memory (master_in_params). */
float *zinc_master_in_params(const zinc_engine *e, int64_t x, int64_t *chunk_left);
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

#endif /* ZINC_ENGINE_PLACE_H */
