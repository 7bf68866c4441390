/*
 * comms_logger.c — DeepSpeed's comms_logger on the engine: one set of
 * counters (comm/comm_log.h) hung on every comm the engine holds, the
 * summary printed by world rank 0 at destroy (to stdout, as DeepSpeed
 * prints it, in one block after what the trainer printed), and the
 * public calls that read, print and reset the counters.
 *
 * What DeepSpeed's keys mean here: enabled turns it on; prof_all counts
 * every op, and with it false only the ops prof_ops names are counted;
 * verbose logs each op as it completes (rank 0); debug, which in DeepSpeed
 * appends the Python caller's name, splits the rows by the engine's group
 * that issued the op (data_parallel, model_parallel, world): a C library
 * has no caller names to give, and the group is what tells the engine's
 * traffic apart.
 *
 * Counting starts with the engine's first collective (the agreement on
 * the creation checks): the host comms get the counters as soon as they
 * exist, the device's comms (nccl) when the device is made, so a trainer
 * sees the traffic of creating, building and training. Rows are per
 * rank; the summary is rank 0's.
 */
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/monitor/monitor.h"

static void hang(zinc_engine *e, zinc_comm *c, const char *group) {
  if (c && !c->log) { /* a comm serving two roles keeps its first label */
    c->log = e->comms_log;
    c->log_group = group;
  }
}

zinc_status zinc_comms_logger_attach(zinc_engine *e) {
  const zinc_comms_logger_settings *cl = &e->cfg.comms_logger;
  if (!cl->enabled)
    return ZINC_OK;
  zinc_comm_log_opts opts = {
      .verbose = cl->verbose,
      .debug = cl->debug,
      .kinds = cl->prof_all ? (1u << ZINC_COMMS_NOPS) - 1 : cl->prof_ops,
  };
  if (!e->comms_log)
    ZINC_CHECK(zinc_comm_log_create(&opts, &e->comms_log));
  /* with model_parallel_size 1 the data-parallel group is the world */
  hang(e, e->dp, "data_parallel");
  hang(e, e->dp_host, "data_parallel");
  hang(e, e->mp, "model_parallel");
  hang(e, e->mp_host, "model_parallel");
  hang(e, e->world, "world");
  return ZINC_OK;
}

static zinc_status print_summary(zinc_engine *e) {
  if (e->world_rank != 0)
    return ZINC_OK;
  char *text = NULL;
  ZINC_CHECK(zinc_comm_log_summary(e->comms_log, &text));
  zinc_log_report_text(text); /* stdout, one block after the trainer's lines */
  free(text);
  return ZINC_OK;
}

void zinc_comms_logger_report(zinc_engine *e) {
  if (e->comms_log && print_summary(e) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "comms_logger: %s", zinc_last_error());
}

void zinc_comms_logger_free(zinc_engine *e) {
  zinc_comm_log_destroy(e->comms_log);
  e->comms_log = NULL;
}

static zinc_status need_logger(const zinc_engine *e, const char *call) {
  if (!e)
    return zinc_error(ZINC_ERR_INVALID, "%s: NULL engine", call);
  if (!e->comms_log)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "%s: the comms logger is off; enable it with "
                      "\"comms_logger\": {\"enabled\": true} in the config", call);
  return ZINC_OK;
}

zinc_status zinc_comms_stats(const zinc_engine *e, zinc_comms_stat *out, int cap, int *n) {
  ZINC_CHECK(need_logger(e, "zinc_comms_stats"));
  if (!n || cap < 0 || (cap > 0 && !out))
    return zinc_error(ZINC_ERR_INVALID, "zinc_comms_stats: %s", !n ? "n is NULL"
                      : cap < 0 ? "cap is negative" : "out is NULL with cap > 0");
  return zinc_comm_log_stats(e->comms_log, out, cap, n);
}

zinc_status zinc_comms_log_summary(zinc_engine *e) {
  ZINC_CHECK(need_logger(e, "zinc_comms_log_summary"));
  return print_summary(e);
}

zinc_status zinc_comms_reset(zinc_engine *e) {
  ZINC_CHECK(need_logger(e, "zinc_comms_reset"));
  zinc_comm_log_reset(e->comms_log);
  return ZINC_OK;
}
