/*
 * test_hpz.c — hpZ (zero_optimization.zero_hpz_partition_size): stage-3
 * parameters keep a secondary partition inside groups of h ranks, and
 * gathers after the first one since a step use it. Under mpirun (2 or 4
 * ranks):
 *
 *  - lossless: every h > 1 dividing the rank count trains to the same bits
 *    as h = 1 (parameters and losses, several steps, so a stale secondary
 *    copy shows), at every stage-3 variant: offload_param none/cpu/nvme,
 *    prefetch on/off, overlap_comm on/off, reuse off/on, f32 and bf16,
 *    accumulation 1 and 2. Each backward fetch also hands the trainer the
 *    same bits its forward fetch did (the tiny model's backward reads no
 *    parameter, so this is checked directly).
 *  - the wire: MPI_Isend is intercepted here (PMPI, independent of the
 *    engine) with the point-to-point path forced (ZINC_COMM_MPI_SHM=0);
 *    between the first backward fetch and the first grads_ready (no
 *    gradient reduction runs there) no data message (> 256 bytes: the
 *    engine's agreements are 32) may go to a rank outside the sender's
 *    group of h, and some must go inside it. Likewise over the whole
 *    second micro-batch of a step (accumulation 2) with prefetch running
 *    ahead: its forward, backward and prefetched gathers all use the
 *    secondary partition. The same windows with h = 1 must see data leave
 *    the group (the check can fail).
 *  - memory: the profiler's device parameter bytes grow by the secondary
 *    partition, counted here from the layout rule (engine.h): per
 *    non-persistent module, each parameter starts at a multiple of 32
 *    elements and the module is padded to a multiple of 32 * N; the
 *    secondary holds that / h elements in the compute dtype. The estimator
 *    says the same.
 *  - at 4 ranks, model_parallel_size 2 (groups of 2 data-parallel ranks)
 *    is lossless too.
 *  - config: h that does not divide the data-parallel size is refused
 *    naming the key.
 */
#include <mpi.h>
#include <stdatomic.h>

#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine_test.h"

static char root[400];

/* ------------------------------------------------------------- the wire */

/* the comm's worker thread sends too: atomics */
static _Atomic int wire_on;          /* count sends now */
static _Atomic int wire_group = 1;   /* h: world rank r is in group r / h */
static _Atomic int64_t wire_in, wire_out; /* data bytes sent inside / outside the group */

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
  if (wire_on && dest != MPI_PROC_NULL) {
    int size = 0;
    PMPI_Type_size(dt, &size);
    int64_t bytes = (int64_t)count * size;
    if (bytes > 256) {
      MPI_Group g, w;
      int to = -1;
      PMPI_Comm_group(comm, &g);
      PMPI_Comm_group(MPI_COMM_WORLD, &w);
      PMPI_Group_translate_ranks(g, 1, &dest, w, &to);
      PMPI_Group_free(&g);
      PMPI_Group_free(&w);
      if (to / wire_group == et_rank / wire_group)
        wire_in += bytes;
      else
        wire_out += bytes;
    }
  }
  return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}

/* ------------------------------------------------------------- training */

static int64_t bad_backward; /* backward fetches whose bits differ from the forward's */

/* One micro-batch as et_micro_batch_status does it, also comparing each
 * module's parameters at its backward fetch with its forward fetch;
 * `watch` 1: count the wire between the first backward fetch and the first
 * grads_ready; 2: from the first forward fetch on. */
static void micro_batch(et_model *m, const et_run *r, int64_t first, int watch, double *loss) {
  zinc_engine *e = m->e;
  const tm_shape *sh = &r->shape;
  et_clear_grads(m, sh, -1);
  if (watch == 2)
    wire_on = 1;
  for (int k = 0; k < 4; k++) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    ET_OK(et_load_module(m, sh, r->dtype, k));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  *loss = tm_forward_backward(sh, m->P, m->G, first, r->micro, zinc_loss_scale(e));
  /* every module fetched again first (parameters checked), then the
   * gradients reported: the window between sees gathers only */
  if (watch == 1)
    wire_on = 1;
  for (int k = 3; k >= 0; k--) {
    ET_OK(zinc_module_fetch(e, m->mod[k]));
    for (int i = 0; i < TM_NPARAM; i++) {
      if (et_param_module[i] != k)
        continue;
      const void *d = zinc_param_data(m->par[i]);
      for (int64_t j = 0; j < tm_numel(sh, i); j++) {
        float v = zinc_load_as_f32(d, j, r->dtype);
        if (memcmp(&v, &m->P[i][j], sizeof v) != 0)
          bad_backward++;
      }
    }
  }
  wire_on = 0;
  for (int k = 3; k >= 0; k--) {
    ET_OK(et_add_module_grads(m, sh, r->dtype, k));
    ET_OK(zinc_module_grads_ready(e, m->mod[k]));
    ET_OK(zinc_module_release(e, m->mod[k]));
  }
  ET_OK(zinc_backward_end(e));
}

static void train(const et_run *r, float **final, double *losses, int watch) {
  et_model m;
  zinc_engine *e = et_open(r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < r->steps; s++) {
    double sum = 0;
    for (int k = 0; k < r->gas; k++) {
      int64_t first = (((int64_t)s * r->gas + k) * N + me) * r->micro;
      double l = 0;
      /* watch 2: the wire of every later micro-batch of a step (the
       * parameters have not changed since the step's first) */
      int w = watch == 1 ? s > 0 : watch == 2 && k > 0 ? 2 : 0;
      micro_batch(&m, r, first, w, &l);
      sum += l;
      ET_OK(zinc_step(e, NULL));
    }
    losses[s] = sum;
  }
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, final[i]));
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static void lossless(et_run r, int h, const char *what) {
  float **a = et_alloc_params(&r.shape), **b = et_alloc_params(&r.shape);
  double la[16], lb[16];
  r.hpz = 1;
  bad_backward = 0;
  train(&r, a, la, 0);
  r.hpz = h;
  train(&r, b, lb, 0);
  char label[192];
  snprintf(label, sizeof label, "hpz %d vs 1, %s", h, what);
  et_same_bits(&r.shape, a, b, label);
  ET_CHECK(memcmp(la, lb, sizeof(double) * (size_t)r.steps) == 0, "%s: losses differ", label);
  ET_CHECK(bad_backward == 0, "%s: %lld parameter elements fetched in backward differ from "
           "the forward's", label, (long long)bad_backward);
  et_free_params(a);
  et_free_params(b);
}

static void test_lossless(int h) {
  static const char *offloads[3] = {"none", "cpu", "nvme"};
  char dir[600];
  snprintf(dir, sizeof dir, "%s/h%d", root, h);
  for (int o = 0; o < 3; o++)
    for (int prefetch = 0; prefetch <= 1; prefetch++)
      for (int overlap = 0; overlap <= 1; overlap++) {
        et_run r = et_defaults();
        r.stage = 3;
        r.steps = 5;
        r.reuse = 0; /* every backward fetch gathers */
        r.prefetch = prefetch ? 1500 : 0;
        r.overlap = overlap;
        r.offload_param = offloads[o];
        if (o == 2) {
          r.offload = "nvme";
          r.nvme_path = dir;
        }
        char what[128];
        snprintf(what, sizeof what, "offload_param %s, prefetch %d, overlap %d", offloads[o],
                 prefetch, overlap);
        lossless(r, h, what);
      }
  et_run r = et_defaults();
  r.stage = 3;
  r.steps = 4;
  r.reuse = 0;
  r.gas = 2;
  r.dtype = r.shape.dtype = ZINC_BF16;
  lossless(r, h, "bf16, accumulation 2");
  r = et_defaults(); /* reuse on: kept copies, no backward gather for some */
  r.stage = 3;
  r.steps = 4;
  lossless(r, h, "reuse 1000");
}

/* ------------------------------------------------------------- the wire */

/* watch 1: the backward fetches of step 2 (prefetch too small to run
 * ahead); 2: the second micro-batch of each step, accumulation 2, prefetch
 * running ahead over the whole model (forward, backward and prefetched
 * gathers all after the step's first micro-batch). */
static void wire(int h, int watch, int64_t *in, int64_t *out) {
  et_run r = et_defaults();
  r.stage = 3;
  r.steps = 2;
  r.reuse = 0;
  r.hpz = h;
  if (watch == 2) {
    r.gas = 2;
    r.prefetch = 1000000;
  }
  r.shape = (tm_shape){{60, 60, 60, 7}, ZINC_F32}; /* chunks of 512 bytes and more */
  r.reduce_bucket = 100000;
  float **p = et_alloc_params(&r.shape);
  double l[4];
  wire_group = h;
  wire_in = wire_out = 0;
  train(&r, p, l, watch);
  *in = wire_in;
  *out = wire_out;
  et_free_params(p);
}

static void test_wire(int h, int watch) {
  static const char *what[3] = {"", "backward fetches", "second micro-batch, prefetch on"};
  int64_t in = 0, out = 0, in1 = 0, out1 = 0;
  wire(h, watch, &in, &out);
  ET_CHECK(out == 0, "hpz %d, %s: the gathers sent %lld bytes outside the group of %d", h,
           what[watch], (long long)out, h);
  ET_CHECK(in > 0, "hpz %d, %s: no gather inside the group", h, what[watch]);
  /* the control: without hpZ the same window sends outside the group */
  wire(1, watch, &in1, &out1);
  wire_group = h;
  ET_CHECK(out1 > 0, "hpz 1, %s: nothing sent between ranks in the window; the wire check "
           "cannot see a gather", what[watch]);
  if (et_rank == 0)
    printf("%s, rank 0: hpz %d sent %lld bytes in its group, %lld outside; hpz 1 sent %lld "
           "outside\n", what[watch], h, (long long)in, (long long)out, (long long)out1);
}

/* ------------------------------------------------------------- memory */

/* Elements of a module laid out per the rule in engine.h, padded to 32 N. */
static int64_t padded_module(const int64_t *numel, int n, int N) {
  int64_t at = 0;
  for (int i = 0; i < n; i++)
    at = (at + 31) / 32 * 32 + numel[i];
  return (at + 32 * N - 1) / (32 * N) * (32 * N);
}

static void test_memory(int h) {
  et_run r = et_defaults();
  r.stage = 3;
  r.persist = 100; /* "scale" (29 elements) is persistent: no secondary */
  uint64_t params[2], formula[2];
  for (int k = 0; k < 2; k++) {
    r.hpz = k ? h : 1;
    et_model m;
    zinc_engine *e = et_open(&r, NULL, &m);
    zinc_mem_stats st = ZINC_MEM_STATS_INIT;
    ET_OK(zinc_memory_stats(e, &st));
    params[k] = st.current[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS];
    formula[k] = st.theoretical_model_states;
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  const tm_shape *sh = &r.shape;
  int N = et_world;
  int64_t in[2] = {tm_numel(sh, 0), tm_numel(sh, 1)}, mid[2] = {tm_numel(sh, 2), tm_numel(sh, 3)},
          out[2] = {tm_numel(sh, 5), tm_numel(sh, 6)};
  int64_t elems = padded_module(in, 2, N) + padded_module(mid, 2, N) + padded_module(out, 2, N);
  int64_t unpadded = in[0] + in[1] + mid[0] + mid[1] + out[0] + out[1];
  uint64_t want = (uint64_t)(elems / h) * 4;
  ET_CHECK(params[1] - params[0] == want, "hpz %d: device parameter bytes grew by %llu, want "
           "%llu (%lld padded elements / %d, f32)", h,
           (unsigned long long)(params[1] - params[0]), (unsigned long long)want,
           (long long)elems, h);
  /* the ZeRO formula the report compares with: unpadded, / h */
  int64_t fd = (int64_t)(formula[1] - formula[0]), fw = (int64_t)(unpadded * 4 / h);
  ET_CHECK(fd >= fw - 1 && fd <= fw + 1, "hpz %d: the ZeRO formula grew by %lld bytes, want "
           "%lld (%lld parameters / %d, f32)", h, (long long)fd, (long long)fw,
           (long long)unpadded, h);
  /* the estimator: the same model described */
  zinc_est_param p[TM_NPARAM];
  memset(p, 0, sizeof p);
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = ZINC_F32;
    p[i].ndim = 1;
    p[i].shape[0] = tm_numel(sh, i);
  }
  uint64_t est[2];
  for (int k = 0; k < 2; k++) {
    r.hpz = k ? h : 1;
    char *json = et_config_json(&r);
    zinc_config *cfg = NULL;
    ET_OK(zinc_config_parse(json, &cfg));
    free(json);
    zinc_estimate out_est;
    ET_OK(zinc_estimate_model(&cfg->s, N, 0, p, TM_NPARAM, &out_est));
    est[k] = out_est.bytes[ZINC_LOC_DEVICE][ZINC_MEM_PARAMS];
    zinc_config_free(cfg);
  }
  ET_CHECK(est[1] - est[0] == want, "hpz %d: the estimator's device parameter bytes grew by "
           "%llu, want %llu", h, (unsigned long long)(est[1] - est[0]), (unsigned long long)want);
  if (et_rank == 0)
    printf("hpz %d at %d ranks: secondary partition %llu bytes per rank (%lld parameters in "
           "gathered modules, %lld padded, / %d, f32)\n", h, N, (unsigned long long)want,
           (long long)unpadded, (long long)elems, h);
}

/* ------------------------------------------------------------- config */

static void test_refused(void) {
  et_run r = et_defaults();
  r.stage = 3;
  r.hpz = et_world + 1; /* never divides the data-parallel size (>= 2) */
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  zinc_status st = zinc_engine_create(cfg, &opt, &e);
  ET_CHECK(st == ZINC_ERR_CONFIG, "hpz %d at %d ranks: status %d, want ZINC_ERR_CONFIG",
           r.hpz, et_world, (int)st);
  ET_CHECK(strstr(zinc_last_error(), "zero_hpz_partition_size") != NULL,
           "the refusal does not name the key: %s", zinc_last_error());
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
  /* below 1: refused by the config reader */
  ET_CHECK(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                             "{\"stage\": 3, \"zero_hpz_partition_size\": 0}}", &cfg) != ZINC_OK,
           "zero_hpz_partition_size 0 accepted");
  zinc_config_free(cfg);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: hpZ needs at least 2 ranks\n");
    MPI_Finalize();
    return 77;
  }
  /* the wire check counts point-to-point sends: no shared-memory path */
  setenv("ZINC_COMM_MPI_SHM", "0", 1);
  snprintf(root, sizeof root, "%s/hpz_test_np%d", et_binary_dir(), et_world);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/h2 %s/h4", root, root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int h = 2; h <= et_world; h *= 2) {
    if (et_world % h)
      continue;
    test_lossless(h);
    test_wire(h, 1);
    test_wire(h, 2);
    test_memory(h);
  }
  if (et_world == 4) {
    /* model parallelism 2: the groups are 2 consecutive data-parallel
     * ranks, here each model-parallel rank's whole data-parallel group */
    et_run r = et_defaults();
    r.stage = 3;
    r.steps = 4;
    r.reuse = 0;
    r.model_parallel = 2;
    lossless(r, 2, "model_parallel_size 2");
  }
  test_refused();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf(bad ? "hpZ tests FAILED\n" : "hpZ tests passed at %d ranks\n", et_world);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
