/*
 * test_ckpt_agree.c — the ranks of a checkpoint load or export agree, under
 * mpirun at 2 and 3 ranks (one rank: SKIPPED). The comm timeout is 60 s, so
 * a rank left waiting in a collective shows as a slow call or a COMM error;
 * every failure must reach every rank within 10 s.
 *  - views: each rank loads from its own copy of the checkpoint directory
 *    (node-local disks, a stale NFS cache) and one rank's `latest` names an
 *    older save; or one rank passes another tag: every rank fails with
 *    ZINC_ERR_INVALID naming that rank and the tag and step each rank read,
 *    and the engine's state is unchanged (a later load of the same view
 *    works);
 *  - read fault: a shard read fails on the last rank after the checks
 *    passed (ZINC_CKPT_READ_FAULT): every rank returns ZINC_ERR_IO naming
 *    that rank, no rank waits in the parameter gathers, and the engine
 *    stops as include/zinc.h says: a later step and save are refused with
 *    the same status, destroy works, and a new engine loads the checkpoint;
 *  - crafted: a checkpoint edited so that every checksum still matches
 *    (step INT64_MAX; two file entries swapped) and files far larger than
 *    zinc writes (a 1 GiB latest or manifest, sparse) are refused with
 *    ZINC_ERR_CORRUPT naming the field, the file or the limit;
 *  - export: an allocation fails on the last rank inside
 *    zinc_param_get_full during zinc_export_safetensors: NOMEM on every
 *    rank naming that rank, no file left at the path.
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/engine.h"
#include "engine/engine_test.h"
#include "engine/support.h"


static char root[512];

static void shell(const char *cmd) {
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
}

static et_run run_for(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 60}";
  return r;
}

static float *snapshot(et_model *m, const et_run *r) {
  int64_t total = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    total += tm_numel(&r->shape, i);
  float *v = malloc((size_t)total * 4), *p = v;
  for (int i = 0; i < TM_NPARAM; i++) {
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, p));
    p += tm_numel(&r->shape, i);
  }
  return v;
}

static int same(const et_run *r, const float *a, const float *b) {
  int64_t total = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    total += tm_numel(&r->shape, i);
  return memcmp(a, b, (size_t)total * 4) == 0;
}

/* Ranks that read different checkpoints refuse together. */
static void test_views(int stage) {
  et_run r = run_for(stage);
  char dir[600], cmd[4096], what[160];
  snprintf(dir, sizeof dir, "%s/views_s%d", root, stage);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 5));
  ET_OK(zinc_save_checkpoint(e, dir, "step5"));
  ET_OK(et_steps(&a, &r, 5, 8));
  ET_OK(zinc_save_checkpoint(e, dir, "step8"));
  float *before = snapshot(&a, &r);
  /* a copy per rank; the last rank's latest still names step5 */
  snprintf(cmd, sizeof cmd, "for k in $(seq 0 %d); do cp -r %s %s_r$k; done && "
           "printf 'step5\\n' > %s_r%d/latest", et_world - 1, dir, dir, dir, et_world - 1);
  shell(cmd);
  char mine[700];
  snprintf(mine, sizeof mine, "%s_r%d", dir, et_rank);
  char last_rank[32];
  snprintf(last_rank, sizeof last_rank, "rank %d", et_world - 1);
  const char *needles[] = {"rank 0", last_rank, "step5", "step8", NULL};
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, mine, NULL);
  snprintf(what, sizeof what, "stage %d: rank %d's latest names an older save", stage,
           et_world - 1);
  et_expect_everywhere(st, ZINC_ERR_INVALID, MPI_Wtime() - t0, what, needles, -1);
  float *after = snapshot(&a, &r);
  ET_CHECK(same(&r, before, after), "%s: the engine's state changed", what);
  free(after);
  /* one rank passes another tag */
  t0 = MPI_Wtime();
  st = zinc_load_checkpoint(e, dir, et_rank == et_world - 1 ? "step5" : "step8");
  snprintf(what, sizeof what, "stage %d: rank %d passes another tag", stage, et_world - 1);
  et_expect_everywhere(st, ZINC_ERR_INVALID, MPI_Wtime() - t0, what, needles, -1);
  /* the engine goes on and a consistent view loads */
  ET_OK(et_steps(&a, &r, 8, 9));
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  after = snapshot(&a, &r);
  ET_CHECK(same(&r, before, after), "stage %d: a consistent load after the refusals differs",
           stage);
  free(after);
  free(before);
  et_model_free(&a);
  zinc_engine_destroy(e);
}

/* A shard read fails on the last rank after the checks passed. */
static void test_read_fault(int stage) {
  et_run r = run_for(stage);
  char dir[600], what[160];
  snprintf(dir, sizeof dir, "%s/readfault_s%d", root, stage);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 3));
  ET_OK(zinc_save_checkpoint(e, dir, "t"));
  float *saved = snapshot(&a, &r);
  et_model_free(&a);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &a);
  if (et_rank == et_world - 1)
    setenv("ZINC_CKPT_READ_FAULT", "EIO@1", 1);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, dir, NULL);
  double dt = MPI_Wtime() - t0;
  unsetenv("ZINC_CKPT_READ_FAULT");
  char last_rank[32];
  snprintf(last_rank, sizeof last_rank, "rank %d", et_world - 1);
  const char *needles[] = {"Input/output error", "rank_0000", NULL};
  snprintf(what, sizeof what, "stage %d: a shard read fails on rank %d", stage, et_world - 1);
  et_expect_everywhere(st, ZINC_ERR_IO, dt, what, needles, -1);
  if (et_rank != et_world - 1)
    ET_CHECK(strstr(zinc_last_error(), last_rank), "%s: the message does not name %s: %s", what,
             last_rank, zinc_last_error());
  /* include/zinc.h: after its checks passed, a failed load stops the engine */
  st = et_steps(&a, &r, 0, 1);
  ET_CHECK(st == ZINC_ERR_IO && strstr(zinc_last_error(), "stopped"),
           "%s: a step after it returned %s: %s", what, zinc_status_name(st), zinc_last_error());
  st = zinc_save_checkpoint(e, dir, "after");
  ET_CHECK(st == ZINC_ERR_IO, "%s: a save after it returned %s", what, zinc_status_name(st));
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* a new engine loads it */
  e = et_open(&r, NULL, &a);
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  float *back = snapshot(&a, &r);
  ET_CHECK(same(&r, saved, back), "%s: a new engine loads other values", what);
  free(back);
  free(saved);
  et_model_free(&a);
  zinc_engine_destroy(e);
}

/* Rank 0 rewrites dir/tag's manifest through `edit` and fixes the checksums
 * file, so that the checkpoint is self-consistent. */
static void craft(const char *dir, const char *tag, void (*edit)(zinc_manifest *)) {
  if (et_rank == 0) {
    char mpath[900], spath[900];
    snprintf(mpath, sizeof mpath, "%s/%s/manifest.json", dir, tag);
    snprintf(spath, sizeof spath, "%s/%s/checksums.crc32c", dir, tag);
    char *text = NULL, *sums = NULL;
    size_t len = 0, slen = 0;
    zinc_manifest *m = NULL;
    zinc_checksum_entry *ent = NULL;
    int n = 0;
    ET_OK(zinc_fs_read_all(mpath, &text, &len));
    ET_OK(zinc_manifest_parse(text, len, mpath, &m));
    edit(m);
    char *json = zinc_manifest_to_json(m);
    ET_OK(zinc_fs_write_atomic(mpath, json, strlen(json)));
    ET_OK(zinc_fs_read_all(spath, &sums, &slen));
    ET_OK(zinc_checksums_parse(sums, slen, spath, &ent, &n));
    const char *names[64];
    uint32_t crcs[64];
    int64_t bytes[64];
    for (int i = 0; i < n && i < 64; i++) {
      names[i] = ent[i].name;
      crcs[i] = ent[i].crc;
      bytes[i] = ent[i].bytes;
      if (!strcmp(ent[i].name, "manifest.json")) {
        crcs[i] = zinc_crc32c(0, json, strlen(json));
        bytes[i] = (int64_t)strlen(json);
      }
      for (int f = 0; f < m->nfiles; f++) /* the files' entries follow the manifest */
        if (!strcmp(ent[i].name, m->files[f].name)) {
          crcs[i] = m->files[f].crc32c;
          bytes[i] = m->files[f].bytes;
        }
    }
    char *out = zinc_checksums_format(names, crcs, bytes, n);
    ET_OK(zinc_fs_write_atomic(spath, out, strlen(out)));
    free(out);
    free(json);
    free(ent);
    free(sums);
    free(text);
    zinc_manifest_free(m);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void edit_step(zinc_manifest *m) { m->step = INT64_MAX; }

static void edit_swap(zinc_manifest *m) {
  zinc_manifest_file t = m->files[0];
  m->files[0] = m->files[1];
  m->files[1] = t;
}

static void test_crafted(void) {
  et_run r = run_for(2);
  char dir[600], cmd[4000];
  snprintf(dir, sizeof dir, "%s/crafted", root);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 2));
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  float *before = snapshot(&a, &r);
  struct {
    const char *name, *prepare, *needle;
    void (*edit)(zinc_manifest *);
  } cases[] = {
      {"step INT64_MAX", NULL, "step", edit_step},
      {"two file entries swapped", NULL, "files[0]", edit_swap},
      {"a 1 GiB latest", "truncate -s 1G %s/latest", "more than", NULL},
      {"a 1 GiB manifest", "truncate -s 1G %s/bad/manifest.json", "more than", NULL},
  };
  for (int k = 0; k < 4; k++) {
    snprintf(cmd, sizeof cmd, "rm -rf %s/bad && cp -r %s/good %s/bad && printf 'good\\n' > "
             "%s/latest", dir, dir, dir, dir);
    shell(cmd);
    if (cases[k].edit)
      craft(dir, "bad", cases[k].edit);
    if (cases[k].prepare) {
      char c2[1400];
      snprintf(c2, sizeof c2, cases[k].prepare, dir);
      shell(c2);
    }
    double t0 = MPI_Wtime();
    zinc_status st = zinc_load_checkpoint(e, dir, k == 2 ? NULL : "bad");
    const char *needles[] = {cases[k].needle, NULL};
    et_expect_everywhere(st, ZINC_ERR_CORRUPT, MPI_Wtime() - t0, cases[k].name, needles, -1);
    float *after = snapshot(&a, &r);
    ET_CHECK(same(&r, before, after), "%s: the engine's state changed", cases[k].name);
    free(after);
  }
  free(before);
  et_model_free(&a);
  zinc_engine_destroy(e);
}

/* An allocation fails on the last rank inside zinc_param_get_full while
 * zinc_export_safetensors gathers a parameter. */
static void test_export_nomem(int stage) {
  et_run r = run_for(stage);
  char path[600], what[160];
  snprintf(path, sizeof path, "%s/export_s%d.safetensors", root, stage);
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 2));
  if (et_rank == et_world - 1)
    zinc_engine_inject_alloc_fault(e, 2);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_export_safetensors(e, path, -1);
  double dt = MPI_Wtime() - t0;
  zinc_engine_inject_alloc_fault(e, 0);
  char last_rank[32];
  snprintf(last_rank, sizeof last_rank, "rank %d", et_world - 1);
  const char *needles[] = {"zinc_param_get_full", NULL};
  snprintf(what, sizeof what, "stage %d: export with an allocation failing on rank %d", stage,
           et_world - 1);
  et_expect_everywhere(st, ZINC_ERR_NOMEM, dt, what, needles, -1);
  if (et_rank != et_world - 1)
    ET_CHECK(strstr(zinc_last_error(), last_rank), "%s: the message does not name %s: %s", what,
             last_rank, zinc_last_error());
  ET_CHECK(access(path, F_OK) != 0, "%s: %s exists", what, path);
  /* nothing was changed: the export works afterwards */
  ET_OK(zinc_export_safetensors(e, path, -1));
  et_model_free(&a);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: test_ckpt_agree needs 2 or more ranks\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(root, sizeof root, "%s/ckpt_agree_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  shell(cmd);
  const char *only = getenv("CKPT_AGREE_ONLY");
  if (!only || strchr(only, 'c'))
    test_crafted();
  for (int stage = 0; stage <= 3; stage++) {
    if (!only || strchr(only, 'v'))
      test_views(stage);
    if (!only || strchr(only, 'r'))
      test_read_fault(stage);
    if (!only || strchr(only, 'x'))
      test_export_nomem(stage);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (!bad) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    shell(cmd);
  }
  if (et_rank == 0)
    printf(bad ? "checkpoint agreement tests FAILED\n"
               : "checkpoint agreement tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
