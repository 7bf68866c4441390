/*
 * fs.h — filesystem helpers every folder shares: whole-range reads and
 * writes, whole small files, crash-safe replacement (write a temporary,
 * fsync, rename, fsync the directory), fsync of a path, mkdir -p, rm -r,
 * and rename-or-exchange into place.
 *
 * Invariants: every failure is a zinc_status with a message that names the
 * operation, the path, the offset where it matters and errno's text
 * (zinc_fs_error); nothing here sets errno for the caller. A replacement
 * that returns ZINC_OK is durable (the file and its directory entry are
 * fsynced); one that fails leaves the old file at the path and removes its
 * temporary. Paths are used as given (relative to the working directory).
 */
#ifndef ZINC_BASE_FS_H
#define ZINC_BASE_FS_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ZINC_ERR_IO "<op> <path> at offset <offset>: <strerror(err)>", with a
 * hint to free space when err is ENOSPC or EDQUOT. Returns ZINC_ERR_IO. */
zinc_status zinc_fs_error(const char *op, const char *path, int64_t offset, int err);

/* pwrite/pread all len bytes at offset, retrying short transfers and EINTR.
 * path names fd in messages. A write that makes no progress is ENOSPC; a
 * read that meets the end of the file is ZINC_ERR_CORRUPT ("truncated"). */
zinc_status zinc_fs_pwrite_all(int fd, const char *path, const void *data, size_t len,
                               int64_t offset);
zinc_status zinc_fs_pread_all(int fd, const char *path, void *data, size_t len, int64_t offset);

/* The whole file (at most 4 GiB), malloc'ed with a '\0' after its *len
 * bytes. A missing file is ZINC_ERR_CORRUPT "<path> is missing": the
 * callers read files that must exist (a checkpoint's, a tool's input). */
zinc_status zinc_fs_read_all(const char *path, char **data, size_t *len);
/* The same for a file that may hold at most max bytes: a larger one (or
 * one that is not a regular file) is ZINC_ERR_CORRUPT naming both sizes,
 * and nothing is read. */
zinc_status zinc_fs_read_bounded(const char *path, size_t max, char **data, size_t *len);

/* Create path for writing, mode `mode`: a new file, never opened through a
 * symbolic link (O_EXCL | O_NOFOLLOW); a file or link already there is
 * removed first (a link's target is left alone). The fd, or -1 with errno. */
int zinc_fs_create_new(const char *path, int mode);

/* Replace path with data: write <path>.tmp, fsync it, rename it over
 * path, fsync the directory. */
zinc_status zinc_fs_write_atomic(const char *path, const void *data, size_t len);

/* Publish a temporary file written through fd: fsync fd, rename tmp over
 * path, fsync path's directory. fd stays open (the caller closes it); on
 * failure tmp may remain (the caller removes it). */
zinc_status zinc_fs_publish(int fd, const char *tmp, const char *path);

/* fsync a file, or a directory (is_dir) so that its entries are durable. */
zinc_status zinc_fs_fsync(const char *path, int is_dir);

/* rm -r: path and everything under it; no error when it is absent.
 * Symbolic links are removed, never followed. */
zinc_status zinc_fs_remove_tree(const char *path);

/* mkdir -p with mode 0755 for the missing parts. */
zinc_status zinc_fs_mkdirs(const char *path);

/* Atomically put `from` at `to`: rename, or exchange with an existing `to`
 * (the old one is then at `from`). *exchanged says which. Where the
 * filesystem has no RENAME_EXCHANGE (NFS and other shared filesystems), or
 * ZINC_FS_NO_EXCHANGE=1 says to act so, an existing `to` is left alone and
 * the status is ZINC_ERR_UNSUPPORTED: the caller moves things itself in
 * an order that is safe for what it keeps there. */
zinc_status zinc_fs_rename_into_place(const char *from, const char *to, int *exchanged);

/* An exclusive advisory lock (flock) on path, created if absent and never
 * opened through a symbolic link, held until zinc_fs_unlock(*fd). The
 * holder writes `who` (its pid, host, ...) into the file. When another
 * process holds it: ZINC_ERR_INVALID naming path and the holder's text,
 * nothing is changed. */
zinc_status zinc_fs_lock(const char *path, const char *who, int *fd);
void zinc_fs_unlock(int fd);

/* crc32c and size of a whole file. A missing file is ZINC_ERR_CORRUPT. */
zinc_status zinc_fs_crc32c(const char *path, uint32_t *crc, int64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_BASE_FS_H */
