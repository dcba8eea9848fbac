// The kernels of src/cuda/qgemv.cu (design notes there): the quantised GEMV
// for M <= 8 and the row dequantiser behind QGET_ROWS and the prefill path.
// Kept apart from the launchers so that they depend on nothing but
// ggml_blocks.cuh and CUDA built-ins.
#pragma once

#include <stdint.h>

#include "ggml_blocks.cuh"

namespace qgemv {

constexpr int kThreads = 256;

// acc[c][r] += v[c] . x[r, 0:cnt) for the C weight rows c and the first m
// of R rows of x: every x element loaded once serves the C weight rows (x,
// read from L1, would otherwise cost more bandwidth than the weights).
// xvec: x rows are 16-byte aligned (float4 loads).
template <int R, int C>
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
        const float4 q = __ldg(x4 + i);
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
        const float q = __ldg(xr + i);
#pragma unroll
        for (int c = 0; c < C; c++) s[c] = fmaf(v[c][i], q, s[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < C; c++) acc[c][r] += s[c];
  }
}

// Weight rows per lane group (C above).
constexpr int kRowsPerGroup = 2;

template <int TYPE, int R>
__global__ void __launch_bounds__(kThreads)
    qgemv_kernel(const uint8_t *__restrict__ w, int64_t rs, const float *__restrict__ x, int64_t k,
                 int64_t n, int m, float *__restrict__ y, int lpr, bool al, bool xvec) {
  constexpr int C = kRowsPerGroup;
  const int lane = threadIdx.x & 31, sub = lane % lpr, grp = lane / lpr, gpw = 32 / lpr;
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
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
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
      for (int r = 0; r < R; r++)
        for (int o = lpr / 2; o > 0; o >>= 1)
          acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
    if (sub == 0) {
#pragma unroll
      for (int c = 0; c < C; c++)
#pragma unroll
        for (int r = 0; r < R; r++)
          if (r < m && row0 + c < n) y[r * n + row0 + c] = acc[c][r];
    }
  }
}

// out[t, :] = row ids[t] of W dequantised (ids NULL: row t); zeros for an
// out-of-range id (reachable only with index checks off).
template <int TYPE>
__global__ void qget_rows_kernel(const uint8_t *__restrict__ w, int64_t rs, int64_t nrows,
                                 const int64_t *__restrict__ ids, int64_t t_count, int64_t cols,
                                 float *__restrict__ out, bool al, bool ovec) {
  const int64_t units = (cols + ggml::kUnit - 1) / ggml::kUnit;
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
