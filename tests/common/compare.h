/*
 * compare.h — the tests' one element-wise comparison. Elements are compared
 * bit for bit; on a mismatch it prints (to stderr) the first
 * TEST_MAX_REPORTED mismatching elements with their values and bits, then
 * one line with the number of mismatches and the largest difference and
 * where it is:
 *
 *   master[17]: got 0.123456791 (0x3dfcd6ea), want 0.123456784 (0x3dfcd6e9)
 *   master: 3 of 1001 elements differ; largest difference 7.45e-09 at 17
 *
 * Element types are zinc's dtypes (ZINC_F32, ZINC_BF16, ZINC_F16) and the
 * comm's extra ones (ZINC_DT_F64, ZINC_DT_I32, ZINC_DT_I64, ZINC_DT_U8).
 * `what` names the buffer in every line (put the rank in it where several
 * ranks print).
 */
#ifndef ZINC_TESTS_COMMON_COMPARE_H
#define ZINC_TESTS_COMMON_COMPARE_H

#include <stdint.h>

#include "comm/comm.h" /* the element types beyond zinc_dtype: ZINC_DT_F64, ... */

#define TEST_MAX_REPORTED 8

/* Flags for test_compare. */
enum {
  /* a NaN matches any NaN (payloads that arithmetic produces differ between
   * implementations: a canonical NaN on the GPU, the quieted operand on the
   * CPU) */
  TEST_NAN_MATCHES_NAN = 1,
};

/* Compare n elements of dtype in got and want; returns the number of
 * elements that differ (0: equal), reported as above. */
int64_t test_compare(const char *what, const void *got, const void *want, int64_t n, int dtype,
                     unsigned flags);

/* test_compare without flags: every bit must match, NaN payloads too. */
static inline int64_t test_compare_bits(const char *what, const void *got, const void *want,
                                        int64_t n, int dtype) {
  return test_compare(what, got, want, n, dtype, 0);
}

#endif /* ZINC_TESTS_COMMON_COMPARE_H */
