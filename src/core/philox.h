/* Philox4x32-10 (Salmon et al., SC'11): the counter-based generator behind
 * ingot_rand*. Header-only so every backend computes the same stream:
 * element i of a draw depends only on (seed, offset, i). */
#ifndef INGOT_CORE_PHILOX_H
#define INGOT_CORE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PHILOX_FN static __host__ __device__ __forceinline__
#else
#define PHILOX_FN static inline
#endif

typedef struct philox4 {
  uint32_t v[4];
} philox4;

PHILOX_FN uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

/* Four 32-bit words for counter block `ctr` under key `seed`. */
PHILOX_FN philox4 philox4x32_10(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  philox4 out = {{c0, c1, c2, c3}};
  return out;
}

/* The draw layouts (shared by every backend):
 * uniform: element i is word i%4 of block offset+i/4, scaled by the dtype's
 *   mantissa bits (u = (w >> (32-bits)) * 2^-bits, so u < 1 exactly);
 * normal: block offset+i/4 gives four normals by Box-Muller on word pairs
 *   (0,1) and (2,3), computed in double;
 * randint: element i takes words (2*(i%2), 2*(i%2)+1) of block offset+i/2
 *   as one 64-bit value, reduced modulo the range. */
PHILOX_FN uint32_t philox_word(uint64_t seed, uint64_t offset, int64_t i) {
  philox4 b = philox4x32_10(seed, offset + (uint64_t)i / 4);
  return b.v[i % 4];
}

#endif
