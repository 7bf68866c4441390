/*
 * comm_mpi_p2p.c — collectives of the mpi comm over point-to-point
 * messages, for ranks that do not share a node (or when shared memory is
 * switched off with ZINC_COMM_MPI_SHM=0, which is how tests fake several
 * nodes). Slower than the shared-memory path, and bitwise the same:
 *
 *  - reduce-scatter / all-reduce: gather-to-owner. Every rank sends each
 *    peer that peer's slice, piece by piece; the owner sums the pieces of
 *    ranks 0..n-1 in the canonical tree order with zinc_mpi_reduce_ranks. Each rank sends and
 *    receives (n-1)/n of the buffer, as a ring would.
 *  - all-reduce adds a second step that gathers the reduced slices.
 *  - all-gather(v), broadcast: every rank sends its part to every peer.
 *  - all-to-all-v: every rank sends each peer its counts[peer] elements
 *    and receives rcounts[peer] from it; its own part is a local copy.
 *    This path also runs the all-to-all-v of a comm whose ranks share
 *    memory (zinc_mpi_execute routes them here).
 *  - barrier: dissemination (log2(n) rounds of one-byte tokens); not
 *    MPI_Ibarrier, which can be neither cancelled nor freed when a peer is
 *    lost, and keeps progressing on a freed communicator.
 *
 * Every message sent is counted (zinc_mpi_count_wire) as the rank posts
 * it, barrier tokens included. Every message received must be as long as
 * the receive posted for it: ranks that disagree on the counts fail.
 *
 * Messages are at most p2p_chunk_bytes (so counts fit MPI's int) and use one
 * tag for data and one for barrier tokens; MPI's non-overtaking rule keeps
 * the pieces of consecutive ops apart, since every rank posts them in the
 * same order. The tags carry a nonce drawn at creation: messages left
 * behind by a failed comm (cancelled receives) must not match in a later
 * comm that MPI gives the same context id. Completion is polled
 * (MPI_Testall, yielding the core between polls) so that the comm's
 * deadline and abort flag are honoured: a lost peer ends in ZINC_ERR_COMM
 * naming every peer whose messages had not completed, never in a hang.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "comm/comm_mpi_impl.h"

#define P2P_POLLS_BEFORE_YIELD 64

zinc_status zinc_mpi_p2p_setup(zinc_mpi *m) {
  long long chunk = zinc_env_int("ZINC_COMM_P2P_CHUNK", ZINC_P2P_CHUNK_DEFAULT, 64, LLONG_MAX);
  if (chunk > (1 << 30))
    chunk = 1 << 30;
  m->p2p_chunk_bytes = (size_t)chunk / 8 * 8;
  /* Tags: ZINC_MPI_NTAGS * nonce + ZINC_TAG_* (comm_mpi_impl.h): data,
   * barrier tokens, the node-aware path's notes (zinc_mpi_p2p_note), and
   * the transfers' (comm_mpi_xfer.c). */
  int *tag_ub = NULL, flag = 0;
  MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &tag_ub, &flag);
  int nonces = (flag && tag_ub && *tag_ub > ZINC_MPI_NTAGS) ? *tag_ub / ZINC_MPI_NTAGS
                                                            : 32767 / ZINC_MPI_NTAGS;
  int nonce = (int)((uint64_t)(zinc_now() * 1e9) % (uint64_t)nonces);
  int rc = MPI_Bcast(&nonce, 1, MPI_INT, 0, m->comm);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Bcast of the message tag nonce", 0);
  m->p2p_tag = ZINC_MPI_NTAGS * nonce;
  ZINC_CHECK(zinc_calloc((void **)&m->p2p_reqs, 2 * (size_t)m->size, sizeof *m->p2p_reqs,
                         "comm mpi p2p requests"));
  ZINC_CHECK(zinc_calloc((void **)&m->p2p_peer, 2 * (size_t)m->size, sizeof *m->p2p_peer,
                         "comm mpi p2p request peers"));
  ZINC_CHECK(zinc_calloc((void **)&m->p2p_expect, 2 * (size_t)m->size, sizeof *m->p2p_expect,
                         "comm mpi p2p receive sizes"));
  if (m->use_shm) /* only all-to-all-v comes here, and it receives in place */
    return ZINC_OK;
  return zinc_aligned_alloc((void **)&m->p2p_tmp, 64, (size_t)m->size * m->p2p_chunk_bytes,
                            "comm mpi p2p receive pieces");
}

void zinc_mpi_p2p_teardown(zinc_mpi *m) {
  free(m->p2p_reqs);
  free(m->p2p_peer);
  free(m->p2p_expect);
  free(m->p2p_tmp);
  m->p2p_reqs = NULL;
  m->p2p_peer = NULL;
  m->p2p_expect = NULL;
  m->p2p_tmp = NULL;
}

/* ------------------------------------------------------------- messages */

typedef struct {
  zinc_mpi *m;
  zinc_coll_kind kind; /* the collective, for the comms logger's counts */
  int n;               /* requests posted */
  const char *what;
  const char *suspects; /* said after the peer on a timeout, or NULL */
} p2p_batch;

static zinc_status post_tagged(p2p_batch *b, int is_send, void *buf, size_t bytes, int peer,
                               int tag) {
  zinc_mpi *m = b->m;
  int rc = is_send ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm, &m->p2p_reqs[b->n])
                   : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, m->comm, &m->p2p_reqs[b->n]);
  if (rc != MPI_SUCCESS) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s: %s of %zu bytes", b->what, is_send ? "MPI_Isend" : "MPI_Irecv",
             bytes);
    return zinc_mpi_error(rc, ctx, peer);
  }
  m->p2p_expect[b->n] = is_send ? SIZE_MAX : bytes;
  m->p2p_peer[b->n++] = peer;
  if (is_send)
    zinc_mpi_count_wire(m, b->kind, peer, bytes);
  return ZINC_OK;
}

/* A data piece; empty pieces are not sent. */
static zinc_status post(p2p_batch *b, int is_send, void *buf, size_t bytes, int peer) {
  return bytes ? post_tagged(b, is_send, buf, bytes, peer, b->m->p2p_tag) : ZINC_OK;
}

void zinc_mpi_p2p_note(zinc_mpi *m, const char *text) {
  for (int k = 0; k < m->size; k++) {
    if (k == m->rank)
      continue;
    MPI_Request req; /* small: delivered eagerly; `text` lives with the comm */
    if (MPI_Isend(text, (int)strlen(text) + 1, MPI_CHAR, k, m->p2p_tag + ZINC_TAG_NOTE,
                  m->comm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

/* A note (zinc_mpi_p2p_note) that has arrived, into `out`; its sender
 * (named by zinc_mpi_rank_name), or -1 when none has. */
static int take_note(zinc_mpi *m, char *out, size_t len) {
  int flag = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, m->p2p_tag + ZINC_TAG_NOTE, m->comm, &flag, &status) !=
          MPI_SUCCESS ||
      !flag)
    return -1;
  char note[sizeof m->note_out] = "";
  if (MPI_Recv(note, (int)sizeof note, MPI_CHAR, status.MPI_SOURCE,
               m->p2p_tag + ZINC_TAG_NOTE, m->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return -1;
  note[sizeof note - 1] = '\0';
  snprintf(out, len, "%s", note);
  return zinc_mpi_rank_name(m, status.MPI_SOURCE);
}

/* Give up on posted requests: cancel and release them. */
static void abandon(p2p_batch *b) {
  for (int i = 0; i < b->n; i++) {
    if (b->m->p2p_reqs[i] == MPI_REQUEST_NULL)
      continue;
    MPI_Cancel(&b->m->p2p_reqs[i]);
    MPI_Request_free(&b->m->p2p_reqs[i]);
  }
  b->n = 0;
}

/* The peers of the posted requests that have not completed, in rank order
 * ("2,3"), and how many. MPI_Testall leaves every request alone when any
 * is pending, so each is asked on its own (without freeing it): a rank
 * whose messages all arrived is not named, whatever its place in the list. */
static int pending_peers(p2p_batch *b, char *out, size_t len) {
  zinc_mpi *m = b->m;
  int count = 0;
  size_t used = 0;
  out[0] = '\0';
  for (int peer = 0; peer < m->size; peer++) {
    int pending = 0;
    for (int i = 0; i < b->n && !pending; i++) {
      int flag = 1;
      if (m->p2p_peer[i] == peer && m->p2p_reqs[i] != MPI_REQUEST_NULL)
        MPI_Request_get_status(m->p2p_reqs[i], &flag, MPI_STATUS_IGNORE);
      pending = !flag;
    }
    if (pending && used + 16 < len) {
      used += (size_t)snprintf(out + used, len - used, "%s%d", count ? "," : "",
                               zinc_mpi_rank_name(m, peer));
      count++;
    }
  }
  if (count == 0)
    snprintf(out, len, "unknown (every message had completed)");
  return count;
}

/* Every receive got the bytes it was posted for: a shorter message means
 * the ranks disagree on the counts (an all-to-all-v's, typically), which
 * would otherwise pass silently (a longer one fails as truncated). The
 * pieces that follow would no longer line up: the comm fails. */
static zinc_status check_lengths(p2p_batch *b, MPI_Status *stats, int n) {
  zinc_mpi *m = b->m;
  for (int i = 0; i < n; i++) {
    if (m->p2p_expect[i] == SIZE_MAX)
      continue;
    int got = 0;
    MPI_Get_count(&stats[i], MPI_BYTE, &got);
    if ((size_t)got == m->p2p_expect[i])
      continue;
    zinc_status st = zinc_error(ZINC_ERR_COMM,
                                "comm mpi: %s: rank %d sent a piece of %d bytes where this rank "
                                "(%d) expected %zu: the ranks disagree on the counts (an "
                                "all-to-all-v's rcounts[%d] here must equal counts[%d] there); "
                                "the comm is unusable, destroy it",
                                b->what, zinc_mpi_rank_name(m, m->p2p_peer[i]), got,
                                zinc_mpi_rank_name(m, m->rank), m->p2p_expect[i],
                                m->p2p_peer[i], m->rank);
    zinc_mpi_fail(m);
    return st;
  }
  return ZINC_OK;
}

/* Poll until every posted request has completed, the deadline passes or
 * the comm is aborted. */
static zinc_status complete(p2p_batch *b) {
  zinc_mpi *m = b->m;
  double deadline = 0;
  MPI_Status stats[2 * m->size];
  for (unsigned poll = 0;; poll++) {
    int flag = 0;
    int rc = MPI_Testall(b->n, m->p2p_reqs, &flag, stats);
    if (rc != MPI_SUCCESS) {
      int peer = -1, err = rc;
      for (int i = 0; rc == MPI_ERR_IN_STATUS && i < b->n; i++)
        if (stats[i].MPI_ERROR != MPI_SUCCESS && stats[i].MPI_ERROR != MPI_ERR_PENDING) {
          peer = m->p2p_peer[i];
          err = stats[i].MPI_ERROR;
          break;
        }
      abandon(b);
      char ctx[160];
      snprintf(ctx, sizeof ctx, "%s: message completion", b->what);
      zinc_status st = zinc_mpi_error(err, ctx, zinc_mpi_rank_name(m, peer));
      zinc_mpi_fail(m);
      return st;
    }
    if (flag) {
      int n = b->n;
      b->n = 0;
      return check_lengths(b, stats, n);
    }
    if (poll % P2P_POLLS_BEFORE_YIELD != P2P_POLLS_BEFORE_YIELD - 1)
      continue;
    sched_yield();
    if (deadline == 0)
      deadline = zinc_mpi_deadline(m);
    if (zinc_mpi_aborted(m) || zinc_now() > deadline) {
      int aborted = zinc_mpi_aborted(m), node_peer = -1, noter = -1;
      char said[600] = "";
      if (!aborted && m->node_peers) {
        /* the node-aware path's step between nodes: the peer waited for may
         * itself be stuck at its node barrier behind the lost rank, which
         * it names in a note when that barrier passes its deadline; or a
         * node peer here, waiting for the lost rank directly, fails naming
         * it. Give either up to half of min(timeout, 2 s) (comm.h), and
         * repeat it: half, so that a node peer waiting at the node barrier
         * for this rank, which gives it the whole, sees this failure. */
        double grace = (m->timeout_s > 0 && m->timeout_s < 2 ? m->timeout_s : 2) / 2;
        noter = take_note(m, said, sizeof said);
        if (noter < 0)
          node_peer = zinc_mpi_shm_failed_peer(m->node_peers, said, sizeof said);
        if (noter < 0 && node_peer < 0 && zinc_now() <= deadline + grace)
          continue;
      }
      char peers[256], meanwhile[700] = "";
      int npeers = pending_peers(b, peers, sizeof peers);
      abandon(b);
      if (noter >= 0)
        snprintf(meanwhile, sizeof meanwhile, "; %s", said);
      else if (node_peer >= 0)
        snprintf(meanwhile, sizeof meanwhile, "; on this node rank %d failed meanwhile: %s",
                 node_peer, said);
      zinc_status st = zinc_error(ZINC_ERR_COMM,
                                  "comm mpi: %s: %s waiting for peer rank%s %s%s%s; the comm is "
                                  "unusable, destroy it",
                                  b->what, aborted ? "abandoned (comm aborted)" : "timed out",
                                  npeers > 1 ? "(s)" : "", peers, b->suspects ? b->suspects : "",
                                  meanwhile);
      zinc_mpi_fail(m);
      return st;
    }
  }
}

/* ------------------------------------------------------------ algorithms */

static size_t piece_len(size_t len, size_t a, size_t cap) {
  return a >= len ? 0 : (len - a < cap ? len - a : cap);
}

/* Rank-ordered reduction of slices: slice q of `send` is elements
 * [start[q], start[q+1]); this rank's reduced slice goes to `out`. */
static zinc_status reduce_slices(zinc_mpi *m, zinc_coll_kind kind, const char *send, char *out,
                                 const size_t *start, int dtype, zinc_comm_op op,
                                 const char *what) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(dtype), cap = m->p2p_chunk_bytes / es;
  size_t longest = 0;
  for (int q = 0; q < n; q++)
    if (start[q + 1] - start[q] > longest)
      longest = start[q + 1] - start[q];
  p2p_batch b = {m, kind, 0, what, NULL};
  const void *srcs[n];
  for (size_t a = 0; a < longest; a += cap) {
    size_t mine = piece_len(start[r + 1] - start[r], a, cap);
    for (int k = 0; k < n; k++)
      if (k != r)
        ZINC_CHECK(post(&b, 0, m->p2p_tmp + (size_t)k * m->p2p_chunk_bytes, mine * es, k));
    for (int q = 0; q < n; q++)
      if (q != r)
        ZINC_CHECK(post(&b, 1, (void *)(send + (start[q] + a) * es),
                        piece_len(start[q + 1] - start[q], a, cap) * es, q));
    ZINC_CHECK(complete(&b));
    for (int k = 0; k < n; k++)
      srcs[k] = k == r ? send + (start[r] + a) * es : m->p2p_tmp + (size_t)k * m->p2p_chunk_bytes;
    zinc_mpi_reduce_ranks(out + a * es, srcs, n, mine, dtype, op);
  }
  return ZINC_OK;
}

/* Rank k's len_of[k] elements land at element dst_of[k] of every rank's
 * recv; this rank's come from `mine`. */
static zinc_status gather(zinc_mpi *m, zinc_coll_kind kind, const char *mine, char *recv,
                          const size_t *len_of, const size_t *dst_of, size_t es,
                          const char *what) {
  const int n = m->size, r = m->rank;
  const size_t cap = m->p2p_chunk_bytes / es;
  size_t longest = 0;
  for (int k = 0; k < n; k++)
    longest = len_of[k] > longest ? len_of[k] : longest;
  if (len_of[r] && recv + dst_of[r] * es != mine)
    memmove(recv + dst_of[r] * es, mine, len_of[r] * es);
  p2p_batch b = {m, kind, 0, what, NULL};
  for (size_t a = 0; a < longest; a += cap) {
    for (int k = 0; k < n; k++)
      if (k != r)
        ZINC_CHECK(post(&b, 0, recv + (dst_of[k] + a) * es, piece_len(len_of[k], a, cap) * es, k));
    size_t my_len = piece_len(len_of[r], a, cap);
    for (int q = 0; q < n; q++)
      if (q != r)
        ZINC_CHECK(post(&b, 1, recv + (dst_of[r] + a) * es, my_len * es, q));
    ZINC_CHECK(complete(&b));
  }
  return ZINC_OK;
}

/* All-to-all-v: the self part is a copy; every peer pair exchanges its
 * counts in pieces of at most p2p_chunk_bytes, piece a of every pair in
 * round a (both sides agree on the counts, so on the rounds of each pair;
 * a rank with shorter lists simply finishes first). */
static zinc_status alltoallv(zinc_mpi *m, const zinc_coll *o, const char *what) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype), cap = m->p2p_chunk_bytes / es;
  const char *send = o->send;
  char *recv = o->recv;
  if (o->counts[r])
    memmove(recv + o->rdispls[r] * es, send + o->displs[r] * es, o->counts[r] * es);
  size_t longest = 0;
  for (int k = 0; k < n; k++) {
    if (k == r)
      continue;
    longest = o->counts[k] > longest ? o->counts[k] : longest;
    longest = o->rcounts[k] > longest ? o->rcounts[k] : longest;
  }
  p2p_batch b = {m, o->kind, 0, what, NULL};
  for (size_t a = 0; a < longest; a += cap) {
    for (int k = 0; k < n; k++)
      if (k != r)
        ZINC_CHECK(post(&b, 0, recv + (o->rdispls[k] + a) * es,
                        piece_len(o->rcounts[k], a, cap) * es, k));
    for (int k = 0; k < n; k++)
      if (k != r)
        ZINC_CHECK(post(&b, 1, (void *)(send + (o->displs[k] + a) * es),
                        piece_len(o->counts[k], a, cap) * es, k));
    ZINC_CHECK(complete(&b));
  }
  return ZINC_OK;
}

static zinc_status run_one(zinc_mpi *m, const zinc_coll *o) {
  const int n = m->size, r = m->rank;
  const size_t es = zinc_dt_size(o->dtype);
  char what[96];
  zinc_mpi_describe(o, what, sizeof what);
  size_t start[n + 1], len_of[n], dst_of[n];
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER:
    for (int k = 0; k <= n; k++)
      start[k] = (size_t)k * o->count;
    return reduce_slices(m, o->kind, o->send, o->recv, start, o->dtype, ZINC_OP_SUM, what);
  case ZINC_COLL_ALLREDUCE:
    for (int k = 0; k <= n; k++)
      start[k] = zinc_slice_start(o->count, n, k);
    for (int k = 0; k < n; k++) {
      len_of[k] = start[k + 1] - start[k];
      dst_of[k] = start[k];
    }
    ZINC_CHECK(reduce_slices(m, o->kind, o->send, (char *)o->recv + start[r] * es, start,
                             o->dtype, o->op, what));
    return gather(m, o->kind, (char *)o->recv + start[r] * es, o->recv, len_of, dst_of, es,
                  what);
  case ZINC_COLL_ALLGATHER:
  case ZINC_COLL_ALLGATHERV:
  case ZINC_COLL_BROADCAST:
    for (int k = 0; k < n; k++) {
      if (o->kind == ZINC_COLL_ALLGATHERV) {
        len_of[k] = o->counts[k];
        dst_of[k] = o->displs[k];
      } else if (o->kind == ZINC_COLL_BROADCAST) {
        len_of[k] = k == o->root ? o->count : 0;
        dst_of[k] = 0;
      } else {
        len_of[k] = o->count;
        dst_of[k] = (size_t)k * o->count;
      }
    }
    return gather(m, o->kind, o->kind == ZINC_COLL_BROADCAST ? o->recv : o->send, o->recv,
                  len_of, dst_of, es, what);
  case ZINC_COLL_ALLTOALLV:
    return alltoallv(m, o, what);
  case ZINC_COLL_BARRIER: {
    p2p_batch b = {m, ZINC_COLL_BARRIER, 0, "barrier", NULL};
    char token_out = 0, token_in[1], suspects[256];
    for (int dist = 1; dist < n; dist *= 2) {
      /* Round `dist` brings rank r - dist's token, sent once ranks
       * r-2*dist+1 .. r-dist have all arrived (the rounds before told it);
       * ranks r-dist+1 .. r are known here. So if the token never comes,
       * one of those is missing: name them all. */
      size_t used = (size_t)snprintf(suspects, sizeof suspects, "; rank(s) ");
      int far = 2 * dist - 1 < n - 1 ? 2 * dist - 1 : n - 1;
      for (int k = 0, first = 1; k < n && used + 16 < sizeof suspects; k++) {
        int back = (r - k + n) % n; /* how far behind r rank k is */
        if (back >= dist && back <= far) {
          used += (size_t)snprintf(suspects + used, sizeof suspects - used, "%s%d",
                                   first ? "" : ",", zinc_mpi_rank_name(m, k));
          first = 0;
        }
      }
      snprintf(suspects + used, sizeof suspects - used, " had not all arrived");
      b.suspects = suspects;
      int tag = m->p2p_tag + ZINC_TAG_BARRIER;
      ZINC_CHECK(post_tagged(&b, 0, token_in, 1, (r - dist + n) % n, tag));
      ZINC_CHECK(post_tagged(&b, 1, &token_out, 1, (r + dist) % n, tag));
      ZINC_CHECK(complete(&b));
    }
    return ZINC_OK;
  }
  }
  return ZINC_OK;
}

zinc_status zinc_mpi_p2p_run(zinc_mpi *m, const zinc_coll *colls, int n) {
  for (int j = 0; j < n; j++) {
    if (atomic_load(&m->abort))
      return zinc_mpi_failed_earlier(m, zinc_coll_name(colls[j].kind));
    ZINC_CHECK(run_one(m, &colls[j]));
  }
  return ZINC_OK;
}
