/*
 * safetensors.h — a streaming writer of the .safetensors format (8-byte
 * little-endian header length, a JSON header with each tensor's dtype,
 * shape and byte range, then the raw data), readable by Python's
 * `safetensors` and any other reader of the format.
 *
 * Tensors are declared up front (the header needs every offset), then
 * filled in any order from f32 values converted to each tensor's dtype, a
 * bounded piece at a time. The file is written to <path>.tmp and renamed
 * into place after an fsync (zinc_fs_publish), so a crash never leaves a
 * torn file at path.
 */
#ifndef ZINC_SAFETENSORS_H
#define ZINC_SAFETENSORS_H

#include <stdint.h>

#include "zinc.h"

typedef struct zinc_safetensors zinc_safetensors;

typedef struct {
  const char *name;
  zinc_dtype dtype;
  int ndim;
  const int64_t *shape;
} zinc_safetensors_tensor;

zinc_status zinc_safetensors_open(const char *path, const zinc_safetensors_tensor *tensors,
                                  int n, zinc_safetensors **out);
/* Write n values (host f32) of tensor i starting at element `offset`. */
zinc_status zinc_safetensors_put(zinc_safetensors *w, int i, int64_t offset, const float *values,
                                 int64_t n);
zinc_status zinc_safetensors_finish(zinc_safetensors *w);
void zinc_safetensors_abort(zinc_safetensors *w);

#endif /* ZINC_SAFETENSORS_H */
