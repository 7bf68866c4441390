/*
 * timeline.h — reading the memory timeline the profiler writes
 * ("zinc.memory_timeline"), for tools/zinc-mem (the JSON library stays in
 * config/).
 */
#ifndef ZINC_TIMELINE_H
#define ZINC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

typedef struct {
  double t;                 /* seconds since the first sample */
  int64_t step, micro;
  char phase[16];           /* idle | forward | backward | step */
  int64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT];
} zinc_timeline_sample;

typedef struct {
  int rank, world_size, stage;
  int nsamples;
  zinc_timeline_sample *samples;
} zinc_timeline;

zinc_status zinc_timeline_parse(const char *text, size_t len, const char *what,
                                zinc_timeline **out);
void zinc_timeline_free(zinc_timeline *t);

#endif /* ZINC_TIMELINE_H */
