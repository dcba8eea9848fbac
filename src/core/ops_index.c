/* Indexing fronts: index_select, gather, scatter(_add), index_put,
 * masked_fill, masked_select, nonzero, embedding. Every index tensor reaches
 * a kernel as a contiguous int64 tensor; index range checks are the kernel's
 * (they read the data), and a kernel reports a bad index before it writes. */
#include <string.h>

#include "internal.h"

ingot_tensor *as_index(const char *op, const ingot_tensor *idx) {
  if (idx->dtype != INGOT_I64 && idx->dtype != INGOT_I32)
    return ingot_fail(INGOT_ERR_DTYPE, "%s(): Expected dtype int64 or int32 for index, got %s", op,
                      ingot_dtype_name(idx->dtype));
  return idx->dtype == INGOT_I64 ? ingot_contiguous(idx) : ingot_cast(idx, INGOT_I64);
}

static int64_t dim_size(const ingot_tensor *t, int d) { return t->ndim ? t->shape[d] : 1; }

/* Run a with out[0] = fresh tensor of the given geometry, then release the
 * temporaries tmp[0..ntmp). */
static ingot_tensor *run_new(ingot_op_args *a, int ndim, const int64_t *shape, ingot_dtype dt,
                             ingot_device dev, ingot_tensor **tmp, int ntmp) {
  ingot_tensor *r = NULL;
  a->out[0] = tensor_new(ndim, shape, dt, dev);
  if (a->out[0]) r = dispatch_out(a);
  for (int i = 0; i < ntmp; i++) ingot_release(tmp[i]);
  return r;
}

/* INDEX_SELECT: in[0] = t (any strides), in[1] = index (int64, contiguous,
 * numel n), iarg[0] = dim; out[0] = t's shape with size n at dim (0-dim t:
 * 0-dim out, n == 1). Indices outside [0, size) fail with INGOT_ERR_INDEX. */
ingot_tensor *ingot_index_select(const ingot_tensor *t, int dim, const ingot_tensor *index) {
  const ingot_tensor *ts[2] = {t, index};
  if (!check_tensors("index_select", 2, ts)) return NULL;
  int d = normalize_dim("index_select", dim, t->ndim);
  if (d < 0) return NULL;
  if (index->ndim > 1)
    return ingot_fail(INGOT_ERR_SHAPE, "index_select(): Index is supposed to be a vector");
  int64_t n = ingot_numel(index);
  if (t->ndim == 0 && n != 1)
    return ingot_fail(INGOT_ERR_INDEX,
                      "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
                      (long long)n);
  ingot_tensor *idx = as_index("index_select", index);
  if (!idx) return NULL;
  int64_t shape[INGOT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  if (t->ndim) shape[d] = n;
  ingot_op_args a = {.op = INGOT_OP_INDEX_SELECT, .nin = 2, .nout = 1};
  a.in[0] = (ingot_tensor *)t;
  a.in[1] = idx;
  a.iarg[0] = d;
  return run_new(&a, t->ndim, shape, t->dtype, t->device, &idx, 1);
}

/* Checks shared by gather and scatter: same ndim, index no larger than t
 * (except along dim) and than src (every dim). */
static bool check_index_shape(const char *op, const ingot_tensor *t, int d,
                              const ingot_tensor *index, const ingot_tensor *src) {
  int ni = index->ndim ? index->ndim : 1, nt = t->ndim ? t->ndim : 1;
  if (ni != nt || (src && (src->ndim ? src->ndim : 1) != ni)) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s(): Index tensor must have the same number of dimensions "
                    "as %s tensor", op, src && (src->ndim ? src->ndim : 1) != ni ? "src" : "self");
    return false;
  }
  for (int i = 0; i < index->ndim; i++) {
    if (i != d && index->shape[i] > dim_size(t, i)) {
      ingot_set_error(INGOT_ERR_SHAPE, "%s(): Size does not match at dimension %d expected index "
                      "[%lld] to be smaller than self [%lld] apart from dimension %d", op, i,
                      (long long)index->shape[i], (long long)dim_size(t, i), d);
      return false;
    }
    if (src && index->shape[i] > dim_size(src, i)) {
      ingot_set_error(INGOT_ERR_SHAPE, "%s(): Expected index [%lld] to be smaller than src "
                      "[%lld] at dimension %d", op, (long long)index->shape[i],
                      (long long)dim_size(src, i), i);
      return false;
    }
  }
  return true;
}

/* GATHER: in[0] = t, in[1] = index (int64, contiguous, t's ndim, each size
 * <= t's except at dim), iarg[0] = dim; out[0] = index's shape, t's dtype:
 * out[i...] = t[i with i_dim = index[i...]]. */
ingot_tensor *ingot_gather(const ingot_tensor *t, int dim, const ingot_tensor *index) {
  const ingot_tensor *ts[2] = {t, index};
  if (!check_tensors("gather", 2, ts)) return NULL;
  int d = normalize_dim("gather", dim, t->ndim);
  if (d < 0 || !check_index_shape("gather", t, d, index, NULL)) return NULL;
  ingot_tensor *idx = as_index("gather", index);
  if (!idx) return NULL;
  ingot_op_args a = {.op = INGOT_OP_GATHER, .nin = 2, .nout = 1};
  a.in[0] = (ingot_tensor *)t;
  a.in[1] = idx;
  a.iarg[0] = d;
  return run_new(&a, index->ndim, index->shape, t->dtype, t->device, &idx, 1);
}

/* SCATTER / SCATTER_ADD: out[0] = contiguous copy of in[0] = t (pre-filled by
 * core), in[1] = index (int64, contiguous, t's ndim), in[2] = src (t's dtype,
 * any strides, each size >= index's), iarg[0] = dim. For every position i of
 * index: out[i with i_dim = index[i]] = (or +=) src[i]. scatter_add adds in
 * index order along dim (deterministic); scatter's duplicates: last wins. */
static ingot_tensor *scatter_common(const char *op, ingot_op kind, const ingot_tensor *t, int dim,
                                    const ingot_tensor *index, const ingot_tensor *src) {
  const ingot_tensor *ts[3] = {t, index, src};
  if (!check_tensors(op, 3, ts)) return NULL;
  int d = normalize_dim(op, dim, t->ndim);
  if (d < 0) return NULL;
  if (src->dtype != t->dtype)
    return ingot_fail(INGOT_ERR_DTYPE, "%s(): Expected self.dtype to be equal to src.dtype (%s "
                      "vs %s)", op, ingot_dtype_name(t->dtype), ingot_dtype_name(src->dtype));
  if (!check_index_shape(op, t, d, index, src)) return NULL;
  ingot_tensor *idx = as_index(op, index);
  if (!idx) return NULL;
  ingot_tensor *out = ingot_clone(t);
  if (!out) {
    ingot_release(idx);
    return NULL;
  }
  ingot_op_args a = {.op = kind, .nin = 3, .nout = 1};
  a.in[0] = (ingot_tensor *)t;
  a.in[1] = idx;
  a.in[2] = (ingot_tensor *)src;
  a.out[0] = out;
  a.iarg[0] = d;
  ingot_tensor *r = dispatch_out(&a);
  ingot_release(idx);
  return r;
}

ingot_tensor *ingot_scatter(const ingot_tensor *t, int dim, const ingot_tensor *index,
                            const ingot_tensor *src) {
  return scatter_common("scatter", INGOT_OP_SCATTER, t, dim, index, src);
}

ingot_tensor *ingot_scatter_add(const ingot_tensor *t, int dim, const ingot_tensor *index,
                                const ingot_tensor *src) {
  return scatter_common("scatter_add", INGOT_OP_SCATTER_ADD, t, dim, index, src);
}

/* Index tensors of a bool mask: the columns of nonzero(mask). */
static int mask_to_indices(const ingot_tensor *t, const ingot_tensor *mask, ingot_tensor **cols) {
  if (mask->ndim == 0 || mask->ndim > t->ndim) {
    ingot_set_error(INGOT_ERR_INDEX, "index_put: a bool mask needs 1 to %d dims, got %d", t->ndim,
                    mask->ndim);
    return -1;
  }
  for (int i = 0; i < mask->ndim; i++) {
    if (mask->shape[i] != t->shape[i]) {
      ingot_set_error(INGOT_ERR_INDEX, "The shape of the mask [%lld] at index %d does not match "
                      "the shape of the indexed tensor [%lld] at index %d",
                      (long long)mask->shape[i], i, (long long)t->shape[i], i);
      return -1;
    }
  }
  ingot_tensor *nz = ingot_nonzero(mask);
  if (!nz) return -1;
  int n = 0;
  for (; n < mask->ndim; n++)
    if (!(cols[n] = ingot_select(nz, 1, n))) break;
  ingot_release(nz);
  if (n < mask->ndim) {
    while (n > 0) ingot_release(cols[--n]);
    return -1;
  }
  return n;
}

/* INDEX_PUT: out[0] = contiguous copy of in[0] = t (pre-filled by core),
 * in[1] = values [NB, R] (t's dtype, any strides), in[2] = indices int64
 * contiguous [n, NB] (the n index tensors broadcast together and flattened),
 * iarg[0] = n, iarg[1] = accumulate. R = numel of t.shape[n:]. Index values
 * may be negative (counted from the end); outside [-size, size) fails.
 * For each k < NB, row (idx[0][k], ..., idx[n-1][k]) of out is set to (or,
 * accumulating, increased by: duplicates add up, in k order) values[k]. */
ingot_tensor *ingot_index_put(const ingot_tensor *t, ingot_tensor *const *indices, int n,
                              const ingot_tensor *values, bool accumulate) {
  const ingot_tensor *ts[2] = {t, values};
  if (!check_tensors("index_put", 2, ts)) return NULL;
  if (n < 1 || !indices) return ingot_fail(INGOT_ERR_ARG, "index_put: expected at least 1 index");
  if (!check_tensors("index_put", n, (const ingot_tensor *const *)indices)) return NULL;
  for (int i = 0; i < n; i++)
    if (!ingot_device_equal(indices[i]->device, t->device))
      return ingot_fail(INGOT_ERR_DEVICE, "index_put: indices must be on the tensor's device");
  if (values->dtype != t->dtype)
    return ingot_fail(INGOT_ERR_DTYPE, "index_put: Index put requires the source and destination dtypes "
                      "match, got %s for the destination and %s for the source.",
                      ingot_dtype_name(t->dtype), ingot_dtype_name(values->dtype));
  ingot_tensor *cols[INGOT_MAX_DIMS];
  ingot_tensor *const *ix = indices;
  int ncols = 0;
  if (n == 1 && (indices[0]->dtype == INGOT_BOOL || indices[0]->dtype == INGOT_U8)) {
    if ((ncols = mask_to_indices(t, indices[0], cols)) < 0) return NULL;
    ix = cols;
    n = ncols;
  } else {
    for (int i = 0; i < n; i++)
      if (indices[i]->dtype != INGOT_I64 && indices[i]->dtype != INGOT_I32)
        return ingot_fail(INGOT_ERR_DTYPE, "index_put: tensors used as indices must be int64, "
                          "int32 or a single bool mask, got %s",
                          ingot_dtype_name(indices[i]->dtype));
  }
  ingot_tensor *idx = NULL, *vexp = NULL, *v2 = NULL, *out = NULL, *r = NULL;
  int bn = 0;
  int64_t bshape[INGOT_MAX_DIMS] = {0}, vshape[INGOT_MAX_DIMS];
  if (n > t->ndim) {
    ingot_set_error(INGOT_ERR_INDEX, "index_put: too many indices for tensor of dimension %d "
                    "(got %d)", t->ndim, n);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    int64_t prev[INGOT_MAX_DIMS];
    memcpy(prev, bshape, sizeof prev);
    if (!broadcast_shapes("index_put", bn, prev, ix[i]->ndim, ix[i]->shape, &bn, bshape))
      goto done;
  }
  int64_t nb = shape_numel(bn, bshape), rest = shape_numel(t->ndim - n, t->shape + n);
  int vn = bn + t->ndim - n;
  if (vn > INGOT_MAX_DIMS) {
    ingot_set_error(INGOT_ERR_SHAPE, "index_put: indexed shape has more than %d dims",
                    INGOT_MAX_DIMS);
    goto done;
  }
  memcpy(vshape, bshape, sizeof(int64_t) * bn);
  memcpy(vshape + bn, t->shape + n, sizeof(int64_t) * (t->ndim - n));
  if (values->ndim > vn) {
    ingot_set_error(INGOT_ERR_SHAPE, "shape mismatch: value tensor of %d dims cannot be "
                    "broadcast to indexing result of %d dims", values->ndim, vn);
    goto done;
  }
  if (!(vexp = ingot_expand(values, vn, vshape))) goto done;
  if (!(v2 = ingot_reshape(vexp, 2, (int64_t[]){nb, rest}))) goto done;
  if (!(idx = tensor_new(2, (int64_t[]){n, nb}, INGOT_I64, t->device))) goto done;
  for (int i = 0; i < n; i++) {
    int64_t st[INGOT_MAX_DIMS];
    contiguous_strides(bn, bshape, st);
    ingot_tensor *row = tensor_view(idx, bn, bshape, st, idx->offset + i * nb);
    ingot_status s = row ? ingot_copy_(row, ix[i]) : ingot_last_status();
    ingot_release(row);
    if (s != INGOT_OK) goto done;
  }
  if (!(out = ingot_clone(t))) goto done;
  ingot_op_args a = {.op = INGOT_OP_INDEX_PUT, .nin = 3, .nout = 1};
  a.in[0] = (ingot_tensor *)t;
  a.in[1] = v2;
  a.in[2] = idx;
  a.out[0] = out;
  a.iarg[0] = n;
  a.iarg[1] = accumulate;
  r = dispatch_out(&a);
done:
  ingot_release(idx);
  ingot_release(vexp);
  ingot_release(v2);
  for (int i = 0; i < ncols; i++) ingot_release(cols[i]);
  return r;
}

/* MASKED_FILL: in[0] = t, in[1] = mask (bool, expanded to t's shape, any
 * strides), farg[0] = value; out[0] = t's shape and dtype:
 * out = mask ? value (cast to t's dtype) : t. */
ingot_tensor *ingot_masked_fill(const ingot_tensor *t, const ingot_tensor *mask, double value) {
  const ingot_tensor *ts[2] = {t, mask};
  if (!check_tensors("masked_fill", 2, ts)) return NULL;
  if (mask->dtype != INGOT_BOOL)
    return ingot_fail(INGOT_ERR_DTYPE, "masked_fill_ only supports boolean masks, but got mask "
                      "with dtype %s", ingot_dtype_name(mask->dtype));
  int bn;
  int64_t bs[INGOT_MAX_DIMS];
  if (!broadcast_shapes("masked_fill", t->ndim, t->shape, mask->ndim, mask->shape, &bn, bs))
    return NULL;
  if (bn != t->ndim || memcmp(bs, t->shape, sizeof(int64_t) * bn))
    return ingot_fail(INGOT_ERR_SHAPE, "masked_fill: mask of %d dims does not broadcast to the "
                      "tensor's shape", mask->ndim);
  ingot_tensor *m = ingot_expand(mask, t->ndim, t->shape);
  if (!m) return NULL;
  ingot_op_args a = {.op = INGOT_OP_MASKED_FILL, .nin = 2, .nout = 1};
  a.in[0] = (ingot_tensor *)t;
  a.in[1] = m;
  a.farg[0] = value;
  return run_new(&a, t->ndim, t->shape, t->dtype, t->device, &m, 1);
}

/* Run an op whose kernel allocates out[0] (data-dependent size). */
static ingot_tensor *run_alloc(ingot_op_args *a) {
  a->nout = 1;
  a->out[0] = NULL;
  if (dispatch(a) != INGOT_OK) {
    ingot_release(a->out[0]);
    return NULL;
  }
  return a->out[0];
}

/* MASKED_SELECT: in[0] = t, in[1] = mask (bool), both expanded to their
 * broadcast shape (any strides). The kernel allocates out[0]: 1-D, t's dtype,
 * the elements where mask is true in row-major order. */
ingot_tensor *ingot_masked_select(const ingot_tensor *t, const ingot_tensor *mask) {
  const ingot_tensor *ts[2] = {t, mask};
  if (!check_tensors("masked_select", 2, ts)) return NULL;
  if (mask->dtype != INGOT_BOOL)
    return ingot_fail(INGOT_ERR_DTYPE, "masked_select: expected BoolTensor for mask, got %s",
                      ingot_dtype_name(mask->dtype));
  int bn;
  int64_t bs[INGOT_MAX_DIMS];
  if (!broadcast_shapes("masked_select", t->ndim, t->shape, mask->ndim, mask->shape, &bn, bs))
    return NULL;
  ingot_tensor *te = ingot_expand(t, bn, bs), *me = ingot_expand(mask, bn, bs), *r = NULL;
  if (te && me) {
    ingot_op_args a = {.op = INGOT_OP_MASKED_SELECT, .nin = 2};
    a.in[0] = te;
    a.in[1] = me;
    r = run_alloc(&a);
  }
  ingot_release(te);
  ingot_release(me);
  return r;
}

/* NONZERO: in[0] = t (any dtype and strides). The kernel allocates out[0]:
 * [count, ndim] int64 coordinates of the non-zero elements (NaN counts) in
 * row-major order. */
ingot_tensor *ingot_nonzero(const ingot_tensor *t) {
  if (!check_tensors("nonzero", 1, &t)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_NONZERO, .nin = 1};
  a.in[0] = (ingot_tensor *)t;
  return run_alloc(&a);
}

/* EMBEDDING: in[0] = weight [V, D] (any strides), in[1] = indices (int64,
 * contiguous, any shape); out[0] = indices' shape + [D]. Indices outside
 * [0, V) fail with INGOT_ERR_INDEX. */
ingot_tensor *ingot_embedding(const ingot_tensor *weight, const ingot_tensor *indices) {
  const ingot_tensor *ts[2] = {weight, indices};
  if (!check_tensors("embedding", 2, ts)) return NULL;
  if (weight->ndim != 2)
    return ingot_fail(INGOT_ERR_SHAPE, "embedding: 'weight' must be 2-D, got %d dims",
                      weight->ndim);
  if (indices->ndim + 1 > INGOT_MAX_DIMS)
    return ingot_fail(INGOT_ERR_SHAPE, "embedding: indices have too many dims");
  ingot_tensor *idx = as_index("embedding", indices);
  if (!idx) return NULL;
  int64_t shape[INGOT_MAX_DIMS];
  memcpy(shape, indices->shape, sizeof(int64_t) * indices->ndim);
  shape[indices->ndim] = weight->shape[1];
  ingot_op_args a = {.op = INGOT_OP_EMBEDDING, .nin = 2, .nout = 1};
  a.in[0] = (ingot_tensor *)weight;
  a.in[1] = idx;
  return run_new(&a, indices->ndim + 1, shape, weight->dtype, weight->device, &idx, 1);
}
