/*
 * cpu_kernels.h — the elementwise passes of the optimizer step on the CPU:
 * the fused optimizers (Adam/AdamW, Lamb's two passes, Lion, Adagrad, SGD),
 * sum of squares, fp32 accumulation and dtype casts; and the codecs of
 * compressed collectives (kernels/codec.h; driver in cpu_codec.c).
 * The cpu device (device/device_cpu.c) runs them as its kernels; the engine
 * may call them directly for the offloaded optimizer on the CUDA build.
 *
 * Every kernel has three paths chosen at run time: AVX-512F, AVX2+FMA+F16C
 * and scalar. They give bitwise identical results, the scalar path being
 * the shared per-element math of kernels/zinc_math.h itself:
 *  - optimizers: the element function's operation order and fused
 *    multiply-adds (zinc_adam_elem, zinc_lion_elem, zinc_adagrad_elem,
 *    zinc_sgd_elem, zinc_lamb_update_elem, zinc_lamb_apply_elem), the
 *    16-bit copy rounded as zinc_f32_to_bf16 / zinc_f32_to_f16; with
 *    master or state slots stored in bf16, the *_elem_st functions (the
 *    same arithmetic, each stored value rounded to nearest even or with
 *    the element's stochastic draw, a function of its global index);
 *  - sum of squares: the canonical block/lane order (zinc_sumsq_chunk_ref),
 *    so a chunk's partial depends only on its values, never on the path or
 *    the thread count;
 *  - casts: zinc_load_as_f32 then zinc_store_from_f32 (a cast to the same
 *    dtype copies the bits);
 *  - codecs: kernels/codec_math.h's per-block passes and operation order.
 *    TERN2 (TernGrad) encodes with the scalar block loop on every path:
 *    its draw is a 64-bit hash per element (AVX2 has no 64-bit multiply),
 *    so the AVX2 / AVX-512 tables call codec_math.h's reference for it
 *    (about 1 GB/s on one core, docs/benchmarks.md); its decode is
 *    vectorised like the other block codecs'.
 * NaN inputs give NaN outputs on every path (payloads follow the scalar
 * conversions; after arithmetic only NaN-ness is promised).
 *
 * Threads: each kernel splits its elements statically over the pool (NULL:
 * the calling thread alone); small inputs run on the caller.
 *
 * Dtypes are zinc_dtype values (ZINC_F32, ZINC_BF16, ZINC_F16); a bad dtype
 * or negative length returns ZINC_ERR_INVALID and touches nothing.
 */
#ifndef ZINC_CPU_KERNELS_H
#define ZINC_CPU_KERNELS_H

#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/codec.h"
#include "kernels/zinc_math.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ZINC_CPU_ISA_SCALAR = 0,
  ZINC_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
  ZINC_CPU_ISA_AVX512 = 2, /* AVX-512F (+ the AVX2 set) */
  ZINC_CPU_ISA_N
} zinc_cpu_isa;

/* The best path this CPU runs, lowered by the environment variable
 * ZINC_CPU_ISA=scalar|avx2|avx512 when set (read with base/env.h; a
 * value that is not one of them, or a higher ask than the CPU supports, is
 * ignored with a warning). Call once and keep the result. */
zinc_cpu_isa zinc_cpu_isa_select(void);
/* 1 if this CPU (and OS) can run `isa`. */
int zinc_cpu_isa_supported(zinc_cpu_isa isa);
const char *zinc_cpu_isa_name(zinc_cpu_isa isa); /* "scalar" "avx2" "avx512" */

/* One pass of the fused optimizer over nseg segments: segment i uses
 * coefs[segs[i].coef] (every coefficient of one call is for the same
 * zinc_opt_kind); per element the optimizer's function of zinc_math.h on
 * (master, exp_avg, exp_avg_sq) with grad loaded from grad_dtype, and the
 * new master value stored to param_out in param_dtype when param_out is not
 * NULL. pass is ZINC_OPT_PASS_UPDATE, or for Lamb also
 * ZINC_OPT_PASS_APPLY.
 *
 * Lamb UPDATE moves exp_avg and exp_avg_sq only (master and param_out are
 * left alone) and writes norms[2 i] and norms[2 i + 1], the sums of squares
 * of segment i's weights (before the step) and of its update u, each
 * bitwise zinc_sumsq_chunk_ref over the segment whatever the path and the
 * thread count. Lamb APPLY moves master by segs[i].lamb_ratio (grad is not
 * read and may be NULL) and writes param_out. norms may be NULL otherwise.
 *
 * Master and the state slots are fp32 or bf16 (segs[i].master_dtype,
 * state_dtype; zinc_math.h's "master and state in bf16"): a bf16 value is
 * rounded as coefs[segs[i].coef].bf16_rounding says, stochastic draws from
 * (rounding_seed, rounding_step, segs[i].global_offset + element, slot),
 * so the bits do not depend on the path, the threads or how the caller
 * cuts its segments, as long as each piece carries its global offset.
 *
 * Arrays a segment of n > 0 elements must have (ZINC_ERR_INVALID, nothing
 * touched, otherwise): master always; grad except in Lamb APPLY; exp_avg
 * for Adam, Lamb, Lion and SGD with momentum != 0; exp_avg_sq for Adam,
 * Lamb and Adagrad. Storage dtypes must be f32 or bf16 and, with a bf16
 * slot, the rounding nearest even or stochastic. Every coefficient must be
 * of one kind, every segment's coef in [0, ncoef). Segments must not
 * overlap each other. */
zinc_status zinc_cpu_optim(zinc_threadpool *pool, zinc_cpu_isa isa,
                           const zinc_opt_coef *coefs, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms);

/* partials[i] = zinc_sumsq_chunk_ref(chunks[i]) bit for bit. */
zinc_status zinc_cpu_sumsq(zinc_threadpool *pool, zinc_cpu_isa isa,
                           const zinc_sumsq_chunk *chunks, int nchunks,
                           double *partials);

/* dst (n fp32) = src (n src_dtype) when overwrite, else dst += src. */
zinc_status zinc_cpu_accumulate_f32(zinc_threadpool *pool, zinc_cpu_isa isa,
                                    float *dst, const void *src, int src_dtype,
                                    int64_t n, int overwrite);

/* dst (n dst_dtype) = src (n src_dtype), rounding to nearest even.
 * dst and src must not overlap (unless equal with equal dtypes). */
zinc_status zinc_cpu_cast(zinc_threadpool *pool, zinc_cpu_isa isa, void *dst,
                          int dst_dtype, const void *src, int src_dtype, int64_t n);

/* x (n dtype) *= factor in place, each element in f32 and rounded back
 * to nearest even (zinc_load_as_f32 / zinc_store_from_f32). */
zinc_status zinc_cpu_scale(zinc_threadpool *pool, void *x, int dtype, int64_t n, float factor);

/* Codecs of compressed collectives (kernels/codec.h, math in
 * kernels/codec_math.h), the same bytes and values on every path and for
 * any pool.
 *
 * encode: dst (zinc_codec_bytes(c, n) bytes, padding zeroed) = c applied
 * to src (n elements of src_dtype). ef: NULL, or the slice's INT8 residual
 * (zinc_codec_bytes({INT8, c.block}, n) bytes, zero-filled = no residual),
 * read and rewritten with ef_beta in [0, 1]; error feedback needs a block
 * codec. seed: the draws of a stochastic codec (TERN2), ignored by the
 * others; the bytes are a pure function of (c, src, n, ef, ef_beta, seed).
 * decode: dst (n elements of dst_dtype) = decoded src; with
 * accumulate, dst must be f32 and the values are added (dst += v, one fp32
 * add per element). A cast codec decodes to another dtype through f32.
 * A cast codec's block is ignored. dst must not overlap src or ef.
 * Bad arguments (codec kind or block, dtype, negative n, NULL buffers,
 * beta) return ZINC_ERR_INVALID naming them, with nothing written. */
zinc_status zinc_cpu_codec_encode(zinc_threadpool *pool, zinc_cpu_isa isa, zinc_codec c,
                                  void *dst, const void *src, int src_dtype, int64_t n,
                                  void *ef, float ef_beta, uint64_t seed);
zinc_status zinc_cpu_codec_decode(zinc_threadpool *pool, zinc_cpu_isa isa, zinc_codec c,
                                  void *dst, int dst_dtype, const void *src, int64_t n,
                                  int accumulate);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_CPU_KERNELS_H */
