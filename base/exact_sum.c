/*
 * exact_sum.c — the order-independent sum of exact_sum.h: each double is
 * its 53-bit integer mantissa shifted to its exponent's place in a
 * 34 x 64-bit integer.
 */
#include <math.h>
#include <string.h>

#include "base/exact_sum.h"

/* limb[i..] += v, carrying upward (the headroom keeps the carry inside) */
static void add_at(zinc_xsum *s, int i, uint64_t v) {
  for (; v && i < ZINC_XSUM_LIMBS; i++) {
    uint64_t before = s->limb[i];
    s->limb[i] = before + v;
    v = s->limb[i] < before; /* the carry */
  }
}

void zinc_xsum_add(zinc_xsum *s, double x) {
  if (!(x >= 0) || isinf(x)) { /* NaN fails x >= 0 */
    s->bad++;
    return;
  }
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int biased = (int)(bits >> 52);
  uint64_t mant = bits & ((1ull << 52) - 1);
  if (biased)
    mant |= 1ull << 52; /* normal: the hidden bit; x = mant 2^(biased - 1075) */
  else
    biased = 1;         /* subnormal: x = mant 2^-1074 */
  int pos = biased - 1; /* mant's LSB in units of 2^-1074 */
  int i = pos / 64, sh = pos % 64;
  add_at(s, i, mant << sh);
  if (sh)
    add_at(s, i + 1, mant >> (64 - sh));
}

void zinc_xsum_merge(zinc_xsum *s, const zinc_xsum *t) {
  uint64_t carry = 0;
  for (int i = 0; i < ZINC_XSUM_LIMBS; i++) {
    uint64_t a = s->limb[i], sum = a + t->limb[i];
    uint64_t c1 = sum < a;
    s->limb[i] = sum + carry;
    carry = c1 | (s->limb[i] < sum);
  }
  s->bad += t->bad;
}

double zinc_xsum_value(const zinc_xsum *s) {
  if (s->bad)
    return INFINITY;
  int top = ZINC_XSUM_LIMBS - 1;
  while (top > 0 && s->limb[top] == 0)
    top--;
  /* the top three limbs hold the exact sum's leading 129 bits or more:
   * added from the smallest, the double is the exact sum's within an ulp,
   * and depends on nothing else */
  double v = 0.0;
  for (int i = top >= 2 ? top - 2 : 0; i <= top; i++)
    v += ldexp((double)s->limb[i], 64 * i - 1074);
  return v;
}
