/*
 * infinity_demo — ZeRO-Infinity at a scale this machine's memory cannot
 * hold: a deep stack of wide linear layers whose optimizer state on NVMe is
 * --state-x times the machine's RAM (default 2) trains for a few steps on
 * the CPU device at stage 3, parameters and optimizer state on NVMe
 * (offload_param and offload_optimizer "nvme", O_DIRECT through zinc's aio).
 *
 *   infinity_demo [--state-x 2.0 | --state-gib G] [--dir DIR] [--steps 3]
 *                 [--width 4096] [--batch 2] [--sub-group N] [--lr LR]
 *                 [--max-host-frac F]
 *
 * Printed: the model, the disk space needed and free (refused when it does
 * not fit), the disk's read and write rates through the same swap path
 * (measured in this run, no compute), then per step the loss, the step's
 * time (forward, backward and optimizer step) beside the time the disk
 * needs for the bytes the step read and wrote (/proc/self/io), and at the
 * end the peak RSS (getrusage ru_maxrss) as a fraction of MemTotal, the
 * host memory the engine accounts and the bytes in the swap files.
 *
 * Fails (exit 1) when the loss does not go down at every step, or when the
 * peak RSS grew beyond the host-memory forecast below (the state must not
 * be held in memory). Exits 77 (SKIPPED) when the disk lacks the space or
 * the forecast exceeds --max-host-frac (default 0.8) of MemAvailable, each
 * with a message naming the bytes needed and available; 2 on bad
 * arguments.
 *
 * The model: L layers of (W, W) bf16 weights, y = W_L ... W_1 x, no
 * nonlinearity, loss = mean over the batch and the W outputs of
 * (y - t)^2 / 2 for fixed inputs x and targets t in {-1, +1}^W. The
 * weights start at the identity (a deep linear net stays well conditioned
 * there; its off-diagonal zeros take Adam's small first updates exactly in
 * bf16). Each step costs ~3 B multiply-adds per parameter while moving
 * ~30 bytes per parameter through the disk: the optimizer step is I/O
 * bound, forward and backward are bound by the cores on a small machine
 * (docs/benchmarks.md has both beside the disk's time).
 *
 * Host memory: the optimizer state (12 bytes per parameter), the reduced
 * f32 gradient partition (4) and the bf16 parameters (2) live only on disk
 * (the gradient partition in the optimizer's sub-groups, engine/place/
 * nvme.c). The forecast, written here from the configuration:
 * 4 x 16 G (sub-group state and gradient buffers, G = sub_group_size) +
 * 4 W^2 (one layer's f32 gradient chunk read for the norm) + 24 x 2 W^2
 * (parameter read buffers, gathered copies, gradient areas and the bounce
 * buffer: zinc_memory_report shows ~14 layers' bf16 at the peak) + the
 * activations + 256 MiB (MPI, threads, libraries): a constant for a
 * width and sub-group size, whatever the model's depth.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <dirent.h>

#include "base/base.h"
#include "config/config.h"
#include "kernels/zinc_math.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "zinc.h"
#include "bench/common/disk_rate.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void die(const char *what) {
  fprintf(stderr, "infinity_demo: %s: %s\n", what, zinc_last_error());
  exit(1);
}

/* ------------------------------------------------ the machine */

static uint64_t meminfo(const char *key) { /* bytes, 0 if absent */
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  uint64_t v = 0;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':')
      v = strtoull(line + kl + 1, NULL, 10) * 1024;
  if (f)
    fclose(f);
  return v;
}

/* Bytes this process has read from and written to storage (/proc/self/io:
 * O_DIRECT and io_uring's workers included, the page cache not). */
static void process_io(uint64_t *rd, uint64_t *wr) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  *rd = *wr = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "read_bytes:", 11))
      *rd = strtoull(line + 11, NULL, 10);
    else if (!strncmp(line, "write_bytes:", 12))
      *wr = strtoull(line + 12, NULL, 10);
  }
  if (f)
    fclose(f);
}

static double peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0;
}

/* Bytes allocated on disk to the files under dir (the swap areas are its
 * subfolders). */
static uint64_t dir_file_bytes(const char *dir, int depth) {
  DIR *d = opendir(dir);
  uint64_t sum = 0;
  struct dirent *de;
  char path[4096];
  while (d && (de = readdir(d))) {
    struct stat st;
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (lstat(path, &st) != 0)
      continue;
    if (S_ISREG(st.st_mode))
      sum += (uint64_t)st.st_blocks * 512;
    else if (S_ISDIR(st.st_mode) && depth > 0)
      sum += dir_file_bytes(path, depth - 1);
  }
  if (d)
    closedir(d);
  return sum;
}

static double current_rss_bytes(void) { /* VmRSS */
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double v = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6))
      v = strtod(line + 6, NULL) * 1024.0;
  if (f)
    fclose(f);
  return v;
}

/* ------------------------------------------------ the model */

typedef struct {
  int width, layers, batch;
  zinc_module **mods;
  zinc_param **w;  /* (width, width) bf16, row-major: y = w x */
  float *act;      /* (layers + 1, batch, width) f32: inputs of each layer, then y */
  float *dy, *dx;  /* (batch, width) f32 */
  float *target;   /* (batch, width) f32 */
} model;

static zinc_status init_identity(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  int64_t shape[2];
  zinc_param_shape(p, shape);
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = i / shape[1] == i % shape[1] ? 1.0f : 0.0f;
  return ZINC_OK;
}

static float sign_of(uint64_t *s) { /* a seeded +-1 */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (*s >> 63) ? 1.0f : -1.0f;
}

/* out (B, W) = w (W, W) @ in (B, W) per sample, w in bf16; 8 partial
 * sums per dot product (W is a multiple of 64), so that the loop
 * vectorizes without reassociation flags. */
static void layer_forward(const uint16_t *w, const float *in, float *out, int W, int B) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < W; i++) {
    const uint16_t *row = w + (size_t)i * W;
    for (int b = 0; b < B; b++) {
      const float *x = in + (size_t)b * W;
      float part[8] = {0};
      for (int j = 0; j < W; j += 8)
        for (int k = 0; k < 8; k++)
          part[k] += zinc_bf16_to_f32(row[j + k]) * x[j + k];
      out[(size_t)b * W + i] = ((part[0] + part[1]) + (part[2] + part[3])) +
                               ((part[4] + part[5]) + (part[6] + part[7]));
    }
  }
}

/* g (W, W) += dy^T in over the batch (bf16, accumulated in f32 per element);
 * dx (B, W) = w^T dy. */
static void layer_backward(const uint16_t *w, uint16_t *g, const float *in, const float *dy,
                           float *dx, int W, int B) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < W; i++) {
    uint16_t *grow = g + (size_t)i * W;
    for (int j = 0; j < W; j++) {
      float acc = zinc_bf16_to_f32(grow[j]);
      for (int b = 0; b < B; b++)
        acc += dy[(size_t)b * W + i] * in[(size_t)b * W + j];
      grow[j] = zinc_f32_to_bf16(acc);
    }
  }
  /* dx by columns of w^T: each thread owns a range of dx's entries */
#pragma omp parallel for schedule(static)
  for (int j0 = 0; j0 < W; j0 += 64) {
    for (int b = 0; b < B; b++)
      memset(dx + (size_t)b * W + j0, 0, 64 * sizeof *dx);
    for (int i = 0; i < W; i++) {
      const uint16_t *row = w + (size_t)i * W + j0;
      for (int b = 0; b < B; b++) {
        float d = dy[(size_t)b * W + i];
        float *xb = dx + (size_t)b * W + j0;
        for (int j = 0; j < 64; j++)
          xb[j] += zinc_bf16_to_f32(row[j]) * d;
      }
    }
  }
}

/* One training step: forward (each layer fetched, computed, released),
 * the loss and its gradient, backward in reverse, the optimizer step.
 * Returns the loss before the update. */
static double train_step(zinc_engine *e, model *m, double *t_fwd, double *t_bwd,
                         double *t_opt) {
  int W = m->width, B = m->batch, L = m->layers;
  size_t act = (size_t)B * W;
  double t0 = zinc_now();
  for (int l = 0; l < L; l++) {
    if (zinc_module_fetch(e, m->mods[l]) != ZINC_OK)
      die("fetch");
    layer_forward(zinc_param_data(m->w[l]), m->act + l * act, m->act + (l + 1) * act, W, B);
    if (zinc_module_release(e, m->mods[l]) != ZINC_OK)
      die("release");
  }
  double loss = 0;
  const float *y = m->act + (size_t)L * act;
  for (size_t k = 0; k < act; k++) {
    double d = y[k] - m->target[k];
    loss += 0.5 * d * d / (double)act;
    m->dy[k] = (float)(d / (double)act) * zinc_loss_scale(e);
  }
  double t1 = zinc_now();
  for (int l = L - 1; l >= 0; l--) {
    if (zinc_module_fetch(e, m->mods[l]) != ZINC_OK)
      die("fetch (backward)");
    layer_backward(zinc_param_data(m->w[l]), zinc_param_grad(m->w[l]), m->act + l * act, m->dy,
                   m->dx, W, B);
    if (zinc_module_grads_ready(e, m->mods[l]) != ZINC_OK)
      die("grads_ready");
    if (zinc_module_release(e, m->mods[l]) != ZINC_OK)
      die("release (backward)");
    float *swap = m->dy;
    m->dy = m->dx;
    m->dx = swap;
  }
  if (zinc_backward_end(e) != ZINC_OK)
    die("backward_end");
  double t2 = zinc_now();
  if (zinc_step(e, NULL) != ZINC_OK)
    die("step");
  double t3 = zinc_now();
  *t_fwd = t1 - t0, *t_bwd = t2 - t1, *t_opt = t3 - t2;
  return loss;
}

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--state-x X | --state-gib G] [--dir DIR] [--steps N] [--width W]\n"
          "          [--batch B] [--sub-group N] [--lr LR] [--max-host-frac F]\n",
          argv0);
  return 2;
}

int main(int argc, char **argv) {
  double state_x = 2.0, state_gib = 0, lr = 0, max_host_frac = 0.8;
  const char *dir = "/tmp/zinc_infinity_demo";
  int steps = 3, width = 4096, batch = 2;
  int64_t sub_group = 0;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      return usage(argv[0]);
    const char *k = argv[i], *v = argv[++i];
    if (!strcmp(k, "--state-x")) state_x = atof(v);
    else if (!strcmp(k, "--state-gib")) state_gib = atof(v);
    else if (!strcmp(k, "--dir")) dir = v;
    else if (!strcmp(k, "--steps")) steps = atoi(v);
    else if (!strcmp(k, "--width")) width = atoi(v);
    else if (!strcmp(k, "--batch")) batch = atoi(v);
    else if (!strcmp(k, "--sub-group")) sub_group = atoll(v);
    else if (!strcmp(k, "--lr")) lr = atof(v);
    else if (!strcmp(k, "--max-host-frac")) max_host_frac = atof(v);
    else return usage(argv[0]);
  }
  if (steps < 2 || width < 64 || width % 64 || batch < 1 || state_x <= 0)
    return usage(argv[0]);

  /* ---- size: optimizer state (fp32 master, exp_avg, exp_avg_sq: 12 B per
   * parameter) = state_x x MemTotal, or state_gib */
  uint64_t mem_total = meminfo("MemTotal");
  double state_bytes = state_gib > 0 ? state_gib * GIB : state_x * (double)mem_total;
  int64_t per_layer = (int64_t)width * width;
  int layers = (int)ceil(state_bytes / 12.0 / (double)per_layer);
  if (layers < 2)
    layers = 2;
  int64_t params = per_layer * layers;
  uint64_t opt_bytes = (uint64_t)params * 12, param_bytes = (uint64_t)params * 2;
  if (sub_group <= 0)
    sub_group = per_layer < (1 << 24) ? per_layer : (1 << 24);
  if (lr <= 0) /* each step moves every output by ~0.2 toward its target */
    lr = 0.2 / ((double)layers * width);
  uint64_t rate_bytes = opt_bytes / 8 < (2ull << 30) ? opt_bytes / 8 : (2ull << 30);
  if (rate_bytes < (64ull << 20))
    rate_bytes = 64ull << 20;
  printf("infinity_demo: %d layers of %d x %d (bf16), %.3f G parameters, batch %d; "
         "ZeRO stage 3, parameters and optimizer state on NVMe (%s)\n",
         layers, width, width, (double)params / 1e9, batch, dir);
  printf("machine: MemTotal %.2f GiB, MemAvailable %.2f GiB; optimizer state %.2f GiB = "
         "%.2f x MemTotal, bf16 parameters %.2f GiB\n",
         mem_total / GIB, meminfo("MemAvailable") / GIB, opt_bytes / GIB,
         (double)opt_bytes / (double)mem_total, param_bytes / GIB);

  /* ---- disk: each swap region takes whole 1 MiB blocks carrying 1 MiB -
   * 4 KiB of payload (offload/swap.h): one region per optimizer sub-group
   * (12 B per element), one for the parameter partition (2 B); 256 MiB of
   * margin */
  if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) {
    fprintf(stderr, "infinity_demo: cannot create or write %s\n", dir);
    return 2;
  }
  struct statvfs vfs;
  if (statvfs(dir, &vfs) != 0) {
    fprintf(stderr, "infinity_demo: statvfs %s failed\n", dir);
    return 2;
  }
  uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  const uint64_t block = 1ull << 20, payload = block - 4096;
  uint64_t need = (256ull << 20) + (param_bytes + payload - 1) / payload * block;
  for (int64_t a = 0; a < params; a += sub_group) {
    uint64_t g = (uint64_t)(params - a < sub_group ? params - a : sub_group);
    need += (g * 12 + payload - 1) / payload * block; /* master, exp_avg, exp_avg_sq */
    need += (g * 4 + payload - 1) / payload * block;  /* the f32 gradients */
  }
  printf("disk: %.2f GiB needed (state and parameters in whole blocks, margin), %.2f GiB "
         "available on %s\n", need / GIB, avail / GIB, dir);
  if (need > avail) {
    fprintf(stderr,
            "infinity_demo: refused: the swap files need %llu bytes (%.2f GiB) but %s has "
            "%llu bytes (%.2f GiB) available; free space, point --dir elsewhere or lower "
            "--state-x / --state-gib\n",
            (unsigned long long)need, need / GIB, dir, (unsigned long long)avail, avail / GIB);
    printf("SKIPPED: not enough disk space\n");
    return 77;
  }

  /* ---- host memory: refuse what would crowd the machine */
  size_t act_bytes = (size_t)(layers + 4) * batch * width * sizeof(float);
  double forecast = 64.0 * (double)sub_group + 52.0 * (double)per_layer + (double)act_bytes +
                    (double)(256 << 20);
  uint64_t mem_avail = meminfo("MemAvailable");
  printf("host memory forecast: %.2f GiB (buffers and activations; the f32 gradient "
         "partition, %.2f GiB, is on disk) = %.3f of MemTotal\n", forecast / GIB,
         4.0 * params / GIB, forecast / (double)mem_total);
  if (forecast > max_host_frac * (double)mem_avail) {
    fprintf(stderr,
            "infinity_demo: refused: the engine would hold %.0f bytes (%.2f GiB) of host "
            "memory, more than %.2f of MemAvailable %llu bytes (%.2f GiB); lower --state-x / "
            "--state-gib, or raise --max-host-frac\n",
            forecast, forecast / GIB, max_host_frac, (unsigned long long)mem_avail,
            mem_avail / GIB);
    printf("SKIPPED: not enough memory for the gradient partition\n");
    return 77;
  }

  char json[2048];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": %d, \"bf16\": {\"enabled\": true},"
           " \"gradient_clipping\": 0,"
           " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": %.9g,"
           " \"weight_decay\": 0}},"
           " \"zero_optimization\": {\"stage\": 3, \"sub_group_size\": %lld,"
           " \"reduce_bucket_size\": %lld, \"stage3_param_persistence_threshold\": 0,"
           " \"stage3_prefetch_bucket_size\": %lld, \"stage3_max_live_parameters\": %lld,"
           " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\","
           " \"buffer_count\": 4},"
           " \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\","
           " \"buffer_count\": 4, \"buffer_size\": %lld}},"
           " \"aio\": {\"block_size\": 1048576, \"queue_depth\": 8,"
           " \"intra_op_parallelism\": 2}}",
           batch, lr, (long long)sub_group, (long long)per_layer, (long long)per_layer,
           (long long)(3 * per_layer), dir, dir, (long long)per_layer);
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK)
    die("config");
  double read_bw = 0, write_bw = 0;
  if (bench_disk_rate(&cfg->s, dir, rate_bytes, 16ull << 20, 4, &read_bw, &write_bw) != ZINC_OK)
    die("disk rate");
  printf("disk through the swap path (O_DIRECT, no compute, %.2f GiB each way): "
         "read %.2f GB/s, write %.2f GB/s\n", rate_bytes / GIB, read_bw / 1e9, write_bw / 1e9);
  fflush(stdout);

  double rss_start = current_rss_bytes();
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    die("engine");
  zinc_config_free(cfg);
  model m = {.width = width, .layers = layers, .batch = batch};
  m.mods = calloc((size_t)layers, sizeof *m.mods);
  m.w = calloc((size_t)layers, sizeof *m.w);
  size_t act = (size_t)batch * width;
  m.act = calloc((size_t)(layers + 1) * act, sizeof *m.act);
  m.dy = calloc(act, sizeof *m.dy);
  m.dx = calloc(act, sizeof *m.dx);
  m.target = calloc(act, sizeof *m.target);
  if (!m.mods || !m.w || !m.act || !m.dy || !m.dx || !m.target) {
    fprintf(stderr, "infinity_demo: out of memory for the activations\n");
    return 1;
  }
  for (int l = 0; l < layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d", l);
    m.mods[l] = zinc_module_add(e, name);
    int64_t shape[2] = {width, width};
    m.w[l] = zinc_param_add(e, m.mods[l], "w", ZINC_BF16, 2, shape);
    if (!m.w[l])
      die("param_add");
  }
  uint64_t seed = 2024;
  for (size_t k = 0; k < act; k++) {
    m.act[k] = sign_of(&seed);
    m.target[k] = sign_of(&seed);
  }
  double t0 = zinc_now();
  uint64_t rd0, wr0, rd1, wr1;
  process_io(&rd0, &wr0);
  if (zinc_engine_build(e, init_identity, NULL) != ZINC_OK)
    die("build");
  process_io(&rd1, &wr1);
  uint64_t on_disk = dir_file_bytes(dir, 2);
  printf("build: %.1f s (wrote %.2f GiB: the parameters and the initial optimizer state); "
         "swap files in %s: %.2f GiB = %.2f x MemTotal\n",
         zinc_now() - t0, (double)(wr1 - wr0) / GIB, dir, on_disk / GIB,
         (double)on_disk / (double)mem_total);
  fflush(stdout);

  double prev = INFINITY, first = 0, last = 0, step_sum = 0, io_sum = 0;
  int decreasing = 1;
  for (int s = 0; s < steps; s++) {
    double tf, tb, to;
    process_io(&rd0, &wr0);
    double ts = zinc_now();
    double loss = train_step(e, &m, &tf, &tb, &to);
    double dt = zinc_now() - ts;
    process_io(&rd1, &wr1);
    double rd = (double)(rd1 - rd0), wr = (double)(wr1 - wr0);
    double io = rd / read_bw + wr / write_bw;
    printf("step %d: loss %.6f | step %.1f s (forward %.1f, backward %.1f, optimizer %.1f) | "
           "disk read %.2f GiB + write %.2f GiB alone: %.1f s | I/O share %.2f\n",
           s + 1, loss, dt, tf, tb, to, rd / GIB, wr / GIB, io, io / dt);
    fflush(stdout);
    if (!(loss < prev))
      decreasing = 0;
    if (s == 0)
      first = loss;
    last = loss;
    prev = loss;
    step_sum += dt;
    io_sum += io;
  }
  zinc_mem_stats ms = ZINC_MEM_STATS_INIT;
  if (zinc_memory_stats(e, &ms) != ZINC_OK)
    die("memory_stats");
  uint64_t accounted = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      if (l != ZINC_LOC_NVME)
        accounted += ms.peak[l][c];
  char *report = NULL;
  if (zinc_memory_report(e, 0, &report) == ZINC_OK && report)
    printf("\nthe engine's memory (zinc_memory_report):\n%s", report);
  free(report);
  on_disk = dir_file_bytes(dir, 2);
  zinc_engine_destroy(e);
  double rss = peak_rss_bytes();
  printf("\nsummary: %.3f G parameters; state on disk: %llu bytes in the swap files "
         "(%.2f GiB = %.2f x MemTotal %.2f GiB)\n",
         (double)params / 1e9, (unsigned long long)on_disk, on_disk / GIB,
         (double)on_disk / (double)mem_total, mem_total / GIB);
  printf("peak RSS %.2f GiB = %.3f of MemTotal (ru_maxrss; before the engine %.3f GiB; "
         "forecast %.2f GiB; the engine accounts %.2f GiB of host memory, of which f32 "
         "gradients %.2f GiB; %.2f GiB of gradients on disk)\n",
         rss / GIB, rss / (double)mem_total, rss_start / GIB, forecast / GIB, accounted / GIB,
         ms.peak[ZINC_LOC_HOST][ZINC_MEM_GRADS] / GIB, ms.peak[ZINC_LOC_NVME][ZINC_MEM_GRADS] / GIB);
  printf("steps: mean %.1f s beside %.1f s for the disk to move the same bytes alone "
         "(I/O share %.2f)\n", step_sum / steps, io_sum / steps, io_sum / step_sum);
  printf("loss %.6f -> %.6f over %d steps: %s\n", first, last, steps,
         decreasing ? "decreasing at every step" : "NOT decreasing");
  int ok = 1;
  if (!decreasing) {
    fprintf(stderr, "infinity_demo: FAIL: the loss did not decrease at every step\n");
    ok = 0;
  }
  if (rss - rss_start > forecast) {
    fprintf(stderr, "infinity_demo: FAIL: the peak RSS grew by %.2f GiB over the %.2f GiB "
            "before the engine, beyond the %.2f GiB forecast: state held in memory?\n",
            (rss - rss_start) / GIB, rss_start / GIB, forecast / GIB);
    ok = 0;
  }
  free(m.mods), free(m.w), free(m.act), free(m.dy), free(m.dx), free(m.target);
  printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
