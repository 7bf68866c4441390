/*
 * test_load_weights_agree.c — zinc_load_safetensors when the ranks do not
 * read the same thing, under mpirun at 2 and 3 ranks (1 rank: SKIPPED).
 * Every rank passes its own copy of one exported file (a node-local disk:
 * the path differs per rank), and:
 *  - the copies are identical: the load works, bitwise, at every stage;
 *  - the last rank's copy has other bytes (the same header): one element,
 *    in a piece that rank loads or in a piece rank 0 loads, or every
 *    value (another fine-tune of the model), at stages 0-3;
 *  - the last rank's copy is another file (another header);
 *  - the name map answers otherwise on the last rank (another tensor of
 *    the same shape, or leaving a parameter alone);
 * each refused with ZINC_ERR_INVALID on every rank within 10 s, naming
 * the last rank (and the tensor or the parameter), with the weights and
 * the report untouched and the engine usable (the identical copies load
 * afterwards).
 */
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/endian.h"
#include "engine/checkpoint/ckpt_mpi.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/engine.h"
#include "engine/engine_test.h"

#define NP 4
static const char *const pname[NP][2] = {{"a", "w"}, {"a", "b"}, {"b", "w"}, {"b", "v"}};
static const int64_t pshape[NP][2] = {{40, 8}, {40, 1}, {8, 40}, {8, 40}};

static int64_t numel(int i) { return pshape[i][0] * pshape[i][1]; }

typedef struct {
  zinc_engine *e;
  zinc_param *p[NP];
} model;

static zinc_status init_values(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  float seed = *(const float *)ctx;
  (void)p;
  for (int64_t j = 0; j < n; j++)
    dst[j] = seed + (float)(j % 50) / 64.0f;
  return ZINC_OK;
}

static void open_model(model *m, int stage, float seed) {
  char json[320];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
           "{\"stage\": %d}, \"zinc\": {\"comm_timeout_s\": 60}}", stage);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  ET_OK(zinc_engine_create(cfg, &opt, &m->e));
  zinc_config_free(cfg);
  zinc_module *mods[2] = {zinc_module_add(m->e, "a"), zinc_module_add(m->e, "b")};
  for (int i = 0; i < NP; i++) {
    m->p[i] = zinc_param_add(m->e, mods[i / 2], pname[i][1], ZINC_F32, 2, pshape[i]);
    ET_CHECK(m->p[i], "register %s.%s: %s", pname[i][0], pname[i][1], zinc_last_error());
  }
  ET_OK(zinc_engine_build(m->e, init_values, &seed));
}

/* Every parameter's value, one array after the other. */
static float *snapshot(model *m) {
  int64_t total = 0;
  for (int i = 0; i < NP; i++)
    total += numel(i);
  float *v = malloc((size_t)total * 4), *at = v;
  for (int i = 0; i < NP; i++) {
    ET_OK(zinc_param_get_full(m->e, m->p[i], ZINC_STATE_PARAM, at));
    at += numel(i);
  }
  return v;
}

static int same(const float *a, const float *b) {
  int64_t total = 0;
  for (int i = 0; i < NP; i++)
    total += numel(i);
  return memcmp(a, b, (size_t)total * 4) == 0;
}

static char root[512];

/* Rank 0 exports distinct values (seed 0: every element its own); the
 * reference values come back in *want. */
static void export_file(const char *path, float **want) {
  model src;
  open_model(&src, 0, 0.0f);
  for (int i = 0; i < NP; i++) {
    float *v = malloc((size_t)numel(i) * 4);
    for (int64_t j = 0; j < numel(i); j++)
      v[j] = (float)(i + 1) + (float)j / 1024.0f;
    ET_OK(zinc_param_set_full(src.e, src.p[i], ZINC_STATE_PARAM, v));
    free(v);
  }
  *want = snapshot(&src);
  ET_OK(zinc_export_safetensors(src.e, path, -1));
  zinc_engine_destroy(src.e);
}

/* Byte offset in `path` of element j of tensor `name`. */
static long element_offset(const char *path, const char *name, int64_t j) {
  zinc_safetensors_reader *r = NULL;
  ET_OK(zinc_safetensors_reader_open(path, &r));
  int t = zinc_safetensors_reader_find(r, name);
  ET_CHECK(t >= 0, "%s has no tensor %s", path, name);
  long begin = (long)zinc_safetensors_reader_entry(r, t)->begin;
  zinc_safetensors_reader_close(r);
  FILE *f = fopen(path, "rb");
  unsigned char len[8];
  ET_CHECK(f && fread(len, 1, 8, f) == 8, "read %s", path);
  fclose(f);
  return 8 + (long)zinc_le_get_u64(len) + begin + 4 * (long)j;
}

/* Every f32 of the data area (the file zinc exported holds only f32)
 * plus one: another fine-tune of the same model, the same header. */
static void shift_all(const char *path) {
  FILE *f = fopen(path, "r+b");
  unsigned char len[8];
  ET_CHECK(f && fread(len, 1, 8, f) == 8, "read %s", path);
  long at = 8 + (long)zinc_le_get_u64(len);
  float v;
  while (fseek(f, at, SEEK_SET) == 0 && fread(&v, 4, 1, f) == 1) {
    v += 1.0f;
    ET_CHECK(fseek(f, at, SEEK_SET) == 0 && fwrite(&v, 4, 1, f) == 1, "write %s", path);
    at += 4;
  }
  fclose(f);
}

static void poke_float(const char *path, long at, float value) {
  FILE *f = fopen(path, "r+b");
  ET_CHECK(f && fseek(f, at, SEEK_SET) == 0 && fwrite(&value, 4, 1, f) == 1, "write %s", path);
  fclose(f);
}

/* The first element of parameter i that data-parallel rank `owner` owns
 * at the engine's stage (its partition at stages 1-3). */
typedef struct {
  int owner;
  int64_t first;
} owned;

static zinc_status first_owned(zinc_engine *e, const zinc_unit *u, int ui, int r,
                               int64_t chunk_off, int64_t param_off, int64_t len, void *ctx) {
  (void)e;
  (void)u;
  (void)ui;
  (void)chunk_off;
  owned *o = ctx;
  if (r == o->owner && len > 0 && o->first < 0)
    o->first = param_off + len / 2;
  return ZINC_OK;
}

/* A parameter (*i) and an element of it that rank `owner` owns. */
static int64_t element_of(model *m, int owner, int *i) {
  owned o = {owner, -1};
  for (*i = NP - 1; *i >= 0; (*i)--) {
    ET_OK(zinc_layout_for_each_piece(m->e, m->p[*i], first_owned, &o));
    if (o.first >= 0)
      return o.first;
  }
  ET_CHECK(0, "rank %d owns no element of any parameter", owner);
  *i = 0;
  return 0;
}

/* Every rank's load of its own copy (copies[rank]) must be refused as
 * INVALID naming `needles`, with nothing changed. */
static void expect_refused(model *m, const char *copy, const zinc_load_weights_options *o,
                           const char *what, const char *const *needles) {
  float *before = snapshot(m);
  zinc_load_weights_report rep;
  memset(&rep, 0x5a, sizeof rep);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_safetensors(m->e, copy, o, &rep);
  et_expect_everywhere(st, ZINC_ERR_INVALID, MPI_Wtime() - t0, what, needles, -1);
  ET_CHECK(strstr(zinc_last_error(), "nothing was changed"), "%s: the message does not say "
           "that nothing changed: %s", what, zinc_last_error());
  ET_CHECK(rep.loaded == 0 && rep.missing == 0 && !rep.missing_names && !rep.unexpected_names,
           "%s: the report of a refused load is not empty", what);
  float *after = snapshot(m);
  ET_CHECK(same(before, after), "%s: the weights changed", what);
  free(before);
  free(after);
}

static void copy_for_every_rank(const char *path, const char *tag) {
  char cmd[2400];
  snprintf(cmd, sizeof cmd, "for k in $(seq 0 %d); do cp %s %s/%s_r$k.safetensors; done",
           et_world - 1, path, root, tag);
  shell(cmd);
}

static void test_bytes(int stage, const char *path, const float *want) {
  model m;
  open_model(&m, stage, 9.0f);
  char copy[700], last[32], what[200];
  snprintf(last, sizeof last, "rank %d", et_world - 1);
  /* identical copies at per-rank paths load, bitwise */
  copy_for_every_rank(path, "same");
  snprintf(copy, sizeof copy, "%s/same_r%d.safetensors", root, et_rank);
  zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  o.strict = 1;
  ET_OK(zinc_load_safetensors(m.e, copy, &o, NULL));
  float *got = snapshot(&m);
  ET_CHECK(same(got, want), "stage %d: identical copies did not load the file", stage);
  free(got);
  /* the engine holds other values again, so that a load would show */
  model fresh;
  open_model(&fresh, stage, 5.0f);
  zinc_engine_destroy(m.e);
  m = fresh;
  /* the last rank's copy: one element other, in a piece the last rank
   * owns, then in one rank 0 owns */
  for (int whose = 0; whose < 2; whose++) {
    int owner = whose == 0 ? et_world - 1 : 0, i = 0;
    int64_t j = element_of(&m, owner, &i);
    char tensor[32], quoted[40];
    snprintf(tensor, sizeof tensor, "%s.%s", pname[i][0], pname[i][1]);
    snprintf(quoted, sizeof quoted, "\"%s\"", tensor);
    snprintf(copy, sizeof copy, "%s/bytes_r%d.safetensors", root, et_rank);
    copy_for_every_rank(path, "bytes");
    if (et_rank == et_world - 1)
      poke_float(copy, element_offset(copy, tensor, j), 1234.5f);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(what, sizeof what, "stage %d: the last rank's copy differs in %s[%lld] (owned by "
             "rank %d)", stage, tensor, (long long)j, owner);
    const char *needles[] = {last, quoted, "every rank must read the same file", NULL};
    expect_refused(&m, copy, &o, what, needles);
  }
  /* every value other in the last rank's copy: from 3 ranks on, the ring
   * names that rank alone (its pieces and its neighbour's both differ) */
  copy_for_every_rank(path, "bytes");
  if (et_rank == et_world - 1)
    shift_all(copy);
  MPI_Barrier(MPI_COMM_WORLD);
  snprintf(what, sizeof what, "stage %d: every value of the last rank's copy differs", stage);
  const char *alone = stage == 0      ? "read other bytes than rank 0"
                      : et_world == 2 ? "rank 0 and rank 1 read different bytes"
                                      : "read bytes that differ from what its ring neighbours";
  const char *needles[] = {last, alone, NULL};
  expect_refused(&m, copy, &o, what, needles);
  if (et_world > 2 && stage > 0) {
    char others[64];
    snprintf(others, sizeof others, "rank 0 and rank %d", et_world - 1);
    ET_CHECK(!strstr(zinc_last_error(), others), "%s: the message names rank 0 too: %s", what,
             zinc_last_error());
  }
  /* the engine goes on: the identical copies load */
  snprintf(copy, sizeof copy, "%s/same_r%d.safetensors", root, et_rank);
  ET_OK(zinc_load_safetensors(m.e, copy, &o, NULL));
  got = snapshot(&m);
  ET_CHECK(same(got, want), "stage %d: identical copies did not load after the refusals", stage);
  free(got);
  zinc_engine_destroy(m.e);
}

/* The last rank's copy is another file: an extra tensor in it. */
static void test_other_file(int stage, const char *path) {
  model m;
  open_model(&m, stage, 9.0f);
  char copy[700], last[32], what[200];
  snprintf(last, sizeof last, "rank %d", et_world - 1);
  snprintf(copy, sizeof copy, "%s/other_r%d.safetensors", root, et_rank);
  copy_for_every_rank(path, "other");
  if (et_rank == et_world - 1) {
    /* the same tensors, written by this rank alone with one more */
    MPI_Comm self = MPI_COMM_SELF;
    char json[256];
    snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1}");
    zinc_config *cfg = NULL;
    ET_OK(zinc_config_parse(json, &cfg));
    zinc_options opt = ZINC_OPTIONS_INIT;
    opt.device = ZINC_DEVICE_CPU;
    opt.threads = 1;
    opt.mpi_comm = &self;
    zinc_engine *e;
    ET_OK(zinc_engine_create(cfg, &opt, &e));
    zinc_config_free(cfg);
    zinc_module *mods[3] = {zinc_module_add(e, "a"), zinc_module_add(e, "b"),
                            zinc_module_add(e, "c")};
    for (int i = 0; i < NP; i++)
      ET_CHECK(zinc_param_add(e, mods[i / 2], pname[i][1], ZINC_F32, 2, pshape[i]), "add");
    int64_t one[1] = {3};
    ET_CHECK(zinc_param_add(e, mods[2], "extra", ZINC_F32, 1, one), "add extra");
    float seed = 1.0f;
    ET_OK(zinc_engine_build(e, init_values, &seed));
    ET_OK(zinc_export_safetensors(e, copy, -1));
    zinc_engine_destroy(e);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  snprintf(what, sizeof what, "stage %d: the last rank's copy is another file", stage);
  const char *needles[] = {last, "opened different files", "header crc32c", NULL};
  expect_refused(&m, copy, NULL, what, needles);
  zinc_engine_destroy(m.e);
}

/* The map: b.w -> "b.v" on the last rank (same shape), or b.w left alone
 * there. */
static int last_rank_map(void *ctx, const char *name, char *buf, size_t cap) {
  int mode = *(const int *)ctx;
  if (et_rank == et_world - 1 && !strcmp(name, "b.w")) {
    if (mode == 1)
      return 0;
    snprintf(buf, cap, "b.v");
    return 1;
  }
  snprintf(buf, cap, "%s", name);
  return 1;
}

static void test_map(int stage, const char *path) {
  model m;
  open_model(&m, stage, 9.0f);
  char copy[700], last[32], what[200];
  snprintf(last, sizeof last, "rank %d", et_world - 1);
  snprintf(copy, sizeof copy, "%s/map_r%d.safetensors", root, et_rank);
  copy_for_every_rank(path, "map");
  for (int mode = 0; mode < 2; mode++) {
    zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
    o.map = last_rank_map;
    o.map_ctx = &mode;
    snprintf(what, sizeof what, "stage %d: the map %s b.w on the last rank", stage,
             mode ? "leaves alone" : "renames");
    const char *needles[] = {last, "name map answers differently", "\"b.w\"",
                             mode ? "leaves it alone" : "maps it to \"b.v\"", NULL};
    expect_refused(&m, copy, &o, what, needles);
  }
  zinc_engine_destroy(m.e);
}

int main(int argc, char **argv) {
  if (et_mpi_start(&argc, &argv, "test_load_weights_agree", 2))
    return 77;
  et_scratch_dir(root, sizeof root, "load_weights_agree");
  char path[700];
  snprintf(path, sizeof path, "%s/model.safetensors", root);
  float *want = NULL;
  export_file(path, &want);
  for (int stage = 0; stage <= 3; stage++) {
    test_bytes(stage, path, want);
    test_other_file(stage, path);
    test_map(stage, path);
  }
  free(want);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (!bad) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    shell(cmd);
  }
  if (et_rank == 0)
    printf(bad ? "load weights agreement tests FAILED\n"
               : "load weights agreement tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
