/* test_cuda_pool.c — the cuda device's caching pools: a steady-state step
 * calls no cudaMalloc/cudaHostAlloc after warm-up (counted by the pool's
 * statistics), the accounting hook balances, reserved >= in use >=
 * requested, a block freed while a stream may still use it is handed out
 * again only after that work is done, trim gives cached blocks back, and a
 * bad free is refused. Also mem_info and the NVML per-process figure. */
#include "gpu_test.h"
#include "device/device_cuda_pool.h"
#include "device/topology.h"

typedef struct {
  int64_t current[ZINC_LOC_N][ZINC_MEM_NCAT];
  int64_t calls;
} hook_tally;

static void tally_hook(void *ctx, int location, int category, int64_t bytes) {
  hook_tally *t = ctx;
  t->current[location][category] += bytes;
  t->calls++;
}

typedef struct {
  zinc_device *d;
  hook_tally tally;
} pool_fixture;

static int setup(void **state) {
  pool_fixture *f = calloc(1, sizeof *f);
  if (!f || zinc_device_cuda_create(0, NULL, &f->d) != ZINC_OK) {
    fprintf(stderr, "cuda device: %s\n", zinc_last_error());
    free(f);
    return -1;
  }
  f->d->mem_hook = tally_hook;
  f->d->mem_hook_ctx = &f->tally;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  pool_fixture *f = *state;
  zinc_device_destroy(f->d);
  free(f);
  return 0;
}

static zinc_cuda_pool_stats stats_of(zinc_device *d, int location) {
  zinc_cuda_pool_stats st;
  ZOK(zinc_device_cuda_pool_stats(d, location, &st));
  return st;
}

/* One "training step": buckets, gathered parameters of varying sizes, a
 * pinned staging buffer; work queued on two streams over them; all freed
 * without waiting, as the engine frees while the GPU still runs. */
static void fake_step(zinc_device *d, zinc_stream *side, int step) {
  static const size_t sizes[] = {25u << 20, 25u << 20, 3u << 20, 777777, 4096, 100, 9u << 20};
  enum { NB = sizeof sizes / sizeof sizes[0] };
  void *dev[NB];
  void *pinned = NULL;
  for (int i = 0; i < NB; i++) {
    ZOK(d->ops->alloc(d, sizes[i], ZINC_LOC_DEVICE, i % ZINC_MEM_NCAT, &dev[i]));
    ZOK(d->ops->fill_zero(d, dev[i], sizes[i], i % 2 ? side : NULL));
  }
  ZOK(d->ops->alloc(d, 1u << 20, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &pinned));
  ZOK(d->ops->copy(d, pinned, dev[1], 1u << 20, side)); /* dev[1] was zeroed on side */
  zinc_sumsq_chunk chunk = {dev[0], (int64_t)(sizes[0] / 4), ZINC_F32};
  double partial = -1.0;
  ZOK(d->ops->sumsq(d, NULL, &chunk, 1, &partial)); /* dev[0] was zeroed on compute */
  for (int i = NB - 1; i >= 0; i--)
    d->ops->free(d, dev[i], sizes[i], ZINC_LOC_DEVICE, i % ZINC_MEM_NCAT);
  d->ops->free(d, pinned, 1u << 20, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  /* the step ends with the GPU idle, so every freed block is ready again */
  ZOK(d->ops->stream_sync(d, side));
  ZOK(d->ops->stream_sync(d, NULL));
  assert_true(partial == 0.0);
  (void)step;
}

static void steady_state_needs_no_cuda_malloc(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  zinc_stream *side = NULL;
  ZOK(d->ops->stream_create(d, &side));
  for (int step = 0; step < 3; step++) /* warm-up */
    fake_step(d, side, step);
  zinc_cuda_pool_stats dev0 = stats_of(d, ZINC_LOC_DEVICE), host0 = stats_of(d, ZINC_LOC_HOST);
  for (int step = 3; step < 10; step++)
    fake_step(d, side, step);
  zinc_cuda_pool_stats dev1 = stats_of(d, ZINC_LOC_DEVICE), host1 = stats_of(d, ZINC_LOC_HOST);
  printf("device pool: %llu cudaMalloc during warm-up, %llu after; %llu cache hits; "
         "%llu bytes reserved\n", (unsigned long long)dev0.backend_allocs,
         (unsigned long long)(dev1.backend_allocs - dev0.backend_allocs),
         (unsigned long long)dev1.cache_hits, (unsigned long long)dev1.bytes_reserved);
  assert_int_equal(dev1.backend_allocs, dev0.backend_allocs);
  assert_int_equal(dev1.backend_frees, dev0.backend_frees);
  assert_int_equal(host1.backend_allocs, host0.backend_allocs);
  assert_true(dev1.cache_hits >= dev0.cache_hits + 7 * 7);
  assert_true(host1.cache_hits >= host0.cache_hits + 7);
  assert_int_equal(dev1.bytes_in_use, 0);
  assert_true(dev1.bytes_reserved > 0);
  d->ops->stream_destroy(d, side);
}

static void hook_and_byte_counts_balance(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  void *a = NULL, *b = NULL, *h = NULL;
  ZOK(d->ops->alloc(d, 1000001, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS, &a));
  ZOK(d->ops->alloc(d, 513, ZINC_LOC_DEVICE, ZINC_MEM_GRADS, &b));
  ZOK(d->ops->alloc(d, 12345, ZINC_LOC_HOST, ZINC_MEM_OPTIM, &h));
  assert_int_equal(f->tally.current[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS], 1000001);
  assert_int_equal(f->tally.current[ZINC_LOC_DEVICE][ZINC_MEM_GRADS], 513);
  assert_int_equal(f->tally.current[ZINC_LOC_HOST][ZINC_MEM_OPTIM], 12345);
  zinc_cuda_pool_stats st = stats_of(d, ZINC_LOC_DEVICE);
  assert_int_equal(st.bytes_requested, 1000001 + 513);
  assert_int_equal(st.bytes_in_use,
                   zinc_cuda_pool_round(1000001) + zinc_cuda_pool_round(513));
  assert_true(st.bytes_reserved >= st.bytes_in_use && st.bytes_in_use >= st.bytes_requested);
  assert_true(st.peak_reserved >= st.bytes_reserved && st.peak_in_use >= st.bytes_in_use);
  /* pointers are usable: device memory by a kernel, pinned by the host */
  ZOK(d->ops->fill_zero(d, a, 1000001, NULL));
  memset(h, 1, 12345);
  d->ops->free(d, a, 1000001, ZINC_LOC_DEVICE, ZINC_MEM_PARAMS);
  d->ops->free(d, b, 513, ZINC_LOC_DEVICE, ZINC_MEM_GRADS);
  d->ops->free(d, h, 12345, ZINC_LOC_HOST, ZINC_MEM_OPTIM);
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      assert_int_equal(f->tally.current[l][c], 0);
  /* zero bytes: NULL, no hook call */
  int64_t calls = f->tally.calls;
  void *z = (void *)1;
  ZOK(d->ops->alloc(d, 0, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &z));
  assert_null(z);
  d->ops->free(d, z, 0, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  assert_int_equal(f->tally.calls, calls);
}

/* A block freed while a stream may still use it: if the pool hands the
 * same pointer out again, the stream's work before the free must be done. */
static void reuse_waits_for_last_use(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  zinc_stream *side = NULL;
  ZOK(d->ops->stream_create(d, &side));
  size_t big = (size_t)256 << 20;
  void *src = NULL, *a = NULL, *again = NULL;
  ZOK(d->ops->alloc(d, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &src));
  ZOK(d->ops->alloc(d, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &a));
  for (int i = 0; i < 8; i++) /* some hundreds of microseconds of work on side */
    ZOK(d->ops->copy(d, a, src, big, side));
  d->ops->free(d, a, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  ZOK(d->ops->alloc(d, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &again));
  if (again == a) {
    cudaError_t q = cudaStreamQuery((cudaStream_t)zinc_device_cuda_stream(d, side));
    assert_int_equal(q, cudaSuccess);
  } else {
    printf("the busy block was not reused (a new one was allocated), as required\n");
  }
  d->ops->free(d, again, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  ZOK(d->ops->stream_sync(d, side));
  /* now idle: the same size comes from the cache */
  uint64_t hits = stats_of(d, ZINC_LOC_DEVICE).cache_hits;
  ZOK(d->ops->alloc(d, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &again));
  assert_int_equal(stats_of(d, ZINC_LOC_DEVICE).cache_hits, hits + 1);
  d->ops->free(d, again, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->free(d, src, big, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  d->ops->stream_destroy(d, side);
}

static void trim_and_bad_free(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  ZOK(d->ops->stream_sync(d, NULL));
  ZOK(zinc_device_cuda_pool_trim(d));
  zinc_cuda_pool_stats st = stats_of(d, ZINC_LOC_DEVICE);
  assert_int_equal(st.blocks_cached, 0);
  assert_int_equal(st.bytes_reserved, st.bytes_in_use);
  /* a pointer the pool never gave out is refused, nothing changes */
  int on_stack = 0;
  d->ops->free(d, &on_stack, sizeof on_stack, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  zinc_cuda_pool_stats after = stats_of(d, ZINC_LOC_DEVICE);
  assert_int_equal(after.bytes_in_use, st.bytes_in_use);
  assert_int_equal(after.blocks_cached, 0);
  /* a wrong size is refused and the block stays live */
  void *p = NULL;
  ZOK(d->ops->alloc(d, 4096, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &p));
  d->ops->free(d, p, 4000, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  assert_int_equal(stats_of(d, ZINC_LOC_DEVICE).bytes_requested, 4096);
  d->ops->free(d, p, 4096, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  assert_int_equal(stats_of(d, ZINC_LOC_DEVICE).bytes_requested, 0);
}

static void memory_information(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  int64_t free_b = 0, total_b = 0;
  ZOK(d->ops->mem_info(d, &free_b, &total_b));
  assert_true(total_b > 0 && free_b > 0 && free_b <= total_b);
  void *p = NULL;
  ZOK(d->ops->alloc(d, 64u << 20, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &p));
  int64_t mine = zinc_device_cuda_process_bytes(d);
  printf("mem_info: %lld of %lld bytes free; NVML says this process uses %lld bytes\n",
         (long long)free_b, (long long)total_b, (long long)mine);
  assert_true(mine == -1 || mine >= (64 << 20));
  d->ops->free(d, p, 64u << 20, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
}

/* Pinned host blocks land on the GPU's NUMA node where there are several. */
static void pinned_memory_near_the_gpu(void **state) {
  pool_fixture *f = *state;
  zinc_device *d = f->d;
  zinc_topology_opts to = ZINC_TOPOLOGY_OPTS_INIT;
  to.io = 1;
  zinc_topology *t = NULL;
  ZOK(zinc_topology_create(&to, &t));
  int dev = 0;
  CUOK(cudaGetDevice(&dev));
  char bus[32];
  CUOK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
  int node = zinc_topology_numa_of_pci(t, bus);
  if (zinc_topology_numa_nodes(t) < 2 || node < 0) {
    printf("pinned placement: %d NUMA node(s), GPU %s on node %d: nothing to place\n",
           zinc_topology_numa_nodes(t), bus, node);
    zinc_topology_destroy(t);
    return;
  }
  size_t bytes = 32u << 20;
  void *p = NULL;
  ZOK(d->ops->alloc(d, bytes, ZINC_LOC_HOST, ZINC_MEM_OTHER, &p));
  hwloc_bitmap_t where = hwloc_bitmap_alloc();
  assert_int_equal(hwloc_get_area_memlocation(zinc_topology_hwloc(t), p, bytes, where,
                                              HWLOC_MEMBIND_BYNODESET), 0);
  printf("pinned placement: GPU %s on NUMA node %d, 32 MiB pinned block on nodes %d..%d\n",
         bus, node, hwloc_bitmap_first(where), hwloc_bitmap_last(where));
  assert_true(hwloc_bitmap_isset(where, (unsigned)node));
  assert_int_equal(hwloc_bitmap_weight(where), 1);
  hwloc_bitmap_free(where);
  d->ops->free(d, p, bytes, ZINC_LOC_HOST, ZINC_MEM_OTHER);
  zinc_topology_destroy(t);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(steady_state_needs_no_cuda_malloc),
      cmocka_unit_test(hook_and_byte_counts_balance),
      cmocka_unit_test(reuse_waits_for_last_use),
      cmocka_unit_test(trim_and_bad_free),
      cmocka_unit_test(memory_information),
      cmocka_unit_test(pinned_memory_near_the_gpu),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
