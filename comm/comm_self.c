/*
 * comm_self.c — the comm of a world of one: every collective is a copy (or
 * nothing, in place). No dependency; used when a trainer runs one process.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm.h"
#include "comm/comm_log.h"

struct zinc_comm_req {
  int unused;
};

static void copy_if_needed(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src)
    memmove(dst, src, bytes);
}

static zinc_status self_run(zinc_comm *c, const zinc_coll *colls, int n) {
  ZINC_CHECK(zinc_coll_validate(c, colls, n));
  for (int i = 0; i < n; i++) {
    const zinc_coll *o = &colls[i];
    size_t es = zinc_dt_size(o->dtype);
    switch (o->kind) {
    case ZINC_COLL_ALLREDUCE:
    case ZINC_COLL_REDUCE_SCATTER:
    case ZINC_COLL_ALLGATHER:
      copy_if_needed(o->recv, o->send, o->count * es);
      break;
    case ZINC_COLL_ALLGATHERV:
      copy_if_needed((char *)o->recv + o->displs[0] * es, o->send, o->count * es);
      break;
    case ZINC_COLL_ALLTOALLV:
      copy_if_needed((char *)o->recv + o->rdispls[0] * es,
                     (const char *)o->send + o->displs[0] * es, o->counts[0] * es);
      break;
    case ZINC_COLL_BROADCAST:
    case ZINC_COLL_BARRIER:
      break;
    }
  }
  if (c->log)
    zinc_comm_log_batch(c, colls, n, 0.0, NULL); /* nothing leaves the rank */
  return ZINC_OK;
}

static zinc_status self_start(zinc_comm *c, const zinc_coll *colls, int n,
                              zinc_comm_req **req) {
  *req = NULL;
  ZINC_CHECK(self_run(c, colls, n));
  zinc_comm_req *r = malloc(sizeof *r);
  if (!r)
    return zinc_error(ZINC_ERR_NOMEM, "comm self: out of memory for a request");
  *req = r;
  return ZINC_OK;
}

static zinc_status self_wait(zinc_comm *c, zinc_comm_req *req) {
  free(req);
  return ZINC_OK;
}

static zinc_status self_test(zinc_comm *c, zinc_comm_req *req, int *done) {
  free(req);
  *done = 1;
  return ZINC_OK;
}

static zinc_status self_split(zinc_comm *c, int color, int key, zinc_comm **out) {
  return zinc_comm_self_create(out);
}

static void self_destroy(zinc_comm *c) { free(c); }

static const zinc_comm_ops self_ops = {
    .name = "self",
    .run = self_run,
    .start = self_start,
    .wait = self_wait,
    .test = self_test,
    .split = self_split,
    .alloc_shared = NULL,
    .free_shared = NULL,
    .destroy = self_destroy,
};

zinc_status zinc_comm_self_create(zinc_comm **out) {
  zinc_comm *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c)
    return zinc_error(ZINC_ERR_NOMEM, "comm self: out of memory");
  c->ops = &self_ops;
  c->algo = "self";
  c->rank = 0;
  c->size = 1;
  c->timeout_s = 0;
  static const int node_of_self[1] = {0};
  c->nnodes = 1;
  c->node_of = node_of_self;
  *out = c;
  return ZINC_OK;
}
