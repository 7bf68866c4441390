/*
 * device_cpu.c — the cpu backend of the device seam: "device memory" is
 * host memory and the kernels are kernels/cpu_kernels.h on a thread pool
 * created with the device.
 *
 * Invariants
 *  - ZINC_LOC_DEVICE memory is 64-byte aligned (a cache line, a full
 *    AVX-512 vector); ZINC_LOC_HOST memory is page-aligned, on the NUMA
 *    nodes of this rank's share, and mlock'ed when pin_memory asks and the
 *    OS permits (one warning per device where not).
 *  - Every alloc reports +bytes and every free -bytes to the accounting
 *    hook, with the caller's location and category.
 *  - Everything runs synchronously at the call, so streams and events need
 *    no state beyond their identity: a recorded event is already complete.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "device/device_cpu.h"

/* Copies and fills above this size are split over the pool. */
#define COPY_GRAIN (1 << 20)

typedef struct {
  zinc_threadpool *pool;
  zinc_topology *topo;          /* NULL: no placement (hwloc failed) */
  zinc_cpu_isa isa;
  int pin_memory;
  size_t page;
  _Atomic int warned_mlock;
  _Atomic int warned_bind;
} cpu_impl;

struct zinc_stream {
  int unused;
};
struct zinc_event {
  int recorded;
};

static cpu_impl *impl_of(const zinc_device *d) { return d->impl; }

static void account(zinc_device *d, int location, int category, int64_t bytes) {
  if (d->mem_hook)
    d->mem_hook(d->mem_hook_ctx, location, category, bytes);
}

/* ---------------------------------------------------------------- memory */

static zinc_status cpu_alloc(zinc_device *d, size_t bytes, int location, int category,
                             void **out) {
  cpu_impl *c = impl_of(d);
  *out = NULL;
  if (location == ZINC_LOC_DEVICE) {
    ZINC_CHECK(zinc_aligned_alloc(out, 64, bytes, "cpu device memory"));
  } else if (location == ZINC_LOC_HOST) {
    if (c->topo)
      ZINC_CHECK(zinc_topology_alloc_host(c->topo, bytes, out));
    else
      ZINC_CHECK(zinc_aligned_alloc(out, c->page, bytes, "pinned host memory"));
    if (c->pin_memory && bytes && mlock(*out, bytes) != 0 &&
        !atomic_exchange(&c->warned_mlock, 1))
      zinc_log(ZINC_LOG_WARN,
               "pin_memory: mlock of %zu bytes failed (%s); host buffers stay pageable. "
               "Raise the memlock limit (ulimit -l) or grant CAP_IPC_LOCK to pin them",
               bytes, strerror(errno));
  } else {
    return zinc_error(ZINC_ERR_INVALID, "cpu device: cannot allocate %zu bytes at location "
                      "%d; use ZINC_LOC_DEVICE or ZINC_LOC_HOST", bytes, location);
  }
  account(d, location, category, (int64_t)bytes);
  return ZINC_OK;
}

static void cpu_free(zinc_device *d, void *p, size_t bytes, int location, int category) {
  cpu_impl *c = impl_of(d);
  if (!p)
    return;
  if (location == ZINC_LOC_HOST) {
    if (c->pin_memory && bytes)
      munlock(p, bytes);
    if (c->topo)
      zinc_topology_free_host(c->topo, p, bytes);
    else
      free(p);
  } else {
    free(p);
  }
  account(d, location, category, -(int64_t)bytes);
}

typedef struct {
  char *dst;
  const char *src; /* NULL: fill with zeros */
} copy_job;

static void copy_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const copy_job *j = ctx;
  if (j->src)
    memcpy(j->dst + begin, j->src + begin, (size_t)(end - begin));
  else
    memset(j->dst + begin, 0, (size_t)(end - begin));
}

static zinc_status cpu_copy(zinc_device *d, void *dst, const void *src, size_t bytes,
                            zinc_stream *s) {
  if (bytes == 0 || dst == src)
    return ZINC_OK;
  if (!dst || !src)
    return zinc_error(ZINC_ERR_INVALID, "cpu copy of %zu bytes: dst %p, src %p", bytes, dst,
                      src);
  copy_job j = {dst, src};
  __atomic_fetch_add(&d->copies, 1, __ATOMIC_RELAXED);
  zinc_threadpool_for(impl_of(d)->pool, (int64_t)bytes, COPY_GRAIN, copy_part, &j);
  return ZINC_OK;
}

static zinc_status cpu_fill_zero(zinc_device *d, void *dst, size_t bytes, zinc_stream *s) {
  if (bytes == 0)
    return ZINC_OK;
  if (!dst)
    return zinc_error(ZINC_ERR_INVALID, "cpu fill_zero of %zu bytes: dst is NULL", bytes);
  copy_job j = {dst, NULL};
  zinc_threadpool_for(impl_of(d)->pool, (int64_t)bytes, COPY_GRAIN, copy_part, &j);
  return ZINC_OK;
}

/* ---------------------------------------------------- streams and events */

static zinc_status cpu_stream_create(zinc_device *d, zinc_stream **out) {
  return zinc_calloc((void **)out, 1, sizeof **out, "a cpu stream");
}

static void cpu_stream_destroy(zinc_device *d, zinc_stream *s) { free(s); }

static zinc_status cpu_stream_sync(zinc_device *d, zinc_stream *s) { return ZINC_OK; }

static zinc_status cpu_event_create(zinc_device *d, zinc_event **out) {
  return zinc_calloc((void **)out, 1, sizeof **out, "a cpu event");
}

static void cpu_event_destroy(zinc_device *d, zinc_event *e) { free(e); }

static zinc_status cpu_event_record(zinc_device *d, zinc_event *e, zinc_stream *s) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "cpu event_record: NULL event");
  e->recorded = 1;
  return ZINC_OK;
}

/* Work queued before the record has already run: nothing to wait for. */
static zinc_status cpu_stream_wait_event(zinc_device *d, zinc_stream *s, zinc_event *e) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "cpu stream_wait_event: NULL event");
  return ZINC_OK;
}

static zinc_status cpu_event_sync(zinc_device *d, zinc_event *e) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "cpu event_sync: NULL event");
  return ZINC_OK;
}

/* --------------------------------------------------------------- kernels */

static zinc_status cpu_optim(zinc_device *d, zinc_stream *s, const struct zinc_opt_coef *coefs,
                             int ncoef, const zinc_opt_seg *segs, int nseg, int pass,
                             double *norms) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_optim(c->pool, c->isa, coefs, ncoef, segs, nseg, pass, norms);
}

static zinc_status cpu_sumsq(zinc_device *d, zinc_stream *s, const zinc_sumsq_chunk *chunks,
                             int n, double *partials) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_sumsq(c->pool, c->isa, chunks, n, partials);
}

static zinc_status cpu_accumulate_f32(zinc_device *d, zinc_stream *s, float *dst,
                                      const void *src, int src_dtype, int64_t n,
                                      int overwrite) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_accumulate_f32(c->pool, c->isa, dst, src, src_dtype, n, overwrite);
}

static zinc_status cpu_cast(zinc_device *d, zinc_stream *s, void *dst, int dst_dtype,
                            const void *src, int src_dtype, int64_t n) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_cast(c->pool, c->isa, dst, dst_dtype, src, src_dtype, n);
}

static zinc_status cpu_scale(zinc_device *d, zinc_stream *s, void *x, int dtype, int64_t n,
                             float factor) {
  return zinc_cpu_scale(impl_of(d)->pool, x, dtype, n, factor);
}

static zinc_status cpu_encode(zinc_device *d, zinc_stream *s, zinc_codec codec, void *dst,
                              const void *src, int src_dtype, int64_t n, void *ef,
                              float ef_beta, uint64_t seed) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_codec_encode(c->pool, c->isa, codec, dst, src, src_dtype, n, ef, ef_beta,
                               seed);
}

static zinc_status cpu_decode(zinc_device *d, zinc_stream *s, zinc_codec codec, void *dst,
                              int dst_dtype, const void *src, int64_t n, int accumulate) {
  cpu_impl *c = impl_of(d);
  return zinc_cpu_codec_decode(c->pool, c->isa, codec, dst, dst_dtype, src, n, accumulate);
}

/* ----------------------------------------------------------- information */

/* "Key:   123 kB" lines of /proc/meminfo, in bytes; -1 where missing. */
static zinc_status cpu_mem_info(zinc_device *d, int64_t *free_bytes, int64_t *total_bytes) {
  *free_bytes = *total_bytes = -1;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f)
    return zinc_error(ZINC_ERR_IO, "cpu mem_info: cannot open /proc/meminfo: %s",
                      strerror(errno));
  char line[256];
  long long kb;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
      *total_bytes = (int64_t)kb * 1024;
    else if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
      *free_bytes = (int64_t)kb * 1024;
  }
  fclose(f);
  return ZINC_OK;
}

static void cpu_destroy(zinc_device *d) {
  cpu_impl *c = impl_of(d);
  zinc_threadpool_destroy(c->pool);
  zinc_topology_destroy(c->topo);
  free(c);
  free(d);
}

static const zinc_device_ops cpu_ops = {
    .name = "cpu",
    .is_gpu = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .optim = cpu_optim,
    .sumsq = cpu_sumsq,
    .accumulate_f32 = cpu_accumulate_f32,
    .cast = cpu_cast,
    .scale = cpu_scale,
    .encode = cpu_encode,
    .decode = cpu_decode,
    .mem_info = cpu_mem_info,
    .destroy = cpu_destroy,
};

/* --------------------------------------------------------------- create */

/* Pool start hook: worker tid goes to core tid of the share (the creating
 * thread, part 0 of every loop, keeps core 0 to itself). */
static void bind_worker(void *ctx, int tid) {
  cpu_impl *c = ctx;
  if (zinc_topology_bind_thread(c->topo, tid) != ZINC_OK &&
      !atomic_exchange(&c->warned_bind, 1))
    zinc_log(ZINC_LOG_WARN, "placement: %s; CPU kernel threads run unbound", zinc_last_error());
}

zinc_status zinc_device_cpu_create_placed(const zinc_device_cpu_placement *pl,
                                          zinc_device **out) {
  *out = NULL;
  zinc_device_cpu_placement p = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  if (pl)
    p = *pl;
  if (p.threads < 0 || (p.local_size >= 1 && p.local_rank >= p.local_size))
    return zinc_error(ZINC_ERR_INVALID, "cpu device: %d threads, local rank %d of %d; use 0 "
                      "threads (this rank's share of the cores) or a positive count, and a "
                      "local rank below the local size", p.threads, p.local_rank,
                      p.local_size);
  zinc_device *d = NULL;
  cpu_impl *c = NULL;
  zinc_status st = ZINC_OK;
  ZINC_CHECK_GOTO(zinc_calloc((void **)&d, 1, sizeof *d, "the cpu device"), st, fail);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&c, 1, sizeof *c, "the cpu device"), st, fail);
  d->ops = &cpu_ops;
  d->impl = c;
  c->pin_memory = p.pin_memory;
  c->isa = zinc_cpu_isa_select();
  long page = sysconf(_SC_PAGESIZE);
  c->page = page > 0 ? (size_t)page : 4096;

  zinc_topology_opts to = ZINC_TOPOLOGY_OPTS_INIT;
  to.local_rank = p.local_rank;
  to.local_size = p.local_size;
  to.verbose = p.verbose;
  to.near_numa = p.near_numa;
  to.near_rank = p.near_rank;
  to.near_size = p.near_size;
  if (zinc_topology_create(&to, &c->topo) != ZINC_OK) {
    zinc_log(ZINC_LOG_WARN, "cpu device: %s; running without thread or memory placement",
             zinc_last_error());
    c->topo = NULL;
  }
  int threads = p.threads;
  if (threads == 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    threads = c->topo ? zinc_topology_cores(c->topo) : (online > 0 ? (int)online : 1);
  }
  int bind = p.bind && c->topo;
  if (bind && zinc_topology_splits_node(c->topo) &&
      zinc_topology_bind_thread_share(c->topo) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "placement: %s", zinc_last_error());
  ZINC_CHECK_GOTO(zinc_threadpool_create(threads, bind ? bind_worker : NULL, c, &c->pool),
                  st, fail);
  if (p.verbose)
    zinc_log(ZINC_LOG_INFO, "cpu device: %d threads, %s kernels, pin_memory %s", threads,
             zinc_cpu_isa_name(c->isa), p.pin_memory ? "on" : "off");
  *out = d;
  return ZINC_OK;

fail:
  if (c) {
    zinc_topology_destroy(c->topo);
    free(c);
  }
  free(d);
  return st;
}

zinc_status zinc_device_cpu_create(int threads, int pin_memory, zinc_device **out) {
  zinc_device_cpu_placement p = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  p.threads = threads;
  p.pin_memory = pin_memory;
  return zinc_device_cpu_create_placed(&p, out);
}

zinc_threadpool *zinc_device_cpu_pool(const zinc_device *d) { return impl_of(d)->pool; }
zinc_cpu_isa zinc_device_cpu_isa(const zinc_device *d) { return impl_of(d)->isa; }
zinc_topology *zinc_device_cpu_topology(const zinc_device *d) { return impl_of(d)->topo; }
