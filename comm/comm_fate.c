/*
 * comm_fate.c — comms that fail together (comm.h, "Fate"): a fate is the
 * set of comms one owner made from one create (its splits, the nccl comms
 * bootstrapped over them), and the first failure of any of them, which
 * every other one is then aborted with.
 *
 * Invariants:
 *  - `state` goes 0 (healthy) -> 1 (the first failure is being written) ->
 *    2 (`why` holds it), once. Only the thread that moves it off 0 writes
 *    `why` and aborts the members; every later failure returns at once, so
 *    a member's abort, which may report its own failure back here, never
 *    re-enters the walk.
 *  - `mu` guards the member list: join and leave take it, and so does the
 *    walk that aborts the members, so a comm that has left (and is being
 *    freed) is never aborted. A backend's abort takes no lock that a
 *    thread holding `mu` could wait for (mpi: atomics only; nccl: its own
 *    mutex, which no thread holds while it joins, leaves or fails the fate
 *    of another comm).
 *  - The fate is freed by the last member to leave.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm.h"

struct zinc_comm_fate {
  pthread_mutex_t mu;
  zinc_comm **members;     /* (n) guarded by mu                              */
  int n, cap;
  _Atomic int state;       /* 0 healthy, 1 failing, 2 failed: `why` is set  */
  char why[1024];          /* the first failure's message                   */
};

zinc_status zinc_comm_fate_join(zinc_comm *c, zinc_comm *from) {
  zinc_comm_fate *f = from ? from->fate : NULL;
  if (!f) {
    ZINC_CHECK(zinc_calloc((void **)&f, 1, sizeof *f, "comm fate"));
    pthread_mutex_init(&f->mu, NULL);
  }
  pthread_mutex_lock(&f->mu);
  zinc_status st = ZINC_OK;
  if (f->n == f->cap) {
    int cap = f->cap ? 2 * f->cap : 8;
    zinc_comm **grown = realloc(f->members, (size_t)cap * sizeof *grown);
    if (grown) {
      f->members = grown;
      f->cap = cap;
    } else {
      st = zinc_error(ZINC_ERR_NOMEM, "comm %s: no memory to join the fate of %d comms",
                      c->ops->name, f->n);
    }
  }
  if (st == ZINC_OK) {
    f->members[f->n++] = c;
    c->fate = f;
  }
  int failed = atomic_load(&f->state) == 2;
  pthread_mutex_unlock(&f->mu);
  if (st != ZINC_OK) {
    if (!from || !from->fate) { /* the fate was new: nobody else has it */
      pthread_mutex_destroy(&f->mu);
      free(f);
    }
    return st;
  }
  if (failed && c->ops->abort) /* born into a failed fate */
    c->ops->abort(c, f->why);
  return ZINC_OK;
}

void zinc_comm_fate_leave(zinc_comm *c) {
  zinc_comm_fate *f = c ? c->fate : NULL;
  if (!f)
    return;
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->n; i++)
    if (f->members[i] == c) {
      f->members[i] = f->members[--f->n];
      break;
    }
  int last = f->n == 0;
  pthread_mutex_unlock(&f->mu);
  c->fate = NULL;
  if (last) {
    pthread_mutex_destroy(&f->mu);
    free(f->members);
    free(f);
  }
}

void zinc_comm_fate_fail(zinc_comm *c, const char *why) {
  zinc_comm_fate *f = c ? c->fate : NULL;
  int healthy = 0;
  if (!f || !atomic_compare_exchange_strong(&f->state, &healthy, 1))
    return; /* no fate, or it failed already */
  snprintf(f->why, sizeof f->why, "%s", why && why[0] ? why : "a comm failed");
  atomic_store(&f->state, 2);
  pthread_mutex_lock(&f->mu);
  for (int i = 0; i < f->n; i++)
    if (f->members[i] != c && f->members[i]->ops->abort)
      f->members[i]->ops->abort(f->members[i], f->why);
  pthread_mutex_unlock(&f->mu);
}

void zinc_comm_abort(zinc_comm *c, const char *why) {
  if (!c || !c->ops->abort)
    return;
  c->ops->abort(c, why);
  zinc_comm_fate_fail(c, why);
}
