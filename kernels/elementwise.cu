/*
 * elementwise.cu — the small elementwise kernels: dtype casts, fp32
 * accumulation, scaling in place, gradient unscale with inf/NaN detection,
 * zero-fill.
 *
 * All are grid-stride loops, one element per thread per step, so that every
 * access of a warp is contiguous whatever the alignment; they move little
 * data next to Adam and are bound by memory bandwidth either way. The
 * per-element arithmetic is zinc_load_as_f32 / zinc_store_from_f32 from
 * kernels/zinc_math.h, as on the CPU. Zero-fill writes 16 bytes per thread
 * over the aligned body of the range.
 */
#include "kernels/kernels.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t items) { return zinc_cuda_grid_for(items, kThreads); }

bool dtype_ok(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16;
}

__device__ __forceinline__ int64_t first_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

__global__ void cast_kernel(void *dst, int dst_dtype, const void *src, int src_dtype,
                            int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    zinc_store_from_f32(dst, i, dst_dtype, zinc_load_as_f32(src, i, src_dtype));
}

__global__ void accumulate_kernel(float *dst, const void *src, int src_dtype, int64_t n,
                                  int overwrite) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float x = zinc_load_as_f32(src, i, src_dtype);
    dst[i] = overwrite ? x : dst[i] + x;
  }
}

__global__ void scale_kernel(void *x, int dtype, int64_t n, float factor) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    zinc_store_from_f32(x, i, dtype, zinc_load_as_f32(x, i, dtype) * factor);
}

__global__ void unscale_kernel(void *data, int dtype, int64_t n, float scale, int *nonfinite) {
  int bad = 0;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float x = zinc_load_as_f32(data, i, dtype);
    zinc_store_from_f32(data, i, dtype, x * scale);
    float stored = zinc_load_as_f32(data, i, dtype); /* as rounded to dtype */
    bad |= !isfinite(x) || !isfinite(stored);
  }
  if (bad)
    *nonfinite = 1; /* every writer writes 1: no race on the value */
}

/* Bytes [0, head) and [body_end, bytes) one per thread; the body in uint4. */
__global__ void zero_kernel(unsigned char *dst, size_t head, size_t nvec, size_t tail) {
  int64_t t = first_index();
  uint4 *body = reinterpret_cast<uint4 *>(dst + head);
  for (int64_t i = t; i < (int64_t)nvec; i += grid_stride())
    body[i] = make_uint4(0u, 0u, 0u, 0u);
  if (t < (int64_t)head)
    dst[t] = 0;
  if (t < (int64_t)tail)
    dst[head + nvec * 16 + t] = 0;
}

} // namespace

extern "C" cudaError_t zinc_cuda_cast(void *dst, int dst_dtype, const void *src, int src_dtype,
                                      int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (!dst || !src || !dtype_ok(dst_dtype) || !dtype_ok(src_dtype))
    return cudaErrorInvalidValue;
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, dst_dtype, src, src_dtype, n);
  return cudaGetLastError();
}

extern "C" cudaError_t zinc_cuda_accumulate_f32(float *dst, const void *src, int src_dtype,
                                                int64_t n, int overwrite, cudaStream_t stream) {
  if (n <= 0)
    return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (!dst || !src || !dtype_ok(src_dtype))
    return cudaErrorInvalidValue;
  accumulate_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, src_dtype, n, overwrite);
  return cudaGetLastError();
}

extern "C" cudaError_t zinc_cuda_scale(void *x, int dtype, int64_t n, float factor,
                                       cudaStream_t stream) {
  if (n <= 0)
    return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (!x || !dtype_ok(dtype))
    return cudaErrorInvalidValue;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dtype, n, factor);
  return cudaGetLastError();
}

extern "C" cudaError_t zinc_cuda_unscale(void *data, int dtype, int64_t n, float scale,
                                         int *nonfinite, cudaStream_t stream) {
  if (n <= 0)
    return n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  if (!data || !nonfinite || !dtype_ok(dtype))
    return cudaErrorInvalidValue;
  unscale_kernel<<<grid_for(n), kThreads, 0, stream>>>(data, dtype, n, scale, nonfinite);
  return cudaGetLastError();
}

extern "C" cudaError_t zinc_cuda_fill_zero(void *dst, size_t bytes, cudaStream_t stream) {
  if (bytes == 0)
    return cudaSuccess;
  if (!dst)
    return cudaErrorInvalidValue;
  size_t misalign = reinterpret_cast<uintptr_t>(dst) % 16;
  size_t head = misalign ? 16 - misalign : 0;
  if (head > bytes)
    head = bytes;
  size_t nvec = (bytes - head) / 16;
  size_t tail = bytes - head - nvec * 16;
  int64_t items = (int64_t)(nvec > 16 ? nvec : 16);
  zero_kernel<<<grid_for(items), kThreads, 0, stream>>>(static_cast<unsigned char *>(dst), head,
                                                        nvec, tail);
  return cudaGetLastError();
}
