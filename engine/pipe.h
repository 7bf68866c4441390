/*
 * pipe.h — pipeline parallelism in the engine: the 3D grid this engine's
 * world forms (engine/grid.h), its pipeline group, and the transfers
 * between neighbouring stages (include/zinc.h, "Pipeline parallelism").
 *
 * The engine calls these where it makes and frees its groups (engine.c:
 * create_comms, create_device, zinc_engine_destroy), where it checks the
 * config, where it refuses what a pipeline cannot do yet (checkpoints),
 * and where the whole model's figures meet (the registered model per
 * stage, the gradient norm over the stages). The rest of the engine reads
 * e->pipe only through them.
 */
#ifndef ZINC_ENGINE_PIPE_H
#define ZINC_ENGINE_PIPE_H

#include "comm/comm.h"
#include "engine/grid.h"
#include "zinc.h"

typedef struct zinc_pipe zinc_pipe;

/* Collective over e->world: every rank's pipeline_parallel_size and
 * model_parallel_size are compared (a difference is ZINC_ERR_INVALID on
 * every rank naming the range and this rank's values), then the grid is
 * made (ZINC_ERR_INVALID naming the sizes when they do not factor the
 * world, alike on every rank). Allocates e->pipe and writes the grid to
 * *out. */
zinc_status zinc_pipe_grid(zinc_engine *e, zinc_grid *out);
/* Collective over e->world: the pipeline group (host buffers; a comm of
 * its own, self without a pipeline). After zinc_pipe_grid. */
zinc_status zinc_pipe_create(zinc_engine *e);
/* Collective over the pipeline group: on a GPU engine, the NCCL comm its
 * transfers run on (bootstrapped over the group's host comm). */
zinc_status zinc_pipe_create_device(zinc_engine *e, int cuda_device);
/* The config against the pipeline (local, ZINC_ERR_CONFIG naming the
 * key): "pipeline": {"stages": n} other than the options' size; with more
 * than one stage, ZeRO stage 3 and the gradient methods whose norm is
 * agreed over the data-parallel group only (delayed averaging, the 1-bit
 * family), each with the reason. */
zinc_status zinc_pipe_check_config(const zinc_engine *e);
/* What a pipeline cannot do yet (safetensors files of the model): with
 * more than one stage, ZINC_ERR_INVALID naming `what` (local; every rank
 * has the same sizes), else ZINC_OK. */
zinc_status zinc_pipe_refuse(const zinc_engine *e, const char *what);
/* The ranks of this rank's pipeline stage (the world without a pipeline):
 * where the registered model is compared. */
zinc_comm *zinc_pipe_stage_comm(const zinc_engine *e);
/* The pipeline group for host buffers (ZINC_SCOPE_PP). */
zinc_comm *zinc_pipe_host_comm(const zinc_engine *e);
/* Free the handles never waited for, the comms and e->pipe. NULL pipe:
 * nothing. */
void zinc_pipe_destroy(zinc_engine *e);

#endif /* ZINC_ENGINE_PIPE_H */
