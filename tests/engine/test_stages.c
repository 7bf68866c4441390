/*
 * test_stages.c — the correctness oracle (README, "the oracle"): for a fixed world
 * size, fp32 parameters and accumulation 1, stages 0-3 (with and without
 * overlap_comm) give bitwise identical parameters after 20 steps, and match
 * the single-rank reference trainer within 1e-5 relative L2. With
 * accumulation 4, and with bf16/fp16 parameters, within stated tolerances.
 *
 *   test_stages [DUMP [CASES]]
 *     DUMP: rank 0 appends every run's final parameters to this file
 *     (et_dump_params), so that two jobs (one node, several emulated
 *     nodes) can be compared byte for byte (tests/cluster). CASES: the
 *     cases to run, numbered 1-5 in the order below (default all).
 *
 * At an even world of 4 or more, the same bits on every node layout the
 * comm can take on this machine: one node (shared memory), nodes of 2
 * ranks faked with ZINC_COMM_NODE_SIZE=2 (the node-aware path), and the
 * flat point-to-point path (ZINC_COMM_MPI_SHM=0). CTest also runs the whole
 * oracle with ZINC_COMM_NODE_SIZE=2 set (test_stages_node2_np4). Not
 * with DUMP: the cluster's job compares itself with one node instead.
 */
#include <sys/stat.h>

#include "engine_test.h"

static char nvme_dir[512];
static FILE *dump; /* rank 0's DUMP file, or NULL */
static const char *cases = "12345";

static int wanted(char number) { return strchr(cases, number) != NULL; }

static void compare_stages(et_run base, const char *label, int bitwise, double tol_ref,
                           double tol_stage) {
  float **ref = NULL, **first = et_alloc_params(&base.shape);
  /* staged: the offloaded optimizer through the copy pipeline a GPU run
   * takes (ZINC_OFFLOAD_STAGING), in sub-groups of 300 elements */
  const struct {
    int stage, overlap;
    const char *offload, *offload_param;
    int staged;
  } runs[] = {{0, 0, "none", NULL, 0},  {1, 0, "none", NULL, 0}, {2, 0, "none", NULL, 0},
              {2, 1, "none", NULL, 0},  {3, 0, "none", NULL, 0}, {3, 1, "none", NULL, 0},
              {1, 0, "cpu", NULL, 0},   {2, 1, "cpu", NULL, 0},  {3, 1, "cpu", "cpu", 0},
              {1, 0, "nvme", NULL, 0},  {2, 1, "nvme", NULL, 0}, {3, 1, "nvme", "nvme", 0},
              {3, 0, "cpu", "nvme", 0}, {1, 0, "cpu", NULL, 1},  {2, 1, "cpu", NULL, 1},
              {3, 1, "cpu", "cpu", 1},  {3, 0, "cpu", NULL, 1}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    et_run r = base;
    r.stage = runs[k].stage;
    r.overlap = runs[k].overlap;
    r.offload = runs[k].offload;
    r.offload_param = runs[k].offload_param;
    if (strstr(r.offload, "nvme") || (r.offload_param && strstr(r.offload_param, "nvme"))) {
      r.nvme_path = nvme_dir;
      r.sub_group = 700; /* several sub-groups through 3 buffers */
      r.buffer_count = 3;
    }
    if (runs[k].staged) {
      r.sub_group = 300;
      setenv("ZINC_OFFLOAD_STAGING", "1", 1);
    }
    float **out = k == 0 ? first : et_alloc_params(&r.shape);
    et_train(&r, out, NULL, NULL);
    unsetenv("ZINC_OFFLOAD_STAGING");
    if (dump && et_rank == 0)
      et_dump_params(dump, &r.shape, out);
    if (k == 0) {
      ref = et_alloc_params(&r.shape);
      et_reference(&r, et_world, ref);
      double rel = et_rel_l2(&r.shape, first, ref);
      ET_CHECK(rel <= tol_ref, "%s: stage 0 vs single-rank reference: relative L2 %.3g > %.3g",
               label, rel, tol_ref);
      if (et_rank == 0)
        printf("%s, %d ranks: stage 0 vs reference relative L2 %.3g (limit %.1g)\n", label,
               et_world, rel, tol_ref);
      continue;
    }
    char what[128];
    snprintf(what, sizeof what, "%s stage %d%s offload %s/%s%s vs stage 0", label, r.stage,
             r.overlap ? " overlap" : "", r.offload, r.offload_param ? r.offload_param : "none",
             runs[k].staged ? " (staged copies)" : "");
    if (bitwise) {
      ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical", what);
    } else {
      double rel = et_rel_l2(&r.shape, out, first);
      ET_CHECK(rel <= tol_stage, "%s: relative L2 %.3g > %.3g", what, rel, tol_stage);
    }
    double rel = et_rel_l2(&r.shape, out, ref);
    ET_CHECK(rel <= tol_ref, "%s vs reference: relative L2 %.3g > %.3g", what, rel, tol_ref);
    et_free_params(out);
  }
  if (et_rank == 0 && et_failures == 0)
    printf("%s, %d ranks: stages 0-3, offload none/cpu/cpu-staged/nvme %s\n", label, et_world,
           bitwise ? "bitwise identical" : "agree within tolerance");
  et_free_params(first);
  et_free_params(ref);
}

/* Stages 1 and 3 (overlap) on each node layout: bitwise equal to one node. */
static void compare_layouts(et_run base, const char *label) {
  if (et_world < 4 || et_world % 2 || dump)
    return;
  char saved[32] = "";
  const char *was = getenv("ZINC_COMM_NODE_SIZE");
  if (was)
    snprintf(saved, sizeof saved, "%s", was);
  static const struct { const char *node_size, *shm, *name; } layouts[] = {
      {NULL, NULL, "one node (shared memory)"},
      {"2", NULL, "nodes of 2 ranks (node-aware)"},
      {NULL, "0", "flat point-to-point"},
  };
  const int stages[][2] = {{1, 0}, {3, 1}};
  for (int s = 0; s < 2; s++) {
    et_run r = base;
    r.stage = stages[s][0];
    r.overlap = stages[s][1];
    float **first = et_alloc_params(&r.shape);
    for (int l = 0; l < 3; l++) {
      if (layouts[l].node_size)
        setenv("ZINC_COMM_NODE_SIZE", layouts[l].node_size, 1);
      else
        unsetenv("ZINC_COMM_NODE_SIZE");
      if (layouts[l].shm)
        setenv("ZINC_COMM_MPI_SHM", layouts[l].shm, 1);
      else
        unsetenv("ZINC_COMM_MPI_SHM");
      float **out = l == 0 ? first : et_alloc_params(&r.shape);
      et_train(&r, out, NULL, NULL);
      if (l > 0) {
        char what[160];
        snprintf(what, sizeof what, "%s stage %d%s: %s vs %s", label, r.stage,
                 r.overlap ? " overlap" : "", layouts[l].name, layouts[0].name);
        ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical", what);
        et_free_params(out);
      }
    }
    et_free_params(first);
  }
  unsetenv("ZINC_COMM_MPI_SHM");
  if (saved[0])
    setenv("ZINC_COMM_NODE_SIZE", saved, 1);
  else
    unsetenv("ZINC_COMM_NODE_SIZE");
  if (et_rank == 0)
    printf("%s, %d ranks: stages 1 and 3 bitwise identical on one node, nodes of 2 and the "
           "flat path\n", label, et_world);
}

int main(int argc, char **argv) {
  /* et_rank is known once the first engine exists: every rank opens DUMP,
   * only rank 0 writes to it (opened for appending, so nothing is lost) */
  if (argc > 1 && !(dump = fopen(argv[1], "ab"))) {
    perror(argv[1]);
    return 1;
  }
  if (argc > 2)
    cases = argv[2];
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme_stages",
           et_binary_dir());
  mkdir(nvme_dir, 0755);
  et_run r = et_defaults();
  if (wanted('1')) {
    compare_stages(r, "fp32, accumulation 1", 1, 1e-5, 0);
    compare_layouts(r, "fp32, accumulation 1");
  }

  r = et_defaults();
  r.gas = 4;
  r.steps = 8;
  /* accumulation order differs between stages 0/1 (in the parameter dtype
   * across micro-batches, then reduced) and 2/3 (reduced per micro-batch,
   * summed in fp32): a few ulps per step */
  if (wanted('2'))
    compare_stages(r, "fp32, accumulation 4", 0, 1e-5, 1e-6);

  /* 16-bit parameters: stages still agree bit for bit (every stage rounds
   * the reduced gradient to the parameter dtype once); the reference runs
   * in fp32, so the distance to it is the 16-bit rounding of 20 steps */
  r = et_defaults();
  r.dtype = ZINC_BF16;
  r.shape.dtype = ZINC_BF16;
  if (wanted('3')) {
    compare_stages(r, "bf16, accumulation 1", 1, 2e-2, 0);
    compare_layouts(r, "bf16, accumulation 1");
  }

  r = et_defaults();
  r.dtype = ZINC_F16;
  r.shape.dtype = ZINC_F16;
  if (wanted('4'))
    compare_stages(r, "fp16 (loss scaling), accumulation 1", 1, 5e-3, 0);

  /* every bucket size at its minimum: many units per parameter, one
   * element per chunk row... the layout changes, the arithmetic must not */
  r = et_defaults();
  r.reduce_bucket = 1;
  r.prefetch = 1;
  r.steps = 6;
  if (wanted('5'))
    compare_stages(r, "fp32, reduce_bucket_size 1, prefetch 1", 1, 1e-5, 0);

  if (dump)
    fclose(dump);
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  return 0;
}
