/*
 * test_comm_mpi_hier.c — the mpi comm's node-aware path and the layout
 * independence of its results. One process creates one comm per node
 * layout, faked on this machine with ZINC_COMM_NODE_SIZE=k (consecutive
 * blocks of k ranks count as nodes):
 *   - k >= size: one node, the shared-memory path;
 *   - k a power of two dividing size, 1 < k < size: the node-aware path;
 *   - k = 1, or blocks of unequal size (3 ranks by 2, 6 by 4): the flat
 *     point-to-point path;
 *   - and ZINC_COMM_MPI_SHM=0: the flat path too.
 * The path each comm took is checked, then the same collectives run on
 * every layout: every kind, f32/bf16/f16/f64/i32/i64/u8, counts that do not
 * divide evenly (and all-reduces large enough to be split into
 * reduce-scatter + all-gather), in place and out of place, malloc and
 * alloc_shared buffers, single ops and one batch of many started async.
 * Each result is checked bitwise against the canonical tree order computed
 * here (comm_check.h), and the results of all layouts are compared with
 * each other byte for byte. Run under mpirun with 3, 4, 6 and 8 ranks.
 */
#include "comm/comm_check.h"
#include "comm/comm_mpi_impl.h"

typedef struct {
  int node_size;     /* ZINC_COMM_NODE_SIZE, or 0 for ZINC_COMM_MPI_SHM=0 */
  char name[48];
} layout;

typedef struct {
  zinc_coll_kind kind;
  zinc_comm_op op;
  int dtype;
  size_t count;
  int inplace;
  int shared;        /* buffers from alloc_shared */
} case_t;

/* Results of one layout, appended in case order. */
typedef struct {
  char *bytes;
  size_t used, cap;
} transcript;

static void record(transcript *t, const void *p, size_t n) {
  if (t->used + n > t->cap) {
    t->cap = (t->used + n) * 2;
    t->bytes = realloc(t->bytes, t->cap);
  }
  memcpy(t->bytes + t->used, p, n);
  t->used += n;
}

static int is_float(int dtype) {
  return dtype == ZINC_F32 || dtype == ZINC_BF16 || dtype == ZINC_F16 || dtype == ZINC_DT_F64;
}

/* One prepared collective: buffers filled, the op described, the expected
 * recv computed. */
typedef struct {
  case_t cs;
  zinc_coll o;
  size_t counts[8], displs[8];
  char *heap, *want;
  size_t recv_elems;
  uint32_t seed;
} prepared;

static void prepare(zinc_comm *c, prepared *p, const case_t *cs, uint32_t seed, char *arena) {
  const int n = c->size, r = c->rank;
  const size_t es = zinc_dt_size(cs->dtype), count = cs->count;
  memset(p, 0, sizeof *p);
  p->cs = *cs;
  p->seed = seed;
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    p->counts[k] = count / (size_t)(k + 1) + (size_t)(k % 2);
    p->displs[k] = total;
    total += p->counts[k] + 1;
  }
  size_t send_elems, recv_elems;
  switch (cs->kind) {
  case ZINC_COLL_REDUCE_SCATTER: send_elems = n * count; recv_elems = count; break;
  case ZINC_COLL_ALLGATHER: send_elems = count; recv_elems = n * count; break;
  case ZINC_COLL_ALLGATHERV: send_elems = p->counts[r]; recv_elems = total; break;
  default: send_elems = recv_elems = count; break;
  }
  size_t region = ((size_t)n * count + total + 64) * es;
  char *send, *recv;
  if (cs->shared) {
    send = arena;
    recv = arena + region;
  } else {
    p->heap = malloc(2 * region);
    send = p->heap;
    recv = p->heap + region;
  }
  check_fill(recv, recv_elems, cs->dtype, seed ^ 0x5e5e, -1, 0);
  if (cs->inplace) {
    if (cs->kind == ZINC_COLL_REDUCE_SCATTER)
      recv = send + (size_t)r * count * es;
    else if (cs->kind == ZINC_COLL_ALLREDUCE)
      recv = send;
    else if (cs->kind == ZINC_COLL_ALLGATHER)
      send = recv + (size_t)r * count * es;
    else if (cs->kind == ZINC_COLL_ALLGATHERV)
      send = recv + p->displs[r] * es;
  }
  int root = (int)(seed % (uint32_t)n), nan_rank = -1;
  size_t nan_at = 3 < count ? 3 : 0;
  if (cs->kind == ZINC_COLL_BROADCAST) {
    if (r == root)
      check_fill(recv, count, cs->dtype, seed, r, 0);
  } else {
    check_fill(send, send_elems, cs->dtype, seed, r, 0);
  }
  if (cs->kind == ZINC_COLL_ALLREDUCE && cs->op != ZINC_OP_SUM && is_float(cs->dtype) && count) {
    nan_rank = n - 1; /* NaN must survive max and min */
    if (r == nan_rank) {
      union { float f; double d; uint16_t h; } nan;
      nan.f = NAN;
      if (cs->dtype == ZINC_DT_F64)
        nan.d = NAN;
      else if (cs->dtype != ZINC_F32)
        nan.h = cs->dtype == ZINC_BF16 ? zinc_f32_to_bf16(NAN) : zinc_f32_to_f16(NAN);
      memcpy(send + nan_at * es, &nan, es);
    }
  }
  p->o = (zinc_coll){.kind = cs->kind,
                     .send = cs->kind == ZINC_COLL_BROADCAST ? NULL : send,
                     .recv = recv,
                     .count = cs->kind == ZINC_COLL_ALLGATHERV ? p->counts[r] : count,
                     .dtype = cs->dtype, .op = cs->op, .root = root, .counts = p->counts,
                     .displs = p->displs};
  p->recv_elems = cs->kind == ZINC_COLL_BARRIER ? 0 : recv_elems;
  p->want = malloc(recv_elems * es + 16);
  check_fill(p->want, recv_elems, cs->dtype, seed ^ 0x5e5e, -1, 0);
  for (size_t i = 0; i < count && cs->kind == ZINC_COLL_REDUCE_SCATTER; i++)
    check_expect_reduce(p->want, i, cs->dtype, ZINC_OP_SUM, seed, n, (size_t)r * count + i, -1,
                        0);
  for (size_t i = 0; i < count && cs->kind == ZINC_COLL_ALLREDUCE; i++)
    check_expect_reduce(p->want, i, cs->dtype, cs->op, seed, n, i, nan_rank, nan_at);
  if (cs->kind == ZINC_COLL_ALLGATHER)
    for (int k = 0; k < n; k++)
      check_fill(p->want + (size_t)k * count * es, count, cs->dtype, seed, k, 0);
  if (cs->kind == ZINC_COLL_ALLGATHERV)
    for (int k = 0; k < n; k++)
      check_fill(p->want + p->displs[k] * es, p->counts[k], cs->dtype, seed, k, 0);
  if (cs->kind == ZINC_COLL_BROADCAST)
    check_fill(p->want, count, cs->dtype, seed, root, 0);
}

static void verify(prepared *p, const char *layout_name, transcript *t) {
  char what[200];
  snprintf(what, sizeof what, "%s: %s op %d of %zu %s, %s, %s", layout_name,
           zinc_coll_name(p->cs.kind), (int)p->cs.op, p->cs.count, zinc_dt_name(p->cs.dtype),
           p->cs.inplace ? "in place" : "out of place", p->cs.shared ? "shared" : "malloc");
  check_equal(p->o.recv, p->want, p->recv_elems, p->cs.dtype, what);
  record(t, p->o.recv, p->recv_elems * zinc_dt_size(p->cs.dtype));
  free(p->want);
  free(p->heap);
}

static const size_t counts_under_test[] = {1, 7, 1001, 20011};

/* Every kind x dtype x count x in place, one op per run; then one batch of
 * many ops (disjoint buffers) started and waited for. */
static void run_layout(zinc_comm *c, const char *name, transcript *t) {
  const int n = c->size;
  uint32_t seed = 1;
  size_t arena_bytes = ((size_t)(n + 4) * 20011 + 64) * 8 * 2 + 4096;
  char *arena = NULL;
  CHECK_OK(c->ops->alloc_shared(c, arena_bytes, (void **)&arena));
  static const struct { zinc_coll_kind kind; zinc_comm_op op; } kinds[] = {
      {ZINC_COLL_REDUCE_SCATTER, ZINC_OP_SUM}, {ZINC_COLL_ALLREDUCE, ZINC_OP_SUM},
      {ZINC_COLL_ALLREDUCE, ZINC_OP_MAX},      {ZINC_COLL_ALLREDUCE, ZINC_OP_MIN},
      {ZINC_COLL_ALLGATHER, ZINC_OP_SUM},      {ZINC_COLL_ALLGATHERV, ZINC_OP_SUM},
      {ZINC_COLL_BROADCAST, ZINC_OP_SUM},
  };
  int which = 0;
  for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
    for (int d = 0; d < CHECK_NDTYPES; d++)
      for (size_t ci = 0; ci < sizeof counts_under_test / sizeof counts_under_test[0]; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
          if (kinds[ki].kind == ZINC_COLL_BROADCAST && inplace)
            continue;
          if (kinds[ki].kind == ZINC_COLL_REDUCE_SCATTER && counts_under_test[ci] > 1001 &&
              check_dtypes[d] >= ZINC_DT_F64)
            continue; /* keep the run short: big sums are covered by f32/bf16/f16 */
          case_t cs = {kinds[ki].kind, kinds[ki].op, check_dtypes[d], counts_under_test[ci],
                       inplace, (which++ % 3) == 0 && arena != NULL};
          prepared p;
          prepare(c, &p, &cs, seed++, arena);
          zinc_status st = c->ops->run(c, &p.o, 1);
          CHECK(st == ZINC_OK, "%s: run: %s", name, zinc_last_error());
          verify(&p, name, t);
        }

  /* One batch, started: each op in its own malloc buffers. */
  enum { NBATCH = 9 };
  static const case_t batch[NBATCH] = {
      {ZINC_COLL_REDUCE_SCATTER, ZINC_OP_SUM, ZINC_F32, 5003, 0, 0},
      {ZINC_COLL_REDUCE_SCATTER, ZINC_OP_SUM, ZINC_BF16, 777, 1, 0},
      {ZINC_COLL_ALLGATHER, ZINC_OP_SUM, ZINC_F16, 1001, 1, 0},
      {ZINC_COLL_ALLREDUCE, ZINC_OP_SUM, ZINC_F32, 40009, 1, 0},
      {ZINC_COLL_ALLREDUCE, ZINC_OP_SUM, ZINC_BF16, 50021, 0, 0},
      {ZINC_COLL_ALLREDUCE, ZINC_OP_MAX, ZINC_F32, 13, 0, 0},
      {ZINC_COLL_ALLGATHERV, ZINC_OP_SUM, ZINC_DT_F64, 99, 0, 0},
      {ZINC_COLL_BROADCAST, ZINC_OP_SUM, ZINC_DT_I32, 17, 0, 0},
      {ZINC_COLL_BARRIER, ZINC_OP_SUM, ZINC_F32, 0, 0, 0},
  };
  prepared ps[NBATCH];
  zinc_coll ops[NBATCH];
  for (int j = 0; j < NBATCH; j++) {
    prepare(c, &ps[j], &batch[j], seed++, NULL);
    ops[j] = ps[j].o;
  }
  zinc_comm_req *req = NULL;
  CHECK_OK(c->ops->start(c, ops, NBATCH, &req));
  if (req)
    CHECK_OK(c->ops->wait(c, req));
  for (int j = 0; j < NBATCH; j++)
    verify(&ps[j], name, t);
  c->ops->free_shared(c, arena);
}

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

int main(void) {
  int provided = 0, n = 0, r = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (n < 3) {
    if (r == 0)
      fprintf(stderr, "SKIPPED: test_comm_mpi_hier needs at least 3 ranks (got %d)\n", n);
    MPI_Finalize();
    return 77;
  }
  setenv("ZINC_COMM_SHM_SCRATCH", "65536", 1); /* staging in several pieces */
  setenv("ZINC_COMM_P2P_CHUNK", "4096", 1);
  layout layouts[16];
  int nl = 0;
  for (int k = n; k >= 1; k--) {
    /* one node, 1, every power of two (dividing: node-aware; not: blocks
     * of unequal size), every other divisor (not a power of two) */
    if (k == n || k == 1 || is_pow2(k) || n % k == 0) {
      layouts[nl].node_size = k;
      snprintf(layouts[nl].name, sizeof layouts[nl].name, "node size %d", k);
      nl++;
    }
  }
  layouts[nl].node_size = 0;
  snprintf(layouts[nl].name, sizeof layouts[nl].name, "ZINC_COMM_MPI_SHM=0");
  nl++;

  transcript ts[16] = {{0}};
  for (int l = 0; l < nl; l++) {
    char value[16];
    snprintf(value, sizeof value, "%d", layouts[l].node_size);
    if (layouts[l].node_size) {
      setenv("ZINC_COMM_NODE_SIZE", value, 1);
      unsetenv("ZINC_COMM_MPI_SHM");
    } else {
      unsetenv("ZINC_COMM_NODE_SIZE");
      setenv("ZINC_COMM_MPI_SHM", "0", 1);
    }
    zinc_comm *c = NULL;
    CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &c));
    if (!c)
      continue;
    int k = layouts[l].node_size;
    int want_shm = k >= n, want_hier = k > 1 && k < n && n % k == 0 && is_pow2(k);
    zinc_mpi *m = zinc_mpi_of(c);
    CHECK(m->use_shm == want_shm && m->use_hier == want_hier,
          "%s at %d ranks: path shm=%d hier=%d, expected shm=%d hier=%d", layouts[l].name, n,
          m->use_shm, m->use_hier, want_shm, want_hier);
    if (r == 0)
      fprintf(stderr, "%s: %s path\n", layouts[l].name,
              m->use_shm ? "shared-memory" : m->use_hier ? "node-aware" : "point-to-point");
    run_layout(c, layouts[l].name, &ts[l]);
    zinc_comm_destroy(c);
  }
  for (int l = 1; l < nl; l++) {
    char what[160];
    snprintf(what, sizeof what, "results of %s vs %s", layouts[l].name, layouts[0].name);
    CHECK(ts[l].used == ts[0].used, "%s: %zu vs %zu bytes", what, ts[l].used, ts[0].used);
    if (ts[l].used == ts[0].used)
      check_equal(ts[l].bytes, ts[0].bytes, ts[0].used, ZINC_DT_U8, what);
  }
  for (int l = 0; l < nl; l++)
    free(ts[l].bytes);
  int rc = check_finish("test_comm_mpi_hier");
  MPI_Finalize();
  return rc;
}
