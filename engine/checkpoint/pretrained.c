/*
 * pretrained.c — zinc_load_safetensors: a model's weights from a
 * .safetensors file, by name (see zinc.h).
 *
 * Every rank opens the file itself (one path on a shared filesystem, or
 * its node's own copy) and asks the trainer's map for every parameter's
 * tensor. Before anything changes the ranks agree, and refuse together
 * naming the rank that differs when they do not, on:
 *  1. the map's answers (a map answering otherwise on one rank would load
 *     another tensor there);
 *  2. the file each rank opened: its size and the crc32c of its header;
 *  3. the match, from the header alone (names through the map, shapes,
 *     dtypes, missing and unexpected tensors);
 *  4. the bytes: a crc32c per parameter of what each rank reads. At stage
 *     0 every rank reads whole tensors and every rank's digests must equal
 *     the others'. At stages 1-3 each data-parallel rank r loads only its
 *     partition, so r also digests the pieces rank r + 1 (the ring's next)
 *     loads: every loaded piece is read by two ranks and compared, and a
 *     rank whose copy differs from both neighbours' is named.
 * Then each rank reads, one parameter at a time, the pieces of the fp32
 * master it owns under the current layout (the whole parameter at stage
 * 0, its partition at stages 1-3), rounded to the parameter's dtype, and
 * digests them again: a file that changed since step 4 stops the load.
 * The compute copy is rebuilt from the master as after a checkpoint load.
 * Cost of the checks at stages 1-3: a rank reads its share of the file
 * twice and its neighbour's once.
 *
 * With model parallelism each model-parallel rank loads the file of its
 * own shard of the model: 1, 2 and 4 compare the ranks of a data-parallel
 * group, and every outcome is agreed over the world.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/wait_bound.h"
#include "engine/engine.h"
#include "engine/pipe.h"
#include "engine/failure.h"
#include "engine/place/place.h"
#include "engine/step.h"
#include "kernels/zinc_math.h"

#define STAGING_ELEMS (1 << 20) /* f32 between the file and the master */
#define LOGGED_NAMES 20         /* names a warning lists before "and N more" */
#define ANSWER_MAX 1024         /* a file name the map writes, NUL included */

void zinc_load_weights_report_free(zinc_load_weights_report *r) {
  if (!r)
    return;
  free(r->missing_names);
  free(r->unexpected_names);
  r->missing_names = r->unexpected_names = NULL;
}

/* Append name and a newline to *list (a malloc'ed string). */
static zinc_status list_add(char **list, size_t *len, const char *name) {
  size_t n = strlen(name);
  char *grown = realloc(*list, *len + n + 2);
  if (!grown)
    return zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors: no host memory for the list of "
                      "names (at \"%s\")", name);
  memcpy(grown + *len, name, n);
  grown[*len + n] = '\n';
  grown[*len + n + 1] = 0;
  *list = grown;
  *len += n + 1;
  return ZINC_OK;
}

/* The first LOGGED_NAMES lines of list, comma-separated, into buf. */
static void list_text(const char *list, int count, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  int k = 0;
  for (const char *s = list; s && *s && k < LOGGED_NAMES && len + 1 < cap; k++) {
    const char *nl = strchr(s, '\n');
    len += (size_t)snprintf(buf + len, cap - len, "%s\"%.*s\"", k ? ", " : "", (int)(nl - s), s);
    s = nl + 1;
  }
  if (count > k && len < cap)
    snprintf(buf + len, cap - len, " and %d more", count - k);
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (len < n)
    snprintf(buf + len, n - len, "]");
}


enum { SKIPPED = -2, MISSING = -1 };

static void param_name(const zinc_param *p, char *buf, size_t cap) {
  snprintf(buf, cap, "%s.%s", p->module->name, p->name);
}

/* The map's answer for every parameter, in registration order: the file's
 * name for it (malloc'ed), or NULL when the map leaves it alone. */
static zinc_status map_answers(zinc_engine *e, const zinc_load_weights_options *o,
                               const char *path, char **answers) {
  for (int i = 0; i < e->nparams; i++) {
    char name[520], file_name[ANSWER_MAX];
    param_name(e->params[i], name, sizeof name);
    snprintf(file_name, sizeof file_name, "%s", name);
    if (o->map) {
      file_name[0] = 0;
      if (!o->map(o->map_ctx, name, file_name, sizeof file_name))
        continue;
      file_name[sizeof file_name - 1] = 0;
    }
    if (!(answers[i] = zinc_strdup(file_name)))
      return zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: no host memory for the "
                        "map's answers (at \"%s\")", path, name);
  }
  return ZINC_OK;
}

/* Which tensor each parameter takes (src[i]: its index, MISSING or
 * SKIPPED), every check, and the report's counts and lists. */
static zinc_status match(zinc_engine *e, zinc_safetensors_reader *r, const char *path,
                         const zinc_load_weights_options *o, char *const *answers, int *src,
                         zinc_load_weights_report *rep) {
  int nt = zinc_safetensors_reader_count(r);
  char *used = calloc((size_t)nt + 1, 1);
  if (!used)
    return zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: out of host memory", path);
  size_t mlen = 0, ulen = 0;
  zinc_status st = ZINC_OK;
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    const zinc_param *p = e->params[i];
    char name[520];
    param_name(p, name, sizeof name);
    const char *file_name = answers[i];
    if (!file_name) {
      src[i] = SKIPPED;
      rep->skipped++;
      continue;
    }
    src[i] = zinc_safetensors_reader_find(r, file_name);
    if (src[i] < 0) {
      src[i] = MISSING;
      rep->missing++;
      st = list_add(&rep->missing_names, &mlen, name);
      continue;
    }
    const zinc_safetensors_entry *t = zinc_safetensors_reader_entry(r, src[i]);
    used[src[i]] = 1;
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++)
      same = t->shape[d] == p->shape[d];
    if (!same) {
      char a[200], b[200];
      shape_text(a, sizeof a, t->ndim, t->shape);
      shape_text(b, sizeof b, p->ndim, p->shape);
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: tensor \"%s\" has shape %s "
                      "and parameter \"%s\" has shape %s", path, file_name, a, name, b);
    } else if (t->zdtype < 0) {
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: tensor \"%s\" (for parameter "
                      "\"%s\") is %s; zinc loads F32, BF16 and F16", path, file_name, name,
                      t->dtype);
    } else {
      rep->loaded++;
    }
  }
  for (int k = 0; k < nt && st == ZINC_OK; k++)
    if (!used[k]) {
      rep->unexpected++;
      st = list_add(&rep->unexpected_names, &ulen, zinc_safetensors_reader_entry(r, k)->name);
    }
  free(used);
  if (st == ZINC_OK && o->strict && (rep->missing || rep->unexpected)) {
    char a[1024], b[1024];
    list_text(rep->missing_names, rep->missing, a, sizeof a);
    list_text(rep->unexpected_names, rep->unexpected, b, sizeof b);
    st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s (strict): %d missing "
                    "parameter(s)%s%s, %d unexpected tensor(s)%s%s; map the names "
                    "(zinc_load_weights_options.map) or load with strict 0", path, rep->missing,
                    rep->missing ? ": " : "", a, rep->unexpected, rep->unexpected ? ": " : "",
                    b);
  }
  return st;
}

/* ------------------------------------------- agreement across the ranks
 *
 * Collective over the data-parallel group (e->dp_host): every rank takes
 * part in every exchange below and computes the same outcome from the
 * same gathered values, so a refusal is the same on every rank. */

/* World rank of data-parallel rank k of this rank's group. */
static int world_of(const zinc_engine *e, int k) { return k * e->mp_size + e->mp_rank; }

static uint32_t answer_crc(const char *answer) {
  unsigned char left_alone = 1;
  return answer ? zinc_crc32c(0, answer, strlen(answer) + 1) : zinc_crc32c(0, &left_alone, 1);
}

/* The first i where some rank's v[i] differs from rank 0's (n: none):
 * rank 0's values broadcast, each rank's first difference, the least. */
static zinc_status first_difference(zinc_engine *e, const uint32_t *v, int n, int *first) {
  uint32_t *ref = malloc(((size_t)n + 1) * sizeof *ref);
  zinc_status st = ref ? ZINC_OK
                       : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors: no host memory to "
                                    "compare the ranks' digests of %d parameters", n);
  ZINC_CHECK(zinc_engine_agree(e, e->dp_host, st));
  if (e->dp_rank == 0)
    memcpy(ref, v, (size_t)n * sizeof *ref);
  st = zinc_comm_broadcast(e->dp_host, ref, (size_t)n, ZINC_DT_I32, 0);
  int64_t at = n;
  for (int i = 0; st == ZINC_OK && i < n && at == n; i++)
    if (ref[i] != v[i])
      at = i;
  if (st == ZINC_OK)
    st = zinc_comm_allreduce(e->dp_host, &at, &at, 1, ZINC_DT_I64, ZINC_OP_MIN);
  free(ref);
  *first = (int)at;
  return st;
}

/* Steps 1 and 2: the map's answers and the file each rank opened. */
static zinc_status compare_inputs(zinc_engine *e, zinc_safetensors_reader *r, const char *path,
                                  char *const *answers) {
  int n = e->dp_size, np = e->nparams;
  uint32_t *acrc = calloc((size_t)np + 1, sizeof *acrc);
  int64_t *all = calloc(3 * (size_t)n, sizeof *all);
  char *texts = NULL;
  zinc_status st = acrc && all ? ZINC_OK
                               : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: no host "
                                            "memory to compare the ranks' inputs", path);
  st = zinc_engine_agree(e, e->dp_host, st);
  int64_t mine[3] = {0};
  if (st == ZINC_OK) {
    uint32_t answers_crc = 0, header_crc = 0;
    for (int i = 0; i < np; i++) {
      acrc[i] = answer_crc(answers[i]);
      answers_crc = zinc_crc32c(answers_crc, &acrc[i], sizeof acrc[i]);
    }
    zinc_safetensors_reader_identity(r, &mine[0], &header_crc);
    mine[1] = header_crc;
    mine[2] = answers_crc;
    st = zinc_comm_allgather(e->dp_host, mine, all, 3, ZINC_DT_I64);
  }
  int map_differs = 0, file_differs = 0;
  for (int k = 1; st == ZINC_OK && k < n; k++) {
    map_differs |= all[3 * k + 2] != all[2];
    file_differs |= all[3 * k] != all[0] || all[3 * k + 1] != all[1];
  }
  char msg[2048];
  size_t len = 0;
  if (st == ZINC_OK && map_differs) {
    /* name the first parameter it differs for, and every rank's answer */
    int at = np;
    st = first_difference(e, acrc, np, &at);
    if (st == ZINC_OK && at >= np) /* equal per parameter, different together: cannot be */
      at = 0;
    if (st == ZINC_OK)
      st = zinc_engine_agree(e, e->dp_host,
                             (texts = calloc((size_t)n, ANSWER_MAX))
                                 ? ZINC_OK
                                 : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: no "
                                              "host memory for the ranks' answers", path));
    char own[ANSWER_MAX] = "";
    if (st == ZINC_OK) {
      snprintf(own, sizeof own, "%s", answers[at] ? answers[at] : "");
      st = zinc_comm_allgather(e->dp_host, own, texts, ANSWER_MAX, ZINC_DT_U8);
    }
    if (st == ZINC_OK) {
      char name[520];
      param_name(e->params[at], name, sizeof name);
      for (int k = 0; k < n && len < sizeof msg; k++) {
        const char *t = texts + (size_t)k * ANSWER_MAX;
        if (k && !strcmp(t, texts)) /* rank 0, then the ranks that differ from it */
          continue;
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d %s%s%s", len ? "; " : "",
                                world_of(e, k), t[0] ? "maps it to \"" : "leaves it alone",
                                t[0] ? t : "", t[0] ? "\"" : "");
      }
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: the name map answers "
                      "differently on the ranks for parameter \"%s\" (%s); the map must "
                      "answer alike on every rank (zinc_load_weights_options.map)", path, name,
                      msg);
    }
  } else if (st == ZINC_OK && file_differs) {
    for (int k = 0; k < n && len < sizeof msg; k++)
      if (!k || all[3 * k] != all[0] || all[3 * k + 1] != all[1])
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d: %lld bytes, header "
                                "crc32c %08x", len ? "; " : "", world_of(e, k),
                                (long long)all[3 * k], (unsigned)all[3 * k + 1]);
    st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: the ranks opened different "
                    "files at this path (%s); every rank must read the same file (a shared "
                    "filesystem, or node-local copies that are identical)", path, msg);
  }
  free(texts);
  free(all);
  free(acrc);
  return st;
}

/* Step 4's digests of one parameter's tensor: `own` over the pieces this
 * rank loads as their owner (at stage 0 every piece), `next` over the
 * pieces the ring's next rank owns (stages 1-3). */
typedef struct {
  zinc_safetensors_reader *r;
  int tensor;
  uint32_t own, next;
} digest_ctx;

static zinc_status digest_piece(zinc_engine *e, const zinc_unit *u, int ui, int r,
                                int64_t chunk_off, int64_t param_off, int64_t len, void *vctx) {
  (void)u;
  (void)ui;
  (void)chunk_off;
  digest_ctx *c = vctx;
  if (e->cfg.stage == 0 || r == e->dp_rank)
    ZINC_CHECK(zinc_safetensors_reader_crc(c->r, c->tensor, param_off, len, &c->own));
  else if (r == (e->dp_rank + 1) % e->dp_size)
    ZINC_CHECK(zinc_safetensors_reader_crc(c->r, c->tensor, param_off, len, &c->next));
  return ZINC_OK;
}

/* "rank 2", "rank 0 and rank 1", "rank 0, rank 1 and rank 3": the ranks
 * k with pick[k], as world ranks, into buf. */
static void rank_list(const zinc_engine *e, const int *pick, int n, char *buf, size_t cap) {
  int count = 0, seen = 0;
  for (int k = 0; k < n; k++)
    count += pick[k] != 0;
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < n && len < cap; k++)
    if (pick[k])
      len += (size_t)snprintf(buf + len, cap - len, "%srank %d",
                              !seen++ ? "" : seen == count ? " and " : ", ", world_of(e, k));
}

/* Step 4: own[i] and next[i] for every loaded parameter i, then the
 * comparison (see the top of the file). */
static zinc_status compare_bytes(zinc_engine *e, zinc_safetensors_reader *r, const char *path,
                                 char *const *answers, const int *src, uint32_t *own) {
  int n = e->dp_size, np = e->nparams, ring = e->cfg.stage != 0;
  uint32_t *next = calloc((size_t)np + 1, sizeof *next);
  int64_t *all = calloc(2 * (size_t)n, sizeof *all);
  int *bad = calloc(2 * (size_t)n, sizeof *bad); /* and room for a pick of ranks */
  zinc_status st = next && all && bad ? ZINC_OK
                                      : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: "
                                                   "no host memory for the digests", path);
  uint32_t own_all = 0, next_all = 0;
  for (int i = 0; i < np && st == ZINC_OK; i++) {
    digest_ctx c = {.r = r, .tensor = src[i]};
    if (src[i] >= 0)
      st = zinc_layout_for_each_piece(e, e->params[i], digest_piece, &c);
    own[i] = c.own;
    next[i] = c.next;
    own_all = zinc_crc32c(own_all, &own[i], sizeof own[i]);
    next_all = zinc_crc32c(next_all, &next[i], sizeof next[i]);
  }
  st = zinc_engine_agree(e, e->dp_host, st);
  int64_t mine[2] = {own_all, next_all};
  if (st == ZINC_OK)
    st = zinc_comm_allgather(e->dp_host, mine, all, 2, ZINC_DT_I64);
  /* the pairs that disagree: stage 0, rank k against rank 0; the ring,
   * rank k's own pieces against what rank k - 1 read of them */
  int any = 0, pair = -1;
  for (int k = 0; st == ZINC_OK && k < n; k++) {
    bad[k] = ring ? all[2 * k] != all[2 * ((k + n - 1) % n) + 1] : all[2 * k] != all[0];
    if (bad[k] && pair < 0)
      pair = k;
    any |= bad[k];
  }
  if (st == ZINC_OK && any) {
    /* the parameter: rank `pair`'s own digests against rank 0's (stage 0)
     * or against what rank pair - 1 read of its pieces (the ring) */
    int prev = ring ? (pair + n - 1) % n : 0, at = np;
    uint32_t *theirs = malloc(2 * ((size_t)np + 1) * sizeof *theirs), *ours = theirs + np + 1;
    st = zinc_engine_agree(e, e->dp_host,
                           theirs ? ZINC_OK
                                  : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: no "
                                               "host memory for the digests", path));
    if (st == ZINC_OK) {
      if (e->dp_rank == prev)
        memcpy(theirs, ring ? next : own, (size_t)np * sizeof *theirs);
      if (e->dp_rank == pair)
        memcpy(ours, own, (size_t)np * sizeof *ours);
      st = zinc_comm_broadcast(e->dp_host, theirs, (size_t)np, ZINC_DT_I32, prev);
    }
    if (st == ZINC_OK)
      st = zinc_comm_broadcast(e->dp_host, ours, (size_t)np, ZINC_DT_I32, pair);
    for (int i = 0; st == ZINC_OK && i < np && at == np; i++)
      if (theirs[i] != ours[i])
        at = i;
    free(theirs);
    if (st == ZINC_OK) {
      if (at == np) /* differing sums of equal digests cannot be */
        at = 0;
      char name[520], who[256], why[400];
      param_name(e->params[at], name, sizeof name);
      /* who: at stage 0 the ranks that differ from rank 0; in the ring a
       * rank whose pieces disagree with both neighbours' reads of them
       * (from 3 ranks on), or else both ranks of each disagreeing pair */
      int *pick = bad + n, nodd = 0;
      for (int k = 0; ring && n > 2 && k < n; k++)
        nodd += pick[k] = bad[k] && bad[(k + 1) % n];
      if (!ring) {
        rank_list(e, bad, n, who, sizeof who);
        snprintf(why, sizeof why, "%s read other bytes than rank %d", who, world_of(e, 0));
      } else if (nodd) {
        rank_list(e, pick, n, who, sizeof who);
        snprintf(why, sizeof why, "%s read bytes that differ from what %s ring neighbours "
                 "read of the same pieces", who, nodd > 1 ? "their" : "its");
      } else {
        for (int k = 0; k < n; k++)
          pick[k] = bad[k] || bad[(k + 1) % n];
        rank_list(e, pick, n, who, sizeof who);
        snprintf(why, sizeof why, "%s read different bytes of the same pieces", who);
      }
      st = zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: %s (first in tensor \"%s\" "
                      "for parameter \"%s\"); every rank must read the same file (a shared "
                      "filesystem, or node-local copies that are identical)", path, why,
                      answers[at] ? answers[at] : "?", name);
    }
  }
  free(bad);
  free(all);
  free(next);
  return st;
}

typedef struct {
  zinc_safetensors_reader *r;
  const zinc_param *p;
  int tensor;
  float *staging;
  uint32_t own; /* crc32c of the pieces digested as step 4's `own` */
} piece_ctx;

static zinc_status read_piece(zinc_engine *e, const zinc_unit *u, int ui, int r, int64_t chunk_off,
                              int64_t param_off, int64_t len, void *vctx) {
  (void)ui;
  piece_ctx *c = vctx;
  if (e->cfg.stage != 0 && r != e->dp_rank)
    return ZINC_OK; /* another rank's partition */
  int64_t dst = zinc_layout_opt_offset(e, u, r) + chunk_off;
  for (int64_t x = 0; x < len; x += STAGING_ELEMS) {
    int64_t n = len - x < STAGING_ELEMS ? len - x : STAGING_ELEMS;
    ZINC_CHECK(zinc_safetensors_reader_read(c->r, c->tensor, param_off + x, n, c->staging,
                                            &c->own));
    if (c->p->dtype != ZINC_F32)
      for (int64_t j = 0; j < n; j++) {
        uint32_t h; /* room for any dtype's element */
        zinc_store_from_f32(&h, 0, c->p->dtype, c->staging[j]);
        c->staging[j] = zinc_load_as_f32(&h, 0, c->p->dtype);
      }
    ZINC_CHECK(zinc_opt_write(e, 0, dst + x, n, c->staging));
  }
  return ZINC_OK;
}

static zinc_status load_safetensors(zinc_engine *e, const char *path,
                                    const zinc_load_weights_options *o,
                                    zinc_load_weights_report *report) {
  double t0 = zinc_now();
  zinc_load_weights_report rep = {0};
  zinc_safetensors_reader *r = NULL;
  int np = e->nparams, compare = e->dp_size > 1;
  int *src = calloc((size_t)np + 1, sizeof *src);
  char **answers = calloc((size_t)np + 1, sizeof *answers);
  uint32_t *own = calloc((size_t)np + 1, sizeof *own);
  zinc_status st = src && answers && own
                       ? zinc_safetensors_reader_open(path, &r)
                       : zinc_error(ZINC_ERR_NOMEM, "zinc_load_safetensors %s: out of host "
                                    "memory", path);
  if (st == ZINC_OK)
    st = map_answers(e, o, path, answers);
  st = zinc_engine_agree(e, e->world, st);
  /* the checks (the top of the file): nothing changes unless all pass */
  if (st == ZINC_OK && compare)
    st = zinc_engine_agree(e, e->world, compare_inputs(e, r, path, answers));
  if (st == ZINC_OK)
    st = zinc_engine_agree(e, e->world, match(e, r, path, o, answers, src, &rep));
  if (st == ZINC_OK && compare)
    st = zinc_engine_agree(e, e->world, compare_bytes(e, r, path, answers, src, own));
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "loading weights from %s (nothing was changed)", path);
    zinc_load_weights_report_free(&rep);
    zinc_safetensors_reader_close(r);
    for (int i = 0; answers && i < np; i++)
      free(answers[i]);
    free(answers);
    free(own);
    free(src);
    return st;
  }
  piece_ctx c = {.r = r};
  st = zinc_aligned_alloc((void **)&c.staging, 64, STAGING_ELEMS * 4, "weights staging");
  for (int i = 0; i < np && st == ZINC_OK; i++) {
    if (src[i] < 0)
      continue;
    c.p = e->params[i];
    c.tensor = src[i];
    c.own = 0;
    st = zinc_layout_for_each_piece(e, e->params[i], read_piece, &c);
    if (st == ZINC_OK && compare && c.own != own[i]) {
      char name[520];
      param_name(c.p, name, sizeof name);
      st = zinc_error(ZINC_ERR_CORRUPT, "zinc_load_safetensors %s: tensor \"%s\" (for "
                      "parameter \"%s\") changed while it was loaded (crc32c %08x when checked, "
                      "%08x when read): something wrote the file meanwhile", path, answers[i],
                      name, own[i], c.own);
    }
  }
  st = zinc_engine_agree(e, e->world, st);
  if (st == ZINC_OK)
    st = zinc_params_from_master(e);
  st = zinc_engine_agree(e, e->world, st);
  if (st == ZINC_OK) {
    char a[1024], b[1024];
    list_text(rep.missing_names, rep.missing, a, sizeof a);
    list_text(rep.unexpected_names, rep.unexpected, b, sizeof b);
    if (rep.missing)
      zinc_log0(ZINC_LOG_WARN, "zinc_load_safetensors %s: %d parameter(s) missing from the "
                "file (left as they were): %s", path, rep.missing, a);
    if (rep.unexpected)
      zinc_log0(ZINC_LOG_WARN, "zinc_load_safetensors %s: %d unexpected tensor(s) in the file "
                "(not loaded): %s", path, rep.unexpected, b);
    zinc_log0(ZINC_LOG_INFO, "loaded %d parameter(s) from %s (%d skipped by the map, %d "
              "missing, %d unexpected), %.2f s", rep.loaded, path, rep.skipped, rep.missing,
              rep.unexpected, zinc_now() - t0);
    if (report)
      *report = rep;
    else
      zinc_load_weights_report_free(&rep);
  } else {
    zinc_error_wrap(st, "loading weights from %s after its checks passed; the engine's "
                    "weights are partial and it stops", path);
    zinc_engine_fail(e, st);
    zinc_load_weights_report_free(&rep);
  }
  free(c.staging);
  zinc_safetensors_reader_close(r);
  for (int i = 0; i < np; i++)
    free(answers[i]);
  free(answers);
  free(own);
  free(src);
  return st;
}

zinc_status zinc_load_safetensors(zinc_engine *e, const char *path,
                                  const zinc_load_weights_options *opt,
                                  zinc_load_weights_report *report) {
  if (report)
    memset(report, 0, sizeof *report);
  ZINC_CHECK(zinc_engine_usable(e, "zinc_load_safetensors"));
  ZINC_CHECK(zinc_pipe_refuse(e, "zinc_load_safetensors"));
  if (!path || !path[0])
    return zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors: path is NULL or empty");
  if (e->mb_open)
    return zinc_error(ZINC_ERR_INVALID, "zinc_load_safetensors %s: a micro-batch is in "
                      "progress; load weights between steps", path);
  const zinc_load_weights_options defaults = ZINC_LOAD_WEIGHTS_OPTIONS_INIT;
  /* peers busy reading are waited for up to zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_load_safetensors"));
  return zinc_ckpt_wait_end(e, &w, load_safetensors(e, path, opt ? opt : &defaults, report));
}
