/*
 * checkpoint.c — zinc_save_checkpoint / zinc_load_checkpoint: sharded,
 * crash-safe, loadable on any world size and stage.
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
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/fs.h"
#include "engine/checkpoint/ef.h"
#include "engine/checkpoint/mstate_io.h"
#include "engine/checkpoint/format.h"
#include "engine/checkpoint/wait_bound.h"
#include "engine/engine.h"

#define STAGING_ELEMS (1 << 20) /* 4 MiB of f32 between device and file */
/* per rank, gathered after the shards are written: shard crc and bytes,
 * error-feedback file crc and bytes, method-state file crc and bytes */
#define INFO 6

static const char *section_names[3] = {"fp32_master", "exp_avg", "exp_avg_sq"};

/* The state arrays this engine's optimizer keeps, in section order: the
 * master (0), then exp_avg (1) and exp_avg_sq (2) where the optimizer has
 * them (optim/optimizer.h). Returns their count. */
static int state_arrays(const zinc_engine *e, int *arrays) {
  int n = 0;
  arrays[n++] = 0;
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG)
    arrays[n++] = 1;
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG_SQ)
    arrays[n++] = 2;
  return n;
}

static zinc_status check_call(zinc_engine *e, const char *dir, const char *tag, const char *what,
                              int need_tag) {
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

/* ---------------------------------------------------- model parallelism
 *
 * With model_parallel_size N > 1 each model-parallel rank's shard of the
 * model is a checkpoint of its own — shards, manifest, checksums, client
 * state — in <dir>/<tag>/mp_rank_NN/, written by its data-parallel group;
 * world rank 0 owns <dir> (lock, publication of <dir>/<tag> as a whole,
 * latest), and the ranks agree over the world at every step, so the whole
 * model is published at once or not at all. Without model parallelism the
 * files are in <dir>/<tag>/ itself, as they always were. A load needs the
 * model_parallel_size of the save. */

#define MP_DIR_FORMAT "mp_rank_%02d"

/* The communicator the ranks agree over: the world when model-parallel
 * ranks save or load parts of one checkpoint. */
static zinc_comm *agree_comm(const zinc_engine *e) {
  return e->mp_size > 1 ? e->world : e->dp_host;
}

/* What dir/tag (tag NULL: latest) names as a directory under dir. */
static zinc_status resolve_name(const char *dir, const char *tag, char **name) {
  if (tag) {
    *name = zinc_strdup(tag);
    return *name ? ZINC_OK : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: out of host memory");
  }
  zinc_status st = zinc_ckpt_latest_read(dir, name);
  if (st != ZINC_OK)
    zinc_error_wrap(st, "no tag given and no readable %s/%s", dir, ZINC_LATEST_NAME);
  return st;
}

/* Open this rank's checkpoint: dir/tag itself, or its mp_rank_NN part;
 * a checkpoint saved at another model_parallel_size is refused naming both. */
static zinc_status open_for_engine(const zinc_engine *e, const char *dir, const char *tag,
                                   zinc_ckpt_dir **out) {
  *out = NULL;
  char *name = NULL;
  ZINC_CHECK(resolve_name(dir, tag, &name));
  char *top = zinc_path_join(dir, name), sub[32], mp0[32];
  snprintf(sub, sizeof sub, MP_DIR_FORMAT, e->mp_rank);
  snprintf(mp0, sizeof mp0, MP_DIR_FORMAT, 0);
  char *probe = top ? zinc_path_join(top, e->mp_size > 1 ? ZINC_MANIFEST_NAME : mp0) : NULL;
  zinc_status st = probe ? ZINC_OK : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: out of host "
                                                "memory");
  struct stat sb;
  if (st == ZINC_OK && e->mp_size > 1 && lstat(probe, &sb) == 0)
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s was saved with model_parallel_size 1 and "
                    "this engine runs model_parallel_size %d: load it at the size it was "
                    "saved with", top, e->mp_size);
  else if (st == ZINC_OK && e->mp_size == 1 && lstat(probe, &sb) == 0) {
    zinc_ckpt_dir *d0 = NULL;
    int saved = zinc_ckpt_dir_open(top, mp0, &d0) == ZINC_OK ? d0->manifest->mp_size : -1;
    zinc_ckpt_dir_close(d0);
    char n[32] = "more than 1";
    if (saved > 0)
      snprintf(n, sizeof n, "%d", saved);
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s was saved with model_parallel_size %s "
                    "(one part per model-parallel rank) and this engine runs "
                    "model_parallel_size 1: load it at the size it was saved with", top, n);
  }
  if (st == ZINC_OK)
    st = e->mp_size > 1 ? zinc_ckpt_dir_open(top, sub, out) : zinc_ckpt_dir_open(dir, tag, out);
  if (st == ZINC_OK && ((*out)->manifest->mp_size != e->mp_size ||
                        (*out)->manifest->mp_rank != e->mp_rank)) {
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s holds model-parallel rank %d of "
                    "model_parallel_size %d; this rank is model-parallel rank %d of %d: load it "
                    "at the size it was saved with", (*out)->path, (*out)->manifest->mp_rank,
                    (*out)->manifest->mp_size, e->mp_rank, e->mp_size);
    zinc_ckpt_dir_close(*out);
    *out = NULL;
  }
  free(probe);
  free(top);
  free(name);
  return st;
}

/* ---------------------------------------------------------- publishing
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

typedef struct {
  const char *dir;
  long long crash_at, steps;
  zinc_ckpt_fault fault; /* ZINC_CKPT_FAULT: counts the save's writes */
  int made_partial;      /* this save created .<tag>.partial (a failure removes it) */
} publisher;

static void crash_point(publisher *p) {
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

static zinc_status write_latest(publisher *p, const char *name) {
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
  crash_point(p);
  return st;
}

static zinc_status rename_step(publisher *p, const char *from, const char *to) {
  ZINC_CHECK(zinc_ckpt_fault_hit(&p->fault, "rename to", to, -1));
  if (rename(from, to) != 0)
    return zinc_fs_error("rename to", to, -1, errno);
  crash_point(p);
  zinc_status st = zinc_fs_fsync(p->dir, 1);
  crash_point(p);
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
static zinc_status finish_staged(publisher *p, const char *tag) {
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
    crash_point(p);
  }
  if (st == ZINC_OK)
    st = link_files(next, lnk);
  crash_point(p);
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
static zinc_status prepare_dir(publisher *p, const char *tag, const char *final,
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
  crash_point(p);
  return st;
}

/* Rank 0: the partial directory is complete and fsynced. */
static zinc_status publish(publisher *p, const char *tag, const char *final, const char *partial) {
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
    crash_point(p);
    st = zinc_fs_fsync(p->dir, 1);
    crash_point(p);
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

/* ---------------------------------------------------------------- save */

/* A save's identity (format.h, "Per-rank files"): random, nonzero. */
static uint64_t new_save_id(void) {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id) {
    double t = zinc_now(); /* no entropy yet: the time and the process */
    memcpy(&id, &t, sizeof id);
    id ^= (uint64_t)getpid() << 32;
  }
  return id ? id : 1;
}

static zinc_status write_shard(zinc_engine *e, const char *path, const zinc_rank_file_id *id,
                               zinc_ckpt_fault *fault, uint32_t *crc, int64_t *bytes) {
  zinc_shard_writer *w = NULL;
  float *staging = NULL;
  zinc_status st = zinc_aligned_alloc((void **)&staging, 64, STAGING_ELEMS * 4, "save staging");
  if (st != ZINC_OK)
    return st;
  int arrays[3], narrays = state_arrays(e, arrays);
  st = zinc_shard_writer_open(path, id, narrays, (uint64_t)e->shard_numel, fault, &w);
  for (int k = 0; k < narrays && st == ZINC_OK; k++) {
    int s = arrays[k];
    /* streamed a bounded piece at a time, wherever the state lives */
    for (int ui = 0; ui < e->nunits && st == ZINC_OK; ui++) {
      const zinc_unit *u = &e->units[ui];
      int64_t base = zinc_layout_opt_offset(e, u, e->dp_rank);
      for (int64_t off = 0; off < u->chunk && st == ZINC_OK; off += STAGING_ELEMS) {
        int64_t n = u->chunk - off < STAGING_ELEMS ? u->chunk - off : STAGING_ELEMS;
        st = zinc_opt_read(e, s, base + off, n, staging);
        if (st == ZINC_OK)
          st = zinc_shard_writer_append(w, staging, (size_t)n);
      }
    }
  }
  if (st == ZINC_OK) {
    st = zinc_shard_writer_finish(w, crc, bytes);
  } else {
    zinc_shard_writer_abort(w);
  }
  free(staging);
  return st;
}

typedef struct {
  zinc_manifest_piece *pieces;
  int n, cap;
} piece_list;

static zinc_status collect_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                                 int64_t chunk_off, int64_t param_off, int64_t len, void *ctx) {
  piece_list *l = ctx;
  ZINC_CHECK(zinc_grow((void **)&l->pieces, &l->cap, l->n + 1, sizeof *l->pieces,
                       "manifest pieces"));
  l->pieces[l->n++] = (zinc_manifest_piece){.file = r,
                                            .file_offset = u->shard_offset + chunk_off,
                                            .param_offset = param_off,
                                            .length = len};
  return ZINC_OK;
}

static zinc_status write_manifest(zinc_engine *e, const char *partial, const char *tag,
                                  uint64_t save_id, const int64_t *file_info, const char *extra,
                                  zinc_ckpt_fault *fault) {
  zinc_manifest m = {0};
  zinc_status st = ZINC_OK;
  /* checksums: shards, manifest, client state, extra, .zef files, .zms files */
  size_t nnames = 3 * (size_t)e->dp_size + 3;
  char **names = calloc(nnames, sizeof *names);
  uint32_t *crcs = calloc(nnames, sizeof *crcs);
  int64_t *bytes = calloc(nnames, sizeof *bytes);
  int nsums = e->dp_size + 1;
  m.files = calloc((size_t)e->dp_size, sizeof *m.files);
  m.params = calloc((size_t)e->nparams + 1, sizeof *m.params);
  char *json = NULL, *sums = NULL;
  if (!names || !crcs || !bytes || !m.files || !m.params) {
    st = zinc_error(ZINC_ERR_NOMEM, "out of memory building the manifest");
    goto out;
  }
  m.version = ZINC_MANIFEST_VERSION;
  m.zinc_version = (char *)zinc_version();
  m.tag = (char *)tag;
  m.save_id = save_id;
  m.world_size = e->world_size;
  m.dp_size = e->dp_size;
  m.stage = e->cfg.stage;
  m.offload_optimizer = (char *)zinc_offload_device_name(e->cfg.offload_optimizer.device);
  m.step = e->step;
  m.micro_step = e->micro_step;
  m.skipped_steps = e->skipped_steps;
  m.mp_size = e->mp_size;
  m.mp_rank = e->mp_rank;
  m.client_state_bytes = -1;
  zinc_loss_scaler_state(&e->scaler, &m.scaler_scale, &m.scaler_iter, &m.scaler_last_overflow,
                         &m.scaler_hysteresis);
  m.config_json = zinc_settings_to_json(&e->cfg);
  int arrays[3];
  m.nsections = state_arrays(e, arrays);
  for (int k = 0; k < m.nsections; k++)
    m.sections[k] = (char *)section_names[arrays[k]];
  m.optimizer = (char *)zinc_opt_kind_str(e->optim.kind);
  m.nfiles = e->dp_size;
  for (int r = 0; r < e->dp_size; r++) {
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.zshard", r);
    names[r] = zinc_strdup(name);
    m.files[r] = (zinc_manifest_file){.name = names[r], .rank = r, .elements = e->shard_numel,
                                      .bytes = file_info[INFO * r + 1],
                                      .crc32c = (uint32_t)file_info[INFO * r]};
    crcs[r] = m.files[r].crc32c;
    bytes[r] = m.files[r].bytes;
  }
  if (e->cx_ef) { /* the error-feedback files, after the shards in the checksums */
    for (int r = 0; r < e->dp_size; r++) {
      crcs[e->dp_size + 3 + r] = (uint32_t)file_info[INFO * r + 2];
      bytes[e->dp_size + 3 + r] = file_info[INFO * r + 3];
    }
    st = zinc_ckpt_ef_describe(e, crcs + e->dp_size + 3, bytes + e->dp_size + 3, &m.ef);
  }
  if (st == ZINC_OK && e->nmstate > 0) { /* the method-state files, after those */
    uint32_t *mc = crcs + 2 * e->dp_size + 3;
    int64_t *mb = bytes + 2 * e->dp_size + 3;
    for (int r = 0; r < e->dp_size; r++) {
      mc[r] = (uint32_t)file_info[INFO * r + 4];
      mb[r] = file_info[INFO * r + 5];
    }
    st = zinc_ckpt_mstate_describe(e, mc, mb, &m.ms);
  }
  m.nparams = e->nparams;
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    const zinc_param *p = e->params[i];
    zinc_manifest_param *mp = &m.params[i];
    char full[520];
    snprintf(full, sizeof full, "%s.%s", p->module->name, p->name);
    mp->name = zinc_strdup(full);
    mp->module = p->module->name;
    mp->param = p->name;
    mp->dtype = p->dtype;
    mp->ndim = p->ndim;
    memcpy(mp->shape, p->shape, sizeof p->shape);
    mp->numel = p->numel;
    mp->weight_decay = p->decay;
    piece_list l = {0};
    st = zinc_layout_for_each_piece(e, p, collect_piece, &l);
    mp->pieces = l.pieces;
    mp->npieces = l.n;
  }
  if (st == ZINC_OK && e->client_state_bytes > 0) {
    /* the trainer's blob, before the manifest that names its crc */
    char *cpath = zinc_path_join(partial, ZINC_CLIENT_STATE_NAME);
    st = cpath ? zinc_ckpt_fault_hit(fault, "write", cpath, 0)
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path of "
                            "%s/%s; free host memory and retry", partial, ZINC_CLIENT_STATE_NAME);
    if (st == ZINC_OK)
      st = zinc_fs_write_atomic(cpath, e->client_state, (size_t)e->client_state_bytes);
    free(cpath);
    m.client_state_bytes = e->client_state_bytes;
    m.client_state_crc32c = zinc_crc32c(0, e->client_state, (size_t)e->client_state_bytes);
    if (st == ZINC_OK) {
      names[nsums] = zinc_strdup(ZINC_CLIENT_STATE_NAME);
      crcs[nsums] = m.client_state_crc32c;
      bytes[nsums++] = e->client_state_bytes;
    }
  }
  if (st != ZINC_OK)
    goto out;
  json = zinc_manifest_to_json(&m);
  if (!json) {
    st = zinc_error(ZINC_ERR_NOMEM, "out of memory writing the manifest");
    goto out;
  }
  char *mpath = zinc_path_join(partial, ZINC_MANIFEST_NAME);
  st = zinc_ckpt_fault_hit(fault, "write", mpath, 0);
  if (st == ZINC_OK)
    st = zinc_fs_write_atomic(mpath, json, strlen(json));
  free(mpath);
  if (st != ZINC_OK)
    goto out;
  names[e->dp_size] = zinc_strdup(ZINC_MANIFEST_NAME);
  crcs[e->dp_size] = zinc_crc32c(0, json, strlen(json));
  bytes[e->dp_size] = (int64_t)strlen(json);
  if (extra) { /* a file beside the shards, e.g. the consolidated weights */
    char *xpath = zinc_path_join(partial, extra);
    st = xpath ? zinc_fs_crc32c(xpath, &crcs[nsums], &bytes[nsums])
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path of "
                            "%s/%s (%zu bytes); free host memory and retry", partial, extra,
                            strlen(partial) + strlen(extra) + 2);
    free(xpath);
    if (st != ZINC_OK)
      goto out;
    names[nsums++] = zinc_strdup(extra);
  }
  for (int r = 0; m.ef.present && r < e->dp_size; r++) {
    names[nsums] = zinc_strdup(m.ef.files[r].name);
    crcs[nsums] = m.ef.files[r].crc32c;
    bytes[nsums++] = m.ef.files[r].bytes;
  }
  for (int r = 0; m.ms.present && r < e->dp_size; r++) {
    names[nsums] = zinc_strdup(m.ms.files[r].name);
    crcs[nsums] = m.ms.files[r].crc32c;
    bytes[nsums++] = m.ms.files[r].bytes;
  }
  sums = zinc_checksums_format((const char *const *)names, crcs, bytes, nsums);
  char *spath = zinc_path_join(partial, ZINC_CHECKSUMS_NAME);
  st = sums && spath ? zinc_ckpt_fault_hit(fault, "write", spath, 0) : ZINC_OK;
  if (st == ZINC_OK)
    st = sums && spath ? zinc_fs_write_atomic(spath, sums, strlen(sums))
                     : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the %s "
                                  "of %d files in %s; free host memory and retry",
                                  ZINC_CHECKSUMS_NAME, nsums, partial);
  free(spath);
out:
  for (size_t r = 0; names && r < nnames; r++)
    free(names[r]);
  zinc_ckpt_ef_describe_free(&m.ef);
  zinc_manifest_mstate_free(&m.ms);
  for (int i = 0; m.params && i < e->nparams; i++) {
    free(m.params[i].name);
    free(m.params[i].pieces);
  }
  free(names);
  free(crcs);
  free(bytes);
  free(m.files);
  free(m.params);
  free(m.config_json);
  free(json);
  free(sums);
  return st;
}

static zinc_status save_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  if (e->micro_step % e->cfg.gradient_accumulation_steps != 0)
    zinc_log0(ZINC_LOG_WARN, "saving checkpoint %s/%s in the middle of an accumulation "
              "window: the window's gradients are not saved", dir, tag);
  double t0 = zinc_now();
  char partial_name[256];
  snprintf(partial_name, sizeof partial_name, ".%s.partial", tag);
  char *final = zinc_path_join(dir, tag), *partial = zinc_path_join(dir, partial_name);
  char *shard = NULL;
  int64_t *info = calloc(INFO * (size_t)e->dp_size, sizeof *info);
  zinc_status st =
      final && partial && info
          ? ZINC_OK
          : zinc_error(ZINC_ERR_NOMEM, "checkpoint save %s/%s: no host memory for its paths and "
                       "the table of %d shards (%zu bytes); free host memory and retry", dir, tag,
                       e->dp_size, 2 * strlen(dir) + strlen(tag) + strlen(partial_name) + 4 +
                           INFO * (size_t)e->dp_size * sizeof *info);
  /* 1. rank 0: the directory, its lock, leftovers, an empty partial directory */
  publisher pub = {.dir = dir, .crash_at = zinc_env_int("ZINC_CKPT_CRASH_AT", 0, 0, 1 << 30)};
  zinc_ckpt_fault_init(&pub.fault);
  int lock_fd = -1;
  zinc_comm *ac = agree_comm(e);
  int owner = e->world_rank == 0; /* owns dir: lock, partial, publication */
  if (st == ZINC_OK && owner) {
    st = zinc_fs_mkdirs(dir);
    char *lock = st == ZINC_OK ? zinc_path_join(dir, ZINC_LOCK_NAME) : NULL;
    if (st == ZINC_OK && !lock)
      st = zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path under %s",
                      dir);
    if (st == ZINC_OK) {
      char who[400], host[256] = "?";
      gethostname(host, sizeof host - 1);
      snprintf(who, sizeof who, "pid %d on host %s, saving tag \"%s\"\n", (int)getpid(), host,
               tag);
      st = zinc_fs_lock(lock, who, &lock_fd);
      if (st == ZINC_ERR_INVALID)
        zinc_error_wrap(st, "checkpoint save into %s: another save into this directory is in "
                        "progress; two jobs must not save into one directory (give each its "
                        "own, or wait for the other save to end)", dir);
    }
    free(lock);
    if (st == ZINC_OK)
      st = prepare_dir(&pub, tag, final, partial);
  }
  st = zinc_engine_agree(e, ac, st);
  /* the save's identity: every per-rank file names it with its rank, so
   * that a file moved between ranks or saves is refused on load */
  zinc_rank_file_id id = {.save_id = owner ? new_save_id() : 0, .rank = (uint32_t)e->dp_rank,
                          .world = (uint32_t)e->dp_size, .mp_rank = (uint32_t)e->mp_rank,
                          .mp_size = (uint32_t)e->mp_size};
  if (st == ZINC_OK)
    st = zinc_comm_broadcast(ac, &id.save_id, 1, ZINC_DT_I64, 0);
  /* the directory this rank's part goes to (model parallelism: its own) */
  char *setdir = NULL;
  if (st == ZINC_OK) {
    char sub[32];
    snprintf(sub, sizeof sub, MP_DIR_FORMAT, e->mp_rank);
    setdir = e->mp_size > 1 ? zinc_path_join(partial, sub) : zinc_strdup(partial);
    if (!setdir)
      st = zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path under %s",
                      partial);
    if (st == ZINC_OK && e->mp_size > 1 && e->dp_rank == 0 && mkdir(setdir, 0755) != 0)
      st = zinc_fs_error("create directory", setdir, -1, errno);
    if (e->mp_size > 1)
      st = zinc_engine_agree(e, ac, st);
  }
  /* 2. every rank writes and fsyncs its shard */
  if (st == ZINC_OK) {
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.zshard", e->dp_rank);
    shard = zinc_path_join(setdir, name);
    uint32_t crc = 0;
    int64_t bytes = 0;
    st = shard ? write_shard(e, shard, &id, &pub.fault, &crc, &bytes)
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the shard path "
                            "of rank %d (%zu bytes); free host memory and retry", e->dp_rank,
                            strlen(setdir) + strlen(name) + 2);
    /* the error-feedback residuals beside it */
    uint32_t ef_crc = 0;
    int64_t ef_bytes = 0;
    if (st == ZINC_OK && e->cx_ef) {
      snprintf(name, sizeof name, ZINC_EF_FILE_FORMAT, e->dp_rank);
      char *efpath = zinc_path_join(setdir, name);
      st = efpath ? zinc_ckpt_ef_write(e, efpath, &id, &pub.fault, &ef_crc, &ef_bytes)
                  : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path "
                               "of %s/%s; free host memory and retry", setdir, name);
      free(efpath);
    }
    /* the compression methods' state beside it */
    uint32_t ms_crc = 0;
    int64_t ms_bytes = 0;
    if (st == ZINC_OK && e->nmstate > 0) {
      snprintf(name, sizeof name, ZINC_MSTATE_FILE_FORMAT, e->dp_rank);
      char *mspath = zinc_path_join(setdir, name);
      st = mspath ? zinc_ckpt_mstate_write(e, mspath, &id, &pub.fault, &ms_crc, &ms_bytes)
                  : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path "
                               "of %s/%s; free host memory and retry", setdir, name);
      free(mspath);
    }
    int64_t mine[INFO] = {crc, bytes, ef_crc, ef_bytes, ms_crc, ms_bytes};
    st = zinc_engine_agree(e, ac, st);
    if (st == ZINC_OK)
      st = zinc_comm_allgather(e->dp_host, mine, info, INFO, ZINC_DT_I64);
  }
  /* 3. consolidated 16-bit weights when asked (collective) */
  const char *extra = e->cfg.stage3_gather_16bit_weights_on_model_save ? "model.safetensors" : NULL;
  if (st == ZINC_OK && extra) {
    char *xpath = zinc_path_join(setdir, extra);
    st = xpath ? zinc_export_safetensors(e, xpath, -1)
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path of "
                            "%s/%s (%zu bytes); free host memory and retry", setdir, extra,
                            strlen(setdir) + strlen(extra) + 2);
    free(xpath);
    if (e->mp_size > 1)
      st = zinc_engine_agree(e, ac, st);
  }
  /* 4. data-parallel rank 0 of each part: manifest, checksums; then the
   * owner: into place, latest */
  if (st == ZINC_OK && e->dp_rank == 0) {
    if (owner)
      crash_point(&pub);
    st = write_manifest(e, setdir, tag, id.save_id, info, extra, &pub.fault);
    if (st == ZINC_OK)
      st = zinc_fs_fsync(setdir, 1);
  }
  if (e->mp_size > 1) { /* every part complete before the whole is published */
    st = zinc_engine_agree(e, ac, st);
    if (st == ZINC_OK && owner)
      st = zinc_fs_fsync(partial, 1);
  }
  if (st == ZINC_OK && owner) {
    crash_point(&pub);
    st = publish(&pub, tag, final, partial);
  }
  if (st != ZINC_OK && e->dp_rank == 0)
    zinc_error_wrap(st, "saving checkpoint %s", final);
  st = zinc_engine_agree(e, ac, st);
  if (st != ZINC_OK && pub.made_partial)
    zinc_fs_remove_tree(partial); /* ours, and the lock is still held */
  zinc_fs_unlock(lock_fd);
  if (st == ZINC_OK) {
    int64_t total = 0;
    for (int r = 0; r < e->dp_size; r++)
      total += info[INFO * r + 1] + info[INFO * r + 3] + info[INFO * r + 5];
    zinc_log0(ZINC_LOG_INFO, "saved checkpoint %s: %d shards%s, %.1f MiB%s, step %lld, "
              "%.2f s", final, e->dp_size, e->mp_size > 1 ? " per model-parallel rank" : "",
              (double)total / (1 << 20), e->mp_size > 1 ? " (model-parallel rank 0)" : "",
              (long long)e->step, zinc_now() - t0);
  }
  free(setdir);
  free(final);
  free(partial);
  free(shard);
  free(info);
  return st;
}

zinc_status zinc_save_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  ZINC_CHECK(check_call(e, dir, tag, "zinc_save_checkpoint", 1));
  if (e->dga) /* delayed averaging: one model to save (engine/dga.c) */
    ZINC_CHECK(zinc_dga_sync(e, 1));
  /* peers busy writing are waited for up to zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_save_checkpoint"));
  return zinc_ckpt_wait_end(e, &w, save_checkpoint(e, dir, tag));
}

/* ---------------------------------------------------------------- load */

static int shapes_equal(const zinc_param *p, const zinc_manifest_param *mp) {
  if (p->ndim != mp->ndim)
    return 0;
  for (int d = 0; d < p->ndim; d++)
    if (p->shape[d] != mp->shape[d])
      return 0;
  return 1;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (len < n)
    snprintf(buf + len, n - len, "]");
}

/* Match the manifest's parameters to the registered ones; map[i] is the
 * manifest index of engine parameter i. */
static zinc_status match_model(zinc_engine *e, const zinc_ckpt_dir *d, int *map,
                               int weights_only) {
  const zinc_manifest *m = d->manifest;
  /* the optimizer state is only meaningful to the optimizer that wrote it
   * (a weights-only load reads section 0, the master, which every
   * optimizer saves first). The same optimizer may keep other slots than
   * the save's (DGC's momentum correction takes SGD's momentum over at 2+
   * data-parallel ranks, not at 1): load_sections matches them by name. */
  const char *ours = zinc_opt_kind_str(e->optim.kind);
  int arrays[3], narrays = state_arrays(e, arrays);
  if (m->nsections < 1 || strcmp(m->sections[0], section_names[0]) != 0)
    return zinc_error(ZINC_ERR_CORRUPT, "checkpoint %s: its first section is \"%s\", not %s",
                      d->path, m->nsections > 0 ? m->sections[0] : "(none)", section_names[0]);
  if (!weights_only && strcmp(m->optimizer, ours) != 0)
    return zinc_error(ZINC_ERR_INVALID, "checkpoint %s holds the state of optimizer \"%s\" "
                      "(%d state sections) and this engine runs \"%s\" (%d): switching "
                      "optimizer type on load is not supported; load it with optimizer.type "
                      "\"%s\", or start the new optimizer from the weights (zinc-ckpt exports "
                      "them as safetensors)", d->path, m->optimizer, m->nsections, ours, narrays,
                      m->optimizer);
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    char full[520];
    snprintf(full, sizeof full, "%s.%s", p->module->name, p->name);
    map[i] = -1;
    for (int k = 0; k < m->nparams && map[i] < 0; k++)
      if (!strcmp(m->params[k].name, full))
        map[i] = k;
    if (map[i] < 0)
      return zinc_error(ZINC_ERR_INVALID, "checkpoint %s has no parameter \"%s\" (a checkpoint "
                        "of another model?)", d->path, full);
    const zinc_manifest_param *mp = &m->params[map[i]];
    if (!shapes_equal(p, mp)) {
      char a[128], b[128];
      shape_text(a, sizeof a, mp->ndim, mp->shape);
      shape_text(b, sizeof b, p->ndim, p->shape);
      return zinc_error(ZINC_ERR_INVALID, "checkpoint %s: parameter \"%s\" has shape %s there "
                        "and %s in this model", d->path, full, a, b);
    }
    if (mp->dtype != p->dtype)
      return zinc_error(ZINC_ERR_INVALID, "checkpoint %s: parameter \"%s\" is %s there and %s "
                        "in this model", d->path, full, zinc_dtype_name(mp->dtype),
                        zinc_dtype_name(p->dtype));
  }
  if (m->nparams != e->nparams) {
    for (int k = 0; k < m->nparams; k++) {
      int used = 0;
      for (int i = 0; i < e->nparams && !used; i++)
        used = map[i] == k;
      if (!used)
        return zinc_error(ZINC_ERR_INVALID, "checkpoint %s has parameter \"%s\" that this model "
                          "does not register", d->path, m->params[k].name);
    }
  }
  return ZINC_OK;
}

typedef struct {
  const zinc_ckpt_dir *dir;
  const zinc_manifest_param *mp;
  zinc_shard_reader **readers;   /* per manifest file, opened on demand */
  float *staging;                /* STAGING_ELEMS host f32 */
  float *zeros;                  /* STAGING_ELEMS zeros for the arrays no section fills */
  int section_of[3];             /* per state array (state_arrays order): the saved
                                    section read into it, -1: zeros */
} load_ctx;

/* Which saved section fills each state array: the one of its name; none
 * (zeros) for the moments of a weights-only load and for a slot the save
 * did not keep. Returns whether every array has its section and every
 * saved section is read (else rank 0 says which start at zero). */
static int load_sections(const zinc_engine *e, const zinc_ckpt_dir *d, int weights_only,
                         load_ctx *c) {
  const zinc_manifest *m = d->manifest;
  int arrays[3], narrays = state_arrays(e, arrays), all = m->nsections == narrays;
  char fresh[96] = "";
  for (int k = 0; k < narrays; k++) {
    c->section_of[k] = -1;
    for (int j = 0; !(weights_only && k > 0) && j < m->nsections; j++)
      if (!strcmp(m->sections[j], section_names[arrays[k]]))
        c->section_of[k] = j;
    if (c->section_of[k] < 0 && !weights_only) {
      size_t len = strlen(fresh);
      snprintf(fresh + len, sizeof fresh - len, "%s%s", len ? ", " : "",
               section_names[arrays[k]]);
      all = 0;
    }
  }
  if (!all && !weights_only)
    zinc_log0(ZINC_LOG_INFO, "checkpoint %s: optimizer \"%s\" saved %d state sections and "
              "keeps %d now (a method such as DGC's momentum correction takes a slot over at "
              "some world sizes): at zero now: %s; a saved section this engine does not "
              "keep is not read", d->path, m->optimizer, m->nsections, narrays,
              fresh[0] ? fresh : "none");
  for (int k = 0; k < narrays; k++)
    if (c->section_of[k] < 0)
      return 0;
  return 1;
}

static zinc_status reader_for(load_ctx *c, int file, zinc_shard_reader **out) {
  if (!c->readers[file]) {
    char *p = zinc_path_join(c->dir->path, c->dir->manifest->files[file].name);
    if (!p)
      return zinc_error(ZINC_ERR_NOMEM, "checkpoint load: no host memory for the path of "
                        "%s/%s (%zu bytes); free host memory and retry", c->dir->path,
                        c->dir->manifest->files[file].name,
                        strlen(c->dir->path) + strlen(c->dir->manifest->files[file].name) + 2);
    zinc_status st = zinc_shard_reader_open(p, &c->readers[file]);
    free(p);
    ZINC_CHECK(st);
  }
  *out = c->readers[file];
  return ZINC_OK;
}

/* Fill the destination of one owned piece from the saved pieces overlapping
 * [param_off, param_off + len) of the parameter. */
static zinc_status load_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                              int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  load_ctx *c = vctx;
  if (e->cfg.stage != 0 && r != e->dp_rank)
    return ZINC_OK;
  const zinc_manifest_param *mp = c->mp;
  /* pieces are sorted by param_offset: find the first overlapping one */
  int lo = 0, hi = mp->npieces - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (mp->pieces[mid].param_offset <= param_off)
      lo = mid;
    else
      hi = mid - 1;
  }
  int64_t dst0 = zinc_layout_opt_offset(e, u, r) + chunk_off;
  for (int k = lo; k < mp->npieces && mp->pieces[k].param_offset < param_off + len; k++) {
    const zinc_manifest_piece *pc = &mp->pieces[k];
    int64_t a = pc->param_offset > param_off ? pc->param_offset : param_off;
    int64_t b = pc->param_offset + pc->length < param_off + len ? pc->param_offset + pc->length
                                                                : param_off + len;
    zinc_shard_reader *rd = NULL;
    ZINC_CHECK(reader_for(c, pc->file, &rd));
    for (int64_t x = a; x < b; x += STAGING_ELEMS) {
      int64_t n = b - x < STAGING_ELEMS ? b - x : STAGING_ELEMS;
      int arrays[3], narrays = state_arrays(e, arrays);
      for (int a_i = 0; a_i < narrays; a_i++) {
        if (c->section_of[a_i] < 0) { /* fresh moments (load_sections) */
          ZINC_CHECK(zinc_opt_write(e, arrays[a_i], dst0 + (x - param_off), n, c->zeros));
          continue;
        }
        ZINC_CHECK(zinc_shard_reader_read(rd, c->section_of[a_i],
                                          (uint64_t)(pc->file_offset + (x - pc->param_offset)),
                                          c->staging, (size_t)n));
        ZINC_CHECK(zinc_opt_write(e, arrays[a_i], dst0 + (x - param_off), n, c->staging));
      }
    }
  }
  return ZINC_OK;
}

/* Collective: the ranks read the same checkpoint. Each rank resolved the
 * tag (or latest) and read the manifest on its own, from its own view of
 * the filesystem (node-local disks, a stale NFS cache); every rank's tag,
 * step and manifest crc32c are gathered and compared, so that ranks that
 * read different saves all refuse, naming each rank and what it read,
 * instead of training on a mixed state. */
static zinc_status agree_on_view(zinc_engine *e, const char *dir, const zinc_ckpt_dir *d,
                                 zinc_comm *comm, int size, int with_crc) {
  enum { VIEW = 256 };
  char mine[VIEW] = {0};
  if (with_crc)
    snprintf(mine, sizeof mine, "tag \"%s\" step %lld manifest crc32c %08x", d->manifest->tag,
             (long long)d->manifest->step, d->manifest_crc);
  else /* the model-parallel parts: each its own manifest, one tag and step */
    snprintf(mine, sizeof mine, "tag \"%s\" step %lld", d->manifest->tag,
             (long long)d->manifest->step);
  char *all = calloc((size_t)size, VIEW);
  zinc_status st = all ? ZINC_OK
                       : zinc_error(ZINC_ERR_NOMEM, "checkpoint load %s: no host memory to "
                                    "compare the ranks' views (%zu bytes); free host memory",
                                    dir, (size_t)size * VIEW);
  ZINC_CHECK(zinc_engine_agree(e, agree_comm(e), st));
  st = zinc_comm_allgather(comm, mine, all, VIEW, ZINC_DT_U8);
  if (st != ZINC_OK) {
    free(all);
    return st;
  }
  int differ = 0;
  for (int r = 1; r < size; r++)
    differ |= memcmp(all, all + (size_t)r * VIEW, VIEW) != 0;
  if (differ) {
    char msg[2048];
    size_t len = (size_t)snprintf(msg, sizeof msg, "rank 0 read %s", all);
    for (int r = 1; r < size && len < sizeof msg; r++)
      if (memcmp(all, all + (size_t)r * VIEW, VIEW) != 0)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "; rank %d read %s", r,
                                all + (size_t)r * VIEW);
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint load %s: the ranks read different "
                    "checkpoints (%s): every rank must see the same directory and latest "
                    "(a shared filesystem with coherent caches, or pass the tag explicitly "
                    "and the same on every rank)", dir, msg);
  }
  free(all);
  return st;
}

/* The trainer's blob of checkpoint d (*out NULL, *bytes 0 when it has
 * none), checked against the manifest's size and crc32c. */
static zinc_status read_client_state(const zinc_ckpt_dir *d, void **out, int64_t *bytes) {
  *out = NULL;
  *bytes = 0;
  const zinc_manifest *m = d->manifest;
  if (m->client_state_bytes < 0)
    return ZINC_OK;
  char *path = zinc_path_join(d->path, ZINC_CLIENT_STATE_NAME), *data = NULL;
  size_t len = 0;
  zinc_status st = path ? zinc_fs_read_bounded(path, (size_t)m->client_state_bytes + 1, &data,
                                               &len)
                        : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: no host memory for the "
                                     "path of %s/%s", d->path, ZINC_CLIENT_STATE_NAME);
  if (st == ZINC_OK && ((int64_t)len != m->client_state_bytes ||
                        zinc_crc32c(0, data, len) != m->client_state_crc32c))
    st = zinc_error(ZINC_ERR_CORRUPT, "checkpoint %s: %s holds %zu bytes with crc32c %08x; the "
                    "manifest says %lld bytes with crc32c %08x (damaged or replaced)", d->path,
                    ZINC_CLIENT_STATE_NAME, len, len ? zinc_crc32c(0, data, len) : 0u,
                    (long long)m->client_state_bytes, m->client_state_crc32c);
  free(path);
  if (st != ZINC_OK) {
    free(data);
    return st;
  }
  *out = data;
  *bytes = (int64_t)len;
  return ZINC_OK;
}

zinc_status zinc_checkpoint_set_client_state(zinc_engine *e, const void *data, size_t bytes) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "zinc_checkpoint_set_client_state: engine is NULL");
  if (bytes && !data)
    return zinc_error(ZINC_ERR_INVALID, "zinc_checkpoint_set_client_state: data is NULL for "
                      "%zu bytes", bytes);
  void *copy = NULL;
  if (bytes) {
    copy = malloc(bytes);
    if (!copy)
      return zinc_error(ZINC_ERR_NOMEM, "zinc_checkpoint_set_client_state: no host memory for "
                        "a copy of %zu bytes", bytes);
    memcpy(copy, data, bytes);
  }
  free(e->client_state);
  e->client_state = copy;
  e->client_state_bytes = (int64_t)bytes;
  return ZINC_OK;
}

zinc_status zinc_checkpoint_client_state(const zinc_engine *e, const void **data, size_t *bytes) {
  if (!e || !data || !bytes)
    return zinc_error(ZINC_ERR_INVALID, "zinc_checkpoint_client_state: %s is NULL",
                      !e ? "the engine" : !data ? "data" : "bytes");
  *data = e->client_state_bytes ? e->client_state : NULL;
  *bytes = (size_t)e->client_state_bytes;
  return ZINC_OK;
}

zinc_status zinc_load_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  return zinc_load_checkpoint_ex(e, dir, tag, 0);
}

static zinc_status load_checkpoint(zinc_engine *e, const char *dir, const char *tag,
                                   int weights_only) {
  double t0 = zinc_now();
  void *client = NULL;
  int64_t client_bytes = 0;
  zinc_ckpt_dir *d = NULL;
  int *map = calloc((size_t)e->nparams + 1, sizeof *map);
  zinc_comm *ac = agree_comm(e);
  zinc_status st = map ? open_for_engine(e, dir, tag, &d)
                       : zinc_error(ZINC_ERR_NOMEM, "checkpoint load %s: no host memory for the "
                                    "map of %d parameters (%zu bytes); free host memory and "
                                    "retry", dir, e->nparams,
                                    ((size_t)e->nparams + 1) * sizeof *map);
  /* 1. every rank checks the manifest and the model */
  if (st == ZINC_OK)
    st = match_model(e, d, map, weights_only);
  if (st == ZINC_OK)
    st = read_client_state(d, &client, &client_bytes);
  st = zinc_engine_agree(e, ac, st);
  if (st == ZINC_OK)
    st = agree_on_view(e, dir, d, e->dp_host, e->dp_size, 1);
  if (e->mp_size > 1) {
    st = zinc_engine_agree(e, ac, st);
    if (st == ZINC_OK)
      st = agree_on_view(e, dir, d, e->world, e->world_size, 0);
  }
  /* 2. the shards' crcs, divided among the ranks (and the error-feedback
   * files when they will be read) */
  zinc_ef_load_mode ef_mode = st == ZINC_OK ? zinc_ckpt_ef_mode(e, d, map, weights_only)
                                            : ZINC_EF_LOAD_NONE;
  char ms_why[256];
  zinc_mstate_load_mode ms_mode = st == ZINC_OK
                                      ? zinc_ckpt_mstate_mode(e, d, weights_only, ms_why,
                                                              sizeof ms_why)
                                      : ZINC_MSTATE_LOAD_NONE;
  if (st == ZINC_OK) {
    for (int f = e->dp_rank; f < d->manifest->nfiles && st == ZINC_OK; f += e->dp_size)
      st = zinc_ckpt_dir_verify_file(d, f);
    int ef_read = ef_mode == ZINC_EF_LOAD_EXACT || ef_mode == ZINC_EF_LOAD_RESHARD;
    for (int f = e->dp_rank; ef_read && f < d->manifest->ef.dp_size && st == ZINC_OK;
         f += e->dp_size)
      st = zinc_ckpt_dir_verify_ef(d, f);
    if (st == ZINC_OK)
      st = zinc_ckpt_mstate_verify(e, d, ms_mode);
    st = zinc_engine_agree(e, ac, st);
  }
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "loading checkpoint from %s (nothing was changed)", dir);
    zinc_ckpt_dir_close(d);
    free(map);
    free(client);
    return st;
  }
  /* 3. read what this rank owns under the current layout */
  load_ctx c = {.dir = d};
  c.readers = calloc((size_t)d->manifest->nfiles, sizeof *c.readers);
  st = c.readers ? zinc_aligned_alloc((void **)&c.staging, 64, STAGING_ELEMS * 4, "load staging")
                 : zinc_error(ZINC_ERR_NOMEM, "checkpoint load %s: no host memory for the "
                              "readers of %d shard files (%zu bytes); free host memory and "
                              "retry", dir, d->manifest->nfiles,
                              (size_t)d->manifest->nfiles * sizeof *c.readers);
  if (st == ZINC_OK && !load_sections(e, d, weights_only, &c))
    st = zinc_calloc((void **)&c.zeros, STAGING_ELEMS, 4, "load zeros");
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    c.mp = &d->manifest->params[map[i]];
    st = zinc_layout_for_each_piece(e, e->params[i], load_piece, &c);
  }
  if (st == ZINC_OK)
    st = zinc_ckpt_ef_load(e, d, map, ef_mode);
  if (st == ZINC_OK)
    st = zinc_ckpt_mstate_load(e, d, ms_mode, ms_why);
  /* the reads are local; agree on them before the parameter gathers */
  st = zinc_engine_agree(e, ac, st);
  if (st == ZINC_OK)
    st = zinc_params_from_master(e);
  if (e->mp_size > 1)
    st = zinc_engine_agree(e, ac, st);
  if (st == ZINC_OK) {
    const zinc_manifest *m = d->manifest;
    int64_t gas = e->cfg.gradient_accumulation_steps;
    if (!weights_only) {
      e->step = m->step;
      e->micro_step = m->micro_step / gas * gas;
      e->skipped_steps = m->skipped_steps;
      zinc_loss_scaler_restore(&e->scaler, m->scaler_scale, m->scaler_iter,
                               m->scaler_last_overflow, m->scaler_hysteresis);
    }
    free(e->client_state);
    e->client_state = client;
    e->client_state_bytes = client_bytes;
    client = NULL;
    for (int mi = 0; mi < e->nmodules; mi++) {
      e->modules[mi]->grad_window = e->modules[mi]->acc_window = -1;
      e->modules[mi]->reduced_window = -1;
    }
    e->mb_ended = 0;
    zinc_log0(ZINC_LOG_INFO, "loaded %scheckpoint %s (saved at %d ranks, stage %d) into %d "
              "ranks, stage %d: step %lld, %.2f s", weights_only ? "the weights of " : "",
              d->path, m->dp_size, m->stage, e->dp_size, e->cfg.stage, (long long)e->step,
              zinc_now() - t0);
  } else {
    zinc_error_wrap(st, "loading checkpoint from %s after its checks passed; the engine's "
                    "state is partial and it stops", dir);
    zinc_engine_fail(e, st);
  }
  for (int f = 0; c.readers && f < d->manifest->nfiles; f++)
    zinc_shard_reader_close(c.readers[f]);
  free(c.readers);
  free(c.staging);
  free(c.zeros);
  free(client);
  zinc_ckpt_dir_close(d);
  free(map);
  return st;
}

zinc_status zinc_load_checkpoint_ex(zinc_engine *e, const char *dir, const char *tag,
                                    unsigned flags) {
  ZINC_CHECK(check_call(e, dir, tag, "zinc_load_checkpoint", 0));
  if (flags & ~ZINC_LOAD_WEIGHTS_ONLY)
    return zinc_error(ZINC_ERR_INVALID, "zinc_load_checkpoint_ex: flags 0x%x has bits other "
                      "than ZINC_LOAD_WEIGHTS_ONLY", flags);
  if (e->dga) /* delayed averaging: no all-reduce may write into what is loaded */
    ZINC_CHECK(zinc_dga_sync(e, 0));
  /* peers busy reading and checking files are waited for up to
   * zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_load_checkpoint"));
  return zinc_ckpt_wait_end(e, &w, load_checkpoint(e, dir, tag,
                                                   (flags & ZINC_LOAD_WEIGHTS_ONLY) != 0));
}
