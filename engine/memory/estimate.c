/*
 * estimate.c — the memory estimator: registers a model description in a
 * bare engine (no device, no comm), runs the real layout, and reads the
 * sizes the build would allocate (zinc_build_sizes); a frozen parameter
 * (zinc_est_param.frozen) counts as the build lays it out: parameter
 * memory only; with hpZ the secondary partition counts as parameter
 * memory on the device; what the gradient-communication method and the
 * codec transport allocate (the error-feedback residuals, DGC's
 * velocities, PowerSGD's Q's, delayed averaging's ring, the 1-bit
 * optimizers' errors) is the reducer table's sizes (zinc_reduce_sizes in
 * engine/reduce/reduce.h, within zinc_build_sizes); the device's window
 * gradient sum of an offloaded stage 2/3 with gradient accumulation (grads.c) comes with the
 * build's sizes where the device is across PCIe (as the pinned staging:
 * the cuda device, or ZINC_OFFLOAD_STAGING=1). Stage 3 adds the
 * gathered parameters at their peak: the largest module plus what the
 * prefetch window holds ahead of it, within stage3_max_live_parameters.
 * Offload (cpu or NVMe) counts its state and the NVMe host buffers as on
 * any device; with NVMe offload at stages 2-3 on the cpu device the f32
 * gradient partition counts on NVMe, its sub-group buffers in host memory
 * (zinc_nvme_grads_swapped, zinc_nvme_sizes). What the build allocates per device is sized for the device
 * the caller names (zinc_estimate_model_on): on cuda the two pinned
 * staging slots of the offloaded step (host buffers, 2 x up to 8 bytes x
 * min(sub_group_size, 16 M) elements; zinc_offload_staging_bytes, on the
 * cpu device too with ZINC_OFFLOAD_STAGING=1, which makes it stage like
 * cuda) and delayed averaging's pinned gradient staging (the trained
 * gradients' bytes, host buffers). A method the cuda device refuses (its
 * row's cpu_only: PowerSGD, 0/1 Adam, 1-bit LAMB) is ZINC_ERR_UNSUPPORTED
 * there.
 */
#include "engine/memory/estimate.h"

#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/memory/profiler.h"
#include "engine/reduce/reduce.h"
#include "engine/stage3/stage3.h"
#include "engine/step.h"

zinc_status zinc_estimate_model(const zinc_settings *cfg, int dp_size, int64_t hidden_size,
                                const zinc_est_param *params, int n, zinc_estimate *out) {
  return zinc_estimate_model_on(cfg, ZINC_EST_DEVICE_CPU, dp_size, hidden_size, params, n, out);
}

zinc_status zinc_estimate_model_on(const zinc_settings *cfg, zinc_est_device device, int dp_size,
                                   int64_t hidden_size, const zinc_est_param *params, int n,
                                   zinc_estimate *out) {
  memset(out, 0, sizeof *out);
  if (dp_size < 1 || n < 0 || (n > 0 && !params) ||
      (device != ZINC_EST_DEVICE_CPU && device != ZINC_EST_DEVICE_CUDA))
    return zinc_error(ZINC_ERR_INVALID, "estimate: bad arguments (dp_size %d, %d parameters, "
                      "device %d)", dp_size, n, (int)device);
  zinc_engine *e = calloc(1, sizeof *e);
  if (!e)
    return zinc_error(ZINC_ERR_NOMEM, "estimate: no host memory for the model's engine state "
                      "(%zu bytes)", sizeof *e);
  zinc_status st = zinc_settings_copy(&e->cfg, cfg);
  if (st != ZINC_OK) {
    free(e);
    return st;
  }
  e->dp_size = e->world_size = dp_size;
  e->mp_size = 1;
  e->sized_as_gpu = device == ZINC_EST_DEVICE_CUDA; /* zinc_offload_staging_bytes */
  st = zinc_hpz_size(&e->cfg, dp_size, &e->hpz); /* the secondary partition's size */
  int any16[3] = {0, 0, 0};
  for (int i = 0; i < n; i++)
    any16[params[i].dtype] = 1;
  /* "auto" memory keys (max_live_parameters, buffer counts) take their
   * defaults; a training fact still "auto" (lr, steps) fails the call but
   * changes no byte of the estimate, so its error is not the estimate's */
  if (zinc_settings_resolve_auto(&e->cfg, 0, 0) != ZINC_OK)
    zinc_log0(ZINC_LOG_DEBUG, "estimate: %s (no effect on memory)", zinc_last_error());
  if (st == ZINC_OK)
    st = zinc_settings_resolve_model(&e->cfg, hidden_size, any16[ZINC_F16],
                                     any16[ZINC_BF16]);
  for (int i = 0; i < n && st == ZINC_OK; i++) {
    zinc_module *m = zinc_module_find(e, params[i].module);
    if (!m)
      m = zinc_module_add(e, params[i].module);
    zinc_param *p = m ? zinc_param_add(e, m, params[i].name, params[i].dtype, params[i].ndim,
                                       params[i].shape)
                      : NULL;
    if (!p || (params[i].frozen && zinc_param_set_frozen(p, 1) != ZINC_OK))
      st = zinc_error_wrap(ZINC_ERR_INVALID, "estimate: parameter %s.%s", params[i].module,
                           params[i].name);
  }
  if (st == ZINC_OK && e->sized_as_gpu) {
    /* what the cuda device refuses at build has no size there */
    const char *none = zinc_reduce_cpu_only(&e->cfg);
    if (none)
      st = zinc_error(ZINC_ERR_UNSUPPORTED, "estimate on the cuda device: %s runs on the cpu "
                      "device only, so the cuda build refuses it; estimate for the cpu device "
                      "or choose another", none);
  }
  if (st == ZINC_OK) {
    zinc_opt_from_config(e);
    st = zinc_layout_build(e);
  }
  if (st == ZINC_OK) {
    zinc_build_sizes(e, out->bytes); /* the placement's and the reducer's too */
    out->formula = zinc_formula_model_states(e);
    out->params = e->psi[0] + e->psi[1] + e->psi[2];
    size_t largest_gather = 0, total_gather = 0;
    for (int mi = 0; mi < e->nmodules; mi++) {
      if (e->modules[mi]->numel > out->largest_module)
        out->largest_module = e->modules[mi]->numel;
      if (e->modules[mi]->gather_bytes > largest_gather)
        largest_gather = e->modules[mi]->gather_bytes;
      total_gather += e->modules[mi]->gather_bytes;
    }
    if (e->cfg.stage == 3 && total_gather > 0) {
      double bytes_per_elem = 0;
      int64_t elems = 0;
      for (int mi = 0; mi < e->nmodules; mi++) {
        bytes_per_elem += (double)e->modules[mi]->gather_bytes;
        elems += e->modules[mi]->gather_numel;
      }
      bytes_per_elem /= (double)(elems ? elems : 1);
      double ahead = (double)e->cfg.stage3_prefetch_bucket_size * bytes_per_elem;
      double live = (double)e->cfg.stage3_max_live_parameters * bytes_per_elem;
      double g = (double)largest_gather + ahead;
      if (g > live)
        g = live > (double)largest_gather ? live : (double)largest_gather;
      if (g > (double)total_gather)
        g = (double)total_gather;
      out->gathered = (uint64_t)g;
    }
    for (int l = 0; l < ZINC_LOC_N; l++)
      for (int c = 0; c < ZINC_MEM_NCAT; c++)
        out->peak[l] += out->bytes[l][c];
    out->peak[ZINC_LOC_DEVICE] += out->gathered;
  }
  free(e->units);
  free(e->runs);
  zinc_registry_free(e);
  zinc_settings_free(&e->cfg);
  free(e);
  return st;
}
