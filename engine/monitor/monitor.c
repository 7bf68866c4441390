/*
 * monitor.c — the monitors DeepSpeed users already read: "csv_monitor"
 * (one CSV file per metric) and "tensorboard" (an event file), fed by the
 * engine's own figures at each accumulation boundary and by the trainer's
 * zinc_monitor_scalar; and the wall_clock_breakdown lines.
 *
 * What DeepSpeed writes, and so what this writes (deepspeed/monitor/):
 *  - Both go under output_path/job_name ("" output_path: the working
 *    directory), written by world rank 0 only.
 *  - csv: metric "Train/Samples/lr" goes to Train_Samples_lr.csv ('/' and
 *    ' ' become '_'), opened for append at each event; the first event of
 *    a metric in this process writes the header row "step,lr" (the name's
 *    last '/' part). Rows are "<step>,<value>" with CRLF line ends (Python's
 *    csv module) and the value as Python prints a float.
 *  - The step of every event is the number of samples trained so far
 *    (DeepSpeed's global_samples: boundaries x train_batch_size, skipped
 *    steps included).
 *  - The engine writes at each boundary Train/Samples/lr and, with fp16,
 *    Train/Samples/loss_scale (DeepSpeed's two), and zinc's own, for
 *    which DeepSpeed writes no event (so has no name):
 *    Train/Samples/grad_norm, Train/Samples/step_time_ms (wall time since
 *    the previous boundary) and Train/Samples/memory_<location>_<category>
 *    (bytes held now, for each pair that has held any). With
 *    wall_clock_breakdown, DeepSpeed's Train/Samples/elapsed_time_ms_forward,
 *    _backward, _backward_inner, _backward_allreduce and _step too.
 *
 * Invariants
 *  - Only the rank that writes has e->mon; every other rank's calls are
 *    no-ops, so nothing here is collective and nothing here may make ranks
 *    take different paths: a write that fails inside zinc_step is logged
 *    once and turns the monitors off (the step itself succeeded on every
 *    rank); zinc_monitor_scalar returns its failure to the trainer.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/fs.h"
#include "engine/engine.h"
#include "engine/memory/profiler.h"
#include "engine/monitor/monitor.h"
#include "engine/monitor/tfevents.h"

#define MON_NAME_MAX 256

struct zinc_monitor {
  int csv, tb;                            /* which monitors write          */
  char csv_dir[ZINC_MONITOR_PATH_MAX + 300];
  char (*seen)[MON_NAME_MAX];             /* csv files given a header by
                                             this process                  */
  int nseen, capseen;
  zinc_tfevents tbw;
  int off;                                /* a write failed: monitors off  */
  double last_boundary;                   /* zinc_now() at the last boundary */
};

/* DeepSpeed's timer names: fwd, bwd, bwd_inner, bwd_allreduce, step. */
enum { T_FWD, T_BWD, T_BWD_INNER, T_BWD_REDUCE, T_STEP, T_N };

/* ------------------------------------------------------------ timers */

/* Seconds in each phase since the engine began, whatever zinc_timers_take
 * reset since (T_BWD_INNER unused here: see interval). */
static void timer_totals(const zinc_engine *e, double t[T_N]) {
  t[T_FWD] = e->t_taken[0] + e->t_forward;
  t[T_BWD] = e->t_taken[1] + e->t_backward;
  t[T_STEP] = e->t_taken[2] + e->t_step;
  t[T_BWD_REDUCE] = e->t_bwd_wait;
  t[T_BWD_INNER] = 0;
}

/* Milliseconds in each timer between two totals. As DeepSpeed's timers
 * mean them: bwd_allreduce is the time the backward pass waited for
 * gradient reductions (the comm waits inside backward phases: a bucket's
 * reduction, the agreement before the next one, which waits for the one
 * in flight, and zinc_backward_end's flush), bwd_inner the backward pass
 * without them: the trainer's own work, with what DeepSpeed books there
 * too (stage 3's parameter gathers, activation restores, the trainer's
 * model-parallel sums). Waits outside the backward pass stay where they
 * happen: the forward's in fwd, the step's in step. */
static void interval(const double now[T_N], const double before[T_N], double ms[T_N]) {
  for (int i = 0; i < T_N; i++)
    ms[i] = 1e3 * (now[i] - before[i]);
  ms[T_BWD_INNER] = ms[T_BWD] - ms[T_BWD_REDUCE];
  if (ms[T_BWD_INNER] < 0)
    ms[T_BWD_INNER] = 0;
}

/* "time (ms) | fwd_microstep: 1.23 | ..." as DeepSpeed's SynchronizedWallClockTimer.log. */
static void print_times(const double now[T_N], const double before[T_N], const char *suffix) {
  static const char *names[T_N] = {"fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"};
  char line[512];
  double ms[T_N];
  interval(now, before, ms);
  size_t n = (size_t)snprintf(line, sizeof line, "time (ms)");
  for (int i = 0; i < T_N && n < sizeof line; i++)
    n += (size_t)snprintf(line + n, sizeof line - n, " | %s%s: %.2f", names[i], suffix, ms[i]);
  zinc_log_report0("%s", line);
}

/* ------------------------------------------------------------ csv */

/* Python's repr of a float: the shortest text that reads back the same,
 * with ".0" on an integral value ("100.0", "0.0001", "1e-05", "inf"). */
static void py_float(char *out, size_t cap, double v) {
  if (v != v) {
    snprintf(out, cap, "nan");
    return;
  }
  if (v == HUGE_VAL || v == -HUGE_VAL) {
    snprintf(out, cap, "%sinf", v < 0 ? "-" : "");
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, cap, "%.*g", prec, v);
    if (strtod(out, NULL) == v)
      break;
  }
  if (!strpbrk(out, ".e"))
    snprintf(out + strlen(out), cap - strlen(out), ".0");
}

static int csv_seen(struct zinc_monitor *m, const char *file) {
  for (int i = 0; i < m->nseen; i++)
    if (!strcmp(m->seen[i], file))
      return 1;
  return 0;
}

static zinc_status csv_write(struct zinc_monitor *m, const char *name, double value,
                             int64_t step) {
  char file[MON_NAME_MAX];
  if (strlen(name) >= sizeof file)
    return zinc_error(ZINC_ERR_INVALID, "monitor metric name \"%.40s...\" is longer than %d "
                      "bytes", name, MON_NAME_MAX - 1);
  snprintf(file, sizeof file, "%s", name);
  for (char *c = file; *c; c++)
    if (*c == '/' || *c == ' ')
      *c = '_';
  const char *slash = strrchr(name, '/');
  const char *header = slash ? slash + 1 : name;
  char path[sizeof m->csv_dir + MON_NAME_MAX + 8];
  snprintf(path, sizeof path, "%s/%s.csv", m->csv_dir, file);
  int first = !csv_seen(m, file);
  if (first && m->nseen == m->capseen) {
    int cap = m->capseen ? 2 * m->capseen : 16;
    void *p = realloc(m->seen, (size_t)cap * sizeof *m->seen);
    if (!p)
      return zinc_error(ZINC_ERR_NOMEM, "out of memory for the csv monitor's file list");
    m->seen = p;
    m->capseen = cap;
  }
  FILE *f = fopen(path, "a");
  if (!f)
    return zinc_error(ZINC_ERR_IO, "csv_monitor: cannot open %s: %s", path, strerror(errno));
  char val[64];
  py_float(val, sizeof val, value);
  int bad = 0;
  if (first)
    bad |= fprintf(f, "step,%s\r\n", header) < 0;
  bad |= fprintf(f, "%lld,%s\r\n", (long long)step, val) < 0;
  bad |= fclose(f) != 0;
  if (bad)
    return zinc_error(ZINC_ERR_IO, "csv_monitor: writing %s failed: %s", path, strerror(errno));
  if (first)
    snprintf(m->seen[m->nseen++], MON_NAME_MAX, "%s", file);
  return ZINC_OK;
}

/* ------------------------------------------------------------ events */

static zinc_status write_event(struct zinc_monitor *m, const char *name, double value,
                               int64_t step) {
  if (m->csv)
    ZINC_CHECK(csv_write(m, name, value, step));
  if (m->tb)
    ZINC_CHECK(zinc_tfevents_scalar(&m->tbw, name, (float)value, step, zinc_tfevents_now()));
  return ZINC_OK;
}

int64_t zinc_global_samples(const zinc_engine *e) {
  return e ? (e->step + e->skipped_steps) * zinc_train_batch_size(e) : 0;
}

static zinc_status step_events(zinc_engine *e, const zinc_step_info *info,
                               const double t[T_N], const double t0[T_N]) {
  struct zinc_monitor *m = e->mon;
  int64_t samples = zinc_global_samples(e);
  double now = zinc_now();
  ZINC_CHECK(write_event(m, "Train/Samples/lr", e->last_lr, samples));
  if (e->cfg.fp16_enabled == 1)
    ZINC_CHECK(write_event(m, "Train/Samples/loss_scale", info->loss_scale, samples));
  ZINC_CHECK(write_event(m, "Train/Samples/grad_norm", info->grad_norm, samples));
  ZINC_CHECK(write_event(m, "Train/Samples/step_time_ms", 1e3 * (now - m->last_boundary),
                         samples));
  m->last_boundary = now;
  zinc_mem_stats ms;
  zinc_prof_stats(e->prof, &ms);
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++) {
      if (!ms.peak[l][c])
        continue;
      char name[96];
      snprintf(name, sizeof name, "Train/Samples/memory_%s_%s", zinc_engine_location_name(e, l),
               zinc_mem_category_name(c));
      ZINC_CHECK(write_event(m, name, (double)ms.current[l][c], samples));
    }
  if (e->cfg.wall_clock_breakdown) {
    static const char *names[T_N] = {
        "Train/Samples/elapsed_time_ms_forward", "Train/Samples/elapsed_time_ms_backward",
        "Train/Samples/elapsed_time_ms_backward_inner",
        "Train/Samples/elapsed_time_ms_backward_allreduce", "Train/Samples/elapsed_time_ms_step"};
    double msec[T_N];
    interval(t, t0, msec);
    for (int i = 0; i < T_N; i++)
      ZINC_CHECK(write_event(m, names[i], msec[i], samples));
  }
  if (m->tb)
    ZINC_CHECK(zinc_tfevents_flush(&m->tbw));
  return ZINC_OK;
}

/* ------------------------------------------------------------ engine */

zinc_status zinc_monitor_open(zinc_engine *e) {
  const zinc_monitor_settings *cs = &e->cfg.csv_monitor, *ts = &e->cfg.tensorboard;
  timer_totals(e, e->mon_micro);
  memcpy(e->mon_window, e->mon_micro, sizeof e->mon_window);
  if (e->world_rank != 0 || (!cs->enabled && !ts->enabled))
    return ZINC_OK;
  struct zinc_monitor *m = calloc(1, sizeof *m);
  if (!m)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory for the monitors");
  e->mon = m;
  m->last_boundary = zinc_now();
  char dir[sizeof m->csv_dir];
  if (cs->enabled) {
    snprintf(m->csv_dir, sizeof m->csv_dir, "%s%s%s", cs->output_path,
             cs->output_path[0] ? "/" : "", cs->job_name);
    ZINC_CHECK(zinc_fs_mkdirs(m->csv_dir));
    m->csv = 1;
  }
  if (ts->enabled) {
    snprintf(dir, sizeof dir, "%s%s%s", ts->output_path, ts->output_path[0] ? "/" : "",
             ts->job_name);
    ZINC_CHECK(zinc_fs_mkdirs(dir));
    ZINC_CHECK(zinc_tfevents_open(&m->tbw, dir));
    m->tb = 1;
  }
  zinc_log0(ZINC_LOG_INFO, "monitors: %s%s%s%s%s", m->csv ? "csv in " : "",
            m->csv ? m->csv_dir : "", m->csv && m->tb ? ", " : "",
            m->tb ? "tensorboard in " : "", m->tb ? dir : "");
  return ZINC_OK;
}

void zinc_monitor_close(zinc_engine *e) {
  struct zinc_monitor *m = e->mon;
  if (!m)
    return;
  zinc_tfevents_close(&m->tbw);
  free(m->seen);
  free(m);
  e->mon = NULL;
}

void zinc_monitor_step(zinc_engine *e, const zinc_step_info *info) {
  double t[T_N];
  timer_totals(e, t);
  if (e->cfg.wall_clock_breakdown) {
    print_times(t, e->mon_micro, "_microstep");
    if (info->boundary)
      print_times(t, e->mon_window, "");
  }
  struct zinc_monitor *m = e->mon;
  if (info->boundary && m && !m->off && step_events(e, info, t, e->mon_window) != ZINC_OK) {
    zinc_log(ZINC_LOG_WARN, "monitors stopped: %s", zinc_last_error());
    m->off = 1;
  }
  memcpy(e->mon_micro, t, sizeof t);
  if (info->boundary)
    memcpy(e->mon_window, t, sizeof t);
}

/* ------------------------------------------------------------ public */

zinc_status zinc_monitor_scalar(zinc_engine *e, const char *name, double value) {
  if (!e || !name || !name[0])
    return zinc_error(ZINC_ERR_INVALID, "zinc_monitor_scalar: NULL engine or empty name");
  struct zinc_monitor *m = e->mon;
  if (!m || m->off)
    return ZINC_OK;
  return write_event(m, name, value, zinc_global_samples(e));
}

zinc_status zinc_monitor_flush(zinc_engine *e) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "zinc_monitor_flush: NULL engine");
  if (e->mon && e->mon->tb)
    return zinc_tfevents_flush(&e->mon->tbw);
  return ZINC_OK;
}
