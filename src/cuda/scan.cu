// CUDA CUMSUM / CUMPROD along one dim, with the CPU's semantics (src/cpu/reduce.c k_scan):
// bool/int inputs wrap in uint64 and come out int64; f16/bf16/f8 accumulate in float,
// f32/f64 in double, complex in double pairs; every output is rounded from the running
// value.
//
// Design. Lines along the dim are enumerated by make_lines (reduce_common.cuh).
//  - thread per line, sequential (exactly the CPU's order): short lines, or many lines that
//    are strided along the dim (neighbouring threads then read neighbouring memory);
//  - block per line otherwise: chunks of 256 x 4 elements; each thread scans its 4, a warp
//    shuffle scan plus a shared-memory step scans the thread totals, and a carry runs from
//    chunk to chunk. (A very long single line runs on one block: correct, not fast.)
#include <type_traits>

#include "cuda_common.cuh"
#include "reduce_common.cuh"

namespace {

struct Z {
  double re, im;
};

// Accumulator type and conversions per input type.
template <class T> struct ScanT { using A = double; };
template <> struct ScanT<uint8_t> { using A = uint64_t; };
template <> struct ScanT<int8_t> { using A = uint64_t; };
template <> struct ScanT<int16_t> { using A = uint64_t; };
template <> struct ScanT<int32_t> { using A = uint64_t; };
template <> struct ScanT<int64_t> { using A = uint64_t; };
template <> struct ScanT<f16_t> { using A = float; };
template <> struct ScanT<bf16_t> { using A = float; };
template <> struct ScanT<f8e4m3_t> { using A = float; };
template <> struct ScanT<f8e5m2_t> { using A = float; };
template <> struct ScanT<c64_t> { using A = Z; };
template <> struct ScanT<c128_t> { using A = Z; };

template <class A> __device__ __forceinline__ A ident(bool sum) { return sum ? A(0) : A(1); }
template <> __device__ __forceinline__ Z ident<Z>(bool sum) { return Z{sum ? 0.0 : 1.0, 0.0}; }

__device__ __forceinline__ uint64_t comb(uint64_t a, uint64_t b, bool sum) {
  return sum ? a + b : a * b;
}
__device__ __forceinline__ float comb(float a, float b, bool sum) { return sum ? a + b : a * b; }
__device__ __forceinline__ double comb(double a, double b, bool sum) {
  return sum ? a + b : a * b;
}
__device__ __forceinline__ Z comb(Z a, Z b, bool sum) {
  if (sum) return Z{a.re + b.re, a.im + b.im};
  return Z{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

template <class T> __device__ __forceinline__ typename ScanT<T>::A load_a(T v) {
  using A = typename ScanT<T>::A;
  return (A)to_acc(v);
}
template <> __device__ __forceinline__ uint64_t load_a<uint8_t>(uint8_t v) { return v; }
template <> __device__ __forceinline__ Z load_a<c64_t>(c64_t v) { return Z{v.re, v.im}; }
template <> __device__ __forceinline__ Z load_a<c128_t>(c128_t v) { return Z{v.re, v.im}; }
template <> __device__ __forceinline__ uint64_t load_a<int8_t>(int8_t v) {
  return (uint64_t)(int64_t)v;
}
template <> __device__ __forceinline__ uint64_t load_a<int16_t>(int16_t v) {
  return (uint64_t)(int64_t)v;
}
template <> __device__ __forceinline__ uint64_t load_a<int32_t>(int32_t v) {
  return (uint64_t)(int64_t)v;
}
template <> __device__ __forceinline__ uint64_t load_a<int64_t>(int64_t v) { return (uint64_t)v; }

// Output element: int64 for integer inputs, else the input type.
template <class T> struct ScanOut { using O = T; };
template <> struct ScanOut<uint8_t> { using O = int64_t; };
template <> struct ScanOut<int8_t> { using O = int64_t; };
template <> struct ScanOut<int16_t> { using O = int64_t; };
template <> struct ScanOut<int32_t> { using O = int64_t; };
template <> struct ScanOut<int64_t> { using O = int64_t; };

template <class T>
__device__ __forceinline__ typename ScanOut<T>::O store_a(typename ScanT<T>::A a) {
  using A = typename ScanT<T>::A;
  if constexpr (std::is_same<A, uint64_t>::value) {
    return (int64_t)a;
  } else if constexpr (std::is_same<T, c64_t>::value) {
    return c64_t{(float)a.re, (float)a.im};
  } else if constexpr (std::is_same<T, c128_t>::value) {
    return c128_t{a.re, a.im};
  } else if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) {
    return (T)a;
  } else {
    return from_acc<T>((float)a);
  }
}

__device__ __forceinline__ uint64_t shfl_up(uint64_t v, int o) {
  return __shfl_up_sync(0xffffffffu, (unsigned long long)v, o);
}
__device__ __forceinline__ float shfl_up(float v, int o) { return __shfl_up_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_up(double v, int o) {
  return __shfl_up_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ Z shfl_up(Z v, int o) {
  return Z{__shfl_up_sync(0xffffffffu, v.re, o), __shfl_up_sync(0xffffffffu, v.im, o)};
}

template <class T>
__global__ void scan_seq_kernel(const T *__restrict__ in, typename ScanOut<T>::O *out, Lines l,
                                bool sum) {
  using A = typename ScanT<T>::A;
  CUDA_GRID_STRIDE(i, l.count) {
    int64_t io, oo;
    line_offsets(l, i, io, oo);
    A acc = ident<A>(sum);
    for (int64_t k = 0; k < l.len; k++) {
      acc = comb(acc, load_a<T>(in[io + k * l.xs]), sum);
      out[oo + k * l.ys] = store_a<T>(acc);
    }
  }
}

constexpr int SCAN_THREADS = 256, SCAN_ITEMS = 4;

template <class T>
__global__ void __launch_bounds__(SCAN_THREADS)
    scan_block_kernel(const T *__restrict__ in, typename ScanOut<T>::O *out, Lines l, bool sum) {
  using A = typename ScanT<T>::A;
  __shared__ A warp_tot[SCAN_THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t chunk = (int64_t)SCAN_THREADS * SCAN_ITEMS;
  for (int64_t line = blockIdx.x; line < l.count; line += gridDim.x) {
    int64_t io, oo;
    line_offsets(l, line, io, oo);
    A carry = ident<A>(sum);
    for (int64_t c0 = 0; c0 < l.len; c0 += chunk) {
      A v[SCAN_ITEMS];
      int64_t k0 = c0 + (int64_t)tid * SCAN_ITEMS;
      A t = ident<A>(sum);
#pragma unroll
      for (int j = 0; j < SCAN_ITEMS; j++) {
        int64_t k = k0 + j;
        A x = k < l.len ? load_a<T>(in[io + k * l.xs]) : ident<A>(sum);
        t = comb(t, x, sum);
        v[j] = t;  // inclusive within the thread
      }
      // inclusive warp scan of the thread totals
      A w = t;
      for (int o = 1; o < 32; o <<= 1) {
        A u = shfl_up(w, o);
        if (lane >= o) w = comb(u, w, sum);
      }
      if (lane == 31) warp_tot[warp] = w;
      __syncthreads();
      if (warp == 0) {
        A x = lane < SCAN_THREADS / 32 ? warp_tot[lane] : ident<A>(sum);
        for (int o = 1; o < SCAN_THREADS / 32; o <<= 1) {
          A u = shfl_up(x, o);
          if (lane >= o) x = comb(u, x, sum);
        }
        if (lane < SCAN_THREADS / 32) warp_tot[lane] = x;  // inclusive over warps
      }
      __syncthreads();
      // exclusive prefix of this thread: carry, earlier warps, earlier lanes
      A pre = carry;
      if (warp > 0) pre = comb(pre, warp_tot[warp - 1], sum);
      A wl = shfl_up(w, 1);
      if (lane > 0) {
        // w of lane-1 is inclusive over lanes 0..lane-1
        pre = comb(pre, wl, sum);
      }
#pragma unroll
      for (int j = 0; j < SCAN_ITEMS; j++) {
        int64_t k = k0 + j;
        if (k < l.len) out[oo + k * l.ys] = store_a<T>(comb(pre, v[j], sum));
      }
      carry = comb(carry, warp_tot[SCAN_THREADS / 32 - 1], sum);
      __syncthreads();  // warp_tot is rewritten by the next chunk
    }
  }
}

template <class T>
ingot_status launch_scan(const ingot_op_args *a, const Lines &l, cudaStream_t st) {
  using O = typename ScanOut<T>::O;
  const T *in = (const T *)ingot_tensor_data(a->in[0]);
  O *out = (O *)ingot_tensor_data(a->out[0]);
  bool sum = a->op == INGOT_OP_CUMSUM;
  bool seq = l.len <= 64 || (l.xs != 1 && l.count >= 4096) || l.count >= 132 * 64;
  if (seq) {
    scan_seq_kernel<T><<<grid_for(l.count, 128), 128, 0, st>>>(in, out, l, sum);
  } else {
    int64_t blocks = l.count < 132 * 16 ? l.count : 132 * 16;
    scan_block_kernel<T><<<(unsigned)blocks, SCAN_THREADS, 0, st>>>(in, out, l, sum);
  }
  return launch_status("scan kernel");
}

ingot_status k_scan(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  int dev = ingot_device_of(in).index;
  ingot_status rc = cuda_use_device(dev);
  if (rc) return rc;
  Lines l = make_lines(in, a->out[0], (int)a->iarg[0]);
  if (l.count == 0 || l.len == 0) return INGOT_OK;
  cudaStream_t st = stream_of(a->out[0]);
  ingot_dtype dt = ingot_dtype_of(in);
  switch (dt) {
    CUDA_CASE(INGOT_BOOL, uint8_t, return launch_scan<scalar_t>(a, l, st))
    CUDA_CASES_INT(return launch_scan<scalar_t>(a, l, st))
    CUDA_CASES_FLOAT(return launch_scan<scalar_t>(a, l, st))
    CUDA_CASES_F8(return launch_scan<scalar_t>(a, l, st))
    CUDA_CASE(INGOT_C64, c64_t, return launch_scan<scalar_t>(a, l, st))
    CUDA_CASE(INGOT_C128, c128_t, return launch_scan<scalar_t>(a, l, st))
    default:
      break;
  }
  return ingot_set_error(INGOT_ERR_DTYPE, "cuda %s: dtype %s not supported", ingot_op_name(a->op),
                         ingot_dtype_name(dt));
}

}  // namespace

void cuda_register_scan(ingot_backend *be) {
  be->kernels[INGOT_OP_CUMSUM] = k_scan;
  be->kernels[INGOT_OP_CUMPROD] = k_scan;
}
