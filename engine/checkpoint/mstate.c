/*
 * mstate.c — the compression methods' rank-local state in checkpoints
 * (mstate.h): the registry; save; load (restored exactly, or reset by
 * kind after the engine's own arrays are loaded).
 */
#include "engine/checkpoint/mstate.h"
#include "engine/checkpoint/mstate_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "engine/support.h"

#define MS_STAGE_BYTES ((size_t)4 << 20)

zinc_status zinc_mstate_register_ex(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                    int host, zinc_mstate_kind kind, zinc_mstate_reset_fn reset) {
  if (strlen(name) >= ZINC_MSTATE_NAME)
    return zinc_error(ZINC_ERR_INVALID, "method state \"%s\": name longer than %d bytes", name,
                      ZINC_MSTATE_NAME - 1);
  for (int i = 0; i < e->nmstate; i++)
    if (!strcmp(e->mstate[i].name, name))
      return zinc_error(ZINC_ERR_INVALID, "method state \"%s\" registered twice", name);
  if (e->nmstate == ZINC_MSTATE_MAX)
    return zinc_error(ZINC_ERR_INVALID, "method state \"%s\": more than %d buffers registered",
                      name, ZINC_MSTATE_MAX);
  if (kind == ZINC_MSTATE_RANK_COPY && reset)
    return zinc_error(ZINC_ERR_INVALID, "method state \"%s\": a rank's copy of an engine array "
                      "is never reset; it takes no reset function", name);
  zinc_mstate_entry *m = &e->mstate[e->nmstate++];
  memset(m, 0, sizeof *m);
  strcpy(m->name, name);
  m->ptr = ptr;
  m->bytes = bytes;
  m->host = host;
  m->kind = kind;
  m->reset = reset;
  return ZINC_OK;
}

zinc_status zinc_mstate_register(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                 int host) {
  return zinc_mstate_register_ex(e, name, ptr, bytes, host, ZINC_MSTATE_RANK, NULL);
}

void zinc_mstate_clear(zinc_engine *e) {
  memset(e->mstate, 0, sizeof e->mstate);
  e->nmstate = 0;
}

/* ---------------------------------------------------------------- save */

int64_t zinc_mstate_total(const zinc_engine *e) {
  int64_t total = 0;
  for (int i = 0; i < e->nmstate; i++)
    total += (int64_t)e->mstate[i].bytes;
  return total;
}

zinc_status zinc_ckpt_mstate_write(zinc_engine *e, const char *path,
                                   const zinc_rank_file_id *id, zinc_ckpt_fault *fault,
                                   uint32_t *crc, int64_t *bytes) {
  *crc = 0;
  *bytes = 0;
  unsigned char *stage = NULL;
  ZINC_CHECK(zinc_aligned_alloc((void **)&stage, 64, MS_STAGE_BYTES, "method-state staging"));
  int fd = zinc_fs_create_new(path, 0600);
  zinc_status st = fd >= 0 ? ZINC_OK : zinc_fs_error("create", path, 0, errno);
  int64_t at = 0;
  for (int i = 0; i < e->nmstate && st == ZINC_OK; i++) {
    const zinc_mstate_entry *m = &e->mstate[i];
    for (size_t off = 0; st == ZINC_OK && off < m->bytes; off += MS_STAGE_BYTES) {
      size_t n = m->bytes - off < MS_STAGE_BYTES ? m->bytes - off : MS_STAGE_BYTES;
      const char *src = (const char *)m->ptr + off;
      if (m->host) {
        memcpy(stage, src, n);
      } else {
        st = e->dev->ops->copy(e->dev, stage, src, n, e->stream);
        if (st == ZINC_OK)
          st = zinc_engine_sync(e);
      }
      if (st == ZINC_OK)
        st = zinc_ckpt_fault_hit(fault, "write", path, at);
      if (st == ZINC_OK)
        st = zinc_fs_pwrite_all(fd, path, stage, n, at);
      *crc = zinc_crc32c(*crc, stage, n);
      at += (int64_t)n;
    }
  }
  unsigned char tr[ZINC_RANK_TRAILER]; /* whose state this is */
  zinc_rank_trailer_encode(ZINC_RANK_FILE_MSTATE, id, (uint64_t)at, tr);
  if (st == ZINC_OK)
    st = zinc_ckpt_fault_hit(fault, "write", path, at);
  if (st == ZINC_OK)
    st = zinc_fs_pwrite_all(fd, path, tr, sizeof tr, at);
  *crc = zinc_crc32c(*crc, tr, sizeof tr);
  at += ZINC_RANK_TRAILER;
  if (st == ZINC_OK && fsync(fd) != 0)
    st = zinc_fs_error("fsync", path, at, errno);
  if (fd >= 0)
    close(fd);
  if (st != ZINC_OK && fd >= 0)
    unlink(path);
  *bytes = at;
  free(stage);
  return st;
}

zinc_status zinc_ckpt_mstate_describe(const zinc_engine *e, const uint32_t *crcs,
                                      const int64_t *bytes, zinc_manifest_mstate *ms) {
  memset(ms, 0, sizeof *ms);
  ms->entries = calloc((size_t)e->nmstate + 1, sizeof *ms->entries);
  ms->files = calloc((size_t)e->dp_size, sizeof *ms->files);
  ms->nentries = e->nmstate;
  ms->dp_size = e->dp_size;
  int ok = ms->entries && ms->files;
  for (int i = 0; ok && i < e->nmstate; i++) {
    ms->entries[i] = (zinc_manifest_mstate_entry){zinc_strdup(e->mstate[i].name),
                                                  (int64_t)e->mstate[i].bytes};
    ok = ms->entries[i].name != NULL;
  }
  for (int r = 0; ok && r < e->dp_size; r++) {
    char name[32];
    snprintf(name, sizeof name, ZINC_MSTATE_FILE_FORMAT, r);
    ms->files[r] = (zinc_manifest_file){.name = zinc_strdup(name), .rank = r,
                                        .bytes = bytes[r], .crc32c = crcs[r]};
    ok = ms->files[r].name != NULL;
  }
  if (!ok) {
    zinc_manifest_mstate_free(ms);
    return zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the method-state "
                      "table of %d entries; free host memory and retry", e->nmstate);
  }
  int64_t total = zinc_mstate_total(e); /* each file: the buffers, then the trailer */
  for (int r = 0; r < e->dp_size; r++)
    if (bytes[r] - ZINC_RANK_TRAILER != total) {
      int64_t b = bytes[r] - ZINC_RANK_TRAILER;
      zinc_manifest_mstate_free(ms);
      return zinc_error(ZINC_ERR_INVALID, "checkpoint save: rank %d's method state holds %lld "
                        "bytes, rank %d's %lld; every rank must register the same buffers", r,
                        (long long)b, e->dp_rank, (long long)total);
    }
  ms->present = 1;
  return ZINC_OK;
}

/* ---------------------------------------------------------------- load */

/* The saved entry of rank 0's file that REPLICATED entry m reads (its
 * name and bytes), and its offset in the file; -1 when none. */
static int saved_replica(const zinc_manifest_mstate *ms, const zinc_mstate_entry *m,
                         int64_t *offset) {
  int64_t at = 0;
  for (int i = 0; i < ms->nentries; i++) {
    if (!strcmp(ms->entries[i].name, m->name) && ms->entries[i].bytes == (int64_t)m->bytes) {
      *offset = at;
      return i;
    }
    at += ms->entries[i].bytes;
  }
  return -1;
}

/* Not EXACT: SHARED when a REPLICATED entry can be read from rank 0's
 * file, else RESET. */
static zinc_mstate_load_mode not_exact(const zinc_engine *e, const zinc_manifest_mstate *ms,
                                       int weights_only) {
  int64_t off;
  for (int i = 0; !weights_only && ms->present && ms->dp_size > 0 && i < e->nmstate; i++)
    if (e->mstate[i].kind == ZINC_MSTATE_REPLICATED && saved_replica(ms, &e->mstate[i], &off) >= 0)
      return ZINC_MSTATE_LOAD_SHARED;
  return ZINC_MSTATE_LOAD_RESET;
}

zinc_mstate_load_mode zinc_ckpt_mstate_mode(const zinc_engine *e, const zinc_ckpt_dir *d,
                                            int weights_only, char *why, size_t cap) {
  const zinc_manifest_mstate *ms = &d->manifest->ms;
  why[0] = '\0';
  if (e->nmstate == 0)
    return ZINC_MSTATE_LOAD_NONE;
  if (weights_only) {
    snprintf(why, cap, "a weights-only load");
    return not_exact(e, ms, weights_only);
  }
  if (!ms->present) {
    snprintf(why, cap, "the checkpoint holds none");
    return not_exact(e, ms, weights_only);
  }
  if (ms->dp_size != e->dp_size) {
    snprintf(why, cap, "saved by %d data-parallel ranks, loaded by %d", ms->dp_size,
             e->dp_size);
    return not_exact(e, ms, weights_only);
  }
  if (ms->nentries != e->nmstate) {
    snprintf(why, cap, "%d buffers saved, %d kept now", ms->nentries, e->nmstate);
    return not_exact(e, ms, weights_only);
  }
  for (int i = 0; i < e->nmstate; i++)
    if (strcmp(ms->entries[i].name, e->mstate[i].name) ||
        ms->entries[i].bytes != (int64_t)e->mstate[i].bytes) {
      snprintf(why, cap, "buffer %d saved as \"%s\" of %lld bytes, kept now as \"%s\" of %zu "
               "bytes", i, ms->entries[i].name, (long long)ms->entries[i].bytes,
               e->mstate[i].name, e->mstate[i].bytes);
      return not_exact(e, ms, weights_only);
    }
  return ZINC_MSTATE_LOAD_EXACT;
}

zinc_status zinc_ckpt_mstate_verify(const zinc_engine *e, const zinc_ckpt_dir *d,
                                    zinc_mstate_load_mode mode) {
  if (mode == ZINC_MSTATE_LOAD_EXACT)
    return zinc_ckpt_dir_verify_mstate(d, e->dp_rank);
  if (mode == ZINC_MSTATE_LOAD_SHARED && e->dp_rank == 0)
    return zinc_ckpt_dir_verify_mstate(d, 0);
  return ZINC_OK;
}

static zinc_status fill_entry(zinc_engine *e, const zinc_mstate_entry *m, const void *src,
                              size_t off, size_t n) {
  if (m->host) {
    if (src)
      memcpy((char *)m->ptr + off, src, n);
    else
      memset((char *)m->ptr + off, 0, n);
    return ZINC_OK;
  }
  if (src)
    return e->dev->ops->copy(e->dev, (char *)m->ptr + off, src, n, e->stream);
  return e->dev->ops->fill_zero(e->dev, (char *)m->ptr + off, n, e->stream);
}

/* Entry m's bytes [at, at + m->bytes) of the open file (path) through the
 * staging buffer. */
static zinc_status read_entry(zinc_engine *e, const zinc_mstate_entry *m, int fd,
                              const char *path, int64_t at, unsigned char *stage) {
  zinc_status st = ZINC_OK;
  for (size_t off = 0; st == ZINC_OK && off < m->bytes; off += MS_STAGE_BYTES) {
    size_t n = m->bytes - off < MS_STAGE_BYTES ? m->bytes - off : MS_STAGE_BYTES;
    st = zinc_fs_pread_all(fd, path, stage, n, at + (int64_t)off);
    if (st == ZINC_OK)
      st = fill_entry(e, m, stage, off, n);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e); /* the staging buffer is reused */
  }
  return st;
}

static zinc_status reset_entry(zinc_engine *e, const zinc_mstate_entry *m) {
  if (m->reset)
    return m->reset(e, m->ptr, m->bytes);
  return fill_entry(e, m, NULL, 0, m->bytes);
}

zinc_status zinc_ckpt_mstate_load(zinc_engine *e, const zinc_ckpt_dir *d,
                                  zinc_mstate_load_mode mode, const char *why) {
  if (mode == ZINC_MSTATE_LOAD_NONE)
    return ZINC_OK;
  const zinc_manifest_mstate *ms = &d->manifest->ms;
  int file = mode == ZINC_MSTATE_LOAD_EXACT ? e->dp_rank : 0;
  char *path = NULL;
  unsigned char *stage = NULL;
  int fd = -1;
  zinc_status st = ZINC_OK;
  if (mode == ZINC_MSTATE_LOAD_EXACT || mode == ZINC_MSTATE_LOAD_SHARED) {
    path = zinc_path_join(d->path, ms->files[file].name);
    st = path ? zinc_aligned_alloc((void **)&stage, 64, MS_STAGE_BYTES, "method-state staging")
              : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: no host memory for the path of "
                           "%s/%s", d->path, ms->files[file].name);
    fd = st == ZINC_OK ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (st == ZINC_OK && fd < 0)
      st = zinc_fs_error("open", path, 0, errno);
  }
  char reset[160] = "", kept[160] = "";
  int nread = 0;
  int64_t at = 0, bytes_read = 0;
  for (int i = 0; i < e->nmstate && st == ZINC_OK; i++) {
    const zinc_mstate_entry *m = &e->mstate[i];
    int64_t off = at;
    if (mode == ZINC_MSTATE_LOAD_EXACT) {
      st = read_entry(e, m, fd, path, at, stage);
    } else if (m->kind == ZINC_MSTATE_RANK_COPY) {
      /* the engine's own array: as the shards loaded it */
      size_t len = strlen(kept);
      snprintf(kept + len, sizeof kept - len, "%s%s", len ? ", " : "", m->name);
      at += (int64_t)m->bytes;
      continue;
    } else if (m->kind == ZINC_MSTATE_REPLICATED && mode == ZINC_MSTATE_LOAD_SHARED &&
               saved_replica(ms, m, &off) >= 0) {
      st = read_entry(e, m, fd, path, off, stage);
    } else {
      size_t len = strlen(reset);
      snprintf(reset + len, sizeof reset - len, "%s%s", len ? ", " : "", m->name);
      st = reset_entry(e, m);
      at += (int64_t)m->bytes;
      continue;
    }
    nread++;
    bytes_read += (int64_t)m->bytes;
    at += (int64_t)m->bytes;
  }
  if (st == ZINC_OK)
    st = zinc_engine_sync(e);
  if (fd >= 0)
    close(fd);
  if (st == ZINC_OK && mode == ZINC_MSTATE_LOAD_EXACT)
    zinc_log0(ZINC_LOG_INFO, "checkpoint %s: the compression method's state restored (%d "
              "buffers, %lld bytes per rank)", d->path, e->nmstate, (long long)bytes_read);
  else if (st == ZINC_OK)
    zinc_log0(ZINC_LOG_INFO, "checkpoint %s: the compression method's state is not given "
              "back as saved (%s): reset %s; %d buffer%s the same on every rank restored from "
              "rank 0's file; the engine's weights and moments as loaded from the shards%s%s%s",
              d->path, why, reset[0] ? reset : "none", nread, nread == 1 ? "" : "s",
              kept[0] ? " (" : "", kept, kept[0] ? ")" : "");
  free(stage);
  free(path);
  return st;
}

zinc_status zinc_ckpt_dir_verify_mstate(const zinc_ckpt_dir *d, int i) {
  return zinc_ckpt_dir_verify_rank_file(d, &d->manifest->ms.files[i], ZINC_RANK_FILE_MSTATE,
                                        "method-state");
}
