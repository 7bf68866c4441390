/*
 * test_comms_logger.c — the comms logger's byte counts against the
 * closed-form traffic of each ZeRO stage, computed here from the tiny
 * model's parameter counts (never from the engine's plan).
 *
 * For stages 0-3 (and 2-3 again with overlap_comm, whose reductions the
 * comm's worker thread runs) the engine trains STEPS steps (accumulation 1)
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
 *                   2 f64 per rank (a 16-byte message);
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
 * Wire bytes each rank sends on the flat paths (shared memory, or
 * point-to-point with ZINC_COMM_MPI_SHM=0): reduce-scatter (n-1)/n of its
 * message (every peer's slice), all-gather (n-1) times its message (its
 * part to every peer); all on this node, so inter-node is 0.
 */
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

/* Sum the rows of op whose message size is in [lo, hi]. */
static tally sum_rows(const zinc_comms_stat *rows, int nrows, int op, uint64_t lo, uint64_t hi) {
  tally t = {0};
  for (int i = 0; i < nrows; i++)
    if (rows[i].op == op && rows[i].msg_bytes >= lo && rows[i].msg_bytes <= hi) {
      t.calls += rows[i].count;
      t.msg += rows[i].count * rows[i].msg_bytes;
      t.wire_intra += rows[i].wire_intra;
      t.wire_inter += rows[i].wire_inter;
    }
  return t;
}

static void expect_tally(const char *run, const char *what, tally got, uint64_t calls, uint64_t msg,
                         uint64_t wire) {
  ET_CHECK(got.calls == calls && got.msg == msg && got.wire_intra == wire && got.wire_inter == 0,
           "%s %s: %llu calls, %llu message bytes, wire %llu intra + %llu inter; "
           "expected %llu calls, %llu message bytes, wire %llu intra + 0", run, what,
           (unsigned long long)got.calls, (unsigned long long)got.msg,
           (unsigned long long)got.wire_intra, (unsigned long long)got.wire_inter,
           (unsigned long long)calls, (unsigned long long)msg, (unsigned long long)wire);
}

static void check_stage(int stage, int overlap) {
  et_run r = et_defaults();
  r.stage = stage;
  r.overlap = overlap;
  char run[40];
  snprintf(run, sizeof run, "stage %d%s", stage, overlap ? " (overlap_comm)" : "");
  r.steps = STEPS;
  r.persist = 0;
  r.reuse = 0;
  r.extra = "  \"comms_logger\": {\"enabled\": true}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  const int n = zinc_dp_size(e);
  const uint64_t es = 4; /* f32 */
  ET_OK(zinc_comms_reset(e));
  ET_OK(et_steps(&m, &r, 0, r.steps));

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
  uint64_t rs_msg = 0, chunks = 0;
  for (int u = 0; u < L.nunits; u++) {
    rs_msg += (uint64_t)L.unit_numel[u] * es;
    chunks += (uint64_t)(L.unit_numel[u] / n) * es;
  }
  expect_tally(run, "reduce-scatter", sum_rows(rows, nrows, ZINC_COMMS_REDUCE_SCATTER, 1, ~0ull),
               (uint64_t)L.nunits * STEPS, rs_msg * STEPS,
               rs_msg * STEPS / (uint64_t)n * (uint64_t)(n - 1));

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
  expect_tally(run, "all-gather of chunks", sum_rows(rows, nrows, ZINC_COMMS_ALL_GATHER, 32 * es,
                                                       ~0ull),
               ag_calls, ag_msg, ag_msg * (uint64_t)(n - 1));
  /* the norm's partial sums: 2 f64 per rank, once per step at stages 1-3 */
  uint64_t norm_calls = stage == 0 ? 0 : STEPS;
  expect_tally(run, "all-gather of norms", sum_rows(rows, nrows, ZINC_COMMS_ALL_GATHER, 1,
                                                      32 * es - 1),
               norm_calls, norm_calls * 16, norm_calls * 16 * (uint64_t)(n - 1));
  /* all-reduce only for agreement (4 x i64); nothing else */
  tally ar = sum_rows(rows, nrows, ZINC_COMMS_ALL_REDUCE, 0, ~0ull);
  tally ar32 = sum_rows(rows, nrows, ZINC_COMMS_ALL_REDUCE, 32, 32);
  ET_CHECK(ar.calls == ar32.calls && ar.calls > 0 && ar.wire_inter == 0,
           "%s: %llu all-reduces, %llu of them of 32 bytes", run,
           (unsigned long long)ar.calls, (unsigned long long)ar32.calls);
  for (int op = ZINC_COMMS_ALL_GATHERV; op < ZINC_COMMS_NOPS; op++) {
    tally t = sum_rows(rows, nrows, op, 0, ~0ull);
    ET_CHECK(t.calls == 0, "%s: %llu calls of op %d, expected none", run,
             (unsigned long long)t.calls, op);
  }
  /* the path that ran them */
  const char *shm = getenv("ZINC_COMM_MPI_SHM");
  const char *algo = n == 1 ? "self" : shm && !strcmp(shm, "0") ? "p2p" : "shm";
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

int main(void) {
  for (int stage = 0; stage <= 3; stage++)
    check_stage(stage, 0);
  /* overlap_comm: the reductions run on the comm's worker thread */
  for (int stage = 2; stage <= 3; stage++)
    check_stage(stage, 1);
  if (et_rank == 0)
    printf("comms logger at %d ranks: stages 0-3 %s\n", et_world,
           et_failures ? "FAILED" : "match the closed form");
  return et_failures ? 1 : 0;
}
