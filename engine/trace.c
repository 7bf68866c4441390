/*
 * trace.c — the order of the trainer's calls (fetch, release, grads_ready),
 * recorded in the first micro-batch, followed afterwards, and recorded
 * again when every rank changes it the same way.
 *
 * Why: the engine issues collectives in response to these calls (stage 3
 * gathers on fetch, reductions on grads_ready); ranks that make different
 * calls would issue different collectives and hang or mix up buffers.
 *  - While recording, every event that leads to a collective is first
 *    agreed across the data-parallel ranks with one small all-reduce; a
 *    disagreement fails on every rank, naming the modules.
 *  - Afterwards each event is compared locally with the recording, and the
 *    engine issues collectives in the recorded order (grads.c, stage3.c)
 *    with prefetch ahead of the trainer and no per-event agreement.
 *  - A rank whose call differs from the recording (or that ends the
 *    micro-batch early) stops there and agrees with its peers
 *    (zinc_engine_agree_at, key "deviation at call p: this call"). Every
 *    collective point of the training loop starts with such an agreement
 *    (the stage-3 gather, the gradient reduction, backward_end), so a peer
 *    that did not deviate meets it at its next collective point and learns
 *    of the deviation there: ZINC_ERR_INVALID on every rank within the time
 *    the trainers take to reach it, and the engine stops.
 *  - When every rank deviates at the same call in the same way (a dropped
 *    layer, an unused expert, a branch not taken), the ranks record again
 *    from that call on (as DeepSpeed invalidates its trace when the order
 *    changes): the calls before it are kept, the rest of the micro-batch is
 *    recorded with per-event agreement, and the new order is followed from
 *    the next micro-batch on.
 *  - A micro-batch that fetched and released modules without any gradient
 *    is forward-only work outside zinc_eval_begin/zinc_eval_end. Where it
 *    ends (backward_end, also in the micro-batch being recorded) it is
 *    refused on every rank before anything changes; where it starts over
 *    (fetches the recorded first module again) it differs from the
 *    recording and fails on every rank; both say to use
 *    zinc_eval_begin/zinc_eval_end. While recording, a forward pass that
 *    starts over cannot be told from a model that runs its forward twice
 *    (two views of one batch) or fetches its first module again: it is
 *    recorded with the order. The next micro-batch tells: where it does not
 *    start the recorded pass again (a deviation where the recording, with
 *    nothing held and no gradient yet, repeated its calls so far) it fails
 *    on every rank with the same advice, at the first step instead of at
 *    the next evaluation, hours later.
 * The recording also yields what stage 3 needs to know ahead: the order of
 * fetches (prefetch) and which uses are followed soon by another use of the
 * same module (stage3_max_reuse_distance).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/stage3/stage3.h"
#include "engine/trace.h"

static int leads_to_collective(const zinc_engine *e, zinc_event_kind kind) {
  if (kind == ZINC_EV_READY)
    return 1;
  return kind == ZINC_EV_FETCH && e->cfg.stage == 3;
}

/* An event as one number: kind and module (backward_end: no module). */
static int event_code(const zinc_engine *e, int kind, const zinc_module *m) {
  return kind * (e->nmodules + 1) + (m ? m->index : e->nmodules);
}

zinc_status zinc_trace_eval_agree(zinc_engine *e, zinc_module *m) {
  if (e->dp_size < 2)
    return ZINC_OK;
  int64_t key = m ? zinc_trace_key(ZINC_KEY_EVAL_FETCH, 0, m->index)
                  : zinc_trace_key(ZINC_KEY_EVAL_END, 0, 0);
  return zinc_engine_agree_at(e, e->dp_host, ZINC_OK, key, NULL);
}

/* One agreement: every rank is making the same call (kind, module) now. */
zinc_status zinc_trace_agree(zinc_engine *e, zinc_event_kind kind, zinc_module *m) {
  return zinc_engine_agree_at(e, e->dp_host, ZINC_OK,
                              zinc_trace_key(ZINC_KEY_EVENT, e->eval ? 0 : e->ntrace,
                                             event_code(e, kind, m)), NULL);
}

/* The engine's side of recorded event k: the collectives and frees it
 * implies, identical on every rank. */
static zinc_status replay_event(zinc_engine *e, int k) {
  zinc_trace_event ev = e->trace[k];
  zinc_module *x = e->modules[ev.module];
  switch ((zinc_event_kind)ev.kind) {
  case ZINC_EV_FETCH:
    return e->cfg.stage == 3 ? zinc_stage3_replay_fetch(e, x, k) : ZINC_OK;
  case ZINC_EV_RELEASE:
    return e->cfg.stage == 3 ? zinc_stage3_replay_release(e, x, k) : ZINC_OK;
  case ZINC_EV_READY:
    return zinc_grads_replay_ready(e, x);
  case ZINC_EV_END:
    break; /* never recorded */
  }
  return ZINC_OK;
}

/* No gradient handed out or reported in this micro-batch, nothing held,
 * and the trainer starts over (fetches the micro-batch's first module
 * again) or ends it: the calls so far were a forward pass only. */
static int forward_only(const zinc_engine *e, int pos, int kind, const zinc_module *m) {
  if (pos == 0 || e->ntrace == 0)
    return 0;
  if (!(kind == ZINC_EV_END || (kind == ZINC_EV_FETCH && m->index == e->trace[0].module)))
    return 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0 || e->modules[mi]->grad_state != ZINC_GRAD_NONE)
      return 0;
  return 1;
}

/* The recording's first pos calls, without a grads_ready, ran again from
 * pos on (a forward pass, then the same pass), and this micro-batch, which
 * made those pos calls and holds nothing, has handed out no gradient and
 * does not start them again: the recorded first pass was forward-only work
 * (evaluation, sampling) before the first training micro-batch, recorded
 * with it. (A model that runs its forward twice does so in every
 * micro-batch, and never deviates here.) */
static int recorded_forward_twice(const zinc_engine *e, int pos) {
  if (pos == 0 || 2 * pos > e->ntrace || e->trace[0].kind != ZINC_EV_FETCH)
    return 0;
  for (int k = 0; k < pos; k++)
    if (e->trace[k].kind == ZINC_EV_READY || e->trace[k].kind != e->trace[pos + k].kind ||
        e->trace[k].module != e->trace[pos + k].module)
      return 0;
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0 || e->modules[mi]->grad_state != ZINC_GRAD_NONE)
      return 0;
  return 1;
}

static zinc_status forward_only_error(const zinc_engine *e, int calls, const char *before) {
  return zinc_error(ZINC_ERR_INVALID, "rank %d: the %d calls of this micro-batch before %s "
                    "fetched and released modules without any gradient, a forward pass only "
                    "(evaluation or sampling outside evaluation mode); use "
                    "zinc_eval_begin/zinc_eval_end around forward-only work, after zinc_step",
                    e->dp_rank, calls, before);
}

zinc_status zinc_trace_forward_only_check(const zinc_engine *e) {
  int calls = e->recording ? e->ntrace : e->trace_pos;
  if (calls == 0)
    return ZINC_OK;
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->grad_state != ZINC_GRAD_NONE)
      return ZINC_OK;
  return forward_only_error(e, calls, "backward_end()");
}

/* Record again from call pos on: the calls before it stay. */
static void rerecord(zinc_engine *e, int pos) {
  char want[96] = "the end of the recorded calls";
  if (pos < e->ntrace)
    zinc_trace_event_text(e, event_code(e, e->trace[pos].kind, e->modules[e->trace[pos].module]),
                          want, sizeof want);
  zinc_log0(ZINC_LOG_INFO, "the module order changed on every rank at call %d of micro-batch "
            "%lld (where the recorded order has %s); recording it again", pos + 1,
            (long long)e->micro_step, want);
  e->ntrace = pos;
  e->trace_pos = 0;
  e->recording = 1;
  e->rerecorded = 1;
  free(e->ready_seq);
  free(e->keep_at_release);
  e->ready_seq = NULL;
  e->keep_at_release = NULL;
  e->nready_seq = 0;
}

/* This rank's call at pos differs from the recording (m NULL: backward_end
 * came early). Collective with the peers' next agreement: ZINC_OK when
 * every rank made this same call here (the order is recorded again from
 * here), else ZINC_ERR_INVALID on every rank. */
static zinc_status deviate(zinc_engine *e, int pos, int kind, zinc_module *m) {
  char got[96], want[96] = "the end of the recorded calls";
  zinc_trace_event_text(e, event_code(e, kind, m), got, sizeof got);
  if (pos < e->ntrace)
    zinc_trace_event_text(e, event_code(e, e->trace[pos].kind, e->modules[e->trace[pos].module]),
                          want, sizeof want);
  int fwd = forward_only(e, pos, kind, m);
  zinc_status st;
  if (fwd) {
    st = forward_only_error(e, pos, got);
  } else if (recorded_forward_twice(e, pos)) {
    fwd = 1;
    st = zinc_error(ZINC_ERR_INVALID, "rank %d: the first micro-batch, which recorded the module "
                    "order, made its first %d calls twice before any gradient (a forward pass, "
                    "then the same pass again), and micro-batch %lld calls %s where the second "
                    "pass began: the first pass was forward-only work (evaluation or sampling) "
                    "before the first training micro-batch, outside evaluation mode; use "
                    "zinc_eval_begin/zinc_eval_end around forward-only work, after zinc_step (a "
                    "model that runs its forward pass twice must do so in every micro-batch)",
                    e->dp_rank, pos, (long long)e->micro_step, got);
  } else
    st = zinc_error(ZINC_ERR_INVALID, "rank %d called %s at call %d of micro-batch %lld where "
                    "the recorded module order has %s; the data-parallel ranks did not all "
                    "change the order this way: every rank must fetch, release and report "
                    "modules in the same order", e->dp_rank, got, pos + 1,
                    (long long)e->micro_step, want);
  zinc_agreement a;
  zinc_status ast = zinc_engine_agree_at(
      e, e->dp_host, st, zinc_trace_key(ZINC_KEY_DEVIATE, pos, event_code(e, kind, m)), &a);
  if (!fwd && a.all_failed && a.lo == a.hi) {
    rerecord(e, pos);
    return ZINC_OK;
  }
  return ast == ZINC_OK ? st : ast;
}

static zinc_status record(zinc_engine *e, zinc_event_kind kind, zinc_module *m, int agreed) {
  if (!agreed && leads_to_collective(e, kind) && e->dp_size > 1)
    ZINC_CHECK(zinc_trace_agree(e, kind, m));
  ZINC_CHECK(zinc_grow((void **)&e->trace, &e->trace_cap, e->ntrace + 1, sizeof *e->trace,
                       "recorded calls"));
  e->trace[e->ntrace++] = (zinc_trace_event){.kind = kind, .module = m->index};
  return replay_event(e, e->ntrace - 1);
}

zinc_status zinc_trace_event_add(zinc_engine *e, zinc_event_kind kind, zinc_module *m) {
  /* With a pipeline (stages 0-2), fetch and release issue no collective
   * and a 1F1B stage runs other micro-batches' forward passes between a
   * micro-batch's backward passes, in an order that changes from the
   * warm-up to the drain: only the reductions are recorded and followed. */
  if (kind != ZINC_EV_READY && zinc_pp_size(e) > 1)
    return ZINC_OK;
  if (e->recording)
    return record(e, kind, m, 0);
  int pos = e->trace_pos;
  if (pos < e->ntrace && e->trace[pos].kind == (int)kind && e->trace[pos].module == m->index) {
    e->trace_pos++;
    return replay_event(e, pos);
  }
  ZINC_CHECK(deviate(e, pos, kind, m));
  return record(e, kind, m, 1);
}

zinc_status zinc_trace_end_check(zinc_engine *e) {
  if (e->recording || e->trace_pos == e->ntrace)
    return ZINC_OK;
  return deviate(e, e->trace_pos, ZINC_EV_END, NULL);
}

zinc_status zinc_trace_replay_rest(zinc_engine *e) {
  if (e->recording)
    return ZINC_OK;
  for (int k = e->trace_pos; k < e->ntrace; k++)
    ZINC_CHECK(replay_event(e, k));
  return ZINC_OK;
}

/* Stage 3: at RELEASE event k of module m, keep m's gathered copy if its
 * next fetch comes within stage3_max_reuse_distance gathered elements. */
static zinc_status compute_reuse(zinc_engine *e) {
  ZINC_CHECK(zinc_calloc((void **)&e->keep_at_release, (size_t)e->ntrace + 1, 1,
                         "reuse plan"));
  for (int k = 0; k < e->ntrace; k++) {
    if (e->trace[k].kind != ZINC_EV_RELEASE)
      continue;
    int mod = e->trace[k].module;
    int64_t between = 0;
    for (int j = k + 1; j < e->ntrace; j++) {
      if (e->trace[j].kind != ZINC_EV_FETCH)
        continue;
      if (e->trace[j].module == mod) {
        e->keep_at_release[k] = between <= e->cfg.stage3_max_reuse_distance;
        break;
      }
      between += e->modules[e->trace[j].module]->gather_numel;
    }
  }
  return ZINC_OK;
}

static zinc_status finish_recording(zinc_engine *e) {
  e->recording = 0;
  e->trace_pos = 0;
  ZINC_CHECK(zinc_calloc((void **)&e->ready_seq, (size_t)e->ntrace + 1, sizeof *e->ready_seq,
                         "module order"));
  e->nready_seq = 0;
  for (int i = 0; i < e->ntrace; i++)
    if (e->trace[i].kind == ZINC_EV_READY)
      e->ready_seq[e->nready_seq++] = e->trace[i].module;
  ZINC_CHECK(compute_reuse(e));
  /* copies the old order prefetched or kept for reuse go; the new order
   * gathers what it needs (the same on every rank) */
  if (e->rerecorded && e->cfg.stage == 3)
    ZINC_CHECK(zinc_stage3_invalidate(e));
  e->rerecorded = 0;
  zinc_log0(ZINC_LOG_DEBUG, "module order recorded: %d calls, %d reductions", e->ntrace,
            e->nready_seq);
  return ZINC_OK;
}

zinc_status zinc_trace_end_micro(zinc_engine *e) {
  /* every rank made the same number of calls: the per-event agreement (while
   * recording) and the deviation check (afterwards) covered which ones */
  int64_t calls = e->recording ? e->ntrace : e->trace_pos;
  ZINC_CHECK(zinc_engine_agree_at(e, e->dp_host, ZINC_OK,
                                  zinc_trace_key(ZINC_KEY_END, calls, 0), NULL));
  if (e->recording)
    return finish_recording(e);
  e->trace_pos = 0;
  return ZINC_OK;
}

void zinc_trace_free(zinc_engine *e) {
  free(e->trace);
  free(e->ready_seq);
  free(e->keep_at_release);
  e->trace = NULL;
  e->ready_seq = NULL;
  e->keep_at_release = NULL;
  e->ntrace = e->trace_cap = e->nready_seq = 0;
}
