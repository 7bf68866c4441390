/*
 * test_monitor.c — the csv_monitor and tensorboard monitors, under mpirun:
 *  - world rank 0 writes under output_path/job_name; another rank, given
 *    its own output_path (a rank-local key), writes nothing there;
 *  - csv: DeepSpeed's layout (one file per metric, '/' -> '_', header
 *    "step,<last part>", CRLF rows), the step of each row the samples so
 *    far (boundaries x micro x accumulation x ranks, written here from the
 *    run's shape), lr = the config's constant lr, loss_scale with fp16, the
 *    trainer's train_loss exactly as given;
 *  - tensorboard: the event file decoded by this test's own reader (its own
 *    bitwise crc32c for the TFRecord checksums, its own protobuf walk),
 *    the same values as float; an expectation file for tb_read.py, which
 *    reads the file with TensorBoard's own EventAccumulator;
 *  - wall_clock_breakdown: DeepSpeed's "[Rank 0] time (ms) | fwd_microstep:"
 *    line after every zinc_step and "| fwd:" at each boundary, on stdout.
 */
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_test.h"

#define STEPS 5
#define GAS 2
#define MICRO 3

/* ------------------------------------------------------------ reading */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = 0;
  if (len)
    *len = got;
  return buf;
}

/* The csv file `name` in dir: checks the header and CRLF rows; fills
 * steps[] and values[] (at most cap rows); returns the row count or -1. */
static int read_csv(const char *dir, const char *file, const char *header, int64_t *steps,
                    double *values, int cap) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *text = slurp(path, NULL);
  if (!text) {
    ET_CHECK(0, "%s is missing", path);
    return -1;
  }
  char want[128];
  snprintf(want, sizeof want, "step,%s\r\n", header);
  ET_CHECK(!strncmp(text, want, strlen(want)), "%s: header is not \"step,%s\\r\\n\": %.40s",
           path, header, text);
  int rows = 0;
  char *line = strstr(text, "\r\n");
  while (line && line[2]) {
    line += 2;
    char *end = strstr(line, "\r\n");
    ET_CHECK(end != NULL, "%s: row without CRLF: %s", path, line);
    if (!end)
      break;
    ET_CHECK(!memchr(line, '\n', (size_t)(end - line)), "%s: bare LF in a row", path);
    if (rows < cap) {
      char *comma;
      steps[rows] = strtoll(line, &comma, 10);
      ET_CHECK(*comma == ',', "%s: row %d has no comma", path, rows);
      values[rows] = strtod(comma + 1, NULL);
    }
    rows++;
    line = end;
  }
  free(text);
  return rows;
}

/* crc32c bit by bit (the Castagnoli polynomial, reflected 0x82f63b78),
 * independent of the library's table/SSE4.2 code. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

static uint32_t ref_masked(const uint8_t *p, size_t n) {
  uint32_t c = ref_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static uint64_t get_varint(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (int shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  return v;
}

typedef struct {
  char tag[128];
  int64_t step;
  float value;
} tb_scalar;

/* One Event: fills *out when it holds a one-value summary; returns 1 for
 * a scalar, 2 for the file_version record "brain.Event:2", 0 otherwise. */
static int decode_event(const uint8_t *p, const uint8_t *end, tb_scalar *out) {
  int kind = 0;
  memset(out, 0, sizeof *out);
  while (p < end) {
    uint64_t key = get_varint(&p, end);
    unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
    if (wire == 1) {
      p += 8;
    } else if (wire == 0) {
      uint64_t v = get_varint(&p, end);
      if (field == 2)
        out->step = (int64_t)v;
    } else if (wire == 2) {
      uint64_t n = get_varint(&p, end);
      const uint8_t *sub = p, *sub_end = p + n;
      if (field == 3 && n == 13 && !memcmp(sub, "brain.Event:2", 13))
        kind = 2;
      if (field == 5) { /* Summary { repeated Value value = 1 } */
        uint64_t k2 = get_varint(&sub, sub_end);
        if (k2 == (1 << 3 | 2)) {
          uint64_t vn = get_varint(&sub, sub_end);
          const uint8_t *v = sub, *v_end = sub + vn;
          while (v < v_end) {
            uint64_t k3 = get_varint(&v, v_end);
            if (k3 == (1 << 3 | 2)) { /* tag */
              uint64_t tn = get_varint(&v, v_end);
              snprintf(out->tag, sizeof out->tag, "%.*s", (int)tn, (const char *)v);
              v += tn;
            } else if (k3 == (2 << 3 | 5)) { /* simple_value */
              uint32_t u = (uint32_t)get_le(v, 4);
              memcpy(&out->value, &u, 4);
              v += 4;
              kind = 1;
            } else {
              return 0;
            }
          }
        }
      }
      p += n;
    } else if (wire == 5) {
      p += 4;
    } else {
      return 0;
    }
  }
  return kind;
}

/* Every scalar of the one event file in dir; returns the count or -1. */
static int read_tb(const char *dir, tb_scalar *out, int cap) {
  DIR *d = opendir(dir);
  if (!d) {
    ET_CHECK(0, "no tensorboard directory %s", dir);
    return -1;
  }
  char path[2048] = "";
  int files = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (!strncmp(de->d_name, "events.out.tfevents.", 20)) {
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      files++;
    }
  closedir(d);
  ET_CHECK(files == 1, "%s: %d event files, expected 1", dir, files);
  size_t len;
  uint8_t *buf = (uint8_t *)slurp(path, &len);
  if (!buf)
    return -1;
  int n = 0, records = 0;
  size_t at = 0;
  while (at + 12 <= len) {
    uint64_t rl = get_le(buf + at, 8);
    ET_CHECK((uint32_t)get_le(buf + at + 8, 4) == ref_masked(buf + at, 8),
             "record %d: length crc wrong", records);
    ET_CHECK(at + 12 + rl + 4 <= len, "record %d runs past the end", records);
    if (at + 12 + rl + 4 > len)
      break;
    const uint8_t *data = buf + at + 12;
    ET_CHECK((uint32_t)get_le(data + rl, 4) == ref_masked(data, rl), "record %d: data crc wrong",
             records);
    tb_scalar s;
    int kind = decode_event(data, data + rl, &s);
    ET_CHECK(records > 0 || kind == 2, "the first record is not file_version brain.Event:2");
    if (kind == 1 && n < cap)
      out[n++] = s;
    records++;
    at += 12 + rl + 4;
  }
  ET_CHECK(at == len, "%zu trailing bytes after the last record", len - at);
  free(buf);
  return n;
}

static int tb_find(const tb_scalar *s, int n, const char *tag, int64_t step, float *value) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s[i].tag, tag) && s[i].step == step) {
      *value = s[i].value;
      return 1;
    }
  return 0;
}

/* ------------------------------------------------------------ the run */

static int count_prefix(const char *text, const char *prefix) {
  int n = 0;
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, prefix, strlen(prefix)))
      n++;
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  return n;
}

static void run(int fp16) {
  char base[600], mine[700], csv_dir[800], tb_dir[800];
  snprintf(base, sizeof base, "%s/monitor_np%d_%s", et_binary_dir(), et_world,
           fp16 ? "fp16" : "fp32");
  /* rank 0 writes in base; the others are given base.rank<r> (which must
   * stay absent) */
  if (et_rank == 0)
    snprintf(mine, sizeof mine, "%s", base);
  else
    snprintf(mine, sizeof mine, "%s.rank%d", base, et_rank);
  if (et_rank == 0) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.rank*", base, base);
    ET_CHECK(system(cmd) == 0, "%s failed", cmd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  char extra[2400];
  snprintf(extra, sizeof extra,
           "  \"wall_clock_breakdown\": true,\n"
           "  \"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s/csv\", \"job_name\": "
           "\"job one\"},\n"
           "  \"tensorboard\": {\"enabled\": true, \"output_path\": \"%s/tb\", \"job_name\": "
           "\"run\"},\n"
           "  \"wandb\": {\"enabled\": false}",
           mine, mine);
  snprintf(csv_dir, sizeof csv_dir, "%s/csv/job one", base);
  snprintf(tb_dir, sizeof tb_dir, "%s/tb/run", base);

  et_run r = et_defaults();
  r.stage = 2;
  r.gas = GAS;
  r.micro = MICRO;
  r.dtype = fp16 ? ZINC_F16 : ZINC_F32;
  r.extra = extra;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e);
  int64_t batch = (int64_t)MICRO * GAS * N; /* train_batch_size, from the run's shape */

  /* stdout to a file while training (rank 0 prints the timer lines) */
  char out_path[800];
  snprintf(out_path, sizeof out_path, "%s.stdout.rank%d", base, et_rank);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  int fd = open(out_path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ET_CHECK(fd >= 0 && saved >= 0, "cannot redirect stdout to %s", out_path);
  dup2(fd, STDOUT_FILENO);
  close(fd);

  double losses[STEPS];
  float scales[STEPS];
  int me = zinc_dp_rank(e);
  for (int s = 0; s < STEPS; s++) {
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    for (int g = 0; g < GAS; g++) {
      et_micro_batch(&m, &r.shape, r.dtype, (((int64_t)s * GAS + g) * N + me) * MICRO, MICRO,
                     NULL);
      ET_OK(zinc_step(e, &info));
    }
    ET_CHECK(info.boundary, "step %d: no boundary after %d micro-batches", s, GAS);
    scales[s] = info.loss_scale;
    ET_CHECK(zinc_global_samples(e) == (s + 1) * batch, "zinc_global_samples %lld, expected "
             "%lld", (long long)zinc_global_samples(e), (long long)((s + 1) * batch));
    losses[s] = 1.0 / (3.0 + s) + 1e-9 * s; /* not short in decimal */
    ET_OK(zinc_monitor_scalar(e, "Train/Samples/train_loss", losses[s]));
  }
  ET_CHECK(zinc_monitor_scalar(e, "", 1.0) == ZINC_ERR_INVALID, "an empty name was accepted");
  ET_OK(zinc_monitor_flush(e));
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  et_model_free(&m);
  zinc_engine_destroy(e);

  /* the other ranks' paths stay empty */
  if (et_rank != 0) {
    struct stat st;
    ET_CHECK(stat(mine, &st) != 0, "rank %d created %s: only rank 0 writes", et_rank, mine);
  }
  char *printed = slurp(out_path, NULL);
  if (et_rank == 0) {
    int micro_lines = count_prefix(printed, "[Rank 0] time (ms) | fwd_microstep: ");
    int window_lines = count_prefix(printed, "[Rank 0] time (ms) | fwd: ");
    ET_CHECK(micro_lines == STEPS * GAS && window_lines == STEPS,
             "wall_clock_breakdown: %d micro lines (want %d), %d boundary lines (want %d):\n%s",
             micro_lines, STEPS * GAS, window_lines, STEPS, printed);
    ET_CHECK(strstr(printed, " | bwd: ") && strstr(printed, " | bwd_inner: ") &&
             strstr(printed, " | bwd_allreduce: ") && strstr(printed, " | step: ") &&
             strstr(printed, " | step_microstep: "),
             "a DeepSpeed timer name is missing:\n%s", printed);
  } else {
    ET_CHECK(!strstr(printed, "time (ms)"), "rank %d printed timer lines", et_rank);
  }
  free(printed);
  if (et_rank != 0)
    return;

  /* csv */
  int64_t steps[16];
  double vals[16];
  int n = read_csv(csv_dir, "Train_Samples_lr.csv", "lr", steps, vals, 16);
  ET_CHECK(n == STEPS, "lr: %d rows, expected %d", n, STEPS);
  for (int i = 0; i < n && i < STEPS; i++)
    ET_CHECK(steps[i] == (i + 1) * batch && vals[i] == 0.01,
             "lr row %d: %lld,%.17g; expected %lld,0.01 (the config's lr)", i,
             (long long)steps[i], vals[i], (long long)((i + 1) * batch));
  n = read_csv(csv_dir, "Train_Samples_train_loss.csv", "train_loss", steps, vals, 16);
  ET_CHECK(n == STEPS, "train_loss: %d rows, expected %d", n, STEPS);
  for (int i = 0; i < n && i < STEPS; i++)
    ET_CHECK(steps[i] == (i + 1) * batch && vals[i] == losses[i],
             "train_loss row %d: %lld,%.17g; expected %lld,%.17g", i, (long long)steps[i],
             vals[i], (long long)((i + 1) * batch), losses[i]);
  char path[1100];
  snprintf(path, sizeof path, "%s/Train_Samples_loss_scale.csv", csv_dir);
  if (fp16) {
    n = read_csv(csv_dir, "Train_Samples_loss_scale.csv", "loss_scale", steps, vals, 16);
    ET_CHECK(n == STEPS, "loss_scale: %d rows, expected %d", n, STEPS);
    for (int i = 0; i < n && i < STEPS; i++)
      ET_CHECK(vals[i] == scales[i], "loss_scale row %d: %g, the step reported %g", i, vals[i],
               scales[i]);
    ET_CHECK(vals[0] == 4096.0, "loss_scale starts at %g, the config's 2^12 is 4096", vals[0]);
  } else {
    ET_CHECK(access(path, F_OK) != 0, "%s written without fp16 (DeepSpeed writes it only "
             "with fp16)", path);
  }
  static const char *const always[] = {"grad_norm", "step_time_ms",
                                       "elapsed_time_ms_forward", "elapsed_time_ms_backward",
                                       "elapsed_time_ms_backward_inner",
                                       "elapsed_time_ms_backward_allreduce",
                                       "elapsed_time_ms_step"};
  for (size_t k = 0; k < sizeof always / sizeof always[0]; k++) {
    char file[128];
    snprintf(file, sizeof file, "Train_Samples_%s.csv", always[k]);
    n = read_csv(csv_dir, file, always[k], steps, vals, 16);
    ET_CHECK(n == STEPS, "%s: %d rows, expected %d", file, n, STEPS);
    for (int i = 0; i < n && i < STEPS; i++)
      ET_CHECK(vals[i] >= 0 && steps[i] == (i + 1) * batch, "%s row %d: %lld,%g", file, i,
               (long long)steps[i], vals[i]);
  }
  /* memory: the parameters, on the cpu device: host memory */
  n = read_csv(csv_dir, "Train_Samples_memory_host_params.csv", "memory_host_params", steps,
               vals, 16);
  ET_CHECK(n == STEPS && vals[0] > 0, "memory_host_params: %d rows, first %g", n, vals[0]);

  /* tensorboard, decoded here */
  static tb_scalar tb[512];
  int nt = read_tb(tb_dir, tb, 512);
  ET_CHECK(nt > 0, "no scalars in %s", tb_dir);
  char expect_path[1200];
  snprintf(expect_path, sizeof expect_path, "%s/expect.txt", base);
  FILE *ex = fopen(expect_path, "w");
  for (int i = 0; i < STEPS; i++) {
    int64_t at = (i + 1) * batch;
    float v = -1;
    ET_CHECK(tb_find(tb, nt, "Train/Samples/lr", at, &v) && v == 0.01f,
             "tensorboard lr at %lld: missing or %g", (long long)at, v);
    ET_CHECK(tb_find(tb, nt, "Train/Samples/train_loss", at, &v) && v == (float)losses[i],
             "tensorboard train_loss at %lld: missing or %.9g (want %.9g)", (long long)at, v,
             (float)losses[i]);
    fprintf(ex, "Train/Samples/lr %lld %.9g\n", (long long)at, 0.01f);
    fprintf(ex, "Train/Samples/train_loss %lld %.9g\n", (long long)at, (float)losses[i]);
    if (fp16) {
      ET_CHECK(tb_find(tb, nt, "Train/Samples/loss_scale", at, &v) && v == scales[i],
               "tensorboard loss_scale at %lld", (long long)at);
      fprintf(ex, "Train/Samples/loss_scale %lld %.9g\n", (long long)at, scales[i]);
    }
  }
  fclose(ex);
}

/* Rank 0 cannot make its directory: zinc_engine_create fails on every
 * rank, and rank 0's message names the path. */
static void unwritable(void) {
  et_run r = et_defaults();
  r.extra = "  \"csv_monitor\": {\"enabled\": true, \"output_path\": \"/proc/zinc_no_such\", "
            "\"job_name\": \"j\"}";
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  zinc_status st = zinc_engine_create(cfg, &opt, &e);
  zinc_config_free(cfg);
  ET_CHECK(st != ZINC_OK && e == NULL, "an unwritable csv_monitor path: create gave %s",
           zinc_status_name(st));
  if (et_rank == 0)
    ET_CHECK(strstr(zinc_last_error(), "/proc/zinc_no_such") != NULL,
             "the message does not name the path: %s", zinc_last_error());
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  int provided;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  run(0);
  run(1);
  unwritable();
  int bad = et_failures, all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf("test_monitor np%d: %s\n", et_world, all ? "FAILED" : "ok");
  MPI_Finalize();
  return all ? 1 : 0;
}
