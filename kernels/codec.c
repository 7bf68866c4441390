/*
 * codec.c — sizes and names of the codecs of kernels/codec.h. The encode
 * and decode passes live with the other CPU kernels and in codec.cu.
 */
#include <math.h>

#include "base/base.h"
#include "kernels/codec.h"

int zinc_codec_is_block(zinc_codec c) {
  return c.kind == ZINC_CODEC_INT8 || c.kind == ZINC_CODEC_INT4 || c.kind == ZINC_CODEC_SIGN1 ||
         c.kind == ZINC_CODEC_TERN2;
}

static size_t round16(size_t b) { return (b + 15) & ~(size_t)15; }

int zinc_codec_topk_k(double density, int block) {
  double k = ceil(density * (double)block);
  return k < 1 ? 1 : k > block ? block : (int)k;
}

int64_t zinc_codec_topk_entries(zinc_codec c, int64_t n) {
  if (n <= 0 || c.block <= 0 || c.k <= 0)
    return 0;
  int64_t full = n / c.block, tail = n % c.block, k = c.k < c.block ? c.k : c.block;
  return full * k + (tail < k ? tail : k);
}

size_t zinc_codec_ef_bytes(zinc_codec c, int64_t n) {
  if (c.kind == ZINC_CODEC_TOPK)
    return n > 0 ? round16(4 * (size_t)n) : 0;
  return zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, c.block, 0}, n);
}

size_t zinc_codec_bytes(zinc_codec c, int64_t n) {
  if (n <= 0)
    return 0;
  size_t un = (size_t)n;
  switch (c.kind) {
  case ZINC_CODEC_F32: return round16(4 * un);
  case ZINC_CODEC_BF16:
  case ZINC_CODEC_F16: return round16(2 * un);
  case ZINC_CODEC_TOPK: return round16(6 * (size_t)zinc_codec_topk_entries(c, n));
  default: break;
  }
  if (!zinc_codec_is_block(c) || c.block <= 0)
    return 0;
  size_t nb = (un + (size_t)c.block - 1) / (size_t)c.block;
  size_t payload = c.kind == ZINC_CODEC_INT8   ? un
                   : c.kind == ZINC_CODEC_INT4  ? (un + 1) / 2
                   : c.kind == ZINC_CODEC_TERN2 ? (un + 3) / 4
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
  case ZINC_CODEC_TERN2: return 2 + scale_bits;
  case ZINC_CODEC_TOPK: return c.block > 0 ? 48.0 * (c.k < c.block ? c.k : c.block) / c.block : 0;
  default: return 0;
  }
}

const char *zinc_codec_name(zinc_codec c) {
  static const char *const names[ZINC_CODEC_NKINDS] = {"none", "fp32", "bf16", "fp16",
                                                       "int8", "int4", "sign1", "terngrad", "topk"};
  return c.kind >= 0 && c.kind < ZINC_CODEC_NKINDS ? names[c.kind] : "?";
}

/* Block codecs (codec_math.h): q is within 0.5 + qmax 2^-23 of x qmax / m
 * (two fp32 roundings of y = (x pre) inv), the scale and q * scale are
 * each rounded once more (relative 2^-24, or 2^-150 absolute when they are
 * subnormal): m / (2 qmax) + m 2^-22 + (qmax + 1) 2^-150, doubled in the
 * small terms. */
double zinc_codec_error_bound(zinc_codec c, double m) {
  double a = fabs(m);
  switch (c.kind) {
  case ZINC_CODEC_F32: return 0;
  case ZINC_CODEC_BF16: /* half an ulp of an 8-bit significand; subnormal step 2^-133 */
    return ldexp(a, -8) + ldexp(1.0, -134);
  case ZINC_CODEC_F16: /* + the subnormal step; 65520 and above become inf */
    return a >= 65520.0 ? INFINITY : ldexp(a, -11) + ldexp(1.0, -25);
  case ZINC_CODEC_INT8: return a / 254.0 + ldexp(a, -21) + 128.0 * ldexp(1.0, -149);
  case ZINC_CODEC_INT4: return a / 14.0 + ldexp(a, -21) + 8.0 * ldexp(1.0, -149);
  case ZINC_CODEC_TERN2: return a; /* decoded is 0 or +-m with x's sign: |x| <= m */
  default: return INFINITY;
  }
}

zinc_status zinc_codec_check(const char *who, int encoding, zinc_codec c, void *dst,
                             const void *src, int dtype, int64_t n, const void *ef,
                             float ef_beta, int accumulate) {
  if (c.kind <= ZINC_CODEC_NONE || c.kind >= ZINC_CODEC_NKINDS)
    return zinc_error(ZINC_ERR_INVALID, "%s: codec kind %d; use one of fp32, bf16, fp16, int8, "
                      "int4, sign1, terngrad, topk (ZINC_CODEC_F32 .. ZINC_CODEC_TOPK)", who, c.kind);
  if (zinc_codec_is_block(c) && c.block <= 0)
    return zinc_error(ZINC_ERR_INVALID, "%s: %s codec with block %d; a block codec needs "
                      "block >= 1 elements per scale", who, zinc_codec_name(c), c.block);
  if (c.kind == ZINC_CODEC_TOPK && (c.block <= 0 || c.block > 65536 || c.k < 1 || c.k > c.block))
    return zinc_error(ZINC_ERR_INVALID, "%s: topk codec with block %d and k %d; it needs "
                      "1 <= k <= block <= 65536 (16-bit indices)", who, c.block, c.k);
  if (dtype != ZINC_F32 && dtype != ZINC_BF16 && dtype != ZINC_F16)
    return zinc_error(ZINC_ERR_INVALID, "%s: %s dtype %d; use f32, bf16 or f16", who,
                      encoding ? "source" : "destination", dtype);
  if (n < 0)
    return zinc_error(ZINC_ERR_INVALID, "%s: n %lld elements; n must be >= 0", who,
                      (long long)n);
  if (n > 0 && (!dst || !src))
    return zinc_error(ZINC_ERR_INVALID, "%s: %lld elements with dst %p, src %p; both are "
                      "needed", who, (long long)n, dst, src);
  if (encoding && ef && c.kind == ZINC_CODEC_TOPK && ef_beta != 0.0f)
    return zinc_error(ZINC_ERR_INVALID, "%s: topk error feedback with beta %g; the top-k "
                      "residual is classic error feedback: pass beta 0", who, (double)ef_beta);
  if (encoding && ef && c.kind != ZINC_CODEC_TOPK) {
    if (!zinc_codec_is_block(c))
      return zinc_error(ZINC_ERR_INVALID, "%s: error feedback with the %s codec; it needs a "
                        "block codec (int8, int4, sign1, terngrad) or topk: pass ef NULL", who,
                        zinc_codec_name(c));
    if (!(ef_beta >= 0.0f && ef_beta <= 1.0f))
      return zinc_error(ZINC_ERR_INVALID, "%s: error feedback beta %g; it must be in [0, 1]",
                        who, (double)ef_beta);
  }
  if (!encoding && accumulate && dtype != ZINC_F32)
    return zinc_error(ZINC_ERR_INVALID, "%s: decode-accumulate into dtype %d; it adds into "
                      "f32 only", who, dtype);
  return ZINC_OK;
}
