/* test_comm_nccl.c — the NCCL comm, one GPU per rank, under mpirun with 1,
 * 2, 4 and 8 ranks (skipped when the node has fewer GPUs than ranks).
 *
 * Every collective of comm/comm.h with values whose sums are exact in
 * any order (NCCL's reductions are not rank-ordered), in place and out of
 * place, receive buffers poisoned first and gaps left untouched; a batch
 * completed with test() and one with wait(); a batch that must wait for
 * the trainer's compute stream (the input is still being copied there when
 * the batch starts); split with reordering keys and a rank left out; at one
 * rank the same on a comm bootstrapped by the self comm; with two or more
 * ranks, a peer that never joins an all-reduce must give ZINC_ERR_COMM
 * after the comm's timeout instead of a hang, from wait and from test
 * (which then says done: the request is consumed, comm.h).
 *
 * Several comms of one device (a split's data- and model-parallel comms,
 * and two comms made from one bootstrap, as the engine makes them):
 * batches started on them interleaved, all in flight at once, complete
 * with the right values, and they complete in launch order across the
 * comms (one launch stream per device: a small batch started after a
 * large one on another comm is not done before it).
 *
 * 16-bit sums are added in fp32 and rounded once (comm_nccl.c): bf16 and
 * fp16 all-reduce and reduce-scatter, in and out of place, against the
 * exact sum rounded to fp32 and then to 16 bits (written here in double):
 * bitwise at 1 and 2 ranks (one addition: the same in any order), within
 * one 16-bit ulp plus the fp32 order's (n-1) * 2^-23 * sum|x| at more
 * ranks. Inputs where one rank holds a large value (256 in bf16, 2048 in
 * fp16) and the others 1 catch per-hop 16-bit rounding: that loses the
 * ones (256 + 1 rounds back to 256) whenever the large value comes first,
 * which some chunk's order does at 3+ ranks. */
#include <mpi.h>
#include <sched.h>

#include "gpu_test.h"

#include "comm/comm.h"

static int g_failures; /* this rank's failed checks (test program state) */

#define EXPECT(cond, ...)                                                         \
  do {                                                                            \
    if (!(cond)) {                                                                \
      int r_;                                                                     \
      MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                         \
      fprintf(stderr, "rank %d: %s:%d: %s: ", r_, __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                               \
      fprintf(stderr, "\n");                                                      \
      g_failures++;                                                               \
    }                                                                             \
  } while (0)

#define EXPECT_OK(expr) EXPECT((expr) == ZINC_OK, "%s", zinc_last_error())

/* ------------------------------------------------- bootstrap over MPI */

/* A comm that can broadcast bytes and barrier over MPI_COMM_WORLD: all that
 * zinc_comm_nccl_create asks of its bootstrap. It stands in for the mpi
 * backend (comm/comm_mpi.c) so that this test needs nothing else. */
static zinc_status boot_run(zinc_comm *c, const zinc_coll *colls, int n) {
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    if (o->kind == ZINC_COLL_BROADCAST)
      MPI_Bcast(o->recv, (int)(o->count * zinc_dt_size(o->dtype)), MPI_BYTE, o->root,
                MPI_COMM_WORLD);
    else if (o->kind == ZINC_COLL_BARRIER)
      MPI_Barrier(MPI_COMM_WORLD);
    else
      return zinc_error(ZINC_ERR_UNSUPPORTED, "test bootstrap: only broadcast and barrier");
  }
  return ZINC_OK;
}

static void boot_destroy(zinc_comm *c) { free(c); }

static const zinc_comm_ops boot_ops = {.name = "test-mpi", .run = boot_run,
                                       .destroy = boot_destroy};

static zinc_comm *boot_create(void) {
  zinc_comm *c = calloc(1, sizeof *c);
  c->ops = &boot_ops;
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  c->timeout_s = 60;
  return c;
}

/* ---------------------------------------------------------- helpers */

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cudaMemset(p, POISON_BYTE, bytes);
  return p;
}

static void *download(const void *dev, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost);
  return h;
}

static void upload(void *dev, const void *host, size_t bytes) {
  cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
}

/* -------------------------------------------------------- collectives */

static void check_allreduce(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  float tri = (float)(size * (size + 1) / 2);
  size_t n = 1000003;
  float *h = malloc(n * 4), *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    h[i] = (float)((rank + 1) * (int)(i % 7));
    want[i] = tri * (float)(i % 7);
  }
  float *send = dev_alloc(n * 4), *recv = dev_alloc(n * 4);
  upload(send, h, n * 4);
  EXPECT_OK(zinc_comm_allreduce(c, send, recv, n, ZINC_F32, ZINC_OP_SUM));
  float *got = download(recv, n * 4);
  EXPECT(test_compare_bits("all-reduce f32", got, want, (int64_t)n, ZINC_F32) == 0, "out of place");
  free(got);
  /* in place, bf16 small integers (exact) */
  uint16_t *hb = malloc(n * 2);
  for (size_t i = 0; i < n; i++)
    hb[i] = zinc_f32_to_bf16((float)((rank + 1) * (int)(i % 3)));
  upload(send, hb, n * 2);
  EXPECT_OK(zinc_comm_allreduce(c, send, send, n, ZINC_BF16, ZINC_OP_SUM));
  uint16_t *gb = download(send, n * 2);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += zinc_bf16_to_f32(gb[i]) != tri * (float)(i % 3);
  EXPECT(bad == 0, "all-reduce bf16 in place: %zu wrong", bad);
  free(gb);
  free(hb);
  /* max and min of i32, sum of f64 */
  int32_t hi[1000];
  for (int i = 0; i < 1000; i++)
    hi[i] = rank * 1000 + i % 13;
  upload(send, hi, sizeof hi);
  EXPECT_OK(zinc_comm_allreduce(c, send, recv, 1000, ZINC_DT_I32, ZINC_OP_MAX));
  int32_t *gi = download(recv, sizeof hi);
  bad = 0;
  for (int i = 0; i < 1000; i++)
    bad += gi[i] != (size - 1) * 1000 + i % 13;
  EXPECT(bad == 0, "all-reduce max i32: %zu wrong", bad);
  free(gi);
  EXPECT_OK(zinc_comm_allreduce(c, send, recv, 1000, ZINC_DT_I32, ZINC_OP_MIN));
  gi = download(recv, sizeof hi);
  bad = 0;
  for (int i = 0; i < 1000; i++)
    bad += gi[i] != i % 13;
  EXPECT(bad == 0, "all-reduce min i32: %zu wrong", bad);
  free(gi);
  double hd[33];
  for (int i = 0; i < 33; i++)
    hd[i] = 0.5 * (rank + 1) + i;
  upload(send, hd, sizeof hd);
  EXPECT_OK(zinc_comm_allreduce(c, send, recv, 33, ZINC_DT_F64, ZINC_OP_SUM));
  double *gd = download(recv, sizeof hd);
  bad = 0;
  for (int i = 0; i < 33; i++)
    bad += gd[i] != 0.5 * tri + (double)i * size;
  EXPECT(bad == 0, "all-reduce f64: %zu wrong", bad);
  free(gd);
  cudaFree(send);
  cudaFree(recv);
  free(h);
  free(want);
}

static void check_reduce_scatter(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  float tri = (float)(size * (size + 1) / 2);
  size_t count = 4099, total = count * (size_t)size;
  float *h = malloc(total * 4), *want = malloc(count * 4);
  for (size_t j = 0; j < total; j++)
    h[j] = (float)((rank + 1) * ((int)(j % 11) - 5));
  for (size_t i = 0; i < count; i++)
    want[i] = tri * (float)((int)((rank * count + i) % 11) - 5);
  float *send = dev_alloc(total * 4), *recv = dev_alloc(count * 4);
  upload(send, h, total * 4);
  EXPECT_OK(zinc_comm_reduce_scatter(c, send, recv, count, ZINC_F32));
  float *got = download(recv, count * 4);
  EXPECT(test_compare_bits("reduce-scatter", got, want, (int64_t)count, ZINC_F32) == 0, "out of place");
  free(got);
  EXPECT_OK(zinc_comm_reduce_scatter(c, send, send + rank * count, count, ZINC_F32));
  got = download(send + rank * count, count * 4);
  EXPECT(test_compare_bits("reduce-scatter in place", got, want, (int64_t)count, ZINC_F32) == 0, "in place");
  free(got);
  cudaFree(send);
  cudaFree(recv);
  free(h);
  free(want);
}

static void check_allgather(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  size_t count = 1001, total = count * (size_t)size;
  uint16_t *mine = malloc(count * 2), *want = malloc(total * 2);
  for (size_t i = 0; i < count; i++)
    mine[i] = (uint16_t)(rank * 7919 + i * 3); /* any bits: moved, never added */
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < count; i++)
      want[r * count + i] = (uint16_t)(r * 7919 + i * 3);
  uint16_t *send = dev_alloc(count * 2), *recv = dev_alloc(total * 2);
  upload(send, mine, count * 2);
  EXPECT_OK(zinc_comm_allgather(c, send, recv, count, ZINC_F16));
  uint16_t *got = download(recv, total * 2);
  EXPECT(memcmp(got, want, total * 2) == 0, "all-gather out of place differs");
  free(got);
  cudaMemset(recv, POISON_BYTE, total * 2);
  upload(recv + rank * count, mine, count * 2);
  EXPECT_OK(zinc_comm_allgather(c, recv + rank * count, recv, count, ZINC_F16));
  got = download(recv, total * 2);
  EXPECT(memcmp(got, want, total * 2) == 0, "all-gather in place differs");
  free(got);
  cudaFree(send);
  cudaFree(recv);
  free(mine);
  free(want);
}

static void check_allgatherv(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  size_t *counts = calloc((size_t)size, sizeof *counts);
  size_t *displs = calloc((size_t)size, sizeof *displs);
  size_t end = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = r == 0 && size > 1 ? 0 : 37 * (size_t)r + 5; /* rank 0 sends nothing */
    displs[r] = end + 3;                                     /* 3-byte gaps stay poisoned */
    end = displs[r] + counts[r];
  }
  unsigned char *mine = malloc(counts[rank] + 1), *want = malloc(end);
  memset(want, POISON_BYTE, end);
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < counts[r]; i++)
      want[displs[r] + i] = (unsigned char)(r * 31 + i);
  memcpy(mine, want + displs[rank], counts[rank]);
  unsigned char *send = dev_alloc(counts[rank] + 1), *recv = dev_alloc(end);
  upload(send, mine, counts[rank]);
  EXPECT_OK(zinc_comm_allgatherv(c, send, counts[rank], recv, counts, displs, ZINC_DT_U8));
  unsigned char *got = download(recv, end);
  EXPECT(memcmp(got, want, end) == 0, "all-gatherv differs (gaps included)");
  free(got);
  cudaFree(send);
  cudaFree(recv);
  free(mine);
  free(want);
  free(counts);
  free(displs);
}

static void check_broadcast_barrier(zinc_comm *c) {
  size_t n = 777;
  int64_t *h = malloc(n * 8);
  int64_t *buf = dev_alloc(n * 8);
  for (int root = 0; root < c->size; root++) {
    cudaMemset(buf, POISON_BYTE, n * 8);
    for (size_t i = 0; i < n; i++)
      h[i] = (int64_t)root * 1000000 + (int64_t)i;
    if (c->rank == root)
      upload(buf, h, n * 8);
    EXPECT_OK(zinc_comm_broadcast(c, buf, n, ZINC_DT_I64, root));
    int64_t *got = download(buf, n * 8);
    EXPECT(memcmp(got, h, n * 8) == 0, "broadcast from %d differs", root);
    free(got);
  }
  EXPECT_OK(zinc_comm_barrier(c));
  cudaFree(buf);
  free(h);
}

/* A batch of three, completed by polling test(), then again by wait(). */
static void check_batches(zinc_comm *c) {
  int size = c->size;
  float tri = (float)(size * (size + 1) / 2);
  size_t n = 5000, g = 100;
  float *h = malloc(n * 4);
  for (size_t i = 0; i < n; i++)
    h[i] = (float)((c->rank + 1) * (int)(i % 5));
  float *ar = dev_alloc(n * 4), *ag_send = dev_alloc(g * 4), *ag = dev_alloc(g * 4 * size);
  float *bc = dev_alloc(10 * 4);
  for (int round = 0; round < 2; round++) {
    upload(ar, h, n * 4);
    upload(ag_send, h, g * 4);
    if (c->rank == size - 1)
      upload(bc, h + 10, 40);
    zinc_coll batch[3] = {
        {.kind = ZINC_COLL_ALLREDUCE, .send = ar, .recv = ar, .count = n, .dtype = ZINC_F32},
        {.kind = ZINC_COLL_ALLGATHER, .send = ag_send, .recv = ag, .count = g,
         .dtype = ZINC_F32},
        {.kind = ZINC_COLL_BROADCAST, .recv = bc, .count = 10, .dtype = ZINC_F32,
         .root = size - 1},
    };
    zinc_comm_req *req = NULL;
    EXPECT_OK(c->ops->start(c, batch, 3, &req));
    if (!req)
      continue;
    if (round == 0) {
      int done = 0;
      zinc_status st;
      while ((st = c->ops->test(c, req, &done)) == ZINC_OK && !done)
        sched_yield();
      EXPECT(st == ZINC_OK, "test: %s", zinc_last_error());
    } else {
      EXPECT_OK(c->ops->wait(c, req));
    }
    float *got = download(ar, n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      bad += got[i] != tri * (float)(i % 5);
    free(got);
    got = download(ag, g * 4 * size);
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < g; i++)
        bad += got[r * g + i] != (float)((r + 1) * (int)(i % 5));
    free(got);
    got = download(bc, 40);
    for (int i = 0; i < 10; i++)
      bad += got[i] != (float)(size * (int)((i + 10) % 5));
    free(got);
    EXPECT(bad == 0, "batch round %d: %zu wrong elements", round, bad);
  }
  cudaFree(ar);
  cudaFree(ag_send);
  cudaFree(ag);
  cudaFree(bc);
  free(h);
}

/* The input is still being copied on the compute stream when the batch
 * starts: the comm must order itself after that copy. */
static void check_compute_ordering(zinc_comm *boot, int device) {
  cudaStream_t compute;
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  zinc_comm *c = NULL;
  EXPECT_OK(zinc_comm_nccl_create(boot, device, compute, 60, &c));
  if (!c)
    return;
  size_t n = (size_t)16 << 20;
  float *pinned = NULL;
  cudaMallocHost((void **)&pinned, n * 4);
  for (size_t i = 0; i < n; i++)
    pinned[i] = (float)(c->rank + 1);
  float *buf = dev_alloc(n * 4); /* poisoned: NaN if read too early */
  for (int k = 0; k < 4; k++) /* keep the compute stream busy for a while */
    cudaMemcpyAsync(buf, pinned, n * 4, cudaMemcpyHostToDevice, compute);
  EXPECT_OK(zinc_comm_allreduce(c, buf, buf, n, ZINC_F32, ZINC_OP_SUM));
  float *got = download(buf, n * 4);
  float tri = (float)(c->size * (c->size + 1) / 2);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += got[i] != tri;
  EXPECT(bad == 0, "all-reduce ran before the compute stream's copy: %zu wrong", bad);
  free(got);
  /* a device-side wait: the compute stream's copy queued after wait
   * returns reads the batch's result (the host never waited for it) */
  for (size_t i = 0; i < n; i++)
    pinned[i] = (float)(c->rank + 1);
  upload(buf, pinned, n * 4);
  memset(pinned, 0xFF, n * 4);
  zinc_coll ar = {.kind = ZINC_COLL_ALLREDUCE, .send = buf, .recv = buf, .count = n,
                  .dtype = ZINC_F32, .op = ZINC_OP_SUM};
  zinc_comm_req *req = NULL;
  EXPECT_OK(c->ops->start(c, &ar, 1, &req));
  if (req)
    EXPECT_OK(c->ops->wait(c, req));
  cudaMemcpyAsync(pinned, buf, n * 4, cudaMemcpyDeviceToHost, compute);
  cudaStreamSynchronize(compute);
  EXPECT_OK(zinc_comm_settle(c));
  bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += pinned[i] != tri;
  EXPECT(bad == 0, "the compute stream read the all-reduce's result before it was done "
         "(device-side wait): %zu wrong", bad);
  cudaFree(buf);
  cudaFreeHost(pinned);
  zinc_comm_destroy(c);
  cudaStreamDestroy(compute);
}

static void check_split(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  int left_out = size > 2 && rank == size - 1;
  int color = left_out ? -1 : rank % 2;
  zinc_comm *sub = (zinc_comm *)1;
  EXPECT_OK(c->ops->split(c, color, size - rank, &sub)); /* keys reverse the order */
  if (left_out) {
    EXPECT(sub == NULL, "a rank with color -1 got a comm");
    return;
  }
  if (!sub || sub == (zinc_comm *)1)
    return;
  int members = 0, position = 0, sum = 0;
  for (int r = size - 1; r >= 0; r--) { /* ascending key = descending rank */
    if ((size > 2 && r == size - 1) || r % 2 != color)
      continue;
    if (r == rank)
      position = members;
    members++;
    sum += r;
  }
  EXPECT(sub->size == members && sub->rank == position, "split: rank %d of %d, want %d of %d",
         sub->rank, sub->size, position, members);
  int32_t *word = dev_alloc(4);
  int32_t mine = rank;
  upload(word, &mine, 4);
  EXPECT_OK(zinc_comm_allreduce(sub, word, word, 1, ZINC_DT_I32, ZINC_OP_SUM));
  int32_t *got = download(word, 4);
  EXPECT(*got == sum, "split all-reduce: %d, want %d", *got, sum);
  free(got);
  cudaFree(word);
  zinc_comm_destroy(sub);
}

/* ---------------------------------------------------- 16-bit sums */

/* Rank p's value at element i: half the elements hold one large value (on
 * rank i % size) and 1 elsewhere, the others seeded values in [-1, 1),
 * all exactly representable in the 16-bit type. */
static float sum16_value(int dtype, int p, int size, size_t i) {
  if (i % 2 == 0)
    return (int)((i / 2) % (size_t)size) == p ? (dtype == ZINC_BF16 ? 256.0f : 2048.0f) : 1.0f;
  test_rng r = {.s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)p << 40) ^ (uint64_t)(i + 1)};
  float v = rng_uniform(&r, -1.0f, 1.0f);
  return dtype == ZINC_BF16 ? zinc_bf16_to_f32(zinc_f32_to_bf16(v))
                            : zinc_f16_to_f32(zinc_f32_to_f16(v));
}

static uint16_t to16(int dtype, float v) {
  return dtype == ZINC_BF16 ? zinc_f32_to_bf16(v) : zinc_f32_to_f16(v);
}

static float from16(int dtype, uint16_t v) {
  return dtype == ZINC_BF16 ? zinc_bf16_to_f32(v) : zinc_f16_to_f32(v);
}

/* One unit in the last place of the 16-bit type at |x| (fp16 below 2^-14:
 * its subnormals' spacing, 2^-24). */
static double ulp16(int dtype, double x) {
  int e = 0;
  frexp(fabs(x) > 0 ? fabs(x) : 1.0, &e); /* |x| = m * 2^e, m in [0.5, 1) */
  double ulp = ldexp(1.0, e - 1 - (dtype == ZINC_BF16 ? 7 : 10));
  return dtype == ZINC_F16 && ulp < ldexp(1.0, -24) ? ldexp(1.0, -24) : ulp;
}

/* got[k] for element `first + k` against the exact sum over the ranks:
 * bitwise (to16(float(exact))) at 1-2 ranks, else within the bound. */
static size_t sum16_check(int dtype, const uint16_t *got, size_t first, size_t n, int size,
                          const char *what) {
  size_t bad = 0;
  double worst = 0;
  for (size_t k = 0; k < n; k++) {
    double exact = 0, abs_sum = 0;
    for (int p = 0; p < size; p++) {
      exact += sum16_value(dtype, p, size, first + k);
      abs_sum += fabs(sum16_value(dtype, p, size, first + k));
    }
    uint16_t once = to16(dtype, (float)exact);
    double err = fabs((double)from16(dtype, got[k]) - exact);
    int ok = size <= 2 ? got[k] == once
                       : err <= ulp16(dtype, exact) + (size - 1) * ldexp(abs_sum, -23);
    if (!ok && bad++ < 4)
      fprintf(stderr, "%s: element %zu: got %g (0x%04x), exact sum %g, rounded once %g "
              "(0x%04x)\n", what, first + k, from16(dtype, got[k]), got[k], exact,
              from16(dtype, once), once);
    if (err > worst)
      worst = err;
  }
  if (bad)
    fprintf(stderr, "%s: %zu of %zu wrong, largest error %g\n", what, bad, n, worst);
  return bad;
}

static void check_sum16(zinc_comm *c) {
  int rank = c->rank, size = c->size;
  const int dtypes[2] = {ZINC_BF16, ZINC_F16};
  size_t count = 3001, total = count * (size_t)size;
  uint16_t *h = malloc(total * 2);
  uint16_t *send = dev_alloc(total * 2), *recv = dev_alloc(total * 2);
  for (int d = 0; d < 2; d++) {
    int dt = dtypes[d];
    const char *name = dt == ZINC_BF16 ? "bf16" : "f16";
    char what[96];
    for (size_t j = 0; j < total; j++)
      h[j] = to16(dt, sum16_value(dt, rank, size, j));
    /* all-reduce out of place, then in place */
    upload(send, h, total * 2);
    EXPECT_OK(zinc_comm_allreduce(c, send, recv, total, dt, ZINC_OP_SUM));
    uint16_t *got = download(recv, total * 2);
    snprintf(what, sizeof what, "all-reduce %s at %d ranks", name, size);
    EXPECT(sum16_check(dt, got, 0, total, size, what) == 0, "%s", what);
    free(got);
    EXPECT_OK(zinc_comm_allreduce(c, send, send, total, dt, ZINC_OP_SUM));
    got = download(send, total * 2);
    snprintf(what, sizeof what, "all-reduce %s in place at %d ranks", name, size);
    EXPECT(sum16_check(dt, got, 0, total, size, what) == 0, "%s", what);
    free(got);
    /* reduce-scatter out of place and in place, in one batch with an f32
     * all-reduce between them (exact small integers) */
    upload(send, h, total * 2);
    cudaMemset(recv, POISON_BYTE, total * 2);
    float *f32 = dev_alloc(64 * 4), hf[64];
    for (int i = 0; i < 64; i++)
      hf[i] = (float)(rank + i);
    upload(f32, hf, sizeof hf);
    uint16_t *send2 = dev_alloc(total * 2);
    upload(send2, h, total * 2);
    zinc_coll batch[3] = {
        {.kind = ZINC_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
         .dtype = dt},
        {.kind = ZINC_COLL_ALLREDUCE, .send = f32, .recv = f32, .count = 64, .dtype = ZINC_F32,
         .op = ZINC_OP_SUM},
        {.kind = ZINC_COLL_REDUCE_SCATTER, .send = send2, .recv = send2 + (size_t)rank * count,
         .count = count, .dtype = dt},
    };
    EXPECT_OK(c->ops->run(c, batch, 3));
    got = download(recv, count * 2);
    snprintf(what, sizeof what, "reduce-scatter %s at %d ranks", name, size);
    EXPECT(sum16_check(dt, got, (size_t)rank * count, count, size, what) == 0, "%s", what);
    free(got);
    got = download(send2 + (size_t)rank * count, count * 2);
    snprintf(what, sizeof what, "reduce-scatter %s in place at %d ranks", name, size);
    EXPECT(sum16_check(dt, got, (size_t)rank * count, count, size, what) == 0, "%s", what);
    free(got);
    float *gf = download(f32, sizeof hf);
    size_t bad = 0;
    for (int i = 0; i < 64; i++)
      bad += gf[i] != (float)(size * (size - 1) / 2 + size * i);
    EXPECT(bad == 0, "the f32 all-reduce between 16-bit sums: %zu wrong", bad);
    free(gf);
    cudaFree(f32);
    cudaFree(send2);
  }
  cudaFree(send);
  cudaFree(recv);
  free(h);
}

/* ------------------------------------------------ comms of one device */

/* Batches on two comms of one device, started interleaved and all in
 * flight, then waited for in reverse: each all-reduce's sum is right
 * (comm a: ranks' value rank + 1 + round, comm b: 10 * (rank + 1)). Then a
 * large all-reduce on a and a small one on b: once b's is done, a's is too
 * (launch order across the comms). */
static void check_two_comms(zinc_comm *a, zinc_comm *b, const char *what) {
  enum { ROUNDS = 6 };
  size_t n = 100003;
  float *buf[2 * ROUNDS];
  zinc_comm_req *req[2 * ROUNDS] = {0};
  int sum_a = 0, sum_b = 0;
  /* the ranks' contributions, summed over the members of each comm: the
   * members' world ranks are not known here, so each comm first sums
   * rank + 1 of its members with an all-reduce of its own */
  int32_t *word = dev_alloc(8);
  int32_t mine[2] = {0, 0};
  MPI_Comm_rank(MPI_COMM_WORLD, &mine[0]);
  mine[0] += 1;
  upload(word, mine, 4);
  EXPECT_OK(zinc_comm_allreduce(a, word, word, 1, ZINC_DT_I32, ZINC_OP_SUM));
  int32_t *g = download(word, 4);
  sum_a = *g;
  free(g);
  upload(word, mine, 4);
  EXPECT_OK(zinc_comm_allreduce(b, word, word, 1, ZINC_DT_I32, ZINC_OP_SUM));
  g = download(word, 4);
  sum_b = *g;
  free(g);
  cudaFree(word);
  float *h = malloc(n * 4);
  for (int k = 0; k < 2 * ROUNDS; k++) {
    int on_a = k % 2 == 0;
    float v = on_a ? (float)(mine[0] + k / 2) : (float)(10 * mine[0]);
    for (size_t i = 0; i < n; i++)
      h[i] = v;
    buf[k] = dev_alloc(n * 4);
    upload(buf[k], h, n * 4);
  }
  for (int k = 0; k < 2 * ROUNDS; k++) {
    zinc_comm *c = k % 2 == 0 ? a : b;
    zinc_coll ar = {.kind = ZINC_COLL_ALLREDUCE, .send = buf[k], .recv = buf[k], .count = n,
                    .dtype = ZINC_F32, .op = ZINC_OP_SUM};
    EXPECT_OK(c->ops->start(c, &ar, 1, &req[k]));
  }
  for (int k = 2 * ROUNDS - 1; k >= 0; k--) {
    zinc_comm *c = k % 2 == 0 ? a : b;
    if (req[k])
      EXPECT_OK(c->ops->wait(c, req[k]));
    float *got = download(buf[k], n * 4);
    /* comm a: sum of (rank + 1 + round) = sum_a + members * round */
    float want = k % 2 == 0 ? (float)(sum_a + a->size * (k / 2)) : (float)(10 * sum_b);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      bad += got[i] != want;
    EXPECT(bad == 0, "%s: batch %d on comm %c: %zu wrong (want %g, got %g)", what, k,
           k % 2 == 0 ? 'a' : 'b', bad, want, got[0]);
    free(got);
    cudaFree(buf[k]);
  }
  free(h);

  /* launch order across the comms */
  size_t big = (size_t)32 << 20;
  float *large = dev_alloc(big * 4), *small = dev_alloc(4);
  cudaMemset(large, 0, big * 4);
  cudaMemset(small, 0, 4);
  zinc_coll la = {.kind = ZINC_COLL_ALLREDUCE, .send = large, .recv = large, .count = big,
                  .dtype = ZINC_F32, .op = ZINC_OP_SUM};
  zinc_coll sb = {.kind = ZINC_COLL_ALLREDUCE, .send = small, .recv = small, .count = 1,
                  .dtype = ZINC_F32, .op = ZINC_OP_SUM};
  zinc_comm_req *ra = NULL, *rb = NULL;
  EXPECT_OK(a->ops->start(a, &la, 1, &ra));
  EXPECT_OK(b->ops->start(b, &sb, 1, &rb));
  if (rb) { /* seen done on the host (wait would only order the device) */
    int b_done = 0;
    zinc_status st;
    while ((st = b->ops->test(b, rb, &b_done)) == ZINC_OK && !b_done)
      sched_yield();
    EXPECT(st == ZINC_OK, "%s: the small batch: %s", what, zinc_last_error());
  }
  if (ra) {
    int done = 0;
    EXPECT_OK(a->ops->test(a, ra, &done));
    EXPECT(done, "%s: a small batch on comm b finished before a large one started earlier "
           "on comm a: the comms of a device do not run in launch order", what);
    if (!done)
      EXPECT_OK(a->ops->wait(a, ra));
  }
  cudaFree(large);
  cudaFree(small);
}

/* The engine's comms on one GPU: the data- and model-parallel comms (here
 * the two splits of a 2-wide grid) and a second comm made from the same
 * bootstrap. */
static void check_comms_of_a_device(zinc_comm *world, zinc_comm *boot, int device) {
  int rank = world->rank;
  zinc_comm *mp = NULL, *dp = NULL, *again = NULL;
  EXPECT_OK(world->ops->split(world, rank / 2, rank, &mp));
  EXPECT_OK(world->ops->split(world, rank % 2, rank, &dp));
  if (mp && dp)
    check_two_comms(dp, mp, "split dp and mp");
  EXPECT_OK(zinc_comm_nccl_create(boot, device, NULL, 60, &again));
  if (again)
    check_two_comms(world, again, "two comms from one bootstrap");
  zinc_comm_destroy(again);
  zinc_comm_destroy(dp);
  zinc_comm_destroy(mp);
}

/* Rank 0 all-reduces alone on a comm with a 3-second timeout: ZINC_ERR_COMM
 * within a bounded time, never a hang: from test (by_test), else from
 * settle after the device-side wait (which returns at once), after the
 * host synchronised the compute stream that waits for the lost batch (the
 * watchdog must abort it for that synchronisation to return). */
static void check_lost_peer(zinc_comm *boot, int device, int by_test) {
  zinc_comm *c = NULL;
  EXPECT_OK(zinc_comm_nccl_create(boot, device, NULL, 3.0, &c));
  if (!c)
    return;
  if (c->rank == 0) {
    float *buf = dev_alloc(4096);
    double t0 = MPI_Wtime();
    zinc_comm_req *req = NULL;
    zinc_coll ar = {.kind = ZINC_COLL_ALLREDUCE, .send = buf, .recv = buf, .count = 1024,
                    .dtype = ZINC_F32, .op = ZINC_OP_SUM};
    zinc_status st = c->ops->start(c, &ar, 1, &req);
    if (st == ZINC_OK && by_test) {
      /* polled, as the engine's overlapped reductions are: the error
       * comes with done = 1 and the request is gone (not waited again) */
      int done = 0;
      while ((st = c->ops->test(c, req, &done)) == ZINC_OK && !done)
        sched_yield();
      EXPECT(done == 1, "test returned %s with done = 0: the caller would keep a request the "
             "comm freed", zinc_status_name(st));
    } else if (st == ZINC_OK) {
      st = c->ops->wait(c, req);
      EXPECT(st == ZINC_OK, "a device-side wait failed at once: %s", zinc_last_error());
      cudaError_t sync = cudaStreamSynchronize(NULL); /* the comm's compute stream */
      EXPECT(MPI_Wtime() - t0 < 30.0, "synchronising behind the lost batch took %.1f s",
             MPI_Wtime() - t0);
      (void)sync; /* an error or not: the kernel was aborted */
      (void)cudaGetLastError();
      st = zinc_comm_settle(c);
    }
    double took = MPI_Wtime() - t0;
    EXPECT(st == ZINC_ERR_COMM, "alone in an all-reduce gave %s (%s)", zinc_status_name(st),
           zinc_last_error());
    EXPECT(took < 30.0, "the timeout took %.1f s", took);
    printf("lost peer (%s): %s after %.1f s: %s\n", by_test ? "test" : "wait, settle",
           zinc_status_name(st), took, zinc_last_error());
    st = zinc_comm_barrier(c);
    EXPECT(st == ZINC_ERR_COMM && strstr(zinc_last_error(), "aborted"),
           "an aborted comm must refuse work: %s", zinc_last_error());
    cudaFree(buf);
  }
  zinc_comm_destroy(c); /* the others' finalize ends by timeout or error, then abort */
  MPI_Barrier(MPI_COMM_WORLD);
}

static void run_all(zinc_comm *c) {
  check_allreduce(c);
  check_reduce_scatter(c);
  check_allgather(c);
  check_allgatherv(c);
  check_broadcast_barrier(c);
  check_batches(c);
  check_sum16(c);
}

int main(int argc, char **argv) {
  gpu_require(); /* before MPI: every rank of the job skips alike */
  MPI_Init(&argc, &argv);
  int rank, size, local_rank, local_size, gpus = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  if (cudaGetDeviceCount(&gpus) != cudaSuccess)
    gpus = 0;
  int enough = gpus >= local_size, all_enough = 0;
  MPI_Allreduce(&enough, &all_enough, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_enough) {
    if (rank == 0)
      printf("SKIPPED: %d ranks share a node with %d CUDA devices (NCCL needs one GPU per "
             "rank)\n", local_size, gpus);
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(local_rank);
  zinc_log_set_rank(rank);

  zinc_comm *boot = boot_create();
  zinc_comm *world = NULL;
  EXPECT_OK(zinc_comm_nccl_create(boot, local_rank, NULL, 60, &world));
  if (world) {
    EXPECT(world->rank == rank && world->size == size, "nccl comm is rank %d of %d",
           world->rank, world->size);
    run_all(world);
    check_split(world);
    check_comms_of_a_device(world, boot, local_rank);
    zinc_comm_destroy(world);
  }
  check_compute_ordering(boot, local_rank);
  if (size == 1) { /* world of one bootstrapped by the self comm */
    zinc_comm *self = NULL, *one = NULL;
    EXPECT_OK(zinc_comm_self_create(&self));
    EXPECT_OK(zinc_comm_nccl_create(self, 0, NULL, 60, &one));
    if (one)
      run_all(one);
    zinc_comm_destroy(one);
    zinc_comm_destroy(self);
  } else {
    check_lost_peer(boot, local_rank, 0);
    check_lost_peer(boot, local_rank, 1);
  }
  zinc_comm_destroy(boot);

  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s: %d failed checks over %d ranks\n", failures ? "FAIL" : "PASS", failures, size);
  MPI_Finalize();
  return failures ? 1 : 0;
}
