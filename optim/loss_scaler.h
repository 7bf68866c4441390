/*
 * loss_scaler.h — fp16 loss scaling with DeepSpeed's semantics
 * (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler and
 * LossScaler; created as CreateLossScaler does).
 *
 *  - fp16 off (fp32, bf16): a static scale of 1.
 *  - fp16.loss_scale > 0: a static scale of that value.
 *  - otherwise dynamic: start at 2^initial_scale_power. An overflow skips the
 *    step; it lowers the scale by scale_factor (2, never below
 *    min_loss_scale) once `hysteresis` overflows have been absorbed (the
 *    delayed shift; each overflow before that only uses one up). After
 *    loss_scale_window consecutive steps without overflow, counted from the
 *    last overflow, the scale doubles and the hysteresis refills.
 *    consecutive_hysteresis refills it on every step without overflow.
 *
 * The struct is plain data with fixed-width fields and no padding, so a
 * checkpoint could store it byte for byte (80 bytes; same-endian machines);
 * checkpoints store the evolving state (zinc_loss_scaler_state).
 */
#ifndef ZINC_LOSS_SCALER_H
#define ZINC_LOSS_SCALER_H

#include <stdint.h>

#include "config/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double cur_scale;               /* the scale in force                        */
  double min_scale;               /* fp16.min_loss_scale                       */
  double scale_factor;            /* 2                                         */
  int64_t cur_iter;               /* updates seen                              */
  int64_t last_overflow_iter;     /* update index of the last overflow, or -1  */
  int64_t overflows;              /* overflows seen (steps skipped)            */
  int64_t stuck_skips;            /* consecutive skips that lowering the scale
                                     cannot cure: overflows met at
                                     min_loss_scale, or any overflow with a
                                     static scale (fp16 loss_scale > 0, bf16,
                                     fp32); 0 after a step without overflow
                                     and after a restore. The engine stops at
                                     zinc.max_consecutive_skips of them     */
  int32_t dynamic;                /* 1: dynamic; 0: static scale               */
  int32_t scale_window;           /* fp16.loss_scale_window                    */
  int32_t delayed_shift;          /* fp16.hysteresis                           */
  int32_t cur_hysteresis;         /* overflows still absorbed before a shift   */
  int32_t consecutive_hysteresis; /* fp16.consecutive_hysteresis               */
  int32_t overflows_at_min;       /* overflows met at min_loss_scale with no
                                     hysteresis left: DeepSpeed raises
                                     "Current loss scale already at minimum";
                                     zinc keeps the scale and counts them so
                                     that the engine can report it           */
} zinc_loss_scaler;

/* Set up from the settings (after zinc_settings_resolve_model: an fp16
 * "auto" still unresolved counts as off). */
void zinc_loss_scaler_init(zinc_loss_scaler *ls, const zinc_settings *s);
/* Account one optimizer boundary: overflow != 0 when the gradients held an
 * inf or nan on any rank (the step is skipped by the caller). */
void zinc_loss_scaler_update(zinc_loss_scaler *ls, int overflow);
/* The factor the trainer multiplies its loss (gradient) by. */
float zinc_loss_scaler_scale(const zinc_loss_scaler *ls);
/* The evolving state, for checkpoints (the rest comes from the settings). */
void zinc_loss_scaler_state(const zinc_loss_scaler *ls, double *scale, int64_t *iter,
                            int64_t *last_overflow, int *hysteresis);
void zinc_loss_scaler_restore(zinc_loss_scaler *ls, double scale, int64_t iter,
                              int64_t last_overflow, int hysteresis);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_LOSS_SCALER_H */
