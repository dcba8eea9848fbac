// The one-launch QMATMUL_ROPE_KV kernel for T = 1 (launcher and design in
// src/cuda/qgemv.cu): the shared-memory GEMV of qgemv_kernels.cuh writes
// the q|k|v product y [N] as always, and an epilogue counts each task's
// rows into per-head arrival counters; the warp whose rows complete a head
// norms (q_norm/k_norm), ropes and writes it: q to the output, k and v into
// the caches at pos (rope_kv_kernel's math, attention.cu).
#pragma once

#include <stdint.h>

#include "cuda_common.cuh"
#include "qgemv_kernels.cuh"

namespace qgemv {

constexpr int kRopePairs = 4;  // rotated pairs a lane holds: D <= 256

struct RopeKvParams {
  const int32_t *pos;    // [1], read on the device
  const double *inv;     // [D/2]
  const float *qn, *kn;  // per-head norms [D], or both null
  float *qo;             // [Hq, D]
  void *kc, *vc;         // [ctx, Hkv, D], float32 or (half) float16
  unsigned *arrivals;    // [Hq + 2 Hkv]: zero between launches
  int hq, hkv, d, ctx;
  float eps;  // of qn/kn
  bool neox, half;
};

// Cache element i of c (float16 when half, else float32) = v.
__device__ __forceinline__ void cache_put(void *c, bool half, int64_t i, float v) {
  if (half)
    static_cast<f16_t *>(c)[i] = from_acc<f16_t>(v);
  else
    static_cast<float *>(c)[i] = v;
}

// Head slot s (q heads, then k, then v) of y, by one warp (all lanes): its
// pairs loaded through L2 (other SMs wrote them in this launch), normed,
// roped at pos (q, k) and written; cache rows of a pos outside [0, ctx)
// are skipped, as rope_kv_kernel does.
__device__ __forceinline__ void rope_kv_head(const RopeKvParams &P, const float *y, int s,
                                             int lane) {
  const int which = s < P.hq ? 0 : s < P.hq + P.hkv ? 1 : 2;
  const int h = which == 0 ? s : which == 1 ? s - P.hq : s - P.hq - P.hkv;
  const int half = P.d / 2, p = *P.pos;
  const float *x = y + (int64_t)s * P.d;
  const float *w = which == 0 ? P.qn : which == 1 ? P.kn : nullptr;
  float a[kRopePairs], b[kRopePairs], ss = 0.f;
#pragma unroll
  for (int j = 0; j < kRopePairs; j++) {
    const int i = lane + 32 * j, ia = P.neox ? i : 2 * i, ib = P.neox ? i + half : 2 * i + 1;
    a[j] = b[j] = 0.f;
    if (i < half) {
      a[j] = __ldcg(x + ia);
      b[j] = __ldcg(x + ib);
      ss = fmaf(a[j], a[j], ss);
      ss = fmaf(b[j], b[j], ss);
    }
  }
  if (w) {  // uniform over the warp
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / (float)P.d + P.eps);
#pragma unroll
    for (int j = 0; j < kRopePairs; j++) {
      const int i = lane + 32 * j, ia = P.neox ? i : 2 * i, ib = P.neox ? i + half : 2 * i + 1;
      if (i < half) {
        a[j] = __fmul_rn(__fmul_rn(a[j], inv), w[ia]);
        b[j] = __fmul_rn(__fmul_rn(b[j], inv), w[ib]);
      }
    }
  }
  const bool in_cache = p >= 0 && p < P.ctx;
  const int64_t crow = ((int64_t)p * P.hkv + h) * P.d;
#pragma unroll
  for (int j = 0; j < kRopePairs; j++) {
    const int i = lane + 32 * j, ia = P.neox ? i : 2 * i, ib = P.neox ? i + half : 2 * i + 1;
    if (i >= half) continue;
    float y0 = a[j], y1 = b[j];
    if (which < 2) {
      double sd, cd;
      sincos((double)p * P.inv[i], &sd, &cd);
      const float cf = (float)cd, sf = (float)sd;
      y0 = a[j] * cf - b[j] * sf;
      y1 = a[j] * sf + b[j] * cf;
    }
    if (which == 0) {
      P.qo[(int64_t)h * P.d + ia] = y0;
      P.qo[(int64_t)h * P.d + ib] = y1;
    } else if (in_cache) {
      void *c = which == 1 ? P.kc : P.vc;
      cache_put(c, P.half, crow + ia, y0);
      cache_put(c, P.half, crow + ib, y1);
    }
  }
}

// After a warp stored rows [r0, r0 + rows) of y: each head they touch gets
// their count (threadFenceReduction's pattern: fence, then arrive); the warp
// that brings a head to D rows fences again, writes the head out and zeroes
// its counter (every row has arrived: nothing else touches it this launch).
struct RopeKvEpilogue {
  RopeKvParams P;
  const float *y;
  __device__ __forceinline__ void operator()(int64_t r0, int64_t rows, int lane) const {
    __threadfence();  // this warp's rows are visible device-wide before they count
    __syncwarp();
    const int64_t end = r0 + rows;
    for (int64_t s = r0 / P.d; s * P.d < end; s++) {
      const int64_t lo = max(r0, s * P.d), hi = min(end, (s + 1) * P.d);
      const unsigned cnt = (unsigned)(hi - lo);
      unsigned done = 0;
      if (lane == 0) done = atomicAdd(P.arrivals + s, cnt) + cnt == (unsigned)P.d;
      if (__shfl_sync(0xffffffffu, done, 0)) {
        __threadfence();  // the other warps' rows of the head (fenced before they arrived)
        rope_kv_head(P, y, (int)s, lane);
        if (lane == 0) P.arrivals[s] = 0;
      }
    }
  }
};

// M = 1 product y [n] of x [k] (normed when norm) with the rope epilogue;
// the launch geometry of qgemv_smem_kernel<TYPE, 1>, but built for 3
// resident blocks an SM (168 registers), as for M > 1: at 128 the epilogue
// spilled ~100 bytes (ptxas -v); the host caps the grid to match.
template <int TYPE>
__global__ void __launch_bounds__(kSmemMaxThreads, smem_blocks_per_sm(TYPE, 2))
    qgemv_rope_kv_kernel(const uint8_t *__restrict__ w, int64_t rs, const float *__restrict__ x,
                         int k, int64_t n, float *__restrict__ y, const float *__restrict__ norm,
                         float eps, int lpr, int rw, bool xvec, RopeKvParams P) {
  smem_gemv<TYPE, 1>(w, rs, x, k, n, 1, y, nullptr, norm, eps, lpr, rw, xvec, false,
                     RopeKvEpilogue{P, y});
}

}  // namespace qgemv
