/*
 * lr_schedule.c — DeepSpeed's warmup schedules as a pure function of the
 * iteration (see lr_schedule.h for the formulas and the step convention).
 *
 * Operation order matters for bit-exact agreement with DeepSpeed: every
 * expression below is evaluated in the order Python evaluates the original
 * (left to right, no fused multiply-add: the build uses -ffp-contract=off).
 */
#include "optim/lr_schedule.h"

#include <math.h>

/* The warmup fraction in [0, 1) for it < n. */
static double warmup_gamma(const zinc_settings *s, int64_t it, int64_t n) {
  if (s->warmup_type == ZINC_WARMUP_LINEAR)
    return (double)it / (double)n;
  double inverse_log_warm_up = 1.0 / log((double)n);
  return inverse_log_warm_up * log((double)(it + 1));
}

static double warmup_lr(const zinc_settings *s, double gamma) {
  double delta = s->warmup_max_lr - s->warmup_min_lr;
  return s->warmup_min_lr + delta * gamma;
}

static double cosine_ratio(const zinc_settings *s, int64_t it, int64_t n) {
  if (it < n) {
    double ratio = warmup_gamma(s, it, n);
    double ratio_delta = 1.0 - s->warmup_min_ratio;
    return s->warmup_min_ratio + ratio * ratio_delta;
  }
  double real_last_step = (double)(it - n + 1);
  double real_total_steps = (double)(s->total_num_steps - n);
  /* DeepSpeed divides by zero here; the config rejects total == n, and a
   * hand-built settings struct gets DeepSpeed's later fix (max(1, ...)). */
  if (real_total_steps == 0)
    real_total_steps = 1;
  double ratio_delta = 1.0 - s->cos_min_ratio;
  double ratio = (1 + cos(M_PI * real_last_step / real_total_steps)) / 2;
  ratio = s->cos_min_ratio + ratio_delta * ratio;
  return ratio > 0.0 ? ratio : 0.0;
}

/* OneCycle's cycle length T = first + second step size (second: as the
 * first when not given) and the position in the cycle, in [0, 1]. */
static double one_cycle_total(const zinc_settings *s) {
  double first = s->cycle_first_step_size;
  double second = isnan(s->cycle_second_step_size) ? first : s->cycle_second_step_size;
  return first + second;
}

static double one_cycle_scale(const zinc_settings *s, int64_t it) {
  double total_size = one_cycle_total(s);
  double step_ratio = s->cycle_first_step_size / total_size;
  double batch_iteration = (double)(it + 1);
  double cycle = floor(1 + batch_iteration / total_size);
  double x = 1. + batch_iteration / total_size - cycle;
  if (x <= step_ratio)
    return x / step_ratio;
  return (x - 1) / (step_ratio - 1);
}

static double one_cycle_lr(const zinc_settings *s, int64_t it) {
  double total_size = one_cycle_total(s);
  if ((double)it < total_size) {
    double base_height = (s->cycle_max_lr - s->cycle_min_lr) * one_cycle_scale(s, it);
    return s->cycle_min_lr + base_height;
  }
  if (s->decay_step_size == 0 || s->decay_lr_rate == 0)
    return s->cycle_min_lr;
  double decay_batch_iteration = (double)it - total_size + 1;
  double decay_interval = decay_batch_iteration / s->decay_step_size;
  double lr_decay_factor = (1 + s->decay_lr_rate * decay_interval);
  return s->cycle_min_lr / lr_decay_factor;
}

static double one_cycle_momentum(const zinc_settings *s, int64_t it) {
  double total_size = one_cycle_total(s);
  if ((double)it < total_size) {
    double base_height = (s->cycle_max_mom - s->cycle_min_mom) * one_cycle_scale(s, it);
    return s->cycle_max_mom - base_height;
  }
  if (s->decay_step_size == 0 || s->decay_mom_rate == 0)
    return s->cycle_max_mom;
  double decay_batch_iteration = (double)it - total_size + 1;
  double decay_interval = decay_batch_iteration / s->decay_step_size;
  double mom_decay_factor = (1 + s->decay_mom_rate * decay_interval);
  return s->cycle_max_mom * mom_decay_factor;
}

static double lr_range_test_lr(const zinc_settings *s, int64_t it) {
  double interval = (double)(it + 1) / s->lr_range_test_step_size;
  if (s->lr_range_test_staircase)
    interval = floor(interval);
  double lr_increase = (1 + s->lr_range_test_step_rate * interval);
  return s->lr_range_test_min_lr * lr_increase;
}

void zinc_betas_at(const zinc_settings *s, int64_t iteration, double *beta1, double *beta2) {
  int64_t it = iteration < 0 ? 0 : iteration;
  if (s->scheduler == ZINC_SCHED_ONE_CYCLE && s->cycle_momentum) {
    *beta1 = one_cycle_momentum(s, it);
    *beta2 = 0.99;
    return;
  }
  *beta1 = s->beta1;
  *beta2 = s->beta2;
}

double zinc_lr_at(const zinc_settings *s, int64_t iteration) {
  int64_t it = iteration < 0 ? 0 : iteration;
  int64_t n = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
  switch (s->scheduler) {
  case ZINC_SCHED_NONE:
    return s->lr;
  case ZINC_SCHED_WARMUP_LR:
    return warmup_lr(s, it < n ? warmup_gamma(s, it, n) : 1.0);
  case ZINC_SCHED_WARMUP_DECAY: {
    if (it < n)
      return warmup_lr(s, warmup_gamma(s, it, n));
    double span = (double)(s->total_num_steps - n);
    double gamma = (double)(s->total_num_steps - it) / (span > 1.0 ? span : 1.0);
    return warmup_lr(s, gamma > 0.0 ? gamma : 0.0);
  }
  case ZINC_SCHED_WARMUP_COSINE:
    return s->lr * cosine_ratio(s, it, n);
  case ZINC_SCHED_ONE_CYCLE:
    return one_cycle_lr(s, it);
  case ZINC_SCHED_LR_RANGE_TEST:
    return lr_range_test_lr(s, it);
  }
  return s->lr;
}
