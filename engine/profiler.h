/*
 * profiler.h — internal view of the memory profiler beyond engine.h:
 * per-phase and per-step peaks.
 */
#ifndef ZINC_PROFILER_H
#define ZINC_PROFILER_H
#include <stdint.h>
#include "engine/engine.h"
int64_t zinc_prof_phase_peak(const zinc_prof *p, int phase, int location);
/* Peak total of a location since the last call; restarts the window. */
int64_t zinc_prof_step_peak_take(zinc_prof *p, int location);
#endif
