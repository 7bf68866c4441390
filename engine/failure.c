/*
 * failure.c — how the engine fails: the rules every rank follows when one
 * of them meets an error (docs/faults.md lists each case and its test).
 *
 * 1. Every collective phase is: compute locally, agree on the status across
 *    the ranks involved (zinc_engine_agree), then the collective. A rank
 *    that failed locally (allocation, I/O, a bad callback, a device error)
 *    never leaves its peers waiting inside a collective.
 * 2. Agreement gives every rank the same outcome: the status and message of
 *    the lowest failing rank, the message prefixed with "rank N: " on the
 *    others. The comm timeout is only for what cannot be agreed (a dead or
 *    silent peer). Inside the training loop each agreement also carries
 *    where the rank is (zinc_engine_agree_at): a rank that left the module
 *    order agrees at once, and its peers meet it at their next collective
 *    point, which always starts with an agreement (engine/trace.c).
 * 3. A failure that happens while the peers are already inside a collective
 *    with this rank (an NVMe read feeding a gather) is deferred: the rank
 *    goes on with the collective and the failure is agreed afterwards, at
 *    the end of the micro-batch or of evaluation (zinc_engine_defer, then
 *    zinc_engine_agree_deferred).
 * 4. A failure in the middle of a collective sequence stops the engine for
 *    good (zinc_engine_fail): further training calls are refused with the
 *    same status and message (zinc_engine_usable), because continuing on
 *    half-updated state would silently train on garbage. zinc_engine_destroy
 *    still frees everything. Misuse that changed nothing (a call in the
 *    wrong order) is refused with ZINC_ERR_INVALID and does not stop the
 *    engine. A comm failure (ZINC_ERR_COMM: a lost or frozen peer, here or
 *    agreed from a peer) also fails every comm the engine owns (their
 *    fate, comm/comm.h), so that no wait on another of them sits out the
 *    timeout for the same lost rank, and destroy returns at once.
 *
 * Declared in engine/failure.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/trace.h"

/* ------------------------------------------------- stop after a failure */

zinc_status zinc_engine_fail(zinc_engine *e, zinc_status st) {
  if (e && e->failed == ZINC_OK) {
    e->failed = st;
    snprintf(e->failed_msg, sizeof e->failed_msg, "%s", zinc_last_error());
    /* returned, so not logged (zinc.h: a call logs or returns, never both;
     * the trainer prints it once) */
    zinc_log(ZINC_LOG_DEBUG, "engine stopped: %s", e->failed_msg);
    if (st == ZINC_ERR_COMM) /* the world's fate holds every comm the engine made */
      zinc_comm_abort(e->world, e->failed_msg);
  }
  return st;
}

zinc_status zinc_engine_usable(const zinc_engine *e, const char *what) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "%s: engine is NULL", what);
  if (e->failed != ZINC_OK)
    return zinc_error(e->failed, "%s: the engine stopped after an earlier failure (%s); "
                      "reload state from a checkpoint in a new engine", what, e->failed_msg);
  if (!e->built)
    return zinc_error(ZINC_ERR_INVALID, "%s: the engine is not built; call "
                      "zinc_engine_build after registering every module", what);
  return ZINC_OK;
}

/* ------------------------------------------------ agreement across ranks */

static zinc_status agree_at(zinc_engine *e, zinc_comm *c, zinc_status st, int64_t key,
                            zinc_agreement *out);

/* Collective: every rank learns whether any rank failed, and gets the
 * message of the lowest failing rank (prefixed with its rank). Every rank
 * also says where it is (key): ranks that reached different agreement
 * points learn it here, in one all-reduce of four values (MIN of: first
 * failing rank, 0 if this rank failed else -1, key, -key).
 * It is a host collective on the data-parallel comm, which on the cpu
 * device carries the reductions too: it waits for the peers and for the
 * reductions still in flight (a blocking call drains the comm's started
 * batches). That time is a comm wait (zinc_timers.comm_wait; in the
 * backward pass wall_clock_breakdown's bwd_allreduce), not the trainer's. */
zinc_status zinc_engine_agree_at(zinc_engine *e, zinc_comm *c, zinc_status st, int64_t key,
                                 zinc_agreement *out) {
  double t0 = zinc_now();
  zinc_status r = agree_at(e, c, st, key, out);
  e->t_comm_wait += zinc_now() - t0;
  return r;
}

static zinc_status agree_at(zinc_engine *e, zinc_comm *c, zinc_status st, int64_t key,
                            zinc_agreement *out) {
  zinc_agreement local = {.lo = key, .hi = key, .all_failed = st != ZINC_OK};
  zinc_agreement *a = out ? out : &local;
  *a = local;
  if (c->size == 1)
    return st;
  int64_t v[4] = {st == ZINC_OK ? INT64_MAX : c->rank, st == ZINC_OK ? -1 : 0, key, -key};
  zinc_status cst = zinc_comm_allreduce(c, v, v, 4, ZINC_DT_I64, ZINC_OP_MIN);
  if (cst != ZINC_OK) {
    /* nothing was agreed: never "every rank failed alike here" */
    *a = (zinc_agreement){.lo = INT64_MIN, .hi = INT64_MAX, .all_failed = 0};
    return cst;
  }
  a->lo = v[2];
  a->hi = -v[3];
  a->all_failed = v[1] == 0;
  int64_t first = v[0];
  if (first == INT64_MAX) {
    if (a->lo == a->hi)
      return ZINC_OK;
    char lo[160], hi[160];
    zinc_trace_key_text(e, a->lo, lo, sizeof lo);
    zinc_trace_key_text(e, a->hi, hi, sizeof hi);
    return zinc_error(ZINC_ERR_INVALID, "data-parallel ranks reached different points of the "
                      "training loop: one at %s, another at %s; every rank must make the same "
                      "fetch, release, grads_ready and backward_end calls", lo, hi);
  }
  char msg[1024] = {0};
  int32_t code = (int32_t)st;
  if (c->rank == first)
    snprintf(msg, sizeof msg, "%s", zinc_last_error());
  cst = zinc_comm_broadcast(c, msg, sizeof msg, ZINC_DT_U8, (int)first);
  if (cst == ZINC_OK)
    cst = zinc_comm_broadcast(c, &code, 1, ZINC_DT_I32, (int)first);
  if (cst != ZINC_OK)
    return cst;
  msg[sizeof msg - 1] = '\0';
  if (c->rank != first)
    return zinc_error((zinc_status)code, "rank %d: %s", (int)first, msg);
  return (zinc_status)code;
}

zinc_status zinc_engine_agree(zinc_engine *e, zinc_comm *c, zinc_status st) {
  return zinc_engine_agree_at(e, c, st, 0, NULL);
}

/* --------------------------------------- failures inside a collective */

void zinc_engine_defer(zinc_engine *e, zinc_status st) {
  if (e->deferred != ZINC_OK)
    return;
  e->deferred = st;
  snprintf(e->deferred_msg, sizeof e->deferred_msg, "%s", zinc_last_error());
  zinc_log(ZINC_LOG_DEBUG, "%s (every rank reports it at the end of this micro-batch)",
           e->deferred_msg); /* returned then: not logged above debug */
}

zinc_status zinc_engine_agree_deferred(zinc_engine *e) {
  zinc_status st = e->deferred;
  if (st != ZINC_OK)
    zinc_error(st, "%s", e->deferred_msg);
  e->deferred = ZINC_OK;
  return zinc_engine_agree(e, e->dp_host, st);
}

/* ------------------------------------------- what must match across ranks */

zinc_status zinc_engine_agree_rank0_text(zinc_engine *e, zinc_comm *c, const char *mine,
                                         const char *what, char **ref_out) {
  *ref_out = NULL;
  zinc_status st = mine ? ZINC_OK
                        : zinc_error(ZINC_ERR_NOMEM, "comparing the %s across ranks: no host "
                                     "memory for its text; free host memory", what);
  ZINC_CHECK(zinc_engine_agree(e, c, st));
  int64_t len = (int64_t)strlen(mine) + 1;
  ZINC_CHECK(zinc_comm_broadcast(c, &len, 1, ZINC_DT_I64, 0));
  char *ref = malloc((size_t)len);
  st = ref ? ZINC_OK
           : zinc_error(ZINC_ERR_NOMEM, "comparing the %s across ranks: no host memory for "
                        "rank 0's text (%lld bytes); free host memory", what, (long long)len);
  if (ref && c->rank == 0)
    memcpy(ref, mine, (size_t)len);
  st = zinc_engine_agree(e, c, st);
  if (st == ZINC_OK)
    st = zinc_comm_broadcast(c, ref, (size_t)len, ZINC_DT_U8, 0);
  if (st != ZINC_OK) {
    free(ref);
    return st;
  }
  ref[len - 1] = '\0';
  *ref_out = ref;
  return ZINC_OK;
}
