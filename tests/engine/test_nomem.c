/*
 * test_nomem.c — out of memory at every engine allocation, under mpirun
 * (the engine's test hook makes the n-th allocation fail):
 *  - during zinc_engine_build, for n = 1, 2, ... until the build succeeds:
 *    ZINC_ERR_NOMEM with a message naming what was being allocated, and
 *    zinc_engine_destroy frees what the build had made (ASan/valgrind runs
 *    of this test find no leak);
 *  - during training, for n = 1, 2, ... until 3 steps need no more: the
 *    failing call returns ZINC_ERR_NOMEM naming the allocation, every later
 *    step is refused with the earlier failure, and a checkpoint saved
 *    before the failure loads into a fresh engine that trains to the same
 *    parameters as a run without the fault;
 *  - with several ranks the fault is injected on the last rank only, in the
 *    build and in training: every rank returns ZINC_ERR_NOMEM naming that
 *    rank and the allocation, within seconds (the comm timeout is set to
 *    60 s so that a peer left waiting in a collective shows as a COMM
 *    error or a slow call, not as a pass).
 * Configurations: stage 1, stage 2 with offload cpu, stage 3 with prefetch,
 * stage 3 with optimizer and parameters on NVMe, and the staged copies the
 * cuda device uses for offload cpu.
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "engine/support.h"
#include "engine_test.h"

static char root[512];

/* The rank the fault is injected on: the last one (with one rank, it). */
static int fault_rank(void) { return et_world - 1; }


typedef struct {
  const char *name;
  int stage, overlap, staged;
  const char *offload, *offload_param;
} nomem_case;

/* The status and message every rank must see for a fault on fault_rank(). */
static void check_fault(zinc_status st, const char *what, const nomem_case *c, int64_t n,
                        double seconds);

static et_run case_run(const nomem_case *c) {
  et_run r = et_defaults();
  r.stage = c->stage;
  r.overlap = c->overlap;
  r.offload = c->offload;
  r.offload_param = c->offload_param;
  r.steps = 3;
  r.extra = "\"zinc\": {\"comm_timeout_s\": 60}";
  if (!strcmp(c->offload, "nvme")) {
    r.nvme_path = root;
    r.sub_group = 300;
    r.buffer_count = 2;
  }
  if (c->staged)
    r.sub_group = 300;
  return r;
}

/* Build with the n-th allocation failing: 1 when it failed as it should, 0
 * when the build needed fewer than n allocations and succeeded. */
static int build_with_fault(const nomem_case *c, int64_t n) {
  et_run r = case_run(c);
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  if (et_rank == fault_rank())
    zinc_engine_inject_alloc_fault(e, n);
  double t0 = MPI_Wtime();
  zinc_status st = et_build(&m, e, &r);
  double dt = MPI_Wtime() - t0;
  /* the build fails everywhere or nowhere */
  int failed = st != ZINC_OK, any = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ET_CHECK(failed == any, "%s, build allocation %lld: rank %d returned %s while another "
           "rank failed", c->name, (long long)n, et_rank, zinc_status_name(st));
  if (failed)
    check_fault(st, "build", c, n, dt);
  et_model_free(&m);
  zinc_engine_destroy(e);
  return any;
}

static void check_fault(zinc_status st, const char *what, const nomem_case *c, int64_t n,
                        double seconds) {
  char where[160];
  snprintf(where, sizeof where, "%s, %s allocation %lld", c->name, what, (long long)n);
  et_expect_everywhere(st, ZINC_ERR_NOMEM, seconds, where,
                       (const char *const[]){"allocating", "injected", NULL}, fault_rank());
}

static void capture(et_model *m, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, out[i]));
}

/* Train steps 0-1, save, then steps 2-4 with the n-th allocation failing;
 * 1 when it failed (and was checked), 0 when no allocation n happened. */
static int train_with_fault(const nomem_case *c, int64_t n, float **ref, const char *ck) {
  et_run r = case_run(c);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 2));
  ET_OK(zinc_save_checkpoint(e, ck, "before"));
  if (et_rank == fault_rank())
    zinc_engine_inject_alloc_fault(e, n);
  double t0 = MPI_Wtime();
  zinc_status st = et_steps(&m, &r, 2, 5);
  double dt = MPI_Wtime() - t0;
  int failed = st != ZINC_OK, any = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ET_CHECK(failed == any, "%s, training allocation %lld: rank %d returned %s while another "
           "rank failed", c->name, (long long)n, et_rank, zinc_status_name(st));
  failed = any;
  if (failed) {
    check_fault(st, "training", c, n, dt);
    zinc_engine_inject_alloc_fault(e, 0);
    zinc_status again = et_steps(&m, &r, 2, 3);
    ET_CHECK(again != ZINC_OK && strstr(zinc_last_error(), "earlier failure"),
             "%s: a step after the failure was not refused: %s", c->name,
             again == ZINC_OK ? "ZINC_OK" : zinc_last_error());
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
  if (failed) { /* the checkpoint from before the failure carries on exactly */
    et_model m2;
    zinc_engine *e2 = et_open(&r, NULL, &m2);
    ET_OK(zinc_load_checkpoint(e2, ck, "before"));
    ET_OK(et_steps(&m2, &r, 2, 5));
    float **out = et_alloc_params(&r.shape);
    capture(&m2, out);
    ET_CHECK(et_same_bits(&r.shape, out, ref, c->name), "%s: resumed after NOMEM at "
             "training allocation %lld differs from the run without it", c->name, (long long)n);
    et_free_params(out);
    et_model_free(&m2);
    zinc_engine_destroy(e2);
  }
  return failed;
}

static void run_case(const nomem_case *c) {
  if (c->staged)
    setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  int64_t n = 1;
  while (build_with_fault(c, n) && n < 10000)
    n++;
  int64_t build_allocs = n - 1;
  int64_t train_allocs = -1;
  {
    et_run r = case_run(c);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt_%s", root, c->name);
    float **ref = et_alloc_params(&r.shape);
    {
      et_model m;
      zinc_engine *e = et_open(&r, NULL, &m);
      ET_OK(et_steps(&m, &r, 0, 5));
      capture(&m, ref);
      et_model_free(&m);
      zinc_engine_destroy(e);
    }
    n = 1;
    while (train_with_fault(c, n, ref, ck) && n < 10000)
      n++;
    train_allocs = n - 1;
    et_free_params(ref);
  }
  unsetenv("ZINC_OFFLOAD_STAGING");
  ET_CHECK(build_allocs > 0, "%s: the build made no engine allocation", c->name);
  if (et_rank == 0)
    printf("%-22s %d ranks, fault on rank %d: NOMEM on every rank at each of %lld build "
           "and %lld training allocations: each reported, later steps refused, the "
           "checkpoint before it resumes to the same bits\n", c->name, et_world, fault_rank(),
           (long long)build_allocs, (long long)train_allocs);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/nomem_np%d",
           et_binary_dir(), et_world);
  mkdir(root, 0755);
  static const nomem_case cases[] = {
      {"stage1", 1, 0, 0, "none", NULL},
      {"stage2_offload_cpu", 2, 1, 0, "cpu", NULL},
      {"stage3_prefetch", 3, 1, 0, "none", NULL},
      {"stage3_nvme", 3, 1, 0, "nvme", "nvme"},
      {"stage1_cpu_staged", 1, 0, 1, "cpu", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "nomem tests FAILED\n" : "nomem tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
