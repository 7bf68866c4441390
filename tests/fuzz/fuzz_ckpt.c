/*
 * fuzz_ckpt.c — libFuzzer target for every parser of checkpoint and
 * profiler files zinc reads back: the first byte picks the parser, the rest
 * is the input.
 *   'M' the checkpoint manifest (JSON + its validation: pieces inside their
 *       files and parameters, covering each parameter exactly once; the
 *       error-feedback units inside the shards, increasing, their files
 *       the size the units make)
 *   'T' a shard file's 64-byte trailer
 *   'R' the 64-byte identity trailer of a .zef or .zms file
 *   'C' the checksums file (its self line, then the entries)
 *   'L' the memory timeline JSON
 *   'S' a .safetensors header (the JSON after the 8-byte length), for a
 *       file with a data area of 1 MiB (accepted only when the tensors'
 *       ranges tile exactly that: the seed safetensors_tiled does)
 * Whatever the input, a parser returns a status; when it accepts, the
 * result must hold the invariants the loader relies on (checked here), and
 * writing it out and reading it back must give the same thing.
 *
 * The trailers and the checksums file carry a crc32c over their own bytes;
 * random inputs would almost never match it and the parser would stop
 * there. So the harness sets the crc first ('T', 'R': bytes 60..63 become
 * the crc32c of bytes 0..59; 'C': a "self" line with the crc32c of the input is
 * appended), and the fuzzer reaches the fields behind it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/checkpoint/manifest.h"
#include "engine/memory/timeline.h"
#include "base/endian.h"
#include "engine/checkpoint/format.h"
#include "engine/checkpoint/safetensors.h"

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
  const zinc_manifest_ef *ef = &m->ef;
  if (!ef->present)
    return;
  int64_t end = 0, bytes = 0;
  for (int u = 0; u < ef->nunits; u++) {
    const zinc_manifest_ef_unit *x = &ef->units[u];
    if (x->shard_offset < end || x->chunk < 1 || x->shard_offset + x->chunk > m->files[0].elements)
      abort();
    end = x->shard_offset + x->chunk;
    int64_t nb = (x->chunk + ef->block - 1) / ef->block;
    bytes += (int64_t)(ef->dp_size - 1) * ((4 * nb + x->chunk + 15) / 16 * 16);
  }
  if (ef->block < 1 || ef->dp_size != m->dp_size ||
      zinc_manifest_ef_layout_crc(ef->units, ef->nunits) != ef->layout_crc32c)
    abort();
  bytes += zinc_manifest_rank_trailer(m); /* a save with a save_id: the identity trailer */
  for (int r = 0; r < ef->dp_size; r++)
    if (ef->files[r].rank != r || ef->files[r].bytes != bytes)
      abort();
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
      /* what zinc writes, zinc reads, and writes again the same */
      char *again = zinc_manifest_to_json(m);
      zinc_manifest *m2 = NULL;
      if (!again || zinc_manifest_parse(again, strlen(again), "fuzz", &m2) != ZINC_OK)
        abort();
      check_manifest(m2);
      char *third = zinc_manifest_to_json(m2);
      if (!third || strcmp(again, third) != 0)
        abort();
      if (m2->step != m->step || m2->nfiles != m->nfiles || m2->nparams != m->nparams ||
          m2->scaler_scale != m->scaler_scale || m2->ef.present != m->ef.present ||
          m2->ef.nunits != m->ef.nunits || m2->ef.layout_crc32c != m->ef.layout_crc32c)
        abort();
      free(third);
      zinc_manifest_free(m2);
      free(again);
    }
    zinc_manifest_free(m);
    break;
  }
  case 'T': {
    unsigned char in[ZINC_SHARD_TRAILER];
    if (len < ZINC_SHARD_TRAILER) {
      zinc_shard_trailer t;
      if (zinc_shard_trailer_decode((const unsigned char *)text, len, "fuzz", &t) == ZINC_OK)
        abort(); /* too short to be a trailer */
      break;
    }
    memcpy(in, text, sizeof in);
    zinc_le_put_u32(in + 60, zinc_crc32c(0, in, 60)); /* past the crc, to the fields */
    zinc_shard_trailer t;
    if (zinc_shard_trailer_decode(in, sizeof in, "fuzz", &t) == ZINC_OK) {
      if (t.rank >= t.world || t.nsections < 1 || t.nsections > ZINC_SHARD_MAX_SECTIONS ||
          (t.version != ZINC_SHARD_VERSION && t.version != ZINC_SHARD_VERSION_F32) ||
          (t.version == ZINC_SHARD_VERSION) != (t.bf16_sections != 0) ||
          (t.save_id ? t.mp_rank >= t.mp_size : t.mp_rank || t.mp_size))
        abort();
      /* every field decoded is the one encoded: bytes 0..59 come back */
      unsigned char back[ZINC_SHARD_TRAILER];
      zinc_shard_trailer_encode(&t, back);
      if (memcmp(back, in, 60) != 0)
        abort();
      zinc_shard_trailer t2;
      if (zinc_shard_trailer_decode(back, sizeof back, "fuzz", &t2) != ZINC_OK ||
          memcmp(&t, &t2, sizeof t) != 0)
        abort();
    }
    break;
  }
  case 'R': {
    unsigned char in[ZINC_RANK_TRAILER];
    int kind = 0;
    zinc_rank_file_id id;
    uint64_t payload = 0;
    if (len < ZINC_RANK_TRAILER) {
      if (zinc_rank_trailer_decode((const unsigned char *)text, len, "fuzz", &kind, &id,
                                   &payload) == ZINC_OK)
        abort(); /* too short to be a trailer */
      break;
    }
    memcpy(in, text, sizeof in);
    zinc_le_put_u32(in + 60, zinc_crc32c(0, in, 60)); /* past the crc, to the fields */
    if (zinc_rank_trailer_decode(in, sizeof in, "fuzz", &kind, &id, &payload) == ZINC_OK) {
      if ((kind != ZINC_RANK_FILE_EF && kind != ZINC_RANK_FILE_MSTATE) || id.rank >= id.world ||
          id.mp_rank >= id.mp_size || id.save_id == 0)
        abort();
      /* encoded again: the same fields (bytes 48..59 are not read) */
      unsigned char back[ZINC_RANK_TRAILER];
      zinc_rank_trailer_encode(kind, &id, payload, back);
      if (memcmp(back, in, 48) != 0)
        abort();
    }
    break;
  }
  case 'C': {
    /* the input as the entries, then a self line that matches them */
    char *copy = malloc(len + 32);
    if (!copy)
      return 0;
    memcpy(copy, text, len);
    size_t body = len;
    for (size_t i = 0; i + 5 <= body; i++) /* the input's own self line goes */
      if ((i == 0 || copy[i - 1] == '\n') && !memcmp(copy + i, "self ", 5)) {
        body = i;
        break;
      }
    if (body > 0 && copy[body - 1] != '\n')
      copy[body++] = '\n';
    body += (size_t)snprintf(copy + body, 32, "self %08x\n", zinc_crc32c(0, copy, body));
    zinc_checksum_entry *e = NULL;
    int n = 0;
    if (zinc_checksums_parse(copy, body, "fuzz", &e, &n) == ZINC_OK) {
      const char **names = calloc((size_t)n + 1, sizeof *names);
      uint32_t *crcs = calloc((size_t)n + 1, sizeof *crcs);
      int64_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
      for (int i = 0; i < n; i++) {
        if (e[i].bytes < 0 || strlen(e[i].name) >= sizeof e[i].name || !e[i].name[0])
          abort();
        names[i] = e[i].name;
        crcs[i] = e[i].crc;
        bytes[i] = e[i].bytes;
      }
      /* formatted again and parsed: the same entries */
      char *again = zinc_checksums_format(names, crcs, bytes, n);
      zinc_checksum_entry *e2 = NULL;
      int n2 = 0;
      if (!again || zinc_checksums_parse(again, strlen(again), "fuzz", &e2, &n2) != ZINC_OK ||
          n2 != n)
        abort();
      for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, e2[i].name) || e[i].crc != e2[i].crc || e[i].bytes != e2[i].bytes)
          abort();
      free(e2);
      free(again);
      free(names);
      free(crcs);
      free(bytes);
    }
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
  case 'S': {
    const int64_t data_bytes = 1 << 20;
    zinc_safetensors_entry *t = NULL;
    int n = 0;
    if (zinc_safetensors_parse_header(text, len, data_bytes, "fuzz", &t, &n) == ZINC_OK)
      for (int i = 0; i < n; i++) {
        /* what a read trusts: the byte range inside the data area, and
         * for a dtype zinc reads, exactly the shape's elements */
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
          numel *= t[i].shape[d];
        if (!t[i].name || t[i].ndim < 0 || t[i].ndim > ZINC_SAFETENSORS_MAX_DIMS ||
            numel != t[i].numel || t[i].begin < 0 || t[i].end < t[i].begin ||
            t[i].end > data_bytes ||
            (t[i].zdtype >= 0 &&
             t[i].end - t[i].begin != numel * (int64_t)zinc_dtype_size((zinc_dtype)t[i].zdtype)))
          abort();
      }
    /* and together they tile the data area: no tensor reads another's
     * bytes (quadratic, and n is small for any input the fuzzer makes) */
    if (t) {
      int64_t covered = 0;
      for (int i = 0; i < n; i++) {
        covered += t[i].end - t[i].begin;
        for (int j = 0; j < n; j++)
          if (j != i && t[j].begin < t[i].end && t[i].begin < t[j].end)
            abort();
      }
      if (covered != data_bytes)
        abort();
    }
    zinc_safetensors_entries_free(t, n);
    break;
  }
  default:
    break;
  }
  return 0;
}
