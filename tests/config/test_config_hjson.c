/*
 * test_config_hjson.c — DeepSpeed reads its config with Hjson; so does zinc.
 * Every tests/config/hjson/NAME.hjson (comments, trailing and missing
 * commas, quoteless keys and strings, ''' strings, no root braces) loads to
 * exactly the settings of its strict-JSON twin NAME.json, read by jansson
 * (an independent reader), with the same warning count; every
 * invalid_*.hjson fails with ZINC_ERR_CONFIG naming the line, the column,
 * the path and the reason from its table entry. Both tables must cover the
 * folder, so that a file added without an assertion fails the test.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
