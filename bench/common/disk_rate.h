/*
 * disk_rate.h — the disk's own rates through zinc's swap path, for the
 * NVMe benches to print beside their step times (the same aio settings,
 * O_DIRECT files and block layout as the engine's swap areas, no compute):
 * `bytes` written then read back in regions of `region` bytes, `inflight`
 * requests at a time. Header-only: each bench is one file.
 */
#ifndef ZINC_BENCH_DISK_RATE_H
#define ZINC_BENCH_DISK_RATE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "config/config.h"
#include "offload/aio.h"
#include "offload/swap.h"

enum { BENCH_DISK_RATE_MAX_INFLIGHT = 8 };

/* ZINC_OK with *read_bw, *write_bw in bytes per second; otherwise the
 * status, with zinc_last_error() naming what failed. */
static inline zinc_status bench_disk_rate(const zinc_settings *s, const char *dir, uint64_t bytes,
                                          uint64_t region, int inflight, double *read_bw,
                                          double *write_bw) {
  if (inflight < 1 || inflight > BENCH_DISK_RATE_MAX_INFLIGHT)
    inflight = 2;
  zinc_aio_params ap;
  zinc_aio_params_from_settings(s, &ap);
  zinc_aio *aio = NULL;
  zinc_swap *sw = NULL;
  void *buf[BENCH_DISK_RATE_MAX_INFLIGHT] = {NULL};
  zinc_aio_handle *h[BENCH_DISK_RATE_MAX_INFLIGHT] = {NULL};
  const char *paths[1] = {dir};
  int nregions = (int)((bytes + region - 1) / region);
  uint64_t *sizes = calloc((size_t)nregions, sizeof *sizes);
  zinc_status st = sizes ? zinc_aio_create(&ap, &aio)
                         : zinc_error(ZINC_ERR_NOMEM, "disk rate: region table");
  for (int r = 0; sizes && r < nregions; r++)
    sizes[r] = region;
  zinc_swap_params sp = {.paths = paths, .path_count = 1, .rank = 0, .name = "diskrate",
                         .checksums = s->aio_swap_checksums, .region_bytes = sizes,
                         .region_count = nregions};
  if (st == ZINC_OK)
    st = zinc_swap_create(aio, &sp, &sw);
  for (int b = 0; st == ZINC_OK && b < inflight; b++) {
    st = zinc_aio_buffer_alloc(aio, zinc_swap_buffer_bytes(sw, region), &buf[b]);
    if (st == ZINC_OK)
      memset(buf[b], 1 + b, region);
  }
  for (int pass = 0; st == ZINC_OK && pass < 2; pass++) { /* write, then read back */
    double t0 = zinc_now();
    for (int r = 0; st == ZINC_OK && r < nregions; r++) {
      int b = r % inflight;
      if (h[b])
        st = zinc_aio_wait(h[b]);
      h[b] = NULL;
      if (st == ZINC_OK)
        st = pass == 0 ? zinc_swap_write(sw, r, 0, buf[b], region, &h[b])
                       : zinc_swap_read(sw, r, 0, buf[b], region, &h[b]);
    }
    for (int b = 0; b < inflight; b++) {
      zinc_status w = h[b] ? zinc_aio_wait(h[b]) : ZINC_OK;
      h[b] = NULL;
      if (st == ZINC_OK)
        st = w;
    }
    double rate = (double)region * nregions / (zinc_now() - t0);
    *(pass == 0 ? write_bw : read_bw) = rate;
  }
  for (int b = 0; b < inflight; b++)
    if (buf[b])
      zinc_aio_buffer_free(aio, buf[b]);
  if (sw)
    zinc_swap_destroy(sw);
  if (aio)
    zinc_aio_destroy(aio);
  free(sizes);
  return st;
}

#endif /* ZINC_BENCH_DISK_RATE_H */
