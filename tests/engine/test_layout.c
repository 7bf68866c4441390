/*
 * test_layout.c — the partition math, exhaustively for small sizes, and the
 * layout's invariants on models up to 2^33 elements (64-bit sizes
 * everywhere; nothing is allocated: the estimator runs the real layout).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "engine/memory/estimate.h"

static void partition_exhaustive(void **state) {
  (void)state;
  for (int ranks = 1; ranks <= 9; ranks++)
    for (int64_t align = 1; align <= 64; align *= 2)
      for (int64_t count = 0; count <= 700; count++) {
        int64_t chunk, padded;
        zinc_partition(count, ranks, align, &chunk, &padded);
        assert_true(chunk % align == 0);
        assert_int_equal(padded, chunk * ranks);
        assert_true(padded >= count);
        /* the smallest such chunk: one alignment step less would not hold it */
        assert_true(chunk == 0 || (chunk - align) * ranks < count);
      }
}

static zinc_settings settings(int stage, int64_t bucket) {
  zinc_config *c;
  char json[256];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
           "{\"stage\": %d, \"reduce_bucket_size\": %lld}}", stage, (long long)bucket);
  assert_int_equal(zinc_config_parse(json, &c), ZINC_OK);
  zinc_settings s;
  assert_int_equal(zinc_settings_copy(&s, &c->s), ZINC_OK);
  zinc_config_free(c);
  return s;
}

/* Layout invariants through the estimator: shard sizes, model-state bytes
 * against the exact expected values. */
static void huge_parameters(void **state) {
  (void)state;
  int64_t big = (1ll << 31) + 7;             /* past int32 */
  zinc_est_param p[3] = {
      {"emb", "w", ZINC_BF16, 2, {big / 7 + 1, 7}},
      {"blk", "w", ZINC_BF16, 1, {(1ll << 33) + 3}}, /* 8.6 G elements */
      {"blk", "b", ZINC_F32, 1, {1}},
  };
  for (int stage = 0; stage <= 3; stage++)
    for (int ranks = 1; ranks <= 64; ranks *= 4) {
      zinc_settings s = settings(stage, 500000000);
      zinc_estimate est;
      zinc_status st = zinc_estimate_model(&s, ranks, 0, p, 3, &est);
      if (st != ZINC_OK)
        fprintf(stderr, "stage %d ranks %d: %s\n", stage, ranks, zinc_last_error());
      assert_int_equal(st, ZINC_OK);
      /* counted by hand, not from the shapes above: (2^31 + 7) / 7 + 1 =
       * 306783380 rows x 7 = 2147483660, plus 2^33 + 3 = 8589934595 (bf16),
       * plus 1 (f32) */
      const int64_t psi = 10737418256LL;
      assert_int_equal(est.params, psi);
      /* optimizer state: 12 bytes per element of the (padded) shard */
      uint64_t optim = est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM];
      uint64_t want = stage == 0 ? 12ull * (uint64_t)psi : 12ull * (uint64_t)psi / (uint64_t)ranks;
      assert_true(optim >= want);
      assert_true(optim - want <= 12ull * 32 * 3 * (stage == 0 ? (uint64_t)ranks : 1));
      zinc_settings_free(&s);
    }
}

static void bucket_of_one(void **state) {
  (void)state;
  zinc_est_param p[2] = {{"m", "w", ZINC_F32, 2, {33, 31}}, {"m", "b", ZINC_F32, 1, {1}}};
  zinc_settings s = settings(2, 1);
  zinc_estimate est;
  assert_int_equal(zinc_estimate_model(&s, 4, 0, p, 2, &est), ZINC_OK);
  assert_int_equal(est.params, 33 * 31 + 1);
  zinc_settings_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(partition_exhaustive),
      cmocka_unit_test(huge_parameters),
      cmocka_unit_test(bucket_of_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
