/*
 * test_api_misuse.c — API misuse returns ZINC_ERR_INVALID with a message and
 * never crashes, under mpirun: calls before build, build twice, a module
 * added after build, another engine's module or NULL, data and gradients
 * outside fetch/release or of a released parameter, step before
 * backward_end, grads_ready twice, bad arguments, two parameters whose
 * "module.param" names collide; destroy accepts NULL.
 */
#include "engine_test.h"

#define EXPECT_INVALID(expr)                                                          \
  do {                                                                                \
    zinc_status st_ = (expr);                                                         \
    ET_CHECK(st_ == ZINC_ERR_INVALID && zinc_last_error()[0], "%s gave %s (%s)", #expr, \
             zinc_status_name(st_), zinc_last_error());                               \
  } while (0)

static void test_misuse(void) {
  et_run r = et_defaults();
  r.stage = 3;
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  et_register_run(&m, e, &r);
  /* before build */
  EXPECT_INVALID(zinc_step(e, NULL));
  EXPECT_INVALID(zinc_module_fetch(e, m.mod[0]));
  EXPECT_INVALID(zinc_backward_end(e));
  ET_OK(zinc_engine_build(e, et_init, &m.ictx));
  EXPECT_INVALID(zinc_engine_build(e, et_init, &m.ictx));
  ET_CHECK(zinc_module_add(e, "late") == NULL, "module added after build");
  /* a module of another engine, NULL */
  zinc_engine *other = et_create(&r, NULL);
  zinc_module *foreign = zinc_module_add(other, "foreign");
  EXPECT_INVALID(zinc_module_fetch(e, foreign));
  EXPECT_INVALID(zinc_module_fetch(e, NULL));
  zinc_engine_destroy(other);
  /* data and grad outside fetch/release */
  ET_CHECK(zinc_param_data(m.par[0]) == NULL && zinc_last_error()[0], "data of unfetched");
  ET_CHECK(zinc_param_grad(m.par[0]) == NULL && zinc_last_error()[0], "grad of unfetched");
  EXPECT_INVALID(zinc_module_release(e, m.mod[0]));
  EXPECT_INVALID(zinc_step(e, NULL)); /* no backward_end yet */
  /* a whole correct micro-batch, then grad of a released parameter */
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro, NULL);
  (void)N;
  ET_CHECK(zinc_param_grad(m.par[2]) == NULL && zinc_last_error()[0], "grad of released");
  ET_OK(zinc_step(e, NULL));
  /* grads_ready twice */
  ET_OK(zinc_module_fetch(e, m.mod[0]));
  ET_OK(zinc_module_release(e, m.mod[0]));
  ET_OK(zinc_module_fetch(e, m.mod[1]));
  ET_OK(zinc_module_release(e, m.mod[1]));
  ET_OK(zinc_module_fetch(e, m.mod[2]));
  ET_OK(zinc_module_release(e, m.mod[2]));
  ET_OK(zinc_module_fetch(e, m.mod[3]));
  ET_OK(zinc_module_release(e, m.mod[3]));
  ET_OK(zinc_module_fetch(e, m.mod[3]));
  ET_CHECK(zinc_param_grad(m.par[5]) != NULL, "grad: %s", zinc_last_error());
  ET_OK(zinc_module_grads_ready(e, m.mod[3]));
  EXPECT_INVALID(zinc_module_grads_ready(e, m.mod[3]));
  ET_CHECK(zinc_param_grad(m.par[5]) == NULL, "grad handed out after grads_ready");
  /* bad arguments */
  EXPECT_INVALID(zinc_param_get_full(e, m.par[0], ZINC_STATE_PARAM, NULL));
  EXPECT_INVALID(zinc_param_set_full(e, m.par[0], ZINC_STATE_GRAD, m.P[0]));
  EXPECT_INVALID(zinc_allreduce_host(e, NULL, 3, ZINC_REDUCE_SUM));
  ET_CHECK(zinc_param_add(e, m.mod[0], "x", ZINC_F32, 0, NULL) == NULL, "ndim 0 accepted");
  et_model_free(&m);
  zinc_engine_destroy(e);
  zinc_engine_destroy(NULL);
}

/* Module "a.b" with "c" and module "a" with "b.c" would both be "a.b.c" in
 * checkpoints and exports: the second registration is refused. */
static void test_name_collision(void) {
  et_run r = et_defaults();
  zinc_engine *e = et_create(&r, NULL);
  int64_t shape[1] = {3};
  zinc_module *ab = zinc_module_add(e, "a.b"), *a = zinc_module_add(e, "a");
  ET_CHECK(zinc_param_add(e, ab, "c", ZINC_F32, 1, shape) != NULL, "a.b + c: %s",
           zinc_last_error());
  ET_CHECK(zinc_param_add(e, a, "b.c", ZINC_F32, 1, shape) == NULL &&
               strstr(zinc_last_error(), "\"a.b.c\""),
           "module \"a\" + parameter \"b.c\" was not refused: %s", zinc_last_error());
  ET_CHECK(zinc_param_add(e, a, "b.d", ZINC_F32, 1, shape) != NULL, "a + b.d: %s",
           zinc_last_error());
  zinc_engine_destroy(e);
}

int main(void) {
  test_misuse();
  test_name_collision();
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("API misuse checks passed at %d ranks\n", et_world);
  return 0;
}
