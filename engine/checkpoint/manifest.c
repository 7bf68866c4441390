/*
 * manifest.c — checkpoint manifest <-> JSON (jansson), with the validation
 * a loader relies on: after zinc_manifest_parse succeeds, every piece lies
 * inside its file's sections and its parameter, and the pieces of each
 * parameter cover it exactly once. A damaged or hand-edited manifest is
 * rejected with the JSON path of the first problem, never half-used.
 */
#include "engine/checkpoint/manifest.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/endian.h"

/* ------------------------------------------------- error feedback */

uint32_t zinc_manifest_ef_layout_crc(const zinc_manifest_ef_unit *units, int n) {
  uint32_t crc = 0;
  for (int i = 0; i < n; i++) {
    unsigned char b[16];
    zinc_le_put_u64(b, (uint64_t)units[i].shard_offset);
    zinc_le_put_u64(b + 8, (uint64_t)units[i].chunk);
    crc = zinc_crc32c(crc, b, sizeof b);
  }
  return crc;
}

/* kernels/codec.h's INT8 layout (zinc_codec_bytes), written out so that
 * the manifest stands alone (tools, the fuzzers): a fp32 scale per block,
 * an int8 per element, rounded up to 16 bytes. */
int64_t zinc_manifest_ef_slice_bytes(const zinc_manifest_ef *ef, int ui) {
  int64_t n = ef->units[ui].chunk, nb = (n + ef->block - 1) / ef->block;
  if (ef->f32)
    return (4 * n + 15) / 16 * 16;
  return (4 * nb + n + 15) / 16 * 16;
}

int64_t zinc_manifest_ef_file_bytes(const zinc_manifest_ef *ef) {
  int64_t total = 0;
  for (int ui = 0; ui < ef->nunits; ui++)
    total += (int64_t)(ef->dp_size - 1) * zinc_manifest_ef_slice_bytes(ef, ui);
  return total;
}

int64_t zinc_manifest_rank_trailer(const zinc_manifest *m) {
  return m->save_id ? ZINC_RANK_TRAILER : 0;
}

static json_t *file_json(const zinc_manifest_file *f, int with_elements) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(f->name));
  json_object_set_new(o, "rank", json_integer(f->rank));
  if (with_elements)
    json_object_set_new(o, "elements", json_integer(f->elements));
  json_object_set_new(o, "bytes", json_integer(f->bytes));
  char crc[16];
  snprintf(crc, sizeof crc, "%08x", f->crc32c);
  json_object_set_new(o, "crc32c", json_string(crc));
  return o;
}

static json_t *ef_json(const zinc_manifest_ef *ef) {
  json_t *o = json_object();
  char crc[16];
  snprintf(crc, sizeof crc, "%08x", ef->layout_crc32c);
  json_object_set_new(o, "codec", json_string(ef->f32 ? "f32" : "int8"));
  json_object_set_new(o, "block", json_integer(ef->block));
  json_object_set_new(o, "dp_size", json_integer(ef->dp_size));
  json_object_set_new(o, "layout_crc32c", json_string(crc));
  json_t *units = json_array();
  for (int i = 0; i < ef->nunits; i++) {
    json_t *a = json_array();
    json_array_append_new(a, json_integer(ef->units[i].shard_offset));
    json_array_append_new(a, json_integer(ef->units[i].chunk));
    json_array_append_new(units, a);
  }
  json_object_set_new(o, "units", units);
  json_t *files = json_array();
  for (int i = 0; i < ef->dp_size; i++)
    json_array_append_new(files, file_json(&ef->files[i], 0));
  json_object_set_new(o, "files", files);
  return o;
}

static json_t *mstate_json(const zinc_manifest_mstate *ms) {
  json_t *o = json_object();
  json_object_set_new(o, "dp_size", json_integer(ms->dp_size));
  json_t *entries = json_array();
  for (int i = 0; i < ms->nentries; i++) {
    json_t *x = json_object();
    json_object_set_new(x, "name", json_string(ms->entries[i].name));
    json_object_set_new(x, "bytes", json_integer(ms->entries[i].bytes));
    json_array_append_new(entries, x);
  }
  json_object_set_new(o, "entries", entries);
  json_t *files = json_array();
  for (int i = 0; i < ms->dp_size; i++)
    json_array_append_new(files, file_json(&ms->files[i], 0));
  json_object_set_new(o, "files", files);
  return o;
}

void zinc_manifest_mstate_free(zinc_manifest_mstate *ms) {
  for (int i = 0; ms->entries && i < ms->nentries; i++)
    free(ms->entries[i].name);
  for (int r = 0; ms->files && r < ms->dp_size; r++)
    free(ms->files[r].name);
  free(ms->entries);
  free(ms->files);
  memset(ms, 0, sizeof *ms);
}

/* ------------------------------------------------------------- writing */

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

char *zinc_manifest_to_json(const zinc_manifest *m) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("zinc-checkpoint"));
  json_object_set_new(root, "version", json_integer(m->version));
  json_object_set_new(root, "zinc_version", str_or_null(m->zinc_version));
  json_object_set_new(root, "tag", str_or_null(m->tag));
  if (m->save_id) {
    char id[24];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)m->save_id);
    json_object_set_new(root, "save_id", json_string(id));
  }
  json_object_set_new(root, "world_size", json_integer(m->world_size));
  json_object_set_new(root, "dp_size", json_integer(m->dp_size));
  json_object_set_new(root, "stage", json_integer(m->stage));
  json_object_set_new(root, "offload_optimizer", str_or_null(m->offload_optimizer));
  json_object_set_new(root, "optimizer", str_or_null(m->optimizer));
  json_object_set_new(root, "step", json_integer(m->step));
  json_object_set_new(root, "micro_step", json_integer(m->micro_step));
  json_object_set_new(root, "skipped_steps", json_integer(m->skipped_steps));
  if (m->mp_size > 1) {
    json_object_set_new(root, "model_parallel_size", json_integer(m->mp_size));
    json_object_set_new(root, "mp_rank", json_integer(m->mp_rank));
  }
  if (m->pp_size > 1) {
    json_object_set_new(root, "pipeline_parallel_size", json_integer(m->pp_size));
    json_object_set_new(root, "pipeline_stage", json_integer(m->pp_stage));
  }
  if (m->client_state_bytes >= 0) {
    json_t *cs = json_object();
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", m->client_state_crc32c);
    json_object_set_new(cs, "file", json_string(ZINC_CLIENT_STATE_NAME));
    json_object_set_new(cs, "bytes", json_integer(m->client_state_bytes));
    json_object_set_new(cs, "crc32c", json_string(crc));
    json_object_set_new(root, "client_state", cs);
  }
  json_t *ls = json_object();
  json_object_set_new(ls, "scale", json_real(m->scaler_scale));
  json_object_set_new(ls, "iteration", json_integer(m->scaler_iter));
  json_object_set_new(ls, "last_overflow_iteration", json_integer(m->scaler_last_overflow));
  json_object_set_new(ls, "hysteresis", json_integer(m->scaler_hysteresis));
  json_object_set_new(root, "loss_scaler", ls);
  json_t *cfg = m->config_json ? json_loads(m->config_json, 0, NULL) : NULL;
  json_object_set_new(root, "config", cfg ? cfg : json_null());
  json_t *sections = json_array();
  for (int i = 0; i < m->nsections; i++)
    json_array_append_new(sections, json_string(m->sections[i]));
  json_object_set_new(root, "sections", sections);
  json_t *files = json_array();
  for (int i = 0; i < m->nfiles; i++)
    json_array_append_new(files, file_json(&m->files[i], 1));
  json_object_set_new(root, "files", files);
  if (m->ef.present)
    json_object_set_new(root, "error_feedback", ef_json(&m->ef));
  if (m->ms.present)
    json_object_set_new(root, "method_state", mstate_json(&m->ms));
  json_t *params = json_array();
  for (int i = 0; i < m->nparams; i++) {
    const zinc_manifest_param *p = &m->params[i];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "module", json_string(p->module));
    json_object_set_new(o, "param", json_string(p->param));
    json_object_set_new(o, "dtype", json_string(zinc_dtype_name(p->dtype)));
    json_t *shape = json_array();
    for (int d = 0; d < p->ndim; d++)
      json_array_append_new(shape, json_integer(p->shape[d]));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "numel", json_integer(p->numel));
    json_object_set_new(o, "weight_decay", json_boolean(p->weight_decay));
    json_t *pieces = json_array();
    for (int k = 0; k < p->npieces; k++) {
      const zinc_manifest_piece *pc = &p->pieces[k];
      json_t *a = json_array();
      json_array_append_new(a, json_integer(pc->file));
      json_array_append_new(a, json_integer(pc->file_offset));
      json_array_append_new(a, json_integer(pc->param_offset));
      json_array_append_new(a, json_integer(pc->length));
      json_array_append_new(pieces, a);
    }
    json_object_set_new(o, "pieces", pieces);
    json_array_append_new(params, o);
  }
  json_object_set_new(root, "params", params);
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(root);
  return text;
}

/* ------------------------------------------------------------- reading */

typedef struct {
  const char *what;
  zinc_status st;
} reader;

static int fail(reader *r, const char *path, const char *fmt, ...) ZINC_PRINTF(3, 4);
static int fail(reader *r, const char *path, const char *fmt, ...) {
  if (r->st != ZINC_OK)
    return 0;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->st = zinc_error(ZINC_ERR_CORRUPT, "checkpoint manifest %s: %s: %s", r->what, path, msg);
  return 0;
}

/* An allocation failed while reading: out of host memory, not a bad file. */
static int fail_nomem(reader *r, const char *path, const char *what, size_t bytes) {
  if (r->st == ZINC_OK)
    r->st = zinc_error(ZINC_ERR_NOMEM, "checkpoint manifest %s: %s: no host memory for %s "
                       "(%zu bytes); free host memory and load again", r->what, path, what,
                       bytes);
  return 0;
}

static int get_int(reader *r, json_t *o, const char *key, const char *path, int64_t lo,
                   int64_t hi, int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v || !json_is_integer(v))
    return fail(r, path, "\"%s\" missing or not an integer", key);
  int64_t x = (int64_t)json_integer_value(v);
  if (x < lo || x > hi)
    return fail(r, path, "\"%s\" is %lld, expected %lld..%lld", key, (long long)x,
                (long long)lo, (long long)hi);
  *out = x;
  return 1;
}

static int get_str(reader *r, json_t *o, const char *key, const char *path, char **out) {
  json_t *v = json_object_get(o, key);
  if (!v || !json_is_string(v))
    return fail(r, path, "\"%s\" missing or not a string", key);
  *out = zinc_strdup(json_string_value(v));
  return *out ? 1 : fail_nomem(r, path, "a string", strlen(json_string_value(v)) + 1);
}

static int parse_dtype(const char *s, zinc_dtype *dt) {
  for (int d = 0; d < 3; d++)
    if (strcmp(s, zinc_dtype_name((zinc_dtype)d)) == 0) {
      *dt = (zinc_dtype)d;
      return 1;
    }
  return 0;
}

static int cmp_piece(const void *a, const void *b) {
  const zinc_manifest_piece *x = a, *y = b;
  return x->param_offset < y->param_offset ? -1 : x->param_offset > y->param_offset;
}

static int parse_param(reader *r, json_t *o, int index, const zinc_manifest *m,
                       zinc_manifest_param *p) {
  char path[64];
  snprintf(path, sizeof path, "params[%d]", index);
  if (!json_is_object(o))
    return fail(r, path, "not an object");
  char *dtype = NULL;
  int64_t decay = 0;
  if (!get_str(r, o, "name", path, &p->name) || !get_str(r, o, "module", path, &p->module) ||
      !get_str(r, o, "param", path, &p->param) || !get_str(r, o, "dtype", path, &dtype) ||
      !get_int(r, o, "numel", path, 1, INT64_MAX / 8, &p->numel))
    goto bad;
  json_t *wd = json_object_get(o, "weight_decay");
  decay = wd && json_is_boolean(wd) ? json_is_true(wd) : 1;
  p->weight_decay = (int)decay;
  if (!parse_dtype(dtype, &p->dtype)) {
    fail(r, path, "\"dtype\" is \"%s\", expected f32, bf16 or f16", dtype);
    goto bad;
  }
  json_t *shape = json_object_get(o, "shape");
  if (!json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 8) {
    fail(r, path, "\"shape\" must be an array of 1..8 integers");
    goto bad;
  }
  p->ndim = (int)json_array_size(shape);
  int64_t prod = 1;
  for (int d = 0; d < p->ndim; d++) {
    json_t *v = json_array_get(shape, (size_t)d);
    if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
        __builtin_mul_overflow(prod, (int64_t)json_integer_value(v), &prod)) {
      fail(r, path, "\"shape\"[%d] is not a positive integer", d);
      goto bad;
    }
    p->shape[d] = (int64_t)json_integer_value(v);
  }
  if (prod != p->numel) {
    fail(r, path, "\"numel\" %lld does not match the shape (%lld)", (long long)p->numel,
         (long long)prod);
    goto bad;
  }
  json_t *pieces = json_object_get(o, "pieces");
  if (!json_is_array(pieces) || json_array_size(pieces) == 0 ||
      json_array_size(pieces) > (size_t)INT32_MAX) {
    fail(r, path, "\"pieces\" must be a non-empty array");
    goto bad;
  }
  p->npieces = (int)json_array_size(pieces);
  p->pieces = calloc((size_t)p->npieces, sizeof *p->pieces);
  if (!p->pieces) {
    fail_nomem(r, path, "the piece table", (size_t)p->npieces * sizeof *p->pieces);
    goto bad;
  }
  for (int k = 0; k < p->npieces; k++) {
    json_t *a = json_array_get(pieces, (size_t)k);
    int64_t v[4];
    if (!json_is_array(a) || json_array_size(a) != 4) {
      fail(r, path, "\"pieces\"[%d] is not [file, file_offset, param_offset, length]", k);
      goto bad;
    }
    for (int j = 0; j < 4; j++) {
      json_t *x = json_array_get(a, (size_t)j);
      if (!json_is_integer(x) || json_integer_value(x) < 0) {
        fail(r, path, "\"pieces\"[%d][%d] is not a non-negative integer", k, j);
        goto bad;
      }
      v[j] = (int64_t)json_integer_value(x);
    }
    if (v[0] >= m->nfiles) {
      fail(r, path, "\"pieces\"[%d] names file %lld of %d", k, (long long)v[0], m->nfiles);
      goto bad;
    }
    if (v[3] == 0 || v[1] > m->files[v[0]].elements - v[3] || v[2] > p->numel - v[3]) {
      fail(r, path, "\"pieces\"[%d] (%lld, %lld, %lld, %lld) lies outside its file or "
           "parameter", k, (long long)v[0], (long long)v[1], (long long)v[2],
           (long long)v[3]);
      goto bad;
    }
    p->pieces[k] = (zinc_manifest_piece){(int)v[0], v[1], v[2], v[3]};
  }
  qsort(p->pieces, (size_t)p->npieces, sizeof *p->pieces, cmp_piece);
  int64_t covered = 0;
  for (int k = 0; k < p->npieces; k++) {
    if (p->pieces[k].param_offset != covered) {
      fail(r, path, "\"pieces\" %s element %lld", p->pieces[k].param_offset > covered ?
           "leave out" : "overlap at", (long long)covered);
      goto bad;
    }
    covered += p->pieces[k].length;
  }
  if (covered != p->numel) {
    fail(r, path, "\"pieces\" cover %lld of %lld elements", (long long)covered,
         (long long)p->numel);
    goto bad;
  }
  free(dtype);
  return 1;
bad:
  free(dtype);
  return 0;
}

/* "error_feedback" (written since the residuals are saved): the codec,
 * the unit layout (inside the shards, increasing, its crc matching), one
 * file per saving rank, named by rank, of the size the layout gives. */
static int parse_crc(reader *r, json_t *o, const char *key, const char *path, uint32_t *out) {
  char *crc = NULL;
  if (!get_str(r, o, key, path, &crc))
    return 0;
  char *end = NULL;
  unsigned long c = strtoul(crc, &end, 16);
  int ok = strlen(crc) == 8 && end && *end == '\0';
  free(crc);
  if (!ok)
    return fail(r, path, "\"%s\" is not 8 hex digits", key);
  *out = (uint32_t)c;
  return 1;
}

static int parse_ef(reader *r, json_t *o, zinc_manifest *m) {
  zinc_manifest_ef *ef = &m->ef;
  const char *path = "error_feedback";
  char *codec = NULL;
  int64_t v;
  if (!json_is_object(o))
    return fail(r, path, "not an object");
  if (!get_str(r, o, "codec", path, &codec))
    return 0;
  ef->f32 = strcmp(codec, "f32") == 0;
  int ok = ef->f32 || strcmp(codec, "int8") == 0 ||
           fail(r, path, "\"codec\" is \"%s\"; residuals are saved as \"int8\" or \"f32\"",
                codec);
  free(codec);
  if (!ok || !get_int(r, o, "block", path, 1, 1 << 20, &v))
    return 0;
  ef->block = (int)v;
  if (!get_int(r, o, "dp_size", path, 1, 1 << 24, &v))
    return 0;
  ef->dp_size = (int)v;
  if (ef->dp_size != m->dp_size)
    return fail(r, path, "\"dp_size\" %d differs from the checkpoint's %d", ef->dp_size,
                m->dp_size);
  if (!parse_crc(r, o, "layout_crc32c", path, &ef->layout_crc32c))
    return 0;
  json_t *units = json_object_get(o, "units");
  if (!json_is_array(units) || json_array_size(units) > (1u << 26))
    return fail(r, path, "\"units\" must be an array of [shard_offset, chunk]");
  ef->nunits = (int)json_array_size(units);
  ef->units = calloc((size_t)ef->nunits + 1, sizeof *ef->units);
  if (!ef->units)
    return fail_nomem(r, path, "the unit table", ((size_t)ef->nunits + 1) * sizeof *ef->units);
  int64_t end = 0, limit = m->nfiles > 0 ? m->files[0].elements : 0;
  for (int i = 0; i < ef->nunits; i++) {
    json_t *a = json_array_get(units, (size_t)i);
    json_t *x = json_array_get(a, 0), *y = json_array_get(a, 1);
    if (!json_is_array(a) || json_array_size(a) != 2 || !json_is_integer(x) ||
        !json_is_integer(y))
      return fail(r, path, "\"units\"[%d] is not [shard_offset, chunk]", i);
    int64_t off = (int64_t)json_integer_value(x), chunk = (int64_t)json_integer_value(y);
    if (off < end || chunk < 1 || chunk > limit || off > limit - chunk)
      return fail(r, path, "\"units\"[%d] [%lld, %lld] overlaps the unit before it or lies "
                  "outside the shards' %lld elements", i, (long long)off, (long long)chunk,
                  (long long)limit);
    ef->units[i] = (zinc_manifest_ef_unit){off, chunk};
    end = off + chunk;
  }
  if (zinc_manifest_ef_layout_crc(ef->units, ef->nunits) != ef->layout_crc32c)
    return fail(r, path, "\"layout_crc32c\" %08x does not match its units (%08x)",
                ef->layout_crc32c, zinc_manifest_ef_layout_crc(ef->units, ef->nunits));
  json_t *files = json_object_get(o, "files");
  if (!json_is_array(files) || json_array_size(files) != (size_t)ef->dp_size)
    return fail(r, path, "\"files\" must list one file per rank (%d)", ef->dp_size);
  ef->files = calloc((size_t)ef->dp_size, sizeof *ef->files);
  if (!ef->files)
    return fail_nomem(r, path, "the file table", (size_t)ef->dp_size * sizeof *ef->files);
  int64_t bytes = zinc_manifest_ef_file_bytes(ef) + zinc_manifest_rank_trailer(m);
  for (int i = 0; i < ef->dp_size; i++) {
    char fpath[48];
    snprintf(fpath, sizeof fpath, "error_feedback.files[%d]", i);
    json_t *f = json_array_get(files, (size_t)i);
    zinc_manifest_file *mf = &ef->files[i];
    if (!json_is_object(f))
      return fail(r, fpath, "not an object");
    if (!get_str(r, f, "name", fpath, &mf->name) ||
        !get_int(r, f, "rank", fpath, 0, 1 << 24, &v) ||
        !get_int(r, f, "bytes", fpath, 0, INT64_MAX, &mf->bytes) ||
        !parse_crc(r, f, "crc32c", fpath, &mf->crc32c))
      return 0;
    mf->rank = (int)v;
    char want[32];
    snprintf(want, sizeof want, "rank_%05d.zef", i);
    if (mf->rank != i || strcmp(mf->name, want) != 0)
      return fail(r, fpath, "names \"%s\" of rank %d; entry %d must be %s of rank %d",
                  mf->name, mf->rank, i, want, i);
    if (mf->bytes != bytes)
      return fail(r, fpath, "\"bytes\" %lld; its units at block %d over %d ranks make %lld%s",
                  (long long)mf->bytes, ef->block, ef->dp_size, (long long)bytes,
                  m->save_id ? " with the identity trailer" : "");
  }
  ef->present = 1;
  return 1;
}

/* "method_state": dp_size (the checkpoint's), the entries (unique names of
 * 1..47 bytes, sizes >= 0), one file per rank, named by rank, holding the
 * sum of the entries' bytes. */
static int parse_mstate(reader *r, json_t *o, zinc_manifest *m) {
  zinc_manifest_mstate *ms = &m->ms;
  const char *path = "method_state";
  int64_t v;
  if (!json_is_object(o))
    return fail(r, path, "not an object");
  if (!get_int(r, o, "dp_size", path, 1, 1 << 24, &v))
    return 0;
  if (v != m->dp_size)
    return fail(r, path, "\"dp_size\" %lld differs from the checkpoint's %d", (long long)v,
                m->dp_size);
  json_t *entries = json_object_get(o, "entries");
  if (!json_is_array(entries) || json_array_size(entries) > 1024)
    return fail(r, path, "\"entries\" must be an array of {name, bytes} (at most 1024)");
  ms->nentries = (int)json_array_size(entries);
  ms->entries = calloc((size_t)ms->nentries + 1, sizeof *ms->entries);
  ms->files = calloc((size_t)m->dp_size, sizeof *ms->files);
  if (!ms->entries || !ms->files)
    return fail_nomem(r, path, "the entry and file tables",
                      ((size_t)ms->nentries + 1) * sizeof *ms->entries +
                          (size_t)m->dp_size * sizeof *ms->files);
  ms->dp_size = m->dp_size; /* from here zinc_manifest_free frees the files' names */
  int64_t total = 0;
  for (int i = 0; i < ms->nentries; i++) {
    char epath[48];
    snprintf(epath, sizeof epath, "method_state.entries[%d]", i);
    json_t *x = json_array_get(entries, (size_t)i);
    if (!json_is_object(x))
      return fail(r, epath, "not an object");
    if (!get_str(r, x, "name", epath, &ms->entries[i].name) ||
        !get_int(r, x, "bytes", epath, 0, INT64_MAX / 1024, &ms->entries[i].bytes))
      return 0;
    size_t nl = strlen(ms->entries[i].name);
    if (nl == 0 || nl > 47)
      return fail(r, epath, "\"name\" must be 1..47 bytes");
    for (int j = 0; j < i; j++)
      if (!strcmp(ms->entries[j].name, ms->entries[i].name))
        return fail(r, epath, "\"%s\" listed twice", ms->entries[i].name);
    total += ms->entries[i].bytes;
  }
  json_t *files = json_object_get(o, "files");
  if (!json_is_array(files) || json_array_size(files) != (size_t)m->dp_size)
    return fail(r, path, "\"files\" must list one file per rank (%d)", m->dp_size);
  for (int i = 0; i < m->dp_size; i++) {
    char fpath[48];
    snprintf(fpath, sizeof fpath, "method_state.files[%d]", i);
    json_t *f = json_array_get(files, (size_t)i);
    zinc_manifest_file *mf = &ms->files[i];
    if (!json_is_object(f))
      return fail(r, fpath, "not an object");
    if (!get_str(r, f, "name", fpath, &mf->name) ||
        !get_int(r, f, "rank", fpath, 0, 1 << 24, &v) ||
        !get_int(r, f, "bytes", fpath, 0, INT64_MAX, &mf->bytes) ||
        !parse_crc(r, f, "crc32c", fpath, &mf->crc32c))
      return 0;
    mf->rank = (int)v;
    char want[32];
    snprintf(want, sizeof want, "rank_%05d.zms", i);
    if (mf->rank != i || strcmp(mf->name, want) != 0)
      return fail(r, fpath, "names \"%s\" of rank %d; entry %d must be %s of rank %d",
                  mf->name, mf->rank, i, want, i);
    if (mf->bytes != total + zinc_manifest_rank_trailer(m))
      return fail(r, fpath, "\"bytes\" %lld; its entries make %lld%s", (long long)mf->bytes,
                  (long long)(total + zinc_manifest_rank_trailer(m)),
                  m->save_id ? " with the identity trailer" : "");
  }
  ms->present = 1;
  return 1;
}

zinc_status zinc_manifest_parse(const char *text, size_t len, const char *what,
                                zinc_manifest **out) {
  *out = NULL;
  reader r = {what ? what : "(manifest)", ZINC_OK};
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return zinc_error(ZINC_ERR_CORRUPT, "checkpoint manifest %s: not valid JSON at line %d "
                      "column %d: %s", r.what, jerr.line, jerr.column, jerr.text);
  zinc_manifest *m = calloc(1, sizeof *m);
  if (!m) {
    json_decref(root);
    return zinc_error(ZINC_ERR_NOMEM, "out of memory reading manifest %s", r.what);
  }
  int64_t v;
  char *format = NULL;
  if (!json_is_object(root)) {
    fail(&r, "$", "not a JSON object");
    goto done;
  }
  if (!get_str(&r, root, "format", "$", &format))
    goto done;
  if (strcmp(format, "zinc-checkpoint") != 0) {
    fail(&r, "format", "is \"%s\", expected \"zinc-checkpoint\"", format);
    goto done;
  }
  if (!get_int(&r, root, "version", "$", 1, ZINC_MANIFEST_VERSION, &v))
    goto done;
  m->version = (int)v;
  if (!get_str(&r, root, "zinc_version", "$", &m->zinc_version) ||
      !get_str(&r, root, "tag", "$", &m->tag) ||
      !get_str(&r, root, "offload_optimizer", "$", &m->offload_optimizer))
    goto done;
  if (json_object_get(root, "save_id")) { /* written since per-rank files name their save */
    char *id = NULL, *end = NULL;
    if (!get_str(&r, root, "save_id", "$", &id))
      goto done;
    int ok = strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16;
    unsigned long long x = ok ? strtoull(id, &end, 16) : 0;
    ok = ok && x != 0;
    free(id);
    if (!ok) {
      fail(&r, "save_id", "is not 16 hex digits of a nonzero number");
      goto done;
    }
    m->save_id = (uint64_t)x;
  }
  if (!json_object_get(root, "optimizer")) /* written since the optimizer family */
    m->optimizer = zinc_strdup("Adam");
  else if (!get_str(&r, root, "optimizer", "$", &m->optimizer))
    goto done;
  if (!get_int(&r, root, "world_size", "$", 1, 1 << 24, &v))
    goto done;
  m->world_size = (int)v;
  if (!get_int(&r, root, "dp_size", "$", 1, 1 << 24, &v))
    goto done;
  m->dp_size = (int)v;
  if (!get_int(&r, root, "stage", "$", 0, 3, &v))
    goto done;
  m->stage = (int)v;
  /* counters a run can reach (2^53: exact as a double, far from overflow
   * when training goes on) */
  const int64_t counter_max = (int64_t)1 << 53;
  if (!get_int(&r, root, "step", "$", 0, counter_max, &m->step) ||
      !get_int(&r, root, "micro_step", "$", 0, counter_max, &m->micro_step) ||
      !get_int(&r, root, "skipped_steps", "$", 0, m->step, &m->skipped_steps))
    goto done;
  m->mp_size = 1;
  m->client_state_bytes = -1;
  if (json_object_get(root, "model_parallel_size")) { /* written since model-parallel saves */
    if (!get_int(&r, root, "model_parallel_size", "$", 1, 1 << 24, &v))
      goto done;
    m->mp_size = (int)v;
    if (!get_int(&r, root, "mp_rank", "$", 0, m->mp_size - 1, &v))
      goto done;
    m->mp_rank = (int)v;
  }
  m->pp_size = 1;
  if (json_object_get(root, "pipeline_parallel_size")) { /* written since pipeline saves */
    if (!get_int(&r, root, "pipeline_parallel_size", "$", 1, 1 << 24, &v))
      goto done;
    m->pp_size = (int)v;
    if (!get_int(&r, root, "pipeline_stage", "$", 0, m->pp_size - 1, &v))
      goto done;
    m->pp_stage = (int)v;
  }
  json_t *cs = json_object_get(root, "client_state");
  if (cs) { /* written since the trainer's blob */
    char *file = NULL, *crc = NULL;
    int ok = json_is_object(cs) || fail(&r, "client_state", "not an object");
    ok = ok && get_str(&r, cs, "file", "client_state", &file) &&
         get_int(&r, cs, "bytes", "client_state", 0, INT64_MAX, &m->client_state_bytes) &&
         get_str(&r, cs, "crc32c", "client_state", &crc);
    if (ok && strcmp(file, ZINC_CLIENT_STATE_NAME) != 0)
      ok = fail(&r, "client_state", "\"file\" is \"%s\", not %s", file, ZINC_CLIENT_STATE_NAME);
    char *end = NULL;
    unsigned long c = ok ? strtoul(crc, &end, 16) : 0;
    if (ok && (strlen(crc) != 8 || !end || *end))
      ok = fail(&r, "client_state", "\"crc32c\" is not 8 hex digits");
    m->client_state_crc32c = (uint32_t)c;
    free(file);
    free(crc);
    if (!ok)
      goto done;
  }
  json_t *ls = json_object_get(root, "loss_scaler");
  json_t *scale = ls ? json_object_get(ls, "scale") : NULL;
  if (!json_is_object(ls) || !json_is_number(scale) || json_number_value(scale) <= 0) {
    fail(&r, "loss_scaler", "missing, or \"scale\" not a positive number");
    goto done;
  }
  m->scaler_scale = json_number_value(scale);
  if (!isfinite(m->scaler_scale) || m->scaler_scale > 1e38) {
    fail(&r, "loss_scaler.scale", "%g is not a finite f32 loss scale", m->scaler_scale);
    goto done;
  }
  if (!get_int(&r, ls, "iteration", "loss_scaler", 0, counter_max, &m->scaler_iter) ||
      !get_int(&r, ls, "last_overflow_iteration", "loss_scaler", -1, counter_max,
               &m->scaler_last_overflow) ||
      !get_int(&r, ls, "hysteresis", "loss_scaler", 0, 1 << 30, &v))
    goto done;
  m->scaler_hysteresis = (int)v;
  json_t *cfg = json_object_get(root, "config");
  if (cfg && json_is_object(cfg))
    m->config_json = json_dumps(cfg, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_t *sections = json_object_get(root, "sections");
  if (!json_is_array(sections) || json_array_size(sections) < 1 || json_array_size(sections) > 3) {
    fail(&r, "sections", "must list 1..3 section names");
    goto done;
  }
  m->nsections = (int)json_array_size(sections);
  for (int i = 0; i < m->nsections; i++) {
    json_t *s = json_array_get(sections, (size_t)i);
    if (!json_is_string(s)) {
      fail(&r, "sections", "entry %d is not a string", i);
      goto done;
    }
    m->sections[i] = zinc_strdup(json_string_value(s));
  }
  json_t *files = json_object_get(root, "files");
  if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > (1u << 24)) {
    fail(&r, "files", "must be a non-empty array");
    goto done;
  }
  m->nfiles = (int)json_array_size(files);
  if (m->nfiles != m->dp_size) {
    fail(&r, "files", "%d entries for dp_size %d (one shard per saving rank)", m->nfiles,
         m->dp_size);
    goto done;
  }
  m->files = calloc((size_t)m->nfiles, sizeof *m->files);
  if (!m->files) {
    fail_nomem(&r, "files", "the file table", (size_t)m->nfiles * sizeof *m->files);
    goto done;
  }
  for (int i = 0; i < m->nfiles; i++) {
    char path[32];
    snprintf(path, sizeof path, "files[%d]", i);
    json_t *f = json_array_get(files, (size_t)i);
    zinc_manifest_file *mf = &m->files[i];
    char *crc = NULL;
    if (!json_is_object(f)) {
      fail(&r, path, "not an object");
      goto done;
    }
    if (!get_str(&r, f, "name", path, &mf->name) ||
        !get_int(&r, f, "rank", path, 0, 1 << 24, &v) ||
        !get_int(&r, f, "elements", path, 0, INT64_MAX / 16, &mf->elements) ||
        !get_int(&r, f, "bytes", path, 0, INT64_MAX, &mf->bytes) ||
        !get_str(&r, f, "crc32c", path, &crc))
      goto done;
    mf->rank = (int)v;
    char *end = NULL;
    unsigned long c = strtoul(crc, &end, 16);
    int crc_ok = strlen(crc) == 8 && end && *end == '\0';
    free(crc);
    if (!crc_ok) {
      fail(&r, path, "\"crc32c\" is not 8 hex digits");
      goto done;
    }
    mf->crc32c = (uint32_t)c;
    /* entry i is rank i's shard, by name: entries swapped or renamed would
     * otherwise read one rank's values as another's */
    char want[32];
    snprintf(want, sizeof want, "rank_%05d.zshard", i);
    if (mf->rank != i || strcmp(mf->name, want) != 0) {
      fail(&r, path, "names \"%s\" of rank %d; entry %d must be %s of rank %d", mf->name,
           mf->rank, i, want, i);
      goto done;
    }
  }
  json_t *efo = json_object_get(root, "error_feedback");
  if (efo && !parse_ef(&r, efo, m))
    goto done;
  json_t *mso = json_object_get(root, "method_state");
  if (mso && !parse_mstate(&r, mso, m))
    goto done;
  json_t *params = json_object_get(root, "params");
  if (!json_is_array(params) || json_array_size(params) > (1u << 26)) {
    fail(&r, "params", "must be an array");
    goto done;
  }
  m->nparams = (int)json_array_size(params);
  m->params = calloc((size_t)m->nparams + 1, sizeof *m->params);
  if (!m->params) {
    fail_nomem(&r, "params", "the parameter table", ((size_t)m->nparams + 1) * sizeof *m->params);
    goto done;
  }
  for (int i = 0; i < m->nparams; i++)
    if (!parse_param(&r, json_array_get(params, (size_t)i), i, m, &m->params[i]))
      goto done;
done:
  free(format);
  json_decref(root);
  if (r.st != ZINC_OK) {
    zinc_manifest_free(m);
    return r.st;
  }
  *out = m;
  return ZINC_OK;
}

void zinc_manifest_free(zinc_manifest *m) {
  if (!m)
    return;
  free(m->zinc_version);
  free(m->tag);
  free(m->offload_optimizer);
  free(m->optimizer);
  free(m->config_json);
  for (int i = 0; i < 3; i++)
    free(m->sections[i]);
  for (int i = 0; m->files && i < m->nfiles; i++)
    free(m->files[i].name);
  free(m->files);
  for (int i = 0; m->params && i < m->nparams; i++) {
    free(m->params[i].name);
    free(m->params[i].module);
    free(m->params[i].param);
    free(m->params[i].pieces);
  }
  free(m->params);
  for (int i = 0; m->ef.files && i < m->ef.dp_size; i++)
    free(m->ef.files[i].name);
  free(m->ef.files);
  zinc_manifest_mstate_free(&m->ms);
  free(m->ef.units);
  free(m);
}
