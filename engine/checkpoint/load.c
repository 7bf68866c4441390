/*
 * load.c — zinc_load_checkpoint(_ex): every rank opens its checkpoint (its
 * mp_rank_NN part with model parallelism) and checks it all — manifest,
 * model, the ranks' views of it, the shards' crcs divided among the ranks
 * — changing nothing unless every rank passes; then each rank reads, for
 * every chunk it owns under the current layout, the overlapping pieces of
 * the saved layout (N ranks into M, any stage into any stage). Also the
 * trainer's client-state blob, set for the next save and read after a
 * load. What is saved: checkpoint.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
#include "engine/reduce/reduce.h"
#include "engine/step.h"

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

/* The pipeline size a checkpoint under top was saved with: 1 when it has
 * no pp_stage_00 part, else what that part's manifest says (-1: more than
 * one, unreadable). */
static int saved_pipeline(const char *top) {
  char pp0[32], mp0[32];
  snprintf(pp0, sizeof pp0, PP_DIR_FORMAT, 0);
  snprintf(mp0, sizeof mp0, MP_DIR_FORMAT, 0);
  char *stage0 = zinc_path_join(top, pp0);
  struct stat sb;
  if (!stage0 || lstat(stage0, &sb) != 0) {
    free(stage0);
    return 1;
  }
  zinc_ckpt_dir *d = NULL;
  int saved = -1;
  if (zinc_ckpt_dir_open(top, pp0, &d) == ZINC_OK || zinc_ckpt_dir_open(stage0, mp0, &d) == ZINC_OK)
    saved = d->manifest->pp_size;
  zinc_ckpt_dir_close(d);
  free(stage0);
  return saved;
}

/* Open this rank's checkpoint: dir/tag itself, or its part (mp_rank_NN,
 * pp_stage_SS, pp_stage_SS/mp_rank_NN); a checkpoint saved at another
 * model- or pipeline-parallel size is refused naming both. */
static zinc_status open_for_engine(const zinc_engine *e, const char *dir, const char *tag,
                                   zinc_ckpt_dir **out) {
  *out = NULL;
  char *name = NULL;
  ZINC_CHECK(resolve_name(dir, tag, &name));
  int pp = zinc_pp_size(e);
  char *top = zinc_path_join(dir, name), sub[32], mp0[32], stage[32];
  snprintf(sub, sizeof sub, MP_DIR_FORMAT, e->mp_rank);
  snprintf(mp0, sizeof mp0, MP_DIR_FORMAT, 0);
  snprintf(stage, sizeof stage, PP_DIR_FORMAT, zinc_pp_rank(e));
  /* where this rank's part lives: top, or its stage's directory */
  char *base = top && pp > 1 ? zinc_path_join(top, stage) : top ? zinc_strdup(top) : NULL;
  char *probe = base ? zinc_path_join(base, e->mp_size > 1 ? ZINC_MANIFEST_NAME : mp0) : NULL;
  zinc_status st = probe ? ZINC_OK : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: out of host "
                                                "memory");
  int saved_pp = st == ZINC_OK ? saved_pipeline(top) : 1;
  struct stat sb;
  if (st == ZINC_OK && saved_pp != pp) {
    char n[32] = "more than 1";
    if (saved_pp > 0)
      snprintf(n, sizeof n, "%d", saved_pp);
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s was saved with pipeline_parallel_size %s "
                    "and this engine runs pipeline_parallel_size %d: load it at the pipeline "
                    "size it was saved with (loading at another pipeline size is not "
                    "implemented yet)", top, n, pp);
  } else if (st == ZINC_OK && e->mp_size > 1 && lstat(probe, &sb) == 0)
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s was saved with model_parallel_size 1 and "
                    "this engine runs model_parallel_size %d: load it at the size it was "
                    "saved with", top, e->mp_size);
  else if (st == ZINC_OK && e->mp_size == 1 && lstat(probe, &sb) == 0) {
    zinc_ckpt_dir *d0 = NULL;
    int saved = zinc_ckpt_dir_open(base, mp0, &d0) == ZINC_OK ? d0->manifest->mp_size : -1;
    zinc_ckpt_dir_close(d0);
    char n[32] = "more than 1";
    if (saved > 0)
      snprintf(n, sizeof n, "%d", saved);
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s was saved with model_parallel_size %s "
                    "(one part per model-parallel rank) and this engine runs "
                    "model_parallel_size 1: load it at the size it was saved with", top, n);
  }
  if (st == ZINC_OK) {
    if (e->mp_size > 1)
      st = zinc_ckpt_dir_open(base, sub, out);
    else if (pp > 1)
      st = zinc_ckpt_dir_open(top, stage, out);
    else
      st = zinc_ckpt_dir_open(dir, tag, out);
  }
  if (st == ZINC_OK && ((*out)->manifest->mp_size != e->mp_size ||
                        (*out)->manifest->mp_rank != e->mp_rank)) {
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s holds model-parallel rank %d of "
                    "model_parallel_size %d; this rank is model-parallel rank %d of %d: load it "
                    "at the size it was saved with", (*out)->path, (*out)->manifest->mp_rank,
                    (*out)->manifest->mp_size, e->mp_rank, e->mp_size);
  } else if (st == ZINC_OK && ((*out)->manifest->pp_size != pp ||
                               (*out)->manifest->pp_stage != zinc_pp_rank(e))) {
    st = zinc_error(ZINC_ERR_INVALID, "checkpoint %s holds pipeline stage %d of "
                    "pipeline_parallel_size %d; this rank is stage %d of %d: a part moved "
                    "between stages, or load it at the size it was saved with", (*out)->path,
                    (*out)->manifest->pp_stage, (*out)->manifest->pp_size, zinc_pp_rank(e), pp);
  }
  if (st != ZINC_OK) {
    zinc_ckpt_dir_close(*out);
    *out = NULL;
  }
  free(probe);
  free(base);
  free(top);
  free(name);
  return st;
}

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
  int dtypes_said;               /* the dtype conversion was said (dtype_note) */
} load_ctx;

/* Once per load, on rank 0: the arrays saved in another dtype than this
 * run keeps them in (the bf16 section's keys), and what the load does. */
static void dtype_note(zinc_engine *e, load_ctx *c, const zinc_shard_reader *rd) {
  if (c->dtypes_said)
    return;
  c->dtypes_said = 1;
  const zinc_shard_trailer *t = zinc_shard_reader_trailer(rd);
  int arrays[3], narrays = state_arrays(e, arrays);
  for (int k = 0; k < narrays; k++) {
    int s = c->section_of[k];
    if (s < 0)
      continue;
    int saved = zinc_shard_elem_bytes(t, s) == 2 ? ZINC_BF16 : ZINC_F32;
    int here = zinc_array_dtype(e, arrays[k]);
    if (saved != here)
      zinc_log0(ZINC_LOG_INFO, "checkpoint %s: %s was saved in %s and this run keeps it in "
                "%s (bf16.%s): %s", c->dir->path, section_names[arrays[k]],
                saved == ZINC_BF16 ? "bf16" : "fp32", here == ZINC_BF16 ? "bf16" : "fp32",
                arrays[k] == 0 ? "bf16_master_weights_and_grads" : "bf16_optimizer_states",
                here == ZINC_BF16 ? "rounded to nearest even as it loads"
                                  : "widened exactly as it loads");
  }
}

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
        dtype_note(e, c, rd);
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
  else /* the model- or pipeline-parallel parts: each its own manifest, one tag and step */
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
  if (ckpt_in_parts(e)) {
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
  if (ckpt_in_parts(e))
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
  /* the method: nothing in flight (delayed averaging: one model to save,
   * no all-reduce writing into what is loaded) */
  ZINC_CHECK(zinc_reduce_sync(e, 0));
  /* peers busy reading and checking files are waited for up to
   * zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_load_checkpoint"));
  return zinc_ckpt_wait_end(e, &w, load_checkpoint(e, dir, tag,
                                                   (flags & ZINC_LOAD_WEIGHTS_ONLY) != 0));
}
