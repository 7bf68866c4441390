/*
 * topology.h — where this rank's CPU work and host buffers go (hwloc).
 *
 * The machine is discovered once, at zinc_topology_create. From it and the
 * process's binding we compute this rank's *share* of the cores:
 *  - if the launcher already bound the process (its binding is a strict
 *    subset of the cpuset it is allowed — mpirun --bind-to core/socket,
 *    srun --cpu-bind), that binding is the share: ranks are already split;
 *  - otherwise, with several ranks on the node, the allowed cores are cut
 *    into local_size contiguous runs (zinc_topology_split) and this rank
 *    takes run local_rank, so ranks split the cores instead of fighting
 *    over them;
 *  - with one rank, the share is the whole binding;
 *  - near a GPU (near_numa >= 0: the NUMA node of the GPU's PCI locality,
 *    zinc_topology_numa_of_pci), and not bound by the launcher, the cut is
 *    made from that node's cores instead, among the near_size local ranks
 *    whose GPUs share the node (this one is near_rank of them): the CPU
 *    work that feeds the GPU runs beside it and beside its pinned buffers.
 *    Where the node is unknown (no I/O information) or has none of the
 *    allowed cores, the cut is the one above.
 * Threads are bound one per core of the share (all the core's PUs that are
 * in the share); host buffers go on the NUMA nodes of the share (falling
 * back, with one warning, to ordinary page-aligned memory where the OS
 * refuses the binding).
 *
 * Local rank and size: given by the caller, or read from the environment
 * (OMPI_COMM_WORLD_LOCAL_RANK/_SIZE of Open MPI, MPI_LOCALRANKID/
 * MPI_LOCALNRANKS of MPICH), else 0 and 1.
 */
#ifndef ZINC_TOPOLOGY_H
#define ZINC_TOPOLOGY_H

#include <stddef.h>

#include <hwloc.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinc_topology zinc_topology;

typedef struct {
  int local_rank;  /* < 0: from the environment (else 0)         */
  int local_size;  /* < 1: from the environment (else 1)         */
  int io;          /* 1: discover PCI devices (zinc_topology_numa_of_pci) */
  int verbose;     /* 1: log the placement at info level         */
  int near_numa;   /* NUMA node (OS index) of the GPU this rank feeds; -1: none */
  int near_rank;   /* this rank among the local ranks near near_numa ... */
  int near_size;   /* ... and their number (>= 1)                    */
  const char *synthetic; /* tests: an hwloc synthetic description ("pack:2
                            numa:1 core:8 pu:1") instead of this machine */
} zinc_topology_opts;
#define ZINC_TOPOLOGY_OPTS_INIT { -1, 0, 0, 0, -1, 0, 1, NULL }

zinc_status zinc_topology_create(const zinc_topology_opts *opt, zinc_topology **out);
void zinc_topology_destroy(zinc_topology *t); /* NULL accepted */

/* Cores in this rank's share (>= 1): the default thread count. */
int zinc_topology_cores(const zinc_topology *t);
/* NUMA nodes of the whole machine (>= 1). */
int zinc_topology_numa_nodes(const zinc_topology *t);
int zinc_topology_local_rank(const zinc_topology *t);
int zinc_topology_local_size(const zinc_topology *t);
/* The share's PUs; valid for the life of t. */
hwloc_const_cpuset_t zinc_topology_share_cpuset(const zinc_topology *t);
hwloc_topology_t zinc_topology_hwloc(const zinc_topology *t);
/* 1 when this rank took a part of the process binding (several ranks, no
 * launcher binding), so its threads must stay inside the share. */
int zinc_topology_splits_node(const zinc_topology *t);
/* The NUMA node (OS index) the share was cut from near a GPU, or -1 when
 * the cut was the local-rank split over the whole binding. */
int zinc_topology_near_numa(const zinc_topology *t);

/* Bind the calling thread to core (index mod cores) of the share. */
zinc_status zinc_topology_bind_thread(const zinc_topology *t, int index);
/* Bind the calling thread to the whole share. */
zinc_status zinc_topology_bind_thread_share(const zinc_topology *t);

/* Page-aligned host memory on the share's NUMA nodes; free with
 * zinc_topology_free_host and the same size. */
zinc_status zinc_topology_alloc_host(zinc_topology *t, size_t bytes, void **out);
void zinc_topology_free_host(zinc_topology *t, void *p, size_t bytes);

/* Put later zinc_topology_alloc_host buffers on NUMA node `node` (OS
 * index) instead of the share's nodes — e.g. the node nearest the rank's
 * GPU from zinc_topology_numa_of_pci. ZINC_ERR_INVALID for a node this
 * machine does not have. */
zinc_status zinc_topology_set_host_numa(zinc_topology *t, int node);

/* NUMA node (OS index) nearest the PCI device "dddd:bb:dd.f" or "bb:dd.f"
 * (a GPU's bus id), or -1 when unknown (created without io, no such
 * device, or no locality information). */
int zinc_topology_numa_of_pci(const zinc_topology *t, const char *bus_id);

/* The split rule, pure: run of cores [*first, *first + *count) of ncores
 * for local rank `rank` of `size`. More ranks than cores: one core each,
 * shared round-robin. */
void zinc_topology_split(int ncores, int rank, int size, int *first, int *count);

/* Local rank and size from the launcher's environment; 0 if not found. */
int zinc_topology_env_local(int *rank, int *size);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_TOPOLOGY_H */
