/*
 * profiler.h — the memory profiler (profiler.c): every engine allocation
 * accounted by location and category as it happens, the per-phase and
 * per-step peaks, the timeline, and the trainer's registered activations.
 */
#ifndef ZINC_PROFILER_H
#define ZINC_PROFILER_H
#include <stdint.h>
#include "engine/engine.h"

/* ----------------------------------------------------------- profiler.c */
zinc_status zinc_prof_create(zinc_prof **out);
void zinc_prof_destroy(zinc_prof *p);
void zinc_prof_account(void *prof, int location, int category, int64_t bytes);
void zinc_prof_stats(const zinc_prof *p, zinc_mem_stats *out);
/* Free the list of the trainer's registered activations. */
void zinc_memory_trainer_free(zinc_engine *e);
void zinc_prof_phase(zinc_prof *p, int phase);
uint64_t zinc_formula_model_states(const zinc_engine *e);
int64_t zinc_prof_phase_peak(const zinc_prof *p, int phase, int location);
/* An optimizer step completed: close the per-step peak window. */
void zinc_prof_step_done(zinc_prof *p);
/* Timeline: record the current bytes at a phase boundary; write as JSON. */
zinc_status zinc_prof_sample(zinc_prof *p, int64_t step, int64_t micro, int phase);
zinc_status zinc_prof_timeline_write(const zinc_prof *p, const char *path, int rank, int world,
                                     int stage);
#endif
