/* fuzz_swap_header.c — libFuzzer target for the swap block header parser
 * (offload/swap_header.c), the one parser of swap-file bytes.
 *
 * Properties checked on every input: the parser never reads past `size`
 * (ASan), never crashes or hits undefined behaviour (UBSan), and whatever
 * it accepts is a header that encodes back to exactly the bytes it came
 * from, with the documented invariants (power-of-two header of >= 512
 * bytes, non-empty payload, only known flags, crc flag if a crc is set).
 *
 * Without ZINC_FUZZ the same entry point is built with a small main()
 * (replay.c) that feeds it every file named on the command line: the seed
 * corpus and any crash reproducers run in every CI build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "offload/swap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parse and, if accepted, check the invariants and the round trip. */
static void check_one(const uint8_t *data, size_t size) {
  zinc_swap_header h;
  if (zinc_swap_header_parse(data, size, &h) != ZINC_OK)
    return;
  if (h.header_bytes < 512 || (h.header_bytes & (h.header_bytes - 1)) || h.payload_len == 0 ||
      (h.flags & ~ZINC_SWAP_FLAG_CRC) || (!(h.flags & ZINC_SWAP_FLAG_CRC) && h.payload_crc))
    abort();
  size_t n = size < h.header_bytes ? size : h.header_bytes;
  if (n > 65536)
    n = 65536;
  unsigned char *again = malloc(n);
  if (!again)
    return;
  zinc_swap_header_encode(&h, again, n);
  if (memcmp(again, data, n) != 0)
    abort();
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_one(data, size);
  /* A random header almost never carries a matching crc, which would stop
   * the fuzzer at the crc check; parse a copy whose crc is made right too,
   * so that every field check behind it is explored. */
  if (size >= ZINC_SWAP_HEADER_USED && size <= 65536) {
    uint8_t *fixed = malloc(size);
    if (!fixed)
      return 0;
    memcpy(fixed, data, size);
    uint32_t crc = zinc_crc32c(0, fixed, 60);
    for (int i = 0; i < 4; i++)
      fixed[60 + i] = (uint8_t)(crc >> (8 * i));
    check_one(fixed, size);
    free(fixed);
  }
  return 0;
}
