/*
 * capture.h — capture what a test's code writes to stderr (zinc's logger)
 * between test_stderr_begin and test_stderr_end, to check its warnings.
 * Not thread-safe: the whole process's stderr is redirected meanwhile.
 */
#ifndef ZINC_TESTS_COMMON_CAPTURE_H
#define ZINC_TESTS_COMMON_CAPTURE_H

#include <stdio.h>

typedef struct {
  int saved_fd; /* the real stderr, restored by test_stderr_end */
  FILE *tmp;    /* where stderr goes meanwhile (an unlinked temporary file) */
} test_stderr;

/* Redirect stderr into a temporary file. Exits when no file can be made
 * (the test cannot go on without its capture). */
void test_stderr_begin(test_stderr *c);

/* Restore stderr; returns everything written since begin (malloc'ed,
 * NUL-terminated, the caller frees it). */
char *test_stderr_end(test_stderr *c);

/* The number of lines of text that contain needle. */
int test_count_lines(const char *text, const char *needle);

#endif /* ZINC_TESTS_COMMON_CAPTURE_H */
