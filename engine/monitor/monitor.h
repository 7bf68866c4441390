/*
 * monitor.h — the engine's monitors: the csv_monitor and tensorboard
 * writers with wall_clock_breakdown's lines (monitor.c, through
 * tfevents.h) and the comms_logger's counters (comms_logger.c). Nothing
 * here is collective; world rank 0 writes.
 */
#ifndef ZINC_ENGINE_MONITOR_H
#define ZINC_ENGINE_MONITOR_H

#include "zinc.h"

/* ------------------------------------------------------- comms_logger.c */
/* Counters on every comm of the engine from creation on (attach again
 * after a comm is added: it hangs them on the new ones); the summary and
 * the counters freed at destroy (before and after the comms go). */
zinc_status zinc_comms_logger_attach(zinc_engine *e);
void zinc_comms_logger_report(zinc_engine *e);
void zinc_comms_logger_free(zinc_engine *e);

/* ------------------------------------------------------------ monitor.c */
/* Open the monitors the config enables (world rank 0); close them. */
zinc_status zinc_monitor_open(zinc_engine *e);
void zinc_monitor_close(zinc_engine *e);
/* After every successful zinc_step: the wall_clock_breakdown lines, and at
 * a boundary the engine's figures to the monitors. Never fails. */
void zinc_monitor_step(zinc_engine *e, const zinc_step_info *info);

#endif /* ZINC_ENGINE_MONITOR_H */
