/*
 * loss_scaler.c — DeepSpeed's DynamicLossScaler.update_scale as a plain
 * struct update (see loss_scaler.h for the rules). The sequence of states
 * is the same as DeepSpeed's for the same sequence of overflow flags,
 * except at the minimum scale, where DeepSpeed raises and zinc counts
 * (stuck_skips; the engine stops at zinc.max_consecutive_skips).
 */
#include "optim/loss_scaler.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(zinc_loss_scaler) == 80, "zinc_loss_scaler is stored byte for byte");

void zinc_loss_scaler_init(zinc_loss_scaler *ls, const zinc_settings *s) {
  memset(ls, 0, sizeof *ls);
  ls->scale_factor = 2.0;
  ls->min_scale = s->fp16_min_loss_scale;
  ls->scale_window = s->fp16_loss_scale_window;
  ls->delayed_shift = s->fp16_hysteresis;
  ls->cur_hysteresis = s->fp16_hysteresis;
  ls->consecutive_hysteresis = s->fp16_consecutive_hysteresis;
  ls->last_overflow_iter = -1;
  if (s->fp16_enabled != 1) {
    ls->cur_scale = 1.0;
  } else if (s->fp16_loss_scale > 0) {
    ls->cur_scale = s->fp16_loss_scale;
  } else {
    ls->dynamic = 1;
    ls->cur_scale = pow(2.0, s->fp16_initial_scale_power); /* 2**power, as DeepSpeed */
  }
}

void zinc_loss_scaler_update(zinc_loss_scaler *ls, int overflow) {
  if (overflow) {
    ls->overflows++;
    /* checked before this overflow lowers the scale: the skip that brings
     * the scale down to the minimum still had a remedy */
    if (!ls->dynamic || ls->cur_scale == ls->min_scale)
      ls->stuck_skips++;
  } else {
    ls->stuck_skips = 0;
  }
  if (!ls->dynamic)
    return;
  if (overflow) {
    if (ls->delayed_shift == 1 || ls->cur_hysteresis == 1) {
      if (ls->cur_scale == ls->min_scale) {
        ls->overflows_at_min++;
      } else {
        double next = ls->cur_scale / ls->scale_factor;
        ls->cur_scale = next > ls->min_scale ? next : ls->min_scale;
      }
    } else {
      ls->cur_hysteresis--;
    }
    ls->last_overflow_iter = ls->cur_iter;
  } else {
    if (ls->consecutive_hysteresis)
      ls->cur_hysteresis = ls->delayed_shift;
    if ((ls->cur_iter - ls->last_overflow_iter) % ls->scale_window == 0) {
      if (!ls->consecutive_hysteresis)
        ls->cur_hysteresis = ls->delayed_shift;
      ls->cur_scale *= ls->scale_factor;
    }
  }
  ls->cur_iter++;
}

/* The state grows without bound as DeepSpeed's (a Python float); only the
 * float handed out saturates, at the largest power of two a float holds. */
float zinc_loss_scaler_scale(const zinc_loss_scaler *ls) {
  return ls->cur_scale < 0x1p127 ? (float)ls->cur_scale : 0x1p127f;
}

void zinc_loss_scaler_state(const zinc_loss_scaler *ls, double *scale, int64_t *iter,
                            int64_t *last_overflow, int *hysteresis) {
  *scale = ls->cur_scale;
  *iter = ls->cur_iter;
  *last_overflow = ls->last_overflow_iter;
  *hysteresis = ls->cur_hysteresis;
}

void zinc_loss_scaler_restore(zinc_loss_scaler *ls, double scale, int64_t iter,
                              int64_t last_overflow, int hysteresis) {
  /* a static or disabled scaler keeps its configured scale */
  if (ls->dynamic)
    ls->cur_scale = scale;
  ls->cur_iter = iter;
  ls->last_overflow_iter = last_overflow;
  ls->cur_hysteresis = hysteresis;
  ls->stuck_skips = 0;
}
