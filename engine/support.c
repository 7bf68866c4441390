/*
 * support.c — what every part of the engine may call: engine buffers
 * from the engine's device (host, device or comm-shared memory; zeroed,
 * or not where every byte is written before anything reads it; accounted
 * to the profiler by category), the test hooks that fail the n-th
 * allocation or poison unzeroed ones, host f32 values into device memory
 * in a parameter dtype, and the waits for the engine's queued device work
 * and for a comm request (timed as comm wait).
 *
 * It calls nothing in the engine above it: only failure agreement
 * (failure.c, for the comm-shared allocation, a collective) and the
 * profiler's accounting.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/memory/profiler.h"
#include "engine/support.h"

/* ------------------------------------------------------------ buffers */

/* The test hook: the n-th allocation from now fails as if out of memory. */
void zinc_engine_inject_alloc_fault(zinc_engine *e, int64_t nth) {
  e->alloc_fault_at = nth > 0 ? e->alloc_count + nth : 0;
}

static int alloc_faulted(zinc_engine *e) {
  e->alloc_count++;
  return e->alloc_fault_at > 0 && e->alloc_count == e->alloc_fault_at;
}

/* The test hook: unzeroed allocations on the cpu device are filled with
 * `byte` (< 0: left as the allocator gives them). */
void zinc_engine_poison_unzeroed(zinc_engine *e, int byte) {
  e->poison_unzeroed = byte < 0 ? 0 : (byte & 0xff) + 1;
}

zinc_status zinc_engine_buffer_alloc_unzeroed(zinc_engine *e, size_t bytes, int location,
                                              int category, void **out, const char *what) {
  *out = NULL;
  if (alloc_faulted(e))
    return zinc_error(ZINC_ERR_NOMEM, "allocating %s (%zu bytes on the %s): out of memory "
                      "(injected by the test hook)", what, bytes,
                      zinc_mem_location_name(location));
  zinc_status st = e->dev->ops->alloc(e->dev, bytes ? bytes : 64, location, category, out);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "allocating %s (%zu bytes on the %s)", what, bytes,
                           zinc_mem_location_name(location));
  if (e->poison_unzeroed && !e->dev->ops->is_gpu && location != ZINC_LOC_NVME)
    memset(*out, e->poison_unzeroed - 1, bytes);
  return ZINC_OK;
}

zinc_status zinc_engine_buffer_alloc(zinc_engine *e, size_t bytes, int location, int category,
                                     void **out, const char *what) {
  ZINC_CHECK(zinc_engine_buffer_alloc_unzeroed(e, bytes, location, category, out, what));
  /* Host memory is zeroed here, on the host: zeroing it with a kernel
   * queued on the engine's stream would leave a write pending that neither
   * the host (the CPU optimizer writing a staging buffer) nor a copy queued
   * on another stream waits for, so the zeros could land after the data.
   * The memset cannot race queued work either: the cuda pool hands a block
   * out only once every stream's last use of it has completed
   * (device/device_cuda_pool.c). Device memory is zeroed on the engine's
   * stream, which orders it before the engine's own work there. */
  if (location == ZINC_LOC_HOST) {
    memset(*out, 0, bytes);
    return ZINC_OK;
  }
  zinc_status st = e->dev->ops->fill_zero(e->dev, *out, bytes, e->stream);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "zero-filling %s", what);
  return ZINC_OK;
}

zinc_status zinc_engine_host_calloc(zinc_engine *e, void **out, size_t n, size_t size,
                                    const char *what) {
  *out = NULL;
  if (alloc_faulted(e))
    return zinc_error(ZINC_ERR_NOMEM, "allocating %s (%zu bytes of host memory): out of "
                      "memory (injected by the test hook)", what, n * size);
  return zinc_calloc(out, n, size, what);
}

void zinc_engine_buffer_free(zinc_engine *e, void *p, size_t bytes, int location, int category) {
  if (p)
    e->dev->ops->free(e->dev, p, bytes ? bytes : 64, location, category);
}

/* Gradient memory that collectives read from: on the cpu device, memory the
 * comm can share with its peers on the node, so reductions need no copy.
 * Collective over the data-parallel group: every rank calls it at the same
 * point, and a rank that cannot allocate tells its peers before the shared
 * allocation (itself a collective) instead of leaving them inside it. */
zinc_status zinc_engine_comm_buffer_alloc(zinc_engine *e, size_t bytes, int category, void **out,
                                          int *shared, const char *what) {
  *shared = 0;
  *out = NULL;
  zinc_status st;
  if (!e->dev->ops->is_gpu && e->dp->ops->alloc_shared && e->dp->size > 1) {
    st = alloc_faulted(e) ? zinc_error(ZINC_ERR_NOMEM, "allocating %s (%zu bytes, shared "
                                       "with the node's ranks): out of memory (injected by "
                                       "the test hook)", what, bytes)
                          : ZINC_OK;
    ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
    st = e->dp->ops->alloc_shared(e->dp, bytes ? bytes : 64, out);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "allocating %s (%zu bytes, shared with the node's ranks)",
                             what, bytes);
    memset(*out, 0, bytes);
    zinc_prof_account(e->prof, ZINC_LOC_DEVICE, category, (int64_t)bytes);
    *shared = 1;
    return ZINC_OK;
  }
  st = zinc_engine_buffer_alloc(e, bytes, ZINC_LOC_DEVICE, category, out, what);
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st != ZINC_OK && *out) {
    zinc_engine_buffer_free(e, *out, bytes, ZINC_LOC_DEVICE, category);
    *out = NULL;
  }
  return st;
}

void zinc_engine_comm_buffer_free(zinc_engine *e, void *p, size_t bytes, int category, int shared) {
  if (!p)
    return;
  if (shared) {
    e->dp->ops->free_shared(e->dp, p);
    zinc_prof_account(e->prof, ZINC_LOC_DEVICE, category, -(int64_t)bytes);
  } else {
    zinc_engine_buffer_free(e, p, bytes, ZINC_LOC_DEVICE, category);
  }
}

/* Host f32 values -> device memory in `dtype`. */
zinc_status zinc_engine_put(zinc_engine *e, void *dst, int dtype, const float *src, int64_t n,
                            void *scratch) {
  const void *from = src;
  if (dtype != ZINC_F32) {
    for (int64_t i = 0; i < n; i++)
      zinc_store_from_f32(scratch, i, dtype, src[i]);
    from = scratch;
  }
  return e->dev->ops->copy(e->dev, dst, from, (size_t)n * zinc_dt_size(dtype), e->stream);
}

/* ------------------------------------------------------------- waits */

zinc_status zinc_engine_sync(zinc_engine *e) {
  if (!e->dev->ops->is_gpu)
    return ZINC_OK; /* the cpu device finishes work at the call */
  /* the NCCL comms' waits are device-side: the host reads after their
   * batches are done, or learns that they failed (comm.h, "Streams") */
  ZINC_CHECK(zinc_comm_settle(e->dp));
  if (e->mp != e->dp)
    ZINC_CHECK(zinc_comm_settle(e->mp));
  if (e->hpz_comm != e->dp)
    ZINC_CHECK(zinc_comm_settle(e->hpz_comm));
  return e->dev->ops->stream_sync(e->dev, e->stream);
}

zinc_status zinc_engine_wait(zinc_engine *e, zinc_comm *c, zinc_comm_req *req) {
  double t0 = zinc_now();
  zinc_status st = c->ops->wait(c, req);
  e->t_comm_wait += zinc_now() - t0;
  return st;
}
