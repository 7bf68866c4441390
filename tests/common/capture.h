/*
 * capture.h — capture what a test's code writes to stderr (zinc's logger)
 * between test_stderr_begin and test_stderr_end, to check its warnings, or
 * to stdout (the reports a config asks for) between test_stdout_begin and
 * test_stdout_end. Not thread-safe: the whole process's stream is
 * redirected meanwhile. Captured stdout is a file, so the C library
 * buffers the test's own printf there as it buffers a trainer's whose
 * output goes to a file.
 */
#ifndef ZINC_TESTS_COMMON_CAPTURE_H
#define ZINC_TESTS_COMMON_CAPTURE_H

#include <stdio.h>

typedef struct {
  int saved_fd; /* the real stream, restored by test_stderr_end */
  FILE *tmp;    /* where it goes meanwhile (an unlinked temporary file) */
  int fd;       /* STDERR_FILENO or STDOUT_FILENO */
} test_stderr;

/* Redirect stderr into a temporary file. Exits when no file can be made
 * (the test cannot go on without its capture). */
void test_stderr_begin(test_stderr *c);

/* Restore stderr; returns everything written since begin (malloc'ed,
 * NUL-terminated, the caller frees it). */
char *test_stderr_end(test_stderr *c);

/* The same for stdout (the struct is test_stderr's). */
void test_stdout_begin(test_stderr *c);
char *test_stdout_end(test_stderr *c);

/* The number of lines of text that contain needle. */
int test_count_lines(const char *text, const char *needle);

#endif /* ZINC_TESTS_COMMON_CAPTURE_H */
