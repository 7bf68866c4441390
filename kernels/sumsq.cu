/*
 * sumsq.cu — per-chunk sums of squares in double (gradient norm, overflow
 * check), deterministic run to run.
 *
 * Two passes on the caller's stream:
 *  1. sumsq_blocks_kernel: every ZINC_SUMSQ_BLOCK-element block of every
 *     chunk is summed by 16 threads exactly in the canonical order of
 *     kernels/zinc_math.h — lane j adds the squares of elements j, j+16,
 *     j+32, ... in order, then zinc_sumsq_lanes_combine folds the 16 lanes —
 *     so each block sum has the CPU's bits. The kernel also writes the
 *     chunks' first-block offsets, so no host-to-device copy is needed.
 *  2. cub::DeviceSegmentedReduce::Sum adds the block sums of each chunk
 *     (CUB gives each segment to one thread block with a fixed reduction
 *     tree: the same bits on every run on the same GPU model and build).
 *     This is the one place the GPU's order differs from the CPU's, which
 *     adds block sums left to right; both add non-negative terms, so they
 *     differ by at most about 2.2e-16 * (blocks - 1) relative.
 *
 * Workspace layout (device memory, every part 256-byte aligned):
 *   partials   (n)               f64  per-chunk results before the copy out
 *   block_sums (total_blocks)    f64
 *   offsets    (n + 1)           i32  first block of each chunk, then the end
 *   cub_temp   (CUB's size)
 */
#include <cub/device/device_segmented_reduce.cuh>

#include "kernels/kernels.h"

namespace {

constexpr int kLanes = ZINC_SUMSQ_LANES;        /* 16: threads per block sum */
constexpr int kThreads = 256;
constexpr int kGroups = kThreads / kLanes;      /* block sums per CTA */
static_assert(ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH <= kThreads,
              "one thread of CTA 0 writes each chunk's offset");

struct sumsq_chunk_desc {
  const void *data; /* (n) dtype */
  int64_t n;
  int block0;       /* first block of the chunk in the whole list */
  int dtype;
};

struct sumsq_launch {
  int nchunk;       /* chunks in this launch                          */
  int chunk0;       /* index of c[0] in the whole list                */
  int block_end;    /* one past the last block of this launch         */
  int total_chunks; /* >= 0 on the launch holding the last chunk: it
                       writes offsets[total_chunks] = block_end; else -1 */
  sumsq_chunk_desc c[ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH];
};

struct sumsq_layout {
  size_t partials, block_sums, offsets, cub_temp; /* byte offsets */
  size_t cub_bytes, total;
  int total_blocks;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

template <int DT>
__device__ __forceinline__ double lane_sum(const void *data, int64_t start, int len, int lane) {
  double acc = 0.0;
#pragma unroll 8
  for (int i = lane; i < len; i += kLanes) {
    double x = (double)zinc_load_as_f32(data, start + i, DT);
    acc += x * x;
  }
  return acc;
}

__global__ void __launch_bounds__(kThreads)
    sumsq_blocks_kernel(const __grid_constant__ sumsq_launch launch, double *block_sums,
                        int *offsets) {
  __shared__ double lanes[kThreads];
  if (blockIdx.x == 0) {
    if ((int)threadIdx.x < launch.nchunk)
      offsets[launch.chunk0 + threadIdx.x] = launch.c[threadIdx.x].block0;
    if (threadIdx.x == 0 && launch.total_chunks >= 0)
      offsets[launch.total_chunks] = launch.block_end;
  }
  int group = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  int64_t block = (int64_t)launch.c[0].block0 + (int64_t)blockIdx.x * kGroups + group;
  if (block >= launch.block_end)
    return; /* the 16 threads of a group leave together */
  int lo = 0, hi = launch.nchunk - 1;
  while (lo < hi) { /* the last chunk starting at or before this block */
    int mid = (lo + hi + 1) / 2;
    if (launch.c[mid].block0 <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const sumsq_chunk_desc &c = launch.c[lo];
  int64_t start = (block - c.block0) * ZINC_SUMSQ_BLOCK;
  int len = (int)(c.n - start < ZINC_SUMSQ_BLOCK ? c.n - start : ZINC_SUMSQ_BLOCK);
  double acc;
  if (c.dtype == ZINC_F32)
    acc = lane_sum<ZINC_F32>(c.data, start, len, lane);
  else if (c.dtype == ZINC_BF16)
    acc = lane_sum<ZINC_BF16>(c.data, start, len, lane);
  else
    acc = lane_sum<ZINC_F16>(c.data, start, len, lane);
  lanes[threadIdx.x] = acc;
  __syncwarp(0xffffu << (threadIdx.x & 16u));
  if (lane == 0) {
    double l[kLanes];
#pragma unroll
    for (int j = 0; j < kLanes; j++)
      l[j] = lanes[threadIdx.x + j];
    block_sums[block] = zinc_sumsq_lanes_combine(l);
  }
}

int64_t blocks_of(int64_t n) { return (n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK; }

cudaError_t sumsq_plan(const zinc_sumsq_chunk *chunks, int n, sumsq_layout *l) {
  if (n < 0 || (n > 0 && !chunks))
    return cudaErrorInvalidValue;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    if (chunks[i].n < 0 || (chunks[i].n > 0 && !chunks[i].data) ||
        (chunks[i].dtype != ZINC_F32 && chunks[i].dtype != ZINC_BF16 &&
         chunks[i].dtype != ZINC_F16))
      return cudaErrorInvalidValue;
    total += blocks_of(chunks[i].n);
    if (total > INT32_MAX / 2)
      return cudaErrorInvalidValue;
  }
  l->total_blocks = (int)total;
  l->partials = 0;
  l->block_sums = align256((size_t)n * sizeof(double));
  l->offsets = l->block_sums + align256((size_t)total * sizeof(double));
  l->cub_temp = l->offsets + align256((size_t)(n + 1) * sizeof(int));
  l->cub_bytes = 0;
  int *no_offsets = nullptr;
  cudaError_t err = cub::DeviceSegmentedReduce::Sum(nullptr, l->cub_bytes, (const double *)nullptr,
                                                    (double *)nullptr, (int64_t)n, no_offsets,
                                                    no_offsets, (cudaStream_t)0);
  l->total = l->cub_temp + align256(l->cub_bytes);
  return err;
}

} // namespace

extern "C" cudaError_t zinc_cuda_sumsq_workspace(const zinc_sumsq_chunk *chunks, int n,
                                                 size_t *bytes) {
  sumsq_layout l;
  *bytes = 0;
  cudaError_t err = sumsq_plan(chunks, n, &l);
  if (err == cudaSuccess)
    *bytes = l.total;
  return err;
}

extern "C" cudaError_t zinc_cuda_sumsq(const zinc_sumsq_chunk *chunks, int n, void *workspace,
                                       size_t workspace_bytes, double *partials,
                                       cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  sumsq_layout l;
  cudaError_t err = sumsq_plan(chunks, n, &l);
  if (err != cudaSuccess)
    return err;
  if (!workspace || workspace_bytes < l.total || !partials)
    return cudaErrorInvalidValue;
  char *ws = static_cast<char *>(workspace);
  double *dev_partials = reinterpret_cast<double *>(ws + l.partials);
  double *block_sums = reinterpret_cast<double *>(ws + l.block_sums);
  int *offsets = reinterpret_cast<int *>(ws + l.offsets);

  sumsq_launch launch;
  int block = 0;
  for (int first = 0; first < n; first += ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH) {
    int count = n - first < ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH ? n - first
                                                              : ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH;
    int block_begin = block;
    launch.nchunk = count;
    launch.chunk0 = first;
    for (int k = 0; k < count; k++) {
      const zinc_sumsq_chunk *c = &chunks[first + k];
      launch.c[k].data = c->data;
      launch.c[k].n = c->n;
      launch.c[k].block0 = block;
      launch.c[k].dtype = c->dtype;
      block += (int)blocks_of(c->n);
    }
    launch.block_end = block;
    launch.total_chunks = first + count == n ? n : -1;
    int64_t ctas = (block - block_begin + kGroups - 1) / kGroups;
    sumsq_blocks_kernel<<<(unsigned)(ctas > 0 ? ctas : 1), kThreads, 0, stream>>>(
        launch, block_sums, offsets);
    if ((err = cudaGetLastError()) != cudaSuccess)
      return err;
  }
  size_t cub_bytes = l.cub_bytes;
  err = cub::DeviceSegmentedReduce::Sum(ws + l.cub_temp, cub_bytes, (const double *)block_sums,
                                        dev_partials, (int64_t)n, offsets, offsets + 1, stream);
  if (err != cudaSuccess)
    return err;
  return cudaMemcpyAsync(partials, dev_partials, (size_t)n * sizeof(double), cudaMemcpyDefault,
                         stream);
}
