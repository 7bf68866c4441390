/*
 * mlp.c — the whole zinc API on one screen: load a DeepSpeed config, create
 * the engine, register modules and parameters, build, then the step loop
 * (fetch, forward, release; fetch, backward, grads_ready, release;
 * backward_end; step), the memory figures, a checkpoint, destroy.
 *
 *   mpirun -n 2 build/cpu/examples/mlp/mlp [config.json] [steps] [checkpoint dir]
 *
 * The model: x (B, 32) -> fc1 -> ReLU -> fc2 -> 8 logits, softmax
 * cross-entropy. The task: 8 Gaussian clusters in 32 dimensions (centres
 * fixed by the seed, samples differ per rank and step), so the loss falls
 * from ln 8 = 2.08 towards 0 and accuracy climbs to ~100%.
 *
 * Every matrix product goes through gemm(): loops on the CPU; cuBLAS when
 * zinc computes on a GPU (CUDA build, a GPU present), where zinc_param_data
 * and zinc_param_grad are device pointers. Element-wise work (ReLU, softmax)
 * runs on the host on copies of the activations.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinc.h"
#ifdef ZINC_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

enum { IN = 32, HID = 64, CLASSES = 8 };

#define CHECK(call)                                                             \
  do {                                                                          \
    if ((call) != ZINC_OK) {                                                    \
      fprintf(stderr, "mlp: %s failed: %s\n", #call, zinc_last_error());        \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

/* ------------------------------------------------ matrix products anywhere */

typedef struct {
  int gpu;    /* zinc computes on a CUDA device: buffers below are device memory */
  int failed; /* a cuBLAS call failed */
#ifdef ZINC_HAVE_CUDA
  cublasHandle_t blas;
#endif
} dev;

/* Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N) + beta * C, where A is
 * stored (K, M) when ta and B is stored (N, K) when tb. */
static void gemm(dev *d, int ta, int tb, int M, int N, int K, const float *A,
                 const float *B, float beta, float *C) {
#ifdef ZINC_HAVE_CUDA
  if (d->gpu) { /* column-major cuBLAS computes C^T = op(B)^T op(A)^T */
    const float one = 1.0f;
    d->failed |= cublasSgemm(d->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, tb ? K : N,
                             A, ta ? M : K, &beta, C, N) != CUBLAS_STATUS_SUCCESS;
    return;
  }
#endif
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float s = 0;
      for (int k = 0; k < K; k++)
        s += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
      C[m * N + n] = beta != 0 ? beta * C[m * N + n] + s : s;
    }
}

/* A buffer with a host copy; on the CPU both are the same memory. */
typedef struct { float *host, *dev; } buf;

static buf buf_alloc(dev *d, size_t n) {
  buf b = {calloc(n, sizeof(float)), NULL};
  b.dev = b.host;
#ifdef ZINC_HAVE_CUDA
  if (d->gpu && cudaMalloc((void **)&b.dev, n * sizeof(float)) != cudaSuccess)
    b.dev = NULL;
#endif
  return b;
}
static void buf_free(dev *d, buf b) {
#ifdef ZINC_HAVE_CUDA
  if (d->gpu)
    cudaFree(b.dev);
#endif
  free(b.host);
}
/* Copy n floats host -> device (to_device) or back; nothing on the CPU. */
static void copy(buf b, size_t n, int to_device) {
#ifdef ZINC_HAVE_CUDA
  if (b.dev != b.host)
    cudaMemcpy(to_device ? b.dev : b.host, to_device ? b.host : b.dev, n * sizeof(float),
               to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
#endif
  (void)b, (void)n, (void)to_device;
}

/* ------------------------------------------------------------ the model */

typedef struct {
  zinc_module *m;
  zinc_param *w, *b; /* w (out, in), b (out) */
  int in, out;
} layer;

static layer layer_add(zinc_engine *e, const char *name, int in, int out) {
  layer L = {zinc_module_add(e, name), NULL, NULL, in, out};
  int64_t ws[2] = {out, in}, bs[1] = {out};
  L.w = zinc_param_add(e, L.m, "w", ZINC_F32, 2, ws);
  L.b = zinc_param_add(e, L.m, "b", ZINC_F32, 1, bs);
  zinc_param_set_weight_decay(L.b, 0); /* biases: no weight decay */
  return L;
}

/* Same values on every rank: weights uniform with variance 1/in, biases 0. */
static zinc_status init_param(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  int64_t shape[8];
  int is_weight = zinc_param_shape(p, shape) == 2;
  uint64_t s = *(uint64_t *)ctx + (uint64_t)n;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float u = (float)(s >> 40) / 16777216.0f - 0.5f; /* uniform, variance 1/12 */
    dst[i] = is_weight ? u * sqrtf(12.0f / (float)shape[1]) : 0.0f;
  }
  return ZINC_OK;
}

/* y (B, out) = x (B, in) @ w^T + b: the bias as a rank-1 product with ones. */
static void layer_forward(dev *d, layer *L, buf x, buf y, buf ones, int B) {
  gemm(d, 0, 1, B, L->out, L->in, x.dev, zinc_param_data(L->w), 0, y.dev);
  gemm(d, 0, 0, B, L->out, 1, ones.dev, zinc_param_data(L->b), 1, y.dev);
}

/* dw += dy^T x, db += dy^T 1, dx = dy w (dx may be NULL). */
static void layer_backward(dev *d, layer *L, buf x, buf dy, buf dx, buf ones, int B) {
  gemm(d, 1, 0, L->out, L->in, B, dy.dev, x.dev, 1, zinc_param_grad(L->w));
  gemm(d, 1, 0, 1, L->out, B, ones.dev, dy.dev, 1, zinc_param_grad(L->b));
  if (dx.dev)
    gemm(d, 0, 0, B, L->in, L->out, dy.dev, zinc_param_data(L->w), 0, dx.dev);
}

/* Micro-batch k from a rank's seed: class y, x = centre[y] + N(0, 0.7^2). */
static void make_batch(float *x, int *y, int B, uint64_t seed, int64_t k) {
  uint64_t s = seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < B; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    y[i] = (int)(s >> 61); /* 0..7 */
    for (int j = 0; j < IN; j++) {
      uint64_t c = (uint64_t)(y[i] * IN + j) * 0xd1b54a32d192ed03ull;
      float centre = (float)((c >> 33) % 2001) / 1000.0f - 1.0f;
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      float u1 = ((float)(s >> 40) + 1.0f) / 16777217.0f;
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      float u2 = (float)(s >> 40) / 16777216.0f;
      x[i * IN + j] = centre + 0.7f * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
    }
  }
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/configs/zero3.json";
  int steps = argc > 2 ? atoi(argv[2]) : 200;
  const char *ckpt_dir = argc > 3 ? argv[3] : NULL;

  zinc_config *cfg;
  zinc_engine *e;
  CHECK(zinc_config_load(path, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT; /* the GPU if there is one */
  opt.hidden_size = HID;                /* the configs' "auto" bucket sizes follow it */
  CHECK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  int rank = zinc_rank(e), B = zinc_micro_batch_size(e);
  int gas = zinc_gradient_accumulation_steps(e);

  layer fc1 = layer_add(e, "fc1", IN, HID), fc2 = layer_add(e, "fc2", HID, CLASSES);
  if (!fc1.w || !fc1.b || !fc2.w || !fc2.b) {
    fprintf(stderr, "mlp: registering the model: %s\n", zinc_last_error());
    return 1;
  }
  uint64_t seed = 1234;
  CHECK(zinc_engine_build(e, init_param, &seed));

  dev d = {.gpu = zinc_engine_on_gpu(e)};
#ifdef ZINC_HAVE_CUDA
  if (d.gpu && cublasCreate(&d.blas) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "mlp: cublasCreate failed\n");
    return 1;
  }
#endif
  /* activations (host and, on a GPU, device copies) */
  buf x = buf_alloc(&d, (size_t)B * IN), h = buf_alloc(&d, (size_t)B * HID);
  buf logits = buf_alloc(&d, (size_t)B * CLASSES), ones = buf_alloc(&d, (size_t)B);
  buf dh = buf_alloc(&d, (size_t)B * HID), none = {NULL, NULL};
  int *y = malloc((size_t)B * sizeof(int));
  if (!x.dev || !h.dev || !logits.dev || !ones.dev || !dh.dev || !y) {
    fprintf(stderr, "mlp: out of memory\n");
    return 1;
  }
  for (int i = 0; i < B; i++)
    ones.host[i] = 1.0f;
  copy(ones, (size_t)B, 1);

  for (int step = 0; step < steps; step++) {
    double loss = 0, correct = 0;
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    for (int micro = 0; micro < gas; micro++) {
      make_batch(x.host, y, B, seed + (uint64_t)rank, (int64_t)step * gas + micro);
      copy(x, (size_t)B * IN, 1);
      /* forward: each module fetched, computed, released */
      CHECK(zinc_module_fetch(e, fc1.m));
      layer_forward(&d, &fc1, x, h, ones, B);
      CHECK(zinc_module_release(e, fc1.m));
      copy(h, (size_t)B * HID, 0);
      for (int i = 0; i < B * HID; i++) /* ReLU */
        h.host[i] = h.host[i] > 0 ? h.host[i] : 0;
      copy(h, (size_t)B * HID, 1);
      CHECK(zinc_module_fetch(e, fc2.m));
      layer_forward(&d, &fc2, h, logits, ones, B);
      CHECK(zinc_module_release(e, fc2.m));
      /* softmax cross-entropy; logits becomes d(loss)/d(logits) in place */
      copy(logits, (size_t)B * CLASSES, 0);
      float scale = zinc_loss_scale(e) / (float)B;
      for (int i = 0; i < B; i++) {
        float *z = logits.host + i * CLASSES, mx = z[0], sum = 0;
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
          if (z[c] > mx)
            mx = z[c], best = c;
        for (int c = 0; c < CLASSES; c++)
          sum += (z[c] = expf(z[c] - mx));
        loss -= log(z[y[i]] / sum) / (B * gas);
        correct += best == y[i];
        for (int c = 0; c < CLASSES; c++)
          z[c] = (z[c] / sum - (c == y[i])) * scale;
      }
      copy(logits, (size_t)B * CLASSES, 1);
      /* backward, modules in reverse: gradients accumulate (+=) into zinc's */
      CHECK(zinc_module_fetch(e, fc2.m));
      layer_backward(&d, &fc2, h, logits, dh, ones, B);
      CHECK(zinc_module_grads_ready(e, fc2.m));
      CHECK(zinc_module_release(e, fc2.m));
      copy(dh, (size_t)B * HID, 0);
      for (int i = 0; i < B * HID; i++) /* through the ReLU */
        dh.host[i] = h.host[i] > 0 ? dh.host[i] : 0;
      copy(dh, (size_t)B * HID, 1);
      CHECK(zinc_module_fetch(e, fc1.m));
      layer_backward(&d, &fc1, x, dh, none, ones, B);
      CHECK(zinc_module_grads_ready(e, fc1.m));
      CHECK(zinc_module_release(e, fc1.m));
      CHECK(zinc_backward_end(e));
      CHECK(zinc_step(e, &info)); /* the optimizer runs at the boundary */
    }
    if (d.failed) {
      fprintf(stderr, "mlp: a cuBLAS call failed\n");
      return 1;
    }
    double figures[2] = {loss, correct / ((double)B * gas)};
    CHECK(zinc_allreduce_host(e, figures, 2, ZINC_REDUCE_MEAN));
    if (rank == 0 && ((step + 1) % zinc_steps_per_print(e) == 0 || step == 0))
      printf("step %4d | loss %.4f | accuracy %5.1f%% | lr %.2e | grad norm %.3f\n",
             step + 1, figures[0], 100 * figures[1], info.lr, info.grad_norm);
  }

  zinc_mem_stats mem = ZINC_MEM_STATS_INIT;
  CHECK(zinc_memory_stats(e, &mem));
  if (rank == 0)
    printf("rank 0 model states: %.1f KiB on the device, %.1f KiB on the host "
           "(ZeRO formula %.1f KiB)\n",
           (mem.peak[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS] + mem.peak[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] +
            mem.peak[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM]) / 1024.0,
           (mem.peak[ZINC_LOC_HOST][ZINC_MEM_PARAMS] + mem.peak[ZINC_LOC_HOST][ZINC_MEM_GRADS] +
            mem.peak[ZINC_LOC_HOST][ZINC_MEM_OPTIM]) / 1024.0,
           mem.theoretical_model_states / 1024.0);
  if (ckpt_dir) {
    CHECK(zinc_save_checkpoint(e, ckpt_dir, "final"));
    if (rank == 0)
      printf("checkpoint saved in %s/final\n", ckpt_dir);
  }
#ifdef ZINC_HAVE_CUDA
  if (d.gpu)
    cublasDestroy(d.blas);
#endif
  buf_free(&d, x), buf_free(&d, h), buf_free(&d, logits), buf_free(&d, ones), buf_free(&d, dh);
  free(y);
  zinc_engine_destroy(e);
  return 0;
}
