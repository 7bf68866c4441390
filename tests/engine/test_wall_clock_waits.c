/*
 * test_wall_clock_waits.c — wall_clock_breakdown books the backward pass's
 * waits for gradient reductions as bwd_allreduce, as DeepSpeed's timers
 * mean it, and not as bwd_inner (the trainer's own backward work).
 *
 * The reductions are made slow deterministically: ZINC_TEST_COMM_HOLD_MS=H
 * (comm/comm_mpi_async.c) has the comm's progress thread take a started
 * batch up only once a caller blocks for it, and run it H ms later, so
 * every blocking wait for a reduction lasts at least H on the thread that
 * waits, whatever the machine's load. At stage 2 with overlap_comm and a
 * 100-element bucket the tiny model's backward starts three reductions
 * (out; scale with mid; in), and each is waited for in the backward pass:
 * the first two by the agreement before the next reduction (on the cpu
 * device that host collective shares the comm and drains what is in
 * flight), the last by zinc_backward_end. So every micro-step's
 * bwd_allreduce is at least 3 H, and its bwd_inner at most bwd - 3 H:
 * assertions on where the time is booked, not on how long anything took.
 * Two ranks (the hold needs the mpi comm's progress thread).
 */
#include "common/capture.h"
#include "engine_test.h"

#define STEPS 2
#define HOLD_MS 150

/* The number after " | <name>: " in line, or -1. */
static double field(const char *line, const char *name) {
  char key[64];
  snprintf(key, sizeof key, " | %s: ", name);
  const char *at = strstr(line, key);
  return at ? strtod(at + strlen(key), NULL) : -1;
}

int main(void) {
  setenv("ZINC_TEST_COMM_HOLD_MS", "150", 1); /* HOLD_MS; before the comm exists */
  et_run r = et_defaults();
  r.stage = 2;
  r.overlap = 1;
  r.reduce_bucket = 100;
  r.steps = STEPS;
  r.extra = "  \"wall_clock_breakdown\": true";
  test_stderr out;
  test_stdout_begin(&out);
  float **p = et_alloc_params(&r.shape);
  et_train(&r, p, NULL, NULL);
  char *text = test_stdout_end(&out);
  et_free_params(p);
  if (et_world < 2) {
    fprintf(stderr, "test_wall_clock_waits needs 2 ranks (the comm's progress thread)\n");
    free(text);
    return 77;
  }
  if (et_rank == 0) {
    int lines = 0;
    for (const char *l = strstr(text, "time (ms) | fwd_microstep: "); l;
         l = strstr(l + 1, "time (ms) | fwd_microstep: ")) {
      char line[512];
      size_t n = strcspn(l, "\n");
      snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
      double bwd = field(line, "bwd_microstep"), inner = field(line, "bwd_inner_microstep");
      double reduce = field(line, "bwd_allreduce_microstep");
      lines++;
      /* printed with 2 decimals: allow their rounding */
      ET_CHECK(reduce >= 3 * HOLD_MS - 0.01, "micro-step %d: bwd_allreduce %.2f ms, but the "
               "backward waited at least 3 x %d ms for its reductions (booked elsewhere: "
               "bwd_inner %.2f of bwd %.2f):\n%s", lines, reduce, HOLD_MS, inner, bwd, line);
      ET_CHECK(inner >= 0 && inner <= bwd - 3 * HOLD_MS + 0.02 &&
                   fabs(inner + reduce - bwd) <= 0.02,
               "micro-step %d: bwd_inner %.2f + bwd_allreduce %.2f is not bwd %.2f with the "
               "waits out of bwd_inner:\n%s", lines, inner, reduce, bwd, line);
    }
    ET_CHECK(lines == STEPS, "%d wall_clock_breakdown micro-step lines, want %d:\n%s", lines,
             STEPS, text);
    if (et_failures == 0)
      printf("wall_clock_breakdown at %d ranks: each micro-step's reduction waits (>= 3 x %d "
             "ms) in bwd_allreduce, not bwd_inner\n", et_world, HOLD_MS);
  }
  free(text);
  return et_failures ? 1 : 0;
}
