/*
 * optimizer.c — per-step coefficients of every optimizer (see optimizer.h).
 * Everything is computed in double and rounded to float once, at the end.
 */
#include <math.h>

#include "base/base.h"
#include "optim/adam.h"
#include "optim/optimizer.h"

const char *zinc_opt_kind_name(int kind) { return zinc_opt_kind_str(kind); }

int zinc_opt_state_slots(const zinc_opt_hparams *h) {
  switch (h->kind) {
  case ZINC_OPT_ADAM:
  case ZINC_OPT_LAMB:
    return ZINC_OPT_SLOT_EXP_AVG | ZINC_OPT_SLOT_EXP_AVG_SQ;
  case ZINC_OPT_LION:
    return ZINC_OPT_SLOT_EXP_AVG;
  case ZINC_OPT_ADAGRAD:
    return ZINC_OPT_SLOT_EXP_AVG_SQ;
  case ZINC_OPT_SGD:
    return h->momentum != 0.0 ? ZINC_OPT_SLOT_EXP_AVG : 0;
  default:
    return 0;
  }
}

int zinc_opt_state_bytes(const zinc_opt_hparams *h) {
  int s = zinc_opt_state_slots(h);
  return 4 * (((s & ZINC_OPT_SLOT_EXP_AVG) != 0) + ((s & ZINC_OPT_SLOT_EXP_AVG_SQ) != 0));
}

static int in_unit(double x) { return x >= 0.0 && x < 1.0; }
static int nonneg(double x) { return x >= 0.0 && isfinite(x); }

zinc_status zinc_opt_coef_init(zinc_opt_coef *c, const zinc_opt_hparams *h, int64_t step,
                               double grad_scale) {
  if (!c || !h)
    return zinc_error(ZINC_ERR_INVALID, "optimizer coefficients: NULL argument");
  const char *name = zinc_opt_kind_name(h->kind);
  if (h->kind < 0 || h->kind >= ZINC_OPT_KINDS)
    return zinc_error(ZINC_ERR_INVALID, "optimizer coefficients: unknown optimizer kind %d",
                      h->kind);
  if (step < 1)
    return zinc_error(ZINC_ERR_INVALID, "%s coefficients: step %lld; steps count from 1", name,
                      (long long)step);
  if (!nonneg(h->lr) || !nonneg(h->weight_decay) || !isfinite(grad_scale))
    return zinc_error(ZINC_ERR_INVALID,
                      "%s coefficients: lr %g and weight_decay %g must be finite and >= 0, "
                      "grad_scale %g finite", name, h->lr, h->weight_decay, grad_scale);
  if (h->kind == ZINC_OPT_ADAM) {
    ZINC_CHECK(zinc_adam_coef_init(c, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay,
                                   h->adamw, h->bias_correction, step, grad_scale));
    c->kind = ZINC_OPT_ADAM;
    return ZINC_OK;
  }
  zinc_opt_coef k = {0};
  k.kind = h->kind;
  k.grad_scale = (float)grad_scale;
  k.step_size = (float)h->lr;
  k.weight_decay = (float)h->weight_decay;
  k.decay_factor = (float)(1.0 - h->lr * h->weight_decay);
  double t = (double)step;
  switch (h->kind) {
  case ZINC_OPT_LAMB: {
    if (!in_unit(h->beta1) || !in_unit(h->beta2) || !nonneg(h->eps) ||
        !nonneg(h->min_coeff) || !(h->max_coeff >= h->min_coeff) || !isfinite(h->max_coeff))
      return zinc_error(ZINC_ERR_INVALID,
                        "Lamb coefficients: betas (%g, %g) must be in [0, 1), eps %g >= 0, "
                        "0 <= min_coeff %g <= max_coeff %g", h->beta1, h->beta2, h->eps,
                        h->min_coeff, h->max_coeff);
    double bc1 = h->bias_correction ? 1.0 - pow(h->beta1, t) : 1.0;
    double bc2 = h->bias_correction ? 1.0 - pow(h->beta2, t) : 1.0;
    k.step_size = (float)(h->lr * sqrt(bc2) / bc1);
    k.min_coeff = (float)h->min_coeff;
    k.max_coeff = (float)h->max_coeff;
    break;
  }
  case ZINC_OPT_LION:
    if (!in_unit(h->beta1) || !in_unit(h->beta2))
      return zinc_error(ZINC_ERR_INVALID, "Lion coefficients: betas (%g, %g) must be in [0, 1)",
                        h->beta1, h->beta2);
    break;
  case ZINC_OPT_ADAGRAD:
    if (!nonneg(h->eps))
      return zinc_error(ZINC_ERR_INVALID, "Adagrad coefficients: eps %g must be >= 0", h->eps);
    break;
  case ZINC_OPT_SGD:
    if (!nonneg(h->momentum) || !(h->dampening >= 0.0 && h->dampening <= 1.0) ||
        (h->nesterov && (h->momentum <= 0.0 || h->dampening != 0.0)))
      return zinc_error(ZINC_ERR_INVALID,
                        "SGD coefficients: momentum %g must be >= 0 and dampening %g in [0, 1]; "
                        "nesterov needs momentum > 0 and dampening 0", h->momentum,
                        h->dampening);
    k.momentum = (float)h->momentum;
    k.one_minus_dampening = (float)(1.0 - h->dampening);
    k.nesterov = h->nesterov ? 1 : 0;
    k.first_step = step == 1;
    break;
  }
  k.beta1 = (float)h->beta1;
  k.one_minus_beta1 = (float)(1.0 - h->beta1);
  k.beta2 = (float)h->beta2;
  k.one_minus_beta2 = (float)(1.0 - h->beta2);
  k.eps = (float)h->eps;
  k.inv_sqrt_bc2 = 1.0f;
  *c = k;
  return ZINC_OK;
}

float zinc_lamb_ratio(double w_sumsq, double u_sumsq, float min_coeff, float max_coeff) {
  float w = sqrtf((float)w_sumsq), u = sqrtf((float)u_sumsq);
  if (w == 0.0f || u == 0.0f)
    return 1.0f;
  float r = w / u;
  if (r > max_coeff)
    r = max_coeff;
  if (r < min_coeff)
    r = min_coeff;
  return r;
}
