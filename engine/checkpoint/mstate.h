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
 * A method's state is only what the method alone owns. The engine's
 * weights and moments are never method state: they are saved in the
 * shards and load and reshard like every optimizer's, whatever the method
 * (a load never zeroes them). A method that lets the ranks' copies of
 * them differ between its syncs (0/1 Adam's local steps) registers this
 * rank's copy as a ZINC_MSTATE_RANK_COPY: kept beside its state so that a
 * resume at the same layout is bit for bit, and otherwise left exactly as
 * the shards loaded it.
 *
 * Save: every data-parallel rank writes its registered buffers, in
 * registration order, raw, to rank_NNNNN.zms beside its shard (fsynced,
 * crc32c in the manifest). The manifest's "method_state" lists dp_size and
 * every entry's name and bytes.
 * Load: when the engine registered exactly the saved entries (names and
 * bytes, same order) at the same dp_size, and the load is not weights
 * only, every rank's bytes come back exactly, so training resumes bit for
 * bit. Otherwise (another world size, method or layout; or nothing saved;
 * or a weights-only load), after the engine's arrays are loaded:
 *   RANK        the buffer is reset (zeros, or the method's reset
 *               function), as DeepSpeed resets 1-bit Adam's errors on
 *               every load;
 *   REPLICATED  (the same bytes on every rank whatever the layout: per
 *               parameter or per group scalars) restored from the saved
 *               rank 0's file when it holds an entry of the same name and
 *               bytes and the load is not weights only; else reset;
 *   RANK_COPY   left as the engine loaded it (never zeroed);
 * and rank 0 says at info level which entries were reset and why.
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

/* What a registered buffer is to a load that does not restore every
 * rank's bytes (the header comment). */
typedef enum {
  ZINC_MSTATE_RANK = 0,   /* the method's own, this rank's: reset */
  ZINC_MSTATE_REPLICATED, /* the method's own, the same on every rank and
                             layout: restored from rank 0's file, else reset */
  ZINC_MSTATE_RANK_COPY   /* this rank's copy of an engine array: left as
                             the engine's load made it */
} zinc_mstate_kind;

/* Bring a buffer that was not restored to the method's fresh state; runs
 * after the engine's own arrays are loaded, so it may read them. NULL:
 * zeros. */
typedef zinc_status (*zinc_mstate_reset_fn)(zinc_engine *e, void *ptr, size_t bytes);

typedef struct {
  char name[ZINC_MSTATE_NAME]; /* "<method>.<buffer>", unique */
  void *ptr;                   /* engine memory: device (host = 0) or host */
  size_t bytes;
  int host;
  zinc_mstate_kind kind;
  zinc_mstate_reset_fn reset;  /* NULL: zeros */
} zinc_mstate_entry;

/* Register a buffer of the rank's method state (kept by the caller, which
 * frees it; zinc_mstate_clear forgets every entry at destroy): a
 * ZINC_MSTATE_RANK buffer reset to zeros.
 * ZINC_ERR_INVALID for a duplicate name, a name too long or a full table. */
zinc_status zinc_mstate_register(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                 int host);
/* The same, of any kind, with a reset function (NULL: zeros; a RANK_COPY
 * takes none: it is never reset). */
zinc_status zinc_mstate_register_ex(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                    int host, zinc_mstate_kind kind, zinc_mstate_reset_fn reset);
void zinc_mstate_clear(zinc_engine *e);
/* Bytes of the registered buffers together (one rank's .zms file). */
int64_t zinc_mstate_total(const zinc_engine *e);


#endif /* ZINC_CKPT_MSTATE_H */
