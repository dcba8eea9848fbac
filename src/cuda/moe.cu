// Mixture-of-experts kernels (contracts in src/core/ops_moe.c; the CPU
// reference is src/cpu/moe.c). Nothing here waits for the device or reads
// ids on the host: every launch is on the current stream and capturable.
//
// ROUTE: a warp per token: the row's logits in shared memory as f32, k
//   rounds of a warp arg-max (NaN largest, ties to the lower id), a warp sum
//   of expf(x - max) in a fixed order, lanes write the weights.
// ROUTE with the router (ingot_moe_route_linear), T <= 8, E <= 1024: one
//   cluster of 8 blocks; each owns a contiguous share of the router rows,
//   loads its first batch of them before pdl_wait (weights only), stages x,
//   sums its rows' dots over the block, and writes the logits to block 0's
//   shared memory (distributed shared memory); after the cluster barrier
//   block 0's warp t routes token t (router_split_kernel). Larger: a logits
//   kernel (a warp per logit) into scratch, then the route kernel.
// GATE_UP / DOWN for T <= 8 (decode): expert GEMV kernels that read only the
//   chosen experts' rows with 16-byte streaming loads and f32 accumulation;
//   an expert chosen by several tokens is read once and applied to all of
//   them (dedup over the T*k slot ids, which each block first copies to
//   shared memory). x (gate_up) or h (down) is staged in shared memory as
//   f32, 4 elements a load, in the interleaved layout of gemv.cu (piece q of
//   chunk c at (q*nch + c)*4: conflict-free float4 reads). DRAM is kept busy
//   by L2 bulk prefetches (cp.async.bulk.prefetch: no registers, no wait),
//   not only by the loads a warp's registers can hold.
//   gate_up: a persistent grid (<= 2 blocks per SM); each block stages x
//   once, then each warp walks items of NP row pairs (gate row i, up row
//   I+i; NP = 1, f8: 2, so 16 loads per lane are in flight), h = silu(g)*u
//   in the epilogue. A warp prefetches its next item into L2 while it loads
//   the current one; these rows are read once (L2 evict-first). With a down
//   weight as hint (ingot_moe_experts), each item also prefetches its share
//   of the expert's down rows at normal priority, so the down kernel reads L2.
//   down: a warp per output column n, a block per 8 columns; the block first
//   prefetches its 8 rows of every chosen expert (one contiguous piece per
//   expert), then stages h. The (expert, chunk) pairs of all chosen experts
//   are flattened over the lanes (8 loads per lane in flight); a slot list
//   per expert applies a chunk to every slot that chose it; each token's sum
//   over its k experts is reduced inside the warp (no float atomics:
//   deterministic).
// T > 8 (or staging too large): the T*k (token, slot) pairs are sorted by
//   expert on the device (one block: counts, a scan into offsets and row-tile
//   starts, placement), then a grouped tiled GEMM (32x32 tiles, f32 SIMT)
//   runs over every expert's sorted rows; down writes weighted per-slot rows
//   that a last kernel sums over k in slot order (deterministic).
// A residual (MOE_DOWN nin 6, ingot_moe_experts_add) is added to y by the
//   kernel that writes y (down GEMV epilogue or the sum kernel): no add launch.
// PDL (pdl.cuh): the decode kernels (router cluster, gate_up and down GEMVs)
//   are launched as programmatic dependents. The router asks L2 for its
//   block's router rows before pdl_wait; the expert kernels can touch nothing
//   before it (their rows depend on the ids), so they only wait. Each grid is
//   one wave, so every block lets the next kernel launch right after its wait.
// ROUTE with a norm (ingot_moe_route_linear_norm): the cluster's blocks each
//   reduce the staged x's sums of squares and normalise on the fly as they
//   dot (the old kernel: in shared memory first); the blocks write xn (for
//   the expert kernels) in interleaved shares. The fallback normalises into
//   xn first.
// Out-of-range ids never read out of bounds: their h rows (gate_up) or their
// token's y row (down) are NaN.
#include <cooperative_groups.h>
#include <math.h>

#include "cuda_common.cuh"
#define PDL_FAMILY "moe"
// Off by default: qwen3_moe decode measured 236 tok/s with the moe and gemv
// families plain, 214 with PDL (the early launches crowd these multi-wave
// grids); INGOT_PDL=moe turns it on.
#define PDL_DEFAULT_OFF 1
#include "../core/env.h"
#include "moe_common.cuh"
#include "pdl.cuh"
#include "weight_chunk.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGemvTokens = 8;               // T <= 8 takes the GEMV kernels
constexpr int kGemvSlots = 64;               // ... when T*k <= 64
constexpr size_t kGemvSmem = 200 * 1024;     // ... and the staged rows fit (T 8, k 8, I 768 do)
constexpr int kU = 8;                        // down: 16-byte loads per lane in flight
constexpr int kLoads = 16;                   // gate_up: 16-byte loads per lane in flight
constexpr int kPersistBlocks = 132 * 2;      // gate_up grid: H200 SMs x resident blocks
constexpr int kBM = 32, kBN = 32, kBK = 32;  // grouped GEMM tiles

// ---- routing (route_warp_keys: moe_common.cuh) ----

// A warp per token (blocks of one warp: no barriers, E limited only by shared memory).
template <class T>
__global__ void __launch_bounds__(32)
    route_kernel(const T *logits, int E, int k, bool renorm, float *wout, int32_t *ids) {
  extern __shared__ float rs[];  // E logits as f32
  const int64_t t = blockIdx.x;
  const T *row = logits + t * E;
  for (int e = threadIdx.x; e < E; e += 32) rs[e] = to_acc(row[e]);
  __syncwarp();
  route_warp_keys(rs, E, k, renorm, wout + t * k, ids + t * k);
}

// ---- shared pieces of the expert kernels ----

struct MoeParams {
  const void *a;  // gate_up: x [T, K] of a_dt; down: h f32 [T*k, I]
  int a_dt;
  const void *w;       // [E, rows, cols]
  const float *scale;  // [E, rows] or NULL
  const int32_t *ids;  // [T, k]
  const float *wt;     // routing weights [T, k] (down)
  float *out;          // gate_up: h [T*k, I]; down: y [T, rows]
  const float *res;    // down: [T, rows] added to y, or NULL
  int T, k, E;
  int64_t rows, cols;  // weight rows per expert and the dot length
  bool vec;            // every weight row starts 16-byte aligned (cols*es % 16 == 0)
  const char *next_w;  // gate_up: the down weight read next, or NULL (an L2 prefetch hint)
  int64_t next_bytes;  // bytes of one expert of next_w (a multiple of 16)
};

__device__ __forceinline__ float load_a(const void *p, int dt, int64_t i) {
  switch (dt) {
    case INGOT_BF16:
      return to_acc(static_cast<const bf16_t *>(p)[i]);
    case INGOT_F16:
      return to_acc(static_cast<const f16_t *>(p)[i]);
    default:
      return static_cast<const float *>(p)[i];
  }
}

template <int NT>
__device__ __forceinline__ void warp_sum(float (&v)[NT]) {
#pragma unroll
  for (int r = 0; r < NT; r++)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
}

// Four consecutive elements of a (dtype dt) from index i (a multiple of 4,
// the address 4-element aligned) in one 16-byte (f32) or 8-byte load.
__device__ __forceinline__ float4 load_quad(const void *a, int dt, int64_t i) {
  if (dt == INGOT_F32) return *reinterpret_cast<const float4 *>(static_cast<const float *>(a) + i);
  const uint2 v = *reinterpret_cast<const uint2 *>(static_cast<const uint16_t *>(a) + i);
  if (dt == INGOT_BF16)
    return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                       __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
  const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&v.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&v.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Stages n rows of len elements of a (dtype dt, rows contiguous) into dst as
// f32, row r at dst + r * len, element kk at sidx (interleaved when vec).
// All 8 loads of a batch are issued before any store (a store to shared
// memory would otherwise hold back the next global load). When len % 4 == 0
// and a is aligned, a load is 4 elements (they stay together in the
// interleaved layout: one float4 store): 32 * kThreads elements a batch, so
// x (K 2048) or h (k 8, I 768) takes one batch, about one L2 latency.
template <int VEC>
__device__ void stage_rows(float *dst, const void *a, int dt, int n, int len, bool vec) {
  if (len <= 0) return;
  const int64_t nch = len / VEC;
  const int es = dt == INGOT_F32 ? 4 : 2, G = len % 4 == 0 && (uintptr_t)a % (4 * es) == 0 ? 4 : 1;
  const int64_t total = (int64_t)n * len / G, glen = len / G;  // in groups of G elements
  int r = threadIdx.x / glen, kk = threadIdx.x % glen;         // group of b0 + u * kThreads
  for (int64_t b0 = threadIdx.x; b0 < total; b0 += (int64_t)kThreads * 8) {
    float4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int64_t x = b0 + (int64_t)u * kThreads;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (x < total) {
        if (G == 4)
          v[u] = load_quad(a, dt, 4 * x);
        else
          v[u].x = load_a(a, dt, x);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      if (b0 + (int64_t)u * kThreads < total) {
        float *d = dst + (int64_t)r * len + sidx<VEC>((int64_t)kk * G, nch, vec);
        if (G == 4)
          *reinterpret_cast<float4 *>(d) = v[u];
        else
          *d = v[u].x;
      }
      kk += kThreads;
      while (kk >= glen) kk -= (int)glen, r++;
    }
  }
}

// The slots' expert ids in shared memory: sid[q] = ids[q] for q < T*k (one
// load per thread, then a barrier every thread passes).
__device__ __forceinline__ void load_slot_ids(const MoeParams &p, int *sid) {
  if ((int)threadIdx.x < p.T * p.k) sid[threadIdx.x] = p.ids[threadIdx.x];
  __syncthreads();
}

// ---- gate_up GEMV (T <= 8) ----
// Row pairs (gate i, up I+i) per warp item: f8 rows hold half the chunks of
// bf16 ones, so f8 items take two pairs to keep kLoads loads per lane in flight.
template <class WT>
constexpr int pairs_per_item() {
  return Wfmt<WT>::VEC >= 16 ? 2 : 1;
}

// Items of gate_up: NP row pairs of one slot; item it = (slot it / tiles, pairs
// from (it % tiles) * NP). prefetch_item asks L2 for its gate and up rows.
template <class WT>
__device__ __forceinline__ void prefetch_item(const MoeParams &p, const int *sid, int64_t it,
                                              int64_t nitems, int64_t tiles, uint64_t policy) {
  constexpr int NP = pairs_per_item<WT>();
  if (it >= nitems) return;
  const int s = (int)(it / tiles), e = sid[s];
  if (e < 0 || e >= p.E) return;
  const int64_t I = p.rows / 2, i0 = (it - (int64_t)s * tiles) * NP;
  const int64_t bytes = (I - i0 < NP ? I - i0 : NP) * p.cols * (int64_t)sizeof(WT);
  const WT *wg = static_cast<const WT *>(p.w) + ((int64_t)e * p.rows + i0) * p.cols;
  prefetch_l2(wg, bytes, policy);
  prefetch_l2(wg + I * p.cols, bytes, policy);
}

// Piece `tile` of `tiles` of expert e's down weight (next_w) into L2 at normal
// priority: spread over gate_up's items, so the down kernel reads from L2.
__device__ __forceinline__ void prefetch_next(const MoeParams &p, int e, int64_t tile,
                                              int64_t tiles) {
  const int64_t per = ((p.next_bytes + tiles - 1) / tiles + 15) & ~(int64_t)15;
  const int64_t off = tile * per;
  if (off >= p.next_bytes) return;
  prefetch_l2(p.next_w + (int64_t)e * p.next_bytes + off,
              p.next_bytes - off < per ? p.next_bytes - off : per);
}

// A persistent grid: each block stages x once, then each warp walks items
// it = global warp, + grid warps, ...; one item ahead of the warp is always
// being prefetched into L2 (besides the kLoads loads per lane of the item).
// These rows are read once: evict-first, so that the down rows prefetched
// meanwhile (next_w) stay in L2.
template <class WT, int NT>
__global__ void __launch_bounds__(kThreads) gate_up_gemv(MoeParams p) {
  constexpr int VEC = Wfmt<WT>::VEC, NP = pairs_per_item<WT>(), LU = kLoads / (2 * NP);
  extern __shared__ float4 smem4[];
  float *xs = reinterpret_cast<float *>(smem4);  // [T][K]
  __shared__ int sid[kGemvSlots];
  __shared__ unsigned
      smask[kGemvSlots];  // tokens that chose slot q's expert; 0: an earlier slot has it
  const int nslots = p.T * p.k, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t I = p.rows / 2, K = p.cols, nch = K / VEC;
  const int64_t tiles = (I + NP - 1) / NP, nitems = (int64_t)nslots * tiles;
  const int64_t gw = (int64_t)blockIdx.x * kWarps + warp, gstride = (int64_t)gridDim.x * kWarps;
  pdl_wait();  // the ids and x come from the kernels before
  pdl_launch_dependents();
  load_slot_ids(p, sid);
  if ((int)threadIdx.x < nslots) {
    const int e = sid[threadIdx.x];
    unsigned m = 0;
    bool first = true;
    for (int q = 0; q < nslots; q++)
      if (sid[q] == e) first = first && q >= (int)threadIdx.x, m |= 1u << (q / p.k);
    smask[threadIdx.x] = first ? m : 0u;
  }
  const uint64_t pol = l2_evict_first();
  if (p.vec && lane == 0)
    prefetch_item<WT>(p, sid, gw, nitems, tiles, pol);  // flies while x is staged
  stage_rows<VEC>(xs, p.a, p.a_dt, p.T, (int)K, p.vec);
  __syncthreads();  // the only barrier after the ids'

  const WT *w = static_cast<const WT *>(p.w);
  for (int64_t it = gw; it < nitems; it += gstride) {
    if (p.vec && lane == 0) prefetch_item<WT>(p, sid, it + gstride, nitems, tiles, pol);
    const int s = (int)(it / tiles);
    const unsigned mask = smask[s];
    if (!mask) continue;  // an earlier slot's item does this expert for every token
    const int e = sid[s];
    const int64_t i0 = (it - (int64_t)s * tiles) * NP;
    if (e < 0 || e >= p.E) {  // bad id: NaN rows, nothing read
      for (int q = s + lane; q < nslots; q += 32)
        if (sid[q] == e)
          for (int pp = 0; pp < NP && i0 + pp < I; pp++) p.out[q * I + i0 + pp] = NAN;
      continue;
    }
    if (p.next_w && lane == 0) prefetch_next(p, e, it - (int64_t)s * tiles, tiles);
    const WT *wg = w + ((int64_t)e * p.rows + i0) * K;  // gate row i0 + pp at wg + pp * K
    const WT *wu = wg + I * K;
    float ag[NP][NT], au[NP][NT];
#pragma unroll
    for (int pp = 0; pp < NP; pp++)
#pragma unroll
      for (int r = 0; r < NT; r++) ag[pp][r] = au[pp][r] = 0.f;
    if (p.vec) {
      for (int64_t c0 = lane; c0 < nch; c0 += 32 * LU) {
        uint4 g[NP][LU], u[NP][LU];
#pragma unroll
        for (int pp = 0; pp < NP; pp++)
#pragma unroll
          for (int uu = 0; uu < LU; uu++) {
            const int64_t c = c0 + (int64_t)uu * 32;
            const bool ok = c < nch && i0 + pp < I;
            g[pp][uu] = ok ? ld_stream(reinterpret_cast<const uint4 *>(wg + pp * K) + c, pol)
                           : make_uint4(0, 0, 0, 0);
            u[pp][uu] = ok ? ld_stream(reinterpret_cast<const uint4 *>(wu + pp * K) + c, pol)
                           : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
        for (int uu = 0; uu < LU; uu++) {
          const int64_t c = c0 + (int64_t)uu * 32;
          if (c >= nch) break;
#pragma unroll
          for (int q = 0; q < VEC / 4; q++) {
            float4 xv[NT];
#pragma unroll
            for (int r = 0; r < NT; r++)
              if (mask >> r & 1)
                xv[r] = *reinterpret_cast<const float4 *>(xs + r * K + (q * nch + c) * 4);
#pragma unroll
            for (int pp = 0; pp < NP; pp++) {
              float fg[4], fu[4];
              Wfmt<WT>::piece(g[pp][uu], q, fg);
              Wfmt<WT>::piece(u[pp][uu], q, fu);
#pragma unroll
              for (int r = 0; r < NT; r++) {
                if (!(mask >> r & 1)) continue;
                ag[pp][r] = fmaf(fg[0], xv[r].x, ag[pp][r]),
                au[pp][r] = fmaf(fu[0], xv[r].x, au[pp][r]);
                ag[pp][r] = fmaf(fg[1], xv[r].y, ag[pp][r]),
                au[pp][r] = fmaf(fu[1], xv[r].y, au[pp][r]);
                ag[pp][r] = fmaf(fg[2], xv[r].z, ag[pp][r]),
                au[pp][r] = fmaf(fu[2], xv[r].z, au[pp][r]);
                ag[pp][r] = fmaf(fg[3], xv[r].w, ag[pp][r]),
                au[pp][r] = fmaf(fu[3], xv[r].w, au[pp][r]);
              }
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int pp = 0; pp < NP; pp++) {
        if (i0 + pp >= I) break;
        for (int64_t kk = lane; kk < K; kk += 32) {
          const float fg = to_acc(wg[pp * K + kk]), fu = to_acc(wu[pp * K + kk]);
#pragma unroll
          for (int r = 0; r < NT; r++) {
            if (!(mask >> r & 1)) continue;
            const float xv = xs[r * K + kk];
            ag[pp][r] = fmaf(fg, xv, ag[pp][r]), au[pp][r] = fmaf(fu, xv, au[pp][r]);
          }
        }
      }
    }
#pragma unroll
    for (int pp = 0; pp < NP; pp++) warp_sum<NT>(ag[pp]), warp_sum<NT>(au[pp]);
    if (lane != 0) continue;
#pragma unroll
    for (int pp = 0; pp < NP; pp++) {
      const int64_t i = i0 + pp;
      if (i >= I) break;
      const float sg = p.scale ? p.scale[(int64_t)e * p.rows + i] : 1.f;
      const float su = p.scale ? p.scale[(int64_t)e * p.rows + I + i] : 1.f;
      for (int q = s; q < nslots; q++) {
        if (sid[q] != e) continue;
        const int t = q / p.k;
        float gv = 0.f, uv = 0.f;
#pragma unroll
        for (int r = 0; r < NT; r++)
          if (r == t) gv = ag[pp][r], uv = au[pp][r];
        p.out[q * I + i] = silu(gv * sg) * (uv * su);
      }
    }
  }
}

// ---- down GEMV (T <= 8) ----
// A warp per output column n; each block's 8 columns of every chosen expert
// are asked of L2 (one bulk prefetch per expert) before h is staged, so the
// block's whole share of the weights is on its way after one id load.
template <class WT, int NT>
__global__ void __launch_bounds__(kThreads) down_gemv(MoeParams p) {
  constexpr int VEC = Wfmt<WT>::VEC;
  extern __shared__ float4 smem4[];
  float *hs = reinterpret_cast<float *>(smem4);  // [T*k][I]
  __shared__ int sid[kGemvSlots];
  __shared__ int sflag[kGemvSlots];  // 1: slot q is the first of a valid expert
  __shared__ int snext[kGemvSlots];  // next slot with q's expert, or -1
  __shared__ int stok[kGemvSlots];   // q / k
  __shared__ float swt[kGemvSlots];  // routing weight of slot q
  __shared__ int uniq[kGemvSlots];   // distinct valid experts in first-slot order
  __shared__ int uhead[kGemvSlots];  // first slot of uniq[v]
  const int nslots = p.T * p.k, tid = threadIdx.x;
  const int64_t I = p.cols, H = p.rows, n0 = (int64_t)blockIdx.x * kWarps;
  const int nch = (int)(I / VEC);
  const WT *w = static_cast<const WT *>(p.w);
  pdl_wait();  // the ids, weights and h come from the kernels before
  pdl_launch_dependents();
  load_slot_ids(p, sid);
  if (tid < nslots) {
    const int e = sid[tid];
    bool first = true;
    int nx = -1;
    for (int q = nslots - 1; q >= 0; q--)
      if (sid[q] == e) {
        if (q < tid) first = false;
        if (q > tid) nx = q;
      }
    const bool valid = e >= 0 && e < p.E;
    sflag[tid] = valid && first;
    snext[tid] = nx;
    stok[tid] = tid / p.k;
    swt[tid] = p.wt[tid];
    if (valid && first && p.vec) {
      const int64_t cols = H - n0 < kWarps ? H - n0 : kWarps;
      prefetch_l2(w + ((int64_t)e * H + n0) * I, cols * I * (int64_t)sizeof(WT));
    }
  }
  stage_rows<VEC>(hs, p.a, INGOT_F32, nslots, (int)I, p.vec);
  __syncthreads();
  int nu = 0;  // every thread counts the distinct experts; slot tid's rank among them
  for (int q = 0; q < nslots; q++) {
    if (q == tid && sflag[q]) uniq[nu] = sid[q], uhead[nu] = q;
    nu += sflag[q];
  }
  __syncthreads();  // the last barrier
  const int warp = tid / 32, lane = tid % 32;
  const int64_t n = n0 + warp;
  if (n >= H) return;
  float acc[NT];
#pragma unroll
  for (int r = 0; r < NT; r++) acc[r] = 0.f;

  if (p.vec) {
    // (expert v, chunk c) pairs flattened over the lanes: lane l starts at
    // pair l and steps by 32, kU loads in flight.
    const int total = nu * nch;
    int v = lane / nch, c = lane % nch;
    for (int f0 = 0; f0 < total; f0 += 32 * kU) {
      uint4 wv[kU];
      int vu[kU], cu[kU];
#pragma unroll
      for (int uu = 0; uu < kU; uu++) {
        vu[uu] = v, cu[uu] = c;
        wv[uu] =
            v < nu
                ? ld_stream(reinterpret_cast<const uint4 *>(w + ((int64_t)uniq[v] * H + n) * I) + c)
                : make_uint4(0, 0, 0, 0);
        c += 32;
        while (c >= nch) c -= nch, v++;
      }
#pragma unroll
      for (int uu = 0; uu < kU; uu++) {
        if (vu[uu] >= nu) break;
        float wf[VEC];
#pragma unroll
        for (int q = 0; q < VEC / 4; q++) Wfmt<WT>::piece(wv[uu], q, wf + 4 * q);
        const float sc = p.scale ? p.scale[(int64_t)uniq[vu[uu]] * H + n] : 1.f;
        for (int q = uhead[vu[uu]]; q >= 0; q = snext[q]) {
          const float *hq = hs + (int64_t)q * I + cu[uu] * 4;
          float d = 0.f;
#pragma unroll
          for (int qq = 0; qq < VEC / 4; qq++) {
            const float4 hv = *reinterpret_cast<const float4 *>(hq + (int64_t)qq * nch * 4);
            d = fmaf(wf[4 * qq], hv.x, d), d = fmaf(wf[4 * qq + 1], hv.y, d);
            d = fmaf(wf[4 * qq + 2], hv.z, d), d = fmaf(wf[4 * qq + 3], hv.w, d);
          }
          const int t = stok[q];
          const float add = swt[q] * (d * sc);
#pragma unroll
          for (int r = 0; r < NT; r++)
            if (r == t) acc[r] += add;
        }
      }
    }
  } else {
    for (int v = 0; v < nu; v++) {
      const int64_t e = uniq[v];
      const WT *row = w + (e * H + n) * I;
      const float sc = p.scale ? p.scale[e * H + n] : 1.f;
      for (int q = uhead[v]; q >= 0; q = snext[q]) {
        float d = 0.f;
        for (int64_t kk = lane; kk < I; kk += 32) d = fmaf(to_acc(row[kk]), hs[q * I + kk], d);
        const int t = stok[q];
        const float add = swt[q] * (d * sc);
#pragma unroll
        for (int r = 0; r < NT; r++)
          if (r == t) acc[r] += add;
      }
    }
  }
  warp_sum<NT>(acc);
  if (lane != 0) return;
  for (int t = 0; t < p.T; t++) {
    float v = 0.f;
#pragma unroll
    for (int r = 0; r < NT; r++)
      if (r == t) v = acc[r];
    for (int j = 0; j < p.k; j++) {
      const int e = sid[t * p.k + j];
      if (e < 0 || e >= p.E) v = NAN;
    }
    p.out[t * H + n] = p.res ? p.res[t * H + n] + v : v;
  }
}

// ---- router linear + routing (MOE_ROUTE with nin 2) ----

struct RouterParams {
  const void *x;  // [T, D] of x_dt
  int x_dt;
  const void *w;  // router [E, D]
  int T, E, k;
  int64_t D;
  bool renorm, vec;   // vec: router rows 16-byte aligned
  float *wout;        // [T, k]
  int32_t *ids;       // [T, k]
  const float *norm;  // RMS norm weight [D] applied to x first (x f32), or NULL
  float eps;
  float *xn;  // with norm: the normalised x [T, D] f32 (an output)
};

// The fallback's norm (T > 8 or E > 1024): a block per row of x into xn, the
// same formula (its sum of squares in another order).
__global__ void __launch_bounds__(kThreads)
    norm_rows_kernel(const float *x, const float *norm, float eps, int64_t D, float *xn) {
  __shared__ float part[kWarps];
  const float *row = x + (int64_t)blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += kThreads) ss = fmaf(row[i], row[i], ss);
  const float inv = block_inv_rms(ss, part, kWarps, (float)D, eps);
  for (int64_t i = threadIdx.x; i < D; i += kThreads)
    xn[(int64_t)blockIdx.x * D + i] = __fmul_rn(__fmul_rn(row[i], inv), norm[i]);
}

constexpr int kCluster = 8;         // blocks of the router cluster (the portable maximum)
constexpr int kClusterMaxE = 1024;  // its logits [T, E] live in block 0's shared memory

// ---- the router cluster (T <= 8, E <= 1024) ----
// Its first version's time went to serial steps before any weight byte moved:
// ids of the weights only after x was staged and normalised (a warp-serial
// sum of squares, int64 index maths) and a cluster barrier. Here each block
// of the cluster owns a contiguous share of the router rows and issues its
// first batch of 16-byte loads (all of them at the qwen shape: 16 rows x one
// chunk a thread, 64 KB a block) BEFORE pdl_wait: the weights are immutable,
// so their DRAM latency hides behind the kernel before. x is then staged,
// the norm's sums of squares are block reductions, the normalised x is made
// on the fly from the staged x (same rounding as RMS_NORM: (x * inv) * w),
// and the block sums its rows' dots in shared memory before writing the
// logits into block 0 (distributed shared memory).

// Router rows of one load batch (one chunk a thread each): fewer when there
// are more tokens, to bound the accumulators (rows x tokens) in registers.
template <int NT>
constexpr int split_rows() {
  return NT == 1 ? 16 : NT == 2 ? 8 : 4;
}

// Batch b of a block's rows [e0, e1): row group b / steps (RB rows from
// e0 + group * RB), chunk (b % steps) * kThreads + thread. Loads v[r] (zero
// where past the rows or the chunks). vec only.
template <class WT, int RB>
__device__ __forceinline__ void split_load(const RouterParams &p, int e0, int e1, int64_t nch,
                                           int64_t steps, int64_t b, uint4 (&v)[RB]) {
  const int64_t g = b / steps, c = (b - g * steps) * kThreads + threadIdx.x;
  const WT *w = static_cast<const WT *>(p.w);
#pragma unroll
  for (int r = 0; r < RB; r++) {
    const int64_t e = e0 + g * RB + r;
    v[r] = e < e1 && c < nch ? ld_stream(reinterpret_cast<const uint4 *>(w + e * p.D) + c)
                             : make_uint4(0, 0, 0, 0);
  }
}

// 1 / rms of each staged token row (any order of the row: a permutation of
// it), as the RMS_NORM kernel: 1 / sqrtf(ss / D + eps). Every thread calls it.
template <int NT>
__device__ void staged_inv(const float *xs, const RouterParams &p, float *inv) {
  __shared__ float part[kWarps][NT];
  float ss[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) {
    ss[t] = 0.f;
    if (t < p.T)
      for (int64_t i = threadIdx.x; i < p.D; i += kThreads)
        ss[t] = fmaf(xs[t * p.D + i], xs[t * p.D + i], ss[t]);
  }
  warp_sum<NT>(ss);
  if (threadIdx.x % 32 == 0)
#pragma unroll
    for (int t = 0; t < NT; t++) part[threadIdx.x / 32][t] = ss[t];
  __syncthreads();
  if ((int)threadIdx.x < p.T) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; w++) s += part[w][threadIdx.x];
    inv[threadIdx.x] = inv_rms(s, (float)p.D, p.eps);
  }
  __syncthreads();
}

template <class WT, int NT>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    router_split_kernel(RouterParams p) {
  constexpr int VEC = Wfmt<WT>::VEC, RB = split_rows<NT>();
  extern __shared__ float4 smem4[];
  float *xs = reinterpret_cast<float *>(smem4);  // [T][D]
  float *lg = xs + p.T * p.D;                    // [T][E] (block 0's are used)
  __shared__ float red[kWarps][RB * NT];
  __shared__ float inv[NT];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = (int)cluster.block_rank(), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *lg0 = cluster.map_shared_rank(lg, 0);
  const int rpb = (p.E + kCluster - 1) / kCluster, e0 = min(p.E, rank * rpb),
            e1 = min(p.E, e0 + rpb);
  const int64_t D = p.D, nch = p.vec ? D / VEC : D, steps = (nch + kThreads - 1) / kThreads;
  const int64_t nb = (int64_t)((e1 - e0 + RB - 1) / RB) * steps;
  uint4 v[RB];
  if (p.vec) {  // weights only before pdl_wait
    if (threadIdx.x == 0 && e1 > e0 && nb > 1)
      prefetch_l2(static_cast<const WT *>(p.w) + (int64_t)e0 * D,
                  (int64_t)(e1 - e0) * D * (int64_t)sizeof(WT));
    if (nb > 0) split_load<WT, RB>(p, e0, e1, nch, steps, 0, v);
  }
  pdl_wait();  // x comes from the kernel before
  pdl_launch_dependents();
  stage_rows<VEC>(xs, p.x, p.x_dt, p.T, (int)D, p.vec);
  __syncthreads();  // x staged
  if (p.norm) {
    staged_inv<NT>(xs, p, inv);
    // xn, natural order, the cluster's blocks taking interleaved shares.
    for (int i = rank * kThreads + threadIdx.x; i < p.T * (int)D; i += kCluster * kThreads) {
      const int t = i / (int)D, kk = i - t * (int)D;
      p.xn[i] = __fmul_rn(__fmul_rn(xs[t * D + sidx<VEC>(kk, nch, p.vec)], inv[t]), p.norm[kk]);
    }
  }
  cluster.sync();  // every block of the cluster running before any remote write
  float acc[RB][NT] = {};
  for (int64_t b = 0; b < nb; b++) {
    const int64_t g = b / steps, cs = b - g * steps, c = cs * kThreads + threadIdx.x;
    if (cs == 0)
#pragma unroll
      for (int r = 0; r < RB; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.f;
    if (p.vec) {
      if (b > 0) split_load<WT, RB>(p, e0, e1, nch, steps, b, v);
      if (c < nch)
#pragma unroll
        for (int q = 0; q < VEC / 4; q++)
#pragma unroll
          for (int t = 0; t < NT; t++) {
            if (t >= p.T) break;
            float4 xv = *reinterpret_cast<const float4 *>(xs + t * D + (q * nch + c) * 4);
            if (p.norm) {
              const float *nw = p.norm + c * VEC + q * 4;  // scalar loads: any alignment
              xv.x = __fmul_rn(__fmul_rn(xv.x, inv[t]), nw[0]);
              xv.y = __fmul_rn(__fmul_rn(xv.y, inv[t]), nw[1]);
              xv.z = __fmul_rn(__fmul_rn(xv.z, inv[t]), nw[2]);
              xv.w = __fmul_rn(__fmul_rn(xv.w, inv[t]), nw[3]);
            }
#pragma unroll
            for (int r = 0; r < RB; r++) {
              float f[4];
              Wfmt<WT>::piece(v[r], q, f);
              acc[r][t] = fmaf(f[0], xv.x, acc[r][t]), acc[r][t] = fmaf(f[1], xv.y, acc[r][t]);
              acc[r][t] = fmaf(f[2], xv.z, acc[r][t]), acc[r][t] = fmaf(f[3], xv.w, acc[r][t]);
            }
          }
    } else if (c < nch) {  // scalar: chunk c is element c
      const WT *w = static_cast<const WT *>(p.w);
#pragma unroll
      for (int r = 0; r < RB; r++) {
        const int64_t e = e0 + g * RB + r;
        if (e >= e1) break;
        const float wv = to_acc(w[e * D + c]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
          if (t >= p.T) break;
          float xv = xs[t * D + c];
          if (p.norm) xv = __fmul_rn(__fmul_rn(xv, inv[t]), p.norm[c]);
          acc[r][t] = fmaf(wv, xv, acc[r][t]);
        }
      }
    }
    if (cs != steps - 1) continue;
      // The group's dots: warp sums, then the warps' partials in a fixed order.
#pragma unroll
    for (int r = 0; r < RB; r++) warp_sum<NT>(acc[r]);
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < RB; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) red[warp][r * NT + t] = acc[r][t];
    __syncthreads();
    if ((int)threadIdx.x < RB * NT) {
      const int r = threadIdx.x / NT, t = threadIdx.x % NT;
      const int64_t e = e0 + g * RB + r;
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; w++) s += red[w][threadIdx.x];
      if (t < p.T && e < e1) lg0[t * p.E + e] = s;
    }
    __syncthreads();  // red is reused by the next group
  }
  cluster.sync();  // every logit written and visible to block 0
  if (rank != 0 || warp >= p.T) return;
  route_warp_keys(lg + warp * p.E, p.E, p.k, p.renorm, p.wout + warp * p.k, p.ids + warp * p.k);
}

// Any T or E: a warp per (token, expert) logit into logits [T, E] f32; the
// route kernel follows.
template <class WT>
__global__ void __launch_bounds__(kThreads) router_logits_kernel(RouterParams p, float *logits) {
  const int lane = threadIdx.x % 32;
  const WT *w = static_cast<const WT *>(p.w);
  const int64_t n = (int64_t)p.T * p.E;
  for (int64_t o = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; o < n;
       o += (int64_t)gridDim.x * kWarps) {
    const int64_t t = o / p.E, e = o - t * p.E;
    float d = 0.f;
    for (int64_t kk = lane; kk < p.D; kk += 32)
      d = fmaf(to_acc(w[e * p.D + kk]), load_a(p.x, p.x_dt, t * p.D + kk), d);
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) d += __shfl_xor_sync(0xffffffffu, d, s);
    if (lane == 0) logits[o] = d;
  }
}

// ---- T > 8: sort slots by expert, grouped tiled GEMM ----

struct Groups {
  int *offsets;     // [E + 1]: sorted rows of expert e are [offsets[e], offsets[e+1])
  int *tile_start;  // [E + 1]: row tiles of expert e are [tile_start[e], tile_start[e+1])
  int *sorted;      // [N]: slot of each sorted row
};

// One block: counts per expert, a scan, placement. Rows of bad ids are left
// out; when nan_out is set, their nan_len-long rows there become NaN.
__global__ void __launch_bounds__(1024)
    sort_kernel(const int32_t *ids, int N, int E, Groups g, float *nan_out, int64_t nan_len) {
  extern __shared__ int cnt[];  // [E]: counts, then placement cursors
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < N; s += blockDim.x) {
    const int e = ids[s];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int off = 0, tiles = 0;
    for (int e = 0; e < E; e++) {
      const int c = cnt[e];
      g.offsets[e] = cnt[e] = off;
      g.tile_start[e] = tiles;
      off += c;
      tiles += (c + kBM - 1) / kBM;
    }
    g.offsets[E] = off;
    g.tile_start[E] = tiles;
  }
  __syncthreads();
  for (int s = threadIdx.x; s < N; s += blockDim.x) {
    const int e = ids[s];
    if (e >= 0 && e < E)
      g.sorted[atomicAdd(&cnt[e], 1)] = s;
    else if (nan_out)
      for (int64_t x = 0; x < nan_len; x++) nan_out[s * nan_len + x] = NAN;
  }
}

// C[rows of one expert's tile, kBN columns] = A rows . W_e rows^T. GATE: the
// block computes gate columns n and up columns I + n and writes silu(g) * u
// to out [N, I]; else it writes wt[slot] * acc to the per-slot rows of out
// [N, rows]. Scales multiply their output channel.
template <class WT, bool GATE>
__global__ void __launch_bounds__(kThreads) grouped_kernel(MoeParams p, Groups g) {
  constexpr int NB = GATE ? 2 : 1;
  __shared__ float As[kBK][kBM + 1];
  __shared__ float Bs[NB][kBK][kBN + 1];
  const int bx = blockIdx.x;
  if (bx >= g.tile_start[p.E]) return;
  int lo = 0, hi = p.E;  // the expert e with tile_start[e] <= bx < tile_start[e + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (g.tile_start[mid] <= bx)
      lo = mid;
    else
      hi = mid;
  }
  const int e = lo;
  const int r0 = g.offsets[e] + (bx - g.tile_start[e]) * kBM, rend = g.offsets[e + 1];
  const int64_t ncol = GATE ? p.rows / 2 : p.rows, KR = p.cols, n0 = (int64_t)blockIdx.y * kBN;
  const WT *w = static_cast<const WT *>(p.w) + (int64_t)e * p.rows * KR;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[NB][2][2] = {};
  for (int64_t k0 = 0; k0 < KR; k0 += kBK) {
    for (int l = threadIdx.x; l < kBM * kBK; l += kThreads) {
      const int r = l / kBK, kk = l % kBK;
      float v = 0.f;
      if (r0 + r < rend && k0 + kk < KR) {
        const int64_t slot = g.sorted[r0 + r];
        const int64_t arow = GATE ? slot / p.k : slot;
        v = load_a(p.a, p.a_dt, arow * KR + k0 + kk);
      }
      As[kk][r] = v;
    }
#pragma unroll
    for (int b = 0; b < NB; b++)
      for (int l = threadIdx.x; l < kBN * kBK; l += kThreads) {
        const int c = l / kBK, kk = l % kBK;
        const int64_t col = n0 + c;
        Bs[b][kk][c] =
            col < ncol && k0 + kk < KR ? to_acc(w[(col + (b ? ncol : 0)) * KR + k0 + kk]) : 0.f;
      }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; kk++) {
      const float a0 = As[kk][ty * 2], a1 = As[kk][ty * 2 + 1];
#pragma unroll
      for (int b = 0; b < NB; b++) {
        const float b0 = Bs[b][kk][tx * 2], b1 = Bs[b][kk][tx * 2 + 1];
        acc[b][0][0] = fmaf(a0, b0, acc[b][0][0]), acc[b][0][1] = fmaf(a0, b1, acc[b][0][1]);
        acc[b][1][0] = fmaf(a1, b0, acc[b][1][0]), acc[b][1][1] = fmaf(a1, b1, acc[b][1][1]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int row = r0 + ty * 2 + i;
    if (row >= rend) continue;
    const int64_t slot = g.sorted[row];
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int64_t col = n0 + tx * 2 + j;
      if (col >= ncol) continue;
      const float s0 = p.scale ? p.scale[(int64_t)e * p.rows + col] : 1.f;
      if (GATE) {
        const float s1 = p.scale ? p.scale[(int64_t)e * p.rows + ncol + col] : 1.f;
        p.out[slot * ncol + col] = silu(acc[0][i][j] * s0) * (acc[NB - 1][i][j] * s1);
      } else {
        p.out[slot * ncol + col] = p.wt[slot] * (acc[0][i][j] * s0);
      }
    }
  }
}

// y[t, n] = sum over j (in order) of part[t*k + j, n] (+ res[t, n] when res);
// NaN when an id of t is bad. k = 0: y = res + 0 (part is not read).
__global__ void sum_slots_kernel(const float *part, const int32_t *ids, int k, int E, int64_t T,
                                 int64_t H, const float *res, float *y) {
  CUDA_GRID_STRIDE(o, T * H) {
    const int64_t t = o / H, n = o - t * H;
    float v = 0.f;
    for (int j = 0; j < k; j++) {
      const int e = ids[t * k + j];
      v += e >= 0 && e < E ? part[(t * k + j) * H + n] : NAN;
    }
    y[o] = res ? res[o] + v : v;
  }
}

// ---- host side ----

int pow2_tokens(int T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8; }

template <class K>
ingot_status launch_smem(K kern, dim3 grid, size_t smem, cudaStream_t s, const MoeParams &p,
                         const char *what) {
  if (smem > 48 * 1024) {
    ingot_status st = cuda_check(
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), what);
    if (st) return st;
  }
  return cuda_check(launch_pdl(kern, grid, dim3(kThreads), smem, s, p), what);
}

// gate_up: a persistent grid (at most kPersistBlocks, each warp walks items);
// down: a block per kWarps output columns.
template <class WT>
ingot_status gemv_launch(bool gate, const MoeParams &p, size_t smem, cudaStream_t s) {
  const char *what = gate ? "moe_gate_up kernel" : "moe_down kernel";
  constexpr int NP = pairs_per_item<WT>();
  const int64_t nitems = (int64_t)p.T * p.k * ((p.rows / 2 + NP - 1) / NP);
  int64_t blocks = gate ? (nitems + kWarps - 1) / kWarps : (p.rows + kWarps - 1) / kWarps;
  if (gate && blocks > kPersistBlocks) blocks = kPersistBlocks;
  const dim3 grid((unsigned)blocks);
  switch (pow2_tokens(p.T)) {
    case 1:
      return launch_smem(gate ? gate_up_gemv<WT, 1> : down_gemv<WT, 1>, grid, smem, s, p, what);
    case 2:
      return launch_smem(gate ? gate_up_gemv<WT, 2> : down_gemv<WT, 2>, grid, smem, s, p, what);
    case 4:
      return launch_smem(gate ? gate_up_gemv<WT, 4> : down_gemv<WT, 4>, grid, smem, s, p, what);
    default:
      return launch_smem(gate ? gate_up_gemv<WT, 8> : down_gemv<WT, 8>, grid, smem, s, p, what);
  }
}

template <class WT>
ingot_status grouped_launch(bool gate, const MoeParams &p, const Groups &g, dim3 grid,
                            cudaStream_t s) {
  if (gate)
    grouped_kernel<WT, true><<<grid, kThreads, 0, s>>>(p, g);
  else
    grouped_kernel<WT, false><<<grid, kThreads, 0, s>>>(p, g);
  return launch_status(gate ? "moe_gate_up grouped kernel" : "moe_down grouped kernel");
}

#define MOE_WEIGHT_CASES(DT, ...)                                               \
  switch (DT) {                                                                 \
    CUDA_CASE(INGOT_BF16, bf16_t, __VA_ARGS__)                                  \
    CUDA_CASE(INGOT_F16, f16_t, __VA_ARGS__)                                    \
    CUDA_CASE(INGOT_F32, float, __VA_ARGS__)                                    \
    CUDA_CASE(INGOT_F8E4M3FN, f8e4m3_t, __VA_ARGS__)                            \
    default:                                                                    \
      return ingot_set_error(INGOT_ERR_DTYPE, "moe: unsupported weight dtype"); \
  }

// The common part of gate_up (gate = true) and down: GEMV or sort + grouped GEMM.
ingot_status run_experts(bool gate, MoeParams p, const ingot_tensor *w, int64_t out_cols,
                         int64_t stage_rows) {
  const int dev = ingot_device_of(w).index;
  ingot_status st = cuda_use_device(dev);
  if (st) return st;
  cudaStream_t s = cuda_current_stream(dev);
  const ingot_dtype wdt = ingot_dtype_of(w);
  const int64_t es = (int64_t)ingot_dtype_size(wdt);
  p.vec = (p.cols * es) % 16 == 0 && ((uintptr_t)p.w % 16) == 0;
  const int N = p.T * p.k;
  const size_t smem = (size_t)stage_rows * (size_t)p.cols * sizeof(float);
  if (p.T <= kGemvTokens && N <= kGemvSlots && smem <= kGemvSmem) {
    MOE_WEIGHT_CASES(wdt, return gemv_launch<scalar_t>(gate, p, smem, s))
  }
  const int64_t H = p.rows;  // down: per-slot rows [N, H] before the sum over k
  size_t ints = (size_t)(2 * (p.E + 1) + N);
  int *scratch = (int *)cuda_scratch_alloc(dev, ints * sizeof(int), s);
  float *part = gate ? NULL : (float *)cuda_scratch_alloc(dev, (size_t)N * H * sizeof(float), s);
  if (!scratch || (!gate && !part)) {
    cuda_scratch_free(dev, scratch, s);
    cuda_scratch_free(dev, part, s);
    return ingot_last_status() ? ingot_last_status()
                               : ingot_set_error(INGOT_ERR_OOM, "moe: out of device memory");
  }
  Groups g = {scratch, scratch + p.E + 1, scratch + 2 * (p.E + 1)};
  float *y = p.out;
  sort_kernel<<<1, 1024, (size_t)p.E * sizeof(int), s>>>(p.ids, N, p.E, g, gate ? p.out : NULL,
                                                         gate ? out_cols : 0);
  st = launch_status("moe sort kernel");
  if (!st) {
    if (!gate) p.out = part;
    dim3 grid((unsigned)((N + kBM - 1) / kBM + p.E), (unsigned)((out_cols + kBN - 1) / kBN));
    st = [&]() -> ingot_status {
      MOE_WEIGHT_CASES(wdt, return grouped_launch<scalar_t>(gate, p, g, grid, s))
      return INGOT_OK;
    }();
  }
  if (!st && !gate) {
    sum_slots_kernel<<<grid_for((int64_t)p.T * H, kThreads), kThreads, 0, s>>>(
        part, p.ids, p.k, p.E, p.T, H, p.res, y);
    st = launch_status("moe_down sum kernel");
  }
  cuda_scratch_free(dev, scratch, s);
  cuda_scratch_free(dev, part, s);
  return st;
}

// MOE_ROUTE with nin 2: the router cluster at decode, else logits into scratch
// and the route kernel.
template <class WT>
ingot_status route_linear(const RouterParams &p, int dev, cudaStream_t s) {
  const size_t smem = ((size_t)p.T * (size_t)p.D + (size_t)p.T * p.E) * sizeof(float);
  if (p.T <= kGemvTokens && p.E <= kClusterMaxE && smem <= kGemvSmem) {
    const int nt = pow2_tokens(p.T);
    void (*kern)(RouterParams) = nt == 1   ? router_split_kernel<WT, 1>
                                 : nt == 2 ? router_split_kernel<WT, 2>
                                 : nt == 4 ? router_split_kernel<WT, 4>
                                           : router_split_kernel<WT, 8>;
    if (smem > 48 * 1024) {
      ingot_status st = cuda_check(
          cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
          "moe_route_linear kernel");
      if (st) return st;
    }
    // Its own PDL family, on by default (the moe family's expert kernels are
    // off): its first weight loads then fly under the kernel before (H200:
    // qwen3_moe 275.9 -> 278.5 tok/s). INGOT_NO_PDL=router turns it off.
    static const bool pdl = pdl_on_for("router", false);
    return cuda_check(launch_pdl_if(pdl, kern, dim3(kCluster), dim3(kThreads), smem, s, p),
                      "moe_route_linear kernel");
  }
  if (p.norm) {  // xn first, then the plain path over it
    norm_rows_kernel<<<(unsigned)p.T, kThreads, 0, s>>>(static_cast<const float *>(p.x), p.norm,
                                                        p.eps, p.D, p.xn);
    ingot_status st = launch_status("moe_route_linear norm kernel");
    if (st) return st;
    RouterParams q = p;
    q.x = p.xn, q.x_dt = INGOT_F32, q.norm = NULL, q.xn = NULL;
    return route_linear<WT>(q, dev, s);
  }
  const int64_t n = (int64_t)p.T * p.E;
  float *logits = (float *)cuda_scratch_alloc(dev, (size_t)n * sizeof(float), s);
  if (!logits)
    return ingot_last_status() ? ingot_last_status()
                               : ingot_set_error(INGOT_ERR_OOM, "moe_route: out of device memory");
  router_logits_kernel<WT><<<grid_for(n * 32, kThreads), kThreads, 0, s>>>(p, logits);
  ingot_status st = launch_status("moe_route_linear logits kernel");
  if (!st) {
    route_kernel<float><<<(unsigned)p.T, 32, (size_t)p.E * sizeof(float), s>>>(
        logits, p.E, p.k, p.renorm, p.wout, p.ids);
    st = launch_status("moe_route kernel");
  }
  cuda_scratch_free(dev, logits, s);
  return st;
}

ingot_status k_route(ingot_op_args *a) {
  const ingot_tensor *L = a->in[0], *R = a->nin > 1 ? a->in[1] : NULL;
  const int64_t T = ingot_shape(L)[0], E = R ? ingot_shape(R)[0] : ingot_shape(L)[1];
  const int k = (int)a->iarg[0];
  if (T == 0) return INGOT_OK;
  const size_t smem = (size_t)E * sizeof(float);
  if (smem > 48 * 1024 || T > INT32_MAX)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED, "moe_route: at most %d experts on CUDA",
                           (int)(48 * 1024 / sizeof(float)));
  const int dev = ingot_device_of(L).index;
  ingot_status st = cuda_use_device(dev);
  if (st) return st;
  cudaStream_t s = cuda_current_stream(dev);
  float *w = (float *)ingot_tensor_data(a->out[0]);
  int32_t *ids = (int32_t *)ingot_tensor_data(a->out[1]);
  const void *l = ingot_tensor_data(L);
  if (R) {
    RouterParams p = {};
    p.x = l;
    p.x_dt = ingot_dtype_of(L);
    p.w = ingot_tensor_data(R);
    p.T = (int)T, p.E = (int)E, p.k = k;
    p.D = ingot_shape(L)[1];
    p.renorm = a->iarg[1] != 0;
    p.vec =
        (p.D * (int64_t)ingot_dtype_size(ingot_dtype_of(R))) % 16 == 0 && (uintptr_t)p.w % 16 == 0;
    p.wout = w, p.ids = ids;
    if (a->nin > 2 && a->in[2]) {
      p.norm = (const float *)ingot_tensor_data(a->in[2]);
      p.eps = (float)a->farg[0];
      p.xn = (float *)ingot_tensor_data(a->out[2]);
    }
    switch (ingot_dtype_of(R)) {
      case INGOT_F32:
        return route_linear<float>(p, dev, s);
      case INGOT_BF16:
        return route_linear<bf16_t>(p, dev, s);
      case INGOT_F16:
        return route_linear<f16_t>(p, dev, s);
      default:
        return ingot_set_error(INGOT_ERR_DTYPE, "moe_route_linear: unsupported router dtype");
    }
  }
  switch (ingot_dtype_of(L)) {
    case INGOT_F32:
      route_kernel<float>
          <<<(unsigned)T, 32, smem, s>>>((const float *)l, (int)E, k, a->iarg[1] != 0, w, ids);
      break;
    case INGOT_BF16:
      route_kernel<bf16_t>
          <<<(unsigned)T, 32, smem, s>>>((const bf16_t *)l, (int)E, k, a->iarg[1] != 0, w, ids);
      break;
    case INGOT_F16:
      route_kernel<f16_t>
          <<<(unsigned)T, 32, smem, s>>>((const f16_t *)l, (int)E, k, a->iarg[1] != 0, w, ids);
      break;
    default:
      return ingot_set_error(INGOT_ERR_DTYPE, "moe_route: unsupported logits dtype");
  }
  return launch_status("moe_route kernel");
}

MoeParams params(const ingot_tensor *act, const ingot_tensor *w, const ingot_tensor *ids,
                 const ingot_tensor *scale, ingot_tensor *out) {
  MoeParams p = {};
  p.a = ingot_tensor_data(act);
  p.a_dt = ingot_dtype_of(act);
  p.w = ingot_tensor_data(w);
  p.scale = scale ? (const float *)ingot_tensor_data(scale) : NULL;
  p.ids = (const int32_t *)ingot_tensor_data(ids);
  p.out = (float *)ingot_tensor_data(out);
  p.T = (int)ingot_shape(ids)[0];
  p.k = (int)ingot_shape(ids)[1];
  p.E = (int)ingot_shape(w)[0];
  p.rows = ingot_shape(w)[1];
  p.cols = ingot_shape(w)[2];
  return p;
}

// Sizes the kernels index with 32-bit slot and expert numbers.
ingot_status check_sizes(const char *op, const ingot_tensor *ids, const ingot_tensor *w) {
  const int64_t N = ingot_numel(ids), E = ingot_shape(w)[0];
  if (N > (1 << 30) || E > (1 << 20))
    return ingot_set_error(INGOT_ERR_UNSUPPORTED, "%s: too many slots or experts for CUDA", op);
  return INGOT_OK;
}

ingot_status k_gate_up(ingot_op_args *a) {
  MoeParams p = params(a->in[0], a->in[1], a->in[2], a->in[3], a->out[0]);
  if ((int64_t)p.T * p.k * (p.rows / 2) == 0) return INGOT_OK;
  const ingot_tensor *nw = a->nin > 4 ? a->in[4] : NULL;  // the down weight: prefetch hint
  if (nw && ingot_shape(nw)[0] == p.E) {
    p.next_bytes =
        ingot_shape(nw)[1] * ingot_shape(nw)[2] * (int64_t)ingot_dtype_size(ingot_dtype_of(nw));
    p.next_w = (const char *)ingot_tensor_data(nw);
    if (p.next_bytes % 16 != 0 || (uintptr_t)p.next_w % 16 != 0) p.next_w = NULL;
  }
  ingot_status st = check_sizes("moe_gate_up", a->in[2], a->in[1]);
  return st ? st : run_experts(true, p, a->in[1], p.rows / 2, p.T);
}

ingot_status k_down(ingot_op_args *a) {
  MoeParams p = params(a->in[0], a->in[1], a->in[2], a->in[4], a->out[0]);
  p.wt = (const float *)ingot_tensor_data(a->in[3]);
  p.res = a->nin > 5 && a->in[5] ? (const float *)ingot_tensor_data(a->in[5]) : NULL;
  if ((int64_t)p.T * p.rows == 0) return INGOT_OK;
  if (p.k == 0 || p.cols == 0) {  // empty sums: zeros (plus res)
    const int dev = ingot_device_of(a->out[0]).index;
    ingot_status st = cuda_use_device(dev);
    if (st) return st;
    cudaStream_t s = cuda_current_stream(dev);
    if (!p.res)
      return cuda_check(cudaMemsetAsync(p.out, 0, (size_t)p.T * p.rows * sizeof(float), s),
                        "cudaMemsetAsync");
    // k = 0: the sum kernel reads no part and gives res + 0 (the CPU's bits)
    sum_slots_kernel<<<grid_for((int64_t)p.T * p.rows, kThreads), kThreads, 0, s>>>(
        NULL, p.ids, 0, p.E, p.T, p.rows, p.res, p.out);
    return launch_status("moe_down sum kernel");
  }
  ingot_status st = check_sizes("moe_down", a->in[2], a->in[1]);
  return st ? st : run_experts(false, p, a->in[1], p.rows, (int64_t)p.T * p.k);
}

}  // namespace

extern "C" void cuda_register_moe(ingot_backend *be) {
  be->kernels[INGOT_OP_MOE_ROUTE] = k_route;
  be->kernels[INGOT_OP_MOE_GATE_UP] = k_gate_up;
  be->kernels[INGOT_OP_MOE_DOWN] = k_down;
}
