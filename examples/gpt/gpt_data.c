/*
 * gpt_data.c — corpus generation and loading, the character vocabulary, and
 * the per-rank loader (see gpt_data.h for the invariants).
 *
 * The grammar is small enough that a model of a few hundred thousand
 * parameters learns its spelling and much of its structure in a few hundred
 * steps, yet has real structure to learn: plural subjects take the plain
 * verb and singular ones the -s form, sentences start with a capital and end
 * with a period, paragraphs end with a newline.
 */
#include "gpt_data.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------- generator */

static const char *const g_nouns[] = {"cat", "dog", "bird", "horse", "farmer",
                                      "king", "queen", "robot", "teacher",
                                      "baker", "sailor", "goat"};
static const char *const g_adjectives[] = {"small", "big", "red", "old", "quick",
                                           "lazy", "happy", "green", "brave", "quiet"};
static const char *const g_verbs[] = {"see", "chase", "like", "find", "follow",
                                      "help", "call", "greet"};
static const char *const g_places[] = {"river", "hill", "old house", "market",
                                       "forest", "bridge"};
static const char *const g_preps[] = {"near", "under", "behind", "beside", "past"};
static const char *const g_names[] = {"alice", "bob", "carol", "dave", "eve", "frank"};

typedef struct {
  uint64_t state;
  char *buf;
  int64_t len, cap;
  int sentence_start; // capitalise the next letter
} text_writer;

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int pick(text_writer *w, int n) { return (int)(next_u64(&w->state) % (uint64_t)n); }

/* Append a word (with a space before it unless it starts the text or is
 * punctuation); stops silently at capacity, the caller truncates. */
static void put(text_writer *w, const char *word) {
  int punct = word[0] == '.' || word[0] == '\n';
  if (w->len > 0 && !punct && w->buf[w->len - 1] != '\n' && w->len < w->cap)
    w->buf[w->len++] = ' ';
  for (const char *p = word; *p && w->len < w->cap; p++) {
    char ch = *p;
    if (w->sentence_start && isalpha((unsigned char)ch)) {
      ch = (char)toupper((unsigned char)ch);
      w->sentence_start = 0;
    }
    w->buf[w->len++] = ch;
  }
}

/* "the quick dog" / "some horses" / "Alice"; returns 1 when plural. */
static int noun_phrase(text_writer *w, int allow_name) {
  if (allow_name && pick(w, 4) == 0) {
    const char *name = g_names[pick(w, N_OF(g_names))];
    char cap[16];
    snprintf(cap, sizeof(cap), "%c%s", toupper((unsigned char)name[0]), name + 1);
    put(w, cap);
    return 0;
  }
  int plural = pick(w, 2);
  static const char *const singular_dets[] = {"the", "a", "every"};
  static const char *const plural_dets[] = {"the", "some", "two"};
  const char *det = plural ? plural_dets[pick(w, 3)] : singular_dets[pick(w, 3)];
  const char *adjective = pick(w, 2) ? g_adjectives[pick(w, N_OF(g_adjectives))] : NULL;
  if (adjective && strchr("aeiou", adjective[0]) && strcmp(det, "a") == 0)
    det = "an";
  put(w, det);
  if (adjective)
    put(w, adjective);
  char noun[24];
  snprintf(noun, sizeof(noun), "%s%s", g_nouns[pick(w, N_OF(g_nouns))], plural ? "s" : "");
  put(w, noun);
  return plural;
}

static void sentence(text_writer *w) {
  w->sentence_start = 1;
  int plural = noun_phrase(w, 1);
  char verb[24];
  snprintf(verb, sizeof(verb), "%s%s", g_verbs[pick(w, N_OF(g_verbs))],
           plural ? "" : "s");
  put(w, verb);
  noun_phrase(w, 1);
  if (pick(w, 3) == 0) {
    put(w, g_preps[pick(w, N_OF(g_preps))]);
    put(w, "the");
    put(w, g_places[pick(w, N_OF(g_places))]);
  }
  put(w, ".");
}

/* ------------------------------------------------------------ vocabulary */

static int corpus_tokenize(gpt_corpus *c, char *err, size_t errlen) {
  int seen[256] = {0};
  for (int64_t i = 0; i < c->num_tokens; i++)
    seen[c->text[i]] = 1;
  c->vocab_size = 0;
  for (int b = 0; b < 256; b++) {
    c->byte_to_id[b] = -1;
    if (seen[b]) {
      c->byte_to_id[b] = (int16_t)c->vocab_size;
      c->id_to_byte[c->vocab_size++] = (uint8_t)b;
    }
  }
  c->tokens = malloc((size_t)c->num_tokens * sizeof(int32_t));
  if (!c->tokens) {
    snprintf(err, errlen, "out of memory for %lld tokens", (long long)c->num_tokens);
    return -1;
  }
  for (int64_t i = 0; i < c->num_tokens; i++)
    c->tokens[i] = c->byte_to_id[c->text[i]];
  return 0;
}

int gpt_corpus_generate(gpt_corpus *c, uint64_t seed, int64_t num_bytes,
                        char *err, size_t errlen) {
  memset(c, 0, sizeof(*c));
  if (num_bytes < 64) {
    snprintf(err, errlen, "corpus size %lld too small: ask for at least 64 bytes",
             (long long)num_bytes);
    return -1;
  }
  text_writer w = {.state = seed, .cap = num_bytes};
  w.buf = malloc((size_t)num_bytes);
  if (!w.buf) {
    snprintf(err, errlen, "out of memory for a %lld-byte corpus", (long long)num_bytes);
    return -1;
  }
  while (w.len < w.cap) {
    int sentences = 1 + pick(&w, 4);
    for (int s = 0; s < sentences && w.len < w.cap; s++)
      sentence(&w);
    put(&w, "\n");
  }
  c->text = (uint8_t *)w.buf;
  c->num_tokens = w.len;
  if (corpus_tokenize(c, err, errlen) != 0) {
    gpt_corpus_free(c);
    return -1;
  }
  return 0;
}

int gpt_corpus_load(gpt_corpus *c, const char *path, char *err, size_t errlen) {
  memset(c, 0, sizeof(*c));
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open data file %s: %s", path, strerror(errno));
    return -1;
  }
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    size = ftell(f);
  if (size < 2 || fseek(f, 0, SEEK_SET) != 0) {
    snprintf(err, errlen, "data file %s: %s", path,
             size < 0 ? "cannot determine its size (a regular file is needed)"
                      : "too short: at least two bytes are needed");
    fclose(f);
    return -1;
  }
  c->text = malloc((size_t)size);
  if (!c->text || fread(c->text, 1, (size_t)size, f) != (size_t)size) {
    snprintf(err, errlen, "data file %s: %s", path,
             c->text ? "short read" : "out of memory");
    fclose(f);
    gpt_corpus_free(c);
    return -1;
  }
  fclose(f);
  c->num_tokens = size;
  if (corpus_tokenize(c, err, errlen) != 0) {
    gpt_corpus_free(c);
    return -1;
  }
  return 0;
}

void gpt_corpus_free(gpt_corpus *c) {
  free(c->text);
  free(c->tokens);
  memset(c, 0, sizeof(*c));
}

/* ---------------------------------------------------------------- loader */

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int gpt_loader_init(gpt_loader *l, const gpt_corpus *c, int rank, int ranks,
                    int B, int T, char *err, size_t errlen) {
  memset(l, 0, sizeof(*l));
  int64_t n = c->num_tokens;
  l->tokens = c->tokens;
  l->begin = n * rank / ranks;
  l->end = n * (rank + 1) / ranks;
  l->B = B;
  l->T = T;
  int64_t len = l->end - l->begin;
  l->num_seqs = len > T ? (len - 1) / T : 0;
  if (l->num_seqs < B) {
    snprintf(err, errlen,
             "rank %d of %d: its slice of the corpus (%lld tokens) holds %lld "
             "sequences of %d+1 tokens but a micro-batch needs %d; use a corpus "
             "of at least %lld tokens",
             rank, ranks, (long long)len, (long long)l->num_seqs, T, B,
             (long long)ranks * ((int64_t)B * T + 1));
    return -1;
  }
  /* A stride coprime to num_seqs visits every window once per epoch. */
  l->stride = 7919;
  while (gcd64(l->stride, l->num_seqs) != 1)
    l->stride += 2;
  l->stride %= l->num_seqs;
  if (l->stride == 0)
    l->stride = 1;
  return 0;
}

int64_t gpt_loader_window(const gpt_loader *l, int64_t k, int b) {
  int64_t j = (k * l->B + b) % l->num_seqs;
  int64_t s = (int64_t)(((unsigned __int128)j * (uint64_t)l->stride) % (uint64_t)l->num_seqs);
  return l->begin + s * l->T;
}

void gpt_loader_batch(const gpt_loader *l, int64_t k, int32_t *inputs,
                      int32_t *targets) {
  int T = l->T;
  for (int b = 0; b < l->B; b++) {
    const int32_t *w = l->tokens + gpt_loader_window(l, k, b);
    memcpy(inputs + (size_t)b * T, w, (size_t)T * sizeof(int32_t));
    memcpy(targets + (size_t)b * T, w + 1, (size_t)T * sizeof(int32_t));
  }
}
