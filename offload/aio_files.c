/*
 * aio_files.c — the I/O engine's tables of open files and of host buffers:
 * opening files with O_DIRECT (or buffered, where allowed) and registering
 * them with every ring, and buffers aligned for direct I/O, registered as
 * fixed buffers in up to 1 GiB pieces, large ones on transparent huge
 * pages.
 *
 * Invariants: both tables are guarded by aio->mu; file slot i and fixed
 * buffer slot k mean the same thing on every ring; a buffer that the
 * kernel declined to register simply has no fixed slot.
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ----------------------------------------------------------------- files */

static zinc_status open_file(zinc_aio *aio, const char *path, int open_flags, mode_t mode,
                             int *fd_out, int *direct_out) {
  int flags = (open_flags & (O_CREAT | O_EXCL | O_TRUNC)) | O_RDWR | O_CLOEXEC;
  int fault = zinc_aio_fault_errno(aio, ZINC_AIO_FAULT_OPEN);
  if (aio->direct) {
    int fd = fault ? -1 : open(path, flags | O_DIRECT, mode);
    int err = fault ? fault : errno;
    if (fd >= 0) {
      size_t need = zinc_aio_probe_fd(fd);
      if (need > aio->alignment) {
        close(fd);
        return zinc_error(ZINC_ERR_UNSUPPORTED,
                          "%s needs %zu-byte alignment for direct I/O, more than the %zu "
                          "bytes the engine was created with: list its directory in "
                          "nvme_path so that it is probed",
                          path, need, aio->alignment);
      }
      *fd_out = fd;
      *direct_out = 1;
      return ZINC_OK;
    }
    if (err != EINVAL)
      return zinc_error(ZINC_ERR_IO, "opening %s: %s", path, strerror(err));
    if (!aio->allow_buffered_io)
      return zinc_error(ZINC_ERR_UNSUPPORTED,
                        "the filesystem of %s refuses O_DIRECT (EINVAL on open): NVMe "
                        "offload needs direct I/O; use a local NVMe filesystem, or set "
                        "\"aio\": {\"allow_buffered_io\": true}",
                        path);
    zinc_log(ZINC_LOG_WARN,
             "the filesystem of %s refuses O_DIRECT; aio.allow_buffered_io is set, so it "
             "is read and written through the page cache",
             path);
  }
  int fd = open(path, flags, mode);
  if (fd < 0)
    return zinc_error(ZINC_ERR_IO, "opening %s: %s", path, strerror(errno));
  *fd_out = fd;
  *direct_out = 0;
  return ZINC_OK;
}

zinc_status zinc_aio_file_open(zinc_aio *aio, const char *path, int open_flags, mode_t mode,
                               int *file) {
  *file = -1;
  int fd = -1, direct = 0;
  ZINC_CHECK(open_file(aio, path, open_flags, mode, &fd, &direct));
  char *copy = zinc_strdup(path);
  pthread_mutex_lock(&aio->mu);
  int slot = -1;
  for (int i = 0; i < ZINC_AIO_MAX_FILES && slot < 0; i++)
    if (aio->files[i].fd < 0)
      slot = i;
  zinc_status st = ZINC_OK;
  if (!copy)
    st = zinc_error(ZINC_ERR_NOMEM, "out of host memory opening %s", path);
  else if (slot < 0)
    st = zinc_error(ZINC_ERR_INVALID, "opening %s: the I/O engine already has %d files open",
                    path, ZINC_AIO_MAX_FILES);
  for (int i = 0; st == ZINC_OK && aio->files_registered && i < aio->nrings; i++) {
    int rc = io_uring_register_files_update(&aio->rings[i].uring, (unsigned)slot, &fd, 1);
    if (rc < 0) {
      int none = -1;
      for (int j = 0; j < i; j++)
        io_uring_register_files_update(&aio->rings[j].uring, (unsigned)slot, &none, 1);
      st = zinc_error(ZINC_ERR_IO, "registering %s with io_uring: %s", path, strerror(-rc));
    }
  }
  if (st == ZINC_OK) {
    aio->files[slot].fd = fd;
    aio->files[slot].direct = direct;
    aio->files[slot].path = copy;
    *file = slot;
  }
  pthread_mutex_unlock(&aio->mu);
  if (st != ZINC_OK) {
    free(copy);
    close(fd);
  }
  return st;
}

zinc_status zinc_aio_file_close(zinc_aio *aio, int file) {
  if (file < 0 || file >= ZINC_AIO_MAX_FILES)
    return zinc_error(ZINC_ERR_INVALID, "closing I/O file %d: no such file", file);
  pthread_mutex_lock(&aio->mu);
  zinc_aio_file *f = &aio->files[file];
  if (f->fd < 0) {
    pthread_mutex_unlock(&aio->mu);
    return zinc_error(ZINC_ERR_INVALID, "closing I/O file %d: not open", file);
  }
  int none = -1;
  for (int i = 0; aio->files_registered && i < aio->nrings; i++)
    io_uring_register_files_update(&aio->rings[i].uring, (unsigned)file, &none, 1);
  int rc = close(f->fd);
  int err = errno;
  char *path = f->path;
  f->fd = -1;
  f->path = NULL;
  pthread_mutex_unlock(&aio->mu);
  zinc_status st = ZINC_OK;
  if (rc != 0)
    st = zinc_error(ZINC_ERR_IO, "closing %s: %s", path, strerror(err));
  free(path);
  return st;
}

int zinc_aio_file_fd(const zinc_aio *aio, int file) {
  if (file < 0 || file >= ZINC_AIO_MAX_FILES)
    return -1;
  return aio->files[file].fd;
}

const char *zinc_aio_file_path(const zinc_aio *aio, int file) {
  if (file < 0 || file >= ZINC_AIO_MAX_FILES)
    return NULL;
  return aio->files[file].path;
}

/* --------------------------------------------------------------- buffers */

/* Register b's memory in consecutive fixed slots on every ring, in chunks
 * of at most 1 GiB; on any refusal it stays unregistered. Under aio->mu. */
static void register_fixed(zinc_aio *aio, zinc_aio_buffer *b) {
  b->slot = -1;
  b->nslots = 0;
  if (!aio->buffers_registered)
    return;
  int n = (int)zinc_div_up(b->bytes, ZINC_AIO_FIXED_CHUNK);
  int first = -1;
  for (int i = 0; i + n <= ZINC_AIO_MAX_BUFS && first < 0; i++) {
    int freerun = 1;
    for (int k = 0; k < n && freerun; k++)
      freerun = !aio->fixed_used[i + k];
    if (freerun)
      first = i;
  }
  if (first < 0)
    return;
  for (int k = 0; k < n; k++) {
    size_t off = (size_t)k * ZINC_AIO_FIXED_CHUNK;
    struct iovec iov = {b->base + off, b->bytes - off < ZINC_AIO_FIXED_CHUNK
                                           ? b->bytes - off : ZINC_AIO_FIXED_CHUNK};
    for (int r = 0; r < aio->nrings; r++) {
      int rc = io_uring_register_buffers_update_tag(&aio->rings[r].uring,
                                                    (unsigned)(first + k), &iov, NULL, 1);
      if (rc < 0) {
        zinc_log(ZINC_LOG_DEBUG, "io_uring declined to register %zu bytes (%s); using "
                 "plain reads and writes for them", b->bytes, strerror(-rc));
        struct iovec none = {NULL, 0};
        for (int k2 = 0; k2 <= k; k2++)
          for (int r2 = 0; r2 < aio->nrings; r2++)
            io_uring_register_buffers_update_tag(&aio->rings[r2].uring,
                                                 (unsigned)(first + k2), &none, NULL, 1);
        return;
      }
    }
  }
  for (int k = 0; k < n; k++)
    aio->fixed_used[first + k] = 1;
  b->slot = first;
  b->nslots = n;
}

static void unregister_fixed(zinc_aio *aio, zinc_aio_buffer *b) {
  struct iovec none = {NULL, 0};
  for (int k = 0; k < b->nslots; k++) {
    for (int r = 0; r < aio->nrings; r++)
      io_uring_register_buffers_update_tag(&aio->rings[r].uring, (unsigned)(b->slot + k),
                                           &none, NULL, 1);
    aio->fixed_used[b->slot + k] = 0;
  }
  b->slot = -1;
  b->nslots = 0;
}

static zinc_status add_buffer(zinc_aio *aio, void *buf, size_t bytes, int owned) {
  pthread_mutex_lock(&aio->mu);
  zinc_aio_buffer *b = NULL;
  for (int i = 0; i < ZINC_AIO_MAX_BUFS && !b; i++)
    if (!aio->buffers[i].base)
      b = &aio->buffers[i];
  if (!b) {
    pthread_mutex_unlock(&aio->mu);
    if (owned)
      return zinc_error(ZINC_ERR_NOMEM, "the I/O engine already holds %d buffers; free some",
                        ZINC_AIO_MAX_BUFS);
    return ZINC_OK; /* the caller's memory simply stays unregistered */
  }
  b->base = buf;
  b->bytes = bytes;
  b->owned = owned;
  register_fixed(aio, b);
  pthread_mutex_unlock(&aio->mu);
  return ZINC_OK;
}

/* Remove buf from the table; returns whether the engine allocated it. */
static int remove_buffer(zinc_aio *aio, void *buf) {
  int owned = 0;
  pthread_mutex_lock(&aio->mu);
  for (int i = 0; i < ZINC_AIO_MAX_BUFS; i++) {
    zinc_aio_buffer *b = &aio->buffers[i];
    if (b->base != buf)
      continue;
    unregister_fixed(aio, b);
    owned = b->owned;
    memset(b, 0, sizeof *b);
    break;
  }
  pthread_mutex_unlock(&aio->mu);
  return owned;
}

zinc_status zinc_aio_buffer_alloc(zinc_aio *aio, size_t bytes, void **out) {
  *out = NULL;
  size_t align = aio->alignment > 4096 ? aio->alignment : 4096;
  size_t len = zinc_round_up(bytes ? bytes : 1, aio->alignment);
  /* Large buffers on transparent huge pages: the kernel pins the pages of
   * every request that is not a fixed-buffer one (vectored swap blocks),
   * and pinning one 2 MiB page costs what pinning one 4 KiB page does. */
  int huge = len >= ZINC_AIO_HUGE_PAGE;
  if (huge) {
    align = ZINC_AIO_HUGE_PAGE;
    len = zinc_round_up(len, ZINC_AIO_HUGE_PAGE);
  }
  void *p;
  ZINC_CHECK(zinc_aligned_alloc(&p, align, len, "an I/O buffer"));
  if (huge)
    madvise(p, len, MADV_HUGEPAGE); /* advice only: fine if THP is off */
  zinc_status st = add_buffer(aio, p, len, 1);
  if (st != ZINC_OK) {
    free(p);
    return st;
  }
  *out = p;
  return ZINC_OK;
}

void zinc_aio_buffer_free(zinc_aio *aio, void *buf) {
  if (!buf)
    return;
  remove_buffer(aio, buf);
  free(buf);
}

zinc_status zinc_aio_buffer_register(zinc_aio *aio, void *buf, size_t bytes) {
  if (!buf || bytes == 0)
    return zinc_error(ZINC_ERR_INVALID, "registering an I/O buffer: NULL or empty");
  return add_buffer(aio, buf, bytes, 0);
}

void zinc_aio_buffer_unregister(zinc_aio *aio, void *buf) {
  if (buf)
    remove_buffer(aio, buf);
}

int zinc_aio_fixed_slot(const zinc_aio *aio, const char *p, uint64_t len) {
  for (int i = 0; i < ZINC_AIO_MAX_BUFS; i++) {
    const zinc_aio_buffer *b = &aio->buffers[i];
    if (!b->base || b->slot < 0 || p < b->base || p + len > b->base + b->bytes)
      continue;
    size_t chunk = (size_t)(p - b->base) / ZINC_AIO_FIXED_CHUNK;
    size_t chunk_end = (size_t)(p + len - 1 - b->base) / ZINC_AIO_FIXED_CHUNK;
    return chunk == chunk_end ? b->slot + (int)chunk : -1;
  }
  return -1;
}
