/*
 * test_compress.c — compressed communication in the engine (qgZ, qwZ,
 * error feedback, communication_data_type). Under mpirun (2, 3 or 4
 * ranks), zinc.compression.scope "all" so that one machine compresses:
 *
 *  - close: 20 AdamW steps (lr 1e-3) of the tiny model with int4
 *    gradients (LoCo error feedback) and int8 stage-3 weights stay within
 *    2% (relative L2) of the uncompressed parameters, and within the frozen
 *    bound calibrated here; int8 gradients alone within theirs.
 *  - lossy for real: the same run is NOT bitwise the uncompressed one
 *    (a compression that did nothing would pass "close").
 *  - broken is caught: 1-bit signs without error feedback end farther than
 *    the frozen bound (it is tight enough to see a broken setting).
 *  - reproducible: a compressed run twice gives the same bits; stages 1,
 *    2 and 3 with quantized gradients (fp32, accumulation 1) give the same
 *    bits as each other.
 *  - resume: training 3 steps, saving, training 3 more equals loading the
 *    save in a fresh engine and training the 3 (the error-feedback
 *    residuals travel in the checkpoint), bit for bit.
 *  - the hybrid policy (scope inter_node, the default): one node quantizes
 *    nothing (the exact run's bits); nodes faked with ZINC_COMM_NODE_SIZE
 *    quantize what crosses them.
 *  - lossless features keep a compressed run's bits: offload (cpu, nvme),
 *    prefetch, overlap_comm, hpZ (4 ranks).
 *  - the wire (2 ranks): the comms logger's compressed rows hold the
 *    codec layout's bytes (int4, TernGrad, DGC's top-k pairs) and the
 *    plain collective's.
 *  - communication_data_type bf16 with fp32 parameters: within bf16's
 *    rounding of the uncompressed run, not equal to it.
 *  - TernGrad (zinc.compression.gradient_codec "terngrad", no error
 *    feedback): within its frozen bound of the uncompressed run and not
 *    equal to it nor to int4's; reproducible run to run and the same bits
 *    at stages 1, 2 and 3 (its draws are seeded by step, micro-step, unit
 *    and ranks, not by the stage); resumes bitwise from a checkpoint,
 *    with and without error feedback; its wire row holds 2 bits per
 *    element and one fp32 scale per block.
 */
#include <mpi.h>

#include "engine_test.h"

static char root[400];

#define QGZ "\"zero_quantized_gradients\": true,"
#define QWZ "\"zero_quantized_weights\": true,"
#define LOCO "\"zeropp_loco_param\": {\"err_beta\": 0.8, \"reset_T\": 1024},"
#define SCOPE_ALL "\"zinc\": {\"compression\": {\"scope\": \"all\"}}"
#define TERNGRAD "\"zinc\": {\"compression\": {\"scope\": \"all\", \"gradient_codec\": \"terngrad\"}}"

static et_run base_run(int stage, int steps) {
  et_run r = et_defaults();
  r.stage = stage;
  r.steps = steps;
  return r;
}

static float **train(et_run r, const char *zero_extra, const char *extra) {
  return et_train_with(r, zero_extra, extra);
}

/* The bounds, calibrated once at 2 and 4 ranks and frozen (measured
 * figures in the comments; the docs list them): a change that makes the
 * codecs or the error feedback worse shows here before it shows in a
 * model's loss. The 2% is checked beside the frozen bound. */
#define BOUND_INT4_INT8 0.005 /* measured 0.33% (2 ranks), 0.36% (4) */
#define BOUND_INT8 0.0008     /* measured 0.034% (2 ranks), 0.052% (4) */
#define BOUND_TERNGRAD 0.035  /* measured 2.31% (2 ranks), 2.70% (4): AdamW and
                                 TernGrad's variance, no error feedback */

static void test_close(void) {
  /* AdamW at lr 1e-3: every parameter moves about a third of its size in
   * 20 steps. The deviation grows with the step size (3.8% at lr 1e-2,
   * where 20 steps move each parameter by about its own size). */
  et_optim o = et_adamw_default();
  o.lr = 1e-3;
  et_run r = base_run(3, 20);
  r.optim = &o;
  float **exact = train(r, NULL, NULL);
  float **q = train(r, QGZ QWZ LOCO, SCOPE_ALL);
  double d = et_rel_l2(&r.shape, q, exact);
  if (et_rank == 0)
    printf("stage 3, int4 gradients + LoCo, int8 weights, 20 steps: relative L2 %.4f%%\n",
           100 * d);
  ET_CHECK(d <= 0.02 && d <= BOUND_INT4_INT8, "int4 gradients + int8 weights: relative L2 "
           "%.4f%% > the frozen bound %.2f%% (or 2%%)", 100 * d, 100 * BOUND_INT4_INT8);
  ET_CHECK(d > 0, "int4 gradients + int8 weights: bitwise the uncompressed run (nothing was "
           "compressed?)");
  float **q8 = train(r, QGZ, "\"zinc\": {\"compression\": {\"scope\": \"all\", "
                             "\"gradient_bits\": 8}}");
  double d8 = et_rel_l2(&r.shape, q8, exact);
  if (et_rank == 0)
    printf("stage 3, int8 gradients: relative L2 %.4f%%\n", 100 * d8);
  ET_CHECK(d8 <= BOUND_INT8 && d8 > 0, "int8 gradients: relative L2 %.4f%% not in (0, %.3f%%]",
           100 * d8, 100 * BOUND_INT8);
  /* the broken setting: signs, no error feedback */
  float **s1 = train(r, QGZ, "\"zinc\": {\"compression\": {\"scope\": \"all\", "
                             "\"gradient_bits\": 1}}");
  double ds = et_rel_l2(&r.shape, s1, exact);
  if (et_rank == 0)
    printf("stage 3, 1-bit signs without error feedback: relative L2 %.4f%%\n", 100 * ds);
  ET_CHECK(ds > BOUND_INT4_INT8, "1-bit signs without error feedback stayed within the bound "
           "(%.4f%%): the bound cannot tell a broken setting", 100 * ds);
  et_free_params(exact);
  et_free_params(q);
  et_free_params(q8);
  et_free_params(s1);
}

static void test_reproducible(void) {
  et_run r = base_run(3, 6);
  float **a = train(r, QGZ QWZ LOCO, SCOPE_ALL);
  float **b = train(r, QGZ QWZ LOCO, SCOPE_ALL);
  ET_CHECK(et_same_bits(&r.shape, a, b, "compressed run twice"), "compressed runs differ");
  et_free_params(a);
  et_free_params(b);
  /* quantized gradients: stages 1, 2, 3 the same bits */
  float **s[4] = {NULL, NULL, NULL, NULL};
  for (int stage = 1; stage <= 3; stage++) {
    r = base_run(stage, 6);
    s[stage] = train(r, QGZ LOCO, SCOPE_ALL);
  }
  for (int stage = 2; stage <= 3; stage++) {
    char what[64];
    snprintf(what, sizeof what, "quantized gradients, stage %d vs 1", stage);
    ET_CHECK(et_same_bits(&r.shape, s[stage], s[1], what), "%s differ", what);
  }
  for (int stage = 1; stage <= 3; stage++)
    et_free_params(s[stage]);
}

static void test_resume_with(int stage, const char *zero_extra, const char *extra,
                             const char *label) {
  et_run r = base_run(stage, 6);
  r.zero_extra = zero_extra;
  r.extra = extra;
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck_stage%d_%s", root, stage, label);
  float **a = et_alloc_params(&r.shape), **b = et_alloc_params(&r.shape);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 3));
  ET_OK(zinc_save_checkpoint(e, ck, "mid"));
  ET_OK(et_steps(&m, &r, 3, 6));
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, a[i]));
  et_model_free(&m);
  zinc_engine_destroy(e);
  e = et_open(&r, NULL, &m);
  ET_OK(zinc_load_checkpoint(e, ck, "mid"));
  ET_OK(et_steps(&m, &r, 3, 6));
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, b[i]));
  et_model_free(&m);
  zinc_engine_destroy(e);
  char what[96];
  snprintf(what, sizeof what, "stage %d resumed (%s)", stage, label);
  ET_CHECK(et_same_bits(&r.shape, b, a, what), "%s differs from the unbroken run", what);
  et_free_params(a);
  et_free_params(b);
}

static void test_resume(int stage) {
  test_resume_with(stage, QGZ QWZ LOCO, SCOPE_ALL, "int4 with error feedback");
}

/* The hybrid policy's default scope (inter_node): on one node nothing is
 * quantized, so qgZ + qwZ train to the exact run's bits; with the ranks
 * faked onto nodes of one (ZINC_COMM_NODE_SIZE=1) everything crosses a
 * node and is quantized; at 4 ranks on nodes of 2, pairs inside a node
 * travel raw and the result lies between. */
static int bits_equal(const tm_shape *sh, float **a, float **b) {
  for (int i = 0; i < TM_NPARAM; i++)
    if (memcmp(a[i], b[i], sizeof(float) * (size_t)tm_numel(sh, i)) != 0)
      return 0;
  return 1;
}

static void test_hybrid(void) {
  et_run r = base_run(3, 6);
  float **exact = train(r, NULL, NULL);
  float **one_node = train(r, QGZ QWZ LOCO, NULL);
  ET_CHECK(et_same_bits(&r.shape, one_node, exact, "qgZ + qwZ on one node, scope inter_node"),
           "on one node with scope inter_node something was quantized");
  setenv("ZINC_COMM_NODE_SIZE", "1", 1);
  float **nodes = train(r, QGZ QWZ LOCO, NULL);
  unsetenv("ZINC_COMM_NODE_SIZE");
  float **all = train(r, QGZ QWZ LOCO, SCOPE_ALL);
  ET_CHECK(et_same_bits(&r.shape, nodes, all, "every rank its own node = scope all"),
           "ranks on nodes of one, scope inter_node, differ from scope all");
  ET_CHECK(et_rel_l2(&r.shape, nodes, exact) > 0, "ranks on nodes of one: nothing quantized");
  if (et_world == 4) {
    setenv("ZINC_COMM_NODE_SIZE", "2", 1);
    float **two = train(r, QGZ QWZ LOCO, NULL);
    unsetenv("ZINC_COMM_NODE_SIZE");
    double d2 = et_rel_l2(&r.shape, two, exact), dall = et_rel_l2(&r.shape, all, exact);
    if (et_rank == 0)
      printf("4 ranks on 2 nodes (inside raw): relative L2 %.4f%%, all quantized %.4f%%\n",
             100 * d2, 100 * dall);
    ET_CHECK(d2 > 0 && !bits_equal(&r.shape, two, all),
             "4 ranks on 2 nodes: the same as exact or as all-quantized");
    et_free_params(two);
  }
  et_free_params(exact);
  et_free_params(one_node);
  et_free_params(nodes);
  et_free_params(all);
}

/* The wire, as the comms logger counts it, against the closed form of the
 * codec's layout (kernels/codec.h: fp32 scales then the payload, padded to
 * 16 bytes), 2 ranks: one fp32 parameter of 8192 elements, one unit, a
 * chunk of 4096 per rank. The int4 reduce-scatter sends its peer one
 * encoded chunk: 16 scales (64 bytes) + 2048 bytes; the int8 all-gather
 * 64 + 4096. The uncompressed figures: 4096 x 4 bytes each. */
static zinc_status wire_init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 0.001f * (float)(i % 97) - 0.05f;
  return ZINC_OK;
}

/* grad_codec: the gradients' codec name and its closed-form bytes for one
 * 4096-element chunk (int4: 64 + 2048; TernGrad, 2 bits: 64 + 1024). */
static void test_wire_codec(const char *compression, const char *grad_codec,
                            uint64_t grad_bytes) {
  if (et_world != 2)
    return;
  char json[1024];
  snprintf(json, sizeof json,
           "{\"train_micro_batch_size_per_gpu\": 1, \"optimizer\": {\"type\": \"AdamW\","
           " \"params\": {\"lr\": 1e-3}}, \"comms_logger\": {\"enabled\": true},"
           " \"zinc\": {\"compression\": {%s}},"
           " \"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0,"
           " \"zero_quantized_gradients\": true, \"zero_quantized_weights\": true}}",
           compression);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "layer");
  int64_t shape[2] = {2, 4096};
  zinc_param *p = zinc_param_add(e, m, "w", ZINC_F32, 2, shape);
  ET_OK(zinc_engine_build(e, wire_init, NULL));
  ET_OK(zinc_comms_reset(e));
  ET_OK(zinc_module_fetch(e, m));
  float *g = zinc_param_grad(p);
  for (int i = 0; i < 8192; i++)
    g[i] = 0.01f * (float)((i * 7) % 13 - 6) * (float)(1 + et_rank);
  ET_OK(zinc_module_grads_ready(e, m));
  ET_OK(zinc_module_release(e, m));
  ET_OK(zinc_backward_end(e));
  ET_OK(zinc_step(e, NULL));
  zinc_comms_stat rows[32];
  for (int i = 0; i < 32; i++)
    rows[i] = (zinc_comms_stat)ZINC_COMMS_STAT_INIT;
  int n = 0;
  ET_OK(zinc_comms_stats(e, rows, 32, &n));
  int seen_rs = 0, seen_ag = 0;
  for (int i = 0; i < n && i < 32; i++) {
    const zinc_comms_stat *r = &rows[i];
    uint64_t wire = r->wire_intra + r->wire_inter;
    if (r->codec && !strcmp(r->name, "reduce_scatter")) {
      seen_rs = 1;
      ET_CHECK(!strcmp(r->codec, grad_codec) && r->count == 1 && wire == grad_bytes &&
                   r->logical_bytes == 4096 * 4,
               "reduce_scatter (%s): %llu calls, %llu bytes on the wire for %llu uncompressed; "
               "want %s, 1 call, %llu bytes for %d", r->codec, (unsigned long long)r->count,
               (unsigned long long)wire, (unsigned long long)r->logical_bytes, grad_codec,
               (unsigned long long)grad_bytes, 4096 * 4);
    }
    if (r->codec && !strcmp(r->name, "all_gather")) {
      seen_ag = 1;
      ET_CHECK(!strcmp(r->codec, "int8") && wire == r->count * (64 + 4096) &&
                   r->logical_bytes == r->count * 4096 * 4,
               "all_gather (%s): %llu calls, %llu bytes on the wire for %llu uncompressed; "
               "want int8, %d and %d per call", r->codec, (unsigned long long)r->count,
               (unsigned long long)wire, (unsigned long long)r->logical_bytes, 64 + 4096,
               4096 * 4);
    }
    ET_CHECK(strcmp(r->name, "reduce_scatter") || r->codec, "a plain reduce-scatter ran beside "
             "the compressed one");
  }
  ET_CHECK(seen_rs && seen_ag, "the comms logger has no compressed reduce-scatter (%d) or "
           "all-gather (%d) row", seen_rs, seen_ag);
  zinc_engine_destroy(e);
}

/* Lossless features never change a bit, compressed or not: a compressed
 * stage-3 run (int4 gradients + LoCo, int8 weights) gives the same bits
 * with the optimizer state and the parameters offloaded (cpu, nvme), with
 * prefetch and overlap_comm off and on, and (4 ranks) with hpZ, whose
 * in-group gathers copy the dequantized values. */
static void test_lossless(void) {
  et_run r = base_run(3, 5);
  r.reuse = 0; /* every backward fetch gathers (hpZ's secondary is read) */
  float **ref = train(r, QGZ QWZ LOCO, SCOPE_ALL);
  char nvme[600];
  snprintf(nvme, sizeof nvme, "%s/nvme", root);
  for (int v = 0; v < 6; v++) {
    et_run x = r;
    const char *what = "";
    switch (v) {
    case 0: x.offload = "cpu"; what = "offload_optimizer cpu"; break;
    case 1: x.offload_param = "cpu"; x.offload = "cpu"; what = "offload_param cpu"; break;
    case 2: x.offload = "nvme"; x.offload_param = "nvme"; x.nvme_path = nvme;
            what = "offload nvme"; break;
    case 3: x.prefetch = 0; what = "prefetch off"; break;
    case 4: x.overlap = !x.overlap; what = "overlap_comm toggled"; break;
    case 5: if (et_world != 4) continue;
            x.hpz = 2; what = "hpZ 2"; break;
    }
    float **got = train(x, QGZ QWZ LOCO, SCOPE_ALL);
    char label[128];
    snprintf(label, sizeof label, "compressed, %s", what);
    ET_CHECK(et_same_bits(&r.shape, got, ref, label), "%s differs from the compressed run "
             "without it", label);
    et_free_params(got);
  }
  et_free_params(ref);
}

static void test_wire(void) {
  test_wire_codec("\"scope\": \"all\"", "int4", 64 + 2048);
  /* 16 scales + 4096 elements at 2 bits, already a multiple of 16 */
  test_wire_codec("\"scope\": \"all\", \"gradient_codec\": \"terngrad\"", "terngrad",
                  64 + 1024);
  /* DGC at density 1%: k = 3 of every block of 256, (fp32 value, uint16
   * index) pairs: 16 blocks x 3 x 6 bytes, a multiple of 16; 56.9x fewer
   * than the 16384 bytes of fp32 */
  test_wire_codec("\"scope\": \"all\", \"gradient_codec\": \"dgc\", \"dgc\": {\"density\": "
                  "0.01, \"warmup_steps\": 0}", "topk", 16 * 3 * 6);
}

/* TernGrad, unbiased, without error feedback: close to the exact run (its
 * frozen bound), lossy (not the exact bits, not int4's), reproducible and
 * stage-independent, resumable. */
static void test_terngrad(void) {
  et_optim o = et_adamw_default();
  o.lr = 1e-3;
  et_run r = base_run(3, 20);
  r.optim = &o;
  float **exact = train(r, NULL, NULL);
  float **t = train(r, QGZ, TERNGRAD);
  float **q4 = train(r, QGZ, SCOPE_ALL);
  double d = et_rel_l2(&r.shape, t, exact);
  if (et_rank == 0)
    printf("stage 3, TernGrad gradients, 20 steps: relative L2 %.4f%%\n", 100 * d);
  ET_CHECK(d > 0 && d <= BOUND_TERNGRAD, "TernGrad: relative L2 %.4f%% not in (0, %.2f%%]",
           100 * d, 100 * BOUND_TERNGRAD);
  ET_CHECK(!bits_equal(&r.shape, t, q4), "TernGrad trained to int4's bits: the codec was not "
           "switched");
  et_free_params(exact);
  et_free_params(t);
  et_free_params(q4);

  r = base_run(3, 6);
  float **a = train(r, QGZ, TERNGRAD), **b = train(r, QGZ, TERNGRAD);
  ET_CHECK(et_same_bits(&r.shape, a, b, "TernGrad run twice"), "TernGrad runs differ");
  et_free_params(a);
  et_free_params(b);
  float **s[4] = {NULL, NULL, NULL, NULL};
  for (int stage = 1; stage <= 3; stage++) {
    r = base_run(stage, 6);
    s[stage] = train(r, QGZ, TERNGRAD);
  }
  for (int stage = 2; stage <= 3; stage++) {
    char what[64];
    snprintf(what, sizeof what, "TernGrad, stage %d vs 1", stage);
    ET_CHECK(et_same_bits(&r.shape, s[stage], s[1], what), "%s differ", what);
  }
  for (int stage = 1; stage <= 3; stage++)
    et_free_params(s[stage]);
  test_resume_with(3, QGZ, TERNGRAD, "terngrad");
  test_resume_with(2, QGZ LOCO, TERNGRAD, "terngrad with error feedback");
}

static void test_comm_dtype(void) {
  et_run r = base_run(2, 6);
  float **exact = train(r, NULL, NULL);
  float **c = train(r, NULL, "\"communication_data_type\": \"bf16\"");
  double d = et_rel_l2(&r.shape, c, exact);
  if (et_rank == 0)
    printf("stage 2, communication_data_type bf16: relative L2 %.6f%%\n", 100 * d);
  ET_CHECK(d > 0 && d < 0.01, "communication_data_type bf16: relative L2 %.6f not in (0, 1%%)",
           d);
  et_free_params(exact);
  et_free_params(c);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    if (et_rank == 0)
      printf("SKIPPED: compressed communication needs at least 2 ranks\n");
    MPI_Finalize();
    return 77;
  }
  snprintf(root, sizeof root, "%s/compress_test_np%d", et_binary_dir(), et_world);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/nvme", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_close();
  test_reproducible();
  test_hybrid();
  test_wire();
  test_lossless();
  test_comm_dtype();
  test_resume(3);
  test_resume(2);
  test_terngrad();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf(bad ? "compression tests FAILED\n" : "compression tests passed at %d ranks\n",
           et_world);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
