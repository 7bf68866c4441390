/* TEMPORARY stand-in until the config branch lands (same API). */
#ifndef ZINC_LR_SCHEDULE_H
#define ZINC_LR_SCHEDULE_H
#include <stdint.h>
#include "config/config.h"
double zinc_lr_at(const zinc_settings *s, int64_t iteration);
#endif
