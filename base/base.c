/*
 * base.c — error messages, the logger, time, allocation helpers, crc32c.
 *
 * The error message lives in a thread-local buffer: each thread sees the
 * last failure it caused. Messages are truncated at ZINC_ERROR_MAX bytes.
 */
#define _GNU_SOURCE
#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

#define ZINC_ERROR_MAX 2048

static _Thread_local char error_message[ZINC_ERROR_MAX];

zinc_status zinc_verror(zinc_status st, const char *fmt, va_list ap) {
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  if (zinc_log_enabled(ZINC_LOG_DEBUG))
    zinc_log(ZINC_LOG_DEBUG, "error %s: %s", zinc_status_name(st), error_message);
  return st;
}

zinc_status zinc_error(zinc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  zinc_verror(st, fmt, ap);
  va_end(ap);
  return st;
}

ZINC_API zinc_status zinc_error_set(zinc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  zinc_verror(st, fmt, ap);
  va_end(ap);
  return st;
}

zinc_status zinc_error_wrap(zinc_status st, const char *fmt, ...) {
  char old[ZINC_ERROR_MAX];
  memcpy(old, error_message, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n + 2 < sizeof error_message) {
    size_t room = sizeof error_message - (size_t)n;
    memcpy(error_message + n, ": ", 2);
    size_t len = strnlen(old, room - 3);
    memcpy(error_message + n + 2, old, len);
    error_message[(size_t)n + 2 + len] = '\0';
  }
  return st;
}

void zinc_error_clear(void) { error_message[0] = '\0'; }

const char *zinc_last_error(void) { return error_message; }

const char *zinc_status_name(zinc_status s) {
  switch (s) {
  case ZINC_OK: return "ZINC_OK";
  case ZINC_ERR_INVALID: return "ZINC_ERR_INVALID";
  case ZINC_ERR_CONFIG: return "ZINC_ERR_CONFIG";
  case ZINC_ERR_NOMEM: return "ZINC_ERR_NOMEM";
  case ZINC_ERR_IO: return "ZINC_ERR_IO";
  case ZINC_ERR_COMM: return "ZINC_ERR_COMM";
  case ZINC_ERR_DEVICE: return "ZINC_ERR_DEVICE";
  case ZINC_ERR_UNSUPPORTED: return "ZINC_ERR_UNSUPPORTED";
  case ZINC_ERR_CORRUPT: return "ZINC_ERR_CORRUPT";
  }
  return "ZINC_ERR_(unknown)";
}

#define ZINC_STR_(x) #x
#define ZINC_STR(x) ZINC_STR_(x)
const char *zinc_version(void) {
  return ZINC_STR(ZINC_VERSION_MAJOR) "." ZINC_STR(ZINC_VERSION_MINOR) "." ZINC_STR(
      ZINC_VERSION_PATCH);
}

size_t zinc_dtype_size(zinc_dtype dt) {
  switch (dt) {
  case ZINC_F32: return 4;
  case ZINC_BF16: return 2;
  case ZINC_F16: return 2;
  }
  return 0;
}

const char *zinc_dtype_name(zinc_dtype dt) {
  switch (dt) {
  case ZINC_F32: return "f32";
  case ZINC_BF16: return "bf16";
  case ZINC_F16: return "f16";
  }
  return "unknown";
}

/* ------------------------------------------------------------------ logger */

static atomic_int log_level = -1; /* -1: not yet read from the environment */
static atomic_int log_rank = -1;

int zinc_log_level_parse(const char *s) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  if (!s)
    return -1;
  for (int i = 0; i < 4; i++)
    if (strcasecmp(s, names[i]) == 0)
      return i;
  if (strcasecmp(s, "warning") == 0)
    return ZINC_LOG_WARN;
  return -1;
}

static int current_level(void) {
  int lv = atomic_load(&log_level);
  if (lv < 0) {
    /* Not zinc_env_choice: its warning would come back here before the
     * level is set. Set it first, then warn. */
    const char *env = zinc_env_str("ZINC_LOG_LEVEL");
    lv = zinc_log_level_parse(env);
    int expected = -1;
    if (atomic_compare_exchange_strong(&log_level, &expected, lv < 0 ? ZINC_LOG_WARN : lv) &&
        env && lv < 0)
      zinc_env_reject("ZINC_LOG_LEVEL", env, "one of error, warn, info, debug", "using warn");
    lv = atomic_load(&log_level);
  }
  return lv;
}

int zinc_log_enabled(zinc_log_level level) { return (int)level <= current_level(); }

void zinc_log_set_level(zinc_log_level level) {
  /* The environment wins over the config so that a user can turn on debug
   * output without editing a file. */
  if (zinc_log_level_parse(zinc_env_str("ZINC_LOG_LEVEL")) >= 0)
    return;
  atomic_store(&log_level, (int)level);
}

void zinc_log_set_rank(int rank) { atomic_store(&log_rank, rank); }
int zinc_log_rank(void) { return atomic_load(&log_rank); }

static void vlog(zinc_log_level level, const char *fmt, va_list ap) {
  static const char *tags[] = {"error", "warn", "info", "debug"};
  char line[4096];
  int rank = atomic_load(&log_rank);
  int n;
  if (rank >= 0)
    n = snprintf(line, sizeof line, "[zinc %s rank %d] ", tags[level], rank);
  else
    n = snprintf(line, sizeof line, "[zinc %s] ", tags[level]);
  if (n < 0)
    return;
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  size_t len = strlen(line);
  if (len + 1 < sizeof line) {
    line[len++] = '\n';
    line[len] = '\0';
  }
  /* One write per line so that lines from several ranks do not interleave. */
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}

void zinc_log(zinc_log_level level, const char *fmt, ...) {
  if (!zinc_log_enabled(level))
    return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

void zinc_log_text(const char *text) {
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(STDERR_FILENO, text + done, len - done);
    if (w <= 0)
      return;
    done += (size_t)w;
  }
}

void zinc_log_report_text(const char *text) {
  fflush(stdout); /* the trainer's lines first, then the block whole */
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(STDOUT_FILENO, text + done, len - done);
    if (w <= 0)
      return;
    done += (size_t)w;
  }
}

void zinc_log_report0(const char *fmt, ...) {
  int rank = atomic_load(&log_rank);
  if (rank > 0)
    return;
  char line[4096];
  int n = snprintf(line, sizeof line, "[Rank %d] ", rank < 0 ? 0 : rank);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  size_t len = strlen(line);
  if (len + 1 < sizeof line) {
    line[len++] = '\n';
    line[len] = '\0';
  }
  fflush(stdout); /* after what the trainer printed before */
  ssize_t w = write(STDOUT_FILENO, line, len);
  (void)w;
}

void zinc_log0(zinc_log_level level, const char *fmt, ...) {
  if (!zinc_log_enabled(level) || atomic_load(&log_rank) > 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

/* -------------------------------------------------------------- utilities */

double zinc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zinc_status zinc_calloc(void **out, size_t count, size_t size, const char *what) {
  *out = NULL;
  if (count == 0 || size == 0)
    count = size = 1;
  void *p = calloc(count, size);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of host memory allocating %zu x %zu bytes for %s",
                      count, size, what);
  *out = p;
  return ZINC_OK;
}

zinc_status zinc_aligned_alloc(void **out, size_t alignment, size_t bytes,
                               const char *what) {
  *out = NULL;
  if (bytes == 0)
    bytes = alignment;
  void *p = NULL;
  int rc = posix_memalign(&p, alignment, zinc_round_up(bytes, alignment));
  if (rc != 0)
    return zinc_error(ZINC_ERR_NOMEM, "out of host memory allocating %zu bytes for %s: %s",
                      bytes, what, strerror(rc));
  *out = p;
  return ZINC_OK;
}

char *zinc_strdup(const char *s) {
  if (!s)
    return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

char *zinc_path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", a, b);
  return p;
}

zinc_status zinc_grow(void **arr, int *cap, int need, size_t elem, const char *what) {
  if (need <= *cap)
    return ZINC_OK;
  int ncap = *cap ? *cap : 16;
  while (ncap < need)
    ncap *= 2;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory for %d %s", ncap, what);
  *arr = p;
  *cap = ncap;
  return ZINC_OK;
}

/* ------------------------------------------------------------------ crc32c */

static uint32_t crc32c_table[8][256];
static atomic_int crc32c_ready;

static void crc32c_init_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc32c_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^
                           crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
  atomic_store(&crc32c_ready, 1);
}

static uint32_t crc32c_soft(uint32_t crc, const unsigned char *p, size_t len) {
  if (!atomic_load(&crc32c_ready))
    crc32c_init_table(); /* idempotent: every thread writes the same table */
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= crc;
    crc = crc32c_table[7][w & 0xff] ^ crc32c_table[6][(w >> 8) & 0xff] ^
          crc32c_table[5][(w >> 16) & 0xff] ^ crc32c_table[4][(w >> 24) & 0xff] ^
          crc32c_table[3][(w >> 32) & 0xff] ^ crc32c_table[2][(w >> 40) & 0xff] ^
          crc32c_table[1][(w >> 48) & 0xff] ^ crc32c_table[0][w >> 56];
    p += 8;
    len -= 8;
  }
  while (len--)
    crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc,
                                                            const unsigned char *p,
                                                            size_t len) {
  uint64_t c = crc;
  while (len >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (len--)
    c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

static int cpu_has_sse42(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  return (c & bit_SSE4_2) != 0;
}
#endif

uint32_t zinc_crc32c(uint32_t crc, const void *data, size_t len) {
  crc = ~crc;
#if defined(__x86_64__)
  static atomic_int hw = -1;
  int h = atomic_load(&hw);
  if (h < 0) {
    h = cpu_has_sse42();
    atomic_store(&hw, h);
  }
  if (h)
    return ~crc32c_hw(crc, data, len);
#endif
  return ~crc32c_soft(crc, data, len);
}

/* ------------------------------------------------------------ struct ABI */

static zinc_status abi_size(const void *caller, const char *type, const char *init,
                            size_t *n) {
  size_t size;
  memcpy(&size, caller, sizeof size);
  if (size < sizeof(size_t) || size > ZINC_STRUCT_SIZE_MAX)
    return zinc_error(ZINC_ERR_INVALID, "%s.size is %zu: initialise the struct with %s "
                      "(it sets size to the sizeof the trainer was compiled with)",
                      type, size, init);
  *n = size;
  return ZINC_OK;
}

zinc_status zinc_abi_check(const void *caller, const char *type, const char *init) {
  size_t n = 0;
  return abi_size(caller, type, init, &n);
}

zinc_status zinc_abi_read(void *ours, size_t full, const void *caller, const char *type,
                          const char *init) {
  size_t n = 0;
  ZINC_CHECK(abi_size(caller, type, init, &n));
  if (n > full)
    n = full; /* a newer header's fields: this library does not know them */
  memcpy((char *)ours + sizeof(size_t), (const char *)caller + sizeof(size_t),
         n - sizeof(size_t));
  return ZINC_OK;
}

zinc_status zinc_abi_write(void *caller, const void *ours, size_t full, const char *type,
                           const char *init) {
  size_t n = 0;
  ZINC_CHECK(abi_size(caller, type, init, &n));
  if (n > full)
    n = full;
  memcpy((char *)caller + sizeof(size_t), (const char *)ours + sizeof(size_t),
         n - sizeof(size_t));
  return ZINC_OK;
}
