/*
 * zinc_math.h — per-element arithmetic written once and shared by the CPU
 * CPU kernels (cpu_kernels*.c) and the CUDA kernels (*.cu) beside it:
 * 16-bit conversions, the element updates of every optimizer (Adam/AdamW,
 * Lamb's two passes, Lion, Adagrad, SGD) over master and state slots in
 * fp32 or bf16 (rounded to nearest even or stochastically, with counter-
 * hashed draws), the canonical order of the sum of squares, and the
 * argument structs the kernels take.
 *
 * Bitwise agreement rules:
 *  - every function here spells out its operation order and uses fmaf()
 *    exactly where the SIMD paths fuse, so the scalar, AVX2, AVX-512 and
 *    CUDA paths give the same bits (compile with -ffp-contract=off and, for
 *    nvcc, --fmad=false so that nothing else gets fused);
 *  - division and square root are IEEE correctly rounded on every path.
 */
#ifndef ZINC_MATH_H
#define ZINC_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZINC_HD __host__ __device__ __forceinline__
#else
#define ZINC_HD __attribute__((always_inline)) inline
#include <math.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- bit casting */

static ZINC_HD uint32_t zinc_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

static ZINC_HD float zinc_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

/* ---------------------------------------------------------------- bf16 */

/* fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static ZINC_HD uint16_t zinc_f32_to_bf16(float f) {
  uint32_t u = zinc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static ZINC_HD float zinc_bf16_to_f32(uint16_t h) {
  return zinc_bits_f32((uint32_t)h << 16);
}

/* ---------------------------------------------------------------- fp16 */

/* fp32 -> IEEE binary16, round to nearest even, overflow to inf, NaN kept. */
static ZINC_HD uint16_t zinc_f32_to_f16(float f) {
  uint32_t u = zinc_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x0200u : 0u));
  if (a >= 0x477ff000u) /* rounds to >= 65520: overflow */
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
    if (a < 0x33000000u) /* below half the smallest subnormal: +-0 */
      return (uint16_t)sign;
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u)))
      half++;
    return (uint16_t)(sign | half);
  }
  /* normal: rebias exponent 127 -> 15 and round 13 bits away */
  uint32_t r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

static ZINC_HD float zinc_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t m = (uint32_t)h & 0x3ffu;
  if (e == 0x1fu)
    return zinc_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0)
      return zinc_bits_f32(sign);
    /* subnormal: normalise */
    e = 1;
    while (!(m & 0x400u)) {
      m <<= 1;
      e--;
    }
    m &= 0x3ffu;
    return zinc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  }
  return zinc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Load/store one element of a zinc_dtype (0 f32, 1 bf16, 2 f16). */
static ZINC_HD float zinc_load_as_f32(const void *base, int64_t i, int dtype) {
  if (dtype == 0)
    return ((const float *)base)[i];
  if (dtype == 1)
    return zinc_bf16_to_f32(((const uint16_t *)base)[i]);
  return zinc_f16_to_f32(((const uint16_t *)base)[i]);
}

static ZINC_HD void zinc_store_from_f32(void *base, int64_t i, int dtype, float v) {
  if (dtype == 0)
    ((float *)base)[i] = v;
  else if (dtype == 1)
    ((uint16_t *)base)[i] = zinc_f32_to_bf16(v);
  else
    ((uint16_t *)base)[i] = zinc_f32_to_f16(v);
}

/* ------------------------------------------------ kernel arguments */

/* The optimizers (optimizer.type): every one is a per-element update over
 * the master and up to two state slots of the same length (fp32, or bf16:
 * zinc_opt_seg.master_dtype, state_dtype).
 *   kind      state slot 1 (exp_avg)    state slot 2 (exp_avg_sq)
 *   ADAM      first moment              second moment
 *   LAMB      first moment              second moment   (+ per-parameter norms)
 *   LION      momentum                  -
 *   ADAGRAD   -                         sum of squared gradients
 *   SGD       momentum buffer (when momentum > 0)  -
 */
typedef enum {
  ZINC_OPT_ADAM = 0,
  ZINC_OPT_LAMB,
  ZINC_OPT_LION,
  ZINC_OPT_ADAGRAD,
  ZINC_OPT_SGD,
  ZINC_OPT_KINDS
} zinc_opt_kind;

/* optimizer.type's name of a kind: "Adam" "Lamb" "Lion" "Adagrad" "SGD". */
static inline const char *zinc_opt_kind_str(int kind) {
  static const char *const names[ZINC_OPT_KINDS] = {"Adam", "Lamb", "Lion", "Adagrad", "SGD"};
  return kind >= 0 && kind < ZINC_OPT_KINDS ? names[kind] : "unknown";
}

/* The passes of one step. Every optimizer but Lamb is one UPDATE pass. Lamb
 * is two: UPDATE moves the moments and returns, per segment, the sums of
 * squares of the weights and of the update (the trust ratio's norms), and
 * APPLY moves the weights by step_size * lamb_ratio * update, recomputing
 * the update from the moments. */
enum { ZINC_OPT_PASS_UPDATE = 0, ZINC_OPT_PASS_APPLY = 1 };

/* One contiguous piece of a fused optimizer pass: master and the state
 * slots are shard slices of n elements (a slot the optimizer does not use
 * may be NULL), stored in fp32 or bf16 (master_dtype, state_dtype); grad
 * holds n elements of grad_dtype; if param_out is not NULL the updated
 * master, as stored, is also written there in param_dtype (the compute
 * copy), in the same pass.
 *
 * Storage (the two keys of DeepSpeed's bf16 section): master_dtype is
 * ZINC_F32 or ZINC_BF16 (bf16_master_weights_and_grads), state_dtype the
 * dtype of exp_avg and exp_avg_sq, ZINC_F32 or ZINC_BF16
 * (bf16_optimizer_states); any pair is accepted. A bf16 array is reached
 * through the _bf16 member of its union. Zero-initialised fields (f32, f32,
 * offset 0) are the fp32 layout, bit for bit. */
typedef struct {
  union {
    float *master;          /* (n) fp32, read and written      */
    uint16_t *master_bf16;  /* (n) bf16 when master_dtype is ZINC_BF16 */
  };
  union {
    float *exp_avg;         /* (n) fp32 state slot 1, or NULL  */
    uint16_t *exp_avg_bf16; /* (n) bf16 when state_dtype is ZINC_BF16 */
  };
  union {
    float *exp_avg_sq;         /* (n) fp32 state slot 2, or NULL */
    uint16_t *exp_avg_sq_bf16; /* (n) bf16 when state_dtype is ZINC_BF16 */
  };
  const void *grad;         /* (n) grad_dtype, read            */
  void *param_out;          /* (n) param_dtype, written, or NULL */
  int64_t n;
  int grad_dtype;           /* zinc_dtype */
  int param_dtype;          /* zinc_dtype */
  int decay;                /* 1: weight decay applies here    */
  int coef;                 /* index into the pass's coefficient table
                               (a parameter group)             */
  float lamb_ratio;         /* Lamb APPLY: the clamped trust ratio of the
                               parameter this segment belongs to */
  int master_dtype;         /* zinc_dtype of master: ZINC_F32 (0) or ZINC_BF16 */
  int state_dtype;          /* zinc_dtype of exp_avg, exp_avg_sq: ZINC_F32 (0) or ZINC_BF16 */
  int64_t global_offset;    /* the index of element 0 in the optimizer's global
                               element order, the same whatever the stage, rank
                               or piece: the counter of stochastic rounding's
                               draws (zinc_sr_draw) */
} zinc_opt_seg;

/* Widening n bf16 values in place into an f32 buffer of n: the values are
 * put in the buffer's upper half (zinc_bf16_upper), then widened forwards
 * (element i is read before dst[i] is written, and dst[i] ends before
 * element i + 1 starts). */
static ZINC_HD uint16_t *zinc_bf16_upper(float *dst, int64_t n) {
  return (uint16_t *)((char *)dst + n * 2);
}
static ZINC_HD void zinc_bf16_widen_upper(float *dst, int64_t n) {
  const uint16_t *h = zinc_bf16_upper(dst, n);
  for (int64_t i = 0; i < n; i++)
    dst[i] = zinc_bf16_to_f32(h[i]);
}

/* The optimizer arrays of s from element `off` on, each in its dtype (a
 * NULL slot stays NULL); nothing else is set (a piece cut from a segment
 * also advances its global_offset by off: stochastic rounding's counter). */
static ZINC_HD void zinc_opt_seg_slots_at(zinc_opt_seg *w, const zinc_opt_seg *s, int64_t off) {
  int64_t m = s->master_dtype == 1 ? 2 : 4, st = s->state_dtype == 1 ? 2 : 4;
  w->master = s->master ? (float *)((char *)s->master + off * m) : NULL;
  w->exp_avg = s->exp_avg ? (float *)((char *)s->exp_avg + off * st) : NULL;
  w->exp_avg_sq = s->exp_avg_sq ? (float *)((char *)s->exp_avg_sq + off * st) : NULL;
}

/* A chunk whose sum of squares is wanted (gradient norm, overflow check). */
typedef struct {
  const void *data;         /* (n) dtype */
  int64_t n;
  int dtype;                /* zinc_dtype */
} zinc_sumsq_chunk;

/* Coefficients of one optimizer step for one parameter group, computed
 * once on the host in double and rounded to float (zinc_opt_coef_init in
 * optim/optimizer.c). Which fields an optimizer reads is stated beside it. */
typedef struct zinc_opt_coef {
  int kind;               /* zinc_opt_kind                                       */
  float grad_scale;       /* 1 / (loss_scale * dp_size * accumulation) * clip   */
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float step_size;        /* Adam: lr / (1 - beta1^t)    (lr when no bias correction);
                             Lamb: lr * sqrt(1 - beta2^t) / (1 - beta1^t); others: lr */
  float inv_sqrt_bc2;     /* Adam: 1 / sqrt(1 - beta2^t) (1 when no bias correction)  */
  float weight_decay;     /* L2 coefficient added to the gradient (Adam with
                             adam_w_mode false, Adagrad, SGD); Lamb's decay term */
  float decay_factor;     /* 1 - lr * weight_decay (AdamW, Lion)                */
  int adamw;              /* Adam: 1 decoupled weight decay                     */
  /* SGD */
  float momentum;         /* 0: no momentum buffer                              */
  float one_minus_dampening;
  int nesterov;
  int first_step;         /* 1: the momentum buffer starts as the gradient      */
  /* Lamb */
  float min_coeff, max_coeff;
  /* Values stored in bf16 (a segment's master_dtype or state_dtype): */
  int bf16_rounding;      /* ZINC_ROUND_NEAREST_EVEN (0) or ZINC_ROUND_STOCHASTIC */
  uint64_t rounding_seed; /* stochastic: the run's seed                          */
  int64_t rounding_step;  /* stochastic: the step these coefficients are for     */
} zinc_opt_coef;

/* How a value computed in fp32 is stored to bf16 (zinc_opt_coef.bf16_rounding). */
enum { ZINC_ROUND_NEAREST_EVEN = 0, ZINC_ROUND_STOCHASTIC = 1 };

/* ---------------------------------------------------------- optimizers */

/* Weight decay applies only where the segment's decay flag is 1, for every
 * optimizer (the `decay` argument below). */

/* One element of Adam/AdamW. The order below is the contract every path
 * follows:
 *   g  = g * grad_scale
 *   g  = fma(weight_decay, p, g)                 (Adam with L2, decay on)
 *   m  = fma(beta1, m, one_minus_beta1 * g)
 *   v  = fma(beta2, v, (one_minus_beta2 * g) * g)
 *   d  = fma(sqrt(v), inv_sqrt_bc2, eps)
 *   p  = p * decay_factor                        (AdamW, decay on)
 *   p  = fma(-step_size, m / d, p)
 */
static ZINC_HD void zinc_adam_elem(const zinc_opt_coef *c, int decay, float *p,
                                   float *m, float *v, float g) {
  float pv = *p;
  g = g * c->grad_scale;
  if (decay && !c->adamw)
    g = fmaf(c->weight_decay, pv, g);
  float mv = fmaf(c->beta1, *m, c->one_minus_beta1 * g);
  float vv = fmaf(c->beta2, *v, (c->one_minus_beta2 * g) * g);
  float d = fmaf(sqrtf(vv), c->inv_sqrt_bc2, c->eps);
  if (decay && c->adamw)
    pv = pv * c->decay_factor;
  pv = fmaf(-c->step_size, mv / d, pv);
  *p = pv;
  *m = mv;
  *v = vv;
}

/* One element of Lion (DeepSpeed's CPU Lion). The order:
 *   g  = g * grad_scale
 *   c  = fma(beta1, m, one_minus_beta1 * g)
 *   p  = p * decay_factor                        (decay on)
 *   p  = p - copysign(step_size, c)              (+-lr also when c is 0)
 *   m  = fma(beta2, m, one_minus_beta2 * g)
 */
static ZINC_HD void zinc_lion_elem(const zinc_opt_coef *c, int decay, float *p, float *m,
                                   float g) {
  float pv = *p;
  g = g * c->grad_scale;
  float cv = fmaf(c->beta1, *m, c->one_minus_beta1 * g);
  if (decay)
    pv = pv * c->decay_factor;
  pv = pv - copysignf(c->step_size, cv);
  *m = fmaf(c->beta2, *m, c->one_minus_beta2 * g);
  *p = pv;
}

/* One element of Adagrad (torch.optim.Adagrad, lr_decay 0). The order:
 *   g  = g * grad_scale
 *   g  = fma(weight_decay, p, g)                 (decay on)
 *   s  = fma(g, g, s)
 *   p  = fma(-step_size, g / (sqrt(s) + eps), p)
 */
static ZINC_HD void zinc_adagrad_elem(const zinc_opt_coef *c, int decay, float *p, float *s,
                                      float g) {
  float pv = *p;
  g = g * c->grad_scale;
  if (decay)
    g = fmaf(c->weight_decay, pv, g);
  float sv = fmaf(g, g, *s);
  *p = fmaf(-c->step_size, g / (sqrtf(sv) + c->eps), pv);
  *s = sv;
}

/* One element of SGD (torch.optim.SGD). buf is read and written only when
 * momentum is not 0 (it may be NULL otherwise). The order:
 *   d   = g * grad_scale
 *   d   = fma(weight_decay, p, d)                (decay on)
 *   buf = d                                      (momentum, first step)
 *   buf = fma(momentum, buf, one_minus_dampening * d)  (momentum, later steps)
 *   d   = fma(momentum, buf, d)                  (momentum, nesterov)
 *   d   = buf                                    (momentum, not nesterov)
 *   p   = fma(-step_size, d, p)
 */
static ZINC_HD void zinc_sgd_elem(const zinc_opt_coef *c, int decay, float *p, float *buf,
                                  float g) {
  float pv = *p;
  float d = g * c->grad_scale;
  if (decay)
    d = fmaf(c->weight_decay, pv, d);
  if (c->momentum != 0.0f) {
    float b = c->first_step ? d : fmaf(c->momentum, *buf, c->one_minus_dampening * d);
    *buf = b;
    d = c->nesterov ? fmaf(c->momentum, b, d) : b;
  }
  *p = fmaf(-c->step_size, d, pv);
}

/* Lamb's update direction from the moved moments (DeepSpeed's FusedLamb:
 * eps outside the square root, no bias correction here; it is in
 * step_size). The order:
 *   u  = m / (sqrt(v) + eps)
 *   u  = fma(weight_decay, p, u)                 (decay on)
 */
static ZINC_HD float zinc_lamb_dir(const zinc_opt_coef *c, int decay, float p, float m,
                                   float v) {
  float u = m / (sqrtf(v) + c->eps);
  if (decay)
    u = fmaf(c->weight_decay, p, u);
  return u;
}

/* One element of Lamb's UPDATE pass: moves the moments, leaves p, and
 * returns the update u (zinc_lamb_dir), whose sum of squares over the
 * parameter feeds the trust ratio. The order:
 *   g  = g * grad_scale
 *   m  = fma(beta1, m, one_minus_beta1 * g)
 *   v  = fma(beta2, v, (one_minus_beta2 * g) * g)
 *   u  = zinc_lamb_dir(p, m, v)
 */
static ZINC_HD float zinc_lamb_update_elem(const zinc_opt_coef *c, int decay, float p,
                                           float *m, float *v, float g) {
  g = g * c->grad_scale;
  float mv = fmaf(c->beta1, *m, c->one_minus_beta1 * g);
  float vv = fmaf(c->beta2, *v, (c->one_minus_beta2 * g) * g);
  *m = mv;
  *v = vv;
  return zinc_lamb_dir(c, decay, p, mv, vv);
}

/* One element of Lamb's APPLY pass, with ratio the parameter's clamped
 * trust ratio (zinc_opt_seg.lamb_ratio): the update is recomputed from the
 * moments the UPDATE pass left (the same bits), then
 *   s  = step_size * ratio                       (once per segment)
 *   p  = fma(-s, zinc_lamb_dir(p, m, v), p)
 */
static ZINC_HD void zinc_lamb_apply_elem(const zinc_opt_coef *c, int decay, float ratio,
                                         float *p, float m, float v) {
  float pv = *p;
  float step = c->step_size * ratio;
  *p = fmaf(-step, zinc_lamb_dir(c, decay, pv, m, v), pv);
}

/* ------------------------------------------- master and state in bf16 */

/* A master or state slot stored in bf16 (DeepSpeed's
 * bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states; a
 * segment's master_dtype and state_dtype): each element is loaded and
 * widened to fp32, the optimizer's element function above runs on it
 * unchanged (the same operations and fused multiply-adds, on the values in
 * registers: the new master comes from the new moments before they are
 * rounded, as on the fp32 path and in DeepSpeed's CPU Adam), and each new
 * value is rounded to bf16 as it is stored:
 *  - ZINC_ROUND_NEAREST_EVEN: zinc_f32_to_bf16 (DeepSpeed's rounding);
 *  - ZINC_ROUND_STOCHASTIC: zinc_f32_to_bf16_sr with the element's 16-bit
 *    draw for that slot (zinc_sr_draw): up with probability (low 16 bits
 *    of x) / 2^16, so the expected stored value is x (a finite x above the
 *    largest bf16 may round to inf with that probability).
 * The compute copy (param_out) is the master as stored. Lamb's UPDATE
 * returns the update u computed from the moments as stored, since APPLY
 * recomputes u from them: the trust ratio belongs to the update applied.
 *
 * The draws are a pure function of (rounding_seed, rounding_step, the
 * element's global index, slot), so they do not depend on threads, SIMD
 * width, pieces, stage or placement, and a run is bitwise reproducible.
 * One 32-bit hash per element and stream s (0: master and exp_avg, 1:
 * exp_avg_sq), with lo and hi the index's lower and upper 32 bits:
 *   key    = fmix64(seed + fmix64(step))                 once per pass
 *   base_s = mix32(hi ^ (key >> 32) ^ s * 0x9e3779b9) ^ (key & 0xffffffff)
 *   h_s    = mix32(lo ^ base_s)
 *   draw: master h_0 & 0xffff, exp_avg h_0 >> 16, exp_avg_sq h_1 & 0xffff
 * fmix64 is splitmix64's output function (as in TERN2's draws,
 * codec_math.h); mix32 is a 32-bit xorshift-multiply hash (its 32-bit
 * multiplies vectorise on AVX2, which has no 64-bit one). Both are
 * bijections: within a stream, distinct indices never share an input. */
enum { ZINC_SR_MASTER = 0, ZINC_SR_EXP_AVG = 1, ZINC_SR_EXP_AVG_SQ = 2 };

static ZINC_HD uint64_t zinc_sr_fmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static ZINC_HD uint32_t zinc_sr_mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

static ZINC_HD uint64_t zinc_sr_key(uint64_t seed, int64_t step) {
  return zinc_sr_fmix64(seed + zinc_sr_fmix64((uint64_t)step));
}

/* base_s for the indices whose upper 32 bits are hi. */
static ZINC_HD uint32_t zinc_sr_base(uint64_t key, uint32_t hi, int stream) {
  return zinc_sr_mix32(hi ^ (uint32_t)(key >> 32) ^ (stream ? 0x9e3779b9u : 0u)) ^
         (uint32_t)key;
}

/* The 16-bit draw of slot (ZINC_SR_*) for the element of global index i. */
static ZINC_HD uint32_t zinc_sr_draw(uint64_t key, int64_t i, int slot) {
  uint64_t u = (uint64_t)i;
  uint32_t h = zinc_sr_mix32((uint32_t)u ^ zinc_sr_base(key, (uint32_t)(u >> 32),
                                                         slot == ZINC_SR_EXP_AVG_SQ));
  return slot == ZINC_SR_EXP_AVG ? h >> 16 : h & 0xffffu;
}

/* fp32 -> bf16 rounded stochastically with the draw r (0 .. 0xffff): the
 * upper half of x + r, i.e. up with probability (low half of x) / 2^16;
 * NaN as zinc_f32_to_bf16; +-inf and values already bf16 stay exact. */
static ZINC_HD uint16_t zinc_f32_to_bf16_sr(float f, uint32_t r) {
  uint32_t u = zinc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + (r & 0xffffu)) >> 16);
}

/* One pass's storage as its element functions see it. */
typedef struct {
  int master_bf16; /* master holds bf16                       */
  int state_bf16;  /* exp_avg and exp_avg_sq hold bf16         */
  int stochastic;  /* bf16 stores round stochastically          */
  uint64_t key;    /* zinc_sr_key(rounding_seed, rounding_step) */
} zinc_opt_store;

static ZINC_HD zinc_opt_store zinc_opt_store_of(const zinc_opt_coef *c, int master_dtype,
                                                int state_dtype) {
  zinc_opt_store s;
  s.master_bf16 = master_dtype == 1;
  s.state_bf16 = state_dtype == 1;
  s.stochastic = c->bf16_rounding == ZINC_ROUND_STOCHASTIC;
  s.key = s.stochastic ? zinc_sr_key(c->rounding_seed, c->rounding_step) : 0;
  return s;
}

static ZINC_HD float zinc_slot_load(const void *base, int64_t i, int bf16) {
  return bf16 ? zinc_bf16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* Stores x to element i of a slot (global index gi); returns it as stored. */
static ZINC_HD float zinc_slot_store(void *base, int64_t i, int bf16, const zinc_opt_store *st,
                                     int64_t gi, int slot, float x) {
  if (!bf16) {
    ((float *)base)[i] = x;
    return x;
  }
  uint16_t h = st->stochastic ? zinc_f32_to_bf16_sr(x, zinc_sr_draw(st->key, gi, slot))
                              : zinc_f32_to_bf16(x);
  ((uint16_t *)base)[i] = h;
  return zinc_bf16_to_f32(h);
}

/* Element i (global index gi) of Adam over any storage; returns the new
 * master as stored. */
static ZINC_HD float zinc_adam_elem_st(const zinc_opt_coef *c, int decay,
                                       const zinc_opt_store *st, void *p, void *m, void *v,
                                       int64_t i, int64_t gi, float g) {
  float pv = zinc_slot_load(p, i, st->master_bf16);
  float mv = zinc_slot_load(m, i, st->state_bf16), vv = zinc_slot_load(v, i, st->state_bf16);
  zinc_adam_elem(c, decay, &pv, &mv, &vv, g);
  zinc_slot_store(m, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG, mv);
  zinc_slot_store(v, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG_SQ, vv);
  return zinc_slot_store(p, i, st->master_bf16, st, gi, ZINC_SR_MASTER, pv);
}

static ZINC_HD float zinc_lion_elem_st(const zinc_opt_coef *c, int decay,
                                       const zinc_opt_store *st, void *p, void *m, int64_t i,
                                       int64_t gi, float g) {
  float pv = zinc_slot_load(p, i, st->master_bf16), mv = zinc_slot_load(m, i, st->state_bf16);
  zinc_lion_elem(c, decay, &pv, &mv, g);
  zinc_slot_store(m, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG, mv);
  return zinc_slot_store(p, i, st->master_bf16, st, gi, ZINC_SR_MASTER, pv);
}

/* Adagrad's sum of squares lives in slot 2 (exp_avg_sq). */
static ZINC_HD float zinc_adagrad_elem_st(const zinc_opt_coef *c, int decay,
                                          const zinc_opt_store *st, void *p, void *s,
                                          int64_t i, int64_t gi, float g) {
  float pv = zinc_slot_load(p, i, st->master_bf16), sv = zinc_slot_load(s, i, st->state_bf16);
  zinc_adagrad_elem(c, decay, &pv, &sv, g);
  zinc_slot_store(s, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG_SQ, sv);
  return zinc_slot_store(p, i, st->master_bf16, st, gi, ZINC_SR_MASTER, pv);
}

/* SGD's momentum buffer lives in slot 1 (exp_avg); buf is NULL when
 * momentum is 0. */
static ZINC_HD float zinc_sgd_elem_st(const zinc_opt_coef *c, int decay,
                                      const zinc_opt_store *st, void *p, void *buf, int64_t i,
                                      int64_t gi, float g) {
  float pv = zinc_slot_load(p, i, st->master_bf16);
  if (c->momentum == 0.0f) {
    zinc_sgd_elem(c, decay, &pv, NULL, g);
  } else {
    float b = zinc_slot_load(buf, i, st->state_bf16);
    zinc_sgd_elem(c, decay, &pv, &b, g);
    zinc_slot_store(buf, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG, b);
  }
  return zinc_slot_store(p, i, st->master_bf16, st, gi, ZINC_SR_MASTER, pv);
}

/* Lamb UPDATE: moves the moments, leaves p; *w receives the weight (p as
 * stored, widened) and the return value is u from the moments as stored. */
static ZINC_HD float zinc_lamb_update_elem_st(const zinc_opt_coef *c, int decay,
                                              const zinc_opt_store *st, const void *p, void *m,
                                              void *v, int64_t i, int64_t gi, float g,
                                              float *w) {
  float pv = zinc_slot_load(p, i, st->master_bf16);
  float mv = zinc_slot_load(m, i, st->state_bf16), vv = zinc_slot_load(v, i, st->state_bf16);
  (void)zinc_lamb_update_elem(c, decay, pv, &mv, &vv, g);
  mv = zinc_slot_store(m, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG, mv);
  vv = zinc_slot_store(v, i, st->state_bf16, st, gi, ZINC_SR_EXP_AVG_SQ, vv);
  *w = pv;
  return zinc_lamb_dir(c, decay, pv, mv, vv);
}

static ZINC_HD float zinc_lamb_apply_elem_st(const zinc_opt_coef *c, int decay, float ratio,
                                             const zinc_opt_store *st, void *p, const void *m,
                                             const void *v, int64_t i, int64_t gi) {
  float pv = zinc_slot_load(p, i, st->master_bf16);
  zinc_lamb_apply_elem(c, decay, ratio, &pv, zinc_slot_load(m, i, st->state_bf16),
                       zinc_slot_load(v, i, st->state_bf16));
  return zinc_slot_store(p, i, st->master_bf16, st, gi, ZINC_SR_MASTER, pv);
}

/* --------------------------------------------------------- sum of squares */

/* The canonical order of a chunk's sum of squares (used for the gradient
 * norm, so that it depends only on the values and never on the number of
 * threads or the SIMD width):
 *   - the chunk is cut into blocks of ZINC_SUMSQ_BLOCK elements;
 *   - inside a block, lane j (0..15) accumulates in double the squares of
 *     elements j, j+16, j+32, ... (x*x is exact in double, so fused or not
 *     gives the same result);
 *   - the 16 lanes are combined as ((l0+l8)+(l4+l12)) + ((l2+l10)+(l6+l14))
 *     + ... — precisely: first l[j] += l[j+8] for j<8, then l[j] += l[j+4]
 *     for j<4, then l[j] += l[j+2] for j<2, then l[0] + l[1];
 *   - block sums are added in block order, starting from 0.0.
 */
#define ZINC_SUMSQ_BLOCK 4096
#define ZINC_SUMSQ_LANES 16

static ZINC_HD double zinc_sumsq_lanes_combine(double *l) {
  for (int j = 0; j < 8; j++)
    l[j] += l[j + 8];
  for (int j = 0; j < 4; j++)
    l[j] += l[j + 4];
  for (int j = 0; j < 2; j++)
    l[j] += l[j + 2];
  return l[0] + l[1];
}

/* Reference (scalar) implementation of one block of n <= ZINC_SUMSQ_BLOCK. */
static ZINC_HD double zinc_sumsq_block_ref(const void *data, int64_t start,
                                           int64_t n, int dtype) {
  double l[ZINC_SUMSQ_LANES];
  for (int j = 0; j < ZINC_SUMSQ_LANES; j++)
    l[j] = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double x = (double)zinc_load_as_f32(data, start + i, dtype);
    l[i % ZINC_SUMSQ_LANES] += x * x;
  }
  return zinc_sumsq_lanes_combine(l);
}

static ZINC_HD double zinc_sumsq_chunk_ref(const void *data, int64_t n, int dtype) {
  double s = 0.0;
  for (int64_t b = 0; b < n; b += ZINC_SUMSQ_BLOCK) {
    int64_t len = n - b < ZINC_SUMSQ_BLOCK ? n - b : ZINC_SUMSQ_BLOCK;
    s += zinc_sumsq_block_ref(data, b, len, dtype);
  }
  return s;
}

#ifdef __cplusplus
}
#endif
#endif /* ZINC_MATH_H */
