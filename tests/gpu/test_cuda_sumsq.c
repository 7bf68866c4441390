/* test_cuda_sumsq.c — per-chunk sums of squares on the cuda device against
 * zinc_sumsq_chunk_ref (kernels/zinc_math.h) on the host.
 *
 * Tolerance, as documented in kernels/kernels.h: every 4096-element block
 * sum has the CPU's bits, so a chunk of at most one block — or one whose
 * other blocks are all zero — must match exactly; otherwise the block sums
 * are added in CUB's order instead of left to right, and the relative
 * difference must stay within 2.2e-16 * (blocks - 1). Two runs must agree
 * bit for bit. Chunks have odd sizes, misaligned starts, every dtype, and
 * there are more of them than one launch takes; partials are poisoned
 * (NaN bytes) before each run; inf/NaN elements give a non-finite partial
 * for their chunk only. */
#include "gpu_test.h"

typedef struct {
  int64_t n;
  int dtype;
  size_t offset;       /* elements */
  void *host;          /* (n) dtype */
  guarded_buf dev;
} chunk_case;

static void chunk_init(zinc_device *d, chunk_case *c, int64_t n, int dtype, size_t offset,
                       test_rng *rng, int only_middle_block) {
  c->n = n;
  c->dtype = dtype;
  c->offset = offset;
  c->host = calloc((size_t)n + 1, dtype_bytes(dtype));
  assert_non_null(c->host);
  for (int64_t i = 0; i < n; i++) {
    int64_t block = i / ZINC_SUMSQ_BLOCK;
    float x = only_middle_block && block != 1 ? 0.0f : rng_uniform(rng, -3.0f, 3.0f);
    zinc_store_from_f32(c->host, i, dtype, x);
  }
  guarded_alloc(d, &c->dev, (size_t)n * dtype_bytes(dtype), offset * dtype_bytes(dtype));
  guarded_upload(&c->dev, c->host);
}

static void chunk_fini(zinc_device *d, chunk_case *c) {
  guarded_free(d, &c->dev);
  free(c->host);
}

/* Run the op twice into `partials` (poisoned first), compare with the
 * reference and between runs. Returns mismatches. */
static size_t check_chunks(zinc_device *d, chunk_case *c, int n, double *partials,
                           const int *exact) {
  zinc_sumsq_chunk *chunks = calloc((size_t)n + 1, sizeof *chunks);
  double *first = calloc((size_t)n + 1, sizeof *first);
  assert_true(chunks && first);
  for (int i = 0; i < n; i++)
    chunks[i] = (zinc_sumsq_chunk){c[i].dev.at, c[i].n, c[i].dtype};
  size_t bad = 0;
  for (int run = 0; run < 2; run++) {
    memset(partials, POISON_BYTE, (size_t)n * sizeof *partials);
    ZOK(d->ops->sumsq(d, NULL, chunks, n, partials));
    ZOK(d->ops->stream_sync(d, NULL));
    for (int i = 0; i < n; i++) {
      double want = zinc_sumsq_chunk_ref(c[i].host, c[i].n, c[i].dtype);
      double got = partials[i];
      int64_t blocks = (c[i].n + ZINC_SUMSQ_BLOCK - 1) / ZINC_SUMSQ_BLOCK;
      double tol = exact[i] ? 0.0 : 2.3e-16 * (double)(blocks > 1 ? blocks - 1 : 0) * want;
      int ok = isfinite(want) ? fabs(got - want) <= tol : !isfinite(got);
      if (run == 1 && memcmp(&got, &first[i], sizeof got) != 0) {
        if (bad < MAX_REPORTED)
          fprintf(stderr, "chunk %d (n=%lld %s): run 1 gave %.17g, run 2 %.17g\n", i,
                  (long long)c[i].n, dtype_label(c[i].dtype), first[i], got);
        bad++;
      }
      if (!ok) {
        if (bad < MAX_REPORTED)
          fprintf(stderr, "chunk %d (n=%lld %s offset %zu): got %.17g, want %.17g (difference "
                  "%.3g, allowed %.3g)\n", i, (long long)c[i].n, dtype_label(c[i].dtype),
                  c[i].offset, got, want, fabs(got - want), tol);
        bad++;
      }
    }
    memcpy(first, partials, (size_t)n * sizeof *partials);
  }
  free(chunks);
  free(first);
  return bad;
}

static const int64_t sizes[] = {0,    1,    15,   16,   17,    4095,         4096,
                                4097, 8191, 8192, 12365, 100003, (1 << 20) + 7};

static void odd_sizes_every_dtype(void **state) {
  zinc_device *d = *state;
  int ns = (int)(sizeof sizes / sizeof sizes[0]);
  test_rng rng = {2024};
  size_t bad = 0;
  for (int dtype = ZINC_F32; dtype <= ZINC_F16; dtype++) {
    chunk_case c[sizeof sizes / sizeof sizes[0]];
    int exact[sizeof sizes / sizeof sizes[0]];
    double partials[sizeof sizes / sizeof sizes[0]];
    for (int i = 0; i < ns; i++) {
      chunk_init(d, &c[i], sizes[i], dtype, (size_t)(i % 4), &rng, 0);
      exact[i] = sizes[i] <= ZINC_SUMSQ_BLOCK;
    }
    bad += check_chunks(d, c, ns, partials, exact);
    for (int i = 0; i < ns; i++)
      chunk_fini(d, &c[i]);
  }
  assert_int_equal(bad, 0);
}

/* Only block 1 of three is non-zero: the sum is that block's sum exactly,
 * which checks the block indexing and the per-block canonical order. */
static void block_sums_are_canonical(void **state) {
  zinc_device *d = *state;
  test_rng rng = {5};
  chunk_case c[3];
  int exact[3] = {1, 1, 1};
  double partials[3];
  for (int i = 0; i < 3; i++)
    chunk_init(d, &c[i], 3 * ZINC_SUMSQ_BLOCK - i * 100, i, (size_t)i, &rng, 1);
  size_t bad = check_chunks(d, c, 3, partials, exact);
  for (int i = 0; i < 3; i++)
    chunk_fini(d, &c[i]);
  assert_int_equal(bad, 0);
}

/* More chunks than one launch (ZINC_CUDA_SUMSQ_CHUNKS_PER_LAUNCH), empty
 * ones among them, partials in pinned host memory. */
static void many_chunks_pinned_partials(void **state) {
  zinc_device *d = *state;
  enum { N = 230 };
  test_rng rng = {99};
  chunk_case *c = calloc(N, sizeof *c);
  int *exact = calloc(N, sizeof *exact);
  double *partials = NULL;
  assert_true(c && exact);
  ZOK(d->ops->alloc(d, N * sizeof *partials, ZINC_LOC_HOST, ZINC_MEM_OTHER, (void **)&partials));
  for (int i = 0; i < N; i++) {
    int64_t n = i % 11 == 0 ? 0 : 1 + (int64_t)(rng_u32(&rng) % 9000);
    chunk_init(d, &c[i], n, i % 3, (size_t)(i % 4), &rng, 0);
    exact[i] = n <= ZINC_SUMSQ_BLOCK;
  }
  size_t bad = check_chunks(d, c, N, partials, exact);
  for (int i = 0; i < N; i++)
    chunk_fini(d, &c[i]);
  d->ops->free(d, partials, N * sizeof *partials, ZINC_LOC_HOST, ZINC_MEM_OTHER);
  free(c);
  free(exact);
  assert_int_equal(bad, 0);
}

static void nonfinite_elements(void **state) {
  zinc_device *d = *state;
  test_rng rng = {7};
  chunk_case c[4];
  int exact[4] = {0, 0, 0, 0};
  double partials[4];
  for (int i = 0; i < 4; i++)
    chunk_init(d, &c[i], 10000 + i, i == 3 ? ZINC_F16 : ZINC_F32, 0, &rng, 0);
  /* chunk 0: +inf, chunk 1: NaN, chunk 2: finite, chunk 3: f16 inf */
  zinc_store_from_f32(c[0].host, 5000, ZINC_F32, INFINITY);
  zinc_store_from_f32(c[1].host, 9999, ZINC_F32, NAN);
  zinc_store_from_f32(c[3].host, 17, ZINC_F16, -INFINITY);
  for (int i = 0; i < 4; i++)
    guarded_upload(&c[i].dev, c[i].host);
  size_t bad = check_chunks(d, c, 4, partials, exact);
  assert_true(isinf(partials[0]));
  assert_true(isnan(partials[1]));
  assert_true(isfinite(partials[2]));
  assert_true(isinf(partials[3]));
  for (int i = 0; i < 4; i++)
    chunk_fini(d, &c[i]);
  assert_int_equal(bad, 0);
}

int main(void) {
  gpu_require();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(odd_sizes_every_dtype),
      cmocka_unit_test(block_sums_are_canonical),
      cmocka_unit_test(many_chunks_pinned_partials),
      cmocka_unit_test(nonfinite_elements),
  };
  return cmocka_run_group_tests(tests, gpu_group_setup, gpu_group_teardown);
}
