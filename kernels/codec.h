/*
 * codec.h — the codecs of compressed collectives: how a slice of n
 * elements is written on the wire and read back.
 *
 * A codec is (kind, block). Encoded layout of n elements (no header; the
 * reader knows the codec and n):
 *
 *   cast codecs  F32 / BF16 / F16:  n elements of that type, nothing else.
 *   block codecs INT8 / INT4 / SIGN1 / TERN2, nb = ceil(n / block) blocks:
 *       float scale[nb];                      one fp32 per block
 *       payload:  INT8   n int8 values q in [-127, 127]
 *                 INT4   ceil(n/2) bytes, element 2i in the low nibble of
 *                        byte i, 2i+1 in the high one, two's complement
 *                        q in [-7, 7]
 *                 SIGN1  ceil(n/8) bytes, element 8i+j in bit j of byte i,
 *                        1 = negative
 *                 TERN2  ceil(n/4) bytes, element 4i+j in bits 2j, 2j+1
 *                        of byte i, a two's complement 2-bit q:
 *                        00 = 0, 01 = +1, 11 = -1 (10 is never written)
 *   top-k codec TOPK (Deep Gradient Compression), nb = ceil(n / block)
 *   blocks, block <= 65536; block b of len_b elements keeps
 *   k_b = min(k, len_b) elements, K = sum of k_b:
 *       float    value[K];     the kept elements' x, exactly (fp32)
 *       uint16_t index[K];     each one's index inside its block
 *   block b's entries start at entry b * min(k, block) (only the last
 *   block can be shorter), in increasing index order. 48 k / block bits
 *   per element (0.1% density at block 1024: k = 2, 0.094 bits).
 *   zinc_codec_bytes() rounds the total up to a multiple of 16 bytes so
 *   that consecutive slices stay aligned; the padding is zero.
 *
 * Quantization (INT8 / INT4, qmax = 127 / 7), per block of values x:
 *   m = max |x| over the block (exact: order does not matter);
 *   scale = m / qmax;  q = round-to-nearest-even(x * (qmax / m)), clamped;
 *   decoded value = q * scale.
 * Every step is one fp32 operation (kernels/codec_math.h spells them out);
 * when m < 2^-64, x and m are first multiplied by 2^64 (exact) so that
 * qmax / m stays finite for subnormal blocks.
 * The block's largest magnitude maps to ±qmax exactly (no 128/127 clip).
 * m == 0 gives scale 0 and q 0. A block holding an inf or NaN stores a
 * NaN scale, so the whole block decodes to NaN: overflow detection
 * (the fp16 loss scaler, the inf check) still sees it after compression.
 * SIGN1: scale = mean |x| over the block (summed in fp32 in 8 lanes,
 * element k of the block into lane k % 8, the lanes combined in the fixed
 * order of kernels/codec_math.h), decoded value = ±scale by the sign bit
 * (-0.0 counts as negative).
 * TERN2 (TernGrad, Wen et al. 2017), stochastic and unbiased: scale s =
 * max |x| over the block (TernGrad's scaler taken per block instead of
 * the paper's per layer, and without its gradient clipping at c sigma);
 * element i becomes q = sign(x) * b, b = 1 with probability |x| / s, so
 * E[q s] = x (up to 2^-24 s, the resolution of the draw). The draw is a
 * counter-based hash of (seed, i), i the element's index in the slice,
 * so the bytes are a pure function of (src, n, block, seed): the same on
 * every run, thread split and backend (codec_math.h spells it out).
 * Decoded value = q * s. Its error is bounded only by s per element.
 * The encoder's `seed` argument feeds it; the other codecs ignore it.
 *
 * Error feedback (LoCo-style, zeropp_loco_param): `ef` is the residual
 * of the previous encoding of the same slice, itself stored as an INT8
 * block codec of the same block size (zinc_codec_bytes({INT8, block}, n)
 * bytes: 1 + 4/block bytes per element). Encoding with ef:
 *   x   = src + deQ(ef)                 (fp32)
 *   q   = Q(x)                          (what goes on the wire)
 *   err = x - deQ(q)
 *   ef  = INT8(beta * deQ(ef) + (1 - beta) * err)     (written back)
 * beta = 0 is classic error feedback. A zero-filled ef buffer is a zero
 * residual (reset = fill with zeros). A block whose x or new residual is
 * not finite writes a zero residual block, so that an overflowing step
 * (which the loss scaler skips) does not poison the following ones.
 * Error feedback needs a block codec and beta in [0, 1].
 *
 * Top-k selection (TOPK), per block of x = src (+ the residual): the k_b
 * elements of largest |x|, compared as the integer bits(x) & 0x7fffffff
 * (so a NaN counts largest, an inf next), ties taken lowest index first.
 * The threshold T = the k_b-th largest key (a radix select: four counting
 * passes over the block); kept: every key > T, then the lowest-index keys
 * == T until k_b are kept. Decoded: the kept values at their indices, 0
 * elsewhere (decode-accumulate adds the kept values only).
 * TOPK's error feedback (DGC's residual accumulation) keeps `ef` as n fp32
 * values (4 n bytes, not an INT8 block): x = src + ef; the kept elements
 * go on the wire; ef = x with the kept elements set to 0 (so sent +
 * residual == x exactly, in fp32). A block holding an inf or NaN in x
 * writes a zero residual block (as above). ef_beta must be 0.
 *
 * Every backend (scalar, AVX2, AVX-512, CUDA) gives the same bytes and the
 * same decoded values, bit for bit: the per-element math lives once in the
 * ZINC_HD functions of kernels/codec_math.h, in kernels/zinc_math.h's
 * style. Encode and decode are zinc_cpu_codec_encode / _decode
 * (kernels/cpu_kernels.h), zinc_cuda_codec_encode / _decode
 * (kernels/kernels.h) and the devices' encode / decode ops.
 */
#ifndef ZINC_CODEC_H
#define ZINC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ZINC_CODEC_NONE = 0, /* not compressed: the collective runs as before */
  ZINC_CODEC_F32,
  ZINC_CODEC_BF16,
  ZINC_CODEC_F16,
  ZINC_CODEC_INT8,
  ZINC_CODEC_INT4,
  ZINC_CODEC_SIGN1,
  ZINC_CODEC_TERN2, /* TernGrad: stochastic ternary, "terngrad" */
  ZINC_CODEC_TOPK,  /* top-k (value, index) pairs per block: DGC, "topk" */
  ZINC_CODEC_NKINDS
} zinc_codec_kind;

typedef struct {
  int kind;  /* zinc_codec_kind                                  */
  int block; /* elements per scale (block codecs) or per top-k
                selection (TOPK); 0 for casts                      */
  int k;     /* TOPK: elements kept per block (1..block); else 0  */
} zinc_codec;

/* Encoded bytes of n elements, a multiple of 16; 0 for NONE. */
size_t zinc_codec_bytes(zinc_codec c, int64_t n);
/* Bits per element on the wire for large n (scales included). */
double zinc_codec_bits(zinc_codec c);
/* "none" "fp32" "bf16" "fp16" "int8" "int4" "sign1" "terngrad" "topk" */
const char *zinc_codec_name(zinc_codec c);
/* 1 for INT8, INT4, SIGN1, TERN2 (a scale per block and a payload; not TOPK). */
int zinc_codec_is_block(zinc_codec c);
/* TOPK: elements kept per block of `block` for a density in (0, 1]:
 * max(1, ceil(density * block)), at most block. */
int zinc_codec_topk_k(double density, int block);
/* TOPK: the kept entries of n elements (K above). */
int64_t zinc_codec_topk_entries(zinc_codec c, int64_t n);
/* Bytes of the error-feedback residual of n elements for codec c: fp32
 * (TOPK), or an INT8 block codec at c's block. */
size_t zinc_codec_ef_bytes(zinc_codec c, int64_t n);
/* The worst-case absolute error of one decoded element of a block whose
 * largest magnitude is m (INT8/INT4: m / (2 qmax) plus the fp32 roundings
 * of the quantizer and the scale, m 2^-21 + (qmax + 1) 2^-149; casts: half
 * an ulp of m plus half the smallest subnormal step, INFINITY for fp16 at
 * m >= 65520; SIGN1: no bound, returns INFINITY; TERN2: no deterministic
 * bound below m itself, |decoded - x| <= m, returns m: TernGrad is
 * unbiased instead, E[decoded] = x); TOPK: no bound, returns INFINITY). */
double zinc_codec_error_bound(zinc_codec c, double m);

/* The argument checks every backend's encode (encoding 1) and decode run
 * first: codec kind (not NONE) and block (> 0 for block codecs), dtype,
 * n >= 0, buffers not NULL when n > 0, error feedback only with a block
 * codec and beta in [0, 1] or TOPK and beta 0, TOPK's k in [1, block]
 * and block <= 65536, accumulate only into f32. ZINC_ERR_INVALID
 * naming `who` and the bad argument. */
zinc_status zinc_codec_check(const char *who, int encoding, zinc_codec c, void *dst,
                             const void *src, int dtype, int64_t n, const void *ef,
                             float ef_beta, int accumulate);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_CODEC_H */
