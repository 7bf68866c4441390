/*
 * comm_mpi.c — the mpi comm backend's plumbing: MPI initialisation, zinc's
 * duplicate of the trainer's communicator, MPI errors as zinc statuses, the
 * choice between the shared-memory and point-to-point paths, and the ops
 * table (run, start/wait/test, split, alloc_shared, destroy; transfers are
 * comm_mpi_xfer.c's).
 *
 * MPI life cycle: when nobody has initialised MPI, the first comm does it
 * with MPI_THREAD_MULTIPLE and registers one atexit handler that finalises
 * it (unless someone already did). That is the one piece of process-wide
 * state here, guarded by a mutex: comms can be created and destroyed any
 * number of times in one process, MPI stays up until exit. Once any comm
 * has failed, the handler leaves MPI unfinalised (comm.h, "After a
 * failure"), so that the process can exit while a peer is lost.
 *
 * Paths: when every rank of the comm shares this node (MPI_COMM_TYPE_SHARED
 * gives the whole comm) collectives read peers' memory directly
 * (comm_mpi_shmcoll.c). When the ranks span several nodes that each hold
 * the same power-of-two number ppn > 1 of ranks as a contiguous block
 * (rank = node * ppn + local), reduce-scatter, all-gather and all-reduce
 * are node-aware (comm_mpi_hier.c): shared memory inside the node, one
 * point-to-point exchange per local index between nodes; the other kinds
 * take the flat p2p path. Otherwise, or with ZINC_COMM_MPI_SHM=0, every
 * collective goes over point-to-point messages (comm_mpi_p2p.c), and the
 * reason is said once at info level. All-to-all-v takes the p2p path on
 * every path (its per-pair counts live in each rank's private arrays; on a
 * shared-memory comm the batch runs its shared-memory ops in segments
 * around it, and the comms logger still says "shm"). All ranks agree on
 * the path. Every
 * path adds in the canonical tree order (comm.h), and a power-of-two block
 * of ranks is a subtree of it, so results do not depend on the path.
 *
 * Nodes: node_of names each rank's node (MPI_COMM_TYPE_SHARED, or the
 * blocks ZINC_COMM_NODE_SIZE fakes), numbered in order of their first
 * rank; it is the public zinc_comm.node_of, and inside the backend read by
 * zinc_mpi_same_node only; the comms logger's wire counts
 * (zinc_mpi_count_wire, called by every path where bytes leave this rank)
 * are split intra-node / inter-node by it.
 *
 * Threads: at MPI_THREAD_MULTIPLE a worker thread runs started batches
 * (comm_mpi_async.c). Below it `start` runs the batch in the caller's thread
 * and says so once at info level. The worker and the caller never run
 * batches at the same time: run, split, alloc_shared, free_shared and
 * destroy drain the worker first. One thread per comm issues calls.
 *
 * For the engine: buffers inside an alloc_shared allocation *of the comm
 * that runs the collective* are read by peers in place (no copy); any other
 * buffer (malloc, or another comm's allocation) is staged through the
 * scratch window, which is correct but costs a copy. Reduce-scatter and
 * all-reduce are fastest when both send and recv are shared.
 *
 * Environment (read when a comm is created; every rank must agree):
 *   ZINC_COMM_MPI_SHM=0          point-to-point path even on one node
 *   ZINC_COMM_SHM_SCRATCH=bytes  per-rank staging window (default 8 MiB)
 *   ZINC_COMM_P2P_CHUNK=bytes    message piece on the p2p path (4 MiB)
 *   ZINC_COMM_NODE_SIZE=k        tests and benchmarks: consecutive blocks of
 *                                k world ranks count as nodes for the path
 *                                choice (each must lie inside one real node)
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "comm/comm_mpi_impl.h"

/* ------------------------------------------------------------ MPI set-up */

static pthread_mutex_t mpi_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int mpi_finalize_registered; /* guarded by mpi_init_lock */
static atomic_int sync_start_logged;
static atomic_int flat_path_logged;
/* A comm of this process failed (timeout, lost peer): MPI_Finalize frees
 * the windows left behind collectively and would wait for the lost rank. */
static atomic_int mpi_comm_failed;

static void mpi_finalize_at_exit(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  if (atomic_load(&mpi_comm_failed)) {
    zinc_log(ZINC_LOG_WARN, "comm mpi: MPI is not finalised at exit because a comm failed "
             "(a rank was lost or stalled): MPI_Finalize would wait for it; the launcher "
             "may report that this process exited without MPI_Finalize");
    return;
  }
  MPI_Finalize();
}

zinc_status zinc_mpi_error(int rc, const char *what, int peer) {
  char text[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error code %d", rc);
  if (peer >= 0)
    return zinc_error(ZINC_ERR_COMM, "comm mpi: %s (peer rank %d): %s", what, peer, text);
  return zinc_error(ZINC_ERR_COMM, "comm mpi: %s: %s", what, text);
}

/* Initialise MPI if nobody has; report the thread level in force. */
static zinc_status mpi_ensure_init(int *provided) {
  zinc_status st = ZINC_OK;
  int initialized = 0, finalized = 0;
  pthread_mutex_lock(&mpi_init_lock);
  MPI_Finalized(&finalized);
  MPI_Initialized(&initialized);
  if (finalized) {
    st = zinc_error(ZINC_ERR_COMM, "comm mpi: MPI has already been finalised in this "
                    "process; create zinc comms before MPI_Finalize");
  } else if (!initialized) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
    if (rc != MPI_SUCCESS) {
      st = zinc_mpi_error(rc, "MPI_Init_thread(MPI_THREAD_MULTIPLE)", -1);
    } else if (!mpi_finalize_registered) {
      atexit(mpi_finalize_at_exit);
      mpi_finalize_registered = 1;
    }
  } else {
    MPI_Query_thread(provided);
  }
  pthread_mutex_unlock(&mpi_init_lock);
  return st;
}

double zinc_mpi_deadline(const zinc_mpi *m) {
  return m->timeout_s > 0 ? zinc_now() + m->timeout_s : INFINITY;
}

/* ------------------------------------------------------------- failure */

/* Mark m failed, `why` its failure unless it has one: abort set, the
 * node's peers told. Atomics only (any thread; the fate's walk calls it). */
static void mark_failed(zinc_mpi *m, const char *why) {
  int none = 0;
  if (atomic_compare_exchange_strong(&m->failure_state, &none, 1)) {
    snprintf(m->failure, sizeof m->failure, "%s", why);
    atomic_store(&m->failure_state, 2);
  }
  atomic_store(&m->abort, 1);
  atomic_store(&mpi_comm_failed, 1);
  if (m->ctl && m->ctl[m->rank]) {
    zinc_mpi_shm_ctl *mine = m->ctl[m->rank];
    if (atomic_load(&m->failure_state) == 2 && !atomic_load(&mine->failed))
      snprintf(mine->failure, sizeof mine->failure, "%.511s", m->failure);
    atomic_store(&mine->failed, 1); /* after the text: a peer reads it once it sees this */
  }
  if (m->intra) /* node-aware: the node's peers see it at their next node barrier */
    mark_failed(zinc_mpi_of(m->intra), why);
}

void zinc_mpi_fail(zinc_mpi *m) {
  mark_failed(m, zinc_last_error());
  if (atomic_load(&m->failure_state) == 2) /* the comms of its fate fail with it */
    zinc_comm_fate_fail(m->pub, m->failure);
}

/* The fate's abort (comm.h): another comm of the fate failed. */
static void mpi_abort(zinc_comm *c, const char *why) { mark_failed(zinc_mpi_of(c), why); }

zinc_status zinc_mpi_failed_earlier(zinc_mpi *m, const char *what) {
  const char *first = atomic_load(&m->failure_state) == 2 ? m->failure
                                                          : "timeout or lost peer";
  return zinc_error(ZINC_ERR_COMM, "comm mpi: %s: the comm failed earlier (%s); destroy it "
                    "and create a new one", what, first);
}

int zinc_mpi_is_failed(zinc_mpi *m) {
  if (zinc_mpi_aborted(m))
    return 1;
  if (m->use_shm && m->ctl && m->ctl[0])
    for (int k = 0; k < m->size; k++)
      if (atomic_load(&m->ctl[k]->failed) || atomic_load(&m->ctl[k]->leaving) == 2)
        return 1;
  return 0;
}

/* A call's outcome: an error that left the comm aborted (a timeout, a lost
 * peer) is the comm's failure, kept for the calls that follow. Errors that
 * leave the comm usable (bad arguments, mismatched collectives) are not. */
static zinc_status settle(zinc_mpi *m, zinc_status st) {
  if (st != ZINC_OK && atomic_load(&m->abort))
    zinc_mpi_fail(m);
  return st;
}

void zinc_mpi_describe(const zinc_coll *o, char *buf, size_t len) {
  if (o->kind == ZINC_COLL_BARRIER)
    snprintf(buf, len, "barrier");
  else if (o->kind == ZINC_COLL_ALLTOALLV)
    snprintf(buf, len, "all-to-all-v of %s", zinc_dt_name(o->dtype));
  else
    snprintf(buf, len, "%s of %zu %s", zinc_coll_name(o->kind), o->count,
             zinc_dt_name(o->dtype));
}

void zinc_mpi_count_wire(zinc_mpi *m, zinc_coll_kind kind, int peer, size_t bytes) {
  if (m->is_child)
    return; /* a node-aware comm's child: the parent counts what it moves */
  if (!m->pub->log || peer == m->rank)
    return;
  m->wire[kind][zinc_mpi_same_node(m, peer) ? 0 : 1] += bytes;
}

/* ------------------------------------------------------------- batches */

/* A comm of one rank: every collective is a copy, or nothing in place. */
static void run_alone(const zinc_coll *colls, int n) {
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    size_t es = zinc_dt_size(o->dtype);
    if (o->kind == ZINC_COLL_ALLTOALLV) {
      if (o->counts[0])
        memmove((char *)o->recv + o->rdispls[0] * es, (const char *)o->send + o->displs[0] * es,
                o->counts[0] * es);
      continue;
    }
    size_t bytes = o->count * es;
    void *dst = o->kind == ZINC_COLL_ALLGATHERV ? (char *)o->recv + o->displs[0] *
                                                                        zinc_dt_size(o->dtype)
                                                 : o->recv;
    if (o->kind != ZINC_COLL_BARRIER && o->kind != ZINC_COLL_BROADCAST && bytes &&
        dst != o->send)
      memmove(dst, o->send, bytes);
  }
}

/* The shared-memory path, except all-to-all-v: each runs over p2p
 * messages between the shared-memory runs of the ops around it (every
 * such run ends at a node barrier, so the order of the batch holds). */
static zinc_status shm_run(zinc_mpi *m, const zinc_coll *colls, int n) {
  int from = 0;
  for (int j = 0; j <= n; j++) {
    if (j < n && colls[j].kind != ZINC_COLL_ALLTOALLV)
      continue;
    if (from < j)
      ZINC_CHECK(zinc_mpi_shm_run(m, colls + from, j - from));
    if (j < n)
      ZINC_CHECK(zinc_mpi_p2p_run(m, &colls[j], 1));
    from = j + 1;
  }
  return ZINC_OK;
}

zinc_status zinc_mpi_execute(zinc_mpi *m, const zinc_coll *colls, int n) {
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, n > 0 ? zinc_coll_name(colls[0].kind) : "batch");
  if (n == 0)
    return ZINC_OK;
  zinc_comm *c = m->pub;
  double t0 = 0;
  if (c->log) {
    memset(m->wire, 0, sizeof m->wire);
    t0 = zinc_now();
  }
  zinc_status st = ZINC_OK;
  if (m->size == 1)
    run_alone(colls, n);
  else if (m->use_shm)
    st = shm_run(m, colls, n);
  else
    st = m->use_hier ? zinc_mpi_hier_run(m, colls, n) : zinc_mpi_p2p_run(m, colls, n);
  if (c->log && st == ZINC_OK)
    zinc_comm_log_batch(c, colls, n, zinc_now() - t0, &m->wire);
  return st;
}

static zinc_status worker_exec(void *ctx, const zinc_coll *colls, int n) {
  zinc_mpi *m = ctx;
  if (m->fail_started_at > 0 && ++m->started_batches == m->fail_started_at) {
    /* tests: the comm fails under a started batch, as with a lost peer,
     * so that callers are seen handling the failure from `test` */
    atomic_store(&m->abort, 1);
    return zinc_error(ZINC_ERR_COMM, "comm mpi (rank %d of %d): started batch %lld (%s ...) "
                      "failed on purpose (ZINC_TEST_COMM_FAIL_STARTED, tests only)",
                      zinc_mpi_rank_name(m, m->rank), m->size, m->fail_started_at,
                      n ? zinc_coll_name(colls[0].kind) : "empty");
  }
  m->in_worker = 1; /* only one thread executes at a time (see the header) */
  zinc_status st = zinc_mpi_execute(m, colls, n);
  m->in_worker = 0;
  return st;
}

static zinc_status mpi_run(zinc_comm *c, const zinc_coll *colls, int n) {
  ZINC_CHECK(zinc_coll_validate(c, colls, n));
  zinc_mpi *m = zinc_mpi_of(c);
  ZINC_CHECK(settle(m, zinc_mpi_worker_drain(m->worker, "run")));
  return settle(m, zinc_mpi_execute(m, colls, n));
}

static zinc_status mpi_start(zinc_comm *c, const zinc_coll *colls, int n, zinc_comm_req **req) {
  if (!req)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: start needs a request pointer");
  *req = NULL;
  ZINC_CHECK(zinc_coll_validate(c, colls, n));
  zinc_mpi *m = zinc_mpi_of(c);
  if (!m->worker)
    ZINC_CHECK(settle(m, zinc_mpi_execute(m, colls, n)));
  zinc_status st = zinc_mpi_worker_submit(m->worker, colls, n, m->size, req);
  if (st == ZINC_OK && m->worker && m->fail_started_at > 0 &&
      ++m->started_by_caller == m->fail_started_at)
    (void)zinc_mpi_worker_drain(m->worker, "start"); /* tests: failed when start returns */
  return st;
}

static zinc_status mpi_wait(zinc_comm *c, zinc_comm_req *req) {
  zinc_mpi *m = zinc_mpi_of(c);
  zinc_status st = zinc_mpi_worker_wait(m->worker, req);
  char who[256], msg[1024];
  /* a timed-out wait: name the ranks the node barrier is still waiting for */
  if (st == ZINC_ERR_COMM && m->use_shm && zinc_mpi_shm_laggards(m, who, sizeof who) > 0) {
    snprintf(msg, sizeof msg, "%s", zinc_last_error());
    st = zinc_error(ZINC_ERR_COMM, "%s; rank(s) %s had not arrived at the node barrier",
                    msg, who);
  } else if (st == ZINC_ERR_COMM && !m->use_shm && atomic_load(&m->abort) &&
             atomic_load(&m->failure_state) == 0) {
    /* p2p: the worker, aborted, gives up within a poll and records which
     * peer it was waiting for; wait for that and say it */
    snprintf(msg, sizeof msg, "%s", zinc_last_error());
    (void)zinc_mpi_worker_drain(m->worker, "wait");
    if (atomic_load(&m->failure_state) == 2)
      st = zinc_error(ZINC_ERR_COMM, "%s; the batch: %s", msg, m->failure);
    else
      st = zinc_error(ZINC_ERR_COMM, "%s", msg);
  }
  return settle(m, st);
}

static zinc_status mpi_test(zinc_comm *c, zinc_comm_req *req, int *done) {
  if (!done)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: test needs a done pointer");
  zinc_mpi *m = zinc_mpi_of(c);
  zinc_status st = zinc_mpi_worker_test(m->worker, req, done);
  if (st != ZINC_OK)
    *done = 1; /* consumed (comm.h) */
  return settle(m, st);
}

/* How create_from picks the path: by the layout (a user comm), or fixed
 * (a child of the node-aware path). */
enum { PATH_CHOOSE, PATH_CHILD_SHM, PATH_CHILD_P2P };
static zinc_status create_from(MPI_Comm comm, int thread_level, double timeout_s, int path,
                               zinc_comm **out);
static void mpi_release(zinc_comm *c);

static zinc_status mpi_split(zinc_comm *c, int color, int key, zinc_comm **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: split needs an output pointer");
  *out = NULL;
  if (color < 0)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: split color %d is negative; every rank "
                      "must pass a color >= 0", color);
  zinc_mpi *m = zinc_mpi_of(c);
  ZINC_CHECK(settle(m, zinc_mpi_worker_drain(m->worker, "split")));
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, "split");
  MPI_Comm sub;
  int rc = MPI_Comm_split(m->comm, color, key, &sub);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Comm_split", -1);
  ZINC_CHECK(create_from(sub, m->thread_level, c->timeout_s, PATH_CHOOSE, out));
  zinc_mpi *sm = zinc_mpi_of(*out);
  /* its ranks are named as the parent names them (rank_names): the
   * collective first, so that a local failure below leaves no peer in it */
  int name = zinc_mpi_rank_name(m, m->rank), names[sm->size];
  zinc_status st = ZINC_OK;
  rc = MPI_Allgather(&name, 1, MPI_INT, names, 1, MPI_INT, sm->comm);
  if (rc != MPI_SUCCESS)
    st = zinc_mpi_error(rc, "MPI_Allgather of the split's rank names", -1);
  if (st == ZINC_OK)
    st = zinc_calloc((void **)&sm->rank_names, (size_t)sm->size, sizeof *sm->rank_names,
                     "comm mpi split rank names");
  if (st == ZINC_OK) {
    memcpy(sm->rank_names, names, sizeof names);
    st = zinc_comm_fate_join(*out, c); /* fails with its parent (comm.h) */
  }
  if (st != ZINC_OK) {
    mpi_release(*out);
    *out = NULL;
  }
  return st;
}

static zinc_status mpi_alloc_shared(zinc_comm *c, size_t bytes, void **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: alloc_shared needs an output pointer");
  *out = NULL;
  zinc_mpi *m = zinc_mpi_of(c);
  ZINC_CHECK(settle(m, zinc_mpi_worker_drain(m->worker, "alloc_shared")));
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, "alloc_shared");
  /* node-aware: shared by the node's ranks, so the node step reads it in place */
  return zinc_mpi_shm_alloc_create(m->use_hier ? zinc_mpi_of(m->intra) : m, bytes, out);
}

static void mpi_free_shared(zinc_comm *c, void *p) {
  zinc_mpi *m = zinc_mpi_of(c);
  if (!p)
    return;
  if (settle(m, zinc_mpi_worker_drain(m->worker, "free_shared")) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "%s", zinc_last_error());
  zinc_mpi_shm_alloc_free(m->use_hier ? zinc_mpi_of(m->intra) : m, p);
}

/* Free what create_from made. Collective frees (windows, comms) are
 * skipped once the comm has failed: peers may never join them. */
static void mpi_release(zinc_comm *c) {
  zinc_mpi *m = zinc_mpi_of(c);
  /* batches that never finish are this comm's failure, and its fate's */
  if (settle(m, zinc_mpi_worker_drain(m->worker, "destroy")) != ZINC_OK)
    zinc_log(ZINC_LOG_WARN, "%s", zinc_last_error());
  zinc_mpi_worker_destroy(m->worker);
  m->worker = NULL;
  zinc_comm_fate_leave(c); /* no abort reaches m from here on */
  int finalized = 0;
  MPI_Finalized(&finalized);
  int collective_ok = !finalized && (m->use_shm ? zinc_mpi_shm_agree_teardown(m)
                                                : !atomic_load(&m->abort));
  if (!collective_ok && (m->allocs || m->ctl_win != MPI_WIN_NULL || m->windows_left))
    zinc_log(ZINC_LOG_WARN, "comm mpi: destroying a failed comm: its shared windows are "
             "left to MPI_Finalize");
  if (collective_ok) {
    zinc_mpi_shm_alloc_free_all(m);
    zinc_mpi_shm_teardown(m);
  } else {
    free(m->ctl);
    free(m->scratch);
  }
  zinc_mpi_hier_teardown(m, !collective_ok);
  zinc_mpi_xfer_teardown(m, finalized); /* a failed comm's transfer peers are told */
  zinc_mpi_p2p_teardown(m);
  free(m->node_of);
  free(m->rank_names);
  if (!finalized) {
    if (m->node != MPI_COMM_NULL)
      MPI_Comm_free(&m->node);
    if (m->comm != MPI_COMM_NULL)
      MPI_Comm_free(&m->comm);
  }
  free(m);
  free(c);
}

static void mpi_destroy(zinc_comm *c) {
  if (c)
    mpi_release(c);
}

/* zinc_comm_set_timeout: every copy of the bound (this comm's, its
 * worker's, the node-aware path's children), once no started batch is
 * running (the worker thread reads the bound while it runs one). */
static zinc_status mpi_set_timeout(zinc_comm *c, double timeout_s) {
  zinc_mpi *m = zinc_mpi_of(c);
  c->timeout_s = timeout_s;
  /* a failed comm waits no more (every call fails at once), and its
   * worker may still be giving up on a batch: leave its copies alone */
  if (atomic_load(&m->abort))
    return zinc_mpi_failed_earlier(m, "set the timeout");
  zinc_status st = settle(m, zinc_mpi_worker_drain(m->worker, "set the timeout"));
  if (atomic_load(&m->abort))
    return st;
  m->timeout_s = timeout_s;
  zinc_mpi_worker_set_timeout(m->worker, timeout_s);
  zinc_comm *children[2] = {m->intra, m->inter};
  for (int k = 0; k < 2; k++)
    if (children[k]) {
      zinc_status cst = mpi_set_timeout(children[k], timeout_s);
      st = st == ZINC_OK ? cst : st;
    }
  return st;
}

static const zinc_comm_ops mpi_ops = {
    .name = "mpi",
    .run = mpi_run,
    .start = mpi_start,
    .wait = mpi_wait,
    .test = mpi_test,
    .split = mpi_split,
    .alloc_shared = mpi_alloc_shared,
    .free_shared = mpi_free_shared,
    .destroy = mpi_destroy,
    .set_timeout = mpi_set_timeout,
    .abort = mpi_abort,
    .xfer_start = zinc_mpi_xfer_start,
    .xfer_wait = zinc_mpi_xfer_wait,
    .xfer_drop = zinc_mpi_xfer_drop,
};

/* ------------------------------------------------------------- creation */

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Shared memory is used when every rank of `comm` is on this node, on every
 * rank, and nobody switched it off; the node-aware path when the ranks form
 * equal contiguous power-of-two blocks on several nodes; else p2p. Every
 * rank gathers every rank's (node, real node, wanted), so all decide alike.
 * Children of the node-aware path have their path fixed. */
static zinc_status choose_path(zinc_mpi *m, int path) {
  int rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &m->node);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", -1);
  MPI_Comm_set_errhandler(m->node, MPI_ERRORS_RETURN);
  int node_first = 0;
  /* the node's lowest rank names it (ranks of m->node keep comm's order) */
  MPI_Group node_group, comm_group;
  int zero = 0;
  MPI_Comm_group(m->node, &node_group);
  MPI_Comm_group(m->comm, &comm_group);
  MPI_Group_translate_ranks(node_group, 1, &zero, comm_group, &node_first);
  MPI_Group_free(&node_group);
  MPI_Group_free(&comm_group);
  int wanted = path == PATH_CHILD_P2P ? 0 : zinc_env_flag("ZINC_COMM_MPI_SHM", 1);
  long long fake = path == PATH_CHOOSE ? zinc_env_int("ZINC_COMM_NODE_SIZE", 0, 0, INT_MAX) : 0;
  /* a faked node is a block of MPI_COMM_WORLD ranks, so that a split of
   * the world (the engine's groups) sees the same nodes */
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int mine[3] = {fake ? (int)(world_rank / fake) : node_first, node_first, wanted};
  int *all = malloc(3 * sizeof(int) * (size_t)m->size);
  if (!all)
    return zinc_error(ZINC_ERR_NOMEM, "comm mpi: no memory to choose the path of %d ranks",
                      m->size);
  rc = MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, m->comm);
  if (rc != MPI_SUCCESS) {
    free(all);
    return zinc_mpi_error(rc, "MPI_Allgather choosing the collective path", -1);
  }
  /* name every node by its lowest rank in this comm (from the last rank
   * down, so that the ranks below k still hold their keys) */
  for (int k = m->size - 1; k >= 0; k--)
    for (int j = 0; j <= k; j++)
      if (all[3 * j] == all[3 * k]) {
        all[3 * k] = j;
        break;
      }
  /* the node table (comm.h's node_of, and the comms logger's intra/inter
   * split): the node each rank is on, as this comm sees nodes (faked ones
   * included) */
  m->node_of = calloc((size_t)m->size, sizeof *m->node_of);
  if (!m->node_of) {
    free(all);
    return zinc_error(ZINC_ERR_NOMEM, "comm mpi: no memory for the node table of %d ranks",
                      m->size);
  }
  /* numbered 0, 1, ... in order of their first rank (comm.h) */
  int nnodes = 0;
  for (int k = 0; k < m->size; k++)
    m->node_of[k] = all[3 * k] == k ? nnodes++ : m->node_of[all[3 * k]];
  m->pub->node_of = m->node_of;
  m->pub->nnodes = nnodes;
  int all_wanted = 1, one_node = 1, nested = 1, blocks = 1, ppn = 0, nodes = 0;
  for (int k = 0; k < m->size; k++) {
    const int *t = &all[3 * k];
    all_wanted &= t[2];
    one_node &= t[0] == all[0] && t[1] == all[1];
    nested &= all[3 * t[0] + 1] == t[1]; /* the node lies inside one real node */
    if (t[0] == k) {                     /* a node's first rank */
      int len = 1;
      while (k + len < m->size && all[3 * (k + len)] == k)
        len++;
      if (ppn == 0)
        ppn = len;
      blocks &= len == ppn;
      nodes++;
    } else {
      blocks &= k > 0 && all[3 * (k - 1)] == t[0]; /* contiguous */
    }
  }
  free(all);
  m->use_shm = all_wanted && one_node && nested;
  if (m->use_shm)
    return ZINC_OK;
  MPI_Comm_free(&m->node);
  if (path != PATH_CHOOSE)
    return ZINC_OK;
  const char *why = NULL;
  if (!all_wanted)
    why = "ZINC_COMM_MPI_SHM=0";
  else if (!nested)
    why = "ZINC_COMM_NODE_SIZE groups ranks of different nodes";
  else if (!blocks)
    why = "nodes hold different numbers of ranks or non-contiguous ranks";
  else if (ppn < 2)
    why = "one rank per node";
  else if (!is_pow2(ppn))
    why = "ranks per node not a power of two";
  m->use_hier = why == NULL;
  if (m->use_hier) {
    m->ppn = ppn;
    m->nodes = nodes;
    zinc_log0(ZINC_LOG_DEBUG, "comm mpi: %d ranks on %d nodes of %d, node-aware path", m->size,
              nodes, ppn);
  } else if (!atomic_exchange(&flat_path_logged, 1)) {
    zinc_log0(ZINC_LOG_INFO, "comm mpi: %d ranks, flat point-to-point path (%s)%s", m->size,
              why, all_wanted ? "; the node-aware path needs every node to hold the same "
              "power-of-two number of ranks as a contiguous block" : "");
  }
  return ZINC_OK;
}

/* Build a zinc comm that owns `comm` (freed on failure too). */
static zinc_status create_from(MPI_Comm comm, int thread_level, double timeout_s, int path,
                               zinc_comm **out) {
  zinc_status st = ZINC_OK;
  *out = NULL;
  zinc_comm *c = NULL;
  zinc_mpi *m = NULL;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if ((st = zinc_calloc((void **)&c, 1, sizeof *c, "comm mpi")) != ZINC_OK ||
      (st = zinc_calloc((void **)&m, 1, sizeof *m, "comm mpi state")) != ZINC_OK) {
    free(c);
    MPI_Comm_free(&comm);
    return st;
  }
  c->ops = &mpi_ops;
  c->impl = m;
  c->timeout_s = timeout_s;
  m->pub = c;
  m->comm = comm;
  m->node = MPI_COMM_NULL;
  m->ctl_win = m->scratch_win = MPI_WIN_NULL;
  m->thread_level = thread_level;
  m->timeout_s = timeout_s;
  m->fail_started_at = zinc_env_int("ZINC_TEST_COMM_FAIL_STARTED", 0, 0, LLONG_MAX);
  MPI_Comm_rank(comm, &m->rank);
  MPI_Comm_size(comm, &m->size);
  c->rank = m->rank;
  c->size = m->size;

  ZINC_CHECK_GOTO(choose_path(m, path), st, fail);
  c->algo = m->size == 1 ? "self" : m->use_shm ? "shm" : m->use_hier ? "hier" : "p2p";
  if (m->use_shm)
    ZINC_CHECK_GOTO(zinc_mpi_shm_setup(m), st, fail);
  /* every path: the hier path's flat kinds and every path's all-to-all-v */
  ZINC_CHECK_GOTO(zinc_mpi_p2p_setup(m), st, fail);
  if (m->use_hier)
    ZINC_CHECK_GOTO(zinc_mpi_hier_setup(m), st, fail);
  if (path != PATH_CHOOSE) {
    /* a child: run by its parent's thread */
  } else if (thread_level == MPI_THREAD_MULTIPLE) {
    ZINC_CHECK_GOTO(zinc_mpi_worker_create(worker_exec, m, &m->abort, timeout_s, &m->worker), st,
                    fail);
  } else if (!atomic_exchange(&sync_start_logged, 1)) {
    zinc_log0(ZINC_LOG_INFO, "comm mpi: MPI runs below MPI_THREAD_MULTIPLE (level %d), so "
              "started collectives run at once in the caller's thread (no overlap with "
              "compute); initialise MPI with MPI_THREAD_MULTIPLE, or let zinc do it, to "
              "overlap them", thread_level);
  }
  *out = c;
  return ZINC_OK;
fail:
  mpi_release(c);
  return st;
}

zinc_status zinc_comm_mpi_create(void *mpi_comm, double timeout_s, zinc_comm **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm mpi: create needs an output pointer");
  *out = NULL;
  int provided = MPI_THREAD_SINGLE;
  ZINC_CHECK(mpi_ensure_init(&provided));
  MPI_Comm parent = mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
  MPI_Comm dup;
  int rc = MPI_Comm_dup(parent, &dup);
  if (rc != MPI_SUCCESS)
    return zinc_mpi_error(rc, "MPI_Comm_dup of the trainer's communicator", -1);
  ZINC_CHECK(create_from(dup, provided, timeout_s, PATH_CHOOSE, out));
  zinc_status st = zinc_comm_fate_join(*out, NULL); /* a fate of its own (comm.h) */
  if (st != ZINC_OK) {
    mpi_release(*out);
    *out = NULL;
  }
  return st;
}

zinc_status zinc_mpi_create_child(zinc_mpi *parent, MPI_Comm comm, int shared_memory,
                                  const int *parent_rank, zinc_comm **out) {
  zinc_comm *c = NULL;
  *out = NULL;
  ZINC_CHECK(create_from(comm, parent->thread_level, parent->timeout_s,
                         shared_memory ? PATH_CHILD_SHM : PATH_CHILD_P2P, &c));
  zinc_mpi *m = zinc_mpi_of(c);
  zinc_status st = zinc_calloc((void **)&m->rank_names, (size_t)m->size,
                               sizeof *m->rank_names, "comm mpi child rank names");
  if (st != ZINC_OK) {
    mpi_release(c);
    return st;
  }
  for (int k = 0; k < m->size; k++)
    m->rank_names[k] = zinc_mpi_rank_name(parent, parent_rank[k]);
  m->is_child = 1;
  m->parent_abort = &parent->abort;
  *out = c;
  return ZINC_OK;
}

int zinc_comm_mpi_wanted(void) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    return 1;
  /* started by a launcher (mpirun, srun, a PMI/PMIx process manager)? Only
   * the presence of one of its variables counts, whatever the value (even
   * empty), so this is plain getenv rather than base/env.h's readers, which
   * treat empty as unset. */
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                               "SLURM_NTASKS", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]))
      return 1;
  return 0;
}
