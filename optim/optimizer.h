/*
 * optimizer.h — the optimizer family (optimizer.type): hyperparameters,
 * the per-step coefficients every kernel path reads (zinc_opt_coef in
 * kernels/zinc_math.h) and which fp32 state slots each optimizer keeps.
 *
 * The formulas, with t the 1-based step and g the gradient already
 * multiplied by grad_scale (unscaling, averaging, clipping):
 *   Adam/AdamW  torch.optim.Adam/AdamW, DeepSpeed's CPU Adam (see adam.h)
 *   Lamb        DeepSpeed's FusedLamb (eps outside the square root):
 *                 m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *                 u = m / (sqrt(v) + eps) + weight_decay * p
 *                 ratio = |p| / |u| over the whole parameter, clamped to
 *                         [min_coeff, max_coeff]; 1 when either norm is 0
 *                 p -= lr * sqrt(1-b2^t)/(1-b1^t) * ratio * u
 *               (bias correction in the step size, as FusedLamb)
 *   Lion        DeepSpeed's CPU Lion:
 *                 c = b1 m + (1-b1) g;  p = p (1 - lr wd) - lr sign(c)
 *                 (sign by copysign: +-lr also when c is 0)
 *                 m = b2 m + (1-b2) g
 *   Adagrad     torch.optim.Adagrad (lr_decay 0, initial accumulator 0):
 *                 g += wd p;  s += g^2;  p -= lr g / (sqrt(s) + eps)
 *               (DeepSpeed's CPU Adagrad divides the gradient without the
 *               decay term; the two agree when weight_decay is 0)
 *   SGD         torch.optim.SGD: d = g + wd p; with momentum
 *                 buf = d (first step) or momentum buf + (1-dampening) d,
 *                 d = nesterov ? d + momentum buf : buf;  p -= lr d
 */
#ifndef ZINC_OPTIMIZER_H
#define ZINC_OPTIMIZER_H

#include <stdint.h>

#include "kernels/zinc_math.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int kind;                 /* zinc_opt_kind */
  double lr, beta1, beta2, eps, weight_decay;
  int adamw;                /* Adam: decoupled weight decay */
  int bias_correction;      /* Adam, Lamb */
  double momentum, dampening; /* SGD */
  int nesterov;             /* SGD */
  double min_coeff, max_coeff; /* Lamb */
} zinc_opt_hparams;

/* State slots the optimizer keeps (bit 0: exp_avg, bit 1: exp_avg_sq). */
enum { ZINC_OPT_SLOT_EXP_AVG = 1, ZINC_OPT_SLOT_EXP_AVG_SQ = 2 };
int zinc_opt_state_slots(const zinc_opt_hparams *h);
/* fp32 state bytes per optimized element beside the master (4 per slot). */
int zinc_opt_state_bytes(const zinc_opt_hparams *h);
/* "Adam", "Lamb", "Lion", "Adagrad", "SGD". */
const char *zinc_opt_kind_name(int kind);
/* 1 when the optimizer needs the two-pass step with per-parameter norms. */
static inline int zinc_opt_two_pass(int kind) { return kind == ZINC_OPT_LAMB; }

/* Fill *c for step `step` (1-based). ZINC_ERR_INVALID (and *c untouched)
 * when a value is out of its range (named in the message). */
zinc_status zinc_opt_coef_init(zinc_opt_coef *c, const zinc_opt_hparams *h, int64_t step,
                               double grad_scale);

/* Lamb's trust ratio from the squared norms of the weights and the update,
 * as FusedLamb computes it (float square roots, then clamp). */
float zinc_lamb_ratio(double w_sumsq, double u_sumsq, float min_coeff, float max_coeff);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_OPTIMIZER_H */
