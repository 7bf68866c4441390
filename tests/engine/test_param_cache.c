/*
 * test_param_cache.c — offload_param.max_in_cpu, the host cache in front of
 * the NVMe parameter partition (engine/place/pcache.c), at stage 3:
 *
 *  1. values: 20 steps with max_in_cpu 0, at each module boundary of the
 *     partition (and between two), and at 1e9, with offload_optimizer cpu
 *     and nvme: bitwise the parameters of max_in_cpu 0 and of no offload;
 *  2. disk reads: in eval mode (no prefetch) each module's fetch reads
 *     nothing from disk when the prefix rule written here says it is
 *     cached, and something when it is not; the reads of a whole pass
 *     shrink strictly as max_in_cpu crosses each module boundary;
 *  3. the estimator: host parameter bytes are the cached prefix (three
 *     modules of 300 k, 600 k and 900 k f32 elements), and the swap area
 *     shrinks when something is cached.
 */
#include <sys/stat.h>

#include "config/config.h"
#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/place/placements.h"
#include "engine_test.h"

static char nvme_dir[512];

static et_run base_run(const char *offload, int64_t max_in_cpu, char *extra, size_t n) {
  et_run r = et_defaults();
  r.stage = 3;
  r.overlap = 1;
  r.persist = 0; /* every module gathered (and read) at its fetch */
  r.offload = offload;
  r.offload_param = "nvme";
  r.nvme_path = nvme_dir;
  r.sub_group = 700;
  r.buffer_count = 3;
  snprintf(extra, n, ", \"max_in_cpu\": %lld", (long long)max_in_cpu);
  r.param_extra = extra;
  return r;
}

/* The prefix rule, written again: module-boundary cumulative elements of
 * this rank's partition in unit order (the layout's units; at most 16). */
static int boundaries(const zinc_engine *e, int64_t *at) {
  int n = 0;
  int64_t run = 0;
  for (int ui = 0; ui < e->nunits; ui++) {
    run += e->units[ui].chunk;
    if (ui + 1 == e->nunits || e->units[ui + 1].module != e->units[ui].module)
      at[n++] = run;
  }
  return n;
}

/* A module is cached when every unit it has lies in the longest module
 * prefix within max elements. */
static void cached_modules(const zinc_engine *e, int64_t max, int *cached) {
  int64_t run = 0;
  int cut = 0;
  for (int ui = 0; ui < e->nunits; ui++) {
    run += e->units[ui].chunk;
    if (run > max)
      break;
    if (ui + 1 == e->nunits || e->units[ui + 1].module != e->units[ui].module)
      cut = ui + 1;
  }
  for (int mi = 0; mi < e->nmodules; mi++)
    cached[mi] = 1;
  for (int ui = cut; ui < e->nunits; ui++)
    cached[e->units[ui].module] = 0;
}

static uint64_t bytes_read(const zinc_engine *e) {
  uint64_t rd, wr;
  zinc_nvme_io_bytes(e, &rd, &wr);
  return rd;
}

/* One eval pass over the modules after two steps: each fetch's disk
 * reads checked against the rule; returns the pass's total. */
static uint64_t eval_reads(int64_t max) {
  char extra[64];
  et_run r = base_run("cpu", max, extra, sizeof extra);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 2));
  int cached[16];
  cached_modules(e, max, cached);
  uint64_t total = 0;
  ET_OK(zinc_eval_begin(e));
  for (int k = 0; k < 4; k++) {
    uint64_t before = bytes_read(e);
    ET_OK(zinc_module_fetch(e, m.mod[k]));
    uint64_t got = bytes_read(e) - before;
    ET_OK(zinc_module_release(e, m.mod[k]));
    total += got;
    int mi = m.mod[k]->index;
    ET_CHECK(cached[mi] ? got == 0 : got > 0, "max_in_cpu %lld: module \"%s\" is %s but its "
             "fetch read %llu bytes from disk", (long long)max, e->modules[mi]->name,
             cached[mi] ? "cached" : "not cached", (unsigned long long)got);
  }
  ET_OK(zinc_eval_end(e));
  et_model_free(&m);
  zinc_engine_destroy(e);
  return total;
}

static void values_and_reads(void) {
  /* the module boundaries of this rank's partition, from a bare engine */
  char extra[64];
  et_run probe = base_run("cpu", 0, extra, sizeof extra);
  et_model pm;
  zinc_engine *pe = et_open(&probe, NULL, &pm);
  int64_t at[16];
  int nb = boundaries(pe, at);
  et_model_free(&pm);
  zinc_engine_destroy(pe);
  ET_CHECK(nb == 4, "the tiny model has %d module runs in the partition, want 4", nb);

  int64_t maxes[8] = {0, at[0], at[0] + 1, at[1], at[2] - 1, at[2], at[3], 1000000000};
  const char *offloads[2] = {"cpu", "nvme"};
  et_run plain = et_defaults();
  plain.stage = 3;
  plain.overlap = 1;
  plain.persist = 0;
  plain.sub_group = 700;
  float **none = et_alloc_params(&plain.shape);
  et_train(&plain, none, NULL, NULL);
  for (int o = 0; o < 2; o++) {
    float **zero = NULL;
    for (int k = 0; k < 8; k++) {
      et_run r = base_run(offloads[o], maxes[k], extra, sizeof extra);
      float **out = et_alloc_params(&r.shape);
      et_train(&r, out, NULL, NULL);
      char what[160];
      snprintf(what, sizeof what, "offload_optimizer %s, max_in_cpu %lld vs no offload",
               offloads[o], (long long)maxes[k]);
      ET_CHECK(et_same_bits(&r.shape, out, none, what), "%s: not bitwise identical", what);
      if (k == 0) {
        zero = out;
        continue;
      }
      snprintf(what, sizeof what, "offload_optimizer %s, max_in_cpu %lld vs 0", offloads[o],
               (long long)maxes[k]);
      ET_CHECK(et_same_bits(&r.shape, out, zero, what), "%s: not bitwise identical", what);
      et_free_params(out);
    }
    et_free_params(zero);
  }
  et_free_params(none);

  /* reads shrink at every boundary crossed, and not between two */
  uint64_t prev = 0;
  int prev_modules = 0;
  for (int k = 0; k < 8; k++) {
    uint64_t got = eval_reads(maxes[k]);
    int modules = 0; /* module runs within maxes[k] */
    while (modules < nb && at[modules] <= maxes[k])
      modules++;
    if (et_rank == 0)
      printf("max_in_cpu %10lld (%d of %d modules cached): an eval pass reads %6llu bytes "
             "from disk\n", (long long)maxes[k], modules, nb, (unsigned long long)got);
    if (k > 0 && modules == prev_modules)
      ET_CHECK(got == prev, "max_in_cpu %lld: %llu bytes read, as many as at %lld (%llu) "
               "expected", (long long)maxes[k], (unsigned long long)got,
               (long long)maxes[k - 1], (unsigned long long)prev);
    else if (k > 0)
      ET_CHECK(got < prev, "max_in_cpu %lld: %llu bytes read, not fewer than at %lld (%llu)",
               (long long)maxes[k], (unsigned long long)got, (long long)maxes[k - 1],
               (unsigned long long)prev);
    if (modules == nb)
      ET_CHECK(got == 0, "max_in_cpu %lld holds the whole partition: %llu bytes read",
               (long long)maxes[k], (unsigned long long)got);
    prev = got;
    prev_modules = modules;
  }
}

static void estimator(void) {
  /* sizes past the swap area's 1 MiB blocks, each a multiple of 32 */
  zinc_est_param p[3] = {{"a", "w", ZINC_F32, 1, {300000}, 0},
                         {"b", "w", ZINC_F32, 1, {600000}, 0},
                         {"c", "w", ZINC_F32, 1, {900000}, 0}};
  const int64_t padded[3] = {300000, 600000, 900000};
  const int64_t maxes[5] = {0, 299999, 950000, 1799999, 1000000000};
  uint64_t nvme_at_zero = 0;
  for (int k = 0; k < 5; k++) {
    char json[1024];
    snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
             "{\"stage\": 3, \"stage3_param_persistence_threshold\": 0, \"reduce_bucket_size\": "
             "100000, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
             "\"max_in_cpu\": %lld}}}", nvme_dir, (long long)maxes[k]);
    zinc_config *c = NULL;
    ET_OK(zinc_config_parse(json, &c));
    zinc_estimate est;
    ET_OK(zinc_estimate_model(&c->s, 1, 0, p, 3, &est));
    zinc_config_free(c);
    int64_t want = 0, run = 0;
    for (int i = 0; i < 3; i++) {
      run += padded[i];
      if (run <= maxes[k])
        want = run;
    }
    uint64_t host = est.bytes[ZINC_LOC_HOST][ZINC_MEM_PARAMS];
    uint64_t nvme = est.bytes[ZINC_LOC_NVME][ZINC_MEM_PARAMS];
    ET_CHECK(host == 4 * (uint64_t)want, "estimate, max_in_cpu %lld: host parameter bytes %llu, "
             "want %llu (the cached prefix)", (long long)maxes[k], (unsigned long long)host,
             (unsigned long long)(4 * want));
    if (k == 0)
      nvme_at_zero = nvme;
    else if (want > 0)
      ET_CHECK(nvme < nvme_at_zero, "estimate, max_in_cpu %lld: the swap area (%llu bytes) "
               "does not shrink from %llu", (long long)maxes[k], (unsigned long long)nvme,
               (unsigned long long)nvme_at_zero);
  }
}

int main(void) {
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme_param_cache", et_binary_dir());
  mkdir(nvme_dir, 0755);
  estimator();
  values_and_reads();
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("max_in_cpu, %d ranks: bitwise equal to 0 and to no offload; cached modules read "
           "no disk, reads shrink with max_in_cpu; the estimator counts the cache\n", et_world);
  return 0;
}
