/* test_cpu_threads.c — the CPU kernels give the same bits on 1, 2 and 3
 * threads (and with no pool): Adam over several segments with a bf16
 * copy, sums of squares over many chunks, casts and accumulation; sizes
 * large enough that every thread gets work. Runs under TSan (label
 * `threads`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "optim/adam.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"

enum { NSEG = 3, NCHUNK = 5, NPOOL = 4 };
static const int64_t seg_n[NSEG] = {50001, 9, 70003};
static const int64_t chunk_n[NCHUNK] = {100003, 1, 40960, 0, 16385};
#define CAST_N 120001

typedef struct {
  float *p[NSEG], *m[NSEG], *v[NSEG];
  uint16_t *out[NSEG];
  double partials[NCHUNK];
  uint16_t *cast;
  float *acc;
} results;

/* grads[s] holds max(seg_n[s], CAST_N) fp32 values. */
static void run_all(zinc_threadpool *pool, zinc_cpu_isa isa, float *const grads[NSEG],
                    const uint16_t *chunk_data[NCHUNK], results *res) {
  test_rng r = {99};
  zinc_opt_seg segs[NSEG];
  for (int s = 0; s < NSEG; s++) {
    int64_t n = seg_n[s];
    res->p[s] = malloc((size_t)n * 4);
    res->m[s] = malloc((size_t)n * 4);
    res->v[s] = malloc((size_t)n * 4);
    res->out[s] = malloc((size_t)n * 2);
    fill_decades(&r, res->p[s], ZINC_F32, n, -4.0f, 1.0f);
    fill_decades(&r, res->m[s], ZINC_F32, n, -6.0f, -1.0f);
    for (int64_t i = 0; i < n; i++)
      res->v[s][i] = fabsf(rng_decades(&r, -9.0f, -2.0f));
    segs[s] = (zinc_opt_seg){.master = res->p[s],
                             .exp_avg = res->m[s],
                             .exp_avg_sq = res->v[s],
                             .grad = grads[s],
                             .param_out = res->out[s],
                             .n = n,
                             .grad_dtype = ZINC_F32,
                             .param_dtype = ZINC_BF16,
                             .decay = s != 1,
                             .coef = 0,
                             .lamb_ratio = 0.0f};
  }
  zinc_opt_coef c;
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1, 5, 0.25), ZINC_OK);
  for (int step = 0; step < 3; step++)
    assert_int_equal(zinc_cpu_optim(pool, isa, &c, 1, segs, NSEG, ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);

  zinc_sumsq_chunk chunks[NCHUNK];
  for (int k = 0; k < NCHUNK; k++)
    chunks[k] = (zinc_sumsq_chunk){chunk_data[k], chunk_n[k], ZINC_BF16};
  assert_int_equal(zinc_cpu_sumsq(pool, isa, chunks, NCHUNK, res->partials), ZINC_OK);

  res->cast = malloc(CAST_N * 2);
  res->acc = calloc(CAST_N, 4);
  assert_int_equal(zinc_cpu_cast(pool, isa, res->cast, ZINC_F16, grads[2], ZINC_F32, CAST_N),
                   ZINC_OK);
  assert_int_equal(zinc_cpu_accumulate_f32(pool, isa, res->acc, res->cast, ZINC_F16, CAST_N, 1),
                   ZINC_OK);
  assert_int_equal(zinc_cpu_accumulate_f32(pool, isa, res->acc, grads[0], ZINC_F32, CAST_N, 0),
                   ZINC_OK);
}

static void results_free(results *res) {
  for (int s = 0; s < NSEG; s++) {
    free(res->p[s]);
    free(res->m[s]);
    free(res->v[s]);
    free(res->out[s]);
  }
  free(res->cast);
  free(res->acc);
}

/* a: the reference results, b: the results compared with it */
static int64_t results_mismatch(const results *a, const results *b) {
  int64_t bad = 0;
  for (int s = 0; s < NSEG; s++) {
    bad += test_compare_bits("master", b->p[s], a->p[s], seg_n[s], ZINC_F32);
    bad += test_compare_bits("exp_avg", b->m[s], a->m[s], seg_n[s], ZINC_F32);
    bad += test_compare_bits("exp_avg_sq", b->v[s], a->v[s], seg_n[s], ZINC_F32);
    bad += test_compare_bits("param_out", b->out[s], a->out[s], seg_n[s], ZINC_BF16);
  }
  bad += test_compare_bits("partials", b->partials, a->partials, NCHUNK, ZINC_DT_F64);
  bad += test_compare_bits("cast", b->cast, a->cast, CAST_N, ZINC_F16);
  bad += test_compare_bits("accumulate", b->acc, a->acc, CAST_N, ZINC_F32);
  return bad;
}

static void same_bits_for_any_thread_count(void **state) {
  zinc_cpu_isa isa = zinc_cpu_isa_select();
  test_rng r = {1};
  float *grads[NSEG];
  for (int s = 0; s < NSEG; s++) {
    int64_t n = seg_n[s] > CAST_N ? seg_n[s] : CAST_N;
    grads[s] = malloc((size_t)n * 4);
    fill_decades(&r, grads[s], ZINC_F32, n, -5.0f, 0.0f);
  }
  const uint16_t *chunk_data[NCHUNK];
  uint16_t *chunk_mem[NCHUNK];
  for (int k = 0; k < NCHUNK; k++) {
    chunk_mem[k] = malloc((size_t)(chunk_n[k] + 1) * 2);
    fill_decades(&r, chunk_mem[k], ZINC_BF16, chunk_n[k], -10.0f, 10.0f);
    chunk_data[k] = chunk_mem[k];
  }
  results res[NPOOL];
  for (int t = 0; t < NPOOL; t++) { /* t == 0: no pool */
    zinc_threadpool *pool = NULL;
    if (t > 0)
      assert_int_equal(zinc_threadpool_create(t, NULL, NULL, &pool), ZINC_OK);
    run_all(pool, isa, grads, chunk_data, &res[t]);
    zinc_threadpool_destroy(pool);
  }
  int64_t bad = 0;
  for (int t = 1; t < NPOOL; t++) {
    int64_t b = results_mismatch(&res[0], &res[t]);
    if (b)
      fprintf(stderr, "%s: %d threads differ from the calling thread alone in %lld places\n",
              zinc_cpu_isa_name(isa), t, (long long)b);
    bad += b;
  }
  fprintf(stderr, "%s: norms %a %a %a, identical for 1, 2, 3 threads: %s\n",
          zinc_cpu_isa_name(isa), res[0].partials[0], res[0].partials[2], res[0].partials[4],
          bad ? "no" : "yes");
  for (int t = 0; t < NPOOL; t++)
    results_free(&res[t]);
  for (int s = 0; s < NSEG; s++)
    free(grads[s]);
  for (int k = 0; k < NCHUNK; k++)
    free(chunk_mem[k]);
  assert_int_equal(bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_bits_for_any_thread_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
