/* test_swap.c — swap areas: write/read round trips of regions of odd sizes
 * and at block offsets, striped over 1-3 directories, with checksums on and
 * off, synchronous and overlapped; the directory and file layout (names,
 * modes, stripe sizes, header fields on disk); nothing left behind after
 * destroy; argument checks. */
#include "aio_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/base.h"
#include "offload/swap.h"

static char scratch[4096];
static char dirs[3][4200];

#define SLOT 65536                /* aio.block_size: one block on disk */
#define BLOCK (SLOT - 4096)       /* payload per block after the header */

static zinc_aio *make_engine(void) {
  zinc_aio_params p = test_params(NULL, SLOT, 8, 2);
  for (int i = 0; i < 3; i++)
    p.probe_dirs[i] = dirs[i];
  p.probe_dir_count = 3;
  zinc_aio *aio = NULL;
  if (zinc_aio_create(&p, &aio) != ZINC_OK)
    fail_msg("zinc_aio_create: %s", zinc_last_error());
  return aio;
}

static zinc_swap *make_area(zinc_aio *aio, int npaths, const char *name, int checksums,
                            const uint64_t *regions, int nregions) {
  const char *paths[3] = {dirs[0], dirs[1], dirs[2]};
  zinc_swap_params p = {paths, npaths, 3, name, "test", checksums, regions, nregions};
  zinc_swap *sw = NULL;
  if (zinc_swap_create(aio, &p, &sw) != ZINC_OK)
    fail_msg("zinc_swap_create: %s", zinc_last_error());
  return sw;
}

static void assert_dirs_empty(void) {
  for (int i = 0; i < 3; i++)
    if (dir_entries(dirs[i]) != 0)
      fail_msg("%s still holds %d entries after destroy", dirs[i], dir_entries(dirs[i]));
}

/* Regions: 1 byte, a block less a byte, exactly one block, a block and a
 * byte, 3.5 blocks, 7 blocks. */
static const uint64_t regions[] = {1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + BLOCK / 2,
                                   7 * BLOCK};
#define NREG ((int)(sizeof regions / sizeof regions[0]))

static void roundtrips(void **state) {
  (void)state;
  zinc_aio *aio = make_engine();
  for (int npaths = 1; npaths <= 3; npaths++)
    for (int checksums = 0; checksums <= 1; checksums++) {
      zinc_swap *sw = make_area(aio, npaths, "optimizer", checksums, regions, NREG);
      assert_int_equal(zinc_swap_region_count(sw), NREG);
      void *bufs[NREG];
      zinc_aio_handle *h[NREG];
      /* all regions written at once, overlapped, then read back at once */
      for (int r = 0; r < NREG; r++) {
        uint64_t cap = zinc_swap_buffer_bytes(sw, regions[r]);
        assert_int_equal(zinc_aio_buffer_alloc(aio, cap, &bufs[r]), ZINC_OK);
        pattern_fill(bufs[r], regions[r], (uint64_t)(npaths * 100 + r));
        assert_int_equal(zinc_swap_write(sw, r, 0, bufs[r], regions[r], &h[r]), ZINC_OK);
      }
      for (int r = 0; r < NREG; r++)
        if (zinc_aio_wait(h[r]) != ZINC_OK)
          fail_msg("write region %d: %s", r, zinc_last_error());
      for (int r = NREG - 1; r >= 0; r--) {
        memset(bufs[r], 0, regions[r]);
        assert_int_equal(zinc_swap_read(sw, r, 0, bufs[r], regions[r], &h[r]), ZINC_OK);
      }
      for (int r = 0; r < NREG; r++) {
        if (zinc_aio_wait(h[r]) != ZINC_OK)
          fail_msg("read region %d: %s", r, zinc_last_error());
        char what[64];
        snprintf(what, sizeof what, "region %d (%d paths, checksums %d)", r, npaths,
                 checksums);
        assert_int_equal(pattern_check(bufs[r], regions[r], (uint64_t)(npaths * 100 + r), what),
                         0);
      }
      /* partial ranges of the 7-block region: blocks 2..4, then the last 3 */
      unsigned char *part = bufs[NREG - 1];
      assert_int_equal(zinc_swap_read(sw, NREG - 1, 2 * BLOCK, part, 3 * BLOCK, NULL), ZINC_OK);
      for (uint64_t i = 0; i < 3 * BLOCK; i++)
        if (part[i] != pattern_byte((uint64_t)(npaths * 100 + NREG - 1), 2 * BLOCK + i))
          fail_msg("partial read: byte %llu differs", (unsigned long long)i);
      /* rewrite blocks 4..6 with a new pattern; blocks 0..3 keep the old */
      pattern_fill(part, 3 * BLOCK, 555);
      assert_int_equal(zinc_swap_write(sw, NREG - 1, 4 * BLOCK, part, 3 * BLOCK, NULL), ZINC_OK);
      memset(part, 0, 7 * BLOCK);
      assert_int_equal(zinc_swap_read(sw, NREG - 1, 0, part, 7 * BLOCK, NULL), ZINC_OK);
      assert_int_equal(pattern_check(part + 4 * BLOCK, 3 * BLOCK, 555, "rewritten"), 0);
      for (uint64_t i = 0; i < 4 * BLOCK; i++)
        if (part[i] != pattern_byte((uint64_t)(npaths * 100 + NREG - 1), i))
          fail_msg("block %llu changed by a write elsewhere", (unsigned long long)(i / BLOCK));
      for (int r = 0; r < NREG; r++)
        zinc_aio_buffer_free(aio, bufs[r]);
      zinc_swap_destroy(sw);
      assert_dirs_empty();
    }
  zinc_aio_destroy(aio);
}

static void layout_on_disk(void **state) {
  (void)state;
  zinc_aio *aio = make_engine();
  zinc_swap *sw = make_area(aio, 3, "param", 1, regions, NREG);
  /* blocks: 1 + 1 + 1 + 2 + 4 + 7 = 16 -> stripes of 6, 5, 5 slots */
  uint64_t slot = SLOT;
  assert_int_equal(zinc_swap_disk_bytes(sw), 16 * slot);
  assert_int_equal(zinc_swap_block_bytes(sw), BLOCK);
  static const uint64_t slots[3] = {6, 5, 5};
  for (int i = 0; i < 3; i++) {
    const char *dir = zinc_swap_dir(sw, i);
    char want[4400];
    assert_true(snprintf(want, sizeof want, "%s/zinc-swap-test-param-rank3", dirs[i]) <
                (int)sizeof want);
    assert_string_equal(dir, want);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    char file[4500];
    snprintf(file, sizeof file, "%s/stripe%d.swap", dir, i);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal((uint64_t)st.st_size, slots[i] * slot);
    assert_true((uint64_t)st.st_blocks * 512 >= slots[i] * slot); /* reserved, not sparse */
    snprintf(file, sizeof file, "%s/lock", dir);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(dir_entries(dir), 2);
  }
  /* region 4 (3.5 blocks) starts at area block 5: its blocks 5,6,7,8 go to
   * stripes 2,0,1,2 at slots 1,2,2,2. Check the last one's header. */
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 4 * BLOCK, &buf), ZINC_OK);
  pattern_fill(buf, regions[4], 42);
  assert_int_equal(zinc_swap_write(sw, 4, 0, buf, regions[4], NULL), ZINC_OK);
  char file[4500];
  snprintf(file, sizeof file, "%s/stripe2.swap", zinc_swap_dir(sw, 2));
  int fd = open(file, O_RDONLY);
  assert_true(fd >= 0);
  unsigned char hdr[4096];
  assert_int_equal(pread(fd, hdr, sizeof hdr, (off_t)(2 * slot)), (ssize_t)sizeof hdr);
  zinc_swap_header h;
  if (zinc_swap_header_parse(hdr, sizeof hdr, &h) != ZINC_OK)
    fail_msg("header on disk: %s", zinc_last_error());
  assert_int_equal(h.block_index, 8);
  assert_int_equal(h.payload_len, BLOCK / 2);
  assert_int_equal(h.header_bytes, 4096);
  assert_int_equal(h.flags, ZINC_SWAP_FLAG_CRC);
  assert_int_equal(h.payload_crc, zinc_crc32c(0, (char *)buf + 3 * BLOCK, BLOCK / 2));
  unsigned char payload[16];
  assert_int_equal(pread(fd, payload, 16, (off_t)(2 * slot + 4096)), 16);
  assert_memory_equal(payload, (char *)buf + 3 * BLOCK, 16);
  close(fd);
  zinc_aio_buffer_free(aio, buf);
  zinc_swap_destroy(sw);
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

static void header_codec(void **state) {
  (void)state;
  zinc_swap_header h = {ZINC_SWAP_VERSION, ZINC_SWAP_FLAG_CRC, 4096, 12345,
                        0x0123456789abcdefull, 99, 0xdeadbeef};
  unsigned char buf[4096];
  zinc_swap_header_encode(&h, buf, sizeof buf);
  zinc_swap_header back;
  assert_int_equal(zinc_swap_header_parse(buf, sizeof buf, &back), ZINC_OK);
  assert_int_equal(back.version, h.version);
  assert_int_equal(back.flags, h.flags);
  assert_int_equal(back.header_bytes, h.header_bytes);
  assert_int_equal(back.payload_len, h.payload_len);
  assert_int_equal(back.area_id, h.area_id);
  assert_int_equal(back.block_index, h.block_index);
  assert_int_equal(back.payload_crc, h.payload_crc);
  /* little-endian magic "ZSWP" at byte 0 */
  assert_memory_equal(buf, "ZSWP", 4);
  /* every single-bit flip in the 64 field bytes is caught */
  for (int bit = 0; bit < 64 * 8; bit++) {
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    if (zinc_swap_header_parse(buf, sizeof buf, &back) != ZINC_ERR_CORRUPT)
      fail_msg("flipping bit %d went unnoticed", bit);
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  buf[100] = 1; /* junk after the fields */
  assert_int_equal(zinc_swap_header_parse(buf, sizeof buf, &back), ZINC_ERR_CORRUPT);
  assert_non_null(strstr(zinc_last_error(), "after the fields"));
  memset(buf, 0, sizeof buf);
  assert_int_equal(zinc_swap_header_parse(buf, sizeof buf, &back), ZINC_ERR_CORRUPT);
  assert_non_null(strstr(zinc_last_error(), "never written"));
  assert_int_equal(zinc_swap_header_parse(buf, 10, &back), ZINC_ERR_CORRUPT);
}

static void argument_checks(void **state) {
  (void)state;
  zinc_aio *aio = make_engine();
  zinc_swap *sw = make_area(aio, 2, "optimizer", 1, regions, NREG);
  void *buf;
  assert_int_equal(zinc_aio_buffer_alloc(aio, 8 * BLOCK, &buf), ZINC_OK);
  zinc_aio_handle *h;
  assert_int_equal(zinc_swap_write(sw, NREG, 0, buf, 1, &h), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "no region"));
  assert_int_equal(zinc_swap_write(sw, 5, 100, buf, BLOCK, &h), ZINC_ERR_INVALID);
  assert_int_equal(zinc_swap_write(sw, 5, 0, buf, BLOCK + 1, &h), ZINC_ERR_INVALID);
  assert_int_equal(zinc_swap_write(sw, 5, 0, buf, 8 * BLOCK, &h), ZINC_ERR_INVALID);
  assert_int_equal(zinc_swap_write(sw, 5, 0, (char *)buf + 8, BLOCK, &h), ZINC_ERR_INVALID);
  /* reading a block never written */
  assert_int_equal(zinc_swap_read(sw, 2, 0, buf, BLOCK, NULL), ZINC_ERR_CORRUPT);
  assert_non_null(strstr(zinc_last_error(), "never written"));
  /* bad parameters create nothing */
  const char *paths[2] = {dirs[0], dirs[0]};
  zinc_swap_params p = {paths, 2, 0, "x", "test", 1, regions, NREG};
  zinc_swap *bad = NULL;
  assert_int_equal(zinc_swap_create(aio, &p, &bad), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "twice"));
  p.path_count = 1;
  p.name = "bad/name";
  assert_int_equal(zinc_swap_create(aio, &p, &bad), ZINC_ERR_INVALID);
  p.name = "ok";
  uint64_t zero = 0;
  p.region_bytes = &zero;
  p.region_count = 1;
  assert_int_equal(zinc_swap_create(aio, &p, &bad), ZINC_ERR_INVALID);
  assert_null(bad);
  zinc_aio_buffer_free(aio, buf);
  zinc_swap_destroy(sw);
  zinc_swap_destroy(NULL);
  assert_dirs_empty();
  zinc_aio_destroy(aio);
}

/* The same swap traffic through the other engine modes: overlap_events
 * off with single_submit on, and the pread/pwrite fallback (io_uring
 * unavailable, allowed); a corrupted payload is caught in each. */
static void other_engine_modes(void **state) {
  (void)state;
  for (int mode = 0; mode < 2; mode++) {
    zinc_aio_fault fault = {0};
    fault.uring_errno = mode ? ENOSYS : 0;
    zinc_aio_params p = test_params(dirs[0], SLOT, 3, 2);
    p.fault = &fault;
    p.overlap_events = mode;
    p.single_submit = !mode;
    p.allow_buffered_io = 1;
    zinc_aio *aio = NULL;
    if (zinc_aio_create(&p, &aio) != ZINC_OK)
      fail_msg("zinc_aio_create: %s", zinc_last_error());
    assert_int_equal(zinc_aio_uses_uring(aio), !mode);
    zinc_swap *sw = make_area(aio, 2, "optimizer", 1, regions, NREG);
    uint64_t bytes = regions[NREG - 1];
    unsigned char *buf;
    assert_int_equal(zinc_aio_buffer_alloc(aio, bytes, (void **)&buf), ZINC_OK);
    pattern_fill(buf, bytes, 61 + (uint64_t)mode);
    assert_int_equal(zinc_swap_write(sw, NREG - 1, 0, buf, bytes, NULL), ZINC_OK);
    memset(buf, 0, bytes);
    assert_int_equal(zinc_swap_read(sw, NREG - 1, 0, buf, bytes, NULL), ZINC_OK);
    assert_int_equal(pattern_check(buf, bytes, 61 + (uint64_t)mode, "other mode"), 0);
    /* the region's last block (area block 15) is stripe 1, slot 7 */
    char file[4500];
    snprintf(file, sizeof file, "%s/stripe1.swap", zinc_swap_dir(sw, 1));
    int fd = open(file, O_RDWR);
    unsigned char c = 0x77;
    assert_int_equal(pwrite(fd, &c, 1, 7 * SLOT + 4096 + 5), 1);
    fsync(fd);
    close(fd);
    assert_int_equal(zinc_swap_read(sw, NREG - 1, 0, buf, bytes, NULL), ZINC_ERR_CORRUPT);
    assert_non_null(strstr(zinc_last_error(), "block 15"));
    zinc_aio_buffer_free(aio, buf);
    zinc_swap_destroy(sw);
    assert_dirs_empty();
    zinc_aio_destroy(aio);
  }
  /* swap areas need room for a header in every block */
  zinc_aio_params p = test_params(dirs[0], 4096, 2, 1);
  zinc_aio *aio = NULL;
  assert_int_equal(zinc_aio_create(&p, &aio), ZINC_OK);
  const char *paths[1] = {dirs[0]};
  zinc_swap_params sp = {paths, 1, 0, "small", "test", 1, regions, 1};
  zinc_swap *sw = NULL;
  assert_int_equal(zinc_swap_create(aio, &sp, &sw), ZINC_ERR_INVALID);
  assert_non_null(strstr(zinc_last_error(), "aio.block_size 4096 is too small"));
  zinc_aio_destroy(aio);
}

/* Create and destroy areas in a loop: no files, fds or memory kept. */
static void create_destroy_loop(void **state) {
  (void)state;
  int fds_before = dir_entries("/proc/self/fd");
  for (int it = 0; it < 20; it++) {
    zinc_aio *aio = make_engine();
    zinc_swap *a = make_area(aio, 3, "optimizer", 1, regions, NREG);
    zinc_swap *b = make_area(aio, 2, "param", 0, regions, 2);
    zinc_swap_destroy(b);
    zinc_swap_destroy(a);
    zinc_aio_destroy(aio);
  }
  assert_dirs_empty();
  assert_int_equal(dir_entries("/proc/self/fd"), fds_before);
}

int main(void) {
  scratch_make(scratch, sizeof scratch, "swap");
  for (int i = 0; i < 3; i++) {
    snprintf(dirs[i], sizeof dirs[i], "%s/nvme%d", scratch, i);
    mkdir(dirs[i], 0755);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(roundtrips),      cmocka_unit_test(layout_on_disk),
      cmocka_unit_test(header_codec),    cmocka_unit_test(argument_checks),
      cmocka_unit_test(other_engine_modes), cmocka_unit_test(create_destroy_loop),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_remove(scratch);
  return rc;
}
