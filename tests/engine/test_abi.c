/*
 * test_abi.c — caller-allocated structs carry their size (zinc.h,
 * "Conventions"): what a trainer compiled against an older or a newer
 * header gets.
 *  - zinc_options of an older size: the fields beyond it are not read (here
 *    they hold bytes that would be refused: threads and hidden_size < 0);
 *  - output structs (zinc_step_info, zinc_mem_stats, zinc_timers,
 *    zinc_activation_stats) of an older size: the fields within it are
 *    written, the bytes beyond it are left as they were; of a newer size:
 *    the bytes past this library's sizeof are left as they were;
 *  - a size of 0 or one past ZINC_STRUCT_SIZE_MAX (an uninitialised struct)
 *    is ZINC_ERR_INVALID naming the struct and its initialiser, and
 *    zinc_step then counts nothing.
 */
#include <mpi.h>
#include <stddef.h>

#include "engine_test.h"

#define CANARY 0xA5

/* A struct of `type` followed by 32 spare bytes, every byte CANARY, with
 * its size set to `size`. */
#define SIZED(type, name, size_)                                               \
  union {                                                                      \
    type s;                                                                    \
    unsigned char raw[sizeof(type) + 32];                                      \
  } name;                                                                      \
  memset(&name, CANARY, sizeof name);                                          \
  name.s.size = (size_)

static int untouched_from(const unsigned char *raw, size_t from, size_t to) {
  for (size_t i = from; i < to; i++)
    if (raw[i] != CANARY)
      return 0;
  return 1;
}

static void expect_invalid(zinc_status st, const char *type, const char *init) {
  ET_CHECK(st == ZINC_ERR_INVALID, "%s with a bad size: %s, expected ZINC_ERR_INVALID", type,
           zinc_status_name(st));
  ET_CHECK(strstr(zinc_last_error(), type) && strstr(zinc_last_error(), init),
           "the message names neither %s nor %s: %s", type, init, zinc_last_error());
}

static zinc_engine *create_with(const zinc_options *opt, zinc_status *st) {
  zinc_config *cfg;
  ET_OK(zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 3, \"optimizer\": {\"type\": "
                          "\"AdamW\", \"params\": {\"lr\": 0.01}}, \"zero_optimization\": "
                          "{\"stage\": 2}}", &cfg));
  zinc_engine *e = NULL;
  *st = zinc_engine_create(cfg, opt, &e);
  zinc_config_free(cfg);
  return e;
}

static void options_sizes(void) {
  zinc_status st;
  /* a 0.0 trainer: device, mpi_comm and model_parallel_size only */
  SIZED(zinc_options, old, offsetof(zinc_options, cuda_stream));
  old.s.device = ZINC_DEVICE_CPU;
  old.s.mpi_comm = NULL;
  old.s.model_parallel_size = 1;
  zinc_engine *e = create_with(&old.s, &st);
  ET_CHECK(st == ZINC_OK, "zinc_options of an older size: %s: %s (fields beyond its size were "
           "read)", zinc_status_name(st), zinc_last_error());
  ET_CHECK(!e || !zinc_engine_on_gpu(e), "the older struct's device was not used");
  zinc_engine_destroy(e);

  SIZED(zinc_options, zero, 0);
  e = create_with(&zero.s, &st);
  expect_invalid(st, "zinc_options", "ZINC_OPTIONS_INIT");
  ET_CHECK(e == NULL, "an engine came back from a refused create");

  SIZED(zinc_options, huge, (size_t)ZINC_STRUCT_SIZE_MAX + 1);
  e = create_with(&huge.s, &st);
  expect_invalid(st, "zinc_options", "ZINC_OPTIONS_INIT");
}

static void output_sizes(void) {
  et_run r = et_defaults();
  r.stage = 2;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);

  /* zinc_step_info: an uninitialised size is refused and counts nothing */
  et_micro_batch(&m, &r.shape, r.dtype, (int64_t)me * r.micro, r.micro, NULL);
  SIZED(zinc_step_info, bad, 0);
  expect_invalid(zinc_step(e, &bad.s), "zinc_step_info", "ZINC_STEP_INFO_INIT");
  ET_CHECK(zinc_micro_step_count(e) == 0 && zinc_step_count(e) == 0,
           "a refused zinc_step counted: micro %lld, steps %lld",
           (long long)zinc_micro_step_count(e), (long long)zinc_step_count(e));
  /* an older size: step, boundary and skipped only */
  size_t old_size = offsetof(zinc_step_info, grad_norm);
  SIZED(zinc_step_info, old, old_size);
  ET_OK(zinc_step(e, &old.s));
  ET_CHECK(old.s.size == old_size, "the caller's size changed to %zu", old.s.size);
  ET_CHECK(old.s.step == 1 && old.s.boundary == 1 && old.s.skipped == 0,
           "older zinc_step_info: step %lld boundary %d skipped %d, expected 1 1 0",
           (long long)old.s.step, old.s.boundary, old.s.skipped);
  ET_CHECK(untouched_from(old.raw, old_size, sizeof old.raw),
           "zinc_step wrote past the caller's zinc_step_info size");
  /* a newer size: the whole struct written, nothing past this sizeof */
  et_micro_batch(&m, &r.shape, r.dtype, ((int64_t)N + me) * r.micro, r.micro, NULL);
  SIZED(zinc_step_info, newer, sizeof(zinc_step_info) + 16);
  ET_OK(zinc_step(e, &newer.s));
  ET_CHECK(newer.s.step == 2 && newer.s.micro_step == 2 && newer.s.lr == 0.01f &&
           newer.s.grad_norm > 0,
           "newer zinc_step_info: step %lld micro %lld lr %g norm %g", (long long)newer.s.step,
           (long long)newer.s.micro_step, newer.s.lr, newer.s.grad_norm);
  ET_CHECK(untouched_from(newer.raw, sizeof(zinc_step_info), sizeof newer.raw),
           "zinc_step wrote past its own sizeof(zinc_step_info)");

  /* zinc_mem_stats as 0.1.0's first fields */
  size_t mem_old = offsetof(zinc_mem_stats, phase_peak);
  SIZED(zinc_mem_stats, ms, mem_old);
  ET_OK(zinc_memory_stats(e, &ms.s));
  uint64_t params = 0;
  for (int l = 0; l < ZINC_LOC_N; l++)
    params += ms.s.current[l][ZINC_MEM_PARAMS];
  ET_CHECK(params > 0 && ms.s.theoretical_model_states > 0,
           "older zinc_mem_stats: params %llu, formula %llu", (unsigned long long)params,
           (unsigned long long)ms.s.theoretical_model_states);
  ET_CHECK(untouched_from(ms.raw, mem_old, sizeof ms.raw),
           "zinc_memory_stats wrote past the caller's size");
  SIZED(zinc_mem_stats, ms_bad, 3);
  expect_invalid(zinc_memory_stats(e, &ms_bad.s), "zinc_mem_stats", "ZINC_MEM_STATS_INIT");

  /* zinc_timers with forward and backward only */
  size_t t_old = offsetof(zinc_timers, step);
  SIZED(zinc_timers, t, t_old);
  ET_OK(zinc_timers_take(e, &t.s));
  ET_CHECK(t.s.forward >= 0 && t.s.forward < 1e6 && t.s.backward > 0 && t.s.backward < 1e6,
           "older zinc_timers: forward %g backward %g", t.s.forward, t.s.backward);
  ET_CHECK(untouched_from(t.raw, t_old, sizeof t.raw), "zinc_timers_take wrote past the size");

  SIZED(zinc_activation_stats, as_bad, 0);
  expect_invalid(zinc_activation_stats_get(e, &as_bad.s), "zinc_activation_stats",
                 "ZINC_ACTIVATION_STATS_INIT");
  zinc_activation_stats as = ZINC_ACTIVATION_STATS_INIT;
  ET_OK(zinc_activation_stats_get(e, &as));
  ET_CHECK(as.size == sizeof as && as.saves == 0, "activation stats: size %zu saves %lld",
           as.size, (long long)as.saves);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  options_sizes();
  output_sizes();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "abi tests FAILED\n" : "abi tests passed at %d ranks\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
