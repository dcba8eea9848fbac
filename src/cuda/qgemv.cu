// Products with GGML-block weights and quantised row lookup on CUDA:
// QMATMUL (y [M, N] = x [M, K] . W^T) and QGET_ROWS (contracts in
// src/core/ops_nn.c; CPU reference src/cpu/nn.c). Every type of
// ggml_blocks.cuh (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K).
//
// Design:
// - M <= 8 (decode): qgemv_kernel reads the blocks directly. A group of L
//   lanes (L = 32, or the next power of two >= the row's 32-element units
//   when a row is short, so that a warp then owns several groups) owns two
//   consecutive output rows; lane i decodes units i, i+L, ... (a legacy
//   block, a K-quant sub-block, or 32 elements of a float row) of both rows
//   into registers and multiplies them by all M rows of x (one template per
//   M rounded up to 1/2/4/8: each weight load is reused M times, each x load
//   twice), f32 accumulation, shuffle reduction within the group. x is read
//   through the read-only cache (at most 8 rows; it stays in L1/L2).
// - M > 8 (prefill): W is dequantised (the QGET_ROWS kernel with the
//   identity ids) into an f32 scratch tensor from the caching allocator, and
//   the CUDA MATMUL kernel (cuBLASLt, f32, no TF32) multiplies x by its
//   transpose straight into y: correct first; a bf16/f16 scratch is the
//   faster follow-up (docs/perf-notes.md).
// - QGET_ROWS: one thread per (id, 32-element unit). Ids are checked as
//   embedding checks them (cuda_check_index_range); with checks off an
//   out-of-range id yields a zero row.
// No host sync besides that index check; everything on the output's current
// stream, capturable in a graph.
#include <stdint.h>

#include "cuda_common.cuh"
#include "ggml_blocks.cuh"
#include "ingot/nn.h"
#include "ingot/ops.h"
#include "qgemv_kernels.cuh"

namespace {

using qgemv::kRowsPerGroup;
using qgemv::kThreads;
using qgemv::qgemv_kernel;
using qgemv::qget_rows_kernel;

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
  GGML_TYPE_SWITCH(type, qget_rows_kernel<QT>
                   <<<grid, kThreads, 0, s>>>(w, rs, nrows, ids, t, cols, out, al, ovec));
  return cudaGetLastError();
}

template <int TYPE>
cudaError_t launch_gemv_t(const uint8_t *w, int64_t rs, const float *x, int64_t k, int64_t n, int m,
                          float *y, cudaStream_t s) {
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  int lpr = 1;
  while (lpr < 32 && lpr < units) lpr *= 2;
  const int64_t rows_per_warp = (int64_t)(32 / lpr) * kRowsPerGroup;
  const int64_t groups = (n + rows_per_warp - 1) / rows_per_warp;  // warps needed
  int64_t blocks = (groups + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 132 * 16) blocks = 132 * 16;
  const bool al = rows_aligned(TYPE, w, rs);
  const bool xvec = (uintptr_t)x % 16 == 0 && k % 4 == 0;
  const unsigned g = (unsigned)blocks;
  if (m == 1)
    qgemv_kernel<TYPE, 1><<<g, kThreads, 0, s>>>(w, rs, x, k, n, m, y, lpr, al, xvec);
  else if (m == 2)
    qgemv_kernel<TYPE, 2><<<g, kThreads, 0, s>>>(w, rs, x, k, n, m, y, lpr, al, xvec);
  else if (m <= 4)
    qgemv_kernel<TYPE, 4><<<g, kThreads, 0, s>>>(w, rs, x, k, n, m, y, lpr, al, xvec);
  else
    qgemv_kernel<TYPE, 8><<<g, kThreads, 0, s>>>(w, rs, x, k, n, m, y, lpr, al, xvec);
  return cudaGetLastError();
}

// y [M, N] = x [M, K] . deq(W)^T for M > 8: W dequantised into f32 scratch,
// then the MATMUL kernel of this backend on [1, M, K] x [1, K, N] views.
ingot_status qmatmul_prefill(ingot_op_args *a, cudaStream_t s) {
  ingot_tensor *x = a->in[0], *w = a->in[1], *y = a->out[0];
  const int type = (int)a->iarg[0];
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  const int64_t dshape[3] = {1, n, k}, xshape[3] = {1, m, k}, yshape[3] = {1, m, n};
  ingot_tensor *deq = ingot_empty(3, dshape, INGOT_F32, ingot_device_of(w));
  if (!deq) return ingot_last_status();
  ingot_status st =
      cuda_check(launch_get_rows(type, (const uint8_t *)ingot_tensor_data(w), ingot_shape(w)[1], n,
                                 nullptr, n, k, (float *)ingot_tensor_data(deq), s),
                 "qmatmul dequantise kernel");
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
  ingot_release(deq);  // stream-ordered: the cache reuses it only after this stream's work
  return st;
}

ingot_status k_qmatmul(ingot_op_args *a) {
  ingot_tensor *x = a->in[0], *w = a->in[1], *y = a->out[0];
  ingot_status st = cuda_use_device_of(y);
  if (st) return st;
  cudaStream_t s = stream_of(y);
  const int type = (int)a->iarg[0];
  const int64_t k = a->iarg[1], m = ingot_shape(x)[0], n = ingot_shape(w)[0];
  if (m > 8) return qmatmul_prefill(a, s);
  const uint8_t *wp = (const uint8_t *)ingot_tensor_data(w);
  const float *xp = (const float *)ingot_tensor_data(x);
  float *yp = (float *)ingot_tensor_data(y);
  const int64_t rs = ingot_shape(w)[1];
  cudaError_t e = cudaErrorInvalidValue;
  GGML_TYPE_SWITCH(type, e = launch_gemv_t<QT>(wp, rs, xp, k, n, (int)m, yp, s));
  return cuda_check(e, "qmatmul kernel");
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

extern "C" void cuda_register_qgemv(ingot_backend *be) {
  be->kernels[INGOT_OP_QMATMUL] = k_qmatmul;
  be->kernels[INGOT_OP_QGET_ROWS] = k_qget_rows;
}
