/*
 * adam_bench.c — fused Adam/AdamW on the GPU in GB/s, beside a
 * device-to-device cudaMemcpy measured in the same run.
 *
 *   adam_bench --device cuda [--params N] [--segments S] [--iters K]
 *              [--grad f32|bf16|f16] [--param f32|bf16|f16|none] [--ordinal I]
 *
 * Adam's bytes per parameter: read p, g, m, v (12 + sizeof grad) and write
 * p, m, v and the compute copy (12 + sizeof copy): 28 for bf16 grads and a
 * bf16 copy. The copy's bytes are read + written. The parameters are cut
 * into S equal segments (a multiple of four elements each, so the vector
 * path runs) and updated through the cuda device's `adam` op, as the engine
 * does. Target: Adam at >= 85% of the copy's bandwidth (a PASS/FAIL line;
 * exit status 1 on FAIL). Without a GPU: SKIPPED, exit status 77.
 *
 * Only --device cuda is built here (the CPU Adam has its own benchmark).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/base.h"
#include "device/device.h"
#include "kernels/zinc_math.h"

#define TARGET_RATIO 0.85

typedef struct {
  int64_t params;
  int segments;
  int iters;
  int grad_dtype;
  int param_dtype;  /* -1: no compute copy */
  int ordinal;
} bench_args;

static int parse_dtype(const char *s, int allow_none) {
  if (!strcmp(s, "f32")) return ZINC_F32;
  if (!strcmp(s, "bf16")) return ZINC_BF16;
  if (!strcmp(s, "f16")) return ZINC_F16;
  if (allow_none && !strcmp(s, "none")) return -1;
  return -2;
}

static int usage(const char *why) {
  fprintf(stderr, "adam_bench: %s\nusage: adam_bench --device cuda [--params N] [--segments S] "
          "[--iters K] [--grad f32|bf16|f16] [--param f32|bf16|f16|none] [--ordinal I]\n", why);
  return 2;
}

static int parse_args(int argc, char **argv, bench_args *a) {
  const char *device = NULL;
  *a = (bench_args){.params = (int64_t)1 << 28, .segments = 64, .iters = 20,
                    .grad_dtype = ZINC_BF16, .param_dtype = ZINC_BF16, .ordinal = 0};
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      return usage("every option takes a value");
    i++;
    if (!strcmp(k, "--device")) device = v;
    else if (!strcmp(k, "--params")) a->params = strtoll(v, NULL, 0);
    else if (!strcmp(k, "--segments")) a->segments = atoi(v);
    else if (!strcmp(k, "--iters")) a->iters = atoi(v);
    else if (!strcmp(k, "--ordinal")) a->ordinal = atoi(v);
    else if (!strcmp(k, "--grad")) a->grad_dtype = parse_dtype(v, 0);
    else if (!strcmp(k, "--param")) a->param_dtype = parse_dtype(v, 1);
    else return usage("unknown option");
  }
  if (!device || strcmp(device, "cuda"))
    return usage("--device cuda is the one device this benchmark measures (the CPU Adam has "
                 "its own benchmark)");
  if (a->params < 4 || a->segments < 1 || a->iters < 1 || a->grad_dtype < 0 ||
      a->param_dtype < -1 || a->params / a->segments < 4)
    return usage("bad --params, --segments, --iters or dtype");
  return 0;
}

static size_t dt_bytes(int dtype) { return dtype < 0 ? 0 : dtype == ZINC_F32 ? 4 : 2; }

/* Milliseconds per iteration of `what` on the legacy default stream. */
typedef zinc_status (*bench_fn)(void *ctx);

static int time_ms(bench_fn fn, void *ctx, int iters, double *ms) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; i++) /* warm-up */
    if (fn(ctx) != ZINC_OK)
      return -1;
  cudaEventRecord(start, 0);
  for (int i = 0; i < iters; i++)
    if (fn(ctx) != ZINC_OK)
      return -1;
  cudaEventRecord(stop, 0);
  cudaError_t err = cudaEventSynchronize(stop);
  float total = 0;
  cudaEventElapsedTime(&total, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (err != cudaSuccess) {
    fprintf(stderr, "adam_bench: %s\n", cudaGetErrorString(err));
    return -1;
  }
  *ms = total / iters;
  return 0;
}

typedef struct {
  zinc_device *d;
  zinc_opt_coef coef;
  zinc_opt_seg *segs;
  int nseg;
  void *copy_dst, *copy_src;
  size_t copy_bytes;
} bench_state;

static zinc_status run_adam(void *ctx) {
  bench_state *b = ctx;
  return b->d->ops->optim(b->d, NULL, &b->coef, 1, b->segs, b->nseg, ZINC_OPT_PASS_UPDATE, NULL);
}

static zinc_status run_copy(void *ctx) {
  bench_state *b = ctx;
  return b->d->ops->copy(b->d, b->copy_dst, b->copy_src, b->copy_bytes, NULL);
}

static void *must_alloc(zinc_device *d, size_t bytes, unsigned char fill) {
  void *p = NULL;
  if (d->ops->alloc(d, bytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &p) != ZINC_OK) {
    fprintf(stderr, "adam_bench: %s\n", zinc_last_error());
    exit(1);
  }
  cudaMemset(p, fill, bytes);
  return p;
}

int main(int argc, char **argv) {
  bench_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc)
    return rc;
  if (zinc_device_cuda_count() == 0) {
    printf("SKIPPED: no CUDA device (adam_bench --device cuda needs one)\n");
    return 77;
  }
  zinc_device *d = NULL;
  if (zinc_device_cuda_create(a.ordinal, NULL, &d) != ZINC_OK) {
    fprintf(stderr, "adam_bench: %s\n", zinc_last_error());
    return 1;
  }
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, a.ordinal);

  /* buffers (device): master, m, v (params) f32; grad (params) grad dtype;
   * copy (params) param dtype; values are harmless normal numbers */
  size_t n = (size_t)a.params;
  float *master = must_alloc(d, n * 4, 0x3f);
  float *m = must_alloc(d, n * 4, 0);
  float *v = must_alloc(d, n * 4, 0);
  void *grad = must_alloc(d, n * dt_bytes(a.grad_dtype), 0x3c);
  void *copy = a.param_dtype >= 0 ? must_alloc(d, n * dt_bytes(a.param_dtype), 0) : NULL;

  bench_state b = {.d = d, .nseg = a.segments};
  b.coef = (zinc_opt_coef){.grad_scale = 1.0f, .beta1 = 0.9f, .one_minus_beta1 = 0.1f,
                            .beta2 = 0.999f, .one_minus_beta2 = 0.001f, .eps = 1e-8f,
                            .step_size = 1e-3f, .inv_sqrt_bc2 = 1.0f, .weight_decay = 0.01f,
                            .decay_factor = 1.0f - 1e-5f, .adamw = 1};
  b.segs = calloc((size_t)a.segments, sizeof *b.segs);
  size_t per = (n / (size_t)a.segments) & ~(size_t)3;
  for (int s = 0; s < a.segments; s++) {
    size_t first = (size_t)s * per, len = s == a.segments - 1 ? n - first : per;
    b.segs[s] = (zinc_opt_seg){
        .master = master + first, .exp_avg = m + first, .exp_avg_sq = v + first,
        .grad = (char *)grad + first * dt_bytes(a.grad_dtype),
        .param_out = copy ? (char *)copy + first * dt_bytes(a.param_dtype) : NULL,
        .n = (int64_t)len, .grad_dtype = a.grad_dtype,
        .param_dtype = a.param_dtype >= 0 ? a.param_dtype : 0, .decay = s % 8 != 0};
  }
  b.copy_bytes = (size_t)1 << 30;
  b.copy_src = must_alloc(d, b.copy_bytes, 1);
  b.copy_dst = must_alloc(d, b.copy_bytes, 2);

  double copy_ms[2], adam_ms;
  if (time_ms(run_copy, &b, a.iters, &copy_ms[0]) || time_ms(run_adam, &b, a.iters, &adam_ms) ||
      time_ms(run_copy, &b, a.iters, &copy_ms[1])) {
    fprintf(stderr, "adam_bench: %s\n", zinc_last_error());
    return 1;
  }
  double bytes_per_param = 12.0 + (double)dt_bytes(a.grad_dtype) + 12.0 +
                           (double)dt_bytes(a.param_dtype);
  double adam_gbs = bytes_per_param * (double)n / (adam_ms * 1e-3) / 1e9;
  double copy_gbs = 0;
  for (int i = 0; i < 2; i++) {
    double gbs = 2.0 * (double)b.copy_bytes / (copy_ms[i] * 1e-3) / 1e9;
    copy_gbs = gbs > copy_gbs ? gbs : copy_gbs; /* the better of the two: the stricter peer */
  }
  double ratio = adam_gbs / copy_gbs;
  printf("adam_bench: cuda device %d (%s), %lld params in %d segments, grad %s, copy %s, "
         "%d iterations\n", a.ordinal, prop.name, (long long)a.params, a.segments,
         zinc_dtype_name(a.grad_dtype), a.param_dtype >= 0 ? zinc_dtype_name(a.param_dtype)
                                                           : "none", a.iters);
  printf("fused adam     : %8.3f ms/step  %8.1f GB/s  (%.0f bytes/param, read + written)\n",
         adam_ms, adam_gbs, bytes_per_param);
  printf("d2d cudaMemcpy : %8.3f ms/copy  %8.1f GB/s  (1 GiB, read + written; better of 2 "
         "runs)\n", copy_ms[0] < copy_ms[1] ? copy_ms[0] : copy_ms[1], copy_gbs);
  printf("ratio          : %.3f of copy bandwidth (target >= %.2f): %s\n", ratio, TARGET_RATIO,
         ratio >= TARGET_RATIO ? "PASS" : "FAIL");

  d->ops->free(d, b.copy_src, b.copy_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, b.copy_dst, b.copy_bytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, master, n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, m, n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, v, n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, grad, n * dt_bytes(a.grad_dtype), ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  if (copy)
    d->ops->free(d, copy, n * dt_bytes(a.param_dtype), ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  free(b.segs);
  zinc_device_destroy(d);
  return ratio >= TARGET_RATIO ? 0 : 1;
}
