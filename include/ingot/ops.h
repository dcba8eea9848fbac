/* Tensor operations: elementwise, reductions, matrix products, shape and
 * index ops, sorting. Every op returns a new tensor (owned reference) on the
 * inputs' device; inputs of one op must share a device. Binary ops broadcast
 * and promote dtypes as PyTorch does (0-dim tensors and scalars take part
 * only when their category is higher). */
#ifndef INGOT_OPS_H
#define INGOT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- unary (floating results for integer inputs where PyTorch gives them) ---- */
ingot_tensor *ingot_neg(const ingot_tensor *t);
ingot_tensor *ingot_abs(const ingot_tensor *t);
ingot_tensor *ingot_sign(const ingot_tensor *t);
ingot_tensor *ingot_exp(const ingot_tensor *t);
ingot_tensor *ingot_exp2(const ingot_tensor *t);
ingot_tensor *ingot_log(const ingot_tensor *t);
ingot_tensor *ingot_log2(const ingot_tensor *t);
ingot_tensor *ingot_log1p(const ingot_tensor *t);
ingot_tensor *ingot_expm1(const ingot_tensor *t);
ingot_tensor *ingot_sqrt(const ingot_tensor *t);
ingot_tensor *ingot_rsqrt(const ingot_tensor *t);
ingot_tensor *ingot_reciprocal(const ingot_tensor *t);
ingot_tensor *ingot_sin(const ingot_tensor *t);
ingot_tensor *ingot_cos(const ingot_tensor *t);
ingot_tensor *ingot_tan(const ingot_tensor *t);
ingot_tensor *ingot_tanh(const ingot_tensor *t);
ingot_tensor *ingot_sigmoid(const ingot_tensor *t);
ingot_tensor *ingot_silu(const ingot_tensor *t);
/* Exact gelu: x·Φ(x). */
ingot_tensor *ingot_gelu(const ingot_tensor *t);
/* Tanh approximation of gelu (PyTorch's approximate='tanh'). */
ingot_tensor *ingot_gelu_tanh(const ingot_tensor *t);
ingot_tensor *ingot_relu(const ingot_tensor *t);
ingot_tensor *ingot_erf(const ingot_tensor *t);
ingot_tensor *ingot_floor(const ingot_tensor *t);
ingot_tensor *ingot_ceil(const ingot_tensor *t);
/* Round half to even, as torch.round. */
ingot_tensor *ingot_round(const ingot_tensor *t);
ingot_tensor *ingot_trunc(const ingot_tensor *t);
/* Boolean results. */
ingot_tensor *ingot_isnan(const ingot_tensor *t);
ingot_tensor *ingot_isinf(const ingot_tensor *t);
ingot_tensor *ingot_isfinite(const ingot_tensor *t);
ingot_tensor *ingot_logical_not(const ingot_tensor *t);
/* Integers and bool only. */
ingot_tensor *ingot_bitwise_not(const ingot_tensor *t);

/* ---- binary, broadcasting ---- */
ingot_tensor *ingot_add(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_sub(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_mul(const ingot_tensor *a, const ingot_tensor *b);
/* True division: integer inputs give the default float dtype (float32). */
ingot_tensor *ingot_div(const ingot_tensor *a, const ingot_tensor *b);
/* Division rounded toward -inf (integer division by zero is an error). */
ingot_tensor *ingot_floor_divide(const ingot_tensor *a, const ingot_tensor *b);
/* Python-style remainder: the sign of the divisor. */
ingot_tensor *ingot_remainder(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_pow(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_atan2(const ingot_tensor *a, const ingot_tensor *b);
/* NaN-propagating elementwise max/min. */
ingot_tensor *ingot_maximum(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_minimum(const ingot_tensor *a, const ingot_tensor *b);
/* Comparisons give bool. */
ingot_tensor *ingot_eq(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_ne(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_lt(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_le(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_gt(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_ge(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_logical_and(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_logical_or(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_logical_xor(const ingot_tensor *a, const ingot_tensor *b);
/* Integers and bool only. */
ingot_tensor *ingot_bitwise_and(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_bitwise_or(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_bitwise_xor(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_left_shift(const ingot_tensor *a, const ingot_tensor *b);
ingot_tensor *ingot_right_shift(const ingot_tensor *a, const ingot_tensor *b);
/* Scalar right operands (a Python number: it does not widen a's dtype within
 * its category). */
ingot_tensor *ingot_add_scalar(const ingot_tensor *a, double b);
ingot_tensor *ingot_sub_scalar(const ingot_tensor *a, double b);
ingot_tensor *ingot_mul_scalar(const ingot_tensor *a, double b);
ingot_tensor *ingot_div_scalar(const ingot_tensor *a, double b);
ingot_tensor *ingot_pow_scalar(const ingot_tensor *a, double b);
/* cond ? a : b, broadcasting all three (cond is bool). */
ingot_tensor *ingot_where(const ingot_tensor *cond, const ingot_tensor *a, const ingot_tensor *b);
/* Clamp to [lo, hi]; pass -INFINITY / INFINITY for no bound. NaN stays NaN. */
ingot_tensor *ingot_clamp(const ingot_tensor *t, double lo, double hi);

/* ---- reductions: dims == NULL or ndims == 0 reduces every dim ---- */
/* Integer and bool inputs sum and multiply in int64. */
ingot_tensor *ingot_sum(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
ingot_tensor *ingot_mean(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
ingot_tensor *ingot_prod(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
/* Max / min values over dims (NaN propagates). */
ingot_tensor *ingot_amax(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
ingot_tensor *ingot_amin(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
/* Values and (if indices != NULL) int64 indices of the max / min along dim;
 * the first occurrence wins, NaN counts as the maximum. */
ingot_tensor *ingot_max_dim(const ingot_tensor *t, int dim, bool keepdim, ingot_tensor **indices);
ingot_tensor *ingot_min_dim(const ingot_tensor *t, int dim, bool keepdim, ingot_tensor **indices);
/* Index of the max / min along dim, or of the flattened tensor with
 * dim = INGOT_ALL_DIMS. */
ingot_tensor *ingot_argmax(const ingot_tensor *t, int dim, bool keepdim);
ingot_tensor *ingot_argmin(const ingot_tensor *t, int dim, bool keepdim);
/* Variance / standard deviation with a correction (1 = Bessel's). */
ingot_tensor *ingot_var(const ingot_tensor *t, const int *dims, int ndims, double correction,
                        bool keepdim);
ingot_tensor *ingot_std(const ingot_tensor *t, const int *dims, int ndims, double correction,
                        bool keepdim);
/* Vector p-norm over dims for p = 1, 2 or INFINITY (other p > 0 too). */
ingot_tensor *ingot_norm(const ingot_tensor *t, double p, const int *dims, int ndims,
                         bool keepdim);
ingot_tensor *ingot_logsumexp(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
/* Bool results. */
ingot_tensor *ingot_any(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
ingot_tensor *ingot_all(const ingot_tensor *t, const int *dims, int ndims, bool keepdim);
/* Inclusive scans along dim. */
ingot_tensor *ingot_cumsum(const ingot_tensor *t, int dim);
ingot_tensor *ingot_cumprod(const ingot_tensor *t, int dim);
ingot_tensor *ingot_softmax(const ingot_tensor *t, int dim);
ingot_tensor *ingot_log_softmax(const ingot_tensor *t, int dim);

/* ---- matrix products ---- */
/* torch.matmul: 1-D operands are promoted and the added dim removed; batch
 * dims broadcast. f16/bf16 accumulate in f32. */
ingot_tensor *ingot_matmul(const ingot_tensor *a, const ingot_tensor *b);
/* Batched product of [B,n,k] and [B,k,m]. */
ingot_tensor *ingot_bmm(const ingot_tensor *a, const ingot_tensor *b);
/* torch._scaled_mm: (a · b) * scale_a * scale_b (+ bias), accumulated in f32.
 * a [M,K] row-major and b [K,N] column-major, float8_e4m3fn or float8_e5m2
 * (not both e5m2); K and N multiples of 16. Scales are float32: tensorwise
 * (numel 1 each) or rowwise (scale_a [M,1], scale_b [1,N]). bias (or NULL)
 * is [N] of out_dtype; out_dtype is bfloat16, float16 or float32. */
ingot_tensor *ingot_scaled_mm(const ingot_tensor *a, const ingot_tensor *b,
                              const ingot_tensor *scale_a, const ingot_tensor *scale_b,
                              const ingot_tensor *bias, ingot_dtype out_dtype);
/* torch.backends.cuda.matmul.allow_tf32: float32 products may use TF32
 * tensor cores (off by default). */
void ingot_set_allow_tf32(bool allow);
bool ingot_get_allow_tf32(void);

/* ---- shape ---- */
ingot_tensor *ingot_cat(ingot_tensor *const *ts, int n, int dim);
ingot_tensor *ingot_stack(ingot_tensor *const *ts, int n, int dim);
ingot_tensor *ingot_flip(const ingot_tensor *t, const int *dims, int ndims);
/* Roll by shifts[i] along dims[i]; ndims == 0 rolls the flattened tensor
 * by shifts[0]. */
ingot_tensor *ingot_roll(const ingot_tensor *t, const int64_t *shifts, const int *dims,
                         int ndims);
/* Tile t repeats[i] times along each dim (nrep >= ndim). */
ingot_tensor *ingot_repeat(const ingot_tensor *t, const int64_t *repeats, int nrep);
/* Lower / upper triangle of the last two dims relative to diagonal k. */
ingot_tensor *ingot_tril(const ingot_tensor *t, int64_t k);
ingot_tensor *ingot_triu(const ingot_tensor *t, int64_t k);

/* ---- indexing (indices are int64 or int32; negative indices count from the
 * end where PyTorch allows them; out-of-range indices are an error) ---- */
ingot_tensor *ingot_index_select(const ingot_tensor *t, int dim, const ingot_tensor *index);
ingot_tensor *ingot_gather(const ingot_tensor *t, int dim, const ingot_tensor *index);
/* Copy of t with src written at index along dim (torch.scatter). */
ingot_tensor *ingot_scatter(const ingot_tensor *t, int dim, const ingot_tensor *index,
                            const ingot_tensor *src);
ingot_tensor *ingot_scatter_add(const ingot_tensor *t, int dim, const ingot_tensor *index,
                                const ingot_tensor *src);
/* Copy of t with t[indices[0], ..., indices[n-1]] = values (or += when
 * accumulate), indices broadcast together as in advanced indexing. */
ingot_tensor *ingot_index_put(const ingot_tensor *t, ingot_tensor *const *indices, int n,
                              const ingot_tensor *values, bool accumulate);
/* Copy of t with value where mask (bool, broadcast to t) is true. */
ingot_tensor *ingot_masked_fill(const ingot_tensor *t, const ingot_tensor *mask, double value);
/* 1-D tensor of the elements where mask is true. */
ingot_tensor *ingot_masked_select(const ingot_tensor *t, const ingot_tensor *mask);
/* [n, ndim] int64 coordinates of the non-zero elements, row-major order. */
ingot_tensor *ingot_nonzero(const ingot_tensor *t);
/* Rows of weight [V, D] picked by integer indices of any shape: [..., D]. */
ingot_tensor *ingot_embedding(const ingot_tensor *weight, const ingot_tensor *indices);

/* ---- sorting (NaN sorts as the largest value; sorts are stable) ---- */
/* k largest (or smallest) along dim; indices (int64) written if not NULL. */
ingot_tensor *ingot_topk(const ingot_tensor *t, int64_t k, int dim, bool largest, bool sorted,
                         ingot_tensor **indices);
ingot_tensor *ingot_sort(const ingot_tensor *t, int dim, bool descending, ingot_tensor **indices);
ingot_tensor *ingot_argsort(const ingot_tensor *t, int dim, bool descending);

#ifdef __cplusplus
}
#endif
#endif
