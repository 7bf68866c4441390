/*
 * nvme.c — state that lives on NVMe (ZeRO-Infinity): the swap areas of
 * the optimizer state, the reduced gradient partition and the stage-3
 * parameter partition, their set-up and sizes, and their block-aligned
 * reads and writes for the accessors (access.c: zinc_opt_read/write,
 * zinc_pshard_read/write) and for the gradient reduction. The optimizer
 * step's sub-group pipeline over them is nvme_step.c's (nvme.h: the state
 * both share).
 *
 * Optimizer swap area (offload_optimizer.device nvme): the rank's optimizer
 * index space [0, opt_numel) is cut into sub-groups of G elements
 * (sub_group_size, at most the shard); region k holds sub-group k as the
 * master and the state slots the optimizer keeps (optim/optimizer.h), in
 * this order, each G_k f32:
 *   Adam, AdamW, Lamb         [master | exp_avg | exp_avg_sq]   12 B/element
 *   Lion, SGD with momentum   [master | exp_avg]                 8 B/element
 *   Adagrad                   [master | exp_avg_sq]              8 B/element
 *   SGD without momentum      [master]                           4 B/element
 * A region takes whole aio.block_size blocks on disk, each carrying
 * block_size - max(alignment, 4096) payload bytes (offload/swap.h). The step
 * keeps buffer_count host buffers of one sub-group each and overlaps
 * read(k+1) | update(k) | write(k-1): host memory for the optimizer is
 * buffer_count x 4 (1 + slots) x G bytes, whatever the model size.
 *
 * Gradient swap area (offload_optimizer.device nvme at stages 2-3 on the
 * cpu device, zinc_nvme_grads_swapped): the reduced fp32 gradient
 * partition, region k holding sub-group k's G_k gradients (the optimizer
 * index space is the shard at stages 1-3), instead of a host array of the
 * whole partition. The reduction adds each chunk into it through the
 * bounce buffer and one sub-group's scratch (zinc_nvme_grad_accumulate:
 * read, the device's own f32 accumulation, write); the norm reads it a
 * unit's chunk at a time (step.c); the step reads region k into the
 * gradient buffer of the sub-group's state buffer alongside its state.
 * Host memory for the gradients: buffer_count x 4 G bytes. Elsewhere (the
 * cuda device, gradient compression or a communication_data_type, PowerSGD, DGC's momentum, the 1-bit
 * and 0/1 optimizers) the partition stays in host memory.
 *
 * Parameter swap area (offload_param.device nvme, stage 3): one region of
 * shard_bytes holding this rank's chunks in shard order; a fetch (or a
 * prefetch) reads the module's contiguous byte range of it into one of
 * offload_param.buffer_count host buffers (pinned on the cuda device),
 * copies each chunk into its own slot of the gathered buffer in device
 * memory and all-gathers in place there (stage3.c), so NCCL never reads
 * host memory; the host buffer is free again once the copies are done.
 * Each buffer is as large as the largest module's range, which must fit
 * in offload_param.buffer_size elements (checked at build); when all are
 * in use, stage3.c completes the oldest gather to free one. The step
 * writes each sub-group's updated partition bytes back to the region.
 *
 * Swap reads and writes start at block boundaries (offload/swap.h); the
 * accessors read (and for writes, modify and write back) the covering
 * blocks through one bounce buffer, a bounded piece at a time.
 *
 * Any I/O failure is returned with its message (file, offset, errno or
 * checksum); the caller stops the engine, since the state on disk may be
 * half-written.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/grads.h"
#include "engine/memory/profiler.h"
#include "engine/place/nvme.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/stage3/stage3.h"
#include "engine/support.h"
#include "offload/aio.h"
#include "offload/swap.h"

/* ------------------------------------------------------------ set-up */

static zinc_status area_zero(zinc_swap *sw, void *zeros, size_t zbytes) {
  uint64_t bs = zinc_swap_block_bytes(sw);
  uint64_t step = zbytes / bs * bs;
  for (int r = 0; r < zinc_swap_region_count(sw); r++) {
    uint64_t total = zinc_swap_region_bytes(sw, r);
    for (uint64_t off = 0; off < total; off += step) {
      uint64_t n = total - off < step ? total - off : step;
      ZINC_CHECK(zinc_swap_write(sw, r, off, zeros, n, NULL));
    }
  }
  return ZINC_OK;
}

/* Sub-group size and count of the optimizer's swap area: at most a
 * staging slot on every device, so that the host buffers (and the
 * estimator's figure for them) do not depend on whether the step stages. */
static void opt_groups(const zinc_engine *e, int64_t *group, int *ngroups) {
  int64_t g = zinc_offload_staging_group(e);
  int64_t n = (e->opt_numel + g - 1) / g;
  *group = g;
  *ngroups = n > 0 ? (int)n : 1;
}

/* The arrays a region holds: the master, then each kept slot, each in its
 * dtype (place.h). at[a] is array a's position (-1 when the optimizer does
 * not keep it), pre[a] the bytes per element of the arrays before it;
 * returns their count, *elem_bytes the bytes per element of them all. */
static int opt_arrays(const zinc_engine *e, int at[3], uint64_t pre[3], uint64_t *elem_bytes) {
  int n = 0;
  uint64_t b = 0;
  for (int a = 0; a < 3; a++) {
    int kept = a == 0 || (a == 1 && (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG)) ||
               (a == 2 && (e->opt_slots & ZINC_OPT_SLOT_EXP_AVG_SQ));
    at[a] = kept ? n++ : -1;
    pre[a] = b;
    b += kept ? zinc_dtype_size(zinc_array_dtype(e, a)) : 0;
  }
  *elem_bytes = b;
  return n;
}

static int opt_buffers(const zinc_engine *e, int ngroups) {
  int64_t want = e->cfg.offload_optimizer.buffer_count;
  int nbuf = want < 1 ? 1 : want > NVME_MAX_BUFFERS ? NVME_MAX_BUFFERS : (int)want;
  return nbuf > ngroups ? ngroups : nbuf;
}

/* A sub-group's gradient buffer: in whole 4 KiB (the usual alignment, and
 * the one the estimator assumes), so that the estimate is the build's. */
static uint64_t grad_buffer_bytes(int64_t g, size_t align) {
  return zinc_round_up(region_bytes(4, g), align > 4096 ? align : 4096);
}

/* Swap blocks hold block_bytes of payload in a slot of aio.block_size. */
static uint64_t swap_disk_bytes(const zinc_engine *e, uint64_t region_bytes, size_t align) {
  uint64_t slot = (uint64_t)e->cfg.aio_block_size;
  uint64_t header = align > 4096 ? align : 4096;
  return zinc_div_up(region_bytes, slot - header) * slot;
}

/* Parameter read buffers: offload_param.buffer_count of them, each as large
 * as the largest module's range of this rank's partition, which must fit in
 * buffer_size elements (of the widest parameter dtype). */
static void param_buffers(const zinc_engine *e, int *count, size_t *bytes) {
  int64_t want = e->cfg.offload_param.buffer_count;
  *count = want < 1 ? 1 : want > NVME_MAX_PARAM_BUFFERS ? NVME_MAX_PARAM_BUFFERS : (int)want;
  *bytes = zinc_stage3_largest_read(e, NULL);
}

static size_t widest_param(const zinc_engine *e) {
  return e->psi[ZINC_F32] > 0 ? 4 : 2;
}

zinc_status zinc_nvme_check_config(const zinc_engine *e) {
  if (!(e->cfg.stage == 3 && e->cfg.offload_param.device == ZINC_OFFLOAD_NVME))
    return ZINC_OK;
  const char *name = NULL;
  size_t need = zinc_stage3_largest_read(e, &name);
  size_t es = widest_param(e);
  if (need > (size_t)e->cfg.offload_param.buffer_size * es)
    return zinc_error(ZINC_ERR_CONFIG, "zero_optimization.offload_param.buffer_size is %lld "
                      "elements, but a fetch of module \"%s\" reads %zu elements of this "
                      "rank's partition from NVMe at once; raise buffer_size to at least %zu",
                      (long long)e->cfg.offload_param.buffer_size, name ? name : "?",
                      (need + es - 1) / es, (need + es - 1) / es);
  return ZINC_OK;
}

void zinc_nvme_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  int opt_nvme = e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NVME;
  int param_nvme = e->cfg.stage == 3 && e->cfg.offload_param.device == ZINC_OFFLOAD_NVME;
  if (!opt_nvme && !param_nvme)
    return;
  /* the I/O alignment is probed when the swap area is created: 4096 (the
   * usual, and the largest header) for an engine not built (estimator) */
  size_t align = nvme_of(e) && nvme_of(e)->aio ? zinc_aio_alignment(nvme_of(e)->aio) : 4096;
  if (opt_nvme) {
    int64_t g;
    int ng, at[3];
    uint64_t pre[3], arrays; /* bytes per element of every array */
    opt_arrays(e, at, pre, &arrays);
    opt_groups(e, &g, &ng);
    uint64_t disk = 0;
    for (int k = 0; k < ng; k++) {
      int64_t len = e->opt_numel - (int64_t)k * g < g ? e->opt_numel - (int64_t)k * g : g;
      disk += swap_disk_bytes(e, region_bytes(arrays, len), align);
    }
    bytes[ZINC_LOC_NVME][ZINC_MEM_OPTIM] += disk;
    bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] +=
        (uint64_t)opt_buffers(e, ng) * zinc_round_up(region_bytes(arrays, g), align);
    if (zinc_nvme_grads_swapped(e)) {
      uint64_t gdisk = 0;
      for (int k = 0; k < ng; k++) {
        int64_t len = e->opt_numel - (int64_t)k * g < g ? e->opt_numel - (int64_t)k * g : g;
        gdisk += swap_disk_bytes(e, region_bytes(4, len), align);
      }
      bytes[ZINC_LOC_NVME][ZINC_MEM_GRADS] += gdisk;
      bytes[ZINC_LOC_HOST][ZINC_MEM_GRADS] +=
          (uint64_t)opt_buffers(e, ng) * grad_buffer_bytes(g, align);
    }
  }
  if (param_nvme) {
    /* max_in_cpu: the cached prefix in host memory, the rest on disk */
    bytes[ZINC_LOC_HOST][ZINC_MEM_PARAMS] += zinc_pcache_plan(e, NULL, NULL);
    bytes[ZINC_LOC_NVME][ZINC_MEM_PARAMS] += swap_disk_bytes(e, zinc_pcache_disk_bytes(e), align);
    int nb;
    size_t pb;
    param_buffers(e, &nb, &pb);
    bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += (uint64_t)nb * pb;
  }
  uint64_t header = align > 4096 ? align : 4096;
  bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] +=
      zinc_round_up(((uint64_t)e->cfg.aio_block_size - header) * BOUNCE_BLOCKS, align);
}

zinc_status zinc_nvme_init(zinc_engine *e) {
  int opt_nvme = e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NVME;
  int param_nvme = e->cfg.stage == 3 && e->cfg.offload_param.device == ZINC_OFFLOAD_NVME;
  if (!opt_nvme && !param_nvme)
    return ZINC_OK;
  zinc_nvme *n = NULL;
  ZINC_CHECK(zinc_calloc((void **)&n, 1, sizeof *n, "NVMe offload"));
  e->pl->nvme = n;
  zinc_aio_params ap;
  zinc_aio_params_from_settings(&e->cfg, &ap);
  zinc_status st = zinc_aio_create(&ap, &n->aio);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "NVMe offload");
  const zinc_offload_settings *os = opt_nvme ? &e->cfg.offload_optimizer : &e->cfg.offload_param;
  uint64_t *regions = NULL;
  if (opt_nvme) {
    opt_groups(e, &n->group, &n->ngroups);
    n->arrays = opt_arrays(e, n->at, n->pre, &n->elem_bytes);
    ZINC_CHECK(zinc_calloc((void **)&regions, (size_t)n->ngroups, sizeof *regions, "regions"));
    for (int k = 0; k < n->ngroups; k++)
      regions[k] = region_bytes(n->elem_bytes, group_len(n, e->opt_numel, k));
    zinc_swap_params sp = {.paths = (const char *const *)os->nvme_paths,
                           .path_count = os->nvme_path_count,
                           .rank = e->world_rank,
                           .name = "optimizer",
                           .checksums = e->cfg.aio_swap_checksums,
                           .region_bytes = regions,
                           .region_count = n->ngroups};
    st = zinc_swap_create(n->aio, &sp, &n->opt);
    free(regions);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "creating the optimizer's swap area");
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_OPTIM,
                      (int64_t)zinc_swap_disk_bytes(n->opt));
    n->nbuf = opt_buffers(e, n->ngroups);
    n->buf_bytes = zinc_swap_buffer_bytes(n->opt, region_bytes(n->elem_bytes, n->group));
    for (int b = 0; b < n->nbuf; b++) {
      ZINC_CHECK(zinc_aio_buffer_alloc(n->aio, n->buf_bytes, (void **)&n->buf[b]));
      n->host_bytes += n->buf_bytes;
      zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_OPTIM, (int64_t)n->buf_bytes);
    }
  }
  if (opt_nvme && zinc_nvme_grads_swapped(e)) {
    ZINC_CHECK(zinc_calloc((void **)&regions, (size_t)n->ngroups, sizeof *regions, "regions"));
    for (int k = 0; k < n->ngroups; k++)
      regions[k] = region_bytes(4, group_len(n, e->opt_numel, k));
    zinc_swap_params sp = {.paths = (const char *const *)os->nvme_paths,
                           .path_count = os->nvme_path_count,
                           .rank = e->world_rank,
                           .name = "gradient",
                           .checksums = e->cfg.aio_swap_checksums,
                           .region_bytes = regions,
                           .region_count = n->ngroups};
    st = zinc_swap_create(n->aio, &sp, &n->grad);
    free(regions);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "creating the gradients' swap area");
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_GRADS,
                      (int64_t)zinc_swap_disk_bytes(n->grad));
    n->gbuf_bytes = grad_buffer_bytes(n->group, zinc_aio_alignment(n->aio));
    for (int b = 0; b < n->nbuf; b++) {
      ZINC_CHECK(zinc_aio_buffer_alloc(n->aio, n->gbuf_bytes, (void **)&n->gbuf[b]));
      n->host_bytes += n->gbuf_bytes;
      zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_GRADS, (int64_t)n->gbuf_bytes);
    }
  }
  if (param_nvme) {
    const zinc_offload_settings *ps = &e->cfg.offload_param;
    ZINC_CHECK(zinc_pcache_init(e)); /* max_in_cpu: a prefix stays in host memory */
    uint64_t pbytes = zinc_pcache_disk_bytes(e);
    zinc_swap_params sp = {.paths = (const char *const *)ps->nvme_paths,
                           .path_count = ps->nvme_path_count,
                           .rank = e->world_rank,
                           .name = "param",
                           .checksums = e->cfg.aio_swap_checksums,
                           .region_bytes = &pbytes,
                           .region_count = 1};
    st = zinc_swap_create(n->aio, &sp, &n->param);
    if (st != ZINC_OK)
      return zinc_error_wrap(st, "creating the parameters' swap area");
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_PARAMS,
                      (int64_t)zinc_swap_disk_bytes(n->param));
    ZINC_CHECK(zinc_nvme_check_config(e));
    param_buffers(e, &n->npbuf, &n->pbuf_bytes);
    for (int b = 0; b < n->npbuf && n->pbuf_bytes > 0; b++)
      ZINC_CHECK(zinc_engine_buffer_alloc(e, n->pbuf_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS,
                                          &n->pbuf[b], "parameter read buffers"));
  }
  zinc_swap *any = n->opt ? n->opt : n->param;
  n->bounce_bytes = zinc_swap_buffer_bytes(any, zinc_swap_block_bytes(any) * BOUNCE_BLOCKS);
  ZINC_CHECK(zinc_aio_buffer_alloc(n->aio, n->bounce_bytes, &n->bounce));
  n->host_bytes += n->bounce_bytes;
  zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, (int64_t)n->bounce_bytes);
  /* every block starts written (zeros): reads of untouched state are data.
   * The zeros are written by the host and the swap writes below wait for
   * their completion; no device work touches these buffers (the parameter
   * read buffers are zeroed on the host at allocation: support.c) */
  memset(n->bounce, 0, n->bounce_bytes);
  if (n->opt)
    ZINC_CHECK(area_zero(n->opt, n->bounce, n->bounce_bytes));
  if (n->grad)
    ZINC_CHECK(area_zero(n->grad, n->bounce, n->bounce_bytes));
  if (n->param)
    ZINC_CHECK(area_zero(n->param, n->bounce, n->bounce_bytes));
  zinc_log0(ZINC_LOG_INFO, "NVMe offload: %s%s%s%s, %d sub-groups of %lld elements (%d "
            "arrays each, %llu bytes per element), %d host buffers of %.1f MiB",
            n->opt ? "optimizer state" : "", n->grad ? " and gradients" : "",
            n->opt && n->param ? " and " : "", n->param ? "parameters" : "", n->ngroups,
            (long long)n->group, n->arrays, (unsigned long long)n->elem_bytes, n->nbuf,
            (double)n->buf_bytes / (1 << 20));
  return ZINC_OK;
}

void *zinc_nvme_param_buffer_take(zinc_engine *e, size_t bytes) {
  zinc_nvme *n = nvme_of(e);
  if (!n || bytes > n->pbuf_bytes)
    return NULL;
  for (int b = 0; b < n->npbuf; b++)
    if (!n->pbuf_busy[b]) {
      n->pbuf_busy[b] = 1;
      return n->pbuf[b];
    }
  return NULL;
}

void zinc_nvme_param_buffer_give(zinc_engine *e, void *buf) {
  zinc_nvme *n = nvme_of(e);
  for (int b = 0; n && b < n->npbuf; b++)
    if (n->pbuf[b] == buf)
      n->pbuf_busy[b] = 0;
}

void zinc_nvme_free(zinc_engine *e) {
  zinc_nvme *n = nvme_of(e);
  zinc_pcache_free(e);
  if (!n)
    return;
  for (int b = 0; b < n->npbuf; b++)
    if (n->pbuf[b])
      zinc_engine_buffer_free(e, n->pbuf[b], n->pbuf_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  for (int b = 0; b < n->nbuf; b++) {
    if (n->rd[b])
      zinc_aio_wait(n->rd[b]);
    if (n->wr[b])
      zinc_aio_wait(n->wr[b]);
    if (n->buf[b]) {
      zinc_aio_buffer_free(n->aio, n->buf[b]);
      zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_OPTIM, -(int64_t)n->buf_bytes);
    }
    if (n->grd[b])
      zinc_aio_wait(n->grd[b]);
    if (n->gbuf[b]) {
      zinc_aio_buffer_free(n->aio, n->gbuf[b]);
      zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_GRADS, -(int64_t)n->gbuf_bytes);
    }
  }
  if (n->grad) {
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_GRADS,
                      -(int64_t)zinc_swap_disk_bytes(n->grad));
    zinc_swap_destroy(n->grad);
  }
  if (n->bounce) {
    zinc_aio_buffer_free(n->aio, n->bounce);
    zinc_prof_account(e->prof, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, -(int64_t)n->bounce_bytes);
  }
  if (n->opt) {
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_OPTIM,
                      -(int64_t)zinc_swap_disk_bytes(n->opt));
    zinc_swap_destroy(n->opt);
  }
  if (n->param) {
    zinc_prof_account(e->prof, ZINC_LOC_NVME, ZINC_MEM_PARAMS,
                      -(int64_t)zinc_swap_disk_bytes(n->param));
    zinc_swap_destroy(n->param);
  }
  zinc_aio_destroy(n->aio);
  free(n);
  e->pl->nvme = NULL;
}

int zinc_nvme_opt_on_disk(const zinc_engine *e) { return nvme_of(e) && nvme_of(e)->opt; }
int zinc_nvme_param_on_disk(const zinc_engine *e) { return nvme_of(e) && nvme_of(e)->param; }
int zinc_nvme_grads_on_disk(const zinc_engine *e) { return nvme_of(e) && nvme_of(e)->grad; }

int zinc_nvme_grads_swapped(const zinc_engine *e) {
  const zinc_settings *s = &e->cfg;
  int gpu = e->dev ? e->dev->ops->is_gpu : e->sized_as_gpu;
  return s->offload_optimizer.device == ZINC_OFFLOAD_NVME && s->stage >= 2 && !gpu &&
         zinc_grads_plain(e) && s->optimizer <= ZINC_OPTIM_SGD;
}

/* ------------------------------------------------ block-aligned bytes */

/* Read or write bytes [off, off + len) of a region through the bounce
 * buffer: covering blocks are read; for writes modified and written back. */
static zinc_status region_io(zinc_nvme *n, zinc_swap *sw, int region, uint64_t off, void *data,
                             uint64_t len, int write) {
  uint64_t bs = zinc_swap_block_bytes(sw), total = zinc_swap_region_bytes(sw, region);
  uint64_t span = bs * (BOUNCE_BLOCKS - 1); /* room for the misaligned head */
  char *p = data;
  while (len > 0) {
    uint64_t a = off / bs * bs;
    uint64_t take = len;
    if (off - a + take > span)
      take = span - (off - a);
    uint64_t b = (off + take + bs - 1) / bs * bs;
    if (b > total)
      b = total;
    int whole = write && a == off && b == off + take;
    if (!whole)
      ZINC_CHECK(zinc_swap_read(sw, region, a, n->bounce, b - a, NULL));
    if (write) {
      memcpy((char *)n->bounce + (off - a), p, take);
      ZINC_CHECK(zinc_swap_write(sw, region, a, n->bounce, b - a, NULL));
    } else {
      memcpy(p, (char *)n->bounce + (off - a), take);
    }
    p += take;
    off += take;
    len -= take;
  }
  return ZINC_OK;
}

zinc_status zinc_nvme_opt_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                             int write) {
  zinc_nvme *n = nvme_of(e);
  /* kept (array_kept); a bf16 array is read into data's upper half and
   * widened forwards, written through a rounded copy in data's place */
  uint64_t es = zinc_dtype_size(zinc_array_dtype(e, array));
  while (count > 0) {
    int k = (int)(off / n->group);
    int64_t g = group_len(n, e->opt_numel, k), i = off - (int64_t)k * n->group;
    int64_t take = count < g - i ? count : g - i;
    uint64_t at = n->pre[array] * (uint64_t)g + (uint64_t)i * es;
    if (es == 4) {
      ZINC_CHECK(region_io(n, n->opt, k, at, data, (uint64_t)take * 4, write));
    } else if (write) {
      uint16_t *half = malloc((size_t)take * 2);
      if (!half)
        return zinc_error(ZINC_ERR_NOMEM, "no host memory for %lld bf16 optimizer elements",
                          (long long)take);
      for (int64_t j = 0; j < take; j++)
        half[j] = zinc_f32_to_bf16(data[j]);
      zinc_status st = region_io(n, n->opt, k, at, half, (uint64_t)take * 2, 1);
      free(half);
      ZINC_CHECK(st);
    } else {
      ZINC_CHECK(region_io(n, n->opt, k, at, zinc_bf16_upper(data, take), (uint64_t)take * 2,
                           0));
      zinc_bf16_widen_upper(data, take);
    }
    data += take;
    off += take;
    count -= take;
  }
  return ZINC_OK;
}

zinc_status zinc_nvme_param_io(zinc_engine *e, uint64_t off, void *data, uint64_t len,
                               int write) {
  return region_io(nvme_of(e), nvme_of(e)->param, 0, off, data, len, write);
}

/* ------------------------------------ the gradient partition on disk */

static zinc_status grad_io(zinc_engine *e, int64_t off, int64_t count, float *data, int write) {
  zinc_nvme *n = nvme_of(e);
  while (count > 0) {
    int k = (int)(off / n->group);
    int64_t g = group_len(n, e->opt_numel, k), i = off - (int64_t)k * n->group;
    int64_t take = count < g - i ? count : g - i;
    ZINC_CHECK(region_io(n, n->grad, k, (uint64_t)i * 4, data, (uint64_t)take * 4, write));
    data += take;
    off += take;
    count -= take;
  }
  return ZINC_OK;
}

zinc_status zinc_nvme_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst) {
  return grad_io(e, off, count, dst, 0);
}

/* A sub-group at a time through gradient buffer 0 (the step is not
 * running): read the partition's elements unless overwriting, the
 * device's own f32 accumulation (the same additions as into a host
 * partition), write them back. src NULL: zeros. */
zinc_status zinc_nvme_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                      int64_t count, int overwrite) {
  zinc_nvme *n = nvme_of(e);
  float *w = n->gbuf[0];
  size_t es = src ? zinc_dtype_size(dtype) : 0;
  while (count > 0) {
    int64_t take = count < n->group ? count : n->group;
    if (!src) {
      memset(w, 0, (size_t)take * 4);
    } else {
      if (!overwrite)
        ZINC_CHECK(grad_io(e, off, take, w, 0));
      ZINC_CHECK(e->dev->ops->accumulate_f32(e->dev, e->stream, w, src, dtype, take, overwrite));
      ZINC_CHECK(zinc_engine_sync(e));
      src = (const char *)src + (size_t)take * es;
    }
    ZINC_CHECK(grad_io(e, off, take, w, 1));
    off += take;
    count -= take;
  }
  return ZINC_OK;
}

void zinc_nvme_io_bytes(const zinc_engine *e, uint64_t *read, uint64_t *written) {
  zinc_aio_stats s = {0};
  if (nvme_of(e) && nvme_of(e)->aio)
    zinc_aio_stats_get(nvme_of(e)->aio, &s);
  *read = s.bytes_read;
  *written = s.bytes_written;
}

/* Tests: inject I/O faults (offload/aio.h's ZINC_AIO_FAULT syntax) into the
 * engine's NVMe traffic from now on (the request count restarts). */
zinc_status zinc_nvme_inject(zinc_engine *e, const char *spec) {
  if (!nvme_of(e))
    return zinc_error(ZINC_ERR_INVALID, "zinc_nvme_inject: no NVMe offload in this engine");
  zinc_aio_fault f;
  ZINC_CHECK(zinc_aio_fault_parse(spec, &f));
  zinc_aio_fault_set(nvme_of(e)->aio, &f);
  return ZINC_OK;
}

/* ------------------------------------------------------ the nvme row */

/* The stage-3 partition (both NVMe rows): the head from the host cache
 * (max_in_cpu), the rest from the swap area; memory when it has none. */
zinc_status zinc_nvme_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data, int write) {
  if (!zinc_nvme_param_on_disk(e))
    return zinc_place_memory_pshard_io(e, off, bytes, data, write);
  zinc_pcache_io(e, &off, &bytes, (char **)&data, write); /* max_in_cpu: the cached head */
  return bytes ? zinc_nvme_param_io(e, off - e->pl->pcache.bytes, data, bytes, write) : ZINC_OK;
}

static int nvme_selects(const zinc_engine *e) {
  return e->cfg.offload_optimizer.device == ZINC_OFFLOAD_NVME;
}

static int nvme_grad_location(const zinc_engine *e) {
  return zinc_nvme_grads_swapped(e) ? ZINC_LOC_NVME : zinc_place_memory_grad_location(e);
}

static zinc_status nvme_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst) {
  if (!zinc_nvme_grads_on_disk(e))
    return zinc_place_device_row.grad_read(e, off, count, dst);
  return zinc_nvme_grad_read(e, off, count, dst);
}

static zinc_status nvme_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                        int64_t count, int overwrite) {
  if (!zinc_nvme_grads_on_disk(e))
    return zinc_place_device_row.grad_accumulate(e, off, src, dtype, count, overwrite);
  return zinc_nvme_grad_accumulate(e, off, src, dtype, count, overwrite);
}

/* No optimizer state in memory: the swap area and its buffers instead. */
static void nvme_row_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  zinc_place_grads_sizes(e, bytes); /* none when on NVMe too */
  bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += zinc_offload_staging_bytes(e);
  zinc_nvme_sizes(e, bytes);
}

static zinc_status nvme_row_init(zinc_engine *e) {
  ZINC_CHECK(zinc_place_grads_alloc(e));
  ZINC_CHECK(zinc_offload_init(e)); /* the sub-groups stage through cpu.c's slots */
  return zinc_nvme_init(e);
}

/* Both NVMe rows. */
void zinc_nvme_row_free(zinc_engine *e) {
  zinc_nvme_free(e);
  zinc_offload_free(e);
  zinc_place_memory_free(e);
}

const zinc_placement zinc_place_nvme_row = {
    .name = "nvme",
    .selects = nvme_selects,
    .sizes = nvme_row_sizes,
    .init = nvme_row_init,
    .free = zinc_nvme_row_free,
    .optim = zinc_nvme_step,
    .opt_io = zinc_nvme_opt_io,
    .grad_location = nvme_grad_location,
    .grad_read = nvme_grad_read,
    .grad_accumulate = nvme_grad_accumulate,
    .pshard_io = zinc_nvme_pshard_io,
    .param_buffer_take = zinc_nvme_param_buffer_take,
    .param_buffer_give = zinc_nvme_param_buffer_give,
};
