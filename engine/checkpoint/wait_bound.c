/*
 * wait_bound.c — the bound of a checkpoint call's waits (wait_bound.h).
 */
#include "engine/checkpoint/wait_bound.h"

#include <stdio.h>

#include "engine/failure.h"

double zinc_ckpt_wait_bound(const zinc_engine *e) {
  return e->cfg.checkpoint_timeout_s > e->cfg.comm_timeout_s ? e->cfg.checkpoint_timeout_s
                                                             : e->cfg.comm_timeout_s;
}

/* Both host comms a checkpoint call agrees over (one when they are one). */
static zinc_status set_both(zinc_engine *e, double world_s, double dp_s) {
  zinc_status st = zinc_comm_set_timeout(e->world, world_s);
  if (e->dp_host != e->world) {
    zinc_status dst = zinc_comm_set_timeout(e->dp_host, dp_s);
    st = st == ZINC_OK ? dst : st;
  }
  return st;
}

zinc_status zinc_ckpt_wait_begin(zinc_engine *e, zinc_ckpt_wait *w, const char *what) {
  double bound = zinc_ckpt_wait_bound(e);
  w->prev_world = e->world->timeout_s;
  w->prev_dp = e->dp_host->timeout_s;
  w->raised = bound > w->prev_world || bound > w->prev_dp; /* not again when nested */
  if (!w->raised)
    return ZINC_OK;
  zinc_status st = set_both(e, bound, bound);
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "%s: waiting for the collectives in flight before its checkpoint I/O",
                    what);
    return zinc_ckpt_wait_end(e, w, st);
  }
  return ZINC_OK;
}

zinc_status zinc_ckpt_wait_end(zinc_engine *e, zinc_ckpt_wait *w, zinc_status st) {
  char msg[2048] = "";
  if (st != ZINC_OK)
    snprintf(msg, sizeof msg, "%s", zinc_last_error());
  if (w->raised) {
    (void)set_both(e, w->prev_world, w->prev_dp); /* a failed comm returns at once */
    w->raised = 0;
  }
  if (st == ZINC_ERR_COMM) {
    /* a peer lost, or busy beyond the bound: say which bound it was, and
     * stop (the comm is unusable from here) */
    zinc_error(st, "%s (this call waited for its peers up to zinc.checkpoint_timeout_s, "
               "%.0f s: a peer that is only slow, with a large client state or on a slow "
               "filesystem, needs a larger one)", msg, zinc_ckpt_wait_bound(e));
    zinc_engine_fail(e, st);
  } else if (st != ZINC_OK) {
    zinc_error(st, "%s", msg); /* the call's message, not the reset's */
  }
  return st;
}
