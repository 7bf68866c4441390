/*
 * format.c — shard files and the checksums file (see format.h for the
 * formats; checkpoint directories are dirs.c's). The filesystem steps that
 * make a save crash-safe (atomic replacement, fsync, rename into place) are
 * base/fs.h's; the trailer's integers go through base/endian.h.
 *
 * Every write path ends with fsync of the file (and the save fsyncs the
 * directories); every read path checks sizes and crcs before anything is
 * handed on. Errors name the file, the offset where it matters, and errno's
 * text.
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
#include "kernels/zinc_math.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "shard sections are the host's f32 bytes, little-endian on disk; add byte "
               "swapping for this target");

/* Fault injection for tests: ZINC_CKPT_FAULT="ERRNO@N" makes the N-th write
 * of a save fail with ERRNO (ENOSPC, EIO, EDQUOT or a number),
 * ZINC_CKPT_READ_FAULT="ERRNO@N" the N-th range read of each shard opened
 * for a load. *err 0: no fault. */
static void injected_fault_named(const char *var, int *err, int *call) {
  *err = *call = 0;
  const char *spec = zinc_env_str(var);
  if (!spec)
    return;
  char name[32];
  int n = 0;
  if (sscanf(spec, "%31[^@]@%d", name, &n) != 2 || n < 1) {
    zinc_env_reject(var, spec, "ERRNO@N (ERRNO one of ENOSPC, EIO, EDQUOT or a "
                    "number; N >= 1)", "no fault injected");
    return;
  }
  *call = n;
  if (!strcmp(name, "ENOSPC"))
    *err = ENOSPC;
  else if (!strcmp(name, "EIO"))
    *err = EIO;
  else if (!strcmp(name, "EDQUOT"))
    *err = EDQUOT;
  else
    *err = atoi(name) > 0 ? atoi(name) : EIO;
}

/* ZINC_CKPT_DELAY / ZINC_CKPT_READ_DELAY="SECONDS@N": the N-th write of
 * a save (read of a shard) first sleeps SECONDS, as on a filesystem that
 * slow. *at 0: none. */
static void injected_delay_named(const char *var, double *seconds, int *at) {
  *seconds = 0;
  *at = 0;
  const char *spec = zinc_env_str(var);
  if (!spec)
    return;
  double s = 0;
  int n = 0;
  if (sscanf(spec, "%lf@%d", &s, &n) != 2 || !(s > 0 && s <= 3600) || n < 1) {
    zinc_env_reject(var, spec, "SECONDS@N (0 < SECONDS <= 3600, N >= 1)", "no delay injected");
    return;
  }
  *seconds = s;
  *at = n;
}

static void sleep_for(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void zinc_ckpt_fault_init(zinc_ckpt_fault *f) {
  f->count = 0;
  injected_fault_named("ZINC_CKPT_FAULT", &f->err, &f->at);
  injected_delay_named("ZINC_CKPT_DELAY", &f->delay_s, &f->delay_at);
}

zinc_status zinc_ckpt_fault_hit(zinc_ckpt_fault *f, const char *op, const char *path,
                                int64_t offset) {
  if (!f || (!f->err && !f->delay_at))
    return ZINC_OK;
  f->count++;
  if (f->delay_at && f->count == f->delay_at)
    sleep_for(f->delay_s);
  if (!f->err || f->count != f->at)
    return ZINC_OK;
  return zinc_fs_error(op, path, offset, f->err);
}

/* ------------------------------------------------------------ trailer */

/* layout: magic 0..7, version 8, rank 12, world 16, nsections 20 (version
 * 2: byte 21 the bf16 sections' bits),
 * elements 24..31, section crcs 32..43, save id 44..51, mp_rank 52,
 * mp_size 56 (44..59 zero in shards written before the identity),
 * trailer crc 60..63 */
void zinc_shard_trailer_encode(const zinc_shard_trailer *t, unsigned char out[ZINC_SHARD_TRAILER]) {
  memset(out, 0, ZINC_SHARD_TRAILER);
  memcpy(out, ZINC_SHARD_MAGIC, 8);
  /* the version says what a reader must know: 2 only with bf16 sections */
  zinc_le_put_u32(out + 8, t->bf16_sections ? ZINC_SHARD_VERSION : ZINC_SHARD_VERSION_F32);
  zinc_le_put_u32(out + 12, t->rank);
  zinc_le_put_u32(out + 16, t->world);
  zinc_le_put_u32(out + 20, t->nsections | (t->bf16_sections & 0xffu) << 8);
  zinc_le_put_u64(out + 24, t->elements);
  for (int i = 0; i < ZINC_SHARD_MAX_SECTIONS; i++)
    zinc_le_put_u32(out + 32 + 4 * i, t->section_crc[i]);
  zinc_le_put_u64(out + 44, t->save_id);
  zinc_le_put_u32(out + 52, t->mp_rank);
  zinc_le_put_u32(out + 56, t->mp_size);
  zinc_le_put_u32(out + 60, zinc_crc32c(0, out, 60));
}

zinc_status zinc_shard_trailer_decode(const unsigned char *buf, size_t len, const char *what,
                                      zinc_shard_trailer *out) {
  if (len < ZINC_SHARD_TRAILER)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: %zu bytes, too short for its %d-byte "
                      "trailer (truncated)", what, len, ZINC_SHARD_TRAILER);
  if (memcmp(buf, ZINC_SHARD_MAGIC, 8) != 0)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: no \"ZINCSHRD\" trailer at its end "
                      "(truncated, or not a zinc shard)", what);
  if (zinc_le_get_u32(buf + 60) != zinc_crc32c(0, buf, 60))
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: the trailer's crc32c does not match "
                      "(damaged file)", what);
  memset(out, 0, sizeof *out);
  out->version = zinc_le_get_u32(buf + 8);
  out->rank = zinc_le_get_u32(buf + 12);
  out->world = zinc_le_get_u32(buf + 16);
  out->nsections = zinc_le_get_u32(buf + 20);
  if (out->version == ZINC_SHARD_VERSION) {
    out->bf16_sections = out->nsections >> 8 & 0xffu;
    out->nsections &= ~0xff00u;
  }
  out->elements = zinc_le_get_u64(buf + 24);
  for (int i = 0; i < ZINC_SHARD_MAX_SECTIONS; i++)
    out->section_crc[i] = zinc_le_get_u32(buf + 32 + 4 * i);
  out->save_id = zinc_le_get_u64(buf + 44);
  out->mp_rank = zinc_le_get_u32(buf + 52);
  out->mp_size = zinc_le_get_u32(buf + 56);
  if (out->version != ZINC_SHARD_VERSION && out->version != ZINC_SHARD_VERSION_F32)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: format version %u, this zinc reads %d and "
                      "%d", what, out->version, ZINC_SHARD_VERSION_F32, ZINC_SHARD_VERSION);
  if (out->nsections < 1 || out->nsections > ZINC_SHARD_MAX_SECTIONS ||
      (out->version == ZINC_SHARD_VERSION &&
       (out->bf16_sections == 0 || out->bf16_sections >> out->nsections)) ||
      out->world == 0 || out->rank >= out->world || out->elements > (UINT64_MAX / 16))
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: trailer fields out of range (rank %u of "
                      "%u, %u sections, %llu elements)", what, out->rank, out->world,
                      out->nsections, (unsigned long long)out->elements);
  if (out->save_id ? out->mp_size == 0 || out->mp_rank >= out->mp_size
                   : out->mp_rank != 0 || out->mp_size != 0)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: trailer identity out of range (save %016llx, "
                      "model-parallel rank %u of %u)", what, (unsigned long long)out->save_id,
                      out->mp_rank, out->mp_size);
  return ZINC_OK;
}

/* ------------------------------------------- identity of per-rank files */

/* layout: magic 0..7, version 8, kind 12, rank 16, world 20, mp_rank 24,
 * mp_size 28, payload bytes 32..39, save id 40..47, zeros, crc 60..63 */
void zinc_rank_trailer_encode(int kind, const zinc_rank_file_id *id, uint64_t payload,
                              unsigned char out[ZINC_RANK_TRAILER]) {
  memset(out, 0, ZINC_RANK_TRAILER);
  memcpy(out, ZINC_RANK_MAGIC, 8);
  zinc_le_put_u32(out + 8, ZINC_RANK_VERSION);
  zinc_le_put_u32(out + 12, (uint32_t)kind);
  zinc_le_put_u32(out + 16, id->rank);
  zinc_le_put_u32(out + 20, id->world);
  zinc_le_put_u32(out + 24, id->mp_rank);
  zinc_le_put_u32(out + 28, id->mp_size);
  zinc_le_put_u64(out + 32, payload);
  zinc_le_put_u64(out + 40, id->save_id);
  zinc_le_put_u32(out + 60, zinc_crc32c(0, out, 60));
}

zinc_status zinc_rank_trailer_decode(const unsigned char *buf, size_t len, const char *what,
                                     int *kind, zinc_rank_file_id *id, uint64_t *payload) {
  if (len < ZINC_RANK_TRAILER)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: %zu bytes, too short for its %d-byte identity "
                      "trailer (truncated)", what, len, ZINC_RANK_TRAILER);
  if (memcmp(buf, ZINC_RANK_MAGIC, 8) != 0)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: no \"%s\" identity trailer at its end (a file "
                      "written before checkpoints named their ranks, put into a newer save?)",
                      what, ZINC_RANK_MAGIC);
  if (zinc_le_get_u32(buf + 60) != zinc_crc32c(0, buf, 60))
    return zinc_error(ZINC_ERR_CORRUPT, "%s: the identity trailer's crc32c does not match "
                      "(damaged file)", what);
  uint32_t version = zinc_le_get_u32(buf + 8);
  if (version != ZINC_RANK_VERSION)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: identity trailer version %u, this zinc reads %d",
                      what, version, ZINC_RANK_VERSION);
  *kind = (int)zinc_le_get_u32(buf + 12);
  id->rank = zinc_le_get_u32(buf + 16);
  id->world = zinc_le_get_u32(buf + 20);
  id->mp_rank = zinc_le_get_u32(buf + 24);
  id->mp_size = zinc_le_get_u32(buf + 28);
  *payload = zinc_le_get_u64(buf + 32);
  id->save_id = zinc_le_get_u64(buf + 40);
  if ((*kind != ZINC_RANK_FILE_EF && *kind != ZINC_RANK_FILE_MSTATE) || id->world == 0 ||
      id->rank >= id->world || id->mp_size == 0 || id->mp_rank >= id->mp_size ||
      id->save_id == 0)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: identity trailer fields out of range (kind %d, "
                      "rank %u of %u, model-parallel rank %u of %u, save %016llx)", what, *kind,
                      id->rank, id->world, id->mp_rank, id->mp_size,
                      (unsigned long long)id->save_id);
  return ZINC_OK;
}

size_t zinc_shard_elem_bytes(const zinc_shard_trailer *t, int s) {
  return t->bf16_sections >> s & 1u ? 2 : 4;
}

uint64_t zinc_shard_section_offset(const zinc_shard_trailer *t, int s) {
  uint64_t off = 0;
  for (int i = 0; i < s; i++)
    off += t->elements * zinc_shard_elem_bytes(t, i);
  return off;
}

/* ------------------------------------------------------------- writer */

struct zinc_shard_writer {
  int fd;
  char *path;
  int64_t offset;
  uint32_t file_crc;
  zinc_shard_trailer t;
  zinc_ckpt_fault *fault; /* the save's write counter (NULL: none) */
  int section;            /* current section */
  uint64_t in_section;    /* elements written into it */
};

zinc_status zinc_shard_writer_open(const char *path, const zinc_rank_file_id *id,
                                   int nsections, unsigned bf16_sections, uint64_t elements,
                                   zinc_ckpt_fault *fault, zinc_shard_writer **out) {
  *out = NULL;
  if (nsections < 1 || nsections > ZINC_SHARD_MAX_SECTIONS || bf16_sections >> nsections)
    return zinc_error(ZINC_ERR_INVALID, "shard %s: %d sections, bf16 bits %#x", path,
                      nsections, bf16_sections);
  zinc_shard_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = zinc_strdup(path))) {
    free(w);
    return zinc_error(ZINC_ERR_NOMEM, "out of memory opening %s", path);
  }
  w->fd = zinc_fs_create_new(path, 0600);
  if (w->fd < 0) {
    zinc_status st = zinc_fs_error("create", path, 0, errno);
    free(w->path);
    free(w);
    return st;
  }
  w->t.version = ZINC_SHARD_VERSION;
  w->t.rank = id->rank;
  w->t.world = id->world;
  w->t.save_id = id->save_id;
  w->t.mp_rank = id->save_id ? id->mp_rank : 0;
  w->t.mp_size = id->save_id ? id->mp_size : 0;
  w->t.nsections = (uint32_t)nsections;
  w->t.bf16_sections = bf16_sections;
  w->t.version = bf16_sections ? ZINC_SHARD_VERSION : ZINC_SHARD_VERSION_F32;
  w->t.elements = elements;
  w->fault = fault;
  *out = w;
  return ZINC_OK;
}

/* Append len bytes at the writer's offset. */
static zinc_status shard_write(zinc_shard_writer *w, const void *data, size_t len) {
  if (len == 0)
    return ZINC_OK;
  ZINC_CHECK(zinc_ckpt_fault_hit(w->fault, "write", w->path, w->offset));
  ZINC_CHECK(zinc_fs_pwrite_all(w->fd, w->path, data, len, w->offset));
  w->offset += (int64_t)len;
  return ZINC_OK;
}

zinc_status zinc_shard_writer_append(zinc_shard_writer *w, const float *data, size_t n) {
  while (n > 0) {
    if (w->section >= (int)w->t.nsections)
      return zinc_error(ZINC_ERR_INVALID, "shard %s: more data than %u sections of %llu "
                        "elements", w->path, w->t.nsections, (unsigned long long)w->t.elements);
    uint64_t room = w->t.elements - w->in_section;
    size_t take = n < room ? n : (size_t)room;
    const void *out = data;
    uint16_t half[2048];
    if (zinc_shard_elem_bytes(&w->t, w->section) == 2) { /* a bf16 section */
      take = take < 2048 ? take : 2048;
      for (size_t i = 0; i < take; i++)
        half[i] = zinc_f32_to_bf16(data[i]);
      out = half;
    }
    size_t bytes = take * zinc_shard_elem_bytes(&w->t, w->section);
    w->t.section_crc[w->section] = zinc_crc32c(w->t.section_crc[w->section], out, bytes);
    w->file_crc = zinc_crc32c(w->file_crc, out, bytes);
    ZINC_CHECK(shard_write(w, out, bytes));
    data += take;
    n -= take;
    w->in_section += take;
    if (w->in_section == w->t.elements) {
      w->section++;
      w->in_section = 0;
    }
  }
  return ZINC_OK;
}

void zinc_shard_writer_abort(zinc_shard_writer *w) {
  if (!w)
    return;
  close(w->fd);
  unlink(w->path);
  free(w->path);
  free(w);
}

zinc_status zinc_shard_writer_finish(zinc_shard_writer *w, uint32_t *file_crc, int64_t *bytes) {
  zinc_status st = ZINC_OK;
  if (w->t.elements > 0 && w->section < (int)w->t.nsections)
    st = zinc_error(ZINC_ERR_INVALID, "shard %s: finished after %d of %u sections", w->path,
                    w->section, w->t.nsections);
  unsigned char tr[ZINC_SHARD_TRAILER];
  zinc_shard_trailer_encode(&w->t, tr);
  if (st == ZINC_OK) {
    w->file_crc = zinc_crc32c(w->file_crc, tr, sizeof tr);
    st = shard_write(w, tr, sizeof tr);
  }
  if (st == ZINC_OK && fsync(w->fd) != 0)
    st = zinc_fs_error("fsync", w->path, w->offset, errno);
  if (st != ZINC_OK) {
    zinc_shard_writer_abort(w);
    return st;
  }
  *file_crc = w->file_crc;
  *bytes = w->offset;
  close(w->fd);
  free(w->path);
  free(w);
  return ZINC_OK;
}

/* ------------------------------------------------------------- reader */

struct zinc_shard_reader {
  int fd;
  char *path;
  int64_t size;
  zinc_shard_trailer t;
  int reads;              /* range reads so far (fault injection) */
  int fault_err;          /* ZINC_CKPT_READ_FAULT: read number fault_call */
  int fault_call;         /* fails with errno fault_err; 0: no fault */
  double delay_s;         /* ZINC_CKPT_READ_DELAY: read number delay_call */
  int delay_call;         /* first sleeps delay_s; 0: none */
};

zinc_status zinc_shard_reader_open(const char *path, zinc_shard_reader **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? zinc_error(ZINC_ERR_CORRUPT, "shard %s is missing", path)
                           : zinc_fs_error("open", path, 0, errno);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return zinc_fs_error("stat", path, 0, errno);
  }
  zinc_shard_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->path = zinc_strdup(path))) {
    free(r);
    close(fd);
    return zinc_error(ZINC_ERR_NOMEM, "out of memory opening %s", path);
  }
  r->fd = fd;
  r->size = sb.st_size;
  injected_fault_named("ZINC_CKPT_READ_FAULT", &r->fault_err, &r->fault_call);
  injected_delay_named("ZINC_CKPT_READ_DELAY", &r->delay_s, &r->delay_call);
  unsigned char tr[ZINC_SHARD_TRAILER];
  zinc_status st = r->size < ZINC_SHARD_TRAILER
                       ? zinc_shard_trailer_decode(tr, (size_t)r->size, path, &r->t)
                       : zinc_fs_pread_all(fd, path, tr, sizeof tr, r->size - ZINC_SHARD_TRAILER);
  if (st == ZINC_OK)
    st = zinc_shard_trailer_decode(tr, sizeof tr, path, &r->t);
  uint64_t data = st == ZINC_OK ? zinc_shard_section_offset(&r->t, (int)r->t.nsections) : 0;
  if (st == ZINC_OK && (uint64_t)r->size != data + ZINC_SHARD_TRAILER)
    st = zinc_error(ZINC_ERR_CORRUPT, "shard %s is %lld bytes; its trailer says %u sections "
                    "of %llu elements (%u of them bf16, %llu bytes): truncated or damaged",
                    path, (long long)r->size, r->t.nsections, (unsigned long long)r->t.elements,
                    (unsigned)__builtin_popcount(r->t.bf16_sections),
                    (unsigned long long)(data + ZINC_SHARD_TRAILER));
  if (st != ZINC_OK) {
    zinc_shard_reader_close(r);
    return st;
  }
  *out = r;
  return ZINC_OK;
}

const zinc_shard_trailer *zinc_shard_reader_trailer(const zinc_shard_reader *r) { return &r->t; }

zinc_status zinc_shard_reader_verify(zinc_shard_reader *r, const uint32_t *expect_crc,
                                     int64_t expect_bytes) {
  if (expect_bytes >= 0 && expect_bytes != r->size)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s is %lld bytes, the manifest says %lld",
                      r->path, (long long)r->size, (long long)expect_bytes);
  enum { CHUNK = 4 << 20 };
  char *buf = malloc(CHUNK);
  if (!buf)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory verifying %s", r->path);
  uint32_t file_crc = 0;
  zinc_status st = ZINC_OK;
  for (uint32_t s = 0; s < r->t.nsections && st == ZINC_OK; s++) {
    uint32_t crc = 0;
    uint64_t left = r->t.elements * zinc_shard_elem_bytes(&r->t, (int)s);
    int64_t off = (int64_t)zinc_shard_section_offset(&r->t, (int)s);
    while (left > 0 && st == ZINC_OK) {
      size_t n = left < CHUNK ? (size_t)left : CHUNK;
      st = zinc_fs_pread_all(r->fd, r->path, buf, n, off);
      crc = zinc_crc32c(crc, buf, n);
      file_crc = zinc_crc32c(file_crc, buf, n);
      off += (int64_t)n;
      left -= n;
    }
    if (st == ZINC_OK && crc != r->t.section_crc[s])
      st = zinc_error(ZINC_ERR_CORRUPT, "shard %s: section %u (bytes %lld..%lld) fails its "
                      "crc32c (damaged file)", r->path, s,
                      (long long)zinc_shard_section_offset(&r->t, (int)s),
                      (long long)zinc_shard_section_offset(&r->t, (int)s + 1));
  }
  if (st == ZINC_OK && expect_crc) {
    unsigned char tr[ZINC_SHARD_TRAILER];
    st = zinc_fs_pread_all(r->fd, r->path, tr, sizeof tr, r->size - ZINC_SHARD_TRAILER);
    file_crc = zinc_crc32c(file_crc, tr, sizeof tr);
    if (st == ZINC_OK && file_crc != *expect_crc)
      st = zinc_error(ZINC_ERR_CORRUPT, "shard %s: crc32c %08x, the manifest says %08x "
                      "(a file from another save?)", r->path, file_crc, *expect_crc);
  }
  free(buf);
  return st;
}

zinc_status zinc_shard_reader_read(zinc_shard_reader *r, int section, uint64_t offset,
                                   float *dst, size_t n) {
  if (section < 0 || (uint32_t)section >= r->t.nsections || offset > r->t.elements ||
      n > r->t.elements - offset)
    return zinc_error(ZINC_ERR_CORRUPT, "shard %s: read of %zu elements at %llu in section "
                      "%d is outside the file (%u sections of %llu)", r->path, n,
                      (unsigned long long)offset, section, r->t.nsections,
                      (unsigned long long)r->t.elements);
  size_t es = zinc_shard_elem_bytes(&r->t, section);
  int64_t at = (int64_t)(zinc_shard_section_offset(&r->t, section) + offset * es);
  if (r->fault_err || r->delay_call)
    r->reads++;
  if (r->delay_call && r->reads == r->delay_call)
    sleep_for(r->delay_s);
  if (r->fault_err && r->reads == r->fault_call)
    return zinc_fs_error("read", r->path, at, r->fault_err);
  if (es == 4)
    return zinc_fs_pread_all(r->fd, r->path, dst, n * 4, at);
  /* bf16: read into dst's upper half, widened in place (zinc_math.h) */
  ZINC_CHECK(zinc_fs_pread_all(r->fd, r->path, zinc_bf16_upper(dst, (int64_t)n), n * 2, at));
  zinc_bf16_widen_upper(dst, (int64_t)n);
  return ZINC_OK;
}

void zinc_shard_reader_close(zinc_shard_reader *r) {
  if (!r)
    return;
  close(r->fd);
  free(r->path);
  free(r);
}

/* -------------------------------------------------------- checksums */

char *zinc_checksums_format(const char *const *names, const uint32_t *crcs,
                            const int64_t *bytes, int n) {
  size_t cap = 64;
  for (int i = 0; i < n; i++)
    cap += strlen(names[i]) + 48;
  char *text = malloc(cap);
  if (!text)
    return NULL;
  size_t len = 0;
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(text + len, cap - len, "%08x %lld %s\n", crcs[i],
                            (long long)bytes[i], names[i]);
  uint32_t self = zinc_crc32c(0, text, len);
  snprintf(text + len, cap - len, "self %08x\n", self);
  return text;
}

zinc_status zinc_checksums_parse(const char *text, size_t len, const char *what,
                                 zinc_checksum_entry **entries, int *n) {
  *entries = NULL;
  *n = 0;
  const char *self = NULL;
  for (const char *p = text; p < text + len;) {
    const char *eol = memchr(p, '\n', (size_t)(text + len - p));
    if (!eol)
      break;
    if (eol - p >= 5 && !strncmp(p, "self ", 5))
      self = p;
    p = eol + 1;
  }
  if (!self)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: no \"self\" line (truncated or not a zinc "
                      "checksums file)", what);
  unsigned int want;
  if (sscanf(self, "self %8x", &want) != 1 || zinc_crc32c(0, text, (size_t)(self - text)) != want)
    return zinc_error(ZINC_ERR_CORRUPT, "%s: its own crc32c does not match (damaged file)", what);
  int count = 0;
  for (const char *p = text; p < self; p++)
    count += *p == '\n';
  zinc_checksum_entry *e = calloc((size_t)count + 1, sizeof *e);
  if (!e)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory reading %s", what);
  int k = 0;
  for (const char *p = text; p < self && k < count;) {
    const char *eol = memchr(p, '\n', (size_t)(self - p));
    unsigned int crc;
    long long bytes;
    char name[256];
    int used = 0;
    if (!eol || eol - p > 300 || sscanf(p, "%8x %lld %255s%n", &crc, &bytes, name, &used) != 3 ||
        bytes < 0) {
      free(e);
      return zinc_error(ZINC_ERR_CORRUPT, "%s: line %d is not \"<crc32c> <bytes> <name>\"",
                        what, k + 1);
    }
    e[k].crc = crc;
    e[k].bytes = bytes;
    snprintf(e[k].name, sizeof e[k].name, "%s", name);
    k++;
    p = eol + 1;
  }
  *entries = e;
  *n = k;
  return ZINC_OK;
}
