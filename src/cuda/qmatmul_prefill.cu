// QMATMUL's prefill products (M >= kBf16Rows rows of x) on bf16 tensor
// cores: y [M, N] = x [M, K] . deq(W)^T with f32 accumulation.
//
// Design:
// - W (ggml blocks, rows padded to a stride S) is dequantised once per call
//   into a bf16 scratch [N, K] (one thread per 32-element unit, the decoders
//   of ggml_blocks.cuh, round to nearest even); x is rounded to bf16 the same
//   way; cuBLASLt multiplies them in its TN case into y (f32). The model is
//   never held dequantised: the scratch comes from the stream-ordered
//   caching allocator and the next layer's product reuses the same block.
// - Error: each product term carries at most 2^-8 relative error (both
//   operands rounded to bf16), so |y - y_f32| <= 2^-8 (|x| . |W|^T) plus f32
//   accumulation; fewer rows keep the f32 path of qgemv.cu (exact to f32),
//   as does INGOT_PREFILL_F32=1.
// - No host sync; everything on the caller's stream (capturable, except the
//   first cuBLASLt call of a stream, which allocates its workspace).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/env.h"
#include "cuda_common.cuh"
#include "ggml_blocks.cuh"

namespace {

constexpr int64_t kBf16Rows = 64;  // fewer rows: the f32 path (decode-like, exact)
constexpr int kThreads = 256;

// out [n, k] bf16 = rows 0..n-1 of W dequantised (al: rows meet the type's
// load alignment; ovec: 16-byte stores of 8 values).
template <int TYPE>
__global__ void dequant_bf16_kernel(const uint8_t *__restrict__ w, int64_t rs, int64_t n, int64_t k,
                                    bf16_t *__restrict__ out, bool al, bool ovec) {
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  CUDA_GRID_STRIDE(i, n * units) {
    const int64_t r = i / units, u = i % units;
    float v[ggml::kUnit];
    ggml::decode_unit<TYPE>(w + r * rs, u, k, al, v);
    bf16_t *o = out + r * k + u * ggml::kUnit;
    const int64_t cnt = k - u * ggml::kUnit;
    if (ovec && cnt >= ggml::kUnit) {
#pragma unroll
      for (int j = 0; j < ggml::kUnit / 8; j++) {
        uint32_t p[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
          p[e] = (uint32_t)from_acc<bf16_t>(v[8 * j + 2 * e]).x |
                 (uint32_t)from_acc<bf16_t>(v[8 * j + 2 * e + 1]).x << 16;
        reinterpret_cast<uint4 *>(o)[j] = make_uint4(p[0], p[1], p[2], p[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < ggml::kUnit; j++)
        if (j < cnt) o[j] = from_acc<bf16_t>(v[j]);
    }
  }
}

__global__ void to_bf16_kernel(const float *__restrict__ x, int64_t n, bf16_t *__restrict__ out) {
  CUDA_GRID_STRIDE(i, n) out[i] = from_acc<bf16_t>(x[i]);
}

bool rows_aligned(int type, const void *w, int64_t rs) {
  int a = 1;
  GGML_TYPE_SWITCH(type, a = ggml::Traits<QT>::align);
  return (uintptr_t)w % (uintptr_t)a == 0 && rs % a == 0;
}

bool f32_forced() { return ingot_env_on("INGOT_PREFILL_F32"); }

}  // namespace

extern "C" ingot_status cuda_qmatmul_prefill_bf16(const ingot_tensor *x, const ingot_tensor *w,
                                                  int type, int64_t k, ingot_tensor *y,
                                                  cudaStream_t s, bool *done) {
  *done = false;
  const int64_t m = ingot_shape(x)[0], n = ingot_shape(w)[0], rs = ingot_shape(w)[1];
  if (m < kBf16Rows || !ingot_is_contiguous(x) || f32_forced()) return INGOT_OK;
  const int dev = ingot_device_of(y).index;
  const size_t wbytes = (size_t)(n * k) * 2, xbytes = (size_t)(m * k) * 2;
  bf16_t *wb = (bf16_t *)cuda_scratch_alloc(dev, wbytes + 256 + xbytes, s);
  if (!wb) return ingot_last_status();
  bf16_t *xb = (bf16_t *)((char *)wb + ((wbytes + 255) & ~(size_t)255));  // 256-byte aligned
  const uint8_t *wp = (const uint8_t *)ingot_tensor_data(w);
  const int64_t units = (k + ggml::kUnit - 1) / ggml::kUnit;
  const bool al = rows_aligned(type, wp, rs), ovec = k % 8 == 0;
  cudaError_t e = cudaErrorInvalidValue;
  GGML_TYPE_SWITCH(type, dequant_bf16_kernel<QT>
                   <<<grid_for(n * units, kThreads), kThreads, 0, s>>>(wp, rs, n, k, wb, al, ovec);
                   e = cudaGetLastError());
  ingot_status st = cuda_check(e, "qmatmul prefill dequantise kernel");
  if (!st) {
    to_bf16_kernel<<<grid_for(m * k, kThreads), kThreads, 0, s>>>(
        (const float *)ingot_tensor_data(x), m * k, xb);
    st = launch_status("qmatmul prefill bf16 kernel");
  }
  bool declined = false;
  if (!st)
    st = cuda_gemm_bf16_nt(dev, s, xb, wb, (float *)ingot_tensor_data(y), m, n, k, &declined);
  cuda_scratch_free(dev, wb, s);  // stream-ordered: reused by the next product
  *done = !st && !declined;
  return st;
}
