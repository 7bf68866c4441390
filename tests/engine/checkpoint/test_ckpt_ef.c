/*
 * test_ckpt_ef.c — the error-feedback residuals of quantized gradients
 * (zeropp_loco_param) in checkpoints, under mpirun with 2 or more ranks.
 * The residuals are filled through the engine internals with INT8 slices
 * this test encodes from values it generates (no training step: the
 * codecs and the all-to-all-v are not needed), then:
 *  - exact: a save loaded by an engine of the same layout gives every rank
 *    its bytes back (the .zef file on disk too), at stages 2 and 3;
 *  - damaged: a flipped byte in one .zef file is refused on every rank
 *    and nothing changes; zinc-ckpt lists the residuals and verifies the
 *    files (and finds the damaged one);
 *  - reshard: loaded at another block size, and by fewer ranks (a
 *    sub-communicator) at another stage: for chunk p of every unit the
 *    lowest rank other than p carries E, the sum over the old senders of
 *    the decoded residuals of each element (computed here from the
 *    generated slices, in double), within one INT8 rounding; every other
 *    slot is zero;
 *  - no residuals saved (compression off) into an engine that keeps them,
 *    or a weights-only load: they become zero; residuals saved into an engine without them (or a
 *    single rank): ignored, the load succeeds;
 *  - a save failing at any write of the last rank (ZINC_CKPT_FAULT; its
 *    .zef among them) fails on every rank, leaves latest and no partial
 *    directory, and latest still gives the residuals saved in it;
 *  - the memory estimator counts the residuals as the engine allocates
 *    them: (N - 1) INT8 slices of every trained unit's chunk, device
 *    gradient memory.
 */
#include <mpi.h>

#include "engine/memory/estimate.h"

#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/engine.h"
#include "engine/engine_test.h"
#include "engine/reduce/methods.h" /* the reducer's state: e->rd */

#define QGZ "\"zero_quantized_gradients\": true,"
#define LOCO "\"zeropp_loco_param\": {\"err_beta\": 0.8, \"reset_T\": 1024},"

static char root[512];
static char extras[4][160];

static et_run run_at(int stage, int block, int compress) {
  et_run r = et_defaults();
  r.stage = stage;
  r.reduce_bucket = 300;
  if (compress) {
    r.zero_extra = QGZ LOCO;
    snprintf(extras[block % 4], sizeof extras[0],
             "\"zinc\": {\"compression\": {\"scope\": \"all\", \"block_size\": %d}}", block);
    r.extra = extras[block % 4];
  }
  return r;
}

/* ------------------------------------------------ INT8 (codec.h layout) */

static size_t int8_bytes(int64_t n, int block) {
  int64_t nb = (n + block - 1) / block;
  return (size_t)((4 * nb + n + 15) / 16 * 16);
}

static double int8_value(const unsigned char *slice, int64_t n, int block, int64_t k) {
  int64_t nb = (n + block - 1) / block;
  float scale;
  memcpy(&scale, slice + 4 * (k / block), 4);
  return (double)((const signed char *)(slice + 4 * nb))[k] * (double)scale;
}

static float int8_scale(const unsigned char *slice, int block, int64_t k) {
  float scale;
  memcpy(&scale, slice + 4 * (k / block), 4);
  return scale;
}

/* A valid INT8 slice of n generated values (seeded by its coordinates):
 * scale = max|x| / 127, q = nearest integer. */
static void gen_slice(int seed, int sender, int ui, int p, int64_t n, int block,
                      unsigned char *out) {
  memset(out, 0, int8_bytes(n, block));
  int64_t nb = (n + block - 1) / block;
  signed char *q = (signed char *)(out + 4 * nb);
  for (int64_t b = 0; b < nb; b++) {
    int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
    double x[4096], m = 0;
    for (int64_t k = lo; k < hi; k++) {
      uint32_t h = (uint32_t)(seed * 7919 + sender * 104729 + ui * 1299709 + p * 15485863) ^
                   (uint32_t)(k * 2654435761u);
      h ^= h >> 13;
      h *= 0x5bd1e995u;
      h ^= h >> 15;
      x[k - lo] = ((double)(h % 20001) - 10000.0) * 1e-7 * (1 + (b % 3));
      m = fabs(x[k - lo]) > m ? fabs(x[k - lo]) : m;
    }
    float scale = (float)(m / 127.0);
    memcpy(out + 4 * b, &scale, 4);
    for (int64_t k = lo; k < hi; k++)
      q[k] = (signed char)lrint(m > 0 ? x[k - lo] / m * 127.0 : 0.0);
  }
}

static size_t slice_of(const zinc_engine *e, int ui) {
  return int8_bytes(e->units[ui].chunk, e->rd->cx_grad.block);
}

/* Fill this rank's residuals with generated slices; a host copy back. */
static unsigned char *fill(zinc_engine *e, int seed) {
  unsigned char *copy = malloc(e->rd->cx_ef_bytes + 1);
  for (int ui = 0; ui < e->ntrain_units; ui++)
    for (int p = 0; p < e->dp_size; p++) {
      if (p == e->dp_rank)
        continue;
      int slot = p < e->dp_rank ? p : p - 1;
      gen_slice(seed, e->dp_rank, ui, p, e->units[ui].chunk, e->rd->cx_grad.block,
                copy + e->rd->cx_ef_off[ui] + (size_t)slot * slice_of(e, ui));
    }
  memcpy(e->rd->cx_ef, copy, e->rd->cx_ef_bytes); /* the cpu device: host memory */
  return copy;
}

/* ---------------------------------------------------- the expected sums */

typedef struct {
  zinc_engine *e;
  double *sum;   /* per element of the parameter */
  int seed;
  unsigned char *buf;
} sum_ctx;

/* E of the saving engine's layout: for each piece (unit, owner r), the
 * generated slices of every sender s != r, decoded and added. */
static zinc_status add_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                             int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  sum_ctx *c = vctx;
  if (ui >= e->ntrain_units)
    return ZINC_OK;
  for (int s = 0; s < e->dp_size; s++) {
    if (s == r)
      continue;
    gen_slice(c->seed, s, ui, r, u->chunk, e->rd->cx_grad.block, c->buf);
    for (int64_t k = 0; k < len; k++)
      c->sum[param_off + k] += int8_value(c->buf, u->chunk, e->rd->cx_grad.block, chunk_off + k);
  }
  return ZINC_OK;
}

static double **expected_sums(zinc_engine *e, zinc_param **par, int npar, int seed) {
  double **sum = calloc((size_t)npar, sizeof *sum);
  int64_t most = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++)
    most = e->units[ui].chunk > most ? e->units[ui].chunk : most;
  sum_ctx c = {.e = e, .seed = seed, .buf = malloc(int8_bytes(most, e->rd->cx_grad.block))};
  for (int i = 0; i < npar; i++) {
    sum[i] = calloc((size_t)zinc_param_numel(par[i]), sizeof **sum);
    c.sum = sum[i];
    ET_OK(zinc_layout_for_each_piece(e, par[i], add_piece, &c));
  }
  free(c.buf);
  return sum;
}

static void free_sums(double **s, int npar) {
  for (int i = 0; i < npar; i++)
    free(s[i]);
  free(s);
}

/* What a loaded engine's slot holds, element by element, against E. */
typedef struct {
  double **sum;
  double *want;  /* per unit chunk (this rank's carried one), 0 where padding */
  int *seen;
  int bad;
  int64_t nonzero;
  const char *what;
} check_ctx;

static zinc_status want_piece(zinc_engine *e, const zinc_unit *u, int ui, int r, int64_t chunk_off,
                              int64_t param_off, int64_t len, void *vctx) {
  (void)u;
  check_ctx *c = ((check_ctx **)vctx)[0];
  int *target = (int *)((void **)vctx)[1];
  if (ui != target[0] || r != target[1])
    return ZINC_OK;
  int pi = target[2];
  for (int64_t k = 0; k < len; k++)
    c->want[chunk_off + k] = c->sum[pi][param_off + k];
  return ZINC_OK;
}

/* par[i]: the parameter whose sums are sum[i] (by name, whatever order
 * this engine registered them in). */
static void check_reshard(zinc_engine *e, zinc_param **par, int npar, double **sum,
                          const char *what) {
  check_ctx c = {.sum = sum, .what = what};
  int me = e->dp_rank;
  for (int ui = 0; ui < e->ntrain_units; ui++) {
    int64_t n = e->units[ui].chunk;
    int block = e->rd->cx_grad.block;
    for (int p = 0; p < e->dp_size; p++) {
      if (p == me)
        continue;
      int slot = p < me ? p : p - 1;
      const unsigned char *s =
          (const unsigned char *)e->rd->cx_ef + e->rd->cx_ef_off[ui] + (size_t)slot * slice_of(e, ui);
      int carries = me == (p == 0 ? 1 : 0);
      c.want = calloc((size_t)n, sizeof *c.want);
      for (int i = 0; i < npar && carries; i++) {
        int target[3] = {ui, p, i};
        void *args[2] = {&c, target};
        ET_OK(zinc_layout_for_each_piece(e, par[i], want_piece, args));
      }
      for (int64_t b0 = 0; b0 < n && c.bad < 5; b0 += block) {
        int64_t b1 = b0 + block < n ? b0 + block : n;
        double mx = 0;
        for (int64_t k = b0; k < b1; k++)
          mx = fabs(c.want[k]) > mx ? fabs(c.want[k]) : mx;
        double scale = int8_scale(s, block, b0);
        if (fabs(scale * 127.0 - mx) > 1e-5 * mx + 1e-30) {
          ET_CHECK(0, "%s: unit %d chunk %d sender %d block at %lld: scale x 127 = %g, want "
                   "max |E| %g", what, ui, p, me, (long long)b0, scale * 127.0, mx);
          c.bad++;
        }
        for (int64_t k = b0; k < b1 && c.bad < 5; k++) {
          double got = int8_value(s, n, block, k);
          if (fabs(got - c.want[k]) > 0.5001 * mx / 127.0 + 1e-30) {
            ET_CHECK(0, "%s: unit %d chunk %d element %lld on sender %d: %g, want %g", what, ui,
                     p, (long long)k, me, got, c.want[k]);
            c.bad++;
          }
          c.nonzero += got != 0;
        }
      }
      free(c.want);
    }
  }
  /* the carriers hold something: the sums are not all zero */
  int64_t total = c.nonzero;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  ET_CHECK(total > 0, "%s: every residual is zero after the reshard", what);
}

/* ------------------------------------------------------------- the tests */

/* zinc-ckpt on dir/tag: list shows the residuals, verify says ok or
 * names the .zef file. */
static void check_tool(const char *dir, const char *tag, int damaged, const char *what) {
#ifdef ZINC_CKPT_TOOL
  if (et_rank != 0)
    return;
  char cmd[2400];
  snprintf(cmd, sizeof cmd, "%s list %s %s | grep -q 'error-feedback residuals: %d files"
           ".* int8, block 8'", ZINC_CKPT_TOOL, dir, tag, et_world);
  ET_CHECK(damaged || system(cmd) == 0, "%s: zinc-ckpt list does not show the residuals: %s",
           what, cmd);
  snprintf(cmd, sizeof cmd, "%s verify %s %s 2>&1 | grep -q 'rank_%05d.zef: %s'", ZINC_CKPT_TOOL,
           dir, tag, et_world - 1, damaged ? "error-feedback file" : "ok");
  ET_CHECK(system(cmd) == 0, "%s: zinc-ckpt verify does not say the .zef file is %s: %s", what,
           damaged ? "damaged" : "ok", cmd);
#else
  (void)dir, (void)tag, (void)damaged, (void)what;
#endif
}

/* manifest.json of dir/tag with the character `skip` after the first
 * `key` (negative: inside it) replaced by c (0: another hex digit):
 * refused naming error_feedback. */
static void tamper(const char *dir, const char *tag, const char *key, int skip, char c) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/manifest.json", dir, tag);
  char *text = NULL;
  size_t len = 0;
  ET_OK(zinc_fs_read_all(path, &text, &len));
  char *at = strstr(text, key);
  ET_CHECK(at != NULL, "manifest %s has no %s", path, key);
  if (!at) {
    free(text);
    return;
  }
  char *x = at + (long)strlen(key) + skip;
  *x = c ? c : *x == '0' ? '1' : '0'; /* 0: another hex digit */
  zinc_manifest *m = NULL;
  zinc_status st = zinc_manifest_parse(text, len, path, &m);
  ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), "error_feedback"),
           "a manifest with %s changed parses: %s %s", key, zinc_status_name(st),
           zinc_last_error());
  zinc_manifest_free(m);
  free(text);
}

static void test_exact(int stage) {
  et_run r = run_at(stage, 8, 1);
  char dir[700], what[120];
  snprintf(dir, sizeof dir, "%s/exact_s%d", root, stage);
  snprintf(what, sizeof what, "exact restore at stage %d", stage);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_CHECK(e->rd->cx_ef != NULL && e->rd->cx_ef_bytes > 0, "%s: the engine keeps no residuals", what);
  unsigned char *saved = fill(e, 11 + stage);
  ET_OK(zinc_save_checkpoint(e, dir, "ef"));
  size_t bytes = e->rd->cx_ef_bytes;
  int units = e->ntrain_units;
  /* the manifest describes the layout, the file holds the bytes */
  zinc_ckpt_dir *d = NULL;
  ET_OK(zinc_ckpt_dir_open(dir, "ef", &d));
  const zinc_manifest_ef *ef = &d->manifest->ef;
  ET_CHECK(ef->present && ef->block == 8 && ef->dp_size == et_world && ef->nunits == units,
           "%s: manifest error_feedback (present %d block %d dp_size %d units %d)", what,
           ef->present, ef->block, ef->dp_size, ef->nunits);
  for (int ui = 0; ef->present && ui < units && ui < ef->nunits; ui++)
    ET_CHECK(ef->units[ui].shard_offset == e->units[ui].shard_offset &&
             ef->units[ui].chunk == e->units[ui].chunk, "%s: manifest unit %d", what, ui);
  char path[1024];
  snprintf(path, sizeof path, "%s/ef/rank_%05d.zef", dir, et_rank);
  FILE *f = fopen(path, "rb");
  unsigned char *disk = malloc(bytes + ZINC_RANK_TRAILER + 1);
  size_t got = f ? fread(disk, 1, bytes + ZINC_RANK_TRAILER + 1, f) : 0;
  if (f)
    fclose(f);
  ET_CHECK(got == bytes + ZINC_RANK_TRAILER && memcmp(disk, saved, bytes) == 0, "%s: %s holds "
           "%zu bytes, not the rank's %zu residual bytes and the identity trailer", what, path,
           got, bytes);
  /* the trailer names this rank of this save (format.h, "Per-rank files") */
  int kind = 0;
  zinc_rank_file_id id;
  uint64_t payload = 0;
  ET_CHECK(got == bytes + ZINC_RANK_TRAILER &&
               zinc_rank_trailer_decode(disk + bytes, ZINC_RANK_TRAILER, path, &kind, &id,
                                        &payload) == ZINC_OK &&
               kind == ZINC_RANK_FILE_EF && id.rank == (uint32_t)et_rank &&
               id.world == (uint32_t)et_world && payload == bytes &&
               id.save_id == d->manifest->save_id && id.save_id != 0,
           "%s: %s's identity trailer does not name rank %d of %d of save %016llx: %s", what,
           path, et_rank, et_world, (unsigned long long)d->manifest->save_id, zinc_last_error());
  free(disk);
  zinc_ckpt_dir_close(d);
  check_tool(dir, "ef", 0, what);
  if (et_rank == 0 && stage == 2) {
    tamper(dir, "ef", "\"layout_crc32c\": \"", 0, 'x');  /* not hex */
    tamper(dir, "ef", "\"layout_crc32c\": \"", 7, 0);    /* another crc */
    tamper(dir, "ef", "\"codec\": \"int", 0, '4');      /* int4 */
    tamper(dir, "ef", "\"block\": ", 0, '3');            /* 3, not 8: other sizes */
    tamper(dir, "ef", "rank_00000.zef", -5, '9');         /* named for another rank */
  }
  et_model_free(&m);
  zinc_engine_destroy(e);

  e = et_open(&r, NULL, &m);
  memset(e->rd->cx_ef, 0x5a, e->rd->cx_ef_bytes);
  ET_OK(zinc_load_checkpoint(e, dir, "ef"));
  ET_CHECK(e->rd->cx_ef_bytes == bytes && memcmp(e->rd->cx_ef, saved, bytes) == 0,
           "%s: the loaded residuals differ from the saved bytes", what);
  /* a damaged .zef: refused on every rank, nothing changed */
  MPI_Barrier(MPI_COMM_WORLD);
  if (et_rank == 0) {
    snprintf(path, sizeof path, "%s/ef/rank_%05d.zef", dir, et_world - 1);
    FILE *g = fopen(path, "r+b");
    int c0 = fgetc(g);
    fseek(g, 0, SEEK_SET);
    fputc(c0 ^ 1, g);
    fclose(g);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_tool(dir, "ef", 1, what);
  memset(e->rd->cx_ef, 0x33, e->rd->cx_ef_bytes);
  zinc_status st = zinc_load_checkpoint(e, dir, "ef");
  ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), ".zef"),
           "%s: a damaged .zef gave %s: %s", what, zinc_status_name(st), zinc_last_error());
  int same = 1;
  for (size_t k = 0; k < e->rd->cx_ef_bytes; k++)
    same &= ((unsigned char *)e->rd->cx_ef)[k] == 0x33;
  ET_CHECK(same, "%s: a refused load changed the residuals", what);
  et_model_free(&m);
  zinc_engine_destroy(e);
  free(saved);
}

/* Save at every rank, stage 2, block 8; load with `block` at `stage` over
 * the first `ranks` ranks. */
static void test_reshard(int ranks, int stage, int block) {
  et_run r = run_at(2, 8, 1);
  char dir[700], what[160];
  snprintf(dir, sizeof dir, "%s/reshard_%d_s%d_b%d", root, ranks, stage, block);
  snprintf(what, sizeof what, "reshard from %d ranks, stage 2, block 8 to %d ranks, stage %d, "
           "block %d", et_world, ranks, stage, block);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int seed = 100 + ranks + block;
  free(fill(e, seed));
  ET_OK(zinc_save_checkpoint(e, dir, "ef"));
  double **sum = expected_sums(e, m.par, TM_NPARAM, seed);
  et_model_free(&m);
  zinc_engine_destroy(e);

  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, et_rank < ranks ? 0 : MPI_UNDEFINED, et_rank, &sub);
  if (sub != MPI_COMM_NULL) {
    et_run r2 = run_at(stage, block, 1);
    zinc_engine *e2 = et_create(&r2, &sub);
    et_model m2;
    ET_OK(et_build(&m2, e2, &r2));
    memset(e2->rd->cx_ef, 0x77, e2->rd->cx_ef_bytes);
    ET_OK(zinc_load_checkpoint(e2, dir, "ef"));
    check_reshard(e2, m2.par, TM_NPARAM, sum, what);
    et_model_free(&m2);
    zinc_engine_destroy(e2);
    MPI_Comm_free(&sub);
  } else {
    int64_t zero = 0; /* check_reshard's sum over the world */
    MPI_Allreduce(MPI_IN_PLACE, &zero, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  }
  free_sums(sum, TM_NPARAM);
}

/* Two parameters of one size in one module, registered a, b or b, a: */
static zinc_engine *open_pair(int swapped, zinc_param **par) {
  et_run r = run_at(2, 8, 1);
  r.reduce_bucket = 1000000;
  zinc_engine *e = et_create(&r, NULL);
  zinc_module *m = zinc_module_add(e, "pair");
  int64_t n[1] = {300};
  for (int k = 0; k < 2; k++) {
    int i = swapped ? 1 - k : k;
    par[i] = zinc_param_add(e, m, i ? "b" : "a", ZINC_F32, 1, n);
  }
  ET_OK(zinc_engine_build(e, NULL, NULL));
  return e;
}

/* the same units holding other elements: resharded, not copied */
static void test_reordered(void) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/reordered", root);
  const char *what = "a model registered in another order (equal units)";
  zinc_param *pa[2], *pb[2];
  zinc_engine *e = open_pair(0, pa);
  free(fill(e, 77));
  ET_OK(zinc_save_checkpoint(e, dir, "ef"));
  double **sum = expected_sums(e, pa, 2, 77);
  int nunits = e->ntrain_units;
  zinc_unit u0 = e->units[0];
  zinc_engine_destroy(e);
  e = open_pair(1, pb);
  ET_CHECK(e->ntrain_units == nunits && e->units[0].chunk == u0.chunk &&
           e->units[0].shard_offset == u0.shard_offset, "%s: the units differ", what);
  ET_OK(zinc_load_checkpoint(e, dir, "ef"));
  check_reshard(e, pb, 2, sum, what);
  zinc_engine_destroy(e);
  free_sums(sum, 2);
}

/* A save without residuals into an engine with them (zero), and one with
 * them into an engine without (ignored). */
static void test_absent(void) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/absent", root);
  et_run plain = run_at(2, 8, 0), comp = run_at(2, 8, 1);
  et_model m;
  zinc_engine *e = et_open(&plain, NULL, &m);
  ET_CHECK(e->rd->cx_ef == NULL, "an engine without compression keeps residuals");
  ET_OK(zinc_save_checkpoint(e, dir, "plain"));
  et_model_free(&m);
  zinc_engine_destroy(e);
  zinc_ckpt_dir *d = NULL;
  ET_OK(zinc_ckpt_dir_open(dir, "plain", &d));
  ET_CHECK(!d->manifest->ef.present, "a save without residuals lists error_feedback");
  zinc_ckpt_dir_close(d);

  e = et_open(&comp, NULL, &m);
  free(fill(e, 5));
  ET_OK(zinc_load_checkpoint(e, dir, "plain"));
  int zero = 1;
  for (size_t k = 0; k < e->rd->cx_ef_bytes; k++)
    zero &= ((unsigned char *)e->rd->cx_ef)[k] == 0;
  ET_CHECK(zero, "a checkpoint without residuals left the engine's residuals nonzero");
  free(fill(e, 6));
  ET_OK(zinc_save_checkpoint(e, dir, "comp"));
  /* a weights-only load starts the optimizer afresh: residuals zero too */
  free(fill(e, 7));
  ET_OK(zinc_load_checkpoint_ex(e, dir, "comp", ZINC_LOAD_WEIGHTS_ONLY));
  zero = 1;
  for (size_t k = 0; k < e->rd->cx_ef_bytes; k++)
    zero &= ((unsigned char *)e->rd->cx_ef)[k] == 0;
  ET_CHECK(zero, "a weights-only load kept residuals");
  et_model_free(&m);
  zinc_engine_destroy(e);

  e = et_open(&plain, NULL, &m);
  ET_OK(zinc_load_checkpoint(e, dir, "comp"));
  et_model_free(&m);
  zinc_engine_destroy(e);
  /* a single rank keeps none either */
  MPI_Comm one;
  MPI_Comm_split(MPI_COMM_WORLD, et_rank, 0, &one);
  zinc_engine *e1 = et_create(&comp, &one);
  et_model m1;
  ET_OK(et_build(&m1, e1, &comp));
  ET_CHECK(e1->rd->cx_ef == NULL, "a single-rank engine keeps residuals");
  ET_OK(zinc_load_checkpoint(e1, dir, "comp"));
  et_model_free(&m1);
  zinc_engine_destroy(e1);
  MPI_Comm_free(&one);
}

static void test_save_faults(void) {
  et_run r = run_at(2, 8, 1);
  char dir[700], cmd[2400];
  snprintf(dir, sizeof dir, "%s/faults", root);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  unsigned char *good = fill(e, 21);
  ET_OK(zinc_save_checkpoint(e, dir, "good"));
  free(fill(e, 22));
  int zef = 0, n;
  for (n = 1; n < 1000; n++) {
    char spec[32];
    snprintf(spec, sizeof spec, "EIO@%d", n);
    if (et_rank == et_world - 1)
      setenv("ZINC_CKPT_FAULT", spec, 1);
    zinc_status st = zinc_save_checkpoint(e, dir, "bad");
    unsetenv("ZINC_CKPT_FAULT");
    if (st == ZINC_OK)
      break;
    zef |= strstr(zinc_last_error(), ".zef") != NULL;
    snprintf(cmd, sizeof cmd, "test \"$(cat %s/latest)\" = good && ! test -e %s/.bad.partial",
             dir, dir);
    if (et_rank == 0)
      ET_CHECK(system(cmd) == 0, "a save failing at write %d left latest changed or a partial "
               "directory", n);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ET_CHECK(zef, "none of the %d failing writes was of the .zef file", n - 1);
  ET_OK(zinc_load_checkpoint(e, dir, "good"));
  ET_CHECK(memcmp(e->rd->cx_ef, good, e->rd->cx_ef_bytes) == 0, "'good' lost its residuals");
  free(good);
  et_model_free(&m);
  zinc_engine_destroy(e);
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

static void test_estimate(int stage, int block) {
  et_run comp = run_at(stage, block, 1), plain = run_at(stage, block, 0);
  et_model m;
  zinc_engine *e = et_open(&comp, NULL, &m);
  uint64_t want = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++)
    want += (uint64_t)(et_world - 1) * int8_bytes(e->units[ui].chunk, block);
  ET_CHECK(e->rd->cx_ef_bytes == want, "stage %d block %d: the engine's residuals are %zu bytes, "
           "want %llu", stage, block, e->rd->cx_ef_bytes, (unsigned long long)want);
  et_model_free(&m);
  zinc_engine_destroy(e);
  uint64_t with = estimate_grads(&comp), without = estimate_grads(&plain);
  ET_CHECK(with - without == want, "stage %d block %d: the estimator's device gradient bytes "
           "grew by %llu with error feedback, want %llu", stage, block,
           (unsigned long long)(with - without), (unsigned long long)want);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: error-feedback residuals exist with 2 or more data-parallel ranks\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(root, sizeof root, "%s/ckpt_ef_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_exact(2);
  test_exact(3);
  test_reshard(et_world, 2, 16);  /* another block size */
  if (et_world >= 3)
    test_reshard(et_world - 1, 3, 8); /* fewer ranks, another stage */
  test_absent();
  test_reordered();
  test_save_faults();
  test_estimate(1, 8);
  test_estimate(3, 256);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf(bad ? "error-feedback checkpoint tests FAILED\n"
               : "error-feedback checkpoint tests passed at %d ranks\n", et_world);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
