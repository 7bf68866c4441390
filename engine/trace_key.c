/*
 * trace_key.c — the agreement keys: where a rank is in the training loop
 * when it agrees with its peers (trace.h's ZINC_KEY_*), as one number that
 * every rank's agreement carries (zinc_trace_key), and as words for the
 * message that names both points when ranks are at different ones
 * (zinc_trace_key_text; failure.c's zinc_engine_agree_at). It reads the
 * registered modules' names and calls nothing in the engine, so failure
 * agreement stays at the bottom.
 */
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/trace.h"

static const char *kind_name(int kind) {
  return kind == ZINC_EV_FETCH ? "fetch" : kind == ZINC_EV_RELEASE ? "release"
         : kind == ZINC_EV_READY ? "grads_ready" : "backward_end";
}

int64_t zinc_trace_key(int tag, int64_t pos, int code) {
  return ((int64_t)tag << 56) | ((pos & 0xffffffffll) << 24) | ((int64_t)code & 0xffffff);
}

void zinc_trace_event_text(const zinc_engine *e, int code, char *buf, size_t n) {
  int n1 = e->nmodules + 1, kind = code / n1, mod = code % n1;
  if (kind == ZINC_EV_END || mod >= e->nmodules)
    snprintf(buf, n, "backward_end()");
  else
    snprintf(buf, n, "%s(\"%s\")", kind_name(kind), e->modules[mod]->name);
}

void zinc_trace_key_text(const zinc_engine *e, int64_t key, char *buf, size_t n) {
  int tag = (int)(key >> 56);
  int64_t pos = (key >> 24) & 0xffffffffll;
  int code = (int)(key & 0xffffff);
  char ev[96];
  switch (tag) {
  case ZINC_KEY_EVENT:
  case ZINC_KEY_DEVIATE:
    zinc_trace_event_text(e, code, ev, sizeof ev);
    snprintf(buf, n, "call %lld of the micro-batch, %s", (long long)pos + 1, ev);
    break;
  case ZINC_KEY_GATHER:
    snprintf(buf, n, "the gather of module \"%s\"",
             code < e->nmodules ? e->modules[code]->name : "?");
    break;
  case ZINC_KEY_REDUCE: snprintf(buf, n, "a gradient reduction"); break;
  case ZINC_KEY_CHECK: snprintf(buf, n, "the start of zinc_backward_end"); break;
  case ZINC_KEY_END:
    snprintf(buf, n, "the end of zinc_backward_end after %lld calls", (long long)pos);
    break;
  case ZINC_KEY_EVAL_FETCH:
    snprintf(buf, n, "zinc_module_fetch(\"%s\") inside zinc_eval_begin/zinc_eval_end "
             "(evaluation is collective at every stage: every data-parallel rank fetches the "
             "same modules)", code < e->nmodules ? e->modules[code]->name : "?");
    break;
  case ZINC_KEY_EVAL_END: snprintf(buf, n, "zinc_eval_end"); break;
  default: snprintf(buf, n, "a collective outside the micro-batch (step, checkpoint, build)");
  }
}
