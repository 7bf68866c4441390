/*
 * checkpoint.c — zinc_save_checkpoint / zinc_load_checkpoint: sharded,
 * crash-safe, loadable on any world size and stage.
 *
 * What is saved: each data-parallel rank r writes the fp32 master, exp_avg
 * and exp_avg_sq of its chunks (chunk r of every unit, in shard order —
 * at stage 0 too, where every rank holds all of them) to rank_<r>.zshard;
 * rank 0 writes the manifest (every parameter's pieces, counters, loss
 * scaler, resolved config) and the checksums file. The compute copy of the
 * parameters is not saved: it is always the master rounded to the
 * parameter's dtype, and a load rebuilds it so.
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/engine.h"

#define STAGING_ELEMS (1 << 20) /* 4 MiB of f32 between device and file */

static const char *section_names[3] = {"fp32_master", "exp_avg", "exp_avg_sq"};

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
  if (e->mp_size > 1)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "%s: checkpoints of model-parallel runs "
                      "(model_parallel_size %d) are not supported yet", what, e->mp_size);
  return ZINC_OK;
}

/* ---------------------------------------------------------------- save */

static zinc_status write_shard(zinc_engine *e, const char *path, uint32_t *crc, int64_t *bytes) {
  zinc_shard_writer *w = NULL;
  float *staging = NULL;
  zinc_status st = zinc_aligned_alloc((void **)&staging, 64, STAGING_ELEMS * 4, "save staging");
  if (st != ZINC_OK)
    return st;
  st = zinc_shard_writer_open(path, e->dp_rank, e->dp_size, 3, (uint64_t)e->shard_numel, &w);
  for (int s = 0; s < 3 && st == ZINC_OK; s++) {
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
                                  const int64_t *file_info, const char *extra) {
  zinc_manifest m = {0};
  zinc_status st = ZINC_OK;
  char **names = calloc((size_t)e->dp_size + 2, sizeof *names);
  uint32_t *crcs = calloc((size_t)e->dp_size + 2, sizeof *crcs);
  int64_t *bytes = calloc((size_t)e->dp_size + 2, sizeof *bytes);
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
  m.world_size = e->world_size;
  m.dp_size = e->dp_size;
  m.stage = e->cfg.stage;
  m.offload_optimizer = (char *)zinc_offload_device_name(e->cfg.offload_optimizer.device);
  m.step = e->step;
  m.micro_step = e->micro_step;
  m.skipped_steps = e->skipped_steps;
  zinc_loss_scaler_state(&e->scaler, &m.scaler_scale, &m.scaler_iter, &m.scaler_last_overflow,
                         &m.scaler_hysteresis);
  m.config_json = zinc_settings_to_json(&e->cfg);
  m.nsections = 3;
  for (int s = 0; s < 3; s++)
    m.sections[s] = (char *)section_names[s];
  m.nfiles = e->dp_size;
  for (int r = 0; r < e->dp_size; r++) {
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.zshard", r);
    names[r] = zinc_strdup(name);
    m.files[r] = (zinc_manifest_file){.name = names[r], .rank = r, .elements = e->shard_numel,
                                      .bytes = file_info[2 * r + 1],
                                      .crc32c = (uint32_t)file_info[2 * r]};
    crcs[r] = m.files[r].crc32c;
    bytes[r] = m.files[r].bytes;
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
  if (st != ZINC_OK)
    goto out;
  json = zinc_manifest_to_json(&m);
  if (!json) {
    st = zinc_error(ZINC_ERR_NOMEM, "out of memory writing the manifest");
    goto out;
  }
  char *mpath = zinc_path_join(partial, ZINC_MANIFEST_NAME);
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
  sums = zinc_checksums_format((const char *const *)names, crcs, bytes, nsums);
  char *spath = zinc_path_join(partial, ZINC_CHECKSUMS_NAME);
  st = sums && spath ? zinc_fs_write_atomic(spath, sums, strlen(sums))
                     : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the %s "
                                  "of %d files in %s; free host memory and retry",
                                  ZINC_CHECKSUMS_NAME, nsums, partial);
  free(spath);
out:
  for (int r = 0; names && r <= e->dp_size + 1; r++)
    free(names[r]);
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

zinc_status zinc_save_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  ZINC_CHECK(check_call(e, dir, tag, "zinc_save_checkpoint", 1));
  if (e->micro_step % e->cfg.gradient_accumulation_steps != 0)
    zinc_log0(ZINC_LOG_WARN, "saving checkpoint %s/%s in the middle of an accumulation "
              "window: the window's gradients are not saved", dir, tag);
  double t0 = zinc_now();
  char partial_name[256];
  snprintf(partial_name, sizeof partial_name, ".%s.partial", tag);
  char *final = zinc_path_join(dir, tag), *partial = zinc_path_join(dir, partial_name);
  char *shard = NULL;
  int64_t *info = calloc(2 * (size_t)e->dp_size, sizeof *info);
  zinc_status st =
      final && partial && info
          ? ZINC_OK
          : zinc_error(ZINC_ERR_NOMEM, "checkpoint save %s/%s: no host memory for its paths and "
                       "the table of %d shards (%zu bytes); free host memory and retry", dir, tag,
                       e->dp_size, 2 * strlen(dir) + strlen(tag) + strlen(partial_name) + 4 +
                           2 * (size_t)e->dp_size * sizeof *info);
  /* 1. rank 0 prepares an empty partial directory */
  if (st == ZINC_OK && e->dp_rank == 0) {
    st = zinc_fs_mkdirs(dir);
    if (st == ZINC_OK)
      st = zinc_fs_remove_tree(partial); /* a stale one from a crashed save */
    if (st == ZINC_OK && mkdir(partial, 0755) != 0)
      st = zinc_error(ZINC_ERR_IO, "create directory %s: %s", partial, strerror(errno));
  }
  st = zinc_engine_agree(e, e->dp_host, st);
  /* 2. every rank writes and fsyncs its shard */
  if (st == ZINC_OK) {
    char name[32];
    snprintf(name, sizeof name, "rank_%05d.zshard", e->dp_rank);
    shard = zinc_path_join(partial, name);
    uint32_t crc = 0;
    int64_t bytes = 0;
    st = shard ? write_shard(e, shard, &crc, &bytes)
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the shard path "
                            "of rank %d (%zu bytes); free host memory and retry", e->dp_rank,
                            strlen(partial) + strlen(name) + 2);
    int64_t mine[2] = {crc, bytes};
    st = zinc_engine_agree(e, e->dp_host, st);
    if (st == ZINC_OK)
      st = zinc_comm_allgather(e->dp_host, mine, info, 2, ZINC_DT_I64);
  }
  /* 3. consolidated 16-bit weights when asked (collective) */
  const char *extra = e->cfg.stage3_gather_16bit_weights_on_model_save ? "model.safetensors" : NULL;
  if (st == ZINC_OK && extra) {
    char *xpath = zinc_path_join(partial, extra);
    st = xpath ? zinc_export_safetensors(e, xpath, -1)
               : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path of "
                            "%s/%s (%zu bytes); free host memory and retry", partial, extra,
                            strlen(partial) + strlen(extra) + 2);
    free(xpath);
  }
  /* 4. rank 0: manifest, checksums, rename into place, latest */
  if (st == ZINC_OK && e->dp_rank == 0) {
    st = write_manifest(e, partial, tag, info, extra);
    if (st == ZINC_OK)
      st = zinc_fs_fsync(partial, 1);
    int exchanged = 0;
    if (st == ZINC_OK)
      st = zinc_fs_rename_into_place(partial, final, &exchanged);
    if (st == ZINC_OK)
      st = zinc_fs_fsync(dir, 1);
    if (st == ZINC_OK && exchanged)
      zinc_fs_remove_tree(partial); /* the previous save of this tag */
    if (st == ZINC_OK) {
      char *latest = zinc_path_join(dir, ZINC_LATEST_NAME);
      char line[256];
      snprintf(line, sizeof line, "%s\n", tag);
      st = latest ? zinc_fs_write_atomic(latest, line, strlen(line))
                  : zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the path of "
                               "%s/%s (%zu bytes); free host memory and retry", dir,
                               ZINC_LATEST_NAME, strlen(dir) + strlen(ZINC_LATEST_NAME) + 2);
      free(latest);
    }
    if (st != ZINC_OK)
      zinc_error_wrap(st, "saving checkpoint %s", final);
  }
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st != ZINC_OK && e->dp_rank == 0 && partial)
    zinc_fs_remove_tree(partial);
  if (st == ZINC_OK) {
    int64_t total = 0;
    for (int r = 0; r < e->dp_size; r++)
      total += info[2 * r + 1];
    zinc_log0(ZINC_LOG_INFO, "saved checkpoint %s: %d shards, %.1f MiB, step %lld, %.2f s",
              final, e->dp_size, (double)total / (1 << 20), (long long)e->step,
              zinc_now() - t0);
  }
  free(final);
  free(partial);
  free(shard);
  free(info);
  return st;
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
static zinc_status match_model(zinc_engine *e, const zinc_ckpt_dir *d, int *map) {
  const zinc_manifest *m = d->manifest;
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
} load_ctx;

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
      for (int s = 0; s < 3; s++) {
        ZINC_CHECK(zinc_shard_reader_read(rd, s, (uint64_t)(pc->file_offset + (x - pc->param_offset)),
                                          c->staging, (size_t)n));
        ZINC_CHECK(zinc_opt_write(e, s, dst0 + (x - param_off), n, c->staging));
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
static zinc_status agree_on_view(zinc_engine *e, const char *dir, const zinc_ckpt_dir *d) {
  enum { VIEW = 256 };
  char mine[VIEW] = {0};
  snprintf(mine, sizeof mine, "tag \"%s\" step %lld manifest crc32c %08x", d->manifest->tag,
           (long long)d->manifest->step, d->manifest_crc);
  char *all = calloc((size_t)e->dp_size, VIEW);
  zinc_status st = all ? ZINC_OK
                       : zinc_error(ZINC_ERR_NOMEM, "checkpoint load %s: no host memory to "
                                    "compare the ranks' views (%zu bytes); free host memory",
                                    dir, (size_t)e->dp_size * VIEW);
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
  st = zinc_comm_allgather(e->dp_host, mine, all, VIEW, ZINC_DT_U8);
  if (st != ZINC_OK) {
    free(all);
    return st;
  }
  int differ = 0;
  for (int r = 1; r < e->dp_size; r++)
    differ |= memcmp(all, all + (size_t)r * VIEW, VIEW) != 0;
  if (differ) {
    char msg[2048];
    size_t len = (size_t)snprintf(msg, sizeof msg, "rank 0 read %s", all);
    for (int r = 1; r < e->dp_size && len < sizeof msg; r++)
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

zinc_status zinc_load_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  ZINC_CHECK(check_call(e, dir, tag, "zinc_load_checkpoint", 0));
  double t0 = zinc_now();
  zinc_ckpt_dir *d = NULL;
  int *map = calloc((size_t)e->nparams + 1, sizeof *map);
  zinc_status st = map ? zinc_ckpt_dir_open(dir, tag, &d)
                       : zinc_error(ZINC_ERR_NOMEM, "checkpoint load %s: no host memory for the "
                                    "map of %d parameters (%zu bytes); free host memory and "
                                    "retry", dir, e->nparams,
                                    ((size_t)e->nparams + 1) * sizeof *map);
  /* 1. every rank checks the manifest and the model */
  if (st == ZINC_OK)
    st = match_model(e, d, map);
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st == ZINC_OK)
    st = agree_on_view(e, dir, d);
  /* 2. the shards' crcs, divided among the ranks */
  if (st == ZINC_OK) {
    for (int f = e->dp_rank; f < d->manifest->nfiles && st == ZINC_OK; f += e->dp_size)
      st = zinc_ckpt_dir_verify_file(d, f);
    st = zinc_engine_agree(e, e->dp_host, st);
  }
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "loading checkpoint from %s (nothing was changed)", dir);
    zinc_ckpt_dir_close(d);
    free(map);
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
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    c.mp = &d->manifest->params[map[i]];
    st = zinc_layout_for_each_piece(e, e->params[i], load_piece, &c);
  }
  /* the reads are local; agree on them before the parameter gathers */
  st = zinc_engine_agree(e, e->dp_host, st);
  if (st == ZINC_OK)
    st = zinc_params_from_master(e);
  if (st == ZINC_OK) {
    const zinc_manifest *m = d->manifest;
    int64_t gas = e->cfg.gradient_accumulation_steps;
    e->step = m->step;
    e->micro_step = m->micro_step / gas * gas;
    e->skipped_steps = m->skipped_steps;
    zinc_loss_scaler_restore(&e->scaler, m->scaler_scale, m->scaler_iter,
                             m->scaler_last_overflow, m->scaler_hysteresis);
    for (int mi = 0; mi < e->nmodules; mi++) {
      e->modules[mi]->grad_window = -1;
      e->modules[mi]->reduced_window = -1;
    }
    e->mb_ended = 0;
    zinc_log0(ZINC_LOG_INFO, "loaded checkpoint %s (saved at %d ranks, stage %d) into %d "
              "ranks, stage %d: step %lld, %.2f s", d->path, m->dp_size, m->stage, e->dp_size,
              e->cfg.stage, (long long)e->step, zinc_now() - t0);
  } else {
    zinc_error_wrap(st, "loading checkpoint from %s after its checks passed; the engine's "
                    "state is partial and it stops", dir);
    zinc_engine_fail(e, st);
  }
  for (int f = 0; c.readers && f < d->manifest->nfiles; f++)
    zinc_shard_reader_close(c.readers[f]);
  free(c.readers);
  free(c.staging);
  zinc_ckpt_dir_close(d);
  free(map);
  return st;
}
