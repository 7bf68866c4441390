/* TEMPORARY stand-in until the config branch lands (same API). */
#ifndef ZINC_LOSS_SCALER_H
#define ZINC_LOSS_SCALER_H
#include <stdint.h>
#include "config/config.h"
typedef struct {
  double cur_scale;
  int dynamic;
  double scale_factor, min_scale;
  int scale_window, delayed_shift, cur_hysteresis, consecutive_hysteresis;
  int64_t cur_iter, last_overflow_iter;
} zinc_loss_scaler;
void zinc_loss_scaler_init(zinc_loss_scaler *ls, const zinc_settings *s);
void zinc_loss_scaler_update(zinc_loss_scaler *ls, int overflow);
float zinc_loss_scaler_scale(const zinc_loss_scaler *ls);
#endif
