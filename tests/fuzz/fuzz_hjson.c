/*
 * fuzz_hjson.c — libFuzzer target for the Hjson reader (config/hjson.c).
 * Every input is refused with a line, a column and a message, or read; and
 * every input jansson reads as strict JSON (JSON is a subset of Hjson) must
 * read to the same value, numbers compared by value (the reader makes 1.0
 * and 5e7 integers, as the reference does). A broken invariant traps.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

#define REQUIRE(cond)                                                                    \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "fuzz_hjson: invariant failed: %s (line %d)\n", #cond, __LINE__); \
      __builtin_trap();                                                                  \
    }                                                                                    \
  } while (0)

static int same_value(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b))
    return json_number_value(a) == json_number_value(b);
  if (json_typeof(a) != json_typeof(b))
    return 0;
  if (json_is_object(a)) {
    if (json_object_size(a) != json_object_size(b))
      return 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)a, key, v) {
      const json_t *w = json_object_get(b, key);
      if (!w || !same_value(v, w))
        return 0;
    }
    return 1;
  }
  if (json_is_array(a)) {
    if (json_array_size(a) != json_array_size(b))
      return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
      if (!same_value(json_array_get(a, i), json_array_get(b, i)))
        return 0;
    return 1;
  }
  return json_equal((json_t *)a, (json_t *)b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zinc_hjson_error err;
  json_t *h = zinc_hjson_parse((const char *)data, size, &err);
  if (!h)
    REQUIRE(err.line >= 1 && err.column >= 1 && err.message[0]);
  json_error_t jerr;
  json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                         &jerr);
  /* a lone number or literal root is JSON but not a config; compare objects
   * and arrays, where the reader must agree with jansson */
  if (j && (json_is_object(j) || json_is_array(j)) && !memchr(data, 0, size)) {
    REQUIRE(h != NULL);
    REQUIRE(same_value(h, j));
  }
  json_decref(j);
  json_decref(h);
  return 0;
}
