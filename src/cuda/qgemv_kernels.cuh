// The kernels of src/cuda/qgemv.cu (design notes there): the quantised GEMV
// for M <= 8 and the row dequantiser behind QGET_ROWS and the prefill path.
// Kept apart from the launchers so that they depend on nothing but
// ggml_blocks.cuh, cuda_common.cuh's device helpers and CUDA built-ins.
#pragma once

#include <stdint.h>

#include "cuda_common.cuh"
#include "ggml_blocks.cuh"
#include "pdl.cuh"
#include "qgemv_stage.cuh"
#include "swiglu.cuh"

namespace qgemv {

constexpr int kThreads = 256;

// Weight rows per lane group (C above).
constexpr int kRowsPerGroup = 2;

// Sums of the C x R accumulators over the lpr lanes of a group (every lane
// of the warp must call it).
template <int R, int C>
__device__ __forceinline__ void group_sum(float (*acc)[R], int lpr) {
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int r = 0; r < R; r++)
      for (int o = lpr / 2; o > 0; o >>= 1) acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
}

// y[r, row0 + c] = acc[c][r] (+ res[r, row0 + c]) for the rows below end
// (y is [m, n]).
template <int R, int C>
__device__ __forceinline__ void store_rows(const float (*acc)[R], int64_t row0, int64_t end,
                                           int64_t n, int m, float *__restrict__ y,
                                           const float *__restrict__ res) {
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int r = 0; r < R; r++)
      if (r < m && row0 + c < end) {
        const int64_t i = r * n + row0 + c;
        y[i] = res ? acc[c][r] + __ldg(res + i) : acc[c][r];
      }
}

// x and W from global memory (any alignment): the path for rows that are
// not 16-byte aligned and for x or rows too large for the shared-memory
// kernel below. res (may be NULL): added in the epilogue.
template <int TYPE, int R>
__global__ void __launch_bounds__(kThreads)
    qgemv_kernel(const uint8_t *__restrict__ w, int64_t rs, const float *__restrict__ x, int64_t k,
                 int64_t n, int m, float *__restrict__ y, const float *__restrict__ res, int lpr,
                 bool al, bool xvec) {
  constexpr int C = kRowsPerGroup;
  const int lane = threadIdx.x & 31, sub = lane % lpr, grp = lane / lpr, gpw = 32 / lpr;
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
  pdl_wait();  // x and res come from earlier kernels
  pdl_launch_dependents();
  // The loop bound is uniform over the warp: every lane reaches the shuffles.
  for (int64_t n0 = warp * gpw * C; n0 < n; n0 += nwarps * gpw * C) {
    const int64_t row0 = n0 + (int64_t)grp * C;  // this group's rows row0 .. row0 + C - 1
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
      for (int r = 0; r < R; r++) acc[c][r] = 0.f;
    if (row0 < n) {
      for (int64_t u = sub; u < units; u += lpr) {
        float v[C][ggml::kUnit];
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (row0 + c < n) {
            ggml::decode_unit<TYPE>(w + (row0 + c) * rs, u, k, al, v[c]);
          } else {
#pragma unroll
            for (int i = 0; i < ggml::kUnit; i++) v[c][i] = 0.f;
          }
        }
        const int64_t rest = k - u * ggml::kUnit;
        dot_rows<R, C>(v, x + u * ggml::kUnit, k, m, rest < ggml::kUnit ? (int)rest : ggml::kUnit,
                       xvec, acc);
      }
    }
    group_sum<R, C>(acc, lpr);
    if (sub == 0) store_rows<R, C>(acc, row0, n, n, m, y, res);
  }
}

// ---- Shared-memory GEMV (rows 16-byte aligned: padded at upload) ----
//
// Each block stages x [m, k] once in shared memory (normalised there when
// norm != NULL: the block computes each row's inverse RMS itself), laid out
// as 36 floats per 32-element unit so that the float4 reads of 8 lanes on 8
// consecutive units hit distinct banks. Each warp owns a task of rw = (32 /
// lpr) * C consecutive rows (one contiguous, 16-byte aligned span of rw * rs
// bytes: the whole matrix is one blob), loads the span with int4 loads into
// registers, stores it to its shared buffer and decodes units from there;
// the next task's span is loaded while the current one is computed (a
// register double buffer). res: added in the epilogue.
constexpr int kSmemMaxThreads = 128;
constexpr int kStageVecs = 8;                      // int4 per lane per task
constexpr int kStageBytes = 32 * 16 * kStageVecs;  // 4 KiB of rows per warp
constexpr int kSmemLimit = 48 * 1024;              // no opt-in launch attribute
constexpr int kInvFloats = 8;                      // inverse RMS of the <= 8 x rows

// Blocks of kSmemMaxThreads a SM keeps resident that the kernel is built
// for (host and device agree): 4 (at most 128 registers a thread) for M = 1,
// where every type but Q4_K/Q5_K fits that without spills (ptxas -v: 128 and
// 164-168), so the bandwidth-bound LM head keeps 16 warps of loads an SM in
// flight; else 3 (at most 168).
__host__ __device__ constexpr int smem_blocks_per_sm(int type, int r) {
  return r == 1 && type != INGOT_GGML_Q4_K && type != INGOT_GGML_Q5_K ? 4 : 3;
}

// Bytes of dynamic shared memory the kernel needs (host and device agree).
__host__ __device__ inline int64_t smem_x_bytes(int m, int64_t k) {
  return (int64_t)m * ((k + ggml::kUnit - 1) / ggml::kUnit) * kXSkew * 4 + kInvFloats * 4;
}
__host__ __device__ inline int64_t smem_warp_bytes(int64_t task_bytes) {
  return task_bytes + ggml::kSharedSlack;
}

// This lane's int4s of the task at rows [r0, r0 + rows) (row stride rs).
__device__ __forceinline__ void load_task(const uint8_t *__restrict__ w, int64_t rs, int64_t r0,
                                          int64_t rows, int lane, int4 *pre) {
  const int4 *src = reinterpret_cast<const int4 *>(w + r0 * rs);
  const int nvec = (int)(rows * rs / 16);
#pragma unroll
  for (int i = 0; i < kStageVecs; i++)
    if (i * 32 + lane < nvec) pre[i] = __ldg(src + i * 32 + lane);
}

__device__ __forceinline__ void store_task(uint8_t *wb, int64_t rs, int64_t rows, int lane,
                                           const int4 *pre) {
  int4 *dst = reinterpret_cast<int4 *>(wb);
  const int nvec = (int)(rows * rs / 16);
#pragma unroll
  for (int i = 0; i < kStageVecs; i++)
    if (i * 32 + lane < nvec) dst[i * 32 + lane] = pre[i];
}

// x [m, k] into xs (kXSkew layout), then, with norm, each row scaled by its
// inverse RMS and by norm as the CPU's rms_norm does ((x * inv) * norm).
// glu: x is gate | up [m, 2k] and silu(gate) * up is staged (no norm then).
// g, gpre: stage_x1's. Ends with a barrier.
__device__ __forceinline__ void stage_x(const float *__restrict__ x, int m, int k, bool xvec,
                                        bool glu, const float *__restrict__ norm, float eps,
                                        float *xs, float *inv, const float4 (&g)[kStageRound],
                                        bool gpre) {
  if (m == 1 && xvec) {
    stage_x1(x, k, glu, norm, eps, xs, g, gpre);
    return;
  }
  const int units = (k + ggml::kUnit - 1) / ggml::kUnit, xstride = units * kXSkew;
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int ldx = glu ? 2 * k : k;  // floats from one row of x to the next
  if (xvec) {  // k % 4 == 0: a float4 never straddles a row, a unit or the gate|up seam
    for (int i = threadIdx.x; i < m * k / 4; i += blockDim.x) {
      const int r = 4 * i / k, j = 4 * i - r * k;
      float4 v = __ldg(reinterpret_cast<const float4 *>(x + r * ldx + j));
      if (glu) {
        const float4 u = __ldg(reinterpret_cast<const float4 *>(x + r * ldx + k + j));
        v = make_float4(silu_mul(v.x, u.x), silu_mul(v.y, u.y), silu_mul(v.z, u.z),
                        silu_mul(v.w, u.w));
      }
      *reinterpret_cast<float4 *>(xs + r * xstride + (j / ggml::kUnit) * kXSkew + j % ggml::kUnit) =
          v;
    }
  } else {
    for (int i = threadIdx.x; i < m * k; i += blockDim.x) {
      const int r = i / k, j = i - r * k;
      const float g = __ldg(x + r * ldx + j);
      xs[r * xstride + (j / ggml::kUnit) * kXSkew + j % ggml::kUnit] =
          glu ? silu_mul(g, __ldg(x + r * ldx + k + j)) : g;
    }
  }
  __syncthreads();
  if (!norm) return;
  for (int r = wib; r < m; r += nw) {
    float ss = 0.f;
    for (int j = lane; j < k; j += 32) {
      const float v = xs[r * xstride + (j / ggml::kUnit) * kXSkew + j % ggml::kUnit];
      ss = fmaf(v, v, ss);
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) inv[r] = 1.0f / sqrtf(ss / (float)k + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < m * k; i += blockDim.x) {
    const int r = i / k, j = i - r * k;
    float *p = xs + r * xstride + (j / ggml::kUnit) * kXSkew + j % ggml::kUnit;
    *p = __fmul_rn(__fmul_rn(*p, inv[r]), __ldg(norm + j));
  }
  __syncthreads();
}

// The plain product: nothing after a task's rows are stored.
struct NoEpilogue {
  __device__ __forceinline__ void operator()(int64_t, int64_t, int) const {}
};

// The body of the shared-memory GEMV; epi(r0, rows, lane) runs on every lane
// of a warp once the warp has stored its task's rows [r0, r0 + rows) of y.
// glu: x is gate | up [m, 2k] (stage_x). Host guarantees: w and rs 16-byte
// aligned, rw (rows a task) = (32 / lpr) * C, or 1 when lpr = 32 and two
// rows exceed kStageBytes (the group's second row is then absent), rw * rs
// <= kStageBytes, dynamic shared memory = smem_x_bytes + warps *
// smem_warp_bytes. Every block reads x only after pdl_wait (pdl.cuh).
template <int TYPE, int R, class Epi>
__device__ __forceinline__ void smem_gemv(const uint8_t *__restrict__ w, int64_t rs,
                                          const float *__restrict__ x, int k, int64_t n, int m,
                                          float *__restrict__ y, const float *__restrict__ res,
                                          const float *__restrict__ norm, float eps, int lpr,
                                          int rw, bool xvec, bool glu, const Epi &epi) {
  constexpr int C = kRowsPerGroup;
  extern __shared__ int4 smem_raw[];
  const int units = (k + ggml::kUnit - 1) / ggml::kUnit, xstride = units * kXSkew;
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int sub = lane % lpr, grp = lane / lpr;
  float *xs = reinterpret_cast<float *>(smem_raw);
  float *inv = xs + m * xstride;
  uint8_t *wb =
      reinterpret_cast<uint8_t *>(smem_raw) + smem_x_bytes(m, k) + wib * smem_warp_bytes(rw * rs);
  const int64_t ntask = (n + rw - 1) / rw, step = (int64_t)gridDim.x * nw;
  int64_t task = (int64_t)blockIdx.x * nw + wib;
  int4 pre[kStageVecs];
  // The first span and the norm weights (weights only) are in flight while
  // the previous kernel drains (PDL) and x is staged.
  if (task < ntask) load_task(w, rs, task * rw, min((int64_t)rw, n - task * rw), lane, pre);
  float4 g[kStageRound];
  const bool gpre = norm && m == 1 && xvec && stage_one_round(k);
  if (gpre) norm_first(norm, k, g);
  pdl_wait();
  pdl_launch_dependents();
  stage_x(x, m, k, xvec, glu, norm, eps, xs, inv, g, gpre);
  // The loop bound is uniform over the warp: every lane reaches the shuffles.
  for (; task < ntask; task += step) {
    const int64_t r0 = task * rw, rows = min((int64_t)rw, n - r0);
    store_task(wb, rs, rows, lane, pre);
    __syncwarp();
    const int64_t next = task + step;
    if (next < ntask) load_task(w, rs, next * rw, min((int64_t)rw, n - next * rw), lane, pre);
    float acc[C][R];
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
      for (int r = 0; r < R; r++) acc[c][r] = 0.f;
    const int lr0 = grp * C;  // this group's first row within the task
    if (lr0 < rows) {
      for (int u = sub; u < units; u += lpr) {
        float v[C][ggml::kUnit];
#pragma unroll
        for (int c = 0; c < C; c++) {
          if (lr0 + c < rows) {
            ggml::decode_unit<TYPE, true>(wb + (lr0 + c) * rs, u, k, true, v[c]);
          } else {
#pragma unroll
            for (int i = 0; i < ggml::kUnit; i++) v[c][i] = 0.f;
          }
        }
        const int rest = k - u * ggml::kUnit;
        dot_rows<R, C, true>(v, xs + u * kXSkew, xstride, m,
                             rest < ggml::kUnit ? rest : ggml::kUnit, true, acc);
      }
    }
    group_sum<R, C>(acc, lpr);
    if (sub == 0) store_rows<R, C>(acc, r0 + lr0, r0 + rows, n, m, y, res);
    epi(r0, rows, lane);
    __syncwarp();  // the buffer is rewritten by the next task
  }
}

template <int TYPE, int R>
__global__ void __launch_bounds__(kSmemMaxThreads, smem_blocks_per_sm(TYPE, R))
    qgemv_smem_kernel(const uint8_t *__restrict__ w, int64_t rs, const float *__restrict__ x, int k,
                      int64_t n, int m, float *__restrict__ y, const float *__restrict__ res,
                      const float *__restrict__ norm, float eps, int lpr, int rw, bool xvec,
                      bool glu) {
  TL_SCOPE(kTlQgemv);
  smem_gemv<TYPE, R>(w, rs, x, k, n, m, y, res, norm, eps, lpr, rw, xvec, glu, NoEpilogue());
}

// y += res over n elements (the residual of the paths that compose kernels).
__global__ void add_res_kernel(float *__restrict__ y, const float *__restrict__ res, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] += __ldg(res + i);
}

// out [n, k] f32 = W's f8e4m3fn rows (row stride rs bytes) times scale[row]:
// QMATMUL's f8 form beyond the GEMV (the MATMUL kernel then takes it).
__global__ void f8_rows_kernel(const uint8_t *__restrict__ w, int64_t rs,
                               const float *__restrict__ scale, int64_t n, int64_t k,
                               float *__restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * k;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i / k;
    out[i] = to_acc(f8e4m3_t{w[j * rs + (i - j * k)]}) * __ldg(scale + j);
  }
}

// out[t, :] = row ids[t] of W dequantised (ids NULL: row t); zeros for an
// out-of-range id (reachable only with index checks off).
template <int TYPE>
__global__ void qget_rows_kernel(const uint8_t *__restrict__ w, int64_t rs, int64_t nrows,
                                 const int64_t *__restrict__ ids, int64_t t_count, int64_t cols,
                                 float *__restrict__ out, bool al, bool ovec) {
  TL_SCOPE(kTlGetRows);
  const int64_t units = (cols + ggml::kUnit - 1) / ggml::kUnit;
  pdl_wait();  // ids come from an earlier kernel (the sampler)
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t_count * units;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / units, u = i % units;
    const int64_t id = ids ? ids[t] : t;
    float v[ggml::kUnit];
    if (id >= 0 && id < nrows) {
      ggml::decode_unit<TYPE>(w + id * rs, u, cols, al, v);
    } else {
#pragma unroll
      for (int j = 0; j < ggml::kUnit; j++) v[j] = 0.f;
    }
    float *o = out + t * cols + u * ggml::kUnit;
    const int64_t cnt = cols - u * ggml::kUnit;
    if (ovec && cnt >= ggml::kUnit) {
      float4 *o4 = reinterpret_cast<float4 *>(o);
#pragma unroll
      for (int j = 0; j < ggml::kUnit / 4; j++)
        o4[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    } else {
#pragma unroll
      for (int j = 0; j < ggml::kUnit; j++)
        if (j < cnt) o[j] = v[j];
    }
  }
}

}  // namespace qgemv
