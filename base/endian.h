/*
 * endian.h — the one little-endian codec: every integer zinc writes into a
 * file header or trailer (checkpoint shard trailers, swap block headers,
 * the safetensors header length) goes through these.
 *
 * Invariant: the bytes are little-endian whatever the host (built from
 * shifts, not memcpy), so a file written on one machine reads on any other;
 * p need not be aligned. Compilers turn each into a plain load or store on
 * a little-endian host.
 */
#ifndef ZINC_BASE_ENDIAN_H
#define ZINC_BASE_ENDIAN_H

#include <stdint.h>

static inline void zinc_le_put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static inline void zinc_le_put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static inline void zinc_le_put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint16_t zinc_le_get_u16(const unsigned char *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t zinc_le_get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static inline uint64_t zinc_le_get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

#endif /* ZINC_BASE_ENDIAN_H */
