/* TEMPORARY stand-in until the cpukern branch lands (same API). */
#ifndef ZINC_ADAM_H
#define ZINC_ADAM_H
#include <stdint.h>
#include "zinc_math.h"
void zinc_adam_coef_init(zinc_adam_coef *c, double lr, double beta1, double beta2,
                         double eps, double weight_decay, int adamw, int bias_correction,
                         int64_t step, double grad_scale);
#endif
