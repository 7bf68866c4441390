/*
 * compress_bench — the codecs of compressed collectives (kernels/codec.h)
 * on the CPU: what each costs in time and in accuracy, and the link speed
 * below which compressing pays.
 *
 * Input: n fp32 gradients (16 M by default), Gaussian with a per-row scale
 * (rows of 4096, the scale log-normal over three decades, as layers'
 * gradients differ), seeded. For each codec (bf16, fp16, int8, int4,
 * sign1, terngrad; block 256 for the block codecs; terngrad at one fixed
 * seed), printed:
 *   bits/el, ratio     bits per element on the wire (scales included) and
 *                      32 / that;
 *   enc, dec+add GB/s  encode and decode-accumulate (into fp32), in input
 *                      fp32 bytes per second, best of --reps, on one thread
 *                      and on the pool, for the scalar path and the best
 *                      SIMD path of this CPU, measured in the same run;
 *   err/bound          max over elements of |decoded - x| divided by
 *                      zinc_codec_error_bound of the element's block max
 *                      (<= 1 is what the bound promises; sign1 has none;
 *                      terngrad's is the block max itself);
 *   rel L2             ||decoded - x|| / ||x||;
 *   (after the table)  encode with error feedback (beta 0.8) for the block
 *                      codecs, every path, one thread and the pool;
 *   (then)             DGC's top-k (TOPK) at densities 1% and 0.1%: bits,
 *                      ratio, encode, encode through the fp32 residual,
 *                      decode-accumulate, rel L2 of one round;
 *   crossover Gbit/s   the link rate below which sending the encoded bytes
 *                      plus encoding and decoding beats sending fp32,
 *                      with no overlap of compute and transfer:
 *                        32 n / B  >  bits n / B + t_enc + t_dec
 *                        B  <  (32 - bits) n / (t_enc + t_dec)
 *                      with the pool's SIMD times (and on one thread).
 *
 *   compress_bench [--n-mega 16] [--block 256] [--reps 5] [--threads N]
 *
 * Paths: scalar, then every SIMD path this CPU runs (avx2, avx512), each
 * with its own encode/decode figures and crossover.
 * --threads sets the pool (default: one per core of this process's share,
 * as the cpu device picks); ZINC_CPU_ISA lowers the best path.
 *
 * The engine-level figure (a ZeRO-3 iteration with compressed
 * reduce-scatter and all-gather on the emulated cluster, wire and logical
 * bytes from the comms logger) is not measured here: it belongs in a bench
 * that drives the engine (bench/step_bench or a cluster test), reported in
 * docs/benchmarks.md's "Codecs" section next to these figures.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "device/device_cpu.h"
#include "kernels/codec.h"
#include "kernels/cpu_kernels.h"

#define ROW 4096

static void check(zinc_status st) {
  if (st != ZINC_OK) {
    fprintf(stderr, "compress_bench: %s\n", zinc_last_error());
    exit(1);
  }
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static double rng_unit(uint64_t *s) { return ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53; }

static double rng_gauss(uint64_t *s) {
  return sqrt(-2.0 * log(rng_unit(s))) * cos(6.283185307179586 * rng_unit(s));
}

/* x (n) fp32: row r's values N(0, 1) * 10^(-3 + 1.5 * N(0, 0.6)). */
static void fill_gradients(float *x, int64_t n) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t r = 0; r < n; r += ROW) {
    double scale = pow(10.0, -3.0 + 1.5 * 0.6 * rng_gauss(&s));
    for (int64_t i = r; i < n && i < r + ROW; i++)
      x[i] = (float)(scale * rng_gauss(&s));
  }
}

typedef struct {
  zinc_threadpool *pool; /* NULL: one thread */
  zinc_cpu_isa isa;
  zinc_codec c;
  const float *x;
  uint8_t *enc;
  float *acc;
  int64_t n;
} run;

static double time_encode(const run *r, int reps) {
  double best = 1e30;
  for (int k = 0; k < reps; k++) {
    double t0 = zinc_now();
    check(zinc_cpu_codec_encode(r->pool, r->isa, r->c, r->enc, r->x, ZINC_F32, r->n, NULL, 0, 0));
    double t = zinc_now() - t0;
    best = t < best ? t : best;
  }
  return best;
}

static double time_decode_add(const run *r, int reps) {
  double best = 1e30;
  for (int k = 0; k < reps; k++) {
    double t0 = zinc_now();
    check(zinc_cpu_codec_decode(r->pool, r->isa, r->c, r->acc, ZINC_F32, r->enc, r->n, 1));
    double t = zinc_now() - t0;
    best = t < best ? t : best;
  }
  return best;
}

/* max |dec - x| / bound(block max) and the relative L2 error. */
static void accuracy(zinc_codec c, const float *x, const float *dec, int64_t n, double *ratio,
                     double *rel_l2) {
  int64_t block = zinc_codec_is_block(c) ? c.block : 1;
  double worst = 0, e2 = 0, x2 = 0;
  for (int64_t lo = 0; lo < n; lo += block) {
    int64_t hi = lo + block < n ? lo + block : n;
    double m = 0;
    for (int64_t i = lo; i < hi; i++)
      m = fmax(m, fabs((double)x[i]));
    double bound = zinc_codec_error_bound(c, m);
    for (int64_t i = lo; i < hi; i++) {
      double e = fabs((double)dec[i] - (double)x[i]);
      e2 += e * e;
      x2 += (double)x[i] * x[i];
      if (isfinite(bound) && bound > 0)
        worst = fmax(worst, e / bound);
      else if (!isfinite(bound))
        worst = INFINITY;
    }
  }
  *ratio = worst;
  *rel_l2 = sqrt(e2 / x2);
}

static void usage(void) {
  fprintf(stderr, "usage: compress_bench [--n-mega 16] [--block 256] [--reps 5] [--threads N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int64_t mega = 16;
  int block = 256, reps = 5, threads = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n-mega") && i + 1 < argc)
      mega = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--block") && i + 1 < argc)
      block = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else
      usage();
  }
  if (mega < 1 || block < 1 || reps < 1 || threads < 0)
    usage();

  zinc_device *dev = NULL;
  zinc_device_cpu_placement pl = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  pl.threads = threads;
  check(zinc_device_cpu_create_placed(&pl, &dev));
  zinc_threadpool *pool = zinc_device_cpu_pool(dev);
  const zinc_cpu_isa best = zinc_device_cpu_isa(dev);
  const int all = zinc_threadpool_size(pool);
  const int64_t n = mega << 20;

  /* (n) fp32 gradients, the encoding (at most fp32's size), the decoded
   * values and the accumulator: device (host) memory */
  float *x, *dec, *acc;
  uint8_t *enc;
  check(dev->ops->alloc(dev, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, (void **)&x));
  check(dev->ops->alloc(dev, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, (void **)&dec));
  check(dev->ops->alloc(dev, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, (void **)&acc));
  check(dev->ops->alloc(dev, (size_t)n * 4 + 16, ZINC_LOC_DEVICE, ZINC_MEM_OTHER,
                        (void **)&enc));
  fill_gradients(x, n);
  memset(acc, 0, (size_t)n * 4);

  printf("compress_bench: %lld M fp32 gradients (Gaussian, per-row scale), block %d, best of "
         "%d; GB/s of input fp32 bytes; pool = %d threads; SIMD path %s\n",
         (long long)mega, block, reps, all, zinc_cpu_isa_name(best));
  printf("%-8s %7s %6s | %-6s %9s %9s %9s %9s | %9s %9s | %9s %9s\n", "", "", "", "",
         "encode", "dec+add", "encode", "dec+add", "max err", "", "xover", "xover");
  printf("%-8s %7s %6s | %-6s %9s %9s %9s %9s | %9s %9s | %9s %9s\n", "codec", "bits/el",
         "ratio", "path", "1 thread", "1 thread", "pool", "pool", "/ bound", "rel L2",
         "1 thread", "pool");
  static const int kinds[] = {ZINC_CODEC_BF16, ZINC_CODEC_F16, ZINC_CODEC_INT8, ZINC_CODEC_INT4,
                              ZINC_CODEC_SIGN1, ZINC_CODEC_TERN2};
  const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);
  const double gb = (double)n * 4 * 1e-9;
  for (int k = 0; k < nkinds; k++) {
    zinc_codec c = {kinds[k], zinc_codec_is_block((zinc_codec){kinds[k], 0, 0}) ? block : 0, 0};
    double bits = zinc_codec_bits(c);
    double ratio_err = 0, rel_l2 = 0;
    check(zinc_cpu_codec_encode(pool, best, c, enc, x, ZINC_F32, n, NULL, 0, 0));
    check(zinc_cpu_codec_decode(pool, best, c, dec, ZINC_F32, enc, n, 0));
    accuracy(c, x, dec, n, &ratio_err, &rel_l2);
    for (int p = 0; p <= (int)best; p++) { /* scalar, avx2, avx512 up to the best */
      const zinc_cpu_isa path = (zinc_cpu_isa)p;
      run r1 = {NULL, path, c, x, enc, acc, n}, rp = r1;
      rp.pool = pool;
      double e1 = time_encode(&r1, reps), d1 = time_decode_add(&r1, reps);
      double ep = time_encode(&rp, reps), dp = time_decode_add(&rp, reps);
      /* B < (32 - bits) n / (t_enc + t_dec), in Gbit/s */
      double x1 = (32.0 - bits) * (double)n / (e1 + d1) * 1e-9;
      double xp = (32.0 - bits) * (double)n / (ep + dp) * 1e-9;
      if (p == 0)
        printf("%-8s %7.3f %6.2f | ", zinc_codec_name(c), bits, 32.0 / bits);
      else
        printf("%-8s %7s %6s | ", "", "", "");
      printf("%-6s %9.2f %9.2f %9.2f %9.2f | ", zinc_cpu_isa_name(path), gb / e1, gb / d1,
             gb / ep, gb / dp);
      if (p == 0)
        printf("%9.4f %9.2e | ", ratio_err, rel_l2);
      else
        printf("%9s %9s | ", "", "");
      printf("%9.1f %9.1f\n", x1, xp);
    }
  }
  printf("xover: the link rate (Gbit/s) below which encoding + sending the codec's bytes + "
         "decoding beats sending fp32 (no overlap)\n");

  /* Encode with error feedback (beta 0.8): the residual is read, the block
   * encoded, the new residual computed and written as INT8 (five passes
   * over each block instead of two). */
  printf("\nencode with error feedback (beta 0.8), GB/s of input fp32, 1 thread / pool:\n");
  for (int k = 2; k < nkinds; k++) {
    zinc_codec c = {kinds[k], block, 0};
    size_t ebytes = zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, block, 0}, n);
    void *ef;
    check(dev->ops->alloc(dev, ebytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &ef));
    memset(ef, 0, ebytes);
    printf("  %-8s", zinc_codec_name(c));
    for (int p = 0; p <= (int)best; p++)
      for (int t = 0; t < 2; t++) {
        double bt = 1e30;
        for (int rep = 0; rep < reps; rep++) {
          double t0 = zinc_now();
          check(zinc_cpu_codec_encode(t ? pool : NULL, (zinc_cpu_isa)p, c, enc, x, ZINC_F32, n,
                                      ef, 0.8f, 0));
          double dt = zinc_now() - t0;
          bt = dt < bt ? dt : bt;
        }
        if (t)
          printf(" / %6.2f", gb / bt);
        else
          printf("   %s %6.2f", zinc_cpu_isa_name((zinc_cpu_isa)p), gb / bt);
      }
    printf("\n");
    dev->ops->free(dev, ef, ebytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  }
  /* DGC's top-k (TOPK): one path (codec_math.h's block functions on every
   * ISA). rel L2 of one round: what a single encoding loses (the residual
   * carries it into later rounds); "+res" encodes through the fp32
   * residual (x = g + residual, the residual rewritten). */
  printf("\nDGC top-k (one path on every ISA), GB/s of input fp32, 1 thread / pool:\n");
  printf("  %-22s %8s %7s | %15s %15s %15s | %8s\n", "codec", "bits/el", "ratio", "encode",
         "enc+res", "dec+add", "rel L2");
  static const struct {
    int block;
    double density;
  } dgc[] = {{256, 0.01}, {256, 0.001}, {1000, 0.001}, {4096, 0.001}};
  for (int k = 0; k < 4; k++) {
    zinc_codec c = {ZINC_CODEC_TOPK, dgc[k].block, zinc_codec_topk_k(dgc[k].density, dgc[k].block)};
    size_t rbytes = zinc_codec_ef_bytes(c, n);
    void *res;
    check(dev->ops->alloc(dev, rbytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER, &res));
    memset(res, 0, rbytes);
    double t[3][2];
    for (int which = 0; which < 3; which++)
      for (int th = 0; th < 2; th++) {
        double bt = 1e30;
        for (int rep = 0; rep < reps; rep++) {
          double t0 = zinc_now();
          if (which == 2)
            check(zinc_cpu_codec_decode(th ? pool : NULL, best, c, acc, ZINC_F32, enc, n, 1));
          else
            check(zinc_cpu_codec_encode(th ? pool : NULL, best, c, enc, x, ZINC_F32, n,
                                        which ? res : NULL, 0.0f, 0));
          double dt = zinc_now() - t0;
          bt = dt < bt ? dt : bt;
        }
        t[which][th] = bt;
      }
    check(zinc_cpu_codec_encode(pool, best, c, enc, x, ZINC_F32, n, NULL, 0.0f, 0));
    check(zinc_cpu_codec_decode(pool, best, c, dec, ZINC_F32, enc, n, 0));
    double e2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = (double)dec[i] - (double)x[i];
      e2 += e * e;
      x2 += (double)x[i] * x[i];
    }
    char name[64];
    snprintf(name, sizeof name, "topk b%d d%g (k %d)", c.block, dgc[k].density, c.k);
    double bits = zinc_codec_bits(c);
    printf("  %-22s %8.4f %7.1f | %6.2f / %6.2f %6.2f / %6.2f %6.2f / %6.2f | %8.4f\n", name,
           bits, 32.0 / bits, gb / t[0][0], gb / t[0][1], gb / t[1][0], gb / t[1][1],
           gb / t[2][0], gb / t[2][1], sqrt(e2 / x2));
    dev->ops->free(dev, res, rbytes, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  }

  dev->ops->free(dev, x, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  dev->ops->free(dev, dec, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  dev->ops->free(dev, acc, (size_t)n * 4, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  dev->ops->free(dev, enc, (size_t)n * 4 + 16, ZINC_LOC_DEVICE, ZINC_MEM_OTHER);
  zinc_device_destroy(dev);
  return 0;
}
