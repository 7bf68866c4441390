/*
 * test_offload_copies.c — the staged offload pipeline (ZINC_OFFLOAD_STAGING=1,
 * the cuda device's CPU-offload path run on the cpu device) queues one copy
 * per sub-group and direction, not one per optimizer run, for a model of
 * many small parameters whose runs lie back to back in memory:
 *
 *   NP parameters of PN elements in one module, weights and biases
 *   alternating (every other one without weight decay, so each parameter
 *   is an optimizer run of its own, as in a transformer). Each parameter
 *   starts at a multiple of ALIGN elements (the layout's alignment; the
 *   padding belongs to the run before it) and the segment is padded to
 *   N x ALIGN over N ranks, so a rank's optimizer steps
 *   T = round_up((NP - 1) * round_up(PN, ALIGN) + PN, N * ALIGN) / N
 *   elements (NP * 32 at one rank) in sub-groups of S (sub_group_size):
 *   G = ceil(T / S) sub-groups. Per step the pipeline queues
 *     G copies in  (gradients device -> staging; stage 0-1 only: at stages
 *                   2-3 the reduced gradients are host memory already)
 *   + G copies out (parameters staging -> device)
 *   counted as the device's copies (zinc_device.copies) in a staged run
 *   minus those of the same run without staging (the reduction's and the
 *   gathers' copies, the same in both),
 * at one rank, and at stage 3 on every rank (its partition is one range);
 * at stages 1-2 over several ranks a rank's chunks of consecutive
 * partition units lie apart in the whole buffers (one copy per unit chunk
 * a sub-group touches), and only the bits are checked. The old pipeline queued one copy per piece of an
 * optimizer run: NP + G - 1 per direction at one rank (a run cut by a
 * sub-group boundary is two pieces; no boundary falls between two runs).
 * The parameters after the steps are bitwise those of stage 0
 * without offload, fp32 and bf16, at stages 1, 2 and 3, also with
 * NVMe optimizer state (place/nvme_step.c's staged path, the same closed form).
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "engine/place/placements.h"
#include "engine_test.h"

enum { NP = 120, PN = 7, ALIGN = 32, PADDED = (PN + ALIGN - 1) / ALIGN * ALIGN };
enum { S = 500, STEPS = 3 };

static char nvme_root[512];

typedef struct {
  zinc_engine *e;
  zinc_module *mod;
  zinc_param *par[NP];
} many_model;

static zinc_status many_init(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  (void)ctx;
  int i = atoi(zinc_param_name(p) + 1);
  for (int64_t j = 0; j < numel; j++)
    dst[j] = tm_uniform((uint64_t)(i * PN + j) * 7919u + 17u);
  return ZINC_OK;
}

/* One micro-batch (synthetic gradients that depend on step, parameter and
 * element) and its step; the copies the device queued over both. */
static uint64_t many_step(many_model *m, zinc_dtype dt, int step) {
  uint64_t before = m->e->dev->copies;
  ET_OK(zinc_module_fetch(m->e, m->mod));
  for (int i = 0; i < NP; i++) {
    void *g = zinc_param_grad(m->par[i]);
    ET_CHECK(g != NULL, "parameter %d: no gradient", i);
    for (int j = 0; g && j < PN; j++)
      zinc_store_from_f32(g, j, dt, tm_uniform((uint64_t)((step * NP + i) * PN + j)));
  }
  ET_OK(zinc_module_grads_ready(m->e, m->mod));
  ET_OK(zinc_module_release(m->e, m->mod));
  ET_OK(zinc_backward_end(m->e));
  ET_OK(zinc_step(m->e, NULL));
  return m->e->dev->copies - before;
}

/* Train STEPS steps with stage / offload `off` (nvme: the state on NVMe),
 * staged or not; copies[s]: the device's copies in step s; out: the final
 * parameters (NP * PN floats). */
static void many_train(int stage, const char *off, int staged, zinc_dtype dt,
                       uint64_t *copies, float *out) {
  et_run r = et_defaults();
  r.stage = stage;
  r.offload = off;
  r.dtype = dt;
  r.sub_group = S;
  r.persist = 0;
  if (!strcmp(off, "nvme")) {
    r.nvme_path = nvme_root;
    r.buffer_count = 2;
  }
  if (staged)
    setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  many_model m;
  m.e = et_create(&r, NULL);
  m.mod = zinc_module_add(m.e, "blocks");
  ET_CHECK(m.mod != NULL, "zinc_module_add: %s", zinc_last_error());
  for (int i = 0; i < NP; i++) {
    char name[16];
    int64_t shape[1] = {PN};
    snprintf(name, sizeof name, "p%d", i);
    m.par[i] = zinc_param_add(m.e, m.mod, name, dt, 1, shape);
    ET_CHECK(m.par[i] != NULL, "zinc_param_add %s: %s", name, zinc_last_error());
    if (i % 2) /* a bias: no weight decay, a run of its own */
      ET_OK(zinc_param_set_weight_decay(m.par[i], 0));
  }
  ET_OK(zinc_engine_build(m.e, many_init, NULL));
  ET_CHECK(!staged || m.e->pl->off.ready || zinc_nvme_opt_on_disk(m.e),
           "stage %d offload %s: ZINC_OFFLOAD_STAGING=1 did not stage", stage, off);
  for (int s = 0; s < STEPS; s++)
    copies[s] = many_step(&m, dt, s);
  for (int i = 0; i < NP; i++)
    ET_OK(zinc_param_get_full(m.e, m.par[i], ZINC_STATE_PARAM, out + (size_t)i * PN));
  zinc_engine_destroy(m.e);
  unsetenv("ZINC_OFFLOAD_STAGING");
}

static void check(int stage, const char *off, zinc_dtype dt, const float *want) {
  static float plain_out[NP * PN], staged_out[NP * PN];
  uint64_t plain[STEPS], staged[STEPS];
  many_train(stage, off, 0, dt, plain, plain_out);
  many_train(stage, off, 1, dt, staged, staged_out);
  const char *dname = dt == ZINC_BF16 ? "bf16" : "fp32";
  /* a rank's shard: the segment padded to N x ALIGN elements, 1/N of it */
  int64_t used = (int64_t)(NP - 1) * PADDED + PN, group = (int64_t)et_world * ALIGN;
  int64_t shard = (used + group - 1) / group * group / et_world;
  int64_t groups = (shard + S - 1) / S;
  int64_t expect = (stage <= 1 ? groups : 0) + groups; /* in + out */
  /* over several ranks a rank's chunks of consecutive units lie apart in
   * the whole gradient and parameter buffers (stages 1-2): a copy per unit
   * chunk there; stage 3's partition is one range per rank */
  int counted = et_world == 1 || stage == 3;
  for (int s = 0; s < STEPS && counted; s++)
    ET_CHECK((int64_t)(staged[s] - plain[s]) == expect,
             "%s stage %d offload %s, step %d: the staging pipeline queued %lld copies, want "
             "%lld (one per sub-group and direction, %lld sub-groups of %d over %d runs)",
             dname, stage, off, s, (long long)(staged[s] - plain[s]), (long long)expect,
             (long long)groups, S, NP);
  int bad = 0;
  for (int k = 0; k < NP * PN; k++)
    if (memcmp(&staged_out[k], &want[k], sizeof(float)) != 0 && bad++ < 5)
      fprintf(stderr, "%s stage %d offload %s: element %d: %.9g, stage 0 %.9g\n", dname, stage,
              off, k, staged_out[k], want[k]);
  ET_CHECK(bad == 0, "%s stage %d offload %s staged: %d elements differ from stage 0", dname,
           stage, off, bad);
  if (et_failures == 0 && et_rank == 0)
    printf("%s stage %d offload %s, %d ranks: %lld copies per step staged (%lld sub-groups%s), "
           "bitwise stage 0\n", dname, stage, off, et_world,
           (long long)(staged[0] - plain[0]), (long long)groups,
           counted ? "" : "; pieces apart, not counted");
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  ET_CHECK(ALIGN == ZINC_ALIGN_ELEMS, "the test's ALIGN %d is not the layout's %d", ALIGN,
           ZINC_ALIGN_ELEMS);
  snprintf(nvme_root, sizeof nvme_root, "%s/offload_copies_np%d", et_binary_dir(), et_world);
  mkdir(nvme_root, 0755);
  static const zinc_dtype dts[2] = {ZINC_F32, ZINC_BF16};
  for (int d = 0; d < 2; d++) {
    static float base[NP * PN];
    uint64_t none[STEPS];
    many_train(0, "none", 0, dts[d], none, base);
    for (int stage = 1; stage <= 3; stage++)
      check(stage, "cpu", dts[d], base);
    check(1, "nvme", dts[d], base);
    check(3, "nvme", dts[d], base);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "offload copy tests FAILED\n" : "offload copy tests passed at %d ranks\n",
           et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
