/*
 * tfevents.h — a TensorBoard event file writer for scalars, and nothing
 * else: TFRecord framing (length, masked crc32c of the length, data,
 * masked crc32c of the data) around tensorflow.Event protobuf messages
 * encoded by hand (wall_time = 1, step = 2, file_version = 3, summary = 5;
 * Summary.value = 1; Summary.Value.tag = 1, simple_value = 2).
 *
 * The file is named as TensorBoard's own writers name it,
 * events.out.tfevents.<seconds>.<host>.<pid>.0, and opens with the
 * "brain.Event:2" version record. Each record is written whole with one
 * write; TensorBoard reads a file that is still being appended to.
 */
#ifndef ZINC_TFEVENTS_H
#define ZINC_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zinc.h"

typedef struct {
  FILE *f;
  char path[1200];
} zinc_tfevents;

/* Create the event file in dir (which must exist) and write its version
 * record. */
zinc_status zinc_tfevents_open(zinc_tfevents *w, const char *dir);
/* One Event with a Summary of one simple_value at step. */
zinc_status zinc_tfevents_scalar(zinc_tfevents *w, const char *tag, float value, int64_t step,
                                 double wall_time);
zinc_status zinc_tfevents_flush(zinc_tfevents *w);
void zinc_tfevents_close(zinc_tfevents *w);

/* Seconds since the epoch (Event.wall_time). */
double zinc_tfevents_now(void);
/* The masked crc32c of TFRecord framing (exposed for tests). */
uint32_t zinc_tfrecord_masked_crc(const void *data, size_t len);

#endif /* ZINC_TFEVENTS_H */
