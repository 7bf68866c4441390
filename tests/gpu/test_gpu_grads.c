/*
 * test_gpu_grads.c — the gradient path on the cuda device with NCCL, one
 * GPU per rank (1 or 2 ranks; skipped, exit 77, without a GPU per rank):
 *
 *  - the stream contract (zinc.h, "Streams"): the trainer's own
 *    non-blocking stream, passed as cuda_stream, is held back 200 ms by a
 *    host function and then copies the gradients into zinc_param_grad's
 *    buffer; zinc_module_grads_ready and zinc_backward_end follow at once,
 *    without any synchronisation. The averaged gradient must be the values
 *    copied (small integers: every order of the NCCL sum is exact), not
 *    the zeros a reduction that ran ahead of the stream would read;
 *  - gradient_predivide_factor on the device's scale kernel: fp16, f = 3,
 *    bit for bit against DeepSpeed's order computed here (the per-rank
 *    values x float(1/3) rounded to fp16, their sum — exact for these
 *    values at up to two ranks — then x 3 / dp_size); at two ranks an
 *    fp16 sum past 65504 undivided is finite with predivide = dp_size;
 *  - CPU offload on the GPU: stage 3 with offload_optimizer and
 *    offload_param cpu, gradient_accumulation_steps 3, bitwise the run
 *    without offload (two ranks: a + b is exact in any order here too, the
 *    values being bf16 with few bits); one gradient copy to the host per
 *    window; one device copy of the rank's chunks per gather.
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/engine.h"
#include "../engine/engine_test.h"

enum { N_ELEMS = 1000 };

static int local_gpu;

static void require_gpus(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  int ok = err == cudaSuccess && n >= et_world, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (et_rank == 0)
      printf("SKIPPED: %d ranks need as many CUDA devices (cudaGetDeviceCount: %s, %d)\n",
             et_world, err == cudaSuccess ? "ok" : cudaGetErrorString(err), n);
    MPI_Finalize();
    exit(77);
  }
  local_gpu = et_rank % n;
}

static zinc_status init_values(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.01f * (float)(i % 17);
  return ZINC_OK;
}

static zinc_engine *open_engine(const char *json, void *stream) {
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = local_gpu;
  opt.cuda_stream = stream;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  ET_CHECK(zinc_engine_on_gpu(e), "the engine did not pick the GPU");
  return e;
}

static void CUDART_CB hold_stream(void *ms) { usleep((useconds_t)(*(int *)ms) * 1000); }

static void check_stream_contract(void) {
  cudaStream_t s;
  ET_CHECK(cudaSetDevice(local_gpu) == cudaSuccess, "cudaSetDevice");
  ET_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  for (int stage = 0; stage <= 3; stage++) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"Adam\","
             " \"params\": {\"lr\": 0.001}}, \"zero_optimization\": {\"stage\": %d,"
             " \"stage3_param_persistence_threshold\": 0}}", stage);
    zinc_engine *e = open_engine(json, s);
    zinc_module *m = zinc_module_add(e, "layer");
    int64_t shape[1] = {N_ELEMS};
    zinc_param *p = zinc_param_add(e, m, "w", ZINC_F32, 1, shape);
    ET_OK(zinc_engine_build(e, init_values, NULL));
    float *host = NULL;
    ET_CHECK(cudaMallocHost((void **)&host, N_ELEMS * 4) == cudaSuccess, "pinned");
    for (int i = 0; i < N_ELEMS; i++)
      host[i] = (float)(i % 50 + 1) * (float)(et_rank + 1);
    static int hold_ms = 200;
    ET_OK(zinc_module_fetch(e, m));
    void *g = zinc_param_grad(p);
    ET_CHECK(cudaLaunchHostFunc(s, hold_stream, &hold_ms) == cudaSuccess, "host func");
    ET_CHECK(cudaMemcpyAsync(g, host, N_ELEMS * 4, cudaMemcpyHostToDevice, s) == cudaSuccess,
             "copy");
    ET_OK(zinc_module_grads_ready(e, m)); /* no synchronisation before these */
    ET_OK(zinc_module_release(e, m));
    ET_OK(zinc_backward_end(e));
    float got[N_ELEMS];
    ET_OK(zinc_param_get_full(e, p, ZINC_STATE_GRAD, got));
    int bad = 0;
    for (int i = 0; i < N_ELEMS; i++) {
      float sum = 0.0f;
      for (int r = 0; r < et_world; r++)
        sum += (float)(i % 50 + 1) * (float)(r + 1);
      float want = (float)((double)sum / et_world);
      if (got[i] != want && bad++ < 4)
        ET_CHECK(0, "stage %d, element %d: averaged gradient %g, want %g (0: the reduction "
                 "did not wait for the trainer's stream)", stage, i, got[i], want);
    }
    ET_OK(zinc_step(e, NULL));
    cudaFreeHost(host);
    zinc_engine_destroy(e);
  }
  cudaStreamDestroy(s);
}

static float round16(float x) { return zinc_f16_to_f32(zinc_f32_to_f16(x)); }

static void check_predivide(double f, float value) {
  for (int stage = 0; stage <= 3; stage++) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"Adam\","
             " \"params\": {\"lr\": 0.001}}, \"fp16\": {\"enabled\": true, \"loss_scale\": 1},"
             " \"gradient_predivide_factor\": %.17g, \"zero_optimization\": {\"stage\": %d,"
             " \"stage3_param_persistence_threshold\": 0}}", f, stage);
    zinc_engine *e = open_engine(json, NULL);
    zinc_module *m = zinc_module_add(e, "layer");
    int64_t shape[1] = {N_ELEMS};
    zinc_param *p = zinc_param_add(e, m, "w", ZINC_F16, 1, shape);
    ET_OK(zinc_engine_build(e, init_values, NULL));
    uint16_t host[N_ELEMS];
    for (int i = 0; i < N_ELEMS; i++)
      host[i] = zinc_f32_to_f16(value != 0.0f ? value : (float)(i + 1) * 7.0f);
    ET_OK(zinc_module_fetch(e, m));
    ET_CHECK(cudaMemcpy(zinc_param_grad(p), host, sizeof host, cudaMemcpyHostToDevice) ==
             cudaSuccess, "copy");
    ET_OK(zinc_module_grads_ready(e, m));
    ET_OK(zinc_module_release(e, m));
    ET_OK(zinc_backward_end(e));
    float got[N_ELEMS];
    ET_OK(zinc_param_get_full(e, p, ZINC_STATE_GRAD, got));
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    ET_CHECK(!info.skipped, "stage %d, predivide %g: step skipped", stage, f);
    int bad = 0;
    for (int i = 0; i < N_ELEMS; i++) {
      float pre = round16(zinc_f16_to_f32(host[i]) * (float)(1.0 / f));
      float want = (float)((double)round16(pre * (float)et_world) * (f / et_world));
      if (memcmp(&got[i], &want, 4) != 0 && bad++ < 4)
        ET_CHECK(0, "stage %d, predivide %g, element %d: %.9g, want %.9g", stage, f, i,
                 got[i], want);
    }
    zinc_engine_destroy(e);
  }
}

typedef struct {
  float params[3][N_ELEMS];
  int64_t grad_host_writes, param_device_copies;
} outcome;

static void train_offload(int offload, outcome *out) {
  char json[768];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 3,"
           " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
           " \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3,"
           " \"stage3_param_persistence_threshold\": 0%s}}",
           offload ? ", \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\":"
                     " {\"device\": \"cpu\"}" : "");
  zinc_engine *e = open_engine(json, NULL);
  zinc_module *m[3];
  zinc_param *p[3];
  for (int k = 0; k < 3; k++) {
    char name[8];
    snprintf(name, sizeof name, "m%d", k);
    m[k] = zinc_module_add(e, name);
    int64_t shape[1] = {N_ELEMS - 100 * k};
    p[k] = zinc_param_add(e, m[k], name, ZINC_BF16, 1, shape);
  }
  ET_OK(zinc_engine_build(e, init_values, NULL));
  uint16_t g16[N_ELEMS];
  for (int s = 0; s < 2; s++)
    for (int mb = 0; mb < 3; mb++) {
      for (int k = 2; k >= 0; k--) {
        ET_OK(zinc_module_fetch(e, m[k]));
        int64_t n = zinc_param_numel(p[k]);
        for (int64_t i = 0; i < n; i++)
          g16[i] = zinc_f32_to_bf16((float)((i + mb + s + k) % 9) * 0.125f * (float)(et_rank + 1));
        ET_CHECK(cudaMemcpy(zinc_param_grad(p[k]), g16, (size_t)n * 2,
                            cudaMemcpyHostToDevice) == cudaSuccess, "copy");
        ET_OK(zinc_module_grads_ready(e, m[k]));
        ET_OK(zinc_module_release(e, m[k]));
      }
      ET_OK(zinc_backward_end(e));
      ET_OK(zinc_step(e, NULL));
    }
  for (int k = 0; k < 3; k++)
    ET_OK(zinc_param_get_full(e, p[k], ZINC_STATE_PARAM, out->params[k]));
  out->grad_host_writes = e->grad_host_writes;
  out->param_device_copies = e->param_device_copies;
  zinc_engine_destroy(e);
}

static void check_offload(void) {
  static outcome ref, off;
  train_offload(0, &ref);
  train_offload(1, &off);
  for (int k = 0; k < 3; k++) {
    int bad = 0;
    for (int i = 0; i < N_ELEMS - 100 * k; i++)
      if (memcmp(&ref.params[k][i], &off.params[k][i], 4) != 0 && bad++ < 4)
        ET_CHECK(0, "offload, module m%d element %d: %.9g, without offload %.9g", k, i,
                 off.params[k][i], ref.params[k][i]);
  }
  ET_CHECK(off.grad_host_writes == 2, "offload: %lld gradient writes to the host in 2 "
           "windows; want one per window", (long long)off.grad_host_writes);
  ET_CHECK(off.param_device_copies > 0 && ref.param_device_copies == 0,
           "offload_param cpu: %lld chunk copies to the device (without offload %lld)",
           (long long)off.param_device_copies, (long long)ref.param_device_copies);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  require_gpus();
  check_stream_contract();
  check_predivide(3.0, 0.0f);
  if (et_world == 2)
    check_predivide(2.0, 40000.0f); /* 2 x 40000 > 65504 undivided */
  check_offload();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "GPU gradient tests FAILED\n" : "GPU gradient tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
