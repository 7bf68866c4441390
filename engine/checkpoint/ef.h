/*
 * ef.h — the error-feedback residuals of compressed gradients in
 * checkpoints (engine/checkpoint/ef.c), for save.c and load.c: written beside
 * each rank's shard as rank_NNNNN.zef, described in the manifest
 * (zinc_manifest_ef), restored or resharded on load.
 */
#ifndef ZINC_CKPT_EF_H
#define ZINC_CKPT_EF_H

#include "engine/checkpoint/format.h"
#include "engine/engine.h"

#define ZINC_EF_FILE_FORMAT "rank_%05d.zef"

/* What a load does with the residuals. */
typedef enum {
  ZINC_EF_LOAD_NONE = 0, /* the engine keeps none: anything saved is ignored */
  ZINC_EF_LOAD_ZERO,     /* none saved (or a weights-only load): start from zero */
  ZINC_EF_LOAD_EXACT,    /* same layout: every rank's bytes as saved */
  ZINC_EF_LOAD_RESHARD   /* another layout: summed per element and re-encoded */
} zinc_ef_load_mode;

/* Write e->rd->cx_ef to path, then the identity trailer naming id (format.h,
 * "Per-rank files"; created, fsynced; removed on failure); the file's
 * crc32c and size come back for the manifest. Counts its writes in fault. */
zinc_status zinc_ckpt_ef_write(zinc_engine *e, const char *path, const zinc_rank_file_id *id,
                               zinc_ckpt_fault *fault, uint32_t *crc, int64_t *bytes);
/* Fill m->ef from the engine's layout and the gathered file info
 * (crc, bytes per rank); ef->units and ef->files are malloc'ed (names
 * too): zinc_ckpt_ef_describe_free. */
zinc_status zinc_ckpt_ef_describe(const zinc_engine *e, const uint32_t *crcs,
                                  const int64_t *bytes, zinc_manifest_ef *ef);
void zinc_ckpt_ef_describe_free(zinc_manifest_ef *ef);
/* Decide what a load of d does with the residuals (map: as below; the
 * parameters matched). Every rank decides alike: the manifest and the
 * layout are the same on every rank. */
zinc_ef_load_mode zinc_ckpt_ef_mode(zinc_engine *e, const zinc_ckpt_dir *d, const int *map,
                                    int weights_only);
/* Restore (mode EXACT), reshard (RESHARD) or zero (ZERO) e->rd->cx_ef from d;
 * map[i]: the manifest index of engine parameter i. Says which in an info
 * line. The files were verified before. */
zinc_status zinc_ckpt_ef_load(zinc_engine *e, const zinc_ckpt_dir *d, const int *map,
                              zinc_ef_load_mode mode);

#endif /* ZINC_CKPT_EF_H */
