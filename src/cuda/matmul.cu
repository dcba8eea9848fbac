// Matrix products on CUDA: MATMUL ([B,n,k]·[B,k,m] -> contiguous [B,n,m], contract in
// src/core/ops_matmul.c) and SCALED_MM (FP8, contract in src/core/ops_scaled_mm.c).
//
// Design:
// - Small-batch products (decode) go first to cuda_gemv_try (src/cuda/gemv.cu); when it
//   declines, floats and complex go to cuBLASLt: f32 (TF32 only with allow_tf32), f16/bf16
//   (f32 accumulation), f64, c64/c128. Row-major operands map to cuBLAS's column-major
//   world by computing C^T = Bm^T · A^T; a transposed-contiguous operand uses the
//   transpose flag instead of a copy, strided batches use the layout's batch stride
//   (0 for a broadcast batch), and anything else is copied contiguous into scratch.
// - One cuBLASLt handle per device (created lazily); a 32 MiB workspace per (device,
//   stream) allocated once (none during graph capture); the heuristic's algorithm is
//   cached per (shape, layouts, alignments, dtype) in a small hash table.
// - Integers (u8..i64), and any float case cuBLASLt declines, run a 16x16 shared-memory
//   tiled kernel (one thread per output element, grid-stride over tiles and batches);
//   integers accumulate in uint64 and wrap to the dtype like the CPU.
// - SCALED_MM: cuBLASLt FP8 in the TN layout it requires (Lt's A = b^T, B = a^T), with
//   tensorwise scales as A/B scale pointers and rowwise scales as OUTER_VEC_32F scale
//   modes; if Lt declines rowwise, an unscaled FP8 GEMM to f32 scratch plus an epilogue
//   kernel; if Lt declines altogether, a plain kernel (one thread per output).
#include <cublasLt.h>
#include <stdint.h>
#include <string.h>

#include <mutex>

#include "../core/blas_layout.h"
#include "cuda_common.cuh"
#include "ingot/ops.h"

// Written in src/cuda/gemv.cu; weak so that this file links before that one exists.
extern "C" __attribute__((weak)) ingot_status cuda_gemv_try(ingot_op_args *a, bool *done);

namespace {

const size_t kWorkspace = 32u << 20;
const int kMaxDevices = 64;
const int kStreamsPerDevice = 16;

ingot_status lt_check(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return INGOT_OK;
  return ingot_set_error(s == CUBLAS_STATUS_ALLOC_FAILED ? INGOT_ERR_OOM : INGOT_ERR_BACKEND,
                         "cublasLt: %s failed: %s", what, cublasLtGetStatusString(s));
}

// ---- per-device handle and per-stream workspaces ----
struct DevState {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  cublasStatus_t status = CUBLAS_STATUS_NOT_INITIALIZED;
  std::mutex mu;
  cudaStream_t ws_stream[kStreamsPerDevice];
  void *ws_ptr[kStreamsPerDevice];
  int nws = 0;
};
DevState g_dev[kMaxDevices];

ingot_status lt_handle(int dev, cublasLtHandle_t *h) {
  if (dev < 0 || dev >= kMaxDevices)
    return ingot_set_error(INGOT_ERR_DEVICE, "matmul: device index %d out of range", dev);
  DevState &d = g_dev[dev];
  std::call_once(d.once, [&d] { d.status = cublasLtCreate(&d.handle); });
  *h = d.handle;
  return lt_check(d.status, "cublasLtCreate");
}

// The stream's persistent workspace (size in *size), or none: never allocates while the
// stream is capturing a graph.
void *lt_workspace(int dev, cudaStream_t s, size_t *size) {
  DevState &d = g_dev[dev];
  std::lock_guard<std::mutex> lock(d.mu);
  for (int i = 0; i < d.nws; i++)
    if (d.ws_stream[i] == s) {
      *size = d.ws_ptr[i] ? kWorkspace : 0;
      return d.ws_ptr[i];
    }
  *size = 0;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cap != cudaStreamCaptureStatusNone || d.nws == kStreamsPerDevice) return nullptr;
  void *p = nullptr;
  if (cudaMalloc(&p, kWorkspace) != cudaSuccess) {
    cudaGetLastError();
    p = nullptr;  // remembered as "no workspace" for this stream
  }
  d.ws_stream[d.nws] = s;
  d.ws_ptr[d.nws++] = p;
  *size = p ? kWorkspace : 0;
  return p;
}

// ---- one cuBLASLt call, described in cuBLAS's column-major terms ----
struct LtMat {
  const void *p;
  cudaDataType_t type;
  uint64_t rows, cols;  // the stored matrix (before op)
  int64_t ld, bstride;  // elements
};

struct LtGemm {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  const void *alpha, *beta;
  cublasOperation_t opa, opb;
  LtMat A, B, D;  // C is D (beta = 0)
  int batch;
  const float *a_scale = nullptr, *b_scale = nullptr;  // FP8 scale pointers
  bool outer_vec = false;                              // per-row/column scale vectors
  const void *bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
};

// The single "D^T = A^T B" product with f32 compute and scales that
// scaled_mm and the bf16 prefill GEMM share (Lt's A op T, B op N, batch 1);
// the caller sets the matrices.
const float kOne = 1.0f, kZero = 0.0f;
LtGemm lt_tn_f32() {
  LtGemm g;
  g.compute = CUBLAS_COMPUTE_32F;
  g.scale_type = CUDA_R_32F;
  g.alpha = &kOne;
  g.beta = &kZero;
  g.opa = CUBLAS_OP_T;
  g.opb = CUBLAS_OP_N;
  g.batch = 1;
  return g;
}

uint32_t align_of(const void *p, int64_t bstride_bytes, int batch) {
  uintptr_t v = (uintptr_t)p;
  if (batch > 1) v |= (uintptr_t)bstride_bytes;
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

size_t type_size(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_8F_E4M3:
  case CUDA_R_8F_E5M2: return 1;
  case CUDA_R_16F:
  case CUDA_R_16BF: return 2;
  case CUDA_R_32F: return 4;
  case CUDA_R_64F:
  case CUDA_C_32F: return 8;
  case CUDA_C_64F: return 16;
  default: return 1;
  }
}

// ---- algorithm cache ----
struct AlgoKey {
  int32_t dev, compute, scale_type, opa, opb, ta, tb, td, batch, outer_vec, has_scale,
      has_bias, bias_type;
  uint32_t align[3];
  uint64_t ws, ar, ac, br, bc, dr, dc;
  int64_t lda, ldb, ldd, sa, sb, sd;
};
struct AlgoEntry {
  bool used;
  AlgoKey key;
  cublasLtMatmulAlgo_t algo;
};
const int kAlgoSlots = 1024;
AlgoEntry g_algos[kAlgoSlots];
std::mutex g_algo_mu;

uint64_t key_hash(const AlgoKey &k) {
  const unsigned char *p = (const unsigned char *)&k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool algo_lookup(const AlgoKey &k, cublasLtMatmulAlgo_t *algo) {
  std::lock_guard<std::mutex> lock(g_algo_mu);
  uint64_t h = key_hash(k);
  for (int i = 0; i < 8; i++) {
    AlgoEntry &e = g_algos[(h + i) % kAlgoSlots];
    if (!e.used) return false;
    if (memcmp(&e.key, &k, sizeof k) == 0) {
      *algo = e.algo;
      return true;
    }
  }
  return false;
}

void algo_store(const AlgoKey &k, const cublasLtMatmulAlgo_t &algo) {
  std::lock_guard<std::mutex> lock(g_algo_mu);
  uint64_t h = key_hash(k);
  int slot = (int)(h % kAlgoSlots);  // replaced when the probe window is full
  for (int i = 0; i < 8; i++) {
    int s = (int)((h + i) % kAlgoSlots);
    if (!g_algos[s].used || memcmp(&g_algos[s].key, &k, sizeof k) == 0) {
      slot = s;
      break;
    }
  }
  g_algos[slot].used = true;
  g_algos[slot].key = k;
  g_algos[slot].algo = algo;
}

// Descriptors of one call, destroyed together.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cublasStatus_t make_layout(cublasLtMatrixLayout_t *l, const LtMat &m, int batch) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(l, m.type, m.rows, m.cols, m.ld);
  if (s != CUBLAS_STATUS_SUCCESS || batch <= 1) return s;
  int32_t count = batch;
  int64_t stride = m.bstride;
  s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof count);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &stride, sizeof stride);
}

#define LT_TRY(call, what)                                                                     \
  do {                                                                                         \
    cublasStatus_t s_ = (call);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) return lt_check(s_, what);                               \
  } while (0)

// Run g on stream s of device dev. *declined is set (and INGOT_OK returned) when cuBLASLt
// has no algorithm for it, so that the caller can fall back.
ingot_status lt_run(int dev, cudaStream_t s, const LtGemm &g, bool *declined) {
  *declined = false;
  cublasLtHandle_t h = nullptr;
  ingot_status st = lt_handle(dev, &h);
  if (st) return st;
  size_t ws_size = 0;
  void *ws = lt_workspace(dev, s, &ws_size);

  LtDescs x;
  LT_TRY(cublasLtMatmulDescCreate(&x.op, g.compute, g.scale_type), "cublasLtMatmulDescCreate");
  int32_t opa = g.opa, opb = g.opb;
  LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa),
         "set TRANSA");
  LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb),
         "set TRANSB");
  if (g.a_scale) {
    LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.a_scale,
                                          sizeof g.a_scale),
           "set A_SCALE_POINTER");
    LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.b_scale,
                                          sizeof g.b_scale),
           "set B_SCALE_POINTER");
    if (g.outer_vec) {
      int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      // An older library may not know the attribute: treat that as "declined".
      if (cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                         sizeof mode) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                         sizeof mode) != CUBLAS_STATUS_SUCCESS) {
        *declined = true;
        return INGOT_OK;
      }
    }
  }
  if (g.bias) {
    int32_t epi = CUBLASLT_EPILOGUE_BIAS, bt = g.bias_type;
    LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
           "set EPILOGUE");
    LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                          sizeof g.bias),
           "set BIAS_POINTER");
    LT_TRY(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                          sizeof bt),
           "set BIAS_DATA_TYPE");
  }
  LT_TRY(make_layout(&x.a, g.A, g.batch), "layout A");
  LT_TRY(make_layout(&x.b, g.B, g.batch), "layout B");
  LT_TRY(make_layout(&x.d, g.D, g.batch), "layout D");

  AlgoKey k;
  memset(&k, 0, sizeof k);
  k.dev = dev, k.compute = g.compute, k.scale_type = g.scale_type, k.opa = g.opa,
  k.opb = g.opb;
  k.ta = g.A.type, k.tb = g.B.type, k.td = g.D.type, k.batch = g.batch;
  k.outer_vec = g.outer_vec, k.has_scale = g.a_scale != nullptr, k.has_bias = g.bias != nullptr;
  k.bias_type = g.bias ? g.bias_type : 0;
  k.align[0] = align_of(g.A.p, g.A.bstride * (int64_t)type_size(g.A.type), g.batch);
  k.align[1] = align_of(g.B.p, g.B.bstride * (int64_t)type_size(g.B.type), g.batch);
  k.align[2] = align_of(g.D.p, g.D.bstride * (int64_t)type_size(g.D.type), g.batch);
  k.ws = ws_size;
  k.ar = g.A.rows, k.ac = g.A.cols, k.br = g.B.rows, k.bc = g.B.cols, k.dr = g.D.rows,
  k.dc = g.D.cols;
  k.lda = g.A.ld, k.ldb = g.B.ld, k.ldd = g.D.ld;
  k.sa = g.batch > 1 ? g.A.bstride : 0, k.sb = g.batch > 1 ? g.B.bstride : 0;
  k.sd = g.batch > 1 ? g.D.bstride : 0;

  cublasLtMatmulAlgo_t algo;
  if (!algo_lookup(k, &algo)) {
    LT_TRY(cublasLtMatmulPreferenceCreate(&x.pref), "cublasLtMatmulPreferenceCreate");
    uint64_t wsb = ws_size;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(x.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsb, sizeof wsb),
           "set MAX_WORKSPACE_BYTES");
    const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t av[4] = {k.align[0], k.align[1], k.align[2], k.align[2]};
    for (int i = 0; i < 4; i++)
      LT_TRY(cublasLtMatmulPreferenceSetAttribute(x.pref, al[i], &av[i], sizeof av[i]),
             "set MIN_ALIGNMENT");
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, x.op, x.a, x.b, x.d, x.d, x.pref, 1,
                                                       &res, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0) ||
        hs == CUBLAS_STATUS_INVALID_VALUE) {
      *declined = true;
      return INGOT_OK;
    }
    LT_TRY(hs, "cublasLtMatmulAlgoGetHeuristic");
    algo = res.algo;
    algo_store(k, algo);
  }
  cublasStatus_t ms = cublasLtMatmul(h, x.op, g.alpha, g.A.p, x.a, g.B.p, x.b, g.beta, g.D.p,
                                     x.d, (void *)g.D.p, x.d, &algo, ws, ws_size, s);
  if (ms == CUBLAS_STATUS_NOT_SUPPORTED) {
    *declined = true;
    return INGOT_OK;
  }
  return lt_check(ms, "cublasLtMatmul");
}

// ---- tiled fallback kernel (integers, and floats cuBLASLt declines) ----
template <class T> struct MM {  // integers: uint64 wrap-around accumulation
  using acc = uint64_t;
  static __device__ __forceinline__ acc zero() { return 0; }
  static __device__ __forceinline__ acc load(T v) { return (uint64_t)(int64_t)v; }
  static __device__ __forceinline__ acc fma(acc s, acc x, acc y) { return s + x * y; }
  static __device__ __forceinline__ T store(acc s) { return (T)(int64_t)s; }
};
template <class T> struct MMFloat {  // f32, f16, bf16 in float; f64 in double
  using acc = acc_t<T>;
  static __device__ __forceinline__ acc zero() { return 0; }
  static __device__ __forceinline__ acc load(T v) { return to_acc(v); }
  static __device__ __forceinline__ acc fma(acc s, acc x, acc y) { return s + x * y; }
  static __device__ __forceinline__ T store(acc s) { return from_acc<T>(s); }
};
template <> struct MM<float> : MMFloat<float> {};
template <> struct MM<double> : MMFloat<double> {};
template <> struct MM<f16_t> : MMFloat<f16_t> {};
template <> struct MM<bf16_t> : MMFloat<bf16_t> {};
template <class C> struct MMComplex {
  using acc = C;
  static __device__ __forceinline__ acc zero() { return C{0, 0}; }
  static __device__ __forceinline__ acc load(C v) { return v; }
  static __device__ __forceinline__ acc fma(acc s, acc x, acc y) {
    return C{s.re + (x.re * y.re - x.im * y.im), s.im + (x.re * y.im + x.im * y.re)};
  }
  static __device__ __forceinline__ C store(acc s) { return s; }
};
template <> struct MM<c64_t> : MMComplex<c64_t> {};
template <> struct MM<c128_t> : MMComplex<c128_t> {};

const int TILE = 16;

struct TiledArgs {
  int64_t nb, n, m, k;
  int64_t sab, sar, sac;  // A [nb, n, k] strides (elements)
  int64_t sbb, sbr, sbc;  // Bm [nb, k, m]
};

template <class T>
__global__ void __launch_bounds__(TILE *TILE)
    gemm_tiled(const T *__restrict__ A, const T *__restrict__ Bm, T *__restrict__ C, TiledArgs g) {
  using Acc = typename MM<T>::acc;
  __shared__ Acc ta[TILE][TILE + 1];
  __shared__ Acc tb[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles_n = (g.n + TILE - 1) / TILE, tiles_m = (g.m + TILE - 1) / TILE;
  // Loop bounds are uniform per block, so every thread reaches each __syncthreads.
  for (int64_t bz = blockIdx.z; bz < g.nb; bz += gridDim.z)
    for (int64_t by = blockIdx.y; by < tiles_n; by += gridDim.y)
      for (int64_t bx = blockIdx.x; bx < tiles_m; bx += gridDim.x) {
        const int64_t row = by * TILE + ty, col = bx * TILE + tx;
        const T *pa = A + bz * g.sab;
        const T *pb = Bm + bz * g.sbb;
        Acc acc = MM<T>::zero();
        for (int64_t p0 = 0; p0 < g.k; p0 += TILE) {
          const int64_t qa = p0 + tx, qb = p0 + ty;
          ta[ty][tx] = row < g.n && qa < g.k ? MM<T>::load(pa[row * g.sar + qa * g.sac])
                                              : MM<T>::zero();
          tb[ty][tx] = qb < g.k && col < g.m ? MM<T>::load(pb[qb * g.sbr + col * g.sbc])
                                              : MM<T>::zero();
          __syncthreads();
#pragma unroll
          for (int q = 0; q < TILE; q++) acc = MM<T>::fma(acc, ta[ty][q], tb[q][tx]);
          __syncthreads();
        }
        if (row < g.n && col < g.m) C[(bz * g.n + row) * g.m + col] = MM<T>::store(acc);
      }
}

template <class T>
cudaError_t launch_tiled(const void *A, const void *Bm, void *C, const TiledArgs &g,
                         cudaStream_t s) {
  int64_t tn = (g.n + TILE - 1) / TILE, tm = (g.m + TILE - 1) / TILE;
  dim3 grid((unsigned)(tm < (1 << 20) ? tm : (1 << 20)), (unsigned)(tn < 65535 ? tn : 65535),
            (unsigned)(g.nb < 65535 ? g.nb : 65535));
  gemm_tiled<T><<<grid, dim3(TILE, TILE), 0, s>>>((const T *)A, (const T *)Bm, (T *)C, g);
  return cudaGetLastError();
}

ingot_status matmul_tiled(const ingot_tensor *A, const ingot_tensor *Bm, ingot_tensor *C,
                          cudaStream_t s) {
  const int64_t *sa = ingot_strides(A), *sb = ingot_strides(Bm);
  TiledArgs g{ingot_shape(C)[0], ingot_shape(C)[1], ingot_shape(C)[2], ingot_shape(A)[2],
              sa[0], sa[1], sa[2], sb[0], sb[1], sb[2]};
  const void *pa = ingot_tensor_data(A), *pb = ingot_tensor_data(Bm);
  void *pc = ingot_tensor_data(C);
  cudaError_t err = cudaSuccess;
  switch (ingot_dtype_of(C)) {
    CUDA_CASES_INT(err = launch_tiled<scalar_t>(pa, pb, pc, g, s))
    CUDA_CASES_FLOAT(err = launch_tiled<scalar_t>(pa, pb, pc, g, s))
    CUDA_CASE(INGOT_C64, c64_t, err = launch_tiled<scalar_t>(pa, pb, pc, g, s))
    CUDA_CASE(INGOT_C128, c128_t, err = launch_tiled<scalar_t>(pa, pb, pc, g, s))
  default:
    return ingot_set_error(INGOT_ERR_DTYPE, "matmul: not implemented for '%s'",
                           ingot_dtype_name(ingot_dtype_of(C)));
  }
  return cuda_check(err, "matmul tiled kernel");
}

// ---- MATMUL through cuBLASLt ----
// How cuBLAS reads a strided matrix in place: blas_layout (src/core/blas_layout.h, as the CPU).

// An operand of a batched GEMM: in place, or a contiguous copy in scratch.
struct Operand {
  const void *p;
  bool trans;
  int64_t ld, bstride;
  void *scratch = nullptr;
};

ingot_status prepare(const ingot_tensor *t, int dev, cudaStream_t s, Operand *o) {
  const int64_t *sh = ingot_shape(t), *st = ingot_strides(t);
  int64_t bs = sh[0] > 1 ? st[0] : 0;
  if (bs >= 0 && blas_layout(sh[1], sh[2], st[1], st[2], &o->trans, &o->ld)) {
    o->p = ingot_tensor_data(t);
    o->bstride = bs;
    return INGOT_OK;
  }
  ingot_dtype dt = ingot_dtype_of(t);
  int64_t n = sh[0] * sh[1] * sh[2];
  o->scratch = cuda_scratch_alloc(dev, (size_t)n * ingot_dtype_size(dt), s);
  if (!o->scratch) return INGOT_ERR_OOM;
  cuda_geom2 g;
  g.ndim = 3;
  for (int d = 0; d < 3; d++) {
    g.shape[d] = sh[d];
    g.stride[1][d] = st[d];
  }
  g.stride[0][2] = 1, g.stride[0][1] = sh[2], g.stride[0][0] = sh[1] * sh[2];
  ingot_status r = cuda_check(cuda_copy_strided(o->scratch, dt, ingot_tensor_data(t), dt, &g, n, s),
                              "matmul operand copy");
  if (r) return r;
  o->p = o->scratch;
  blas_layout(sh[1], sh[2], sh[2], 1, &o->trans, &o->ld);
  o->bstride = sh[0] > 1 ? sh[1] * sh[2] : 0;
  return INGOT_OK;
}

bool lt_types(ingot_dtype dt, cudaDataType_t *type, cublasComputeType_t *compute,
              cudaDataType_t *scale) {
  switch (dt) {
  case INGOT_F32:
    *type = CUDA_R_32F, *scale = CUDA_R_32F;
    *compute = ingot_get_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    return true;
  case INGOT_F16: *type = CUDA_R_16F, *scale = CUDA_R_32F, *compute = CUBLAS_COMPUTE_32F; return true;
  case INGOT_BF16:
    *type = CUDA_R_16BF, *scale = CUDA_R_32F, *compute = CUBLAS_COMPUTE_32F;
    return true;
  case INGOT_F64: *type = CUDA_R_64F, *scale = CUDA_R_64F, *compute = CUBLAS_COMPUTE_64F; return true;
  case INGOT_C64: *type = CUDA_C_32F, *scale = CUDA_C_32F, *compute = CUBLAS_COMPUTE_32F; return true;
  case INGOT_C128:
    *type = CUDA_C_64F, *scale = CUDA_C_64F, *compute = CUBLAS_COMPUTE_64F;
    return true;
  default: return false;
  }
}

// C^T[m, n] = Bm^T · A^T in column-major terms: Lt's A is our Bm, Lt's B is our A.
ingot_status matmul_lt(ingot_tensor *A, ingot_tensor *Bm, ingot_tensor *C, int dev,
                       cudaStream_t s, bool *declined) {
  *declined = false;
  cudaDataType_t type, scale;
  cublasComputeType_t compute;
  if (!lt_types(ingot_dtype_of(C), &type, &compute, &scale)) {
    *declined = true;
    return INGOT_OK;
  }
  const int64_t *shc = ingot_shape(C);
  int64_t nb = shc[0], n = shc[1], m = shc[2], k = ingot_shape(A)[2];
  if (nb > INT32_MAX) {
    *declined = true;
    return INGOT_OK;
  }
  Operand oa, ob;
  ingot_status st = prepare(A, dev, s, &oa);
  if (!st) st = prepare(Bm, dev, s, &ob);
  if (!st) {
    const double one[2] = {1, 0}, zero[2] = {0, 0};
    const float onef[2] = {1, 0}, zerof[2] = {0, 0};
    bool dbl = scale == CUDA_R_64F || scale == CUDA_C_64F;
    LtGemm g;
    g.compute = compute;
    g.scale_type = scale;
    g.alpha = dbl ? (const void *)one : (const void *)onef;
    g.beta = dbl ? (const void *)zero : (const void *)zerof;
    // Our Bm [k, m]: row-major = column-major [m, k] (op N); column-major = [k, m] (op T).
    g.opa = ob.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.A = {ob.p, type, (uint64_t)(ob.trans ? k : m), (uint64_t)(ob.trans ? m : k), ob.ld,
           ob.bstride};
    // Our A [n, k]: row-major = column-major [k, n] (op N); column-major = [n, k] (op T).
    g.opb = oa.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.B = {oa.p, type, (uint64_t)(oa.trans ? n : k), (uint64_t)(oa.trans ? k : n), oa.ld,
           oa.bstride};
    g.D = {ingot_tensor_data(C), type, (uint64_t)m, (uint64_t)n, m, n * m};
    g.batch = (int)nb;
    st = lt_run(dev, s, g, declined);
  }
  if (oa.scratch) cuda_scratch_free(dev, oa.scratch, s);
  if (ob.scratch) cuda_scratch_free(dev, ob.scratch, s);
  return st;
}

ingot_status k_matmul(ingot_op_args *a) {
  ingot_tensor *A = a->in[0], *Bm = a->in[1], *C = a->out[0];
  int dev = ingot_device_of(C).index;
  ingot_status st = cuda_use_device(dev);
  if (st) return st;
  cudaStream_t s = stream_of(C);
  int64_t numel = ingot_numel(C);
  if (numel == 0) return INGOT_OK;
  if (ingot_shape(A)[2] == 0)
    return cuda_check(cudaMemsetAsync(ingot_tensor_data(C), 0,
                                      (size_t)numel * ingot_dtype_size(ingot_dtype_of(C)), s),
                      "cudaMemsetAsync");
  if (cuda_gemv_try) {
    bool done = false;
    st = cuda_gemv_try(a, &done);
    if (st || done) return st;
  }
  bool declined = true;
  if (!ingot_dtype_is_integral(ingot_dtype_of(C))) {
    st = matmul_lt(A, Bm, C, dev, s, &declined);
    if (st) return st;
  }
  return declined ? matmul_tiled(A, Bm, C, s) : INGOT_OK;
}

// ---- SCALED_MM ----
__device__ __forceinline__ float f8_load(uint8_t x, bool e4m3) {
  return e4m3 ? fp_f8e4m3fn_to_f32(x) : fp_f8e5m2_to_f32(x);
}

// out[i, j] = round(acc[i, j] * sa[i|0] * sb[j|0] + bias[j]); acc may alias out (f32) or
// be null (zeros); sa/sb null: no scaling.
template <class T>
__global__ void scaled_epilogue(const float *acc, T *out, const float *sa, const float *sb,
                                const T *bias, int64_t m, int64_t n, bool rowwise) {
  CUDA_GRID_STRIDE(o, m * n) {
    int64_t i = o / n, j = o % n;
    float v = acc ? acc[o] : 0.0f;
    if (sa) v = v * sa[rowwise ? i : 0] * sb[rowwise ? j : 0];
    if (bias) v += to_acc(bias[j]);
    out[o] = from_acc<T>(v);
  }
}

// Fallback when cuBLASLt declines: one thread per output, a dot product along k.
template <class T>
__global__ void scaled_naive(const uint8_t *A, const uint8_t *B, T *out, const float *sa,
                             const float *sb, const T *bias, int64_t m, int64_t n, int64_t k,
                             int64_t lda, int64_t ldb, bool a_e4m3, bool b_e4m3, bool rowwise) {
  CUDA_GRID_STRIDE(o, m * n) {
    int64_t i = o / n, j = o % n;
    const uint8_t *pa = A + i * lda, *pb = B + j * ldb;
    float acc = 0;
    for (int64_t p = 0; p < k; p++) acc += f8_load(pa[p], a_e4m3) * f8_load(pb[p], b_e4m3);
    float v = acc * sa[rowwise ? i : 0] * sb[rowwise ? j : 0];
    if (bias) v += to_acc(bias[j]);
    out[o] = from_acc<T>(v);
  }
}

template <class T>
cudaError_t launch_epilogue(const float *acc, void *out, const float *sa, const float *sb,
                            const void *bias, int64_t m, int64_t n, bool rowwise, cudaStream_t s) {
  scaled_epilogue<T><<<grid_for(m * n, 256), 256, 0, s>>>(acc, (T *)out, sa, sb, (const T *)bias,
                                                          m, n, rowwise);
  return cudaGetLastError();
}

cudaError_t epilogue(ingot_dtype odt, const float *acc, void *out, const float *sa,
                     const float *sb, const void *bias, int64_t m, int64_t n, bool rowwise,
                     cudaStream_t s) {
  switch (odt) {
  case INGOT_BF16: return launch_epilogue<bf16_t>(acc, out, sa, sb, bias, m, n, rowwise, s);
  case INGOT_F16: return launch_epilogue<f16_t>(acc, out, sa, sb, bias, m, n, rowwise, s);
  default: return launch_epilogue<float>(acc, out, sa, sb, bias, m, n, rowwise, s);
  }
}

template <class T>
cudaError_t launch_naive(const uint8_t *A, const uint8_t *B, void *out, const float *sa,
                         const float *sb, const void *bias, int64_t m, int64_t n, int64_t k,
                         int64_t lda, int64_t ldb, bool ae, bool be, bool rowwise,
                         cudaStream_t s) {
  scaled_naive<T><<<grid_for(m * n, 256), 256, 0, s>>>(A, B, (T *)out, sa, sb, (const T *)bias,
                                                       m, n, k, lda, ldb, ae, be, rowwise);
  return cudaGetLastError();
}

cudaDataType_t lt_out_type(ingot_dtype dt) {
  return dt == INGOT_BF16 ? CUDA_R_16BF : dt == INGOT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

ingot_status k_scaled_mm(ingot_op_args *a) {
  ingot_tensor *A = a->in[0], *Bm = a->in[1], *out = a->out[0];
  int dev = ingot_device_of(out).index;
  ingot_status st = cuda_use_device(dev);
  if (st) return st;
  cudaStream_t s = stream_of(out);
  const int64_t m = ingot_shape(A)[0], k = ingot_shape(A)[1], n = ingot_shape(Bm)[1];
  if (m * n == 0) return INGOT_OK;
  const bool rowwise = a->iarg[0] != 0;
  const float *sa = (const float *)ingot_tensor_data(a->in[2]);
  const float *sb = (const float *)ingot_tensor_data(a->in[3]);
  const void *bias = a->nin > 4 && a->in[4] ? ingot_tensor_data(a->in[4]) : nullptr;
  const ingot_dtype odt = ingot_dtype_of(out);
  void *po = ingot_tensor_data(out);
  if (k == 0) {  // an empty sum: the result is the bias (or zero)
    if (!bias)
      return cuda_check(cudaMemsetAsync(po, 0, (size_t)(m * n) * ingot_dtype_size(odt), s),
                        "cudaMemsetAsync");
    return cuda_check(epilogue(odt, nullptr, po, nullptr, nullptr, bias, m, n, false, s),
                      "scaled_mm epilogue");
  }
  if (m <= 8 && cuda_gemv_try) {
    bool done = false;
    st = cuda_gemv_try(a, &done);
    if (st || done) return st;
  }
  const bool ae = ingot_dtype_of(A) == INGOT_F8E4M3FN, be = ingot_dtype_of(Bm) == INGOT_F8E4M3FN;
  const int64_t lda = m > 1 ? ingot_strides(A)[0] : k, ldb = n > 1 ? ingot_strides(Bm)[1] : k;
  // D^T[n, m] = b^T · a^T: Lt's A is b stored [k, n] (ld ldb), op T; Lt's B is a stored
  // [k, m] (ld lda), op N; D is column-major [n, m] = our row-major [m, n].
  LtGemm g = lt_tn_f32();
  g.A = {ingot_tensor_data(Bm), be ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, (uint64_t)k, (uint64_t)n,
         ldb, 0};
  g.B = {ingot_tensor_data(A), ae ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, (uint64_t)k, (uint64_t)m,
         lda, 0};
  g.D = {po, lt_out_type(odt), (uint64_t)n, (uint64_t)m, n, 0};
  g.a_scale = sb;  // Lt's A is our b
  g.b_scale = sa;
  g.outer_vec = rowwise;
  // FP8 with f32 output takes a bf16 bias only: add an f32 bias in the epilogue instead.
  const bool lt_bias = bias && odt != INGOT_F32;
  if (lt_bias) {
    g.bias = bias;
    g.bias_type = lt_out_type(odt);
  }
  bool declined = false;
  st = lt_run(dev, s, g, &declined);
  if (st) return st;
  if (!declined) {
    if (bias && !lt_bias)
      st = cuda_check(epilogue(odt, (const float *)po, po, nullptr, nullptr, bias, m, n, false, s),
                      "scaled_mm bias");
    return st;
  }
  // Unscaled FP8 GEMM into f32 scratch, then scales, bias and rounding in one pass.
  float *acc = (float *)cuda_scratch_alloc(dev, (size_t)(m * n) * sizeof(float), s);
  if (!acc) return INGOT_ERR_OOM;
  LtGemm u = g;
  u.D = {acc, CUDA_R_32F, (uint64_t)n, (uint64_t)m, n, 0};
  u.a_scale = u.b_scale = nullptr;
  u.outer_vec = false;
  u.bias = nullptr;
  st = lt_run(dev, s, u, &declined);
  if (!st && !declined)
    st = cuda_check(epilogue(odt, acc, po, sa, sb, bias, m, n, rowwise, s), "scaled_mm epilogue");
  cuda_scratch_free(dev, acc, s);
  if (st || !declined) return st;
  const uint8_t *pa = (const uint8_t *)ingot_tensor_data(A), *pb = (const uint8_t *)ingot_tensor_data(Bm);
  cudaError_t err;
  switch (odt) {
  case INGOT_BF16:
    err = launch_naive<bf16_t>(pa, pb, po, sa, sb, bias, m, n, k, lda, ldb, ae, be, rowwise, s);
    break;
  case INGOT_F16:
    err = launch_naive<f16_t>(pa, pb, po, sa, sb, bias, m, n, k, lda, ldb, ae, be, rowwise, s);
    break;
  default:
    err = launch_naive<float>(pa, pb, po, sa, sb, bias, m, n, k, lda, ldb, ae, be, rowwise, s);
    break;
  }
  return cuda_check(err, "scaled_mm kernel");
}

}  // namespace

// y [m, n] (f32, row-major, ld n) = x [m, k] . w [n, k]^T with x and w bf16
// row-major (ld k), f32 accumulation: cuBLASLt's TN case (Lt's A = w, B = x),
// through the handle, workspace and algorithm cache above. *declined (and
// INGOT_OK) when Lt has no algorithm for it.
extern "C" ingot_status cuda_gemm_bf16_nt(int dev, cudaStream_t s, const void *x, const void *w,
                                          float *y, int64_t m, int64_t n, int64_t k,
                                          bool *declined) {
  LtGemm g = lt_tn_f32();
  g.A = {w, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k, 0};
  g.B = {x, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k, 0};
  g.D = {y, CUDA_R_32F, (uint64_t)n, (uint64_t)m, n, 0};
  return lt_run(dev, s, g, declined);
}

extern "C" void cuda_register_matmul(ingot_backend *be) {
  be->kernels[INGOT_OP_MATMUL] = k_matmul;
  be->kernels[INGOT_OP_SCALED_MM] = k_scaled_mm;
}
