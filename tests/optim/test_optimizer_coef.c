/*
 * test_optimizer_coef.c — zinc_opt_coef_init for every optimizer against
 * the formulas of optim/optimizer.h worked out here in double (each field
 * the float rounding of its formula), every range check (refused with
 * ZINC_ERR_INVALID, the output untouched), and zinc_lamb_ratio: zero norms,
 * the clamps, and FusedLamb's float square roots.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "optim/optimizer.h"

static zinc_opt_hparams hp(int kind) {
  zinc_opt_hparams h = {0};
  h.kind = kind;
  h.lr = 2e-3;
  h.beta1 = 0.85;
  h.beta2 = 0.995;
  h.eps = 1e-6;
  h.weight_decay = 0.03;
  h.bias_correction = 1;
  h.min_coeff = 0.01;
  h.max_coeff = 10.0;
  return h;
}

#define EXPECT_F(field, formula)                                                          \
  do {                                                                                    \
    float want_ = (float)(formula);                                                       \
    if (c.field != want_)                                                                 \
      fail_msg("%s: " #field " %.9g, formula " #formula " gives %.9g", name, c.field, want_); \
  } while (0)

static zinc_opt_coef init_ok(const zinc_opt_hparams *h, int64_t step, double grad_scale) {
  zinc_opt_coef c;
  assert_int_equal(zinc_opt_coef_init(&c, h, step, grad_scale), ZINC_OK);
  assert_int_equal(c.kind, h->kind);
  return c;
}

static void adam_values(void **state) {
  const char *name = "Adam";
  zinc_opt_hparams h = hp(ZINC_OPT_ADAM);
  h.adamw = 1;
  zinc_opt_coef c = init_ok(&h, 4, 0.125);
  double t = 4.0;
  EXPECT_F(grad_scale, 0.125);
  EXPECT_F(beta1, 0.85);
  EXPECT_F(one_minus_beta1, 1.0 - 0.85);
  EXPECT_F(one_minus_beta2, 1.0 - 0.995);
  EXPECT_F(eps, 1e-6);
  EXPECT_F(step_size, 2e-3 / (1.0 - pow(0.85, t)));
  EXPECT_F(inv_sqrt_bc2, 1.0 / sqrt(1.0 - pow(0.995, t)));
  EXPECT_F(decay_factor, 1.0 - 2e-3 * 0.03);
  assert_int_equal(c.adamw, 1);
  h.bias_correction = 0;
  c = init_ok(&h, 4, 1.0);
  EXPECT_F(step_size, 2e-3);
  EXPECT_F(inv_sqrt_bc2, 1.0);
}

static void lamb_values(void **state) {
  const char *name = "Lamb";
  zinc_opt_hparams h = hp(ZINC_OPT_LAMB);
  zinc_opt_coef c = init_ok(&h, 3, 0.5);
  double t = 3.0;
  EXPECT_F(grad_scale, 0.5);
  EXPECT_F(beta2, 0.995);
  EXPECT_F(one_minus_beta2, 1.0 - 0.995);
  EXPECT_F(eps, 1e-6);
  EXPECT_F(step_size, 2e-3 * sqrt(1.0 - pow(0.995, t)) / (1.0 - pow(0.85, t)));
  EXPECT_F(weight_decay, 0.03);
  EXPECT_F(min_coeff, 0.01);
  EXPECT_F(max_coeff, 10.0);
  EXPECT_F(inv_sqrt_bc2, 1.0);
  h.bias_correction = 0;
  c = init_ok(&h, 3, 0.5);
  EXPECT_F(step_size, 2e-3);
}

static void lion_adagrad_sgd_values(void **state) {
  const char *name = "Lion";
  zinc_opt_hparams h = hp(ZINC_OPT_LION);
  zinc_opt_coef c = init_ok(&h, 9, 1.0);
  EXPECT_F(step_size, 2e-3);
  EXPECT_F(decay_factor, 1.0 - 2e-3 * 0.03);
  EXPECT_F(beta1, 0.85);
  EXPECT_F(one_minus_beta2, 1.0 - 0.995);
  name = "Adagrad";
  h = hp(ZINC_OPT_ADAGRAD);
  c = init_ok(&h, 9, 0.25);
  EXPECT_F(step_size, 2e-3);
  EXPECT_F(weight_decay, 0.03);
  EXPECT_F(eps, 1e-6);
  EXPECT_F(grad_scale, 0.25);
  name = "SGD";
  h = hp(ZINC_OPT_SGD);
  h.momentum = 0.9;
  h.dampening = 0.3;
  c = init_ok(&h, 1, 1.0);
  EXPECT_F(step_size, 2e-3);
  EXPECT_F(momentum, 0.9);
  EXPECT_F(one_minus_dampening, 1.0 - 0.3);
  assert_int_equal(c.first_step, 1);
  assert_int_equal(c.nesterov, 0);
  c = init_ok(&h, 2, 1.0);
  assert_int_equal(c.first_step, 0);
  h.dampening = 0.0;
  h.nesterov = 1;
  c = init_ok(&h, 5, 1.0);
  assert_int_equal(c.nesterov, 1);
  EXPECT_F(one_minus_dampening, 1.0);
  h = hp(ZINC_OPT_SGD); /* momentum 0: no buffer */
  c = init_ok(&h, 5, 1.0);
  EXPECT_F(momentum, 0.0);
}

/* Each change makes the hyperparameters invalid on its own. */
typedef struct {
  const char *what;
  int kind;
  void (*set)(zinc_opt_hparams *h);
} bad_case;

#define BAD(what, stmt)                                                               \
  static void set_##what(zinc_opt_hparams *h) { stmt; }
BAD(lr_negative, h->lr = -1e-3)
BAD(lr_nan, h->lr = NAN)
BAD(lr_inf, h->lr = INFINITY)
BAD(wd_negative, h->weight_decay = -0.1)
BAD(beta1_one, h->beta1 = 1.0)
BAD(beta2_negative, h->beta2 = -0.1)
BAD(eps_negative, h->eps = -1e-8)
BAD(min_coeff_negative, h->min_coeff = -0.5)
BAD(max_below_min, h->max_coeff = 0.001)
BAD(max_inf, h->max_coeff = INFINITY)
BAD(momentum_negative, h->momentum = -0.9)
BAD(dampening_above_one, h->dampening = 1.5)
BAD(dampening_negative, h->dampening = -0.1)
BAD(nesterov_no_momentum, h->nesterov = 1)
BAD(nesterov_dampening, (h->nesterov = 1, h->momentum = 0.9, h->dampening = 0.1))
BAD(kind_negative, h->kind = -1)
BAD(kind_beyond, h->kind = ZINC_OPT_KINDS)
#undef BAD

static void range_errors(void **state) {
  const bad_case cases[] = {
      {"lr < 0", ZINC_OPT_ADAM, set_lr_negative},
      {"lr NaN", ZINC_OPT_LAMB, set_lr_nan},
      {"lr inf", ZINC_OPT_LION, set_lr_inf},
      {"weight_decay < 0", ZINC_OPT_SGD, set_wd_negative},
      {"weight_decay < 0", ZINC_OPT_ADAGRAD, set_wd_negative},
      {"beta1 1", ZINC_OPT_ADAM, set_beta1_one},
      {"beta1 1", ZINC_OPT_LAMB, set_beta1_one},
      {"beta1 1", ZINC_OPT_LION, set_beta1_one},
      {"beta2 < 0", ZINC_OPT_LAMB, set_beta2_negative},
      {"beta2 < 0", ZINC_OPT_LION, set_beta2_negative},
      {"eps < 0", ZINC_OPT_LAMB, set_eps_negative},
      {"eps < 0", ZINC_OPT_ADAGRAD, set_eps_negative},
      {"eps < 0", ZINC_OPT_ADAM, set_eps_negative},
      {"min_coeff < 0", ZINC_OPT_LAMB, set_min_coeff_negative},
      {"max_coeff < min_coeff", ZINC_OPT_LAMB, set_max_below_min},
      {"max_coeff inf", ZINC_OPT_LAMB, set_max_inf},
      {"momentum < 0", ZINC_OPT_SGD, set_momentum_negative},
      {"dampening > 1", ZINC_OPT_SGD, set_dampening_above_one},
      {"dampening < 0", ZINC_OPT_SGD, set_dampening_negative},
      {"nesterov without momentum", ZINC_OPT_SGD, set_nesterov_no_momentum},
      {"nesterov with dampening", ZINC_OPT_SGD, set_nesterov_dampening},
      {"kind -1", ZINC_OPT_ADAM, set_kind_negative},
      {"kind beyond the last", ZINC_OPT_ADAM, set_kind_beyond},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zinc_opt_hparams h = hp(cases[i].kind);
    zinc_opt_coef before, c;
    memset(&before, 0x6b, sizeof before);
    c = before;
    zinc_status st = zinc_opt_coef_init(&c, &h, 3, 1.0);
    assert_int_equal(st, ZINC_OK); /* valid before the change */
    c = before;
    cases[i].set(&h);
    st = zinc_opt_coef_init(&c, &h, 3, 1.0);
    if (st != ZINC_ERR_INVALID || memcmp(&c, &before, sizeof c))
      fail_msg("%s (%s): status %d, output %s", cases[i].what,
               zinc_opt_kind_str(cases[i].kind), (int)st,
               memcmp(&c, &before, sizeof c) ? "touched" : "untouched");
    fprintf(stderr, "%s: %s\n", cases[i].what, zinc_last_error());
  }
  /* every kind: step 0, an infinite grad_scale, NULL pointers */
  for (int kind = 0; kind < ZINC_OPT_KINDS; kind++) {
    zinc_opt_hparams h = hp(kind);
    zinc_opt_coef c;
    assert_int_equal(zinc_opt_coef_init(&c, &h, 0, 1.0), ZINC_ERR_INVALID);
    assert_int_equal(zinc_opt_coef_init(&c, &h, 1, INFINITY), ZINC_ERR_INVALID);
    assert_int_equal(zinc_opt_coef_init(&c, &h, 1, NAN), ZINC_ERR_INVALID);
    assert_int_equal(zinc_opt_coef_init(NULL, &h, 1, 1.0), ZINC_ERR_INVALID);
    assert_int_equal(zinc_opt_coef_init(&c, NULL, 1, 1.0), ZINC_ERR_INVALID);
  }
}

static void lamb_ratio(void **state) {
  /* no norm: ratio 1, clamps or not */
  assert_true(zinc_lamb_ratio(0.0, 5.0, 0.01f, 10.0f) == 1.0f);
  assert_true(zinc_lamb_ratio(5.0, 0.0, 0.01f, 10.0f) == 1.0f);
  assert_true(zinc_lamb_ratio(0.0, 0.0, 2.0f, 10.0f) == 1.0f);
  /* |p| / |u| with float square roots */
  assert_true(zinc_lamb_ratio(4.0, 1.0, 0.01f, 10.0f) == 2.0f);
  assert_true(zinc_lamb_ratio(2.0, 3.0, 0.01f, 10.0f) == sqrtf(2.0f) / sqrtf(3.0f));
  /* clamps */
  assert_true(zinc_lamb_ratio(400.0, 1.0, 0.01f, 10.0f) == 10.0f);
  assert_true(zinc_lamb_ratio(1e-6, 1.0, 0.01f, 10.0f) == 0.01f);
  assert_true(zinc_lamb_ratio(1.0, 1.0, 0.0f, 0.5f) == 0.5f);
  /* a sum of squares below float's range rounds to 0: no norm */
  assert_true(zinc_lamb_ratio(1e-50, 1.0, 0.01f, 10.0f) == 1.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(adam_values),
      cmocka_unit_test(lamb_values),
      cmocka_unit_test(lion_adagrad_sgd_values),
      cmocka_unit_test(range_errors),
      cmocka_unit_test(lamb_ratio),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
