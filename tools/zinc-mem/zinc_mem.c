/*
 * zinc-mem — memory planning and inspection.
 *
 *   zinc-mem estimate (--params N [--largest-layer M] [--dtype f32|bf16|f16]
 *                      | --model FILE) [--config FILE] [--ranks-per-node G]
 *                      [--nodes K] [--hidden-size H] [--device cuda|cpu]
 *       per-GPU and per-node host memory for each stage x offload choice
 *       (DeepSpeed's estimate_zero*_model_states_mem_needs_all_cold), from
 *       zinc's own layout code, including its buffers (gradient buckets,
 *       stage-3 gathered parameters).
 *       FILE: one parameter per line, "module name dtype d0 [d1 ...] [frozen]"
 *       ("frozen": not trained, zinc_param_set_frozen: no gradient, no
 *       optimizer state).
 *       H: the model's hidden size, for bucket sizes the config writes
 *       "auto" (as zinc_options.hidden_size).
 *       --device: the device the ranks train on (default cuda, one GPU per
 *       rank, as DeepSpeed's estimators assume): sizes what that device's
 *       build allocates, e.g. cuda's two pinned staging slots per rank
 *       with offload_optimizer cpu; cpu sizes the cpu device's build.
 *   zinc-mem timeline IN.json OUT.svg
 *       render a memory timeline ("zinc.memory_timeline") as an SVG chart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/fs.h"
#include "config/config.h"
#include "engine/memory/timeline.h"
#include "engine/memory/estimate.h"

int zinc_mem_render_svg(const zinc_timeline *tl, FILE *f);

static int usage(void) {
  fprintf(stderr,
          "usage: zinc-mem estimate (--params N [--largest-layer M] [--dtype f32|bf16|f16] | "
          "--model FILE)\n"
          "                         [--config FILE] [--ranks-per-node G] [--nodes K] "
          "[--hidden-size H]\n"
          "                         [--device cuda|cpu]   (default cuda: sized as one GPU "
          "per rank, with\n"
          "                          cuda's pinned offload staging; cpu: the cpu device's "
          "build)\n"
          "       zinc-mem timeline IN.json OUT.svg\n");
  return 2;
}

static int fail(void) {
  fprintf(stderr, "zinc-mem: %s\n", zinc_last_error());
  return 1;
}

static int parse_dtype(const char *s, zinc_dtype *dt) {
  if (!strcmp(s, "f32") || !strcmp(s, "fp32"))
    *dt = ZINC_F32;
  else if (!strcmp(s, "bf16"))
    *dt = ZINC_BF16;
  else if (!strcmp(s, "f16") || !strcmp(s, "fp16"))
    *dt = ZINC_F16;
  else
    return 0;
  return 1;
}

static zinc_status read_model(const char *path, zinc_est_param **out, int *n) {
  FILE *f = fopen(path, "r");
  if (!f)
    return zinc_error(ZINC_ERR_IO, "model file %s: cannot open", path);
  int cap = 64, k = 0, line = 0;
  zinc_est_param *p = calloc((size_t)cap, sizeof *p);
  char buf[1024];
  zinc_status st = ZINC_OK;
  while (p && fgets(buf, sizeof buf, f)) {
    line++;
    char *hash = strchr(buf, '#');
    if (hash)
      *hash = '\0';
    char mod[128], name[128], dt[16];
    long long d[8];
    int used = 0;
    if (sscanf(buf, " %127s %127s %15s%n", mod, name, dt, &used) != 3)
      continue;
    zinc_est_param q = {0};
    snprintf(q.module, sizeof q.module, "%s", mod);
    snprintf(q.name, sizeof q.name, "%s", name);
    if (!parse_dtype(dt, &q.dtype)) {
      st = zinc_error(ZINC_ERR_INVALID, "%s:%d: dtype \"%s\" (expected f32, bf16 or f16)", path,
                      line, dt);
      break;
    }
    char *rest = buf + used;
    int c;
    while (q.ndim < 8 && sscanf(rest, " %lld%n", &d[q.ndim], &c) == 1) {
      q.shape[q.ndim] = d[q.ndim];
      q.ndim++;
      rest += c;
    }
    if (q.ndim == 0) {
      st = zinc_error(ZINC_ERR_INVALID, "%s:%d: no shape after the dtype", path, line);
      break;
    }
    char word[32];
    if (sscanf(rest, " %31s", word) == 1) {
      if (strcmp(word, "frozen") != 0) {
        st = zinc_error(ZINC_ERR_INVALID, "%s:%d: \"%s\" after the shape (expected nothing "
                        "or \"frozen\")", path, line, word);
        break;
      }
      q.frozen = 1;
    }
    if (k == cap) {
      cap *= 2;
      zinc_est_param *np = realloc(p, (size_t)cap * sizeof *p);
      if (!np) {
        st = zinc_error(ZINC_ERR_NOMEM, "out of memory");
        break;
      }
      p = np;
    }
    p[k++] = q;
  }
  fclose(f);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory");
  if (st == ZINC_OK && k == 0)
    st = zinc_error(ZINC_ERR_INVALID, "model file %s has no parameters", path);
  if (st != ZINC_OK) {
    free(p);
    return st;
  }
  *out = p;
  *n = k;
  return ZINC_OK;
}

/* --params N: modules of `largest` elements, shaped (rows, 4096). */
static zinc_status synth_model(int64_t total, int64_t largest, zinc_dtype dt,
                               zinc_est_param **out, int *n) {
  if (total <= 0)
    return zinc_error(ZINC_ERR_INVALID, "--params must be positive");
  if (largest <= 0 || largest > total)
    largest = total / 32 > 0 ? total / 32 : total;
  int64_t count = (total + largest - 1) / largest;
  if (count > 1000000)
    return zinc_error(ZINC_ERR_INVALID, "--largest-layer too small for --params (%lld modules)",
                      (long long)count);
  zinc_est_param *p = calloc((size_t)count, sizeof *p);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < count; i++) {
    int64_t numel = total - i * largest < largest ? total - i * largest : largest;
    snprintf(p[i].module, sizeof p[i].module, "layer%lld", (long long)i);
    snprintf(p[i].name, sizeof p[i].name, "weight");
    p[i].dtype = dt;
    if (numel % 4096 == 0) {
      p[i].ndim = 2;
      p[i].shape[0] = numel / 4096;
      p[i].shape[1] = 4096;
    } else {
      p[i].ndim = 1;
      p[i].shape[0] = numel;
    }
  }
  *out = p;
  *n = (int)count;
  return ZINC_OK;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static int cmd_estimate(int argc, char **argv) {
  int64_t params = 0, largest = 0, hidden = 0;
  const char *model = NULL, *cfgpath = NULL;
  int per_node = 1, nodes = 1;
  zinc_dtype dt = ZINC_BF16;
  zinc_est_device device = ZINC_EST_DEVICE_CUDA;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      return usage();
    if (!strcmp(a, "--params"))
      params = (int64_t)strtod(v, NULL);
    else if (!strcmp(a, "--largest-layer"))
      largest = (int64_t)strtod(v, NULL);
    else if (!strcmp(a, "--hidden-size"))
      hidden = (int64_t)strtod(v, NULL);
    else if (!strcmp(a, "--model"))
      model = v;
    else if (!strcmp(a, "--config"))
      cfgpath = v;
    else if (!strcmp(a, "--ranks-per-node"))
      per_node = atoi(v);
    else if (!strcmp(a, "--nodes"))
      nodes = atoi(v);
    else if (!strcmp(a, "--device")) {
      if (strcmp(v, "cuda") && strcmp(v, "cpu"))
        return usage();
      device = strcmp(v, "cuda") ? ZINC_EST_DEVICE_CPU : ZINC_EST_DEVICE_CUDA;
    } else if (!strcmp(a, "--dtype")) {
      if (!parse_dtype(v, &dt))
        return usage();
    } else
      return usage();
    i++;
  }
  if ((params > 0) == (model != NULL) || per_node < 1 || nodes < 1)
    return usage();
  zinc_config *cfg = NULL;
  zinc_status st = cfgpath ? zinc_config_load(cfgpath, &cfg)
                           : zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1}", &cfg);
  if (st != ZINC_OK)
    return fail();
  zinc_est_param *p = NULL;
  int n = 0;
  st = model ? read_model(model, &p, &n) : synth_model(params, largest, dt, &p, &n);
  if (st != ZINC_OK) {
    zinc_config_free(cfg);
    return fail();
  }
  int world = per_node * nodes;
  printf("zinc memory estimate: %d rank(s) per node x %d node(s) = %d data-parallel ranks, "
         "%s device\n", per_node, nodes, world,
         device == ZINC_EST_DEVICE_CUDA ? "cuda" : "cpu");
  printf("config: %s (reduce_bucket_size, stage3_* and offload settings taken from it)\n",
         cfgpath ? cfgpath : "(defaults)");
  zinc_estimate first;
  int printed = 0;
  for (int stage = 0; stage <= 3; stage++) {
    for (int off = ZINC_OFFLOAD_NONE; off <= ZINC_OFFLOAD_CPU; off++) {
      if (stage == 0 && off != ZINC_OFFLOAD_NONE)
        continue;
      zinc_settings s;
      if (zinc_settings_copy(&s, &cfg->s) != ZINC_OK)
        return fail();
      s.stage = stage;
      s.offload_optimizer.device = (zinc_offload_device)off;
      zinc_estimate est;
      st = zinc_estimate_model_on(&s, device, world, hidden, p, n, &est);
      zinc_settings_free(&s);
      if (st != ZINC_OK && hidden == 0 && st == ZINC_ERR_CONFIG)
        fprintf(stderr, "zinc-mem: give the hidden size with --hidden-size H\n");
      if (st != ZINC_OK)
        return fail();
      if (!printed) {
        first = est;
        printf("model: %.3f B parameters, largest module %.1f M elements\n",
               (double)est.params / 1e9, (double)est.largest_module / 1e6);
        /* the master weights and moments as the bf16 section keeps them */
        printf("optimizer state: master weights %s, moments %s\n\n",
               cfg->s.bf16_master_weights_and_grads ? "bf16" : "fp32",
               cfg->s.bf16_optimizer_states ? "bf16" : "fp32");
        printf("  %-5s %-17s %14s %16s %16s\n", "stage", "offload_optimizer", "per GPU GiB",
               "per node host GiB", "ZeRO formula GiB");
        printed = 1;
      }
      printf("  %-5d %-17s %14.2f %16.2f %16.2f\n", stage, zinc_offload_device_name(off),
             gib(est.peak[ZINC_LOC_DEVICE]), gib(est.peak[ZINC_LOC_HOST] * (uint64_t)per_node),
             gib(est.formula));
    }
  }
  (void)first;
  printf("\nper GPU: parameters, gradients, optimizer state and zinc's buffers (gradient "
         "buckets; at stage 3 the gathered\nparameters at their peak); activations are the "
         "trainer's and not included. NVMe offload keeps\noptimizer state on disk with "
         "buffer_count x sub_group_size in host memory.\n");
  free(p);
  zinc_config_free(cfg);
  return 0;
}

static int cmd_timeline(int argc, char **argv) {
  if (argc != 4)
    return usage();
  char *text;
  size_t len;
  if (zinc_fs_read_all(argv[2], &text, &len) != ZINC_OK)
    return fail();
  zinc_timeline *tl;
  zinc_status st = zinc_timeline_parse(text, len, argv[2], &tl);
  free(text);
  if (st != ZINC_OK)
    return fail();
  FILE *f = fopen(argv[3], "w");
  if (!f) {
    zinc_timeline_free(tl);
    fprintf(stderr, "zinc-mem: cannot write %s\n", argv[3]);
    return 1;
  }
  int rc = zinc_mem_render_svg(tl, f);
  rc |= fclose(f);
  printf("wrote %s (%d samples)\n", argv[3], tl->nsamples);
  zinc_timeline_free(tl);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  if (!strcmp(argv[1], "estimate"))
    return cmd_estimate(argc, argv);
  if (!strcmp(argv[1], "timeline"))
    return cmd_timeline(argc, argv);
  return usage();
}
