/*
 * device_wait.c — the deadline poll of device/device_wait.h.
 */
#include "device/device_wait.h"

#include <sched.h>
#include <time.h>

#include "base/base.h"

enum { SPINS = 64 };               /* polls before the first sleep        */
#define FIRST_SLEEP_NS 2000L       /* then 2 us, doubling ...             */
#define LAST_SLEEP_NS 1000000L     /* ... up to 1 ms                      */

zinc_status zinc_wait_deadline(zinc_wait_pred done, void *ctx, double timeout_s,
                               const char *what, const char *hint) {
  const double start = zinc_now();
  long sleep_ns = FIRST_SLEEP_NS;
  for (long poll = 0;; poll++) {
    int finished = 0;
    ZINC_CHECK(done(ctx, &finished));
    if (finished)
      return ZINC_OK;
    double waited = zinc_now() - start;
    if (waited >= timeout_s)
      return zinc_error(ZINC_ERR_DEVICE, "%s: not finished after %.1f s%s%s%s", what, waited,
                        hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
    if (poll < SPINS) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    sleep_ns = sleep_ns * 2 > LAST_SLEEP_NS ? LAST_SLEEP_NS : sleep_ns * 2;
  }
}
