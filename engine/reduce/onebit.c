/*
 * onebit.c — 1-bit Adam's compressed all-reduce (error-compensated sign
 * compression on the workers and again on the servers), for many segments
 * in two batches of collectives. The contract, formulas, padding and wire
 * bytes are in onebit.h.
 *
 * Sign bits on the wire: element 8i+j of a chunk in bit 7-j of byte i
 * (numpy's packbits order, as DeepSpeed's), 1 = non-negative. Chunks are
 * whole bytes (chunk(n) is a multiple of 8).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/reduce/onebit.h"

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int64_t zinc_onebit_padded(int64_t n, int nranks) {
  int64_t lcm = (int64_t)nranks * 8 / gcd64(nranks, 8);
  int64_t unit = (int64_t)nranks * lcm;
  return (n + unit - 1) / unit * unit;
}

void zinc_onebit_plan_free(zinc_onebit_plan *p) {
  if (!p)
    return;
  free(p->seg);
  free(p->padded);
  free(p->send_bits);
  free(p->recv_bits);
  free(p->scales);
  free(p->server_msg);
  free(p->gathered);
  free(p->decoded);
  free(p->a2a);
  memset(p, 0, sizeof *p);
}

zinc_status zinc_onebit_plan_init(zinc_onebit_plan *p, const zinc_onebit_seg *seg, int nseg,
                                  int nranks, int rank) {
  memset(p, 0, sizeof *p);
  if (nranks < 1 || rank < 0 || rank >= nranks || nseg < 0 || (nseg > 0 && !seg))
    return zinc_error(ZINC_ERR_INVALID, "1-bit compressed all-reduce: bad plan (%d segments, "
                      "rank %d of %d)", nseg, rank, nranks);
  for (int s = 0; s < nseg; s++)
    if (seg[s].n <= 0 || seg[s].offset < 0)
      return zinc_error(ZINC_ERR_INVALID, "1-bit compressed all-reduce: segment %d has %lld "
                        "elements at offset %lld; every segment needs at least one element",
                        s, (long long)seg[s].n, (long long)seg[s].offset);
  p->nranks = nranks;
  p->rank = rank;
  p->nseg = nseg;
  size_t ns = (size_t)nseg + 1;
  zinc_status st = zinc_calloc((void **)&p->seg, ns, sizeof *p->seg, "1-bit segments");
  if (st == ZINC_OK) /* padded, chunk, worker_off, server_off */
    st = zinc_calloc((void **)&p->padded, 4 * ns, sizeof *p->padded, "1-bit segments");
  if (st != ZINC_OK) {
    zinc_onebit_plan_free(p);
    return st;
  }
  if (nseg > 0)
    memcpy(p->seg, seg, (size_t)nseg * sizeof *seg);
  p->chunk = p->padded + ns;
  p->worker_off = p->padded + 2 * ns;
  p->server_off = p->padded + 3 * ns;
  int64_t most = 1;
  for (int s = 0; s < nseg; s++) {
    p->padded[s] = zinc_onebit_padded(seg[s].n, nranks);
    p->chunk[s] = p->padded[s] / nranks;
    p->worker_off[s] = p->worker_error_elems;
    p->server_off[s] = p->server_error_elems;
    p->worker_error_elems += p->padded[s];
    p->server_error_elems += p->chunk[s];
    if (p->chunk[s] > most)
      most = p->chunk[s];
  }
  p->worker_error_bytes = (size_t)p->worker_error_elems * 4;
  p->server_error_bytes = (size_t)p->server_error_elems * 4;
  p->bits_bytes = (size_t)p->server_error_elems / 8;
  uint64_t n1 = (uint64_t)(nranks - 1);
  p->wire_bytes = n1 * (2 * (uint64_t)p->bits_bytes + 8 * (uint64_t)nseg);
  p->exact_bytes = 2 * n1 * 4 * (uint64_t)p->server_error_elems;
  size_t bits = (size_t)nranks * p->bits_bytes + 16, msg = 4 * (size_t)nseg + p->bits_bytes;
  st = zinc_calloc((void **)&p->send_bits, bits, 1, "1-bit signs to send");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->recv_bits, bits, 1, "1-bit signs received");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->scales, (size_t)nranks * ns, sizeof *p->scales,
                     "1-bit worker scales");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->server_msg, msg + 16, 1, "1-bit server message");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->gathered, (size_t)nranks * msg + 16, 1,
                     "1-bit server messages gathered");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->decoded, (size_t)most, sizeof *p->decoded,
                     "1-bit server sum");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&p->a2a, 4 * (size_t)nranks, sizeof *p->a2a, "1-bit exchange");
  if (st != ZINC_OK) {
    zinc_onebit_plan_free(p);
    return st;
  }
  /* rank k gets chunk k of every segment: B bytes from every rank */
  for (int k = 0; k < nranks; k++) {
    p->a2a[k] = p->a2a[2 * nranks + k] = p->bits_bytes;
    p->a2a[nranks + k] = p->a2a[3 * nranks + k] = (size_t)k * p->bits_bytes;
  }
  return ZINC_OK;
}

/* ------------------------------------------------------------ the codec */

static inline float sign_of(float v) { return v < 0.0f ? -1.0f : 1.0f; }

/* ||v|| / sqrt(n): the sum of squares in double, element i into lane i % 4
 * (n is a multiple of 8), the lanes added as (0 + 1) + (2 + 3): a fixed
 * order, so the same bits on every rank and run. */
static float rms_scale(const float *v, int64_t n) {
  double lane[4] = {0.0, 0.0, 0.0, 0.0};
  for (int64_t i = 0; i < n; i += 4)
    for (int j = 0; j < 4; j++)
      lane[j] += (double)v[i + j] * (double)v[i + j];
  double ss = (lane[0] + lane[1]) + (lane[2] + lane[3]);
  return (float)(sqrt(ss) / sqrt((double)n));
}

/* Pack the signs of v (n, a multiple of 8) into bits. */
static void pack_signs(unsigned char *bits, const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    unsigned b = 0;
    for (int j = 0; j < 8; j++)
      b |= (unsigned)!(v[i + j] < 0.0f) << (7 - j);
    bits[i >> 3] = (unsigned char)b;
  }
}

static inline float bit_sign(const unsigned char *bits, int64_t i) {
  uint64_t u = (uint64_t)i;
  return (bits[u >> 3] >> (7 - (u & 7))) & 1 ? 1.0f : -1.0f;
}

/* Worker side of segment s: b = x (padding 0) + w; scale a; w = b - a sign(b);
 * the bits of each chunk k into rank k's part of send_bits. */
static float worker_encode(zinc_onebit_plan *p, int s, const float *x, float *w,
                           const size_t *bit_at) {
  int64_t n = p->seg[s].n, np = p->padded[s], c = p->chunk[s];
  for (int64_t i = 0; i < n; i++)
    w[i] += x[i];
  /* w now holds b (the padding: 0 + w) */
  float a = rms_scale(w, np);
  for (int k = 0; k < p->nranks; k++)
    pack_signs(p->send_bits + (size_t)k * p->bits_bytes + bit_at[s], w + (int64_t)k * c, c);
  for (int64_t i = 0; i < np; i++)
    w[i] -= a * sign_of(w[i]);
  return a;
}

/* Server side of segment s, this rank's chunk: c = sum of the ranks'
 * decoded chunks / N + e; s = rms(c); e = c - s sign(c); c's bits into the
 * phase-2 message. */
static float server_encode(zinc_onebit_plan *p, int s, float *e, const size_t *bit_at) {
  int64_t c = p->chunk[s];
  float *sum = p->decoded;
  float inv = 1.0f / (float)p->nranks;
  for (int64_t i = 0; i < c; i++)
    sum[i] = 0.0f;
  for (int r = 0; r < p->nranks; r++) {
    const unsigned char *bits = p->recv_bits + (size_t)r * p->bits_bytes + bit_at[s];
    float a = p->scales[(size_t)r * p->nseg + s] * inv, pm[2] = {-a, a};
    for (int64_t i = 0; i < c; i += 8)
      for (int j = 0; j < 8; j++)
        sum[i + j] += pm[(bits[i >> 3] >> (7 - j)) & 1];
  }
  for (int64_t i = 0; i < c; i++)
    sum[i] += e[i];
  float scale = rms_scale(sum, c);
  for (int64_t i = 0; i < c; i++)
    e[i] = sum[i] - scale * sign_of(sum[i]);
  pack_signs(p->server_msg + 4 * (size_t)p->nseg + bit_at[s], sum, c);
  return scale;
}

/* Every rank: segment s of buf from the gathered server messages. */
static void decode_result(const zinc_onebit_plan *p, int s, float *x, const size_t *bit_at) {
  size_t msg = 4 * (size_t)p->nseg + p->bits_bytes;
  int64_t n = p->seg[s].n, c = p->chunk[s];
  for (int k = 0; k < p->nranks; k++) {
    const unsigned char *m = p->gathered + (size_t)k * msg;
    float scale;
    memcpy(&scale, m + 4 * (size_t)s, 4);
    const unsigned char *bits = m + 4 * (size_t)p->nseg + bit_at[s];
    int64_t lo = (int64_t)k * c, hi = lo + c < n ? lo + c : n;
    float pm[2] = {-scale, scale};
    for (int64_t i = lo; i < hi; i++)
      x[i] = pm[(bits[(uint64_t)(i - lo) >> 3] >> (7 - ((uint64_t)(i - lo) & 7))) & 1];
  }
}

/* The all-reduce over host memory. */
static zinc_status allreduce_host(zinc_onebit_plan *p, zinc_comm *comm, float *buf,
                                  float *worker_error, float *server_error) {
  int N = p->nranks;
  size_t *bit_at = NULL; /* segment s's bytes inside a chunk's bit area */
  ZINC_CHECK(zinc_calloc((void **)&bit_at, (size_t)p->nseg + 1, sizeof *bit_at,
                         "1-bit segment offsets"));
  for (int s = 0; s + 1 <= p->nseg; s++)
    bit_at[s + 1] = bit_at[s] + (size_t)p->chunk[s] / 8;
  float *mine = p->scales + (size_t)p->rank * p->nseg; /* in place in the gather */
  for (int s = 0; s < p->nseg; s++)
    mine[s] = worker_encode(p, s, buf + p->seg[s].offset, worker_error + p->worker_off[s], bit_at);
  uint64_t fp32_half = (uint64_t)(N - 1) * 4 * (uint64_t)p->server_error_elems;
  zinc_coll phase1[2] = {
      {.kind = ZINC_COLL_ALLTOALLV, .send = p->send_bits, .recv = p->recv_bits,
       .count = p->bits_bytes, .dtype = ZINC_DT_U8, .counts = p->a2a, .displs = p->a2a + N,
       .rcounts = p->a2a + 2 * N, .rdispls = p->a2a + 3 * N, .logical_bytes = fp32_half,
       .codec_name = "onebit", .logical_kind = ZINC_COLL_REDUCE_SCATTER},
      {.kind = ZINC_COLL_ALLGATHER, .send = mine, .recv = p->scales, .count = (size_t)p->nseg,
       .dtype = ZINC_F32}};
  double t0 = zinc_now();
  zinc_status st = comm->ops->run(comm, phase1, 2);
  p->comm_seconds += zinc_now() - t0;
  if (st != ZINC_OK) {
    free(bit_at);
    return zinc_error_wrap(st, "1-bit compressed all-reduce, phase 1 (worker signs and scales)");
  }
  for (int s = 0; s < p->nseg; s++) {
    float scale = server_encode(p, s, server_error + p->server_off[s], bit_at);
    memcpy(p->server_msg + 4 * (size_t)s, &scale, 4);
  }
  size_t msg = 4 * (size_t)p->nseg + p->bits_bytes;
  zinc_coll phase2 = {.kind = ZINC_COLL_ALLGATHER, .send = p->server_msg, .recv = p->gathered,
                      .count = msg, .dtype = ZINC_DT_U8, .logical_bytes = fp32_half,
                      .codec_name = "onebit"};
  t0 = zinc_now();
  st = comm->ops->run(comm, &phase2, 1);
  p->comm_seconds += zinc_now() - t0;
  if (st != ZINC_OK) {
    free(bit_at);
    return zinc_error_wrap(st, "1-bit compressed all-reduce, phase 2 (server signs and scales)");
  }
  for (int s = 0; s < p->nseg; s++)
    decode_result(p, s, buf + p->seg[s].offset, bit_at);
  free(bit_at);
  return ZINC_OK;
}

/* A GPU device: the segments' span of buf and both error buffers through
 * host copies. */
static zinc_status allreduce_staged(zinc_onebit_plan *p, zinc_device *dev, zinc_stream *s,
                                    zinc_comm *comm, float *buf, float *worker_error,
                                    float *server_error) {
  int64_t lo = INT64_MAX, hi = 0;
  for (int i = 0; i < p->nseg; i++) {
    if (p->seg[i].offset < lo)
      lo = p->seg[i].offset;
    if (p->seg[i].offset + p->seg[i].n > hi)
      hi = p->seg[i].offset + p->seg[i].n;
  }
  size_t span = (size_t)(hi - lo) * 4;
  float *h_buf = NULL, *h_w = NULL, *h_e = NULL;
  zinc_status st = zinc_calloc((void **)&h_buf, span + 16, 1, "1-bit host copy of the buffer");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&h_w, p->worker_error_bytes + 16, 1, "1-bit host worker error");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&h_e, p->server_error_bytes + 16, 1, "1-bit host server error");
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, h_buf, buf + lo, span, s);
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, h_w, worker_error, p->worker_error_bytes, s);
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, h_e, server_error, p->server_error_bytes, s);
  if (st == ZINC_OK)
    st = dev->ops->stream_sync(dev, s);
  if (st == ZINC_OK)
    st = allreduce_host(p, comm, h_buf - lo, h_w, h_e);
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, buf + lo, h_buf, span, s);
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, worker_error, h_w, p->worker_error_bytes, s);
  if (st == ZINC_OK)
    st = dev->ops->copy(dev, server_error, h_e, p->server_error_bytes, s);
  if (st == ZINC_OK)
    st = dev->ops->stream_sync(dev, s);
  free(h_buf);
  free(h_w);
  free(h_e);
  return st;
}

zinc_status zinc_onebit_allreduce(zinc_onebit_plan *p, zinc_device *dev, zinc_stream *s,
                                  zinc_comm *comm, float *buf, float *worker_error,
                                  float *server_error) {
  if (comm->size != p->nranks || comm->rank != p->rank)
    return zinc_error(ZINC_ERR_INVALID, "1-bit compressed all-reduce: the plan is for rank %d "
                      "of %d, the comm is rank %d of %d", p->rank, p->nranks, comm->rank,
                      comm->size);
  if (p->nranks == 1 || p->nseg == 0)
    return ZINC_OK;
  if (dev && (dev->ops->is_gpu || p->staged))
    return allreduce_staged(p, dev, s, comm, buf, worker_error, server_error);
  return allreduce_host(p, comm, buf, worker_error, server_error);
}
