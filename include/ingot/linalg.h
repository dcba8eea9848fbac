/* Linear algebra, after torch.linalg: every function takes matrices in the
 * last two dims of f32, f64, c64 or c128 tensors (any strides) with any
 * number of leading batch dims, and returns fresh contiguous tensors. Real
 * outputs of complex inputs (singular values, eigenvalues, norms) have the
 * matching real dtype. Multi-output functions return the first result and
 * write the others into out-pointers (owned references; NULL pointers skip
 * them). A singular or non-positive-definite batch member fails the call with
 * INGOT_ERR_NUMERIC and a message naming the member. */
#ifndef INGOT_LINALG_H
#define INGOT_LINALG_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compact LU with partial pivoting of A [*, m, n]: LU [*, m, n] and *pivots
 * int32 [*, min(m, n)] (1-based, LAPACK's). Fails when U has a zero pivot. */
ingot_tensor *ingot_linalg_lu_factor(const ingot_tensor *A, ingot_tensor **pivots);
/* A = P L U: returns P [*, m, m]; *L [*, m, k] unit lower, *U [*, k, n] upper,
 * k = min(m, n). Singular inputs are fine (U has zeros on its diagonal). */
ingot_tensor *ingot_linalg_lu(const ingot_tensor *A, ingot_tensor **L, ingot_tensor **U);
/* Solve A X = B (left) or X A = B (!left) from lu_factor's (LU, pivots), with
 * A^H instead of A when adjoint; batch dims broadcast. */
ingot_tensor *ingot_linalg_lu_solve(const ingot_tensor *LU, const ingot_tensor *pivots,
                                    const ingot_tensor *B, bool left, bool adjoint);
/* Solve A X = B (left) or X A = B for square A; B [*, n, k] or a vector
 * [*, n] (left only, as torch.linalg.solve decides); batch dims broadcast. */
ingot_tensor *ingot_linalg_solve(const ingot_tensor *A, const ingot_tensor *B, bool left);
/* Solve with triangular A (only its upper or lower triangle is read; unit
 * diagonal assumed when unitriangular): A X = B (left) or X A = B. Pass a
 * transposed view (ingot_transpose(A, -1, -2)) to solve with A^T. No
 * singularity check (a zero diagonal gives inf/NaN, as in PyTorch). */
ingot_tensor *ingot_linalg_solve_triangular(const ingot_tensor *A, const ingot_tensor *B,
                                            bool upper, bool left, bool unitriangular);
/* Inverse of square A [*, n, n]. */
ingot_tensor *ingot_linalg_inv(const ingot_tensor *A);
/* Determinant of square A [*, n, n]: shape [*]. */
ingot_tensor *ingot_linalg_det(const ingot_tensor *A);
/* det(A) = sign * exp(logabsdet): returns sign [*] (A's dtype; 0 when
 * singular) and *logabsdet [*] (real; -inf when singular). */
ingot_tensor *ingot_linalg_slogdet(const ingot_tensor *A, ingot_tensor **logabsdet);
/* Cholesky factor of Hermitian positive-definite A (lower triangle read):
 * L with A = L L^H, or U = L^H when upper. */
ingot_tensor *ingot_linalg_cholesky(const ingot_tensor *A, bool upper);
/* Solve A X = B given A's Cholesky factor (lower L, or upper U when upper);
 * batch dims broadcast (torch.cholesky_solve). */
ingot_tensor *ingot_linalg_cholesky_solve(const ingot_tensor *B, const ingot_tensor *L, bool upper);

typedef enum ingot_qr_mode {
  INGOT_QR_REDUCED,  /* Q [*, m, k], R [*, k, n] */
  INGOT_QR_COMPLETE, /* Q [*, m, m], R [*, m, n] */
  INGOT_QR_R,        /* Q empty (shape [0]), R [*, k, n] */
} ingot_qr_mode;

/* QR of A [*, m, n] (k = min(m, n)): returns Q, *R. */
ingot_tensor *ingot_linalg_qr(const ingot_tensor *A, ingot_qr_mode mode, ingot_tensor **R);
/* First n columns of the product of k Householder reflectors H_i = I -
 * tau_i v_i v_i^H stored below the diagonal of A [*, m, n] (tau [*, k],
 * k <= n <= m), as LAPACK's orgqr/ungqr. */
ingot_tensor *ingot_linalg_householder_product(const ingot_tensor *A, const ingot_tensor *tau);

/* A = U diag(S) Vh: returns U ([*, m, m] when full_matrices, else [*, m, k]);
 * *S [*, k] real, descending; *Vh ([*, n, n] or [*, k, n]). Exact at any
 * scale (the input is scaled by a power of two); non-finite input fails.
 * CUDA: INGOT_SVD_ALGO=gesvd|gesvdp|gesvdj|qdwh|auto picks the algorithm;
 * the CPU runs QDWH for qdwh, LAPACK otherwise (api.md). */
ingot_tensor *ingot_linalg_svd(const ingot_tensor *A, bool full_matrices, ingot_tensor **S,
                               ingot_tensor **Vh);
/* Singular values [*, k] (real, descending). */
ingot_tensor *ingot_linalg_svdvals(const ingot_tensor *A);
/* Eigen-decomposition of Hermitian A (lower triangle read, upper when
 * upper): returns eigenvalues [*, n] (real, ascending), *eigenvectors. */
ingot_tensor *ingot_linalg_eigh(const ingot_tensor *A, bool upper, ingot_tensor **eigenvectors);
/* Eigenvalues of Hermitian A [*, n] (real, ascending). */
ingot_tensor *ingot_linalg_eigvalsh(const ingot_tensor *A, bool upper);

/* Pseudo-inverse [*, n, m]: singular values <= max(atol, rtol * s_max) are
 * dropped. atol < 0 and rtol < 0 mean "not given" (torch: rtol defaults to
 * eps * max(m, n) when atol is not given, else to 0). hermitian uses eigh. */
ingot_tensor *ingot_linalg_pinv(const ingot_tensor *A, double atol, double rtol, bool hermitian);
/* Least squares min ||A X - B|| (gelsd, numpy's and torch's 'gelsd' driver)
 * for A [*, m, n], B [*, m, k]: returns X [*, n, k]; *residuals [*, k]
 * (squared residual norms; shape [0] unless m > n and every member has full
 * rank), *rank int64 [*], *singular_values [*, min(m, n)]. rcond < 0: eps *
 * max(m, n). Non-finite input fails. */
ingot_tensor *ingot_linalg_lstsq(const ingot_tensor *A, const ingot_tensor *B, double rcond,
                                 ingot_tensor **residuals, ingot_tensor **rank,
                                 ingot_tensor **singular_values);
/* Matrix norm over the last two dims; ord: "fro", "nuc", "inf", "-inf", "1",
 * "-1", "2", "-2" (NULL = "fro"). Real result. */
ingot_tensor *ingot_linalg_matrix_norm(const ingot_tensor *A, const char *ord, bool keepdim);
/* Condition number in ord (NULL = "2"; as matrix_norm's ords): s_max / s_min
 * for 2 and -2 its inverse; else norm(A) * norm(inv(A)) for square A (inf
 * for a singular member, as torch). */
ingot_tensor *ingot_linalg_cond(const ingot_tensor *A, const char *ord);
/* Number of singular values (|eigenvalues| when hermitian) above max(atol,
 * rtol * s_max), int64 [*]; atol/rtol < 0 as pinv. */
ingot_tensor *ingot_linalg_matrix_rank(const ingot_tensor *A, double atol, double rtol,
                                       bool hermitian);
/* Complex conjugate (a copy; real dtypes are copied unchanged). */
ingot_tensor *ingot_conj(const ingot_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
