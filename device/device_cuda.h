/*
 * device_cuda.h — what the cuda device offers beyond the zinc_device_ops
 * table (device/device.h): its caching pools' statistics (reserved bytes
 * beside the bytes in use, the number of real CUDA allocations, which the
 * steady-state test watches) and the per-process usage NVML reports. The
 * caching pool behind those statistics is declared in
 * device/device_cuda_pool.h and NVML in device/device_cuda_nvml.h; only
 * device/device_cuda.c uses them.
 *
 * Declared in every build; without CUDA the functions fail with
 * ZINC_ERR_UNSUPPORTED (or report -1).
 */
#ifndef ZINC_DEVICE_CUDA_H
#define ZINC_DEVICE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Streams a cuda device tracks (its compute stream and those it created). */
#define ZINC_CUDA_MAX_STREAMS 32

typedef struct {
  uint64_t bytes_requested;  /* sum of the sizes callers asked for, live      */
  uint64_t bytes_in_use;     /* sum of the (rounded) blocks handed out, live  */
  uint64_t bytes_reserved;   /* held from CUDA: in use + cached               */
  uint64_t peak_in_use;
  uint64_t peak_reserved;
  uint64_t backend_allocs;   /* successful cudaMalloc / cudaHostAlloc calls   */
  uint64_t backend_frees;    /* cudaFree / cudaFreeHost calls                 */
  uint64_t cache_hits;       /* allocations served from the cache             */
  uint64_t cache_flushes;    /* times the cache was emptied to retry an OOM   */
  uint64_t blocks_cached;    /* free blocks held now                          */
} zinc_cuda_pool_stats;

/* Statistics of the pool behind `location` (ZINC_LOC_DEVICE or
 * ZINC_LOC_HOST) of a cuda device. ZINC_ERR_INVALID for another device. */
zinc_status zinc_device_cuda_pool_stats(zinc_device *d, int location,
                                        zinc_cuda_pool_stats *out);

/* Give every cached block whose last use has finished back to CUDA (both
 * pools). The next allocations of those sizes call cudaMalloc again. */
zinc_status zinc_device_cuda_pool_trim(zinc_device *d);

/* The deadline, in seconds, of the pools' waits for the device (the last
 * uses of freed blocks; device/device_cuda_pool.h, 600 s unless set): past
 * it they fail naming what they waited for instead of blocking for ever
 * behind a kernel that never ends. The engine sets its comm timeout.
 * ZINC_ERR_INVALID for another device or a negative value. */
zinc_status zinc_device_cuda_set_wait(zinc_device *d, double seconds);

/* The cudaStream_t (as void *) behind a stream of a cuda device; NULL s:
 * the compute stream. NULL for another kind of device. */
void *zinc_device_cuda_stream(zinc_device *d, zinc_stream *s);

/* The NUMA node (OS index) nearest a cuda device's GPU by hwloc's PCI
 * locality, or -1 where hwloc has no I/O information (or not a cuda
 * device). */
int zinc_device_cuda_numa_node(zinc_device *d);

/* The PCI bus id of a cuda device's GPU ("0000:3b:00.0") into buf (len
 * bytes, NUL-terminated); ZINC_ERR_INVALID for another device. */
zinc_status zinc_device_cuda_pci_bus_id(zinc_device *d, char *buf, int len);

/* Device memory the driver attributes to this process, in bytes, through
 * NVML (loaded at run time); -1 when NVML is absent or does not say (some
 * containers hide other PID namespaces from it). */
int64_t zinc_device_cuda_process_bytes(zinc_device *d);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_DEVICE_CUDA_H */
