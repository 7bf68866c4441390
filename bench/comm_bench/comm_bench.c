/*
 * comm_bench.c — bus bandwidth of zinc's mpi comm against the raw MPI
 * collectives on the same buffers, in the same run, and a demonstration that
 * a started reduce-scatter progresses while the caller computes.
 *
 *   mpirun -n 2 --oversubscribe comm_bench [options]
 *
 * Conventions (nccl-tests): bytes = the full buffer (reduce-scatter: the
 * send buffer; all-gather: the receive buffer; all-reduce: the buffer),
 * algbw = bytes / time, busbw = algbw * (n-1)/n for reduce-scatter and
 * all-gather, algbw * 2(n-1)/n for all-reduce. Time is the slowest rank's.
 * Element type f32, sum. Each figure is the best of five rounds that
 * interleave the methods (the machine may be shared with other work).
 *
 * Columns: zinc with buffers from alloc_shared (peers read them in place),
 * zinc with malloc buffers (staged through the scratch window), and the raw
 * MPI call (MPI_Reduce_scatter_block, MPI_Allgather, MPI_Allreduce) on the
 * alloc_shared buffers; ratio = zinc(shared) / raw MPI; with --p2p,
 * vs p2p = zinc(shared) / zinc(p2p).
 *
 * Across nodes (e.g. tests/cluster/cluster.sh run -- -n 4 comm_bench --p2p,
 * or on one machine with ZINC_COMM_NODE_SIZE=2) zinc takes its node-aware
 * path and the targets change: zinc >= 0.95x raw MPI at every size >= 1 MiB,
 * and >= 1.5x the flat p2p path wherever the flat path is below 0.95x raw
 * MPI.
 *
 * Options:
 *   --min-bytes N --max-bytes N   size range (default 1 MiB .. 256 MiB)
 *   --step K                      multiply the size by K (default 4)
 *   --time S                      seconds per measurement (default 0.3)
 *   --quick                       1 MiB .. 16 MiB, 0.1 s per measurement
 *   --overlap-bytes N             reduce-scatter size of the overlap test
 *   --p2p                         add a column: zinc forced onto its point-to-point
 *                                 path (the multi-node fallback), malloc buffers
 *   --no-overlap / --no-bandwidth skip a section
 */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "comm/comm.h"
#include "comm/comm_mpi_impl.h"

typedef struct {
  size_t min_bytes, max_bytes;
  int step;
  double seconds;          /* per measurement */
  size_t overlap_bytes;
  int bandwidth, overlap, p2p;
} options;

/* Measurement rounds per figure (the best is kept). */
#define ROUNDS 5

typedef enum { OP_RS, OP_AG, OP_AR, OP_N } bench_op;
static const char *op_name[OP_N] = {"reduce-scatter", "all-gather", "all-reduce"};
static const char *mpi_name[OP_N] = {"MPI_Reduce_scatter_block", "MPI_Allgather",
                                     "MPI_Allreduce"};

typedef struct {
  zinc_comm *c;
  int rank, size;
  float *send, *recv;      /* the buffers of one measurement */
  size_t count;            /* elements: per-rank part (RS, AG) or all (AR) */
} bench_ctx;

/* ------------------------------------------------------------ timing */

static void die_on(zinc_status st, const char *what) {
  if (st == ZINC_OK)
    return;
  fprintf(stderr, "comm_bench: %s: %s\n", what, zinc_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void run_zinc(bench_ctx *b, bench_op op) {
  zinc_coll o = {.send = b->send, .recv = b->recv, .count = b->count, .dtype = ZINC_F32};
  o.kind = op == OP_RS ? ZINC_COLL_REDUCE_SCATTER : op == OP_AG ? ZINC_COLL_ALLGATHER
                                                                : ZINC_COLL_ALLREDUCE;
  die_on(b->c->ops->run(b->c, &o, 1), op_name[op]);
}

static void run_mpi(bench_ctx *b, bench_op op) {
  int n = (int)b->count, rc = MPI_SUCCESS;
  if (op == OP_RS)
    rc = MPI_Reduce_scatter_block(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (op == OP_AG)
    rc = MPI_Allgather(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, MPI_COMM_WORLD);
  else
    rc = MPI_Allreduce(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS)
    MPI_Abort(MPI_COMM_WORLD, rc);
}

/* Iterations that fill `budget` seconds, from one warm-up call (the same
 * count on every rank). */
static int calibrate(bench_ctx *b, bench_op op, int raw, double budget) {
  void (*fn)(bench_ctx *, bench_op) = raw ? run_mpi : run_zinc;
  MPI_Barrier(MPI_COMM_WORLD);
  double t = zinc_now();
  fn(b, op);
  t = zinc_now() - t;
  double slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int iters = (int)(budget / (slowest > 1e-6 ? slowest : 1e-6));
  return iters < 1 ? 1 : iters > 200 ? 200 : iters;
}

/* Seconds per call over `iters` calls, slowest rank. */
static double measure(bench_ctx *b, bench_op op, int raw, int iters) {
  void (*fn)(bench_ctx *, bench_op) = raw ? run_mpi : run_zinc;
  MPI_Barrier(MPI_COMM_WORLD);
  double t = zinc_now();
  for (int i = 0; i < iters; i++)
    fn(b, op);
  t = (zinc_now() - t) / iters;
  double slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

static double busbw(bench_op op, size_t bytes, int n, double seconds) {
  double algbw = (double)bytes / seconds / 1e9;
  double factor = op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
  return n > 1 ? algbw * factor : algbw;
}

/* ------------------------------------------------------------ bandwidth */

typedef struct {
  double zinc_shared, zinc_malloc, zinc_p2p, mpi; /* busbw GB/s; p2p NAN if not run */
} row;

static void fill(float *p, size_t n, int rank) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((i * 7 + (size_t)rank * 13) % 1024) * 0.25f;
}

/* p2p: a comm forced onto the point-to-point path (the multi-node
 * fallback), or NULL. */
static void bench_size(zinc_comm *c, zinc_comm *p2p, size_t bytes, double budget,
                       row out[OP_N]) {
  const int n = c->size;
  size_t per_rank = bytes / (sizeof(float) * (size_t)n); /* RS/AG count */
  size_t full = per_rank * (size_t)n;                     /* elements of the full buffer */
  size_t used = full * sizeof(float);
  char *shared = NULL;
  die_on(c->ops->alloc_shared(c, 2 * used, (void **)&shared), "alloc_shared");
  char *heap = NULL;
  die_on(zinc_aligned_alloc((void **)&heap, 4096, 2 * used, "bench malloc buffers"),
         "malloc buffers");
  fill((float *)shared, 2 * full, c->rank);
  fill((float *)heap, 2 * full, c->rank);
  /* Rounds that interleave the three methods, best round kept: the machine
   * may be shared, and noise should hit every method alike. */
  for (int op = 0; op < OP_N; op++) {
    bench_ctx on_shared = {c, c->rank, n, (float *)shared, (float *)(shared + used),
                           op == OP_AR ? full : per_rank};
    bench_ctx on_heap = on_shared;
    on_heap.send = (float *)heap;
    on_heap.recv = (float *)(heap + used);
    int it_shared = calibrate(&on_shared, op, 0, budget / ROUNDS);
    int it_mpi = calibrate(&on_shared, op, 1, budget / ROUNDS);
    int it_heap = calibrate(&on_heap, op, 0, budget / ROUNDS);
    bench_ctx on_p2p = on_heap;
    on_p2p.c = p2p;
    int it_p2p = p2p ? calibrate(&on_p2p, op, 0, budget / ROUNDS) : 0;
    double t_shared = INFINITY, t_mpi = INFINITY, t_heap = INFINITY, t_p2p = INFINITY;
    for (int round = 0; round < ROUNDS; round++) {
      t_shared = fmin(t_shared, measure(&on_shared, op, 0, it_shared));
      t_mpi = fmin(t_mpi, measure(&on_shared, op, 1, it_mpi));
      t_heap = fmin(t_heap, measure(&on_heap, op, 0, it_heap));
      if (p2p)
        t_p2p = fmin(t_p2p, measure(&on_p2p, op, 0, it_p2p));
    }
    out[op].zinc_shared = busbw(op, used, n, t_shared);
    out[op].zinc_malloc = busbw(op, used, n, t_heap);
    out[op].zinc_p2p = p2p ? busbw(op, used, n, t_p2p) : NAN;
    out[op].mpi = busbw(op, used, n, t_mpi);
  }
  free(heap);
  c->ops->free_shared(c, shared);
}

static void print_size(size_t bytes) {
  if (bytes >= (1u << 20))
    printf("%7zu MiB", bytes >> 20);
  else
    printf("%7zu KiB", bytes >> 10);
}

static int bench_bandwidth(zinc_comm *c, zinc_comm *p2p, const options *opt) {
  const int n = c->size;
  int nsizes = 0;
  for (size_t s = opt->min_bytes; s <= opt->max_bytes; s *= (size_t)opt->step)
    nsizes++;
  row (*rows)[OP_N] = calloc((size_t)nsizes, sizeof *rows);
  size_t *sizes = calloc((size_t)nsizes, sizeof *sizes);
  if (c->rank == 0) {
    printf("\n# bus bandwidth, GB/s (f32 sum, %d ranks; busbw as nccl-tests)\n", n);
    zinc_mpi *m = zinc_mpi_of(c);
    if (m->use_hier)
      printf("# zinc path: node-aware, %d nodes of %d ranks\n", m->nodes, m->ppn);
    else
      printf("# zinc path: %s\n", m->use_shm ? "shared memory (one node)" : "flat point-to-point");
    printf("%11s  %-15s %12s %12s %12s %10s %8s %10s %8s\n", "bytes", "op", "zinc(shared)",
           "zinc(malloc)", "zinc(p2p)", "raw MPI", "ratio", "malloc/MPI", "vs p2p");
  }
  int i = 0;
  for (size_t s = opt->min_bytes; s <= opt->max_bytes; s *= (size_t)opt->step, i++) {
    sizes[i] = s;
    bench_size(c, p2p, s, opt->seconds, rows[i]);
    if (c->rank != 0)
      continue;
    for (int op = 0; op < OP_N; op++) {
      row *r = &rows[i][op];
      print_size(s);
      char p2p_col[16] = "-", vs_col[16] = "-";
      if (!isnan(r->zinc_p2p)) {
        snprintf(p2p_col, sizeof p2p_col, "%.2f", r->zinc_p2p);
        snprintf(vs_col, sizeof vs_col, "%.2fx", r->zinc_shared / r->zinc_p2p);
      }
      printf("  %-15s %12.2f %12.2f %12s %10.2f %7.2fx %9.2fx %8s   (%s)\n", op_name[op],
             r->zinc_shared, r->zinc_malloc, p2p_col, r->mpi, r->zinc_shared / r->mpi,
             r->zinc_malloc / r->mpi, vs_col, mpi_name[op]);
    }
    fflush(stdout);
  }
  /* Targets, at >= 16 MiB: the worst size counts. */
  int fails = 0;
  if (c->rank == 0 && !zinc_mpi_of(c)->use_shm) {
    /* across nodes: every size >= 1 MiB, every op */
    printf("\n# targets across nodes (every size >= 1 MiB, every op)\n");
    int checked = 0;
    for (int k = 0; k < nsizes; k++) {
      if (sizes[k] < (1u << 20))
        continue;
      for (int op = 0; op < OP_N; op++) {
        row *r = &rows[k][op];
        int ok = r->zinc_shared >= 0.95 * r->mpi;
        checked++;
        fails += !ok;
        printf("%s  %zu MiB %-15s zinc >= 0.95x raw MPI: %.2fx\n", ok ? "PASS" : "FAIL",
               sizes[k] >> 20, op_name[op], r->zinc_shared / r->mpi);
        if (!isnan(r->zinc_p2p) && r->zinc_p2p < 0.95 * r->mpi) {
          int ok_p2p = r->zinc_shared >= 1.5 * r->zinc_p2p;
          fails += !ok_p2p;
          printf("%s  %zu MiB %-15s zinc >= 1.5x the flat path (which is %.2fx raw MPI): "
                 "%.2fx\n", ok_p2p ? "PASS" : "FAIL", sizes[k] >> 20, op_name[op],
                 r->zinc_p2p / r->mpi, r->zinc_shared / r->zinc_p2p);
        }
      }
    }
    if (!checked)
      printf("no size >= 1 MiB measured: targets not checked\n");
  } else if (c->rank == 0) {
    double rs_vs_ag = INFINITY, rs_vs_rs = INFINITY, ag_vs_ag = INFINITY;
    size_t at1 = 0, at2 = 0, at3 = 0;
    for (int k = 0; k < nsizes; k++) {
      if (sizes[k] < (16u << 20))
        continue;
      row *r = rows[k];
      if (r[OP_RS].zinc_shared / r[OP_AG].mpi < rs_vs_ag)
        rs_vs_ag = r[OP_RS].zinc_shared / r[OP_AG].mpi, at1 = sizes[k];
      if (r[OP_RS].zinc_shared / r[OP_RS].mpi < rs_vs_rs)
        rs_vs_rs = r[OP_RS].zinc_shared / r[OP_RS].mpi, at2 = sizes[k];
      if (r[OP_AG].zinc_shared / r[OP_AG].mpi < ag_vs_ag)
        ag_vs_ag = r[OP_AG].zinc_shared / r[OP_AG].mpi, at3 = sizes[k];
    }
    printf("\n# targets (sizes >= 16 MiB, worst size shown; defined at 2 ranks, this run has %d)\n",
           n);
    if (!at1) {
      printf("no size >= 16 MiB measured: targets not checked\n");
    } else {
      int idx1 = 0, idx2 = 0, idx3 = 0;
      for (int k = 0; k < nsizes; k++) {
        idx1 = sizes[k] == at1 ? k : idx1;
        idx2 = sizes[k] == at2 ? k : idx2;
        idx3 = sizes[k] == at3 ? k : idx3;
      }
      int ok1 = rs_vs_ag >= 1.0, ok2 = rs_vs_rs >= 5.0, ok3 = ag_vs_ag >= 0.95;
      printf("%s  zinc reduce-scatter busbw >= raw MPI_Allgather busbw: %.2f vs %.2f GB/s "
             "(%.2fx) at %zu MiB\n", ok1 ? "PASS" : "FAIL", rows[idx1][OP_RS].zinc_shared,
             rows[idx1][OP_AG].mpi, rs_vs_ag, at1 >> 20);
      printf("%s  zinc reduce-scatter busbw >= 5x raw MPI_Reduce_scatter_block: %.2f vs %.2f "
             "GB/s (%.2fx) at %zu MiB\n", ok2 ? "PASS" : "FAIL", rows[idx2][OP_RS].zinc_shared,
             rows[idx2][OP_RS].mpi, rs_vs_rs, at2 >> 20);
      printf("%s  zinc all-gather busbw >= 0.95x raw MPI_Allgather: %.2f vs %.2f GB/s (%.2fx) "
             "at %zu MiB\n", ok3 ? "PASS" : "FAIL", rows[idx3][OP_AG].zinc_shared,
             rows[idx3][OP_AG].mpi, ag_vs_ag, at3 >> 20);
      fails = !ok1 + !ok2 + !ok3;
    }
  }
  free(rows);
  free(sizes);
  return fails;
}

/* -------------------------------------------------------------- overlap */

/* Stand-in for the trainer's work on the calling thread. "cpu": arithmetic
 * on a small private array (no memory traffic to speak of); "idle": the
 * thread sleeps, as a trainer waiting for an accelerator kernel does. */
#define WORK_ELEMS 16384

static void compute(float *work, long reps, int idle, double idle_s) {
  if (idle) {
    struct timespec ts = {(time_t)idle_s, (long)((idle_s - (double)(time_t)idle_s) * 1e9)};
    nanosleep(&ts, NULL);
    return;
  }
  for (long r = 0; r < reps; r++)
    for (int i = 0; i < WORK_ELEMS; i++)
      work[i] = work[i] * 0.999f + 0.001f;
}

static double slowest(double t) {
  double s;
  MPI_Allreduce(&t, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

/* One timed step, slowest rank: 0 compute only, 1 reduce-scatter only,
 * 2 start + compute + wait (*in_wait: the time spent in wait). */
static double overlap_step(zinc_comm *c, const zinc_coll *rs, int what, float *work, long creps,
                           int idle, double idle_s, double *in_wait) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = zinc_now(), w = 0;
  if (what == 0) {
    compute(work, creps, idle, idle_s);
  } else if (what == 1) {
    die_on(c->ops->run(c, rs, 1), "reduce-scatter");
  } else {
    zinc_comm_req *req = NULL;
    die_on(c->ops->start(c, rs, 1, &req), "start reduce-scatter");
    compute(work, creps, idle, idle_s);
    w = zinc_now();
    die_on(c->ops->wait(c, req), "wait reduce-scatter");
    w = zinc_now() - w;
  }
  t = zinc_now() - t;
  if (in_wait)
    *in_wait = slowest(w);
  return slowest(t);
}

static void bench_overlap(zinc_comm *c, const options *opt) {
  const int n = c->size, reps = 9;
  size_t per_rank = opt->overlap_bytes / (sizeof(float) * (size_t)n);
  size_t used = per_rank * (size_t)n * sizeof(float);
  char *shared = NULL;
  die_on(c->ops->alloc_shared(c, 2 * used, (void **)&shared), "alloc_shared");
  fill((float *)shared, 2 * per_rank * (size_t)n, c->rank);
  zinc_coll rs = {.kind = ZINC_COLL_REDUCE_SCATTER, .send = shared, .recv = shared + used,
                  .count = per_rank, .dtype = ZINC_F32};
  float *work = calloc(WORK_ELEMS, sizeof *work); /* the compute's private data */
  /* the reduce-scatter alone (best of reps), then compute calibrated to it */
  double t_comm = INFINITY;
  for (int i = 0; i < reps; i++)
    t_comm = fmin(t_comm, overlap_step(c, &rs, 1, work, 0, 0, 0, NULL));
  double t1 = zinc_now();
  compute(work, 20, 0, 0);
  double per_rep = slowest((zinc_now() - t1) / 20);
  long creps = (long)(t_comm / per_rep) + 1;
  if (c->rank == 0)
    printf("\n# overlap: reduce-scatter of %zu MiB (f32, %d ranks) started, then compute, then "
           "wait (best of %d)\n%-6s %10s %10s %16s %10s %8s %13s\n", used >> 20, n, reps,
           "work", "compute", "comm", "start+comp+wait", "in wait", "hidden", "progressed");
  for (int idle = 0; idle < 2; idle++) {
    double t_compute = INFINITY, t_both = INFINITY, t_wait = INFINITY, w;
    for (int i = 0; i < reps; i++) { /* interleaved, so that load hits both alike */
      t_compute = fmin(t_compute, overlap_step(c, &rs, 0, work, creps, idle, t_comm, NULL));
      double both = overlap_step(c, &rs, 2, work, creps, idle, t_comm, &w);
      if (both < t_both) { /* the wait of the best round, not the best wait */
        t_both = both;
        t_wait = w;
      }
    }
    double hidden = (t_compute + t_comm - t_both) / t_comm;
    double progressed = 1.0 - t_wait / t_comm;
    if (c->rank == 0)
      printf("%-6s %9.1fms %9.1fms %14.1fms %9.1fms %7.0f%% %12.0f%%\n", idle ? "idle" : "cpu",
             t_compute * 1e3, t_comm * 1e3, t_both * 1e3, t_wait * 1e3, 100 * hidden,
             100 * (progressed < 0 ? 0 : progressed));
  }
  if (c->rank == 0)
    printf("hidden = (compute + comm - overlapped) / comm: wall time saved.\n"
           "progressed = 1 - in wait / comm: share of the reduce-scatter the worker thread had "
           "done\nwhen the caller reached wait (the progress the worker makes on its own).\n"
           "'cpu' computes on the calling thread and competes with the worker for a core: with "
           "ranks x 2\nthreads > cores nothing can be hidden; 'idle' stands for a trainer "
           "waiting on an accelerator.\n");
  free(work);
  c->ops->free_shared(c, shared);
}

/* ------------------------------------------------------------------ main */

static size_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024;
  else if (*end == 'M' || *end == 'm')
    v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  options opt = {1u << 20, 256u << 20, 4, 0.3, 64u << 20, 1, 1, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--min-bytes")) opt.min_bytes = parse_bytes(v), i++;
    else if (!strcmp(a, "--max-bytes")) opt.max_bytes = parse_bytes(v), i++;
    else if (!strcmp(a, "--step")) opt.step = atoi(v), i++;
    else if (!strcmp(a, "--time")) opt.seconds = atof(v), i++;
    else if (!strcmp(a, "--overlap-bytes")) opt.overlap_bytes = parse_bytes(v), i++;
    else if (!strcmp(a, "--quick")) opt.max_bytes = 16u << 20, opt.seconds = 0.1,
                                    opt.overlap_bytes = 16u << 20;
    else if (!strcmp(a, "--no-overlap")) opt.overlap = 0;
    else if (!strcmp(a, "--p2p")) opt.p2p = 1;
    else if (!strcmp(a, "--no-bandwidth")) opt.bandwidth = 0;
    else {
      fprintf(stderr, "usage: %s [--min-bytes N] [--max-bytes N] [--step K] [--time S] "
              "[--quick] [--overlap-bytes N] [--p2p] [--no-overlap] [--no-bandwidth]\n", argv[0]);
      return 2;
    }
  }
  if (opt.step < 2 || opt.min_bytes == 0 || opt.min_bytes > opt.max_bytes) {
    fprintf(stderr, "comm_bench: need --step >= 2 and 0 < min-bytes <= max-bytes\n");
    return 2;
  }
  zinc_comm *c = NULL;
  if (zinc_comm_mpi_create(NULL, 600.0, &c) != ZINC_OK) {
    fprintf(stderr, "comm_bench: %s\n", zinc_last_error());
    return 1;
  }
  zinc_comm *p2p = NULL;
  if (opt.p2p) {
    setenv("ZINC_COMM_MPI_SHM", "0", 1);
    if (zinc_comm_mpi_create(NULL, 600.0, &p2p) != ZINC_OK) {
      fprintf(stderr, "comm_bench: %s\n", zinc_last_error());
      return 1;
    }
  }
  int fails = 0;
  if (opt.bandwidth)
    fails = bench_bandwidth(c, p2p, &opt);
  zinc_comm_destroy(p2p);
  if (opt.overlap)
    bench_overlap(c, &opt);
  zinc_comm_destroy(c);
  MPI_Bcast(&fails, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return fails ? 1 : 0;
}
