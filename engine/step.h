/*
 * step.h — the optimizer step at the accumulation boundary (step.c).
 */
#ifndef ZINC_ENGINE_STEP_H
#define ZINC_ENGINE_STEP_H

#include "base/exact_sum.h"
#include "engine/engine.h"

/* What one rank contributes to each all-gather of the gradient norm's
 * sums (over the data-parallel group at stages 1-3, the model-parallel
 * group, the pipeline group): two exact sums, the norm's terms and the
 * replicated pieces checked for inf/NaN only. */
#define ZINC_NORM_SUMS_BYTES (2 * sizeof(zinc_xsum))

/* --------------------------------------------------------------- step.c */
zinc_status zinc_step_run(zinc_engine *e, zinc_step_info *info);
/* The compute copy of the parameters from the fp32 master (cast of the
 * owned chunks, then the gathers the stage needs): after a load. */
zinc_status zinc_params_from_master(zinc_engine *e);
/* The optimizer's hyperparameters from the resolved config. */
void zinc_opt_from_config(zinc_engine *e);

#endif /* ZINC_ENGINE_STEP_H */
