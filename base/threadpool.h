/*
 * threadpool.h — a fixed pool of threads for the CPU kernels, created once
 * and reused by every parallel loop.
 *
 * Invariants
 *  - A pool of n threads owns n - 1 worker threads; the thread that calls
 *    zinc_threadpool_for is part 0 of every loop, so a pool of 1 starts no
 *    thread at all.
 *  - Chunking is static and deterministic: the range [0, count) is cut into
 *    at most n contiguous parts whose inner boundaries are multiples of
 *    `grain`, part t going to thread t (zinc_threadpool_split). The same
 *    (count, grain, n) always gives the same parts, so a kernel whose parts
 *    are independent gives the same bits for any thread count.
 *  - One loop runs at a time: concurrent callers are serialised; calling
 *    zinc_threadpool_for from inside a loop body is a deadlock (not allowed).
 *  - zinc_threadpool_destroy joins every worker; nothing is leaked.
 */
#ifndef ZINC_THREADPOOL_H
#define ZINC_THREADPOOL_H

#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinc_threadpool zinc_threadpool;

/* Runs once on each worker thread (tid 1 .. n-1) as it starts, before
 * zinc_threadpool_create returns: placement binds the thread here. */
typedef void (*zinc_thread_start_fn)(void *ctx, int tid);

/* One part of a parallel loop: elements [begin, end) on thread `tid`. */
typedef void (*zinc_parallel_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* Create a pool of `nthreads` >= 1 threads (the caller counts as one).
 * `start` may be NULL. */
zinc_status zinc_threadpool_create(int nthreads, zinc_thread_start_fn start,
                                   void *start_ctx, zinc_threadpool **out);
/* Join the workers and free the pool; NULL is accepted. */
void zinc_threadpool_destroy(zinc_threadpool *pool);
/* Number of threads including the caller; 1 for a NULL pool. */
int zinc_threadpool_size(const zinc_threadpool *pool);

/* Run fn over [0, count) split as zinc_threadpool_split(count, grain, n)
 * and return when every part is done. A NULL pool, or a count small enough
 * for one part, runs on the caller only. */
void zinc_threadpool_for(zinc_threadpool *pool, int64_t count, int64_t grain,
                         zinc_parallel_fn fn, void *ctx);

/* The static split used by zinc_threadpool_for: part `t` of `parts` of
 * [0, count), inner boundaries multiples of grain (grain < 1 counts as 1).
 * Parts beyond the useful number are empty (begin == end). */
void zinc_threadpool_split(int64_t count, int64_t grain, int parts, int t,
                           int64_t *begin, int64_t *end);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_THREADPOOL_H */
