/*
 * test_ckpt_lock.c — two jobs saving into one checkpoint directory:
 *  - held lock: while another process holds <dir>/.zinc-save.lock (as a
 *    save in progress does), a save is refused with ZINC_ERR_INVALID naming
 *    the directory and the holder, changes nothing on disk, and the engine
 *    goes on (a save after the lock is released works);
 *  - two processes, each with its own engine, save into one directory at
 *    the same time, SAVES times each (the shared tag "same" and a tag of
 *    their own, alternately): a save either returns ZINC_OK or is refused
 *    naming the directory and the holder; afterwards every save that
 *    returned ZINC_OK and was not replaced by a later one verifies (every
 *    checksum, and every value from that save), and so do latest and
 *    "same" (values from one single save that returned ZINC_OK).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/checkpoint/format.h"
#include "zinc.h"

#define SAVES 12

static int failures = 0;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* An engine whose every value encodes `value` (state kind k: value + k/4). */
static zinc_engine *open_engine(zinc_param **p) {
  zinc_config *cfg;
  if (zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                        "{\"stage\": 1}}", &cfg) != ZINC_OK)
    return NULL;
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    return NULL;
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "block");
  int64_t s1[2] = {512, 768};
  *p = zinc_param_add(e, m, "weight", ZINC_F32, 2, s1);
  if (!*p || zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return NULL;
  return e;
}

static int set_values(zinc_engine *e, zinc_param *p, int value) {
  int64_t n = zinc_param_numel(p);
  float *v = malloc((size_t)n * 4);
  for (int k = 0; k < 3; k++) {
    for (int64_t j = 0; j < n; j++)
      v[j] = (float)value + 0.25f * (float)k;
    zinc_state_kind kind = k == 0 ? ZINC_STATE_PARAM : k == 1 ? ZINC_STATE_EXP_AVG
                                                               : ZINC_STATE_EXP_AVG_SQ;
    if (zinc_param_set_full(e, p, kind, v) != ZINC_OK)
      return -1;
  }
  free(v);
  return 0;
}

/* The value every element of dir/tag (NULL: latest) encodes, after every
 * checksum verified; -1 when it does not open or verify or values differ. */
static int saved_value(const char *dir, const char *tag) {
  zinc_ckpt_dir *d = NULL;
  if (zinc_ckpt_dir_open(dir, tag, &d) != ZINC_OK) {
    fprintf(stderr, "%s/%s does not open: %s\n", dir, tag ? tag : "latest", zinc_last_error());
    return -1;
  }
  int value = -2;
  for (int f = 0; f < d->manifest->nfiles && value != -1; f++) {
    if (zinc_ckpt_dir_verify_file(d, f) != ZINC_OK) {
      fprintf(stderr, "%s fails verification: %s\n", d->path, zinc_last_error());
      value = -1;
      break;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", d->path, d->manifest->files[f].name);
    zinc_shard_reader *r;
    if (zinc_shard_reader_open(path, &r) != ZINC_OK) {
      value = -1;
      break;
    }
    int64_t n = d->manifest->files[f].elements;
    float *v = malloc((size_t)n * 4);
    for (int s = 0; s < 3 && value != -1; s++) {
      if (zinc_shard_reader_read(r, s, 0, v, (size_t)n) != ZINC_OK) {
        value = -1;
        break;
      }
      for (int64_t j = 0; j < n; j++) {
        int t = (int)floorf(v[j]);
        if (v[j] != (float)t + 0.25f * (float)s || (value >= 0 && t != value)) {
          fprintf(stderr, "%s: element %lld of section %d is %g (mixed saves)\n", d->path,
                  (long long)j, s, v[j]);
          value = -1;
          break;
        }
        value = t;
      }
    }
    free(v);
    zinc_shard_reader_close(r);
  }
  zinc_ckpt_dir_close(d);
  return value;
}

/* While the test holds the lock as a save in progress would. */
static void test_held_lock(const char *dir) {
  zinc_param *p;
  zinc_engine *e = open_engine(&p);
  CHECK(e && set_values(e, p, 7) == 0, "engine: %s", zinc_last_error());
  if (!e)
    return;
  CHECK(zinc_save_checkpoint(e, dir, "first") == ZINC_OK, "first save: %s", zinc_last_error());
  char lock[700];
  snprintf(lock, sizeof lock, "%s/.zinc-save.lock", dir);
  int fd = open(lock, O_RDWR | O_CREAT, 0644);
  CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "taking %s: %s", lock, strerror(errno));
  const char holder[] = "pid 4242 on host other-job\n";
  CHECK(ftruncate(fd, 0) == 0 && write(fd, holder, sizeof holder - 1) > 0, "writing %s", lock);
  CHECK(set_values(e, p, 8) == 0, "set values");
  zinc_status st = zinc_save_checkpoint(e, dir, "first");
  CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), dir) &&
        strstr(zinc_last_error(), "pid 4242 on host other-job"),
        "a save while another holds the lock: %s \"%s\" (expected ZINC_ERR_INVALID naming %s "
        "and the holder)", zinc_status_name(st), zinc_last_error(), dir);
  st = zinc_save_checkpoint(e, dir, "second");
  CHECK(st == ZINC_ERR_INVALID, "a save of another tag while locked: %s",
        zinc_status_name(st));
  CHECK(saved_value(dir, NULL) == 7 && saved_value(dir, "first") == 7,
        "a refused save changed what was saved");
  char second[700];
  snprintf(second, sizeof second, "%s/second", dir);
  CHECK(access(second, F_OK) != 0, "a refused save created %s", second);
  close(fd);
  st = zinc_save_checkpoint(e, dir, "first");
  CHECK(st == ZINC_OK, "a save after the lock was released: %s", zinc_last_error());
  CHECK(saved_value(dir, NULL) == 8, "latest after the lock was released is not the new save");
  zinc_engine_destroy(e);
}

/* One job: SAVES saves, alternately of "same" and of its own tag; each
 * save's values are 100 * (job + 1) + k. Reports each result as
 * (k, status) through fd. */
static int job(const char *dir, int id, int fd) {
  zinc_param *p;
  zinc_engine *e = open_engine(&p);
  if (!e)
    return 3;
  for (int k = 0; k < SAVES; k++) {
    int value = 100 * (id + 1) + k;
    if (set_values(e, p, value) != 0)
      return 3;
    char tag[32];
    if (k % 2 == 0)
      snprintf(tag, sizeof tag, "same");
    else
      snprintf(tag, sizeof tag, "job%d_%d", id, k);
    zinc_status st = zinc_save_checkpoint(e, dir, tag);
    int res[2] = {k, (int)st};
    /* the holder is named, unless it was refused in the instant between
     * the other's creating the lock file and writing into it */
    if (st != ZINC_OK && !(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), dir) &&
                           (strstr(zinc_last_error(), "pid ") ||
                            strstr(zinc_last_error(), "has not written its name")))) {
      fprintf(stderr, "job %d, save %d of %s: %s \"%s\" (expected ZINC_OK, or a refusal naming "
              "the directory and the holder)\n", id, k, tag, zinc_status_name(st),
              zinc_last_error());
      res[1] = -1;
    }
    if (write(fd, res, sizeof res) != sizeof res)
      return 4;
  }
  zinc_engine_destroy(e);
  return 0;
}

static void test_two_jobs(const char *dir) {
  int pfd[2][2];
  pid_t pid[2];
  for (int j = 0; j < 2; j++) {
    if (pipe(pfd[j]) != 0)
      return;
    pid[j] = fork();
    if (pid[j] == 0) {
      close(pfd[j][0]);
      _exit(job(dir, j, pfd[j][1]));
    }
    close(pfd[j][1]);
  }
  int ok[2][SAVES] = {{0}}, refused = 0, saved = 0;
  for (int j = 0; j < 2; j++) {
    int res[2];
    while (read(pfd[j][0], res, sizeof res) == sizeof res) {
      CHECK(res[1] >= 0, "job %d save %d failed (see above)", j, res[0]);
      ok[j][res[0]] = res[1] == ZINC_OK;
      refused += res[1] == ZINC_ERR_INVALID;
      saved += res[1] == ZINC_OK;
    }
    close(pfd[j][0]);
    int status;
    waitpid(pid[j], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job %d exited with %d", j,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  printf("two jobs, %d saves each: %d returned ZINC_OK, %d refused by the lock\n", SAVES, saved,
         refused);
  /* every own-tag save that returned OK is complete and holds its values */
  for (int j = 0; j < 2; j++)
    for (int k = 1; k < SAVES; k += 2)
      if (ok[j][k]) {
        char tag[32];
        snprintf(tag, sizeof tag, "job%d_%d", j, k);
        int got = saved_value(dir, tag);
        CHECK(got == 100 * (j + 1) + k, "%s returned ZINC_OK but holds %d", tag, got);
      }
  /* "same" holds one complete save that returned OK */
  int same = saved_value(dir, "same");
  int known = 0;
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < SAVES; k += 2)
      known |= ok[j][k] && same == 100 * (j + 1) + k;
  CHECK(known, "\"same\" holds %d, not the values of a save that returned ZINC_OK", same);
  CHECK(saved_value(dir, NULL) >= 0, "latest does not verify");
  if (refused == 0)
    printf("note: the two jobs' saves did not overlap this time\n");
}

int main(void) {
  const char *base = getenv("ZINC_TEST_BINARY_DIR") ? getenv("ZINC_TEST_BINARY_DIR") : "/tmp";
  char dir[512], cmd[2000];
  snprintf(dir, sizeof dir, "%s/ckpt_lock", base);
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/held %s/two", dir, dir, dir);
  if (system(cmd) != 0)
    return 1;
  char held[600], two[600];
  snprintf(held, sizeof held, "%s/held", dir);
  snprintf(two, sizeof two, "%s/two", dir);
  test_held_lock(held);
  test_two_jobs(two);
  if (failures == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
      return 1;
  }
  printf(failures ? "checkpoint lock tests FAILED\n" : "checkpoint lock tests passed\n");
  return failures ? 1 : 0;
}
