/*
 * timeline.c — parse the memory timeline JSON (engine/memory/profiler.c writes it)
 * into samples; every field is checked, so a damaged file is an error that
 * names the sample, not a garbled chart.
 */
#include "engine/memory/timeline.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

zinc_status zinc_timeline_parse(const char *text, size_t len, const char *what,
                                zinc_timeline **out) {
  *out = NULL;
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return zinc_error(ZINC_ERR_CORRUPT, "memory timeline %s: not JSON at line %d column %d: %s",
                      what, err.line, err.column, err.text);
  zinc_status st = ZINC_OK;
  zinc_timeline *t = calloc(1, sizeof *t);
  json_t *fmt = json_object_get(root, "format"), *samples = json_object_get(root, "samples");
  if (!t) {
    st = zinc_error(ZINC_ERR_NOMEM, "memory timeline %s: no host memory for the timeline "
                    "(%zu bytes)", what, sizeof *t);
    goto out;
  }
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "zinc-memory-timeline") ||
      !json_is_array(samples)) {
    st = zinc_error(ZINC_ERR_CORRUPT, "memory timeline %s: not a zinc memory timeline "
                    "(\"format\" or \"samples\" missing)", what);
    goto out;
  }
  t->rank = (int)json_integer_value(json_object_get(root, "rank"));
  t->world_size = (int)json_integer_value(json_object_get(root, "world_size"));
  t->stage = (int)json_integer_value(json_object_get(root, "stage"));
  t->nsamples = (int)json_array_size(samples);
  t->samples = calloc((size_t)t->nsamples + 1, sizeof *t->samples);
  if (!t->samples) {
    st = zinc_error(ZINC_ERR_NOMEM, "memory timeline %s: no host memory for %d samples "
                    "(%zu bytes)", what, t->nsamples,
                    ((size_t)t->nsamples + 1) * sizeof *t->samples);
    goto out;
  }
  for (int i = 0; i < t->nsamples; i++) {
    json_t *s = json_array_get(samples, (size_t)i), *b = json_object_get(s, "bytes");
    json_t *ph = json_object_get(s, "phase"), *tt = json_object_get(s, "t");
    zinc_timeline_sample *o = &t->samples[i];
    if (!json_is_object(s) || !json_is_number(tt) || !json_is_string(ph) || !json_is_array(b) ||
        json_array_size(b) != ZINC_LOC_N) {
      st = zinc_error(ZINC_ERR_CORRUPT, "memory timeline %s: samples[%d] lacks t, phase or a "
                      "bytes array of %d locations", what, i, ZINC_LOC_N);
      goto out;
    }
    o->t = json_number_value(tt);
    o->step = (int64_t)json_integer_value(json_object_get(s, "step"));
    o->micro = (int64_t)json_integer_value(json_object_get(s, "micro"));
    snprintf(o->phase, sizeof o->phase, "%s", json_string_value(ph));
    for (int l = 0; l < ZINC_LOC_N; l++) {
      json_t *row = json_array_get(b, (size_t)l);
      if (!json_is_array(row) || json_array_size(row) != ZINC_MEM_NCAT) {
        st = zinc_error(ZINC_ERR_CORRUPT, "memory timeline %s: samples[%d].bytes[%d] is not "
                        "%d integers", what, i, l, ZINC_MEM_NCAT);
        goto out;
      }
      for (int c = 0; c < ZINC_MEM_NCAT; c++) {
        json_t *v = json_array_get(row, (size_t)c);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
          st = zinc_error(ZINC_ERR_CORRUPT, "memory timeline %s: samples[%d].bytes[%d][%d] is "
                          "not a byte count", what, i, l, c);
          goto out;
        }
        o->bytes[l][c] = (int64_t)json_integer_value(v);
      }
    }
  }
out:
  json_decref(root);
  if (st != ZINC_OK) {
    zinc_timeline_free(t);
    return st;
  }
  *out = t;
  return ZINC_OK;
}

void zinc_timeline_free(zinc_timeline *t) {
  if (!t)
    return;
  free(t->samples);
  free(t);
}
