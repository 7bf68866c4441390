/*
 * stage3.h — stage 3's partitioned parameters: the replay's gathers,
 * prefetch and frees, serving modules to the trainer, the persistent
 * segments (stage3.c), and hpZ's secondary partition (hpz.c).
 */
#ifndef ZINC_ENGINE_STAGE3_H
#define ZINC_ENGINE_STAGE3_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* ------------------------------------------------------------- stage3.c */
/* Replay of a FETCH/RELEASE event (gathers, prefetch, frees). */
zinc_status zinc_stage3_replay_fetch(zinc_engine *e, zinc_module *m, int event);
/* Bytes of the largest range of this rank's partition one fetch reads (the
 * module's non-persistent units); *name (may be NULL) gets that module. */
size_t zinc_stage3_largest_read(const zinc_engine *e, const char **name);
zinc_status zinc_stage3_replay_release(zinc_engine *e, zinc_module *m, int event);
/* Hand the trainer module m (after its fetch event); fails when m is not
 * gathered (a rank that left the recorded order). */
zinc_status zinc_stage3_serve(zinc_engine *e, zinc_module *m);
/* The trainer released m for the last time. */
void zinc_stage3_unserve(zinc_engine *e, zinc_module *m);
/* Drop every gathered copy (after a step the shards changed). */
zinc_status zinc_stage3_invalidate(zinc_engine *e);
/* Gather the whole copy of persistent segments from the shards. */
zinc_status zinc_stage3_gather_persistent(zinc_engine *e);
void zinc_stage3_free(zinc_engine *e);

/* ---------------------------------------------------------------- hpz.c */
/* hpZ: the group size zero_hpz_partition_size gives at dp_size ranks (1
 * below stage 3), or ZINC_ERR_CONFIG naming the key when it cannot be. */
zinc_status zinc_hpz_size(const zinc_settings *cfg, int dp_size, int *out);
/* Bytes of the secondary partition (0 without hpZ); sets each unit's
 * secondary_byte. Needs the layout and e->hpz. */
size_t zinc_stage3_secondary_layout(zinc_engine *e);
/* The slice of unit u a group rank holds, in elements; whether m's next
 * gather runs in the group over the secondary partition; after a gather
 * over every rank: this rank's group slices of m into it. */
int64_t zinc_hpz_slice_numel(const zinc_engine *e, const zinc_unit *u);
int zinc_hpz_uses_secondary(const zinc_engine *e, const zinc_module *m);
zinc_status zinc_hpz_secondary_fill(zinc_engine *e, zinc_module *m);

#endif /* ZINC_ENGINE_STAGE3_H */
