/*
 * codec.c — sizes and names of the codecs of kernels/codec.h. The encode
 * and decode passes live with the other CPU kernels and in codec.cu.
 */
#include <math.h>

#include "kernels/codec.h"

int zinc_codec_is_block(zinc_codec c) {
  return c.kind == ZINC_CODEC_INT8 || c.kind == ZINC_CODEC_INT4 || c.kind == ZINC_CODEC_SIGN1;
}

static size_t round16(size_t b) { return (b + 15) & ~(size_t)15; }

size_t zinc_codec_bytes(zinc_codec c, int64_t n) {
  if (n <= 0)
    return 0;
  size_t un = (size_t)n;
  switch (c.kind) {
  case ZINC_CODEC_F32: return round16(4 * un);
  case ZINC_CODEC_BF16:
  case ZINC_CODEC_F16: return round16(2 * un);
  default: break;
  }
  if (!zinc_codec_is_block(c) || c.block <= 0)
    return 0;
  size_t nb = (un + (size_t)c.block - 1) / (size_t)c.block;
  size_t payload = c.kind == ZINC_CODEC_INT8 ? un : c.kind == ZINC_CODEC_INT4 ? (un + 1) / 2
                                                                              : (un + 7) / 8;
  return round16(4 * nb + payload);
}

double zinc_codec_bits(zinc_codec c) {
  double scale_bits = zinc_codec_is_block(c) && c.block > 0 ? 32.0 / c.block : 0;
  switch (c.kind) {
  case ZINC_CODEC_F32: return 32;
  case ZINC_CODEC_BF16:
  case ZINC_CODEC_F16: return 16;
  case ZINC_CODEC_INT8: return 8 + scale_bits;
  case ZINC_CODEC_INT4: return 4 + scale_bits;
  case ZINC_CODEC_SIGN1: return 1 + scale_bits;
  default: return 0;
  }
}

const char *zinc_codec_name(zinc_codec c) {
  static const char *const names[ZINC_CODEC_NKINDS] = {"none", "fp32", "bf16", "fp16",
                                                       "int8", "int4", "sign1"};
  return c.kind >= 0 && c.kind < ZINC_CODEC_NKINDS ? names[c.kind] : "?";
}

double zinc_codec_error_bound(zinc_codec c, double m) {
  switch (c.kind) {
  case ZINC_CODEC_F32: return 0;
  case ZINC_CODEC_BF16: return ldexp(fabs(m), -8);  /* half an ulp of an 8-bit significand */
  case ZINC_CODEC_F16: return ldexp(fabs(m), -11) + ldexp(1.0, -25); /* + subnormal step */
  case ZINC_CODEC_INT8: return fabs(m) / 254.0 * (1 + 1e-6);
  case ZINC_CODEC_INT4: return fabs(m) / 14.0 * (1 + 1e-6);
  default: return INFINITY;
  }
}
