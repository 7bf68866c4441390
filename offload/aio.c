/*
 * aio.c — the I/O engine's front: creation (probing the swap directories,
 * setting up the rings and their workers), batches (submit / wait), and
 * the per-request bookkeeping both back ends share (retries, short
 * transfers, frame checks, error messages). The file and buffer tables are
 * in aio_files.c.
 *
 * Invariants: a handle's requests are all built before it is queued; every
 * request is finished exactly once (transferred, skipped after a failure of
 * its batch, or failed); the first failure of a batch is the one reported.
 * Fixed-buffer slots and file slots are identical on every ring.
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/env.h"

/* ---------------------------------------------------------------- params */

void zinc_aio_params_from_settings(const zinc_settings *s, zinc_aio_params *out) {
  memset(out, 0, sizeof *out);
  out->block_size = s->aio_block_size;
  out->queue_depth = s->aio_queue_depth;
  out->rings = s->aio_intra_op_parallelism;
  out->single_submit = s->aio_single_submit;
  out->overlap_events = s->aio_overlap_events;
  out->allow_buffered_io = s->aio_allow_buffered_io;
  const zinc_offload_settings *targets[2] = {&s->offload_optimizer, &s->offload_param};
  for (int t = 0; t < 2; t++) {
    if (targets[t]->device != ZINC_OFFLOAD_NVME)
      continue;
    for (int i = 0; i < targets[t]->nvme_path_count; i++)
      if (out->probe_dir_count < 2 * ZINC_MAX_NVME_PATHS)
        out->probe_dirs[out->probe_dir_count++] = targets[t]->nvme_paths[i];
  }
}

/* ---------------------------------------------------------------- create */

static zinc_status validate_params(const zinc_aio_params *p) {
  if (p->block_size <= 0 || p->block_size > ZINC_AIO_MAX_BLOCK_SIZE)
    return zinc_error(ZINC_ERR_INVALID,
                      "aio.block_size is %lld bytes: it must be between 1 and %d "
                      "(1 MiB, the default, suits most drives)",
                      (long long)p->block_size, ZINC_AIO_MAX_BLOCK_SIZE);
  if (p->queue_depth < 1 || p->queue_depth > ZINC_AIO_MAX_QUEUE_DEPTH)
    return zinc_error(ZINC_ERR_INVALID, "aio.queue_depth is %d: it must be between 1 and %d",
                      p->queue_depth, ZINC_AIO_MAX_QUEUE_DEPTH);
  if (p->rings < 1 || p->rings > ZINC_AIO_MAX_RINGS)
    return zinc_error(ZINC_ERR_INVALID,
                      "aio.intra_op_parallelism is %d: it must be between 1 and %d",
                      p->rings, ZINC_AIO_MAX_RINGS);
  return ZINC_OK;
}

/* Probe every directory: the alignment is the largest any needs; one that
 * refuses O_DIRECT makes the engine buffered (if allowed) or fails it. */
static zinc_status probe_dirs(zinc_aio *aio, const zinc_aio_params *p) {
  aio->alignment = 512;
  aio->direct = 1;
  int open_fault = zinc_aio_fault_errno(aio, ZINC_AIO_FAULT_OPEN);
  for (int i = 0; i < p->probe_dir_count; i++) {
    size_t align = 0;
    int direct_ok = 0;
    char why[512];
    ZINC_CHECK(zinc_aio_probe_dir(p->probe_dirs[i], open_fault, &align, &direct_ok, why,
                                  sizeof why));
    if (!direct_ok) {
      if (!p->allow_buffered_io)
        return zinc_error(ZINC_ERR_UNSUPPORTED,
                          "NVMe offload needs direct I/O but %s; point nvme_path at a "
                          "local NVMe filesystem (ext4, xfs), or set "
                          "\"aio\": {\"allow_buffered_io\": true} to accept buffered I/O "
                          "through the page cache",
                          why);
      if (aio->direct)
        zinc_log(ZINC_LOG_WARN,
                 "%s; aio.allow_buffered_io is set, so swap files use buffered I/O "
                 "(slower, and it fills the page cache)",
                 why);
      aio->direct = 0;
    }
    if (align > aio->alignment)
      aio->alignment = align;
  }
  if (aio->block_size % (int64_t)aio->alignment != 0)
    return zinc_error(ZINC_ERR_INVALID,
                      "aio.block_size %lld is not a multiple of the %zu-byte alignment the "
                      "swap filesystem needs for direct I/O; use a power of two >= %zu",
                      (long long)aio->block_size, aio->alignment, aio->alignment);
  return ZINC_OK;
}

static zinc_status start_rings(zinc_aio *aio) {
  ZINC_CHECK(zinc_calloc((void **)&aio->rings, (size_t)aio->nrings, sizeof *aio->rings,
                         "I/O rings"));
  for (int i = 0; i < aio->nrings; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    r->aio = aio;
    r->index = i;
    r->wake_fd = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
  }
  aio->use_uring = 1;
  int fault = zinc_aio_fault_errno(aio, ZINC_AIO_FAULT_URING);
  for (int i = 0; i < aio->nrings && aio->use_uring; i++) {
    int rc = fault ? -fault : zinc_aio_uring_init(&aio->rings[i]);
    if (rc == 0)
      continue;
    for (int j = 0; j < i; j++)
      zinc_aio_uring_exit(&aio->rings[j]);
    if (!aio->allow_buffered_io)
      return zinc_error(ZINC_ERR_UNSUPPORTED,
                        "io_uring is unavailable: io_uring_queue_init failed with %s (%s)%s; "
                        "NVMe offload needs it, or set \"aio\": {\"allow_buffered_io\": true} "
                        "to fall back to synchronous pread/pwrite",
                        strerror(-rc), zinc_aio_errno_name(-rc),
                        rc == -EPERM ? " (kernel.io_uring_disabled or a seccomp filter?)"
                                     : "");
    zinc_log(ZINC_LOG_WARN,
             "io_uring is unavailable (%s); aio.allow_buffered_io is set, so the I/O "
             "engine falls back to %d synchronous pread/pwrite thread(s)",
             strerror(-rc), aio->nrings);
    aio->use_uring = 0;
  }
  aio->files_registered = aio->use_uring;
  aio->buffers_registered = aio->use_uring;
  for (int i = 0; i < aio->nrings && aio->use_uring; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    if (io_uring_register_files_sparse(&r->uring, ZINC_AIO_MAX_FILES) < 0)
      aio->files_registered = 0;
    if (io_uring_register_buffers_sparse(&r->uring, ZINC_AIO_MAX_BUFS) < 0)
      aio->buffers_registered = 0;
  }
  for (int i = 0; i < aio->nrings; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    void *(*worker)(void *) = aio->use_uring ? zinc_aio_uring_worker : zinc_aio_psync_worker;
    int rc = pthread_create(&r->thread, NULL, worker, r);
    if (rc != 0)
      return zinc_error(ZINC_ERR_NOMEM, "starting I/O worker thread %d: %s", i, strerror(rc));
    r->thread_started = 1;
  }
  return ZINC_OK;
}

zinc_status zinc_aio_create(const zinc_aio_params *params, zinc_aio **out) {
  *out = NULL;
  ZINC_CHECK(validate_params(params));
  zinc_aio *aio;
  ZINC_CHECK(zinc_calloc((void **)&aio, 1, sizeof *aio, "I/O engine"));
  aio->block_size = params->block_size;
  aio->queue_depth = params->queue_depth;
  aio->nrings = params->rings;
  aio->single_submit = params->single_submit;
  aio->overlap_events = params->overlap_events;
  aio->allow_buffered_io = params->allow_buffered_io;
  pthread_mutex_init(&aio->mu, NULL);
  pthread_mutex_init(&aio->fault_mu, NULL);
  for (int i = 0; i < ZINC_AIO_MAX_FILES; i++)
    aio->files[i].fd = -1;
  zinc_status st = ZINC_OK;
  if (params->fault) {
    aio->fault = *params->fault;
  } else {
    const char *spec = zinc_env_str("ZINC_AIO_FAULT");
    if (spec) {
      st = zinc_aio_fault_parse(spec, &aio->fault);
      if (st != ZINC_OK) {
        zinc_error_wrap(st, "environment variable ZINC_AIO_FAULT");
        goto fail;
      }
      zinc_log(ZINC_LOG_WARN, "ZINC_AIO_FAULT=%s: injecting I/O faults", spec);
    }
  }
  ZINC_CHECK_GOTO(probe_dirs(aio, params), st, fail);
  ZINC_CHECK_GOTO(start_rings(aio), st, fail);
  *out = aio;
  return ZINC_OK;
fail:
  zinc_aio_destroy(aio);
  return st;
}

void zinc_aio_destroy(zinc_aio *aio) {
  if (!aio)
    return;
  for (int i = 0; aio->rings && i < aio->nrings; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->uring_ready)
      zinc_aio_uring_wake(r);
  }
  for (int i = 0; aio->rings && i < aio->nrings; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    if (r->thread_started)
      pthread_join(r->thread, NULL);
  }
  for (int i = 0; i < ZINC_AIO_MAX_FILES; i++)
    if (aio->files[i].fd >= 0)
      zinc_aio_file_close(aio, i);
  for (int i = 0; i < ZINC_AIO_MAX_BUFS; i++) {
    zinc_aio_buffer *b = &aio->buffers[i];
    if (!b->base)
      continue;
    if (b->owned)
      zinc_aio_buffer_free(aio, b->base);
    else
      zinc_aio_buffer_unregister(aio, b->base);
  }
  for (int i = 0; aio->rings && i < aio->nrings; i++) {
    zinc_aio_ring *r = &aio->rings[i];
    if (r->uring_ready)
      zinc_aio_uring_exit(r);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
  }
  free(aio->rings);
  pthread_mutex_destroy(&aio->mu);
  pthread_mutex_destroy(&aio->fault_mu);
  free(aio);
}

size_t zinc_aio_alignment(const zinc_aio *aio) { return aio->alignment; }
int64_t zinc_aio_block_size(const zinc_aio *aio) { return aio->block_size; }
int zinc_aio_is_direct(const zinc_aio *aio) { return aio->direct; }
int zinc_aio_uses_uring(const zinc_aio *aio) { return aio->use_uring; }

void zinc_aio_stats_get(const zinc_aio *aio, zinc_aio_stats *out) {
  zinc_aio *a = (zinc_aio *)aio; /* atomics are read, not changed */
  out->bytes_read = atomic_load(&a->bytes_read);
  out->bytes_written = atomic_load(&a->bytes_written);
  out->requests = atomic_load(&a->requests);
  out->retries = atomic_load(&a->retries);
  out->short_transfers = atomic_load(&a->short_transfers);
}

/* ---------------------------------------------------------------- submit */

static zinc_status check_op(const zinc_aio *aio, const zinc_aio_op *op, int i,
                            const zinc_aio_framing *framing) {
  const char *what = op->dir == ZINC_AIO_WRITE ? "write" : "read";
  if (op->dir != ZINC_AIO_READ && op->dir != ZINC_AIO_WRITE)
    return zinc_error(ZINC_ERR_INVALID, "I/O op %d: direction %d is neither read nor write",
                      i, (int)op->dir);
  if (op->file < 0 || op->file >= ZINC_AIO_MAX_FILES || aio->files[op->file].fd < 0)
    return zinc_error(ZINC_ERR_INVALID, "I/O op %d (%s): file %d is not open", i, what,
                      op->file);
  uint64_t a = aio->alignment;
  if (!op->buf || op->bytes == 0 || (uintptr_t)op->buf % a || op->offset % a ||
      op->bytes % a)
    return zinc_error(ZINC_ERR_INVALID,
                      "I/O op %d (%s of %s): buffer %p, offset %llu and length %llu must be "
                      "non-zero multiples of the %llu-byte direct-I/O alignment",
                      i, what, aio->files[op->file].path, op->buf,
                      (unsigned long long)op->offset, (unsigned long long)op->bytes,
                      (unsigned long long)a);
  if (framing && op->bytes + framing->header_bytes > UINT32_MAX)
    return zinc_error(ZINC_ERR_INVALID, "framed I/O op %d: %llu payload bytes exceed one "
                      "request", i, (unsigned long long)op->bytes);
  return ZINC_OK;
}

static void handle_free(zinc_aio_handle *h) {
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h->ops);
  free(h->reqs);
  free(h->headers);
  free(h);
}

/* Split the ops into requests: framed ops are one request each; plain ops
 * are cut into block_size pieces. */
static zinc_status build_requests(zinc_aio *aio, zinc_aio_handle *h) {
  uint64_t n = 0, bs = (uint64_t)aio->block_size;
  for (int i = 0; i < h->nops; i++)
    n += h->framed ? 1 : zinc_div_up(h->ops[i].bytes, bs);
  if (n > INT32_MAX)
    return zinc_error(ZINC_ERR_INVALID, "I/O batch of %llu requests is too large",
                      (unsigned long long)n);
  ZINC_CHECK(zinc_calloc((void **)&h->reqs, n, sizeof *h->reqs, "I/O requests"));
  if (h->framed) {
    size_t align = aio->alignment > 4096 ? aio->alignment : 4096;
    ZINC_CHECK(zinc_aligned_alloc((void **)&h->headers, align,
                                  (size_t)h->nops * h->framing.header_bytes,
                                  "I/O block headers"));
  }
  pthread_mutex_lock(&aio->mu);
  int k = 0;
  for (int i = 0; i < h->nops; i++) {
    const zinc_aio_op *op = &h->ops[i];
    uint64_t piece = h->framed ? op->bytes : bs;
    for (uint64_t done = 0; done < op->bytes; done += piece, k++) {
      zinc_aio_req *q = &h->reqs[k];
      q->dir = op->dir;
      q->file = op->file;
      q->op = i;
      q->offset = op->offset + done;
      q->buf = (char *)op->buf + done;
      q->bytes = op->bytes - done < piece ? op->bytes - done : piece;
      q->header = h->framed ? h->headers + (size_t)i * h->framing.header_bytes : NULL;
      q->buf_index = h->framed ? -1 : zinc_aio_fixed_slot(aio, q->buf, q->bytes);
    }
  }
  pthread_mutex_unlock(&aio->mu);
  h->nreqs = k;
  return ZINC_OK;
}

static void enqueue(zinc_aio *aio, zinc_aio_handle *h) {
  int used = h->nreqs < aio->nrings ? h->nreqs : aio->nrings;
  for (int r = 0; r < used; r++) {
    zinc_aio_ring *ring = &aio->rings[r];
    h->next[r] = r;
    pthread_mutex_lock(&ring->mu);
    h->queue_next[r] = NULL;
    if (ring->tail)
      ring->tail->queue_next[r] = h;
    else
      ring->head = h;
    ring->tail = h;
    pthread_cond_signal(&ring->cv);
    pthread_mutex_unlock(&ring->mu);
    if (aio->use_uring)
      zinc_aio_uring_wake(ring);
  }
}

zinc_status zinc_aio_submit(zinc_aio *aio, const zinc_aio_op *ops, int nops,
                            const zinc_aio_framing *framing, zinc_aio_handle **out) {
  *out = NULL;
  if (nops < 0 || (nops > 0 && !ops))
    return zinc_error(ZINC_ERR_INVALID, "I/O batch: %d ops at %p", nops, (const void *)ops);
  if (framing && (framing->header_bytes == 0 || framing->header_bytes % aio->alignment))
    return zinc_error(ZINC_ERR_INVALID,
                      "framed I/O batch: header of %u bytes is not a multiple of the "
                      "%zu-byte alignment", framing->header_bytes, aio->alignment);
  pthread_mutex_lock(&aio->mu);
  zinc_status st = ZINC_OK;
  for (int i = 0; i < nops && st == ZINC_OK; i++)
    st = check_op(aio, &ops[i], i, framing);
  pthread_mutex_unlock(&aio->mu);
  ZINC_CHECK(st);

  zinc_aio_handle *h;
  ZINC_CHECK(zinc_calloc((void **)&h, 1, sizeof *h, "an I/O batch"));
  h->aio = aio;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->nops = nops;
  h->framed = framing != NULL;
  if (framing)
    h->framing = *framing;
  ZINC_CHECK_GOTO(zinc_calloc((void **)&h->ops, (size_t)nops, sizeof *ops, "I/O ops"), st,
                  fail);
  if (nops > 0)
    memcpy(h->ops, ops, (size_t)nops * sizeof *ops);
  ZINC_CHECK_GOTO(build_requests(aio, h), st, fail);
  atomic_init(&h->remaining, h->nreqs);
  atomic_init(&h->failed, 0);
  if (h->nreqs == 0)
    h->finished = 1;
  else
    enqueue(aio, h);
  *out = h;
  return ZINC_OK;
fail:
  handle_free(h);
  return st;
}

zinc_status zinc_aio_wait(zinc_aio_handle *h) {
  if (!h)
    return ZINC_OK;
  pthread_mutex_lock(&h->mu);
  while (!h->finished)
    pthread_cond_wait(&h->cv, &h->mu);
  zinc_status st = h->status;
  pthread_mutex_unlock(&h->mu);
  if (st != ZINC_OK)
    zinc_error(st, "%s", h->message);
  handle_free(h);
  return st;
}

int zinc_aio_done(const zinc_aio_handle *h) {
  if (!h)
    return 1;
  zinc_aio_handle *m = (zinc_aio_handle *)h; /* locking is not a change */
  pthread_mutex_lock(&m->mu);
  int done = m->finished;
  pthread_mutex_unlock(&m->mu);
  return done;
}

static zinc_status run_one(zinc_aio *aio, zinc_aio_dir dir, int file, uint64_t offset,
                           void *buf, uint64_t bytes) {
  zinc_aio_op op = {dir, file, offset, buf, bytes, 0};
  zinc_aio_handle *h;
  ZINC_CHECK(zinc_aio_submit(aio, &op, 1, NULL, &h));
  return zinc_aio_wait(h);
}

zinc_status zinc_aio_read(zinc_aio *aio, int file, uint64_t offset, void *buf,
                          uint64_t bytes) {
  return run_one(aio, ZINC_AIO_READ, file, offset, buf, bytes);
}

zinc_status zinc_aio_write(zinc_aio *aio, int file, uint64_t offset, const void *buf,
                           uint64_t bytes) {
  return run_one(aio, ZINC_AIO_WRITE, file, offset, (void *)buf, bytes);
}

/* ------------------------------------------------ requests, for back ends */

int zinc_aio_ring_claim(zinc_aio_ring *r, zinc_aio_handle **h, int *req) {
  int stride = r->aio->nrings, got = 0;
  pthread_mutex_lock(&r->mu);
  zinc_aio_handle *head = r->head;
  if (head) {
    *h = head;
    *req = head->next[r->index];
    head->next[r->index] += stride;
    got = 1;
    if (head->next[r->index] >= head->nreqs) { /* its last request here */
      r->head = head->queue_next[r->index];
      if (!r->head)
        r->tail = NULL;
    }
  }
  pthread_mutex_unlock(&r->mu);
  return got;
}

int zinc_aio_ring_wait_work(zinc_aio_ring *r) {
  pthread_mutex_lock(&r->mu);
  while (!r->head && !r->stop)
    pthread_cond_wait(&r->cv, &r->mu);
  int work = r->head != NULL;
  pthread_mutex_unlock(&r->mu);
  return work;
}

uint64_t zinc_aio_req_length(const zinc_aio_slot *s) {
  const zinc_aio_req *q = &s->h->reqs[s->req];
  return q->bytes + (q->header ? s->h->framing.header_bytes : 0);
}

int zinc_aio_req_iov(zinc_aio_slot *s) {
  const zinc_aio_req *q = &s->h->reqs[s->req];
  uint64_t hb = s->h->framing.header_bytes;
  int n = 0;
  if (s->done < hb)
    s->iov[n++] = (struct iovec){q->header + s->done, hb - s->done};
  uint64_t into = s->done > hb ? s->done - hb : 0;
  s->iov[n++] = (struct iovec){q->buf + into, q->bytes - into};
  return n;
}

/* Record the batch's first failure (the message of the calling thread). */
static void set_failure(zinc_aio_handle *h, zinc_status st) {
  pthread_mutex_lock(&h->mu);
  if (h->status == ZINC_OK) {
    h->status = st;
    snprintf(h->message, sizeof h->message, "%s", zinc_last_error());
  }
  pthread_mutex_unlock(&h->mu);
  atomic_store(&h->failed, 1);
}

static void req_finish(zinc_aio_handle *h) {
  if (atomic_fetch_sub(&h->remaining, 1) != 1)
    return;
  pthread_mutex_lock(&h->mu);
  h->finished = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

int zinc_aio_req_start(zinc_aio_ring *r, zinc_aio_slot *s) {
  zinc_aio_handle *h = s->h;
  const zinc_aio_req *q = &h->reqs[s->req];
  s->done = 0;
  s->attempts = 0;
  if (atomic_load(&h->failed)) {
    req_finish(h);
    return 0;
  }
  if (q->header && q->dir == ZINC_AIO_WRITE && h->framing.fill) {
    zinc_status st = h->framing.fill(h->framing.ctx, &h->ops[q->op], q->header);
    if (st != ZINC_OK) {
      set_failure(h, st);
      req_finish(h);
      return 0;
    }
  }
  return 1;
}

static const char *errno_hint(int err, int direct) {
  switch (err) {
  case EIO: return "; the drive reported an error: check it (dmesg, smartctl)";
  case ENOSPC: return "; the filesystem is full: free space or point nvme_path at a larger drive";
  case EDQUOT: return "; the disk quota is exhausted";
  case EINVAL:
    return direct ? "; the kernel rejected the direct I/O request (alignment or a "
                    "filesystem without O_DIRECT support)" : "";
  default: return "";
  }
}

void zinc_aio_req_fail(zinc_aio_ring *r, zinc_aio_slot *s, int err, const char *what) {
  zinc_aio *aio = r->aio;
  zinc_aio_handle *h = s->h;
  const zinc_aio_req *q = &h->reqs[s->req];
  const zinc_aio_file *f = &aio->files[q->file];
  zinc_status st = zinc_error(ZINC_ERR_IO, "%s %s at offset %llu (%llu bytes): %s%s (%s)%s",
      q->dir == ZINC_AIO_WRITE ? "writing" : "reading", f->path ? f->path : "(closed file)",
      (unsigned long long)(q->offset + s->done),
      (unsigned long long)(zinc_aio_req_length(s) - s->done), what ? what : "",
      err ? strerror(err) : "no bytes transferred", err ? zinc_aio_errno_name(err) : "EOF",
      errno_hint(err, f->direct));
  set_failure(h, st);
  req_finish(h);
}

int zinc_aio_req_complete(zinc_aio_ring *r, zinc_aio_slot *s, int64_t res) {
  zinc_aio *aio = r->aio;
  zinc_aio_handle *h = s->h;
  const zinc_aio_req *q = &h->reqs[s->req];
  uint64_t want = zinc_aio_req_length(s) - s->done;
  res = zinc_aio_fault_apply(aio, s->number, res, want);
  if (res == -EINTR || res == -EAGAIN) {
    if (s->attempts < ZINC_AIO_MAX_RETRIES) {
      s->attempts++;
      atomic_fetch_add(&aio->retries, 1);
      return ZINC_AIO_REQ_AGAIN;
    }
    zinc_aio_req_fail(r, s, (int)-res, "still failing after retries: ");
    return ZINC_AIO_REQ_DONE;
  }
  if (res < 0) {
    zinc_aio_req_fail(r, s, (int)-res, NULL);
    return ZINC_AIO_REQ_DONE;
  }
  if (res == 0 || (uint64_t)res > want) {
    zinc_aio_req_fail(r, s, 0, q->dir == ZINC_AIO_READ ? "the file ends here: " : "");
    return ZINC_AIO_REQ_DONE;
  }
  atomic_fetch_add(q->dir == ZINC_AIO_READ ? &aio->bytes_read : &aio->bytes_written,
                   (unsigned long long)res);
  s->done += (uint64_t)res;
  if ((uint64_t)res < want) {
    atomic_fetch_add(&aio->short_transfers, 1);
    return ZINC_AIO_REQ_AGAIN;
  }
  if (q->header && q->dir == ZINC_AIO_READ && h->framing.check)
    return ZINC_AIO_REQ_CHECK;
  req_finish(h);
  return ZINC_AIO_REQ_DONE;
}

void zinc_aio_req_check(zinc_aio_handle *h, int req) {
  const zinc_aio_req *q = &h->reqs[req];
  zinc_status st = h->framing.check(h->framing.ctx, &h->ops[q->op], q->header);
  if (st != ZINC_OK)
    set_failure(h, st);
  req_finish(h);
}
