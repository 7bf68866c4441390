/*
 * device_cuda.c — the cuda device: the zinc_device_ops table of
 * device/device.h on one CUDA GPU.
 *
 * Memory: ZINC_LOC_DEVICE from a caching pool over cudaMalloc and
 * ZINC_LOC_HOST from one over cudaHostAlloc (device/device_cuda_pool.c), so
 * a steady-state step calls neither cudaMalloc nor cudaFree. The accounting
 * hook sees the bytes callers asked for (as on the cpu device); what the
 * pools hold from CUDA (reserved = in use + cached) is reported by
 * zinc_device_cuda_pool_stats (device/device_cuda.h).
 *
 * Streams and events are CUDA's own (non-blocking streams, events without
 * timing). A NULL zinc_stream means the compute stream: the trainer's
 * cudaStream_t given at creation (NULL there: the legacy default stream).
 * The device tracks its compute stream and every stream it created, so that
 * a freed block is reused only after the work queued on all of them before
 * the free (see the pool). Memory used by other streams — a comm's — must be
 * freed only after that work completed (the comm's wait or test).
 *
 * Every operation first makes the device's ordinal current on the calling
 * thread, so offload or comm threads may use the device too.
 *
 * mem_info is cudaMemGetInfo; the memory the driver attributes to this
 * process comes from NVML, loaded with dlopen at creation
 * (device/device_cuda_nvml.c; without it the figure is -1).
 *
 * Built without CUDA, creation fails with ZINC_ERR_UNSUPPORTED and
 * zinc_device_cuda_count is 0.
 */
#include "device/device_cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

#ifdef ZINC_HAVE_CUDA

#include <pthread.h>

#include <cuda_runtime_api.h>

#include "device/device_cuda_nvml.h"
#include "device/device_cuda_pool.h"
#include "device/topology.h"
#include "kernels/kernels.h"

struct zinc_stream {
  cudaStream_t s;
  int owned;             /* 0: the trainer's stream */
  void *scratch;         /* (scratch_bytes) device workspace of kernels run on s */
  size_t scratch_bytes;
};

struct zinc_event {
  cudaEvent_t e;
};

typedef struct {
  int ordinal;
  pthread_mutex_t lock;                           /* streams[] */
  zinc_stream compute;                            /* wraps the trainer's stream */
  zinc_stream *streams[ZINC_CUDA_MAX_STREAMS];    /* [0] = &compute */
  int nstreams;
  zinc_cuda_pool *pool[2];                        /* [ZINC_LOC_DEVICE], [ZINC_LOC_HOST] */
  zinc_nvml *nvml;                                /* NULL: NVML not loaded */
  zinc_topology *topo;                            /* with PCI devices, or NULL */
  hwloc_bitmap_t near;                            /* the GPU's NUMA node, or NULL */
  int numa;                                       /* its OS index, or -1 */
} cuda_impl;

static cuda_impl *impl_of(zinc_device *d) { return d->impl; }

static zinc_status cuda_fail(const cuda_impl *ci, cudaError_t err, const char *fmt, ...)
    ZINC_PRINTF(3, 4);

static zinc_status cuda_fail(const cuda_impl *ci, cudaError_t err, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)cudaGetLastError();
  return zinc_error(err == cudaErrorMemoryAllocation ? ZINC_ERR_NOMEM : ZINC_ERR_DEVICE,
                    "cuda device %d: %s: %s (%s)", ci->ordinal, what, cudaGetErrorString(err),
                    cudaGetErrorName(err));
}

/* Make the device current on this thread. */
static zinc_status bind(const cuda_impl *ci) {
  int cur = -1;
  cudaError_t err = cudaGetDevice(&cur);
  if (err == cudaSuccess && cur == ci->ordinal)
    return ZINC_OK;
  err = cudaSetDevice(ci->ordinal);
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cudaSetDevice");
}

static cudaStream_t raw_stream(cuda_impl *ci, zinc_stream *s) {
  return (s ? s : &ci->compute)->s;
}

/* Pinned host memory on the NUMA node nearest the GPU (hwloc's PCI
 * locality), where the machine has more than one node. */
static void place_host_memory(cuda_impl *ci) {
  char bus_id[32];
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ci->ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  zinc_topology_opts to = ZINC_TOPOLOGY_OPTS_INIT;
  to.io = 1;
  if (zinc_topology_create(&to, &ci->topo) != ZINC_OK) {
    zinc_log(ZINC_LOG_WARN, "cuda device %d: %s; pinned host memory is not placed near the GPU",
             ci->ordinal, zinc_last_error());
    ci->topo = NULL;
    return;
  }
  int node = zinc_topology_numa_of_pci(ci->topo, bus_id);
  ci->numa = node;
  if (zinc_topology_numa_nodes(ci->topo) < 2 || node < 0)
    return;
  ci->near = hwloc_bitmap_alloc();
  if (!ci->near)
    return;
  hwloc_bitmap_only(ci->near, (unsigned)node);
  zinc_cuda_pool_place_host(ci->pool[ZINC_LOC_HOST], zinc_topology_hwloc(ci->topo), ci->near);
  zinc_log(ZINC_LOG_INFO, "cuda device %d (PCI %s): pinned host memory on NUMA node %d",
           ci->ordinal, bus_id, node);
}

/* ------------------------------------------------------------- memory */

static zinc_cuda_pool *pool_for(cuda_impl *ci, int location) {
  if (location == ZINC_LOC_DEVICE || location == ZINC_LOC_HOST)
    return ci->pool[location];
  return NULL;
}

static zinc_status cuda_alloc(zinc_device *d, size_t bytes, int location, int category,
                              void **out) {
  cuda_impl *ci = impl_of(d);
  zinc_cuda_pool *pool = pool_for(ci, location);
  *out = NULL;
  if (!pool)
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: cannot allocate in location %d "
                      "(ZINC_LOC_DEVICE or ZINC_LOC_HOST)", ci->ordinal, location);
  ZINC_CHECK(bind(ci));
  ZINC_CHECK(zinc_cuda_pool_alloc(pool, bytes, out));
  if (d->mem_hook && bytes)
    d->mem_hook(d->mem_hook_ctx, location, category, (int64_t)bytes);
  return ZINC_OK;
}

static void cuda_free(zinc_device *d, void *p, size_t bytes, int location, int category) {
  cuda_impl *ci = impl_of(d);
  zinc_cuda_pool *pool = pool_for(ci, location);
  if (!p)
    return;
  if (!pool || bind(ci) != ZINC_OK) {
    zinc_log(ZINC_LOG_ERROR, "cuda device %d: free of %p in location %d failed: %s",
             ci->ordinal, p, location, pool ? zinc_last_error() : "no such location");
    return;
  }
  cudaStream_t streams[ZINC_CUDA_MAX_STREAMS];
  pthread_mutex_lock(&ci->lock); /* no stream goes away while events are recorded */
  for (int i = 0; i < ci->nstreams; i++)
    streams[i] = ci->streams[i]->s;
  zinc_status st = zinc_cuda_pool_free(pool, p, bytes, streams, ci->nstreams);
  pthread_mutex_unlock(&ci->lock);
  if (st != ZINC_OK) {
    zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
    return;
  }
  if (d->mem_hook)
    d->mem_hook(d->mem_hook_ctx, location, category, -(int64_t)bytes);
}

/* Grow s's workspace to at least `bytes` (powers of two, so that it settles
 * after a few steps). The old block goes back to the pool ordered after the
 * work already queued on every stream, including s. */
static zinc_status scratch_reserve(zinc_device *d, zinc_stream *s, size_t bytes) {
  if (s->scratch_bytes >= bytes)
    return ZINC_OK;
  size_t want = (size_t)64 << 10;
  while (want < bytes)
    want *= 2;
  if (s->scratch) {
    cuda_free(d, s->scratch, s->scratch_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
    s->scratch = NULL;
    s->scratch_bytes = 0;
  }
  ZINC_CHECK(cuda_alloc(d, want, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, &s->scratch));
  s->scratch_bytes = want;
  return ZINC_OK;
}

static zinc_status cuda_copy(zinc_device *d, void *dst, const void *src, size_t bytes,
                             zinc_stream *s) {
  cuda_impl *ci = impl_of(d);
  if (!bytes)
    return ZINC_OK;
  ZINC_CHECK(bind(ci));
  __atomic_fetch_add(&d->copies, 1, __ATOMIC_RELAXED);
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK
                            : cuda_fail(ci, err, "copying %zu bytes %p -> %p", bytes, src, dst);
}

static zinc_status cuda_fill_zero(zinc_device *d, void *dst, size_t bytes, zinc_stream *s) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_fill_zero(dst, bytes, raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "zeroing %zu bytes at %p", bytes, dst);
}

/* ------------------------------------------------- streams and events */

static zinc_status cuda_stream_create(zinc_device *d, zinc_stream **out) {
  cuda_impl *ci = impl_of(d);
  *out = NULL;
  ZINC_CHECK(bind(ci));
  zinc_stream *s = calloc(1, sizeof *s);
  if (!s)
    return zinc_error(ZINC_ERR_NOMEM, "cuda device %d: out of memory for a stream", ci->ordinal);
  cudaError_t err = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    free(s);
    return cuda_fail(ci, err, "cudaStreamCreate");
  }
  s->owned = 1;
  pthread_mutex_lock(&ci->lock);
  int full = ci->nstreams == ZINC_CUDA_MAX_STREAMS;
  if (!full)
    ci->streams[ci->nstreams++] = s;
  pthread_mutex_unlock(&ci->lock);
  if (full) {
    cudaStreamDestroy(s->s);
    free(s);
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: more than %d streams at once; "
                      "destroy streams that are no longer used", ci->ordinal,
                      ZINC_CUDA_MAX_STREAMS);
  }
  *out = s;
  return ZINC_OK;
}

static void cuda_stream_destroy(zinc_device *d, zinc_stream *s) {
  cuda_impl *ci = impl_of(d);
  if (!s || s == &ci->compute)
    return;
  if (bind(ci) != ZINC_OK)
    zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
  if (s->scratch) /* while s is still tracked: the block waits for s's work */
    cuda_free(d, s->scratch, s->scratch_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  pthread_mutex_lock(&ci->lock);
  for (int i = 0; i < ci->nstreams; i++) {
    if (ci->streams[i] == s) {
      ci->streams[i] = ci->streams[--ci->nstreams];
      break;
    }
  }
  pthread_mutex_unlock(&ci->lock);
  cudaStreamDestroy(s->s); /* queued work still runs; resources go when it is done */
  free(s);
}

static zinc_status cuda_stream_sync(zinc_device *d, zinc_stream *s) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  cudaError_t err = cudaStreamSynchronize(raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cudaStreamSynchronize");
}

static zinc_status cuda_event_create(zinc_device *d, zinc_event **out) {
  cuda_impl *ci = impl_of(d);
  *out = NULL;
  ZINC_CHECK(bind(ci));
  zinc_event *e = calloc(1, sizeof *e);
  if (!e)
    return zinc_error(ZINC_ERR_NOMEM, "cuda device %d: out of memory for an event", ci->ordinal);
  cudaError_t err = cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    free(e);
    return cuda_fail(ci, err, "cudaEventCreate");
  }
  *out = e;
  return ZINC_OK;
}

static void cuda_event_destroy(zinc_device *d, zinc_event *e) {
  if (!e)
    return;
  (void)bind(impl_of(d));
  cudaEventDestroy(e->e);
  free(e);
}

static zinc_status cuda_event_record(zinc_device *d, zinc_event *e, zinc_stream *s) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  cudaError_t err = cudaEventRecord(e->e, raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cudaEventRecord");
}

static zinc_status cuda_stream_wait_event(zinc_device *d, zinc_stream *s, zinc_event *e) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  cudaError_t err = cudaStreamWaitEvent(raw_stream(ci, s), e->e, 0);
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cudaStreamWaitEvent");
}

static zinc_status cuda_event_sync(zinc_device *d, zinc_event *e) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  cudaError_t err = cudaEventSynchronize(e->e);
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cudaEventSynchronize");
}

/* ------------------------------------------------------------ kernels */

static int dtype_ok(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16;
}

/* The arrays a segment of n > 0 elements needs, as zinc_cpu_optim. */
static int optim_seg_complete(const zinc_opt_coef *c, int pass, const zinc_opt_seg *g) {
  int kind = c->kind;
  int need_g = !(kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_APPLY);
  int need_m = kind == ZINC_OPT_ADAM || kind == ZINC_OPT_LAMB || kind == ZINC_OPT_LION ||
               (kind == ZINC_OPT_SGD && c->momentum != 0.0f);
  int need_v = kind == ZINC_OPT_ADAM || kind == ZINC_OPT_LAMB || kind == ZINC_OPT_ADAGRAD;
  int storage = (g->master_dtype == ZINC_F32 || g->master_dtype == ZINC_BF16) &&
                (g->state_dtype == ZINC_F32 || g->state_dtype == ZINC_BF16);
  int bf16 = g->master_dtype != ZINC_F32 || g->state_dtype != ZINC_F32;
  int rounding = c->bf16_rounding == ZINC_ROUND_NEAREST_EVEN ||
                 c->bf16_rounding == ZINC_ROUND_STOCHASTIC;
  return g->master && (!need_g || (g->grad && dtype_ok(g->grad_dtype))) &&
         (!need_m || g->exp_avg) && (!need_v || g->exp_avg_sq) && storage && (!bf16 || rounding);
}

static zinc_status cuda_optim(zinc_device *d, zinc_stream *s, const struct zinc_opt_coef *coefs,
                              int ncoef, const zinc_opt_seg *segs, int nseg, int pass,
                              double *norms) {
  cuda_impl *ci = impl_of(d);
  if (!coefs || ncoef < 1 || nseg < 0 || (nseg > 0 && !segs))
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: optimizer with %d coefficients, %d "
                      "segments", ci->ordinal, ncoef, nseg);
  const int kind = coefs[0].kind;
  const char *name = zinc_opt_kind_str(kind);
  if (kind < 0 || kind >= ZINC_OPT_KINDS ||
      (pass != ZINC_OPT_PASS_UPDATE && !(pass == ZINC_OPT_PASS_APPLY && kind == ZINC_OPT_LAMB)))
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: optimizer kind %d (%s) pass %d; every "
                      "optimizer has pass UPDATE (0), Lamb also APPLY (1)", ci->ordinal, kind,
                      name, pass);
  const int lamb_update = kind == ZINC_OPT_LAMB && pass == ZINC_OPT_PASS_UPDATE;
  if (lamb_update && nseg > 0 && !norms)
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: Lamb UPDATE without norms",
                      ci->ordinal);
  for (int i = 0; i < nseg; i++) {
    const zinc_opt_seg *g = &segs[i];
    if (g->n < 0 || (g->param_out && !dtype_ok(g->param_dtype)) || g->coef < 0 ||
        g->coef >= ncoef || coefs[g->coef].kind != kind ||
        (g->n > 0 && !optim_seg_complete(&coefs[g->coef], pass, g)))
      return zinc_error(ZINC_ERR_INVALID, "cuda device %d: %s segment %d of %d is malformed "
                        "(n=%lld, grad dtype %d, param dtype %d, coefficient %d of %d, master "
                        "dtype %d, state dtype %d (f32 or bf16), or an array it needs is NULL)",
                        ci->ordinal, name, i, nseg, (long long)g->n, g->grad_dtype,
                        g->param_dtype, g->coef, ncoef, g->master_dtype, g->state_dtype);
  }
  if (nseg == 0)
    return ZINC_OK;
  ZINC_CHECK(bind(ci));
  if (lamb_update) {
    zinc_stream *on = s ? s : &ci->compute;
    ZINC_CHECK(scratch_reserve(d, on, zinc_cuda_lamb_workspace(segs, nseg)));
    cudaError_t err = zinc_cuda_lamb_update(coefs, ncoef, segs, nseg, on->scratch,
                                            on->scratch_bytes, norms, on->s);
    return err == cudaSuccess ? ZINC_OK
                              : cuda_fail(ci, err, "Lamb UPDATE over %d segments", nseg);
  }
  /* one launch series per run of segments with the same coefficients */
  for (int i = 0; i < nseg;) {
    int j = i + 1;
    while (j < nseg && segs[j].coef == segs[i].coef)
      j++;
    cudaError_t err =
        zinc_cuda_optim(&coefs[segs[i].coef], segs + i, j - i, pass, raw_stream(ci, s));
    if (err != cudaSuccess)
      return cuda_fail(ci, err, "fused %s over %d segments", name, j - i);
    i = j;
  }
  return ZINC_OK;
}

static zinc_status cuda_sumsq(zinc_device *d, zinc_stream *s, const zinc_sumsq_chunk *chunks,
                              int n, double *partials) {
  cuda_impl *ci = impl_of(d);
  if (n <= 0)
    return n < 0 ? zinc_error(ZINC_ERR_INVALID, "cuda device %d: sumsq of %d chunks",
                              ci->ordinal, n)
                 : ZINC_OK;
  ZINC_CHECK(bind(ci));
  size_t need = 0;
  cudaError_t err = zinc_cuda_sumsq_workspace(chunks, n, &need);
  if (err == cudaErrorInvalidValue)
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: sumsq: a chunk of the %d has a bad "
                      "dtype, a negative size or a NULL pointer", ci->ordinal, n);
  if (err != cudaSuccess)
    return cuda_fail(ci, err, "sizing the sum-of-squares workspace");
  zinc_stream *on = s ? s : &ci->compute;
  ZINC_CHECK(scratch_reserve(d, on, need));
  err = zinc_cuda_sumsq(chunks, n, on->scratch, on->scratch_bytes, partials, on->s);
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "sum of squares of %d chunks", n);
}

static zinc_status cuda_accumulate_f32(zinc_device *d, zinc_stream *s, float *dst,
                                       const void *src, int src_dtype, int64_t n,
                                       int overwrite) {
  cuda_impl *ci = impl_of(d);
  if (n < 0 || !dtype_ok(src_dtype))
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: accumulate of %lld elements of "
                      "dtype %d", ci->ordinal, (long long)n, src_dtype);
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_accumulate_f32(dst, src, src_dtype, n, overwrite,
                                             raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK
                            : cuda_fail(ci, err, "accumulating %lld elements", (long long)n);
}

static zinc_status cuda_cast(zinc_device *d, zinc_stream *s, void *dst, int dst_dtype,
                             const void *src, int src_dtype, int64_t n) {
  cuda_impl *ci = impl_of(d);
  if (n < 0 || !dtype_ok(dst_dtype) || !dtype_ok(src_dtype))
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: cast of %lld elements from dtype %d "
                      "to %d", ci->ordinal, (long long)n, src_dtype, dst_dtype);
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_cast(dst, dst_dtype, src, src_dtype, n, raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK : cuda_fail(ci, err, "cast of %lld elements", (long long)n);
}

static zinc_status cuda_scale(zinc_device *d, zinc_stream *s, void *x, int dtype, int64_t n,
                              float factor) {
  cuda_impl *ci = impl_of(d);
  if (n < 0 || !dtype_ok(dtype))
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: scaling %lld elements of dtype %d",
                      ci->ordinal, (long long)n, dtype);
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_scale(x, dtype, n, factor, raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK
                            : cuda_fail(ci, err, "scaling %lld elements", (long long)n);
}

static zinc_status cuda_encode(zinc_device *d, zinc_stream *s, zinc_codec c, void *dst,
                               const void *src, int src_dtype, int64_t n, void *ef,
                               float ef_beta, uint64_t seed) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(zinc_codec_check("cuda codec encode", 1, c, dst, src, src_dtype, n, ef, ef_beta,
                              0));
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_codec_encode(c, dst, src, src_dtype, n, ef, ef_beta, seed,
                                           raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK
                            : cuda_fail(ci, err, "%s encode of %lld elements",
                                        zinc_codec_name(c), (long long)n);
}

static zinc_status cuda_decode(zinc_device *d, zinc_stream *s, zinc_codec c, void *dst,
                               int dst_dtype, const void *src, int64_t n, int accumulate) {
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(zinc_codec_check("cuda codec decode", 0, c, dst, src, dst_dtype, n, NULL, 0.0f,
                              accumulate));
  ZINC_CHECK(bind(ci));
  cudaError_t err = zinc_cuda_codec_decode(c, dst, dst_dtype, src, n, accumulate,
                                           raw_stream(ci, s));
  return err == cudaSuccess ? ZINC_OK
                            : cuda_fail(ci, err, "%s decode of %lld elements",
                                        zinc_codec_name(c), (long long)n);
}

/* -------------------------------------------------------- information */

static zinc_status cuda_mem_info(zinc_device *d, int64_t *free_bytes, int64_t *total_bytes) {
  cuda_impl *ci = impl_of(d);
  size_t f = 0, t = 0;
  *free_bytes = *total_bytes = -1;
  ZINC_CHECK(bind(ci));
  cudaError_t err = cudaMemGetInfo(&f, &t);
  if (err != cudaSuccess)
    return cuda_fail(ci, err, "cudaMemGetInfo");
  *free_bytes = (int64_t)f;
  *total_bytes = (int64_t)t;
  return ZINC_OK;
}

static void cuda_destroy(zinc_device *d) {
  cuda_impl *ci = impl_of(d);
  if (bind(ci) != ZINC_OK)
    zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
  while (ci->nstreams > 1) {
    zinc_log(ZINC_LOG_WARN, "cuda device %d: a stream was never destroyed; destroying it "
             "with the device", ci->ordinal);
    cuda_stream_destroy(d, ci->streams[ci->nstreams - 1]); /* [0] stays the compute stream */
  }
  if (ci->compute.scratch)
    cuda_free(d, ci->compute.scratch, ci->compute.scratch_bytes, ZINC_LOC_DEVICE,
              ZINC_MEM_BUFFERS);
  /* a pool that waited past its deadline gives nothing back, nor does the
   * other: cudaFree and cudaFreeHost would wait for the same device */
  for (int loc = 0; loc < 2; loc++) /* ZINC_LOC_DEVICE, ZINC_LOC_HOST */
    if (ci->pool[loc] && zinc_cuda_pool_flush(ci->pool[loc]) != ZINC_OK) {
      zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
      if (ci->pool[ZINC_LOC_DEVICE])
        zinc_cuda_pool_set_stuck(ci->pool[ZINC_LOC_DEVICE]);
      if (ci->pool[ZINC_LOC_HOST])
        zinc_cuda_pool_set_stuck(ci->pool[ZINC_LOC_HOST]);
    }
  zinc_cuda_pool_destroy(ci->pool[ZINC_LOC_DEVICE]);
  zinc_cuda_pool_destroy(ci->pool[ZINC_LOC_HOST]);
  if (ci->near)
    hwloc_bitmap_free(ci->near);
  zinc_topology_destroy(ci->topo);
  zinc_nvml_close(ci->nvml);
  pthread_mutex_destroy(&ci->lock);
  free(ci);
  free(d);
}

static const zinc_device_ops cuda_ops = {
    .name = "cuda",
    .is_gpu = 1,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .fill_zero = cuda_fill_zero,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_sync = cuda_event_sync,
    .optim = cuda_optim,
    .sumsq = cuda_sumsq,
    .accumulate_f32 = cuda_accumulate_f32,
    .cast = cuda_cast,
    .scale = cuda_scale,
    .encode = cuda_encode,
    .decode = cuda_decode,
    .mem_info = cuda_mem_info,
    .destroy = cuda_destroy,
};

/* -------------------------------------------------------------- public */

int zinc_device_cuda_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

zinc_status zinc_device_cuda_stream_ordinal(void *stream, int *ordinal) {
  *ordinal = -1;
  if (!stream)
    return ZINC_OK;
  int dev = -1;
  cudaError_t err = cudaStreamGetDevice((cudaStream_t)stream, &dev);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return zinc_error(ZINC_ERR_DEVICE, "zinc_options.cuda_stream %p: CUDA cannot tell its "
                      "device (%s); give a stream this process created, or NULL", stream,
                      cudaGetErrorString(err));
  }
  *ordinal = dev;
  return ZINC_OK;
}

zinc_status zinc_device_cuda_create(int ordinal, void *compute_stream, zinc_device **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "cuda device: NULL output pointer");
  *out = NULL;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return zinc_error(ZINC_ERR_DEVICE, "cuda device %d: no usable CUDA device (%s); check the "
                      "driver and CUDA_VISIBLE_DEVICES, or run on the CPU device", ordinal,
                      err == cudaSuccess ? "none visible" : cudaGetErrorString(err));
  }
  /* CUDA_VISIBLE_DEVICES belongs to the CUDA runtime; it is read here only
   * to be quoted in the message, so plain getenv (not base/env.h). */
  if (ordinal < 0 || ordinal >= count)
    return zinc_error(ZINC_ERR_DEVICE, "cuda device %d does not exist: %d visible (ordinals "
                      "0..%d; CUDA_VISIBLE_DEVICES=%s)", ordinal, count, count - 1,
                      getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");

  zinc_device *d = calloc(1, sizeof *d);
  cuda_impl *ci = calloc(1, sizeof *ci);
  if (!d || !ci) {
    free(d);
    free(ci);
    return zinc_error(ZINC_ERR_NOMEM, "cuda device %d: out of host memory", ordinal);
  }
  ci->ordinal = ordinal;
  ci->numa = -1;
  pthread_mutex_init(&ci->lock, NULL);
  ci->compute.s = (cudaStream_t)compute_stream;
  ci->compute.owned = 0;
  ci->streams[0] = &ci->compute;
  ci->nstreams = 1;
  d->ops = &cuda_ops;
  d->impl = ci;
  d->compute = &ci->compute;

  zinc_status st;
  ZINC_CHECK_GOTO(bind(ci), st, fail);
  ZINC_CHECK_GOTO(zinc_cuda_pool_create(ordinal, ZINC_LOC_DEVICE, &ci->pool[ZINC_LOC_DEVICE]),
                  st, fail);
  ZINC_CHECK_GOTO(zinc_cuda_pool_create(ordinal, ZINC_LOC_HOST, &ci->pool[ZINC_LOC_HOST]), st,
                  fail);
  ci->nvml = zinc_nvml_open(ordinal);
  place_host_memory(ci);

  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
    zinc_log(ZINC_LOG_INFO, "cuda device %d: %s, sm_%d%d, %.1f GiB, compute stream %p%s",
             ordinal, prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1 << 30), compute_stream,
             ci->nvml ? ", NVML loaded" : "");
  (void)cudaGetLastError();
  *out = d;
  return ZINC_OK;
fail:
  cuda_destroy(d);
  return st;
}

zinc_status zinc_device_cuda_pool_stats(zinc_device *d, int location, zinc_cuda_pool_stats *out) {
  if (!d || d->ops != &cuda_ops || !out)
    return zinc_error(ZINC_ERR_INVALID, "pool statistics: not a cuda device");
  zinc_cuda_pool *pool = pool_for(impl_of(d), location);
  if (!pool)
    return zinc_error(ZINC_ERR_INVALID, "pool statistics: no pool for location %d", location);
  zinc_cuda_pool_get_stats(pool, out);
  return ZINC_OK;
}

zinc_status zinc_device_cuda_pool_trim(zinc_device *d) {
  if (!d || d->ops != &cuda_ops)
    return zinc_error(ZINC_ERR_INVALID, "pool trim: not a cuda device");
  cuda_impl *ci = impl_of(d);
  ZINC_CHECK(bind(ci));
  ZINC_CHECK(zinc_cuda_pool_trim(ci->pool[ZINC_LOC_DEVICE]));
  return zinc_cuda_pool_trim(ci->pool[ZINC_LOC_HOST]);
}

int zinc_device_cuda_numa_node(zinc_device *d) {
  return d && d->ops == &cuda_ops ? impl_of(d)->numa : -1;
}

zinc_status zinc_device_cuda_set_wait(zinc_device *d, double seconds) {
  if (!d || d->ops != &cuda_ops || !(seconds >= 0))
    return zinc_error(ZINC_ERR_INVALID, "pool wait of %g s: not a cuda device, or negative",
                      seconds);
  zinc_cuda_pool_set_wait(impl_of(d)->pool[ZINC_LOC_DEVICE], seconds);
  zinc_cuda_pool_set_wait(impl_of(d)->pool[ZINC_LOC_HOST], seconds);
  return ZINC_OK;
}

zinc_status zinc_device_cuda_pci_bus_id(zinc_device *d, char *buf, int len) {
  if (!d || d->ops != &cuda_ops || !buf || len < 1)
    return zinc_error(ZINC_ERR_INVALID, "PCI bus id: not a cuda device");
  cuda_impl *ci = impl_of(d);
  cudaError_t err = cudaDeviceGetPCIBusId(buf, len, ci->ordinal);
  if (err != cudaSuccess)
    return cuda_fail(ci, err, "cudaDeviceGetPCIBusId");
  buf[len - 1] = '\0';
  return ZINC_OK;
}

void *zinc_device_cuda_stream(zinc_device *d, zinc_stream *s) {
  if (!d || d->ops != &cuda_ops)
    return NULL;
  return (void *)raw_stream(impl_of(d), s);
}

int64_t zinc_device_cuda_process_bytes(zinc_device *d) {
  if (!d || d->ops != &cuda_ops)
    return -1;
  return zinc_nvml_process_bytes(impl_of(d)->nvml);
}

#else /* !ZINC_HAVE_CUDA */

int zinc_device_cuda_count(void) { return 0; }

zinc_status zinc_device_cuda_create(int ordinal, void *compute_stream, zinc_device **out) {
  (void)compute_stream;
  if (out)
    *out = NULL;
  return zinc_error(ZINC_ERR_UNSUPPORTED, "cuda device %d: zinc was built without CUDA; "
                    "rebuild with -DZINC_CUDA=ON (CUDA toolkit and NCCL installed) or use the "
                    "CPU device", ordinal);
}

zinc_status zinc_device_cuda_stream_ordinal(void *stream, int *ordinal) {
  (void)stream;
  *ordinal = -1;
  return ZINC_OK;
}

int zinc_device_cuda_numa_node(zinc_device *d) {
  (void)d;
  return -1;
}

zinc_status zinc_device_cuda_set_wait(zinc_device *d, double seconds) {
  (void)d;
  (void)seconds;
  return zinc_error(ZINC_ERR_UNSUPPORTED, "pool wait: zinc was built without CUDA");
}

zinc_status zinc_device_cuda_pci_bus_id(zinc_device *d, char *buf, int len) {
  (void)d;
  if (buf && len > 0)
    buf[0] = '\0';
  return zinc_error(ZINC_ERR_UNSUPPORTED, "PCI bus id: zinc was built without CUDA");
}

zinc_status zinc_device_cuda_pool_stats(zinc_device *d, int location, zinc_cuda_pool_stats *out) {
  (void)d;
  (void)location;
  (void)out;
  return zinc_error(ZINC_ERR_UNSUPPORTED, "pool statistics: zinc was built without CUDA");
}

zinc_status zinc_device_cuda_pool_trim(zinc_device *d) {
  (void)d;
  return zinc_error(ZINC_ERR_UNSUPPORTED, "pool trim: zinc was built without CUDA");
}

void *zinc_device_cuda_stream(zinc_device *d, zinc_stream *s) {
  (void)d;
  (void)s;
  return NULL;
}

int64_t zinc_device_cuda_process_bytes(zinc_device *d) {
  (void)d;
  return -1;
}

#endif /* ZINC_HAVE_CUDA */
