// Decode-size matrix-vector products (src/cuda/gemv.cu), tried by the MATMUL
// and SCALED_MM kernels before cuBLASLt.
#pragma once

#include <stdbool.h>

#include "ingot/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handle a MATMUL or SCALED_MM op's args when they are a GEMV of 1-8 rows
 * against a weight stored as rows along k (see gemv.cu for the exact cases).
 * *done = true: the product was enqueued (or failed: see the status);
 * *done = false: not handled, nothing touched, returns INGOT_OK. */
ingot_status cuda_gemv_try(ingot_op_args *a, bool *done);

/* out [rows, m] f32 (contiguous) = xn [rows, k] . W^T (+ res [rows, m] f32,
 * contiguous) for 1-8 rows, W [m, k] of f32/bf16/f16 with row stride ldw
 * elements, x f32 contiguous: the float-weight GEMV of QMATMUL at dense-GEMV
 * speed. xn = x, or with norm (f32 [k]) rms_norm(x, norm, eps) fused into the
 * staging of x (then only the fast path is tried: *done = false when it does
 * not apply, and the caller normalises x itself). *done as for cuda_gemv_try.
 * W is read before the kernel before it in the stream has finished (PDL): it
 * must not be written by the work just before (model weights are not).
 * wdt may also be f8e4m3fn, with wscale f32 [m] (W row j's scale, applied to
 * output column j before res); wscale NULL for the float dtypes. */
ingot_status cuda_gemv_f32x(const void *w, ingot_dtype wdt, int64_t ldw, const float *x,
                            int64_t rows, int64_t k, int64_t m, const float *res, const float *norm,
                            float eps, const float *wscale, ingot_tensor *out, bool *done);

#ifdef __cplusplus
}
#endif
