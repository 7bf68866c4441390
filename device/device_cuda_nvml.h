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
 * The record layouts and their parse are declared in every build (pure, so
 * the CPU build tests them); the rest only in the CUDA build
 * (ZINC_HAVE_CUDA).
 */
#ifndef ZINC_DEVICE_CUDA_NVML_H
#define ZINC_DEVICE_CUDA_NVML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the process records, in every build (tested on the CPU) */

/* The byte size of one record the process query fills, for the entry point
 * found: "nvmlDeviceGetComputeRunningProcesses_v3", "..._v2" or the
 * unversioned name (v1). The records share their first two fields (pid at
 * byte 0, used memory at byte 8) and differ in size:
 *   v1: pid, used memory                                           16 bytes
 *   v2: + GPU instance id, compute instance id                     24 bytes
 *   v3 of the R535 drivers: + confidential-compute memory          32 bytes
 * _v3 fills the 32-byte record only on the drivers that introduced it
 * (they export nvmlDeviceGetConfComputeMemSizeInfo but not yet
 * nvmlDeviceGetRunningProcessDetailList); before and after, _v3 fills the
 * 24-byte one. has_conf_compute and has_detail_list say which of those two
 * the library exports. 0 for an unknown name. */
size_t zinc_nvml_record_size(const char *symbol, int has_conf_compute, int has_detail_list);

/* The device memory of process `pid` in `count` records of record_size
 * bytes at `records` (as the query filled them): the sum over its records,
 * skipping "not available" (all bits set); -1 when it has none. */
int64_t zinc_nvml_records_bytes(const void *records, unsigned count, size_t record_size,
                                unsigned pid);

#define ZINC_NVML_RECORD_MAX 32 /* the largest record: buffers hold this much per entry */

#ifdef __cplusplus
}
#endif

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
