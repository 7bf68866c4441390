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
  }
  return s->lr;
}
