/*
 * fuzz_ckpt.c — libFuzzer target for every parser of checkpoint and
 * profiler files zinc reads back: the first byte picks the parser, the rest
 * is the input.
 *   'M' the checkpoint manifest (JSON + its validation: pieces inside their
 *       files and parameters, covering each parameter exactly once)
 *   'T' a shard file's 64-byte trailer
 *   'C' the checksums file (its self line, then the entries)
 *   'L' the memory timeline JSON
 * Whatever the input, a parser returns a status; when it accepts, the
 * result must hold the invariants the loader relies on (checked here).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint/manifest.h"
#include "engine/memory/timeline.h"
#include "engine/checkpoint/format.h"

static void check_manifest(const zinc_manifest *m) {
  for (int i = 0; i < m->nparams; i++) {
    const zinc_manifest_param *p = &m->params[i];
    int64_t covered = 0;
    for (int k = 0; k < p->npieces; k++) {
      const zinc_manifest_piece *pc = &p->pieces[k];
      if (pc->file < 0 || pc->file >= m->nfiles || pc->param_offset != covered ||
          pc->file_offset + pc->length > m->files[pc->file].elements)
        abort();
      covered += pc->length;
    }
    if (covered != p->numel)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0]) {
  case 'M': {
    zinc_manifest *m = NULL;
    if (zinc_manifest_parse(text, len, "fuzz", &m) == ZINC_OK) {
      check_manifest(m);
      char *again = zinc_manifest_to_json(m);
      zinc_manifest *m2 = NULL;
      if (!again || zinc_manifest_parse(again, strlen(again), "fuzz", &m2) != ZINC_OK)
        abort(); /* what zinc writes, zinc reads */
      zinc_manifest_free(m2);
      free(again);
    }
    zinc_manifest_free(m);
    break;
  }
  case 'T': {
    zinc_shard_trailer t;
    if (zinc_shard_trailer_decode((const unsigned char *)text, len, "fuzz", &t) == ZINC_OK) {
      unsigned char back[ZINC_SHARD_TRAILER];
      zinc_shard_trailer_encode(&t, back);
      if (memcmp(back, text, 60) != 0 && memcmp(back + 60, text + 60, 4) == 0)
        abort();
      if (t.rank >= t.world || t.nsections < 1 || t.nsections > ZINC_SHARD_MAX_SECTIONS)
        abort();
    }
    break;
  }
  case 'C': {
    char *copy = malloc(len + 1);
    if (!copy)
      return 0;
    memcpy(copy, text, len);
    copy[len] = '\0';
    zinc_checksum_entry *e = NULL;
    int n = 0;
    if (zinc_checksums_parse(copy, len, "fuzz", &e, &n) == ZINC_OK)
      for (int i = 0; i < n; i++)
        if (e[i].bytes < 0 || strlen(e[i].name) >= sizeof e[i].name)
          abort();
    free(e);
    free(copy);
    break;
  }
  case 'L': {
    zinc_timeline *t = NULL;
    if (zinc_timeline_parse(text, len, "fuzz", &t) == ZINC_OK)
      for (int i = 0; i < t->nsamples; i++)
        for (int l = 0; l < ZINC_LOC_N; l++)
          for (int c = 0; c < ZINC_MEM_NCAT; c++)
            if (t->samples[i].bytes[l][c] < 0)
              abort();
    zinc_timeline_free(t);
    break;
  }
  default:
    break;
  }
  return 0;
}
