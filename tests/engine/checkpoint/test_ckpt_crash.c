/*
 * test_ckpt_crash.c — crash safety of zinc_save_checkpoint: a child process
 * saves a checkpoint (each trial with distinct values) and the parent kills
 * it with SIGKILL at a random moment spread across the save; then the
 * parent opens <dir>/latest and verifies every checksum and that every
 * value belongs to one single save — the previous complete one or the new
 * complete one, never a mixture and never a torn file that passes.
 *
 * Trials alternate between re-saving the same tag (directory exchange) and
 * new tags (latest switching). ZINC_CRASH_TRIALS overrides the count (60).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/checkpoint/format.h"
#include "zinc.h"

#define SIDE 1024 /* one 1024 x 1536 parameter and one of 4097: 6.3 M floats saved */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int fail_child(const char *what) {
  fprintf(stderr, "child: %s: %s\n", what, zinc_last_error());
  return 3;
}

/* Save a checkpoint whose every value encodes `trial`; report the save's
 * start and end (seconds since fork) through fd. */
static int child(const char *dir, int trial, int fd, double t_fork) {
  zinc_config *cfg;
  if (zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                        "{\"stage\": 1}}", &cfg) != ZINC_OK)
    return fail_child("config");
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    return fail_child("create");
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "block");
  int64_t s1[2] = {SIDE, SIDE + SIDE / 2}, s2[1] = {4097};
  zinc_param *p[2] = {zinc_param_add(e, m, "weight", ZINC_F32, 2, s1),
                      zinc_param_add(e, m, "bias", ZINC_F32, 1, s2)};
  if (!p[0] || !p[1] || zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return fail_child("build");
  for (int i = 0; i < 2; i++) {
    int64_t n = zinc_param_numel(p[i]);
    float *v = malloc((size_t)n * 4);
    for (int k = 0; k < 3; k++) {
      for (int64_t j = 0; j < n; j++)
        v[j] = (float)trial + 0.25f * (float)k;
      zinc_state_kind kind = k == 0 ? ZINC_STATE_PARAM : k == 1 ? ZINC_STATE_EXP_AVG
                                                                 : ZINC_STATE_EXP_AVG_SQ;
      if (zinc_param_set_full(e, p[i], kind, v) != ZINC_OK)
        return fail_child("set_full");
    }
    free(v);
  }
  char tag[32];
  if (trial % 2 == 0)
    snprintf(tag, sizeof tag, "same");
  else
    snprintf(tag, sizeof tag, "t%d", trial);
  double t0 = now() - t_fork;
  char go = 'S';
  if (write(fd, &go, 1) != 1) /* the parent times its kill from here */
    return 4;
  if (zinc_save_checkpoint(e, dir, tag) != ZINC_OK)
    return fail_child("save");
  double t1 = now() - t_fork;
  double times[2] = {t0, t1};
  if (write(fd, times, sizeof times) != sizeof times)
    return 4;
  zinc_engine_destroy(e);
  return 0;
}

static pid_t start(const char *dir, int trial, int *rfd) {
  int pfd[2];
  if (pipe(pfd) != 0)
    return -1;
  double t_fork = now();
  pid_t pid = fork();
  if (pid == 0) {
    close(pfd[0]);
    _exit(child(dir, trial, pfd[1], t_fork));
  }
  close(pfd[1]);
  *rfd = pfd[0];
  return pid;
}

/* Open latest, verify everything, return the trial every value encodes
 * (-1 when values from different saves are mixed or the load fails). */
static int check_latest(const char *dir) {
  zinc_ckpt_dir *d = NULL;
  zinc_status st = zinc_ckpt_dir_open(dir, NULL, &d);
  if (st != ZINC_OK) {
    fprintf(stderr, "latest does not open: %s\n", zinc_last_error());
    return -1;
  }
  int trial = -2;
  for (int f = 0; f < d->manifest->nfiles && trial != -1; f++) {
    if (zinc_ckpt_dir_verify_file(d, f) != ZINC_OK) {
      fprintf(stderr, "latest (%s) fails verification: %s\n", d->tag, zinc_last_error());
      trial = -1;
      break;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", d->path, d->manifest->files[f].name);
    zinc_shard_reader *r;
    if (zinc_shard_reader_open(path, &r) != ZINC_OK) {
      trial = -1;
      break;
    }
    int64_t n = d->manifest->files[f].elements;
    float *v = malloc((size_t)n * 4);
    for (int s = 0; s < 3 && trial != -1; s++) {
      if (zinc_shard_reader_read(r, s, 0, v, (size_t)n) != ZINC_OK) {
        trial = -1;
        break;
      }
      /* every element is trial + s/4 (padding elements are 0) */
      for (int64_t j = 0; j < n; j++) {
        if (v[j] == 0.0f)
          continue;
        int t = (int)floorf(v[j]);
        if (v[j] != (float)t + 0.25f * (float)s || (trial >= 0 && t != trial)) {
          fprintf(stderr, "latest (%s): element %lld of section %d is %g (mixed saves)\n",
                  d->tag, (long long)j, s, v[j]);
          trial = -1;
          break;
        }
        trial = t;
      }
    }
    free(v);
    zinc_shard_reader_close(r);
  }
  zinc_ckpt_dir_close(d);
  return trial;
}

int main(void) {
  const char *base = getenv("ZINC_TEST_BINARY_DIR") ? getenv("ZINC_TEST_BINARY_DIR") : "/tmp";
  int trials = getenv("ZINC_CRASH_TRIALS") ? atoi(getenv("ZINC_CRASH_TRIALS")) : 60;
  char dir[512], cmd[1100];
  snprintf(dir, sizeof dir, "%s/ckpt_crash", base);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    return 1;
  /* calibration: complete saves, timed — the first into an empty
   * directory, then re-saving a tag and saving a new one (slower: the old
   * directory is exchanged or latest switches) */
  int fd, status;
  double span = 0;
  for (int t = 0; t < 3; t++) {
    pid_t pid = start(dir, t == 0 ? 0 : 1000 + t, &fd);
    double times[2];
    char go;
    if (read(fd, &go, 1) != 1 || read(fd, times, sizeof times) != sizeof times ||
        waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "calibration save %d failed\n", t);
      return 1;
    }
    close(fd);
    if (times[1] - times[0] > span)
      span = times[1] - times[0];
  }
  /* leave trial 0 as the committed checkpoint */
  pid_t pid = start(dir, 0, &fd);
  char go;
  if (read(fd, &go, 1) != 1 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fprintf(stderr, "calibration save failed\n");
    return 1;
  }
  close(fd);
  if (check_latest(dir) != 0) {
    fprintf(stderr, "calibration checkpoint does not verify\n");
    return 1;
  }
  double lo = 0, hi = span * 1.3;
  printf("a save takes up to %.3f s; killing uniformly in [0, %.3f] s after it starts\n", span,
         hi);
  srand(12345);
  int committed = 0, kept_old = 0, took_new = 0, failures = 0;
  for (int t = 1; t <= trials; t++) {
    pid = start(dir, t, &fd);
    if (read(fd, &go, 1) != 1) {
      fprintf(stderr, "trial %d: the child died before saving\n", t);
      failures++;
    }
    double delay = lo + (hi - lo) * ((double)rand() / RAND_MAX);
    struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(fd);
    int got = check_latest(dir);
    if (got == committed) {
      kept_old++;
    } else if (got == t) {
      took_new++;
      committed = t;
    } else {
      fprintf(stderr, "trial %d (kill at %.3f s): latest holds %d, expected %d or %d\n", t,
              delay, got, committed, t);
      failures++;
    }
  }
  printf("%d kills: %d left the previous checkpoint, %d the new one, %d torn or wrong\n",
         trials, kept_old, took_new, failures);
  if (failures == 0 && (kept_old == 0 || took_new == 0))
    printf("note: every kill fell on the same side of the commit point\n");
  if (failures == 0) {
    if (system(cmd) != 0)
      return 1;
  }
  return failures ? 1 : 0;
}
