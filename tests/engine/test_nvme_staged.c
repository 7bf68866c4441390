/*
 * test_nvme_staged.c — ZeRO-Infinity through the pipeline a GPU run takes:
 * with ZINC_OFFLOAD_STAGING=1 the cpu device stages the NVMe sub-groups'
 * gradients in and parameters out through the pinned slots, the CPU
 * optimizer stepping the state read from the swap area (nvme_step.c).
 *
 *  - the oracle: offload_optimizer nvme at stages 1-3, in sub-groups of 300
 *    elements (several per rank) through 2 swap buffers, and stage 3 with
 *    offload_param nvme (its fetches NVMe -> host -> the gathered buffer,
 *    gathered in place) give the same bits as stage 0 without offload,
 *    fp32 and bf16; Lamb, Lion and SGD at stages 1 and 3 likewise;
 *  - an I/O error injected in the middle of a staged step fails every rank
 *    with ZINC_ERR_IO and a message naming the swap file; the build's size
 *    plan and the estimator (with the same ZINC_OFFLOAD_STAGING) count
 *    exactly the host buffers the engine allocated, staging slots included.
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/place/placements.h"
#include "engine_test.h"

static char root[512];

static const struct {
  int stage, overlap;
  const char *offload, *offload_param;
} runs[] = {
    {1, 0, "nvme", NULL},
    {2, 1, "nvme", NULL},
    {3, 0, "nvme", NULL}, /* parameters on the device: copied out */
    {3, 1, "nvme", "nvme"}, /* ZeRO-Infinity: optimizer state and parameters */
    {3, 0, "cpu", "nvme"},
};

static void oracle(et_run base, const char *label) {
  float **first = et_alloc_params(&base.shape);
  et_train(&base, first, NULL, NULL); /* stage 0, no offload */
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    et_run r = base;
    r.stage = runs[k].stage;
    r.overlap = runs[k].overlap;
    r.offload = runs[k].offload;
    r.offload_param = runs[k].offload_param;
    r.nvme_path = root;
    r.sub_group = 300;
    r.buffer_count = 2;
    float **out = et_alloc_params(&r.shape);
    setenv("ZINC_OFFLOAD_STAGING", "1", 1);
    et_train(&r, out, NULL, NULL);
    unsetenv("ZINC_OFFLOAD_STAGING");
    char what[160];
    snprintf(what, sizeof what, "%s stage %d%s offload %s/%s (staged) vs stage 0", label,
             r.stage, r.overlap ? " overlap" : "", r.offload,
             r.offload_param ? r.offload_param : "none");
    ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical", what);
    et_free_params(out);
  }
  if (et_rank == 0 && et_failures == 0)
    printf("%s, %d ranks: NVMe offload through the staging pipeline bitwise identical to "
           "stage 0\n", label, et_world);
  et_free_params(first);
}

/* The other optimizers: Lamb (two passes, its norms from the staged UPDATE),
 * Lion and SGD (fewer state slots per swap region), stage 1 (gradients
 * copied in) and stage 3 with everything on NVMe, against stage 0. */
static void optimizers(void) {
  static const et_optim family[] = {
      {.type = "Lamb", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6,
       .weight_decay = 0.01, .min_coeff = 0.05, .max_coeff = 5.0},
      {.type = "Lion", .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1},
      {.type = "SGD", .lr = 0.05, .momentum = 0.9, .nesterov = 1, .weight_decay = 0.01},
  };
  for (size_t o = 0; o < sizeof family / sizeof family[0]; o++) {
    et_run base = et_defaults();
    base.steps = 6;
    base.optim = &family[o];
    float **first = et_alloc_params(&base.shape);
    et_train(&base, first, NULL, NULL);
    for (int stage = 1; stage <= 3; stage += 2) {
      et_run r = base;
      r.stage = stage;
      r.offload = "nvme";
      r.offload_param = stage == 3 ? "nvme" : NULL;
      r.nvme_path = root;
      r.sub_group = 300;
      r.buffer_count = 2;
      float **out = et_alloc_params(&r.shape);
      setenv("ZINC_OFFLOAD_STAGING", "1", 1);
      et_train(&r, out, NULL, NULL);
      unsetenv("ZINC_OFFLOAD_STAGING");
      char what[160];
      snprintf(what, sizeof what, "%s stage %d offload nvme (staged) vs stage 0",
               family[o].type, stage);
      ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical", what);
      et_free_params(out);
    }
    et_free_params(first);
  }
  if (et_rank == 0 && et_failures == 0)
    printf("Lamb, Lion, SGD, %d ranks: staged NVMe at stages 1 and 3 bitwise identical to "
           "stage 0\n", et_world);
}

/* error@N=EIO on every rank, N inside the third step's swap traffic */
static void fault(const char *spec, int stage, const char *offload_param) {
  et_run r = et_defaults();
  r.stage = stage;
  r.offload = "nvme";
  r.offload_param = offload_param;
  r.nvme_path = root;
  r.sub_group = 300;
  r.buffer_count = 2;
  setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_CHECK(e->pl->off.ready && zinc_nvme_opt_on_disk(e),
           "stage %d offload nvme with ZINC_OFFLOAD_STAGING=1: the staging pipeline is not "
           "set up", stage);
  /* the build's plan (the estimator's sizes) holds the staging slots too */
  uint64_t plan[ZINC_LOC_N][ZINC_MEM_NCAT];
  zinc_build_sizes(e, plan);
  zinc_mem_stats ms = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &ms));
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      ET_CHECK(ms.current[l][c] == plan[l][c], "staged stage %d: %s/%s measured %llu, planned "
               "%llu", stage, zinc_mem_location_name(l), zinc_mem_category_name(c),
               (unsigned long long)ms.current[l][c], (unsigned long long)plan[l][c]);
  /* and so does the estimator (a bare engine, staging as the env says) */
  zinc_est_param p[TM_NPARAM];
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    memset(&p[i], 0, sizeof p[i]);
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = r.dtype;
    p[i].ndim = zinc_param_shape(m.par[i], p[i].shape);
  }
  zinc_estimate est;
  ET_OK(zinc_estimate_model(&e->cfg, zinc_dp_size(e), 0, p, TM_NPARAM, &est));
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      ET_CHECK(est.bytes[l][c] == plan[l][c], "staged stage %d: %s/%s estimated %llu, built "
               "%llu", stage, zinc_mem_location_name(l), zinc_mem_category_name(c),
               (unsigned long long)est.bytes[l][c], (unsigned long long)plan[l][c]);
  ET_OK(et_steps(&m, &r, 0, 2));
  ET_OK(zinc_nvme_inject(e, spec));
  double t0 = MPI_Wtime();
  zinc_status st = et_steps(&m, &r, 2, 6);
  double took = MPI_Wtime() - t0;
  char what[160];
  snprintf(what, sizeof what, "staged stage %d offload nvme/%s, fault %s", stage,
           offload_param ? offload_param : "none", spec);
  const char *needles[] = {".swap", NULL};
  et_expect_everywhere(st, ZINC_ERR_IO, took, what, needles, -1);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", zinc_last_error());
  ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "%s: the engine went on after it", what);
  et_model_free(&m);
  zinc_engine_destroy(e);
  unsetenv("ZINC_OFFLOAD_STAGING");
  if (et_rank == 0 && et_failures == 0)
    printf("%s: every rank failed: %s\n", what, msg);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/nvme_staged_np%d", et_binary_dir(), et_world);
  mkdir(root, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  et_run r = et_defaults();
  r.steps = 8;
  oracle(r, "fp32");
  r.dtype = ZINC_BF16;
  r.shape.dtype = ZINC_BF16;
  oracle(r, "bf16");
  optimizers();
  fault("error@12=EIO", 2, NULL);
  fault("error@30=EIO", 3, "nvme");
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "staged NVMe tests FAILED\n" : "staged NVMe tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
