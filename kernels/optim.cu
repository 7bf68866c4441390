/*
 * optim.cu — the multi-tensor kernels of Lion, Adagrad, SGD and Lamb's two
 * passes, and their launchers (Adam has its own vector kernel, adam.cu).
 *
 * One launch covers up to ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH segments with one
 * set of coefficients, described in the parameter block
 * (__grid_constant__); thread block b finds its segment by binary search
 * over the segments' first tiles, as in adam.cu.
 *
 * The elementwise passes (Lion, Adagrad, SGD, Lamb APPLY) cut a segment into
 * tiles of kThreads * kPerThread elements; thread t of a tile takes the
 * elements t, t + kThreads, ... so that every access of a warp is
 * contiguous. Only plain single-element accesses are used: no vector path
 * yet (adam.cu's 16-byte path is the model when one is needed).
 *
 * Lamb UPDATE: one thread block per ZINC_SUMSQ_BLOCK block of a segment
 * (the tile is the sum-of-squares block). The threads move the moments and
 * leave the block's update u in shared memory; then 16 threads, lane j
 * each, add in double the squares of elements j, j + 16, ... of the weights
 * and of u, in element order, and one thread combines the lanes with
 * zinc_sumsq_lanes_combine: each block sum is zinc_sumsq_block_ref's value.
 * A second kernel adds each segment's block sums in block order from 0.0,
 * one thread per segment, so the norms are bitwise the CPU's
 * (zinc_sumsq_chunk_ref), unlike zinc_cuda_sumsq's CUB order. That sum is
 * serial (one dependent addition per 4096 elements of a segment): small
 * beside the pass itself, but not free for a segment of billions.
 *
 * Segments whose master or state slots are stored in bf16 (master_dtype,
 * state_dtype) take zinc_math.h's *_elem_st functions element by element,
 * Adam included (adam.cu's vector kernel is for fp32 storage); the draws of
 * stochastic rounding come from the key computed once per launch and each
 * element's global index, so they are the CPU's.
 *
 * The arithmetic is zinc_math.h's element functions; with --fmad=false
 * nothing else is fused, so every result is bitwise the CPU's.
 */
#include <stdlib.h>

#include "kernels/kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int64_t kTile = (int64_t)kThreads * kPerThread;
constexpr int kLambThreads = 256;
static_assert(ZINC_SUMSQ_BLOCK % kLambThreads == 0, "Lamb tile: whole elements per thread");

struct optim_seg_desc {
  float *master;       /* (n) f32 */
  float *exp_avg;      /* (n) f32 or NULL */
  float *exp_avg_sq;   /* (n) f32 or NULL */
  const void *grad;    /* (n) grad_dtype, or NULL (Lamb APPLY) */
  void *param_out;     /* (n) param_dtype, or NULL */
  double *block_sums;  /* Lamb UPDATE: (2 * blocks) device, (weights, update) per block */
  int64_t n;
  int64_t tile0;       /* first tile of this segment in the launch's grid */
  int64_t index0;      /* global index of element 0 (stochastic rounding) */
  int grad_dtype;
  int param_dtype;
  int decay;
  float lamb_ratio;
  unsigned char master_bf16; /* master holds bf16 (the float pointer is a view) */
  unsigned char state_bf16;  /* exp_avg, exp_avg_sq hold bf16 */
};

struct optim_launch {
  zinc_opt_coef coef;
  uint64_t sr_key;     /* zinc_sr_key(rounding_seed, rounding_step) */
  int nseg;
  optim_seg_desc seg[ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH];
};

__device__ __forceinline__ const optim_seg_desc &find_seg(const optim_launch &l) {
  int lo = 0, hi = l.nseg - 1;
  while (lo < hi) { /* the last segment whose first tile is <= this block */
    int mid = (lo + hi + 1) / 2;
    if (l.seg[mid].tile0 <= (int64_t)blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return l.seg[lo];
}

__device__ __forceinline__ zinc_opt_store store_of(const zinc_opt_coef &c,
                                                   const optim_seg_desc &s, uint64_t key) {
  zinc_opt_store st;
  st.master_bf16 = s.master_bf16;
  st.state_bf16 = s.state_bf16;
  st.stochastic = c.bf16_rounding == ZINC_ROUND_STOCHASTIC;
  st.key = key;
  return st;
}

/* One element of every pass but Lamb UPDATE, a slot in bf16. */
__device__ __forceinline__ void optim_one_st(const zinc_opt_coef &c, const optim_seg_desc &s,
                                             uint64_t key, int64_t i) {
  const zinc_opt_store st = store_of(c, s, key);
  const int64_t gi = s.index0 + i;
  float pv;
  switch (c.kind) {
  case ZINC_OPT_ADAM:
    pv = zinc_adam_elem_st(&c, s.decay, &st, s.master, s.exp_avg, s.exp_avg_sq, i, gi,
                           zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_LION:
    pv = zinc_lion_elem_st(&c, s.decay, &st, s.master, s.exp_avg, i, gi,
                           zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_ADAGRAD:
    pv = zinc_adagrad_elem_st(&c, s.decay, &st, s.master, s.exp_avg_sq, i, gi,
                              zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_SGD:
    pv = zinc_sgd_elem_st(&c, s.decay, &st, s.master, s.exp_avg, i, gi,
                          zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_LAMB: /* APPLY */
    pv = zinc_lamb_apply_elem_st(&c, s.decay, s.lamb_ratio, &st, s.master, s.exp_avg,
                                 s.exp_avg_sq, i, gi);
    break;
  default:
    return;
  }
  if (s.param_out)
    zinc_store_from_f32(s.param_out, i, s.param_dtype, pv);
}

/* One element of every pass but Lamb UPDATE. */
__device__ __forceinline__ void optim_one(const zinc_opt_coef &c, const optim_seg_desc &s,
                                          uint64_t key, int64_t i) {
  if (s.master_bf16 || s.state_bf16) {
    optim_one_st(c, s, key, i);
    return;
  }
  float *p = &s.master[i];
  switch (c.kind) {
  case ZINC_OPT_LION:
    zinc_lion_elem(&c, s.decay, p, &s.exp_avg[i], zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_ADAGRAD:
    zinc_adagrad_elem(&c, s.decay, p, &s.exp_avg_sq[i],
                      zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_SGD:
    zinc_sgd_elem(&c, s.decay, p, s.exp_avg ? &s.exp_avg[i] : nullptr,
                  zinc_load_as_f32(s.grad, i, s.grad_dtype));
    break;
  case ZINC_OPT_LAMB: /* APPLY */
    zinc_lamb_apply_elem(&c, s.decay, s.lamb_ratio, p, s.exp_avg[i], s.exp_avg_sq[i]);
    break;
  default:
    return;
  }
  if (s.param_out)
    zinc_store_from_f32(s.param_out, i, s.param_dtype, *p);
}

__global__ void __launch_bounds__(kThreads)
    optim_kernel(const __grid_constant__ optim_launch launch) {
  const optim_seg_desc &s = find_seg(launch);
  const zinc_opt_coef c = launch.coef;
  int64_t base = ((int64_t)blockIdx.x - s.tile0) * kTile;
#pragma unroll 4
  for (int j = 0; j < kPerThread; j++) {
    int64_t i = base + (int64_t)j * kThreads + threadIdx.x;
    if (i < s.n)
      optim_one(c, s, launch.sr_key, i);
  }
}

/* Lamb UPDATE over one ZINC_SUMSQ_BLOCK block (see the file comment). */
__global__ void __launch_bounds__(kLambThreads)
    lamb_update_kernel(const __grid_constant__ optim_launch launch) {
  __shared__ float update[ZINC_SUMSQ_BLOCK];
  __shared__ double lanes[2][ZINC_SUMSQ_LANES];
  const optim_seg_desc &s = find_seg(launch);
  const zinc_opt_coef c = launch.coef;
  const int64_t b = (int64_t)blockIdx.x - s.tile0;
  const int64_t first = b * ZINC_SUMSQ_BLOCK;
  const int len = (int)(s.n - first < ZINC_SUMSQ_BLOCK ? s.n - first : ZINC_SUMSQ_BLOCK);
  const int st_path = s.master_bf16 || s.state_bf16;
  const zinc_opt_store st = store_of(c, s, launch.sr_key);
  for (int k = threadIdx.x; k < len; k += kLambThreads) {
    int64_t i = first + k;
    float w;
    update[k] = st_path ? zinc_lamb_update_elem_st(&c, s.decay, &st, s.master, s.exp_avg,
                                                   s.exp_avg_sq, i, s.index0 + i,
                                                   zinc_load_as_f32(s.grad, i, s.grad_dtype),
                                                   &w)
                        : zinc_lamb_update_elem(&c, s.decay, s.master[i], &s.exp_avg[i],
                                                &s.exp_avg_sq[i],
                                                zinc_load_as_f32(s.grad, i, s.grad_dtype));
  }
  __syncthreads();
  if (threadIdx.x < ZINC_SUMSQ_LANES) { /* lane j: elements j, j + 16, ... in order */
    int j = threadIdx.x;
    double w = 0.0, u = 0.0;
    for (int k = j; k < len; k += ZINC_SUMSQ_LANES) {
      double x = (double)zinc_slot_load(s.master, first + k, s.master_bf16);
      double y = (double)update[k];
      w += x * x;
      u += y * y;
    }
    lanes[0][j] = w;
    lanes[1][j] = u;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    s.block_sums[2 * b] = zinc_sumsq_lanes_combine(lanes[0]);
    s.block_sums[2 * b + 1] = zinc_sumsq_lanes_combine(lanes[1]);
  }
}

/* norms[2 i + k] = sum over segment i's blocks, in block order, from 0.0. */
__global__ void lamb_norms_kernel(const double *block_sums, const int64_t *first_block,
                                  int nseg, double *norms) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nseg)
    return;
  double w = 0.0, u = 0.0;
  for (int64_t b = first_block[i]; b < first_block[i + 1]; b++) {
    w += block_sums[2 * b];
    u += block_sums[2 * b + 1];
  }
  norms[2 * i] = w;
  norms[2 * i + 1] = u;
}

bool dtype_ok(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16;
}

cudaError_t launch_now(const optim_launch &launch, int64_t tiles, int lamb_update,
                       cudaStream_t stream) {
  if (launch.nseg == 0)
    return cudaSuccess;
  if (tiles > INT32_MAX)
    return cudaErrorInvalidValue;
  if (lamb_update)
    lamb_update_kernel<<<(unsigned)tiles, kLambThreads, 0, stream>>>(launch);
  else
    optim_kernel<<<(unsigned)tiles, kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

bool seg_bf16(const zinc_opt_seg &s) {
  return s.master_dtype != ZINC_F32 || s.state_dtype != ZINC_F32;
}

/* Storage of master and state (fp32 or bf16) and the rounding of bf16. */
bool storage_ok(const zinc_opt_coef &c, const zinc_opt_seg &s) {
  bool dt = (s.master_dtype == ZINC_F32 || s.master_dtype == ZINC_BF16) &&
            (s.state_dtype == ZINC_F32 || s.state_dtype == ZINC_BF16);
  bool rounding =
      c.bf16_rounding == ZINC_ROUND_NEAREST_EVEN || c.bf16_rounding == ZINC_ROUND_STOCHASTIC;
  return dt && (!seg_bf16(s) || rounding);
}

/* The arrays a segment of this kind and pass needs (as zinc_cpu_optim). */
bool seg_ok(const zinc_opt_coef &c, int pass, const zinc_opt_seg &s) {
  bool need_g = !(c.kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_APPLY);
  bool need_m = c.kind == ZINC_OPT_ADAM || c.kind == ZINC_OPT_LAMB || c.kind == ZINC_OPT_LION ||
                (c.kind == ZINC_OPT_SGD && c.momentum != 0.0f);
  bool need_v = c.kind == ZINC_OPT_ADAM || c.kind == ZINC_OPT_LAMB || c.kind == ZINC_OPT_ADAGRAD;
  return s.master && (!need_g || (s.grad && dtype_ok(s.grad_dtype))) &&
         (!need_m || s.exp_avg) && (!need_v || s.exp_avg_sq) &&
         (!s.param_out || dtype_ok(s.param_dtype)) && storage_ok(c, s);
}

/* Both launchers: segments in launches of at most
 * ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH; block_sums NULL except for Lamb UPDATE. */
cudaError_t run(const zinc_opt_coef *coef, const zinc_opt_seg *segs, int nseg, int pass,
                double *block_sums, cudaStream_t stream) {
  const int lamb_update = coef->kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_UPDATE;
  const int64_t tile = lamb_update ? ZINC_SUMSQ_BLOCK : kTile;
  for (int i = 0; i < nseg; i++)
    if (segs[i].n < 0 || (segs[i].n > 0 && !seg_ok(*coef, pass, segs[i])))
      return cudaErrorInvalidValue;
  optim_launch launch;
  launch.coef = *coef;
  launch.sr_key = coef->bf16_rounding == ZINC_ROUND_STOCHASTIC
                      ? zinc_sr_key(coef->rounding_seed, coef->rounding_step)
                      : 0;
  launch.nseg = 0;
  int64_t tiles = 0, block = 0;
  for (int i = 0; i < nseg; i++) {
    const zinc_opt_seg *s = &segs[i];
    int64_t seg_tiles = (s->n + tile - 1) / tile;
    if (s->n == 0)
      continue;
    if (launch.nseg == ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH) {
      cudaError_t err = launch_now(launch, tiles, lamb_update, stream);
      if (err != cudaSuccess)
        return err;
      launch.nseg = 0;
      tiles = 0;
    }
    optim_seg_desc &d = launch.seg[launch.nseg++];
    d.master = s->master;
    d.exp_avg = coef->kind == ZINC_OPT_SGD && coef->momentum == 0.0f ? nullptr : s->exp_avg;
    d.exp_avg_sq = s->exp_avg_sq;
    d.grad = s->grad;
    d.param_out = lamb_update ? nullptr : s->param_out;
    d.block_sums = lamb_update ? block_sums + 2 * block : nullptr;
    d.n = s->n;
    d.tile0 = tiles;
    d.grad_dtype = s->grad_dtype;
    d.param_dtype = s->param_dtype;
    d.decay = s->decay != 0;
    d.lamb_ratio = s->lamb_ratio;
    d.index0 = s->global_offset;
    d.master_bf16 = s->master_dtype == ZINC_BF16;
    d.state_bf16 = s->state_dtype == ZINC_BF16;
    tiles += seg_tiles;
    block += seg_tiles;
  }
  return launch_now(launch, tiles, lamb_update, stream);
}

} // namespace

extern "C" cudaError_t zinc_cuda_optim(const zinc_opt_coef *coef, const zinc_opt_seg *segs,
                                       int nseg, int pass, cudaStream_t stream) {
  if (!coef || nseg < 0 || (nseg > 0 && !segs))
    return cudaErrorInvalidValue;
  if (coef->kind == ZINC_OPT_ADAM && pass == ZINC_OPT_PASS_UPDATE) {
    /* runs of fp32-storage segments take adam.cu's vector kernel, runs
     * with a bf16 slot the element kernel here */
    for (int i = 0; i < nseg;) {
      int j = i + 1;
      while (j < nseg && seg_bf16(segs[j]) == seg_bf16(segs[i]))
        j++;
      cudaError_t err = seg_bf16(segs[i]) ? run(coef, segs + i, j - i, pass, nullptr, stream)
                                          : zinc_cuda_adam(coef, segs + i, j - i, stream);
      if (err != cudaSuccess)
        return err;
      i = j;
    }
    return cudaSuccess;
  }
  if (coef->kind == ZINC_OPT_LAMB ? pass != ZINC_OPT_PASS_APPLY
                                  : (coef->kind < ZINC_OPT_LION || coef->kind >= ZINC_OPT_KINDS ||
                                     pass != ZINC_OPT_PASS_UPDATE))
    return cudaErrorInvalidValue;
  return run(coef, segs, nseg, pass, nullptr, stream);
}

extern "C" size_t zinc_cuda_lamb_workspace(const zinc_opt_seg *segs, int nseg) {
  int64_t blocks = 0;
  for (int i = 0; i < nseg; i++)
    blocks += segs[i].n > 0 ? (segs[i].n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK : 0;
  return (size_t)(2 * blocks + 2 * nseg) * sizeof(double) + (size_t)(nseg + 1) * sizeof(int64_t);
}

extern "C" cudaError_t zinc_cuda_lamb_update(const zinc_opt_coef *coefs, int ncoef,
                                             const zinc_opt_seg *segs, int nseg,
                                             void *workspace, size_t workspace_bytes,
                                             double *norms, cudaStream_t stream) {
  if (!coefs || ncoef < 1 || nseg < 0 || (nseg > 0 && (!segs || !norms)))
    return cudaErrorInvalidValue;
  if (nseg == 0)
    return cudaSuccess;
  if (!workspace || workspace_bytes < zinc_cuda_lamb_workspace(segs, nseg))
    return cudaErrorInvalidValue;
  for (int i = 0; i < nseg; i++)
    if (segs[i].coef < 0 || segs[i].coef >= ncoef || coefs[segs[i].coef].kind != ZINC_OPT_LAMB)
      return cudaErrorInvalidValue;
  /* workspace: first_block (nseg + 1) int64, then the block sums, then the norms */
  int64_t *first_host = static_cast<int64_t *>(malloc((size_t)(nseg + 1) * sizeof(int64_t)));
  if (!first_host)
    return cudaErrorMemoryAllocation;
  int64_t blocks = 0;
  for (int i = 0; i < nseg; i++) {
    first_host[i] = blocks;
    blocks += segs[i].n > 0 ? (segs[i].n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK : 0;
  }
  first_host[nseg] = blocks;
  int64_t *first_block = static_cast<int64_t *>(workspace);
  double *block_sums = reinterpret_cast<double *>(first_block + nseg + 1);
  double *norms_dev = block_sums + 2 * blocks;
  /* from pageable memory: returns once the host array has been read */
  cudaError_t err = cudaMemcpyAsync(first_block, first_host,
                                    (size_t)(nseg + 1) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, stream);
  /* one launch series per run of segments with the same coefficients */
  for (int i = 0; i < nseg && err == cudaSuccess;) {
    int j = i + 1;
    while (j < nseg && segs[j].coef == segs[i].coef)
      j++;
    err = run(&coefs[segs[i].coef], segs + i, j - i, ZINC_OPT_PASS_UPDATE,
              block_sums + 2 * first_host[i], stream);
    i = j;
  }
  free(first_host);
  if (err != cudaSuccess)
    return err;
  lamb_norms_kernel<<<(nseg + 127) / 128, 128, 0, stream>>>(block_sums, first_block, nseg,
                                                            norms_dev);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    return err;
  return cudaMemcpyAsync(norms, norms_dev, (size_t)(2 * nseg) * sizeof(double),
                         cudaMemcpyDefault, stream);
}
