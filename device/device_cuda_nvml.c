/*
 * device_cuda_nvml.c — NVML loaded at run time, for the one figure the
 * cuda device takes from it: the device memory the driver attributes to
 * this process (cudaMemGetInfo only knows the whole GPU).
 *
 * libnvidia-ml.so.1 is opened with dlopen and the few entry points used are
 * looked up by name, so the library links without NVML and runs where it is
 * missing (the figure then reads -1). The process query prefers the _v3
 * entry point and falls back to _v2; both fill the same record.
 */
#include "device/device_cuda_nvml.h"

#ifdef ZINC_HAVE_CUDA

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "base/base.h"

/* The few NVML declarations used, as in nvml.h (which the toolkit may not
 * ship); nvmlProcessInfo_v2_t is the layout of _v2 and _v3 of the query. */
typedef struct nvml_device_st *nvml_device;
typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
} nvml_process_info;
#define NVML_OK 0
#define NVML_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE 0xffffffffffffffffull

struct zinc_nvml {
  void *lib;                                      /* the dlopen handle */
  int (*shutdown)(void);
  int (*running_processes)(nvml_device, unsigned int *, nvml_process_info *);
  nvml_device dev;
};

zinc_nvml *zinc_nvml_open(int ordinal) {
  char bus_id[32];
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  zinc_nvml *n = calloc(1, sizeof *n);
  if (!n) {
    zinc_log(ZINC_LOG_DEBUG, "cuda device %d: no host memory for the NVML state (%zu bytes); "
             "per-process memory usage will read -1", ordinal, sizeof *n);
    return NULL;
  }
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    zinc_log(ZINC_LOG_DEBUG, "cuda device %d: NVML not loaded (%s); per-process memory "
             "usage will read -1", ordinal, dlerror());
    free(n);
    return NULL;
  }
  int (*init)(void) = (int (*)(void))dlsym(n->lib, "nvmlInit_v2");
  int (*by_pci)(const char *, nvml_device *) =
      (int (*)(const char *, nvml_device *))dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  n->shutdown = (int (*)(void))dlsym(n->lib, "nvmlShutdown");
  n->running_processes = (int (*)(nvml_device, unsigned int *, nvml_process_info *))dlsym(
      n->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!n->running_processes)
    n->running_processes = (int (*)(nvml_device, unsigned int *, nvml_process_info *))dlsym(
        n->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
  if (!init || !by_pci || !n->shutdown || !n->running_processes || init() != NVML_OK) {
    dlclose(n->lib);
    free(n);
    return NULL;
  }
  if (by_pci(bus_id, &n->dev) != NVML_OK) {
    n->shutdown();
    dlclose(n->lib);
    free(n);
    return NULL;
  }
  return n;
}

void zinc_nvml_close(zinc_nvml *n) {
  if (!n)
    return;
  n->shutdown();
  dlclose(n->lib);
  free(n);
}

int64_t zinc_nvml_process_bytes(zinc_nvml *n) {
  if (!n)
    return -1;
  unsigned int count = 64;
  nvml_process_info *info = NULL;
  int64_t found = -1;
  for (int attempt = 0; attempt < 3; attempt++) {
    nvml_process_info *grown = realloc(info, count * sizeof *info);
    if (!grown)
      break;
    info = grown;
    unsigned int got = count;
    int r = n->running_processes(n->dev, &got, info);
    if (r == NVML_INSUFFICIENT_SIZE) {
      count = got + 16; /* processes may start meanwhile */
      continue;
    }
    if (r == NVML_OK) {
      unsigned int pid = (unsigned int)getpid();
      for (unsigned int i = 0; i < got; i++)
        if (info[i].pid == pid && info[i].used_gpu_memory != NVML_VALUE_NOT_AVAILABLE)
          found = (int64_t)info[i].used_gpu_memory;
    }
    break;
  }
  free(info);
  return found;
}

#endif /* ZINC_HAVE_CUDA */
