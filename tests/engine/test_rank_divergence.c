/*
 * test_rank_divergence.c — ranks that disagree get ZINC_ERR_INVALID on every
 * rank instead of a hang or mixed buffers, under mpirun with 2+ ranks:
 *  - an init function giving different values on different ranks fails the
 *    build, naming the parameter;
 *  - ranks that fetch modules in different orders: in the first
 *    micro-batch the fetch fails naming both modules;
 *  - in a later micro-batch (stage 3, with and without prefetch), ranks
 *    that fetch in different orders, or one rank that leaves out a module:
 *    every rank gets ZINC_ERR_INVALID naming the module within 10 s, and
 *    the engine stops.
 * With one rank there is nothing to disagree: SKIPPED (exit 77).
 */
#include <mpi.h>

#include "engine_test.h"

/* In the first micro-batch the fetch fails naming both modules. */
static void test_first_micro_divergence(void) {
  et_run r = et_defaults();
  r.stage = 3;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 20}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int me = zinc_dp_rank(e);
  /* the last rank fetches "mid" where the others fetch "in" */
  zinc_status st = zinc_module_fetch(e, me == et_world - 1 ? m.mod[1] : m.mod[0]);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "\"mid\"") &&
           strstr(zinc_last_error(), "\"in\""),
           "first micro-batch divergence: %s: %s", zinc_status_name(st), zinc_last_error());
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* A later micro-batch, after two steps, at stage 3 with and without
 * prefetch: the last rank fetches "mid" first where the others fetch "in"
 * (order), or rank 1 alone leaves out "scale" (skip). Whatever call the
 * deviation surfaces in, every rank gets ZINC_ERR_INVALID naming the
 * deviating module within 10 s (comm_timeout_s 20: a rank left waiting
 * shows as a failure, not a 600 s hang), and the engine stops. */
static void test_later_divergence(int64_t prefetch, int skip) {
  et_run r = et_defaults();
  r.stage = 3;
  r.prefetch = prefetch;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 20}";
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  ET_OK(et_steps(&m, &r, 0, 2));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st;
  const char *name;
  if (skip) {
    name = "\"scale\"";
    st = et_micro_batch_skip(&m, &r.shape, r.dtype, (2 * (int64_t)N + me) * r.micro, r.micro,
                             me == 1 ? 2 : -1);
  } else {
    name = "\"mid\"";
    zinc_module *first = me == et_world - 1 ? m.mod[1] : m.mod[0];
    st = zinc_module_fetch(e, first);
    if (st == ZINC_OK)
      st = zinc_module_release(e, first);
    for (int k = 1; k < 4 && st == ZINC_OK; k++) {
      st = zinc_module_fetch(e, m.mod[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m.mod[k]);
    }
    for (int k = 3; k >= 0 && st == ZINC_OK; k--) {
      st = zinc_module_fetch(e, m.mod[k]);
      if (st == ZINC_OK)
        st = zinc_module_grads_ready(e, m.mod[k]);
      if (st == ZINC_OK)
        st = zinc_module_release(e, m.mod[k]);
    }
    if (st == ZINC_OK)
      st = zinc_backward_end(e);
  }
  double dt = MPI_Wtime() - t0;
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), name),
           "later divergence (%s, prefetch %lld): %s: %s", skip ? "skip" : "order",
           (long long)prefetch, zinc_status_name(st), zinc_last_error());
  ET_CHECK(dt < 10.0, "later divergence (%s, prefetch %lld): the failure took %.1f s to reach "
           "this rank", skip ? "skip" : "order", (long long)prefetch, dt);
  ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "engine went on after a divergence");
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
  test_first_micro_divergence();
  for (int skip = 0; skip <= 1; skip++) {
    test_later_divergence(0, skip);
    test_later_divergence(1500, skip);
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("rank divergence checks passed at %d ranks\n", et_world);
  return 0;
}
