/*
 * test_loss_scaler.c — zinc_loss_scaler walked through overflow / recovery
 * sequences, the expected scale after every update worked out by hand from
 * DeepSpeed's DynamicLossScaler.update_scale: hysteresis (delayed shift),
 * consecutive_hysteresis, the window counted from the last overflow, the
 * minimum scale, static scales, and fp16 off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "optim/loss_scaler.h"

static zinc_settings fp16_settings(int power, int window, int hysteresis, int consecutive,
                                   double min_scale) {
  zinc_settings s;
  zinc_settings_defaults(&s);
  s.fp16_enabled = 1;
  s.fp16_initial_scale_power = power;
  s.fp16_loss_scale_window = window;
  s.fp16_hysteresis = hysteresis;
  s.fp16_consecutive_hysteresis = consecutive;
  s.fp16_min_loss_scale = min_scale;
  return s;
}

/* Apply overflow flags one by one ('1' overflow, '0' clean) and compare the
 * scale after each with the expected list. */
static void walk(zinc_loss_scaler *ls, const char *flags, const float *expect,
                 const char *what) {
  for (size_t i = 0; flags[i]; i++) {
    zinc_loss_scaler_update(ls, flags[i] == '1');
    float got = zinc_loss_scaler_scale(ls);
    if (got != expect[i])
      fail_msg("%s: after update %zu ('%c') scale %g, expected %g (hysteresis %d, iter %lld, "
               "last overflow %lld)", what, i, flags[i], got, expect[i], ls->cur_hysteresis,
               (long long)ls->cur_iter, (long long)ls->last_overflow_iter);
  }
}

static void hysteresis_and_window(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(4, 4, 2, 0, 1);
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  assert_int_equal(ls.dynamic, 1);
  assert_true(zinc_loss_scaler_scale(&ls) == 16.0f);
  /* 4 clean steps double the scale (window counted from "overflow" -1);
   * the first overflow only uses up the hysteresis, the next ones halve;
   * 4 clean steps after the last overflow double it again and refill. */
  walk(&ls, "0000" "111" "0000",
       (const float[]){16, 16, 16, 32, 32, 16, 8, 8, 8, 8, 16}, "window 4, hysteresis 2");
  assert_int_equal(ls.cur_hysteresis, 2);
  /* without consecutive_hysteresis a clean step does not refill it */
  walk(&ls, "1" "0" "1" "00000",
       (const float[]){16, 16, 8, 8, 8, 8, 16, 16}, "no refill between overflows");
  assert_int_equal(ls.overflows, 5);
  assert_int_equal(ls.cur_iter, 19);
  assert_int_equal(ls.last_overflow_iter, 13);
}

static void consecutive_hysteresis_refills(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(4, 4, 2, 1, 1);
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  /* alternating overflows never exhaust the refilled hysteresis ... */
  walk(&ls, "101010", (const float[]){16, 16, 16, 16, 16, 16}, "alternating");
  /* ... two in a row do */
  walk(&ls, "11", (const float[]){16, 8}, "two in a row");
  walk(&ls, "0000", (const float[]){8, 8, 8, 16}, "recovery");
}

static void no_hysteresis_and_window_one(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(10, 1, 1, 0, 1);
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  walk(&ls, "001100", (const float[]){2048, 4096, 2048, 1024, 2048, 4096}, "window 1");
}

static void minimum_scale(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(3, 1000, 1, 0, 3);
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  /* 8 -> 4 -> max(2, 3) = 3 -> stays 3: DeepSpeed would raise there */
  walk(&ls, "1111", (const float[]){4, 3, 3, 3}, "min scale 3");
  assert_int_equal(ls.overflows_at_min, 2);
  assert_int_equal(ls.overflows, 4);

  s = fp16_settings(1, 2, 2, 0, 1);
  zinc_loss_scaler_init(&ls, &s);
  /* at the minimum with hysteresis left, the overflow uses hysteresis */
  walk(&ls, "11111", (const float[]){2, 1, 1, 1, 1}, "min scale 1, hysteresis 2");
  assert_int_equal(ls.overflows_at_min, 3);
}

static void deepspeed_defaults(void **state) {
  (void)state;
  zinc_settings s;
  zinc_settings_defaults(&s);
  s.fp16_enabled = 1;
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  assert_true(zinc_loss_scaler_scale(&ls) == 65536.0f);
  for (int i = 0; i < 999; i++)
    zinc_loss_scaler_update(&ls, 0);
  assert_true(zinc_loss_scaler_scale(&ls) == 65536.0f);
  zinc_loss_scaler_update(&ls, 0);
  assert_true(zinc_loss_scaler_scale(&ls) == 131072.0f);
  zinc_loss_scaler_update(&ls, 1);
  assert_true(zinc_loss_scaler_scale(&ls) == 131072.0f); /* hysteresis 2 */
  zinc_loss_scaler_update(&ls, 1);
  assert_true(zinc_loss_scaler_scale(&ls) == 65536.0f);
  for (int i = 0; i < 999; i++)
    zinc_loss_scaler_update(&ls, 0);
  assert_true(zinc_loss_scaler_scale(&ls) == 65536.0f);
  zinc_loss_scaler_update(&ls, 0);
  assert_true(zinc_loss_scaler_scale(&ls) == 131072.0f);
}

static void static_and_off(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(16, 1000, 2, 0, 1);
  s.fp16_loss_scale = 128;
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  assert_int_equal(ls.dynamic, 0);
  walk(&ls, "1101", (const float[]){128, 128, 128, 128}, "static 128");
  assert_int_equal(ls.overflows, 3);

  zinc_settings_defaults(&s);
  s.bf16_enabled = 1;
  zinc_loss_scaler_init(&ls, &s);
  walk(&ls, "01", (const float[]){1, 1}, "bf16");
  zinc_settings_defaults(&s);
  zinc_loss_scaler_init(&ls, &s);
  assert_true(zinc_loss_scaler_scale(&ls) == 1.0f);
  s.fp16_enabled = ZINC_AUTO; /* unresolved counts as off */
  zinc_loss_scaler_init(&ls, &s);
  assert_int_equal(ls.dynamic, 0);
  assert_true(zinc_loss_scaler_scale(&ls) == 1.0f);
}

/* Skips that a lower scale cannot cure, counted until a good step: at the
 * minimum scale (the one that brings the scale down to it does not count),
 * and every skip with a static scale. */
static void stuck_skips(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(3, 1000, 1, 0, 2);
  zinc_loss_scaler ls;
  zinc_loss_scaler_init(&ls, &s);
  walk(&ls, "111", (const float[]){4, 2, 2}, "down to min 2");
  assert_int_equal(ls.stuck_skips, 1);
  walk(&ls, "11", (const float[]){2, 2}, "at min 2");
  assert_int_equal(ls.stuck_skips, 3);
  walk(&ls, "0", (const float[]){2}, "a good step");
  assert_int_equal(ls.stuck_skips, 0);
  walk(&ls, "11", (const float[]){2, 2}, "at min again");
  assert_int_equal(ls.stuck_skips, 2);
  zinc_loss_scaler_restore(&ls, 2, 10, 9, 1);
  assert_int_equal(ls.stuck_skips, 0);

  zinc_settings_defaults(&s);
  s.bf16_enabled = 1;
  zinc_loss_scaler_init(&ls, &s);
  walk(&ls, "1101", (const float[]){1, 1, 1, 1}, "bf16");
  assert_int_equal(ls.stuck_skips, 1);
  walk(&ls, "11", (const float[]){1, 1}, "bf16 again");
  assert_int_equal(ls.stuck_skips, 3);
}

static void state_is_plain_bytes(void **state) {
  (void)state;
  zinc_settings s = fp16_settings(12, 3, 2, 0, 1);
  zinc_loss_scaler a, b;
  zinc_loss_scaler_init(&a, &s);
  const char *history = "0010110000100";
  for (size_t i = 0; history[i]; i++)
    zinc_loss_scaler_update(&a, history[i] == '1');
  unsigned char saved[sizeof a];
  memcpy(saved, &a, sizeof a); /* what a checkpoint stores */
  memcpy(&b, saved, sizeof b);
  const char *future = "1000100011";
  for (size_t i = 0; future[i]; i++) {
    zinc_loss_scaler_update(&a, future[i] == '1');
    zinc_loss_scaler_update(&b, future[i] == '1');
    assert_memory_equal(&a, &b, sizeof a);
  }
  assert_int_equal(sizeof a, 80);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hysteresis_and_window),
      cmocka_unit_test(consecutive_hysteresis_refills),
      cmocka_unit_test(no_hysteresis_and_window_one),
      cmocka_unit_test(minimum_scale),
      cmocka_unit_test(deepspeed_defaults),
      cmocka_unit_test(static_and_off),
      cmocka_unit_test(stuck_skips),
      cmocka_unit_test(state_is_plain_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
