/*
 * test_offload_transfers.c — what crosses PCIe with CPU offload, on the cpu
 * device taking the GPU's path (ZINC_OFFLOAD_STAGING=1), under mpirun (1 or
 * 2 ranks), three bf16 modules, gradient_accumulation_steps 3, two steps:
 *
 *  - stages 2/3 with offload_optimizer cpu: the reduced gradients reach the
 *    host partition once per window (grad_host_writes == steps), not once
 *    per module and micro-batch, and every parameter is bitwise the run
 *    without offload;
 *  - stage 3 with offload_param cpu: each gather first copies this rank's
 *    chunks to the device (param_device_copies == the gathers the run
 *    started: persistence threshold 0, no prefetch, reuse distance 0, so
 *    every fetch gathers but the backward's first, m2 fetched again right
 *    after its forward release, which the replay keeps; the recording
 *    micro-batch gathers at every fetch);
 *  - gathered buffers are no longer zeroed: with every unzeroed allocation
 *    poisoned (0xFF, a bf16 NaN) each fetched parameter holds exactly the
 *    values of the run without poison (the gradients are computed from
 *    them, so any poison read would reach the final parameters too).
 * The reference is the same model trained without offload and without
 * poison; compared bit for bit.
 */
#include <mpi.h>

#include "engine/engine.h"
#include "engine/support.h"
#include "engine_test.h"

enum { NMOD = 3, GAS = 3, STEPS = 2 };
static const int64_t numel[NMOD] = {200, 333, 57};

static zinc_status init_fn(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)ctx;
  int salt = zinc_param_name(p)[1] - '0';
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.01f * (float)((i * 7 + salt * 13) % 29) - 0.1f;
  return ZINC_OK;
}

typedef struct {
  float *params[NMOD];      /* final fp32 masters */
  float *fetched[NMOD];     /* fetched values (bf16 -> f32), last fetch */
  int64_t grad_host_writes, param_device_copies;
  int nan_seen;
} outcome;

static void run(int stage, int offload, int poison, outcome *out) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": %d,"
           " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
           " \"bf16\": {\"enabled\": true},"
           " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0,"
           " \"stage3_max_reuse_distance\": 0, \"stage3_prefetch_bucket_size\": 0%s%s}}",
           GAS, stage,
           offload ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "",
           offload && stage == 3 ? ", \"offload_param\": {\"device\": \"cpu\"}" : "");
  if (offload)
    setenv("ZINC_OFFLOAD_STAGING", "1", 1);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  if (poison)
    zinc_engine_poison_unzeroed(e, 0xFF);
  zinc_module *m[NMOD];
  zinc_param *p[NMOD];
  for (int k = 0; k < NMOD; k++) {
    char name[8];
    snprintf(name, sizeof name, "m%d", k);
    m[k] = zinc_module_add(e, name);
    p[k] = zinc_param_add(e, m[k], name, ZINC_BF16, 1, &numel[k]);
    ET_CHECK(m[k] && p[k], "registering %s: %s", name, zinc_last_error());
  }
  ET_OK(zinc_engine_build(e, init_fn, NULL));
  memset(out, 0, sizeof *out);
  for (int k = 0; k < NMOD; k++) {
    out->params[k] = calloc((size_t)numel[k], 4);
    out->fetched[k] = calloc((size_t)numel[k], 4);
  }
  for (int s = 0; s < STEPS; s++)
    for (int mb = 0; mb < GAS; mb++) {
      for (int k = 0; k < NMOD; k++) { /* forward */
        ET_OK(zinc_module_fetch(e, m[k]));
        ET_OK(zinc_module_release(e, m[k]));
      }
      for (int k = NMOD - 1; k >= 0; k--) { /* backward: g from the parameters */
        ET_OK(zinc_module_fetch(e, m[k]));
        const uint16_t *w = zinc_param_data(p[k]);
        uint16_t *g = zinc_param_grad(p[k]);
        for (int64_t i = 0; i < numel[k]; i++) {
          float x = zinc_bf16_to_f32(w[i]);
          out->fetched[k][i] = x;
          out->nan_seen |= x != x;
          float add = x * (0.5f + 0.25f * (float)et_rank) + 0.001f * (float)(mb + 3 * s) -
                      0.0007f * (float)(i % 11);
          g[i] = zinc_f32_to_bf16(zinc_bf16_to_f32(g[i]) + add);
        }
        ET_OK(zinc_module_grads_ready(e, m[k]));
        ET_OK(zinc_module_release(e, m[k]));
      }
      ET_OK(zinc_backward_end(e));
      ET_OK(zinc_step(e, NULL));
    }
  for (int k = 0; k < NMOD; k++)
    ET_OK(zinc_param_get_full(e, p[k], ZINC_STATE_PARAM, out->params[k]));
  out->grad_host_writes = e->grad_host_writes;
  out->param_device_copies = e->param_device_copies;
  zinc_engine_destroy(e);
  unsetenv("ZINC_OFFLOAD_STAGING");
}

static void outcome_free(outcome *o) {
  for (int k = 0; k < NMOD; k++) {
    free(o->params[k]);
    free(o->fetched[k]);
  }
}

static void same(int stage, const char *what, const outcome *got, const outcome *ref) {
  for (int k = 0; k < NMOD; k++) {
    int bad = 0;
    for (int64_t i = 0; i < numel[k]; i++) {
      if (memcmp(&got->params[k][i], &ref->params[k][i], 4) != 0 && bad++ < 3)
        ET_CHECK(0, "stage %d, %s: module m%d element %lld: parameter %.9g, without it %.9g",
                 stage, what, k, (long long)i, got->params[k][i], ref->params[k][i]);
      if (memcmp(&got->fetched[k][i], &ref->fetched[k][i], 4) != 0 && bad++ < 3)
        ET_CHECK(0, "stage %d, %s: module m%d element %lld: fetched %.9g, without it %.9g",
                 stage, what, k, (long long)i, got->fetched[k][i], ref->fetched[k][i]);
    }
    ET_CHECK(bad == 0, "stage %d, %s: module m%d: %d differences", stage, what, k, bad);
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  for (int stage = 2; stage <= 3; stage++) {
    outcome ref, off, poisoned;
    run(stage, 0, 0, &ref);
    run(stage, 1, 0, &off);
    same(stage, "offloaded", &off, &ref);
    ET_CHECK(ref.grad_host_writes == 0, "stage %d without offload: %lld gradient writes to "
             "the host", stage, (long long)ref.grad_host_writes);
    ET_CHECK(off.grad_host_writes == STEPS, "stage %d offloaded: %lld gradient writes to the "
             "host over %d windows of %d micro-batches x %d modules; want one per window",
             stage, (long long)off.grad_host_writes, STEPS, GAS, NMOD);
    int64_t gathers = 2 * NMOD + (int64_t)(STEPS * GAS - 1) * (2 * NMOD - 1);
    if (stage == 3)
      ET_CHECK(off.param_device_copies == gathers,
               "stage 3, offload_param cpu: %lld chunk copies to the device for %lld "
               "gathers; want one per gather", (long long)off.param_device_copies,
               (long long)gathers);
    else
      ET_CHECK(off.param_device_copies == 0, "stage 2: %lld parameter chunk copies",
               (long long)off.param_device_copies);
    if (stage == 3) {
      run(stage, 1, 1, &poisoned);
      ET_CHECK(!poisoned.nan_seen, "stage 3: a fetched parameter held the poison (a byte of "
               "the gathered buffer was read before being written)");
      same(stage, "offloaded, unzeroed buffers poisoned", &poisoned, &ref);
      outcome_free(&poisoned);
      run(stage, 0, 1, &poisoned);
      ET_CHECK(!poisoned.nan_seen, "stage 3 without offload: a fetched parameter held the "
               "poison");
      same(stage, "unzeroed buffers poisoned", &poisoned, &ref);
      outcome_free(&poisoned);
    }
    if (et_rank == 0)
      printf("stage %d: %lld gradient writes to the host in %d windows, %lld chunk copies "
             "for %lld gathers\n", stage, (long long)off.grad_host_writes, STEPS,
             (long long)off.param_device_copies, (long long)(stage == 3 ? gathers : 0));
    outcome_free(&ref);
    outcome_free(&off);
  }
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "offload transfer tests FAILED\n"
               : "offload transfer tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
