/*
 * support.h — what every part of the engine may call, and which calls
 * nothing above it (support.c): engine buffers from the engine's device
 * (zeroed or not, host, device or comm-shared memory, accounted to the
 * profiler) with the test hooks that fail or poison them, host f32
 * values into device memory, and the two waits: for the engine's queued
 * device work and for a comm request. Failure agreement, the other
 * bottom file, is failure.h's.
 */
#ifndef ZINC_ENGINE_SUPPORT_H
#define ZINC_ENGINE_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "zinc.h"

/* ------------------------------------------------------------ support.c */
/* An engine buffer of `bytes` at `location` from the engine's device,
 * accounted to `category`, zero-filled: host memory already on return (no
 * zeroing left queued), device memory by work queued on e->stream;
 * zinc_engine_buffer_free gives it back (same bytes, location and
 * category; NULL p is a no-op). */
zinc_status zinc_engine_buffer_alloc(zinc_engine *e, size_t bytes, int location, int category,
                                     void **out, const char *what);
/* The same, not zeroed: for a buffer whose every byte is written before
 * anything reads it (a gathered module: every unit's all-gather fills it). */
zinc_status zinc_engine_buffer_alloc_unzeroed(zinc_engine *e, size_t bytes, int location,
                                              int category, void **out, const char *what);
void zinc_engine_buffer_free(zinc_engine *e, void *p, size_t bytes, int location, int category);
/* Zeroed host memory for a call's own work (not accounted to the profiler;
 * the test hook below can fail it like any engine allocation). */
zinc_status zinc_engine_host_calloc(zinc_engine *e, void **out, size_t n, size_t size,
                                    const char *what);
/* Tests: make the nth engine allocation from now fail with ZINC_ERR_NOMEM
 * (0: never). */
void zinc_engine_inject_alloc_fault(zinc_engine *e, int64_t nth);
/* Tests: fill every later unzeroed allocation with `byte` (cpu device; < 0:
 * stop), to prove that nothing reads a byte the code did not write. */
void zinc_engine_poison_unzeroed(zinc_engine *e, int byte);
/* Memory that collectives read from (comm-shared on the cpu device). */
zinc_status zinc_engine_comm_buffer_alloc(zinc_engine *e, size_t bytes, int category, void **out,
                                          int *shared, const char *what);
void zinc_engine_comm_buffer_free(zinc_engine *e, void *p, size_t bytes, int category, int shared);
/* Host f32 values -> device memory in dtype (scratch: n elements of 4 B). */
zinc_status zinc_engine_put(zinc_engine *e, void *dst, int dtype, const float *src, int64_t n,
                            void *scratch);
/* Wait for the engine's queued device work (a no-op on the cpu device),
 * the NCCL batches the compute stream waits for included (settled with the
 * comm timeout first: comm.h, "Streams"); call it before the host reads
 * what device work or a comm wait produced. */
zinc_status zinc_engine_sync(zinc_engine *e);
/* Wait for a comm request, timing the wait: on the host (mpi), or by
 * ordering the compute stream after it (nccl; the host reads only after
 * zinc_engine_sync). Consumes the request whatever it returns. */
zinc_status zinc_engine_wait(zinc_engine *e, zinc_comm *c, zinc_comm_req *req);

#endif /* ZINC_ENGINE_SUPPORT_H */
