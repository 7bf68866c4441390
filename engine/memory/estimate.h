/*
 * estimate.h — what a configuration will need, per rank, computed by the
 * engine's own layout code on a model description (no device, no comm):
 * the same sizes the build allocates, plus an estimate of what comes and
 * goes (stage-3 gathered parameters). tools/zinc-mem prints it.
 */
#ifndef ZINC_ESTIMATE_H
#define ZINC_ESTIMATE_H

#include <stdint.h>

#include "config/config.h"
#include "zinc.h"

typedef struct {
  char module[128];
  char name[128];
  zinc_dtype dtype;
  int ndim;
  int64_t shape[8];
  int frozen;            /* 1: not trained (zinc_param_set_frozen): no gradient,
                            no optimizer state; 0 (the default) trained */
} zinc_est_param;

typedef struct {
  uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]; /* allocated for good by the build */
  uint64_t gathered;       /* stage 3: gathered parameters at their peak (device) */
  uint64_t peak[ZINC_LOC_N];  /* per rank: the above, summed per location */
  uint64_t formula;        /* the ZeRO formula (model states) */
  int64_t params;          /* total elements */
  int64_t largest_module;  /* elements */
} zinc_estimate;

/* The device the estimate sizes for: what the build allocates differs
 * (the cuda device stages CPU-offloaded optimizer steps through two pinned
 * host slots, delayed gradient averaging through a pinned copy of the
 * gradients). */
typedef enum { ZINC_EST_DEVICE_CPU = 0, ZINC_EST_DEVICE_CUDA = 1 } zinc_est_device;

/* cfg: loaded settings (model-dependent "auto" values resolve here, the
 * bucket sizes from hidden_size as zinc_options.hidden_size does at build:
 * 0 with an "auto" size is ZINC_ERR_CONFIG); the stage and offload are
 * taken from it. Sized for `device`. */
zinc_status zinc_estimate_model_on(const zinc_settings *cfg, zinc_est_device device, int dp_size,
                                   int64_t hidden_size, const zinc_est_param *params, int n,
                                   zinc_estimate *out);
/* The same on the cpu device. */
zinc_status zinc_estimate_model(const zinc_settings *cfg, int dp_size, int64_t hidden_size,
                                const zinc_est_param *params, int n, zinc_estimate *out);

#endif /* ZINC_ESTIMATE_H */
