/*
 * test_dgc_momentum.c — DGC's momentum correction and momentum factor
 * masking (zinc.compression.dgc.momentum_correction, engine/reduce/dgc.c), under
 * mpirun at 2 and 4 ranks, zinc.compression.scope "all":
 *
 *  - reference: 12 SGD steps (momentum 0.9, lr 0.05, no decay, no
 *    clipping) of the tiny model at density 1% (k = 3 of every 256),
 *    stages 1, 2 and 3, against a reference written here: every rank's local
 *    gradient (tm_forward_backward on its own samples), per rank and
 *    element u <- m u + g, x = v + u (fp32, as the algorithm keeps them),
 *    top-k per block of 256 of every slice (the engine's units give the
 *    slices; ties lowest index first), v <- x with the kept ones 0,
 *    u <- u with the kept ones 0; the owner's sum over ranks and plain
 *    SGD p <- p - lr sum / N in double (stage 3 too). Within 1e-6 relative L2 (measured
 *    2.6e-8 at 2 ranks); with the
 *    masking switched off (ZINC_TEST_DGC_NO_MASK) farther than 10x that.
 *  - local clipping (stage 1): the same with each rank's local gradient
 *    clipped to gradient_clipping / sqrt(N) first; the global clipping
 *    instead differs.
 *  - resume: 3 steps, save, 3 more equals load + the same 3, bit for bit
 *    (velocities and the own residuals in the method state); the velocity
 *    zeroed after the load gives other bits.
 *  - memory: the engine's three buffers and the estimator's device
 *    gradient bytes grow by N + 1 fp32 slices per unit plus the own TOPK
 *    slices.
 *  - refusals: Adam, SGD without momentum, nesterov, the residual off,
 *    scope inter_node on one node, stage 2 with accumulation; local
 *    clipping at stage 2, without gradient_clipping, without momentum
 *    correction: ZINC_ERR_CONFIG.
 *  - nodes (ZINC_COMM_NODE_SIZE): scope inter_node with one rank per node
 *    equals scope all bit for bit (2 ranks); two ranks on a node refused
 *    (4 ranks).
 */
#include <math.h>
#include <mpi.h>

#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine_test.h"

static char root[400];

#define QGZ "\"zero_quantized_gradients\": true,"
#define MC(scope, residual)                                                                   \
  "\"zinc\": {\"compression\": {\"scope\": \"" scope "\", \"gradient_codec\": \"dgc\", "        \
  "\"block_size\": 256, \"dgc\": {\"density\": 0.01, \"residual\": " residual ", "              \
  "\"momentum_correction\": true}}}"

#define LR 0.05
#define MOM 0.9
#define BLOCK 256
#define KEEP 3 /* ceil(0.01 x 256) */

static et_optim sgd(void) { return (et_optim){.type = "SGD", .lr = LR, .momentum = MOM}; }

static et_run mc_run(int stage, int steps) {
  et_run r = et_defaults();
  r.stage = stage;
  r.steps = steps;
  r.clip = 0;
  r.zero_extra = QGZ;
  r.extra = MC("all", "true");
  return r;
}

/* Every trained unit's element -> (parameter, index) map, from the layout
 * of engine e (the reference's slices are the engine's): map[ui][pos] =
 * i << 32 | j, or -1 for padding. */
static int64_t **slice_map(zinc_engine *e, et_model *m, const tm_shape *sh) {
  int64_t **map = calloc((size_t)e->ntrain_units, sizeof *map);
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    const zinc_unit *u = &e->units[ui];
    map[ui] = malloc((size_t)u->numel * sizeof **map);
    for (int64_t q = 0; q < u->numel; q++) {
      int64_t pos = u->seg_offset + q;
      map[ui][q] = -1;
      for (int i = 0; i < TM_NPARAM; i++) {
        const zinc_param *p = m->par[i];
        if (p->module == e->modules[u->module] && p->segment == u->segment &&
            pos >= p->seg_offset && pos < p->seg_offset + tm_numel(sh, i))
          map[ui][q] = (int64_t)i << 32 | (pos - p->seg_offset);
      }
    }
  }
  return map;
}

/* The reference of DGC with momentum correction over `world` ranks, run
 * r's steps; map/nunits/chunk: the engine's slices. */
static int ref_clipped; /* local gradients the reference clipped */

static void reference(const et_run *r, int world, int64_t **map, int nunits,
                      const int64_t *chunk, int mask, double clip, float **final) {
  const tm_shape *sh = &r->shape;
  float *P[TM_NPARAM], *Gl[TM_NPARAM], *U[8][TM_NPARAM], *V[8][TM_NPARAM], *L[8][TM_NPARAM];
  double *Pd[TM_NPARAM], *S[TM_NPARAM];
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(sh, i);
    P[i] = calloc((size_t)n, 4);
    Gl[i] = calloc((size_t)n, 4);
    Pd[i] = calloc((size_t)n, 8);
    S[i] = calloc((size_t)n, 8);
    for (int k = 0; k < world; k++) {
      U[k][i] = calloc((size_t)n, 4);
      V[k][i] = calloc((size_t)n, 4);
      L[k][i] = calloc((size_t)n, 4);
    }
    for (int64_t j = 0; j < n; j++)
      Pd[i][j] = P[i][j] = tm_init_value(sh, i, j);
  }
  const float m = (float)MOM;
  for (int s = 0; s < r->steps; s++) {
    for (int k = 0; k < world; k++) { /* local gradients */
      for (int i = 0; i < TM_NPARAM; i++)
        memset(L[k][i], 0, (size_t)tm_numel(sh, i) * 4);
      tm_forward_backward(sh, P, L[k], ((int64_t)s * world + k) * r->micro, r->micro, 1.0f);
      if (clip > 0) { /* local clipping to clip / sqrt(N) */
        double sq = 0, thr = clip / sqrt((double)world);
        for (int i = 0; i < TM_NPARAM; i++)
          for (int64_t j = 0; j < tm_numel(sh, i); j++)
            sq += (double)L[k][i][j] * L[k][i][j];
        if (sqrt(sq) > thr) {
          float c = (float)(thr / (sqrt(sq) + 1e-6));
          ref_clipped++;
          for (int i = 0; i < TM_NPARAM; i++)
            for (int64_t j = 0; j < tm_numel(sh, i); j++)
              L[k][i][j] = L[k][i][j] * c;
        }
      }
    }
    for (int i = 0; i < TM_NPARAM; i++)
      memset(S[i], 0, (size_t)tm_numel(sh, i) * 8);
    for (int k = 0; k < world; k++)
      for (int ui = 0; ui < nunits; ui++)
        for (int64_t b0 = 0; b0 < (int64_t)world * chunk[ui];
             b0 = b0 + BLOCK < (b0 / chunk[ui] + 1) * chunk[ui] ? b0 + BLOCK
                                                               : (b0 / chunk[ui] + 1) * chunk[ui]) {
          /* a block of a slice: [b0, end), the blocks restarting at every slice */
          int64_t slice_end = (b0 / chunk[ui] + 1) * chunk[ui];
          int64_t end = b0 + BLOCK < slice_end ? b0 + BLOCK : slice_end;
          float x[BLOCK];
          int kept[BLOCK];
          for (int64_t q = b0; q < end; q++) {
            int64_t t = map[ui][q];
            x[q - b0] = 0;
            kept[q - b0] = 0;
            if (t < 0)
              continue;
            int i = (int)(t >> 32);
            int64_t j = t & 0xffffffff;
            U[k][i][j] = m * U[k][i][j];
            U[k][i][j] = U[k][i][j] + L[k][i][j];
            x[q - b0] = V[k][i][j] + U[k][i][j];
          }
          int len = (int)(end - b0), want = KEEP < len ? KEEP : len;
          for (int c = 0; c < want; c++) { /* the largest |x| not yet kept, lowest index first */
            int best = -1;
            for (int q = 0; q < len; q++)
              if (!kept[q] && (best < 0 || fabsf(x[q]) > fabsf(x[best])))
                best = q;
            kept[best] = 1;
          }
          for (int64_t q = b0; q < end; q++) {
            int64_t t = map[ui][q];
            if (t < 0)
              continue;
            int i = (int)(t >> 32);
            int64_t j = t & 0xffffffff;
            if (kept[q - b0]) {
              S[i][j] += x[q - b0];
              V[k][i][j] = 0;
              if (mask)
                U[k][i][j] = 0;
            } else {
              V[k][i][j] = x[q - b0];
            }
          }
        }
    for (int i = 0; i < TM_NPARAM; i++)
      for (int64_t j = 0; j < tm_numel(sh, i); j++) {
        Pd[i][j] -= LR * S[i][j] / world;
        P[i][j] = (float)Pd[i][j];
      }
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    memcpy(final[i], P[i], (size_t)tm_numel(sh, i) * 4);
    free(P[i]);
    free(Gl[i]);
    free(Pd[i]);
    free(S[i]);
    for (int k = 0; k < world; k++) {
      free(U[k][i]);
      free(V[k][i]);
      free(L[k][i]);
    }
  }
}

static float **train_engine(et_run r, int no_mask, int64_t ***map, int *nunits, int64_t **chunk) {
  if (no_mask)
    setenv("ZINC_TEST_DGC_NO_MASK", "1", 1);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  unsetenv("ZINC_TEST_DGC_NO_MASK");
  int on = 0; /* momentum correction registers its velocities (mstate.h) */
  for (int k = 0; k < e->nmstate; k++)
    on |= strcmp(e->mstate[k].name, "dgc.velocity") == 0;
  ET_CHECK(on, "momentum correction is not on");
  ET_CHECK(e->optim.momentum == 0.0, "SGD's momentum is %g, want 0 with momentum correction",
           e->optim.momentum);
  if (map) {
    *map = slice_map(e, &m, &r.shape);
    *nunits = e->ntrain_units;
    *chunk = calloc((size_t)e->ntrain_units, sizeof **chunk);
    for (int ui = 0; ui < e->ntrain_units; ui++)
      (*chunk)[ui] = e->units[ui].chunk;
  }
  ET_OK(et_steps(&m, &r, 0, r.steps));
  float **p = et_alloc_params(&r.shape);
  et_get_params(&m, p);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return p;
}

static void test_reference(int stage) {
  et_optim o = sgd();
  et_run r = mc_run(stage, 12);
  r.optim = &o;
  int64_t **map, *chunk;
  int nunits;
  float **got = train_engine(r, 0, &map, &nunits, &chunk);
  float **broken = train_engine(r, 1, NULL, NULL, NULL);
  float **want = et_alloc_params(&r.shape), **unmasked = et_alloc_params(&r.shape);
  reference(&r, et_world, map, nunits, chunk, 1, 0, want);
  reference(&r, et_world, map, nunits, chunk, 0, 0, unmasked);
  double d = et_rel_l2(&r.shape, got, want), db = et_rel_l2(&r.shape, broken, want),
         dr = et_rel_l2(&r.shape, unmasked, want), dbr = et_rel_l2(&r.shape, broken, unmasked);
  if (et_rank == 0)
    printf("stage %d, %d ranks: DGC momentum correction vs reference: relative L2 %.3g; "
           "unmasked engine vs reference %.3g (unmasked reference vs reference %.3g, unmasked "
           "engine vs unmasked reference %.3g)\n", stage, et_world, d, db, dr, dbr);
  ET_CHECK(d <= 1e-6, "stage %d: momentum correction differs from the reference by %.3g", stage,
           d);
  ET_CHECK(db > 1e-3, "stage %d: without the masking the engine still matches the reference "
           "(%.3g): the test cannot tell the masking", stage, db);
  ET_CHECK(dbr <= 1e-6, "stage %d: the unmasked engine differs from the unmasked reference by "
           "%.3g", stage, dbr);
  for (int ui = 0; ui < nunits; ui++)
    free(map[ui]);
  free(map);
  free(chunk);
  et_free_params(got);
  et_free_params(broken);
  et_free_params(want);
  et_free_params(unmasked);
}

/* Local clipping (stage 1, gradient_clipping 0.3): each rank's local
 * gradient clipped to 0.3 / sqrt(N) before it enters the velocity; the
 * global clipping off. Against the reference with that clipping, and
 * (the mutation) the engine without local clipping must differ. */
#define MC_CLIP                                                                               \
  "\"zinc\": {\"compression\": {\"scope\": \"all\", \"gradient_codec\": \"dgc\", "              \
  "\"block_size\": 256, \"dgc\": {\"density\": 0.01, \"momentum_correction\": true, "            \
  "\"local_clipping\": true}}}"

static void test_local_clipping(void) {
  et_optim o = sgd();
  et_run r = mc_run(1, 12);
  r.optim = &o;
  r.clip = 0.3;
  r.extra = MC_CLIP;
  int64_t **map, *chunk;
  int nunits;
  float **got = train_engine(r, 0, &map, &nunits, &chunk);
  r.extra = MC("all", "true"); /* no local clipping: the global one */
  float **global = train_engine(r, 0, NULL, NULL, NULL);
  float **want = et_alloc_params(&r.shape);
  ref_clipped = 0;
  reference(&r, et_world, map, nunits, chunk, 1, 0.3, want);
  double d = et_rel_l2(&r.shape, got, want), dg = et_rel_l2(&r.shape, global, want);
  if (et_rank == 0)
    printf("local clipping, %d ranks: relative L2 %.3g to the reference (%d of %d local "
           "gradients clipped); the global clipping instead %.3g\n", et_world, d, ref_clipped,
           et_world * r.steps, dg);
  ET_CHECK(ref_clipped > 0, "the reference clipped no local gradient: raise the test's load");
  ET_CHECK(d <= 1e-6, "local clipping differs from the reference by %.3g", d);
  ET_CHECK(dg > 1e-3, "the global clipping matches the local one's reference (%.3g)", dg);
  for (int ui = 0; ui < nunits; ui++)
    free(map[ui]);
  free(map);
  free(chunk);
  et_free_params(got);
  et_free_params(global);
  et_free_params(want);
}

static void test_resume(int stage) {
  et_optim o = sgd();
  et_run r = mc_run(stage, 6);
  r.optim = &o;
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck_stage%d", root, stage);
  float **a = et_alloc_params(&r.shape), **b = et_alloc_params(&r.shape),
        **c = et_alloc_params(&r.shape);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 3));
  ET_OK(zinc_save_checkpoint(e, ck, "mid"));
  ET_OK(et_steps(&m, &r, 3, 6));
  et_get_params(&m, a);
  et_model_free(&m);
  zinc_engine_destroy(e);
  for (int zero = 0; zero < 2; zero++) {
    e = et_open(&r, NULL, &m);
    ET_OK(zinc_load_checkpoint(e, ck, "mid"));
    if (zero) {
      int found = 0; /* the velocities, by their method-state name */
      for (int k = 0; k < e->nmstate; k++)
        if (strcmp(e->mstate[k].name, "dgc.velocity") == 0) {
          memset(e->mstate[k].ptr, 0, e->mstate[k].bytes);
          found = 1;
        }
      ET_CHECK(found, "no method state named dgc.velocity");
    }
    ET_OK(et_steps(&m, &r, 3, 6));
    et_get_params(&m, zero ? c : b);
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  char what[96];
  snprintf(what, sizeof what, "stage %d resumed with DGC's velocities", stage);
  ET_CHECK(et_same_bits(&r.shape, b, a, what), "%s differs from the unbroken run", what);
  int same = 1;
  for (int i = 0; i < TM_NPARAM; i++)
    same &= memcmp(c[i], a[i], (size_t)tm_numel(&r.shape, i) * 4) == 0;
  ET_CHECK(!same, "stage %d: resuming with the velocities zeroed gives the same bits: the "
           "test cannot tell whether they were restored", stage);
  et_free_params(a);
  et_free_params(b);
  et_free_params(c);
}

static uint64_t estimate_grads(const et_run *r) {
  zinc_est_param p[TM_NPARAM];
  memset(p, 0, sizeof p);
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = ZINC_F32;
    p[i].ndim = 1;
    p[i].shape[0] = tm_numel(&r->shape, i);
  }
  char *json = et_config_json(r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_estimate est;
  ET_OK(zinc_estimate_model(&cfg->s, et_world, 0, p, TM_NPARAM, &est));
  zinc_config_free(cfg);
  return est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_GRADS];
}

/* The velocities (N slices per unit), the own residuals (one) and the own
 * TOPK slices (k = 3 of 256: 6 bytes per kept element, padded to 16). */
static void test_memory(int stage) {
  et_optim o = sgd();
  et_run mc = mc_run(stage, 1), plain = mc_run(stage, 1);
  mc.optim = plain.optim = &o;
  plain.extra = "\"zinc\": {\"compression\": {\"scope\": \"all\", \"gradient_codec\": \"dgc\", "
                "\"block_size\": 256, \"dgc\": {\"density\": 0.01}}}";
  uint64_t want = 0;
  et_model m;
  zinc_engine *e = et_open(&mc, NULL, &m);
  uint64_t state = 0, want_state = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    int64_t n = e->units[ui].chunk, kept = 0;
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK)
      kept += n - b0 < KEEP ? n - b0 : KEEP;
    want += (uint64_t)(et_world + 1) * 4 * (uint64_t)n + (uint64_t)((6 * kept + 15) / 16 * 16);
    want_state += (uint64_t)(et_world + 1) * 4 * (uint64_t)n;
  }
  for (int k = 0; k < e->nmstate; k++) /* the engine's velocities and own residuals */
    if (strncmp(e->mstate[k].name, "dgc.", 4) == 0)
      state += e->mstate[k].bytes;
  ET_CHECK(state == want_state, "stage %d: the engine's DGC method state is %llu bytes, want "
           "%llu ((N + 1) fp32 slices per unit)", stage, (unsigned long long)state,
           (unsigned long long)want_state);
  
  et_model_free(&m);
  zinc_engine_destroy(e);
  e = et_open(&plain, NULL, &m);
  
  et_model_free(&m);
  zinc_engine_destroy(e);
  uint64_t with = estimate_grads(&mc), without = estimate_grads(&plain);
  if (et_rank == 0)
    printf("stage %d: momentum correction adds %llu bytes per rank (estimator %llu)\n", stage,
           (unsigned long long)want, (unsigned long long)(with - without));
  ET_CHECK(with - without == want, "stage %d: the estimator's device gradient bytes grew by "
           "%llu with momentum correction, want %llu", stage,
           (unsigned long long)(with - without), (unsigned long long)want);
}

static void expect_refused(const char *what, et_run r, zinc_status want) {
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  free(json);
  zinc_engine *e = NULL;
  if (st == ZINC_OK) {
    zinc_options opt = ZINC_OPTIONS_INIT;
    opt.device = ZINC_DEVICE_CPU;
    opt.threads = 1;
    st = zinc_engine_create(cfg, &opt, &e);
    zinc_config_free(cfg);
  }
  if (st == ZINC_OK) {
    et_model m;
    st = et_build(&m, e, &r);
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  ET_CHECK(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want,
           zinc_last_error());
  if (et_rank == 0 && st == want)
    printf("refused, %s: %s\n", what, zinc_last_error());
}

static void test_refusals(void) {
  et_optim adam = et_adamw_default(), plain = {.type = "SGD", .lr = LR},
           nest = {.type = "SGD", .lr = LR, .momentum = MOM, .nesterov = 1}, o = sgd();
  et_run r = mc_run(1, 1);
  r.optim = &adam;
  expect_refused("AdamW", r, ZINC_ERR_CONFIG);
  r.optim = &plain;
  expect_refused("SGD without momentum", r, ZINC_ERR_CONFIG);
  r.optim = &nest;
  expect_refused("SGD with nesterov", r, ZINC_ERR_CONFIG);
  r.optim = &o;
  r.extra = MC("all", "false");
  expect_refused("the residual dropped", r, ZINC_ERR_CONFIG);
  r.extra = MC("inter_node", "true");
  expect_refused("scope inter_node on one node", r, ZINC_ERR_CONFIG);
  r = mc_run(2, 1);
  r.optim = &o;
  r.gas = 2;
  expect_refused("stage 2 with gradient_accumulation_steps 2", r, ZINC_ERR_CONFIG);
  r.gas = 1;
  r.clip = 1.0;
  r.extra = MC_CLIP;
  expect_refused("local clipping at stage 2", r, ZINC_ERR_CONFIG);
  r.stage = 1;
  r.clip = 0;
  expect_refused("local clipping without gradient_clipping", r, ZINC_ERR_CONFIG);
  r.clip = 1.0;
  r.extra = "\"zinc\": {\"compression\": {\"scope\": \"all\", \"gradient_codec\": \"dgc\", "
            "\"dgc\": {\"local_clipping\": true}}}";
  expect_refused("local clipping without momentum correction", r, ZINC_ERR_CONFIG);
}

/* Scope inter_node over emulated nodes (ZINC_COMM_NODE_SIZE): one rank
 * per node (every pair on top-k) trains as scope "all" does, bit for bit;
 * two ranks per node is refused. */
static void test_nodes(void) {
  et_optim o = sgd();
  et_run r = mc_run(1, 4);
  r.optim = &o;
  if (et_world == 2) {
    float **all = train_engine(r, 0, NULL, NULL, NULL);
    setenv("ZINC_COMM_NODE_SIZE", "1", 1);
    r.extra = MC("inter_node", "true");
    float **inter = train_engine(r, 0, NULL, NULL, NULL);
    unsetenv("ZINC_COMM_NODE_SIZE");
    ET_CHECK(et_same_bits(&r.shape, inter, all, "scope inter_node, one rank per node"),
             "scope inter_node with one rank per node differs from scope all");
    et_free_params(all);
    et_free_params(inter);
  } else if (et_world == 4) {
    setenv("ZINC_COMM_NODE_SIZE", "2", 1);
    r.extra = MC("inter_node", "true");
    expect_refused("scope inter_node, two nodes of 2 ranks", r, ZINC_ERR_CONFIG);
    unsetenv("ZINC_COMM_NODE_SIZE");
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2 || et_world > 8) {
    if (et_rank == 0)
      printf("SKIPPED: DGC's momentum correction needs 2 to 8 ranks\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(root, sizeof root, "%s/dgc_momentum_test_np%d", et_binary_dir(), et_world);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_reference(1);
  test_reference(2);
  test_reference(3);
  test_local_clipping();
  test_resume(1);
  test_resume(2);
  test_memory(1);
  test_memory(3);
  test_refusals();
  test_nodes();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf("%s\n", bad ? "FAIL" : "PASS");
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
