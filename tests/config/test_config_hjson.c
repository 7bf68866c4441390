/*
 * test_config_hjson.c — DeepSpeed reads its config with Hjson; so does zinc.
 * Every tests/config/hjson/NAME.hjson (comments, trailing and missing
 * commas, quoteless keys and strings, ''' strings, no root braces) loads to
 * exactly the settings of its strict-JSON twin NAME.json, read by jansson
 * (an independent reader), with the same warning count; every
 * invalid_*.hjson fails with ZINC_ERR_CONFIG naming the line, the column,
 * the path and the reason from its table entry. Both tables must cover the
 * folder, so that a file added without an assertion fails the test.
 * Every construct left open at the end of the text (a block comment
 * anywhere, a string of either quote, a ''' string, an object, an array,
 * a quoted key) is ZINC_ERR_CONFIG at the line and column where it opens,
 * never a config with the settings after it dropped; a UTF-8 byte order
 * mark is invisible, in JSON and in Hjson.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "zinc.h"

static const char *const twins[] = {"zero3_commented", "missing_commas", "quoteless",
                                    "hf_auto_trailing"};

typedef struct {
  const char *name;
  const char *where; /* "line L, column C" */
  const char *why;   /* part of the reason */
} bad_file;

static const bad_file bad[] = {
    {"invalid_duplicate", "line 5, column 3", "given twice"},
    {"invalid_unclosed", "line 1, column 1", "not closed"},
    {"invalid_key_blank", "line 2, column 8", "blanks"},
    {"invalid_unclosed_string", "line 3, column 25", "not closed"},
    {"invalid_unclosed_comment", "line 1, column 1", "comment that starts here is not closed"},
    {"invalid_unclosed_comment_end", "line 3, column 1",
     "comment that starts here is not closed"},
};

static void path_of(char *out, size_t cap, const char *name, const char *ext) {
  snprintf(out, cap, "%s/tests/config/hjson/%s.%s", ZINC_SOURCE_DIR, name, ext);
}

static char *settings_of(const char *path, int *warnings) {
  zinc_config *cfg = NULL;
  zinc_status st = zinc_config_load(path, &cfg);
  if (st != ZINC_OK)
    fail_msg("%s: %s: %s", path, zinc_status_name(st), zinc_last_error());
  char *json = NULL;
  assert_int_equal(zinc_config_to_json(cfg, &json), ZINC_OK);
  *warnings = zinc_config_warning_count(cfg);
  zinc_config_free(cfg);
  return json;
}

static void twins_match(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
    char hjson[1024], json[1024];
    path_of(hjson, sizeof hjson, twins[i], "hjson");
    path_of(json, sizeof json, twins[i], "json");
    int wh = 0, wj = 0;
    char *a = settings_of(hjson, &wh), *b = settings_of(json, &wj);
    if (strcmp(a, b) != 0)
      fail_msg("%s: the Hjson file resolves to\n%s\nbut its JSON twin to\n%s", twins[i], a, b);
    assert_int_equal(wh, wj);
    free(a);
    free(b);
  }
}

static void bad_files_fail(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char path[1024];
    path_of(path, sizeof path, bad[i].name, "hjson");
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_load(path, &cfg);
    const char *msg = zinc_last_error();
    if (st != ZINC_ERR_CONFIG || !strstr(msg, bad[i].where) || !strstr(msg, bad[i].why))
      fail_msg("%s: %s: %s (want CONFIG, \"%s\", \"%s\")", bad[i].name, zinc_status_name(st),
               msg, bad[i].where, bad[i].why);
    assert_null(cfg);
  }
}

/* Texts with one construct left open, where it opens, and the reason. */
typedef struct {
  const char *text;
  const char *where; /* "line L, column C" */
  const char *why;
} open_case;

static const open_case open_cases[] = {
    /* a block comment: before the document (with and without a '{' after
     * it), inside it, after it, between Hjson sections */
    {"/* tuned for 8 nodes\n{\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": "
     "{\"stage\": 3}}", "line 1, column 1", "comment that starts here is not closed"},
    {"/* tuned for 8 nodes", "line 1, column 1", "comment that starts here is not closed"},
    {"  /* tuned for 8 nodes\n\n", "line 1, column 3", "comment that starts here is not closed"},
    {"{\"train_micro_batch_size_per_gpu\": 4, /* x\n\"zero_optimization\": {\"stage\": 3}}",
     "line 1, column 39", "comment that starts here is not closed"},
    {"{\"train_micro_batch_size_per_gpu\": 4}\n/* the rest", "line 2, column 1",
     "comment that starts here is not closed"},
    {"train_micro_batch_size_per_gpu: 4\n/* old: {stage: 2}\nzero_optimization: {stage: 3}\n",
     "line 2, column 1", "comment that starts here is not closed"},
    {"train_micro_batch_size_per_gpu: 4 /* four\nzero_optimization: {stage: 3}\n",
     "line 1, column 35", "comment that starts here is not closed"},
    {"train_micro_batch_size_per_gpu: 4\nzero_optimization: {stage: 3 /* three\n}\n",
     "line 2, column 30", "comment that starts here is not closed"},
    {"{\"train_micro_batch_size_per_gpu\": 4, \"x\": [1, /* two\n2]}", "line 1, column 48",
     "comment that starts here is not closed"},
    /* strings of each quote, a ''' string, a quoted key, an escape at the end */
    {"train_micro_batch_size_per_gpu: 4\noptimizer: {type: \"Adam\n}\n", "line 2, column 19",
     "not closed"},
    {"train_micro_batch_size_per_gpu: 4\noptimizer: {type: 'Adam\n}\n", "line 2, column 19",
     "not closed"},
    {"train_micro_batch_size_per_gpu: 4\nnote: '''tuned\n", "line 2, column 7", "not closed"},
    {"note: '''tuned", "line 1, column 7", "not closed"},
    {"train_micro_batch_size_per_gpu: 4\n\"zero_optimization: {stage: 3}\n", "line 2, column 1",
     "not closed"},
    {"{\"train_micro_batch_size_per_gpu\": 4, \"optimizer\": {\"type\": \"Adam\\",
     "line 1, column 61", "not closed"},
    /* objects and arrays */
    {"{\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 3}",
     "line 1, column 1", "not closed"},
    {"zero_optimization: {stage: 3", "line 1, column 20", "not closed"},
    {"train_micro_batch_size_per_gpu: 4\nzero_optimization: {stage: 3\n", "line 2, column 20",
     "not closed"},
    {"train_micro_batch_size_per_gpu: 4\noptimizer: {type: \"Adam\", params: {betas: [0.9, 0.99\n",
     "line 2, column 43", "not closed"},
};

static void open_constructs_fail(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof open_cases / sizeof open_cases[0]; i++) {
    zinc_config *cfg = (zinc_config *)&cfg;
    zinc_status st = zinc_config_parse(open_cases[i].text, &cfg);
    const char *msg = zinc_last_error();
    if (st != ZINC_ERR_CONFIG || !strstr(msg, open_cases[i].where) ||
        !strstr(msg, open_cases[i].why) || strstr(msg, "empty"))
      fail_msg("case %zu %s: %s: %s (want CONFIG, \"%s\", \"%s\")", i, open_cases[i].text,
               zinc_status_name(st), st == ZINC_OK ? "loaded" : msg, open_cases[i].where,
               open_cases[i].why);
    assert_null(cfg);
  }
}

/* A byte order mark (EF BB BF, as editors on Windows save UTF-8) loads as
 * the same text without it, JSON and Hjson, from a string and from a file;
 * an error after it counts columns without it. */
static void byte_order_mark_is_invisible(void **state) {
  (void)state;
  static const char *const texts[] = {
      "{\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 3}}",
      "train_micro_batch_size_per_gpu: 4\nzero_optimization: {stage: 3}\n",
      "// tuned for 8 nodes\n{train_micro_batch_size_per_gpu: 4, zero_optimization: {stage: 3}}",
  };
  char path[] = "/tmp/zinc_bom_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    char with[512];
    snprintf(with, sizeof with, "\xEF\xBB\xBF%s", texts[i]);
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_parse(with, &cfg);
    if (st != ZINC_OK)
      fail_msg("text %zu after a BOM: %s: %s", i, zinc_status_name(st), zinc_last_error());
    assert_int_equal(cfg->s.train_micro_batch_size_per_gpu, 4);
    assert_int_equal(cfg->s.stage, 3);
    assert_int_equal(zinc_config_warning_count(cfg), 0);
    zinc_config_free(cfg);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(with, f);
    fclose(f);
    st = zinc_config_load(path, &cfg);
    if (st != ZINC_OK)
      fail_msg("file %zu after a BOM: %s: %s", i, zinc_status_name(st), zinc_last_error());
    assert_int_equal(cfg->s.stage, 3);
    zinc_config_free(cfg);
  }
  unlink(path);
  static const char *const broken[] = {"{\"fp16\": {\"enabled\": tru}}",
                                       "fp16: {enabled: true\n", "/* x\n{\"fp16\": {}}"};
  for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
    zinc_config *cfg = NULL;
    char without[1024], with[512];
    assert_int_equal(zinc_config_parse(broken[i], &cfg), ZINC_ERR_CONFIG);
    snprintf(without, sizeof without, "%s", zinc_last_error());
    snprintf(with, sizeof with, "\xEF\xBB\xBF%s", broken[i]);
    assert_int_equal(zinc_config_parse(with, &cfg), ZINC_ERR_CONFIG);
    if (strcmp(without, zinc_last_error()) != 0)
      fail_msg("broken text %zu: with a BOM\n  %s\nwithout\n  %s", i, zinc_last_error(), without);
  }
}

static int listed(const char *file) {
  char stem[256];
  snprintf(stem, sizeof stem, "%s", file);
  char *dot = strrchr(stem, '.');
  if (!dot)
    return 0;
  *dot = '\0';
  for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++)
    if (!strcmp(stem, twins[i]))
      return 1;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!strcmp(stem, bad[i].name) && !strcmp(dot + 1, "hjson"))
      return 1;
  return 0;
}

static void tables_cover_folder(void **state) {
  (void)state;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/config/hjson", ZINC_SOURCE_DIR);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *ent;
  int files = 0;
  while ((ent = readdir(d))) {
    if (ent->d_name[0] == '.')
      continue;
    files++;
    if (!listed(ent->d_name))
      fail_msg("tests/config/hjson/%s has no entry in test_config_hjson.c", ent->d_name);
  }
  closedir(d);
  assert_int_equal(files, (int)(2 * (sizeof twins / sizeof twins[0]) +
                                sizeof bad / sizeof bad[0]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(twins_match),
      cmocka_unit_test(bad_files_fail),
      cmocka_unit_test(tables_cover_folder),
      cmocka_unit_test(open_constructs_fail),
      cmocka_unit_test(byte_order_mark_is_invisible),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
