/*
 * test_profiler.c — the memory profiler and estimator, under mpirun:
 *  - right after build the profiler's figures equal what the build plans to
 *    allocate, exactly, for stages 0-3 x offload none/cpu/nvme, and stage 3
 *    with the parameters offloaded to cpu or nvme, and with bf16 master
 *    weights and moments at stages 0-3 (the 2% formula
 *    check is test_model_state_bytes.c's, on a model large enough that
 *    alignment padding is negligible);
 *  - the estimator (tools/zinc-mem) is within 5% of the peak the profiler
 *    measures while training, device and host;
 *  - the timeline rendered to SVG is well-formed and its totals match the
 *    JSON; the all-ranks report lists every rank and min/max/mean.
 */
#include <mpi.h>
#include <sys/stat.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/memory/estimate.h"
#include "engine/engine_test.h"


/* Train 3 steps, then the measured stats and the estimator's figures for
 * the same model and configuration. */
static void train_and_estimate(zinc_engine *e, et_model *m, const et_run *r, zinc_mem_stats *st,
                               zinc_estimate *est) {
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < 3; s++) {
    et_micro_batch(m, &r->shape, r->dtype, ((int64_t)s * N + me) * r->micro, r->micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  ET_OK(zinc_memory_stats(e, st));
  zinc_est_param p[TM_NPARAM];
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  for (int i = 0; i < TM_NPARAM; i++) {
    memset(&p[i], 0, sizeof p[i]);
    snprintf(p[i].module, sizeof p[i].module, "%s", mods[et_param_module[i]]);
    snprintf(p[i].name, sizeof p[i].name, "%s", tm_names[i]);
    p[i].dtype = r->dtype;
    p[i].ndim = zinc_param_shape(m->par[i], p[i].shape);
  }
  ET_OK(zinc_estimate_model(&e->cfg, N, 0, p, TM_NPARAM, est));
}

static char nvme_dir[512];

static const char *bf16_states; /* the bf16 section's keys for test_stage, or NULL */

static void test_stage(int stage, const char *offload, const char *offload_param) {
  et_run r = et_defaults();
  r.bf16_extra = bf16_states;
  r.stage = stage;
  r.offload = offload;
  r.offload_param = offload_param;
  if (!strcmp(offload, "nvme") || (offload_param && !strcmp(offload_param, "nvme"))) {
    r.nvme_path = nvme_dir;
    r.sub_group = 700;
    r.buffer_count = 3;
  }
  r.persist = 40;
  r.prefetch = 1200;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  uint64_t plan[ZINC_LOC_N][ZINC_MEM_NCAT];
  zinc_build_sizes(e, plan);
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  for (int l = 0; l < ZINC_LOC_N; l++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      ET_CHECK(st.current[l][c] == plan[l][c], "stage %d %s: %s/%s measured %llu, planned %llu",
               stage, offload, zinc_mem_location_name(l), zinc_mem_category_name(c),
               (unsigned long long)st.current[l][c], (unsigned long long)plan[l][c]);
  /* estimator against the measured peak after training */
  zinc_estimate est;
  train_and_estimate(e, &m, &r, &st, &est);
  for (int l = 0; l < ZINC_LOC_N; l++) {
    double measured = (double)st.peak_total[l], predicted = (double)est.peak[l];
    double rel = measured > 0 ? fabs(predicted - measured) / measured : predicted;
    ET_CHECK(rel <= 0.05, "stage %d %s: %s peak measured %.0f, estimated %.0f (%.1f%%)", stage,
             offload, zinc_mem_location_name(l), measured, predicted, 100 * rel);
  }
  if (et_rank == 0)
    printf("stage %d offload %-4s/%-4s%s %d ranks: build matches its plan; device peak %llu, "
           "estimate %llu; host peak %llu, estimate %llu; nvme %llu, estimate %llu\n", stage,
           offload, offload_param ? offload_param : "none", bf16_states ? " bf16 states" : "",
           zinc_dp_size(e),
           (unsigned long long)st.peak_total[0], (unsigned long long)est.peak[0],
           (unsigned long long)st.peak_total[1], (unsigned long long)est.peak[1],
           (unsigned long long)st.peak_total[2], (unsigned long long)est.peak[2]);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

static void test_timeline_and_report(void) {
  const char *bin = et_binary_dir();
  const char *src = getenv("ZINC_TEST_SOURCE_DIR") ? getenv("ZINC_TEST_SOURCE_DIR") : ".";
  char extra[1024], json[800], svg[800], cmd[4096];
  snprintf(json, sizeof json, "%s/timeline_np%d.json", bin, et_world);
  snprintf(svg, sizeof svg, "%s/timeline_np%d.svg", bin, et_world);
  snprintf(extra, sizeof extra, "\"zinc\": {\"memory_timeline\": \"%s/timeline_np%d_r{rank}.json\"}",
           bin, et_world);
  et_run r = et_defaults();
  r.stage = 3;
  r.extra = extra;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < 4; s++) {
    et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)s * N + me) * r.micro, r.micro, NULL);
    ET_OK(zinc_step(e, NULL));
  }
  char *text = NULL;
  ET_OK(zinc_memory_report(e, 0, &text));
  ET_CHECK(text && strstr(text, "ZeRO formula"), "per-rank report: %s", text ? text : "(null)");
  free(text);
  text = NULL;
  ET_OK(zinc_memory_report_all(e, 0, &text));
  if (et_rank == 0) {
    ET_CHECK(text && strstr(text, "min") && strstr(text, "max") && strstr(text, "mean"),
             "all-ranks report lacks min/max/mean: %s", text ? text : "(null)");
    char row[16];
    snprintf(row, sizeof row, "\n  %-6d", N - 1);
    ET_CHECK(text && strstr(text, row), "all-ranks report lacks rank %d", N - 1);
  } else {
    ET_CHECK(text == NULL, "non-zero rank got a report");
  }
  free(text);
  text = NULL;
  ET_OK(zinc_memory_report_all(e, 1, &text));
  free(text);
  et_model_free(&m);
  zinc_engine_destroy(e); /* writes the timeline */
  MPI_Barrier(MPI_COMM_WORLD);
  if (et_rank == 0) {
    snprintf(json, sizeof json, "%s/timeline_np%d_r0.json", bin, et_world);
    snprintf(cmd, sizeof cmd, "%s/tools/zinc-mem/zinc-mem timeline %s %s >/dev/null && "
             "python3 %s/tests/engine/memory/check_svg.py %s %s", bin, json, svg, src, json, svg);
    ET_CHECK(system(cmd) == 0, "timeline SVG check failed: %s", cmd);
  }
}

/* stage 3 with a live limit: the estimate follows the limit too */
static void test_stage3_bounded(void) {
  et_run r = et_defaults();
  r.stage = 3;
  r.max_live = 1200;
  r.prefetch = 5000;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  zinc_estimate est;
  train_and_estimate(e, &m, &r, &st, &est);
  double rel = fabs((double)est.peak[0] - (double)st.peak_total[0]) / (double)st.peak_total[0];
  ET_CHECK(rel <= 0.05, "stage 3 bounded: device peak %llu, estimate %llu (%.1f%%)",
           (unsigned long long)st.peak_total[0], (unsigned long long)est.peak[0], 100 * rel);
  if (et_rank == 0)
    printf("stage 3, max_live 1200: device peak %llu, estimate %llu (%.1f%%)\n",
           (unsigned long long)st.peak_total[0], (unsigned long long)est.peak[0], 100 * rel);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme_profiler",
           et_binary_dir());
  mkdir(nvme_dir, 0755);
  for (int stage = 0; stage <= 3; stage++) {
    test_stage(stage, "none", NULL);
    if (stage > 0) {
      test_stage(stage, "cpu", NULL);
      test_stage(stage, "nvme", NULL);
    }
  }
  test_stage(3, "cpu", "cpu");
  test_stage(3, "nvme", "nvme");
  test_stage(3, "none", "nvme");
  /* bf16 master weights and moments: the build, the plan and the estimate */
  bf16_states = ", \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": true";
  for (int stage = 0; stage <= 3; stage++)
    test_stage(stage, "none", NULL);
  test_stage(2, "cpu", NULL);
  test_stage(3, "cpu", "cpu");
  bf16_states = NULL;
  test_stage3_bounded();
  test_timeline_and_report();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "profiler tests FAILED\n" : "profiler tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
