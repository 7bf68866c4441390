/*
 * pretrained.c — zinc_load_safetensors: a model's weights from a
 * .safetensors file, by name (see zinc.h).
 *
 * Every rank opens the file and checks the whole match (names through the
 * trainer's map, shapes, dtypes, missing and unexpected tensors) from the
 * header alone; the ranks agree on the outcome before a byte of data is
 * read. Then each rank reads, one parameter at a time, the pieces of the
 * fp32 master it owns under the current layout (the whole parameter at
 * stage 0, its partition at stages 1-3), rounded to the parameter's dtype,
 * and the compute copy is rebuilt from the master as after a checkpoint
 * load.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint/safetensors.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/place/place.h"
#include "engine/step.h"
#include "kernels/zinc_math.h"

#define STAGING_ELEMS (1 << 20) /* f32 between the file and the master */
#define LOGGED_NAMES 20         /* names a warning lists before "and N more" */

void zinc_load_weights_report_free(zinc_load_weights_report *r) {
  if (!r)
    return;
  free(r->missing_names);
  free(r->unexpected_names);
  r->missing_names = r->unexpected_names = NULL;
}

/* Append name and a newline to *list (a malloc'ed string). */
static zinc_status list_add(char **list, size_t *len, const char *name) {
  size_t n = strlen(name);
  char *grown = realloc(*list, *len + n + 2);
  if (!grown)
    return zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors: no host memory for the list of "
                      "names (at \"%s\")", name);
  memcpy(grown + *len, name, n);
  grown[*len + n] = '\n';
  grown[*len + n + 1] = 0;
  *list = grown;
  *len += n + 1;
  return ZINC_OK;
}

/* The first LOGGED_NAMES lines of list, comma-separated, into buf. */
static void list_text(const char *list, int count, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  int k = 0;
  for (const char *s = list; s && *s && k < LOGGED_NAMES && len + 1 < cap; k++) {
    const char *nl = strchr(s, '\n');
    len += (size_t)snprintf(buf + len, cap - len, "%s\"%.*s\"", k ? ", " : "", (int)(nl - s), s);
    s = nl + 1;
  }
  if (count > k && len < cap)
    snprintf(buf + len, cap - len, " and %d more", count - k);
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (len < n)
    snprintf(buf + len, n - len, "]");
}

enum { SKIPPED = -2, MISSING = -1 };

/* Which tensor each parameter takes (src[i]: its index, MISSING or
 * SKIPPED), every check, and the report's counts and lists. */
static zinc_status match(zinc_engine *e, zinc_safetensors_reader *r, const char *path,
                         const zinc_load_weights_options *o, int *src,
                         zinc_load_weights_report *rep) {
  int nt = zinc_safetensors_reader_count(r);
  char *used = calloc((size_t)nt + 1, 1);
  if (!used)
    return zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: out of host memory", path);
  size_t mlen = 0, ulen = 0;
  zinc_status st = ZINC_OK;
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    const zinc_param *p = e->params[i];
    char name[520], file_name[1024];
    snprintf(name, sizeof name, "%s.%s", p->module->name, p->name);
    snprintf(file_name, sizeof file_name, "%s", name);
    if (o->map) {
      file_name[0] = 0;
      if (!o->map(o->map_ctx, name, file_name, sizeof file_name)) {
        src[i] = SKIPPED;
        rep->skipped++;
        continue;
      }
      file_name[sizeof file_name - 1] = 0;
    }
    src[i] = zinc_safetensors_reader_find(r, file_name);
    if (src[i] < 0) {
      src[i] = MISSING;
      rep->missing++;
      st = list_add(&rep->missing_names, &mlen, name);
      continue;
    }
    const zinc_safetensors_entry *t = zinc_safetensors_reader_entry(r, src[i]);
    used[src[i]] = 1;
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++)
      same = t->shape[d] == p->shape[d];
    if (!same) {
      char a[200], b[200];
      shape_text(a, sizeof a, t->ndim, t->shape);
      shape_text(b, sizeof b, p->ndim, p->shape);
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: tensor \"%s\" has shape %s "
                      "and parameter \"%s\" has shape %s", path, file_name, a, name, b);
    } else if (t->zdtype < 0) {
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: tensor \"%s\" (for parameter "
                      "\"%s\") is %s; zinc loads F32, BF16 and F16", path, file_name, name,
                      t->dtype);
    } else {
      rep->loaded++;
    }
  }
  for (int k = 0; k < nt && st == ZINC_OK; k++)
    if (!used[k]) {
      rep->unexpected++;
      st = list_add(&rep->unexpected_names, &ulen, zinc_safetensors_reader_entry(r, k)->name);
    }
  free(used);
  if (st == ZINC_OK && o->strict && (rep->missing || rep->unexpected)) {
    char a[1024], b[1024];
    list_text(rep->missing_names, rep->missing, a, sizeof a);
    list_text(rep->unexpected_names, rep->unexpected, b, sizeof b);
    st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s (strict): %d missing "
                    "parameter(s)%s%s, %d unexpected tensor(s)%s%s; map the names "
                    "(zinc_load_weights_options.map) or load with strict 0", path, rep->missing,
                    rep->missing ? ": " : "", a, rep->unexpected, rep->unexpected ? ": " : "",
                    b);
  }
  return st;
}

typedef struct {
  zinc_safetensors_reader *r;
  const zinc_param *p;
  int tensor;
  float *staging;
} piece_ctx;

static zinc_status read_piece(zinc_engine *e, const zinc_unit *u, int ui, int r, int64_t chunk_off,
                              int64_t param_off, int64_t len, void *vctx) {
  (void)ui;
  piece_ctx *c = vctx;
  if (e->cfg.stage != 0 && r != e->dp_rank)
    return ZINC_OK; /* another rank's partition */
  int64_t dst = zinc_layout_opt_offset(e, u, r) + chunk_off;
  for (int64_t x = 0; x < len; x += STAGING_ELEMS) {
    int64_t n = len - x < STAGING_ELEMS ? len - x : STAGING_ELEMS;
    ZINC_CHECK(zinc_safetensors_reader_read(c->r, c->tensor, param_off + x, n, c->staging));
    if (c->p->dtype != ZINC_F32)
      for (int64_t j = 0; j < n; j++) {
        uint32_t h; /* room for any dtype's element */
        zinc_store_from_f32(&h, 0, c->p->dtype, c->staging[j]);
        c->staging[j] = zinc_load_as_f32(&h, 0, c->p->dtype);
      }
    ZINC_CHECK(zinc_opt_write(e, 0, dst + x, n, c->staging));
  }
  return ZINC_OK;
}

zinc_status zinc_load_safetensors(zinc_engine *e, const char *path,
                                  const zinc_load_weights_options *opt,
                                  zinc_load_weights_report *report) {
  if (report)
    memset(report, 0, sizeof *report);
  ZINC_CHECK(zinc_engine_usable(e, "zinc_load_safetensors"));
  if (!path || !path[0])
    return zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors: path is NULL or empty");
  if (e->mb_open)
    return zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: a micro-batch is in "
                      "progress; load weights between steps", path);
  const zinc_load_weights_options defaults = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  const zinc_load_weights_options *o = opt ? opt : &defaults;
  double t0 = zinc_now();
  zinc_load_weights_report rep = {0};
  zinc_safetensors_reader *r = NULL;
  int *src = calloc((size_t)e->nparams + 1, sizeof *src);
  zinc_status st = src ? zinc_safetensors_reader_open(path, &r)
                       : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: out of host "
                                    "memory", path);
  if (st == ZINC_OK)
    st = match(e, r, path, o, src, &rep);
  /* the checks: every rank read the same header, or all refuse together */
  st = zinc_engine_agree(e, e->world, st);
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "loading weights from %s (nothing was changed)", path);
    zinc_load_weights_report_free(&rep);
    zinc_safetensors_reader_close(r);
    free(src);
    return st;
  }
  piece_ctx c = {.r = r};
  st = zinc_aligned_alloc((void **)&c.staging, 64, STAGING_ELEMS * 4, "weights staging");
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    if (src[i] < 0)
      continue;
    c.p = e->params[i];
    c.tensor = src[i];
    st = zinc_layout_for_each_piece(e, e->params[i], read_piece, &c);
  }
  st = zinc_engine_agree(e, e->world, st);
  if (st == ZINC_OK)
    st = zinc_params_from_master(e);
  st = zinc_engine_agree(e, e->world, st);
  if (st == ZINC_OK) {
    char a[1024], b[1024];
    list_text(rep.missing_names, rep.missing, a, sizeof a);
    list_text(rep.unexpected_names, rep.unexpected, b, sizeof b);
    if (rep.missing)
      zinc_log0(ZINC_LOG_WARN, "zinc_load_safetensors %s: %d parameter(s) missing from the "
                "file (left as they were): %s", path, rep.missing, a);
    if (rep.unexpected)
      zinc_log0(ZINC_LOG_WARN, "zinc_load_safetensors %s: %d unexpected tensor(s) in the file "
                "(not loaded): %s", path, rep.unexpected, b);
    zinc_log0(ZINC_LOG_INFO, "loaded %d parameter(s) from %s (%d skipped by the map, %d "
              "missing, %d unexpected), %.2f s", rep.loaded, path, rep.skipped, rep.missing,
              rep.unexpected, zinc_now() - t0);
    if (report)
      *report = rep;
    else
      zinc_load_weights_report_free(&rep);
  } else {
    zinc_error_wrap(st, "loading weights from %s after its checks passed; the engine's "
                    "weights are partial and it stops", path);
    zinc_engine_fail(e, st);
    zinc_load_weights_report_free(&rep);
  }
  free(c.staging);
  zinc_safetensors_reader_close(r);
  free(src);
  return st;
}
