// The quantised GEMV's x side (qgemv_kernels.cuh), shared with the fused
// q|k|v product of the decode attention kernel (attention.cu): x staged in
// shared memory in a skewed layout and normed as RMS_NORM, and the dot of
// decoded weight units with it. Header-only device code (no kernels), so
// that several .cu files may include it.
#pragma once

#include "cuda_common.cuh"
#include "ggml_blocks.cuh"
#include "swiglu.cuh"

namespace qgemv {

// Floats per staged unit of x: 4 of skew, so that the lanes of a warp
// reading float4s of consecutive units hit different banks.
constexpr int kXSkew = ggml::kUnit + 4;

// acc[c][r] += v[c] . x[r, 0:cnt) for the C weight rows c and the first m
// of R rows of x: every x element loaded once serves the C weight rows (x,
// read from L1, would otherwise cost more bandwidth than the weights).
// xvec: x rows are 16-byte aligned (float4 loads). XS: x is in shared memory.
template <int R, int C, bool XS = false>
__device__ __forceinline__ void dot_rows(const float (*v)[ggml::kUnit], const float *x, int64_t ldx,
                                         int m, int cnt, bool xvec, float (*acc)[R]) {
#pragma unroll
  for (int r = 0; r < R; r++) {
    if (r >= m) break;
    const float *xr = x + r * ldx;
    float s[C];
#pragma unroll
    for (int c = 0; c < C; c++) s[c] = 0.f;
    if (xvec && cnt == ggml::kUnit) {
      const float4 *x4 = reinterpret_cast<const float4 *>(xr);
#pragma unroll
      for (int i = 0; i < ggml::kUnit / 4; i++) {
        const float4 q = ggml::ld<XS>(x4 + i);
#pragma unroll
        for (int c = 0; c < C; c++) {
          s[c] = fmaf(v[c][4 * i], q.x, s[c]);
          s[c] = fmaf(v[c][4 * i + 1], q.y, s[c]);
          s[c] = fmaf(v[c][4 * i + 2], q.z, s[c]);
          s[c] = fmaf(v[c][4 * i + 3], q.w, s[c]);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < ggml::kUnit; i++) {
        if (i >= cnt) break;
        const float q = ggml::ld<XS>(xr + i);
#pragma unroll
        for (int c = 0; c < C; c++) s[c] = fmaf(v[c][i], q, s[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < C; c++) acc[c][r] += s[c];
  }
}

// Float4s of x a thread of stage_x1 loads in one round (x and up issued
// together: one L2 round trip per round instead of one per two float4s).
constexpr int kStageRound = 4;

// Whether stage_x1 takes x in one round, so that the caller may load the
// thread's norm float4s before the PDL wait (norm_first: stage_x1's g).
__device__ __forceinline__ bool stage_one_round(int k) {
  return k / 4 <= kStageRound * (int)blockDim.x;
}
__device__ __forceinline__ void norm_first(const float *norm, int k, float4 (&g)[kStageRound]) {
  norm_weights_first(norm, k / 4, (int)blockDim.x, true, g);
}

// stage_x for one row with k % 4 == 0 (decode): x (glu: silu(gate) * up)
// stored as float4s while each thread sums the squares of its own in
// registers; one block sum; each thread then norms the float4s it stored
// (its own: no barrier between). Two barriers and no divisions by k (the
// general path takes three passes and a warp's serial sum). gpre: g holds
// norm_first's float4s (one round only), else norm is read after the block
// sum. (g by reference with static indices: registers, not a stack array.)
__device__ __forceinline__ void stage_x1(const float *__restrict__ x, int k, bool glu,
                                         const float *__restrict__ norm, float eps, float *xs,
                                         const float4 (&g)[kStageRound], bool gpre) {
  __shared__ float part[32];
  const int n4 = k / 4, nt = (int)blockDim.x, nw = nt >> 5;
  const float4 *x4 = reinterpret_cast<const float4 *>(x), *u4 = x4 + n4;
  auto slot = [&](int i) {
    const int j = 4 * i;
    return reinterpret_cast<float4 *>(xs + (j / ggml::kUnit) * kXSkew + j % ggml::kUnit);
  };
  float ss = 0.f;  // over the thread's float4s in index order, as before the rounds
  for (int i0 = threadIdx.x; i0 < n4; i0 += kStageRound * nt) {
    float4 v[kStageRound], up[kStageRound];
#pragma unroll
    for (int r = 0; r < kStageRound; r++) {
      const int i = i0 + r * nt;
      if (i < n4) {
        v[r] = __ldg(x4 + i);
        if (glu) up[r] = __ldg(u4 + i);
      }
    }
#pragma unroll
    for (int r = 0; r < kStageRound; r++) {
      const int i = i0 + r * nt;
      if (i < n4) {
        if (glu)
          v[r] = make_float4(silu_mul(v[r].x, up[r].x), silu_mul(v[r].y, up[r].y),
                             silu_mul(v[r].z, up[r].z), silu_mul(v[r].w, up[r].w));
        ss = sum_sq4(v[r], ss);
        *slot(i) = v[r];
      }
    }
  }
  if (norm) {
    const float iv = block_inv_rms(ss, part, nw, (float)k, eps);
    const float4 *g4 = reinterpret_cast<const float4 *>(norm);
    for (int i0 = threadIdx.x; i0 < n4; i0 += kStageRound * nt) {  // gpre: one round
#pragma unroll
      for (int r = 0; r < kStageRound; r++) {
        const int i = i0 + r * nt;
        if (i < n4) *slot(i) = rms_scale4(*slot(i), iv, gpre ? g[r] : __ldg(g4 + i));
      }
    }
  }
  __syncthreads();
}

}  // namespace qgemv
