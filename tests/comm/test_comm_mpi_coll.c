/*
 * test_comm_mpi_coll.c — every collective of the mpi comm, for every element
 * type, checked element by element (bitwise) against results computed here
 * in the canonical tree order (comm_check.h):
 *   - per-rank counts 0, 1, 7, 1001 and 2500 (not divisible by 2, 3 or 4),
 *   - in place and out of place,
 *   - buffers from alloc_shared, from malloc, and mixed (odd ranks malloc),
 *   - on the shared-memory path with a 4 KiB scratch window (so malloc
 *     buffers are staged in many pieces) and on the point-to-point path
 *     forced with ZINC_COMM_MPI_SHM=0 (the multi-node fallback) with 512-byte
 *     messages. Both paths must give the same bits.
 * plus, on the shared-memory path, results of more than 4 MiB (written with
 * non-temporal stores). Run under mpirun with 1-4 ranks.
 */
#include "comm/comm_check.h"

static const size_t counts_under_test[] = {0, 1, 7, 1001, 2500};
#define MAX_COUNT 2500

enum { BUF_SHARED, BUF_MALLOC, BUF_MIXED, BUF_NMODES };
static const char *buf_mode_name[] = {"shared", "malloc", "mixed"};

typedef struct {
  zinc_comm *c;
  const char *name;
  char *arena;       /* alloc_shared: [send region | recv region]           */
  size_t region;     /* bytes of each region                                */
} path;

typedef struct {
  zinc_coll_kind kind;
  zinc_comm_op op;   /* all-reduce */
} op_case;

static const op_case op_cases[] = {
    {ZINC_COLL_REDUCE_SCATTER, ZINC_OP_SUM}, {ZINC_COLL_ALLREDUCE, ZINC_OP_SUM},
    {ZINC_COLL_ALLREDUCE, ZINC_OP_MAX},      {ZINC_COLL_ALLREDUCE, ZINC_OP_MIN},
    {ZINC_COLL_ALLGATHER, ZINC_OP_SUM},      {ZINC_COLL_ALLGATHERV, ZINC_OP_SUM},
    {ZINC_COLL_BROADCAST, ZINC_OP_SUM},
};

static int is_float(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16 || dtype == ZINC_DT_F64;
}

static void set_nan(void *buf, size_t at, int dtype) {
  switch (dtype) {
  case ZINC_F32: ((float *)buf)[at] = NAN; break;
  case ZINC_BF16: ((uint16_t *)buf)[at] = zinc_f32_to_bf16(NAN); break;
  case ZINC_F16: ((uint16_t *)buf)[at] = zinc_f32_to_f16(NAN); break;
  case ZINC_DT_F64: ((double *)buf)[at] = NAN; break;
  }
}

/* One collective on one path; returns nothing, counts failures. */
static void run_case(path *p, const op_case *oc, int dtype, size_t count, int inplace,
                     int mode, uint32_t seed) {
  zinc_comm *c = p->c;
  const int n = c->size, r = c->rank;
  const size_t es = zinc_dt_size(dtype);
  size_t counts[n], displs[n], total = 0;
  for (int k = 0; k < n; k++) { /* uneven, zero for some ranks when count is 0 */
    counts[k] = count / (size_t)(k + 1) + (size_t)(k % 2);
    displs[k] = total;
    total += counts[k] + 1; /* one-element gap that must stay untouched */
  }
  size_t send_elems = 0, recv_elems = 0;
  switch (oc->kind) {
  case ZINC_COLL_REDUCE_SCATTER: send_elems = n * count; recv_elems = count; break;
  case ZINC_COLL_ALLREDUCE: send_elems = recv_elems = count; break;
  case ZINC_COLL_ALLGATHER: send_elems = count; recv_elems = n * count; break;
  case ZINC_COLL_ALLGATHERV: send_elems = counts[r]; recv_elems = total; break;
  default: send_elems = recv_elems = count; break;
  }
  int use_shared = mode == BUF_SHARED || (mode == BUF_MIXED && r % 2 == 0);
  char *send, *recv, *heap = NULL;
  if (use_shared) {
    send = p->arena;
    recv = p->arena + p->region;
  } else {
    heap = malloc(2 * p->region);
    send = heap;
    recv = heap + p->region;
  }
  /* recv starts as a sentinel pattern; in place, send lives inside it */
  check_fill(recv, recv_elems, dtype, seed ^ 0x5e5e, -1, 0);
  if (inplace) {
    if (oc->kind == ZINC_COLL_REDUCE_SCATTER)
      recv = send + (size_t)r * count * es;
    else if (oc->kind == ZINC_COLL_ALLREDUCE)
      recv = send;
    else if (oc->kind == ZINC_COLL_ALLGATHER)
      send = recv + (size_t)r * count * es;
    else if (oc->kind == ZINC_COLL_ALLGATHERV)
      send = recv + displs[r] * es;
  }
  int root = (int)(seed % (uint32_t)n);
  int nan_rank = -1;
  size_t nan_at = 3 < count ? 3 : 0;
  if (oc->kind == ZINC_COLL_BROADCAST) {
    if (r == root)
      check_fill(recv, count, dtype, seed, r, 0);
  } else {
    check_fill(send, send_elems, dtype, seed, r, 0);
  }
  if (oc->kind == ZINC_COLL_ALLREDUCE && oc->op != ZINC_OP_SUM && is_float(dtype) && count) {
    nan_rank = n - 1; /* NaN must survive max and min */
    if (r == nan_rank)
      set_nan(send, nan_at, dtype);
  }

  zinc_coll o = {.kind = oc->kind, .send = oc->kind == ZINC_COLL_BROADCAST ? NULL : send,
                 .recv = recv, .count = oc->kind == ZINC_COLL_ALLGATHERV ? counts[r] : count,
                 .dtype = dtype, .op = oc->op, .root = root, .counts = counts,
                 .displs = displs};
  char what[160];
  snprintf(what, sizeof what, "%s: %s op %d of %zu %s, %s, %s buffers", p->name,
           oc->kind == ZINC_COLL_REDUCE_SCATTER ? "reduce-scatter"
           : oc->kind == ZINC_COLL_ALLREDUCE    ? "all-reduce"
           : oc->kind == ZINC_COLL_ALLGATHER    ? "all-gather"
           : oc->kind == ZINC_COLL_ALLGATHERV   ? "all-gatherv"
                                                : "broadcast",
           (int)oc->op, count, zinc_dt_name(dtype), inplace ? "in place" : "out of place",
           buf_mode_name[mode]);
  zinc_status st = c->ops->run(c, &o, 1);
  CHECK(st == ZINC_OK, "%s: %s", what, zinc_last_error());

  char *want = malloc(recv_elems * es + 16);
  check_fill(want, recv_elems, dtype, seed ^ 0x5e5e, -1, 0);
  for (size_t i = 0; i < count && oc->kind == ZINC_COLL_REDUCE_SCATTER; i++)
    check_expect_reduce(want, i, dtype, ZINC_OP_SUM, seed, n, (size_t)r * count + i, -1, 0);
  for (size_t i = 0; i < count && oc->kind == ZINC_COLL_ALLREDUCE; i++)
    check_expect_reduce(want, i, dtype, oc->op, seed, n, i, nan_rank, nan_at);
  if (oc->kind == ZINC_COLL_ALLGATHER)
    for (int k = 0; k < n; k++)
      check_fill(want + (size_t)k * count * es, count, dtype, seed, k, 0);
  if (oc->kind == ZINC_COLL_ALLGATHERV)
    for (int k = 0; k < n; k++)
      check_fill(want + displs[k] * es, counts[k], dtype, seed, k, 0);
  if (oc->kind == ZINC_COLL_BROADCAST)
    check_fill(want, count, dtype, seed, root, 0);
  check_equal(recv, want, recv_elems, dtype, what);
  free(want);
  free(heap);
}

static void run_path(path *p, uint32_t *seed) {
  for (size_t oi = 0; oi < sizeof op_cases / sizeof op_cases[0]; oi++)
    for (int d = 0; d < CHECK_NDTYPES; d++)
      for (size_t ci = 0; ci < sizeof counts_under_test / sizeof counts_under_test[0]; ci++)
        for (int inplace = 0; inplace < 2; inplace++)
          for (int mode = 0; mode < BUF_NMODES; mode++) {
            if (op_cases[oi].kind == ZINC_COLL_BROADCAST && inplace)
              continue; /* broadcast is always in place */
            run_case(p, &op_cases[oi], check_dtypes[d], counts_under_test[ci], inplace,
                     mode, (*seed)++);
          }
  /* a barrier on its own */
  zinc_coll b = {.kind = ZINC_COLL_BARRIER};
  CHECK_OK(p->c->ops->run(p->c, &b, 1));
}

/* Results over REDUCE_STREAM_BYTES: reduce-scatter f32 in place and
 * all-reduce bf16 out of place, from one shared allocation. */
static void run_large(path *p, uint32_t seed) {
  zinc_comm *c = p->c;
  const int n = c->size, r = c->rank;
  const size_t rs_count = 1100003, ar_count = 2200001;
  size_t bytes = (size_t)n * rs_count * 4 + 2 * ar_count * 2 + 64;
  char *mem = NULL;
  CHECK_OK(c->ops->alloc_shared(c, bytes, (void **)&mem));
  if (!mem)
    return;
  float *grads = (float *)mem;
  uint16_t *h = (uint16_t *)(mem + (size_t)n * rs_count * 4), *hout = h + ar_count;
  char *want = malloc(ar_count * 4);
  check_fill(grads, (size_t)n * rs_count, ZINC_F32, seed, r, 0);
  CHECK_OK(zinc_comm_reduce_scatter(c, grads, grads + (size_t)r * rs_count, rs_count, ZINC_F32));
  for (size_t i = 0; i < rs_count; i++)
    check_expect_reduce(want, i, ZINC_F32, ZINC_OP_SUM, seed, n, (size_t)r * rs_count + i, -1, 0);
  check_equal(grads + (size_t)r * rs_count, want, rs_count, ZINC_F32,
              "shm: large reduce-scatter f32 in place");
  check_fill(h, ar_count, ZINC_BF16, seed + 1, r, 0);
  CHECK_OK(zinc_comm_allreduce(c, h, hout, ar_count, ZINC_BF16, ZINC_OP_SUM));
  for (size_t i = 0; i < ar_count; i++)
    check_expect_reduce(want, i, ZINC_BF16, ZINC_OP_SUM, seed + 1, n, i, -1, 0);
  check_equal(hout, want, ar_count, ZINC_BF16, "shm: large all-reduce bf16");
  free(want);
  c->ops->free_shared(c, mem);
}

static zinc_status open_path(path *p, const char *name) {
  p->name = name;
  ZINC_CHECK(zinc_comm_mpi_create(NULL, 60.0, &p->c));
  p->region = (size_t)p->c->size * (MAX_COUNT + 2) * 8;
  return p->c->ops->alloc_shared(p->c, 2 * p->region, (void **)&p->arena);
}

static void close_path(path *p) {
  if (!p->c)
    return;
  p->c->ops->free_shared(p->c, p->arena);
  zinc_comm_destroy(p->c);
}

int main(void) {
  uint32_t seed = 1;
  /* Shared-memory path with a tiny scratch window: staging in pieces. */
  setenv("ZINC_COMM_SHM_SCRATCH", "4096", 1);
  path shm = {0};
  CHECK_OK(open_path(&shm, "shm"));
  if (shm.c) {
    run_path(&shm, &seed);
    run_large(&shm, 7777);
  }
  close_path(&shm);

  /* The multi-node fallback, forced; same seeds, so the same answers. */
  setenv("ZINC_COMM_MPI_SHM", "0", 1);
  setenv("ZINC_COMM_P2P_CHUNK", "512", 1);
  path p2p = {0};
  CHECK_OK(open_path(&p2p, "p2p"));
  seed = 1;
  if (p2p.c)
    run_path(&p2p, &seed);
  close_path(&p2p);
  return check_finish("test_comm_mpi_coll");
}
