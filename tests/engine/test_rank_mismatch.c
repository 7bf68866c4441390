/*
 * test_rank_mismatch.c — what one rank does differently reaches every rank
 * as the same error, within seconds, under mpirun with 2+ ranks. The last
 * rank is the odd one out:
 *  - its init function fails: every rank returns that status from
 *    zinc_engine_build, naming the rank, the parameter and the function's
 *    own message;
 *  - it loads a config that differs in one key (the stage, a bucket size,
 *    the learning rate): zinc_engine_create fails on every rank with
 *    ZINC_ERR_CONFIG naming the key, both values and both ranks;
 *  - it registers a parameter with another shape: the build fails on every
 *    rank naming the parameter and its shapes (not "different values");
 * and a negative zinc_options.threads is refused at creation.
 * The comm timeout is 60 s, so a rank left waiting in a collective shows as
 * a COMM error or a slow call, never as a pass. With one rank there is
 * nothing to disagree: SKIPPED (exit 77), after the threads check (ctest
 * runs it at 2 and 3 ranks).
 */
#include <mpi.h>

#include "engine_test.h"

#define TIMEOUT_JSON "\"zinc\": {\"comm_timeout_s\": 60}"

static int odd_one(void) { return et_world - 1; }

/* ---------------------------------------------------------- init fails */

static zinc_status failing_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  if (et_rank == odd_one() && !strcmp(zinc_param_name(p), "b1"))
    return zinc_error_set(ZINC_ERR_IO, "cannot read pretrained.bin: no such file");
  return et_init(p, dst, n, ctx);
}

static void test_init_fails_on_one_rank(void) {
  et_run r = et_defaults();
  r.extra = TIMEOUT_JSON;
  for (int stage = 0; stage <= 3; stage++) {
    r.stage = stage;
    zinc_engine *e = et_create(&r, NULL);
    et_model m;
    et_register_run(&m, e, &r);
    et_init_ctx c = {&r.shape};
    double t0 = MPI_Wtime();
    zinc_status st = zinc_engine_build(e, failing_init, &c);
    double dt = MPI_Wtime() - t0;
    char what[64];
    snprintf(what, sizeof what, "stage %d, init fails on rank %d", stage, odd_one());
    et_expect_everywhere(st, ZINC_ERR_IO, dt, what,
                      (const char *const[]){"\"mid.b1\"", "pretrained.bin", NULL},
                     odd_one());
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
}

/* ---------------------------------------------------------- config */

/* The last rank's config text has `from` replaced by `to`. */
static void test_config_differs(const char *key, const char *from, const char *to,
                                int stage_odd) {
  et_run r = et_defaults();
  r.stage = 2;
  r.extra = TIMEOUT_JSON;
  if (et_rank == odd_one() && stage_odd >= 0)
    r.stage = stage_odd;
  char *json = et_config_json(&r);
  char *at = from ? strstr(json, from) : NULL;
  if (from && et_rank == odd_one()) {
    ET_CHECK(at != NULL, "the test's config has no \"%s\"", from);
    if (!at)
      return;
    char *edited = malloc(strlen(json) + strlen(to) + 1);
    sprintf(edited, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    free(json);
    json = edited;
  }
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_engine *e = NULL;
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_create(cfg, NULL, &e);
  double dt = MPI_Wtime() - t0;
  char what[96];
  snprintf(what, sizeof what, "%s differs on rank %d", key, odd_one());
  et_expect_everywhere(st, ZINC_ERR_CONFIG, dt, what, (const char *const[]){key, NULL},
                     odd_one());
  ET_CHECK(e == NULL, "%s: an engine came back with the error", what);
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
}

/* ---------------------------------------------------------- shapes */

static void test_shape_differs(void) {
  et_run r = et_defaults();
  r.extra = TIMEOUT_JSON;
  r.stage = 3;
  zinc_engine *e = et_create(&r, NULL);
  zinc_module *mod = zinc_module_add(e, "only");
  int64_t shape[2] = {4, et_rank == odd_one() ? 6 : 5};
  ET_CHECK(zinc_param_add(e, mod, "w", ZINC_F32, 2, shape) != NULL, "param_add: %s",
           zinc_last_error());
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_build(e, NULL, NULL);
  double dt = MPI_Wtime() - t0;
  et_expect_everywhere(st, ZINC_ERR_INVALID, dt, "a shape differs",
                    (const char *const[]){"\"only.w\"", "shape", NULL},
                     odd_one());
  zinc_engine_destroy(e);
}

/* ---------------------------------------------------------- options */

static void test_negative_threads(void) {
  et_run r = et_defaults();
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = -5;
  zinc_engine *e = NULL;
  zinc_status st = zinc_engine_create(cfg, &opt, &e);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "threads"),
           "threads = -5: %s: %s", zinc_status_name(st), zinc_last_error());
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  test_negative_threads();
  if (et_world < 2) {
    printf("SKIPPED: test_rank_mismatch needs 2 or more ranks (threads check passed: %s)\n",
           et_failures ? "no" : "yes");
    MPI_Finalize();
    return et_failures ? 1 : 77;
  }
  test_init_fails_on_one_rank();
  test_config_differs("zero_optimization.stage", NULL, NULL, 3);
  test_config_differs("zero_optimization.stage", NULL, NULL, 1);
  test_config_differs("zero_optimization.reduce_bucket_size", "\"reduce_bucket_size\": 1000",
                      "\"reduce_bucket_size\": 2000", -1);
  test_config_differs("optimizer.params.lr", "\"lr\": 0.01", "\"lr\": 0.02", -1);
  test_shape_differs();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "rank mismatch tests FAILED\n"
               : "rank mismatch tests passed at %d ranks: init failure, 4 config "
                 "differences, a shape difference, each on every rank\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
