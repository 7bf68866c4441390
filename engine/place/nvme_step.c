/*
 * nvme_step.c — the optimizer step over NVMe-resident state (nvme.c's
 * swap areas), a sub-group at a time: buffer_count host buffers of one
 * sub-group each, overlapping read(k+1) | update(k) | write(k-1).
 *
 * On the cuda device (and on the cpu device with ZINC_OFFLOAD_STAGING=1,
 * which takes the same path, copies included) the step is cpu.c's
 * staged pipeline with the swap area behind it (sub-groups are at most a
 * staging slot on every device: zinc_offload_staging_group). For
 * sub-group k:
 *
 *   io_uring:       read region k+1 NVMe -> host buffer (master, m, v)
 *   copy stream 0:  gradients of k+1 device -> pinned slot (k+1) & 1
 *                   (stages 0-1; at 2-3 the reduction wrote them to host)
 *   host:           CPU optimizer of k over its buffer, the 16-bit
 *                   parameters into pinned slot k & 1
 *   copy stream 1:  parameters of k, pinned slot -> device
 *   io_uring:       write region k back (waited for before its buffer is
 *                   read into again)
 *
 * so the disk, both copy directions and the CPU work at once. A slot is
 * reused two sub-groups later, after its in/out events. Stage-3 parameters
 * on NVMe are not on the device: the optimizer writes them to a host
 * staging buffer, written to the parameter swap area (no device copy).
 *
 * Any I/O failure is returned with its message (file, offset, errno or
 * checksum); the caller stops the engine, since the state on disk may be
 * half-written.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/copy_run.h"
#include "engine/place/nvme.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine/support.h"

/* --------------------------------------------------------- the step */

/* Byte offset in the parameter partition of optimizer element x (stage 3:
 * the optimizer index space is the shard). */
static size_t shard_byte_of(const zinc_engine *e, int64_t x) {
  int lo = 0, hi = e->nunits - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (e->units[mid].shard_offset <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const zinc_unit *u = &e->units[lo];
  if (x >= u->shard_offset + u->chunk)
    return e->shard_bytes;
  return u->shard_byte + (size_t)(x - u->shard_offset) * zinc_dtype_size(u->dtype);
}

/* The pieces of sub-group k: each run's intersection with [a0, a0 + g),
 * state pointers into the sub-group's buffer M (NULL: not read yet), the
 * gradient and parameter pointers where they live (parameters on NVMe:
 * into pstage, at their partition offset from the sub-group's first).
 * *first: the first run that may touch sub-group k, advanced; *first_run:
 * the first run of this sub-group (Lamb's norms). */
static int group_pieces(zinc_engine *e, const zinc_opt_seg *segs, int k, float *M, void *pstage,
                        const float *G, int moments_only, int *first, int *first_run,
                        zinc_opt_seg *piece) {
  zinc_nvme *n = nvme_of(e);
  int64_t a0 = (int64_t)k * n->group, g = group_len(n, e->opt_numel, k);
  /* the region's arrays in their dtypes: master, then the kept slots */
  zinc_opt_seg base = {.master = M,
                       .exp_avg = M && n->at[1] >= 0 ? (float *)((char *)M + n->pre[1] * g) : NULL,
                       .exp_avg_sq = M && n->at[2] >= 0 ? (float *)((char *)M + n->pre[2] * g)
                                                         : NULL,
                       .master_dtype = zinc_master_dtype(e),
                       .state_dtype = zinc_state_dtype(e)};
  size_t p0 = pstage ? shard_byte_of(e, a0) : 0;
  int np = 0;
  while (*first < e->nruns && e->runs[*first].opt_offset + e->runs[*first].n <= a0)
    (*first)++;
  *first_run = *first;
  for (int j = *first; j < e->nruns && e->runs[j].opt_offset < a0 + g; j++) {
    const zinc_opt_run *r = &e->runs[j];
    int64_t x0 = r->opt_offset > a0 ? r->opt_offset : a0;
    int64_t x1 = r->opt_offset + r->n < a0 + g ? r->opt_offset + r->n : a0 + g;
    if (x0 >= x1)
      continue;
    zinc_opt_seg s = segs[j];
    zinc_opt_seg_slots_at(&s, &base, x0 - a0); /* NULL: not read yet, or not kept */
    s.global_offset = segs[j].global_offset + (x0 - r->opt_offset);
    s.grad = G ? (const void *)(G + (x0 - a0))
             : segs[j].grad ? (const char *)segs[j].grad +
                                  (size_t)(x0 - r->opt_offset) * zinc_dt_size(s.grad_dtype)
                            : NULL; /* on disk: read with the sub-group's state */
    s.param_out = pstage ? (char *)pstage + (shard_byte_of(e, x0) - p0)
                  : segs[j].param_out ? (char *)segs[j].param_out + (size_t)(x0 - r->opt_offset) *
                                                                      zinc_dtype_size(s.param_dtype)
                                      : NULL;
    s.n = x1 - x0;
    if (moments_only)
      s.param_out = NULL;
    piece[np++] = s;
  }
  return np;
}

/* ---- staging (the cuda device; the cpu device with ZINC_OFFLOAD_STAGING)
 * The sub-group's gradients that live in device memory (stages 0-1) come
 * into pinned slot k & 1 on copy stream 0 while the swap area reads it; the
 * CPU optimizer writes the parameters that live in device memory into the
 * slot, and copy stream 1 takes them out while the next sub-group is
 * updated (cpu.c's slots, events and streams). */

static zinc_status staged_in(zinc_engine *e, const zinc_opt_seg *p, int np, int slot, int pass) {
  zinc_offload *o = &e->pl->off;
  if (zinc_offload_grads_on_device(e) && pass == ZINC_OPT_PASS_UPDATE) {
    size_t at = 0;
    zinc_copy_run run = {0}; /* pieces back to back: one copy (copy_run.h) */
    for (int i = 0; i < np; i++) {
      size_t bytes = (size_t)p[i].n * zinc_dt_size(p[i].grad_dtype);
      ZINC_CHECK(zinc_copy_run_add(e->dev, &run, (char *)o->grad[slot] + at, p[i].grad, bytes,
                                   o->copy[0]));
      at += bytes;
    }
    ZINC_CHECK(zinc_copy_run_flush(e->dev, &run, o->copy[0]));
  }
  return e->dev->ops->event_record(e->dev, o->in_done[slot], o->copy[0]);
}

/* The host view of the pieces: gradients and device-resident parameters
 * in slot `slot`. */
static void staged_redirect(zinc_engine *e, zinc_opt_seg *p, int np, int slot, int pass) {
  zinc_offload *o = &e->pl->off;
  int grads_in = zinc_offload_grads_on_device(e), params_out = zinc_offload_params_on_device(e);
  size_t gat = 0, pat = 0;
  for (int i = 0; i < np; i++) {
    if (pass != ZINC_OPT_PASS_UPDATE) { /* Lamb's APPLY reads no gradient */
      p[i].grad = NULL;
    } else if (grads_in) {
      p[i].grad = (char *)o->grad[slot] + gat;
      gat += (size_t)p[i].n * zinc_dt_size(p[i].grad_dtype);
    }
    if (p[i].param_out && params_out) {
      p[i].param_out = (char *)o->param[slot] + pat;
      pat += (size_t)p[i].n * zinc_dtype_size(p[i].param_dtype);
    }
  }
}

/* dev: the pieces' device view (where the parameters go). */
static zinc_status staged_out(zinc_engine *e, const zinc_opt_seg *dev, int np, int slot) {
  zinc_offload *o = &e->pl->off;
  if (zinc_offload_params_on_device(e)) {
    size_t at = 0;
    zinc_copy_run run = {0}; /* pieces back to back: one copy (copy_run.h) */
    for (int i = 0; i < np; i++) {
      if (!dev[i].param_out)
        continue;
      size_t bytes = (size_t)dev[i].n * zinc_dtype_size(dev[i].param_dtype);
      ZINC_CHECK(zinc_copy_run_add(e->dev, &run, dev[i].param_out, (char *)o->param[slot] + at,
                                   bytes, o->copy[1]));
      at += bytes;
    }
    ZINC_CHECK(zinc_copy_run_flush(e->dev, &run, o->copy[1]));
  }
  return e->dev->ops->event_record(e->dev, o->out_done[slot], o->copy[1]);
}

/* Wait for the slot: its gradients in, and the parameters of sub-group
 * k - 2, which used it before, out. */
static zinc_status staged_wait(zinc_engine *e, int k, int slot) {
  zinc_offload *o = &e->pl->off;
  ZINC_CHECK(e->dev->ops->event_sync(e->dev, o->in_done[slot]));
  if (k >= 2)
    ZINC_CHECK(e->dev->ops->event_sync(e->dev, o->out_done[slot]));
  return ZINC_OK;
}

/* Adam over the sub-group pipeline. segs[i] describe runs[i] with their
 * gradient and (in-memory) parameter pointers; master/m/v are ignored.
 * Staged (e->pl->off.ready): gradients in and parameters out through the
 * pinned slots, the optimizer on the host device. */
zinc_status zinc_nvme_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms) {
  /* Lamb's UPDATE moves the moments only: no parameter is written */
  int moments_only = zinc_opt_two_pass(c->kind) && pass == ZINC_OPT_PASS_UPDATE;
  zinc_nvme *n = nvme_of(e);
  int K = n->ngroups, B = n->nbuf;
  int staged = e->pl->off.ready;
  /* the gradients on disk come with the state (Lamb's APPLY reads none) */
  int read_grads = n->grad && pass == ZINC_OPT_PASS_UPDATE;
  zinc_device *cpu = staged ? e->pl->off.host : e->dev; /* runs the optimizer */
  zinc_stream *cpu_stream = staged ? NULL : e->stream;
  zinc_status st = ZINC_OK;
  zinc_opt_seg *piece = NULL, *dev_piece = NULL;
  void *pstage = NULL;
  size_t pstage_bytes = (size_t)n->group * 4;
  ZINC_CHECK(zinc_calloc((void **)&piece, (size_t)nseg + 1, sizeof *piece, "sub-group runs"));
  st = zinc_calloc((void **)&dev_piece, (size_t)nseg + 1, sizeof *dev_piece, "sub-group runs");
  /* host memory, zeroed at allocation on the host (support.c), so no queued
   * zeroing can land after the CPU optimizer's writes */
  if (st == ZINC_OK && zinc_nvme_param_on_disk(e) && !moments_only)
    st = zinc_engine_buffer_alloc(e, pstage_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &pstage,
                                  "parameter staging");
  int holds[NVME_MAX_BUFFERS]; /* the sub-group each buffer holds or is reading */
  for (int b = 0; b < B; b++)
    holds[b] = -1;
  int first = 0, ahead = 0, first_run = 0, unused;
  if (st == ZINC_OK && staged) { /* the gradients are final once the queued work is */
    st = e->dev->ops->event_record(e->dev, e->pl->off.grads_done, e->stream);
    if (st == ZINC_OK)
      st = e->dev->ops->stream_wait_event(e->dev, e->pl->off.copy[0], e->pl->off.grads_done);
  }
  if (st == ZINC_OK && K > 0) {
    st = zinc_swap_read(n->opt, 0, 0, n->buf[0],
                        region_bytes(n->elem_bytes, group_len(n, e->opt_numel, 0)), &n->rd[0]);
    if (st == ZINC_OK && read_grads)
      st = zinc_swap_read(n->grad, 0, 0, n->gbuf[0], region_bytes(4, group_len(n, e->opt_numel, 0)),
                          &n->grd[0]);
    holds[0] = 0;
    if (st == ZINC_OK && staged) {
      int np = group_pieces(e, segs, 0, NULL, NULL, NULL, moments_only, &ahead, &unused, dev_piece);
      st = staged_in(e, dev_piece, np, 0, pass);
    }
  }
  for (int k = 0; k < K && st == ZINC_OK; k++) {
    int b = k % B;
    int64_t a0 = (int64_t)k * n->group, g = group_len(n, e->opt_numel, k);
    /* read k+1 ahead into the next buffer once that buffer's write is done */
    int nb = (k + 1) % B;
    if (k + 1 < K && nb != b) {
      if (n->wr[nb]) {
        st = zinc_aio_wait(n->wr[nb]);
        n->wr[nb] = NULL;
      }
      if (st == ZINC_OK)
        st = zinc_swap_read(n->opt, k + 1, 0, n->buf[nb],
                            region_bytes(n->elem_bytes, group_len(n, e->opt_numel, k + 1)),
                            &n->rd[nb]);
      if (st == ZINC_OK && read_grads)
        st = zinc_swap_read(n->grad, k + 1, 0, n->gbuf[nb],
                            region_bytes(4, group_len(n, e->opt_numel, k + 1)), &n->grd[nb]);
      holds[nb] = k + 1;
    }
    /* and its gradients into the other slot (consumed by sub-group k - 1) */
    if (st == ZINC_OK && staged && k + 1 < K) {
      int np = group_pieces(e, segs, k + 1, NULL, NULL, NULL, moments_only, &ahead, &unused, dev_piece);
      st = staged_in(e, dev_piece, np, (k + 1) & 1, pass);
    }
    if (st == ZINC_OK && holds[b] != k) { /* one buffer: read after its write */
      if (n->wr[b]) {
        st = zinc_aio_wait(n->wr[b]);
        n->wr[b] = NULL;
      }
      if (st == ZINC_OK)
        st = zinc_swap_read(n->opt, k, 0, n->buf[b], region_bytes(n->elem_bytes, g), &n->rd[b]);
      if (st == ZINC_OK && read_grads)
        st = zinc_swap_read(n->grad, k, 0, n->gbuf[b], region_bytes(4, g), &n->grd[b]);
      holds[b] = k;
    }
    if (st == ZINC_OK && n->rd[b]) {
      st = zinc_aio_wait(n->rd[b]);
      n->rd[b] = NULL;
    }
    if (st != ZINC_OK)
      break;
    if (n->grd[b]) {
      st = zinc_aio_wait(n->grd[b]);
      n->grd[b] = NULL;
      if (st != ZINC_OK)
        break;
    }
    float *M = n->buf[b];
    int np = group_pieces(e, segs, k, M, pstage, read_grads ? n->gbuf[b] : NULL, moments_only,
                          &first, &first_run, piece);
    if (staged) {
      memcpy(dev_piece, piece, (size_t)np * sizeof *piece);
      staged_redirect(e, piece, np, k & 1, pass);
      st = staged_wait(e, k, k & 1);
    }
    if (st == ZINC_OK)
      st = cpu->ops->optim(cpu, cpu_stream, c, ncoef, piece, np, pass,
                           norms ? norms + 2 * (size_t)first_run : NULL);
    if (st == ZINC_OK && staged)
      st = staged_out(e, dev_piece, np, k & 1);
    /* the state's write goes out first, so that it overlaps the
     * parameters' (read-modify-write of partial blocks, synchronous) */
    if (st == ZINC_OK)
      st = zinc_swap_write(n->opt, k, 0, M, region_bytes(n->elem_bytes, g), &n->wr[b]);
    if (st == ZINC_OK && pstage) {
      size_t p0 = shard_byte_of(e, a0);
      st = zinc_pshard_write(e, p0, shard_byte_of(e, a0 + g) - p0, pstage);
    }
  }
  for (int b = 0; b < B; b++) {
    zinc_status w = ZINC_OK;
    if (n->rd[b])
      w = zinc_aio_wait(n->rd[b]);
    n->rd[b] = NULL;
    if (n->grd[b]) {
      zinc_status w2 = zinc_aio_wait(n->grd[b]);
      w = w == ZINC_OK ? w2 : w;
    }
    n->grd[b] = NULL;
    if (n->wr[b]) {
      zinc_status w2 = zinc_aio_wait(n->wr[b]);
      w = w == ZINC_OK ? w2 : w;
    }
    n->wr[b] = NULL;
    if (st == ZINC_OK)
      st = w;
  }
  /* every copy done before the gathers read the parameters, or before an
   * error returns and the slots are reused */
  for (int i = 0; staged && i < 2; i++) {
    zinc_status s2 = e->dev->ops->stream_sync(e->dev, e->pl->off.copy[i]);
    if (st == ZINC_OK)
      st = s2;
  }
  if (pstage)
    zinc_engine_buffer_free(e, pstage, pstage_bytes, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  free(piece);
  free(dev_piece);
  return st;
}
