/*
 * config_test_util.h — helpers the config tests (and the config fuzzer)
 * share: where the corpus lives, listing it, and comparing two settings
 * structs field for field. Header-only (static functions): each test
 * program is one translation unit, and the fuzzer builds without the tests'
 * common library. (What the logger writes is captured with
 * common/capture.h.)
 */
#ifndef ZINC_CONFIG_TEST_UTIL_H
#define ZINC_CONFIG_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

#ifndef ZINC_SOURCE_DIR
#define ZINC_SOURCE_DIR "."
#endif

/* tests/config/<sub> of the source tree ($ZINC_TEST_SOURCE_DIR under ctest). */
static inline void corpus_dir(const char *sub, char *out, size_t cap) {
  const char *root = getenv("ZINC_TEST_SOURCE_DIR");
  snprintf(out, cap, "%s/tests/config/%s", root ? root : ZINC_SOURCE_DIR, sub);
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.json names in dir, sorted; returns the count (names freed by the
 * caller with free_names). */
static inline int list_json(const char *dir, char ***names_out) {
  DIR *d = opendir(dir);
  char **names = NULL;
  int n = 0, cap = 0;
  if (!d) {
    *names_out = NULL;
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      names = realloc(names, (size_t)cap * sizeof *names);
    }
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, compare_names);
  *names_out = names;
  return n;
}

static inline void free_names(char **names, int n) {
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

static inline int same_string(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* 1 if a and b hold the same settings. Strings are compared by value; the
 * rest byte for byte (both come from zinc_settings_defaults, which zeroes
 * the padding). On a difference, names the first one on stderr. */
static inline int settings_same(const zinc_settings *a, const zinc_settings *b) {
  const zinc_offload_settings *oa[2] = {&a->offload_optimizer, &a->offload_param};
  const zinc_offload_settings *ob[2] = {&b->offload_optimizer, &b->offload_param};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++)
      if (!same_string(oa[k]->nvme_paths[i], ob[k]->nvme_paths[i])) {
        fprintf(stderr, "settings differ: %s nvme_paths[%d]\n", k ? "offload_param" :
                "offload_optimizer", i);
        return 0;
      }
  if (!same_string(a->memory_timeline, b->memory_timeline)) {
    fprintf(stderr, "settings differ: memory_timeline\n");
    return 0;
  }
  zinc_settings x = *a, y = *b;
  x.memory_timeline = y.memory_timeline = NULL;
  for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++) {
    x.offload_optimizer.nvme_paths[i] = y.offload_optimizer.nvme_paths[i] = NULL;
    x.offload_param.nvme_paths[i] = y.offload_param.nvme_paths[i] = NULL;
  }
  const unsigned char *px = (const unsigned char *)&x, *py = (const unsigned char *)&y;
  for (size_t i = 0; i < sizeof x; i++)
    if (px[i] != py[i]) {
      fprintf(stderr, "settings differ at byte offset %zu of zinc_settings\n", i);
      return 0;
    }
  return 1;
}

#endif /* ZINC_CONFIG_TEST_UTIL_H */
