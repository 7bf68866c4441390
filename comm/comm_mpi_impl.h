/*
 * comm_mpi_impl.h — internal state of the mpi comm backend, shared by its
 * files (not part of the comm seam; nothing outside comm/comm_mpi*.c
 * includes it):
 *
 *   comm_mpi.c         MPI plumbing: init/finalise, the duplicate comm,
 *                      errors, create/split/destroy, the ops table
 *   comm_mpi_shm.c     the node's shared memory: node comm, control and
 *                      scratch windows, alloc_shared, the node barrier
 *   comm_mpi_shmcoll.c collectives that read peers' memory directly
 *   comm_mpi_p2p.c     collectives over point-to-point messages (ranks on
 *                      several nodes, or shared memory switched off)
 *   comm_mpi_hier.c    node-aware collectives: inside the node over shared
 *                      memory, between nodes over point-to-point messages
 *   comm_mpi_reduce.c  the element-wise reduction in the canonical tree
 *                      order over ranks
 *   comm_mpi_async.c   the worker thread that runs started batches
 *   comm_mpi_xfer.c    transfers: point-to-point messages of two ranks
 *
 * Invariants:
 *  - At most one thread executes a batch on a comm at any time: the worker
 *    when batches are queued, otherwise the caller (run, split, alloc_shared
 *    and destroy first drain the queue).
 *  - The worker makes no MPI call on the shared-memory path; on the p2p and
 *    node-aware paths it does, which is why a worker exists only at
 *    MPI_THREAD_MULTIPLE. The node-aware path's two child comms have no
 *    worker: the thread running the parent's batch runs theirs.
 *  - Every wait loop (node barrier, p2p completion) gives up at the comm's
 *    deadline or when `abort` (a child's: or its parent's) is set, so a
 *    broken comm never hangs destroy.
 */
#ifndef ZINC_COMM_MPI_IMPL_H
#define ZINC_COMM_MPI_IMPL_H

#include <mpi.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/comm_log.h"

/* Ops of one batch that share one descriptor exchange; longer batches are
 * run as consecutive chunks of this many. */
#define ZINC_SHM_MAX_BATCH 128
/* Default bytes of the per-rank scratch window that stages send buffers
 * which are not inside a shared allocation (ZINC_COMM_SHM_SCRATCH). */
#define ZINC_SHM_SCRATCH_DEFAULT (8u << 20)
/* Bytes per message piece on the p2p path (ZINC_COMM_P2P_CHUNK). */
#define ZINC_P2P_CHUNK_DEFAULT (4u << 20)

/* Message tags: each comm draws a nonce at creation and uses the tags
 * ZINC_MPI_NTAGS * nonce + one of these (comm_mpi_p2p.c), so that messages
 * left behind by a failed comm never match in a later one. */
enum {
  ZINC_TAG_DATA = 0,       /* p2p collectives' pieces                        */
  ZINC_TAG_BARRIER,        /* barrier tokens                                 */
  ZINC_TAG_NOTE,           /* the node-aware path's notes                    */
  ZINC_TAG_XFER_HDR_SEND,  /* a transfer's header from its sending end       */
  ZINC_TAG_XFER_HDR_RECV,  /* ... from its receiving end                     */
  ZINC_TAG_XFER_DATA,      /* a transfer's data                              */
  ZINC_TAG_XFER_NOTE,      /* transfers' notes (comm_mpi_xfer.c)             */
  ZINC_MPI_NTAGS = 8
};

/* One op as a rank publishes it in the control window, so that every rank
 * can check that all ranks issued the same op and find each other's
 * buffers. */
typedef struct {
  int32_t kind, dtype, op, root;
  uint64_t count;          /* the op's count on this rank                     */
  int32_t src_id;          /* allocation holding this rank's source (send;
                              broadcast: the buffer), -1 if none               */
  int32_t dst_id;          /* allocation holding recv, -1 if none             */
  uint64_t src_off;        /* bytes from that allocation's start on this rank */
  uint64_t dst_off;
  int32_t fence;           /* 1: touches memory an earlier op of the batch
                              touched, so it must not run alongside it        */
  int32_t pad;
} zinc_mpi_shm_desc;

/* One rank's segment of the control window (shared memory, every rank maps
 * every segment). Only rank 0's barrier words are used. */
typedef struct {
  _Atomic uint64_t arrived;                /* last barrier epoch entered    */
  _Atomic uint32_t failed;                 /* 1: this rank's comm failed    */
  _Atomic uint32_t leaving;                /* destroy: 1 healthy, 2 failed  */
  char pad0[48];
  _Atomic uint32_t bar_count;              /* ranks arrived this epoch      */
  _Atomic uint32_t bar_gen;                /* futex word: bumps on release  */
  _Atomic uint32_t bar_sleepers;           /* ranks in futex_wait           */
  char pad1[52];
  char failure[512];                       /* this rank's first failure, set
                                              before `failed` (zinc_mpi_fail):
                                              a peer giving up on this rank
                                              repeats it, since this rank may
                                              know the rank that was lost  */
  zinc_mpi_shm_desc desc[ZINC_SHM_MAX_BATCH]; /* this rank's current chunk */
} zinc_mpi_shm_ctl;

/* One alloc_shared allocation. */
typedef struct zinc_mpi_shm_alloc {
  struct zinc_mpi_shm_alloc *next;
  int32_t id;              /* same on every rank: allocations are collective */
  MPI_Win win;             /* MPI_WIN_NULL on the p2p path (plain memory)    */
  char *base;              /* this rank's bytes                              */
  size_t bytes;
  char **peer;             /* (size) each rank's bytes, mapped here          */
} zinc_mpi_shm_alloc;

typedef struct zinc_mpi_worker zinc_mpi_worker;

typedef struct zinc_mpi_s {
  zinc_comm *pub;          /* the zinc_comm this state belongs to            */
  MPI_Comm comm;           /* zinc's own duplicate: no traffic mixes with
                              the trainer's                                   */
  int rank, size;
  int thread_level;        /* MPI's, as provided                              */
  double timeout_s;        /* <= 0: wait forever                              */
  _Atomic int abort;       /* set once the comm failed or is being torn down  */
  _Atomic int failure_state; /* 0 none, 1 being written, 2 `failure` is set   */
  char failure[768];       /* the first failure's message (names the rank),
                              repeated by every later refusal                 */

  /* shared memory (use_shm: every rank of comm is on this node) */
  int use_shm;
  MPI_Comm node;           /* ranks in the same order as comm                 */
  MPI_Win ctl_win;
  zinc_mpi_shm_ctl **ctl;  /* (size) each rank's control segment              */
  MPI_Win scratch_win;
  char **scratch;          /* (size) each rank's scratch segment              */
  size_t scratch_bytes;    /* per rank                                        */
  uint64_t epoch;          /* node barriers passed                            */

  zinc_mpi_shm_alloc *allocs; /* alloc_shared allocations, newest first       */
  int windows_left;        /* windows of allocations freed on a failed comm:
                              not freed (MPI_Win_free is collective), left to
                              MPI_Finalize                                    */
  int32_t next_alloc_id;

  /* point-to-point path (every path: all-to-all-v runs on it) */
  size_t p2p_chunk_bytes;  /* bytes per message piece                         */
  char *p2p_tmp;           /* (size * p2p_chunk_bytes) pieces from peers;
                              NULL on the shared-memory path                 */
  MPI_Request *p2p_reqs;   /* (2 * size)                                      */
  int *p2p_peer;           /* (2 * size) the peer of each request             */
  size_t *p2p_expect;      /* (2 * size) a receive's bytes; SIZE_MAX: a send  */
  int p2p_tag;             /* ZINC_MPI_NTAGS * nonce: + ZINC_TAG_* the tags    */

  /* nodes, for the comms logger's intra/inter split */
  int *node_of;            /* (size) node of each rank, numbered 0 .. in
                              order of their first rank (MPI_COMM_TYPE_SHARED,
                              or the node ZINC_COMM_NODE_SIZE fakes); also
                              the public zinc_comm.node_of                   */
  zinc_comm_wire wire;     /* bytes sent by the batch running now (only while
                              pub->log is set)                               */
  /* node-aware path (use_hier: several nodes of ppn ranks each, ranks
   * numbered node * ppn + local). Two child comms without workers, run by
   * whichever thread runs this comm's batch. */
  int use_hier;
  int ppn, nodes;
  zinc_comm *intra;        /* this node's ppn ranks (shared-memory path)      */
  zinc_comm *inter;        /* this local index on every node (p2p path)       */
  char *hier_tmp;          /* (hier_tmp_bytes) widened sends, node partials   */
  size_t hier_tmp_bytes;
  /* How messages name rank k: its number in the comm the splits began
   * from (zinc_comm_mpi_create's: the engine's world), so that every comm
   * of a fate names a lost rank alike; a node-aware child's ranks by the
   * same numbers. NULL: its own numbers (a comm made by create). */
  int *rank_names;         /* (size)                                          */
  /* child comm of a node-aware one: */
  int is_child;
  _Atomic int *parent_abort; /* the parent's abort flag: waits give up on it  */
  struct zinc_mpi_s *node_peers; /* the inter child: the parent's intra child,
                              whose peers' failures its waits repeat         */
  struct zinc_mpi_s *note_to; /* the intra child: the inter child, over which
                              a node barrier past its deadline tells the
                              other nodes whom it waits for (once)           */
  int noted;
  char note_out[512];      /* that note (sent from here: lives with the comm) */

  struct zinc_mpi_xfer *xfer; /* transfers' state (comm_mpi_xfer.c), made by
                              the first transfer; NULL before              */

  zinc_mpi_worker *worker; /* NULL: `start` runs batches at once              */
  int in_worker;           /* the worker is executing (shorter barrier spins) */
  /* tests: ZINC_TEST_COMM_FAIL_STARTED, the started batch (1, 2, ...) that
   * fails as a lost peer's would; 0 never. Counted by the worker
   * (started_batches) and by `start` (started_by_caller), which returns
   * only once the worker has failed it: the caller's first `test` finds it
   * failed, whatever the load. */
  long long fail_started_at, started_batches, started_by_caller;
} zinc_mpi;

static inline zinc_mpi *zinc_mpi_of(zinc_comm *c) { return (zinc_mpi *)c->impl; }

/* Should a wait give up: this comm, or (a child) its parent, aborted. */
static inline int zinc_mpi_aborted(zinc_mpi *m) {
  return atomic_load(&m->abort) || (m->parent_abort && atomic_load(m->parent_abort));
}

/* ---------------------------------------------------------- comm_mpi.c */

/* ZINC_ERR_COMM "comm mpi: <what> (peer P): <MPI_Error_string>"; peer < 0
 * when unknown. */
zinc_status zinc_mpi_error(int rc, const char *what, int peer);
/* Human name of a batch entry, e.g. "reduce-scatter of 1000 f32". */
void zinc_mpi_describe(const zinc_coll *o, char *buf, size_t len);
/* Deadline for a wait that starts now (infinity when timeout_s <= 0). */
double zinc_mpi_deadline(const zinc_mpi *m);
/* The comm has failed: set `abort`, tell the node's peers (the control
 * segment's `failed`; node-aware: the node child's), and keep
 * zinc_last_error() as the failure's message if it is the first. Callable
 * from any thread, any number of times. */
void zinc_mpi_fail(zinc_mpi *m);
/* ZINC_ERR_COMM "comm mpi: <what>: the comm failed earlier (<the first
 * failure's message>); ..." for calls on a failed comm. */
zinc_status zinc_mpi_failed_earlier(zinc_mpi *m, const char *what);
/* 1 when this comm or (shared-memory path) a peer's has failed. */
int zinc_mpi_is_failed(zinc_mpi *m);
/* The comms logger's wire count: `bytes` this rank put on the way to `peer`
 * (a rank of m->comm) for a collective of `kind`, counted as intra- or
 * inter-node by the peer's node. Called by the thread executing the batch
 * (every path calls it where it moves bytes). */
void zinc_mpi_count_wire(zinc_mpi *m, zinc_coll_kind kind, int peer, size_t bytes);
/* 1 when `peer` (a rank of m->comm) is on this rank's node by node_of:
 * the one place that decides intra- against inter-node. */
static inline int zinc_mpi_same_node(const zinc_mpi *m, int peer) {
  return m->node_of[peer] == m->node_of[m->rank];
}
/* The rank to name in a message for rank k of m (rank_names). */
static inline int zinc_mpi_rank_name(const zinc_mpi *m, int k) {
  return m->rank_names && k >= 0 ? m->rank_names[k] : k;
}
/* A child comm of the node-aware path over `comm` (owned from here on):
 * shared_memory 1 takes the shared-memory path (every rank of comm must be
 * on this node), 0 the p2p path; no worker thread. parent_rank (size of
 * comm): each rank's number in the parent. */
zinc_status zinc_mpi_create_child(zinc_mpi *parent, MPI_Comm comm, int shared_memory,
                                  const int *parent_rank, zinc_comm **out);
/* Run a validated batch in the calling thread (shm, hier or p2p path). */
zinc_status zinc_mpi_execute(zinc_mpi *m, const zinc_coll *colls, int n);

/* ------------------------------------------------------ comm_mpi_shm.c */
/* List (into buf) the ranks behind the others at the node barrier; returns
 * how many. */
int zinc_mpi_shm_laggards(zinc_mpi *m, char *buf, size_t n);
/* A node peer whose comm failed, named by zinc_mpi_rank_name, and what it
 * published about it (into said); -1 when none has. */
int zinc_mpi_shm_failed_peer(zinc_mpi *m, char *said, size_t n);

zinc_status zinc_mpi_shm_setup(zinc_mpi *m);
void zinc_mpi_shm_teardown(zinc_mpi *m);
/* Wait until every rank of the node has entered the same barrier. Fails
 * (and aborts the comm) on timeout, on abort, or when a peer's comm failed. */
zinc_status zinc_mpi_shm_barrier(zinc_mpi *m, const char *what);
/* Destroy: 1 when every rank arrived healthy, so that collective frees
 * (MPI_Win_free) will be joined by all; 0 otherwise. */
int zinc_mpi_shm_agree_teardown(zinc_mpi *m);
/* The allocation holding [p, p + bytes) on this rank, or NULL. */
zinc_mpi_shm_alloc *zinc_mpi_shm_find(zinc_mpi *m, const void *p, size_t bytes);
zinc_mpi_shm_alloc *zinc_mpi_shm_find_id(zinc_mpi *m, int32_t id);
zinc_status zinc_mpi_shm_alloc_create(zinc_mpi *m, size_t bytes, void **out);
void zinc_mpi_shm_alloc_free(zinc_mpi *m, void *p);
void zinc_mpi_shm_alloc_free_all(zinc_mpi *m);

/* -------------------------------------------------- comm_mpi_shmcoll.c */

zinc_status zinc_mpi_shm_run(zinc_mpi *m, const zinc_coll *colls, int n);

/* ----------------------------------------------------- comm_mpi_hier.c */

/* Set up the node-aware path: m->ppn is set, ranks are node * ppn + local;
 * makes the node and the cross-node child comms. */
zinc_status zinc_mpi_hier_setup(zinc_mpi *m);
/* Free the children (collective frees skipped when `failed`). */
void zinc_mpi_hier_teardown(zinc_mpi *m, int failed);
zinc_status zinc_mpi_hier_run(zinc_mpi *m, const zinc_coll *colls, int n);

/* ------------------------------------------------------ comm_mpi_p2p.c */

zinc_status zinc_mpi_p2p_setup(zinc_mpi *m);
/* The node-aware path: tell every peer of m (the inter child) that this
 * rank waits at its node barrier, `text` saying for whom (sent once per
 * comm, without waiting for delivery). A wait between nodes that times out
 * repeats such a note from a peer it waited for. */
void zinc_mpi_p2p_note(zinc_mpi *m, const char *text);
void zinc_mpi_p2p_teardown(zinc_mpi *m);
zinc_status zinc_mpi_p2p_run(zinc_mpi *m, const zinc_coll *colls, int n);

/* ----------------------------------------------------- comm_mpi_xfer.c */

/* The ops table's transfers (comm.h, "Transfers"). */
zinc_status zinc_mpi_xfer_start(zinc_comm *c, const zinc_xfer *x, int n, zinc_xfer_req **req);
zinc_status zinc_mpi_xfer_wait(zinc_comm *c, zinc_xfer_req *req);
void zinc_mpi_xfer_drop(zinc_comm *c, zinc_xfer_req *req);
/* Destroy: a failed comm that ran transfers tells its other ranks its
 * failure (once), then the state is freed. No state: nothing. */
void zinc_mpi_xfer_teardown(zinc_mpi *m, int finalized);

/* --------------------------------------------------- comm_mpi_reduce.c */

/* dst[i] = src[0][i] (op) ... (op) src[nsrc-1][i], combined in the
 * canonical tree order of comm.h (T(lo,hi) = T(lo,mid) (op) T(mid,hi), mid =
 * lo + the largest power of two below hi-lo); 16-bit floats in fp32,
 * rounded once. dst may be one of the sources (exactly, never a shifted
 * overlap). Sum wraps for integers; max and min propagate NaN. */
void zinc_mpi_reduce_ranks(void *dst, const void *const *src, int nsrc, size_t count,
                           int dtype, zinc_comm_op op);
/* The same, where for bf16/f16 the sources (src_wide) and/or dst (dst_wide)
 * are fp32 partials rather than 16-bit values: the node-aware path adds a
 * node's ranks into an unrounded fp32 partial and rounds once after adding
 * the nodes' partials. Other dtypes ignore the flags. */
void zinc_mpi_reduce_wide(void *dst, int dst_wide, const void *const *src, int src_wide,
                          int nsrc, size_t count, int dtype, zinc_comm_op op);

/* Balanced split of `count` into `parts` slices: slice i starts at
 * zinc_slice_start(count, parts, i) and ends at the start of slice i+1. */
static inline size_t zinc_slice_start(size_t count, int parts, int i) {
  size_t base = count / (size_t)parts, rem = count % (size_t)parts;
  return base * (size_t)i + ((size_t)i < rem ? (size_t)i : rem);
}

/* ---------------------------------------------------- comm_mpi_async.c */

typedef zinc_status (*zinc_mpi_worker_exec_fn)(void *ctx, const zinc_coll *colls, int n);

/* A thread that runs queued batches in order with exec(ctx, ...). */
zinc_status zinc_mpi_worker_create(zinc_mpi_worker_exec_fn exec, void *ctx, _Atomic int *abort,
                                   double timeout_s, zinc_mpi_worker **out);
/* Queue a copy of the batch (counts/displs included). */
zinc_status zinc_mpi_worker_submit(zinc_mpi_worker *w, const zinc_coll *colls, int n,
                                   int nranks, zinc_comm_req **req);
zinc_status zinc_mpi_worker_wait(zinc_mpi_worker *w, zinc_comm_req *req);
zinc_status zinc_mpi_worker_test(zinc_mpi_worker *w, zinc_comm_req *req, int *done);
/* Longest wait a timespec deadline is computed for; longer timeouts (and
 * <= 0) wait without one. */
#define ZINC_MPI_MAX_TIMED_WAIT_S 1e9
/* `from` + seconds, saturating: seconds <= 0 gives `from`, seconds above
 * ZINC_MPI_MAX_TIMED_WAIT_S (or NaN) gives from + that bound. */
struct timespec zinc_mpi_timespec_after(struct timespec from, double seconds);
/* Block until every queued batch has finished (their requests stay valid). */
zinc_status zinc_mpi_worker_drain(zinc_mpi_worker *w, const char *why);
/* The bound of the worker's waits from now on (zinc_comm_set_timeout). */
void zinc_mpi_worker_set_timeout(zinc_mpi_worker *w, double timeout_s);
/* Drain (bounded by the timeout), stop and join the thread, free requests
 * nobody will wait for. NULL is fine. */
void zinc_mpi_worker_destroy(zinc_mpi_worker *w);

#endif /* ZINC_COMM_MPI_IMPL_H */
