/*
 * publish.c — publishing a save: the checkpoint directory's names, the
 * lock's holder, the partial directory, the rename into place and latest.
 *
 * Rank 0 owns the directory's names while it holds <dir>/.zinc-save.lock
 * (flock, for the whole save): a second job saving into the same directory
 * is refused, naming the holder, before it touches anything.
 *
 * Invariants: <dir>/latest names a complete checkpoint at every instant
 * (a crash anywhere leaves one to load); the only complete copy of a
 * checkpoint is never removed; a directory zinc did not create (no
 * .zinc-checkpoint marker, no valid checksums file) is never removed.
 *
 * A new tag: rename .<tag>.partial to <tag>, then latest. Re-saving a tag:
 * exchange the two directories (RENAME_EXCHANGE), latest, remove the old
 * one. Without RENAME_EXCHANGE (NFS and other shared filesystems; forced
 * by ZINC_FS_NO_EXCHANGE=1) the new copy is staged:
 *   1. rename .<tag>.partial to .<tag>.next; latest names .<tag>.next
 *   2. move the old <tag> to .<tag>.old and remove it
 *   3. .<tag>.link: a directory of hard links to .<tag>.next's files,
 *      renamed to <tag>; latest names <tag>; remove .<tag>.next
 * A crash inside 2-3 leaves latest naming .<tag>.next, complete; the next
 * save into the directory finishes 2-3 before anything else.
 *
 * Test hook: ZINC_CKPT_CRASH_AT=N kills the saving process (SIGKILL) at its
 * N-th step (tests/engine/checkpoint/test_ckpt_fs.c walks every N). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/format.h"

void zinc_ckpt_crash_point(zinc_ckpt_publisher *p) {
  if (p->crash_at > 0 && ++p->steps == p->crash_at)
    raise(SIGKILL);
}

static char *sibling(const char *dir, const char *prefix, const char *tag, const char *suffix) {
  size_t n = strlen(prefix) + strlen(tag) + strlen(suffix) + 1;
  char *name = malloc(n);
  if (!name)
    return NULL;
  snprintf(name, n, "%s%s%s", prefix, tag, suffix);
  char *path = zinc_path_join(dir, name);
  free(name);
  return path;
}

/* A directory zinc made: not a link, and holding the marker or a valid
 * checksums file (checkpoints saved before the marker existed). */
static int is_zinc_dir(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return 0;
  char *marker = zinc_path_join(path, ZINC_OWN_MARKER);
  int own = marker && lstat(marker, &sb) == 0 && S_ISREG(sb.st_mode);
  free(marker);
  if (own)
    return 1;
  char *sums = zinc_path_join(path, ZINC_CHECKSUMS_NAME), *text = NULL;
  size_t len = 0;
  zinc_checksum_entry *entries = NULL;
  int n = 0;
  own = sums && zinc_fs_read_bounded(sums, ZINC_CHECKSUMS_MAX, &text, &len) == ZINC_OK &&
        zinc_checksums_parse(text, len, sums, &entries, &n) == ZINC_OK;
  free(sums);
  free(text);
  free(entries);
  return own;
}

static zinc_status write_latest(zinc_ckpt_publisher *p, const char *name) {
  char *latest = zinc_path_join(p->dir, ZINC_LATEST_NAME);
  char line[ZINC_TAG_MAX + 16];
  snprintf(line, sizeof line, "%s\n", name);
  zinc_status st = latest ? zinc_ckpt_fault_hit(&p->fault, "write", latest, 0) : ZINC_OK;
  if (st == ZINC_OK)
    st = latest ? zinc_fs_write_atomic(latest, line, strlen(line))
                          : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the "
                                       "path of %s/%s; free host memory and retry", p->dir,
                                       ZINC_LATEST_NAME);
  free(latest);
  zinc_ckpt_crash_point(p);
  return st;
}

static zinc_status rename_step(zinc_ckpt_publisher *p, const char *from, const char *to) {
  ZINC_CHECK(zinc_ckpt_fault_hit(&p->fault, "rename to", to, -1));
  if (rename(from, to) != 0)
    return zinc_fs_error("rename to", to, -1, errno);
  zinc_ckpt_crash_point(p);
  zinc_status st = zinc_fs_fsync(p->dir, 1);
  zinc_ckpt_crash_point(p);
  return st;
}

/* Hard links in a new directory `to` to every file of `from`. */
static zinc_status link_files(const char *from, const char *to) {
  if (mkdir(to, 0755) != 0)
    return zinc_fs_error("create directory", to, -1, errno);
  DIR *d = opendir(from);
  if (!d)
    return zinc_fs_error("open directory", from, -1, errno);
  zinc_status st = ZINC_OK;
  struct dirent *ent;
  while (st == ZINC_OK && (ent = readdir(d))) {
    if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
      continue;
    char *a = zinc_path_join(from, ent->d_name), *b = zinc_path_join(to, ent->d_name);
    if (!a || !b)
      st = zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the paths under %s",
                      to);
    else if (link(a, b) != 0)
      st = zinc_error(ZINC_ERR_IO, "hard link %s to %s: %s (without RENAME_EXCHANGE zinc "
                      "publishes a re-saved tag through hard links; latest names the complete "
                      "copy %s meanwhile)", b, a, strerror(errno), from);
    free(a);
    free(b);
  }
  closedir(d);
  if (st == ZINC_OK)
    st = zinc_fs_fsync(to, 1);
  return st;
}

/* Steps 2-3 above: latest names .<tag>.next, complete. */
static zinc_status finish_staged(zinc_ckpt_publisher *p, const char *tag) {
  char *final = zinc_path_join(p->dir, tag), *next = sibling(p->dir, ".", tag, ZINC_STAGED_SUFFIX),
       *old = sibling(p->dir, ".", tag, ".old"), *lnk = sibling(p->dir, ".", tag, ".link");
  zinc_status st = final && next && old && lnk
                       ? ZINC_OK
                       : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the "
                                    "paths of %s/%s; free host memory and retry", p->dir, tag);
  struct stat sb;
  if (st == ZINC_OK)
    st = zinc_fs_remove_tree(old);
  if (st == ZINC_OK)
    st = zinc_fs_remove_tree(lnk);
  if (st == ZINC_OK && lstat(final, &sb) == 0) {
    st = rename_step(p, final, old);
    if (st == ZINC_OK)
      st = zinc_fs_remove_tree(old);
    zinc_ckpt_crash_point(p);
  }
  if (st == ZINC_OK)
    st = link_files(next, lnk);
  zinc_ckpt_crash_point(p);
  if (st == ZINC_OK)
    st = rename_step(p, lnk, final);
  if (st == ZINC_OK)
    st = write_latest(p, tag);
  if (st == ZINC_OK)
    st = zinc_fs_remove_tree(next);
  free(final);
  free(next);
  free(old);
  free(lnk);
  return st;
}

/* Rank 0, under the lock: finish a staged publication a crash interrupted,
 * refuse to replace what is not a zinc checkpoint, remove zinc's own
 * leftovers of crashed saves (never a user's), make an empty partial. */
zinc_status zinc_ckpt_prepare_dir(zinc_ckpt_publisher *p, const char *tag, const char *final,
                                  const char *partial) {
  char *name = NULL, staged[ZINC_TAG_MAX + 1];
  if (zinc_ckpt_latest_read(p->dir, &name) == ZINC_OK &&
      zinc_ckpt_staged_tag(name, staged, sizeof staged)) {
    zinc_status st = finish_staged(p, staged);
    free(name);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "finishing the publication of %s/%s that a crash interrupted",
                             p->dir, staged);
  } else {
    free(name);
  }
  struct stat sb;
  if (lstat(final, &sb) == 0 && !is_zinc_dir(final))
    return zinc_error(ZINC_ERR_INVALID, "%s exists and is not a zinc checkpoint (no %s, no "
                      "valid %s): zinc does not replace it; choose another tag or move it away",
                      final, ZINC_OWN_MARKER, ZINC_CHECKSUMS_NAME);
  DIR *d = opendir(p->dir);
  if (!d)
    return zinc_fs_error("open directory", p->dir, -1, errno);
  zinc_status st = ZINC_OK;
  struct dirent *ent;
  while (st == ZINC_OK && (ent = readdir(d))) {
    const char *n = ent->d_name;
    size_t len = strlen(n);
    int leftover = 0;
    static const char *const kinds[] = {".partial", ".old", ".link", ZINC_STAGED_SUFFIX};
    for (int k = 0; n[0] == '.' && k < 4; k++)
      leftover |= len > strlen(kinds[k]) + 1 && !strcmp(n + len - strlen(kinds[k]), kinds[k]);
    if (!leftover)
      continue;
    char *path = zinc_path_join(p->dir, n);
    if (!path)
      st = zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path under %s",
                      p->dir);
    else if (is_zinc_dir(path))
      st = zinc_fs_remove_tree(path); /* a crashed save's, under the lock: nobody's now */
    else
      zinc_log(ZINC_LOG_WARN, "leaving %s alone: named like a checkpoint save's temporary, "
               "but zinc did not create it", path);
    free(path);
  }
  closedir(d);
  if (st == ZINC_OK && mkdir(partial, 0755) != 0)
    st = zinc_fs_error("create directory", partial, -1, errno);
  p->made_partial = st == ZINC_OK;
  if (st == ZINC_OK) {
    char *marker = zinc_path_join(partial, ZINC_OWN_MARKER);
    int fd = marker ? zinc_fs_create_new(marker, 0644) : -1;
    if (fd < 0)
      st = zinc_fs_error("create", marker ? marker : partial, -1, marker ? errno : ENOMEM);
    else
      close(fd);
    free(marker);
  }
  zinc_ckpt_crash_point(p);
  return st;
}

/* Rank 0: the partial directory is complete and fsynced. */
zinc_status zinc_ckpt_publish(zinc_ckpt_publisher *p, const char *tag, const char *final,
                              const char *partial) {
  struct stat sb;
  if (lstat(final, &sb) != 0) {
    zinc_status st = rename_step(p, partial, final);
    return st == ZINC_OK ? write_latest(p, tag) : st;
  }
  int exchanged = 0;
  zinc_status st = zinc_ckpt_fault_hit(&p->fault, "exchange into place", final, -1);
  if (st == ZINC_OK)
    st = zinc_fs_rename_into_place(partial, final, &exchanged);
  if (st == ZINC_OK) {
    zinc_ckpt_crash_point(p);
    st = zinc_fs_fsync(p->dir, 1);
    zinc_ckpt_crash_point(p);
    if (st == ZINC_OK)
      st = write_latest(p, tag);
    if (st == ZINC_OK)
      zinc_fs_remove_tree(partial); /* the previous save of this tag */
    return st;
  }
  if (st != ZINC_ERR_UNSUPPORTED)
    return st;
  char *next = sibling(p->dir, ".", tag, ZINC_STAGED_SUFFIX);
  st = next ? zinc_fs_remove_tree(next)
            : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path under %s",
                         p->dir);
  if (st == ZINC_OK)
    st = rename_step(p, partial, next);
  if (st == ZINC_OK) {
    const char *base = strrchr(next, '/') ? strrchr(next, '/') + 1 : next;
    st = write_latest(p, base);
  }
  free(next);
  return st == ZINC_OK ? finish_staged(p, tag) : st;
}
