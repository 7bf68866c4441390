/*
 * test_comms_logger.c — the comms logger's byte counts against the
 * closed-form traffic of each ZeRO stage, computed here from the tiny
 * model's parameter counts (never from the engine's plan).
 *
 * For stages 0-3 in f32 and in bf16 (and 2-3 again with overlap_comm,
 * whose reductions the comm's worker thread runs) the engine trains STEPS steps (accumulation 1)
 * with "comms_logger" enabled; the counters are reset after the build, so they
 * hold exactly the steps' traffic. Per step, with n data-parallel ranks
 * and the model's units (below):
 *
 *   reduce-scatter  every unit's gradient, message = the unit (n chunks);
 *   all-gather      stage 0: every unit's reduced gradient chunk (zinc's
 *                   all-reduce is reduce-scatter + all-gather);
 *                   stages 1-2: every unit's updated parameter chunk;
 *                   stage 3: a module's units at each gather (below);
 *                   stages 1-3: also the gradient norm's partial sums,
 *                   two exact sums per rank (a message of
 *                   ZINC_NORM_SUMS_BYTES, N = 560 bytes: engine/step.h;
 *                   never a chunk's size, a multiple of 64 bytes);
 *   all-reduce      only the engine's failure agreements, 4 i64 (32 B).
 *
 * Stage 3 gathers: the first micro-batch records the module order, so it
 * gathers at every fetch (each module twice: forward and backward). After
 * it, a module released in the forward pass keeps its copy when the
 * elements gathered before its next fetch are at most
 * stage3_max_reuse_distance (R): those are every later module twice
 * (their forward fetch and their backward fetch), so module m is gathered
 * 1 + (2 * sum_{j>m} numel_j > R) times per step. With R = 0 that is
 * twice for every module but the last. No segment is persistent
 * (stage3_param_persistence_threshold 0).
 *
 * The units: a module's parameters (one f32 segment) are laid out each
 * starting at a multiple of 32 elements, the segment padded to a multiple
 * of 32 n, and cut into units of at most unit_max = floor(B / 32n) * 32n
 * elements (B = reduce_bucket_size); a unit's chunk is its n-th part.
 *
 * Wire bytes each rank sends, for K nodes of p ranks (n = K p, rank =
 * node * p + local; the flat paths on one node are K = 1, p = n). The
 * owner of bytes counts them: a message's sender, or inside a node on
 * shared memory the rank whose buffer a peer reads. With c the elements
 * per rank of a reduce-scatter or all-gather (a unit's chunk, U / n), es
 * the element's bytes (4 for f32, 2 for bf16) and wes those of the
 * node-aware path's partials (4: bf16 is widened to fp32 before the node
 * step and its partials cross nodes in fp32; es on the flat paths):
 *
 *   reduce-scatter  node-aware: each node peer reads my slices of every
 *                   node, intra (p-1) K c wes; my node partial of node k's
 *                   slice goes to my local index on node k, inter
 *                   (K-1) c wes. Flat: every peer's slice, intra (n-1) c es.
 *   all-gather      node-aware: my part to my local index on every other
 *                   node, inter (K-1) c es; each node peer reads the K parts
 *                   I then hold, intra (p-1) K c es. Flat: (n-1) c es.
 *   all-reduce      C = 4 i64 (under 64 KiB: not split): inside the node
 *                   the flat rule, to node peer j its slice of C over p and
 *                   then mine; then between nodes the same over K slices,
 *                   to my local index on node k: intra sum_{j != local}
 *                   (s(C,p,j) + s(C,p,local)) 8, inter sum_{k != node}
 *                   (s(C,K,k) + s(C,K,node)) 8, s(C,m,i) = C/m + (i < C%m).
 *
 * Per step, summed over a stage's collectives (chunks = sum of U/n wes over
 * units, G the stage's gathered chunk bytes above, STEPS steps):
 *
 *                      intra-node            inter-node
 *   reduce-scatter     (p-1) K chunks        (K-1) chunks
 *   all-gather chunks  (p-1) K G             (K-1) G
 *   all-gather norms   (p-1) K N             (K-1) N       (stages 1-3)
 *   all-reduce         the rule above, per agreement
 *
 * At 2 nodes x 2 ranks (K = p = 2): reduce-scatter 2 chunks + 1 chunks,
 * all-gather 2 G + 1 G, norms 2 N + N, an agreement 32 + 32 (flat at 4
 * ranks on one node: 3 chunks, 3 G, 3 N, 48 + 0). Across nodes a rank's
 * reduce-scatter or all-gather sends (K-1) c, where a flat path over the
 * same nodes would send (K-1) p c.
 *
 * The layout: K = 1 and p = n, or p = ZINC_COMM_NODE_SIZE (nodes faked,
 * ranks a multiple of it), or `--nodes K` for real nodes (the emulated
 * cluster). The node-aware path (algo "hier") runs when K > 1.
 * `--stage S` checks that stage only (f32 and bf16, without overlap_comm).
 */
#include "engine/step.h"
#include "engine_test.h"

#define STEPS 3
#define MAX_UNITS 64

typedef struct {
  int nunits;
  int64_t unit_numel[MAX_UNITS];
  int unit_module[MAX_UNITS];
  int64_t module_numel[4]; /* padded */
} layout;

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static layout model_layout(const et_run *r, int n) {
  layout L = {0};
  int64_t group = 32 * (int64_t)n;
  int64_t unit_max = r->reduce_bucket / group * group;
  if (unit_max < group)
    unit_max = group;
  for (int mod = 0; mod < 4; mod++) {
    int64_t used = 0;
    for (int i = 0; i < TM_NPARAM; i++)
      if (et_param_module[i] == mod)
        used = round_up(used, 32) + tm_numel(&r->shape, i);
    L.module_numel[mod] = round_up(used, group);
    for (int64_t off = 0; off < L.module_numel[mod]; off += unit_max) {
      int64_t len = L.module_numel[mod] - off < unit_max ? L.module_numel[mod] - off : unit_max;
      L.unit_numel[L.nunits] = len;
      L.unit_module[L.nunits++] = mod;
    }
  }
  return L;
}

typedef struct {
  uint64_t calls, msg, wire_intra, wire_inter;
} tally;

/* Sum the rows of op (-1: every op) whose message size is in [lo, hi]. */
static tally sum_rows(const zinc_comms_stat *rows, int nrows, int op, uint64_t lo, uint64_t hi) {
  tally t = {0};
  for (int i = 0; i < nrows; i++)
    if ((op < 0 || rows[i].op == op) && rows[i].msg_bytes >= lo && rows[i].msg_bytes <= hi) {
      t.calls += rows[i].count;
      t.msg += rows[i].count * rows[i].msg_bytes;
      t.wire_intra += rows[i].wire_intra;
      t.wire_inter += rows[i].wire_inter;
    }
  return t;
}

static void expect_tally(const char *run, const char *what, tally got, uint64_t calls, uint64_t msg,
                         uint64_t intra, uint64_t inter) {
  ET_CHECK(got.calls == calls && got.msg == msg && got.wire_intra == intra &&
               got.wire_inter == inter,
           "%s %s: %llu calls, %llu message bytes, wire %llu intra + %llu inter; "
           "expected %llu calls, %llu message bytes, wire %llu intra + %llu inter", run, what,
           (unsigned long long)got.calls, (unsigned long long)got.msg,
           (unsigned long long)got.wire_intra, (unsigned long long)got.wire_inter,
           (unsigned long long)calls, (unsigned long long)msg, (unsigned long long)intra,
           (unsigned long long)inter);
}

/* The node layout the test expects (above): K nodes of p ranks. */
static int nodes_arg; /* --nodes K, 0 when not given */

static void node_layout(int n, int *K, int *p) {
  const char *fake = getenv("ZINC_COMM_NODE_SIZE");
  *K = 1;
  *p = n;
  if (nodes_arg > 0) {
    *K = nodes_arg;
    *p = n / nodes_arg;
  } else if (fake && atoi(fake) > 0 && atoi(fake) < n) {
    *p = atoi(fake);
    *K = n / *p;
  }
  ET_CHECK(*K * *p == n && (*K == 1 || (*p >= 2 && (*p & (*p - 1)) == 0)),
           "%d ranks as %d nodes of %d: not a layout the node-aware path takes", n, *K, *p);
}

static uint64_t share(uint64_t count, int m, int i) {
  return count / (uint64_t)m + ((uint64_t)i < count % (uint64_t)m);
}

/* An agreement's all-reduce of 4 i64 (the rule above), w[0] intra, w[1] inter. */
static void agreement_wire(int K, int p, int rank, uint64_t w[2]) {
  const uint64_t C = 4, es = 8;
  const int node = rank / p, local = rank % p;
  w[0] = w[1] = 0;
  for (int j = 0; j < p; j++)
    if (j != local)
      w[0] += (share(C, p, j) + share(C, p, local)) * es;
  for (int k = 0; k < K; k++)
    if (k != node)
      w[1] += (share(C, K, k) + share(C, K, node)) * es;
}

static void check_stage(int stage, int overlap, zinc_dtype dtype) {
  et_run r = et_defaults();
  r.stage = stage;
  r.overlap = overlap;
  r.dtype = dtype;
  char run[48];
  snprintf(run, sizeof run, "stage %d%s%s", stage, dtype == ZINC_BF16 ? " bf16" : "",
           overlap ? " (overlap_comm)" : "");
  r.steps = STEPS;
  r.persist = 0;
  r.reuse = 0;
  r.extra = "  \"comms_logger\": {\"enabled\": true}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  const int n = zinc_dp_size(e);
  const uint64_t es = dtype == ZINC_BF16 ? 2 : 4;
  ET_OK(zinc_comms_reset(e));
  ET_OK(et_steps(&m, &r, 0, r.steps));
  int K = 1, p = n;
  node_layout(n, &K, &p);
  const uint64_t wi = (uint64_t)(p - 1) * (uint64_t)K, wx = (uint64_t)(K - 1);
  const uint64_t rs_es = K > 1 ? 4 : es; /* node-aware: 16-bit partials in fp32 */

  int nrows = 0;
  ET_OK(zinc_comms_stats(e, NULL, 0, &nrows));
  zinc_comms_stat *rows = calloc((size_t)nrows + 1, sizeof *rows);
  for (int i = 0; i < nrows; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int got_rows = 0;
  ET_OK(zinc_comms_stats(e, rows, nrows, &got_rows));
  ET_CHECK(got_rows == nrows, "rows: %d then %d", nrows, got_rows);

  layout L = model_layout(&r, n);
  /* reduce-scatter: every unit, every step */
  uint64_t rs_msg = 0, chunks = 0, rs_chunks = 0;
  for (int u = 0; u < L.nunits; u++) {
    rs_msg += (uint64_t)L.unit_numel[u] * es;
    chunks += (uint64_t)(L.unit_numel[u] / n) * es;
    rs_chunks += (uint64_t)(L.unit_numel[u] / n) * rs_es;
  }
  expect_tally(run, "reduce-scatter", sum_rows(rows, nrows, ZINC_COMMS_REDUCE_SCATTER, 1, ~0ull),
               (uint64_t)L.nunits * STEPS, rs_msg * STEPS, wi * rs_chunks * STEPS,
               wx * rs_chunks * STEPS);

  /* all-gather of chunks (messages of 32 f32 and more) */
  uint64_t ag_calls = 0, ag_msg = 0;
  if (stage < 3) {
    ag_calls = (uint64_t)L.nunits * STEPS;
    ag_msg = chunks * STEPS;
  } else {
    for (int step = 0; step < STEPS; step++)
      for (int u = 0; u < L.nunits; u++) {
        int mod = L.unit_module[u];
        int64_t later = 0;
        for (int j = mod + 1; j < 4; j++)
          later += L.module_numel[j];
        int gathers = step == 0 ? 2 : 1 + (2 * later > r.reuse);
        ag_calls += (uint64_t)gathers;
        ag_msg += (uint64_t)gathers * (uint64_t)(L.unit_numel[u] / n) * es;
      }
  }
  /* the norm's partial sums: one message of N bytes per rank, once per
   * step at stages 1-3; told from the chunks by its size: a chunk is a
   * multiple of ZINC_ALIGN_ELEMS 16-bit or 32-bit elements, N is not */
  const uint64_t N = ZINC_NORM_SUMS_BYTES;
  ET_CHECK(N % (ZINC_ALIGN_ELEMS * 2) != 0, "the norm's message (%llu bytes) could be a "
           "chunk's size: the test cannot tell them apart", (unsigned long long)N);
  tally norms = sum_rows(rows, nrows, ZINC_COMMS_ALL_GATHER, N, N);
  tally gathered = sum_rows(rows, nrows, ZINC_COMMS_ALL_GATHER, 32 * es, ~0ull);
  gathered.calls -= norms.calls;
  gathered.msg -= norms.msg;
  gathered.wire_intra -= norms.wire_intra;
  gathered.wire_inter -= norms.wire_inter;
  expect_tally(run, "all-gather of chunks", gathered, ag_calls, ag_msg, wi * ag_msg,
               wx * ag_msg);
  uint64_t norm_calls = stage == 0 ? 0 : STEPS;
  expect_tally(run, "all-gather of norms", norms, norm_calls, norm_calls * N, wi * norm_calls * N,
               wx * norm_calls * N);
  tally other = sum_rows(rows, nrows, ZINC_COMMS_ALL_GATHER, 0, 32 * es - 1);
  ET_CHECK(other.calls == 0, "%s: %llu all-gathers of under %llu bytes, neither chunks nor "
           "the norm's", run, (unsigned long long)other.calls, (unsigned long long)(32 * es));
  /* all-reduce only for agreement (4 x i64); nothing else */
  tally ar = sum_rows(rows, nrows, ZINC_COMMS_ALL_REDUCE, 0, ~0ull);
  tally ar32 = sum_rows(rows, nrows, ZINC_COMMS_ALL_REDUCE, 32, 32);
  uint64_t agree[2];
  agreement_wire(K, p, et_rank, agree);
  ET_CHECK(ar.calls == ar32.calls && ar.calls > 0 && ar.msg == 32 * ar.calls &&
               ar.wire_intra == agree[0] * ar.calls && ar.wire_inter == agree[1] * ar.calls,
           "%s: %llu all-reduces, %llu of them of 32 bytes, wire %llu intra + %llu inter; "
           "expected %llu + %llu each", run, (unsigned long long)ar.calls,
           (unsigned long long)ar32.calls, (unsigned long long)ar.wire_intra,
           (unsigned long long)ar.wire_inter, (unsigned long long)agree[0],
           (unsigned long long)agree[1]);
  /* across nodes there is traffic, and it is all the node-aware path's */
  tally all = sum_rows(rows, nrows, -1, 0, ~0ull);
  ET_CHECK(K == 1 || all.wire_inter > 0, "%s: %d nodes, no wire bytes across them", run, K);
  for (int op = ZINC_COMMS_ALL_GATHERV; op < ZINC_COMMS_NOPS; op++) {
    tally t = sum_rows(rows, nrows, op, 0, ~0ull);
    ET_CHECK(t.calls == 0, "%s: %llu calls of op %d, expected none", run,
             (unsigned long long)t.calls, op);
  }
  /* the path that ran them */
  const char *shm = getenv("ZINC_COMM_MPI_SHM");
  const char *algo = n == 1                      ? "self"
                     : shm && !strcmp(shm, "0") ? "p2p"
                     : K > 1                    ? "hier"
                                                : "shm";
  for (int i = 0; i < nrows; i++)
    ET_CHECK(rows[i].algo && !strcmp(rows[i].algo, algo) && rows[i].count > 0 &&
                 rows[i].ranks == n &&
                 rows[i].wire_estimated == 0 && rows[i].group == NULL,
             "%s row %d (%s of %llu bytes): algo %s, %llu calls, estimated %llu", run,
             i, rows[i].name, (unsigned long long)rows[i].msg_bytes,
             rows[i].algo ? rows[i].algo : "NULL", (unsigned long long)rows[i].count,
             (unsigned long long)rows[i].wire_estimated);
  free(rows);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int only = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--nodes"))
      nodes_arg = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--stage"))
      only = atoi(argv[i + 1]);
  }
  for (int stage = 0; stage <= 3; stage++)
    if (only < 0 || only == stage) {
      check_stage(stage, 0, ZINC_F32);
      check_stage(stage, 0, ZINC_BF16);
    }
  /* overlap_comm: the reductions run on the comm's worker thread */
  for (int stage = 2; stage <= 3 && only < 0; stage++)
    check_stage(stage, 1, ZINC_F32);
  int K = 1, p = et_world;
  node_layout(et_world, &K, &p);
  char which[32] = "stages 0-3";
  if (only >= 0)
    snprintf(which, sizeof which, "stage %d", only);
  if (et_rank == 0)
    printf("comms logger at %d ranks (%d nodes of %d): %s %s\n", et_world, K, p, which,
           et_failures ? "FAILED" : "match the closed form");
  return et_failures ? 1 : 0;
}
