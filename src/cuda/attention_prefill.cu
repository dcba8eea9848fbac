// ATTENTION_CACHED for many query rows (prefill, T > 1) on CUDA: a tiled
// flash-attention kernel (contract in src/core/ops_attention.c, CPU
// reference src/cpu/attention.c), dispatched by k_attention_cached in
// attention.cu for head_dim 64 or 128.
//
// Design:
// - Block (query tile of kRows rows, query head): kLanes lanes a row, lane
//   `sub` owning the float4 columns sub, sub + kLanes, ... of D (q and the
//   output accumulator in registers). Tiles are launched last-first: in a
//   causal prompt the last rows see the most keys, so they start first.
// - The block walks the cache rows 0..max(pos of its rows) in tiles of kKeys
//   rows: K and V rows are converted to f32 into shared memory (4 elements
//   a load, vector loads when the caches are aligned; rows past that
//   maximum are zero and never read from global memory), every row
//   scores the whole tile (independent dot products: ILP), takes the tile's
//   maximum, rescales its running sum and accumulator once a tile (online
//   softmax), and adds p * V for the keys at or before its own position.
// - GQA: query head h reads kv head h / (Hq / Hkv) (its group's tiles come
//   from L2 for the other heads).
// - Special values as the CPU reference: keys past a row's position never
//   enter its sums (a select, so NaN or inf there change nothing); a NaN
//   score or a +inf score gives a NaN row (exp of NaN), every score -inf
//   too (0 / 0), -inf scores otherwise weigh 0 in every tile;
//   pos is clamped into [0, ctx) as the decode kernels do.
// - f32 SIMT arithmetic (no tensor cores yet: docs/perf-notes.md); no host
//   sync, no scratch, on the caller's stream (capturable).
#include <math.h>

#include "cuda_common.cuh"

namespace {

constexpr int kRows = 16;                 // query rows a block
constexpr int kLanes = 8;                 // lanes a query row
constexpr int kKeys = 32;                 // cache rows a tile
constexpr int kThreads = kRows * kLanes;  // 128
static_assert(32 % kLanes == 0, "a row's lanes lie in one warp");
static_assert(kKeys * 64 / 4 % kThreads == 0, "a tile's float4s split evenly over the block");

__device__ __forceinline__ int clamp_pos(int p, int ctx) {
  return p < 0 ? 0 : p >= ctx ? ctx - 1 : p;
}

// Four consecutive cache elements as f32: one 16-byte (f32) or 8-byte (f16)
// load when vec (aligned caches), else four scalar loads.
__device__ __forceinline__ float4 load4(const float *p, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const float4 *>(p));
  return make_float4(p[0], p[1], p[2], p[3]);
}
__device__ __forceinline__ float4 load4(const f16_t *p, bool vec) {
  if (vec) {
    const uint2 u = __ldg(reinterpret_cast<const uint2 *>(p));
    return make_float4(
        fp_f16_to_f32((uint16_t)(u.x & 0xffffu)), fp_f16_to_f32((uint16_t)(u.x >> 16)),
        fp_f16_to_f32((uint16_t)(u.y & 0xffffu)), fp_f16_to_f32((uint16_t)(u.y >> 16)));
  }
  return make_float4(to_acc(p[0]), to_acc(p[1]), to_acc(p[2]), to_acc(p[3]));
}

template <class C, int D>
__global__ void __launch_bounds__(kThreads)
    attn_prefill_kernel(const float *__restrict__ q, const C *__restrict__ kc,
                        const C *__restrict__ vc, const int32_t *__restrict__ pos,
                        float *__restrict__ out, int T, int Hq, int Hkv, int ctx, float scale,
                        bool vec) {
  constexpr int NV = D / (4 * kLanes);  // float4 columns a lane
  __shared__ float4 ks[kKeys][D / 4], vs[kKeys][D / 4];
  __shared__ int kmax_s;
  const int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, kh = h / (Hq / Hkv);
  const int r = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const int t = tile * kRows + r;
  const int pt = t < T ? clamp_pos(pos[t], ctx) : -1;  // -1: a padding row, no keys
  if (threadIdx.x == 0) kmax_s = -1;
  __syncthreads();
  if (sub == 0 && pt >= 0) atomicMax(&kmax_s, pt);
  float4 qv[NV], acc[NV];
  const float *qr = q + ((int64_t)(t < T ? t : 0) * Hq + h) * D;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    const int c = 4 * (sub + kLanes * i);
    qv[i] = pt >= 0 ? make_float4(qr[c], qr[c + 1], qr[c + 2], qr[c + 3])
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;
  __syncthreads();
  const int kmax = kmax_s;
  for (int k0 = 0; k0 <= kmax; k0 += kKeys) {
    // Once the previous tile is consumed: this one's loads, all of a thread's
    // issued back to back (a fixed trip count).
    __syncthreads();
#pragma unroll
    for (int it = 0; it < kKeys * D / 4 / kThreads; it++) {
      const int i = threadIdx.x + it * kThreads, j = i / (D / 4), c = i % (D / 4), row = k0 + j;
      const int64_t g = ((int64_t)row * Hkv + kh) * D + 4 * c;
      const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
      ks[j][c] = row <= kmax ? load4(kc + g, vec) : z;
      vs[j][c] = row <= kmax ? load4(vc + g, vec) : z;
    }
    __syncthreads();
    float s[kKeys];
#pragma unroll
    for (int j = 0; j < kKeys; j++) {
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < NV; i++) {
        const float4 k4 = ks[j][sub + kLanes * i];
        d += qv[i].x * k4.x + qv[i].y * k4.y + qv[i].z * k4.z + qv[i].w * k4.w;
      }
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      s[j] = d * scale;
    }
    if (k0 > pt) continue;                   // no key of this tile at or before the row's position
    const int nk = min(kKeys, pt - k0 + 1);  // keys of the tile this row sees
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys; j++)
      if (j < nk) mt = fmaxf(mt, s[j]);
    const float mn = fmaxf(m, mt);
    const float corr = m == -INFINITY ? 0.f : expf(m - mn);
    float ts = 0.f;
#pragma unroll
    for (int j = 0; j < kKeys; j++) {
      // A -inf score weighs 0 even while every score so far is -inf (mn =
      // -inf: exp would give NaN where the CPU, knowing the row's maximum,
      // gives 0); a row of only -inf scores still ends NaN (0 / 0).
      s[j] = j < nk && s[j] != -INFINITY ? expf(s[j] - mn) : 0.f;
      ts += s[j];
    }
    l = l * corr + ts;
#pragma unroll
    for (int i = 0; i < NV; i++) {
      acc[i].x *= corr, acc[i].y *= corr, acc[i].z *= corr, acc[i].w *= corr;
    }
#pragma unroll
    for (int j = 0; j < kKeys; j++) {
      if (j < nk) {
        const float p = s[j];
#pragma unroll
        for (int i = 0; i < NV; i++) {
          const float4 v4 = vs[j][sub + kLanes * i];
          acc[i].x += p * v4.x, acc[i].y += p * v4.y, acc[i].z += p * v4.z, acc[i].w += p * v4.w;
        }
      }
    }
    m = mn;
  }
  if (pt < 0) return;
  float *o = out + ((int64_t)t * Hq + h) * D;
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    const int c = 4 * (sub + kLanes * i);
    o[c] = acc[i].x * inv, o[c + 1] = acc[i].y * inv, o[c + 2] = acc[i].z * inv;
    o[c + 3] = acc[i].w * inv;
  }
}

template <class C>
cudaError_t launch_prefill(const float *q, const void *kc, const void *vc, const int32_t *pos,
                           float *out, int T, int Hq, int Hkv, int D, int ctx, float scale,
                           cudaStream_t s) {
  const dim3 grid((unsigned)((T + kRows - 1) / kRows), (unsigned)Hq);
  const C *k = (const C *)kc, *v = (const C *)vc;
  const uintptr_t al = 4 * sizeof(C);  // rows start 4-element aligned: D % 4 == 0
  const bool vec = (uintptr_t)kc % al == 0 && (uintptr_t)vc % al == 0;
  if (D == 64)
    attn_prefill_kernel<C, 64>
        <<<grid, kThreads, 0, s>>>(q, k, v, pos, out, T, Hq, Hkv, ctx, scale, vec);
  else
    attn_prefill_kernel<C, 128>
        <<<grid, kThreads, 0, s>>>(q, k, v, pos, out, T, Hq, Hkv, ctx, scale, vec);
  return cudaGetLastError();
}

}  // namespace

extern "C" bool cuda_attention_prefill_handles(int T, int D) {
  return T > 1 && (D == 64 || D == 128);
}

extern "C" cudaError_t cuda_attention_prefill(const float *q, const void *kc, const void *vc,
                                              bool half, const int32_t *pos, float *out, int T,
                                              int Hq, int Hkv, int D, int ctx, float scale,
                                              cudaStream_t s) {
  if (!cuda_attention_prefill_handles(T, D)) return cudaErrorInvalidValue;
  return half ? launch_prefill<f16_t>(q, kc, vc, pos, out, T, Hq, Hkv, D, ctx, scale, s)
              : launch_prefill<float>(q, kc, vc, pos, out, T, Hq, Hkv, D, ctx, scale, s);
}
