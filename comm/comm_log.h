/*
 * comm_log.h — the comms logger's counters (DeepSpeed's comms_logger): one
 * zinc_comm_log shared by every comm of an engine, one row per (op,
 * message size, algorithm[, group]), filled by the backends as batches
 * complete.
 *
 * A comm counts only when its `log` is set (comm.h); with none, the
 * backends' whole cost is one pointer test per batch and per wire count.
 *
 * What the backends report per batch: the ops (kind and sizes), the
 * seconds the batch took, and the wire bytes it sent by kind, split
 * intra-node / inter-node (mpi) or none (nccl: estimated here from the
 * ring algorithm; self: nothing leaves the rank). A batch's wire bytes of
 * one kind are shared among its ops of that kind in proportion to their
 * message bytes, and so are its seconds among all of its ops: exact for
 * the flat paths, whose traffic is linear in the message size.
 *
 * Thread safety: batches complete on the comms' worker threads and on the
 * engine's thread at once; every call takes the log's mutex.
 */
#ifndef ZINC_COMM_LOG_H
#define ZINC_COMM_LOG_H

#include <stdint.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinc_comm_log zinc_comm_log;

typedef struct {
  int verbose;           /* log every op as it completes (rank 0)         */
  int debug;             /* rows split by the comm's group label          */
  uint32_t kinds;        /* bit (1 << zinc_coll_kind) per kind recorded   */
} zinc_comm_log_opts;

/* Wire bytes of one batch: [kind][0 intra-node, 1 inter-node]. */
typedef uint64_t zinc_comm_wire[ZINC_COLL_NKINDS][2];

zinc_status zinc_comm_log_create(const zinc_comm_log_opts *opts, zinc_comm_log **out);
void zinc_comm_log_destroy(zinc_comm_log *log);   /* NULL is fine */

/* A batch of c (c->log set) has completed in `seconds`. wire: what the
 * mpi paths counted (zinc_mpi_count_wire); NULL: none was measured, and
 * for a backend whose algo is "nccl" the ring's bytes are recorded as
 * estimated. */
void zinc_comm_log_batch(zinc_comm *c, const zinc_coll *colls, int n, double seconds,
                         const zinc_comm_wire *wire);

/* A copy of a batch that outlives the caller's arrays (all-gatherv counts
 * included; buffers are not touched), for a backend that counts a batch
 * when it completes. One block: free() it. */
zinc_status zinc_comm_log_copy(const zinc_comm *c, const zinc_coll *colls, int n,
                               zinc_coll **out);

/* DeepSpeed's message size of one op (see zinc.h, "comms logger"). */
uint64_t zinc_comm_log_msg_bytes(const zinc_comm *c, const zinc_coll *o);

/* Rows as the public API gives them: up to cap into out (stride bytes
 * apart, each written within its own size), *n the number there are. */
zinc_status zinc_comm_log_stats(zinc_comm_log *log, zinc_comms_stat *out, int cap, int *n);
/* The summary as text (malloc'ed into *text). */
zinc_status zinc_comm_log_summary(zinc_comm_log *log, char **text);
void zinc_comm_log_reset(zinc_comm_log *log);

/* "all_reduce", "reduce_scatter", ... (DeepSpeed's op names, without its
 * "_tensor" suffixes). */
const char *zinc_comm_log_op_name(zinc_coll_kind k);
/* DeepSpeed's convert_size: "0B", "8.0 B", "1.5 KB", "678.86 MB". */
void zinc_comm_log_size_str(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_COMM_LOG_H */
