// CUDA kernels of the decode-time attention ops (contracts beside the fronts
// in src/core/ops_attention.c; CPU reference src/cpu/attention.c).
//
// Positions are read on the device and every launch's geometry depends only
// on shapes (T, heads, head_dim, cache capacity), never on the positions, so
// a captured decode step replays unchanged as pos advances:
// - rope: one thread per rotated pair; angle pos * inv_freq in double.
// - kv_cache_write: one thread per element; rows with pos outside [0, ctx)
//   are skipped (a check would need a host round trip).
// - attention_cached (flash-decoding): decode (T = 1) with a cache of at
//   most kClusterCtx rows, or any T with at most kSingleRows: a cluster of
//   kCluster blocks per (head, row) splits the live rows 0..pos[t] evenly
//   (sized on the device, so the launch is the same for any position; 256
//   threads a block when the grid fits on the SMs, else 128), each
//   block runs an online softmax over tiles of its rows, and the blocks
//   merge max, sums and outputs through distributed shared memory (one
//   launch, no scratch; pushes counted on an mbarrier, cluster_push.cuh,
//   not a cluster barrier). The decode head size 128 (Qwen3, Llama) with
//   the rope prologue is its own instantiation (DK), D and the lanes a row
//   compile-time: 3792 -> 2896 SASS instructions. Both measured on the
//   H200 (docs/perf-notes.md, fifteenth session): Qwen3-30B-A3B decode
//   +1.8 % (pushes, with gemv.cu's ONE epilogue) and +1.7 % (DK).
//   A longer cache is cut into at most kMaxChunks chunks (multiples of
//   kTile rows); block (chunk, head, row) writes a partial
//   (max, sum, acc[D]) of its rows of 0..pos[t]; blocks whose chunk starts
//   past pos[t] exit; a combine kernel per (head, row) merges the valid
//   partials. pos is clamped into [0, ctx).
// - rope_kv_write: a warp per (row, head of q, k or v): norm, rope, write.
// - rope_kv_attention: at T = 1 on the cluster path, attn_cluster_kernel
//   with rope_kv_write's work as a prologue (one launch; the first cache
//   rows are loaded before it, the new row patched in after; with settled
//   options pos, those rows and the prologue's weights before the PDL
//   wait); else the
//   rope_kv_write and attention_cached kernels.
// The decode kernels (rope_kv_write, attention_cached) launch with PDL
// (pdl.cuh) and wait before their first read.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <math.h>

#include "../core/env.h"
#include "../core/qkv_rope.h"
#include "cluster_push.cuh"
#include "cuda_common.cuh"
#include "ggml_blocks.cuh"
#define PDL_FAMILY "attn"  // INGOT_NO_PDL=attn turns this file's PDL off
#include "pdl.cuh"
#include "qgemv_stage.cuh"
#include "timeline.cuh"

namespace cg = cooperative_groups;

namespace {

const int kTile = 128;         // cache rows scored per pass of a block (shared scores)
const int kSingleRows = 512;   // T > 1, caches up to this long: a cluster per head, no combine
const int kClusterCtx = 8192;  // T = 1, caches up to this long: a cluster per head
const int kMaxChunks = 64;     // partials per (row, head)
const int kThreads = 128;      // 4 warps (partial kernel: a thread keeps 2 of D <= 256 outputs)
const int kCluster = 8;        // blocks a (head, row) of the cluster kernel: the portable maximum

__device__ __forceinline__ int clamp_pos(int p, int ctx) {
  return p < 0 ? 0 : p >= ctx ? ctx - 1 : p;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// ---- rope ----
__global__ void rope_kernel(const float *__restrict__ x, const int32_t *__restrict__ pos,
                            const double *__restrict__ inv, float *__restrict__ y, int64_t H,
                            int64_t D, int64_t n, bool neox) {
  int64_t half = D / 2;
  CUDA_GRID_STRIDE(j, n) {  // j = (t * H + h) * half + i
    int64_t i = j % half, th = j / half, t = th / H;
    double s, c;
    sincos((double)pos[t] * inv[i], &s, &c);
    float cf = (float)c, sf = (float)s;
    int64_t p = neox ? i : 2 * i, q = neox ? i + half : 2 * i + 1;
    const float *xi = x + th * D;
    float x0 = xi[p], x1 = xi[q];
    y[th * D + p] = x0 * cf - x1 * sf;
    y[th * D + q] = x0 * sf + x1 * cf;
  }
}

ingot_status k_rope(ingot_op_args *a) {
  ingot_status st = cuda_use_device_of(a->out[0]);
  if (st) return st;
  const int64_t *sh = ingot_shape(a->in[0]);
  int64_t n = sh[0] * sh[1] * (sh[2] / 2);
  if (n == 0) return INGOT_OK;
  rope_kernel<<<grid_for(n, 256), 256, 0, stream_of(a->out[0])>>>(
      (const float *)ingot_tensor_data(a->in[0]), (const int32_t *)ingot_tensor_data(a->in[1]),
      (const double *)ingot_tensor_data(a->in[2]), (float *)ingot_tensor_data(a->out[0]), sh[1],
      sh[2], n, a->iarg[0] != 0);
  return launch_status("rope kernel");
}

// ---- kv_cache_write ----
template <class C>
__global__ void kv_write_kernel(C *__restrict__ kc, C *__restrict__ vc, const float *__restrict__ k,
                                const float *__restrict__ v, const int32_t *__restrict__ pos,
                                int64_t row, int64_t ctx, int64_t n) {
  CUDA_GRID_STRIDE(j, n) {
    int64_t t = j / row, i = j % row;
    int p = pos[t];
    if (p < 0 || p >= ctx) continue;
    kc[p * row + i] = from_acc<C>(k[j]);
    vc[p * row + i] = from_acc<C>(v[j]);
  }
}

ingot_status k_kv_cache_write(ingot_op_args *a) {
  ingot_status st = cuda_use_device_of(a->out[0]);
  if (st) return st;
  const int64_t *sh = ingot_shape(a->in[0]);
  int64_t row = sh[1] * sh[2], n = sh[0] * row, ctx = ingot_shape(a->out[0])[0];
  if (n == 0) return INGOT_OK;
  cudaStream_t s = stream_of(a->out[0]);
  const float *k = (const float *)ingot_tensor_data(a->in[0]);
  const float *v = (const float *)ingot_tensor_data(a->in[1]);
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[2]);
  void *kc = ingot_tensor_data(a->out[0]), *vc = ingot_tensor_data(a->out[1]);
  if (ingot_dtype_of(a->out[0]) == INGOT_F16)
    kv_write_kernel<f16_t>
        <<<grid_for(n, 256), 256, 0, s>>>((f16_t *)kc, (f16_t *)vc, k, v, pos, row, ctx, n);
  else
    kv_write_kernel<float>
        <<<grid_for(n, 256), 256, 0, s>>>((float *)kc, (float *)vc, k, v, pos, row, ctx, n);
  return launch_status("kv_cache_write kernel");
}

// ---- rope_kv_write ----
// One warp per (row t, slot j): slots are the Hq query heads, then the Hkv
// key heads, then the Hkv value heads. The warp stages its head in shared
// memory, RMS-norms it (q/k with weights; the products of rms_norm_kernel),
// ropes it (q/k: rope_kernel's math) and writes it: q to out, k and v to the
// caches at pos[t] (rows outside [0, ctx) skipped).
const int kRkvWarps = 4;

struct RkvParams {
  const float *src[3];   // q, k, v
  int64_t rs[3], hs[3];  // row and head strides (elements)
  const int32_t *pos;
  const double *inv;
  const float *w[2];  // q_norm, k_norm or null
  float *qo;
  int T, Hq, Hkv, D, ctx;
  float eps;
  bool neox;
  bool settled;  // ROPE_KV_ATTENTION's iarg[7]: pos, inv, w and old cache rows before pdl_wait
};

// QMATMUL_ROPE_KV_ATTENTION's product (T = 1): the raw q|k|v rows of a head
// come from W [(Hq + 2 Hkv) D rows of rs bytes, a GGML type] times x [k]
// (RMS-normed with norm when given) instead of from R.src.
struct QkvParams {
  const uint8_t *w;
  int64_t rs;
  const float *x, *norm;
  float eps;  // of norm
  int k;
  bool stage;  // the block's rows fit in shared memory (qkv_smem): copied there
};
const int kQkvMaxK = 7168;   // x staged in dynamic shared memory (kXSkew layout): <= 32 KiB
const int kQkvRows = 96;     // qkv_block_rows at most (D <= 256)
const int kQkvSmem = 32768;  // dynamic shared memory for x and, when they fit, the rows

// Rows of the 3 D (q head, k and v heads) that each block of a cluster computes.
__host__ __device__ inline int qkv_block_rows(int D) { return (3 * D + kCluster - 1) / kCluster; }
// Bytes of x in shared memory (qgemv's kXSkew layout, a 16-byte multiple).
__host__ __device__ inline int64_t qkv_x_bytes(int k) {
  return (int64_t)(k + ggml::kUnit - 1) / ggml::kUnit * qgemv::kXSkew * 4;
}
// Bytes of dynamic shared memory of the QT kernel: x, then, when stage, the
// block's rows (rows of rs bytes) and the decoder's slack.
__host__ __device__ inline int64_t qkv_smem(int k, int D, int64_t rs, bool stage) {
  return qkv_x_bytes(k) + (stage ? qkv_block_rows(D) * rs + ggml::kSharedSlack : 0);
}

// Rows [j0, j1) of the product for one warp (rows j0 + w, j0 + w + nw, ...;
// lanes over a row's 32-element units, k a multiple of 32), pushed to yall[j]
// of every block of the cluster (counted on their bar).
// xs: x in qgemv's skewed layout (float4 reads without bank conflicts; plain
// units 32 floats apart put every lane on one bank). SH: row j is at base +
// (j - j0) * rs in shared memory, else at w + grow(j) * rs. Sums as qgemv's.
template <int QT, bool SH, class G>
__device__ __forceinline__ void qkv_rows(const uint8_t *base, int64_t rs, int k, const float *xs,
                                         int j0, int j1, int w, int nw, int lane, G grow,
                                         const float *yall, const uint64_t *bar) {
  const int units = k / ggml::kUnit;
  for (int j = j0 + w; j < j1; j += nw) {
    const uint8_t *row = SH ? base + (int64_t)(j - j0) * rs : base + grow(j) * rs;
    float acc[1][1] = {{0.f}};
    for (int u = lane; u < units; u += 32) {
      float v[1][ggml::kUnit];
      ggml::decode_unit<QT, SH>(row, u, k, true, v[0]);
      qgemv::dot_rows<1, 1, true>(v, xs + u * qgemv::kXSkew, 0, 1, ggml::kUnit, true, acc);
    }
    const float s = warp_sum(acc[0][0]);
    if (lane < kCluster) push_f32(&yall[j], s, bar, lane);
  }
}

// Pair i of y (D = 2 half values) rotated at position p (rope_kernel's
// math): its element indices a, b and values y0, y1.
struct RopePair {
  int a, b;
  float y0, y1;
};
// The cosine and sine of pair frequency f at position p.
struct RopeCS {
  float c, s;
};
__device__ __forceinline__ RopeCS rope_cs(int p, double f) {
  double sd, cd;
  sincos((double)p * f, &sd, &cd);
  return {(float)cd, (float)sd};
}
__device__ __forceinline__ RopePair rope_rot(const float *y, int i, int half, RopeCS cs,
                                             bool neox) {
  RopePair r;
  r.a = neox ? i : 2 * i, r.b = neox ? i + half : 2 * i + 1;
  float x0 = y[r.a], x1 = y[r.b];
  r.y0 = x0 * cs.c - x1 * cs.s, r.y1 = x0 * cs.s + x1 * cs.c;
  return r;
}
__device__ __forceinline__ RopePair rope_pair(const float *y, int i, int half, int p, double f,
                                              bool neox) {
  return rope_rot(y, i, half, rope_cs(p, f), neox);
}

// A head of D <= 256 values in one warp's registers: lane holds elements
// lane + 32 u (zeros past D); pair i = lane + 32 u of its rope.
constexpr int kHeadRegs = 8;
// x[lane + 32 u] (n values) into v[u]; zeros past n or when x is null: a
// head (n = D), its norm weights, or its rope frequencies (n = D / 2).
template <class T, int N>
__device__ __forceinline__ void head_load(const T *x, int n, int lane, T (&v)[N]) {
#pragma unroll
  for (int u = 0; u < N; u++) v[u] = x && lane + 32 * u < n ? x[lane + 32 * u] : T(0);
}
// The head in v RMS-normed with weights wt when norm (the products of
// rms_norm_kernel), stored to y.
template <int N>
__device__ __forceinline__ void head_norm_store(float (&v)[N], const float (&wt)[N], bool norm,
                                                float *y, int D, float eps, int lane) {
  if (norm) {
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < N; u++) ss = fmaf(v[u], v[u], ss);
    const float inv = inv_rms(warp_sum(ss), (float)D, eps);
#pragma unroll
    for (int u = 0; u < N; u++) v[u] = __fmul_rn(__fmul_rn(v[u], inv), wt[u]);
  }
#pragma unroll
  for (int u = 0; u < N; u++)
    if (lane + 32 * u < D) y[lane + 32 * u] = v[u];
}

// An L2 prefetch of the lines of [p, p + bytes), a line a lane of one warp:
// a hint (no registers, never waited for) for immutable data, so it may be
// issued before pdl_wait.
__device__ __forceinline__ void warp_prefetch_l2(const void *p, int64_t bytes, int lane) {
  const uintptr_t end = (uintptr_t)p + (uintptr_t)bytes;
  for (uintptr_t a = ((uintptr_t)p & ~(uintptr_t)127) + (uintptr_t)lane * 128; a < end;
       a += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

template <class C>
__global__ void __launch_bounds__(kRkvWarps * 32)
    rope_kv_kernel(RkvParams P, C *__restrict__ kc, C *__restrict__ vc) {
  __shared__ float buf[kRkvWarps][256];
  int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nslot = P.Hq + 2 * P.Hkv;
  float *y = buf[wi];
  pdl_wait();  // q, k, v and pos come from earlier kernels
  pdl_launch_dependents();
  for (int64_t g = (int64_t)blockIdx.x * kRkvWarps + wi; g < (int64_t)P.T * nslot;
       g += (int64_t)gridDim.x * kRkvWarps) {
    int t = (int)(g / nslot), j = (int)(g % nslot);
    int which = j < P.Hq ? 0 : j < P.Hq + P.Hkv ? 1 : 2;
    int h = which == 0 ? j : which == 1 ? j - P.Hq : j - P.Hq - P.Hkv;
    const float *x = P.src[which] + t * P.rs[which] + h * P.hs[which];
    const float *nw = which < 2 ? P.w[which] : nullptr;
    const int p = P.pos[t];  // loaded with the head's values, not after them
    float v[kHeadRegs], wt[kHeadRegs];
    double f[kHeadRegs / 2];
    head_load(x, P.D, lane, v);
    head_load(nw, P.D, lane, wt);
    head_load(which < 2 ? P.inv : nullptr, P.D / 2, lane, f);
    head_norm_store(v, wt, nw != nullptr, y, P.D, P.eps, lane);
    __syncwarp();
    int half = P.D / 2;
    bool in_cache = p >= 0 && p < P.ctx;
    int64_t crow = ((int64_t)p * P.Hkv + h) * P.D;
    if (which == 2) {
      if (in_cache)
        for (int i = lane; i < P.D; i += 32) vc[crow + i] = from_acc<C>(y[i]);
    } else {
#pragma unroll
      for (int u = 0; u < kHeadRegs / 2; u++) {
        const int i = lane + 32 * u;
        if (i >= half) break;
        const RopePair r = rope_pair(y, i, half, p, f[u], P.neox);
        if (which == 0) {
          float *o = P.qo + ((int64_t)t * P.Hq + h) * P.D;
          o[r.a] = r.y0;
          o[r.b] = r.y1;
        } else if (in_cache) {
          kc[crow + r.a] = from_acc<C>(r.y0);
          kc[crow + r.b] = from_acc<C>(r.y1);
        }
      }
    }
    __syncwarp();  // y is reused by the warp's next slot
  }
}

// ROPE_KV_WRITE's (and ROPE_KV_ATTENTION's) arguments as kernel parameters.
RkvParams rkv_params(const ingot_op_args *a) {
  const int64_t *qs = ingot_shape(a->out[0]), *cs = ingot_shape(a->out[1]);
  RkvParams P;
  for (int i = 0; i < 3; i++) {
    P.src[i] = (const float *)ingot_tensor_data(a->in[i]);
    P.rs[i] = a->iarg[1 + 2 * i];
    P.hs[i] = a->iarg[2 + 2 * i];
  }
  P.pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  P.inv = (const double *)ingot_tensor_data(a->in[4]);
  P.w[0] = a->nin > 5 ? (const float *)ingot_tensor_data(a->in[5]) : nullptr;
  P.w[1] = a->nin > 5 ? (const float *)ingot_tensor_data(a->in[6]) : nullptr;
  P.qo = (float *)ingot_tensor_data(a->out[0]);
  P.T = (int)qs[0], P.Hq = (int)qs[1], P.D = (int)qs[2], P.ctx = (int)cs[0], P.Hkv = (int)cs[1];
  P.eps = (float)a->farg[0];
  P.neox = a->iarg[0] != 0;
  P.settled = a->iarg[7] != 0;  // ROPE_KV_ATTENTION's hint (0 in ROPE_KV_WRITE's arguments)
  return P;
}

ingot_status k_rope_kv_write(ingot_op_args *a) {
  ingot_status st = cuda_use_device_of(a->out[0]);
  if (st) return st;
  const int64_t *qs = ingot_shape(a->in[0]), *cs = ingot_shape(a->out[1]);
  const RkvParams P = rkv_params(a);
  int64_t warps = qs[0] * (qs[1] + 2 * cs[1]);
  if (warps == 0) return INGOT_OK;
  int64_t blocks = (warps + kRkvWarps - 1) / kRkvWarps;
  unsigned grid = (unsigned)(blocks < 65535 ? blocks : 65535);
  cudaStream_t s = stream_of(a->out[0]);
  void *kc = ingot_tensor_data(a->out[1]), *vc = ingot_tensor_data(a->out[2]);
  if (ingot_dtype_of(a->out[1]) == INGOT_F16)
    launch_pdl(rope_kv_kernel<f16_t>, dim3(grid), dim3(kRkvWarps * 32), 0, s, P, (f16_t *)kc,
               (f16_t *)vc);
  else
    launch_pdl(rope_kv_kernel<float>, dim3(grid), dim3(kRkvWarps * 32), 0, s, P, (float *)kc,
               (float *)vc);
  return launch_status("rope_kv_write kernel");
}

// ---- attention_cached ----

// Block-wide reduction of one float per thread (kThreads threads).
template <bool MAX>
__device__ float block_reduce(float x, float *red) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  x = MAX ? warp_max(x) : warp_sum(x);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[w] = x;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < kThreads / 32; i++) r = MAX ? fmaxf(r, red[i]) : r + red[i];
  return r;
}

// ---- a cluster per (head, row) ----
// Block r of the cluster of (head h, row t) holds cache rows [r * chunk,
// (r + 1) * chunk) of 0..pos[t], chunk = ceil((pos[t] + 1) / kCluster) (none
// when it starts past pos[t]). Inside a block, lane groups of lr lanes take
// one cache row each (a lane holds up to kLaneVals of the D values, in
// vectors of V elements) and load kBatch rows before they compute, so many
// loads are in flight. Per tile of kTile rows:
// 1. scores into shared memory; the tile's max;
// 2. running max m' = max(m, tile max); the sums so far scaled by exp(m - m');
//    p = exp(score - m'); l += sum of p, a += p v (per lane).
// Then the lane groups' a merge into acc_b[D], and block b pushes m_b, l_b
// and its sums of block r's slice of D into block r's shared memory
// (st.async, counted on block r's mbarrier: cluster_push.cuh); once its
// bytes are in, block r writes out[t, h, d] = sum_b acc_b[d] f_b / sum_b l_b
// f_b, f_b = exp(m_b - M), M the cluster's max, from its own shared memory.
// No block reads another's after its pushes, so none waits for the others
// before it exits (the pulled form's second barrier: H200 Qwen3-30B-A3B
// decode +0.8 % bf16, +1.2 % fp8 without it; a cluster barrier in place of
// the mbarrier costs a GPU-scope memory barrier).
// As the CPU: NaN scores and all -inf rows give NaN; -inf scores weigh 0.
const int kLaneVals = 8;       // values of a row a lane holds (D <= 32 lanes * 8)
const int kBatch = 4;          // rows a lane group loads before it computes
__device__ float4 kNoRow[64];  // a cache row's worth of zeros (256 floats) no kernel writes

// V consecutive cache elements from p (V-element aligned when V is 4) as f32.
template <int V>
__device__ __forceinline__ void load_vec(const float *p, float *x) {
  if (V == 4) {
    float4 f = *reinterpret_cast<const float4 *>(p);
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
  } else {
    x[0] = p[0];
  }
}
template <int V>
__device__ __forceinline__ void load_vec(const f16_t *p, float *x) {
  if (V == 4) {
    uint2 u = *reinterpret_cast<const uint2 *>(p);
    float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
    float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
    x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
  } else {
    x[0] = to_acc(p[0]);
  }
}

// Lane value i holds element (sub + i / V * lr) * V + i % V of a row; x[u]
// gets row j0 + u * step of rows (stride rs), zeros past row n or past D.
// Every load is issued before any value is used. SUB: row snew_j is taken
// from snew (shared memory, D values) instead: its load reads kNoRow (never
// written, so no load races the kernel's own write of that row, and the
// loads stay one unconditional batch), then the values are replaced.
// load_rows' second step (SUB): row snew_j's values from snew.
template <int V>
__device__ __forceinline__ void patch_rows(int j0, int step, int n, int sub, int lr, int nv,
                                           float (&x)[kBatch][kLaneVals], int snew_j,
                                           const float *snew) {
#pragma unroll
  for (int u = 0; u < kBatch; u++) {
    int j = j0 + u * step;
#pragma unroll
    for (int k = 0; k < kLaneVals / V; k++) {
      int v = sub + k * lr;
      if (j == snew_j && j < n && v < nv)
#pragma unroll
        for (int e = 0; e < V; e++) x[u][k * V + e] = snew[v * V + e];
    }
  }
}

// PATCH false: the loads only (patch_rows later, once snew is written).
template <class C, int V, bool SUB = false, bool PATCH = true>
__device__ __forceinline__ void load_rows(const C *rows, int64_t rs, int j0, int step, int n,
                                          int sub, int lr, int nv, float (&x)[kBatch][kLaneVals],
                                          int snew_j = -1, const float *snew = nullptr) {
#pragma unroll
  for (int u = 0; u < kBatch; u++) {
    int j = j0 + u * step;
    const C *row = SUB && j == snew_j ? reinterpret_cast<const C *>(kNoRow) : rows + j * rs;
#pragma unroll
    for (int k = 0; k < kLaneVals / V; k++) {
      int v = sub + k * lr;
      if (j < n && v < nv) {
        load_vec<V>(row + (int64_t)v * V, &x[u][k * V]);
      } else {
#pragma unroll
        for (int e = 0; e < V; e++) x[u][k * V + e] = 0.f;
      }
    }
  }
  if (SUB && PATCH) patch_rows<V>(j0, step, n, sub, lr, nv, x, snew_j, snew);
}

// Lanes a cache row in attn_cluster_kernel: the fewest (8, 16 or 32) that
// keep a lane's share of the row within kLaneVals values.
__host__ __device__ constexpr int cluster_lanes(int D, int V) {
  int nv = D / V, lr = 8;
  while (lr < 32 && (nv + lr - 1) / lr > kLaneVals / V) lr *= 2;
  return lr;
}

// Weight of score s relative to the running max mn: -inf scores weigh 0
// even while mn is -inf (exp(-inf - -inf) would be NaN), NaN stays NaN.
__device__ __forceinline__ float score_weight(float s, float mn) {
  return s == -INFINITY ? 0.f : expf(s - mn);
}

// ROPE (ROPE_KV_ATTENTION, T = 1): q is rope_kv_write's work done in a
// prologue, from R's raw q, k, v (R.qo unused, q null): every block norms
// and ropes its q head (warp 0, as rope_kv_kernel does; the raw head, its
// norm weights and frequencies loaded with pos in one round trip: H200
// Qwen3-30B-A3B decode +2 % with moe_block's phase 1b loads).
// The block whose rows hold the new row pos (in [0, ctx)) also norms and
// ropes k and makes v (warps 1, 2), each value rounded to C, and takes row
// pos from shared memory instead of the cache, so no cache element is both
// written and read in the launch (the caches stay read-only, non-coherent
// loads: no fence needed). Of the Hq / Hkv heads of a kv head, only the
// first one's block writes the row to kw, vw (the others compute the same
// bits for their own use). Bad positions: nothing written, the clamped row
// read from the cache, q roped at the raw position, as the two kernels.
// QT >= 0 (QMATMUL_ROPE_KV_ATTENTION, with ROPE): the raw q, k, v heads are
// the cluster's own product first: the 3 D rows of W that make q head h and
// k, v head h / (Hq / Hkv) split over the cluster's blocks (a warp a row,
// x staged and normed in shared memory; the rows' weights copied into
// shared memory (cp.async) while the kernel before drains, or prefetched
// into L2 when they do not fit: Q.stage), each row pushed into every
// block's shared memory (st.async, counted on its qbar: no cluster barrier).
// DK: the head size compiled in (launch_cluster's 128, the QT kernels' 64:
// H200 Qwen3-30B-A3B decode +1.7 %, SmolLM2 +6.2 %).
template <class C, int V, bool ROPE, int NT, int QT = -1, int DK = 0>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(NT, QT >= 0 ? 1 : 0)
    attn_cluster_kernel(const float *__restrict__ q, const C *__restrict__ kc,
                        const C *__restrict__ vc, const int32_t *__restrict__ pos,
                        float *__restrict__ out, int Hq, int Hkv, int Darg, int ctx, int lrarg,
                        float scale, RkvParams R, C *kw, C *vw, QkvParams Q) {
  TL_SCOPE(kTlAttention);
  // DK > 0: the head size (and so the lanes a row) fixed at compile time.
  const int D = DK ? DK : Darg, lr = DK ? cluster_lanes(DK, V) : lrarg;
  constexpr int HR = DK ? DK / 32 : kHeadRegs;  // a head's values a lane
  static_assert(DK % 64 == 0 && DK <= 256, "rope pairs: HR / 2 registers");
  __shared__ float sc[kTile];             // scores of the block's current tile
  __shared__ float part[NT * kLaneVals];  // sums of p v of each lane group [group][D]
  __shared__ float rq[ROPE ? 256 : 1], rk[ROPE ? 256 : 1], rv[ROPE ? 256 : 1];  // roped q; row pos
  extern __shared__ float xs[];                                                 // QT: x [k], normed
  // Pushed by every block b of the cluster: its max and sum, and its sums of
  // this block's slice of the output.
  __shared__ __align__(8) float rstat[kCluster][2];
  __shared__ float racc[kCluster][256 / kCluster];
  __shared__ uint64_t rbar;  // counts the bytes pushed into rstat and racc
  // QT: the 3 D raw rows of q | k | v, pushed by the blocks that make them,
  // in part's space (part is first written after the prologue's barrier,
  // which warp 0 passes only once every row has landed); qbar counts them.
  float *yall = part;
  static_assert(QT < 0 || NT * kLaneVals >= 3 * 256, "yall: 3 D <= 768 floats in part");
  __shared__ uint64_t qbar;
  cg::cluster_group cluster = cg::this_cluster();
  const int r = (int)cluster.block_rank(), h = blockIdx.y, t = blockIdx.z;
  const int per = (D + kCluster - 1) / kCluster;  // output values a block
  if (threadIdx.x == 0) {  // from every block: m and l, and its sums of this block's slice
    push_bar_init(&rbar);
    push_bar_expect(&rbar, kCluster * (4 * (uint32_t)max(0, min(per, D - r * per)) + 8));
    if constexpr (QT >= 0) {
      push_bar_init(&qbar);
      push_bar_expect(&qbar, 3 * 4 * (uint32_t)D);
    }
  }
  // Blocks write into each other's shared memory only once all have started
  // (and their bars are initialised): arrive now, wait before the first push.
  __cluster_barrier_arrive_relaxed();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  // QT: rows [j0, j1) of the 3 D (q head h, k and v of its kv head); grow(j)
  // is row j's index in W.
  const int rpb = qkv_block_rows(D), j0 = min(r * rpb, 3 * D), j1 = min(j0 + rpb, 3 * D),
            kvh0 = h / (Hq / Hkv);
  auto grow = [&](int j) -> int64_t {
    return j < D ? (int64_t)h * D + j
                 : (int64_t)(j < 2 * D ? Hq + kvh0 : Hq + Hkv + kvh0) * D + j % D;
  };
  // ROPE: the prologue's norm weights and frequencies into L2 while the
  // kernel before drains (a prefetch: an op may take them from the kernel
  // just before, which register loads here could outrun).
  if constexpr (ROPE) {
    if (w < 2 && R.w[w]) warp_prefetch_l2(R.w[w], (int64_t)D * 4, lane);
    if (w == 2) warp_prefetch_l2(R.inv, (int64_t)D / 2 * 8, lane);
  }
  uint8_t *wsm = reinterpret_cast<uint8_t *>(xs) + qkv_x_bytes(Q.k);  // QT, Q.stage
  if constexpr (QT >= 0) {  // weights only: immutable, so before pdl_wait
    if (Q.stage) {
      const int per = (int)(Q.rs / 16), nch = (j1 - j0) * per;
      for (int c = threadIdx.x; c < nch; c += NT)
        cp_async16(wsm + (int64_t)c * 16,
                   Q.w + grow(j0 + c / per) * Q.rs + (int64_t)(c % per) * 16);
      cp_async_commit();
    } else {
      for (int j = j0 + w; j < j1; j += NT / 32) warp_prefetch_l2(Q.w + grow(j) * Q.rs, Q.rs, lane);
    }
  }
  float4 g[qgemv::kStageRound];  // QT: norm_first's, when gpre
  const bool gpre = QT >= 0 && Q.norm && qgemv::stage_one_round(Q.k);
  if constexpr (QT >= 0) {
    if (gpre)
      qgemv::norm_first(Q.norm, Q.k, g);
    else if (w == NT / 32 - 1 && Q.norm)
      warp_prefetch_l2(Q.norm, (int64_t)Q.k * 4, lane);
  }
  const int nv = D / V, grp = threadIdx.x / lr, sub = threadIdx.x % lr, ngrp = NT / lr;
  const int64_t rs = (int64_t)Hkv * D;  // elements from one cache row to the next
  int npos = 0, chunk = 0, start = 0, n = 0, jnew = -1, prow = 0;
  int64_t first = 0;
  bool holds = false, prev = false, prek = false;
  // ROPE: the first tile's V rows and first batch of K rows (the rows of
  // earlier steps; row pos reads kNoRow) are in flight during the prologue,
  // patched from rk, rv after it (jnew: the block's row 0..n taken from
  // them). pre*: they are in xv, x (uniform).
  float xv[kBatch][kLaneVals], x[kBatch][kLaneVals];
  // The live rows 0..pos[t] split evenly over the cluster (read on the
  // device, so a captured launch fits every position); t = 0 with ROPE.
  auto live_rows = [&]() {
    prow = pos[t];  // the new row
    npos = clamp_pos(prow, ctx) + 1, chunk = (npos + kCluster - 1) / kCluster;
    start = min(r * chunk, npos), n = min(start + chunk, npos) - start;
    first = (int64_t)start * rs + (int64_t)(h / (Hq / Hkv)) * D;
    if constexpr (ROPE) {
      holds = prow >= 0 && prow < ctx && prow >= start && prow < start + n;  // uniform
      if (holds) jnew = prow - start;
      if (n > 0) {
        const int nt = min(kTile, n);
        load_rows<C, V, true, false>(vc + first, rs, grp, ngrp, nt, sub, lr, nv, xv, jnew, rv);
        load_rows<C, V, true, false>(kc + first, rs, grp, ngrp, nt, sub, lr, nv, x, jnew, rk);
        prev = prek = true;
      }
    }
  };
  // Settled inputs (the caller's word: the kernel before did not write them,
  // and ours trigger their dependents only after their own wait, so every
  // earlier writer has completed): pos, the live rows' first loads and the
  // prologue's weights go out before the wait, while the kernel before
  // drains (H200, Qwen3-30B-A3B decode: the attention ends ~0.6 us sooner;
  // bf16 +0.7 %, fp8 even). Else all of them after it.
  const bool early = ROPE && QT < 0 && R.settled;  // QT: not plumbed (SmolLM2 measured as is)
  float hv[HR], hw[HR];
  double hf[HR / 2];
  RopeCS hcs[HR / 2];
  // ROPE: the norm weights and frequencies (warps 0, 1: q, k; 2: v, no norm,
  // no rope), then each of the lane's pairs' cosine and sine at pos, made in
  // the rotation. ahead: with settled inputs the decode instantiation makes
  // them before the wait, so the double sincos (~0.4 us a warp) leaves the
  // prologue's chain: the attention ends ~0.1 us sooner (H200 timeline,
  // Qwen3-30B-A3B; late blocks pass their wait later). Not with QT (all its
  // warps stage x and run the product) nor D unknown at compile time (it
  // spilled with them beside the rows in flight).
  auto rope_weights = [&]() {
    if (w < 2) {
      head_load(R.w[w], D, lane, hw);
      head_load(R.inv, D / 2, lane, hf);
    }
  };
  const bool ahead = early && DK > 0;
  auto rope_angles = [&]() {
    if (w < 2)
#pragma unroll
      for (int u = 0; u < HR / 2; u++)
        if (lane + 32 * u < D / 2) hcs[u] = rope_cs(prow, hf[u]);
  };
  if (early) {
    live_rows();
    rope_weights();
    if (ahead) rope_angles();
  }
  pdl_wait();  // q, the caches and pos come from earlier kernels
  pdl_launch_dependents();
  TL_MARK();  // timeline mark 0: the wait is over
  // ROPE: the prologue's weights (unless settled: loaded above) and, without
  // QT, the raw heads (q; k, v of the kv head, used only by the block that
  // holds row pos) loaded at once with pos: one round trip, where it was four
  // in a row (pos, q, weights, frequencies).
  if constexpr (ROPE) {
    if (!early) rope_weights();
    if constexpr (QT < 0)
      if (w < 3) head_load(R.src[w] + (int64_t)(w == 0 ? h : kvh0) * R.hs[w], D, lane, hv);
  }
  if (!early) live_rows();
  if constexpr (ROPE) {
    TL_MARK();  // mark 1 (ROPE): pos has arrived, the first rows' loads issued
    if constexpr (QT >= 0) {
      if (Q.stage) cp_async_wait_all();
      // x normed as qgemv stages it; its closing barrier also makes the
      // staged rows visible to the block.
      qgemv::stage_x1(Q.x, Q.k, false, Q.norm, Q.eps, xs, g, gpre);
      __cluster_barrier_wait();  // every block started: the pushes may go
      if (Q.stage)
        qkv_rows<QT, true>(wsm, Q.rs, Q.k, xs, j0, j1, w, NT / 32, lane, grow, yall, &qbar);
      else
        qkv_rows<QT, false>(Q.w, Q.rs, Q.k, xs, j0, j1, w, NT / 32, lane, grow, yall, &qbar);
    }
    if (w == 0 || (holds && w < 3)) {
      float *y = w == 0 ? rq : w == 1 ? rk : rv;
      if constexpr (QT >= 0) {  // the raw head, once every block's rows have landed
        push_bar_wait(&qbar);
#pragma unroll
        for (int u = 0; u < HR; u++) {
          const int i = lane + 32 * u;
          hv[u] = i < D ? yall[w * D + i] : 0.f;
        }
      }
      head_norm_store(hv, hw, w < 2 && R.w[w], y, D, R.eps, lane);
      TL_MARK();  // mark 2 (ROPE): q has arrived, normed
      __syncwarp();
      const bool writer = holds && h % (Hq / Hkv) == 0;
      const int64_t crow = ((int64_t)prow * Hkv + kvh0) * D;
      if (w == 2) {
        for (int i = lane; i < D; i += 32) {
          const C c = from_acc<C>(y[i]);
          if (writer) vw[crow + i] = c;
          y[i] = to_acc(c);
        }
      } else {
        if (!ahead) rope_angles();
#pragma unroll
        for (int u = 0; u < HR / 2; u++) {  // pairs apart: in place per lane
          const int i = lane + 32 * u;
          if (i >= D / 2) break;
          const RopePair rp = rope_rot(y, i, D / 2, hcs[u], R.neox);
          if (w == 0) {
            y[rp.a] = rp.y0, y[rp.b] = rp.y1;
          } else {
            const C c0 = from_acc<C>(rp.y0), c1 = from_acc<C>(rp.y1);
            if (writer) kw[crow + rp.a] = c0, kw[crow + rp.b] = c1;
            y[rp.a] = to_acc(c0), y[rp.b] = to_acc(c1);
          }
        }
      }
    }
    __syncthreads();
    TL_MARK();  // mark 3 (ROPE): the prologue is done
    if (prev) {
      const int nt = min(kTile, n);
      patch_rows<V>(grp, ngrp, nt, sub, lr, nv, xv, jnew, rv);
      patch_rows<V>(grp, ngrp, nt, sub, lr, nv, x, jnew, rk);
    }
  }
  const float *qi = ROPE ? rq : q + ((int64_t)t * Hq + h) * D;
  float qv[kLaneVals];
#pragma unroll
  for (int i = 0; i < kLaneVals; i++) {
    int v = sub + i / V * lr;
    qv[i] = v < nv ? qi[v * V + i % V] : 0.f;
  }
  // Tiles of kTile rows, softmax online: m = running max (uniform over the
  // block), l = sum of weights (warp 0), a = this lane's sums of p v.
  float m = -INFINITY, l = 0.f, a[kLaneVals] = {};
  for (int s0 = 0; s0 < n; s0 += kTile) {  // n and s0 are uniform over the block
    const int nt = min(kTile, n - s0);
    const C *kt = kc + first + (int64_t)s0 * rs, *vt = vc + first + (int64_t)s0 * rs;
    // The first batch of V rows loads while the scores run.
    if (!prev) load_rows<C, V, ROPE>(vt, rs, grp, ngrp, nt, sub, lr, nv, xv, jnew - s0, rv);
    prev = false;
    // 1. Scores. jb is uniform over the block, so whole warps run the shuffles.
    for (int jb = 0; jb < nt; jb += kBatch * ngrp) {
      if (!prek) load_rows<C, V, ROPE>(kt, rs, jb + grp, ngrp, nt, sub, lr, nv, x, jnew - s0, rk);
      prek = false;
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < kLaneVals; i++) d = fmaf(qv[i], x[u][i], d);
        for (int o = lr / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        int j = jb + u * ngrp + grp;
        if (sub == 0 && j < nt) sc[j] = d * scale;
      }
    }
    __syncthreads();
    if (s0 == 0) TL_MARK();  // the first tile's scores
    // 2. The tile's max (every warp alike; fmaxf skips NaN scores, as the
    // CPU), the rescale of what came before, the weighted V rows.
    float tm = -INFINITY;
    for (int j = lane; j < nt; j += 32) tm = fmaxf(tm, sc[j]);
    const float mn = fmaxf(m, warp_max(tm));
    const float corr = m == -INFINITY ? 0.f : expf(m - mn);
    if (w == 0) {
      float ts = 0.f;
      for (int j = lane; j < nt; j += 32) ts += score_weight(sc[j], mn);
      l = l * corr + warp_sum(ts);
    }
#pragma unroll
    for (int i = 0; i < kLaneVals; i++) a[i] *= corr;
    for (int jb = 0; jb < nt; jb += kBatch * ngrp) {
      if (jb > 0) load_rows<C, V, ROPE>(vt, rs, jb + grp, ngrp, nt, sub, lr, nv, xv, jnew - s0, rv);
#pragma unroll
      for (int u = 0; u < kBatch; u++) {
        int j = jb + u * ngrp + grp;
        float p = j < nt ? score_weight(sc[j], mn) : 0.f;  // rows past nt: zeros, never NaN
#pragma unroll
        for (int i = 0; i < kLaneVals; i++) a[i] = fmaf(p, xv[u][i], a[i]);
      }
    }
    m = mn;
    __syncthreads();  // sc is rewritten by the next tile
  }
#pragma unroll
  for (int i = 0; i < kLaneVals; i++) {
    int v = sub + i / V * lr;
    if (v < nv) part[grp * D + v * V + i % V] = a[i];
  }
  TL_MARK();  // the block's rows are done
  __syncthreads();
  if constexpr (QT < 0) __cluster_barrier_wait();
  for (int d = threadIdx.x; d < D; d += NT) {
    float s = 0.f;
    for (int g = 0; g < ngrp; g++) s += part[g * D + d];
    push_f32(&racc[r][d % per], s, &rbar, d / per);
  }
  if (threadIdx.x < kCluster) push_f32x2(&rstat[r][0], m, l, &rbar, threadIdx.x);  // warp 0 holds l
  // Every push into this block has landed. Each block pushes to every other
  // after its reads of their memory (QT's gather), so none is read after
  // this and the block may exit.
  push_bar_wait(&rbar);
  TL_MARK();  // every push into the block has landed
  // 3. Block r's slice of the output: the blocks' sums rescaled to the
  // cluster's max M (a block without rows: m = -inf, weight 0). All scores
  // -inf: L = 0 and the head is NaN, as on the CPU.
  float M = -INFINITY;
#pragma unroll
  for (int b = 0; b < kCluster; b++) M = fmaxf(M, rstat[b][0]);
  for (int i = threadIdx.x; i < per; i += NT) {
    int d = r * per + i;
    if (d >= D) break;
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int b = 0; b < kCluster; b++) {
      const float mb = rstat[b][0];
      const float f = mb == -INFINITY ? 0.f : expf(mb - M);
      L = fmaf(rstat[b][1], f, L);
      A = fmaf(racc[b][i], f, A);
    }
    out[((int64_t)t * Hq + h) * D + d] = A / L;
  }
  TL_MARK();  // the block's slice written
}

// R null: attention_cached's kernel; else the ROPE prologue's (T = 1).
template <class C>
void launch_cluster(const float *q, const void *kc, const void *vc, const int32_t *pos, float *out,
                    int T, int Hq, int Hkv, int D, int ctx, float scale, int dev, cudaStream_t s,
                    const RkvParams *R = nullptr) {
  const C *k = (const C *)kc, *v = (const C *)vc;
  C *kw = (C *)kc, *vw = (C *)vc;  // written only through these (the ROPE prologue)
  const RkvParams P = R ? *R : RkvParams{};
  // Vectors of 4 need 4-element aligned rows: D % 4 == 0 and aligned bases.
  uintptr_t al = 4 * sizeof(C);
  bool vec = D % 4 == 0 && (uintptr_t)kc % al == 0 && (uintptr_t)vc % al == 0;
  dim3 grid((unsigned)kCluster, (unsigned)Hq, (unsigned)T);
  const int lr = cluster_lanes(D, vec ? 4 : 1);
  // A grid that leaves SMs idle (few heads) takes 256-thread blocks: twice
  // the rows in flight a block (SmolLM2's 72 blocks: +3.8 % decode; Qwen3's
  // 256 blocks lost 9 % with them).
  const bool wide = (int64_t)kCluster * Hq * T <= sm_count(dev);
#define LAUNCH_NT(VV, RR, NT, DK)                                                                 \
  launch_pdl(attn_cluster_kernel<C, VV, RR, NT, -1, DK>, grid, dim3(NT), 0, s, q, k, v, pos, out, \
             Hq, Hkv, D, ctx, lr, scale, P, kw, vw, QkvParams{})
#define LAUNCH_CLUSTER_D(VV, RR, DK)   \
  do {                                 \
    if (wide)                          \
      LAUNCH_NT(VV, RR, 256, DK);      \
    else                               \
      LAUNCH_NT(VV, RR, kThreads, DK); \
  } while (0)
#define LAUNCH_CLUSTER(VV, RR) LAUNCH_CLUSTER_D(VV, RR, 0)
  // The decode head size of common models compiled in: a shorter kernel.
  if (vec && R && D == 128)
    LAUNCH_CLUSTER_D(4, true, 128);
  else if (vec && R)
    LAUNCH_CLUSTER(4, true);
  else if (vec)
    LAUNCH_CLUSTER(4, false);
  else if (R)
    LAUNCH_CLUSTER(1, true);
  else
    LAUNCH_CLUSTER(1, false);
#undef LAUNCH_CLUSTER
#undef LAUNCH_CLUSTER_D
#undef LAUNCH_NT
}

// QMATMUL_ROPE_KV_ATTENTION's one launch (T = 1, vector rows, 256 threads):
// false (nothing launched) for a type without an instantiation.
template <class C>
bool launch_qkv_cluster(int type, const QkvParams &Q, const void *kc, const void *vc,
                        const int32_t *pos, float *out, int Hq, int Hkv, int D, int ctx,
                        float scale, cudaStream_t s, const RkvParams &P) {
  const C *k = (const C *)kc, *v = (const C *)vc;
  const dim3 grid((unsigned)kCluster, (unsigned)Hq, 1);
  const int lr = cluster_lanes(D, 4);
  const size_t smem = (size_t)qkv_smem(Q.k, D, Q.rs, Q.stage);
  // The head size of the small models this path serves (SmolLM2, Qwen2.5
  // 0.5B: 64) compiled in, as launch_cluster's 128.
#define LAUNCH_QKV_D(QT, DK)                                                                     \
  launch_pdl(attn_cluster_kernel<C, 4, true, 256, QT, DK>, grid, dim3(256), smem, s, nullptr, k, \
             v, pos, out, Hq, Hkv, D, ctx, lr, scale, P, (C *)kc, (C *)vc, Q)
#define LAUNCH_QKV(QT)      \
  case QT:                  \
    if (D == 64)            \
      LAUNCH_QKV_D(QT, 64); \
    else                    \
      LAUNCH_QKV_D(QT, 0);  \
    return true;
  switch (type) {  // the block types of attention weights in common GGUF files
    LAUNCH_QKV(INGOT_GGML_Q4_0)
    LAUNCH_QKV(INGOT_GGML_Q4_1)
    LAUNCH_QKV(INGOT_GGML_Q8_0)
    LAUNCH_QKV(INGOT_GGML_Q4_K)
    LAUNCH_QKV(INGOT_GGML_Q6_K)
    default:
      return false;
  }
#undef LAUNCH_QKV
#undef LAUNCH_QKV_D
}

// Whether attention_cached runs one attn_cluster_kernel launch: a cluster
// per (head, row), no partials: decode (T = 1) up to kClusterCtx rows, rows
// of a longer T up to kSingleRows (many rows: the tiled prefill kernel).
bool cluster_path(int T, int D, int ctx) {
  return !cuda_attention_prefill_handles(T, D) && ctx <= (T == 1 ? kClusterCtx : kSingleRows);
}

// ---- longer caches: chunks and a combine ----
// Partial of block (chunk c, head h, row t) of a cache longer than
// kSingleRows: m = max score, l = sum of exp(score - m), acc[d] = sum of
// exp(score - m) v[d] over the chunk's rows <= pos[t]. part index = (t * Hq +
// h) * nchunks + c.
template <class C>
__global__ void __launch_bounds__(kThreads)
    attn_partial_kernel(const float *__restrict__ q, const C *__restrict__ kc,
                        const C *__restrict__ vc, const int32_t *__restrict__ pos,
                        float *__restrict__ part_ml, float *__restrict__ part_acc, int Hq, int Hkv,
                        int D, int ctx, int chunk, float scale) {
  __shared__ float qs[256];
  __shared__ float sc[kTile];
  __shared__ float red[kThreads / 32];
  int c = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  pdl_wait();  // before any read and before the early exit (pdl.cuh)
  pdl_launch_dependents();
  int npos = clamp_pos(pos[t], ctx) + 1;
  int start = c * chunk;
  if (start >= npos) return;  // past this row's position: the combine skips it
  int end = min(start + chunk, npos);
  int kh = h / (Hq / Hkv), nch = gridDim.x;
  const float *qi = q + ((int64_t)t * Hq + h) * D;
  for (int i = threadIdx.x; i < D; i += kThreads) qs[i] = qi[i];
  __syncthreads();
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, sub = lane & 7;
  float m = -INFINITY, l = 0, acc0 = 0, acc1 = 0;
  int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;
  for (int s0 = start; s0 < end; s0 += kTile) {
    int n = min(kTile, end - s0);
    // 8 lanes a cache row, 4 rows a warp: independent loads in flight.
    for (int jb = w * 4; jb < n; jb += kThreads / 8) {
      int j = jb + (lane >> 3);
      float d = 0;
      if (j < n) {
        const C *kr = kc + ((int64_t)(s0 + j) * Hkv + kh) * D;
        for (int i = sub; i < D; i += 8) d += qs[i] * to_acc(kr[i]);
      }
      for (int o = 4; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      if (sub == 0 && j < n) sc[j] = d * scale;
    }
    __syncthreads();
    float tm = -INFINITY;
    for (int j = threadIdx.x; j < n; j += kThreads) tm = fmaxf(tm, sc[j]);
    tm = block_reduce<true>(tm, red);
    float mn = fmaxf(m, tm);
    // All scores -inf (or NaN): keep the weights finite as the CPU does.
    float corr = m == -INFINITY ? 0.f : expf(m - mn);
    float ts = 0;
    for (int j = threadIdx.x; j < n; j += kThreads) ts += sc[j] = expf(sc[j] - mn);
    __syncthreads();  // sc now holds weights for every thread
    ts = block_reduce<false>(ts, red);
    l = l * corr + ts;
    acc0 *= corr;
    acc1 *= corr;
#pragma unroll 4
    for (int j = 0; j < n; j++) {
      const C *vr = vc + ((int64_t)(s0 + j) * Hkv + kh) * D;
      float p = sc[j];
      if (d0 < D) acc0 += p * to_acc(vr[d0]);
      if (d1 < D) acc1 += p * to_acc(vr[d1]);
    }
    m = mn;
    __syncthreads();  // before the next tile overwrites sc
  }
  int64_t pi = ((int64_t)t * Hq + h) * nch + c;
  if (threadIdx.x == 0) {
    part_ml[2 * pi] = m;
    part_ml[2 * pi + 1] = l;
  }
  if (d0 < D) part_acc[pi * D + d0] = acc0;
  if (d1 < D) part_acc[pi * D + d1] = acc1;
}

// out[t, h, d] from the partials of the chunks that hold rows <= pos[t].
__global__ void attn_combine_kernel(const float *__restrict__ part_ml,
                                    const float *__restrict__ part_acc,
                                    const int32_t *__restrict__ pos, float *__restrict__ out,
                                    int Hq, int D, int ctx, int chunk, int nch) {
  int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  pdl_wait();
  pdl_launch_dependents();
  if (d >= D) return;
  int nvalid = clamp_pos(pos[t], ctx) / chunk + 1;
  int64_t base = ((int64_t)t * Hq + h) * nch;
  float M = -INFINITY;
  for (int c = 0; c < nvalid; c++) M = fmaxf(M, part_ml[2 * (base + c)]);
  float L = 0, acc = 0;
  for (int c = 0; c < nvalid; c++) {
    float mc = part_ml[2 * (base + c)];
    float f = mc == -INFINITY ? 0.f : expf(mc - M);
    L += part_ml[2 * (base + c) + 1] * f;
    acc += part_acc[(base + c) * D + d] * f;
  }
  out[((int64_t)t * Hq + h) * D + d] = acc / L;
}

ingot_status k_attention_cached(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  const int64_t *qs = ingot_shape(a->in[0]), *cs = ingot_shape(a->in[1]);
  int T = (int)qs[0], Hq = (int)qs[1], D = (int)qs[2], ctx = (int)cs[0], Hkv = (int)cs[1];
  if (T == 0 || Hq == 0) return INGOT_OK;
  if (qs[0] > 65535 || qs[1] > 65535)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "attention_cached: more than 65535 rows or heads on cuda");
  cudaStream_t s = stream_of(out);
  const int dev = ingot_device_of(out).index;
  const float *q = (const float *)ingot_tensor_data(a->in[0]);
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  const void *kc = ingot_tensor_data(a->in[1]), *vc = ingot_tensor_data(a->in[2]);
  bool half = ingot_dtype_of(a->in[1]) == INGOT_F16;
  float scale = (float)a->farg[0];
  if (cuda_attention_prefill_handles(T, D))  // many rows: tiled kernel (attention_prefill.cu)
    return cuda_check(cuda_attention_prefill(q, kc, vc, half, pos, (float *)ingot_tensor_data(out),
                                             T, Hq, Hkv, D, ctx, scale, s),
                      "attention_cached prefill kernel");
  if (cluster_path(T, D, ctx)) {
    float *o = (float *)ingot_tensor_data(out);
    if (half)
      launch_cluster<f16_t>(q, kc, vc, pos, o, T, Hq, Hkv, D, ctx, scale, dev, s);
    else
      launch_cluster<float>(q, kc, vc, pos, o, T, Hq, Hkv, D, ctx, scale, dev, s);
    return launch_status("attention_cached kernel");
  }
  int tiles = (ctx + kTile - 1) / kTile;
  int chunk = kTile * ((tiles + kMaxChunks - 1) / kMaxChunks);
  int nch = (ctx + chunk - 1) / chunk;
  dim3 grid((unsigned)nch, (unsigned)Hq, (unsigned)T);
  size_t nparts = (size_t)T * (size_t)Hq * (size_t)nch;
  float *scratch = (float *)cuda_scratch_alloc(dev, nparts * (size_t)(D + 2) * sizeof(float), s);
  if (!scratch) return ingot_last_status();
  float *ml = scratch, *acc = scratch + 2 * nparts;
  if (half)
    launch_pdl(attn_partial_kernel<f16_t>, grid, dim3(kThreads), 0, s, q, (const f16_t *)kc,
               (const f16_t *)vc, pos, ml, acc, Hq, Hkv, D, ctx, chunk, scale);
  else
    launch_pdl(attn_partial_kernel<float>, grid, dim3(kThreads), 0, s, q, (const float *)kc,
               (const float *)vc, pos, ml, acc, Hq, Hkv, D, ctx, chunk, scale);
  st = launch_status("attention_cached partial kernel");
  if (!st) {
    launch_pdl(attn_combine_kernel, dim3((unsigned)Hq, (unsigned)T),
               dim3((unsigned)((D + 31) / 32 * 32)), 0, s, ml, acc, pos,
               (float *)ingot_tensor_data(out), Hq, D, ctx, chunk, nch);
    st = launch_status("attention_cached combine kernel");
  }
  cuda_scratch_free(dev, scratch, s);
  return st;
}

// ROPE_KV_ATTENTION (contract in src/core/ops_attention.c): T = 1 on the
// cluster path, one launch of attn_cluster_kernel with the rope prologue;
// otherwise, or with INGOT_ATTN_ROPE=0 (read per call: the lead's A/B), the
// ROPE_KV_WRITE and ATTENTION_CACHED kernels one after the other.
ingot_status k_rope_kv_attention(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  const RkvParams P = rkv_params(a);
  if (ingot_env_off("INGOT_ATTN_ROPE") || P.T != 1 || P.Hq < 1 || P.Hq > 65535 ||
      !cluster_path(P.T, P.D, P.ctx))
    return rope_kv_attention_compose(a);
  cudaStream_t s = stream_of(out);
  const void *kc = ingot_tensor_data(a->out[1]), *vc = ingot_tensor_data(a->out[2]);
  const float scale = (float)a->farg[1];
  const int dev = ingot_device_of(out).index;
  if (ingot_dtype_of(a->out[1]) == INGOT_F16)
    launch_cluster<f16_t>(nullptr, kc, vc, P.pos, P.qo, 1, P.Hq, P.Hkv, P.D, P.ctx, scale, dev, s,
                          &P);
  else
    launch_cluster<float>(nullptr, kc, vc, P.pos, P.qo, 1, P.Hq, P.Hkv, P.D, P.ctx, scale, dev, s,
                          &P);
  return launch_status("rope_kv_attention kernel");
}

// QMATMUL_ROPE_KV_ATTENTION (contract in src/core/ops_attention.c): T = 1
// on the cluster path with 256-thread blocks (8 x Hq blocks fit on the
// SMs), vector cache rows, 16-byte aligned weight rows of a type above and K
// <= kQkvMaxK: one launch of attn_cluster_kernel with the product and rope
// prologue. Otherwise, or with INGOT_ATTN_QKV=0 (read per call: A/B), the
// QMATMUL_ROPE_KV and ATTENTION_CACHED kernels one after the other.
ingot_status k_qmatmul_rope_kv_attention(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  const int64_t *os = ingot_shape(out), *cs = ingot_shape(a->out[1]);
  const int T = (int)os[0], Hq = (int)os[1], D = (int)os[2], ctx = (int)cs[0], Hkv = (int)cs[1];
  const void *kc = ingot_tensor_data(a->out[1]), *vc = ingot_tensor_data(a->out[2]);
  const uint8_t *w = (const uint8_t *)ingot_tensor_data(a->in[1]);
  const int64_t rs = ingot_shape(a->in[1])[1], k = a->iarg[1];
  const bool half = ingot_dtype_of(a->out[1]) == INGOT_F16;
  const uintptr_t al = half ? 8 : 16;
  if (ingot_env_off("INGOT_ATTN_QKV") || T != 1 || !cluster_path(T, D, ctx) ||
      (int64_t)kCluster * Hq > sm_count(ingot_device_of(out).index) || D % 4 ||
      (uintptr_t)kc % al || (uintptr_t)vc % al || (uintptr_t)w % 16 || rs % 16 || k > kQkvMaxK ||
      k % ggml::kUnit || (uintptr_t)ingot_tensor_data(a->in[0]) % 16 ||
      (a->in[2] && (uintptr_t)ingot_tensor_data(a->in[2]) % 16) || qkv_block_rows(D) > kQkvRows)
    return qmatmul_rope_kv_attention_compose(a);
  RkvParams P = {};
  P.pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  P.inv = (const double *)ingot_tensor_data(a->in[4]);
  P.w[0] = a->in[5] ? (const float *)ingot_tensor_data(a->in[5]) : nullptr;
  P.w[1] = a->in[6] ? (const float *)ingot_tensor_data(a->in[6]) : nullptr;
  P.T = 1, P.Hq = Hq, P.Hkv = Hkv, P.D = D, P.ctx = ctx;
  P.eps = (float)a->farg[1];
  P.neox = a->iarg[2] != 0;
  QkvParams Q = {};
  Q.w = w, Q.rs = rs, Q.k = (int)k, Q.eps = (float)a->farg[0];
  Q.stage = qkv_smem(Q.k, D, rs, true) <= kQkvSmem;
  Q.x = (const float *)ingot_tensor_data(a->in[0]);
  Q.norm = a->in[2] ? (const float *)ingot_tensor_data(a->in[2]) : nullptr;
  cudaStream_t s = stream_of(out);
  float *o = (float *)ingot_tensor_data(out);
  const float scale = (float)a->farg[2];
  const int type = (int)a->iarg[0];
  const bool launched =
      half ? launch_qkv_cluster<f16_t>(type, Q, kc, vc, P.pos, o, Hq, Hkv, D, ctx, scale, s, P)
           : launch_qkv_cluster<float>(type, Q, kc, vc, P.pos, o, Hq, Hkv, D, ctx, scale, s, P);
  if (!launched) return qmatmul_rope_kv_attention_compose(a);
  return launch_status("qmatmul_rope_kv_attention kernel");
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_attention)

extern "C" void cuda_register_attention(ingot_backend *be) {
  be->kernels[INGOT_OP_ROPE] = k_rope;
  be->kernels[INGOT_OP_KV_CACHE_WRITE] = k_kv_cache_write;
  be->kernels[INGOT_OP_ATTENTION_CACHED] = k_attention_cached;
  be->kernels[INGOT_OP_ROPE_KV_WRITE] = k_rope_kv_write;
  be->kernels[INGOT_OP_ROPE_KV_ATTENTION] = k_rope_kv_attention;
  be->kernels[INGOT_OP_QMATMUL_ROPE_KV_ATTENTION] = k_qmatmul_rope_kv_attention;
}
