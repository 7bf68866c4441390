/*
 * manifest.h — the checkpoint manifest as a plain struct, and its JSON form
 * (engine/checkpoint/manifest.c: the JSON library stays inside config/).
 *
 * A checkpoint directory holds one shard file per saving rank, this
 * manifest and a checksums file. For every parameter the manifest lists its
 * name, shape, dtype and the pieces each file holds: (file, element offset
 * inside the file's sections, element offset inside the parameter, length).
 * A reader needs nothing else to rebuild any parameter, which is what lets a
 * checkpoint load on any world size and stage, and what tools/zinc-ckpt
 * uses without an engine.
 */
#ifndef ZINC_MANIFEST_H
#define ZINC_MANIFEST_H

#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZINC_MANIFEST_VERSION 1
#define ZINC_CLIENT_STATE_NAME "client_state.bin"
/* Bytes of the identity trailer after the raw bytes of every .zef and
 * .zms file of a checkpoint whose manifest has a save_id (format.h,
 * "Per-rank files"); those of older checkpoints have none. */
#define ZINC_RANK_TRAILER 64

typedef struct {
  int file;              /* index into files */
  int64_t file_offset;   /* element offset inside each of the file's sections */
  int64_t param_offset;  /* first element of the parameter it holds */
  int64_t length;
} zinc_manifest_piece;

typedef struct {
  char *name;            /* "module.param" */
  char *module, *param;
  zinc_dtype dtype;
  int ndim;
  int64_t shape[8];
  int64_t numel;
  int weight_decay;
  zinc_manifest_piece *pieces;
  int npieces;
} zinc_manifest_param;

typedef struct {
  char *name;            /* file name inside the checkpoint directory */
  int rank;
  int64_t elements;      /* elements per section */
  int64_t bytes;         /* whole file size */
  uint32_t crc32c;       /* of the whole file */
} zinc_manifest_file;

/* Error-feedback residuals of compressed gradients (engine/reduce/compress.c),
 * saved when the engine kept them: one raw file per data-parallel rank,
 * rank_NNNNN.zef, its cx_ef bytes as they were (for every trained unit in
 * order, (dp_size - 1) slices, INT8 codec slices of `block` or fp32
 * (DGC's residual, `f32`), one per peer in
 * increasing rank order skipping the saver). A later engine restores the
 * bytes when its layout is the same (dp_size, block and every trained
 * unit's shard offset and chunk); otherwise it reshards them
 * (engine/checkpoint/ef.c). */
typedef struct {
  int64_t shard_offset;  /* the unit's chunk in every rank's shard (elements) */
  int64_t chunk;         /* elements per rank */
} zinc_manifest_ef_unit;

typedef struct {
  int present;           /* 0: none saved (older checkpoints, no compression) */
  int block;             /* INT8 elements per scale (or DGC's block) */
  int f32;               /* 1: "codec" "f32", 4 bytes per element (DGC);
                            0: "int8" */
  int dp_size;           /* senders: one file each */
  int nunits;            /* trained units, in order */
  zinc_manifest_ef_unit *units;
  uint32_t layout_crc32c; /* zinc_manifest_ef_layout_crc of units */
  zinc_manifest_file *files; /* dp_size entries: rank_NNNNN.zef of rank i */
} zinc_manifest_ef;

/* crc32c of the units as little-endian (shard_offset, chunk) int64 pairs:
 * the unit layout's fingerprint. */
uint32_t zinc_manifest_ef_layout_crc(const zinc_manifest_ef_unit *units, int n);
/* One residual slice of unit ui (zinc_codec_bytes of INT8 at the block,
 * or 4 bytes per element for f32), rounded up to 16 bytes. */
int64_t zinc_manifest_ef_slice_bytes(const zinc_manifest_ef *ef, int ui);
/* Bytes of one file's residuals: every unit's (dp_size - 1) slices (the
 * file holds ZINC_RANK_TRAILER more when the manifest has a save_id). */
int64_t zinc_manifest_ef_file_bytes(const zinc_manifest_ef *ef);

/* The compression methods' rank-local state (engine/checkpoint/mstate.h),
 * saved when the engine registered any: one raw file per data-parallel
 * rank, rank_NNNNN.zms, the registered buffers in order. Every rank
 * registers the same entries (names and bytes), so every file holds the
 * sum of the entries' bytes (and the identity trailer after them when the
 * manifest has a save_id). */
typedef struct {
  char *name;            /* "<method>.<buffer>" */
  int64_t bytes;
} zinc_manifest_mstate_entry;

typedef struct {
  int present;           /* 0: none saved */
  int dp_size;           /* one file per rank */
  int nentries;
  zinc_manifest_mstate_entry *entries;
  zinc_manifest_file *files; /* dp_size entries: rank_NNNNN.zms of rank i */
} zinc_manifest_mstate;

typedef struct {
  int version;
  char *zinc_version;
  char *tag;
  /* The save's identity (random, nonzero), written since per-rank files
   * carry who wrote them (format.h, "Per-rank files"): every shard,
   * .zef and .zms file of the save holds it with its rank. 0: a
   * checkpoint saved before, whose files hold none (loaded without the
   * check, as then). */
  uint64_t save_id;
  int world_size, dp_size, stage;
  char *offload_optimizer; /* "none" | "cpu" | "nvme" */
  char *optimizer;         /* zinc_opt_kind_str: "Adam" "Lamb" "Lion" "Adagrad"
                              "SGD"; "Adam" when absent (older manifests) */
  int64_t step, micro_step, skipped_steps;
  /* loss scaler (fp16) */
  double scaler_scale;
  int64_t scaler_iter, scaler_last_overflow;
  int scaler_hysteresis;
  char *config_json;     /* the resolved settings at save time (JSON text) */
  /* the trainer's blob (zinc_checkpoint_set_client_state), saved as
   * ZINC_CLIENT_STATE_NAME beside the shards; bytes -1: none saved */
  int64_t client_state_bytes;
  uint32_t client_state_crc32c;
  /* model parallelism: this manifest's model-parallel rank of mp_size
   * (1 and 0 in checkpoints of runs without it) */
  int mp_size, mp_rank;
  /* pipeline parallelism: this manifest's stage of pp_size (1 and 0 in
   * checkpoints of runs without a pipeline) */
  int pp_size, pp_stage;
  char *sections[3];     /* names of the sections in every file, in order */
  int nsections;
  zinc_manifest_file *files;
  int nfiles;
  zinc_manifest_param *params;
  int nparams;
  zinc_manifest_ef ef;   /* "error_feedback": present 0 when absent */
  zinc_manifest_mstate ms; /* "method_state": present 0 when absent */
} zinc_manifest;

/* ZINC_RANK_TRAILER when m's .zef and .zms files end with an identity
 * trailer (m->save_id set), else 0. */
int64_t zinc_manifest_rank_trailer(const zinc_manifest *m);

/* Free what a writer or the parser allocated in *ms, and clear it. */
void zinc_manifest_mstate_free(zinc_manifest_mstate *ms);

/* JSON text of m (malloc'ed). */
char *zinc_manifest_to_json(const zinc_manifest *m);
/* Parse and validate (types, ranges, pieces inside their file and param,
 * pieces covering every parameter exactly once). `what` names the source in
 * messages (a path). On failure *out is NULL and the status is
 * ZINC_ERR_CORRUPT with a message naming the JSON path. */
zinc_status zinc_manifest_parse(const char *text, size_t len, const char *what,
                                zinc_manifest **out);
void zinc_manifest_free(zinc_manifest *m);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_MANIFEST_H */
