/*
 * device_cuda_nvml.c — NVML loaded at run time, for the one figure the
 * cuda device takes from it: the device memory the driver attributes to
 * this process (cudaMemGetInfo only knows the whole GPU).
 *
 * libnvidia-ml.so.1 is opened with dlopen and the few entry points used are
 * looked up by name, so the library links without NVML and runs where it is
 * missing (the figure then reads -1). The process query is looked up as
 * _v3, then _v2, then unversioned, and its records are read with the size
 * that entry point fills on this driver (zinc_nvml_record_size: the sizes
 * differ across drivers, and reading one layout as another finds the wrong
 * process). The buffer holds the largest record per entry, so that no
 * driver writes past it whatever it fills.
 *
 * The record layouts and their parse are plain C in every build (tested on
 * the CPU by tests/device/test_nvml_records.c); the rest needs CUDA.
 */
#include "device/device_cuda_nvml.h"

#include <string.h>

size_t zinc_nvml_record_size(const char *symbol, int has_conf_compute, int has_detail_list) {
  static const char base[] = "nvmlDeviceGetComputeRunningProcesses";
  if (!symbol || strncmp(symbol, base, sizeof base - 1) != 0)
    return 0;
  const char *suffix = symbol + sizeof base - 1;
  if (!strcmp(suffix, "_v3"))
    return has_conf_compute && !has_detail_list ? 32 : 24;
  if (!strcmp(suffix, "_v2"))
    return 24;
  if (!strcmp(suffix, ""))
    return 16;
  return 0;
}

int64_t zinc_nvml_records_bytes(const void *records, unsigned count, size_t record_size,
                                unsigned pid) {
  const unsigned char *at = records;
  int64_t found = -1;
  for (unsigned i = 0; i < count; i++, at += record_size) {
    uint32_t rec_pid;
    uint64_t used;
    memcpy(&rec_pid, at, sizeof rec_pid); /* byte 0 in every layout */
    memcpy(&used, at + 8, sizeof used);   /* byte 8 in every layout */
    if (rec_pid != pid || used == UINT64_MAX) /* NVML_VALUE_NOT_AVAILABLE */
      continue;
    found = (found < 0 ? 0 : found) + (int64_t)used;
  }
  return found;
}

#ifdef ZINC_HAVE_CUDA

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "base/base.h"

/* The few NVML declarations used, as in nvml.h (which the toolkit may not
 * ship); the process records are read as bytes (zinc_nvml_records_bytes). */
typedef struct nvml_device_st *nvml_device;
#define NVML_OK 0
#define NVML_INSUFFICIENT_SIZE 7

struct zinc_nvml {
  void *lib;                                      /* the dlopen handle */
  int (*shutdown)(void);
  int (*running_processes)(nvml_device, unsigned int *, void *);
  size_t record_size;                             /* bytes of one record it fills */
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
  static const char *const query[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                      "nvmlDeviceGetComputeRunningProcesses_v2",
                                      "nvmlDeviceGetComputeRunningProcesses"};
  const char *found = NULL;
  for (int i = 0; i < 3 && !n->running_processes; i++) {
    n->running_processes = (int (*)(nvml_device, unsigned int *, void *))dlsym(n->lib, query[i]);
    found = query[i];
  }
  if (n->running_processes)
    n->record_size =
        zinc_nvml_record_size(found, dlsym(n->lib, "nvmlDeviceGetConfComputeMemSizeInfo") != NULL,
                              dlsym(n->lib, "nvmlDeviceGetRunningProcessDetailList") != NULL);
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
  zinc_log(ZINC_LOG_DEBUG, "cuda device %d: NVML's %s, records of %zu bytes", ordinal, found,
           n->record_size);
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
  unsigned char *records = NULL;
  int64_t found = -1;
  for (int attempt = 0; attempt < 3; attempt++) {
    /* room for the largest record per entry, whatever this driver fills */
    unsigned char *grown = realloc(records, (size_t)count * ZINC_NVML_RECORD_MAX);
    if (!grown)
      break;
    records = grown;
    unsigned int got = count;
    int r = n->running_processes(n->dev, &got, records);
    if (r == NVML_INSUFFICIENT_SIZE) {
      count = got + 16; /* processes may start meanwhile */
      continue;
    }
    if (r == NVML_OK && got <= count)
      found = zinc_nvml_records_bytes(records, got, n->record_size, (unsigned)getpid());
    break;
  }
  free(records);
  return found;
}

#endif /* ZINC_HAVE_CUDA */
