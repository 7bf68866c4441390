/*
 * test_ckpt_methods.c — what a load gives back, for every optimizer.type
 * and every gradient-communication method, under mpirun at 1, 2 and 3
 * ranks: the engine's weights and moments load and reshard like every
 * optimizer's, whatever state a method keeps of its own, and a
 * weights-only load never zeroes weights.
 *
 * One row per optimizer (Adam, AdamW, Lamb, Lion, Adagrad, SGD, OneBitAdam,
 * ZeroOneAdam, OneBitLamb, the 1-bit family past its freeze so that the
 * ranks' copies differ between syncs) and per method (qgZ with and without
 * LoCo's residuals, communication_data_type, TernGrad, DGC with momentum
 * correction, PowerSGD, delayed averaging). S ranks (2 at 3 ranks or more,
 * else all) train 4 steps and save; before the save every rank reads the
 * full parameters and moments (zinc_param_get_full: each chunk its owner's,
 * which is what the shards hold) — the reference, read from the engine
 * before anything was written, not computed from its layout (with delayed
 * averaging, whose save first gives every rank rank 0's model, just
 * after the save). Then loads:
 *  - the same S ranks: the state read back is the reference bit for bit,
 *    and 2 more steps give the saving engine's own 2 more steps bit for
 *    bit (the method's state came back too);
 *  - 1 rank (fewer) and every rank (more, at 3 ranks): the state read
 *    back is the reference bit for bit, and 2 more steps move every
 *    parameter tensor and leave every value finite;
 *  - weights only at S ranks: the parameters are the reference bit for
 *    bit, the moments zero, the step count the engine's own; 2 steps move
 *    and stay finite.
 * The finding: 0/1 Adam and 1-bit LAMB registered the engine's master
 * and momentum as method state, so every load at another layout or of
 * the weights only zeroed them (ZINC_OK, every parameter 0; 1-bit LAMB
 * then NaN).
 */
#include <mpi.h>

#include "engine/engine_test.h"

#define SAVE_AT 4
#define MORE 2

typedef struct {
  const char *name;
  int stage;
  const char *optimizer;  /* the "optimizer" member; NULL: et_defaults' AdamW */
  const char *zero_extra; /* extra zero_optimization members ("k": v, ...,) */
  const char *extra;      /* extra top-level members */
  int slots;              /* bit 0: exp_avg kept, bit 1: exp_avg_sq kept */
  int save_syncs;         /* the save gives every rank rank 0's model first
                             (delayed averaging, docs/config.md): the
                             reference is read just after it */
} row;

#define ADAM_P "\"lr\": 0.01, \"betas\": [0.9, 0.999], \"eps\": 1e-8, \"weight_decay\": 0.01"
#define QGZ "\"zero_quantized_gradients\": true,"

static const row rows[] = {
    {"Adam", 0, "{\"type\": \"Adam\", \"params\": {" ADAM_P "}}", NULL, NULL, 3, 0},
    {"AdamW", 3, NULL, NULL, NULL, 3, 0},
    {"Lamb", 1, "{\"type\": \"Lamb\", \"params\": {" ADAM_P ", \"min_coeff\": 0.05, "
     "\"max_coeff\": 5.0}}", NULL, NULL, 3, 0},
    {"Lion", 2, "{\"type\": \"Lion\", \"params\": {\"lr\": 1e-3, \"betas\": [0.9, 0.99], "
     "\"weight_decay\": 0.1}}", NULL, NULL, 1, 0},
    {"Adagrad", 0, "{\"type\": \"Adagrad\", \"params\": {\"lr\": 0.01, \"eps\": 1e-8, "
     "\"weight_decay\": 0.01}}", NULL, NULL, 2, 0},
    {"SGD", 3, "{\"type\": \"SGD\", \"params\": {\"lr\": 0.05, \"momentum\": 0.9, "
     "\"weight_decay\": 0.01}}", NULL, "\"zero_allow_untested_optimizer\": true", 1, 0},
    {"OneBitAdam", 0, "{\"type\": \"OneBitAdam\", \"params\": {" ADAM_P ", \"freeze_step\": 2, "
     "\"cuda_aware\": false, \"comm_backend_name\": \"nccl\"}}", NULL, NULL, 3, 0},
    /* variance frozen after step 3, then local steps, a sync every 4th:
     * saved at step 4 the ranks' copies differ */
    {"ZeroOneAdam", 0, "{\"type\": \"ZeroOneAdam\", \"params\": {" ADAM_P ", "
     "\"var_freeze_step\": 2, \"var_update_scaler\": 1, \"local_step_scaler\": 1, "
     "\"local_step_clipper\": 4, \"cuda_aware\": false, \"comm_backend_name\": \"nccl\"}}", NULL,
     NULL, 3, 0},
    {"OneBitLamb", 0, "{\"type\": \"OneBitLamb\", \"params\": {\"lr\": 0.01, \"betas\": "
     "[0.9, 0.999], \"eps\": 1e-8, \"weight_decay\": 0.01, \"max_coeff\": 10.0, \"min_coeff\": "
     "0.01, \"freeze_step\": 2, \"coeff_beta\": 0.9, \"factor_max\": 4.0, \"factor_min\": 0.5, "
     "\"factor_threshold\": 0.1}}", NULL, NULL, 3, 0},
    {"qgZ", 3, NULL, QGZ, "\"zinc\": {\"compression\": {\"scope\": \"all\", \"block_size\": 64}}",
     3, 0},
    {"qgZ with LoCo residuals", 2, NULL, QGZ " \"zeropp_loco_param\": {\"err_beta\": 0.8, "
     "\"reset_T\": 1024},", "\"zinc\": {\"compression\": {\"scope\": \"all\", \"block_size\": 64}}",
     3, 0},
    {"communication_data_type bf16", 1, NULL, NULL, "\"communication_data_type\": \"bf16\"", 3, 0},
    {"TernGrad", 1, NULL, QGZ, "\"zinc\": {\"compression\": {\"scope\": \"all\", "
     "\"gradient_codec\": \"terngrad\", \"block_size\": 64}}", 3, 0},
    {"DGC momentum correction", 1, "{\"type\": \"SGD\", \"params\": {\"lr\": 0.05, \"momentum\": "
     "0.9, \"weight_decay\": 0}}", QGZ, "\"zero_allow_untested_optimizer\": true, \"zinc\": "
     "{\"compression\": {\"scope\": \"all\", \"gradient_codec\": \"dgc\", \"block_size\": 256, "
     "\"dgc\": {\"density\": 0.1, \"momentum_correction\": true}}}", 0, 0},
    {"PowerSGD", 0, NULL, NULL, "\"zinc\": {\"compression\": {\"gradient_codec\": \"powersgd\", "
     "\"powersgd\": {\"matrix_approximation_rank\": 1, \"start_powerSGD_iter\": 2}}}", 3, 0},
    {"delayed averaging", 0, NULL, NULL, "\"zinc\": {\"compression\": {\"delayed_averaging\": "
     "{\"delay\": 1}}}", 3, 1},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                         ZINC_STATE_EXP_AVG_SQ};
static const char *kind_names[3] = {"param", "exp_avg", "exp_avg_sq"};
static char root[512];

static et_run run_of(const row *w) {
  et_run r = et_defaults();
  r.stage = w->stage;
  r.zero_extra = w->zero_extra;
  r.extra = w->extra;
  return r;
}

/* An engine of row w over the first `ranks` ranks of the world (NULL on
 * the others), the tiny model built. */
static zinc_engine *open_row(const row *w, int ranks, MPI_Comm *sub, et_model *m) {
  MPI_Comm_split(MPI_COMM_WORLD, et_rank < ranks ? 0 : MPI_UNDEFINED, et_rank, sub);
  if (*sub == MPI_COMM_NULL)
    return NULL;
  et_run r = run_of(w);
  char *json = et_config_json(&r);
  if (w->optimizer) { /* in place of et_config_json's AdamW */
    const char *dflt = "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.999],"
                       " \"eps\": 1e-8, \"weight_decay\": 0.01}}";
    char *at = strstr(json, dflt);
    if (!at) {
      fprintf(stderr, "the config has no default optimizer to replace\n");
      exit(1);
    }
    char *out = malloc(strlen(json) + strlen(w->optimizer) + 1);
    memcpy(out, json, (size_t)(at - json));
    strcpy(out + (at - json), w->optimizer);
    strcat(out, at + strlen(dflt));
    free(json);
    json = out;
  }
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_parse(json, &cfg);
  if (st != ZINC_OK) {
    fprintf(stderr, "[rank %d] %s: the config is refused: %s\n%s\n", et_rank, w->name,
            zinc_last_error(), json);
    exit(1);
  }
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.mpi_comm = sub;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  ET_OK(et_build(m, e, &r));
  return e;
}

typedef struct {
  float **s[3]; /* param, exp_avg, exp_avg_sq (NULL: not kept) */
} state;

static void state_alloc(const row *w, state *s) {
  static const tm_shape sh = {{TM_D0, TM_D1, TM_D2, TM_D3}, ZINC_F32};
  for (int k = 0; k < 3; k++)
    s->s[k] = k == 0 || (w->slots & k) ? et_alloc_params(&sh) : NULL;
}

static void state_free(state *s) {
  for (int k = 0; k < 3; k++)
    if (s->s[k])
      et_free_params(s->s[k]);
}

static void capture(et_model *m, state *s) {
  for (int k = 0; k < 3; k++)
    for (int i = 0; s->s[k] && i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(m->e, m->par[i], kinds[k], s->s[k][i]));
}

/* World rank 0's copy to every rank. */
static void state_bcast(state *s) {
  for (int k = 0; k < 3; k++)
    for (int i = 0; s->s[k] && i < TM_NPARAM; i++)
      MPI_Bcast(s->s[k][i], (int)tm_numel(&(tm_shape){{TM_D0, TM_D1, TM_D2, TM_D3}, ZINC_F32}, i),
                MPI_FLOAT, 0, MPI_COMM_WORLD);
}

/* got == want bit for bit (want NULL: every value +0.0). */
static int same(const char *what, const char *kind, int i, const float *got, const float *want,
                int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    float w0 = want ? want[j] : 0.0f;
    if (memcmp(&got[j], &w0, 4) != 0) {
      ET_CHECK(0, "%s: %s of %s [%lld] is %.9g, want %.9g (bit for bit)", what, kind,
               tm_names[i], (long long)j, got[j], w0);
      return 0;
    }
  }
  return 1;
}

static int same_state(const char *what, const state *got, const state *want, int zero_moments) {
  const tm_shape sh = {{TM_D0, TM_D1, TM_D2, TM_D3}, ZINC_F32};
  int ok = 1;
  for (int k = 0; k < 3; k++)
    for (int i = 0; got->s[k] && i < TM_NPARAM; i++)
      ok &= same(what, kind_names[k], i, got->s[k][i],
                 k > 0 && zero_moments ? NULL : want->s[k][i], tm_numel(&sh, i));
  return ok;
}

/* After the load: MORE steps move every parameter tensor and leave every
 * value finite. */
static void trains_on(const char *what, et_model *m, const et_run *r, const state *loaded) {
  const tm_shape *sh = &r->shape;
  zinc_status st = et_steps(m, r, SAVE_AT, SAVE_AT + MORE);
  ET_CHECK(st == ZINC_OK, "%s: the steps after the load: %s: %s", what, zinc_status_name(st),
           zinc_last_error());
  if (st != ZINC_OK)
    return;
  float **now = et_alloc_params(sh);
  et_get_params(m, now);
  for (int i = 0; i < TM_NPARAM; i++) {
    int moved = 0, finite = 1;
    for (int64_t j = 0; j < tm_numel(sh, i); j++) {
      moved |= now[i][j] != loaded->s[0][i][j];
      finite &= isfinite(now[i][j]);
    }
    ET_CHECK(finite, "%s: %s is not finite after %d steps", what, tm_names[i], MORE);
    ET_CHECK(moved, "%s: %s did not move in %d steps after the load", what, tm_names[i], MORE);
  }
  et_free_params(now);
}

typedef struct {
  int ranks, weights_only;
} load_case;

static void test_row(const row *w) {
  int S = et_world >= 3 ? 2 : et_world;
  char dir[700];
  snprintf(dir, sizeof dir, "%s/r%d", root, (int)(w - rows));
  et_run r = run_of(w);
  state saved, straight;
  state_alloc(w, &saved);
  state_alloc(w, &straight);
  MPI_Comm sub;
  et_model m;
  zinc_engine *e = open_row(w, S, &sub, &m);
  if (e) {
    ET_OK(et_steps(&m, &r, 0, SAVE_AT));
    if (!w->save_syncs)
      capture(&m, &saved); /* the reference, before anything is written */
    ET_OK(zinc_save_checkpoint(e, dir, "t4"));
    if (w->save_syncs)
      capture(&m, &saved);
    ET_OK(et_steps(&m, &r, SAVE_AT, SAVE_AT + MORE));
    capture(&m, &straight);
    et_model_free(&m);
    zinc_engine_destroy(e);
    MPI_Comm_free(&sub);
  }
  state_bcast(&saved);
  state_bcast(&straight);
  load_case loads[4];
  int nloads = 0;
  loads[nloads++] = (load_case){S, 0};
  if (S > 1)
    loads[nloads++] = (load_case){1, 0};
  if (et_world > S)
    loads[nloads++] = (load_case){et_world, 0};
  loads[nloads++] = (load_case){S, 1};
  for (int k = 0; k < nloads; k++) {
    int L = loads[k].ranks, wo = loads[k].weights_only;
    char what[200];
    snprintf(what, sizeof what, "%s, stage %d: saved by %d rank%s, %sloaded by %d", w->name,
             w->stage, S, S > 1 ? "s" : "", wo ? "weights only " : "", L);
    e = open_row(w, L, &sub, &m);
    if (e) {
      ET_OK(zinc_load_checkpoint_ex(e, dir, "t4", wo ? ZINC_LOAD_WEIGHTS_ONLY : 0));
      ET_CHECK(zinc_step_count(e) == (wo ? 0 : SAVE_AT), "%s: step count %lld", what,
               (long long)zinc_step_count(e));
      state got;
      state_alloc(w, &got);
      capture(&m, &got);
      same_state(what, &got, &saved, wo);
      if (L == S && !wo) { /* a resume: the saver's own next steps */
        ET_OK(et_steps(&m, &r, SAVE_AT, SAVE_AT + MORE));
        capture(&m, &got);
        char w2[240];
        snprintf(w2, sizeof w2, "%s, %d steps on", what, MORE);
        same_state(w2, &got, &straight, 0);
      } else {
        trains_on(what, &m, &r, &got);
      }
      state_free(&got);
      et_model_free(&m);
      zinc_engine_destroy(e);
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  state_free(&saved);
  state_free(&straight);
  if (et_rank == 0)
    printf("%-32s stage %d: %d load%s checked\n", w->name, w->stage, nloads,
           nloads > 1 ? "s" : "");
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/ckpt_methods_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < NROWS; k++)
    test_row(&rows[k]);
  if (et_failures == 0 && et_rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
      fprintf(stderr, "command failed: %s\n", cmd);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "method checkpoint tests FAILED\n"
               : "method checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
