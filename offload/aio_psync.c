/*
 * aio_psync.c — the fallback back end: one thread per ring transferring
 * its requests one at a time with pread/pwrite (preadv/pwritev for framed
 * requests). Used when io_uring cannot be set up and the config allows
 * the fallback (aio.allow_buffered_io); files keep O_DIRECT when their
 * filesystem takes it.
 *
 * The thread sleeps on the ring's condition variable while its queue is
 * empty. Retries, short transfers and fault injection go through the same
 * bookkeeping as io_uring completions (zinc_aio_req_complete).
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <unistd.h>

int64_t zinc_aio_psync_transfer(zinc_aio_ring *r, zinc_aio_slot *s) {
  zinc_aio *aio = r->aio;
  const zinc_aio_req *q = &s->h->reqs[s->req];
  int fd = aio->files[q->file].fd;
  off_t off = (off_t)(q->offset + s->done);
  int write = q->dir == ZINC_AIO_WRITE;
  ssize_t n;
  if (q->header) {
    int cnt = zinc_aio_req_iov(s);
    n = write ? pwritev(fd, s->iov, cnt, off) : preadv(fd, s->iov, cnt, off);
  } else {
    char *p = q->buf + s->done;
    size_t len = (size_t)(q->bytes - s->done);
    n = write ? pwrite(fd, p, len, off) : pread(fd, p, len, off);
  }
  return n < 0 ? -(int64_t)errno : (int64_t)n;
}

void *zinc_aio_psync_worker(void *arg) {
  zinc_aio_ring *r = arg;
  for (;;) {
    if (!zinc_aio_ring_wait_work(r))
      break;
    zinc_aio_slot s = {0};
    if (!zinc_aio_ring_claim(r, &s.h, &s.req) || !zinc_aio_req_start(r, &s))
      continue;
    int next;
    do {
      s.number = zinc_aio_fault_number(r->aio);
      atomic_fetch_add(&r->aio->requests, 1);
      next = zinc_aio_req_complete(r, &s, zinc_aio_psync_transfer(r, &s));
    } while (next == ZINC_AIO_REQ_AGAIN);
    if (next == ZINC_AIO_REQ_CHECK)
      zinc_aio_req_check(s.h, s.req);
  }
  return NULL;
}
