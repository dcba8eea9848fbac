// CUDA SORT (sort, argsort) and TOPK; contracts in src/core/ops_sort.c, reference src/cpu/sort.c.
//
// Every element becomes an unsigned key whose order is the CPU's value order (NaN above +inf,
// -0.0 equal to 0.0), as narrow as the dtype (8, 16, 32 or 64 bits), XORed with all-ones for
// descending / largest; the k least (key, position) pairs are the answer, which makes every
// result stable in both directions (ties keep input order, i.e. go to the lower position).
// Values are copied from the input by position (bit-exact: NaN payloads, -0.0 kept).
//
// Sort (and topk with k > 64): a key-gen kernel writes, for every element e of the [rows, n]
// view (rows = all dims but `dim`, any strides), key = (row << bits) | dtype key and value = e;
// one cub::DeviceRadixSort::SortPairs (stable LSD) over all rows at once, limited to the bits
// in use, groups rows and orders each row. 64-bit dtypes with several rows (row bits no longer
// fit beside the key) sort twice: by key, then stably by row. A gather kernel writes the first
// m of every row into the outputs (position = e - row * n). Only two CUB instantiations:
// <uint32, int64> and <uint64, int64>.
//
// Topk with k <= 32, keys up to 32 bits (all dtypes but 64-bit ones) and rows shorter than
// 2^32 (the fast path, "warp-list" below): a row is split over `bpr` blocks (at most one wave
// of resident blocks over the device, >= 1024 elements a block); each warp keeps one sorted
// k-list spread over its lanes and filters elements against its k-th entry (f32 rows with unit
// stride load float4 and filter in float); warps' lists merge by rank in shared memory. With
// bpr > 1 one launch does all: blocks write k candidates to a persistent per-(device, stream)
// buffer, __threadfence, bump the row's arrival counter, and the row's last block merges and
// resets the counter to 0 (no scratch allocation, memset or second launch). Without that
// buffer (graph capture, > 16 streams) the candidates go to scratch and a merge kernel follows.
//
// Other topk with k <= 64 and rows shorter than 2^32: each row is split over `bpr` blocks of 256
// threads; every thread keeps a sorted register list of its K best candidates (K = 8/16/32/64
// bucket >= k, pairs stop at 32; a candidate is (key << 32 | position) in one uint64 for keys up to 32 bits, a
// key/position pair for 64-bit dtypes); a warp merges its 32 lists by k rounds of shuffle-min,
// warp 0 merges the warps' k-lists the same way. With bpr == 1 the block writes the final row;
// otherwise blocks write k candidates each to scratch and a second kernel (one block per row)
// merges the bpr * k candidates the same way. No host sync (scratch aside).
#include <cub/cub.cuh>

#include <mutex>

#include "cuda_common.cuh"

namespace {

// ---- keys ----

__host__ __device__ __forceinline__ int key_bits(int dt) {
  switch (dt) {
  case INGOT_BOOL: case INGOT_U8: case INGOT_I8: case INGOT_F8E4M3FN: case INGOT_F8E5M2: return 8;
  case INGOT_I16: case INGOT_F16: case INGOT_BF16: return 16;
  case INGOT_I32: case INGOT_F32: return 32;
  default: return 64;
  }
}

__host__ __device__ __forceinline__ uint64_t bits_mask(int bits) {
  return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

// Order-preserving key of an IEEE-like float of `bits` bits (raw bit pattern u).
__device__ __forceinline__ uint64_t float_key(uint64_t u, int bits, bool nan) {
  uint64_t sign = 1ull << (bits - 1), mask = bits_mask(bits);
  if (nan) return mask;           // NaN above everything, +inf included
  if ((u & ~sign) == 0) u = 0;    // -0.0 sorts with 0.0
  return (u & sign) ? (~u & mask) : (u | sign);
}

// Key of one element given its raw bits (zero-extended), before the direction flip.
__device__ __forceinline__ uint64_t raw_key(int dt, uint64_t u) {
  switch (dt) {
  case INGOT_I8: return (u ^ 0x80u) & 0xffu;
  case INGOT_I16: return (u ^ 0x8000u) & 0xffffu;
  case INGOT_I32: return (u ^ 0x80000000u) & 0xffffffffu;
  case INGOT_I64: return u ^ (1ull << 63);
  case INGOT_F16: return float_key(u, 16, (u & 0x7fff) > 0x7c00);
  case INGOT_BF16: return float_key(u, 16, (u & 0x7fff) > 0x7f80);
  case INGOT_F8E4M3FN: return float_key(u, 8, (u & 0x7f) == 0x7f);
  case INGOT_F8E5M2: return float_key(u, 8, (u & 0x7f) > 0x7c);
  case INGOT_F32: return float_key(u, 32, (u & 0x7fffffffu) > 0x7f800000u);
  case INGOT_F64: return float_key(u, 64, (u & ~(1ull << 63)) > 0x7ff0000000000000ull);
  default: return u;  // bool, u8
  }
}

template <int ES> struct raw_of;
template <> struct raw_of<1> { using type = uint8_t; };
template <> struct raw_of<2> { using type = uint16_t; };
template <> struct raw_of<4> { using type = uint32_t; };
template <> struct raw_of<8> { using type = unsigned long long; };

__device__ __forceinline__ uint64_t load_raw(const char *p, int es) {
  switch (es) {
  case 1: return *(const uint8_t *)p;
  case 2: return *(const uint16_t *)p;
  case 4: return *(const uint32_t *)p;
  default: return *(const unsigned long long *)p;
  }
}

__device__ __forceinline__ void copy_elem(char *dst, const char *src, int es) {
  switch (es) {
  case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
  case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
  case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
  default: *(unsigned long long *)dst = *(const unsigned long long *)src; break;
  }
}

// ---- rows: every dim but the sorted one, with input and output strides (elements) ----
struct RowGeom {
  int nd;
  int64_t shape[INGOT_MAX_DIMS];
  int64_t ist[INGOT_MAX_DIMS];  // input
  int64_t vst[INGOT_MAX_DIMS];  // out[0] values
  int64_t xst[INGOT_MAX_DIMS];  // out[1] indices
  int64_t isd, vsd, xsd;        // strides along the sorted dim
};

__device__ __forceinline__ void row_offsets(const RowGeom &g, int64_t r, int64_t &io,
                                            int64_t &vo, int64_t &xo) {
  io = vo = xo = 0;
  for (int d = g.nd - 1; d >= 0; d--) {
    int64_t i = r % g.shape[d];
    r /= g.shape[d];
    io += i * g.ist[d];
    vo += i * g.vst[d];
    xo += i * g.xst[d];
  }
}

// ---- full sort path ----

// keys[e] = (row << bits) | (key ^ flip) (row part only when row_in_key), vals[e] = e.
template <class KT>
__global__ void sort_keys_kernel(const char *x, int dt, int es, RowGeom g, int64_t n,
                                 int64_t numel, uint64_t flip, int bits, bool row_in_key,
                                 KT *keys, int64_t *vals) {
  CUDA_GRID_STRIDE(e, numel) {
    int64_t r = e / n, j = e - r * n, io, vo, xo;
    row_offsets(g, r, io, vo, xo);
    uint64_t k = raw_key(dt, load_raw(x + (io + j * g.isd) * es, es)) ^ flip;
    if (row_in_key) k |= (uint64_t)r << bits;
    keys[e] = (KT)k;
    vals[e] = e;
  }
}

// Second pass of the two-pass sort: key = row of the element.
__global__ void row_keys_kernel(const int64_t *vals, int64_t n, int64_t numel,
                                unsigned long long *keys) {
  CUDA_GRID_STRIDE(i, numel) keys[i] = (unsigned long long)(vals[i] / n);
}

// The first m sorted elements of every row into the outputs.
__global__ void sort_gather_kernel(const char *x, int es, RowGeom g, int64_t n, int64_t m,
                                   int64_t rows, const int64_t *vals, char *vout,
                                   int64_t *xout) {
  CUDA_GRID_STRIDE(t, rows * m) {
    int64_t r = t / m, j = t - r * m, io, vo, xo;
    row_offsets(g, r, io, vo, xo);
    int64_t pos = vals[r * n + j] - r * n;
    copy_elem(vout + (vo + j * g.vsd) * es, x + (io + pos * g.isd) * es, es);
    xout[xo + j * g.xsd] = pos;
  }
}

// ---- topk candidates ----

// Key/position pair for 64-bit keys; smaller is better.
struct KP {
  unsigned long long k;
  long long i;
};

__device__ __forceinline__ bool lt(unsigned long long a, unsigned long long b) { return a < b; }
__device__ __forceinline__ bool lt(KP a, KP b) { return a.k < b.k || (a.k == b.k && a.i < b.i); }
__device__ __forceinline__ bool eq(unsigned long long a, unsigned long long b) { return a == b; }
__device__ __forceinline__ bool eq(KP a, KP b) { return a.k == b.k && a.i == b.i; }
__device__ __forceinline__ unsigned long long shfl_xor(unsigned long long v, int o) {
  return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ KP shfl_xor(KP v, int o) {
  return KP{__shfl_xor_sync(0xffffffffu, v.k, o), __shfl_xor_sync(0xffffffffu, v.i, o)};
}
__device__ __forceinline__ int64_t cand_pos(unsigned long long c) {
  return (int64_t)(c & 0xffffffffull);
}
__device__ __forceinline__ int64_t cand_pos(KP c) { return c.i; }

template <class C> __device__ __forceinline__ C sentinel();
template <> __device__ __forceinline__ unsigned long long sentinel() { return ~0ull; }
template <> __device__ __forceinline__ KP sentinel() { return KP{~0ull, (long long)INT64_MAX}; }

template <class C> __device__ __forceinline__ C make_cand(uint64_t key, int64_t pos);
template <> __device__ __forceinline__ unsigned long long make_cand(uint64_t key, int64_t pos) {
  return (key << 32) | (uint64_t)pos;
}
template <> __device__ __forceinline__ KP make_cand(uint64_t key, int64_t pos) {
  return KP{key, (long long)pos};
}

// Sorted insert into a register list (best first); all indices static, so it stays in registers.
template <class C, int K> __device__ __forceinline__ void insert(C (&l)[K], C c) {
  if (!lt(c, l[K - 1])) return;
  l[K - 1] = c;
#pragma unroll
  for (int i = K - 1; i > 0; i--) {
    if (lt(l[i], l[i - 1])) {
      C t = l[i];
      l[i] = l[i - 1];
      l[i - 1] = t;
    }
  }
}

template <class C, int K> __device__ __forceinline__ void pop_front(C (&l)[K]) {
#pragma unroll
  for (int i = 0; i < K - 1; i++) l[i] = l[i + 1];
  l[K - 1] = sentinel<C>();
}

// The k best of the warp's lists, in order, written by lane 0 to out[0..k). Candidates are
// unique (positions differ) except sentinels, so exactly one lane pops a real winner.
template <class C, int K> __device__ __forceinline__ void warp_select(C (&l)[K], int k, C *out) {
  int lane = threadIdx.x & 31;
  for (int r = 0; r < k; r++) {
    C m = l[0];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      C t = shfl_xor(m, o);
      if (lt(t, m)) m = t;
    }
    if (eq(l[0], m)) pop_front(l);
    if (lane == 0) out[r] = m;
  }
}

constexpr int TOPK_THREADS = 256;
constexpr int TOPK_WARPS = TOPK_THREADS / 32;
constexpr int TOPK_UNROLL = 8;

// The k best of the block's lists into best[0..k) (shared); ends with a barrier.
template <class C, int K>
__device__ __forceinline__ void block_select(C (&l)[K], int k, C *warp_best, C *best) {
  int warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  warp_select(l, k, warp_best + warp * k);
  __syncthreads();
  if (warp == 0) {
    C l2[K];
#pragma unroll
    for (int i = 0; i < K; i++) l2[i] = sentinel<C>();
    for (int i = threadIdx.x; i < nw * k; i += 32) insert(l2, warp_best[i]);
    warp_select(l2, k, best);
  }
  __syncthreads();
}

// Scan x[lo, hi) (row elements, stride isd) into the thread's list.
template <class C, int K, int ES>
__device__ __forceinline__ void scan_row(C (&l)[K], const char *x, int64_t isd, int64_t lo,
                                         int64_t hi, int dt, uint64_t flip) {
  using R = typename raw_of<ES>::type;
  const R *p = (const R *)x;
  for (int64_t b = lo + threadIdx.x; b < hi; b += (int64_t)blockDim.x * TOPK_UNROLL) {
    R v[TOPK_UNROLL];
#pragma unroll
    for (int u = 0; u < TOPK_UNROLL; u++) {  // all loads first, so they are in flight together
      int64_t j = b + (int64_t)u * blockDim.x;
      v[u] = j < hi ? p[j * isd] : R(0);
    }
#pragma unroll
    for (int u = 0; u < TOPK_UNROLL; u++) {
      int64_t j = b + (int64_t)u * blockDim.x;
      if (j < hi) insert(l, make_cand<C>(raw_key(dt, (uint64_t)v[u]) ^ flip, j));
    }
  }
}

// Final k of row r (from best[]) into the outputs.
template <class C>
__device__ __forceinline__ void write_row(const C *best, int k, const char *x, int es,
                                          const RowGeom &g, int64_t r, char *vout,
                                          int64_t *xout) {
  int64_t io, vo, xo;
  row_offsets(g, r, io, vo, xo);
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    int64_t pos = cand_pos(best[i]);
    copy_elem(vout + (vo + i * g.vsd) * es, x + (io + pos * g.isd) * es, es);
    xout[xo + i * g.xsd] = pos;
  }
}

// Phase 1: block (row r, part b) selects the k best of its chunk; writes the final row when
// bpr == 1, else k candidates to cand[(r * bpr + b) * k ...].
template <class C, int K>
__global__ void __launch_bounds__(TOPK_THREADS)
topk_part_kernel(const char *x, int dt, int es, RowGeom g, int64_t n, int k, int64_t rows,
                 int64_t bpr, int64_t chunk, uint64_t flip, C *cand, char *vout, int64_t *xout) {
  __shared__ C warp_best[TOPK_WARPS * K];
  __shared__ C best[K];
  for (int64_t blk = blockIdx.x; blk < rows * bpr; blk += gridDim.x) {
    int64_t r = blk / bpr, b = blk - r * bpr, io, vo, xo;
    row_offsets(g, r, io, vo, xo);
    const char *row = x + io * es;
    int64_t lo = b * chunk, hi = lo + chunk < n ? lo + chunk : n;
    C l[K];
#pragma unroll
    for (int i = 0; i < K; i++) l[i] = sentinel<C>();
    if constexpr (sizeof(C) == 8) {
      switch (es) {
      case 1: scan_row<C, K, 1>(l, row, g.isd, lo, hi, dt, flip); break;
      case 2: scan_row<C, K, 2>(l, row, g.isd, lo, hi, dt, flip); break;
      default: scan_row<C, K, 4>(l, row, g.isd, lo, hi, dt, flip); break;
      }
    } else {
      scan_row<C, K, 8>(l, row, g.isd, lo, hi, dt, flip);
    }
    block_select(l, k, warp_best, best);
    if (bpr == 1) {
      write_row(best, k, x, es, g, r, vout, xout);
    } else {
      for (int i = threadIdx.x; i < k; i += blockDim.x) cand[blk * k + i] = best[i];
    }
    __syncthreads();  // best[] is reused by the next grid-stride iteration
  }
}

// Phase 2: one block per row merges its bpr * k candidates into the final row.
template <class C, int K>
__global__ void __launch_bounds__(TOPK_THREADS)
topk_merge_kernel(const char *x, int es, RowGeom g, int k, int64_t rows, int64_t bpr,
                  const C *cand, char *vout, int64_t *xout) {
  __shared__ C warp_best[TOPK_WARPS * K];
  __shared__ C best[K];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    C l[K];
#pragma unroll
    for (int i = 0; i < K; i++) l[i] = sentinel<C>();
    const C *c = cand + r * bpr * k;
    for (int64_t i = threadIdx.x; i < bpr * k; i += blockDim.x) insert(l, c[i]);
    block_select(l, k, warp_best, best);
    write_row(best, k, x, es, g, r, vout, xout);
    __syncthreads();
  }
}

// ---- warp-list topk (k <= 32, keys up to 32 bits): the fast path ----
//
// A warp keeps one sorted list of its k best packed candidates, lane i holding the i-th
// (lanes >= k hold the sentinel ~0). Elements are filtered against the list's k-th entry
// (thr) first — after warm-up nearly all fail, so the common cost per element is a load and
// a compare; survivors of a 32-lane slot are inserted one by one (ballot / shfl_up), or, when
// more than 6 survive, bitonic-sorted across the warp and merged with the list. The filter is
// conservative (it may pass a non-improving element); insertion is exact.

constexpr unsigned FULL = 0xffffffffu;
constexpr int WT_VEC = 4;   // float4 loads per lane per iteration (f32 fast path)
constexpr int WT_GEN = 8;   // scalar loads per lane per iteration (other dtypes / strided)
typedef unsigned long long u64;

__device__ __forceinline__ u64 umin64(u64 a, u64 b) { return a < b ? a : b; }
__device__ __forceinline__ u64 umax64(u64 a, u64 b) { return a < b ? b : a; }

// Ascending bitonic sort of one value per lane over the warp.
__device__ __forceinline__ u64 warp_sort32(u64 x, int lane) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      u64 y = __shfl_xor_sync(FULL, x, stride);
      bool keep_min = ((lane & stride) == 0) == ((lane & size) == 0);
      x = keep_min ? umin64(x, y) : umax64(x, y);
    }
  }
  return x;
}

// Sorts a bitonic sequence (one value per lane) ascending.
__device__ __forceinline__ u64 warp_bitonic_merge32(u64 x, int lane) {
#pragma unroll
  for (int stride = 16; stride > 0; stride >>= 1) {
    u64 y = __shfl_xor_sync(FULL, x, stride);
    x = (lane & stride) == 0 ? umin64(x, y) : umax64(x, y);
  }
  return x;
}

// Inserts the warp-uniform candidate c into the list (no-op when not among the k best).
__device__ __forceinline__ void wl_insert(u64 &v, u64 c, int k, int lane) {
  int pos = __popc(__ballot_sync(FULL, v < c));  // the list is sorted: a prefix is better
  u64 up = __shfl_up_sync(FULL, v, 1);
  if (lane < k) {
    if (lane == pos) v = c;
    else if (lane > pos) v = up;
  }
}

// Offers one candidate per lane (~0 = none) to the list; thr is kept = list[k - 1].
// Candidates must differ from each other and from the list (sentinels aside).
__device__ __forceinline__ void wl_offer(u64 &v, u64 &thr, u64 c, int k, int lane) {
  unsigned m = __ballot_sync(FULL, c < thr);
  if (!m) return;
  if (__popc(m) > 6) {
    // The k best of list ∪ candidates: sort the candidates, reverse them against the
    // ascending list; the lane-wise min is bitonic and holds the 32 smallest of the union.
    u64 s = warp_sort32(c, lane);
    u64 rev = __shfl_sync(FULL, s, 31 - lane);
    u64 x = warp_bitonic_merge32(umin64(v, rev), lane);
    v = lane < k ? x : ~0ull;
  } else {
    do {
      int src = __ffs(m) - 1;
      wl_insert(v, __shfl_sync(FULL, c, src), k, lane);
      thr = __shfl_sync(FULL, v, k - 1);
      m &= m - 1;
      m &= __ballot_sync(FULL, c < thr);
    } while (m);
    return;
  }
  thr = __shfl_sync(FULL, v, k - 1);
}

// The float whose f32 key (before the flip) is the key of thr: the filter's bound.
__device__ __forceinline__ float thr_f32(u64 thr, uint32_t flip) {
  uint32_t key = (uint32_t)(thr >> 32) ^ flip;
  return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// Any dtype with keys up to 32 bits, any stride: elements [lo, hi) of the row.
template <int ES>
__device__ __forceinline__ void wt_scan_gen(u64 &v, u64 &thr, const char *x, int64_t isd,
                                            int64_t lo, int64_t hi, int dt, uint32_t flip,
                                            int k, int lane) {
  using R = typename raw_of<ES>::type;
  const R *p = (const R *)x;
  // The loop bound is block-uniform: every lane takes every iteration (warp collectives).
  for (int64_t base = lo; base < hi; base += (int64_t)blockDim.x * WT_GEN) {
    R w[WT_GEN];
#pragma unroll
    for (int u = 0; u < WT_GEN; u++) {
      int64_t j = base + (int64_t)u * blockDim.x + threadIdx.x;
      w[u] = j < hi ? p[j * isd] : R(0);
    }
    uint32_t tk = (uint32_t)(thr >> 32), key[WT_GEN];
    unsigned pass = 0;
#pragma unroll
    for (int u = 0; u < WT_GEN; u++) {
      int64_t j = base + (int64_t)u * blockDim.x + threadIdx.x;
      key[u] = (uint32_t)(raw_key(dt, (uint64_t)w[u]) ^ flip);
      if (j < hi && key[u] <= tk) pass |= 1u << u;  // ties pass; insertion decides exactly
    }
    if (__any_sync(FULL, pass != 0)) {
#pragma unroll
      for (int u = 0; u < WT_GEN; u++) {
        int64_t j = base + (int64_t)u * blockDim.x + threadIdx.x;
        u64 c = (pass >> u) & 1 ? make_cand<u64>(key[u], j) : ~0ull;
        wl_offer(v, thr, c, k, lane);
      }
    }
  }
}

// f32, unit stride, 16-byte aligned row, lo a multiple of 4: float4 loads over the whole
// quads of [lo, hi), the last < 4 elements by wt_scan_gen.
__device__ __forceinline__ void wt_scan_f32(u64 &v, u64 &thr, const char *x, int64_t lo,
                                            int64_t hi, uint32_t flip, int k, int lane) {
  const float4 *p = (const float4 *)x;
  int64_t q1 = hi >> 2;
  bool largest = flip != 0;
  for (int64_t base = lo >> 2; base < q1; base += (int64_t)blockDim.x * WT_VEC) {
    float4 w[WT_VEC];
#pragma unroll
    for (int u = 0; u < WT_VEC; u++) {
      int64_t q = base + (int64_t)u * blockDim.x + threadIdx.x;
      w[u] = q < q1 ? __ldcs(p + q) : make_float4(0.f, 0.f, 0.f, 0.f);  // read once: stream
    }
    // Drop e when it is strictly worse than thr as a float (never when e or tv is NaN):
    // then its key is strictly worse too, so it cannot enter the list.
    float tv = thr_f32(thr, flip);
    unsigned pass = 0;
#pragma unroll
    for (int u = 0; u < WT_VEC; u++) {
      int64_t q = base + (int64_t)u * blockDim.x + threadIdx.x;
      float e[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
      for (int c = 0; c < 4; c++) {
        bool ok = largest ? !(e[c] < tv) : !(e[c] > tv);
        if (q < q1 && ok) pass |= 1u << (u * 4 + c);
      }
    }
    if (__any_sync(FULL, pass != 0)) {
#pragma unroll
      for (int u = 0; u < WT_VEC; u++) {
        int64_t q = base + (int64_t)u * blockDim.x + threadIdx.x;
        float e[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
        for (int c = 0; c < 4; c++) {
          uint64_t key = raw_key(INGOT_F32, (uint64_t)__float_as_uint(e[c])) ^ flip;
          u64 cand = (pass >> (u * 4 + c)) & 1 ? make_cand<u64>(key, q * 4 + c) : ~0ull;
          wl_offer(v, thr, cand, k, lane);
        }
      }
    }
  }
  int64_t t0 = q1 << 2;  // >= lo, as lo is a multiple of 4
  if (t0 < hi) wt_scan_gen<4>(v, thr, x, 1, t0, hi, INGOT_F32, flip, k, lane);
}

// The k best of the block's warp lists into best[0..k) (shared), by rank (ties in the
// sentinels broken by slot, so ranks are a permutation); ends with a barrier.
__device__ __forceinline__ void wt_block_best(u64 v, int k, u64 *wb, u64 *best) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tot = (blockDim.x >> 5) * k;
  if (lane < k) wb[warp * k + lane] = v;
  __syncthreads();
  for (int i = threadIdx.x; i < tot; i += blockDim.x) {
    u64 c = wb[i];
    int rank = 0;
    for (int j = 0; j < tot; j++) {
      u64 d = wb[j];
      rank += (d < c || (d == c && j < i)) ? 1 : 0;
    }
    if (rank < k) best[rank] = c;
  }
  __syncthreads();
}

// Merges the row's `total` candidates (cand, written by other blocks: read from L2) and
// writes the final row r.
__device__ __forceinline__ void wt_merge_row(const u64 *cand, int64_t total, int k,
                                             const char *x, int es, const RowGeom &g,
                                             int64_t r, char *vout, int64_t *xout, u64 *wb,
                                             u64 *best) {
  int lane = threadIdx.x & 31;
  u64 v = ~0ull, thr = ~0ull;
  for (int64_t base = 0; base < total; base += blockDim.x) {
    int64_t i = base + threadIdx.x;
    wl_offer(v, thr, i < total ? __ldcg(cand + i) : ~0ull, k, lane);
  }
  wt_block_best(v, k, wb, best);
  write_row(best, k, x, es, g, r, vout, xout);
}

// Block (row r, part b) selects the k best of its chunk. bpr == 1: writes the row. Else
// writes k candidates to cand[(r * bpr + b) * k ...]; with cnt (fused mode) the last block
// of the row to finish (per-row arrival counter) merges the row and resets its counter to 0
// for the next launch; without cnt, wt_merge_kernel follows.
template <bool VEC, int ES>
__global__ void __launch_bounds__(TOPK_THREADS)
wt_part_kernel(const char *x, int dt, int es, RowGeom g, int64_t n, int k, int64_t rows,
               int64_t bpr, int64_t chunk, uint32_t flip, u64 *cand, unsigned *cnt,
               char *vout, int64_t *xout) {
  __shared__ u64 wb[TOPK_WARPS * 32];
  __shared__ u64 best[32];
  __shared__ int last;
  int lane = threadIdx.x & 31;
  for (int64_t blk = blockIdx.x; blk < rows * bpr; blk += gridDim.x) {
    int64_t r = blk / bpr, b = blk - r * bpr, io, vo, xo;
    row_offsets(g, r, io, vo, xo);
    const char *row = x + io * es;
    int64_t lo = b * chunk, hi = lo + chunk < n ? lo + chunk : n;
    u64 v = ~0ull, thr = ~0ull;
    if constexpr (VEC) wt_scan_f32(v, thr, row, lo, hi, flip, k, lane);
    else wt_scan_gen<ES>(v, thr, row, g.isd, lo, hi, dt, flip, k, lane);
    wt_block_best(v, k, wb, best);
    if (bpr == 1) {
      write_row(best, k, x, es, g, r, vout, xout);
    } else {
      if (threadIdx.x < k) cand[blk * k + threadIdx.x] = best[threadIdx.x];
      if (cnt) {
        __threadfence();  // this block's candidates are visible before its arrival counts
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(cnt + r, 1u) == (unsigned)(bpr - 1);
        __syncthreads();
        if (last) {  // block-uniform
          __threadfence();  // the other blocks' candidates (fenced before their arrival)
          wt_merge_row(cand + r * bpr * k, bpr * k, k, x, es, g, r, vout, xout, wb, best);
          if (threadIdx.x == 0) cnt[r] = 0;  // every block of the row has arrived
        }
      }
    }
    __syncthreads();  // shared memory is reused by the next grid-stride iteration
  }
}

// Two-launch mode: one block per row merges the row's bpr * k candidates.
__global__ void __launch_bounds__(TOPK_THREADS)
wt_merge_kernel(const char *x, int es, RowGeom g, int k, int64_t rows, int64_t bpr,
                const u64 *cand, char *vout, int64_t *xout) {
  __shared__ u64 wb[TOPK_WARPS * 32];
  __shared__ u64 best[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    wt_merge_row(cand + r * bpr * k, bpr * k, k, x, es, g, r, vout, xout, wb, best);
    __syncthreads();
  }
}

// ---- host side ----

inline size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

RowGeom make_rows(const ingot_op_args *a, int d, int64_t *rows) {
  const ingot_tensor *t = a->in[0];
  int nd = ingot_ndim(t);
  const int64_t *sh = ingot_shape(t), *is = ingot_strides(t);
  const int64_t *vs = ingot_strides(a->out[0]), *xs = ingot_strides(a->out[1]);
  RowGeom g = {};
  *rows = 1;
  for (int i = 0; i < nd; i++) {
    if (i == d) continue;
    g.shape[g.nd] = sh[i];
    g.ist[g.nd] = is[i];
    g.vst[g.nd] = vs[i];
    g.xst[g.nd] = xs[i];
    g.nd++;
    *rows *= sh[i];
  }
  g.isd = nd ? is[d] : 0;
  g.vsd = nd ? vs[d] : 0;
  g.xsd = nd ? xs[d] : 0;
  return g;
}

int ceil_log2(uint64_t v) { return v <= 1 ? 0 : 64 - __builtin_clzll(v - 1); }

template <class KT>
cudaError_t radix_sort(void *tmp, size_t &tmp_bytes, cub::DoubleBuffer<KT> &keys,
                       cub::DoubleBuffer<int64_t> &vals, int64_t num, int end_bit,
                       cudaStream_t s) {
  return cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys, vals, num, 0, end_bit, s);
}

// Full stable sort of every row; writes the first m of each.
template <class KT>
ingot_status full_sort(ingot_op_args *a, int dev, cudaStream_t s, const RowGeom &g, int64_t n,
                       int64_t rows, int64_t m, bool flip, const char *what) {
  const ingot_tensor *t = a->in[0];
  int dt = ingot_dtype_of(t), es = (int)ingot_dtype_size(ingot_dtype_of(t)), bits = key_bits(dt);
  int64_t numel = rows * n;
  int rbits = ceil_log2((uint64_t)rows);
  bool two_pass = bits + rbits > 64;  // only 64-bit keys with several rows (or huge row counts)
  int end_bit = two_pass ? bits : bits + rbits;
  using UK = unsigned long long;
  // Temp storage size: the largest of the (at most two) sorts.
  size_t tmp_bytes = 0, t2 = 0;
  {
    cub::DoubleBuffer<KT> kb(nullptr, nullptr);
    cub::DoubleBuffer<int64_t> vb(nullptr, nullptr);
    if (ingot_status st = cuda_check(radix_sort(nullptr, tmp_bytes, kb, vb, numel, end_bit, s),
                                     what))
      return st;
    if (two_pass) {
      cub::DoubleBuffer<UK> kb2(nullptr, nullptr);
      if (ingot_status st = cuda_check(radix_sort(nullptr, t2, kb2, vb, numel, rbits, s), what))
        return st;
      if (t2 > tmp_bytes) tmp_bytes = t2;
    }
  }
  size_t kbytes = align_up(sizeof(KT) * (size_t)numel), vbytes = align_up(8 * (size_t)numel);
  size_t total = 2 * kbytes + 2 * vbytes + align_up(tmp_bytes);
  char *scratch = (char *)cuda_scratch_alloc(dev, total, s);
  if (!scratch) return ingot_set_error(INGOT_ERR_OOM, "%s: out of device memory", what);
  KT *k0 = (KT *)scratch, *k1 = (KT *)(scratch + kbytes);
  int64_t *v0 = (int64_t *)(scratch + 2 * kbytes), *v1 = (int64_t *)(scratch + 2 * kbytes + vbytes);
  void *tmp = scratch + 2 * kbytes + 2 * vbytes;
  const char *x = (const char *)ingot_tensor_data(t);
  ingot_status st = INGOT_OK;
  sort_keys_kernel<KT><<<grid_for(numel, 256), 256, 0, s>>>(
      x, dt, es, g, n, numel, flip ? bits_mask(bits) : 0, bits, !two_pass && rbits > 0, k0, v0);
  st = launch_status(what);
  cub::DoubleBuffer<KT> kb(k0, k1);
  cub::DoubleBuffer<int64_t> vb(v0, v1);
  if (!st) st = cuda_check(radix_sort(tmp, tmp_bytes, kb, vb, numel, end_bit, s), what);
  if (!st && two_pass) {
    // Stable re-sort by row: each row keeps its key order. Row keys go into the key buffers
    // reinterpreted as 64-bit (KT is 64-bit whenever two_pass holds).
    static_assert(sizeof(UK) >= sizeof(KT), "");
    UK *r0 = (UK *)kb.Current(), *r1 = (UK *)kb.Alternate();
    if (sizeof(KT) != sizeof(UK)) st = ingot_set_error(INGOT_ERR_UNSUPPORTED, "%s: key", what);
    if (!st) {
      row_keys_kernel<<<grid_for(numel, 256), 256, 0, s>>>(vb.Current(), n, numel, r0);
      st = launch_status(what);
    }
    cub::DoubleBuffer<UK> rb(r0, r1);
    size_t tb = align_up(tmp_bytes);
    if (!st) st = cuda_check(radix_sort(tmp, tb, rb, vb, numel, rbits, s), what);
  }
  if (!st) {
    sort_gather_kernel<<<grid_for(rows * m, 256), 256, 0, s>>>(
        x, es, g, n, m, rows, vb.Current(), (char *)ingot_tensor_data(a->out[0]),
        (int64_t *)ingot_tensor_data(a->out[1]));
    st = launch_status(what);
  }
  cuda_scratch_free(dev, scratch, s);
  return st;
}

template <class C, int K>
ingot_status topk_small(ingot_op_args *a, int dev, cudaStream_t s, const RowGeom &g, int64_t n,
                        int64_t rows, int k, bool flip) {
  const ingot_tensor *t = a->in[0];
  int dt = ingot_dtype_of(t), es = (int)ingot_dtype_size(ingot_dtype_of(t));
  uint64_t fm = flip ? bits_mask(key_bits(dt)) : 0;
  // Parts per row: enough blocks to fill the GPU (4 per SM), at least 1024 elements a block.
  const int64_t target = 132 * 4, min_chunk = 1024;
  int64_t bpr = (target + rows - 1) / rows, most = (n + min_chunk - 1) / min_chunk;
  if (bpr > most) bpr = most;
  if (bpr < 1) bpr = 1;
  int64_t chunk = (n + bpr - 1) / bpr;
  bpr = (n + chunk - 1) / chunk;  // no empty parts
  const char *x = (const char *)ingot_tensor_data(t);
  char *vout = (char *)ingot_tensor_data(a->out[0]);
  int64_t *xout = (int64_t *)ingot_tensor_data(a->out[1]);
  int64_t blocks = rows * bpr;
  unsigned grid = (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16);
  C *cand = nullptr;
  if (bpr > 1) {
    cand = (C *)cuda_scratch_alloc(dev, sizeof(C) * (size_t)(blocks * k), s);
    if (!cand) return ingot_set_error(INGOT_ERR_OOM, "topk: out of device memory");
  }
  topk_part_kernel<C, K><<<grid, TOPK_THREADS, 0, s>>>(x, dt, es, g, n, k, rows, bpr, chunk, fm,
                                                       cand, vout, xout);
  ingot_status st = launch_status("topk");
  if (!st && bpr > 1) {
    unsigned g2 = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    topk_merge_kernel<C, K><<<g2, TOPK_THREADS, 0, s>>>(x, es, g, k, rows, bpr, cand, vout, xout);
    st = launch_status("topk");
  }
  if (cand) cuda_scratch_free(dev, cand, s);
  return st;
}

// ---- warp-list topk, host side ----

constexpr int kWtMaxDevices = 64, kWtStreams = 16;
constexpr int64_t kWtRows = 4096;              // counters per stream (rows of a fused call)
constexpr int64_t kWtCands = 4096 * 32;        // candidate slots per stream (blocks * k)
constexpr size_t kWtCntBytes = kWtRows * sizeof(unsigned);

// Per (device, stream): arrival counters (all 0 between launches: zeroed once at creation,
// reset by each row's last block) and candidate slots, allocated once and never grown or
// freed (launches on one stream run in order, so they never share them concurrently).
struct WtDev {
  std::once_flag once;
  int target = 0;  // resident blocks of wt_part_kernel on the whole device (0: unknown)
  std::mutex mu;
  int n = 0;
  cudaStream_t s[kWtStreams];
  char *buf[kWtStreams];
};
WtDev g_wt[kWtMaxDevices];

int wt_target(int dev) {
  WtDev &d = g_wt[dev];
  std::call_once(d.once, [&d, dev] {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wt_part_kernel<true, 4>,
                                                      TOPK_THREADS, 0) != cudaSuccess) {
      cudaGetLastError();
      per_sm = 2;
    }
    if (per_sm < 1) per_sm = 1;
    d.target = sm_count(dev) * per_sm;
  });
  return d.target > 0 ? d.target : 264;
}

// The stream's counters and candidate slots, or null (then two launches with scratch).
// Never while the stream captures a graph: replays may run on other streams, concurrently
// with eager work on this one.
char *wt_buffer(int dev, cudaStream_t s) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cap != cudaStreamCaptureStatusNone) return nullptr;
  WtDev &d = g_wt[dev];
  std::lock_guard<std::mutex> lock(d.mu);
  for (int i = 0; i < d.n; i++)
    if (d.s[i] == s) return d.buf[i];
  if (d.n == kWtStreams) return nullptr;
  char *p = nullptr;
  if (cudaMalloc((void **)&p, kWtCntBytes + kWtCands * sizeof(u64)) != cudaSuccess) {
    cudaGetLastError();
    p = nullptr;  // remembered as "none" for this stream
  } else if (cudaMemsetAsync(p, 0, kWtCntBytes, s) != cudaSuccess) {  // ordered before use on s
    cudaGetLastError();
    cudaFree(p);
    p = nullptr;
  }
  d.s[d.n] = s;
  d.buf[d.n++] = p;
  return p;
}

// topk with k <= 32 of a dtype whose keys fit 32 bits, rows shorter than 2^32.
ingot_status topk_warp(ingot_op_args *a, int dev, cudaStream_t s, const RowGeom &g, int64_t n,
                       int64_t rows, int k, bool flip) {
  const ingot_tensor *t = a->in[0];
  int dt = ingot_dtype_of(t), es = (int)ingot_dtype_size(ingot_dtype_of(t));
  uint32_t fm = flip ? (uint32_t)bits_mask(key_bits(dt)) : 0u;
  const char *x = (const char *)ingot_tensor_data(t);
  // float4 loads: f32, unit stride, every row start 16-byte aligned.
  bool vec = dt == INGOT_F32 && g.isd == 1 && ((uintptr_t)x & 15) == 0;
  for (int i = 0; i < g.nd && vec; i++)
    if (g.shape[i] > 1 && (g.ist[i] & 3) != 0) vec = false;
  // Parts per row: at most one wave of blocks over the device, >= 1024 elements a part; the
  // part length is a multiple of 4 (aligned float4 loads in every part).
  const int64_t target = wt_target(dev), min_chunk = 1024;
  int64_t bpr = target / rows, most = (n + min_chunk - 1) / min_chunk;
  if (bpr > most) bpr = most;
  if (bpr < 1) bpr = 1;
  int64_t chunk = (n + bpr - 1) / bpr;
  chunk = (chunk + 3) & ~(int64_t)3;
  bpr = (n + chunk - 1) / chunk;  // no empty parts
  char *vout = (char *)ingot_tensor_data(a->out[0]);
  int64_t *xout = (int64_t *)ingot_tensor_data(a->out[1]);
  int64_t blocks = rows * bpr;
  unsigned grid = (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16);
  u64 *cand = nullptr;
  unsigned *cnt = nullptr;
  bool scratch = false;
  if (bpr > 1) {
    char *buf = rows <= kWtRows && blocks * k <= kWtCands ? wt_buffer(dev, s) : nullptr;
    if (buf) {
      cnt = (unsigned *)buf;
      cand = (u64 *)(buf + kWtCntBytes);
    } else {
      cand = (u64 *)cuda_scratch_alloc(dev, sizeof(u64) * (size_t)(blocks * k), s);
      if (!cand) return ingot_set_error(INGOT_ERR_OOM, "topk: out of device memory");
      scratch = true;
    }
  }
  if (vec)
    wt_part_kernel<true, 4><<<grid, TOPK_THREADS, 0, s>>>(x, dt, es, g, n, k, rows, bpr, chunk,
                                                          fm, cand, cnt, vout, xout);
  else if (es == 1)
    wt_part_kernel<false, 1><<<grid, TOPK_THREADS, 0, s>>>(x, dt, es, g, n, k, rows, bpr, chunk,
                                                           fm, cand, cnt, vout, xout);
  else if (es == 2)
    wt_part_kernel<false, 2><<<grid, TOPK_THREADS, 0, s>>>(x, dt, es, g, n, k, rows, bpr, chunk,
                                                           fm, cand, cnt, vout, xout);
  else
    wt_part_kernel<false, 4><<<grid, TOPK_THREADS, 0, s>>>(x, dt, es, g, n, k, rows, bpr, chunk,
                                                           fm, cand, cnt, vout, xout);
  ingot_status st = launch_status("topk");
  if (!st && bpr > 1 && !cnt) {
    unsigned g2 = (unsigned)(rows < 65535 * 16 ? rows : 65535 * 16);
    wt_merge_kernel<<<g2, TOPK_THREADS, 0, s>>>(x, es, g, k, rows, bpr, cand, vout, xout);
    st = launch_status("topk");
  }
  if (scratch) cuda_scratch_free(dev, cand, s);
  return st;
}

template <class C>
ingot_status topk_bucket(ingot_op_args *a, int dev, cudaStream_t s, const RowGeom &g, int64_t n,
                         int64_t rows, int k, bool flip) {
  if (k <= 8) return topk_small<C, 8>(a, dev, s, g, n, rows, k, flip);
  if (k <= 16) return topk_small<C, 16>(a, dev, s, g, n, rows, k, flip);
  if (k <= 32 || sizeof(C) > 8) return topk_small<C, 32>(a, dev, s, g, n, rows, k, flip);
  if constexpr (sizeof(C) == 8) return topk_small<C, 64>(a, dev, s, g, n, rows, k, flip);
  return INGOT_OK;  // unreachable: pairs stop at k = 32
}

ingot_status k_sort_topk(ingot_op_args *a) {
  const ingot_tensor *t = a->in[0];
  bool topk = a->op == INGOT_OP_TOPK;
  const char *what = topk ? "topk" : "sort";
  int dt = ingot_dtype_of(t);
  if (dt == INGOT_C64 || dt == INGOT_C128)
    return ingot_set_error(INGOT_ERR_DTYPE, "%s(): not supported for complex dtype", what);
  int d = (int)a->iarg[0], nd = ingot_ndim(t);
  bool flip = topk ? a->iarg[2] != 0 : a->iarg[1] != 0;
  int64_t n = nd ? ingot_shape(t)[d] : 1, m = topk ? a->iarg[1] : n;
  int64_t numel = ingot_numel(t);
  if (numel == 0 || m == 0) return INGOT_OK;
  int dev = ingot_device_of(t).index;
  if (ingot_status st = cuda_use_device(dev)) return st;
  cudaStream_t s = stream_of(t);
  int64_t rows = 0;
  RowGeom g = make_rows(a, d, &rows);
  int bits = key_bits(dt);
  // Register top-k: packed candidates up to k = 64; key/position pairs (64-bit dtypes) up to
  // k = 32 (K = 64 pairs spill registers); the rest takes the full sort.
  if (topk && n < (int64_t)UINT32_MAX) {
    if (bits <= 32 && m <= 32 && dev < kWtMaxDevices) return topk_warp(a, dev, s, g, n, rows, (int)m, flip);
    if (bits <= 32 && m <= 64)
      return topk_bucket<unsigned long long>(a, dev, s, g, n, rows, (int)m, flip);
    if (bits == 64 && m <= 32) return topk_bucket<KP>(a, dev, s, g, n, rows, (int)m, flip);
  }
  if (bits + ceil_log2((uint64_t)rows) <= 32)
    return full_sort<uint32_t>(a, dev, s, g, n, rows, m, flip, what);
  return full_sort<unsigned long long>(a, dev, s, g, n, rows, m, flip, what);
}

}  // namespace

extern "C" void cuda_register_sort(ingot_backend *be) {
  be->kernels[INGOT_OP_SORT] = k_sort_topk;
  be->kernels[INGOT_OP_TOPK] = k_sort_topk;
}
