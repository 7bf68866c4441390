/*
 * capture.c — stderr capture for tests (capture.h).
 */
#include "common/capture.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void test_stderr_begin(test_stderr *c) {
  fflush(stderr);
  c->tmp = tmpfile();
  c->saved_fd = c->tmp ? dup(STDERR_FILENO) : -1;
  if (!c->tmp || c->saved_fd < 0 || dup2(fileno(c->tmp), STDERR_FILENO) < 0) {
    perror("test_stderr_begin: cannot redirect stderr to a temporary file");
    exit(1);
  }
}

char *test_stderr_end(test_stderr *c) {
  fflush(stderr);
  dup2(c->saved_fd, STDERR_FILENO);
  close(c->saved_fd);
  long len = ftell(c->tmp);
  char *text = malloc((size_t)(len > 0 ? len : 0) + 1);
  if (!text) {
    perror("test_stderr_end: captured text");
    exit(1);
  }
  rewind(c->tmp);
  size_t got = len > 0 ? fread(text, 1, (size_t)len, c->tmp) : 0;
  text[got] = '\0';
  fclose(c->tmp);
  c->tmp = NULL;
  return text;
}

int test_count_lines(const char *text, const char *needle) {
  int n = 0;
  const char *line = text;
  while (*line) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    const char *hit = strstr(line, needle);
    if (hit && hit + strlen(needle) <= line + len)
      n++;
    line += len + (end ? 1 : 0);
  }
  return n;
}
