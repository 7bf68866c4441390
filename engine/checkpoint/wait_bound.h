/*
 * wait_bound.h — how long the ranks of a checkpoint call wait for each
 * other (engine/checkpoint/wait_bound.c).
 *
 * A save, a load, an export or a pretrained load keeps ranks busy with
 * file I/O of different lengths — the rank writing the manifest and a
 * 1 GiB client state, a shard on a slow filesystem, a shard's crc check —
 * while their peers wait at the next agreement. Such a peer is busy, not
 * lost; the comm timeout, sized for collectives, would report it as dead,
 * stop the engine and lose the save. So these calls bound the waits of
 * the host comms they agree over (the world and the data-parallel group)
 * by zinc.checkpoint_timeout_s (comm_timeout_s when that is larger) for
 * their duration: a peer that is truly gone is still found, within that
 * bound, and the failure says which bound it was.
 */
#ifndef ZINC_CKPT_WAIT_BOUND_H
#define ZINC_CKPT_WAIT_BOUND_H

#include "engine/engine.h"

typedef struct {
  double prev_world, prev_dp; /* the bounds in force before (nested calls) */
  int raised;
} zinc_ckpt_wait;

/* The bound of a checkpoint call's waits, in seconds. */
double zinc_ckpt_wait_bound(const zinc_engine *e);
/* Raise the bound for a call (waits for batches already started first,
 * as zinc_comm_set_timeout does). A failure (a comm that failed) stops
 * the engine and is returned; *w is then ended already. */
zinc_status zinc_ckpt_wait_begin(zinc_engine *e, zinc_ckpt_wait *w, const char *what);
/* Set the bound back; st is the call's status, returned, its message
 * saying which bound it was when it is a comm failure (which also stops
 * the engine: the comm is unusable). */
zinc_status zinc_ckpt_wait_end(zinc_engine *e, zinc_ckpt_wait *w, zinc_status st);

#endif /* ZINC_CKPT_WAIT_BOUND_H */
