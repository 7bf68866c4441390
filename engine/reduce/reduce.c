/*
 * reduce.c — the reducer table: which method the configuration selects
 * (the first row of ZINC_REDUCERS that answers), the reducer's state
 * (e->rd), and the dispatch wrappers that run a row's hook or, when the
 * row leaves it unset, the plain reducer's behaviour (reduce.h). The plain
 * reducer's codec transport (compress.c) is set up for every method: the
 * buckets a method does not take travel through it.
 */
#include <stdlib.h>

#include "engine/reduce/methods.h"
#include "engine/support.h"

/* The methods, in selection order: one row each (a method's file defines
 * zinc_reducer_<name>). */
#define ZINC_REDUCERS(X) X(powersgd) X(dga) X(onebit_adam) X(zoadam) X(onebit_lamb) X(dgc)

#define ZINC_REDUCER_EXTERN(name) extern const zinc_reducer zinc_reducer_##name;
ZINC_REDUCERS(ZINC_REDUCER_EXTERN)
#define ZINC_REDUCER_ROW(name) &zinc_reducer_##name,
static const zinc_reducer *const table[] = {ZINC_REDUCERS(ZINC_REDUCER_ROW)};

static const zinc_reducer plain = {.name = "plain"};

const zinc_reducer *zinc_reducer_select(const zinc_settings *s) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i]->selects && table[i]->selects(s))
      return table[i];
  return &plain;
}

static const zinc_reducer *row(const zinc_engine *e) {
  return e->rd && e->rd->method ? e->rd->method : &plain;
}

zinc_status zinc_reduce_init(zinc_engine *e) {
  if (!e->rd)
    ZINC_CHECK(zinc_calloc((void **)&e->rd, 1, sizeof *e->rd, "the reducer's state"));
  e->rd->method = zinc_reducer_select(&e->cfg);
  ZINC_CHECK(zinc_compress_init(e));
  ZINC_CHECK(zinc_compress_scratch(e));
  return e->rd->method->init ? e->rd->method->init(e) : ZINC_OK;
}

void zinc_reduce_free(zinc_engine *e) {
  if (!e->rd)
    return;
  if (row(e)->free)
    row(e)->free(e);
  zinc_compress_free(e);
  zinc_compress_scratch_free(e);
  free(e->rd);
  e->rd = NULL;
}

void zinc_reduce_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]) {
  const zinc_reducer *r = zinc_reducer_select(&e->cfg);
  zinc_compress_sizes(e, bytes);
  if (r->sizes)
    r->sizes(e, bytes);
}

const char *zinc_reduce_cpu_only(const zinc_settings *s) { return zinc_reducer_select(s)->cpu_only; }

int zinc_reduce_owns_momentum(const zinc_engine *e) {
  const zinc_reducer *r = zinc_reducer_select(&e->cfg);
  return r->owns_momentum ? r->owns_momentum(&e->cfg, e->dp_size) : 0;
}

int zinc_reduce_keeps_grads(const zinc_engine *e) {
  const zinc_reducer *r = zinc_reducer_select(&e->cfg);
  return r->keeps_grads ? r->keeps_grads(&e->cfg, e->dp_size) : 0;
}

int zinc_reduce_local_grads(zinc_engine *e) {
  return row(e)->local_grads ? row(e)->local_grads(e) : 0;
}

int zinc_reduce_holds_window(const zinc_engine *e) {
  return row(e)->holds_window ? row(e)->holds_window(e) : 0;
}

zinc_status zinc_reduce_take_bucket(zinc_engine *e, const int *mods, int nmods, int *taken) {
  *taken = 0;
  return row(e)->take_bucket ? row(e)->take_bucket(e, mods, nmods, taken) : ZINC_OK;
}

zinc_status zinc_reduce_flush(zinc_engine *e) {
  return row(e)->flush ? row(e)->flush(e) : ZINC_OK;
}

zinc_status zinc_reduce_whole_grads(zinc_engine *e, int *done) {
  *done = 0;
  return row(e)->whole_grads ? row(e)->whole_grads(e, done) : ZINC_OK;
}

zinc_status zinc_reduce_norm(zinc_engine *e, double *total, int *overflow) {
  return row(e)->norm ? row(e)->norm(e, total, overflow) : ZINC_OK;
}

int zinc_reduce_clips_locally(const zinc_engine *e) {
  return row(e)->clips_locally ? row(e)->clips_locally(e) : 0;
}

zinc_status zinc_reduce_update(zinc_engine *e, const zinc_reduce_update_args *a, zinc_status st,
                               int *done) {
  *done = 0;
  return row(e)->update ? row(e)->update(e, a, st, done) : st;
}

zinc_status zinc_reduce_step_end(zinc_engine *e) {
  ZINC_CHECK(zinc_compress_step_end(e));
  return row(e)->step_end ? row(e)->step_end(e) : ZINC_OK;
}

zinc_status zinc_reduce_sync(zinc_engine *e, int adopt_rank0) {
  return row(e)->sync ? row(e)->sync(e, adopt_rank0) : ZINC_OK;
}
