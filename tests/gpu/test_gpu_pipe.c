/*
 * test_gpu_pipe.c — transfers between pipeline stages on the cuda device
 * (include/zinc.h, "Pipeline parallelism"; comm/comm_nccl.c's transfers),
 * one GPU per rank, 2 and 4 ranks with one stage per rank (skipped, exit
 * 77, without a GPU per rank):
 *
 *  - a round trip of device buffers (f32, bf16; counts 0, 1, odd, past
 *    1 MiB) forward through every stage and back, each stage checking
 *    every element after its compute stream passed the wait;
 *  - the stream contract: the send buffer is written by a copy on the
 *    trainer's compute stream that a host function holds back 200 ms, and
 *    zinc_pp_start follows at once, without a synchronisation: the
 *    receiver must get the values, not what the buffer held before; the
 *    receive's wait returns without blocking the host, and a copy queued
 *    on the compute stream after it sees the data;
 *  - 1F1B's crossing pairs in one batch (one NCCL group);
 *  - a count mismatch: ZINC_ERR_INVALID on both ends at zinc_pp_start,
 *    naming both stages and sizes, and the next transfer pairs as before.
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include "../engine/engine_test.h"

static int local_gpu;

static void require_gpus(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  int ok = err == cudaSuccess && n >= et_world, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all || et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: %d ranks (2 or more) need as many CUDA devices (cudaGetDeviceCount: "
             "%s, %d)\n", et_world, err == cudaSuccess ? "ok" : cudaGetErrorString(err), n);
    MPI_Finalize();
    exit(77);
  }
  local_gpu = et_rank % n;
}

#define CU(expr)                                                                      \
  do {                                                                                \
    cudaError_t cu_err_ = (expr);                                                     \
    if (cu_err_ != cudaSuccess) {                                                     \
      fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", et_rank, __FILE__, __LINE__, #expr, \
              cudaGetErrorString(cu_err_));                                           \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static float value(int round, int s, int64_t i) {
  return (float)((round * 3 + s * 5 + (int)(i % 29)) % 200) - 100.0f;
}

/* n values of stage s, round `round`, as dtype dt into host memory. */
static void fill_host(void *host, zinc_dtype dt, int64_t n, int round, int s) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = value(round, s, i);
  ET_OK(zinc_convert(host, dt, v, ZINC_F32, n));
  free(v);
}

static void check_host(const void *host, zinc_dtype dt, int64_t n, int round, int s,
                       const char *what) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  ET_OK(zinc_convert(v, ZINC_F32, host, dt, n));
  for (int64_t i = 0; i < n; i++)
    if (v[i] != value(round, s, i)) {
      ET_CHECK(0, "%s: element %lld of %lld is %g, expected %g", what, (long long)i,
               (long long)n, v[i], value(round, s, i));
      break;
    }
  free(v);
}

static void sleep_200ms(void *arg) {
  (void)arg;
  usleep(200000);
}

/* Forward and back: device buffers, the compute stream ordering it all. */
static void round_trip(zinc_engine *e, cudaStream_t stream, zinc_dtype dt, int64_t n, int round,
                       int held_back) {
  int s = zinc_pp_rank(e), last = zinc_pp_size(e) - 1;
  size_t bytes = (size_t)(n > 0 ? n : 1) * zinc_dtype_size(dt);
  void *dev, *host;
  CU(cudaMalloc(&dev, bytes));
  CU(cudaMallocHost(&host, bytes));
  char what[128];
  for (int pass = 0; pass < 2; pass++) { /* 0 forward, 1 backward */
    int from = pass == 0 ? s - 1 : s + 1, to = pass == 0 ? s + 1 : s - 1;
    if (from >= 0 && from <= last) {
      CU(cudaMemsetAsync(dev, 0x5a, bytes, stream));
      zinc_pp_op o = {pass == 0 ? ZINC_PP_RECV_PREV : ZINC_PP_RECV_NEXT, dev, n, dt};
      ET_OK(zinc_pp_transfer(e, &o, 1)); /* the compute stream waits */
      CU(cudaMemcpyAsync(host, dev, (size_t)n * zinc_dtype_size(dt), cudaMemcpyDeviceToHost,
                         stream));
      CU(cudaStreamSynchronize(stream));
      snprintf(what, sizeof what, "%lld %s %s at stage %d", (long long)n, zinc_dtype_name(dt),
               pass == 0 ? "forward" : "backward", s);
      check_host(host, dt, n, round + pass, from, what);
    }
    if (to >= 0 && to <= last) {
      fill_host(host, dt, n, round + pass, s);
      if (held_back) /* the trainer's stream is busy; the copy comes late */
        CU(cudaLaunchHostFunc(stream, sleep_200ms, NULL));
      CU(cudaMemcpyAsync(dev, host, (size_t)n * zinc_dtype_size(dt), cudaMemcpyHostToDevice,
                         stream));
      zinc_pp_op o = {pass == 0 ? ZINC_PP_SEND_NEXT : ZINC_PP_SEND_PREV, dev, n, dt};
      ET_OK(zinc_pp_transfer(e, &o, 1)); /* no synchronisation before it */
      CU(cudaStreamSynchronize(stream));  /* host memory reused next */
    }
  }
  CU(cudaFree(dev));
  CU(cudaFreeHost(host));
}

/* Stages 0 and 1 exchange both ways in one batch each. */
static void crossing_batch(zinc_engine *e, cudaStream_t stream) {
  int s = zinc_pp_rank(e);
  if (s > 1)
    return;
  const int64_t n = (1 << 20) + 3; /* past NCCL's buffers: a send waits for its receiver */
  float *out, *in, *host;
  CU(cudaMalloc((void **)&out, (size_t)n * 4));
  CU(cudaMalloc((void **)&in, (size_t)n * 4));
  CU(cudaMallocHost((void **)&host, (size_t)n * 4));
  fill_host(host, ZINC_F32, n, 50, s);
  CU(cudaMemcpyAsync(out, host, (size_t)n * 4, cudaMemcpyHostToDevice, stream));
  zinc_pp_op ops[2] = {{s == 0 ? ZINC_PP_SEND_NEXT : ZINC_PP_SEND_PREV, out, n, ZINC_F32},
                       {s == 0 ? ZINC_PP_RECV_NEXT : ZINC_PP_RECV_PREV, in, n, ZINC_F32}};
  zinc_pp_handle *h;
  ET_OK(zinc_pp_start(e, ops, 2, &h));
  ET_OK(zinc_pp_wait(e, h));
  CU(cudaMemcpyAsync(host, in, (size_t)n * 4, cudaMemcpyDeviceToHost, stream));
  CU(cudaStreamSynchronize(stream));
  check_host(host, ZINC_F32, n, 50, 1 - s, "crossing batch");
  CU(cudaFree(out));
  CU(cudaFree(in));
  CU(cudaFreeHost(host));
}

static void mismatch(zinc_engine *e, cudaStream_t stream) {
  int s = zinc_pp_rank(e);
  if (s > 1)
    return;
  float *buf;
  CU(cudaMalloc((void **)&buf, 4096 * 4));
  zinc_pp_op o = {s == 0 ? ZINC_PP_SEND_NEXT : ZINC_PP_RECV_PREV, buf, s == 0 ? 1000 : 999,
                  ZINC_F32};
  zinc_pp_handle *h = NULL;
  zinc_status st = zinc_pp_start(e, &o, 1, &h);
  const char *msg = zinc_last_error();
  ET_CHECK(st == ZINC_ERR_INVALID && h == NULL, "mismatch at stage %d: %s (%s)", s,
           zinc_status_name(st), msg);
  ET_CHECK(strstr(msg, "sends 1000 f32 (4000 bytes)") && strstr(msg, "receives 999 f32") &&
               strstr(msg, "stage 0 (rank") && strstr(msg, "stage 1 (rank"),
           "mismatch at stage %d: the message does not name both ends: %s", s, msg);
  o.count = 4096; /* the next pair pairs */
  ET_OK(zinc_pp_transfer(e, &o, 1));
  CU(cudaStreamSynchronize(stream));
  CU(cudaFree(buf));
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  require_gpus();
  CU(cudaSetDevice(local_gpu));
  cudaStream_t stream;
  CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  zinc_config *cfg;
  ET_OK(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zinc\": "
                          "{\"comm_timeout_s\": 60}}", &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = local_gpu;
  opt.cuda_stream = stream;
  opt.pipeline_parallel_size = et_world;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  ET_CHECK(zinc_engine_on_gpu(e), "the engine is not on the GPU");
  const int64_t counts[] = {0, 1, 999, (1 << 20) / 4 + 777};
  static const zinc_dtype dts[2] = {ZINC_F32, ZINC_BF16};
  int round = 0;
  for (int d = 0; d < 2; d++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++, round += 2)
      round_trip(e, stream, dts[d], counts[c], round, 0);
  round_trip(e, stream, ZINC_F32, 100000, 90, 1); /* the held-back stream */
  crossing_batch(e, stream);
  mismatch(e, stream);
  zinc_engine_destroy(e);
  CU(cudaStreamDestroy(stream));
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "gpu pipeline tests FAILED\n" : "gpu pipeline tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
