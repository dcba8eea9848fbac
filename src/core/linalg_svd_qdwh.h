/* SVD by the QDWH polar decomposition and a symmetric eigensolver, composed
 * of ingot ops so that one code runs (and is tested) on every backend. The
 * backends' SVD kernels call it for INGOT_SVD_ALGO=qdwh (and CUDA under
 * auto, see linalg_svd_qdwh_auto) and run their own algorithm when it
 * declines. */
#ifndef INGOT_CORE_LINALG_SVD_QDWH_H
#define INGOT_CORE_LINALG_SVD_QDWH_H

#include <stdbool.h>

#include "ingot/backend.h"

/* The SVD op (args as INGOT_OP_SVD) by QDWH + eigh. True when the outputs
 * hold a result that passed its checks (residual, orthonormality); false,
 * with no error set, when the caller must compute the SVD itself: complex
 * or empty input, non-finite input, a failed check or a failed op.
 * INGOT_SVD_VERBOSE=1 prints one line per call to stderr. */
bool linalg_svd_qdwh(ingot_op_args *a);
/* True when INGOT_SVD_ALGO names qdwh. */
bool linalg_svd_qdwh_forced(void);
/* Whether `auto` takes QDWH for this op: real f32/f64, min(m, n) >= 512,
 * max(m, n) <= 1.25 min(m, n) (QDWH's work grows with m, gesvdj's less) and
 * TF32 products off (they would cost QDWH its f32 accuracy). */
bool linalg_svd_qdwh_auto(const ingot_op_args *a);

#endif
