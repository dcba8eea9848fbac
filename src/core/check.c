/* Argument checks shared by every op front: NULL propagation, devices,
 * dims, broadcasting and PyTorch's result_type. */
#include "internal.h"

bool check_tensors(const char *op, int n, const ingot_tensor *const *ts) {
  for (int i = 0; i < n; i++) {
    if (!ts[i]) {
      /* Keep the message of the failure that produced the NULL. */
      if (ingot_last_status() == INGOT_OK)
        ingot_set_error(INGOT_ERR_ARG, "%s: argument %d is NULL", op, i);
      return false;
    }
  }
  for (int i = 1; i < n; i++) {
    if (!ingot_device_equal(ts[i]->device, ts[0]->device)) {
      char a[32], b[32];
      ingot_set_error(INGOT_ERR_DEVICE,
                      "%s: expected all tensors on one device, found %s and %s (move them "
                      "with ingot_to)",
                      op, ingot_device_str(ts[0]->device, a, sizeof a),
                      ingot_device_str(ts[i]->device, b, sizeof b));
      return false;
    }
  }
  return true;
}

bool check_scratch(const char *op, const char *name, const ingot_tensor *t, ingot_dtype dt,
                   int64_t n, const char *why) {
  if (t->dtype == dt && t->ndim == 1 && t->shape[0] >= n && ingot_is_contiguous(t)) return true;
  ingot_set_error(INGOT_ERR_SHAPE, "%s: '%s' must be contiguous %s [>= %lld] (%s)", op, name,
                  ingot_dtype_name(dt), (long long)n, why);
  return false;
}

int normalize_dim(const char *op, int dim, int ndim) {
  int n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n) {
    ingot_set_error(INGOT_ERR_INDEX,
                    "%s: dimension out of range (expected to be in range of [%d, %d], but got %d)",
                    op, -n, n - 1, dim);
    return -1;
  }
  return dim < 0 ? dim + n : dim;
}

bool dims_mask(const char *op, const int *dims, int ndims, int tensor_ndim, uint32_t *mask) {
  *mask = 0;
  if (!dims || ndims == 0) {
    *mask = tensor_ndim ? (uint32_t)((1u << tensor_ndim) - 1) : 0;
    return true;
  }
  if (ndims < 0 || ndims > INGOT_MAX_DIMS) {
    ingot_set_error(INGOT_ERR_ARG, "%s: bad number of dims %d", op, ndims);
    return false;
  }
  for (int i = 0; i < ndims; i++) {
    int d = normalize_dim(op, dims[i], tensor_ndim);
    if (d < 0) return false;
    if (tensor_ndim == 0) continue;
    if (*mask & (1u << d)) {
      ingot_set_error(INGOT_ERR_ARG, "%s: dim %d appears multiple times in the list of dims", op, d);
      return false;
    }
    *mask |= 1u << d;
  }
  return true;
}

bool broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                      int *out_ndim, int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int64_t x = i < n - na ? 1 : a[i - (n - na)];
    int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
    if (x != y && x != 1 && y != 1) {
      ingot_set_error(INGOT_ERR_SHAPE,
                      "%s: the size of tensor a (%lld) must match the size of tensor b (%lld) at "
                      "non-singleton dimension %d",
                      op, (long long)x, (long long)y, i);
      return false;
    }
    out[i] = x == 1 ? y : x;
  }
  *out_ndim = n;
  return true;
}

/* c10's combine_categories: the higher tier wins unless the lower one is of a
 * higher category (bool < integral < floating < complex). */
static ingot_dtype combine(ingot_dtype higher, ingot_dtype lower) {
  if (higher == INGOT_DTYPE_INVALID) return lower;
  if (lower == INGOT_DTYPE_INVALID) return higher;
  if (ingot_dtype_is_complex(higher)) return higher;
  if (ingot_dtype_is_complex(lower)) {
    if (ingot_dtype_is_floating(higher))
      return higher == INGOT_F64 ? INGOT_C128 : INGOT_C64;
    return lower;
  }
  if (ingot_dtype_is_floating(higher)) return higher;
  if (higher == INGOT_BOOL || ingot_dtype_is_floating(lower))
    return ingot_promote_types(higher, lower);
  return higher;
}

ingot_dtype result_type(const char *op, int n, const ingot_tensor *const *ts) {
  ingot_dtype dim = INGOT_DTYPE_INVALID, zero = INGOT_DTYPE_INVALID,
              wrapped = INGOT_DTYPE_INVALID;
  for (int i = 0; i < n; i++) {
    const ingot_tensor *t = ts[i];
    ingot_dtype *slot = t->wrapped_number ? &wrapped : t->ndim == 0 ? &zero : &dim;
    ingot_dtype dt = t->dtype;
    /* A C double scalar counts as the default float dtype (float32). */
    if (t->wrapped_number && ingot_dtype_is_floating(dt)) dt = INGOT_F32;
    if (t->wrapped_number && ingot_dtype_is_complex(dt)) dt = INGOT_C64;
    if (*slot == INGOT_DTYPE_INVALID) {
      *slot = dt;
    } else {
      ingot_dtype p = ingot_promote_types(*slot, dt);
      if (p == INGOT_DTYPE_INVALID) {
        fail_in(op); /* promote_types set the message and status */
        return p;
      }
      *slot = p;
    }
  }
  ingot_dtype r = combine(dim, combine(zero, wrapped));
  /* float8 types never mix with other types, even as scalars */
  for (int i = 0; i < n; i++) {
    if (ts[i]->dtype != r && !ts[i]->wrapped_number &&
        (ts[i]->dtype >= INGOT_F8E4M3FN || r >= INGOT_F8E4M3FN)) {
      ingot_set_error(INGOT_ERR_DTYPE, "%s: promotion of %s with %s is not supported", op,
                      ingot_dtype_name(ts[i]->dtype), ingot_dtype_name(r));
      return INGOT_DTYPE_INVALID;
    }
  }
  return r;
}
