/*
 * test_pp_transfer.c — transfers between neighbouring pipeline stages
 * (include/zinc.h, "Pipeline parallelism") on the cpu device, at every
 * grid of 2 or more stages that factors the world (2, 3 and 4 ranks:
 * pp 2, pp 3, pp 4, pp 2 x dp 2, pp 2 x tp 2):
 *  - round trips: a buffer goes forward through every stage and back, each
 *    stage checking every element (exact values from the sender's world
 *    rank, the stage and the element) and adding its own; dtypes f32,
 *    bf16 and f16, counts 0, 1, odd, and more than 1 MiB (whole blocks and
 *    a tail);
 *  - started transfers: several batches started before any is waited for,
 *    waited for in another order, pair in start order; 1F1B's crossing
 *    pairs in one batch; a small 1F1B schedule (warm-up, steady state,
 *    cool-down) whose "activations" and "gradients" are checked at the
 *    ends;
 *  - a count or dtype mismatch between the two ends (small, and above 1
 *    MiB where the receive is truncated): ZINC_ERR_INVALID on both ends,
 *    naming both stages and ranks and both sizes; the next transfer pairs
 *    as before;
 *  - misuse refused on the calling rank only (no such neighbour, bad
 *    arguments, no pipeline), the engine going on.
 */
#include <mpi.h>

#include "engine/engine_test.h"

static zinc_engine *create(int pp, int tp) {
  zinc_config *cfg;
  ET_OK(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zinc\": "
                          "{\"comm_timeout_s\": 30}}", &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.model_parallel_size = tp;
  opt.pipeline_parallel_size = pp;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  return e;
}

/* The value element i carries after passing stages 0 .. s of the world
 * rank `origin`'s pipeline on round `round`: small integers, exact in
 * every dtype (|v| < 256). */
static float value(int origin, int round, int s, int64_t i) {
  return (float)((origin * 7 + round * 3 + s * 5 + (int)(i % 31)) % 200) - 100.0f;
}

static void fill(void *buf, zinc_dtype dt, int64_t n, int origin, int round, int s) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = value(origin, round, s, i);
  ET_OK(zinc_convert(buf, dt, v, ZINC_F32, n));
  free(v);
}

/* Every element as filled; prints the first mismatch. */
static int check(const void *buf, zinc_dtype dt, int64_t n, int origin, int round, int s,
                 const char *what) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  ET_OK(zinc_convert(v, ZINC_F32, buf, dt, n));
  int good = 1;
  for (int64_t i = 0; i < n && good; i++)
    if (v[i] != value(origin, round, s, i)) {
      ET_CHECK(0, "%s: element %lld of %lld is %g, expected %g", what, (long long)i,
               (long long)n, v[i], value(origin, round, s, i));
      good = 0;
    }
  free(v);
  return good;
}

static zinc_pp_op op(zinc_pp_dir dir, void *buf, int64_t count, zinc_dtype dt) {
  zinc_pp_op o = {dir, buf, count, dt};
  return o;
}

/* The world rank of stage s in this rank's pipeline group. */
static int rank_of_stage(zinc_engine *e, int s) {
  int stage, dp, mp;
  ET_OK(zinc_rank_coords(e, zinc_rank(e), &stage, &dp, &mp));
  return zinc_coords_rank(e, s, dp, mp);
}

/* Forward through every stage and back, blocking transfers. */
static void round_trip(zinc_engine *e, zinc_dtype dt, int64_t n, int round) {
  int s = zinc_pp_rank(e), last = zinc_pp_size(e) - 1, origin = rank_of_stage(e, 0);
  size_t es = zinc_dtype_size(dt);
  char *buf = malloc((size_t)(n > 0 ? n : 1) * es);
  char what[160];
  snprintf(what, sizeof what, "round trip of %lld %s, stage %d forward", (long long)n,
           zinc_dtype_name(dt), s);
  if (s > 0) {
    memset(buf, 0x5a, (size_t)n * es);
    zinc_pp_op recv = op(ZINC_PP_RECV_PREV, buf, n, dt);
    ET_OK(zinc_pp_transfer(e, &recv, 1));
    check(buf, dt, n, origin, round, s - 1, what);
  }
  fill(buf, dt, n, origin, round, s);
  if (s < last) {
    zinc_pp_op send = op(ZINC_PP_SEND_NEXT, buf, n, dt);
    ET_OK(zinc_pp_transfer(e, &send, 1));
  }
  /* backward: the last stage starts from its forward value + 1 round */
  snprintf(what, sizeof what, "round trip of %lld %s, stage %d backward", (long long)n,
           zinc_dtype_name(dt), s);
  if (s < last) {
    memset(buf, 0xa5, (size_t)n * es);
    zinc_pp_op recv = op(ZINC_PP_RECV_NEXT, buf, n, dt);
    ET_OK(zinc_pp_transfer(e, &recv, 1));
    check(buf, dt, n, origin, round + 1, s + 1, what);
  }
  fill(buf, dt, n, origin, round + 1, s);
  if (s > 0) {
    zinc_pp_op send = op(ZINC_PP_SEND_PREV, buf, n, dt);
    ET_OK(zinc_pp_transfer(e, &send, 1));
  }
  free(buf);
}

/* K batches to the next stage started before any wait, waited for in
 * another order; the receiver starts its K the same way and waits in yet
 * another order: the k-th started pairs with the k-th. */
#define K 3
static void started_in_flight(zinc_engine *e, int round) {
  int s = zinc_pp_rank(e), last = zinc_pp_size(e) - 1, origin = rank_of_stage(e, 0);
  int64_t n[K] = {1000, 7, 300001}; /* different sizes: a mispairing fails the size check */
  float *out[K], *in[K];
  zinc_pp_handle *hs[K] = {0}, *hr[K] = {0};
  for (int k = 0; k < K; k++) {
    out[k] = malloc((size_t)n[k] * sizeof(float));
    in[k] = malloc((size_t)n[k] * sizeof(float));
    fill(out[k], ZINC_F32, n[k], origin, round + k, s);
  }
  for (int k = 0; k < K; k++) {
    if (s < last) {
      zinc_pp_op o = op(ZINC_PP_SEND_NEXT, out[k], n[k], ZINC_F32);
      ET_OK(zinc_pp_start(e, &o, 1, &hs[k]));
    }
    if (s > 0) {
      zinc_pp_op o = op(ZINC_PP_RECV_PREV, in[k], n[k], ZINC_F32);
      ET_OK(zinc_pp_start(e, &o, 1, &hr[k]));
    }
  }
  static const int send_order[K] = {2, 0, 1}, recv_order[K] = {1, 2, 0};
  for (int j = 0; j < K; j++) {
    if (hr[recv_order[j]])
      ET_OK(zinc_pp_wait(e, hr[recv_order[j]]));
    if (hs[send_order[j]])
      ET_OK(zinc_pp_wait(e, hs[send_order[j]]));
  }
  for (int k = 0; k < K && s > 0; k++) {
    char what[96];
    snprintf(what, sizeof what, "started batch %d at stage %d", k, s);
    check(in[k], ZINC_F32, n[k], origin, round + k, s - 1, what);
  }
  for (int k = 0; k < K; k++) {
    free(out[k]);
    free(in[k]);
  }
}

/* A 1F1B schedule of m micro-batches: the first stage makes activation
 * j (value(origin, j, 0, i)), every stage adds 1 to each element on the
 * way forward; the last stage turns activation j into gradient j
 * (doubled), and every stage adds 1 on the way back. Steady state uses
 * the crossing pairs in one batch, started before the "compute" and
 * waited for after it. The first stage checks each gradient it gets. */
static void one_f_one_b(zinc_engine *e, int m) {
  int s = zinc_pp_rank(e), p = zinc_pp_size(e), origin = rank_of_stage(e, 0);
  const int64_t n = 4097;
  float *act = calloc((size_t)(m * n), sizeof(float)), *grad = calloc((size_t)(m * n),
                                                                      sizeof(float));
  int warmup = p - s - 1 < m ? p - s - 1 : m, fwd = 0, bwd = 0;
#define ACT(j) (act + (int64_t)(j) * n)
#define GRAD(j) (grad + (int64_t)(j) * n)
  /* forward of micro-batch j here: receive (or make) its input, add 1 */
  for (int j = 0; j < warmup; j++, fwd++) {
    if (s == 0)
      fill(ACT(j), ZINC_F32, n, origin, j, 0);
    else {
      zinc_pp_op o = op(ZINC_PP_RECV_PREV, ACT(j), n, ZINC_F32);
      ET_OK(zinc_pp_transfer(e, &o, 1));
    }
    for (int64_t i = 0; i < n; i++)
      ACT(j)[i] += 1;
    zinc_pp_op o = op(ZINC_PP_SEND_NEXT, ACT(j), n, ZINC_F32);
    ET_OK(zinc_pp_transfer(e, &o, 1));
  }
  if (fwd < m) { /* the first steady-state forward's input */
    if (s == 0)
      fill(ACT(fwd), ZINC_F32, n, origin, fwd, 0);
    else {
      zinc_pp_op o = op(ZINC_PP_RECV_PREV, ACT(fwd), n, ZINC_F32);
      ET_OK(zinc_pp_transfer(e, &o, 1));
    }
  }
  while (fwd < m) { /* steady state: one forward, one backward */
    int j = fwd;
    for (int64_t i = 0; i < n; i++)
      ACT(j)[i] += 1;
    if (s == p - 1) {
      for (int64_t i = 0; i < n; i++)
        GRAD(j)[i] = 2 * ACT(j)[i];
    } else { /* send forward, receive backward: one batch */
      zinc_pp_op ops[2] = {op(ZINC_PP_SEND_NEXT, ACT(j), n, ZINC_F32),
                           op(ZINC_PP_RECV_NEXT, GRAD(bwd), n, ZINC_F32)};
      zinc_pp_handle *h;
      ET_OK(zinc_pp_start(e, ops, 2, &h));
      ET_OK(zinc_pp_wait(e, h));
    }
    fwd++;
    for (int64_t i = 0; i < n; i++) /* backward of micro-batch bwd */
      GRAD(bwd)[i] += 1;
    if (s > 0) { /* send backward, receive the next forward input: one batch */
      zinc_pp_op ops[2] = {op(ZINC_PP_SEND_PREV, GRAD(bwd), n, ZINC_F32),
                           op(ZINC_PP_RECV_PREV, ACT(fwd < m ? fwd : 0), fwd < m ? n : 0,
                              ZINC_F32)};
      zinc_pp_handle *h;
      ET_OK(zinc_pp_start(e, ops, fwd < m ? 2 : 1, &h));
      ET_OK(zinc_pp_wait(e, h));
    } else if (fwd < m) {
      fill(ACT(fwd), ZINC_F32, n, origin, fwd, 0);
    }
    bwd++;
  }
  for (; bwd < m; bwd++) { /* cool-down: the backward passes left */
    zinc_pp_op o = op(ZINC_PP_RECV_NEXT, GRAD(bwd), n, ZINC_F32);
    if (s < p - 1)
      ET_OK(zinc_pp_transfer(e, &o, 1));
    for (int64_t i = 0; i < n; i++)
      GRAD(bwd)[i] += 1;
    if (s > 0) {
      o = op(ZINC_PP_SEND_PREV, GRAD(bwd), n, ZINC_F32);
      ET_OK(zinc_pp_transfer(e, &o, 1));
    }
  }
  if (s == 0) /* gradient j = 2 (value + p) + p at the first stage */
    for (int j = 0; j < m; j++)
      for (int64_t i = 0; i < n; i++) {
        float want = 2 * (value(origin, j, 0, i) + (float)p) + (float)p;
        if (GRAD(j)[i] != want) {
          ET_CHECK(0, "1F1B with %d micro-batches: gradient %d element %lld is %g, expected %g",
                   m, j, (long long)i, GRAD(j)[i], want);
          break;
        }
      }
#undef ACT
#undef GRAD
  free(act);
  free(grad);
}

/* Both ends refuse a pair whose sizes differ, naming both; the next pair
 * goes through. */
static void mismatch(zinc_engine *e, int64_t sent, zinc_dtype sent_dt, int64_t expected,
                     zinc_dtype expected_dt) {
  int s = zinc_pp_rank(e), last = zinc_pp_size(e) - 1;
  /* pairs of stages 0 -> 1, 2 -> 3, ... (an odd last stage sits out) */
  int sender = s % 2 == 0 && s < last, receiver = s % 2 == 1;
  if (!sender && !receiver)
    return;
  int stage_pair = sender ? s : s - 1;
  int64_t n = sender ? sent : expected;
  zinc_dtype dt = sender ? sent_dt : expected_dt;
  size_t bytes = (size_t)n * zinc_dtype_size(dt);
  char *buf = calloc(bytes + 1, 1);
  zinc_pp_op o = op(sender ? ZINC_PP_SEND_NEXT : ZINC_PP_RECV_PREV, buf, n, dt);
  zinc_status st = zinc_pp_transfer(e, &o, 1);
  char msg[1024], want[4][128];
  snprintf(msg, sizeof msg, "%s", zinc_last_error());
  int from = rank_of_stage(e, stage_pair), to = rank_of_stage(e, stage_pair + 1);
  snprintf(want[0], sizeof want[0], "stage %d (rank %d)", stage_pair, from);
  snprintf(want[1], sizeof want[1], "stage %d (rank %d)", stage_pair + 1, to);
  snprintf(want[2], sizeof want[2], "sends %lld %s (%lld bytes)", (long long)sent,
           zinc_dtype_name(sent_dt), (long long)(sent * (int64_t)zinc_dtype_size(sent_dt)));
  snprintf(want[3], sizeof want[3], "receives %lld %s (%lld bytes)", (long long)expected,
           zinc_dtype_name(expected_dt),
           (long long)(expected * (int64_t)zinc_dtype_size(expected_dt)));
  ET_CHECK(st == ZINC_ERR_INVALID, "mismatch %lld %s -> %lld %s: %s on stage %d (%s)",
           (long long)sent, zinc_dtype_name(sent_dt), (long long)expected,
           zinc_dtype_name(expected_dt), zinc_status_name(st), s, msg);
  for (int k = 0; k < 4; k++)
    ET_CHECK(strstr(msg, want[k]), "mismatch on stage %d: the message lacks \"%s\": %s", s,
             want[k], msg);
  /* the engine goes on, and the next pair pairs */
  int64_t ok_n = 513;
  float *good = malloc((size_t)ok_n * sizeof(float));
  fill(good, ZINC_F32, ok_n, from, 77, 0);
  zinc_pp_op next = op(sender ? ZINC_PP_SEND_NEXT : ZINC_PP_RECV_PREV, good, ok_n, ZINC_F32);
  ET_OK(zinc_pp_transfer(e, &next, 1));
  if (receiver)
    check(good, ZINC_F32, ok_n, from, 77, 0, "the transfer after a mismatch");
  free(good);
  free(buf);
}

static void misuse(zinc_engine *e) {
  int s = zinc_pp_rank(e), last = zinc_pp_size(e) - 1;
  float x[4] = {0};
  zinc_pp_handle *h = (zinc_pp_handle *)&x; /* must come back NULL */
  if (s == last) {
    zinc_pp_op o = op(ZINC_PP_SEND_NEXT, x, 4, ZINC_F32);
    ET_CHECK(zinc_pp_start(e, &o, 1, &h) == ZINC_ERR_INVALID && h == NULL &&
                 strstr(zinc_last_error(), "there is no next stage"),
             "the last stage sent forward: %s", zinc_last_error());
  }
  if (s == 0) {
    zinc_pp_op o = op(ZINC_PP_RECV_PREV, x, 4, ZINC_F32);
    ET_CHECK(zinc_pp_start(e, &o, 1, &h) == ZINC_ERR_INVALID && h == NULL &&
                 strstr(zinc_last_error(), "there is no previous stage"),
             "the first stage received forward: %s", zinc_last_error());
  }
  zinc_pp_op o = op(s == last ? ZINC_PP_SEND_PREV : ZINC_PP_SEND_NEXT, x, 4, ZINC_F32);
  zinc_pp_op bad = o;
  bad.count = -1;
  ET_CHECK(zinc_pp_transfer(e, &bad, 1) == ZINC_ERR_INVALID, "a negative count was taken");
  bad = o;
  bad.buf = NULL;
  ET_CHECK(zinc_pp_transfer(e, &bad, 1) == ZINC_ERR_INVALID, "a NULL buffer was taken");
  bad = o;
  bad.dtype = (zinc_dtype)9;
  ET_CHECK(zinc_pp_transfer(e, &bad, 1) == ZINC_ERR_INVALID, "dtype 9 was taken");
  bad = o;
  bad.dir = (zinc_pp_dir)7;
  ET_CHECK(zinc_pp_transfer(e, &bad, 1) == ZINC_ERR_INVALID, "direction 7 was taken");
  ET_CHECK(zinc_pp_transfer(e, &o, 0) == ZINC_ERR_INVALID, "an empty batch was taken");
  ET_CHECK(zinc_pp_transfer(e, NULL, 1) == ZINC_ERR_INVALID, "a NULL batch was taken");
  ET_CHECK(zinc_pp_start(e, &o, 1, NULL) == ZINC_ERR_INVALID, "a NULL handle pointer");
  ET_CHECK(zinc_pp_wait(e, NULL) == ZINC_ERR_INVALID, "a NULL handle was waited for");
  ET_CHECK(zinc_pp_transfer(NULL, &o, 1) == ZINC_ERR_INVALID, "a NULL engine");
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  int W = et_world, grids = 0;
  /* without a pipeline every transfer is misuse */
  zinc_engine *e = create(1, 1);
  float x = 0;
  zinc_pp_op none = op(ZINC_PP_SEND_NEXT, &x, 1, ZINC_F32);
  ET_CHECK(zinc_pp_transfer(e, &none, 1) == ZINC_ERR_INVALID &&
               strstr(zinc_last_error(), "no pipeline"),
           "a transfer without a pipeline: %s", zinc_last_error());
  zinc_engine_destroy(e);
  if (W < 2) {
    printf("SKIPPED: transfers need 2 or more ranks\n");
    MPI_Finalize();
    return 77;
  }
  static const zinc_dtype dts[3] = {ZINC_F32, ZINC_BF16, ZINC_F16};
  const int64_t counts[] = {0, 1, 999, (1 << 20) / 4 + 777, (1 << 21) / 2 + 1};
  for (int pp = 2; pp <= W; pp++)
    for (int tp = 1; tp <= W / pp; tp++) {
      if (W % (pp * tp))
        continue;
      e = create(pp, tp);
      int round = 0;
      for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++, round += 2)
          round_trip(e, dts[d], counts[c], round);
      started_in_flight(e, 100);
      for (int m = 1; m <= 2 * pp + 1; m += pp)
        one_f_one_b(e, m);
      mismatch(e, 1000, ZINC_F32, 999, ZINC_F32);
      mismatch(e, 500, ZINC_F32, 1000, ZINC_BF16);         /* same bytes, another dtype */
      mismatch(e, 400000, ZINC_F32, 300000, ZINC_F32);     /* truncated past 1 MiB */
      mismatch(e, 300000, ZINC_F16, 700000, ZINC_F16);     /* arrives short */
      misuse(e);
      round_trip(e, ZINC_F32, 4096, 1000); /* the engine went on */
      zinc_engine_destroy(e);
      grids++;
    }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "pipeline transfer tests FAILED\n"
               : "pipeline transfer tests passed at %d ranks (%d grids)\n", W, grids);
  MPI_Finalize();
  return bad ? 1 : 0;
}
