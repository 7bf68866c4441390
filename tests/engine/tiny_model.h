/*
 * tiny_model.h — a small MLP classifier shared by the engine tests, and a
 * reference trainer that does the same arithmetic without zinc.
 *
 * Layers (dims chosen not divisible by 2, 3 or 4):
 *   module "in":    W0 (D0, D1), b0 (D1)        h1 = tanh(x W0 + b0)
 *   module "mid":   W1 (D1, D2), b1 (D2)        h2 = tanh(h1 W1 + b1)
 *   module "scale": s  (D2)                     h3 = h2 * s
 *   module "out":   W2 (D2, D3), b2 (D3)        logits = h3 W2 + b2
 * Loss: mean softmax cross-entropy over the micro-batch. Data are a
 * deterministic function of the global sample index.
 *
 * The trainer code (tm_train_zinc) is exactly the sequence of the DESIGN:
 * fetch/forward/release per module, then fetch/backward/grads_ready/release
 * in reverse, backward_end, step.
 */
#ifndef TINY_MODEL_H
#define TINY_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"
#include "kernels/zinc_math.h"

#define TM_D0 13
#define TM_D1 37
#define TM_D2 29
#define TM_D3 7
#define TM_NPARAM 7

typedef struct {
  int d[4];                 /* layer widths D0..D3 */
  zinc_dtype dtype;         /* parameter dtype */
} tm_shape;

static const char *tm_names[TM_NPARAM] = {"W0", "b0", "W1", "b1", "s", "W2", "b2"};

static inline int64_t tm_numel(const tm_shape *sh, int i) {
  switch (i) {
  case 0: return (int64_t)sh->d[0] * sh->d[1];
  case 1: return sh->d[1];
  case 2: return (int64_t)sh->d[1] * sh->d[2];
  case 3: return sh->d[2];
  case 4: return sh->d[2];
  case 5: return (int64_t)sh->d[2] * sh->d[3];
  default: return sh->d[3];
  }
}

static inline uint64_t tm_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static inline float tm_uniform(uint64_t key) { /* [-1, 1) */
  return (float)((double)(tm_hash(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Sample g: x (D0) and its label. */
static inline int tm_sample(const tm_shape *sh, int64_t g, float *x) {
  double best = -1e30;
  int label = 0;
  for (int i = 0; i < sh->d[0]; i++)
    x[i] = tm_uniform(((uint64_t)g << 16) ^ (uint64_t)i ^ 0x5151);
  for (int c = 0; c < sh->d[3]; c++) {
    double v = 0;
    for (int i = 0; i < sh->d[0]; i++)
      v += x[i] * tm_uniform(0xabc000ull + (uint64_t)c * 977 + (uint64_t)i);
    if (v > best) {
      best = v;
      label = c;
    }
  }
  return label;
}

/* Initial value of element j of parameter i. */
static inline float tm_init_value(const tm_shape *sh, int i, int64_t j) {
  if (i == 4)
    return 1.0f + 0.1f * tm_uniform(0x777ull + (uint64_t)j);
  float fan_in = (float)(i == 0 || i == 1 ? sh->d[0] : i == 2 || i == 3 ? sh->d[1] : sh->d[2]);
  return tm_uniform(((uint64_t)i << 40) ^ (uint64_t)j ^ 0x1234) / sqrtf(fan_in);
}

/* Forward + backward of a micro-batch on f32 copies of the parameters.
 * P[i]: parameter i (f32, numel), G[i]: gradient accumulators (+=), scale:
 * multiplies the loss gradient (loss scaling). Returns the mean loss. */
static inline double tm_forward_backward(const tm_shape *sh, float *const *P, float *const *G,
                                         int64_t first_sample, int batch, float scale) {
  int D0 = sh->d[0], D1 = sh->d[1], D2 = sh->d[2], D3 = sh->d[3];
  float x[64], h1[64], h2[64], h3[64], lg[64], dl[64], dh3[64], dh2[64], dh1[64];
  double loss = 0;
  for (int b = 0; b < batch; b++) {
    int y = tm_sample(sh, first_sample + b, x);
    for (int j = 0; j < D1; j++) {
      float a = P[1][j];
      for (int i = 0; i < D0; i++)
        a += x[i] * P[0][i * D1 + j];
      h1[j] = tanhf(a);
    }
    for (int j = 0; j < D2; j++) {
      float a = P[3][j];
      for (int i = 0; i < D1; i++)
        a += h1[i] * P[2][i * D2 + j];
      h2[j] = tanhf(a);
      h3[j] = h2[j] * P[4][j];
    }
    float mx = -1e30f;
    for (int c = 0; c < D3; c++) {
      float a = P[6][c];
      for (int i = 0; i < D2; i++)
        a += h3[i] * P[5][i * D3 + c];
      lg[c] = a;
      if (a > mx)
        mx = a;
    }
    double z = 0;
    for (int c = 0; c < D3; c++)
      z += exp((double)(lg[c] - mx));
    loss += -(double)(lg[y] - mx) + log(z);
    for (int c = 0; c < D3; c++)
      dl[c] = ((float)(exp((double)(lg[c] - mx)) / z) - (c == y ? 1.0f : 0.0f)) * scale /
              (float)batch;
    /* backward */
    for (int i = 0; i < D2; i++) {
      float a = 0;
      for (int c = 0; c < D3; c++) {
        G[5][i * D3 + c] += h3[i] * dl[c];
        a += P[5][i * D3 + c] * dl[c];
      }
      dh3[i] = a;
    }
    for (int c = 0; c < D3; c++)
      G[6][c] += dl[c];
    for (int j = 0; j < D2; j++) {
      G[4][j] += dh3[j] * h2[j];
      dh2[j] = dh3[j] * P[4][j] * (1.0f - h2[j] * h2[j]);
    }
    for (int i = 0; i < D1; i++) {
      float a = 0;
      for (int j = 0; j < D2; j++) {
        G[2][i * D2 + j] += h1[i] * dh2[j];
        a += P[2][i * D2 + j] * dh2[j];
      }
      dh1[i] = a * (1.0f - h1[i] * h1[i]);
    }
    for (int j = 0; j < D2; j++)
      G[3][j] += dh2[j];
    for (int i = 0; i < D0; i++)
      for (int j = 0; j < D1; j++)
        G[0][i * D1 + j] += x[i] * dh1[j];
    for (int j = 0; j < D1; j++)
      G[1][j] += dh1[j];
  }
  return loss / batch;
}

#endif /* TINY_MODEL_H */
