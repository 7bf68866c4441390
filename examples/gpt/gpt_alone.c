/*
 * gpt_alone.c — the GPT example's model trained alone, without zinc: one
 * process, all parameters in one array, a plain AdamW written here. It is
 * the yardstick for the zinc trainer: the speed of the model's own compute
 * (what gpt_train's tokens/s is compared against) and proof that the model
 * and its data learn, independent of the engine.
 *
 *   gpt_alone [--layers 2 --width 128 --heads 4 --seq 64 --batch 8
 *              --steps 300 --lr 3e-3 --threads N --seed S --data FILE]
 *
 * Prints the loss every 10 steps, then tokens/s and the mean loss of the
 * last 10 steps ("final loss"), then a sample.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt_args.h"
#include "gpt_data.h"
#include "gpt_model.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only),
 * gradients clipped to global norm 1, lr warmed up linearly over the first
 * 20 steps: what the example configs (examples/configs/) ask of zinc. */
typedef struct {
  float *m, *v;     // (num_params) first and second moments
  uint8_t *decay;   // (num_params) 1 where weight decay applies
} adamw;

static int adamw_init(adamw *o, const gpt_config *c, const gpt_params *p) {
  o->m = calloc((size_t)p->num_params, sizeof(float));
  o->v = calloc((size_t)p->num_params, sizeof(float));
  o->decay = calloc((size_t)p->num_params, 1);
  if (!o->m || !o->v || !o->decay)
    return -1;
  gpt_tensor_spec es[GPT_EMBED_NPARAMS], bs[GPT_BLOCK_NPARAMS], hs[GPT_HEAD_NPARAMS];
  gpt_embed_specs(c, es);
  gpt_block_specs(c, bs);
  for (int i = 0; i < GPT_EMBED_NPARAMS; i++)
    memset(o->decay + (p->embed.t[i] - p->memory), es[i].weight_decay,
           (size_t)gpt_spec_numel(&es[i]));
  for (int l = 0; l < c->num_layers; l++)
    for (int i = 0; i < GPT_BLOCK_NPARAMS; i++)
      memset(o->decay + (p->blocks[l].t[i] - p->memory), bs[i].weight_decay,
             (size_t)gpt_spec_numel(&bs[i]));
  (void)hs; /* the head holds LayerNorm parameters only: no decay */
  return 0;
}

static void adamw_step(adamw *o, gpt_params *p, const gpt_params *g, float lr,
                       int t) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
  double norm2 = 0;
  for (int64_t i = 0; i < p->num_params; i++)
    norm2 += (double)g->memory[i] * g->memory[i];
  float clip = norm2 > 1.0 ? (float)(1.0 / sqrt(norm2)) : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p->num_params; i++) {
    float grad = g->memory[i] * clip;
    o->m[i] = b1 * o->m[i] + (1.0f - b1) * grad;
    o->v[i] = b2 * o->v[i] + (1.0f - b2) * grad * grad;
    float update = (o->m[i] / bc1) / (sqrtf(o->v[i] / bc2) + eps);
    p->memory[i] -= lr * (update + (o->decay[i] ? wd * p->memory[i] : 0.0f));
  }
}

int main(int argc, char **argv) {
  gpt_args args;
  char err[512];
  if (gpt_args_parse(&args, argc, argv, err, sizeof(err)) != 0) {
    fprintf(stderr, "gpt_alone: %s\n", err);
    return 2;
  }
  if (args.help) {
    printf("usage: gpt_alone [flags]\n%s", gpt_args_usage());
    return 0;
  }
  if (!args.batch)
    args.batch = 8;
  int threads = gpt_threads_setup(&args);

  gpt_corpus corpus;
  int rc = args.data ? gpt_corpus_load(&corpus, args.data, err, sizeof(err))
                     : gpt_corpus_generate(&corpus, args.seed, args.corpus_bytes, err,
                                           sizeof(err));
  gpt_loader loader;
  if (rc != 0 || gpt_loader_init(&loader, &corpus, 0, 1, args.batch, args.seq, err,
                                 sizeof(err)) != 0) {
    fprintf(stderr, "gpt_alone: %s\n", err);
    return 1;
  }
  gpt_config cfg = {corpus.vocab_size, args.seq, args.layers, args.heads, args.width};
  int B = args.batch, T = args.seq;
  gpt_params params, grads;
  gpt_acts acts;
  adamw opt;
  int32_t *inputs = malloc((size_t)B * T * sizeof(int32_t));
  int32_t *targets = malloc((size_t)B * T * sizeof(int32_t));
  if (gpt_params_alloc(&params, &cfg) || gpt_params_alloc(&grads, &cfg) ||
      gpt_acts_alloc(&acts, &cfg, B, T) || adamw_init(&opt, &cfg, &params) ||
      !inputs || !targets) {
    fprintf(stderr, "gpt_alone: out of memory\n");
    return 1;
  }
  gpt_params_init(&params, &cfg, args.seed);
  printf("gpt_alone: L=%d C=%d heads=%d T=%d B=%d vocab=%d params=%lld threads=%d "
         "corpus=%lld tokens, ln(vocab)=%.3f\n",
         cfg.num_layers, cfg.channels, cfg.num_heads, T, B, cfg.vocab_size,
         (long long)params.num_params, threads,
         (long long)corpus.num_tokens, log((double)cfg.vocab_size));

  double t_start = now_s(), t_warm = t_start, last_losses[10] = {0};
  const int warm_steps = 5;
  for (int step = 1; step <= args.steps; step++) {
    if (step == warm_steps + 1)
      t_warm = now_s();
    gpt_loader_batch(&loader, step - 1, inputs, targets);
    float loss = gpt_model_forward(&cfg, &params, &acts, inputs, targets, B, T);
    memset(grads.memory, 0, (size_t)grads.num_params * sizeof(real));
    gpt_model_backward(&cfg, &params, &grads, &acts, inputs, targets, B, T);
    float lr = args.lr * (step < 20 ? (float)step / 20.0f : 1.0f);
    adamw_step(&opt, &params, &grads, lr, step);
    last_losses[step % 10] = loss;
    if (step % 10 == 0 || step == 1)
      printf("step %5d/%d | loss %.4f | %.1f s\n", step, args.steps, loss,
             now_s() - t_start);
  }
  double t_end = now_s();
  int timed = args.steps - warm_steps;
  double final = 0;
  for (int i = 0; i < 10; i++)
    final += last_losses[i] / 10;
  printf("tokens/s %.0f (%d steps of %d tokens, %.3f s/step) | final loss %.4f\n",
         timed > 0 ? (double)timed * B * T / (t_end - t_warm) : 0.0, timed, B * T,
         timed > 0 ? (t_end - t_warm) / timed : 0.0, final);

  if (args.sample > 0) {
    uint64_t rng = args.seed;
    int32_t ctx[8192];
    int len = 1;
    ctx[0] = corpus.byte_to_id['\n'] >= 0 ? corpus.byte_to_id['\n'] : 0;
    printf("sample: ");
    for (int i = 0; i < args.sample; i++) {
      int t = len < T ? len : T;
      gpt_model_forward(&cfg, &params, &acts, ctx + len - t, NULL, 1, t);
      int next = gpt_sample_token(acts.probs + (size_t)(t - 1) * cfg.vocab_size,
                                  cfg.vocab_size, 0.8f, &rng);
      putchar(corpus.id_to_byte[next]);
      if (len == (int)(sizeof(ctx) / sizeof(ctx[0]))) {
        memmove(ctx, ctx + len - T, (size_t)T * sizeof(int32_t));
        len = T;
      }
      ctx[len++] = next;
    }
    putchar('\n');
  }
  free(inputs);
  free(targets);
  free(opt.m);
  free(opt.v);
  free(opt.decay);
  gpt_acts_free(&acts);
  gpt_params_free(&params);
  gpt_params_free(&grads);
  gpt_corpus_free(&corpus);
  return 0;
}
