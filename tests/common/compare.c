/*
 * compare.c — test_compare (compare.h): bitwise element comparison that
 * prints the first mismatches and the largest difference.
 */
#include "common/compare.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/zinc_math.h"

static int is_float(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16 || dtype == ZINC_DT_F64;
}

/* Element i as a double (exact for every type but the 64-bit integers). */
static double value_at(const void *buf, int64_t i, int dtype) {
  switch (dtype) {
  case ZINC_F32:
  case ZINC_BF16:
  case ZINC_F16: return zinc_load_as_f32(buf, i, dtype);
  case ZINC_DT_F64: return ((const double *)buf)[i];
  case ZINC_DT_I32: return ((const int32_t *)buf)[i];
  case ZINC_DT_I64: return (double)((const int64_t *)buf)[i];
  case ZINC_DT_U8: return ((const uint8_t *)buf)[i];
  }
  return 0;
}

/* Element i's bits, zero-extended. */
static uint64_t bits_at(const void *buf, int64_t i, size_t es) {
  uint64_t b = 0;
  memcpy(&b, (const char *)buf + (size_t)i * es, es);
  return b;
}

static void report(const char *what, const void *got, const void *want, int64_t i, int dtype,
                   size_t es) {
  if (!is_float(dtype)) {
    fprintf(stderr, "%s[%" PRId64 "]: got %.0f, want %.0f\n", what, i, value_at(got, i, dtype),
            value_at(want, i, dtype));
    return;
  }
  int hex = (int)es * 2;
  fprintf(stderr, "%s[%" PRId64 "]: got %.9g (0x%0*" PRIx64 "), want %.9g (0x%0*" PRIx64 ")\n",
          what, i, value_at(got, i, dtype), hex, bits_at(got, i, es), value_at(want, i, dtype),
          hex, bits_at(want, i, es));
}

int64_t test_compare(const char *what, const void *got, const void *want, int64_t n, int dtype,
                     unsigned flags) {
  size_t es = zinc_dt_size(dtype);
  if (es == 0) {
    fprintf(stderr, "%s: test_compare: unknown element type %d\n", what, dtype);
    return n > 0 ? n : 1;
  }
  int64_t bad = 0, worst_at = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (memcmp((const char *)got + (size_t)i * es, (const char *)want + (size_t)i * es, es) == 0)
      continue;
    double g = value_at(got, i, dtype), w = value_at(want, i, dtype);
    if ((flags & TEST_NAN_MATCHES_NAN) && isnan(g) && isnan(w))
      continue;
    double diff = fabs(g - w);
    if (isnan(diff))
      diff = INFINITY;
    if (worst_at < 0 || diff > worst) {
      worst = diff;
      worst_at = i;
    }
    if (bad++ < TEST_MAX_REPORTED)
      report(what, got, want, i, dtype, es);
  }
  if (bad)
    fprintf(stderr, "%s: %" PRId64 " of %" PRId64 " elements differ; largest difference %.3g "
            "at %" PRId64 "\n", what, bad, n, worst, worst_at);
  return bad;
}
