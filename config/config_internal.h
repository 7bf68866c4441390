/*
 * config_internal.h — what the files of config/ share: the reader that walks
 * a parsed JSON document with its current JSON path, the typed value
 * readers, the declarative key tables the sections are described by, and
 * the section parsers. Only the .c files of config/ include this (and
 * jansson).
 *
 * Invariants
 *  - r->path always names the value being read ("zero_optimization.stage",
 *    "optimizer.params.betas[1]"); every error and warning starts with it.
 *  - An error leaves the settings half-filled; the caller frees them.
 *  - Warnings go to the logger at warn level (rank 0) and are counted in
 *    r->warnings, whether or not the logger prints them.
 */
#ifndef ZINC_CONFIG_INTERNAL_H
#define ZINC_CONFIG_INTERNAL_H

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"

/* batch_given_mask bits. Bits 0-2 (config.h): the key was given as a number.
 * Bits 3-5: the key was written as "auto" (an "auto" batch key resolves like
 * an absent one, except that when neither train_batch_size nor
 * train_micro_batch_size_per_gpu is a number the micro-batch becomes 1
 * instead of an error; see zinc_settings_resolve_batch). */
enum { ZINC_BATCH_TRAIN = 0, ZINC_BATCH_MICRO = 1, ZINC_BATCH_GAS = 2 };
#define ZINC_BATCH_GIVEN(i) (1 << (i))
#define ZINC_BATCH_IS_AUTO(i) (1 << (3 + (i)))

#define ZINC_CFG_PATH_MAX 256
#define ZINC_CFG_IGNORED_MAX 512

typedef struct {
  const char *source;                   /* "ds_config.json" or "<string>"   */
  char path[ZINC_CFG_PATH_MAX];         /* JSON path of the value being read */
  size_t path_len;
  int warnings;                         /* warnings issued so far           */
  char ignored[ZINC_CFG_IGNORED_MAX];   /* "tensorboard, wandb": top-level
                                           sections accepted and ignored    */
} zinc_cfg_reader;

/* ------------------------------------------------------------ paths */

/* Append ".key" (or "key" at the top) to the path; returns the previous
 * length for zinc_cfg_pop. */
size_t zinc_cfg_push(zinc_cfg_reader *r, const char *key);
size_t zinc_cfg_push_index(zinc_cfg_reader *r, size_t index);
void zinc_cfg_pop(zinc_cfg_reader *r, size_t mark);
/* obj[key] with the path pushed (pop with *mark), or NULL when absent (the
 * path is unchanged then). */
const json_t *zinc_cfg_enter(zinc_cfg_reader *r, const json_t *obj, const char *key,
                             size_t *mark);

/* The JSON path (in the same dotted form) of the value being parsed at byte
 * `offset` of `text`: used to name the place of a syntax error or a
 * duplicate key, which jansson reports by line and column only. */
void zinc_json_path_at(const char *text, size_t len, size_t offset, char *out,
                       size_t cap);

/* An Hjson syntax error: where (1-based line and column, the dotted path
 * of the value being read) and what. An unterminated construct (a block
 * comment, a string, an object, an array) is reported where it opens. */
typedef struct {
  int line, column;
  size_t offset;                        /* byte offset of line:column */
  int lone_value;                       /* see zinc_hjson_parse */
  char path[ZINC_CFG_PATH_MAX];
  char message[256];
} zinc_hjson_error;

/* Hjson text (hjson.c: a superset of JSON, as DeepSpeed reads its config)
 * to a jansson value, duplicate keys refused; NULL with *err filled. A
 * leading UTF-8 byte order mark is skipped (positions count from after
 * it). As the reference, text that fails as a root object without braces
 * may still read as one lone value (a line `a: {b: 1` is the quoteless
 * string "a: {b: 1"): then the value is returned, err->lone_value is 1 and
 * *err holds the object's failure, which a reader that needs an object
 * (the config) reports instead. */
json_t *zinc_hjson_parse(const char *text, size_t len, zinc_hjson_error *err);

/* ------------------------------------------------------------ messages */

/* "<path>: found <value>, expected <what>" as a ZINC_ERR_CONFIG. */
zinc_status zinc_cfg_bad(zinc_cfg_reader *r, const json_t *found,
                         const char *expect_fmt, ...) ZINC_PRINTF(3, 4);
/* "<path>: <message>" as a ZINC_ERR_CONFIG. */
zinc_status zinc_cfg_fail(zinc_cfg_reader *r, const char *fmt, ...)
    ZINC_PRINTF(2, 3);
/* Log "config <source>: <message>" at warn level and count it. */
void zinc_cfg_warn(zinc_cfg_reader *r, const char *fmt, ...) ZINC_PRINTF(2, 3);
/* The key at r->path is "auto" and nothing fills it: say at info level
 * the value it reads as (printf-formatted), as DeepSpeed's config models
 * drop an "auto" and keep their default. */
void zinc_cfg_auto_default(zinc_cfg_reader *r, const char *value_fmt, ...) ZINC_PRINTF(2, 3);
/* A short rendering of a JSON value for messages: 4, 5e8 as 500000000.0,
 * "cuda", [0.9, 1.2]; long values end in "...". */
void zinc_cfg_render(const json_t *v, char *out, size_t cap);

/* The known name closest to `name` by edit distance, or NULL when none is
 * close enough to be a plausible typo. */
const char *zinc_cfg_suggest(const char *name, const char *const *known,
                             size_t count);

/* ------------------------------------------------------------ values */

int zinc_cfg_is_auto(const json_t *v);
/* true/false (or the integers 0/1, as Python's truthiness accepts). */
zinc_status zinc_cfg_bool(zinc_cfg_reader *r, const json_t *v, int *out);
/* An integer in [lo, hi]; a JSON real that is integral (5e8) counts. */
zinc_status zinc_cfg_int64(zinc_cfg_reader *r, const json_t *v, int64_t lo,
                           int64_t hi, int64_t *out);
/* A string; *out points into v. */
zinc_status zinc_cfg_string(zinc_cfg_reader *r, const json_t *v,
                            const char **out);
/* An object; *out is NULL when v is absent or JSON null (no section). */
zinc_status zinc_cfg_object(zinc_cfg_reader *r, const json_t *v,
                            const json_t **out);

/* ------------------------------------------------------------ key tables */

typedef enum {
  ZINC_KEY_BOOL,    /* int field: 0/1 (ZINC_AUTO with ZINC_KEY_AUTO)        */
  ZINC_KEY_INT,     /* int field                                             */
  ZINC_KEY_I64,     /* int64_t field                                         */
  ZINC_KEY_F64,     /* double field                                          */
  ZINC_KEY_CUSTOM,  /* read by the section's own code                        */
  ZINC_KEY_INERT,   /* a DeepSpeed key zinc accepts and does not act on      */
  ZINC_KEY_IGNORED  /* a DeepSpeed section zinc does not implement           */
} zinc_key_kind;

enum {
  ZINC_KEY_AUTO = 1 << 0,      /* "auto" accepted: stores auto_value         */
  ZINC_KEY_LO_OPEN = 1 << 1,   /* value > lo (not >=)                        */
  ZINC_KEY_HI_OPEN = 1 << 2,   /* value < hi (not <=)                        */
  ZINC_KEY_NULL_OK = 1 << 3,   /* JSON null keeps the default                */
  ZINC_KEY_NO_EFFECT = 1 << 4, /* stored, but zinc does not act on it: warn
                                  when the value differs from the default    */
  ZINC_KEY_TRUNC = 1 << 5,     /* integer key of DeepSpeed's pydantic models:
                                  a real with a fraction (15099494.4) is
                                  truncated toward zero as pydantic's int()
                                  does, with a warning naming both values    */
};

typedef struct {
  const char *name;
  zinc_key_kind kind;
  size_t offset;      /* field in the struct the section fills             */
  double lo, hi;      /* accepted range of numbers (inclusive by default)  */
  unsigned flags;
  double auto_value;  /* the placeholder "auto" stores until it resolves:
                         ZINC_AUTO, or ZINC_AUTO_F64 for numbers
                         (config/auto.c keeps the auto_mask bit)           */
  const char *note;   /* INERT: DeepSpeed's default as JSON text (no
                         warning when the file has it) or NULL (always
                         warn); NO_EFFECT: why it has no effect            */
} zinc_key;

#define ZINC_KEY_COUNT(t) (sizeof(t) / sizeof((t)[0]))

/* Table rows: T is the struct the section fills, f its field. */
#define ZINC_KB(T, n, f) {n, ZINC_KEY_BOOL, offsetof(T, f), 0, 0, 0, 0, NULL}
#define ZINC_KB_AUTO(T, n, f) \
  {n, ZINC_KEY_BOOL, offsetof(T, f), 0, 0, ZINC_KEY_AUTO, ZINC_AUTO, NULL}
#define ZINC_KB_NOOP(T, n, f, why) \
  {n, ZINC_KEY_BOOL, offsetof(T, f), 0, 0, ZINC_KEY_NO_EFFECT, 0, why}
#define ZINC_KI(T, n, f, lo, hi) {n, ZINC_KEY_INT, offsetof(T, f), lo, hi, 0, 0, NULL}
#define ZINC_KL(T, n, f, lo, flags, autov) \
  {n, ZINC_KEY_I64, offsetof(T, f), lo, HUGE_VAL, flags, autov, NULL}
#define ZINC_KF(T, n, f, lo, hi, flags, autov) \
  {n, ZINC_KEY_F64, offsetof(T, f), lo, hi, flags, autov, NULL}
#define ZINC_KCUSTOM(n) {n, ZINC_KEY_CUSTOM, 0, 0, 0, 0, 0, NULL}
#define ZINC_KINERT(n, deepspeed_default) \
  {n, ZINC_KEY_INERT, 0, 0, 0, 0, 0, deepspeed_default}
#define ZINC_KIGNORED(n) {n, ZINC_KEY_IGNORED, 0, 0, 0, 0, 0, NULL}

/* Walk the keys of obj (whose path is r->path): table keys of kinds
 * BOOL..F64 are read into base + offset ("auto" on a key without
 * ZINC_KEY_AUTO keeps the value there, the default, with an info line:
 * DeepSpeed's config models drop "auto", its scalar reads pass it on, and
 * nothing fills it), CUSTOM keys are left to the caller,
 * INERT keys warn unless they hold DeepSpeed's default, IGNORED keys are
 * collected into r->ignored, unknown keys warn with a did-you-mean. Two
 * table entries with the same offset are two spellings of one key: giving
 * both is an error. */
zinc_status zinc_cfg_walk(zinc_cfg_reader *r, const json_t *obj,
                          const zinc_key *keys, size_t nkeys, void *base,
                          size_t base_size);

/* ------------------------------------------------------------ sections */

/* config/sections.c: everything except zero_optimization and aio. */
zinc_status zinc_cfg_read_document(zinc_cfg_reader *r, const json_t *root,
                                   zinc_settings *s);
/* config/zero.c */
zinc_status zinc_cfg_read_zero(zinc_cfg_reader *r, const json_t *v,
                               zinc_settings *s);
zinc_status zinc_cfg_read_aio(zinc_cfg_reader *r, const json_t *v,
                              zinc_settings *s);
/* config/auto.c: after every section, the keys written "auto" get their
 * bit in s->auto_mask and a placeholder in their field; those written as
 * numbers their bit in *file_mask. */
void zinc_cfg_note_auto(const json_t *root, zinc_settings *s, uint32_t *file_mask);
/* config/validate.c: contradictions between keys, after every section. */
zinc_status zinc_cfg_validate(zinc_cfg_reader *r, const json_t *root,
                              zinc_settings *s);

/* Names shared by the reader and the writer. */
const char *zinc_sched_type_name(zinc_sched_type t);
const char *zinc_optim_type_name(zinc_optim_type t);

#endif /* ZINC_CONFIG_INTERNAL_H */
