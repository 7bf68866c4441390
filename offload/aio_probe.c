/*
 * aio_probe.c — what a directory's filesystem allows for direct I/O: does
 * it take O_DIRECT at all, and which alignment do buffers, offsets and
 * lengths need.
 *
 * The alignment comes from statx(STATX_DIOALIGN) where the kernel reports
 * it (Linux 6.1+, ext4/xfs/btrfs/f2fs/block devices), else from the
 * logical block size of the block device behind the file (sysfs, then the
 * BLKSSZGET ioctl on the device node), else one page. A probe file is
 * created in the directory, written and read back with O_DIRECT, and
 * removed: some filesystems accept the open but reject the I/O.
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define PROBE_MAX_ALIGN 65536

static size_t read_sysfs_size(const char *path) {
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  unsigned long v = 0;
  if (fscanf(f, "%lu", &v) != 1)
    v = 0;
  fclose(f);
  return v;
}

/* Logical block size of the block device (major, minor), 0 if unknown. */
static size_t logical_block_size(unsigned major, unsigned minor) {
  if (major == 0) /* no block device: tmpfs, overlay, network */
    return 0;
  char path[128];
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u/queue/logical_block_size", major, minor);
  size_t v = read_sysfs_size(path);
  if (v)
    return v;
  /* a partition: the queue belongs to its parent disk */
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u/../queue/logical_block_size", major,
           minor);
  v = read_sysfs_size(path);
  if (v)
    return v;
  snprintf(path, sizeof path, "/dev/block/%u:%u", major, minor);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  int ssz = 0;
  if (ioctl(fd, BLKSSZGET, &ssz) != 0)
    ssz = 0;
  close(fd);
  return ssz > 0 ? (size_t)ssz : 0;
}

size_t zinc_aio_probe_fd(int fd) {
  struct statx sx;
  memset(&sx, 0, sizeof sx);
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN)) {
    size_t a = sx.stx_dio_offset_align > sx.stx_dio_mem_align ? sx.stx_dio_offset_align
                                                               : sx.stx_dio_mem_align;
    return a;
  }
  struct stat st;
  if (fstat(fd, &st) != 0)
    return 4096;
  size_t a = logical_block_size(major(st.st_dev), minor(st.st_dev));
  return a ? a : 4096;
}

zinc_status zinc_aio_probe_dir(const char *dir, int open_fault, size_t *alignment,
                               int *direct_ok, char *why, size_t whylen) {
  *alignment = 512;
  *direct_ok = 0;
  why[0] = '\0';
  struct stat st;
  if (stat(dir, &st) != 0)
    return zinc_error(ZINC_ERR_IO, "nvme_path %s: %s; create the directory or fix the path",
                      dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return zinc_error(ZINC_ERR_IO, "nvme_path %s is not a directory", dir);
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/.zinc-probe-%ld-XXXXXX", dir, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof path)
    return zinc_error(ZINC_ERR_INVALID, "nvme_path %s is too long", dir);
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0)
    return zinc_error(ZINC_ERR_IO, "cannot create files in nvme_path %s: %s", dir,
                      strerror(errno));
  close(fd);
  fd = open_fault ? -1 : open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
  int err = open_fault ? open_fault : errno;
  zinc_status st_out = ZINC_OK;
  if (fd < 0) {
    unlink(path);
    if (err != EINVAL)
      return zinc_error(ZINC_ERR_IO, "opening a probe file in nvme_path %s: %s", dir,
                        strerror(err));
    snprintf(why, whylen, "the filesystem of nvme_path %s refuses O_DIRECT (EINVAL on open)",
             dir);
    return ZINC_OK;
  }
  size_t a = zinc_aio_probe_fd(fd);
  if (a == 0) {
    snprintf(why, whylen, "the filesystem of nvme_path %s reports no direct I/O support "
             "(statx: dio alignment 0)", dir);
    goto out;
  }
  if (a < 512)
    a = 512;
  if (a > PROBE_MAX_ALIGN || (a & (a - 1))) {
    st_out = zinc_error(ZINC_ERR_UNSUPPORTED,
                        "nvme_path %s needs a direct-I/O alignment of %zu bytes, which zinc "
                        "does not support (at most %d, a power of two)",
                        dir, a, PROBE_MAX_ALIGN);
    goto out;
  }
  void *buf = NULL;
  if (posix_memalign(&buf, a > 4096 ? a : 4096, a) != 0) {
    st_out = zinc_error(ZINC_ERR_NOMEM, "out of host memory probing %s", dir);
    goto out;
  }
  memset(buf, 0x5a, a);
  ssize_t w = pwrite(fd, buf, a, 0);
  int werr = errno;
  ssize_t r = w == (ssize_t)a ? pread(fd, buf, a, 0) : -1;
  int rerr = errno;
  free(buf);
  if (w != (ssize_t)a || r != (ssize_t)a) {
    int e = w != (ssize_t)a ? werr : rerr;
    if (e == EINVAL)
      snprintf(why, whylen, "the filesystem of nvme_path %s accepts O_DIRECT opens but "
               "rejects %zu-byte direct I/O (EINVAL)", dir, a);
    else
      st_out = zinc_error(ZINC_ERR_IO, "direct I/O probe in nvme_path %s failed: %s", dir,
                          (w < 0 || r < 0) ? strerror(e) : "short transfer");
    goto out;
  }
  *alignment = a;
  *direct_ok = 1;
out:
  close(fd);
  unlink(path);
  return st_out;
}
