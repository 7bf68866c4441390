/*
 * test_gpt_data.c — the GPT example's data: the generated corpus is a pure
 * function of (seed, size) and has the grammar's properties; tokens round-
 * trip to the text; a file loads byte for byte; the per-rank slices are
 * disjoint and cover the corpus, every window stays inside its rank's slice,
 * each window is used once per epoch, and a micro-batch depends only on
 * its index (what a resumed run relies on).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpt_data.h"

static uint64_t fnv1a(const uint8_t *p, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static void corpus_is_deterministic(void **state) {
  (void)state;
  char err[256];
  gpt_corpus a, b, c;
  assert_int_equal(gpt_corpus_generate(&a, 7, 100000, err, sizeof(err)), 0);
  assert_int_equal(gpt_corpus_generate(&b, 7, 100000, err, sizeof(err)), 0);
  assert_int_equal(gpt_corpus_generate(&c, 8, 100000, err, sizeof(err)), 0);
  assert_int_equal(a.num_tokens, 100000);
  assert_int_equal(b.num_tokens, 100000);
  assert_memory_equal(a.text, b.text, 100000);
  assert_memory_equal(a.tokens, b.tokens, 100000 * sizeof(int32_t));
  assert_int_equal(a.vocab_size, b.vocab_size);
  int64_t differ = 0;
  for (int64_t i = 0; i < 100000; i++)
    differ += a.text[i] != c.text[i];
  printf("seed 7 vs seed 8: %lld of 100000 bytes differ\n", (long long)differ);
  assert_true(differ > 50000);
  /* a shorter corpus of the same seed is a prefix of the longer one */
  gpt_corpus p;
  assert_int_equal(gpt_corpus_generate(&p, 7, 5000, err, sizeof(err)), 0);
  assert_memory_equal(p.text, a.text, 5000);
  gpt_corpus_free(&a), gpt_corpus_free(&b), gpt_corpus_free(&c), gpt_corpus_free(&p);
}

/* The default corpus (seed 1, 2,000,000 bytes) is the one the example's
 * loss thresholds were measured on; this pins it. */
static void default_corpus_is_pinned(void **state) {
  (void)state;
  char err[256];
  gpt_corpus a;
  assert_int_equal(gpt_corpus_generate(&a, 1, 2000000, err, sizeof(err)), 0);
  uint64_t h = fnv1a(a.text, a.num_tokens);
  printf("default corpus: %lld bytes, vocabulary %d, fnv1a %016llx\n",
         (long long)a.num_tokens, a.vocab_size, (unsigned long long)h);
  assert_int_equal(a.vocab_size, 35);
  assert_int_equal(h, 0xd745ab446502348full);
  gpt_corpus_free(&a);
}

static void corpus_follows_its_grammar(void **state) {
  (void)state;
  char err[256];
  gpt_corpus a;
  assert_int_equal(gpt_corpus_generate(&a, 3, 200000, err, sizeof(err)), 0);
  const char *t = (const char *)a.text;
  int64_t n = a.num_tokens, sentences = 0;
  for (int64_t i = 0; i + 1 < n; i++) {
    if (t[i] == '.') {
      sentences++;
      assert_true(t[i + 1] == ' ' || t[i + 1] == '\n');
    }
    /* "a" before a vowel is "an" */
    if (i > 0 && (t[i - 1] == ' ' || t[i - 1] == '\n') && (t[i] == 'a' || t[i] == 'A') &&
        t[i + 1] == ' ' && i + 2 < n && strchr("aeiou", t[i + 2])) {
      fprintf(stderr, "'a' before a vowel at %lld: %.20s\n", (long long)i, t + i);
      fail();
    }
  }
  assert_true(sentences > n / 80);
  /* tokens map back to the text through the vocabulary */
  for (int64_t i = 0; i < n; i++) {
    assert_true(a.tokens[i] >= 0 && a.tokens[i] < a.vocab_size);
    assert_int_equal(a.id_to_byte[a.tokens[i]], a.text[i]);
  }
  gpt_corpus_free(&a);
  gpt_corpus tiny;
  assert_int_equal(gpt_corpus_generate(&tiny, 3, 10, err, sizeof(err)), -1);
  printf("too small: %s\n", err);
}

static void file_loads_byte_for_byte(void **state) {
  (void)state;
  char path[] = "/tmp/zinc_gpt_data_XXXXXX", err[256];
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char text[] = "hello, zinc!\nbytes \x01\xff too";
  assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
  close(fd);
  gpt_corpus c;
  assert_int_equal(gpt_corpus_load(&c, path, err, sizeof(err)), 0);
  unlink(path);
  assert_int_equal(c.num_tokens, (int64_t)sizeof(text) - 1);
  assert_memory_equal(c.text, text, sizeof(text) - 1);
  for (int64_t i = 0; i < c.num_tokens; i++)
    assert_int_equal(c.id_to_byte[c.tokens[i]], (uint8_t)text[i]);
  assert_int_equal(c.byte_to_id['z'] >= 0, 1);
  assert_int_equal(c.byte_to_id['q'], -1);
  gpt_corpus_free(&c);
  assert_int_equal(gpt_corpus_load(&c, "/nonexistent/zinc.txt", err, sizeof(err)), -1);
  printf("missing file: %s\n", err);
}

static void rank_slices_are_disjoint_and_cover(void **state) {
  (void)state;
  char err[512];
  gpt_corpus c;
  assert_int_equal(gpt_corpus_generate(&c, 5, 50001, err, sizeof(err)), 0);
  const int B = 3, T = 16;
  for (int ranks = 1; ranks <= 5; ranks++) {
    int64_t covered = 0;
    for (int r = 0; r < ranks; r++) {
      gpt_loader l;
      assert_int_equal(gpt_loader_init(&l, &c, r, ranks, B, T, err, sizeof(err)), 0);
      assert_int_equal(l.begin, covered); /* contiguous, no gap, no overlap */
      covered = l.end;
      /* one epoch: every window once, all inside [begin, end) */
      char *used = calloc((size_t)l.num_seqs, 1);
      assert_non_null(used);
      int64_t batches = l.num_seqs / B;
      for (int64_t k = 0; k < batches; k++)
        for (int b = 0; b < B; b++) {
          int64_t w = gpt_loader_window(&l, k, b);
          assert_true(w >= l.begin && w + T + 1 <= l.end);
          assert_int_equal((w - l.begin) % T, 0);
          int64_t s = (w - l.begin) / T;
          assert_int_equal(used[s], 0);
          used[s] = 1;
        }
      free(used);
      /* a batch is a pure function of its index */
      int32_t in1[B * T], tg1[B * T], in2[B * T], tg2[B * T];
      gpt_loader_batch(&l, 12345, in1, tg1);
      gpt_loader_batch(&l, 3, in2, tg2);
      gpt_loader_batch(&l, 12345, in2, tg2);
      assert_memory_equal(in1, in2, sizeof(in1));
      assert_memory_equal(tg1, tg2, sizeof(tg1));
      for (int i = 0; i < B * T; i++) /* targets are the inputs shifted by one */
        if (i % T != T - 1)
          assert_int_equal(tg1[i], in1[i + 1]);
    }
    assert_int_equal(covered, c.num_tokens);
  }
  /* too small a corpus for the ranks: a message that says what is needed */
  gpt_loader l;
  assert_int_equal(gpt_loader_init(&l, &c, 0, 2000, B, T, err, sizeof(err)), -1);
  printf("too many ranks: %s\n", err);
  gpt_corpus_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(corpus_is_deterministic),
      cmocka_unit_test(default_corpus_is_pinned),
      cmocka_unit_test(corpus_follows_its_grammar),
      cmocka_unit_test(file_loads_byte_for_byte),
      cmocka_unit_test(rank_slices_are_disjoint_and_cover),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
