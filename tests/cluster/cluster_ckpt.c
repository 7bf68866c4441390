/*
 * cluster_ckpt.c — a checkpoint saved by one job and loaded by another of
 * a different world size and layout (cluster_test.sh ckpt: saved on 2
 * emulated nodes x 2 ranks, loaded on one node x 2 ranks). The tiny model
 * (tests/engine) with a global batch of 4 samples per step whatever the
 * world size: step s trains on samples 4s .. 4s+3, each of the N ranks on
 * 4/N of them, so that the whole run, across the save and the load, is one
 * run of the double-precision reference trainer (et_reference at 4 ranks,
 * 1 sample each).
 *
 *   cluster_ckpt save DIR STAGE STEPS OUT
 *       STEPS steps from the start, then zinc_save_checkpoint(DIR, "saved");
 *       rank 0 writes the full state after the save to OUT.
 *   cluster_ckpt resume DIR STAGE STEPS OUT
 *       zinc_load_checkpoint(DIR) at this job's world size and STAGE; rank 0
 *       writes the full state just loaded to OUT.loaded (the script compares
 *       it with the saving job's OUT), trains STEPS more steps, writes the
 *       full state to OUT, and checks the parameters against the reference
 *       trainer over all the steps (relative L2 <= 1e-5).
 *
 * The full state file: param, exp_avg, exp_avg_sq, each as et_dump_params
 * writes it (raw fp32, parameters W0 ... b2 in order).
 */
#include <mpi.h>

#include "engine/engine_test.h"

#define GLOBAL_BATCH 4

static void train(et_model *m, const et_run *r, int64_t from, int64_t to) {
  int me = zinc_dp_rank(m->e);
  for (int64_t s = from; s < to; s++) {
    et_micro_batch(m, &r->shape, r->dtype, s * GLOBAL_BATCH + me * r->micro, r->micro, NULL);
    ET_OK(zinc_step(m->e, NULL));
  }
}

/* Every state of every parameter, gathered (collective), written by rank 0. */
static void write_state(et_model *m, const et_run *r, const char *path) {
  const zinc_state_kind kinds[3] = {ZINC_STATE_PARAM, ZINC_STATE_EXP_AVG, ZINC_STATE_EXP_AVG_SQ};
  float **s = et_alloc_params(&r->shape);
  FILE *f = et_rank == 0 ? fopen(path, "wb") : NULL;
  if (et_rank == 0 && !f) {
    perror(path);
    exit(1);
  }
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(m->e, m->par[i], kinds[k], s[i]));
    if (f)
      et_dump_params(f, &r->shape, s);
  }
  if (f)
    fclose(f);
  et_free_params(s);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc != 6 || (strcmp(argv[1], "save") && strcmp(argv[1], "resume"))) {
    fprintf(stderr, "usage: cluster_ckpt save|resume DIR STAGE STEPS OUT\n");
    return 2;
  }
  int resume = !strcmp(argv[1], "resume");
  const char *dir = argv[2], *out = argv[5];
  int steps = atoi(argv[4]);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (GLOBAL_BATCH % et_world) {
    fprintf(stderr, "cluster_ckpt: %d ranks do not divide the global batch of %d samples\n",
            et_world, GLOBAL_BATCH);
    return 2;
  }
  et_run r = et_defaults();
  r.stage = atoi(argv[3]);
  r.micro = GLOBAL_BATCH / et_world;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);

  if (!resume) {
    train(&m, &r, 0, steps);
    ET_OK(zinc_save_checkpoint(e, dir, "saved"));
    write_state(&m, &r, out);
    if (et_rank == 0)
      printf("saved after %d steps at %d ranks, stage %d\n", steps, et_world, r.stage);
  } else {
    ET_OK(zinc_load_checkpoint(e, dir, NULL));
    int64_t from = zinc_step_count(e);
    char loaded[1024];
    snprintf(loaded, sizeof loaded, "%s.loaded", out);
    write_state(&m, &r, loaded);
    train(&m, &r, from, from + steps);
    write_state(&m, &r, out);

    /* the whole run, save and load included, against the reference */
    float **got = et_alloc_params(&r.shape), **ref = et_alloc_params(&r.shape);
    for (int i = 0; i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, got[i]));
    et_run whole = r;
    whole.micro = 1;
    whole.steps = (int)(from + steps);
    et_reference(&whole, GLOBAL_BATCH, ref);
    double rel = et_rel_l2(&r.shape, got, ref);
    ET_CHECK(rel <= 1e-5, "steps 1..%d (saved at %d, resumed at %d ranks): relative L2 %.3g "
             "to the reference > 1e-5", whole.steps, (int)from, et_world, rel);
    if (et_rank == 0)
      printf("resumed at step %d on %d ranks, stage %d; after step %d: relative L2 %.3g to the "
             "reference (limit 1e-5)\n", (int)from, et_world, r.stage, whole.steps, rel);
    et_free_params(got);
    et_free_params(ref);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
  MPI_Finalize();
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  return 0;
}
