/*
 * failure.h — failure agreement (failure.c): how a failure on one rank
 * reaches every rank with the same status and message, and how a stopped
 * engine refuses further work. Every collective phase computes locally,
 * agrees, then runs the collective; support.h and this are the bottom of
 * the engine.
 */
#ifndef ZINC_ENGINE_FAILURE_H
#define ZINC_ENGINE_FAILURE_H

#include <stdint.h>

#include "comm/comm.h"
#include "zinc.h"

/* ------------------------------------------------------------ failure.c */
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

#endif /* ZINC_ENGINE_FAILURE_H */
