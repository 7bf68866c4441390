/*
 * test_partial_offload.c — offload_optimizer.ratio < 1 (partial optimizer
 * offload, engine/place/partial.c):
 *
 *  1. the oracle: at stages 1, 2 and 3 (3 also with offload_param cpu),
 *     ratios 0, 0.3, 0.5 and 1 with offload_optimizer cpu, each through
 *     the cpu device's direct path and through the staged pipeline a GPU
 *     run takes (ZINC_OFFLOAD_STAGING=1), in sub-groups of 300 elements,
 *     give bitwise the parameters of the same stage without offload after
 *     20 steps; Lamb (norms per run on both sides) too at stage 2;
 *  2. memory: the estimator's device and host optimizer bytes for one
 *     parameter of 3000 elements, against D = floor((1 - ratio) K) x G
 *     written here (K sub-groups of G = 300 over the padded partition);
 *     a real run's profiler agrees with the same closed form;
 *  3. checkpoints: 6 steps at ratio 0.3 (staged), saved, loaded at ratio 1,
 *     without offload and at ratio 0.5, 6 more steps: bitwise the
 *     parameters of 12 uninterrupted steps without offload.
 */
#include <sys/stat.h>

#include "config/config.h"
#include "engine/memory/estimate.h"
#include "engine_test.h"

static const double ratios[] = {0.0, 0.3, 0.5, 1.0};
#define NRATIOS (int)(sizeof ratios / sizeof ratios[0])

static float **train(et_run r, zinc_mem_stats *stats) {
  float **out = et_alloc_params(&r.shape);
  et_train(&r, out, NULL, stats);
  return out;
}

static void oracle(int stage, const char *offload_param, const et_optim *optim) {
  et_run base = et_defaults();
  base.stage = stage;
  base.overlap = stage >= 2;
  base.optim = optim;
  base.sub_group = 300; /* Lamb's runs are cut at the sub-group size */
  float **ref = train(base, NULL);
  for (int k = 0; k < NRATIOS; k++)
    for (int staged = 0; staged <= 1; staged++) {
      et_run r = base;
      char extra[64];
      snprintf(extra, sizeof extra, ", \"ratio\": %g", ratios[k]);
      r.offload = "cpu";
      r.offload_param = offload_param;
      r.offload_extra = extra;
      r.sub_group = 300;
      if (staged)
        setenv("ZINC_OFFLOAD_STAGING", "1", 1);
      float **out = train(r, NULL);
      unsetenv("ZINC_OFFLOAD_STAGING");
      char what[160];
      snprintf(what, sizeof what, "%s stage %d offload cpu/%s ratio %g%s vs no offload",
               optim ? optim->type : "AdamW", stage, offload_param ? offload_param : "none",
               ratios[k], staged ? " (staged copies)" : "");
      ET_CHECK(et_same_bits(&r.shape, out, ref, what), "%s: not bitwise identical", what);
      et_free_params(out);
    }
  et_free_params(ref);
}

/* D for n optimizer elements in sub-groups of g: DeepSpeed's count of the
 * sub-groups kept on the device. */
static int64_t device_elems(int64_t n, int64_t g, double ratio) {
  int64_t k = (n + g - 1) / g;
  int64_t d = (int64_t)((1.0 - ratio) * (double)k) * g;
  return d < n ? d : n;
}

static zinc_settings settings(int stage, double ratio) {
  char json[512];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
           "{\"stage\": %d, \"sub_group_size\": 300, \"offload_optimizer\": {\"device\": "
           "\"cpu\", \"ratio\": %g}}}", stage, ratio);
  zinc_config *c = NULL;
  ET_OK(zinc_config_parse(json, &c));
  zinc_settings s;
  ET_OK(zinc_settings_copy(&s, &c->s));
  zinc_config_free(c);
  return s;
}

static void estimator(void) {
  zinc_est_param p = {"blk", "w", ZINC_F32, 1, {3000}, 0};
  for (int ranks = 1; ranks <= 2; ranks++)
    for (int stage = 1; stage <= 3; stage++)
      for (int k = 0; k < NRATIOS; k++) {
        zinc_settings s = settings(stage, ratios[k]);
        zinc_estimate est;
        ET_OK(zinc_estimate_model(&s, ranks, 0, &p, 1, &est));
        zinc_settings_free(&s);
        /* one unit; each rank's chunk padded to 32 elements */
        int64_t chunk = (3000 + 32 * ranks - 1) / (32 * ranks) * 32;
        int64_t d = device_elems(chunk, 300, ratios[k]);
        uint64_t want_dev = 12 * (uint64_t)d, want_host = 12 * (uint64_t)(chunk - d);
        ET_CHECK(est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM] == want_dev &&
                     est.bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM] == want_host,
                 "estimate, %d ranks, stage %d, ratio %g: optimizer bytes device %llu host "
                 "%llu, want %llu and %llu (D = %lld of %lld elements)", ranks, stage,
                 ratios[k], (unsigned long long)est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM],
                 (unsigned long long)est.bytes[ZINC_LOC_HOST][ZINC_MEM_OPTIM],
                 (unsigned long long)want_dev, (unsigned long long)want_host, (long long)d,
                 (long long)chunk);
      }
}

/* A real run's profiler: the split of its optimizer bytes (whatever the
 * tiny model's padded partition n is, n = total / 12 for AdamW). */
static void profiler(void) {
  for (int k = 0; k < NRATIOS; k++) {
    et_run r = et_defaults();
    char extra[64];
    snprintf(extra, sizeof extra, ", \"ratio\": %g", ratios[k]);
    r.stage = 2;
    r.steps = 2;
    r.offload = "cpu";
    r.offload_extra = extra;
    r.sub_group = 300;
    zinc_mem_stats st = ZINC_MEM_STATS_INIT;
    float **out = train(r, &st);
    et_free_params(out);
    uint64_t dev = st.current[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM];
    uint64_t host = st.current[ZINC_LOC_HOST][ZINC_MEM_OPTIM];
    int64_t n = (int64_t)((dev + host) / 12);
    uint64_t want = 12 * (uint64_t)device_elems(n, 300, ratios[k]);
    ET_CHECK((dev + host) % 12 == 0 && dev == want,
             "profiler, ratio %g: optimizer bytes on the device %llu (host %llu), want %llu",
             ratios[k], (unsigned long long)dev, (unsigned long long)host,
             (unsigned long long)want);
  }
}

static void checkpoints(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/partial_offload_ckpt", et_binary_dir());
  mkdir(dir, 0755);
  et_run plain = et_defaults();
  plain.stage = 2;
  plain.overlap = 1;
  plain.steps = 12;
  float **ref = train(plain, NULL);

  et_run saver = plain;
  saver.offload = "cpu";
  saver.offload_extra = ", \"ratio\": 0.3";
  saver.sub_group = 300;
  setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  et_model m;
  zinc_engine *e = et_open(&saver, NULL, &m);
  ET_OK(et_steps(&m, &saver, 0, 6));
  ET_OK(zinc_save_checkpoint(e, dir, "ratio03"));
  et_model_free(&m);
  zinc_engine_destroy(e);
  unsetenv("ZINC_OFFLOAD_STAGING");

  static const struct {
    const char *offload, *extra, *name;
  } loaders[] = {{"cpu", NULL, "ratio 1"}, {"none", NULL, "no offload"},
                 {"cpu", ", \"ratio\": 0.5", "ratio 0.5"}};
  for (size_t i = 0; i < sizeof loaders / sizeof loaders[0]; i++) {
    et_run r = saver;
    r.offload = loaders[i].offload;
    r.offload_extra = loaders[i].extra;
    e = et_open(&r, NULL, &m);
    ET_OK(zinc_load_checkpoint(e, dir, "ratio03"));
    ET_OK(et_steps(&m, &r, 6, 12));
    float **out = et_alloc_params(&r.shape);
    et_get_params(&m, out);
    char what[128];
    snprintf(what, sizeof what, "saved at ratio 0.3 after 6 steps, loaded with %s, 6 more "
             "steps vs 12 steps without offload", loaders[i].name);
    ET_CHECK(et_same_bits(&r.shape, out, ref, what), "%s: not bitwise identical", what);
    et_free_params(out);
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  et_free_params(ref);
}

int main(void) {
  oracle(1, NULL, NULL);
  oracle(2, NULL, NULL);
  oracle(3, NULL, NULL);
  oracle(3, "cpu", NULL);
  et_optim lamb = {.type = "Lamb", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                   .weight_decay = 0.01, .min_coeff = 0.01, .max_coeff = 10.0};
  oracle(2, NULL, &lamb);
  estimator();
  profiler();
  checkpoints();
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("partial offload, %d ranks: ratios 0/0.3/0.5/1 bitwise equal to no offload "
           "(stages 1-3, staged and direct, AdamW and Lamb); optimizer bytes split as "
           "D = floor((1 - ratio) K) G; checkpoints cross ratios bitwise\n", et_world);
  return 0;
}
