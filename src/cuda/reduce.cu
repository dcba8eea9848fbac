// CUDA reductions: SUM MEAN PROD AMAX AMIN MAX_DIM MIN_DIM ARGMAX ARGMIN VAR STD NORM
// LOGSUMEXP ANY ALL, every dtype the CPU takes, with the CPU's semantics (src/cpu/reduce.c):
// integer sums/products wrap in uint64 and come out int64, every float (f8/f16/bf16/f32/f64)
// and complex accumulates in double, var/std use Welford per thread and Chan merges, the
// max family keeps the first index (ties and NaN: the smallest index wins, so the merge
// order does not matter), logsumexp merges (max, sum exp) pairs.
//
// Design. The input is viewed as kept dims (one per output, coalesced) x reduced dims
// (coalesced); r, the row-major position in the reduced dims, is also argmax's index.
//  - row kernel (reduced dims innermost in memory, e.g. sum over the last dim): one block
//    per output, threads stride over r, warp shuffles then a shared-memory step merge.
//  - column kernel (a kept dim is denser than the reduced ones, e.g. sum over dim 0):
//    threadIdx.x walks neighbouring outputs (coalesced reads), threadIdx.y splits r.
//  - few outputs and long reductions (sum of 2^28 elements, argmax over a vocabulary):
//    either kernel also splits r over gridDim.y slices that write accumulators to
//    scratch; a final kernel merges each output's slices in a fixed order. No atomics:
//    results are deterministic.
// One instantiation per input dtype; the op is a runtime switch (keeps compile time low).
// Softmax, log_softmax, cumsum and cumprod are in softmax.cu / scan.cu (registered here).
#include <math.h>

#include "../core/reduce_ops.h"
#include "cuda_common.cuh"
#include "reduce_common.cuh"

namespace {

// The accumulator, its context and the DOM_* domains are src/core/reduce_ops.h's (racc,
// rctx), shared with the CPU: a..d doubles (sum, max, mean/M2 pairs...), u wrapping
// integer sum/product, i integer extreme, idx its index, n elements seen.
using Acc = racc;
using RCtx = rctx;

struct RPlan {
  int nk, nr;
  int64_t ksh[INGOT_MAX_DIMS], kst[INGOT_MAX_DIMS];  // kept dims (element strides)
  int64_t rsh[INGOT_MAX_DIMS], rst[INGOT_MAX_DIMS];  // reduced dims
  int64_t nout, nred;
};

template <class T> struct is_cplx { static constexpr bool value = false; };
template <> struct is_cplx<c64_t> { static constexpr bool value = true; };
template <> struct is_cplx<c128_t> { static constexpr bool value = true; };
template <class T> struct is_intg {
  static constexpr bool value = false;
};
template <> struct is_intg<uint8_t> { static constexpr bool value = true; };
template <> struct is_intg<int8_t> { static constexpr bool value = true; };
template <> struct is_intg<int16_t> { static constexpr bool value = true; };
template <> struct is_intg<int32_t> { static constexpr bool value = true; };
template <> struct is_intg<int64_t> { static constexpr bool value = true; };

// x (real part / value as double), y (imaginary part), iv (integer value).
template <class T>
__device__ __forceinline__ void load_val(T v, double &x, double &y, int64_t &iv) {
  if constexpr (is_cplx<T>::value) {
    x = (double)v.re, y = (double)v.im, iv = 0;
  } else if constexpr (is_intg<T>::value) {
    x = (double)v, y = 0, iv = (int64_t)v;
  } else {
    x = (double)to_acc(v), y = 0, iv = 0;
  }
}

// Fold one element (index idx; a thread sees its elements in increasing idx).
template <class T>
__device__ __forceinline__ void acc_elem(Acc &s, const RCtx &c, T v, int64_t idx) {
  double x, y;
  int64_t iv;
  load_val(v, x, y, iv);
  switch (c.op) {
    case INGOT_OP_SUM:
    case INGOT_OP_MEAN:
      if (c.dom == DOM_I) s.u += (uint64_t)iv;
      else s.a += x, s.b += y;
      break;
    case INGOT_OP_PROD:
      if (c.dom == DOM_I) {
        s.u *= (uint64_t)iv;
      } else if (c.dom == DOM_Z) {
        double re = s.a * x - s.b * y, im = s.a * y + s.b * x;
        s.a = re, s.b = im;
      } else {
        s.a *= x;
      }
      break;
    case INGOT_OP_AMAX:
    case INGOT_OP_AMIN:
    case INGOT_OP_MAX_DIM:
    case INGOT_OP_MIN_DIM:
    case INGOT_OP_ARGMAX:
    case INGOT_OP_ARGMIN:
      if (s.flag) break;  // this thread's first NaN already won
      if (c.dom == DOM_I) {
        if (s.n == 0 || red_better_i(c.is_max, iv, s.i)) s.i = iv, s.idx = idx;
      } else if (s.n == 0 || isnan(x) || red_better_d(c.is_max, x, s.a)) {
        s.a = x, s.idx = idx, s.flag = isnan(x);
      }
      break;
    case INGOT_OP_VAR:
    case INGOT_OP_STD: {
      double n1 = (double)(s.n + 1), d = x - s.a;
      s.a += d / n1;
      s.b += d * (x - s.a);
      if (c.dom == DOM_Z) {
        double e = y - s.c;
        s.c += e / n1;
        s.d += e * (y - s.c);
      }
      break;
    }
    case INGOT_OP_NORM: {
      double ax = is_cplx<T>::value ? hypot(x, y) : fabs(x);
      double p = c.p;
      if (isinf(p)) {
        if (isnan(ax)) s.flag = 1;
        else if (red_better_d(p > 0, ax, s.a)) s.a = ax;
      } else if (p == 0) {
        s.a += ax != 0;
      } else if (p == 1) {
        s.a += ax;
      } else if (p == 2) {
        s.a += ax * ax;
      } else {
        s.a += pow(ax, p);
      }
      break;
    }
    case INGOT_OP_LOGSUMEXP:
      if (isnan(x)) {
        s.flag = 1;
      } else {
        if (x > s.a) s.b = isinf(s.a) ? 0 : s.b * exp(s.a - x), s.a = x;
        if (!isinf(s.a)) s.b += exp(x - s.a);
      }
      break;
    case INGOT_OP_ANY:
      s.flag |= (x != 0 || y != 0);
      break;
    case INGOT_OP_ALL:
      s.flag &= (x != 0 || y != 0);
      break;
    default:
      break;
  }
  s.n++;
}

// Fold o into s (o's elements normally follow s's; the max family does not care).
__device__ __forceinline__ void acc_merge(Acc &s, const Acc &o, const RCtx &c) {
  if (o.n == 0) return;
  if (s.n == 0) {
    s = o;
    return;
  }
  switch (c.op) {
    case INGOT_OP_AMAX:
    case INGOT_OP_AMIN:
    case INGOT_OP_MAX_DIM:
    case INGOT_OP_MIN_DIM:
    case INGOT_OP_ARGMAX:
    case INGOT_OP_ARGMIN: {
      bool take;
      if (s.flag || o.flag)
        take = o.flag && (!s.flag || o.idx < s.idx);
      else if (c.dom == DOM_I)
        take = red_better_i(c.is_max, o.i, s.i) || (o.i == s.i && o.idx < s.idx);
      else
        take = red_better_d(c.is_max, o.a, s.a) || (o.a == s.a && o.idx < s.idx);
      if (take) s.a = o.a, s.i = o.i, s.idx = o.idx, s.flag = o.flag;
      break;
    }
    default: red_merge(&s, &o, &c); break;
  }
  s.n += o.n;
}

__device__ __forceinline__ int dt_size(int dt) {
  switch (dt) {
    case INGOT_BOOL: case INGOT_U8: case INGOT_I8: case INGOT_F8E4M3FN: case INGOT_F8E5M2:
      return 1;
    case INGOT_I16: case INGOT_F16: case INGOT_BF16: return 2;
    case INGOT_I32: case INGOT_F32: return 4;
    case INGOT_C128: return 16;
    default: return 8;
  }
}

__device__ void acc_finish(const Acc &s, const RCtx &c, char *out0, int64_t *out1, int64_t o) {
  red_finish(&s, &c, out0 + o * dt_size(c.out_dt), out1 ? out1 + o : nullptr);
}

__device__ __forceinline__ Acc acc_shfl_down(const Acc &s, int off) {
  Acc o;
  o.a = __shfl_down_sync(0xffffffffu, s.a, off);
  o.b = __shfl_down_sync(0xffffffffu, s.b, off);
  o.c = __shfl_down_sync(0xffffffffu, s.c, off);
  o.d = __shfl_down_sync(0xffffffffu, s.d, off);
  o.u = __shfl_down_sync(0xffffffffu, (unsigned long long)s.u, off);
  o.i = __shfl_down_sync(0xffffffffu, (long long)s.i, off);
  o.idx = __shfl_down_sync(0xffffffffu, (long long)s.idx, off);
  o.n = __shfl_down_sync(0xffffffffu, (long long)s.n, off);
  o.flag = __shfl_down_sync(0xffffffffu, s.flag, off);
  return o;
}

// Merge over a full warp; lane 0 ends with the lane-ordered merge of all 32.
__device__ __forceinline__ Acc warp_merge(Acc s, const RCtx &c) {
  int lane = threadIdx.x & 31;
  for (int off = 16; off > 0; off >>= 1) {
    Acc o = acc_shfl_down(s, off);
    if (lane + off < 32) acc_merge(s, o, c);
  }
  return s;
}

// Merge over a 1-D block (blockDim.x a multiple of 32); thread 0 gets the result.
// Every thread must call it (it has __syncthreads).
__device__ Acc block_merge(Acc s, const RCtx &c, Acc *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  s = warp_merge(s, c);
  if (nw == 1) return s;
  if (lane == 0) sh[warp] = s;
  __syncthreads();
  if (warp == 0) {
    if (lane < nw) s = sh[lane];
    else red_acc_init(&s, &c);
    s = warp_merge(s, c);
  }
  __syncthreads();  // sh is reused by the caller's next output
  return s;
}

__device__ __forceinline__ int64_t kept_offset(const RPlan &pl, int64_t o) {
  int64_t off = 0;
  for (int d = pl.nk - 1; d >= 0; d--) {
    off += (o % pl.ksh[d]) * pl.kst[d];
    o /= pl.ksh[d];
  }
  return off;
}

__device__ __forceinline__ int64_t red_offset(const RPlan &pl, int64_t r) {
  int64_t off = 0;
  for (int d = pl.nr - 1; d >= 0; d--) {
    off += (r % pl.rsh[d]) * pl.rst[d];
    r /= pl.rsh[d];
  }
  return off;
}

// One block per output (grid-stride over outputs), gridDim.y slices of the reduction.
template <class T>
__global__ void __launch_bounds__(256) reduce_row_kernel(const T *__restrict__ in, RPlan pl,
                                                          RCtx c, char *out0, int64_t *out1,
                                                          Acc *part, int64_t chunk) {
  __shared__ Acc sh[32];
  const int S = gridDim.y, s = blockIdx.y;
  const int64_t B = blockDim.x;
  for (int64_t o = blockIdx.x; o < pl.nout; o += gridDim.x) {
    const T *base = in + kept_offset(pl, o);
    int64_t lo = (int64_t)s * chunk, hi = lo + chunk < pl.nred ? lo + chunk : pl.nred;
    Acc acc;
    red_acc_init(&acc, &c);
    if (pl.nr <= 1) {
      int64_t st = pl.nr ? pl.rst[0] : 0, r = lo + threadIdx.x;
      for (; r + 3 * B < hi; r += 4 * B) {  // four loads in flight per thread
        T v0 = base[r * st], v1 = base[(r + B) * st], v2 = base[(r + 2 * B) * st],
          v3 = base[(r + 3 * B) * st];
        acc_elem(acc, c, v0, r);
        acc_elem(acc, c, v1, r + B);
        acc_elem(acc, c, v2, r + 2 * B);
        acc_elem(acc, c, v3, r + 3 * B);
      }
      for (; r < hi; r += B) acc_elem(acc, c, base[r * st], r);
    } else {
      for (int64_t r = lo + threadIdx.x; r < hi; r += B) acc_elem(acc, c, base[red_offset(pl, r)], r);
    }
    acc = block_merge(acc, c, sh);
    if (threadIdx.x == 0) {
      if (S == 1) acc_finish(acc, c, out0, out1, o);
      else part[o * S + s] = acc;
    }
  }
}

// threadIdx.x over neighbouring outputs, threadIdx.y (and gridDim.y slices) over r.
template <class T>
__global__ void __launch_bounds__(256) reduce_col_kernel(const T *__restrict__ in, RPlan pl,
                                                          RCtx c, char *out0, int64_t *out1,
                                                          Acc *part, int64_t chunk) {
  __shared__ Acc sh[256];
  const int S = gridDim.y, s = blockIdx.y;
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t ob = (int64_t)blockIdx.x * bx; ob < pl.nout; ob += (int64_t)gridDim.x * bx) {
    int64_t o = ob + tx;
    Acc acc;
    red_acc_init(&acc, &c);
    if (o < pl.nout) {
      const T *base = in + kept_offset(pl, o);
      int64_t lo = (int64_t)s * chunk, hi = lo + chunk < pl.nred ? lo + chunk : pl.nred;
      if (pl.nr <= 1) {
        int64_t st = pl.nr ? pl.rst[0] : 0;
        for (int64_t r = lo + ty; r < hi; r += by) acc_elem(acc, c, base[r * st], r);
      } else {
        for (int64_t r = lo + ty; r < hi; r += by) acc_elem(acc, c, base[red_offset(pl, r)], r);
      }
    }
    if (by > 1) {
      sh[ty * bx + tx] = acc;
      __syncthreads();
      if (ty == 0)
        for (int k = 1; k < by; k++) acc_merge(acc, sh[k * bx + tx], c);
      __syncthreads();
    }
    if (ty == 0 && o < pl.nout) {
      if (S == 1) acc_finish(acc, c, out0, out1, o);
      else part[o * S + s] = acc;
    }
  }
}

// One warp per output: merge its S slice accumulators, then finish.
__global__ void reduce_final_kernel(const Acc *__restrict__ part, int S, RCtx c, int64_t nout,
                                    char *out0, int64_t *out1) {
  int lane = threadIdx.x & 31;
  int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t o = w; o < nout; o += nw) {  // uniform per warp
    Acc acc;
    red_acc_init(&acc, &c);
    for (int k = lane; k < S; k += 32) acc_merge(acc, part[o * S + k], c);
    acc = warp_merge(acc, c);
    if (lane == 0) acc_finish(acc, c, out0, out1, o);
  }
}

// ---- host side ----
const int kSMs = 132;
const int64_t kTargetBlocks = kSMs * 8;

template <class T>
ingot_status launch_reduce(const ingot_op_args *a, const RPlan &pl, const RCtx &c, int dev,
                           cudaStream_t st) {
  const T *in = (const T *)ingot_tensor_data(a->in[0]);
  char *out0 = (char *)ingot_tensor_data(a->out[0]);
  int64_t *out1 = a->nout > 1 && a->out[1] ? (int64_t *)ingot_tensor_data(a->out[1]) : nullptr;
  int64_t nred = pl.nred;
  bool col = pl.nk > 0 && pl.nr > 0 && nred > 0 &&
             llabs(pl.kst[pl.nk - 1]) < llabs(pl.rst[pl.nr - 1]);
  // Many short reductions: one thread per output is cheapest.
  bool thread_per_out = nred <= 16 && pl.nout >= 4096;
  int64_t S = 1, chunk = nred > 0 ? nred : 1;
  dim3 grid, block;
  if (col || thread_per_out) {
    int bx = thread_per_out ? 256 : 32, by = 256 / bx;
    int64_t gx = (pl.nout + bx - 1) / bx;
    if (gx < kTargetBlocks && nred >= (int64_t)by * 64) {
      S = kTargetBlocks / gx;
      int64_t smax = nred / ((int64_t)by * 32);
      if (S > smax) S = smax;
      if (S > 1024) S = 1024;
      if (S < 1) S = 1;
    }
    if (gx > kSMs * 16) gx = kSMs * 16;
    grid = dim3((unsigned)gx, 1, 1);
    block = dim3(bx, by, 1);
  } else {
    int threads = 32;
    while (threads < 256 && threads * 8 < nred) threads *= 2;
    int64_t gx = pl.nout;
    if (gx < kTargetBlocks && nred >= 4096) {
      S = kTargetBlocks / gx;
      int64_t smax = nred / ((int64_t)threads * 16);
      if (S > smax) S = smax;
      if (S > 1024) S = 1024;
      if (S < 1) S = 1;
    }
    if (gx > kSMs * 32) gx = kSMs * 32;
    grid = dim3((unsigned)gx, 1, 1);
    block = dim3(threads, 1, 1);
  }
  if (S > 1) {
    chunk = (nred + S - 1) / S;
    S = (nred + chunk - 1) / chunk;  // no empty slices
  }
  grid.y = (unsigned)S;
  Acc *part = nullptr;
  if (S > 1) {
    part = (Acc *)cuda_scratch_alloc(dev, (size_t)(pl.nout * S) * sizeof(Acc), st);
    if (!part) return ingot_set_error(INGOT_ERR_OOM, "cuda reduce: no scratch memory");
  }
  if (col || thread_per_out)
    reduce_col_kernel<T><<<grid, block, 0, st>>>(in, pl, c, out0, out1, part, chunk);
  else
    reduce_row_kernel<T><<<grid, block, 0, st>>>(in, pl, c, out0, out1, part, chunk);
  ingot_status rc = launch_status("reduce kernel");
  if (rc == INGOT_OK && S > 1) {
    int64_t blocks = (pl.nout * 32 + 255) / 256;
    if (blocks > kSMs * 16) blocks = kSMs * 16;
    reduce_final_kernel<<<(unsigned)blocks, 256, 0, st>>>(part, (int)S, c, pl.nout, out0, out1);
    rc = launch_status("reduce final kernel");
  }
  if (part) cuda_scratch_free(dev, part, st);
  return rc;
}

ingot_status k_reduce(ingot_op_args *a) {
  const ingot_tensor *in = a->in[0];
  int dev = ingot_device_of(in).index;
  ingot_status rc = cuda_use_device(dev);
  if (rc) return rc;
  ingot_dtype dt = ingot_dtype_of(in);
  RPlan pl;
  pl.nk = pl.nr = 0;
  pl.nout = pl.nred = 1;
  int nd = ingot_ndim(in);
  const int64_t *sh = ingot_shape(in), *str = ingot_strides(in);
  for (int d = 0; d < nd; d++) {
    if (a->dims & (1u << d)) {
      red_push_dim(&pl.nr, pl.rsh, pl.rst, sh[d], str[d]);
      pl.nred *= sh[d];
    } else {
      red_push_dim(&pl.nk, pl.ksh, pl.kst, sh[d], str[d]);
      pl.nout *= sh[d];
    }
  }
  if (pl.nout == 0) return INGOT_OK;
  RCtx c;
  c.op = a->op;
  c.dom = red_pick_dom(a->op, dt);
  c.in_dt = dt;
  c.out_dt = ingot_dtype_of(a->out[0]);
  c.is_max = red_is_max(a->op);
  c.p = c.corr = a->farg[0];
  c.nred = pl.nred;
  cudaStream_t st = stream_of(a->out[0]);
  switch (dt) {
    CUDA_CASE(INGOT_BOOL, uint8_t, return launch_reduce<scalar_t>(a, pl, c, dev, st))
    CUDA_CASES_INT(return launch_reduce<scalar_t>(a, pl, c, dev, st))
    CUDA_CASES_FLOAT(return launch_reduce<scalar_t>(a, pl, c, dev, st))
    CUDA_CASES_F8(return launch_reduce<scalar_t>(a, pl, c, dev, st))
    CUDA_CASE(INGOT_C64, c64_t, return launch_reduce<scalar_t>(a, pl, c, dev, st))
    CUDA_CASE(INGOT_C128, c128_t, return launch_reduce<scalar_t>(a, pl, c, dev, st))
    default:
      break;
  }
  return ingot_set_error(INGOT_ERR_DTYPE, "cuda %s: dtype %s not supported", ingot_op_name(a->op),
                         ingot_dtype_name(dt));
}

}  // namespace

extern "C" void cuda_register_reduce(ingot_backend *be) {
  static const ingot_op ops[] = {
      INGOT_OP_SUM,     INGOT_OP_MEAN,    INGOT_OP_PROD,      INGOT_OP_AMAX,   INGOT_OP_AMIN,
      INGOT_OP_MAX_DIM, INGOT_OP_MIN_DIM, INGOT_OP_ARGMAX,    INGOT_OP_ARGMIN, INGOT_OP_VAR,
      INGOT_OP_STD,     INGOT_OP_NORM,    INGOT_OP_LOGSUMEXP, INGOT_OP_ANY,    INGOT_OP_ALL};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) be->kernels[ops[i]] = k_reduce;
  cuda_register_scan(be);
  cuda_register_softmax(be);
}
