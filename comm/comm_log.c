/*
 * comm_log.c — the comms logger's rows, DeepSpeed's bandwidth formulas and
 * its summary table (see comm_log.h for what the backends report).
 *
 * Bandwidths (Gbps, per call, averaged over the calls of a row), with M the
 * message size, t the latency and n the comm's size (DeepSpeed's
 * calc_bw_log, from nccl-tests):
 *   all-reduce       tput = 2M/t          busbw = M/t * 2(n-1)/n
 *   all-gather(v)    tput = G/t           busbw = G/t * (n-1)/n, G the
 *                                         gathered bytes (n*M for all-gather)
 *   reduce-scatter   tput = M/t           busbw = M/t * (n-1)/n
 *   broadcast        tput = busbw = M/t
 *   barrier          0 (no bytes)
 * Differences from DeepSpeed: n is the size of the group the op ran on
 * (DeepSpeed uses the world size); reduce-scatter's M is already the whole
 * input, which DeepSpeed multiplies by n once more; the averages are plain
 * means (DeepSpeed trims 10% of outliers, which needs every sample kept).
 *
 * Rows are kept sorted by (op, message size, algorithm, group), the order
 * the summary prints them in.
 */
#include "comm/comm_log.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* The public op numbers are the comm's kinds. */
_Static_assert((int)ZINC_COMMS_ALL_REDUCE == (int)ZINC_COLL_ALLREDUCE &&
                   (int)ZINC_COMMS_REDUCE_SCATTER == (int)ZINC_COLL_REDUCE_SCATTER &&
                   (int)ZINC_COMMS_ALL_GATHER == (int)ZINC_COLL_ALLGATHER &&
                   (int)ZINC_COMMS_ALL_GATHERV == (int)ZINC_COLL_ALLGATHERV &&
                   (int)ZINC_COMMS_BROADCAST == (int)ZINC_COLL_BROADCAST &&
                   (int)ZINC_COMMS_BARRIER == (int)ZINC_COLL_BARRIER &&
                   (int)ZINC_COMMS_ALL_TO_ALL_V == (int)ZINC_COLL_ALLTOALLV &&
                   (int)ZINC_COMMS_NOPS == (int)ZINC_COLL_NKINDS,
               "zinc_comms_op must number the ops as zinc_coll_kind does");

typedef struct {
  zinc_coll_kind kind;
  uint64_t msg_bytes;
  const char *algo;
  const char *group;       /* NULL unless debug */
  int size;                /* ranks of the comm the row's calls ran on */
  uint64_t count;
  double total_s;
  double algbw_sum, busbw_sum;      /* Gbps, summed over calls */
  uint64_t wire[2];                 /* intra-node, inter-node */
  uint64_t wire_estimated;
  const char *codec;       /* compressed rows: the codec ("int4"); else NULL */
  uint64_t logical;        /* compressed rows: the uncompressed wire bytes */
} log_row;

struct zinc_comm_log {
  pthread_mutex_t lock;
  zinc_comm_log_opts opts;
  log_row *rows;           /* (nrows) sorted */
  int nrows, cap;
};

zinc_status zinc_comm_log_create(const zinc_comm_log_opts *opts, zinc_comm_log **out) {
  *out = NULL;
  zinc_comm_log *log = NULL;
  ZINC_CHECK(zinc_calloc((void **)&log, 1, sizeof *log, "comms logger"));
  log->opts = *opts;
  pthread_mutex_init(&log->lock, NULL);
  *out = log;
  return ZINC_OK;
}

void zinc_comm_log_destroy(zinc_comm_log *log) {
  if (!log)
    return;
  pthread_mutex_destroy(&log->lock);
  free(log->rows);
  free(log);
}

const char *zinc_comm_log_op_name(zinc_coll_kind k) {
  switch (k) {
  case ZINC_COLL_ALLREDUCE: return "all_reduce";
  case ZINC_COLL_REDUCE_SCATTER: return "reduce_scatter";
  case ZINC_COLL_ALLGATHER: return "all_gather";
  case ZINC_COLL_ALLGATHERV: return "all_gatherv";
  case ZINC_COLL_BROADCAST: return "broadcast";
  case ZINC_COLL_BARRIER: return "barrier";
  case ZINC_COLL_ALLTOALLV: return "all_to_all_v";
  }
  return "unknown";
}

/* The elements an all-to-all-v sends, to every rank (itself included) or
 * to the others only. */
static uint64_t alltoallv_sent(const zinc_comm *c, const zinc_coll *o, int others) {
  uint64_t total = 0;
  for (int k = 0; k < c->size; k++)
    total += others && k == c->rank ? 0 : o->counts[k];
  return total;
}

uint64_t zinc_comm_log_msg_bytes(const zinc_comm *c, const zinc_coll *o) {
  uint64_t es = zinc_dt_size(o->dtype);
  switch (o->kind) {
  case ZINC_COLL_REDUCE_SCATTER: return (uint64_t)c->size * o->count * es;
  case ZINC_COLL_BARRIER: return 0;
  case ZINC_COLL_ALLTOALLV: return alltoallv_sent(c, o, 0) * es; /* the send buffer */
  default: return o->count * es;
  }
}

/* A compressed collective: logical_bytes or codec_name set (comm.h). Its
 * row is kept under the collective it stands for (an all-to-all-v's
 * logical_kind) and its codec. */
static int is_compressed(const zinc_coll *o) { return o->logical_bytes > 0 || o->codec_name; }

static zinc_coll_kind row_kind(const zinc_coll *o) {
  return is_compressed(o) && o->kind == ZINC_COLL_ALLTOALLV ? o->logical_kind : o->kind;
}

static const char *row_codec(const zinc_coll *o) {
  return !is_compressed(o) ? NULL : o->codec_name ? o->codec_name : "compressed";
}

zinc_status zinc_comm_log_copy(const zinc_comm *c, const zinc_coll *colls, int n,
                               zinc_coll **out) {
  *out = NULL;
  size_t ncounts = 0;
  for (int i = 0; i < n; i++)
    ncounts += colls[i].kind == ZINC_COLL_ALLGATHERV || colls[i].kind == ZINC_COLL_ALLTOALLV
                   ? (size_t)c->size
                   : 0;
  zinc_coll *copy = NULL;
  ZINC_CHECK(zinc_calloc((void **)&copy, 1, (size_t)n * sizeof *copy + ncounts * sizeof(size_t),
                         "comms logger batch copy"));
  size_t *counts = (size_t *)(copy + n);
  for (int i = 0; i < n; i++) {
    copy[i] = colls[i];
    /* what the logger reads: the counts (all-to-all-v: the send side) */
    copy[i].displs = copy[i].rcounts = copy[i].rdispls = NULL;
    if (colls[i].kind == ZINC_COLL_ALLGATHERV || colls[i].kind == ZINC_COLL_ALLTOALLV) {
      memcpy(counts, colls[i].counts, (size_t)c->size * sizeof *counts);
      copy[i].counts = counts;
      counts += c->size;
    }
  }
  *out = copy;
  return ZINC_OK;
}

/* The bytes an all-gather(v) leaves on every rank. */
static uint64_t gathered_bytes(const zinc_comm *c, const zinc_coll *o) {
  uint64_t es = zinc_dt_size(o->dtype), total = 0;
  if (o->kind == ZINC_COLL_ALLGATHER)
    return (uint64_t)c->size * o->count * es;
  for (int k = 0; k < c->size; k++)
    total += o->counts[k];
  return total * es;
}

/* What the ring algorithm sends from this rank (nccl, estimated). */
static uint64_t ring_bytes(const zinc_comm *c, const zinc_coll *o) {
  const uint64_t n = (uint64_t)c->size, es = zinc_dt_size(o->dtype);
  const uint64_t msg = zinc_comm_log_msg_bytes(c, o);
  switch (o->kind) {
  case ZINC_COLL_ALLREDUCE: return 2 * (n - 1) * msg / n;
  case ZINC_COLL_REDUCE_SCATTER: return (n - 1) * msg / n;
  case ZINC_COLL_ALLGATHER: return (n - 1) * msg;
  case ZINC_COLL_ALLGATHERV: /* every block but the next rank's */
    return gathered_bytes(c, o) - o->counts[(c->rank + 1) % c->size] * es;
  case ZINC_COLL_BROADCAST: /* all but the ring's last rank pass it on */
    return c->rank == (o->root + c->size - 1) % c->size ? 0 : msg;
  case ZINC_COLL_BARRIER: return 0;
  case ZINC_COLL_ALLTOALLV: return alltoallv_sent(c, o, 1) * es; /* what goes to the others */
  }
  return 0;
}

static void bandwidths(const zinc_comm *c, const zinc_coll *o, uint64_t msg, double seconds,
                       double *algbw, double *busbw) {
  const double n = c->size;
  double s = 0, factor = 1;
  switch (o->kind) {
  case ZINC_COLL_ALLREDUCE: s = 2.0 * (double)msg; factor = (n - 1) / n; break;
  case ZINC_COLL_ALLGATHER:
  case ZINC_COLL_ALLGATHERV: s = (double)gathered_bytes(c, o); factor = (n - 1) / n; break;
  case ZINC_COLL_REDUCE_SCATTER: s = (double)msg; factor = (n - 1) / n; break;
  case ZINC_COLL_BROADCAST: s = (double)msg; break;
  case ZINC_COLL_ALLTOALLV: s = (double)msg; factor = (n - 1) / n; break;
  case ZINC_COLL_BARRIER: break;
  }
  *algbw = seconds > 0 ? s * 8 / seconds / 1e9 : 0;
  *busbw = *algbw * factor;
}

/* The row key: (op, codec, message size, algorithm, group); rows of the
 * same op with and without a codec are kept apart, the plain one first. */
typedef struct {
  zinc_coll_kind kind;
  const char *codec;
  uint64_t msg;
  const char *algo, *group;
} row_key;

static int row_cmp(const log_row *r, const row_key *k) {
  if (r->kind != k->kind)
    return r->kind < k->kind ? -1 : 1;
  int a = strcmp(r->codec ? r->codec : "", k->codec ? k->codec : "");
  if (a)
    return a;
  if (r->msg_bytes != k->msg)
    return r->msg_bytes < k->msg ? -1 : 1;
  a = strcmp(r->algo ? r->algo : "", k->algo ? k->algo : "");
  if (a)
    return a;
  return strcmp(r->group ? r->group : "", k->group ? k->group : "");
}

/* The row for the key, inserted in order when new; NULL when out of memory
 * (the call then goes uncounted, which the summary cannot say: rare). */
static log_row *row_for(zinc_comm_log *log, const row_key *key, int size) {
  int lo = 0, hi = log->nrows;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    int cmp = row_cmp(&log->rows[mid], key);
    if (cmp == 0 && log->rows[mid].size == size)
      return &log->rows[mid];
    if (cmp < 0 || (cmp == 0 && log->rows[mid].size < size))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (zinc_grow((void **)&log->rows, &log->cap, log->nrows + 1, sizeof *log->rows,
                "comms logger rows") != ZINC_OK)
    return NULL;
  memmove(&log->rows[lo + 1], &log->rows[lo], (size_t)(log->nrows - lo) * sizeof *log->rows);
  log->nrows++;
  log->rows[lo] = (log_row){.kind = key->kind, .msg_bytes = key->msg, .algo = key->algo,
                            .group = key->group, .codec = key->codec, .size = size};
  return &log->rows[lo];
}

/* x * part / whole without overflow; 0 when whole is 0. */
static uint64_t share(uint64_t x, uint64_t part, uint64_t whole) {
  return whole ? (uint64_t)((unsigned __int128)x * part / whole) : 0;
}

/* "reduce_scatter", "reduce_scatter (int4)", "all_reduce | [Group: world]" */
static void record_name(const zinc_comm_log *log, zinc_coll_kind kind, const char *codec,
                        const char *group, char *buf, size_t len) {
  char op[64];
  if (codec)
    snprintf(op, sizeof op, "%s (%s)", zinc_comm_log_op_name(kind), codec);
  else
    snprintf(op, sizeof op, "%s", zinc_comm_log_op_name(kind));
  if (log->opts.debug && group)
    snprintf(buf, len, "%s | [Group: %s]", op, group);
  else
    snprintf(buf, len, "%s", op);
}

void zinc_comm_log_batch(zinc_comm *c, const zinc_coll *colls, int n, double seconds,
                         const zinc_comm_wire *wire) {
  zinc_comm_log *log = c->log;
  if (!log || n <= 0)
    return;
  const char *algo = c->algo ? c->algo : c->ops->name;
  const char *group = log->opts.debug ? c->log_group : NULL;
  const int estimate = !wire && c->size > 1 && strcmp(algo, "nccl") == 0;
  /* the batch's message bytes, all ops and per kind, to share time and wire */
  uint64_t msg_all = 0, msg_kind[ZINC_COLL_NKINDS] = {0};
  int ops_kind[ZINC_COLL_NKINDS] = {0}, left_kind[ZINC_COLL_NKINDS];
  for (int i = 0; i < n; i++) {
    uint64_t m = zinc_comm_log_msg_bytes(c, &colls[i]);
    msg_all += m;
    msg_kind[colls[i].kind] += m;
    ops_kind[colls[i].kind]++;
  }
  memcpy(left_kind, ops_kind, sizeof left_kind);
  uint64_t wire_left[ZINC_COLL_NKINDS][2] = {{0}};
  if (wire)
    memcpy(wire_left, *wire, sizeof wire_left);
  pthread_mutex_lock(&log->lock);
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    const int k = (int)o->kind;
    uint64_t msg = zinc_comm_log_msg_bytes(c, o);
    double secs = msg_all ? seconds * (double)msg / (double)msg_all : seconds / n;
    /* this op's share of its kind's wire bytes; the last op of the kind
     * takes what is left, so that nothing is lost to rounding */
    uint64_t w[2] = {0, 0};
    int last = --left_kind[k] == 0;
    for (int s = 0; wire && s < 2; s++) {
      if (last)
        w[s] = wire_left[k][s];
      else if (msg_kind[k])
        w[s] = share((*wire)[k][s], msg, msg_kind[k]);
      else
        w[s] = (*wire)[k][s] / (uint64_t)ops_kind[k];
      wire_left[k][s] -= w[s];
    }
    const row_key key = {row_kind(o), row_codec(o), msg, algo, group};
    if (!(log->opts.kinds & (1u << key.kind)))
      continue;
    log_row *r = row_for(log, &key, c->size);
    if (!r)
      continue;
    double algbw, busbw;
    bandwidths(c, o, msg, secs, &algbw, &busbw);
    r->count++;
    r->total_s += secs;
    r->algbw_sum += algbw;
    r->busbw_sum += busbw;
    r->wire[0] += w[0];
    r->wire[1] += w[1];
    if (estimate)
      r->wire_estimated += ring_bytes(c, o);
    r->logical += o->logical_bytes;
    if (log->opts.verbose && zinc_log_rank() <= 0) {
      char name[128], size[32], line[352];
      record_name(log, key.kind, key.codec, group, name, sizeof name);
      zinc_comm_log_size_str(msg, size, sizeof size);
      snprintf(line, sizeof line, "[zinc rank 0] comm op: %s | time (ms): %.2f | msg size: %s "
               "| algbw (Gbps): %.2f | busbw (Gbps): %.2f | algo: %s\n", name, secs * 1e3,
               size, algbw, busbw, algo);
      zinc_log_text(line);
    }
  }
  pthread_mutex_unlock(&log->lock);
}

void zinc_comm_log_size_str(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  if (bytes == 0) {
    snprintf(buf, len, "0B");
    return;
  }
  int i = 0;
  double v = (double)bytes;
  while (v >= 1024.0 && i < 6) {
    v /= 1024.0;
    i++;
  }
  /* Python's str(round(v, 2)): at least one decimal, no trailing zeros */
  char num[32];
  snprintf(num, sizeof num, "%.2f", round(v * 100.0) / 100.0);
  size_t n = strlen(num);
  if (num[n - 1] == '0')
    num[--n] = '\0';
  snprintf(buf, len, "%s %s", num, units[i]);
}

zinc_status zinc_comm_log_stats(zinc_comm_log *log, zinc_comms_stat *out, int cap, int *n) {
  size_t stride = 0;
  if (cap > 0) {
    ZINC_CHECK(zinc_abi_check(out, "zinc_comms_stat", "ZINC_COMMS_STAT_INIT"));
    stride = out[0].size;
  }
  pthread_mutex_lock(&log->lock);
  zinc_status st = ZINC_OK;
  *n = log->nrows;
  for (int i = 0; i < log->nrows && i < cap && st == ZINC_OK; i++) {
    const log_row *r = &log->rows[i];
    zinc_comms_stat s = {
        .size = sizeof s,
        .op = (int)r->kind,
        .name = zinc_comm_log_op_name(r->kind),
        .algo = r->algo,
        .group = r->group,
        .msg_bytes = r->msg_bytes,
        .count = r->count,
        .total_ms = r->total_s * 1e3,
        .algbw_gbps = r->count ? r->algbw_sum / (double)r->count : 0,
        .busbw_gbps = r->count ? r->busbw_sum / (double)r->count : 0,
        .wire_intra = r->wire[0],
        .wire_inter = r->wire[1],
        .wire_estimated = r->wire_estimated,
        .ranks = r->size,
        .logical_bytes = r->logical,
        .codec = r->codec};
    st = zinc_abi_write((char *)out + (size_t)i * stride, &s, sizeof s, "zinc_comms_stat",
                        "ZINC_COMMS_STAT_INIT");
  }
  pthread_mutex_unlock(&log->lock);
  return st;
}

void zinc_comm_log_reset(zinc_comm_log *log) {
  pthread_mutex_lock(&log->lock);
  log->nrows = 0;
  pthread_mutex_unlock(&log->lock);
}

/* A growing string; on allocation failure it stops growing and `failed`
 * is set. */
typedef struct {
  char *s;
  size_t len, cap;
  int failed;
} text_buf;

static void put(text_buf *t, const char *fmt, ...) ZINC_PRINTF(2, 3);
static void put(text_buf *t, const char *fmt, ...) {
  if (t->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (need < 0) {
      t->failed = 1;
      return;
    }
    if (t->s && t->len + (size_t)need < t->cap) {
      t->len += (size_t)need;
      return;
    }
    size_t cap = t->cap ? t->cap : 4096;
    while (cap <= t->len + (size_t)need)
      cap *= 2;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->failed = 1;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
}

/* The wire bytes of a row: measured, or nccl's estimate. */
static uint64_t row_wire(const log_row *r) {
  return r->wire_estimated ? r->wire_estimated : r->wire[0] + r->wire[1];
}

/* "8.0x" (the uncompressed bytes over the wire bytes), or "-". */
static void ratio_str(uint64_t logical, uint64_t wire, char *buf, size_t len) {
  if (logical && wire)
    snprintf(buf, len, "%.1fx", (double)logical / (double)wire);
  else
    snprintf(buf, len, "-");
}

/* DeepSpeed's table (columns 20 wide: op, message size, count, total and
 * average latency in ms, tput and busbw in Gbps; the op's name on a line
 * of its own above its sizes), then zinc's columns: algorithm and the wire
 * bytes this rank sent intra-node and inter-node ("~" marks nccl's
 * estimate). When any row is compressed (logical bytes, comm.h), two more:
 * the bytes the uncompressed collectives would have sent ("-" for plain
 * rows) and their ratio to the wire bytes, and after the table one line
 * per compressed row: "reduce_scatter (int4): 12.6 MB on the wire for
 * 100.7 MB uncompressed, 8.0x". */
zinc_status zinc_comm_log_summary(zinc_comm_log *log, char **text) {
  *text = NULL;
  text_buf t = {0};
  pthread_mutex_lock(&log->lock);
  int compressed = 0;
  for (int i = 0; i < log->nrows; i++)
    compressed |= log->rows[i].codec != NULL;
  put(&t, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-20s%s", "Comm. Op", "Message Size",
      "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)",
      "Algorithm", "Wire intra-node", "Wire inter-node");
  if (compressed)
    put(&t, "%*s%-20s%s", 20 - (int)strlen("Wire inter-node"), "", "Uncompressed", "Ratio");
  put(&t, "\n");
  char prev[128] = "";
  for (int i = 0; i < log->nrows; i++) {
    const log_row *r = &log->rows[i];
    char name[128], size[32], intra[40], inter[40];
    record_name(log, r->kind, r->codec, r->group, name, sizeof name);
    if (strcmp(name, prev) != 0) {
      put(&t, "%s\n", name);
      snprintf(prev, sizeof prev, "%s", name);
    }
    zinc_comm_log_size_str(r->msg_bytes, size, sizeof size);
    if (r->wire_estimated) {
      char est[32];
      zinc_comm_log_size_str(r->wire_estimated, est, sizeof est);
      snprintf(intra, sizeof intra, "~%s", est);
      snprintf(inter, sizeof inter, "-");
    } else {
      zinc_comm_log_size_str(r->wire[0], intra, sizeof intra);
      zinc_comm_log_size_str(r->wire[1], inter, sizeof inter);
    }
    double n = r->count ? (double)r->count : 1;
    put(&t, "%-20s%-20s%-20llu%-20.2f%-20.2f%-20.2f%-20.2f%-20s%-20s%s", "", size,
        (unsigned long long)r->count, r->total_s * 1e3, r->total_s * 1e3 / n,
        r->algbw_sum / n, r->busbw_sum / n, r->algo ? r->algo : "", intra, inter);
    if (compressed) {
      char logical[40] = "-", ratio[16];
      if (r->codec)
        zinc_comm_log_size_str(r->logical, logical, sizeof logical);
      ratio_str(r->logical, row_wire(r), ratio, sizeof ratio);
      int pad = 20 - (int)strlen(inter);
      put(&t, "%*s%-20s%s", pad > 1 ? pad : 1, "", logical, ratio);
    }
    put(&t, "\n");
  }
  for (int i = 0; compressed && i < log->nrows; i++) {
    const log_row *r = &log->rows[i];
    if (!r->codec)
      continue;
    char name[128], size[32], wire[40], logical[40], ratio[16];
    record_name(log, r->kind, r->codec, r->group, name, sizeof name);
    zinc_comm_log_size_str(r->msg_bytes, size, sizeof size);
    zinc_comm_log_size_str(row_wire(r), wire, sizeof wire);
    zinc_comm_log_size_str(r->logical, logical, sizeof logical);
    ratio_str(r->logical, row_wire(r), ratio, sizeof ratio);
    put(&t, "%s: %s%s on the wire for %s uncompressed, %s (%llu call%s of %s, %s, %d ranks)\n",
        name, r->wire_estimated ? "~" : "", wire, logical, ratio, (unsigned long long)r->count,
        r->count == 1 ? "" : "s", size, r->algo ? r->algo : "", r->size);
  }
  pthread_mutex_unlock(&log->lock);
  if (t.failed) {
    free(t.s);
    return zinc_error(ZINC_ERR_NOMEM, "comms logger: out of memory for the summary of %d rows",
                      log->nrows);
  }
  *text = t.s;
  return ZINC_OK;
}
