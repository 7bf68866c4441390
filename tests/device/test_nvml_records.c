/* test_nvml_records.c — NVML's process records (device/device_cuda_nvml.c)
 * in every layout a driver fills: the record size chosen for each entry
 * point the library exports, and the parse over fake buffers of v1
 * (16-byte), v2 (24-byte) and R535's v3 (32-byte) records, written through
 * the structs of nvml.h declared again here. Reading a buffer with another
 * layout's size must give another answer (the bug this guards against). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "device/device_cuda_nvml.h"

/* nvml.h's records, as the drivers fill them */
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} rec_v1;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} rec_v2;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} rec_v3;

#define NOT_AVAILABLE 0xffffffffffffffffull

static void record_sizes(void **state) {
  (void)state;
  assert_int_equal(sizeof(rec_v1), 16);
  assert_int_equal(sizeof(rec_v2), 24);
  assert_int_equal(sizeof(rec_v3), 32);
  const char *v3 = "nvmlDeviceGetComputeRunningProcesses_v3";
  const char *v2 = "nvmlDeviceGetComputeRunningProcesses_v2";
  const char *v1 = "nvmlDeviceGetComputeRunningProcesses";
  /* _v3: R535 (confidential compute, no detail list) fills 32 bytes;
   * before (neither) and after (both) 24 */
  assert_int_equal(zinc_nvml_record_size(v3, 1, 0), sizeof(rec_v3));
  assert_int_equal(zinc_nvml_record_size(v3, 0, 0), sizeof(rec_v2));
  assert_int_equal(zinc_nvml_record_size(v3, 1, 1), sizeof(rec_v2));
  for (int cc = 0; cc <= 1; cc++)
    for (int dl = 0; dl <= 1; dl++) {
      assert_int_equal(zinc_nvml_record_size(v2, cc, dl), sizeof(rec_v2));
      assert_int_equal(zinc_nvml_record_size(v1, cc, dl), sizeof(rec_v1));
    }
  assert_int_equal(zinc_nvml_record_size("nvmlDeviceGetComputeRunningProcesses_v4", 0, 0), 0);
  assert_int_equal(zinc_nvml_record_size("nvmlDeviceGetGraphicsRunningProcesses_v3", 0, 0), 0);
  assert_int_equal(zinc_nvml_record_size(NULL, 0, 0), 0);
}

/* Five processes; ours (pid 4242) third, with MIG instance ids that are not
 * "unused" and an entry that is not available (skipped). */
enum { N = 5, OURS = 4242 };
static const unsigned pids[N] = {100, 4242, 4242, 7, 4242};
static const unsigned long long used[N] = {1ull << 30, 123456789ull, NOT_AVAILABLE,
                                           4242ull, 1000ull};
static const long long want_ours = 123456789ll + 1000ll; /* the sum, written out */

static void parse_v1(void **state) {
  (void)state;
  rec_v1 r[N];
  memset(r, 0xA5, sizeof r); /* padding as a driver may leave it */
  for (int i = 0; i < N; i++) {
    r[i].pid = pids[i];
    r[i].usedGpuMemory = used[i];
  }
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], OURS), want_ours);
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], 7), 4242);
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], 99), -1);
  assert_int_equal(zinc_nvml_records_bytes(r, 0, sizeof r[0], OURS), -1);
}

static void parse_v2(void **state) {
  (void)state;
  rec_v2 r[N];
  memset(r, 0xA5, sizeof r);
  for (int i = 0; i < N; i++) {
    r[i].pid = pids[i];
    r[i].usedGpuMemory = used[i];
    r[i].gpuInstanceId = 0xFFFFFFFFu;
    r[i].computeInstanceId = (unsigned)i;
  }
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], OURS), want_ours);
  /* read as v1 records, the stride is wrong: another answer */
  assert_int_not_equal(zinc_nvml_records_bytes(r, N, sizeof(rec_v1), OURS), want_ours);
}

static void parse_v3(void **state) {
  (void)state;
  rec_v3 r[N];
  memset(r, 0xA5, sizeof r);
  for (int i = 0; i < N; i++) {
    r[i].pid = pids[i];
    r[i].usedGpuMemory = used[i];
    r[i].gpuInstanceId = 1;
    r[i].computeInstanceId = 2;
    /* ours in the word where a 24-byte reader looks for the next pid */
    r[i].usedGpuCcProtectedMemory = OURS;
  }
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], OURS), want_ours);
  assert_int_equal(zinc_nvml_records_bytes(r, N, sizeof r[0], 100), 1ll << 30);
  assert_int_not_equal(zinc_nvml_records_bytes(r, N, sizeof(rec_v2), OURS), want_ours);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(record_sizes),
      cmocka_unit_test(parse_v1),
      cmocka_unit_test(parse_v2),
      cmocka_unit_test(parse_v3),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
