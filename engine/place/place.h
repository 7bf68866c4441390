/*
 * place.h — the placements' seam: how everything outside the optimizer
 * step reads and writes the optimizer state and the stage-3 parameter
 * partition, wherever a placement keeps them (device, host, partial, NVMe,
 * the host cache in front of NVMe).
 */
#ifndef ZINC_ENGINE_PLACE_H
#define ZINC_ENGINE_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* Whether the fp32 master can be the parameter memory (master_in_params):
 * all parameters f32, optimizer state on the device, parameters not on
 * NVMe: the fp32 master would duplicate the parameters bit for bit. From
 * the settings and the registry only (the estimator's bare engine asks
 * too). */
static inline int zinc_master_aliases_params(const zinc_engine *e) {
  return e->psi[ZINC_BF16] == 0 && e->psi[ZINC_F16] == 0 &&
         e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NONE &&
         !(e->cfg.stage == 3 && e->cfg.offload_param.device != ZINC_OFFLOAD_NONE);
}

/* ------------------------------------------------------------- access.c */
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
