// Pieces shared by the MoE kernel files (moe.cu, moe_block.cu): the routing
// warp (softmax weights and top-k of one token's logits, in the CPU's order,
// src/cpu/moe.c), the staged-row layout and the gate's activation.
#pragma once

#include <math.h>
#include <stdint.h>

namespace {

// Staged-row position of element kk: interleaved when vec (piece q of 16-byte
// chunk c at (q * nch + c) * 4: conflict-free float4 reads by consecutive
// lanes; kk % 4 == 0 gives 4 consecutive floats), plain otherwise.
template <int VEC>
__device__ __forceinline__ int64_t sidx(int64_t kk, int64_t nch, bool vec) {
  if (!vec) return kk;
  return (((kk % VEC) >> 2) * nch + kk / VEC) * 4 + (kk & 3);
}

// silu(g) as the gate_up kernels and the CPU's MOE_GATE_UP compute it.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// The softmax weights of a warp's k choices (id[0..k) written, all lanes
// alike; first = id[0], mine = id[lane] kept in registers): expf(x - max) over
// the E logits rs summed in a fixed order, renormalised over the k if asked.
__device__ void route_weights(const float *rs, int E, int k, bool renorm, int first, int mine,
                              float *w, const int32_t *id) {
  const int lane = threadIdx.x % 32;
  const float m = rs[first];
  float s = 0.f;
  for (int e = lane; e < E; e += 32) s += expf(rs[e] - m);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  // Weight `lane` stays in a register; choices past 32 (k > 32) go through w.
  float ks = 0.f, wl = 0.f;
#pragma unroll 1  // compact: one round for k <= 32 (moe_block's code size matters)
  for (int j = lane; j < k; j += 32) {
    const float v = expf(rs[j == lane ? mine : id[j]] - m) / s;
    ks += v;
    if (j == lane)
      wl = v;
    else
      w[j] = v;
  }
  if (renorm)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ks += __shfl_xor_sync(0xffffffffu, ks, o);
#pragma unroll 1
  for (int j = lane; j < k; j += 32) {
    const float v = j == lane ? wl : w[j];
    w[j] = renorm ? v / ks : v;
  }
}

// A routing choice's order as one 64-bit key: the value's order, then the
// lower id; NaN above +inf, -0 equal to +0; 0 < key < ~0 (0: none, ~0: above
// every key). The CPU's order (src/cpu/moe.c); tests cover NaN / inf / +-0 / ties.
__device__ __forceinline__ unsigned long long route_key(float v, int e) {
  const uint32_t b = v == 0.f ? 0u : __float_as_uint(v);
  const uint32_t ord = isnan(v) ? 0xffffffffu : b >> 31 ? ~b : b | 0x80000000u;
  return (unsigned long long)ord << 32 | (0xfffffffeu - (uint32_t)e);
}

// One warp routes one token: rs = its E logits as f32 in shared memory,
// visible to the warp; w, id its k outputs. The keys are distinct, so round
// j's choice is the largest key below round j-1's (no taken flags), one
// 64-bit max a step.
__device__ void route_warp_keys(const float *rs, int E, int k, bool renorm, float *w, int32_t *id) {
  const int lane = threadIdx.x % 32;
  int first = 0, mine = 0;
  unsigned long long prev = ~0ull;
  for (int j = 0; j < k; j++) {
    unsigned long long best = 0;
    for (int e = lane; e < E; e += 32) {
      const unsigned long long key = route_key(rs[e], e);
      if (key < prev && key > best) best = key;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
      if (other > best) best = other;
    }
    const int bi = (int)(0xfffffffeu - (uint32_t)best);
    prev = best;
    if (j == 0) first = bi;
    if (j == lane) mine = bi;
    if (lane == 0) id[j] = bi;
  }
  __syncwarp();  // id visible to the warp (route_weights reads choices past 32)
  route_weights(rs, E, k, renorm, first, mine, w, id);
}

}  // namespace
