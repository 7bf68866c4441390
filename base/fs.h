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
 * filesystem has no RENAME_EXCHANGE the old `to` is moved aside first. */
zinc_status zinc_fs_rename_into_place(const char *from, const char *to, int *exchanged);

/* crc32c and size of a whole file. A missing file is ZINC_ERR_CORRUPT. */
zinc_status zinc_fs_crc32c(const char *path, uint32_t *crc, int64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_BASE_FS_H */
