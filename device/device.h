/*
 * device.h — the device seam: every byte the engine owns is allocated
 * through a zinc_device and every elementwise pass over those bytes runs as
 * one of its kernels.
 *
 * Backends: cpu (always built: "device memory" is host memory, kernels are
 * the CPU implementations in kernels/, run on the device's thread pool) and
 * cuda (cudaMalloc, streams, events, the kernels in kernels/).
 *
 * Ordering: work queued on one stream runs in order; an event recorded on a
 * stream completes when the work queued before it has; stream_wait_event
 * makes later work on a stream wait for it. The cpu backend runs everything
 * synchronously at the call, which satisfies every such ordering.
 *
 * Memory kinds: ZINC_LOC_DEVICE (device memory) and ZINC_LOC_HOST (pinned
 * host memory: cudaHostAlloc on CUDA; on the cpu backend page-aligned and,
 * when asked, mlock'ed). Every allocation names a profiler category; the
 * device reports it to the accounting hook so the profiler is never a
 * separate pass.
 */
#ifndef ZINC_DEVICE_H
#define ZINC_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"
#include "kernels/zinc_math.h" /* zinc_opt_seg, zinc_sumsq_chunk, zinc_opt_coef */
#include "kernels/codec.h"     /* zinc_codec */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinc_device zinc_device;
typedef struct zinc_stream zinc_stream;
typedef struct zinc_event zinc_event;


/* Accounting hook: called with +bytes on allocation and -bytes on free. */
typedef void (*zinc_mem_hook)(void *ctx, int location, int category, int64_t bytes);

typedef struct {
  const char *name;         /* "cpu" | "cuda" */
  int is_gpu;

  /* ---- memory */
  zinc_status (*alloc)(zinc_device *d, size_t bytes, int location, int category,
                       void **out);
  void (*free)(zinc_device *d, void *p, size_t bytes, int location, int category);
  /* Copy between any two of device/host memory (unified addressing). */
  zinc_status (*copy)(zinc_device *d, void *dst, const void *src, size_t bytes,
                      zinc_stream *s);
  zinc_status (*fill_zero)(zinc_device *d, void *dst, size_t bytes, zinc_stream *s);

  /* ---- streams and events */
  zinc_status (*stream_create)(zinc_device *d, zinc_stream **out);
  void (*stream_destroy)(zinc_device *d, zinc_stream *s);
  zinc_status (*stream_sync)(zinc_device *d, zinc_stream *s);
  zinc_status (*event_create)(zinc_device *d, zinc_event **out);
  void (*event_destroy)(zinc_device *d, zinc_event *e);
  zinc_status (*event_record)(zinc_device *d, zinc_event *e, zinc_stream *s);
  zinc_status (*stream_wait_event)(zinc_device *d, zinc_stream *s, zinc_event *e);
  zinc_status (*event_sync)(zinc_device *d, zinc_event *e);

  /* ---- kernels (queued on s) */
  /* One pass of the fused optimizer over nseg segments, segment i with
   * coefs[segs[i].coef] (see zinc_cpu_optim in kernels/cpu_kernels.h for
   * pass and norms; norms is host memory, valid after the stream syncs). */
  zinc_status (*optim)(zinc_device *d, zinc_stream *s, const struct zinc_opt_coef *coefs,
                       int ncoef, const zinc_opt_seg *segs, int nseg, int pass,
                       double *norms);
  /* partials[i] = sum of squares of chunks[i] in double, computed in the
   * fixed order of zinc_sumsq_chunk_f64 (kernels/zinc_math.h) on the cpu
   * backend so that the result depends only on the chunk's values.
   * partials is host memory, valid after the stream syncs. Inf/NaN
   * elements make the partial non-finite. */
  zinc_status (*sumsq)(zinc_device *d, zinc_stream *s,
                       const zinc_sumsq_chunk *chunks, int n, double *partials);
  /* dst (f32) = src (src_dtype) when overwrite, else dst += src; n elements. */
  zinc_status (*accumulate_f32)(zinc_device *d, zinc_stream *s, float *dst,
                                const void *src, int src_dtype, int64_t n,
                                int overwrite);
  /* dst (dst_dtype) = src (src_dtype), n elements, round to nearest even. */
  zinc_status (*cast)(zinc_device *d, zinc_stream *s, void *dst, int dst_dtype,
                      const void *src, int src_dtype, int64_t n);
  /* x (dtype) *= factor in place, n elements: each loaded to f32, times
   * factor in f32, rounded back to dtype to nearest even (zinc_math.h's
   * load and store; a 16-bit result past its range is inf, as the
   * product would be). The gradient pre-division before a reduction. */
  zinc_status (*scale)(zinc_device *d, zinc_stream *s, void *x, int dtype, int64_t n,
                       float factor);
  /* Codecs of compressed collectives (kernels/codec.h). encode: dst
   * (zinc_codec_bytes(c, n) bytes) = c(src (src_dtype, n elements)), with
   * error feedback through ef (NULL: none; else the INT8 residual of the
   * slice, read and rewritten with ef_beta); seed: the draws of a
   * stochastic codec (TERN2), ignored by the others. decode: dst (dst_dtype) =
   * decoded src when !accumulate; dst (must be f32) += decoded src when
   * accumulate. Bitwise the same on every backend. */
  zinc_status (*encode)(zinc_device *d, zinc_stream *s, zinc_codec c, void *dst,
                        const void *src, int src_dtype, int64_t n, void *ef,
                        float ef_beta, uint64_t seed);
  zinc_status (*decode)(zinc_device *d, zinc_stream *s, zinc_codec c, void *dst,
                        int dst_dtype, const void *src, int64_t n, int accumulate);

  /* ---- information */
  /* Free and total device memory as the driver sees it (cpu: from
   * /proc/meminfo); -1 where unknown. */
  zinc_status (*mem_info)(zinc_device *d, int64_t *free_bytes, int64_t *total_bytes);

  void (*destroy)(zinc_device *d);
} zinc_device_ops;

struct zinc_device {
  const zinc_device_ops *ops;
  zinc_mem_hook mem_hook;   /* may be NULL */
  void *mem_hook_ctx;
  zinc_stream *compute;     /* the trainer's stream (cuda) or NULL */
  void *impl;               /* backend state */
  /* Statistics: copies this device has queued (ops->copy calls that move
   * at least one byte), so tests can count a pipeline's copies. Added to
   * atomically (copies may be queued from several threads); read it with
   * no copy in flight. */
  uint64_t copies;
};

/* cpu device: kernels run on a pool of `threads` threads (0: this process's
 * share of its cpuset). pin_memory: mlock host (ZINC_LOC_HOST) allocations
 * where permitted (a warning, once, where not). */
zinc_status zinc_device_cpu_create(int threads, int pin_memory, zinc_device **out);

/* cuda device on ordinal `ordinal`, computing after work on the trainer's
 * `compute_stream` (cudaStream_t or NULL). ZINC_ERR_UNSUPPORTED when built
 * without CUDA; ZINC_ERR_DEVICE when no such GPU. */
zinc_status zinc_device_cuda_create(int ordinal, void *compute_stream,
                                    zinc_device **out);
/* Number of CUDA devices visible (0 when built without CUDA or none). */
int zinc_device_cuda_count(void);
/* *ordinal = the CUDA ordinal `stream` (a cudaStream_t) belongs to; -1 for
 * a NULL stream (the legacy default stream follows the current device) and
 * when built without CUDA. ZINC_ERR_DEVICE when CUDA cannot tell (not a
 * stream of this process). */
zinc_status zinc_device_cuda_stream_ordinal(void *stream, int *ordinal);

static inline void zinc_device_destroy(zinc_device *d) {
  if (d)
    d->ops->destroy(d);
}

#ifdef __cplusplus
}
#endif
#endif /* ZINC_DEVICE_H */
