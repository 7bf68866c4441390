/*
 * test_cuda_pool_deadline.c — the caching pool never blocks for ever behind
 * work that does not end (an NCCL kernel waiting for a lost peer): a host
 * function queued on one of the device's streams holds it until the test
 * lets it go; a block freed while it holds has a last use that never
 * completes. With the pool's wait at 0.5 s, destroying the device returns
 * within seconds (it gives the stuck blocks up, said at error level)
 * instead of waiting on cudaEventSynchronize; then the stream is let go.
 * The deadline loop itself is tested on the CPU (tests/device/
 * test_device_wait). SKIPPED without a GPU.
 */
#include <stdatomic.h>
#include <time.h>

#include "gpu_test.h"

static atomic_int let_go;

static void CUDART_CB hold_stream(void *ctx) {
  (void)ctx;
  while (!atomic_load(&let_go)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

static void destroy_returns_behind_stuck_work(void **state) {
  (void)state;
  zinc_device *d = NULL;
  ZOK(zinc_device_cuda_create(0, NULL, &d));
  ZOK(zinc_device_cuda_set_wait(d, 0.5));
  zinc_stream *s = NULL;
  ZOK(d->ops->stream_create(d, &s));
  CUOK(cudaLaunchHostFunc((cudaStream_t)zinc_device_cuda_stream(d, s), hold_stream, NULL));
  void *p = NULL;
  ZOK(d->ops->alloc(d, 1 << 20, ZINC_LOC_DEVICE, 0, &p));
  d->ops->free(d, p, 1 << 20, ZINC_LOC_DEVICE, 0); /* its last use: behind the held stream */
  zinc_cuda_pool_stats st;
  ZOK(zinc_device_cuda_pool_stats(d, ZINC_LOC_DEVICE, &st));
  assert_int_equal(st.blocks_cached, 1);
  ZOK(zinc_device_cuda_pool_trim(d)); /* a poll, never a wait: the block stays */
  ZOK(zinc_device_cuda_pool_stats(d, ZINC_LOC_DEVICE, &st));
  assert_int_equal(st.blocks_cached, 1);
  double t0 = zinc_now();
  d->ops->stream_destroy(d, s);
  zinc_device_destroy(d); /* waits 0.5 s for the block, then gives it up */
  double dt = zinc_now() - t0;
  atomic_store(&let_go, 1);
  if (dt > 5.0)
    fail_msg("destroy took %.1f s behind work that never ends (wait 0.5 s)", dt);
  printf("destroy returned after %.2f s behind stuck work\n", dt);
  cudaDeviceSynchronize();
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(destroy_returns_behind_stuck_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
