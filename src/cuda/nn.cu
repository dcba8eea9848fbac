// Fused transformer elementwise/row kernels on CUDA: RMS_NORM and SWIGLU
// (contracts in src/core/ops_nn.c; CPU reference src/cpu/nn.c).
//
// Design:
// - rms_norm: one block per row (grid-stride over rows), f32 sum of squares
//   (per-thread partials, warp shuffles, one shared-memory step), then a
//   second pass over the row (it is in L1/L2) writing (x * inv) * w rounded
//   once to x's dtype, exactly the CPU's two products.
// - swiglu: rows of n with their own gate/up row strides (views of a fused
//   gate|up product); 16-byte vectors (4 f32 or 8 bf16/f16) when every row
//   start is 16-byte aligned, scalar tail; f32 math, one rounding.
// Both launch with PDL (pdl.cuh: they wait before their first read).
// No host sync; launched on the output's current stream (graph-capturable).
#include <stdint.h>

#include "cuda_common.cuh"
#define PDL_FAMILY "nn"  // INGOT_NO_PDL=nn turns this file's PDL off
#include "pdl.cuh"
#include "swiglu.cuh"

namespace {

constexpr int kNormThreads = 256;

template <class T, class W>
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const T *__restrict__ x, const W *__restrict__ w, T *__restrict__ y,
                    int64_t rows, int64_t n, float eps) {
  __shared__ float part[kNormThreads / 32];
  pdl_wait();  // x comes from an earlier kernel
  pdl_launch_dependents();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    T *yr = y + r * n;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = to_acc(xr[i]);
      ss = fmaf(v, v, ss);
    }
    const float inv = block_inv_rms(ss, part, kNormThreads / 32, (float)n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      yr[i] = from_acc<T>(__fmul_rn(__fmul_rn(to_acc(xr[i]), inv), (float)to_acc(w[i])));
    __syncthreads();  // part is reused by the next row
  }
}

template <class T>
__device__ __forceinline__ T swiglu1(T g, T u) {
  return from_acc<T>(silu_mul(to_acc(g), (float)to_acc(u)));
}

template <class T>
__global__ void swiglu_kernel(const T *__restrict__ g, const T *__restrict__ u, T *__restrict__ y,
                              int64_t rows, int64_t n, int64_t sg, int64_t su, bool vec) {
  constexpr int V = 16 / sizeof(T);
  const int64_t nvr = vec ? n / V : 0, tail = n - nvr * V;
  pdl_wait();
  pdl_launch_dependents();
  CUDA_GRID_STRIDE(i, rows * nvr) {
    const int64_t r = i / nvr, c = (i - r * nvr) * V;
    uint4 gq = *reinterpret_cast<const uint4 *>(g + r * sg + c);
    uint4 uq = *reinterpret_cast<const uint4 *>(u + r * su + c);
    uint4 yq;
    const T *ga = reinterpret_cast<const T *>(&gq), *ua = reinterpret_cast<const T *>(&uq);
    T *ya = reinterpret_cast<T *>(&yq);
#pragma unroll
    for (int j = 0; j < V; j++) ya[j] = swiglu1(ga[j], ua[j]);
    *reinterpret_cast<uint4 *>(y + r * n + c) = yq;
  }
  CUDA_GRID_STRIDE(i, rows * tail) {
    const int64_t r = i / tail, c = nvr * V + (i - r * tail);
    y[r * n + c] = swiglu1(g[r * sg + c], u[r * su + c]);
  }
}

template <class T>
void launch_rms(const ingot_tensor *x, const ingot_tensor *w, ingot_tensor *y, int64_t rows,
                int64_t n, float eps, cudaStream_t s) {
  const unsigned grid = (unsigned)(rows < 132 * 16 ? rows : 132 * 16);
  const T *xp = static_cast<const T *>(ingot_tensor_data(x));
  T *yp = static_cast<T *>(ingot_tensor_data(y));
  if (ingot_dtype_of(w) == INGOT_F32)
    launch_pdl(rms_norm_kernel<T, float>, dim3(grid), dim3(kNormThreads), 0, s, xp,
               static_cast<const float *>(ingot_tensor_data(w)), yp, rows, n, eps);
  else
    launch_pdl(rms_norm_kernel<T, T>, dim3(grid), dim3(kNormThreads), 0, s, xp,
               static_cast<const T *>(ingot_tensor_data(w)), yp, rows, n, eps);
}

ingot_status k_rms_norm(ingot_op_args *a) {
  ingot_tensor *x = a->in[0], *w = a->in[1], *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  const int64_t n = ingot_shape(x)[ingot_ndim(x) - 1], rows = ingot_numel(x) / n;
  const float eps = (float)a->farg[0];
  cudaStream_t s = stream_of(y);
  switch (ingot_dtype_of(x)) {
    case INGOT_F32:
      launch_rms<float>(x, w, y, rows, n, eps, s);
      break;
    case INGOT_BF16:
      launch_rms<bf16_t>(x, w, y, rows, n, eps, s);
      break;
    case INGOT_F16:
      launch_rms<f16_t>(x, w, y, rows, n, eps, s);
      break;
    default:
      return ingot_set_error(INGOT_ERR_DTYPE, "rms_norm: unsupported dtype");
  }
  return launch_status("rms_norm kernel");
}

template <class T>
void launch_swiglu(const ingot_op_args *a, cudaStream_t s) {
  const int64_t n = a->iarg[2], rows = ingot_numel(a->out[0]) / n, sg = a->iarg[0], su = a->iarg[1];
  const T *gp = static_cast<const T *>(ingot_tensor_data(a->in[0]));
  const T *up = static_cast<const T *>(ingot_tensor_data(a->in[1]));
  T *yp = static_cast<T *>(ingot_tensor_data(a->out[0]));
  constexpr int64_t V = 16 / sizeof(T);
  const bool vec = ((uintptr_t)gp | (uintptr_t)up | (uintptr_t)yp) % 16 == 0 &&
                   (rows == 1 || (n % V == 0 && sg % V == 0 && su % V == 0));
  const int64_t work = vec ? rows * (n / V) + rows * (n % V) : rows * n;
  launch_pdl(swiglu_kernel<T>, dim3(grid_for(work, 256)), dim3(256), 0, s, gp, up, yp, rows, n, sg,
             su, vec);
}

ingot_status k_swiglu(ingot_op_args *a) {
  ingot_tensor *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  if (ingot_numel(y) == 0) return INGOT_OK;
  cudaStream_t s = stream_of(y);
  switch (ingot_dtype_of(y)) {
    case INGOT_F32:
      launch_swiglu<float>(a, s);
      break;
    case INGOT_BF16:
      launch_swiglu<bf16_t>(a, s);
      break;
    case INGOT_F16:
      launch_swiglu<f16_t>(a, s);
      break;
    default:
      return ingot_set_error(INGOT_ERR_DTYPE, "swiglu: unsupported dtype");
  }
  return launch_status("swiglu kernel");
}

}  // namespace

extern "C" void cuda_register_nn(ingot_backend *be) {
  be->kernels[INGOT_OP_RMS_NORM] = k_rms_norm;
  be->kernels[INGOT_OP_SWIGLU] = k_swiglu;
}
