// CUDA index kernels: INDEX_SELECT, GATHER, EMBEDDING, SCATTER, SCATTER_ADD,
// INDEX_PUT, MASKED_FILL, MASKED_SELECT, NONZERO (contracts beside the fronts
// in src/core/ops_index.c; CPU reference src/cpu/index.c). Every dtype.
//
// Design:
// - Index validation. The CPU fails with INGOT_ERR_INDEX (naming the first
//   bad index in flat order) before it writes. Here a small kernel records
//   the flat position of the first bad index with atomicMin into an 8-byte
//   device flag, which is copied to the host (one 8-byte D2H copy and a
//   stream sync; a second copy reads the bad value, on the error path only)
//   before any output is written. This sync is what PyTorch's device-side
//   assert replaces. It is skipped (no host round trip) when
//   INGOT_CUDA_CHECK_INDICES=0 or while the stream is being captured into a
//   graph (a sync is illegal there): then no error is raised, and the
//   kernels stay memory-safe on their own: an out-of-range index reads zeros
//   (index_select, gather, embedding) or writes nothing (scatter, index_put).
//   Default: checked, identical to the CPU. Embedding follows the same rule,
//   so decode loops that want zero round trips set INGOT_CUDA_CHECK_INDICES=0
//   or run captured.
// - index_select / gather / strided embedding: one thread per output element,
//   copied by element size. Embedding with contiguous rows: one block per
//   looked-up row, copying with the widest vector (16/8/4/2/1 bytes) that the
//   row addresses and length allow.
// - scatter, scatter_add, index_put (both modes): deterministic and
//   bit-identical to the CPU for every dtype, floats included (no float
//   atomics: fp atomicAdd reorders additions, and f16/bf16 would then miss
//   the diff tolerance). Each write is keyed by its target element (or row)
//   offset, the keys are stably radix-sorted (cub, stable), and one thread per
//   run of equal keys applies the run in the original order: adds in index
//   order (scatter_add, index_put accumulate) or keeps the last (scatter,
//   index_put), exactly as the CPU loops do.
// - masked_select / nonzero: chunks of 1024 elements; pass 1 counts each
//   chunk's flags, an exclusive scan (cub) gives chunk offsets and the total,
//   which is copied to the host (one 8-byte D2H copy: the output size depends
//   on the data); out[0] is allocated here; pass 2 recomputes the flags and a
//   block scan places each element in row-major order (stable).
#include <cub/cub.cuh>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

namespace {

struct alignas(8) b16_t { uint64_t lo, hi; };
struct bool_t { uint8_t x; };  // bool storage; accumulates with OR as the CPU does

// ---- accumulation, as the CPU's ADD_TYPES (wrapping ints, per-step rounding) ----
__device__ __forceinline__ bool_t add_el(bool_t x, bool_t y) { return {(uint8_t)(x.x | y.x)}; }
__device__ __forceinline__ uint8_t add_el(uint8_t x, uint8_t y) { return (uint8_t)(x + y); }
__device__ __forceinline__ int8_t add_el(int8_t x, int8_t y) {
  return (int8_t)(uint8_t)((uint8_t)x + (uint8_t)y);
}
__device__ __forceinline__ int16_t add_el(int16_t x, int16_t y) {
  return (int16_t)(uint16_t)((uint16_t)x + (uint16_t)y);
}
__device__ __forceinline__ int32_t add_el(int32_t x, int32_t y) {
  return (int32_t)((uint32_t)x + (uint32_t)y);
}
__device__ __forceinline__ int64_t add_el(int64_t x, int64_t y) {
  return (int64_t)((uint64_t)x + (uint64_t)y);
}
__device__ __forceinline__ float add_el(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double add_el(double x, double y) { return __dadd_rn(x, y); }
__device__ __forceinline__ c64_t add_el(c64_t x, c64_t y) {
  return {__fadd_rn(x.re, y.re), __fadd_rn(x.im, y.im)};
}
__device__ __forceinline__ c128_t add_el(c128_t x, c128_t y) {
  return {__dadd_rn(x.re, y.re), __dadd_rn(x.im, y.im)};
}
template <class T> __device__ __forceinline__ T add_small_float(T x, T y) {
  return from_acc<T>(__fadd_rn(to_acc(x), to_acc(y)));
}
__device__ __forceinline__ f16_t add_el(f16_t x, f16_t y) { return add_small_float(x, y); }
__device__ __forceinline__ bf16_t add_el(bf16_t x, bf16_t y) { return add_small_float(x, y); }
__device__ __forceinline__ f8e4m3_t add_el(f8e4m3_t x, f8e4m3_t y) {
  return add_small_float(x, y);
}
__device__ __forceinline__ f8e5m2_t add_el(f8e5m2_t x, f8e5m2_t y) {
  return add_small_float(x, y);
}

// Runs BODY with scalar_t = the accumulation type of dt (all 14 dtypes).
#define ACC_DISPATCH(dt, ...)                                                                  \
  switch (dt) {                                                                                \
    CUDA_CASE(INGOT_BOOL, bool_t, __VA_ARGS__)                                                 \
    CUDA_CASES_INT(__VA_ARGS__)                                                                \
    CUDA_CASES_FLOAT(__VA_ARGS__)                                                              \
    CUDA_CASE(INGOT_C64, c64_t, __VA_ARGS__)                                                   \
    CUDA_CASE(INGOT_C128, c128_t, __VA_ARGS__)                                                 \
    CUDA_CASES_F8(__VA_ARGS__)                                                                 \
  default: return ingot_set_error(INGOT_ERR_DTYPE, "cuda index: unsupported dtype %d", (int)dt); \
  }

// Runs BODY with scalar_t = an unsigned word of es bytes (pure data movement).
#define SIZE_DISPATCH(es, ...)                                                                 \
  switch (es) {                                                                                \
    CUDA_CASE(1, uint8_t, __VA_ARGS__)                                                         \
    CUDA_CASE(2, uint16_t, __VA_ARGS__)                                                        \
    CUDA_CASE(4, uint32_t, __VA_ARGS__)                                                        \
    CUDA_CASE(8, uint64_t, __VA_ARGS__)                                                        \
    CUDA_CASE(16, b16_t, __VA_ARGS__)                                                          \
  default: return ingot_set_error(INGOT_ERR_DTYPE, "cuda index: element size %d", (int)es);    \
  }

const int kThreads = 256;

void contiguous_strides(int nd, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    st[d] = s;
    s *= shape[d];
  }
}

// Scratch memory released on every path (the free is stream-ordered).
struct Scratch {
  int dev;
  cudaStream_t s;
  void *p = nullptr;
  Scratch(int dev_, cudaStream_t s_) : dev(dev_), s(s_) {}
  ~Scratch() {
    if (p) cuda_scratch_free(dev, p, s);
  }
  void *get(size_t n) { return p = cuda_scratch_alloc(dev, n, s); }
};

size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

// ---- index validation ----
struct Ranges {
  int64_t lo[INGOT_MAX_DIMS], hi[INGOT_MAX_DIMS];
};

// idx[i] must lie in [lo[j], hi[j]) with j = i / seg; first bad i -> *first.
__global__ void range_kernel(const int64_t *__restrict__ idx, int64_t n, int64_t seg, Ranges r,
                             unsigned long long *first) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t j = i / seg, v = idx[i];
    if (v < r.lo[j] || v >= r.hi[j]) atomicMin(first, (unsigned long long)i);
  }
}

// False when index checks are off: INGOT_CUDA_CHECK_INDICES=0, or s is
// capturing (a host sync would invalidate the capture).
bool checks_enabled(cudaStream_t s) {
  static const bool env_on = [] {
    const char *e = getenv("INGOT_CUDA_CHECK_INDICES");
    return !(e && strcmp(e, "0") == 0);
  }();
  if (!env_on) return false;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return cs == cudaStreamCaptureStatusNone;
}

// Check nseg segments of seg indices each (segment j in [lo[j], hi[j])).
// On a bad index: INGOT_ERR_INDEX with the CPU's message; put_style selects
// index_put's wording (dim = segment, size = hi[j]).
ingot_status check_indices(const char *op, const int64_t *idx, int64_t seg, int nseg,
                           const Ranges &r, int dim, bool put_style, int dev, cudaStream_t s) {
  int64_t n = seg * nseg;
  if (n == 0 || !checks_enabled(s)) return INGOT_OK;
  Scratch sc(dev, s);
  unsigned long long *flag = (unsigned long long *)sc.get(sizeof(unsigned long long));
  if (!flag) return ingot_last_status();
  ingot_status st = cuda_check(cudaMemsetAsync(flag, 0xff, sizeof *flag, s), "cudaMemsetAsync");
  if (st) return st;
  range_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(idx, n, seg, r, flag);
  if ((st = launch_status("index range kernel"))) return st;
  unsigned long long first = 0;
  // The one host round trip of an index op (see the top of the file).
  if ((st = cuda_check(cudaMemcpyAsync(&first, flag, sizeof first, cudaMemcpyDeviceToHost, s),
                       "cudaMemcpyAsync (index check)")))
    return st;
  if ((st = cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (index check)")))
    return st;
  if (first == ~0ull) return INGOT_OK;
  int64_t bad = 0;
  st = cuda_check(cudaMemcpyAsync(&bad, idx + first, sizeof bad, cudaMemcpyDeviceToHost, s),
                  "cudaMemcpyAsync (bad index)");
  if (!st) st = cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (bad index)");
  if (st) return st;
  int j = (int)((int64_t)first / seg);
  if (put_style)
    return ingot_set_error(INGOT_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d "
                           "with size %lld", op, (long long)bad, j, (long long)r.hi[j]);
  return ingot_set_error(INGOT_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with "
                         "size %lld (index out of range in self)", op, (long long)bad, dim,
                         (long long)r.hi[0]);
}

ingot_status check_simple(const char *op, const ingot_tensor *idx, int64_t size, int dim) {
  Ranges r;
  r.lo[0] = 0;
  r.hi[0] = size;
  return check_indices(op, (const int64_t *)ingot_tensor_data(idx), ingot_numel(idx), 1, r, dim,
                       false, ingot_device_of(idx).index, stream_of(idx));
}

// ---- gather family: out[i] = src[soff(i) + idx[ioff(i)] * sdim] ----
struct GatherGeom {
  int ndim;
  int64_t shape[INGOT_MAX_DIMS];  // out's (contiguous) shape
  int64_t sst[INGOT_MAX_DIMS], ist[INGOT_MAX_DIMS];
  int64_t sdim, size;  // src stride along the indexed dim; valid index range [0, size)
};

template <class T>
__global__ void gather_kernel(T *__restrict__ out, const T *__restrict__ src,
                              const int64_t *__restrict__ idx, GatherGeom g, int64_t n) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t r = i, so = 0, io = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      int64_t c = r % g.shape[d];
      r /= g.shape[d];
      so += c * g.sst[d];
      io += c * g.ist[d];
    }
    int64_t j = idx[io];
    out[i] = j >= 0 && j < g.size ? src[so + j * g.sdim] : T{};
  }
}

ingot_status run_gather(ingot_tensor *out, const ingot_tensor *src, const ingot_tensor *idx,
                        const GatherGeom &g) {
  int64_t n = 1;
  for (int d = 0; d < g.ndim; d++) n *= g.shape[d];
  if (n == 0) return INGOT_OK;
  cudaStream_t s = stream_of(out);
  unsigned blocks = grid_for(n, kThreads);
  int es = (int)ingot_dtype_size(ingot_dtype_of(out));
  SIZE_DISPATCH(es, gather_kernel<scalar_t><<<blocks, kThreads, 0, s>>>(
                        (scalar_t *)ingot_tensor_data(out),
                        (const scalar_t *)ingot_tensor_data(src),
                        (const int64_t *)ingot_tensor_data(idx), g, n))
  return launch_status("gather kernel");
}

ingot_status k_index_select(ingot_op_args *a) {
  ingot_tensor *t = a->in[0], *idx = a->in[1], *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int d = (int)a->iarg[0], tnd = ingot_ndim(t);
  int64_t size = tnd ? ingot_shape(t)[d] : 1;
  if ((st = check_simple("index_select", idx, size, d))) return st;
  GatherGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = ingot_ndim(out);
  for (int k = 0; k < g.ndim; k++) {
    g.shape[k] = ingot_shape(out)[k];
    g.sst[k] = ingot_strides(t)[k];
  }
  g.sdim = tnd ? ingot_strides(t)[d] : 0;
  if (tnd) g.sst[d] = 0, g.ist[d] = 1;
  g.size = size;
  return run_gather(out, t, idx, g);
}

ingot_status k_gather(ingot_op_args *a) {
  ingot_tensor *t = a->in[0], *idx = a->in[1], *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int d = (int)a->iarg[0], tnd = ingot_ndim(t);
  int64_t size = tnd ? ingot_shape(t)[d] : 1;
  if ((st = check_simple("gather", idx, size, d))) return st;
  GatherGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = ingot_ndim(out);  // == index's ndim
  for (int k = 0; k < g.ndim; k++) g.shape[k] = ingot_shape(out)[k];
  for (int k = 0; k < tnd; k++) g.sst[k] = ingot_strides(t)[k];
  contiguous_strides(ingot_ndim(idx), ingot_shape(idx), g.ist);
  g.sdim = tnd ? ingot_strides(t)[d] : 0;
  if (tnd) g.sst[d] = 0;
  g.size = size;
  return run_gather(out, t, idx, g);
}

// ---- embedding: one block per looked-up row, vectors of V ----
template <class V>
__global__ void embed_rows_kernel(char *__restrict__ out, const char *__restrict__ w,
                                  const int64_t *__restrict__ idx, int64_t nrows, int64_t units,
                                  int64_t wrow_bytes, int64_t vocab) {
  for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    int64_t j = idx[r];
    V *o = (V *)(out + r * units * (int64_t)sizeof(V));
    if (j < 0 || j >= vocab) {  // only reachable with index checks off
      for (int64_t c = threadIdx.x; c < units; c += blockDim.x) o[c] = V{};
      continue;
    }
    const V *src = (const V *)(w + j * wrow_bytes);
    for (int64_t c = threadIdx.x; c < units; c += blockDim.x) o[c] = src[c];
  }
}

template <class V>
void launch_embed(char *out, const char *w, const int64_t *idx, int64_t nrows, int64_t row_bytes,
                  int64_t wrow_bytes, int64_t vocab, cudaStream_t s) {
  int64_t units = row_bytes / (int64_t)sizeof(V);
  int threads = units >= 256 ? 256 : (int)((units + 31) / 32 * 32);
  int64_t blocks = nrows < 132 * 64 ? nrows : 132 * 64;
  embed_rows_kernel<V><<<(unsigned)blocks, threads, 0, s>>>(out, w, idx, nrows, units, wrow_bytes,
                                                            vocab);
}

ingot_status k_embedding(ingot_op_args *a) {
  ingot_tensor *w = a->in[0], *idx = a->in[1], *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int64_t vocab = ingot_shape(w)[0];
  if ((st = check_simple("embedding", idx, vocab, 0))) return st;
  int64_t n = ingot_numel(idx), dsz = ingot_shape(w)[1];
  if (n == 0 || dsz == 0) return INGOT_OK;
  const int64_t *ws = ingot_strides(w);
  int64_t es = (int64_t)ingot_dtype_size(ingot_dtype_of(w));
  cudaStream_t s = stream_of(out);
  if (ws[1] == 1 || dsz == 1) {
    char *o = (char *)ingot_tensor_data(out);
    const char *wp = (const char *)ingot_tensor_data(w);
    const int64_t *ip = (const int64_t *)ingot_tensor_data(idx);
    int64_t row = dsz * es, wrow = ws[0] * es;
    // Widest vector that every row start (both sides) and the row length allow.
    uint64_t bits = (uint64_t)(uintptr_t)o | (uint64_t)(uintptr_t)wp | (uint64_t)row |
                    (uint64_t)wrow;
    if (bits % 16 == 0) launch_embed<uint4>(o, wp, ip, n, row, wrow, vocab, s);
    else if (bits % 8 == 0) launch_embed<uint2>(o, wp, ip, n, row, wrow, vocab, s);
    else if (bits % 4 == 0) launch_embed<uint32_t>(o, wp, ip, n, row, wrow, vocab, s);
    else if (bits % 2 == 0) launch_embed<uint16_t>(o, wp, ip, n, row, wrow, vocab, s);
    else launch_embed<uint8_t>(o, wp, ip, n, row, wrow, vocab, s);
    return launch_status("embedding kernel");
  }
  GatherGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = 2;
  g.shape[0] = n, g.shape[1] = dsz;
  g.sst[0] = 0, g.sst[1] = ws[1];
  g.ist[0] = 1, g.ist[1] = 0;
  g.sdim = ws[0];
  g.size = vocab;
  return run_gather(out, w, idx, g);
}

// ---- sorted runs: shared by scatter and index_put ----
// Keys (target offsets, `sentinel` = skip) and values (original positions)
// sorted stably by key. Buffers carved from one scratch block.
struct SortBufs {
  uint64_t *keys_in, *keys;
  int64_t *vals_in, *vals;
  void *temp;
  size_t temp_bytes;
};

int key_bits(uint64_t max_key) {
  int b = 0;
  while (b < 64 && (max_key >> b) != 0) b++;
  return b ? b : 1;
}

// Sizes the sort for keys in [0, sentinel] (the same bit range sort_run uses).
ingot_status sort_alloc(Scratch &sc, int64_t n, uint64_t sentinel, SortBufs &b) {
  b.temp_bytes = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, b.temp_bytes, (uint64_t *)nullptr,
                                                  (uint64_t *)nullptr, (int64_t *)nullptr,
                                                  (int64_t *)nullptr, n, 0, key_bits(sentinel),
                                                  sc.s);
  ingot_status st = cuda_check(e, "cub SortPairs (size)");
  if (st) return st;
  size_t kb = align_up((size_t)n * 8);
  char *p = (char *)sc.get(4 * kb + align_up(b.temp_bytes));
  if (!p) return ingot_last_status();
  b.keys_in = (uint64_t *)p;
  b.keys = (uint64_t *)(p + kb);
  b.vals_in = (int64_t *)(p + 2 * kb);
  b.vals = (int64_t *)(p + 3 * kb);
  b.temp = p + 4 * kb;
  return INGOT_OK;
}

ingot_status sort_run(SortBufs &b, int64_t n, uint64_t sentinel, cudaStream_t s) {
  cudaError_t e = cub::DeviceRadixSort::SortPairs(b.temp, b.temp_bytes, b.keys_in, b.keys,
                                                  b.vals_in, b.vals, n, 0, key_bits(sentinel), s);
  return cuda_check(e, "cub SortPairs");
}

// ---- scatter / scatter_add ----
struct ScatterGeom {
  int ndim, dim;
  int64_t ishape[INGOT_MAX_DIMS];  // index's shape (0-dim as [1])
  int64_t ost[INGOT_MAX_DIMS], sst[INGOT_MAX_DIMS];
  int64_t size;       // valid index range [0, size)
  uint64_t sentinel;  // numel(out): key of an invalid index
};

__global__ void scatter_keys_kernel(const int64_t *__restrict__ idx, ScatterGeom g, int64_t n,
                                    uint64_t *keys, int64_t *vals) {
  CUDA_GRID_STRIDE(p, n) {
    int64_t r = p, off = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      int64_t c = r % g.ishape[d];
      r /= g.ishape[d];
      if (d != g.dim) off += c * g.ost[d];
    }
    int64_t j = idx[p];
    keys[p] = j >= 0 && j < g.size ? (uint64_t)(off + j * g.ost[g.dim]) : g.sentinel;
    vals[p] = p;
  }
}

template <class T>
__device__ __forceinline__ T scatter_src(const T *src, const ScatterGeom &g, int64_t p) {
  int64_t off = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    off += (p % g.ishape[d]) * g.sst[d];
    p /= g.ishape[d];
  }
  return src[off];
}

// One thread per run of equal keys (its first element) applies the run in order.
template <class T, bool ADD>
__global__ void scatter_apply_kernel(T *out, const T *__restrict__ src,
                                     const uint64_t *__restrict__ keys,
                                     const int64_t *__restrict__ pos, int64_t n, ScatterGeom g) {
  CUDA_GRID_STRIDE(i, n) {
    uint64_t k = keys[i];
    if (k == g.sentinel || (i > 0 && keys[i - 1] == k)) continue;
    if constexpr (ADD) {
      T v = out[k];
      for (int64_t m = i; m < n && keys[m] == k; m++) v = add_el(v, scatter_src(src, g, pos[m]));
      out[k] = v;
    } else {
      int64_t m = i;
      while (m + 1 < n && keys[m + 1] == k) m++;
      out[k] = scatter_src(src, g, pos[m]);  // duplicates: the last wins
    }
  }
}

ingot_status k_scatter(ingot_op_args *a) {
  ingot_tensor *out = a->out[0], *idx = a->in[1], *src = a->in[2];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  bool add = a->op == INGOT_OP_SCATTER_ADD;
  int d = (int)a->iarg[0], ond = ingot_ndim(out), snd = ingot_ndim(src), ind = ingot_ndim(idx);
  int64_t size = ond ? ingot_shape(out)[d] : 1;
  if ((st = check_simple(add ? "scatter_add" : "scatter", idx, size, d))) return st;
  int64_t n = ingot_numel(idx);
  if (n == 0) return INGOT_OK;
  ScatterGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = ind ? ind : 1;
  g.dim = d;
  g.ishape[0] = 1;
  for (int k = 0; k < ind; k++) g.ishape[k] = ingot_shape(idx)[k];
  for (int k = 0; k < g.ndim; k++) {
    g.ost[k] = ond ? ingot_strides(out)[k] : 0;
    g.sst[k] = snd ? ingot_strides(src)[k] : 0;
  }
  g.size = size;
  g.sentinel = (uint64_t)ingot_numel(out);
  cudaStream_t s = stream_of(out);
  Scratch sc(ingot_device_of(out).index, s);
  SortBufs b;
  if ((st = sort_alloc(sc, n, g.sentinel, b))) return st;
  unsigned blocks = grid_for(n, kThreads);
  scatter_keys_kernel<<<blocks, kThreads, 0, s>>>((const int64_t *)ingot_tensor_data(idx), g, n,
                                                  b.keys_in, b.vals_in);
  if ((st = launch_status("scatter keys kernel"))) return st;
  if ((st = sort_run(b, n, g.sentinel, s))) return st;
  void *o = ingot_tensor_data(out);
  const void *sp = ingot_tensor_data(src);
  if (add) {
    ACC_DISPATCH(ingot_dtype_of(out),
                 scatter_apply_kernel<scalar_t, true><<<blocks, kThreads, 0, s>>>(
                     (scalar_t *)o, (const scalar_t *)sp, b.keys, b.vals, n, g))
  } else {
    int es = (int)ingot_dtype_size(ingot_dtype_of(out));
    SIZE_DISPATCH(es, scatter_apply_kernel<scalar_t, false><<<blocks, kThreads, 0, s>>>(
                          (scalar_t *)o, (const scalar_t *)sp, b.keys, b.vals, n, g))
  }
  return launch_status("scatter kernel");
}

// ---- index_put ----
struct PutGeom {
  int n;  // number of index columns
  int64_t size[INGOT_MAX_DIMS], ost[INGOT_MAX_DIMS];
  int64_t nb, rest, vs0, vs1;
  uint64_t sentinel;
};

__global__ void put_keys_kernel(const int64_t *__restrict__ ix, PutGeom g, uint64_t *keys,
                                int64_t *vals) {
  CUDA_GRID_STRIDE(k, g.nb) {
    int64_t off = 0;
    bool ok = true;
    for (int j = 0; j < g.n; j++) {
      int64_t i = ix[j * g.nb + k], sz = g.size[j];
      ok = ok && i >= -sz && i < sz;
      off += (i < 0 ? i + sz : i) * g.ost[j];
    }
    keys[k] = ok ? (uint64_t)off : g.sentinel;
    vals[k] = k;
  }
}

// Thread (i, c): if sorted row i starts a run, apply the run to column c.
template <class T, bool ADD>
__global__ void put_apply_kernel(T *out, const T *__restrict__ vals,
                                 const uint64_t *__restrict__ keys,
                                 const int64_t *__restrict__ pos, PutGeom g, int64_t total) {
  CUDA_GRID_STRIDE(t, total) {
    int64_t i = t / g.rest, c = t % g.rest;
    uint64_t k = keys[i];
    if (k == g.sentinel || (i > 0 && keys[i - 1] == k)) continue;
    T *o = out + k + c;
    if constexpr (ADD) {
      T v = *o;
      for (int64_t m = i; m < g.nb && keys[m] == k; m++)
        v = add_el(v, vals[pos[m] * g.vs0 + c * g.vs1]);
      *o = v;
    } else {
      int64_t m = i;
      while (m + 1 < g.nb && keys[m + 1] == k) m++;
      *o = vals[pos[m] * g.vs0 + c * g.vs1];
    }
  }
}

ingot_status k_index_put(ingot_op_args *a) {
  ingot_tensor *out = a->out[0], *vals = a->in[1], *idx = a->in[2];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int n = (int)a->iarg[0];
  bool acc = a->iarg[1] != 0;
  PutGeom g;
  memset(&g, 0, sizeof g);
  g.n = n;
  g.nb = ingot_shape(idx)[1];
  g.rest = ingot_shape(vals)[1];
  g.vs0 = ingot_strides(vals)[0];
  g.vs1 = ingot_strides(vals)[1];
  Ranges r;
  for (int j = 0; j < n; j++) {
    g.size[j] = ingot_shape(out)[j];
    g.ost[j] = ingot_strides(out)[j];
    r.lo[j] = -g.size[j];
    r.hi[j] = g.size[j];
  }
  g.sentinel = (uint64_t)ingot_numel(out);
  cudaStream_t s = stream_of(out);
  int dev = ingot_device_of(out).index;
  const int64_t *ix = (const int64_t *)ingot_tensor_data(idx);
  if ((st = check_indices("index_put", ix, g.nb, n, r, 0, true, dev, s))) return st;
  if (g.nb == 0 || g.rest == 0) return INGOT_OK;
  Scratch sc(dev, s);
  SortBufs b;
  if ((st = sort_alloc(sc, g.nb, g.sentinel, b))) return st;
  put_keys_kernel<<<grid_for(g.nb, kThreads), kThreads, 0, s>>>(ix, g, b.keys_in, b.vals_in);
  if ((st = launch_status("index_put keys kernel"))) return st;
  if ((st = sort_run(b, g.nb, g.sentinel, s))) return st;
  int64_t total = g.nb * g.rest;
  unsigned blocks = grid_for(total, kThreads);
  void *o = ingot_tensor_data(out);
  const void *vp = ingot_tensor_data(vals);
  if (acc) {
    ACC_DISPATCH(ingot_dtype_of(out),
                 put_apply_kernel<scalar_t, true><<<blocks, kThreads, 0, s>>>(
                     (scalar_t *)o, (const scalar_t *)vp, b.keys, b.vals, g, total))
  } else {
    int es = (int)ingot_dtype_size(ingot_dtype_of(out));
    SIZE_DISPATCH(es, put_apply_kernel<scalar_t, false><<<blocks, kThreads, 0, s>>>(
                          (scalar_t *)o, (const scalar_t *)vp, b.keys, b.vals, g, total))
  }
  return launch_status("index_put kernel");
}

// ---- masked_fill ----
template <class T>
__global__ void masked_fill_kernel(T *__restrict__ out, const T *__restrict__ in,
                                   const uint8_t *__restrict__ mask, Geom g, T v, int64_t n) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t off[3];
    geom_offsets<3>(g, i, off);
    out[off[0]] = mask[off[2]] ? v : in[off[1]];
  }
}

ingot_status k_masked_fill(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  int64_t n = ingot_numel(out);
  if (n == 0) return INGOT_OK;
  ingot_dtype dt = ingot_dtype_of(out);
  unsigned char pat[16] = {0};
  store_f64(dt, pat, a->farg[0]);  // the CPU's conversion of the fill value
  ingot_tensor *ts[3] = {out, a->in[0], a->in[1]};
  Geom g = make_geom(3, ts);
  cudaStream_t s = stream_of(out);
  unsigned blocks = grid_for(n, kThreads);
  int es = (int)ingot_dtype_size(dt);
  SIZE_DISPATCH(es, {
    scalar_t v;
    memcpy(&v, pat, sizeof v);
    masked_fill_kernel<scalar_t><<<blocks, kThreads, 0, s>>>(
        (scalar_t *)ingot_tensor_data(out), (const scalar_t *)ingot_tensor_data(a->in[0]),
        (const uint8_t *)ingot_tensor_data(a->in[1]), g, v, n);
  })
  return launch_status("masked_fill kernel");
}

// ---- masked_select / nonzero ----
const int kItems = 4, kChunk = kThreads * kItems;

struct SelGeom {
  int ndim;
  int64_t shape[INGOT_MAX_DIMS];
  int64_t fst[INGOT_MAX_DIMS];  // strides of the flag source (mask or t)
  int64_t vst[INGOT_MAX_DIMS];  // strides of the selected values (masked_select)
  int fdt, fes, ves;            // flag source dtype and element size; value element size
};

// Element != 0 as the CPU's loop_flag: NaN counts, -0.0 does not.
__device__ __forceinline__ int nz_flag(const char *p, int dt) {
  switch (dt) {
  case INGOT_BOOL: case INGOT_U8: case INGOT_I8: return *(const uint8_t *)p != 0;
  case INGOT_F8E4M3FN: case INGOT_F8E5M2: return (*(const uint8_t *)p & 0x7f) != 0;
  case INGOT_I16: return *(const uint16_t *)p != 0;
  case INGOT_F16: case INGOT_BF16: return (*(const uint16_t *)p & 0x7fff) != 0;
  case INGOT_I32: return *(const uint32_t *)p != 0;
  case INGOT_F32: return *(const float *)p != 0.0f;
  case INGOT_I64: return *(const uint64_t *)p != 0;
  case INGOT_F64: return *(const double *)p != 0.0;
  case INGOT_C64: return ((const float *)p)[0] != 0.0f || ((const float *)p)[1] != 0.0f;
  case INGOT_C128: return ((const double *)p)[0] != 0.0 || ((const double *)p)[1] != 0.0;
  default: return 0;
  }
}

__device__ __forceinline__ int sel_flag(const char *f, const SelGeom &g, int64_t e) {
  int64_t off = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    off += (e % g.shape[d]) * g.fst[d];
    e /= g.shape[d];
  }
  return nz_flag(f + off * g.fes, g.fdt);
}

using BlockScan = cub::BlockScan<int, kThreads>;
using BlockReduce = cub::BlockReduce<int, kThreads>;

// counts[c] = number of flagged elements of chunk c (thread t: items t*kItems..).
__global__ void sel_count_kernel(const char *__restrict__ f, SelGeom g, int64_t n,
                                 int64_t nchunks, int64_t *counts) {
  __shared__ typename BlockReduce::TempStorage tmp;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    int64_t e0 = c * kChunk + (int64_t)threadIdx.x * kItems;
    int cnt = 0;
    for (int it = 0; it < kItems; it++)
      if (e0 + it < n) cnt += sel_flag(f, g, e0 + it);
    int sum = BlockReduce(tmp).Sum(cnt);
    if (threadIdx.x == 0) counts[c] = sum;
    __syncthreads();  // tmp is reused by the next chunk
  }
}

// Places the flagged elements of each chunk at offsets[c] + their rank.
__global__ void sel_fill_kernel(const char *__restrict__ f, const char *__restrict__ vals,
                                SelGeom g, int64_t n, int64_t nchunks,
                                const int64_t *__restrict__ offsets, char *out, bool select) {
  __shared__ typename BlockScan::TempStorage tmp;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    int64_t e0 = c * kChunk + (int64_t)threadIdx.x * kItems;
    int fl[kItems], cnt = 0;
    for (int it = 0; it < kItems; it++) {
      fl[it] = e0 + it < n ? sel_flag(f, g, e0 + it) : 0;
      cnt += fl[it];
    }
    int rank;
    BlockScan(tmp).ExclusiveSum(cnt, rank);
    int64_t o = offsets[c] + rank;
    for (int it = 0; it < kItems; it++) {
      if (!fl[it]) continue;
      int64_t e = e0 + it, r = e;
      if (select) {
        int64_t off = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
          off += (r % g.shape[d]) * g.vst[d];
          r /= g.shape[d];
        }
        const char *src = vals + off * g.ves;
        char *dst = out + o * g.ves;
        switch (g.ves) {
        case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
        case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
        case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
        case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
        default: *(b16_t *)dst = *(const b16_t *)src; break;
        }
      } else {
        int64_t *row = (int64_t *)out + o * g.ndim;
        for (int d = g.ndim - 1; d >= 0; d--) {
          row[d] = r % g.shape[d];
          r /= g.shape[d];
        }
      }
      o++;
    }
    __syncthreads();  // tmp is reused by the next chunk
  }
}

ingot_status select_common(ingot_op_args *a, bool select) {
  ingot_tensor *t = a->in[0], *fsrc = select ? a->in[1] : a->in[0];
  ingot_status st = cuda_use_device_of(t);
  if (st) return st;
  ingot_device dev = ingot_device_of(t);
  ingot_dtype dt = ingot_dtype_of(t);
  int nd = ingot_ndim(t);
  int64_t n = ingot_numel(t), total = 0;
  cudaStream_t s = stream_of(t);
  SelGeom g;
  memset(&g, 0, sizeof g);
  g.ndim = nd;
  for (int d = 0; d < nd; d++) {
    g.shape[d] = ingot_shape(t)[d];
    g.fst[d] = ingot_strides(fsrc)[d];
    g.vst[d] = ingot_strides(t)[d];
  }
  g.fdt = (int)ingot_dtype_of(fsrc);
  g.fes = (int)ingot_dtype_size(ingot_dtype_of(fsrc));
  g.ves = (int)ingot_dtype_size(dt);
  Scratch sc(dev.index, s);
  int64_t nchunks = (n + kChunk - 1) / kChunk, *counts = nullptr, *offsets = nullptr;
  unsigned blocks = (unsigned)(nchunks < 132 * 16 ? (nchunks ? nchunks : 1) : 132 * 16);
  const char *f = (const char *)ingot_tensor_data(fsrc);
  if (n > 0) {
    // counts[nchunks] = 0, so offsets[nchunks] is the total.
    size_t temp_bytes = 0, cb = align_up((size_t)(nchunks + 1) * 8);
    if ((st = cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, (int64_t *)nullptr,
                                                       (int64_t *)nullptr, nchunks + 1, s),
                         "cub ExclusiveSum (size)")))
      return st;
    char *p = (char *)sc.get(2 * cb + align_up(temp_bytes));
    if (!p) return ingot_last_status();
    counts = (int64_t *)p;
    offsets = (int64_t *)(p + cb);
    if ((st = cuda_check(cudaMemsetAsync(counts + nchunks, 0, 8, s), "cudaMemsetAsync")))
      return st;
    sel_count_kernel<<<blocks, kThreads, 0, s>>>(f, g, n, nchunks, counts);
    if ((st = launch_status("select count kernel"))) return st;
    if ((st = cuda_check(cub::DeviceScan::ExclusiveSum(p + 2 * cb, temp_bytes, counts, offsets,
                                                       nchunks + 1, s),
                         "cub ExclusiveSum")))
      return st;
    // The output size depends on the data: one 8-byte copy to the host.
    if ((st = cuda_check(cudaMemcpyAsync(&total, offsets + nchunks, sizeof total,
                                         cudaMemcpyDeviceToHost, s),
                         "cudaMemcpyAsync (select count)")))
      return st;
    if ((st = cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (select count)")))
      return st;
  }
  int64_t nz_shape[2] = {total, nd};
  ingot_tensor *out = select ? ingot_empty(1, &total, dt, dev)
                             : ingot_empty(2, nz_shape, INGOT_I64, dev);
  if (!out) return ingot_last_status();
  a->out[0] = out;  // core releases it if we fail below
  if (total == 0 || (!select && nd == 0)) return INGOT_OK;
  sel_fill_kernel<<<blocks, kThreads, 0, s>>>(f, (const char *)ingot_tensor_data(t), g, n, nchunks,
                                              offsets, (char *)ingot_tensor_data(out), select);
  return launch_status("select fill kernel");
}

ingot_status k_masked_select(ingot_op_args *a) { return select_common(a, true); }
ingot_status k_nonzero(ingot_op_args *a) { return select_common(a, false); }

}  // namespace

// The index check of the ops above for other kernel files (cuda_kernels.h).
extern "C" ingot_status cuda_check_index_range(const char *op, const ingot_tensor *idx,
                                               int64_t size, int dim) {
  return check_simple(op, idx, size, dim);
}

extern "C" void cuda_register_index(ingot_backend *be) {
  be->kernels[INGOT_OP_INDEX_SELECT] = k_index_select;
  be->kernels[INGOT_OP_GATHER] = k_gather;
  be->kernels[INGOT_OP_EMBEDDING] = k_embedding;
  be->kernels[INGOT_OP_SCATTER] = k_scatter;
  be->kernels[INGOT_OP_SCATTER_ADD] = k_scatter;
  be->kernels[INGOT_OP_INDEX_PUT] = k_index_put;
  be->kernels[INGOT_OP_MASKED_FILL] = k_masked_fill;
  be->kernels[INGOT_OP_MASKED_SELECT] = k_masked_select;
  be->kernels[INGOT_OP_NONZERO] = k_nonzero;
}
