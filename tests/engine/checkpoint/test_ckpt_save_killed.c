/*
 * test_ckpt_save_killed.c — a rank lost in the middle of a checkpoint save
 * is still found: the save raises the bound of its waits to
 * zinc.checkpoint_timeout_s (4 s here, above comm_timeout_s 2 s) so that a
 * slow peer is waited for (test_ckpt_slow), and a dead or frozen one
 * fails every survivor's save with ZINC_ERR_COMM naming it within that
 * bound. Run by tests/engine/rank_killed.sh (as test_rank_killed), which
 * checks the lines printed here: each survivor's failure, a later call,
 * destroy and exit, all within 9 s of the loss.
 *
 * usage: test_ckpt_save_killed STAGE OVERLAP SIGNAL
 *   STAGE 1..3, OVERLAP ignored (the script's argument), SIGNAL kill|stop.
 * The victim (the last rank) is inside its save, sleeping in its shard
 * write (ZINC_CKPT_DELAY, a slow filesystem), when it dies (kill: a
 * thread raises SIGKILL 1 s after the save began) or stays silent (stop:
 * it sleeps 60 s, frozen as far as its peers can tell; the script kills it
 * once the survivors are done).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/killed.h"
#include "zinc.h"

#define LOSS_AFTER_S 1.0 /* the victim dies this long after the save began */


static void *die_soon(void *arg) {
  (void)arg;
  struct timespec nap = {1, 0};
  nanosleep(&nap, NULL);
  raise(SIGKILL);
  return NULL;
}

int main(int argc, char **argv) {
  int stage = argc > 1 ? atoi(argv[1]) : 2;
  int freeze = argc > 3 && !strcmp(argv[3], "stop");
  atexit(killed_report_exit);
  char json[512];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": %d},"
           " \"zinc\": {\"comm_timeout_s\": 2, \"checkpoint_timeout_s\": 4}}", stage);
  zinc_engine *e = killed_engine(json, 0, 0);
  if (zinc_world_size(e) < 2) {
    printf("SKIPPED: needs 2 or more ranks\n");
    zinc_engine_destroy(e);
    return 77;
  }
  zinc_module *m = zinc_module_add(e, "a");
  int64_t shape[1] = {1000};
  if (!zinc_param_add(e, m, "w", ZINC_F32, 1, shape) || zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return 2;
  int rank = zinc_rank(e), victim = zinc_world_size(e) - 1;
  const char *bin = getenv("ZINC_TEST_BINARY_DIR");
  char dir[600];
  snprintf(dir, sizeof dir, "%s/ckpt_save_killed_np%d_s%d_%s", bin ? bin : "/tmp",
           zinc_world_size(e), stage, freeze ? "stop" : "kill");
  if (rank == victim) {
    setenv("ZINC_CKPT_DELAY", "60@1", 1); /* asleep in its first write */
    if (freeze) {
      printf("victim %d: pid %ld stopping\n", rank, (long)getpid());
      fflush(stdout);
    } else {
      pthread_t t;
      pthread_create(&t, NULL, die_soon, NULL);
    }
    zinc_save_checkpoint(e, dir, "t");
    _exit(3); /* woke up: leave, reporting nothing */
  }
  killed_time = killed_now() + LOSS_AFTER_S;
  zinc_status st = zinc_save_checkpoint(e, dir, "t");
  killed_rank = rank;
  printf("survivor %d: %s after %.1f s: %s\n", rank, zinc_status_name(st), killed_now() - killed_time,
         zinc_last_error());
  fflush(stdout);
  /* the engine refuses on, and still says which rank was lost */
  zinc_status again = zinc_module_fetch(e, m);
  printf("survivor %d: later call: %s: %s\n", rank, zinc_status_name(again), zinc_last_error());
  fflush(stdout);
  double t0 = killed_now();
  zinc_engine_destroy(e);
  printf("survivor %d: destroy took %.2f s\n", rank, killed_now() - t0);
  printf("survivor %d: destroy returned after %.1f s\n", rank, killed_now() - killed_time);
  fflush(stdout);
  return st == ZINC_ERR_COMM && again == ZINC_ERR_COMM ? 0 : 1;
}
