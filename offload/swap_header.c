/*
 * swap_header.c — the header in front of every swap block (layout in
 * swap.h): encoding, and parsing of untrusted bytes.
 *
 * Both are pure functions of their arguments; the parser reads at most
 * `len` bytes, allocates nothing and says precisely what is wrong, so it
 * can be fuzzed on its own (tests/fuzz). Fields are little-endian on
 * disk whatever the host.
 */
#include "offload/swap.h"

#include <string.h>

#include "base/base.h"
#include "base/endian.h"

#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_FLAGS 6
#define OFF_HEADER_BYTES 8
#define OFF_PAYLOAD_LEN 12
#define OFF_AREA 16
#define OFF_BLOCK 24
#define OFF_PAYLOAD_CRC 32
#define OFF_RESERVED 36
#define OFF_HEADER_CRC 60

void zinc_swap_header_encode(const zinc_swap_header *h, void *buf, size_t len) {
  unsigned char *p = buf;
  memset(p, 0, len);
  zinc_le_put_u32(p + OFF_MAGIC, ZINC_SWAP_MAGIC);
  zinc_le_put_u16(p + OFF_VERSION, h->version);
  zinc_le_put_u16(p + OFF_FLAGS, h->flags);
  zinc_le_put_u32(p + OFF_HEADER_BYTES, h->header_bytes);
  zinc_le_put_u32(p + OFF_PAYLOAD_LEN, h->payload_len);
  zinc_le_put_u64(p + OFF_AREA, h->area_id);
  zinc_le_put_u64(p + OFF_BLOCK, h->block_index);
  zinc_le_put_u32(p + OFF_PAYLOAD_CRC, h->payload_crc);
  zinc_le_put_u32(p + OFF_HEADER_CRC, zinc_crc32c(0, p, OFF_HEADER_CRC));
}

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

zinc_status zinc_swap_header_parse(const void *buf, size_t len, zinc_swap_header *out) {
  const unsigned char *p = buf;
  memset(out, 0, sizeof *out);
  if (!p || len < ZINC_SWAP_HEADER_USED)
    return zinc_error(ZINC_ERR_CORRUPT, "swap block header: %zu bytes, need at least %d", len,
                      ZINC_SWAP_HEADER_USED);
  if (all_zero(p, ZINC_SWAP_HEADER_USED))
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header is all zeros: the block was never written");
  uint32_t magic = zinc_le_get_u32(p + OFF_MAGIC);
  if (magic != ZINC_SWAP_MAGIC)
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: magic 0x%08x is not 0x%08x (\"ZSWP\"): not a zinc "
                      "swap block",
                      magic, ZINC_SWAP_MAGIC);
  uint32_t stored = zinc_le_get_u32(p + OFF_HEADER_CRC);
  uint32_t actual = zinc_crc32c(0, p, OFF_HEADER_CRC);
  if (stored != actual)
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: header crc32c 0x%08x does not match its contents "
                      "(0x%08x)",
                      stored, actual);
  zinc_swap_header h;
  h.version = zinc_le_get_u16(p + OFF_VERSION);
  h.flags = zinc_le_get_u16(p + OFF_FLAGS);
  h.header_bytes = zinc_le_get_u32(p + OFF_HEADER_BYTES);
  h.payload_len = zinc_le_get_u32(p + OFF_PAYLOAD_LEN);
  h.area_id = zinc_le_get_u64(p + OFF_AREA);
  h.block_index = zinc_le_get_u64(p + OFF_BLOCK);
  h.payload_crc = zinc_le_get_u32(p + OFF_PAYLOAD_CRC);
  if (h.version != ZINC_SWAP_VERSION)
    return zinc_error(ZINC_ERR_CORRUPT, "swap block header: version %u, this zinc reads %d",
                      h.version, ZINC_SWAP_VERSION);
  if (h.flags & ~ZINC_SWAP_FLAG_CRC)
    return zinc_error(ZINC_ERR_CORRUPT, "swap block header: unknown flags 0x%04x", h.flags);
  if (!(h.flags & ZINC_SWAP_FLAG_CRC) && h.payload_crc != 0)
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: payload crc 0x%08x set without its flag",
                      h.payload_crc);
  if (!all_zero(p + OFF_RESERVED, OFF_HEADER_CRC - OFF_RESERVED))
    return zinc_error(ZINC_ERR_CORRUPT, "swap block header: reserved bytes are not zero");
  if (h.header_bytes < 512 || (h.header_bytes & (h.header_bytes - 1)))
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: header size %u is not a power of two >= 512",
                      h.header_bytes);
  if (h.payload_len == 0)
    return zinc_error(ZINC_ERR_CORRUPT, "swap block header: empty payload");
  size_t end = len < h.header_bytes ? len : h.header_bytes;
  if (!all_zero(p + ZINC_SWAP_HEADER_USED, end - ZINC_SWAP_HEADER_USED))
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: bytes after the fields are not zero");
  *out = h;
  return ZINC_OK;
}
