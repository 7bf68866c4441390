/*
 * partial.c — partial optimizer offload (offload_optimizer.ratio
 * < 1 with device "cpu"; DeepSpeed's "twin-flow" offload): only a fraction
 * of the optimizer's sub-groups is offloaded to the CPU optimizer, the
 * others keep their fp32 master and moments on the device and are updated
 * there by the device's optimizer op, in the same step.
 *
 * Which sub-groups stay: the optimizer index space [0, opt_numel) is cut
 * into K sub-groups of G elements (zinc_offload_sub_group, the cut the
 * offloaded step uses); as DeepSpeed does, the first
 * floor((1 - ratio) K) of them stay on the device and the rest are
 * offloaded. D = that count x G elements (at most opt_numel):
 *
 *   optimizer elements  [0, D)             [D, opt_numel)
 *   master, exp_avg,    dev[a]: (D)        host[a]: (opt_numel - D)
 *   exp_avg_sq          on the device      in (pinned) host memory
 *   (fp32, or bf16 with the bf16 section's keys, on both sides)
 *   updated by          the device's op    the CPU optimizer (the staged
 *                                          pipeline of cpu.c on
 *                                          the cuda device, or with
 *                                          ZINC_OFFLOAD_STAGING=1)
 *
 * e->master / exp_avg / exp_avg_sq stay NULL: every access goes through
 * zinc_opt_read / zinc_opt_write (checkpoints, zinc_param_get_full, the
 * refresh after a load) and this file's step, so a checkpoint's format
 * does not depend on the ratio. The gradients stay where offload puts
 * them (stages 0-1 on the device, stages 2-3 the fp32 partition in host
 * memory, which a device kernel reads as pinned memory). The optimizer is
 * elementwise and both sides run the same per-element math
 * (kernels/zinc_math.h), so every ratio gives the bits of no offload.
 * Lamb's runs never cross a multiple of G (zinc_lamb_grid), so no run is
 * split between the two sides and its norms are summed in one piece.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

int zinc_partial_enabled(const zinc_engine *e) {
  return e->cfg.offload_optimizer.device == ZINC_OFFLOAD_CPU &&
         e->cfg.offload_optimizer.ratio < 1.0 && e->cfg.stage >= 1;
}

int64_t zinc_partial_device_numel(const zinc_engine *e) {
  if (!zinc_partial_enabled(e) || e->opt_numel <= 0)
    return 0;
  int64_t g = zinc_offload_sub_group(e);
  int64_t k = (e->opt_numel + g - 1) / g;
  int64_t on_device = (int64_t)((1.0 - e->cfg.offload_optimizer.ratio) * (double)k);
  int64_t d = on_device * g;
  return d < e->opt_numel ? d : e->opt_numel;
}

/* Bytes of one element of array a. */
static size_t es(const zinc_engine *e, int a) { return zinc_dtype_size(zinc_array_dtype(e, a)); }

void zinc_partial_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (!zinc_partial_enabled(e))
    return;
  uint64_t moved = (uint64_t)zinc_partial_device_numel(e) * zinc_opt_elem_bytes(e);
  bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] -= moved;
  bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] += moved;
}

static int slot_kept(const zinc_engine *e, int array) {
  return array == 0 || (array == 1 && (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG)) ||
         (array == 2 && (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG_SQ));
}

static const char *array_what(int array, int device) {
  static const char *names[2][3] = {
      {"fp32 master parameters (offloaded part)", "optimizer exp_avg (offloaded part)",
       "optimizer exp_avg_sq (offloaded part)"},
      {"fp32 master parameters (device part)", "optimizer exp_avg (device part)",
       "optimizer exp_avg_sq (device part)"}};
  return names[device][array];
}

zinc_status zinc_partial_alloc(zinc_engine *e) {
  zinc_partial *p = &e->pl->partial;
  if (e->cfg.offload_param.device == ZINC_OFFLOAD_NVME && e->cfg.stage == 3)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "zero_optimization.offload_optimizer.ratio %g "
                      "with offload_param.device \"nvme\": partial optimizer offload keeps "
                      "the parameter partition in memory; set ratio to 1, or offload_param "
                      "to \"cpu\"", e->cfg.offload_optimizer.ratio);
  p->device_numel = zinc_partial_device_numel(e);
  int64_t host_numel = e->opt_numel - p->device_numel;
  /* a side with no element allocates nothing (ratio 0 or 1) */
  for (int a = 0; a < 3; a++) {
    if (!slot_kept(e, a))
      continue;
    if (p->device_numel > 0)
      ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)p->device_numel * es(e, a),
                                          ZINC_LOC_DEVICE, ZINC_MEM_OPTIM, &p->dev[a],
                                          array_what(a, 1)));
    if (host_numel > 0)
      ZINC_CHECK(zinc_engine_buffer_alloc(e, (size_t)host_numel * es(e, a), ZINC_LOC_HOST,
                                          ZINC_MEM_OPTIM, &p->host[a], array_what(a, 0)));
  }
  zinc_log0(ZINC_LOG_INFO, "partial optimizer offload (ratio %g): %lld of %lld optimizer "
            "elements on the device, %lld offloaded", e->cfg.offload_optimizer.ratio,
            (long long)p->device_numel, (long long)e->opt_numel, (long long)host_numel);
  return ZINC_OK;
}

void zinc_partial_free(zinc_engine *e) {
  zinc_partial *p = &e->pl->partial;
  int64_t host_numel = e->opt_numel - p->device_numel;
  for (int a = 0; a < 3; a++) {
    zinc_engine_buffer_free(e, p->dev[a], (size_t)p->device_numel * es(e, a),
                            ZINC_LOC_DEVICE, ZINC_MEM_OPTIM);
    zinc_engine_buffer_free(e, p->host[a], (size_t)host_numel * es(e, a), ZINC_LOC_HOST,
                            ZINC_MEM_OPTIM);
  }
  memset(p, 0, sizeof *p);
}

/* Optimizer element x of array a: its address on whichever side holds it,
 * and how many elements follow it on that side. */
static void *state_at(const zinc_engine *e, int a, int64_t x, int64_t *left) {
  const zinc_partial *p = &e->pl->partial;
  if (x < p->device_numel) {
    *left = p->device_numel - x;
    return p->dev[a] ? (char *)p->dev[a] + (size_t)x * es(e, a) : NULL;
  }
  *left = e->opt_numel - x;
  return p->host[a] ? (char *)p->host[a] + (size_t)(x - p->device_numel) * es(e, a) : NULL;
}

zinc_status zinc_partial_opt_io(zinc_engine *e, int array, int64_t off, int64_t count,
                                float *host, int write) {
  while (count > 0) {
    int64_t left;
    void *at = state_at(e, array, off, &left);
    int64_t n = count < left ? count : left;
    if (zinc_array_dtype(e, array) == ZINC_BF16)
      ZINC_CHECK(zinc_place_bf16_io(e, at, n, host, write));
    else
      ZINC_CHECK(e->dev->ops->copy(e->dev, write ? (void *)at : (void *)host,
                                 write ? (const void *)host : (const void *)at, (size_t)n * 4,
                                 e->stream));
    off += n;
    host += n;
    count -= n;
  }
  return zinc_engine_sync(e);
}

/* segs[j] (run j) from optimizer element x0 to x1, its state on the side
 * that holds x0 (the caller never lets a piece cross D). */
static zinc_opt_seg piece_of(const zinc_engine *e, const zinc_opt_seg *s, const zinc_opt_run *r,
                             int64_t x0, int64_t x1) {
  zinc_opt_seg w = *s;
  int64_t skip = x0 - r->opt_offset, left;
  w.n = x1 - x0;
  w.global_offset = s->global_offset + skip;
  w.master = state_at(e, 0, x0, &left);
  w.exp_avg = state_at(e, 1, x0, &left);
  w.exp_avg_sq = state_at(e, 2, x0, &left);
  w.grad = (const char *)s->grad + (size_t)skip * zinc_dt_size(s->grad_dtype);
  if (s->param_out)
    w.param_out = (char *)s->param_out + (size_t)skip * zinc_dtype_size(s->param_dtype);
  return w;
}

zinc_status zinc_partial_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                              const zinc_opt_seg *segs, int nseg, int pass, double *norms) {
  int64_t d = e->pl->partial.device_numel;
  zinc_opt_seg *dev = NULL, *off = NULL;
  int ndev = 0, noff = 0;
  ZINC_CHECK(zinc_engine_host_calloc(e, (void **)&dev, (size_t)nseg + 1, sizeof *dev,
                                     "optimizer runs on the device"));
  zinc_status st = zinc_engine_host_calloc(e, (void **)&off, (size_t)nseg + 1, sizeof *off,
                                           "offloaded optimizer runs");
  for (int j = 0; st == ZINC_OK && j < nseg; j++) {
    const zinc_opt_run *r = &e->runs[j];
    int64_t a = r->opt_offset, b = r->opt_offset + segs[j].n;
    if (a < d && b > d && norms) {
      st = zinc_error(ZINC_ERR_INVALID, "partial optimizer offload: %s run %d [%lld, %lld) "
                      "crosses the device/host boundary %lld; its norms would be summed in "
                      "two pieces", zinc_opt_kind_name(c->kind), j, (long long)a,
                      (long long)b, (long long)d);
      break;
    }
    if (a < d)
      dev[ndev++] = piece_of(e, &segs[j], r, a, b < d ? b : d);
    if (b > d)
      off[noff++] = piece_of(e, &segs[j], r, a > d ? a : d, b);
  }
  /* the device's sub-groups first (queued on the engine's stream), then the
   * offloaded ones through the CPU optimizer; Lamb's norms by run: the
   * device's runs are [0, ndev), the offloaded ones follow */
  if (st == ZINC_OK && ndev > 0)
    st = e->dev->ops->optim(e->dev, e->stream, c, ncoef, dev, ndev, pass, norms);
  if (st == ZINC_OK && noff > 0) {
    double *off_norms = norms ? norms + 2 * (size_t)ndev : NULL;
    /* staged, or the cpu device: host memory is where its optimizer runs */
    st = zinc_offload_optim(e, c, ncoef, off, noff, pass, off_norms);
  }
  free(dev);
  free(off);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "partial optimizer offload (%lld of %lld elements on the "
                           "device)", (long long)d, (long long)e->opt_numel);
  return ZINC_OK;
}

/* --------------------------------------------------- the partial row */

static int partial_selects(const zinc_engine *e) { return zinc_partial_enabled(e); }

static void partial_row_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  zinc_place_grads_sizes(e, bytes);
  zinc_place_state_sizes(e, bytes);
  zinc_partial_sizes(e, bytes); /* part of the state on the device */
  bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += zinc_offload_staging_bytes(e);
}

static zinc_status partial_init(zinc_engine *e) {
  ZINC_CHECK(zinc_place_grads_alloc(e));
  ZINC_CHECK(zinc_partial_alloc(e)); /* instead of e->master, exp_avg, exp_avg_sq */
  return zinc_offload_init(e);
}

static void partial_row_free(zinc_engine *e) {
  zinc_offload_free(e);
  zinc_partial_free(e);
  zinc_place_memory_free(e);
}

const zinc_placement zinc_place_partial_row = {
    .name = "partial",
    .selects = partial_selects,
    .sizes = partial_row_sizes,
    .init = partial_init,
    .free = partial_row_free,
    .optim = zinc_partial_step,
    .opt_io = zinc_partial_opt_io,
};
