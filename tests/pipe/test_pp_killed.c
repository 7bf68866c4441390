/*
 * test_pp_killed.c — a pipeline stage killed (SIGKILL) or frozen
 * (SIGSTOP) in the middle of its transfers must not hang the others:
 * every survivor fails with ZINC_ERR_COMM within zinc.comm_timeout_s (4 s
 * here) plus the grace for its neighbours' notes, naming the lost rank —
 * also a stage whose neighbour is itself stuck waiting for it, or failed
 * because of it — and its next call names the rank again; then
 * zinc_engine_destroy returns at once and the process exits. Run by
 * tests/engine/rank_killed.sh under `mpirun --enable-recovery`, which
 * checks the lines printed here (the same as test_rank_killed.c's).
 *
 * usage: test_pp_killed PP WORLD SIGNAL [WHEN]
 *   PP     pipeline_parallel_size (the world is PP x dp ranks)
 *   WORLD  1: every step ends with an all-reduce over the world (a loss
 *          mean), so that ranks of other pipeline groups meet the loss
 *          there; 0: transfers only
 *   SIGNAL kill|stop
 *   WHEN   where the victim goes in the third step: fwd, before its
 *          forward receive; started (or bwd: the same place), after it
 *          started its forward send (mid-transfer: the send is posted,
 *          its peer may be receiving it) and before its backward receive;
 *          train: the engine is built (a module per stage) and each step
 *          is 2 micro-batches in 1F1B order (examples/mlp3d/pp_schedule.h)
 *          with zinc_step after each backward, the optimizer's step
 *          collective over every stage; the victim goes in the forward
 *          pass of the third step's second micro-batch, after the first
 *          micro-batch's transfers and step
 * The victim is world rank $RANK_KILLED_VICTIM (rank_killed.sh's; default
 * the last).
 *
 * Each step, stage s: forward, receive from s-1 and start the send to s+1;
 * backward, receive from s+1 and start the send to s-1; wait for both
 * sends; then (WORLD) the all-reduce.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/killed.h"
#include "pp_schedule.h"
#include "zinc.h"


#define N 100000 /* elements per transfer: past the eager size */

/* WHEN train: one stage's module and buffers for pp_schedule.h */
typedef struct {
  zinc_engine *e;
  zinc_module *m;
  zinc_param *w;
  float *in, *out, *grad;
  int step, rank, victim, freeze;
  const char *where;
} train_stage;

static void *in_of(void *ctx, int k) { (void)k; return ((train_stage *)ctx)->in; }
static void *out_of(void *ctx, int k) { (void)k; return ((train_stage *)ctx)->out; }
static void feed(void *ctx, int k) { (void)ctx, (void)k; }

static void forward(void *ctx, int k) {
  train_stage *T = ctx;
  if (T->step == 2 && k == 1)
    killed_lose(T->rank, T->victim, T->freeze);
  if (zinc_module_fetch(T->e, T->m) == ZINC_OK)
    zinc_module_release(T->e, T->m);
  for (int i = 0; i < N; i++)
    T->out[i] = T->in[i] + 1;
}

static void backward(void *ctx, int k) {
  train_stage *T = ctx;
  (void)k;
  if (zinc_module_fetch(T->e, T->m) != ZINC_OK)
    return; /* the engine stopped: the schedule's next call says why */
  float *g = zinc_param_grad(T->w);
  if (g)
    g[0] += 1.0f;
  zinc_module_grads_ready(T->e, T->m);
  zinc_module_release(T->e, T->m);
  zinc_backward_end(T->e);
}

static zinc_status done(void *ctx, int k) {
  train_stage *T = ctx;
  (void)k;
  zinc_step_info info = ZINC_STEP_INFO_INIT;
  T->where = "zinc_step";
  zinc_status st = zinc_step(T->e, &info);
  T->where = "the 1F1B step's transfers";
  return st;
}

/* WHEN train: 6 steps of 2 micro-batches; the first failure, and where. */
static zinc_status train(zinc_engine *e, int rank, int victim, int freeze, float *bufs[3],
                         const char **where) {
  train_stage T = {.e = e, .in = bufs[0], .out = bufs[1], .grad = bufs[2], .rank = rank,
                   .victim = victim, .freeze = freeze, .where = "the 1F1B step's transfers"};
  char name[32];
  snprintf(name, sizeof name, "stage%d", zinc_pp_rank(e));
  T.m = zinc_module_add(e, name);
  int64_t shape[1] = {256};
  T.w = zinc_param_add(e, T.m, "w", ZINC_F32, 1, shape);
  *where = "zinc_engine_build";
  zinc_status st = T.w ? zinc_engine_build(e, NULL, NULL) : ZINC_ERR_INVALID;
  pp_stage S = {.ctx = &T, .count = N, .dtype = ZINC_F32, .input = in_of, .output = out_of,
                .grad = T.grad, .feed = feed, .forward = forward, .backward = backward,
                .done = done};
  for (T.step = 0; T.step < 6 && st == ZINC_OK; T.step++) {
    if (T.step == 2)
      killed_time = killed_now();
    st = pp_1f1b(e, 2, &S);
    *where = T.where;
  }
  return st;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_pp_killed PP WORLD kill|stop [fwd|started|bwd]\n");
    return 2;
  }
  int pp = atoi(argv[1]), world_sum = atoi(argv[2]), freeze = !strcmp(argv[3], "stop");
  const char *when = argc > 4 ? argv[4] : "fwd";
  if (strcmp(when, "fwd") && strcmp(when, "started") && strcmp(when, "bwd") &&
      strcmp(when, "train")) {
    fprintf(stderr, "test_pp_killed: WHEN is fwd, started, bwd or train, not %s\n", when);
    return 2;
  }
  atexit(killed_report_exit);
  zinc_engine *e = killed_engine("{\"train_micro_batch_size_per_gpu\": 1, "
                                 "\"gradient_accumulation_steps\": 2, \"zero_optimization\": "
                                 "{\"stage\": 1}, \"zinc\": {\"comm_timeout_s\": 4}}", 0, pp);
  if (zinc_pp_size(e) < 2) {
    printf("SKIPPED: needs 2 or more stages\n");
    zinc_engine_destroy(e);
    return 77;
  }
  const char *v = getenv("RANK_KILLED_VICTIM");
  int rank = zinc_rank(e), victim = v ? atoi(v) : zinc_world_size(e) - 1;
  int first = zinc_pp_is_first(e), last = zinc_pp_is_last(e);
  float *act = calloc(N, sizeof *act), *grad = calloc(N, sizeof *grad);
  float *act_out = calloc(N, sizeof *act_out), *grad_out = calloc(N, sizeof *grad_out);
  zinc_status st = ZINC_OK;
  const char *where = "create";
#define LOSE_VICTIM() do { killed_lose(rank, victim, freeze); } while (0)
  if (!strcmp(when, "train"))
    st = train(e, rank, victim, freeze, (float *[3]){act, act_out, grad}, &where);
  for (int step = 0; step < 6 && st == ZINC_OK && strcmp(when, "train"); step++) {
    zinc_pp_handle *fwd = NULL, *bwd = NULL;
    if (step == 2) /* the survivors count from here: a survivor may wait
                      for the victim before the victim's WHEN comes */
      killed_time = killed_now();
    if (step == 2 && !strcmp(when, "fwd"))
      LOSE_VICTIM();
    if (!first) {
      zinc_pp_op r = {ZINC_PP_RECV_PREV, act, N, ZINC_F32};
      where = "zinc_pp_transfer (receive forward)";
      st = zinc_pp_transfer(e, &r, 1);
    }
    if (st == ZINC_OK && !last) {
      for (int i = 0; i < N; i++)
        act_out[i] = act[i] + 1;
      zinc_pp_op s = {ZINC_PP_SEND_NEXT, act_out, N, ZINC_F32};
      where = "zinc_pp_start (send forward)";
      st = zinc_pp_start(e, &s, 1, &fwd);
    }
    if (st == ZINC_OK && step == 2 && strcmp(when, "fwd")) /* started, bwd */
      LOSE_VICTIM();
    if (st == ZINC_OK && !last) {
      zinc_pp_op r = {ZINC_PP_RECV_NEXT, grad, N, ZINC_F32};
      where = "zinc_pp_transfer (receive backward)";
      st = zinc_pp_transfer(e, &r, 1);
    }
    if (st == ZINC_OK && !first) {
      for (int i = 0; i < N; i++)
        grad_out[i] = grad[i] + 1;
      zinc_pp_op s = {ZINC_PP_SEND_PREV, grad_out, N, ZINC_F32};
      where = "zinc_pp_start (send backward)";
      st = zinc_pp_start(e, &s, 1, &bwd);
    }
    if (st == ZINC_OK && fwd) {
      where = "zinc_pp_wait (send forward)";
      st = zinc_pp_wait(e, fwd);
      fwd = NULL;
    }
    if (st == ZINC_OK && bwd) {
      where = "zinc_pp_wait (send backward)";
      st = zinc_pp_wait(e, bwd);
      bwd = NULL;
    }
    if (st == ZINC_OK && world_sum) {
      double loss = 1;
      where = "zinc_allreduce_host_scope (world)";
      st = zinc_allreduce_host_scope(e, ZINC_SCOPE_WORLD, &loss, 1, ZINC_REDUCE_MEAN);
    }
    /* a handle left after a failure is destroy's to drop */
  }
  if (st == ZINC_OK) {
    printf("%s %d: finished without noticing the lost rank\n",
           killed_time > 0 ? "survivor" : "rank", rank);
    zinc_engine_destroy(e);
    return 1;
  }
  killed_rank = rank;
  double t = killed_now() - killed_time;
  printf("survivor %d: %s after %.1f s: %s\n", rank, zinc_status_name(st), t, zinc_last_error());
  printf("survivor %d: failed in %s\n", rank, where);
  zinc_pp_op again = {first ? ZINC_PP_SEND_NEXT : ZINC_PP_RECV_PREV, act, N, ZINC_F32};
  zinc_status later = zinc_pp_transfer(e, &again, 1);
  printf("survivor %d: later call: %s: %s\n", rank, zinc_status_name(later), zinc_last_error());
  fflush(stdout);
  double t0 = killed_now();
  zinc_engine_destroy(e);
  printf("survivor %d: destroy took %.1f s\n", rank, killed_now() - t0);
  printf("survivor %d: destroy returned after %.1f s\n", rank, killed_now() - killed_time);
  fflush(stdout);
  free(act);
  free(grad);
  free(act_out);
  free(grad_out);
  return 0;
}
