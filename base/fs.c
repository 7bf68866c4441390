/*
 * fs.c — the filesystem helpers of fs.h.
 *
 * Every write path that promises durability ends with fsync of the file
 * and of its directory; every read path checks the size it was promised.
 * Errors go through zinc_fs_error, so they all read the same way.
 */
#define _GNU_SOURCE
#include "base/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

zinc_status zinc_fs_error(const char *op, const char *path, int64_t offset, int err) {
  char at[48] = "";
  if (offset >= 0)
    snprintf(at, sizeof at, " at offset %lld", (long long)offset);
  if (err == ENOSPC || err == EDQUOT)
    return zinc_error(ZINC_ERR_IO, "%s %s%s: %s (free space on that filesystem and try "
                      "again)", op, path, at, strerror(err));
  return zinc_error(ZINC_ERR_IO, "%s %s%s: %s", op, path, at, strerror(err));
}

/* ------------------------------------------------------ whole ranges */

zinc_status zinc_fs_pwrite_all(int fd, const char *path, const void *data, size_t len,
                               int64_t offset) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = pwrite(fd, p, len, offset);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return zinc_fs_error("write", path, offset, errno);
    }
    if (w == 0)
      return zinc_fs_error("write", path, offset, ENOSPC);
    p += w;
    len -= (size_t)w;
    offset += w;
  }
  return ZINC_OK;
}

zinc_status zinc_fs_pread_all(int fd, const char *path, void *data, size_t len, int64_t offset) {
  char *p = data;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, offset);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return zinc_fs_error("read", path, offset, errno);
    }
    if (r == 0)
      return zinc_error(ZINC_ERR_CORRUPT, "read %s at offset %lld: the file ends early "
                        "(truncated)", path, (long long)offset);
    p += r;
    len -= (size_t)r;
    offset += r;
  }
  return ZINC_OK;
}

/* ------------------------------------------------------ small files */

zinc_status zinc_fs_read_bounded(const char *path, size_t max, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? zinc_error(ZINC_ERR_CORRUPT, "%s is missing", path)
                           : zinc_fs_error("open", path, 0, errno);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return zinc_fs_error("stat", path, -1, err);
  }
  if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > (uint64_t)max) {
    close(fd);
    return zinc_error(ZINC_ERR_CORRUPT, "%s is %s%lld bytes, more than the %zu bytes this file "
                      "may hold: not the file zinc wrote there (damaged, or another file in "
                      "its place); nothing was read", path,
                      S_ISREG(sb.st_mode) ? "" : "not a regular file, ",
                      (long long)sb.st_size, max);
  }
  char *buf = malloc((size_t)sb.st_size + 1);
  if (!buf) {
    close(fd);
    return zinc_error(ZINC_ERR_NOMEM, "out of memory reading %s (%lld bytes)", path,
                      (long long)sb.st_size);
  }
  zinc_status st = zinc_fs_pread_all(fd, path, buf, (size_t)sb.st_size, 0);
  close(fd);
  if (st != ZINC_OK) {
    free(buf);
    return st;
  }
  buf[sb.st_size] = '\0';
  *data = buf;
  *len = (size_t)sb.st_size;
  return ZINC_OK;
}

zinc_status zinc_fs_read_all(const char *path, char **data, size_t *len) {
  return zinc_fs_read_bounded(path, (size_t)1 << 32, data, len);
}

zinc_status zinc_fs_fsync(const char *path, int is_dir) {
  int fd = open(path, (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return zinc_fs_error("open for fsync", path, 0, errno);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  return rc == 0 ? ZINC_OK : zinc_fs_error("fsync", path, 0, err);
}

/* The directory part of path ("." when it has none), malloc'ed. */
static char *dir_of(const char *path) {
  char *d = zinc_strdup(path);
  if (!d)
    return NULL;
  char *slash = strrchr(d, '/');
  if (!slash) {
    free(d);
    return zinc_strdup(".");
  }
  if (slash == d)
    slash[1] = '\0';
  else
    *slash = '\0';
  return d;
}

zinc_status zinc_fs_publish(int fd, const char *tmp, const char *path) {
  if (fsync(fd) != 0)
    return zinc_fs_error("fsync", tmp, -1, errno);
  if (rename(tmp, path) != 0)
    return zinc_fs_error("rename into place", path, 0, errno);
  char *dir = dir_of(path);
  if (!dir)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing %s", path);
  zinc_status st = zinc_fs_fsync(dir, 1);
  free(dir);
  return st;
}

int zinc_fs_create_new(const char *path, int mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0 && errno == EEXIST) {
    /* a temporary left by a crash, or a link someone put there: removed
     * (a link's target is never touched), then created anew */
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode) && unlink(path) == 0)
      fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    else
      errno = EEXIST;
  }
  return fd;
}

zinc_status zinc_fs_write_atomic(const char *path, const void *data, size_t len) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing %s", path);
  snprintf(tmp, n, "%s.tmp", path);
  zinc_status st = ZINC_OK;
  int fd = zinc_fs_create_new(tmp, 0644);
  if (fd < 0) {
    st = zinc_fs_error("create", tmp, 0, errno);
  } else {
    st = zinc_fs_pwrite_all(fd, tmp, data, len, 0);
    if (st == ZINC_OK)
      st = zinc_fs_publish(fd, tmp, path);
    close(fd);
    if (st != ZINC_OK)
      unlink(tmp);
  }
  free(tmp);
  return st;
}

/* ------------------------------------------------------- directories */

zinc_status zinc_fs_remove_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return errno == ENOENT ? ZINC_OK : zinc_fs_error("stat", path, 0, errno);
  if (!S_ISDIR(sb.st_mode))
    return unlink(path) == 0 || errno == ENOENT ? ZINC_OK
                                                : zinc_fs_error("remove", path, 0, errno);
  DIR *d = opendir(path);
  if (!d)
    return zinc_fs_error("open directory", path, 0, errno);
  zinc_status st = ZINC_OK;
  struct dirent *ent;
  while (st == ZINC_OK && (ent = readdir(d))) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
      continue;
    char *child = zinc_path_join(path, ent->d_name);
    if (!child) {
      st = zinc_error(ZINC_ERR_NOMEM, "out of memory removing %s", path);
      break;
    }
    st = zinc_fs_remove_tree(child);
    free(child);
  }
  closedir(d);
  if (st == ZINC_OK && rmdir(path) != 0 && errno != ENOENT)
    st = zinc_fs_error("remove directory", path, 0, errno);
  return st;
}

zinc_status zinc_fs_mkdirs(const char *path) {
  char *p = zinc_strdup(path);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory creating %s", path);
  zinc_status st = ZINC_OK;
  for (char *c = p + 1;; c++) {
    if (*c == '/' || *c == '\0') {
      char saved = *c;
      *c = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        st = zinc_fs_error("create directory", p, 0, errno);
        break;
      }
      *c = saved;
      if (saved == '\0')
        break;
    }
  }
  free(p);
  return st;
}

zinc_status zinc_fs_rename_into_place(const char *from, const char *to, int *exchanged) {
  *exchanged = 0;
  struct stat sb;
  if (lstat(to, &sb) == 0) {
    if (zinc_env_flag("ZINC_FS_NO_EXCHANGE", 0))
      return zinc_error(ZINC_ERR_UNSUPPORTED, "exchange %s with %s: RENAME_EXCHANGE is "
                        "disabled (ZINC_FS_NO_EXCHANGE)", from, to);
    if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0) {
      *exchanged = 1;
      return ZINC_OK;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)
      return zinc_error(ZINC_ERR_UNSUPPORTED, "exchange %s with %s: this filesystem has no "
                        "RENAME_EXCHANGE", from, to);
    return zinc_fs_error("exchange into place", to, 0, errno);
  }
  if (rename(from, to) != 0)
    return zinc_fs_error("rename into place", to, 0, errno);
  return ZINC_OK;
}

/* ------------------------------------------------------------ locks */

zinc_status zinc_fs_lock(const char *path, const char *who, int *fd_out) {
  *fd_out = -1;
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return zinc_fs_error("open lock file", path, -1, errno);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char holder[256] = "";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK)
      return zinc_fs_error("lock", path, -1, err);
    holder[n > 0 ? n : 0] = '\0';
    for (char *c = holder; *c; c++)
      if (*c == '\n')
        *c = ' ';
    return zinc_error(ZINC_ERR_INVALID, "%s is locked by another process (%s)", path,
                      holder[0] ? holder : "it has not written its name yet");
  }
  /* written over the last holder's text, then cut to length: a process
   * that is refused reads a name at every instant */
  zinc_status st = zinc_fs_pwrite_all(fd, path, who, strlen(who), 0);
  if (st == ZINC_OK && ftruncate(fd, (off_t)strlen(who)) != 0)
    st = zinc_fs_error("truncate lock file", path, -1, errno);
  if (st != ZINC_OK) {
    close(fd);
    return st;
  }
  *fd_out = fd;
  return ZINC_OK;
}

void zinc_fs_unlock(int fd) {
  if (fd >= 0)
    close(fd); /* releases the flock */
}

/* ------------------------------------------------------------- crc */

zinc_status zinc_fs_crc32c(const char *path, uint32_t *crc, int64_t *bytes) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? zinc_error(ZINC_ERR_CORRUPT, "%s is missing", path)
                           : zinc_fs_error("open", path, 0, errno);
  enum { CHUNK = 4 << 20 };
  char *buf = malloc(CHUNK);
  zinc_status st = buf ? ZINC_OK : zinc_error(ZINC_ERR_NOMEM, "out of memory reading %s", path);
  uint32_t c = 0;
  int64_t off = 0;
  while (st == ZINC_OK) {
    ssize_t r = pread(fd, buf, CHUNK, off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      st = zinc_fs_error("read", path, off, errno);
    if (r <= 0)
      break;
    c = zinc_crc32c(c, buf, (size_t)r);
    off += r;
  }
  free(buf);
  close(fd);
  *crc = c;
  *bytes = off;
  return st;
}
