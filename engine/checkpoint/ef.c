/*
 * ef.c — error-feedback residuals (engine/reduce/compress.c) in checkpoints.
 * DeepSpeed drops them on every load; zinc saves them and gives them back.
 *
 * Save: every data-parallel rank writes its e->rd->cx_ef bytes, raw, to
 * rank_NNNNN.zef beside its shard (inside the partial directory, fsynced,
 * listed with its crc32c in the manifest and the checksums file, like the
 * shards). The manifest's "error_feedback" holds what decides whether the
 * bytes fit a later engine: codec (int8, or f32 for DGC's residual) and
 * block, dp_size, and every
 * trained unit's (shard offset, chunk) in order with their crc32c.
 *
 * Load, decided on every rank alike from the manifest and the settings:
 *   - the engine keeps no residuals: the saved ones are ignored (info line);
 *   - none saved, or a weights-only load: the residuals start at zero;
 *   - same dp_size, block and units, every parameter in the same places
 *     of them: each rank's bytes come back exactly, so training resumes
 *     bit for bit;
 *   - otherwise (another world size, stage, bucket layout or block size)
 *     they are resharded: every saved slice is decoded to fp32 and summed,
 *     per model element, over its senders in rank order, E = the error the
 *     old ranks carried for that element; in the new layout all of E goes
 *     to one sender — for chunk p of a unit the lowest rank other than p
 *     (rank 0, or rank 1 for p == 0) — re-encoded INT8 at the new block
 *     (or stored fp32 when the new engine's residuals are DGC's);
 *     the other senders' slots for that chunk are zero. Each new rank reads
 *     the ranges of the old .zef files it needs (the directory is shared,
 *     as for the shards), through the manifest's pieces (model element ->
 *     old rank and shard offset -> old unit).
 * Every sender keeps one residual for chunk p (receiver p's), so what is
 * fed back into element x of chunk p over the next steps is the sum of the
 * senders' slots for x; resharding keeps that sum up to one INT8 rounding.
 * Padding elements carry nothing over, nor do parameters that were frozen
 * when saved (no residual) or are frozen now (no slot). Cost: a carrier
 * reads (old dp_size - 1) saved bytes (and their scales) per element it
 * carries, and rank 0 carries every chunk but chunk 0: about
 * (M - 1) / M x (N - 1) bytes per trained element on rank 0 when N ranks
 * saved and M load (a reshard is rare; an exact restore reads each rank's
 * own file once).
 *
 * The carried sums are encoded with the CPU codec (kernels/cpu_kernels.h)
 * on the host; a partial range of a saved slice is decoded here as the
 * codec does it, q * scale (kernels/codec.h), or read as fp32. Saved and
 * new formats may differ (int8 <-> f32): the sum E is fp32 either way.
 */
#include "engine/checkpoint/ef.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/endian.h"
#include "base/fs.h"
#include "engine/reduce/methods.h"
#include "engine/support.h"
#include "kernels/codec.h"
#include "kernels/cpu_kernels.h"

#define EF_STAGE_BYTES ((size_t)4 << 20)
#define EF_STAGE_ELEMS ((int64_t)1 << 20)

static zinc_codec int8_codec(int block) { return (zinc_codec){ZINC_CODEC_INT8, block, 0}; }

static int engine_f32(const zinc_engine *e) { return e->rd->cx_grad.kind == ZINC_CODEC_TOPK; }
static const char *format_name(int f32) { return f32 ? "f32" : "int8"; }

/* ---------------------------------------------------------------- INT8 */

static float le_f32(const unsigned char *p) {
  uint32_t b = zinc_le_get_u32(p);
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* ---------------------------------------------------------------- save */

zinc_status zinc_ckpt_ef_write(zinc_engine *e, const char *path, const zinc_rank_file_id *id,
                               zinc_ckpt_fault *fault, uint32_t *crc, int64_t *bytes) {
  *crc = 0;
  *bytes = 0;
  unsigned char *stage = NULL;
  ZINC_CHECK(zinc_aligned_alloc((void **)&stage, 64, EF_STAGE_BYTES, "error-feedback staging"));
  int fd = zinc_fs_create_new(path, 0600);
  zinc_status st = fd >= 0 ? ZINC_OK : zinc_fs_error("create", path, 0, errno);
  for (size_t off = 0; st == ZINC_OK && off < e->rd->cx_ef_bytes; off += EF_STAGE_BYTES) {
    size_t n = e->rd->cx_ef_bytes - off < EF_STAGE_BYTES ? e->rd->cx_ef_bytes - off : EF_STAGE_BYTES;
    st = e->dev->ops->copy(e->dev, stage, (const char *)e->rd->cx_ef + off, n, e->stream);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e);
    if (st == ZINC_OK)
      st = zinc_ckpt_fault_hit(fault, "write", path, (int64_t)off);
    if (st == ZINC_OK)
      st = zinc_fs_pwrite_all(fd, path, stage, n, (int64_t)off);
    *crc = zinc_crc32c(*crc, stage, n);
  }
  unsigned char tr[ZINC_RANK_TRAILER]; /* whose residuals these are */
  zinc_rank_trailer_encode(ZINC_RANK_FILE_EF, id, e->rd->cx_ef_bytes, tr);
  if (st == ZINC_OK)
    st = zinc_ckpt_fault_hit(fault, "write", path, (int64_t)e->rd->cx_ef_bytes);
  if (st == ZINC_OK)
    st = zinc_fs_pwrite_all(fd, path, tr, sizeof tr, (int64_t)e->rd->cx_ef_bytes);
  *crc = zinc_crc32c(*crc, tr, sizeof tr);
  if (st == ZINC_OK && fsync(fd) != 0)
    st = zinc_fs_error("fsync", path, (int64_t)e->rd->cx_ef_bytes, errno);
  if (fd >= 0)
    close(fd);
  if (st != ZINC_OK && fd >= 0)
    unlink(path);
  *bytes = (int64_t)e->rd->cx_ef_bytes + ZINC_RANK_TRAILER;
  free(stage);
  return st;
}

zinc_status zinc_ckpt_ef_describe(const zinc_engine *e, const uint32_t *crcs,
                                  const int64_t *bytes, zinc_manifest_ef *ef) {
  memset(ef, 0, sizeof *ef);
  ef->block = e->rd->cx_grad.block;
  ef->f32 = engine_f32(e);
  ef->dp_size = e->dp_size;
  ef->nunits = e->ntrain_units;
  ef->units = calloc((size_t)e->ntrain_units + 1, sizeof *ef->units);
  ef->files = calloc((size_t)e->dp_size, sizeof *ef->files);
  if (!ef->units || !ef->files) {
    zinc_ckpt_ef_describe_free(ef);
    return zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the error-feedback "
                      "layout of %d units; free host memory and retry", e->ntrain_units);
  }
  for (int ui = 0; ui < e->ntrain_units; ui++)
    ef->units[ui] = (zinc_manifest_ef_unit){e->units[ui].shard_offset, e->units[ui].chunk};
  ef->layout_crc32c = zinc_manifest_ef_layout_crc(ef->units, ef->nunits);
  for (int r = 0; r < e->dp_size; r++) {
    char name[32];
    snprintf(name, sizeof name, ZINC_EF_FILE_FORMAT, r);
    ef->files[r] = (zinc_manifest_file){.name = zinc_strdup(name), .rank = r,
                                        .bytes = bytes[r], .crc32c = crcs[r]};
    if (!ef->files[r].name) {
      zinc_ckpt_ef_describe_free(ef);
      return zinc_error(ZINC_ERR_NOMEM, "checkpoint save: no host memory for the names of "
                        "the error-feedback files");
    }
  }
  ef->present = 1;
  return ZINC_OK;
}

void zinc_ckpt_ef_describe_free(zinc_manifest_ef *ef) {
  for (int r = 0; ef->files && r < ef->dp_size; r++)
    free(ef->files[r].name);
  free(ef->files);
  free(ef->units);
  memset(ef, 0, sizeof *ef);
}

/* ---------------------------------------------------------------- load */

/* Parameter pieces of this engine's layout, as a manifest lists them. */
typedef struct {
  zinc_manifest_piece *v;
  int n, cap;
} piece_vec;

static zinc_status own_piece(zinc_engine *e, const zinc_unit *u, int ui, int r, int64_t chunk_off,
                             int64_t param_off, int64_t len, void *vctx) {
  piece_vec *l = vctx;
  ZINC_CHECK(zinc_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "layout pieces"));
  l->v[l->n++] = (zinc_manifest_piece){r, u->shard_offset + chunk_off, param_off, len};
  return ZINC_OK;
}

static int cmp_piece(const void *a, const void *b) {
  const zinc_manifest_piece *x = a, *y = b;
  return x->param_offset < y->param_offset ? -1 : x->param_offset > y->param_offset;
}

/* The saved bytes mean the same here: the same senders, block and units,
 * and every parameter in the same places of the units (a model registered
 * in another order can give equal units holding other elements). */
static int same_layout(zinc_engine *e, const zinc_manifest *m, const int *map) {
  const zinc_manifest_ef *ef = &m->ef;
  if (ef->dp_size != e->dp_size || ef->block != e->rd->cx_grad.block || ef->f32 != engine_f32(e) ||
      ef->nunits != e->ntrain_units)
    return 0;
  for (int ui = 0; ui < ef->nunits; ui++)
    if (ef->units[ui].shard_offset != e->units[ui].shard_offset ||
        ef->units[ui].chunk != e->units[ui].chunk)
      return 0;
  piece_vec l = {0};
  int same = 1;
  for (int i = 0; i < e->nparams && same; i++) {
    const zinc_manifest_param *mp = &m->params[map[i]];
    l.n = 0;
    same = zinc_layout_for_each_piece(e, e->params[i], own_piece, &l) == ZINC_OK &&
           l.n == mp->npieces;
    if (same && l.n)
      qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_piece);
    for (int k = 0; same && k < l.n; k++)
      same = l.v[k].file == mp->pieces[k].file && l.v[k].file_offset == mp->pieces[k].file_offset &&
             l.v[k].param_offset == mp->pieces[k].param_offset &&
             l.v[k].length == mp->pieces[k].length;
  }
  free(l.v);
  return same;
}

zinc_ef_load_mode zinc_ckpt_ef_mode(zinc_engine *e, const zinc_ckpt_dir *d, const int *map,
                                    int weights_only) {
  const zinc_manifest_ef *ef = &d->manifest->ef;
  if (!e->rd->cx_ef)
    return ZINC_EF_LOAD_NONE;
  if (!ef->present || weights_only)
    return ZINC_EF_LOAD_ZERO;
  return same_layout(e, d->manifest, map) ? ZINC_EF_LOAD_EXACT : ZINC_EF_LOAD_RESHARD;
}

/* The sender that carries chunk p's whole error after a reshard. */
static int carrier(int p) { return p == 0 ? 1 : 0; }

static int slot_of(int sender, int p) { return p < sender ? p : p - 1; }

static zinc_status open_ef_file(const zinc_ckpt_dir *d, int r, int *fds) {
  if (fds[r] >= 0)
    return ZINC_OK;
  char *p = zinc_path_join(d->path, d->manifest->ef.files[r].name);
  if (!p)
    return zinc_error(ZINC_ERR_NOMEM, "checkpoint load: no host memory for the path of %s/%s",
                      d->path, d->manifest->ef.files[r].name);
  fds[r] = open(p, O_RDONLY | O_CLOEXEC);
  zinc_status st = fds[r] >= 0 ? ZINC_OK : zinc_fs_error("open", p, 0, errno);
  free(p);
  return st;
}

static zinc_status load_exact(zinc_engine *e, const zinc_ckpt_dir *d) {
  int fd = -1;
  const zinc_manifest_file *f = &d->manifest->ef.files[e->dp_rank];
  if ((size_t)(f->bytes - zinc_manifest_rank_trailer(d->manifest)) != e->rd->cx_ef_bytes)
    /* the layouts matched: a bug if it fires */
    return zinc_error(ZINC_ERR_CORRUPT, "checkpoint %s: %s holds %lld bytes, the engine's "
                      "residuals %zu", d->path, f->name, (long long)f->bytes, e->rd->cx_ef_bytes);
  unsigned char *stage = NULL;
  ZINC_CHECK(zinc_aligned_alloc((void **)&stage, 64, EF_STAGE_BYTES, "error-feedback staging"));
  char *path = zinc_path_join(d->path, f->name);
  zinc_status st = path ? ZINC_OK
                        : zinc_error(ZINC_ERR_NOMEM, "checkpoint load: no host memory for the "
                                     "path of %s/%s", d->path, f->name);
  if (st == ZINC_OK && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    st = zinc_fs_error("open", path, 0, errno);
  for (size_t off = 0; st == ZINC_OK && off < e->rd->cx_ef_bytes; off += EF_STAGE_BYTES) {
    size_t n = e->rd->cx_ef_bytes - off < EF_STAGE_BYTES ? e->rd->cx_ef_bytes - off : EF_STAGE_BYTES;
    st = zinc_fs_pread_all(fd, path, stage, n, (int64_t)off);
    if (st == ZINC_OK)
      st = e->dev->ops->copy(e->dev, (char *)e->rd->cx_ef + off, stage, n, e->stream);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e); /* the staging is reused */
  }
  if (fd >= 0)
    close(fd);
  free(path);
  free(stage);
  return st;
}

/* A piece of a chunk whose residuals this rank carries after a reshard. */
typedef struct {
  int ui, r;              /* unit and receiver (chunk r) */
  int mparam;             /* manifest parameter */
  int64_t chunk_off, param_off, len;
} ef_piece;

typedef struct {
  ef_piece *v;
  int n, cap;
  int mparam;
} ef_piece_list;

static zinc_status collect(zinc_engine *e, const zinc_unit *u, int ui, int r, int64_t chunk_off,
                           int64_t param_off, int64_t len, void *vctx) {
  ef_piece_list *l = vctx;
  if (ui >= e->ntrain_units || r == e->dp_rank || carrier(r) != e->dp_rank)
    return ZINC_OK;
  ZINC_CHECK(zinc_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, "reshard pieces"));
  l->v[l->n++] = (ef_piece){ui, r, l->mparam, chunk_off, param_off, len};
  return ZINC_OK;
}

static int cmp_ef_piece(const void *a, const void *b) {
  const ef_piece *x = a, *y = b;
  if (x->ui != y->ui)
    return x->ui < y->ui ? -1 : 1;
  if (x->r != y->r)
    return x->r < y->r ? -1 : 1;
  return x->chunk_off < y->chunk_off ? -1 : x->chunk_off > y->chunk_off;
}

typedef struct {
  const zinc_ckpt_dir *d;
  int64_t *off;           /* old unit -> byte offset in every file */
  int *fds;               /* old rank -> its .zef, opened on demand */
  unsigned char *scales, *q; /* staging */
} reshard_ctx;

/* The old unit holding shard offset x, or -1 (not a trained unit then). */
static int old_unit(const zinc_manifest_ef *ef, int64_t x) {
  int lo = 0, hi = ef->nunits - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (ef->units[mid].shard_offset <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (ef->nunits == 0 || ef->units[lo].shard_offset > x ||
      x >= ef->units[lo].shard_offset + ef->units[lo].chunk)
    return -1;
  return lo;
}

/* dst[0..n) += the residuals every old sender s != q kept for elements
 * [j0, j0 + n) of chunk q of old unit uo, sender by sender in rank order. */
static zinc_status add_old(reshard_ctx *c, int uo, int q, int64_t j0, int64_t n, float *dst) {
  const zinc_manifest_ef *ef = &c->d->manifest->ef;
  int64_t one = zinc_manifest_ef_slice_bytes(ef, uo), chunk = ef->units[uo].chunk;
  int64_t nb = (chunk + ef->block - 1) / ef->block;
  int64_t b0 = j0 / ef->block, b1 = (j0 + n - 1) / ef->block;
  for (int s = 0; s < ef->dp_size; s++) {
    if (s == q)
      continue;
    ZINC_CHECK(open_ef_file(c->d, s, c->fds));
    int64_t base = c->off[uo] + (int64_t)slot_of(s, q) * one;
    const char *name = ef->files[s].name;
    if (ef->f32) { /* fp32 values, staged through q (4 bytes each, in pieces) */
      for (int64_t k0 = 0; k0 < n; k0 += EF_STAGE_ELEMS / 4) {
        int64_t m = n - k0 < EF_STAGE_ELEMS / 4 ? n - k0 : EF_STAGE_ELEMS / 4;
        ZINC_CHECK(zinc_fs_pread_all(c->fds[s], name, c->q, (size_t)m * 4, base + 4 * (j0 + k0)));
        for (int64_t k = 0; k < m; k++)
          dst[k0 + k] += le_f32(c->q + 4 * k);
      }
      continue;
    }
    ZINC_CHECK(zinc_fs_pread_all(c->fds[s], name, c->scales, (size_t)(b1 - b0 + 1) * 4,
                                 base + 4 * b0));
    ZINC_CHECK(zinc_fs_pread_all(c->fds[s], name, c->q, (size_t)n, base + 4 * nb + j0));
    for (int64_t k = 0; k < n; k++) {
      float scale = le_f32(c->scales + 4 * ((j0 + k) / ef->block - b0));
      dst[k] += (float)(signed char)c->q[k] * scale;
    }
  }
  return ZINC_OK;
}

/* E over one piece: the saved pieces of its parameter that overlap it. */
static zinc_status gather_piece(reshard_ctx *c, const ef_piece *pc, float *E) {
  const zinc_manifest *m = c->d->manifest;
  const zinc_manifest_param *mp = &m->params[pc->mparam];
  int lo = 0, hi = mp->npieces - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (mp->pieces[mid].param_offset <= pc->param_off)
      lo = mid;
    else
      hi = mid - 1;
  }
  for (int k = lo; k < mp->npieces && mp->pieces[k].param_offset < pc->param_off + pc->len; k++) {
    const zinc_manifest_piece *old = &mp->pieces[k];
    int64_t a = old->param_offset > pc->param_off ? old->param_offset : pc->param_off;
    int64_t b = old->param_offset + old->length < pc->param_off + pc->len
                    ? old->param_offset + old->length
                    : pc->param_off + pc->len;
    if (a >= b)
      continue;
    int64_t x = old->file_offset + (a - old->param_offset); /* in old rank file's shard */
    int uo = old_unit(&m->ef, x);
    if (uo < 0)
      continue; /* frozen when saved: no residual */
    for (int64_t y = a; y < b; y += EF_STAGE_ELEMS) {
      int64_t n = b - y < EF_STAGE_ELEMS ? b - y : EF_STAGE_ELEMS;
      int64_t j0 = x + (y - a) - m->ef.units[uo].shard_offset;
      ZINC_CHECK(add_old(c, uo, old->file, j0, n, E + pc->chunk_off + (y - pc->param_off)));
    }
  }
  return ZINC_OK;
}

static zinc_status load_reshard(zinc_engine *e, const zinc_ckpt_dir *d, const int *map) {
  const zinc_manifest_ef *ef = &d->manifest->ef;
  ef_piece_list l = {0};
  reshard_ctx c = {.d = d};
  float *E = NULL;
  unsigned char *enc = NULL;
  int64_t most = 0;
  for (int ui = 0; ui < e->ntrain_units; ui++)
    most = e->units[ui].chunk > most ? e->units[ui].chunk : most;
  zinc_status st = e->dev->ops->fill_zero(e->dev, e->rd->cx_ef, e->rd->cx_ef_bytes ? e->rd->cx_ef_bytes : 16,
                                          e->stream);
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&c.off, (size_t)ef->nunits + 1, sizeof *c.off, "reshard offsets");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&c.fds, (size_t)ef->dp_size, sizeof *c.fds, "reshard files");
  for (int r = 0; c.fds && r < ef->dp_size; r++)
    c.fds[r] = -1;
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&c.scales, (size_t)(EF_STAGE_ELEMS / ef->block + 2), 4,
                     "reshard scales");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&c.q, (size_t)EF_STAGE_ELEMS, 1, "reshard values");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&E, (size_t)(most ? most : 1), sizeof *E, "reshard sums");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&enc, zinc_compress_ef_slice_bytes(e->rd->cx_grad, most) + 16, 1,
                     "reshard encoding");
  for (int uo = 1; st == ZINC_OK && uo <= ef->nunits; uo++)
    c.off[uo] = c.off[uo - 1] +
                (int64_t)(ef->dp_size - 1) * zinc_manifest_ef_slice_bytes(ef, uo - 1);
  for (int i = 0; i < e->nparams && st == ZINC_OK; i++) {
    l.mparam = map[i];
    st = zinc_layout_for_each_piece(e, e->params[i], collect, &l);
  }
  if (st == ZINC_OK && l.n)
    qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_ef_piece);
  for (int k = 0; st == ZINC_OK && k < l.n;) {
    int ui = l.v[k].ui, p = l.v[k].r;
    const zinc_unit *u = &e->units[ui];
    memset(E, 0, (size_t)u->chunk * sizeof *E);
    for (; st == ZINC_OK && k < l.n && l.v[k].ui == ui && l.v[k].r == p; k++)
      st = gather_piece(&c, &l.v[k], E);
    if (st != ZINC_OK)
      break;
    size_t one = zinc_compress_ef_slice_bytes(e->rd->cx_grad, u->chunk);
    if (engine_f32(e)) { /* DGC's residual: E as it is (the raw bytes of cx_ef) */
      memset(enc, 0, one);
      memcpy(enc, E, (size_t)u->chunk * sizeof *E);
    } else {
      st = zinc_cpu_codec_encode(NULL, ZINC_CPU_ISA_SCALAR, int8_codec(e->rd->cx_grad.block), enc, E,
                                 ZINC_F32, u->chunk, NULL, 0.0f, 0);
    }
    if (st != ZINC_OK)
      break;
    char *slot = (char *)e->rd->cx_ef + e->rd->cx_ef_off[ui] + (size_t)slot_of(e->dp_rank, p) * one;
    st = e->dev->ops->copy(e->dev, slot, enc, one, e->stream);
    if (st == ZINC_OK)
      st = zinc_engine_sync(e); /* enc is reused */
  }
  for (int r = 0; c.fds && r < ef->dp_size; r++)
    if (c.fds[r] >= 0)
      close(c.fds[r]);
  free(c.fds);
  free(c.off);
  free(c.scales);
  free(c.q);
  free(E);
  free(enc);
  free(l.v);
  return st;
}

zinc_status zinc_ckpt_ef_load(zinc_engine *e, const zinc_ckpt_dir *d, const int *map,
                              zinc_ef_load_mode mode) {
  const zinc_manifest_ef *ef = &d->manifest->ef;
  switch (mode) {
  case ZINC_EF_LOAD_NONE:
    if (ef->present)
      zinc_log0(ZINC_LOG_INFO, "checkpoint %s holds error-feedback residuals (%d ranks, %s "
                "block %d); this engine keeps none (no quantized gradients with "
                "zeropp_loco_param or DGC's residual), so they are not loaded", d->path,
                ef->dp_size, format_name(ef->f32), ef->block);
    return ZINC_OK;
  case ZINC_EF_LOAD_ZERO:
    zinc_log0(ZINC_LOG_INFO, "error-feedback residuals start at zero: %s", ef->present
              ? "a weights-only load" : "the checkpoint holds none (saved without them)");
    return e->dev->ops->fill_zero(e->dev, e->rd->cx_ef, e->rd->cx_ef_bytes ? e->rd->cx_ef_bytes : 16,
                                  e->stream);
  case ZINC_EF_LOAD_EXACT:
    ZINC_CHECK(load_exact(e, d));
    zinc_log0(ZINC_LOG_INFO, "error-feedback residuals restored as saved (%d ranks, %s "
              "block %d)", ef->dp_size, format_name(ef->f32), ef->block);
    return ZINC_OK;
  case ZINC_EF_LOAD_RESHARD:
    ZINC_CHECK(load_reshard(e, d, map));
    zinc_log0(ZINC_LOG_INFO, "error-feedback residuals resharded from %d ranks (%s block %d, "
              "%d units) to %d ranks (%s block %d, %d units): each element's summed error is "
              "carried by one sender", ef->dp_size, format_name(ef->f32), ef->block, ef->nunits,
              e->dp_size, format_name(engine_f32(e)), e->rd->cx_grad.block, e->ntrain_units);
    return ZINC_OK;
  }
  return ZINC_OK;
}
