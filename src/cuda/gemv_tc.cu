// One f32 row of X against e4m3, bf16 or f16 weight rows on tensor cores
// (decode: QMATMUL's weights through cuda_gemv_f32x; gemv.cu's launch_x hands
// it the case its ONE kernel would take when k is a multiple of 4 chunks).
//
// Why: gemvx's dots are bound by issue and latency, not by bytes: each
// weight pair takes a widening (e4m3: a cvt and an f16 -> f32 too), X's
// shared loads and the FMAs (fp8 Qwen3-30B-A3B o product: 2.3 us from X
// staged to the first tile stored, against 2 us to read its 8.4 MB;
// docs/perf-notes.md). Here one mma m16n8k16 takes 256 weights; e4m3 pairs
// still take one cvt each (to f16, exactly), 16-bit weights none.
//
// Layout. A warp takes 16 rows and a slice of k in steps of 4 chunks (16
// bytes each). Lane (g = lane / 4, t = lane % 4) loads chunk 4 s + t of rows
// g and g + 8, whole 16-byte loads issued before the PDL wait (the weights
// are immutable). The sum over k does not care about the order, so mma q of
// a chunk takes its elements 4q .. 4q + 3: 4q, 4q + 1 as k slots 2t, 2t + 1
// and 4q + 2, 4q + 3 as 2t + 8, 2t + 9, which is how the chunk's words
// already hold them (e4m3: how cvt.f16x2.e4m3x2 lays a word's halves out).
// B is X as 16-bit parts in columns 0 .. G - 1: f16 hi + lo of X times sigma
// (tc_f16.cuh) against e4m3 / f16 rows, bf16 hi + mid + lo (24 bits, f32's
// range: no sigma) against bf16 rows, staged after the wait in mma order
// (by each warp for its own k slice; by the block when a norm needs the
// row's sum of squares), so that lanes g < G read two mmas' B with one
// conflict-free 16-byte load. The KW warps of a row group split k; a shared-memory sum
// closes each row. KW = the fewest (1, 2, 4, 8, 16) that leave a warp at
// most kSteps steps: a lane holds at most 2 kSteps 16-byte loads (64
// registers). NW = 16 warps a block when KW is 16 (bf16 rows of 4096: one
// block of 512 an SM, all loads in flight), else 8 (two blocks an SM).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "../core/env.h"
#include "cuda_common.cuh"
#include "gemv_tc.cuh"
#define PDL_FAMILY "gemv"
#include "pdl.cuh"
#include "tc_f16.cuh"
#include "timeline.cuh"
#include "weight_chunk.cuh"

namespace {

constexpr int kSteps = 8;    // steps of 4 chunks a warp, all loads in flight at once
constexpr int kMaxK = 4096;  // X staged in one pass of float4 loads
constexpr int kMaxWarps = 16;

// Per weight type: elements a chunk, mmas a chunk (MC = VEC / 4), B's
// columns (G) and whether X is scaled by sigma into f16's range.
template <class WT>
struct TcFmt {
  static constexpr int VEC = 8, G = std::is_same<WT, bf16_t>::value ? 3 : 2;
  static constexpr bool kSigma = !std::is_same<WT, bf16_t>::value;
};
template <>
struct TcFmt<f8e4m3_t> {
  static constexpr int VEC = 16, G = 2;
  static constexpr bool kSigma = true;
};

// X's four values (one float4: mma q's k slots of lane t) as G 16-bit pairs
// (b0 = elements 0, 1; b1 = 2, 3): f16 hi, lo or bf16 hi, mid, lo; inf and
// NaN in hi alone.
template <class WT>
__device__ __forceinline__ void split_b(float4 y, uint2 (&b)[TcFmt<WT>::G]) {
  if constexpr (TcFmt<WT>::G == 2) {
    split_x2<F16x2>(y.x, y.y, b[0].x, b[1].x);
    split_x2<F16x2>(y.z, y.w, b[0].y, b[1].y);
  } else {  // the remainder x - hi (exact in f32) split once more: mid + lo
    b[0].x = Bf16x2::rn(y.x, y.y), b[0].y = Bf16x2::rn(y.z, y.w);
    auto rest = [](float v, float h) { return isfinite(h) ? v - h : 0.f; };
    split_x2<Bf16x2>(rest(y.x, Bf16x2::low(b[0].x)), rest(y.y, Bf16x2::high(b[0].x)), b[1].x,
                     b[2].x);
    split_x2<Bf16x2>(rest(y.z, Bf16x2::low(b[0].y)), rest(y.w, Bf16x2::high(b[0].y)), b[1].y,
                     b[2].y);
  }
}

// X's float4 i (elements 4i .. 4i + 3: chunk i / MC, mma i % MC) times sigma
// (1 for bf16) as 16-bit parts into xs in mma order (see stage_x).
template <class WT>
__device__ __forceinline__ void store_x(uint32_t *xs, int i, float4 y, float sigma) {
  constexpr int MC = TcFmt<WT>::VEC / 4, G = TcFmt<WT>::G;
  if (TcFmt<WT>::kSigma) y.x *= sigma, y.y *= sigma, y.z *= sigma, y.w *= sigma;
  uint2 b[G];
  split_b<WT>(y, b);
  const int c = i / MC, q = i % MC, s = c / 4, t = c % 4;
  uint32_t *d = xs + ((s * (MC / 2) + q / 2) * G) * 16 + t * 4 + (q % 2) * 2;
#pragma unroll
  for (int g = 0; g < G; g++) *reinterpret_cast<uint2 *>(d + g * 16) = b[g];
}

// X (f32, one row) RMS-normed as the RMS_NORM kernel rounds it (p.norm set),
// times sigma for f16, into xs as 16-bit pairs in mma order: uint4 ((s MC/2
// + q/2) G + g) 4 + t holds column g's b0, b1 of mmas q, q + 1 (q even) of
// step s, lane t. One pass of float4 loads, one block reduction (the sum of
// squares and the largest finite |x norm| together), one barrier after the
// stores. Returns 1 / sigma (1 without).
template <class WT, int NW>
__device__ __forceinline__ float stage_x(const GemvTcArgs &p, uint32_t *xs,
                                         const float4 (&nw)[kMaxK / 4 / (32 * NW)]) {
  constexpr int L = kMaxK / 4 / (32 * NW);
  __shared__ float part[NW][2];
  const int n4 = (int)(p.k / 4);
  const float4 *x4 = reinterpret_cast<const float4 *>(p.x);
  float4 v[L];
  float ss = 0.f, mx = 0.f;
#pragma unroll
  for (int u = 0; u < L; u++) {
    const int i = threadIdx.x + u * 32 * NW;
    v[u] = i < n4 ? __ldg(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    ss = sum_sq4(v[u], ss);
    if (TcFmt<WT>::kSigma)  // max |x g| times the (positive) 1 / rms is the normed max
      mx = fmaxf(fmaxf(mx, fmaxf(fin_abs(v[u].x * nw[u].x), fin_abs(v[u].y * nw[u].y))),
                 fmaxf(fin_abs(v[u].z * nw[u].z), fin_abs(v[u].w * nw[u].w)));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32][0] = ss, part[threadIdx.x / 32][1] = mx;
  __syncthreads();
  ss = 0.f, mx = 0.f;
  for (int w = 0; w < NW; w++) ss += part[w][0], mx = fmaxf(mx, part[w][1]);
  const float iv = inv_rms(ss, (float)p.k, p.eps);
  float sigma = 1.f, inv_sigma = 1.f;
  if (TcFmt<WT>::kSigma) {
    const int se = f8_sigma_exp(__float_as_uint(fin_abs(mx * iv)));
    sigma = pow2f(se), inv_sigma = pow2f(-se);
  }
#pragma unroll
  for (int u = 0; u < L; u++) {
    const int i = threadIdx.x + u * 32 * NW;
    if (i < n4) store_x<WT>(xs, i, rms_scale4(v[u], iv, nw[u]), sigma);
  }
  __syncthreads();
  return inv_sigma;
}

// Without a norm, each warp stages only its own steps [s0, s1) into its row
// group's copy (xs: the block's copies, one a row group), with its own sigma,
// and goes on after a warp barrier: no block barrier before the dots (fp8
// o product, H200 timeline: X staged 2.0 us after the wait with the block
// form, against 0.8 us for gemvx's one barrier). Returns the warp's 1 / sigma.
template <class WT>
__device__ __forceinline__ float stage_x_warp(const GemvTcArgs &p, uint32_t *xs, int s0, int s1) {
  constexpr int VEC = TcFmt<WT>::VEC, LW = kSteps * VEC / 32;       // float4s a lane
  const int lane = threadIdx.x % 32, i0 = s0 * VEC, i1 = s1 * VEC;  // a step: VEC float4s
  const float4 *x4 = reinterpret_cast<const float4 *>(p.x);
  float4 v[LW];
  float mx = 0.f;
#pragma unroll
  for (int u = 0; u < LW; u++) {
    const int i = i0 + lane + 32 * u;
    v[u] = i < i1 ? __ldg(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    mx = fmaxf(fmaxf(mx, fmaxf(fin_abs(v[u].x), fin_abs(v[u].y))),
               fmaxf(fin_abs(v[u].z), fin_abs(v[u].w)));
  }
  float sigma = 1.f, inv_sigma = 1.f;
  if (TcFmt<WT>::kSigma) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const int se = f8_sigma_exp(__float_as_uint(mx));
    sigma = pow2f(se), inv_sigma = pow2f(-se);
  }
#pragma unroll
  for (int u = 0; u < LW; u++) {
    const int i = i0 + lane + 32 * u;
    if (i < i1) store_x<WT>(xs, i, v[u], sigma);
  }
  __syncwarp();
  return inv_sigma;
}

// mma q of a chunk: rows g (r0) and g + 8 (r8), k slots as in the top comment.
template <class WT>
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint4 &r0, const uint4 &r8, int q,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<WT, f8e4m3_t>::value) {
    uint32_t al, ah, bl, bh;
    e4m3x4_f16(word(r0, q), al, ah), e4m3x4_f16(word(r8, q), bl, bh);
    mma_f16(d, al, bl, ah, bh, b0, b1);
  } else if constexpr (std::is_same<WT, bf16_t>::value) {
    const uint32_t a[4] = {word(r0, 2 * q), word(r8, 2 * q), word(r0, 2 * q + 1),
                           word(r8, 2 * q + 1)};
    mma_bf16(d, a, b0, b1);
  } else {
    mma_f16(d, word(r0, 2 * q), word(r8, 2 * q), word(r0, 2 * q + 1), word(r8, 2 * q + 1), b0, b1);
  }
}

template <class WT, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW) gemv_tc_kernel(GemvTcArgs p) {
  TL_SCOPE(kTlGemvx);
  constexpr int VEC = TcFmt<WT>::VEC, MC = VEC / 4, G = TcFmt<WT>::G;
  constexpr int L = kMaxK / 4 / (32 * NW);
  extern __shared__ uint4 xs4[];  // X in mma order: k * 2 G bytes a copy (stage_x)
  __shared__ float red[NW][16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kw = warp % p.kw, rg = warp / p.kw, rows_b = 16 * (NW / p.kw);
  const int ns = (int)(p.k / (4 * VEC)), spw = (ns + p.kw - 1) / p.kw;  // steps: all, a warp's
  const int s0 = kw * spw, s1 = s0 + spw < ns ? s0 + spw : ns;
  const int64_t row0 = (int64_t)blockIdx.x * rows_b + rg * 16;
  const int64_t ra = row0 + g < p.m ? row0 + g : p.m - 1;
  const int64_t rb = row0 + g + 8 < p.m ? row0 + g + 8 : p.m - 1;
  const int64_t ldc = p.ldw / VEC;  // row stride in chunks
  const uint4 *wa = static_cast<const uint4 *>(p.w) + ra * ldc + t;
  const uint4 *wb = static_cast<const uint4 *>(p.w) + rb * ldc + t;

  uint4 r0[kSteps], r8[kSteps];  // rows g, g + 8: chunk 4 s + t of the warp's steps
  const uint64_t pol = l2_evict_first();
  auto load = [&]() {
#pragma unroll
    for (int u = 0; u < kSteps; u++) {
      const int s = s0 + u;
      r0[u] = s < s1 ? ld_stream(wa + 4 * s, pol) : make_uint4(0, 0, 0, 0);
      r8[u] = s < s1 ? ld_stream(wb + 4 * s, pol) : make_uint4(0, 0, 0, 0);
    }
  };
  float4 nw[L];
  norm_weights_first(p.norm, (int)(p.k / 4), 32 * NW, p.norm && p.w_early, nw);
  if (p.w_early) load();
  pdl_wait();
  pdl_launch_dependents();
  TL_MARK();  // mark 0: the wait is over
  if (!p.w_early) {
    load();
    norm_weights_first(p.norm, (int)(p.k / 4), 32 * NW, p.norm != nullptr, nw);
  }
  // The epilogue operands of the row a thread stores (after the wait: the
  // residual may come from the kernel before), loaded before the staging.
  const int64_t jo = (int64_t)blockIdx.x * rows_b + threadIdx.x;
  const bool olane = (int)threadIdx.x < rows_b && jo < p.m;
  float sb = 1.f, bias = 0.f;
  if (olane && p.sb) sb = p.sb[jo];
  if (olane && p.bias) bias = p.bias[jo];
  // X's copy of this warp's row group (one copy for all with a norm).
  uint4 *xw = xs4 + (p.norm ? 0 : rg * (int)(p.k * TcFmt<WT>::G / 8));
  const float inv_sigma = p.norm ? stage_x<WT, NW>(p, reinterpret_cast<uint32_t *>(xs4), nw)
                                 : stage_x_warp<WT>(p, reinterpret_cast<uint32_t *>(xw), s0, s1);
  TL_MARK();  // mark 1: X staged

  float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};  // two mma chains
#pragma unroll
  for (int u = 0; u < kSteps; u++) {
    const int s = s0 + u;
    if (s >= s1) break;  // warp-uniform
#pragma unroll
    for (int qp = 0; qp < MC / 2; qp++) {
      // B of mmas 2qp, 2qp + 1: column g (lanes g >= G: zeros).
      const uint4 x = g < G ? xw[((s * (MC / 2) + qp) * G + g) * 4 + t] : make_uint4(0, 0, 0, 0);
      mma_chunk<WT>(d0, r0[u], r8[u], 2 * qp, x.x, x.y);
      mma_chunk<WT>(d1, r0[u], r8[u], 2 * qp + 1, x.z, x.w);
    }
  }
  // Row g's sum is columns 0 .. G - 1 of c0, c1 over the quad's lanes (lane
  // t holds columns 2t, 2t + 1); rows g + 8 likewise from c2, c3. An inf
  // weight makes its row's hi column +-inf (or NaN, as on the CPU), but the
  // other columns inf * 0 = NaN where B is zero: a non-finite hi column is
  // the sum alone.
  const float h0 = d0[0] + d1[0], l0 = d0[1] + d1[1], h1 = d0[2] + d1[2], l1 = d0[3] + d1[3];
  const float m0 = G > 2 ? __shfl_down_sync(0xffffffffu, h0, 1) : 0.f;  // lane t + 1's column 2
  const float m1 = G > 2 ? __shfl_down_sync(0xffffffffu, h1, 1) : 0.f;
  const float v0 = isfinite(h0) ? h0 + (l0 + m0) : h0, v1 = isfinite(h1) ? h1 + (l1 + m1) : h1;
  if (t == 0) red[warp][g] = v0 * inv_sigma, red[warp][g + 8] = v1 * inv_sigma;
  __syncthreads();
  if (olane) {
    const int r = threadIdx.x % 16, w0 = (threadIdx.x / 16) * p.kw;
    float v = 0.f;
    for (int w = w0; w < w0 + p.kw; w++) v += red[w][r];
    p.out[jo] = v * sb + bias;
  }
  TL_MARK();  // mark 2: stored
}

// Launches when the grid is one wave (a block a row group: blocks waiting
// for a slot would stage X and reduce once more each; the LM head, 151936
// bf16 rows of 2048, ran 147 -> 213 us that way, H200 timeline), else
// leaves *used false.
template <class WT, int NW>
ingot_status launch(GemvTcArgs p, int dev, cudaStream_t s, bool *used) {
  const int64_t rows_b = 16 * (NW / p.kw), blocks = (p.m + rows_b - 1) / rows_b;
  if (blocks > (int64_t)sm_count(dev) * (16 / NW)) return INGOT_OK;
  *used = true;
  // One copy of X with a norm, else one a row group: k RG <= 32 VEC NW, so <= 24 KB.
  const size_t smem = (size_t)p.k * 2 * TcFmt<WT>::G * (p.norm ? 1 : NW / p.kw);
  return cuda_check(
      launch_pdl(gemv_tc_kernel<WT, NW>, dim3((unsigned)blocks), dim3(NW * 32), smem, s, p),
      "gemv_tc kernel");
}

template <class WT>
ingot_status launch_w(GemvTcArgs p, int dev, cudaStream_t s, bool *used) {
  constexpr int VEC = TcFmt<WT>::VEC;
  if (p.k % (4 * VEC) || p.ldw % VEC || ingot_env_off("INGOT_GEMV_TC")) return INGOT_OK;
  const int ns = (int)(p.k / (4 * VEC));
  p.kw = 1;
  while (p.kw < kMaxWarps && (ns + p.kw - 1) / p.kw > kSteps) p.kw *= 2;
  if constexpr (VEC == 8) {  // e4m3 rows of k <= 4096 need at most 8
    if (p.kw > 8) return launch<WT, 16>(p, dev, s, used);
  }
  return launch<WT, 8>(p, dev, s, used);
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_gemv_tc)

ingot_status gemv_tc_try(ingot_dtype wdt, GemvTcArgs p, int dev, cudaStream_t s, bool *used) {
  *used = false;
  if (p.m <= 0 || p.k <= 0 || p.k > kMaxK || (uintptr_t)p.w % 16 || (uintptr_t)p.x % 16)
    return INGOT_OK;
  switch (wdt) {
    case INGOT_F8E4M3FN:
      return launch_w<f8e4m3_t>(p, dev, s, used);
    case INGOT_BF16:
      return launch_w<bf16_t>(p, dev, s, used);
    case INGOT_F16:
      return launch_w<f16_t>(p, dev, s, used);
    default:
      return INGOT_OK;
  }
}
