/*
 * step.h — the optimizer step at the accumulation boundary (step.c).
 */
#ifndef ZINC_ENGINE_STEP_H
#define ZINC_ENGINE_STEP_H

#include "engine/engine.h"

/* --------------------------------------------------------------- step.c */
zinc_status zinc_step_run(zinc_engine *e, zinc_step_info *info);
/* The compute copy of the parameters from the fp32 master (cast of the
 * owned chunks, then the gathers the stage needs): after a load. */
zinc_status zinc_params_from_master(zinc_engine *e);
/* The optimizer's hyperparameters from the resolved config. */
void zinc_opt_from_config(zinc_engine *e);

#endif /* ZINC_ENGINE_STEP_H */
