/*
 * comm_mpi_xfer.c — the mpi comm's transfers (comm.h, "Transfers"):
 * point-to-point messages between two ranks of a comm, posted by the
 * caller's thread at start and polled to completion at wait, on the comm's
 * own MPI communicator and tags of its nonce (comm_mpi_impl.h).
 *
 * Messages of one pair:
 *  - each end sends the other a header (count, dtype, the pair's number,
 *    check_only): the sending end on ZINC_TAG_XFER_HDR_SEND, the receiving
 *    end on ZINC_TAG_XFER_HDR_RECV, so that a rank's sends to a peer and
 *    its receives from it pair apart, whatever order they were started in;
 *  - unless check_only, the data as exactly two messages on
 *    ZINC_TAG_XFER_DATA: its whole MiB blocks (a contiguous type of 1 MiB,
 *    so that the count fits MPI's int up to 2^51 bytes) and the bytes
 *    after them. Two messages whatever the size, on both ends, so that
 *    ends that disagree on the size still pair message for message: the
 *    receiving end sizes its receives by its own count, a longer message
 *    arrives truncated (MPI_ERR_TRUNCATE: MPI completes it and reports
 *    it), a shorter one short, and the headers then say what each end had.
 * MPI's non-overtaking order per (source, tag) pairs the k-th of each.
 *
 * Notes (ZINC_TAG_XFER_NOTE, to every other rank of the comm): W, a wait
 * past its deadline says whom it waits for, and says it again when the
 * peer it waits for names another rank (at most XFER_WAIT_NOTES times a
 * comm); F, a failed transfer (or the destroy of a failed comm that ran
 * transfers) says its failure, once. Each names the rank it holds lost
 * (the peer that never answered, or the one a note named) and carries the
 * first words said about it unchanged, so that a note repeated down a
 * pipeline stays as short as the first. Every wait reads the notes that
 * have arrived and keeps the last of each sender (F over W). A wait
 * repeats a peer's F at once; past its deadline it gives the peers it
 * waits for a grace (comm.h), passing on what their W notes name, and at
 * the grace's end repeats the last W it holds, or names the peer. So down
 * a pipeline whose deadlines pass about together (the ranks started
 * waiting within the grace of each other), every rank names the rank at
 * the end of the chain.
 *
 * Invariants:
 *  - the pair counters (sent, recvd) advance at start on both ends alike,
 *    so headers that disagree on the number mean the pairing broke: the
 *    comm fails;
 *  - only the caller's thread touches the state (comm.h: one thread per
 *    comm issues calls); the worker thread's collectives share the MPI
 *    communicator but no tag with it.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_mpi_impl.h"

#define XFER_BLOCK_SHIFT 20 /* whole blocks of 1 MiB */
#define XFER_POLLS_BEFORE_YIELD 64
#define XFER_NOTE_TEXT 560
#define XFER_WAIT_NOTES 4 /* W notes a comm sends at most */
#define XFER_NOTE_SEND_S 0.1 /* destroy gives a note's sends this long */

/* The header each end of a pair sends the other. */
typedef struct {
  uint64_t count;          /* elements                                      */
  uint64_t seq;            /* the pair's number: the k-th send of a to b    */
  int32_t dtype;
  int32_t check_only;
} xfer_header;

/* A note, as sent. kind 0: none. */
typedef struct {
  char kind;               /* 'W' waiting, 'F' failed                       */
  char pad[3];
  int32_t lost;            /* the rank the sender holds lost (its name), -1  */
  char text[XFER_NOTE_TEXT]; /* the first words said about it               */
} xfer_note;

struct zinc_mpi_xfer {
  uint64_t *sent, *recvd;  /* (size) pairs started to / from each rank      */
  xfer_note *heard;        /* (size) the last note from each rank           */
  xfer_note said[XFER_WAIT_NOTES + 1]; /* this rank's W notes, then its F
                              note (sent from here)                         */
  MPI_Request *said_reqs;  /* ((XFER_WAIT_NOTES + 1) * size) their sends    */
  int nsaid_wait, said_fail;
  MPI_Datatype block;      /* 1 MiB of bytes, committed                     */
};

struct zinc_xfer_req {
  int n;
  zinc_xfer *ops;          /* (n) the batch                                 */
  xfer_header *mine;       /* (n) sent from here: live until done           */
  xfer_header *theirs;     /* (n) the other ends'                           */
  MPI_Request *reqs;       /* (4 n): header out, header in, blocks, bytes   */
  int *truncated;          /* (n) its data arrived longer than posted       */
};

/* ----------------------------------------------------------- naming */

static void who(zinc_mpi *m, int k, char *buf, size_t len) {
  zinc_xfer_rank_text(m->pub, k, zinc_mpi_rank_name(m, k), buf, len);
}

/* "receive of 1000 f32 (4000 bytes) from stage 1 (rank 5), pair 3" */
static void describe(zinc_mpi *m, const zinc_xfer *o, uint64_t seq, char *buf, size_t len) {
  char peer[96];
  who(m, o->peer, peer, sizeof peer);
  snprintf(buf, len, "%s of %zu %s (%zu bytes) %s %s, pair %llu", o->send ? "send" : "receive",
           o->count, zinc_dt_name(o->dtype), o->count * zinc_dt_size(o->dtype),
           o->send ? "to" : "from", peer, (unsigned long long)seq);
}

/* ------------------------------------------------------------ state */

static zinc_status state(zinc_mpi *m, struct zinc_mpi_xfer **out) {
  if (m->xfer) {
    *out = m->xfer;
    return ZINC_OK;
  }
  struct zinc_mpi_xfer *x = NULL;
  size_t n = (size_t)m->size;
  zinc_status st = zinc_calloc((void **)&x, 1, sizeof *x, "comm mpi transfer state");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&x->sent, n, sizeof *x->sent, "comm mpi transfer counters");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&x->recvd, n, sizeof *x->recvd, "comm mpi transfer counters");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&x->heard, n, sizeof *x->heard, "comm mpi transfer notes");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&x->said_reqs, (XFER_WAIT_NOTES + 1) * n, sizeof *x->said_reqs,
                     "comm mpi transfer note requests");
  if (st == ZINC_OK) {
    for (size_t k = 0; k < (XFER_WAIT_NOTES + 1) * n; k++)
      x->said_reqs[k] = MPI_REQUEST_NULL;
    x->block = MPI_DATATYPE_NULL;
    int rc = MPI_Type_contiguous(1 << XFER_BLOCK_SHIFT, MPI_BYTE, &x->block);
    if (rc == MPI_SUCCESS)
      rc = MPI_Type_commit(&x->block);
    if (rc != MPI_SUCCESS)
      st = zinc_mpi_error(rc, "transfer: making the 1 MiB block type", -1);
  }
  if (st != ZINC_OK) {
    if (x) {
      if (x->block != MPI_DATATYPE_NULL)
        MPI_Type_free(&x->block);
      free(x->sent);
      free(x->recvd);
      free(x->heard);
      free(x->said_reqs);
      free(x);
    }
    return st;
  }
  m->xfer = x;
  *out = x;
  return ZINC_OK;
}

/* ------------------------------------------------------------ notes */

/* Send this rank's note of `kind` to every other rank: F once; W when it
 * names another lost rank than the last W did, up to XFER_WAIT_NOTES. */
static void say(zinc_mpi *m, char kind, int lost, const char *text) {
  struct zinc_mpi_xfer *x = m->xfer;
  if (!x)
    return;
  int slot;
  if (kind == 'F') {
    if (x->said_fail)
      return;
    x->said_fail = 1;
    slot = XFER_WAIT_NOTES;
  } else {
    if (x->nsaid_wait == XFER_WAIT_NOTES ||
        (x->nsaid_wait > 0 && x->said[x->nsaid_wait - 1].lost == lost))
      return;
    slot = x->nsaid_wait++;
  }
  xfer_note *note = &x->said[slot];
  note->kind = kind;
  note->lost = lost;
  snprintf(note->text, sizeof note->text, "%s", text);
  for (int k = 0; k < m->size; k++)
    if (k != m->rank)
      MPI_Isend(note, (int)sizeof *note, MPI_BYTE, k, m->p2p_tag + ZINC_TAG_XFER_NOTE, m->comm,
                &x->said_reqs[slot * m->size + k]);
}

/* Keep the notes that have arrived (an F note is not replaced by a W). */
static void hear(zinc_mpi *m) {
  struct zinc_mpi_xfer *x = m->xfer;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, m->p2p_tag + ZINC_TAG_XFER_NOTE, m->comm, &flag, &status) !=
            MPI_SUCCESS ||
        !flag)
      return;
    xfer_note note;
    memset(&note, 0, sizeof note);
    if (MPI_Recv(&note, (int)sizeof note, MPI_BYTE, status.MPI_SOURCE,
                 m->p2p_tag + ZINC_TAG_XFER_NOTE, m->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    note.text[sizeof note.text - 1] = '\0';
    if ((note.kind == 'W' || note.kind == 'F') && x->heard[status.MPI_SOURCE].kind != 'F')
      x->heard[status.MPI_SOURCE] = note;
  }
}

/* ---------------------------------------------------------- requests */

static void req_free(zinc_xfer_req *r) {
  if (!r)
    return;
  free(r->ops);
  free(r->mine);
  free(r->theirs);
  free(r->reqs);
  free(r->truncated);
  free(r);
}

/* Give up on a request's messages: receives cancelled, all released. */
static void abandon(zinc_xfer_req *r) {
  for (int k = 0; k < 4 * r->n; k++) {
    if (r->reqs[k] == MPI_REQUEST_NULL)
      continue;
    MPI_Cancel(&r->reqs[k]);
    MPI_Request_free(&r->reqs[k]);
  }
}

static zinc_status post(zinc_mpi *m, int is_send, void *buf, int count, MPI_Datatype type,
                        int peer, int tag, MPI_Request *req, const char *what) {
  int rc = is_send ? MPI_Isend(buf, count, type, peer, tag, m->comm, req)
                   : MPI_Irecv(buf, count, type, peer, tag, m->comm, req);
  if (rc == MPI_SUCCESS)
    return ZINC_OK;
  char ctx[256];
  snprintf(ctx, sizeof ctx, "transfer: %s: %s", what, is_send ? "MPI_Isend" : "MPI_Irecv");
  return zinc_mpi_error(rc, ctx, zinc_mpi_rank_name(m, peer));
}

zinc_status zinc_mpi_xfer_start(zinc_comm *c, const zinc_xfer *xs, int n, zinc_xfer_req **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: transfer start needs a request pointer");
  *out = NULL;
  ZINC_CHECK(zinc_xfer_validate(c, xs, n));
  zinc_mpi *m = zinc_mpi_of(c);
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, "transfer");
  struct zinc_mpi_xfer *x;
  ZINC_CHECK(state(m, &x));
  for (int i = 0; i < n; i++) /* MPI's int counts: blocks of 1 MiB */
    if ((xs[i].count * zinc_dt_size(xs[i].dtype)) >> XFER_BLOCK_SHIFT > INT_MAX)
      return zinc_error(ZINC_ERR_INVALID, "comm mpi: transfer %d of the batch: %zu elements "
                        "of %s is more than 2^51 bytes", i, xs[i].count,
                        zinc_dt_name(xs[i].dtype));
  zinc_xfer_req *r = NULL;
  size_t nn = (size_t)n;
  zinc_status st = zinc_calloc((void **)&r, 1, sizeof *r, "comm mpi transfer request");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&r->ops, nn, sizeof *r->ops, "comm mpi transfer batch");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&r->mine, nn, sizeof *r->mine, "comm mpi transfer headers");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&r->theirs, nn, sizeof *r->theirs, "comm mpi transfer headers");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&r->reqs, 4 * nn, sizeof *r->reqs, "comm mpi transfer requests");
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&r->truncated, nn, sizeof *r->truncated,
                     "comm mpi transfer flags");
  if (st != ZINC_OK) {
    req_free(r);
    return st;
  }
  r->n = n;
  memcpy(r->ops, xs, nn * sizeof *xs);
  for (size_t k = 0; k < 4 * nn; k++)
    r->reqs[k] = MPI_REQUEST_NULL;
  /* the counters advance for the whole batch first: a failure to post
   * below leaves them ahead of the peer's, and the comm fails */
  for (int i = 0; i < n; i++) {
    const zinc_xfer *o = &r->ops[i];
    uint64_t seq = o->send ? x->sent[o->peer]++ : x->recvd[o->peer]++;
    r->mine[i] = (xfer_header){.count = o->count, .seq = seq, .dtype = o->dtype,
                               .check_only = o->check_only};
  }
  for (int i = 0; i < n && st == ZINC_OK; i++) {
    const zinc_xfer *o = &r->ops[i];
    char what[256];
    describe(m, o, r->mine[i].seq, what, sizeof what);
    int out_tag = m->p2p_tag + (o->send ? ZINC_TAG_XFER_HDR_SEND : ZINC_TAG_XFER_HDR_RECV);
    int in_tag = m->p2p_tag + (o->send ? ZINC_TAG_XFER_HDR_RECV : ZINC_TAG_XFER_HDR_SEND);
    MPI_Request *q = &r->reqs[4 * i];
    st = post(m, 1, &r->mine[i], (int)sizeof(xfer_header), MPI_BYTE, o->peer, out_tag, &q[0],
              what);
    if (st == ZINC_OK)
      st = post(m, 0, &r->theirs[i], (int)sizeof(xfer_header), MPI_BYTE, o->peer, in_tag, &q[1],
                what);
    if (o->check_only)
      continue;
    size_t bytes = o->count * zinc_dt_size(o->dtype);
    size_t blocks = bytes >> XFER_BLOCK_SHIFT, whole = blocks << XFER_BLOCK_SHIFT;
    char *buf = o->buf;
    int tag = m->p2p_tag + ZINC_TAG_XFER_DATA;
    if (st == ZINC_OK)
      st = post(m, o->send, buf, (int)blocks, x->block, o->peer, tag, &q[2], what);
    if (st == ZINC_OK)
      st = post(m, o->send, buf ? buf + whole : NULL, (int)(bytes - whole), MPI_BYTE, o->peer,
                tag, &q[3], what);
  }
  if (st != ZINC_OK) {
    abandon(r);
    req_free(r);
    zinc_mpi_fail(m); /* the pairs no longer line up with the peers' */
    return st;
  }
  *out = r;
  return ZINC_OK;
}

/* -------------------------------------------------------------- wait */

/* The peers of r with messages pending, as text ("stage 2 (rank 2)"),
 * and the first of them (-1 when none). */
static int pending_peers(zinc_mpi *m, zinc_xfer_req *r, char *buf, size_t len) {
  size_t used = 0;
  int first = -1;
  buf[0] = '\0';
  for (int i = 0; i < r->n; i++) {
    int pending = 0;
    for (int k = 4 * i; k < 4 * i + 4; k++)
      pending |= r->reqs[k] != MPI_REQUEST_NULL;
    int seen = 0;
    for (int j = 0; j < i; j++) /* each peer once */
      for (int k = 4 * j; k < 4 * j + 4 && r->ops[j].peer == r->ops[i].peer; k++)
        seen |= r->reqs[k] != MPI_REQUEST_NULL;
    if (!pending || seen)
      continue;
    char peer[96];
    who(m, r->ops[i].peer, peer, sizeof peer);
    if (used + strlen(peer) + 4 < len)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", first < 0 ? "" : ", ", peer);
    if (first < 0)
      first = r->ops[i].peer;
  }
  return first;
}

/* The first peer of r with messages pending that sent a note of `kind`
 * ('W' also takes an F), or -1. */
static int noted_peer(zinc_mpi *m, zinc_xfer_req *r, char kind) {
  for (int i = 0; i < r->n; i++) {
    const xfer_note *note = &m->xfer->heard[r->ops[i].peer];
    int pending = 0;
    for (int k = 4 * i; k < 4 * i + 4; k++)
      pending |= r->reqs[k] != MPI_REQUEST_NULL;
    if (pending && (note->kind == kind || (kind == 'W' && note->kind == 'F')))
      return r->ops[i].peer;
  }
  return -1;
}

/* The first op of r with the peer, described. */
static void op_with(zinc_mpi *m, zinc_xfer_req *r, int peer, char *buf, size_t len) {
  for (int i = 0; i < r->n; i++)
    if (r->ops[i].peer == peer) {
      describe(m, &r->ops[i], r->mine[i].seq, buf, len);
      return;
    }
  snprintf(buf, len, "a transfer");
}

/* Fail repeating what `peer` said; this rank's own F note carries it on. */
static zinc_status repeat(zinc_mpi *m, zinc_xfer_req *r, int peer, double waited) {
  const xfer_note *note = &m->xfer->heard[peer];
  char them[96], op[256], lost[48] = "a rank";
  who(m, peer, them, sizeof them);
  op_with(m, r, peer, op, sizeof op);
  if (note->lost >= 0)
    snprintf(lost, sizeof lost, "rank %d", (int)note->lost);
  zinc_status st = zinc_error(ZINC_ERR_COMM, "comm mpi: transfer (%s): waited %.1f s; %s %s: "
                              "%s is lost or stuck (first said: %s); the comm is unusable, "
                              "destroy it", op, waited, them,
                              note->kind == 'F' ? "failed" : "waits too", lost, note->text);
  say(m, 'F', note->lost, note->text);
  return st;
}

/* Poll r until done, a peer's failure is heard, the comm is aborted, or
 * the deadline and then the grace for the peers' notes pass. */
static zinc_status complete(zinc_mpi *m, zinc_xfer_req *r) {
  double t0 = zinc_now(), deadline = zinc_mpi_deadline(m), grace_end = 0;
  double grace = m->timeout_s > 0 && m->timeout_s < 2 ? m->timeout_s : 2;
  grace = grace < 1 ? 1 : grace;
  for (unsigned poll = 0;; poll++) {
    int pending = 0;
    for (int k = 0; k < 4 * r->n; k++) {
      if (r->reqs[k] == MPI_REQUEST_NULL)
        continue;
      int flag = 0, cls = MPI_SUCCESS, i = k / 4;
      int rc = MPI_Test(&r->reqs[k], &flag, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) {
        pending += !flag;
        continue;
      }
      MPI_Error_class(rc, &cls);
      if (cls == MPI_ERR_TRUNCATE && k % 4 >= 2 && !r->ops[i].send) {
        r->truncated[i] = 1; /* the sizes differ: the headers tell */
        r->reqs[k] = MPI_REQUEST_NULL;
        continue;
      }
      char what[256], ctx[320];
      describe(m, &r->ops[i], r->mine[i].seq, what, sizeof what);
      snprintf(ctx, sizeof ctx, "transfer (%s): message completion", what);
      r->reqs[k] = MPI_REQUEST_NULL;
      zinc_status st = zinc_mpi_error(rc, ctx, zinc_mpi_rank_name(m, r->ops[i].peer));
      say(m, 'F', zinc_mpi_rank_name(m, r->ops[i].peer), zinc_last_error());
      return st;
    }
    if (!pending) { /* the peers answered: what they said about waiting is old */
      for (int i = 0; i < r->n; i++)
        if (m->xfer->heard[r->ops[i].peer].kind == 'W')
          m->xfer->heard[r->ops[i].peer].kind = 0;
      return ZINC_OK;
    }
    if (poll % XFER_POLLS_BEFORE_YIELD != XFER_POLLS_BEFORE_YIELD - 1)
      continue;
    sched_yield();
    hear(m);
    double now = zinc_now();
    int peer = noted_peer(m, r, 'F');
    if (peer >= 0)
      return repeat(m, r, peer, now - t0);
    if (zinc_mpi_aborted(m)) {
      const char *first =
          atomic_load(&m->failure_state) == 2 ? m->failure : "timeout or lost peer";
      char peers[256];
      pending_peers(m, r, peers, sizeof peers);
      zinc_status st = zinc_error(ZINC_ERR_COMM, "comm mpi: transfer with %s: abandoned (the "
                                  "comm failed: %s); the comm is unusable, destroy it", peers,
                                  first);
      say(m, 'F', -1, first);
      return st;
    }
    if (now <= deadline)
      continue;
    char peers[256], said[XFER_NOTE_TEXT];
    int first = pending_peers(m, r, peers, sizeof peers);
    peer = noted_peer(m, r, 'W');
    if (peer >= 0) { /* pass on whom the peer waits for */
      say(m, 'W', m->xfer->heard[peer].lost, m->xfer->heard[peer].text);
    } else if (grace_end == 0) { /* tell whoever waits for this rank whom it waits for */
      char me[96], op[256];
      who(m, m->rank, me, sizeof me);
      op_with(m, r, first, op, sizeof op);
      snprintf(said, sizeof said, "%.95s has waited %.1f s for %.200s (%.230s)", me, now - t0,
               peers, op);
      say(m, 'W', zinc_mpi_rank_name(m, first), said);
    }
    if (grace_end == 0)
      grace_end = now + grace;
    if (now <= grace_end)
      continue;
    if (peer >= 0)
      return repeat(m, r, peer, now - t0);
    char op[256];
    op_with(m, r, first, op, sizeof op);
    zinc_status st = zinc_error(ZINC_ERR_COMM, "comm mpi: transfer (%s): timed out after %.1f s "
                                "waiting for %s: lost or stuck; the comm is unusable, destroy "
                                "it", op, now - t0, peers);
    say(m, 'F', zinc_mpi_rank_name(m, first), zinc_last_error());
    return st;
  }
}

/* Both ends' headers agree (count, dtype), or ZINC_ERR_INVALID with the
 * same message on both ends; a broken pairing fails the comm. */
static zinc_status compare(zinc_mpi *m, zinc_xfer_req *r) {
  for (int i = 0; i < r->n; i++) {
    const zinc_xfer *o = &r->ops[i];
    const xfer_header *mine = &r->mine[i], *theirs = &r->theirs[i];
    const xfer_header *snd = o->send ? mine : theirs, *rcv = o->send ? theirs : mine;
    char s_who[96], r_who[96];
    who(m, o->send ? m->rank : o->peer, s_who, sizeof s_who);
    who(m, o->send ? o->peer : m->rank, r_who, sizeof r_who);
    if (theirs->seq != mine->seq || theirs->check_only != mine->check_only) {
      zinc_status st = zinc_error(ZINC_ERR_COMM, "comm mpi: transfer from %s to %s: pair %llu "
                                  "met pair %llu of the other end%s: the two ends no longer "
                                  "pair their transfers; the comm is unusable, destroy it",
                                  s_who, r_who, (unsigned long long)mine->seq,
                                  (unsigned long long)theirs->seq,
                                  theirs->check_only != mine->check_only
                                      ? " (one end checks only)" : "");
      say(m, 'F', -1, zinc_last_error());
      zinc_mpi_fail(m);
      return st;
    }
    if (snd->count == rcv->count && snd->dtype == rcv->dtype && !r->truncated[i])
      continue;
    size_t s_es = zinc_dt_size(snd->dtype), r_es = zinc_dt_size(rcv->dtype);
    return zinc_error(ZINC_ERR_INVALID, "transfer %llu from %s to %s: %s sends %llu %s (%llu "
                      "bytes) but %s receives %llu %s (%llu bytes): the two ends of a transfer "
                      "must give the same count and dtype%s", (unsigned long long)mine->seq,
                      s_who, r_who, s_who, (unsigned long long)snd->count,
                      zinc_dt_name(snd->dtype), (unsigned long long)(snd->count * s_es), r_who,
                      (unsigned long long)rcv->count, zinc_dt_name(rcv->dtype),
                      (unsigned long long)(rcv->count * r_es),
                      o->check_only ? "" : " (the receive buffer's contents are undefined)");
  }
  return ZINC_OK;
}

zinc_status zinc_mpi_xfer_wait(zinc_comm *c, zinc_xfer_req *r) {
  if (!r)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: transfer wait on a NULL request");
  zinc_mpi *m = zinc_mpi_of(c);
  zinc_status st;
  if (atomic_load(&m->abort)) { /* failed here or in its fate: tell the peers */
    st = zinc_mpi_failed_earlier(m, "transfer");
    say(m, 'F', -1, atomic_load(&m->failure_state) == 2 ? m->failure : zinc_last_error());
  } else {
    st = complete(m, r);
    if (st == ZINC_OK)
      st = compare(m, r);
  }
  if (st == ZINC_ERR_COMM) {
    abandon(r);
    zinc_mpi_fail(m);
  }
  req_free(r);
  return st;
}

void zinc_mpi_xfer_drop(zinc_comm *c, zinc_xfer_req *r) {
  (void)c;
  if (!r)
    return;
  abandon(r);
  req_free(r);
}

/* ---------------------------------------------------------- teardown */

void zinc_mpi_xfer_teardown(zinc_mpi *m, int finalized) {
  struct zinc_mpi_xfer *x = m->xfer;
  if (!x)
    return;
  m->xfer = NULL;
  if (finalized) { /* MPI is gone: nothing to tell, nothing to free there */
    free(x->sent);
    free(x->recvd);
    free(x->heard);
    free(x->said_reqs);
    free(x);
    return;
  }
  if (atomic_load(&m->abort)) /* a failed comm tells those waiting for it */
    say(m, 'F', -1, atomic_load(&m->failure_state) == 2 ? m->failure : "its comm failed");
  /* the notes' sends read x->said: small, delivered at once in practice
   * (not to a lost rank); give them a moment, then cancel what is left */
  int pending = 0, nreqs = (XFER_WAIT_NOTES + 1) * m->size;
  for (double until = zinc_now() + XFER_NOTE_SEND_S;;) {
    pending = 0;
    for (int k = 0; k < nreqs; k++) {
      int flag = 1;
      if (x->said_reqs[k] != MPI_REQUEST_NULL &&
          MPI_Test(&x->said_reqs[k], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        x->said_reqs[k] = MPI_REQUEST_NULL;
      pending += !flag;
    }
    if (!pending || zinc_now() > until)
      break;
    sched_yield();
  }
  MPI_Type_free(&x->block);
  free(x->sent);
  free(x->recvd);
  free(x->heard);
  for (int k = 0; pending && k < nreqs; k++)
    if (x->said_reqs[k] != MPI_REQUEST_NULL) {
      MPI_Cancel(&x->said_reqs[k]);
      MPI_Request_free(&x->said_reqs[k]);
    }
  free(x->said_reqs);
  free(x);
}
