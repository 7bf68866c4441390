/*
 * topology.c — hwloc discovery, this rank's share of the cores, thread
 * binding and NUMA-placed host memory (see topology.h for the rules).
 *
 * Invariants: after create, `share` is a non-empty subset of the allowed
 * cpuset; core_sets holds one non-empty PU set per core of the share, in
 * logical order; nodeset holds the NUMA nodes of the share.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "device/topology.h"

struct zinc_topology {
  hwloc_topology_t topo;
  hwloc_bitmap_t bound;       /* the process binding at create, within allowed */
  hwloc_bitmap_t share;       /* this rank's PUs                               */
  hwloc_bitmap_t nodeset;     /* NUMA nodes of the share                       */
  hwloc_bitmap_t *core_sets;  /* (ncores) PUs of each core of the share        */
  int ncores;
  int numa_nodes;
  int local_rank, local_size;
  int near_numa, near_rank, near_size; /* asked for (topology.h)            */
  int near_used;              /* the NUMA node the share came from, or -1  */
  int synthetic;
  int verbose;
  _Atomic int warned_membind;
};

void zinc_topology_split(int ncores, int rank, int size, int *first, int *count) {
  if (ncores < 1 || size < 1 || rank < 0) {
    *first = 0;
    *count = ncores > 0 ? ncores : 0;
    return;
  }
  if (ncores < size) {
    *first = rank % ncores;
    *count = 1;
    return;
  }
  int64_t lo = (int64_t)ncores * rank / size, hi = (int64_t)ncores * (rank + 1) / size;
  *first = (int)lo;
  *count = (int)(hi - lo);
}

int zinc_topology_env_local(int *rank, int *size) {
  static const char *const names[][2] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int r = (int)zinc_env_int(names[i][0], -1, 0, 1 << 20);
    int s = r >= 0 ? (int)zinc_env_int(names[i][1], -1, 0, 1 << 20) : -1;
    if (r >= 0 && s >= 1 && r < s) {
      *rank = r;
      *size = s;
      return 1;
    }
  }
  return 0;
}

/* Cores (or PUs, where hwloc reports no cores) that intersect `set`. */
static int count_units(hwloc_topology_t topo, hwloc_const_cpuset_t set, hwloc_obj_type_t type) {
  int n = 0, all = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < all; i++)
    if (hwloc_bitmap_intersects(hwloc_get_obj_by_type(topo, type, i)->cpuset, set))
      n++;
  return n;
}

static hwloc_obj_t nth_unit(hwloc_topology_t topo, hwloc_const_cpuset_t set,
                            hwloc_obj_type_t type, int k) {
  int all = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < all; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, i);
    if (hwloc_bitmap_intersects(o->cpuset, set) && k-- == 0)
      return o;
  }
  return NULL;
}

static zinc_status compute_share(zinc_topology *t) {
  hwloc_topology_t topo = t->topo;
  hwloc_obj_type_t unit = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0
                              ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  int launcher_bound = !hwloc_bitmap_isequal(t->bound, hwloc_topology_get_allowed_cpuset(topo));
  hwloc_bitmap_copy(t->share, t->bound);
  /* what is cut: the whole binding among the local ranks, or the GPU's
   * node among the ranks near it */
  hwloc_bitmap_t from = hwloc_bitmap_dup(t->bound);
  if (!from)
    return zinc_error(ZINC_ERR_NOMEM, "topology: out of memory for a cpuset");
  int rank = t->local_rank, size = t->local_size;
  t->near_used = -1;
  hwloc_obj_t node = t->near_numa >= 0
                         ? hwloc_get_numanode_obj_by_os_index(topo, (unsigned)t->near_numa)
                         : NULL;
  if (node && !launcher_bound && t->near_size >= 1 && t->near_rank >= 0 &&
      t->near_rank < t->near_size && hwloc_bitmap_intersects(node->cpuset, t->bound)) {
    hwloc_bitmap_and(from, node->cpuset, t->bound);
    rank = t->near_rank;
    size = t->near_size;
    t->near_used = t->near_numa;
  }
  if (!launcher_bound && (size > 1 || t->near_used >= 0)) {
    int first, count;
    zinc_topology_split(count_units(topo, from, unit), rank, size, &first, &count);
    hwloc_bitmap_zero(t->share);
    for (int k = first; k < first + count; k++) {
      hwloc_obj_t o = nth_unit(topo, from, unit, k);
      if (o)
        hwloc_bitmap_or(t->share, t->share, o->cpuset);
    }
    hwloc_bitmap_and(t->share, t->share, from);
  }
  hwloc_bitmap_free(from);
  if (hwloc_bitmap_iszero(t->share))
    return zinc_error(ZINC_ERR_INVALID, "topology: local rank %d of %d got no CPU; check "
                      "the launcher's binding", t->local_rank, t->local_size);

  t->ncores = count_units(topo, t->share, unit);
  ZINC_CHECK(zinc_calloc((void **)&t->core_sets, (size_t)t->ncores, sizeof *t->core_sets,
                         "topology core sets"));
  for (int k = 0; k < t->ncores; k++) {
    t->core_sets[k] = hwloc_bitmap_alloc();
    if (!t->core_sets[k])
      return zinc_error(ZINC_ERR_NOMEM, "topology: out of memory for a cpuset");
    hwloc_bitmap_and(t->core_sets[k], nth_unit(topo, t->share, unit, k)->cpuset, t->share);
  }
  hwloc_cpuset_to_nodeset(topo, t->share, t->nodeset);
  return ZINC_OK;
}

static void log_placement(const zinc_topology *t) {
  char share[256], bound[256], nodes[128];
  hwloc_bitmap_list_snprintf(share, sizeof share, t->share);
  hwloc_bitmap_list_snprintf(bound, sizeof bound, t->bound);
  hwloc_bitmap_list_snprintf(nodes, sizeof nodes, t->nodeset);
  char near[96] = "";
  if (t->near_used >= 0)
    snprintf(near, sizeof near, ", cut from NUMA node %d near the GPU (rank %d of %d there)",
             t->near_used, t->near_rank, t->near_size);
  else if (t->near_numa >= 0)
    snprintf(near, sizeof near, " (the GPU's NUMA node %d has none of the allowed cores)",
             t->near_numa);
  zinc_log(ZINC_LOG_INFO,
           "placement: local rank %d of %d, %d core(s) on PUs %s (process bound to %s), "
           "NUMA nodes %s of %d%s", t->local_rank, t->local_size, t->ncores, share, bound,
           nodes, t->numa_nodes, near);
}

void zinc_topology_destroy(zinc_topology *t) {
  if (!t)
    return;
  for (int k = 0; k < t->ncores && t->core_sets; k++)
    hwloc_bitmap_free(t->core_sets[k]);
  free(t->core_sets);
  hwloc_bitmap_free(t->nodeset);
  hwloc_bitmap_free(t->share);
  hwloc_bitmap_free(t->bound);
  if (t->topo)
    hwloc_topology_destroy(t->topo);
  free(t);
}

zinc_status zinc_topology_create(const zinc_topology_opts *opt, zinc_topology **out) {
  *out = NULL;
  zinc_topology_opts o = ZINC_TOPOLOGY_OPTS_INIT;
  if (opt)
    o = *opt;
  zinc_topology *t = NULL;
  ZINC_CHECK(zinc_calloc((void **)&t, 1, sizeof *t, "the topology"));
  zinc_status st = ZINC_OK;
  t->verbose = o.verbose;
  t->near_numa = o.near_numa;
  t->near_rank = o.near_rank;
  t->near_size = o.near_size;
  t->synthetic = o.synthetic != NULL;
  t->local_rank = 0;
  t->local_size = 1;
  if (o.local_rank >= 0 && o.local_size >= 1) {
    t->local_rank = o.local_rank;
    t->local_size = o.local_size;
  } else {
    zinc_topology_env_local(&t->local_rank, &t->local_size);
  }
  if (t->local_rank >= t->local_size) {
    st = zinc_error(ZINC_ERR_INVALID, "topology: local rank %d is not below local size %d",
                    t->local_rank, t->local_size);
    goto fail;
  }
  if (hwloc_topology_init(&t->topo) != 0) {
    st = zinc_error(ZINC_ERR_NOMEM, "topology: hwloc_topology_init failed: %s", strerror(errno));
    goto fail;
  }
  if (o.synthetic && hwloc_topology_set_synthetic(t->topo, o.synthetic) != 0) {
    st = zinc_error(ZINC_ERR_INVALID, "topology: bad synthetic description \"%s\"",
                    o.synthetic);
    goto fail;
  }
  if (o.io) {
    /* PCI locality from sysfs alone: the plugins that open GPU runtimes or
     * libpciaccess are slow, and libpciaccess leaks at exit. */
    static const char *const skip[] = {"pci", "opencl", "gl", "cuda", "nvml", "rsmi",
                                       "levelzero"};
    hwloc_topology_set_io_types_filter(t->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
      hwloc_topology_set_components(t->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
  }
  if (hwloc_topology_load(t->topo) != 0) {
    st = zinc_error(ZINC_ERR_UNSUPPORTED, "topology: hwloc could not discover this machine: "
                    "%s", strerror(errno));
    hwloc_topology_destroy(t->topo);
    t->topo = NULL;
    goto fail;
  }
  t->bound = hwloc_bitmap_alloc();
  t->share = hwloc_bitmap_alloc();
  t->nodeset = hwloc_bitmap_alloc();
  if (!t->bound || !t->share || !t->nodeset) {
    st = zinc_error(ZINC_ERR_NOMEM, "topology: out of memory for cpusets");
    goto fail;
  }
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(t->topo);
  if (t->synthetic || hwloc_get_cpubind(t->topo, t->bound, HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(t->bound, allowed);
  hwloc_bitmap_and(t->bound, t->bound, allowed);
  if (hwloc_bitmap_iszero(t->bound))
    hwloc_bitmap_copy(t->bound, allowed);
  t->numa_nodes = hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE);
  if (t->numa_nodes < 1)
    t->numa_nodes = 1;
  ZINC_CHECK_GOTO(compute_share(t), st, fail);
  if (t->verbose)
    log_placement(t);
  *out = t;
  return ZINC_OK;

fail:
  zinc_topology_destroy(t);
  return st;
}

int zinc_topology_cores(const zinc_topology *t) { return t->ncores; }
int zinc_topology_numa_nodes(const zinc_topology *t) { return t->numa_nodes; }
int zinc_topology_local_rank(const zinc_topology *t) { return t->local_rank; }
int zinc_topology_local_size(const zinc_topology *t) { return t->local_size; }
hwloc_const_cpuset_t zinc_topology_share_cpuset(const zinc_topology *t) { return t->share; }
hwloc_topology_t zinc_topology_hwloc(const zinc_topology *t) { return t->topo; }
int zinc_topology_near_numa(const zinc_topology *t) { return t->near_used; }
int zinc_topology_splits_node(const zinc_topology *t) {
  return !hwloc_bitmap_isequal(t->share, t->bound);
}

static zinc_status bind_to(const zinc_topology *t, hwloc_const_cpuset_t set, const char *what) {
  if (hwloc_set_cpubind(t->topo, set, HWLOC_CPUBIND_THREAD) == 0)
    return ZINC_OK;
  char s[256];
  hwloc_bitmap_list_snprintf(s, sizeof s, set);
  return zinc_error(errno == ENOSYS ? ZINC_ERR_UNSUPPORTED : ZINC_ERR_INVALID,
                    "topology: binding a thread to %s (PUs %s) failed: %s", what, s,
                    strerror(errno));
}

zinc_status zinc_topology_bind_thread(const zinc_topology *t, int index) {
  int k = (index < 0 ? -index : index) % t->ncores;
  ZINC_CHECK(bind_to(t, t->core_sets[k], "a core of the share"));
  if (t->verbose) {
    char s[64];
    hwloc_bitmap_list_snprintf(s, sizeof s, t->core_sets[k]);
    zinc_log(ZINC_LOG_INFO, "placement: thread %d bound to core %d of the share (PUs %s)",
             index, k, s);
  }
  return ZINC_OK;
}

zinc_status zinc_topology_bind_thread_share(const zinc_topology *t) {
  return bind_to(t, t->share, "this rank's share");
}

zinc_status zinc_topology_alloc_host(zinc_topology *t, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0)
    bytes = 1;
  void *p = NULL;
  if (t->numa_nodes > 1) {
    p = hwloc_alloc_membind(t->topo, bytes, t->nodeset, HWLOC_MEMBIND_BIND,
                            HWLOC_MEMBIND_BYNODESET);
    if (!p && !atomic_exchange(&t->warned_membind, 1))
      zinc_log(ZINC_LOG_WARN, "placement: binding host memory to its NUMA nodes failed (%s); "
               "host buffers use the default policy", strerror(errno));
  }
  if (!p)
    p = hwloc_alloc(t->topo, bytes);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of host memory allocating %zu bytes", bytes);
  *out = p;
  return ZINC_OK;
}

void zinc_topology_free_host(zinc_topology *t, void *p, size_t bytes) {
  if (p)
    hwloc_free(t->topo, p, bytes ? bytes : 1);
}

zinc_status zinc_topology_set_host_numa(zinc_topology *t, int node) {
  hwloc_obj_t obj = hwloc_get_numanode_obj_by_os_index(t->topo, (unsigned)node);
  if (node < 0 || !obj)
    return zinc_error(ZINC_ERR_INVALID, "topology: no NUMA node %d on this machine (%d nodes)",
                      node, t->numa_nodes);
  hwloc_bitmap_only(t->nodeset, (unsigned)node);
  if (t->verbose)
    zinc_log(ZINC_LOG_INFO, "placement: host buffers on NUMA node %d", node);
  return ZINC_OK;
}

int zinc_topology_numa_of_pci(const zinc_topology *t, const char *bus_id) {
  if (!bus_id)
    return -1;
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(t->topo, bus_id);
  if (!dev)
    return -1;
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->topo, dev);
  if (!anc || !anc->nodeset || hwloc_bitmap_iszero(anc->nodeset))
    return -1;
  return hwloc_bitmap_first(anc->nodeset);
}
