/*
 * checkpoint.h — zinc_save_checkpoint / zinc_load_checkpoint: sharded,
 * crash-safe, loadable on any world size and stage; what save.c, load.c
 * and publish.c share.
 *
 * What is saved: each data-parallel rank r writes the fp32 master, exp_avg
 * and exp_avg_sq of its chunks (chunk r of every unit, in shard order —
 * at stage 0 too, where every rank holds all of them) to rank_<r>.zshard;
 * rank 0 writes the manifest (every parameter's pieces, counters, loss
 * scaler, resolved config) and the checksums file. With error feedback on
 * (quantized gradients with zeropp_loco_param) each rank also writes its
 * residuals to rank_<r>.zef, restored or resharded on load (ef.c). The
 * compute copy of the parameters is not saved: it is always the master
 * rounded to the parameter's dtype, and a load rebuilds it so.
 *
 * Crash safety (format.h, base/fs.h): files go to <dir>/.<tag>.partial, each rank
 * fsyncs its shard before rank 0 writes the manifest, the directory is
 * renamed into place and <dir>/latest replaced atomically.
 *
 * A load validates everything first — checksums, manifest, names, shapes
 * and dtypes against the registered model, and the crc of every shard
 * (shards divided among the ranks) — and changes nothing unless all of that
 * passes on every rank. Then each rank reads, for every chunk it owns under
 * the current layout, the overlapping pieces of the saved layout: N ranks
 * load into M ranks, any stage into any stage. An I/O error after the
 * checks stops the engine (its state would be partial).
 */
#ifndef ZINC_ENGINE_CHECKPOINT_H
#define ZINC_ENGINE_CHECKPOINT_H

#include "engine/checkpoint/format.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/pipe.h"

#define STAGING_ELEMS (1 << 20) /* 4 MiB of f32 between device and file */

static const char *const section_names[3] = {"fp32_master", "exp_avg", "exp_avg_sq"};

/* The state arrays this engine's optimizer keeps, in section order: the
 * master (0), then exp_avg (1) and exp_avg_sq (2) where the optimizer has
 * them (optim/optimizer.h). Returns their count. */
static inline int state_arrays(const zinc_engine *e, int *arrays) {
  int n = 0;
  arrays[n++] = 0;
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG)
    arrays[n++] = 1;
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG_SQ)
    arrays[n++] = 2;
  return n;
}

static inline zinc_status check_call(zinc_engine *e, const char *dir, const char *tag,
                                     const char *what, int need_tag) {
  ZINC_CHECK(zinc_engine_usable(e, what));
  if (!dir || !dir[0])
    return zinc_error(ZINC_ERR_INVALID, "%s: directory is NULL or empty", what);
  if (need_tag || tag)
    ZINC_CHECK(zinc_ckpt_tag_check(tag));
  if (e->mb_open)
    return zinc_error(ZINC_ERR_INVALID, "%s: a micro-batch is in progress; save or load "
                      "between steps", what);
  return ZINC_OK;
}

/* ------------------------------------------ model and pipeline parallelism
 *
 * With model_parallel_size N > 1 each model-parallel rank's shard of the
 * model is a checkpoint of its own — shards, manifest, checksums, client
 * state — in <dir>/<tag>/mp_rank_NN/, written by its data-parallel group.
 * With pipeline_parallel_size P > 1 each stage's part is in
 * <dir>/<tag>/pp_stage_SS/ (its mp_rank_NN/ parts inside with model
 * parallelism). World rank 0 owns <dir> (lock, publication of <dir>/<tag>
 * as a whole, latest), and the ranks agree over the world at every step,
 * so the whole model is published at once or not at all. Without either
 * the files are in <dir>/<tag>/ itself, as they always were. A load needs
 * the model- and pipeline-parallel sizes of the save. */

#define MP_DIR_FORMAT "mp_rank_%02d"
#define PP_DIR_FORMAT "pp_stage_%02d"

/* Whether a checkpoint of this engine is in parts (a directory each). */
static inline int ckpt_in_parts(const zinc_engine *e) {
  return e->mp_size > 1 || zinc_pp_size(e) > 1;
}

/* This rank's part under <dir>/<tag>: "", "mp_rank_NN", "pp_stage_SS" or
 * "pp_stage_SS/mp_rank_NN". */
static inline void ckpt_part_name(const zinc_engine *e, char *buf, size_t n) {
  int len = 0;
  buf[0] = '\0';
  if (zinc_pp_size(e) > 1)
    len = snprintf(buf, n, PP_DIR_FORMAT "%s", zinc_pp_rank(e), e->mp_size > 1 ? "/" : "");
  if (e->mp_size > 1 && len >= 0 && (size_t)len < n)
    snprintf(buf + len, n - (size_t)len, MP_DIR_FORMAT, e->mp_rank);
}

/* The communicator the ranks agree over: the world when the ranks save or
 * load parts of one checkpoint. */
static inline zinc_comm *agree_comm(const zinc_engine *e) {
  return ckpt_in_parts(e) ? e->world : e->dp_host;
}

/* ------------------------------------------------------------ publish.c */

/* A save's publication (publish.c's header): the directory, the crash
 * test hook's count, the write-fault hook, and whether this save made the
 * partial directory. */
typedef struct {
  const char *dir;
  long long crash_at, steps;
  zinc_ckpt_fault fault; /* ZINC_CKPT_FAULT: counts the save's writes */
  int made_partial;      /* this save created .<tag>.partial (a failure removes it) */
} zinc_ckpt_publisher;

/* The crash test hook (ZINC_CKPT_CRASH_AT): one more step of the save. */
void zinc_ckpt_crash_point(zinc_ckpt_publisher *p);
/* Rank 0, under the lock: make the partial directory of tag (final: its
 * published path), after finishing or clearing what crashed saves left. */
zinc_status zinc_ckpt_prepare_dir(zinc_ckpt_publisher *p, const char *tag, const char *final,
                                  const char *partial);
/* Rank 0: the complete, fsynced partial directory into place as final,
 * then latest. */
zinc_status zinc_ckpt_publish(zinc_ckpt_publisher *p, const char *tag, const char *final,
                              const char *partial);

#endif /* ZINC_ENGINE_CHECKPOINT_H */
