// CUDA SOFTMAX / LOG_SOFTMAX along one dim, with the CPU's semantics (src/cpu/softmax.c):
// f16/bf16/f8/f32 compute in float (f64 in double), the max shift, the sum of exp in
// double, softmax = exp(x - m) * (1 / sum), log_softmax = (x - m) - log(sum); a NaN in a
// line makes the line NaN, a line whose max is +-inf is NaN (as exp(inf - inf) is).
//
// Design. Lines along the dim (make_lines in reduce_common.cuh).
//  - contiguous f32/bf16/f16 lines of 16384 to row_cluster_cap<T>() elements, few of them
//    or long ones (row_cluster_fits; the decode vocabulary: 1 or 64 rows of 151936): one
//    thread-block cluster per line
//    (row_cluster.cuh), the line read once into registers, max and sum merged through
//    distributed shared memory, written once; one ordinary launch (graphs capture it), no
//    scratch. Where a cluster launch is refused, the paths below.
//  - other contiguous lines (stride 1 along the dim): each line is cut into S slices, one
//    256-thread block each, 16-byte loads for f32.
//      S = 1 (many rows): one kernel, a block per row: an online (max, sum exp) sweep,
//        a block merge, then a second sweep (from L1/L2) writes the outputs.
//      S > 1 (few rows, the decode case: 1 or 64 rows of a 151936 vocabulary): the
//        partial kernel writes each slice's (max, sum exp, nan) to scratch; the
//        normalise kernel (same grid) merges its row's S partials in a fixed order
//        and writes its slice. Deterministic, no atomics, no host sync.
//      S > 1 and f32/bf16/f16 (the usual case): ONE cooperative kernel instead: each block
//        sweeps its slice with 16-byte loads, writes its (max, sum exp, nan) to scratch,
//        then cg::this_grid().sync() (the driver's grid barrier: needs no zeroed counter
//        of ours, so it is safe on any stream, concurrently and in graph replays), then
//        every block merges its row's S partials in a fixed order (deterministic; every
//        block gets the same answer) and writes its slice, re-reading x from L1/L2. The
//        cooperative launch guarantees that all blocks are co-resident; the grid is capped
//        at (occupancy x SMs), queried once per device. Any launch failure falls back to
//        the two-kernel path.
//  - strided lines (softmax over a non-last dim): one thread per line, the CPU's three
//    sequential passes.
#include <math.h>

#include <atomic>
#include <cooperative_groups.h>
#include <type_traits>

#include "cuda_common.cuh"
#include "reduce_common.cuh"
#include "row_cluster.cuh"

namespace {

constexpr int SM_THREADS = 256;

template <class T> struct SmA { using A = float; };
template <> struct SmA<double> { using A = double; };

__device__ __forceinline__ float ex(float x) { return expf(x); }
__device__ __forceinline__ double ex(double x) { return exp(x); }

// Running (max, sum of exp(x - max)) of part of a line; nan: a NaN was seen.
template <class A> struct MS {
  A m;
  double s;
  int nan;
};

template <class A> __device__ __forceinline__ void ms_init(MS<A> &t) {
  t.m = -INFINITY, t.s = 0, t.nan = 0;
}

template <class A> __device__ __forceinline__ void ms_merge(MS<A> &t, const MS<A> &o) {
  A m = t.m > o.m ? t.m : o.m;
  double s = 0;
  if (t.m != -INFINITY) s += t.s * (double)ex(t.m - m);
  if (o.m != -INFINITY) s += o.s * (double)ex(o.m - m);
  t.m = m, t.s = s, t.nan |= o.nan;
}

template <class A> __device__ __forceinline__ MS<A> ms_shfl_down(const MS<A> &t, int off) {
  MS<A> o;
  o.m = __shfl_down_sync(0xffffffffu, t.m, off);
  o.s = __shfl_down_sync(0xffffffffu, t.s, off);
  o.nan = __shfl_down_sync(0xffffffffu, t.nan, off);
  return o;
}

// Block-wide merge; every thread gets the result. All threads must call it.
template <class A> __device__ MS<A> ms_block(MS<A> t, MS<A> *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    MS<A> o = ms_shfl_down(t, off);
    if (lane + off < 32) ms_merge(t, o);
  }
  if (lane == 0) sh[warp] = t;
  __syncthreads();
  if (warp == 0) {
    if (lane < nw) t = sh[lane];
    else ms_init(t);
    for (int off = 16; off > 0; off >>= 1) {
      MS<A> o = ms_shfl_down(t, off);
      if (lane + off < 32) ms_merge(t, o);
    }
    if (lane == 0) sh[32] = t;
  }
  __syncthreads();
  t = sh[32];
  __syncthreads();  // sh is reused by the caller
  return t;
}

// Shift and scale of a finished line: out = exp(x - m) * r, or (x - m) - r for log.
template <class A> __device__ __forceinline__ void ms_final(const MS<A> &t, bool logsm, A &m, A &r) {
  m = t.nan ? (A)NAN : t.m;
  double s = isinf(t.m) ? (double)NAN : t.s;  // exp(inf - inf) and an all -inf line are NaN
  r = logsm ? (A)log(s) : (A)(1.0 / s);
}

template <class T> __device__ __forceinline__ T out_of(typename SmA<T>::A y) {
  if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) return y;
  else return from_acc<T>(y);
}

// Thread-local running (max, sum) in A (float for f32: a short dependency chain); the
// block merge then continues in double.
template <class A> struct TS {
  A m, s;
  int nan;
  __device__ __forceinline__ void add(A x) {
    if (x != x) {
      nan = 1;
    } else if (x > m) {
      s = s * ex(m - x) + (A)1;  // m = -inf: s is 0 and exp(-inf) is 0
      m = x;
    } else if (x != (A)-INFINITY) {
      s += ex(x - m);
    }
  }
};

template <class T, class A>
__device__ __forceinline__ void sweep_stats(const T *x, int64_t lo, int64_t hi, MS<A> &out) {
  TS<A> t{(A)-INFINITY, (A)0, 0};
  if constexpr (std::is_same<T, float>::value) {
    // 16-byte loads over the aligned middle (lo is a multiple of 4 in the split path)
    int64_t a0 = lo, a1 = hi;
    if (((uintptr_t)(x + lo) & 15) == 0) {
      a1 = lo + ((hi - lo) & ~(int64_t)3);
      const float4 *v = (const float4 *)(x + lo);
      int64_t nv = (a1 - lo) >> 2;
      for (int64_t k = threadIdx.x; k < nv; k += blockDim.x) {
        float4 q = __ldg(v + k);
        t.add(q.x), t.add(q.y), t.add(q.z), t.add(q.w);
      }
      a0 = a1, a1 = hi;
    }
    for (int64_t k = a0 + threadIdx.x; k < a1; k += blockDim.x) t.add(x[k]);
  } else {
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) t.add((A)to_acc(x[k]));
  }
  MS<A> o{t.m, (double)t.s, t.nan};
  ms_merge(out, o);
}

template <class T, class A>
__device__ __forceinline__ void sweep_out(const T *x, T *y, int64_t lo, int64_t hi, A m, A r,
                                          bool logsm) {
  if constexpr (std::is_same<T, float>::value) {
    int64_t a0 = lo, a1 = hi;
    if (((uintptr_t)(x + lo) & 15) == 0 && ((uintptr_t)(y + lo) & 15) == 0) {
      a1 = lo + ((hi - lo) & ~(int64_t)3);
      const float4 *v = (const float4 *)(x + lo);
      float4 *w = (float4 *)(y + lo);
      int64_t nv = (a1 - lo) >> 2;
      for (int64_t k = threadIdx.x; k < nv; k += blockDim.x) {
        float4 q = __ldg(v + k), o;
        if (logsm) {
          o.x = (q.x - m) - r, o.y = (q.y - m) - r, o.z = (q.z - m) - r, o.w = (q.w - m) - r;
        } else {
          o.x = expf(q.x - m) * r, o.y = expf(q.y - m) * r;
          o.z = expf(q.z - m) * r, o.w = expf(q.w - m) * r;
        }
        w[k] = o;
      }
      a0 = a1, a1 = hi;
    }
    for (int64_t k = a0 + threadIdx.x; k < a1; k += blockDim.x)
      y[k] = logsm ? (x[k] - m) - r : expf(x[k] - m) * r;
  } else {
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
      A v = (A)to_acc(x[k]);
      y[k] = out_of<T>(logsm ? (v - m) - r : ex(v - m) * r);
    }
  }
}

// S = 1: a block per contiguous row.
template <class T>
__global__ void __launch_bounds__(SM_THREADS)
    softmax_row_kernel(const T *__restrict__ in, T *__restrict__ out, Lines l, bool logsm) {
  using A = typename SmA<T>::A;
  __shared__ MS<A> sh[33];
  for (int64_t row = blockIdx.x; row < l.count; row += gridDim.x) {
    int64_t io, oo;
    line_offsets(l, row, io, oo);
    MS<A> t;
    ms_init(t);
    sweep_stats(in + io, 0, l.len, t);
    t = ms_block(t, sh);
    A m, r;
    ms_final(t, logsm, m, r);
    sweep_out(in + io, out + oo, 0, l.len, m, r, logsm);
  }
}

struct Part {
  double m, s;
  int nan;
};

// S > 1, pass 1: block (slice, row) writes its slice's (max, sum, nan).
template <class T>
__global__ void __launch_bounds__(SM_THREADS)
    softmax_part_kernel(const T *__restrict__ in, Lines l, int64_t chunk, Part *part) {
  using A = typename SmA<T>::A;
  __shared__ MS<A> sh[33];
  int S = gridDim.x, s = blockIdx.x;
  int64_t row = blockIdx.y, io, oo;
  line_offsets(l, row, io, oo);
  int64_t lo = (int64_t)s * chunk, hi = lo + chunk < l.len ? lo + chunk : l.len;
  MS<A> t;
  ms_init(t);
  sweep_stats(in + io, lo, hi, t);
  t = ms_block(t, sh);
  if (threadIdx.x == 0) part[row * S + s] = Part{(double)t.m, t.s, t.nan};
}

// S > 1, pass 2: merge the row's partials (warp 0, fixed order), then write the slice.
template <class T>
__global__ void __launch_bounds__(SM_THREADS)
    softmax_norm_kernel(const T *__restrict__ in, T *__restrict__ out, Lines l, int64_t chunk,
                        const Part *__restrict__ part, bool logsm) {
  using A = typename SmA<T>::A;
  __shared__ MS<A> res;
  int S = gridDim.x, s = blockIdx.x;
  int64_t row = blockIdx.y, io, oo;
  line_offsets(l, row, io, oo);
  if (threadIdx.x < 32) {
    int lane = threadIdx.x;
    MS<A> t;
    ms_init(t);
    for (int k = lane; k < S; k += 32) {
      Part p = part[row * S + k];
      MS<A> o{(A)p.m, p.s, p.nan};
      ms_merge(t, o);
    }
    for (int off = 16; off > 0; off >>= 1) {
      MS<A> o = ms_shfl_down(t, off);
      if (lane + off < 32) ms_merge(t, o);
    }
    if (lane == 0) res = t;
  }
  __syncthreads();
  A m, r;
  ms_final(res, logsm, m, r);
  int64_t lo = (int64_t)s * chunk, hi = lo + chunk < l.len ? lo + chunk : l.len;
  sweep_out(in + io, out + oo, lo, hi, m, r, logsm);
}

// Strided lines: a thread per line, the CPU's passes in the CPU's order.
template <class T>
__global__ void softmax_line_kernel(const T *__restrict__ in, T *__restrict__ out, Lines l,
                                    bool logsm) {
  using A = typename SmA<T>::A;
  CUDA_GRID_STRIDE(i, l.count) {
    int64_t io, oo;
    line_offsets(l, i, io, oo);
    const T *x = in + io;
    T *y = out + oo;
    A m = -INFINITY;
    bool nan = false;
    for (int64_t k = 0; k < l.len; k++) {
      A v = (A)to_acc(x[k * l.xs]);
      nan |= v != v;
      m = v > m ? v : m;
    }
    if (nan) m = NAN;
    double s = 0;
    for (int64_t k = 0; k < l.len; k++) s += (double)ex((A)to_acc(x[k * l.xs]) - m);
    A r = logsm ? (A)log(s) : (A)(1.0 / s);
    for (int64_t k = 0; k < l.len; k++) {
      A v = (A)to_acc(x[k * l.xs]);
      y[k * l.ys] = out_of<T>(logsm ? (v - m) - r : ex(v - m) * r);
    }
  }
}

const int kSMs = 132;

// ---- the fused (single launch) path: f32, bf16, f16 ----

// Adds N values to a thread's running (m, s, nan): one rescale per vector at most.
// fmaxf skips NaN (the flag records it; a NaN line's s does not matter); nothing is added
// while m is -inf (every value so far is -inf or NaN), so exp(-inf - -inf) never happens;
// an m of +inf makes the line NaN in ms_final whatever s is.
template <int N> __device__ __forceinline__ void ts_add_vec(TS<float> &t, const float (&v)[N]) {
  float mx = v[0];
  int nan = v[0] != v[0];
#pragma unroll
  for (int i = 1; i < N; i++) mx = fmaxf(mx, v[i]), nan |= v[i] != v[i];
  t.nan |= nan;
  if (mx > t.m) {
    t.s *= expf(t.m - mx);  // t.m = -inf: s is 0 and exp(-inf) is 0
    t.m = mx;
  }
  if (t.m != -INFINITY) {
    float a = 0;
#pragma unroll
    for (int i = 0; i < N; i++) a += expf(v[i] - t.m);
    t.s += a;
  }
}

// First index >= lo whose address is 16-byte aligned (clamped to hi).
template <class T> __device__ __forceinline__ int64_t align_up(const T *x, int64_t lo, int64_t hi) {
  constexpr int N = Vec<T>::N;
  int64_t mis = (int64_t)(((uintptr_t)(x + lo) & 15) / sizeof(T));
  int64_t a = lo + (mis ? N - mis : 0);
  return a < hi ? a : hi;
}

// Stats of x[lo, hi): scalar head, 16-byte vectors (4 loads in flight per thread), tail.
template <class T>
__device__ __forceinline__ void vsweep_stats(const T *x, int64_t lo, int64_t hi, MS<float> &out) {
  constexpr int N = Vec<T>::N;
  TS<float> t{-INFINITY, 0.f, 0};
  int64_t a0 = ((uintptr_t)x % sizeof(T)) ? hi : align_up(x, lo, hi);
  int64_t nv = (hi - a0) / N, a1 = a0 + nv * N;
  for (int64_t k = lo + threadIdx.x; k < a0; k += blockDim.x) t.add(to_acc(x[k]));
  const T *xv = x + a0;
  const int64_t bd = blockDim.x;
  int64_t k = threadIdx.x;
  for (; k + 3 * bd < nv; k += 4 * bd) {
    float v0[N], v1[N], v2[N], v3[N];
    load_vec(xv + k * N, v0), load_vec(xv + (k + bd) * N, v1);
    load_vec(xv + (k + 2 * bd) * N, v2), load_vec(xv + (k + 3 * bd) * N, v3);
    ts_add_vec(t, v0), ts_add_vec(t, v1), ts_add_vec(t, v2), ts_add_vec(t, v3);
  }
  for (; k < nv; k += bd) {
    float v[N];
    load_vec(xv + k * N, v);
    ts_add_vec(t, v);
  }
  for (int64_t j = a1 + threadIdx.x; j < hi; j += blockDim.x) t.add(to_acc(x[j]));
  MS<float> o{t.m, (double)t.s, t.nan};
  ms_merge(out, o);
}

template <class T> __device__ __forceinline__ float sm_out(float v, float m, float r, bool logsm) {
  return logsm ? (v - m) - r : expf(v - m) * r;
}

// Outputs of y[lo, hi): 16-byte vectors where x and y share their misalignment.
template <class T>
__device__ __forceinline__ void vsweep_out(const T *x, T *y, int64_t lo, int64_t hi, float m,
                                           float r, bool logsm) {
  constexpr int N = Vec<T>::N;
  bool same = ((uintptr_t)x % sizeof(T)) == 0 && ((uintptr_t)y % sizeof(T)) == 0 &&
              ((uintptr_t)(x + lo) & 15) == ((uintptr_t)(y + lo) & 15);
  int64_t a0 = same ? align_up(x, lo, hi) : hi;
  int64_t nv = (hi - a0) / N, a1 = a0 + nv * N;
  for (int64_t k = lo + threadIdx.x; k < a0; k += blockDim.x)
    y[k] = out_of<T>(sm_out<T>(to_acc(x[k]), m, r, logsm));
  const int64_t bd = blockDim.x;
  int64_t k = threadIdx.x;
  for (; k + bd < nv; k += 2 * bd) {  // two loads in flight before the stores
    float v0[N], v1[N], o[N];
    load_vec(x + a0 + k * N, v0), load_vec(x + a0 + (k + bd) * N, v1);
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = sm_out<T>(v0[i], m, r, logsm);
    store_vec(y + a0 + k * N, o);
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = sm_out<T>(v1[i], m, r, logsm);
    store_vec(y + a0 + (k + bd) * N, o);
  }
  for (; k < nv; k += bd) {
    float v[N], o[N];
    load_vec(x + a0 + k * N, v);
#pragma unroll
    for (int i = 0; i < N; i++) o[i] = sm_out<T>(v[i], m, r, logsm);
    store_vec(y + a0 + k * N, o);
  }
  for (int64_t k = a1 + threadIdx.x; k < hi; k += blockDim.x)
    y[k] = out_of<T>(sm_out<T>(to_acc(x[k]), m, r, logsm));
}

// Block (slice, row): stats of its slice -> part; grid barrier; merge the row's partials
// (warp 0, fixed order); write the slice. Launched cooperatively only.
template <class T>
__global__ void __launch_bounds__(SM_THREADS)
    softmax_fused_kernel(const T *__restrict__ in, T *__restrict__ out, Lines l, int64_t chunk,
                         Part *part, bool logsm) {
  __shared__ MS<float> sh[33];
  __shared__ MS<float> res;
  int S = gridDim.x, s = blockIdx.x;
  int64_t row = blockIdx.y, io, oo;
  line_offsets(l, row, io, oo);
  int64_t lo = (int64_t)s * chunk, hi = lo + chunk < l.len ? lo + chunk : l.len;
  MS<float> t;
  ms_init(t);
  vsweep_stats(in + io, lo, hi, t);
  t = ms_block(t, sh);
  if (threadIdx.x == 0) part[row * S + s] = Part{(double)t.m, t.s, t.nan};
  // All partials written (the barrier fences; the reads below bypass L1).
  cooperative_groups::this_grid().sync();
  if (threadIdx.x < 32) {
    int lane = threadIdx.x;
    MS<float> u;
    ms_init(u);
    for (int k = lane; k < S; k += 32) {
      const Part *p = part + row * S + k;
      MS<float> o{(float)__ldcg(&p->m), __ldcg(&p->s), __ldcg(&p->nan)};
      ms_merge(u, o);
    }
    for (int off = 16; off > 0; off >>= 1) {
      MS<float> o = ms_shfl_down(u, off);
      if (lane + off < 32) ms_merge(u, o);
    }
    if (lane == 0) res = u;
  }
  __syncthreads();
  float m, r;
  ms_final(res, logsm, m, r);
  vsweep_out(in + io, out + oo, lo, hi, m, r, logsm);
}

constexpr int kMaxDev = 64;
// Per device and dtype (f32, bf16, f16): resident fused blocks per SM (0: not
// queried). Queried once; idempotent races.
std::atomic<int> g_occ[kMaxDev][3];

template <class T> constexpr int fused_slot() {
  return std::is_same<T, float>::value ? 0 : std::is_same<T, bf16_t>::value ? 1 : 2;
}

// Blocks of softmax_fused_kernel<T> that can be resident at once on dev (0: none/unknown).
template <class T> int64_t fused_capacity(int dev) {
  if (dev < 0 || dev >= kMaxDev) return 0;
  const int sms = cuda_coop_sms(dev);
  if (sms < 0) return 0;
  std::atomic<int> &oc = g_occ[dev][fused_slot<T>()];
  int occ = oc.load(std::memory_order_relaxed);
  if (occ == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, softmax_fused_kernel<T>, SM_THREADS,
                                                      0) != cudaSuccess) {
      (void)cudaGetLastError();
      occ = 0;
    }
    occ = occ > 0 ? occ : -1;
    oc.store(occ, std::memory_order_relaxed);
  }
  return occ > 0 ? (int64_t)occ * sms : 0;
}

// One cooperative launch for rows split in slices; false: not applicable or the launch was
// refused (nothing queued), the caller then takes the two-kernel path.
template <class T>
bool launch_fused(const T *in, T *out, const Lines &l, bool logsm, int dev, cudaStream_t st,
                  ingot_status &rc) {
  if constexpr (!RowClusterType<T>::value) {
    return false;
  } else {
    // A refused cooperative launch would invalidate a capture: graphs take
    // the two-kernel path.
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
      return false;
    int64_t cap = fused_capacity<T>(dev);
    if (cap <= 0 || l.count > 65535) return false;
    int64_t target = cap < kSMs * 8 ? cap : kSMs * 8;
    int64_t S = target / l.count;
    if (S > l.len / 1024) S = l.len / 1024;
    if (S > 128) S = 128;
    if (S < 2) return false;
    constexpr int N = Vec<T>::N;
    int64_t chunk = (l.len + S - 1) / S;
    chunk = (chunk + N - 1) / N * N;  // slices start on 16-byte boundaries of aligned rows
    S = (l.len + chunk - 1) / chunk;
    if (S < 2 || S * l.count > cap) return false;
    Part *part = (Part *)cuda_scratch_alloc(dev, (size_t)(l.count * S) * sizeof(Part), st);
    if (!part) {
      rc = ingot_set_error(INGOT_ERR_OOM, "cuda softmax: no scratch memory");
      return true;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)S, (unsigned)l.count, 1);
    cfg.blockDim = dim3(SM_THREADS, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, softmax_fused_kernel<T>, in, out, l, chunk, part,
                                       logsm);
    cuda_scratch_free(dev, part, st);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not queued: take the two-kernel path
      return false;
    }
    rc = INGOT_OK;
    return true;
  }
}

// ---- the row-cluster path (row_cluster.cuh): f32, bf16, f16 rows of kRowClusterMinLen to
// row_cluster_cap<T>() elements ----

// max that keeps NaN (fmaxf drops it).
__device__ __forceinline__ float nan_max(float a, float b) {
  return a != a || b != b ? NAN : fmaxf(a, b);
}

// Block (rank, row) of a cluster: its slice into registers; the row max, then the row sum
// of exp(x - max), each merged block -> cluster (every block pushes its value into every
// block's shared memory, then one cluster barrier; all blocks merge in rank order, so they
// agree bit for bit); the slice written once.
template <class T>
__global__ void __cluster_dims__(kRowClusterBlocks, 1, 1) __launch_bounds__(kRowClusterThreads, 1)
    softmax_cluster_kernel(const T *__restrict__ in, T *__restrict__ out, Lines l, int64_t chunk,
                           bool logsm) {
  constexpr int N = Vec<T>::N, NV = RowVecs<T>::NV, C = kRowClusterBlocks;
  constexpr int W = kRowClusterThreads / 32;
  __shared__ float wmax[W];
  __shared__ double wsum[W];
  __shared__ float cmax[C];
  __shared__ double csum[C];
  __cluster_barrier_arrive_relaxed();  // this block runs: peers may write into it after the wait
  const int rank = (int)__clusterRelativeBlockRank(), lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int64_t io, oo, lo, hi;
  line_offsets(l, blockIdx.y, io, oo);
  slice_bounds(rank, chunk, l.len, lo, hi);
  float v[NV][N];
  slice_load<T, NV>(in + io, lo, hi, v, -INFINITY);  // -inf: adds nothing to max or sum

  float m = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < NV; i++)
#pragma unroll
    for (int c = 0; c < N; c++) m = fmaxf(m, v[i][c]), nan |= v[i][c] != v[i][c];
  if (nan) m = NAN;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) wmax[warp] = m;
  __syncthreads();
  __cluster_barrier_wait();
  if (threadIdx.x < C) {  // thread p pushes the block's max to block p
    float b = wmax[0];
    for (int w = 1; w < W; w++) b = nan_max(b, wmax[w]);
    row_cluster_peer(cmax, threadIdx.x)[rank] = b;
  }
  row_cluster_sync();
  float mx = cmax[0];
#pragma unroll
  for (int p = 1; p < C; p++) mx = nan_max(mx, cmax[p]);
  // NaN in the row, or a max of +-inf (exp(inf - inf), all -inf): the CPU's line is NaN
  if (!isfinite(mx)) mx = NAN;

  float ts = 0.f;
#pragma unroll
  for (int i = 0; i < NV; i++)
#pragma unroll
    for (int c = 0; c < N; c++) {
      float e = expf(v[i][c] - mx);
      ts += e;
      if (!logsm) v[i][c] = e;
    }
  double s = ts;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) wsum[warp] = s;
  __syncthreads();
  if (threadIdx.x < C) {
    double b = 0;
    for (int w = 0; w < W; w++) b += wsum[w];
    row_cluster_peer(csum, threadIdx.x)[rank] = b;
  }
  row_cluster_sync();  // the last barrier: no peer access after it
  double sum = 0;
#pragma unroll
  for (int p = 0; p < C; p++) sum += csum[p];
  const float r = logsm ? (float)log(sum) : (float)(1.0 / sum);
#pragma unroll
  for (int i = 0; i < NV; i++)
#pragma unroll
    for (int c = 0; c < N; c++) v[i][c] = logsm ? (v[i][c] - mx) - r : v[i][c] * r;
  slice_store<T, NV>(out + oo, lo, hi, v);
}

// One cluster launch for contiguous rows in the cluster's range; false: not applicable, or
// the launch was refused (nothing queued; the device then keeps to the other paths).
template <class T>
bool launch_cluster(const T *in, T *out, const Lines &l, bool logsm, int dev, cudaStream_t st) {
  if constexpr (!RowClusterType<T>::value) {
    return false;
  } else {
    if (!row_cluster_fits<T>(l.len, l.count) || !row_cluster_usable(dev)) return false;
    return row_cluster_launch(dev, softmax_cluster_kernel<T>, l.count, st, in, out, l,
                              row_cluster_chunk(l.len, Vec<T>::N), logsm);
  }
}

template <class T>
ingot_status launch_softmax(const ingot_op_args *a, const Lines &l, int dev, cudaStream_t st) {
  const T *in = (const T *)ingot_tensor_data(a->in[0]);
  T *out = (T *)ingot_tensor_data(a->out[0]);
  bool logsm = a->op == INGOT_OP_LOG_SOFTMAX;
  if (l.xs != 1 || l.ys != 1 || l.len < 32) {
    // strided lines (a non-last dim) or tiny ones: a thread per line; small blocks when
    // there are few lines, so that they spread over the SMs
    int th = l.count >= 132 * 128 ? 128 : 32;
    softmax_line_kernel<T><<<grid_for(l.count, th), th, 0, st>>>(in, out, l, logsm);
    return launch_status("softmax line kernel");
  }
  if (launch_cluster<T>(in, out, l, logsm, dev, st)) return INGOT_OK;
  // slices per row: fill the GPU (8 blocks of 256 per SM) with >= 1024 elements a block
  int64_t S = 1;
  const int64_t target = kSMs * 8;
  if (l.count < target && l.len >= 4096) {
    S = target / l.count;
    if (S > l.len / 1024) S = l.len / 1024;
    if (S > 128) S = 128;
    if (S < 1) S = 1;
  }
  if (S > 1) {
    ingot_status frc = INGOT_OK;
    if (launch_fused<T>(in, out, l, logsm, dev, st, frc)) return frc;
  }
  if (S == 1) {
    int64_t blocks = l.count < kSMs * 32 ? l.count : kSMs * 32;
    softmax_row_kernel<T><<<(unsigned)blocks, SM_THREADS, 0, st>>>(in, out, l, logsm);
    return launch_status("softmax row kernel");
  }
  int64_t chunk = (l.len + S - 1) / S;
  chunk = (chunk + 3) & ~(int64_t)3;  // slices start on 16-byte boundaries
  S = (l.len + chunk - 1) / chunk;
  Part *part = (Part *)cuda_scratch_alloc(dev, (size_t)(l.count * S) * sizeof(Part), st);
  if (!part) return ingot_set_error(INGOT_ERR_OOM, "cuda softmax: no scratch memory");
  dim3 grid((unsigned)S, (unsigned)l.count, 1);
  softmax_part_kernel<T><<<grid, SM_THREADS, 0, st>>>(in, l, chunk, part);
  ingot_status rc = launch_status("softmax partial kernel");
  if (rc == INGOT_OK) {
    softmax_norm_kernel<T><<<grid, SM_THREADS, 0, st>>>(in, out, l, chunk, part, logsm);
    rc = launch_status("softmax normalise kernel");
  }
  cuda_scratch_free(dev, part, st);
  return rc;
}

ingot_status k_softmax(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  int dev = ingot_device_of(in).index;
  ingot_status rc = cuda_use_device(dev);
  if (rc) return rc;
  Lines l = make_lines(in, a->out[0], (int)a->iarg[0]);
  if (l.count == 0 || l.len == 0) return INGOT_OK;
  cudaStream_t st = stream_of(a->out[0]);
  ingot_dtype dt = ingot_dtype_of(in);
  switch (dt) {
    CUDA_CASES_FLOAT(return launch_softmax<scalar_t>(a, l, dev, st))
    CUDA_CASES_F8(return launch_softmax<scalar_t>(a, l, dev, st))
    default:
      break;
  }
  return ingot_set_error(INGOT_ERR_DTYPE, "cuda %s: dtype %s not supported", ingot_op_name(a->op),
                         ingot_dtype_name(dt));
}

}  // namespace

void cuda_register_softmax(ingot_backend *be) {
  be->kernels[INGOT_OP_SOFTMAX] = k_softmax;
  be->kernels[INGOT_OP_LOG_SOFTMAX] = k_softmax;
}
