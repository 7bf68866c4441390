/*
 * cluster_node_loss.c — a node lost mid-step (cluster_test.sh node-loss):
 * the tiny model (tests/engine) trains with zinc.comm_timeout_s 5, saves a
 * checkpoint, then keeps stepping until a call fails, which happens when
 * the script cuts one emulated node's link. Every rank prints what it saw,
 * with wall-clock times (CLOCK_REALTIME, seconds since the epoch, the
 * clock the script reads with `date +%s.%N`):
 *
 *   rank R: saved at T                       (after the save, once)
 *   rank R: STATUS at T after N steps: MESSAGE   (the first failure)
 *   rank R: destroy returned at T
 *   rank R: exited at T                      (atexit, after the comm's own
 *                                             exit handler)
 *
 * The ranks on the cut node print too, but nothing they print reaches the
 * launcher any more. A run in which nothing fails within 120 s prints
 * "rank R: no failure" and exits 1.
 *
 *   cluster_node_loss run DIR STAGE SAVE_STEPS
 *   cluster_node_loss load DIR STAGE SAVE_STEPS
 *       the survivors' side: the checkpoint loads at this job's world size
 *       (samples 1 per rank before the save, GLOBAL_BATCH per step either
 *       way), its step count is SAVE_STEPS, its parameters match the
 *       reference trainer's after SAVE_STEPS steps (relative L2 <= 1e-5),
 *       and one more step trains.
 */
#include <time.h>

#include "engine/engine_test.h"

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int my_rank = -1;

/* Registered before the engine creates its comm, so it runs after the
 * comm's own exit handler: the line proves the process got out. */
static void report_exit(void) {
  if (my_rank >= 0) {
    printf("rank %d: exited at %.3f\n", my_rank, wall_s());
    fflush(stdout);
  }
}

#define GLOBAL_BATCH 4 /* samples per step: the run's 4 ranks, 1 each */

/* The survivors' load: see the usage above. */
static int load(const char *dir, et_run *r, int save_steps) {
  et_model m;
  zinc_engine *e = et_create(r, NULL);
  if (GLOBAL_BATCH % et_world) {
    fprintf(stderr, "cluster_node_loss: %d ranks do not divide %d\n", et_world, GLOBAL_BATCH);
    return 2;
  }
  r->micro = GLOBAL_BATCH / et_world;
  ET_OK(et_build(&m, e, r));
  ET_OK(zinc_load_checkpoint(e, dir, NULL));
  ET_CHECK(zinc_step_count(e) == save_steps, "the checkpoint holds step %lld, saved at %d",
           (long long)zinc_step_count(e), save_steps);
  float **got = et_alloc_params(&r->shape), **ref = et_alloc_params(&r->shape);
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, got[i]));
  et_run before = *r;
  before.micro = 1;
  before.steps = save_steps;
  et_reference(&before, GLOBAL_BATCH, ref);
  double rel = et_rel_l2(&r->shape, got, ref);
  ET_CHECK(rel <= 1e-5, "the loaded parameters: relative L2 %.3g to the reference > 1e-5", rel);
  int me = zinc_dp_rank(e);
  et_micro_batch(&m, &r->shape, r->dtype, (int64_t)save_steps * GLOBAL_BATCH + me * r->micro,
                 r->micro, NULL);
  ET_OK(zinc_step(e, NULL));
  if (et_rank == 0)
    printf("loaded step %d at %d ranks: relative L2 %.3g to the reference (limit 1e-5); one "
           "more step trained\n", save_steps, et_world, rel);
  et_free_params(got);
  et_free_params(ref);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return et_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[1], "run") && strcmp(argv[1], "load"))) {
    fprintf(stderr, "usage: cluster_node_loss run|load DIR STAGE SAVE_STEPS\n");
    return 2;
  }
  et_run r = et_defaults();
  r.stage = atoi(argv[3]);
  r.micro = 1;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 5}";
  int save_steps = atoi(argv[4]);
  if (!strcmp(argv[1], "load"))
    return load(argv[2], &r, save_steps);

  atexit(report_exit);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  if (et_world != GLOBAL_BATCH) {
    printf("SKIPPED: run needs %d ranks\n", GLOBAL_BATCH);
    return 77;
  }
  my_rank = et_rank;

  ET_OK(et_steps(&m, &r, 0, save_steps));
  ET_OK(zinc_save_checkpoint(e, argv[2], "saved"));
  printf("rank %d: saved at %.3f\n", et_rank, wall_s());
  fflush(stdout);

  /* on until the link goes down: most of a step's time is in its
   * collectives, so the cut lands inside one */
  zinc_status st = ZINC_OK;
  int s = save_steps;
  double give_up = wall_s() + 120;
  while (st == ZINC_OK && wall_s() < give_up) {
    st = et_steps(&m, &r, s, s + 1);
    s++;
  }
  if (st == ZINC_OK) {
    printf("rank %d: no failure\n", et_rank);
    fflush(stdout);
  } else {
    printf("rank %d: %s at %.3f after %d steps: %s\n", et_rank, zinc_status_name(st), wall_s(),
           s, zinc_last_error());
    fflush(stdout);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
  printf("rank %d: destroy returned at %.3f\n", et_rank, wall_s());
  fflush(stdout);
  return st == ZINC_ERR_COMM ? 0 : 1;
}
