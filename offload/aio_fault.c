/*
 * aio_fault.c — fault injection for the I/O engine: the ZINC_AIO_FAULT
 * grammar (documented in aio.h), the request counter, and the rewrite of a
 * kernel result into the planned fault.
 *
 * Faults act where the real ones would show up: an injected errno replaces
 * the result of a request that really ran, a short transfer reports fewer
 * bytes than really moved (the engine then transfers the remainder again,
 * as it would for a real short read or write), and open/uring/fallocate
 * faults replace the result of that call. The plan is per engine, guarded
 * by fault_mu; the counter is atomic.
 */
#define _GNU_SOURCE
#include "offload/aio_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  int value;
} errno_names[] = {
    {"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EINTR", EINTR},   {"EAGAIN", EAGAIN},
    {"EINVAL", EINVAL}, {"ENOSYS", ENOSYS}, {"EPERM", EPERM},   {"EBADF", EBADF},
    {"ENOMEM", ENOMEM}, {"EACCES", EACCES}, {"EROFS", EROFS},   {"EDQUOT", EDQUOT},
    {"EFBIG", EFBIG},   {"ENODEV", ENODEV}, {"ENXIO", ENXIO},   {"EOPNOTSUPP", EOPNOTSUPP},
    {"ETIMEDOUT", ETIMEDOUT}, {"ECANCELED", ECANCELED},
};

int zinc_aio_errno_parse(const char *s) {
  if (!s || !*s)
    return 0;
  for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
    if (strcmp(s, errno_names[i].name) == 0)
      return errno_names[i].value;
  char *end;
  long v = strtol(s, &end, 10);
  return (*end == '\0' && v > 0 && v < 4096) ? (int)v : 0;
}

const char *zinc_aio_errno_name(int err) {
  for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
    if (errno_names[i].value == err)
      return errno_names[i].name;
  return "errno";
}

/* Parse "N" (> 0) from [s, end). */
static int parse_count(const char *s, const char *end, int64_t *out) {
  if (s >= end)
    return 0;
  int64_t v = 0;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10)
      return 0;
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return v > 0;
}

static zinc_status parse_item(const char *item, zinc_aio_fault *f) {
  char key[16];
  size_t klen = strcspn(item, "@=");
  if (klen == 0 || klen >= sizeof key)
    goto bad;
  memcpy(key, item, klen);
  key[klen] = '\0';
  const char *rest = item + klen;
  if (!strcmp(key, "open") || !strcmp(key, "uring") || !strcmp(key, "fallocate")) {
    int e = rest[0] == '=' ? zinc_aio_errno_parse(rest + 1) : 0;
    if (!e)
      goto bad;
    *(!strcmp(key, "open") ? &f->open_errno
      : !strcmp(key, "uring") ? &f->uring_errno : &f->fallocate_errno) = e;
    return ZINC_OK;
  }
  if (rest[0] != '@')
    goto bad;
  const char *num = rest + 1, *num_end = num + strcspn(num, "=");
  int64_t n;
  if (!parse_count(num, num_end, &n))
    goto bad;
  if (!strcmp(key, "short")) {
    if (*num_end)
      goto bad;
    f->short_request = n;
    return ZINC_OK;
  }
  if (!strcmp(key, "enospc")) {
    if (*num_end)
      goto bad;
    f->fail_request = n;
    f->fail_errno = ENOSPC;
    f->fail_count = 1;
    return ZINC_OK;
  }
  if (strcmp(key, "error") || *num_end != '=')
    goto bad;
  /* ERRNO[xK] */
  char name[32];
  const char *e = num_end + 1;
  size_t elen = strcspn(e, "x");
  if (elen == 0 || elen >= sizeof name)
    goto bad;
  memcpy(name, e, elen);
  name[elen] = '\0';
  f->fail_errno = zinc_aio_errno_parse(name);
  int64_t times = 1;
  if (e[elen] == 'x' && !parse_count(e + elen + 1, e + strlen(e), &times))
    goto bad;
  if (!f->fail_errno || times > 1000000)
    goto bad;
  f->fail_request = n;
  f->fail_count = (int)times;
  return ZINC_OK;
bad:
  return zinc_error(ZINC_ERR_INVALID,
                    "fault \"%s\" is not one of error@N=ERRNO[xK], enospc@N, short@N, "
                    "open=ERRNO, uring=ERRNO, fallocate=ERRNO",
                    item);
}

zinc_status zinc_aio_fault_parse(const char *spec, zinc_aio_fault *out) {
  memset(out, 0, sizeof *out);
  if (!spec)
    return ZINC_OK;
  char *copy = zinc_strdup(spec);
  if (!copy)
    return zinc_error(ZINC_ERR_NOMEM, "out of host memory parsing a fault list");
  zinc_status st = ZINC_OK;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item && st == ZINC_OK;
       item = strtok_r(NULL, ",", &save))
    st = parse_item(item, out);
  free(copy);
  if (st != ZINC_OK)
    memset(out, 0, sizeof *out);
  return st;
}

void zinc_aio_fault_set(zinc_aio *aio, const zinc_aio_fault *fault) {
  pthread_mutex_lock(&aio->fault_mu);
  if (fault)
    aio->fault = *fault;
  else
    memset(&aio->fault, 0, sizeof aio->fault);
  atomic_store(&aio->request_count, 0);
  pthread_mutex_unlock(&aio->fault_mu);
}

void zinc_aio_fault_get(const zinc_aio *aio, zinc_aio_fault *out) {
  zinc_aio *a = (zinc_aio *)aio; /* the lock is not a change */
  pthread_mutex_lock(&a->fault_mu);
  *out = a->fault;
  pthread_mutex_unlock(&a->fault_mu);
}

int zinc_aio_fault_errno(zinc_aio *aio, int which) {
  pthread_mutex_lock(&aio->fault_mu);
  int e = which == ZINC_AIO_FAULT_OPEN    ? aio->fault.open_errno
          : which == ZINC_AIO_FAULT_URING ? aio->fault.uring_errno
                                          : aio->fault.fallocate_errno;
  pthread_mutex_unlock(&aio->fault_mu);
  return e;
}

int64_t zinc_aio_fault_number(zinc_aio *aio) {
  return (int64_t)atomic_fetch_add(&aio->request_count, 1) + 1;
}

int64_t zinc_aio_fault_apply(zinc_aio *aio, int64_t number, int64_t res, uint64_t want) {
  pthread_mutex_lock(&aio->fault_mu);
  zinc_aio_fault f = aio->fault;
  pthread_mutex_unlock(&aio->fault_mu);
  int fails = f.fail_count > 0 ? f.fail_count : 1;
  if (f.fail_request > 0 && number >= f.fail_request && number < f.fail_request + fails)
    return -(int64_t)f.fail_errno;
  if (f.short_request > 0 && number == f.short_request && res > 0) {
    /* Half, rounded down to the alignment so that an O_DIRECT remainder
     * stays legal; nothing to cut from a single aligned unit. */
    uint64_t cut = ((uint64_t)res / 2) / aio->alignment * aio->alignment;
    if (cut > 0 && cut < want)
      return (int64_t)cut;
  }
  return res;
}
