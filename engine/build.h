/*
 * build.h — the model states allocated for the configured stage and the
 * parameters' initial values (build.c).
 */
#ifndef ZINC_ENGINE_BUILD_H
#define ZINC_ENGINE_BUILD_H

#include <stdint.h>

#include "engine/engine.h"

/* -------------------------------------------------------------- build.c */
zinc_status zinc_build_buffers(zinc_engine *e, zinc_init_fn init, void *ctx);
void zinc_build_free(zinc_engine *e);

/* What the build allocates for good, by location and category. */
void zinc_build_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);

#endif /* ZINC_ENGINE_BUILD_H */
