/* test_threadpool.c — the kernel thread pool: the static split (exhaustive
 * for small sizes), every element visited once by the thread the split
 * names, start hooks run before create returns, many back-to-back loops,
 * concurrent callers serialised, clean destroy. Runs under TSan (label
 * `threads`). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/threadpool.h"

static void split_is_a_static_partition(void **state) {
  for (int64_t count = 0; count <= 150; count++)
    for (int64_t grain = 1; grain <= 7; grain++)
      for (int parts = 1; parts <= 6; parts++) {
        int64_t next = 0;
        for (int t = 0; t < parts; t++) {
          int64_t b, e;
          zinc_threadpool_split(count, grain, parts, t, &b, &e);
          assert_true(b <= e);
          if (b == e)
            continue;
          assert_int_equal(b, next); /* contiguous, in thread order */
          assert_true(b % grain == 0);
          assert_true(e == count || e % grain == 0);
          next = e;
        }
        assert_int_equal(next, count); /* covers everything */
      }
  int64_t b, e;
  zinc_threadpool_split(10, 4, 3, 2, &b, &e); /* 3 units of 4 for 3 parts */
  assert_int_equal(b, 8);
  assert_int_equal(e, 10);
}

typedef struct {
  int *owner; /* (count) tid that visited, -1 none */
  int64_t grain;
  int parts;
  _Atomic int64_t visits;
} visit_job;

static void visit(void *ctx, int64_t begin, int64_t end, int tid) {
  visit_job *j = ctx;
  for (int64_t i = begin; i < end; i++) {
    if (j->owner[i] != -1)
      fprintf(stderr, "element %lld visited twice\n", (long long)i);
    j->owner[i] = tid;
  }
  atomic_fetch_add(&j->visits, end - begin);
}

typedef struct {
  _Atomic int calls[16];
} hook_log;

static void start_hook(void *ctx, int tid) {
  hook_log *h = ctx;
  atomic_fetch_add(&h->calls[tid], 1);
}

static void every_element_once_by_its_thread(void **state) {
  const int counts[] = {1, 5, 64, 1000, 100003};
  for (int nthreads = 1; nthreads <= 5; nthreads++) {
    hook_log hooks = {0};
    zinc_threadpool *pool;
    assert_int_equal(zinc_threadpool_create(nthreads, start_hook, &hooks, &pool), ZINC_OK);
    assert_int_equal(zinc_threadpool_size(pool), nthreads);
    for (int t = 0; t < 16; t++) /* hooks ran on each worker, before create returned */
      assert_int_equal(atomic_load(&hooks.calls[t]), t >= 1 && t < nthreads ? 1 : 0);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      int64_t count = counts[c], grain = 16;
      visit_job j = {malloc((size_t)count * sizeof(int)), grain, nthreads, 0};
      for (int64_t i = 0; i < count; i++)
        j.owner[i] = -1;
      zinc_threadpool_for(pool, count, grain, visit, &j);
      assert_int_equal(atomic_load(&j.visits), count);
      for (int t = 0; t < nthreads; t++) {
        int64_t b, e;
        zinc_threadpool_split(count, grain, count <= grain ? 1 : nthreads, t, &b, &e);
        for (int64_t i = b; i < e; i++)
          if (j.owner[i] != t) {
            fprintf(stderr, "%d threads, count %lld: element %lld by thread %d, split says %d\n",
                    nthreads, (long long)count, (long long)i, j.owner[i], t);
            fail();
          }
      }
      free(j.owner);
    }
    zinc_threadpool_destroy(pool);
  }
  zinc_threadpool_destroy(NULL);
  assert_int_equal(zinc_threadpool_size(NULL), 1);
}

static void add_part(void *ctx, int64_t begin, int64_t end, int tid) {
  int64_t *x = ctx;
  for (int64_t i = begin; i < end; i++)
    x[i] += 1;
}

static void many_short_loops(void **state) {
  zinc_threadpool *pool;
  assert_int_equal(zinc_threadpool_create(3, NULL, NULL, &pool), ZINC_OK);
  int64_t x[64] = {0};
  for (int it = 0; it < 3000; it++)
    zinc_threadpool_for(pool, 64, 4, add_part, x);
  for (int i = 0; i < 64; i++)
    assert_int_equal(x[i], 3000);
  zinc_threadpool_destroy(pool);
}

typedef struct {
  zinc_threadpool *pool;
  int64_t x[256];
} caller_arg;

static void *caller_main(void *p) {
  caller_arg *a = p;
  for (int it = 0; it < 500; it++)
    zinc_threadpool_for(a->pool, 256, 8, add_part, a->x);
  return NULL;
}

static void concurrent_callers_are_serialised(void **state) {
  zinc_threadpool *pool;
  assert_int_equal(zinc_threadpool_create(2, NULL, NULL, &pool), ZINC_OK);
  caller_arg a[2] = {{pool, {0}}, {pool, {0}}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, caller_main, &a[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 256; k++)
      assert_int_equal(a[i].x[k], 500);
  zinc_threadpool_destroy(pool);
}

static void bad_sizes(void **state) {
  zinc_threadpool *pool = (zinc_threadpool *)1;
  assert_int_equal(zinc_threadpool_create(0, NULL, NULL, &pool), ZINC_ERR_INVALID);
  assert_null(pool);
  assert_int_equal(zinc_threadpool_create(-3, NULL, NULL, &pool), ZINC_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_is_a_static_partition),
      cmocka_unit_test(every_element_once_by_its_thread),
      cmocka_unit_test(many_short_loops),
      cmocka_unit_test(concurrent_callers_are_serialised),
      cmocka_unit_test(bad_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
