/*
 * test_comm_mpi_async.c — batches and the non-blocking path of the mpi comm
 * (label `threads`: the ThreadSanitizer build runs it):
 *   - one batch mixing every kind, including an all-gather of what a
 *     reduce-scatter of the same batch produced (stage 0's all-reduce) and
 *     a batch of 300 entries (longer than one descriptor chunk);
 *   - started batches completing in start order while the caller computes,
 *     polled with test() and collected with wait(); run() issued while
 *     batches are in flight;
 * on the shared-memory path (shared and malloc buffers) and on the forced
 * point-to-point path.
 */
#include "comm/comm_check.h"

#define ELEMS 3001 /* per rank, not divisible by 2, 3 or 4 */

typedef struct {
  zinc_comm *c;
  const char *name;
  float *grads;      /* (size * ELEMS) f32: reduce-scatter + all-gather in place */
  double *scalars;   /* (ELEMS) f64: all-reduce max out of place -> reduced     */
  double *reduced;   /* (ELEMS)                                                 */
  uint16_t *params;  /* (ELEMS) bf16: broadcast from the last rank              */
  int32_t *gathered; /* (sum of counts + size) i32: all-gatherv                 */
} buffers;

static void fill_batch_inputs(buffers *b, uint32_t seed) {
  const int n = b->c->size, r = b->c->rank;
  check_fill(b->grads, (size_t)n * ELEMS, ZINC_F32, seed, r, 0);
  check_fill(b->scalars, ELEMS, ZINC_DT_F64, seed + 1, r, 0);
  if (r == n - 1)
    check_fill(b->params, ELEMS, ZINC_BF16, seed + 2, r, 0);
  else
    memset(b->params, 0, ELEMS * sizeof *b->params);
}

/* The batch of every kind; counts/displs must outlive run/start only as
 * long as the call (start copies them). */
static int make_batch(buffers *b, zinc_coll *batch, size_t *counts, size_t *displs) {
  const int n = b->c->size, r = b->c->rank;
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    counts[k] = (size_t)(17 * k + 5);
    displs[k] = at;
    at += counts[k] + 1;
  }
  int i = 0;
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_REDUCE_SCATTER, .send = b->grads,
                           .recv = b->grads + (size_t)r * ELEMS, .count = ELEMS,
                           .dtype = ZINC_F32};
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER, .send = b->grads + (size_t)r * ELEMS,
                           .recv = b->grads, .count = ELEMS, .dtype = ZINC_F32};
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_ALLREDUCE, .send = b->scalars, .recv = b->reduced,
                           .count = ELEMS, .dtype = ZINC_DT_F64, .op = ZINC_OP_MAX};
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_BROADCAST, .recv = b->params, .count = ELEMS,
                           .dtype = ZINC_BF16, .root = n - 1};
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_BARRIER};
  batch[i++] = (zinc_coll){.kind = ZINC_COLL_ALLGATHERV, .send = b->gathered + displs[r],
                           .recv = b->gathered, .count = counts[r], .dtype = ZINC_DT_I32,
                           .counts = counts, .displs = displs};
  for (size_t e = 0; e < counts[r]; e++)
    b->gathered[displs[r] + e] = (int32_t)(1000 * r + (int)e);
  return i;
}

static void check_batch(buffers *b, uint32_t seed, const size_t *counts, const size_t *displs,
                        const char *what) {
  const int n = b->c->size;
  char label[160];
  float *want_f = malloc((size_t)n * ELEMS * sizeof *want_f);
  for (int q = 0; q < n; q++) /* every slice, reduced in tree order, then gathered */
    for (size_t i = 0; i < ELEMS; i++)
      check_expect_reduce(want_f, (size_t)q * ELEMS + i, ZINC_F32, ZINC_OP_SUM, seed, n,
                          (size_t)q * ELEMS + i, -1, 0);
  snprintf(label, sizeof label, "%s: %s: reduce-scatter then all-gather", b->name, what);
  check_equal(b->grads, want_f, (size_t)n * ELEMS, ZINC_F32, label);
  free(want_f);
  double want_d[ELEMS];
  for (size_t i = 0; i < ELEMS; i++)
    check_expect_reduce(want_d, i, ZINC_DT_F64, ZINC_OP_MAX, seed + 1, n, i, -1, 0);
  snprintf(label, sizeof label, "%s: %s: all-reduce max f64", b->name, what);
  check_equal(b->reduced, want_d, ELEMS, ZINC_DT_F64, label);
  uint16_t want_h[ELEMS];
  check_fill(want_h, ELEMS, ZINC_BF16, seed + 2, n - 1, 0);
  snprintf(label, sizeof label, "%s: %s: broadcast bf16", b->name, what);
  check_equal(b->params, want_h, ELEMS, ZINC_BF16, label);
  for (int k = 0; k < n; k++)
    for (size_t e = 0; e < counts[k]; e++)
      CHECK(b->gathered[displs[k] + e] == (int32_t)(1000 * k + (int)e),
            "%s: %s: all-gatherv element %zu of rank %d is %d", b->name, what, e, k,
            b->gathered[displs[k] + e]);
}

static void test_mixed_batch(buffers *b, uint32_t seed) {
  const int n = b->c->size;
  zinc_coll batch[8];
  size_t counts[n], displs[n];
  fill_batch_inputs(b, seed);
  int nb = make_batch(b, batch, counts, displs);
  CHECK_OK(b->c->ops->run(b->c, batch, nb));
  check_batch(b, seed, counts, displs, "run(mixed batch)");
}

/* 300 reduce-scatters of different lengths in one batch. */
static void test_long_batch(buffers *b, uint32_t seed) {
  const int n = b->c->size, r = b->c->rank, nops = 300;
  zinc_coll *batch = calloc(nops, sizeof *batch);
  size_t *offs = calloc(nops + 1, sizeof *offs);
  for (int i = 0; i < nops; i++)
    offs[i + 1] = offs[i] + (size_t)(i % 7); /* per-rank counts 0..6 */
  float *send = b->grads, *recv = b->grads + (size_t)n * offs[nops];
  check_fill(send, (size_t)n * offs[nops], ZINC_F32, seed, r, 0);
  for (int i = 0; i < nops; i++)
    batch[i] = (zinc_coll){.kind = ZINC_COLL_REDUCE_SCATTER, .send = send + (size_t)n * offs[i],
                           .recv = recv + offs[i], .count = offs[i + 1] - offs[i],
                           .dtype = ZINC_F32};
  CHECK_OK(b->c->ops->run(b->c, batch, nops));
  float *want = calloc(offs[nops] + 1, sizeof *want);
  for (int i = 0; i < nops; i++)
    for (size_t e = 0; e < offs[i + 1] - offs[i]; e++)
      check_expect_reduce(want, offs[i] + e, ZINC_F32, ZINC_OP_SUM, seed, n,
                          (size_t)n * offs[i] + (size_t)r * (offs[i + 1] - offs[i]) + e, -1, 0);
  char label[96];
  snprintf(label, sizeof label, "%s: batch of %d reduce-scatters", b->name, nops);
  check_equal(recv, want, offs[nops], ZINC_F32, label);
  free(want);
  free(batch);
  free(offs);
}

static volatile double sink;

static void compute_a_while(void) {
  double acc = 0;
  for (int i = 0; i < 200000; i++)
    acc += (double)i * 1e-9;
  sink = acc;
}

/* Started batches: the mixed batch split in three requests that depend on
 * each other only through start order, a run() in between, test() polls. */
static void test_started(buffers *b, uint32_t seed) {
  const int n = b->c->size;
  zinc_coll batch[8];
  size_t counts[n], displs[n];
  fill_batch_inputs(b, seed);
  int nb = make_batch(b, batch, counts, displs);
  zinc_comm_req *rs = NULL, *ag = NULL, *rest = NULL;
  CHECK_OK(b->c->ops->start(b->c, &batch[0], 1, &rs));
  CHECK_OK(b->c->ops->start(b->c, &batch[1], 1, &ag)); /* needs rs's result */
  zinc_coll again[8];
  memcpy(again, batch, sizeof batch);
  CHECK_OK(b->c->ops->start(b->c, &again[2], nb - 2, &rest));
  memset(again, 0xff, sizeof again); /* start copied the batch */
  compute_a_while();
  int done = 0, polls = 0;
  while (!done && rs) {
    CHECK_OK(b->c->ops->test(b->c, rs, &done));
    polls++;
  }
  /* run() with batches still queued: it waits for them, then runs */
  double local = 1.0 + b->c->rank, total = 0;
  CHECK_OK(zinc_comm_allreduce(b->c, &local, &total, 1, ZINC_DT_F64, ZINC_OP_SUM));
  CHECK(total == (double)n * (n + 1) / 2, "%s: run between starts: sum %g", b->name, total);
  if (ag)
    CHECK_OK(b->c->ops->wait(b->c, ag));
  if (rest)
    CHECK_OK(b->c->ops->wait(b->c, rest));
  check_batch(b, seed, counts, displs, "started batches");
}

static void test_path(buffers *b, int shared) {
  const int n = b->c->size;
  size_t grads_bytes = (size_t)n * ELEMS * sizeof(float) * 2;
  size_t gathered_bytes = ((size_t)n * (17 * n + 6) + 8) * sizeof(int32_t);
  size_t total = grads_bytes + 2 * ELEMS * sizeof(double) + zinc_round_up(ELEMS * 2, 64) +
                 gathered_bytes;
  char *mem = NULL;
  if (shared)
    CHECK_OK(b->c->ops->alloc_shared(b->c, total, (void **)&mem));
  else
    mem = calloc(1, total);
  if (!mem)
    return;
  b->grads = (float *)mem;
  b->scalars = (double *)(mem + grads_bytes);
  b->reduced = b->scalars + ELEMS;
  b->params = (uint16_t *)(b->reduced + ELEMS);
  b->gathered = (int32_t *)((char *)b->params + zinc_round_up(ELEMS * 2, 64));
  test_mixed_batch(b, 100);
  test_long_batch(b, 200);
  for (int round = 0; round < 3; round++)
    test_started(b, 300 + (uint32_t)round * 10);
  if (shared)
    b->c->ops->free_shared(b->c, mem);
  else
    free(mem);
}

int main(void) {
  setenv("ZINC_COMM_SHM_SCRATCH", "8192", 1);
  buffers b = {.name = "shm, shared buffers"};
  CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &b.c));
  if (b.c) {
    test_path(&b, 1);
    b.name = "shm, malloc buffers";
    test_path(&b, 0);
    zinc_comm_destroy(b.c);
  }
  setenv("ZINC_COMM_MPI_SHM", "0", 1);
  setenv("ZINC_COMM_P2P_CHUNK", "1024", 1);
  b = (buffers){.name = "p2p"};
  CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &b.c));
  if (b.c) {
    test_path(&b, 0);
    zinc_comm_destroy(b.c);
  }
  return check_finish("test_comm_mpi_async");
}
