/*
 * comm_mpi_hier.c — node-aware collectives of the mpi comm, for ranks on
 * several nodes that each hold ppn ranks (a power of two > 1) as a
 * contiguous block: rank r = node * ppn + local. Two child comms do the
 * moving, run by the thread that runs this comm's batch:
 *
 *   intra  the node's ppn ranks, shared-memory path (comm_mpi_shmcoll.c)
 *   inter  the ranks of this local index on every node (nodes ranks),
 *          point-to-point path (comm_mpi_p2p.c): all local indices of a
 *          node exchange between nodes in parallel
 *
 * Reduce-scatter (count c): local rank i first sums, over shared memory and
 * in tree order over its node's ranks, the slices k * ppn + i of every node
 * k (one intra reduce-scatter per node, in one batch), then the inter comm
 * reduce-scatters those node partials: the owner of slice b * ppn + i adds
 * the nodes' partials in tree order over nodes. Each rank sends
 * (nodes - 1) * c elements across nodes, where the flat path sends
 * (nodes - 1) * ppn * c.
 * All-gather: between nodes first (an inter all-gatherv that puts each
 * node's piece straight at its place in recv), then inside the node (one
 * in-place intra all-gather per node).
 * All-reduce (sums of at least HIER_SPLIT_BYTES): reduce-scatter of the
 * part divisible by the rank count into recv, all-gather in place, and the
 * last (count mod size) elements as a small one. Small all-reduces and
 * max/min: an intra all-reduce, then an inter all-reduce of the node
 * results (each rank exchanges the whole vector, but in two steps of
 * latency). All-gatherv, broadcast and barrier take the flat p2p path.
 *
 * Bits: ppn is a power of two and nodes start at multiples of it, so every
 * node is a subtree of the canonical tree over ranks (comm.h) and the tree
 * over nodes of node subtrees is that tree: results equal the shm and p2p
 * paths' bit for bit. bf16/f16 are widened to fp32 before the node step
 * and the node partials cross nodes in fp32 (twice the bytes of the 16-bit
 * data), so the result is rounded once, after the last addition, whatever
 * the layout.
 *
 * Failure: the children's waits are bounded by the same timeout as this
 * comm's, give up when this comm is aborted (parent_abort: a timed-out
 * wait on a started batch), and name ranks by this comm's names
 * (rank_names). The rank waited for between nodes may itself be stuck
 * at its node barrier behind the lost rank, which then only its node can
 * name: a node barrier past its deadline sends the other nodes a note
 * saying whom it waits for (note_to), and a wait between nodes that times
 * out gives such a note, or the failure of a node peer here (node_peers),
 * half the barrier's grace to come, and repeats it. When a
 * child fails, this comm and the other child are failed too, so the node's
 * peers stop at their next node barrier instead of waiting out the
 * timeout, and destroy skips the collective frees.
 *
 * Wire accounting (zinc_mpi_count_wire): the owner of the bytes counts
 * them, as sent to the peer that receives them — a p2p message's sender,
 * or, inside the node, the rank whose buffer a node peer reads (what it
 * would have sent). Counted once per collective from its shapes, here,
 * not in the children. A split all-reduce's reduce-scatter and all-gather
 * count as all-reduce (the logger shares a kind's bytes among the batch's
 * ops of that kind).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_mpi_impl.h"
#include "kernels/zinc_math.h"

/* All-reduces of sums at least this large are split into reduce-scatter
 * and all-gather (ppn times fewer bytes across nodes, one more step). */
#define HIER_SPLIT_BYTES (64u << 10)

zinc_status zinc_mpi_hier_setup(zinc_mpi *m) {
  const int ppn = m->ppn, node = m->rank / ppn, local = m->rank % ppn;
  int names[m->size];
  MPI_Comm node_comm, cross_comm;
  int rc = MPI_Comm_split(m->comm, node, m->rank, &node_comm);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Comm_split into nodes (node-aware path)", -1);
  for (int j = 0; j < ppn; j++)
    names[j] = node * ppn + j;
  ZINC_CHECK(zinc_mpi_create_child(m, node_comm, 1, names, &m->intra));
  rc = MPI_Comm_split(m->comm, local, m->rank, &cross_comm);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Comm_split across nodes (node-aware path)", -1);
  for (int k = 0; k < m->nodes; k++)
    names[k] = k * ppn + local;
  ZINC_CHECK(zinc_mpi_create_child(m, cross_comm, 0, names, &m->inter));
  zinc_mpi_of(m->inter)->node_peers = zinc_mpi_of(m->intra);
  zinc_mpi_of(m->intra)->note_to = zinc_mpi_of(m->inter);
  if (!zinc_mpi_of(m->intra)->use_shm)
    return zinc_error(ZINC_ERR_COMM, "comm mpi: node-aware path: the %d ranks of node %d "
                      "do not share memory; set ZINC_COMM_NODE_SIZE to a divisor of the "
                      "ranks per real node, or unset it", ppn, node);
  return ZINC_OK;
}

void zinc_mpi_hier_teardown(zinc_mpi *m, int failed) {
  if (m->inter) /* it reads the intra child's peers, freed first */
    zinc_mpi_of(m->inter)->node_peers = NULL;
  if (m->intra)
    zinc_mpi_of(m->intra)->note_to = NULL;
  zinc_comm *kids[2] = {m->intra, m->inter};
  for (int i = 0; i < 2; i++) {
    if (!kids[i])
      continue;
    if (failed) /* a peer may never join the collective frees: skip them */
      atomic_store(&zinc_mpi_of(kids[i])->abort, 1);
    zinc_comm_destroy(kids[i]);
  }
  m->intra = m->inter = NULL;
  free(m->hier_tmp);
  m->hier_tmp = NULL;
  m->hier_tmp_bytes = 0;
}

/* ------------------------------------------------------------- helpers */

/* Run a batch on a child; a child's failure fails this comm and the other
 * child (the node's peers then stop at their next node barrier). */
static zinc_status child_run(zinc_mpi *m, zinc_comm *child, const zinc_coll *colls, int n) {
  zinc_mpi *c = zinc_mpi_of(child);
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, zinc_coll_name(colls[0].kind));
  c->in_worker = m->in_worker;
  zinc_status st = zinc_mpi_execute(c, colls, n);
  if (st != ZINC_OK && atomic_load(&c->abort)) {
    zinc_mpi_fail(m); /* and the intra child (zinc_mpi_fail) */
    zinc_mpi_fail(zinc_mpi_of(m->inter));
  }
  return st;
}

static zinc_status tmp_reserve(zinc_mpi *m, size_t bytes) {
  if (bytes <= m->hier_tmp_bytes)
    return ZINC_OK;
  free(m->hier_tmp);
  m->hier_tmp = NULL;
  m->hier_tmp_bytes = 0;
  ZINC_CHECK(zinc_aligned_alloc((void **)&m->hier_tmp, 64, zinc_round_up(bytes, 64),
                                "comm mpi node-aware partials"));
  m->hier_tmp_bytes = zinc_round_up(bytes, 64);
  return ZINC_OK;
}

static int is_half(int dtype) { return dtype == ZINC_BF16 || dtype == ZINC_F16; }

static void widen(float *dst, const void *src, size_t count, int dtype) {
  for (size_t j = 0; j < count; j++)
    dst[j] = zinc_load_as_f32(src, (int64_t)j, dtype == ZINC_BF16 ? 1 : 2);
}

/* ------------------------------------------------------- collectives */

/* send: size * count elements; recv: count (may be send + rank * count).
 * kind: what its wire bytes count as (an all-reduce's first half too). */
static zinc_status reduce_scatter(zinc_mpi *m, const void *send, void *recv, size_t count,
                                  int dtype, zinc_coll_kind kind) {
  const int ppn = m->ppn, nodes = m->nodes, node = m->rank / ppn, local = m->rank % ppn;
  const int half = is_half(dtype), wdt = half ? ZINC_F32 : dtype;
  const size_t wes = zinc_dt_size(wdt), n = (size_t)m->size;
  if (count == 0)
    return ZINC_OK;
  /* hier_tmp: [node partials (nodes * count) | my reduced slice (count) |
   * the widened send (size * count), 16-bit only], elements of wdt */
  size_t part_bytes = (size_t)nodes * count * wes;
  ZINC_CHECK(tmp_reserve(m, part_bytes + count * wes + (half ? n * count * wes : 0)));
  char *part = m->hier_tmp, *mine = part + part_bytes, *wide = mine + count * wes;
  const char *src = send;
  if (half) {
    widen((float *)wide, send, n * count, dtype);
    src = wide;
  }
  zinc_coll node_ops[nodes];
  for (int k = 0; k < nodes; k++)
    node_ops[k] = (zinc_coll){.kind = ZINC_COLL_REDUCE_SCATTER,
                              .send = src + (size_t)k * ppn * count * wes,
                              .recv = part + (size_t)k * count * wes,
                              .count = count, .dtype = wdt};
  ZINC_CHECK(child_run(m, m->intra, node_ops, nodes));
  for (int j = 0; j < ppn; j++) /* node peer j read my slices k * ppn + j */
    if (j != local)
      zinc_mpi_count_wire(m, kind, node * ppn + j, (size_t)nodes * count * wes);
  zinc_coll cross = {.kind = ZINC_COLL_REDUCE_SCATTER, .send = part,
                     .recv = half ? (void *)mine : recv, .count = count, .dtype = wdt};
  ZINC_CHECK(child_run(m, m->inter, &cross, 1));
  for (int k = 0; k < nodes; k++)
    if (k != node)
      zinc_mpi_count_wire(m, kind, k * ppn + local, count * wes);
  if (half) {
    const void *one = mine;
    zinc_mpi_reduce_wide(recv, 0, &one, 1, 1, count, dtype, ZINC_OP_SUM); /* round once */
  }
  return ZINC_OK;
}

/* send: count elements (may be recv + rank * count); recv: size * count. */
static zinc_status all_gather(zinc_mpi *m, const void *send, void *recv, size_t count,
                              int dtype, zinc_coll_kind kind) {
  const int ppn = m->ppn, nodes = m->nodes, node = m->rank / ppn, local = m->rank % ppn;
  const size_t es = zinc_dt_size(dtype);
  if (count == 0)
    return ZINC_OK;
  size_t counts[nodes], displs[nodes];
  for (int k = 0; k < nodes; k++) {
    counts[k] = count;
    displs[k] = ((size_t)k * ppn + local) * count;
  }
  zinc_coll cross = {.kind = ZINC_COLL_ALLGATHERV, .send = send, .recv = recv, .count = count,
                     .dtype = dtype, .counts = counts, .displs = displs};
  ZINC_CHECK(child_run(m, m->inter, &cross, 1));
  for (int k = 0; k < nodes; k++)
    if (k != node)
      zinc_mpi_count_wire(m, kind, k * ppn + local, count * es);
  zinc_coll node_ops[nodes];
  char *out = recv;
  for (int k = 0; k < nodes; k++)
    node_ops[k] = (zinc_coll){.kind = ZINC_COLL_ALLGATHER,
                              .send = out + displs[k] * es,
                              .recv = out + (size_t)k * ppn * count * es,
                              .count = count, .dtype = dtype};
  ZINC_CHECK(child_run(m, m->intra, node_ops, nodes));
  for (int j = 0; j < ppn; j++) /* node peer j read my piece of every node */
    if (j != local)
      zinc_mpi_count_wire(m, kind, node * ppn + j, (size_t)nodes * count * es);
  return ZINC_OK;
}

/* Bytes an all-reduce of `count` over `ranks` ranks sends from rank `me` to
 * rank `to` (slice `to` of its data, then its own reduced slice). */
static size_t allreduce_bytes(size_t count, int ranks, int me, int to, size_t es) {
  size_t to_len = zinc_slice_start(count, ranks, to + 1) - zinc_slice_start(count, ranks, to);
  size_t my_len = zinc_slice_start(count, ranks, me + 1) - zinc_slice_start(count, ranks, me);
  return (to_len + my_len) * es;
}

/* Node all-reduce, then an all-reduce of the node results between nodes. */
static zinc_status all_reduce_small(zinc_mpi *m, const void *send, void *recv, size_t count,
                                    int dtype, zinc_comm_op op) {
  const int ppn = m->ppn, nodes = m->nodes, node = m->rank / ppn, local = m->rank % ppn;
  const int half = is_half(dtype), wdt = half ? ZINC_F32 : dtype;
  const size_t wes = zinc_dt_size(wdt);
  if (count == 0)
    return ZINC_OK;
  void *acc = recv;
  if (half) { /* the node results cross nodes in fp32; one rounding at the end */
    ZINC_CHECK(tmp_reserve(m, count * wes));
    acc = m->hier_tmp;
    widen(acc, send, count, dtype);
    send = acc;
  }
  zinc_coll in_node = {.kind = ZINC_COLL_ALLREDUCE, .send = send, .recv = acc, .count = count,
                       .dtype = wdt, .op = op};
  ZINC_CHECK(child_run(m, m->intra, &in_node, 1));
  for (int j = 0; j < ppn; j++)
    if (j != local)
      zinc_mpi_count_wire(m, ZINC_COLL_ALLREDUCE, node * ppn + j,
                          allreduce_bytes(count, ppn, local, j, wes));
  zinc_coll cross = {.kind = ZINC_COLL_ALLREDUCE, .send = acc, .recv = acc, .count = count,
                     .dtype = wdt, .op = op};
  ZINC_CHECK(child_run(m, m->inter, &cross, 1));
  for (int k = 0; k < nodes; k++)
    if (k != node)
      zinc_mpi_count_wire(m, ZINC_COLL_ALLREDUCE, k * ppn + local,
                          allreduce_bytes(count, nodes, node, k, wes));
  if (half) {
    const void *one = acc;
    zinc_mpi_reduce_wide(recv, 0, &one, 1, 1, count, dtype, op);
  }
  return ZINC_OK;
}

static zinc_status all_reduce(zinc_mpi *m, const zinc_coll *o) {
  const size_t es = zinc_dt_size(o->dtype), n = (size_t)m->size;
  const size_t per = o->count / n, body = per * n;
  if (o->op != ZINC_OP_SUM || o->count * es < HIER_SPLIT_BYTES || per == 0)
    return all_reduce_small(m, o->send, o->recv, o->count, o->dtype, o->op);
  char *recv = o->recv;
  char *slice = recv + (size_t)m->rank * per * es;
  /* in place (send == recv) is safe: the node step has read every rank's
   * send before the cross-node step writes the slice */
  ZINC_CHECK(reduce_scatter(m, o->send, slice, per, o->dtype, ZINC_COLL_ALLREDUCE));
  ZINC_CHECK(all_gather(m, slice, recv, per, o->dtype, ZINC_COLL_ALLREDUCE));
  return all_reduce_small(m, (const char *)o->send + body * es, recv + body * es,
                          o->count - body, o->dtype, o->op);
}

zinc_status zinc_mpi_hier_run(zinc_mpi *m, const zinc_coll *colls, int n) {
  for (int j = 0; j < n; j++) {
    const zinc_coll *o = &colls[j];
    if (atomic_load(&m->abort))
      return zinc_mpi_failed_earlier(m, zinc_coll_name(o->kind));
    zinc_status st = ZINC_OK;
    switch (o->kind) {
    case ZINC_COLL_REDUCE_SCATTER:
      st = reduce_scatter(m, o->send, o->recv, o->count, o->dtype, o->kind);
      break;
    case ZINC_COLL_ALLGATHER:
      st = all_gather(m, o->send, o->recv, o->count, o->dtype, o->kind);
      break;
    case ZINC_COLL_ALLREDUCE:
      st = all_reduce(m, o);
      break;
    default:
      st = zinc_mpi_p2p_run(m, o, 1);
      break;
    }
    if (st != ZINC_OK) {
      char what[96];
      zinc_mpi_describe(o, what, sizeof what);
      return zinc_error_wrap(st, "%s (node-aware path, %d nodes of %d ranks)", what, m->nodes,
                             m->ppn);
    }
  }
  return ZINC_OK;
}
