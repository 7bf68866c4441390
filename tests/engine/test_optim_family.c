/*
 * test_optim_family.c — every optimizer.type through the engine, under
 * mpirun: AdamW, Adam (L2 decay), Lamb, Lion, Adagrad and SGD (momentum 0.9,
 * Nesterov, weight decay), each trained 6 steps on the tiny model at stages
 * 0-3 with offload_optimizer none, cpu and nvme (sub-groups of 300 elements,
 * so that W0 and W1 span several and Lamb's per-parameter norms gather
 * pieces from several sub-groups and ranks; stage 3 with parameters on cpu
 * and nvme too), and with offload cpu through the staged copy pipeline a
 * GPU run takes (ZINC_OFFLOAD_STAGING=1, sub-groups of 300 elements: Lamb
 * in two passes, gradients copied in, norms out, then parameters out):
 *  - fp32: every run bitwise identical to stage 0, and stage 0 within
 *    relative L2 1e-5 of et_reference's double-precision implementation of
 *    that optimizer (Lion 1e-4: its update is lr sign(c), and an element
 *    whose c is within rounding of 0 may take the other sign: one such
 *    element moves the whole model by 2 lr / |params| ~ 3e-5 at lr 1e-4);
 *  - bf16 parameters: stage 0, stage 3 (nvme) and stage 1 (cpu staged:
 *    the gradients copied in as bf16) bitwise identical, within relative L2
 *    2e-2 of the fp32 reference (the forward reads bf16 parameters).
 * An optimizer whose config the engine refuses fails with the engine's
 * message (and the others still run); nothing is skipped.
 */
#include <sys/stat.h>

#include "engine_test.h"

#define STEPS 6

static char nvme_dir[512];

typedef struct {
  et_optim o;
  double tol_ref; /* fp32: relative L2 to et_reference */
} family_member;

/* The config the engine builds for o parses; otherwise a failure naming o
 * and the engine's message. */
static int engine_accepts(const et_run *r, const char *label) {
  char *json = et_config_json(r);
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  free(json);
  ET_CHECK(st == ZINC_OK, "%s: the engine refuses the optimizer section: %s: %s", label,
           zinc_status_name(st), zinc_last_error());
  zinc_config_free(cfg);
  return st == ZINC_OK;
}

static void check_member(const family_member *f, zinc_dtype dtype, double tol_ref) {
  char label[64];
  snprintf(label, sizeof label, "%s%s, %s", f->o.type,
           et_optim_is(&f->o, "Adam") ? " (L2 decay)" : "", zinc_dtype_name(dtype));
  et_run base = et_defaults();
  base.steps = STEPS;
  base.optim = &f->o;
  base.dtype = dtype;
  base.shape.dtype = dtype;
  if (!engine_accepts(&base, label))
    return;
  const struct {
    int stage, overlap;
    const char *offload, *offload_param;
    int staged; /* ZINC_OFFLOAD_STAGING=1 */
  } all[] = {{0, 0, "none", NULL, 0},  {1, 0, "none", NULL, 0},  {2, 1, "none", NULL, 0},
             {3, 1, "none", NULL, 0},  {1, 0, "cpu", NULL, 0},   {2, 1, "cpu", NULL, 0},
             {3, 1, "cpu", "cpu", 0},  {1, 0, "nvme", NULL, 0},  {2, 1, "nvme", NULL, 0},
             {3, 0, "nvme", "nvme", 0}, {1, 0, "cpu", NULL, 1},  {2, 1, "cpu", NULL, 1},
             {3, 1, "cpu", "cpu", 1},  {3, 0, "cpu", NULL, 1}},
    bf16[] = {{0, 0, "none", NULL, 0}, {3, 1, "nvme", "nvme", 0}, {1, 0, "cpu", NULL, 1}};
  int nruns = dtype == ZINC_F32 ? (int)(sizeof all / sizeof all[0])
                                : (int)(sizeof bf16 / sizeof bf16[0]);
  float **first = et_alloc_params(&base.shape), **ref = et_alloc_params(&base.shape);
  for (int k = 0; k < nruns; k++) {
    et_run r = base;
    r.stage = dtype == ZINC_F32 ? all[k].stage : bf16[k].stage;
    r.overlap = dtype == ZINC_F32 ? all[k].overlap : bf16[k].overlap;
    r.offload = dtype == ZINC_F32 ? all[k].offload : bf16[k].offload;
    r.offload_param = dtype == ZINC_F32 ? all[k].offload_param : bf16[k].offload_param;
    int staged = dtype == ZINC_F32 ? all[k].staged : bf16[k].staged;
    if (!strcmp(r.offload, "nvme") || (r.offload_param && !strcmp(r.offload_param, "nvme"))) {
      r.nvme_path = nvme_dir;
      r.sub_group = 300; /* W0 (481) spans 2 sub-groups, W1 (1073) 4 */
      r.buffer_count = 3;
    }
    if (staged) {
      r.sub_group = 300; /* W0 and W1 span several staging sub-groups */
      setenv("ZINC_OFFLOAD_STAGING", "1", 1);
    }
    float **out = k == 0 ? first : et_alloc_params(&r.shape);
    et_train(&r, out, NULL, NULL);
    unsetenv("ZINC_OFFLOAD_STAGING");
    char what[200];
    snprintf(what, sizeof what, "%s: stage %d%s offload %s/%s%s", label, r.stage,
             r.overlap ? " overlap" : "", r.offload, r.offload_param ? r.offload_param : "none",
             staged ? " (staged copies)" : "");
    if (k == 0) {
      et_reference(&r, et_world, ref);
      double rel = et_rel_l2(&r.shape, first, ref);
      ET_CHECK(rel <= tol_ref, "%s vs the double-precision reference: relative L2 %.3g > %.3g",
               what, rel, tol_ref);
      if (et_rank == 0)
        printf("%s, %d ranks: stage 0 vs reference relative L2 %.3g (limit %.1g)\n", label,
               et_world, rel, tol_ref);
      continue;
    }
    ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical to stage 0",
             what);
    et_free_params(out);
  }
  if (et_rank == 0 && et_failures == 0)
    printf("%s, %d ranks: %s bitwise identical\n", label, et_world,
           dtype == ZINC_F32 ? "stages 0-3, offload none/cpu/cpu-staged/nvme"
                             : "stages 0, 3 (nvme) and 1 (cpu staged)");
  et_free_params(first);
  et_free_params(ref);
}

int main(void) {
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme_optim_family", et_binary_dir());
  mkdir(nvme_dir, 0755);
  const family_member family[] = {
      {{.type = "AdamW", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
        .weight_decay = 0.01}, 1e-5},
      {{.type = "Adam", .lr = 0.005, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-6,
        .weight_decay = 0.05, .adam_w_mode = 0}, 1e-5},
      {{.type = "Lamb", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6,
        .weight_decay = 0.01, .min_coeff = 0.05, .max_coeff = 5.0}, 1e-5},
      {{.type = "Lion", .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}, 1e-4},
      {{.type = "Adagrad", .lr = 0.01, .eps = 1e-8, .weight_decay = 0.01}, 1e-5},
      {{.type = "SGD", .lr = 0.05, .momentum = 0.9, .dampening = 0.0, .nesterov = 1,
        .weight_decay = 0.01}, 1e-5},
  };
  int n = (int)(sizeof family / sizeof family[0]);
  for (int k = 0; k < n; k++)
    check_member(&family[k], ZINC_F32, family[k].tol_ref);
  for (int k = 0; k < n; k++)
    check_member(&family[k], ZINC_BF16, 2e-2);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  return 0;
}
