/*
 * registry.c — modules and parameters registered by name and shape before
 * zinc_engine_build, and the read-only accessors of both.
 *
 * Names: a module name is unique in the engine, a parameter name unique in
 * its module; "module.param" names a parameter in messages and checkpoints.
 * Nothing can be registered once the engine is built.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/pipe.h"
#include "engine/failure.h"

static int name_ok(const char *name) {
  if (!name || !name[0] || strlen(name) > 255)
    return 0;
  for (const char *c = name; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\')
      return 0;
  return 1;
}

zinc_module *zinc_module_add(zinc_engine *e, const char *name) {
  if (!e) {
    zinc_error(ZINC_ERR_INVALID, "zinc_module_add: engine is NULL");
    return NULL;
  }
  if (e->built) {
    zinc_error(ZINC_ERR_INVALID, "zinc_module_add(\"%s\"): the engine is already built; "
               "register every module before zinc_engine_build", name ? name : "(null)");
    return NULL;
  }
  if (!name_ok(name)) {
    zinc_error(ZINC_ERR_INVALID, "zinc_module_add: module name \"%s\" is empty, too long "
               "or has control/quote characters", name ? name : "(null)");
    return NULL;
  }
  if (zinc_module_find(e, name)) {
    zinc_error(ZINC_ERR_INVALID, "zinc_module_add: a module named \"%s\" is already registered",
               name);
    return NULL;
  }
  if (zinc_grow((void **)&e->modules, &e->modules_cap, e->nmodules + 1, sizeof *e->modules,
                "modules") != ZINC_OK)
    return NULL;
  zinc_module *m = calloc(1, sizeof *m);
  if (!m || !(m->name = zinc_strdup(name))) {
    free(m);
    zinc_error(ZINC_ERR_NOMEM, "out of memory registering module \"%s\"", name);
    return NULL;
  }
  m->engine = e;
  m->index = e->nmodules;
  m->grad_window = -1;
  m->grad_micro = -1;
  m->acc_window = -1;
  e->modules[e->nmodules++] = m;
  return m;
}

zinc_param *zinc_param_add(zinc_engine *e, zinc_module *m, const char *name,
                           zinc_dtype dtype, int ndim, const int64_t *shape) {
  if (!e || !m || m->engine != e) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_add: %s", !e ? "engine is NULL" :
               !m ? "module is NULL" : "module belongs to another engine");
    return NULL;
  }
  if (e->built) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_add(\"%s.%s\"): the engine is already built",
               m->name, name ? name : "(null)");
    return NULL;
  }
  if (!name_ok(name)) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_add: parameter name \"%s\" in module \"%s\" is "
               "empty, too long or has control/quote characters", name ? name : "(null)",
               m->name);
    return NULL;
  }
  for (int i = 0; i < m->nparams; i++)
    if (strcmp(m->params[i]->name, name) == 0) {
      zinc_error(ZINC_ERR_INVALID, "zinc_param_add: module \"%s\" already has a parameter "
                 "named \"%s\"", m->name, name);
      return NULL;
    }
  /* "module.param" names the parameter in checkpoints and exports: two
   * parameters must not share it ("a.b" + "c" and "a" + "b.c") */
  char full[2 * 256 + 2], other[2 * 256 + 2];
  snprintf(full, sizeof full, "%s.%s", m->name, name);
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *q = e->params[i];
    snprintf(other, sizeof other, "%s.%s", q->module->name, q->name);
    if (strcmp(full, other) == 0) {
      zinc_error(ZINC_ERR_INVALID, "zinc_param_add(\"%s\" in module \"%s\"): its full name "
                 "\"%s\" is already that of parameter \"%s\" in module \"%s\"; checkpoints "
                 "and exports name parameters \"module.param\", so rename one of them", name,
                 m->name, full, q->name, q->module->name);
      return NULL;
    }
  }
  if (zinc_dtype_size(dtype) == 0) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_add(\"%s.%s\"): unknown dtype %d (expected "
               "ZINC_F32, ZINC_BF16 or ZINC_F16)", m->name, name, (int)dtype);
    return NULL;
  }
  if (ndim < 1 || ndim > ZINC_MAX_NDIM || !shape) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_add(\"%s.%s\"): ndim %d outside 1..%d or shape "
               "NULL", m->name, name, ndim, ZINC_MAX_NDIM);
    return NULL;
  }
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    uint64_t prod;
    if (shape[d] <= 0 || !zinc_mul_ok((uint64_t)numel, (uint64_t)shape[d], &prod) ||
        prod > (uint64_t)INT64_MAX / 64) {
      zinc_error(ZINC_ERR_INVALID, "zinc_param_add(\"%s.%s\"): dimension %d is %lld (each "
                 "dimension must be > 0 and the product must fit in 64 bits)",
                 m->name, name, d, (long long)shape[d]);
      return NULL;
    }
    numel = (int64_t)prod;
  }
  if (zinc_grow((void **)&m->params, &m->cap, m->nparams + 1, sizeof *m->params,
                "parameters") != ZINC_OK ||
      zinc_grow((void **)&e->params, &e->params_cap, e->nparams + 1, sizeof *e->params,
                "parameters") != ZINC_OK)
    return NULL;
  zinc_param *p = calloc(1, sizeof *p);
  if (!p || !(p->name = zinc_strdup(name))) {
    free(p);
    zinc_error(ZINC_ERR_NOMEM, "out of memory registering parameter \"%s.%s\"", m->name, name);
    return NULL;
  }
  p->engine = e;
  p->module = m;
  p->dtype = dtype;
  p->ndim = ndim;
  memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
  p->numel = numel;
  p->decay = 1;
  p->wd = -1.0;
  p->lr_scale = 1.0;
  p->group = -1;
  p->index = e->nparams;
  m->params[m->nparams++] = p;
  e->params[e->nparams++] = p;
  return p;
}

zinc_status zinc_param_set_weight_decay(zinc_param *p, int enabled) {
  if (!p)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_weight_decay: parameter is NULL");
  if (p->engine->built)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_weight_decay(\"%s.%s\"): call it "
                      "before zinc_engine_build", p->module->name, p->name);
  p->decay = enabled ? 1 : 0;
  p->wd = -1.0;
  return ZINC_OK;
}

/* Shared checks of the group setters: p usable, not built, v >= 0 finite. */
static zinc_status group_setter_check(const zinc_param *p, const char *what, double v) {
  if (!p)
    return zinc_error(ZINC_ERR_INVALID, "%s: parameter is NULL", what);
  if (p->engine->built)
    return zinc_error(ZINC_ERR_INVALID, "%s(\"%s.%s\"): call it before zinc_engine_build", what,
                      p->module->name, p->name);
  if (!isfinite(v) || v < 0)
    return zinc_error(ZINC_ERR_INVALID, "%s(\"%s.%s\"): %g must be >= 0 and finite", what,
                      p->module->name, p->name, v);
  return ZINC_OK;
}

zinc_status zinc_param_set_weight_decay_value(zinc_param *p, double wd) {
  ZINC_CHECK(group_setter_check(p, "zinc_param_set_weight_decay_value", wd));
  p->decay = 1;
  p->wd = wd;
  return ZINC_OK;
}

zinc_status zinc_param_set_lr_scale(zinc_param *p, double scale) {
  ZINC_CHECK(group_setter_check(p, "zinc_param_set_lr_scale", scale));
  p->lr_scale = scale;
  return ZINC_OK;
}

zinc_status zinc_param_set_frozen(zinc_param *p, int frozen) {
  ZINC_CHECK(group_setter_check(p, "zinc_param_set_frozen", 0.0));
  p->frozen = frozen ? 1 : 0;
  return ZINC_OK;
}

zinc_status zinc_param_set_replicated(zinc_param *p, int replicated) {
  if (!p)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_replicated: parameter is NULL");
  if (p->engine->built)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_replicated(\"%s.%s\"): call it "
                      "before zinc_engine_build", p->module->name, p->name);
  p->replicated = replicated ? 1 : 0;
  return ZINC_OK;
}

zinc_status zinc_param_set_user(zinc_param *p, void *user) {
  if (!p)
    return zinc_error(ZINC_ERR_INVALID, "zinc_param_set_user: parameter is NULL");
  p->user = user;
  return ZINC_OK;
}

void *zinc_param_user(const zinc_param *p) { return p ? p->user : NULL; }

void zinc_registry_free(zinc_engine *e) {
  for (int i = 0; i < e->nmodules; i++) {
    zinc_module *m = e->modules[i];
    for (int j = 0; j < m->nparams; j++) {
      free(m->params[j]->name);
      free(m->params[j]);
    }
    free(m->params);
    free(m->segs);
    free(m->name);
    free(m);
  }
  free(e->modules);
  free(e->params);
  e->modules = NULL;
  e->params = NULL;
  e->nmodules = e->nparams = 0;
}

const char *zinc_module_name(const zinc_module *m) { return m ? m->name : NULL; }

zinc_module *zinc_module_find(const zinc_engine *e, const char *name) {
  if (!e || !name)
    return NULL;
  for (int i = 0; i < e->nmodules; i++)
    if (strcmp(e->modules[i]->name, name) == 0)
      return e->modules[i];
  return NULL;
}

const char *zinc_param_name(const zinc_param *p) { return p ? p->name : NULL; }
int64_t zinc_param_numel(const zinc_param *p) { return p ? p->numel : 0; }
zinc_dtype zinc_param_dtype(const zinc_param *p) { return p ? p->dtype : ZINC_F32; }
zinc_module *zinc_param_module(const zinc_param *p) { return p ? p->module : NULL; }

int zinc_param_shape(const zinc_param *p, int64_t *shape) {
  if (!p)
    return 0;
  if (shape)
    memcpy(shape, p->shape, (size_t)p->ndim * sizeof *shape);
  return p->ndim;
}

int zinc_module_count(const zinc_engine *e) { return e ? e->nmodules : 0; }

zinc_module *zinc_module_at(const zinc_engine *e, int index) {
  if (!e || index < 0 || index >= e->nmodules)
    return NULL;
  return e->modules[index];
}

int zinc_module_param_count(const zinc_module *m) { return m ? m->nparams : 0; }

zinc_param *zinc_module_param_at(const zinc_module *m, int index) {
  if (!m || index < 0 || index >= m->nparams)
    return NULL;
  return m->params[index];
}

/* ------------------------------------------------ the same model everywhere */

/* One line per parameter, in registration order: what must be the same on
 * every rank for the layout and the collectives to match. */
static char *model_text(const zinc_engine *e) {
  size_t cap = 64, len = 0;
  for (int i = 0; i < e->nparams; i++)
    cap += strlen(e->params[i]->module->name) + strlen(e->params[i]->name) + 160 +
           (size_t)ZINC_MAX_NDIM * 21;
  char *t = malloc(cap);
  if (!t)
    return NULL;
  len += (size_t)snprintf(t, cap, "%d parameters\n", e->nparams);
  for (int i = 0; i < e->nparams; i++) {
    const zinc_param *p = e->params[i];
    len += (size_t)snprintf(t + len, cap - len, "\"%s.%s\" %s [", p->module->name, p->name,
                            zinc_dtype_name(p->dtype));
    for (int d = 0; d < p->ndim; d++)
      len += (size_t)snprintf(t + len, cap - len, "%s%lld", d ? ", " : "",
                              (long long)p->shape[d]);
    len += (size_t)snprintf(t + len, cap - len, "]%s%s", p->decay ? "" : " no weight decay",
                            p->replicated ? " replicated across model-parallel ranks" : "");
    if (p->decay && p->wd >= 0)
      len += (size_t)snprintf(t + len, cap - len, " weight decay %.17g", p->wd);
    if (p->lr_scale != 1.0)
      len += (size_t)snprintf(t + len, cap - len, " lr scale %.17g", p->lr_scale);
    len += (size_t)snprintf(t + len, cap - len, "%s\n", p->frozen ? " frozen" : "");
  }
  return t;
}

/* Copy line `i` (0-based) of t into out. */
static void line_at(const char *t, int i, char *out, size_t cap) {
  for (; i > 0 && t; i--) {
    t = strchr(t, '\n');
    t = t ? t + 1 : NULL;
  }
  const char *end = t ? strchr(t, '\n') : NULL;
  snprintf(out, cap, "%.*s", t ? (int)(end ? end - t : (long)strlen(t)) : 0, t ? t : "");
}

zinc_status zinc_registry_agree(zinc_engine *e) {
  if (e->world_size == 1)
    return ZINC_OK;
  /* compared within each pipeline stage (the world without a pipeline):
   * its data- and tensor-parallel ranks hold the same modules */
  zinc_comm *stage = zinc_pipe_stage_comm(e);
  int ref_rank = zinc_coords_rank(e, zinc_pp_rank(e), 0, 0);
  char *mine = model_text(e), *ref = NULL;
  zinc_status st = zinc_engine_agree_rank0_text(e, stage, mine, "registered model", &ref);
  if (st != ZINC_OK) {
    free(mine);
    return st;
  }
  if (strcmp(ref, mine) != 0) {
    int line = 0;
    for (size_t k = 0; ref[k] && ref[k] == mine[k]; k++)
      line += ref[k] == '\n';
    char theirs[600], ours[600];
    line_at(ref, line, theirs, sizeof theirs);
    line_at(mine, line, ours, sizeof ours);
    st = zinc_error(ZINC_ERR_INVALID, "the registered model differs between ranks%s: %s %s on "
                    "rank %d but %s on rank %d (name, dtype, shape, weight decay, lr scale, "
                    "frozen); every rank %smust register the same modules and parameters, with "
                    "the same shapes and settings, in the same order",
                    stage == e->world ? "" : " of a pipeline stage",
                    line ? "a parameter is" : "the model has", theirs, ref_rank, ours,
                    e->world_rank, stage == e->world ? "" : "of a stage ");
  }
  st = zinc_engine_agree(e, e->world, st);
  free(ref);
  free(mine);
  return st;
}
