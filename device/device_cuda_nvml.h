/*
 * device_cuda_nvml.h — NVML loaded at run time (device/device_cuda_nvml.c),
 * internal to device/: the cuda device opens it at creation to report the
 * device memory the driver attributes to this process
 * (zinc_device_cuda_process_bytes, device/device_cuda.h).
 *
 * NVML is reached with dlopen, so the library has no link dependency on
 * it; where it is absent or does not know the GPU, the handle is NULL and
 * the figure is -1.
 *
 * Declared only in the CUDA build (ZINC_HAVE_CUDA).
 */
#ifndef ZINC_DEVICE_CUDA_NVML_H
#define ZINC_DEVICE_CUDA_NVML_H

#include <stdint.h>

#ifdef ZINC_HAVE_CUDA

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinc_nvml zinc_nvml;

/* NVML for the GPU of CUDA ordinal `ordinal` (found by its PCI bus id), or
 * NULL where NVML cannot be loaded or initialised or does not know the GPU
 * (logged at debug level). */
zinc_nvml *zinc_nvml_open(int ordinal);
/* Shut NVML down and unload it. Accepts NULL. */
void zinc_nvml_close(zinc_nvml *n);
/* Device memory NVML attributes to the calling process on the GPU, in
 * bytes; -1 for NULL n or when NVML does not say (some containers hide
 * other PID namespaces from it). */
int64_t zinc_nvml_process_bytes(zinc_nvml *n);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_HAVE_CUDA */
#endif /* ZINC_DEVICE_CUDA_NVML_H */
