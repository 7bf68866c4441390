/*
 * trace.h — the trainer's calls in one micro-batch, recorded, followed
 * and agreed across ranks (trace.c), and the keys every collective point
 * of the training loop agrees with.
 */
#ifndef ZINC_ENGINE_TRACE_H
#define ZINC_ENGINE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* The trainer's calls in one micro-batch, recorded in the first one (and
 * again from the call where every rank changed them alike). Every later
 * micro-batch is compared with it event by event; collectives are issued in
 * the order these events dictate, so ranks that make the same calls issue
 * the same collectives (trace.c). */
typedef enum { ZINC_EV_FETCH = 0, ZINC_EV_RELEASE, ZINC_EV_READY,
               ZINC_EV_END /* backward_end: never recorded, only compared */ } zinc_event_kind;
/* Where a rank is when it agrees with its peers (zinc_trace_key): every
 * collective point of the training loop agrees first, with its own key, so
 * that ranks at different points learn it instead of waiting. */
enum { ZINC_KEY_EVENT = 1,  /* recording: this call (kind, module) */
       ZINC_KEY_DEVIATE,    /* this rank's call differs from the recording */
       ZINC_KEY_GATHER,     /* stage 3: the gather of a module */
       ZINC_KEY_REDUCE,     /* a gradient reduction */
       ZINC_KEY_CHECK,      /* backward_end's checks, before anything changes */
       ZINC_KEY_END,        /* backward_end, after this many calls */
       ZINC_KEY_EVAL_FETCH, /* a fetch inside eval_begin/eval_end (module) */
       ZINC_KEY_EVAL_END }; /* eval_end */
struct zinc_trace_event {
  int kind;               /* zinc_event_kind */
  int module;
};


/* -------------------------------------------------------------- trace.c */
/* Record (first micro-batch) or check one event of the trainer, and replay
 * the recorded event at this position (collectives follow the recording,
 * whatever this rank's trainer did). While recording, events that lead to
 * collectives are agreed across ranks first, so a rank that diverges gets
 * ZINC_ERR_INVALID (on every rank) instead of a collective that never
 * completes. */
zinc_status zinc_trace_event_add(zinc_engine *e, zinc_event_kind kind, zinc_module *m);
/* Replay the recorded events this micro-batch has not reached. */
zinc_status zinc_trace_replay_rest(zinc_engine *e);
/* One all-reduce that fails on every rank unless every rank is making the
 * same call (kind, module) now. */
zinc_status zinc_trace_agree(zinc_engine *e, zinc_event_kind kind, zinc_module *m);
/* Evaluation is collective at every stage: one all-reduce per fetch inside
 * eval_begin/eval_end (m) and one at eval_end (m NULL), failing on every
 * rank unless every rank makes the same call, so that work on some ranks
 * only is refused alike at stages 0-3 (stage 3 could not serve it). */
zinc_status zinc_trace_eval_agree(zinc_engine *e, zinc_module *m);
/* backward_end, before anything changes: a micro-batch that made fewer
 * calls than recorded is a deviation (collective only then, see
 * trace.c). */
zinc_status zinc_trace_end_check(zinc_engine *e);
/* zinc_backward_end's own check, before anything changes: ZINC_ERR_INVALID
 * (saying to use zinc_eval_begin/zinc_eval_end) when this micro-batch made
 * calls but handed out no gradient and reported no module, a forward pass
 * only; ZINC_OK otherwise. Local: the caller agrees on it. */
zinc_status zinc_trace_forward_only_check(const zinc_engine *e);
/* End of a micro-batch: every rank made the same number of calls (one
 * agreement); fix the trace after a recording micro-batch. */
zinc_status zinc_trace_end_micro(zinc_engine *e);
void zinc_trace_free(zinc_engine *e);

/* ----------------------------------------------------------- trace_key.c */
/* The agreement key for `tag` at call `pos` with event code `code`, and
 * its text for messages. */
int64_t zinc_trace_key(int tag, int64_t pos, int code);
void zinc_trace_key_text(const zinc_engine *e, int64_t key, char *buf, size_t n);
/* An event code (kind and module) as the trainer's call: fetch("name"). */
void zinc_trace_event_text(const zinc_engine *e, int code, char *buf, size_t n);

#endif /* ZINC_ENGINE_TRACE_H */
