/* test_swap_faults.c — what goes wrong with swap areas gives the
 * documented status and message and leaves no stray files: a flipped byte
 * in a payload or a header (ZINC_ERR_CORRUPT naming file and offset; with
 * checksums off a payload flip goes through, as documented), blocks in the
 * wrong slot, a full disk at reservation (real and injected), I/O errors
 * and short transfers during swap I/O, stale directories of crashed runs
 * (replaced with a warning), directories held by a live owner, and a
 * filesystem that reports no size (ramfs: no false "0 available"). */
#include "aio_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cmocka.h>

#include "base/base.h"
#include "offload/swap.h"

static char scratch[4096];
static char dirs[2][4200];

#define SLOT 65536          /* aio.block_size: one block on disk */
#define BLOCK (SLOT - 4096) /* payload per block after the header */

static zinc_aio *make_engine(const zinc_aio_fault *fault) {
  zinc_aio_params p = test_params(dirs[0], SLOT, 4, 1);
  p.probe_dirs[1] = dirs[1];
  p.probe_dir_count = 2;
  if (fault)
    p.fault = fault;
  zinc_aio *aio = NULL;
  if (zinc_aio_create(&p, &aio) != ZINC_OK)
    fail_msg("zinc_aio_create: %s", zinc_last_error());
  return aio;
}

static zinc_status try_area(zinc_aio *aio, int npaths, const char *name, int checksums,
                            const uint64_t *regions, int nregions, zinc_swap **out) {
  const char *paths[2] = {dirs[0], dirs[1]};
  zinc_swap_params p = {paths, npaths, 0, name, "faults", checksums, regions, nregions};
  return zinc_swap_create(aio, &p, out);
}

static zinc_swap *make_area(zinc_aio *aio, int npaths, int checksums, const uint64_t *regions,
                            int nregions) {
  zinc_swap *sw = NULL;
  if (try_area(aio, npaths, "optimizer", checksums, regions, nregions, &sw) != ZINC_OK)
    fail_msg("zinc_swap_create: %s", zinc_last_error());
  return sw;
}

static void assert_dirs_empty(void) {
  for (int i = 0; i < 2; i++)
    if (dir_entries(dirs[i]) != 0)
      fail_msg("%s still holds %d entries", dirs[i], dir_entries(dirs[i]));
}

static void flip_byte(const char *file, uint64_t offset) {
  int fd = open(file, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, (off_t)offset), 1);
  c ^= 0x10;
  assert_int_equal(pwrite(fd, &c, 1, (off_t)offset), 1);
  assert_int_equal(fsync(fd), 0);
  close(fd);
}

static void expect_message(const char *needle) {
  static char last[2048];
  if (strcmp(last, zinc_last_error())) { /* show each message once, for the log */
    snprintf(last, sizeof last, "%s", zinc_last_error());
    printf("message: %s\n", last);
  }
  if (!strstr(zinc_last_error(), needle))
    fail_msg("message lacks \"%s\": %s", needle, zinc_last_error());
}

static void corrupted_blocks(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(NULL);
  uint64_t region = 4 * BLOCK;
  for (int checksums = 1; checksums >= 0; checksums--) {
    zinc_swap *sw = make_area(aio, 2, checksums, &region, 1);
    unsigned char *buf;
    assert_int_equal(zinc_aio_buffer_alloc(aio, region, (void **)&buf), ZINC_OK);
    pattern_fill(buf, region, 21);
    assert_int_equal(zinc_swap_write(sw, 0, 0, buf, region, NULL), ZINC_OK);
    /* block 3 = stripe 1, slot 1: flip a payload byte */
    char file[4400];
    snprintf(file, sizeof file, "%s/stripe1.swap", zinc_swap_dir(sw, 1));
    flip_byte(file, SLOT + 4096 + 1234);
    zinc_status st = zinc_swap_read(sw, 0, 0, buf, region, NULL);
    if (checksums) {
      assert_int_equal(st, ZINC_ERR_CORRUPT);
      char off[64];
      snprintf(off, sizeof off, "at offset %d", SLOT);
      expect_message(file);
      expect_message(off);
      expect_message("payload crc32c");
      expect_message("block 3");
    } else {
      /* documented: without checksums a payload flip is not detected */
      assert_int_equal(st, ZINC_OK);
      assert_int_equal(buf[3 * BLOCK + 1234], pattern_byte(21, 3 * BLOCK + 1234) ^ 0x10);
    }
    flip_byte(file, SLOT + 4096 + 1234); /* back */
    assert_int_equal(zinc_swap_read(sw, 0, 0, buf, region, NULL), ZINC_OK);
    assert_int_equal(pattern_check(buf, region, 21, "after repair"), 0);
    /* a header byte (the block index field) is caught with checksums on or off */
    flip_byte(file, SLOT + 25);
    assert_int_equal(zinc_swap_read(sw, 0, 2 * BLOCK, buf, 2 * BLOCK, NULL), ZINC_ERR_CORRUPT);
    expect_message("header crc32c");
    expect_message(file);
    flip_byte(file, SLOT + 25);
    /* block 0 written into block 2's slot (both on stripe 0) */
    char file0[4400];
    snprintf(file0, sizeof file0, "%s/stripe0.swap", zinc_swap_dir(sw, 0));
    int fd = open(file0, O_RDWR);
    unsigned char *slot = malloc(SLOT);
    assert_int_equal(pread(fd, slot, SLOT, 0), SLOT);
    assert_int_equal(pwrite(fd, slot, SLOT, SLOT), SLOT);
    fsync(fd);
    close(fd);
    free(slot);
    assert_int_equal(zinc_swap_read(sw, 0, 2 * BLOCK, buf, BLOCK, NULL), ZINC_ERR_CORRUPT);
    expect_message("its header names block 0");
    zinc_aio_buffer_free(aio, buf);
    zinc_swap_destroy(sw);
    assert_dirs_empty();
  }
  zinc_aio_destroy(aio);
}

static void disk_full_at_reservation(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(NULL);
  struct statvfs vs;
  assert_int_equal(statvfs(dirs[0], &vs), 0);
  uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
  uint64_t regions[2] = {BLOCK, avail + (1ull << 30)};
  zinc_swap *sw = NULL;
  assert_int_equal(try_area(aio, 1, "optimizer", 1, regions, 2, &sw), ZINC_ERR_NOMEM);
  assert_null(sw);
  expect_message("not enough space");
  expect_message(dirs[0]);
  expect_message("available");
  assert_dirs_empty();
  /* the same, injected at fallocate (both paths on one disk) */
  zinc_aio_fault fault = {0};
  fault.fallocate_errno = ENOSPC;
  zinc_aio_fault_set(aio, &fault);
  assert_int_equal(try_area(aio, 2, "optimizer", 1, regions, 1, &sw), ZINC_ERR_NOMEM);
  expect_message("reserving");
  expect_message("No space left on device");
  assert_dirs_empty();
  fault.fallocate_errno = EIO;
  zinc_aio_fault_set(aio, &fault);
  assert_int_equal(try_area(aio, 2, "optimizer", 1, regions, 1, &sw), ZINC_ERR_IO);
  expect_message("Input/output error");
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

static void io_faults_during_swap(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(NULL);
  uint64_t regions[2] = {1, 5 * BLOCK + 512};
  zinc_swap *sw = make_area(aio, 2, 1, regions, 2);
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 6 * BLOCK, &buf), ZINC_OK);
  /* short transfers inside the header and inside the payload, on write
   * and on read, are completed and the data is intact */
  for (int r = 0; r < 2; r++) {
    zinc_aio_fault fault = {0};
    fault.short_request = 1;
    zinc_aio_fault_set(aio, &fault);
    pattern_fill(buf, regions[r], 31 + (uint64_t)r);
    assert_int_equal(zinc_swap_write(sw, r, 0, buf, regions[r], NULL), ZINC_OK);
    zinc_aio_fault_set(aio, &fault); /* restarts the count: the read's first */
    memset(buf, 0, regions[r]);
    assert_int_equal(zinc_swap_read(sw, r, 0, buf, regions[r], NULL), ZINC_OK);
    assert_int_equal(pattern_check(buf, regions[r], 31 + (uint64_t)r, "after short"), 0);
    zinc_aio_stats s;
    zinc_aio_stats_get(aio, &s);
    assert_true(s.short_transfers >= 2 * (uint64_t)(r + 1));
  }
  /* an I/O error names the stripe file */
  zinc_aio_fault fault = {0};
  fault.fail_request = 3;
  fault.fail_errno = EIO;
  fault.fail_count = 1;
  zinc_aio_fault_set(aio, &fault);
  assert_int_equal(zinc_swap_write(sw, 1, 0, buf, regions[1], NULL), ZINC_ERR_IO);
  expect_message("stripe");
  expect_message("Input/output error");
  fault.fail_errno = ENOSPC;
  zinc_aio_fault_set(aio, &fault);
  assert_int_equal(zinc_swap_write(sw, 1, 0, buf, regions[1], NULL), ZINC_ERR_IO);
  expect_message("No space left on device");
  zinc_aio_fault_set(aio, NULL);
  zinc_aio_buffer_free(aio, buf);
  zinc_swap_destroy(sw);
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

/* A directory as a crashed run leaves it: lock file nobody holds, a pid,
 * a data file. */
static void make_stale(const char *dirname, int age_s) {
  char dir[4400], file[4500];
  snprintf(dir, sizeof dir, "%s/%s", dirs[0], dirname);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(file, sizeof file, "%s/lock", dir);
  FILE *f = fopen(file, "w");
  fprintf(f, "pid 999999 on crashed-host\n");
  fclose(f);
  snprintf(file, sizeof file, "%s/stripe0.swap", dir);
  f = fopen(file, "w");
  fprintf(f, "old state");
  fclose(f);
  if (age_s) {
    struct timespec old[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
    utimensat(AT_FDCWD, dir, old, 0);
  }
}

static void stale_directories(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(NULL);
  make_stale("zinc-swap-faults-optimizer-rank0", 0); /* ours, from a crash */
  make_stale("zinc-swap-oldjob-param-rank1", 0);      /* another job's crash */
  char young[4400], old[4400];
  snprintf(young, sizeof young, "%s/zinc-swap-other-optimizer-rank0", dirs[0]);
  snprintf(old, sizeof old, "%s/zinc-swap-older-optimizer-rank0", dirs[0]);
  assert_int_equal(mkdir(young, 0700), 0); /* no lock: perhaps being created */
  assert_int_equal(mkdir(old, 0700), 0);   /* no lock, an hour old: debris */
  struct timespec hour_ago[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
  utimensat(AT_FDCWD, old, hour_ago, 0);
  test_stderr cap;
  test_stderr_begin(&cap);
  uint64_t region = 2 * BLOCK;
  zinc_swap *sw = make_area(aio, 1, 1, &region, 1);
  char *log = test_stderr_end(&cap);
  fputs(log, stderr); /* still shown in the test's output */
  assert_non_null(strstr(log, "replaced stale swap directory"));
  assert_non_null(strstr(log, "pid 999999 on crashed-host"));
  assert_non_null(strstr(log, "removing stale swap directory"));
  assert_non_null(strstr(log, "zinc-swap-oldjob-param-rank1"));
  assert_non_null(strstr(log, "zinc-swap-older-optimizer-rank0"));
  free(log);
  assert_int_equal(dir_entries(dirs[0]), 2); /* ours and the young one */
  assert_int_equal(dir_entries(young), 0);
  assert_int_equal(dir_entries(zinc_swap_dir(sw, 0)), 2); /* lock, stripe0.swap */
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, region, &buf), ZINC_OK);
  pattern_fill(buf, region, 41);
  assert_int_equal(zinc_swap_write(sw, 0, 0, buf, region, NULL), ZINC_OK);
  memset(buf, 0, region);
  assert_int_equal(zinc_swap_read(sw, 0, 0, buf, region, NULL), ZINC_OK);
  assert_int_equal(pattern_check(buf, region, 41, "after replacing"), 0);
  zinc_aio_buffer_free(aio, buf);
  zinc_swap_destroy(sw);
  rmdir(young);
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

static void live_owner_is_respected(void **state) {
  (void)state;
  zinc_aio *aio = make_engine(NULL);
  uint64_t region = BLOCK;
  zinc_swap *first = make_area(aio, 2, 1, &region, 1);
  /* same key, name and rank in this process: refused, the first intact */
  zinc_swap *second = NULL;
  assert_int_equal(try_area(aio, 2, "optimizer", 1, &region, 1, &second), ZINC_ERR_IO);
  assert_null(second);
  expect_message("is in use by pid");
  expect_message("ZINC_SWAP_KEY");
  assert_int_equal(dir_entries(zinc_swap_dir(first, 0)), 2);
  assert_int_equal(dir_entries(zinc_swap_dir(first, 1)), 2);
  /* another name is fine beside it, and the scan leaves the held one be */
  zinc_swap *param = NULL;
  assert_int_equal(try_area(aio, 2, "param", 1, &region, 1, &param), ZINC_OK);
  assert_int_equal(dir_entries(zinc_swap_dir(first, 0)), 2);
  zinc_swap_destroy(param);
  zinc_swap_destroy(first);
  /* a lock held by another open file (another process would hold it the
   * same way) */
  char dir[4400], lock[4500];
  snprintf(dir, sizeof dir, "%s/zinc-swap-faults-optimizer-rank0", dirs[0]);
  snprintf(lock, sizeof lock, "%s/lock", dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  int fd = open(lock, O_RDWR | O_CREAT, 0600);
  assert_int_equal(flock(fd, LOCK_EX), 0);
  assert_int_equal(write(fd, "pid 4242 on elsewhere\n", 22), 22);
  assert_int_equal(try_area(aio, 1, "optimizer", 1, &region, 1, &second), ZINC_ERR_IO);
  expect_message("in use by pid 4242 on elsewhere");
  close(fd);
  unlink(lock);
  rmdir(dir);
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

/* ramfs reports no size (statvfs gives 0 blocks, 0 free) and grows with
 * what is written: the space check must not refuse it with "0 available".
 * Needs root to mount one: SKIPPED otherwise. */
static void filesystem_without_size(void **state) {
  (void)state;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/ramfs", scratch);
  mkdir(dir, 0755);
  if (mount("zinc-test", dir, "ramfs", 0, "mode=0755") != 0) {
    rmdir(dir);
    skip(); /* cmocka prints SKIPPED: mounting a ramfs needs root */
  }
  zinc_aio_params p = test_params(dir, SLOT, 4, 1);
  p.allow_buffered_io = 1; /* ramfs has no O_DIRECT */
  zinc_aio *aio = NULL;
  zinc_status st = zinc_aio_create(&p, &aio);
  if (st == ZINC_OK) {
    const char *paths[1] = {dir};
    uint64_t region = 4 * BLOCK;
    zinc_swap_params sp = {paths, 1, 0, "optimizer", "faults", 1, &region, 1};
    zinc_swap *sw = NULL;
    st = zinc_swap_create(aio, &sp, &sw);
    if (st != ZINC_OK)
      fprintf(stderr, "swap on ramfs: %s\n", zinc_last_error());
    zinc_swap_destroy(sw);
    zinc_aio_destroy(aio);
  } else {
    fprintf(stderr, "aio on ramfs: %s\n", zinc_last_error());
  }
  umount(dir);
  rmdir(dir);
  assert_int_equal(st, ZINC_OK);
}

int main(void) {
  scratch_make(scratch, sizeof scratch, "swap_faults");
  for (int i = 0; i < 2; i++) {
    snprintf(dirs[i], sizeof dirs[i], "%s/nvme%d", scratch, i);
    mkdir(dirs[i], 0755);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(corrupted_blocks),      cmocka_unit_test(disk_full_at_reservation),
      cmocka_unit_test(io_faults_during_swap), cmocka_unit_test(stale_directories),
      cmocka_unit_test(live_owner_is_respected), cmocka_unit_test(filesystem_without_size),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_remove(scratch);
  return rc;
}
