/*
 * build.c — allocation of the model states for the configured stage and the
 * parameters' initialisation through the trainer's zinc_init_fn.
 *
 * Every buffer is zero-filled at allocation, so alignment padding starts at
 * zero and (see layout.c) stays zero; only buffers whose every byte is
 * written before anything reads them skip it (zinc_engine_buffer_alloc_unzeroed). Parameter values come from the
 * trainer's init function, called once per parameter on every rank; the
 * values must agree across data-parallel ranks, which build checks with one
 * crc32c per parameter rather than trusting it.
 */
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/place/place.h"
#include "engine/reduce/reduce.h"
#include "engine/stage3/stage3.h"
#include "engine/support.h"

static size_t seg_bytes(const zinc_segment *s) {
  return (size_t)s->numel * zinc_dtype_size(s->dtype);
}

static size_t persistent_bytes(const zinc_engine *e) {
  size_t b = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    for (int s = 0; s < e->modules[mi]->nsegs; s++)
      if (e->modules[mi]->segs[s].persistent)
        b += seg_bytes(&e->modules[mi]->segs[s]);
  return b;
}

/* Stage 3 keeps a module's segment whole on every rank when it is below
 * stage3_param_persistence_threshold; on a small model (the threshold's
 * default, 1e5, against small layers) that can be every parameter, and
 * the run is stage 3 in name only: say so once, at build. */
static void note_persistent(const zinc_engine *e) {
  int persistent = 0, all = 0;
  unsigned long long bytes = 0; /* the parameters' own, without the segments' padding */
  for (int mi = 0; mi < e->nmodules; mi++) {
    const zinc_module *m = e->modules[mi];
    for (int i = 0; i < m->nparams; i++) {
      const zinc_param *p = m->params[i];
      all++;
      if (m->segs[p->segment].persistent) {
        persistent++;
        bytes += (unsigned long long)p->numel * zinc_dtype_size(p->dtype);
      }
    }
  }
  if (persistent > 0)
    zinc_log0(ZINC_LOG_INFO, "stage 3: %d of %d parameters persistent (%llu bytes): below "
              "stage3_param_persistence_threshold %lld, kept whole on every rank, not "
              "partitioned; lower the threshold to partition them", persistent, all, bytes,
              (long long)e->cfg.stage3_param_persistence_threshold);
}

/* What the build allocates for good, by location and category (the
 * estimator uses it too; the memory test holds the profiler to it). */
void zinc_build_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  memset(bytes, 0, sizeof(uint64_t) * ZINC_LOC_N * ZINC_MEM_NCAT);
  int stage = e->cfg.stage;
  if (stage < 3) {
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS] += e->full_bytes;
  } else {
    int param_loc = e->cfg.offload_param.device == ZINC_OFFLOAD_NONE ? ZINC_LOC_DEVICE
                                                                     : ZINC_LOC_HOST;
    if (e->cfg.offload_param.device != ZINC_OFFLOAD_NVME)
      bytes[param_loc][ZINC_MEM_PARAMS] += e->shard_bytes;
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS] += persistent_bytes(e);
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS] += e->secondary_bytes; /* hpZ */
  }
  if (stage <= 1) {
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += e->train_bytes; /* frozen: none */
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += zinc_grads_sum_bytes(e); /* f32 sums */
  } else { /* the partition itself: the placement's */
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] += zinc_grads_window_bytes(e); /* window sum */
    bytes[ZINC_LOC_DEVICE][ZINC_MEM_BUFFERS] += zinc_grads_ring_bytes(e);
  }
  /* optimizer state, gradient partition, staging, swap areas */
  zinc_place_sizes(e, bytes);
  zinc_reduce_sizes(e, bytes);
}

static zinc_status alloc_states(zinc_engine *e) {
  int stage = e->cfg.stage;
  e->master_in_params = zinc_master_aliases_params(e);
  if (e->cfg.bf16_master_weights_and_grads)
    zinc_log0(ZINC_LOG_INFO, "optimizer state: bf16 master weights, %s moments, rounded %s: "
              "%llu bytes per trained element (bf16 section)",
              e->cfg.bf16_optimizer_states ? "bf16" : "fp32",
              e->cfg.bf16_rounding ? "stochastically" : "to nearest even",
              (unsigned long long)zinc_opt_elem_bytes(e));
  e->opt_location = e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NONE ? ZINC_LOC_DEVICE
                                                                          : ZINC_LOC_HOST;
  /* parameters */
  if (stage < 3) {
    ZINC_CHECK(zinc_engine_buffer_alloc(e, e->full_bytes, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS,
                                        &e->param_full, "parameters"));
    size_t off = 0;
    for (int mi = 0; mi < e->nmodules; mi++)
      for (int s = 0; s < e->modules[mi]->nsegs; s++) {
        e->modules[mi]->segs[s].full = (char *)e->param_full + off;
        off += seg_bytes(&e->modules[mi]->segs[s]);
      }
  } else {
    e->param_location = e->cfg.offload_param.device == ZINC_OFFLOAD_NONE ? ZINC_LOC_DEVICE
                        : e->cfg.offload_param.device == ZINC_OFFLOAD_CPU ? ZINC_LOC_HOST
                                                                          : ZINC_LOC_NVME;
    if (e->param_location != ZINC_LOC_NVME) /* else the placement's swap area */
      ZINC_CHECK(zinc_engine_buffer_alloc(e, e->shard_bytes, e->param_location, ZINC_MEM_PARAMS,
                                          &e->param_shard, "parameter partition"));
    if (e->secondary_bytes) /* hpZ: filled by the gathers (stage3.c) */
      ZINC_CHECK(zinc_engine_buffer_alloc(e, e->secondary_bytes, ZINC_LOC_DEVICE,
                                          ZINC_MEM_PARAMS, &e->param_secondary,
                                          "secondary parameter partition (hpZ)"));
    e->persist_bytes = persistent_bytes(e);
    note_persistent(e);
    if (e->persist_bytes) {
      ZINC_CHECK(zinc_engine_buffer_alloc(e, e->persist_bytes, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS,
                                          &e->persist, "persistent parameters"));
      size_t off = 0;
      for (int mi = 0; mi < e->nmodules; mi++)
        for (int s = 0; s < e->modules[mi]->nsegs; s++) {
          zinc_segment *seg = &e->modules[mi]->segs[s];
          if (seg->persistent) {
            seg->full = (char *)e->persist + off;
            off += seg_bytes(seg);
          }
        }
    }
  }
  /* the gradient partition (stages 2-3; at 0-1 comm memory:
   * alloc_comm_buffers) and the optimizer state, where the placement keeps
   * them (for an all-f32 model on the device the master is the parameter
   * memory) */
  return zinc_place_init(e);
}

void zinc_build_free(zinc_engine *e) {
  if (!e->dev)
    return;
  zinc_grads_free(e);
  zinc_stage3_free(e);
  zinc_place_free(e); /* optimizer state, gradient partition */
  for (int mi = 0; mi < e->nmodules; mi++) {
    zinc_module *m = e->modules[mi];
    for (int s = 0; s < m->nsegs; s++)
      m->segs[s].full = m->segs[s].grad = NULL;
  }
  zinc_engine_comm_buffer_free(e, e->grad_full, e->train_bytes, ZINC_MEM_GRADS, e->grad_full_shared);
  zinc_engine_buffer_free(e, e->param_full, e->full_bytes, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS);
  if (e->param_location != ZINC_LOC_NVME)
    zinc_engine_buffer_free(e, e->param_shard, e->shard_bytes, e->param_location, ZINC_MEM_PARAMS);
  zinc_engine_buffer_free(e, e->persist, e->persist_bytes, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS);
  zinc_engine_buffer_free(e, e->param_secondary, e->secondary_bytes, ZINC_LOC_DEVICE,
                          ZINC_MEM_PARAMS);
  e->param_secondary = NULL;
  e->grad_full = e->param_full = e->param_shard = e->persist = NULL;
  free(e->units);
  free(e->runs);
  e->units = NULL;
  e->runs = NULL;
  e->nunits = e->nruns = 0;
}

/* ------------------------------------------------------------ init */

typedef struct {
  const float *values;   /* (numel) f32, host: the parameter from init */
  void *scratch;         /* (numel) 16-bit/f32 staging for conversions */
} init_ctx;

static zinc_status init_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                              int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  init_ctx *c = vctx;
  return zinc_put_owned_piece(e, u, r, chunk_off, c->values + param_off, len, 1, c->scratch);
}

static zinc_status init_params(zinc_engine *e, zinc_init_fn init, void *ctx) {
  int64_t largest = 1;
  for (int i = 0; i < e->nparams; i++)
    if (e->params[i]->numel > largest)
      largest = e->params[i]->numel;
  float *values = NULL;
  void *scratch = NULL;
  uint32_t *crc = NULL, *all_crc = NULL;
  zinc_status st;
  ZINC_CHECK_GOTO(zinc_calloc((void **)&values, (size_t)largest, 4, "parameter init"), st, agree);
  ZINC_CHECK_GOTO(zinc_calloc(&scratch, (size_t)largest, 4, "parameter init"), st, agree);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&crc, (size_t)e->nparams + 1, 4, "init checks"), st,
                  agree);
  ZINC_CHECK_GOTO(zinc_calloc((void **)&all_crc, ((size_t)e->nparams + 1) * (size_t)e->dp_size,
                              4, "init checks"), st, agree);
  for (int i = 0; i < e->nparams; i++) {
    zinc_param *p = e->params[i];
    memset(values, 0, (size_t)p->numel * 4);
    if (init) {
      zinc_error_clear(); /* what the function says, or nothing */
      st = init(p, values, p->numel, ctx);
      if (st != ZINC_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", zinc_last_error());
        zinc_error(st, "zinc_init_fn returned %s for \"%s.%s\"%s%s", zinc_status_name(st),
                   p->module->name, p->name, *why ? ": " : " (it set no message)", why);
        goto agree;
      }
    }
    crc[i] = zinc_crc32c(0, values, (size_t)p->numel * 4);
    init_ctx c = {values, scratch};
    ZINC_CHECK_GOTO(zinc_layout_for_each_piece(e, p, init_piece, &c), st, agree);
    zinc_segment *seg = &p->module->segs[p->segment];
    if (seg->full)
      ZINC_CHECK_GOTO(zinc_engine_put(e, (char *)seg->full +
                                             (size_t)p->seg_offset * zinc_dtype_size(p->dtype),
                                      p->dtype, values, p->numel, scratch), st, agree);
  }
  st = zinc_engine_sync(e);
agree:
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->world, st), st, out);
  /* every data-parallel rank must hold the same values */
  ZINC_CHECK_GOTO(zinc_comm_allgather(e->dp_host, crc, all_crc, (size_t)e->nparams + 1,
                                      ZINC_DT_I32), st, out);
  for (int i = 0; i < e->nparams; i++)
    for (int r = 1; r < e->dp_size; r++)
      if (all_crc[(size_t)r * ((size_t)e->nparams + 1) + (size_t)i] != all_crc[i]) {
        st = zinc_error(ZINC_ERR_INVALID, "zinc_init_fn gave different values for \"%s.%s\" "
                        "on data-parallel ranks 0 and %d; initialise from the same seed on "
                        "every rank", e->params[i]->module->name, e->params[i]->name, r);
        goto out;
      }
  st = ZINC_OK;
out:
  free(values);
  free(scratch);
  free(crc);
  free(all_crc);
  return st;
}

/* The memory collectives read from, allocated together after every rank
 * has its local buffers: the full gradients at stages 0-1, the gradient
 * bucket ring at stages 2-3. */
static zinc_status alloc_comm_buffers(zinc_engine *e) {
  if (e->cfg.stage <= 1)
    return zinc_engine_comm_buffer_alloc(e, e->train_bytes, ZINC_MEM_GRADS, &e->grad_full,
                                         &e->grad_full_shared, "gradients");
  e->arena_bytes = zinc_grads_ring_bytes(e);
  return zinc_engine_comm_buffer_alloc(e, e->arena_bytes, ZINC_MEM_BUFFERS, &e->arena_base,
                                       &e->arena_shared, "gradient buckets");
}

/* Each phase is local work, then agreement across the world, so that a
 * rank that fails (an allocation, the trainer's init function, a swap
 * file) stops its peers before the next collective instead of leaving
 * them inside it. */
zinc_status zinc_build_buffers(zinc_engine *e, zinc_init_fn init, void *ctx) {
  ZINC_CHECK(zinc_engine_agree(e, e->world, alloc_states(e)));
  ZINC_CHECK(alloc_comm_buffers(e));
  return init_params(e, init, ctx);
}
