/*
 * test_cuda_device_choice.c — the device each rank trains on, on GPUs
 * (the rules are tested on the CPU by tests/device/test_device_choice.c;
 * this checks CUDA's side of them), one node, under mpirun:
 *
 * default mode (1, 2, 4 ranks; one GPU per rank, else SKIPPED):
 *  - ZINC_DEVICE_AUTO with a trainer stream on GPU world-1-rank (not the
 *    local rank's): the engine is created on the stream's GPU (its PCI bus
 *    id) on every rank, NCCL comms included;
 *  - an explicit device other than the stream's GPU: ZINC_ERR_DEVICE on
 *    every rank naming both GPUs, at once;
 *  - device creation failing on the last rank (ZINC_TEST_DEVICE_FAIL_RANK)
 *    with ZINC_DEVICE_AUTO: ZINC_ERR_DEVICE on every rank naming it, within
 *    seconds although the comm timeout is 120 s (no NCCL bootstrap waits).
 *
 * "oversubscribe" mode (2 and 4 ranks): CUDA_VISIBLE_DEVICES is set before
 * CUDA starts so that the node has fewer GPUs than ranks: at 4 ranks two
 * GPUs ("4 ranks", "2 GPUs" refused on every rank); at 2 ranks one GPU seen
 * by both (each takes ordinal 0: refused as two ranks on the GPU at one PCI
 * bus id, before NCCL's "Duplicate GPU").
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>

#include "../engine/engine_test.h"
#include "device/device_cuda.h"
#include "engine/engine.h"

#define FAST_S 5.0

static int ngpu;

static void require_gpus(int need) {
  cudaError_t err = cudaGetDeviceCount(&ngpu);
  int ok = err == cudaSuccess && ngpu >= need, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (et_rank == 0)
      printf("SKIPPED: needs %d CUDA device(s) visible (cudaGetDeviceCount: %s, %d)\n", need,
             err == cudaSuccess ? "ok" : cudaGetErrorString(err), ngpu);
    MPI_Finalize();
    exit(77);
  }
}

static zinc_status create(int device, void *stream, zinc_engine **e, double *seconds) {
  et_run r = et_defaults();
  r.extra = "\"zinc\": {\"comm_timeout_s\": 120}";
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = device;
  opt.cuda_stream = stream;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_create(cfg, &opt, e);
  *seconds = MPI_Wtime() - t0;
  zinc_config_free(cfg);
  return st;
}

static void auto_takes_the_stream(void) {
  int g = et_world - 1 - et_rank;
  cudaStream_t s = NULL;
  ET_CHECK(cudaSetDevice(g) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess,
           "a stream on GPU %d", g);
  cudaSetDevice(et_rank); /* the current device is not the stream's */
  zinc_engine *e = NULL;
  double dt;
  zinc_status st = create(ZINC_DEVICE_AUTO, s, &e, &dt);
  ET_CHECK(st == ZINC_OK, "auto with a stream on GPU %d: %s", g, zinc_last_error());
  if (st == ZINC_OK) {
    char want[32] = "", got[32] = "";
    cudaDeviceGetPCIBusId(want, sizeof want, g);
    ET_OK(zinc_device_cuda_pci_bus_id(e->dev, got, sizeof got));
    ET_CHECK(!strcmp(want, got), "rank %d: engine on PCI %s, the stream's GPU %d is %s",
             et_rank, got, g, want);
    ET_CHECK(zinc_device_cuda_stream(e->dev, NULL) == (void *)s,
             "rank %d: the compute stream is not the trainer's", et_rank);
  }
  zinc_engine_destroy(e);
  cudaStreamDestroy(s);
}

static void explicit_device_against_the_stream(void) {
  if (ngpu < 2)
    return;
  int g = (et_rank + 1) % ngpu;
  cudaStream_t s = NULL;
  ET_CHECK(cudaSetDevice(g) == cudaSuccess && cudaStreamCreate(&s) == cudaSuccess,
           "a stream on GPU %d", g);
  zinc_engine *e = NULL;
  double dt;
  zinc_status st = create(et_rank, s, &e, &dt);
  char dev[32], sdev[40];
  snprintf(dev, sizeof dev, "GPU %d", et_rank);
  snprintf(sdev, sizeof sdev, "belongs to GPU %d", g);
  et_expect_everywhere(st, ZINC_ERR_DEVICE, dt, "device against its stream",
                       (const char *const[]){"cuda_stream", NULL}, 0);
  ET_CHECK(et_rank != 0 || (strstr(zinc_last_error(), dev) && strstr(zinc_last_error(), sdev)),
           "rank 0's message names neither %s nor the stream's: %s", dev, zinc_last_error());
  ET_CHECK(dt < FAST_S, "took %.1f s", dt);
  zinc_engine_destroy(e);
  cudaStreamDestroy(s);
}

static void failure_agreed_before_nccl(void) {
  char value[16];
  snprintf(value, sizeof value, "%d", et_world - 1);
  setenv("ZINC_TEST_DEVICE_FAIL_RANK", value, 1);
  zinc_engine *e = NULL;
  double dt;
  zinc_status st = create(ZINC_DEVICE_AUTO, NULL, &e, &dt);
  et_expect_everywhere(st, ZINC_ERR_DEVICE, dt, "device fails on the last rank",
                       (const char *const[]){"ZINC_TEST_DEVICE_FAIL_RANK", NULL}, et_world - 1);
  ET_CHECK(dt < FAST_S, "took %.1f s (the comm timeout is 120 s)", dt);
  zinc_engine_destroy(e);
  unsetenv("ZINC_TEST_DEVICE_FAIL_RANK");
}

static void fewer_gpus_than_ranks(void) {
  zinc_engine *e = NULL;
  double dt;
  zinc_status st = create(ZINC_DEVICE_AUTO, NULL, &e, &dt);
  char ranks[32], gpus[32];
  snprintf(ranks, sizeof ranks, "%d ranks", et_world);
  snprintf(gpus, sizeof gpus, "%d GPUs", et_world / 2);
  if (et_world / 2 > 1)
    et_expect_everywhere(st, ZINC_ERR_DEVICE, dt, "more ranks than GPUs",
                         (const char *const[]){ranks, gpus, "CUDA_VISIBLE_DEVICES", NULL}, 0);
  else
    et_expect_everywhere(st, ZINC_ERR_DEVICE, dt, "two ranks on one GPU",
                         (const char *const[]){"both chose the GPU at PCI", NULL}, 0);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int oversubscribe = argc > 1 && !strcmp(argv[1], "oversubscribe");
  if (oversubscribe) { /* before anything starts CUDA */
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    int w = size ? atoi(size) : 1;
    setenv("CUDA_VISIBLE_DEVICES", w >= 4 ? "0,1" : "0", 1);
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (oversubscribe) {
    if (et_world < 2) {
      printf("SKIPPED: oversubscribing needs 2 or more ranks\n");
      MPI_Finalize();
      return 77;
    }
    require_gpus(et_world / 2);
    fewer_gpus_than_ranks();
  } else {
    require_gpus(et_world);
    auto_takes_the_stream();
    explicit_device_against_the_stream();
    failure_agreed_before_nccl();
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "device choice on GPUs FAILED\n" : "device choice on GPUs passed at %d ranks "
                                                    "(%s)\n", et_world,
           oversubscribe ? "fewer GPUs than ranks" : "stream, mismatch, agreed failure");
  MPI_Finalize();
  return bad ? 1 : 0;
}
