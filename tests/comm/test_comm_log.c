/*
 * test_comm_log.c — the comms logger's counting in the comm layer:
 *  - wire bytes split intra-node / inter-node by the mpi comm's node table,
 *    on both paths: the table is rewritten here to fake nodes of two ranks
 *    (what a path that fakes node boundaries does), and every op's bytes
 *    per peer are checked against the rule written here: reduce-scatter
 *    sends each peer its slice, all-gather(v) this rank's part, all-reduce
 *    each peer's slice and then this rank's reduced slice, broadcast the
 *    buffer from the root (shared memory: peers read it; p2p: the root
 *    sends it), p2p barrier one-byte tokens (dissemination: one per round
 *    to the rank dist ahead), shared-memory barrier nothing;
 *    all-to-all-v sends each peer its count;
 *  - a batch's wire bytes shared among its ops by message size;
 *  - compressed collectives: an all-to-all-v standing in for a
 *    reduce-scatter (logical_bytes, codec "int4") is a reduce_scatter row
 *    of its own with the codec, its wire bytes the encoded bytes sent to
 *    the others, its logical bytes the uncompressed reduce-scatter's
 *    closed form (n-1) c es, the summary's line "reduce_scatter (int4): W
 *    on the wire for L uncompressed, R" with those figures, and prof_ops
 *    filtering by the op it stands for; a compressed all-gather (codec
 *    "int8") is an all_gather row of its own;
 *  - the node-aware path (ZINC_COMM_NODE_SIZE=2, ranks a multiple of 2 and
 *    at least 4): reduce-scatter, all-gather and all-reduce, f32 and bf16,
 *    against the closed form of hier_wire() below, and the inter-node
 *    bytes against what MPI_Isend was actually given (intercepted here:
 *    on that path only the cross-node step sends messages);
 *  - the nccl backend's estimate (the ring's bytes; all-to-all-v: what
 *    goes to the others) on a comm made by hand;
 *  - DeepSpeed's size strings.
 * Run under mpirun with 1-4 ranks.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_log.h"
#include "comm/comm_mpi_impl.h"

static int failures;
static int me;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", me, __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      failures++;                                                             \
    }                                                                         \
  } while (0)

#define OK(expr)                                                              \
  do {                                                                        \
    zinc_status st_ = (expr);                                                 \
    if (st_ != ZINC_OK) {                                                     \
      fprintf(stderr, "[rank %d] %s: %s\n", me, #expr, zinc_last_error());    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

/* MPI_Isend intercepted (PMPI): bytes sent to each world rank while
 * isend_on is set. The comm's worker thread may send: atomics. */
#define MAX_RANKS 64
static _Atomic int isend_on;
static _Atomic uint64_t isend_to[MAX_RANKS];

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
  if (isend_on && dest != MPI_PROC_NULL) {
    int size = 0, to = -1;
    MPI_Group g, w;
    PMPI_Type_size(dt, &size);
    PMPI_Comm_group(comm, &g);
    PMPI_Comm_group(MPI_COMM_WORLD, &w);
    PMPI_Group_translate_ranks(g, 1, &dest, w, &to);
    PMPI_Group_free(&g);
    PMPI_Group_free(&w);
    if (to >= 0 && to < MAX_RANKS)
      isend_to[to] += (uint64_t)count * (uint64_t)size;
  }
  return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}

static zinc_comm_log *new_log(void) {
  zinc_comm_log_opts opts = {.kinds = (1u << ZINC_COMMS_NOPS) - 1};
  zinc_comm_log *log = NULL;
  OK(zinc_comm_log_create(&opts, &log));
  return log;
}

/* All rows of op summed. */
static void totals(zinc_comm_log *log, int op, uint64_t *calls, uint64_t *intra,
                   uint64_t *inter, uint64_t *estimated) {
  zinc_comms_stat rows[64];
  for (int i = 0; i < 64; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  OK(zinc_comm_log_stats(log, rows, 64, &n));
  *calls = *intra = *inter = *estimated = 0;
  for (int i = 0; i < n && i < 64; i++)
    if (rows[i].op == op) {
      *calls += rows[i].count;
      *intra += rows[i].wire_intra;
      *inter += rows[i].wire_inter;
      *estimated += rows[i].wire_estimated;
    }
}

/* Elements rank s sends rank d in the all-to-all-v of these tests (some
 * pairs zero; at most count/(k+1) of wire_split's displs apart). */
static size_t a2a_pair(int s, int d) { return (size_t)((s * 7 + d * 3) % 5) * 37; }

static size_t slice(size_t count, int n, int k) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  return base + ((size_t)k < rem);
}

/* Each op once with nodes of `node_ranks` ranks; the bytes to every peer
 * by the rule above, summed by whether the peer shares the node. */
static void wire_split(const char *path_name, int node_ranks) {
  zinc_comm *c = NULL;
  OK(zinc_comm_mpi_create(NULL, 60, &c));
  const int n = c->size, r = c->rank;
  zinc_mpi *m = zinc_mpi_of(c);
  for (int k = 0; k < n; k++)
    m->node_of[k] = k / node_ranks * node_ranks;
  zinc_comm_log *log = new_log();
  c->log = log;
  const char *algo = n == 1 ? "self" : !strcmp(path_name, "p2p") ? "p2p" : "shm";
  CHECK(c->algo && !strcmp(c->algo, algo), "%s: algo %s, expected %s", path_name,
        c->algo ? c->algo : "NULL", algo);

  const size_t count = 1001, es = 4;
  float *send = calloc((size_t)n * count, es), *recv = calloc((size_t)n * count + n, es);
  size_t counts[n], displs[n], a2a_counts[n], a2a_rcounts[n], a2a_rdispls[n];
  for (int k = 0; k < n; k++) {
    counts[k] = count / (size_t)(k + 1);
    displs[k] = k ? displs[k - 1] + counts[k - 1] : 0;
    a2a_counts[k] = a2a_pair(r, k);
    a2a_rcounts[k] = a2a_pair(k, r);
    a2a_rdispls[k] = k ? a2a_rdispls[k - 1] + a2a_rcounts[k - 1] : 0;
  }
  OK(zinc_comm_reduce_scatter(c, send, recv, count, ZINC_F32));
  OK(zinc_comm_allgather(c, send, recv, count, ZINC_F32));
  OK(zinc_comm_allgatherv(c, send, counts[r], recv, counts, displs, ZINC_F32));
  OK(zinc_comm_allreduce(c, send, recv, count, ZINC_F32, ZINC_OP_SUM));
  OK(zinc_comm_broadcast(c, send, count, ZINC_F32, n - 1));
  OK(zinc_comm_barrier(c));
  zinc_coll a2a = {.kind = ZINC_COLL_ALLTOALLV, .send = send, .recv = recv,
                   .dtype = ZINC_F32, .counts = a2a_counts, .displs = displs,
                   .rcounts = a2a_rcounts, .rdispls = a2a_rdispls};
  OK(c->ops->run(c, &a2a, 1));

  for (int op = 0; op < ZINC_COMMS_NOPS; op++) {
    uint64_t want[2] = {0, 0};
    for (int k = 0; k < n; k++) {
      if (k == r)
        continue;
      uint64_t b = 0;
      switch (op) {
      case ZINC_COMMS_REDUCE_SCATTER:
      case ZINC_COMMS_ALL_GATHER: b = count * es; break;
      case ZINC_COMMS_ALL_GATHERV: b = counts[r] * es; break;
      case ZINC_COMMS_ALL_REDUCE: b = (slice(count, n, k) + slice(count, n, r)) * es; break;
      case ZINC_COMMS_BROADCAST: b = r == n - 1 ? count * es : 0; break;
      case ZINC_COMMS_BARRIER: break;
      case ZINC_COMMS_ALL_TO_ALL_V: b = a2a_pair(r, k) * es; break;
      }
      want[m->node_of[k] == m->node_of[r] ? 0 : 1] += b;
    }
    if (op == ZINC_COMMS_BARRIER && !strcmp(algo, "p2p"))
      for (int dist = 1; dist < n; dist *= 2) {
        int k = (r + dist) % n;
        want[m->node_of[k] == m->node_of[r] ? 0 : 1] += 1;
      }
    uint64_t calls, intra, inter, est;
    totals(log, op, &calls, &intra, &inter, &est);
    CHECK(calls == 1 && intra == want[0] && inter == want[1] && est == 0,
          "%s, nodes of %d: op %d: %llu calls, wire %llu intra + %llu inter (estimated %llu); "
          "expected 1 call, %llu + %llu", path_name, node_ranks, op,
          (unsigned long long)calls, (unsigned long long)intra, (unsigned long long)inter,
          (unsigned long long)est, (unsigned long long)want[0], (unsigned long long)want[1]);
  }
  c->log = NULL;
  zinc_comm_destroy(c);
  zinc_comm_log_destroy(log);
  free(send);
  free(recv);
}

/* A batch of two all-gathers of 100 and 300 elements: its wire bytes go
 * to the rows in proportion, (n-1) times each message. */
static void batch_shares(void) {
  zinc_comm *c = NULL;
  OK(zinc_comm_mpi_create(NULL, 60, &c));
  const int n = c->size;
  zinc_comm_log *log = new_log();
  c->log = log;
  float *buf = calloc(400 * (size_t)(n + 1), sizeof *buf);
  zinc_coll batch[2] = {
      {.kind = ZINC_COLL_ALLGATHER, .send = buf, .recv = buf + 400, .count = 100,
       .dtype = ZINC_F32},
      {.kind = ZINC_COLL_ALLGATHER, .send = buf + 100, .recv = buf + 400 + 100 * (size_t)n,
       .count = 300, .dtype = ZINC_F32}};
  OK(c->ops->run(c, batch, 2));
  zinc_comms_stat rows[4] = {ZINC_COMMS_STAT_INIT, ZINC_COMMS_STAT_INIT, ZINC_COMMS_STAT_INIT,
                             ZINC_COMMS_STAT_INIT};
  int nrows = 0;
  OK(zinc_comm_log_stats(log, rows, 4, &nrows));
  CHECK(nrows == 2 && rows[0].msg_bytes == 400 && rows[1].msg_bytes == 1200 &&
            rows[0].wire_intra == 400 * (uint64_t)(n - 1) &&
            rows[1].wire_intra == 1200 * (uint64_t)(n - 1),
        "batch of two all-gathers: %d rows, %llu B wire %llu, %llu B wire %llu", nrows,
        (unsigned long long)rows[0].msg_bytes, (unsigned long long)rows[0].wire_intra,
        (unsigned long long)rows[1].msg_bytes, (unsigned long long)rows[1].wire_intra);
  c->log = NULL;
  zinc_comm_destroy(c);
  zinc_comm_log_destroy(log);
  free(buf);
}

/* The node-aware path's wire bytes per rank, K nodes of p ranks (rank =
 * node * p + local), elements of es bytes, 16-bit data crossing nodes and
 * reduced inside them in fp32 (wes = 4; es otherwise):
 *
 *   reduce-scatter (c per rank)  intra: each node peer reads my slices of
 *                                every node, (p-1) K c wes; inter: my node
 *                                partial of node k's slice to k, (K-1) c wes
 *   all-gather (c per rank)      inter: my part to my local index on every
 *                                other node, (K-1) c es; intra: each node
 *                                peer reads the K parts I hold, (p-1) K c es
 *   all-reduce, small (C < 64 KiB, or C < K p): the flat all-reduce rule
 *                                inside the node (to node peer j: its slice
 *                                of C over p, then mine) and then between
 *                                nodes (slices of C over K), in wes
 *   all-reduce, large: a reduce-scatter and an all-gather of C / (K p) per
 *                                rank, and a small one of the last C mod Kp
 *
 * All of an all-reduce's bytes count as all-reduce. Returned in w[0]
 * intra-node, w[1] inter-node. */
static void hier_wire(int kind, size_t count, int dtype, int K, int p, int r, uint64_t w[2]) {
  const uint64_t es = zinc_dt_size(dtype);
  const uint64_t wes = dtype == ZINC_BF16 || dtype == ZINC_F16 ? 4 : es;
  const int node = r / p, local = r % p, n = K * p;
  w[0] = w[1] = 0;
  if (kind == ZINC_COLL_REDUCE_SCATTER) {
    w[0] = (uint64_t)(p - 1) * K * count * wes;
    w[1] = (uint64_t)(K - 1) * count * wes;
  } else if (kind == ZINC_COLL_ALLGATHER) {
    w[0] = (uint64_t)(p - 1) * K * count * es;
    w[1] = (uint64_t)(K - 1) * count * es;
  } else if (count * es >= (64u << 10) && count / (size_t)n > 0) {
    uint64_t a[2], b[2], c[2];
    hier_wire(ZINC_COLL_REDUCE_SCATTER, count / (size_t)n, dtype, K, p, r, a);
    hier_wire(ZINC_COLL_ALLGATHER, count / (size_t)n, dtype, K, p, r, b);
    hier_wire(ZINC_COLL_ALLREDUCE, count % (size_t)n, dtype, K, p, r, c);
    w[0] = a[0] + b[0] + c[0];
    w[1] = a[1] + b[1] + c[1];
  } else {
    for (int j = 0; j < p; j++)
      if (j != local)
        w[0] += (slice(count, p, j) + slice(count, p, local)) * wes;
    for (int k = 0; k < K; k++)
      if (k != node)
        w[1] += (slice(count, K, k) + slice(count, K, node)) * wes;
  }
}

/* One op at a time on a node-aware comm (nodes of two ranks, faked). */
static void hier_split(void) {
  setenv("ZINC_COMM_NODE_SIZE", "2", 1);
  zinc_comm *c = NULL;
  OK(zinc_comm_mpi_create(NULL, 60, &c));
  unsetenv("ZINC_COMM_NODE_SIZE");
  const int n = c->size, r = c->rank, p = 2, K = n / 2;
  CHECK(c->algo && !strcmp(c->algo, "hier"), "nodes of 2 at %d ranks: algo %s, expected hier",
        n, c->algo ? c->algo : "NULL");
  zinc_comm_log *log = new_log();
  c->log = log;
  const size_t big = 20003; /* 80 KB of f32: split; 40 KB of bf16: not */
  float *send = calloc((size_t)n * big, 4), *recv = calloc((size_t)n * big, 4);
  const struct {
    int kind, op;
    size_t count;
  } cases[] = {{ZINC_COLL_REDUCE_SCATTER, ZINC_COMMS_REDUCE_SCATTER, 1001},
               {ZINC_COLL_ALLGATHER, ZINC_COMMS_ALL_GATHER, 1001},
               {ZINC_COLL_ALLREDUCE, ZINC_COMMS_ALL_REDUCE, 1001},
               {ZINC_COLL_ALLREDUCE, ZINC_COMMS_ALL_REDUCE, 3},
               {ZINC_COLL_ALLREDUCE, ZINC_COMMS_ALL_REDUCE, big}};
  const int dtypes[2] = {ZINC_F32, ZINC_BF16};
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const size_t count = cases[i].count;
      zinc_comm_log_reset(log);
      for (int k = 0; k < MAX_RANKS; k++)
        isend_to[k] = 0;
      isend_on = 1;
      if (cases[i].kind == ZINC_COLL_REDUCE_SCATTER)
        OK(zinc_comm_reduce_scatter(c, send, recv, count, dtypes[d]));
      else if (cases[i].kind == ZINC_COLL_ALLGATHER)
        OK(zinc_comm_allgather(c, send, recv, count, dtypes[d]));
      else
        OK(zinc_comm_allreduce(c, send, recv, count, dtypes[d], ZINC_OP_SUM));
      isend_on = 0;
      uint64_t sent[2] = {0, 0}; /* messages to my node, to other nodes */
      for (int k = 0; k < n && k < MAX_RANKS; k++)
        sent[k / p == r / p ? 0 : 1] += isend_to[k];
      uint64_t want[2], calls, intra, inter, est;
      hier_wire(cases[i].kind, count, dtypes[d], K, p, r, want);
      totals(log, cases[i].op, &calls, &intra, &inter, &est);
      CHECK(calls == 1 && intra == want[0] && inter == want[1] && est == 0,
            "hier %d x %d, %s op %d of %zu: %llu calls, wire %llu intra + %llu inter; "
            "expected 1 call, %llu + %llu", K, p, dtypes[d] == ZINC_F32 ? "f32" : "bf16",
            cases[i].op, count, (unsigned long long)calls, (unsigned long long)intra,
            (unsigned long long)inter, (unsigned long long)want[0],
            (unsigned long long)want[1]);
      CHECK(sent[0] == 0 && sent[1] == inter,
            "hier %d x %d, %s op %d of %zu: MPI_Isend sent %llu bytes inside the node and "
            "%llu across nodes; the logger counted %llu across", K, p,
            dtypes[d] == ZINC_F32 ? "f32" : "bf16", cases[i].op, count,
            (unsigned long long)sent[0], (unsigned long long)sent[1], (unsigned long long)inter);
      for (int op = 0; op < ZINC_COMMS_NOPS; op++) /* nothing counted as another op */
        if (op != cases[i].op) {
          totals(log, op, &calls, &intra, &inter, &est);
          CHECK(calls == 0, "hier: op %d counted under op %d", cases[i].op, op);
        }
    }
  c->log = NULL;
  zinc_comm_destroy(c);
  zinc_comm_log_destroy(log);
  free(send);
  free(recv);
}

/* nccl cannot see its traffic: the ring's bytes per rank, estimated. A
 * comm of 4 ranks made by hand (nothing runs on it). */
static void nccl_estimate(void) {
  static const zinc_comm_ops fake_ops = {.name = "nccl"};
  zinc_comm_log *log = new_log();
  const uint64_t M = 4000; /* 1000 f32 */
  size_t counts[4] = {1000, 0, 500, 250}, displs[4] = {0, 1000, 1000, 1500};
  for (int r = 0; r < 4; r++) {
    zinc_comm c = {.ops = &fake_ops, .rank = r, .size = 4, .log = log, .algo = "nccl"};
    zinc_coll ops[5] = {
        {.kind = ZINC_COLL_ALLREDUCE, .count = 1000, .dtype = ZINC_F32},
        {.kind = ZINC_COLL_REDUCE_SCATTER, .count = 250, .dtype = ZINC_F32},
        {.kind = ZINC_COLL_ALLGATHER, .count = 1000, .dtype = ZINC_F32},
        {.kind = ZINC_COLL_ALLGATHERV, .count = counts[r], .dtype = ZINC_F32,
         .counts = counts, .displs = displs},
        {.kind = ZINC_COLL_BROADCAST, .count = 1000, .dtype = ZINC_F32, .root = 2}};
    zinc_comm_log_reset(log);
    zinc_comm_log_batch(&c, ops, 5, 1e-3, NULL);
    /* ring: all-reduce 2(n-1)/n M; reduce-scatter (n-1)/n of the input;
     * all-gather (n-1) parts; all-gatherv every part but the next rank's;
     * broadcast the buffer from every rank but the ring's last (root-1) */
    uint64_t want[5] = {2 * 3 * M / 4, 3 * M / 4, 3 * M,
                        (1750 - counts[(r + 1) % 4]) * 4, r == 1 ? 0 : M};
    int kinds[5] = {ZINC_COMMS_ALL_REDUCE, ZINC_COMMS_REDUCE_SCATTER, ZINC_COMMS_ALL_GATHER,
                    ZINC_COMMS_ALL_GATHERV, ZINC_COMMS_BROADCAST};
    for (int i = 0; i < 5; i++) {
      uint64_t calls, intra, inter, est;
      totals(log, kinds[i], &calls, &intra, &inter, &est);
      CHECK(calls == 1 && est == want[i] &&
                intra == 0 && inter == 0,
            "nccl rank %d op %d: estimated %llu, expected %llu (measured %llu + %llu)", r,
            kinds[i], (unsigned long long)est, (unsigned long long)want[i],
            (unsigned long long)intra, (unsigned long long)inter);
    }
  }
  /* all-to-all-v: the bytes to the other ranks (counts copied as nccl's
   * requests copy them: zinc_comm_log_copy) */
  size_t a2a_counts[4] = {10, 20, 0, 40};
  for (int r = 0; r < 4; r++) {
    zinc_comm c = {.ops = &fake_ops, .rank = r, .size = 4, .log = log, .algo = "nccl"};
    zinc_coll o = {.kind = ZINC_COLL_ALLTOALLV, .dtype = ZINC_DT_U8, .counts = a2a_counts};
    zinc_coll *copy = NULL;
    OK(zinc_comm_log_copy(&c, &o, 1, &copy));
    zinc_comm_log_reset(log);
    zinc_comm_log_batch(&c, copy, 1, 1e-3, NULL);
    free(copy);
    uint64_t calls, intra, inter, est;
    totals(log, ZINC_COMMS_ALL_TO_ALL_V, &calls, &intra, &inter, &est);
    uint64_t want = 70 - a2a_counts[r];
    CHECK(calls == 1 && est == want, "nccl rank %d all-to-all-v: estimated %llu, expected %llu",
          r, (unsigned long long)est, (unsigned long long)want);
  }
  zinc_comm_log_destroy(log);
}

/* A compressed reduce-scatter as the engine issues it: an all-to-all-v of
 * each slice's encoded bytes (int4 blocks of 32: 16 bytes of nibbles and a
 * 4-byte scale per block), logical_bytes the uncompressed reduce-scatter's
 * (n-1) c es, batched with a plain reduce-scatter of the same size. */
static void compressed_rows(const char *path_name) {
  zinc_comm *c = NULL;
  OK(zinc_comm_mpi_create(NULL, 60, &c));
  const int n = c->size;
  const size_t count = 4096, es = 4, enc = count / 32 * (16 + 4); /* encoded slice bytes */
  zinc_comm_log *log = new_log();
  c->log = log;
  float *send = calloc((size_t)n * count, es), *recv = calloc(count, es);
  uint8_t *esend = calloc((size_t)n * enc, 1), *erecv = calloc((size_t)n * enc, 1);
  size_t counts[n], displs[n];
  for (int k = 0; k < n; k++) {
    counts[k] = enc;
    displs[k] = (size_t)k * enc;
  }
  const uint64_t logical = (uint64_t)(n - 1) * count * es; /* ring_bytes of the reduce-scatter */
  zinc_coll batch[2] = {
      {.kind = ZINC_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
       .dtype = ZINC_F32},
      {.kind = ZINC_COLL_ALLTOALLV, .send = esend, .recv = erecv, .dtype = ZINC_DT_U8,
       .counts = counts, .displs = displs, .rcounts = counts, .rdispls = displs,
       .logical_bytes = logical, .codec_name = "int4",
       .logical_kind = ZINC_COLL_REDUCE_SCATTER}};
  OK(c->ops->run(c, batch, 2));
  zinc_comms_stat rows[8];
  for (int i = 0; i < 8; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int nrows = 0;
  OK(zinc_comm_log_stats(log, rows, 8, &nrows));
  const uint64_t wire = (uint64_t)(n - 1) * enc; /* the encoded slices to the others */
  /* plain first, then the compressed row of the same op */
  CHECK(nrows == 2 && rows[0].op == ZINC_COMMS_REDUCE_SCATTER && !rows[0].codec &&
            rows[0].logical_bytes == 0 &&
            rows[0].wire_intra + rows[0].wire_inter == (uint64_t)(n - 1) * count * es,
        "%s: plain reduce-scatter row: %d rows, op %d codec %s logical %llu wire %llu", path_name,
        nrows, rows[0].op, rows[0].codec ? rows[0].codec : "NULL",
        (unsigned long long)rows[0].logical_bytes,
        (unsigned long long)(rows[0].wire_intra + rows[0].wire_inter));
  CHECK(nrows == 2 && rows[1].op == ZINC_COMMS_REDUCE_SCATTER && rows[1].codec &&
            !strcmp(rows[1].codec, "int4") && !strcmp(rows[1].name, "reduce_scatter") &&
            rows[1].count == 1 && rows[1].msg_bytes == (uint64_t)n * enc &&
            rows[1].logical_bytes == logical && rows[1].wire_intra + rows[1].wire_inter == wire,
        "%s: compressed row: op %d codec %s msg %llu logical %llu (want %llu) wire %llu "
        "(want %llu)", path_name, rows[1].op, rows[1].codec ? rows[1].codec : "NULL",
        (unsigned long long)rows[1].msg_bytes, (unsigned long long)rows[1].logical_bytes,
        (unsigned long long)logical,
        (unsigned long long)(rows[1].wire_intra + rows[1].wire_inter),
        (unsigned long long)wire);
  char *text = NULL;
  OK(zinc_comm_log_summary(log, &text));
  if (n > 1) {
    char w[32], l[32], line[160];
    zinc_comm_log_size_str(wire, w, sizeof w);
    zinc_comm_log_size_str(logical, l, sizeof l);
    snprintf(line, sizeof line, "\nreduce_scatter (int4): %s on the wire for %s uncompressed, "
             "%.1fx (", w, l, (double)logical / (double)wire);
    CHECK(strstr(text, line) && strstr(text, "Uncompressed") && strstr(text, "\nreduce_scatter (int4)\n"),
          "%s: the summary lacks \"%s\":\n%s", path_name, line + 1, text);
  }
  free(text);
  /* a compressed kind other than all-to-all-v stands for itself: an
   * all-gather of int8 blocks (a 4-byte scale per 32), logical bytes the
   * plain f32 all-gather's (n-1) c es */
  zinc_comm_log_reset(log);
  const size_t genc = count / 32 * (32 + 4);
  uint8_t *gsend = calloc(genc, 1), *grecv = calloc((size_t)n * genc, 1);
  zinc_coll gather = {.kind = ZINC_COLL_ALLGATHER, .send = gsend, .recv = grecv, .count = genc,
                      .dtype = ZINC_DT_U8, .logical_bytes = (uint64_t)(n - 1) * count * es,
                      .codec_name = "int8"};
  OK(c->ops->run(c, &gather, 1));
  OK(zinc_comm_log_stats(log, rows, 8, &nrows));
  CHECK(nrows == 1 && rows[0].op == ZINC_COMMS_ALL_GATHER && rows[0].codec &&
            !strcmp(rows[0].codec, "int8") && rows[0].msg_bytes == genc &&
            rows[0].logical_bytes == (uint64_t)(n - 1) * count * es &&
            rows[0].wire_intra + rows[0].wire_inter == (uint64_t)(n - 1) * genc,
        "%s: compressed all-gather: %d rows, op %d codec %s msg %llu logical %llu wire %llu",
        path_name, nrows, rows[0].op, rows[0].codec ? rows[0].codec : "NULL",
        (unsigned long long)rows[0].msg_bytes, (unsigned long long)rows[0].logical_bytes,
        (unsigned long long)(rows[0].wire_intra + rows[0].wire_inter));
  free(gsend);
  free(grecv);
  /* prof_ops: the compressed row counts as the op it stands for */
  zinc_comm_log_opts only = {.kinds = 1u << ZINC_COMMS_ALL_TO_ALL_V};
  zinc_comm_log *other = NULL;
  OK(zinc_comm_log_create(&only, &other));
  c->log = other;
  OK(c->ops->run(c, &batch[1], 1));
  OK(zinc_comm_log_stats(other, rows, 8, &nrows));
  CHECK(nrows == 0, "%s: prof_ops all_to_all_v counted the compressed reduce-scatter", path_name);
  c->log = NULL;
  zinc_comm_log_destroy(other);
  zinc_comm_destroy(c);
  zinc_comm_log_destroy(log);
  free(send);
  free(recv);
  free(esend);
  free(erecv);
}

static void size_strings(void) {
  static const struct {
    uint64_t bytes;
    const char *text;
  } cases[] = {{0, "0B"},           {8, "8.0 B"},           {1023, "1023.0 B"},
               {1024, "1.0 KB"},    {1536, "1.5 KB"},       {1157, "1.13 KB"},
               {711838679, "678.86 MB"}, {3ull << 30, "3.0 GB"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[32];
    zinc_comm_log_size_str(cases[i].bytes, buf, sizeof buf);
    CHECK(!strcmp(buf, cases[i].text), "%llu bytes: \"%s\", expected \"%s\"",
          (unsigned long long)cases[i].bytes, buf, cases[i].text);
  }
}

int main(void) {
  size_strings();
  nccl_estimate();
  zinc_comm *probe = NULL;
  OK(zinc_comm_mpi_create(NULL, 60, &probe));
  me = probe->rank;
  const int world = probe->size;
  zinc_comm_destroy(probe);
  setenv("ZINC_COMM_SHM_SCRATCH", "4096", 1); /* malloc buffers staged in pieces */
  wire_split("shm", 2);
  wire_split("shm", 1);
  batch_shares();
  compressed_rows("shm");
  if (world >= 4 && world % 2 == 0)
    hier_split();
  setenv("ZINC_COMM_MPI_SHM", "0", 1);
  setenv("ZINC_COMM_P2P_CHUNK", "512", 1);
  wire_split("p2p", 2);
  wire_split("p2p", 3);
  batch_shares();
  compressed_rows("p2p");
  if (me == 0)
    printf("comm log: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
