/* test_device_choice.c — which device a rank trains on
 * (device/device_choice.c), every rule in the CPU build: the named cases
 * one by one with the words their messages must carry, then every
 * combination of local rank/size, GPU count, requested device and stream
 * device up to 9 against a reference written here; the check that two
 * ranks of a node landed on one GPU; and the ranks near one NUMA node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "device/device_choice.h"

static zinc_device_choice_in in_of(int local_rank, int local_size, int ngpu, int want,
                                   int stream_dev) {
  zinc_device_choice_in in = {.world_rank = 10 + local_rank,
                              .local_rank = local_rank,
                              .local_size = local_size,
                              .gpu_count = ngpu,
                              .requested = want,
                              .stream_device = stream_dev};
  return in;
}

static int choose(int local_rank, int local_size, int ngpu, int want, int stream_dev) {
  zinc_device_choice_in in = in_of(local_rank, local_size, ngpu, want, stream_dev);
  int ord = 12345;
  zinc_status st = zinc_device_choose(&in, &ord);
  if (st != ZINC_OK) {
    assert_int_equal(st, ZINC_ERR_DEVICE);
    assert_int_equal(ord, ZINC_DEVICE_CPU);
    return -100;
  }
  return ord;
}

static void assert_refused(int local_rank, int local_size, int ngpu, int want, int stream_dev,
                           const char *const *words) {
  assert_int_equal(choose(local_rank, local_size, ngpu, want, stream_dev), -100);
  const char *msg = zinc_last_error();
  char rank[32];
  snprintf(rank, sizeof rank, "rank %d", 10 + local_rank);
  if (!strstr(msg, rank))
    fail_msg("message does not name the rank (%s): %s", rank, msg);
  for (; *words; words++)
    if (!strstr(msg, *words))
      fail_msg("message lacks \"%s\": %s", *words, msg);
}

static void named_cases(void **state) {
  (void)state;
  /* auto, no stream: the local rank's GPU */
  for (int r = 0; r < 4; r++)
    assert_int_equal(choose(r, 4, 4, ZINC_DEVICE_AUTO, -1), r);
  assert_int_equal(choose(1, 2, 8, ZINC_DEVICE_AUTO, -1), 1);
  /* auto, no GPU: the CPU */
  assert_int_equal(choose(3, 8, 0, ZINC_DEVICE_AUTO, -1), ZINC_DEVICE_CPU);
  /* auto with a stream: the stream's GPU, on every local rank (the rank's
   * own index is not the stream's) */
  for (int r = 0; r < 4; r++)
    assert_int_equal(choose(r, 4, 4, ZINC_DEVICE_AUTO, 3 - r), 3 - r);
  /* each rank sees one GPU (CUDA_VISIBLE_DEVICES per rank): ordinal 0 */
  for (int r = 0; r < 8; r++)
    assert_int_equal(choose(r, 8, 1, ZINC_DEVICE_AUTO, -1), 0);
  /* CPU asked: the CPU, stream or not */
  assert_int_equal(choose(1, 2, 2, ZINC_DEVICE_CPU, 1), ZINC_DEVICE_CPU);
  /* explicit ordinal, with its own stream or none */
  assert_int_equal(choose(1, 2, 2, 1, 1), 1);
  assert_int_equal(choose(0, 2, 2, 1, -1), 1);

  /* more ranks than GPUs: refused with the figures and the remedy */
  const char *over[] = {"6 ranks", "4 GPUs", "at most 4 ranks per node",
                        "CUDA_VISIBLE_DEVICES", NULL};
  for (int r = 0; r < 6; r++) /* on every rank, not only those that would wrap */
    assert_refused(r, 6, 4, ZINC_DEVICE_AUTO, -1, over);
  /* an explicit device other than the stream's: both named */
  const char *mismatch[] = {"GPU 1", "cuda_stream belongs to GPU 0", NULL};
  assert_refused(1, 2, 2, 1, 0, mismatch);
  /* a device this rank does not see */
  const char *absent[] = {"GPU 2", "sees 2 GPU(s)", NULL};
  assert_refused(0, 1, 2, 2, -1, absent);
  const char *absent_stream[] = {"belongs to GPU 3", "sees 2 GPU(s)", NULL};
  assert_refused(0, 1, 2, ZINC_DEVICE_AUTO, 3, absent_stream);
  const char *bad[] = {"zinc_options.device is -7", NULL};
  assert_refused(0, 1, 2, -7, -1, bad);
}

/* The rules of device/device_choice.h written again as a reference:
 * -100 for a refusal. */
static int reference(int lr, int ls, int ngpu, int want, int sdev) {
  if (want == ZINC_DEVICE_CPU)
    return ZINC_DEVICE_CPU;
  if (want < 0 && want != ZINC_DEVICE_AUTO)
    return -100;
  if (sdev >= ngpu) /* a stream on a GPU not seen */
    return -100;
  if (want >= 0)
    return (want < ngpu && (sdev < 0 || sdev == want)) ? want : -100;
  if (sdev >= 0)
    return sdev;
  if (ngpu == 0)
    return ZINC_DEVICE_CPU;
  if (ngpu == 1)
    return 0;
  return ls <= ngpu ? lr : -100;
}

static void every_combination(void **state) {
  (void)state;
  long cases = 0;
  for (int ls = 1; ls <= 9; ls++)
    for (int lr = 0; lr < ls; lr++)
      for (int ngpu = 0; ngpu <= 9; ngpu++)
        for (int want = -3; want <= 9; want++)
          for (int sdev = -1; sdev <= 9; sdev++) {
            if (sdev >= 0 && ngpu == 0)
              continue; /* no stream can exist without a GPU */
            int got = choose(lr, ls, ngpu, want, sdev);
            int ref = reference(lr, ls, ngpu, want, sdev);
            if (got != ref)
              fail_msg("local rank %d of %d, %d GPUs, device %d, stream on %d: chose %d, "
                       "expected %d", lr, ls, ngpu, want, sdev, got, ref);
            cases++;
          }
  /* on one node with enough GPUs and auto without streams, the chosen GPUs
   * are distinct */
  for (int ngpu = 2; ngpu <= 9; ngpu++)
    for (int ls = 1; ls <= ngpu; ls++) {
      unsigned used = 0;
      for (int lr = 0; lr < ls; lr++) {
        int g = choose(lr, ls, ngpu, ZINC_DEVICE_AUTO, -1);
        assert_true(g >= 0 && g < ngpu);
        assert_false(used & (1u << g));
        used |= 1u << g;
      }
    }
  printf("%ld combinations checked\n", cases);
}

static void clash(void **state) {
  (void)state;
  enum { LEN = 16 };
  char ids[6][LEN];
  memset(ids, 0, sizeof ids);
  for (int i = 0; i < 6; i++)
    snprintf(ids[i], LEN, "0000:%02x:00.0", 0x10 + i);
  int a = -1, b = -1;
  assert_int_equal(zinc_device_choice_clash(&ids[0][0], LEN, 6, &a, &b), 0);
  assert_int_equal(zinc_device_choice_clash(&ids[0][0], LEN, 1, &a, &b), 0);
  assert_int_equal(zinc_device_choice_clash(&ids[0][0], LEN, 0, &a, &b), 0);
  /* ranks 4 and 2 on one GPU, and later 5 on rank 1's: the first pair found
   * is (2, 4) */
  memcpy(ids[4], ids[2], LEN);
  memcpy(ids[5], ids[1], LEN);
  assert_int_equal(zinc_device_choice_clash(&ids[0][0], LEN, 6, &a, &b), 1);
  assert_int_equal(a, 2);
  assert_int_equal(b, 4);
  /* bytes after the first NUL count too (the ids are compared whole) */
  char pad[2][LEN];
  memset(pad, 0, sizeof pad);
  pad[1][LEN - 1] = 'x';
  assert_int_equal(zinc_device_choice_clash(&pad[0][0], LEN, 2, &a, &b), 0);
}

/* Ranks near one NUMA node: the index among the ranks with the same node,
 * counted here by hand for each layout. */
static void near_ranks(void **state) {
  (void)state;
  const int numa[7] = {1, 0, 1, -1, 1, 0, -1};
  const int want_rank[7] = {0, 0, 1, 0, 2, 1, 0};
  const int want_size[7] = {3, 2, 3, 1, 3, 2, 1};
  for (int me = 0; me < 7; me++) {
    int r = -5, n = -5;
    zinc_device_choice_near(numa, 7, me, &r, &n);
    if (r != want_rank[me] || n != want_size[me])
      fail_msg("local rank %d (node %d): near rank %d of %d, expected %d of %d", me, numa[me],
               r, n, want_rank[me], want_size[me]);
  }
  int r = -5, n = -5;
  zinc_device_choice_near(numa, 7, 7, &r, &n); /* out of range: alone */
  assert_int_equal(r, 0);
  assert_int_equal(n, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(named_cases),
      cmocka_unit_test(every_combination),
      cmocka_unit_test(clash),
      cmocka_unit_test(near_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
