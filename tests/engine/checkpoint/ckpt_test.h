/*
 * ckpt_test.h — helpers shared by the checkpoint save tests that run
 * several processes (test_ckpt_fs.c, test_ckpt_lock.c): a failure counter,
 * a one-parameter stage-1 engine whose every state value encodes a number,
 * and a reader that says which save a checkpoint on disk holds.
 */
#ifndef CKPT_TEST_H
#define CKPT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/checkpoint/format.h"
#include "zinc.h"

static int failures = 0;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* A built stage-1 engine on the cpu device with one rows x cols parameter. */
static zinc_engine *open_engine(zinc_param **p, int64_t rows, int64_t cols) {
  zinc_config *cfg;
  if (zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                        "{\"stage\": 1}}", &cfg) != ZINC_OK)
    return NULL;
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  opt.threads = 1;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK)
    return NULL;
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "block");
  int64_t s1[2] = {rows, cols};
  *p = zinc_param_add(e, m, "weight", ZINC_F32, 2, s1);
  if (!*p || zinc_engine_build(e, NULL, NULL) != ZINC_OK)
    return NULL;
  return e;
}

/* Every state of p encodes `value` (state kind k: value + k/4). */
static int set_values(zinc_engine *e, zinc_param *p, int value) {
  int64_t n = zinc_param_numel(p);
  float *v = malloc((size_t)n * 4);
  for (int k = 0; k < 3; k++) {
    for (int64_t j = 0; j < n; j++)
      v[j] = (float)value + 0.25f * (float)k;
    zinc_state_kind kind = k == 0 ? ZINC_STATE_PARAM : k == 1 ? ZINC_STATE_EXP_AVG
                                                               : ZINC_STATE_EXP_AVG_SQ;
    if (zinc_param_set_full(e, p, kind, v) != ZINC_OK)
      return -1;
  }
  free(v);
  return 0;
}

/* The value every element of dir/tag (NULL: latest) encodes, after every
 * checksum verified; -1 when it does not open or verify or values differ. */
static int saved_value(const char *dir, const char *tag) {
  zinc_ckpt_dir *d = NULL;
  if (zinc_ckpt_dir_open(dir, tag, &d) != ZINC_OK) {
    fprintf(stderr, "%s/%s does not open: %s\n", dir, tag ? tag : "latest", zinc_last_error());
    return -1;
  }
  int value = -2;
  for (int f = 0; f < d->manifest->nfiles && value != -1; f++) {
    if (zinc_ckpt_dir_verify_file(d, f) != ZINC_OK) {
      fprintf(stderr, "%s fails verification: %s\n", d->path, zinc_last_error());
      value = -1;
      break;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", d->path, d->manifest->files[f].name);
    zinc_shard_reader *r;
    if (zinc_shard_reader_open(path, &r) != ZINC_OK) {
      value = -1;
      break;
    }
    int64_t n = d->manifest->files[f].elements;
    float *v = malloc((size_t)n * 4);
    for (int s = 0; s < 3 && value != -1; s++) {
      if (zinc_shard_reader_read(r, s, 0, v, (size_t)n) != ZINC_OK) {
        value = -1;
        break;
      }
      for (int64_t j = 0; j < n; j++) {
        int t = (int)floorf(v[j]);
        if (v[j] != (float)t + 0.25f * (float)s || (value >= 0 && t != value)) {
          fprintf(stderr, "%s: element %lld of section %d is %g (mixed saves)\n", d->path,
                  (long long)j, s, v[j]);
          value = -1;
          break;
        }
        value = t;
      }
    }
    free(v);
    zinc_shard_reader_close(r);
  }
  zinc_ckpt_dir_close(d);
  return value;
}

#endif /* CKPT_TEST_H */
