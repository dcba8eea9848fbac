/* LSTSQ on CUDA (contract in src/core/ops_linalg_decomp.c), composed of
 * device ops: the minimum-norm solution through the SVD, as gelsd defines
 * it. X = V diag(1/s_i for s_i > rcond * s_max) U^H B, rank = the count of
 * kept values, residuals = the squared column norms of A X - B. */
#include "ingot/ingot.h"
#include "linalg_cuda.h"

static const int LAST1[1] = {-1}, ROWS[1] = {-2};

/* |t|^2 summed over the rows (real). */
static ingot_tensor *col_sq_norms(const ingot_tensor *t) {
  ingot_tensor *a = ingot_abs(t);
  return ingot_sum(ingot_mul(a, a), ROWS, 1, false);
}

static ingot_tensor *adjoint(const ingot_tensor *t) {
  return ingot_conj(ingot_transpose(t, -2, -1));
}

ingot_status cuda_linalg_lstsq(ingot_op_args *a) {
  const ingot_tensor *A = a->in[0], *B = a->in[1];
  int nd = ingot_ndim(A);
  int64_t m = ingot_shape(A)[nd - 2], n = ingot_shape(A)[nd - 1];
  ingot_scope_begin();
  ingot_tensor *X, *rank, *S = NULL;
  if (m == 0 || n == 0) {
    X = ingot_zeros(ingot_ndim(a->out[0]), ingot_shape(a->out[0]), ingot_dtype_of(a->out[0]),
                    ingot_device_of(a->out[0]));
    rank = ingot_zeros(ingot_ndim(a->out[1]), ingot_shape(a->out[1]), INGOT_I64,
                       ingot_device_of(a->out[1]));
  } else {
    ingot_tensor *Vh = NULL, *U = ingot_linalg_svd(A, false, &S, &Vh);
    ingot_tensor *keep = ingot_gt(S, ingot_mul_scalar(ingot_amax(S, LAST1, 1, true), a->farg[0]));
    ingot_tensor *sinv = ingot_masked_fill(ingot_reciprocal(S), ingot_logical_not(keep), 0);
    ingot_tensor *UhB = ingot_mul(ingot_matmul(adjoint(U), B), ingot_unsqueeze(sinv, -1));
    X = ingot_matmul(adjoint(Vh), UhB);
    rank = ingot_sum(keep, LAST1, 1, false);
  }
  ingot_tensor *res = X ? col_sq_norms(ingot_sub(ingot_matmul(A, X), B)) : NULL;
  ingot_status st = res ? ingot_copy_(a->out[0], X) : ingot_last_status();
  if (!st) st = ingot_copy_(a->out[1], rank);
  if (!st && S) st = ingot_copy_(a->out[2], S);
  if (!st) st = ingot_copy_(a->out[3], res);
  ingot_scope_end();
  return st;
}
