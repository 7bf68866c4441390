/*
 * adam.h — the coefficients of one Adam/AdamW step (zinc_opt_coef, in
 * kernels/zinc_math.h), computed once per step on the host in double and
 * rounded to float, so that every path (scalar, SIMD, CUDA) starts from the
 * same bits.
 *
 * The formulas are PyTorch's torch.optim.Adam / AdamW (and DeepSpeed's CPU
 * Adam) with t the 1-based step:
 *   step_size    = lr / (1 - beta1^t)          (lr without bias correction)
 *   inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t)       (1 without bias correction)
 *   decay_factor = 1 - lr * weight_decay       (AdamW: p *= decay_factor)
 *   weight_decay                               (Adam: g += weight_decay * p)
 * grad_scale multiplies every gradient first (unscaling, averaging over
 * ranks and micro-batches, clipping: the caller folds them into one factor).
 */
#ifndef ZINC_ADAM_H
#define ZINC_ADAM_H

#include <stdint.h>

#include "zinc.h"
#include "kernels/zinc_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill *c for step `step` (1-based). adamw: 1 decoupled weight decay,
 * 0 L2 added to the gradient. ZINC_ERR_INVALID (and *c untouched) when
 * step < 1, a beta is outside [0, 1), eps or lr or weight_decay is negative
 * or any value is not finite. */
zinc_status zinc_adam_coef_init(zinc_opt_coef *c, double lr, double beta1, double beta2,
                                double eps, double weight_decay, int adamw,
                                int bias_correction, int64_t step, double grad_scale);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_ADAM_H */
