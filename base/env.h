/*
 * env.h — the one reader of environment variables (ZINC_*, and the
 * launcher's variables that zinc acts on). docs/environment.md lists every
 * variable, who reads it, its values and its default.
 *
 * Rules every reader here keeps, so that all variables behave alike:
 *   - unset and set-but-empty are the same: the caller's default;
 *   - a malformed value is never half-used: the reader logs one warning
 *     "NAME=VALUE is not <the accepted values>; <what happens instead>"
 *     (rank 0's logger, zinc_log0) and returns the default;
 *   - values are read each time a reader is called (nothing is cached), so
 *     a test may setenv between calls.
 * Variables whose malformed value must stop the caller (fault-injection
 * specs with a grammar of their own) are read with zinc_env_str and parsed
 * by their owner, which returns an error naming the variable.
 */
#ifndef ZINC_BASE_ENV_H
#define ZINC_BASE_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* The value of `name`, or NULL when it is unset or empty. */
const char *zinc_env_str(const char *name);

/* A boolean: 1 for "1", "true", "on", "yes"; 0 for "0", "false", "off",
 * "no" (case-insensitive); dflt when unset, empty or anything else (with a
 * warning). */
int zinc_env_flag(const char *name, int dflt);

/* A decimal integer in [lo, hi]; dflt when unset, empty, not a whole
 * integer (trailing characters, overflow) or out of range (with a warning
 * naming the range). */
long long zinc_env_int(const char *name, long long dflt, long long lo, long long hi);

/* The index in choices[0..n) of the value (case-insensitive); dflt when
 * unset, empty or not one of them (with a warning listing the choices and
 * naming choices[dflt], or saying the variable is ignored when dflt is not
 * an index). */
int zinc_env_choice(const char *name, const char *const *choices, int n, int dflt);

/* The warning the readers above give for a malformed value, for owners
 * that parse a value themselves: "NAME=VALUE is not ACCEPTED; INSTEAD". */
void zinc_env_reject(const char *name, const char *value, const char *accepted,
                     const char *instead);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_BASE_ENV_H */
