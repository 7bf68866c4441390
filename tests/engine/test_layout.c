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
      {"emb", "w", ZINC_BF16, 2, {big / 7 + 1, 7}, 0},
      {"blk", "w", ZINC_BF16, 1, {(1ll << 33) + 3}, 0}, /* 8.6 G elements */
      {"blk", "b", ZINC_F32, 1, {1}, 0},
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

/* A frozen parameter (zinc_est_param.frozen) counts as parameter memory
 * only: the gradients and the optimizer state are those of the trained
 * elements alone, counted by hand (f32: 4 bytes of gradient; 8 of state
 * on the device, the master aliasing the parameters; 12 offloaded). */
static void frozen_parameters(void **state) {
  (void)state;
  const int64_t emb = 250 * 64, blk = 128 * 64; /* whole chunks of 32 x 1, 2 or 4 ranks */
  for (int stage = 0; stage <= 3; stage++)
    for (int offload = 0; offload <= (stage > 0); offload++)
      for (int ranks = 1; ranks <= 4; ranks *= 2)
        for (int nfrozen = 0; nfrozen <= 2; nfrozen++) {
          zinc_est_param p[2] = {{"emb", "w", ZINC_F32, 2, {250, 64}, nfrozen >= 1},
                                 {"blk", "w", ZINC_F32, 2, {128, 64}, nfrozen >= 2}};
          zinc_config *c;
          char json[400];
          snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, "
                   "\"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0, "
                   "\"offload_optimizer\": "
                   "{\"device\": \"%s\"}}}", stage, offload ? "cpu" : "none");
          assert_int_equal(zinc_config_parse(json, &c), ZINC_OK);
          zinc_estimate est;
          zinc_status st = zinc_estimate_model(&c->s, ranks, 0, p, 2, &est);
          if (st != ZINC_OK)
            fprintf(stderr, "stage %d ranks %d: %s\n", stage, ranks, zinc_last_error());
          assert_int_equal(st, ZINC_OK);
          zinc_config_free(c);
          int64_t trained = nfrozen == 0 ? emb + blk : nfrozen == 1 ? blk : 0;
          uint64_t n = (uint64_t)ranks;
          int loc = offload ? ZINC_LOC_HOST : ZINC_LOC_DEVICE;
          uint64_t grads = stage <= 1 ? 4 * (uint64_t)trained : 4 * (uint64_t)trained / n;
          uint64_t optim = (offload ? 12u : 8u) * (uint64_t)trained / (stage == 0 ? 1 : n);
          uint64_t params = 4 * (uint64_t)(emb + blk) / (stage == 3 ? n : 1);
          uint64_t got_grads = est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS] +
                               est.bytes[ZINC_LOC_HOST][ZINC_MEM_GRADS];
          if (got_grads != grads || est.bytes[loc][ZINC_MEM_OPTIM] != optim)
            fprintf(stderr, "stage %d offload %d ranks %d, %d frozen: gradients %llu bytes "
                    "(want %llu), optimizer state %llu (want %llu)\n", stage, offload, ranks,
                    nfrozen, (unsigned long long)got_grads, (unsigned long long)grads,
                    (unsigned long long)est.bytes[loc][ZINC_MEM_OPTIM],
                    (unsigned long long)optim);
          assert_int_equal(got_grads, grads);
          assert_int_equal(est.bytes[loc][ZINC_MEM_OPTIM], optim);
          assert_int_equal(est.bytes[!offload ? ZINC_LOC_HOST : ZINC_LOC_DEVICE][ZINC_MEM_OPTIM],
                           0);
          /* a frozen parameter is still a parameter */
          if (est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS] != params)
            fprintf(stderr, "stage %d offload %d ranks %d, %d frozen: parameters %llu bytes "
                    "(want %llu)\n", stage, offload, ranks, nfrozen,
                    (unsigned long long)est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS],
                    (unsigned long long)params);
          assert_int_equal(est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS], params);
          assert_int_equal(est.params, emb + blk);
        }
}

static void bucket_of_one(void **state) {
  (void)state;
  zinc_est_param p[2] = {{"m", "w", ZINC_F32, 2, {33, 31}, 0}, {"m", "b", ZINC_F32, 1, {1}, 0}};
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
      cmocka_unit_test(frozen_parameters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
