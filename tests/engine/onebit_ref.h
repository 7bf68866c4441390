/*
 * onebit_ref.h — what the tests of the optimizers built on 1-bit Adam's
 * compressed all-reduce (0/1 Adam, 1-bit LAMB) share: every rank's own
 * parameters read back, and DeepSpeed's compressed all-reduce simulated
 * over n ranks as the reference of engine/reduce/onebit.h.
 */
#ifndef ZINC_TESTS_ONEBIT_REF_H
#define ZINC_TESTS_ONEBIT_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test.h"

/* This rank's own parameters (its compute copy: at stage 0 every rank
 * holds the whole model, and 0/1 Adam's ranks differ between syncs). */
static inline void own_params(et_model *m, const tm_shape *sh, float **out) {
  ET_OK(zinc_eval_begin(m->e));
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(m->e, m->mod[k]));
    for (int i = 0; i < TM_NPARAM; i++)
      if (et_param_module[i] == k)
        memcpy(out[i], zinc_param_data(m->par[i]), (size_t)tm_numel(sh, i) * 4);
    ET_OK(zinc_module_release(m->e, m->mod[k]));
  }
  ET_OK(zinc_eval_end(m->e));
}

/* ------------------------------------------------------------ reference */

/* One tensor of the compressed all-reduce over `n` simulated ranks:
 * x[r] (padded elements) in place, werr[r] (padded), serr[r] (padded / n,
 * server r's). DeepSpeed's NcclBackend.compressed_allreduce, its tensors
 * f32: the server's sum of the workers' sign x scale / n added in f32 in
 * rank order, the scales' sums of squares in double in onebit.h's fixed
 * order (element k into lane k % 4, then (0 + 1) + (2 + 3)). */
static inline double sumsq_lanes(const float *v, int64_t n) {
  double lane[4] = {0, 0, 0, 0};
  for (int64_t k = 0; k < n; k++)
    lane[k % 4] += (double)v[k] * v[k];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

static inline void ref_compress(int n, int64_t padded, float **x, float **werr, float **serr) {
  int64_t chunk = padded / n;
  double a[8];
  for (int r = 0; r < n; r++) {
    for (int64_t k = 0; k < padded; k++)
      x[r][k] = (float)((double)x[r][k] + werr[r][k]);
    a[r] = (float)(sqrt(sumsq_lanes(x[r], padded)) / sqrt((double)padded));
    for (int64_t k = 0; k < padded; k++)
      werr[r][k] = (float)((double)x[r][k] - (x[r][k] >= 0.0f ? a[r] : -a[r]));
  }
  float *out = calloc((size_t)padded, 4);
  for (int j = 0; j < n; j++) {
    float *c = calloc((size_t)chunk, 4);
    for (int64_t k = 0; k < chunk; k++) {
      float sum = 0.0f;
      for (int r = 0; r < n; r++) {
        float share = (float)a[r] * (1.0f / (float)n);
        sum += x[r][j * chunk + k] >= 0.0f ? share : -share;
      }
      c[k] = sum + serr[j][k];
    }
    double b = (float)(sqrt(sumsq_lanes(c, chunk)) / sqrt((double)chunk));
    for (int64_t k = 0; k < chunk; k++) {
      serr[j][k] = (float)((double)c[k] - (c[k] >= 0.0f ? b : -b));
      out[j * chunk + k] = (float)(c[k] >= 0.0f ? b : -b);
    }
    free(c);
  }
  for (int r = 0; r < n; r++)
    memcpy(x[r], out, (size_t)padded * 4);
  free(out);
}

#endif /* ZINC_TESTS_ONEBIT_REF_H */
