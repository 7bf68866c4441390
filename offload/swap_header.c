/*
 * swap_header.c — the header in front of every swap block (layout in
 * swap.h): encoding, and parsing of untrusted bytes.
 *
 * Both are pure functions of their arguments; the parser reads at most
 * `len` bytes, allocates nothing and says precisely what is wrong, so it
 * can be fuzzed on its own (tests/fuzz_swap). Fields are little-endian on
 * disk whatever the host.
 */
#include "offload/swap.h"

#include <string.h>

#include "base/base.h"

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

static void put16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

void zinc_swap_header_encode(const zinc_swap_header *h, void *buf, size_t len) {
  unsigned char *p = buf;
  memset(p, 0, len);
  put32(p + OFF_MAGIC, ZINC_SWAP_MAGIC);
  put16(p + OFF_VERSION, h->version);
  put16(p + OFF_FLAGS, h->flags);
  put32(p + OFF_HEADER_BYTES, h->header_bytes);
  put32(p + OFF_PAYLOAD_LEN, h->payload_len);
  put64(p + OFF_AREA, h->area_id);
  put64(p + OFF_BLOCK, h->block_index);
  put32(p + OFF_PAYLOAD_CRC, h->payload_crc);
  put32(p + OFF_HEADER_CRC, zinc_crc32c(0, p, OFF_HEADER_CRC));
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
  uint32_t magic = get32(p + OFF_MAGIC);
  if (magic != ZINC_SWAP_MAGIC)
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: magic 0x%08x is not 0x%08x (\"ZSWP\"): not a zinc "
                      "swap block",
                      magic, ZINC_SWAP_MAGIC);
  uint32_t stored = get32(p + OFF_HEADER_CRC);
  uint32_t actual = zinc_crc32c(0, p, OFF_HEADER_CRC);
  if (stored != actual)
    return zinc_error(ZINC_ERR_CORRUPT,
                      "swap block header: header crc32c 0x%08x does not match its contents "
                      "(0x%08x)",
                      stored, actual);
  zinc_swap_header h;
  h.version = get16(p + OFF_VERSION);
  h.flags = get16(p + OFF_FLAGS);
  h.header_bytes = get32(p + OFF_HEADER_BYTES);
  h.payload_len = get32(p + OFF_PAYLOAD_LEN);
  h.area_id = get64(p + OFF_AREA);
  h.block_index = get64(p + OFF_BLOCK);
  h.payload_crc = get32(p + OFF_PAYLOAD_CRC);
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
