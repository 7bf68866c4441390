/*
 * rng.h — the tests' seeded random generator: xorshift64 (shifts 13, 7, 17)
 * on a caller-owned state, so a test's inputs depend only on its seed.
 * rng_u64 returns the whole new state (tests that want 53 bits for a double
 * take its top bits); rng_u32 returns bits 16..47 of it.
 */
#ifndef ZINC_TESTS_COMMON_RNG_H
#define ZINC_TESTS_COMMON_RNG_H

#include <stdint.h>

typedef struct {
  uint64_t s; /* the state; any value but 0 */
} test_rng;

static inline uint64_t rng_u64(test_rng *r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return r->s;
}

static inline uint32_t rng_u32(test_rng *r) { return (uint32_t)(rng_u64(r) >> 16); }

#endif /* ZINC_TESTS_COMMON_RNG_H */
