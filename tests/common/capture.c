/*
 * capture.c — stderr and stdout capture for tests (capture.h).
 */
#include "common/capture.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void capture_begin(test_stderr *c, int fd, FILE *stream) {
  fflush(stream);
  c->fd = fd;
  c->tmp = tmpfile();
  c->saved_fd = c->tmp ? dup(fd) : -1;
  if (!c->tmp || c->saved_fd < 0 || dup2(fileno(c->tmp), fd) < 0) {
    perror("test capture: cannot redirect a stream to a temporary file");
    exit(1);
  }
}

static char *capture_end(test_stderr *c, FILE *stream) {
  fflush(stream);
  dup2(c->saved_fd, c->fd);
  close(c->saved_fd);
  /* the descriptor's offset: what was written through fd, not tmp's stdio */
  long len = lseek(fileno(c->tmp), 0, SEEK_END);
  char *text = malloc((size_t)(len > 0 ? len : 0) + 1);
  if (!text) {
    perror("test capture: captured text");
    exit(1);
  }
  rewind(c->tmp);
  size_t got = len > 0 ? fread(text, 1, (size_t)len, c->tmp) : 0;
  text[got] = '\0';
  fclose(c->tmp);
  c->tmp = NULL;
  return text;
}

void test_stderr_begin(test_stderr *c) { capture_begin(c, STDERR_FILENO, stderr); }
char *test_stderr_end(test_stderr *c) { return capture_end(c, stderr); }
void test_stdout_begin(test_stderr *c) { capture_begin(c, STDOUT_FILENO, stdout); }
char *test_stdout_end(test_stderr *c) { return capture_end(c, stdout); }

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
