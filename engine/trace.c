/*
 * trace.c — the order of the trainer's calls (fetch, release, grads_ready),
 * recorded in the first micro-batch and held to afterwards.
 *
 * Why: the engine issues collectives in response to these calls (stage 3
 * gathers on fetch, reductions on grads_ready); ranks that make different
 * calls would issue different collectives and hang or mix up buffers.
 *  - While recording (the first micro-batch), every event that leads to a
 *    collective is first agreed across the data-parallel ranks with one small
 *    all-reduce; a disagreement fails on every rank, naming the modules.
 *  - Afterwards each event is compared locally with the recording; the
 *    engine keeps issuing collectives in the recorded order (grads.c,
 *    stage3.c), and at backward_end one all-reduce tells every rank whether
 *    any rank deviated, and where: the step then fails on every rank with
 *    ZINC_ERR_INVALID naming the first module where the orders differ.
 * The recording also yields what stage 3 needs to know ahead: the order of
 * fetches (prefetch) and which uses are followed soon by another use of the
 * same module (stage3_max_reuse_distance).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static const char *kind_name(int kind) {
  return kind == ZINC_EV_FETCH ? "fetch" : kind == ZINC_EV_RELEASE ? "release" : "grads_ready";
}

static int leads_to_collective(const zinc_engine *e, zinc_event_kind kind) {
  if (kind == ZINC_EV_READY)
    return 1;
  return kind == ZINC_EV_FETCH && e->cfg.stage == 3;
}

/* One all-reduce: max of (code) and max of (-code) = -min. */
zinc_status zinc_trace_agree(zinc_engine *e, zinc_event_kind kind, zinc_module *m) {
  int32_t code = (int32_t)kind * (int32_t)(e->nmodules + 1) + m->index;
  int32_t v[2] = {code, -code};
  ZINC_CHECK(zinc_comm_allreduce(e->dp_host, v, v, 2, ZINC_DT_I32, ZINC_OP_MAX));
  if (v[0] == -v[1])
    return ZINC_OK;
  int n1 = e->nmodules + 1;
  int hi = v[0], lo = -v[1];
  return zinc_error(ZINC_ERR_INVALID,
                    "ranks disagree at call %d of %s: some rank called "
                    "%s(\"%s\") where another called %s(\"%s\"); every data-parallel rank must "
                    "fetch, release and report modules in the same order",
                    e->ntrace + 1, e->eval ? "an evaluation" : "the first micro-batch",
                    kind_name(lo / n1), e->modules[lo % n1]->name,
                    kind_name(hi / n1), e->modules[hi % n1]->name);
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
  }
  return ZINC_OK;
}

zinc_status zinc_trace_event_add(zinc_engine *e, zinc_event_kind kind, zinc_module *m) {
  if (e->recording) {
    if (leads_to_collective(e, kind) && e->dp_size > 1) {
      zinc_status st = zinc_trace_agree(e, kind, m);
      if (st != ZINC_OK)
        return zinc_engine_fail(e, st);
    }
    ZINC_CHECK(zinc_grow((void **)&e->trace, &e->trace_cap, e->ntrace + 1, sizeof *e->trace,
                         "recorded calls"));
    e->trace[e->ntrace++] = (zinc_trace_event){.kind = kind, .module = m->index};
    return replay_event(e, e->ntrace - 1);
  }
  int pos = e->trace_pos++;
  int match = pos < e->ntrace && e->trace[pos].kind == (int)kind &&
              e->trace[pos].module == m->index;
  if (!match && e->deviation < 0) {
    e->deviation = pos;
    e->deviation_kind = kind;
    e->deviation_module = m->index;
    zinc_log(ZINC_LOG_WARN, "call %d of this micro-batch, %s(\"%s\"), differs from the "
             "recorded order (%s); the step will fail on every rank", pos + 1,
             kind_name(kind), m->name,
             pos < e->ntrace ? e->modules[e->trace[pos].module]->name : "past its end");
  }
  return pos < e->ntrace ? replay_event(e, pos) : ZINC_OK;
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
  ZINC_CHECK(zinc_calloc((void **)&e->ready_seq, (size_t)e->ntrace + 1, sizeof *e->ready_seq,
                         "module order"));
  e->nready_seq = 0;
  for (int i = 0; i < e->ntrace; i++)
    if (e->trace[i].kind == ZINC_EV_READY)
      e->ready_seq[e->nready_seq++] = e->trace[i].module;
  ZINC_CHECK(compute_reuse(e));
  /* Confirm that every rank recorded the same number of events (the
   * per-event agreement covered the collectives; this covers the rest). */
  if (e->dp_size > 1) {
    int32_t v[2] = {e->ntrace, -e->ntrace};
    ZINC_CHECK(zinc_comm_allreduce(e->dp_host, v, v, 2, ZINC_DT_I32, ZINC_OP_MAX));
    if (v[0] != -v[1])
      return zinc_error(ZINC_ERR_INVALID, "ranks made different numbers of fetch/release/"
                        "grads_ready calls in the first micro-batch (%d to %d); every "
                        "data-parallel rank must make the same calls", -v[1], v[0]);
  }
  zinc_log0(ZINC_LOG_DEBUG, "module order recorded: %d calls, %d reductions", e->ntrace,
            e->nready_seq);
  return ZINC_OK;
}

zinc_status zinc_trace_end_micro(zinc_engine *e) {
  if (e->recording)
    return finish_recording(e);
  int local = e->deviation >= 0 ? e->deviation : (e->trace_pos != e->ntrace ? e->trace_pos
                                                                              : INT_MAX);
  e->trace_pos = 0;
  int dev_kind = e->deviation_kind, dev_module = e->deviation_module;
  if (e->deviation < 0 && local != INT_MAX) {
    dev_kind = -1; /* fewer calls than recorded */
    dev_module = -1;
  }
  e->deviation = -1;
  int32_t earliest = local;
  if (e->dp_size > 1)
    ZINC_CHECK(zinc_comm_allreduce(e->dp_host, &earliest, &earliest, 1, ZINC_DT_I32, ZINC_OP_MIN));
  if (earliest == INT_MAX)
    return ZINC_OK;
  const char *expected = earliest < e->ntrace ? e->modules[e->trace[earliest].module]->name
                                              : "(end of the recorded calls)";
  const char *expected_kind = earliest < e->ntrace ? kind_name(e->trace[earliest].kind) : "";
  if (local == earliest && dev_module >= 0)
    return zinc_error(ZINC_ERR_INVALID, "this rank called %s(\"%s\") at call %d of a "
                      "micro-batch where the recorded order has %s(\"%s\"); every "
                      "data-parallel rank must fetch, release and report modules in the same "
                      "order every micro-batch", kind_name(dev_kind),
                      e->modules[dev_module]->name, earliest + 1, expected_kind, expected);
  return zinc_error(ZINC_ERR_INVALID, "a data-parallel rank deviated from the recorded module "
                    "order at call %d of a micro-batch (expected %s(\"%s\")); every rank "
                    "must fetch, release and report modules in the same order", earliest + 1,
                    expected_kind, expected);
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
