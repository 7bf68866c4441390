/*
 * dirs.c — checkpoint directories (format.h): the tag rules, the `latest`
 * pointer, opening a directory with its manifest and checksums, and the
 * verification of each file against them. The formats of the files
 * themselves (shards, the checksums file) are format.c's.
 */
#define _GNU_SOURCE
#include "engine/checkpoint/format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/endian.h"
#include "base/env.h"
#include "base/fs.h"

/* The suffixes of the names zinc gives its own temporaries. */
static const char *const reserved_suffix[] = {".tmp", ".old", ".partial", ".next", ".link",
                                              ".lock"};

zinc_status zinc_ckpt_tag_check(const char *tag) {
  const char *rule = NULL;
  if (!tag || !tag[0])
    rule = "must not be empty";
  else if (strlen(tag) > ZINC_TAG_MAX)
    rule = "must be at most 200 characters";
  else if (tag[0] == '.' || tag[0] == '-')
    rule = "must not start with '.' or '-'";
  else if (!strcmp(tag, ZINC_LATEST_NAME) || !strncmp(tag, ZINC_LATEST_NAME ".", 7))
    rule = "must not be \"latest\" or start with \"latest.\" (the pointer file's names)";
  for (const char *c = tag; !rule && *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          strchr("._-+=@,", *c)))
      rule = "must hold only letters, digits and . _ - + = @ , (no '/', no spaces or control "
             "characters)";
  for (size_t k = 0; !rule && k < sizeof reserved_suffix / sizeof *reserved_suffix; k++) {
    size_t n = strlen(tag), m = strlen(reserved_suffix[k]);
    if (n >= m && !strcmp(tag + n - m, reserved_suffix[k]))
      rule = "must not end in .tmp, .old, .partial, .next, .link or .lock (the names of zinc's "
             "temporaries)";
  }
  if (rule)
    return zinc_error(ZINC_ERR_INVALID, "checkpoint tag \"%s\": a tag %s; choose another tag",
                      tag ? tag : "(null)", rule);
  return ZINC_OK;
}

int zinc_ckpt_staged_tag(const char *name, char *tag, size_t cap) {
  size_t n = strlen(name), m = strlen(ZINC_STAGED_SUFFIX);
  if (n < m + 2 || name[0] != '.' || strcmp(name + n - m, ZINC_STAGED_SUFFIX) != 0 ||
      n - m - 1 >= cap)
    return 0;
  memcpy(tag, name + 1, n - m - 1);
  tag[n - m - 1] = '\0';
  return zinc_ckpt_tag_check(tag) == ZINC_OK;
}

zinc_status zinc_ckpt_latest_read(const char *dir, char **name) {
  *name = NULL;
  char *latest = zinc_path_join(dir, ZINC_LATEST_NAME);
  if (!latest)
    return zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the path of "
                      "%s/%s; free host memory and retry", dir, ZINC_LATEST_NAME);
  char *text = NULL;
  size_t len = 0;
  zinc_status st = zinc_fs_read_bounded(latest, ZINC_LATEST_MAX, &text, &len);
  if (st == ZINC_OK) {
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
      text[--len] = '\0';
    char staged[ZINC_TAG_MAX + 1];
    if (strlen(text) != len)
      st = zinc_error(ZINC_ERR_CORRUPT, "%s holds a NUL byte: not a checkpoint name", latest);
    else if (!zinc_ckpt_staged_tag(text, staged, sizeof staged) &&
             zinc_ckpt_tag_check(text) != ZINC_OK)
      zinc_error_wrap(st = ZINC_ERR_CORRUPT, "%s does not name a checkpoint", latest);
  }
  free(latest);
  if (st != ZINC_OK) {
    free(text);
    return st;
  }
  *name = text;
  return ZINC_OK;
}

zinc_status zinc_ckpt_dir_open(const char *dir, const char *tag, zinc_ckpt_dir **out) {
  *out = NULL;
  if (!dir)
    return zinc_error(ZINC_ERR_INVALID, "checkpoint directory is NULL");
  zinc_status st = ZINC_OK;
  char *tagbuf = NULL, *path = NULL, *text = NULL, *sums = NULL;
  size_t len = 0, sums_len = 0;
  zinc_checksum_entry *entries = NULL;
  int nentries = 0;
  zinc_ckpt_dir *d = NULL;
  char staged[ZINC_TAG_MAX + 1];
  const char *dirname = tag; /* the directory's name under dir */
  if (!tag) {
    st = zinc_ckpt_latest_read(dir, &tagbuf);
    if (st != ZINC_OK) {
      zinc_error_wrap(st, "no tag given and no readable %s/%s", dir, ZINC_LATEST_NAME);
      goto out;
    }
    dirname = tagbuf;
    /* ".<tag>.next": a save publishing without RENAME_EXCHANGE */
    if (zinc_ckpt_staged_tag(tagbuf, staged, sizeof staged))
      tag = staged;
    else
      tag = tagbuf;
  }
  ZINC_CHECK_GOTO(zinc_ckpt_tag_check(tag), st, out);
  path = zinc_path_join(dir, dirname);
  if (!path) {
    st = zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the path of %s/%s "
                    "(%zu bytes); free host memory and retry", dir, tag,
                    strlen(dir) + strlen(tag) + 2);
    goto out;
  }
  {
    char *cpath = zinc_path_join(path, ZINC_CHECKSUMS_NAME);
    st = zinc_fs_read_bounded(cpath, ZINC_CHECKSUMS_MAX, &sums, &sums_len);
    if (st == ZINC_OK)
      st = zinc_checksums_parse(sums, sums_len, cpath, &entries, &nentries);
    free(cpath);
    if (st != ZINC_OK)
      goto out;
  }
  {
    char *mpath = zinc_path_join(path, ZINC_MANIFEST_NAME);
    st = zinc_fs_read_bounded(mpath, ZINC_MANIFEST_MAX, &text, &len);
    int found = 0;
    for (int i = 0; st == ZINC_OK && i < nentries; i++)
      if (!strcmp(entries[i].name, ZINC_MANIFEST_NAME)) {
        found = 1;
        if (entries[i].bytes != (int64_t)len || entries[i].crc != zinc_crc32c(0, text, len))
          st = zinc_error(ZINC_ERR_CORRUPT, "%s: crc32c or size does not match %s (damaged "
                          "or replaced manifest)", mpath, ZINC_CHECKSUMS_NAME);
      }
    if (st == ZINC_OK && !found)
      st = zinc_error(ZINC_ERR_CORRUPT, "%s does not list %s", ZINC_CHECKSUMS_NAME, mpath);
    d = calloc(1, sizeof *d);
    if (st == ZINC_OK && !d)
      st = zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the state of "
                      "checkpoint %s (%zu bytes); free host memory and retry", path, sizeof *d);
    if (st == ZINC_OK) {
      d->manifest_crc = zinc_crc32c(0, text, len);
      st = zinc_manifest_parse(text, len, mpath, &d->manifest);
    }
    free(mpath);
    if (st != ZINC_OK)
      goto out;
  }
  /* every shard the manifest names must be listed with the same crc */
  for (int i = 0; i < d->manifest->nfiles; i++) {
    const zinc_manifest_file *f = &d->manifest->files[i];
    int found = 0;
    for (int k = 0; k < nentries; k++)
      if (!strcmp(entries[k].name, f->name))
        found = entries[k].crc == f->crc32c && entries[k].bytes == f->bytes ? 1 : -1;
    if (found != 1) {
      st = zinc_error(ZINC_ERR_CORRUPT, "%s/%s: %s for shard %s", path, ZINC_CHECKSUMS_NAME,
                      found ? "crc32c differs from the manifest" : "no entry", f->name);
      goto out;
    }
  }
  /* and every error-feedback file */
  for (int i = 0; d->manifest->ef.present && i < d->manifest->ef.dp_size; i++) {
    const zinc_manifest_file *f = &d->manifest->ef.files[i];
    int found = 0;
    for (int k = 0; k < nentries; k++)
      if (!strcmp(entries[k].name, f->name))
        found = entries[k].crc == f->crc32c && entries[k].bytes == f->bytes ? 1 : -1;
    if (found != 1) {
      st = zinc_error(ZINC_ERR_CORRUPT, "%s/%s: %s for error-feedback file %s", path,
                      ZINC_CHECKSUMS_NAME, found ? "crc32c differs from the manifest" : "no entry",
                      f->name);
      goto out;
    }
  }
  d->path = path;
  d->tag = zinc_strdup(tag);
  path = NULL;
  *out = d;
  d = NULL;
out:
  if (d) {
    zinc_manifest_free(d->manifest);
    free(d);
  }
  free(tagbuf);
  free(path);
  free(text);
  free(sums);
  free(entries);
  return st;
}

zinc_status zinc_ckpt_dir_verify_file(const zinc_ckpt_dir *d, int i) {
  const zinc_manifest_file *f = &d->manifest->files[i];
  char *p = zinc_path_join(d->path, f->name);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the path of %s/%s "
                      "(%zu bytes); free host memory and retry", d->path, f->name,
                      strlen(d->path) + strlen(f->name) + 2);
  zinc_shard_reader *r = NULL;
  zinc_status st = zinc_shard_reader_open(p, &r);
  if (st == ZINC_OK) {
    const zinc_shard_trailer *t = zinc_shard_reader_trailer(r);
    const zinc_manifest *m = d->manifest;
    if (t->elements != (uint64_t)f->elements || (int)t->nsections != m->nsections ||
        (int)t->rank != f->rank || (int)t->world != m->nfiles)
      st = zinc_error(ZINC_ERR_CORRUPT, "shard %s: trailer (rank %u of %u, %u sections of "
                      "%llu) does not match the manifest (rank %d of %d, %d sections of %lld)",
                      p, t->rank, t->world, t->nsections, (unsigned long long)t->elements,
                      f->rank, m->nfiles, m->nsections, (long long)f->elements);
    else if (m->save_id && (t->save_id != m->save_id || (int)t->mp_rank != m->mp_rank ||
                            (int)t->mp_size != m->mp_size))
      st = zinc_error(ZINC_ERR_CORRUPT, "shard %s: written by model-parallel rank %u of %u of "
                      "save %016llx, but this checkpoint is model-parallel rank %d of %d of "
                      "save %016llx: a shard moved from another save or model-parallel part "
                      "(its checksums rewritten to match)", p, t->mp_rank, t->mp_size,
                      (unsigned long long)t->save_id, m->mp_rank, m->mp_size,
                      (unsigned long long)m->save_id);
    else
      st = zinc_shard_reader_verify(r, &f->crc32c, f->bytes);
  }
  zinc_shard_reader_close(r);
  free(p);
  return st;
}

zinc_status zinc_ckpt_dir_verify_whole(const zinc_ckpt_dir *d, const zinc_manifest_file *f,
                                       const char *what) {
  char *p = zinc_path_join(d->path, f->name);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the path of %s/%s "
                      "(%zu bytes); free host memory and retry", d->path, f->name,
                      strlen(d->path) + strlen(f->name) + 2);
  uint32_t crc = 0;
  int64_t bytes = 0;
  zinc_status st = zinc_fs_crc32c(p, &crc, &bytes);
  if (st == ZINC_OK && (crc != f->crc32c || bytes != f->bytes))
    st = zinc_error(ZINC_ERR_CORRUPT, "%s file %s holds %lld bytes with crc32c %08x; the "
                    "manifest says %lld bytes with crc32c %08x (damaged or replaced)", what, p,
                    (long long)bytes, crc, (long long)f->bytes, f->crc32c);
  free(p);
  return st;
}

zinc_status zinc_ckpt_dir_verify_rank_file(const zinc_ckpt_dir *d, const zinc_manifest_file *f,
                                           int kind, const char *what) {
  ZINC_CHECK(zinc_ckpt_dir_verify_whole(d, f, what));
  const zinc_manifest *m = d->manifest;
  if (!m->save_id) /* saved before per-rank files named their rank: as then */
    return ZINC_OK;
  char *p = zinc_path_join(d->path, f->name);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "opening checkpoint: no host memory for the path of %s/%s "
                      "(%zu bytes); free host memory and retry", d->path, f->name,
                      strlen(d->path) + strlen(f->name) + 2);
  char label[64];
  snprintf(label, sizeof label, "%s file", what);
  unsigned char tr[ZINC_RANK_TRAILER];
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  zinc_status st = fd < 0 ? zinc_fs_error("open", p, 0, errno) : ZINC_OK;
  if (st == ZINC_OK && f->bytes < ZINC_RANK_TRAILER)
    st = zinc_error(ZINC_ERR_CORRUPT, "%s %s: %lld bytes, too short for its %d-byte identity "
                    "trailer", label, p, (long long)f->bytes, ZINC_RANK_TRAILER);
  if (st == ZINC_OK)
    st = zinc_fs_pread_all(fd, p, tr, sizeof tr, f->bytes - ZINC_RANK_TRAILER);
  if (fd >= 0)
    close(fd);
  int got_kind = 0;
  zinc_rank_file_id id = {0};
  uint64_t payload = 0;
  char where[1100];
  snprintf(where, sizeof where, "%s %s", label, p);
  if (st == ZINC_OK)
    st = zinc_rank_trailer_decode(tr, sizeof tr, where, &got_kind, &id, &payload);
  static const char *const kinds[] = {"?", "error-feedback (.zef)", "method-state (.zms)"};
  if (st == ZINC_OK &&
      (got_kind != kind || (int)id.rank != f->rank || (int)id.world != m->dp_size ||
       (int)id.mp_rank != m->mp_rank || (int)id.mp_size != m->mp_size ||
       id.save_id != m->save_id ||
       payload != (uint64_t)(f->bytes - ZINC_RANK_TRAILER)))
    st = zinc_error(ZINC_ERR_CORRUPT, "%s: written as the %s file of rank %u of %u "
                    "(model-parallel rank %u of %u) of save %016llx holding %llu bytes, but "
                    "this checkpoint's entry is the %s file of rank %d of %d (model-parallel "
                    "rank %d of %d) of save %016llx holding %lld: a file moved from another "
                    "rank, kind or save (its checksums rewritten to match); restore the "
                    "checkpoint's own files", where, kinds[got_kind == 1 || got_kind == 2 ? got_kind : 0],
                    id.rank, id.world, id.mp_rank, id.mp_size, (unsigned long long)id.save_id,
                    (unsigned long long)payload, kinds[kind], f->rank, m->dp_size, m->mp_rank,
                    m->mp_size, (unsigned long long)m->save_id,
                    (long long)(f->bytes - ZINC_RANK_TRAILER));
  free(p);
  return st;
}

zinc_status zinc_ckpt_dir_verify_ef(const zinc_ckpt_dir *d, int i) {
  return zinc_ckpt_dir_verify_rank_file(d, &d->manifest->ef.files[i], ZINC_RANK_FILE_EF,
                                        "error-feedback");
}

void zinc_ckpt_dir_close(zinc_ckpt_dir *d) {
  if (!d)
    return;
  zinc_manifest_free(d->manifest);
  free(d->path);
  free(d->tag);
  free(d);
}
