/*
 * test_lr_schedule.c — zinc_lr_at against DeepSpeed's schedules evaluated
 * in Python (lr_reference.h, made by make_lr_reference.py): WarmupLR,
 * WarmupDecayLR, WarmupCosineLR with log and linear warmup, warmup of 0/1
 * steps (DeepSpeed's max(2, n)), total below warmup, and past the end.
 * Tolerance: 2 ulp (the same operations on the same libm agree bit for bit;
 * the count of bit-exact values is printed).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "optim/lr_schedule.h"
#include "lr_reference.h"

static void settings_for(const lr_ref_case *c, zinc_settings *s) {
  zinc_settings_defaults(s);
  s->scheduler = c->sched;
  s->warmup_type = c->warmup_type;
  s->lr = c->lr;
  s->warmup_min_lr = c->warmup_min_lr;
  s->warmup_max_lr = c->warmup_max_lr;
  s->warmup_num_steps = c->warmup_num_steps;
  s->total_num_steps = c->total_num_steps;
  s->warmup_min_ratio = c->warmup_min_ratio;
  s->cos_min_ratio = c->cos_min_ratio;
}

static void matches_deepspeed(void **state) {
  (void)state;
  int total = 0, exact = 0, bad = 0;
  double worst_ulps = 0;
  for (size_t k = 0; k < sizeof lr_ref_cases / sizeof lr_ref_cases[0]; k++) {
    const lr_ref_case *c = &lr_ref_cases[k];
    zinc_settings s;
    settings_for(c, &s);
    for (int i = 0; i < c->npoints; i++) {
      double ref = c->points[i].lr, got = zinc_lr_at(&s, c->points[i].it);
      double ulp = ref != 0 ? nextafter(fabs(ref), INFINITY) - fabs(ref) : 5e-324;
      double ulps = fabs(got - ref) / ulp;
      total++;
      exact += got == ref;
      if (ulps > worst_ulps)
        worst_ulps = ulps;
      if (ulps > 2 && bad++ < 10)
        print_error("%s it %lld: zinc %.17g, DeepSpeed %.17g (%.1f ulp)\n", c->name,
                    (long long)c->points[i].it, got, ref, ulps);
    }
  }
  print_message("lr schedules: %d values, %d bit-exact, largest difference %.1f ulp\n", total,
                exact, worst_ulps);
  assert_int_equal(bad, 0);
  assert_true(total > 250);
}

/* Shapes worth stating on their own, independent of the reference file. */
static void schedule_shapes(void **state) {
  (void)state;
  zinc_settings s;
  zinc_settings_defaults(&s);
  /* no scheduler: the optimizer's lr, whatever the iteration */
  s.lr = 6e-4;
  assert_true(zinc_lr_at(&s, 0) == 6e-4 && zinc_lr_at(&s, 123456) == 6e-4);

  /* WarmupLR: starts at min, reaches max at warmup_num_steps, stays */
  s.scheduler = ZINC_SCHED_WARMUP_LR;
  s.warmup_min_lr = 1e-5;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  s.warmup_type = ZINC_WARMUP_LINEAR;
  assert_true(zinc_lr_at(&s, 0) == 1e-5);
  assert_true(zinc_lr_at(&s, -5) == zinc_lr_at(&s, 0)); /* before the start: iteration 0 */
  assert_true(zinc_lr_at(&s, 5) == 1e-5 + (1e-3 - 1e-5) * 0.5);
  assert_true(fabs(zinc_lr_at(&s, 10) - 1e-3) < 1e-18);
  assert_true(zinc_lr_at(&s, 1000000) == zinc_lr_at(&s, 10));
  for (int it = 1; it < 10; it++)
    assert_true(zinc_lr_at(&s, it) > zinc_lr_at(&s, it - 1));

  /* WarmupDecayLR: linear to min_lr at total_num_steps, 0 gamma after */
  s.scheduler = ZINC_SCHED_WARMUP_DECAY;
  s.total_num_steps = 110;
  assert_true(fabs(zinc_lr_at(&s, 10) - 1e-3) < 1e-18);
  assert_true(zinc_lr_at(&s, 60) == 1e-5 + (1e-3 - 1e-5) * 0.5);
  assert_true(zinc_lr_at(&s, 110) == 1e-5 && zinc_lr_at(&s, 500) == 1e-5);

  /* WarmupCosineLR: a ratio of the optimizer's lr; cos_min_ratio at the end */
  s.scheduler = ZINC_SCHED_WARMUP_COSINE;
  s.lr = 2e-3;
  s.warmup_min_ratio = 0.5;
  s.cos_min_ratio = 0.1;
  assert_true(zinc_lr_at(&s, 0) == 2e-3 * 0.5);
  assert_true(fabs(zinc_lr_at(&s, 109) - 2e-3 * 0.1) < 1e-18);
  assert_true(zinc_lr_at(&s, 9) < zinc_lr_at(&s, 10));
  assert_true(zinc_lr_at(&s, 10) > zinc_lr_at(&s, 50));
  /* a hand-built total == warmup does not divide by zero */
  s.total_num_steps = 10;
  assert_false(isnan(zinc_lr_at(&s, 20)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matches_deepspeed),
      cmocka_unit_test(schedule_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
