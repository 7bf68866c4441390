/*
 * test_checkpoint.c — checkpoints, under mpirun:
 *  - resume: 10 steps straight vs 5 steps, save, a fresh engine loads and
 *    runs 5 more: bitwise identical parameters, exp_avg and exp_avg_sq, at
 *    every stage, offload none and cpu, fp32 and fp16 (the loss scale
 *    changes before the save and must come back with the load);
 *  - resharding: saved by every rank at stage 3, loaded by 1..N ranks at
 *    stages 0-3; saved by 1..N ranks at stages 0-3, loaded by N ranks at
 *    stages 0-3: every state identical element by element;
 *  - save faults: the N-th write of a save (shard, manifest, checksums,
 *    rename, latest) fails on rank 0 or the last rank, for every N;
 *  - damage: truncated shard, flipped byte, missing shard, damaged
 *    manifest, another model's checkpoint, bad tag — each rejected with its
 *    own message and the engine's state unchanged;
 *  - export: the .safetensors file read back by an independent reader.
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_test.h"

static char ckpt_root[512];


static void train(et_model *m, const et_run *r, int from, int to) {
  int N = zinc_dp_size(m->e), me = zinc_dp_rank(m->e);
  for (int s = from; s < to; s++) {
    et_micro_batch(m, &r->shape, r->dtype, ((int64_t)s * N + me) * r->micro, r->micro, NULL);
    ET_OK(zinc_step(m->e, NULL));
  }
}

typedef struct {
  float **s[3];
} state;

static void capture(et_model *m, const et_run *r, state *out) {
  const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG, ZINC_STATE_EXP_AVG_SQ};
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
  static const char *names[3] = {"param", "exp_avg", "exp_avg_sq"};
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    char w[160];
    snprintf(w, sizeof w, "%s (%s)", what, names[k]);
    ok &= et_same_bits(&r->shape, a->s[k], b->s[k], w);
  }
  return ok;
}

static void test_resume(int stage, const char *offload, zinc_dtype dt) {
  et_run r = et_defaults();
  r.stage = stage;
  r.offload = offload;
  r.dtype = dt;
  r.shape.dtype = dt;
  char nvme[600];
  if (!strcmp(offload, "nvme")) { /* optimizer state (and at stage 3 parameters) on NVMe */
    snprintf(nvme, sizeof nvme, "%s/swap", ckpt_root);
    mkdir(nvme, 0755);
    r.nvme_path = nvme;
    r.offload_param = stage == 3 ? "nvme" : NULL;
    r.sub_group = 500;
    r.buffer_count = 2;
  }
  char dir[600], what[128];
  snprintf(dir, sizeof dir, "%s/resume_s%d_%s_%s", ckpt_root, stage, offload, zinc_dtype_name(dt));
  snprintf(what, sizeof what, "resume stage %d offload %s %s", stage, offload, zinc_dtype_name(dt));
  if (dt == ZINC_F16)
    r.fp16_window = 2; /* the loss scale doubles every 2 steps: it differs at the save */
  et_model a, b, c;
  zinc_engine *e = et_open(&r, NULL, &a);
  float scale0 = zinc_loss_scale(e);
  train(&a, &r, 0, 5);
  float scale5 = zinc_loss_scale(e);
  train(&a, &r, 5, 10);
  float scale10 = zinc_loss_scale(e);
  if (dt == ZINC_F16)
    ET_CHECK(scale5 != scale0, "%s: the loss scale did not change before the save (%g)", what,
             scale0);
  state straight;
  capture(&a, &r, &straight);
  et_model_free(&a);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &b);
  train(&b, &r, 0, 5);
  ET_OK(zinc_save_checkpoint(e, dir, "step5"));
  et_model_free(&b);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &c);
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  ET_CHECK(zinc_loss_scale(e) == scale5, "%s: loss scale %g after the load, %g when saved", what,
           zinc_loss_scale(e), scale5);
  train(&c, &r, 5, 10);
  ET_CHECK(zinc_loss_scale(e) == scale10, "%s: loss scale %g at step 10 after resuming, %g "
           "straight", what, zinc_loss_scale(e), scale10);
  state resumed;
  capture(&c, &r, &resumed);
  ET_CHECK(same_state(&r, &resumed, &straight, what), "%s: not bitwise identical", what);
  et_model_free(&c);
  zinc_engine_destroy(e);
  state_free(&straight);
  state_free(&resumed);
}

static void test_reshard(void) {
  et_run r = et_defaults();
  r.stage = 3;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/reshard", ckpt_root);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  train(&a, &r, 0, 4);
  state saved;
  capture(&a, &r, &saved);
  ET_OK(zinc_save_checkpoint(e, dir, "s3"));
  et_model_free(&a);
  zinc_engine_destroy(e);
  for (int k = 1; k <= et_world; k++) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, et_rank < k ? 0 : MPI_UNDEFINED, et_rank, &sub);
    if (sub != MPI_COMM_NULL) {
      for (int variant = 0; variant <= 4; variant++) {
        int stage = variant < 4 ? variant : 3; /* 4: stage 3 with everything on NVMe */
        et_run r2 = r;
        r2.stage = stage;
        char nvme[600];
        if (variant == 4) {
          snprintf(nvme, sizeof nvme, "%s/swap", ckpt_root);
          mkdir(nvme, 0755);
          r2.offload = "nvme";
          r2.offload_param = "nvme";
          r2.nvme_path = nvme;
          r2.sub_group = 300;
        }
        et_model b;
        zinc_engine *e2 = et_open(&r2, &sub, &b);
        ET_OK(zinc_load_checkpoint(e2, dir, "s3"));
        state got;
        capture(&b, &r2, &got);
        char what[96];
        snprintf(what, sizeof what, "saved by %d ranks at stage 3, loaded by %d at stage %d%s",
                 et_world, k, stage, variant == 4 ? " (NVMe offload)" : "");
        ET_CHECK(same_state(&r2, &got, &saved, what), "%s: states differ", what);
        state_free(&got);
        et_model_free(&b);
        zinc_engine_destroy(e2);
      }
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (et_rank == 0 && et_failures == 0)
    printf("resharding: saved at %d ranks stage 3, loaded at 1..%d ranks, stages 0-3 and "
           "stage 3 on NVMe: identical\n", et_world, et_world);
  state_free(&saved);
}

/* Saved by k = 1..N ranks at each stage 0-3 (a sub-group of the world),
 * loaded by all N ranks at every stage: resharding to more ranks than
 * saved, and saves at every stage. */
static void test_reshard_up(void) {
  for (int save_stage = 0; save_stage <= 3; save_stage++) {
    for (int k = 1; k <= et_world; k++) {
      et_run r = et_defaults();
      r.stage = save_stage;
      char dir[600], tag[32];
      snprintf(dir, sizeof dir, "%s/reshard_up", ckpt_root);
      snprintf(tag, sizeof tag, "s%d_k%d", save_stage, k);
      state saved;
      for (int kind = 0; kind < 3; kind++)
        saved.s[kind] = et_alloc_params(&r.shape);
      MPI_Comm sub;
      MPI_Comm_split(MPI_COMM_WORLD, et_rank < k ? 0 : MPI_UNDEFINED, et_rank, &sub);
      if (sub != MPI_COMM_NULL) {
        et_model a;
        zinc_engine *e = et_open(&r, &sub, &a);
        train(&a, &r, 0, 3);
        state got;
        capture(&a, &r, &got);
        for (int kind = 0; kind < 3; kind++)
          for (int i = 0; i < TM_NPARAM; i++)
            memcpy(saved.s[kind][i], got.s[kind][i], (size_t)tm_numel(&r.shape, i) * 4);
        state_free(&got);
        ET_OK(zinc_save_checkpoint(e, dir, tag));
        et_model_free(&a);
        zinc_engine_destroy(e);
        MPI_Comm_free(&sub);
      }
      for (int kind = 0; kind < 3; kind++) /* rank 0 saved: everyone compares with it */
        for (int i = 0; i < TM_NPARAM; i++)
          MPI_Bcast(saved.s[kind][i], (int)tm_numel(&r.shape, i), MPI_FLOAT, 0, MPI_COMM_WORLD);
      for (int stage = 0; stage <= 3; stage++) {
        et_run r2 = r;
        r2.stage = stage;
        et_model b;
        zinc_engine *e2 = et_open(&r2, NULL, &b);
        ET_OK(zinc_load_checkpoint(e2, dir, tag));
        state got;
        capture(&b, &r2, &got);
        char what[128];
        snprintf(what, sizeof what, "saved by %d ranks at stage %d, loaded by %d at stage %d", k,
                 save_stage, et_world, stage);
        ET_CHECK(same_state(&r2, &got, &saved, what), "%s: states differ", what);
        state_free(&got);
        et_model_free(&b);
        zinc_engine_destroy(e2);
      }
      state_free(&saved);
    }
  }
  if (et_rank == 0 && et_failures == 0)
    printf("resharding: saved by 1..%d ranks at stages 0-3, loaded by %d at stages 0-3: "
           "identical\n", et_world, et_world);
}

/* rank 0 edits files; everyone waits */
static void shell(const char *cmd) {
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
}

static void expect_rejected(et_model *m, const et_run *r, state *before, const char *dir,
                            const char *tag, const char *needle, const char *what) {
  zinc_status st = zinc_load_checkpoint(m->e, dir, tag);
  ET_CHECK(st != ZINC_OK && strstr(zinc_last_error(), needle),
           "%s: status %s, message \"%s\" (expected to mention \"%s\")", what,
           zinc_status_name(st), zinc_last_error(), needle);
  state after;
  capture(m, r, &after);
  ET_CHECK(same_state(r, &after, before, what), "%s: the engine's state changed", what);
  state_free(&after);
}

static void test_damage(void) {
  et_run r = et_defaults();
  r.stage = 2;
  char dir[600], cmd[4096];
  snprintf(dir, sizeof dir, "%s/damage", ckpt_root);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  train(&a, &r, 0, 3);
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  train(&a, &r, 3, 5); /* now the engine differs from the checkpoint */
  state before;
  capture(&a, &r, &before);
  const char *good = "good";
#define DAMAGE(prepare, needle, what)                                                       \
  do {                                                                                      \
    snprintf(cmd, sizeof cmd, "rm -rf %s/bad && cp -r %s/%s %s/bad && %s", dir, dir, good,   \
             dir, prepare);                                                                 \
    shell(cmd);                                                                             \
    expect_rejected(&a, &r, &before, dir, "bad", needle, what);                            \
  } while (0)
  char p[1400];
  snprintf(p, sizeof p, "truncate -s -100 %s/bad/rank_00000.zshard", dir);
  DAMAGE(p, "rank_00000.zshard", "truncated shard");
  snprintf(p, sizeof p, "printf '\\x55' | dd of=%s/bad/rank_00000.zshard bs=1 seek=1000 "
           "conv=notrunc status=none", dir);
  DAMAGE(p, "crc32c", "flipped byte in a shard");
  snprintf(p, sizeof p, "rm %s/bad/rank_00000.zshard", dir);
  DAMAGE(p, "missing", "missing shard");
  snprintf(p, sizeof p, "sed -i 's/\"step\": [0-9]*/\"step\": 7/' %s/bad/manifest.json", dir);
  DAMAGE(p, "manifest.json", "edited manifest");
  snprintf(p, sizeof p, "true");
  expect_rejected(&a, &r, &before, dir, "../escape", "tag", "bad tag");
  expect_rejected(&a, &r, &before, dir, "absent", "missing", "absent tag");
  /* another model's checkpoint */
  et_run other = r;
  other.shape.d[1] = 31;
  char odir[640];
  snprintf(odir, sizeof odir, "%s/other", ckpt_root);
  et_model o;
  zinc_engine *e2 = et_open(&other, NULL, &o);
  ET_OK(zinc_save_checkpoint(e2, odir, "other"));
  et_model_free(&o);
  zinc_engine_destroy(e2);
  expect_rejected(&a, &r, &before, odir, "other", "has shape", "another model's checkpoint");
  /* and the good one still loads */
  ET_OK(zinc_load_checkpoint(e, dir, "good"));
  state_free(&before);
  et_model_free(&a);
  zinc_engine_destroy(e);
#undef DAMAGE
}

static void test_export(zinc_dtype dt) {
  et_run r = et_defaults();
  r.stage = 3;
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  train(&a, &r, 0, 3);
  char path[700], refdir[700], cmd[4096];
  snprintf(path, sizeof path, "%s/export_%s.safetensors", ckpt_root, zinc_dtype_name(dt));
  snprintf(refdir, sizeof refdir, "%s/export_ref_%s", ckpt_root, zinc_dtype_name(dt));
  ET_OK(zinc_export_safetensors(e, path, (int)dt));
  if (et_rank == 0)
    mkdir(refdir, 0755);
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(&r.shape, i);
    float *v = malloc((size_t)n * 4);
    void *raw = malloc((size_t)n * 4);
    ET_OK(zinc_param_get_full(e, a.par[i], ZINC_STATE_PARAM, v));
    if (et_rank == 0) {
      for (int64_t j = 0; j < n; j++)
        zinc_store_from_f32(raw, j, dt, v[j]);
      char f[800];
      snprintf(f, sizeof f, "%s/%s.%s.ref", refdir, mods[et_param_module[i]], tm_names[i]);
      FILE *fp = fopen(f, "wb");
      fwrite(raw, zinc_dtype_size(dt), (size_t)n, fp);
      fclose(fp);
      snprintf(f, sizeof f, "%s/%s.%s.meta", refdir, mods[et_param_module[i]], tm_names[i]);
      fp = fopen(f, "w");
      int64_t sh[2];
      int nd = zinc_param_shape(a.par[i], sh);
      fprintf(fp, "%s %d", dt == ZINC_F32 ? "F32" : dt == ZINC_BF16 ? "BF16" : "F16", nd);
      for (int d = 0; d < nd; d++)
        fprintf(fp, " %lld", (long long)sh[d]);
      fclose(fp);
    }
    free(v);
    free(raw);
  }
  if (et_rank == 0) {
    snprintf(cmd, sizeof cmd, "python3 %s/tests/engine/checkpoint/read_safetensors.py %s %s",
             getenv("ZINC_TEST_SOURCE_DIR") ? getenv("ZINC_TEST_SOURCE_DIR") : ".", path, refdir);
    ET_CHECK(system(cmd) == 0, "the independent reader rejected %s", path);
  }
  et_model_free(&a);
  zinc_engine_destroy(e);
}

/* A save that fails (disk full or an I/O error) at any of its writes —
 * ZINC_CKPT_FAULT counts every write of the save on the rank: its shard,
 * and on rank 0 the manifest, the checksums file, the rename into place
 * and latest — reports it on every rank, leaves the previous checkpoint as
 * latest and no partial directory (a "bad" that was renamed in before the
 * fault is complete), and training goes on. Injected on rank 0, then on
 * the last rank, at write N = 1, 2, ... until the save gets past them all. */
static void test_save_faults(void) {
  et_run r = et_defaults();
  r.stage = 2;
  char dir[600], cmd[4000];
  snprintf(dir, sizeof dir, "%s/savefault", ckpt_root);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  train(&m, &r, 0, 2);
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  state saved;
  capture(&m, &r, &saved);
  int reached_latest = 0, total = 0;
  for (int who = 0; who < 2; who++) {
    int target = who == 0 ? 0 : et_world - 1;
    if (who == 1 && target == 0)
      break;
    for (int n = 1; n < 10000; n++) {
      char spec[32];
      snprintf(spec, sizeof spec, "%s@%d", n % 2 ? "ENOSPC" : "EIO", n);
      if (et_rank == target)
        setenv("ZINC_CKPT_FAULT", spec, 1);
      zinc_status st = zinc_save_checkpoint(e, dir, "bad");
      unsetenv("ZINC_CKPT_FAULT");
      int ok = st == ZINC_OK, all = ok;
      MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      ET_CHECK(ok == all, "save with %s on rank %d: rank %d returned %s while another did not",
               spec, target, et_rank, zinc_status_name(st));
      if (all) { /* past every write: the fault was never reached */
        snprintf(cmd, sizeof cmd, "rm -rf %s/bad && printf 'good\\n' > %s/latest", dir, dir);
        shell(cmd);
        break;
      }
      total++;
      reached_latest |= strstr(zinc_last_error(), "latest") != NULL;
      ET_CHECK(st == ZINC_ERR_IO && strstr(zinc_last_error(), n % 2 ? "No space" : "Input/output"),
               "save with %s on rank %d: %s \"%s\"", spec, target, zinc_status_name(st),
               zinc_last_error());
      snprintf(cmd, sizeof cmd, "test \"$(cat %s/latest)\" = good && ! test -e %s/.bad.partial "
               "&& ! test -e %s/.bad.next", dir, dir, dir);
      if (et_rank == 0)
        ET_CHECK(system(cmd) == 0, "save with %s on rank %d left latest changed or a partial "
                 "directory", spec, target);
      MPI_Barrier(MPI_COMM_WORLD);
      state back; /* "good" is whole */
      ET_OK(zinc_load_checkpoint(e, dir, NULL));
      capture(&m, &r, &back);
      ET_CHECK(same_state(&r, &back, &saved, "reload after a failed save"), "latest is not "
               "'good' after %s on rank %d", spec, target);
      state_free(&back);
      snprintf(cmd, sizeof cmd, "rm -rf %s/bad", dir);
      shell(cmd);
    }
  }
  ET_CHECK(reached_latest, "no injected fault reached the write of latest (%d faults)", total);
  train(&m, &r, 2, 3); /* the engine goes on */
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  state back;
  capture(&m, &r, &back);
  ET_CHECK(same_state(&r, &back, &saved, "reload after failed saves"), "latest is not 'good'");
  state_free(&saved);
  state_free(&back);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* tools/zinc-ckpt on a real checkpoint: list and verify succeed, its
 * export equals the engine's byte for byte, a damaged shard fails verify. */
static void test_tool(void) {
#ifdef ZINC_CKPT_TOOL
  et_run r = et_defaults();
  r.stage = 1;
  char dir[600], a[700], b[700], cmd[8192];
  snprintf(dir, sizeof dir, "%s/tool", ckpt_root);
  snprintf(a, sizeof a, "%s/tool_engine.safetensors", ckpt_root);
  snprintf(b, sizeof b, "%s/tool_cli.safetensors", ckpt_root);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  train(&m, &r, 0, 2);
  ET_OK(zinc_save_checkpoint(e, dir, "t"));
  ET_OK(zinc_export_safetensors(e, a, ZINC_BF16));
  if (et_rank == 0) {
    snprintf(cmd, sizeof cmd, "%s list %s >/dev/null && %s verify %s >/dev/null && "
             "%s export %s t %s --dtype bf16 >/dev/null && cmp -s %s %s", ZINC_CKPT_TOOL, dir,
             ZINC_CKPT_TOOL, dir, ZINC_CKPT_TOOL, dir, b, a, b);
    ET_CHECK(system(cmd) == 0, "zinc-ckpt list/verify/export: %s", cmd);
    snprintf(cmd, sizeof cmd, "printf '\\x01' | dd of=%s/t/rank_00000.zshard bs=1 seek=64 "
             "conv=notrunc status=none && %s verify %s 2>/dev/null", dir, ZINC_CKPT_TOOL, dir);
    ET_CHECK(system(cmd) != 0, "zinc-ckpt verify accepted a damaged shard");
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
  MPI_Barrier(MPI_COMM_WORLD);
#endif
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  const char *base = et_binary_dir();
  snprintf(ckpt_root, sizeof ckpt_root, "%s/ckpt_test_np%d", base, et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", ckpt_root, ckpt_root);
  shell(cmd);
  for (int stage = 0; stage <= 3; stage++) {
    test_resume(stage, "none", ZINC_F32);
    if (stage > 0) {
      test_resume(stage, "cpu", ZINC_F32);
      test_resume(stage, "nvme", ZINC_F32);
    }
  }
  test_resume(2, "none", ZINC_F16);
  test_resume(3, "none", ZINC_BF16);
  if (et_rank == 0 && et_failures == 0)
    printf("resume: bitwise identical at stages 0-3, offload none/cpu/nvme, f32/f16/bf16\n");
  test_reshard();
  test_reshard_up();
  test_damage();
  test_export(ZINC_F32);
  test_export(ZINC_BF16);
  test_export(ZINC_F16);
  test_tool();
  test_save_faults();
  if (et_failures == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", ckpt_root);
    shell(cmd);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "checkpoint tests FAILED\n" : "checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
