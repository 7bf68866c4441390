/*
 * save.c — zinc_save_checkpoint: each data-parallel rank streams its
 * chunks of the fp32 master and moments into its shard (and writes its
 * error-feedback residuals and method state beside it), data-parallel rank
 * 0 of each part writes the manifest and the checksums, and world rank 0
 * publishes the whole (publish.c). What is saved and why a crash leaves a
 * loadable checkpoint: checkpoint.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/fs.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ef.h"
#include "engine/checkpoint/mstate_io.h"
#include "engine/checkpoint/format.h"
#include "engine/checkpoint/wait_bound.h"
#include "engine/engine.h"
#include "engine/pipe.h"
#include "engine/failure.h"
#include "engine/place/place.h"
#include "engine/reduce/methods.h"

/* per rank, gathered after the shards are written: shard crc and bytes,
 * error-feedback file crc and bytes, method-state file crc and bytes */
#define INFO 6

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
  unsigned bf16 = 0; /* saved in the dtype the run keeps them in */
  for (int k = 0; k < narrays; k++)
    if (zinc_array_dtype(e, arrays[k]) == ZINC_BF16)
      bf16 |= 1u << k;
  st = zinc_shard_writer_open(path, id, narrays, bf16, (uint64_t)e->shard_numel, fault, &w);
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
  m.pp_size = zinc_pp_size(e);
  m.pp_stage = zinc_pp_rank(e);
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
  if (e->rd->cx_ef) { /* the error-feedback files, after the shards in the checksums */
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
  zinc_ckpt_publisher pub = {.dir = dir,
                             .crash_at = zinc_env_int("ZINC_CKPT_CRASH_AT", 0, 0, 1 << 30)};
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
      st = zinc_ckpt_prepare_dir(&pub, tag, final, partial);
  }
  st = zinc_engine_agree(e, ac, st);
  /* the save's identity: every per-rank file names it with its rank, so
   * that a file moved between ranks or saves is refused on load */
  zinc_rank_file_id id = {.save_id = owner ? new_save_id() : 0, .rank = (uint32_t)e->dp_rank,
                          .world = (uint32_t)e->dp_size, .mp_rank = (uint32_t)e->mp_rank,
                          .mp_size = (uint32_t)e->mp_size};
  if (st == ZINC_OK)
    st = zinc_comm_broadcast(ac, &id.save_id, 1, ZINC_DT_I64, 0);
  /* the directory this rank's part goes to (model and pipeline
   * parallelism: its own) */
  char *setdir = NULL;
  int parts = ckpt_in_parts(e);
  if (st == ZINC_OK) {
    char sub[64];
    ckpt_part_name(e, sub, sizeof sub);
    setdir = parts ? zinc_path_join(partial, sub) : zinc_strdup(partial);
    if (!setdir)
      st = zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path under %s",
                      partial);
    if (st == ZINC_OK && parts && e->dp_rank == 0)
      st = zinc_fs_mkdirs(setdir);
    if (parts)
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
    if (st == ZINC_OK && e->rd->cx_ef) {
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
    if (parts)
      st = zinc_engine_agree(e, ac, st);
  }
  /* 4. data-parallel rank 0 of each part: manifest, checksums; then the
   * owner: into place, latest */
  if (st == ZINC_OK && e->dp_rank == 0) {
    if (owner)
      zinc_ckpt_crash_point(&pub);
    st = write_manifest(e, setdir, tag, id.save_id, info, extra, &pub.fault);
    if (st == ZINC_OK)
      st = zinc_fs_fsync(setdir, 1);
    if (st == ZINC_OK && zinc_pp_size(e) > 1 && e->mp_size > 1) { /* its stage's entry */
      char stage_name[32];
      snprintf(stage_name, sizeof stage_name, PP_DIR_FORMAT, zinc_pp_rank(e));
      char *stage_dir = zinc_path_join(partial, stage_name);
      st = stage_dir ? zinc_fs_fsync(stage_dir, 1)
                     : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for a path");
      free(stage_dir);
    }
  }
  if (parts) { /* every part complete before the whole is published */
    st = zinc_engine_agree(e, ac, st);
    if (st == ZINC_OK && owner)
      st = zinc_fs_fsync(partial, 1);
  }
  if (st == ZINC_OK && owner) {
    zinc_ckpt_crash_point(&pub);
    st = zinc_ckpt_publish(&pub, tag, final, partial);
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
              "%.2f s", final, e->dp_size, parts ? " per part" : "",
              (double)total / (1 << 20), parts ? " (the first part)" : "",
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
  /* the method: nothing in flight (delayed averaging: one model to save,
   * no all-reduce writing into what is loaded) */
  ZINC_CHECK(zinc_reduce_sync(e, 1));
  /* peers busy writing are waited for up to zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_save_checkpoint"));
  return zinc_ckpt_wait_end(e, &w, save_checkpoint(e, dir, tag));
}
