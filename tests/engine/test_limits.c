/*
 * test_limits.c — the edges, under mpirun:
 *  - an empty model (no modules) and a module without parameters build,
 *    step, save and load;
 *  - one-element parameters at up to 4 ranks (more ranks than elements):
 *    stages 0-3 give bitwise identical results and the right values;
 *  - repeated create/destroy in one process leaves no memory accounted and
 *    no file descriptors or threads behind.
 */
#include <dirent.h>
#include <mpi.h>

#include "engine_test.h"

static zinc_engine *make(int stage, const char *extra) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\","
           " \"params\": {\"lr\": 0.1}}, \"zero_optimization\": {\"stage\": %d,"
           " \"reduce_bucket_size\": 1, \"stage3_param_persistence_threshold\": 0}%s}",
           stage, extra ? extra : "");
  zinc_config *cfg;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  return e;
}

static void test_empty(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/limits_empty_np%d",
           et_binary_dir(), et_world);
  for (int stage = 0; stage <= 3; stage++) {
    zinc_engine *e = make(stage, NULL);
    zinc_module *m = stage % 2 ? zinc_module_add(e, "nothing") : NULL;
    ET_OK(zinc_engine_build(e, NULL, NULL));
    for (int s = 0; s < 2; s++) {
      if (m) {
        ET_OK(zinc_module_fetch(e, m));
        ET_OK(zinc_module_release(e, m));
        ET_OK(zinc_module_fetch(e, m));
        ET_OK(zinc_module_grads_ready(e, m));
        ET_OK(zinc_module_release(e, m));
      }
      ET_OK(zinc_backward_end(e));
      zinc_step_info info = ZINC_STEP_INFO_INIT;
      ET_OK(zinc_step(e, &info));
      ET_CHECK(info.grad_norm == 0 && !info.skipped, "empty model: norm %g skipped %d",
               info.grad_norm, info.skipped);
    }
    ET_OK(zinc_save_checkpoint(e, dir, "empty"));
    ET_OK(zinc_load_checkpoint(e, dir, "empty"));
    zinc_engine_destroy(e);
  }
}

/* n one-element modules; loss_r = sum_i (p_i - t_i,r)^2 / 2 with targets per rank */
static void tiny_params(int stage, float *out, int n) {
  zinc_engine *e = make(stage, NULL);
  zinc_module **m = calloc((size_t)n, sizeof *m);
  zinc_param **p = calloc((size_t)n, sizeof *p);
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", i);
    m[i] = zinc_module_add(e, name);
    int64_t one = 1;
    p[i] = zinc_param_add(e, m[i], "x", ZINC_F32, 1, &one);
  }
  ET_OK(zinc_engine_build(e, NULL, NULL)); /* zeros */
  int me = zinc_dp_rank(e);
  for (int s = 0; s < 5; s++) {
    float x[16];
    for (int i = 0; i < n; i++) {
      ET_OK(zinc_module_fetch(e, m[i]));
      x[i] = *(float *)zinc_param_data(p[i]);
      ET_OK(zinc_module_release(e, m[i]));
    }
    for (int i = n - 1; i >= 0; i--) {
      ET_OK(zinc_module_fetch(e, m[i]));
      float *g = zinc_param_grad(p[i]);
      *g += x[i] - (float)(i + me + s);
      ET_OK(zinc_module_grads_ready(e, m[i]));
      ET_OK(zinc_module_release(e, m[i]));
    }
    ET_OK(zinc_backward_end(e));
    ET_OK(zinc_step(e, NULL));
  }
  for (int i = 0; i < n; i++)
    ET_OK(zinc_param_get_full(e, p[i], ZINC_STATE_PARAM, &out[i]));
  free(m);
  free(p);
  zinc_engine_destroy(e);
}

static void test_one_element(void) {
  const int n = 3;
  float ref[3], got[3];
  tiny_params(0, ref, n);
  for (int i = 0; i < n; i++)
    ET_CHECK(ref[i] > 0 && ref[i] < 1, "one-element parameter %d ended at %g (expected a few "
             "steps of lr 0.1 toward positive targets)", i, ref[i]);
  for (int stage = 1; stage <= 3; stage++) {
    tiny_params(stage, got, n);
    ET_CHECK(memcmp(got, ref, sizeof ref) == 0, "one-element parameters: stage %d differs "
             "(%.9g %.9g %.9g vs %.9g %.9g %.9g)", stage, got[0], got[1], got[2], ref[0], ref[1],
             ref[2]);
  }
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d)
    return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

static void test_hygiene(void) {
  /* warm up once (MPI, hwloc and the comm set themselves up) */
  zinc_engine *e = make(3, NULL);
  zinc_engine_destroy(e);
  int fds = count_entries("/proc/self/fd"), threads = count_entries("/proc/self/task");
  for (int k = 0; k < 20; k++) {
    et_run r = et_defaults();
    r.stage = k % 4;
    r.steps = 2;
    r.overlap = k % 2;
    et_train(&r, NULL, NULL, NULL);
  }
  int fds2 = count_entries("/proc/self/fd"), threads2 = count_entries("/proc/self/task");
  ET_CHECK(fds2 == fds, "20 engines later: %d file descriptors, %d before", fds2, fds);
  ET_CHECK(threads2 == threads, "20 engines later: %d threads, %d before", threads2, threads);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  test_empty();
  test_one_element();
  test_hygiene();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "limits tests FAILED\n" : "limits tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
