/*
 * adam.cu — the multi-tensor fused Adam/AdamW kernel and its launcher.
 *
 * One launch updates up to ZINC_CUDA_ADAM_SEGS_PER_LAUNCH segments (fp32
 * master, exp_avg, exp_avg_sq; a gradient in any zinc dtype; optionally the
 * 16-bit or fp32 compute copy of the parameter), described to the kernel in
 * its parameter block (__grid_constant__: read in place, never copied).
 * Each segment is cut into tiles of kTile elements; thread block b finds its
 * segment by binary search over the tiles' first indices, so one grid covers
 * segments of any sizes without a device-side table or a host-to-device copy.
 *
 * Traffic per element: one read of p, g, m, v and one write of p, m, v and
 * the compute copy — nothing else. Inside a tile every thread first loads
 * all its kUnroll groups of kVec elements (so that many loads are in flight),
 * then computes and stores them; every access of the vector path is 16
 * bytes wide (two per group for an fp32 array, one for a 16-bit one).
 * Segments whose arrays are not all 16-byte aligned take a scalar path with
 * coalesced single-element accesses.
 *
 * The arithmetic is zinc_adam_elem (kernels/zinc_math.h) element by element;
 * with --fmad=false nothing else is fused, so the result is bitwise the CPU's.
 */
#include "kernels/kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;    /* elements per vector group: 16-byte accesses */
constexpr int kUnroll = 2; /* vector groups per thread per tile           */
constexpr int64_t kTile = (int64_t)kThreads * kVec * kUnroll;

struct adam_seg_desc {
  float *master;       /* (n) f32 */
  float *exp_avg;      /* (n) f32 */
  float *exp_avg_sq;   /* (n) f32 */
  const void *grad;    /* (n) grad_dtype */
  void *param_out;     /* (n) param_dtype, or NULL */
  int64_t n;
  int64_t tile0;       /* first tile of this segment in the launch's grid */
  int grad_dtype;
  int param_dtype;
  int decay;
  int vec;             /* 1: every array 16-byte aligned: vector path */
};

struct adam_launch {
  zinc_opt_coef coef;
  int nseg;
  adam_seg_desc seg[ZINC_CUDA_ADAM_SEGS_PER_LAUNCH];
};

/* ------------------------------------------------ 8-element vector access */

__device__ __forceinline__ float half_to_f32(uint32_t h, int dtype) {
  return dtype == ZINC_BF16 ? zinc_bf16_to_f32((uint16_t)h) : zinc_f16_to_f32((uint16_t)h);
}

__device__ __forceinline__ uint32_t f32_to_half(float f, int dtype) {
  return dtype == ZINC_BF16 ? zinc_f32_to_bf16(f) : zinc_f32_to_f16(f);
}

/* Eight fp32 values: two 16-byte loads. */
__device__ __forceinline__ void load_f32x8(const float *base, int64_t i, float out[kVec]) {
  const float4 *p = reinterpret_cast<const float4 *>(base + i);
  float4 a = p[0], b = p[1];
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
  out[3] = a.w;
  out[4] = b.x;
  out[5] = b.y;
  out[6] = b.z;
  out[7] = b.w;
}

__device__ __forceinline__ void store_f32x8(float *base, int64_t i, const float in[kVec]) {
  float4 *p = reinterpret_cast<float4 *>(base + i);
  p[0] = make_float4(in[0], in[1], in[2], in[3]);
  p[1] = make_float4(in[4], in[5], in[6], in[7]);
}

/* Eight elements of any dtype: 16-byte accesses (two for fp32, one for a
 * 16-bit type). Element i sits in the low half of a 32-bit word (little
 * endian). */
__device__ __forceinline__ void load_any_x8(const void *base, int dtype, int64_t i,
                                            float out[kVec]) {
  if (dtype == ZINC_F32) {
    load_f32x8(static_cast<const float *>(base), i, out);
    return;
  }
  uint4 v = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(base) + i);
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    out[2 * k] = half_to_f32(w[k] & 0xffffu, dtype);
    out[2 * k + 1] = half_to_f32(w[k] >> 16, dtype);
  }
}

__device__ __forceinline__ void store_any_x8(void *base, int dtype, int64_t i,
                                             const float in[kVec]) {
  if (dtype == ZINC_F32) {
    store_f32x8(static_cast<float *>(base), i, in);
    return;
  }
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; k++)
    w[k] = f32_to_half(in[2 * k], dtype) | (f32_to_half(in[2 * k + 1], dtype) << 16);
  *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(base) + i) =
      make_uint4(w[0], w[1], w[2], w[3]);
}

/* ------------------------------------------------------------- the tiles */

__device__ __forceinline__ void adam_one(const zinc_opt_coef &c, const adam_seg_desc &s,
                                         int64_t i) {
  float p = s.master[i], m = s.exp_avg[i], v = s.exp_avg_sq[i];
  float g = zinc_load_as_f32(s.grad, i, s.grad_dtype);
  zinc_adam_elem(&c, s.decay, &p, &m, &v, g);
  s.master[i] = p;
  s.exp_avg[i] = m;
  s.exp_avg_sq[i] = v;
  if (s.param_out)
    zinc_store_from_f32(s.param_out, i, s.param_dtype, p);
}

/* Aligned segment: thread t owns elements base + (u*kThreads + t)*kVec + k;
 * kVec = 8 keeps every element group 16-byte aligned for each dtype. */
__device__ __forceinline__ void adam_tile_vec(const zinc_opt_coef &c, const adam_seg_desc &s,
                                              int64_t base) {
  float p[kUnroll][kVec], m[kUnroll][kVec], v[kUnroll][kVec], g[kUnroll][kVec];
  int64_t first[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; u++) {
    first[u] = base + ((int64_t)u * kThreads + threadIdx.x) * kVec;
    if (first[u] + kVec <= s.n) {
      load_f32x8(s.master, first[u], p[u]);
      load_f32x8(s.exp_avg, first[u], m[u]);
      load_f32x8(s.exp_avg_sq, first[u], v[u]);
      load_any_x8(s.grad, s.grad_dtype, first[u], g[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; u++) {
    if (first[u] + kVec <= s.n) {
#pragma unroll
      for (int k = 0; k < kVec; k++)
        zinc_adam_elem(&c, s.decay, &p[u][k], &m[u][k], &v[u][k], g[u][k]);
      store_f32x8(s.master, first[u], p[u]);
      store_f32x8(s.exp_avg, first[u], m[u]);
      store_f32x8(s.exp_avg_sq, first[u], v[u]);
      if (s.param_out)
        store_any_x8(s.param_out, s.param_dtype, first[u], p[u]);
    } else {
      for (int64_t i = first[u]; i < s.n; i++) /* the last (< kVec) elements */
        adam_one(c, s, i);
    }
  }
}

/* Unaligned segment: thread t owns elements base + j*kThreads + t, so that
 * each access of a warp is contiguous. */
__device__ __forceinline__ void adam_tile_scalar(const zinc_opt_coef &c,
                                                 const adam_seg_desc &s, int64_t base) {
#pragma unroll 4
  for (int j = 0; j < kVec * kUnroll; j++) {
    int64_t i = base + (int64_t)j * kThreads + threadIdx.x;
    if (i < s.n)
      adam_one(c, s, i);
  }
}

__global__ void __launch_bounds__(kThreads)
    adam_kernel(const __grid_constant__ adam_launch launch) {
  int lo = 0, hi = launch.nseg - 1;
  while (lo < hi) { /* the last segment whose first tile is <= this block */
    int mid = (lo + hi + 1) / 2;
    if (launch.seg[mid].tile0 <= (int64_t)blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const adam_seg_desc &s = launch.seg[lo];
  const zinc_opt_coef c = launch.coef;
  int64_t base = ((int64_t)blockIdx.x - s.tile0) * kTile;
  if (s.vec)
    adam_tile_vec(c, s, base);
  else
    adam_tile_scalar(c, s, base);
}

bool aligned(const void *p, size_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

bool dtype_ok(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16;
}

cudaError_t adam_launch_now(const adam_launch &launch, int64_t tiles, cudaStream_t stream) {
  if (launch.nseg == 0)
    return cudaSuccess;
  if (tiles > INT32_MAX)
    return cudaErrorInvalidValue;
  adam_kernel<<<(unsigned)tiles, kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t zinc_cuda_adam(const zinc_opt_coef *coef, const zinc_opt_seg *segs,
                                      int nseg, cudaStream_t stream) {
  if (!coef || nseg < 0 || (nseg > 0 && !segs))
    return cudaErrorInvalidValue;
  adam_launch launch;
  launch.coef = *coef;
  launch.nseg = 0;
  int64_t tiles = 0;
  for (int i = 0; i < nseg; i++) {
    const zinc_opt_seg *s = &segs[i];
    if (s->n <= 0)
      continue;
    if (!s->master || !s->exp_avg || !s->exp_avg_sq || !s->grad || !dtype_ok(s->grad_dtype) ||
        (s->param_out && !dtype_ok(s->param_dtype)) || s->master_dtype != ZINC_F32 ||
        s->state_dtype != ZINC_F32) /* bf16 slots: zinc_cuda_optim */
      return cudaErrorInvalidValue;
    if (launch.nseg == ZINC_CUDA_ADAM_SEGS_PER_LAUNCH) {
      cudaError_t err = adam_launch_now(launch, tiles, stream);
      if (err != cudaSuccess)
        return err;
      launch.nseg = 0;
      tiles = 0;
    }
    adam_seg_desc &d = launch.seg[launch.nseg++];
    d.master = s->master;
    d.exp_avg = s->exp_avg;
    d.exp_avg_sq = s->exp_avg_sq;
    d.grad = s->grad;
    d.param_out = s->param_out;
    d.n = s->n;
    d.tile0 = tiles;
    d.grad_dtype = s->grad_dtype;
    d.param_dtype = s->param_dtype;
    d.decay = s->decay != 0;
    d.vec = aligned(s->master, 16) && aligned(s->exp_avg, 16) && aligned(s->exp_avg_sq, 16) &&
            aligned(s->grad, 16) && aligned(s->param_out, 16);
    tiles += (s->n + kTile - 1) / kTile;
  }
  return adam_launch_now(launch, tiles, stream);
}
