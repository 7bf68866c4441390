/* test_device_wait.c — the deadline poll the cuda device waits with
 * (device/device_wait.c), driven by fake predicates: work that finishes
 * after some polls (OK, polled again until then), work that never finishes
 * (ZINC_ERR_DEVICE naming what was waited for, after the timeout and not
 * much later), a failing query (its own status at once), and a zero
 * timeout (one poll). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "device/device_wait.h"

typedef struct {
  long polls;       /* calls so far */
  long done_after;  /* finished from this call on; < 0: never */
  int fail_at;      /* > 0: this call fails */
} fake_work;

static zinc_status fake_query(void *ctx, int *done) {
  fake_work *w = ctx;
  w->polls++;
  if (w->fail_at > 0 && w->polls == w->fail_at)
    return zinc_error(ZINC_ERR_DEVICE, "fake query failed at poll %ld", w->polls);
  *done = w->done_after >= 0 && w->polls >= w->done_after;
  return ZINC_OK;
}

static void finishes(void **state) {
  (void)state;
  const long after[] = {1, 2, 64, 65, 200};
  for (size_t i = 0; i < sizeof after / sizeof after[0]; i++) {
    fake_work w = {0, after[i], 0};
    assert_int_equal(zinc_wait_deadline(fake_query, &w, 5.0, "fake work", NULL), ZINC_OK);
    assert_int_equal(w.polls, after[i]); /* polled until done, not once more */
  }
}

static void never_finishes(void **state) {
  (void)state;
  const double timeouts[] = {0.05, 0.3};
  for (int i = 0; i < 2; i++) {
    fake_work w = {0, -1, 0};
    double t0 = zinc_now();
    zinc_status st = zinc_wait_deadline(fake_query, &w, timeouts[i],
                                        "cuda device 3: the last uses of 2 cached blocks",
                                        "a kernel never ended");
    double dt = zinc_now() - t0;
    assert_int_equal(st, ZINC_ERR_DEVICE);
    const char *msg = zinc_last_error();
    if (!strstr(msg, "cuda device 3: the last uses of 2 cached blocks") ||
        !strstr(msg, "not finished after") || !strstr(msg, "a kernel never ended"))
      fail_msg("message: %s", msg);
    if (dt < timeouts[i] || dt > timeouts[i] + 0.5)
      fail_msg("timeout %.2f s: returned after %.3f s", timeouts[i], dt);
    assert_true(w.polls > 2); /* kept polling, not one look */
  }
}

static void query_fails(void **state) {
  (void)state;
  fake_work w = {0, -1, 3};
  assert_int_equal(zinc_wait_deadline(fake_query, &w, 5.0, "fake work", NULL), ZINC_ERR_DEVICE);
  assert_int_equal(w.polls, 3);
  assert_non_null(strstr(zinc_last_error(), "fake query failed at poll 3"));
}

static void zero_timeout(void **state) {
  (void)state;
  fake_work w = {0, -1, 0};
  assert_int_equal(zinc_wait_deadline(fake_query, &w, 0.0, "fake work", NULL), ZINC_ERR_DEVICE);
  assert_int_equal(w.polls, 1);
  fake_work ready = {0, 1, 0};
  assert_int_equal(zinc_wait_deadline(fake_query, &ready, 0.0, "fake work", NULL), ZINC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(finishes),
      cmocka_unit_test(never_finishes),
      cmocka_unit_test(query_fails),
      cmocka_unit_test(zero_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
