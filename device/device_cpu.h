/*
 * device_cpu.h — what the cpu device offers beyond the zinc_device seam
 * (device/device.h): creation with explicit placement, and access to its
 * thread pool, instruction set and topology so that the engine can run the
 * CPU kernels of kernels/cpu_kernels.h directly (the offloaded optimizer of
 * a CUDA build) on the same threads.
 *
 * zinc_device_cpu_create(threads, pin_memory, out) is
 * zinc_device_cpu_create_placed with local rank/size read from the
 * launcher's environment, binding on and verbose off.
 */
#ifndef ZINC_DEVICE_CPU_H
#define ZINC_DEVICE_CPU_H

#include "device/device.h"
#include "device/topology.h"
#include "kernels/cpu_kernels.h"
#include "base/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int threads;     /* pool size; 0: one per core of this rank's share       */
  int pin_memory;  /* mlock ZINC_LOC_HOST allocations where permitted        */
  int local_rank;  /* ranks on this node: < 0 / < 1 read them from the       */
  int local_size;  /*   launcher's environment (device/topology.h)          */
  int bind;        /* 1: bind pool threads one per core of the share; when
                    *    the node is split between ranks, also restrict the
                    *    creating thread to the share                        */
  int verbose;     /* 1: log the placement (config "placement_verbose")     */
  int near_numa;   /* the NUMA node of the GPU this device feeds (the CPU
                    * optimizer of a GPU rank); -1: none (device/topology.h) */
  int near_rank;   /* this rank among the local ranks near that node ...    */
  int near_size;   /* ... and their number                                  */
} zinc_device_cpu_placement;
#define ZINC_DEVICE_CPU_PLACEMENT_INIT { 0, 0, -1, 0, 1, 0, -1, 0, 1 }

zinc_status zinc_device_cpu_create_placed(const zinc_device_cpu_placement *pl,
                                          zinc_device **out);

/* The device's pool, instruction set and topology (NULL where hwloc could
 * not discover the machine); d must be a cpu device. */
zinc_threadpool *zinc_device_cpu_pool(const zinc_device *d);
zinc_cpu_isa zinc_device_cpu_isa(const zinc_device *d);
zinc_topology *zinc_device_cpu_topology(const zinc_device *d);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_DEVICE_CPU_H */
