/*
 * profiler.h — internal view of the memory profiler beyond engine.h:
 * per-phase and per-step peaks.
 */
#ifndef ZINC_PROFILER_H
#define ZINC_PROFILER_H
#include <stdint.h>
#include "engine/engine.h"
int64_t zinc_prof_phase_peak(const zinc_prof *p, int phase, int location);
/* An optimizer step completed: close the per-step peak window. */
void zinc_prof_step_done(zinc_prof *p);
/* Timeline: record the current bytes at a phase boundary; write as JSON. */
zinc_status zinc_prof_sample(zinc_prof *p, int64_t step, int64_t micro, int phase);
zinc_status zinc_prof_timeline_write(const zinc_prof *p, const char *path, int rank, int world,
                                     int stage);
#endif
