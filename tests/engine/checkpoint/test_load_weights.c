/*
 * test_load_weights.c — zinc_load_safetensors, under mpirun:
 *  - a file written by Python's safetensors package (fixtures/, made by
 *    make_pretrained.py; names as Hugging Face's GPT-2 names them, mapped
 *    to zinc's by a table): every parameter holds the value Python computed
 *    (F32, BF16, F16 in the file, rounded to the parameter's dtype, ties to
 *    even), at stages 0-3; the parameter the file lacks is reported missing
 *    and kept, the two tensors no parameter takes are reported unexpected;
 *  - strict: the same file refused, naming the missing and the unexpected,
 *    and nothing changed;
 *  - a shape mismatch names the parameter, the tensor and both shapes;
 *  - damaged files (header length beyond the file, not JSON, offsets that
 *    do not match the dtype and shape, offsets beyond the data; byte ranges
 *    that overlap, leave a gap or do not reach the end of the data area,
 *    which the safetensors library refuses too) refused with
 *    ZINC_ERR_CORRUPT naming the tensor and what is wrong, on every rank;
 *  - round trip: zinc_export_safetensors at one stage and world size, then
 *    a fresh engine at another stage and world size loads it: bitwise.
 */
#include <math.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_test.h"

/* IEEE binary16 to float, written here (exact: every half is a float);
 * the compilers CI uses do not all have _Float16 on x86-64. */
static float f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

#define NP 6
static const char *const zname[NP][2] = {{"embed", "weight"}, {"h0", "attn"}, {"h0", "mlp"},
                                         {"h0", "proj"},      {"h0", "bias"}, {"h0", "scale"}};
static const zinc_dtype zdtype[NP] = {ZINC_BF16, ZINC_F32, ZINC_F32, ZINC_F16, ZINC_F32, ZINC_F32};
static const int zndim[NP] = {2, 2, 2, 2, 1, 1};
static const int64_t zshape[NP][2] = {{8, 4}, {4, 4}, {4, 6}, {6, 4}, {6, 0}, {4, 0}};

/* zinc name -> the file's name (the trainer's table) */
static const char *const table[][2] = {
    {"embed.weight", "transformer.wte.weight"},
    {"h0.attn", "transformer.h.0.attn.weight"},
    {"h0.mlp", "transformer.h.0.mlp.weight"},
    {"h0.proj", "transformer.h.0.proj.weight"},
    {"h0.bias", "transformer.h.0.mlp.bias"},
    {"h0.scale", "transformer.ln_f.weight"}, /* not in the file: missing */
    {NULL, NULL}};

static int map_table(void *ctx, const char *name, char *buf, size_t cap) {
  const char *const(*t)[2] = ctx;
  for (int i = 0; t[i][0]; i++)
    if (!strcmp(t[i][0], name)) {
      snprintf(buf, cap, "%s", t[i][1]);
      return 1;
    }
  return 0;
}

/* The shape mismatch: h0.attn [4, 4] takes the [4, 6] tensor. */
static int map_wrong_shape(void *ctx, const char *name, char *buf, size_t cap) {
  if (!strcmp(name, "h0.attn")) {
    snprintf(buf, cap, "transformer.h.0.mlp.weight");
    return 1;
  }
  return map_table(ctx, name, buf, cap);
}

static int64_t numel(int i) { return zndim[i] == 1 ? zshape[i][0] : zshape[i][0] * zshape[i][1]; }

/* Initial values: seed + the element index / 64, the same on every rank. */
static zinc_status init_values(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  float seed = *(const float *)ctx;
  (void)p;
  for (int64_t j = 0; j < n; j++)
    dst[j] = seed + (float)(j % 64) / 64.0f;
  return ZINC_OK;
}

typedef struct {
  zinc_engine *e;
  zinc_param *p[NP];
} model;

static void open_model(model *m, int stage, void *mpi_comm, float seed) {
  char json[256];
  snprintf(json, sizeof json, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
           "{\"stage\": %d}}", stage);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.mpi_comm = mpi_comm;
  ET_OK(zinc_engine_create(cfg, &opt, &m->e));
  zinc_config_free(cfg);
  zinc_module *mods[2] = {zinc_module_add(m->e, "embed"), zinc_module_add(m->e, "h0")};
  for (int i = 0; i < NP; i++) {
    m->p[i] = zinc_param_add(m->e, mods[i > 0], zname[i][1], zdtype[i], zndim[i], zshape[i]);
    ET_CHECK(m->p[i], "register %s.%s: %s", zname[i][0], zname[i][1], zinc_last_error());
  }
  ET_OK(zinc_engine_build(m->e, init_values, &seed));
}

static float *get(model *m, int i) {
  float *v = malloc((size_t)numel(i) * 4);
  ET_OK(zinc_param_get_full(m->e, m->p[i], ZINC_STATE_PARAM, v));
  return v;
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* The f32 bits Python computed, per parameter (NULL: not in the file). */
static uint32_t *expected[NP];

static void read_expected(const char *path) {
  FILE *f = fopen(path, "r");
  ET_CHECK(f, "open %s", path);
  if (!f)
    exit(1);
  char name[64];
  while (fscanf(f, "%63s", name) == 1) {
    int i;
    for (i = 0; i < NP; i++) {
      char full[64];
      snprintf(full, sizeof full, "%s.%s", zname[i][0], zname[i][1]);
      if (!strcmp(full, name))
        break;
    }
    ET_CHECK(i < NP, "%s names %s, not a parameter of the test", path, name);
    if (i == NP)
      exit(1);
    expected[i] = malloc((size_t)numel(i) * 4);
    for (int64_t j = 0; j < numel(i); j++) {
      unsigned u;
      if (fscanf(f, "%x", &u) != 1)
        ET_CHECK(0, "%s: %s has fewer than %lld values", path, name, (long long)numel(i));
      expected[i][j] = u;
    }
  }
  fclose(f);
}

static int has_line(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *s = list; s && *s;) {
    const char *nl = strchr(s, '\n');
    if ((size_t)(nl - s) == n && !strncmp(s, name, n))
      return 1;
    s = nl + 1;
  }
  return 0;
}

static void test_python_file(const char *fixture, int stage) {
  model m;
  float seed = 7.0f;
  open_model(&m, stage, NULL, seed);
  zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  o.map = map_table;
  o.map_ctx = (void *)table;
  zinc_load_weights_report rep;
  ET_OK(zinc_load_safetensors(m.e, fixture, &o, &rep));
  ET_CHECK(rep.loaded == 5 && rep.missing == 1 && rep.unexpected == 2 && rep.skipped == 0,
           "stage %d: report loaded %d missing %d unexpected %d skipped %d, want 5 1 2 0", stage,
           rep.loaded, rep.missing, rep.unexpected, rep.skipped);
  ET_CHECK(has_line(rep.missing_names, "h0.scale"), "stage %d: missing list is \"%s\"", stage,
           rep.missing_names ? rep.missing_names : "(null)");
  ET_CHECK(has_line(rep.unexpected_names, "lm_head.extra") &&
               has_line(rep.unexpected_names, "transformer.h.0.attn.masked_bias"),
           "stage %d: unexpected list is \"%s\"", stage,
           rep.unexpected_names ? rep.unexpected_names : "(null)");
  zinc_load_weights_report_free(&rep);
  for (int i = 0; i < NP; i++) {
    float *v = get(&m, i);
    int bad = 0;
    for (int64_t j = 0; j < numel(i) && bad < 3; j++) {
      float init = seed + (float)(j % 64) / 64.0f;
      uint32_t want = expected[i] ? expected[i][j] : bits(init); /* missing: kept */
      if (bits(v[j]) != want) {
        ET_CHECK(0, "stage %d: %s.%s[%lld] is %08x (%g), Python says %08x", stage, zname[i][0],
                 zname[i][1], (long long)j, bits(v[j]), v[j], want);
        bad++;
      }
    }
    free(v);
  }
  /* the compute copy the trainer reads (zinc_param_data) holds them too */
  ET_OK(zinc_eval_begin(m.e));
  for (int i = 0; i < NP; i++) {
    zinc_module *mod = zinc_param_module(m.p[i]);
    ET_OK(zinc_module_fetch(m.e, mod));
    const void *data = zinc_param_data(m.p[i]);
    int bad = 0;
    for (int64_t j = 0; data && j < numel(i) && bad < 3; j++) {
      float init = seed + (float)(j % 64) / 64.0f, got;
      if (zdtype[i] == ZINC_F32) {
        got = ((const float *)data)[j];
      } else {
        uint16_t h = ((const uint16_t *)data)[j];
        got = zdtype[i] == ZINC_BF16 ? (memcpy(&got, &(uint32_t){(uint32_t)h << 16}, 4), got)
                                     : f16_value(h);
      }
      uint32_t want = expected[i] ? expected[i][j] : bits(init);
      if (bits(got) != want) {
        ET_CHECK(0, "stage %d: the compute copy of %s.%s[%lld] is %08x, Python says %08x",
                 stage, zname[i][0], zname[i][1], (long long)j, bits(got), want);
        bad++;
      }
    }
    ET_OK(zinc_module_release(m.e, mod));
  }
  ET_OK(zinc_eval_end(m.e));
  zinc_engine_destroy(m.e);
}

static void test_refusals(const char *fixture) {
  model m;
  float seed = 3.0f;
  open_model(&m, 3, NULL, seed);
  zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  o.map = map_table;
  o.map_ctx = (void *)table;
  o.strict = 1;
  zinc_load_weights_report rep;
  zinc_status st = zinc_load_safetensors(m.e, fixture, &o, &rep);
  const char *msg = zinc_last_error();
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(msg, "\"h0.scale\"") && strstr(msg, "lm_head.extra") &&
               strstr(msg, "1 missing") && strstr(msg, "2 unexpected"),
           "strict: %s: %s", zinc_status_name(st), msg);
  ET_CHECK(rep.loaded == 0 && !rep.missing_names, "strict: the report of a failure is not empty");
  o.strict = 0;
  o.map = map_wrong_shape;
  st = zinc_load_safetensors(m.e, fixture, &o, NULL);
  msg = zinc_last_error();
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(msg, "\"h0.attn\"") &&
               strstr(msg, "\"transformer.h.0.mlp.weight\"") && strstr(msg, "[4, 6]") &&
               strstr(msg, "[4, 4]"),
           "shape mismatch: %s: %s", zinc_status_name(st), msg);
  /* nothing changed, and the engine is still usable */
  float *v = get(&m, 0);
  ET_CHECK(bits(v[5]) == bits(seed + 5.0f / 64.0f), "a refused load changed embed.weight");
  free(v);
  /* no map: zinc's names are not in the file; everything missing */
  zinc_load_weights_report rep2;
  ET_OK(zinc_load_safetensors(m.e, fixture, NULL, &rep2));
  ET_CHECK(rep2.loaded == 0 && rep2.missing == NP && rep2.unexpected == 7,
           "no map: loaded %d missing %d unexpected %d", rep2.loaded, rep2.missing,
           rep2.unexpected);
  zinc_load_weights_report_free(&rep2);
  zinc_engine_destroy(m.e);
}

/* A file with the given header text and data_bytes of data (len_delta
 * added to the header length written). */
static void write_file(const char *path, const char *header, int64_t data_bytes,
                       int64_t len_delta) {
  FILE *f = fopen(path, "wb");
  uint64_t len = strlen(header) + (uint64_t)len_delta;
  unsigned char l[8];
  for (int k = 0; k < 8; k++)
    l[k] = (unsigned char)(len >> (8 * k));
  fwrite(l, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  for (int64_t k = 0; k < data_bytes; k++)
    fputc(0, f);
  fclose(f);
}

static void test_damaged(const char *dir) {
  model m;
  float seed = 1.0f;
  open_model(&m, 2, NULL, seed);
  static const struct {
    const char *header;
    int64_t data, delta;
    const char *want;
  } cases[] = {
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 24, 1000,
       "header length"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]", 24, 0,
       "not JSON"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,20]}}", 24, 0,
       "\"h0.bias\": has data_offsets that do not match"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 20, 0,
       "\"h0.bias\": has data_offsets outside the file"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[-6],\"data_offsets\":[0,24]}}", 24, 0,
       "not an integer >= 0"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,"
       "24]}}", 24, 0, "overflows"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},\"h0.bias\":{}}",
       24, 0, "not JSON"},
      {"[1,2]", 0, 0, "not a JSON object"},
      /* the layout the format requires (the safetensors library refuses
       * the others): the tensors' byte ranges, sorted, tile the data area
       * from byte 0 to its end, without overlap or gap */
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},\"x\":{"
       "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}", 24, 0,
       "tensor \"x\": has data_offsets [16, 24] that overlap those of tensor \"h0.bias\""},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},\"x\":{"
       "\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 24, 0,
       "overlap those of tensor"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[8,32]}}", 32, 0,
       "tensor \"h0.bias\": has data_offsets [8, 32] that begin after a gap of 8 bytes"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"h0.bias\":{"
       "\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[12,36]}}", 36, 0,
       "tensor \"h0.bias\": has data_offsets [12, 36] that begin after a gap of 4 bytes"},
      {"{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 28, 0,
       "tensor \"h0.bias\": has data_offsets [0, 24], the last of the data area, which holds "
       "28 bytes"},
      {"{}", 8, 0, "names no tensor"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char path[700];
    snprintf(path, sizeof path, "%s/damaged_%zu_rank%d.safetensors", dir, c, et_rank);
    write_file(path, cases[c].header, cases[c].data, cases[c].delta);
    zinc_status st = zinc_load_safetensors(m.e, path, NULL, NULL);
    ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), cases[c].want),
             "damaged file %zu: %s: %s (want \"%s\")", c, zinc_status_name(st),
             zinc_last_error(), cases[c].want);
  }
  /* the engine is untouched and usable: a good file of zinc's names loads */
  char path[700];
  snprintf(path, sizeof path, "%s/good_rank%d.safetensors", dir, et_rank);
  write_file(path, "{\"h0.bias\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 24,
             0);
  zinc_load_weights_report rep;
  ET_OK(zinc_load_safetensors(m.e, path, NULL, &rep));
  ET_CHECK(rep.loaded == 1 && rep.missing == NP - 1, "good file: loaded %d missing %d",
           rep.loaded, rep.missing);
  zinc_load_weights_report_free(&rep);
  float *v = get(&m, 4);
  ET_CHECK(v[0] == 0.0f && v[5] == 0.0f, "h0.bias not loaded from the good file");
  free(v);
  zinc_engine_destroy(m.e);
}

/* Export at stage a over `from` ranks, load at stage b over the world. */
static void test_round_trip(const char *dir, int a, int b, int from_one) {
  char path[700];
  snprintf(path, sizeof path, "%s/export_s%d_%d.safetensors", dir, a, from_one);
  MPI_Comm self = MPI_COMM_SELF;
  model src, dst;
  float *want[NP];
  if (!from_one || et_rank == 0) {
    open_model(&src, a, from_one ? (void *)&self : NULL, 0.0f);
    /* distinct values, each one the parameter's dtype holds (the master of
     * a 16-bit parameter set with more bits would not survive its export
     * in that dtype) */
    for (int i = 0; i < NP; i++) {
      float *v = malloc((size_t)numel(i) * 4);
      for (int64_t j = 0; j < numel(i); j++)
        v[j] = zdtype[i] == ZINC_F32
                   ? (float)sin(0.7 * (double)j + (double)i) * (1.0f + 1e-3f * (float)j)
                   : (float)((j * 37 + i) % 101 - 50) / 32.0f;
      ET_OK(zinc_param_set_full(src.e, src.p[i], ZINC_STATE_PARAM, v));
      free(v);
      want[i] = get(&src, i);
    }
    ET_OK(zinc_export_safetensors(src.e, path, -1));
    zinc_engine_destroy(src.e);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (from_one)
    for (int i = 0; i < NP; i++) {
      if (et_rank != 0)
        want[i] = malloc((size_t)numel(i) * 4);
      MPI_Bcast(want[i], (int)numel(i), MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
  open_model(&dst, b, NULL, 9.0f);
  zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  o.strict = 1;
  ET_OK(zinc_load_safetensors(dst.e, path, &o, NULL));
  for (int i = 0; i < NP; i++) {
    float *v = get(&dst, i);
    ET_CHECK(!memcmp(v, want[i], (size_t)numel(i) * 4), "round trip stage %d (%s) -> stage %d "
             "(%d ranks): %s.%s differs", a, from_one ? "1 rank" : "every rank", b, et_world,
             zname[i][0], zname[i][1]);
    free(v);
    free(want[i]);
  }
  zinc_engine_destroy(dst.e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  const char *src = getenv("ZINC_TEST_SOURCE_DIR");
  char fixture[600], exp[600], dir[600];
  snprintf(fixture, sizeof fixture, "%s/tests/engine/checkpoint/fixtures/pretrained.safetensors",
           src ? src : ".");
  snprintf(exp, sizeof exp, "%s/tests/engine/checkpoint/fixtures/pretrained_expected.txt",
           src ? src : ".");
  snprintf(dir, sizeof dir, "%s/load_weights_np%d", et_binary_dir(), et_world);
  if (et_rank == 0)
    mkdir(dir, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  read_expected(exp);
  for (int stage = 0; stage <= 3; stage++)
    test_python_file(fixture, stage);
  test_refusals(fixture);
  test_damaged(dir);
  test_round_trip(dir, 0, 3, 0);
  test_round_trip(dir, 3, 1, 0);
  test_round_trip(dir, 2, 3, 1);
  test_round_trip(dir, 3, 0, 1);
  for (int i = 0; i < NP; i++)
    free(expected[i]);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "load weights tests FAILED\n" : "load weights tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
