/*
 * gpt_report.h — what the GPT trainer prints (rank 0 only) and logs: the
 * progress line, the wall-clock breakdown, the per-step CSV, the memory
 * report of every rank, and checkpoint tags.
 */
#ifndef GPT_REPORT_H
#define GPT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "zinc.h"

/* Monotonic seconds. */
double gpt_now(void);

/* Running figures for the progress line. */
typedef struct {
  double start;            // wall time at the first step of this run
  double interval_start;   // wall time at the last progress line
  int64_t interval_steps;  // steps since then
  double loss_sum;         // sum of the mean losses since then
  double timed_seconds;    // wall time of every step but this run's first
  int64_t timed_steps;
  int64_t tokens_per_step; // global: B * T * accumulation * dp ranks
} gpt_progress;

void gpt_progress_start(gpt_progress *p, int64_t tokens_per_step);
/* Account one step that took `seconds`; first is 1 for this run's first. */
void gpt_progress_add(gpt_progress *p, double loss, double seconds, int first);
/* "step   10/300 | loss 2.4561 | lr 3.00e-03 | scale 1 | grad norm 0.812 |
 *  18234 tok/s | 0:05 elapsed | ETA 1:42", then resets the interval. */
void gpt_progress_print(gpt_progress *p, int64_t step, int64_t steps,
                        const zinc_step_info *info);
/* Tokens per second over the timed steps (0 if none). */
double gpt_progress_tokens_per_s(const gpt_progress *p);

/* wall_clock_breakdown: the engine's phase times per step, in ms. */
void gpt_print_timers(const zinc_timers *t, int64_t steps);

/* The memory report of every rank: gathers zinc_memory_stats with
 * zinc_allgather_host (collective) and prints, on rank 0, peak bytes per
 * category and location beside the ZeRO formula for model states. */
zinc_status gpt_print_memory(zinc_engine *e, double trainer_activation_bytes);

/* Checkpoint tag of a step ("global_step300", DeepSpeed's convention). */
void gpt_ckpt_tag(char *buf, size_t len, int64_t step);
/* The step of the checkpoint DIR/latest names (a file holding the tag, or
 * a symlink to the tag's directory); -1 with a message in err if there is
 * none or its name is not global_stepN. */
int64_t gpt_ckpt_latest_step(const char *dir, char *err, size_t errlen);

#endif /* GPT_REPORT_H */
