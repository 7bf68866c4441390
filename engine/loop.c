/*
 * loop.c — the public entry points of the training loop: fetch and
 * release, the parameter and gradient pointers, grads_ready,
 * backward_end, step, eval_begin/eval_end, the lr override and the
 * timers. Each checks its arguments and the engine's state (a call in the
 * wrong order is ZINC_ERR_INVALID and changes nothing), keeps the phase
 * timers, and hands the work to the trace (trace.c), stage 3
 * (stage3/stage3.c), the gradient buffers (grads.c) and the step
 * (step.c).
 *
 * How a failure on one rank reaches the others and stops the engine is in
 * engine/failure.c.
 */
#include <math.h>

#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/memory/profiler.h"
#include "engine/monitor/monitor.h"
#include "engine/stage3/stage3.h"
#include "engine/step.h"
#include "engine/trace.h"

static zinc_status module_check(zinc_engine *e, zinc_module *m, const char *what) {
  ZINC_CHECK(zinc_engine_usable(e, what));
  if (!m)
    return zinc_error(ZINC_ERR_INVALID, "%s: module is NULL", what);
  if (m->engine != e || m->index >= e->nmodules || e->modules[m->index] != m)
    return zinc_error(ZINC_ERR_INVALID, "%s: module does not belong to this engine", what);
  return ZINC_OK;
}

static void micro_begin(zinc_engine *e) {
  if (e->mb_open)
    return;
  e->mb_open = 1;
  e->mb_ended = 0;
  zinc_grads_micro_begin(e);
}

/* Evaluation: the trainer's own order, agreed per fetch at every stage
 * (zinc_trace_eval_agree: stage 3 gathers, and stages 0-2 refuse what
 * stage 3 would). */
static zinc_status eval_fetch(zinc_engine *e, zinc_module *m) {
  zinc_status st = zinc_trace_eval_agree(e, m);
  if (st == ZINC_OK && e->cfg.stage == 3) {
    st = zinc_stage3_replay_fetch(e, m, -1);
    if (st == ZINC_OK)
      st = zinc_stage3_serve(e, m);
  }
  if (st != ZINC_OK)
    return zinc_engine_fail(e, st);
  m->fetched++;
  return ZINC_OK;
}

zinc_status zinc_eval_begin(zinc_engine *e) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_eval_begin"));
  if (e->mb_open || e->eval)
    return zinc_error(ZINC_ERR_INVALID, "zinc_eval_begin: %s", e->eval ? "already evaluating"
                      : "a micro-batch is in progress; evaluate between steps");
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_eval_begin: module \"%s\" is still fetched",
                        e->modules[mi]->name);
  if (e->cfg.stage == 3)
    ZINC_CHECK(zinc_stage3_invalidate(e));
  e->eval = 1;
  return ZINC_OK;
}

zinc_status zinc_eval_end(zinc_engine *e) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_eval_end"));
  if (!e->eval)
    return zinc_error(ZINC_ERR_INVALID, "zinc_eval_end without zinc_eval_begin");
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_eval_end: module \"%s\" is still fetched",
                        e->modules[mi]->name);
  zinc_status st = zinc_trace_eval_agree(e, NULL); /* every rank ends here */
  if (st == ZINC_OK && e->cfg.stage == 3)
    st = zinc_stage3_invalidate(e);
  if (st == ZINC_OK && e->param_location == ZINC_LOC_NVME) /* a parameter read failed:
                                                             the forward saw zeros */
    st = zinc_engine_agree_deferred(e);
  if (st != ZINC_OK)
    return zinc_engine_fail(e, st);
  e->eval = 0;
  return ZINC_OK;
}

int64_t zinc_step_count(const zinc_engine *e) { return e ? e->step : 0; }
int64_t zinc_micro_step_count(const zinc_engine *e) { return e ? e->micro_step : 0; }
int zinc_zero_stage(const zinc_engine *e) { return e ? e->cfg.stage : -1; }
const char *zinc_offload_name(const zinc_engine *e, int params) {
  if (!e)
    return "none";
  return zinc_offload_device_name(params ? e->cfg.offload_param.device
                                         : e->cfg.offload_optimizer.device);
}

/* Between zinc_backward_end and zinc_step the micro-batch is over: a call
 * that would start the next one is refused (nothing changes). */
static zinc_status after_backward_end(const zinc_engine *e, const char *what,
                                      const zinc_module *m) {
  if (!e->mb_ended)
    return ZINC_OK;
  return zinc_error(ZINC_ERR_INVALID, "%s(\"%s\"): the micro-batch ended at "
                    "zinc_backward_end; call zinc_step before the next micro-batch (to read "
                    "parameters between steps, fetch inside zinc_eval_begin/zinc_eval_end)",
                    what, m->name);
}

zinc_status zinc_module_fetch(zinc_engine *e, zinc_module *m) {
  ZINC_CHECK(module_check(e, m, "zinc_module_fetch"));
  if (e->eval)
    return eval_fetch(e, m);
  ZINC_CHECK(after_backward_end(e, "zinc_module_fetch", m));
  micro_begin(e);
  if (e->phase == ZINC_PHASE_IDLE)
    zinc_engine_phase(e, ZINC_PHASE_FORWARD);
  zinc_status st = zinc_trace_event_add(e, ZINC_EV_FETCH, m);
  if (st == ZINC_OK && e->cfg.stage == 3)
    st = zinc_stage3_serve(e, m);
  if (st != ZINC_OK)
    return zinc_engine_fail(e, st);
  m->fetched++;
  st = zinc_grads_poll(e); /* a reduction that failed in the background */
  return st == ZINC_OK ? ZINC_OK : zinc_engine_fail(e, st);
}

zinc_status zinc_module_release(zinc_engine *e, zinc_module *m) {
  ZINC_CHECK(module_check(e, m, "zinc_module_release"));
  if (m->fetched <= 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_module_release(\"%s\"): the module is not "
                      "fetched", m->name);
  m->fetched--;
  if (e->eval) {
    if (e->cfg.stage == 3 && m->fetched == 0) {
      m->replay_held = 1;
      zinc_status st = zinc_stage3_replay_release(e, m, -1);
      zinc_stage3_unserve(e, m);
      if (st != ZINC_OK)
        return zinc_engine_fail(e, st);
    }
    return ZINC_OK;
  }
  zinc_status st = zinc_trace_event_add(e, ZINC_EV_RELEASE, m);
  if (st != ZINC_OK)
    return zinc_engine_fail(e, st);
  if (e->cfg.stage == 3)
    zinc_stage3_unserve(e, m);
  return ZINC_OK;
}

void *zinc_param_data(zinc_param *p) {
  if (!p) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_data: parameter is NULL");
    return NULL;
  }
  zinc_engine *e = p->engine;
  if (zinc_engine_usable(e, "zinc_param_data") != ZINC_OK)
    return NULL;
  if (p->module->fetched <= 0) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_data(\"%s.%s\"): module \"%s\" is not fetched; "
               "call zinc_module_fetch first", p->module->name, p->name, p->module->name);
    return NULL;
  }
  const zinc_segment *seg = &p->module->segs[p->segment];
  if (!seg->full) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_data(\"%s.%s\"): no gathered copy", p->module->name,
               p->name);
    return NULL;
  }
  return (char *)seg->full + (size_t)p->seg_offset * zinc_dtype_size(p->dtype);
}

void *zinc_param_grad(zinc_param *p) {
  if (!p) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_grad: parameter is NULL");
    return NULL;
  }
  zinc_engine *e = p->engine;
  zinc_module *m = p->module;
  if (zinc_engine_usable(e, "zinc_param_grad") != ZINC_OK)
    return NULL;
  if (p->frozen) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_grad(\"%s.%s\"): the parameter is frozen "
               "(zinc_param_set_frozen): it takes no gradient", m->name, p->name);
    return NULL;
  }
  if (e->eval) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_grad(\"%s.%s\"): no gradients between "
               "zinc_eval_begin and zinc_eval_end", m->name, p->name);
    return NULL;
  }
  if (m->fetched <= 0) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_grad(\"%s.%s\"): module \"%s\" is not fetched "
               "(gradients are only handed out between fetch and release)", m->name, p->name,
               m->name);
    return NULL;
  }
  if (m->grad_state == ZINC_GRAD_READY) {
    zinc_error(ZINC_ERR_INVALID, "zinc_param_grad(\"%s.%s\"): zinc_module_grads_ready was "
               "already called for \"%s\" in this micro-batch", m->name, p->name, m->name);
    return NULL;
  }
  if (e->phase != ZINC_PHASE_BACKWARD)
    zinc_engine_phase(e, ZINC_PHASE_BACKWARD);
  if (m->grad_state == ZINC_GRAD_NONE) {
    zinc_status st = zinc_grads_open(e, m);
    if (st != ZINC_OK) {
      zinc_engine_fail(e, st);
      return NULL;
    }
  }
  const zinc_segment *seg = &m->segs[p->segment];
  return (char *)seg->grad + (size_t)p->seg_offset * zinc_dtype_size(p->dtype);
}

zinc_status zinc_module_grads_ready(zinc_engine *e, zinc_module *m) {
  ZINC_CHECK(module_check(e, m, "zinc_module_grads_ready"));
  if (e->eval)
    return zinc_error(ZINC_ERR_INVALID, "zinc_module_grads_ready(\"%s\"): inside "
                      "zinc_eval_begin/zinc_eval_end", m->name);
  if (m->grad_state == ZINC_GRAD_READY)
    return zinc_error(ZINC_ERR_INVALID, "zinc_module_grads_ready(\"%s\"): called twice in one "
                      "micro-batch; report a module once, after its last backward use",
                      m->name);
  ZINC_CHECK(after_backward_end(e, "zinc_module_grads_ready", m));
  micro_begin(e);
  if (e->phase != ZINC_PHASE_BACKWARD)
    zinc_engine_phase(e, ZINC_PHASE_BACKWARD);
  zinc_status st = zinc_trace_event_add(e, ZINC_EV_READY, m);
  if (st == ZINC_OK)
    st = zinc_grads_ready(e, m);
  return st == ZINC_OK ? ZINC_OK : zinc_engine_fail(e, st);
}

zinc_status zinc_backward_end(zinc_engine *e) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_backward_end"));
  if (e->eval)
    return zinc_error(ZINC_ERR_INVALID, "zinc_backward_end inside zinc_eval_begin/zinc_eval_end");
  micro_begin(e);
  /* Misuse that would leave a gradient unreduced or a module held across
   * the step, found on any rank, is refused on every rank before anything
   * changes: the trainer can put it right and call again. Ranks that are
   * not all here fail (the key differs). */
  zinc_status st = ZINC_OK;
  for (int mi = 0; mi < e->nmodules && st == ZINC_OK; mi++) {
    const zinc_module *m = e->modules[mi];
    if (m->fetched > 0)
      st = zinc_error(ZINC_ERR_INVALID, "zinc_backward_end: module \"%s\" is still fetched "
                      "on rank %d; release every module before zinc_backward_end (nothing "
                      "changed: release it and call zinc_backward_end again)", m->name,
                      e->dp_rank);
    else if (m->grad_state == ZINC_GRAD_OPEN)
      st = zinc_error(ZINC_ERR_INVALID, "zinc_backward_end: the gradient of module \"%s\" "
                      "was handed out on rank %d in this micro-batch but never reported with "
                      "zinc_module_grads_ready, so it would never be reduced; call "
                      "zinc_module_grads_ready after the module's last backward use (nothing "
                      "changed: report it and call zinc_backward_end again)", m->name,
                      e->dp_rank);
  }
  if (st == ZINC_OK)
    st = zinc_trace_forward_only_check(e);
  zinc_agreement a;
  st = zinc_engine_agree_at(e, e->dp_host, st, zinc_trace_key(ZINC_KEY_CHECK, 0, 0), &a);
  if (st != ZINC_OK && a.lo == a.hi && a.lo == zinc_trace_key(ZINC_KEY_CHECK, 0, 0))
    return st; /* refused on every rank, nothing changed */
  if (st == ZINC_OK)
    st = zinc_trace_end_check(e);
  if (st == ZINC_OK)
    st = zinc_trace_replay_rest(e);
  if (st == ZINC_OK)
    st = zinc_grads_flush(e);
  if (st == ZINC_OK)
    st = zinc_trace_end_micro(e);
  if (st == ZINC_OK && e->param_location == ZINC_LOC_NVME) /* before anything is stepped */
    st = zinc_engine_agree_deferred(e);
  if (st != ZINC_OK)
    return zinc_engine_fail(e, st);
  e->mb_open = 0;
  e->mb_ended = 1;
  zinc_engine_phase(e, ZINC_PHASE_IDLE);
  return ZINC_OK;
}

zinc_status zinc_engine_set_lr(zinc_engine *e, double lr) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_engine_set_lr"));
  if (!isfinite(lr))
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_set_lr: lr %g is not finite (a negative "
                      "lr goes back to the config's scheduler)", lr);
  e->lr_override = lr < 0 ? -1.0 : lr;
  return ZINC_OK;
}

zinc_status zinc_step(zinc_engine *e, zinc_step_info *info) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_step"));
  if (e->eval)
    return zinc_error(ZINC_ERR_INVALID, "zinc_step inside zinc_eval_begin/zinc_eval_end");
  if (!e->mb_ended)
    return zinc_error(ZINC_ERR_INVALID, "zinc_step: call zinc_backward_end after the "
                      "micro-batch's backward pass before zinc_step");
  for (int mi = 0; mi < e->nmodules; mi++)
    if (e->modules[mi]->fetched > 0)
      return zinc_error(ZINC_ERR_INVALID, "zinc_step: module \"%s\" is still fetched; release "
                        "every module before the step", e->modules[mi]->name);
  if (info) /* checked before anything moves: a bad size changes nothing */
    ZINC_CHECK(zinc_abi_check(info, "zinc_step_info", "ZINC_STEP_INFO_INIT"));
  zinc_step_info full = ZINC_STEP_INFO_INIT;
  e->mb_ended = 0;
  zinc_engine_phase(e, ZINC_PHASE_STEP);
  zinc_status st = zinc_step_run(e, &full);
  zinc_engine_phase(e, ZINC_PHASE_IDLE);
  if (st == ZINC_OK && full.boundary)
    zinc_prof_step_done(e->prof);
  if (st == ZINC_OK)
    zinc_monitor_step(e, &full);
  if (info)
    zinc_abi_write(info, &full, sizeof full, "zinc_step_info", "ZINC_STEP_INFO_INIT");
  return st == ZINC_OK ? ZINC_OK : zinc_engine_fail(e, st);
}

zinc_status zinc_timers_take(zinc_engine *e, zinc_timers *out) {
  if (!e || !out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_timers_take: NULL argument");
  zinc_timers t = ZINC_TIMERS_INIT;
  ZINC_CHECK(zinc_abi_check(out, "zinc_timers", "ZINC_TIMERS_INIT"));
  zinc_engine_phase(e, e->phase); /* close the running interval */
  t.forward = e->t_forward;
  t.backward = e->t_backward;
  t.step = e->t_step;
  t.comm_wait = e->t_comm_wait;
  e->t_taken[0] += t.forward;
  e->t_taken[1] += t.backward;
  e->t_taken[2] += t.step;
  e->t_taken[3] += t.comm_wait;
  e->t_forward = e->t_backward = e->t_step = e->t_comm_wait = 0;
  return zinc_abi_write(out, &t, sizeof t, "zinc_timers", "ZINC_TIMERS_INIT");
}
