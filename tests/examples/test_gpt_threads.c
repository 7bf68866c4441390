/*
 * test_gpt_threads.c — the GPT example's model (in float, as the trainer
 * runs it) gives bitwise the same loss and gradients with 1, 2 and 3 OpenMP
 * threads: every output element is computed by one thread in an order fixed
 * by the source. The stage-equality and resume tests of the trainer rest on
 * this. Skips when the build has no OpenMP.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/compare.h"
#include "gpt_model.h"

_Static_assert(sizeof(real) == 4, "the gradients are compared as f32");

static void run_model(const gpt_config *c, gpt_params *p, gpt_params *g, gpt_acts *a,
                      const int32_t *in, const int32_t *tg, int B, int T, float *loss) {
  memset(g->memory, 0, (size_t)g->num_params * sizeof(real));
  *loss = gpt_model_forward(c, p, a, in, tg, B, T);
  gpt_model_backward(c, p, g, a, in, tg, B, T);
}

static void same_bits_for_every_thread_count(void **state) {
  (void)state;
#ifndef _OPENMP
  skip();
#else
  /* uneven on purpose: B*T not a multiple of the tiles, C % 8 != 0 */
  gpt_config c = {.vocab_size = 29, .max_seq_len = 23, .num_layers = 2, .num_heads = 5,
                  .channels = 40};
  const int B = 3, T = 23;
  gpt_params p, g1, g;
  gpt_acts a;
  assert_int_equal(gpt_params_alloc(&p, &c), 0);
  assert_int_equal(gpt_params_alloc(&g1, &c), 0);
  assert_int_equal(gpt_params_alloc(&g, &c), 0);
  assert_int_equal(gpt_acts_alloc(&a, &c, B, T), 0);
  gpt_params_init(&p, &c, 42);
  int32_t in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++)
    in[i] = (i * 7) % c.vocab_size, tg[i] = (i * 11 + 3) % c.vocab_size;

  float loss1, loss;
  omp_set_num_threads(1);
  run_model(&c, &p, &g1, &a, in, tg, B, T, &loss1);
  for (int threads = 2; threads <= 3; threads++) {
    omp_set_num_threads(threads);
    run_model(&c, &p, &g, &a, in, tg, B, T, &loss);
    char what[64];
    snprintf(what, sizeof what, "gradients with %d threads", threads);
    int64_t differ = test_compare_bits(what, g.memory, g1.memory, g.num_params, ZINC_F32);
    printf("%d threads: loss %.9g (1 thread %.9g), %lld of %lld gradients differ\n",
           threads, loss, loss1, (long long)differ, (long long)g.num_params);
    assert_memory_equal(&loss, &loss1, sizeof(float));
    assert_int_equal(differ, 0);
  }
  gpt_params_free(&p), gpt_params_free(&g1), gpt_params_free(&g);
  gpt_acts_free(&a);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_bits_for_every_thread_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
