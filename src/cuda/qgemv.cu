// Products with GGML-block weights and quantised row lookup on CUDA:
// QMATMUL (y [M, N] = (norm ? rms_norm(x) : x) [M, K] . W^T (+ res), or
// swiglu(gate, up) . W^T (+ res) with x = gate | up [M, 2K]) and
// QGET_ROWS (contracts in src/core/ops_nn.c; CPU reference src/cpu/nn.c).
// Every type of ggml_blocks.cuh (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
// Q5_K Q6_K); W rows may be padded (row stride S >= the row's bytes).
//
// Design:
// - M <= 8, rows 16-byte aligned (the model pads them at upload), rows up
//   to 4 KiB and x within 48 KiB of shared memory: qgemv_smem_kernel
//   (qgemv_kernels.cuh: x staged and normalised per block by
//   qgemv_stage.cuh, which the fused q|k|v attention kernel shares; row
//   spans read with int4 loads into a per-warp shared buffer,
//   double-buffered), the norm and the residual in the same launch. The swiglu form (iarg[2]: x =
//   gate | up, qmatmul_swiglu) stages silu(gate) * up the same way; where
//   the kernel does not apply, the SWIGLU kernel runs first.
// - F32/BF16/F16 weights, M <= 8: the dense GEMV of gemv.cu (cuda_gemv_f32x:
//   x staged as float, the norm fused into the staging, res in its epilogue)
//   when its kernels apply; else the paths below.
// - The f8 form (f8e4m3fn rows, in[4] = their f32 scales; ingot_f8matmul_*),
//   M <= 8: the same dense GEMV with WT = f8e4m3_t (1 byte a weight, f32
//   accumulation, each output column times its row's scale in the
//   epilogue before res); M > 8: W times its scales dequantised to f32
//   scratch (f8_rows_kernel), the MATMUL kernel, res added after.
// - Other M <= 8 products: qgemv_kernel reads the blocks directly. A group of L
//   lanes (L = 32, or the next power of two >= the row's 32-element units
//   when a row is short, so that a warp then owns several groups) owns two
//   consecutive output rows; lane i decodes units i, i+L, ... (a legacy
//   block, a K-quant sub-block, or 32 elements of a float row) of both rows
//   into registers and multiplies them by all M rows of x (one template per
//   M rounded up to 1/2/4/8: each weight load is reused M times, each x load
//   twice), f32 accumulation, shuffle reduction within the group. x is read
//   through the read-only cache (at most 8 rows; it stays in L1/L2). A norm
//   is applied first by the RMS_NORM kernel; res is added in its epilogue.
// - M > 8 (prefill): W is dequantised (the QGET_ROWS kernel with the
//   identity ids) into an f32 scratch tensor from the caching allocator, and
//   the CUDA MATMUL kernel (cuBLASLt, f32, no TF32) multiplies x by its
//   transpose straight into y; from 64 rows on, a bf16 scratch and bf16
//   tensor cores instead (qmatmul_prefill.cu). A norm is applied first (the
//   RMS_NORM kernel), res added after (add_res_kernel).
// - QMATMUL_ROPE_KV (M = 1, block weights, an arrivals tensor): the
//   shared-memory kernel above with an epilogue (qgemv_rope_kv.cuh): q|k|v
//   goes to a scratch [N] as always; after storing its task's rows a warp
//   fences and adds their count to the arrival counter of each head they
//   touch; the warp that completes a head (D rows) fences, reads it back
//   through L2, applies q_norm/k_norm and rope at pos (read on the device)
//   and writes q to the output, k and v into the caches (rows of a pos
//   outside [0, ctx) skipped), then zeroes the counter: zero between
//   launches, no memset node. Otherwise QMATMUL then ROPE_KV_WRITE.
// - QGET_ROWS: one thread per (id, 32-element unit). Ids are checked as
//   embedding checks them (cuda_check_index_range); with checks off an
//   out-of-range id yields a zero row.
// Every kernel here is launched with PDL (pdl.cuh): the shared-memory GEMV
// loads its first weight span (and, for one row whose x stages in one round,
// its norm weights) before pdl_wait, so the weight fetch overlaps the
// previous kernel's tail; the others wait first.
// No host sync besides that index check; everything on the output's current
// stream, capturable in a graph.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "ggml_blocks.cuh"
#include "gemv.cuh"
#define PDL_FAMILY "qgemv"  // INGOT_NO_PDL=qgemv turns this file's PDL off
#include "pdl.cuh"
#include "ingot/nn.h"
#include "ingot/ops.h"
#include "../core/qkv_rope.h"
#include "timeline.cuh"
#include "qgemv_kernels.cuh"
#include "qgemv_rope_kv.cuh"

namespace {

using namespace qgemv;

// True when row starts (base and row stride) meet the type's load alignment.
bool rows_aligned(int type, const void *w, int64_t rs) {
  int a = 1;
  GGML_TYPE_SWITCH(type, a = ggml::Traits<QT>::align);
  return (uintptr_t)w % (uintptr_t)a == 0 && rs % a == 0;
}

cudaError_t launch_get_rows(int type, const uint8_t *w, int64_t rs, int64_t nrows,
                            const int64_t *ids, int64_t t, int64_t cols, float *out,
                            cudaStream_t s) {
  const int64_t units = (cols + ggml::kUnit - 1) / ggml::kUnit;
  const bool al = rows_aligned(type, w, rs);
  const bool ovec = (uintptr_t)out % 16 == 0 && cols % 4 == 0;
  const unsigned grid = grid_for(t * units, kThreads);
  cudaError_t e = cudaErrorInvalidValue;
  GGML_TYPE_SWITCH(type, e = launch_pdl(qget_rows_kernel<QT>, dim3(grid), dim3(kThreads), 0, s, w,
                                        rs, nrows, ids, t, cols, out, al, ovec));
  return e;
}

// Resident 4-warp blocks of the shared-memory GEMV on the H200 (132 SMs).
int64_t resident_blocks(int type, int m) { return 132 * smem_blocks_per_sm(type, m == 1 ? 1 : 2); }
// Tasks beyond which the shared-memory GEMV is bandwidth-bound: 4 tasks per
// warp of 132 SMs x 4 4-warp blocks.
constexpr int64_t kManyTasks = 132 * 16 * 4;

// E = KERNEL<TYPE, R> launched with PDL (pdl.cuh), R = m rounded up to 1, 2,
// 4 or 8.
#define QGEMV_BY_M(E, m, KERNEL, GRID, THREADS, SMEM, S, ...)                           \
  do {                                                                                  \
    if ((m) == 1)                                                                       \
      E = launch_pdl(KERNEL<TYPE, 1>, dim3(GRID), dim3(THREADS), SMEM, S, __VA_ARGS__); \
    else if ((m) == 2)                                                                  \
      E = launch_pdl(KERNEL<TYPE, 2>, dim3(GRID), dim3(THREADS), SMEM, S, __VA_ARGS__); \
    else if ((m) <= 4)                                                                  \
      E = launch_pdl(KERNEL<TYPE, 4>, dim3(GRID), dim3(THREADS), SMEM, S, __VA_ARGS__); \
    else                                                                                \
      E = launch_pdl(KERNEL<TYPE, 8>, dim3(GRID), dim3(THREADS), SMEM, S, __VA_ARGS__); \
  } while (0)

// Lanes per row group: the next power of two >= the row's units, at most 32.
int lanes_per_row(int64_t k) {
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  int lpr = 1;
  while (lpr < 32 && lpr < units) lpr *= 2;
  return lpr;
}

// The global-memory kernel (any alignment; res may be NULL).
template <int TYPE>
cudaError_t launch_gemv_t(const uint8_t *w, int64_t rs, const float *x, int64_t k, int64_t n, int m,
                          float *y, const float *res, cudaStream_t s) {
  const int lpr = lanes_per_row(k);
  const int64_t rows_per_warp = (int64_t)(32 / lpr) * kRowsPerGroup;
  const int64_t groups = (n + rows_per_warp - 1) / rows_per_warp;  // warps needed
  int64_t blocks = (groups + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 132 * 16) blocks = 132 * 16;
  const bool al = rows_aligned(TYPE, w, rs);
  const bool xvec = (uintptr_t)x % 16 == 0 && k % 4 == 0;
  const unsigned g = (unsigned)blocks;
  cudaError_t e;
  QGEMV_BY_M(e, m, qgemv_kernel, g, kThreads, 0, s, w, rs, x, k, n, m, y, res, lpr, al, xvec);
  return e;
}

// The dtype of a float ggml type (F32 / BF16 / F16: HF checkpoints' weights,
// which the dense GEMV of gemv.cu streams), else -1 (block types).
int float_dtype(int type) {
  return type == INGOT_GGML_F32    ? INGOT_F32
         : type == INGOT_GGML_BF16 ? INGOT_BF16
         : type == INGOT_GGML_F16  ? INGOT_F16
                                   : -1;
}

// Launch geometry of the shared-memory kernel (qgemv_smem_kernel and
// qgemv_rope_kv_kernel).
struct SmemPlan {
  int lpr, rw, threads;
  int64_t smem;
  unsigned blocks;
  bool xvec;
};

// The shared-memory kernel's geometry when it applies (16-byte aligned rows,
// a task of rows within kStageBytes, x and the warps' buffers within
// kSmemLimit); else false.
bool plan_smem(int type, const uint8_t *w, int64_t rs, const float *x, int64_t k, int64_t n, int m,
               SmemPlan *p) {
  if ((uintptr_t)w % 16 || rs % 16 || k > (1 << 20)) return false;
  int lpr = lanes_per_row(k);
  while (lpr < 32 && (32 / lpr) * kRowsPerGroup * rs > kStageBytes) lpr *= 2;  // fewer rows a task
  // Many tasks (a large N: bandwidth-bound): more rows a task, so more bytes
  // in flight per warp (never fewer than 8 lanes a row).
  while (lpr > 8 && (n / ((32 / lpr) * kRowsPerGroup)) >= kManyTasks &&
         2 * (32 / lpr) * kRowsPerGroup * rs <= kStageBytes)
    lpr /= 2;
  int64_t rw = (int64_t)(32 / lpr) * kRowsPerGroup;
  if (rw * rs > kStageBytes && lpr == 32) rw = 1;  // long rows: one a task
  const int64_t task_bytes = rw * rs;
  if (task_bytes > kStageBytes) return false;
  const int64_t ntask = (n + rw - 1) / rw;
  // Very small N: 1-warp blocks spread the few tasks over more SMs. From 264
  // tasks on, 4-warp blocks: a block stages x (L2 round trips, the latency
  // of a decode product) with 4x the threads (SmolLM2's o and down products,
  // 576 rows: decode 1430 tok/s with 2-warp blocks, 1513 with 4).
  const int threads = ntask >= 132 * 2 ? kSmemMaxThreads : 32;
  const int nw = threads / 32;
  static_assert(kManyTasks >= 132 * 8, "a bandwidth-bound product runs 4-warp blocks");
  const int64_t smem = smem_x_bytes(m, k) + nw * smem_warp_bytes(task_bytes);
  if (smem > kSmemLimit) return false;
  int64_t blocks = (ntask + nw - 1) / nw;
  // Grid-stride over the tasks (each warp prefetches its next one): no more
  // blocks than stay resident (3 or 4 blocks of 128 threads an SM, by the
  // registers: smem_blocks_per_sm), or a second wave would start late and
  // finish last.
  if (blocks > resident_blocks(type, m)) blocks = resident_blocks(type, m);
  *p =
      SmemPlan{lpr, (int)rw, threads, smem, (unsigned)blocks, (uintptr_t)x % 16 == 0 && k % 4 == 0};
  return true;
}

// The shared-memory kernel when it applies (plan_smem): *launched true;
// else nothing is launched. glu: x is gate | up [m, 2k].
template <int TYPE>
cudaError_t launch_gemv_smem_t(const uint8_t *w, int64_t rs, const float *x, int64_t k, int64_t n,
                               int m, float *y, const float *res, const float *norm, float eps,
                               bool glu, cudaStream_t s, bool *launched) {
  SmemPlan p;
  *launched = plan_smem(TYPE, w, rs, x, k, n, m, &p);
  if (!*launched) return cudaSuccess;
  cudaError_t e;
  QGEMV_BY_M(e, m, qgemv_smem_kernel, p.blocks, p.threads, (size_t)p.smem, s, w, rs, x, (int)k, n,
             m, y, res, norm, eps, p.lpr, p.rw, p.xvec, glu);
  return e;
}

ingot_status launch_add_res(float *y, const float *res, int64_t n, cudaStream_t s) {
  return cuda_check(
      launch_pdl(add_res_kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, s, y, res, n),
      "qmatmul residual kernel");
}

// y [M, N] = x [M, K] . deq^T with deq f32 [1, N, K] (the dequantised W,
// released here: stream-ordered, the cache reuses it only after this
// stream's work) by this backend's MATMUL kernel on [1, M, K] x [1, K, N]
// views; st: the dequantising launch's status (nothing runs when set).
ingot_status matmul_dequantised(ingot_tensor *x, ingot_tensor *deq, ingot_tensor *y,
                                ingot_status st) {
  const int64_t m = ingot_shape(x)[0], n = ingot_shape(deq)[1], k = ingot_shape(deq)[2];
  const int64_t xshape[3] = {1, m, k}, yshape[3] = {1, m, n};
  ingot_op_args mm = {};
  mm.op = INGOT_OP_MATMUL, mm.nin = 2, mm.nout = 1;
  mm.in[0] = st ? nullptr : ingot_view(x, 3, xshape);
  mm.in[1] = st ? nullptr : ingot_transpose(deq, 1, 2);
  mm.out[0] = st ? nullptr : ingot_view(y, 3, yshape);
  if (!st && (!mm.in[0] || !mm.in[1] || !mm.out[0])) st = ingot_last_status();
  if (!st) st = ingot_backend_get(ingot_device_of(y).kind)->kernels[INGOT_OP_MATMUL](&mm);
  ingot_release(mm.in[0]);
  ingot_release(mm.in[1]);
  ingot_release(mm.out[0]);
  ingot_release(deq);
  return st;
}

// y [M, N] = x [M, K] . deq(W)^T for M > 8: W dequantised into f32 scratch,
// then matmul_dequantised.
ingot_status qmatmul_prefill(ingot_tensor *x, ingot_tensor *w, int type, int64_t k, ingot_tensor *y,
                             cudaStream_t s) {
  const int64_t n = ingot_shape(w)[0];
  bool done = false;  // many rows: bf16 tensor cores (qmatmul_prefill.cu)
  ingot_status st = cuda_qmatmul_prefill_bf16(x, w, type, k, y, s, &done);
  if (st || done) return st;
  const int64_t dshape[3] = {1, n, k};
  ingot_tensor *deq = ingot_empty(3, dshape, INGOT_F32, ingot_device_of(w));
  if (!deq) return ingot_last_status();
  st = cuda_check(launch_get_rows(type, (const uint8_t *)ingot_tensor_data(w), ingot_shape(w)[1], n,
                                  nullptr, n, k, (float *)ingot_tensor_data(deq), s),
                  "qmatmul dequantise kernel");
  return matmul_dequantised(x, deq, y, st);
}

// QMATMUL's f8 form beyond the GEMV: x [M, K] (normed already) . (W * scale)^T
// into y, W dequantised with its row scales into f32 scratch for the MATMUL
// kernel (cuBLASLt, f32); res added after.
ingot_status qmatmul_f8_dequant(ingot_tensor *x, ingot_tensor *w, ingot_tensor *scale, int64_t k,
                                ingot_tensor *y, const float *rp, cudaStream_t s) {
  const int64_t m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const int64_t dshape[3] = {1, n, k};
  ingot_tensor *deq = ingot_empty(3, dshape, INGOT_F32, ingot_device_of(w));
  if (!deq) return ingot_last_status();
  ingot_status st = cuda_check(
      launch_pdl(f8_rows_kernel, dim3(grid_for(n * k, kThreads)), dim3(kThreads), 0, s,
                 (const uint8_t *)ingot_tensor_data(w), ingot_shape(w)[1],
                 (const float *)ingot_tensor_data(scale), n, k, (float *)ingot_tensor_data(deq)),
      "f8matmul dequantise kernel");
  st = matmul_dequantised(x, deq, y, st);
  if (!st && rp) st = launch_add_res((float *)ingot_tensor_data(y), rp, m * n, s);
  return st;
}

// QMATMUL's f8 form (in[4] = W's row scales): M <= 8 the dense GEMV of
// gemv.cu with f8e4m3fn weights (norm fused in its staging, scales and res in
// its epilogue: one launch); else rms_norm apart, then qmatmul_f8_dequant.
ingot_status qmatmul_f8(ingot_op_args *a) {
  ingot_tensor *x = a->in[0], *w = a->in[1], *norm = a->in[2], *res = a->in[3], *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const int64_t rs = ingot_shape(w)[1];
  const uint8_t *wp = (const uint8_t *)ingot_tensor_data(w);
  const float *sp = (const float *)ingot_tensor_data(a->in[4]);
  const float *rp = res ? (const float *)ingot_tensor_data(res) : nullptr;
  const float eps = (float)a->farg[0];
  bool done = false;
  if (m <= 8 && norm) {
    st = cuda_gemv_f32x(wp, INGOT_F8E4M3FN, rs, (const float *)ingot_tensor_data(x), m, k, n, rp,
                        (const float *)ingot_tensor_data(norm), eps, sp, y, &done);
    if (done || st) return st;
  }
  ingot_tensor *xn = norm ? ingot_rms_norm(x, norm, a->farg[0]) : nullptr;
  if (norm && !xn) return ingot_last_status();
  if (xn) x = xn;
  if (m <= 8)
    st = cuda_gemv_f32x(wp, INGOT_F8E4M3FN, rs, (const float *)ingot_tensor_data(x), m, k, n, rp,
                        nullptr, 0.f, sp, y, &done);
  if (!st && !done) st = qmatmul_f8_dequant(x, w, a->in[4], k, y, rp, stream_of(y));
  ingot_release(xn);  // stream-ordered
  return st;
}

// in[2] = norm, in[3] = res (either may be NULL), x [M, K]. M <= 8: one
// launch of the shared-memory kernel when it applies; otherwise rms_norm
// (the RMS_NORM kernel), the product, and res added in the global kernel's
// epilogue or (M > 8) by add_res_kernel.
ingot_status qmatmul_x(ingot_op_args *a) {
  if (a->nin > 4 && a->in[4]) return qmatmul_f8(a);
  ingot_tensor *x = a->in[0], *w = a->in[1], *norm = a->in[2], *res = a->in[3], *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  cudaStream_t s = stream_of(y);
  const int type = (int)a->iarg[0];
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const int64_t rs = ingot_shape(w)[1];
  const uint8_t *wp = (const uint8_t *)ingot_tensor_data(w);
  const float *rp = res ? (const float *)ingot_tensor_data(res) : nullptr;
  const float *np = norm ? (const float *)ingot_tensor_data(norm) : nullptr;  // fused norm
  float *yp = (float *)ingot_tensor_data(y);
  cudaError_t e = cudaErrorInvalidValue;
  const int fdt = float_dtype(type);
  const int64_t es = fdt >= 0 ? (int64_t)ingot_dtype_size((ingot_dtype)fdt) : 1;
  ingot_tensor *xn = nullptr;  // rms_norm(x), made once for the paths that need it apart
  if (m <= 8 && fdt >= 0 && ingot_is_contiguous(x) && rs % es == 0 &&
      (uintptr_t)wp % (uintptr_t)es == 0) {  // else: the block kernels' byte loads below
    // Float weights (HF checkpoints): the dense GEMV kernel streams them at
    // memory speed, the norm fused into its staging of x (one launch) when its
    // fast path applies, else normalised first by its own launch.
    bool done = false;
    if (np) {
      st = cuda_gemv_f32x(wp, (ingot_dtype)fdt, rs / es, (const float *)ingot_tensor_data(x), m, k,
                          n, rp, np, (float)a->farg[0], nullptr, y, &done);
      if (done || st) return st;
    }
    if (norm && !(xn = ingot_rms_norm(x, norm, a->farg[0]))) return ingot_last_status();
    st =
        cuda_gemv_f32x(wp, (ingot_dtype)fdt, rs / es, (const float *)ingot_tensor_data(xn ? xn : x),
                       m, k, n, rp, nullptr, 0.f, nullptr, y, &done);
    if (done || st) {
      ingot_release(xn);
      return st;
    }
  }
  if (xn) x = xn, np = nullptr;  // normed already: no second norm below
  if (m <= 8) {
    bool done = false;
    GGML_TYPE_SWITCH(
        type, e = launch_gemv_smem_t<QT>(wp, rs, (const float *)ingot_tensor_data(x), k, n, (int)m,
                                         yp, rp, np, (float)a->farg[0], false, s, &done));
    if (done || e != cudaSuccess) {
      ingot_release(xn);
      return cuda_check(e, "qmatmul kernel");
    }
  }
  if (np && !(xn = ingot_rms_norm(x, norm, a->farg[0]))) return ingot_last_status();
  if (xn) x = xn;
  if (m > 8) {
    st = qmatmul_prefill(x, w, type, k, y, s);
    if (!st && rp) st = launch_add_res(yp, rp, m * n, s);
  } else {
    e = cudaErrorInvalidValue;
    GGML_TYPE_SWITCH(type, e = launch_gemv_t<QT>(wp, rs, (const float *)ingot_tensor_data(x), k, n,
                                                 (int)m, yp, rp, s));
    st = cuda_check(e, "qmatmul kernel");
  }
  ingot_release(xn);  // stream-ordered, as the prefill scratch
  return st;
}

// iarg[2] = 1: x = gate | up [M, 2K] and the product takes swiglu(gate, up):
// staged by the shared-memory kernel (M <= 8, block weights: one launch),
// else the SWIGLU kernel first and the product of its result.
ingot_status k_qmatmul(ingot_op_args *a) {
  if (!a->iarg[2]) return qmatmul_x(a);
  ingot_tensor *x = a->in[0], *w = a->in[1], *res = a->in[3], *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  const int type = (int)a->iarg[0];
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const bool dense = float_dtype(type) >= 0 || (a->nin > 4 && a->in[4]);  // (in[4]: f8 form)
  if (m <= 8 && !dense) {  // (float weights: the dense GEMV of gemv.cu, after the SWIGLU kernel)
    bool done = false;
    cudaError_t e = cudaErrorInvalidValue;
    GGML_TYPE_SWITCH(
        type, e = launch_gemv_smem_t<QT>((const uint8_t *)ingot_tensor_data(w), ingot_shape(w)[1],
                                         (const float *)ingot_tensor_data(x), k, n, (int)m,
                                         (float *)ingot_tensor_data(y),
                                         res ? (const float *)ingot_tensor_data(res) : nullptr,
                                         nullptr, 0.f, true, stream_of(y), &done));
    if (done || e != cudaSuccess) return cuda_check(e, "qmatmul kernel");
  }
  ingot_tensor *g = ingot_narrow(x, 1, 0, k), *u = ingot_narrow(x, 1, k, k);
  ingot_tensor *h = g && u ? ingot_swiglu(g, u) : nullptr;
  ingot_release(g);
  ingot_release(u);
  if (!h) return ingot_last_status();
  ingot_op_args b = *a;
  b.in[0] = h;
  b.iarg[2] = 0;
  st = qmatmul_x(&b);
  ingot_release(h);  // stream-ordered: reused only after this stream's work
  return st;
}

template <int TYPE>
cudaError_t launch_rope_kv_t(const SmemPlan &p, const uint8_t *w, int64_t rs, const float *x,
                             int64_t k, int64_t n, float *y, const float *norm, float eps,
                             const RopeKvParams &P, cudaStream_t s) {
  return launch_pdl(qgemv_rope_kv_kernel<TYPE>, dim3(p.blocks), dim3(p.threads), (size_t)p.smem, s,
                    w, rs, x, (int)k, n, y, norm, eps, p.lpr, p.rw, p.xvec, P);
}

// QMATMUL_ROPE_KV (contract in src/core/ops_attention.c). T = 1, block
// weights, arrivals given and the shared-memory kernel's geometry: one
// launch of qgemv_rope_kv_kernel (q|k|v into a scratch [N], each head roped
// and written by the warp that completes it). Otherwise the QMATMUL and
// ROPE_KV_WRITE kernels one after the other (float weights: the dense GEMV
// of gemv.cu is faster than the block kernel).
ingot_status k_qmatmul_rope_kv(ingot_op_args *a) {
  ingot_tensor *x = a->in[0], *w = a->in[1], *q = a->out[0];
  ingot_status st = cuda_use_device_of(q);
  if (st) return st;
  const int type = (int)a->iarg[0];
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const int64_t rs = ingot_shape(w)[1];
  const uint8_t *wp = (const uint8_t *)ingot_tensor_data(w);
  const float *xp = (const float *)ingot_tensor_data(x);
  const bool dense = float_dtype(type) >= 0;
  SmemPlan plan;
  if (m != 1 || dense || !a->in[7] || !plan_smem(type, wp, rs, xp, k, n, 1, &plan))
    return qmatmul_rope_kv_compose(a);
  const int64_t *qs = ingot_shape(q), *cs = ingot_shape(a->out[1]);
  RopeKvParams P;
  P.pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  P.inv = (const double *)ingot_tensor_data(a->in[4]);
  P.qn = a->in[5] ? (const float *)ingot_tensor_data(a->in[5]) : nullptr;
  P.kn = a->in[6] ? (const float *)ingot_tensor_data(a->in[6]) : nullptr;
  P.qo = (float *)ingot_tensor_data(q);
  P.kc = ingot_tensor_data(a->out[1]);
  P.vc = ingot_tensor_data(a->out[2]);
  P.arrivals = (unsigned *)ingot_tensor_data(a->in[7]);
  P.hq = (int)qs[1], P.d = (int)qs[2], P.ctx = (int)cs[0], P.hkv = (int)cs[1];
  P.eps = (float)a->farg[1];
  P.neox = a->iarg[2] != 0;
  P.half = ingot_dtype_of(a->out[1]) == INGOT_F16;
  // qgemv_rope_kv_kernel is built for the residency of M = 2 (fewer registers' spills)
  if (plan.blocks > resident_blocks(type, 2)) plan.blocks = (unsigned)resident_blocks(type, 2);
  const int dev = ingot_device_of(q).index;
  cudaStream_t s = stream_of(q);
  float *y = (float *)cuda_scratch_alloc(dev, (size_t)n * sizeof(float), s);
  if (!y) return ingot_last_status();
  const float *np = a->in[2] ? (const float *)ingot_tensor_data(a->in[2]) : nullptr;
  cudaError_t e = cudaErrorInvalidValue;
  GGML_TYPE_SWITCH(
      type, e = launch_rope_kv_t<QT>(plan, wp, rs, xp, k, n, y, np, (float)a->farg[0], P, s));
  cuda_scratch_free(dev, y, s);  // stream-ordered: reused only after this launch
  return cuda_check(e, "qmatmul_rope_kv kernel");
}

ingot_status k_qget_rows(ingot_op_args *a) {
  ingot_tensor *w = a->in[0], *ids = a->in[1], *out = a->out[0];
  ingot_status st = cuda_use_device_of(out);
  if (st) return st;
  const int64_t nrows = ingot_shape(w)[0];
  if ((st = cuda_check_index_range("qget_rows", ids, nrows, 0))) return st;
  return cuda_check(
      launch_get_rows((int)a->iarg[0], (const uint8_t *)ingot_tensor_data(w), ingot_shape(w)[1],
                      nrows, (const int64_t *)ingot_tensor_data(ids), ingot_numel(ids), a->iarg[1],
                      (float *)ingot_tensor_data(out), stream_of(out)),
      "qget_rows kernel");
}

}  // namespace

TL_DEFINE_ATTACH(cuda_tl_attach_qgemv)

extern "C" void cuda_register_qgemv(ingot_backend *be) {
  be->kernels[INGOT_OP_QMATMUL] = k_qmatmul;
  be->kernels[INGOT_OP_QGET_ROWS] = k_qget_rows;
  be->kernels[INGOT_OP_QMATMUL_ROPE_KV] = k_qmatmul_rope_kv;
}
