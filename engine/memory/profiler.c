/*
 * profiler.c — memory accounting of every engine allocation, by location
 * (device, pinned host, NVMe) and category (params, grads, optimizer state,
 * buffers, activations, other): current and peak bytes, peaks per phase
 * (forward, backward, step) and per step, and the ZeRO formula.
 *
 * The device and comm seams call zinc_prof_account on every allocation and
 * free, so the figures are never a separate pass. Counters are atomics: an
 * allocation may come from an I/O or comm thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "device/device_cuda.h"
#include "engine/memory/profiler.h"
#include "engine/place/place.h"

typedef struct {
  double t;
  int64_t step, micro;
  int phase;
  int64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT];
} prof_sample;

struct zinc_prof {
  _Atomic int64_t current[ZINC_LOC_N][ZINC_MEM_NCAT];
  _Atomic int64_t peak[ZINC_LOC_N][ZINC_MEM_NCAT];
  _Atomic int64_t total[ZINC_LOC_N];
  _Atomic int64_t peak_total[ZINC_LOC_N];
  _Atomic int64_t phase_peak[ZINC_PHASE_N][ZINC_LOC_N];
  _Atomic int64_t step_peak[ZINC_LOC_N];
  int64_t last_step_peak[ZINC_LOC_N];
  _Atomic int phase;
  /* timeline (main thread only) */
  prof_sample *samples;
  int nsamples, cap;
  double t0;
};

zinc_status zinc_prof_create(zinc_prof **out) {
  return zinc_calloc((void **)out, 1, sizeof **out, "memory profiler");
}

void zinc_prof_destroy(zinc_prof *p) {
  if (p)
    free(p->samples);
  free(p);
}

static void raise_to(_Atomic int64_t *peak, int64_t v) {
  int64_t old = atomic_load(peak);
  while (v > old && !atomic_compare_exchange_weak(peak, &old, v))
    ;
}

void zinc_prof_account(void *ctx, int location, int category, int64_t bytes) {
  zinc_prof *p = ctx;
  if (!p || location < 0 || location >= ZINC_LOC_N || category < 0 ||
      category >= ZINC_MEM_NCAT)
    return;
  int64_t cur = atomic_fetch_add(&p->current[location][category], bytes) + bytes;
  int64_t tot = atomic_fetch_add(&p->total[location], bytes) + bytes;
  if (bytes > 0) {
    raise_to(&p->peak[location][category], cur);
    raise_to(&p->peak_total[location], tot);
    raise_to(&p->phase_peak[atomic_load(&p->phase)][location], tot);
    raise_to(&p->step_peak[location], tot);
  }
}

void zinc_prof_phase(zinc_prof *p, int phase) {
  if (!p || phase < 0 || phase >= ZINC_PHASE_N)
    return;
  atomic_store(&p->phase, phase);
  for (int l = 0; l < ZINC_LOC_N; l++)
    raise_to(&p->phase_peak[phase][l], atomic_load(&p->total[l]));
}

void zinc_prof_stats(const zinc_prof *p, zinc_mem_stats *out) {
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  out->device_free = out->device_total = out->device_process = -1;
  if (!p)
    return;
  zinc_prof *q = (zinc_prof *)p;
  for (int l = 0; l < ZINC_LOC_N; l++) {
    for (int c = 0; c < ZINC_MEM_NCAT; c++) {
      out->current[l][c] = (uint64_t)atomic_load(&q->current[l][c]);
      out->peak[l][c] = (uint64_t)atomic_load(&q->peak[l][c]);
    }
    out->peak_total[l] = (uint64_t)atomic_load(&q->peak_total[l]);
    for (int ph = 0; ph < ZINC_MEM_NPHASE; ph++)
      out->phase_peak[ph][l] = (uint64_t)atomic_load(&q->phase_peak[ph + 1][l]);
    out->last_step_peak[l] = (uint64_t)q->last_step_peak[l];
  }
}

int64_t zinc_prof_phase_peak(const zinc_prof *p, int phase, int location) {
  if (!p || phase < 0 || phase >= ZINC_PHASE_N || location < 0 || location >= ZINC_LOC_N)
    return 0;
  return atomic_load(&((zinc_prof *)p)->phase_peak[phase][location]);
}

void zinc_prof_step_done(zinc_prof *p) {
  if (!p)
    return;
  for (int l = 0; l < ZINC_LOC_N; l++)
    p->last_step_peak[l] = atomic_exchange(&p->step_peak[l], atomic_load(&p->total[l]));
}

zinc_status zinc_prof_sample(zinc_prof *p, int64_t step, int64_t micro, int phase) {
  ZINC_CHECK(zinc_grow((void **)&p->samples, &p->cap, p->nsamples + 1, sizeof *p->samples,
                       "memory timeline samples"));
  if (p->nsamples == 0)
    p->t0 = zinc_now();
  prof_sample *s = &p->samples[p->nsamples++];
  s->t = zinc_now() - p->t0;
  s->step = step;
  s->micro = micro;
  s->phase = phase;
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      s->bytes[l][c] = atomic_load(&p->current[l][c]);
  return ZINC_OK;
}

static const char *phase_name(int phase) {
  static const char *names[] = {"idle", "forward", "backward", "step"};
  return phase >= 0 && phase < 4 ? names[phase] : "unknown";
}

zinc_status zinc_prof_timeline_write(const zinc_prof *p, const char *path, int rank, int world,
                                     int stage) {
  FILE *f = fopen(path, "w");
  if (!f)
    return zinc_error(ZINC_ERR_IO, "memory timeline %s: %s", path, strerror(errno));
  fprintf(f, "{\n\"format\": \"zinc-memory-timeline\", \"version\": 1, \"rank\": %d, "
          "\"world_size\": %d, \"stage\": %d,\n\"locations\": [", rank, world, stage);
  for (int l = 0; l < ZINC_LOC_N; l++)
    fprintf(f, "%s\"%s\"", l ? ", " : "", zinc_mem_location_name(l));
  fprintf(f, "],\n\"categories\": [");
  for (int c = 0; c < ZINC_MEM_NCAT; c++)
    fprintf(f, "%s\"%s\"", c ? ", " : "", zinc_mem_category_name(c));
  fprintf(f, "],\n\"samples\": [");
  for (int i = 0; i < p->nsamples; i++) {
    const prof_sample *s = &p->samples[i];
    fprintf(f, "%s\n{\"t\": %.6f, \"step\": %lld, \"micro\": %lld, \"phase\": \"%s\", "
            "\"bytes\": [", i ? "," : "", s->t, (long long)s->step, (long long)s->micro,
            phase_name(s->phase));
    for (int l = 0; l < ZINC_LOC_N; l++) {
      fprintf(f, "%s[", l ? ", " : "");
      for (int c = 0; c < ZINC_MEM_NCAT; c++)
        fprintf(f, "%s%lld", c ? ", " : "", (long long)s->bytes[l][c]);
      fprintf(f, "]");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n]\n}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return zinc_error(ZINC_ERR_IO, "memory timeline %s: write failed: %s", path, strerror(errno));
  return ZINC_OK;
}

/* The ZeRO paper's model-state bytes per rank for the configured stage,
 * with zinc's choices spelled out: P = parameter bytes in their dtypes,
 * Psi = parameter count, N = data-parallel size, K = 4 (fp32 master) + the
 * optimizer's state bytes (optim/optimizer.h): Adam and Lamb 8 (m, v; Lamb's
 * per-parameter norms are host scratch of the step, not state), Lion 4
 * (m), Adagrad 4 (the sum of squares), SGD 4 with momentum and 0 without:
 * K = 12 for Adam.
 *   stage 0: P + P + 12 Psi          stage 2: P + 4 Psi/N + 12 Psi/N
 *   stage 1: P + P + 12 Psi/N        stage 3: P/N + 4 Psi/N + 12 Psi/N
 * Stages 2-3 keep the reduced gradient partition in fp32 (4 Psi/N). An
 * all-f32 model with its optimizer state on the device keeps no separate
 * master (the parameters are the master): K loses its 4 there (Adam's 8,
 * DeepSpeed's fp32 figure). In
 * stage 3, segments under stage3_param_persistence_threshold stay whole on
 * every rank, which adds their bytes x (1 - 1/N); hpZ (group size h > 1)
 * adds the secondary partition, the other parameters' bytes / h. Offload
 * moves bytes to another location but not out of the total. */
uint64_t zinc_formula_model_states(const zinc_engine *e) {
  double n = e->dp_size;
  double psi = (double)(e->psi[0] + e->psi[1] + e->psi[2]);
  double pbytes = 4.0 * e->psi[ZINC_F32] + 2.0 * (e->psi[ZINC_BF16] + e->psi[ZINC_F16]);
  /* frozen parameters (zinc_param_set_frozen) have no gradient and no
   * optimizer state: t counts the trained ones */
  double tpsi = psi - (double)(e->psi_frozen[0] + e->psi_frozen[1] + e->psi_frozen[2]);
  double tbytes = pbytes - 4.0 * e->psi_frozen[ZINC_F32] -
                  2.0 * (e->psi_frozen[ZINC_BF16] + e->psi_frozen[ZINC_F16]);
  double v = 0, k = (double)zinc_opt_elem_bytes(e); /* master and moments */
  switch (e->cfg.stage) {
  case 0: v = pbytes + tbytes + k * tpsi; break;
  case 1: v = pbytes + tbytes + k * tpsi / n; break;
  case 2: v = pbytes + 4.0 * tpsi / n + k * tpsi / n; break;
  default: {
    double persist = 0;
    for (int mi = 0; mi < e->nmodules; mi++) {
      const zinc_module *m = e->modules[mi];
      for (int s = 0; s < m->nsegs; s++)
        if (m->segs[s].persistent)
          persist += (double)m->segs[s].used * (double)zinc_dtype_size(m->segs[s].dtype);
    }
    v = pbytes / n + persist * (1.0 - 1.0 / n) + 4.0 * tpsi / n + k * tpsi / n;
    if (e->hpz > 1)
      v += (pbytes - persist) / e->hpz;
  }
  }
  return (uint64_t)(v + 0.5);
}

const char *zinc_mem_category_name(int cat) {
  static const char *names[] = {"params", "grads", "optim", "buffers", "activations", "other"};
  return cat >= 0 && cat < ZINC_MEM_NCAT ? names[cat] : "unknown";
}

const char *zinc_mem_location_name(int loc) {
  static const char *names[] = {"device", "host", "nvme"};
  return loc >= 0 && loc < ZINC_LOC_N ? names[loc] : "unknown";
}

/* ------------------------------------------- the trainer's activations */

struct zinc_trainer_mem {
  char name[64];
  int location;
  uint64_t bytes;
};

static struct zinc_trainer_mem *trainer_mem_find(zinc_engine *e, const char *name) {
  for (int i = 0; i < e->ntmem; i++)
    if (!strcmp(e->tmem[i].name, name))
      return &e->tmem[i];
  return NULL;
}

zinc_status zinc_memory_register_activations(zinc_engine *e, const char *name, int location,
                                             uint64_t bytes) {
  if (!e || !name || !name[0] || strlen(name) >= sizeof e->tmem->name)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_register_activations: NULL engine, or a "
                      "name that is empty or longer than 63 bytes");
  if (location != ZINC_LOC_DEVICE && location != ZINC_LOC_HOST)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_register_activations(\"%s\"): location "
                      "%d is neither ZINC_LOC_DEVICE nor ZINC_LOC_HOST", name, location);
  if (bytes > (uint64_t)INT64_MAX)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_register_activations(\"%s\"): %llu bytes",
                      name, (unsigned long long)bytes);
  struct zinc_trainer_mem *t = trainer_mem_find(e, name);
  if (!t) {
    if (e->ntmem == e->captmem) {
      int cap = e->captmem ? 2 * e->captmem : 8;
      void *p = realloc(e->tmem, (size_t)cap * sizeof *e->tmem);
      if (!p)
        return zinc_error(ZINC_ERR_NOMEM, "out of memory registering activations \"%s\"",
                          name);
      e->tmem = p;
      e->captmem = cap;
    }
    t = &e->tmem[e->ntmem++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->bytes = 0;
    t->location = location;
  }
  zinc_prof_account(e->prof, t->location, ZINC_MEM_ACTIVATIONS, -(int64_t)t->bytes);
  t->location = location;
  t->bytes = bytes;
  zinc_prof_account(e->prof, location, ZINC_MEM_ACTIVATIONS, (int64_t)bytes);
  return ZINC_OK;
}

zinc_status zinc_memory_unregister_activations(zinc_engine *e, const char *name) {
  if (!e || !name)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_unregister_activations: NULL argument");
  struct zinc_trainer_mem *t = trainer_mem_find(e, name);
  if (!t)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_unregister_activations: \"%s\" is not "
                      "registered", name);
  zinc_prof_account(e->prof, t->location, ZINC_MEM_ACTIVATIONS, -(int64_t)t->bytes);
  *t = e->tmem[--e->ntmem];
  return ZINC_OK;
}

void zinc_memory_trainer_free(zinc_engine *e) {
  free(e->tmem);
  e->tmem = NULL;
  e->ntmem = e->captmem = 0;
}

const char *zinc_engine_location_name(const zinc_engine *e, int loc) {
  if (e && e->dev && !e->dev->ops->is_gpu) {
    if (loc == ZINC_LOC_DEVICE)
      return "host";
    if (loc == ZINC_LOC_HOST)
      return "host_offload";
  }
  return zinc_mem_location_name(loc);
}

zinc_status zinc_memory_stats(const zinc_engine *e, zinc_mem_stats *out) {
  if (!e || !out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_stats: NULL %s", e ? "out" : "engine");
  zinc_mem_stats s;
  ZINC_CHECK(zinc_abi_check(out, "zinc_mem_stats", "ZINC_MEM_STATS_INIT"));
  zinc_prof_stats(e->prof, &s);
  s.theoretical_model_states = e->built ? zinc_formula_model_states(e) : 0;
  if (e->dev && e->dev->ops->is_gpu)
    s.device_process = zinc_device_cuda_process_bytes(e->dev); /* NVML, -1 unknown */
  if (e->dev && e->dev->ops->mem_info) {
    int64_t fr = -1, tot = -1;
    if (e->dev->ops->mem_info(e->dev, &fr, &tot) == ZINC_OK) {
      s.device_free = fr;
      s.device_total = tot;
    }
  }
  return zinc_abi_write(out, &s, sizeof s, "zinc_mem_stats", "ZINC_MEM_STATS_INIT");
}
