/*
 * test_ckpt_frozen.c — checkpoints of a model with a frozen parameter
 * (in.W0, the tiny model's "embedding"), under mpirun. Clipping is off, so
 * that nothing couples W0 to the other parameters but the forward pass.
 *  - resume: 6 steps straight vs 3 steps, save, a fresh engine loads and
 *    runs 3 more: every state bitwise identical, W0 bitwise its initial
 *    value and its exp_avg/exp_avg_sq zero, at stages 0, 1 and 3;
 *  - resharding: the stage-3 save loaded by rank 0 alone at stage 1 (with
 *    several ranks) and by every rank at stage 2: every state identical to
 *    the saved one; training on leaves W0 bitwise unchanged;
 *  - frozen when saved, trainable when loaded (DeepSpeed's module weights
 *    and optimizer state loaded separately: the parameter takes the saved
 *    value and starts with zero moments): the same bits as a run saved with
 *    W0 at lr scale 0 (W0 unchanged, its moments kept), loaded, W0's moments
 *    set to zero by zinc_param_set_full, trained on;
 *  - trainable when saved, frozen when loaded: W0 keeps the saved value
 *    bitwise (its saved moments are dropped) and the other parameters equal
 *    those of the same load into an engine with W0 at lr scale 0.
 */
#include <mpi.h>

#include "engine/engine_test.h"

#define W0 0

static char root[512];

enum { TRAINED, FROZEN, LR0 }; /* what W0 is in an engine */
static const char *mode_names[] = {"trainable", "frozen", "lr scale 0"};

typedef struct {
  float **s[3]; /* param, exp_avg, exp_avg_sq */
} state;

static const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                         ZINC_STATE_EXP_AVG_SQ};
static const char *kind_names[3] = {"param", "exp_avg", "exp_avg_sq"};

static zinc_engine *open_model(const et_run *r, int mode, void *comm, et_model *m) {
  zinc_engine *e = et_create(r, comm);
  et_register_run(m, e, r);
  if (mode == FROZEN)
    et_freeze(m, W0);
  else if (mode == LR0)
    ET_OK(zinc_param_set_lr_scale(m->par[W0], 0.0));
  ET_OK(zinc_engine_build(e, et_init, &m->ictx));
  return e;
}

static void capture(et_model *m, const et_run *r, state *out) {
  for (int k = 0; k < 3; k++) {
    out->s[k] = et_alloc_params(&r->shape);
    for (int i = 0; i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(m->e, m->par[i], kinds[k], out->s[k][i]));
  }
}

static void state_free(state *s) {
  for (int k = 0; k < 3; k++)
    et_free_params(s->s[k]);
}

static int same_state(const et_run *r, state *a, state *b, const char *what) {
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    char w[240];
    snprintf(w, sizeof w, "%s (%s)", what, kind_names[k]);
    ok &= et_same_bits(&r->shape, a->s[k], b->s[k], w);
  }
  return ok;
}

static int64_t w0_numel(const et_run *r) { return tm_numel(&r->shape, W0); }

/* W0's value is `want` bitwise; with zero_moments its moments are 0. */
static void check_w0(const et_run *r, state *s, const float *want, int zero_moments,
                     const char *what) {
  int64_t n = w0_numel(r);
  ET_CHECK(memcmp(s->s[0][W0], want, (size_t)n * 4) == 0, "%s: in.W0 changed", what);
  for (int k = 1; k < 3 && zero_moments; k++) {
    int64_t bad = -1;
    for (int64_t j = 0; j < n && bad < 0; j++)
      if (s->s[k][W0][j] != 0.0f)
        bad = j;
    ET_CHECK(bad < 0, "%s: in.W0's %s[%lld] is %g, want 0", what, kind_names[k],
             (long long)bad, bad < 0 ? 0.0 : s->s[k][W0][bad]);
  }
}

static et_run run_at(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  r.clip = 0;
  return r;
}

/* Train `steps` steps in an engine of `mode`, optionally after loading
 * dir/tag and zeroing W0's moments; the final state into out; save as
 * dir/save_tag when save_tag is not NULL. */
static void train(const et_run *r, int mode, const char *dir, const char *tag, int zero_w0,
                  int from, int to, const char *save_tag, state *out) {
  et_model m;
  zinc_engine *e = open_model(r, mode, NULL, &m);
  if (tag)
    ET_OK(zinc_load_checkpoint(e, dir, tag));
  if (zero_w0) {
    float *z = calloc((size_t)w0_numel(r), 4);
    ET_OK(zinc_param_set_full(e, m.par[W0], ZINC_STATE_EXP_AVG, z));
    ET_OK(zinc_param_set_full(e, m.par[W0], ZINC_STATE_EXP_AVG_SQ, z));
    free(z);
  }
  ET_OK(et_steps(&m, r, from, to));
  if (save_tag)
    ET_OK(zinc_save_checkpoint(e, dir, save_tag));
  capture(&m, r, out);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static float *initial_w0(const et_run *r) {
  float *v = malloc((size_t)w0_numel(r) * 4);
  for (int64_t j = 0; j < w0_numel(r); j++)
    v[j] = tm_init_value(&r->shape, W0, j);
  return v;
}

static void test_resume(int stage) {
  et_run r = run_at(stage);
  char dir[700], what[160];
  snprintf(dir, sizeof dir, "%s/resume_s%d", root, stage);
  snprintf(what, sizeof what, "frozen in.W0: resume at stage %d", stage);
  float *init = initial_w0(&r);
  state straight, saved, resumed;
  train(&r, FROZEN, dir, NULL, 0, 0, 6, NULL, &straight);
  check_w0(&r, &straight, init, 1, what);
  train(&r, FROZEN, dir, NULL, 0, 0, 3, "step3", &saved);
  train(&r, FROZEN, dir, "step3", 0, 3, 6, NULL, &resumed);
  ET_CHECK(same_state(&r, &resumed, &straight, what), "%s: not bitwise identical to 6 steps "
           "straight", what);
  check_w0(&r, &resumed, init, 1, what);
  state_free(&straight);
  state_free(&resumed);

  if (stage == 3) {
    /* rank 0 alone at stage 1 (several ranks only), then everyone at stage 2 */
    for (int variant = et_world > 1 ? 0 : 1; variant < 2; variant++) {
      MPI_Comm sub;
      MPI_Comm_split(MPI_COMM_WORLD, variant == 1 || et_rank == 0 ? 0 : MPI_UNDEFINED, et_rank,
                     &sub);
      if (sub != MPI_COMM_NULL) {
        et_run r2 = run_at(variant == 0 ? 1 : 2);
        et_model d;
        zinc_engine *e2 = open_model(&r2, FROZEN, &sub, &d);
        ET_OK(zinc_load_checkpoint(e2, dir, "step3"));
        state got, on;
        capture(&d, &r2, &got);
        char w[200];
        snprintf(w, sizeof w, "frozen in.W0: saved by %d ranks at stage 3, loaded by %d at "
                 "stage %d", et_world, variant == 0 ? 1 : et_world, r2.stage);
        ET_CHECK(same_state(&r2, &got, &saved, w), "%s: states differ", w);
        ET_OK(et_steps(&d, &r2, 3, 5));
        capture(&d, &r2, &on);
        check_w0(&r2, &on, init, 1, w);
        ET_CHECK(memcmp(on.s[0][5], got.s[0][5], (size_t)tm_numel(&r2.shape, 5) * 4) != 0,
                 "%s: out.W2 did not move after the load", w);
        state_free(&got);
        state_free(&on);
        et_model_free(&d);
        zinc_engine_destroy(e2);
        MPI_Comm_free(&sub);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  state_free(&saved);
  free(init);
  if (et_rank == 0 && et_failures == 0)
    printf("%s: bitwise identical after the load%s\n", what,
           stage == 3 ? "; resharded loads identical" : "");
}

/* Saved with W0 frozen, loaded with W0 trainable. */
static void test_frozen_to_trainable(int stage) {
  et_run r = run_at(stage);
  char dir[700], what[160];
  snprintf(dir, sizeof dir, "%s/unfreeze_s%d", root, stage);
  snprintf(what, sizeof what, "stage %d: saved %s, loaded %s", stage, mode_names[FROZEN],
           mode_names[TRAINED]);
  float *init = initial_w0(&r);
  state f, z, loaded, got, want;
  train(&r, FROZEN, dir, NULL, 0, 0, 3, "frozen", &f);
  train(&r, LR0, dir, NULL, 0, 0, 3, "lr0", &z);
  ET_CHECK(et_same_bits(&r.shape, f.s[0], z.s[0], "frozen vs lr scale 0 before the save"),
           "%s: the runs differ before the save", what);
  /* right after the load: the saved values, W0's moments zero */
  train(&r, TRAINED, dir, "frozen", 0, 3, 3, NULL, &loaded);
  ET_CHECK(et_same_bits(&r.shape, loaded.s[0], f.s[0], what), "%s: parameters differ from the "
           "saved ones", what);
  check_w0(&r, &loaded, init, 1, what);
  for (int k = 1; k < 3; k++)
    for (int i = 1; i < TM_NPARAM; i++)
      ET_CHECK(memcmp(loaded.s[k][i], f.s[k][i], (size_t)tm_numel(&r.shape, i) * 4) == 0,
               "%s: %s of %s differs from the saved one", what, kind_names[k], tm_names[i]);
  /* trained on: W0 now moves, as from zero moments */
  train(&r, TRAINED, dir, "frozen", 0, 3, 6, NULL, &got);
  train(&r, TRAINED, dir, "lr0", 1, 3, 6, NULL, &want);
  ET_CHECK(same_state(&r, &got, &want, what), "%s: not the run loaded from W0 at lr scale 0 "
           "with its moments zeroed", what);
  ET_CHECK(memcmp(got.s[0][W0], init, (size_t)w0_numel(&r) * 4) != 0,
           "%s: in.W0 did not move once trainable", what);
  state_free(&f);
  state_free(&z);
  state_free(&loaded);
  state_free(&got);
  state_free(&want);
  free(init);
  if (et_rank == 0 && et_failures == 0)
    printf("%s: W0 starts from zero moments, bitwise as the reference\n", what);
}

/* Saved with W0 trainable, loaded with W0 frozen. */
static void test_trainable_to_frozen(int stage) {
  et_run r = run_at(stage);
  char dir[700], what[160];
  snprintf(dir, sizeof dir, "%s/freeze_s%d", root, stage);
  snprintf(what, sizeof what, "stage %d: saved %s, loaded %s", stage, mode_names[TRAINED],
           mode_names[FROZEN]);
  float *init = initial_w0(&r);
  state t, got, want;
  train(&r, TRAINED, dir, NULL, 0, 0, 3, "trained", &t);
  ET_CHECK(memcmp(t.s[0][W0], init, (size_t)w0_numel(&r) * 4) != 0,
           "%s: in.W0 did not move before the save", what);
  train(&r, FROZEN, dir, "trained", 0, 3, 6, NULL, &got);
  train(&r, LR0, dir, "trained", 0, 3, 6, NULL, &want);
  check_w0(&r, &got, t.s[0][W0], 1, what);
  ET_CHECK(et_same_bits(&r.shape, got.s[0], want.s[0], what),
           "%s: parameters differ from the load into W0 at lr scale 0", what);
  for (int k = 1; k < 3; k++)
    for (int i = 1; i < TM_NPARAM; i++)
      ET_CHECK(memcmp(got.s[k][i], want.s[k][i], (size_t)tm_numel(&r.shape, i) * 4) == 0,
               "%s: %s of %s differs from the load into W0 at lr scale 0", what,
               kind_names[k], tm_names[i]);
  state_free(&t);
  state_free(&got);
  state_free(&want);
  free(init);
  if (et_rank == 0 && et_failures == 0)
    printf("%s: W0 keeps the saved value, the rest as the reference\n", what);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/ckpt_frozen_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
  int stages[] = {0, 1, 3};
  for (int k = 0; k < 3; k++)
    test_resume(stages[k]);
  for (int k = 1; k < 3; k++) {
    test_frozen_to_trainable(stages[k]);
    test_trainable_to_frozen(stages[k]);
  }
  if (et_failures == 0 && et_rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
      fprintf(stderr, "command failed: %s\n", cmd);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "frozen checkpoint tests FAILED\n"
               : "frozen checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
