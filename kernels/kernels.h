/*
 * kernels.h — C-callable launchers of the CUDA kernels in the .cu files of kernels/.
 *
 * Called by the cuda device (device/device_cuda.c) and by the GPU tests;
 * only compiled into a build with ZINC_HAVE_CUDA. Every launcher queues its
 * work on `stream` and returns at once with the launch status
 * (cudaSuccess, or the error of the first launch or copy that failed);
 * errors of the kernels themselves surface at the next synchronisation, as
 * with any CUDA call. Pointers are device-accessible memory (device memory
 * or mapped pinned host memory) unless a comment says otherwise.
 *
 * The per-element arithmetic of every kernel comes from kernels/zinc_math.h
 * (ZINC_HD functions shared with the CPU code); with nvcc --fmad=false the
 * GPU gives the same bits as the CPU for every optimizer (Lamb's norms
 * included), casts, accumulation and unscaling. Only the last step of
 * zinc_cuda_sumsq (adding the per-block sums of a chunk) follows CUB's
 * order instead of the CPU's; see there.
 *
 * dtypes are zinc_dtype values (0 f32, 1 bf16, 2 f16).
 */
#ifndef ZINC_KERNELS_H
#define ZINC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/codec.h"     /* zinc_codec */
#include "kernels/zinc_math.h" /* the per-element math and the kernel argument structs */
#include "zinc.h"               /* zinc_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of `threads` threads for a grid-stride loop over `items`: one per
 * `threads` items, at least one, at most 65536 (the loop strides beyond). */
static inline unsigned zinc_cuda_grid_for(int64_t items, int threads) {
  int64_t blocks = (items + threads - 1) / threads;
  if (blocks < 1)
    blocks = 1;
  return (unsigned)(blocks < 65536 ? blocks : 65536);
}

/* Segments (resp. chunks) described to one kernel launch through its
 * parameter block; longer lists are cut into several launches. */
#define ZINC_CUDA_ADAM_SEGS_PER_LAUNCH 48
#define ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH 96
#define ZINC_CUDA_OPTIM_SEGS_PER_LAUNCH 40

/* Fused Adam/AdamW over nseg segments with one set of coefficients, master
 * and state in fp32 (master_dtype and state_dtype ZINC_F32; a segment with
 * a bf16 slot is cudaErrorInvalidValue here, zinc_cuda_optim takes it): for
 * every element zinc_adam_elem updates master, exp_avg and exp_avg_sq in
 * place, and the new master value is also stored to param_out (when not
 * NULL) in param_dtype, in the same pass. A segment whose five arrays are
 * all 16-byte aligned takes the vector path: groups of eight elements, every
 * load and store 16 bytes wide (two per group for fp32 arrays, one for
 * 16-bit ones); any other segment takes the scalar path. Segments must not
 * overlap one another. */
cudaError_t zinc_cuda_adam(const zinc_opt_coef *coef, const zinc_opt_seg *segs,
                           int nseg, cudaStream_t stream);

/* One pass of an optimizer other than Lamb's UPDATE over nseg segments with
 * one set of coefficients: Adam (zinc_cuda_adam), Lion, Adagrad, SGD
 * (UPDATE) or Lamb APPLY, element by element with zinc_math.h's function
 * (bitwise the CPU's zinc_cpu_optim), the new master also stored to
 * param_out when not NULL. Master and state slots may be stored in bf16
 * (zinc_opt_seg.master_dtype, state_dtype; rounded as coef->bf16_rounding
 * says, the draws the CPU's): those segments, Adam's included, take
 * zinc_math.h's *_elem_st functions element by element. The arrays each
 * kind needs are those of zinc_cpu_optim; cudaErrorInvalidValue when one
 * is missing, for a bad dtype, storage dtype or rounding, a kind/pass pair
 * this does not run, or a negative length. The optimizers other than Adam
 * on fp32 storage take the scalar path (coalesced single-element
 * accesses). */
cudaError_t zinc_cuda_optim(const zinc_opt_coef *coef, const zinc_opt_seg *segs, int nseg,
                            int pass, cudaStream_t stream);

/* Device workspace bytes zinc_cuda_lamb_update needs for these segments
 * (host arithmetic only). */
size_t zinc_cuda_lamb_workspace(const zinc_opt_seg *segs, int nseg);

/* Lamb's UPDATE pass over nseg segments, segment i with coefs[segs[i].coef]
 * (master and state in fp32 or bf16, as zinc_cuda_optim):
 * moves exp_avg and exp_avg_sq (master and param_out untouched) and writes
 * norms[2 i], norms[2 i + 1], the sums of squares of segment i's weights and
 * of its update. Order: every ZINC_SUMSQ_BLOCK block sum is
 * zinc_sumsq_block_ref's, and each segment's block sums are added in block
 * order from 0.0 on the GPU, so the norms are bitwise the CPU's
 * zinc_cpu_optim (unlike zinc_cuda_sumsq, no CUB order here).
 * workspace: >= zinc_cuda_lamb_workspace bytes of device memory, not used
 * by other streams until this work is done. norms: 2 * nseg doubles
 * anywhere (device, pinned or pageable host memory), valid once the stream
 * reaches this point. */
cudaError_t zinc_cuda_lamb_update(const zinc_opt_coef *coefs, int ncoef,
                                  const zinc_opt_seg *segs, int nseg, void *workspace,
                                  size_t workspace_bytes, double *norms, cudaStream_t stream);

/* In place: data (n, dtype) = data * scale, rounded back to dtype. If any
 * element is inf/NaN before or after scaling (including an fp16 overflow),
 * *nonfinite (one device-accessible int, which the caller zeroes first) is
 * set to 1; it is never cleared here, so one flag can collect many calls. */
cudaError_t zinc_cuda_unscale(void *data, int dtype, int64_t n, float scale,
                              int *nonfinite, cudaStream_t stream);

/* dst (n, dst_dtype) = src (n, src_dtype), rounding to nearest even. In
 * place only when dst == src and both dtypes have the same size. */
cudaError_t zinc_cuda_cast(void *dst, int dst_dtype, const void *src, int src_dtype,
                           int64_t n, cudaStream_t stream);

/* dst (n, f32) = src (n, src_dtype) when overwrite, else dst += src. */
/* x (dtype) *= factor in place, in f32, rounded back to nearest even. */
cudaError_t zinc_cuda_scale(void *x, int dtype, int64_t n, float factor, cudaStream_t stream);
cudaError_t zinc_cuda_accumulate_f32(float *dst, const void *src, int src_dtype,
                                     int64_t n, int overwrite, cudaStream_t stream);

/* bytes zero bytes at dst (any alignment; 16-byte stores for the aligned
 * body). Works on device memory and on mapped pinned host memory. */
cudaError_t zinc_cuda_fill_zero(void *dst, size_t bytes, cudaStream_t stream);

/* Device workspace zinc_cuda_sumsq needs for these chunks (the per-block
 * sums, the segment offsets, the device partials and CUB's temporary
 * storage). Needs the current device (CUB sizes its storage for it). */
cudaError_t zinc_cuda_sumsq_workspace(const zinc_sumsq_chunk *chunks, int n,
                                      size_t *bytes);

/* partials[i] = sum of squares of chunks[i] in double. Inf/NaN elements make
 * the partial non-finite.
 *
 * Order: each chunk is cut into ZINC_SUMSQ_BLOCK blocks and every block sum
 * is computed exactly as zinc_sumsq_block_ref does (16 lanes, then
 * zinc_sumsq_lanes_combine), so a chunk of at most one block gives the CPU's
 * bits. The block sums of a chunk are then added by
 * cub::DeviceSegmentedReduce (one thread block per chunk, fixed tree): the
 * result is deterministic run to run on a given GPU model and build, but may
 * differ from the CPU's block-order sum in the last bits (both add
 * non-negative terms: relative difference at most about 2.2e-16 * (blocks-1)).
 *
 * workspace: workspace_bytes >= what zinc_cuda_sumsq_workspace gave, device
 * memory not used by other streams until this call's work is done.
 * partials: n doubles anywhere (device, pinned or pageable host memory; a
 * pageable destination makes the final copy synchronous). Valid once the
 * stream reaches this point. */
cudaError_t zinc_cuda_sumsq(const zinc_sumsq_chunk *chunks, int n, void *workspace,
                            size_t workspace_bytes, double *partials,
                            cudaStream_t stream);

/* The codecs of kernels/codec.h (math in kernels/codec_math.h): the bytes
 * and decoded values of zinc_cpu_codec_encode / zinc_cpu_codec_decode bit
 * for bit. encode: dst (zinc_codec_bytes(c, n) bytes, padding zeroed) =
 * c(src (n, src_dtype)); ef NULL or the slice's INT8 residual
 * (zinc_codec_bytes({INT8, c.block}, n) bytes), read and rewritten with
 * ef_beta; seed: TERN2's draws. decode: dst (n, dst_dtype) = decoded src, or dst (f32) += it
 * when accumulate. cudaErrorInvalidValue for what zinc_codec_check
 * refuses (the device checks first and names it). */
cudaError_t zinc_cuda_codec_encode(zinc_codec c, void *dst, const void *src, int src_dtype,
                                   int64_t n, void *ef, float ef_beta, uint64_t seed,
                                   cudaStream_t stream);
cudaError_t zinc_cuda_codec_decode(zinc_codec c, void *dst, int dst_dtype, const void *src,
                                   int64_t n, int accumulate, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_KERNELS_H */
