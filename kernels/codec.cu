/*
 * codec.cu — the codecs of kernels/codec.h on the GPU, on the same
 * codec_math.h functions as the CPU paths, so the bytes and the decoded
 * values are the CPU's bit for bit (nvcc --fmad=false; rintf is
 * round-to-nearest-even on the device as on the host).
 *
 * encode, block % 32 == 0 (block 256, the usual case): one warp per codec
 * block. The lanes read 32 consecutive elements at a time (coalesced);
 * the max of |x|'s bits is a shuffle reduction (exact in any order);
 * SIGN1's 8 sum lanes keep codec_math.h's order: chunk by chunk, thread
 * j < 8 adds the |x| of elements j, j+8, j+16, j+24 of the chunk in turn
 * (shuffled down to it), so lane j sees its elements in block order, and
 * every thread combines the 8 lanes with zinc_codec_sign1_sum; INT4 bytes
 * are an even lane's nibble and its neighbour's, TERN2 bytes lane 4k's
 * bit pair and its three neighbours' (each lane draws its own element's
 * hash, codec_math.h's zinc_codec_q), SIGN1 bytes a ballot. The
 * per-element arithmetic is codec_math.h's (zinc_codec_x,
 * zinc_codec_quantize, zinc_codec_ef_elem, ...).
 * encode, other blocks: one thread per group of blocks
 * (zinc_codec_group_blocks: the fewest whole blocks that end on a payload
 * byte) running zinc_codec_encode_block, the reference itself; each
 * thread reads its blocks alone (uncoalesced), fine for the small blocks
 * this takes.
 * TOPK: one thread per codec block runs codec_math.h's
 * zinc_codec_topk_encode_block / _decode_block, the reference itself (six
 * passes over the block, a 256-entry histogram in local memory,
 * uncoalesced: correctness before speed); decode
 * zeroes dst first unless it accumulates.
 * decode: one thread per element (grid-stride), coalesced. Cast codecs are
 * the cast and accumulate kernels of elementwise.cu, or a copy when the
 * dtypes are equal (the CPU's cast copies the bits then, signalling NaNs
 * included). The padding is zeroed by zinc_cuda_fill_zero.
 */
#include "kernels/codec_math.h"
#include "kernels/kernels.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t items) { return zinc_cuda_grid_for(items, kThreads); }

__device__ __forceinline__ int64_t first_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

__global__ void encode_kernel(int kind, int64_t block, int64_t group, int64_t nb, float *scales,
                              uint8_t *payload, const void *src, int sdt, int64_t n,
                              float *ef_scales, uint8_t *ef_q, float beta, float omb,
                              uint64_t seed) {
  int64_t groups = (nb + group - 1) / group;
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    int64_t b1 = (g + 1) * group < nb ? (g + 1) * group : nb;
    for (int64_t b = g * group; b < b1; b++)
      zinc_codec_encode_block(kind, block, scales, payload, src, sdt, n, b, ef_scales, ef_q,
                              beta, omb, seed);
  }
}

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    uint32_t w = __shfl_xor_sync(kFull, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/* One warp per block of a block codec with block % 32 == 0 (see the top). */
__global__ void encode_warp_kernel(int kind, int64_t block, int64_t nb, float *scales,
                                   uint8_t *payload, const void *src, int sdt, int64_t n,
                                   float *ef_scales, uint8_t *ef_q, float beta, float omb,
                                   uint64_t seed) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = first_index() >> 5, nwarps = grid_stride() >> 5;
  for (int64_t b = warp; b < nb; b += nwarps) {
    const int64_t lo = b * block, hi = n - lo < block ? n : lo + block;
    const float old_scale = ef_q ? ef_scales[b] : 0.0f;
    /* statistics */
    uint32_t mbits = 0;
    float lane_sum = 0.0f; /* SIGN1 lane `lane` (lanes 0..7) */
    for (int64_t base = lo; base < hi; base += 32) {
      const int64_t i = base + lane;
      float a = 0.0f;
      if (i < hi) {
        float x = zinc_codec_x(src, sdt, old_scale, ef_q, i);
        uint32_t ab = zinc_codec_abs_bits(x);
        mbits = ab > mbits ? ab : mbits;
        a = fabsf(x);
      }
      if (kind == ZINC_CODEC_SIGN1) { /* + 0.0f past hi leaves a lane's sum as it is */
        float a8 = __shfl_down_sync(kFull, a, 8), a16 = __shfl_down_sync(kFull, a, 16);
        float a24 = __shfl_down_sync(kFull, a, 24);
        lane_sum = lane_sum + a;
        lane_sum = lane_sum + a8;
        lane_sum = lane_sum + a16;
        lane_sum = lane_sum + a24;
      }
    }
    mbits = warp_max(mbits);
    float lanes[ZINC_CODEC_SIGN1_LANES];
    for (int j = 0; j < ZINC_CODEC_SIGN1_LANES; j++)
      lanes[j] = __shfl_sync(kFull, lane_sum, j);
    zinc_codec_quant p;
    const float scale = zinc_codec_block_scale(kind, mbits, lanes, hi - lo, &p);
    /* payload */
    for (int64_t base = lo; base < hi; base += 32) {
      const int64_t i = base + lane;
      const bool valid = i < hi;
      float x = valid ? zinc_codec_x(src, sdt, old_scale, ef_q, i) : 0.0f;
      if (kind == ZINC_CODEC_SIGN1) {
        unsigned bits = __ballot_sync(kFull, valid && (zinc_f32_bits(x) >> 31));
        if (lane < 4 && base + 8 * lane < hi)
          payload[base / 8 + lane] = (uint8_t)(bits >> (8 * lane));
        continue;
      }
      int q = valid ? (int)zinc_codec_q(kind, &p, x, seed, i) : 0;
      if (kind == ZINC_CODEC_TERN2) {
        int t1 = __shfl_down_sync(kFull, q & 3, 1), t2 = __shfl_down_sync(kFull, q & 3, 2);
        int t3 = __shfl_down_sync(kFull, q & 3, 3);
        if (valid && !(lane & 3))
          payload[i / 4] = (uint8_t)((q & 3) | (t1 << 2) | (t2 << 4) | (t3 << 6));
      } else if (kind == ZINC_CODEC_INT8) {
        if (valid)
          payload[i] = (uint8_t)(int8_t)q;
      } else {
        int hi_nib = __shfl_down_sync(kFull, q & 0xf, 1);
        if (valid && !(lane & 1))
          payload[i / 2] = (uint8_t)((q & 0xf) | (hi_nib << 4));
      }
    }
    if (ef_q) {
      uint32_t rbits = 0;
      for (int64_t base = lo; base < hi; base += 32) {
        const int64_t i = base + lane;
        if (i < hi) {
          uint32_t ab = zinc_codec_abs_bits(
              zinc_codec_ef_elem(kind, &p, scale, src, sdt, ef_q, old_scale, i, beta, omb, seed));
          rbits = ab > rbits ? ab : rbits;
        }
      }
      rbits = warp_max(rbits);
      const zinc_codec_quant rp = zinc_codec_ef_quant(mbits, rbits);
      for (int64_t base = lo; base < hi; base += 32) {
        const int64_t i = base + lane;
        if (i < hi) {
          float q = 0.0f;
          if (!rp.zero)
            q = zinc_codec_quantize(&rp, zinc_codec_ef_elem(kind, &p, scale, src, sdt, ef_q,
                                                            old_scale, i, beta, omb, seed));
          ef_q[i] = (uint8_t)(int8_t)(int)q;
        }
      }
      __syncwarp(); /* every lane has read the old scale */
      if (lane == 0)
        ef_scales[b] = rp.scale;
    }
    if (lane == 0)
      scales[b] = scale;
  }
}

__global__ void topk_encode_kernel(int64_t block, int k, int64_t nb, float *values,
                                   uint16_t *index, const void *src, int sdt, int64_t n,
                                   float *res) {
  for (int64_t b = first_index(); b < nb; b += grid_stride())
    zinc_codec_topk_encode_block(block, k, values, index, src, sdt, n, b, res);
}

__global__ void topk_decode_kernel(int64_t block, int k, int64_t nb, void *dst, int ddt,
                                   const float *values, const uint16_t *index, int64_t n,
                                   int accumulate) {
  for (int64_t b = first_index(); b < nb; b += grid_stride())
    zinc_codec_topk_decode_block(block, k, dst, ddt, values, index, n, b, accumulate);
}

__global__ void decode_kernel(int kind, int64_t block, void *dst, int ddt, const float *scales,
                              const uint8_t *payload, int64_t n, int accumulate) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float v = zinc_codec_decode_elem(kind, block, scales, payload, i);
    if (accumulate)
      ((float *)dst)[i] += v;
    else
      zinc_store_from_f32(dst, i, ddt, v);
  }
}

bool dtype_ok(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16;
}

bool codec_ok(zinc_codec c) {
  if (c.kind == ZINC_CODEC_TOPK)
    return c.block > 0 && c.block <= 65536 && c.k >= 1 && c.k <= c.block;
  return c.kind > ZINC_CODEC_NONE && c.kind < ZINC_CODEC_NKINDS &&
         (!zinc_codec_is_block(c) || c.block > 0);
}

int cast_dtype(int kind) {
  return kind == ZINC_CODEC_F32 ? ZINC_F32 : kind == ZINC_CODEC_BF16 ? ZINC_BF16 : ZINC_F16;
}

} // namespace

extern "C" cudaError_t zinc_cuda_codec_encode(zinc_codec c, void *dst, const void *src,
                                              int src_dtype, int64_t n, void *ef,
                                              float ef_beta, uint64_t seed,
                                              cudaStream_t stream) {
  const int topk = c.kind == ZINC_CODEC_TOPK;
  if (n < 0 || !codec_ok(c) || !dtype_ok(src_dtype) ||
      (ef && !zinc_codec_is_block(c) && !topk) ||
      (ef && !(ef_beta >= 0.0f && ef_beta <= 1.0f)) || (ef && topk && ef_beta != 0.0f))
    return cudaErrorInvalidValue;
  if (n == 0)
    return cudaSuccess;
  if (!dst || !src)
    return cudaErrorInvalidValue;
  const size_t total = zinc_codec_bytes(c, n);
  cudaError_t err;
  if (topk) {
    const int64_t entries = zinc_codec_topk_entries(c, n), nb = (n + c.block - 1) / c.block;
    topk_encode_kernel<<<grid_for(nb), kThreads, 0, stream>>>(
        c.block, c.k, nb, (float *)dst, (uint16_t *)((char *)dst + 4 * entries), src, src_dtype,
        n, (float *)ef);
    err = cudaGetLastError();
    size_t used = (size_t)(6 * entries), etotal = zinc_codec_ef_bytes(c, n);
    if (err == cudaSuccess && total > used)
      err = zinc_cuda_fill_zero((char *)dst + used, total - used, stream);
    if (err == cudaSuccess && ef && etotal > (size_t)(4 * n))
      err = zinc_cuda_fill_zero((char *)ef + 4 * n, etotal - (size_t)(4 * n), stream);
    return err;
  }
  if (!zinc_codec_is_block(c)) {
    int cdt = cast_dtype(c.kind);
    size_t used = (size_t)n * (cdt == ZINC_F32 ? 4 : 2);
    /* the same dtype copies the bits (NaN payloads too), as the CPU's cast */
    err = cdt == src_dtype ? cudaMemcpyAsync(dst, src, used, cudaMemcpyDefault, stream)
                           : zinc_cuda_cast(dst, cdt, src, src_dtype, n, stream);
    if (err == cudaSuccess && total > used)
      err = zinc_cuda_fill_zero((char *)dst + used, total - used, stream);
    return err;
  }
  const int64_t off = zinc_codec_payload_offset(c.block, n);
  const int64_t nb = off / 4, group = zinc_codec_group_blocks(c.block);
  uint8_t *payload = (uint8_t *)dst + off;
  float *ef_scales = (float *)ef;
  uint8_t *ef_q = ef ? (uint8_t *)ef + off : nullptr;
  if (c.block % 32 == 0)
    encode_warp_kernel<<<grid_for(nb * 32), kThreads, 0, stream>>>(
        c.kind, c.block, nb, (float *)dst, payload, src, src_dtype, n, ef_scales, ef_q,
        ef_beta, 1.0f - ef_beta, seed);
  else
    encode_kernel<<<grid_for((nb + group - 1) / group), kThreads, 0, stream>>>(
        c.kind, c.block, group, nb, (float *)dst, payload, src, src_dtype, n, ef_scales, ef_q,
        ef_beta, 1.0f - ef_beta, seed);
  err = cudaGetLastError();
  size_t used = (size_t)(off + zinc_codec_payload_bytes(c.kind, n));
  if (err == cudaSuccess && total > used)
    err = zinc_cuda_fill_zero((char *)dst + used, total - used, stream);
  if (err == cudaSuccess && ef) {
    size_t etotal = zinc_codec_bytes(zinc_codec{ZINC_CODEC_INT8, c.block, 0}, n);
    size_t eused = (size_t)(off + n);
    if (etotal > eused)
      err = zinc_cuda_fill_zero((char *)ef + eused, etotal - eused, stream);
  }
  return err;
}

extern "C" cudaError_t zinc_cuda_codec_decode(zinc_codec c, void *dst, int dst_dtype,
                                              const void *src, int64_t n, int accumulate,
                                              cudaStream_t stream) {
  if (n < 0 || !codec_ok(c) || !dtype_ok(dst_dtype) || (accumulate && dst_dtype != ZINC_F32))
    return cudaErrorInvalidValue;
  if (n == 0)
    return cudaSuccess;
  if (!dst || !src)
    return cudaErrorInvalidValue;
  if (c.kind == ZINC_CODEC_TOPK) {
    const int64_t entries = zinc_codec_topk_entries(c, n), nb = (n + c.block - 1) / c.block;
    if (!accumulate) {
      cudaError_t err = zinc_cuda_fill_zero(dst, (size_t)n * (dst_dtype == ZINC_F32 ? 4 : 2),
                                            stream);
      if (err != cudaSuccess)
        return err;
    }
    topk_decode_kernel<<<grid_for(nb), kThreads, 0, stream>>>(
        c.block, c.k, nb, dst, dst_dtype, (const float *)src,
        (const uint16_t *)((const char *)src + 4 * entries), n, accumulate);
    return cudaGetLastError();
  }
  if (!zinc_codec_is_block(c)) {
    int cdt = cast_dtype(c.kind);
    if (accumulate)
      return zinc_cuda_accumulate_f32((float *)dst, src, cdt, n, 0, stream);
    if (cdt == dst_dtype)
      return cudaMemcpyAsync(dst, src, (size_t)n * (cdt == ZINC_F32 ? 4 : 2), cudaMemcpyDefault,
                             stream);
    return zinc_cuda_cast(dst, dst_dtype, src, cdt, n, stream);
  }
  const int64_t off = zinc_codec_payload_offset(c.block, n);
  decode_kernel<<<grid_for(n), kThreads, 0, stream>>>(c.kind, c.block, dst, dst_dtype,
                                                       (const float *)src,
                                                       (const uint8_t *)src + off, n,
                                                       accumulate);
  return cudaGetLastError();
}
