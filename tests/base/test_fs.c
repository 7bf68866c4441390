/* test_fs.c — base/fs.h in a scratch directory: atomic replacement (the old
 * file stays whole when the write fails, no temporary is left), rm -r (not
 * following links), whole-file reads of empty and missing files, mkdir -p,
 * rename or exchange into place, short reads and file crcs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "base/env.h"
#include "base/fs.h"

static char scratch[512];

static int setup(void **state) {
  (void)state;
  const char *base = zinc_env_str("ZINC_TEST_BINARY_DIR");
  snprintf(scratch, sizeof scratch, "%s/test_fs.XXXXXX", base ? base : "/tmp");
  return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return zinc_fs_remove_tree(scratch) == ZINC_OK ? 0 : -1;
}

/* scratch/name, in a static buffer per slot. */
static const char *at(int slot, const char *name) {
  static char paths[4][700];
  snprintf(paths[slot], sizeof paths[slot], "%s/%s", scratch, name);
  return paths[slot];
}

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void expect_contents(const char *path, const char *want) {
  char *data = NULL;
  size_t len = 0;
  assert_int_equal(zinc_fs_read_all(path, &data, &len), ZINC_OK);
  assert_int_equal(len, strlen(want));
  assert_string_equal(data, want);
  free(data);
}

static void read_all_empty_and_missing(void **state) {
  (void)state;
  const char *empty = at(0, "empty");
  put_file(empty, "");
  char *data = NULL;
  size_t len = 7;
  assert_int_equal(zinc_fs_read_all(empty, &data, &len), ZINC_OK);
  assert_non_null(data); /* an empty string, not NULL */
  assert_int_equal(len, 0);
  assert_int_equal(data[0], '\0');
  free(data);
  const char *missing = at(1, "missing");
  data = (char *)1;
  assert_int_equal(zinc_fs_read_all(missing, &data, &len), ZINC_ERR_CORRUPT);
  assert_null(data);
  assert_int_equal(len, 0);
  assert_non_null(strstr(zinc_last_error(), missing));
  assert_non_null(strstr(zinc_last_error(), "is missing"));
}

static void write_atomic_replaces(void **state) {
  (void)state;
  const char *path = at(0, "latest"), *tmp = at(1, "latest.tmp");
  assert_int_equal(zinc_fs_write_atomic(path, "step1\n", 6), ZINC_OK);
  expect_contents(path, "step1\n");
  assert_int_equal(zinc_fs_write_atomic(path, "step22\n", 7), ZINC_OK);
  expect_contents(path, "step22\n");
  assert_false(exists(tmp));
  /* the temporary cannot be created: an error naming it, the old file whole */
  assert_int_equal(mkdir(tmp, 0755), 0);
  assert_int_equal(zinc_fs_write_atomic(path, "step333\n", 8), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), tmp));
  expect_contents(path, "step22\n");
  assert_int_equal(rmdir(tmp), 0);
  /* the rename fails (a non-empty directory is in the way): no temporary left */
  const char *dir = at(2, "blocked"), *inside = at(3, "blocked/x");
  assert_int_equal(mkdir(dir, 0755), 0);
  put_file(inside, "x");
  assert_int_equal(zinc_fs_write_atomic(dir, "new", 3), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "rename into place"));
  assert_false(exists(at(1, "blocked.tmp")));
  expect_contents(inside, "x");
  /* an empty write is a file of 0 bytes */
  assert_int_equal(zinc_fs_write_atomic(path, "", 0), ZINC_OK);
  expect_contents(path, "");
}

static void remove_tree_removes_all_but_link_targets(void **state) {
  (void)state;
  const char *keep = at(0, "keep");
  put_file(keep, "outside the tree");
  assert_int_equal(zinc_fs_mkdirs(at(1, "tree/a/b/c")), ZINC_OK);
  assert_int_equal(zinc_fs_mkdirs(at(1, "tree/a/b/c")), ZINC_OK); /* exists: fine */
  put_file(at(2, "tree/a/file"), "1");
  put_file(at(2, "tree/a/b/c/deep"), "2");
  assert_int_equal(symlink(keep, at(2, "tree/a/link")), 0);
  assert_int_equal(symlink(scratch, at(2, "tree/a/b/dirlink")), 0);
  assert_int_equal(zinc_fs_remove_tree(at(1, "tree")), ZINC_OK);
  assert_false(exists(at(1, "tree")));
  expect_contents(keep, "outside the tree");
  assert_true(exists(scratch));
  /* absent, and a plain file */
  assert_int_equal(zinc_fs_remove_tree(at(1, "tree")), ZINC_OK);
  assert_int_equal(zinc_fs_remove_tree(keep), ZINC_OK);
  assert_false(exists(keep));
}

static void rename_into_place_exchanges(void **state) {
  (void)state;
  const char *from = at(0, ".tag.partial"), *to = at(1, "tag");
  assert_int_equal(zinc_fs_mkdirs(from), ZINC_OK);
  put_file(at(2, ".tag.partial/v"), "first");
  int exchanged = -1;
  assert_int_equal(zinc_fs_rename_into_place(from, to, &exchanged), ZINC_OK);
  assert_int_equal(exchanged, 0);
  assert_false(exists(from));
  expect_contents(at(2, "tag/v"), "first");
  assert_int_equal(zinc_fs_mkdirs(from), ZINC_OK);
  put_file(at(2, ".tag.partial/v"), "second");
  assert_int_equal(zinc_fs_rename_into_place(from, to, &exchanged), ZINC_OK);
  assert_int_equal(exchanged, 1);
  expect_contents(at(2, "tag/v"), "second");
  expect_contents(at(2, ".tag.partial/v"), "first"); /* the old one, for the caller */
  assert_int_equal(zinc_fs_fsync(scratch, 1), ZINC_OK);
  assert_int_equal(zinc_fs_fsync(at(2, "tag/v"), 0), ZINC_OK);
  assert_int_equal(zinc_fs_fsync(at(2, "nothing"), 0), ZINC_ERR_IO);
}

static void ranges_and_crc(void **state) {
  (void)state;
  const char *path = at(0, "range");
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  const char *text = "0123456789abcdef";
  assert_int_equal(zinc_fs_pwrite_all(fd, path, text, 16, 0), ZINC_OK);
  char buf[16];
  assert_int_equal(zinc_fs_pread_all(fd, path, buf, 6, 10), ZINC_OK);
  assert_memory_equal(buf, "abcdef", 6);
  assert_int_equal(zinc_fs_pread_all(fd, path, buf, 8, 12), ZINC_ERR_CORRUPT);
  assert_non_null(strstr(zinc_last_error(), "truncated"));
  close(fd);
  uint32_t crc = 0;
  int64_t bytes = 0;
  assert_int_equal(zinc_fs_crc32c(path, &crc, &bytes), ZINC_OK);
  assert_int_equal(bytes, 16);
  assert_int_equal(crc, zinc_crc32c(0, text, 16));
  assert_int_equal(zinc_fs_crc32c(at(1, "absent"), &crc, &bytes), ZINC_ERR_CORRUPT);
}

static void error_messages(void **state) {
  (void)state;
  assert_int_equal(zinc_fs_error("write", "/x/y", 4096, ENOSPC), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "write /x/y at offset 4096: "));
  assert_non_null(strstr(zinc_last_error(), "free space"));
  zinc_fs_error("fsync", "/x/y", -1, EIO);
  assert_null(strstr(zinc_last_error(), "offset"));
  assert_null(strstr(zinc_last_error(), "free space"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(read_all_empty_and_missing, setup, teardown),
      cmocka_unit_test_setup_teardown(write_atomic_replaces, setup, teardown),
      cmocka_unit_test_setup_teardown(remove_tree_removes_all_but_link_targets, setup, teardown),
      cmocka_unit_test_setup_teardown(rename_into_place_exchanges, setup, teardown),
      cmocka_unit_test_setup_teardown(ranges_and_crc, setup, teardown),
      cmocka_unit_test(error_messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
