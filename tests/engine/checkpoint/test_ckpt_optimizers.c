/*
 * test_ckpt_optimizers.c — checkpoints of every optimizer.type (AdamW, Lamb,
 * Lion, Adagrad, SGD with momentum and Nesterov), under mpirun:
 *  - resume: 6 steps straight vs 3 steps, save, a fresh engine loads and
 *    runs 3 more: bitwise identical parameters and every state slot the
 *    optimizer keeps (SGD's momentum buffer must not start again as the
 *    gradient; Lamb's bias correction and Adagrad's sum go on), at stage 1
 *    and at stage 3 with optimizer and parameters offloaded to cpu;
 *  - resharding: the stage-3 save loaded by rank 0 alone at stage 1 (when
 *    there are several ranks) and by every rank at stage 2: every state
 *    identical to the saved one;
 *  - another optimizer: a checkpoint saved with optimizer.type X loaded by
 *    an engine configured with Y fails on every rank with the same status
 *    and a message naming both types, within ET_AGREE_SECONDS, and the
 *    engine's state is unchanged.
 * An optimizer whose config the engine refuses fails with the engine's
 * message (and the others still run); nothing is skipped.
 *
 * With --bf16 (test_ckpt_optimizers_bf16) every run keeps its master
 * weights and moments in bf16 (the bf16 section's keys), and also:
 *  - across dtypes: the stage-1 save of the bf16 run loaded by an fp32-state
 *    run holds the same values (widened exactly), and the fp32 run's save
 *    loaded by a bf16-state run holds each saved value rounded to nearest
 *    even (rounded here from the bits), at stage 1 and at stage 3
 *    resharded to stage 2;
 *  - the bf16 run's shards are half the fp32 run's, trailers aside.
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/engine_test.h"

static char root[512];
static int bf16_run; /* --bf16: master weights and moments in bf16 */
static const char *const BF16_STATES =
    ", \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": true";

typedef struct {
  et_optim o;
  int slots; /* bit 0 exp_avg, bit 1 exp_avg_sq: the state the type keeps */
  const char *kind; /* the name a message gives the type ("Adam" for AdamW) */
} member;

static const member family[] = {
    {{.type = "AdamW", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
      .weight_decay = 0.01}, 3, "Adam"},
    {{.type = "Lamb", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6,
      .weight_decay = 0.01, .min_coeff = 0.05, .max_coeff = 5.0}, 3, "Lamb"},
    {{.type = "Lion", .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}, 1, "Lion"},
    {{.type = "Adagrad", .lr = 0.01, .eps = 1e-8, .weight_decay = 0.01}, 2, "Adagrad"},
    {{.type = "SGD", .lr = 0.05, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01}, 1,
     "SGD"},
};
#define NFAMILY ((int)(sizeof family / sizeof family[0]))

typedef struct {
  float **s[3]; /* param, exp_avg, exp_avg_sq (NULL: a slot the type does not keep) */
} state;

static const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG,
                                         ZINC_STATE_EXP_AVG_SQ};
static const char *kind_names[3] = {"param", "exp_avg", "exp_avg_sq"};

static void capture(et_model *m, const et_run *r, int slots, state *out) {
  for (int k = 0; k < 3; k++) {
    out->s[k] = NULL;
    if (k > 0 && !(slots & k))
      continue;
    out->s[k] = et_alloc_params(&r->shape);
    for (int i = 0; i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(m->e, m->par[i], kinds[k], out->s[k][i]));
  }
}

static void state_free(state *s) {
  for (int k = 0; k < 3; k++)
    if (s->s[k])
      et_free_params(s->s[k]);
}

static int same_state(const et_run *r, state *a, state *b, const char *what) {
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    if (!a->s[k] || !b->s[k])
      continue;
    char w[200];
    snprintf(w, sizeof w, "%s (%s)", what, kind_names[k]);
    ok &= et_same_bits(&r->shape, a->s[k], b->s[k], w);
  }
  return ok;
}

/* The engine parses r's config; otherwise a failure with its message. */
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

static et_run run_for(const member *f, int stage) {
  et_run r = et_defaults();
  r.optim = &f->o;
  r.stage = stage;
  r.bf16_extra = bf16_run ? BF16_STATES : NULL;
  if (stage == 3) {
    r.offload = "cpu";
    r.offload_param = "cpu";
  }
  return r;
}

static void ckpt_dir(char *dir, size_t size, const member *f, int stage) {
  snprintf(dir, size, "%s/%s_s%d", root, f->o.type, stage);
}

/* Resume at `stage`, and from the stage-3 save every rank's reloads. */
static void test_resume(const member *f, int stage) {
  et_run r = run_for(f, stage);
  char dir[700], what[160];
  ckpt_dir(dir, sizeof dir, f, stage);
  snprintf(what, sizeof what, "%s: resume at stage %d offload %s", f->o.type, stage, r.offload);
  if (!engine_accepts(&r, what))
    return;
  et_model a, b, c;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 6));
  state straight;
  capture(&a, &r, f->slots, &straight);
  et_model_free(&a);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &b);
  ET_OK(et_steps(&b, &r, 0, 3));
  state saved;
  capture(&b, &r, f->slots, &saved);
  ET_OK(zinc_save_checkpoint(e, dir, "step3"));
  et_model_free(&b);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &c);
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  ET_OK(et_steps(&c, &r, 3, 6));
  state resumed;
  capture(&c, &r, f->slots, &resumed);
  ET_CHECK(same_state(&r, &resumed, &straight, what), "%s: not bitwise identical to 6 steps "
           "straight", what);
  state_free(&resumed);
  state_free(&straight);
  et_model_free(&c);
  zinc_engine_destroy(e);

  if (stage == 3) {
    /* rank 0 alone at stage 1 (several ranks only), then everyone at stage 2 */
    for (int variant = et_world > 1 ? 0 : 1; variant < 2; variant++) {
      MPI_Comm sub;
      MPI_Comm_split(MPI_COMM_WORLD, variant == 1 || et_rank == 0 ? 0 : MPI_UNDEFINED, et_rank,
                     &sub);
      if (sub != MPI_COMM_NULL) {
        et_run r2 = run_for(f, variant == 0 ? 1 : 2);
        et_model d;
        zinc_engine *e2 = et_open(&r2, &sub, &d);
        ET_OK(zinc_load_checkpoint(e2, dir, "step3"));
        state got;
        capture(&d, &r2, f->slots, &got);
        char w[160];
        snprintf(w, sizeof w, "%s: saved by %d ranks at stage 3, loaded by %d at stage %d",
                 f->o.type, et_world, variant == 0 ? 1 : et_world, r2.stage);
        ET_CHECK(same_state(&r2, &got, &saved, w), "%s: states differ", w);
        state_free(&got);
        et_model_free(&d);
        zinc_engine_destroy(e2);
        MPI_Comm_free(&sub);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  state_free(&saved);
  if (et_rank == 0 && et_failures == 0)
    printf("%s: bitwise identical after the load%s\n", what,
           stage == 3 ? "; resharded loads identical" : "");
}

/* An engine with `f` loads the stage-1 checkpoint that `saver` wrote. */
static void test_other_type(const member *f, const member *saver) {
  et_run r = run_for(f, 1), rs = run_for(saver, 1);
  char dir[700], what[160];
  ckpt_dir(dir, sizeof dir, saver, 1);
  snprintf(what, sizeof what, "%s engine loading a %s checkpoint", f->o.type, saver->o.type);
  if (!engine_accepts(&r, what) || !engine_accepts(&rs, what))
    return;
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 2));
  state before;
  capture(&a, &r, f->slots, &before);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, dir, "step3");
  double seconds = MPI_Wtime() - t0;
  const char *msg = zinc_last_error();
  int mine = (int)st, lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ET_CHECK(st != ZINC_OK, "%s: loaded (want a refusal)", what);
  ET_CHECK(lo == hi, "%s: the ranks return different statuses (%d .. %d)", what, lo, hi);
  ET_CHECK(strstr(msg, f->kind) && strstr(msg, saver->kind),
           "%s: the message does not name both \"%s\" and \"%s\": %s", what, f->kind,
           saver->kind, msg);
  ET_CHECK(seconds < ET_AGREE_SECONDS, "%s: took %.1f s (a peer waited in a collective?)", what,
           seconds);
  state after;
  capture(&a, &r, f->slots, &after);
  ET_CHECK(same_state(&r, &after, &before, what), "%s: the engine's state changed", what);
  /* and the engine goes on */
  ET_OK(et_steps(&a, &r, 2, 3));
  if (et_rank == 0 && st != ZINC_OK)
    printf("%s: %s: %s\n", what, zinc_status_name(st), msg);
  state_free(&before);
  state_free(&after);
  et_model_free(&a);
  zinc_engine_destroy(e);
}

static long long shard_bytes(const char *dir) {
  char p[900];
  snprintf(p, sizeof p, "%s/step3/rank_00000.zshard", dir);
  struct stat sb;
  return stat(p, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* A checkpoint of f at `stage` saved with states in one dtype, loaded by a
 * run at `load_stage` keeping them in the other (--bf16 runs only). */
static void test_cross_dtype(const member *f, int stage, int load_stage) {
  char bdir[700], fdir[700], what[200];
  ckpt_dir(bdir, sizeof bdir, f, stage); /* test_resume's bf16 save */
  snprintf(fdir, sizeof fdir, "%s/%s_s%d_fp32", root, f->o.type, stage);
  et_run rb = run_for(f, stage), rf = rb;
  rf.bf16_extra = NULL;
  if (!engine_accepts(&rb, f->o.type))
    return;
  /* the fp32 run's save after 3 steps */
  et_model a;
  zinc_engine *e = et_open(&rf, NULL, &a);
  ET_OK(et_steps(&a, &rf, 0, 3));
  state saved32;
  capture(&a, &rf, f->slots, &saved32);
  ET_OK(zinc_save_checkpoint(e, fdir, "step3"));
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* the bf16 run's save (test_resume): its states, read back by a bf16 run */
  et_run lb = run_for(f, load_stage), lf = lb;
  lf.bf16_extra = NULL;
  e = et_open(&lb, NULL, &a);
  ET_OK(zinc_load_checkpoint(e, bdir, "step3"));
  state saved16;
  capture(&a, &lb, f->slots, &saved16);
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* bf16 save into an fp32-state run: the same values */
  e = et_open(&lf, NULL, &a);
  ET_OK(zinc_load_checkpoint(e, bdir, "step3"));
  state got;
  capture(&a, &lf, f->slots, &got);
  snprintf(what, sizeof what, "%s: bf16 states saved at stage %d, loaded as fp32 at stage %d",
           f->o.type, stage, load_stage);
  ET_CHECK(same_state(&lf, &got, &saved16, what), "%s: not the saved values", what);
  ET_OK(et_steps(&a, &lf, 3, 4)); /* and it trains on */
  state_free(&got);
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* fp32 save into a bf16-state run: each value rounded to nearest even */
  e = et_open(&lb, NULL, &a);
  ET_OK(zinc_load_checkpoint(e, fdir, "step3"));
  capture(&a, &lb, f->slots, &got);
  for (int k = 0; k < 3; k++)
    if (saved32.s[k])
      for (int i = 0; i < TM_NPARAM; i++)
        for (int64_t j = 0; j < tm_numel(&rf.shape, i); j++)
          saved32.s[k][i][j] = et_bf16_round(saved32.s[k][i][j]);
  snprintf(what, sizeof what, "%s: fp32 states saved at stage %d, loaded as bf16 at stage %d",
           f->o.type, stage, load_stage);
  ET_CHECK(same_state(&lb, &got, &saved32, what), "%s: not the saved values rounded to "
           "nearest even", what);
  ET_OK(et_steps(&a, &lb, 3, 4));
  state_free(&got);
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* half the bytes on disk */
  long long b16 = shard_bytes(bdir), b32 = shard_bytes(fdir);
  ET_CHECK(b16 > 64 && (b16 - 64) * 2 == b32 - 64, "%s: shard of %lld bytes with bf16 states, "
           "%lld with fp32 (64-byte trailers): not half", f->o.type, b16, b32);
  if (et_rank == 0 && et_failures == 0)
    printf("%s: loads across dtypes as stated (stage %d to %d); shard %lld bytes with bf16 "
           "states, %lld with fp32\n", f->o.type, stage, load_stage, b16, b32);
  state_free(&saved16);
  state_free(&saved32);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  bf16_run = argc > 1 && !strcmp(argv[1], "--bf16");
  snprintf(root, sizeof root, "%s/ckpt_optimizers%s_np%d", et_binary_dir(),
           bf16_run ? "_bf16" : "", et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < NFAMILY; k++) {
    test_resume(&family[k], 1);
    test_resume(&family[k], 3);
  }
  /* each type loads the next one's checkpoint */
  for (int k = 0; k < NFAMILY; k++)
    test_other_type(&family[k], &family[(k + 1) % NFAMILY]);
  for (int k = 0; k < NFAMILY && bf16_run; k++) {
    test_cross_dtype(&family[k], 1, 1);
    test_cross_dtype(&family[k], 3, 2);
  }
  if (et_failures == 0 && et_rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
      fprintf(stderr, "command failed: %s\n", cmd);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "optimizer checkpoint tests FAILED\n"
               : "optimizer checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
