/*
 * gpt_train.c — a small GPT trained data-parallel with zinc, on the CPU.
 *
 *   mpirun -n 2 build/cpu/examples/gpt/gpt_train --config examples/configs/zero3.json
 *
 * The model (gpt_model.c) knows nothing of zinc; this file registers its
 * tensors with zinc and runs zinc's step sequence around it. zinc owns the
 * parameters, gradients and optimizer state and shards them as the config's
 * stage says; the trainer owns its activations and its data.
 *
 * Modules, in forward order (each fetched, computed and released together):
 *
 *   embed      wte (V, C), wpe (T, C)
 *   block.<l>  ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b,
 *              ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b
 *   head       lnf_w, lnf_b
 *
 * The tied embedding. The output projection of the head is wte, a tensor of
 * the embed module (its owner): zinc.h's "Shared (tied) weights" contract.
 * The head does not own a copy; while the head runs it fetches embed as
 * well (head_fetch) and reads wte from it. In the backward pass the head
 * adds the projection's share into zinc_param_grad(wte) and releases embed
 * without grads_ready; embed's own backward, last, adds the embedding's
 * share into the same buffer (the engine keeps it, unzeroed, across the
 * release) and reports embed ready: wte's gradient is both shares, reduced
 * once, and no module holds a second copy of the largest tensor.
 *
 * --freeze-embedding freezes wte (zinc_param_set_frozen): the engine keeps
 * no gradient or optimizer state for it, and since the output projection is
 * the same tensor it is frozen too (PyTorch's requires_grad=False on a tied
 * weight). The backward pass then computes neither share of wte's gradient
 * (the model's backward skips a NULL gradient) and asks zinc for none; the
 * protocol above is unchanged for wpe.
 *
 * Precision: the parameters are registered as fp32, or bf16 with --bf16. The
 * model computes in fp32; with bf16 the fetched tensors are converted into
 * this trainer's fp32 copies and the fp32 gradients are added into zinc's
 * bf16 gradient buffers after each module's backward.
 *
 * Per step (on every rank): gradient_accumulation_steps micro-batches of
 * B x T tokens, each from this rank's own slice of the corpus (gpt_data.h),
 * each followed by zinc_step (which runs the optimizer at the boundary).
 * Rank 0 prints the progress line every steps_per_print steps, the memory
 * report at the end and where the checkpoints went. The config's
 * "csv_monitor" and "tensorboard" sections get the mean loss as
 * Train/Samples/train_loss (zinc_monitor_scalar) beside the engine's lr,
 * loss scale, gradient norm, step time and memory.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_args.h"
#include "gpt_data.h"
#include "gpt_model.h"
#include "gpt_report.h"
#include "zinc.h"

_Static_assert(sizeof(real) == sizeof(float), "the trainer runs the float model");

#define MAX_MODULE_PARAMS GPT_BLOCK_NPARAMS

/* Return the status of a failed zinc call (its message is in zinc_last_error). */
#define TRY(call)                          \
  do {                                     \
    zinc_status try_st_ = (call);          \
    if (try_st_ != ZINC_OK)                \
      return try_st_;                      \
  } while (0)

/* One model module as registered with zinc. */
typedef struct {
  zinc_module *module;
  int count;
  zinc_param *params[MAX_MODULE_PARAMS];
  gpt_tensor_spec specs[MAX_MODULE_PARAMS];
  uint64_t stream;  // initialisation stream of params[0]; params[i]: stream + i
  int64_t numel;    // all its tensors
} gpt_zmodule;

/* bf16 only: fp32 copies of a fetched module's tensors and fp32 gradients.
 * Slot 0 serves embed, slot 1 a block or the head (embed and the head are
 * fetched together). */
typedef struct {
  float *params; // (largest module numel) host
  float *grads;  // (largest module numel) host
} gpt_slot;

typedef struct {
  gpt_config cfg;
  zinc_engine *e;
  int bf16;
  int freeze_wte;  // --freeze-embedding
  uint64_t seed;
  gpt_zmodule embed, head;
  gpt_zmodule *blocks; // [L]
  gpt_slot slots[2];
} gpt_trainer;

/* --------------------------------------------------------- registration */

static zinc_status module_register(gpt_trainer *tr, gpt_zmodule *m, const char *name,
                                   const gpt_tensor_spec *specs, int count,
                                   uint64_t stream) {
  m->module = zinc_module_add(tr->e, name);
  if (!m->module)
    return ZINC_ERR_INVALID;
  m->count = count;
  m->stream = stream;
  for (int i = 0; i < count; i++) {
    m->specs[i] = specs[i];
    m->params[i] = zinc_param_add(tr->e, m->module, specs[i].name,
                                  tr->bf16 ? ZINC_BF16 : ZINC_F32, specs[i].ndim,
                                  specs[i].shape);
    if (!m->params[i])
      return ZINC_ERR_INVALID;
    TRY(zinc_param_set_user(m->params[i], m)); /* init_param finds its spec here */
    if (!specs[i].weight_decay) /* biases and LayerNorm parameters */
      TRY(zinc_param_set_weight_decay(m->params[i], 0));
    m->numel += gpt_spec_numel(&specs[i]);
  }
  return ZINC_OK;
}

/* Streams as gpt_params_init numbers them, so gpt_alone starts from the
 * same parameters. */
static zinc_status model_register(gpt_trainer *tr) {
  const gpt_config *c = &tr->cfg;
  gpt_tensor_spec es[GPT_EMBED_NPARAMS], bs[GPT_BLOCK_NPARAMS], hs[GPT_HEAD_NPARAMS];
  gpt_embed_specs(c, es);
  gpt_block_specs(c, bs);
  gpt_head_specs(c, hs);
  TRY(module_register(tr, &tr->embed, "embed", es, GPT_EMBED_NPARAMS, 0));
  if (tr->freeze_wte)
    TRY(zinc_param_set_frozen(tr->embed.params[GPT_EMBED_WTE], 1));
  for (int l = 0; l < c->num_layers; l++) {
    char name[32];
    snprintf(name, sizeof(name), "block.%d", l);
    TRY(module_register(tr, &tr->blocks[l], name, bs, GPT_BLOCK_NPARAMS,
                        (uint64_t)(l + 1) * 64));
  }
  return module_register(tr, &tr->head, "head", hs, GPT_HEAD_NPARAMS,
                         (uint64_t)(c->num_layers + 1) * 64);
}

static zinc_status init_param(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  const gpt_trainer *tr = ctx;
  const gpt_zmodule *m = zinc_param_user(p); /* module_register's tag */
  for (int i = 0; m && i < m->count; i++)
    if (m->params[i] == p) {
      if (gpt_spec_numel(&m->specs[i]) != numel)
        return zinc_error_set(ZINC_ERR_INVALID, "the model's %s has %lld elements, zinc "
                              "asks for %lld", m->specs[i].name,
                              (long long)gpt_spec_numel(&m->specs[i]), (long long)numel);
      gpt_tensor_init(&m->specs[i], tr->seed, m->stream + (uint64_t)i, dst);
      return ZINC_OK;
    }
  return zinc_error_set(ZINC_ERR_INVALID, "not a tensor this trainer registered");
}

/* ------------------------------------------------------------- binding */

/* Point view[i] at tensor i of the fetched module m, in fp32. */
static zinc_status bind_params(gpt_trainer *tr, gpt_zmodule *m, int slot, real **view) {
  float *copy = tr->slots[slot].params;
  for (int i = 0; i < m->count; i++) {
    void *data = zinc_param_data(m->params[i]);
    if (!data)
      return ZINC_ERR_INVALID;
    int64_t n = gpt_spec_numel(&m->specs[i]);
    if (!tr->bf16) {
      view[i] = data;
      continue;
    }
    if (zinc_convert(copy, ZINC_F32, data, ZINC_BF16, n) != ZINC_OK)
      return ZINC_ERR_INVALID;
    view[i] = copy;
    copy += n;
  }
  return ZINC_OK;
}

/* Tensor i of m is frozen: it takes no gradient. */
static int frozen(const gpt_trainer *tr, const gpt_zmodule *m, int i) {
  return tr->freeze_wte && m == &tr->embed && i == GPT_EMBED_WTE;
}

/* Point view[i] where tensor i's gradient is accumulated: zinc's buffer
 * (fp32), or a zeroed fp32 buffer that grads_flush adds into zinc's (bf16);
 * NULL for a frozen tensor (the model's backward skips it). */
static zinc_status bind_grads(gpt_trainer *tr, gpt_zmodule *m, int slot, real **view) {
  float *acc = tr->slots[slot].grads;
  for (int i = 0; i < m->count; i++) {
    if (frozen(tr, m, i)) {
      view[i] = NULL;
      continue;
    }
    void *grad = zinc_param_grad(m->params[i]);
    if (!grad)
      return ZINC_ERR_INVALID;
    int64_t n = gpt_spec_numel(&m->specs[i]);
    if (!tr->bf16) {
      view[i] = grad;
      continue;
    }
    memset(acc, 0, (size_t)n * sizeof(float));
    view[i] = acc;
    acc += n;
  }
  return ZINC_OK;
}

/* zinc's bf16 gradient += the fp32 accumulator, rounded once per element
 * by zinc_convert (the engine's rounding), a chunk at a time. */
static void grads_flush(gpt_trainer *tr, gpt_zmodule *m, int slot) {
  if (!tr->bf16)
    return;
  const float *acc = tr->slots[slot].grads;
  float sum[256];
  for (int i = 0; i < m->count; i++) {
    if (frozen(tr, m, i))
      continue;
    uint16_t *g = zinc_param_grad(m->params[i]);
    int64_t n = gpt_spec_numel(&m->specs[i]);
    for (int64_t j = 0; j < n; j += 256) {
      int64_t k = n - j < 256 ? n - j : 256;
      zinc_convert(sum, ZINC_F32, g + j, ZINC_BF16, k);
      for (int64_t t = 0; t < k; t++)
        sum[t] += acc[j + t];
      zinc_convert(g + j, ZINC_BF16, sum, ZINC_F32, k);
    }
    acc += n;
  }
}

/* -------------------------------------------------------- forward, backward */

/* The head and the owner of the weight it shares (zinc.h: "Shared (tied)
 * weights"): embed is fetched inside head, released before it. */
static zinc_status head_fetch(gpt_trainer *tr) {
  TRY(zinc_module_fetch(tr->e, tr->head.module));
  return zinc_module_fetch(tr->e, tr->embed.module);
}

/* In the backward pass embed is released without grads_ready: its own
 * backward adds the embedding's share of wte's gradient later. */
static zinc_status head_release(gpt_trainer *tr) {
  TRY(zinc_module_release(tr->e, tr->embed.module));
  return zinc_module_release(tr->e, tr->head.module);
}

/* One micro-batch forward; with targets NULL only the probabilities. */
static zinc_status forward(gpt_trainer *tr, gpt_acts *a, const int32_t *inputs,
                           const int32_t *targets, int B, int T, float *loss) {
  zinc_engine *e = tr->e;
  const gpt_config *c = &tr->cfg;
  gpt_embed_params ep;
  gpt_block_params bp;
  gpt_head_params hp;

  TRY(zinc_module_fetch(e, tr->embed.module));
  TRY(bind_params(tr, &tr->embed, 0, ep.t));
  gpt_embed_forward(c, &ep, a, inputs, B, T);
  TRY(zinc_module_release(e, tr->embed.module));

  for (int l = 0; l < c->num_layers; l++) {
    TRY(zinc_module_fetch(e, tr->blocks[l].module));
    TRY(bind_params(tr, &tr->blocks[l], 1, bp.t));
    gpt_block_forward(c, &bp, a, l, gpt_block_input(a, l), B, T);
    TRY(zinc_module_release(e, tr->blocks[l].module));
  }

  /* the head reads the tied wte from embed */
  TRY(head_fetch(tr));
  TRY(bind_params(tr, &tr->head, 1, hp.t));
  TRY(bind_params(tr, &tr->embed, 0, ep.t));
  *loss = gpt_head_forward(c, &hp, ep.wte, a, gpt_block_input(a, c->num_layers), targets,
                           B, T);
  return head_release(tr);
}

static zinc_status backward(gpt_trainer *tr, gpt_acts *a, const int32_t *inputs,
                            const int32_t *targets, int B, int T) {
  zinc_engine *e = tr->e;
  const gpt_config *c = &tr->cfg;
  gpt_embed_params ep, eg;
  gpt_block_params bp, bg;
  gpt_head_params hp, hg;

  /* head: lnf's gradient, and the output projection's share of wte's */
  TRY(head_fetch(tr));
  TRY(bind_params(tr, &tr->head, 1, hp.t));
  TRY(bind_params(tr, &tr->embed, 0, ep.t));
  TRY(bind_grads(tr, &tr->head, 1, hg.t));
  TRY(bind_grads(tr, &tr->embed, 0, eg.t));
  gpt_head_backward(c, &hp, &hg, ep.wte, eg.wte, a, gpt_block_input(a, c->num_layers),
                    targets, zinc_loss_scale(e), B, T);
  grads_flush(tr, &tr->head, 1);
  grads_flush(tr, &tr->embed, 0);
  TRY(zinc_module_grads_ready(e, tr->head.module));
  TRY(head_release(tr)); /* embed's gradient is not complete yet: no grads_ready */

  for (int l = c->num_layers - 1; l >= 0; l--) {
    gpt_zmodule *m = &tr->blocks[l];
    TRY(zinc_module_fetch(e, m->module));
    TRY(bind_params(tr, m, 1, bp.t));
    TRY(bind_grads(tr, m, 1, bg.t));
    gpt_block_backward(c, &bp, &bg, a, l, gpt_block_input(a, l), B, T);
    grads_flush(tr, m, 1);
    TRY(zinc_module_grads_ready(e, m->module));
    TRY(zinc_module_release(e, m->module));
  }

  /* embed: the embedding's share of wte's gradient added to the head's
   * (the same buffer), and wpe's; then the one grads_ready of embed */
  TRY(zinc_module_fetch(e, tr->embed.module));
  TRY(bind_grads(tr, &tr->embed, 0, eg.t));
  gpt_embed_backward(c, &eg, a, inputs, B, T);
  grads_flush(tr, &tr->embed, 0);
  TRY(zinc_module_grads_ready(e, tr->embed.module));
  TRY(zinc_module_release(e, tr->embed.module));
  return zinc_backward_end(e);
}

/* Generate n characters after a newline. Collective: every rank fetches the
 * same modules and draws the same tokens (same parameters, same seed). */
static zinc_status sample_text(gpt_trainer *tr, gpt_acts *a, const gpt_corpus *corpus,
                               int n, uint64_t seed, char *out) {
  int T = a->T, V = tr->cfg.vocab_size;
  int32_t *ctx = malloc(((size_t)n + 1) * sizeof(int32_t));
  if (!ctx)
    return ZINC_ERR_NOMEM;
  ctx[0] = corpus->byte_to_id['\n'] >= 0 ? corpus->byte_to_id['\n'] : 0;
  uint64_t rng = seed;
  zinc_status st = zinc_eval_begin(tr->e); /* forward-only, outside the training order */
  for (int len = 1; len <= n && st == ZINC_OK; len++) {
    int t = len < T ? len : T;
    float unused;
    st = forward(tr, a, ctx + len - t, NULL, 1, t, &unused);
    ctx[len] = gpt_sample_token(a->probs + (size_t)(t - 1) * V, V, 0.8f, &rng);
    out[len - 1] = (char)corpus->id_to_byte[ctx[len]];
  }
  out[n] = 0;
  free(ctx);
  zinc_status end = zinc_eval_end(tr->e);
  return st != ZINC_OK ? st : end;
}

/* ----------------------------------------------------------------- main */

typedef struct {
  gpt_args args;
  gpt_trainer tr;
  gpt_corpus corpus;
  gpt_loader loader;
  gpt_acts acts;
  int32_t *inputs, *targets; // (B, T) this micro-batch
  int64_t batch;             // the data position: the next micro-batch of the stream
  FILE *csv;
  int rank;
  int threads;               // OpenMP threads of this rank
  int reported;              // the failure was already described (not zinc's)
} gpt_run;

/* A failure of the trainer's own (not a zinc call): say it once, here. */
static zinc_status trainer_error(gpt_run *r, zinc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zinc_status trainer_error(gpt_run *r, zinc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpt_train: rank %d: ", r->rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  r->reported = 1;
  return st;
}

static void run_free(gpt_run *r) {
  free(r->tr.blocks);
  for (int s = 0; s < 2; s++) {
    free(r->tr.slots[s].params);
    free(r->tr.slots[s].grads);
  }
  gpt_acts_free(&r->acts);
  gpt_corpus_free(&r->corpus);
  free(r->inputs);
  free(r->targets);
  if (r->csv)
    fclose(r->csv);
}

/* The trainer's state saved with each checkpoint (zinc's client state):
 * where the data stream and the loop are. The data position is its own
 * number, not the engine's step count times the accumulation: a step the
 * engine skips (fp16 overflow) consumed its batches too. */
#define GPT_STATE_MAGIC 0x31535447u /* "GTS1" */
typedef struct {
  uint32_t magic;
  uint32_t size;       // sizeof(gpt_state)
  int64_t step;        // loop iterations done
  int64_t batch;       // the next micro-batch of the data stream
  uint64_t seed;       // the corpus must be the same one to continue it
  int64_t corpus_tokens;
} gpt_state;

static zinc_status save(gpt_run *r, int64_t step) {
  char tag[64];
  gpt_ckpt_tag(tag, sizeof(tag), step);
  gpt_state s = {GPT_STATE_MAGIC, sizeof(gpt_state), step, r->batch, r->args.seed,
                 r->corpus.num_tokens};
  TRY(zinc_checkpoint_set_client_state(r->tr.e, &s, sizeof(s)));
  TRY(zinc_save_checkpoint(r->tr.e, r->args.ckpt_dir, tag));
  if (r->rank == 0)
    printf("saved checkpoint %s/%s\n", r->args.ckpt_dir, tag);
  return ZINC_OK;
}

/* The training loop from start_step to args.steps. */
static zinc_status train(gpt_run *r, int64_t start_step, int64_t *last_saved) {
  zinc_engine *e = r->tr.e;
  const gpt_args *a = &r->args;
  int B = r->acts.B, T = r->acts.T, gas = zinc_gradient_accumulation_steps(e);
  int print_every = zinc_steps_per_print(e) > 0 ? zinc_steps_per_print(e) : 10;
  gpt_progress prog;
  gpt_progress_start(&prog, (int64_t)B * T * gas * zinc_dp_size(e));
  zinc_timers timers = ZINC_TIMERS_INIT;
  TRY(zinc_timers_take(e, &timers)); /* start the counters here */
  int64_t since_timers = 0;
  for (int64_t step = start_step; step < a->steps; step++) {
    double t0 = gpt_now(), loss_sum = 0;
    zinc_step_info info = ZINC_STEP_INFO_INIT;
    for (int micro = 0; micro < gas; micro++) {
      float loss;
      gpt_loader_batch(&r->loader, r->batch++, r->inputs, r->targets);
      TRY(forward(&r->tr, &r->acts, r->inputs, r->targets, B, T, &loss));
      TRY(backward(&r->tr, &r->acts, r->inputs, r->targets, B, T));
      TRY(zinc_step(e, &info));
      loss_sum += loss;
    }
    double loss = loss_sum / gas;
    TRY(zinc_allreduce_host_scope(e, ZINC_SCOPE_DP, &loss, 1, ZINC_REDUCE_MEAN));
    /* the config's csv_monitor / tensorboard: DeepSpeed's name for the loss */
    TRY(zinc_monitor_scalar(e, "Train/Samples/train_loss", loss));
    double seconds = gpt_now() - t0;
    gpt_progress_add(&prog, loss, seconds, step == start_step);
    since_timers++;
    if (r->csv) { /* flushed per row: a run that dies keeps what it did */
      fprintf(r->csv, "%lld,%.17g,%.9g,%.9g,%g,%d,%.6f\n", (long long)step + 1, loss,
              info.lr, info.grad_norm, info.loss_scale, info.skipped, seconds);
      fflush(r->csv);
    }
    if (r->rank == 0 && ((step + 1) % print_every == 0 || step + 1 == a->steps ||
                         step == start_step)) {
      gpt_progress_print(&prog, step + 1, a->steps, &info);
      if (zinc_wall_clock_breakdown(e)) {
        TRY(zinc_timers_take(e, &timers));
        gpt_print_timers(&timers, since_timers);
        since_timers = 0;
      }
    }
    if (a->ckpt_dir && a->save_every > 0 && (step + 1) % a->save_every == 0) {
      TRY(save(r, step + 1));
      *last_saved = step + 1;
    }
  }
  if (r->rank == 0 && a->steps > start_step)
    printf("trained steps %lld..%lld: %.0f tokens/s (mean over all steps but the first)\n",
           (long long)start_step + 1, (long long)a->steps, gpt_progress_tokens_per_s(&prog));
  return ZINC_OK;
}

/* --init-prefix: the file's name for a parameter is the prefix and zinc's. */
static int prefix_map(void *ctx, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s", (const char *)ctx, name);
  return 1;
}

/* --init-weights: every parameter from the file (strict: a tensor missing
 * or left over is an error naming it), then training starts from them. */
static zinc_status load_initial_weights(gpt_run *r) {
  zinc_load_weights_options o = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  o.strict = 1;
  if (r->args.init_prefix) {
    o.map = prefix_map;
    o.map_ctx = (void *)r->args.init_prefix;
  }
  zinc_load_weights_report rep;
  TRY(zinc_load_safetensors(r->tr.e, r->args.init_weights, &o, &rep));
  if (r->rank == 0)
    printf("initial weights: %d parameters from %s\n", rep.loaded, r->args.init_weights);
  zinc_load_weights_report_free(&rep);
  return ZINC_OK;
}

static zinc_status setup(gpt_run *r, int64_t *start_step) {
  gpt_args *a = &r->args;
  gpt_trainer *tr = &r->tr;
  zinc_engine *e = tr->e;
  char err[512];
  int B = zinc_micro_batch_size(e), T = a->seq;
  if (a->batch && a->batch != B)
    return trainer_error(r, ZINC_ERR_INVALID, "--batch %d but %s says "
                         "train_micro_batch_size_per_gpu %d; change one of them",
                         a->batch, a->config, B);
  int rc = a->data ? gpt_corpus_load(&r->corpus, a->data, err, sizeof(err))
                   : gpt_corpus_generate(&r->corpus, a->seed, a->corpus_bytes, err,
                                         sizeof(err));
  if (rc == 0)
    rc = gpt_loader_init(&r->loader, &r->corpus, zinc_dp_rank(e), zinc_dp_size(e), B, T,
                         err, sizeof(err));
  if (rc != 0)
    return trainer_error(r, ZINC_ERR_INVALID, "%s", err);
  tr->cfg = (gpt_config){r->corpus.vocab_size, T, a->layers, a->heads, a->width};
  tr->bf16 = a->bf16;
  tr->freeze_wte = a->freeze_embedding;
  tr->seed = a->seed;
  tr->blocks = calloc((size_t)a->layers, sizeof(gpt_zmodule));
  if (!tr->blocks)
    return trainer_error(r, ZINC_ERR_NOMEM, "out of memory for %d blocks", a->layers);
  TRY(model_register(tr));
  TRY(zinc_engine_build(e, init_param, tr));

  int64_t largest = tr->embed.numel > tr->head.numel ? tr->embed.numel : tr->head.numel;
  if (tr->blocks[0].numel > largest)
    largest = tr->blocks[0].numel;
  for (int s = 0; s < 2 && tr->bf16; s++) {
    tr->slots[s].params = malloc((size_t)largest * sizeof(float));
    tr->slots[s].grads = malloc((size_t)largest * sizeof(float));
    if (!tr->slots[s].params || !tr->slots[s].grads)
      return trainer_error(r, ZINC_ERR_NOMEM, "out of memory for the bf16 copies "
                           "(2 x %lld floats)", (long long)largest);
  }
  r->inputs = malloc((size_t)B * T * sizeof(int32_t));
  r->targets = malloc((size_t)B * T * sizeof(int32_t));
  if (!r->inputs || !r->targets || gpt_acts_alloc(&r->acts, &tr->cfg, B, T) != 0)
    return trainer_error(r, ZINC_ERR_NOMEM, "out of memory for the activations of "
                         "%d x %d tokens", B, T);
  /* the model computes on the CPU: its activations are host memory, and
   * the memory report counts them beside the engine's own */
  TRY(zinc_memory_register_activations(e, "gpt activations", ZINC_LOC_DEVICE,
                                       (uint64_t)r->acts.bytes));

  if (a->init_weights)
    TRY(load_initial_weights(r));
  *start_step = 0;
  r->batch = 0;
  if (a->resume) {
    TRY(zinc_load_checkpoint(e, a->ckpt_dir, NULL)); /* the tag DIR/latest names */
    const void *blob = NULL;
    size_t bytes = 0;
    TRY(zinc_checkpoint_client_state(e, &blob, &bytes));
    gpt_state s;
    if (bytes != sizeof(s))
      return trainer_error(r, ZINC_ERR_INVALID, "the checkpoint in %s holds no gpt_train state "
                           "(%zu bytes of client state, %zu expected): it was not saved by "
                           "this trainer", a->ckpt_dir, bytes, sizeof(s));
    memcpy(&s, blob, sizeof(s));
    if (s.magic != GPT_STATE_MAGIC || s.size != sizeof(s) || s.step < 0 || s.batch < 0)
      return trainer_error(r, ZINC_ERR_INVALID, "the checkpoint in %s holds client state that "
                           "is not gpt_train's", a->ckpt_dir);
    if (s.seed != a->seed || s.corpus_tokens != r->corpus.num_tokens)
      return trainer_error(r, ZINC_ERR_INVALID, "the checkpoint in %s was trained on another "
                           "corpus (seed %llu, %lld tokens; this run: seed %llu, %lld tokens): "
                           "its data position means nothing here", a->ckpt_dir,
                           (unsigned long long)s.seed, (long long)s.corpus_tokens,
                           (unsigned long long)a->seed, (long long)r->corpus.num_tokens);
    *start_step = s.step;
    r->batch = s.batch;
  }
  if (r->rank == 0) {
    int64_t params = tr->embed.numel + tr->head.numel + (int64_t)a->layers * tr->blocks[0].numel;
    printf("gpt_train: %d ranks | config %s | %s parameters\n", zinc_world_size(e),
           a->config, tr->bf16 ? "bf16" : "fp32");
    printf("model: %d layers, width %d, %d heads, seq %d, vocabulary %d (%s) | "
           "%.3f M parameters | ln(vocab) = %.3f\n",
           a->layers, a->width, a->heads, T, tr->cfg.vocab_size,
           a->data ? a->data : "generated corpus", (double)params / 1e6,
           log((double)tr->cfg.vocab_size));
    printf("batch: %d x %d tokens per rank, accumulation %d, %lld tokens per step | "
           "%d OpenMP threads per rank%s\n",
           B, T, zinc_gradient_accumulation_steps(e),
           (long long)B * T * zinc_gradient_accumulation_steps(e) * zinc_dp_size(e),
           r->threads, *start_step ? " | resumed" : "");
    if (*start_step)
      printf("resumed from %s/global_step%lld at data batch %lld\n", a->ckpt_dir,
             (long long)*start_step, (long long)r->batch);
    if (a->log_csv) {
      r->csv = fopen(a->log_csv, a->resume ? "a" : "w");
      if (!r->csv)
        return trainer_error(r, ZINC_ERR_IO, "cannot write %s: %s", a->log_csv,
                             strerror(errno));
      if (!a->resume || ftell(r->csv) == 0)
        fprintf(r->csv, "step,loss,lr,grad_norm,loss_scale,skipped,seconds\n");
    }
  }
  return ZINC_OK;
}

int main(int argc, char **argv) {
  gpt_run r;
  memset(&r, 0, sizeof(r));
  char err[512];
  if (gpt_args_parse(&r.args, argc, argv, err, sizeof(err)) != 0) {
    fprintf(stderr, "gpt_train: %s\n", err);
    return 2;
  }
  if (r.args.help) {
    printf("usage: mpirun -n N gpt_train [flags]\n%s", gpt_args_usage());
    return 0;
  }
  r.threads = gpt_threads_setup(&r.args);

  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_load(r.args.config, &cfg);
  if (st != ZINC_OK) {
    fprintf(stderr, "gpt_train: %s\n", zinc_last_error());
    return 1;
  }
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU; /* the model computes on the CPU */
  opt.hidden_size = r.args.width; /* the configs' "auto" bucket sizes follow it */
  st = zinc_engine_create(cfg, &opt, &r.tr.e);
  zinc_config_free(cfg);
  if (st != ZINC_OK) {
    fprintf(stderr, "gpt_train: creating the engine: %s\n", zinc_last_error());
    return 1;
  }
  r.rank = zinc_rank(r.tr.e);

  int64_t start_step = 0, last_saved = -1;
  const char *what = "setting up";
  st = setup(&r, &start_step);
  if (st == ZINC_OK) {
    what = "training";
    st = train(&r, start_step, &last_saved);
  }
  if (st == ZINC_OK && r.args.ckpt_dir && last_saved != r.args.steps &&
      r.args.steps > start_step) {
    what = "saving the checkpoint";
    st = save(&r, r.args.steps);
  }
  char *text = NULL;
  if (st == ZINC_OK && r.args.sample > 0) {
    what = "sampling";
    text = malloc((size_t)r.args.sample + 1);
    st = text ? sample_text(&r.tr, &r.acts, &r.corpus, r.args.sample, r.args.seed, text)
              : trainer_error(&r, ZINC_ERR_NOMEM, "out of memory for the sample");
    if (st == ZINC_OK && r.rank == 0)
      printf("\nsample (%d characters at temperature 0.8):\n%s\n", r.args.sample, text);
  }
  free(text);
  if (st == ZINC_OK) {
    what = "the memory report";
    st = gpt_print_memory(r.tr.e, (double)r.acts.bytes);
  }
  if (st != ZINC_OK) {
    /* Other ranks may be waiting in a collective: exit without the
     * (collective) destroy and let the launcher end the job. */
    if (!r.reported)
      fprintf(stderr, "gpt_train: rank %d: %s failed: %s: %s\n", r.rank, what,
              zinc_status_name(st), zinc_last_error());
    return 1;
  }
  if (r.rank == 0 && r.args.ckpt_dir)
    printf("checkpoints: %s (latest: global_step%lld)\n", r.args.ckpt_dir,
           (long long)(r.args.steps > start_step ? r.args.steps : start_step));
  run_free(&r);
  zinc_engine_destroy(r.tr.e);
  return 0;
}
