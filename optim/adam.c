/*
 * adam.c — per-step Adam/AdamW coefficients (see adam.h). Everything is
 * computed in double and rounded to float once, at the end.
 */
#include <math.h>

#include "base/base.h"
#include "optim/adam.h"

zinc_status zinc_adam_coef_init(zinc_opt_coef *c, double lr, double beta1, double beta2,
                                double eps, double weight_decay, int adamw,
                                int bias_correction, int64_t step, double grad_scale) {
  if (!c)
    return zinc_error(ZINC_ERR_INVALID, "adam coefficients: NULL output");
  if (step < 1)
    return zinc_error(ZINC_ERR_INVALID, "adam coefficients: step %lld; steps count from 1",
                      (long long)step);
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    return zinc_error(ZINC_ERR_INVALID,
                      "adam coefficients: betas (%g, %g) must each be in [0, 1)", beta1, beta2);
  if (!(lr >= 0.0) || !isfinite(lr) || !(eps >= 0.0) || !isfinite(eps) ||
      !(weight_decay >= 0.0) || !isfinite(weight_decay) || !isfinite(grad_scale))
    return zinc_error(ZINC_ERR_INVALID,
                      "adam coefficients: lr %g, eps %g, weight_decay %g must be finite and "
                      ">= 0, grad_scale %g finite", lr, eps, weight_decay, grad_scale);
  *c = (zinc_opt_coef){0};
  c->kind = ZINC_OPT_ADAM;
  double t = (double)step;
  double bc1 = bias_correction ? 1.0 - pow(beta1, t) : 1.0;
  double bc2 = bias_correction ? 1.0 - pow(beta2, t) : 1.0;
  c->grad_scale = (float)grad_scale;
  c->beta1 = (float)beta1;
  c->one_minus_beta1 = (float)(1.0 - beta1);
  c->beta2 = (float)beta2;
  c->one_minus_beta2 = (float)(1.0 - beta2);
  c->eps = (float)eps;
  c->step_size = (float)(lr / bc1);
  c->inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  c->weight_decay = (float)weight_decay;
  c->decay_factor = (float)(1.0 - lr * weight_decay);
  c->adamw = adamw ? 1 : 0;
  return ZINC_OK;
}
