/*
 * test_zero_sizes.c — the zero_optimization sizes DeepSpeed accepts as 0
 * train as well as their defaults: reduce_bucket_size 0 (each module's
 * gradients reduced on their own, a segment never cut by the bucket),
 * allgather_bucket_size 0 (each gather on its own), sub_group_size 0 (zinc's
 * own sub-group bound, on the cpu, staged and NVMe paths), and at stage 3
 * stage3_prefetch_bucket_size, stage3_param_persistence_threshold,
 * stage3_max_live_parameters and stage3_max_reuse_distance 0 (no prefetch,
 * nothing persistent, nothing kept beyond the module in use). Each run must
 * give the parameters of the same stage with default sizes bit for bit
 * (fp32, accumulation 1: the sizes change the grouping of collectives,
 * never the arithmetic) and the single-rank reference within 1e-5.
 */
#include <sys/stat.h>

#include "engine/engine.h"
#include "engine/place/placements.h"
#include "engine_test.h"

static char nvme_dir[512];

static void run_case(int stage, const char *offload, int staged, int all_zero) {
  et_run base = et_defaults();
  base.stage = stage;
  base.steps = 8;
  base.offload = offload;
  if (!strcmp(offload, "nvme"))
    base.nvme_path = nvme_dir;
  et_run zero = base;
  zero.reduce_bucket = 0;
  zero.allgather_bucket = 0;
  zero.sub_group_zero = 1;
  if (all_zero) {
    zero.prefetch = 0;
    zero.persist = 0;
    zero.max_live = 0;
    zero.reuse = 0;
  }
  if (staged)
    setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  float **want = et_alloc_params(&base.shape), **got = et_alloc_params(&base.shape);
  float **ref = et_alloc_params(&base.shape);
  et_train(&base, want, NULL, NULL);
  et_train(&zero, got, NULL, NULL);
  unsetenv("ZINC_OFFLOAD_STAGING");
  et_reference(&base, et_world, ref);
  char what[160];
  snprintf(what, sizeof what, "stage %d offload %s%s, sizes 0%s", stage, offload,
           staged ? " (staged)" : "", all_zero ? " (stage-3 limits too)" : "");
  ET_CHECK(et_same_bits(&base.shape, got, want, what), "%s: differs from the default sizes",
           what);
  double rel = et_rel_l2(&base.shape, got, ref);
  ET_CHECK(rel <= 1e-5, "%s vs reference: relative L2 %.3g > 1e-5", what, rel);
  if (et_rank == 0)
    printf("%s: as the default sizes, reference relative L2 %.3g\n", what, rel);
  et_free_params(want);
  et_free_params(got);
  et_free_params(ref);
}

/* What the zeros mean for the layout and the offloaded step: segments not
 * cut by the bucket, sub-groups of ZINC_SUB_GROUP_FOR_ZERO elements (the
 * whole partition of the tiny model), not of one element. */
static void zero_sizes_shape(void) {
  et_run r = et_defaults();
  r.stage = 2;
  r.offload = "cpu";
  r.reduce_bucket = 0;
  r.allgather_bucket = 0;
  r.sub_group_zero = 1;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int segs = 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    segs += e->modules[mi]->nsegs;
  ET_CHECK(e->nunits == segs, "reduce_bucket_size 0: %d units for %d segments, expected one "
           "unit per segment", e->nunits, segs);
  int64_t want = e->opt_numel < ZINC_SUB_GROUP_FOR_ZERO ? e->opt_numel : ZINC_SUB_GROUP_FOR_ZERO;
  ET_CHECK(zinc_offload_sub_group(e) == want, "sub_group_size 0: sub-groups of %lld elements, "
           "expected %lld", (long long)zinc_offload_sub_group(e), (long long)want);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  zero_sizes_shape();
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme_zero_sizes", et_binary_dir());
  mkdir(nvme_dir, 0755);
  run_case(1, "none", 0, 0);
  run_case(2, "none", 0, 0);
  run_case(3, "none", 0, 1);
  run_case(2, "cpu", 0, 0);
  run_case(2, "cpu", 1, 0);
  run_case(2, "nvme", 0, 0);
  run_case(3, "nvme", 0, 1);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  return 0;
}
