// Our CUDA linear-algebra kernels (launchers in src/cuda/linalg_cuda.h): the batched
// small-matrix inverse that cuSOLVER lacks (many tiny matrices: one thread block per
// matrix, the matrix in shared memory, one thread per element, Gauss-Jordan with
// partial pivoting as LAPACK chooses pivots: largest |re| + |im|), and the small
// element kernels the cuSOLVER driver needs (pivot widths, conjugation).
#include <stdint.h>

#include "cuda_common.cuh"
#include "linalg_cuda.h"

namespace {

__device__ __forceinline__ float la_abs1(float x) { return fabsf(x); }
__device__ __forceinline__ double la_abs1(double x) { return fabs(x); }
__device__ __forceinline__ float la_abs1(c64_t x) { return fabsf(x.re) + fabsf(x.im); }
__device__ __forceinline__ double la_abs1(c128_t x) { return fabs(x.re) + fabs(x.im); }

template <class T>
__device__ __forceinline__ T la_one() {
  return T(1);
}
template <>
__device__ __forceinline__ c64_t la_one<c64_t>() {
  return c64_t{1.f, 0.f};
}
template <>
__device__ __forceinline__ c128_t la_one<c128_t>() {
  return c128_t{1.0, 0.0};
}
template <class T>
__device__ __forceinline__ T la_zero() {
  return T(0);
}
template <>
__device__ __forceinline__ c64_t la_zero<c64_t>() {
  return c64_t{0.f, 0.f};
}
template <>
__device__ __forceinline__ c128_t la_zero<c128_t>() {
  return c128_t{0.0, 0.0};
}

__device__ __forceinline__ float la_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double la_mul(double a, double b) { return a * b; }
template <class C>
__device__ __forceinline__ C la_cmul(C a, C b) {
  return C{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
__device__ __forceinline__ c64_t la_mul(c64_t a, c64_t b) { return la_cmul(a, b); }
__device__ __forceinline__ c128_t la_mul(c128_t a, c128_t b) { return la_cmul(a, b); }

__device__ __forceinline__ float la_sub(float a, float b) { return a - b; }
__device__ __forceinline__ double la_sub(double a, double b) { return a - b; }
__device__ __forceinline__ c64_t la_sub(c64_t a, c64_t b) {
  return c64_t{a.re - b.re, a.im - b.im};
}
__device__ __forceinline__ c128_t la_sub(c128_t a, c128_t b) {
  return c128_t{a.re - b.re, a.im - b.im};
}

__device__ __forceinline__ float la_div(float a, float b) { return a / b; }
__device__ __forceinline__ double la_div(double a, double b) { return a / b; }
// Smith's algorithm: no overflow for large |b|.
template <class C, class R>
__device__ __forceinline__ C la_cdiv(C a, C b) {
  if (fabs((double)b.re) >= fabs((double)b.im)) {
    R r = b.im / b.re, d = b.re + b.im * r;
    return C{(a.re + a.im * r) / d, (a.im - a.re * r) / d};
  }
  R r = b.re / b.im, d = b.im + b.re * r;
  return C{(a.re * r + a.im) / d, (a.im * r - a.re) / d};
}
__device__ __forceinline__ c64_t la_div(c64_t a, c64_t b) { return la_cdiv<c64_t, float>(a, b); }
__device__ __forceinline__ c128_t la_div(c128_t a, c128_t b) {
  return la_cdiv<c128_t, double>(a, b);
}

// One block of n x n threads per matrix; thread (y, x) owns element [y][x].
template <class T>
__global__ void inv_small_kernel(const T *__restrict__ a, T *__restrict__ out, int n,
                                 int *__restrict__ info, unsigned long long *fail,
                                 unsigned long long epoch) {
  __shared__ T m[CUDA_INV_SMALL_MAX][CUDA_INV_SMALL_MAX + 1];
  __shared__ int piv[CUDA_INV_SMALL_MAX];
  __shared__ int bad;
  int64_t b = blockIdx.x;
  int r = threadIdx.y, c = threadIdx.x;
  int64_t base = b * n * n;
  m[r][c] = a[base + r * n + c];
  if (r == 0 && c == 0) bad = 0;
  __syncthreads();
  for (int k = 0; k < n; k++) {
    if (r == 0 && c == 0) {
      int p = k;
      auto best = la_abs1(m[k][k]);
      for (int i = k + 1; i < n; i++) {
        auto v = la_abs1(m[i][k]);
        if (v > best) best = v, p = i;
      }
      if (best == 0 && bad == 0) bad = k + 1;  // exact zero pivot: singular (NaN propagates)
      piv[k] = p;
    }
    __syncthreads();
    int p = piv[k];
    if (p != k && r == k) {
      T t = m[k][c];
      m[k][c] = m[p][c];
      m[p][c] = t;
    }
    __syncthreads();
    T pivot = m[k][k];
    T f = m[r][k];
    __syncthreads();
    if (r == k) m[k][c] = la_div(c == k ? la_one<T>() : m[k][c], pivot);
    __syncthreads();
    if (r != k) m[r][c] = la_sub(c == k ? la_zero<T>() : m[r][c], la_mul(f, m[k][c]));
    __syncthreads();
  }
  // The row interchanges become column interchanges of the inverse, undone in reverse.
  for (int k = n - 1; k >= 0; k--) {
    int p = piv[k];
    if (p != k && c == 0) {
      T t = m[r][k];
      m[r][k] = m[r][p];
      m[r][p] = t;
    }
    __syncthreads();
  }
  out[base + r * n + c] = m[r][c];
  if (r == 0 && c == 0) {
    if (info) info[b] = bad;
    if (bad && fail) atomicMax(fail, LA_FAIL_KEY(epoch, b, bad));
  }
}

template <class D, class S>
__global__ void convert_kernel(D *__restrict__ dst, const S *__restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = (D)src[i];
}

template <class R>
__global__ void conj_kernel(R *x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[2 * i + 1] = -x[2 * i + 1];
}

// x[i] *= 2^(sign * e[member of i]): exact (ldexp), at any exponent.
template <class R>
__global__ void scale_members_kernel(R *x, int64_t n, int64_t per, const int *__restrict__ e,
                                     int sign) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = ldexp(x[i], sign * e[i / per]);
}

unsigned grid_for(int64_t n) {
  int64_t g = (n + 255) / 256;
  return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

}  // namespace

extern "C" cudaError_t cuda_inv_small(int dt, const void *a, void *out, int64_t batch, int n,
                                      int *info, unsigned long long *fail, unsigned long long epoch,
                                      cudaStream_t s) {
  if (batch == 0 || n == 0) return cudaSuccess;
  dim3 block(n, n);
  switch (dt) {
    case INGOT_F32:
      inv_small_kernel<<<batch, block, 0, s>>>((const float *)a, (float *)out, n, info, fail,
                                               epoch);
      break;
    case INGOT_F64:
      inv_small_kernel<<<batch, block, 0, s>>>((const double *)a, (double *)out, n, info, fail,
                                               epoch);
      break;
    case INGOT_C64:
      inv_small_kernel<<<batch, block, 0, s>>>((const c64_t *)a, (c64_t *)out, n, info, fail,
                                               epoch);
      break;
    default:
      inv_small_kernel<<<batch, block, 0, s>>>((const c128_t *)a, (c128_t *)out, n, info, fail,
                                               epoch);
      break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cuda_pivots_i64_to_i32(int32_t *dst, const int64_t *src, int64_t n,
                                              cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  convert_kernel<<<grid_for(n), 256, 0, s>>>(dst, src, n);
  return cudaGetLastError();
}

extern "C" cudaError_t cuda_pivots_i32_to_i64(int64_t *dst, const int32_t *src, int64_t n,
                                              cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  convert_kernel<<<grid_for(n), 256, 0, s>>>(dst, src, n);
  return cudaGetLastError();
}

extern "C" cudaError_t cuda_scale_members(int dt, void *x, int64_t batch, int64_t elems,
                                          const int *e, int sign, cudaStream_t s) {
  int64_t per = dt == INGOT_C64 || dt == INGOT_C128 ? 2 * elems : elems, n = batch * per;
  if (n == 0) return cudaSuccess;
  if (dt == INGOT_F32 || dt == INGOT_C64)
    scale_members_kernel<<<grid_for(n), 256, 0, s>>>((float *)x, n, per, e, sign);
  else
    scale_members_kernel<<<grid_for(n), 256, 0, s>>>((double *)x, n, per, e, sign);
  return cudaGetLastError();
}

extern "C" cudaError_t cuda_conj_inplace(int dt, void *x, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (dt == INGOT_C64)
    conj_kernel<<<grid_for(n), 256, 0, s>>>((float *)x, n);
  else
    conj_kernel<<<grid_for(n), 256, 0, s>>>((double *)x, n);
  return cudaGetLastError();
}

namespace {

// (re, im) of element i of a real or complex buffer, as doubles.
__device__ __forceinline__ void la_get(const float *p, int64_t i, double *re, double *im) {
  *re = p[i], *im = 0;
}
__device__ __forceinline__ void la_get(const double *p, int64_t i, double *re, double *im) {
  *re = p[i], *im = 0;
}
__device__ __forceinline__ void la_get(const c64_t *p, int64_t i, double *re, double *im) {
  *re = p[i].re, *im = p[i].im;
}
__device__ __forceinline__ void la_get(const c128_t *p, int64_t i, double *re, double *im) {
  *re = p[i].re, *im = p[i].im;
}
__device__ __forceinline__ void la_put(float *p, int64_t i, double re, double) { p[i] = (float)re; }
__device__ __forceinline__ void la_put(double *p, int64_t i, double re, double) { p[i] = re; }
__device__ __forceinline__ void la_put(c64_t *p, int64_t i, double re, double im) {
  p[i] = c64_t{(float)re, (float)im};
}
__device__ __forceinline__ void la_put(c128_t *p, int64_t i, double re, double im) {
  p[i] = c128_t{re, im};
}

// One thread per member: det (or sign and log|det|) from the LU diagonal and pivots.
template <class T, class R>
__global__ void det_kernel(const T *__restrict__ lu, const int64_t *__restrict__ piv, int64_t batch,
                           int n, bool slog, T *out0, R *out1) {
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= batch) return;
  double dr = 1, di = 0, sr = 1, si = 0, logabs = 0;
  for (int i = 0; i < n; i++) {
    double r, im;
    la_get(lu, b * n * n + (int64_t)i * (n + 1), &r, &im);
    if (piv[b * n + i] != i + 1) dr = -dr, di = -di, sr = -sr, si = -si;
    double t = dr * r - di * im;
    di = dr * im + di * r;
    dr = t;
    double ad = hypot(r, im);
    double ur = ad > 0 ? r / ad : r, ui = ad > 0 ? im / ad : im;  // r / |r|; 0 or NaN stays
    t = sr * ur - si * ui;
    si = sr * ui + si * ur;
    sr = t;
    logabs += log(ad);
  }
  if (slog) {
    la_put(out0, b, sr, si);
    out1[b] = (R)logabs;
  } else {
    la_put(out0, b, dr, di);
  }
}

}  // namespace

extern "C" cudaError_t cuda_det_from_lu(int dt, const void *lu, const int64_t *piv, int64_t batch,
                                        int n, int slog, void *out0, void *out1, cudaStream_t s) {
  if (batch == 0) return cudaSuccess;
  unsigned grid = (unsigned)((batch + 127) / 128);
  switch (dt) {
    case INGOT_F32:
      det_kernel<<<grid, 128, 0, s>>>((const float *)lu, piv, batch, n, slog, (float *)out0,
                                      (float *)out1);
      break;
    case INGOT_F64:
      det_kernel<<<grid, 128, 0, s>>>((const double *)lu, piv, batch, n, slog, (double *)out0,
                                      (double *)out1);
      break;
    case INGOT_C64:
      det_kernel<<<grid, 128, 0, s>>>((const c64_t *)lu, piv, batch, n, slog, (c64_t *)out0,
                                      (float *)out1);
      break;
    default:
      det_kernel<<<grid, 128, 0, s>>>((const c128_t *)lu, piv, batch, n, slog, (c128_t *)out0,
                                      (double *)out1);
      break;
  }
  return cudaGetLastError();
}

namespace {

// One thread per member: the row order perm of P^T A from LAPACK pivots, then
// P[perm[i], i] = 1 (P pre-zeroed).
template <class T>
__global__ void perm_kernel(const int32_t *__restrict__ piv, int64_t batch, int m, int k,
                            int64_t *__restrict__ perm, T *__restrict__ P) {
  int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= batch) return;
  int64_t *pm = perm + b * m;
  for (int i = 0; i < m; i++) pm[i] = i;
  for (int i = 0; i < k; i++) {
    int64_t j = piv[b * k + i] - 1, t = pm[i];
    pm[i] = pm[j];
    pm[j] = t;
  }
  for (int i = 0; i < m; i++) P[b * m * m + pm[i] * m + i] = la_one<T>();
}

}  // namespace

extern "C" cudaError_t cuda_lu_perm(int dt, const int32_t *piv, int64_t batch, int m, int k,
                                    int64_t *perm, void *P, cudaStream_t s) {
  if (batch == 0 || m == 0) return cudaSuccess;
  unsigned grid = (unsigned)((batch + 127) / 128);
  switch (dt) {
    case INGOT_F32:
      perm_kernel<<<grid, 128, 0, s>>>(piv, batch, m, k, perm, (float *)P);
      break;
    case INGOT_F64:
      perm_kernel<<<grid, 128, 0, s>>>(piv, batch, m, k, perm, (double *)P);
      break;
    case INGOT_C64:
      perm_kernel<<<grid, 128, 0, s>>>(piv, batch, m, k, perm, (c64_t *)P);
      break;
    default:
      perm_kernel<<<grid, 128, 0, s>>>(piv, batch, m, k, perm, (c128_t *)P);
      break;
  }
  return cudaGetLastError();
}
