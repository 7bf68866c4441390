/*
 * zinc_math.h — per-element arithmetic written once and shared by the CPU
 * CPU kernels (cpu_kernels*.c) and the CUDA kernels (*.cu) beside it:
 * 16-bit conversions, the element updates of every optimizer (Adam/AdamW,
 * Lamb's two passes, Lion, Adagrad, SGD), the canonical order of the sum
 * of squares, and the argument structs the kernels take.
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
 * the fp32 master and up to two fp32 state slots of the same length.
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
 * slots are fp32 shard slices of n elements (a slot the optimizer does not
 * use may be NULL); grad holds n elements of grad_dtype; if param_out is not
 * NULL the updated value is also written there in param_dtype (the compute
 * copy), in the same pass. */
typedef struct {
  float *master;            /* (n) fp32, read and written      */
  float *exp_avg;           /* (n) fp32 state slot 1, or NULL  */
  float *exp_avg_sq;        /* (n) fp32 state slot 2, or NULL  */
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
} zinc_opt_seg;

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
} zinc_opt_coef;

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
