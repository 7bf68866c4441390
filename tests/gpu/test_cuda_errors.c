/* test_cuda_errors.c — what the cuda device and the NCCL comm say where
 * they cannot work; runs everywhere, GPU or not, CUDA build or not.
 *
 *  - CPU-only build: zinc_device_cuda_count() is 0 and both creators fail
 *    with ZINC_ERR_UNSUPPORTED and a message saying zinc was built without
 *    CUDA.
 *  - CUDA build: a missing ordinal (the first one past the visible GPUs, so
 *    this holds with 0 GPUs too) fails with ZINC_ERR_DEVICE naming it; the
 *    pool's size buckets are checked (pure arithmetic, no GPU needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "comm/comm.h"
#include "device/device.h"
#include "device/device_cuda.h"
#include "device/device_cuda_pool.h"

#ifndef ZINC_HAVE_CUDA

static void built_without_cuda(void **state) {
  (void)state;
  zinc_device *d = (zinc_device *)1;
  assert_int_equal(zinc_device_cuda_count(), 0);
  assert_int_equal(zinc_device_cuda_create(0, NULL, &d), ZINC_ERR_UNSUPPORTED);
  assert_null(d);
  assert_non_null(strstr(zinc_last_error(), "built without CUDA"));
  zinc_comm *self = NULL, *c = (zinc_comm *)1;
  assert_int_equal(zinc_comm_self_create(&self), ZINC_OK);
  assert_int_equal(zinc_comm_nccl_create(self, 0, NULL, 10, &c), ZINC_ERR_UNSUPPORTED);
  assert_null(c);
  assert_non_null(strstr(zinc_last_error(), "built without CUDA"));
  zinc_comm_destroy(self);
  zinc_cuda_pool_stats st;
  assert_int_equal(zinc_device_cuda_pool_stats(NULL, ZINC_LOC_DEVICE, &st),
                   ZINC_ERR_UNSUPPORTED);
  assert_int_equal(zinc_device_cuda_process_bytes(NULL), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(built_without_cuda)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static void missing_ordinal(void **state) {
  (void)state;
  int count = zinc_device_cuda_count();
  zinc_device *d = (zinc_device *)1;
  assert_int_equal(zinc_device_cuda_create(count, NULL, &d), ZINC_ERR_DEVICE);
  assert_null(d);
  const char *msg = zinc_last_error();
  char want[64];
  snprintf(want, sizeof want, "cuda device %d", count);
  if (!strstr(msg, want) ||
      !(strstr(msg, "does not exist") || strstr(msg, "no usable CUDA device"))) {
    fprintf(stderr, "unexpected message: %s\n", msg);
    fail();
  }
  assert_int_equal(zinc_device_cuda_create(-3, NULL, &d), ZINC_ERR_DEVICE);
}

static void pool_buckets(void **state) {
  (void)state;
  assert_int_equal(zinc_cuda_pool_round(1), 512);
  assert_int_equal(zinc_cuda_pool_round(512), 512);
  assert_int_equal(zinc_cuda_pool_round(513), 1024);
  assert_int_equal(zinc_cuda_pool_round(4096), 4096);
  assert_int_equal(zinc_cuda_pool_round(4097), 4608);           /* 4096 + 4096/8 */
  assert_int_equal(zinc_cuda_pool_round((size_t)3 << 30), (size_t)3 << 30);
  assert_int_equal(zinc_cuda_pool_round(((size_t)1 << 30) + 1), ((size_t)1 << 30) + (2 << 20));
  /* every size: block >= request, less than one step wasted (512 bytes up
   * to 4 KiB, 1/8 up to 16 MiB, 2 MiB above), and rounding is idempotent
   * (a block size is its own bucket) */
  for (size_t b = 1; b < ((size_t)1 << 34); b = b * 5 / 4 + 7) {
    size_t r = zinc_cuda_pool_round(b);
    size_t allowed = b <= 4096 ? 512 : b < ((size_t)16 << 20) ? b / 8 : (size_t)2 << 20;
    if (r < b || r - b >= allowed || zinc_cuda_pool_round(r) != r) {
      fprintf(stderr, "round(%zu) = %zu\n", b, r);
      fail();
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(missing_ordinal),
      cmocka_unit_test(pool_buckets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
