/*
 * base.h — what every folder of zinc shares: error reporting, the logger,
 * the CHECK macros, time, small checked allocation helpers and crc32c.
 *
 * base/ is the bottom of the dependency graph: it includes only zinc.h and
 * libc. Beside this header: fs.h (filesystem helpers), env.h (the reader of
 * environment variables), endian.h (the little-endian codec of zinc's file
 * formats) and threadpool.h. The error message is thread-local. The logger's level and rank are
 * the one piece of process-wide mutable state in zinc (a log line must be
 * printable before any engine exists, e.g. while a config loads); both are
 * atomics, set from the config or the ZINC_LOG_LEVEL environment variable.
 */
#ifndef ZINC_BASE_H
#define ZINC_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#if defined(__GNUC__)
#define ZINC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define ZINC_INTERNAL __attribute__((visibility("hidden")))
#define ZINC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define ZINC_PRINTF(a, b)
#define ZINC_INTERNAL
#define ZINC_UNLIKELY(x) (x)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ errors */

/* Set the calling thread's message and return st, so that a failure reads
 * `return zinc_error(ZINC_ERR_IO, "write %s at offset %lld: %s", ...)`. */
zinc_status zinc_error(zinc_status st, const char *fmt, ...) ZINC_PRINTF(2, 3);
zinc_status zinc_verror(zinc_status st, const char *fmt, va_list ap);
/* Prefix the current message with more context: "loading x: <old message>". */
zinc_status zinc_error_wrap(zinc_status st, const char *fmt, ...) ZINC_PRINTF(2, 3);
void zinc_error_clear(void);

/* Return early when a call fails; its message stays in place. */
#define ZINC_CHECK(expr)                      \
  do {                                        \
    zinc_status zinc_check_st_ = (expr);      \
    if (zinc_check_st_ != ZINC_OK)            \
      return zinc_check_st_;                  \
  } while (0)

/* Store the status in `st` and jump to one cleanup label on failure. */
#define ZINC_CHECK_GOTO(expr, st, label)      \
  do {                                        \
    (st) = (expr);                            \
    if ((st) != ZINC_OK)                      \
      goto label;                             \
  } while (0)

/* ------------------------------------------------------------------ logger */

typedef enum {
  ZINC_LOG_ERROR = 0,
  ZINC_LOG_WARN = 1,
  ZINC_LOG_INFO = 2,
  ZINC_LOG_DEBUG = 3
} zinc_log_level;

/* Write "[zinc <level> rank R] message" ("[zinc <level>] message" before
 * zinc_log_set_rank) to stderr when level is enabled. Every rank prints;
 * zinc_log0 is for lines that only rank 0 should print. */
void zinc_log(zinc_log_level level, const char *fmt, ...) ZINC_PRINTF(2, 3);
/* Same, but only rank 0 (or a process that has no rank yet) prints. */
void zinc_log0(zinc_log_level level, const char *fmt, ...) ZINC_PRINTF(2, 3);
/* A line the config asked for by name (wall_clock_breakdown), printed by
 * rank 0 whatever the log level, to stdout as DeepSpeed's print_dist does:
 * "[Rank 0] <message>". */
void zinc_log_report0(const char *fmt, ...) ZINC_PRINTF(1, 2);
/* Text the config asked for by name (the comms logger's verbose lines),
 * written to stderr as it is, in one write, whatever the log level and on
 * whichever rank calls it. */
void zinc_log_text(const char *text);
/* A report of many lines the config asked for by name (the comms logger's
 * summary), to stdout as DeepSpeed prints it: what the trainer's stdio
 * holds is flushed first, then the text goes out as one block, so that it
 * never lands inside the trainer's own lines. Whatever the log level, on
 * whichever rank calls it. */
void zinc_log_report_text(const char *text);
int zinc_log_enabled(zinc_log_level level);
void zinc_log_set_level(zinc_log_level level);
/* Parse "error|warn|info|debug" (case-insensitive); -1 if not one of them. */
int zinc_log_level_parse(const char *s);
void zinc_log_set_rank(int rank);
int zinc_log_rank(void);

/* -------------------------------------------------------------- utilities */

/* Monotonic seconds. */
double zinc_now(void);

/* calloc/aligned allocation that set a ZINC_ERR_NOMEM message naming `what`. */
zinc_status zinc_calloc(void **out, size_t count, size_t size, const char *what);
zinc_status zinc_aligned_alloc(void **out, size_t alignment, size_t bytes,
                               const char *what);
char *zinc_strdup(const char *s); /* NULL on NULL or out of memory */
/* "a/b", malloc'ed; NULL when out of memory. */
char *zinc_path_join(const char *a, const char *b);
/* Make room for at least `need` elements of `elem` bytes in *arr, whose
 * capacity is *cap (doubling); ZINC_ERR_NOMEM names `what`. */
zinc_status zinc_grow(void **arr, int *cap, int need, size_t elem, const char *what);

/* Overflow-checked size arithmetic: returns 0 on overflow. */
static inline int zinc_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline uint64_t zinc_round_up(uint64_t x, uint64_t m) {
  return (x + m - 1) / m * m;
}
static inline uint64_t zinc_div_up(uint64_t x, uint64_t m) {
  return (x + m - 1) / m;
}

/* crc32c (Castagnoli), the checksum of checkpoint and swap files. Chain by
 * passing the previous value as crc (start with 0). Hardware instruction
 * where the CPU has it. */
uint32_t zinc_crc32c(uint32_t crc, const void *data, size_t len);

/* The ABI rule of zinc.h's caller-allocated structs: each begins with
 * `size_t size`, the sizeof the caller was compiled with. `type` names the
 * struct and `init` its initialiser for the message.
 * zinc_abi_read: the caller's input over our defaults: *ours (full, `full`
 * bytes, already holding the defaults) takes the caller's bytes after the
 * size field up to min(caller size, full).
 * zinc_abi_write: our result into the caller's struct: the bytes after the
 * size field up to min(caller size, full); the caller's size is kept.
 * Both refuse (ZINC_ERR_INVALID) a size below sizeof(size_t) or above
 * ZINC_STRUCT_SIZE_MAX, changing nothing. */
/* Only the check, before a call changes anything. */
zinc_status zinc_abi_check(const void *caller, const char *type, const char *init);
zinc_status zinc_abi_read(void *ours, size_t full, const void *caller, const char *type,
                          const char *init);
zinc_status zinc_abi_write(void *caller, const void *ours, size_t full, const char *type,
                           const char *init);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_BASE_H */
