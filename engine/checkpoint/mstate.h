/*
 * mstate.h — the rank-local state of the gradient-compression methods in
 * checkpoints (engine/checkpoint/mstate.c): 1-bit Adam's worker and server
 * errors, PowerSGD's Q matrices and residuals, the pending corrections of
 * delayed averaging, DGC's momentum, ... .
 *
 * A method registers each buffer it keeps once, after allocating it (in
 * its init, before the engine's first step), under a stable name:
 *
 *   ZINC_CHECK(zinc_mstate_register(e, "onebit.worker_error", buf, bytes, 0));
 *
 * Save: every data-parallel rank writes its registered buffers, in
 * registration order, raw, to rank_NNNNN.zms beside its shard (fsynced,
 * crc32c in the manifest). The manifest's "method_state" lists dp_size and
 * every entry's name and bytes.
 * Load: when the engine registered exactly the saved entries (names and
 * bytes, same order) at the same dp_size, every rank's bytes come back
 * exactly, so training resumes bit for bit. Otherwise (another world size,
 * method or layout; or nothing saved; or a weights-only load) every
 * registered buffer starts at zero and rank 0 says which entries and why
 * at info level (as DeepSpeed resets 1-bit Adam's errors on every load).
 * Scalars a method keeps (counters that are not a function of e->step)
 * register a host buffer (host = 1).
 */
#ifndef ZINC_CKPT_MSTATE_H
#define ZINC_CKPT_MSTATE_H

#include <stddef.h>

#include "zinc.h"


#define ZINC_MSTATE_MAX 16
#define ZINC_MSTATE_NAME 48
#define ZINC_MSTATE_FILE_FORMAT "rank_%05d.zms"

typedef struct {
  char name[ZINC_MSTATE_NAME]; /* "<method>.<buffer>", unique */
  void *ptr;                   /* engine memory: device (host = 0) or host */
  size_t bytes;
  int host;
} zinc_mstate_entry;

/* Register a buffer of the rank's method state (kept by the caller, which
 * frees it; zinc_mstate_clear forgets every entry at destroy).
 * ZINC_ERR_INVALID for a duplicate name, a name too long or a full table. */
zinc_status zinc_mstate_register(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                 int host);
void zinc_mstate_clear(zinc_engine *e);
/* Bytes of the registered buffers together (one rank's .zms file). */
int64_t zinc_mstate_total(const zinc_engine *e);


#endif /* ZINC_CKPT_MSTATE_H */
