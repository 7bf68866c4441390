/*
 * optim_cases.h — the optimizer cases the CPU kernel tests run (every kind
 * and pass, SGD's variants, Lamb without bias correction), their
 * coefficients and the state slots each uses. Needs cmocka (included
 * before it).
 */
#ifndef ZINC_OPTIM_CASES_H
#define ZINC_OPTIM_CASES_H

#include "optim/optimizer.h"

typedef struct {
  const char *name;
  zinc_opt_hparams h;
  int64_t step;
  int pass;
} optim_case;

static inline optim_case make_case(const char *name, int kind, int64_t step, int pass) {
  optim_case c = {name, {0}, step, pass};
  c.h.kind = kind;
  c.h.lr = 1e-2;
  c.h.beta1 = 0.9;
  c.h.beta2 = 0.999;
  c.h.eps = 1e-8;
  c.h.weight_decay = 0.05;
  c.h.bias_correction = 1;
  c.h.min_coeff = 0.01;
  c.h.max_coeff = 10.0;
  return c;
}

enum { NCASES = 11 };
static inline void all_cases(optim_case *c) {
  c[0] = make_case("Adam", ZINC_OPT_ADAM, 7, ZINC_OPT_PASS_UPDATE);
  c[1] = make_case("AdamW", ZINC_OPT_ADAM, 3, ZINC_OPT_PASS_UPDATE);
  c[1].h.adamw = 1;
  c[2] = make_case("Lamb UPDATE", ZINC_OPT_LAMB, 5, ZINC_OPT_PASS_UPDATE);
  c[3] = make_case("Lamb APPLY", ZINC_OPT_LAMB, 5, ZINC_OPT_PASS_APPLY);
  c[4] = make_case("Lion", ZINC_OPT_LION, 2, ZINC_OPT_PASS_UPDATE);
  c[4].h.beta2 = 0.99;
  c[4].h.weight_decay = 0.1;
  c[5] = make_case("Adagrad", ZINC_OPT_ADAGRAD, 4, ZINC_OPT_PASS_UPDATE);
  c[5].h.eps = 1e-10;
  c[6] = make_case("SGD", ZINC_OPT_SGD, 4, ZINC_OPT_PASS_UPDATE);
  c[7] = make_case("SGD momentum dampening", ZINC_OPT_SGD, 4, ZINC_OPT_PASS_UPDATE);
  c[7].h.momentum = 0.9;
  c[7].h.dampening = 0.25;
  c[8] = make_case("SGD momentum first step", ZINC_OPT_SGD, 1, ZINC_OPT_PASS_UPDATE);
  c[8].h.momentum = 0.8;
  c[8].h.dampening = 0.5;
  c[9] = make_case("SGD nesterov", ZINC_OPT_SGD, 6, ZINC_OPT_PASS_UPDATE);
  c[9].h.momentum = 0.9;
  c[9].h.nesterov = 1;
  c[10] = make_case("Lamb UPDATE no bias correction", ZINC_OPT_LAMB, 1, ZINC_OPT_PASS_UPDATE);
  c[10].h.bias_correction = 0;
}

static inline zinc_opt_coef case_coef(const optim_case *c, double grad_scale) {
  zinc_opt_coef k;
  assert_int_equal(zinc_opt_coef_init(&k, &c->h, c->step, grad_scale), ZINC_OK);
  return k;
}

/* The slots this case uses (the others are passed as NULL). */
static inline void case_slots(const optim_case *c, int *use_m, int *use_v, int *use_g) {
  int slots = zinc_opt_state_slots(&c->h);
  *use_m = (slots & ZINC_OPT_SLOT_EXP_AVG) != 0;
  *use_v = (slots & ZINC_OPT_SLOT_EXP_AVG_SQ) != 0;
  *use_g = !(c->h.kind == ZINC_OPT_LAMB && c->pass == ZINC_OPT_PASS_APPLY);
}

#endif /* ZINC_OPTIM_CASES_H */
