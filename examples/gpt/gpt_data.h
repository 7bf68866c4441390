/*
 * gpt_data.h — the GPT example's data: a character-level corpus (generated
 * from a small grammar, or read from a text file), its vocabulary, and the
 * data-parallel loader that gives every rank its own slice of it.
 *
 * Invariants:
 *  - the generated corpus depends only on (seed, size): every rank builds the
 *    same one, so no rank has to send it to another;
 *  - rank r of R reads only tokens [r*n/R, (r+1)*n/R) of the n in the corpus
 *    (the slices are disjoint and cover the corpus);
 *  - micro-batch k of a rank is a pure function of k, so a resumed run reads
 *    exactly what the uninterrupted run would have read.
 */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int vocab_size;           // V: the distinct bytes of the text
  uint8_t id_to_byte[256];  // (V) token id -> byte, ascending byte order
  int16_t byte_to_id[256];  // byte -> token id, -1 for bytes not in the text
  uint8_t *text;            // (num_tokens) the text itself
  int32_t *tokens;          // (num_tokens) the text as token ids
  int64_t num_tokens;
} gpt_corpus;

/* English-like sentences from a small grammar (subject-verb agreement,
 * adjectives, prepositional phrases), num_bytes long (>= 64). Returns 0, or
 * -1 with a message in err. */
int gpt_corpus_generate(gpt_corpus *c, uint64_t seed, int64_t num_bytes,
                        char *err, size_t errlen);
/* Any file, byte by byte. */
int gpt_corpus_load(gpt_corpus *c, const char *path, char *err, size_t errlen);
void gpt_corpus_free(gpt_corpus *c);

typedef struct {
  const int32_t *tokens; // the whole corpus; this rank reads [begin, end)
  int64_t begin, end;
  int64_t num_seqs;      // windows of T+1 tokens at stride T in the slice
  int64_t stride;        // sequence order: s_j = (j * stride) mod num_seqs
  int B, T;
} gpt_loader;

/* Slice the corpus for rank `rank` of `ranks`; fails (with a message saying
 * how large the corpus must be) when the slice holds fewer than B windows. */
int gpt_loader_init(gpt_loader *l, const gpt_corpus *c, int rank, int ranks,
                    int B, int T, char *err, size_t errlen);
/* Micro-batch k: inputs and targets (B, T), targets shifted by one token.
 * Every window of the slice is used once per B*num_seqs/B batches (an
 * epoch) in a fixed pseudo-random order. */
void gpt_loader_batch(const gpt_loader *l, int64_t k, int32_t *inputs,
                      int32_t *targets);
/* Corpus position of the first token of micro-batch k's row b (tests). */
int64_t gpt_loader_window(const gpt_loader *l, int64_t k, int b);

#endif /* GPT_DATA_H */
