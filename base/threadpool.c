/*
 * threadpool.c — the fixed pool behind the CPU kernels (see threadpool.h).
 *
 * Hand-off: the caller fills the job fields, then publishes them by bumping
 * `generation` (release); a worker that sees a new generation (acquire)
 * reads the job, runs its part and decrements `remaining`; the last one to
 * finish wakes the caller. Waiting is a short spin (a loop over a large
 * array usually follows another) and then a condition variable, so an idle
 * pool costs no CPU. Both wake-ups are signalled under `mu` after the
 * atomic changed, and both waits re-check the atomic under `mu`, so no
 * wake-up is lost.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#include "base/base.h"
#include "base/threadpool.h"

/* Spin iterations before sleeping: a few microseconds. */
#define POOL_SPIN 2000

typedef struct {
  zinc_threadpool *pool;
  int tid;
} worker_arg;

struct zinc_threadpool {
  int nthreads;                 /* including the caller            */
  pthread_t *threads;           /* (nthreads - 1) workers          */
  worker_arg *args;             /* (nthreads - 1)                  */
  int started;                  /* workers actually created        */

  pthread_mutex_t run_mu;       /* one loop at a time              */
  pthread_mutex_t mu;           /* guards the two condition waits  */
  pthread_cond_t work_cv;       /* workers: a new generation       */
  pthread_cond_t done_cv;       /* caller: remaining reached 0     */
  pthread_cond_t ready_cv;      /* create: every start hook ran    */
  int ready;                    /* under mu                        */

  _Atomic uint64_t generation;  /* bumped once per loop            */
  _Atomic int remaining;        /* workers still on this loop      */
  _Atomic int stop;

  /* the current loop; written by the caller before the release store */
  zinc_parallel_fn fn;
  void *ctx;
  int64_t count, grain;
  int parts;

  zinc_thread_start_fn start;
  void *start_ctx;
};

void zinc_threadpool_split(int64_t count, int64_t grain, int parts, int t,
                           int64_t *begin, int64_t *end) {
  if (grain < 1)
    grain = 1;
  if (count < 0)
    count = 0;
  int64_t units = (count + grain - 1) / grain;
  int64_t used = parts < units ? parts : units;
  if (parts < 1 || t < 0 || t >= used) {
    *begin = *end = count;
    return;
  }
  int64_t b = (units * t / used) * grain;
  int64_t e = (units * (t + 1) / used) * grain;
  *begin = b < count ? b : count;
  *end = e < count ? e : count;
}

static void run_part(zinc_threadpool *p, int tid) {
  int64_t b, e;
  zinc_threadpool_split(p->count, p->grain, p->parts, tid, &b, &e);
  if (b < e)
    p->fn(p->ctx, b, e, tid);
}

static void *worker_main(void *argp) {
  worker_arg *a = argp;
  zinc_threadpool *p = a->pool;
  if (p->start)
    p->start(p->start_ctx, a->tid);
  pthread_mutex_lock(&p->mu);
  p->ready++;
  pthread_cond_signal(&p->ready_cv);
  pthread_mutex_unlock(&p->mu);

  uint64_t seen = 0;
  for (;;) {
    uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
    for (int i = 0; g == seen && i < POOL_SPIN && !atomic_load(&p->stop); i++) {
      cpu_relax();
      g = atomic_load_explicit(&p->generation, memory_order_acquire);
    }
    if (g == seen) {
      pthread_mutex_lock(&p->mu);
      while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
             !atomic_load(&p->stop))
        pthread_cond_wait(&p->work_cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop))
      return NULL;
    seen = g;
    run_part(p, a->tid);
    if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

static void pool_stop_and_join(zinc_threadpool *p) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++)
    pthread_join(p->threads[i], NULL);
  p->started = 0;
}

void zinc_threadpool_destroy(zinc_threadpool *p) {
  if (!p)
    return;
  pool_stop_and_join(p);
  pthread_cond_destroy(&p->ready_cv);
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->work_cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->run_mu);
  free(p->args);
  free(p->threads);
  free(p);
}

zinc_status zinc_threadpool_create(int nthreads, zinc_thread_start_fn start,
                                   void *start_ctx, zinc_threadpool **out) {
  *out = NULL;
  if (nthreads < 1 || nthreads > 4096)
    return zinc_error(ZINC_ERR_INVALID,
                      "thread pool: %d threads asked for; use 1 to 4096", nthreads);
  zinc_threadpool *p = NULL;
  ZINC_CHECK(zinc_calloc((void **)&p, 1, sizeof *p, "the thread pool"));
  p->nthreads = nthreads;
  p->start = start;
  p->start_ctx = start_ctx;
  pthread_mutex_init(&p->run_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  pthread_cond_init(&p->ready_cv, NULL);
  atomic_init(&p->generation, 0);
  atomic_init(&p->remaining, 0);
  atomic_init(&p->stop, 0);

  zinc_status st = ZINC_OK;
  int nw = nthreads - 1;
  ZINC_CHECK_GOTO(zinc_calloc((void **)&p->threads, (size_t)nw, sizeof *p->threads,
                              "thread pool handles"), st, fail);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&p->args, (size_t)nw, sizeof *p->args,
                              "thread pool arguments"), st, fail);
  for (int i = 0; i < nw; i++) {
    p->args[i].pool = p;
    p->args[i].tid = i + 1;
    int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]);
    if (rc != 0) {
      st = zinc_error(ZINC_ERR_NOMEM,
                      "thread pool: starting thread %d of %d failed: %s; "
                      "ask for fewer threads", i + 1, nthreads, strerror(rc));
      goto fail;
    }
    p->started++;
  }
  /* Placement hooks have run on every worker once this returns. */
  pthread_mutex_lock(&p->mu);
  while (p->ready < nw)
    pthread_cond_wait(&p->ready_cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  *out = p;
  return ZINC_OK;

fail:
  zinc_threadpool_destroy(p);
  return st;
}

int zinc_threadpool_size(const zinc_threadpool *p) { return p ? p->nthreads : 1; }

void zinc_threadpool_for(zinc_threadpool *p, int64_t count, int64_t grain,
                         zinc_parallel_fn fn, void *ctx) {
  if (count <= 0)
    return;
  if (grain < 1)
    grain = 1;
  if (!p || p->nthreads == 1 || count <= grain) {
    fn(ctx, 0, count, 0);
    return;
  }
  pthread_mutex_lock(&p->run_mu);
  p->fn = fn;
  p->ctx = ctx;
  p->count = count;
  p->grain = grain;
  p->parts = p->nthreads;
  atomic_store_explicit(&p->remaining, p->nthreads - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);

  run_part(p, 0);

  for (int i = 0; i < POOL_SPIN &&
                  atomic_load_explicit(&p->remaining, memory_order_acquire) != 0; i++)
    cpu_relax();
  if (atomic_load_explicit(&p->remaining, memory_order_acquire) != 0) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->remaining, memory_order_acquire) != 0)
      pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->run_mu);
}
