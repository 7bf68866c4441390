/*
 * pp_schedule.h — one pipeline stage's 1F1B schedule over zinc's transfers
 * (include/zinc.h, "Pipeline parallelism"): which micro-batch runs forward
 * or backward when, and what crosses to the neighbouring stages between
 * them. The trainer says where micro-batch k's input and output live and
 * what a forward pass, a backward pass and the end of a micro-batch do;
 * the order and the transfers are here. Used by examples/mlp3d and
 * bench/pp_bench.
 *
 * Stage s of p runs w = min(p-s-1, m) forward passes ahead (warm-up), then
 * alternates one forward and one backward, then drains the remaining
 * backward passes, so it holds the activations of at most p-s micro-
 * batches: micro-batch k may reuse the buffers of micro-batch k-(p-s).
 * Crossing transfers (an output forward while a gradient comes back, a
 * gradient back while the next input comes) go in one batch, as the
 * transfer API asks. A micro-batch's end (zinc_step) comes after its input
 * gradient has left: the m-th step is collective over every stage, and
 * the previous stage needs that gradient to reach its own.
 */
#ifndef PP_SCHEDULE_H
#define PP_SCHEDULE_H

#include "zinc.h"

typedef struct {
  void *ctx;
  int64_t count;                      /* elements of an activation, and of its gradient */
  zinc_dtype dtype;
  void *(*input)(void *ctx, int k);   /* micro-batch k's input (the first stage fills it) */
  void *(*output)(void *ctx, int k);  /* its output (the last stage's goes nowhere)      */
  void *grad;                         /* in: the gradient of an output; out: of the input */
  void (*feed)(void *ctx, int k);     /* first stage: make micro-batch k's input         */
  void (*forward)(void *ctx, int k);
  void (*backward)(void *ctx, int k); /* grad of the output in, grad of the input out  */
  zinc_status (*done)(void *ctx, int k); /* the micro-batch's end: zinc_step             */
} pp_stage;

#define PP_TRY(expr)                                                           \
  do {                                                                         \
    zinc_status pp_st_ = (expr);                                               \
    if (pp_st_ != ZINC_OK)                                                     \
      return pp_st_;                                                           \
  } while (0)

static inline zinc_pp_op pp_op(const pp_stage *S, zinc_pp_dir dir, void *buf) {
  return (zinc_pp_op){dir, buf, S->count, S->dtype};
}

/* Receive micro-batch k's input (the first stage makes it). */
static inline zinc_status pp_recv_forward(zinc_engine *e, const pp_stage *S, int k) {
  if (zinc_pp_is_first(e)) {
    S->feed(S->ctx, k);
    return ZINC_OK;
  }
  zinc_pp_op o = pp_op(S, ZINC_PP_RECV_PREV, S->input(S->ctx, k));
  return zinc_pp_transfer(e, &o, 1);
}

static inline zinc_status pp_send_forward(zinc_engine *e, const pp_stage *S, int k) {
  if (zinc_pp_is_last(e))
    return ZINC_OK;
  zinc_pp_op o = pp_op(S, ZINC_PP_SEND_NEXT, S->output(S->ctx, k));
  return zinc_pp_transfer(e, &o, 1);
}

static inline zinc_status pp_recv_backward(zinc_engine *e, const pp_stage *S) {
  if (zinc_pp_is_last(e))
    return ZINC_OK;
  zinc_pp_op o = pp_op(S, ZINC_PP_RECV_NEXT, S->grad);
  return zinc_pp_transfer(e, &o, 1);
}

static inline zinc_status pp_send_backward(zinc_engine *e, const pp_stage *S) {
  if (zinc_pp_is_first(e))
    return ZINC_OK;
  zinc_pp_op o = pp_op(S, ZINC_PP_SEND_PREV, S->grad);
  return zinc_pp_transfer(e, &o, 1);
}

/* micro-batch k's output forward, a gradient back: one batch */
static inline zinc_status pp_send_forward_recv_backward(zinc_engine *e, const pp_stage *S, int k) {
  if (zinc_pp_is_last(e))
    return ZINC_OK;
  zinc_pp_op o[2] = {pp_op(S, ZINC_PP_SEND_NEXT, S->output(S->ctx, k)),
                     pp_op(S, ZINC_PP_RECV_NEXT, S->grad)};
  return zinc_pp_transfer(e, o, 2);
}

/* the input gradient back, micro-batch k's input forward: one batch */
static inline zinc_status pp_send_backward_recv_forward(zinc_engine *e, const pp_stage *S, int k) {
  if (zinc_pp_is_first(e)) {
    S->feed(S->ctx, k);
    return ZINC_OK;
  }
  zinc_pp_op o[2] = {pp_op(S, ZINC_PP_SEND_PREV, S->grad),
                     pp_op(S, ZINC_PP_RECV_PREV, S->input(S->ctx, k))};
  return zinc_pp_transfer(e, o, 2);
}

/* One optimizer step of m micro-batches in 1F1B order. */
static inline zinc_status pp_1f1b(zinc_engine *e, int m, const pp_stage *S) {
  int p = zinc_pp_size(e), s = zinc_pp_rank(e);
  int warmup = p - s - 1 < m ? p - s - 1 : m, steady = m - warmup;
  for (int i = 0; i < warmup; i++) {
    PP_TRY(pp_recv_forward(e, S, i));
    S->forward(S->ctx, i);
    PP_TRY(pp_send_forward(e, S, i));
  }
  if (steady > 0)
    PP_TRY(pp_recv_forward(e, S, warmup));
  for (int i = 0; i < steady; i++) {
    S->forward(S->ctx, warmup + i);
    PP_TRY(pp_send_forward_recv_backward(e, S, warmup + i));
    S->backward(S->ctx, i);
    if (i == steady - 1)
      PP_TRY(pp_send_backward(e, S));
    else
      PP_TRY(pp_send_backward_recv_forward(e, S, warmup + i + 1));
    PP_TRY(S->done(S->ctx, i));
  }
  for (int i = steady; i < m; i++) {
    PP_TRY(pp_recv_backward(e, S));
    S->backward(S->ctx, i);
    PP_TRY(pp_send_backward(e, S));
    PP_TRY(S->done(S->ctx, i));
  }
  return ZINC_OK;
}

#endif /* PP_SCHEDULE_H */
