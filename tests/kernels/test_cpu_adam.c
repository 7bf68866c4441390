/* test_cpu_adam.c — each SIMD path of the fused Adam/AdamW kernel against
 * the scalar path (zinc_adam_elem itself), bit for bit: every grad dtype x
 * parameter-copy dtype (none, f32, bf16, f16) x Adam/AdamW x decay on/off,
 * odd lengths, misaligned starts, gradients over twelve decades with zeros,
 * infinities and NaNs, parameters that overflow f16 and fall into its
 * subnormals; long spans take the non-temporal store path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "optim/adam.h"
#include "kernels/cpu_kernels.h"
#include "kernels/kernel_test.h"

static const int64_t lengths[] = {1, 7, 15, 16, 17, 33, 127, 1001, 4099, 300007};
#define NLEN (int)(sizeof lengths / sizeof lengths[0])

typedef struct {
  test_buf p, m, v, g, out;
} adam_bufs;

static adam_bufs bufs_alloc(int64_t n, int gdt, int odt, int shift) {
  adam_bufs b;
  b.p = buf_alloc(n, 4, (shift + 1) % 16);
  b.m = buf_alloc(n, 4, (shift + 2) % 16);
  b.v = buf_alloc(n, 4, (shift + 3) % 16);
  b.g = buf_alloc(n, dt_bytes(gdt), (shift + 5) % 32);
  b.out = buf_alloc(n, odt < 0 ? 2 : dt_bytes(odt), (shift + 7) % 32);
  return b;
}

static void bufs_free(adam_bufs *b) {
  free(b->p.block);
  free(b->m.block);
  free(b->v.block);
  free(b->g.block);
  free(b->out.block);
}

static void fill_state(test_rng *r, adam_bufs *b, int gdt, int64_t n) {
  float *p = b->p.p, *m = b->m.p, *v = b->v.p;
  for (int64_t i = 0; i < n; i++) {
    p[i] = rng_decades(r, -9.0f, 5.5f); /* f16 subnormals .. beyond f16 max */
    m[i] = rng_decades(r, -6.0f, 0.0f);
    v[i] = fabsf(rng_decades(r, -12.0f, 0.0f));
    float g = rng_decades(r, -8.0f, 4.0f);
    switch (rng_u32(r) % 64) {
    case 0: g = 0.0f; break;
    case 1: g = INFINITY; break;
    case 2: g = -INFINITY; break;
    case 3: g = NAN; break;
    case 4: { /* a NaN with a random payload, signalling or quiet, raw bits */
      uint32_t u = rng_u32(r), sign = u & 1u;
      if (gdt == ZINC_F32)
        ((uint32_t *)b->g.p)[i] = sign << 31 | 0x7f800000u | (u >> 9) | 1u;
      else if (gdt == ZINC_BF16)
        ((uint16_t *)b->g.p)[i] = (uint16_t)(sign << 15 | 0x7f80u | ((u >> 8) & 0x7fu) | 1u);
      else
        ((uint16_t *)b->g.p)[i] = (uint16_t)(sign << 15 | 0x7c00u | ((u >> 8) & 0x3ffu) | 1u);
      continue;
    }
    default: break;
    }
    zinc_store_from_f32(b->g.p, i, gdt, g);
  }
}

/* Run the kernel on isa over copies of the same inputs; copies land in *dst. */
static void run_isa(zinc_cpu_isa isa, const zinc_opt_coef *c, const adam_bufs *src,
                    adam_bufs *dst, int64_t n, int gdt, int odt, int decay) {
  memcpy(dst->p.p, src->p.p, (size_t)n * 4);
  memcpy(dst->m.p, src->m.p, (size_t)n * 4);
  memcpy(dst->v.p, src->v.p, (size_t)n * 4);
  memcpy(dst->g.p, src->g.p, (size_t)n * dt_bytes(gdt));
  zinc_opt_seg seg = {.master = dst->p.p,
                      .exp_avg = dst->m.p,
                      .exp_avg_sq = dst->v.p,
                      .grad = dst->g.p,
                      .param_out = odt < 0 ? NULL : dst->out.p,
                      .n = n,
                      .grad_dtype = gdt,
                      .param_dtype = odt < 0 ? ZINC_F32 : odt,
                      .decay = decay,
                      .coef = 0,
                      .lamb_ratio = 0.0f};
  assert_int_equal(zinc_cpu_optim(NULL, isa, c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
}

static int64_t compare(const adam_bufs *want, const adam_bufs *got, int64_t n, int odt) {
  int64_t bad = test_compare_bits("master", got->p.p, want->p.p, n, ZINC_F32) +
                test_compare_bits("exp_avg", got->m.p, want->m.p, n, ZINC_F32) +
                test_compare_bits("exp_avg_sq", got->v.p, want->v.p, n, ZINC_F32);
  if (odt >= 0)
    bad += test_compare_bits("param_out", got->out.p, want->out.p, n, odt);
  return bad;
}

static void simd_matches_scalar(zinc_cpu_isa isa) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  test_rng r = {0x243F6A8885A308D3ull + (uint64_t)isa};
  zinc_opt_coef coef[2];
  /* a mid-training step with unscaling, and a first step without bias correction */
  assert_int_equal(zinc_adam_coef_init(&coef[0], 1e-3, 0.9, 0.999, 1e-8, 0.05, 0, 1, 7, 0.5),
                   ZINC_OK);
  assert_int_equal(zinc_adam_coef_init(&coef[1], 3e-2, 0.8, 0.99, 1e-6, 0.2, 0, 0, 1, 1.0),
                   ZINC_OK);
  int64_t failures = 0, runs = 0;
  for (int li = 0; li < NLEN; li++) {
    int64_t n = lengths[li];
    for (int gdt = 0; gdt < 3; gdt++)
      for (int odt = -1; odt < 3; odt++) {
        adam_bufs in = bufs_alloc(n, gdt, odt, li);
        adam_bufs want = bufs_alloc(n, gdt, odt, li + 1);
        adam_bufs got = bufs_alloc(n, gdt, odt, li + 2);
        fill_state(&r, &in, gdt, n);
        for (int adamw = 0; adamw < 2; adamw++)
          for (int decay = 0; decay < 2; decay++) {
            zinc_opt_coef c = coef[(li + adamw) & 1];
            c.adamw = adamw;
            run_isa(ZINC_CPU_ISA_SCALAR, &c, &in, &want, n, gdt, odt, decay);
            run_isa(isa, &c, &in, &got, n, gdt, odt, decay);
            int64_t bad = compare(&want, &got, n, odt);
            if (bad)
              fprintf(stderr, "%s: n %lld, grad %s, param_out %s, %s, decay %d: %lld "
                      "mismatching elements\n", zinc_cpu_isa_name(isa), (long long)n,
                      zinc_dtype_name(gdt), odt < 0 ? "none" : zinc_dtype_name(odt),
                      adamw ? "AdamW" : "Adam", decay, (long long)bad);
            failures += bad != 0;
            runs++;
          }
        bufs_free(&in);
        bufs_free(&want);
        bufs_free(&got);
      }
  }
  fprintf(stderr, "%s: %lld of %lld configurations bitwise equal to the scalar path\n",
          zinc_cpu_isa_name(isa), (long long)(runs - failures), (long long)runs);
  assert_int_equal(failures, 0);
}

static void avx2_matches_scalar(void **state) { simd_matches_scalar(ZINC_CPU_ISA_AVX2); }
static void avx512_matches_scalar(void **state) { simd_matches_scalar(ZINC_CPU_ISA_AVX512); }

/* Several segments of different dtypes in one call equal one call each. */
static void segments_are_independent(void **state) {
  zinc_cpu_isa isa = zinc_cpu_isa_select();
  test_rng r = {77};
  enum { NSEG = 4 };
  const int64_t n[NSEG] = {5, 40000, 17, 1003};
  const int gdt[NSEG] = {ZINC_BF16, ZINC_F32, ZINC_F16, ZINC_F32};
  const int odt[NSEG] = {ZINC_BF16, -1, ZINC_F16, ZINC_F32};
  adam_bufs in[NSEG], one[NSEG], all[NSEG];
  zinc_opt_seg segs[NSEG];
  zinc_opt_coef c;
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1, 3, 1.0), ZINC_OK);
  for (int s = 0; s < NSEG; s++) {
    in[s] = bufs_alloc(n[s], gdt[s], odt[s], s);
    one[s] = bufs_alloc(n[s], gdt[s], odt[s], s + 3);
    all[s] = bufs_alloc(n[s], gdt[s], odt[s], s + 5);
    fill_state(&r, &in[s], gdt[s], n[s]);
    run_isa(isa, &c, &in[s], &one[s], n[s], gdt[s], odt[s], s & 1);
    memcpy(all[s].p.p, in[s].p.p, (size_t)n[s] * 4);
    memcpy(all[s].m.p, in[s].m.p, (size_t)n[s] * 4);
    memcpy(all[s].v.p, in[s].v.p, (size_t)n[s] * 4);
    memcpy(all[s].g.p, in[s].g.p, (size_t)n[s] * dt_bytes(gdt[s]));
    segs[s] = (zinc_opt_seg){.master = all[s].p.p,
                             .exp_avg = all[s].m.p,
                             .exp_avg_sq = all[s].v.p,
                             .grad = all[s].g.p,
                             .param_out = odt[s] < 0 ? NULL : all[s].out.p,
                             .n = n[s],
                             .grad_dtype = gdt[s],
                             .param_dtype = odt[s] < 0 ? 0 : odt[s],
                             .decay = s & 1,
                             .coef = 0,
                             .lamb_ratio = 0.0f};
  }
  assert_int_equal(zinc_cpu_optim(NULL, isa, &c, 1, segs, NSEG, ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
  int64_t bad = 0;
  for (int s = 0; s < NSEG; s++) {
    bad += compare(&one[s], &all[s], n[s], odt[s]);
    bufs_free(&in[s]);
    bufs_free(&one[s]);
    bufs_free(&all[s]);
  }
  assert_int_equal(bad, 0);
}

static void bad_arguments(void **state) {
  zinc_opt_coef c;
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, 1, 1, 1.0), ZINC_OK);
  float x = 1.0f;
  zinc_opt_seg seg = {.master = &x,
                      .exp_avg = &x,
                      .exp_avg_sq = &x,
                      .grad = &x,
                      .param_out = NULL,
                      .n = 1,
                      .grad_dtype = 7,
                      .param_dtype = 0,
                      .decay = 0,
                      .coef = 0,
                      .lamb_ratio = 0.0f};
  assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  seg.grad_dtype = ZINC_F32;
  seg.n = -1;
  assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
  seg.n = 1;
  seg.grad = NULL;
  assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
  assert_int_equal(zinc_cpu_optim(NULL, ZINC_CPU_ISA_SCALAR, NULL, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_INVALID);
  assert_true(x == 1.0f); /* nothing touched */
  assert_int_equal(zinc_cpu_optim(NULL, (zinc_cpu_isa)9, &c, 1, NULL, 0, ZINC_OPT_PASS_UPDATE, NULL), ZINC_ERR_UNSUPPORTED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(avx2_matches_scalar),
      cmocka_unit_test(avx512_matches_scalar),
      cmocka_unit_test(segments_are_independent),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
