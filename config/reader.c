/*
 * reader.c — the machinery every config section is read with: the current
 * JSON path, error and warning messages that name it, typed value readers,
 * did-you-mean suggestions, and the walker over declarative key tables.
 *
 * Messages have one shape so that a user can grep them and tests can check
 * them: "<json path>: found <value>, expected <what>". Integers may be
 * written as JSON reals (1e9, 5e8) when they are integral, as DeepSpeed
 * files do.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

/* ------------------------------------------------------------------ paths */

/* Append a formatted piece to the path (truncated at its capacity). */
static size_t path_append(zinc_cfg_reader *r, const char *fmt, ...) ZINC_PRINTF(2, 3);
static size_t path_append(zinc_cfg_reader *r, const char *fmt, ...) {
  size_t mark = r->path_len, room = sizeof r->path - r->path_len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->path + r->path_len, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    r->path_len += (size_t)n < room ? (size_t)n : room - 1;
  return mark;
}

size_t zinc_cfg_push(zinc_cfg_reader *r, const char *key) {
  return path_append(r, "%s%s", r->path_len ? "." : "", key);
}

size_t zinc_cfg_push_index(zinc_cfg_reader *r, size_t index) {
  return path_append(r, "[%zu]", index);
}

const json_t *zinc_cfg_enter(zinc_cfg_reader *r, const json_t *obj, const char *key,
                             size_t *mark) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  if (v)
    *mark = zinc_cfg_push(r, key);
  return v;
}

void zinc_cfg_pop(zinc_cfg_reader *r, size_t mark) {
  r->path_len = mark;
  r->path[mark] = '\0';
}

/* --------------------------------------------------------------- messages */

void zinc_cfg_render(const json_t *v, char *out, size_t cap) {
  if (!v) {
    snprintf(out, cap, "nothing");
    return;
  }
  char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(12));
  if (!text) {
    snprintf(out, cap, "(a value)");
    return;
  }
  size_t len = strlen(text);
  if (len + 1 > cap && cap > 4)
    snprintf(out, cap, "%.*s...", (int)(cap - 4), text);
  else
    snprintf(out, cap, "%s", text);
  free(text);
}

zinc_status zinc_cfg_bad(zinc_cfg_reader *r, const json_t *found,
                         const char *expect_fmt, ...) {
  char value[96], expect[768];
  zinc_cfg_render(found, value, sizeof value);
  va_list ap;
  va_start(ap, expect_fmt);
  vsnprintf(expect, sizeof expect, expect_fmt, ap);
  va_end(ap);
  return zinc_error(ZINC_ERR_CONFIG, "%s: found %s, expected %s",
                    r->path_len ? r->path : "(top level)", value, expect);
}

zinc_status zinc_cfg_fail(zinc_cfg_reader *r, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return zinc_error(ZINC_ERR_CONFIG, "%s: %s",
                    r->path_len ? r->path : "(top level)", msg);
}

void zinc_cfg_warn(zinc_cfg_reader *r, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->warnings++;
  zinc_log0(ZINC_LOG_WARN, "config %s: %s", r->source, msg);
}

/* ------------------------------------------------------------ did you mean */

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64)
    return (size_t)-1;
  size_t row[65];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = diag + cost;
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const char *zinc_cfg_suggest(const char *name, const char *const *known,
                             size_t count) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (size_t i = 0; i < count; i++) {
    if (strcasecmp(name, known[i]) == 0)
      return known[i];
    size_t d = edit_distance(name, known[i]);
    /* a truncated or extended name ("initial_scale") is a near miss too */
    size_t ln = strlen(name), lk = strlen(known[i]), shorter = ln < lk ? ln : lk;
    if (shorter >= 4 && strncasecmp(name, known[i], shorter) == 0 && d > 1)
      d = 1;
    if (d < best_d) {
      best_d = d;
      best = known[i];
    }
  }
  /* A typo changes a few characters; more than a third of the name is a
   * different word. */
  size_t len = strlen(name);
  size_t limit = len / 3 > 2 ? len / 3 : 2;
  return best_d <= limit ? best : NULL;
}

/* ------------------------------------------------------------------ values */

int zinc_cfg_is_auto(const json_t *v) {
  return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

static int is_bool_like(const json_t *v) {
  return json_is_boolean(v) ||
         (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1));
}

zinc_status zinc_cfg_bool(zinc_cfg_reader *r, const json_t *v, int *out) {
  if (!is_bool_like(v))
    return zinc_cfg_bad(r, v, "true or false");
  *out = json_is_boolean(v) ? json_is_true(v) : (int)json_integer_value(v);
  return ZINC_OK;
}

/* Integral value of v (integer, or a real with no fraction within int64),
 * or 0 when v is not one. */
static int integral_value(const json_t *v, int64_t *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return 1;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) {
      *out = (int64_t)d;
      return 1;
    }
  }
  return 0;
}

static void describe_int_range(char *out, size_t cap, int64_t lo, int64_t hi) {
  if (hi >= INT64_MAX / 2)
    snprintf(out, cap, "an integer >= %lld", (long long)lo);
  else
    snprintf(out, cap, "an integer %lld..%lld", (long long)lo, (long long)hi);
}

zinc_status zinc_cfg_int64(zinc_cfg_reader *r, const json_t *v, int64_t lo,
                           int64_t hi, int64_t *out) {
  int64_t x;
  if (!integral_value(v, &x) || x < lo || x > hi) {
    char what[96];
    describe_int_range(what, sizeof what, lo, hi);
    return zinc_cfg_bad(r, v, "%s", what);
  }
  *out = x;
  return ZINC_OK;
}

zinc_status zinc_cfg_string(zinc_cfg_reader *r, const json_t *v,
                            const char **out) {
  if (!json_is_string(v))
    return zinc_cfg_bad(r, v, "a string");
  *out = json_string_value(v);
  return ZINC_OK;
}

zinc_status zinc_cfg_object(zinc_cfg_reader *r, const json_t *v,
                            const json_t **out) {
  if (!v || json_is_null(v)) {
    *out = NULL;
    return ZINC_OK;
  }
  if (!json_is_object(v))
    return zinc_cfg_bad(r, v, "an object {...}");
  *out = v;
  return ZINC_OK;
}

/* ------------------------------------------------------------ key tables */

static void describe_range(char *out, size_t cap, const zinc_key *k) {
  int is_int = k->kind != ZINC_KEY_F64;
  const char *noun = is_int ? "an integer" : "a number";
  /* an int field's INT_MAX is a storage limit, not a setting's range */
  int has_lo = isfinite(k->lo), has_hi = isfinite(k->hi) && k->hi < INT_MAX;
  int n;
  if (has_lo && has_hi && is_int)
    n = snprintf(out, cap, "%s %.0f..%.0f", noun, k->lo, k->hi);
  else if (has_lo && has_hi)
    n = snprintf(out, cap, "%s in %c%g, %g%c", noun,
                 (k->flags & ZINC_KEY_LO_OPEN) ? '(' : '[', k->lo, k->hi,
                 (k->flags & ZINC_KEY_HI_OPEN) ? ')' : ']');
  else if (has_lo)
    n = snprintf(out, cap, "%s %s %g", noun,
                 (k->flags & ZINC_KEY_LO_OPEN) ? ">" : ">=", k->lo);
  else
    n = snprintf(out, cap, "%s", noun);
  if (n > 0 && (size_t)n < cap && (k->flags & ZINC_KEY_AUTO))
    snprintf(out + n, cap - (size_t)n, " or \"auto\"");
}

static int in_range(const zinc_key *k, double x) {
  if (x < k->lo || x > k->hi)
    return 0;
  if ((k->flags & ZINC_KEY_LO_OPEN) && x == k->lo)
    return 0;
  if ((k->flags & ZINC_KEY_HI_OPEN) && x == k->hi)
    return 0;
  return 1;
}

/* Store one value of a BOOL/INT/I64/F64 key. */
static zinc_status read_key(zinc_cfg_reader *r, const zinc_key *k,
                            const json_t *v, void *base) {
  char *field = (char *)base + k->offset;
  char what[128];
  if (json_is_null(v) && (k->flags & ZINC_KEY_NULL_OK))
    return ZINC_OK;
  if ((k->flags & ZINC_KEY_AUTO) && zinc_cfg_is_auto(v)) {
    switch (k->kind) {
    case ZINC_KEY_BOOL:
    case ZINC_KEY_INT: *(int *)field = (int)k->auto_value; break;
    case ZINC_KEY_I64: *(int64_t *)field = (int64_t)k->auto_value; break;
    case ZINC_KEY_F64: *(double *)field = k->auto_value; break;
    default: break;
    }
    return ZINC_OK;
  }
  if (k->kind == ZINC_KEY_BOOL) {
    if (!is_bool_like(v))
      return zinc_cfg_bad(r, v, "true or false%s",
                          (k->flags & ZINC_KEY_AUTO) ? " or \"auto\"" : "");
    return zinc_cfg_bool(r, v, (int *)field);
  }
  describe_range(what, sizeof what, k);
  if (k->kind == ZINC_KEY_F64) {
    if (!json_is_number(v) || !in_range(k, json_number_value(v)))
      return zinc_cfg_bad(r, v, "%s", what);
    *(double *)field = json_number_value(v);
    return ZINC_OK;
  }
  int64_t x;
  int truncated = 0;
  if (!integral_value(v, &x) && (k->flags & ZINC_KEY_TRUNC) && json_is_real(v) &&
      isfinite(json_real_value(v)) && fabs(json_real_value(v)) < 9.2e18) {
    x = (int64_t)json_real_value(v); /* C's conversion truncates toward zero, as int() */
    truncated = 1;
  } else if (!integral_value(v, &x)) {
    return zinc_cfg_bad(r, v, "%s", what);
  }
  if (!in_range(k, (double)x))
    return zinc_cfg_bad(r, v, "%s", what);
  if (truncated) {
    char value[96];
    zinc_cfg_render(v, value, sizeof value);
    zinc_cfg_warn(r, "%s = %s is not an integer; read as %lld (DeepSpeed truncates it the "
                  "same way); write the integer you mean", r->path, value, (long long)x);
  }
  if (k->kind == ZINC_KEY_INT)
    *(int *)field = (int)x;
  else
    *(int64_t *)field = x;
  return ZINC_OK;
}

static int field_equals(const zinc_key *k, const void *base, const void *before) {
  size_t size = k->kind == ZINC_KEY_I64   ? sizeof(int64_t)
                : k->kind == ZINC_KEY_F64 ? sizeof(double)
                                          : sizeof(int);
  return memcmp((const char *)base + k->offset, (const char *)before + k->offset,
                size) == 0;
}

static void note_ignored(zinc_cfg_reader *r, const char *name) {
  size_t len = strlen(r->ignored);
  snprintf(r->ignored + len, sizeof r->ignored - len, "%s%s", len ? ", " : "", name);
}

/* DeepSpeed hands optimizer.params and scheduler.params to the
 * constructors as they are: "auto" there has no default to fall back to,
 * only the keys a trainer fills (ZINC_KEY_AUTO) take it. */
static int auto_reads_as_absent(const zinc_cfg_reader *r) {
  return strncmp(r->path, "optimizer.", 10) != 0 && strncmp(r->path, "scheduler.", 10) != 0;
}

static void warn_inert(zinc_cfg_reader *r, const zinc_key *k, const json_t *v) {
  if (zinc_cfg_is_auto(v) && auto_reads_as_absent(r)) {
    zinc_cfg_auto_default(r, "DeepSpeed's default, which zinc does not act on either");
    return;
  }
  if (k->note) {
    json_t *def = json_loads(k->note, JSON_DECODE_ANY, NULL);
    int same = def && json_equal(def, (json_t *)v);
    /* 1e9 and 1000000000 are the same setting */
    if (def && !same && json_is_number(def) && json_is_number(v))
      same = json_number_value(def) == json_number_value(v);
    json_decref(def);
    if (same)
      return;
  }
  char value[96];
  zinc_cfg_render(v, value, sizeof value);
  zinc_cfg_warn(r, "%s = %s: a DeepSpeed option zinc accepts but does not act on",
                r->path, value);
}

void zinc_cfg_auto_default(zinc_cfg_reader *r, const char *value_fmt, ...) {
  char value[160];
  va_list ap;
  va_start(ap, value_fmt);
  vsnprintf(value, sizeof value, value_fmt, ap);
  va_end(ap);
  zinc_log0(ZINC_LOG_INFO, "config %s: %s is \"auto\" and nothing fills it: %s, as if not "
            "written (DeepSpeed's config reads \"auto\" so); write a value to choose another",
            r->source, r->path, value);
}

/* "auto" for a key with no "auto" of its own (ZINC_KEY_AUTO): the value
 * the key has when the file does not write it, said at info level. */
static void auto_as_absent(zinc_cfg_reader *r, const zinc_key *k, const void *base) {
  const char *f = (const char *)base + k->offset;
  switch (k->kind) {
  case ZINC_KEY_BOOL:
    zinc_cfg_auto_default(r, "%s", *(const int *)f ? "true" : "false");
    break;
  case ZINC_KEY_INT: zinc_cfg_auto_default(r, "%d", *(const int *)f); break;
  case ZINC_KEY_I64: zinc_cfg_auto_default(r, "%lld", (long long)*(const int64_t *)f); break;
  default: zinc_cfg_auto_default(r, "%.17g", *(const double *)f); break;
  }
}

zinc_status zinc_cfg_walk(zinc_cfg_reader *r, const json_t *obj,
                          const zinc_key *keys, size_t nkeys, void *base,
                          size_t base_size) {
  const char *known[128];
  if (nkeys > 128)
    return zinc_error(ZINC_ERR_INVALID, "config walker: a table of %zu keys (at most 128)",
                      nkeys);
  for (size_t i = 0; i < nkeys; i++)
    known[i] = keys[i].name;

  /* The section's defaults, to tell a NO_EFFECT key that changes nothing. */
  char before[sizeof(zinc_settings)];
  if (base_size > sizeof before)
    return zinc_error(ZINC_ERR_INVALID, "config walker: section struct of %zu bytes", base_size);
  memcpy(before, base, base_size);

  unsigned char seen[128] = {0};
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    size_t mark = zinc_cfg_push(r, key);
    const zinc_key *k = NULL;
    size_t idx = 0;
    for (; idx < nkeys; idx++)
      if (strcmp(keys[idx].name, key) == 0) {
        k = &keys[idx];
        break;
      }
    if (!k) {
      const char *guess = zinc_cfg_suggest(key, known, nkeys);
      if (guess)
        zinc_cfg_warn(r, "unknown key %s (did you mean \"%s\"?); ignored", r->path, guess);
      else
        zinc_cfg_warn(r, "unknown key %s; ignored", r->path);
      zinc_cfg_pop(r, mark);
      continue;
    }
    if (k->kind <= ZINC_KEY_F64) {
      /* Two spellings of one key (stage3_prefetch_bucket_size and
       * prefetch_bucket_size) write the same field. */
      for (size_t j = 0; j < nkeys; j++)
        if (seen[j] && j != idx && keys[j].kind == k->kind && keys[j].offset == k->offset) {
          zinc_status st = zinc_cfg_bad(r, v, "one spelling: \"%s\" was given too and sets "
                                        "the same option; keep one", keys[j].name);
          zinc_cfg_pop(r, mark);
          return st;
        }
      seen[idx] = 1;
      if (zinc_cfg_is_auto(v) && !(k->flags & ZINC_KEY_AUTO) && auto_reads_as_absent(r)) {
        auto_as_absent(r, k, base);
        zinc_cfg_pop(r, mark);
        continue;
      }
      zinc_status st = read_key(r, k, v, base);
      if (st != ZINC_OK)
        return st;
      if ((k->flags & ZINC_KEY_NO_EFFECT) && !field_equals(k, base, before)) {
        char value[96];
        zinc_cfg_render(v, value, sizeof value);
        zinc_cfg_warn(r, "%s = %s: accepted, but zinc does not act on it (%s)", r->path,
                      value, k->note ? k->note : "no effect");
      }
    } else if (k->kind == ZINC_KEY_INERT) {
      warn_inert(r, k, v);
    } else if (k->kind == ZINC_KEY_IGNORED) {
      note_ignored(r, key);
    }
    zinc_cfg_pop(r, mark);
  }
  return ZINC_OK;
}
