/*
 * test_param_groups.c — parameter groups, frozen parameters and the
 * run-time lr setter, at stages 0-3 (1, 2 and 4 ranks).
 *
 * The references are runs whose coefficients come out the same by another
 * route (bitwise): the optimizer is elementwise, so what a parameter's
 * update sees is its (lr, weight decay) pair, wherever that came from.
 *  - lr scale 0: the parameter is bitwise unchanged, the others move;
 *  - lr: config lr 0.01 with mid.W1 at scale 0.5 equals config lr 0.005
 *    with every other parameter at scale 2 (0.005 x 2 == 0.01 exactly);
 *  - weight decay: config 0.01 with mid.W1 at 0.3 equals config 0.3 with
 *    every other parameter at 0.01 (decayed ones; the others have none);
 *  - frozen in.W0 (the "embedding"): bitwise unchanged, its gradient not
 *    handed out; with clipping off the other parameters equal those of a
 *    run where in.W0 takes gradients but has lr scale 0 (the norm, the only
 *    coupling, is off); the same bits at every stage; the profiler's
 *    gradient and optimizer-state bytes smaller by exactly W0's elements x
 *    their bytes per element (the shape puts W0 on whole chunks);
 *  - frozen in.W0 with the optimizer state offloaded to cpu and to nvme
 *    (stage 2), and with the parameters offloaded too (stage 3, cpu and
 *    nvme): the same bits as the frozen run without offload; the host (or
 *    disk) optimizer state smaller by W0's share, 12 bytes (master and two
 *    moments) per element of this rank's chunk (on disk to the I/O
 *    alignment), the host gradient partition by 4;
 *  - zinc_engine_set_lr(0.01) under a warmup scheduler equals the config's
 *    constant 0.01; a negative lr gives the scheduler back;
 *  - a rank that freezes or scales a different parameter fails the build
 *    on every rank, naming the parameter and the rank.
 */
#include <errno.h>
#include <mpi.h>
#include <sys/stat.h>

#include "engine_test.h"

enum { STEPS = 4 };
#define W0 0
#define W1 2

/* Which knob a run turns (before the build). */
typedef struct {
  const char *from, *to;   /* config text replaced (NULL: none) */
  int param;               /* parameter set (-1: none) */
  double lr_scale;         /* for `param` (< 0: untouched) */
  double wd;               /* for `param` (< 0: untouched) */
  double others_lr_scale;  /* every other parameter (< 0: untouched) */
  double others_wd;        /* every other decayed parameter (< 0: untouched) */
  int frozen;              /* `param` frozen */
  double set_lr;           /* zinc_engine_set_lr before each step (0: never) */
} knobs;

static const knobs NONE = {NULL, NULL, -1, -1, -1, -1, -1, 0, 0};

static int decayed(int i) { return !(i == 1 || i == 3 || i == 4 || i == 6); }

static zinc_engine *open_with(const et_run *r, const knobs *k, et_model *m) {
  char *json = et_config_json(r);
  if (k->from) {
    char *at = strstr(json, k->from);
    if (!at) {
      fprintf(stderr, "config has no \"%s\"\n", k->from);
      exit(1);
    }
    char *out = malloc(strlen(json) + strlen(k->to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - json), json, k->to, at + strlen(k->from));
    free(json);
    json = out;
  }
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  et_rank = zinc_rank(e);
  et_world = zinc_world_size(e);
  et_register_run(m, e, r);
  for (int i = 0; i < TM_NPARAM; i++) {
    if (i == k->param) {
      if (k->lr_scale >= 0)
        ET_OK(zinc_param_set_lr_scale(m->par[i], k->lr_scale));
      if (k->wd >= 0)
        ET_OK(zinc_param_set_weight_decay_value(m->par[i], k->wd));
      if (k->frozen)
        ET_OK(zinc_param_set_frozen(m->par[i], 1));
    } else {
      if (k->others_lr_scale >= 0)
        ET_OK(zinc_param_set_lr_scale(m->par[i], k->others_lr_scale));
      if (k->others_wd >= 0 && decayed(i))
        ET_OK(zinc_param_set_weight_decay_value(m->par[i], k->others_wd));
    }
  }
  ET_OK(zinc_engine_build(e, et_init, &m->ictx));
  return e;
}

/* One micro-batch leaving out the gradients of `frozen` (-1: none). */
static void micro_batch(et_model *m, const et_run *r, int64_t first, int frozen) {
  zinc_engine *e = m->e;
  const tm_shape *sh = &r->shape;
  et_clear_grads(m, sh, -1);
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    ET_OK(et_load_module(m, sh, r->dtype, k));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  tm_forward_backward(sh, m->P, m->G, first, r->micro, zinc_loss_scale(e));
  for (int k = 3; k >= 0; k--) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    for (int i = 0; i < TM_NPARAM; i++) {
      if (et_param_module[i] != k)
        continue;
      void *g = zinc_param_grad(m->par[i]);
      if (i == frozen) {
        ET_CHECK(!g && strstr(zinc_last_error(), "frozen"),
                 "the frozen parameter's gradient was handed out (or no reason given: %s)",
                 zinc_last_error());
        continue;
      }
      ET_CHECK(g != NULL, "gradient of %s: %s", tm_names[i], zinc_last_error());
      if (!g)
        exit(1);
      for (int64_t j = 0; j < tm_numel(sh, i); j++)
        zinc_store_from_f32(g, j, r->dtype, zinc_load_as_f32(g, j, r->dtype) + m->G[i][j]);
    }
    ET_OK(zinc_module_grads_ready(e, m->mod[k]));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  ET_OK(zinc_backward_end(e));
}

/* Train STEPS steps with knobs k; the final parameters into out, the lr
 * of every step into lrs (may be NULL), the memory stats into stats. */
static void run(const et_run *r, const knobs *k, float **out, double *lrs,
                zinc_mem_stats *stats) {
  et_model m;
  zinc_engine *e = open_with(r, k, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < STEPS; s++) {
    if (k->set_lr != 0)
      ET_OK(zinc_engine_set_lr(e, k->set_lr));
    micro_batch(&m, r, ((int64_t)s * N + me) * r->micro, k->frozen ? k->param : -1);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    if (lrs)
      lrs[s] = info.lr;
  }
  et_get_params(&m, out);
  if (stats)
    ET_OK(zinc_memory_stats(e, stats));
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static int same(const tm_shape *sh, float **a, float **b, int i) {
  return memcmp(a[i], b[i], (size_t)tm_numel(sh, i) * sizeof(float)) == 0;
}

static void check_stage(int stage, float **frozen_prev) {
  et_run r = et_defaults();
  r.stage = stage;
  r.steps = STEPS;
  /* W0 = d0 x d1 a whole multiple of 4 ranks x 32 elements: the
   * frozen parameter's segment has no padding, so the bytes it saves are
   * exactly its own */
  r.shape.d[0] = 4;
  r.shape.d[1] = 64;
  r.persist = 0; /* stage 3: no segment kept whole (freezing would move b0 under the threshold) */
  const tm_shape *sh = &r.shape;
  float **init = et_alloc_params(sh), **base = et_alloc_params(sh), **a = et_alloc_params(sh),
        **b = et_alloc_params(sh);
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      init[i][j] = tm_init_value(sh, i, j);
  zinc_mem_stats st_base = ZINC_MEM_STATS_INIT, st_frozen = ZINC_MEM_STATS_INIT;
  run(&r, &NONE, base, NULL, &st_base);

  /* lr scale 0 */
  knobs k = NONE;
  k.param = W1;
  k.lr_scale = 0;
  run(&r, &k, a, NULL, NULL);
  ET_CHECK(same(sh, a, init, W1), "stage %d: mid.W1 at lr scale 0 changed", stage);
  ET_CHECK(!same(sh, a, init, 5), "stage %d: out.W2 did not move", stage);

  /* lr scale 0.5 == half the lr with the others at scale 2 */
  k = NONE;
  k.param = W1;
  k.lr_scale = 0.5;
  run(&r, &k, a, NULL, NULL);
  k = NONE;
  k.from = "\"lr\": 0.01";
  k.to = "\"lr\": 0.005";
  k.param = W1;
  k.others_lr_scale = 2.0;
  run(&r, &k, b, NULL, NULL);
  ET_CHECK(et_same_bits(sh, a, b, "lr scale 0.5 vs half lr"), "stage %d: lr scale", stage);
  ET_CHECK(!same(sh, a, base, W1), "stage %d: lr scale 0.5 changed nothing", stage);

  /* per-parameter weight decay == the config's */
  k = NONE;
  k.param = W1;
  k.wd = 0.3;
  run(&r, &k, a, NULL, NULL);
  k = NONE;
  k.from = "\"weight_decay\": 0.01";
  k.to = "\"weight_decay\": 0.3";
  k.param = W1;
  k.others_wd = 0.01;
  run(&r, &k, b, NULL, NULL);
  ET_CHECK(et_same_bits(sh, a, b, "weight decay value vs config"), "stage %d: weight decay",
           stage);
  ET_CHECK(!same(sh, a, base, W1), "stage %d: weight decay 0.3 changed nothing", stage);

  /* frozen in.W0 vs in.W0 at lr scale 0 without clipping */
  et_run nc = r;
  nc.clip = 0;
  k = NONE;
  k.param = W0;
  k.frozen = 1;
  run(&nc, &k, a, NULL, &st_frozen);
  k.frozen = 0;
  k.lr_scale = 0;
  run(&nc, &k, b, NULL, NULL);
  ET_CHECK(same(sh, a, init, W0), "stage %d: frozen in.W0 changed", stage);
  ET_CHECK(et_same_bits(sh, a, b, "frozen vs lr scale 0"), "stage %d: frozen", stage);
  if (frozen_prev[0][0] == frozen_prev[0][0]) /* not NaN: an earlier stage ran */
    ET_CHECK(et_same_bits(sh, a, frozen_prev, "frozen, across stages"), "stage %d vs earlier",
             stage);
  for (int i = 0; i < TM_NPARAM; i++)
    memcpy(frozen_prev[i], a[i], (size_t)tm_numel(sh, i) * sizeof(float));
  /* memory: f32 model, state on the device (master in the parameters: 2
   * arrays), chunks of 1/N at stages 1-3 */
  int N = et_world;
  uint64_t w0 = (uint64_t)tm_numel(sh, W0) * 4;
  uint64_t opt_less = 2 * w0 / (uint64_t)(stage == 0 ? 1 : N);
  uint64_t grad_less = stage <= 1 ? w0 : w0 / (uint64_t)N;
  uint64_t ob = st_base.current[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM],
           of = st_frozen.current[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM];
  uint64_t gb = st_base.current[ZINC_LOC_DEVICE][ZINC_MEM_GRADS],
           gf = st_frozen.current[ZINC_LOC_DEVICE][ZINC_MEM_GRADS];
  ET_CHECK(ob - of == opt_less, "stage %d: optimizer state %llu -> %llu bytes, want %llu less",
           stage, (unsigned long long)ob, (unsigned long long)of, (unsigned long long)opt_less);
  /* the ZeRO formula (an unpadded count) drops the same bytes */
  ET_CHECK(st_base.theoretical_model_states - st_frozen.theoretical_model_states ==
               opt_less + grad_less,
           "stage %d: formula %llu -> %llu bytes, want %llu less", stage,
           (unsigned long long)st_base.theoretical_model_states,
           (unsigned long long)st_frozen.theoretical_model_states,
           (unsigned long long)(opt_less + grad_less));
  ET_CHECK(gb - gf == grad_less, "stage %d: gradients %llu -> %llu bytes, want %llu less",
           stage, (unsigned long long)gb, (unsigned long long)gf, (unsigned long long)grad_less);
  et_free_params(init);
  et_free_params(base);
  et_free_params(a);
  et_free_params(b);
}

/* Frozen in.W0 with offload: `offload` for the optimizer state (and the
 * parameters at stage 3). */
static void check_offload(int stage, const char *offload) {
  et_run r = et_defaults();
  r.stage = stage;
  r.steps = STEPS;
  r.shape.d[0] = 4;
  r.shape.d[1] = 64;
  r.persist = 0;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/param_groups_nvme_np%d", et_binary_dir(), et_world);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    ET_CHECK(0, "mkdir %s failed", dir);
    return;
  }
  const tm_shape *sh = &r.shape;
  float **plain = et_alloc_params(sh), **off = et_alloc_params(sh);
  knobs k = NONE;
  k.param = W0;
  k.frozen = 1;
  run(&r, &k, plain, NULL, NULL);
  et_run o = r;
  o.offload = offload;
  if (stage == 3)
    o.offload_param = offload;
  if (!strcmp(offload, "nvme"))
    o.nvme_path = dir;
  zinc_mem_stats st_frozen = ZINC_MEM_STATS_INIT, st_base = ZINC_MEM_STATS_INIT;
  run(&o, &k, off, NULL, &st_frozen);
  char what[120];
  snprintf(what, sizeof what, "stage %d offload %s, frozen in.W0", stage, offload);
  ET_CHECK(et_same_bits(sh, off, plain, what), "%s: not the frozen run without offload", what);
  run(&o, &NONE, plain, NULL, &st_base); /* the trained W0's memory */
  for (int64_t j = 0; j < tm_numel(sh, W0); j++)
    if (off[W0][j] != tm_init_value(sh, W0, j)) {
      ET_CHECK(0, "%s: in.W0[%lld] changed", what, (long long)j);
      break;
    }
  uint64_t w0 = (uint64_t)tm_numel(sh, W0) / (uint64_t)et_world; /* this rank's chunk */
  int loc = !strcmp(offload, "nvme") ? ZINC_LOC_NVME : ZINC_LOC_HOST;
  uint64_t ob = st_base.current[loc][ZINC_MEM_OPTIM], of = st_frozen.current[loc][ZINC_MEM_OPTIM];
  uint64_t want = 12 * w0, slack = loc == ZINC_LOC_NVME ? 4096 : 0;
  ET_CHECK(ob >= of && ob - of + slack >= want && ob - of <= want + slack,
           "%s: %s optimizer state %llu -> %llu bytes, want %llu less (to %llu)", what,
           loc == ZINC_LOC_NVME ? "disk" : "host", (unsigned long long)ob,
           (unsigned long long)of, (unsigned long long)want, (unsigned long long)slack);
  /* with NVMe offload at stages 2-3 the gradient partition is on disk too
   * (in whole blocks: the same slack) */
  int gloc = loc == ZINC_LOC_NVME && stage >= 2 ? ZINC_LOC_NVME : ZINC_LOC_HOST;
  uint64_t gb = st_base.current[gloc][ZINC_MEM_GRADS],
           gf = st_frozen.current[gloc][ZINC_MEM_GRADS];
  uint64_t gslack = gloc == ZINC_LOC_NVME ? 4096 : 0;
  ET_CHECK(gb >= gf && gb - gf + gslack >= 4 * w0 && gb - gf <= 4 * w0 + gslack,
           "%s: %s gradients %llu -> %llu bytes, want %llu less (to %llu)", what,
           gloc == ZINC_LOC_NVME ? "disk" : "host", (unsigned long long)gb,
           (unsigned long long)gf, (unsigned long long)(4 * w0), (unsigned long long)gslack);
  et_free_params(plain);
  et_free_params(off);
}

/* zinc_engine_set_lr(0.01) before every step under a warmup scheduler
 * equals the config's constant 0.01, bitwise; a negative lr gives the
 * scheduler back (zinc_step_info.lr says which was used). */
static void check_set_lr(void) {
  et_run r = et_defaults();
  r.stage = 2;
  r.steps = STEPS;
  const tm_shape *sh = &r.shape;
  float **a = et_alloc_params(sh), **b = et_alloc_params(sh);
  et_run warm = r;
  warm.extra = "  \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
               "\"warmup_max_lr\": 0.02, \"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}}";
  double lrs[STEPS], sched[STEPS];
  knobs k = NONE;
  k.set_lr = 0.01;
  run(&warm, &k, a, lrs, NULL);
  run(&r, &NONE, b, NULL, NULL);
  ET_CHECK(et_same_bits(sh, a, b, "set_lr vs config lr"), "set_lr(0.01) vs config 0.01");
  for (int s = 0; s < STEPS; s++)
    ET_CHECK(lrs[s] == 0.01f, "step %d used lr %g, want 0.01", s, lrs[s]);
  /* back to the scheduler after two steps */
  run(&warm, &NONE, a, sched, NULL);
  et_model m;
  zinc_engine *e = open_with(&warm, &NONE, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < STEPS; s++) {
    ET_OK(zinc_engine_set_lr(e, s < 2 ? 0.01 : -1.0));
    micro_batch(&m, &warm, ((int64_t)s * N + me) * r.micro, -1);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    ET_CHECK(s < 2 ? info.lr == 0.01f : info.lr == (float)sched[s] && sched[s] != 0.01f,
             "step %d: lr %g (scheduler's %g)", s, info.lr, sched[s]);
  }
  ET_CHECK(zinc_engine_set_lr(e, NAN) == ZINC_ERR_INVALID, "set_lr(NaN) accepted");
  et_model_free(&m);
  zinc_engine_destroy(e);
  et_free_params(a);
  et_free_params(b);
}

/* Rank 1 freezes (then scales) a parameter the others do not. */
static void check_mismatch(int what) {
  et_run r = et_defaults();
  r.stage = 2;
  et_model m;
  zinc_engine *e = et_create(&r, NULL);
  if (et_world < 2) {
    zinc_engine_destroy(e);
    return;
  }
  et_register_run(&m, e, &r);
  if (et_rank == 1)
    ET_OK(what ? zinc_param_set_lr_scale(m.par[W1], 0.5) : zinc_param_set_frozen(m.par[W1], 1));
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_build(e, et_init, &m.ictx);
  const char *needles[] = {"mid.W1", "rank 1", what ? "lr scale" : "frozen", NULL};
  et_expect_everywhere(st, ZINC_ERR_INVALID, MPI_Wtime() - t0,
                       what ? "lr scale mismatch" : "frozen mismatch", needles, -1);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  float **prev = NULL;
  for (int stage = 0; stage <= 3; stage++) {
    if (!prev) {
      et_run r = et_defaults();
      r.shape.d[0] = 4;
      r.shape.d[1] = 64;
      prev = et_alloc_params(&r.shape);
      prev[0][0] = NAN;
    }
    check_stage(stage, prev);
  }
  check_offload(2, "cpu");
  check_offload(2, "nvme");
  check_offload(3, "cpu");
  check_offload(3, "nvme");
  et_free_params(prev);
  check_set_lr();
  check_mismatch(0);
  check_mismatch(1);
  if (et_failures)
    fprintf(stderr, "[rank %d] %d failure(s)\n", et_rank, et_failures);
  else if (et_rank == 0)
    printf("test_param_groups: ok (%d ranks)\n", et_world);
  return et_failures ? 1 : 0;
}
