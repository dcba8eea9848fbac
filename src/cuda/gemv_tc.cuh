// The one-row GEMV on tensor cores (gemv_tc.cu), launched by gemv.cu for one
// f32 row of X against QMATMUL's e4m3, bf16 or f16 weights.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "ingot/backend.h"

// out[j] = (xn . W[j]) * sb[j] + bias[j] for j < m, xn = x or rms_norm(x,
// norm, eps); sb, bias, norm may be NULL. W: m rows of k elements, row stride
// ldw elements. w_early: W may be loaded before the PDL wait (immutable).
struct GemvTcArgs {
  const void *w;
  int64_t ldw;
  const float *x;
  int64_t k, m;
  const float *sb, *bias, *norm;
  float eps;
  bool w_early;
  float *out;
  int kw;  // warps a row group splits k over: set by gemv_tc_try
};

// Enqueues the product on s (a PDL dependent of the kernel before; no sync)
// and sets *used when the kernel takes it: weights of wdt, k a multiple of 4
// chunks of 16 bytes up to 4096, rows and X 16-byte aligned, one wave of
// blocks, INGOT_GEMV_TC not 0. Else *used = false, nothing enqueued.
ingot_status gemv_tc_try(ingot_dtype wdt, GemvTcArgs p, int dev, cudaStream_t s, bool *used);
