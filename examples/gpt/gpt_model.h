/*
 * gpt_model.h — a small GPT (GPT-2 layout) written out in plain C: the
 * parameter tensors of each module, the activations a trainer keeps, and the
 * forward and backward pass of every piece. Knows nothing about zinc: the
 * trainer (gpt_train.c) points the parameter structs at the tensors zinc
 * hands out, the tests point them at plain arrays.
 *
 * The model, module by module (one zinc module each in the trainer):
 *
 *   embed   x0 = wte[token] + wpe[position]                      (B, T, C)
 *   block l x  = x + attn_proj(causal_attention(qkv(ln1(x))))     (B, T, C)
 *           x  = x + fc_proj(gelu(fc(ln2(x))))
 *   head    logits = lnf(x) @ wte^T   (output tied to the token embedding)
 *           loss = mean over (B, T) of -log softmax(logits)[target]
 *
 * Conventions (llm.c's):
 *  - every tensor is row-major; its shape is written beside it;
 *  - weight matrices are (out_features, in_features);
 *  - every backward function ACCUMULATES (+=) into the gradients of its
 *    parameters and of its inputs, so a tensor used twice (the tied wte)
 *    receives both contributions, and activation-gradient scratch is zeroed
 *    by the caller before use.
 *
 * Determinism: every output element is computed by exactly one thread in a
 * fixed order of additions, so results are bitwise identical for any
 * number of OpenMP threads.
 *
 * `real` is float unless the file is compiled with -DGPT_REAL=double (the
 * gradient check compiles it a second time that way).
 */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifndef GPT_REAL
#define GPT_REAL float
#endif
typedef GPT_REAL real;

typedef struct {
  int vocab_size;  // V
  int max_seq_len; // maxT: rows of the position embedding
  int num_layers;  // L
  int num_heads;   // NH
  int channels;    // C (a multiple of NH)
} gpt_config;

/* ------------------------------------------------------------ parameters */

/* Each module's tensors, by name and as an array (same order as the specs). */
enum { GPT_EMBED_WTE, GPT_EMBED_WPE, GPT_EMBED_NPARAMS };
typedef union {
  struct {
    real *wte; // (V, C)     token embedding, also the output projection
    real *wpe; // (maxT, C)  position embedding
  };
  real *t[GPT_EMBED_NPARAMS];
} gpt_embed_params;

enum {
  GPT_BLOCK_LN1_W, GPT_BLOCK_LN1_B, GPT_BLOCK_QKV_W, GPT_BLOCK_QKV_B,
  GPT_BLOCK_ATTN_PROJ_W, GPT_BLOCK_ATTN_PROJ_B, GPT_BLOCK_LN2_W, GPT_BLOCK_LN2_B,
  GPT_BLOCK_FC_W, GPT_BLOCK_FC_B, GPT_BLOCK_FC_PROJ_W, GPT_BLOCK_FC_PROJ_B,
  GPT_BLOCK_NPARAMS
};
typedef union {
  struct {
    real *ln1_w;       // (C)
    real *ln1_b;       // (C)
    real *qkv_w;       // (3C, C)
    real *qkv_b;       // (3C)
    real *attn_proj_w; // (C, C)
    real *attn_proj_b; // (C)
    real *ln2_w;       // (C)
    real *ln2_b;       // (C)
    real *fc_w;        // (4C, C)
    real *fc_b;        // (4C)
    real *fc_proj_w;   // (C, 4C)
    real *fc_proj_b;   // (C)
  };
  real *t[GPT_BLOCK_NPARAMS];
} gpt_block_params;

enum { GPT_HEAD_LNF_W, GPT_HEAD_LNF_B, GPT_HEAD_NPARAMS };
typedef union {
  struct {
    real *lnf_w; // (C)
    real *lnf_b; // (C)
  };
  real *t[GPT_HEAD_NPARAMS];
} gpt_head_params;

typedef enum { GPT_INIT_ZEROS, GPT_INIT_ONES, GPT_INIT_NORMAL } gpt_init_kind;

/* What a trainer registers for one tensor. */
typedef struct {
  const char *name;      // unique within its module ("qkv_w")
  int ndim;              // 1 or 2
  int64_t shape[2];
  gpt_init_kind init;
  float std;             // GPT_INIT_NORMAL: standard deviation
  int weight_decay;      // 0 for biases and LayerNorm parameters
} gpt_tensor_spec;

void gpt_embed_specs(const gpt_config *c, gpt_tensor_spec out[GPT_EMBED_NPARAMS]);
void gpt_block_specs(const gpt_config *c, gpt_tensor_spec out[GPT_BLOCK_NPARAMS]);
void gpt_head_specs(const gpt_config *c, gpt_tensor_spec out[GPT_HEAD_NPARAMS]);
int64_t gpt_spec_numel(const gpt_tensor_spec *s);

/* Fill one tensor as its spec says. The values depend only on (seed,
 * stream), so every rank and every registration order gets the same ones;
 * callers pass a distinct stream per tensor (e.g. module * 64 + index). */
void gpt_tensor_init(const gpt_tensor_spec *s, uint64_t seed, uint64_t stream,
                     real *dst);

/* Parameters of the whole model laid out in one array (tests and the
 * standalone benchmark; the zinc trainer gets its tensors from zinc). */
typedef struct {
  gpt_embed_params embed;
  gpt_block_params *blocks; // [L]
  gpt_head_params head;
  real *memory;             // (num_params) owns every tensor above
  int64_t num_params;
} gpt_params;

/* Allocate (zeroed) and lay out; 0 on success, -1 when out of memory. */
int gpt_params_alloc(gpt_params *p, const gpt_config *c);
/* Initialise every tensor with gpt_tensor_init (stream = module*64 + index,
 * modules numbered embed 0, block l as l+1, head L+1: what the trainer does). */
void gpt_params_init(gpt_params *p, const gpt_config *c, uint64_t seed);
void gpt_params_free(gpt_params *p);

/* ----------------------------------------------------------- activations */

typedef struct {
  real *ln1;       // (B, T, C)
  real *ln1_mean;  // (B, T)
  real *ln1_rstd;  // (B, T)
  real *qkv;       // (B, T, 3C)   q, k, v of every head: [q_h0..q_hNH | k.. | v..]
  real *att;       // (B, NH, T, T) softmax probabilities (row t: keys 0..t)
  real *atty;      // (B, T, C)    attention output before the projection
  real *residual2; // (B, T, C)    x + attention
  real *ln2;       // (B, T, C)
  real *ln2_mean;  // (B, T)
  real *ln2_rstd;  // (B, T)
  real *fch;       // (B, T, 4C)   fc output before GELU
  real *fch_gelu;  // (B, T, 4C)
  real *out;       // (B, T, C)    block output = residual2 + MLP
} gpt_block_acts;

/* Everything the forward pass keeps for the backward pass, plus the
 * backward pass's scratch. One allocation; sized for B x T at most. */
typedef struct {
  int B, T;                // the largest batch and sequence it holds
  real *encoded;           // (B, T, C)    embed output = block 0 input
  gpt_block_acts *blocks;  // [L]
  real *lnf;               // (B, T, C)
  real *lnf_mean;          // (B, T)
  real *lnf_rstd;          // (B, T)
  real *probs;             // (B, T, V)    softmax of the logits
  real *losses;            // (B, T)       -log probs[target]
  /* backward scratch */
  real *dres;              // (B, T, C)    gradient of the residual stream
  real *dres2;             // (B, T, C)    ... at the block's midpoint
  real *dln;               // (B, T, C)    gradient of a LayerNorm output
  real *datty;             // (B, T, C)
  real *dqkv;              // (B, T, 3C)
  real *datt;              // (B, NH, T, T)
  real *dpreatt;           // (B, NH, T, T)
  real *dfch;              // (B, T, 4C)
  real *dfch_gelu;         // (B, T, 4C)
  real *dlogits;           // (B, T, V)
  real *memory;            // owns every buffer above
  size_t bytes;
} gpt_acts;

/* 0 on success, -1 when out of memory. */
int gpt_acts_alloc(gpt_acts *a, const gpt_config *c, int B, int T);
void gpt_acts_free(gpt_acts *a);

/* ------------------------------------------------------------ primitives
 * Exposed for the gradient check. N = number of rows (B*T). */

void gpt_layernorm_forward(real *out, real *mean, real *rstd, const real *inp,
                           const real *weight, const real *bias, int N, int C);
void gpt_layernorm_backward(real *dinp, real *dweight, real *dbias,
                            const real *dout, const real *inp,
                            const real *weight, const real *mean,
                            const real *rstd, int N, int C);
/* out (N, OC) = inp (N, C) @ weight^T (OC, C) + bias (OC, may be NULL) */
void gpt_matmul_forward(real *out, const real *inp, const real *weight,
                        const real *bias, int N, int C, int OC);
/* dinp, dweight and dbias may each be NULL (not wanted). */
void gpt_matmul_backward(real *dinp, real *dweight, real *dbias,
                         const real *dout, const real *inp, const real *weight,
                         int N, int C, int OC);
/* out (B, T, C), att (B, NH, T, T) from qkv (B, T, 3C); causal. */
void gpt_attention_forward(real *out, real *att, const real *qkv, int B, int T,
                           int C, int NH);
void gpt_attention_backward(real *dqkv, real *datt, real *dpreatt,
                            const real *dout, const real *qkv, const real *att,
                            int B, int T, int C, int NH);
void gpt_gelu_forward(real *out, const real *inp, int64_t n);
void gpt_gelu_backward(real *dinp, const real *inp, const real *dout, int64_t n);

/* --------------------------------------------------------------- modules */

/* encoded (B, T, C) = wte[tokens] + wpe[0..T). tokens: (B, T) in [0, V). */
void gpt_embed_forward(const gpt_config *c, const gpt_embed_params *p,
                       gpt_acts *a, const int32_t *tokens, int B, int T);
/* dres (B, T, C) -> dwte, dwpe (accumulated; grad->wte NULL: wte frozen, skipped). */
void gpt_embed_backward(const gpt_config *c, const gpt_embed_params *grad,
                        const gpt_acts *a, const int32_t *tokens, int B, int T);

/* Block l: inp (B, T, C) -> a->blocks[l].out. */
void gpt_block_forward(const gpt_config *c, const gpt_block_params *p,
                       gpt_acts *a, int l, const real *inp, int B, int T);
/* On entry a->dres holds d(out); on return it holds d(inp). Parameter
 * gradients are accumulated into grad. */
void gpt_block_backward(const gpt_config *c, const gpt_block_params *p,
                        const gpt_block_params *grad, gpt_acts *a, int l,
                        const real *inp, int B, int T);

/* Final LayerNorm, logits through the tied wte, softmax cross-entropy.
 * inp (B, T, C) is the last block's output; targets (B, T). Returns the
 * mean loss. With targets NULL only a->probs is computed (sampling). */
real gpt_head_forward(const gpt_config *c, const gpt_head_params *p,
                      const real *wte, gpt_acts *a, const real *inp,
                      const int32_t *targets, int B, int T);
/* Backward of dloss * (mean loss): sets a->dres = d(inp) (overwritten, not
 * accumulated), accumulates into grad (lnf) and dwte (NULL: wte frozen,
 * skipped). dloss is 1 for plain
 * training, the loss scale with fp16. */
void gpt_head_backward(const gpt_config *c, const gpt_head_params *p,
                       const gpt_head_params *grad, const real *wte,
                       real *dwte, gpt_acts *a, const real *inp,
                       const int32_t *targets, real dloss, int B, int T);

/* The whole model in one call, with every module in the order the trainer
 * runs them (tests and the standalone benchmark). */
real gpt_model_forward(const gpt_config *c, const gpt_params *p, gpt_acts *a,
                       const int32_t *inputs, const int32_t *targets, int B,
                       int T);
/* Accumulates into grads (same layout as p); a must hold the forward. */
void gpt_model_backward(const gpt_config *c, const gpt_params *p,
                        const gpt_params *grads, gpt_acts *a,
                        const int32_t *inputs, const int32_t *targets,
                        int B, int T);

/* Draw a token from one row of probabilities (V) at temperature `temp`,
 * advancing the caller's RNG state. */
int gpt_sample_token(const real *probs, int V, float temp, uint64_t *rng);

/* Block l's input: encoded for l = 0, else block l-1's out. */
static inline const real *gpt_block_input(const gpt_acts *a, int l) {
  return l == 0 ? a->encoded : a->blocks[l - 1].out;
}

#endif /* GPT_MODEL_H */
