/*
 * test_sched_reference.c — zinc_lr_at and zinc_betas_at against DeepSpeed's
 * own OneCycle and LRRangeTest classes (sched_reference.h, made by
 * make_sched_reference.py with DeepSpeed 0.14.4 and torch): each case's
 * DeepSpeed JSON is loaded by zinc_config_parse, then lr, beta1 and beta2
 * are compared per iteration through the cycle, its decay and far past it.
 * OneCycle with cycle_momentum sets Adam's betas to (momentum, 0.99), as
 * DeepSpeed does; without it the optimizer's betas stay. Tolerance: 2 ulp
 * (the same operations in the same order; the count of bit-exact values is
 * printed).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "config/config.h"
#include "optim/lr_schedule.h"
#include "sched_reference.h"

static double ulps(double got, double ref) {
  double ulp = ref != 0 ? nextafter(fabs(ref), INFINITY) - fabs(ref) : 5e-324;
  return fabs(got - ref) / ulp;
}

static void matches_deepspeed(void **state) {
  (void)state;
  int total = 0, exact = 0, bad = 0;
  double worst = 0;
  for (size_t k = 0; k < sizeof sched_ref_cases / sizeof sched_ref_cases[0]; k++) {
    const sched_ref_case *c = &sched_ref_cases[k];
    zinc_config *cfg = NULL;
    if (zinc_config_parse(c->config, &cfg) != ZINC_OK)
      fail_msg("%s: %s", c->name, zinc_last_error());
    const zinc_settings *s = &cfg->s;
    for (int i = 0; i < c->npoints; i++) {
      const sched_ref_point *p = &c->points[i];
      double got[3], ref[3] = {p->lr, p->beta1, p->beta2};
      got[0] = zinc_lr_at(s, p->it);
      zinc_betas_at(s, p->it, &got[1], &got[2]);
      static const char *const what[3] = {"lr", "beta1", "beta2"};
      for (int j = 0; j < 3; j++) {
        double u = ulps(got[j], ref[j]);
        total++;
        exact += got[j] == ref[j];
        if (u > worst)
          worst = u;
        if (u > 2 && bad++ < 10)
          print_error("%s it %lld %s: zinc %.17g, DeepSpeed %.17g (%.1f ulp)\n", c->name,
                      (long long)p->it, what[j], got[j], ref[j], u);
      }
    }
    zinc_config_free(cfg);
  }
  print_message("OneCycle/LRRangeTest: %d values, %d bit-exact, largest difference %.1f ulp\n",
                total, exact, worst);
  assert_int_equal(bad, 0);
  assert_true(total > 3000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matches_deepspeed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
