/*
 * lr_schedule.h — the learning rate of DeepSpeed's schedules WarmupLR,
 * WarmupDecayLR, WarmupCosineLR, OneCycle and LRRangeTest
 * (deepspeed/runtime/lr_schedules.py), and OneCycle's Adam betas, as pure
 * functions of the settings and an iteration count.
 *
 * `iteration` is DeepSpeed's last_batch_iteration: the number of optimizer
 * steps already taken when the learning rate is needed. Steps skipped for
 * an fp16 overflow do not count (DeepSpeed does not step its scheduler on
 * them), so the caller passes its count of applied steps. A negative
 * iteration is treated as 0.
 *
 * Note on DeepSpeed's own bookkeeping: its engine constructs the schedule
 * with last_batch_iteration = -1 and calls step() after each applied
 * optimizer step, so its k-th step (k from 0) runs with the rate of
 * iteration k - 1, the first step with the constructor's value (warmup_min_lr
 * for WarmupLR/WarmupDecayLR, 0 for WarmupCosineLR in recent versions). An
 * engine that wants that exact trace passes k - 1; zinc's engine passes k.
 */
#ifndef ZINC_LR_SCHEDULE_H
#define ZINC_LR_SCHEDULE_H

#include <stdint.h>

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Learning rate at `iteration` (see above):
 *   none            s->lr
 *   WarmupLR        warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma,
 *                   gamma = log(it + 1) / log(n) (log) or it / n (linear)
 *                   while it < n, then 1; n = max(2, warmup_num_steps)
 *   WarmupDecayLR   the same warmup, then gamma =
 *                   max(0, (total - it) / max(1, total - n))
 *   WarmupCosineLR  s->lr * ratio; warmup: ratio = wmin + gamma * (1 - wmin);
 *                   after: ratio = max(0, cmin + (1 - cmin) *
 *                   (1 + cos(pi * (it - n + 1) / (total - n))) / 2)
 * The arithmetic follows DeepSpeed's Python operation for operation, so the
 * values agree to the last bit on the same libm. */
double zinc_lr_at(const zinc_settings *s, int64_t iteration);
/* Also (t = it + 1, T = first + second step size, r = first / T):
 *   OneCycle        scale = x / r if x <= r else (x - 1) / (r - 1), with
 *                   x = 1 + t/T - floor(1 + t/T); while it < T:
 *                   min_lr + (max_lr - min_lr) * scale; after, with
 *                   d = it - T + 1: min_lr / (1 + decay_lr_rate *
 *                   d / decay_step_size), or min_lr when either is 0
 *   LRRangeTest     min_lr * (1 + step_rate * (t / step_size)), the
 *                   quotient floored with lr_range_test_staircase */

/* Adam's (beta1, beta2) at `iteration`: the optimizer's betas, except
 * under OneCycle with cycle_momentum, where DeepSpeed sets the betas to
 * (momentum, 0.99) each step: while it < T, momentum = max_mom -
 * (max_mom - min_mom) * scale; after, max_mom * (1 + decay_mom_rate *
 * d / decay_step_size), or max_mom when either is 0. beta2 is 0.99 then,
 * whatever optimizer.params.betas says, as in DeepSpeed. */
void zinc_betas_at(const zinc_settings *s, int64_t iteration, double *beta1, double *beta2);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_LR_SCHEDULE_H */
