/*
 * device_cuda_pool.c — the cuda device's caching allocator: device memory
 * from cudaMalloc and pinned host memory from cudaHostAlloc, kept after a
 * free and handed out again, so that a steady-state training step calls
 * neither cudaMalloc nor cudaFree (both synchronise the whole device).
 *
 * Buckets: a request is rounded up to a block size (zinc_cuda_pool_round:
 * 512-byte granularity for small requests, eight sizes per power of two
 * above, steps of at most 2 MiB for large ones, so at most 12.5% is wasted)
 * and a cached block is reused only for a request of exactly its block size.
 * Blocks are never split or merged.
 *
 * Stream order: the device has no idea which streams still read a block
 * when it is freed, so the free records an event on every stream the device
 * tracks (passed in) and the block is reused only when all of those events
 * have completed. When no ready block fits, a new one is allocated: during
 * the first steps the cache grows to the working set, then stops. When
 * cudaMalloc runs out of memory, the pool waits for the cached blocks, gives
 * them all back to CUDA and tries once more.
 *
 * Waits: never cudaEventSynchronize or cudaDeviceSynchronize, which block
 * for ever behind a kernel that never ends (an NCCL collective waiting for
 * a lost peer): the pool polls the events or streams against a deadline
 * (device/device_wait.h; zinc_cuda_pool_set_wait, the engine's comm
 * timeout) and fails naming what it waited for. A block whose last use did
 * not finish is never handed out again nor given back to CUDA (cudaFree
 * would itself wait for the device): it is left to the process's end.
 *
 * Invariants (under `lock`): every block handed out is in `live` with its
 * rounded and requested sizes; every cached block is in `cached` with its
 * pending events; bytes_reserved = sum of live and cached block sizes.
 */
#include "device/device_cuda_pool.h"

#ifdef ZINC_HAVE_CUDA

#include <hwloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "device/device_wait.h"

typedef struct {
  void *ptr;
  size_t size;                               /* rounded bytes */
  int nevents;                               /* last uses not yet seen done */
  cudaEvent_t events[ZINC_CUDA_MAX_STREAMS];
} cached_block;

typedef struct {
  void *ptr;                                 /* NULL: empty slot */
  size_t size;                               /* rounded bytes */
  size_t requested;
} live_block;

struct zinc_cuda_pool {
  int ordinal;
  int location;                              /* ZINC_LOC_DEVICE | ZINC_LOC_HOST */
  pthread_mutex_t lock;
  cached_block *cached;                      /* (ncached) free blocks */
  size_t ncached, cap_cached;
  live_block *live;                          /* (live_cap) open addressing */
  size_t live_cap, nlive;
  cudaEvent_t *spare;                        /* (nspare) events to reuse */
  size_t nspare, cap_spare;
  zinc_cuda_pool_stats st;
  hwloc_topology_t topo;                     /* host: place blocks on nodeset */
  hwloc_const_bitmap_t nodeset;
  double wait_s;                             /* deadline of every wait */
  int stuck;                                 /* a wait timed out: the device may
                                                never finish; give nothing back */
};

static const char *loc_name(int location) {
  return location == ZINC_LOC_HOST ? "pinned host" : "device";
}

size_t zinc_cuda_pool_round(size_t bytes) {
  const size_t min_step = 512, max_step = (size_t)2 << 20;
  if (bytes <= min_step)
    return min_step;
  size_t top = (size_t)1 << (63 - __builtin_clzll((unsigned long long)bytes));
  size_t step = top / 8;
  if (step < min_step)
    step = min_step;
  if (step > max_step)
    step = max_step;
  return (bytes + step - 1) / step * step;
}

/* --------------------------------------------------------- live blocks */

static size_t live_slot(const zinc_cuda_pool *p, const void *ptr) {
  uint64_t h = ((uint64_t)(uintptr_t)ptr >> 9) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & (p->live_cap - 1);
}

static long live_find(const zinc_cuda_pool *p, const void *ptr) {
  if (!p->live_cap)
    return -1;
  for (size_t i = live_slot(p, ptr);; i = (i + 1) & (p->live_cap - 1)) {
    if (p->live[i].ptr == ptr)
      return (long)i;
    if (!p->live[i].ptr)
      return -1;
  }
}

static void live_put(live_block *table, size_t cap, const zinc_cuda_pool *p, live_block b) {
  size_t i = live_slot(p, b.ptr);
  while (table[i].ptr)
    i = (i + 1) & (cap - 1);
  table[i] = b;
}

static zinc_status live_insert(zinc_cuda_pool *p, live_block b) {
  if (2 * (p->nlive + 1) > p->live_cap) {
    size_t cap = p->live_cap ? 2 * p->live_cap : 256;
    live_block *table = calloc(cap, sizeof *table);
    if (!table)
      return zinc_error(ZINC_ERR_NOMEM, "cuda pool: out of host memory for the block table");
    live_block *old = p->live;
    size_t old_cap = p->live_cap;
    p->live = table;
    p->live_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].ptr)
        live_put(table, cap, p, old[i]);
    free(old);
  }
  live_put(p->live, p->live_cap, p, b);
  p->nlive++;
  return ZINC_OK;
}

/* Linear probing deletion: shift later entries of the run back. */
static void live_remove(zinc_cuda_pool *p, size_t i) {
  size_t mask = p->live_cap - 1;
  p->live[i].ptr = NULL;
  for (size_t j = (i + 1) & mask; p->live[j].ptr; j = (j + 1) & mask) {
    size_t home = live_slot(p, p->live[j].ptr);
    /* move j into the hole at i unless its home lies cyclically in (i, j] */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      p->live[i] = p->live[j];
      p->live[j].ptr = NULL;
      i = j;
    }
  }
  p->nlive--;
}

/* ------------------------------------------------------------- events */

static zinc_status event_take(zinc_cuda_pool *p, cudaEvent_t *out) {
  if (p->nspare) {
    *out = p->spare[--p->nspare];
    return ZINC_OK;
  }
  cudaError_t err = cudaEventCreateWithFlags(out, cudaEventDisableTiming);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "cuda device %d pool: cudaEventCreate: %s", p->ordinal,
                      cudaGetErrorString(err));
  return ZINC_OK;
}

static void event_give(zinc_cuda_pool *p, cudaEvent_t e) {
  if (p->nspare == p->cap_spare) {
    size_t cap = p->cap_spare ? 2 * p->cap_spare : 64;
    cudaEvent_t *spare = realloc(p->spare, cap * sizeof *spare);
    if (!spare) {
      cudaEventDestroy(e);
      return;
    }
    p->spare = spare;
    p->cap_spare = cap;
  }
  p->spare[p->nspare++] = e;
}

/* 1 when every recorded last use of b has completed (its events go back to
 * the spares as they are seen done). A failed query counts as done: the
 * device is then in error and every later CUDA call says so. */
static int block_ready(zinc_cuda_pool *p, cached_block *b) {
  int keep = 0;
  for (int i = 0; i < b->nevents; i++) {
    if (cudaEventQuery(b->events[i]) == cudaErrorNotReady)
      b->events[keep++] = b->events[i];
    else
      event_give(p, b->events[i]);
  }
  b->nevents = keep;
  (void)cudaGetLastError(); /* a failed query must not linger as the last error */
  return keep == 0;
}

typedef struct {
  zinc_cuda_pool *p;
  cached_block *b;
} block_query;

static zinc_status block_query_done(void *ctx, int *done) {
  block_query *q = ctx;
  *done = block_ready(q->p, q->b);
  return ZINC_OK;
}

static const char stuck_hint[] =
    "a kernel on one of the device's streams never ended, e.g. an NCCL collective waiting for "
    "a lost peer; the comm's error says which";

/* Wait, up to the pool's deadline, for b's last uses. */
static zinc_status block_wait(zinc_cuda_pool *p, cached_block *b) {
  block_query q = {p, b};
  char what[160];
  snprintf(what, sizeof what, "cuda device %d: waiting for the last uses of a freed %s block "
           "of %zu bytes", p->ordinal, loc_name(p->location), b->size);
  zinc_status st = zinc_wait_deadline(block_query_done, &q, p->wait_s, what, stuck_hint);
  if (st != ZINC_OK)
    p->stuck = 1;
  return st;
}

typedef struct {
  const cudaStream_t *streams;
  int n;
} streams_query;

static zinc_status streams_query_done(void *ctx, int *done) {
  streams_query *q = ctx;
  *done = 1;
  for (int i = 0; i < q->n && *done; i++)
    *done = cudaStreamQuery(q->streams[i]) != cudaErrorNotReady; /* an error counts as done */
  (void)cudaGetLastError();
  return ZINC_OK;
}

/* Wait, up to the pool's deadline, for the work queued on streams[0..n). */
static zinc_status streams_wait(zinc_cuda_pool *p, const cudaStream_t *streams, int n,
                                const char *why) {
  streams_query q = {streams, n};
  char what[160];
  snprintf(what, sizeof what, "cuda device %d: waiting for the work on its %d stream(s) (%s)",
           p->ordinal, n, why);
  zinc_status st = zinc_wait_deadline(streams_query_done, &q, p->wait_s, what, stuck_hint);
  if (st != ZINC_OK)
    p->stuck = 1;
  return st;
}

/* ------------------------------------------------------------ backend */

void zinc_cuda_pool_place_host(zinc_cuda_pool *p, void *hwloc_topo, const void *nodeset) {
  p->topo = (hwloc_topology_t)hwloc_topo;
  p->nodeset = (hwloc_const_bitmap_t)nodeset;
}

/* cudaHostAlloc faults its pages in on the calling thread, so the thread's
 * memory policy decides their node: prefer the GPU's node for this call. */
static cudaError_t host_alloc_placed(zinc_cuda_pool *p, size_t size, void **out) {
  if (!p->topo || !p->nodeset)
    return cudaHostAlloc(out, size, cudaHostAllocPortable);
  const int flags = HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET;
  hwloc_bitmap_t old = hwloc_bitmap_alloc();
  hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
  int have_old = old && hwloc_get_membind(p->topo, old, &policy, flags) == 0;
  int placed = hwloc_set_membind(p->topo, p->nodeset, HWLOC_MEMBIND_BIND, flags) == 0;
  cudaError_t err = cudaHostAlloc(out, size, cudaHostAllocPortable);
  if (placed && have_old)
    hwloc_set_membind(p->topo, old, policy, flags);
  else if (placed)
    hwloc_set_membind(p->topo, hwloc_topology_get_topology_nodeset(p->topo),
                      HWLOC_MEMBIND_DEFAULT, flags);
  hwloc_bitmap_free(old);
  return err;
}

static cudaError_t backend_alloc(zinc_cuda_pool *p, size_t size, void **out) {
  cudaError_t err = p->location == ZINC_LOC_HOST ? host_alloc_placed(p, size, out)
                                                 : cudaMalloc(out, size);
  if (err != cudaSuccess) {
    *out = NULL;
    (void)cudaGetLastError();
    return err;
  }
  p->st.backend_allocs++;
  p->st.bytes_reserved += size;
  if (p->st.bytes_reserved > p->st.peak_reserved)
    p->st.peak_reserved = p->st.bytes_reserved;
  return cudaSuccess;
}

static void backend_free(zinc_cuda_pool *p, void *ptr, size_t size) {
  if (p->location == ZINC_LOC_HOST)
    cudaFreeHost(ptr);
  else
    cudaFree(ptr);
  (void)cudaGetLastError();
  p->st.backend_frees++;
  p->st.bytes_reserved -= size;
}

static void cached_drop(zinc_cuda_pool *p, size_t i) {
  backend_free(p, p->cached[i].ptr, p->cached[i].size);
  p->cached[i] = p->cached[--p->ncached];
}

/* Wait for every cached block and give it back to CUDA; on a timeout the
 * blocks not yet given back stay cached. */
static zinc_status flush_cache(zinc_cuda_pool *p) {
  while (p->ncached) {
    ZINC_CHECK(block_wait(p, &p->cached[p->ncached - 1]));
    cached_drop(p, p->ncached - 1);
  }
  return ZINC_OK;
}

/* ------------------------------------------------------------- the API */

zinc_status zinc_cuda_pool_create(int ordinal, int location, zinc_cuda_pool **out) {
  zinc_cuda_pool *p = calloc(1, sizeof *p);
  *out = NULL;
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "cuda pool: out of host memory");
  p->ordinal = ordinal;
  p->location = location;
  p->wait_s = ZINC_CUDA_POOL_WAIT_S;
  pthread_mutex_init(&p->lock, NULL);
  *out = p;
  return ZINC_OK;
}

void zinc_cuda_pool_set_wait(zinc_cuda_pool *p, double seconds) {
  pthread_mutex_lock(&p->lock);
  p->wait_s = seconds;
  pthread_mutex_unlock(&p->lock);
}

zinc_status zinc_cuda_pool_flush(zinc_cuda_pool *p) {
  pthread_mutex_lock(&p->lock);
  zinc_status st = p->stuck ? ZINC_OK : flush_cache(p);
  pthread_mutex_unlock(&p->lock);
  return st;
}

void zinc_cuda_pool_set_stuck(zinc_cuda_pool *p) {
  pthread_mutex_lock(&p->lock);
  p->stuck = 1;
  pthread_mutex_unlock(&p->lock);
}

void zinc_cuda_pool_destroy(zinc_cuda_pool *p) {
  if (!p)
    return;
  if (!p->stuck && flush_cache(p) != ZINC_OK)
    zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
  if (p->stuck) { /* cudaFree would wait for the device too: leave the memory to the exit */
    zinc_log(ZINC_LOG_ERROR, "cuda device %d: the device did not finish its work within %.0f "
             "s; %zu cached and %zu live %s blocks (%llu bytes) are not given back",
             p->ordinal, p->wait_s, p->ncached, p->nlive, loc_name(p->location),
             (unsigned long long)p->st.bytes_reserved);
    p->ncached = 0;
    p->live_cap = 0;
  }
  if (p->nlive && p->live_cap)
    zinc_log(ZINC_LOG_WARN, "cuda device %d: %zu %s blocks (%llu bytes) were never freed; "
             "releasing them with the device", p->ordinal, p->nlive, loc_name(p->location),
             (unsigned long long)p->st.bytes_requested);
  for (size_t i = 0; i < p->live_cap; i++)
    if (p->live[i].ptr)
      backend_free(p, p->live[i].ptr, p->live[i].size);
  for (size_t i = 0; i < p->nspare; i++)
    cudaEventDestroy(p->spare[i]);
  free(p->spare);
  free(p->cached);
  free(p->live);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

zinc_status zinc_cuda_pool_alloc(zinc_cuda_pool *p, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0)
    return ZINC_OK;
  size_t size = zinc_cuda_pool_round(bytes);
  void *ptr = NULL;
  pthread_mutex_lock(&p->lock);
  for (size_t i = 0; i < p->ncached; i++) {
    if (p->cached[i].size == size && block_ready(p, &p->cached[i])) {
      ptr = p->cached[i].ptr;
      p->cached[i] = p->cached[--p->ncached];
      p->st.cache_hits++;
      break;
    }
  }
  if (!ptr) {
    cudaError_t err = backend_alloc(p, size, &ptr);
    if (err == cudaErrorMemoryAllocation && p->ncached) {
      zinc_log(ZINC_LOG_INFO, "cuda device %d: out of %s memory for %zu bytes; emptying the "
               "cache (%llu bytes reserved) and retrying", p->ordinal, loc_name(p->location),
               size, (unsigned long long)p->st.bytes_reserved);
      zinc_status fs = flush_cache(p);
      if (fs != ZINC_OK) {
        pthread_mutex_unlock(&p->lock);
        return zinc_error_wrap(fs, "cuda device %d: out of %s memory for %zu bytes, emptying "
                               "the cache", p->ordinal, loc_name(p->location), size);
      }
      p->st.cache_flushes++;
      err = backend_alloc(p, size, &ptr);
    }
    if (err != cudaSuccess) {
      zinc_cuda_pool_stats st = p->st;
      pthread_mutex_unlock(&p->lock);
      return zinc_error(err == cudaErrorMemoryAllocation ? ZINC_ERR_NOMEM : ZINC_ERR_DEVICE,
                        "cuda device %d: allocating %zu bytes of %s memory: %s (%llu bytes in "
                        "use, %llu reserved); lower the bucket sizes or micro-batch, or "
                        "offload", p->ordinal, bytes, loc_name(p->location),
                        cudaGetErrorString(err), (unsigned long long)st.bytes_in_use,
                        (unsigned long long)st.bytes_reserved);
    }
  }
  zinc_status s = live_insert(p, (live_block){ptr, size, bytes});
  if (s != ZINC_OK) {
    backend_free(p, ptr, size);
    pthread_mutex_unlock(&p->lock);
    return s;
  }
  p->st.bytes_requested += bytes;
  p->st.bytes_in_use += size;
  if (p->st.bytes_in_use > p->st.peak_in_use)
    p->st.peak_in_use = p->st.bytes_in_use;
  pthread_mutex_unlock(&p->lock);
  *out = ptr;
  return ZINC_OK;
}

zinc_status zinc_cuda_pool_free(zinc_cuda_pool *p, void *ptr, size_t bytes,
                                const cudaStream_t *streams, int nstreams) {
  if (!ptr)
    return ZINC_OK;
  pthread_mutex_lock(&p->lock);
  long i = live_find(p, ptr);
  if (i < 0 || p->live[i].requested != bytes) {
    size_t had = i < 0 ? 0 : p->live[i].requested;
    pthread_mutex_unlock(&p->lock);
    if (i < 0)
      return zinc_error(ZINC_ERR_INVALID, "cuda device %d: freeing %p, which is not a live "
                        "%s block of this device", p->ordinal, ptr, loc_name(p->location));
    return zinc_error(ZINC_ERR_INVALID, "cuda device %d: freeing %p with size %zu, but it "
                      "was allocated with %zu bytes (block kept)", p->ordinal, ptr, bytes, had);
  }
  live_block b = p->live[i];
  live_remove(p, (size_t)i);
  p->st.bytes_requested -= b.requested;
  p->st.bytes_in_use -= b.size;

  if (p->ncached == p->cap_cached) {
    size_t cap = p->cap_cached ? 2 * p->cap_cached : 64;
    cached_block *cached = realloc(p->cached, cap * sizeof *cached);
    if (!cached) { /* cannot cache: give it back once its users are done */
      zinc_status ws = streams_wait(p, streams, nstreams, "a freed block the cache has no "
                                    "room for");
      if (ws == ZINC_OK)
        backend_free(p, b.ptr, b.size); /* else left to the process's end */
      pthread_mutex_unlock(&p->lock);
      return ws;
    }
    p->cached = cached;
    p->cap_cached = cap;
  }
  cached_block *c = &p->cached[p->ncached++];
  c->ptr = b.ptr;
  c->size = b.size;
  c->nevents = 0;
  zinc_status st = ZINC_OK;
  for (int k = 0; k < nstreams && k < ZINC_CUDA_MAX_STREAMS; k++) {
    cudaEvent_t e;
    if ((st = event_take(p, &e)) != ZINC_OK)
      break;
    cudaError_t err = cudaEventRecord(e, streams[k]);
    if (err != cudaSuccess) {
      event_give(p, e);
      st = zinc_error(ZINC_ERR_DEVICE, "cuda device %d: recording the last use of a freed "
                      "block: %s", p->ordinal, cudaGetErrorString(err));
      break;
    }
    c->events[c->nevents++] = e;
  }
  if (st != ZINC_OK) { /* order unknown: make it safe the slow way */
    char failed[512];
    snprintf(failed, sizeof failed, "%s", zinc_last_error());
    if (streams_wait(p, streams, nstreams, "a freed block whose last use was not recorded") ==
        ZINC_OK) {
      for (int k = 0; k < c->nevents; k++)
        event_give(p, c->events[k]);
      c->nevents = 0;
    } else { /* never handed out again */
      zinc_log(ZINC_LOG_ERROR, "%s", zinc_last_error());
      for (int k = 0; k < c->nevents; k++)
        event_give(p, c->events[k]);
      p->ncached--;
    }
    zinc_error(st, "%s", failed);
  }
  pthread_mutex_unlock(&p->lock);
  return st;
}

zinc_status zinc_cuda_pool_trim(zinc_cuda_pool *p) {
  pthread_mutex_lock(&p->lock);
  for (size_t i = 0; i < p->ncached;) {
    if (block_ready(p, &p->cached[i]))
      cached_drop(p, i);
    else
      i++;
  }
  pthread_mutex_unlock(&p->lock);
  return ZINC_OK;
}

void zinc_cuda_pool_get_stats(zinc_cuda_pool *p, zinc_cuda_pool_stats *out) {
  pthread_mutex_lock(&p->lock);
  *out = p->st;
  out->blocks_cached = p->ncached;
  pthread_mutex_unlock(&p->lock);
}

#endif /* ZINC_HAVE_CUDA */
