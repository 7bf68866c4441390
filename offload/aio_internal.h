/*
 * aio_internal.h — what the files of the I/O engine share: the engine,
 * ring, handle and request structs, and the helpers the two worker
 * back ends (aio_uring.c: io_uring; aio_psync.c: pread/pwrite threads) call
 * into aio.c. Nothing outside offload/aio*.c includes this.
 *
 * Ownership of a batch: zinc_aio_submit builds the handle and its request
 * list, then appends the handle to the queue of every ring that has
 * requests in it (request i goes to ring i % nrings). Ring r's worker alone
 * advances handle->next[r]; it drops the handle from its queue once it has
 * claimed the last of its requests. The worker that finishes the last
 * request of a batch marks the handle finished under handle->mu; the
 * waiting thread then frees it, so no worker touches a handle after its
 * last request finished.
 */
#ifndef ZINC_OFFLOAD_AIO_INTERNAL_H
#define ZINC_OFFLOAD_AIO_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "offload/aio.h"
#include "base/base.h"

#define ZINC_AIO_MAX_BUFS 64            /* registered fixed-buffer slots      */
#define ZINC_AIO_FIXED_CHUNK (1u << 30) /* the kernel's limit per fixed buffer */
#define ZINC_AIO_MESSAGE_MAX 1024
#define ZINC_AIO_HUGE_PAGE (2u << 20)     /* buffers this large use THP       */

/* One request: at most block_size payload bytes of one op (a whole op when
 * framed), on one ring. */
typedef struct {
  zinc_aio_dir dir;
  int file;
  int op;                /* index into handle->ops                           */
  int buf_index;         /* fixed-buffer slot, -1: plain read/write          */
  uint64_t offset;       /* file offset of the first byte (framed: header)   */
  char *buf;             /* payload, `bytes` long                            */
  uint64_t bytes;        /* payload bytes                                    */
  unsigned char *header; /* framed: header_bytes in handle->headers, else NULL */
} zinc_aio_req;

struct zinc_aio_handle {
  zinc_aio *aio;
  zinc_aio_op *ops;                 /* (nops) copy of the caller's ops      */
  int nops;
  zinc_aio_req *reqs;               /* (nreqs)                              */
  int nreqs;
  unsigned char *headers;           /* (nops * header_bytes) framed, aligned */
  int framed;
  zinc_aio_framing framing;
  int next[ZINC_AIO_MAX_RINGS];     /* ring r's next request index          */
  zinc_aio_handle *queue_next[ZINC_AIO_MAX_RINGS]; /* ring r's queue link   */
  atomic_int remaining;             /* requests not finished                */
  atomic_int failed;                /* 1 once a request failed: skip the rest */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int finished;                     /* under mu                             */
  zinc_status status;               /* under mu: first failure              */
  char message[ZINC_AIO_MESSAGE_MAX];
};

/* A request in progress on a worker. */
typedef struct {
  zinc_aio_handle *h;
  int req;
  uint64_t done;       /* bytes (header + payload) transferred so far       */
  int attempts;        /* -EINTR/-EAGAIN retries so far                     */
  int64_t number;      /* request number of the latest attempt (faults)     */
  struct iovec iov[2]; /* framed: [header, payload] minus `done`            */
} zinc_aio_slot;

typedef struct zinc_aio_ring {
  zinc_aio *aio;
  int index;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;          /* guards the queue and stop               */
  pthread_cond_t cv;           /* psync: work arrived or stop             */
  zinc_aio_handle *head, *tail;
  int stop;
  /* io_uring back end */
  struct io_uring uring;
  int uring_ready;
  int wake_fd;                 /* eventfd polled by the ring: work or stop */
  zinc_aio_slot *slots;        /* (queue_depth)                           */
  int *free_slots;             /* (queue_depth) stack of free slot indices */
  int nfree;
  int inflight;
  int unsubmitted;             /* SQEs prepared and not yet submitted     */
  struct {                     /* framed reads whose frame check waits    */
    zinc_aio_handle *h;        /*   until the queue is topped up          */
    int req;
  } *checks;                   /* (queue_depth)                           */
  int nchecks;
} zinc_aio_ring;

typedef struct {
  int fd;           /* -1: free                                         */
  int direct;       /* opened with O_DIRECT                             */
  char *path;
} zinc_aio_file;

typedef struct {
  char *base;       /* NULL: free                                       */
  size_t bytes;
  int slot;         /* first fixed slot, -1: not registered             */
  int nslots;
  int owned;        /* allocated by zinc_aio_buffer_alloc               */
} zinc_aio_buffer;

struct zinc_aio {
  int64_t block_size;
  int queue_depth;
  int nrings;
  int single_submit;
  int overlap_events;
  int allow_buffered_io;
  size_t alignment;
  int direct;                  /* files are opened with O_DIRECT          */
  int use_uring;               /* 0: psync back end                       */
  int files_registered;        /* rings hold a sparse file table          */
  int buffers_registered;      /* rings hold a sparse buffer table        */
  zinc_aio_ring *rings;        /* (nrings)                                */

  pthread_mutex_t mu;          /* files, buffers, fixed slots             */
  zinc_aio_file files[ZINC_AIO_MAX_FILES];
  zinc_aio_buffer buffers[ZINC_AIO_MAX_BUFS];
  unsigned char fixed_used[ZINC_AIO_MAX_BUFS];

  pthread_mutex_t fault_mu;
  zinc_aio_fault fault;
  atomic_llong request_count;

  atomic_ullong bytes_read, bytes_written, requests, retries, short_transfers;
};

/* ------------------------------------------------- aio.c, for back ends */

/* Take ring r's next request; 0 when its queue is empty. */
ZINC_INTERNAL int zinc_aio_ring_claim(zinc_aio_ring *r, zinc_aio_handle **h, int *req);
/* Sleep until ring r has queued work (1) or is told to stop with nothing
 * queued (0). */
ZINC_INTERNAL int zinc_aio_ring_wait_work(zinc_aio_ring *r);
/* Begin a claimed request: 1 if it must be transferred; 0 if it is already
 * finished (its batch failed, or the frame could not be filled). */
ZINC_INTERNAL int zinc_aio_req_start(zinc_aio_ring *r, zinc_aio_slot *s);
/* Bytes of the whole request (framed: header + payload). */
ZINC_INTERNAL uint64_t zinc_aio_req_length(const zinc_aio_slot *s);
/* Account the result of one attempt (bytes or -errno): the request is
 * finished (DONE), its remainder must be submitted again (AGAIN), or it
 * was transferred and its frame awaits zinc_aio_req_check (CHECK), which
 * the caller may run after it has topped its queue up. */
enum { ZINC_AIO_REQ_DONE = 0, ZINC_AIO_REQ_AGAIN = 1, ZINC_AIO_REQ_CHECK = 2 };
ZINC_INTERNAL int zinc_aio_req_complete(zinc_aio_ring *r, zinc_aio_slot *s, int64_t res);
/* Check the frame of a transferred framed read and finish the request. */
ZINC_INTERNAL void zinc_aio_req_check(zinc_aio_handle *h, int req);
/* Fill s->iov for the remainder of a framed request; returns the count. */
ZINC_INTERNAL int zinc_aio_req_iov(zinc_aio_slot *s);
/* Fail every request of the batch still to come with `res` (a worker that
 * lost its ring). */
ZINC_INTERNAL void zinc_aio_req_fail(zinc_aio_ring *r, zinc_aio_slot *s, int err,
                                     const char *what);

/* --------------------------------------------------------- aio_files.c */

/* The fixed-buffer slot holding [p, p + len) whole, or -1. Under aio->mu. */
ZINC_INTERNAL int zinc_aio_fixed_slot(const zinc_aio *aio, const char *p, uint64_t len);

/* --------------------------------------------------------- aio_fault.c */

/* The number of the next request, and the result the fault plan turns a
 * kernel result into (res: bytes or -errno; want: bytes asked for). */
ZINC_INTERNAL int64_t zinc_aio_fault_number(zinc_aio *aio);
ZINC_INTERNAL int64_t zinc_aio_fault_apply(zinc_aio *aio, int64_t number, int64_t res,
                                           uint64_t want);
ZINC_INTERNAL int zinc_aio_fault_errno(zinc_aio *aio, int which); /* see below */
enum { ZINC_AIO_FAULT_OPEN, ZINC_AIO_FAULT_URING, ZINC_AIO_FAULT_FALLOCATE };
/* "EIO" or a number -> errno value; 0 if not recognised. */
ZINC_INTERNAL int zinc_aio_errno_parse(const char *s);
ZINC_INTERNAL const char *zinc_aio_errno_name(int err);

/* --------------------------------------------------------- aio_probe.c */

/* Whether dir's filesystem takes O_DIRECT, and the alignment it needs.
 * Sets *direct_ok = 0 and a reason in `why` when it refuses; returns an
 * error only when dir cannot be used at all (missing, not writable). */
ZINC_INTERNAL zinc_status zinc_aio_probe_dir(const char *dir, int open_fault,
                                             size_t *alignment, int *direct_ok,
                                             char *why, size_t whylen);
/* Direct-I/O alignment an open file needs (0 if it reports none). */
ZINC_INTERNAL size_t zinc_aio_probe_fd(int fd);

/* --------------------------------------------- aio_uring.c, aio_psync.c */

ZINC_INTERNAL int zinc_aio_uring_init(zinc_aio_ring *r);   /* 0 or -errno */
ZINC_INTERNAL void zinc_aio_uring_exit(zinc_aio_ring *r);
ZINC_INTERNAL void *zinc_aio_uring_worker(void *ring);
ZINC_INTERNAL void zinc_aio_uring_wake(zinc_aio_ring *r);
ZINC_INTERNAL void *zinc_aio_psync_worker(void *ring);
/* Synchronous transfer of the remainder of s (psync back end). */
ZINC_INTERNAL int64_t zinc_aio_psync_transfer(zinc_aio_ring *r, zinc_aio_slot *s);

#endif /* ZINC_OFFLOAD_AIO_INTERNAL_H */
