/*
 * aio_bench.c — sequential read and write bandwidth of zinc's I/O engine
 * beside fio's io_uring O_DIRECT figure for the same file, block size and
 * queue depth, measured in the same run, over a grid of block sizes and
 * queue depths; then the swap-area path (header + crc32c per block) beside
 * the plain engine at one point.
 *
 *   aio_bench [--quick] [--dir DIR] [--size BYTES] [--point-bytes BYTES]
 *             [--repeat N] [--fio-args OPTS] [--fio-plain] [--no-fio]
 *
 *   --quick        3 points, 256 MiB each (well under a minute)
 *   --dir          where the test file goes (default: .); its filesystem
 *                  must take O_DIRECT
 *   --size         test file size (default 4 GiB, at most a quarter of the
 *                  free space); sizes take K/M/G suffixes
 *   --point-bytes  bytes moved per measurement (default min(size, 1 GiB))
 *   --repeat       measurements per cell, best kept (default 1)
 *   --fio-args     extra fio options
 *   --fio-plain    run fio without --fixedbufs --registerfiles
 *
 * fio runs with --fixedbufs --registerfiles: zinc registers its buffers and
 * files with the ring, so like is compared with like (fio plain reads
 * measurably slower than registered on the same disk). The peer line
 * prints the options fio ran with.
 *
 * The target is zinc >= 90% of fio: the verdict line uses the geometric
 * mean of the zinc/fio ratios, per direction, and lists the cells below
 * 0.90. The file is filled with real data first (reads of unwritten
 * extents never reach the disk) and removed at the end. Without fio the
 * table shows zinc alone and the verdict says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/base.h"
#include "offload/aio.h"
#include "offload/swap.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define BUF_BYTES (256 * MiB) /* host buffer reused by every op of a batch */

typedef struct {
  const char *dir;
  char file[4096];
  uint64_t size, point_bytes;
  int quick, repeat, use_fio;
  int fio_plain;         /* 1: fio without registered buffers and files      */
  const char *fio_args;  /* extra fio options                               */
  void *buf;
} bench;

static uint64_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'k': case 'K': v *= 1024; break;
  case 'm': case 'M': v *= MiB; break;
  case 'g': case 'G': v *= GiB; break;
  default: break;
  }
  return v > 0 ? (uint64_t)v : 0;
}

static const char *size_name(uint64_t b, char *out, size_t len) {
  if (b >= MiB && b % MiB == 0)
    snprintf(out, len, "%lluM", (unsigned long long)(b / MiB));
  else
    snprintf(out, len, "%lluK", (unsigned long long)(b / 1024));
  return out;
}

static zinc_status make_engine(const bench *b, int64_t bs, int qd, zinc_aio **aio) {
  zinc_aio_params p;
  memset(&p, 0, sizeof p);
  p.block_size = bs;
  p.queue_depth = qd;
  p.rings = 1;
  p.overlap_events = 1;
  p.probe_dirs[0] = b->dir;
  p.probe_dir_count = 1;
  static const zinc_aio_fault none;
  p.fault = &none;
  ZINC_CHECK(zinc_aio_create(&p, aio));
  if (!zinc_aio_is_direct(*aio)) {
    zinc_aio_destroy(*aio);
    return zinc_error(ZINC_ERR_UNSUPPORTED, "%s does not take O_DIRECT", b->dir);
  }
  return ZINC_OK;
}

/* GB/s of one sequential pass of `bytes` from offset 0 through zinc. */
static zinc_status zinc_pass(const bench *b, int64_t bs, int qd, zinc_aio_dir dir,
                             uint64_t bytes, double *gbs) {
  zinc_aio *aio;
  ZINC_CHECK(make_engine(b, bs, qd, &aio));
  int file;
  zinc_status st = zinc_aio_file_open(aio, b->file, O_CREAT, 0600, &file);
  zinc_aio_op *ops = NULL;
  int nops = (int)zinc_div_up(bytes, BUF_BYTES);
  if (st == ZINC_OK)
    st = zinc_aio_buffer_register(aio, b->buf, BUF_BYTES);
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&ops, (size_t)nops, sizeof *ops, "bench ops");
  if (st == ZINC_OK) {
    for (int i = 0; i < nops; i++) {
      uint64_t off = (uint64_t)i * BUF_BYTES;
      ops[i] = (zinc_aio_op){dir, file, off, b->buf,
                             bytes - off < BUF_BYTES ? bytes - off : BUF_BYTES, 0};
    }
    zinc_aio_handle *h;
    double t0 = zinc_now();
    st = zinc_aio_submit(aio, ops, nops, NULL, &h);
    if (st == ZINC_OK)
      st = zinc_aio_wait(h);
    *gbs = (double)bytes / (zinc_now() - t0) / 1e9;
  }
  free(ops);
  zinc_aio_destroy(aio);
  return st;
}

/* fio's io_uring options matching what zinc's engine does: registered
 * buffers and registered files (zinc_aio_create registers both). */
static const char *fio_registered(const bench *b) {
  return b->fio_plain ? "" : "--fixedbufs --registerfiles ";
}

/* GB/s of fio doing the same pass; 0 if fio failed (message printed). */
static double fio_pass(const bench *b, int64_t bs, int qd, zinc_aio_dir dir, uint64_t bytes) {
  const char *rw = dir == ZINC_AIO_WRITE ? "write" : "read";
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "fio --name=zinc_aio_bench --filename='%s' --rw=%s --bs=%lld --iodepth=%d "
           "--ioengine=io_uring --direct=1 --size=%llu --offset=0 --numjobs=1 "
           "--output-format=json %s%s 2>&1",
           b->file, rw, (long long)bs, qd, (unsigned long long)bytes, fio_registered(b),
           b->fio_args);
  FILE *p = popen(cmd, "r");
  if (!p)
    return 0;
  static char out[1 << 20];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  char key[32];
  snprintf(key, sizeof key, "\"%s\" : {", rw);
  const char *sec = strstr(out, key);
  const char *bw = sec ? strstr(sec, "\"bw_bytes\" : ") : NULL;
  if (rc != 0 || !bw) {
    fprintf(stderr, "fio failed (%s):\n%.2000s\n", cmd, out);
    return 0;
  }
  return strtod(bw + strlen("\"bw_bytes\" : "), NULL) / 1e9;
}

static double best(double a, double b) { return a > b ? a : b; }

typedef struct {
  double log_sum[2];
  int count[2];
  double lowest;
  char lowest_at[64];
  char below[2048];
} verdict;

static void account(verdict *v, int d, double ratio, const char *cell) {
  if (ratio <= 0)
    return;
  v->log_sum[d] += log(ratio);
  v->count[d]++;
  if (ratio < v->lowest) {
    v->lowest = ratio;
    snprintf(v->lowest_at, sizeof v->lowest_at, "%s", cell);
  }
  if (ratio < 0.90) {
    size_t len = strlen(v->below);
    snprintf(v->below + len, sizeof v->below - len, "%s%s %.2f", len ? ", " : "", cell, ratio);
  }
}

static zinc_status run_grid(bench *b, verdict *v) {
  static const int64_t full_bs[] = {128 * 1024, 512 * 1024, 1 << 20, 2 << 20, 8 << 20};
  static const int full_qd[] = {1, 4, 8, 16, 32};
  static const int64_t quick_bs[] = {128 * 1024, 1 << 20, 8 << 20};
  static const int quick_qd[] = {1, 8, 32};
  printf("\n block  qd | read GB/s: zinc    fio  ratio | write GB/s: zinc    fio  ratio\n");
  printf("-----------+--------------------------------+---------------------------------\n");
  int npoints = b->quick ? 3 : 25;
  for (int i = 0; i < npoints; i++) {
    int64_t bs = b->quick ? quick_bs[i] : full_bs[i / 5];
    int qd = b->quick ? quick_qd[i] : full_qd[i % 5];
    char bsname[32];
    size_name((uint64_t)bs, bsname, sizeof bsname);
    double z[2] = {0, 0}, f[2] = {0, 0};
    for (int d = 0; d < 2; d++) { /* read, then write */
      zinc_aio_dir dir = d ? ZINC_AIO_WRITE : ZINC_AIO_READ;
      for (int r = 0; r < b->repeat; r++) {
        /* alternate who goes first, so neither always meets a warm device */
        int fio_first = (i + r) & 1;
        double g = 0;
        if (fio_first && b->use_fio)
          f[d] = best(f[d], fio_pass(b, bs, qd, dir, b->point_bytes));
        ZINC_CHECK(zinc_pass(b, bs, qd, dir, b->point_bytes, &g));
        z[d] = best(z[d], g);
        if (!fio_first && b->use_fio)
          f[d] = best(f[d], fio_pass(b, bs, qd, dir, b->point_bytes));
      }
    }
    char cell[64];
    printf("%6s %3d |", bsname, qd);
    for (int d = 0; d < 2; d++) {
      double ratio = f[d] > 0 ? z[d] / f[d] : 0;
      if (b->use_fio)
        printf("       %6.3f %6.3f %6.2f %s", z[d], f[d], ratio, d ? "" : "|");
      else
        printf("       %6.3f      -      - %s", z[d], d ? "" : "|");
      snprintf(cell, sizeof cell, "%s %s x %d", d ? "write" : "read", bsname, qd);
      account(v, d, ratio, cell);
    }
    printf("\n");
    fflush(stdout);
  }
  return ZINC_OK;
}

/* GB/s of writing then reading one swap region of `bytes` (res[0], res[1])
 * and of plain reads and writes of the same bytes of the same file
 * (res[2], res[3]), so that both meet the same extents. */
static zinc_status swap_pass(bench *b, int64_t bs, int qd, int checksums, uint64_t bytes,
                             double res[4]) {
  zinc_aio *aio;
  ZINC_CHECK(make_engine(b, bs, qd, &aio));
  const char *paths[1] = {b->dir};
  zinc_swap_params sp = {paths, 1, 0, "bench", "aio_bench", checksums, &bytes, 1};
  zinc_swap *sw = NULL;
  int file = -1;
  zinc_status st = zinc_swap_create(aio, &sp, &sw);
  if (st == ZINC_OK)
    st = zinc_aio_buffer_register(aio, b->buf, BUF_BYTES);
  /* A first write turns the reserved (unwritten) extents into written
   * ones, a cost paid once per area: time the steady state after it. */
  if (st == ZINC_OK)
    st = zinc_swap_write(sw, 0, 0, b->buf, bytes, NULL);
  double t[5] = {zinc_now()};
  if (st == ZINC_OK)
    st = zinc_swap_write(sw, 0, 0, b->buf, bytes, NULL);
  t[1] = zinc_now();
  if (st == ZINC_OK)
    st = zinc_swap_read(sw, 0, 0, b->buf, bytes, NULL);
  t[2] = zinc_now();
  char path[4200];
  snprintf(path, sizeof path, "%s/stripe0.swap", zinc_swap_dir(sw, 0));
  if (st == ZINC_OK)
    st = zinc_aio_file_open(aio, path, 0, 0, &file);
  t[2] = zinc_now();
  if (st == ZINC_OK)
    st = zinc_aio_write(aio, file, 0, b->buf, bytes);
  t[3] = zinc_now();
  if (st == ZINC_OK)
    st = zinc_aio_read(aio, file, 0, b->buf, bytes);
  t[4] = zinc_now();
  for (int i = 0; i < 4; i++)
    res[i] = bytes / (t[i + 1] - t[i]) / 1e9;
  if (file >= 0)
    zinc_aio_file_close(aio, file);
  zinc_swap_destroy(sw);
  zinc_aio_destroy(aio);
  return st;
}

/* The swap-area path (vectored 4 KiB header per block, crc32c on and off)
 * beside plain I/O on the same file at DeepSpeed's default block size and
 * queue depth. */
static zinc_status swap_point(bench *b) {
  int64_t bs = 1 << 20;
  int qd = 8;
  uint64_t bytes = b->point_bytes < BUF_BYTES ? b->point_bytes : BUF_BYTES;
  double best_of[2][4] = {{0}}; /* [checksums][swap w, swap r, plain w, plain r] */
  for (int r = 0; r < b->repeat; r++)
    for (int c = 0; c < 2; c++) {
      double res[4];
      ZINC_CHECK(swap_pass(b, bs, qd, c, bytes, res));
      for (int i = 0; i < 4; i++)
        best_of[c][i] = best(best_of[c][i], res[i]);
    }
  printf("\nswap area vs plain zinc I/O on the same file (1M blocks, qd 8, 1 ring, %llu MiB, "
         "steady state after a first write):\n", (unsigned long long)(bytes / MiB));
  for (int c = 0; c < 2; c++) {
    const double *x = best_of[c];
    printf("  crc32c %-3s  swap read %.3f GB/s = %.2f of plain (%.3f), swap write %.3f GB/s "
           "= %.2f of plain (%.3f)\n",
           c ? "on" : "off", x[1], x[1] / x[3], x[3], x[0], x[0] / x[2], x[2]);
  }
  return ZINC_OK;
}

static zinc_status prepare(bench *b) {
  struct statvfs vs;
  if (statvfs(b->dir, &vs) != 0)
    return zinc_error(ZINC_ERR_IO, "statvfs %s: %s", b->dir, strerror(errno));
  uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
  if (!b->size)
    b->size = b->quick ? BUF_BYTES : 4 * GiB;
  if (b->size > avail / 4) {
    uint64_t cap = avail / 4 / (8 * MiB) * (8 * MiB);
    printf("note: %s has %.1f GiB free; the file is capped at a quarter of it (%.2f GiB)\n",
           b->dir, avail / (double)GiB, cap / (double)GiB);
    b->size = cap;
  }
  b->size = b->size / (8 * MiB) * (8 * MiB);
  if (b->size < 8 * MiB)
    return zinc_error(ZINC_ERR_NOMEM, "not enough free space in %s for a test file", b->dir);
  if (!b->point_bytes || b->point_bytes > b->size)
    b->point_bytes = b->size < GiB ? b->size : GiB;
  b->point_bytes = b->point_bytes / (8 * MiB) * (8 * MiB);
  if (b->point_bytes == 0)
    b->point_bytes = 8 * MiB;
  snprintf(b->file, sizeof b->file, "%s/zinc_aio_bench.%ld.dat", b->dir, (long)getpid());
  /* 2 MiB aligned, on transparent huge pages, as zinc_aio_buffer_alloc
   * gives them: what a swapper's staging buffers should be. */
  ZINC_CHECK(zinc_aligned_alloc(&b->buf, 2 * MiB, BUF_BYTES, "the benchmark buffer"));
  madvise(b->buf, BUF_BYTES, MADV_HUGEPAGE);
  for (uint64_t i = 0; i < BUF_BYTES / 8; i++)
    ((uint64_t *)b->buf)[i] = i * 0x9E3779B97F4A7C15ull;
  double g;
  printf("filling %s with %.2f GiB of data...\n", b->file, b->size / (double)GiB);
  fflush(stdout);
  return zinc_pass(b, 8 << 20, 32, ZINC_AIO_WRITE, b->size, &g);
}

int main(int argc, char **argv) {
  bench b = {0};
  b.dir = ".";
  b.fio_args = "";
  b.repeat = 1;
  b.use_fio = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      b.quick = 1;
    else if (!strcmp(argv[i], "--no-fio"))
      b.use_fio = 0;
    else if (!strcmp(argv[i], "--fio-plain"))
      b.fio_plain = 1;
    else if (!strcmp(argv[i], "--fio-args") && i + 1 < argc)
      b.fio_args = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
      b.dir = argv[++i];
    else if (!strcmp(argv[i], "--size") && i + 1 < argc)
      b.size = parse_bytes(argv[++i]);
    else if (!strcmp(argv[i], "--point-bytes") && i + 1 < argc)
      b.point_bytes = parse_bytes(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      b.repeat = atoi(argv[++i]);
      if (b.repeat < 1)
        b.repeat = 1;
    }
    else {
      fprintf(stderr, "usage: %s [--quick] [--dir DIR] [--size BYTES] [--point-bytes BYTES] "
              "[--repeat N] [--fio-args OPTS] [--fio-plain] [--no-fio]\n", argv[0]);
      return 2;
    }
  }
  char fio_version[128] = "";
  if (b.use_fio) {
    FILE *p = popen("fio --version 2>/dev/null", "r");
    if (!p || !fgets(fio_version, sizeof fio_version, p))
      fio_version[0] = '\0';
    if (p)
      pclose(p);
    fio_version[strcspn(fio_version, "\n")] = '\0';
    if (!fio_version[0]) {
      printf("fio: NOT FOUND — install fio (Debian/Ubuntu: apt install fio) to compare; "
             "showing zinc alone, no verdict\n");
      b.use_fio = 0;
    }
  }
  zinc_status st = prepare(&b);
  verdict v = {{0, 0}, {0, 0}, 1e9, "", ""};
  if (st == ZINC_OK) {
    printf("zinc aio_bench: %s (%.2f GiB file, %.2f GiB per measurement, best of %d), 1 ring, "
           "O_DIRECT, overlap_events on, registered THP buffer and file; peer: %s io_uring "
           "--direct=1 %s%s, same file/bs/depth\n",
           b.file, b.size / (double)GiB, b.point_bytes / (double)GiB, b.repeat,
           b.use_fio ? fio_version : "none", fio_registered(&b), b.fio_args);
    st = run_grid(&b, &v);
  }
  if (st == ZINC_OK)
    st = swap_point(&b);
  unlink(b.file);
  free(b.buf);
  if (st != ZINC_OK) {
    fprintf(stderr, "aio_bench: %s\n", zinc_last_error());
    return 1;
  }
  if (!b.use_fio) {
    printf("\nVERDICT: none (fio missing or --no-fio)\n");
    return 0;
  }
  double gm[2];
  for (int d = 0; d < 2; d++)
    gm[d] = v.count[d] ? exp(v.log_sum[d] / v.count[d]) : 0;
  int pass = gm[0] >= 0.90 && gm[1] >= 0.90;
  printf("\n%s: zinc/fio geometric mean read %.2f, write %.2f (target >= 0.90); lowest cell "
         "%.2f (%s)%s%s\n",
         pass ? "PASS" : "FAIL", gm[0], gm[1], v.lowest, v.lowest_at,
         v.below[0] ? "; cells below 0.90: " : "", v.below);
  return pass ? 0 : 1;
}
