/*
 * nvme_param.c — the stage-3 parameter partition on NVMe with the
 * optimizer state in memory (offload_param.device "nvme", offload_optimizer
 * "none" or "cpu"): the partition lives in nvme.c's parameter swap area
 * behind the host cache (pcache.c), fetches read it through nvme.c's
 * read buffers, and the step writes each run's updated parameters to it
 * through a host staging buffer, since there is no partition in memory to
 * write into. The optimizer state is the device row's arrays (in host
 * memory with offload_optimizer "cpu", stepped through cpu.c's staging on
 * the cuda device).
 */
#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

/* Each run's updated parameters through a staging buffer to the swap
 * area; Lamb's UPDATE pass writes no parameter and goes to the state's
 * optimizer as it is. */
static zinc_status params_on_disk_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                                        const zinc_opt_seg *segs, int nseg, int pass,
                                        double *norms) {
  if (zinc_opt_two_pass(c->kind) && pass == ZINC_OPT_PASS_UPDATE)
    return zinc_offload_optim(e, c, ncoef, segs, nseg, pass, norms);
  size_t most = 0;
  for (int i = 0; i < nseg; i++)
    if ((size_t)segs[i].n * 4 > most)
      most = (size_t)segs[i].n * 4;
  void *staging = NULL;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, most, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &staging,
                                      "parameter staging"));
  zinc_status st = ZINC_OK;
  for (int i = 0; i < nseg && st == ZINC_OK; i++) {
    const zinc_opt_run *run = &e->runs[i];
    const zinc_unit *u = &e->units[run->unit];
    zinc_opt_seg s = segs[i];
    s.param_out = staging;
    /* staged (the cuda device): the state is host memory, the CPU steps it */
    const zinc_offload *o = &e->pl->off;
    zinc_device *d = o->ready ? o->host : e->dev;
    st = d->ops->optim(d, o->ready ? NULL : e->stream, c, ncoef, &s, 1, pass, NULL);
    size_t es = zinc_dtype_size(u->dtype);
    if (st == ZINC_OK) /* a device kernel wrote the staging: done before the host reads it */
      st = zinc_engine_sync(e);
    if (st == ZINC_OK)
      st = zinc_pshard_write(e, u->shard_byte + (size_t)(run->unit_offset -
                                                         (int64_t)run->owner * u->chunk) * es,
                             (size_t)s.n * es, staging);
  }
  zinc_engine_buffer_free(e, staging, most, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  return st;
}

static int nvme_param_selects(const zinc_engine *e) {
  return e->cfg.stage == 3 && e->cfg.offload_param.device == ZINC_OFFLOAD_NVME;
}

static void nvme_param_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  zinc_place_grads_sizes(e, bytes);
  zinc_place_state_sizes(e, bytes);
  bytes[ZINC_LOC_HOST][ZINC_MEM_BUFFERS] += zinc_offload_staging_bytes(e);
  zinc_nvme_sizes(e, bytes); /* the parameter swap area, its cache and buffers */
}

static zinc_status nvme_param_init(zinc_engine *e) {
  ZINC_CHECK(zinc_place_grads_alloc(e));
  ZINC_CHECK(zinc_place_state_alloc(e));
  ZINC_CHECK(zinc_offload_init(e));
  return zinc_nvme_init(e);
}

const zinc_placement zinc_place_nvme_param_row = {
    .name = "nvme_param",
    .selects = nvme_param_selects,
    .sizes = nvme_param_sizes,
    .init = nvme_param_init,
    .free = zinc_nvme_row_free,
    .optim = params_on_disk_optim,
    .pshard_io = zinc_nvme_pshard_io,
    .param_buffer_take = zinc_nvme_param_buffer_take,
    .param_buffer_give = zinc_nvme_param_buffer_give,
};
