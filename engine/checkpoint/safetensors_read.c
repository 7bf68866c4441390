/*
 * safetensors_read.c — the .safetensors reader (see safetensors.h): a
 * header checked against the file before anything is read from it, then
 * bounded reads of element ranges converted to f32.
 *
 * The file is outside input: every number in the header is checked (ranges,
 * overflow of the element count, each tensor's byte range against its
 * dtype, shape and the data area, and the ranges together tiling the data
 * area as the format requires) so that a read can trust the entry and no
 * tensor reads another's bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/endian.h"
#include "base/fs.h"
#include "engine/checkpoint/safetensors.h"
#include "kernels/zinc_math.h"

#define READ_CHUNK 65536 /* elements read and converted at a time */

/* The format's dtypes and their sizes; zdtype the zinc_dtype read as. */
static const struct {
  const char *name;
  int size, zdtype;
} dtypes[] = {
    {"F32", 4, ZINC_F32}, {"BF16", 2, ZINC_BF16}, {"F16", 2, ZINC_F16}, {"F64", 8, -1},
    {"I64", 8, -1},       {"U64", 8, -1},         {"I32", 4, -1},       {"U32", 4, -1},
    {"I16", 2, -1},       {"U16", 2, -1},         {"I8", 1, -1},        {"U8", 1, -1},
    {"BOOL", 1, -1},      {"F8_E5M2", 1, -1},     {"F8_E4M3", 1, -1},   {"F8_E8M0", 1, -1},
    {"C64", 8, -1},
};

void zinc_safetensors_entries_free(zinc_safetensors_entry *t, int n) {
  for (int i = 0; t && i < n; i++)
    free(t[i].name);
  free(t);
}

static zinc_status bad(const char *what, const char *name, const char *fmt, const char *detail) {
  return zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: tensor \"%.200s\": %s%s", what, name, fmt,
                    detail ? detail : "");
}

static zinc_status parse_entry(const char *what, const char *name, json_t *v, int64_t data_bytes,
                               zinc_safetensors_entry *t) {
  if (!json_is_object(v))
    return bad(what, name, "is not an object", NULL);
  json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
         *offs = json_object_get(v, "data_offsets");
  if (!json_is_string(dt))
    return bad(what, name, "has no dtype string", NULL);
  int size = 0;
  t->zdtype = -1;
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
    if (!strcmp(json_string_value(dt), dtypes[k].name)) {
      size = dtypes[k].size;
      t->zdtype = dtypes[k].zdtype;
    }
  snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
  if (!json_is_array(shape))
    return bad(what, name, "has no shape array", NULL);
  if (json_array_size(shape) > ZINC_SAFETENSORS_MAX_DIMS)
    return bad(what, name, "has more than 8 dimensions, which zinc does not read", NULL);
  t->ndim = (int)json_array_size(shape);
  t->numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    json_t *x = json_array_get(shape, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return bad(what, name, "has a shape entry that is not an integer >= 0", NULL);
    t->shape[d] = json_integer_value(x);
    if (t->shape[d] && t->numel > INT64_MAX / 8 / t->shape[d])
      return bad(what, name, "has a shape whose element count overflows", NULL);
    t->numel *= t->shape[d];
  }
  if (!json_is_array(offs) || json_array_size(offs) != 2 ||
      !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
    return bad(what, name, "has no data_offsets [begin, end] of integers", NULL);
  t->begin = json_integer_value(json_array_get(offs, 0));
  t->end = json_integer_value(json_array_get(offs, 1));
  if (t->begin < 0 || t->end < t->begin || t->end > data_bytes) {
    char d[160];
    snprintf(d, sizeof d, " [%lld, %lld] (the data area holds %lld bytes)", (long long)t->begin,
             (long long)t->end, (long long)data_bytes);
    return bad(what, name, "has data_offsets outside the file", d);
  }
  if (size && t->end - t->begin != t->numel * size) {
    char d[200];
    snprintf(d, sizeof d, " (%lld bytes for %lld elements of %s)", (long long)(t->end - t->begin),
             (long long)t->numel, t->dtype);
    return bad(what, name, "has data_offsets that do not match its shape and dtype", d);
  }
  return ZINC_OK;
}

/* Sorted by byte range (then name, so that equal ranges order alike). */
static int by_range(const void *a, const void *b) {
  const zinc_safetensors_entry *x = *(const zinc_safetensors_entry *const *)a,
                               *y = *(const zinc_safetensors_entry *const *)b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The format's layout (the reference library's validation): sorted by
 * byte range, the tensors tile the data area from byte 0 to its end, each
 * beginning where the one before it ends. An overlap would let a tensor
 * take another's bytes; a gap or trailing bytes are data no tensor owns,
 * which the safetensors library refuses too. */
static zinc_status check_layout(const char *what, zinc_safetensors_entry *t, int n,
                                int64_t data_bytes) {
  if (n == 0)
    return data_bytes == 0 ? ZINC_OK
                           : zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: the header names no "
                                        "tensor but the data area holds %lld bytes", what,
                                        (long long)data_bytes);
  zinc_safetensors_entry **order = malloc((size_t)n * sizeof *order);
  if (!order)
    return zinc_error(ZINC_ERR_NOMEM, "safetensors %s: no host memory to check the layout of "
                      "%d tensors", what, n);
  for (int i = 0; i < n; i++)
    order[i] = &t[i];
  qsort(order, (size_t)n, sizeof *order, by_range);
  zinc_status st = ZINC_OK;
  int64_t at = 0; /* where the tensors so far end */
  for (int i = 0; i < n && st == ZINC_OK; i++) {
    const zinc_safetensors_entry *x = order[i];
    char d[400];
    if (x->begin < at) {
      snprintf(d, sizeof d, "has data_offsets [%lld, %lld] that overlap those of tensor "
               "\"%.200s\" ([%lld, %lld])", (long long)x->begin, (long long)x->end,
               order[i - 1]->name, (long long)order[i - 1]->begin, (long long)order[i - 1]->end);
      st = bad(what, x->name, d, ": two tensors may not share bytes");
    } else if (x->begin > at) {
      if (i)
        snprintf(d, sizeof d, "; the tensor before it, \"%.200s\", ends at byte %lld (the "
                 "format has no gaps between tensors)", order[i - 1]->name, (long long)at);
      else
        snprintf(d, sizeof d, "; the first tensor of the data area begins at byte 0");
      char f[160];
      snprintf(f, sizeof f, "has data_offsets [%lld, %lld] that begin after a gap of %lld bytes",
               (long long)x->begin, (long long)x->end, (long long)(x->begin - at));
      st = bad(what, x->name, f, d);
    }
    at = x->end;
  }
  if (st == ZINC_OK && at != data_bytes) {
    const zinc_safetensors_entry *x = order[n - 1];
    char f[160], d[160];
    snprintf(f, sizeof f, "has data_offsets [%lld, %lld], the last of the data area, which holds "
             "%lld bytes", (long long)x->begin, (long long)x->end, (long long)data_bytes);
    snprintf(d, sizeof d, ": %lld bytes after it belong to no tensor (a file must end where its "
             "last tensor ends)", (long long)(data_bytes - at));
    st = bad(what, x->name, f, d);
  }
  free(order);
  return st;
}

zinc_status zinc_safetensors_parse_header(const char *text, size_t len, int64_t data_bytes,
                                          const char *what, zinc_safetensors_entry **out,
                                          int *n) {
  *out = NULL;
  *n = 0;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: the header is not JSON (%s, at byte "
                      "%d)", what, jerr.text, jerr.position);
  if (!json_is_object(root)) {
    json_decref(root);
    return zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: the header is not a JSON object", what);
  }
  size_t count = json_object_size(root);
  zinc_safetensors_entry *t = calloc(count + 1, sizeof *t);
  zinc_status st = t ? ZINC_OK
                     : zinc_error(ZINC_ERR_NOMEM, "safetensors %s: no host memory for %zu "
                                  "tensor entries", what, count);
  int k = 0;
  const char *name;
  json_t *v;
  json_object_foreach(root, name, v) {
    if (st != ZINC_OK)
      break;
    if (!strcmp(name, "__metadata__")) {
      const char *mk;
      json_t *mv;
      if (!json_is_object(v))
        st = bad(what, name, "is not an object of strings", NULL);
      json_object_foreach(v, mk, mv) {
        if (st == ZINC_OK && !json_is_string(mv))
          st = bad(what, name, "has a value that is not a string at key ", mk);
      }
      continue;
    }
    st = parse_entry(what, name, v, data_bytes, &t[k]);
    if (st == ZINC_OK) {
      t[k].name = zinc_strdup(name);
      if (!t[k].name)
        st = zinc_error(ZINC_ERR_NOMEM, "safetensors %s: no host memory for a tensor name",
                        what);
      k++;
    }
  }
  json_decref(root);
  if (st == ZINC_OK)
    st = check_layout(what, t, k, data_bytes);
  if (st != ZINC_OK) {
    zinc_safetensors_entries_free(t, k);
    return st;
  }
  *out = t;
  *n = k;
  return ZINC_OK;
}

/* ------------------------------------------------------------- reader */

struct zinc_safetensors_reader {
  char *path;
  int fd;
  int64_t data_start;
  int64_t file_bytes;
  uint32_t header_crc;  /* crc32c of the 8-byte length and the header */
  zinc_safetensors_entry *t;
  int n;
  int *order;  /* tensor indices sorted by name (zinc_safetensors_reader_find) */
  void *buf;   /* READ_CHUNK elements of up to 4 bytes */
};

void zinc_safetensors_reader_close(zinc_safetensors_reader *r) {
  if (!r)
    return;
  if (r->fd >= 0)
    close(r->fd);
  zinc_safetensors_entries_free(r->t, r->n);
  free(r->order);
  free(r->buf);
  free(r->path);
  free(r);
}

static int by_name(const void *a, const void *b, void *entries) {
  const zinc_safetensors_entry *t = entries;
  return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

zinc_status zinc_safetensors_reader_open(const char *path, zinc_safetensors_reader **out) {
  *out = NULL;
  zinc_safetensors_reader *r = calloc(1, sizeof *r);
  if (!r)
    return zinc_error(ZINC_ERR_NOMEM, "safetensors %s: out of host memory", path);
  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  r->path = zinc_strdup(path);
  r->buf = malloc(READ_CHUNK * 4);
  zinc_status st = ZINC_OK;
  struct stat sb;
  unsigned char hlen[8];
  char *hdr = NULL;
  uint64_t len = 0;
  if (r->fd < 0)
    st = zinc_fs_error("open", path, -1, errno);
  else if (!r->path || !r->buf)
    st = zinc_error(ZINC_ERR_NOMEM, "safetensors %s: out of host memory", path);
  else if (fstat(r->fd, &sb) != 0)
    st = zinc_fs_error("stat", path, -1, errno);
  else if (!S_ISREG(sb.st_mode))
    st = zinc_error(ZINC_ERR_INVALID, "safetensors %s: not a regular file", path);
  else if (sb.st_size < 8)
    st = zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: %lld bytes, shorter than the 8-byte "
                    "header length", path, (long long)sb.st_size);
  if (st == ZINC_OK)
    st = zinc_fs_pread_all(r->fd, path, hlen, 8, 0);
  if (st == ZINC_OK) {
    len = zinc_le_get_u64(hlen);
    if (len > ZINC_SAFETENSORS_HEADER_MAX || len > (uint64_t)sb.st_size - 8)
      st = zinc_error(ZINC_ERR_CORRUPT, "safetensors %s: header length %llu is beyond the file "
                      "(%lld bytes) or the format's limit (%u bytes): not a safetensors file, "
                      "or a truncated one", path, (unsigned long long)len,
                      (long long)sb.st_size, ZINC_SAFETENSORS_HEADER_MAX);
  }
  if (st == ZINC_OK && !(hdr = malloc(len + 1)))
    st = zinc_error(ZINC_ERR_NOMEM, "safetensors %s: no host memory for its header (%llu "
                    "bytes)", path, (unsigned long long)len);
  if (st == ZINC_OK)
    st = zinc_fs_pread_all(r->fd, path, hdr, len, 8);
  if (st == ZINC_OK) {
    r->data_start = 8 + (int64_t)len;
    r->file_bytes = sb.st_size;
    r->header_crc = zinc_crc32c(zinc_crc32c(0, hlen, 8), hdr, len);
    st = zinc_safetensors_parse_header(hdr, len, sb.st_size - r->data_start, path, &r->t, &r->n);
  }
  free(hdr);
  if (st == ZINC_OK && !(r->order = malloc(((size_t)r->n + 1) * sizeof *r->order)))
    st = zinc_error(ZINC_ERR_NOMEM, "safetensors %s: out of host memory", path);
  if (st != ZINC_OK) {
    zinc_safetensors_reader_close(r);
    return st;
  }
  for (int i = 0; i < r->n; i++)
    r->order[i] = i;
  qsort_r(r->order, (size_t)r->n, sizeof *r->order, by_name, r->t);
  *out = r;
  return ZINC_OK;
}

int zinc_safetensors_reader_count(const zinc_safetensors_reader *r) { return r->n; }

const zinc_safetensors_entry *zinc_safetensors_reader_entry(const zinc_safetensors_reader *r,
                                                            int i) {
  return i >= 0 && i < r->n ? &r->t[i] : NULL;
}

int zinc_safetensors_reader_find(const zinc_safetensors_reader *r, const char *name) {
  int lo = 0, hi = r->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(r->t[r->order[mid]].name, name);
    if (!c)
      return r->order[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

void zinc_safetensors_reader_identity(const zinc_safetensors_reader *r, int64_t *file_bytes,
                                      uint32_t *header_crc) {
  *file_bytes = r->file_bytes;
  *header_crc = r->header_crc;
}

/* Elements offset..offset+n of tensor i (a dtype zinc reads), a bounded
 * piece at a time: their bytes chained into *crc when crc is not NULL,
 * converted to f32 into dst when dst is not NULL. */
static zinc_status read_range(zinc_safetensors_reader *r, int i, int64_t offset, int64_t n,
                              float *dst, uint32_t *crc) {
  if (i < 0 || i >= r->n)
    return zinc_error(ZINC_ERR_INVALID, "safetensors %s: no tensor %d", r->path, i);
  const zinc_safetensors_entry *t = &r->t[i];
  if (t->zdtype < 0)
    return zinc_error(ZINC_ERR_INVALID, "safetensors %s: tensor \"%s\" is %s; zinc reads F32, "
                      "BF16 and F16", r->path, t->name, t->dtype);
  if (offset < 0 || n < 0 || offset + n > t->numel)
    return zinc_error(ZINC_ERR_INVALID, "safetensors %s: elements %lld..%lld of tensor \"%s\" "
                      "are outside it (%lld elements)", r->path, (long long)offset,
                      (long long)(offset + n), t->name, (long long)t->numel);
  size_t es = zinc_dtype_size((zinc_dtype)t->zdtype);
  for (int64_t k = 0; k < n; k += READ_CHUNK) {
    int64_t m = n - k < READ_CHUNK ? n - k : READ_CHUNK;
    ZINC_CHECK(zinc_fs_pread_all(r->fd, r->path, r->buf, (size_t)m * es,
                                 r->data_start + t->begin + (offset + k) * (int64_t)es));
    if (crc)
      *crc = zinc_crc32c(*crc, r->buf, (size_t)m * es);
    for (int64_t j = 0; dst && j < m; j++)
      dst[k + j] = zinc_load_as_f32(r->buf, j, t->zdtype);
  }
  return ZINC_OK;
}

zinc_status zinc_safetensors_reader_read(zinc_safetensors_reader *r, int i, int64_t offset,
                                         int64_t n, float *dst, uint32_t *crc) {
  return read_range(r, i, offset, n, dst, crc);
}

zinc_status zinc_safetensors_reader_crc(zinc_safetensors_reader *r, int i, int64_t offset,
                                        int64_t n, uint32_t *crc) {
  return read_range(r, i, offset, n, NULL, crc);
}
