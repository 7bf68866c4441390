/*
 * test_host_zero_order.c — a host (pinned) engine buffer is zero when
 * zinc_engine_buffer_alloc returns, with no zeroing left queued on a
 * stream: on the cuda device a queued zeroing kernel would run whenever
 * the engine's stream gets to it, possibly after the CPU optimizer wrote
 * the staging buffer or after a copy on another stream filled it.
 *
 * The cpu device finishes its work at the call, so the test gives the
 * engine a device whose fill_zero behaves as a GPU's does: queued on its
 * stream and run only when that stream is synchronised. Host buffers must
 * not depend on it (the data written after the allocation survives the
 * sync); device buffers still get their queued zeros.
 */
#include <mpi.h>

#include "engine/engine.h"
#include "engine/support.h"
#include "engine_test.h"

/* the queued zeroings (a GPU stream's pending kernels) */
enum { MAX_PENDING = 64 };
static struct { void *dst; size_t bytes; } pending[MAX_PENDING];
static int npending;
static const zinc_device_ops *cpu_ops;
static zinc_device_ops queued_ops;

static zinc_status queued_fill_zero(zinc_device *d, void *dst, size_t bytes, zinc_stream *s) {
  (void)d;
  (void)s;
  if (npending == MAX_PENDING)
    return zinc_error(ZINC_ERR_INVALID, "test device: too many queued zeroings");
  pending[npending].dst = dst;
  pending[npending].bytes = bytes;
  npending++;
  return ZINC_OK;
}

static zinc_status queued_stream_sync(zinc_device *d, zinc_stream *s) {
  for (int i = 0; i < npending; i++)
    memset(pending[i].dst, 0, pending[i].bytes);
  npending = 0;
  return cpu_ops->stream_sync(d, s);
}

/* a fresh allocation holds what the previous owner left: not zeros */
static zinc_status dirty_alloc(zinc_device *d, size_t bytes, int location, int category,
                               void **out) {
  ZINC_CHECK(cpu_ops->alloc(d, bytes, location, category, out));
  memset(*out, 0xcd, bytes);
  return ZINC_OK;
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v)
      return 0;
  return 1;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  et_run r = et_defaults();
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  cpu_ops = e->dev->ops;
  queued_ops = *cpu_ops;
  queued_ops.fill_zero = queued_fill_zero;
  queued_ops.stream_sync = queued_stream_sync;
  queued_ops.alloc = dirty_alloc;
  e->dev->ops = &queued_ops;

  enum { BYTES = 4096 };
  void *host = NULL, *dev = NULL;
  ET_OK(zinc_engine_buffer_alloc(e, BYTES, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, &host, "host test"));
  ET_CHECK(all_bytes(host, BYTES, 0), "a host buffer is not zero when its allocation returns");
  memset(host, 0x5a, BYTES); /* the CPU optimizer writes the staging */
  ET_OK(queued_stream_sync(e->dev, e->stream)); /* the engine's stream catches up */
  ET_CHECK(all_bytes(host, BYTES, 0x5a), "a zeroing queued by the host buffer's allocation "
           "ran after the data was written: the data is lost");
  ET_OK(zinc_engine_buffer_alloc(e, BYTES, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, &dev, "dev test"));
  ET_OK(queued_stream_sync(e->dev, e->stream));
  ET_CHECK(all_bytes(dev, BYTES, 0), "a device buffer is not zero after its stream synced");
  zinc_engine_buffer_free(e, host, BYTES, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  zinc_engine_buffer_free(e, dev, BYTES, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  e->dev->ops = cpu_ops;
  et_model_free(&m);
  zinc_engine_destroy(e);
  if (et_rank == 0)
    printf(et_failures ? "host zero order FAILED\n"
                       : "host buffers zeroed at allocation; device buffers on the stream\n");
  MPI_Finalize();
  return et_failures ? 1 : 0;
}
