/*
 * test_rank_divergence.c — ranks that disagree get ZINC_ERR_INVALID on every
 * rank instead of a hang or mixed buffers, under mpirun with 2+ ranks:
 *  - an init function giving different values on different ranks fails the
 *    build, naming the parameter;
 *  - ranks that fetch modules in different orders: in the first
 *    micro-batch the fetch fails naming both modules; in a later one the
 *    collectives keep the recorded order and backward_end reports the
 *    deviation, after which the engine stops.
 * With one rank there is nothing to disagree: SKIPPED (exit 77).
 */
#include "engine_test.h"

static void test_divergence(int first_micro) {
  et_run r = et_defaults();
  r.stage = 3;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int me = zinc_dp_rank(e);
  if (!first_micro) {
    et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  /* the last rank fetches "mid" where the others fetch "in" */
  zinc_module *first = me == et_world - 1 ? m.mod[1] : m.mod[0];
  zinc_status st = zinc_module_fetch(e, first);
  if (first_micro) {
    ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"mid\"") &&
             strstr(zinc_last_error(), "\"in\""),
             "first micro-batch divergence: %s: %s", zinc_status_name(st), zinc_last_error());
  } else {
    /* served in the recorded order; the deviation is reported at backward_end */
    ET_OK(st);
    ET_OK(zinc_module_release(e, first));
    for (int k = 1; k < 4; k++) {
      ET_OK(zinc_module_fetch(e, m.mod[k]));
      ET_OK(zinc_module_release(e, m.mod[k]));
    }
    for (int k = 3; k >= 0; k--) {
      ET_OK(zinc_module_fetch(e, m.mod[k]));
      ET_OK(zinc_module_grads_ready(e, m.mod[k]));
      ET_OK(zinc_module_release(e, m.mod[k]));
    }
    st = zinc_backward_end(e);
    ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"in\""),
             "later divergence: %s: %s", zinc_status_name(st), zinc_last_error());
    ET_CHECK(zinc_step(e, NULL) == ZINC_ERR_INVALID, "engine went on after a divergence");
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* an init function that gives different values on different ranks */
static zinc_status rank_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = strcmp(zinc_param_name(p), "W1") == 0 ? (float)et_rank : 0.5f;
  return ZINC_OK;
}

static void test_init_mismatch(void) {
  et_run r = et_defaults();
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  et_model_register(&m, e, &r.shape, r.dtype);
  zinc_status st = zinc_engine_build(e, rank_init, NULL);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "mid.W1"),
           "init values differing across ranks: %s \"%s\"", zinc_status_name(st),
           zinc_last_error());
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  /* the world size is known once an engine exists (zinc initialises MPI) */
  et_run r = et_defaults();
  zinc_engine_destroy(et_create(&r, NULL));
  if (et_world < 2) {
    printf("SKIPPED: rank divergence needs 2 or more ranks\n");
    return 77;
  }
  test_init_mismatch();
  test_divergence(1);
  test_divergence(0);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("rank divergence checks passed at %d ranks\n", et_world);
  return 0;
}
