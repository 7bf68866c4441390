/*
 * codec.cu — the codecs of kernels/codec.h on the GPU, on the same
 * codec_math.h functions as the CPU paths, so the bytes and the decoded
 * values are the CPU's bit for bit (nvcc --fmad=false; rintf is
 * round-to-nearest-even on the device as on the host).
 *
 * encode: one thread per group of blocks (zinc_codec_group_blocks: the
 * fewest whole blocks that end on a payload byte), running
 * zinc_codec_encode_block — the reference itself, SIGN1's lanes and the
 * error-feedback passes included, so there is no second order to keep in
 * step. Each thread reads its blocks contiguously (uncoalesced across a
 * warp); a warp-per-block kernel with a shuffle max is the faster layout
 * for large blocks and is left for when a GPU can measure it.
 * decode: one thread per element (grid-stride), coalesced. Cast codecs are
 * the cast and accumulate kernels of elementwise.cu, or a copy when the
 * dtypes are equal (the CPU's cast copies the bits then, signalling NaNs
 * included). The padding is zeroed by zinc_cuda_fill_zero.
 */
#include "kernels/codec_math.h"
#include "kernels/kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536; /* grid-stride beyond this */

unsigned grid_for(int64_t items) {
  int64_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks < 1)
    blocks = 1;
  return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t first_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

__global__ void encode_kernel(int kind, int64_t block, int64_t group, int64_t nb, float *scales,
                              uint8_t *payload, const void *src, int sdt, int64_t n,
                              float *ef_scales, uint8_t *ef_q, float beta, float omb) {
  int64_t groups = (nb + group - 1) / group;
  for (int64_t g = first_index(); g < groups; g += grid_stride()) {
    int64_t b1 = (g + 1) * group < nb ? (g + 1) * group : nb;
    for (int64_t b = g * group; b < b1; b++)
      zinc_codec_encode_block(kind, block, scales, payload, src, sdt, n, b, ef_scales, ef_q,
                              beta, omb);
  }
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
  return c.kind > ZINC_CODEC_NONE && c.kind < ZINC_CODEC_NKINDS &&
         (!zinc_codec_is_block(c) || c.block > 0);
}

int cast_dtype(int kind) {
  return kind == ZINC_CODEC_F32 ? ZINC_F32 : kind == ZINC_CODEC_BF16 ? ZINC_BF16 : ZINC_F16;
}

} // namespace

extern "C" cudaError_t zinc_cuda_codec_encode(zinc_codec c, void *dst, const void *src,
                                              int src_dtype, int64_t n, void *ef,
                                              float ef_beta, cudaStream_t stream) {
  if (n < 0 || !codec_ok(c) || !dtype_ok(src_dtype) || (ef && !zinc_codec_is_block(c)) ||
      (ef && !(ef_beta >= 0.0f && ef_beta <= 1.0f)))
    return cudaErrorInvalidValue;
  if (n == 0)
    return cudaSuccess;
  if (!dst || !src)
    return cudaErrorInvalidValue;
  const size_t total = zinc_codec_bytes(c, n);
  cudaError_t err;
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
  encode_kernel<<<grid_for((nb + group - 1) / group), kThreads, 0, stream>>>(
      c.kind, c.block, group, nb, (float *)dst, payload, src, src_dtype, n, ef_scales, ef_q,
      ef_beta, 1.0f - ef_beta);
  err = cudaGetLastError();
  size_t used = (size_t)(off + zinc_codec_payload_bytes(c.kind, n));
  if (err == cudaSuccess && total > used)
    err = zinc_cuda_fill_zero((char *)dst + used, total - used, stream);
  if (err == cudaSuccess && ef) {
    size_t etotal = zinc_codec_bytes(zinc_codec{ZINC_CODEC_INT8, c.block}, n);
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
