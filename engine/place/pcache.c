/*
 * pcache.c — the host cache in front of the NVMe parameter
 * partition (offload_param.max_in_cpu, stage 3 with offload_param.device
 * "nvme").
 *
 * DeepSpeed keeps whole parameter sub-groups in CPU memory, in order, up to
 * max_in_cpu elements, and swaps the rest. zinc's rule, on its own layout:
 * walk this rank's partition in shard order (the units of every module in
 * registration order, then the frozen units, engine.h) and keep the longest
 * prefix that ends between two modules' units and holds at most max_in_cpu
 * elements (this rank's chunks, alignment padding included). A module is
 * cached when all its units lie in that prefix; its fetches then read host
 * memory and no disk. The prefix is one byte range [0, bytes) of the
 * partition:
 *
 *   partition bytes  [0, bytes)               [bytes, shard_bytes)
 *   lives in         host (pcache.host)      the swap area, at offset
 *                                             (partition offset - bytes)
 *
 * zinc_pshard_read / zinc_pshard_write (access.c) serve the head of a
 * range from the cache and the rest from the swap area, so every reader
 * and writer of the partition (fetches, the step, checkpoints, init) goes
 * through it unchanged.
 */
#include <string.h>

#include "engine/engine.h"
#include "engine/place/placements.h"
#include "engine/support.h"

static int cache_wanted(const zinc_engine *e) {
  return e->cfg.stage == 3 && e->cfg.offload_param.device == ZINC_OFFLOAD_NVME &&
         e->cfg.offload_param.max_in_cpu > 0;
}

size_t zinc_pcache_plan(const zinc_engine *e, int64_t *elems, int *units) {
  int64_t kept = 0, run = 0;
  int cut = 0;
  if (cache_wanted(e))
    for (int ui = 0; ui < e->nunits; ui++) {
      run += e->units[ui].chunk;
      int boundary = ui + 1 == e->nunits || e->units[ui + 1].module != e->units[ui].module;
      if (run > e->cfg.offload_param.max_in_cpu)
        break;
      if (boundary) {
        cut = ui + 1;
        kept = run;
      }
    }
  if (elems)
    *elems = kept;
  if (units)
    *units = cut;
  return cut == 0 ? 0 : cut == e->nunits ? e->shard_bytes : e->units[cut].shard_byte;
}

uint64_t zinc_pcache_disk_bytes(const zinc_engine *e) {
  uint64_t rest = (uint64_t)e->shard_bytes - zinc_pcache_plan(e, NULL, NULL);
  return rest > 0 ? rest : 1; /* a swap region is never empty */
}

zinc_status zinc_pcache_init(zinc_engine *e) {
  zinc_pcache *c = &e->pl->pcache;
  int units;
  c->bytes = zinc_pcache_plan(e, &c->elems, &units);
  if (c->bytes == 0)
    return ZINC_OK;
  ZINC_CHECK(zinc_engine_buffer_alloc(e, c->bytes, ZINC_LOC_HOST, ZINC_MEM_PARAMS, &c->host,
                                      "parameter cache in host memory (offload_param."
                                      "max_in_cpu)"));
  zinc_log0(ZINC_LOG_INFO, "offload_param.max_in_cpu %lld: the first %d of %d units of the "
            "partition (%lld elements, %.1f MiB) stay in host memory, the rest on NVMe",
            (long long)e->cfg.offload_param.max_in_cpu, units, e->nunits, (long long)c->elems,
            (double)c->bytes / (1 << 20));
  return ZINC_OK;
}

void zinc_pcache_free(zinc_engine *e) {
  zinc_pcache *c = &e->pl->pcache;
  if (c->host)
    zinc_engine_buffer_free(e, c->host, c->bytes, ZINC_LOC_HOST, ZINC_MEM_PARAMS);
  memset(c, 0, sizeof *c);
}

void zinc_pcache_io(zinc_engine *e, size_t *off, size_t *bytes, char **data, int write) {
  zinc_pcache *c = &e->pl->pcache;
  if (*off >= c->bytes || *bytes == 0)
    return;
  size_t n = c->bytes - *off < *bytes ? c->bytes - *off : *bytes;
  if (write)
    memcpy((char *)c->host + *off, *data, n);
  else
    memcpy(*data, (const char *)c->host + *off, n);
  *off += n;
  *bytes -= n;
  *data += n;
}
