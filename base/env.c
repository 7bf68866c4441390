/*
 * env.c — the environment readers of env.h.
 *
 * getenv is called here and nowhere else in the library (apart from a
 * launcher-presence check in comm/ and a message in device/, each saying
 * why). Readers keep no state: each call reads the environment afresh.
 */
#include "base/env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"

const char *zinc_env_str(const char *name) {
  const char *s = getenv(name);
  return s && *s ? s : NULL;
}

void zinc_env_reject(const char *name, const char *value, const char *accepted,
                     const char *instead) {
  zinc_log0(ZINC_LOG_WARN, "%s=%s is not %s; %s", name, value, accepted, instead);
}

int zinc_env_flag(const char *name, int dflt) {
  static const char *const on[] = {"1", "true", "on", "yes"};
  static const char *const off[] = {"0", "false", "off", "no"};
  const char *s = zinc_env_str(name);
  if (!s)
    return dflt;
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, on[i]))
      return 1;
    if (!strcasecmp(s, off[i]))
      return 0;
  }
  zinc_env_reject(name, s, "a boolean (1, true, on, yes or 0, false, off, no)",
                  dflt ? "using 1" : "using 0");
  return dflt;
}

long long zinc_env_int(const char *name, long long dflt, long long lo, long long hi) {
  const char *s = zinc_env_str(name);
  if (!s)
    return dflt;
  char *end;
  int saved = errno;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  int ok = end != s && *end == '\0' && errno != ERANGE && v >= lo && v <= hi;
  errno = saved;
  if (ok)
    return v;
  char accepted[96], instead[48];
  if (hi == LLONG_MAX)
    snprintf(accepted, sizeof accepted, "an integer >= %lld", lo);
  else
    snprintf(accepted, sizeof accepted, "an integer in [%lld, %lld]", lo, hi);
  snprintf(instead, sizeof instead, "using %lld", dflt);
  zinc_env_reject(name, s, accepted, instead);
  return dflt;
}

int zinc_env_choice(const char *name, const char *const *choices, int n, int dflt) {
  const char *s = zinc_env_str(name);
  if (!s)
    return dflt;
  for (int i = 0; i < n; i++)
    if (!strcasecmp(s, choices[i]))
      return i;
  char accepted[256] = "one of ", instead[96];
  size_t len = strlen(accepted);
  for (int i = 0; i < n && len < sizeof accepted; i++)
    len += (size_t)snprintf(accepted + len, sizeof accepted - len, "%s%s", i ? ", " : "",
                            choices[i]);
  if (dflt >= 0 && dflt < n)
    snprintf(instead, sizeof instead, "using %s", choices[dflt]);
  else
    snprintf(instead, sizeof instead, "ignoring it");
  zinc_env_reject(name, s, accepted, instead);
  return dflt;
}
