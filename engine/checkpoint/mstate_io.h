/*
 * mstate_io.h — the compression methods' state (mstate.h) on disk, for
 * save.c and load.c: rank_NNNNN.zms beside each shard, described in the
 * manifest (zinc_manifest_mstate), restored or reset on load.
 */
#ifndef ZINC_CKPT_MSTATE_IO_H
#define ZINC_CKPT_MSTATE_IO_H

#include "engine/checkpoint/format.h"
#include "engine/engine.h"

typedef enum {
  ZINC_MSTATE_LOAD_NONE = 0, /* the engine registered nothing */
  ZINC_MSTATE_LOAD_RESET,    /* nothing read: the method's own buffers
                                reset, rank copies left as loaded */
  ZINC_MSTATE_LOAD_SHARED,   /* as RESET, but the REPLICATED buffers that
                                rank 0's file holds are read from it */
  ZINC_MSTATE_LOAD_EXACT     /* every rank's bytes as saved */
} zinc_mstate_load_mode;

/* Write the registered buffers, in order, to path, then the identity
 * trailer naming id (format.h, "Per-rank files"; created, fsynced;
 * removed on failure); crc32c and size come back for the manifest. */
zinc_status zinc_ckpt_mstate_write(zinc_engine *e, const char *path,
                                   const zinc_rank_file_id *id, zinc_ckpt_fault *fault,
                                   uint32_t *crc, int64_t *bytes);
/* Fill *ms from the registry and the gathered (crc, bytes) per rank;
 * zinc_manifest_mstate_free frees it. */
zinc_status zinc_ckpt_mstate_describe(const zinc_engine *e, const uint32_t *crcs,
                                      const int64_t *bytes, zinc_manifest_mstate *ms);
/* What a load of d does; unless EXACT, why (cap bytes) says why. Every
 * rank decides alike (the manifest and the registry are the same on all). */
zinc_mstate_load_mode zinc_ckpt_mstate_mode(const zinc_engine *e, const zinc_ckpt_dir *d,
                                            int weights_only, char *why, size_t cap);
/* Verify, before anything changes, the method-state file this rank's load
 * reads its own bytes from: EXACT its own; SHARED rank 0 checks rank 0's
 * (the others read pieces of it, as they read shards another rank
 * verified). */
zinc_status zinc_ckpt_mstate_verify(const zinc_engine *e, const zinc_ckpt_dir *d,
                                    zinc_mstate_load_mode mode);
/* After the engine's arrays are loaded: restore (EXACT: this rank's file)
 * the registered buffers, or reset them by kind (mstate.h); rank 0 says
 * which in an info line. */
zinc_status zinc_ckpt_mstate_load(zinc_engine *e, const zinc_ckpt_dir *d,
                                  zinc_mstate_load_mode mode, const char *why);
/* Verify method-state file i (size and crc32c against the manifest, and
 * its identity trailer). */
zinc_status zinc_ckpt_dir_verify_mstate(const zinc_ckpt_dir *d, int i);

#endif /* ZINC_CKPT_MSTATE_IO_H */
