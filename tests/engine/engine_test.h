/*
 * engine_test.h — helpers for the multi-rank engine tests: running the tiny
 * model through zinc with a config built from a few knobs, the reference
 * trainer without zinc, and comparisons of whole models that print the
 * first mismatches and the largest difference (common/compare.h).
 *
 * Tests are plain programs run under mpirun (every rank checks; any failing
 * rank exits non-zero, which fails the test).
 */
#ifndef ENGINE_TEST_H
#define ENGINE_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/compare.h"
#include "tiny_model.h"
#include "zinc.h"

static int et_rank = 0;
static int et_world = 1;
static int et_failures = 0;

#define ET_CHECK(cond, ...)                                                    \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", et_rank, __FILE__, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      et_failures++;                                                           \
    }                                                                          \
  } while (0)

#define ET_OK(expr)                                                            \
  do {                                                                         \
    zinc_status et_st_ = (expr);                                               \
    if (et_st_ != ZINC_OK) {                                                   \
      fprintf(stderr, "[rank %d] FAIL %s:%d: %s -> %s: %s\n", et_rank,         \
              __FILE__, __LINE__, #expr, zinc_status_name(et_st_),             \
              zinc_last_error());                                              \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* An optimizer section (optimizer.type and the params that type reads),
 * for the config and for et_reference. */
typedef struct {
  const char *type;        /* "Adam" "AdamW" "Lamb" "Lion" "Adagrad" "SGD" */
  double lr, beta1, beta2, eps, weight_decay;
  int adam_w_mode;         /* Adam: 1 decoupled decay (AdamW always is) */
  double momentum, dampening; /* SGD */
  int nesterov;            /* SGD */
  double min_coeff, max_coeff; /* Lamb */
  double max_grad_norm;    /* Lamb: FusedLamb's own clipping (0: not written) */
} et_optim;

typedef struct {
  int stage;
  int gas;                 /* gradient_accumulation_steps */
  int micro;               /* micro-batch per rank */
  int steps;
  zinc_dtype dtype;
  int64_t reduce_bucket;   /* elements */
  int overlap;
  const char *offload;     /* offload_optimizer: "none" | "cpu" | "nvme" */
  const char *offload_param; /* stage 3: "none" | "cpu" | "nvme" (NULL: none) */
  const char *nvme_path;
  double clip;
  int64_t max_live;        /* stage3_max_live_parameters */
  int64_t prefetch;        /* stage3_prefetch_bucket_size */
  int64_t persist;         /* stage3_param_persistence_threshold */
  int fp16_window;         /* loss_scale_window */
  const char *extra;       /* extra top-level JSON members, or NULL */
  int64_t sub_group;       /* sub_group_size (0: default) */
  int sub_group_zero;      /* write sub_group_size 0 (DeepSpeed accepts it) */
  int64_t allgather_bucket; /* allgather_bucket_size (et_defaults: 700) */
  int64_t reuse;           /* stage3_max_reuse_distance (et_defaults: 1000) */
  int buffer_count;        /* offload_optimizer.buffer_count (0: default) */
  int param_buffer_count;  /* offload_param.buffer_count (0: default) */
  int64_t param_buffer_size; /* offload_param.buffer_size (0: default) */
  int hpz;                 /* zero_hpz_partition_size (0: not written) */
  int model_parallel;      /* zinc_options.model_parallel_size (0: 1) */
  const char *zero_extra;  /* extra zero_optimization members ("\"k\": v,"
                              each with its comma), or NULL */
  const char *offload_extra; /* extra offload_optimizer members (", \"k\": v"
                              each after a comma), or NULL */
  const char *param_extra; /* the same for offload_param, or NULL */
  const char *bf16_extra;  /* extra bf16 members (", \"k\": v" each after
                              a comma), or NULL */
  tm_shape shape;
  const et_optim *optim;   /* NULL: AdamW, lr 0.01, betas (0.9, 0.999), eps 1e-8,
                              weight_decay 0.01 (et_adamw_default) */
} et_run;

static inline et_optim et_adamw_default(void) {
  et_optim o = {.type = "AdamW", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                .weight_decay = 0.01, .adam_w_mode = 1};
  return o;
}

static inline int et_optim_is(const et_optim *o, const char *type) {
  return !strcmp(o->type, type);
}

static inline int et_optim_is_adam(const et_optim *o) {
  return et_optim_is(o, "Adam") || et_optim_is(o, "AdamW");
}

/* The "optimizer" member of the config for o: the type and the params its
 * type reads, with DeepSpeed's names. */
static inline void et_optim_json(const et_optim *o, char *buf, size_t size) {
  char params[512];
  if (et_optim_is_adam(o))
    snprintf(params, sizeof params, "\"lr\": %.17g, \"betas\": [%.17g, %.17g], \"eps\": %.17g, "
             "\"weight_decay\": %.17g%s", o->lr, o->beta1, o->beta2, o->eps, o->weight_decay,
             et_optim_is(o, "AdamW") ? "" : o->adam_w_mode ? ", \"adam_w_mode\": true"
                                                           : ", \"adam_w_mode\": false");
  else if (et_optim_is(o, "Lamb")) {
    char clip[64] = "";
    if (o->max_grad_norm > 0)
      snprintf(clip, sizeof clip, ", \"max_grad_norm\": %.17g", o->max_grad_norm);
    snprintf(params, sizeof params, "\"lr\": %.17g, \"betas\": [%.17g, %.17g], \"eps\": %.17g, "
             "\"weight_decay\": %.17g, \"min_coeff\": %.17g, \"max_coeff\": %.17g%s", o->lr,
             o->beta1, o->beta2, o->eps, o->weight_decay, o->min_coeff, o->max_coeff, clip);
  }
  else if (et_optim_is(o, "Lion"))
    snprintf(params, sizeof params, "\"lr\": %.17g, \"betas\": [%.17g, %.17g], "
             "\"weight_decay\": %.17g", o->lr, o->beta1, o->beta2, o->weight_decay);
  else if (et_optim_is(o, "Adagrad"))
    snprintf(params, sizeof params, "\"lr\": %.17g, \"eps\": %.17g, \"weight_decay\": %.17g",
             o->lr, o->eps, o->weight_decay);
  else /* SGD */
    snprintf(params, sizeof params, "\"lr\": %.17g, \"momentum\": %.17g, \"dampening\": %.17g, "
             "\"weight_decay\": %.17g, \"nesterov\": %s", o->lr, o->momentum, o->dampening,
             o->weight_decay, o->nesterov ? "true" : "false");
  snprintf(buf, size, "{\"type\": \"%s\", \"params\": {%s}}", o->type, params);
}

/* Where tests write their files (ctest sets ZINC_TEST_BINARY_DIR). */
static inline const char *et_binary_dir(void) {
  const char *d = getenv("ZINC_TEST_BINARY_DIR");
  return d ? d : "/tmp";
}

static inline et_run et_defaults(void) {
  et_run r = {.stage = 0, .gas = 1, .micro = 3, .steps = 20, .dtype = ZINC_F32,
              .reduce_bucket = 1000, .overlap = 0, .offload = "none", .clip = 1.0,
              .max_live = 1000000000, .prefetch = 1500, .persist = 100, .fp16_window = 1000,
              .allgather_bucket = 700, .reuse = 1000,
              .shape = {{TM_D0, TM_D1, TM_D2, TM_D3}, ZINC_F32}};
  return r;
}

static inline char *et_config_json(const et_run *r) {
  char param_offload[1024] = "";
  if (r->stage == 3 && r->offload_param)
    snprintf(param_offload, sizeof param_offload,
             ",\n    \"offload_param\": {\"device\": \"%s\"%s%s%s, \"buffer_count\": %d, "
             "\"buffer_size\": %lld%s}", r->offload_param,
             r->nvme_path ? ", \"nvme_path\": \"" : "", r->nvme_path ? r->nvme_path : "",
             r->nvme_path ? "\"" : "", r->param_buffer_count > 0 ? r->param_buffer_count : 5,
             (long long)(r->param_buffer_size > 0 ? r->param_buffer_size : 100000000),
             r->param_extra ? r->param_extra : "");
  int opt_nvme = r->nvme_path && r->stage > 0 && !strcmp(r->offload, "nvme");
  char sub_group[64] = "", buffers[256] = "";
  if (r->sub_group > 0 || r->sub_group_zero)
    snprintf(sub_group, sizeof sub_group, " \"sub_group_size\": %lld,",
             (long long)(r->sub_group_zero ? 0 : r->sub_group));
  if (r->hpz > 0)
    snprintf(sub_group + strlen(sub_group), sizeof sub_group - strlen(sub_group),
             " \"zero_hpz_partition_size\": %d,", r->hpz);
  if (r->buffer_count > 0 && opt_nvme)
    snprintf(buffers, sizeof buffers, ", \"buffer_count\": %d", r->buffer_count);
  if (r->offload_extra)
    snprintf(buffers + strlen(buffers), sizeof buffers - strlen(buffers), "%s", r->offload_extra);
  char optimizer[700] = "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.999],"
                        " \"eps\": 1e-8, \"weight_decay\": 0.01}}";
  if (r->optim)
    et_optim_json(r->optim, optimizer, sizeof optimizer);
  char *buf = malloc(8192);
  int n = snprintf(buf, 8192,
      "{\n"
      "  \"train_micro_batch_size_per_gpu\": %d,\n"
      "  \"gradient_accumulation_steps\": %d,\n"
      "  \"gradient_clipping\": %g,\n"
      "  \"steps_per_print\": 1000,\n"
      "  \"optimizer\": %s,%s\n"
      "  \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 12, \"loss_scale_window\": %d,"
      " \"hysteresis\": 1, \"min_loss_scale\": 1},\n"
      "  \"bf16\": {\"enabled\": %s%s},\n"
      "  \"zero_optimization\": {\n"
      "    \"stage\": %d, \"reduce_bucket_size\": %lld, \"allgather_bucket_size\": %lld,\n"
      "    \"overlap_comm\": %s, \"stage3_param_persistence_threshold\": %lld,\n"
      "    \"stage3_prefetch_bucket_size\": %lld, \"stage3_max_live_parameters\": %lld,\n"
      "    \"stage3_max_reuse_distance\": %lld,%s%s\n"
      "    \"offload_optimizer\": {\"device\": \"%s\"%s%s%s%s}%s\n"
      "  }%s%s\n"
      "}\n",
      r->micro, r->gas, r->clip, optimizer,
      /* torch.optim.SGD under ZeRO: the flag DeepSpeed asks for it */
      r->optim && et_optim_is(r->optim, "SGD") ? " \"zero_allow_untested_optimizer\": true," : "",
      r->dtype == ZINC_F16 ? "true" : "false", r->fp16_window,
      r->dtype == ZINC_BF16 ? "true" : "false", r->bf16_extra ? r->bf16_extra : "", r->stage, (long long)r->reduce_bucket,
      (long long)r->allgather_bucket, r->overlap ? "true" : "false", (long long)r->persist, (long long)r->prefetch,
      (long long)r->max_live, (long long)r->reuse, sub_group, r->zero_extra ? r->zero_extra : "", r->stage == 0 ? "none" : r->offload,
      opt_nvme ? ", \"nvme_path\": \"" : "", opt_nvme ? r->nvme_path : "",
      opt_nvme ? "\"" : "", buffers, param_offload, r->extra ? ",\n" : "",
      r->extra ? r->extra : "");
  (void)n;
  return buf;
}

typedef struct {
  const tm_shape *shape;
} et_init_ctx;

static zinc_status et_init(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  const et_init_ctx *c = ctx;
  int i = 0;
  while (i < TM_NPARAM && strcmp(tm_names[i], zinc_param_name(p)) != 0)
    i++;
  for (int64_t j = 0; j < numel; j++)
    dst[j] = tm_init_value(c->shape, i, j);
  return ZINC_OK;
}

/* The model's modules: in(W0,b0) mid(W1,b1) scale(s) out(W2,b2). */
typedef struct {
  zinc_engine *e;
  zinc_module *mod[4];
  zinc_param *par[TM_NPARAM];
  float *P[TM_NPARAM], *G[TM_NPARAM]; /* f32 working copies */
  et_init_ctx ictx;
  int frozen[TM_NPARAM];  /* 1: frozen (et_freeze): its gradient is not asked for */
} et_model;

static const int et_param_module[TM_NPARAM] = {0, 0, 1, 1, 2, 3, 3};

static inline void et_model_register(et_model *m, zinc_engine *e, const tm_shape *sh,
                                     zinc_dtype dt) {
  static const char *mods[4] = {"in", "mid", "scale", "out"};
  m->e = e;
  memset(m->frozen, 0, sizeof m->frozen);
  for (int i = 0; i < 4; i++) {
    m->mod[i] = zinc_module_add(e, mods[i]);
    if (!m->mod[i]) {
      fprintf(stderr, "zinc_module_add: %s\n", zinc_last_error());
      exit(1);
    }
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t shape[2];
    int nd = 1;
    shape[0] = tm_numel(sh, i);
    if (i == 0 || i == 2 || i == 5) {
      int a = i == 0 ? 0 : i == 2 ? 1 : 2;
      shape[0] = sh->d[a];
      shape[1] = sh->d[a + 1];
      nd = 2;
    }
    m->par[i] = zinc_param_add(e, m->mod[et_param_module[i]], tm_names[i], dt, nd, shape);
    if (!m->par[i]) {
      fprintf(stderr, "zinc_param_add: %s\n", zinc_last_error());
      exit(1);
    }
    if (i == 1 || i == 3 || i == 4 || i == 6)
      ET_OK(zinc_param_set_weight_decay(m->par[i], 0));
    m->P[i] = calloc((size_t)tm_numel(sh, i), sizeof(float));
    m->G[i] = calloc((size_t)tm_numel(sh, i), sizeof(float));
  }
}

/* Freeze parameter i (before the build): the micro-batches of the helpers
 * below then leave its gradient out, as a trainer does. */
static inline void et_freeze(et_model *m, int i) {
  ET_OK(zinc_param_set_frozen(m->par[i], 1));
  m->frozen[i] = 1;
}

static inline void et_model_free(et_model *m) {
  for (int i = 0; i < TM_NPARAM; i++) {
    free(m->P[i]);
    free(m->G[i]);
  }
}

/* One micro-batch through the engine, as a trainer writes it; the first
 * failing call's status is returned. inject: if not NULL, set G[0][0] to
 * *inject on this rank (overflow tests). */
#define ET_TRY(expr)                                                           \
  do {                                                                         \
    zinc_status et_try_st_ = (expr);                                           \
    if (et_try_st_ != ZINC_OK)                                                 \
      return et_try_st_;                                                       \
  } while (0)

/* Module k's parameters (fetched by the caller) into m->P. */
static inline zinc_status et_load_module(et_model *m, const tm_shape *sh, zinc_dtype dt, int k) {
  for (int i = 0; i < TM_NPARAM; i++) {
    if (et_param_module[i] != k)
      continue;
    const void *d = zinc_param_data(m->par[i]);
    if (!d)
      return ZINC_ERR_INVALID;
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      m->P[i][j] = zinc_load_as_f32(d, j, dt);
  }
  return ZINC_OK;
}

/* m->G of module k's parameters added into zinc's gradients (fetched by
 * the caller), as a trainer accumulates. */
static inline zinc_status et_add_module_grads(et_model *m, const tm_shape *sh, zinc_dtype dt,
                                              int k) {
  for (int i = 0; i < TM_NPARAM; i++) {
    if (et_param_module[i] != k || m->frozen[i])
      continue;
    void *g = zinc_param_grad(m->par[i]);
    if (!g)
      return ZINC_ERR_INVALID;
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      zinc_store_from_f32(g, j, dt, zinc_load_as_f32(g, j, dt) + m->G[i][j]);
  }
  return ZINC_OK;
}

/* m->G zeroed, and module `ones`'s parameters (-1: none) set to 1. */
static inline void et_clear_grads(et_model *m, const tm_shape *sh, int ones) {
  for (int i = 0; i < TM_NPARAM; i++) {
    memset(m->G[i], 0, (size_t)tm_numel(sh, i) * sizeof(float));
    if (et_param_module[i] == ones)
      for (int64_t j = 0; j < tm_numel(sh, i); j++)
        m->P[i][j] = 1.0f;
  }
}

static inline zinc_status et_micro_batch_status(et_model *m, const tm_shape *sh, zinc_dtype dt,
                                                int64_t first, int batch, const float *inject,
                                                double *loss) {
  zinc_engine *e = m->e;
  et_clear_grads(m, sh, -1);
  for (int k = 0; k < 4; k++) {
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_load_module(m, sh, dt, k));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  *loss = tm_forward_backward(sh, m->P, m->G, first, batch, zinc_loss_scale(e));
  if (inject)
    m->G[0][0] = *inject;
  for (int k = 3; k >= 0; k--) {
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_add_module_grads(m, sh, dt, k));
    ET_TRY(zinc_module_grads_ready(e, m->mod[k]));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  return zinc_backward_end(e);
}

/* A micro-batch that leaves out module `skip` (-1: none) in both passes, as
 * a trainer that drops a layer does; "scale" (2) left out acts as ones.
 * The first failing call's status. */
static inline zinc_status et_micro_batch_skip(et_model *m, const tm_shape *sh, zinc_dtype dt,
                                              int64_t first, int batch, int skip) {
  zinc_engine *e = m->e;
  et_clear_grads(m, sh, skip);
  for (int k = 0; k < 4; k++) {
    if (k == skip)
      continue;
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_load_module(m, sh, dt, k));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  tm_forward_backward(sh, m->P, m->G, first, batch, zinc_loss_scale(e));
  for (int k = 3; k >= 0; k--) {
    if (k == skip)
      continue;
    ET_TRY(zinc_module_fetch(e, m->mod[k]));
    ET_TRY(et_add_module_grads(m, sh, dt, k));
    ET_TRY(zinc_module_grads_ready(e, m->mod[k]));
    ET_TRY(zinc_module_release(e, m->mod[k]));
  }
  return zinc_backward_end(e);
}

/* How fast a failure on one rank must reach every rank: a peer left
 * waiting in a collective shows as a slow call (or as the comm timeout). */
#define ET_AGREE_SECONDS 10.0

/* A failure every rank must report alike: status `want`, each of the
 * NULL-terminated `needles` in the message, on ranks other than
 * `failing_rank` (-1: not checked) the words "rank <failing_rank>", and
 * returned within ET_AGREE_SECONDS (`seconds`, measured by the caller). */
static inline void et_expect_everywhere(zinc_status st, zinc_status want, double seconds,
                                        const char *what, const char *const *needles,
                                        int failing_rank) {
  const char *msg = zinc_last_error();
  ET_CHECK(st == want, "%s: %s (want %s): %s", what, zinc_status_name(st),
           zinc_status_name(want), msg);
  for (int i = 0; needles && needles[i]; i++)
    ET_CHECK(strstr(msg, needles[i]) != NULL, "%s: the message does not say \"%s\": %s",
             what, needles[i], msg);
  if (failing_rank >= 0 && et_rank != failing_rank) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", failing_rank);
    ET_CHECK(strstr(msg, who) != NULL, "%s: the message does not name %s: %s", what, who, msg);
  }
  ET_CHECK(seconds < ET_AGREE_SECONDS, "%s: took %.1f s on rank %d (limit %.0f s; a peer "
           "waited in a collective?)", what, seconds, et_rank, ET_AGREE_SECONDS);
}

/* Every parameter's full value (fp32) into out[i]. */
static inline void et_get_params(et_model *m, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, out[i]));
}

/* The same, exiting on the first failure. */
static inline double et_micro_batch(et_model *m, const tm_shape *sh, zinc_dtype dt,
                                    int64_t first, int batch, const float *inject) {
  double loss = 0;
  ET_OK(et_micro_batch_status(m, sh, dt, first, batch, inject, &loss));
  return loss;
}

/* Steps [from, to) of run r, accumulation 1, each rank on its own samples;
 * the first failing call's status. */
static inline zinc_status et_steps(et_model *m, const et_run *r, int from, int to) {
  int N = zinc_dp_size(m->e), me = zinc_dp_rank(m->e);
  for (int s = from; s < to; s++) {
    double loss;
    zinc_status st = et_micro_batch_status(m, &r->shape, r->dtype,
                                           ((int64_t)s * N + me) * r->micro, r->micro, NULL,
                                           &loss);
    if (st == ZINC_OK)
      st = zinc_step(m->e, NULL);
    if (st != ZINC_OK)
      return st;
  }
  return ZINC_OK;
}

/* An engine for run r on the cpu device, one thread (mpi_comm: MPI_Comm*
 * to use, or NULL for the world); et_open also registers and builds the
 * tiny model. */
static inline zinc_engine *et_create(const et_run *r, void *mpi_comm) {
  char *json = et_config_json(r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  opt.mpi_comm = mpi_comm;
  if (r->model_parallel > 1)
    opt.model_parallel_size = r->model_parallel;
  zinc_engine *e = NULL;
  ET_OK(zinc_engine_create(cfg, &opt, &e));
  zinc_config_free(cfg);
  if (!mpi_comm) { /* an engine over a sub-group must not change the test's view */
    et_rank = zinc_rank(e);
    et_world = zinc_world_size(e);
  }
  return e;
}

/* Register run r's tiny model in e, ready for zinc_engine_build. */
static inline void et_register_run(et_model *m, zinc_engine *e, const et_run *r) {
  et_model_register(m, e, &r->shape, r->dtype);
  m->ictx.shape = &r->shape;
}

/* Register and build; the build's status (the model stays registered). */
static inline zinc_status et_build(et_model *m, zinc_engine *e, const et_run *r) {
  et_register_run(m, e, r);
  return zinc_engine_build(e, et_init, &m->ictx);
}

static inline zinc_engine *et_open(const et_run *r, void *mpi_comm, et_model *m) {
  zinc_engine *e = et_create(r, mpi_comm);
  ET_OK(et_build(m, e, r));
  return e;
}

/* Train r->steps steps through zinc; return the full fp32 master params
 * (final[i], numel each) and the loss of every step (per rank). */
static inline void et_train(const et_run *r, float **final, double *losses,
                            zinc_mem_stats *stats) {
  et_model m;
  zinc_engine *e = et_open(r, NULL, &m);
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  for (int s = 0; s < r->steps; s++) {
    double l = 0;
    for (int k = 0; k < r->gas; k++) {
      int64_t global_micro = (int64_t)s * r->gas + k;
      int64_t first = (global_micro * N + me) * r->micro;
      l += et_micro_batch(&m, &r->shape, r->dtype, first, r->micro, NULL);
      zinc_step_info info = ZINC_STEP_INFO_INIT;
      ET_OK(zinc_step(e, &info));
      ET_CHECK(info.boundary == (k == r->gas - 1), "step %d micro %d: boundary %d", s, k,
               info.boundary);
    }
    if (losses)
      losses[s] = l / r->gas;
  }
  if (final)
    for (int i = 0; i < TM_NPARAM; i++)
      ET_OK(zinc_param_get_full(e, m.par[i], ZINC_STATE_PARAM, final[i]));
  if (stats)
    ET_OK(zinc_memory_stats(e, stats));
  et_model_free(&m);
  zinc_engine_destroy(e);
}

/* The reference trainer's gradient of step s: the global batch of every
 * micro-batch (all ranks' samples) accumulated into G (fp32, as a trainer
 * adds); returns the factor that averages it and *coef the clipping
 * factor (DeepSpeed's clip / (norm + 1e-6) when the norm of the mean
 * gradient exceeds clip, else 1): the step's gradient is G * avg * coef. */
static inline double et_reference_grads(const et_run *r, int world, int s, float **P, float **G,
                                        float **Gl, double *coef) {
  const tm_shape *sh = &r->shape;
  for (int i = 0; i < TM_NPARAM; i++)
    memset(G[i], 0, (size_t)tm_numel(sh, i) * 4);
  for (int k = 0; k < r->gas; k++)
    for (int rank = 0; rank < world; rank++) {
      int64_t first = (((int64_t)s * r->gas + k) * world + rank) * r->micro;
      for (int i = 0; i < TM_NPARAM; i++)
        memset(Gl[i], 0, (size_t)tm_numel(sh, i) * 4);
      tm_forward_backward(sh, P, Gl, first, r->micro, 1.0f);
      for (int i = 0; i < TM_NPARAM; i++)
        for (int64_t j = 0; j < tm_numel(sh, i); j++)
          G[i][j] += Gl[i][j];
    }
  double sq = 0, avg = 1.0 / ((double)world * r->gas);
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++)
      sq += (double)G[i][j] * G[i][j];
  double norm = sqrt(sq) * avg;
  *coef = 1.0;
  if (r->clip > 0 && norm > r->clip)
    *coef = r->clip / (norm + 1e-6);
  return avg;
}

/* Biases and the scale take no weight decay (et_model_register). */
static inline int et_param_decays(int i) { return !(i == 1 || i == 3 || i == 4 || i == 6); }

/* One step of a non-Adam optimizer in double over parameter i (n elements):
 * Pd the double master, M/V the double state, g the mean clipped gradient;
 * the formulas of optim/optimizer.h written again here. Lamb's trust ratio
 * is over the whole parameter. */
static inline void et_reference_update(const et_optim *o, int64_t step, int decay, int64_t n,
                                       double *Pd, double *M, double *V, const double *g) {
  double t = (double)step, lr = o->lr, b1 = o->beta1, b2 = o->beta2, eps = o->eps;
  double wd = decay ? o->weight_decay : 0.0;
  if (et_optim_is(o, "Lamb")) {
    double w2 = 0, u2 = 0;
    for (int64_t j = 0; j < n; j++) {
      M[j] = b1 * M[j] + (1 - b1) * g[j];
      V[j] = b2 * V[j] + (1 - b2) * g[j] * g[j];
      double u = M[j] / (sqrt(V[j]) + eps) + wd * Pd[j];
      w2 += Pd[j] * Pd[j];
      u2 += u * u;
    }
    double ratio = 1.0;
    if (w2 > 0 && u2 > 0)
      ratio = fmin(fmax(sqrt(w2) / sqrt(u2), o->min_coeff), o->max_coeff);
    double step_size = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    for (int64_t j = 0; j < n; j++)
      Pd[j] -= step_size * ratio * (M[j] / (sqrt(V[j]) + eps) + wd * Pd[j]);
  } else if (et_optim_is(o, "Lion")) {
    for (int64_t j = 0; j < n; j++) {
      double c = b1 * M[j] + (1 - b1) * g[j];
      Pd[j] = Pd[j] * (1 - lr * wd) - lr * copysign(1.0, c);
      M[j] = b2 * M[j] + (1 - b2) * g[j];
    }
  } else if (et_optim_is(o, "Adagrad")) {
    for (int64_t j = 0; j < n; j++) {
      double d = g[j] + wd * Pd[j];
      V[j] += d * d;
      Pd[j] -= lr * d / (sqrt(V[j]) + eps);
    }
  } else { /* SGD */
    for (int64_t j = 0; j < n; j++) {
      double d = g[j] + wd * Pd[j];
      if (o->momentum != 0) {
        M[j] = step == 1 ? d : o->momentum * M[j] + (1 - o->dampening) * d;
        d = o->nesterov ? d + o->momentum * M[j] : M[j];
      }
      Pd[j] -= lr * d;
    }
  }
}

/* The same training without zinc: one process, the global batch of every
 * micro-batch (all ranks' samples), mean gradients, clipping, and the
 * optimizer of r->optim (NULL: AdamW as et_adamw_default). Adam keeps its
 * parameters and moments in fp32 between steps (each step in double); the
 * other optimizers run in double throughout, the forward reading the
 * parameters rounded to fp32. */
static inline void et_reference(const et_run *r, int world, float **final) {
  const tm_shape *sh = &r->shape;
  et_optim adamw = et_adamw_default();
  const et_optim *o = r->optim ? r->optim : &adamw;
  int adam = et_optim_is_adam(o);
  int decoupled = et_optim_is(o, "AdamW") || o->adam_w_mode;
  float *P[TM_NPARAM], *G[TM_NPARAM], *M[TM_NPARAM], *V[TM_NPARAM], *Gl[TM_NPARAM];
  double *Pd[TM_NPARAM], *Md[TM_NPARAM], *Vd[TM_NPARAM], *gd[TM_NPARAM];
  for (int i = 0; i < TM_NPARAM; i++) {
    int64_t n = tm_numel(sh, i);
    P[i] = calloc((size_t)n, 4);
    G[i] = calloc((size_t)n, 4);
    Gl[i] = calloc((size_t)n, 4);
    M[i] = calloc((size_t)n, 4);
    V[i] = calloc((size_t)n, 4);
    Pd[i] = calloc((size_t)n, 8);
    Md[i] = calloc((size_t)n, 8);
    Vd[i] = calloc((size_t)n, 8);
    gd[i] = calloc((size_t)n, 8);
    for (int64_t j = 0; j < n; j++) {
      P[i][j] = tm_init_value(sh, i, j);
      Pd[i][j] = P[i][j];
    }
  }
  double lr = o->lr, b1 = o->beta1, b2 = o->beta2, eps = o->eps, wd = o->weight_decay;
  for (int s = 0; s < r->steps; s++) {
    double coef, avg = et_reference_grads(r, world, s, P, G, Gl, &coef);
    double t = s + 1, bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (int i = 0; i < TM_NPARAM; i++) {
      int decay = et_param_decays(i);
      if (!adam) {
        for (int64_t j = 0; j < tm_numel(sh, i); j++)
          gd[i][j] = G[i][j] * avg * coef;
        et_reference_update(o, s + 1, decay, tm_numel(sh, i), Pd[i], Md[i], Vd[i], gd[i]);
        for (int64_t j = 0; j < tm_numel(sh, i); j++)
          P[i][j] = (float)Pd[i][j];
        continue;
      }
      for (int64_t j = 0; j < tm_numel(sh, i); j++) {
        double g = G[i][j] * avg * coef;
        if (decay && !decoupled)
          g += wd * P[i][j];
        M[i][j] = (float)(b1 * M[i][j] + (1 - b1) * g);
        V[i][j] = (float)(b2 * V[i][j] + (1 - b2) * g * g);
        double p = P[i][j];
        if (decay && decoupled)
          p *= 1 - lr * wd;
        p -= lr / bc1 * M[i][j] / (sqrt(V[i][j]) / sqrt(bc2) + eps);
        P[i][j] = (float)p;
      }
    }
  }
  for (int i = 0; i < TM_NPARAM; i++) {
    memcpy(final[i], P[i], (size_t)tm_numel(sh, i) * 4);
    free(P[i]);
    free(G[i]);
    free(Gl[i]);
    free(M[i]);
    free(V[i]);
    free(Pd[i]);
    free(Md[i]);
    free(Vd[i]);
    free(gd[i]);
  }
}

static inline float **et_alloc_params(const tm_shape *sh) {
  float **p = calloc(TM_NPARAM, sizeof *p);
  for (int i = 0; i < TM_NPARAM; i++)
    p[i] = calloc((size_t)tm_numel(sh, i), 4);
  return p;
}

static inline void et_free_params(float **p) {
  for (int i = 0; i < TM_NPARAM; i++)
    free(p[i]);
  free(p);
}

/* Every parameter of a (got) against b (want), bit for bit; each parameter
 * that differs is reported by test_compare under "[rank R] what: name".
 * Returns 1 when all are equal. */
static inline int et_same_bits(const tm_shape *sh, float **a, float **b, const char *what) {
  int64_t bad = 0;
  for (int i = 0; i < TM_NPARAM; i++) {
    char label[256];
    snprintf(label, sizeof label, "[rank %d] %s: %s", et_rank, what, tm_names[i]);
    bad += test_compare_bits(label, a[i], b[i], tm_numel(sh, i), ZINC_F32);
  }
  return bad == 0;
}

/* Every parameter of p, raw fp32 bytes in order W0 ... b2, appended to f:
 * what two jobs compare byte for byte (cmp names the first offset). */
static inline void et_dump_params(FILE *f, const tm_shape *sh, float **p) {
  for (int i = 0; i < TM_NPARAM; i++)
    if (fwrite(p[i], sizeof(float), (size_t)tm_numel(sh, i), f) != (size_t)tm_numel(sh, i))
      ET_CHECK(0, "writing the parameters' dump failed");
  fflush(f);
}

/* Train r with zero_optimization extras and top-level extras (NULL: none);
 * the final fp32 parameters (et_free_params). */
static inline float **et_train_with(et_run r, const char *zero_extra, const char *extra) {
  float **p = et_alloc_params(&r.shape);
  r.zero_extra = zero_extra;
  r.extra = extra;
  et_train(&r, p, NULL, NULL);
  return p;
}

/* v rounded to bf16, to nearest even, written from the bit pattern (the
 * tests' own, not zinc_math.h's): the reference for bf16 optimizer state. */
static inline float et_bf16_round(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) /* finite */
    u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* ||a - b|| / ||b|| over all parameters. */
static inline double et_rel_l2(const tm_shape *sh, float **a, float **b) {
  double num = 0, den = 0;
  for (int i = 0; i < TM_NPARAM; i++)
    for (int64_t j = 0; j < tm_numel(sh, i); j++) {
      double d = (double)a[i][j] - b[i][j];
      num += d * d;
      den += (double)b[i][j] * b[i][j];
    }
  return sqrt(num) / sqrt(den);
}

#endif /* ENGINE_TEST_H */
