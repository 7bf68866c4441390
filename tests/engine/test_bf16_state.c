/*
 * test_bf16_state.c — bf16 master weights and optimizer states (the bf16
 * section's bf16_master_weights_and_grads and bf16_optimizer_states), under
 * mpirun, through the public API:
 *  - the model against this file's own reference: the tiny model trained
 *    without zinc by AdamW whose master weights and moments are rounded to
 *    bf16 (to nearest even, engine_test.h's, from the bit pattern) after each
 *    step, computed in double. zinc's fp32 arithmetic may round a value the
 *    other way now and then, so the check is a distance: zinc within a
 *    tenth of the distance between that reference and the fp32-state one
 *    (an engine that kept fp32 states, or rounded only the master, is as
 *    far as the fp32 reference or farther);
 *  - every master weight and moment zinc reports (zinc_param_get_full) is
 *    a bf16 value (its low 16 bits zero), and with fp32 states they are not;
 *  - the same bits at stages 0 to 3, with the optimizer on the CPU at 1
 *    to 3 (and the parameters at 3), half of it (partial offload, ratio
 *    0.5) at 2, on NVMe at 1 and with the parameters at 3, the
 *    parameters alone on NVMe at 3, for AdamW, Lamb, Lion, Adagrad and SGD with momentum, with
 *    round to nearest even and with stochastic rounding; stochastic
 *    rounding differs from nearest and another seed gives other bits;
 *  - the optimizer-state bytes (profiler) of a bf16-parameter model are
 *    exactly half of the fp32-state run's at every stage, and the ZeRO
 *    formula counts them;
 *  - the settings zinc refuses: bf16_optimizer_states without the master
 *    weights in bf16, a 1-bit optimizer, a rounding it has not, each
 *    naming the key.
 */
#include <sys/stat.h>

#include "engine_test.h"

#define STEPS 12

static char nvme_dir[512]; /* the NVMe cases' swap files */

static int is_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0xffffu) == 0;
}

/* AdamW (et_adamw_default) over the global batch, the master weights and
 * moments kept in bf16 when `bf16` (else fp32), each step in double. */
static void reference(const et_run *r, int bf16, float **final) {
  const tm_shape *sh = &r->shape;
  et_optim o = et_adamw_default();
  float *P[TM_NPARAM], *G[TM_NPARAM], *Gl[TM_NPARAM], *M[TM_NPARAM], *V[TM_NPARAM];
  float *W[TM_NPARAM]; /* the master; the forward reads P */
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(sh, i);
    P[i] = calloc((size_t)n, 4);
    W[i] = calloc((size_t)n, 4);
    G[i] = calloc((size_t)n, 4);
    Gl[i] = calloc((size_t)n, 4);
    M[i] = calloc((size_t)n, 4);
    V[i] = calloc((size_t)n, 4);
    for (int64_t j = 0; j < n; j++) { /* the trainer's fp32 values until the first step */
      P[i][j] = tm_init_value(sh, i, j);
      W[i][j] = bf16 ? et_bf16_round(P[i][j]) : P[i][j];
    }
  }
  for (int s = 0; s < r->steps; s++) {
    double coef, avg = et_reference_grads(r, et_world, s, P, G, Gl, &coef);
    double t = s + 1, bc1 = 1 - pow(o.beta1, t), bc2 = 1 - pow(o.beta2, t);
    for (int i = 0; i < TM_NPARAM; i++)
      for (int64_t j = 0; j < tm_numel(sh, i); j++) {
        double g = G[i][j] * avg * coef;
        double m = o.beta1 * M[i][j] + (1 - o.beta1) * g;
        double v = o.beta2 * V[i][j] + (1 - o.beta2) * g * g;
        double p = W[i][j];
        if (et_param_decays(i))
          p *= 1 - o.lr * o.weight_decay;
        p -= o.lr / bc1 * m / (sqrt(v) / sqrt(bc2) + o.eps);
        M[i][j] = bf16 ? et_bf16_round(m) : (float)m;
        V[i][j] = bf16 ? et_bf16_round(v) : (float)v;
        P[i][j] = W[i][j] = bf16 ? et_bf16_round(p) : (float)p;
      }
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    memcpy(final[i], P[i], (size_t)tm_numel(sh, i) * 4);
    free(P[i]);
    free(W[i]);
    free(G[i]);
    free(Gl[i]);
    free(M[i]);
    free(V[i]);
  }
}

static const char *const BF16_BOTH =
    ", \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": true";

/* Train r; every master weight and moment read back; *all_bf16 says
 * whether each was a bf16 value. */
static void train_states(const et_run *r, float **final, int *all_bf16) {
  et_model m;
  zinc_engine *e = et_open(r, NULL, &m);
  ET_OK(et_steps(&m, r, 0, r->steps));
  *all_bf16 = 1;
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(&r->shape, i);
    float *tmp = calloc((size_t)n, 4);
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, final[i]));
    for (int64_t j = 0; j < n; j++)
      *all_bf16 &= is_bf16(final[i][j]);
    for (int k = ZINC_STATE_EXP_AVG; k <= ZINC_STATE_EXP_AVG_SQ; k++) {
      ET_OK(zinc_param_get_full(e, m.par[i], (zinc_state_kind)k, tmp));
      for (int64_t j = 0; j < n; j++)
        *all_bf16 &= is_bf16(tmp[j]);
    }
    free(tmp);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static void check_reference(void) {
  et_run r = et_defaults();
  r.steps = STEPS;
  r.stage = 2;
  float **ref16 = et_alloc_params(&r.shape), **ref32 = et_alloc_params(&r.shape);
  float **got = et_alloc_params(&r.shape), **got32 = et_alloc_params(&r.shape);
  reference(&r, 1, ref16);
  reference(&r, 0, ref32);
  int bf16_everywhere = 0, fp32_everywhere = 1;
  r.bf16_extra = BF16_BOTH;
  train_states(&r, got, &bf16_everywhere);
  r.bf16_extra = NULL;
  train_states(&r, got32, &fp32_everywhere);
  double gap = et_rel_l2(&r.shape, ref32, ref16), d = et_rel_l2(&r.shape, got, ref16);
  double d32 = et_rel_l2(&r.shape, got32, ref32);
  int64_t diff = 0, tot = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(&r.shape, i); j++, tot++)
      diff += got[i][j] != ref16[i][j];
  ET_CHECK(gap > 1e-4, "the bf16 and fp32 references differ by only %.3g", gap);
  ET_CHECK(d < gap / 10, "bf16 states: %.3g from the bf16 reference, the fp32 reference is "
           "%.3g from it", d, gap);
  ET_CHECK(d32 < gap / 10, "fp32 states: %.3g from the fp32 reference (gap %.3g)", d32, gap);
  ET_CHECK(bf16_everywhere, "bf16 states: a master weight or moment is not a bf16 value");
  ET_CHECK(!fp32_everywhere, "fp32 states: every value is a bf16 value (the check is blind)");
  if (et_rank == 0)
    printf("reference: bf16 states %.3g from the bf16 reference (%lld of %lld values differ), "
           "fp32 states %.3g from the fp32 one; the references %.3g apart\n", d,
           (long long)diff, (long long)tot, d32, gap);
  et_free_params(ref16);
  et_free_params(ref32);
  et_free_params(got);
  et_free_params(got32);
}

static void check_stages(const char *type, const char *rounding) {
  et_optim o = et_adamw_default();
  o.type = type;
  if (!strcmp(type, "Lamb")) {
    o.min_coeff = 0.01;
    o.max_coeff = 10;
  } else if (!strcmp(type, "SGD")) {
    o.momentum = 0.9;
  } else if (!strcmp(type, "Lion")) {
    o.lr = 1e-3;
    o.beta2 = 0.99;
  }
  char zinc[160];
  snprintf(zinc, sizeof zinc, "\"zinc\": {\"bf16_rounding\": \"%s\", \"bf16_rounding_seed\": 7}",
           rounding);
  et_run r = et_defaults();
  r.steps = STEPS;
  r.optim = &o;
  r.bf16_extra = BF16_BOTH;
  r.extra = zinc;
  r.overlap = 1;
  float **base = NULL;
  const struct {
    int stage;
    const char *offload, *offload_param, *offload_extra;
  } cases[] = {{0, "none", NULL, NULL}, {1, "none", NULL, NULL}, {2, "none", NULL, NULL},
               {3, "none", NULL, NULL}, {1, "cpu", NULL, NULL},  {2, "cpu", NULL, NULL},
               {3, "cpu", "cpu", NULL},
               {2, "cpu", NULL, ", \"ratio\": 0.5"}, /* partial offload */
               {1, "nvme", NULL, NULL},  {3, "nvme", "nvme", NULL},
               {3, "none", "nvme", NULL}}; /* the parameters alone on NVMe */
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    r.stage = cases[k].stage;
    r.offload = cases[k].offload;
    r.offload_param = cases[k].offload_param;
    r.offload_extra = cases[k].offload_extra;
    int nvme = !strcmp(r.offload, "nvme") || (r.offload_param && !strcmp(r.offload_param, "nvme"));
    r.nvme_path = nvme ? nvme_dir : NULL;
    r.sub_group = nvme || r.offload_extra ? 700 : 0; /* several sub-groups */
    float **p = et_train_with(r, NULL, zinc);
    if (!base) {
      base = p;
      continue;
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s: stage %d offload %s%s%s against stage 0", type,
             rounding, r.stage, r.offload, r.offload_extra ? " ratio 0.5" : "",
             r.offload_param ? " (and the parameters)" : "");
    ET_CHECK(et_same_bits(&r.shape, p, base, what), "%s", what);
    et_free_params(p);
  }
  if (!strcmp(rounding, "stochastic")) { /* it rounds otherwise, and by its seed */
    r.stage = 1;
    r.offload = "none";
    r.offload_param = NULL;
    r.offload_extra = NULL;
    r.nvme_path = NULL;
    r.sub_group = 0;
    float **nearest = et_train_with(r, NULL, "\"zinc\": {\"bf16_rounding\": \"nearest\"}");
    float **seed8 = et_train_with(
        r, NULL, "\"zinc\": {\"bf16_rounding\": \"stochastic\", \"bf16_rounding_seed\": 8}");
    ET_CHECK(et_rel_l2(&r.shape, nearest, base) > 0, "%s: stochastic rounding gave the "
             "bits of round to nearest", type);
    ET_CHECK(et_rel_l2(&r.shape, seed8, base) > 0, "%s: seeds 7 and 8 gave the same bits",
             type);
    et_free_params(nearest);
    et_free_params(seed8);
  }
  et_free_params(base);
}

static uint64_t optim_bytes(et_run r, const char *bf16_extra, uint64_t *formula) {
  r.bf16_extra = bf16_extra;
  r.steps = 1;
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  et_train(&r, NULL, NULL, &st);
  *formula = st.theoretical_model_states;
  uint64_t b = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    b += st.current[l][ZINC_MEM_OPTIM];
  return b;
}

static void check_bytes(void) {
  for (int stage = 0; stage <= 3; stage++) {
    et_run r = et_defaults();
    r.stage = stage;
    r.dtype = ZINC_BF16;
    r.shape.dtype = ZINC_BF16;
    uint64_t f32f, f16f;
    uint64_t f32 = optim_bytes(r, NULL, &f32f), f16 = optim_bytes(r, BF16_BOTH, &f16f);
    ET_CHECK(f32 > 0 && f16 * 2 == f32, "stage %d: optimizer state %llu bytes with bf16 "
             "states, %llu with fp32: not half", stage, (unsigned long long)f16,
             (unsigned long long)f32);
    /* the formula counts the parameters unpadded: 6 bytes fewer each */
    int64_t psi = 0;
    for (int i = 0; i < TM_NPARAM; i++)
      psi += tm_numel(&r.shape, i);
    double want = 6.0 * (double)psi / (stage == 0 ? 1 : et_world);
    ET_CHECK(fabs((double)(f32f - f16f) - want) <= 1.0, "stage %d: the ZeRO formula dropped "
             "%llu bytes, expected %.1f", stage, (unsigned long long)(f32f - f16f), want);
    if (et_rank == 0)
      printf("stage %d: optimizer state %llu bytes with fp32 states, %llu with bf16\n", stage,
             (unsigned long long)f32, (unsigned long long)f16);
  }
}

/* Parse these settings and expect ZINC_ERR_CONFIG naming `key`. */
static void check_refused(const char *what, et_run r, const char *key) {
  char *json = et_config_json(&r);
  char *adamw = strstr(json, "\"AdamW\"");
  if (!strcmp(what, "OneBitAdam") && adamw) { /* AdamW's params are OneBitAdam's too */
    char *copy = malloc(strlen(json) + 16);
    sprintf(copy, "%.*s\"OneBitAdam\"%s", (int)(adamw - json), json, adamw + 7);
    free(json);
    json = copy;
  }
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  ET_CHECK(st == ZINC_ERR_CONFIG, "%s: %s, expected ZINC_ERR_CONFIG", what,
           zinc_status_name(st));
  ET_CHECK(st == ZINC_OK || strstr(zinc_last_error(), key), "%s: the message does not name "
           "%s: %s", what, key, zinc_last_error());
  if (et_rank == 0 && st != ZINC_OK)
    printf("refused, %s: %s\n", what, zinc_last_error());
  zinc_config_free(cfg);
  free(json);
}

static void check_refusals(void) {
  et_run r = et_defaults();
  r.stage = 1;
  r.bf16_extra = ", \"bf16_optimizer_states\": true";
  check_refused("states without master", r, "bf16.bf16_optimizer_states");
  r = et_defaults();
  r.bf16_extra = BF16_BOTH;
  check_refused("OneBitAdam", r, "bf16.bf16_master_weights_and_grads");
  r = et_defaults();
  r.extra = "\"zinc\": {\"bf16_rounding\": \"up\"}";
  check_refused("bf16_rounding", r, "zinc.bf16_rounding");
}

int main(void) {
  snprintf(nvme_dir, sizeof nvme_dir, "%s/bf16_state_nvme", et_binary_dir());
  mkdir(nvme_dir, 0700);
  /* an engine first, so that et_rank/et_world are known to the reference */
  et_run probe = et_defaults();
  probe.steps = 1;
  float **p = et_alloc_params(&probe.shape);
  et_train(&probe, p, NULL, NULL);
  et_free_params(p);
  check_refusals();
  check_reference();
  check_bytes();
  const char *types[] = {"AdamW", "Lamb", "Lion", "Adagrad", "SGD"};
  for (int t = 0; t < 5; t++) {
    check_stages(types[t], "nearest");
    check_stages(types[t], "stochastic");
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("bf16 master weights and optimizer states: all checks passed\n");
  return 0;
}
