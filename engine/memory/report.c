/*
 * report.c — the memory report: one rank's figures as a table or JSON,
 * and every rank's gathered on rank 0 with min/max/mean across ranks.
 *
 * Model states = params + grads + optimizer state, over every location;
 * the ZeRO formula is profiler.c's zinc_formula_model_states.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

typedef struct {
  char *s;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) ZINC_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t ncap = (b->cap + (size_t)n + 1) * 2;
    char *s = realloc(b->s, ncap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = ncap;
  }
}

static zinc_status sb_finish(sbuf *b, char **text) {
  if (b->oom) {
    free(b->s);
    *text = NULL;
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing the memory report");
  }
  *text = b->s;
  return ZINC_OK;
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

static uint64_t model_states(const zinc_mem_stats *st) {
  uint64_t v = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    v += st->current[l][ZINC_MEM_PARAMS] + st->current[l][ZINC_MEM_GRADS] +
         st->current[l][ZINC_MEM_OPTIM];
  return v;
}

static double diff_pct(uint64_t measured, uint64_t formula) {
  return formula ? 100.0 * ((double)measured - (double)formula) / (double)formula : 0.0;
}

zinc_status zinc_memory_report(const zinc_engine *e, int json, char **text) {
  if (!e || !text)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_report: NULL argument");
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ZINC_CHECK(zinc_memory_stats(e, &st));
  uint64_t ms = model_states(&st);
  sbuf b = {0};
  if (json) {
    sb_printf(&b, "{\"rank\": %d, \"world_size\": %d, \"stage\": %d, \"locations\": {",
              e->world_rank, e->world_size, e->cfg.stage);
    for (int l = 0; l < ZINC_LOC_N; l++) {
      sb_printf(&b, "%s\"%s\": {\"current\": {", l ? ", " : "", zinc_mem_location_name(l));
      for (int c = 0; c < ZINC_MEM_NCAT; c++)
        sb_printf(&b, "%s\"%s\": %llu", c ? ", " : "", zinc_mem_category_name(c),
                  (unsigned long long)st.current[l][c]);
      sb_printf(&b, "}, \"peak\": {");
      for (int c = 0; c < ZINC_MEM_NCAT; c++)
        sb_printf(&b, "%s\"%s\": %llu", c ? ", " : "", zinc_mem_category_name(c),
                  (unsigned long long)st.peak[l][c]);
      sb_printf(&b, "}, \"peak_total\": %llu, \"peak_forward\": %llu, \"peak_backward\": %llu, "
                "\"peak_step\": %llu, \"last_step_peak\": %llu}",
                (unsigned long long)st.peak_total[l],
                (unsigned long long)st.phase_peak[ZINC_PHASE_FWD][l],
                (unsigned long long)st.phase_peak[ZINC_PHASE_BWD][l],
                (unsigned long long)st.phase_peak[ZINC_PHASE_OPT][l],
                (unsigned long long)st.last_step_peak[l]);
    }
    sb_printf(&b, "}, \"model_states\": %llu, \"zero_formula\": %llu, \"difference_pct\": %.4f, "
              "\"device_free\": %lld, \"device_total\": %lld, \"device_process\": %lld, "
              "\"device_is_host\": %s}\n",
              (unsigned long long)ms, (unsigned long long)st.theoretical_model_states,
              diff_pct(ms, st.theoretical_model_states), (long long)st.device_free,
              (long long)st.device_total, (long long)st.device_process,
              e->dev && !e->dev->ops->is_gpu ? "true" : "false");
    return sb_finish(&b, text);
  }
  sb_printf(&b, "memory of rank %d/%d (stage %d, offload %s), MiB\n", e->world_rank,
            e->world_size, e->cfg.stage,
            zinc_offload_device_name(e->cfg.offload_optimizer.device));
  sb_printf(&b, "  %-12s", "");
  for (int c = 0; c < ZINC_MEM_NCAT; c++)
    sb_printf(&b, " %11s", zinc_mem_category_name(c));
  sb_printf(&b, " %11s %11s\n", "total", "peak");
  for (int l = 0; l < ZINC_LOC_N; l++) {
    uint64_t tot = 0;
    sb_printf(&b, "  %-12s", zinc_engine_location_name(e, l));
    for (int c = 0; c < ZINC_MEM_NCAT; c++) {
      sb_printf(&b, " %11.2f", mib(st.current[l][c]));
      tot += st.current[l][c];
    }
    sb_printf(&b, " %11.2f %11.2f\n", mib(tot), mib(st.peak_total[l]));
  }
  sb_printf(&b, "  model states %.2f MiB, ZeRO formula %.2f MiB, difference %+.2f%%\n", mib(ms),
            mib(st.theoretical_model_states), diff_pct(ms, st.theoretical_model_states));
  sb_printf(&b, "  %s peaks: forward %.2f, backward %.2f, step %.2f, last step %.2f MiB\n",
            zinc_engine_location_name(e, ZINC_LOC_DEVICE),
            mib(st.phase_peak[ZINC_PHASE_FWD][ZINC_LOC_DEVICE]),
            mib(st.phase_peak[ZINC_PHASE_BWD][ZINC_LOC_DEVICE]),
            mib(st.phase_peak[ZINC_PHASE_OPT][ZINC_LOC_DEVICE]),
            mib(st.last_step_peak[ZINC_LOC_DEVICE]));
  if (st.device_total > 0)
    sb_printf(&b, "  %s memory as the system sees it: %.0f MiB free of %.0f MiB%s\n",
              e->dev->ops->is_gpu ? "GPU" : "host", (double)st.device_free / 1048576.0,
              (double)st.device_total / 1048576.0, "");
  if (st.device_process >= 0)
    sb_printf(&b, "  this process on the GPU (NVML): %.0f MiB\n",
              (double)st.device_process / 1048576.0);
  return sb_finish(&b, text);
}

/* Per rank, gathered: device/host/nvme current and peak, model states, formula. */
enum { F_DEV, F_DEV_PEAK, F_HOST, F_HOST_PEAK, F_NVME, F_NVME_PEAK, F_STATES, F_FORMULA, F_N };
static const char *field_names[F_N] = {"device", "device_peak", "host", "host_peak", "nvme",
                                       "nvme_peak", "model_states", "zero_formula"};

zinc_status zinc_memory_report_all(zinc_engine *e, int json, char **text) {
  if (!e || !text)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_report_all: NULL argument");
  *text = NULL;
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ZINC_CHECK(zinc_memory_stats(e, &st));
  double mine[F_N];
  for (int l = 0; l < ZINC_LOC_N; l++) {
    uint64_t cur = 0;
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      cur += st.current[l][c];
    mine[2 * l] = (double)cur;
    mine[2 * l + 1] = (double)st.peak_total[l];
  }
  mine[F_STATES] = (double)model_states(&st);
  mine[F_FORMULA] = (double)st.theoretical_model_states;
  int n = e->world_size;
  double *all = calloc((size_t)n * F_N, sizeof *all);
  if (!all)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory gathering memory figures");
  zinc_status s = zinc_comm_allgather(e->world, mine, all, F_N, ZINC_DT_F64);
  if (s != ZINC_OK || e->world_rank != 0) {
    free(all);
    return s;
  }
  double mn[F_N], mx[F_N], mean[F_N];
  for (int f = 0; f < F_N; f++) {
    mn[f] = mx[f] = all[f];
    mean[f] = 0;
    for (int r = 0; r < n; r++) {
      double v = all[(size_t)r * F_N + (size_t)f];
      mn[f] = v < mn[f] ? v : mn[f];
      mx[f] = v > mx[f] ? v : mx[f];
      mean[f] += v / n;
    }
  }
  sbuf b = {0};
  if (json) {
    sb_printf(&b, "{\"world_size\": %d, \"stage\": %d, \"ranks\": [", n, e->cfg.stage);
    for (int r = 0; r < n; r++) {
      int stage = 0;
      zinc_rank_coords(e, r, &stage, NULL, NULL);
      sb_printf(&b, "%s{\"rank\": %d, \"pipeline_stage\": %d", r ? ", " : "", r, stage);
      for (int f = 0; f < F_N; f++)
        sb_printf(&b, ", \"%s\": %.0f", field_names[f], all[(size_t)r * F_N + (size_t)f]);
      sb_printf(&b, "}");
    }
    const char *agg[3] = {"min", "max", "mean"};
    const double *vals[3] = {mn, mx, mean};
    sb_printf(&b, "]");
    for (int a = 0; a < 3; a++) {
      sb_printf(&b, ", \"%s\": {", agg[a]);
      for (int f = 0; f < F_N; f++)
        sb_printf(&b, "%s\"%s\": %.0f", f ? ", " : "", field_names[f], vals[a][f]);
      sb_printf(&b, "}");
    }
    sb_printf(&b, "}\n");
  } else {
    int pp = zinc_pp_size(e);
    if (pp > 1) /* each stage holds its own layers: the ranks differ by stage */
      sb_printf(&b, "memory of every rank (ZeRO stage %d, %d ranks, %d pipeline stages: "
                "rank:stage), MiB\n", e->cfg.stage, n, pp);
    else
      sb_printf(&b, "memory of every rank (stage %d, %d ranks), MiB\n", e->cfg.stage, n);
    int cpu = e->dev && !e->dev->ops->is_gpu; /* the device's memory is host memory */
    sb_printf(&b, "  %-6s %10s %10s %10s %10s %10s %10s %12s %12s %8s\n", "rank",
              cpu ? "host" : "device", cpu ? "host peak" : "dev peak",
              cpu ? "offload" : "host", cpu ? "offl peak" : "host peak", "nvme", "nvme peak",
              "model st.", "formula", "diff");
    for (int r = 0; r <= n + 2; r++) {
      const double *v = r < n ? all + (size_t)r * F_N : r == n ? mn : r == n + 1 ? mx : mean;
      char label[16];
      int stage = 0;
      if (r < n && pp > 1 && zinc_rank_coords(e, r, &stage, NULL, NULL) == ZINC_OK)
        snprintf(label, sizeof label, "%d:s%d", r, stage);
      else if (r < n)
        snprintf(label, sizeof label, "%d", r);
      else
        snprintf(label, sizeof label, "%s", r == n ? "min" : r == n + 1 ? "max" : "mean");
      sb_printf(&b, "  %-6s", label);
      for (int f = 0; f < F_N; f++)
        sb_printf(&b, f < F_STATES ? " %10.2f" : " %12.2f", v[f] / 1048576.0);
      sb_printf(&b, " %+7.2f%%\n", v[F_FORMULA] > 0 ? 100 * (v[F_STATES] - v[F_FORMULA]) /
                                                          v[F_FORMULA] : 0.0);
    }
  }
  free(all);
  return sb_finish(&b, text);
}
