/*
 * json_locate.c — the JSON path of a byte offset in a JSON text.
 *
 * jansson reports a syntax error or a duplicate key by line and column;
 * a user wants to read "zero_optimization.stage" as well. This scans the
 * text up to the offset with a small tokenizer (strings with escapes,
 * brackets, commas, colons) and keeps a stack of the containers it is in:
 * for an object the last key seen, for an array the element index. It is
 * tolerant: on broken input it still names the deepest place it reached.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define LOCATE_DEPTH 64

typedef struct {
  int is_object;
  size_t index;          /* arrays: element index                  */
  size_t key_at, key_len; /* objects: the last key (offsets in text) */
  int has_key;
  int expect_key;        /* objects: the next string is a key      */
} locate_level;

/* Offset just past the string that starts at text[i] == '"'. */
static size_t skip_string(const char *text, size_t len, size_t i) {
  for (i++; i < len; i++) {
    if (text[i] == '\\')
      i++;
    else if (text[i] == '"')
      return i + 1;
  }
  return len;
}

void zinc_json_path_at(const char *text, size_t len, size_t offset, char *out,
                       size_t cap) {
  locate_level stack[LOCATE_DEPTH];
  int depth = 0;
  if (offset > len)
    offset = len;
  size_t i = 0;
  while (i < offset) {
    char c = text[i];
    locate_level *top = depth > 0 && depth <= LOCATE_DEPTH ? &stack[depth - 1] : NULL;
    if (c == '"') {
      size_t end = skip_string(text, len, i);
      if (top && top->is_object && top->expect_key) {
        top->key_at = i + 1;
        top->key_len = end > i + 1 ? end - i - 2 : 0;
        if (end > offset) /* the string runs past the offset */
          top->key_len = offset > i + 1 ? offset - i - 1 : 0;
        top->has_key = 1;
        top->expect_key = 0;
      }
      i = end;
      continue;
    }
    if (c == '{' || c == '[') {
      if (depth < LOCATE_DEPTH)
        stack[depth] = (locate_level){.is_object = c == '{', .expect_key = c == '{'};
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth > 0)
        depth--;
    } else if (c == ',' && top) {
      if (top->is_object) {
        top->expect_key = 1;
        top->has_key = 0;
      } else {
        top->index++;
      }
    }
    i++;
  }
  size_t n = 0;
  out[0] = '\0';
  int shown = depth < LOCATE_DEPTH ? depth : LOCATE_DEPTH;
  for (int d = 0; d < shown && n + 1 < cap; d++) {
    int w;
    if (stack[d].is_object && stack[d].has_key)
      w = snprintf(out + n, cap - n, "%s%.*s", n ? "." : "", (int)stack[d].key_len,
                   text + stack[d].key_at);
    else if (stack[d].is_object)
      break; /* inside an object, before its next key */
    else
      w = snprintf(out + n, cap - n, "[%zu]", stack[d].index);
    if (w < 0)
      break;
    n += (size_t)w < cap - n ? (size_t)w : cap - n - 1;
  }
}
