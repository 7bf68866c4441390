/* test_aio_faults.c — every fault the I/O engine can inject gives the
 * documented status and message, or is recovered from: an errno on the
 * n-th request (EIO, ENOSPC), short transfers, EINTR/EAGAIN retries and
 * their limit, O_DIRECT refused (EINVAL on open) and io_uring unavailable
 * (ENOSYS/EPERM) with and without aio.allow_buffered_io, the
 * ZINC_AIO_FAULT grammar and the variable itself. */
#include "aio_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/base.h"

static char scratch[4096];

#define BLOCK 65536

typedef struct {
  zinc_aio *aio;
  int file;
  void *buf;
  uint64_t bytes;
  char path[4200];
} fixture;

static void setup_with(fixture *f, const zinc_aio_fault *fault, int allow_buffered,
                       int rings) {
  zinc_aio_params p = test_params(scratch, BLOCK, 4, rings);
  p.fault = fault;
  p.allow_buffered_io = allow_buffered;
  zinc_status st = zinc_aio_create(&p, &f->aio);
  if (st != ZINC_OK)
    fail_msg("zinc_aio_create: %s", zinc_last_error());
  snprintf(f->path, sizeof f->path, "%s/faults.bin", scratch);
  st = zinc_aio_file_open(f->aio, f->path, O_CREAT | O_TRUNC, 0600, &f->file);
  if (st != ZINC_OK)
    fail_msg("open: %s", zinc_last_error());
  f->bytes = 8 * BLOCK;
  assert_int_equal(zinc_aio_buffer_alloc(f->aio, f->bytes, &f->buf), ZINC_OK);
}

static void teardown(fixture *f) {
  zinc_aio_buffer_free(f->aio, f->buf);
  zinc_aio_destroy(f->aio);
}

/* Write the pattern, read it back into a cleared buffer, check it. */
static zinc_status write_read(fixture *f, uint64_t seed) {
  pattern_fill(f->buf, f->bytes, seed);
  zinc_status st = zinc_aio_write(f->aio, f->file, 0, f->buf, f->bytes);
  if (st != ZINC_OK)
    return st;
  memset(f->buf, 0, f->bytes);
  st = zinc_aio_read(f->aio, f->file, 0, f->buf, f->bytes);
  if (st == ZINC_OK)
    assert_int_equal(pattern_check(f->buf, f->bytes, seed, "round trip"), 0);
  return st;
}

static void fault_grammar(void **state) {
  (void)state;
  zinc_aio_fault f;
  assert_int_equal(zinc_aio_fault_parse("error@3=EIO,short@1,open=EINVAL", &f), ZINC_OK);
  assert_int_equal(f.fail_request, 3);
  assert_int_equal(f.fail_errno, EIO);
  assert_int_equal(f.fail_count, 1);
  assert_int_equal(f.short_request, 1);
  assert_int_equal(f.open_errno, EINVAL);
  assert_int_equal(zinc_aio_fault_parse("error@2=EAGAINx5,uring=ENOSYS,fallocate=28", &f),
                   ZINC_OK);
  assert_int_equal(f.fail_errno, EAGAIN);
  assert_int_equal(f.fail_count, 5);
  assert_int_equal(f.uring_errno, ENOSYS);
  assert_int_equal(f.fallocate_errno, ENOSPC);
  assert_int_equal(zinc_aio_fault_parse("enospc@7", &f), ZINC_OK);
  assert_int_equal(f.fail_request, 7);
  assert_int_equal(f.fail_errno, ENOSPC);
  static const char *bad[] = {"error@3", "error@0=EIO", "error@x=EIO", "short@", "short@2=1",
                              "open", "open=EWHAT", "fail@1=EIO", "error@1=EIOx0", "@@",
                              "enospc@-1", "uring="};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (zinc_aio_fault_parse(bad[i], &f) != ZINC_ERR_INVALID)
      fail_msg("\"%s\" was accepted", bad[i]);
    assert_non_null(strstr(zinc_last_error(), bad[i]));
    assert_int_equal(f.fail_request, 0); /* nothing half-applied */
  }
}

static void io_error_names_file_offset_errno(void **state) {
  (void)state;
  fixture f;
  zinc_aio_fault fault = {0};
  fault.fail_request = 3; /* the third 64 KiB request of the write */
  fault.fail_errno = EIO;
  fault.fail_count = 1;
  setup_with(&f, &fault, 0, 1);
  zinc_status st = write_read(&f, 1);
  assert_int_equal(st, ZINC_ERR_IO);
  const char *msg = zinc_last_error();
  char want[128];
  snprintf(want, sizeof want, "at offset %d ", 2 * BLOCK);
  if (!strstr(msg, f.path) || !strstr(msg, want) || !strstr(msg, "Input/output error") ||
      !strstr(msg, "writing"))
    fail_msg("message lacks file, offset or errno text: %s", msg);
  /* the engine is usable afterwards */
  zinc_aio_fault_set(f.aio, NULL);
  assert_int_equal(write_read(&f, 2), ZINC_OK);
  /* a read error names the read */
  fault.fail_request = 2;
  zinc_aio_fault_set(f.aio, &fault);
  assert_int_equal(zinc_aio_read(f.aio, f.file, 0, f.buf, f.bytes), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "reading"));
  teardown(&f);
}

static void enospc_on_write(void **state) {
  (void)state;
  fixture f;
  zinc_aio_fault fault;
  assert_int_equal(zinc_aio_fault_parse("enospc@5", &fault), ZINC_OK);
  setup_with(&f, &fault, 0, 2);
  assert_int_equal(write_read(&f, 3), ZINC_ERR_IO);
  const char *msg = zinc_last_error();
  if (!strstr(msg, "No space left on device") || !strstr(msg, "ENOSPC") ||
      !strstr(msg, f.path) || !strstr(msg, "free space"))
    fail_msg("unexpected ENOSPC message: %s", msg);
  teardown(&f);
}

static void short_transfers_are_completed(void **state) {
  (void)state;
  for (int backend = 0; backend < 2; backend++) { /* io_uring, then pread/pwrite */
    fixture f;
    zinc_aio_fault fault = {0};
    fault.short_request = 2;
    fault.uring_errno = backend ? ENOSYS : 0;
    setup_with(&f, &fault, backend, 1);
    assert_int_equal(zinc_aio_uses_uring(f.aio), !backend);
    pattern_fill(f.buf, f.bytes, 4);
    assert_int_equal(zinc_aio_write(f.aio, f.file, 0, f.buf, f.bytes), ZINC_OK);
    zinc_aio_stats s;
    zinc_aio_stats_get(f.aio, &s);
    assert_int_equal(s.short_transfers, 1);
    assert_int_equal(s.requests, 9); /* 8 blocks + 1 remainder */
    assert_int_equal(s.bytes_written, f.bytes);
    fault.short_request = 5; /* a read this time */
    zinc_aio_fault_set(f.aio, &fault);
    memset(f.buf, 0, f.bytes);
    assert_int_equal(zinc_aio_read(f.aio, f.file, 0, f.buf, f.bytes), ZINC_OK);
    assert_int_equal(pattern_check(f.buf, f.bytes, 4, "after short read"), 0);
    zinc_aio_stats_get(f.aio, &s);
    assert_int_equal(s.short_transfers, 2);
    teardown(&f);
  }
}

static void eintr_eagain_are_retried(void **state) {
  (void)state;
  static const char *specs[] = {"error@1=EINTR", "error@4=EAGAINx3", "error@2=EINTRx10"};
  for (size_t i = 0; i < 3; i++) {
    fixture f;
    zinc_aio_fault fault;
    assert_int_equal(zinc_aio_fault_parse(specs[i], &fault), ZINC_OK);
    setup_with(&f, &fault, 0, 1);
    zinc_status st = write_read(&f, 5 + i);
    if (st != ZINC_OK)
      fail_msg("%s: %s", specs[i], zinc_last_error());
    zinc_aio_stats s;
    zinc_aio_stats_get(f.aio, &s);
    assert_int_equal(s.retries, (uint64_t)fault.fail_count);
    teardown(&f);
  }
  /* a request that keeps failing with EAGAIN is given up on */
  fixture f;
  zinc_aio_fault fault;
  assert_int_equal(zinc_aio_fault_parse("error@1=EAGAINx100000", &fault), ZINC_OK);
  setup_with(&f, &fault, 0, 1);
  assert_int_equal(zinc_aio_write(f.aio, f.file, 0, f.buf, BLOCK), ZINC_ERR_IO);
  assert_non_null(strstr(zinc_last_error(), "still failing after retries"));
  assert_non_null(strstr(zinc_last_error(), "EAGAIN"));
  zinc_aio_stats s;
  zinc_aio_stats_get(f.aio, &s);
  assert_int_equal(s.retries, ZINC_AIO_MAX_RETRIES);
  teardown(&f);
}

/* A failure skips the rest of its batch (no hang, no more I/O), and the
 * other batches in flight are unaffected. */
static void failure_skips_rest_of_batch(void **state) {
  (void)state;
  fixture f;
  zinc_aio_fault fault = {0};
  setup_with(&f, &fault, 0, 2);
  enum { N = 64 };
  void *big;
  assert_int_equal(zinc_aio_buffer_alloc(f.aio, (size_t)N * BLOCK, &big), ZINC_OK);
  pattern_fill(big, (uint64_t)N * BLOCK, 6);
  fault.fail_request = 1;
  fault.fail_errno = EIO;
  fault.fail_count = 1;
  zinc_aio_fault_set(f.aio, &fault);
  zinc_aio_handle *h;
  zinc_aio_op op = {ZINC_AIO_WRITE, f.file, 0, big, (uint64_t)N * BLOCK, 0};
  assert_int_equal(zinc_aio_submit(f.aio, &op, 1, NULL, &h), ZINC_OK);
  assert_int_equal(zinc_aio_wait(h), ZINC_ERR_IO);
  zinc_aio_stats s;
  zinc_aio_stats_get(f.aio, &s);
  if (s.requests >= N)
    fail_msg("all %llu requests ran after the first failed", (unsigned long long)s.requests);
  zinc_aio_buffer_free(f.aio, big);
  teardown(&f);
}

static void odirect_refused(void **state) {
  (void)state;
  zinc_aio_fault fault = {0};
  fault.open_errno = EINVAL;
  zinc_aio_params p = test_params(scratch, BLOCK, 4, 1);
  p.fault = &fault;
  zinc_aio *aio = NULL;
  assert_int_equal(zinc_aio_create(&p, &aio), ZINC_ERR_UNSUPPORTED);
  assert_null(aio);
  const char *msg = zinc_last_error();
  if (!strstr(msg, scratch) || !strstr(msg, "refuses O_DIRECT") ||
      !strstr(msg, "allow_buffered_io"))
    fail_msg("unexpected refusal message: %s", msg);
  /* allowed: one warning, buffered files, working I/O */
  test_stderr cap;
  test_stderr_begin(&cap);
  fixture f;
  setup_with(&f, &fault, 1, 1);
  char *log = test_stderr_end(&cap);
  fputs(log, stderr); /* still shown in the test's output */
  assert_non_null(strstr(log, "refuses O_DIRECT"));
  assert_non_null(strstr(log, "allow_buffered_io is set"));
  free(log);
  assert_false(zinc_aio_is_direct(f.aio));
  assert_true(zinc_aio_uses_uring(f.aio));
  assert_int_equal(write_read(&f, 8), ZINC_OK);
  teardown(&f);
}

static void uring_unavailable(void **state) {
  (void)state;
  static const int errs[] = {ENOSYS, EPERM};
  for (int i = 0; i < 2; i++) {
    zinc_aio_fault fault = {0};
    fault.uring_errno = errs[i];
    zinc_aio_params p = test_params(scratch, BLOCK, 4, 2);
    p.fault = &fault;
    zinc_aio *aio = NULL;
    assert_int_equal(zinc_aio_create(&p, &aio), ZINC_ERR_UNSUPPORTED);
    const char *msg = zinc_last_error();
    if (!strstr(msg, "io_uring is unavailable") || !strstr(msg, strerror(errs[i])) ||
        !strstr(msg, "allow_buffered_io"))
      fail_msg("unexpected message: %s", msg);
    test_stderr cap;
    test_stderr_begin(&cap);
    fixture f;
    setup_with(&f, &fault, 1, 2);
    char *log = test_stderr_end(&cap);
    fputs(log, stderr); /* still shown in the test's output */
    assert_non_null(strstr(log, "falls back to 2 synchronous pread/pwrite"));
    free(log);
    assert_false(zinc_aio_uses_uring(f.aio));
    assert_true(zinc_aio_is_direct(f.aio)); /* the filesystem still takes O_DIRECT */
    assert_int_equal(write_read(&f, 9 + (uint64_t)i), ZINC_OK);
    /* faults act on the fallback too */
    zinc_aio_fault io = {0};
    io.fail_request = 2;
    io.fail_errno = EIO;
    io.fail_count = 1;
    zinc_aio_fault_set(f.aio, &io);
    assert_int_equal(write_read(&f, 11), ZINC_ERR_IO);
    assert_non_null(strstr(zinc_last_error(), "Input/output error"));
    teardown(&f);
  }
}

static void environment_variable(void **state) {
  (void)state;
  zinc_aio_params p = test_params(scratch, BLOCK, 4, 1);
  p.fault = NULL; /* read ZINC_AIO_FAULT */
  setenv("ZINC_AIO_FAULT", "error@2=EIO", 1);
  zinc_aio *aio = NULL;
  assert_int_equal(zinc_aio_create(&p, &aio), ZINC_OK);
  zinc_aio_fault got;
  zinc_aio_fault_get(aio, &got);
  assert_int_equal(got.fail_request, 2);
  assert_int_equal(got.fail_errno, EIO);
  char path[4200];
  snprintf(path, sizeof path, "%s/env.bin", scratch);
  int file;
  assert_int_equal(zinc_aio_file_open(aio, path, O_CREAT | O_TRUNC, 0600, &file), ZINC_OK);
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 2 * BLOCK, &buf), ZINC_OK);
  memset(buf, 1, 2 * BLOCK);
  assert_int_equal(zinc_aio_write(aio, file, 0, buf, 2 * BLOCK), ZINC_ERR_IO);
  zinc_aio_buffer_free(aio, buf);
  zinc_aio_destroy(aio);
  setenv("ZINC_AIO_FAULT", "uring=ENOSYS", 1);
  assert_int_equal(zinc_aio_create(&p, &aio), ZINC_ERR_UNSUPPORTED);
  setenv("ZINC_AIO_FAULT", "error@2", 1);
  assert_int_equal(zinc_aio_create(&p, &aio), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "ZINC_AIO_FAULT"));
  unsetenv("ZINC_AIO_FAULT");
}

int main(void) {
  scratch_make(scratch, sizeof scratch, "aio_faults");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fault_grammar),
      cmocka_unit_test(io_error_names_file_offset_errno),
      cmocka_unit_test(enospc_on_write),
      cmocka_unit_test(short_transfers_are_completed),
      cmocka_unit_test(eintr_eagain_are_retried),
      cmocka_unit_test(failure_skips_rest_of_batch),
      cmocka_unit_test(odirect_refused),
      cmocka_unit_test(uring_unavailable),
      cmocka_unit_test(environment_variable),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_remove(scratch);
  return rc;
}
