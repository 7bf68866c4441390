/* test_env.c — base/env.h: defaults for unset and empty variables, every
 * accepted spelling, malformed and out-of-range values falling back to the
 * default with one warning that names the variable and what it accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "base/env.h"
#include "common/capture.h"

#define VAR "ZINC_TEST_ENV_VALUE"

/* What the readers wrote to stderr since test_stderr_begin, into `out`. */
static void capture_end(test_stderr *c, char *out, size_t len) {
  char *text = test_stderr_end(c);
  snprintf(out, len, "%s", text ? text : "");
  free(text);
}

static void set(const char *value) {
  if (value)
    setenv(VAR, value, 1);
  else
    unsetenv(VAR);
}

static void str_unset_and_empty_are_null(void **state) {
  (void)state;
  set(NULL);
  assert_null(zinc_env_str(VAR));
  set("");
  assert_null(zinc_env_str(VAR));
  set("x y");
  assert_string_equal(zinc_env_str(VAR), "x y");
  set(NULL);
}

static void flag_spellings(void **state) {
  (void)state;
  static const char *on[] = {"1", "true", "TRUE", "on", "On", "yes"};
  static const char *off[] = {"0", "false", "OFF", "no", "No"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    set(on[i]);
    assert_int_equal(zinc_env_flag(VAR, 0), 1);
  }
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    set(off[i]);
    assert_int_equal(zinc_env_flag(VAR, 1), 0);
  }
  set(NULL);
  assert_int_equal(zinc_env_flag(VAR, 0), 0);
  assert_int_equal(zinc_env_flag(VAR, 1), 1);
  set("");
  assert_int_equal(zinc_env_flag(VAR, 1), 1);
  set(NULL);
}

static void flag_malformed_keeps_default_and_warns(void **state) {
  (void)state;
  char err[1024];
  test_stderr c;
  set("2");
  test_stderr_begin(&c);
  int a = zinc_env_flag(VAR, 0), b = zinc_env_flag(VAR, 1);
  capture_end(&c, err, sizeof err);
  set(NULL);
  assert_int_equal(a, 0);
  assert_int_equal(b, 1);
  if (!strstr(err, VAR "=2 is not a boolean") || !strstr(err, "using 0") ||
      !strstr(err, "using 1"))
    fail_msg("unexpected warning: %s", err);
}

static void int_values_and_ranges(void **state) {
  (void)state;
  set(NULL);
  assert_int_equal(zinc_env_int(VAR, 5, 0, 100), 5);
  set("");
  assert_int_equal(zinc_env_int(VAR, 5, 0, 100), 5);
  set("42");
  assert_int_equal(zinc_env_int(VAR, 5, 0, 100), 42);
  set("0"); /* both ends are inside the range */
  assert_int_equal(zinc_env_int(VAR, 5, 0, 100), 0);
  set("100");
  assert_int_equal(zinc_env_int(VAR, 5, 0, 100), 100);
  set("-7");
  assert_int_equal(zinc_env_int(VAR, 5, -10, 10), -7);
  set("9223372036854775807");
  assert_true(zinc_env_int(VAR, 5, 1, INT64_MAX) == INT64_MAX);
  set(NULL);
}

static void int_malformed_keeps_default(void **state) {
  (void)state;
  static const char *bad[] = {"abc", "12abc", "1.5", "101", "-1", "0x10",
                              "99999999999999999999", "-"};
  test_stderr c;
  char err[4096];
  test_stderr_begin(&c);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    set(bad[i]);
    long long v = zinc_env_int(VAR, 5, 0, 100);
    if (v != 5) {
      capture_end(&c, err, sizeof err);
      fail_msg("%s=%s read as %lld, want the default 5", VAR, bad[i], v);
    }
  }
  capture_end(&c, err, sizeof err);
  set(NULL);
  if (!strstr(err, VAR "=12abc is not an integer in [0, 100]; using 5") ||
      !strstr(err, VAR "=101 is not an integer in [0, 100]; using 5"))
    fail_msg("unexpected warnings: %s", err);
  /* an open range says so */
  set("0");
  test_stderr_begin(&c);
  assert_int_equal(zinc_env_int(VAR, 64, 64, INT64_MAX), 64);
  capture_end(&c, err, sizeof err);
  set(NULL);
  if (!strstr(err, VAR "=0 is not an integer >= 64; using 64"))
    fail_msg("unexpected warning: %s", err);
}

static void choice_values(void **state) {
  (void)state;
  static const char *const names[] = {"scalar", "avx2", "avx512"};
  set(NULL);
  assert_int_equal(zinc_env_choice(VAR, names, 3, 1), 1);
  set("avx512");
  assert_int_equal(zinc_env_choice(VAR, names, 3, 1), 2);
  set("SCALAR");
  assert_int_equal(zinc_env_choice(VAR, names, 3, 1), 0);
  char err[1024];
  test_stderr c;
  set("sse");
  test_stderr_begin(&c);
  int a = zinc_env_choice(VAR, names, 3, 1), b = zinc_env_choice(VAR, names, 3, -1);
  capture_end(&c, err, sizeof err);
  set(NULL);
  assert_int_equal(a, 1);
  assert_int_equal(b, -1);
  if (!strstr(err, VAR "=sse is not one of scalar, avx2, avx512; using avx2") ||
      !strstr(err, "; ignoring it"))
    fail_msg("unexpected warnings: %s", err);
}

int main(void) {
  unsetenv("ZINC_LOG_LEVEL"); /* the warnings under test are at level warn */
  zinc_log_set_level(ZINC_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(str_unset_and_empty_are_null),
      cmocka_unit_test(flag_spellings),
      cmocka_unit_test(flag_malformed_keeps_default_and_warns),
      cmocka_unit_test(int_values_and_ranges),
      cmocka_unit_test(int_malformed_keeps_default),
      cmocka_unit_test(choice_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
