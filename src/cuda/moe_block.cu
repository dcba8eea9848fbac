// MOE_BLOCK (contract in src/core/ops_moe.c) at T = 1: a sparse MoE layer as
// one cooperative kernel, where moe_block_compose runs three (router cluster,
// gate_up, down) with a full dependency between each. The grid is one wave of
// G <= SM-count blocks of 512 threads (cooperative launch: all resident), one
// a SM (each holds up to ~220 KB of shared memory).
//
// Phase 0 (route): every block stages x in shared memory (interleaved as
//   moe.cu's expert kernels) and normalises it there with RMS_NORM's roundings;
//   block e (E <= the blocks; else warps) dots router row e with xn (its row's
//   loads are issued before the staging and before the PDL wait) into a
//   logits scratch. The compact kernel instead takes router row e's dot with
//   x * norm from the registers that stage x, in the same block sum as the
//   squares: logit = dot / rms, one barrier before the grid sync instead of
//   three and no router dot loop (code -21 to -24 %; H200, nineteenth
//   session: routed 1.1 us sooner, decode +2.2 % bf16, +3.5 % fp8). Grid
//   sync; or, given a mailbox (the compact kernel), block e posts its logit
//   there as one 64-bit word with a flag and every block polls the E words
//   it needs instead (no barrier; block e clears word e after the second
//   sync). Every block then routes the E logits itself (each thread ranks its
//   logits' keys against all E: the order of route_warp_keys, at once;
//   E > 1024: the routing warp; weights by route_weights); block 0 writes
//   weights and ids. The other warps do not wait for warp 0's weights (the
//   copies and phase 1a need only the ids): they reach the scales and the
//   outputs after the second grid sync (decode +0.8 to +0.9 %).
// Then block b copies the down rows it owns in phase 1b, rows [b R, b R + R)
//   of every chosen expert (k contiguous runs: whole DRAM pages), into shared
//   memory with cp.async (evict-first in L2: read once, so the lines the next
//   kernels reuse stay; bf16 rows swizzled for ldmatrix): that stream runs
//   under phase 1a. The copies go piece-major (a piece's offsets once, then
//   its k experts: ~8 SASS instructions a copy, against ~40 expert-major;
//   the copies' issue 2.4 -> 1.7 us fp8, H200 nineteenth session).
// Phase 1a: units (slot j, slice s of S intermediate rows), about one a block:
//   a warp per row pair (16-byte loads, evict-first, f32 dots with xn) writes
//   h = silu(g) * u into a scratch [k][I]. (L2 bulk prefetches of the
//   slice's rows ahead of the loads lost: 285.4 -> 310.3 tok/s bf16 without
//   them.) Grid sync.
// Phase 1b: h of all k slots into shared memory (24 KB at Qwen3-30B-A3B's
//   shape, over xn's space; its loads in flight together: one L2 round
//   trip); a thread per (slot, 16-byte piece) of the k down rows, 16 output
//   rows n at a time, then a block sum a row: y[n] = x[n] + sum_j w_j * (dot
//   * scale) (fixed order: deterministic; x[n] loaded in phase 0). A warp per
//   row instead (compact code, h read once a row) measured slower: 358 ->
//   350 tok/s bf16, 434 -> 402 fp8. bf16 with I a multiple of 64 runs the
//   dots on tensor cores instead (down_group_tc: h as bf16 hi + lo, mma
//   m16n8k16, f32 sums): its dots 2.9 -> 2.4 us, decode +0.4-1 % bf16;
//   f8 with I a multiple of 128 too (down_group_tc8: the e4m3 rows to f16
//   exactly, each 128 elements of h scaled by a power of 2 into f16 hi +
//   lo, the scale from their largest |h| by one warp max: no barrier): its
//   dots 3.4 -> 1.8 us, staging h 0.5 -> 0.9 us, decode +3 % fp8 (H200,
//   eighteenth session; a per-slot scale needed a block pass or phase-1a
//   atomics and measured no better). INGOT_MOE_TC=0 (read per call) keeps
//   the f32 FMAs.
// Code size: most phases (staging, routing, copies, the tail) run their
// code once a layer, and on the H200 the kernel measured faster when smaller
// and slower when larger (docs/perf-notes.md, fourteenth session). So the
// tensor-core form is its own instantiation (TC: no FMA phase 1b in it;
// decode +0.9 % bf16), and the decode dtypes (bf16 on tensor cores, f8) have
// a compact one (COMPACT) for the decode geometry (a router row a block, grouped
// key ranks, one group of phase-1b rows) without the other paths' code: bf16
// 5600 -> 4464 SASS instructions, f8 7056 -> 5896; decode +1.4 % bf16,
// +4.4 % fp8.
// Bytes: the k experts' gate, up and down rows once, the router once; xn, h
// and the logits through L2. Two grid syncs; no partial sums.
// Measured on the H200 (docs/perf-notes.md): Qwen3-30B-A3B decode 279.6
// (composed kernels) -> 326.4 tok/s bf16, 298.5 -> 379.0 fp8 (f8 attention
// too); the moe_layer graph 49 -> 36 us bf16, 43 -> 26 us fp8. By clock64
// stamps (bf16): phase 0 ~6 us (staging, router, sync, routing), the down
// rows' cp.async issue and phase 1a ~19 us (DRAM-bound: 75 MB), the second
// sync ~2.5 us, phase 1b ~4 us (the timeline of docs/cuda-runtime.md splits
// it finer). INGOT_MOE_BLOCK=0 (read per call) runs the
// composed kernels instead.
// Shapes it does not take (T > 1, D or I not a whole number of 16-byte chunks,
// down rows past the shared memory, ...) run moe_block_compose.
#include <cooperative_groups.h>

#include <atomic>

#include "../core/env.h"
#include "../core/moe_compose.h"
#include "cuda_common.cuh"
#include "moe_common.cuh"
#define PDL_FAMILY "moeblock"
// A PDL dependent by default (H200, Qwen3-30B-A3B decode 282.9 -> 283.9 tok/s
// bf16, 327.9 -> 330.6 fp8); INGOT_NO_PDL=moeblock turns it off.
#include "pdl.cuh"
#include "tc_f16.cuh"
#include "weight_chunk.cuh"
#include "timeline.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 512;  // one block an SM: 16 warps keep the gate/up loads in flight
constexpr int kWarps = kThreads / 32;
constexpr size_t kSmemBudget = 226 * 1024;  // the block's dynamic shared memory at most
constexpr int kRankE = 1024;                // top-k by ranks (all threads) up to this E
constexpr int kMaxK = 64;                   // slots routed in shared memory
constexpr int kMaxE = 8192;                 // logits routed in shared memory
constexpr int kMaxD = 16384;                // x staged in shared memory (64 KB)
constexpr int kRowGroup = 16;               // phase 1b: output rows summed at a time

struct BlockParams {
  const float *x, *norm;  // x [D] (also the residual), norm [D]
  float eps;
  const void *router;  // [E, D] of r_dt
  int r_dt;
  const void *wgu;   // [E, 2I, D]
  const float *sgu;  // [E, 2I] or NULL
  const void *wd;    // [E, D, I]
  const float *sd;   // [E, D] or NULL
  int64_t D, I;
  int E, k;
  int S, slices;  // phase 1a: h in slices of S rows, unit = (slot, slice)
  int R;          // phase 1b: output rows a block
  bool renorm;
  float *y, *wout;  // y [D]; routing weights [k]
  int32_t *ids;     // [k]
  float *logits;    // scratch [E]
  float *h;         // scratch [k][I]
  unsigned long long *mail;  // in[7] or NULL: [E] zero (left zero); logit e as 1 << 32 | bits
};

// A float16ish router chunk's piece q (4 elements) by runtime dtype.
__device__ __forceinline__ void router_piece(const uint4 &v, int q, int dt, float *f) {
  if (dt == INGOT_BF16)
    Wfmt<bf16_t>::piece(v, q, f);
  else if (dt == INGOT_F16)
    Wfmt<f16_t>::piece(v, q, f);
  else
    Wfmt<float>::piece(v, q, f);
}

constexpr int kNormLoads = 2;  // norm float4s a thread loads before the PDL wait (D <= 4096)

// x normalised into xs, every thread; the only barriers of the staging.
template <int VEC>
__device__ void stage_x(const BlockParams &p, float *xs, const float4 (&nw)[kNormLoads]) {
  __shared__ float part[kWarps];
  const int64_t D = p.D, nch = D / VEC;
  float ss = 0.f;
  for (int64_t kk = 4 * (int64_t)threadIdx.x; kk < D; kk += 4 * kThreads) {
    const float4 v = *reinterpret_cast<const float4 *>(p.x + kk);
    ss = sum_sq4(v, ss);
    *reinterpret_cast<float4 *>(xs + sidx<VEC>(kk, nch, true)) = v;
  }
  const float iv = block_inv_rms(ss, part, kWarps, (float)D, p.eps);
  int u = 0;  // each thread norms the slots it stored: no barrier between
  for (int64_t kk = 4 * (int64_t)threadIdx.x; kk < D; kk += 4 * kThreads, u++) {
    float4 *d = reinterpret_cast<float4 *>(xs + sidx<VEC>(kk, nch, true));
    static_assert(kNormLoads == 2, "the picks below");  // static indices: nw in registers
    const float4 w = u == 0   ? nw[0]
                     : u == 1 ? nw[1]
                              : __ldg(reinterpret_cast<const float4 *>(p.norm + kk));
    *d = rms_scale4(*d, iv, w);
  }
  __syncthreads();
}

constexpr int kRouterLoads = 8;  // 16-byte router loads per lane issued before the staging

// Who dots which router row: with E <= the blocks, block e takes row e (its
// threads stride the row's 16-byte chunks: every SM reads ~4 KB at Qwen's
// shape, where 8 blocks of warps would read 64 KB each); else global warp w
// takes rows w, w + grid warps, ... (its lanes stride the chunks).
struct RouterShare {
  int64_t e, first, stride, step;
};
__device__ __forceinline__ RouterShare router_share(const BlockParams &p) {
  if (p.E <= (int)gridDim.x) return {(int64_t)blockIdx.x, (int64_t)threadIdx.x, kThreads, p.E};
  return {(int64_t)blockIdx.x * kWarps + threadIdx.x / 32, (int64_t)(threadIdx.x % 32), 32,
          (int64_t)gridDim.x * kWarps};
}

__device__ __forceinline__ const uint4 *router_row(const BlockParams &p, int64_t e) {
  const int es = p.r_dt == INGOT_F32 ? 4 : 2;
  return reinterpret_cast<const uint4 *>(static_cast<const char *>(p.router) + e * p.D * es);
}

// The router loads of this thread's first row (before the staging: weights).
__device__ void router_first(const BlockParams &p, uint4 (&v)[kRouterLoads]) {
  const RouterShare r = router_share(p);
  const int64_t rch = p.D * (p.r_dt == INGOT_F32 ? 4 : 2) / 16;
  const uint4 *row = router_row(p, r.e);
#pragma unroll
  for (int u = 0; u < kRouterLoads; u++) {
    const int64_t c = r.first + r.stride * u;
    v[u] = r.e < p.E && c < rch ? ld_stream(row + c) : make_uint4(0, 0, 0, 0);
  }
}

// Phase 0's dots into the logits scratch (sums in a fixed order).
template <int VEC>
__device__ void router_logits(const BlockParams &p, const float *xs,
                              const uint4 (&first)[kRouterLoads]) {
  __shared__ float part[kWarps];
  const RouterShare r = router_share(p);
  const int lane = threadIdx.x % 32, rvec = p.r_dt == INGOT_F32 ? 4 : 8;
  const int64_t nch = p.D / VEC, rch = p.D / rvec;
  const bool by_block = r.stride == kThreads;
  bool have = true;
  for (int64_t e = r.e; e < p.E; e += r.step) {
    const uint4 *row = router_row(p, e);
    float d = 0.f;
    for (int64_t c0 = 0; c0 < rch; c0 += r.stride * kRouterLoads) {
      uint4 v[kRouterLoads];
#pragma unroll
      for (int u = 0; u < kRouterLoads; u++) {
        const int64_t c = c0 + r.first + r.stride * u;
        v[u] = have && c0 == 0 ? first[u] : c < rch ? ld_stream(row + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kRouterLoads; u++) {
        const int64_t c = c0 + r.first + r.stride * u;
        if (c >= rch) break;
        for (int q = 0; q < rvec / 4; q++) {
          float f[4];
          router_piece(v[u], q, p.r_dt, f);
          const float4 xv =
              *reinterpret_cast<const float4 *>(xs + sidx<VEC>(c * rvec + 4 * q, nch, true));
          d = fmaf(f[0], xv.x, d), d = fmaf(f[1], xv.y, d), d = fmaf(f[2], xv.z, d);
          d = fmaf(f[3], xv.w, d);
        }
      }
    }
    have = false;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    if (!by_block) {
      if (lane == 0) __stcg(p.logits + e, d);
      continue;
    }
    if (lane == 0) part[threadIdx.x / 32] = d;  // the block's warps, then warp order
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; w++) t += part[w];
      __stcg(p.logits + e, t);
    }
  }
}

// COMPACT phase 0 (D <= 4 kThreads kNormLoads): router row blockIdx.x's
// elements [4 i, 4 i + 4) of this thread's x slots i = tid + u kThreads, as
// raw bits (f32: four words; bf16, f16: two), zeros past D or E; loaded
// before the wait (weights).
__device__ __forceinline__ void router_pieces(const BlockParams &p, uint4 (&rw)[kNormLoads]) {
  const int64_t e = blockIdx.x;
  const char *row = reinterpret_cast<const char *>(router_row(p, e));
#pragma unroll
  for (int u = 0; u < kNormLoads; u++) {
    const int64_t i = threadIdx.x + u * kThreads;
    rw[u] = make_uint4(0, 0, 0, 0);
    if (e >= p.E || 4 * i >= p.D) continue;
    if (p.r_dt == INGOT_F32) {
      rw[u] = ld_stream(reinterpret_cast<const uint4 *>(row) + i);
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2 *>(row) + i);
      rw[u] = make_uint4(v.x, v.y, 0, 0);
    }
  }
}

// COMPACT phase 0 in one block sum: x's slots from registers give both the
// sum of squares and the router row's dot with x * norm (each product
// rounded, no contraction), so logit = dot / rms needs no staged xn and no second
// block sum (fixed order: deterministic); then xn into xs. Only barrier: the
// sum's (xs is read after the grid sync).
template <int VEC>
__device__ void stage_x_logit(const BlockParams &p, float *xs, const float4 (&nw)[kNormLoads],
                              const uint4 (&rw)[kNormLoads]) {
  __shared__ float2 part[kWarps];
  const int64_t D = p.D, nch = D / VEC;
  float4 v[kNormLoads];
  float ss = 0.f, d = 0.f;
#pragma unroll
  for (int u = 0; u < kNormLoads; u++) {
    const int64_t kk = 4 * ((int64_t)threadIdx.x + u * kThreads);
    v[u] = kk < D ? *reinterpret_cast<const float4 *>(p.x + kk) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int u = 0; u < kNormLoads; u++) {
    float f[4];
    router_piece(rw[u], 0, p.r_dt, f);
    ss = sum_sq4(v[u], ss);
    d = fmaf(f[0], __fmul_rn(v[u].x, nw[u].x), d), d = fmaf(f[1], __fmul_rn(v[u].y, nw[u].y), d);
    d = fmaf(f[2], __fmul_rn(v[u].z, nw[u].z), d), d = fmaf(f[3], __fmul_rn(v[u].w, nw[u].w), d);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
    d += __shfl_xor_sync(0xffffffffu, d, o);
  }
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = make_float2(ss, d);
  __syncthreads();
  float tss = 0.f, td = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; w++) tss += part[w].x, td += part[w].y;
  const float iv = inv_rms(tss, (float)D, p.eps);
  // iv 0 (the squares overflow): xn is 0, so is the logit (td may be inf)
  if (threadIdx.x == 0 && (int)blockIdx.x < p.E) {
    const float l = iv == 0.f ? 0.f : td * iv;
    if (p.mail)
      st_relaxed_u64(p.mail + blockIdx.x, 1ull << 32 | __float_as_uint(l));
    else
      __stcg(p.logits + blockIdx.x, l);
  }
#pragma unroll
  for (int u = 0; u < kNormLoads; u++) {
    const int64_t kk = 4 * ((int64_t)threadIdx.x + u * kThreads);
    if (kk < D)
      *reinterpret_cast<float4 *>(xs + sidx<VEC>(kk, nch, true)) = rms_scale4(v[u], iv, nw[u]);
  }
}

// Shared memory of a block, in floats: xs [D] (phase 0, 1a) sharing its
// space with hs [k][I] (1b: f32, or for the tensor cores h's bf16 or f16 hi
// and lo pairs, the same bytes), logits [E] and their keys [E] (u64, rank
// top-k), the down rows' scales [k][R], f8: the exponents of h's scales
// [k I / 128] (int8), then the down rows [k][R][I] of WT, 16-byte aligned.
struct Layout {
  int64_t ls, keys, ss, sexp, ds, bytes;  // offsets in floats (xs and hs at 0), total bytes
};
__host__ __device__ inline Layout layout(int64_t D, int64_t I, int E, int k, int R, int es) {
  Layout L;
  L.ls = ((D > k * I ? D : k * I) + 3) / 4 * 4;
  L.keys = L.ls + (E + 3) / 4 * 4;
  L.ss = L.keys + (E <= kRankE ? 2 * ((E + 1) / 2 * 2) : 0);
  L.sexp = L.ss + ((int64_t)k * R + 3) / 4 * 4;  // f8 on tensor cores: k I / 128 bytes
  // in whole 128-byte lines: ds keeps its alignment (48 bytes measured 1-2.5
  // us slower in the down rows' copies, H200)
  L.ds = L.sexp + (es == 1 ? ((int64_t)k * I / 128 + 127) / 128 * 32 : 0);
  L.bytes = L.ds * 4 + (int64_t)k * R * I * es;
  return L;
}

// Piece f = r rowp + c of consecutive rows of rowp 16-byte pieces, for a
// thread walking f = tid, tid + kThreads, ... without a division (32-bit:
// the pieces fit in shared memory): the down-row copies and phase 1b.
struct PieceWalk {
  int rowp, r, c, rstep, cstep;
  __device__ explicit PieceWalk(int rowp_)
      : rowp(rowp_),
        r((int)threadIdx.x / rowp_),
        c((int)threadIdx.x - r * rowp_),
        rstep(kThreads / rowp_),
        cstep(kThreads - rstep * rowp_) {}
  __device__ void next() {  // piece f + kThreads
    r += rstep, c += cstep;
    if (c >= rowp) c -= rowp, r++;
  }
};

// Where 16-byte piece c of staged down row r sits in its row when swizzled:
// within each 128-byte line (rows are whole lines), piece c ^ (r % 8), so
// ldmatrix's 8 rows of one column hit 8 different bank quads and cp.async
// still fills whole lines.
__device__ __forceinline__ int swz_piece(int c, int r) { return c ^ (r & 7); }

// ldmatrix .x4 (a 16 x 16 bf16 A fragment of mma m16n8k16; lane l gives row
// l % 16, columns 8 (l / 16) on).
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&a)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}

// The k choices of the E logits (every thread; the logits loaded here from
// the scratch into ls): key ranks (each thread counts the keys above its
// logits': the same order as route_warp_keys, all threads at once) for E <=
// kRankE, else the routing warp; sid filled, seen by every thread on return.
// The ranks' softmax weights (warp 0, route_weights) go into swt with no
// barrier after: the other warps go on with sid (the copies and phase 1a
// need only the ids; decode +0.8 to +0.9 %, H200 nineteenth session), and
// swt is read after the second grid sync, whose barriers publish it.
template <bool COMPACT>
__device__ void route_block(const BlockParams &p, float *ls, unsigned long long *keys, int *sid,
                            float *swt) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const bool ranks = COMPACT || p.E <= kRankE;
  for (int e = tid; e < p.E; e += kThreads) {
    float l;
    if (COMPACT && p.mail) {  // block e's post: its flag and logit in one word
      unsigned long long v;
      while (!((v = ld_relaxed_u64(p.mail + e)) >> 32)) {
      }
      l = __uint_as_float((unsigned)v);
    } else {
      l = __ldcg(p.logits + e);
    }
    ls[e] = l;
    if (ranks) keys[e] = route_key(l, e);
  }
  __syncthreads();
  if (!ranks) {
    if (warp == 0) route_warp_keys(ls, p.E, p.k, p.renorm, swt, sid);
    __syncthreads();
    return;
  }
  // G lanes a key (G = kThreads / E rounded down to a power of 2, <= 32), each
  // counting every G-th other key: E / G loads in a row instead of E.
  int G = 1;
  while (G < 32 && 2 * G * p.E <= kThreads) G *= 2;
  if (COMPACT || G > 1) {  // one key per group of G lanes: every thread reaches the shuffles
    const int e = tid / G, g = tid % G;
    const bool live = e < p.E;
    const unsigned long long me = live ? keys[e] : 0ull;
    int rank = 0;
    if (live)
#pragma unroll 8
      for (int o = g; o < p.E; o += G) rank += keys[o] > me;
    for (int m = 1; m < G; m <<= 1) rank += __shfl_xor_sync(0xffffffffu, rank, m);
    if (live && g == 0 && rank < p.k) sid[rank] = e;
  } else {
    for (int e = tid; e < p.E; e += kThreads) {
      const unsigned long long me = keys[e];
      int rank = 0;
#pragma unroll 8
      for (int o = 0; o < p.E; o++) rank += keys[o] > me;
      if (rank < p.k) sid[rank] = e;
    }
  }
  __syncthreads();
  if (warp == 0) {
    route_weights(ls, p.E, p.k, p.renorm, sid[0], lane < p.k ? sid[lane] : 0, swt, sid);
  }
}

// Phase 1b on tensor cores (bf16): output rows [g, g + 16) (nr of them real)
// of the k staged down blocks (swizzled rows) times h (hp: bf16 hi / lo
// pairs). Warp w takes a contiguous share of the k I / 16 column tiles; a
// tile is one mma m16n8k16: A the 16 rows by ldmatrix, B's column 0 h's hi,
// column 1 its lo, the other six zero, so a row's sum is d[col 0] +
// d[col 1]: 16 significant bits of h, products exact, f32 sums. Tiles go in
// batches of kTcBatch (their loads first, then two mma chains). A slot's
// sums times its rows' scales (routing weight included) where the slot
// ends; part[warp][0, 16) written (fixed order: deterministic).
constexpr int kTcBatch = 2;  // 4 or 8 (unrolled) measured slower
__device__ void down_group_tc(const BlockParams &p, const uint4 *ds, const uint32_t *hp,
                              const float *ss, int g, int nr, float (*part)[kRowGroup]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
  const int I = (int)p.I, rowp = I / 8, tiles = I / 16, T = p.k * tiles;
  const int per = (T + kWarps - 1) / kWarps, q1 = T < (warp + 1) * per ? T : (warp + 1) * per;
  // ldmatrix: lane l addresses row l % 16 (a row past nr: the last real one,
  // whose sums are dropped), pieces 2 i0 / 16 + l / 16 (swizzled by the row)
  const int ar = g + (lane % 16 < nr ? lane % 16 : nr - 1), ahalf = lane / 16;
  const int r0 = gq < nr ? gq : nr - 1, r1 = gq + 8 < nr ? gq + 8 : nr - 1;  // scale rows
  float acc0 = 0.f, acc1 = 0.f;  // rows g + gq and g + gq + 8 (lanes t == 0; others add 0)
  for (int q = warp * per; q < q1;) {
    const int j = q / tiles, qe = q1 < (j + 1) * tiles ? q1 : (j + 1) * tiles;  // slot j's
    const uint32_t a_row = smem_u32(ds + (j * p.R + ar) * rowp);
    const uint32_t *h_slot = hp + j * I + 2 * t + gq;                  // + i0: tile i0's b0 word
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};  // two mma chains
#pragma unroll 1  // compact code (docs/perf-notes.md, thirteenth session)
    for (; q < qe; q += kTcBatch) {
      uint32_t a[kTcBatch][4], b[kTcBatch][2];
#pragma unroll
      for (int u = 0; u < kTcBatch; u++) {
        if (q + u >= qe) break;
        const int i0 = (q + u - j * tiles) * 16;
        ldmatrix_x4(a_row + 16 * swz_piece(i0 / 8 + ahalf, ar), a[u]);
        b[u][0] = gq < 2 ? h_slot[i0] : 0u;
        b[u][1] = gq < 2 ? h_slot[i0 + 8] : 0u;
      }
#pragma unroll
      for (int u = 0; u < kTcBatch; u++) {
        if (q + u >= qe) break;
        mma_bf16(u % 2 ? d1 : d0, a[u], b[u][0], b[u][1]);
      }
    }
    q = qe;
    acc0 = fmaf((d0[0] + d0[1]) + (d1[0] + d1[1]), ss[j * p.R + g + r0], acc0);
    acc1 = fmaf((d0[2] + d0[3]) + (d1[2] + d1[3]), ss[j * p.R + g + r1], acc1);
  }
  if (t == 0) part[warp][gq] = acc0, part[warp][gq + 8] = acc1;
}

// down_group_tc for f8 rows: a tile is 32 columns (the same 16 x 32-byte
// ldmatrix as a bf16 tile), lane (gq, t)'s registers holding row gq / gq + 8,
// columns 4t..4t+3 and 16 + 4t..16 + 4t + 3, each converted to two f16 pairs:
// two mma m16n8k16 whose k runs over those columns in that order, so B (h's
// scaled f16 hi / lo pairs, hp) is read at the same columns. Warps take
// whole groups of 4 tiles (128 columns: one sigma, sexp); a group's sums
// from zero are folded into the slot's (times 1 / sigma) in the middle of
// the next group, when their mmas are done: folded at the group's end, the
// warp waited on them (dots 1.8 against 2.2 us, H200 timeline).
__device__ void down_group_tc8(const BlockParams &p, const uint4 *ds, const uint32_t *hp,
                               const float *ss, const int8_t *sexp, int g, int nr,
                               float (*part)[kRowGroup]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
  const int I = (int)p.I, rowp = I / 16, tiles = I / 32, T = p.k * tiles;
  // a warp's share in whole groups of 4 tiles (a slot is a multiple of 4)
  const int per = ((T + kWarps - 1) / kWarps + 3) & ~3;
  const int q1 = T < (warp + 1) * per ? T : (warp + 1) * per;
  const int ar = g + (lane % 16 < nr ? lane % 16 : nr - 1), ahalf = lane / 16;
  const int r0 = gq < nr ? gq : nr - 1, r1 = gq + 8 < nr ? gq + 8 : nr - 1;
  float acc0 = 0.f, acc1 = 0.f;
  for (int q = warp * per; q < q1;) {
    const int j = q / tiles, qe = q1 < (j + 1) * tiles ? q1 : (j + 1) * tiles;
    const uint32_t a_row = smem_u32(ds + (j * p.R + ar) * rowp);
    const uint32_t *h_slot = hp + j * I + 4 * t + gq;  // + i0: columns 4t, 4t + 1's word
    const int8_t *ex = sexp + j * (I / 128);
    float s0 = 0.f, s1 = 0.f;  // the slot's sums of rows gq, gq + 8
    // The group before's sums (pd, times pinv), folded in after this group's
    // first mmas: by then its own mmas are done.
    float pd[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, pinv = 0.f;
    // A tile's fragments into d0 and d1 (two mma chains).
    auto tile = [&](int i0, float(&d0)[4], float(&d1)[4]) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a_row + 16 * swz_piece(i0 / 16 + ahalf, ar), a);
#pragma unroll
      for (int c = 0; c < 4; c++) b[c] = gq < 2 ? h_slot[i0 + (c / 2) * 16 + (c % 2) * 2] : 0u;
      uint32_t f[8];
#pragma unroll
      for (int r = 0; r < 4; r++) e4m3x4_f16(a[r], f[2 * r], f[2 * r + 1]);
      mma_f16(d0, f[0], f[2], f[1], f[3], b[0], b[1]);  // columns 4t..4t+3, rows gq, gq + 8
      mma_f16(d1, f[4], f[6], f[5], f[7], b[2], b[3]);  // columns 16 + 4t..
    };
#pragma unroll 1
    for (; q < qe; q += 4) {  // a group: 4 tiles, one 1 / sigma
      const int i0 = (q - j * tiles) * 32;
      const float inv = pow2f(-ex[i0 / 128]);
      float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
      tile(i0, d0, d1);
      tile(i0 + 32, d0, d1);
      s0 = fmaf((pd[0] + pd[1]) + (pd[4] + pd[5]), pinv, s0);
      s1 = fmaf((pd[2] + pd[3]) + (pd[6] + pd[7]), pinv, s1);
      tile(i0 + 64, d0, d1);
      tile(i0 + 96, d0, d1);
#pragma unroll
      for (int c = 0; c < 4; c++) pd[c] = d0[c], pd[c + 4] = d1[c];
      pinv = inv;
    }
    s0 = fmaf((pd[0] + pd[1]) + (pd[4] + pd[5]), pinv, s0);
    s1 = fmaf((pd[2] + pd[3]) + (pd[6] + pd[7]), pinv, s1);
    q = qe;
    acc0 = fmaf(s0, ss[j * p.R + g + r0], acc0);
    acc1 = fmaf(s1, ss[j * p.R + g + r1], acc1);
  }
  if (t == 0) part[warp][gq] = acc0, part[warp][gq + 8] = acc1;
}

// TC: bf16 phase 1b on tensor cores (the staged down rows swizzled:
// swz_piece), compiled apart so that each
// kernel carries only the phase 1b it runs. COMPACT: the decode
// geometry of compact(), without the code of the other paths.
template <class WT, bool TC, bool COMPACT>
__global__ void __launch_bounds__(kThreads, 1) moe_block_kernel(BlockParams p) {
  TL_SCOPE(kTlMoeBlock);
  constexpr int VEC = Wfmt<WT>::VEC, LU = 8;  // LU: 16-byte loads per row per lane in flight
  extern __shared__ float4 smem4[];
  float *base = reinterpret_cast<float *>(smem4);
  const Layout L = layout(p.D, p.I, p.E, p.k, p.R, (int)sizeof(WT));
  float *xs = base, *hs = base, *ls = base + L.ls;  // hs over xs from phase 1b
  unsigned long long *keys = reinterpret_cast<unsigned long long *>(base + L.keys);
  float *ss = base + L.ss;
  uint4 *ds = reinterpret_cast<uint4 *>(base + L.ds);
  __shared__ int sid[kMaxK];
  __shared__ float swt[kMaxK];
  constexpr bool TC8 = TC && sizeof(WT) == 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  const int64_t D = p.D, I = p.I, nch = D / VEC, nchI = I / VEC;
  cg::grid_group grid = cg::this_grid();

  // Phase 0: xn staged, the router's logits, the routing.
  uint4 first[COMPACT ? 1 : kRouterLoads], rw[COMPACT ? kNormLoads : 1];
  if constexpr (COMPACT)
    router_pieces(p, rw);
  else
    router_first(p, first);
  float4 nw[kNormLoads];
  norm_weights_first(p.norm, (int)(p.D / 4), kThreads, true, nw);
  // x comes from the kernel before. No pdl_launch_dependents(): the next
  // kernel (the q|k|v GEMV, a PDL dependent) launches as this grid's blocks
  // retire. Let in earlier (here, at either grid sync, or 2.5 us before the
  // end), its blocks took the SMs' spare room beside this kernel and the
  // product ran longer: bf16 decode -2 to -4 % (H200, docs/perf-notes.md,
  // sixteenth session).
  pdl_wait();
  TL_MARK();  // timeline mark 0: the wait is over
  // The residual of this block's first phase-1b output rows, loaded now: its
  // round trip hides under the phases before.
  const int64_t n0 = (int64_t)blockIdx.x * p.R, n1 = n0 + p.R < D ? n0 + p.R : D;
  // (the compact kernel loads it before its staging, the others after:
  // there it would be live across stage_x's and the router's registers)
  float xres0;
  if constexpr (COMPACT) {
    xres0 = tid < kRowGroup && n0 + tid < n1 ? __ldg(p.x + n0 + tid) : 0.f;
    stage_x_logit<VEC>(p, xs, nw, rw);
  } else {
    stage_x<VEC>(p, xs, nw);
    xres0 = tid < kRowGroup && n0 + tid < n1 ? __ldg(p.x + n0 + tid) : 0.f;
    router_logits<VEC>(p, xs, first);
  }
  TL_MARK();  // mark 1: this block's router rows done
  // With a mailbox the blocks wait only for the logits, in route_block
  // (H200, twenty-first session: decode +1.0 % bf16, +0.9 % fp8).
  if (!COMPACT || !p.mail) grid.sync();
  TL_MARK();                                    // mark 2: every router row done
  route_block<COMPACT>(p, ls, keys, sid, swt);  // ids in [0, E): no range checks below
  TL_MARK();  // mark 3: routed

  // This block's output rows [n0, n1) of every chosen expert's down weight
  // (contiguous rows: whole DRAM pages) into shared memory now, for phase 1b.
  const int64_t rowp = nchI;  // 16-byte pieces a down row
  const WT *wd = static_cast<const WT *>(p.wd);
  // Their scales (1: none): the first kThreads loaded now, stored after
  // phase 1a (the round trip hides under it).
  // Each times its slot's routing weight after the second grid sync, when
  // warp 0's weights are seen: phase 1b's one multiply a row.
  auto down_scale = [&](int q) {
    const int j = q / p.R;
    const int64_t n = n0 + (q - j * p.R);
    return p.sd && n < n1 ? __ldg(p.sd + (int64_t)sid[j] * D + n) : 1.f;
  };
  const int nss = p.k * p.R;
  const float ss0 = tid < nss ? down_scale(tid) : 1.f;
  const uint64_t pol = l2_evict_first();  // the experts' rows: read once, their lines go first
  const int rowpi = (int)rowp;   // 16-byte pieces a row (32-bit: they fit in shared memory)
  const PieceWalk walk0(rowpi);  // this thread's first piece
  if (n1 > n0) {
    // Piece-major: a piece's offsets once, then the k experts' copies (expert
    // j's rows are one contiguous run, sid[j] expert matrices on).
    const int per = (int)(n1 - n0) * rowpi;  // pieces an expert
    const int dstep = p.R * rowpi;           // pieces a slot's rows
    const uint32_t ebytes = (uint32_t)(D * I * (int64_t)sizeof(WT));  // host: < 2^32
    const char *src0 = reinterpret_cast<const char *>(wd + n0 * I);
    PieceWalk pw = walk0;  // pw.r the row, pw.c the piece
    for (int g = tid; g < per; g += kThreads, pw.next()) {
      const uint64_t src = reinterpret_cast<uint64_t>(src0 + 16 * (int64_t)g);
      uint4 *dst = ds + pw.r * rowpi + (TC ? swz_piece(pw.c, pw.r) : pw.c);
#pragma unroll 4  // a copy: the slot's expert, one IMAD.WIDE.U32 for the address
      for (int j = 0; j < p.k; j++, dst += dstep)
        cp_async16(dst, reinterpret_cast<const uint4 *>(src + (uint64_t)(uint32_t)sid[j] * ebytes),
                   pol);
    }
  }
  cp_async_commit();
  TL_MARK();  // mark 4: the down rows' copies issued

  // Phase 1a: units (slot j, slice s): h[j][i0, i0 + S) = silu(g) * u.
  const WT *wgu = static_cast<const WT *>(p.wgu);
  for (int u = blockIdx.x; u < p.k * p.slices; u += gridDim.x) {
    const int j = u / p.slices, s = u - j * p.slices, e = sid[j];
    const int64_t i0 = (int64_t)s * p.S, nrows = I - i0 < p.S ? I - i0 : p.S;
    const WT *gate = wgu + ((int64_t)e * 2 * I + i0) * D, *up = gate + I * D;
    for (int64_t r = warp; r < nrows; r += kWarps) {
      const uint4 *g4 = reinterpret_cast<const uint4 *>(gate + r * D);
      const uint4 *u4 = reinterpret_cast<const uint4 *>(up + r * D);
      float ag = 0.f, au = 0.f;
      for (int64_t c0 = lane; c0 < nch; c0 += 32 * LU) {
        uint4 gv[LU], uv[LU];
#pragma unroll
        for (int q = 0; q < LU; q++) {
          const int64_t c = c0 + 32 * q;
          gv[q] = c < nch ? ld_stream(g4 + c, pol) : make_uint4(0, 0, 0, 0);
          uv[q] = c < nch ? ld_stream(u4 + c, pol) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int q = 0; q < LU; q++) {
          const int64_t c = c0 + 32 * q;
          if (c >= nch) break;
#pragma unroll
          for (int pc = 0; pc < VEC / 4; pc++) {
            const float4 xv = *reinterpret_cast<const float4 *>(xs + (pc * nch + c) * 4);
            float fg[4], fu[4];
            Wfmt<WT>::piece(gv[q], pc, fg);
            Wfmt<WT>::piece(uv[q], pc, fu);
            ag = fmaf(fg[0], xv.x, ag), au = fmaf(fu[0], xv.x, au);
            ag = fmaf(fg[1], xv.y, ag), au = fmaf(fu[1], xv.y, au);
            ag = fmaf(fg[2], xv.z, ag), au = fmaf(fu[2], xv.z, au);
            ag = fmaf(fg[3], xv.w, ag), au = fmaf(fu[3], xv.w, au);
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        ag += __shfl_xor_sync(0xffffffffu, ag, o);
        au += __shfl_xor_sync(0xffffffffu, au, o);
      }
      if (lane == 0) {
        const float sg = p.sgu ? p.sgu[(int64_t)e * 2 * I + i0 + r] : 1.f;
        const float su = p.sgu ? p.sgu[(int64_t)e * 2 * I + I + i0 + r] : 1.f;
        __stcg(p.h + (int64_t)j * I + i0 + r, silu(ag * sg) * (au * su));  // as MOE_GATE_UP
      }
    }
  }
  if (tid < nss) ss[tid] = ss0;
  for (int q = tid + kThreads; q < nss; q += kThreads) ss[q] = down_scale(q);
  TL_MARK();    // mark 5: this block's phase 1a done
  grid.sync();  // every h written (xs is free from here: hs shares its space)
  // Every block has read the mailbox (in its routing): left zero for the next call.
  if (COMPACT && p.mail && tid == 0 && (int)blockIdx.x < p.E)
    st_relaxed_u64(p.mail + blockIdx.x, 0);
  TL_MARK();    // mark 6: the second sync
  // The routing weights (route_block): into the scales (each thread its
  // own; phase 1b reads them after the staging's barrier), and out.
  for (int q = tid; q < nss; q += kThreads) ss[q] *= swt[q / p.R];
  if (blockIdx.x == 0)
    for (int j = tid; j < p.k; j += kThreads) p.wout[j] = swt[j], p.ids[j] = sid[j];

  // Phase 1b: h of every slot into shared memory (kHLoads loads in flight a
  // thread: one L2 round trip at Qwen3's shape), as f32 or for the tensor
  // cores as bf16 hi and lo pairs (word 2 P + 0 / 1: pair P's hi / lo); f8 on
  // tensor cores as f16 pairs, each warp's 128 elements (a group) scaled by
  // sigma from their largest finite |h| (sexp). The down rows arrive.
  constexpr int kHLoads = 4;
  const int64_t nh = (int64_t)p.k * I / 4;
  int8_t *sexp = reinterpret_cast<int8_t *>(base + L.sexp);
  for (int64_t q0 = tid; q0 < nh; q0 += kHLoads * kThreads) {
    float4 hv4[kHLoads];
#pragma unroll
    for (int u = 0; u < kHLoads; u++)
      if (q0 + u * kThreads < nh)
        hv4[u] = __ldcg(reinterpret_cast<const float4 *>(p.h) + q0 + u * kThreads);
#pragma unroll
    for (int u = 0; u < kHLoads; u++) {
      const int64_t q = q0 + u * kThreads;  // h[4 q, 4 q + 4): pairs 2 q and 2 q + 1
      if (q >= nh) break;  // uniform across the warp (TC8: I % 128 == 0, nh % 32 == 0)
      if constexpr (TC8) {
        const float4 v = hv4[u];
        const float m = fmaxf(fmaxf(fin_abs(v.x), fin_abs(v.y)), fmaxf(fin_abs(v.z), fin_abs(v.w)));
        const int ex = f8_sigma_exp(__reduce_max_sync(0xffffffffu, __float_as_uint(m)));
        if (lane == 0) sexp[q / 32] = (int8_t)ex;
        const float sg = pow2f(ex);
        uint4 w;
        split_x2<F16x2>(v.x * sg, v.y * sg, w.x, w.y);
        split_x2<F16x2>(v.z * sg, v.w * sg, w.z, w.w);
        reinterpret_cast<uint4 *>(hs)[q] = w;
      } else if (TC) {
        uint4 w;
        split_x2<Bf16x2>(hv4[u].x, hv4[u].y, w.x, w.y);
        split_x2<Bf16x2>(hv4[u].z, hv4[u].w, w.z, w.w);
        reinterpret_cast<uint4 *>(hs)[q] = w;
      } else {
        reinterpret_cast<float4 *>(hs)[q] = hv4[u];
      }
    }
  }
  cp_async_wait_all();
  __syncthreads();
  TL_MARK();  // mark 7: h and the down rows in shared memory
  // kRowGroup output rows at a time, each warp's sums into part, then a
  // block sum a row in a fixed order (deterministic). bf16 on tensor cores
  // (down_group_tc); else a thread per (slot j, piece c) of the k down rows:
  // h is read from shared memory once a group (a warp per row read it once a
  // row, in 4-way bank conflicts for f8), the down rows conflict-free
  // (consecutive pieces).
  __shared__ float part[kWarps][kRowGroup];
  const int pieces = p.k * rowpi, nrows = (int)(n1 - n0);
  for (int g = 0; g < nrows; g += kRowGroup) {
    const int64_t g0 = n0 + g;
    const int nr = nrows - g < kRowGroup ? nrows - g : kRowGroup;
    if constexpr (TC8) {
      down_group_tc8(p, ds, reinterpret_cast<const uint32_t *>(hs), ss, sexp, g, nr, part);
    } else if (TC) {
      down_group_tc(p, ds, reinterpret_cast<const uint32_t *>(hs), ss, g, nr, part);
    } else {
      float acc[kRowGroup];
#pragma unroll
      for (int rr = 0; rr < kRowGroup; rr++) acc[rr] = 0.f;
      PieceWalk pw = walk0;  // pieces of the k down rows: pw.r the slot, pw.c the piece
      for (int f = tid; f < pieces; f += kThreads, pw.next()) {
        float hv[VEC];
#pragma unroll
        for (int pc = 0; pc < VEC / 4; pc++)
          *reinterpret_cast<float4 *>(hv + 4 * pc) =
              *reinterpret_cast<const float4 *>(hs + pw.r * (int)I + pw.c * VEC + 4 * pc);
        const uint4 *dj = ds + (pw.r * p.R + g) * rowpi + pw.c;
        const float *sj = ss + pw.r * p.R + g;
#pragma unroll
        for (int rr = 0; rr < kRowGroup; rr++) {
          if (rr >= nr) break;
          const uint4 v = dj[rr * rowpi];
          float d = 0.f;
#pragma unroll
          for (int pc = 0; pc < VEC / 4; pc++) {
            float wf[4];
            Wfmt<WT>::piece(v, pc, wf);
            d = fmaf(wf[0], hv[4 * pc], d), d = fmaf(wf[1], hv[4 * pc + 1], d);
            d = fmaf(wf[2], hv[4 * pc + 2], d), d = fmaf(wf[3], hv[4 * pc + 3], d);
          }
          acc[rr] = fmaf(d, sj[rr], acc[rr]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kRowGroup; rr++) {
        float v = acc[rr];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) part[warp][rr] = v;
      }
    }
    if (g == 0) TL_MARK();  // mark 8: the first row group's dots
    __syncthreads();
    if (g == 0) TL_MARK();  // mark 9: reduced over the warps
    if (tid < nr) {
      float t = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; w++) t += part[w][tid];
      p.y[g0 + tid] = (g == 0 ? xres0 : p.x[g0 + tid]) + t;
    }
    if (g == 0) TL_MARK();  // mark 10: the first group's rows written
    if (COMPACT) break;     // one group
    __syncthreads();        // part is rewritten by the next group
  }
}

// The geometry: G blocks (<= the SMs: one a SM), R output rows a block (the
// down rows of k experts within the shared memory budget), h slices of S
// rows (a whole number of 16-byte pieces, about one unit a block). False
// when it does not fit.
bool plan(int64_t D, int64_t I, int E, int k, int es, int sms, BlockParams *p, int *grid) {
  const int vec = 16 / es;
  const int64_t R = (D + sms - 1) / sms;
  if (layout(D, I, E, k, (int)R, es).bytes > (int64_t)kSmemBudget) return false;
  int64_t S = (I * k + sms - 1) / sms;
  S = (S + vec - 1) / vec * vec;
  const int slices = (int)((I + S - 1) / S);
  const int64_t nb = (D + R - 1) / R, units = (int64_t)k * slices;
  p->R = (int)R, p->S = (int)S, p->slices = slices;
  *grid = (int)(nb > units ? nb : units);
  return *grid <= sms;
}

// The cooperative launch, or an error code (refused): nothing sticky, the
// caller composes.
template <class WT, bool TC = false, bool COMPACT = false>
cudaError_t launch(const BlockParams &p, int grid, int dev, cudaStream_t s) {
  auto kern = moe_block_kernel<WT, TC, COMPACT>;
  const size_t smem = (size_t)layout(p.D, p.I, p.E, p.k, p.R, (int)sizeof(WT)).bytes;
  // The opt-in above 48 KB, once a device for the largest size asked (a host
  // call per eager step otherwise).
  static std::atomic<size_t> opted[64];
  const bool slot = dev >= 0 && dev < 64;
  if (smem > 48 * 1024 && (!slot || opted[dev].load(std::memory_order_relaxed) < smem)) {
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    if (slot) opted[dev].store(smem, std::memory_order_relaxed);
  }
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 2 : 1;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kern, p);
  if (e != cudaSuccess && cfg.numAttrs == 2) {  // cooperative with PDL refused: without PDL
    cudaGetLastError();
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kern, p);
  }
  return e;
}

// The decode geometry (Qwen3-30B-A3B's): a router row a block, the grouped
// key ranks, one group of phase-1b rows; the kernels of the decode dtypes
// (bf16 on tensor cores, f8) have a compact instantiation for it.
bool compact(const BlockParams &p, int grid) {
  return p.E <= grid && 2 * p.E <= kThreads && p.R <= kRowGroup && p.D <= 4 * kThreads * kNormLoads;
}

// tc: phase 1b on tensor cores (bf16, f8).
cudaError_t launch_dt(int wdt, bool tc, const BlockParams &p, int grid, int dev, cudaStream_t s) {
  const bool c = compact(p, grid);
  switch (wdt) {
    case INGOT_BF16:
      if (!tc) return launch<bf16_t>(p, grid, dev, s);
      return c ? launch<bf16_t, true, true>(p, grid, dev, s)
               : launch<bf16_t, true>(p, grid, dev, s);
    case INGOT_F16:
      return launch<f16_t>(p, grid, dev, s);
    case INGOT_F32:
      return launch<float>(p, grid, dev, s);
    case INGOT_F8E4M3FN:
      if (tc)
        return c ? launch<f8e4m3_t, true, true>(p, grid, dev, s)
                 : launch<f8e4m3_t, true>(p, grid, dev, s);
      return c ? launch<f8e4m3_t, false, true>(p, grid, dev, s) : launch<f8e4m3_t>(p, grid, dev, s);
    default:
      return cudaErrorNotSupported;
  }
}

bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

// in: x, norm, router, gate_up w, its scale, down w, its scale, mailbox (ops_moe.c).
ingot_status k_moe_block(ingot_op_args *a) {
  ingot_tensor *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  const int dev = ingot_device_of(y).index, sms = cuda_coop_sms(dev);
  const ingot_tensor *wgu = a->in[3], *wd = a->in[5], *router = a->in[2];
  const int wdt = ingot_dtype_of(wgu), es = (int)ingot_dtype_size((ingot_dtype)wdt);
  const int rdt = ingot_dtype_of(router), res = (int)ingot_dtype_size((ingot_dtype)rdt);
  const int64_t T = ingot_shape(y)[0], D = ingot_shape(y)[1], I = ingot_shape(wd)[2];
  const int64_t E = ingot_shape(router)[0];
  const int k = (int)a->iarg[0];
  const bool want = !ingot_env_off("INGOT_MOE_BLOCK");  // read per call: 0 the composed kernels
  const bool fits =
      want && sms > 0 && T == 1 && wdt == ingot_dtype_of(wd) && (D * es) % 16 == 0 &&
      (I * es) % 16 == 0 && (D * res) % 16 == 0 && D <= kMaxD && E <= kMaxE && k <= kMaxK &&
      D * I * es < ((int64_t)1 << 32) &&  // an expert's down bytes: 32-bit
      aligned16(ingot_tensor_data(wgu)) && aligned16(ingot_tensor_data(wd)) &&
      aligned16(ingot_tensor_data(router)) && aligned16(ingot_tensor_data(a->in[0])) &&
      aligned16(ingot_tensor_data(a->in[1]));
  if (!fits) return moe_block_compose(a);
  BlockParams p = {};
  int grid = 0;
  if (!plan(D, I, (int)E, k, es, sms, &p, &grid)) return moe_block_compose(a);
  cudaStream_t s = stream_of(y);
  // h [k][I] first (16-byte aligned: float4 reads), then the logits [E]
  float *scratch = (float *)cuda_scratch_alloc(dev, (size_t)(k * I + E) * sizeof(float), s);
  if (!scratch)
    return ingot_last_status() ? ingot_last_status()
                               : ingot_set_error(INGOT_ERR_OOM, "moe_block: out of device memory");
  p.x = (const float *)ingot_tensor_data(a->in[0]);
  p.norm = (const float *)ingot_tensor_data(a->in[1]);
  p.eps = (float)a->farg[0];
  p.router = ingot_tensor_data(router);
  p.r_dt = rdt;
  p.wgu = ingot_tensor_data(wgu);
  p.sgu = a->in[4] ? (const float *)ingot_tensor_data(a->in[4]) : NULL;
  p.wd = ingot_tensor_data(wd);
  p.sd = a->in[6] ? (const float *)ingot_tensor_data(a->in[6]) : NULL;
  p.D = D, p.I = I, p.E = (int)E, p.k = k, p.renorm = a->iarg[1] != 0;
  p.y = (float *)ingot_tensor_data(y);
  p.wout = (float *)ingot_tensor_data(a->out[1]);
  p.ids = (int32_t *)ingot_tensor_data(a->out[2]);
  p.h = scratch, p.logits = scratch + k * I;
  p.mail = a->in[7] ? (unsigned long long *)ingot_tensor_data(a->in[7]) : NULL;
  // bf16 and f8 phase 1b on tensor cores where the down rows are whole
  // 128-byte lines; INGOT_MOE_TC=0 (read per call): f32 FMAs as other dtypes
  const bool tc = (wdt == INGOT_BF16 || wdt == INGOT_F8E4M3FN) && (I * es) % 128 == 0 &&
                  !ingot_env_off("INGOT_MOE_TC");
  cudaError_t e = launch_dt(wdt, tc, p, grid, dev, s);
  cuda_scratch_free(dev, scratch, s);  // stream-ordered: reused only after this launch
  if (e == cudaSuccess) return INGOT_OK;
  cudaGetLastError();  // refused (no cooperative launch, too much shared memory): compose
  return moe_block_compose(a);
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_moe_block)

extern "C" void cuda_register_moe_block(ingot_backend *be) {
  be->kernels[INGOT_OP_MOE_BLOCK] = k_moe_block;
}
