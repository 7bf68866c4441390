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

#include "ckpt_test.h"

#define SAVES 12

/* While the test holds the lock as a save in progress would. */
static void test_held_lock(const char *dir) {
  zinc_param *p;
  zinc_engine *e = open_engine(&p, 512, 768);
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
  zinc_engine *e = open_engine(&p, 512, 768);
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
