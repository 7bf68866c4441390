/*
 * gpt_report.c — the GPT trainer's output (see gpt_report.h). Everything
 * printed here is printed by rank 0 only; gpt_print_memory is collective
 * because it gathers the other ranks' figures first.
 */
#include "gpt_report.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double gpt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------- progress */

void gpt_progress_start(gpt_progress *p, int64_t tokens_per_step) {
  memset(p, 0, sizeof(*p));
  p->start = p->interval_start = gpt_now();
  p->tokens_per_step = tokens_per_step;
}

void gpt_progress_add(gpt_progress *p, double loss, double seconds, int first) {
  p->interval_steps++;
  p->loss_sum += loss;
  if (!first) { /* the first step pays for first-touch allocations */
    p->timed_seconds += seconds;
    p->timed_steps++;
  }
}

double gpt_progress_tokens_per_s(const gpt_progress *p) {
  return p->timed_steps ? (double)p->tokens_per_step * (double)p->timed_steps /
                              p->timed_seconds
                        : 0.0;
}

static void format_duration(char *buf, size_t len, double s) {
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void gpt_progress_print(gpt_progress *p, int64_t step, int64_t steps,
                        const zinc_step_info *info) {
  double now = gpt_now(), elapsed = now - p->start;
  double interval = now - p->interval_start;
  double tok_s = interval > 0 ? (double)p->tokens_per_step * (double)p->interval_steps /
                                    interval
                              : 0.0;
  double per_step = p->timed_steps ? p->timed_seconds / (double)p->timed_steps
                                   : elapsed / (double)(p->interval_steps ? p->interval_steps : 1);
  char el[32], eta[32];
  format_duration(el, sizeof(el), elapsed);
  format_duration(eta, sizeof(eta), per_step * (double)(steps - step));
  printf("step %5lld/%lld | loss %.4f | lr %.2e | scale %g | grad norm %.3f | "
         "%.0f tok/s | %s elapsed | ETA %s%s\n",
         (long long)step, (long long)steps,
         p->interval_steps ? p->loss_sum / (double)p->interval_steps : 0.0, info->lr,
         info->loss_scale, info->grad_norm, tok_s, el, eta,
         info->skipped ? " | step skipped (overflow)" : "");
  fflush(stdout);
  p->interval_start = now;
  p->interval_steps = 0;
  p->loss_sum = 0;
}

void gpt_print_timers(const zinc_timers *t, int64_t steps) {
  double k = steps > 0 ? 1e3 / (double)steps : 0;
  printf("           time/step: forward %.1f ms | backward %.1f ms | step %.1f ms | "
         "comm wait %.1f ms\n",
         t->forward * k, t->backward * k, t->step * k, t->comm_wait * k);
}

/* --------------------------------------------------------------- memory */

/* Per rank, as doubles for zinc_allgather_host: peak[loc][cat], peak_total[loc],
 * the ZeRO formula. Byte counts below 2^53 are exact in a double. */
#define MEM_FIELDS (ZINC_LOC_N * ZINC_MEM_NCAT + ZINC_LOC_N + 1)

zinc_status gpt_print_memory(zinc_engine *e, double trainer_activation_bytes) {
  zinc_mem_stats m = ZINC_MEM_STATS_INIT;
  zinc_status st = zinc_memory_stats(e, &m);
  if (st != ZINC_OK)
    return st;
  double mine[MEM_FIELDS];
  for (int loc = 0; loc < ZINC_LOC_N; loc++) {
    for (int cat = 0; cat < ZINC_MEM_NCAT; cat++)
      mine[loc * ZINC_MEM_NCAT + cat] = (double)m.peak[loc][cat];
    mine[ZINC_LOC_N * ZINC_MEM_NCAT + loc] = (double)m.peak_total[loc];
  }
  mine[MEM_FIELDS - 1] = (double)m.theoretical_model_states;
  int ranks = zinc_world_size(e);
  double *all = malloc((size_t)ranks * MEM_FIELDS * sizeof(double));
  if (!all) /* every rank fails alike only if all are out of memory; say so */
    return ZINC_ERR_NOMEM;
  st = zinc_allgather_host(e, mine, MEM_FIELDS, all);
  if (st != ZINC_OK || zinc_rank(e) != 0) {
    free(all);
    return st;
  }
  const double MiB = 1024.0 * 1024.0;
  printf("\nmemory: peak MiB per rank (model states = params + grads + optim; "
         "ZeRO formula = what the stage should hold)\n");
  /* every column one wider than its longest name ("activations"), so that
   * no two headers run together */
  printf("  rank  %-13s", "where");
  for (int cat = 0; cat < ZINC_MEM_NCAT; cat++)
    printf(" %11s", zinc_mem_category_name(cat));
  printf(" %11s %14s\n", "total", "ZeRO formula");
  for (int r = 0; r < ranks; r++) {
    const double *v = all + (size_t)r * MEM_FIELDS;
    int printed = 0, any = 0;
    for (int loc = 0; loc < ZINC_LOC_N; loc++)
      any |= v[ZINC_LOC_N * ZINC_MEM_NCAT + loc] > 0;
    for (int loc = 0; loc < ZINC_LOC_N; loc++) {
      double total = v[ZINC_LOC_N * ZINC_MEM_NCAT + loc];
      if (total == 0 && (any || loc != ZINC_LOC_DEVICE)) /* rows that hold something */
        continue;
      printf("  %4d  %-13s", r, zinc_engine_location_name(e, loc));
      for (int cat = 0; cat < ZINC_MEM_NCAT; cat++)
        printf(" %11.2f", v[loc * ZINC_MEM_NCAT + cat] / MiB);
      printf(" %11.2f", total / MiB);
      if (!printed)
        printf(" %14.2f", v[MEM_FIELDS - 1] / MiB);
      printf("\n");
      printed = 1;
    }
  }
  printf("  activations include the trainer's own (registered, every rank): %.2f MiB\n",
         trainer_activation_bytes / MiB);
  free(all);
  return ZINC_OK;
}

/* ---------------------------------------------------------- checkpoints */

void gpt_ckpt_tag(char *buf, size_t len, int64_t step) {
  snprintf(buf, len, "global_step%lld", (long long)step);
}

int64_t gpt_ckpt_latest_step(const char *dir, char *err, size_t errlen) {
  char path[PATH_MAX], tag[PATH_MAX];
  snprintf(path, sizeof(path), "%s/latest", dir);
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    snprintf(err, errlen, "no checkpoint to resume from: %s: %s", path, strerror(errno));
    return -1;
  }
  if (S_ISLNK(sb.st_mode)) {
    ssize_t n = readlink(path, tag, sizeof(tag) - 1);
    if (n < 0) {
      snprintf(err, errlen, "cannot read link %s: %s", path, strerror(errno));
      return -1;
    }
    tag[n] = 0;
  } else {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(tag, 1, sizeof(tag) - 1, f) : 0;
    if (f)
      fclose(f);
    tag[n] = 0;
  }
  /* keep the last path component, without trailing slashes or newline */
  size_t len = strlen(tag);
  while (len > 0 && (tag[len - 1] == '\n' || tag[len - 1] == '/' || tag[len - 1] == ' '))
    tag[--len] = 0;
  const char *name = strrchr(tag, '/') ? strrchr(tag, '/') + 1 : tag;
  long long step = -1;
  char extra;
  if (sscanf(name, "global_step%lld%c", &step, &extra) != 1 || step < 0) {
    snprintf(err, errlen,
             "%s names '%s', not a checkpoint of this trainer (global_stepN); "
             "pass the matching --ckpt-dir or start without --resume",
             path, name);
    return -1;
  }
  return step;
}
