/*
 * comm_nccl.c — the NCCL comm: the collectives of comm/comm.h on device
 * buffers, for the cuda device.
 *
 * Creation: rank 0 of the bootstrap comm (an mpi comm; any comm that can
 * broadcast bytes) makes the NCCL unique id and broadcasts it with a flag
 * saying whether that worked, so every rank fails together if it did not;
 * then ncclCommInitRankConfig. No TCP port, no file.
 *
 * Streams: every NCCL comm of the process on one CUDA device launches on
 * one non-blocking stream, the device's launch queue (nccl_queue), shared
 * by reference count: the data-parallel, model-parallel and hpZ comms the
 * engine makes on a GPU, and the children of their splits. NCCL documents
 * that concurrent operations on several communicators of one device can
 * deadlock unless every rank runs them in one order: on separate streams
 * the GPU may start comm B's kernel before comm A's on one rank and the
 * other way round on its peer, and each then waits inside a kernel for a
 * peer busy in the other communicator. On one stream the device runs NCCL
 * work in launch order, and the engine launches in the same order on every
 * rank (every collective it issues follows from the trainer's calls, never
 * from timing: engine/grads.c), so every rank runs them in the same order.
 * The price: collectives of two comms of one device do not overlap each
 * other (they still overlap compute). A mutex per queue makes each batch's
 * launch one block on the stream when several threads use comms of one
 * device. Every batch is first ordered after the work already queued on
 * the trainer's compute stream (an event recorded there, waited on by the
 * queue's stream), then enqueued inside one ncclGroupStart/End, then
 * followed by an event that marks its end. Batches therefore complete in
 * the order they were started, on one comm and across the comms of a
 * device.
 *
 * 16-bit sums: a sum all-reduce or reduce-scatter of bf16 or fp16 data is
 * run in fp32, as the mpi backend adds (comm.h): the batch's 16-bit inputs
 * are cast up into an fp32 scratch block, NCCL reduces the fp32 values,
 * and each result is rounded to 16 bits once (zinc_cuda_cast, round to
 * nearest even). NCCL's own bf16 sum would round every partial sum as it
 * passes a rank, losing small contributions to a large sum as ranks grow.
 * Scratch: 4 bytes per 16-bit element the batch reduces (a reduce-scatter
 * of `count` per rank: 4 * size * count; an all-reduce: 4 * count), taken
 * from the queue's stream-ordered memory pool (cudaMallocFromPoolAsync)
 * when the batch is launched and given back (cudaFreeAsync) behind it, so
 * the peak is the batches in flight at once; the pool keeps what it got
 * (no release threshold) and is freed with the queue. For the engine's
 * gradient reductions that is 4 bytes per element of a reduce bucket
 * (4 * reduce_bucket_size bytes per batch in flight); its memory
 * estimate (engine/memory/estimate.c) counts no comm scratch and leaves
 * it out.
 *
 * Failure and timeouts: the NCCL communicators are nonblocking
 * (config.blocking = 0), so no NCCL call can hang the host: init, split,
 * group end and finalize may return ncclInProgress and are settled by
 * polling ncclCommGetAsyncError. `test`, `run` and `settle` poll the
 * batch's event and ncclCommGetAsyncError on the host, and give up after
 * timeout_s seconds from the start of the batch (timeout_s <= 0: no limit).
 * Any asynchronous error or timeout aborts the NCCL communicator
 * (ncclCommAbort, which also stops its kernels) and returns ZINC_ERR_COMM;
 * every later call says the comm was aborted, and destroy is all that is
 * left to do. A lost peer thus becomes an error instead of a hang.
 *
 * Waits (comm.h, "Streams"): `wait` does not block the host: it makes the
 * compute stream wait for the batch's end event (cudaStreamWaitEvent) and
 * hands the event to the comm's list of ordered batches. Spinning the host on every wait would cost a core and the
 * overlap of the host's next launches with the collective; the host waits
 * only where it reads the data: `run` (split's node table), `test` saying
 * done, and `settle`, which the engine calls before it synchronises the
 * compute stream to read results (zinc_engine_sync). What bounds a batch
 * nobody polls is the watchdog, one thread per comm started by its first
 * device-side wait: it sleeps until the oldest ordered batch's deadline
 * (its start + timeout_s) and aborts the comm if that batch is not done
 * then. The abort stops NCCL's kernels, so a compute stream (and a host
 * synchronising it, or a copy ordered after it) waiting for a lost peer
 * goes on within the timeout; the data is then invalid and the comm's next
 * call, settle included, says so. The mutex `mu` guards the communicator
 * handle, the abort reason, the ordered list and the spare events between
 * the caller's thread and the watchdog.
 *
 * Operations: all-reduce, reduce-scatter, all-gather and broadcast are
 * NCCL's; all-gatherv is one ncclBroadcast per rank with a non-zero count,
 * grouped; all-to-all-v is one ncclRecv and one ncclSend per rank with a
 * non-zero count (itself included), grouped; barrier is a one-element max
 * all-reduce of a device word. Transfers (comm.h, "Transfers") exchange
 * each pair's header over the bootstrap comm first (an mpi transfer with
 * check_only: a size mismatch fails both ends before anything is queued),
 * then run as one group of ncclSend/ncclRecv, a batch like any other
 * (ordered after the compute stream, waited for on the device, bounded by
 * the watchdog).
 *
 * Nodes: node_of is the bootstrap comm's table (NCCL ranks are the
 * bootstrap's); a split gathers its members' nodes over the new comm (one
 * all-gather of an int32 per rank, under the comm's timeout) and numbers
 * them again in order of their first rank.
 *
 * Arithmetic: NCCL's reductions are NOT rank-ordered as the mpi backend's
 * are (comm.h's deterministic contract): the order of additions depends on
 * NCCL's algorithm (ring, tree, NVLS) and protocol, chosen by message size
 * and topology. 16-bit sums are added in fp32 and rounded once, as the mpi
 * backend's (above), so at 2 ranks (a + b, one rounding in any order) they
 * equal its bits; at more ranks they differ from them by the fp32 order
 * only (at most one unit in the last 16-bit place). Results are repeatable
 * for the same sizes, ranks, NCCL version and topology; the stages oracle
 * on GPUs compares NCCL runs with NCCL runs of the same bucket layout.
 *
 * A comm is used by one thread at a time, as an NCCL communicator is (the
 * watchdog only aborts it, under mu). Memory passed to a batch must stay
 * allocated until the batch is done: test said so, run or settle returned,
 * or the compute stream reached the point where wait ordered it.
 * A batch may hold at most 2048 NCCL calls (NCCL's group limit; an
 * all-gatherv counts one per rank, an all-to-all-v two).
 *
 * Built without CUDA, zinc_comm_nccl_create fails with ZINC_ERR_UNSUPPORTED.
 */
#include "comm/comm.h"
#include "comm/comm_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#ifdef ZINC_HAVE_CUDA

#include <pthread.h>
#include <sched.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels/kernels.h"

/* A CUDA device's launch queue ("Streams" above): one per device in use,
 * shared by every NCCL comm of the process on it. */
typedef struct nccl_queue {
  int cuda_device;
  int refs;                 /* comms using it (under queues_mu) */
  cudaStream_t stream;      /* every NCCL launch of the process on this device */
  cudaMemPool_t scratch;    /* fp32 scratch of 16-bit sums; NULL until first needed */
  pthread_mutex_t launch;   /* held while a batch is enqueued */
  struct nccl_queue *next;
} nccl_queue;

/* The process's launch queues. Global mutable state on purpose: NCCL's
 * ordering rule holds per device and per process, whichever engine or
 * bootstrap made the communicator. */
static pthread_mutex_t queues_mu = PTHREAD_MUTEX_INITIALIZER;
static nccl_queue *queues;

/* The device's queue (made on first use); the current device is
 * cuda_device. */
static zinc_status queue_get(int cuda_device, nccl_queue **out) {
  *out = NULL;
  pthread_mutex_lock(&queues_mu);
  nccl_queue *q = queues;
  while (q && q->cuda_device != cuda_device)
    q = q->next;
  cudaError_t err = cudaSuccess;
  if (!q && (q = calloc(1, sizeof *q)) != NULL) {
    err = cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      free(q);
      q = NULL;
    } else {
      q->cuda_device = cuda_device;
      pthread_mutex_init(&q->launch, NULL);
      q->next = queues;
      queues = q;
    }
  }
  if (q)
    q->refs++;
  pthread_mutex_unlock(&queues_mu);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl: creating the launch stream of cuda device "
                      "%d: %s", cuda_device, cudaGetErrorString(err));
  if (!q)
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl: out of host memory for the launch queue of "
                      "cuda device %d", cuda_device);
  *out = q;
  return ZINC_OK;
}

/* Drop a reference; the last one frees the queue. Work still queued on the
 * stream finishes first (cudaStreamDestroy and cudaMemPoolDestroy release
 * their resources once it has), so nothing here blocks. */
static void queue_put(nccl_queue *q) {
  if (!q)
    return;
  pthread_mutex_lock(&queues_mu);
  int last = --q->refs == 0;
  if (last) {
    nccl_queue **at = &queues;
    while (*at != q)
      at = &(*at)->next;
    *at = q->next;
  }
  pthread_mutex_unlock(&queues_mu);
  if (!last)
    return;
  cudaStreamDestroy(q->stream);
  if (q->scratch)
    cudaMemPoolDestroy(q->scratch);
  pthread_mutex_destroy(&q->launch);
  free(q);
}

/* The queue's scratch pool, made on first use: device memory of
 * q->cuda_device that it keeps once it has it (no release threshold). */
static cudaError_t queue_scratch_pool(nccl_queue *q) {
  if (q->scratch)
    return cudaSuccess;
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = q->cuda_device;
  cudaError_t err = cudaMemPoolCreate(&q->scratch, &props);
  if (err != cudaSuccess) {
    q->scratch = NULL;
    return err;
  }
  uint64_t keep = UINT64_MAX;
  return cudaMemPoolSetAttribute(q->scratch, cudaMemPoolAttrReleaseThreshold, &keep);
}

struct zinc_comm_req {
  cudaEvent_t done;   /* recorded on the comm stream after the batch */
  double started;     /* zinc_now() when the batch was started */
  int nops;
  zinc_coll_kind first_kind;
  const char *what;   /* a transfer batch's name; NULL: first_kind's */
  zinc_coll *logged;  /* the batch, kept for the comms logger (NULL: off) */
};

/* What a request is, for messages: "all-reduce", "transfer". */
static const char *req_name(const zinc_comm_req *req) {
  return req->what ? req->what : zinc_coll_name(req->first_kind);
}

/* A transfer batch (comm.h, "Transfers"): a batch's request. */
struct zinc_xfer_req {
  zinc_comm_req *batch;
};

typedef struct {
  ncclComm_t nccl;           /* NULL once aborted or destroyed */
  int cuda_device;
  cudaStream_t compute;      /* the trainer's stream (not owned; NULL = legacy default) */
  nccl_queue *queue;         /* the device's launch queue (one reference) */
  cudaStream_t stream;       /* queue->stream */
  cudaEvent_t compute_ready; /* recorded on compute before each batch */
  int32_t *barrier_word;     /* (1) i32, device: operand of barrier all-reduces */
  cudaEvent_t *spare;        /* (nspare) events for requests */
  int nspare, cap_spare;
  int *node_of;              /* (size) zinc_comm.node_of */
  zinc_comm *bootstrap;      /* the comm the id came over (not owned; it must
                                outlive this one): transfers exchange their
                                headers over it. NULL for a split's comm */
  char abort_reason[256];    /* non-empty once aborted */
  /* Batches `wait` ordered the compute stream after, not yet seen done, in
   * start order (they complete in it): their end events and start times.
   * The watchdog aborts the comm when the oldest outlives timeout_s. */
  cudaEvent_t *ordered;      /* (nordered) */
  double *ordered_t0;        /* (nordered) zinc_now() at start */
  int nordered, cap_ordered;
  /* mu guards nccl, abort_reason, ordered and spare against the watchdog
   * thread (started by the first device-side wait); it sleeps on `wake`
   * until the oldest ordered batch's deadline. */
  pthread_mutex_t mu;
  pthread_cond_t wake;       /* CLOCK_MONOTONIC */
  pthread_t watchdog;
  int watching, stop;
} nccl_impl;

static nccl_impl *impl_of(zinc_comm *c) { return c->impl; }

static ncclDataType_t nccl_type(int dtype) {
  switch (dtype) {
  case ZINC_F32: return ncclFloat32;
  case ZINC_BF16: return ncclBfloat16;
  case ZINC_F16: return ncclFloat16;
  case ZINC_DT_F64: return ncclFloat64;
  case ZINC_DT_I32: return ncclInt32;
  case ZINC_DT_I64: return ncclInt64;
  default: return ncclUint8; /* ZINC_DT_U8; others were refused by zinc_coll_validate */
  }
}

static ncclRedOp_t nccl_op(zinc_comm_op op) {
  return op == ZINC_OP_MAX ? ncclMax : op == ZINC_OP_MIN ? ncclMin : ncclSum;
}

static int timed_out(double timeout_s, double t0) {
  return timeout_s > 0 && zinc_now() - t0 > timeout_s;
}

/* Poll a nonblocking NCCL call on `comm` (init, split, group end,
 * finalize) until it is done, fails, or timeout_s passes. */
static zinc_status settle(int rank, int size, double timeout_s, ncclComm_t comm, double t0,
                          const char *what) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess)
      state = r;
    if (state == ncclSuccess)
      return ZINC_OK;
    if (state != ncclInProgress)
      return zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s: %s (%s)", rank, size,
                        what, ncclGetErrorString(state), ncclGetLastError(comm));
    if (timed_out(timeout_s, t0))
      return zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s did not finish within "
                        "%.0f s: a peer is lost or stuck", rank, size, what, timeout_s);
    sched_yield();
  }
}

/* Abort the NCCL communicator after a failure whose message is already set;
 * later calls on the comm repeat the reason. Returns ZINC_ERR_COMM. mu
 * held. */
static zinc_status comm_abort(zinc_comm *c) {
  nccl_impl *ni = impl_of(c);
  snprintf(ni->abort_reason, sizeof ni->abort_reason, "%s", zinc_last_error());
  if (ni->nccl) {
    ncclCommAbort(ni->nccl);
    ni->nccl = NULL;
  }
  zinc_log(ZINC_LOG_ERROR, "%s; the comm is aborted", ni->abort_reason);
  /* the comms of its fate fail with it (comm.h); their aborts never take
   * this comm's mu (comm_fate.c) */
  zinc_comm_fate_fail(c, ni->abort_reason);
  return zinc_error_wrap(ZINC_ERR_COMM, "comm aborted");
}

/* The fate's abort (comm.h): another comm of the fate failed. Aborting the
 * NCCL communicator stops its kernels, so a stream waiting for a batch
 * goes on; the current device of the calling thread is kept. */
static void nccl_abort(zinc_comm *c, const char *why) {
  nccl_impl *ni = impl_of(c);
  pthread_mutex_lock(&ni->mu);
  if (!ni->abort_reason[0]) {
    snprintf(ni->abort_reason, sizeof ni->abort_reason, "%s", why);
    if (ni->nccl) {
      int prev = -1;
      cudaGetDevice(&prev);
      cudaSetDevice(ni->cuda_device);
      ncclCommAbort(ni->nccl);
      ni->nccl = NULL;
      if (prev >= 0)
        cudaSetDevice(prev);
    }
    pthread_cond_signal(&ni->wake);
  }
  pthread_mutex_unlock(&ni->mu);
}

static zinc_status check_usable(zinc_comm *c) {
  nccl_impl *ni = impl_of(c);
  if (ni->abort_reason[0])
    return zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d) was aborted earlier (%s); "
                      "destroy it", c->rank, c->size, ni->abort_reason);
  cudaError_t err = cudaSetDevice(ni->cuda_device);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): cudaSetDevice(%d): %s", c->rank,
                      ni->cuda_device, cudaGetErrorString(err));
  return ZINC_OK;
}

/* ------------------------------------------------------------- batches */

/* fp32 scratch elements a collective needs ("16-bit sums"): the 16-bit
 * inputs of a sum all-reduce (count) or reduce-scatter (size * count);
 * 0 for everything else. */
static size_t sum16_elems(const zinc_comm *c, const zinc_coll *o) {
  if (o->dtype != ZINC_BF16 && o->dtype != ZINC_F16)
    return 0;
  if (o->kind == ZINC_COLL_ALLREDUCE && o->op == ZINC_OP_SUM)
    return o->count;
  if (o->kind == ZINC_COLL_REDUCE_SCATTER)
    return (size_t)c->size * o->count;
  return 0;
}

/* A 16-bit sum's inputs cast up into its scratch (n = sum16_elems). */
static cudaError_t sum16_up(zinc_comm *c, const zinc_coll *o, float *f32, size_t n) {
  return zinc_cuda_cast(f32, ZINC_F32, o->send, o->dtype, (int64_t)n, impl_of(c)->stream);
}

/* Its fp32 result rounded once into recv. */
static cudaError_t sum16_down(zinc_comm *c, const zinc_coll *o, const float *f32) {
  const float *result = o->kind == ZINC_COLL_REDUCE_SCATTER ? f32 + (size_t)c->rank * o->count
                                                            : f32;
  return zinc_cuda_cast(o->recv, o->dtype, result, ZINC_F32, (int64_t)o->count,
                        impl_of(c)->stream);
}

/* Enqueue one collective; f32: its scratch when it is a 16-bit sum (the
 * inputs already cast up), reduced in place there in fp32. */
static ncclResult_t enqueue(zinc_comm *c, const zinc_coll *o, float *f32) {
  nccl_impl *ni = impl_of(c);
  ncclDataType_t t = nccl_type(o->dtype);
  size_t es = zinc_dt_size(o->dtype);
  if (f32 && o->kind == ZINC_COLL_ALLREDUCE)
    return ncclAllReduce(f32, f32, o->count, ncclFloat32, ncclSum, ni->nccl, ni->stream);
  if (f32)
    return ncclReduceScatter(f32, f32 + (size_t)c->rank * o->count, o->count, ncclFloat32,
                             ncclSum, ni->nccl, ni->stream);
  switch (o->kind) {
  case ZINC_COLL_ALLREDUCE:
    return ncclAllReduce(o->send, o->recv, o->count, t, nccl_op(o->op), ni->nccl, ni->stream);
  case ZINC_COLL_REDUCE_SCATTER:
    return ncclReduceScatter(o->send, o->recv, o->count, t, ncclSum, ni->nccl, ni->stream);
  case ZINC_COLL_ALLGATHER:
    return ncclAllGather(o->send, o->recv, o->count, t, ni->nccl, ni->stream);
  case ZINC_COLL_ALLGATHERV:
    for (int r = 0; r < c->size; r++) {
      if (!o->counts[r])
        continue;
      char *dst = (char *)o->recv + o->displs[r] * es;
      const void *src = r == c->rank ? o->send : dst; /* read on the root only */
      ncclResult_t res = ncclBroadcast(src, dst, o->counts[r], t, r, ni->nccl, ni->stream);
      if (res != ncclSuccess)
        return res;
    }
    return ncclSuccess;
  case ZINC_COLL_BROADCAST:
    return ncclBroadcast(o->recv, o->recv, o->count, t, o->root, ni->nccl, ni->stream);
  case ZINC_COLL_BARRIER:
    return ncclAllReduce(ni->barrier_word, ni->barrier_word, 1, ncclInt32, ncclMax, ni->nccl,
                         ni->stream);
  case ZINC_COLL_ALLTOALLV:
    /* point-to-point with every rank, itself included (NCCL pairs a
     * send and a receive to self inside a group); empty pairs skipped */
    for (int p = 0; p < c->size; p++) {
      ncclResult_t res = ncclSuccess;
      if (o->rcounts[p])
        res = ncclRecv((char *)o->recv + o->rdispls[p] * es, o->rcounts[p], t, p, ni->nccl,
                       ni->stream);
      if ((res == ncclSuccess || res == ncclInProgress) && o->counts[p])
        res = ncclSend((const char *)o->send + o->displs[p] * es, o->counts[p], t, p, ni->nccl,
                       ni->stream);
      if (res != ncclSuccess && res != ncclInProgress) /* in progress: settled at group end */
        return res;
    }
    return ncclSuccess;
  }
  return ncclInvalidArgument;
}

static zinc_status req_event(zinc_comm *c, cudaEvent_t *out) {
  nccl_impl *ni = impl_of(c);
  if (ni->nspare) {
    *out = ni->spare[--ni->nspare];
    return ZINC_OK;
  }
  cudaError_t err = cudaEventCreateWithFlags(out, cudaEventDisableTiming);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): cudaEventCreate: %s", c->rank,
                      cudaGetErrorString(err));
  return ZINC_OK;
}

static void req_free(zinc_comm *c, zinc_comm_req *req) {
  nccl_impl *ni = impl_of(c);
  if (!req)
    return;
  if (!req->done) { /* its event went to the ordered list (wait) */
    free(req->logged);
    free(req);
    return;
  }
  if (ni->nspare == ni->cap_spare) {
    int cap = ni->cap_spare ? 2 * ni->cap_spare : 16;
    cudaEvent_t *spare = realloc(ni->spare, (size_t)cap * sizeof *spare);
    if (!spare) {
      cudaEventDestroy(req->done);
      free(req->logged);
      free(req);
      return;
    }
    ni->spare = spare;
    ni->cap_spare = cap;
  }
  ni->spare[ni->nspare++] = req->done;
  free(req->logged);
  free(req);
}

/* The launch of a batch on the device's queue (its mutex held): ordered
 * after the compute stream, 16-bit sums cast up, the group, the 16-bit
 * results rounded down, the end event. Returns ZINC_ERR_DEVICE for a CUDA
 * failure before the group (the comm still usable) and ZINC_ERR_COMM
 * once NCCL was called. */
static zinc_status launch_batch(zinc_comm *c, const zinc_coll *colls, int n,
                                zinc_comm_req *req) {
  nccl_impl *ni = impl_of(c);
  size_t scratch_elems = 0;
  for (int i = 0; i < n; i++)
    scratch_elems += sum16_elems(c, &colls[i]);
  float *scratch = NULL; /* (scratch_elems) f32, device, stream-ordered on the queue */
  cudaError_t err = cudaEventRecord(ni->compute_ready, ni->compute);
  if (err == cudaSuccess)
    err = cudaStreamWaitEvent(ni->stream, ni->compute_ready, 0);
  if (err == cudaSuccess && scratch_elems)
    err = queue_scratch_pool(ni->queue);
  if (err == cudaSuccess && scratch_elems)
    err = cudaMallocFromPoolAsync((void **)&scratch, scratch_elems * sizeof(float),
                                  ni->queue->scratch, ni->stream);
  for (size_t i = 0, at = 0; err == cudaSuccess && scratch && i < (size_t)n; i++) {
    size_t k = sum16_elems(c, &colls[i]);
    if (k)
      err = sum16_up(c, &colls[i], scratch + at, k);
    at += k;
  }
  if (err != cudaSuccess) {
    if (scratch)
      cudaFreeAsync(scratch, ni->stream);
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): preparing a batch of %d (ordering "
                      "it after the compute stream, %zu bytes of fp32 scratch for 16-bit "
                      "sums): %s", c->rank, n, scratch_elems * sizeof(float),
                      cudaGetErrorString(err));
  }

  zinc_status st = ZINC_OK;
  ncclResult_t first = ncclSuccess;
  int failed_at = -1;
  ncclGroupStart();
  size_t at = 0;
  for (int i = 0; i < n && first == ncclSuccess; i++) {
    size_t k = sum16_elems(c, &colls[i]);
    ncclResult_t r = enqueue(c, &colls[i], k ? scratch + at : NULL);
    at += k;
    if (r != ncclSuccess && r != ncclInProgress) {
      first = r;
      failed_at = i;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (first == ncclSuccess && end == ncclInProgress)
    st = settle(c->rank, c->size, c->timeout_s, ni->nccl, req->started, "enqueueing a batch");
  else if (first != ncclSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s (operation %d of a batch of "
                    "%d): %s (%s)", c->rank, c->size, zinc_coll_name(colls[failed_at].kind),
                    failed_at, n, ncclGetErrorString(first), ncclGetLastError(ni->nccl));
  else if (end != ncclSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): ending the group of a batch of "
                    "%d: %s (%s)", c->rank, c->size, n, ncclGetErrorString(end),
                    ncclGetLastError(ni->nccl));
  for (size_t i = 0, off = 0; st == ZINC_OK && scratch && i < (size_t)n; i++) {
    size_t k = sum16_elems(c, &colls[i]);
    if (k && (err = sum16_down(c, &colls[i], scratch + off)) != cudaSuccess)
      st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): rounding a 16-bit sum: %s", c->rank,
                      cudaGetErrorString(err));
    off += k;
  }
  if (scratch)
    cudaFreeAsync(scratch, ni->stream); /* behind the batch: reused by the next one */
  if (st == ZINC_OK && (err = cudaEventRecord(req->done, ni->stream)) != cudaSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): marking the end of a batch: %s",
                    c->rank, cudaGetErrorString(err));
  return st;
}

static zinc_status start_locked(zinc_comm *c, const zinc_coll *colls, int n,
                                zinc_comm_req **out) {
  nccl_impl *ni = impl_of(c);
  ZINC_CHECK(check_usable(c));
  zinc_comm_req *req = calloc(1, sizeof *req);
  if (!req)
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl (rank %d): out of memory for a request",
                      c->rank);
  zinc_status st = req_event(c, &req->done);
  if (st != ZINC_OK) {
    free(req);
    return st;
  }
  req->started = zinc_now();
  req->nops = n;
  if (c->log && (st = zinc_comm_log_copy(c, colls, n, &req->logged)) != ZINC_OK) {
    req_free(c, req);
    return st;
  }
  req->first_kind = n ? colls[0].kind : ZINC_COLL_BARRIER;

  pthread_mutex_lock(&ni->queue->launch);
  st = launch_batch(c, colls, n, req);
  pthread_mutex_unlock(&ni->queue->launch);
  if (st != ZINC_OK) {
    req_free(c, req);
    return st == ZINC_ERR_DEVICE ? st : comm_abort(c);
  }
  *out = req;
  return ZINC_OK;
}

static zinc_status nccl_start(zinc_comm *c, const zinc_coll *colls, int n, zinc_comm_req **out) {
  nccl_impl *ni = impl_of(c);
  *out = NULL;
  ZINC_CHECK(zinc_coll_validate(c, colls, n));
  pthread_mutex_lock(&ni->mu);
  zinc_status st = start_locked(c, colls, n, out);
  pthread_mutex_unlock(&ni->mu);
  return st;
}

/* One look at a request: *done = 1 when its event completed. Any
 * asynchronous NCCL error, CUDA error or timeout aborts the comm. mu
 * held. */
static zinc_status poll_once(zinc_comm *c, zinc_comm_req *req, int *done) {
  nccl_impl *ni = impl_of(c);
  *done = 0;
  ZINC_CHECK(check_usable(c));
  cudaError_t q = cudaEventQuery(req->done);
  if (q == cudaSuccess) {
    *done = 1;
    /* latency: started until seen complete (the wait's polling included);
     * wire bytes are the ring's, estimated */
    if (req->logged)
      zinc_comm_log_batch(c, req->logged, req->nops, zinc_now() - req->started, NULL);
    return ZINC_OK;
  }
  if (q != cudaErrorNotReady) {
    zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s batch of %d failed on the "
               "device: %s", c->rank, c->size, req_name(req), req->nops,
               cudaGetErrorString(q));
    return comm_abort(c);
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(ni->nccl, &async);
  if (r != ncclSuccess)
    async = r;
  if (async != ncclSuccess && async != ncclInProgress) {
    zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s batch of %d: %s (%s); a peer "
               "may have died", c->rank, c->size, req_name(req), req->nops,
               ncclGetErrorString(async), ncclGetLastError(ni->nccl));
    return comm_abort(c);
  }
  if (timed_out(c->timeout_s, req->started)) {
    zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): %s batch of %d not done after "
               "%.0f s: a peer is lost or stuck (raise the comm timeout if it is only slow)",
               c->rank, c->size, req_name(req), req->nops, c->timeout_s);
    return comm_abort(c);
  }
  return ZINC_OK;
}

/* ------------------------------------------- device-side waits */

/* Forget the ordered batches the device has finished (from the oldest);
 * a CUDA error on one aborts the comm. mu held. */
static zinc_status sweep_ordered(zinc_comm *c) {
  nccl_impl *ni = impl_of(c);
  int k = 0;
  zinc_status st = ZINC_OK;
  while (k < ni->nordered) {
    cudaError_t q = cudaEventQuery(ni->ordered[k]);
    if (q == cudaErrorNotReady)
      break;
    if (q != cudaSuccess && st == ZINC_OK) {
      zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): a batch the compute stream waits "
                 "for failed on the device: %s", c->rank, c->size, cudaGetErrorString(q));
      st = comm_abort(c);
    }
    if (ni->nspare < ni->cap_spare)
      ni->spare[ni->nspare++] = ni->ordered[k];
    else
      cudaEventDestroy(ni->ordered[k]);
    k++;
  }
  memmove(ni->ordered, ni->ordered + k, (size_t)(ni->nordered - k) * sizeof *ni->ordered);
  memmove(ni->ordered_t0, ni->ordered_t0 + k,
          (size_t)(ni->nordered - k) * sizeof *ni->ordered_t0);
  ni->nordered -= k;
  return st;
}

/* The watchdog: sleeps until the oldest ordered batch's deadline; if that
 * batch is not done by then, aborts the comm (ncclCommAbort stops its
 * kernels, so a compute stream waiting for it, and a host synchronising
 * that stream, go on; the comm's next call and settle report the
 * failure). A device-side wait thus never outlives the comm timeout,
 * whoever synchronises afterwards. */
static void *watchdog_main(void *arg) {
  zinc_comm *c = arg;
  nccl_impl *ni = impl_of(c);
  cudaSetDevice(ni->cuda_device);
  pthread_mutex_lock(&ni->mu);
  while (!ni->stop) {
    zinc_status st = ni->abort_reason[0] ? ZINC_OK : sweep_ordered(c);
    int idle = st != ZINC_OK || ni->abort_reason[0] || ni->nordered == 0 ||
               !(c->timeout_s > 0) || c->timeout_s > 1e9;
    if (idle) {
      pthread_cond_wait(&ni->wake, &ni->mu);
      continue;
    }
    double left = ni->ordered_t0[0] + c->timeout_s - zinc_now();
    if (left <= 0) {
      zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): a batch the compute stream waits "
                 "for is not done after %.0f s: a peer is lost or stuck (raise the comm "
                 "timeout if it is only slow)", c->rank, c->size, c->timeout_s);
      comm_abort(c);
      continue;
    }
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    double whole = (double)(long)left;
    at.tv_sec += (time_t)whole;
    at.tv_nsec += (long)((left - whole) * 1e9) + 1000000L; /* 1 ms past the deadline */
    if (at.tv_nsec >= 1000000000L) {
      at.tv_sec += at.tv_nsec / 1000000000L;
      at.tv_nsec %= 1000000000L;
    }
    pthread_cond_timedwait(&ni->wake, &ni->mu, &at);
  }
  pthread_mutex_unlock(&ni->mu);
  return NULL;
}

/* Hand a waited-for batch's event to the ordered list (and the watchdog,
 * started on first use). mu held. */
static zinc_status order_batch(zinc_comm *c, cudaEvent_t done, double t0) {
  nccl_impl *ni = impl_of(c);
  if (ni->nordered == ni->cap_ordered) {
    int cap = ni->cap_ordered ? 2 * ni->cap_ordered : 16;
    cudaEvent_t *ev = realloc(ni->ordered, (size_t)cap * sizeof *ev);
    if (ev)
      ni->ordered = ev;
    double *t = ev ? realloc(ni->ordered_t0, (size_t)cap * sizeof *t) : NULL;
    if (t)
      ni->ordered_t0 = t;
    if (!ev || !t)
      return zinc_error(ZINC_ERR_NOMEM, "comm nccl (rank %d): out of memory for the list of "
                        "%d batches the compute stream waits for", c->rank, cap);
    ni->cap_ordered = cap;
  }
  if (!ni->watching) {
    int rc = pthread_create(&ni->watchdog, NULL, watchdog_main, c);
    if (rc != 0)
      return zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): cannot start the watchdog thread "
                        "that bounds device-side waits by the comm timeout: %s", c->rank,
                        strerror(rc));
    ni->watching = 1;
  }
  ni->ordered[ni->nordered] = done;
  ni->ordered_t0[ni->nordered] = t0;
  ni->nordered++;
  pthread_cond_signal(&ni->wake);
  return ZINC_OK;
}

static zinc_status nccl_test(zinc_comm *c, zinc_comm_req *req, int *done) {
  nccl_impl *ni = impl_of(c);
  pthread_mutex_lock(&ni->mu);
  zinc_status st = poll_once(c, req, done);
  if (st != ZINC_OK || *done) {
    req_free(c, req);
    *done = 1;
  }
  pthread_mutex_unlock(&ni->mu);
  return st;
}

/* Device-side: the compute stream waits for the batch's end event; the
 * host goes on at once. A batch already done (or failed) is settled here. */
static zinc_status nccl_wait(zinc_comm *c, zinc_comm_req *req) {
  nccl_impl *ni = impl_of(c);
  pthread_mutex_lock(&ni->mu);
  int done = 0;
  zinc_status st = poll_once(c, req, &done);
  if (st == ZINC_OK && !done) {
    cudaError_t err = cudaStreamWaitEvent(ni->compute, req->done, 0);
    if (err != cudaSuccess) {
      zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): ordering the compute stream after a "
                 "%s batch of %d: %s", c->rank, req_name(req), req->nops,
                 cudaGetErrorString(err));
      st = comm_abort(c);
    } else if ((st = order_batch(c, req->done, req->started)) == ZINC_OK) {
      req->done = NULL; /* the ordered list's now */
      /* latency: until the compute stream was ordered after it */
      if (req->logged)
        zinc_comm_log_batch(c, req->logged, req->nops, zinc_now() - req->started, NULL);
    }
  }
  req_free(c, req);
  pthread_mutex_unlock(&ni->mu);
  return st;
}

/* Host-side: every batch `wait` ordered the compute stream after is done,
 * or the comm fails (as a host wait would, within timeout_s of the
 * batch's start). */
static zinc_status nccl_settle(zinc_comm *c) {
  nccl_impl *ni = impl_of(c);
  for (;;) {
    pthread_mutex_lock(&ni->mu);
    zinc_status st = check_usable(c);
    if (st == ZINC_OK)
      st = sweep_ordered(c);
    int left = ni->nordered;
    ncclResult_t async = ncclSuccess;
    if (st == ZINC_OK && left && ncclCommGetAsyncError(ni->nccl, &async) != ncclSuccess)
      async = ncclSystemError;
    if (st == ZINC_OK && left && async != ncclSuccess && async != ncclInProgress) {
      zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): a batch the compute stream waits "
                 "for: %s (%s); a peer may have died", c->rank, c->size,
                 ncclGetErrorString(async), ncclGetLastError(ni->nccl));
      st = comm_abort(c);
    } else if (st == ZINC_OK && left && timed_out(c->timeout_s, ni->ordered_t0[0])) {
      zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): a batch the compute stream waits "
                 "for is not done after %.0f s: a peer is lost or stuck (raise the comm "
                 "timeout if it is only slow)", c->rank, c->size, c->timeout_s);
      st = comm_abort(c);
    }
    pthread_mutex_unlock(&ni->mu);
    if (st != ZINC_OK || !left)
      return st;
    sched_yield(); /* the host needs the data: it watches the device finish */
  }
}

/* Host-side wait: run's results may be read by the host at once. */
static zinc_status nccl_run(zinc_comm *c, const zinc_coll *colls, int n) {
  nccl_impl *ni = impl_of(c);
  ZINC_CHECK(zinc_coll_validate(c, colls, n));
  pthread_mutex_lock(&ni->mu);
  zinc_comm_req *req = NULL;
  zinc_status st = start_locked(c, colls, n, &req);
  int done = 0;
  while (st == ZINC_OK && (st = poll_once(c, req, &done)) == ZINC_OK && !done) {
    pthread_mutex_unlock(&ni->mu);
    sched_yield(); /* NCCL's kernels run meanwhile; the host just watches */
    pthread_mutex_lock(&ni->mu);
  }
  req_free(c, req);
  pthread_mutex_unlock(&ni->mu);
  return st;
}

/* ------------------------------------------------------------ transfers */

/* The launch of a transfer batch on the device's queue (its mutex held):
 * ordered after the compute stream, one group of sends and receives, the
 * end event. ZINC_ERR_DEVICE before NCCL was called, else ZINC_ERR_COMM. */
static zinc_status launch_xfer(zinc_comm *c, const zinc_xfer *x, int n, zinc_comm_req *req) {
  nccl_impl *ni = impl_of(c);
  cudaError_t err = cudaEventRecord(ni->compute_ready, ni->compute);
  if (err == cudaSuccess)
    err = cudaStreamWaitEvent(ni->stream, ni->compute_ready, 0);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): ordering a transfer batch of %d "
                      "after the compute stream: %s", c->rank, n, cudaGetErrorString(err));
  ncclResult_t first = ncclSuccess;
  int failed_at = -1;
  ncclGroupStart();
  for (int i = 0; i < n && first == ncclSuccess; i++) {
    const zinc_xfer *o = &x[i];
    ncclResult_t r = o->send ? ncclSend(o->buf, o->count, nccl_type(o->dtype), o->peer,
                                        ni->nccl, ni->stream)
                             : ncclRecv(o->buf, o->count, nccl_type(o->dtype), o->peer,
                                        ni->nccl, ni->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      first = r;
      failed_at = i;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  zinc_status st = ZINC_OK;
  if (first == ncclSuccess && end == ncclInProgress)
    st = settle(c->rank, c->size, c->timeout_s, ni->nccl, req->started, "enqueueing transfers");
  else if (first != ncclSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): transfer %d of a batch of %d "
                    "(%s rank %d): %s (%s)", c->rank, c->size, failed_at, n,
                    x[failed_at].send ? "send to" : "receive from", x[failed_at].peer,
                    ncclGetErrorString(first), ncclGetLastError(ni->nccl));
  else if (end != ncclSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): ending the group of a transfer "
                    "batch of %d: %s (%s)", c->rank, c->size, n, ncclGetErrorString(end),
                    ncclGetLastError(ni->nccl));
  if (st == ZINC_OK && (err = cudaEventRecord(req->done, ni->stream)) != cudaSuccess)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): marking the end of a transfer "
                    "batch: %s", c->rank, cudaGetErrorString(err));
  return st;
}

/* The two ends' headers first, over the bootstrap comm (comm.h,
 * "Transfers": a mismatch is ZINC_ERR_INVALID on both ends before
 * anything is queued), then the group, as a batch. */
static zinc_status nccl_xfer_start(zinc_comm *c, const zinc_xfer *x, int n,
                                   zinc_xfer_req **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm nccl: transfer start needs a request pointer");
  *out = NULL;
  ZINC_CHECK(zinc_xfer_validate(c, x, n));
  nccl_impl *ni = impl_of(c);
  zinc_comm *boot = ni->bootstrap;
  if (!boot || !boot->ops->xfer_start)
    return zinc_error(ZINC_ERR_UNSUPPORTED, "comm nccl (rank %d): transfers exchange their "
                      "headers over the bootstrap comm, and this comm (a split's) has none",
                      c->rank);
  zinc_xfer *check = calloc((size_t)n, sizeof *check);
  zinc_xfer_req *hr = NULL;
  if (!check)
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl (rank %d): out of memory for the headers "
                      "of %d transfers", c->rank, n);
  for (int i = 0; i < n; i++) {
    check[i] = x[i];
    check[i].buf = NULL;
    check[i].check_only = 1;
  }
  zinc_status st = boot->ops->xfer_start(boot, check, n, &hr);
  free(check);
  if (st == ZINC_OK)
    st = boot->ops->xfer_wait(boot, hr);
  if (st != ZINC_OK) /* a mismatch, or the bootstrap failed (and this comm with it) */
    return st;
  zinc_xfer_req *w = calloc(1, sizeof *w);
  zinc_comm_req *req = calloc(1, sizeof *req);
  if (!w || !req) {
    free(w);
    free(req);
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl (rank %d): out of memory for a transfer "
                      "request", c->rank);
  }
  pthread_mutex_lock(&ni->mu);
  st = check_usable(c);
  if (st == ZINC_OK)
    st = req_event(c, &req->done);
  if (st != ZINC_OK) {
    pthread_mutex_unlock(&ni->mu);
    free(req);
    free(w);
    return st;
  }
  req->started = zinc_now();
  req->nops = n;
  req->first_kind = ZINC_COLL_ALLTOALLV;
  req->what = "transfer";
  pthread_mutex_lock(&ni->queue->launch);
  st = launch_xfer(c, x, n, req);
  pthread_mutex_unlock(&ni->queue->launch);
  if (st != ZINC_OK) {
    req_free(c, req);
    if (st != ZINC_ERR_DEVICE)
      st = comm_abort(c);
    pthread_mutex_unlock(&ni->mu);
    free(w);
    return st;
  }
  pthread_mutex_unlock(&ni->mu);
  w->batch = req;
  *out = w;
  return ZINC_OK;
}

static zinc_status nccl_xfer_wait(zinc_comm *c, zinc_xfer_req *w) {
  if (!w)
    return zinc_error(ZINC_ERR_INVALID, "comm nccl: transfer wait on a NULL request");
  zinc_comm_req *req = w->batch;
  free(w);
  return nccl_wait(c, req);
}

/* Never waited for: the group stays queued (NCCL cannot take it back);
 * the request is released. */
static void nccl_xfer_drop(zinc_comm *c, zinc_xfer_req *w) {
  if (!w)
    return;
  nccl_impl *ni = impl_of(c);
  pthread_mutex_lock(&ni->mu);
  req_free(c, w->batch);
  pthread_mutex_unlock(&ni->mu);
  free(w);
}

/* ------------------------------------------------ creation, split, end */

static void nccl_destroy(zinc_comm *c);
static zinc_status nccl_split(zinc_comm *c, int color, int key, zinc_comm **out);

static const zinc_comm_ops nccl_ops = {
    .name = "nccl",
    .run = nccl_run,
    .start = nccl_start,
    .wait = nccl_wait,
    .test = nccl_test,
    .settle = nccl_settle,
    .split = nccl_split,
    .alloc_shared = NULL,
    .free_shared = NULL,
    .destroy = nccl_destroy,
    .abort = nccl_abort,
    .xfer_start = nccl_xfer_start,
    .xfer_wait = nccl_xfer_wait,
    .xfer_drop = nccl_xfer_drop,
};

/* Wrap an initialised NCCL communicator; takes ownership (aborts it on
 * failure). The current device is cuda_device. */
static zinc_status comm_wrap(ncclComm_t nc, int cuda_device, cudaStream_t compute,
                             double timeout_s, zinc_comm **out) {
  zinc_comm *c = calloc(1, sizeof *c);
  nccl_impl *ni = calloc(1, sizeof *ni);
  if (!c || !ni) {
    free(c);
    free(ni);
    ncclCommAbort(nc);
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl: out of host memory");
  }
  c->ops = &nccl_ops;
  c->algo = "nccl";
  c->impl = ni;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&ni->mu, NULL);
  pthread_cond_init(&ni->wake, &ca);
  pthread_condattr_destroy(&ca);
  c->timeout_s = timeout_s;
  ni->nccl = nc;
  ni->cuda_device = cuda_device;
  ni->compute = compute;
  ncclCommUserRank(nc, &c->rank);
  ncclCommCount(nc, &c->size);
  zinc_status st = queue_get(cuda_device, &ni->queue);
  if (st != ZINC_OK) {
    ncclCommAbort(nc);
    ni->nccl = NULL;
    nccl_destroy(c);
    return st;
  }
  ni->stream = ni->queue->stream;
  cudaError_t err = cudaEventCreateWithFlags(&ni->compute_ready, cudaEventDisableTiming);
  if (err == cudaSuccess)
    err = cudaMalloc((void **)&ni->barrier_word, sizeof *ni->barrier_word);
  if (err == cudaSuccess)
    err = cudaMemset(ni->barrier_word, 0, sizeof *ni->barrier_word);
  if (err != cudaSuccess) {
    ncclCommAbort(nc);
    ni->nccl = NULL;
    nccl_destroy(c);
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl: creating its event or barrier word on cuda "
                      "device %d: %s", cuda_device, cudaGetErrorString(err));
  }
  *out = c;
  return ZINC_OK;
}

/* Publish the node table: node[k] for each rank k (any ids; -1: unknown,
 * a node of its own), numbered again 0, 1, ... in order of first rank. */
static zinc_status set_nodes(zinc_comm *c, const int *node) {
  nccl_impl *ni = impl_of(c);
  int *map = calloc((size_t)c->size, sizeof *map);
  if (!map)
    return zinc_error(ZINC_ERR_NOMEM, "comm nccl (rank %d): out of memory for the node table "
                      "of %d ranks", c->rank, c->size);
  int nnodes = 0;
  for (int k = 0; k < c->size; k++) {
    map[k] = -1;
    for (int j = 0; j < k && map[k] < 0 && node[k] >= 0; j++)
      if (node[j] == node[k])
        map[k] = map[j];
    if (map[k] < 0)
      map[k] = nnodes++;
  }
  free(ni->node_of);
  ni->node_of = map;
  c->node_of = map;
  c->nnodes = nnodes;
  return ZINC_OK;
}

/* A split's node table: every member's node in the parent, gathered over
 * the new comm (a device all-gather under the comm's timeout). */
static zinc_status split_nodes(zinc_comm *parent, zinc_comm *child) {
  int32_t mine = parent->node_of ? parent->node_of[parent->rank] : -1 - parent->rank;
  int32_t *dev = NULL;
  int32_t *host = calloc((size_t)child->size, sizeof *host);
  int *node = calloc((size_t)child->size, sizeof *node);
  zinc_status st = ZINC_OK;
  cudaError_t err = host && node ? cudaMalloc((void **)&dev, (size_t)child->size * sizeof *dev)
                                 : cudaErrorMemoryAllocation;
  if (err == cudaSuccess)
    err = cudaMemcpy(dev + child->rank, &mine, sizeof mine, cudaMemcpyHostToDevice);
  if (err != cudaSuccess)
    st = zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): split: staging the node table: %s",
                    child->rank, cudaGetErrorString(err));
  if (st == ZINC_OK) {
    zinc_coll gather = {.kind = ZINC_COLL_ALLGATHER, .send = dev + child->rank, .recv = dev,
                        .count = 1, .dtype = ZINC_DT_I32};
    st = nccl_run(child, &gather, 1);
  }
  if (st == ZINC_OK &&
      (err = cudaMemcpy(host, dev, (size_t)child->size * sizeof *host,
                        cudaMemcpyDeviceToHost)) != cudaSuccess)
    st = zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d): split: reading the node table: %s",
                    child->rank, cudaGetErrorString(err));
  if (st == ZINC_OK) {
    /* a parent without a table: every rank a node of its own (-1) */
    for (int k = 0; k < child->size; k++)
      node[k] = host[k] < 0 ? -1 : host[k];
    st = set_nodes(child, node);
  }
  if (dev)
    cudaFree(dev);
  free(host);
  free(node);
  return st;
}

static zinc_status nccl_split(zinc_comm *c, int color, int key, zinc_comm **out) {
  nccl_impl *ni = impl_of(c);
  *out = NULL;
  pthread_mutex_lock(&ni->mu); /* the watchdog may abort the parent meanwhile */
  zinc_status st = check_usable(c);
  if (st != ZINC_OK) {
    pthread_mutex_unlock(&ni->mu);
    return st;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  double t0 = zinc_now();
  ncclResult_t r = ncclCommSplit(ni->nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc,
                                 &cfg);
  if (r != ncclSuccess && r != ncclInProgress)
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): split (color %d, key %d): %s "
                    "(%s)", c->rank, c->size, color, key, ncclGetErrorString(r),
                    ncclGetLastError(ni->nccl));
  if (st == ZINC_OK)
    st = settle(c->rank, c->size, c->timeout_s, ni->nccl, t0, "split");
  if (st == ZINC_OK && nc)
    st = settle(c->rank, c->size, c->timeout_s, nc, t0, "split (new communicator)");
  if (st != ZINC_OK) {
    if (nc)
      ncclCommAbort(nc);
    st = comm_abort(c);
  }
  pthread_mutex_unlock(&ni->mu);
  if (st != ZINC_OK)
    return st;
  if (!nc) /* color < 0: this rank joins no new comm */
    return ZINC_OK;
  zinc_comm *child = NULL;
  ZINC_CHECK(comm_wrap(nc, ni->cuda_device, ni->compute, c->timeout_s, &child));
  if ((st = zinc_comm_fate_join(child, c)) != ZINC_OK || /* fails with its parent */
      (st = split_nodes(c, child)) != ZINC_OK) {
    nccl_destroy(child);
    return st;
  }
  *out = child;
  return ZINC_OK;
}

static void nccl_destroy(zinc_comm *c) {
  if (!c)
    return;
  nccl_impl *ni = impl_of(c);
  if (ni->watching) {
    pthread_mutex_lock(&ni->mu);
    ni->stop = 1;
    pthread_cond_signal(&ni->wake);
    pthread_mutex_unlock(&ni->mu);
    pthread_join(ni->watchdog, NULL);
  }
  zinc_comm_fate_leave(c); /* no abort reaches this comm from here on */
  cudaSetDevice(ni->cuda_device);
  if (ni->nccl) {
    /* finalize flushes queued work and leaves the comm in progress until
     * the peers are done too; a peer that never is gets the comm aborted */
    double t0 = zinc_now();
    ncclResult_t r = ncclCommFinalize(ni->nccl);
    zinc_status st = r == ncclSuccess || r == ncclInProgress
                         ? settle(c->rank, c->size, c->timeout_s, ni->nccl, t0, "finalize")
                         : zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d): finalize: %s",
                                      c->rank, ncclGetErrorString(r));
    if (st == ZINC_OK) {
      ncclCommDestroy(ni->nccl);
    } else {
      zinc_log(ZINC_LOG_WARN, "%s; aborting the communicator", zinc_last_error());
      ncclCommAbort(ni->nccl);
    }
    ni->nccl = NULL;
  }
  queue_put(ni->queue); /* the stream, when this was the device's last NCCL comm */
  if (ni->compute_ready)
    cudaEventDestroy(ni->compute_ready);
  for (int i = 0; i < ni->nspare; i++)
    cudaEventDestroy(ni->spare[i]);
  for (int i = 0; i < ni->nordered; i++)
    cudaEventDestroy(ni->ordered[i]); /* released once recorded work is done */
  if (ni->barrier_word)
    cudaFree(ni->barrier_word);
  (void)cudaGetLastError();
  pthread_cond_destroy(&ni->wake);
  pthread_mutex_destroy(&ni->mu);
  free(ni->spare);
  free(ni->ordered);
  free(ni->ordered_t0);
  free(ni->node_of);
  free(ni);
  free(c);
}

zinc_status zinc_comm_nccl_create(zinc_comm *bootstrap, int cuda_device, void *compute_stream,
                                  double timeout_s, zinc_comm **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "comm nccl: NULL output pointer");
  *out = NULL;
  if (!bootstrap)
    return zinc_error(ZINC_ERR_INVALID, "comm nccl: a bootstrap comm (mpi) is needed to share "
                      "the NCCL unique id");
  int rank = bootstrap->rank, size = bootstrap->size;
  cudaError_t err = cudaSetDevice(cuda_device);
  if (err != cudaSuccess)
    return zinc_error(ZINC_ERR_DEVICE, "comm nccl (rank %d of %d): cudaSetDevice(%d): %s",
                      rank, size, cuda_device, cudaGetErrorString(err));

  struct {
    int32_t ok;          /* rank 0 made the id */
    ncclUniqueId id;
  } hello;
  memset(&hello, 0, sizeof hello);
  ncclResult_t r = ncclSuccess;
  if (rank == 0) {
    r = ncclGetUniqueId(&hello.id);
    hello.ok = r == ncclSuccess;
  }
  zinc_status st = zinc_comm_broadcast(bootstrap, &hello, sizeof hello, ZINC_DT_U8, 0);
  if (st != ZINC_OK)
    return zinc_error_wrap(ZINC_ERR_COMM, "comm nccl (rank %d of %d): broadcasting the unique "
                           "id over the %s comm", rank, size, bootstrap->ops->name);
  if (!hello.ok)
    return zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): rank 0 could not make the "
                      "NCCL unique id%s%s", rank, size, rank == 0 ? ": " : "",
                      rank == 0 ? ncclGetErrorString(r) : "");

  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  double t0 = zinc_now();
  r = ncclCommInitRankConfig(&nc, size, hello.id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    st = zinc_error(ZINC_ERR_COMM, "comm nccl (rank %d of %d): ncclCommInitRank on cuda "
                    "device %d: %s (%s)", rank, size, cuda_device, ncclGetErrorString(r),
                    ncclGetLastError(nc));
    if (nc)
      ncclCommAbort(nc);
    return st;
  }
  st = settle(rank, size, timeout_s, nc, t0, "ncclCommInitRank");
  if (st != ZINC_OK) {
    ncclCommAbort(nc);
    return st;
  }
  ZINC_CHECK(comm_wrap(nc, cuda_device, (cudaStream_t)compute_stream, timeout_s, out));
  impl_of(*out)->bootstrap = bootstrap; /* transfers' headers travel over it */
  /* fails with its bootstrap (comm.h, "Fate"); NCCL's ranks are the
   * bootstrap's: its node table holds (a bootstrap without one: every rank
   * a node of its own) */
  st = zinc_comm_fate_join(*out, bootstrap);
  int *node = st == ZINC_OK ? calloc((size_t)size, sizeof *node) : NULL;
  if (st == ZINC_OK && !node)
    st = zinc_error(ZINC_ERR_NOMEM, "comm nccl: out of memory for the node table");
  for (int k = 0; node && k < size; k++)
    node[k] = bootstrap->node_of ? bootstrap->node_of[k] : -1;
  if (st == ZINC_OK)
    st = set_nodes(*out, node);
  free(node);
  if (st != ZINC_OK) {
    nccl_destroy(*out);
    *out = NULL;
    return st;
  }
  int version = 0;
  ncclGetVersion(&version);
  zinc_log0(ZINC_LOG_INFO, "comm nccl: %d ranks, NCCL %d, timeout %.0f s, rank 0 on cuda "
            "device %d", size, version, timeout_s, cuda_device);
  return ZINC_OK;
}

#else /* !ZINC_HAVE_CUDA */

zinc_status zinc_comm_nccl_create(zinc_comm *bootstrap, int cuda_device, void *compute_stream,
                                  double timeout_s, zinc_comm **out) {
  (void)bootstrap;
  (void)compute_stream;
  (void)timeout_s;
  if (out)
    *out = NULL;
  return zinc_error(ZINC_ERR_UNSUPPORTED, "comm nccl (cuda device %d): zinc was built without "
                    "CUDA; rebuild with -DZINC_CUDA=ON (CUDA toolkit and NCCL installed) or "
                    "use the mpi comm", cuda_device);
}

#endif /* ZINC_HAVE_CUDA */
