/*
 * test_nvme_grads.c — the reduced gradient partition on NVMe: with
 * offload_optimizer nvme at stages 2-3 on the cpu device the fp32 gradient
 * partition lives in the swap area, not in host memory, and training is
 * bit for bit the run with the partition in host memory (offload_optimizer
 * cpu), fp16 with gradient clipping that clips and an inf in one rank's
 * gradient that skips a step:
 *
 *  - the memory accounting: no host array of the partition (grad_part
 *    NULL), gradients on NVMe at least the partition's bytes, host gradient
 *    bytes below it (the sub-groups' buffers), and the build's plan and the
 *    estimator equal to what was allocated;
 *  - per step the same norm, skip and loss scale; after the run the same
 *    parameters and moments; mid-window the same gradients read through
 *    zinc_param_get_full; at gradient_accumulation_steps 1 and 2, directly
 *    and through the staging pipeline (ZINC_OFFLOAD_STAGING=1, whose window
 *    sum goes to disk at the boundary).
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/place/placements.h"
#include "engine_test.h"

#define STEPS 6
#define INF_STEP 3

static char root[512];

typedef struct {
  float norm[STEPS], scale[STEPS];
  int skipped[STEPS];
  float **param, **exp_avg, **grad; /* grad: step 4's, before its step */
} trace;

static void check_accounting(zinc_engine *e, et_model *m, const et_run *r, int on_disk,
                             const char *what) {
  zinc_mem_stats ms = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &ms));
  uint64_t part = (uint64_t)e->train_shard_numel * 4;
  if (!on_disk) {
    ET_CHECK(ms.current[ZINC_LOC_HOST][ZINC_MEM_GRADS] >= part,
             "%s: host gradient bytes %llu below the partition's %llu", what,
             (unsigned long long)ms.current[ZINC_LOC_HOST][ZINC_MEM_GRADS],
             (unsigned long long)part);
    return;
  }
  ET_CHECK(zinc_nvme_grads_on_disk(e) && e->grad_part == NULL,
           "%s: the gradient partition is not on NVMe", what);
  ET_CHECK(ms.current[ZINC_LOC_NVME][ZINC_MEM_GRADS] >= part,
           "%s: NVMe gradient bytes %llu below the partition's %llu", what,
           (unsigned long long)ms.current[ZINC_LOC_NVME][ZINC_MEM_GRADS],
           (unsigned long long)part);
  ET_CHECK(ms.current[ZINC_LOC_HOST][ZINC_MEM_GRADS] < part,
           "%s: host gradient bytes %llu, not below the partition's %llu", what,
           (unsigned long long)ms.current[ZINC_LOC_HOST][ZINC_MEM_GRADS],
           (unsigned long long)part);
  uint64_t plan[ZINC_LOC_N][ZINC_MEM_NCAT];
  zinc_build_sizes(e, plan);
  zinc_est_param p[TM_NPARAM];
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    memset(&p[i], 0, sizeof p[i]);
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = r->dtype;
    p[i].ndim = zinc_param_shape(m->par[i], p[i].shape);
  }
  zinc_estimate est;
  ET_OK(zinc_estimate_model(&e->cfg, zinc_dp_size(e), 0, p, TM_NPARAM, &est));
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++) {
      ET_CHECK(ms.current[l][c] == plan[l][c], "%s: %s/%s measured %llu, planned %llu", what,
               zinc_mem_location_name(l), zinc_mem_category_name(c),
               (unsigned long long)ms.current[l][c], (unsigned long long)plan[l][c]);
      ET_CHECK(est.bytes[l][c] == plan[l][c], "%s: %s/%s estimated %llu, built %llu", what,
               zinc_mem_location_name(l), zinc_mem_category_name(c),
               (unsigned long long)est.bytes[l][c], (unsigned long long)plan[l][c]);
    }
}

static void run(const et_run *r, int on_disk, trace *t, const char *what) {
  et_model m;
  zinc_engine *e = et_open(r, NULL, &m);
  check_accounting(e, &m, r, on_disk, what);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  float inf = INFINITY;
  for (int s = 0; s < STEPS; s++) {
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    for (int g = 0; g < r->gas; g++) {
      int64_t first = (((int64_t)s * r->gas + g) * N + me) * r->micro;
      et_micro_batch(&m, &r->shape, r->dtype, first, r->micro,
                     s == INF_STEP && g == 0 && me == N - 1 ? &inf : NULL);
      if (s == 4 && g == 0) /* the window's first micro-batch reduced */
        for (int i = 0; i < TM_NPARAM; i++)
          ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_GRAD, t->grad[i]));
      ET_OK(zinc_step(e, &info));
    }
    t->norm[s] = info.grad_norm;
    t->skipped[s] = info.skipped;
    t->scale[s] = info.loss_scale;
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, t->param[i]));
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_EXP_AVG, t->exp_avg[i]));
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static void compare(int stage, int gas, int staged) {
  et_run r = et_defaults();
  r.stage = stage;
  r.gas = gas;
  r.dtype = ZINC_F16;
  r.shape.d[0] = 40, r.shape.d[1] = 64, r.shape.d[2] = 60, r.shape.d[3] = 16; /* widths <= 64 */
  r.clip = 0.05;
  r.nvme_path = root;
  r.sub_group = 300;
  r.buffer_count = 2;
  trace t[2];
  char what[2][128];
  for (int k = 0; k < 2; k++) {
    t[k].param = et_alloc_params(&r.shape);
    t[k].exp_avg = et_alloc_params(&r.shape);
    t[k].grad = et_alloc_params(&r.shape);
    r.offload = k ? "nvme" : "cpu";
    snprintf(what[k], sizeof what[k], "stage %d gas %d%s offload %s", stage, gas,
             staged ? " staged" : "", r.offload);
    if (staged)
      setenv("ZINC_OFFLOAD_STAGING", "1", 1);
    run(&r, k, &t[k], what[k]);
    unsetenv("ZINC_OFFLOAD_STAGING");
  }
  int clipped = 0;
  for (int s = 0; s < STEPS; s++) {
    ET_CHECK(memcmp(&t[0].norm[s], &t[1].norm[s], 4) == 0 && t[0].skipped[s] == t[1].skipped[s] &&
                 t[0].scale[s] == t[1].scale[s],
             "%s step %d: norm %.9g skipped %d scale %g; host partition: norm %.9g skipped %d "
             "scale %g", what[1], s, t[1].norm[s], t[1].skipped[s], t[1].scale[s], t[0].norm[s],
             t[0].skipped[s], t[0].scale[s]);
    clipped += !t[0].skipped[s] && t[0].norm[s] > r.clip;
  }
  ET_CHECK(t[0].skipped[INF_STEP] == 1, "%s: the inf did not skip step %d", what[0], INF_STEP);
  ET_CHECK(clipped > 0, "%s: no step clipped (norms below %g)", what[0], r.clip);
  char w[200];
  snprintf(w, sizeof w, "%s parameters", what[1]);
  ET_CHECK(et_same_bits(&r.shape, t[1].param, t[0].param, w), "%s differ", w);
  snprintf(w, sizeof w, "%s exp_avg", what[1]);
  ET_CHECK(et_same_bits(&r.shape, t[1].exp_avg, t[0].exp_avg, w), "%s differ", w);
  snprintf(w, sizeof w, "%s gradients", what[1]);
  ET_CHECK(et_same_bits(&r.shape, t[1].grad, t[0].grad, w), "%s differ", w);
  for (int k = 0; k < 2; k++) {
    et_free_params(t[k].param);
    et_free_params(t[k].exp_avg);
    et_free_params(t[k].grad);
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/nvme_grads_np%d", et_binary_dir(), et_world);
  mkdir(root, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int stage = 2; stage <= 3; stage++)
    for (int gas = 1; gas <= 2; gas++)
      compare(stage, gas, 0);
  compare(2, 2, 1);
  compare(3, 1, 1);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "NVMe gradient partition tests FAILED\n"
               : "NVMe gradient partition: bitwise identical to the host partition at %d "
                 "ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
