/*
 * comm_mpi_async.c — the worker thread of an mpi comm: `start` queues a
 * copy of the batch, the worker runs queued batches one after another in
 * start order (so every rank runs them in the same order), and
 * `wait`/`test` collect the result. The worker is what makes a started
 * reduce-scatter progress while the caller computes: nothing waits for the
 * caller to enter the library again.
 *
 * Requests: a request is owned by the queue until the worker finishes it,
 * then by whoever waits for it. A wait that times out marks the request
 * abandoned and sets the comm's abort flag (every wait loop of the worker
 * then gives up); the worker frees abandoned requests when it reaches them.
 * A request made without a worker (synchronous start) is born done.
 *
 * Locking: one mutex per worker guards the queue and every request's
 * done/status fields; the worker runs a batch without holding it.
 *
 * Tests only: ZINC_TEST_COMM_HOLD_MS=t (read when the worker starts; 0:
 * off) makes every started batch slow in a way a test can count on: the
 * worker takes a batch up only once the caller waits for it (wait, or a
 * blocking call that drains the queue; test does not count), then lets t
 * ms pass before running it. So each blocking wait for a started batch
 * lasts at least t, on the thread that waits, whatever the load.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "base/env.h"
#include "comm/comm_mpi_impl.h"

#define REQ_MSG_MAX 1024

struct zinc_comm_req {
  zinc_comm_req *next;      /* queue link                                    */
  zinc_coll *colls;         /* (n) private copy of the batch                 */
  size_t *vectors;          /* counts/displs copies of all-gatherv entries,
                               and counts/displs/rcounts/rdispls of
                               all-to-all-v entries                          */
  int n;
  int done;                 /* guarded by the worker's mutex                 */
  int abandoned;            /* the waiter gave up; the worker frees it       */
  zinc_status status;
  double started;           /* zinc_now() at start                           */
  char what[128];           /* first entry, for messages                     */
  char msg[REQ_MSG_MAX];    /* failure message, copied from the worker       */
};

struct zinc_mpi_worker {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work;      /* queue gained a batch, or shutdown             */
  pthread_cond_t finished;  /* a batch finished                              */
  zinc_comm_req *head, *tail;  /* queued and running, in start order        */
  int shutdown;
  zinc_mpi_worker_exec_fn exec;
  void *ctx;
  _Atomic int *abort;
  double timeout_s;
  char failure[REQ_MSG_MAX]; /* the first batch that failed since a drain
                                gave up (or since the start): its message  */
  long long hold_ms;        /* ZINC_TEST_COMM_HOLD_MS (tests), 0: off        */
  int waiters;              /* callers blocked in wait or drain (for hold_ms) */
};

static void req_free(zinc_comm_req *r) {
  if (!r)
    return;
  free(r->colls);
  free(r->vectors);
  free(r);
}

static void *worker_main(void *arg) {
  zinc_mpi_worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->shutdown)
      pthread_cond_wait(&w->work, &w->mu);
    if (!w->head)
      break; /* shutdown with nothing queued */
    zinc_comm_req *r = w->head;
    while (w->hold_ms > 0 && w->waiters == 0 && !w->shutdown)
      pthread_cond_wait(&w->work, &w->mu); /* tests: until someone waits for it */
    pthread_mutex_unlock(&w->mu);
    if (w->hold_ms > 0) {
      struct timespec t = {(time_t)(w->hold_ms / 1000), (long)(w->hold_ms % 1000) * 1000000L};
      while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
    }

    zinc_status st = w->exec(w->ctx, r->colls, r->n);
    char msg[REQ_MSG_MAX] = "";
    if (st != ZINC_OK)
      snprintf(msg, sizeof msg, "%s", zinc_last_error());

    pthread_mutex_lock(&w->mu);
    if (st != ZINC_OK && !w->failure[0]) /* what a drain that gave up reports */
      memcpy(w->failure, msg, sizeof msg);
    w->head = r->next;
    if (!w->head)
      w->tail = NULL;
    r->next = NULL;
    if (r->abandoned) {
      req_free(r);
    } else {
      r->status = st;
      memcpy(r->msg, msg, sizeof msg);
      r->done = 1;
    }
    pthread_cond_broadcast(&w->finished);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

zinc_status zinc_mpi_worker_create(zinc_mpi_worker_exec_fn exec, void *ctx, _Atomic int *abort,
                                   double timeout_s, zinc_mpi_worker **out) {
  *out = NULL;
  zinc_mpi_worker *w = NULL;
  ZINC_CHECK(zinc_calloc((void **)&w, 1, sizeof *w, "comm worker"));
  w->exec = exec;
  w->ctx = ctx;
  w->abort = abort;
  w->timeout_s = timeout_s;
  w->hold_ms = zinc_env_int("ZINC_TEST_COMM_HOLD_MS", 0, 0, 60000);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->work, &ca);
  pthread_cond_init(&w->finished, &ca);
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&w->thread, NULL, worker_main, w);
  if (rc != 0) {
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->finished);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return zinc_error(ZINC_ERR_COMM, "comm mpi: cannot start the progress thread: %s",
                      strerror(rc));
  }
  *out = w;
  return ZINC_OK;
}

/* How many per-rank vectors of an entry the request copies: all-gatherv's
 * counts and displs, all-to-all-v's counts, displs, rcounts and rdispls. */
static int vectors_of(const zinc_coll *o) {
  return o->kind == ZINC_COLL_ALLGATHERV ? 2 : o->kind == ZINC_COLL_ALLTOALLV ? 4 : 0;
}

/* A private copy of the batch: the caller may reuse its array (and the
 * per-rank vectors) as soon as start returns. */
static zinc_status req_create(const zinc_coll *colls, int n, int nranks, zinc_comm_req **out) {
  *out = NULL;
  zinc_comm_req *r = NULL;
  ZINC_CHECK(zinc_calloc((void **)&r, 1, sizeof *r, "comm request"));
  size_t nvec = 0;
  for (int i = 0; i < n; i++)
    nvec += vectors_of(&colls[i]) * (size_t)nranks;
  zinc_status st = zinc_calloc((void **)&r->colls, n ? (size_t)n : 1, sizeof *r->colls,
                               "comm request batch");
  if (st == ZINC_OK && nvec)
    st = zinc_calloc((void **)&r->vectors, nvec, sizeof *r->vectors, "comm request counts");
  if (st != ZINC_OK) {
    req_free(r);
    return st;
  }
  if (n > 0)
    memcpy(r->colls, colls, (size_t)n * sizeof *colls);
  size_t *v = r->vectors;
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    const size_t *from[4] = {o->counts, o->displs, o->rcounts, o->rdispls};
    const size_t **to[4] = {&r->colls[i].counts, &r->colls[i].displs, &r->colls[i].rcounts,
                            &r->colls[i].rdispls};
    for (int k = 0; k < vectors_of(o); k++) {
      memcpy(v, from[k], (size_t)nranks * sizeof *v);
      *to[k] = v;
      v += nranks;
    }
  }
  r->n = n;
  r->started = zinc_now();
  if (n > 0)
    zinc_mpi_describe(&colls[0], r->what, sizeof r->what);
  else
    snprintf(r->what, sizeof r->what, "an empty batch");
  if (n > 1) {
    size_t len = strlen(r->what);
    snprintf(r->what + len, sizeof r->what - len, " (+%d more)", n - 1);
  }
  *out = r;
  return ZINC_OK;
}

zinc_status zinc_mpi_worker_submit(zinc_mpi_worker *w, const zinc_coll *colls, int n, int nranks,
                                   zinc_comm_req **req) {
  *req = NULL;
  zinc_comm_req *r;
  ZINC_CHECK(req_create(colls, n, nranks, &r));
  if (!w) { /* synchronous start: the caller already ran the batch */
    r->done = 1;
    *req = r;
    return ZINC_OK;
  }
  pthread_mutex_lock(&w->mu);
  if (w->tail)
    w->tail->next = r;
  else
    w->head = r;
  w->tail = r;
  pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  *req = r;
  return ZINC_OK;
}

struct timespec zinc_mpi_timespec_after(struct timespec from, double seconds) {
  if (!(seconds > 0)) /* <= 0 or NaN */
    seconds = seconds < 0 ? 0 : (seconds == 0 ? 0 : ZINC_MPI_MAX_TIMED_WAIT_S);
  if (seconds > ZINC_MPI_MAX_TIMED_WAIT_S)
    seconds = ZINC_MPI_MAX_TIMED_WAIT_S; /* no time_t overflow, no garbage tv_nsec */
  time_t whole = (time_t)seconds;
  struct timespec ts = from;
  ts.tv_sec += whole;
  ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static struct timespec abs_deadline(double seconds) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return zinc_mpi_timespec_after(now, seconds);
}

/* Has `req` finished (req NULL: has every queued batch)? Mutex held. */
static int finished(const zinc_mpi_worker *w, const zinc_comm_req *req) {
  return req ? req->done : !w->head;
}

/* Wait on `finished` until it holds or `seconds` pass (the comm timeout,
 * untimed when that is 0 or beyond ZINC_MPI_MAX_TIMED_WAIT_S); mutex held.
 * Returns 1 on timeout. */
static int wait_finished_for(zinc_mpi_worker *w, const zinc_comm_req *req, double seconds) {
  int timed = w->timeout_s > 0 && w->timeout_s <= ZINC_MPI_MAX_TIMED_WAIT_S;
  struct timespec deadline = abs_deadline(timed ? seconds : 0);
  while (!finished(w, req)) {
    if (!timed)
      pthread_cond_wait(&w->finished, &w->mu);
    else if (pthread_cond_timedwait(&w->finished, &w->mu, &deadline) == ETIMEDOUT)
      return !finished(w, req);
  }
  return 0;
}

/* A caller is about to block for started batches (ZINC_TEST_COMM_HOLD_MS
 * lets the worker take them up now); mutex held. */
static void waiter_enter(zinc_mpi_worker *w) {
  w->waiters++;
  pthread_cond_signal(&w->work);
}

static int wait_finished(zinc_mpi_worker *w, const zinc_comm_req *req) {
  return wait_finished_for(w, req, w->timeout_s);
}

/* How much longer than the timeout a wait gives the worker to report a
 * batch's failure itself (zinc_mpi_worker_wait). */
static double report_grace(const zinc_mpi_worker *w) {
  return w->timeout_s < 1.0 ? 1.0 : w->timeout_s < 2.0 ? w->timeout_s : 2.0;
}

static zinc_status req_finish(zinc_comm_req *r) {
  zinc_status st = r->status;
  if (st != ZINC_OK)
    zinc_error(st, "%s", r->msg);
  req_free(r);
  return st;
}

zinc_status zinc_mpi_worker_wait(zinc_mpi_worker *w, zinc_comm_req *req) {
  if (!req)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: wait on a NULL request");
  if (!w)
    return req_finish(req);
  pthread_mutex_lock(&w->mu);
  /* The worker runs the collective under the same timeout, from when it
   * took the batch up (later than the start under load); its own failure
   * names the ranks that did not arrive, which this side cannot know. So
   * past the timeout, give it a grace to report before failing with the
   * generic message: one more timeout, at least 1 s (a loaded machine or a
   * sanitizer build takes the batch up that much later) and at most 2 s. */
  waiter_enter(w);
  int timed_out = wait_finished(w, req);
  if (timed_out)
    timed_out = wait_finished_for(w, req, report_grace(w));
  w->waiters--;
  if (timed_out) {
    /* From here the worker owns (and frees) the request: copy what the
     * message needs before letting go of the lock. */
    req->abandoned = 1;
    atomic_store(w->abort, 1);
    char what[sizeof req->what];
    memcpy(what, req->what, sizeof what);
    double age = zinc_now() - req->started;
    pthread_mutex_unlock(&w->mu);
    return zinc_error(ZINC_ERR_COMM,
                      "comm mpi: wait: %s started %.1f s ago has not completed within the "
                      "comm timeout of %.1f s (a peer is missing or ranks issued different "
                      "collectives); the comm is unusable, destroy it",
                      what, age, w->timeout_s);
  }
  pthread_mutex_unlock(&w->mu);
  return req_finish(req);
}

zinc_status zinc_mpi_worker_test(zinc_mpi_worker *w, zinc_comm_req *req, int *done) {
  *done = 0;
  if (!req)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: test on a NULL request");
  if (w) {
    pthread_mutex_lock(&w->mu);
    int d = req->done;
    pthread_mutex_unlock(&w->mu);
    if (!d)
      return ZINC_OK;
  }
  *done = 1;
  return req_finish(req);
}

zinc_status zinc_mpi_worker_drain(zinc_mpi_worker *w, const char *why) {
  if (!w)
    return ZINC_OK;
  pthread_mutex_lock(&w->mu);
  /* as a wait does: past the timeout, the grace in which the worker may
   * still report the batch's failure itself, naming the ranks it waited
   * for */
  waiter_enter(w);
  int timed_out = wait_finished(w, NULL);
  if (timed_out)
    timed_out = wait_finished_for(w, NULL, report_grace(w));
  w->waiters--;
  if (!timed_out) {
    pthread_mutex_unlock(&w->mu);
    return ZINC_OK;
  }
  /* Give up: every wait loop of the worker sees the abort within a poll and
   * fails its batch (naming the operation and the ranks that had not come),
   * and the batches queued behind it fail at once. Say what was stuck, and
   * what the worker said when it let go (bounded: a worker that does not
   * let go is named as such). */
  char what[sizeof w->head->what];
  memcpy(what, w->head->what, sizeof what);
  double age = zinc_now() - w->head->started;
  w->failure[0] = '\0'; /* what the batches say from here, not an older failure */
  atomic_store(w->abort, 1);
  (void)wait_finished_for(w, NULL, report_grace(w));
  char said[REQ_MSG_MAX];
  memcpy(said, w->failure, sizeof said);
  pthread_mutex_unlock(&w->mu);
  return zinc_error(ZINC_ERR_COMM,
                    "comm mpi: %s: the started %s (%.1f s ago) did not finish within the "
                    "comm timeout of %.1f s: %s", why, what, age, w->timeout_s,
                    said[0] ? said : "its progress thread did not give up either; the comm "
                                     "is unusable, destroy it");
}

void zinc_mpi_worker_set_timeout(zinc_mpi_worker *w, double timeout_s) {
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->timeout_s = timeout_s;
  pthread_mutex_unlock(&w->mu);
}

void zinc_mpi_worker_destroy(zinc_mpi_worker *w) {
  if (!w)
    return;
  if (zinc_mpi_worker_drain(w, "destroy") != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "%s", zinc_last_error());
  pthread_mutex_lock(&w->mu);
  w->shutdown = 1;
  pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  /* The worker leaves only with an empty queue: after an abort the
   * remaining batches fail at once, and abandoned requests are freed. */
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->work);
  pthread_cond_destroy(&w->finished);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
