/*
 * exact_sum.h — sums of non-negative doubles whose result does not depend
 * on the order or grouping of the terms.
 *
 * Why: the gradient norm adds per-piece sums of squares that live on
 * different ranks — data-parallel partitions, tensor-parallel shards,
 * pipeline stages. Added in floating point, the grouping a layout imposes
 * (per rank, then per group) changes the last bits, and with clipping the
 * last bits of the norm reach the weights. Added here, every term goes into
 * a wide fixed-point integer without rounding (binary64's whole range, LSB
 * 2^-1074, with 78 bits of headroom for carries), integers from other
 * ranks add exactly, and the one rounding happens at the end: any layout
 * that has the same terms gets the same double.
 */
#ifndef ZINC_EXACT_SUM_H
#define ZINC_EXACT_SUM_H

#include <stdint.h>

#define ZINC_XSUM_LIMBS 34

/* value = sum of limb[i] * 2^(64 i - 1074); `bad` counts terms that were
 * not finite or negative (left out of the sum). Plain data: rank-to-rank
 * as bytes on machines of one endianness (every rank of a job). Zero-
 * initialise to start. */
typedef struct {
  uint64_t limb[ZINC_XSUM_LIMBS];
  uint64_t bad;
} zinc_xsum;

/* Add x exactly (x >= 0 and finite; anything else counts in bad). */
void zinc_xsum_add(zinc_xsum *s, double x);
/* s += t, exactly. */
void zinc_xsum_merge(zinc_xsum *s, const zinc_xsum *t);
/* The sum as a double: a function of the exact sum alone (within an ulp
 * of it), +inf when a term was bad. */
double zinc_xsum_value(const zinc_xsum *s);

#endif /* ZINC_EXACT_SUM_H */
