/*
 * tfevents.c — TensorBoard event files: protobuf wire format by hand (only
 * varints, fixed64/fixed32 and length-delimited fields are needed) and
 * TFRecord framing. See tfevents.h for the messages and fields written.
 */
#include "engine/monitor/tfevents.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* ---------------------------------------------------------- protobuf */

typedef struct {
  uint8_t *p;
  size_t len, cap;
} pb_buf;

static void pb_byte(pb_buf *b, uint8_t v) {
  if (b->len < b->cap)
    b->p[b->len] = v;
  b->len++; /* counted past cap: the caller sees the overflow */
}

static void pb_varint(pb_buf *b, uint64_t v) {
  while (v >= 0x80) {
    pb_byte(b, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  pb_byte(b, (uint8_t)v);
}

static void pb_key(pb_buf *b, unsigned field, unsigned wire) { pb_varint(b, field << 3 | wire); }

static void pb_fixed(pb_buf *b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    pb_byte(b, (uint8_t)(v >> (8 * i)));
}

static void pb_bytes(pb_buf *b, unsigned field, const void *data, size_t n) {
  pb_key(b, field, 2);
  pb_varint(b, n);
  for (size_t i = 0; i < n; i++)
    pb_byte(b, ((const uint8_t *)data)[i]);
}

static void pb_double(pb_buf *b, unsigned field, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  pb_key(b, field, 1);
  pb_fixed(b, u, 8);
}

static void pb_float(pb_buf *b, unsigned field, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  pb_key(b, field, 5);
  pb_fixed(b, u, 4);
}

/* ---------------------------------------------------------- TFRecord */

uint32_t zinc_tfrecord_masked_crc(const void *data, size_t len) {
  uint32_t crc = zinc_crc32c(0, data, len);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static zinc_status write_record(zinc_tfevents *w, const uint8_t *data, size_t n) {
  uint8_t head[12], tail[4];
  uint64_t len = n;
  for (int i = 0; i < 8; i++)
    head[i] = (uint8_t)(len >> (8 * i));
  uint32_t hc = zinc_tfrecord_masked_crc(head, 8);
  for (int i = 0; i < 4; i++)
    head[8 + i] = (uint8_t)(hc >> (8 * i));
  uint32_t dc = zinc_tfrecord_masked_crc(data, n);
  for (int i = 0; i < 4; i++)
    tail[i] = (uint8_t)(dc >> (8 * i));
  if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(data, 1, n, w->f) != n ||
      fwrite(tail, 1, sizeof tail, w->f) != sizeof tail)
    return zinc_error(ZINC_ERR_IO, "writing TensorBoard events to %s: %s", w->path,
                      strerror(errno));
  return ZINC_OK;
}

/* ---------------------------------------------------------- events */

double zinc_tfevents_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zinc_status zinc_tfevents_open(zinc_tfevents *w, const char *dir) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "localhost");
  double now = zinc_tfevents_now();
  int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d.0", dir,
                   (long long)now, host, (int)getpid());
  if (n < 0 || (size_t)n >= sizeof w->path)
    return zinc_error(ZINC_ERR_INVALID, "TensorBoard directory %s: path too long", dir);
  w->f = fopen(w->path, "wb");
  if (!w->f)
    return zinc_error(ZINC_ERR_IO, "cannot create the TensorBoard event file %s: %s",
                      w->path, strerror(errno));
  uint8_t buf[64];
  pb_buf b = {buf, 0, sizeof buf};
  pb_double(&b, 1, now);
  static const char version[] = "brain.Event:2";
  pb_bytes(&b, 3, version, sizeof version - 1);
  zinc_status st = write_record(w, buf, b.len);
  if (st == ZINC_OK)
    st = zinc_tfevents_flush(w);
  if (st != ZINC_OK)
    zinc_tfevents_close(w);
  return st;
}

zinc_status zinc_tfevents_scalar(zinc_tfevents *w, const char *tag, float value, int64_t step,
                                 double wall_time) {
  size_t tl = strlen(tag);
  if (tl > 512)
    return zinc_error(ZINC_ERR_INVALID, "TensorBoard tag \"%.40s...\" is longer than 512 bytes",
                      tag);
  uint8_t val[600], sum[610], ev[640];
  pb_buf v = {val, 0, sizeof val};
  pb_bytes(&v, 1, tag, tl);
  pb_float(&v, 2, value);
  pb_buf s = {sum, 0, sizeof sum};
  pb_bytes(&s, 1, val, v.len);
  pb_buf e = {ev, 0, sizeof ev};
  pb_double(&e, 1, wall_time);
  pb_key(&e, 2, 0);
  pb_varint(&e, (uint64_t)step);
  pb_bytes(&e, 5, sum, s.len);
  if (e.len > e.cap)
    return zinc_error(ZINC_ERR_INVALID, "TensorBoard event for \"%s\" too large", tag);
  return write_record(w, ev, e.len);
}

zinc_status zinc_tfevents_flush(zinc_tfevents *w) {
  if (w->f && fflush(w->f) != 0)
    return zinc_error(ZINC_ERR_IO, "flushing TensorBoard events to %s: %s", w->path,
                      strerror(errno));
  return ZINC_OK;
}

void zinc_tfevents_close(zinc_tfevents *w) {
  if (w->f)
    fclose(w->f);
  w->f = NULL;
}
