/* Views: new handles on the same storage with other sizes, strides and
 * offsets. Nothing here touches device memory except reshape's copy. */
#include <string.h>

#include "internal.h"

static bool one(const char *op, const ingot_tensor *t) {
  return check_tensors(op, 1, &t);
}

ingot_tensor *ingot_slice(const ingot_tensor *t, int dim, int64_t start, int64_t end,
                          int64_t step) {
  if (!one("slice", t)) return NULL;
  if ((dim = normalize_dim("slice", dim, t->ndim)) < 0) return NULL;
  if (t->ndim == 0) return ingot_fail(INGOT_ERR_INDEX, "slice: cannot slice a 0-dim tensor");
  if (step <= 0) return ingot_fail(INGOT_ERR_ARG, "slice: step must be positive, got %lld",
                                   (long long)step);
  int64_t n = t->shape[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = start < 0 ? 0 : start > n ? n : start;
  end = end < start ? start : end > n ? n : end;
  int64_t shape[INGOT_MAX_DIMS], strides[INGOT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(strides, t->strides, sizeof strides);
  /* A step past the end takes one element: clamp it so stride * step cannot overflow. */
  if (step > n) step = n > 0 ? n : 1;
  shape[dim] = end > start ? (end - start - 1) / step + 1 : 0;
  strides[dim] = t->strides[dim] * step;
  return tensor_view(t, t->ndim, shape, strides, t->offset + start * t->strides[dim]);
}

ingot_tensor *ingot_narrow(const ingot_tensor *t, int dim, int64_t start, int64_t length) {
  if (!one("narrow", t)) return NULL;
  if ((dim = normalize_dim("narrow", dim, t->ndim)) < 0) return NULL;
  if (t->ndim == 0) return ingot_fail(INGOT_ERR_INDEX, "narrow: cannot narrow a 0-dim tensor");
  int64_t n = t->shape[dim];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start > n || length > n - start)
    return ingot_fail(INGOT_ERR_INDEX, "narrow: start %lld + length %lld exceeds dimension size %lld",
                      (long long)start, (long long)length, (long long)n);
  return ingot_slice(t, dim, start, start + length, 1);
}

ingot_tensor *ingot_select(const ingot_tensor *t, int dim, int64_t index) {
  if (!one("select", t)) return NULL;
  if (t->ndim == 0) return ingot_fail(INGOT_ERR_INDEX, "select: cannot select from a 0-dim tensor");
  if ((dim = normalize_dim("select", dim, t->ndim)) < 0) return NULL;
  int64_t n = t->shape[dim];
  if (index < -n || index >= n)
    return ingot_fail(INGOT_ERR_INDEX, "select: index %lld out of range for dimension %d of size %lld",
                      (long long)index, dim, (long long)n);
  if (index < 0) index += n;
  int64_t shape[INGOT_MAX_DIMS], strides[INGOT_MAX_DIMS];
  for (int i = 0, j = 0; i < t->ndim; i++) {
    if (i == dim) continue;
    shape[j] = t->shape[i];
    strides[j++] = t->strides[i];
  }
  return tensor_view(t, t->ndim - 1, shape, strides, t->offset + index * t->strides[dim]);
}

ingot_tensor *ingot_permute(const ingot_tensor *t, const int *dims) {
  if (!one("permute", t)) return NULL;
  if (!dims && t->ndim) return ingot_fail(INGOT_ERR_ARG, "permute: dims is NULL");
  int64_t shape[INGOT_MAX_DIMS], strides[INGOT_MAX_DIMS];
  unsigned seen = 0;
  for (int i = 0; i < t->ndim; i++) {
    int d = normalize_dim("permute", dims[i], t->ndim);
    if (d < 0) return NULL;
    if (seen & (1u << d)) return ingot_fail(INGOT_ERR_ARG, "permute: repeated dim %d", d);
    seen |= 1u << d;
    shape[i] = t->shape[d];
    strides[i] = t->strides[d];
  }
  return tensor_view(t, t->ndim, shape, strides, t->offset);
}

ingot_tensor *ingot_transpose(const ingot_tensor *t, int dim0, int dim1) {
  if (!one("transpose", t)) return NULL;
  if (t->ndim == 0) return tensor_view(t, 0, NULL, NULL, t->offset);
  if ((dim0 = normalize_dim("transpose", dim0, t->ndim)) < 0) return NULL;
  if ((dim1 = normalize_dim("transpose", dim1, t->ndim)) < 0) return NULL;
  int perm[INGOT_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) perm[i] = i;
  perm[dim0] = dim1;
  perm[dim1] = dim0;
  return ingot_permute(t, perm);
}

ingot_tensor *ingot_expand(const ingot_tensor *t, int ndim, const int64_t *shape) {
  if (!one("expand", t)) return NULL;
  if (ndim < t->ndim || ndim > INGOT_MAX_DIMS || (ndim && !shape))
    return ingot_fail(INGOT_ERR_SHAPE, "expand: the number of sizes provided (%d) must be greater "
                      "or equal to the number of dimensions in the tensor (%d)", ndim, t->ndim);
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS];
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = shape[i];
    if (j < 0) {
      if (want < 0) return ingot_fail(INGOT_ERR_SHAPE, "expand: -1 is not allowed in a leading, "
                                      "non-existing dimension %d", i);
      sh[i] = want;
      st[i] = 0;
    } else if (want == -1 || want == t->shape[j]) {
      sh[i] = t->shape[j];
      st[i] = t->strides[j];
    } else if (t->shape[j] == 1 && want >= 0) {
      sh[i] = want;
      st[i] = 0;
    } else {
      return ingot_fail(INGOT_ERR_SHAPE, "expand: the expanded size of the tensor (%lld) must match "
                        "the existing size (%lld) at non-singleton dimension %d",
                        (long long)want, (long long)t->shape[j], i);
    }
  }
  return tensor_view(t, ndim, sh, st, t->offset);
}

ingot_tensor *ingot_squeeze(const ingot_tensor *t, int dim) {
  if (!one("squeeze", t)) return NULL;
  bool all = dim == INGOT_ALL_DIMS;
  if (!all && (dim = normalize_dim("squeeze", dim, t->ndim)) < 0) return NULL;
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 1 && (all || i == dim)) continue;
    sh[n] = t->shape[i];
    st[n++] = t->strides[i];
  }
  return tensor_view(t, n, sh, st, t->offset);
}

ingot_tensor *ingot_unsqueeze(const ingot_tensor *t, int dim) {
  if (!one("unsqueeze", t)) return NULL;
  if (t->ndim == INGOT_MAX_DIMS)
    return ingot_fail(INGOT_ERR_SHAPE, "unsqueeze: tensors have at most %d dims", INGOT_MAX_DIMS);
  if ((dim = normalize_dim("unsqueeze", dim, t->ndim + 1)) < 0) return NULL;
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS];
  for (int i = 0, j = 0; i <= t->ndim; i++) {
    if (i == dim) {
      sh[i] = 1;
      st[i] = dim < t->ndim ? t->shape[dim] * t->strides[dim] : 1;
      continue;
    }
    sh[i] = t->shape[j];
    st[i] = t->strides[j++];
  }
  return tensor_view(t, t->ndim + 1, sh, st, t->offset);
}

/* Resolve a -1 and check the element count; false + error on mismatch. */
static bool infer_shape(const char *op, const ingot_tensor *t, int ndim, const int64_t *shape,
                        int64_t *out) {
  if (ndim < 0 || ndim > INGOT_MAX_DIMS || (ndim && !shape)) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: bad number of dims %d", op, ndim);
    return false;
  }
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    out[i] = shape[i];
    if (shape[i] == -1) {
      if (infer >= 0) {
        ingot_set_error(INGOT_ERR_SHAPE, "%s: only one dimension can be inferred", op);
        return false;
      }
      infer = i;
    } else if (shape[i] < 0) {
      ingot_set_error(INGOT_ERR_SHAPE, "%s: invalid shape dimension %lld", op, (long long)shape[i]);
      return false;
    } else if (shape[i] && known > INT64_MAX / shape[i]) {
      ingot_set_error(INGOT_ERR_SHAPE, "%s: shape is too large", op);
      return false;
    } else {
      known *= shape[i];
    }
  }
  int64_t numel = ingot_numel(t);
  if (infer >= 0) {
    if (known == 0 || numel % known) {
      ingot_set_error(INGOT_ERR_SHAPE, "%s: shape is invalid for input of size %lld", op,
                      (long long)numel);
      return false;
    }
    out[infer] = numel / known;
  } else if (known != numel) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: shape is invalid for input of size %lld", op,
                    (long long)numel);
    return false;
  }
  return true;
}

/* Strides for viewing t with a new shape without copying (PyTorch's
 * computeStride); false when the layout does not allow it. */
static bool view_strides(const ingot_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  int64_t numel = ingot_numel(t);
  if (numel == 0 || t->ndim == 0) {
    contiguous_strides(ndim, shape, out);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = t->strides[t->ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    tensor_numel *= t->shape[d];
    if (d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = t->strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

ingot_tensor *ingot_view(const ingot_tensor *t, int ndim, const int64_t *shape) {
  if (!one("view", t)) return NULL;
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS];
  if (!infer_shape("view", t, ndim, shape, sh)) return NULL;
  if (!view_strides(t, ndim, sh, st))
    return ingot_fail(INGOT_ERR_SHAPE, "view: size is not compatible with the input's strides; "
                      "use ingot_reshape");
  return tensor_view(t, ndim, sh, st, t->offset);
}

ingot_tensor *ingot_reshape(const ingot_tensor *t, int ndim, const int64_t *shape) {
  if (!one("reshape", t)) return NULL;
  int64_t sh[INGOT_MAX_DIMS], st[INGOT_MAX_DIMS];
  if (!infer_shape("reshape", t, ndim, shape, sh)) return NULL;
  if (view_strides(t, ndim, sh, st)) return tensor_view(t, ndim, sh, st, t->offset);
  ingot_tensor *c = ingot_clone(t);
  if (!c) return NULL;
  contiguous_strides(ndim, sh, st);
  ingot_tensor *v = tensor_view(c, ndim, sh, st, 0);
  ingot_release(c);
  return v;
}

ingot_tensor *ingot_flatten(const ingot_tensor *t, int start_dim, int end_dim) {
  if (!one("flatten", t)) return NULL;
  if (t->ndim == 0) return ingot_reshape(t, 1, (int64_t[]){1});
  if ((start_dim = normalize_dim("flatten", start_dim, t->ndim)) < 0) return NULL;
  if ((end_dim = normalize_dim("flatten", end_dim, t->ndim)) < 0) return NULL;
  if (start_dim > end_dim)
    return ingot_fail(INGOT_ERR_ARG, "flatten: start_dim cannot come after end_dim");
  int64_t sh[INGOT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (i > start_dim && i <= end_dim) sh[n - 1] *= t->shape[i];
    else sh[n++] = t->shape[i];
  }
  return ingot_reshape(t, n, sh);
}

int ingot_split(const ingot_tensor *t, int64_t split_size, int dim, ingot_tensor **out,
                int max_out) {
  if (!one("split", t)) return -1;
  if (t->ndim == 0) {
    ingot_set_error(INGOT_ERR_INDEX, "split: cannot split a 0-dim tensor");
    return -1;
  }
  if ((dim = normalize_dim("split", dim, t->ndim)) < 0) return -1;
  int64_t n = t->shape[dim];
  if (split_size <= 0 && !(split_size == 0 && n == 0)) {
    ingot_set_error(INGOT_ERR_ARG, "split: split_size must be positive, got %lld",
                    (long long)split_size);
    return -1;
  }
  int64_t pieces = n == 0 ? 1 : (n - 1) / split_size + 1; /* no overflow near INT64_MAX */
  if (!out || pieces > max_out) {
    ingot_set_error(INGOT_ERR_ARG, "split: %lld pieces do not fit in %d output slots",
                    (long long)pieces, max_out);
    return -1;
  }
  for (int64_t i = 0; i < pieces; i++) {
    int64_t start = i * split_size;
    int64_t len = n - start < split_size ? n - start : split_size;
    out[i] = ingot_narrow(t, dim, start, len);
    if (!out[i]) {
      for (int64_t j = 0; j < i; j++) ingot_release(out[j]);
      return -1;
    }
  }
  return (int)pieces;
}

int ingot_chunk(const ingot_tensor *t, int chunks, int dim, ingot_tensor **out, int max_out) {
  if (!one("chunk", t)) return -1;
  if (chunks <= 0) {
    ingot_set_error(INGOT_ERR_ARG, "chunk: chunks must be positive, got %d", chunks);
    return -1;
  }
  if (t->ndim == 0) {
    ingot_set_error(INGOT_ERR_INDEX, "chunk: cannot chunk a 0-dim tensor");
    return -1;
  }
  if ((dim = normalize_dim("chunk", dim, t->ndim)) < 0) return -1;
  int64_t n = t->shape[dim];
  int64_t size = (n + chunks - 1) / chunks;
  if (size == 0) size = 1;
  if (n == 0) return ingot_split(t, 0, dim, out, max_out);
  return ingot_split(t, size, dim, out, max_out);
}

ingot_tensor *ingot_as_strided(const ingot_tensor *t, int ndim, const int64_t *shape,
                               const int64_t *strides, int64_t offset) {
  if (!one("as_strided", t)) return NULL;
  if (ndim < 0 || ndim > INGOT_MAX_DIMS || (ndim && (!shape || !strides)))
    return ingot_fail(INGOT_ERR_SHAPE, "as_strided: bad number of dims %d", ndim);
  if (offset < 0) return ingot_fail(INGOT_ERR_ARG, "as_strided: negative storage offset");
  int64_t last = offset, capacity = (int64_t)(t->storage->nbytes / ingot_dtype_size(t->dtype));
  bool empty = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || strides[i] < 0)
      return ingot_fail(INGOT_ERR_SHAPE, "as_strided: negative size or stride at dim %d", i);
    if (shape[i] == 0) empty = true;
    else if (strides[i] && (shape[i] - 1) > (INT64_MAX - last) / strides[i])
      return ingot_fail(INGOT_ERR_SHAPE, "as_strided: view reaches past 64-bit offsets");
    else last += (shape[i] - 1) * strides[i];
  }
  if (!empty && last >= capacity)
    return ingot_fail(INGOT_ERR_INDEX, "as_strided: view reaches element %lld of a storage of %lld",
                      (long long)last, (long long)capacity);
  return tensor_view(t, ndim, shape, strides, offset);
}
