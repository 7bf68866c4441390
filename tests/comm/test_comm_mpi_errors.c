/*
 * test_comm_mpi_errors.c — what the mpi comm does with bad input and lost
 * peers:
 *   - argument errors (NULL buffers, bad root, unknown type/kind/op, missing
 *     all-gatherv vectors, negative split color, NULL request) return
 *     ZINC_ERR_INVALID with a message, touch nothing, and leave the comm
 *     usable;
 *   - ranks issuing different collectives get ZINC_ERR_COMM on every rank
 *     (shared-memory path), and the comm stays usable;
 *   - a rank that never arrives: every other rank gets ZINC_ERR_COMM naming
 *     the operation and the missing rank after timeout_s, both from run()
 *     and from wait() on a started batch; later calls still name it;
 *     free_shared of a shared buffer and destroy return at once (no
 *     collective MPI_Win_free on a failed comm);
 *   - the same on the node-aware path (nodes of 2 ranks faked with
 *     ZINC_COMM_NODE_SIZE=2, at 4+ ranks), from a reduce-scatter and an
 *     all-reduce: the late rank's node peer and its peer on another node
 *     (same local index) name it, every waiting rank fails within the timeout
 *     plus a margin, and free_shared and destroy return at once;
 *   - deadlines saturate: a timeout of 1e19 s waits (without burning the
 *     CPU) instead of overflowing.
 * A missing rank is made by ordering (it arrives only after the others
 * have given up, late_rank_arrives), never by a sleep: a sleep shorter
 * than a loaded machine's delays let the rank arrive in time.
 *
 * The test initialises and finalises MPI itself: its comms fail, and zinc
 * then leaves MPI unfinalised at exit (a lost peer would hang
 * MPI_Finalize); here every rank is alive, so finalising is safe.
 */
#define _GNU_SOURCE
#include <math.h>
#include <sys/resource.h>
#include <time.h>

#include "comm/comm_check.h"
#include "comm/comm_mpi_impl.h"

static void expect_status(zinc_status got, zinc_status want, const char *needle,
                          const char *what) {
  CHECK(got == want, "%s: got %s, want %s (%s)", what, zinc_status_name(got),
        zinc_status_name(want), zinc_last_error());
  CHECK(strlen(zinc_last_error()) > 0, "%s: empty error message", what);
  if (needle)
    CHECK(strstr(zinc_last_error(), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
          zinc_last_error(), needle);
}

static void test_arguments(zinc_comm *c) {
  float buf[8] = {0}, out[64];
  const zinc_comm_ops *ops = c->ops;
  expect_status(zinc_comm_allreduce(c, NULL, out, 4, ZINC_F32, ZINC_OP_SUM), ZINC_ERR_INVALID,
                "NULL", "all-reduce from NULL");
  expect_status(zinc_comm_reduce_scatter(c, buf, NULL, 1, ZINC_F32), ZINC_ERR_INVALID, "NULL",
                "reduce-scatter into NULL");
  expect_status(zinc_comm_broadcast(c, buf, 4, ZINC_F32, -1), ZINC_ERR_INVALID, "root",
                "broadcast root -1");
  expect_status(zinc_comm_broadcast(c, buf, 4, ZINC_F32, c->size), ZINC_ERR_INVALID, "root",
                "broadcast root = size");
  expect_status(zinc_comm_allgather(c, buf, out, 2, 99), ZINC_ERR_INVALID, "type",
                "all-gather of type 99");
  expect_status(zinc_comm_allreduce(c, buf, out, 2, ZINC_F32, (zinc_comm_op)7),
                ZINC_ERR_INVALID, "op", "all-reduce op 7");
  zinc_coll bad_kind = {.kind = (zinc_coll_kind)42};
  expect_status(ops->run(c, &bad_kind, 1), ZINC_ERR_INVALID, "kind", "unknown kind");
  expect_status(zinc_comm_allgatherv(c, buf, 1, out, NULL, NULL, ZINC_F32), ZINC_ERR_INVALID,
                "counts", "all-gatherv without counts");
  zinc_comm_req *req = (zinc_comm_req *)&req;
  expect_status(ops->start(c, &bad_kind, 1, &req), ZINC_ERR_INVALID, "kind",
                "start of an unknown kind");
  CHECK(req == NULL, "failed start left a request behind");
  zinc_coll ok = {.kind = ZINC_COLL_BARRIER};
  expect_status(ops->start(c, &ok, 1, NULL), ZINC_ERR_INVALID, "request", "start without req");
  zinc_comm *sub = NULL;
  expect_status(ops->split(c, -3, 0, &sub), ZINC_ERR_INVALID, "color", "split color -3");
  CHECK(sub == NULL, "failed split returned a comm");
  /* still usable, and count 0 with NULL buffers is fine */
  CHECK_OK(zinc_comm_allreduce(c, NULL, NULL, 0, ZINC_F32, ZINC_OP_SUM));
  int one = 1, sum = 0;
  CHECK_OK(zinc_comm_allreduce(c, &one, &sum, 1, ZINC_DT_I32, ZINC_OP_SUM));
  CHECK(sum == c->size, "comm unusable after argument errors: sum %d", sum);
}

/* Rank 0 issues 10 elements, the others 11: caught on every rank. */
static void test_mismatch(zinc_comm *c) {
  float in[11] = {1}, out[11];
  zinc_status st = zinc_comm_allreduce(c, in, out, c->rank == 0 ? 10 : 11, ZINC_F32, ZINC_OP_SUM);
  expect_status(st, ZINC_ERR_COMM, "differs between ranks", "mismatched all-reduce");
  int one = 1, sum = 0;
  CHECK_OK(zinc_comm_allreduce(c, &one, &sum, 1, ZINC_DT_I32, ZINC_OP_SUM));
  CHECK(sum == c->size, "comm unusable after a mismatch: sum %d", sum);
}

/* Does `msg` name `rank`: "rank N" or a list "rank(s) A,B,..." holding it? */
static int names_rank(const char *msg, int rank) {
  for (const char *p = strstr(msg, "rank"); p; p = strstr(p + 1, "rank")) {
    const char *q = p + 4;
    if (!strncmp(q, "(s)", 3))
      q += 3;
    if (*q++ != ' ')
      continue;
    for (;;) {
      char *end;
      long v = strtol(q, &end, 10);
      if (end == q)
        break;
      if (v == rank)
        return 1;
      if (*end != ',')
        break;
      q = end + 1;
    }
  }
  return 0;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* After a failure: free_shared and destroy return at once (no collective
 * free waits for the missing rank). */
static void release_failed(zinc_comm *c, void *shared, const char *what) {
  double t = zinc_now();
  c->ops->free_shared(c, shared);
  CHECK(zinc_now() - t < 1.0, "%s: rank %d: free_shared after the failure took %.1f s", what,
        c->rank, zinc_now() - t);
  t = zinc_now();
  zinc_comm_destroy(c);
  CHECK(zinc_now() - t < 1.0, "%s: rank %d: destroy took %.1f s", what, c->rank,
        zinc_now() - t);
}

/* The late rank of a test holds back until every other rank has given up
 * on it (they meet it in an MPI barrier over the world, outside the comm
 * under test): a missing rank made by ordering, not by a sleep that a
 * loaded machine can outlast. Then it makes its own late call, and the
 * others wait for that too (late_done), so that no message of it arrives
 * for a comm its peers have already freed. */
static void late_rank_arrives(void) { MPI_Barrier(MPI_COMM_WORLD); }
static void others_gave_up(void) { MPI_Barrier(MPI_COMM_WORLD); }
static void late_done(void) { MPI_Barrier(MPI_COMM_WORLD); }

/* Rank 0 comes late to a barrier; the others time out. Then everybody
 * destroys the comm, which must not hang. */
static void test_timeout(const char *path, int started) {
  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, 0.25, &c));
  if (!c)
    return;
  char what[96];
  snprintf(what, sizeof what, "%s: %s barrier with rank 0 missing", path,
           started ? "started" : "run");
  void *shared = NULL; /* freed after the failure: must not wait for peers */
  CHECK_OK(c->ops->alloc_shared(c, 4096, &shared));
  if (c->rank == 0) {
    late_rank_arrives();
    zinc_status st = zinc_comm_barrier(c); /* the others gave up: fails or passes */
    CHECK(st == ZINC_OK || st == ZINC_ERR_COMM, "%s: late rank got %s", what,
          zinc_status_name(st));
  } else if (started) {
    zinc_coll b = {.kind = ZINC_COLL_BARRIER};
    zinc_comm_req *req = NULL;
    CHECK_OK(c->ops->start(c, &b, 1, &req));
    if (req)
      expect_status(c->ops->wait(c, req), ZINC_ERR_COMM, "barrier", what);
  } else {
    expect_status(zinc_comm_barrier(c), ZINC_ERR_COMM, "barrier", what);
  }
  if (c->rank != 0) {
    /* every waiting rank names the missing rank 0, even when another
     * waiting rank's timeout fired first and failed the comm for all */
    CHECK(names_rank(zinc_last_error(), 0), "%s: rank %d: missing rank 0 not named: %s",
          what, c->rank, zinc_last_error());
    /* the comm stays failed, and later calls still name rank 0 */
    expect_status(zinc_comm_barrier(c), ZINC_ERR_COMM, "failed earlier", "barrier after a timeout");
    CHECK(names_rank(zinc_last_error(), 0), "%s: rank %d: a later call does not name rank 0: %s",
          what, c->rank, zinc_last_error());
    others_gave_up();
  }
  late_done();
  release_failed(c, shared, what);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Node-aware path: the last rank comes late to a reduce-scatter (or
 * all-reduce), run or started. Its node peer waits for it at the node
 * barrier, its peer of the same local index on the node before waits for
 * its message between nodes: both name it by its number in this comm (not
 * by its number in the node's or the cross-node comm). The others fail
 * within the timeout (naming whom they waited for). An all-gather goes
 * between nodes first: rank 0 gets its part from the other node and then
 * waits at the node barrier for rank 1, which is still waiting for the
 * late rank's message; rank 0 must repeat rank 1's failure, which names
 * the late rank, rather than only say that rank 1 gave up. It does so if
 * rank 1 fails within the node barrier's grace, min(timeout, 2 s): the
 * timeout here (1.5 s) is long enough for a loaded machine to schedule
 * rank 1 in that time. */
static void test_timeout_hier(int started, zinc_coll_kind kind) {
  const double timeout = 1.5;
  setenv("ZINC_COMM_NODE_SIZE", "2", 1);
  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, timeout, &c));
  unsetenv("ZINC_COMM_NODE_SIZE");
  if (!c)
    return;
  CHECK(zinc_mpi_of(c)->use_hier, "node size 2 at %d ranks: not the node-aware path", c->size);
  char what[128];
  const int late = c->size - 1;
  snprintf(what, sizeof what, "node-aware: %s %s with rank %d missing",
           started ? "started" : "run", zinc_coll_name(kind), late);
  const size_t count = 40000; /* all-reduce: large enough to take reduce-scatter + all-gather */
  float *shared = NULL;
  CHECK_OK(c->ops->alloc_shared(c, (size_t)c->size * count * sizeof(float), (void **)&shared));
  float *out = calloc(count, sizeof(float));
  zinc_coll o = {.kind = kind, .send = shared, .recv = out, .count = count, .dtype = ZINC_F32,
                 .op = ZINC_OP_SUM};
  if (kind == ZINC_COLL_ALLGATHER) {
    o.send = out;
    o.recv = shared;
  }
  double t0 = zinc_now();
  if (c->rank == late) {
    late_rank_arrives();
    zinc_status st = c->ops->run(c, &o, 1);
    CHECK(st == ZINC_OK || st == ZINC_ERR_COMM, "%s: late rank got %s", what,
          zinc_status_name(st));
  } else {
    zinc_status st;
    if (started) {
      zinc_comm_req *req = NULL;
      CHECK_OK(c->ops->start(c, &o, 1, &req));
      st = req ? c->ops->wait(c, req) : ZINC_ERR_COMM;
    } else {
      st = c->ops->run(c, &o, 1);
    }
    expect_status(st, ZINC_ERR_COMM, NULL, what);
    double waited = zinc_now() - t0;
    /* the timeout, a node barrier's grace, a started wait's grace, and a
     * margin */
    CHECK(waited < 3 * timeout + 1.0, "%s: rank %d failed after %.2f s (timeout %.2f s)",
          what, c->rank, waited, timeout);
    if (c->rank == late - 1 || c->rank == late - 2 || kind == ZINC_COLL_ALLGATHER)
      CHECK(names_rank(zinc_last_error(), late), "%s: rank %d: missing rank %d not named: %s",
            what, c->rank, late, zinc_last_error());
    expect_status(c->ops->run(c, &o, 1), ZINC_ERR_COMM, "failed earlier", what);
    others_gave_up();
  }
  late_done();
  release_failed(c, shared, what);
  free(out);
  MPI_Barrier(MPI_COMM_WORLD);
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
         (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* The deadline arithmetic, then a real wait under a huge timeout: rank 0
 * comes 0.5 s late, the others wait for it in `wait` and must neither fail
 * nor spin. */
static void test_huge_timeout(void) {
  struct timespec from = {1000, 900000000L};
  struct timespec t = zinc_mpi_timespec_after(from, 1e19);
  CHECK(t.tv_sec == 1000 + (time_t)ZINC_MPI_MAX_TIMED_WAIT_S && t.tv_nsec == 900000000L,
        "1e19 s after 1000.9: %lld.%09ld", (long long)t.tv_sec, t.tv_nsec);
  t = zinc_mpi_timespec_after(from, INFINITY);
  CHECK(t.tv_sec == 1000 + (time_t)ZINC_MPI_MAX_TIMED_WAIT_S, "inf: %lld", (long long)t.tv_sec);
  t = zinc_mpi_timespec_after(from, NAN);
  CHECK(t.tv_sec == 1000 + (time_t)ZINC_MPI_MAX_TIMED_WAIT_S, "NaN: %lld", (long long)t.tv_sec);
  t = zinc_mpi_timespec_after(from, -5);
  CHECK(t.tv_sec == 1000 && t.tv_nsec == 900000000L, "-5: %lld.%09ld", (long long)t.tv_sec,
        t.tv_nsec);
  t = zinc_mpi_timespec_after(from, 0.25);
  CHECK(t.tv_sec == 1001 && t.tv_nsec == 150000000L, "0.25: %lld.%09ld", (long long)t.tv_sec,
        t.tv_nsec);

  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, 1e19, &c));
  if (!c)
    return;
  zinc_coll b = {.kind = ZINC_COLL_BARRIER};
  zinc_comm_req *req = NULL;
  if (c->rank == 0)
    sleep_s(0.5);
  double cpu0 = cpu_seconds(), t0 = zinc_now();
  CHECK_OK(c->ops->start(c, &b, 1, &req));
  if (req)
    CHECK_OK(c->ops->wait(c, req));
  double cpu = cpu_seconds() - cpu0, wall = zinc_now() - t0;
  CHECK(c->rank == 0 || cpu < 0.6 * wall + 0.05,
        "rank %d: waiting %.2f s under a 1e19 s timeout used %.2f s of CPU", c->rank, wall, cpu);
  zinc_comm_destroy(c);
}

int main(void) {
  int provided = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, 30.0, &c));
  if (c) {
    test_arguments(c);
    if (c->size > 1)
      test_mismatch(c);
    zinc_comm_destroy(c);
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    test_huge_timeout();
    test_timeout("shm", 0);
    test_timeout("shm", 1);
    if (size >= 4 && size % 2 == 0) {
      test_timeout_hier(0, ZINC_COLL_REDUCE_SCATTER);
      test_timeout_hier(1, ZINC_COLL_ALLREDUCE);
      test_timeout_hier(0, ZINC_COLL_ALLGATHER);
    }
    setenv("ZINC_COMM_MPI_SHM", "0", 1);
    c = NULL;
    CHECK_OK(zinc_comm_mpi_create(NULL, 30.0, &c));
    if (c) {
      test_arguments(c);
      zinc_comm_destroy(c);
    }
    test_timeout("p2p", 0);
    test_timeout("p2p", 1);
  }
  int rc = check_finish("test_comm_mpi_errors");
  MPI_Finalize();
  return rc;
}
