/* Reductions (sum ... all), scans (cumsum, cumprod) and softmax fronts.
 *
 * Reduction kernel contract (SUM MEAN PROD AMAX AMIN MAX_DIM MIN_DIM ARGMAX
 * ARGMIN VAR STD NORM LOGSUMEXP ANY ALL):
 *   in[0]   the input, any strides, its original dtype (never cast by core);
 *   out[0]  contiguous, the output dtype below; its elements enumerate the
 *           kept dims of in[0] in row-major order (keepdim only adds size-1
 *           dims, which does not change that order);
 *   dims    bitmask of the reduced dims of in[0] (0 for a 0-dim input: one
 *           element is "reduced");
 *   farg[0] VAR/STD: the correction; NORM: p.
 * MAX_DIM/MIN_DIM: out[0] values (input dtype), out[1] int64 indices or absent
 * (nout = 1). ARGMAX/ARGMIN: out[0] int64 index; the index is the row-major
 * position within the reduced dims (the flat index when all are reduced). The
 * first occurrence wins and NaN counts as the extreme (its first index wins).
 * Core rejects empty reductions for the max/min family and for norm p=±inf. */
#include <math.h>

#include "internal.h"

/* Real dtype of a complex one (and the dtype itself otherwise). */
static ingot_dtype real_of(ingot_dtype dt) {
  return dt == INGOT_C64 ? INGOT_F32 : dt == INGOT_C128 ? INGOT_F64 : dt;
}

static bool is_inexact(ingot_dtype dt) {
  return ingot_dtype_is_floating(dt) || ingot_dtype_is_complex(dt);
}

/* Set an error and return INVALID (for dtype-returning helpers). */
#define dtype_fail(...) (ingot_set_error(__VA_ARGS__), INGOT_DTYPE_INVALID)

/* Output dtype of reduction op on dt, or INVALID + error. */
static ingot_dtype reduce_dtype(const char *name, ingot_op op, ingot_dtype dt) {
  switch (op) {
    case INGOT_OP_SUM:
    case INGOT_OP_PROD:
      return is_inexact(dt) ? dt : INGOT_I64;
    case INGOT_OP_MEAN:
      if (is_inexact(dt)) return dt;
      return dtype_fail(INGOT_ERR_DTYPE,
                        "mean(): could not infer output dtype. Input dtype must be either a "
                        "floating point or complex dtype. Got: %s",
                        ingot_dtype_name(dt));
    case INGOT_OP_VAR:
    case INGOT_OP_STD:
      if (is_inexact(dt)) return real_of(dt);
      return dtype_fail(INGOT_ERR_DTYPE,
                        "%s: only supports floating point and complex dtypes, got %s", name,
                        ingot_dtype_name(dt));
    case INGOT_OP_NORM:
      if (is_inexact(dt)) return real_of(dt);
      return dtype_fail(INGOT_ERR_DTYPE,
                        "norm(): input dtype should be either floating point or complex. Got %s "
                        "instead.",
                        ingot_dtype_name(dt));
    case INGOT_OP_LOGSUMEXP:
      if (ingot_dtype_is_complex(dt))
        return dtype_fail(INGOT_ERR_DTYPE, "logsumexp(): not implemented for '%s'",
                          ingot_dtype_name(dt));
      return ingot_dtype_is_floating(dt) ? dt : INGOT_F32;
    case INGOT_OP_ANY:
    case INGOT_OP_ALL:
      return INGOT_BOOL;
    default: /* max / min family */
      if (ingot_dtype_is_complex(dt))
        return dtype_fail(INGOT_ERR_DTYPE, "%s(): not implemented for '%s'", name,
                          ingot_dtype_name(dt));
      return dt;
  }
}

/* Fresh contiguous output of reducing the dims in mask of t. */
static ingot_tensor *new_reduced(const ingot_tensor *t, uint32_t mask, bool keepdim,
                                 ingot_dtype dt) {
  int64_t shape[INGOT_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (!(mask & (1u << d)))
      shape[n++] = t->shape[d];
    else if (keepdim)
      shape[n++] = 1;
  }
  return tensor_new(n, shape, dt, t->device);
}

static int64_t reduced_numel(const ingot_tensor *t, uint32_t mask) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (mask & (1u << d)) n *= t->shape[d];
  return n;
}

static bool check_nonempty(const char *name, const ingot_tensor *t, uint32_t mask) {
  if (reduced_numel(t, mask) != 0) return true;
  ingot_set_error(INGOT_ERR_SHAPE,
                  "%s(): Expected reduction dim to be specified for input.numel() == 0. "
                  "Specify the reduction dim with the 'dim' argument (reduced dims have size 0)",
                  name);
  return false;
}

/* Shared body of the dims-list reductions. */
static ingot_tensor *reduce_front(const char *name, ingot_op op, const ingot_tensor *t,
                                  const int *dims, int ndims, bool keepdim, double f0) {
  if (!check_tensors(name, 1, &t)) return NULL;
  uint32_t mask;
  if (!dims_mask(name, dims, ndims, t->ndim, &mask)) return NULL;
  ingot_dtype dt = reduce_dtype(name, op, t->dtype);
  if (dt == INGOT_DTYPE_INVALID) return NULL;
  bool needs_items =
      op == INGOT_OP_AMAX || op == INGOT_OP_AMIN || (op == INGOT_OP_NORM && isinf(f0));
  if (needs_items && !check_nonempty(name, t, mask)) return NULL;
  ingot_tensor *out = new_reduced(t, mask, keepdim, dt);
  if (!out) return NULL;
  ingot_op_args a = {.op = op, .nin = 1, .nout = 1, .dims = mask, .farg = {f0}};
  a.in[0] = (ingot_tensor *)t;
  a.out[0] = out;
  return dispatch_out(&a);
}

/* SUM/PROD: out int64 for bool/int inputs, else the input dtype (f16/bf16
 * accumulate at least in float32). MEAN: float/complex only; empty -> nan. */
ingot_tensor *ingot_sum(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("sum", INGOT_OP_SUM, t, dims, ndims, keepdim, 0);
}

ingot_tensor *ingot_mean(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("mean", INGOT_OP_MEAN, t, dims, ndims, keepdim, 0);
}

ingot_tensor *ingot_prod(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("prod", INGOT_OP_PROD, t, dims, ndims, keepdim, 0);
}

/* AMAX/AMIN: out in the input dtype (not complex); NaN propagates. */
ingot_tensor *ingot_amax(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("amax", INGOT_OP_AMAX, t, dims, ndims, keepdim, 0);
}

ingot_tensor *ingot_amin(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("amin", INGOT_OP_AMIN, t, dims, ndims, keepdim, 0);
}

/* VAR/STD: farg[0] = correction; divisor max(0, N - correction); out is the
 * real dtype (complex variance is E|z - mean|^2). */
ingot_tensor *ingot_var(const ingot_tensor *t, const int *dims, int ndims, double correction,
                        bool keepdim) {
  return reduce_front("var", INGOT_OP_VAR, t, dims, ndims, keepdim, correction);
}

ingot_tensor *ingot_std(const ingot_tensor *t, const int *dims, int ndims, double correction,
                        bool keepdim) {
  return reduce_front("std", INGOT_OP_STD, t, dims, ndims, keepdim, correction);
}

/* NORM: farg[0] = p: 0 counts nonzeros, 1, 2, ±INFINITY (max/min |x|), any
 * other p as (sum |x|^p)^(1/p). Float/complex input, real output. */
ingot_tensor *ingot_norm(const ingot_tensor *t, double p, const int *dims, int ndims,
                         bool keepdim) {
  if (isnan(p)) return ingot_fail(INGOT_ERR_ARG, "norm(): p must not be nan");
  return reduce_front("norm", INGOT_OP_NORM, t, dims, ndims, keepdim, p);
}

/* LOGSUMEXP: max-shifted; bool/int input gives float32. */
ingot_tensor *ingot_logsumexp(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("logsumexp", INGOT_OP_LOGSUMEXP, t, dims, ndims, keepdim, 0);
}

/* ANY/ALL: bool out; any input dtype, an element is true when nonzero (NaN is). */
ingot_tensor *ingot_any(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("any", INGOT_OP_ANY, t, dims, ndims, keepdim, 0);
}

ingot_tensor *ingot_all(const ingot_tensor *t, const int *dims, int ndims, bool keepdim) {
  return reduce_front("all", INGOT_OP_ALL, t, dims, ndims, keepdim, 0);
}

/* MAX_DIM/MIN_DIM: see the contract at the top (out[1] = indices). */
static ingot_tensor *minmax_dim(const char *name, ingot_op op, const ingot_tensor *t, int dim,
                                bool keepdim, ingot_tensor **indices) {
  if (indices) *indices = NULL;
  if (!check_tensors(name, 1, &t)) return NULL;
  int d = normalize_dim(name, dim, t->ndim);
  if (d < 0) return NULL;
  uint32_t mask = t->ndim ? 1u << d : 0;
  if (reduce_dtype(name, op, t->dtype) == INGOT_DTYPE_INVALID) return NULL;
  if (!check_nonempty(name, t, mask)) return NULL;
  ingot_tensor *vals = new_reduced(t, mask, keepdim, t->dtype);
  ingot_tensor *idx = indices ? new_reduced(t, mask, keepdim, INGOT_I64) : NULL;
  if (!vals || (indices && !idx)) {
    ingot_release(vals);
    ingot_release(idx);
    return NULL;
  }
  ingot_op_args a = {.op = op, .nin = 1, .nout = indices ? 2 : 1, .dims = mask};
  a.in[0] = (ingot_tensor *)t;
  a.out[0] = vals;
  a.out[1] = idx;
  if (dispatch(&a) != INGOT_OK) {
    ingot_release(vals);
    ingot_release(idx);
    return NULL;
  }
  if (indices) *indices = idx;
  return vals;
}

ingot_tensor *ingot_max_dim(const ingot_tensor *t, int dim, bool keepdim, ingot_tensor **indices) {
  return minmax_dim("max", INGOT_OP_MAX_DIM, t, dim, keepdim, indices);
}

ingot_tensor *ingot_min_dim(const ingot_tensor *t, int dim, bool keepdim, ingot_tensor **indices) {
  return minmax_dim("min", INGOT_OP_MIN_DIM, t, dim, keepdim, indices);
}

/* ARGMAX/ARGMIN: out[0] int64; dim = INGOT_ALL_DIMS reduces every dim (with
 * keepdim every dim becomes size 1). */
static ingot_tensor *arg_front(const char *name, ingot_op op, const ingot_tensor *t, int dim,
                               bool keepdim) {
  if (!check_tensors(name, 1, &t)) return NULL;
  uint32_t mask;
  if (dim == INGOT_ALL_DIMS) {
    mask = t->ndim ? (uint32_t)((1u << t->ndim) - 1) : 0;
  } else {
    int d = normalize_dim(name, dim, t->ndim);
    if (d < 0) return NULL;
    mask = t->ndim ? 1u << d : 0;
  }
  if (reduce_dtype(name, op, t->dtype) == INGOT_DTYPE_INVALID) return NULL;
  if (!check_nonempty(name, t, mask)) return NULL;
  ingot_tensor *out = new_reduced(t, mask, keepdim, INGOT_I64);
  if (!out) return NULL;
  ingot_op_args a = {.op = op, .nin = 1, .nout = 1, .dims = mask};
  a.in[0] = (ingot_tensor *)t;
  a.out[0] = out;
  return dispatch_out(&a);
}

ingot_tensor *ingot_argmax(const ingot_tensor *t, int dim, bool keepdim) {
  return arg_front("argmax", INGOT_OP_ARGMAX, t, dim, keepdim);
}

ingot_tensor *ingot_argmin(const ingot_tensor *t, int dim, bool keepdim) {
  return arg_front("argmin", INGOT_OP_ARGMIN, t, dim, keepdim);
}

/* CUMSUM/CUMPROD: in[0] any strides, original dtype; out[0] contiguous, same
 * shape, int64 for bool/int inputs else the input dtype; iarg[0] = dim
 * (0 for a 0-dim input). f16/bf16 accumulate in float32, float32 in double;
 * every output is rounded from the running value. */
static ingot_tensor *scan_front(const char *name, ingot_op op, const ingot_tensor *t, int dim) {
  if (!check_tensors(name, 1, &t)) return NULL;
  int d = normalize_dim(name, dim, t->ndim);
  if (d < 0) return NULL;
  ingot_dtype dt = is_inexact(t->dtype) ? t->dtype : INGOT_I64;
  ingot_tensor *out = tensor_new(t->ndim, t->shape, dt, t->device);
  if (!out) return NULL;
  ingot_op_args a = {.op = op, .nin = 1, .nout = 1, .iarg = {d}};
  a.in[0] = (ingot_tensor *)t;
  a.out[0] = out;
  return dispatch_out(&a);
}

ingot_tensor *ingot_cumsum(const ingot_tensor *t, int dim) {
  return scan_front("cumsum", INGOT_OP_CUMSUM, t, dim);
}

ingot_tensor *ingot_cumprod(const ingot_tensor *t, int dim) {
  return scan_front("cumprod", INGOT_OP_CUMPROD, t, dim);
}

/* SOFTMAX/LOG_SOFTMAX: in[0] any strides, a floating dtype; out[0] contiguous,
 * same shape and dtype; iarg[0] = dim (0 for a 0-dim input). Max-shifted;
 * f16/bf16 compute in float32; a row of all -inf gives nan. */
static ingot_tensor *softmax_front(const char *name, ingot_op op, const ingot_tensor *t, int dim) {
  if (!check_tensors(name, 1, &t)) return NULL;
  int d = normalize_dim(name, dim, t->ndim);
  if (d < 0) return NULL;
  if (!ingot_dtype_is_floating(t->dtype))
    return ingot_fail(INGOT_ERR_DTYPE, "%s: not implemented for '%s' (floating dtypes only)", name,
                      ingot_dtype_name(t->dtype));
  ingot_tensor *out = tensor_new(t->ndim, t->shape, t->dtype, t->device);
  if (!out) return NULL;
  ingot_op_args a = {.op = op, .nin = 1, .nout = 1, .iarg = {d}};
  a.in[0] = (ingot_tensor *)t;
  a.out[0] = out;
  return dispatch_out(&a);
}

ingot_tensor *ingot_softmax(const ingot_tensor *t, int dim) {
  return softmax_front("softmax", INGOT_OP_SOFTMAX, t, dim);
}

ingot_tensor *ingot_log_softmax(const ingot_tensor *t, int dim) {
  return softmax_front("log_softmax", INGOT_OP_LOG_SOFTMAX, t, dim);
}
