/*
 * test_comms_logger_api.c — the comms logger's public side: the summary's
 * format (DeepSpeed's table, captured from stdout), the summary at destroy
 * as one block in order with the trainer's own stdout, verbose lines, debug's
 * group rows, prof_ops, reset, and zinc_comms_stats's size/INIT contract
 * (older and newer callers' strides, uninitialised structs, the logger
 * off).
 */
#include <stddef.h>

#include "common/capture.h"
#include "engine_test.h"

/* DeepSpeed's convert_size, written again from its definition: "0B", else
 * round(size / 1024^i, 2) as Python prints a float, and the unit. */
static void ds_size(uint64_t bytes, char *out, size_t len) {
  static const char *units[] = {"B", "KB", "MB", "GB", "TB"};
  if (bytes == 0) {
    snprintf(out, len, "0B");
    return;
  }
  int i = (int)floor(log((double)bytes) / log(1024.0));
  double v = round((double)bytes / pow(1024.0, i) * 100.0) / 100.0;
  char num[32];
  snprintf(num, sizeof num, "%.2f", v);
  size_t n = strlen(num);
  if (num[n - 1] == '0') /* Python shows 2.5 and 32.0, never 2.50 */
    num[n - 1] = '\0';
  snprintf(out, len, "%s %s", num, units[i]);
}

static zinc_engine *open_with(const char *logger_json, et_model *m) {
  et_run r = et_defaults();
  r.stage = 1;
  r.extra = logger_json;
  return et_open(&r, NULL, m);
}

static void one_step(et_model *m, int64_t step) {
  et_run r = et_defaults();
  ET_OK(et_steps(m, &r, (int)step, (int)step + 1));
}

static zinc_comms_stat *all_rows(zinc_engine *e, int *n) {
  ET_OK(zinc_comms_stats(e, NULL, 0, n));
  zinc_comms_stat *rows = calloc((size_t)*n + 1, sizeof *rows);
  for (int i = 0; i < *n; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int again = 0;
  ET_OK(zinc_comms_stats(e, rows, *n, &again));
  ET_CHECK(again == *n, "rows %d then %d", *n, again);
  return rows;
}

/* The summary: DeepSpeed's header and columns (20 wide), zinc's three
 * after them, an op's name on its own line above its sizes; rank 0 only. */
static void summary_format(void) {
  et_model m;
  zinc_engine *e = open_with("  \"comms_logger\": {\"enabled\": true}", &m);
  /* creating and building the engine is counted: its agreements at least */
  int built = 0;
  ET_OK(zinc_comms_stats(e, NULL, 0, &built));
  ET_CHECK(built > 0, "no rows after creating and building the engine");
  ET_OK(zinc_comms_reset(e));
  one_step(&m, 0);
  int n = 0;
  zinc_comms_stat *rows = all_rows(e, &n);
  test_stderr cap;
  test_stdout_begin(&cap);
  zinc_status st = zinc_comms_log_summary(e);
  char *text = test_stdout_end(&cap);
  ET_OK(st);
  if (et_rank != 0) {
    ET_CHECK(text[0] == '\0', "rank %d printed a summary:\n%s", et_rank, text);
  } else {
    char header[512];
    snprintf(header, sizeof header, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-20s%s\n",
             "Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
             "tput_avg (Gbps)", "busbw_avg (Gbps)", "Algorithm", "Wire intra-node",
             "Wire inter-node");
    ET_CHECK(strncmp(text, header, strlen(header)) == 0, "summary header:\n%s", text);
    ET_CHECK(n > 0, "no rows after a step");
    for (int i = 0; i < n; i++) {
      char name_line[64], row[256], size[32], intra[32], inter[32];
      snprintf(name_line, sizeof name_line, "\n%s\n", rows[i].name);
      ET_CHECK(strstr(text, name_line), "summary lacks the line \"%s\":\n%s", rows[i].name,
               text);
      /* the row up to the count, and its wire columns at the end */
      ds_size(rows[i].msg_bytes, size, sizeof size);
      snprintf(row, sizeof row, "\n%-20s%-20s%-20llu", "", size,
               (unsigned long long)rows[i].count);
      const char *at = strstr(text, row);
      ET_CHECK(at, "summary lacks a row starting \"%s\":\n%s", row + 1, text);
      /* DeepSpeed's four figures, 20 wide with two decimals: total and
       * average latency (ms), tput and busbw (Gbps) */
      char figures[128];
      snprintf(figures, sizeof figures, "%-20.2f%-20.2f%-20.2f%-20.2f", rows[i].total_ms,
               rows[i].total_ms / (double)rows[i].count, rows[i].algbw_gbps,
               rows[i].busbw_gbps);
      ET_CHECK(at && strlen(at) > 141 && strncmp(at + 61, figures, 80) == 0,
               "row of %s %s: figures are not \"%s\":\n%s", rows[i].name, size, figures, text);
      ds_size(rows[i].wire_intra, intra, sizeof intra);
      ds_size(rows[i].wire_inter, inter, sizeof inter);
      snprintf(row, sizeof row, "%-20s%-20s%s\n", rows[i].algo, intra, inter);
      const char *eol = at ? strchr(at + 1, '\n') : NULL;
      ET_CHECK(eol && (size_t)(eol + 1 - at) > strlen(row) &&
                   strncmp(eol + 1 - strlen(row), row, strlen(row)) == 0,
               "row of %s %s does not end with \"%s\":\n%s", rows[i].name, size, row, text);
    }
  }
  free(text);
  /* reset: no rows, and the summary is the header alone */
  ET_OK(zinc_comms_reset(e));
  int after = -1;
  ET_OK(zinc_comms_stats(e, NULL, 0, &after));
  ET_CHECK(after == 0, "%d rows after reset", after);
  free(rows);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* At destroy the summary goes to stdout, the stream the trainer prints
 * on, after what the trainer's stdio holds and as one block: the
 * trainer's lines before destroy come before it, those after it after,
 * and none inside (the captured stdout is a file, so printf buffers as a
 * trainer's does when its output is redirected). Nothing of it on stderr. */
static void summary_at_destroy_in_order(void) {
  et_model m;
  zinc_engine *e = open_with("  \"comms_logger\": {\"enabled\": true}", &m);
  one_step(&m, 0);
  et_model_free(&m);
  test_stderr out, err;
  test_stdout_begin(&out);
  test_stderr_begin(&err);
  printf("trainer: line 1 before destroy\n");
  printf("trainer: line 2 before destroy\n");
  zinc_engine_destroy(e);
  printf("trainer: after destroy\n");
  char *errors = test_stderr_end(&err);
  char *text = test_stdout_end(&out);
  const char *header = "Comm. Op";
  if (et_rank != 0) {
    ET_CHECK(!strstr(text, header) && !strstr(errors, header), "rank %d printed a summary",
             et_rank);
  } else {
    const char *before = "trainer: line 1 before destroy\ntrainer: line 2 before destroy\n";
    ET_CHECK(strncmp(text, before, strlen(before)) == 0 &&
                 strncmp(text + strlen(before), header, strlen(header)) == 0,
             "stdout does not hold the trainer's two lines, then the summary:\n%s", text);
    const char *after = strstr(text, "trainer: after destroy\n");
    ET_CHECK(after && after[strlen("trainer: after destroy\n")] == '\0',
             "the trainer's line after destroy is not last on stdout:\n%s", text);
    ET_CHECK(test_count_lines(text, "trainer:") == 3 && test_count_lines(text, header) == 1,
             "the summary is not one block between the trainer's lines:\n%s", text);
    ET_CHECK(!strstr(errors, header), "the summary went to stderr:\n%s", errors);
  }
  free(text);
  free(errors);
}

/* verbose: one line per op counted, on rank 0; debug: rows per group. */
static void verbose_and_debug(void) {
  et_model m;
  zinc_engine *e = open_with("  \"comms_logger\": {\"enabled\": true, \"verbose\": true, "
                             "\"debug\": true}", &m);
  ET_OK(zinc_comms_reset(e));
  test_stderr cap;
  test_stderr_begin(&cap);
  one_step(&m, 0);
  char *text = test_stderr_end(&cap);
  int n = 0;
  zinc_comms_stat *rows = all_rows(e, &n);
  uint64_t calls = 0;
  for (int i = 0; i < n; i++) {
    calls += rows[i].count;
    ET_CHECK(rows[i].group && (!strcmp(rows[i].group, "data_parallel") ||
                               !strcmp(rows[i].group, "world")),
             "row %d (%s): group %s", i, rows[i].name, rows[i].group ? rows[i].group : "NULL");
  }
  int lines = test_count_lines(text, "comm op: ");
  if (et_rank == 0) {
    ET_CHECK((uint64_t)lines == calls, "verbose: %d lines for %llu calls:\n%s", lines,
             (unsigned long long)calls, text);
    ET_CHECK(strstr(text, "comm op: reduce_scatter | [Group: data_parallel] | time (ms): "),
             "verbose line format:\n%s", text);
  } else {
    ET_CHECK(lines == 0, "rank %d printed %d verbose lines", et_rank, lines);
  }
  free(text);
  free(rows);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* prof_all false: only the ops prof_ops names are counted. */
static void prof_ops_only(void) {
  et_model m;
  zinc_engine *e = open_with("  \"comms_logger\": {\"enabled\": true, \"prof_all\": false, "
                             "\"prof_ops\": [\"reduce_scatter_tensor\"]}", &m);
  one_step(&m, 0);
  int n = 0;
  zinc_comms_stat *rows = all_rows(e, &n);
  ET_CHECK(n > 0, "no reduce-scatter rows");
  for (int i = 0; i < n; i++)
    ET_CHECK(rows[i].op == ZINC_COMMS_REDUCE_SCATTER, "row %d is %s", i, rows[i].name);
  free(rows);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* The size/INIT contract of the rows (zinc.h's Conventions). */
static void struct_contract(void) {
  et_model m;
  zinc_engine *e = open_with("  \"comms_logger\": {\"enabled\": true}", &m);
  one_step(&m, 0);
  int n = 0;
  zinc_comms_stat *rows = all_rows(e, &n);
  ET_CHECK(n >= 3, "only %d rows", n);

  /* an older caller: its struct ends before wire_intra; rows come at its
   * stride and nothing past each row's size is written */
  const size_t old_size = offsetof(zinc_comms_stat, wire_intra);
  unsigned char *buf = malloc(old_size * (size_t)n + 64);
  memset(buf, 0xAB, old_size * (size_t)n + 64);
  for (int i = 0; i < n; i++)
    memcpy(buf + (size_t)i * old_size, &old_size, sizeof old_size);
  int got = 0;
  ET_OK(zinc_comms_stats(e, (zinc_comms_stat *)buf, n, &got));
  for (int i = 0; i < n; i++) {
    zinc_comms_stat r;
    memset(&r, 0, sizeof r);
    memcpy(&r, buf + (size_t)i * old_size, old_size);
    ET_CHECK(r.size == old_size && r.op == rows[i].op && r.msg_bytes == rows[i].msg_bytes &&
                 r.count == rows[i].count,
             "old-size row %d: size %zu op %d msg %llu count %llu", i, r.size, r.op,
             (unsigned long long)r.msg_bytes, (unsigned long long)r.count);
  }
  for (size_t k = old_size * (size_t)n; k < old_size * (size_t)n + 64; k++)
    ET_CHECK(buf[k] == 0xAB, "byte %zu past the old-size rows was written", k);
  free(buf);

  /* a newer caller: 16 bytes more per row, left alone */
  const size_t new_size = sizeof(zinc_comms_stat) + 16;
  buf = malloc(new_size * 2);
  memset(buf, 0xCD, new_size * 2);
  for (int i = 0; i < 2; i++)
    memcpy(buf + (size_t)i * new_size, &new_size, sizeof new_size);
  ET_OK(zinc_comms_stats(e, (zinc_comms_stat *)buf, 2, &got));
  ET_CHECK(got == n, "newer caller: n %d, expected %d", got, n);
  for (int i = 0; i < 2; i++) {
    zinc_comms_stat r;
    memcpy(&r, buf + (size_t)i * new_size, sizeof r);
    ET_CHECK(r.size == new_size && r.wire_intra == rows[i].wire_intra &&
                 r.count == rows[i].count,
             "newer-size row %d: size %zu wire %llu", i, r.size,
             (unsigned long long)r.wire_intra);
    for (size_t k = sizeof r; k < new_size; k++)
      ET_CHECK(buf[(size_t)i * new_size + k] == 0xCD, "row %d: byte %zu past sizeof written",
               i, k);
  }
  free(buf);

  /* uninitialised, and bad arguments */
  zinc_comms_stat bad[1];
  memset(bad, 0, sizeof bad);
  ET_CHECK(zinc_comms_stats(e, bad, 1, &got) == ZINC_ERR_INVALID &&
               strstr(zinc_last_error(), "ZINC_COMMS_STAT_INIT"),
           "size 0: %s", zinc_last_error());
  ET_CHECK(zinc_comms_stats(e, rows, 1, NULL) == ZINC_ERR_INVALID, "n NULL accepted");
  ET_CHECK(zinc_comms_stats(e, rows, -1, &got) == ZINC_ERR_INVALID, "cap -1 accepted");
  ET_CHECK(zinc_comms_stats(NULL, rows, 1, &got) == ZINC_ERR_INVALID, "NULL engine accepted");
  free(rows);
  et_model_free(&m);
  zinc_engine_destroy(e);

  /* the logger off: the calls say how to turn it on */
  e = open_with(NULL, &m);
  zinc_comms_stat one = ZINC_COMMS_STAT_INIT;
  ET_CHECK(zinc_comms_stats(e, &one, 1, &got) == ZINC_ERR_UNSUPPORTED &&
               strstr(zinc_last_error(), "\"comms_logger\""),
           "logger off: %s", zinc_last_error());
  ET_CHECK(zinc_comms_log_summary(e) == ZINC_ERR_UNSUPPORTED, "summary with the logger off");
  ET_CHECK(zinc_comms_reset(e) == ZINC_ERR_UNSUPPORTED, "reset with the logger off");
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  summary_format();
  summary_at_destroy_in_order();
  verbose_and_debug();
  prof_ops_only();
  struct_contract();
  if (et_rank == 0)
    printf("comms logger API at %d ranks: %s\n", et_world, et_failures ? "FAILED" : "ok");
  return et_failures ? 1 : 0;
}
