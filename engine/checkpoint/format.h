/*
 * format.h — checkpoint files on disk, without an engine (the engine's
 * save/load and tools/zinc-ckpt both use it). The filesystem steps (atomic
 * replacement, fsync, rename into place, rm -r) are base/fs.h's.
 *
 * A checkpoint directory <dir>/<tag>/ holds:
 *   rank_NNNNN.zshard   one per saving data-parallel rank:
 *                       [section 0][section 1][section 2][trailer, 64 B]
 *                       each section `elements` little-endian f32, or
 *                       bf16 (the master, exp_avg, exp_avg_sq of the
 *                       rank's chunks, in the dtype the run kept them:
 *                       the bf16 section's keys); the trailer: "ZINCSHRD",
 *                       version, rank, world, nsections, elements, crc32c
 *                       of each section, the save's identity (below),
 *                       crc32c of the trailer (little-endian,
 *                       base/endian.h). Version 1: every section f32;
 *                       version 2: some bf16, bit i of nsections' second
 *                       byte set for each (older readers refuse it);
 *   rank_NNNNN.zef      with error feedback on (engine/reduce/compress.c):
 *                       the rank's residual bytes, raw (manifest.h, zinc_manifest_ef;
 *                       engine/checkpoint/ef.c), then the identity trailer;
 *   rank_NNNNN.zms      with a compression method that keeps rank-local
 *                       state (1-bit Adam's errors, PowerSGD's Q, ...):
 *                       its registered buffers, raw, in order (mstate.h,
 *                       zinc_manifest_mstate; engine/checkpoint/mstate.c),
 *                       then the identity trailer;
 *   manifest.json       engine/checkpoint/manifest.h (with every shard's crc32c);
 *   checksums.crc32c    "<crc32c> <bytes> <name>" per file, then
 *                       "self <crc32c of the lines above>".
 * <dir>/latest names the newest complete tag (DeepSpeed's convention), or
 * for a moment ".<tag>.next" (a save publishing without RENAME_EXCHANGE).
 * A save writes <dir>/.<tag>.partial/, fsyncs every file and the directory,
 * then renames it into place (exchanging with an older <tag>) and replaces
 * latest atomically: a crash leaves the old checkpoint or the new one
 * (engine/checkpoint/publish.c).
 *
 * Per-rank files. Every file a rank writes for itself says whose it is, so
 * that one moved under another rank's name (or from another save, or from
 * another model-parallel part), with every checksum rewritten to match, is
 * refused on load (ZINC_ERR_CORRUPT naming the file and both identities)
 * instead of resuming a rank with another's state. The identity is the
 * data-parallel rank and size, the model-parallel rank and size, and the
 * save's id (manifest.h, save_id: random per save, broadcast by the saving
 * world's rank 0). Shards carry it in their trailer's last 16 bytes (zero,
 * "none", in shards written before); .zef and .zms files end with a 64-byte
 * trailer after their raw bytes:
 *   "ZINCRANK", version 1, kind (1 .zef, 2 .zms), rank, world, mp_rank,
 *   mp_size, payload bytes (u64), save id (u64), zeros, crc32c of bytes
 *   0..59 (little-endian).
 * A manifest without a save_id (a checkpoint saved before) has files
 * without it: they load as they did, without the check.
 *
 * Tests inject write failures with ZINC_CKPT_FAULT="ERRNO@N" (the N-th
 * write of a save, zinc_ckpt_fault below) and read failures with
 * ZINC_CKPT_READ_FAULT, and a slow filesystem with ZINC_CKPT_DELAY and
 * ZINC_CKPT_READ_DELAY="SECONDS@N" (docs/environment.md).
 */
#ifndef ZINC_CKPT_FILE_H
#define ZINC_CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/checkpoint/manifest.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZINC_SHARD_MAGIC "ZINCSHRD"
#define ZINC_SHARD_VERSION 2     /* the newest read and written */
#define ZINC_SHARD_VERSION_F32 1 /* every section f32: written so when none is bf16 */
#define ZINC_SHARD_TRAILER 64
#define ZINC_SHARD_MAX_SECTIONS 3
#define ZINC_MANIFEST_NAME "manifest.json"
#define ZINC_CHECKSUMS_NAME "checksums.crc32c"
#define ZINC_LATEST_NAME "latest"
#define ZINC_STAGED_SUFFIX ".next"   /* .<tag>.next: see publish.c */
#define ZINC_OWN_MARKER ".zinc-checkpoint" /* in every directory a save creates */
#define ZINC_LOCK_NAME ".zinc-save.lock"
#define ZINC_TAG_MAX 200
/* Largest files a reader accepts (every rank reads them whole). */
#define ZINC_LATEST_MAX 4096
#define ZINC_CHECKSUMS_MAX ((size_t)64 << 20)
#define ZINC_MANIFEST_MAX ((size_t)256 << 20)

/* Who wrote a per-rank file (see "Per-rank files" above). */
typedef struct {
  uint64_t save_id;           /* the manifest's; 0: none (files written before) */
  uint32_t rank, world;       /* data-parallel */
  uint32_t mp_rank, mp_size;  /* model-parallel (0 and 1 without it) */
} zinc_rank_file_id;

typedef struct {
  uint32_t version;
  uint32_t rank, world;
  uint32_t nsections;
  uint32_t bf16_sections;  /* bit i: section i holds bf16 (version 2), else f32 */
  uint64_t elements;                               /* per section */
  uint32_t section_crc[ZINC_SHARD_MAX_SECTIONS];
  /* bytes 44..59: the save's id, mp_rank, mp_size; all zero in shards
   * written before (save_id 0) */
  uint64_t save_id;
  uint32_t mp_rank, mp_size;
} zinc_shard_trailer;

/* Encode/decode the 64-byte trailer. Decode checks magic, version, crc and
 * ranges; `what` names the file in messages (ZINC_ERR_CORRUPT). */
void zinc_shard_trailer_encode(const zinc_shard_trailer *t, unsigned char out[ZINC_SHARD_TRAILER]);
zinc_status zinc_shard_trailer_decode(const unsigned char *buf, size_t len, const char *what,
                                      zinc_shard_trailer *out);

/* The identity trailer of a .zef or .zms file (see "Per-rank files"). */
#define ZINC_RANK_MAGIC "ZINCRANK"
#define ZINC_RANK_VERSION 1
enum { ZINC_RANK_FILE_EF = 1, ZINC_RANK_FILE_MSTATE = 2 };
void zinc_rank_trailer_encode(int kind, const zinc_rank_file_id *id, uint64_t payload,
                              unsigned char out[ZINC_RANK_TRAILER]);
/* Checks magic, version, crc and ranges; ZINC_ERR_CORRUPT naming `what`. */
zinc_status zinc_rank_trailer_decode(const unsigned char *buf, size_t len, const char *what,
                                     int *kind, zinc_rank_file_id *id, uint64_t *payload);

/* Test hook ZINC_CKPT_FAULT="ERRNO@N": the N-th write of a save on this
 * rank fails with ERRNO — counted over the whole save: each write call to
 * the shard, then (rank 0) the manifest, the checksums file, the rename
 * into place and latest. Read when a save starts, with ZINC_CKPT_DELAY. */
typedef struct {
  int err;     /* errno to inject; 0: none */
  int at;      /* the write that fails */
  int count;   /* writes so far */
  /* ZINC_CKPT_DELAY="SECONDS@N": the N-th write first sleeps SECONDS (a
   * slow filesystem; 0: none), counted as above */
  double delay_s;
  int delay_at;
} zinc_ckpt_fault;
void zinc_ckpt_fault_init(zinc_ckpt_fault *f);
/* Count one write of `path` (op: "write", "rename", ...); ZINC_ERR_IO
 * like the real failure when it is the injected one. f may be NULL. */
zinc_status zinc_ckpt_fault_hit(zinc_ckpt_fault *f, const char *op, const char *path,
                                int64_t offset);

/* Bytes of section s's elements (2 for bf16, 4 for f32) and the byte
 * offset of section s in the file (s = nsections: the data's end). */
size_t zinc_shard_elem_bytes(const zinc_shard_trailer *t, int s);
uint64_t zinc_shard_section_offset(const zinc_shard_trailer *t, int s);

/* Streaming shard writer: sections are written in order, `elements` f32
 * values each, in any number of appends, stored as f32 or, in the sections
 * whose bit is set in bf16_sections, as bf16 (rounded to nearest even:
 * exact for values a bf16 array held); finish writes the trailer, fsyncs
 * and closes. The whole-file crc32c and size come back for the manifest. */
typedef struct zinc_shard_writer zinc_shard_writer;
zinc_status zinc_shard_writer_open(const char *path, const zinc_rank_file_id *id,
                                   int nsections, unsigned bf16_sections, uint64_t elements,
                                   zinc_ckpt_fault *fault, zinc_shard_writer **out);
zinc_status zinc_shard_writer_append(zinc_shard_writer *w, const float *data, size_t n);
zinc_status zinc_shard_writer_finish(zinc_shard_writer *w, uint32_t *file_crc, int64_t *bytes);
void zinc_shard_writer_abort(zinc_shard_writer *w); /* close and unlink */

/* Read-side: open, verify the whole file (trailer, section crcs, and the
 * file crc when expect_crc is not NULL), read ranges. */
typedef struct zinc_shard_reader zinc_shard_reader;
zinc_status zinc_shard_reader_open(const char *path, zinc_shard_reader **out);
const zinc_shard_trailer *zinc_shard_reader_trailer(const zinc_shard_reader *r);
zinc_status zinc_shard_reader_verify(zinc_shard_reader *r, const uint32_t *expect_crc,
                                     int64_t expect_bytes);
/* n f32 values of `section` starting at element `offset`. */
zinc_status zinc_shard_reader_read(zinc_shard_reader *r, int section, uint64_t offset,
                                   float *dst, size_t n);
void zinc_shard_reader_close(zinc_shard_reader *r);

/* The checksums file: lines for each (name, crc, bytes), then the self line. */
char *zinc_checksums_format(const char *const *names, const uint32_t *crcs,
                            const int64_t *bytes, int n);
/* Parse and check the self line; look up one name. */
typedef struct {
  char name[256];
  uint32_t crc;
  int64_t bytes;
} zinc_checksum_entry;
zinc_status zinc_checksums_parse(const char *text, size_t len, const char *what,
                                 zinc_checksum_entry **entries, int *n);

/* A checkpoint directory, read and verified (checksums file, manifest crc,
 * manifest contents); shards are opened and verified on request. */
typedef struct {
  char *path;            /* <dir>/<tag> */
  char *tag;
  zinc_manifest *manifest;
  uint32_t manifest_crc; /* crc32c of manifest.json: two views of one save share it */
} zinc_ckpt_dir;
/* tag NULL: the one <dir>/latest names. */
zinc_status zinc_ckpt_dir_open(const char *dir, const char *tag, zinc_ckpt_dir **out);
/* Verify shard file i completely (crc, trailer against the manifest:
 * sections, rank and world, and the identity when the manifest has a
 * save_id). */
zinc_status zinc_ckpt_dir_verify_file(const zinc_ckpt_dir *d, int i);
/* Verify error-feedback file i completely (size and crc32c, identity). */
zinc_status zinc_ckpt_dir_verify_ef(const zinc_ckpt_dir *d, int i);
/* Verify a file read whole (size and crc32c against f); `what` names its
 * kind in the message ("error-feedback", "method-state"). */
zinc_status zinc_ckpt_dir_verify_whole(const zinc_ckpt_dir *d, const zinc_manifest_file *f,
                                       const char *what);
/* zinc_ckpt_dir_verify_whole, then (the manifest has a save_id) the
 * file's identity trailer: of `kind`, data-parallel rank f->rank of the
 * manifest's dp_size, its model-parallel rank and size, its save_id, and
 * the payload before it. */
zinc_status zinc_ckpt_dir_verify_rank_file(const zinc_ckpt_dir *d, const zinc_manifest_file *f,
                                           int kind, const char *what);
void zinc_ckpt_dir_close(zinc_ckpt_dir *d);
/* Validate a tag: 1..200 of the characters A-Z a-z 0-9 . _ - + = @ , ,
 * not starting with '.' or '-', not "latest" or "latest.*", not ending in
 * one of the suffixes of zinc's temporaries (.tmp .old .partial .next
 * .link .lock). ZINC_ERR_INVALID naming the tag and the rule it breaks. */
zinc_status zinc_ckpt_tag_check(const char *tag);
/* 1 when name is ".<tag>.next" for a valid tag (copied to tag). */
int zinc_ckpt_staged_tag(const char *name, char *tag, size_t cap);
/* What <dir>/latest names (malloc'ed, newline removed): a tag, or
 * ".<tag>.next" while a save publishes without RENAME_EXCHANGE. At most
 * ZINC_LATEST_MAX bytes are read. */
zinc_status zinc_ckpt_latest_read(const char *dir, char **name);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_CKPT_FILE_H */
