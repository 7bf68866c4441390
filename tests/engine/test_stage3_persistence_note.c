/*
 * test_stage3_persistence_note.c — a stage-3 build says how many parameters
 * stage3_param_persistence_threshold keeps whole on every rank: one info
 * line on world rank 0, none elsewhere, with those parameters' bytes. The
 * tiny model's segments (in 549 elements, mid 1102, scale 29, out 231
 * used) against the threshold:
 *   100000 (DeepSpeed's default)  every parameter persistent: "7 of 7"
 *   500                           scale and out: s, W2, b2: "3 of 7"
 *   0                             none persistent: no line
 * and at stage 2, where nothing is partitioned by it, no line. The bytes
 * are the persistent parameters' own, f32 elements x 4 (not the segments'
 * padding, which depends on the rank count).
 */
#include "base/base.h"
#include "common/capture.h"
#include "engine_test.h"

/* first: the first persistent parameter (the model's are in module
 * order, so those from it on are the persistent ones) */
static void check(int stage, int64_t threshold, const char *want, int first) {
  et_run r = et_defaults();
  r.stage = stage;
  r.overlap = stage == 3;
  r.persist = threshold;
  zinc_log_set_level(ZINC_LOG_INFO);
  test_stderr cap;
  test_stderr_begin(&cap);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  char *text = test_stderr_end(&cap);
  zinc_log_set_level(ZINC_LOG_WARN);
  int lines = test_count_lines(text, "parameters persistent");
  if (want && et_rank == 0) {
    char line[256];
    long long bytes = 0;
    for (int i = first; i < TM_NPARAM; i++)
      bytes += zinc_param_numel(m.par[i]) * (long long)sizeof(float);
    snprintf(line, sizeof line, "stage 3: %s parameters persistent (%lld bytes): below "
             "stage3_param_persistence_threshold %lld, kept whole on every rank", want, bytes,
             (long long)threshold);
    ET_CHECK(lines == 1 && test_count_lines(text, line) == 1,
             "stage %d, threshold %lld: want one line \"%s\", got %d lines:\n%s", stage,
             (long long)threshold, line, lines, text);
  } else {
    ET_CHECK(lines == 0, "stage %d, threshold %lld, rank %d: a persistence line:\n%s", stage,
             (long long)threshold, et_rank, text);
  }
  free(text);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(void) {
  check(3, 100000, "7 of 7", 0);
  check(3, 500, "3 of 7", 4);
  check(3, 0, NULL, 0);
  check(2, 100000, NULL, 0);
  if (et_rank == 0)
    printf("stage-3 persistence note at %d ranks: %s\n", et_world,
           et_failures ? "FAILED" : "ok");
  return et_failures ? 1 : 0;
}
