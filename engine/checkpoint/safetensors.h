/*
 * safetensors.h — a streaming writer and a reader of the .safetensors format (8-byte
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

/* ------------------------------------------------------------ reading
 *
 * safetensors_read.c: the header parsed and checked against the file, then
 * any element range of any tensor read as f32, a bounded piece at a time
 * (the file is never read whole). Depends on base/ and jansson only (the
 * fuzz target compiles it alone). */

#define ZINC_SAFETENSORS_MAX_DIMS 8
#define ZINC_SAFETENSORS_HEADER_MAX (100u << 20) /* the format's own limit */

typedef struct {
  char *name;
  char dtype[16];         /* as the file says: "F32", "BF16", "I64", ... */
  int zdtype;             /* the zinc_dtype zinc reads it as; -1 for the others */
  int ndim;
  int64_t shape[ZINC_SAFETENSORS_MAX_DIMS];
  int64_t numel;
  int64_t begin, end;     /* byte range inside the data area */
} zinc_safetensors_entry;

/* Parse a header (the JSON text after the 8-byte length) of a file whose
 * data area holds data_bytes bytes. Checks: a JSON object without duplicate
 * names; "__metadata__" (skipped) an object of strings; every other member
 * an object with a dtype string, a shape of at most 8 dimensions (each
 * >= 0, the element count without overflow) and data_offsets [begin, end]
 * with 0 <= begin <= end <= data_bytes, end - begin the element count times
 * the dtype's size for every dtype of the format; and the layout the
 * format requires (the reference library checks it too): sorted by
 * range, the tensors tile the data area — the first begins at byte 0, each
 * where the one before it ends (no overlap, no gap), the last at
 * data_bytes. `what` names the file in messages. ZINC_ERR_CORRUPT naming
 * the tensor and the field on failure (*out NULL). Free with
 * zinc_safetensors_entries_free. */
zinc_status zinc_safetensors_parse_header(const char *text, size_t len, int64_t data_bytes,
                                          const char *what, zinc_safetensors_entry **out,
                                          int *n);
void zinc_safetensors_entries_free(zinc_safetensors_entry *t, int n);

typedef struct zinc_safetensors_reader zinc_safetensors_reader;
/* Open path, read its 8-byte length and header (at most
 * ZINC_SAFETENSORS_HEADER_MAX bytes, inside the file) and parse it. */
zinc_status zinc_safetensors_reader_open(const char *path, zinc_safetensors_reader **out);
int zinc_safetensors_reader_count(const zinc_safetensors_reader *r);
const zinc_safetensors_entry *zinc_safetensors_reader_entry(const zinc_safetensors_reader *r,
                                                            int i);
/* Index of the tensor called name, or -1. */
int zinc_safetensors_reader_find(const zinc_safetensors_reader *r, const char *name);
/* Elements offset..offset+n of tensor i (F32, BF16 or F16), as f32; with
 * crc not NULL their bytes in the file are chained into *crc (crc32c), so
 * that what was read can be compared with what another rank read. */
zinc_status zinc_safetensors_reader_read(zinc_safetensors_reader *r, int i, int64_t offset,
                                         int64_t n, float *dst, uint32_t *crc);
/* The same bytes chained into *crc only (nothing converted). */
zinc_status zinc_safetensors_reader_crc(zinc_safetensors_reader *r, int i, int64_t offset,
                                        int64_t n, uint32_t *crc);
/* The file's size and the crc32c of its first 8 + header-length bytes:
 * what identifies the file a rank opened before its data is read. */
void zinc_safetensors_reader_identity(const zinc_safetensors_reader *r, int64_t *file_bytes,
                                      uint32_t *header_crc);
void zinc_safetensors_reader_close(zinc_safetensors_reader *r);

#endif /* ZINC_SAFETENSORS_H */
