/* test_exact_sum.c — base/exact_sum.h: the sum of non-negative doubles is
 * the same whatever the order and grouping of the terms (the gradient norm
 * of any layout relies on it), and it is the exact sum to within an ulp,
 * checked against a reference that adds the same terms as integers of
 * another width (__int128 at a fixed scale, where every term is exact). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/exact_sum.h"

static uint64_t next(uint64_t *s) {
  *s += 0x9e3779b97f4a7c15ull;
  uint64_t z = *s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* terms spread over 2^-40 .. 2^20, like sums of squares of gradients */
static double term(uint64_t *s) {
  double m = (double)(next(s) >> 11) / 9007199254740992.0;
  return ldexp(m, (int)(next(s) % 61) - 40);
}

enum { N = 4000 };

static void any_order_any_grouping_same_bits(void **state) {
  (void)state;
  static double x[N];
  uint64_t seed = 7;
  for (int i = 0; i < N; i++)
    x[i] = term(&seed);
  zinc_xsum a = {0};
  for (int i = 0; i < N; i++)
    zinc_xsum_add(&a, x[i]);
  double ref = zinc_xsum_value(&a);
  /* the plain double sum of the same terms depends on the order: the
   * test's terms are such that it does (else this test proves nothing) */
  double fwd = 0, bwd = 0;
  for (int i = 0; i < N; i++)
    fwd += x[i];
  for (int i = N - 1; i >= 0; i--)
    bwd += x[i];
  assert_true(fwd != bwd);
  for (int trial = 0; trial < 20; trial++) {
    /* shuffle, then cut into groups of random sizes (ranks), merge the
     * groups' sums in a random order */
    for (int i = N - 1; i > 0; i--) {
      int j = (int)(next(&seed) % (uint64_t)(i + 1));
      double t = x[i];
      x[i] = x[j];
      x[j] = t;
    }
    zinc_xsum groups[16];
    memset(groups, 0, sizeof groups);
    for (int i = 0; i < N; i++)
      zinc_xsum_add(&groups[next(&seed) % 16], x[i]);
    zinc_xsum total = {0};
    int start = (int)(next(&seed) % 16);
    for (int g = 0; g < 16; g++)
      zinc_xsum_merge(&total, &groups[(start + g * 5) % 16]);
    double v = zinc_xsum_value(&total);
    assert_memory_equal(&v, &ref, sizeof v);
  }
}

/* terms on a grid of 2^-60 below 2^60: an __int128 holds their sum exactly */
static void within_an_ulp_of_the_exact_sum(void **state) {
  (void)state;
  uint64_t seed = 11;
  for (int trial = 0; trial < 50; trial++) {
    zinc_xsum s = {0};
    __int128 exact = 0;
    int n = 1 + (int)(next(&seed) % 500);
    for (int i = 0; i < n; i++) {
      uint64_t q = next(&seed) >> (next(&seed) % 60); /* < 2^64 units of 2^-60 */
      q >>= 11; /* 53 bits: exact as a double */
      double t = ldexp((double)q, -60);
      zinc_xsum_add(&s, t);
      exact += q;
    }
    long double want = ldexpl((long double)exact, -60);
    double got = zinc_xsum_value(&s);
    double lo = nextafter((double)want, 0), hi = nextafter((double)want, INFINITY);
    assert_true(got >= lo && got <= hi);
  }
}

static void extremes_and_bad_terms(void **state) {
  (void)state;
  zinc_xsum s = {0};
  double tiny = ldexp(1.0, -1074); /* the smallest subnormal */
  for (int i = 0; i < 1024; i++)
    zinc_xsum_add(&s, tiny);
  assert_true(zinc_xsum_value(&s) == ldexp(1.0, -1064)); /* no term lost */
  zinc_xsum big = {0};
  zinc_xsum_add(&big, 0x1.fffffffffffffp+1023);
  zinc_xsum_add(&big, 0.0);
  assert_true(zinc_xsum_value(&big) == 0x1.fffffffffffffp+1023);
  zinc_xsum_add(&big, 0x1.fffffffffffffp+1023); /* the sum overflows a double */
  assert_true(isinf(zinc_xsum_value(&big)));
  assert_int_equal(big.bad, 0);
  zinc_xsum b = {0};
  zinc_xsum_add(&b, 1.0);
  zinc_xsum_add(&b, NAN);
  assert_true(isinf(zinc_xsum_value(&b)));
  zinc_xsum c = {0};
  zinc_xsum_add(&c, INFINITY);
  zinc_xsum_add(&c, -1.0);
  assert_int_equal(c.bad, 2);
  zinc_xsum d = {0};
  zinc_xsum_merge(&d, &c); /* bad terms travel with the merge */
  assert_true(isinf(zinc_xsum_value(&d)));
  zinc_xsum z = {0};
  assert_true(zinc_xsum_value(&z) == 0.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(any_order_any_grouping_same_bits),
      cmocka_unit_test(within_an_ulp_of_the_exact_sum),
      cmocka_unit_test(extremes_and_bad_terms),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
