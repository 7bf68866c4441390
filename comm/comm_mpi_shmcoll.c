/*
 * comm_mpi_shmcoll.c — collectives of the mpi comm when every rank is on
 * this node: each rank reads its peers' buffers straight from shared memory
 * and computes its own part (its reduce-scatter slice, its copy of the
 * gathered buffer), summing in the canonical tree order with
 * zinc_mpi_reduce_ranks.
 *
 * A batch runs as:
 *   1. every rank publishes one descriptor per op in its control segment:
 *      what it issued, and where its buffers are (allocation id + offset)
 *      when they lie inside an alloc_shared allocation;
 *   2. node barrier; every rank checks that all ranks issued the same ops;
 *   3. ops whose buffers are shared on every rank run together: each rank
 *      reads peers' buffers directly (all-reduce adds a second phase that
 *      gathers the reduced slices, after one more barrier);
 *   4. node barrier, after which every rank may reuse its buffers.
 * So a batch of shared-buffer reduce-scatters costs one pair of barriers.
 *
 * An op for which some rank's buffer is private memory is "staged": it runs
 * in pieces that fit the scratch window — the private ranks copy their
 * piece into their scratch segment, barrier, everyone reads, barrier. Every
 * rank derives the same plan from the same descriptors, so the pieces line
 * up. An op that touches memory an earlier op of the batch touched (e.g. an
 * all-gather of what a reduce-scatter just produced) is fenced: the ops
 * before it finish behind a barrier first.
 *
 * All-to-all-v never comes here: its per-pair counts are in each rank's
 * private arrays, so zinc_mpi_execute runs it on the p2p path between the
 * shared-memory runs of the ops around it.
 */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_mpi_impl.h"

/* The bytes of an op that peers read on this rank (its source). */
static size_t src_bytes(const zinc_mpi *m, const zinc_coll *o) {
  size_t es = zinc_dt_size(o->dtype);
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER: return (size_t)m->size * o->count * es;
  case ZINC_COLL_ALLREDUCE:
  case ZINC_COLL_ALLGATHER:
  case ZINC_COLL_ALLGATHERV:
  case ZINC_COLL_BROADCAST: return o->count * es;
  case ZINC_COLL_BARRIER:
  case ZINC_COLL_ALLTOALLV: return 0; /* never here: it runs on the p2p path */
  }
  return 0;
}

static const void *src_ptr(const zinc_coll *o) {
  return o->kind == ZINC_COLL_BROADCAST ? o->recv : o->send;
}

/* The bytes of recv this rank writes. */
static size_t dst_bytes(const zinc_mpi *m, const zinc_coll *o) {
  size_t es = zinc_dt_size(o->dtype);
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER:
  case ZINC_COLL_ALLREDUCE:
  case ZINC_COLL_BROADCAST: return o->count * es;
  case ZINC_COLL_ALLGATHER: return (size_t)m->size * o->count * es;
  case ZINC_COLL_ALLGATHERV: {
    size_t end = 0;
    for (int k = 0; k < m->size; k++)
      if (o->counts[k] && o->displs[k] + o->counts[k] > end)
        end = o->displs[k] + o->counts[k];
    return end * es;
  }
  case ZINC_COLL_BARRIER:
  case ZINC_COLL_ALLTOALLV: return 0; /* never here: it runs on the p2p path */
  }
  return 0;
}

static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
  const char *x = a, *y = b;
  return na && nb && x < y + nb && y < x + na;
}

/* Does op j write what an earlier op of the chunk reads or writes, or read
 * what one writes? */
static int needs_fence(const zinc_mpi *m, const zinc_coll *colls, int j) {
  const zinc_coll *o = &colls[j];
  const void *rj = src_ptr(o), *wj = o->recv;
  size_t nrj = src_bytes(m, o), nwj = dst_bytes(m, o);
  for (int i = 0; i < j; i++) {
    const zinc_coll *p = &colls[i];
    const void *ri = src_ptr(p), *wi = p->recv;
    size_t nri = src_bytes(m, p), nwi = dst_bytes(m, p);
    if (overlaps(wj, nwj, ri, nri) || overlaps(wj, nwj, wi, nwi) || overlaps(rj, nrj, wi, nwi))
      return 1;
  }
  return 0;
}

static void publish(zinc_mpi *m, const zinc_coll *o, int fence, zinc_mpi_shm_desc *d) {
  memset(d, 0, sizeof *d);
  d->kind = (int32_t)o->kind;
  d->dtype = o->dtype;
  d->op = (int32_t)o->op;
  d->root = o->root;
  d->count = o->count;
  d->fence = fence;
  d->src_id = d->dst_id = -1;
  size_t nsrc = src_bytes(m, o), ndst = dst_bytes(m, o);
  zinc_mpi_shm_alloc *a;
  if (nsrc && (a = zinc_mpi_shm_find(m, src_ptr(o), nsrc))) {
    d->src_id = a->id;
    d->src_off = (uint64_t)((const char *)src_ptr(o) - a->base);
  }
  if (ndst && (a = zinc_mpi_shm_find(m, o->recv, ndst))) {
    d->dst_id = a->id;
    d->dst_off = (uint64_t)((const char *)o->recv - a->base);
  }
}

/* Rank k's source / recv of op j, mapped into this process (shared only). */
static const char *peer_src(zinc_mpi *m, int k, int j) {
  const zinc_mpi_shm_desc *d = &m->ctl[k]->desc[j];
  return zinc_mpi_shm_find_id(m, d->src_id)->peer[k] + d->src_off;
}

static const char *peer_dst(zinc_mpi *m, int k, int j) {
  const zinc_mpi_shm_desc *d = &m->ctl[k]->desc[j];
  return zinc_mpi_shm_find_id(m, d->dst_id)->peer[k] + d->dst_off;
}

/* Does rank k have bytes peers must read for op j? */
static int has_src(const zinc_mpi *m, const zinc_coll *o, int k) {
  switch (o->kind) {
  case ZINC_COLL_ALLGATHERV: return o->counts[k] > 0;
  case ZINC_COLL_BROADCAST: return k == o->root && o->count > 0;
  case ZINC_COLL_BARRIER: return 0;
  default: return o->count > 0;
  }
}

static int src_staged(zinc_mpi *m, const zinc_coll *o, int j, int k) {
  return has_src(m, o, k) && m->ctl[k]->desc[j].src_id < 0;
}

static int op_staged(zinc_mpi *m, const zinc_coll *o, int j) {
  for (int k = 0; k < m->size; k++) {
    if (src_staged(m, o, j, k))
      return 1;
    if (o->kind == ZINC_COLL_ALLREDUCE && o->count > 0 && m->ctl[k]->desc[j].dst_id < 0)
      return 1;
  }
  return 0;
}

/* Every rank must have issued the same op at j (same kind, type, count,
 * root, reduction); all-gatherv counts must match each rank's own count. */
static zinc_status check_same(zinc_mpi *m, const zinc_coll *o, int j) {
  for (int k = 0; k < m->size; k++) {
    const zinc_mpi_shm_desc *d = &m->ctl[k]->desc[j];
    uint64_t want = o->kind == ZINC_COLL_ALLGATHERV ? o->counts[k] : o->count;
    int same = d->kind == (int32_t)o->kind;
    if (same && o->kind != ZINC_COLL_BARRIER)
      same = d->dtype == o->dtype && d->count == want &&
             (o->kind != ZINC_COLL_BROADCAST || d->root == o->root) &&
             (o->kind != ZINC_COLL_ALLREDUCE || d->op == (int32_t)o->op);
    if (!same) {
      char mine[96];
      zinc_mpi_describe(o, mine, sizeof mine);
      return zinc_error(ZINC_ERR_COMM,
                        "comm mpi: batch entry %d differs between ranks: rank %d issued %s, "
                        "rank %d issued kind %d of %llu elements (type %s, root %d, op %d); "
                        "every rank must issue the same collectives in the same order",
                        j, zinc_mpi_rank_name(m, m->rank), mine, zinc_mpi_rank_name(m, k),
                        d->kind, (unsigned long long)d->count,
                        zinc_dt_name(d->dtype), d->root, d->op);
    }
  }
  return ZINC_OK;
}

/* ------------------------------------------------- ops on shared buffers */

static void direct_phase_a(zinc_mpi *m, const zinc_coll *o, int j) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype);
  const void *srcs[n];
  char *recv = o->recv;
  if (o->kind != ZINC_COLL_ALLGATHERV && o->count == 0)
    return; /* nothing to move; zero-size buffers have no descriptor */
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER:
    for (int k = 0; k < n; k++)
      srcs[k] = (k == r ? (const char *)o->send : peer_src(m, k, j)) + (size_t)r * o->count * es;
    zinc_mpi_reduce_ranks(recv, srcs, n, o->count, o->dtype, ZINC_OP_SUM);
    break;
  case ZINC_COLL_ALLREDUCE: {
    size_t s = zinc_slice_start(o->count, n, r), len = zinc_slice_start(o->count, n, r + 1) - s;
    for (int k = 0; k < n; k++)
      srcs[k] = (k == r ? (const char *)o->send : peer_src(m, k, j)) + s * es;
    zinc_mpi_reduce_ranks(recv + s * es, srcs, n, len, o->dtype, o->op);
    break;
  }
  case ZINC_COLL_ALLGATHER:
    for (int k = 0; k < n; k++) {
      const char *src = k == r ? (const char *)o->send : peer_src(m, k, j);
      char *dst = recv + (size_t)k * o->count * es;
      if (dst != src)
        memmove(dst, src, o->count * es);
    }
    break;
  case ZINC_COLL_ALLGATHERV:
    for (int k = 0; k < n; k++) {
      if (!o->counts[k])
        continue;
      const char *src = k == r ? (const char *)o->send : peer_src(m, k, j);
      char *dst = recv + o->displs[k] * es;
      if (dst != src)
        memmove(dst, src, o->counts[k] * es);
    }
    break;
  case ZINC_COLL_BROADCAST:
    if (r != o->root)
      memcpy(recv, peer_src(m, o->root, j), o->count * es);
    break;
  case ZINC_COLL_BARRIER:
  case ZINC_COLL_ALLTOALLV: /* never here: zinc_mpi_execute runs it on the p2p path */
    break;
  }
}

/* All-reduce, second phase: copy the other ranks' reduced slices. */
static void direct_phase_b(zinc_mpi *m, const zinc_coll *o, int j) {
  const size_t es = zinc_dt_size(o->dtype);
  for (int k = 0; k < m->size; k++) {
    if (k == m->rank)
      continue;
    size_t s = zinc_slice_start(o->count, m->size, k);
    size_t len = zinc_slice_start(o->count, m->size, k + 1) - s;
    memcpy((char *)o->recv + s * es, peer_dst(m, k, j) + s * es, len * es);
  }
}

/* The comms logger's wire count on this path. Nothing is sent: peers read
 * this rank's memory (its buffers in place, or its scratch segment where
 * they are staged). The rule: every byte of this rank's data that peer k
 * reads counts as sent by this rank to k (intra- or inter-node by
 * zinc_mpi_same_node, as on every path: on this path the peers share the
 * node unless the node table fakes boundaries), so that the counts match
 * what the p2p path sends
 * for the same op. Staging changes where peers read, not what, so one
 * count per op serves both ways of running it. */
static void count_peer_reads(zinc_mpi *m, const zinc_coll *o) {
  if (!m->pub->log)
    return;
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype);
  for (int k = 0; k < n; k++) {
    if (k == r)
      continue;
    size_t bytes = 0;
    switch (o->kind) {
    case ZINC_COLL_REDUCE_SCATTER: /* k sums my slice k */
    case ZINC_COLL_ALLGATHER:      /* k copies my part */
      bytes = o->count * es;
      break;
    case ZINC_COLL_ALLREDUCE: /* k sums my slice k, then copies my reduced slice */
      bytes = (zinc_slice_start(o->count, n, k + 1) - zinc_slice_start(o->count, n, k) +
               zinc_slice_start(o->count, n, r + 1) - zinc_slice_start(o->count, n, r)) * es;
      break;
    case ZINC_COLL_ALLGATHERV:
      bytes = o->counts[r] * es;
      break;
    case ZINC_COLL_BROADCAST:
      bytes = r == o->root ? o->count * es : 0;
      break;
    case ZINC_COLL_BARRIER:
    case ZINC_COLL_ALLTOALLV: /* never here: the p2p path counts what it sends */
      break;
    }
    if (bytes)
      zinc_mpi_count_wire(m, o->kind, k, bytes);
  }
}

/* Run ops [from, to) (none staged) together, then barrier. */
static zinc_status run_direct(zinc_mpi *m, const zinc_coll *colls, int from, int to) {
  int any_allreduce = 0;
  for (int j = from; j < to; j++) {
    direct_phase_a(m, &colls[j], j);
    count_peer_reads(m, &colls[j]);
    any_allreduce |= colls[j].kind == ZINC_COLL_ALLREDUCE && colls[j].count > 0;
  }
  if (any_allreduce) {
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "all-reduce (reduced slices ready)"));
    for (int j = from; j < to; j++)
      if (colls[j].kind == ZINC_COLL_ALLREDUCE && colls[j].count > 0)
        direct_phase_b(m, &colls[j], j);
  }
  return zinc_mpi_shm_barrier(m, "end of batch (buffers released)");
}

/* ------------------------------------------- ops staged through scratch */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
/* Elements of a length-`len` range left from `a`, at most `cap`. */
static size_t piece_len(size_t len, size_t a, size_t cap) {
  return a >= len ? 0 : min_sz(len - a, cap);
}

static zinc_status staged_reduce_scatter(zinc_mpi *m, const zinc_coll *o, int j) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype), cap = m->scratch_bytes / ((size_t)n * es);
  const int me_staged = src_staged(m, o, j, r);
  const char *send = o->send;
  const void *srcs[n];
  for (size_t a = 0; a < o->count; a += cap) {
    size_t len = min_sz(cap, o->count - a);
    if (me_staged) /* the slices peers sum; this rank reads its own in place */
      for (int q = 0; q < n; q++)
        if (q != r)
          memcpy(m->scratch[r] + (size_t)q * len * es, send + ((size_t)q * o->count + a) * es,
                 len * es);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "reduce-scatter (staged piece ready)"));
    for (int k = 0; k < n; k++)
      srcs[k] = k != r && src_staged(m, o, j, k) ? m->scratch[k] + (size_t)r * len * es
                : (k == r ? send : peer_src(m, k, j)) + ((size_t)r * o->count + a) * es;
    zinc_mpi_reduce_ranks((char *)o->recv + a * es, srcs, n, len, o->dtype, ZINC_OP_SUM);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "reduce-scatter (staged piece consumed)"));
  }
  return ZINC_OK;
}

/* All-gather, all-gatherv and broadcast: data movement, piece by piece. */
static zinc_status staged_gather(zinc_mpi *m, const zinc_coll *o, int j) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype), cap = m->scratch_bytes / es;
  size_t len_of[n], dst_of[n]; /* each rank's contribution and where it lands */
  size_t longest = 0;
  for (int k = 0; k < n; k++) {
    switch (o->kind) {
    case ZINC_COLL_ALLGATHERV: len_of[k] = o->counts[k]; dst_of[k] = o->displs[k]; break;
    case ZINC_COLL_BROADCAST: len_of[k] = k == o->root ? o->count : 0; dst_of[k] = 0; break;
    default: len_of[k] = o->count; dst_of[k] = (size_t)k * o->count; break;
    }
    longest = len_of[k] > longest ? len_of[k] : longest;
  }
  const char *mine = src_ptr(o);
  for (size_t a = 0; a < longest; a += cap) {
    size_t my_len = piece_len(len_of[r], a, cap);
    if (my_len && src_staged(m, o, j, r))
      memcpy(m->scratch[r], mine + a * es, my_len * es);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "gather (staged piece ready)"));
    for (int k = 0; k < n; k++) {
      size_t len = piece_len(len_of[k], a, cap);
      if (!len)
        continue;
      char *dst = (char *)o->recv + (dst_of[k] + a) * es;
      const char *src = k == r ? mine + a * es
                        : src_staged(m, o, j, k) ? m->scratch[k]
                                                 : peer_src(m, k, j) + a * es;
      if (dst != src)
        memmove(dst, src, len * es);
    }
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "gather (staged piece consumed)"));
  }
  return ZINC_OK;
}

/* All-reduce in pieces: scratch holds n staged send pieces of `cap`
 * elements (one per slice) and then this rank's reduced piece. */
static zinc_status staged_allreduce(zinc_mpi *m, const zinc_coll *o, int j) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype), cap = m->scratch_bytes / ((size_t)(n + 1) * es);
  const int me_staged = src_staged(m, o, j, r);
  const char *send = o->send;
  char *recv = o->recv;
  const void *srcs[n];
  size_t start[n + 1];
  for (int k = 0; k <= n; k++)
    start[k] = zinc_slice_start(o->count, n, k);
  for (size_t a = 0; a < start[1]; a += cap) { /* slice 0 is the longest */
    if (me_staged)
      for (int q = 0; q < n; q++)
        if (q != r)
          memcpy(m->scratch[r] + (size_t)q * cap * es, send + (start[q] + a) * es,
                 piece_len(start[q + 1] - start[q], a, cap) * es);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "all-reduce (staged piece ready)"));
    size_t my_len = piece_len(start[r + 1] - start[r], a, cap);
    for (int k = 0; k < n; k++)
      srcs[k] = k != r && src_staged(m, o, j, k) ? m->scratch[k] + (size_t)r * cap * es
                : (k == r ? send : peer_src(m, k, j)) + (start[r] + a) * es;
    char *reduced = m->scratch[r] + (size_t)n * cap * es;
    zinc_mpi_reduce_ranks(reduced, srcs, n, my_len, o->dtype, o->op);
    memcpy(recv + (start[r] + a) * es, reduced, my_len * es);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "all-reduce (reduced piece ready)"));
    for (int k = 0; k < n; k++)
      if (k != r)
        memcpy(recv + (start[k] + a) * es, m->scratch[k] + (size_t)n * cap * es,
               piece_len(start[k + 1] - start[k], a, cap) * es);
    ZINC_CHECK(zinc_mpi_shm_barrier(m, "all-reduce (reduced piece consumed)"));
  }
  return ZINC_OK;
}

static zinc_status run_staged(zinc_mpi *m, const zinc_coll *o, int j) {
  count_peer_reads(m, o);
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER: return staged_reduce_scatter(m, o, j);
  case ZINC_COLL_ALLREDUCE: return staged_allreduce(m, o, j);
  default: return staged_gather(m, o, j);
  }
}

/* ------------------------------------------------------------------ batch */

static zinc_status run_chunk(zinc_mpi *m, const zinc_coll *colls, int n) {
  zinc_mpi_shm_desc *mine = m->ctl[m->rank]->desc;
  for (int j = 0; j < n; j++)
    publish(m, &colls[j], needs_fence(m, colls, j), &mine[j]);
  ZINC_CHECK(zinc_mpi_shm_barrier(m, "batch descriptors published"));
  for (int j = 0; j < n; j++) {
    zinc_status st = check_same(m, &colls[j], j);
    if (st != ZINC_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", zinc_last_error());
      ZINC_CHECK(zinc_mpi_shm_barrier(m, "batch rejected"));
      return zinc_error(st, "%s", msg);
    }
  }
  int seg = 0;            /* ops [seg, j) wait to run together */
  int barrier_owed = 1;   /* descriptors were read since the last barrier */
  for (int j = 0; j < n; j++) {
    int staged = op_staged(m, &colls[j], j);
    int fence = 0;
    for (int k = 0; k < m->size; k++)
      fence |= m->ctl[k]->desc[j].fence;
    if ((staged || fence) && seg < j) {
      ZINC_CHECK(run_direct(m, colls, seg, j));
      seg = j;
    }
    if (staged) {
      ZINC_CHECK(run_staged(m, &colls[j], j));
      seg = j + 1;
      barrier_owed = 0; /* the staged rounds end with a barrier */
    } else {
      barrier_owed = 1;
    }
  }
  if (seg < n || barrier_owed)
    ZINC_CHECK(run_direct(m, colls, seg, n));
  return ZINC_OK;
}

zinc_status zinc_mpi_shm_run(zinc_mpi *m, const zinc_coll *colls, int n) {
  for (int from = 0; from < n; from += ZINC_SHM_MAX_BATCH) {
    int len = n - from < ZINC_SHM_MAX_BATCH ? n - from : ZINC_SHM_MAX_BATCH;
    zinc_status st = run_chunk(m, colls + from, len);
    if (st != ZINC_OK) {
      char what[96];
      zinc_mpi_describe(&colls[from], what, sizeof what);
      return zinc_error_wrap(st, "%s%s", what, len > 1 ? " (first of a batch)" : "");
    }
  }
  return ZINC_OK;
}
