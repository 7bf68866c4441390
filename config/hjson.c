/*
 * hjson.c — the Hjson reader DeepSpeed's own loader uses (it reads every
 * config with hjson), so that files written for DeepSpeed load here too:
 * `#`, `//` and block comments, commas optional at line ends and allowed
 * before a closing bracket, keys without quotes, strings without quotes
 * (to the end of the line), single-quoted strings, ''' multi-line strings,
 * and the root object's braces optional. JSON is a subset.
 *
 * The grammar follows the reference implementation (hjson 3.1.0, which
 * tests/config/hjson_check.py compares with on the corpus):
 *  - a quoteless value runs to the end of its line, trailing blanks
 *    dropped, unless what was read before a `,` `}` `]` `#` `//` or a block comment
 *    is exactly true, false, null or a number: then it is that literal;
 *  - a ''' string drops the indentation of the column its opening quotes
 *    stand in from every line, and its first and last line breaks;
 *  - a number is JSON's number without leading zeros; integers become
 *    jansson integers when they fit in 64 bits, and so do whole numbers
 *    written with a fraction or exponent below 1e10 in magnitude (1.0,
 *    5e7), as in the reference; everything else is a real.
 * Duplicate keys are an error, as DeepSpeed makes them. Every error has the
 * line, the column and the path of the place it was found. A construct
 * left open at the end of the text (a block comment, a string of either
 * quote, a ''' string, an object, an array) is an error at the place it
 * opens, never the end of the document: the reference refuses each of
 * them (for a block comment and a ''' string by reading past the end of
 * the text), and skipping to the end would silently drop every setting
 * after it. A UTF-8 byte order mark before the text is skipped, as the
 * reference skips it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

#define HJSON_DEPTH 64

typedef struct {
  const char *s;
  size_t n, at;
  zinc_hjson_error *err;
  int depth;
  int open_comment;  /* the error is a block comment never closed */
  char path[ZINC_CFG_PATH_MAX];
  size_t path_len;
} hjson_parser;

static int peek(const hjson_parser *p, size_t k) {
  return p->at + k < p->n ? (unsigned char)p->s[p->at + k] : -1;
}
static int cur(const hjson_parser *p) { return peek(p, 0); }

/* Record the first error at offset `at`. */
static json_t *fail_at(hjson_parser *p, size_t at, const char *fmt, ...) ZINC_PRINTF(3, 4);
static json_t *fail_at(hjson_parser *p, size_t at, const char *fmt, ...) {
  if (p->err->message[0])
    return NULL;
  int line = 1, column = 1;
  for (size_t i = 0; i < at && i < p->n; i++) {
    if (p->s[i] == '\n') {
      line++;
      column = 1;
    } else {
      column++;
    }
  }
  p->err->line = line;
  p->err->column = column;
  p->err->offset = at;
  snprintf(p->err->path, sizeof p->err->path, "%s", p->path);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err->message, sizeof p->err->message, fmt, ap);
  va_end(ap);
  return NULL;
}

static int failed(const hjson_parser *p) { return p->err->message[0] != '\0'; }

/* Blanks and comments; -1 (the error recorded, the reader at the end of
 * the text) for a block comment that is never closed. */
static int skip_white(hjson_parser *p) {
  for (;;) {
    int c = cur(p);
    if (c >= 0 && c <= ' ') {
      p->at++;
    } else if (c == '#' || (c == '/' && peek(p, 1) == '/')) {
      while (cur(p) >= 0 && cur(p) != '\n')
        p->at++;
    } else if (c == '/' && peek(p, 1) == '*') {
      size_t open = p->at;
      p->at += 2;
      while (cur(p) >= 0 && !(cur(p) == '*' && peek(p, 1) == '/'))
        p->at++;
      if (cur(p) < 0) {
        p->open_comment = !failed(p);
        fail_at(p, open, "a /* comment that starts here is not closed (its */ is missing), "
                "so everything after it would be part of the comment");
        return -1;
      }
      p->at += 2;
    } else {
      return 0;
    }
  }
}

static int punctuator(int c) {
  return c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':';
}

/* ------------------------------------------------------------ path */

static size_t path_push_key(hjson_parser *p, const char *key) {
  size_t was = p->path_len;
  int k = snprintf(p->path + was, sizeof p->path - was, "%s%s", was ? "." : "", key);
  p->path_len = k > 0 && (size_t)k < sizeof p->path - was ? was + (size_t)k : was;
  p->path[p->path_len] = '\0';
  return was;
}

static size_t path_push_index(hjson_parser *p, size_t i) {
  size_t was = p->path_len;
  int k = snprintf(p->path + was, sizeof p->path - was, "[%zu]", i);
  p->path_len = k > 0 && (size_t)k < sizeof p->path - was ? was + (size_t)k : was;
  p->path[p->path_len] = '\0';
  return was;
}

static void path_pop(hjson_parser *p, size_t was) {
  p->path_len = was;
  p->path[was] = '\0';
}

/* ------------------------------------------------------------ strings */

/* A growing byte buffer for strings. */
typedef struct {
  char *b;
  size_t len, cap;
} text_buf;

static int buf_put(text_buf *t, const char *data, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->len + n + 1)
      cap *= 2;
    char *g = realloc(t->b, cap);
    if (!g)
      return -1;
    t->b = g;
    t->cap = cap;
  }
  memcpy(t->b + t->len, data, n);
  t->len += n;
  t->b[t->len] = '\0';
  return 0;
}

static int buf_utf8(text_buf *t, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return buf_put(t, u, n);
}

static int hex4(hjson_parser *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int c = cur(p);
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0)
      return -1;
    v = v * 16 + (unsigned)d;
    p->at++;
  }
  *out = v;
  return 0;
}

/* A string in `quote` ('"' or '\''), at its opening quote; JSON escapes
 * (and \' ). Returns a malloc'ed NUL-terminated string with its length. */
static char *quoted_string(hjson_parser *p, size_t *len_out) {
  int quote = cur(p);
  size_t start = p->at++;
  text_buf t = {0};
  if (buf_put(&t, "", 0))
    goto nomem;
  for (;;) {
    int c = cur(p);
    if (c < 0 || c == '\n' || c == '\r') {
      free(t.b);
      fail_at(p, start, "a string that starts here is not closed on its line");
      return NULL;
    }
    p->at++;
    if (c == quote)
      break;
    if (c < 0x20) {
      free(t.b);
      fail_at(p, p->at - 1, "a control character (%d) inside a string: write it escaped", c);
      return NULL;
    }
    if (c != '\\') {
      char ch = (char)c;
      if (buf_put(&t, &ch, 1))
        goto nomem;
      continue;
    }
    int e = cur(p);
    if (e < 0) {
      free(t.b);
      fail_at(p, start, "a string that starts here is not closed on its line");
      return NULL;
    }
    p->at++;
    const char *rep = e == '"' ? "\"" : e == '\'' ? "'" : e == '\\' ? "\\" : e == '/' ? "/"
                      : e == 'b' ? "\b" : e == 'f' ? "\f" : e == 'n' ? "\n" : e == 'r' ? "\r"
                      : e == 't' ? "\t" : NULL;
    if (rep) {
      if (buf_put(&t, rep, 1))
        goto nomem;
    } else if (e == 'u') {
      unsigned cp;
      if (hex4(p, &cp)) {
        free(t.b);
        fail_at(p, p->at, "bad \\u escape: four hexadecimal digits expected");
        return NULL;
      }
      if (cp >= 0xD800 && cp < 0xDC00 && cur(p) == '\\' && peek(p, 1) == 'u') {
        size_t back = p->at;
        unsigned lo;
        p->at += 2;
        if (!hex4(p, &lo) && lo >= 0xDC00 && lo < 0xE000)
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        else
          p->at = back;
      }
      if (cp == 0) {
        free(t.b);
        fail_at(p, p->at, "\\u0000 is not allowed in a config string");
        return NULL;
      }
      if (buf_utf8(&t, cp))
        goto nomem;
    } else {
      free(t.b);
      fail_at(p, p->at - 2, "bad escape \\%c in a string", e >= ' ' ? e : '?');
      return NULL;
    }
  }
  *len_out = t.len;
  return t.b;
nomem:
  free(t.b);
  fail_at(p, p->at, "out of memory reading a string");
  return NULL;
}

/* A ''' string, at its first quote. */
static char *multiline_string(hjson_parser *p, size_t *len_out) {
  size_t open = p->at;
  size_t indent = 0;
  while (indent < open && p->s[open - indent - 1] != '\n')
    indent++;
  p->at += 3;
  text_buf t = {0};
  if (buf_put(&t, "", 0))
    goto nomem;
  while (cur(p) >= 0 && cur(p) <= ' ' && cur(p) != '\n')
    p->at++;
  int skip_indent = 0;
  if (cur(p) == '\n') {
    p->at++;
    skip_indent = 1;
  }
  int triple = 0;
  for (;;) {
    if (skip_indent) {
      for (size_t k = indent; k > 0 && cur(p) >= 0 && cur(p) <= ' ' && cur(p) != '\n'; k--)
        p->at++;
      skip_indent = 0;
    }
    int c = cur(p);
    if (c < 0) {
      free(t.b);
      fail_at(p, open, "a ''' string that starts here is not closed");
      return NULL;
    }
    if (c == '\'') {
      triple++;
      p->at++;
      if (triple == 3) {
        if (t.len && t.b[t.len - 1] == '\n')
          t.b[--t.len] = '\0';
        *len_out = t.len;
        return t.b;
      }
      continue;
    }
    for (; triple > 0; triple--)
      if (buf_put(&t, "'", 1))
        goto nomem;
    p->at++;
    if (c == '\n') {
      if (buf_put(&t, "\n", 1))
        goto nomem;
      skip_indent = 1;
    } else if (c != '\r') {
      char ch = (char)c;
      if (buf_put(&t, &ch, 1))
        goto nomem;
    }
  }
nomem:
  free(t.b);
  fail_at(p, p->at, "out of memory reading a string");
  return NULL;
}

/* ------------------------------------------------------------ literals */

/* JSON's number grammar over the whole of [s, s+n) after trailing blanks
 * are dropped, without leading zeros: a jansson integer or real, or NULL. */
static json_t *number_of(const char *s, size_t n) {
  while (n > 0 && (unsigned char)s[n - 1] <= ' ')
    n--;
  size_t i = 0;
  int is_real = 0;
  if (i < n && s[i] == '-')
    i++;
  size_t digits = i;
  while (i < n && s[i] >= '0' && s[i] <= '9')
    i++;
  if (i == digits || (s[digits] == '0' && i - digits > 1))
    return NULL;
  if (i < n && s[i] == '.') {
    is_real = 1;
    size_t f = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
    if (i == f)
      return NULL;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    is_real = 1;
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-'))
      i++;
    size_t x = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
    if (i == x)
      return NULL;
  }
  if (i != n || n > 400)
    return NULL;
  char buf[401];
  memcpy(buf, s, n);
  buf[n] = '\0';
  if (!is_real) {
    errno = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (errno == 0 && *end == '\0')
      return json_integer(v);
  }
  char *end;
  double d = strtod(buf, &end);
  if (*end != '\0' || d != d || d - d != 0)
    return json_string("\x01"); /* out of range: the caller refuses it */
  /* as the reference: a whole number written with a fraction or an
   * exponent (1.0, 5e7) is an integer below 1e10 in magnitude */
  if (d > -1e10 && d < 1e10 && d == (double)(long long)d)
    return json_integer((long long)d);
  return json_real(d);
}

/* true, false, null or a number making up the whole of [s, s+n) after
 * trailing blanks, or NULL. */
static json_t *literal_of(const char *s, size_t n) {
  while (n > 0 && (unsigned char)s[n - 1] <= ' ')
    n--;
  if (n == 4 && !memcmp(s, "true", 4))
    return json_true();
  if (n == 5 && !memcmp(s, "false", 5))
    return json_false();
  if (n == 4 && !memcmp(s, "null", 4))
    return json_null();
  if (n && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
    return number_of(s, n);
  return NULL;
}

/* A value without quotes: a literal where one ends before a terminator,
 * else a string to the end of the line. */
static json_t *quoteless(hjson_parser *p) {
  size_t start = p->at;
  if (punctuator(cur(p)))
    return fail_at(p, start, "found '%c' where a value was expected", cur(p));
  for (;;) {
    int c = cur(p);
    int eol = c < 0 || c == '\n' || c == '\r';
    if (eol || c == ',' || c == '}' || c == ']' || c == '#' ||
        (c == '/' && (peek(p, 1) == '/' || peek(p, 1) == '*'))) {
      json_t *lit = literal_of(p->s + start, p->at - start);
      if (lit && json_is_string(lit)) {
        json_decref(lit);
        return fail_at(p, start, "a number too large for a double");
      }
      if (lit)
        return lit;
      if (eol) {
        size_t n = p->at - start;
        while (n > 0 && (unsigned char)p->s[start + n - 1] <= ' ')
          n--;
        json_t *v = json_stringn(p->s + start, n);
        return v ? v : fail_at(p, start, "a quoteless string is not valid UTF-8");
      }
    }
    p->at++;
  }
}

/* ------------------------------------------------------------ structure */

static json_t *value(hjson_parser *p);

/* A key: quoted, or the characters up to ':' (blanks only at its end). */
static char *key_name(hjson_parser *p, size_t *len) {
  int c = cur(p);
  if (c == '"' || c == '\'')
    return quoted_string(p, len);
  size_t start = p->at, end = 0;
  for (;;) {
    c = cur(p);
    if (c == ':') {
      if (p->at == start) {
        fail_at(p, start, "found ':' but no key name (quote an empty key: \"\")");
        return NULL;
      }
      size_t n = end ? end - start : p->at - start;
      char *k = malloc(n + 1);
      if (!k) {
        fail_at(p, start, "out of memory reading a key");
        return NULL;
      }
      memcpy(k, p->s + start, n);
      k[n] = '\0';
      *len = n;
      return k;
    }
    if (c < 0) {
      fail_at(p, p->at, "end of the file while reading a key name");
      return NULL;
    }
    if (c <= ' ') {
      if (!end)
        end = p->at;
    } else if (punctuator(c)) {
      fail_at(p, p->at, "found '%c' where a key name was expected (quote keys that hold "
              "{}[],: or blanks)", c);
      return NULL;
    } else if (end) {
      fail_at(p, end, "a key name has blanks in it (quote it)");
      return NULL;
    }
    p->at++;
  }
}

static json_t *object(hjson_parser *p, int braces) {
  size_t open = p->at;
  if (braces)
    p->at++;
  json_t *obj = json_object();
  if (!obj)
    return fail_at(p, open, "no host memory for a JSON node");
  skip_white(p);
  while (cur(p) >= 0) {
    if (braces && cur(p) == '}') {
      p->at++;
      return obj;
    }
    size_t key_at = p->at, klen = 0;
    char *key = key_name(p, &klen);
    if (!key)
      goto fail;
    if (strlen(key) != klen) {
      free(key);
      fail_at(p, key_at, "a key holds a NUL character");
      goto fail;
    }
    size_t was = path_push_key(p, key);
    skip_white(p);
    if (cur(p) != ':') {
      free(key);
      fail_at(p, p->at, "expected ':' after the key");
      goto fail;
    }
    p->at++;
    if (json_object_get(obj, key)) {
      fail_at(p, key_at, "key given twice; keep one");
      free(key);
      goto fail;
    }
    json_t *v = value(p);
    if (!v || json_object_set_new(obj, key, v)) {
      free(key);
      if (v)
        fail_at(p, key_at, "no host memory to store this key's value");
      goto fail;
    }
    free(key);
    path_pop(p, was);
    skip_white(p);
    if (cur(p) == ',') {
      p->at++;
      skip_white(p);
    }
  }
  if (!braces && !failed(p)) /* the end of the text, not an open comment */
    return obj;
  fail_at(p, open, "the object that opens here is not closed (a '}' is missing)");
fail:
  json_decref(obj);
  return NULL;
}

static json_t *array(hjson_parser *p) {
  size_t open = p->at++;
  json_t *arr = json_array();
  if (!arr)
    return fail_at(p, open, "no host memory for a JSON node");
  skip_white(p);
  while (cur(p) >= 0) {
    if (cur(p) == ']') {
      p->at++;
      return arr;
    }
    size_t was = path_push_index(p, json_array_size(arr));
    json_t *v = value(p);
    if (!v || json_array_append_new(arr, v)) {
      if (v)
        fail_at(p, open, "no host memory to store an array element");
      json_decref(arr);
      return NULL;
    }
    path_pop(p, was);
    skip_white(p);
    if (cur(p) == ',') {
      p->at++;
      skip_white(p);
    }
  }
  json_decref(arr);
  return fail_at(p, open, "the array that opens here is not closed (a ']' is missing)");
}

static json_t *value(hjson_parser *p) {
  skip_white(p);
  if (++p->depth > HJSON_DEPTH)
    return fail_at(p, p->at, "nested more than %d deep", HJSON_DEPTH);
  json_t *v;
  int c = cur(p);
  if (c == '{') {
    v = object(p, 1);
  } else if (c == '[') {
    v = array(p);
  } else if (c == '"' || c == '\'') {
    size_t start = p->at, n = 0;
    char *s = c == '\'' && peek(p, 1) == '\'' && peek(p, 2) == '\'' ? multiline_string(p, &n)
                                                                     : quoted_string(p, &n);
    v = s ? json_stringn(s, n) : NULL;
    if (s && !v)
      fail_at(p, start, "a string is not valid UTF-8");
    free(s);
  } else if (c < 0) {
    v = fail_at(p, p->at, "end of the file where a value was expected");
  } else {
    v = quoteless(p);
  }
  p->depth--;
  return v;
}

json_t *zinc_hjson_parse(const char *text, size_t len, zinc_hjson_error *err) {
  memset(err, 0, sizeof *err);
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) { /* a byte order mark */
    text += 3;
    len -= 3;
  }
  hjson_parser p = {.s = text, .n = len, .err = err};
  skip_white(&p);
  json_t *root;
  if (cur(&p) == '{' || cur(&p) == '[') {
    root = value(&p);
  } else {
    /* the root object's braces are optional; a lone literal is a value */
    size_t start = p.at;
    root = object(&p, 0);
    if (!root && !p.open_comment) { /* (the reference gives up at an open comment) */
      zinc_hjson_error first = *err;
      memset(err, 0, sizeof *err);
      p.at = start;
      p.depth = 0;
      path_pop(&p, 0);
      root = value(&p);
      if (root && (skip_white(&p) || p.at < p.n)) { /* not a lone value either */
        json_decref(root);
        root = NULL;
      }
      *err = first; /* kept with a lone value too, for a reader that needs an object */
      err->lone_value = root != NULL;
      return root;
    }
  }
  if (!root)
    return NULL;
  if (skip_white(&p)) {
    json_decref(root);
    return NULL;
  }
  if (p.at < p.n) {
    json_decref(root);
    return fail_at(&p, p.at, "text after the end of the document");
  }
  return root;
}
