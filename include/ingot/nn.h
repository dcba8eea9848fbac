/* Fused neural-net ops for transformer inference: products with quantised
 * (GGML block) weights, quantised embedding lookup, RMS norm and SwiGLU.
 * Every op returns a new tensor (owned reference) on the inputs' device, or
 * NULL with ingot_last_error() set; inputs of one op must share a device. */
#ifndef INGOT_NN_H
#define INGOT_NN_H

#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y [M, N] (f32) = x [M, K] (f32) times W^T, where W is a uint8 tensor
 * [N, S] whose row n starts with output row n as ggml blocks of ggml_type
 * (ingot/quant.h ids: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
 * Q5_K, Q6_K) over K = cols; S >= those row bytes (the rest is padding,
 * never read: pad rows to 16 bytes for the fastest CUDA path). Same device. */
ingot_tensor *ingot_qmatmul(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                            int64_t cols);
/* (norm ? rms_norm(x, norm, eps) : x) . W^T (+ res when res != NULL) in one
 * op (one kernel on CUDA for M <= 8): norm f32 [cols], res f32 [M, N]. */
ingot_tensor *ingot_qmatmul_fused(const ingot_tensor *x, const ingot_tensor *w, int ggml_type,
                                  int64_t cols, const ingot_tensor *norm, double eps,
                                  const ingot_tensor *res);
/* swiglu(gu[:, :cols], gu[:, cols:]) . W^T (+ res): the down projection of a
 * gated MLP read straight from the gate|up product gu f32 [M, 2 cols] (one
 * kernel on CUDA for M <= 8: silu(gate) * up made as x is staged). */
ingot_tensor *ingot_qmatmul_swiglu(const ingot_tensor *gu, const ingot_tensor *w, int ggml_type,
                                   int64_t cols, const ingot_tensor *res);
/* ingot_qmatmul_fused with f8e4m3fn weights and a per-output-row scale: W
 * u8 [N, S >= cols] whose row n starts with cols f8e4m3fn bytes, scale f32
 * [N]; y[m, n] = scale[n] * (x'[m] . W[n]) (+ res), f32 accumulation. */
ingot_tensor *ingot_f8matmul_fused(const ingot_tensor *x, const ingot_tensor *w,
                                   const ingot_tensor *scale, int64_t cols,
                                   const ingot_tensor *norm, double eps, const ingot_tensor *res);
/* ingot_qmatmul_swiglu with f8e4m3fn weights and a per-output-row scale as
 * in ingot_f8matmul_fused: gu f32 [M, 2 cols], W u8 [N, S >= cols]. */
ingot_tensor *ingot_f8matmul_swiglu(const ingot_tensor *gu, const ingot_tensor *w,
                                    const ingot_tensor *scale, int64_t cols,
                                    const ingot_tensor *res);
/* Rows ids [T] (int32/int64, on w's device) of a ggml-block table W [rows, S]
 * of ggml_type (padded rows as in ingot_qmatmul), dequantised to f32
 * [T, cols] (embedding lookup of a quantised table). Out-of-range ids fail
 * like ingot_embedding. */
ingot_tensor *ingot_qget_rows(const ingot_tensor *w, int ggml_type, int64_t cols,
                              const ingot_tensor *ids);
/* x * rsqrt(mean(x^2 over the last dim) + eps) * weight; x [..., n] f32/bf16/f16,
 * weight [n] (f32 or x's dtype); result dtype of x, f32 accumulation. */
ingot_tensor *ingot_rms_norm(const ingot_tensor *x, const ingot_tensor *weight, double eps);
/* silu(gate) * up, elementwise, same shapes (f32/bf16/f16). */
ingot_tensor *ingot_swiglu(const ingot_tensor *gate, const ingot_tensor *up);

#ifdef __cplusplus
}
#endif
#endif
