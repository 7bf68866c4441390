/*
 * onebit.h — the compressed all-reduce of 1-bit Adam (Tang et al. 2021,
 * "1-bit Adam: Communication Efficient Large-Scale Training with Adam's
 * Convergence Speed", arXiv:2102.02888), as DeepSpeed runs it
 * (deepspeed/runtime/comm/nccl.py, NcclBackend.compressed_allreduce), for
 * many tensors at once: a reusable building block for 1-bit Adam
 * (engine/reduce/onebit_adam.c's optimizer step), 0/1 Adam and 1-bit LAMB.
 *
 * Input: a flat fp32 buffer `buf` holding nseg *segments* (one per
 * parameter), segment s at element offset seg[s].offset, seg[s].n
 * elements; segments must not overlap (gaps between them are left alone).
 * Every rank of the comm passes the same segments (same offsets and
 * lengths) and its own values. Output, in place: every rank's buf holds the
 * same values, an approximation of the average over ranks that carries its
 * error into the next call through two error buffers.
 *
 * Padding (DeepSpeed's): segment s of n elements is compressed as
 *   padded(n) = n rounded up to a multiple of N * lcm(N, 8)   (N = comm size)
 * elements (zeros beyond n, plus the worker error there), so each of the N
 * server chunks, chunk(n) = padded(n) / N elements, is a whole number of
 * bytes of sign bits. (N = 1, 2, 4, 8: a multiple of 8 N.)
 *
 * Per segment, x_r the segment on rank r, w_r its worker error (padded(n)
 * elements), e_k server rank k's server error (chunk(n) elements of its own
 * chunk k); sign(v) = +1 for v >= 0 (and for -0.0, NaN), -1 for v < 0:
 *   worker (every rank r):
 *     b_r     = x_r + w_r                       (padded; fp32)
 *     a_r     = ||b_r||_2 / sqrt(padded(n))     (one fp32 scale; the sum of
 *                                                squares in double, in the
 *                                                fixed order of onebit.c)
 *     w_r     = b_r - a_r * sign(b_r)
 *     send sign bits of chunk k of b_r to rank k; all-gather a_r
 *   server (rank k, its chunk k):
 *     c_k     = sum over r = 0..N-1 in rank order of sign(b_r[chunk k]) *
 *               (a_r * (1/N))  (fp32) + e_k
 *     s_k     = ||c_k||_2 / sqrt(chunk(n))
 *     e_k     = c_k - s_k * sign(c_k)
 *     all-gather sign bits of c_k and s_k
 *   every rank: buf[chunk k] = s_k * sign(c_k) for every k (the first n
 *     elements; the padding is dropped).
 * With N = 1 nothing happens (DeepSpeed skips the all-reduce on one rank).
 * Deterministic: the same bits on every run and every rank count's layout
 * of ranks on nodes (sums in a fixed order, no comm reduction).
 *
 * Communication, for all segments together, over the comm (two batches):
 *   phase 1: ONE all-to-all-v of bytes (to rank k: chunk k's sign bits of
 *            every segment, segment order) and ONE all-gather of the nseg
 *            worker scales (f32);
 *   phase 2: ONE all-gather of bytes: per rank its nseg server scales (f32)
 *            then its server chunks' sign bits (segment order).
 * Wire bytes a rank sends (the comms logger's closed form), with
 * B = sum over segments of chunk(n)/8:
 *   (N-1) B  +  (N-1) 4 nseg  +  (N-1) (4 nseg + B)  = (N-1)(2B + 8 nseg),
 * against 2 (N-1) x 4 x sum padded(n) / N for an fp32 reduce-scatter +
 * all-gather (zinc's stage-0 all-reduce): about 1/32 of it.
 * The all-to-all-v and the phase-2 all-gather are logged as compressed
 * (codec "onebit"), standing for a reduce-scatter and an all-gather of the
 * padded fp32 buffer.
 *
 * Memory: buf, worker_error and server_error are memory of `dev` (device
 * memory: zinc_engine_buffer_alloc(..., ZINC_LOC_DEVICE, ...) in the
 * engine; on the cpu device that is plain host memory). The caller owns
 * all three and keeps the error buffers from call to call; they start (and
 * are reset) as zeros:
 *   worker_error  plan.worker_error_elems f32: segment s's padded(n) at
 *                 plan.worker_off[s] (the padding's error lives there too);
 *   server_error  plan.server_error_elems f32: this rank's chunk(n) of
 *                 segment s at plan.server_off[s].
 * Both are rank-local state: a checkpoint must keep every rank's copy (the
 * engine registers them with zinc_mstate_register).
 * The comm moves host memory (an mpi comm, or self): the engine passes
 * e->dp_host (the same comm as e->dp on the cpu device). The arithmetic
 * runs on the host: on the cpu device in place; on a GPU device buf's
 * segments and both error buffers go through host copies every call
 * (dev->ops->copy, the stream synced) — correct, not fast: there is no
 * CUDA kernel for this codec yet. The plan owns its host wire buffers.
 *
 * Collective over `comm`: every rank calls with the same plan shape.
 * Local failures (allocations, copies) are returned without being agreed;
 * the engine agrees on them before the collectives.
 */
#ifndef ZINC_ENGINE_ONEBIT_H
#define ZINC_ENGINE_ONEBIT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"
#include "zinc.h"

/* One tensor of the flat buffer. */
typedef struct {
  int64_t offset;          /* first element in buf */
  int64_t n;               /* elements (> 0) */
} zinc_onebit_seg;

typedef struct {
  int nranks, rank;        /* the comm's size and this rank */
  int nseg;
  zinc_onebit_seg *seg;    /* (nseg) copied from the caller */
  int64_t *padded;         /* (nseg) padded(n) */
  int64_t *chunk;          /* (nseg) padded(n) / nranks */
  int64_t *worker_off;     /* (nseg) into worker_error, elements */
  int64_t *server_off;     /* (nseg) into server_error, elements */
  int64_t worker_error_elems; /* sum of padded(n) */
  int64_t server_error_elems; /* sum of chunk(n) */
  size_t worker_error_bytes, server_error_bytes; /* x 4 */
  size_t bits_bytes;       /* B: sign bytes per rank per phase, sum chunk/8 */
  uint64_t wire_bytes;     /* what this rank sends per call (closed form
                              above); 0 on one rank */
  uint64_t exact_bytes;    /* an fp32 reduce-scatter + all-gather of the
                              padded buffer: 2 (N-1) 4 sum padded / N */
  /* host wire buffers, owned */
  unsigned char *send_bits, *recv_bits; /* (nranks * B) each */
  float *scales;           /* (nranks * nseg) the worker scales gathered */
  unsigned char *server_msg; /* (4 nseg + B) this rank's phase-2 message */
  unsigned char *gathered; /* (nranks * (4 nseg + B)) every rank's */
  float *decoded;          /* (max chunk) the server's sum */
  size_t *a2a;             /* (4 nranks) counts, displs, rcounts, rdispls */
  double comm_seconds;     /* time spent inside the two batches of
                              collectives, summed over calls (the engine
                              adds it to its comm wait)                  */
  int staged;              /* tests: 1 takes the GPU path (host copies
                              through dev->ops->copy) on any device, so that
                              the cpu build runs it; 0 after plan_init */
} zinc_onebit_plan;

/* padded(n) for a comm of nranks. */
int64_t zinc_onebit_padded(int64_t n, int nranks);

/* The plan for these segments (copied) on a comm of nranks ranks, this
 * rank `rank`; allocates the host wire buffers. ZINC_ERR_INVALID for an
 * empty or negative segment or nranks < 1; ZINC_ERR_NOMEM. */
zinc_status zinc_onebit_plan_init(zinc_onebit_plan *p, const zinc_onebit_seg *seg, int nseg,
                                  int nranks, int rank);
/* Frees what plan_init allocated (a zeroed or freed plan is fine). */
void zinc_onebit_plan_free(zinc_onebit_plan *p);

/* The compressed all-reduce of buf's segments, in place (see the top).
 * comm's size and rank must be the plan's. */
zinc_status zinc_onebit_allreduce(zinc_onebit_plan *p, zinc_device *dev, zinc_stream *s,
                                  zinc_comm *comm, float *buf, float *worker_error,
                                  float *server_error);

#endif /* ZINC_ENGINE_ONEBIT_H */
