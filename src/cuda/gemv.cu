// GEMV for decode: out[r, j] = sum_k X[r, k] * W[j, k] for 1-8 rows r, where
// the weight W [m, k] is stored with rows along k (ld >= k). Called by the
// MATMUL kernel (in[1] = W' = the transpose view of W) and the SCALED_MM
// kernel (in[1] = b column-major = the transpose view of row-major [N, K])
// before cuBLASLt; see cuda_gemv_try below for what is claimed.
//
// Design (memory-bound: the m*k weight bytes dominate):
// - one kernel per (weight type, rows R in {1,2,4,8}); n rows are padded to R
//   with zero rows in shared memory and the padding is never stored;
// - X is staged once per block in shared memory as float, interleaved by
//   4-float pieces of a 16-byte weight chunk so that lanes reading
//   consecutive chunks read consecutive float4s (no bank conflicts);
// - a group of S threads owns C output columns (rows of W) at a time and
//   splits k between them: thread t reads 16-byte chunks t, t+S, ... of each
//   of the C rows, U chunks per row in flight, and multiplies them by all R
//   rows of X; S = 32 (a warp per column tile, shuffle reduction) when there
//   are many tiles, S = 256 (the block splits k, shared-memory reduction)
//   when m is small;
// - rows whose start is not 16-byte aligned (odd ld or pointer) take a
//   scalar loop in the same kernel; k % VEC tail elements are scalar too;
// - epilogue in float: (acc * scale_a[r] * scale_b[j] + bias[r, j]) then one
//   rounding to the output dtype (f32/bf16/f16).
// One-row fast path (gemv1_kernel: MATMUL, n = 1, X the weight's dtype f32/bf16/f16,
// contiguous and 16-byte aligned, k % VEC == 0, W rows aligned): X is staged raw
// (k * elsize bytes, one 16-byte load per chunk) in shared memory; each warp owns
// C whole columns at a time (persistent grid-stride over column tiles) and issues
// all U*C = 16 of its lanes' 16-byte weight loads of a step (8 KB per warp) before
// using any; shuffle-only reduction, no barrier after the staging one. The first
// step's loads are issued before the staging so the X copy hides under them.
// C = 2, U = 8 when a row is at most 256 chunks (k <= 2048 for 16-bit types), else
// C = 1, U = 16 (finer column tiles balance the warps better on long rows). Small m
// with rows over 1024 chunks stays on the general kernel (its block-splits-k mode).
// f32 X against float weights (gemvx_kernel: QMATMUL's F32/BF16/F16 ggml weights and
// its f8e4m3fn form (row scales in the epilogue) through cuda_gemv_f32x, f32 MATMUL
// of 2-8 rows): gemv1's warp tiles and step
// pipeline for R in {1, 2, 4, 8} rows of X staged as float in the interleaved layout
// above (k % VEC == 0, W rows 16-byte aligned; X rows float4-loaded when aligned,
// else scalar); C columns a tile (R = 1: as gemv1; R = 2, 4: 2; R = 8: 4, so that
// each staged float4 serves C columns); an optional RMS norm is applied to the
// staged rows by every block (sum of squares per row by a warp, then (x * inv) *
// norm as the RMS_NORM kernel rounds it), so a norm + product is one launch.
// One aligned row of k <= 4096 (decode) stages in one pass instead (stage_x1:
// float4 loads into registers, one block sum, the norm in registers, the norm
// weights' first loads before the wait) and loads each tile's epilogue
// operands with its weights: ncu, Qwen3-30B-A3B's f8 q|k|v, 11.8 -> 10.6 us
// and 3.94 M -> 2.80 M instructions (see docs/perf-notes.md). That form is
// its own instantiation (ONE), without the general staging: bf16 4256 ->
// 2200 SASS instructions, Qwen3-30B-A3B decode +1.5 % bf16 / +0.4 % fp8.
// Its callers (QMATMUL's f32 output, residual and row scales) need one
// epilogue form, so ONE carries only that one (one_epilogue; 2496 -> 2232
// instructions at C = 2, bf16); another form takes the general kernel.
// ONE's case with e4m3, bf16 or f16 rows of k a multiple of 4 chunks runs its
// dots on tensor cores instead (gemv_tc.cu) when its grid is one wave: fp8
// Qwen3-30B-A3B decode +3 %, bf16 even (docs/perf-notes.md).
// Occupancy queries are cached per kernel (host cost per call: cuda_use_device + one
// launch + cudaGetLastError).
// gemv1 and gemvx are launched as programmatic dependents (pdl.cuh): for
// QMATMUL's weights (immutable) their first step of weight loads is issued
// before pdl_wait, so it flies while the kernel before drains; for MATMUL /
// SCALED_MM (W may have just been written) only an L2 prefetch of the block's
// first rows is (L2 is coherent). X and everything else is read after the
// wait. Their grids are one wave: each block lets the next kernel launch
// right after its wait.
// No host sync; launches on the output's current stream (graph-capturable).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <string.h>

#include <atomic>

#include "cuda_common.cuh"
#include "gemv.cuh"
#include "gemv_tc.cuh"
#define PDL_FAMILY "gemv"
// A PDL dependent by default (INGOT_NO_PDL=gemv: plain). It measured slower
// while moe_block let its dependents launch at its start: the q|k|v product's
// blocks then sat beside it (236 -> 214 tok/s in an early session, 389 -> 377
// in the fifteenth). With moe_block's blocks launching them as they retire:
// H200 Qwen3-30B-A3B decode 389.3 -> 405.4 tok/s bf16, 475.7 -> 493.4 fp8
// (docs/perf-notes.md, sixteenth session).
#include "pdl.cuh"
#include "timeline.cuh"
#include "weight_chunk.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = 8;

struct GemvParams {
  const void *w;  // W row j starts at w + j * ldw elements
  int64_t ldw;
  const void *x;              // X row r = (b, i): x + b * xsb + i * xsn, elements along k at xsk
  int64_t xsb, xsn, xsk, xn;  // xn = rows per batch (r = b * xn + i)
  int x_dt;
  void *out;  // out row r at out + r * m (contiguous)
  int out_dt;
  int rows;  // n <= R
  int64_t k, m;
  int64_t nch;      // ceil(k / VEC): float4 pieces of the interleaved X layout
  const float *sa;  // scale_a: NULL, or sa[r * sa_s] (sa_s = 0: tensorwise)
  int64_t sa_s;
  const float *sb;  // scale_b: NULL, or sb[j * sb_s]
  int64_t sb_s;
  const void *bias;  // NULL, or bias[r * bias_sr + j * bias_sj] of dtype bias_dt
  int bias_dt;
  int64_t bias_sr, bias_sj;
  int split;          // threads per column group: 32 or kThreads
  bool vec;           // every row of W is 16-byte aligned
  bool xvec;          // gemvx_kernel: every f32 X row start is 16-byte aligned (float4 loads)
  const float *norm;  // gemvx_kernel: NULL, or RMS norm weight [k] applied to X first
  float eps;
  bool w_early;  // W loaded before pdl_wait: immutable (QMATMUL) or no PDL launch
  int w_dt;      // W's dtype (the host's choice of the tensor-core kernel)
};

__device__ __forceinline__ float load_f(const void *p, int dt, int64_t i) {
  switch (dt) {
    case INGOT_F32:
      return static_cast<const float *>(p)[i];
    case INGOT_BF16:
      return to_acc(static_cast<const bf16_t *>(p)[i]);
    case INGOT_F16:
      return to_acc(static_cast<const f16_t *>(p)[i]);
    case INGOT_F8E4M3FN:
      return to_acc(static_cast<const f8e4m3_t *>(p)[i]);
    case INGOT_F8E5M2:
      return to_acc(static_cast<const f8e5m2_t *>(p)[i]);
    default:
      return 0.f;
  }
}

// The epilogue operands of output (r, j): 1, 1, 0 where absent. ONE: gemvx's
// ONE kernel, whose host check (one_epilogue) leaves one form: row 0, f32
// out, no sa, sb and bias (f32) per column or absent; the same arithmetic
// without the strides and the dtype switches.
struct Epi {
  float sa, sb, bias;
};
template <bool ONE = false>
__device__ __forceinline__ Epi load_epi(const GemvParams &p, int r, int64_t j) {
  Epi e{1.f, 1.f, 0.f};
  if (!ONE && p.sa) e.sa = p.sa[r * p.sa_s];
  if (p.sb) e.sb = p.sb[ONE ? j : j * p.sb_s];
  if (p.bias)
    e.bias = ONE ? static_cast<const float *>(p.bias)[j]
                 : load_f(p.bias, p.bias_dt, r * p.bias_sr + j * p.bias_sj);
  return e;
}
// Output (r, j) = v * sa * sb + bias with operands from load_epi, in out_dt.
template <bool ONE = false>
__device__ __forceinline__ void store_out_epi(const GemvParams &p, int r, int64_t j, float v,
                                              const Epi &e) {
  if (!ONE && p.sa) v *= e.sa;
  if (p.sb) v *= e.sb;
  if (p.bias) v += e.bias;
  if (ONE) {
    static_cast<float *>(p.out)[j] = v;
    return;
  }
  int64_t o = r * p.m + j;
  switch (p.out_dt) {
    case INGOT_F32:
      static_cast<float *>(p.out)[o] = v;
      break;
    case INGOT_BF16:
      static_cast<bf16_t *>(p.out)[o] = from_acc<bf16_t>(v);
      break;
    case INGOT_F16:
      static_cast<f16_t *>(p.out)[o] = from_acc<f16_t>(v);
      break;
    default:
      break;
  }
}
__device__ __forceinline__ void store_out(const GemvParams &p, int r, int64_t j, float v) {
  store_out_epi(p, r, j, v, load_epi(p, r, j));
}

// Index in the staged X row of element kk: piece q of chunk c at (q*nch + c)*4.
template <int VEC>
__device__ __forceinline__ int64_t xidx(int64_t kk, int64_t nch) {
  int64_t c = kk / VEC;
  int rem = (int)(kk % VEC);
  return ((rem >> 2) * nch + c) * 4 + (rem & 3);
}

template <class WT, int R>
struct Tune {
  static constexpr int C = 2;               // columns per tile
  static constexpr int U = R <= 4 ? 4 : 2;  // chunks per column in flight
};

// acc[cc][r] += chunk c of weight column cc (the 16 bytes wv[cc]) . the same
// chunk of staged X row r (interleaved layout: piece q of chunk c at
// (q * nch + c) * 4), for the C columns and R rows of a tile.
template <class WT, int R, int C>
__device__ __forceinline__ void fma_chunk(const uint4 (&wv)[C], const float *xs, int64_t xrow,
                                          int64_t nch, int64_t c, float (&acc)[C][R]) {
  constexpr int VEC = Wfmt<WT>::VEC;
#pragma unroll
  for (int q = 0; q < VEC / 4; q++) {
    float4 xv[R];
#pragma unroll
    for (int r = 0; r < R; r++)
      xv[r] = *reinterpret_cast<const float4 *>(xs + r * xrow + (q * nch + c) * 4);
#pragma unroll
    for (int cc = 0; cc < C; cc++) {
      float f[4];
      Wfmt<WT>::piece(wv[cc], q, f);
#pragma unroll
      for (int r = 0; r < R; r++) {
        acc[cc][r] = fmaf(f[0], xv[r].x, acc[cc][r]);
        acc[cc][r] = fmaf(f[1], xv[r].y, acc[cc][r]);
        acc[cc][r] = fmaf(f[2], xv[r].z, acc[cc][r]);
        acc[cc][r] = fmaf(f[3], xv[r].w, acc[cc][r]);
      }
    }
  }
}

template <class WT, int R>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams p) {
  constexpr int VEC = Wfmt<WT>::VEC, C = Tune<WT, R>::C, U = Tune<WT, R>::U;
  extern __shared__ float4 smem4[];
  float *xs = reinterpret_cast<float *>(smem4);
  __shared__ float red[kWarps][C * R];
  const int64_t k = p.k, nch = p.nch, xrow = nch * VEC;

  // Stage X (rows >= p.rows are zeros) in the interleaved layout; 8 loads in
  // flight per thread so the staging costs about one memory latency.
  const int64_t total = (int64_t)R * k;
  for (int64_t e0 = threadIdx.x; e0 < total; e0 += (int64_t)kThreads * 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int64_t e = e0 + (int64_t)u * kThreads;
      const int r = (int)(e / (k > 0 ? k : 1));
      v[u] = 0.f;
      if (e < total && r < p.rows) {
        const int64_t kk = e - r * k, b = r / p.xn, i = r % p.xn;
        v[u] = load_f(p.x, p.x_dt, b * p.xsb + i * p.xsn + kk * p.xsk);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int64_t e = e0 + (int64_t)u * kThreads;
      if (e < total) {
        const int r = (int)(e / k);
        xs[r * xrow + xidx<VEC>(e - r * k, nch)] = v[u];
      }
    }
  }
  __syncthreads();

  const int S = p.split, t = threadIdx.x % S, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = kThreads / S;
  const int64_t tiles = (p.m + C - 1) / C;
  const int64_t nfull = k / VEC;
  const WT *w = static_cast<const WT *>(p.w);
  // Uniform across the block when S == kThreads (the loop contains barriers).
  for (int64_t tile = (int64_t)blockIdx.x * groups + threadIdx.x / S; tile < tiles;
       tile += (int64_t)gridDim.x * groups) {
    const int64_t j0 = tile * C;
    const WT *wrow[C];
    bool jok[C];
#pragma unroll
    for (int cc = 0; cc < C; cc++) {
      jok[cc] = j0 + cc < p.m;
      wrow[cc] = w + (jok[cc] ? j0 + cc : j0) * p.ldw;
    }
    float acc[C][R];
#pragma unroll
    for (int cc = 0; cc < C; cc++)
#pragma unroll
      for (int r = 0; r < R; r++) acc[cc][r] = 0.f;

    int64_t kdone = 0;  // elements handled by the vector loop
    if (p.vec) {
      kdone = nfull * VEC;
      for (int64_t c0 = t; c0 < nfull; c0 += (int64_t)S * U) {
        uint4 wv[U][C];
#pragma unroll
        for (int u = 0; u < U; u++) {
          const int64_t c = c0 + (int64_t)u * S;
#pragma unroll
          for (int cc = 0; cc < C; cc++)
            wv[u][cc] = c < nfull && jok[cc]
                            ? ld_stream(reinterpret_cast<const uint4 *>(wrow[cc]) + c)
                            : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
          const int64_t c = c0 + (int64_t)u * S;
          if (c >= nfull) break;
          fma_chunk<WT, R, C>(wv[u], xs, xrow, nch, c, acc);
        }
      }
    }
    // Scalar part: the k % VEC tail, or whole rows when not 16-byte aligned.
    for (int64_t kk = kdone + t; kk < k; kk += S) {
      float xv[R];
#pragma unroll
      for (int r = 0; r < R; r++) xv[r] = xs[r * xrow + xidx<VEC>(kk, nch)];
#pragma unroll
      for (int cc = 0; cc < C; cc++) {
        float f = jok[cc] ? to_acc(wrow[cc][kk]) : 0.f;
#pragma unroll
        for (int r = 0; r < R; r++) acc[cc][r] = fmaf(f, xv[r], acc[cc][r]);
      }
    }

    // Reduce over the S threads of the group: shuffles, then shared memory.
#pragma unroll
    for (int cc = 0; cc < C; cc++)
#pragma unroll
      for (int r = 0; r < R; r++) {
        float v = acc[cc][r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        acc[cc][r] = v;
      }
    if (S == 32) {
#pragma unroll
      for (int cc = 0; cc < C; cc++)
#pragma unroll
        for (int r = 0; r < R; r++)
          if (lane == cc * R + r && r < p.rows && jok[cc]) store_out(p, r, j0 + cc, acc[cc][r]);
    } else {
      if (lane == 0) {
#pragma unroll
        for (int cc = 0; cc < C; cc++)
#pragma unroll
          for (int r = 0; r < R; r++) red[warp][cc * R + r] = acc[cc][r];
      }
      __syncthreads();
      if (threadIdx.x < C * R) {
        int cc = threadIdx.x / R, r = threadIdx.x % R;
        float v = 0.f;
#pragma unroll
        for (int wi = 0; wi < kWarps; wi++) v += red[wi][threadIdx.x];
        if (r < p.rows && j0 + cc < p.m) store_out(p, r, j0 + cc, v);
      }
      __syncthreads();  // red is rewritten by the next tile
    }
  }
}

// ---- one-row fast path (see the top of the file) ----

// Loads of one step: chunks cl, cl + 32, ..., cl + 32 * (U - 1) of columns j0 .. j0 + C - 1
// (cl = step start + lane); chunks past the row and columns past m read as zeros.
template <int U, int C>
__device__ __forceinline__ void load_step(uint4 (&wv)[U][C], const uint4 *w, int64_t ldc, int64_t m,
                                          int64_t nch, int64_t j0, int64_t cl) {
  // Read once a step: their L2 lines go first, so what the step reuses (the
  // kernels' code, activations, caches) stays (H200: +2 % bf16 Qwen3-30B-A3B decode).
  const uint64_t pol = l2_evict_first();
#pragma unroll
  for (int cc = 0; cc < C; cc++) {
    const bool ok = j0 + cc < m;
    const uint4 *row = w + (ok ? j0 + cc : 0) * ldc;
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t c = cl + (int64_t)u * 32;
      wv[u][cc] = ok && c < nch ? ld_stream(row + c, pol) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Before pdl_wait: the warp's first step of W when W is immutable (w_early),
// else only an L2 prefetch of the block's first rows (L2 is coherent: a
// prefetch cannot see stale bytes; register loads could). Then the wait, and
// the next kernel may launch (the grid is one wave).
template <class WT, int U, int C>
__device__ __forceinline__ void first_step_and_wait(const GemvParams &p, uint4 (&wv)[U][C],
                                                    int64_t tile, int64_t tiles, int lane) {
  const uint4 *w = static_cast<const uint4 *>(p.w);
  const int64_t ldc = p.ldw / Wfmt<WT>::VEC, m = p.m;  // row stride in chunks
  if (p.w_early) {
    if (tile < tiles) load_step<U, C>(wv, w, ldc, m, p.nch, tile * C, lane);
  } else if (threadIdx.x == 0 && p.vec) {
    const int64_t j0 = (int64_t)blockIdx.x * kWarps * C,
                  n = m - j0 < kWarps * C ? m - j0 : kWarps * C;
    if (n > 0) prefetch_l2(w + j0 * ldc, ((n - 1) * ldc + p.nch) * 16);  // to the last row's end
  }
  pdl_wait();
  pdl_launch_dependents();
  if (!p.w_early && tile < tiles) load_step<U, C>(wv, w, ldc, m, p.nch, tile * C, lane);
}

template <class WT, int C>
__global__ void __launch_bounds__(kThreads, 2) gemv1_kernel(GemvParams p) {
  constexpr int U = 16 / C;        // 16 loads of 16 bytes in flight per lane
  extern __shared__ uint4 xraw[];  // X row, raw: chunk c = elements [c*VEC, c*VEC + VEC)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nch = p.nch, m = p.m;         // nch = k / VEC exactly (checked by the host)
  const int64_t ldc = p.ldw / Wfmt<WT>::VEC;  // row stride in chunks (rows 16-byte aligned)
  const int64_t tiles = (m + C - 1) / C, nwarps = (int64_t)gridDim.x * kWarps;
  const uint4 *w = static_cast<const uint4 *>(p.w);

  // Warp-uniform state: current tile and the first chunk of the current step.
  int64_t tile = (int64_t)blockIdx.x * kWarps + warp, s0 = 0;
  uint4 wv[U][C];
  first_step_and_wait<WT, U, C>(p, wv, tile, tiles, lane);  // X comes from the kernel before

  const uint4 *x = static_cast<const uint4 *>(p.x);
  for (int64_t c = threadIdx.x; c < nch; c += kThreads) xraw[c] = __ldg(x + c);
  __syncthreads();  // the only barrier: every thread reaches it once

  float acc[C];
#pragma unroll
  for (int cc = 0; cc < C; cc++) acc[cc] = 0.f;
  while (tile < tiles) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t c = s0 + lane + (int64_t)u * 32;
      if (c < nch) {
        const uint4 xv = xraw[c];
#pragma unroll
        for (int q = 0; q < Wfmt<WT>::VEC / 4; q++) {
          float xf[4];
          Wfmt<WT>::piece(xv, q, xf);
#pragma unroll
          for (int cc = 0; cc < C; cc++) {
            float f[4];
            Wfmt<WT>::piece(wv[u][cc], q, f);
            acc[cc] = fmaf(f[0], xf[0], acc[cc]);
            acc[cc] = fmaf(f[1], xf[1], acc[cc]);
            acc[cc] = fmaf(f[2], xf[2], acc[cc]);
            acc[cc] = fmaf(f[3], xf[3], acc[cc]);
          }
        }
      }
    }
    s0 += 32 * U;
    if (s0 >= nch) {  // tile done (uniform across the warp): reduce, store, next tile
      const int64_t j0 = tile * C;
#pragma unroll
      for (int cc = 0; cc < C; cc++) {
        float v = acc[cc];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == cc && j0 + cc < m) store_out(p, 0, j0 + cc, v);
        acc[cc] = 0.f;
      }
      tile += nwarps;
      s0 = 0;
    }
    if (tile < tiles) load_step<U, C>(wv, w, ldc, m, nch, tile * C, s0 + lane);
  }
}

// ---- f32 X against float weights (gemvx_kernel; see the top of the file) ----

constexpr int kNormEarly = 2;   // norm float4s a thread loads before the wait (k <= 2048)
constexpr int kStageLoads = 4;  // X float4s a thread stages in one pass (one row: k <= 4096)

// This thread's first RMS-norm weights (slots threadIdx.x + u * kThreads of
// one row), loaded before the wait when they are immutable (p.w_early: the
// loads' round trip then hides under the weights' and the kernel before).
__device__ __forceinline__ void norm_early(const GemvParams &p, float4 (&nw)[kNormEarly]) {
  norm_weights_first(p.norm, (int)(p.k / 4), kThreads, p.norm && p.w_early, nw);
}

// stage_xf for one 16-byte aligned row of k <= 4 * kThreads * kStageLoads:
// one pass of float4 loads, the sum of squares from registers (one block
// sum), the norm applied in registers, one store. Two barriers, no
// divisions (the general path below takes three passes through shared
// memory and a warp's serial sum).
template <int VEC>
__device__ __forceinline__ void stage_x1(const GemvParams &p, float *xs,
                                         const float4 (&nw)[kNormEarly]) {
  constexpr int P = VEC / 4;
  __shared__ float part[kWarps];
  const int nch = (int)p.nch, n4 = nch * P;
  const float4 *x4 = static_cast<const float4 *>(p.x);
  float4 v[kStageLoads];
  float ss = 0.f;
#pragma unroll
  for (int u = 0; u < kStageLoads; u++) {
    const int i = threadIdx.x + u * kThreads;
    v[u] = i < n4 ? __ldg(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    ss = sum_sq4(v[u], ss);
  }
  if (p.norm) {
    const float iv = block_inv_rms(ss, part, kWarps, (float)p.k, p.eps);
#pragma unroll
    for (int u = 0; u < kStageLoads; u++) {
      const int i = threadIdx.x + u * kThreads;
      if (i >= n4) continue;
      const float4 g = u < kNormEarly && p.w_early
                           ? nw[u < kNormEarly ? u : 0]
                           : __ldg(reinterpret_cast<const float4 *>(p.norm) + i);
      v[u] = rms_scale4(v[u], iv, g);
    }
  }
  float4 *xs4 = reinterpret_cast<float4 *>(xs);
#pragma unroll
  for (int u = 0; u < kStageLoads; u++) {
    const int i = threadIdx.x + u * kThreads;
    // Slot i holds elements 4i .. 4i + 3: chunk i / P, piece i % P.
    if (i < n4) xs4[(i % P) * nch + i / P] = v[u];
  }
  __syncthreads();
}

// X rows (f32) into gemv_kernel's interleaved layout (piece q of chunk c at
// (q * nch + c) * 4; k = nch * VEC exactly), rows >= p.rows as zeros; with p.norm
// each row is then scaled as the RMS_NORM kernel does: (x * inv) * norm, rounded
// per product, inv = 1 / sqrt(sum(x^2) / k + eps) summed in f32. Ends with a barrier.
template <int VEC, int R>
__device__ __forceinline__ void stage_xf(const GemvParams &p, float *xs, float *inv) {
  constexpr int P = VEC / 4;                 // float4 pieces per weight chunk
  const int nch = (int)p.nch, n4 = nch * P;  // float4 slots per row (= k / 4)
  const float *x = static_cast<const float *>(p.x);
  float4 *xs4 = reinterpret_cast<float4 *>(xs);
  // 8 loads in flight per thread, as in gemv_kernel's staging.
  for (int e0 = threadIdx.x; e0 < R * n4; e0 += kThreads * 8) {
    float4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int e = e0 + u * kThreads, r = e / n4, i = e - r * n4;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (e < R * n4 && r < p.rows) {
        const float *xr = x + (r / p.xn) * p.xsb + (r % p.xn) * p.xsn;
        if (p.xvec) {
          v[u] = __ldg(reinterpret_cast<const float4 *>(xr) + i);
        } else {
          v[u] = make_float4(__ldg(xr + 4 * i), __ldg(xr + 4 * i + 1), __ldg(xr + 4 * i + 2),
                             __ldg(xr + 4 * i + 3));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int e = e0 + u * kThreads, r = e / n4, i = e - r * n4;
      // Slot i of the row holds elements 4i .. 4i + 3: chunk i / P, piece i % P.
      if (e < R * n4) xs4[r * n4 + (i % P) * nch + i / P] = v[u];
    }
  }
  __syncthreads();
  if (!p.norm) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < p.rows; r += kWarps) {
    float ss = 0.f;
    for (int i = lane; i < n4; i += 32) {
      ss = sum_sq4(xs4[r * n4 + i], ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) inv[r] = inv_rms(ss, (float)p.k, p.eps);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.rows * n4; e += kThreads) {
    const int r = e / n4, s = e - r * n4, q = s / nch, c = s - q * nch;
    const float *nw = p.norm + c * VEC + q * 4;  // elements of slot s
    xs4[e] = rms_scale4(xs4[e], inv[r],
                        make_float4(__ldg(nw), __ldg(nw + 1), __ldg(nw + 2), __ldg(nw + 3)));
  }
  __syncthreads();
}

// gemv1_kernel's loop for R rows of f32 X: C columns a warp tile, 16 / C loads of
// 16 bytes per column in flight per lane, each weight piece multiplied by all R
// staged rows (one float4 of X per row and piece). Host guarantees: k = nch * VEC,
// W rows 16-byte aligned, C * R <= 32 (one lane stores each sum). ONE: the
// one-pass staging of a decode row (stage_x1; host: R = 1, p.xvec, k <= 4
// kThreads kStageLoads), compiled apart so that neither kernel carries the
// other's staging (smaller code measured faster in moe_block).
template <class WT, int R, int C, bool ONE = false>
__global__ void __launch_bounds__(kThreads, C *R <= 8 ? 2 : 1) gemvx_kernel(GemvParams p) {
  TL_SCOPE(kTlGemvx);
  constexpr int VEC = Wfmt<WT>::VEC, U = 16 / C;
  static_assert(C * R <= 32, "one lane per output of a tile");
  extern __shared__ float4 smem4[];
  float *xs = reinterpret_cast<float *>(smem4);
  __shared__ float inv[R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nch = p.nch, m = p.m, xrow = nch * VEC;
  const int64_t ldc = p.ldw / VEC;  // row stride in chunks
  const int64_t tiles = (m + C - 1) / C, nwarps = (int64_t)gridDim.x * kWarps;
  const uint4 *w = static_cast<const uint4 *>(p.w);

  int64_t tile = (int64_t)blockIdx.x * kWarps + warp, s0 = 0;
  uint4 wv[U][C];
  float4 nw[kNormEarly];
  norm_early(p, nw);
  // The first weight step hides the staging; timeline mark 0: the wait is over.
  first_step_and_wait<WT, U, C>(p, wv, tile, tiles, lane);
  TL_MARK();
  // One row (decode): this lane's output of the tile (lane = cc) and its
  // epilogue operands, loaded with the tile's weights so the store does not
  // wait a round trip (after the wait: bias may come from the kernel
  // before). Measured on the H200: +1.4 % bf16 / +2.2 % fp8 Qwen3-30B-A3B
  // decode. R > 1 keeps store_out (the held operands would spill).
  constexpr bool kEpiEarly = R == 1;
  const bool elane = kEpiEarly && lane < C;
  Epi epi{1.f, 1.f, 0.f};
  if (elane && tile < tiles && tile * C + lane < m) epi = load_epi<ONE>(p, 0, tile * C + lane);
  // The only barriers: every thread reaches them once.
  static_assert(!ONE || R == 1, "one row");
  if (ONE)
    stage_x1<VEC>(p, xs, nw);
  else
    stage_xf<VEC, R>(p, xs, inv);
  TL_MARK();  // mark 1: X staged

  float acc[C][R];
#pragma unroll
  for (int cc = 0; cc < C; cc++)
#pragma unroll
    for (int r = 0; r < R; r++) acc[cc][r] = 0.f;
  while (tile < tiles) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t c = s0 + lane + (int64_t)u * 32;
      if (c < nch) {
        fma_chunk<WT, R, C>(wv[u], xs, xrow, nch, c, acc);
      }
    }
    s0 += 32 * U;
    if (s0 >= nch) {  // tile done (uniform across the warp): reduce, store, next tile
      const int64_t j0 = tile * C;
#pragma unroll
      for (int cc = 0; cc < C; cc++)
#pragma unroll
        for (int r = 0; r < R; r++) {
          float v = acc[cc][r];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          if (lane == cc * R + r && r < p.rows && j0 + cc < m) {
            if (kEpiEarly)
              store_out_epi<ONE>(p, r, j0 + cc, v, epi);
            else
              store_out(p, r, j0 + cc, v);
          }
          acc[cc][r] = 0.f;
        }
      if (tile < nwarps) TL_MARK();  // mark 2: warp 0's first tile stored
      tile += nwarps;
      s0 = 0;
      if (tile < tiles) {
        load_step<U, C>(wv, w, ldc, m, nch, tile * C, lane);
        if (elane && tile * C + lane < m) epi = load_epi<ONE>(p, 0, tile * C + lane);
      }
      continue;
    }
    load_step<U, C>(wv, w, ldc, m, nch, tile * C, s0 + lane);  // the tile's next step
  }
}

// Resident blocks of kern per SM at smem bytes, cached in `cache` as
// (dev + 1) << 48 | smem << 16 | blocks: the query costs microseconds per call.
template <class K>
int occupancy(K kern, int dev, size_t smem, std::atomic<uint64_t> &cache) {
  const uint64_t key = ((uint64_t)(dev + 1) << 48) | ((uint64_t)smem << 16);
  const uint64_t v = cache.load(std::memory_order_relaxed);
  if (dev >= 0 && dev < 0xffff && smem < ((size_t)1 << 32) && (v & ~(uint64_t)0xffff) == key)
    return (int)(v & 0xffff);
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kThreads, smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return 1;
  }
  if (per_sm > 0xffff) per_sm = 0xffff;
  if (dev >= 0 && dev < 0xffff && smem < ((size_t)1 << 32))
    cache.store(key | (uint64_t)per_sm, std::memory_order_relaxed);
  return per_sm;
}

// The dynamic shared memory an occupancy query assumes for a staging of smem
// bytes: 32 KB up to 32 KB, so one cached entry serves every k there (registers
// limit residency: 2 blocks of 256 at <= 128), else smem itself. Never the 48 KB
// default limit: with the kernel's static shared memory on top a query there
// answers 0 blocks (which read as 1 block an SM: half the warps for gemvx and
// gemv_kernel, measured on the H200).
size_t occ_smem(size_t smem) { return smem <= 32 * 1024 ? 32 * 1024 : smem; }

// Opt in to more than 48 KB of shared memory (static included) when the staging
// needs it; idempotent, set on every such call since devices may differ.
template <class K>
ingot_status allow_smem(K kern, size_t smem, const char *what) {
  if (smem <= 32 * 1024) return INGOT_OK;
  return cuda_check(
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), what);
}

template <class WT, int R>
ingot_status launch_r(GemvParams &p, int dev, cudaStream_t s) {
  constexpr int VEC = Wfmt<WT>::VEC, C = Tune<WT, R>::C;
  size_t smem = (size_t)R * p.nch * VEC * sizeof(float);
  auto kern = gemv_kernel<WT, R>;
  ingot_status st = allow_smem(kern, smem, "gemv smem attribute");
  if (st) return st;
  static std::atomic<uint64_t> occ{0};
  const int per_sm = occupancy(kern, dev, occ_smem(smem), occ);
  const int64_t tiles = (p.m + C - 1) / C, cap = (int64_t)sm_count(dev) * per_sm;
  // A warp per tile when that fills a quarter of the warp slots (each lane then
  // has C*U 16-byte loads in flight), else the block splits k (block barriers
  // per tile: only worth it when m is too small to occupy the machine).
  p.split = tiles * 4 >= cap * kWarps ? 32 : kThreads;
  const int groups = kThreads / p.split;
  int64_t blocks = (tiles + groups - 1) / groups;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  kern<<<(unsigned)blocks, kThreads, smem, s>>>(p);
  return launch_status("gemv kernel");
}

template <class WT>
ingot_status launch_w(GemvParams &p, int dev, cudaStream_t s) {
  if (p.rows <= 1) return launch_r<WT, 1>(p, dev, s);
  if (p.rows <= 2) return launch_r<WT, 2>(p, dev, s);
  if (p.rows <= 4) return launch_r<WT, 4>(p, dev, s);
  return launch_r<WT, 8>(p, dev, s);
}

// Launch a warp-tile kernel (gemv1_kernel, gemvx_kernel: C columns a warp, persistent
// grid of at most the resident blocks; occupancy queried at occ_smem) when it pays;
// *used = false: nothing launched, take the general kernel.
template <int C, class K>
ingot_status launch_tiles(K kern, GemvParams &p, int dev, cudaStream_t s, size_t smem,
                          size_t occ_smem, std::atomic<uint64_t> &occ, const char *what,
                          bool *used) {
  const int per_sm = occupancy(kern, dev, occ_smem, occ);
  const int64_t tiles = (p.m + C - 1) / C, cap = (int64_t)sm_count(dev) * per_sm;
  // Small m with long rows: too few warps would each stream whole rows; the general
  // kernel's block-splits-k mode spreads them better.
  if (tiles * 4 < cap * kWarps && p.nch > 32 * (16 / C) * 2) return INGOT_OK;
  *used = true;
  int64_t blocks = (tiles + kWarps - 1) / kWarps;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return cuda_check(launch_pdl(kern, dim3((unsigned)blocks), dim3(kThreads), smem, s, p), what);
}

// The one-row kernel when it applies and pays (see the top of the file).
template <class WT, int C>
ingot_status launch_1c(GemvParams &p, int dev, cudaStream_t s, bool *used) {
  const size_t smem = (size_t)p.nch * 16;
  ingot_status st = allow_smem(gemv1_kernel<WT, C>, smem, "gemv1 smem attribute");
  if (st) return st;
  static std::atomic<uint64_t> occ{0};
  return launch_tiles<C>(gemv1_kernel<WT, C>, p, dev, s, smem, occ_smem(smem), occ, "gemv1 kernel",
                         used);
}

template <class WT>
ingot_status launch_1(GemvParams &p, int dev, cudaStream_t s, bool *used) {
  if (p.nch <= 256) return launch_1c<WT, 2>(p, dev, s, used);
  return launch_1c<WT, 1>(p, dev, s, used);
}

// The f32-X kernel for R rows when it pays (see the top of the file).
template <class WT, int R, int C, bool ONE = false>
ingot_status launch_xc(GemvParams &p, int dev, cudaStream_t s, bool *used) {
  const size_t smem = (size_t)R * p.nch * Wfmt<WT>::VEC * sizeof(float);
  auto kern = gemvx_kernel<WT, R, C, ONE>;
  ingot_status st = allow_smem(kern, smem, "gemvx smem attribute");
  if (st) return st;
  static std::atomic<uint64_t> occ{0};
  return launch_tiles<C>(kern, p, dev, s, smem, occ_smem(smem), occ, "gemvx kernel", used);
}

// Columns per warp tile by rows: each staged X float4 is reused by C columns, so that
// shared-memory reads stay within about 4x the weight bytes (R / C <= 2) while the
// tiles stay many (R = 1, 2, 4: two blocks an SM at <= 128 registers; R = 8: C = 4,
// one block an SM at 163-168 registers); C = 1 on long single rows balances the warps
// better (as gemv1).
template <class WT, bool ONE>
ingot_status launch_x1(GemvParams &p, int dev, cudaStream_t s, bool *used) {
  return p.nch <= 256 ? launch_xc<WT, 1, 2, ONE>(p, dev, s, used)
                      : launch_xc<WT, 1, 1, ONE>(p, dev, s, used);
}

// The epilogue that load_epi<true> and store_out_epi<true> implement.
bool one_epilogue(const GemvParams &p) {
  return p.out_dt == INGOT_F32 && !p.sa && (!p.sb || p.sb_s == 1) &&
         (!p.bias || (p.bias_dt == INGOT_F32 && p.bias_sj == 1));
}

// ONE's case on tensor cores (gemv_tc.cu) when it takes it.
ingot_status launch_tc(const GemvParams &p, int dev, cudaStream_t s, bool *used) {
  GemvTcArgs a{};
  a.w = p.w, a.ldw = p.ldw, a.x = static_cast<const float *>(p.x), a.k = p.k, a.m = p.m;
  a.sb = p.sb, a.bias = static_cast<const float *>(p.bias), a.norm = p.norm, a.eps = p.eps;
  a.w_early = p.w_early, a.out = static_cast<float *>(p.out);
  return gemv_tc_try((ingot_dtype)p.w_dt, a, dev, s, used);
}

template <class WT>
ingot_status launch_x(GemvParams &p, int dev, cudaStream_t s, bool *used) {
  if (p.rows <= 1) {  // ONE: one 16-byte aligned row staged in one pass, the plain epilogue
    const bool one =
        p.xvec && p.nch * (Wfmt<WT>::VEC / 4) <= (int64_t)kThreads * kStageLoads && one_epilogue(p);
    if (one) {
      ingot_status st = launch_tc(p, dev, s, used);
      if (st || *used) return st;
    }
    return one ? launch_x1<WT, true>(p, dev, s, used) : launch_x1<WT, false>(p, dev, s, used);
  }
  if (p.rows <= 2) return launch_xc<WT, 2, 2>(p, dev, s, used);
  if (p.rows <= 4) return launch_xc<WT, 4, 2>(p, dev, s, used);
  return launch_xc<WT, 8, 4>(p, dev, s, used);
}

// Cases of cuda_common.cuh's CUDA_CASE for the float weight dtypes.
#define GEMV_FLOAT_WEIGHTS(...)              \
  CUDA_CASE(INGOT_F32, float, __VA_ARGS__)   \
  CUDA_CASE(INGOT_BF16, bf16_t, __VA_ARGS__) \
  CUDA_CASE(INGOT_F16, f16_t, __VA_ARGS__)

int vec_of(ingot_dtype dt) {
  switch (dt) {
    case INGOT_F32:
      return 4;
    case INGOT_BF16:
    case INGOT_F16:
      return 8;
    case INGOT_F8E4M3FN:
    case INGOT_F8E5M2:
      return 16;
    default:
      return 0;
  }
}

bool is_f8(ingot_dtype dt) { return dt == INGOT_F8E4M3FN || dt == INGOT_F8E5M2; }

// Stride of a vector-like tensor of `len` elements (numel 1: broadcast, stride 0).
bool vec_stride(const ingot_tensor *t, int64_t len, int64_t *stride) {
  int64_t n = ingot_numel(t);
  if (n == 1) return *stride = 0, true;
  if (n != len) return false;
  for (int d = 0; d < ingot_ndim(t); d++)
    if (ingot_shape(t)[d] == len) return *stride = ingot_strides(t)[d], true;
  return false;
}

// W' [k, m] (last two dims of in[1]) as rows of W along k: stride 1 along k.
bool weight_rows(const ingot_tensor *wt, int64_t k, int64_t m, int64_t *ldw) {
  int nd = ingot_ndim(wt);
  const int64_t *st = ingot_strides(wt);
  int64_t sk = k == 1 ? 1 : st[nd - 2];
  int64_t sm = m == 1 ? (k > 0 ? k : 1) : st[nd - 1];
  if (sk != 1 || sm < k || sm < 1) return false;
  *ldw = sm;
  return true;
}

// Limit of staged X per block; beyond it cuBLASLt does the product.
constexpr size_t kMaxStage = 160 * 1024;

ingot_status run(GemvParams &p, ingot_dtype wdt, const ingot_tensor *wt, ingot_tensor *out,
                 bool *done) {
  int vec = vec_of(wdt);
  if (!vec) return INGOT_OK;
  p.w_dt = wdt;
  p.nch = (p.k + vec - 1) / vec;
  if ((size_t)p.rows > kMaxRows) return INGOT_OK;
  int rp = p.rows <= 1 ? 1 : p.rows <= 2 ? 2 : p.rows <= 4 ? 4 : 8;
  if ((size_t)rp * p.nch * vec * sizeof(float) > kMaxStage) return INGOT_OK;
  size_t es = ingot_dtype_size(wdt);
  p.vec = ((uintptr_t)p.w % 16 == 0) && ((size_t)p.ldw * es % 16 == 0);
  *done = true;
  if (p.m == 0 || p.rows == 0) return INGOT_OK;
  int dev = ingot_device_of(out).index;
  ingot_status st = cuda_use_device(dev);
  if (st) return st;
  cudaStream_t s = stream_of(out);
  (void)wt;
  // f32 X against float weights (QMATMUL's float weights with or without a norm, f32
  // MATMUL of 2-8 rows): X staged as float; the one-row f32 MATMUL keeps gemv1.
  // (f8e4m3fn weights with f32 X: QMATMUL's f8 form, its row scales in sb.)
  const bool fw =
      wdt == INGOT_F32 || wdt == INGOT_BF16 || wdt == INGOT_F16 || wdt == INGOT_F8E4M3FN;
  if (p.x_dt == INGOT_F32 && fw && (wdt != INGOT_F32 || p.rows > 1 || p.norm) && p.vec && p.k > 0 &&
      p.k % vec == 0 && p.xsk == 1) {
    p.xvec = (uintptr_t)p.x % 16 == 0 && p.xsn % 4 == 0 && p.xsb % 4 == 0;
    bool used = false;
    switch (wdt) {
      GEMV_FLOAT_WEIGHTS(st = launch_x<scalar_t>(p, dev, s, &used))
      CUDA_CASE(INGOT_F8E4M3FN, f8e4m3_t, st = launch_x<scalar_t>(p, dev, s, &used))
      default:
        break;
    }
    if (st || used) return st;
  }
  // A norm is fused only there: the caller normalises X itself.
  if (p.norm) return *done = false, INGOT_OK;
  // One-row fast path: X of the weight's (non-f8) dtype, contiguous and aligned like W,
  // k a whole number of 16-byte chunks, X fits the default 48 KB of shared memory.
  if (p.rows == 1 && p.vec && p.x_dt == (int)wdt && !is_f8(wdt) && p.k > 0 && p.k % vec == 0 &&
      p.xsk == 1 && (uintptr_t)p.x % 16 == 0 && (size_t)p.nch * 16 <= 48 * 1024) {
    bool used = false;
    switch (wdt) {
      GEMV_FLOAT_WEIGHTS(st = launch_1<scalar_t>(p, dev, s, &used))
      default:
        break;
    }
    if (st || used) return st;
  }
  switch (wdt) {
    GEMV_FLOAT_WEIGHTS(return launch_w<scalar_t>(p, dev, s))
    CUDA_CASES_F8(return launch_w<scalar_t>(p, dev, s))
    default:
      *done = false;
      return INGOT_OK;
  }
}

GemvParams base_params() {
  GemvParams p;
  memset(&p, 0, sizeof p);
  // A plain launch (PDL off: this family's default) starts after the kernel
  // before has finished, so any W may be loaded before the (no-op) wait.
  p.w_early = !pdl_enabled();
  return p;
}

// MATMUL: X [B,n,k] · W' [B,k,m] -> out [B,n,m], one dtype (bf16/f16/f32),
// B*n <= 8 when W' is shared by the batch (stride 0) or B == 1.
ingot_status try_matmul(ingot_op_args *a, bool *done) {
  ingot_tensor *x = a->in[0], *wt = a->in[1], *out = a->out[0];
  if (!x || !wt || !out || ingot_ndim(x) != 3 || ingot_ndim(wt) != 3 || ingot_ndim(out) != 3)
    return INGOT_OK;
  ingot_dtype dt = ingot_dtype_of(out);
  if (dt != INGOT_BF16 && dt != INGOT_F16 && dt != INGOT_F32) return INGOT_OK;
  if (ingot_dtype_of(x) != dt || ingot_dtype_of(wt) != dt || !ingot_is_contiguous(out))
    return INGOT_OK;
  const int64_t *xs = ingot_shape(x), *ws = ingot_shape(wt);
  int64_t B = xs[0], n = xs[1], k = xs[2], m = ws[2];
  if (ws[0] != B || ws[1] != k) return INGOT_OK;
  if (B * n > kMaxRows || B * n < 1) return INGOT_OK;
  if (B > 1 && ingot_strides(wt)[0] != 0) return INGOT_OK;
  GemvParams p = base_params();
  if (!weight_rows(wt, k, m, &p.ldw)) return INGOT_OK;
  p.w = ingot_tensor_data(wt);
  p.x = ingot_tensor_data(x);
  p.xsb = ingot_strides(x)[0], p.xsn = ingot_strides(x)[1], p.xsk = ingot_strides(x)[2];
  p.xn = n;
  p.x_dt = dt;
  p.out = ingot_tensor_data(out);
  p.out_dt = dt;
  p.rows = (int)(B * n);
  p.k = k, p.m = m;
  return run(p, dt, wt, out, done);
}

// SCALED_MM: a [M,K] f8 · b [K,N] f8 (column-major) * scale_a * scale_b + bias,
// M <= 8. Scales are f32, tensorwise (numel 1) or rowwise ([M,1], [1,N]), in
// any combination (tensorwise scale_a with rowwise scale_b included).
ingot_status try_scaled_mm(ingot_op_args *a, bool *done) {
  if (a->nin < 4) return INGOT_OK;
  ingot_tensor *x = a->in[0], *wt = a->in[1], *sa = a->in[2], *sb = a->in[3], *out = a->out[0];
  ingot_tensor *bias = a->nin > 4 ? a->in[4] : NULL;
  if (!x || !wt || !sa || !sb || !out) return INGOT_OK;
  if (ingot_ndim(x) != 2 || ingot_ndim(wt) != 2 || ingot_ndim(out) != 2) return INGOT_OK;
  ingot_dtype xdt = ingot_dtype_of(x), wdt = ingot_dtype_of(wt), odt = ingot_dtype_of(out);
  if (!is_f8(xdt) || !is_f8(wdt)) return INGOT_OK;
  if (odt != INGOT_BF16 && odt != INGOT_F16 && odt != INGOT_F32) return INGOT_OK;
  if (!ingot_is_contiguous(out)) return INGOT_OK;
  if (ingot_dtype_of(sa) != INGOT_F32 || ingot_dtype_of(sb) != INGOT_F32) return INGOT_OK;
  int64_t M = ingot_shape(x)[0], K = ingot_shape(x)[1], N = ingot_shape(wt)[1];
  if (ingot_shape(wt)[0] != K || M < 1 || M > kMaxRows) return INGOT_OK;
  GemvParams p = base_params();
  if (!weight_rows(wt, K, N, &p.ldw)) return INGOT_OK;
  if (!vec_stride(sa, M, &p.sa_s) || !vec_stride(sb, N, &p.sb_s)) return INGOT_OK;
  if (bias) {
    ingot_dtype bdt = ingot_dtype_of(bias);
    if (bdt != INGOT_F32 && bdt != INGOT_BF16 && bdt != INGOT_F16) return INGOT_OK;
    int bn = ingot_ndim(bias);
    const int64_t *bs = ingot_shape(bias), *bst = ingot_strides(bias);
    // Broadcast to [M, N]: size-1 dims read with stride 0.
    if (bn == 1 && (bs[0] == N || bs[0] == 1)) {
      p.bias_sr = 0, p.bias_sj = bs[0] == 1 ? 0 : bst[0];
    } else if (bn == 2 && (bs[0] == M || bs[0] == 1) && (bs[1] == N || bs[1] == 1)) {
      p.bias_sr = bs[0] == 1 ? 0 : bst[0], p.bias_sj = bs[1] == 1 ? 0 : bst[1];
    } else if (bn == 0) {
      p.bias_sr = p.bias_sj = 0;
    } else {
      return INGOT_OK;
    }
    p.bias = ingot_tensor_data(bias);
    p.bias_dt = bdt;
  }
  p.w = ingot_tensor_data(wt);
  p.x = ingot_tensor_data(x);
  p.xsb = 0, p.xsn = ingot_strides(x)[0], p.xsk = ingot_strides(x)[1];
  p.xn = M;
  p.x_dt = xdt;
  p.out = ingot_tensor_data(out);
  p.out_dt = odt;
  p.rows = (int)M;
  p.k = K, p.m = N;
  p.sa = static_cast<const float *>(ingot_tensor_data(sa));
  p.sb = static_cast<const float *>(ingot_tensor_data(sb));
  return run(p, wdt, wt, out, done);
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_gemv)

extern "C" ingot_status cuda_gemv_try(ingot_op_args *a, bool *done) {
  *done = false;
  if (!a || a->nout < 1 || a->nin < 2) return INGOT_OK;
  if (a->op == INGOT_OP_MATMUL) return try_matmul(a, done);
  // INGOT_OP_SCALED_MM is being added; match it by name so this file builds either way.
  const char *name = ingot_op_name(a->op);
  if (name && strcmp(name, "scaled_mm") == 0) return try_scaled_mm(a, done);
  return INGOT_OK;
}

extern "C" ingot_status cuda_gemv_f32x(const void *w, ingot_dtype wdt, int64_t ldw, const float *x,
                                       int64_t rows, int64_t k, int64_t m, const float *res,
                                       const float *norm, float eps, const float *wscale,
                                       ingot_tensor *out, bool *done) {
  *done = false;
  if (rows < 1 || rows > kMaxRows) return INGOT_OK;
  GemvParams p = base_params();
  p.w = w, p.ldw = ldw;
  p.x = x, p.xsb = 0, p.xsn = k, p.xsk = 1, p.xn = rows;
  p.x_dt = INGOT_F32;
  p.out = ingot_tensor_data(out), p.out_dt = INGOT_F32;
  p.rows = (int)rows, p.k = k, p.m = m;
  if (res) p.bias = res, p.bias_dt = INGOT_F32, p.bias_sr = m, p.bias_sj = 1;
  p.norm = norm, p.eps = eps;
  if (wscale) p.sb = wscale, p.sb_s = 1;  // W row j's scale: output column j
  p.w_early = true;                       // QMATMUL's weights: immutable (see gemv.cuh)
  return run(p, wdt, nullptr, out, done);
}
