/*
 * test_ckpt_slow.c — a checkpoint call in which one rank is slower than
 * zinc.comm_timeout_s (3 s here) is not a lost peer: its peers wait for it
 * up to zinc.checkpoint_timeout_s (60 s here). Under mpirun at 2 and 3
 * ranks (1 rank: SKIPPED), with a slow filesystem made deterministic by
 * the test hooks ZINC_CKPT_DELAY / ZINC_CKPT_READ_DELAY (one write or read
 * sleeps 8 s):
 *  - a save whose last rank's shard write is slow, and one whose rank 0's
 *    first write is slow (the others wait for its shard, then for its
 *    manifest and publication): ZINC_OK on every rank, the checkpoint
 *    complete and loadable, training goes on;
 *  - a load whose last rank's shard read is slow: ZINC_OK, every state as
 *    saved;
 *  - after them the comm timeout is the short one again: the bound is
 *    raised only during the calls (a collective outside them still fails
 *    at comm_timeout_s — shown by the engine's step working as before; a
 *    lost peer in a save is tests/engine/rank_killed.sh with
 *    test_ckpt_save_killed).
 */
#include <mpi.h>
#include <unistd.h>

#include "engine/checkpoint/ckpt_mpi.h"
#include "engine/engine.h"
#include "engine/engine_test.h"

#define DELAY "8@1" /* seconds @ the write or read that sleeps */

static char root[512];

static float *snapshot(et_model *m, zinc_state_kind kind) {
  int64_t total = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    total += zinc_param_numel(m->par[i]);
  float *v = malloc((size_t)total * 4), *at = v;
  for (int i = 0; i < TM_NPARAM; i++) {
    ET_OK(zinc_param_get_full(m->e, m->par[i], kind, at));
    at += zinc_param_numel(m->par[i]);
  }
  return v;
}

static int64_t total_numel(et_model *m) {
  int64_t total = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    total += zinc_param_numel(m->par[i]);
  return total;
}

/* One rank (`slow`) sleeps in its first write (save) or read (load). */
static zinc_status slow_call(zinc_engine *e, const char *dir, const char *tag, int save,
                             int slow, double *seconds) {
  const char *var = save ? "ZINC_CKPT_DELAY" : "ZINC_CKPT_READ_DELAY";
  if (et_rank == slow)
    setenv(var, DELAY, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = save ? zinc_save_checkpoint(e, dir, tag) : zinc_load_checkpoint(e, dir, tag);
  *seconds = MPI_Wtime() - t0;
  unsetenv(var);
  return st;
}

static void test_slow(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 3, \"checkpoint_timeout_s\": 60}";
  char dir[700], what[160];
  snprintf(dir, sizeof dir, "%s/slow_s%d", root, stage);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 2));
  int slowest[2] = {et_world - 1, 0};
  for (int k = 0; k < 2; k++) {
    double dt = 0;
    char tag[16];
    snprintf(tag, sizeof tag, "t%d", k);
    zinc_status st = slow_call(e, dir, tag, 1, slowest[k], &dt);
    snprintf(what, sizeof what, "stage %d: a save whose rank %d writes slowly", stage,
             slowest[k]);
    ET_CHECK(st == ZINC_OK, "%s: %s after %.1f s: %s", what, zinc_status_name(st), dt,
             zinc_last_error());
    ET_CHECK(dt > 7.0, "%s: took %.1f s; the delay was not injected", what, dt);
  }
  float *saved = snapshot(&m, ZINC_STATE_PARAM), *saved_m = snapshot(&m, ZINC_STATE_EXP_AVG);
  /* training goes on after the slow saves */
  ET_OK(et_steps(&m, &r, 2, 3));
  /* a slow load */
  double dt = 0;
  zinc_status st = slow_call(e, dir, "t1", 0, et_world - 1, &dt);
  snprintf(what, sizeof what, "stage %d: a load whose last rank reads slowly", stage);
  ET_CHECK(st == ZINC_OK, "%s: %s after %.1f s: %s", what, zinc_status_name(st), dt,
           zinc_last_error());
  ET_CHECK(dt > 7.0, "%s: took %.1f s; the delay was not injected", what, dt);
  float *back = snapshot(&m, ZINC_STATE_PARAM), *back_m = snapshot(&m, ZINC_STATE_EXP_AVG);
  ET_CHECK(!memcmp(back, saved, (size_t)total_numel(&m) * 4) &&
               !memcmp(back_m, saved_m, (size_t)total_numel(&m) * 4),
           "%s: the state loaded is not the one saved", what);
  ET_OK(et_steps(&m, &r, 3, 4));
  /* the bound is the comm's own again outside the checkpoint calls */
  ET_CHECK(e->world->timeout_s == 3.0 && e->dp_host->timeout_s == 3.0,
           "stage %d: after the calls the comm timeout is %g s (world) and %g s "
           "(data-parallel), not 3 s", stage, e->world->timeout_s, e->dp_host->timeout_s);
  free(saved);
  free(saved_m);
  free(back);
  free(back_m);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  if (et_mpi_start(&argc, &argv, "test_ckpt_slow", 2))
    return 77;
  et_scratch_dir(root, sizeof root, "ckpt_slow");
  test_slow(1);
  test_slow(3);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (!bad) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    shell(cmd);
  }
  if (et_rank == 0)
    printf(bad ? "slow checkpoint tests FAILED\n"
               : "slow checkpoint tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
