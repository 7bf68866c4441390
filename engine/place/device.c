/*
 * device.c — the device placement, the row every other row falls back to
 * (place.h): the optimizer state as three f32 arrays of opt_numel
 * elements at opt_location (the device, or host memory with
 * offload_optimizer "cpu", where the cpu device's optimizer reads it), the
 * reduced gradient partition (stages 2-3) as one f32 array of the trained
 * shard beside it, and the stage-3 parameter partition where the build
 * put it (param_shard at param_location). The device's optimizer op steps
 * them in place on the engine's stream.
 *
 * For an all-f32 model with its state on the device the fp32 master is the
 * parameter memory itself (master_in_params): e->master stays NULL and the
 * accessors (access.c) read the parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

/* Where the in-memory state lives, from the settings (the estimator's bare
 * engine has no opt_location). */
static int memory_location(const zinc_engine *e) {
  return e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NONE ? ZINC_LOC_DEVICE : ZINC_LOC_HOST;
}

int zinc_place_memory_grad_location(const zinc_engine *e) { return memory_location(e); }

static int grads_in_memory(const zinc_engine *e) {
  return e->cfg.stage >= 2 && zinc_place_grad_location(e) != ZINC_LOC_NVME;
}

void zinc_place_grads_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  if (grads_in_memory(e))
    bytes[memory_location(e)][ZINC_MEM_GRADS] += (uint64_t)e->train_shard_numel * 4;
}

void zinc_place_state_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  uint64_t n = (uint64_t)e->opt_numel; /* trained units only */
  bytes[memory_location(e)][ZINC_MEM_OPTIM] += zinc_opt_elem_bytes(e) * n;
}

static void device_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  zinc_place_grads_sizes(e, bytes);
  zinc_place_state_sizes(e, bytes);
}

zinc_status zinc_place_grads_alloc(zinc_engine *e) {
  if (!grads_in_memory(e))
    return ZINC_OK;
  return zinc_engine_buffer_alloc(e, (size_t)e->train_shard_numel * 4, e->opt_location,
                                  ZINC_MEM_GRADS, (void **)&e->grad_part, "gradient partition");
}

/* Bytes of optimizer array `array` (0 master, 1-2 the moments). */
static size_t array_bytes(const zinc_engine *e, int array) {
  return (size_t)e->opt_numel * zinc_dtype_size(zinc_array_dtype(e, array));
}

zinc_status zinc_place_state_alloc(zinc_engine *e) {
  if (!e->master_in_params)
    ZINC_CHECK(zinc_engine_buffer_alloc(e, array_bytes(e, 0), e->opt_location, ZINC_MEM_OPTIM,
                                        &e->master,
                                        zinc_master_dtype(e) == ZINC_BF16
                                            ? "bf16 master parameters"
                                            : "fp32 master parameters"));
  /* only the slots this optimizer keeps (optim/optimizer.h) */
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG)
    ZINC_CHECK(zinc_engine_buffer_alloc(e, array_bytes(e, 1), e->opt_location, ZINC_MEM_OPTIM,
                                        &e->exp_avg, "optimizer exp_avg"));
  if (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG_SQ)
    ZINC_CHECK(zinc_engine_buffer_alloc(e, array_bytes(e, 2), e->opt_location, ZINC_MEM_OPTIM,
                                        &e->exp_avg_sq, "optimizer exp_avg_sq"));
  return ZINC_OK;
}

static zinc_status device_init(zinc_engine *e) {
  ZINC_CHECK(zinc_place_grads_alloc(e));
  return zinc_place_state_alloc(e);
}

void zinc_place_memory_free(zinc_engine *e) {
  if (e->master)
    zinc_engine_buffer_free(e, e->master, array_bytes(e, 0), e->opt_location, ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, e->exp_avg, array_bytes(e, 1), e->opt_location, ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, e->exp_avg_sq, array_bytes(e, 2), e->opt_location,
                          ZINC_MEM_OPTIM);
  zinc_engine_buffer_free(e, e->grad_part, (size_t)e->train_shard_numel * 4, e->opt_location,
                          ZINC_MEM_GRADS);
  e->master = e->exp_avg = e->exp_avg_sq = e->grad_part = NULL;
}

zinc_status zinc_place_device_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                                    const zinc_opt_seg *segs, int nseg, int pass,
                                    double *norms) {
  return e->dev->ops->optim(e->dev, e->stream, c, ncoef, segs, nseg, pass, norms);
}

static void *opt_array(zinc_engine *e, int array) {
  return array == 0 ? e->master : array == 1 ? e->exp_avg : e->exp_avg_sq;
}

/* A bf16 array through f32 host values: widened exactly on read, rounded
 * to nearest even on write (a checkpoint of fp32 states loaded into a
 * bf16-state run), a bounded piece at a time. */
zinc_status zinc_place_bf16_io(zinc_engine *e, void *at, int64_t count, float *host,
                               int write) {
  enum { PIECE = 1 << 16 };
  uint16_t *tmp = NULL;
  zinc_status st = zinc_calloc((void **)&tmp, count < PIECE ? (size_t)count : PIECE, 2,
                               "bf16 optimizer state staging");
  for (int64_t x = 0; x < count && st == ZINC_OK; x += PIECE) {
    int64_t n = count - x < PIECE ? count - x : PIECE;
    if (write) {
      for (int64_t i = 0; i < n; i++)
        tmp[i] = zinc_f32_to_bf16(host[x + i]);
      st = e->dev->ops->copy(e->dev, (char *)at + x * 2, tmp, (size_t)n * 2, e->stream);
      if (st == ZINC_OK)
        st = zinc_engine_sync(e);
    } else {
      st = e->dev->ops->copy(e->dev, tmp, (char *)at + x * 2, (size_t)n * 2, e->stream);
      if (st == ZINC_OK)
        st = zinc_engine_sync(e);
      for (int64_t i = 0; i < n && st == ZINC_OK; i++)
        host[x + i] = zinc_bf16_to_f32(tmp[i]);
    }
  }
  free(tmp);
  return st;
}

/* One device copy (per chunk when the master is the parameter memory). */
static zinc_status device_opt_io(zinc_engine *e, int array, int64_t off, int64_t count,
                                 float *host, int write) {
  if (zinc_array_dtype(e, array) == ZINC_BF16)
    return zinc_place_bf16_io(e, (char *)opt_array(e, array) + off * 2, count, host, write);
  while (count > 0) {
    float *at;
    int64_t n = count;
    if (array == 0 && e->master_in_params) {
      int64_t left;
      at = zinc_master_in_params(e, off, &left);
      n = count < left ? count : left;
    } else {
      at = (float *)opt_array(e, array) + off;
    }
    ZINC_CHECK(e->dev->ops->copy(e->dev, write ? (void *)at : (void *)host,
                                 write ? (const void *)host : (const void *)at, (size_t)n * 4,
                                 e->stream));
    off += n;
    host += n;
    count -= n;
  }
  return zinc_engine_sync(e);
}

static zinc_status device_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst) {
  ZINC_CHECK(e->dev->ops->copy(e->dev, dst, e->grad_part + off, (size_t)count * 4, e->stream));
  return zinc_engine_sync(e);
}

static zinc_status device_grad_accumulate(zinc_engine *e, int64_t off, const void *src,
                                          int dtype, int64_t count, int overwrite) {
  if (!src)
    ZINC_CHECK(e->dev->ops->fill_zero(e->dev, e->grad_part + off, (size_t)count * 4, e->stream));
  else
    ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, e->grad_part + off, src, dtype,
                                           count, overwrite));
  return zinc_engine_sync(e);
}

zinc_status zinc_place_memory_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data,
                                        int write) {
  char *at = (char *)e->param_shard + off;
  ZINC_CHECK(e->dev->ops->copy(e->dev, write ? (void *)at : data,
                               write ? (const void *)data : (const void *)at, bytes, e->stream));
  return zinc_engine_sync(e);
}

/* The partition is memory: a fetch reads no buffer. */
static void *no_buffer_take(zinc_engine *e, size_t bytes) {
  (void)e;
  (void)bytes;
  return NULL;
}

static void no_buffer_give(zinc_engine *e, void *buf) {
  (void)e;
  (void)buf;
}

const zinc_placement zinc_place_device_row = {
    .name = "device",
    .selects = NULL, /* always: the last row */
    .sizes = device_sizes,
    .init = device_init,
    .free = zinc_place_memory_free,
    .optim = zinc_place_device_optim,
    .opt_io = device_opt_io,
    .grad_location = zinc_place_memory_grad_location,
    .grad_read = device_grad_read,
    .grad_accumulate = device_grad_accumulate,
    .pshard_io = zinc_place_memory_pshard_io,
    .param_buffer_take = no_buffer_take,
    .param_buffer_give = no_buffer_give,
};
