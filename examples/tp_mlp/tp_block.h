/*
 * tp_block.h — the residual MLP block of examples/tp_mlp and
 * examples/mlp3d, Y = X + GeLU(X A) B + c, split Megatron-style over the
 * tensor-parallel group: A (D, F) by columns, B (F, D) by rows, c (D)
 * replicated. Its initial values (a hash of layer, matrix, row and column,
 * so that every layout holds the same full matrices) and its forward
 * pass; each example writes its own backward.
 */
#ifndef TP_BLOCK_H
#define TP_BLOCK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "zinc.h"

static inline uint64_t tp_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* uniform in [-1, 1) from a key */
static inline float tp_uniform(uint64_t k) {
  return (float)((double)(tp_mix(k) >> 11) / 9007199254740992.0 * 2 - 1);
}

static inline float tp_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}
static inline float tp_gelu_grad(float x) {
  float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
}

/* The initial values of parameter p ("A", "B" or "c" of module
 * "block<layer>") on tensor-parallel rank `rank` of `tp`, hidden width f:
 * rank r holds columns [r f/tp, (r+1) f/tp) of A and the same rows of B. */
static inline void tp_block_init(const zinc_param *p, float *dst, int64_t numel, int d, int f,
                                 int tp, int rank) {
  int layer = atoi(zinc_module_name(zinc_param_module(p)) + 5);
  if (zinc_param_name(p)[0] == 'c') { /* replicated: no tensor-parallel index */
    for (int64_t i = 0; i < numel; i++)
      dst[i] = 0.01f * tp_uniform(((uint64_t)layer << 48) ^ (3ull << 40) ^ (uint64_t)i);
    return;
  }
  int fr = f / tp, col0 = rank * fr;
  int is_a = zinc_param_name(p)[0] == 'A';
  for (int64_t i = 0; i < numel; i++) {
    int row = is_a ? (int)(i / fr) : (int)(i / d) + col0;
    int col = is_a ? (int)(i % fr) + col0 : (int)(i % d);
    uint64_t key = ((uint64_t)layer << 48) ^ ((uint64_t)is_a << 40) ^ ((uint64_t)row << 20) ^
                   (uint64_t)col;
    dst[i] = tp_uniform(key) / sqrtf((float)(is_a ? d : f));
  }
}

/* Z = X A_r, H = GeLU(Z) B_r for `batch` rows of width d: H is this rank's
 * partial sum, which the tensor-parallel group adds up. */
static inline void tp_block_forward(int batch, int d, int fr, const float *X, const float *A,
                                    const float *B, float *Z, float *H) {
  for (int b = 0; b < batch; b++) {
    for (int j = 0; j < fr; j++) {
      float s = 0;
      for (int i = 0; i < d; i++)
        s += X[b * d + i] * A[i * fr + j];
      Z[b * fr + j] = s;
    }
    for (int k = 0; k < d; k++) {
      float s = 0;
      for (int j = 0; j < fr; j++)
        s += tp_gelu(Z[b * fr + j]) * B[j * d + k];
      H[b * d + k] = s;
    }
  }
}

#endif /* TP_BLOCK_H */
