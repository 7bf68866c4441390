/*
 * test_onebit_allreduce.c — engine/reduce/onebit.h's compressed all-reduce (1-bit
 * Adam's, DeepSpeed's compressed_allreduce) on an mpi comm at 2-4 ranks:
 *   - padded(n): a multiple of N * lcm(N, 8), the smallest one >= n, for
 *     n = 1..300 (the formula written here);
 *   - the plan's sizes: worker/server error elements, sign bytes, the wire
 *     bytes' closed form (N-1)(2B + 8 nseg);
 *   - six calls over seven segments (1 to 1000 elements, gaps between them
 *     holding a sentinel that must stay), every rank's inputs drawn from a
 *     formula every rank can evaluate, against a double-precision
 *     simulation of all N ranks written here (worker: b = x + w, scale
 *     ||b||/sqrt(padded), w = b - scale sign(b); server: the mean of the
 *     decoded chunks + e, its own scale, e = c - s sign(c); everyone: s
 *     sign(c)): the output on every rank, this rank's worker error and its
 *     server error, within 1e-5 of the largest magnitude (fp32 against
 *     double; the signs agree);
 *   - the output is the same on every rank (bitwise);
 *   - the GPU path (every buffer through host copies) forced on the cpu
 *     device: the same bits as the in-place path;
 *   - one segment whose values are all zero (sign(0) = +1: the first call
 *     gives +scale of the worker error = 0, so 0; the error stays 0).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "engine/reduce/onebit.h"

static int rank_, nranks_, failures;

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank_, __FILE__, __LINE__);                \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fprintf(stderr, "\n");                                                               \
      failures++;                                                                          \
    }                                                                                      \
  } while (0)

#define OK(expr)                                                                           \
  do {                                                                                     \
    zinc_status st_ = (expr);                                                              \
    if (st_ != ZINC_OK) {                                                                  \
      fprintf(stderr, "[rank %d] FAIL %s:%d: %s: %s\n", rank_, __FILE__, __LINE__, #expr,  \
              zinc_last_error());                                                          \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

#define NSEG 7
static const int64_t seg_n[NSEG] = {1, 7, 100, 1000, 33, 64, 300};
#define GAP 5
#define CALLS 6
#define SENTINEL -12345.0f

/* Rank r's value of element i of segment s at call t (segment 5: zeros). */
static float input(int t, int r, int s, int64_t i) {
  if (s == 5)
    return 0.0f;
  uint64_t h = (uint64_t)t * 1000003u + (uint64_t)r * 7919u + (uint64_t)s * 104729u + (uint64_t)i;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  double u = (double)(h >> 11) / 9007199254740992.0; /* [0, 1) */
  return (float)((u - 0.45) * (1.0 + s) * (t % 2 ? 0.5 : 1.0));
}

static double sgn(double v) { return v < 0 ? -1.0 : 1.0; }

static int64_t lcm8(int n) {
  int64_t l = 8;
  while (l % n)
    l += 8;
  return l;
}

static void test_padded(void) {
  for (int N = 1; N <= 9; N++) {
    int64_t unit = N * lcm8(N);
    for (int64_t n = 1; n <= 300; n++) {
      int64_t want = n;
      while (want % unit)
        want++;
      CHECK(zinc_onebit_padded(n, N) == want, "padded(%lld) at %d ranks: %lld, want %lld",
            (long long)n, N, (long long)zinc_onebit_padded(n, N), (long long)want);
    }
  }
}

/* The double simulation of all ranks: per rank a padded worker error, per
 * (rank = server) its chunks' server error. */
typedef struct {
  double *w[8];            /* [rank] (sum padded) */
  double *e[8];            /* [rank] (sum chunk) */
} sim;

/* staged: the GPU path (host copies) on the cpu device; its results are
 * also checked against the unstaged call's, bit for bit. */
static void test_allreduce(zinc_comm *comm, zinc_device *dev, int staged) {
  int N = nranks_;
  zinc_onebit_seg seg[NSEG];
  int64_t at = GAP;
  for (int s = 0; s < NSEG; s++) {
    seg[s] = (zinc_onebit_seg){at, seg_n[s]};
    at += seg_n[s] + GAP;
  }
  int64_t total = at;
  zinc_onebit_plan p;
  OK(zinc_onebit_plan_init(&p, seg, NSEG, N, rank_));
  zinc_onebit_plan q; /* the other path, for the bitwise comparison */
  OK(zinc_onebit_plan_init(&q, seg, NSEG, N, rank_));
  p.staged = staged;
  int64_t sum_pad = 0, sum_chunk = 0;
  for (int s = 0; s < NSEG; s++) {
    sum_pad += zinc_onebit_padded(seg_n[s], N);
    sum_chunk += zinc_onebit_padded(seg_n[s], N) / N;
  }
  uint64_t B = (uint64_t)sum_chunk / 8;
  CHECK(p.worker_error_elems == sum_pad && p.server_error_elems == sum_chunk &&
            p.bits_bytes == B && p.wire_bytes == (uint64_t)(N - 1) * (2 * B + 8 * NSEG),
        "plan sizes: worker %lld server %lld bits %zu wire %llu; want %lld %lld %llu %llu",
        (long long)p.worker_error_elems, (long long)p.server_error_elems, p.bits_bytes,
        (unsigned long long)p.wire_bytes, (long long)sum_pad, (long long)sum_chunk,
        (unsigned long long)B, (unsigned long long)((N - 1) * (2 * B + 8 * NSEG)));

  float *buf = malloc((size_t)total * 4), *we = calloc((size_t)sum_pad, 4),
        *se = calloc((size_t)sum_chunk, 4), *all = malloc((size_t)total * 4 * N);
  float *buf2 = malloc((size_t)total * 4), *we2 = calloc((size_t)sum_pad, 4),
        *se2 = calloc((size_t)sum_chunk, 4);
  sim m;
  for (int r = 0; r < N; r++) {
    m.w[r] = calloc((size_t)sum_pad, sizeof(double));
    m.e[r] = calloc((size_t)sum_chunk, sizeof(double));
  }
  double *want = calloc((size_t)total, sizeof(double));
  double worst = 0.0;
  for (int t = 0; t < CALLS; t++) {
    for (int64_t i = 0; i < total; i++)
      buf[i] = SENTINEL;
    for (int s = 0; s < NSEG; s++)
      for (int64_t i = 0; i < seg_n[s]; i++)
        buf[seg[s].offset + i] = input(t, rank_, s, i);
    memcpy(buf2, buf, (size_t)total * 4);
    OK(zinc_onebit_allreduce(&p, dev, NULL, comm, buf, we, se));
    OK(zinc_onebit_allreduce(&q, dev, NULL, comm, buf2, we2, se2));
    CHECK(!memcmp(buf, buf2, (size_t)total * 4) && !memcmp(we, we2, (size_t)sum_pad * 4) &&
              !memcmp(se, se2, (size_t)sum_chunk * 4),
          "call %d: the %s path differs from the other one", t, staged ? "staged" : "host");
    /* the simulation */
    int64_t woff = 0, eoff = 0;
    double scale_max = 0.0;
    for (int s = 0; s < NSEG; s++) {
      int64_t np = zinc_onebit_padded(seg_n[s], N), c = np / N;
      double *b = calloc((size_t)np * N, sizeof(double)), a[8];
      for (int r = 0; r < N; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < np; i++) {
          double x = i < seg_n[s] ? input(t, r, s, i) : 0.0;
          b[r * np + i] = x + m.w[r][woff + i];
          ss += b[r * np + i] * b[r * np + i];
        }
        a[r] = sqrt(ss / (double)np);
        for (int64_t i = 0; i < np; i++)
          m.w[r][woff + i] = b[r * np + i] - a[r] * sgn(b[r * np + i]);
      }
      for (int k = 0; k < N; k++) {
        double *cc = calloc((size_t)c, sizeof(double)), ss = 0.0;
        for (int64_t i = 0; i < c; i++) {
          for (int r = 0; r < N; r++)
            cc[i] += sgn(b[r * np + k * c + i]) * a[r] / N;
          cc[i] += m.e[k][eoff + i];
          ss += cc[i] * cc[i];
        }
        double sk = sqrt(ss / (double)c);
        if (sk > scale_max)
          scale_max = sk;
        for (int64_t i = 0; i < c; i++) {
          m.e[k][eoff + i] = cc[i] - sk * sgn(cc[i]);
          if (k * c + i < seg_n[s])
            want[seg[s].offset + k * c + i] = sk * sgn(cc[i]);
        }
        free(cc);
      }
      for (int r = 0; r < N; r++)
        if (a[r] > scale_max)
          scale_max = a[r];
      woff += np;
      eoff += c;
      free(b);
    }
    double tol = 1e-5 * (scale_max > 1 ? scale_max : 1);
    int bad = 0;
    for (int s = 0; s < NSEG; s++) {
      for (int64_t i = -GAP; i < seg_n[s]; i++) {
        int64_t x = seg[s].offset + i;
        double got = buf[x], ref = i < 0 ? SENTINEL : want[x];
        double d = fabs(got - ref);
        if (i >= 0 && d > worst)
          worst = d;
        if (d > tol && bad++ < 5)
          CHECK(0, "call %d segment %d element %lld: %.9g, want %.9g", t, s, (long long)i, got,
                ref);
      }
    }
    for (int64_t i = 0; i < sum_pad; i++)
      if (fabs(we[i] - m.w[rank_][i]) > tol && bad++ < 10)
        CHECK(0, "call %d worker error %lld: %.9g, want %.9g", t, (long long)i, we[i],
              m.w[rank_][i]);
    for (int64_t i = 0; i < sum_chunk; i++)
      if (fabs(se[i] - m.e[rank_][i]) > tol && bad++ < 15)
        CHECK(0, "call %d server error %lld: %.9g, want %.9g", t, (long long)i, se[i],
              m.e[rank_][i]);
    /* every rank holds the same bits */
    MPI_Allgather(buf, (int)total, MPI_FLOAT, all, (int)total, MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 0; r < N; r++)
      CHECK(!memcmp(all + r * total, buf, (size_t)total * 4),
            "call %d: rank %d's result differs from rank %d's", t, r, rank_);
    /* segment 5 (zeros in, zero errors): zeros out */
    for (int64_t i = 0; i < seg_n[5]; i++)
      CHECK(t > 0 || buf[seg[5].offset + i] == 0.0f, "zero segment element %lld: %g",
            (long long)i, buf[seg[5].offset + i]);
  }
  if (rank_ == 0)
    printf("1-bit all-reduce at %d ranks%s: %d calls, largest difference from the double "
           "simulation %.3g\n", N, staged ? " (staged copies)" : "", CALLS, worst);
  for (int r = 0; r < N; r++) {
    free(m.w[r]);
    free(m.e[r]);
  }
  free(want);
  free(buf);
  free(we);
  free(se);
  free(all);
  free(buf2);
  free(we2);
  free(se2);
  zinc_onebit_plan_free(&p);
  zinc_onebit_plan_free(&q);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
  if (nranks_ < 2 || nranks_ > 8) {
    if (rank_ == 0)
      printf("SKIPPED: the 1-bit all-reduce test needs 2 to 8 ranks (has %d)\n", nranks_);
    MPI_Finalize();
    return 77;
  }
  test_padded();
  zinc_comm *comm = NULL;
  zinc_device *dev = NULL;
  OK(zinc_comm_mpi_create(NULL, 60.0, &comm));
  OK(zinc_device_cpu_create(1, 0, &dev));
  test_allreduce(comm, dev, 0);
  test_allreduce(comm, dev, 1);
  dev->ops->destroy(dev);
  zinc_comm_destroy(comm);
  int bad = failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0)
    printf(bad ? "1-bit all-reduce tests FAILED\n" : "1-bit all-reduce tests passed at %d "
                                                     "ranks\n", nranks_);
  MPI_Finalize();
  return bad ? 1 : 0;
}
