/*
 * killed.h — what the lost-peer tests share (test_rank_killed,
 * test_ckpt_save_killed, test_pp_killed, each run by
 * tests/engine/rank_killed.sh, which reads the lines printed here): the
 * clock, the survivor's last line at exit, and an engine on the cpu device
 * from a JSON text.
 */
#ifndef ZINC_TEST_KILLED_H
#define ZINC_TEST_KILLED_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "zinc.h"

static inline double killed_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int killed_rank = -1;   /* this survivor's rank, once it has seen the loss */
static double killed_time = 0; /* when the peer was lost (killed_now) */

/* Registered (atexit) before the engine creates its comm, so it runs after
 * the comm's own atexit handler: the line proves exit finished. */
static inline void killed_report_exit(void) {
  if (killed_rank >= 0 && killed_time > 0) {
    printf("survivor %d: exited after %.1f s\n", killed_rank, killed_now() - killed_time);
    fflush(stdout);
  }
}

/* The victim (rank == victim) goes here: SIGKILL, or with `freeze` SIGSTOP
 * and never continues (rank_killed.sh kills it at the end); the others
 * return. */
static inline void killed_lose(int rank, int victim, int freeze) {
  if (rank != victim)
    return;
  if (freeze) {
    printf("victim %d: pid %ld stopping\n", rank, (long)getpid());
    fflush(stdout);
    raise(SIGSTOP);
    _exit(3); /* continued by mistake: leave, reporting nothing */
  }
  raise(SIGKILL);
}

/* An engine on the cpu device, one thread, from `json`, with the given
 * model- and pipeline-parallel sizes (0: the options' default, 1); exits
 * with 2 naming the step that failed. */
static inline zinc_engine *killed_engine(const char *json, int mp, int pp) {
  zinc_config *cfg;
  if (zinc_config_parse(json, &cfg) != ZINC_OK) {
    fprintf(stderr, "config: %s\n", zinc_last_error());
    exit(2);
  }
  zinc_options o = ZINC_OPTIONS_INIT;
  o.device = ZINC_DEVICE_CPU;
  o.threads = 1;
  if (mp > 0)
    o.model_parallel_size = mp;
  if (pp > 0)
    o.pipeline_parallel_size = pp;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &o, &e) != ZINC_OK) {
    fprintf(stderr, "engine: %s\n", zinc_last_error());
    exit(2);
  }
  zinc_config_free(cfg);
  return e;
}

#endif /* ZINC_TEST_KILLED_H */
