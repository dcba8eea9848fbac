/* Sorting fronts: sort, argsort, topk. Sorts are stable; NaN is the largest
 * value; -0.0 and 0.0 compare equal. Complex tensors cannot be sorted. */
#include <string.h>

#include "internal.h"

static bool sortable(const char *op, const ingot_tensor *t) {
  if (ingot_dtype_is_complex(t->dtype)) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s(): not supported for complex dtype %s", op,
                    ingot_dtype_name(t->dtype));
    return false;
  }
  return true;
}

/* Dispatch a with out[0] = values (t's dtype) and out[1] = int64 indices of
 * shape; hands back the outputs the caller asked for. */
static ingot_tensor *run_pair(ingot_op_args *a, const ingot_tensor *t, const int64_t *shape,
                              ingot_tensor **indices, bool want_values) {
  a->nin = 1;
  a->nout = 2;
  a->in[0] = (ingot_tensor *)t;
  a->out[0] = tensor_new(t->ndim, shape, t->dtype, t->device);
  a->out[1] = a->out[0] ? tensor_new(t->ndim, shape, INGOT_I64, t->device) : NULL;
  if (!a->out[1] || dispatch(a) != INGOT_OK) {
    ingot_release(a->out[0]);
    ingot_release(a->out[1]);
    return NULL;
  }
  if (!want_values) {
    ingot_release(a->out[0]);
    return a->out[1];
  }
  if (indices) *indices = a->out[1];
  else ingot_release(a->out[1]);
  return a->out[0];
}

/* SORT: in[0] = t (any strides, real dtype), iarg[0] = dim, iarg[1] =
 * descending; out[0] = sorted values (t's shape and dtype), out[1] = int64
 * positions along dim of those values in t. Stable in both directions
 * (equal values keep their order); NaN counts as the largest value. A 0-dim
 * t is one row of one element. */
ingot_tensor *ingot_sort(const ingot_tensor *t, int dim, bool descending, ingot_tensor **indices) {
  if (indices) *indices = NULL;
  if (!check_tensors("sort", 1, &t) || !sortable("sort", t)) return NULL;
  int d = normalize_dim("sort", dim, t->ndim);
  if (d < 0) return NULL;
  ingot_op_args a = {.op = INGOT_OP_SORT};
  a.iarg[0] = d;
  a.iarg[1] = descending;
  return run_pair(&a, t, t->shape, indices, true);
}

ingot_tensor *ingot_argsort(const ingot_tensor *t, int dim, bool descending) {
  if (!check_tensors("argsort", 1, &t) || !sortable("argsort", t)) return NULL;
  int d = normalize_dim("argsort", dim, t->ndim);
  if (d < 0) return NULL;
  ingot_op_args a = {.op = INGOT_OP_SORT};
  a.iarg[0] = d;
  a.iarg[1] = descending;
  return run_pair(&a, t, t->shape, NULL, false);
}

/* TOPK: in[0] = t (any strides, real dtype), iarg[0] = dim, iarg[1] = k
 * (0 <= k <= size), iarg[2] = largest, iarg[3] = sorted; out[0] = values,
 * out[1] = int64 positions, t's shape with k at dim. The k largest (or
 * smallest) elements of each row; ties go to the lower position; NaN is the
 * largest. The CPU kernel always returns them ordered (best first), which
 * also satisfies sorted = false. */
ingot_tensor *ingot_topk(const ingot_tensor *t, int64_t k, int dim, bool largest, bool sorted,
                         ingot_tensor **indices) {
  if (indices) *indices = NULL;
  if (!check_tensors("topk", 1, &t) || !sortable("topk", t)) return NULL;
  int d = normalize_dim("topk", dim, t->ndim);
  if (d < 0) return NULL;
  int64_t size = t->ndim ? t->shape[d] : 1;
  if (k < 0 || k > size || (t->ndim == 0 && k != 1))
    return ingot_fail(INGOT_ERR_INDEX, "topk(): selected index k (%lld) out of range for "
                      "dimension %d of size %lld", (long long)k, d, (long long)size);
  int64_t shape[INGOT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  if (t->ndim) shape[d] = k;
  ingot_op_args a = {.op = INGOT_OP_TOPK};
  a.iarg[0] = d;
  a.iarg[1] = k;
  a.iarg[2] = largest;
  a.iarg[3] = sorted;
  return run_pair(&a, t, shape, indices, true);
}
