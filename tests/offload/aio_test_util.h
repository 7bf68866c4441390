/*
 * aio_test_util.h — helpers shared by the I/O engine and swap tests:
 * scratch directories under the build tree (/tmp and /dev/shm take
 * O_DIRECT on this kernel, but a build-tree directory sits on the real
 * disk), deterministic fill patterns with a checker that prints the first
 * mismatches, and engine parameters. (What the logger writes is captured
 * with common/capture.h.)
 */
#ifndef ZINC_TESTS_AIO_TEST_UTIL_H
#define ZINC_TESTS_AIO_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/capture.h"
#include "offload/aio.h"

static int scratch_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Remove a directory tree (the test's own scratch space only). */
static inline void scratch_remove(const char *dir) {
  nftw(dir, scratch_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* <build dir>/aio_scratch/<name>-<pid>, created empty. */
static inline void scratch_make(char *out, size_t len, const char *name) {
  const char *base = getenv("ZINC_TEST_BINARY_DIR");
  char root[2048];
  int n = snprintf(root, sizeof root, "%s/aio_scratch", base && *base ? base : ".");
  int m = snprintf(out, len, "%s/%s-%ld", root, name, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof root || m < 0 || (size_t)m >= len) {
    fprintf(stderr, "scratch path too long under %s\n", base);
    exit(1);
  }
  mkdir(root, 0755);
  scratch_remove(out);
  if (mkdir(out, 0755) != 0) {
    fprintf(stderr, "cannot create scratch directory %s: %s\n", out, strerror(errno));
    exit(1);
  }
}

/* Entries in dir other than . and .. (-1 if it does not exist). */
static inline int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      n++;
  closedir(d);
  return n;
}

static inline unsigned char pattern_byte(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 29;
  return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static inline void pattern_fill(void *buf, uint64_t bytes, uint64_t seed) {
  unsigned char *p = buf;
  for (uint64_t i = 0; i < bytes; i++)
    p[i] = pattern_byte(seed, i);
}

/* 0 if buf holds the pattern; else prints the first mismatches and the
 * count, and returns the count. */
static inline uint64_t pattern_check(const void *buf, uint64_t bytes, uint64_t seed,
                                     const char *what) {
  const unsigned char *p = buf;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < bytes; i++) {
    unsigned char want = pattern_byte(seed, i);
    if (p[i] != want) {
      if (bad < 5)
        fprintf(stderr, "%s: byte %llu is 0x%02x, expected 0x%02x\n", what,
                (unsigned long long)i, p[i], want);
      bad++;
    }
  }
  if (bad)
    fprintf(stderr, "%s: %llu of %llu bytes differ\n", what, (unsigned long long)bad,
            (unsigned long long)bytes);
  return bad;
}

/* Engine parameters probing one directory. */
static inline zinc_aio_params test_params(const char *dir, int64_t block_size, int queue_depth,
                                          int rings) {
  zinc_aio_params p;
  memset(&p, 0, sizeof p);
  p.block_size = block_size;
  p.queue_depth = queue_depth;
  p.rings = rings;
  p.overlap_events = 1;
  p.probe_dirs[0] = dir;
  p.probe_dir_count = dir ? 1 : 0;
  static const zinc_aio_fault no_fault;
  p.fault = &no_fault; /* tests set faults explicitly, not from the environment */
  return p;
}

#endif /* ZINC_TESTS_AIO_TEST_UTIL_H */
