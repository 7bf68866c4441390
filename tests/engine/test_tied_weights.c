/*
 * test_tied_weights.c — a weight used by two modules (the tied embedding
 * of GPT-2), through the call sequence zinc.h documents under "Shared
 * (tied) weights", under mpirun at 1, 2 and 4 ranks.
 *
 * The model, per sample (x: C inputs, t: C targets):
 *   embed    W (R, C)    u = W x                    (first use of W)
 *   mid      a (R)       v = a * u
 *   block_l  M_l (R, R)  z_l = M_l z_{l-1}, z_0 = v, l = 1..NBLOCK
 *   head     b (C)       y = W^T z + b, z = z_NBLOCK (second use of W:
 *                        head fetches embed as well)
 *   loss = 0.5 |y - t|^2
 * so dW = z dy^T (head's use) + (a * dz_0) x^T (embed's use), dz_0 the
 * gradient W dy carried back through the blocks: the head adds its share
 * into zinc_param_grad(W) with embed fetched inside head, releases embed
 * without grads_ready, and embed's own backward adds the second share
 * into the same buffer before grads_ready(embed). The blocks are larger
 * than W, so that W's area, held across their backward, and theirs fill
 * a ring sized for buckets of 500 or 1100 elements.
 *
 * Checked:
 *  - at every accumulation boundary, the reduced gradient of W, a, the
 *    blocks and b
 *    (zinc_param_get_full GRAD) against a double-precision reference that
 *    sums both uses of W by hand over every rank's samples and divides by
 *    ranks x accumulation steps;
 *  - with one micro-batch per step, the parameters after a few steps are
 *    bitwise the same at stages 0-3, with and without overlap_comm, with
 *    the optimizer offloaded to the CPU and (stage 3) the parameters too,
 *    and with a reduction bucket so small that W's area outlives the ring
 *    (a dedicated buffer); and the bucket sweep: 32 to 10^8 elements,
 *    stages 0-3, overlap_comm off and on, every run bitwise its bucket's
 *    stage-0 run, the ring's dedicated-buffer fallback taken from the
 *    second step on (the recorded order's replay) at 500 and 1100 (the
 *    finding: its release freed comm-shared memory with free(): every
 *    rank aborted). With accumulation over two micro-batches only
 *    the reference is checked: stages 0-1 add every share into one buffer
 *    for the whole window, stages 2-3 sum micro-batches after reducing
 *    them, so the sums associate differently (as for any model whose
 *    backward adds into zinc's buffer more than once per micro-batch);
 *  - misuse is still refused: a second use after grads_ready(embed) gets
 *    no gradient buffer, and a second grads_ready is ZINC_ERR_INVALID.
 * The parameters' initial values reach zinc_init_fn through each
 * parameter's user tag (zinc_param_set_user).
 */
#include <mpi.h>

#include "engine_test.h"

#define R 40   /* rows of W: the "vocabulary" */
#define C 24   /* columns of W: the "hidden size" */
#define S 3    /* samples per micro-batch per rank */
#define STEPS 3
#define NBLOCK 3
#define NP (NBLOCK + 3) /* W, a, the blocks' M, b */

typedef struct {
  int which;   /* 0 W, 1 a, 2 .. NBLOCK + 1 the blocks, NBLOCK + 2 b */
  double base; /* init value scale */
} tw_tag;

typedef struct {
  zinc_engine *e;
  zinc_module *embed, *mid, *block[NBLOCK], *head;
  zinc_param *W, *a, *M[NBLOCK], *b;
  tw_tag tags[NP];
} tw_model;

static const int numel_of[NP] = {R * C, R, R * R, R * R, R * R, C};

static double hash01(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (double)(x >> 11) / (double)(1ull << 53);
}

static float init_value(int which, int64_t j) {
  double v = hash01(((uint64_t)which << 40) + (uint64_t)j + 7) - 0.5;
  if (which >= 2 && which < NP - 1) /* a block: near the identity */
    return (float)((j / R == j % R ? 1.0 : 0.0) + 0.1 * v);
  return (float)(which == 1 ? 1.0 + 0.5 * v : 0.4 * v);
}

/* Sample s of micro-batch `micro` (counted over the whole run) on rank r. */
static float data_x(int r, int64_t micro, int s, int j) {
  return (float)(hash01((uint64_t)((micro * 64 + r) * S + s) * 1000 + (uint64_t)j) - 0.5);
}
static float data_t(int r, int64_t micro, int s, int j) {
  return (float)(0.5 * (hash01((uint64_t)((micro * 64 + r) * S + s) * 1000 + 500 +
                               (uint64_t)j) - 0.5));
}

static zinc_status tw_init(const zinc_param *p, float *dst, int64_t numel, void *ctx) {
  (void)ctx;
  const tw_tag *tag = zinc_param_user(p);
  if (!tag)
    return zinc_error_set(ZINC_ERR_INVALID, "no user tag on %s", zinc_param_name(p));
  for (int64_t j = 0; j < numel; j++)
    dst[j] = init_value(tag->which, j);
  return ZINC_OK;
}

/* The parameters in tag order. */
static void tw_params(const tw_model *m, zinc_param **ps) {
  ps[0] = m->W;
  ps[1] = m->a;
  for (int l = 0; l < NBLOCK; l++)
    ps[2 + l] = m->M[l];
  ps[NP - 1] = m->b;
}

static void tw_register(tw_model *m, zinc_engine *e) {
  memset(m, 0, sizeof *m);
  m->e = e;
  m->embed = zinc_module_add(e, "embed");
  m->mid = zinc_module_add(e, "mid");
  for (int l = 0; l < NBLOCK; l++) {
    char name[16];
    snprintf(name, sizeof name, "block%d", l + 1);
    m->block[l] = zinc_module_add(e, name);
  }
  m->head = zinc_module_add(e, "head");
  int64_t sw[2] = {R, C}, sa[1] = {R}, sm[2] = {R, R}, sb[1] = {C};
  m->W = zinc_param_add(e, m->embed, "W", ZINC_F32, 2, sw);
  m->a = zinc_param_add(e, m->mid, "a", ZINC_F32, 1, sa);
  for (int l = 0; l < NBLOCK; l++) {
    m->M[l] = zinc_param_add(e, m->block[l], "M", ZINC_F32, 2, sm);
    ET_CHECK(m->M[l], "registration: %s", zinc_last_error());
  }
  m->b = zinc_param_add(e, m->head, "b", ZINC_F32, 1, sb);
  ET_CHECK(m->W && m->a && m->b, "registration: %s", zinc_last_error());
  zinc_param *ps[NP];
  tw_params(m, ps);
  for (int i = 0; i < NP; i++) {
    m->tags[i].which = i;
    ET_OK(zinc_param_set_user(ps[i], &m->tags[i]));
    ET_CHECK(zinc_param_user(ps[i]) == &m->tags[i], "zinc_param_user(%s) is not the tag set",
             zinc_param_name(ps[i]));
  }
}

/* ---------------------------------------------------------- the trainer */

/* What the forward pass keeps for the backward pass. */
typedef struct {
  float x[S][C], t[S][C], u[S][R], z[NBLOCK + 1][S][R], y[S][C]; /* z[0]: v */
} tw_acts;

static zinc_status tw_forward(tw_model *m, tw_acts *A) {
  zinc_engine *e = m->e;
  ET_TRY(zinc_module_fetch(e, m->embed));
  const float *W = zinc_param_data(m->W);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < R; i++) {
      float acc = 0;
      for (int j = 0; j < C; j++)
        acc += W[i * C + j] * A->x[s][j];
      A->u[s][i] = acc;
    }
  ET_TRY(zinc_module_release(e, m->embed));

  ET_TRY(zinc_module_fetch(e, m->mid));
  const float *a = zinc_param_data(m->a);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < R; i++)
      A->z[0][s][i] = a[i] * A->u[s][i];
  ET_TRY(zinc_module_release(e, m->mid));

  for (int l = 0; l < NBLOCK; l++) {
    ET_TRY(zinc_module_fetch(e, m->block[l]));
    const float *M = zinc_param_data(m->M[l]);
    for (int s = 0; s < S; s++)
      for (int i = 0; i < R; i++) {
        float acc = 0;
        for (int k = 0; k < R; k++)
          acc += M[i * R + k] * A->z[l][s][k];
        A->z[l + 1][s][i] = acc;
      }
    ET_TRY(zinc_module_release(e, m->block[l]));
  }

  /* the head reads W too: embed is fetched inside head */
  ET_TRY(zinc_module_fetch(e, m->head));
  ET_TRY(zinc_module_fetch(e, m->embed));
  W = zinc_param_data(m->W);
  const float *b = zinc_param_data(m->b);
  for (int s = 0; s < S; s++)
    for (int j = 0; j < C; j++) {
      float acc = b[j];
      for (int i = 0; i < R; i++)
        acc += W[i * C + j] * A->z[NBLOCK][s][i];
      A->y[s][j] = acc;
    }
  ET_TRY(zinc_module_release(e, m->embed));
  return zinc_module_release(e, m->head);
}

/* misuse: 0 none; 1 grads_ready(embed) after the head's share, before the
 * embedding's own use; returns the status of the misused call */
static zinc_status tw_backward(tw_model *m, tw_acts *A, int misuse) {
  zinc_engine *e = m->e;
  float dy[S][C], dv[S][R], dz[S][R];
  for (int s = 0; s < S; s++)
    for (int j = 0; j < C; j++)
      dy[s][j] = A->y[s][j] - A->t[s][j];

  /* head: b's gradient, W's first share (v dy^T), dv = W dy */
  ET_TRY(zinc_module_fetch(e, m->head));
  ET_TRY(zinc_module_fetch(e, m->embed));
  const float *W = zinc_param_data(m->W);
  float *gW = zinc_param_grad(m->W), *gb = zinc_param_grad(m->b);
  if (!gW || !gb)
    return ZINC_ERR_INVALID;
  for (int s = 0; s < S; s++) {
    for (int j = 0; j < C; j++)
      gb[j] += dy[s][j];
    for (int i = 0; i < R; i++) {
      float acc = 0;
      for (int j = 0; j < C; j++) {
        gW[i * C + j] += A->z[NBLOCK][s][i] * dy[s][j];
        acc += W[i * C + j] * dy[s][j];
      }
      dv[s][i] = acc;
    }
  }
  ET_TRY(zinc_module_grads_ready(e, m->head));
  if (misuse == 1)
    ET_TRY(zinc_module_grads_ready(e, m->embed));
  ET_TRY(zinc_module_release(e, m->embed)); /* W's gradient is not complete yet */
  ET_TRY(zinc_module_release(e, m->head));

  /* the blocks, last first: M_l's gradient; dz_{l-1} = M_l^T dz_l */
  for (int l = NBLOCK - 1; l >= 0; l--) {
    ET_TRY(zinc_module_fetch(e, m->block[l]));
    const float *M = zinc_param_data(m->M[l]);
    float *gM = zinc_param_grad(m->M[l]);
    if (!gM)
      return ZINC_ERR_INVALID;
    for (int s = 0; s < S; s++) {
      for (int k = 0; k < R; k++)
        dz[s][k] = 0;
      for (int i = 0; i < R; i++)
        for (int k = 0; k < R; k++) {
          gM[i * R + k] += dv[s][i] * A->z[l][s][k];
          dz[s][k] += M[i * R + k] * dv[s][i];
        }
      memcpy(dv[s], dz[s], sizeof dz[s]);
    }
    ET_TRY(zinc_module_grads_ready(e, m->block[l]));
    ET_TRY(zinc_module_release(e, m->block[l]));
  }

  /* mid: a's gradient; dv becomes du = a * dv */
  ET_TRY(zinc_module_fetch(e, m->mid));
  const float *a = zinc_param_data(m->a);
  float *ga = zinc_param_grad(m->a);
  if (!ga)
    return ZINC_ERR_INVALID;
  for (int s = 0; s < S; s++)
    for (int i = 0; i < R; i++) {
      ga[i] += dv[s][i] * A->u[s][i];
      dv[s][i] *= a[i];
    }
  ET_TRY(zinc_module_grads_ready(e, m->mid));
  ET_TRY(zinc_module_release(e, m->mid));

  /* embed: W's second share (du x^T), added to the first */
  ET_TRY(zinc_module_fetch(e, m->embed));
  gW = zinc_param_grad(m->W);
  if (!gW)
    return ZINC_ERR_INVALID;
  for (int s = 0; s < S; s++)
    for (int i = 0; i < R; i++)
      for (int j = 0; j < C; j++)
        gW[i * C + j] += dv[s][i] * A->x[s][j];
  ET_TRY(zinc_module_grads_ready(e, m->embed));
  ET_TRY(zinc_module_release(e, m->embed));
  return zinc_backward_end(e);
}

/* ---------------------------------------------------------- reference */

/* The summed, averaged gradient of the whole step in double, from the
 * parameters P (tag order) the step starts from, into G (tag order): both
 * uses of W written out and added here, not by the engine. */
static void tw_reference(int world, int gas, int64_t step, float *const P[NP],
                         double *const G[NP]) {
  for (int p = 0; p < NP; p++)
    memset(G[p], 0, sizeof(double) * (size_t)numel_of[p]);
  const float *W = P[0], *a = P[1], *b = P[NP - 1];
  double *gW = G[0], *ga = G[1], *gb = G[NP - 1];
  for (int k = 0; k < gas; k++)
    for (int r = 0; r < world; r++)
      for (int s = 0; s < S; s++) {
        int64_t micro = step * gas + k;
        double x[C], t[C], u[R], z[NBLOCK + 1][R], y[C], dy[C], dz[R], dn[R];
        for (int j = 0; j < C; j++) {
          x[j] = data_x(r, micro, s, j);
          t[j] = data_t(r, micro, s, j);
        }
        for (int i = 0; i < R; i++) {
          u[i] = 0;
          for (int j = 0; j < C; j++)
            u[i] += (double)W[i * C + j] * x[j];
          z[0][i] = a[i] * u[i];
        }
        for (int l = 0; l < NBLOCK; l++) {
          const float *M = P[2 + l];
          for (int i = 0; i < R; i++) {
            z[l + 1][i] = 0;
            for (int q = 0; q < R; q++)
              z[l + 1][i] += (double)M[i * R + q] * z[l][q];
          }
        }
        for (int j = 0; j < C; j++) {
          y[j] = b[j];
          for (int i = 0; i < R; i++)
            y[j] += (double)W[i * C + j] * z[NBLOCK][i];
          dy[j] = y[j] - t[j];
          gb[j] += dy[j];
        }
        for (int i = 0; i < R; i++) {
          dz[i] = 0;
          for (int j = 0; j < C; j++) {
            dz[i] += (double)W[i * C + j] * dy[j];
            gW[i * C + j] += z[NBLOCK][i] * dy[j]; /* the head's use */
          }
        }
        for (int l = NBLOCK - 1; l >= 0; l--) {
          const float *M = P[2 + l];
          for (int q = 0; q < R; q++)
            dn[q] = 0;
          for (int i = 0; i < R; i++)
            for (int q = 0; q < R; q++) {
              G[2 + l][i * R + q] += dz[i] * z[l][q];
              dn[q] += (double)M[i * R + q] * dz[i];
            }
          memcpy(dz, dn, sizeof dz);
        }
        for (int i = 0; i < R; i++) {
          ga[i] += dz[i] * u[i];
          for (int j = 0; j < C; j++)
            gW[i * C + j] += a[i] * dz[i] * x[j]; /* the embedding's use */
        }
      }
  double n = (double)world * gas;
  for (int p = 0; p < NP; p++)
    for (int i = 0; i < numel_of[p]; i++)
      G[p][i] /= n;
}

static int close_enough(const char *what, const char *name, const float *got,
                        const double *want, int n) {
  double worst = 0;
  int first = -1;
  for (int i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]), tol = 1e-5 + 1e-4 * fabs(want[i]);
    if (d > tol && first < 0)
      first = i;
    if (d > worst)
      worst = d;
  }
  ET_CHECK(first < 0, "%s: gradient of %s [%d] = %.8g, reference %.8g (largest difference "
           "%.3g; f32 tolerance 1e-5 + 1e-4 |ref|)", what, name, first,
           first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0, worst);
  return first < 0;
}

/* ---------------------------------------------------------- runs */

typedef struct {
  const char *name;
  int stage, overlap;
  const char *offload, *offload_param;
  int64_t bucket;
  int gas;
  int group;   /* runs of one group are bitwise the same as its first (-1: none) */
} tw_variant;

/* Train STEPS steps; the final parameters (tag order) into final. */
static void tw_train(const tw_variant *v, float *final[NP]) {
  et_run r = et_defaults();
  r.stage = v->stage;
  r.overlap = v->overlap;
  r.offload = v->offload;
  r.offload_param = v->offload_param;
  r.reduce_bucket = v->bucket;
  r.gas = v->gas;
  r.micro = S;
  r.clip = 0;
  zinc_engine *e = et_create(&r, NULL);
  tw_model m;
  tw_register(&m, e);
  ET_OK(zinc_engine_build(e, tw_init, NULL));
  int N = zinc_dp_size(e), me = zinc_dp_rank(e);
  zinc_param *ps[NP];
  tw_params(&m, ps);
  float *P[NP], *G[NP];
  double *ref[NP];
  for (int i = 0; i < NP; i++) {
    P[i] = malloc(sizeof(float) * (size_t)numel_of[i]);
    G[i] = malloc(sizeof(float) * (size_t)numel_of[i]);
    ref[i] = malloc(sizeof(double) * (size_t)numel_of[i]);
  }
  tw_acts A;
  for (int64_t step = 0; step < STEPS; step++) {
    for (int i = 0; i < NP; i++)
      ET_OK(zinc_param_get_full(e, ps[i], ZINC_STATE_PARAM, P[i]));
    for (int k = 0; k < v->gas; k++) {
      int64_t micro = step * v->gas + k;
      for (int s = 0; s < S; s++)
        for (int j = 0; j < C; j++) {
          A.x[s][j] = data_x(me, micro, s, j);
          A.t[s][j] = data_t(me, micro, s, j);
        }
      ET_OK(tw_forward(&m, &A));
      ET_OK(tw_backward(&m, &A, 0));
      if (k == v->gas - 1) {
        for (int i = 0; i < NP; i++)
          ET_OK(zinc_param_get_full(e, ps[i], ZINC_STATE_GRAD, G[i]));
        tw_reference(N, v->gas, step, P, ref);
        char what[160];
        snprintf(what, sizeof what, "%s, gas %d, %d ranks, step %lld", v->name, v->gas, N,
                 (long long)step);
        for (int i = 0; i < NP; i++) {
          char name[32];
          snprintf(name, sizeof name, i == 0 ? "W (both uses)" : i == 1 ? "a"
                   : i == NP - 1 ? "b" : "block%d.M", i - 1);
          close_enough(what, name, G[i], ref[i], numel_of[i]);
        }
      }
      ET_OK(zinc_step(e, NULL));
    }
  }
  for (int i = 0; i < NP; i++) {
    ET_OK(zinc_param_get_full(e, ps[i], ZINC_STATE_PARAM, final[i]));
    free(P[i]);
    free(G[i]);
    free(ref[i]);
  }
  zinc_engine_destroy(e);
}

/* A second use of W after grads_ready(embed), and grads_ready twice. */
static void tw_misuse(int stage) {
  et_run r = et_defaults();
  r.stage = stage;
  r.gas = 2;
  r.micro = S;
  zinc_engine *e = et_create(&r, NULL);
  tw_model m;
  tw_register(&m, e);
  ET_OK(zinc_engine_build(e, tw_init, NULL));
  tw_acts A;
  memset(&A, 0, sizeof A);
  ET_OK(tw_forward(&m, &A));
  zinc_status st = tw_backward(&m, &A, 1);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "grads_ready was already called"),
           "stage %d: a use of W after grads_ready(embed) gave %s: %s", stage,
           zinc_status_name(st), zinc_last_error());
  st = zinc_module_grads_ready(e, m.embed);
  ET_CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "called twice"),
           "stage %d: grads_ready(embed) twice gave %s: %s", stage, zinc_status_name(st),
           zinc_last_error());
  zinc_engine_destroy(e);
}

int main(void) {
  static const tw_variant variants[] = {
      {"stage 0", 0, 0, "none", NULL, 256, 1, 0},
      {"stage 1", 1, 0, "none", NULL, 256, 1, 0},
      {"stage 1 overlap_comm", 1, 1, "none", NULL, 256, 1, 0},
      {"stage 1 offload cpu", 1, 0, "cpu", NULL, 256, 1, 0},
      {"stage 2", 2, 0, "none", NULL, 256, 1, 0},
      {"stage 2 overlap_comm", 2, 1, "none", NULL, 256, 1, 0},
      {"stage 2 overlap_comm offload cpu", 2, 1, "cpu", NULL, 256, 1, 0},
      {"stage 3", 3, 0, "none", NULL, 256, 1, 0},
      {"stage 3 overlap_comm", 3, 1, "none", NULL, 256, 1, 0},
      {"stage 3 overlap_comm offload cpu, params cpu", 3, 1, "cpu", "cpu", 256, 1, 0},
      /* the ring of two 32-element buckets and two of the largest module
       * (a block) cannot hold W's area, held across the blocks' backward,
       * and two blocks: a block gets a dedicated buffer */
      {"stage 0 small buckets", 0, 0, "none", NULL, 32, 1, 1},
      {"stage 2 small buckets", 2, 1, "none", NULL, 32, 1, 1},
      {"stage 3 small buckets", 3, 1, "none", NULL, 32, 1, 1},
      {"stage 0", 0, 0, "none", NULL, 256, 2, -1},
      {"stage 1 overlap_comm offload cpu", 1, 1, "cpu", NULL, 256, 2, -1},
      {"stage 2 overlap_comm", 2, 1, "none", NULL, 256, 2, -1},
      {"stage 3 overlap_comm offload cpu, params cpu", 3, 1, "cpu", "cpu", 256, 2, -1},
  };
  int nv = (int)(sizeof variants / sizeof variants[0]);
  const int *numel = numel_of;
  float *ref[2][NP], *got[NP];
  int ref_of[2] = {-1, -1};
  for (int i = 0; i < NP; i++) {
    got[i] = malloc(sizeof(float) * (size_t)numel[i]);
    for (int g = 0; g < 2; g++)
      ref[g][i] = malloc(sizeof(float) * (size_t)numel[i]);
  }
  for (int k = 0; k < nv; k++) {
    const tw_variant *v = &variants[k];
    int g = v->group;
    if (g >= 0 && ref_of[g] < 0) {
      ref_of[g] = k;
      tw_train(v, ref[g]);
      continue;
    }
    tw_train(v, got);
    for (int i = 0; g >= 0 && i < NP; i++) {
      int diff = -1;
      for (int j = 0; j < numel[i] && diff < 0; j++)
        if (memcmp(&got[i][j], &ref[g][i][j], 4) != 0)
          diff = j;
      ET_CHECK(diff < 0, "%s: parameter %d [%d] after %d steps is %.9g, %.9g at %s (not "
               "bitwise the same)", v->name, i, diff, STEPS, diff >= 0 ? got[i][diff] : 0.0,
               diff >= 0 ? ref[g][i][diff] : 0.0, variants[ref_of[g]].name);
    }
  }
  /* The bucket sweep: every stage, overlap_comm off and on, reduction
   * buckets from smaller than any module to larger than the model. W's
   * area is held from the head's backward to embed's, so with buckets
   * smaller than W plus the modules reduced in between (500, 1100) the
   * ring fills and a module gets a dedicated buffer; from the second
   * step on the engine follows the recorded order. Per bucket size every
   * run is bitwise the stage-0 run (no clipping: the norm's summation
   * order, which follows the units, does not enter). */
  static const int64_t buckets[] = {32, 500, 1100, 100000000};
  for (int bi = 0; bi < (int)(sizeof buckets / sizeof buckets[0]); bi++)
    for (int stage = 0; stage <= 3; stage++)
      for (int overlap = 0; overlap <= 1; overlap++) {
        char name[96];
        snprintf(name, sizeof name, "bucket %lld, stage %d%s", (long long)buckets[bi], stage,
                 overlap ? " overlap_comm" : "");
        tw_variant v = {name, stage, overlap, "none", NULL, buckets[bi], 1, -1};
        float **dst = stage == 0 && !overlap ? ref[0] : got;
        tw_train(&v, dst);
        for (int i = 0; dst == got && i < NP; i++) {
          int diff = -1;
          for (int j = 0; j < numel[i] && diff < 0; j++)
            if (memcmp(&got[i][j], &ref[0][i][j], 4) != 0)
              diff = j;
          ET_CHECK(diff < 0, "%s: parameter %d [%d] after %d steps is %.9g, %.9g at stage 0 "
                   "(not bitwise the same)", name, i, diff, STEPS,
                   diff >= 0 ? got[i][diff] : 0.0, diff >= 0 ? ref[0][i][diff] : 0.0);
        }
      }
  tw_misuse(2);
  tw_misuse(3);
  for (int i = 0; i < NP; i++) {
    free(got[i]);
    for (int g = 0; g < 2; g++)
      free(ref[g][i]);
  }
  if (et_failures) {
    fprintf(stderr, "[rank %d] %d check(s) failed\n", et_rank, et_failures);
    return 1;
  }
  if (et_rank == 0)
    printf("tied weights: gradients of both uses and stages 0-3 checked at %d ranks\n",
           et_world);
  return 0;
}
