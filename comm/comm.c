/*
 * comm.c — what every comm backend shares: element types, argument checks
 * and the single-operation conveniences built on `run`.
 */
#include "comm/comm.h"

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

size_t zinc_dt_size(int dtype) {
  switch (dtype) {
  case ZINC_F32: return 4;
  case ZINC_BF16: return 2;
  case ZINC_F16: return 2;
  case ZINC_DT_F64: return 8;
  case ZINC_DT_I32: return 4;
  case ZINC_DT_I64: return 8;
  case ZINC_DT_U8: return 1;
  }
  return 0;
}

const char *zinc_dt_name(int dtype) {
  switch (dtype) {
  case ZINC_F32: return "f32";
  case ZINC_BF16: return "bf16";
  case ZINC_F16: return "f16";
  case ZINC_DT_F64: return "f64";
  case ZINC_DT_I32: return "i32";
  case ZINC_DT_I64: return "i64";
  case ZINC_DT_U8: return "u8";
  }
  return "unknown";
}

const char *zinc_coll_name(zinc_coll_kind k) {
  switch (k) {
  case ZINC_COLL_ALLREDUCE: return "all-reduce";
  case ZINC_COLL_REDUCE_SCATTER: return "reduce-scatter";
  case ZINC_COLL_ALLGATHER: return "all-gather";
  case ZINC_COLL_ALLGATHERV: return "all-gatherv";
  case ZINC_COLL_BROADCAST: return "broadcast";
  case ZINC_COLL_BARRIER: return "barrier";
  case ZINC_COLL_ALLTOALLV: return "all-to-all-v";
  }
  return "unknown collective";
}

/* One side of an all-to-all-v: every count/displacement pair must fit in
 * size_t bytes; *lo and *hi are the byte extent it touches (lo > hi: none). */
static zinc_status alltoallv_extent(const zinc_comm *c, const zinc_coll *o, int entry,
                                    const char *side, const size_t *counts,
                                    const size_t *displs, size_t es, size_t *lo, size_t *hi) {
  *lo = SIZE_MAX;
  *hi = 0;
  for (int p = 0; p < c->size; p++) {
    if (!counts[p])
      continue;
    if (displs[p] > SIZE_MAX / es - counts[p] || counts[p] > SIZE_MAX / es)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d): %s "
                        "displacement %zu + count %zu for rank %d overflows the address "
                        "space in %zu-byte elements", c->ops->name, entry, side, displs[p],
                        counts[p], p, es);
    size_t a = displs[p] * es, b = (displs[p] + counts[p]) * es;
    *lo = a < *lo ? a : *lo;
    *hi = b > *hi ? b : *hi;
  }
  return ZINC_OK;
}

static zinc_status validate_alltoallv(const zinc_comm *c, const zinc_coll *o, int entry) {
  const char *name = c->ops->name;
  const char *missing = !o->counts    ? "counts (send counts)"
                        : !o->displs  ? "displs (send offsets)"
                        : !o->rcounts ? "rcounts (receive counts)"
                        : !o->rdispls ? "rdispls (receive offsets)"
                                      : NULL;
  if (missing)
    return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d) has NULL %s; "
                      "it needs counts, displs, rcounts and rdispls of %d entries each",
                      name, entry, missing, c->size);
  if (o->counts[c->rank] != o->rcounts[c->rank])
    return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d): rank %d "
                      "sends itself counts[%d] = %zu elements but expects rcounts[%d] = %zu",
                      name, entry, c->rank, c->rank, o->counts[c->rank], c->rank,
                      o->rcounts[c->rank]);
  if ((o->logical_bytes || o->codec_name) && (unsigned)o->logical_kind >= ZINC_COLL_BARRIER)
    return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d) stands for "
                      "logical_kind %d, not a collective with data (all-reduce .. broadcast)",
                      name, entry, (int)o->logical_kind);
  const size_t es = zinc_dt_size(o->dtype);
  size_t slo, shi, rlo, rhi;
  ZINC_CHECK(alltoallv_extent(c, o, entry, "send", o->counts, o->displs, es, &slo, &shi));
  ZINC_CHECK(alltoallv_extent(c, o, entry, "receive", o->rcounts, o->rdispls, es, &rlo, &rhi));
  if ((slo < shi && !o->send) || (rlo < rhi && !o->recv))
    return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d) moves "
                      "%s bytes with a NULL %s buffer", name, entry,
                      slo < shi && !o->send ? "send" : "receive",
                      slo < shi && !o->send ? "send" : "recv");
  if (slo < shi && rlo < rhi) {
    uintptr_t s0 = (uintptr_t)o->send + slo, s1 = (uintptr_t)o->send + shi;
    uintptr_t r0 = (uintptr_t)o->recv + rlo, r1 = (uintptr_t)o->recv + rhi;
    if (s0 < r1 && r0 < s1)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: all-to-all-v (batch entry %d): the send "
                        "bytes [%zu, %zu) of send overlap the receive bytes [%zu, %zu) of "
                        "recv; all-to-all-v does not run in place, give it a separate recv",
                        name, entry, slo, shi, rlo, rhi);
  }
  return ZINC_OK;
}

zinc_status zinc_coll_validate(const zinc_comm *c, const zinc_coll *colls, int n) {
  if (!c || (n > 0 && !colls) || n < 0)
    return zinc_error(ZINC_ERR_INVALID, "comm: NULL comm or batch (n=%d)", n);
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    const char *what = zinc_coll_name(o->kind);
    if ((unsigned)o->kind > ZINC_COLL_ALLTOALLV)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: operation %d of the batch has unknown kind %d",
                        c->ops->name, i, (int)o->kind);
    if (o->kind == ZINC_COLL_BARRIER)
      continue;
    if (zinc_dt_size(o->dtype) == 0)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: %s with unknown element type %d",
                        c->ops->name, what, o->dtype);
    if (o->kind == ZINC_COLL_ALLREDUCE && (unsigned)o->op > ZINC_OP_MIN)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: all-reduce with unknown op %d",
                        c->ops->name, (int)o->op);
    if (o->kind == ZINC_COLL_BROADCAST && (o->root < 0 || o->root >= c->size))
      return zinc_error(ZINC_ERR_INVALID, "comm %s: broadcast root %d outside 0..%d",
                        c->ops->name, o->root, c->size - 1);
    if (o->kind == ZINC_COLL_ALLGATHERV && (!o->counts || !o->displs))
      return zinc_error(ZINC_ERR_INVALID, "comm %s: all-gatherv needs counts and displs",
                        c->ops->name);
    if (o->kind == ZINC_COLL_ALLGATHERV && o->counts[c->rank] != o->count)
      return zinc_error(ZINC_ERR_INVALID,
                        "comm %s: all-gatherv: this rank sends %zu elements but counts[%d] is %zu",
                        c->ops->name, o->count, c->rank, o->counts[c->rank]);
    if (o->kind == ZINC_COLL_ALLTOALLV) {
      ZINC_CHECK(validate_alltoallv(c, o, i));
      continue;
    }
    int needs_send = o->kind != ZINC_COLL_BROADCAST;
    size_t total = o->count;
    if (o->kind == ZINC_COLL_ALLGATHERV) {
      total = 0;
      for (int r = 0; r < c->size; r++)
        total += o->counts[r];
    }
    if (total > 0 && (!o->recv || (needs_send && o->count > 0 && !o->send)))
      return zinc_error(ZINC_ERR_INVALID, "comm %s: %s of %zu elements with a NULL buffer",
                        c->ops->name, what, o->count);
  }
  return ZINC_OK;
}

zinc_status zinc_xfer_validate(const zinc_comm *c, const zinc_xfer *x, int n) {
  if (!c || !x || n < 1)
    return zinc_error(ZINC_ERR_INVALID, "comm: NULL comm or an empty batch of transfers "
                      "(n=%d)", n);
  if (!c->ops->xfer_start)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "comm %s: no transfers between ranks (a comm of "
                      "one rank has no peer)", c->ops->name);
  for (int i = 0; i < n; i++) {
    const zinc_xfer *o = &x[i];
    if (o->peer < 0 || o->peer >= c->size || o->peer == c->rank)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: transfer %d of the batch names peer %d: "
                        "give another rank of the comm (0..%d, not %d)", c->ops->name, i,
                        o->peer, c->size - 1, c->rank);
    size_t es = zinc_dt_size(o->dtype);
    if (es == 0)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: transfer %d of the batch has unknown "
                        "element type %d", c->ops->name, i, o->dtype);
    if (o->count > (SIZE_MAX >> 1) / es)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: transfer %d of the batch: %zu elements of "
                        "%s is too large", c->ops->name, i, o->count, zinc_dt_name(o->dtype));
    if (o->count > 0 && !o->buf && !o->check_only)
      return zinc_error(ZINC_ERR_INVALID, "comm %s: transfer %d of the batch: %zu elements "
                        "with a NULL buffer", c->ops->name, i, o->count);
  }
  return ZINC_OK;
}

void zinc_xfer_rank_text(const zinc_comm *c, int k, int name, char *buf, size_t len) {
  if (c && c->xfer_label)
    snprintf(buf, len, "%s %d (rank %d)", c->xfer_label, k, name);
  else
    snprintf(buf, len, "rank %d", name);
}

static zinc_status run1(zinc_comm *c, zinc_coll o) { return c->ops->run(c, &o, 1); }

zinc_status zinc_comm_allreduce(zinc_comm *c, const void *send, void *recv, size_t count,
                                int dtype, zinc_comm_op op) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_ALLREDUCE, .send = send, .recv = recv,
                             .count = count, .dtype = dtype, .op = op});
}

zinc_status zinc_comm_reduce_scatter(zinc_comm *c, const void *send, void *recv,
                                     size_t recvcount, int dtype) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                             .count = recvcount, .dtype = dtype});
}

zinc_status zinc_comm_allgather(zinc_comm *c, const void *send, void *recv, size_t sendcount,
                                int dtype) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_ALLGATHER, .send = send, .recv = recv,
                             .count = sendcount, .dtype = dtype});
}

zinc_status zinc_comm_allgatherv(zinc_comm *c, const void *send, size_t sendcount, void *recv,
                                 const size_t *counts, const size_t *displs, int dtype) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_ALLGATHERV, .send = send, .recv = recv,
                             .count = sendcount, .dtype = dtype, .counts = counts,
                             .displs = displs});
}

zinc_status zinc_comm_broadcast(zinc_comm *c, void *buf, size_t count, int dtype, int root) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_BROADCAST, .recv = buf, .count = count,
                             .dtype = dtype, .root = root});
}

zinc_status zinc_comm_barrier(zinc_comm *c) {
  return run1(c, (zinc_coll){.kind = ZINC_COLL_BARRIER});
}

zinc_status zinc_comm_set_timeout(zinc_comm *c, double timeout_s) {
  if (c->ops->set_timeout)
    return c->ops->set_timeout(c, timeout_s);
  c->timeout_s = timeout_s;
  return ZINC_OK;
}
