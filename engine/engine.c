/*
 * engine.c — engine creation and destruction, ranks and groups, the
 * device, the build's entry point, the engine's read-only accessors, the
 * phase timers and the memory timeline, and the trainer's host
 * collectives. The public entry points of the training loop are loop.c's.
 *
 * Groups: model-parallel groups are consecutive world ranks (as Megatron);
 * data-parallel groups take one rank of every model-parallel group of a
 * pipeline stage; the grid and the pipeline group are engine/pipe.c's.
 * ZeRO partitions over the data-parallel group only.
 *
 * How a failure on one rank reaches the others and stops the engine is in
 * engine/failure.c.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "device/device_choice.h"
#include "device/device_cpu.h"
#include "device/device_cuda.h"
#include "engine/activations.h"
#include "engine/build.h"
#include "engine/engine.h"
#include "engine/failure.h"
#include "engine/grads.h"
#include "engine/memory/profiler.h"
#include "engine/monitor/monitor.h"
#include "engine/pipe.h"
#include "engine/stage3/stage3.h"
#include "engine/step.h"
#include "engine/trace.h"
#include "optim/lr_schedule.h"

/* ------------------------------------------------------------ phases */

void zinc_engine_phase(zinc_engine *e, zinc_phase p) {
  double now = zinc_now();
  double dt = now - e->phase_start;
  /* every comm wait so far but the model's own (gathers, restores) */
  double waited = e->t_taken[3] + e->t_comm_wait - e->t_inner_wait;
  switch (e->phase) {
  case ZINC_PHASE_FORWARD: e->t_forward += dt; break;
  case ZINC_PHASE_BACKWARD:
    e->t_backward += dt;
    e->t_bwd_wait += waited - e->phase_waited; /* waits for the reductions */
    break;
  case ZINC_PHASE_STEP: e->t_step += dt; break;
  default: break;
  }
  e->phase = p;
  e->phase_start = now;
  e->phase_waited = waited;
  zinc_prof_phase(e->prof, (int)p);
  if (e->cfg.memory_timeline && e->built &&
      zinc_prof_sample(e->prof, e->step, e->micro_step, (int)p) != ZINC_OK && !e->timeline_warned) {
    zinc_log(ZINC_LOG_WARN, "memory timeline stopped: %s", zinc_last_error());
    e->timeline_warned = 1;
  }
}

/* zinc.memory_timeline names the file; "{rank}" in it becomes the rank,
 * and without it every rank but a lone one adds ".rank<N>" before ".json". */
static char *timeline_path(const zinc_engine *e) {
  const char *tpl = e->cfg.memory_timeline;
  char rank[16];
  snprintf(rank, sizeof rank, "%d", e->world_rank);
  size_t n = strlen(tpl) + 32;
  char *out = malloc(n);
  if (!out)
    return NULL;
  const char *at = strstr(tpl, "{rank}");
  if (at) {
    snprintf(out, n, "%.*s%s%s", (int)(at - tpl), tpl, rank, at + 6);
  } else if (e->world_size > 1) {
    const char *dot = strrchr(tpl, '.');
    if (!dot || strchr(dot, '/'))
      dot = tpl + strlen(tpl);
    snprintf(out, n, "%.*s.rank%s%s", (int)(dot - tpl), tpl, rank, dot);
  } else {
    snprintf(out, n, "%s", tpl);
  }
  return out;
}

zinc_status zinc_memory_timeline_flush(zinc_engine *e) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_timeline_flush: engine is NULL");
  if (!e->cfg.memory_timeline)
    return zinc_error(ZINC_ERR_INVALID, "zinc_memory_timeline_flush: no timeline configured; "
                      "set \"zinc\": {\"memory_timeline\": \"path.json\"} in the config");
  char *path = timeline_path(e);
  if (!path)
    return zinc_error(ZINC_ERR_NOMEM, "zinc_memory_timeline_flush: no host memory for the "
                      "timeline path (%zu bytes); free host memory and retry",
                      strlen(e->cfg.memory_timeline) + 32);
  zinc_status st = zinc_prof_timeline_write(e->prof, path, e->world_rank, e->world_size,
                                            e->cfg.stage);
  free(path);
  return st;
}

/* ------------------------------------------------------------ creation */

/* Ranks sharing this node: all-gather host names over the world. */
static zinc_status find_local_ranks(zinc_engine *e) {
  char name[64] = {0};
  if (gethostname(name, sizeof name - 1) != 0)
    snprintf(name, sizeof name, "unknown");
  char *all = calloc((size_t)e->world_size, sizeof name);
  if (!all)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory gathering host names");
  zinc_status st = zinc_comm_allgather(e->world, name, all, sizeof name, ZINC_DT_U8);
  if (st == ZINC_OK) {
    e->local_rank = 0;
    e->local_size = 0;
    for (int r = 0; r < e->world_size; r++)
      if (strncmp(all + (size_t)r * sizeof name, name, sizeof name) == 0) {
        if (r < e->world_rank)
          e->local_rank++;
        e->local_size++;
      }
  }
  free(all);
  return st;
}

static zinc_status create_comms(zinc_engine *e) {
  /* A process started on its own (no launcher, MPI not initialised, no comm
   * given) is a world of one and needs no MPI at all. */
  if (e->opt.mpi_comm || zinc_comm_mpi_wanted())
    ZINC_CHECK(zinc_comm_mpi_create(e->opt.mpi_comm, e->cfg.comm_timeout_s, &e->world));
  else
    ZINC_CHECK(zinc_comm_self_create(&e->world));
  e->world_rank = e->world->rank;
  e->world_size = e->world->size;
  zinc_log_set_rank(e->world_rank);
  /* pipeline x data x model parallel: the sizes agreed and the grid made
   * (engine/pipe.c), the groups split by its colors (engine/grid.h) */
  zinc_grid grid;
  ZINC_CHECK(zinc_pipe_grid(e, &grid));
  int mp = grid.tp;
  e->mp_size = mp;
  e->mp_rank = e->world_rank % mp;
  e->dp_size = grid.dp;
  e->dp_rank = zinc_grid_coord(&grid, e->world_rank).dp;
  if (mp == 1 && grid.pp == 1) {
    e->dp_host = e->world;
    ZINC_CHECK(zinc_comm_self_create(&e->mp_host));
  } else {
    if (mp == 1)
      ZINC_CHECK(zinc_comm_self_create(&e->mp_host));
    else
      ZINC_CHECK(e->world->ops->split(e->world, zinc_grid_mp_color(&grid, e->world_rank),
                                      e->world_rank, &e->mp_host));
    ZINC_CHECK(e->world->ops->split(e->world, zinc_grid_dp_color(&grid, e->world_rank),
                                    e->world_rank, &e->dp_host));
  }
  ZINC_CHECK(zinc_pipe_create(e)); /* the pipeline group (engine/pipe.c) */
  /* on the cpu device the same comms carry device and host buffers; the
   * cuda device replaces dp/mp with NCCL comms (create_device) */
  e->dp = e->dp_host;
  e->mp = e->mp_host;
  return find_local_ranks(e);
}

/* hpZ: groups of zero_hpz_partition_size consecutive data-parallel ranks
 * (with model parallelism, consecutive in dp_rank: the group spans
 * hpz * model_parallel_size consecutive world ranks). After the settings
 * agree, so that every rank refuses a bad size alike. */
static zinc_status create_hpz_comm(zinc_engine *e) {
  ZINC_CHECK(zinc_hpz_size(&e->cfg, e->dp_size, &e->hpz));
  if (e->hpz <= 1)
    return ZINC_OK;
  ZINC_CHECK(e->dp_host->ops->split(e->dp_host, e->dp_rank / e->hpz, e->dp_rank, &e->hpz_host));
  e->hpz_comm = e->hpz_host; /* the cuda device replaces it (create_device) */
  zinc_log0(ZINC_LOG_INFO, "hpZ: secondary parameter partition over groups of %d "
            "data-parallel ranks (%d ranks on this node)", e->hpz, e->local_size);
  if (e->local_size % (e->hpz * e->mp_size) != 0)
    zinc_log0(ZINC_LOG_WARN, "zero_optimization.zero_hpz_partition_size %d: a group is %d "
              "consecutive ranks but this node has %d, so groups span nodes and the gathers "
              "hpZ keeps in a group still cross the network; set it to the data-parallel "
              "ranks of one node", e->hpz, e->hpz * e->mp_size, e->local_size);
  return ZINC_OK;
}

/* This rank's device: chosen by device/device_choice.c's rules, then
 * created. ZINC_TEST_DEVICE_FAIL_RANK=r makes creation fail on world rank r
 * (tests: the agreement in create_device). */
static zinc_status open_device(zinc_engine *e, int *ordinal) {
  zinc_device_choice_in in = {.world_rank = e->world_rank, .local_rank = e->local_rank,
                              .local_size = e->local_size, .requested = e->opt.device};
  in.stream_device = -1;
  if (e->opt.device != ZINC_DEVICE_CPU) { /* the stream is ignored on the CPU */
    in.gpu_count = zinc_device_cuda_count();
    ZINC_CHECK(zinc_device_cuda_stream_ordinal(e->opt.cuda_stream, &in.stream_device));
  }
  ZINC_CHECK(zinc_device_choose(&in, ordinal));
  if (zinc_env_int("ZINC_TEST_DEVICE_FAIL_RANK", -1, -1, INT_MAX) == e->world_rank)
    return zinc_error(ZINC_ERR_DEVICE, "device creation failed on purpose on rank %d "
                      "(ZINC_TEST_DEVICE_FAIL_RANK)", e->world_rank);
  if (*ordinal >= 0)
    return zinc_device_cuda_create(*ordinal, e->opt.cuda_stream, &e->dev);
  /* the ranks on this node split its cores; the device binds its pool's
   * threads inside this rank's share (device/topology.c) */
  zinc_device_cpu_placement pl = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  pl.threads = e->opt.threads > 0 ? e->opt.threads : 0;
  pl.pin_memory = e->cfg.offload_optimizer.pin_memory || e->cfg.offload_param.pin_memory;
  pl.local_rank = e->local_rank;
  pl.local_size = e->local_size;
  pl.verbose = e->cfg.placement_verbose;
  return zinc_device_cpu_create_placed(&pl, &e->dev);
}

/* The GPUs of the ranks, compared once (collective over the world; every
 * rank computes the same answer from the same table):
 *  - two ranks of one node on one GPU (a per-rank CUDA_VISIBLE_DEVICES that
 *    overlaps, or explicit ordinals) would fail late in NCCL's bootstrap:
 *    refused here naming both;
 *  - the local ranks whose GPUs are near one NUMA node split its cores for
 *    their CPU offload threads (gpu_near_rank of gpu_near_size). */
static zinc_status compare_gpus(zinc_engine *e) {
  enum { HOST = 64, BUS = 32, NUMA = HOST + BUS, ROW = NUMA + 4 };
  char mine[ROW] = {0};
  if (gethostname(mine, HOST - 1) != 0)
    snprintf(mine, HOST, "unknown");
  int32_t my_numa = -1;
  if (e->dev->ops->is_gpu) {
    ZINC_CHECK(zinc_device_cuda_pci_bus_id(e->dev, mine + HOST, BUS));
    my_numa = zinc_device_cuda_numa_node(e->dev);
  }
  memcpy(mine + NUMA, &my_numa, sizeof my_numa);
  e->gpu_numa = my_numa;
  e->gpu_near_rank = 0;
  e->gpu_near_size = 1;
  char *all = calloc((size_t)e->world_size, ROW);
  char *node_ids = calloc((size_t)e->world_size, BUS);
  int *node_ranks = calloc((size_t)e->world_size, sizeof *node_ranks);
  int *local_numa = calloc((size_t)e->world_size, sizeof *local_numa);
  zinc_status st = all && node_ids && node_ranks && local_numa
                       ? zinc_comm_allgather(e->world, mine, all, ROW, ZINC_DT_U8)
                       : zinc_error(ZINC_ERR_NOMEM, "out of memory comparing the GPUs of %d "
                                    "ranks", e->world_size);
  for (int host = 0; st == ZINC_OK && host < e->world_size; host++) {
    const char *name = all + (size_t)host * ROW;
    int first_of_host = 1, n = 0, nlocal = 0, me = -1;
    for (int r = 0; r < host && first_of_host; r++)
      first_of_host = strncmp(all + (size_t)r * ROW, name, HOST) != 0;
    for (int r = host; first_of_host && r < e->world_size; r++) {
      const char *row = all + (size_t)r * ROW;
      if (strncmp(row, name, HOST) != 0)
        continue; /* another node */
      if (r == e->world_rank)
        me = nlocal;
      int32_t numa;
      memcpy(&numa, row + NUMA, sizeof numa);
      local_numa[nlocal++] = numa;
      if (!row[HOST])
        continue; /* a rank on the CPU */
      memcpy(node_ids + (size_t)n * BUS, row + HOST, BUS);
      node_ranks[n++] = r;
    }
    int a, b;
    if (first_of_host && zinc_device_choice_clash(node_ids, BUS, n, &a, &b))
      st = zinc_error(ZINC_ERR_DEVICE, "ranks %d and %d on node %s both chose the GPU at PCI "
                      "%s: give each rank its own GPU (CUDA_VISIBLE_DEVICES, zinc_options.device "
                      "or cuda_stream), or start fewer ranks per node", node_ranks[a],
                      node_ranks[b], name, node_ids + (size_t)a * BUS);
    if (me >= 0)
      zinc_device_choice_near(local_numa, nlocal, me, &e->gpu_near_rank, &e->gpu_near_size);
  }
  free(all);
  free(node_ids);
  free(node_ranks);
  free(local_numa);
  return st;
}

zinc_status zinc_engine_offload_cpu_device(zinc_engine *e, zinc_device **out) {
  zinc_device_cpu_placement pl = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  pl.threads = e->opt.threads > 0 ? e->opt.threads : 0;
  pl.local_rank = e->local_rank;
  pl.local_size = e->local_size;
  pl.verbose = e->cfg.placement_verbose;
  pl.near_numa = e->gpu_numa; /* -1 without hwloc's I/O information: the split above */
  pl.near_rank = e->gpu_near_rank;
  pl.near_size = e->gpu_near_size;
  return zinc_device_cpu_create_placed(&pl, out);
}

/* zinc_engine_agree over the world, where the lowest failing rank's own
 * message also starts "rank N: " as its peers' do: every rank returns the
 * same text. */
static zinc_status agree_same_text(zinc_engine *e, zinc_status mine) {
  char my_msg[512] = "";
  if (mine != ZINC_OK)
    snprintf(my_msg, sizeof my_msg, "%s", zinc_last_error());
  zinc_status st = zinc_engine_agree(e, e->world, mine);
  if (st != ZINC_OK && mine != ZINC_OK && e->world_size > 1 &&
      strcmp(zinc_last_error(), my_msg) == 0)
    zinc_error(st, "rank %d: %s", e->world_rank, my_msg);
  return st;
}

/* The device, agreed over the world before any NCCL comm exists: a rank
 * without its GPU (none, a bad ordinal, out of memory) fails every rank at
 * once with its message, instead of leaving the others in NCCL's bootstrap
 * until the comm timeout. */
static zinc_status create_device(zinc_engine *e) {
  int want = ZINC_DEVICE_CPU;
  ZINC_CHECK(agree_same_text(e, open_device(e, &want)));
  ZINC_CHECK(agree_same_text(e, compare_gpus(e)));
  e->dev->mem_hook = zinc_prof_account;
  e->dev->mem_hook_ctx = e->prof;
  e->stream = NULL; /* the compute stream */
  if (e->dev->ops->is_gpu) {
    /* the pools wait for the device no longer than a collective may */
    ZINC_CHECK(zinc_device_cuda_set_wait(e->dev, e->cfg.comm_timeout_s));
    /* device buffers travel over NCCL, bootstrapped over the MPI groups */
    ZINC_CHECK(zinc_comm_nccl_create(e->dp_host, want, e->opt.cuda_stream,
                                     e->cfg.comm_timeout_s, &e->dp));
    if (e->mp_size > 1)
      ZINC_CHECK(zinc_comm_nccl_create(e->mp_host, want, e->opt.cuda_stream,
                                       e->cfg.comm_timeout_s, &e->mp));
    if (e->hpz_host)
      ZINC_CHECK(zinc_comm_nccl_create(e->hpz_host, want, e->opt.cuda_stream,
                                       e->cfg.comm_timeout_s, &e->hpz_comm));
    ZINC_CHECK(zinc_pipe_create_device(e, want)); /* pipeline transfers (engine/pipe.c) */
  }
  return ZINC_OK;
}

/* Every rank must train with the same settings. They are compared once,
 * here, against rank 0's, so that a difference (another stage, bucket size
 * or learning rate) is an error on every rank naming the setting, never a
 * hang in a collective sized by it nor shards trained at different rates.
 * NVMe paths and logging may differ (zinc_settings_json_diff). */
static zinc_status agree_settings(zinc_engine *e) {
  if (e->world_size == 1)
    return ZINC_OK;
  char *mine = zinc_settings_to_json(&e->cfg), *ref = NULL;
  zinc_status st = zinc_engine_agree_rank0_text(e, e->world, mine, "settings", &ref);
  char path[256], theirs[160], ours[160];
  if (st == ZINC_OK && e->world_rank != 0 &&
      zinc_settings_json_diff(ref, mine, path, sizeof path, theirs, ours, sizeof theirs))
    st = zinc_error(ZINC_ERR_CONFIG, "%s is %s on rank 0 but %s on rank %d: every rank must "
                    "train with the same settings; load the same config file on every rank "
                    "(only NVMe paths and logging may differ)", path, theirs, ours,
                    e->world_rank);
  if (ref)
    st = zinc_engine_agree(e, e->world, st);
  free(ref);
  free(mine);
  return st;
}

/* zinc_options.hidden_size fixes the "auto" bucket sizes, hence the
 * layout: every rank must give the same. Collective over the world; every
 * rank computes the same outcome. */
static zinc_status agree_hidden_size(zinc_engine *e) {
  if (e->world_size == 1)
    return ZINC_OK;
  int64_t range[2] = {e->opt.hidden_size, -e->opt.hidden_size}; /* max, -min */
  ZINC_CHECK(zinc_comm_allreduce(e->world, range, range, 2, ZINC_DT_I64, ZINC_OP_MAX));
  if (range[0] != -range[1])
    return zinc_error(ZINC_ERR_INVALID, "zinc_options.hidden_size differs across ranks (from "
                      "%lld to %lld; %lld on rank %d): give every rank the same hidden size",
                      (long long)-range[1], (long long)range[0],
                      (long long)e->opt.hidden_size, e->world_rank);
  return ZINC_OK;
}

zinc_status zinc_engine_create(const zinc_config *cfg, const zinc_options *opt,
                               zinc_engine **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_create: out is NULL");
  *out = NULL;
  if (!cfg)
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_create: config is NULL; load one with "
                      "zinc_config_load or zinc_config_parse");
  zinc_engine *e = calloc(1, sizeof *e);
  if (!e)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory creating the engine");
  zinc_status st;
  zinc_options defaults = ZINC_OPTIONS_INIT;
  e->opt = defaults;
  if (opt && (st = zinc_abi_read(&e->opt, sizeof e->opt, opt, "zinc_options",
                                 "ZINC_OPTIONS_INIT")) != ZINC_OK) {
    free(e);
    return st;
  }
  e->lr_override = -1.0; /* the config's scheduler */
  ZINC_CHECK_GOTO(zinc_settings_copy(&e->cfg, &cfg->s), st, fail);
  ZINC_CHECK_GOTO(zinc_prof_create(&e->prof), st, fail);
  ZINC_CHECK_GOTO(create_comms(e), st, fail);
  /* the first local checks after the comm exists: every rank learns them */
  st = zinc_settings_resolve_batch(&e->cfg, e->dp_size);
  if (st == ZINC_OK) /* "auto" the trainer did not fill: defaults or an error */
    st = zinc_settings_resolve_auto(&e->cfg, cfg->file_mask, cfg->filled_mask);
  if (st == ZINC_OK) /* what DeepSpeed checks when it constructs the schedule */
    st = zinc_settings_check_scheduler(&e->cfg);
  if (st == ZINC_OK && e->opt.threads < 0)
    st = zinc_error(ZINC_ERR_INVALID, "zinc_options.threads is %d: give a thread count >= 1, "
                    "or 0 for this rank's share of its cores", e->opt.threads);
  if (st == ZINC_OK && e->opt.hidden_size < 0)
    st = zinc_error(ZINC_ERR_INVALID, "zinc_options.hidden_size is %lld: give the model's "
                    "hidden size (d_model), or 0 when the config writes no bucket size "
                    "\"auto\"", (long long)e->opt.hidden_size);
  if (st == ZINC_OK) /* the config's pipeline stages against the options (engine/pipe.c) */
    st = zinc_pipe_check_config(e);
  if (st == ZINC_OK) /* rank 0's directories: a failure there stops every rank */
    st = zinc_monitor_open(e);
  if (st == ZINC_OK) /* counted from the first collective on (the agreement below) */
    st = zinc_comms_logger_attach(e);
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->world, st), st, fail);
  ZINC_CHECK_GOTO(agree_settings(e), st, fail);
  ZINC_CHECK_GOTO(agree_hidden_size(e), st, fail);
  ZINC_CHECK_GOTO(create_hpz_comm(e), st, fail);
  ZINC_CHECK_GOTO(create_device(e), st, fail);
  ZINC_CHECK_GOTO(zinc_comms_logger_attach(e), st, fail); /* the device's comms (nccl) */
  e->phase_start = zinc_now();
  zinc_log0(ZINC_LOG_INFO, "engine: %d ranks (pipeline %d x data-parallel %d x "
            "model-parallel %d), %d on this node, device %s, comm %s, stage %d",
            e->world_size, zinc_pp_size(e), e->dp_size, e->mp_size, e->local_size,
            e->dev->ops->name,
            e->dp->ops->name, e->cfg.stage);
  *out = e;
  return ZINC_OK;
fail:
  zinc_engine_destroy(e);
  return st;
}

void zinc_engine_destroy(zinc_engine *e) {
  if (!e)
    return;
  /* after a comm failure nothing below waits for a peer (failure.c) */
  if (e->failed == ZINC_ERR_COMM)
    zinc_comm_abort(e->world, e->failed_msg);
  if (e->cfg.memory_timeline && e->built && zinc_memory_timeline_flush(e) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "%s", zinc_last_error());
  if (e->dev)
    zinc_activation_store_destroy(e);
  zinc_monitor_close(e);
  zinc_comms_logger_report(e);
  zinc_memory_trainer_free(e);
  zinc_build_free(e);
  zinc_trace_free(e);
  zinc_registry_free(e);
  if (e->dp != e->dp_host)
    zinc_comm_destroy(e->dp);
  if (e->mp != e->mp_host)
    zinc_comm_destroy(e->mp);
  if (e->hpz_comm != e->hpz_host)
    zinc_comm_destroy(e->hpz_comm);
  zinc_pipe_destroy(e); /* its transfers and comms (engine/pipe.c) */
  zinc_device_destroy(e->dev);
  if (e->dp_host != e->world)
    zinc_comm_destroy(e->dp_host);
  zinc_comm_destroy(e->mp_host);
  zinc_comm_destroy(e->hpz_host);
  zinc_comm_destroy(e->world);
  zinc_comms_logger_free(e); /* after the comms: their workers count to the end */
  zinc_prof_destroy(e->prof);
  zinc_settings_free(&e->cfg);
  free(e->client_state);
  free(e);
}

/* ---------------------------------------------------------- accessors */

int zinc_rank(const zinc_engine *e) { return e ? e->world_rank : -1; }
int zinc_world_size(const zinc_engine *e) { return e ? e->world_size : 0; }
int zinc_dp_rank(const zinc_engine *e) { return e ? e->dp_rank : -1; }
int zinc_dp_size(const zinc_engine *e) { return e ? e->dp_size : 0; }
int zinc_mp_rank(const zinc_engine *e) { return e ? e->mp_rank : -1; }
int zinc_mp_size(const zinc_engine *e) { return e ? e->mp_size : 0; }
int zinc_engine_on_gpu(const zinc_engine *e) { return e && e->dev ? e->dev->ops->is_gpu : 0; }
float zinc_loss_scale(const zinc_engine *e) {
  return e ? zinc_loss_scaler_scale(&e->scaler) : 1.0f;
}
float zinc_lr(const zinc_engine *e) { return e ? (float)zinc_lr_at(&e->cfg, e->step) : 0.0f; }
int zinc_micro_batch_size(const zinc_engine *e) {
  return e ? (int)e->cfg.train_micro_batch_size_per_gpu : 0;
}
int zinc_gradient_accumulation_steps(const zinc_engine *e) {
  return e ? (int)e->cfg.gradient_accumulation_steps : 0;
}
int64_t zinc_train_batch_size(const zinc_engine *e) { return e ? e->cfg.train_batch_size : 0; }
int zinc_steps_per_print(const zinc_engine *e) {
  if (!e)
    return 0;
  int64_t n = e->cfg.steps_per_print;
  return n == 0 || n > INT_MAX ? INT_MAX : (int)n; /* 0 in the file: never */
}
int zinc_wall_clock_breakdown(const zinc_engine *e) {
  return e ? e->cfg.wall_clock_breakdown : 0;
}
zinc_status zinc_engine_config_to_json(const zinc_engine *e, char **json_out) {
  if (!e || !json_out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_config_to_json: %s is NULL",
                      e ? "json_out" : "engine");
  *json_out = zinc_settings_to_json(&e->cfg);
  if (!*json_out)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing the engine's settings as JSON");
  return ZINC_OK;
}

/* ---------------------------------------------------------- the build */

zinc_status zinc_engine_build(zinc_engine *e, zinc_init_fn init, void *ctx) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_build: engine is NULL");
  if (e->built)
    return zinc_error(ZINC_ERR_INVALID, "zinc_engine_build: the engine is already built");
  int any16[3] = {0, 0, 0};
  for (int i = 0; i < e->nparams; i++)
    any16[e->params[i]->dtype] = 1;
  /* collective: the same model on every rank; local checks and the layout,
   * then every rank learns the first failure before any buffer is
   * allocated (engine/build.c) */
  zinc_status st = zinc_registry_agree(e);
  if (st != ZINC_OK)
    return st;
  st = zinc_settings_resolve_model(&e->cfg, e->opt.hidden_size, any16[ZINC_F16],
                                               any16[ZINC_BF16]);
  if (st == ZINC_OK && e->cfg.fp16_enabled && any16[ZINC_BF16])
    st = zinc_error(ZINC_ERR_CONFIG, "fp16.enabled is true but parameters are registered "
                    "as bf16; register them as ZINC_F16 or enable bf16 instead");
  if (st == ZINC_OK && e->cfg.bf16_enabled && any16[ZINC_F16])
    st = zinc_error(ZINC_ERR_CONFIG, "bf16.enabled is true but parameters are registered "
                    "as f16; register them as ZINC_BF16 or enable fp16 instead");
  if (st == ZINC_OK) {
    zinc_opt_from_config(e);
    /* DeepSpeed's OneCycle cycles betas[0]; an optimizer without betas
     * keeps its momentum, with a warning (as DeepSpeed) */
    if (e->cfg.scheduler == ZINC_SCHED_ONE_CYCLE && e->cfg.cycle_momentum &&
        (e->optim.kind == ZINC_OPT_SGD || e->optim.kind == ZINC_OPT_ADAGRAD))
      zinc_log0(ZINC_LOG_WARN, "scheduler OneCycle: cycle_momentum has no effect with "
                "optimizer.type \"%s\" (it has no betas), as in DeepSpeed",
                zinc_opt_kind_str(e->optim.kind));
    if (e->optim.kind == ZINC_OPT_LAMB && e->mp_size > 1)
      st = zinc_error(ZINC_ERR_UNSUPPORTED, "optimizer.type \"Lamb\" with model parallelism "
                      "(model_parallel_size %d): Lamb's trust ratio needs each parameter's "
                      "norm over its model-parallel shards, which zinc does not compute yet; "
                      "use Adam or Lion, or model_parallel_size 1", e->mp_size);
  }
  if (st == ZINC_OK) {
    zinc_loss_scaler_init(&e->scaler, &e->cfg);
    st = zinc_layout_build(e);
  }
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->world, st), st, fail);
  ZINC_CHECK_GOTO(zinc_build_buffers(e, init, ctx), st, fail);
  ZINC_CHECK_GOTO(zinc_engine_agree(e, e->world, zinc_grads_init(e)), st, fail);
  e->built = 1;
  e->recording = 1;
  zinc_log0(ZINC_LOG_INFO, "engine built: %d modules, %d parameters, %lld elements "
            "(%d units of at most %lld, shard %lld elements per rank)", e->nmodules,
            e->nparams, (long long)(e->psi[0] + e->psi[1] + e->psi[2]), e->nunits,
            (long long)e->unit_max, (long long)e->shard_numel);
  return ZINC_OK;
fail:
  zinc_grads_free(e);
  zinc_build_free(e);
  return st;
}

/* ------------------------------------------------ trainer collectives */

/* The communicator of a scope; NULL for an unknown one. */
static zinc_comm *scope_comm(zinc_engine *e, zinc_scope scope) {
  switch (scope) {
  case ZINC_SCOPE_WORLD: return e->world;
  case ZINC_SCOPE_DP: return e->dp_host;
  case ZINC_SCOPE_MP: return e->mp_host;
  case ZINC_SCOPE_PP: return zinc_pipe_host_comm(e); /* engine/pipe.c */
  }
  return NULL;
}

zinc_status zinc_allreduce_host_scope(zinc_engine *e, zinc_scope scope, double *values, int n,
                                      zinc_reduce_op op) {
  if (!e || (!values && n > 0) || n < 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_allreduce_host: NULL engine/values or n < 0");
  if ((unsigned)op > ZINC_REDUCE_MEAN)
    return zinc_error(ZINC_ERR_INVALID, "zinc_allreduce_host: unknown op %d", (int)op);
  zinc_comm *c = scope_comm(e, scope);
  if (!c)
    return zinc_error(ZINC_ERR_INVALID, "zinc_allreduce_host: unknown scope %d", (int)scope);
  zinc_comm_op cop = op == ZINC_REDUCE_MAX ? ZINC_OP_MAX :
                     op == ZINC_REDUCE_MIN ? ZINC_OP_MIN : ZINC_OP_SUM;
  ZINC_CHECK(zinc_comm_allreduce(c, values, values, (size_t)n, ZINC_DT_F64, cop));
  if (op == ZINC_REDUCE_MEAN)
    for (int i = 0; i < n; i++)
      values[i] /= c->size;
  return ZINC_OK;
}

zinc_status zinc_allgather_host_scope(zinc_engine *e, zinc_scope scope, const double *values,
                                      int n, double *out) {
  if (!e || ((!values || !out) && n > 0) || n < 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_allgather_host: NULL argument or n < 0");
  zinc_comm *c = scope_comm(e, scope);
  if (!c)
    return zinc_error(ZINC_ERR_INVALID, "zinc_allgather_host: unknown scope %d", (int)scope);
  return zinc_comm_allgather(c, values, out, (size_t)n, ZINC_DT_F64);
}

zinc_status zinc_allreduce_host(zinc_engine *e, double *values, int n, zinc_reduce_op op) {
  return zinc_allreduce_host_scope(e, ZINC_SCOPE_DP, values, n, op);
}

zinc_status zinc_allgather_host(zinc_engine *e, const double *values, int n, double *out) {
  return zinc_allgather_host_scope(e, ZINC_SCOPE_WORLD, values, n, out);
}
