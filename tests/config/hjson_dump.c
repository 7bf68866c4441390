/*
 * hjson_dump.c — read a file with zinc's Hjson reader alone (config/hjson.c)
 * and print the value as compact JSON with sorted keys, or
 * "ERROR line L column C: message". hjson_check.py compares its output with
 * the reference implementation's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "config/config_internal.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hjson_dump FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  size_t n;
  while (text && (n = fread(text + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap)
      text = realloc(text, cap *= 2);
  }
  fclose(f);
  if (!text)
    return 2;
  zinc_hjson_error err;
  json_t *v = zinc_hjson_parse(text, len, &err);
  if (!v) {
    printf("ERROR line %d column %d: %s\n", err.line, err.column, err.message);
  } else {
    char *out = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY |
                                  JSON_REAL_PRECISION(17));
    printf("%s\n", out ? out : "ERROR dump");
    free(out);
    json_decref(v);
  }
  free(text);
  return 0;
}
