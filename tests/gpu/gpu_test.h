/*
 * gpu_test.h — what the GPU tests share: the loud skip when no CUDA device
 * is usable, a cmocka group fixture holding one cuda device, uniform random
 * values (from common/rng.h's generator), poisoning, and device staging
 * through the device under test. Results are compared with
 * common/compare.h, which prints the first mismatches and the largest
 * difference.
 *
 * Every GPU test calls gpu_require() first: with cudaGetDeviceCount failing
 * or giving 0 it prints "SKIPPED: no CUDA device (...)" and exits 77, which
 * ctest reports as skipped.
 */
#ifndef ZINC_GPU_TEST_H
#define ZINC_GPU_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "base/base.h"
#include "common/compare.h"
#include "common/rng.h"
#include "device/device.h"
#include "device/device_cuda.h"
#include "kernels/zinc_math.h"

#define POISON_BYTE 0xFF
#define MAX_REPORTED 8

static inline void gpu_require(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
           err == cudaSuccess ? "no error" : cudaGetErrorString(err), n);
    fflush(stdout);
    exit(77);
  }
}

/* Fail the test with zinc's message when a status is not ZINC_OK. */
#define ZOK(expr)                                                               \
  do {                                                                          \
    zinc_status zok_st_ = (expr);                                               \
    if (zok_st_ != ZINC_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,       \
              zinc_status_name(zok_st_), zinc_last_error());                    \
      fail();                                                                   \
    }                                                                           \
  } while (0)

#define CUOK(expr)                                                              \
  do {                                                                          \
    cudaError_t cuok_err_ = (expr);                                             \
    if (cuok_err_ != cudaSuccess) {                                             \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #expr,           \
              cudaGetErrorString(cuok_err_));                                   \
      fail();                                                                   \
    }                                                                           \
  } while (0)

/* cmocka group fixture: *state = a cuda device on ordinal 0, default stream. */
static inline int gpu_group_setup(void **state) {
  zinc_device *d = NULL;
  if (zinc_device_cuda_create(0, NULL, &d) != ZINC_OK) {
    fprintf(stderr, "cuda device: %s\n", zinc_last_error());
    return -1;
  }
  *state = d;
  return 0;
}

static inline int gpu_group_teardown(void **state) {
  zinc_device_destroy(*state);
  return 0;
}

/* ------------------------------------------------------------- random */

/* Uniform in [lo, hi). */
static inline float rng_uniform(test_rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

static inline size_t dtype_bytes(int dtype) { return dtype == ZINC_F32 ? 4 : 2; }

static inline const char *dtype_label(int dtype) {
  return dtype == ZINC_F32 ? "f32" : dtype == ZINC_BF16 ? "bf16" : "f16";
}

/* ------------------------------------------------ device staging */

/* A device buffer of `bytes` plus `pad` bytes either side, all poisoned;
 * `at` is the caller's pointer inside it, `offset` bytes after the pad.
 *   base: (pad + offset + bytes + pad) bytes, device */
typedef struct {
  unsigned char *base;
  unsigned char *at;
  size_t total, pad, offset, bytes;
} guarded_buf;

static inline void guarded_alloc(zinc_device *d, guarded_buf *g, size_t bytes, size_t offset) {
  g->pad = 256;
  g->offset = offset;
  g->bytes = bytes;
  g->total = 2 * g->pad + offset + bytes;
  void *p = NULL;
  ZOK(d->ops->alloc(d, g->total, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &p));
  g->base = p;
  g->at = g->base + g->pad + offset;
  CUOK(cudaMemset(g->base, POISON_BYTE, g->total));
}

static inline void guarded_free(zinc_device *d, guarded_buf *g) {
  d->ops->free(d, g->base, g->total, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  memset(g, 0, sizeof *g);
}

static inline void guarded_upload(guarded_buf *g, const void *host) {
  CUOK(cudaMemcpy(g->at, host, g->bytes, cudaMemcpyHostToDevice));
}

static inline void guarded_poison(guarded_buf *g) {
  CUOK(cudaMemset(g->base, POISON_BYTE, g->total));
}

/* Copy the payload back and check that no byte outside it changed.
 * Returns the number of changed guard bytes (reported). */
static inline size_t guarded_download(guarded_buf *g, void *host, const char *what) {
  unsigned char *all = malloc(g->total);
  assert_non_null(all);
  CUOK(cudaMemcpy(all, g->base, g->total, cudaMemcpyDeviceToHost));
  memcpy(host, all + g->pad + g->offset, g->bytes);
  size_t bad = 0;
  for (size_t i = 0; i < g->total; i++) {
    int inside = i >= g->pad + g->offset && i < g->pad + g->offset + g->bytes;
    if (!inside && all[i] != POISON_BYTE && bad++ < MAX_REPORTED)
      fprintf(stderr, "%s: byte %lld relative to the start was written (0x%02x)\n", what,
              (long long)i - (long long)(g->pad + g->offset), all[i]);
  }
  free(all);
  return bad;
}

#endif /* ZINC_GPU_TEST_H */
