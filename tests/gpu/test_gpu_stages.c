/*
 * test_gpu_stages.c — the stages oracle on the cuda device with the NCCL
 * comm (one GPU per rank): the tiny model of tests/engine trained 20 steps
 * at stages 0-3 (offload none, and cpu: the CPU Adam with gradients copied
 * in and parameters copied out per sub-group; nvme: ZeRO-Infinity, the
 * same pipeline with the optimizer state read from and written to NVMe per
 * sub-group, and at stage 3 the parameters on NVMe too, fetched NVMe ->
 * pinned -> device and all-gathered from device memory; and partial
 * offload, offload_optimizer.ratio 0, 0.3 and 0.5: the first sub-groups
 * updated on the GPU, the rest by the CPU Adam) must give the same
 * parameters; at
 * world size 1 bit for bit, and at 2-8 ranks within 1e-6 relative L2
 * (NCCL's reductions are not rank-ordered, so grouping may change the
 * last bit); every run within 1e-5 of the single-rank reference. The fp16
 * overflow path: an inf in one rank's gradient skips the step everywhere.
 * An I/O error injected into the NVMe traffic of a step fails every rank
 * with ZINC_ERR_IO naming the swap file. Skipped (exit 77) without a GPU
 * for every rank.
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <sys/stat.h>

#include "../engine/engine_test.h"
#include "engine/engine.h" /* zinc_nvme_inject */
#include "engine/place/placements.h"

static char nvme_dir[512];

static void require_gpus(void) {
  int n = 0, world, rank;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaError_t err = cudaGetDeviceCount(&n);
  int ok = err == cudaSuccess && n >= world, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (rank == 0)
      printf("SKIPPED: %d ranks need as many CUDA devices (cudaGetDeviceCount: %s, %d)\n",
             world, err == cudaSuccess ? "ok" : cudaGetErrorString(err), n);
    MPI_Finalize();
    exit(77);
  }
}

/* device <-> host f32 copies of a parameter-sized buffer in dtype dt */
static void d2h(float *dst, const void *src, int64_t n, zinc_dtype dt) {
  size_t es = zinc_dtype_size(dt);
  void *tmp = malloc((size_t)n * es);
  cudaMemcpy(tmp, src, (size_t)n * es, cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < n; i++)
    dst[i] = zinc_load_as_f32(tmp, i, dt);
  free(tmp);
}

static void add_h2d(void *dst, const float *add, int64_t n, zinc_dtype dt) {
  size_t es = zinc_dtype_size(dt);
  void *tmp = malloc((size_t)n * es);
  cudaMemcpy(tmp, dst, (size_t)n * es, cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < n; i++)
    zinc_store_from_f32(tmp, i, dt, zinc_load_as_f32(tmp, i, dt) + add[i]);
  cudaMemcpy(dst, tmp, (size_t)n * es, cudaMemcpyHostToDevice);
  free(tmp);
}

static void micro_batch(et_model *m, const et_run *r, int64_t first, const float *inject) {
  zinc_engine *e = m->e;
  const tm_shape *sh = &r->shape;
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    for (int i = 0; i < TM_NPARAM; i++)
      if (et_param_module[i] == k) {
        d2h(m->P[i], zinc_param_data(m->par[i]), tm_numel(sh, i), r->dtype);
        memset(m->G[i], 0, (size_t)tm_numel(sh, i) * 4);
      }
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  tm_forward_backward(sh, m->P, m->G, first, r->micro, zinc_loss_scale(e));
  if (inject)
    m->G[0][0] = *inject;
  for (int k = 3; k >= 0; k--) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    for (int i = 0; i < TM_NPARAM; i++)
      if (et_param_module[i] == k)
        add_h2d(zinc_param_grad(m->par[i]), m->G[i], tm_numel(sh, i), r->dtype);
    ET_OK(zinc_module_grads_ready(e, m->mod[k]));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  ET_OK(zinc_backward_end(e));
}

static zinc_engine *open_gpu(const et_run *r, et_model *m) {
  char *json = et_config_json(r);
  zinc_config *cfg;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT; /* AUTO: this rank's GPU */
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  ET_CHECK(zinc_engine_on_gpu(e), "the engine did not pick the GPU");
  ET_OK(et_build(m, e, r));
  return e;
}

static void train(const et_run *r, float **out) {
  et_model m;
  zinc_engine *e = open_gpu(r, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < r->steps; s++) {
    micro_batch(&m, r, ((int64_t)s * N + me) * r->micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, out[i]));
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static void test_oracle(void) {
  et_run base = et_defaults();
  float **ref = et_alloc_params(&base.shape), **first = et_alloc_params(&base.shape);
  et_reference(&base, et_world, ref);
  /* ratio < 1: partial offload, the first sub-groups updated on the GPU by
   * its optimizer kernel, the others by the CPU Adam through the pipeline */
  const struct { int stage; const char *offload, *offload_param, *offload_extra; } runs[] = {
      {0, "none", NULL, NULL},   {1, "none", NULL, NULL},   {2, "none", NULL, NULL},
      {3, "none", NULL, NULL},   {1, "cpu", NULL, NULL},    {2, "cpu", NULL, NULL},
      {3, "cpu", NULL, NULL},    {1, "nvme", NULL, NULL},   {2, "nvme", NULL, NULL},
      {3, "nvme", NULL, NULL},   {3, "nvme", "nvme", NULL}, {3, "cpu", "nvme", NULL},
      {3, "none", "nvme", NULL}, /* the device optimizer into pinned staging, then NVMe */
      {1, "cpu", NULL, ", \"ratio\": 0.3"}, {2, "cpu", NULL, ", \"ratio\": 0.5"},
      {3, "cpu", NULL, ", \"ratio\": 0.3"}, {3, "cpu", NULL, ", \"ratio\": 0"}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    et_run r = base;
    r.stage = runs[k].stage;
    r.offload = runs[k].offload;
    r.offload_param = runs[k].offload_param;
    r.offload_extra = runs[k].offload_extra;
    r.overlap = r.stage >= 2;
    if (strcmp(r.offload, "none"))
      r.sub_group = 300; /* the CPU Adam in several sub-groups, copies overlapping */
    if (!strcmp(r.offload, "nvme") || r.offload_param) {
      r.nvme_path = nvme_dir;
      r.buffer_count = 2;
    }
    float **out = k == 0 ? first : et_alloc_params(&r.shape);
    train(&r, out);
    double rel = et_rel_l2(&r.shape, out, ref);
    ET_CHECK(rel <= 1e-5, "cuda stage %d offload %s/%s%s vs reference: %.3g", r.stage,
             r.offload, r.offload_param ? r.offload_param : "none",
             r.offload_extra ? r.offload_extra : "", rel);
    if (k > 0) {
      char what[160];
      snprintf(what, sizeof what, "cuda stage %d offload %s/%s%s vs stage 0", r.stage,
               r.offload, r.offload_param ? r.offload_param : "none",
               r.offload_extra ? r.offload_extra : "");
      if (et_world == 1)
        ET_CHECK(et_same_bits(&r.shape, out, first, what), "%s: not bitwise identical", what);
      else
        ET_CHECK(et_rel_l2(&r.shape, out, first) <= 1e-6, "%s: %.3g", what,
                 et_rel_l2(&r.shape, out, first));
      et_free_params(out);
    }
  }
  et_free_params(first);
  et_free_params(ref);
}

static void test_overflow(void) {
  et_run r = et_defaults();
  r.stage = 2;
  r.dtype = ZINC_F16;
  r.shape.dtype = ZINC_F16;
  et_model m;
  zinc_engine *e = open_gpu(&r, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  float inf = INFINITY;
  for (int s = 0; s < 4; s++) {
    micro_batch(&m, &r, ((int64_t)s * N + me) * r.micro, s == 2 && me == N - 1 ? &inf : NULL);
    float before = zinc_loss_scale(e);
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    ET_OK(zinc_step(e, &info));
    ET_CHECK(info.skipped == (s == 2), "cuda fp16 step %d: skipped %d", s, info.skipped);
    if (s == 2)
      ET_CHECK(info.loss_scale == before / 2, "cuda fp16: scale %g after overflow, was %g",
               info.loss_scale, before);
  }
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* ZeRO-Infinity on the GPU: an I/O error in a step's NVMe traffic fails
 * every rank, naming the swap file (stage 2: the only NVMe traffic is the
 * step's, so the fault lands inside zinc_step) */
static void test_nvme_fault(void) {
  et_run r = et_defaults();
  r.stage = 2;
  r.offload = "nvme";
  r.nvme_path = nvme_dir;
  r.sub_group = 300;
  r.buffer_count = 2;
  et_model m;
  zinc_engine *e = open_gpu(&r, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  zinc_status st = ZINC_OK;
  double t0 = 0;
  for (int s = 0; s < 6 && st == ZINC_OK; s++) {
    if (s == 2) {
      ET_OK(zinc_nvme_inject(e, "error@12=EIO"));
      t0 = MPI_Wtime();
    }
    micro_batch(&m, &r, ((int64_t)s * N + me) * r.micro, NULL);
    st = zinc_step(e, NULL);
  }
  const char *needles[] = {".swap", NULL};
  et_expect_everywhere(st, ZINC_ERR_IO, MPI_Wtime() - t0, "cuda stage 2 offload nvme, EIO",
                       needles, -1);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  require_gpus();
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(nvme_dir, sizeof nvme_dir, "%s/gpu_nvme_np%d", et_binary_dir(), et_world);
  mkdir(nvme_dir, 0755);
  test_oracle();
  test_overflow();
  test_nvme_fault();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "GPU stages FAILED\n" : "GPU stages oracle passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
