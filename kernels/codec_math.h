/*
 * codec_math.h — the per-element and per-block arithmetic of the codecs of
 * kernels/codec.h, written once and shared by the CPU paths
 * (cpu_codec*.c, cpu_kernels_simd.h) and the CUDA kernels (codec.cu).
 *
 * Bitwise agreement rules (as kernels/zinc_math.h): every fp32 operation is
 * spelled out below in its order, nothing is fused (-ffp-contract=off,
 * nvcc --fmad=false), division is IEEE correctly rounded on every path and
 * rounding to an integer is round-to-nearest-even (rintf on the host and
 * the device, _MM_FROUND_TO_NEAREST_INT in the SIMD paths).
 *
 * One block of a block codec (INT8 / INT4, qmax = 127 / 7):
 *   mbits  = max over the block of (bits(x) & 0x7fffffff)   (an integer max:
 *            exact in any order; a NaN has the largest bits, so
 *            mbits >= 0x7f800000 means "the block holds an inf or a NaN")
 *   non-finite block:   scale = NaN, every q = 0
 *   m == 0:             scale = 0,   every q = 0
 *   otherwise, m = float(mbits):
 *     pre   = m < 2^-64 ? 2^64 : 1      (so that qmax / (m * pre) is finite
 *                                        for denormal m; exact)
 *     scale = m / qmax
 *     inv   = qmax / (m * pre)
 *     q     = clamp(rint((x * pre) * inv), -qmax, qmax)
 *   decoded value = (float)q * scale.
 * SIGN1: non-finite block: scale = NaN; otherwise
 *     sum in fp32 over 8 lanes: element k of the block (k from 0) is added
 *     to lane k % 8, each lane in block order from 0.0f; then
 *     l[j] += l[j + 4] (j < 4), l[j] += l[j + 2] (j < 2), sum = l[0] + l[1]
 *     (so a vector of 8 lanes accumulates it, and a 16-wide path adds its
 *     two halves in turn);
 *     scale = sum / (float)len          (len: the block's element count)
 *   bit = the sign bit of x (so -0.0 is "negative"); decoded value is
 *   -scale when the bit is set, else scale.
 * TERN2 (TernGrad): mbits and the quantizer as INT8's with qmax = 1, so
 *   scale s = m (NaN for a non-finite block, 0 for m == 0, every q = 0);
 *   otherwise, per element i (its index in the slice) of value x:
 *     prob = |x * pre| / (m * pre)            (one correctly rounded
 *                                              division, in [0, 1])
 *     h    = splitmix64's output for state seed + (i + 1) * 0x9e3779b97f4a7c15
 *            (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
 *             z *= 0x94d049bb133111eb; z ^= z >> 31; all mod 2^64)
 *     u    = (float)(h >> 40) * 2^-24         (exact: 24 bits, in [0, 1))
 *     q    = u < prob ? sign(x) : 0           (x = +-0 gives 0)
 *   so P(q != 0) = ceil(prob 2^24) / 2^24: unbiased up to 2^-24 s, and
 *   the block's largest element always keeps its +-s.
 *   decoded value = (float)q * s.
 *
 * Error feedback (codec.h), per element of a block with residual d read
 * from the INT8 ef block (d = (float)q_ef * scale_ef):
 *   x   = src + d
 *   err = x - deQ(Q(x))   deQ(Q(x)) = y * scale with y the float that
 *                         zinc_codec_quantize returns (0 in a zero block),
 *                         or SIGN1's +-scale
 *   r   = (beta * d) + (omb * err)      omb = 1.0f - beta, once per call
 * and the residual block is re-encoded INT8 from r, except that a block
 * whose x or r is not finite stores a zero residual (scale 0, q 0): the
 * overflowing step that the loss scaler skips does not poison the next.
 *
 * TOPK, one block [lo, hi) keeping kb = min(k, hi - lo) elements, x =
 * src (+ res, the fp32 residual, one add):
 *   key(x) = bits(x) & 0x7fffffff     (integer order = order of |x|)
 *   T      = the kb-th largest key (a radix select in digits of 8, 8,
 *            8 and 7 bits: four counting passes)
 *   above  = keys > T;  kept: key > T, or key == T among the first
 *            kb - above such keys in index order
 *   entries written in index order; with res: res = kept ? 0 : x, and 0
 *   over the whole block when any key >= 0x7f800000 (inf or NaN).
 * Pure integer comparisons and one fp32 add per element: every path that
 * runs these functions gives the same bytes.
 */
#ifndef ZINC_CODEC_MATH_H
#define ZINC_CODEC_MATH_H

#include <stdint.h>

#include "kernels/codec.h"
#include "kernels/zinc_math.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZINC_CODEC_NONFINITE_BITS 0x7f800000u /* |x| bits at or above: inf/NaN */
#define ZINC_CODEC_TINY 0x1p-64f              /* below it, the 2^64 pre-scale */
#define ZINC_CODEC_PRESCALE 0x1p64f

/* The quantizer's integer limit: 127 (INT8), 7 (INT4), 1 otherwise
 * (SIGN1, TERN2). */
static ZINC_HD int zinc_codec_qmax(int kind) {
  return kind == ZINC_CODEC_INT8 ? 127 : kind == ZINC_CODEC_INT4 ? 7 : 1;
}

/* |x| as bits: the integer whose max over a block is the block's max-abs. */
static ZINC_HD uint32_t zinc_codec_abs_bits(float x) { return zinc_f32_bits(x) & 0x7fffffffu; }

/* A block's quantizer, from its max-abs bits (INT8/INT4). zero: every q is
 * 0 (m == 0 or a non-finite block, whose scale is NaN). */
typedef struct {
  float scale; /* m / qmax, 0, or NaN     */
  float pre;   /* 1 or 2^64               */
  float inv;   /* qmax / (m * pre)        */
  float qmax;
  int zero;
} zinc_codec_quant;

static ZINC_HD zinc_codec_quant zinc_codec_quant_make(uint32_t mbits, int qmax) {
  zinc_codec_quant p;
  p.qmax = (float)qmax;
  p.pre = 1.0f;
  p.inv = 0.0f;
  p.zero = 1;
  if (mbits >= ZINC_CODEC_NONFINITE_BITS) {
    p.scale = zinc_bits_f32(0x7fc00000u);
    return p;
  }
  float m = zinc_bits_f32(mbits);
  if (mbits == 0) {
    p.scale = 0.0f;
    return p;
  }
  if (m < ZINC_CODEC_TINY)
    p.pre = ZINC_CODEC_PRESCALE;
  p.scale = m / p.qmax;
  p.inv = p.qmax / (m * p.pre);
  p.zero = 0;
  return p;
}

/* q of one finite element of a block that is not zero (p.zero == 0), as a
 * float holding an integer in [-qmax, qmax]. */
static ZINC_HD float zinc_codec_quantize(const zinc_codec_quant *p, float x) {
  float y = rintf((x * p->pre) * p->inv);
  y = y > p->qmax ? p->qmax : y;
  y = y < -p->qmax ? -p->qmax : y;
  return y;
}

static ZINC_HD float zinc_codec_dequantize(int q, float scale) { return (float)q * scale; }

/* TERN2's draw for element i: splitmix64 at counter i + 1 from seed. */
static ZINC_HD uint64_t zinc_codec_tern_hash(uint64_t seed, int64_t i) {
  uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* TERN2's q of element i (value x, finite) of a block that is not zero:
 * -1, 0 or +1 as a float (see the top of the file). */
static ZINC_HD float zinc_codec_tern_quantize(const zinc_codec_quant *p, float x, uint64_t seed,
                                              int64_t i) {
  float prob = fabsf(x * p->pre) / (p->scale * p->pre);
  float u = (float)(uint32_t)(zinc_codec_tern_hash(seed, i) >> 40) * 0x1p-24f;
  /* without a branch on the draw (a coin flip the predictor cannot learn):
   * +-1.0f with x's sign, masked to +0.0f when not kept */
  uint32_t keep = 0u - (uint32_t)(u < prob);
  return zinc_bits_f32((0x3f800000u | (zinc_f32_bits(x) & 0x80000000u)) & keep);
}

#define ZINC_CODEC_SIGN1_LANES 8

/* SIGN1's lanes combined in the fixed order (see the top of the file). */
static ZINC_HD float zinc_codec_sign1_sum(float *l) {
  for (int j = 0; j < 4; j++)
    l[j] = l[j] + l[j + 4];
  for (int j = 0; j < 2; j++)
    l[j] = l[j] + l[j + 2];
  return l[0] + l[1];
}

/* SIGN1's scale from the block's lane sum of |x|. */
static ZINC_HD float zinc_codec_sign1_scale(uint32_t mbits, float abs_sum, int64_t len) {
  if (mbits >= ZINC_CODEC_NONFINITE_BITS)
    return zinc_bits_f32(0x7fc00000u);
  return abs_sum / (float)len;
}

/* -scale when negative (the sign bit flipped, as negation does), else
 * scale; without a branch on the data. */
static ZINC_HD float zinc_codec_sign1_value(int negative, float scale) {
  return zinc_bits_f32(zinc_f32_bits(scale) ^ ((uint32_t)(negative & 1) << 31));
}

/* The error-feedback residual of one element (see the top of the file). */
static ZINC_HD float zinc_codec_ef_residual(float d, float err, float beta, float omb) {
  return (beta * d) + (omb * err);
}

/* ------------------------------------------------------------ payload */

/* The payload of element i of a block codec (its nibble, bit pair or bit
 * sign-extended): int8 q, int4 q, TERN2's q, or 1 for SIGN1's
 * "negative". */
static ZINC_HD int zinc_codec_payload_get(int kind, const uint8_t *payload, int64_t i) {
  if (kind == ZINC_CODEC_INT8)
    return (int)(int8_t)payload[i];
  if (kind == ZINC_CODEC_INT4) {
    int nib = (payload[i >> 1] >> ((i & 1) * 4)) & 0xf;
    return nib >= 8 ? nib - 16 : nib;
  }
  if (kind == ZINC_CODEC_TERN2) {
    int two = (payload[i >> 2] >> ((i & 3) * 2)) & 3;
    return two >= 2 ? two - 4 : two;
  }
  return (payload[i >> 3] >> (i & 7)) & 1;
}

/* Store element i's payload. Elements must be stored in increasing order
 * by one writer per payload byte: the first element of a byte (i even for
 * INT4, i % 4 == 0 for TERN2, i % 8 == 0 for SIGN1) writes the whole
 * byte, the others OR in. */
static ZINC_HD void zinc_codec_payload_put(int kind, uint8_t *payload, int64_t i, int v) {
  if (kind == ZINC_CODEC_INT8) {
    payload[i] = (uint8_t)(int8_t)v;
  } else if (kind == ZINC_CODEC_INT4) {
    uint8_t nib = (uint8_t)(v & 0xf);
    if (i & 1)
      payload[i >> 1] = (uint8_t)(payload[i >> 1] | (nib << 4));
    else
      payload[i >> 1] = nib;
  } else if (kind == ZINC_CODEC_TERN2) {
    uint8_t two = (uint8_t)((v & 3) << ((i & 3) * 2));
    payload[i >> 2] = (i & 3) ? (uint8_t)(payload[i >> 2] | two) : two;
  } else {
    uint8_t bit = (uint8_t)((v & 1) << (i & 7));
    payload[i >> 3] = (i & 7) ? (uint8_t)(payload[i >> 3] | bit) : bit;
  }
}

/* Bytes of scales and payload of n elements before the padding. */
static ZINC_HD int64_t zinc_codec_payload_offset(int block, int64_t n) {
  return 4 * ((n + block - 1) / block);
}
static ZINC_HD int64_t zinc_codec_payload_bytes(int kind, int64_t n) {
  return kind == ZINC_CODEC_INT8    ? n
         : kind == ZINC_CODEC_INT4  ? (n + 1) / 2
         : kind == ZINC_CODEC_TERN2 ? (n + 3) / 4
                                    : (n + 7) / 8;
}

/* Blocks per "group": the fewest whole blocks that end on a payload byte
 * boundary of every kind (8 / gcd(block, 8): 8 elements per byte is the
 * densest, SIGN1), so that parallel writers of whole groups never share a
 * payload byte. */
static ZINC_HD int64_t zinc_codec_group_blocks(int block) {
  int g = 8;
  while (g > 1 && ((int64_t)block * (g / 2)) % 8 == 0)
    g /= 2;
  return g;
}

/* ------------------------------------------------- one block, scalar */

/* x of element i: src, plus the old residual (ef_q not NULL) of the
 * element's INT8 ef block, whose scale is ef_scale. */
static ZINC_HD float zinc_codec_x(const void *src, int sdt, float ef_scale, const uint8_t *ef_q,
                                  int64_t i) {
  float x = zinc_load_as_f32(src, i, sdt);
  if (ef_q)
    x = x + zinc_codec_dequantize((int)(int8_t)ef_q[i], ef_scale);
  return x;
}

/* q of element i (value x) as a float: INT8/INT4 and TERN2 (seed: its
 * draw) with quantizer p, 0 in a zero block. */
static ZINC_HD float zinc_codec_q(int kind, const zinc_codec_quant *p, float x, uint64_t seed,
                                  int64_t i) {
  if (p->zero)
    return 0.0f;
  return kind == ZINC_CODEC_TERN2 ? zinc_codec_tern_quantize(p, x, seed, i)
                                  : zinc_codec_quantize(p, x);
}

/* Quantize element i (value x) of a block with quantizer p (INT8/INT4/
 * TERN2) or scale (SIGN1) into the payload; returns deQ(Q(x)) as error
 * feedback uses it. */
static ZINC_HD float zinc_codec_encode_elem(int kind, const zinc_codec_quant *p, float scale,
                                            uint8_t *payload, int64_t i, float x,
                                            uint64_t seed) {
  if (kind == ZINC_CODEC_SIGN1) {
    int neg = (int)(zinc_f32_bits(x) >> 31);
    zinc_codec_payload_put(kind, payload, i, neg);
    return zinc_codec_sign1_value(neg, scale);
  }
  float y = zinc_codec_q(kind, p, x, seed, i);
  zinc_codec_payload_put(kind, payload, i, (int)y);
  return y * scale;
}

/* deQ(Q(x)) of element i, value x, without writing it (error feedback;
 * TERN2 draws the same b as the encode, from seed and i). */
static ZINC_HD float zinc_codec_requantize(int kind, const zinc_codec_quant *p, float scale,
                                           float x, uint64_t seed, int64_t i) {
  if (kind == ZINC_CODEC_SIGN1)
    return zinc_codec_sign1_value((int)(zinc_f32_bits(x) >> 31), scale);
  float y = zinc_codec_q(kind, p, x, seed, i);
  return y * scale;
}

/* The new residual r of element i (old residual block scale old_scale). */
static ZINC_HD float zinc_codec_ef_elem(int kind, const zinc_codec_quant *p, float scale,
                                        const void *src, int sdt, const uint8_t *ef_q,
                                        float old_scale, int64_t i, float beta, float omb,
                                        uint64_t seed) {
  float d = zinc_codec_dequantize((int)(int8_t)ef_q[i], old_scale);
  float x = zinc_load_as_f32(src, i, sdt) + d;
  return zinc_codec_ef_residual(d, x - zinc_codec_requantize(kind, p, scale, x, seed, i), beta,
                                omb);
}

/* The block's statistics, elements [i, hi) (of a block starting at lo)
 * added to mbits and the SIGN1 lanes. */
static ZINC_HD void zinc_codec_stats_tail(int kind, const void *src, int sdt, float ef_scale,
                                          const uint8_t *ef_q, int64_t lo, int64_t i,
                                          int64_t hi, uint32_t *mbits, float *lanes) {
  for (; i < hi; i++) {
    float x = zinc_codec_x(src, sdt, ef_scale, ef_q, i);
    uint32_t a = zinc_codec_abs_bits(x);
    *mbits = a > *mbits ? a : *mbits;
    if (kind == ZINC_CODEC_SIGN1)
      lanes[(i - lo) % ZINC_CODEC_SIGN1_LANES] = lanes[(i - lo) % ZINC_CODEC_SIGN1_LANES] + fabsf(x);
  }
}

static ZINC_HD void zinc_codec_payload_tail(int kind, const zinc_codec_quant *p, float scale,
                                            uint8_t *payload, const void *src, int sdt,
                                            float ef_scale, const uint8_t *ef_q, int64_t i,
                                            int64_t hi, uint64_t seed) {
  for (; i < hi; i++)
    zinc_codec_encode_elem(kind, p, scale, payload, i, zinc_codec_x(src, sdt, ef_scale, ef_q, i),
                           seed);
}

static ZINC_HD void zinc_codec_ef_max_tail(int kind, const zinc_codec_quant *p, float scale,
                                           const void *src, int sdt, const uint8_t *ef_q,
                                           float old_scale, float beta, float omb, int64_t i,
                                           int64_t hi, uint32_t *rbits, uint64_t seed) {
  for (; i < hi; i++) {
    uint32_t a = zinc_codec_abs_bits(
        zinc_codec_ef_elem(kind, p, scale, src, sdt, ef_q, old_scale, i, beta, omb, seed));
    *rbits = a > *rbits ? a : *rbits;
  }
}

static ZINC_HD void zinc_codec_ef_store_tail(int kind, const zinc_codec_quant *p, float scale,
                                             const zinc_codec_quant *rp, const void *src,
                                             int sdt, uint8_t *ef_q, float old_scale,
                                             float beta, float omb, int64_t i, int64_t hi,
                                             uint64_t seed) {
  for (; i < hi; i++) {
    float q = 0.0f;
    if (!rp->zero)
      q = zinc_codec_quantize(
          rp, zinc_codec_ef_elem(kind, p, scale, src, sdt, ef_q, old_scale, i, beta, omb, seed));
    ef_q[i] = (uint8_t)(int8_t)(int)q;
  }
}

/* The block's quantizer from its statistics, and its scale. */
static ZINC_HD float zinc_codec_block_scale(int kind, uint32_t mbits, float *lanes, int64_t len,
                                            zinc_codec_quant *p) {
  *p = zinc_codec_quant_make(mbits, zinc_codec_qmax(kind));
  if (kind == ZINC_CODEC_SIGN1)
    return zinc_codec_sign1_scale(mbits, zinc_codec_sign1_sum(lanes), len);
  return p->scale;
}

/* The residual block's quantizer from the max of r; a block whose x or r
 * is not finite gets a zero residual. */
static ZINC_HD zinc_codec_quant zinc_codec_ef_quant(uint32_t mbits, uint32_t rbits) {
  if (mbits >= ZINC_CODEC_NONFINITE_BITS || rbits >= ZINC_CODEC_NONFINITE_BITS)
    rbits = 0;
  return zinc_codec_quant_make(rbits, 127);
}

/* Encode block b (elements [b*block, min(n, (b+1)*block))) of a block
 * codec: scales[b] and the block's payload; with ef (ef_scales, ef_q not
 * NULL) the residual block b is read and rewritten. The reference every
 * backend reproduces: passes over the block (statistics, payload, and with
 * ef the max of the new residual, then the residual), each element
 * recomputed from src and the old residual in the same operations.
 * seed: TERN2's draws (ignored by the other kinds). */
static ZINC_HD void zinc_codec_encode_block(int kind, int64_t block, float *scales,
                                            uint8_t *payload, const void *src, int sdt,
                                            int64_t n, int64_t b, float *ef_scales,
                                            uint8_t *ef_q, float beta, float omb,
                                            uint64_t seed) {
  const int64_t lo = b * block, hi = n - lo < block ? n : lo + block;
  uint32_t mbits = 0;
  float lanes[ZINC_CODEC_SIGN1_LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
  const float old_scale = ef_q ? ef_scales[b] : 0.0f;
  zinc_codec_stats_tail(kind, src, sdt, old_scale, ef_q, lo, lo, hi, &mbits, lanes);
  zinc_codec_quant p;
  float scale = zinc_codec_block_scale(kind, mbits, lanes, hi - lo, &p);
  zinc_codec_payload_tail(kind, &p, scale, payload, src, sdt, old_scale, ef_q, lo, hi, seed);
  scales[b] = scale;
  if (!ef_q)
    return;
  uint32_t rbits = 0;
  zinc_codec_ef_max_tail(kind, &p, scale, src, sdt, ef_q, old_scale, beta, omb, lo, hi, &rbits,
                         seed);
  zinc_codec_quant rp = zinc_codec_ef_quant(mbits, rbits);
  zinc_codec_ef_store_tail(kind, &p, scale, &rp, src, sdt, ef_q, old_scale, beta, omb, lo, hi,
                           seed);
  ef_scales[b] = rp.scale;
}

/* The decoded value of element i of a block codec. */
static ZINC_HD float zinc_codec_decode_elem(int kind, int64_t block, const float *scales,
                                            const uint8_t *payload, int64_t i) {
  int v = zinc_codec_payload_get(kind, payload, i);
  float scale = scales[i / block];
  return kind == ZINC_CODEC_SIGN1 ? zinc_codec_sign1_value(v, scale)
                                  : zinc_codec_dequantize(v, scale);
}

/* ------------------------------------------------------------- TOPK */

/* x of element i: src plus the fp32 residual (res not NULL). */
static ZINC_HD float zinc_codec_topk_x(const void *src, int sdt, const float *res, int64_t i) {
  float x = zinc_load_as_f32(src, i, sdt);
  return res ? x + res[i] : x;
}

/* T, the kb-th largest key of [lo, hi) (1 <= kb <= hi - lo), and
 * *above, the keys > T: a radix select over the key's 31 bits in digits of
 * 8, 8, 8 and 7 bits from the top. At each digit a histogram of the keys
 * that share the prefix found so far; the digits are walked from the
 * largest, the keys in higher buckets (all > T) counted off, until the
 * bucket holding the kb-th largest. Four counting passes; T is the same
 * number whatever the method (the kb-th largest), so this is codec.h's
 * "bit by bit" threshold computed in fewer passes. */
static ZINC_HD uint32_t zinc_codec_topk_threshold(const void *src, int sdt, const float *res,
                                                  int64_t lo, int64_t hi, int64_t kb,
                                                  int64_t *above) {
  uint32_t prefix = 0, mask = 0;
  int64_t need = kb;
  for (int level = 0; level < 4; level++) {
    const int shift = level == 3 ? 0 : 23 - 8 * level, width = level == 3 ? 7 : 8;
    const uint32_t digit_mask = (1u << width) - 1u;
    uint32_t hist[256];
    for (int v = 0; v < 256; v++)
      hist[v] = 0;
    for (int64_t i = lo; i < hi; i++) {
      uint32_t key = zinc_codec_abs_bits(zinc_codec_topk_x(src, sdt, res, i));
      if ((key & mask) == prefix)
        hist[(key >> shift) & digit_mask]++;
    }
    int v = (int)digit_mask;
    for (; v > 0 && (int64_t)hist[v] < need; v--)
      need -= hist[v];
    prefix |= (uint32_t)v << shift;
    mask |= digit_mask << shift;
  }
  *above = kb - need;
  return prefix;
}

/* First entry of block b and its count, for codec (block, k) over n. */
static ZINC_HD int64_t zinc_codec_topk_first(int64_t block, int k, int64_t b) {
  return b * (k < block ? k : block);
}
static ZINC_HD int64_t zinc_codec_topk_kb(int64_t block, int k, int64_t n, int64_t b) {
  int64_t len = n - b * block < block ? n - b * block : block;
  return k < len ? k : len;
}

/* Encode block b of TOPK: its entries into values / index (K entries
 * each, K = zinc_codec_topk_entries), and with res the new residual. */
static ZINC_HD void zinc_codec_topk_encode_block(int64_t block, int k, float *values,
                                                 uint16_t *index, const void *src, int sdt,
                                                 int64_t n, int64_t b, float *res) {
  const int64_t lo = b * block, hi = n - lo < block ? n : lo + block;
  const int64_t kb = zinc_codec_topk_kb(block, k, n, b);
  int64_t above = 0;
  const uint32_t t = zinc_codec_topk_threshold(src, sdt, res, lo, hi, kb, &above);
  int64_t ties = kb - above, e = zinc_codec_topk_first(block, k, b);
  uint32_t mbits = 0;
  for (int64_t i = lo, tie = 0; i < hi; i++) {
    float x = zinc_codec_topk_x(src, sdt, res, i);
    uint32_t key = zinc_codec_abs_bits(x);
    mbits = key > mbits ? key : mbits;
    if (key > t || (key == t && tie++ < ties)) {
      values[e] = x;
      index[e] = (uint16_t)(i - lo);
      e++;
    }
  }
  if (!res)
    return;
  const int nonfinite = mbits >= ZINC_CODEC_NONFINITE_BITS;
  for (int64_t i = lo, tie = 0; i < hi; i++) {
    float x = zinc_codec_topk_x(src, sdt, res, i);
    uint32_t key = zinc_codec_abs_bits(x);
    int kept = key > t || (key == t && tie++ < ties);
    res[i] = kept || nonfinite ? 0.0f : x;
  }
}

/* Decode block b of TOPK into dst: each kept value stored at its index
 * (dst already zeroed), or added (accumulate, dst f32). */
static ZINC_HD void zinc_codec_topk_decode_block(int64_t block, int k, void *dst, int ddt,
                                                 const float *values, const uint16_t *index,
                                                 int64_t n, int64_t b, int accumulate) {
  const int64_t e0 = zinc_codec_topk_first(block, k, b), kb = zinc_codec_topk_kb(block, k, n, b);
  for (int64_t e = e0; e < e0 + kb; e++) {
    int64_t i = b * block + index[e];
    if (accumulate)
      ((float *)dst)[i] = ((float *)dst)[i] + values[e];
    else
      zinc_store_from_f32(dst, i, ddt, values[e]);
  }
}

#ifdef __cplusplus
}
#endif
#endif /* ZINC_CODEC_MATH_H */
