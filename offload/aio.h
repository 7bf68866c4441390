/*
 * aio.h — zinc's I/O engine: large host buffers to and from files on NVMe
 * through io_uring, with O_DIRECT on aligned buffers.
 *
 * A caller that pipelines submits a batch of operations (each a large host
 * buffer and a file range), gets a handle, computes, and waits on the
 * handle. The engine splits every operation into requests of at most
 * block_size bytes, deals the requests round-robin to its rings (one worker
 * thread each, `aio.intra_op_parallelism` of them) and keeps at most
 * queue_depth requests in flight per ring:
 *   - overlap_events (DeepSpeed's meaning): on, a ring tops its queue up as
 *     each completion arrives; off, it submits queue_depth requests, waits
 *     for all of them, then submits the next queue_depth.
 *   - single_submit: on, every request is handed to the kernel by its own
 *     submit call; off, all requests prepared together go in one call.
 * Short transfers are resubmitted for the remainder; -EINTR and -EAGAIN are
 * retried (up to ZINC_AIO_MAX_RETRIES times per request); any other failure
 * fails the batch with ZINC_ERR_IO naming the file, the offset and the
 * errno text. Workers sleep in io_uring_wait_cqe or on a condition
 * variable; nothing polls.
 *
 * Direct I/O: files are opened with O_DIRECT, so every buffer address, file
 * offset and length handed to the engine must be a multiple of
 * zinc_aio_alignment() (the largest logical-block / DIO alignment of the
 * probed directories, at least 512). The rule holds in buffered mode too,
 * so callers are written once.
 *
 * Fallbacks: if a probed directory's filesystem refuses O_DIRECT (EINVAL
 * on open) or io_uring cannot be set up (ENOSYS, EPERM, ...), creation fails
 * with ZINC_ERR_UNSUPPORTED saying why, unless allow_buffered_io is set
 * (config key aio.allow_buffered_io); then the engine warns once and runs
 * without O_DIRECT, or with one synchronous pread/pwrite thread per ring
 * when io_uring itself is missing.
 *
 * Framed operations carry a small header in front of their payload, sent
 * with vectored I/O so the payload lands directly in the caller's buffer
 * (used by swap.c for per-block checksums). Callbacks fill the header
 * before a write is submitted and check it after a read completes; they run
 * on the worker threads.
 *
 * Fault injection (tests): see zinc_aio_fault and ZINC_AIO_FAULT below.
 *
 * Thread safety: zinc_aio_submit, zinc_aio_wait, zinc_aio_done, the
 * synchronous helpers, zinc_aio_stats and zinc_aio_fault_set may be called
 * from any thread at once. File and buffer functions are thread-safe too,
 * but a file may not be closed, nor a buffer freed, while a submitted
 * operation uses it. A handle is waited on by exactly one thread.
 */
#ifndef ZINC_OFFLOAD_AIO_H
#define ZINC_OFFLOAD_AIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZINC_AIO_MAX_RINGS ZINC_AIO_MAX_THREADS /* intra_op_parallelism (config.h) */
#define ZINC_AIO_MAX_FILES 256   /* files open in one engine at once        */
#define ZINC_AIO_MAX_RETRIES 64  /* -EINTR/-EAGAIN retries of one request   */

typedef struct zinc_aio zinc_aio;
typedef struct zinc_aio_handle zinc_aio_handle;

/* ------------------------------------------------------- fault injection */

/* Faults the engine injects, for tests. Request numbers count every request
 * handed to the kernel (or to pread/pwrite) by this engine, retries
 * included, from 1; zinc_aio_fault_set() restarts the count.
 *
 * The environment variable ZINC_AIO_FAULT sets the same faults for
 * end-to-end runs (read at zinc_aio_create unless params.fault is given):
 * a comma-separated list of
 *     error@N=ERRNO[xK]   requests N..N+K-1 complete with -ERRNO (K = 1)
 *     enospc@N            the same as error@N=ENOSPC
 *     short@N             request N transfers only about half its bytes
 *     open=ERRNO          opening a file or probe with O_DIRECT fails
 *     uring=ERRNO         io_uring_queue_init fails
 *     fallocate=ERRNO     swap space reservation fails
 * ERRNO is a name (EIO, ENOSPC, EINTR, EAGAIN, EINVAL, ENOSYS, EPERM, ...)
 * or a number. Example: ZINC_AIO_FAULT=error@3=EIO,short@1 */
typedef struct {
  int64_t fail_request; /* first failing request number; 0: none          */
  int fail_errno;       /* the errno it completes with                     */
  int fail_count;       /* how many consecutive requests fail (>= 1)       */
  int64_t short_request;/* request number that is cut short; 0: none       */
  int open_errno;       /* O_DIRECT opens fail with this; 0: none          */
  int uring_errno;      /* io_uring_queue_init fails with this; 0: none    */
  int fallocate_errno;  /* space reservation fails with this; 0: none      */
} zinc_aio_fault;

/* Parse a ZINC_AIO_FAULT string; ZINC_ERR_INVALID names the bad item. */
zinc_status zinc_aio_fault_parse(const char *spec, zinc_aio_fault *out);
/* Replace the engine's faults and restart the request count. */
void zinc_aio_fault_set(zinc_aio *aio, const zinc_aio_fault *fault);
/* The engine's current faults (copied). */
void zinc_aio_fault_get(const zinc_aio *aio, zinc_aio_fault *out);

/* ---------------------------------------------------------------- engine */

typedef struct {
  int64_t block_size;    /* bytes per request (aio.block_size)             */
  int queue_depth;       /* requests in flight per ring (aio.queue_depth)  */
  int rings;             /* rings = worker threads (aio.intra_op_parallelism) */
  int single_submit;     /* aio.single_submit                              */
  int overlap_events;    /* aio.overlap_events                             */
  int allow_buffered_io; /* aio.allow_buffered_io                          */
  /* Directories whose filesystems are probed at creation for O_DIRECT
   * support and alignment (the nvme_path lists). Borrowed for the call. */
  const char *probe_dirs[2 * ZINC_MAX_NVME_PATHS];
  int probe_dir_count;
  const zinc_aio_fault *fault; /* NULL: read ZINC_AIO_FAULT             */
} zinc_aio_params;

/* The aio section of resolved settings, probing the nvme_path directories
 * of every offload target that is "nvme". Pointers borrow from s. */
void zinc_aio_params_from_settings(const zinc_settings *s, zinc_aio_params *out);

zinc_status zinc_aio_create(const zinc_aio_params *params, zinc_aio **out);
/* Finishes the work already submitted, stops the workers, closes the
 * files still open and releases buffers still registered. NULL is fine.
 * Handles not yet waited on must be waited on before destroy. */
void zinc_aio_destroy(zinc_aio *aio);

size_t zinc_aio_alignment(const zinc_aio *aio); /* offsets, lengths, buffers */
int64_t zinc_aio_block_size(const zinc_aio *aio);
int zinc_aio_is_direct(const zinc_aio *aio);    /* 1: files use O_DIRECT      */
int zinc_aio_uses_uring(const zinc_aio *aio);   /* 0: pread/pwrite fallback   */

typedef struct {
  uint64_t bytes_read, bytes_written; /* payload and headers               */
  uint64_t requests;                  /* requests handed to the kernel     */
  uint64_t retries;                   /* -EINTR/-EAGAIN resubmissions      */
  uint64_t short_transfers;           /* remainders resubmitted            */
} zinc_aio_stats;
void zinc_aio_stats_get(const zinc_aio *aio, zinc_aio_stats *out);

/* ----------------------------------------------------------------- files */

/* Open `path` for reading and writing (O_DIRECT when the engine is
 * direct) and register it with every ring. open_flags may add O_CREAT,
 * O_EXCL, O_TRUNC; mode applies with O_CREAT. *file is the id used in
 * zinc_aio_op. EINVAL from an O_DIRECT open is reported as the filesystem
 * refusing direct I/O (ZINC_ERR_UNSUPPORTED). */
zinc_status zinc_aio_file_open(zinc_aio *aio, const char *path, int open_flags,
                               mode_t mode, int *file);
zinc_status zinc_aio_file_close(zinc_aio *aio, int file);
int zinc_aio_file_fd(const zinc_aio *aio, int file);          /* -1 if none  */
const char *zinc_aio_file_path(const zinc_aio *aio, int file); /* NULL if none */

/* --------------------------------------------------------------- buffers */

/* Host memory aligned to max(alignment, page) and registered with every
 * ring (fixed-buffer reads and writes) where the kernel allows; the length
 * is rounded up to the alignment. Buffers of 2 MiB or more are 2 MiB
 * aligned and advised onto transparent huge pages: requests that cannot use
 * the registration (vectored swap blocks) then pin one page per 2 MiB
 * instead of 512 (docs/benchmarks.md has the figure). Memory from elsewhere
 * (a pinned pool) gains the same from madvise(MADV_HUGEPAGE) before first
 * touch. Free with zinc_aio_buffer_free. */
zinc_status zinc_aio_buffer_alloc(zinc_aio *aio, size_t bytes, void **out);
void zinc_aio_buffer_free(zinc_aio *aio, void *buf);
/* Register memory allocated elsewhere (a pinned pool); optional: I/O on
 * unregistered memory works, a little slower. Returns ZINC_OK also when the
 * kernel declined (the memory then stays unregistered). */
zinc_status zinc_aio_buffer_register(zinc_aio *aio, void *buf, size_t bytes);
void zinc_aio_buffer_unregister(zinc_aio *aio, void *buf);

/* ------------------------------------------------------------ operations */

typedef enum { ZINC_AIO_READ = 0, ZINC_AIO_WRITE = 1 } zinc_aio_dir;

typedef struct {
  zinc_aio_dir dir;
  int file;        /* id from zinc_aio_file_open                           */
  uint64_t offset; /* file offset (framed: where the header starts)        */
  void *buf;       /* host memory, `bytes` long (framed: the payload)      */
  uint64_t bytes;  /* > 0; framed: at most 2^32 - 1 - header bytes         */
  uint64_t tag;    /* framed: handed to the callbacks (swap: block index)  */
} zinc_aio_op;

/* Framed batches: every op is one request of [header | payload] at
 * op.offset, header_bytes long header (a multiple of the alignment) then
 * op.bytes of payload from/into op.buf. The callbacks run on worker
 * threads, concurrently; they report failure with zinc_error(), whose
 * message becomes the batch's. */
typedef struct {
  uint32_t header_bytes;
  /* Before a write is submitted: fill `header` for `payload`. */
  zinc_status (*fill)(void *ctx, const zinc_aio_op *op, void *header);
  /* After a read completed: check `header` against `payload`. */
  zinc_status (*check)(void *ctx, const zinc_aio_op *op, const void *header);
  void *ctx;
} zinc_aio_framing;

/* Queue nops operations (copied; may be 0) and return at once. framing is
 * NULL for plain batches. Arguments are validated before anything is
 * queued (ZINC_ERR_INVALID naming the op). The buffers must stay valid, and
 * for writes unchanged, until the handle is waited on. */
zinc_status zinc_aio_submit(zinc_aio *aio, const zinc_aio_op *ops, int nops,
                            const zinc_aio_framing *framing, zinc_aio_handle **out);
/* Block until every request of the batch finished, free the handle, and
 * return the first failure (its message set in the calling thread). After
 * a failure the remaining requests of the batch are skipped, so the file
 * ranges of a failed write batch hold unknown data. NULL returns ZINC_OK. */
zinc_status zinc_aio_wait(zinc_aio_handle *h);
/* 1 if the batch has finished (zinc_aio_wait will not block). */
int zinc_aio_done(const zinc_aio_handle *h);

/* Synchronous helpers: one plain operation, submitted and waited on. */
zinc_status zinc_aio_read(zinc_aio *aio, int file, uint64_t offset, void *buf,
                          uint64_t bytes);
zinc_status zinc_aio_write(zinc_aio *aio, int file, uint64_t offset,
                           const void *buf, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_OFFLOAD_AIO_H */
