/* test_aio_engine.c — the I/O engine without faults: write/read round trips
 * of odd sizes and offsets over block sizes, queue depths, ring counts and
 * the single_submit / overlap_events modes; registered and unregistered
 * buffers; framed batches; several threads submitting at once; argument
 * checks. */
#include "aio_test_util.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/base.h"

static char scratch[4096];

static zinc_aio *make_engine(int64_t bs, int qd, int rings, int single, int overlap) {
  zinc_aio_params p = test_params(scratch, bs, qd, rings);
  p.single_submit = single;
  p.overlap_events = overlap;
  zinc_aio *aio = NULL;
  zinc_status st = zinc_aio_create(&p, &aio);
  if (st != ZINC_OK)
    fail_msg("zinc_aio_create: %s", zinc_last_error());
  return aio;
}

static int open_scratch_file(zinc_aio *aio, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", scratch, name);
  int file = -1;
  zinc_status st = zinc_aio_file_open(aio, path, O_CREAT | O_TRUNC, 0600, &file);
  if (st != ZINC_OK)
    fail_msg("open %s: %s", path, zinc_last_error());
  return file;
}

/* Write three ops of odd lengths at odd offsets in one batch, read them
 * back in another (in reverse order), compare. */
static void roundtrip(zinc_aio *aio, int file, int registered, uint64_t seed) {
  size_t a = zinc_aio_alignment(aio);
  uint64_t lens[3] = {a * 3, a * 257 + zinc_aio_block_size(aio), a * 1031};
  uint64_t offs[3] = {a * 5, a * 5 + lens[0] + a * 7, a * 5 + lens[0] + a * 7 + lens[1] + a};
  void *w[3], *r[3];
  for (int i = 0; i < 3; i++) {
    if (registered) {
      assert_int_equal(zinc_aio_buffer_alloc(aio, lens[i], &w[i]), ZINC_OK);
      assert_int_equal(zinc_aio_buffer_alloc(aio, lens[i], &r[i]), ZINC_OK);
    } else {
      assert_int_equal(posix_memalign(&w[i], 4096, lens[i]), 0);
      assert_int_equal(posix_memalign(&r[i], 4096, lens[i]), 0);
    }
    pattern_fill(w[i], lens[i], seed + (uint64_t)i);
    memset(r[i], 0xee, lens[i]);
  }
  zinc_aio_op wops[3], rops[3];
  for (int i = 0; i < 3; i++) {
    wops[i] = (zinc_aio_op){ZINC_AIO_WRITE, file, offs[i], w[i], lens[i], 0};
    rops[2 - i] = (zinc_aio_op){ZINC_AIO_READ, file, offs[i], r[i], lens[i], 0};
  }
  zinc_aio_handle *h;
  assert_int_equal(zinc_aio_submit(aio, wops, 3, NULL, &h), ZINC_OK);
  zinc_status st = zinc_aio_wait(h);
  if (st != ZINC_OK)
    fail_msg("write batch: %s", zinc_last_error());
  assert_int_equal(zinc_aio_submit(aio, rops, 3, NULL, &h), ZINC_OK);
  st = zinc_aio_wait(h);
  if (st != ZINC_OK)
    fail_msg("read batch: %s", zinc_last_error());
  for (int i = 0; i < 3; i++) {
    char what[64];
    snprintf(what, sizeof what, "op %d (%llu bytes)", i, (unsigned long long)lens[i]);
    assert_int_equal(pattern_check(r[i], lens[i], seed + (uint64_t)i, what), 0);
    if (registered) {
      zinc_aio_buffer_free(aio, w[i]);
      zinc_aio_buffer_free(aio, r[i]);
    } else {
      free(w[i]);
      free(r[i]);
    }
  }
}

static void modes_grid(void **state) {
  (void)state;
  static const int64_t block_sizes[] = {4096, 65536, 1 << 20};
  static const int depths[] = {1, 3, 8};
  static const int rings[] = {1, 3};
  uint64_t seed = 1;
  for (size_t b = 0; b < 3; b++)
    for (size_t d = 0; d < 3; d++)
      for (size_t r = 0; r < 2; r++)
        for (int mode = 0; mode < 4; mode++) {
          int single = mode & 1, overlap = (mode >> 1) & 1;
          zinc_aio *aio = make_engine(block_sizes[b], depths[d], rings[r], single, overlap);
          assert_true(zinc_aio_is_direct(aio));
          assert_true(zinc_aio_uses_uring(aio));
          int file = open_scratch_file(aio, "grid.bin");
          roundtrip(aio, file, (int)(seed & 1), seed);
          zinc_aio_stats stats;
          zinc_aio_stats_get(aio, &stats);
          assert_true(stats.requests > 0);
          assert_int_equal(stats.bytes_read, stats.bytes_written);
          assert_int_equal(stats.retries, 0);
          assert_int_equal(zinc_aio_file_close(aio, file), ZINC_OK);
          zinc_aio_destroy(aio);
          seed++;
        }
}

/* Requests are exactly ceil(bytes / block_size) per op. */
static void request_split(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(65536, 4, 2, 0, 1);
  int file = open_scratch_file(aio, "split.bin");
  void *buf;
  uint64_t bytes = 65536 * 5 + 4096;
  assert_int_equal(zinc_aio_buffer_alloc(aio, bytes, &buf), ZINC_OK);
  pattern_fill(buf, bytes, 99);
  assert_int_equal(zinc_aio_write(aio, file, 0, buf, bytes), ZINC_OK);
  zinc_aio_stats s;
  zinc_aio_stats_get(aio, &s);
  assert_int_equal(s.requests, 6);
  assert_int_equal(s.bytes_written, bytes);
  memset(buf, 0, bytes);
  assert_int_equal(zinc_aio_read(aio, file, 0, buf, bytes), ZINC_OK);
  assert_int_equal(pattern_check(buf, bytes, 99, "split"), 0);
  zinc_aio_buffer_free(aio, buf);
  zinc_aio_destroy(aio); /* closes the file */
}

/* A framing that stamps the tag into the header and checks it back. */
static zinc_status stamp_fill(void *ctx, const zinc_aio_op *op, void *header) {
  (void)ctx;
  memset(header, 0, 4096);
  memcpy(header, &op->tag, sizeof op->tag);
  return ZINC_OK;
}
static zinc_status stamp_check(void *ctx, const zinc_aio_op *op, const void *header) {
  int *checked = ctx;
  uint64_t tag;
  memcpy(&tag, header, sizeof tag);
  if (tag != op->tag)
    return zinc_error(ZINC_ERR_CORRUPT, "stamp %llu, expected %llu", (unsigned long long)tag,
                      (unsigned long long)op->tag);
  __atomic_add_fetch(checked, 1, __ATOMIC_RELAXED);
  return ZINC_OK;
}

static void framed_batches(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(1 << 20, 4, 2, 0, 1);
  int file = open_scratch_file(aio, "framed.bin");
  enum { N = 9 };
  uint64_t payload = 8192, slot = 4096 + payload;
  unsigned char *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, N * payload, (void **)&buf), ZINC_OK);
  pattern_fill(buf, N * payload, 7);
  zinc_aio_op ops[N];
  for (int i = 0; i < N; i++)
    ops[i] = (zinc_aio_op){ZINC_AIO_WRITE, file, (uint64_t)i * slot, buf + i * payload,
                           payload, 1000 + (uint64_t)i};
  int checked = 0;
  zinc_aio_framing fr = {4096, stamp_fill, stamp_check, &checked};
  zinc_aio_handle *h;
  assert_int_equal(zinc_aio_submit(aio, ops, N, &fr, &h), ZINC_OK);
  assert_int_equal(zinc_aio_wait(h), ZINC_OK);
  memset(buf, 0, N * payload);
  for (int i = 0; i < N; i++)
    ops[i].dir = ZINC_AIO_READ;
  assert_int_equal(zinc_aio_submit(aio, ops, N, &fr, &h), ZINC_OK);
  assert_int_equal(zinc_aio_wait(h), ZINC_OK);
  assert_int_equal(checked, N);
  assert_int_equal(pattern_check(buf, N * payload, 7, "framed payload"), 0);
  /* headers landed where they should: slot 4's header holds tag 1004 */
  uint64_t tag = 0;
  unsigned char *hdr;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 4096, (void **)&hdr), ZINC_OK);
  assert_int_equal(zinc_aio_read(aio, file, 4 * slot, hdr, 4096), ZINC_OK);
  memcpy(&tag, hdr, sizeof tag);
  assert_int_equal(tag, 1004);
  /* a read whose tag disagrees fails the batch with the callback's message */
  ops[2].tag = 77;
  assert_int_equal(zinc_aio_submit(aio, ops, N, &fr, &h), ZINC_OK);
  assert_int_equal(zinc_aio_wait(h), ZINC_ERR_CORRUPT);
  assert_non_null(strstr(zinc_last_error(), "stamp 1002, expected 77"));
  zinc_aio_buffer_free(aio, hdr);
  zinc_aio_buffer_free(aio, buf);
  zinc_aio_destroy(aio);
}

typedef struct {
  zinc_aio *aio;
  int file;
  int index;
  int failures;
} thread_job;

/* Each thread owns a 1 MiB range; it writes, reads back and checks 5
 * times with its own pattern while the others do the same. */
static void *thread_main(void *arg) {
  thread_job *j = arg;
  uint64_t bytes = 1 << 20, off = (uint64_t)j->index * bytes;
  void *w, *r;
  if (zinc_aio_buffer_alloc(j->aio, bytes, &w) || zinc_aio_buffer_alloc(j->aio, bytes, &r)) {
    j->failures++;
    return NULL;
  }
  for (int it = 0; it < 5; it++) {
    uint64_t seed = (uint64_t)j->index * 100 + (uint64_t)it;
    pattern_fill(w, bytes, seed);
    zinc_aio_handle *h;
    zinc_aio_op op = {ZINC_AIO_WRITE, j->file, off, w, bytes, 0};
    if (zinc_aio_submit(j->aio, &op, 1, NULL, &h) || zinc_aio_wait(h)) {
      j->failures++;
      break;
    }
    op.dir = ZINC_AIO_READ;
    op.buf = r;
    if (zinc_aio_submit(j->aio, &op, 1, NULL, &h))
      j->failures++;
    while (!zinc_aio_done(h))
      sched_yield();
    if (zinc_aio_wait(h) || pattern_check(r, bytes, seed, "thread range"))
      j->failures++;
  }
  zinc_aio_buffer_free(j->aio, w);
  zinc_aio_buffer_free(j->aio, r);
  return NULL;
}

static void concurrent_submitters(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(65536, 4, 2, 0, 1);
  int file = open_scratch_file(aio, "threads.bin");
  enum { T = 4 };
  pthread_t tid[T];
  thread_job jobs[T];
  for (int i = 0; i < T; i++) {
    jobs[i] = (thread_job){aio, file, i, 0};
    pthread_create(&tid[i], NULL, thread_main, &jobs[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(tid[i], NULL);
    assert_int_equal(jobs[i].failures, 0);
  }
  zinc_aio_destroy(aio);
}

static void argument_checks(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(65536, 2, 1, 0, 1);
  int file = open_scratch_file(aio, "args.bin");
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 8192, &buf), ZINC_OK);
  zinc_aio_handle *h = (zinc_aio_handle *)1;
  zinc_aio_op op = {ZINC_AIO_WRITE, file, 100, buf, 4096, 0};
  assert_int_equal(zinc_aio_submit(aio, &op, 1, NULL, &h), ZINC_ERR_INVALID);
  assert_null(h);
  assert_non_null(strstr(zinc_last_error(), "offset 100"));
  assert_non_null(strstr(zinc_last_error(), "args.bin"));
  op.offset = 0;
  op.bytes = 1000;
  assert_int_equal(zinc_aio_submit(aio, &op, 1, NULL, &h), ZINC_ERR_INVALID);
  op.bytes = 4096;
  op.file = 17;
  assert_int_equal(zinc_aio_submit(aio, &op, 1, NULL, &h), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "file 17 is not open"));
  /* an empty batch is done at once */
  assert_int_equal(zinc_aio_submit(aio, NULL, 0, NULL, &h), ZINC_OK);
  assert_true(zinc_aio_done(h));
  assert_int_equal(zinc_aio_wait(h), ZINC_OK);
  assert_int_equal(zinc_aio_wait(NULL), ZINC_OK);
  /* bad parameters */
  zinc_aio_params p = test_params(scratch, 1000, 4, 1);
  zinc_aio *bad = NULL;
  assert_int_equal(zinc_aio_create(&p, &bad), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "not a multiple"));
  p = test_params(scratch, 65536, 0, 1);
  assert_int_equal(zinc_aio_create(&p, &bad), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "aio.queue_depth"));
  p = test_params(scratch, 65536, 4, 0);
  assert_int_equal(zinc_aio_create(&p, &bad), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "aio.intra_op_parallelism"));
  char missing[4200];
  snprintf(missing, sizeof missing, "%s/no-such-dir", scratch);
  p = test_params(missing, 65536, 4, 1);
  assert_int_equal(zinc_aio_create(&p, &bad), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "no-such-dir"));
  assert_null(bad);
  zinc_aio_buffer_free(aio, buf);
  zinc_aio_destroy(aio);
  zinc_aio_destroy(NULL);
}

static void settings_mapping(void **state) {
  (void)state;
  zinc_settings s;
  memset(&s, 0, sizeof s);
  s.aio_block_size = 2 << 20;
  s.aio_queue_depth = 16;
  s.aio_intra_op_parallelism = 3;
  s.aio_single_submit = 1;
  s.aio_overlap_events = 0;
  s.aio_allow_buffered_io = 1;
  s.offload_optimizer.device = ZINC_OFFLOAD_NVME;
  char a[] = "/a", b[] = "/b", c[] = "/c";
  s.offload_optimizer.nvme_paths[0] = a;
  s.offload_optimizer.nvme_paths[1] = b;
  s.offload_optimizer.nvme_path_count = 2;
  s.offload_param.device = ZINC_OFFLOAD_CPU; /* not probed */
  s.offload_param.nvme_paths[0] = c;
  s.offload_param.nvme_path_count = 1;
  zinc_aio_params p;
  zinc_aio_params_from_settings(&s, &p);
  assert_int_equal(p.block_size, 2 << 20);
  assert_int_equal(p.queue_depth, 16);
  assert_int_equal(p.rings, 3);
  assert_int_equal(p.single_submit, 1);
  assert_int_equal(p.overlap_events, 0);
  assert_int_equal(p.allow_buffered_io, 1);
  assert_int_equal(p.probe_dir_count, 2);
  assert_string_equal(p.probe_dirs[1], "/b");
  assert_null(p.fault);
}

int main(void) {
  scratch_make(scratch, sizeof scratch, "aio_engine");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(modes_grid),        cmocka_unit_test(request_split),
      cmocka_unit_test(framed_batches),    cmocka_unit_test(concurrent_submitters),
      cmocka_unit_test(argument_checks),   cmocka_unit_test(settings_mapping),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_remove(scratch);
  return rc;
}
