/*
 * test_ckpt_identity.c — every file a rank writes for itself in a
 * checkpoint says whose it is (engine/checkpoint/format.h, "Per-rank
 * files"), under mpirun at 2 and 3 ranks (1 rank: SKIPPED). The per-rank
 * files a save writes: the shard (rank_NNNNN.zshard), the error-feedback
 * residuals (rank_NNNNN.zef, quantized gradients with zeropp_loco_param)
 * and the compression method's state (rank_NNNNN.zms), each under
 * mp_rank_NN/ with model parallelism. For each kind:
 *  - rank 0's and the last rank's files swapped, every checksum (the
 *    manifest's entries and checksums.crc32c) rewritten to match;
 *  - the last rank's file replaced by the last rank's file of another save
 *    of the same run, checksums rewritten;
 * and with model_parallel_size 2 (at 2 ranks) the shards of the two
 * model-parallel parts swapped, checksums rewritten. Each is refused with
 * ZINC_ERR_CORRUPT on every rank within 10 s naming the file, and nothing
 * changes (weights, residuals, method state). Checkpoints written before
 * the files named their rank (no save_id in the manifest, no trailer after
 * the raw bytes, zeros in the shard trailer's identity) still load, every
 * rank's bytes as saved.
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/endian.h"
#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/checkpoint/mstate.h"
#include "engine/engine.h"
#include "engine/engine_test.h"
#include "engine/reduce/methods.h" /* the reducer's state: e->rd */

static char root[512];

static void shell(const char *cmd) {
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------------------------ the engine */

#define MS_BYTES 3000
static unsigned char ms_buf[MS_BYTES]; /* the method state this test registers */

static unsigned char gen(int seed, int rank, size_t k) {
  uint32_t h = (uint32_t)(seed * 7919 + rank * 104729) ^ (uint32_t)(k * 2654435761u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (unsigned char)h;
}

/* Residuals and method state of this rank, made from (seed, rank). */
static void fill(zinc_engine *e, int seed) {
  for (size_t k = 0; k < e->rd->cx_ef_bytes; k++) /* the cpu device: host memory */
    ((unsigned char *)e->rd->cx_ef)[k] = gen(seed, et_rank, k);
  for (size_t k = 0; k < MS_BYTES; k++)
    ms_buf[k] = gen(seed + 100, et_rank, k);
}

static int holds(zinc_engine *e, int seed) {
  for (size_t k = 0; k < e->rd->cx_ef_bytes; k++)
    if (((unsigned char *)e->rd->cx_ef)[k] != gen(seed, et_rank, k))
      return 0;
  for (size_t k = 0; k < MS_BYTES; k++)
    if (ms_buf[k] != gen(seed + 100, et_rank, k))
      return 0;
  return 1;
}

static zinc_engine *open_engine(et_model *m) {
  static et_run r;
  r = et_defaults();
  r.stage = 2;
  r.reduce_bucket = 300;
  r.zero_extra = "\"zero_quantized_gradients\": true, "
                 "\"zeropp_loco_param\": {\"err_beta\": 0.8, \"reset_T\": 1024},";
  r.extra = "\"zinc\": {\"comm_timeout_s\": 60, \"compression\": {\"scope\": \"all\", "
            "\"block_size\": 8}}";
  zinc_engine *e = et_open(&r, NULL, m);
  ET_CHECK(e->rd->cx_ef && e->rd->cx_ef_bytes > 0, "the engine keeps no error-feedback residuals");
  ET_OK(zinc_mstate_register(e, "test.state", ms_buf, MS_BYTES, 1));
  return e;
}

static int64_t total_numel(et_model *m) {
  int64_t total = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    total += zinc_param_numel(m->par[i]);
  return total;
}

static float *snapshot(et_model *m) {
  int64_t total = total_numel(m);
  float *v = malloc((size_t)total * 4), *at = v;
  for (int i = 0; i < TM_NPARAM; i++) {
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, at));
    at += zinc_param_numel(m->par[i]);
  }
  return v;
}

/* ------------------------------------------------ editing a checkpoint */

/* Rank 0: every crc32c and size of the checkpoint part at `dir` — the
 * manifest's entries of the shards, .zef and .zms files and the
 * checksums file's lines — made those of the files on disk now, as
 * someone who moved files would. Without identity (keep_id 0) the
 * manifest loses its save_id, as written before the files named their
 * rank. */
static void reseal(const char *dir, int keep_id) {
  char mpath[900], spath[900], fpath[1200];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
  snprintf(spath, sizeof spath, "%s/checksums.crc32c", dir);
  char *text = NULL, *sums = NULL;
  size_t len = 0, slen = 0;
  zinc_manifest *m = NULL;
  ET_OK(zinc_fs_read_all(mpath, &text, &len));
  ET_OK(zinc_manifest_parse(text, len, mpath, &m));
  zinc_manifest_file *lists[3] = {m->files, m->ef.present ? m->ef.files : NULL,
                                  m->ms.present ? m->ms.files : NULL};
  int counts[3] = {m->nfiles, m->ef.dp_size, m->ms.dp_size};
  for (int l = 0; l < 3; l++)
    for (int i = 0; lists[l] && i < counts[l]; i++) {
      snprintf(fpath, sizeof fpath, "%s/%s", dir, lists[l][i].name);
      ET_OK(zinc_fs_crc32c(fpath, &lists[l][i].crc32c, &lists[l][i].bytes));
    }
  if (!keep_id)
    m->save_id = 0;
  char *json = zinc_manifest_to_json(m);
  ET_OK(zinc_fs_write_atomic(mpath, json, strlen(json)));
  ET_OK(zinc_fs_read_all(spath, &sums, &slen));
  zinc_checksum_entry *ent = NULL;
  int n = 0;
  ET_OK(zinc_checksums_parse(sums, slen, spath, &ent, &n));
  const char *names[64];
  uint32_t crcs[64];
  int64_t bytes[64];
  for (int i = 0; i < n && i < 64; i++) {
    names[i] = ent[i].name;
    snprintf(fpath, sizeof fpath, "%s/%s", dir, ent[i].name);
    ET_OK(zinc_fs_crc32c(fpath, &crcs[i], &bytes[i]));
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

/* Rank 0: the part at `dir` as zinc wrote it before files named their
 * rank: .zef and .zms files without the trailer, shard trailers with
 * zeros where the identity is, no save_id. */
static void make_old(const char *dir, int ranks) {
  char path[4200];
  for (int r = 0; r < ranks; r++) {
    static const char *const ext[2] = {"zef", "zms"};
    for (int k = 0; k < 2; k++) {
      snprintf(path, sizeof path, "%s/rank_%05d.%s", dir, r, ext[k]);
      struct stat sb;
      ET_CHECK(stat(path, &sb) == 0 && truncate(path, sb.st_size - ZINC_RANK_TRAILER) == 0,
               "truncate %s", path);
    }
    snprintf(path, sizeof path, "%s/rank_%05d.zshard", dir, r);
    FILE *f = fopen(path, "r+b");
    unsigned char tr[ZINC_SHARD_TRAILER];
    ET_CHECK(f && fseek(f, -ZINC_SHARD_TRAILER, SEEK_END) == 0 &&
                 fread(tr, 1, sizeof tr, f) == sizeof tr, "read the trailer of %s", path);
    memset(tr + 44, 0, 16);
    zinc_le_put_u32(tr + 60, zinc_crc32c(0, tr, 60));
    ET_CHECK(fseek(f, -ZINC_SHARD_TRAILER, SEEK_END) == 0 && fwrite(tr, 1, sizeof tr, f) ==
                 sizeof tr, "write the trailer of %s", path);
    fclose(f);
  }
  reseal(dir, 0);
}

/* The load of dir/tag must be refused on every rank as CORRUPT naming
 * `file`, nothing changed. */
static void expect_refused(zinc_engine *e, et_model *m, const char *dir, const char *tag,
                           const char *file, const char *what) {
  float *before = snapshot(m);
  fill(e, 9);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, dir, tag);
  const char *needles[] = {file, NULL};
  et_expect_everywhere(st, ZINC_ERR_CORRUPT, MPI_Wtime() - t0, what, needles, -1);
  float *after = snapshot(m);
  ET_CHECK(!memcmp(before, after, (size_t)total_numel(m) * 4), "%s: the weights changed",
           what);
  ET_CHECK(holds(e, 9), "%s: the residuals or the method state changed", what);
  free(before);
  free(after);
}

static void test_kinds(void) {
  char dir[700], cmd[4000], what[200], file[64];
  snprintf(dir, sizeof dir, "%s/kinds", root);
  et_model m;
  zinc_engine *e = open_engine(&m);
  et_run r = et_defaults();
  r.stage = 2;
  ET_OK(et_steps(&m, &r, 0, 2));
  fill(e, 1);
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  float *saved = snapshot(&m);
  fill(e, 2);
  ET_OK(zinc_save_checkpoint(e, dir, "other")); /* another save of the same run */
  int last = et_world - 1;
  static const char *const ext[3] = {"zshard", "zef", "zms"};
  for (int k = 0; k < 3; k++) {
    /* rank 0's and the last rank's files swapped */
    snprintf(cmd, sizeof cmd, "rm -rf %s/swap && cp -r %s/good %s/swap && cd %s/swap && "
             "mv rank_00000.%s t && mv rank_%05d.%s rank_00000.%s && mv t rank_%05d.%s",
             dir, dir, dir, dir, ext[k], last, ext[k], ext[k], last, ext[k]);
    shell(cmd);
    snprintf(cmd, sizeof cmd, "%s/swap", dir);
    if (et_rank == 0)
      reseal(cmd, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(what, sizeof what, "the .%s files of rank 0 and rank %d swapped", ext[k], last);
    snprintf(file, sizeof file, "rank_00000.%s", ext[k]);
    expect_refused(e, &m, dir, "swap", file, what);
    /* the last rank's file from the other save */
    snprintf(cmd, sizeof cmd, "rm -rf %s/mixed && cp -r %s/good %s/mixed && "
             "cp %s/other/rank_%05d.%s %s/mixed/", dir, dir, dir, dir, last, ext[k], dir);
    shell(cmd);
    snprintf(cmd, sizeof cmd, "%s/mixed", dir);
    if (et_rank == 0)
      reseal(cmd, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(what, sizeof what, "rank %d's .%s file from another save", last, ext[k]);
    snprintf(file, sizeof file, "rank_%05d.%s", last, ext[k]);
    expect_refused(e, &m, dir, "mixed", file, what);
  }
  /* the checkpoint itself loads, every rank its own bytes */
  fill(e, 9);
  ET_OK(zinc_load_checkpoint(e, dir, "good"));
  ET_CHECK(holds(e, 1), "'good' did not restore this rank's residuals and method state");
  float *back = snapshot(&m);
  ET_CHECK(!memcmp(back, saved, (size_t)total_numel(&m) * 4), "'good' loads other weights");
  free(back);
  /* as written before the files named their rank: loads as then */
  snprintf(cmd, sizeof cmd, "rm -rf %s/old && cp -r %s/good %s/old", dir, dir, dir);
  shell(cmd);
  snprintf(cmd, sizeof cmd, "%s/old", dir);
  if (et_rank == 0)
    make_old(cmd, et_world);
  MPI_Barrier(MPI_COMM_WORLD);
  fill(e, 9);
  ET_OK(zinc_load_checkpoint(e, dir, "old"));
  ET_CHECK(holds(e, 1), "a checkpoint without identities did not restore this rank's "
           "residuals and method state");
  back = snapshot(&m);
  ET_CHECK(!memcmp(back, saved, (size_t)total_numel(&m) * 4),
           "a checkpoint without identities loads other weights");
  free(back);
  free(saved);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* model_parallel_size 2 at 2 ranks: the two parts' shards swapped. */
static void test_model_parallel(void) {
  char dir[700], cmd[4000];
  snprintf(dir, sizeof dir, "%s/mp", root);
  et_run r = et_defaults();
  r.stage = 1;
  r.model_parallel = 2;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 60}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  /* each part's weights its own */
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = zinc_param_numel(m.par[i]);
    float *v = malloc((size_t)n * 4);
    for (int64_t j = 0; j < n; j++)
      v[j] = (float)(zinc_mp_rank(e) * 100 + i) + (float)j / 256.0f;
    ET_OK(zinc_param_set_full(e, m.par[i], ZINC_STATE_PARAM, v));
    free(v);
  }
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  snprintf(cmd, sizeof cmd, "rm -rf %s/swap && cp -r %s/good %s/swap && cd %s/swap && "
           "mv mp_rank_00/rank_00000.zshard t && mv mp_rank_01/rank_00000.zshard "
           "mp_rank_00/ && mv t mp_rank_01/rank_00000.zshard", dir, dir, dir, dir);
  shell(cmd);
  for (int part = 0; part < 2; part++) {
    snprintf(cmd, sizeof cmd, "%s/swap/mp_rank_%02d", dir, part);
    if (et_rank == 0)
      reseal(cmd, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  float *before = snapshot(&m);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, dir, "swap");
  const char *needles[] = {"rank_00000.zshard", "model-parallel rank", NULL};
  et_expect_everywhere(st, ZINC_ERR_CORRUPT, MPI_Wtime() - t0,
                       "the shards of the two model-parallel parts swapped", needles, -1);
  float *after = snapshot(&m);
  ET_CHECK(!memcmp(before, after, (size_t)total_numel(&m) * 4),
           "the model-parallel swap changed the weights");
  free(before);
  free(after);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: test_ckpt_identity needs 2 or more ranks\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(root, sizeof root, "%s/ckpt_identity_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  shell(cmd);
  test_kinds();
  if (et_world == 2)
    test_model_parallel();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (!bad) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    shell(cmd);
  }
  if (et_rank == 0)
    printf(bad ? "per-rank file identity tests FAILED\n"
               : "per-rank file identity tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
