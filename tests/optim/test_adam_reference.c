/* test_adam_reference.c — zinc's Adam/AdamW against PyTorch: trajectories
 * of torch.optim.Adam (L2 decay, and no decay) and torch.optim.AdamW
 * (decoupled decay) made by make_adam_reference.py (adam_reference.bin),
 * replayed step by step on every path this CPU runs. PyTorch divides by
 * sqrt(v)/sqrt(bc2) + eps and folds the step size differently, so the
 * comparison is within abs 1e-6 + rel 1e-5 per element; the largest
 * difference is printed. Also the coefficients themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "optim/adam.h"
#include "kernels/cpu_kernels.h"

#define TOL_ABS 1e-6
#define TOL_REL 1e-5

#ifndef ZINC_ADAM_REFERENCE
#error "the build passes ZINC_ADAM_REFERENCE, the path of adam_reference.bin"
#endif

typedef struct {
  uint32_t ncases, n, steps;
  unsigned char *data; /* the whole file */
  size_t size;
} reference;

static int load_reference(reference *ref) {
  FILE *f = fopen(ZINC_ADAM_REFERENCE, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", ZINC_ADAM_REFERENCE);
    return 0;
  }
  fseek(f, 0, SEEK_END);
  ref->size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  ref->data = malloc(ref->size);
  size_t got = fread(ref->data, 1, ref->size, f);
  fclose(f);
  uint32_t hdr[4];
  if (got != ref->size || ref->size < 24 || memcmp(ref->data, "ZADAMREF", 8) != 0)
    return 0;
  memcpy(hdr, ref->data + 8, sizeof hdr);
  ref->ncases = hdr[1];
  ref->n = hdr[2];
  ref->steps = hdr[3];
  size_t per_case = 48 + (size_t)ref->n * 4 * (1 + 2 * ref->steps + 2);
  return hdr[0] == 1 && ref->size == 24 + ref->ncases * per_case;
}

/* Largest |got - want| / (TOL_ABS + TOL_REL |want|) over n values; > 1 fails. */
static double worst(const char *what, const float *want, const float *got, uint32_t n,
                    double *max_abs) {
  double w = 0.0;
  for (uint32_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    double q = d / (TOL_ABS + TOL_REL * fabs((double)want[i]));
    if (d > *max_abs)
      *max_abs = d;
    if (q > w)
      w = q;
    if (q > 1.0 && q == w)
      fprintf(stderr, "  %s[%u]: torch %.9g, zinc %.9g\n", what, i, want[i], got[i]);
  }
  return w;
}

static void replay_on(zinc_cpu_isa isa) {
  if (!zinc_cpu_isa_supported(isa)) {
    fprintf(stderr, "SKIPPED: this CPU cannot run the %s path\n", zinc_cpu_isa_name(isa));
    skip();
  }
  reference ref = {0};
  assert_true(load_reference(&ref));
  uint32_t n = ref.n;
  const unsigned char *at = ref.data + 24;
  float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
  int failed = 0;
  for (uint32_t k = 0; k < ref.ncases; k++) {
    double hp[5];
    int32_t adamw;
    memcpy(hp, at, sizeof hp);
    memcpy(&adamw, at + 40, 4);
    const float *arr = (const float *)(at + 48); /* 4-byte aligned: 24 + 48 + 4k */
    const float *p0 = arr, *grads = arr + n, *params = grads + (size_t)ref.steps * n;
    const float *m_final = params + (size_t)ref.steps * n, *v_final = m_final + n;
    memcpy(p, p0, n * 4);
    memset(m, 0, n * 4);
    memset(v, 0, n * 4);
    double q = 0.0, max_abs = 0.0;
    for (uint32_t t = 0; t < ref.steps; t++) {
      zinc_opt_coef c;
      assert_int_equal(zinc_adam_coef_init(&c, hp[0], hp[1], hp[2], hp[3], hp[4], adamw, 1,
                                           t + 1, 1.0), ZINC_OK);
      zinc_opt_seg seg = {.master = p,
                          .exp_avg = m,
                          .exp_avg_sq = v,
                          .grad = grads + (size_t)t * n,
                          .param_out = NULL,
                          .n = n,
                          .grad_dtype = ZINC_F32,
                          .param_dtype = ZINC_F32,
                          .decay = hp[4] > 0.0,
                          .coef = 0,
                          .lamb_ratio = 0.0f};
      assert_int_equal(zinc_cpu_optim(NULL, isa, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
      q = fmax(q, worst("param", params + (size_t)t * n, p, n, &max_abs));
    }
    q = fmax(q, worst("exp_avg", m_final, m, n, &max_abs));
    q = fmax(q, worst("exp_avg_sq", v_final, v, n, &max_abs));
    fprintf(stderr, "%s vs torch %s (lr %g, betas %g %g, eps %g, wd %g): largest difference "
            "%.3g, %.3f of the tolerance (abs %g + rel %g)\n", zinc_cpu_isa_name(isa),
            adamw ? "AdamW" : "Adam", hp[0], hp[1], hp[2], hp[3], hp[4], max_abs, q, TOL_ABS,
            TOL_REL);
    failed += q > 1.0;
    at += 48 + (size_t)n * 4 * (1 + 2 * ref.steps + 2);
  }
  free(p);
  free(m);
  free(v);
  free(ref.data);
  assert_int_equal(failed, 0);
}

static void scalar_vs_torch(void **state) { replay_on(ZINC_CPU_ISA_SCALAR); }
static void avx2_vs_torch(void **state) { replay_on(ZINC_CPU_ISA_AVX2); }
static void avx512_vs_torch(void **state) { replay_on(ZINC_CPU_ISA_AVX512); }

static void coefficients(void **state) {
  zinc_opt_coef c;
  /* step 3, bias correction: computed in double, rounded once */
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, 1e-8, 0.1, 1, 1, 3, 0.5), ZINC_OK);
  assert_true(c.step_size == (float)(1e-3 / (1.0 - 0.9 * 0.9 * 0.9)));
  assert_true(c.inv_sqrt_bc2 == (float)(1.0 / sqrt(1.0 - 0.999 * 0.999 * 0.999)));
  assert_true(c.decay_factor == (float)(1.0 - 1e-3 * 0.1));
  assert_true(c.one_minus_beta1 == (float)(1.0 - 0.9));
  assert_true(c.one_minus_beta2 == (float)(1.0 - 0.999));
  assert_true(c.weight_decay == 0.1f && c.grad_scale == 0.5f && c.eps == 1e-8f);
  assert_int_equal(c.adamw, 1);
  /* no bias correction */
  assert_int_equal(zinc_adam_coef_init(&c, 2e-3, 0.9, 0.999, 1e-8, 0.0, 0, 0, 50, 1.0), ZINC_OK);
  assert_true(c.step_size == 2e-3f && c.inv_sqrt_bc2 == 1.0f && c.adamw == 0);
  /* bad arguments leave the output alone */
  zinc_opt_coef before = c;
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, 1, 0, 1.0),
                   ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 1.0, 0.999, 1e-8, 0.0, 0, 1, 1, 1.0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_adam_coef_init(&c, -1e-3, 0.9, 0.999, 1e-8, 0.0, 0, 1, 1, 1.0),
                   ZINC_ERR_INVALID);
  assert_int_equal(zinc_adam_coef_init(&c, 1e-3, 0.9, 0.999, NAN, 0.0, 0, 1, 1, 1.0),
                   ZINC_ERR_INVALID);
  assert_memory_equal(&c, &before, sizeof c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scalar_vs_torch),
      cmocka_unit_test(avx2_vs_torch),
      cmocka_unit_test(avx512_vs_torch),
      cmocka_unit_test(coefficients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
