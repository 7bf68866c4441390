/* test_base.c — errors, logger parsing, crc32c against published vectors,
 * the little-endian codec against spelled-out bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "base/endian.h"

static void crc32c_known_vectors(void **state) {
  (void)state;
  /* RFC 3720 B.4 / the "check" value of CRC-32C. */
  assert_int_equal(zinc_crc32c(0, "123456789", 9), 0xE3069283u);
  unsigned char zeros[32] = {0};
  assert_int_equal(zinc_crc32c(0, zeros, 32), 0x8A9136AAu);
  unsigned char ones[32];
  memset(ones, 0xff, sizeof ones);
  assert_int_equal(zinc_crc32c(0, ones, 32), 0x62A8AB43u);
  unsigned char inc[32];
  for (int i = 0; i < 32; i++)
    inc[i] = (unsigned char)i;
  assert_int_equal(zinc_crc32c(0, inc, 32), 0x46DD794Eu);
}

static void crc32c_chains(void **state) {
  (void)state;
  const char *s = "the quick brown fox jumps over the lazy dog, twice over";
  size_t n = strlen(s);
  uint32_t whole = zinc_crc32c(0, s, n);
  for (size_t cut = 0; cut <= n; cut++) {
    uint32_t part = zinc_crc32c(zinc_crc32c(0, s, cut), s + cut, n - cut);
    assert_int_equal(part, whole);
  }
}

static void error_messages(void **state) {
  (void)state;
  zinc_error_clear();
  assert_string_equal(zinc_last_error(), "");
  assert_int_equal(zinc_error(ZINC_ERR_IO, "write %s at offset %d", "f.bin", 4096), ZINC_ERR_IO);
  assert_string_equal(zinc_last_error(), "write f.bin at offset 4096");
  zinc_error_wrap(ZINC_ERR_IO, "saving checkpoint %s", "step5");
  assert_string_equal(zinc_last_error(), "saving checkpoint step5: write f.bin at offset 4096");
  assert_string_equal(zinc_status_name(ZINC_ERR_CORRUPT), "ZINC_ERR_CORRUPT");
  assert_int_equal(zinc_dtype_size(ZINC_BF16), 2);
  assert_int_equal(zinc_dtype_size((zinc_dtype)7), 0);
}

static void log_levels(void **state) {
  (void)state;
  assert_int_equal(zinc_log_level_parse("DEBUG"), ZINC_LOG_DEBUG);
  assert_int_equal(zinc_log_level_parse("warning"), ZINC_LOG_WARN);
  assert_int_equal(zinc_log_level_parse("verbose"), -1);
  assert_int_equal(zinc_log_level_parse(NULL), -1);
}

static void little_endian_bytes(void **state) {
  (void)state;
  unsigned char b[8];
  zinc_le_put_u16(b, 0x1122);
  assert_memory_equal(b, "\x22\x11", 2);
  assert_int_equal(zinc_le_get_u16(b), 0x1122);
  zinc_le_put_u32(b, 0x5057535au); /* the swap header's magic: "ZSWP" on disk */
  assert_memory_equal(b, "ZSWP", 4);
  assert_int_equal(zinc_le_get_u32(b), 0x5057535au);
  zinc_le_put_u64(b, 0x0102030405060708ull);
  assert_memory_equal(b, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
  assert_true(zinc_le_get_u64(b) == 0x0102030405060708ull);
  zinc_le_put_u64(b, UINT64_MAX);
  assert_true(zinc_le_get_u64(b) == UINT64_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(crc32c_known_vectors),
      cmocka_unit_test(crc32c_chains),
      cmocka_unit_test(error_messages),
      cmocka_unit_test(log_levels),
      cmocka_unit_test(little_endian_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
