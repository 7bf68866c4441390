/*
 * aio_uring.c — the io_uring back end: one ring and one worker thread per
 * `intra_op_parallelism`, each keeping up to queue_depth requests in
 * flight.
 *
 * An idle worker sleeps on its ring's condition variable; a busy one in
 * io_uring_submit_and_wait / io_uring_wait_cqe. An eventfd is polled
 * through the ring itself so that new work wakes a busy worker at once to
 * top its queue up; nothing polls on a timer. (Sleeping in the kernel only
 * while requests are in flight also keeps the engine usable under
 * valgrind, which runs one thread at a time.) Request completions carry
 * their slot index as user_data; the eventfd poll carries WAKE_TAG.
 *
 * overlap_events (DeepSpeed's meaning): on, the ring is topped up after
 * every round of completions; off, a round of up to queue_depth requests
 * is prepared only once the previous round has completed entirely.
 * single_submit: on, each prepared request is submitted by its own
 * io_uring_submit call; off, one call submits everything prepared.
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif
#endif
#ifndef VALGRIND_MAKE_MEM_DEFINED
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#define WAKE_TAG UINT64_MAX

/* Memcheck cannot see the kernel fill a buffer asynchronously: tell it what
 * a completed read wrote (a no-op outside valgrind). */
static void mark_read(const zinc_aio_slot *s, int64_t res) {
  const zinc_aio_req *q = &s->h->reqs[s->req];
  if (q->dir != ZINC_AIO_READ || res <= 0)
    return;
  if (!q->header) {
    VALGRIND_MAKE_MEM_DEFINED(q->buf + s->done, (size_t)res);
    return;
  }
  size_t left = (size_t)res;
  for (int i = 0; i < 2 && left > 0; i++) { /* the iovecs of this attempt */
    size_t n = s->iov[i].iov_len < left ? s->iov[i].iov_len : left;
    VALGRIND_MAKE_MEM_DEFINED(s->iov[i].iov_base, n);
    left -= n;
  }
}

int zinc_aio_uring_init(zinc_aio_ring *r) {
  zinc_aio *aio = r->aio;
  unsigned entries = 1;
  while (entries < (unsigned)aio->queue_depth + 1)
    entries <<= 1;
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_CQSIZE;
  p.cq_entries = entries * 2;
  int rc = io_uring_queue_init_params(entries, &r->uring, &p);
  if (rc < 0)
    return rc;
  r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->wake_fd < 0) {
    rc = -errno;
    io_uring_queue_exit(&r->uring);
    return rc;
  }
  r->slots = calloc((size_t)aio->queue_depth, sizeof *r->slots);
  r->free_slots = calloc((size_t)aio->queue_depth, sizeof *r->free_slots);
  r->checks = calloc((size_t)aio->queue_depth, sizeof *r->checks);
  if (!r->slots || !r->free_slots || !r->checks) {
    free(r->slots);
    free(r->free_slots);
    free(r->checks);
    close(r->wake_fd);
    io_uring_queue_exit(&r->uring);
    return -ENOMEM;
  }
  for (int i = 0; i < aio->queue_depth; i++)
    r->free_slots[i] = aio->queue_depth - 1 - i;
  r->nfree = aio->queue_depth;
  r->uring_ready = 1;
  return 0;
}

void zinc_aio_uring_exit(zinc_aio_ring *r) {
  if (!r->uring_ready)
    return;
  io_uring_queue_exit(&r->uring);
  close(r->wake_fd);
  free(r->slots);
  free(r->free_slots);
  free(r->checks);
  r->slots = NULL;
  r->free_slots = NULL;
  r->checks = NULL;
  r->uring_ready = 0;
}

void zinc_aio_uring_wake(zinc_aio_ring *r) {
  uint64_t one = 1;
  ssize_t n = write(r->wake_fd, &one, sizeof one);
  (void)n; /* EAGAIN means the counter is already non-zero: awake anyway */
}

/* An SQE, submitting what is queued if the ring is full (it never is: it
 * has room for queue_depth requests and the wake poll). */
static struct io_uring_sqe *get_sqe(zinc_aio_ring *r) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
  while (!sqe) {
    io_uring_submit(&r->uring);
    r->unsubmitted = 0;
    sqe = io_uring_get_sqe(&r->uring);
  }
  return sqe;
}

static void submit_prepared(zinc_aio_ring *r, int force) {
  if (r->unsubmitted > 0 && (force || r->aio->single_submit)) {
    io_uring_submit(&r->uring);
    r->unsubmitted = 0;
  }
}

static void arm_wake(zinc_aio_ring *r) {
  struct io_uring_sqe *sqe = get_sqe(r);
  io_uring_prep_poll_add(sqe, r->wake_fd, POLLIN);
  io_uring_sqe_set_data64(sqe, WAKE_TAG);
  r->unsubmitted++;
}

/* Prepare the (remainder of the) request in slot `idx`. */
static void prep_request(zinc_aio_ring *r, int idx) {
  zinc_aio *aio = r->aio;
  zinc_aio_slot *s = &r->slots[idx];
  const zinc_aio_req *q = &s->h->reqs[s->req];
  struct io_uring_sqe *sqe = get_sqe(r);
  int fd = aio->files_registered ? q->file : aio->files[q->file].fd;
  uint64_t off = q->offset + s->done;
  int write = q->dir == ZINC_AIO_WRITE;
  if (q->header) {
    int n = zinc_aio_req_iov(s);
    if (write)
      io_uring_prep_writev(sqe, fd, s->iov, (unsigned)n, off);
    else
      io_uring_prep_readv(sqe, fd, s->iov, (unsigned)n, off);
  } else {
    char *p = q->buf + s->done;
    unsigned len = (unsigned)(q->bytes - s->done);
    if (q->buf_index >= 0 && write)
      io_uring_prep_write_fixed(sqe, fd, p, len, off, q->buf_index);
    else if (q->buf_index >= 0)
      io_uring_prep_read_fixed(sqe, fd, p, len, off, q->buf_index);
    else if (write)
      io_uring_prep_write(sqe, fd, p, len, off);
    else
      io_uring_prep_read(sqe, fd, p, len, off);
  }
  if (aio->files_registered)
    sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, (uint64_t)idx);
  s->number = zinc_aio_fault_number(aio);
  atomic_fetch_add(&aio->requests, 1);
  r->unsubmitted++;
  submit_prepared(r, 0);
}

/* Claim and prepare new requests while the queue has room. */
static void fill(zinc_aio_ring *r) {
  while (r->nfree > 0) {
    int idx = r->free_slots[r->nfree - 1];
    zinc_aio_slot *s = &r->slots[idx];
    if (!zinc_aio_ring_claim(r, &s->h, &s->req))
      return;
    /* A framed write computes its header (a checksum of the payload)
     * before it can go: hand what is prepared to the device first. */
    if (s->h->reqs[s->req].header && s->h->reqs[s->req].dir == ZINC_AIO_WRITE)
      submit_prepared(r, 1);
    if (!zinc_aio_req_start(r, s))
      continue; /* finished without I/O; the slot stays free */
    r->nfree--;
    r->inflight++;
    prep_request(r, idx);
  }
}

static void release_slot(zinc_aio_ring *r, int idx) {
  r->slots[idx].h = NULL;
  r->free_slots[r->nfree++] = idx;
  r->inflight--;
}

static void on_cqe(zinc_aio_ring *r, const struct io_uring_cqe *cqe) {
  uint64_t tag = io_uring_cqe_get_data64(cqe);
  if (tag == WAKE_TAG) {
    uint64_t count;
    ssize_t n = read(r->wake_fd, &count, sizeof count);
    (void)n;
    arm_wake(r);
    return;
  }
  int idx = (int)tag;
  if (!r->slots[idx].h)
    return; /* given up on by fail_inflight */
  zinc_aio_slot *s = &r->slots[idx];
  mark_read(s, cqe->res);
  int next = zinc_aio_req_complete(r, s, cqe->res);
  if (next == ZINC_AIO_REQ_AGAIN) {
    prep_request(r, idx);
    return;
  }
  if (next == ZINC_AIO_REQ_CHECK) {
    r->checks[r->nchecks].h = s->h;
    r->checks[r->nchecks].req = s->req;
    r->nchecks++;
  }
  release_slot(r, idx);
}

/* Frame checks (checksums) of the reads just completed, run once the
 * queue has been topped up so that the device works meanwhile. */
static void run_checks(zinc_aio_ring *r) {
  for (int i = 0; i < r->nchecks; i++)
    zinc_aio_req_check(r->checks[i].h, r->checks[i].req);
  r->nchecks = 0;
}

/* The ring itself failed (not a request) several times in a row: fail what
 * is in flight, since its completions may never come; the worker then
 * serves the rest of its queue with pread/pwrite. */
static void fail_inflight(zinc_aio_ring *r, int err) {
  for (int idx = 0; idx < r->aio->queue_depth; idx++) {
    if (!r->slots[idx].h)
      continue;
    zinc_aio_req_fail(r, &r->slots[idx], err, "the io_uring wait failed: ");
    release_slot(r, idx);
  }
}

void *zinc_aio_uring_worker(void *arg) {
  zinc_aio_ring *r = arg;
  int wait_failures = 0;
  arm_wake(r);
  for (;;) {
    if (r->aio->overlap_events || r->inflight == 0)
      fill(r);
    if (r->inflight == 0) { /* idle: sleep on the queue, not in the kernel */
      if (!zinc_aio_ring_wait_work(r))
        break;
      continue;
    }
    struct io_uring_cqe *cqe = NULL;
    int rc;
    if (r->unsubmitted > 0) {
      rc = io_uring_submit_and_wait(&r->uring, 1);
      r->unsubmitted = 0;
      if (rc >= 0)
        rc = io_uring_peek_cqe(&r->uring, &cqe);
    } else {
      rc = io_uring_wait_cqe(&r->uring, &cqe);
    }
    if (rc == -EINTR || rc == -EAGAIN)
      continue;
    if (rc < 0) {
      zinc_log(ZINC_LOG_ERROR, "I/O ring %d: waiting for completions failed: %s",
               r->index, strerror(-rc));
      if (++wait_failures < 3)
        continue;
      fail_inflight(r, -rc);
      run_checks(r);
      return zinc_aio_psync_worker(r);
    }
    wait_failures = 0;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&r->uring, head, cqe) {
      on_cqe(r, cqe);
      seen++;
    }
    io_uring_cq_advance(&r->uring, seen);
    if (r->nchecks > 0 && r->aio->overlap_events)
      fill(r);
    submit_prepared(r, 1);
    run_checks(r);
  }
  return NULL;
}
