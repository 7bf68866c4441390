/*
 * comm.h — the comm seam: every collective the engine issues goes through a
 * zinc_comm, a small table of function pointers chosen at engine creation.
 *
 * Backends: self (world of one, no dependency), mpi (host buffers; the CPU
 * device's backend and the bootstrap for NCCL), nccl (device buffers).
 *
 * Work is described by zinc_coll records and run as a batch: `run` blocks
 * until the whole batch is done, `start` queues it and returns a request
 * that `wait`/`test` complete. Batches on one comm complete in the order they
 * were started, and every rank must start the same batches in the same order
 * (as with any collective library). nccl: the comms of one device (the
 * data-parallel, model-parallel and hpZ comms, their splits) share one
 * launch stream, so their batches complete in the order they were started
 * across those comms, and every rank must start them in one order across
 * the comms too (NCCL's rule for several communicators of one device;
 * comm_nccl.c). A batch lets a backend amortise its
 * synchronisation (one pair of barriers for many shared-memory
 * reduce-scatters; one ncclGroupStart/End).
 *
 * Reductions are deterministic (mpi backend): for every element the
 * contributions are combined in one canonical order, a fixed binary tree
 * over rank indices,
 *     T(lo, hi) = T(lo, mid) + T(mid, hi),
 *     mid = lo + the largest power of two strictly less than hi - lo,
 * T of one rank being its value: (x0 + x1) + x2 at 3 ranks (left to right,
 * as at 2), (x0 + x1) + (x2 + x3) at 4, ((x0 + x1) + (x2 + x3)) + x4 at 5.
 * 16-bit types are added in fp32 and rounded once at the end; max and min
 * follow the same tree. The order does not depend on the bucket layout nor
 * on the path the comm takes (shared memory, node-aware, point-to-point):
 * the node-aware path adds each node's ranks first and then the nodes'
 * partials, which is the same tree whenever every node holds a contiguous
 * block of ranks whose size is a power of two (1x4, 2x2, 4x1, 2x4, 8x1 ...,
 * the only layouts it takes), and its 16-bit partials cross nodes in fp32.
 * So results are bitwise identical across node layouts. The ZeRO stages
 * oracle rests on this. (NCCL's order is its own: comm_nccl.c; it too adds
 * 16-bit sums in fp32 and rounds once, so at 2 ranks its bits are these.)
 *
 * Buffer rules (as NCCL):
 *  - reduce-scatter: send holds size*count elements, recv count; in place when
 *    recv == send + rank*count.
 *  - all-gather: send holds count elements, recv size*count; in place when
 *    send == recv + rank*count.
 *  - all-reduce: in place when send == recv.
 *  - all-to-all-v: never in place (send and recv must not overlap).
 * Failures come back as ZINC_ERR_COMM with a message naming the operation,
 * the peer where known, and the backend's error string. An operation that
 * has not completed after timeout_s fails the same way (the comm is then
 * unusable: destroy it); a started one waited for (by wait, or by a call
 * that first finishes the started batches: run, split, alloc_shared,
 * free_shared, destroy) may take up to min(max(timeout_s, 1 s), 2 s)
 * longer, a node barrier a peer did not reach up to min(timeout_s, 2 s)
 * longer, and (mpi, node-aware path) a wait between nodes half that, so
 * that the failure names the ranks that did not arrive: a node peer that
 * failed on a rank lost beyond the node is repeated, naming that rank, and
 * so is the peer on another node that was itself waiting at its node
 * barrier. Ranks are named by their number in the comm that split began
 * from (the one create made), on every comm of a fate alike. Every later
 * call on a failed comm fails at once and repeats the first failure's
 * message, so it still names the lost rank(s).
 *
 * Requests: `start` hands the caller a request (NULL when start fails).
 * `wait` consumes it whatever it returns. `test` consumes it when it sets
 * *done = 1, and every error return sets *done = 1: after an error from
 * either, the request is gone (freed, or owned by the backend until its
 * batch ends) and the caller must forget it, never wait or test it again.
 * Both backends (mpi, nccl) follow this.
 *
 * Streams (nccl; device buffers): the comm is created with the trainer's
 * compute stream (zinc_comm_nccl_create).
 *  - start: the batch runs after the work queued on the compute stream
 *    before the call (no host synchronisation is needed before a start:
 *    do not add one).
 *  - wait: completes the request on the device and returns without
 *    blocking the host: work queued on the compute stream after wait
 *    returns runs after the batch. A failure known at the call (a peer's
 *    error, a timeout, an earlier abort) is returned; one that comes later
 *    is returned by the comm's next call and by settle. A batch the device
 *    waits for never outlives timeout_s: a watchdog thread aborts the NCCL
 *    communicator when it does (its kernels stop, so a host synchronising
 *    the compute stream does not hang; the data is then not valid).
 *  - settle: before the host reads data that a wait guarded (on the host,
 *    or through a copy it synchronises), it calls settle: a host wait,
 *    bounded by timeout_s, for every batch wait handed to the device;
 *    ZINC_ERR_COMM as wait would have given. The engine does so in
 *    zinc_engine_sync.
 *  - run and test are host waits: after run returns, or test says done,
 *    the host may read the results.
 * The mpi and self backends' wait blocks the host; they have no settle.
 *
 * After a failure (timeout, lost or frozen peer) — what is left of MPI:
 *  - destroy and free_shared return at once: collective frees (MPI_Win_free
 *    of the shared windows) are skipped on a failed comm, on this rank or
 *    a peer, since a lost peer would never join them; the windows stay
 *    mapped until the process ends. On a healthy comm free_shared and
 *    destroy first make sure (node barrier, bounded by timeout_s) that all
 *    peers are there.
 *  - MPI_Finalize would free those windows collectively and wait for the
 *    lost rank forever. When zinc initialised MPI, its exit handler
 *    therefore skips MPI_Finalize once any comm has failed (the launcher
 *    may report an exit without MPI_Finalize). A trainer that initialised
 *    MPI itself must not call MPI_Finalize after ZINC_ERR_COMM from a comm
 *    failure unless every rank is known to be alive: exit with its own
 *    status, or MPI_Abort(MPI_COMM_WORLD, code) to have the launcher stop
 *    the job.
 *  - timeout_s above 1e9 s is waited for without a deadline (the config
 *    bounds zinc.comm_timeout_s to 1e6 s).
 *
 * Fate: comms that fail together. A comm made by create starts a fate of
 * its own; a split joins its parent's, an nccl comm its bootstrap's. When
 * one comm of a fate fails (a timeout, a lost or frozen peer: whatever
 * leaves it unusable), every other one is aborted with the first
 * failure's message: a wait in progress on any of them gives up within a
 * poll (naming what it waited for), every later call fails at once
 * repeating that message, and destroy returns at once. So an owner of
 * several comms over the same ranks (the engine: world, data- and
 * model-parallel groups, hpZ's group, a method's own comm) never waits a
 * second timeout on another of them for a rank one of them has already
 * given up on, and whichever comm a caller asks next names the lost rank.
 * zinc_comm_abort fails a fate on purpose (an owner that learnt of a
 * failure otherwise, e.g. agreed from a peer). Errors that leave a comm
 * usable (bad arguments, mismatched collectives) do not touch its fate.
 *
 * Transfers (xfer_start / xfer_wait; a pipeline's activations and
 * gradients): point-to-point messages between two ranks of a comm,
 * outside the rules of batches above: only the two ranks of a pair take
 * part, and transfers and collective batches do not wait for each other.
 *  - Pairing: rank a's k-th send to rank b pairs with b's k-th receive from
 *    a, each side counting in the order it starts them (across batches).
 *    The two ends of a pair give the same count and dtype.
 *  - Checking: the two ends of every pair exchange a header (count,
 *    dtype, the pair's number) and compare. A difference is
 *    ZINC_ERR_INVALID on both ends, each message naming both ranks and
 *    both counts, dtypes and bytes; the pair is used up on both ends and
 *    the comm stays usable (its fate untouched). mpi: found by xfer_wait,
 *    the receive buffer's contents are then undefined; nccl: found by
 *    xfer_start, before anything is queued.
 *  - mpi: start posts every message (headers and data) and returns; wait
 *    blocks the host until the batch is done, its deadline timeout_s from
 *    the wait (a trainer computes between start and wait). nccl: start
 *    exchanges the headers over the bootstrap comm (an mpi transfer with
 *    check_only, bounded by its timeout: start returns once the peer has
 *    started its side), then queues the batch as one NCCL group, ordered
 *    after the compute stream as any batch; wait as the collectives' wait
 *    ("Streams"), the watchdog bounding it by timeout_s from the start.
 *    Two ranks that each start a send before the receive that pairs with
 *    the other's send wait for each other there (NCCL's sends wait for
 *    their receiver): such crossing pairs go in one batch.
 *  - Failure: a lost or silent peer is ZINC_ERR_COMM naming it, and the
 *    comm fails (and its fate). mpi: so that a rank waiting for a peer
 *    that itself waits for a lost rank names the lost one, ranks tell the
 *    comm's other ranks by small notes: a wait past its deadline says
 *    whom it waits for, then gives the peers it waits for up to
 *    min(max(timeout_s, 1 s), 2 s) more to say the same; a failed
 *    transfer, or the destroy of a failed comm that ran transfers, says
 *    its failure. A wait that hears from a peer it waits for repeats what
 *    it said: at once when the peer failed, at its deadline when the peer
 *    waits too. Ranks are named as everywhere ("rank 5"), with
 *    zinc_comm.xfer_label's word before the comm rank when it is set
 *    ("stage 1 (rank 5)").
 *  - xfer_wait consumes the request whatever it returns; xfer_drop
 *    abandons one never waited for (an owner's destroy): receives are
 *    cancelled, a send may still read its buffer until its peer receives
 *    it (mpi) or the device passes it (nccl).
 */
#ifndef ZINC_COMM_H
#define ZINC_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types a comm moves: zinc_dtype values plus these. */
enum { ZINC_DT_F64 = 16, ZINC_DT_I32 = 17, ZINC_DT_I64 = 18, ZINC_DT_U8 = 19 };
size_t zinc_dt_size(int dtype);        /* bytes per element; 0 if unknown */
const char *zinc_dt_name(int dtype);

typedef enum { ZINC_OP_SUM = 0, ZINC_OP_MAX, ZINC_OP_MIN } zinc_comm_op;

typedef enum {
  ZINC_COLL_ALLREDUCE = 0,
  ZINC_COLL_REDUCE_SCATTER,   /* sum */
  ZINC_COLL_ALLGATHER,
  ZINC_COLL_ALLGATHERV,
  ZINC_COLL_BROADCAST,
  ZINC_COLL_BARRIER,
  /* Personalised exchange: rank r sends counts[p] elements from
   * send + displs[p] to every rank p (itself included) and receives
   * rcounts[p] elements from rank p into recv + rdispls[p] (counts,
   * displs, rcounts, rdispls: size entries each, in elements of dtype;
   * `count` is unused). Counts may differ per pair (zero allowed); both
   * sides must agree on them: rcounts[p] on rank r equals counts[r] on rank
   * p, and counts[r] == rcounts[r] (the self copy), which validate checks.
   * A disagreement between ranks is not detected before the data moves:
   * the receiving rank fails with ZINC_ERR_COMM naming the sender (a piece
   * shorter or longer than it expected, mpi) and the comm is unusable;
   * its peers may complete or time out. The data is
   * moved, never combined (compressed reduce-scatter builds on it:
   * engine/reduce/compress.c). Send and recv must not overlap (validate checks
   * their extents). The arrays are copied by `start`: they may be reused
   * once it returns. mpi: point-to-point messages with every peer, on
   * every path (a comm on one node runs it over MPI too, between its
   * shared-memory ops); nccl: grouped ncclSend/ncclRecv; self: a copy. */
  ZINC_COLL_ALLTOALLV
} zinc_coll_kind;
/* Number of kinds (for arrays indexed by zinc_coll_kind). */
#define ZINC_COLL_NKINDS (ZINC_COLL_ALLTOALLV + 1)

typedef struct {
  zinc_coll_kind kind;
  const void *send;        /* broadcast: unused (buffer is recv)              */
  void *recv;
  size_t count;            /* allreduce: elements; reduce-scatter: per-rank
                              recv count; all-gather: per-rank send count;
                              allgatherv: this rank's send count; broadcast:
                              elements                                        */
  int dtype;               /* zinc_dtype or ZINC_DT_*                         */
  zinc_comm_op op;         /* allreduce only                                  */
  int root;                /* broadcast only                                  */
  const size_t *counts;    /* allgatherv: per-rank counts (size entries)      */
  const size_t *displs;    /* allgatherv: per-rank offsets in recv, elements;
                              alltoallv: per-rank send counts / offsets in send */
  const size_t *rcounts;   /* alltoallv: per-rank recv counts (size entries)  */
  const size_t *rdispls;   /* alltoallv: per-rank offsets in recv, elements   */
  /* The comms logger (comm_log.h), for a collective that carries
   * compressed data (either of logical_bytes > 0 or codec_name set marks
   * one; both stay 0/NULL for plain data, and no backend reads them):
   *  logical_bytes  the wire bytes this rank would have sent for the
   *                 uncompressed collective it stands for, in the closed
   *                 form the logger uses for that collective's ring
   *                 (comm_log.c, ring_bytes; a reduce-scatter of `count`
   *                 elements of es bytes per rank over n ranks:
   *                 (n - 1) * count * es, which the mpi paths also measure
   *                 for a plain one); 0 on one rank;
   *  codec_name     "int4", "bf16", ... (static; NULL prints "compressed");
   *  logical_kind   an all-to-all-v's: the collective it stands for
   *                 (ZINC_COLL_REDUCE_SCATTER for a compressed
   *                 reduce-scatter), under whose name the row is kept:
   *                 "reduce_scatter (int4)"; validate refuses barrier and
   *                 all-to-all-v. Other kinds stand for themselves and
   *                 ignore it.
   * The summary prints the uncompressed bytes and their ratio to the wire
   * bytes. */
  uint64_t logical_bytes;
  const char *codec_name;
  zinc_coll_kind logical_kind;
} zinc_coll;

typedef struct zinc_comm zinc_comm;
typedef struct zinc_comm_req zinc_comm_req;

/* One end of a transfer ("Transfers" above). */
typedef struct {
  int peer;                /* the other end: a rank of the comm, not this one */
  int send;                /* 1: buf goes to peer; 0: buf receives from peer  */
  void *buf;               /* count elements of dtype: host memory (mpi) or
                              device memory (nccl)                            */
  size_t count;
  int dtype;               /* zinc_dtype or ZINC_DT_*                         */
  int check_only;          /* mpi: 1 = exchange and compare the headers only,
                              no data moves (buf unused); both ends must set
                              it alike (the nccl backend's handshake)         */
} zinc_xfer;
typedef struct zinc_xfer_req zinc_xfer_req;

typedef struct {
  const char *name;                                         /* "mpi" */
  zinc_status (*run)(zinc_comm *c, const zinc_coll *colls, int n);
  /* Queue a batch; *req completes when all of it has. The colls array may
   * be reused once start returns; the buffers must stay valid until done. */
  zinc_status (*start)(zinc_comm *c, const zinc_coll *colls, int n,
                       zinc_comm_req **req);
  /* Complete the request: mpi and self block the host until done (or
   * timeout_s); nccl orders the compute stream after it and returns at
   * once ("Streams"). Consumes the request in every case. */
  zinc_status (*wait)(zinc_comm *c, zinc_comm_req *req);
  /* *done = 1 when complete or on any error: the request is then consumed,
   * as by wait (see "Requests" above). */
  zinc_status (*test)(zinc_comm *c, zinc_comm_req *req, int *done);
  /* Optional (NULL where wait blocks the host): wait on the host, bounded
   * by timeout_s, for every batch `wait` left to the device ("Streams"). */
  zinc_status (*settle)(zinc_comm *c);
  /* Collective: ranks with the same color form a new comm, ordered by key. */
  zinc_status (*split)(zinc_comm *c, int color, int key, zinc_comm **out);
  /* Optional (NULL if the backend has none). Collective: memory that peers
   * on the node can read, so that reductions from it need no copy. Every
   * rank passes the same bytes. The comm keeps it until free_shared or
   * destroy. free_shared is collective too; on a failed comm it returns at
   * once and leaves the memory mapped (see "After a failure"). */
  zinc_status (*alloc_shared)(zinc_comm *c, size_t bytes, void **out);
  void (*free_shared)(zinc_comm *c, void *p);
  void (*destroy)(zinc_comm *c);
  /* Optional (zinc_comm_set_timeout): a backend that keeps timeout_s
   * elsewhere too (its worker, child comms) sets it there. */
  zinc_status (*set_timeout)(zinc_comm *c, double timeout_s);
  /* Optional (NULL: the comm cannot fail, self). Mark the comm failed with
   * `why` ("Fate"), unless it failed already: any thread, any time before
   * destroy; non-blocking (waits notice it at their next poll). Called by
   * the fate, never by owners (zinc_comm_abort). */
  void (*abort)(zinc_comm *c, const char *why);
  /* Optional (NULL: no transfers; self, whose one rank has no peer).
   * Transfers ("Transfers" above): start a batch of n (the array may be
   * reused once start returns; the buffers must stay valid until done);
   * wait completes it and consumes the request; drop abandons one never
   * waited for. */
  zinc_status (*xfer_start)(zinc_comm *c, const zinc_xfer *x, int n, zinc_xfer_req **req);
  zinc_status (*xfer_wait)(zinc_comm *c, zinc_xfer_req *req);
  void (*xfer_drop)(zinc_comm *c, zinc_xfer_req *req);
} zinc_comm_ops;

typedef struct zinc_comm_log zinc_comm_log; /* comm/comm_log.h */
typedef struct zinc_comm_fate zinc_comm_fate; /* comm/comm_fate.c */

struct zinc_comm {
  const zinc_comm_ops *ops;
  int rank, size;
  double timeout_s;     /* a wait longer than this fails with ZINC_ERR_COMM */
  void *impl;           /* backend state */
  /* The comms logger (comm_log.h): NULL counts nothing. The owner sets
   * log and log_group ("data_parallel", ...) before the comm's first
   * batch; a comm made by split starts with none. */
  zinc_comm_log *log;
  const char *log_group;
  /* The path that runs this comm's collectives ("self", "shm", "p2p",
   * "nccl"), set by the backend at creation; a backend that picks a path
   * per batch sets it before that batch is counted. Static strings. */
  const char *algo;
  /* Where the ranks live, set by the backend at creation (and by split):
   * node_of[r] (size entries) numbers the nodes 0 .. nnodes-1 in order of
   * their first rank; ranks on one node share memory. self: one node;
   * mpi: MPI_COMM_TYPE_SHARED, or the blocks of ZINC_COMM_NODE_SIZE world
   * ranks that variable fakes (as the node-aware path sees them); nccl: its
   * bootstrap comm's table. Owned by the comm (valid until destroy). */
  int nnodes;
  const int *node_of;
  /* The comms this one fails with ("Fate"): set by the backend at
   * creation (zinc_comm_fate_join), NULL for a comm that cannot fail. */
  zinc_comm_fate *fate;
  /* How transfers' messages name a rank of this comm: NULL, "rank 5"; a
   * word ("stage"), "stage 1 (rank 5)" for comm rank 1. Set by the owner
   * (static string). */
  const char *xfer_label;
};

/* -------------------------------------------------------------- creation */

/* World of one. */
zinc_status zinc_comm_self_create(zinc_comm **out);

/* mpi_comm: MPI_Comm* to duplicate, or NULL for MPI_COMM_WORLD. Initialises
 * MPI (MPI_THREAD_MULTIPLE) when nobody has, and finalises it at exit. With
 * a thread level below MULTIPLE, `start` runs the batch at once in the
 * caller's thread (no overlap) and says so once at info level. */
zinc_status zinc_comm_mpi_create(void *mpi_comm, double timeout_s, zinc_comm **out);
/* 1 when MPI is initialised or this process was started by an MPI launcher
 * (mpirun, srun, ...): a lone process started directly needs no MPI. */
int zinc_comm_mpi_wanted(void);

/* NCCL comm over the same ranks as `bootstrap` (an mpi comm): the unique id
 * is broadcast over it. Operations run on the comm's own stream, ordered
 * after work already queued on `compute_stream` (cudaStream_t, may be NULL).
 * ZINC_ERR_UNSUPPORTED when built without CUDA. */
zinc_status zinc_comm_nccl_create(zinc_comm *bootstrap, int cuda_device,
                                  void *compute_stream, double timeout_s,
                                  zinc_comm **out);

static inline void zinc_comm_destroy(zinc_comm *c) {
  if (c)
    c->ops->destroy(c);
}

/* ------------------------------------------------------------------ fate */

/* Backends, at creation: c joins the fate of `from` (a split's parent, an
 * nccl comm's bootstrap), or a new fate of its own when from is NULL or
 * has none. A comm joining a fate that already failed is aborted at once.
 * ZINC_ERR_NOMEM when the fate cannot grow (c is then in no fate). */
zinc_status zinc_comm_fate_join(zinc_comm *c, zinc_comm *from);
/* Backends, at destroy, before freeing what abort touches and after the
 * comm's own threads are stopped: no abort reaches c afterwards. The last
 * comm to leave frees the fate. NULL or no fate: nothing. */
void zinc_comm_fate_leave(zinc_comm *c);
/* Backends: c failed, its first failure's message is `why`; every other
 * comm of its fate is aborted with it, in the calling thread (once: later
 * calls return at once). Any thread; the caller may hold a lock of its
 * own comm's, never one another comm's abort takes. */
void zinc_comm_fate_fail(zinc_comm *c, const char *why);
/* Owners: fail c and every comm of its fate with `why` ("Fate"), as if
 * one of them had failed. For an owner that learnt of a failure another
 * way (a peer's, through an agreement) and is about to destroy its comms:
 * destroy then returns at once, skipping collective frees. NULL: nothing. */
void zinc_comm_abort(zinc_comm *c, const char *why);

/* The host may read what the comm's waits guarded ("Streams"); NULL and
 * comms without settle: ZINC_OK at once. */
static inline zinc_status zinc_comm_settle(zinc_comm *c) {
  return c && c->ops->settle ? c->ops->settle(c) : ZINC_OK;
}

/* ------------------------------------------------- single-op conveniences */

zinc_status zinc_comm_allreduce(zinc_comm *c, const void *send, void *recv,
                                size_t count, int dtype, zinc_comm_op op);
zinc_status zinc_comm_reduce_scatter(zinc_comm *c, const void *send, void *recv,
                                     size_t recvcount, int dtype);
zinc_status zinc_comm_allgather(zinc_comm *c, const void *send, void *recv,
                                size_t sendcount, int dtype);
zinc_status zinc_comm_allgatherv(zinc_comm *c, const void *send, size_t sendcount,
                                 void *recv, const size_t *counts,
                                 const size_t *displs, int dtype);
zinc_status zinc_comm_broadcast(zinc_comm *c, void *buf, size_t count, int dtype,
                                int root);
zinc_status zinc_comm_barrier(zinc_comm *c);

/* Bound this comm's waits by timeout_s from now on, instead of the value
 * it was created with (or last set): a phase in which peers are busy for
 * longer than the comm timeout without being lost — a checkpoint's file
 * I/O — raises it for its duration and sets it back. Not collective (each
 * rank bounds its own waits). The batches already started are waited for
 * first, under the old bound (so that no wait in flight sees it change);
 * on a failed comm, which waits no more, it returns that failure at once.
 * timeout_s is recorded in every case; backends without set_timeout
 * (self) only record it. */
zinc_status zinc_comm_set_timeout(zinc_comm *c, double timeout_s);

/* "reduce-scatter", "all-gather", ... */
const char *zinc_coll_name(zinc_coll_kind k);

/* Check a batch's arguments (kinds, dtypes, NULL buffers, counts) before a
 * backend touches them; every backend calls it first. */
zinc_status zinc_coll_validate(const zinc_comm *c, const zinc_coll *colls, int n);
/* The same for a batch of transfers (peers, dtypes, NULL buffers, sizes). */
zinc_status zinc_xfer_validate(const zinc_comm *c, const zinc_xfer *x, int n);
/* How a transfer's message names rank k of c (zinc_comm.xfer_label):
 * "stage 1 (rank 5)" or "rank 5", `name` being k's name ("Ranks are
 * named" above). */
void zinc_xfer_rank_text(const zinc_comm *c, int k, int name, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_COMM_H */
