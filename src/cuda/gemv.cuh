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

#ifdef __cplusplus
}
#endif
