/*
 * cpu_kernels_isa.h — internal: the per-instruction-set inner loops behind
 * cpu_kernels.c. Each table works on one contiguous span on the calling
 * thread; cpu_kernels.c validates arguments and splits the work over the
 * pool. Every table gives the same bits as the scalar one (see
 * cpu_kernels.h); the SIMD tables finish a span's tail with the scalar
 * per-element functions of zinc_math.h.
 */
#ifndef ZINC_CPU_KERNELS_ISA_H
#define ZINC_CPU_KERNELS_ISA_H

#include <stdint.h>

#include "kernels/codec_math.h"
#include "kernels/cpu_kernels.h"
#include "kernels/zinc_math.h"

typedef struct {
  /* Adam over n elements: master p, exp_avg m, exp_avg_sq v (fp32), grad g
   * (gdt); out (odt) receives the new p unless NULL. */
  void (*adam)(const zinc_opt_coef *c, int decay, float *p, float *m, float *v,
               const void *g, int gdt, void *out, int odt, int64_t n);
  /* Lion over n elements: p, momentum m (fp32), grad g (gdt), out (odt) or NULL. */
  void (*lion)(const zinc_opt_coef *c, int decay, float *p, float *m, const void *g, int gdt,
               void *out, int odt, int64_t n);
  /* Adagrad: p, sum of squared gradients s (fp32), grad g, out. */
  void (*adagrad)(const zinc_opt_coef *c, int decay, float *p, float *s, const void *g,
                  int gdt, void *out, int odt, int64_t n);
  /* SGD: p, momentum buffer buf (fp32; NULL when c->momentum is 0), grad g, out. */
  void (*sgd)(const zinc_opt_coef *c, int decay, float *p, float *buf, const void *g, int gdt,
              void *out, int odt, int64_t n);
  /* Lamb UPDATE over one sum-of-squares block (n <= ZINC_SUMSQ_BLOCK, p at
   * the block's start): moves m, v; p is read; sums[0], sums[1] receive
   * zinc_sumsq_block_ref of the weights and of the update u. */
  void (*lamb_update)(const zinc_opt_coef *c, int decay, const float *p, float *m, float *v,
                      const void *g, int gdt, int64_t n, double sums[2]);
  /* Lamb APPLY with the segment's trust ratio: p moves, m and v are read. */
  void (*lamb_apply)(const zinc_opt_coef *c, int decay, float ratio, float *p, const float *m,
                     const float *v, void *out, int odt, int64_t n);
  /* The same six loops over master and state slots stored as st says
   * (fp32 or bf16; zinc_math.h's *_elem_st functions): p, m, v point to
   * element 0 of the span, whose global index is idx0 (the draws of
   * stochastic rounding); out receives the master as stored. */
  void (*adam_st)(const zinc_opt_coef *c, int decay, const zinc_opt_store *st, void *p,
                  void *m, void *v, const void *g, int gdt, void *out, int odt, int64_t idx0,
                  int64_t n);
  void (*lion_st)(const zinc_opt_coef *c, int decay, const zinc_opt_store *st, void *p,
                  void *m, const void *g, int gdt, void *out, int odt, int64_t idx0,
                  int64_t n);
  void (*adagrad_st)(const zinc_opt_coef *c, int decay, const zinc_opt_store *st, void *p,
                     void *s, const void *g, int gdt, void *out, int odt, int64_t idx0,
                     int64_t n);
  void (*sgd_st)(const zinc_opt_coef *c, int decay, const zinc_opt_store *st, void *p,
                 void *buf, const void *g, int gdt, void *out, int odt, int64_t idx0,
                 int64_t n);
  void (*lamb_update_st)(const zinc_opt_coef *c, int decay, const zinc_opt_store *st,
                         const void *p, void *m, void *v, const void *g, int gdt, int64_t idx0,
                         int64_t n, double sums[2]);
  void (*lamb_apply_st)(const zinc_opt_coef *c, int decay, float ratio,
                        const zinc_opt_store *st, void *p, const void *m, const void *v,
                        void *out, int odt, int64_t idx0, int64_t n);
  /* zinc_sumsq_block_ref of the n <= ZINC_SUMSQ_BLOCK elements at data. */
  double (*sumsq_block)(const void *data, int dtype, int64_t n);
  /* dst (f32) += src when accumulate, else dst (ddt) = src (sdt); n elements. */
  void (*convert)(void *dst, int ddt, const void *src, int sdt, int64_t n,
                  int accumulate);
  /* Block codec (kernels/codec_math.h) encode of blocks [b0, b1) of n
   * elements: scales, payload and (ef_q not NULL) the INT8 residual's
   * ef_scales and ef_q, indexed from the slice's start; b0 starts a group
   * (zinc_codec_group_blocks) so that no payload byte is shared with
   * another caller. omb = 1 - beta; seed: TERN2's draws. */
  void (*codec_encode)(int kind, int64_t block, float *scales, uint8_t *payload,
                       const void *src, int sdt, int64_t n, int64_t b0, int64_t b1,
                       float *ef_scales, uint8_t *ef_q, float beta, float omb, uint64_t seed);
  /* Block codec decode of elements [lo, hi) (indices from the slice's
   * start): dst (ddt) = value, or dst (f32) += value when accumulate. */
  void (*codec_decode)(int kind, int64_t block, void *dst, int ddt, const float *scales,
                       const uint8_t *payload, int64_t lo, int64_t hi, int accumulate);
} zinc_cpu_isa_ops;

/* The table of `isa` (cpu_kernels.c); ZINC_ERR_UNSUPPORTED naming `kernel`
 * when this CPU cannot run it. */
zinc_status zinc_cpu_isa_table(zinc_cpu_isa isa, const char *kernel,
                               const zinc_cpu_isa_ops **out);

extern const zinc_cpu_isa_ops zinc_cpu_ops_scalar;
#if defined(__x86_64__)
extern const zinc_cpu_isa_ops zinc_cpu_ops_avx2;
extern const zinc_cpu_isa_ops zinc_cpu_ops_avx512;
#endif

/* The scalar per-element loops, also used for the SIMD tails (inlined into
 * each caller so that they compile with the caller's instruction set). */
static ZINC_HD void zinc_cpu_adam_tail(const zinc_opt_coef *c, int decay, float *p,
                                       float *m, float *v, const void *g, int gdt,
                                       void *out, int odt, int64_t i, int64_t n) {
  for (; i < n; i++) {
    zinc_adam_elem(c, decay, &p[i], &m[i], &v[i], zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, p[i]);
  }
}

static ZINC_HD void zinc_cpu_lion_tail(const zinc_opt_coef *c, int decay, float *p, float *m,
                                       const void *g, int gdt, void *out, int odt, int64_t i,
                                       int64_t n) {
  for (; i < n; i++) {
    zinc_lion_elem(c, decay, &p[i], &m[i], zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, p[i]);
  }
}

static ZINC_HD void zinc_cpu_adagrad_tail(const zinc_opt_coef *c, int decay, float *p,
                                          float *s, const void *g, int gdt, void *out, int odt,
                                          int64_t i, int64_t n) {
  for (; i < n; i++) {
    zinc_adagrad_elem(c, decay, &p[i], &s[i], zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, p[i]);
  }
}

static ZINC_HD void zinc_cpu_sgd_tail(const zinc_opt_coef *c, int decay, float *p, float *buf,
                                      const void *g, int gdt, void *out, int odt, int64_t i,
                                      int64_t n) {
  for (; i < n; i++) {
    zinc_sgd_elem(c, decay, &p[i], buf ? &buf[i] : NULL, zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, p[i]);
  }
}

/* Elements [i, n) of a block: the update, and the squares of the weights
 * and of u added to lanes w and u in the canonical lane order (element i
 * of the block into lane i % ZINC_SUMSQ_LANES). */
static ZINC_HD void zinc_cpu_lamb_update_tail(const zinc_opt_coef *c, int decay,
                                              const float *p, float *m, float *v,
                                              const void *g, int gdt, double *w_lanes,
                                              double *u_lanes, int64_t i, int64_t n) {
  for (; i < n; i++) {
    double x = (double)p[i];
    double u = (double)zinc_lamb_update_elem(c, decay, p[i], &m[i], &v[i],
                                             zinc_load_as_f32(g, i, gdt));
    w_lanes[i % ZINC_SUMSQ_LANES] += x * x;
    u_lanes[i % ZINC_SUMSQ_LANES] += u * u;
  }
}

static ZINC_HD void zinc_cpu_lamb_apply_tail(const zinc_opt_coef *c, int decay, float ratio,
                                             float *p, const float *m, const float *v,
                                             void *out, int odt, int64_t i, int64_t n) {
  for (; i < n; i++) {
    zinc_lamb_apply_elem(c, decay, ratio, &p[i], m[i], v[i]);
    if (out)
      zinc_store_from_f32(out, i, odt, p[i]);
  }
}

/* The loops over any storage (zinc_math.h's *_elem_st), elements [i, n). */
static ZINC_HD void zinc_cpu_adam_st_tail(const zinc_opt_coef *c, int decay,
                                          const zinc_opt_store *st, void *p, void *m, void *v,
                                          const void *g, int gdt, void *out, int odt,
                                          int64_t idx0, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float pv = zinc_adam_elem_st(c, decay, st, p, m, v, i, idx0 + i, zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, pv);
  }
}

static ZINC_HD void zinc_cpu_lion_st_tail(const zinc_opt_coef *c, int decay,
                                          const zinc_opt_store *st, void *p, void *m,
                                          const void *g, int gdt, void *out, int odt,
                                          int64_t idx0, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float pv = zinc_lion_elem_st(c, decay, st, p, m, i, idx0 + i, zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, pv);
  }
}

static ZINC_HD void zinc_cpu_adagrad_st_tail(const zinc_opt_coef *c, int decay,
                                             const zinc_opt_store *st, void *p, void *s,
                                             const void *g, int gdt, void *out, int odt,
                                             int64_t idx0, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float pv =
        zinc_adagrad_elem_st(c, decay, st, p, s, i, idx0 + i, zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, pv);
  }
}

static ZINC_HD void zinc_cpu_sgd_st_tail(const zinc_opt_coef *c, int decay,
                                         const zinc_opt_store *st, void *p, void *buf,
                                         const void *g, int gdt, void *out, int odt,
                                         int64_t idx0, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float pv = zinc_sgd_elem_st(c, decay, st, p, buf, i, idx0 + i, zinc_load_as_f32(g, i, gdt));
    if (out)
      zinc_store_from_f32(out, i, odt, pv);
  }
}

/* Elements [i, n) of a block (idx0: the block's first global index). */
static ZINC_HD void zinc_cpu_lamb_update_st_tail(const zinc_opt_coef *c, int decay,
                                                 const zinc_opt_store *st, const void *p,
                                                 void *m, void *v, const void *g, int gdt,
                                                 int64_t idx0, double *w_lanes,
                                                 double *u_lanes, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float w;
    double u = (double)zinc_lamb_update_elem_st(c, decay, st, p, m, v, i, idx0 + i,
                                                zinc_load_as_f32(g, i, gdt), &w);
    double x = (double)w;
    w_lanes[i % ZINC_SUMSQ_LANES] += x * x;
    u_lanes[i % ZINC_SUMSQ_LANES] += u * u;
  }
}

static ZINC_HD void zinc_cpu_lamb_apply_st_tail(const zinc_opt_coef *c, int decay, float ratio,
                                                const zinc_opt_store *st, void *p,
                                                const void *m, const void *v, void *out,
                                                int odt, int64_t idx0, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float pv = zinc_lamb_apply_elem_st(c, decay, ratio, st, p, m, v, i, idx0 + i);
    if (out)
      zinc_store_from_f32(out, i, odt, pv);
  }
}

static ZINC_HD void zinc_cpu_convert_tail(void *dst, int ddt, const void *src, int sdt,
                                          int accumulate, int64_t i, int64_t n) {
  for (; i < n; i++) {
    float x = zinc_load_as_f32(src, i, sdt);
    if (accumulate)
      ((float *)dst)[i] += x;
    else
      zinc_store_from_f32(dst, i, ddt, x);
  }
}

/* Elements [i, n) of a block codec's decode, block by block (the scale
 * read once per block; the values are zinc_codec_decode_elem's). */
static ZINC_HD void zinc_cpu_codec_decode_tail(int kind, int64_t block, void *dst, int ddt,
                                               const float *scales, const uint8_t *payload,
                                               int accumulate, int64_t i, int64_t n) {
  while (i < n) {
    const float scale = scales[i / block];
    const int64_t end = (i / block + 1) * block < n ? (i / block + 1) * block : n;
    for (; i < end; i++) {
      int q = zinc_codec_payload_get(kind, payload, i);
      float v = kind == ZINC_CODEC_SIGN1 ? zinc_codec_sign1_value(q, scale)
                                         : zinc_codec_dequantize(q, scale);
      if (accumulate)
        ((float *)dst)[i] += v;
      else
        zinc_store_from_f32(dst, i, ddt, v);
    }
  }
}

/* Finish a block's lanes from element i on and combine them canonically. */
static ZINC_HD double zinc_cpu_sumsq_tail(double *lanes, const void *data, int dtype,
                                          int64_t i, int64_t n) {
  for (; i < n; i++) {
    double x = (double)zinc_load_as_f32(data, i, dtype);
    lanes[i % ZINC_SUMSQ_LANES] += x * x;
  }
  return zinc_sumsq_lanes_combine(lanes);
}

#endif /* ZINC_CPU_KERNELS_ISA_H */
