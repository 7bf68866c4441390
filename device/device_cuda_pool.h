/*
 * device_cuda_pool.h — the cuda device's caching allocator
 * (device/device_cuda_pool.c), internal to device/: device/device_cuda.c
 * owns one pool per location and the tests check its size buckets. Its
 * statistics struct, which callers of the device read, is in
 * device/device_cuda.h.
 *
 * Declared only in the CUDA build (ZINC_HAVE_CUDA).
 */
#ifndef ZINC_DEVICE_CUDA_POOL_H
#define ZINC_DEVICE_CUDA_POOL_H

#include <stddef.h>

#include "device/device_cuda.h"

#ifdef ZINC_HAVE_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A size-bucketed, stream-ordered cache of cudaMalloc (ZINC_LOC_DEVICE) or
 * cudaHostAlloc (ZINC_LOC_HOST) blocks. A freed block keeps one event per
 * stream the device tracked at the time of the free and is reused only once
 * all of them have completed, so work queued before a free never sees its
 * memory handed to someone else. Thread-safe. */
typedef struct zinc_cuda_pool zinc_cuda_pool;

/* How long the pool waits for the device (the last uses of freed blocks)
 * before it fails naming what it waited for, unless zinc_cuda_pool_set_wait
 * says otherwise (the engine sets its comm timeout). */
#define ZINC_CUDA_POOL_WAIT_S 600.0

zinc_status zinc_cuda_pool_create(int ordinal, int location, zinc_cuda_pool **out);
/* The deadline of the pool's waits, in seconds. */
void zinc_cuda_pool_set_wait(zinc_cuda_pool *p, double seconds);
/* Host pool: allocate new blocks with the calling thread's memory bound
 * (preferred, not strict) to `nodeset` of `topo` — the NUMA node nearest
 * the GPU. Both stay owned by the caller and must outlive the pool. */
void zinc_cuda_pool_place_host(zinc_cuda_pool *p, void *hwloc_topo, const void *nodeset);
/* Free every block (cached or still live) back to CUDA. Accepts NULL.
 * When the device did not finish within the deadline (here or at an
 * earlier wait), nothing is given back (cudaFree would wait for it): the
 * memory goes with the process, said at error level. */
void zinc_cuda_pool_destroy(zinc_cuda_pool *p);
/* bytes == 0 gives NULL. */
zinc_status zinc_cuda_pool_alloc(zinc_cuda_pool *p, size_t bytes, void **out);
/* Return ptr (allocated with `bytes`) to the cache, ordered after the work
 * already queued on streams[0..nstreams). ZINC_ERR_INVALID for a pointer
 * the pool did not hand out or a size that does not match. */
zinc_status zinc_cuda_pool_free(zinc_cuda_pool *p, void *ptr, size_t bytes,
                                const cudaStream_t *streams, int nstreams);
/* Wait (up to the deadline) for every cached block's last uses and give
 * the blocks back to CUDA; on a timeout the pool is stuck (below). */
zinc_status zinc_cuda_pool_flush(zinc_cuda_pool *p);
/* Mark the pool stuck: its destroy gives nothing back to CUDA (cudaFree and
 * cudaFreeHost wait for the whole device). For the other pool of a device
 * whose work did not finish. */
void zinc_cuda_pool_set_stuck(zinc_cuda_pool *p);
/* Free cached blocks whose events have completed. */
zinc_status zinc_cuda_pool_trim(zinc_cuda_pool *p);
void zinc_cuda_pool_get_stats(zinc_cuda_pool *p, zinc_cuda_pool_stats *out);
/* The block size a request is rounded to (exposed for the tests). */
size_t zinc_cuda_pool_round(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_HAVE_CUDA */
#endif /* ZINC_DEVICE_CUDA_POOL_H */
