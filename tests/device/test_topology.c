/* test_topology.c — placement: the split rule (exhaustive for small
 * sizes), this rank's share inside the allowed cpuset, ranks of one node
 * taking disjoint shares, local rank/size from the launcher's environment,
 * NUMA-placed host memory, and the cpu device's pool threads bound inside
 * the share — each thread reads its own binding back through hwloc; and on
 * a synthetic two-node machine, the share cut from the node near a GPU.
 * Runs under TSan (label `threads`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "device/device_cpu.h"
#include "device/topology.h"

static void split_rule(void **state) {
  for (int ncores = 1; ncores <= 40; ncores++)
    for (int size = 1; size <= 12; size++) {
      int next = 0, lo = 1 << 30, hi = 0;
      for (int rank = 0; rank < size; rank++) {
        int first, count;
        zinc_topology_split(ncores, rank, size, &first, &count);
        assert_true(count >= 1);
        assert_true(first >= 0 && first + count <= ncores);
        if (ncores >= size) { /* contiguous, disjoint, covering, balanced */
          assert_int_equal(first, next);
          next = first + count;
          lo = count < lo ? count : lo;
          hi = count > hi ? count : hi;
        } else { /* more ranks than cores: one core each, round robin */
          assert_int_equal(count, 1);
          assert_int_equal(first, rank % ncores);
        }
      }
      if (ncores >= size) {
        assert_int_equal(next, ncores);
        assert_true(hi - lo <= 1);
      }
    }
}

static zinc_topology *make_topology(int rank, int size) {
  zinc_topology_opts o = ZINC_TOPOLOGY_OPTS_INIT;
  o.local_rank = rank;
  o.local_size = size;
  o.verbose = 1;
  zinc_topology *t = NULL;
  assert_int_equal(zinc_topology_create(&o, &t), ZINC_OK);
  return t;
}

static void share_inside_allowed(void **state) {
  zinc_log_set_level(ZINC_LOG_INFO); /* show the placement lines */
  zinc_topology *t = make_topology(0, 1);
  hwloc_topology_t h = zinc_topology_hwloc(t);
  hwloc_const_cpuset_t share = zinc_topology_share_cpuset(t);
  assert_true(zinc_topology_cores(t) >= 1);
  assert_true(zinc_topology_numa_nodes(t) >= 1);
  assert_true(hwloc_bitmap_isincluded(share, hwloc_topology_get_allowed_cpuset(h)));
  hwloc_bitmap_t bound = hwloc_bitmap_alloc();
  assert_int_equal(hwloc_get_cpubind(h, bound, HWLOC_CPUBIND_PROCESS), 0);
  assert_true(hwloc_bitmap_isincluded(share, bound));
  assert_int_equal(zinc_topology_splits_node(t), 0);
  hwloc_bitmap_free(bound);

  void *p;
  assert_int_equal(zinc_topology_alloc_host(t, 3 << 20, &p), ZINC_OK);
  assert_int_equal((uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
  memset(p, 1, 3 << 20);
  zinc_topology_free_host(t, p, 3 << 20);
  assert_int_equal(zinc_topology_numa_of_pci(t, "0000:ff:1f.7"), -1);
  assert_int_equal(zinc_topology_numa_of_pci(t, NULL), -1);
  zinc_topology_destroy(t);
  zinc_topology_destroy(NULL);
}

/* With I/O discovery, a PCI device's NUMA node is a node of this machine
 * (or unknown), and host buffers can be sent to a chosen node. */
static void pci_locality_and_host_node(void **state) {
  zinc_topology_opts o = ZINC_TOPOLOGY_OPTS_INIT;
  o.io = 1;
  o.verbose = 1;
  zinc_topology *t;
  assert_int_equal(zinc_topology_create(&o, &t), ZINC_OK);
  hwloc_topology_t h = zinc_topology_hwloc(t);
  int seen = 0;
  for (hwloc_obj_t d = hwloc_get_next_pcidev(h, NULL); d && seen < 4;
       d = hwloc_get_next_pcidev(h, d), seen++) {
    char id[32];
    snprintf(id, sizeof id, "%04x:%02x:%02x.%01x", d->attr->pcidev.domain, d->attr->pcidev.bus,
             d->attr->pcidev.dev, d->attr->pcidev.func);
    int node = zinc_topology_numa_of_pci(t, id);
    fprintf(stderr, "PCI %s: NUMA node %d\n", id, node);
    assert_true(node == -1 || hwloc_get_numanode_obj_by_os_index(h, (unsigned)node) != NULL);
  }
  if (!seen)
    fprintf(stderr, "no PCI device visible: only the unknown answer is checked\n");
  unsigned first = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, 0)->os_index;
  assert_int_equal(zinc_topology_set_host_numa(t, (int)first), ZINC_OK);
  assert_int_equal(zinc_topology_set_host_numa(t, 4000), ZINC_ERR_INVALID);
  void *p;
  assert_int_equal(zinc_topology_alloc_host(t, 1 << 20, &p), ZINC_OK);
  memset(p, 3, 1 << 20);
  zinc_topology_free_host(t, p, 1 << 20);
  zinc_topology_destroy(t);
}

static void ranks_split_the_node(void **state) {
  zinc_topology *whole = make_topology(0, 1);
  hwloc_topology_t h = zinc_topology_hwloc(whole);
  int cores = zinc_topology_cores(whole);
  if (!hwloc_bitmap_isequal(zinc_topology_share_cpuset(whole),
                            hwloc_topology_get_allowed_cpuset(h))) {
    zinc_topology_destroy(whole);
    fprintf(stderr, "SKIPPED: the launcher bound this process; its binding is the share\n");
    skip();
  }
  for (int size = 2; size <= 3; size++) {
    hwloc_bitmap_t all = hwloc_bitmap_alloc();
    zinc_topology *t[3];
    for (int r = 0; r < size; r++) {
      t[r] = make_topology(r, size);
      hwloc_const_cpuset_t s = zinc_topology_share_cpuset(t[r]);
      assert_true(hwloc_bitmap_isincluded(s, zinc_topology_share_cpuset(whole)));
      assert_int_equal(zinc_topology_splits_node(t[r]), cores > 1);
      for (int q = 0; q < r; q++) /* disjoint while there are cores enough */
        if (cores >= size)
          assert_false(hwloc_bitmap_intersects(s, zinc_topology_share_cpuset(t[q])));
      hwloc_bitmap_or(all, all, s);
    }
    assert_true(hwloc_bitmap_isequal(all, zinc_topology_share_cpuset(whole)));
    for (int r = 0; r < size; r++)
      zinc_topology_destroy(t[r]);
    hwloc_bitmap_free(all);
  }
  zinc_topology_destroy(whole);
}

static void local_rank_from_environment(void **state) {
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  int r = -1, s = -1;
  assert_int_equal(zinc_topology_env_local(&r, &s), 1);
  assert_int_equal(r, 1);
  assert_int_equal(s, 2);
  zinc_topology *t = make_topology(-1, 0);
  assert_int_equal(zinc_topology_local_rank(t), 1);
  assert_int_equal(zinc_topology_local_size(t), 2);
  zinc_topology_destroy(t);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1); /* not below the size: ignored */
  assert_int_equal(zinc_topology_env_local(&r, &s), 0);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  t = make_topology(-1, 0);
  assert_int_equal(zinc_topology_local_size(t), 1);
  zinc_topology_destroy(t);
}

typedef struct {
  hwloc_topology_t h;
  hwloc_bitmap_t binding[8]; /* each thread's binding, read by itself */
} readback;

static void read_binding(void *ctx, int64_t begin, int64_t end, int tid) {
  readback *rb = ctx;
  hwloc_get_cpubind(rb->h, rb->binding[tid], HWLOC_CPUBIND_THREAD);
}

static int cores_touching(hwloc_topology_t h, hwloc_const_cpuset_t set) {
  int n = 0;
  for (int i = 0; i < hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE); i++)
    n += hwloc_bitmap_intersects(hwloc_get_obj_by_type(h, HWLOC_OBJ_CORE, i)->cpuset, set);
  return n;
}

/* Pool threads of a cpu device for local rank `rank` of `size` are each
 * bound to one core of the share (the calling thread, part 0, inside it). */
static void pool_threads_bound(int rank, int size, int threads) {
  zinc_device_cpu_placement pl = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  pl.threads = threads;
  pl.local_rank = rank;
  pl.local_size = size;
  pl.verbose = 1;
  zinc_device *d;
  assert_int_equal(zinc_device_cpu_create_placed(&pl, &d), ZINC_OK);
  zinc_topology *t = zinc_device_cpu_topology(d);
  assert_non_null(t);
  readback rb = {zinc_topology_hwloc(t), {0}};
  int n = zinc_threadpool_size(zinc_device_cpu_pool(d));
  assert_int_equal(n, threads);
  for (int i = 0; i < n; i++)
    rb.binding[i] = hwloc_bitmap_alloc();
  zinc_threadpool_for(zinc_device_cpu_pool(d), n, 1, read_binding, &rb);
  hwloc_const_cpuset_t share = zinc_topology_share_cpuset(t);
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(rb.h);
  for (int i = 0; i < n; i++) {
    char s[128];
    hwloc_bitmap_list_snprintf(s, sizeof s, rb.binding[i]);
    fprintf(stderr, "local rank %d of %d: pool thread %d bound to PUs %s\n", rank, size, i, s);
    assert_false(hwloc_bitmap_iszero(rb.binding[i]));
    assert_true(hwloc_bitmap_isincluded(rb.binding[i], allowed));
    assert_true(hwloc_bitmap_isincluded(rb.binding[i], share));
    if (i > 0) /* workers: one core each, distinct while there are cores enough */
      assert_int_equal(cores_touching(rb.h, rb.binding[i]), 1);
    for (int q = 1; q < i && i < zinc_topology_cores(t); q++)
      assert_false(hwloc_bitmap_intersects(rb.binding[q], rb.binding[i]));
  }
  for (int i = 0; i < n; i++) {
    hwloc_bitmap_free(rb.binding[i]);
  }
  zinc_device_destroy(d);
}

static void pool_threads_inside_the_share(void **state) {
  zinc_topology *whole = make_topology(0, 1);
  int cores = zinc_topology_cores(whole);
  hwloc_topology_t h = zinc_topology_hwloc(whole);
  hwloc_bitmap_t before = hwloc_bitmap_alloc();
  hwloc_get_cpubind(h, before, HWLOC_CPUBIND_THREAD);
  pool_threads_bound(0, 1, cores + 1 < 8 ? cores + 1 : 8); /* one more than cores: wraps */
  if (cores >= 2) {
    pool_threads_bound(1, 2, 2); /* the second rank of two on this node */
    /* the creating thread was restricted to that rank's share; undo */
    hwloc_set_cpubind(h, before, HWLOC_CPUBIND_THREAD);
  } else {
    fprintf(stderr, "one core only: the two-rank split is not exercised\n");
  }
  hwloc_bitmap_free(before);
  zinc_topology_destroy(whole);
}

/* Near a GPU: on a synthetic machine of 2 packages, each one NUMA node of
 * 8 cores with 2 PUs (node k: PUs 16k .. 16k+15), the share is cut from the
 * GPU's node among the ranks near it; without the node (or one the machine
 * lacks) the cut is the local-rank split over the whole machine. */
static void near_share(int local_rank, int local_size, int near_numa, int near_rank,
                       int near_size, int want_first_pu, int want_pus, int want_near) {
  zinc_topology_opts o = ZINC_TOPOLOGY_OPTS_INIT;
  o.local_rank = local_rank;
  o.local_size = local_size;
  o.near_numa = near_numa;
  o.near_rank = near_rank;
  o.near_size = near_size;
  o.synthetic = "pack:2 numa:1 core:8 pu:2";
  o.verbose = 1;
  zinc_topology *t = NULL;
  assert_int_equal(zinc_topology_create(&o, &t), ZINC_OK);
  hwloc_bitmap_t want = hwloc_bitmap_alloc();
  hwloc_bitmap_set_range(want, (unsigned)want_first_pu, want_first_pu + want_pus - 1);
  if (!hwloc_bitmap_isequal(zinc_topology_share_cpuset(t), want)) {
    char got[128], exp[128];
    hwloc_bitmap_list_snprintf(got, sizeof got, zinc_topology_share_cpuset(t));
    hwloc_bitmap_list_snprintf(exp, sizeof exp, want);
    fail_msg("local rank %d of %d near node %d (%d of %d): share %s, expected %s", local_rank,
             local_size, near_numa, near_rank, near_size, got, exp);
  }
  assert_int_equal(zinc_topology_near_numa(t), want_near);
  assert_int_equal(zinc_topology_cores(t), want_pus / 2);
  hwloc_bitmap_free(want);
  zinc_topology_destroy(t);
}

static void share_near_the_gpu(void **state) {
  (void)state;
  zinc_log_set_level(ZINC_LOG_INFO);
  /* 4 ranks, GPUs of ranks 0, 1 on node 0 and 2, 3 on node 1: half a node
   * each, on its GPU's node */
  for (int r = 0; r < 4; r++) {
    int node = r / 2, k = r % 2;
    near_share(r, 4, node, k, 2, 16 * node + 8 * k, 8, node);
  }
  /* skewed: ranks 0-2 near node 1, rank 3 near node 0 — node 1's 8 cores
   * cut in 3 (floor(8 r / 3): 2, 3, 3 cores), node 0 whole for rank 3 */
  const int first_core[4] = {0, 2, 5, 8};
  for (int r = 0; r < 3; r++)
    near_share(r, 4, 1, r, 3, 16 + 2 * first_core[r], 2 * (first_core[r + 1] - first_core[r]),
               1);
  near_share(3, 4, 0, 0, 1, 0, 16, 0);
  /* one rank near node 1: that node, not the whole machine */
  near_share(0, 1, 1, 0, 1, 16, 16, 1);
  /* no node known (no I/O information) or one the machine lacks: the
   * local-rank split, 4 of the 16 cores each */
  for (int r = 0; r < 4; r++) {
    near_share(r, 4, -1, 0, 1, 8 * r, 8, -1);
    near_share(r, 4, 5, r % 2, 2, 8 * r, 8, -1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_rule),
      cmocka_unit_test(share_near_the_gpu),
      cmocka_unit_test(share_inside_allowed),
      cmocka_unit_test(pci_locality_and_host_node),
      cmocka_unit_test(ranks_split_the_node),
      cmocka_unit_test(local_rank_from_environment),
      cmocka_unit_test(pool_threads_inside_the_share),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
