/*
 * comm_mpi_shm.c — the node's shared memory for the mpi comm: the node
 * communicator, the control window (barrier words and each rank's batch
 * descriptors), the scratch window that stages send buffers living in
 * private memory, the alloc_shared allocations, and the node barrier.
 *
 * Windows come from MPI-3 (MPI_Win_allocate_shared with non-contiguous
 * segments); every rank maps every rank's segment, found with
 * MPI_Win_shared_query, so a collective reads peers' buffers with plain
 * loads. Allocation ids are handed out in call order, which is the same on
 * every rank because alloc_shared is collective.
 *
 * The node barrier is a central counter with a generation word in rank 0's
 * control segment: spin briefly (ranks usually arrive within microseconds),
 * then sleep on the generation word with futex (the shared mapping makes it
 * a cross-process futex), so oversubscribed machines are not burnt by
 * spinning. Each rank also records the epoch it entered, which names the
 * missing ranks when a barrier times out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "comm/comm_mpi_impl.h"

/* Pause iterations before a waiting rank yields its core, and before it
 * sleeps on the futex: long in the caller's thread (latency of run()),
 * short in the worker, whose spinning would steal the core the trainer is
 * computing on. */
#define BARRIER_SPIN_YIELD 256
#define BARRIER_SPIN_SLEEP 4096
#define BARRIER_SPIN_SLEEP_WORKER 512
/* Longest single futex sleep: bounds how late abort and the deadline are
 * noticed. */
#define BARRIER_SLEEP_S 0.05

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected, double seconds) {
  struct timespec ts = {.tv_sec = (time_t)seconds,
                        .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---------------------------------------------------------------- barrier */

/* Mark this rank's comm failed, for itself and for its peers, keeping the
 * message just set as the comm's failure. */
static zinc_status mark_failed(zinc_mpi *m, zinc_status st) {
  zinc_mpi_fail(m);
  return st;
}

static zinc_status barrier_failed(zinc_mpi *m, const char *what, uint64_t epoch,
                                  const char *why) {
  char missing[256] = "";
  size_t used = 0;
  for (int k = 0; k < m->size && used + 16 < sizeof missing; k++)
    if (atomic_load(&m->ctl[k]->arrived) < epoch)
      used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                               used ? "," : "", zinc_mpi_rank_name(m, k));
  return mark_failed(m, zinc_error(ZINC_ERR_COMM,
                                   "comm mpi: %s: node barrier %s; rank(s) %s had not arrived "
                                   "(peer died, hung, or ranks issued different collectives); "
                                   "the comm is unusable, destroy it",
                                   what, why, used ? missing : "(none: all arrived late)"));
}

/* A peer whose comm failed, or -1. */
static int failed_peer(zinc_mpi *m) {
  for (int k = 0; k < m->size; k++)
    if (atomic_load(&m->ctl[k]->failed))
      return k;
  return -1;
}

/* Give up on a node peer whose own comm failed, repeating what it said:
 * a peer stuck in a collective with a lost rank (between nodes, on the
 * node-aware path) names that rank, where this barrier only knows that
 * the peer did not come. */
static zinc_status peer_failed(zinc_mpi *m, const char *what, uint64_t epoch, int k) {
  char why[640];
  const char *said = m->ctl[k]->failure;
  snprintf(why, sizeof why, "abandoned (the comm failed on peer rank %d: %.560s)",
           zinc_mpi_rank_name(m, k), said[0] ? said : "no reason published");
  return barrier_failed(m, what, epoch, why);
}

int zinc_mpi_shm_failed_peer(zinc_mpi *m, char *said, size_t n) {
  int k = m->ctl && m->ctl[0] ? failed_peer(m) : -1;
  if (k >= 0) /* published before `failed` was set (zinc_mpi_fail) */
    snprintf(said, n, "%.511s", m->ctl[k]->failure[0] ? m->ctl[k]->failure
                                                       : "no reason published");
  return k < 0 ? -1 : zinc_mpi_rank_name(m, k);
}

/* Ranks behind the others at the node barrier (arrived at an older epoch
 * than the furthest rank): who a timed-out wait is waiting for. */
int zinc_mpi_shm_laggards(zinc_mpi *m, char *buf, size_t n) {
  uint64_t most = 0;
  for (int k = 0; k < m->size; k++)
    if (atomic_load(&m->ctl[k]->arrived) > most)
      most = atomic_load(&m->ctl[k]->arrived);
  size_t used = 0;
  int count = 0;
  buf[0] = '\0';
  for (int k = 0; k < m->size && used + 16 < n; k++)
    if (atomic_load(&m->ctl[k]->arrived) < most) {
      used += (size_t)snprintf(buf + used, n - used, "%s%d", used ? "," : "",
                               zinc_mpi_rank_name(m, k));
      count++;
    }
  return count;
}

/* After a barrier: a peer whose comm failed may have left stale arrivals
 * behind, so the barrier proves nothing; fail too. */
static zinc_status check_peers(zinc_mpi *m, const char *what) {
  int k = failed_peer(m);
  if (k < 0)
    return ZINC_OK;
  return mark_failed(m, zinc_error(ZINC_ERR_COMM, "comm mpi: %s: the comm failed on peer "
                                   "rank %d (timeout or abort there); the comm is unusable, "
                                   "destroy it", what, zinc_mpi_rank_name(m, k)));
}

static void nap(_Atomic uint32_t *word, uint32_t expected, _Atomic uint32_t *sleepers,
                double seconds) {
  atomic_fetch_add(sleepers, 1);
  futex_wait(word, expected, seconds);
  atomic_fetch_sub(sleepers, 1);
}

zinc_status zinc_mpi_shm_barrier(zinc_mpi *m, const char *what) {
  if (atomic_load(&m->abort))
    return mark_failed(m, zinc_mpi_failed_earlier(m, what));
  zinc_mpi_shm_ctl *b = m->ctl[0];
  uint64_t epoch = ++m->epoch;
  atomic_store(&m->ctl[m->rank]->arrived, epoch);
  /* Read the generation before arriving: the release cannot happen
   * before our own arrival, so this is the generation we wait out. */
  uint32_t gen = atomic_load(&b->bar_gen);
  if (atomic_fetch_add(&b->bar_count, 1) == (uint32_t)m->size - 1) {
    atomic_store(&b->bar_count, 0);
    atomic_store(&b->bar_gen, gen + 1);
    if (atomic_load(&b->bar_sleepers))
      futex_wake_all(&b->bar_gen);
    return check_peers(m, what);
  }
  double deadline = 0;
  const unsigned spin_limit = m->in_worker ? BARRIER_SPIN_SLEEP_WORKER : BARRIER_SPIN_SLEEP;
  for (unsigned spin = 0; atomic_load(&b->bar_gen) == gen; spin++) {
    if (spin < spin_limit) {
      if (spin % BARRIER_SPIN_YIELD == BARRIER_SPIN_YIELD - 1)
        sched_yield();
      else
        cpu_relax();
      continue;
    }
    double now = zinc_now();
    if (deadline == 0)
      deadline = zinc_mpi_deadline(m);
    if (zinc_mpi_aborted(m))
      return barrier_failed(m, what, epoch, "abandoned (comm aborted)");
    int k = failed_peer(m);
    if (k >= 0) /* name the ranks still missing, and what the peer lost */
      return peer_failed(m, what, epoch, k);
    if (now > deadline) {
      if (m->note_to && !m->noted) { /* node-aware: tell the other nodes whom we wait for */
        char missing[256] = "";
        size_t used = 0;
        for (int j = 0; j < m->size && used + 16 < sizeof missing; j++)
          if (atomic_load(&m->ctl[j]->arrived) < epoch)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                     used ? "," : "", zinc_mpi_rank_name(m, j));
        snprintf(m->note_out, sizeof m->note_out, "rank %d was waiting at its node barrier "
                 "for rank(s) %s", zinc_mpi_rank_name(m, m->rank), missing);
        m->noted = 1;
        zinc_mpi_p2p_note(m->note_to, m->note_out);
      }
      /* A laggard may be failing itself right now, on a rank lost beyond
       * this node: give it up to min(timeout, 2 s) to say so (comm.h). */
      double grace = m->timeout_s > 0 && m->timeout_s < 2 ? m->timeout_s : 2;
      while (zinc_now() < deadline + grace && atomic_load(&b->bar_gen) == gen &&
             (k = failed_peer(m)) < 0 && !zinc_mpi_aborted(m))
        nap(&b->bar_gen, gen, &b->bar_sleepers, BARRIER_SLEEP_S);
      if (atomic_load(&b->bar_gen) != gen)
        break; /* everybody came after all */
      if (k >= 0)
        return peer_failed(m, what, epoch, k);
      return barrier_failed(m, what, epoch, "timed out");
    }
    nap(&b->bar_gen, gen, &b->bar_sleepers,
        deadline - now < BARRIER_SLEEP_S ? deadline - now : BARRIER_SLEEP_S);
  }
  return check_peers(m, what);
}

int zinc_mpi_shm_agree_teardown(zinc_mpi *m) {
  if (!m->ctl || m->ctl_win == MPI_WIN_NULL)
    return 0;
  int healthy = !atomic_load(&m->abort);
  atomic_store(&m->ctl[m->rank]->leaving, healthy ? 1u : 2u);
  futex_wake_all(&m->ctl[m->rank]->leaving);
  if (!healthy)
    return 0; /* everybody will see our 2 and skip the collective frees */
  /* A healthy rank waits for every peer's verdict: deciding alone would let
   * a peer enter MPI_Win_free that we skip. A failed peer says so through
   * `failed`; a peer that never comes (killed or frozen without anybody
   * noticing) is given up after the comm timeout, and our verdict turns to
   * 2 so that a peer arriving later skips the frees as well. */
  double deadline = 0;
  for (int k = 0; k < m->size; k++) {
    uint32_t v;
    for (unsigned spin = 0; (v = atomic_load(&m->ctl[k]->leaving)) == 0; spin++) {
      if (atomic_load(&m->ctl[k]->failed))
        return 0;
      if (spin < BARRIER_SPIN_SLEEP) {
        cpu_relax();
        continue;
      }
      if (deadline == 0)
        deadline = zinc_mpi_deadline(m);
      if (zinc_now() > deadline) {
        atomic_store(&m->ctl[m->rank]->leaving, 2u);
        futex_wake_all(&m->ctl[m->rank]->leaving);
        zinc_log(ZINC_LOG_WARN, "comm mpi: destroy: rank %d did not reach destroy within the "
                 "comm timeout of %.1f s; its shared windows are left to MPI_Finalize",
                 zinc_mpi_rank_name(m, k), m->timeout_s);
        return 0;
      }
      futex_wait(&m->ctl[k]->leaving, 0, BARRIER_SLEEP_S); /* woken on its arrival */
    }
    if (v != 1)
      return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- windows */

/* A shared window of `bytes` per rank on the node comm; peers[k] receives
 * rank k's segment. */
static zinc_status window_create(zinc_mpi *m, size_t bytes, const char *what,
                                 MPI_Win *win, char **peers) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char *base = NULL;
  int rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, m->node, &base, win);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    char ctx[256];
    snprintf(ctx, sizeof ctx, "MPI_Win_allocate_shared of %zu bytes per rank for %s (the "
             "memory lives in Open MPI's osc_sm_backing_directory, /dev/shm by default: is "
             "it large enough?)", bytes, what);
    return zinc_mpi_error(rc, ctx, -1);
  }
  MPI_Win_set_errhandler(*win, MPI_ERRORS_RETURN);
  for (int k = 0; k < m->size; k++) {
    MPI_Aint size;
    int disp;
    char *p = NULL;
    rc = MPI_Win_shared_query(*win, k, &size, &disp, &p);
    if (rc != MPI_SUCCESS) {
      MPI_Win_free(win);
      return zinc_mpi_error(rc, "MPI_Win_shared_query", k);
    }
    peers[k] = p;
  }
  return ZINC_OK;
}

zinc_status zinc_mpi_shm_setup(zinc_mpi *m) {
  zinc_status st = ZINC_OK;
  m->ctl_win = m->scratch_win = MPI_WIN_NULL;
  ZINC_CHECK(zinc_calloc((void **)&m->ctl, (size_t)m->size, sizeof *m->ctl, "comm mpi control map"));
  ZINC_CHECK(zinc_calloc((void **)&m->scratch, (size_t)m->size, sizeof *m->scratch,
                         "comm mpi scratch map"));
  /* Every piece must hold at least one element of the widest type for each
   * rank plus the all-reduce result. */
  size_t floor = (size_t)(m->size + 1) * 64;
  m->scratch_bytes =
      (size_t)zinc_env_int("ZINC_COMM_SHM_SCRATCH", ZINC_SHM_SCRATCH_DEFAULT, 1, LLONG_MAX);
  if (m->scratch_bytes < floor)
    m->scratch_bytes = floor;
  m->scratch_bytes = zinc_round_up(m->scratch_bytes, 64);

  ZINC_CHECK_GOTO(window_create(m, sizeof(zinc_mpi_shm_ctl), "the control block", &m->ctl_win,
                                (char **)m->ctl),
                  st, fail);
  memset(m->ctl[m->rank], 0, sizeof(zinc_mpi_shm_ctl));
  ZINC_CHECK_GOTO(window_create(m, m->scratch_bytes, "staging", &m->scratch_win, m->scratch),
                  st, fail);
  /* Nobody may touch a control segment before its owner has zeroed it. */
  int rc = MPI_Barrier(m->node);
  if (rc != MPI_SUCCESS) {
    st = zinc_mpi_error(rc, "MPI_Barrier after the shared windows were made", -1);
    goto fail;
  }
  return ZINC_OK;
fail:
  zinc_mpi_shm_teardown(m);
  return st;
}

void zinc_mpi_shm_teardown(zinc_mpi *m) {
  if (m->scratch_win != MPI_WIN_NULL)
    MPI_Win_free(&m->scratch_win);
  if (m->ctl_win != MPI_WIN_NULL)
    MPI_Win_free(&m->ctl_win);
  free(m->ctl);
  free(m->scratch);
  m->ctl = NULL;
  m->scratch = NULL;
}

/* ------------------------------------------------------------ allocations */

zinc_status zinc_mpi_shm_alloc_create(zinc_mpi *m, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0)
    return ZINC_OK;
  zinc_mpi_shm_alloc *a = NULL;
  ZINC_CHECK(zinc_calloc((void **)&a, 1, sizeof *a, "comm mpi shared allocation"));
  a->id = m->next_alloc_id++;
  a->bytes = bytes;
  a->win = MPI_WIN_NULL;
  zinc_status st = ZINC_OK;
  if (m->use_shm) {
    ZINC_CHECK_GOTO(zinc_calloc((void **)&a->peer, (size_t)m->size, sizeof *a->peer,
                                "comm mpi shared allocation map"),
                    st, fail);
    ZINC_CHECK_GOTO(window_create(m, bytes, "alloc_shared", &a->win, a->peer), st, fail);
    a->base = a->peer[m->rank];
  } else {
    ZINC_CHECK_GOTO(zinc_aligned_alloc((void **)&a->base, 4096, zinc_round_up(bytes, 4096),
                                       "comm mpi alloc_shared (no shared memory path)"),
                    st, fail);
  }
  a->next = m->allocs;
  m->allocs = a;
  *out = a->base;
  return ZINC_OK;
fail:
  free(a->peer);
  free(a);
  return st;
}

static void alloc_release(zinc_mpi_shm_alloc *a) {
  if (a->win != MPI_WIN_NULL)
    MPI_Win_free(&a->win);
  else
    free(a->base);
  free(a->peer);
  free(a);
}

/* MPI_Win_free is collective: every rank of the node must enter it. On a
 * failed comm (here or on a peer) some never will, so the window is left to
 * MPI_Finalize; on a healthy one a node barrier, bounded by the timeout,
 * first makes sure every peer is there. */
static void alloc_free_window(zinc_mpi *m, zinc_mpi_shm_alloc *a) {
  if (!zinc_mpi_is_failed(m) && zinc_mpi_shm_barrier(m, "free_shared") == ZINC_OK) {
    alloc_release(a);
    return;
  }
  zinc_log(ZINC_LOG_DEBUG, "comm mpi: free_shared on a failed comm: the window of %zu bytes "
           "is left to MPI_Finalize", a->bytes);
  m->windows_left++;
  free(a->peer);
  free(a);
}

void zinc_mpi_shm_alloc_free(zinc_mpi *m, void *p) {
  for (zinc_mpi_shm_alloc **pp = &m->allocs; *pp; pp = &(*pp)->next) {
    if ((*pp)->base == p) {
      zinc_mpi_shm_alloc *a = *pp;
      *pp = a->next;
      if (a->win != MPI_WIN_NULL)
        alloc_free_window(m, a);
      else
        alloc_release(a);
      return;
    }
  }
  if (p)
    zinc_log(ZINC_LOG_WARN, "comm mpi: free_shared(%p): not an alloc_shared pointer of this "
             "comm; ignored", p);
}

void zinc_mpi_shm_alloc_free_all(zinc_mpi *m) {
  while (m->allocs) {
    zinc_mpi_shm_alloc *a = m->allocs;
    m->allocs = a->next;
    alloc_release(a);
  }
}

zinc_mpi_shm_alloc *zinc_mpi_shm_find(zinc_mpi *m, const void *p, size_t bytes) {
  const char *q = p;
  for (zinc_mpi_shm_alloc *a = m->allocs; a; a = a->next)
    if (a->win != MPI_WIN_NULL && q >= a->base && bytes <= a->bytes &&
        (size_t)(q - a->base) <= a->bytes - bytes)
      return a;
  return NULL;
}

zinc_mpi_shm_alloc *zinc_mpi_shm_find_id(zinc_mpi *m, int32_t id) {
  for (zinc_mpi_shm_alloc *a = m->allocs; a; a = a->next)
    if (a->id == id)
      return a;
  return NULL;
}
