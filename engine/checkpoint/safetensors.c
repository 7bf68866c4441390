/*
 * safetensors.c — the streaming .safetensors writer (see safetensors.h) and
 * zinc_export_safetensors, which writes an engine's consolidated weights
 * one parameter at a time.
 */
#define _GNU_SOURCE
#include "engine/checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/endian.h"
#include "base/fs.h"
#include "engine/checkpoint/wait_bound.h"
#include "engine/engine.h"
#include "engine/pipe.h"
#include "engine/failure.h"
#include "kernels/zinc_math.h"

#define PUT_CHUNK 65536 /* elements converted per write */

struct zinc_safetensors {
  int fd;
  char *path, *tmp;
  int n;
  zinc_dtype *dtypes;
  int64_t *begin, *numel;  /* byte offset in the data area, elements */
  int64_t data_start;
  void *buf;               /* PUT_CHUNK elements of up to 4 bytes */
};

static const char *st_dtype(zinc_dtype d) {
  return d == ZINC_F32 ? "F32" : d == ZINC_BF16 ? "BF16" : "F16";
}

void zinc_safetensors_abort(zinc_safetensors *w) {
  if (!w)
    return;
  if (w->fd >= 0) {
    close(w->fd);
    unlink(w->tmp);
  }
  free(w->path);
  free(w->tmp);
  free(w->dtypes);
  free(w->begin);
  free(w->numel);
  free(w->buf);
  free(w);
}

zinc_status zinc_safetensors_open(const char *path, const zinc_safetensors_tensor *t, int n,
                                  zinc_safetensors **out) {
  *out = NULL;
  zinc_safetensors *w = calloc(1, sizeof *w);
  if (!w)
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing %s", path);
  w->fd = -1;
  w->n = n;
  size_t plen = strlen(path) + 8;
  w->path = zinc_strdup(path);
  w->tmp = malloc(plen);
  w->dtypes = calloc((size_t)n + 1, sizeof *w->dtypes);
  w->begin = calloc((size_t)n + 1, sizeof *w->begin);
  w->numel = calloc((size_t)n + 1, sizeof *w->numel);
  w->buf = malloc(PUT_CHUNK * 4);
  size_t cap = 256;
  for (int i = 0; i < n; i++)
    cap += strlen(t[i].name) + 64 + 24 * (size_t)t[i].ndim;
  char *hdr = malloc(cap + 8);
  if (!w->path || !w->tmp || !w->dtypes || !w->begin || !w->numel || !w->buf || !hdr) {
    free(hdr);
    zinc_safetensors_abort(w);
    return zinc_error(ZINC_ERR_NOMEM, "out of memory writing %s", path);
  }
  snprintf(w->tmp, plen, "%s.tmp", path);
  size_t len = (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"zinc %s\"}",
                                zinc_version());
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    int64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++)
      numel *= t[i].shape[d];
    w->dtypes[i] = t[i].dtype;
    w->begin[i] = off;
    w->numel[i] = numel;
    int64_t end = off + numel * (int64_t)zinc_dtype_size(t[i].dtype);
    len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                            st_dtype(t[i].dtype));
    for (int d = 0; d < t[i].ndim; d++)
      len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%lld,%lld]}",
                            (long long)off, (long long)end);
    off = end;
  }
  len += (size_t)snprintf(hdr + len, cap - len, "}");
  while (len % 8)
    hdr[len++] = ' '; /* the data area starts 8-byte aligned */
  w->data_start = 8 + (int64_t)len;
  w->fd = zinc_fs_create_new(w->tmp, 0644); /* never through a link */
  zinc_status st = ZINC_OK;
  if (w->fd < 0)
    st = zinc_error(ZINC_ERR_IO, "create %s: %s", w->tmp, strerror(errno));
  unsigned char hlen[8];
  zinc_le_put_u64(hlen, len);
  if (st == ZINC_OK)
    st = zinc_fs_pwrite_all(w->fd, w->tmp, hlen, sizeof hlen, 0);
  if (st == ZINC_OK)
    st = zinc_fs_pwrite_all(w->fd, w->tmp, hdr, len, 8);
  if (st == ZINC_OK && ftruncate(w->fd, w->data_start + off) != 0)
    st = zinc_error(ZINC_ERR_IO, "size %s to %lld bytes: %s", w->tmp,
                    (long long)(w->data_start + off), strerror(errno));
  free(hdr);
  if (st != ZINC_OK) {
    zinc_safetensors_abort(w);
    return st;
  }
  *out = w;
  return ZINC_OK;
}

zinc_status zinc_safetensors_put(zinc_safetensors *w, int i, int64_t offset, const float *values,
                                 int64_t n) {
  if (i < 0 || i >= w->n || offset < 0 || n < 0 || offset + n > w->numel[i])
    return zinc_error(ZINC_ERR_INVALID, "safetensors %s: elements %lld..%lld of tensor %d are "
                      "outside it", w->path, (long long)offset, (long long)(offset + n), i);
  size_t es = zinc_dtype_size(w->dtypes[i]);
  for (int64_t k = 0; k < n; k += PUT_CHUNK) {
    int64_t m = n - k < PUT_CHUNK ? n - k : PUT_CHUNK;
    for (int64_t j = 0; j < m; j++)
      zinc_store_from_f32(w->buf, j, w->dtypes[i], values[k + j]);
    ZINC_CHECK(zinc_fs_pwrite_all(w->fd, w->tmp, w->buf, (size_t)m * es,
                                  w->data_start + w->begin[i] + (offset + k) * (int64_t)es));
  }
  return ZINC_OK;
}

zinc_status zinc_safetensors_finish(zinc_safetensors *w) {
  zinc_status st = zinc_fs_publish(w->fd, w->tmp, w->path);
  if (st != ZINC_OK) {
    zinc_safetensors_abort(w);
    return st;
  }
  close(w->fd);
  w->fd = -1;
  zinc_safetensors_abort(w); /* frees; the file stays */
  return ZINC_OK;
}

/* ------------------------------------------------------------ export */

static zinc_status export_safetensors(zinc_engine *e, const char *path, int dtype) {
  zinc_safetensors_tensor *t = calloc((size_t)e->nparams + 1, sizeof *t);
  char **names = calloc((size_t)e->nparams + 1, sizeof *names);
  int64_t largest = 1;
  zinc_status st = t && names ? ZINC_OK
                  : zinc_error(ZINC_ERR_NOMEM, "zinc_export_safetensors %s: no host memory for "
                               "the tensor table of %d parameters (%zu bytes); free host "
                               "memory and retry", path, e->nparams,
                               ((size_t)e->nparams + 1) * (sizeof *t + sizeof *names));
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    const zinc_param *p = e->params[i];
    size_t n = strlen(p->module->name) + strlen(p->name) + 2;
    names[i] = malloc(n);
    if (!names[i]) {
      st = zinc_error(ZINC_ERR_NOMEM, "zinc_export_safetensors %s: no host memory for the "
                      "tensor name \"%s.%s\" (%zu bytes); free host memory and retry", path,
                      p->module->name, p->name, n);
      break;
    }
    snprintf(names[i], n, "%s.%s", p->module->name, p->name);
    t[i] = (zinc_safetensors_tensor){names[i], dtype < 0 ? p->dtype : (zinc_dtype)dtype, p->ndim,
                                     p->shape};
    if (p->numel > largest)
      largest = p->numel;
  }
  zinc_safetensors *w = NULL;
  /* the first rank of each data-parallel group writes: with model
   * parallelism every model-parallel rank has its own shard of the model */
  if (st == ZINC_OK && e->dp_rank == 0)
    st = zinc_safetensors_open(path, t, e->nparams, &w);
  st = zinc_engine_agree(e, e->dp_host, st);
  float *values = NULL;
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&values, (size_t)largest, 4, "export buffer");
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    st = zinc_param_get_full(e, e->params[i], ZINC_STATE_PARAM, values);
    if (st == ZINC_OK && w)
      st = zinc_safetensors_put(w, i, 0, values, e->params[i]->numel);
    st = zinc_engine_agree(e, e->dp_host, st);
  }
  if (st == ZINC_OK && w) {
    st = zinc_safetensors_finish(w);
    w = NULL;
  }
  zinc_safetensors_abort(w);
  st = zinc_engine_agree(e, e->dp_host, st);
  for (int i = 0; names && i < e->nparams; i++)
    free(names[i]);
  free(names);
  free(t);
  free(values);
  return st;
}

zinc_status zinc_export_safetensors(zinc_engine *e, const char *path, int dtype) {
  ZINC_CHECK(zinc_engine_usable(e, "zinc_export_safetensors"));
  ZINC_CHECK(zinc_pipe_refuse(e, "zinc_export_safetensors"));
  if (!path || !path[0])
    return zinc_error(ZINC_ERR_INVALID, "zinc_export_safetensors: path is NULL or empty");
  if (dtype != -1 && zinc_dtype_size((zinc_dtype)dtype) == 0)
    return zinc_error(ZINC_ERR_INVALID, "zinc_export_safetensors: dtype %d is not -1, ZINC_F32, "
                      "ZINC_BF16 or ZINC_F16", dtype);
  /* the ranks wait while rank 0 writes: up to zinc.checkpoint_timeout_s */
  zinc_ckpt_wait w;
  ZINC_CHECK(zinc_ckpt_wait_begin(e, &w, "zinc_export_safetensors"));
  return zinc_ckpt_wait_end(e, &w, export_safetensors(e, path, dtype));
}
