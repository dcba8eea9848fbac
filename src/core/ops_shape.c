/* Shape ops that move data: cat, stack, flip, roll, repeat, tril, triu.
 * Fronts validate, promote and compute the output shape; the kernels only
 * copy elements (byte-size based, no per-dtype code).
 *
 * Kernel contracts (out[0] is contiguous unless said otherwise):
 *   CAT     in[0..nin-1] (nin <= INGOT_OP_MAX_IN, any strides, out's dtype),
 *           out[0] = the region of the result they fill (a view, any
 *           strides), iarg[0] = dim: in[i] goes to out[0] along dim right
 *           after in[i-1]. The front calls it once per group of inputs.
 *   FLIP    in[0] any strides, out[0] same shape/dtype; dims = bitmask of
 *           the dims to reverse.
 *   ROLL    in[0] any strides, out[0] same shape/dtype; iarg[d] in
 *           [0, shape[d]) is the shift of dim d: out[.., (i + s) % n, ..] =
 *           in[.., i, ..].
 *   REPEAT  in[0] = t viewed with out's ndim (leading size-1 dims added),
 *           out[0] with shape[d] = in.shape[d] * iarg[d].
 *   TRIL / TRIU  in[0] (ndim >= 2, any strides), out[0] same shape/dtype,
 *           iarg[0] = k: keeps elements with col - row <= k (tril) or
 *           >= k (triu) of the last two dims, zero elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static ingot_tensor *as_dtype(const ingot_tensor *t, ingot_dtype dt) {
  return t->dtype == dt ? ingot_retain((ingot_tensor *)t) : ingot_cast(t, dt);
}

/* PyTorch still accepts (and skips) 1-D empty tensors in cat. */
static bool cat_skipped(const ingot_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

static ingot_status cat_group(ingot_tensor *out, ingot_tensor *const *parts, int np, int dim,
                              int64_t start, int64_t len) {
  int64_t sh[INGOT_MAX_DIMS];
  memcpy(sh, out->shape, sizeof sh);
  sh[dim] = len;
  ingot_tensor *region =
      tensor_view(out, out->ndim, sh, out->strides, out->offset + start * out->strides[dim]);
  if (!region) return ingot_last_status();
  ingot_op_args a = {.op = INGOT_OP_CAT, .nin = np, .nout = 1, .iarg = {dim}};
  for (int i = 0; i < np; i++) a.in[i] = parts[i];
  a.out[0] = region;
  ingot_status st = dispatch(&a);
  ingot_release(region);
  return st;
}

ingot_tensor *ingot_cat(ingot_tensor *const *ts, int n, int dim) {
  if (n <= 0 || !ts) return ingot_fail(INGOT_ERR_ARG, "cat: expected a non-empty list of tensors");
  if (!check_tensors("cat", n, (const ingot_tensor *const *)ts)) return NULL;
  int ref = -1;
  for (int i = 0; i < n; i++) {
    if (ts[i]->ndim == 0)
      return ingot_fail(INGOT_ERR_SHAPE,
                        "cat: zero-dimensional tensor (at position %d) cannot "
                        "be concatenated",
                        i);
    if (ref < 0 && !cat_skipped(ts[i])) ref = i;
  }
  ingot_dtype dt = result_type("cat", n, (const ingot_tensor *const *)ts);
  if (dt == INGOT_DTYPE_INVALID) return NULL;
  if (ref < 0) { /* every input is a 1-D empty tensor */
    if (normalize_dim("cat", dim, 1) < 0) return NULL;
    return tensor_new(1, (int64_t[]){0}, dt, ts[0]->device);
  }
  const ingot_tensor *r = ts[ref];
  if ((dim = normalize_dim("cat", dim, r->ndim)) < 0) return NULL;
  int64_t shape[INGOT_MAX_DIMS];
  memcpy(shape, r->shape, sizeof shape);
  shape[dim] = 0;
  for (int i = 0; i < n; i++) {
    const ingot_tensor *t = ts[i];
    if (cat_skipped(t)) continue;
    if (t->ndim != r->ndim)
      return ingot_fail(INGOT_ERR_SHAPE,
                        "cat: tensors must have same number of dimensions: got "
                        "%d and %d",
                        r->ndim, t->ndim);
    for (int d = 0; d < r->ndim; d++) {
      if (d != dim && t->shape[d] != r->shape[d])
        return ingot_fail(INGOT_ERR_SHAPE,
                          "cat: sizes of tensors must match except in dimension "
                          "%d. Expected size %lld but got size %lld for tensor number %d in the "
                          "list",
                          dim, (long long)r->shape[d], (long long)t->shape[d], i);
    }
    shape[dim] += t->shape[dim];
  }
  ingot_tensor *out = tensor_new(r->ndim, shape, dt, r->device);
  if (!out) return NULL;
  ingot_status st = INGOT_OK;
  ingot_tensor *group[INGOT_OP_MAX_IN];
  int ng = 0;
  int64_t start = 0, len = 0;
  for (int i = 0; i <= n && st == INGOT_OK; i++) {
    bool take = i < n && !cat_skipped(ts[i]) && ts[i]->shape[dim] > 0;
    if ((i == n || (take && ng == INGOT_OP_MAX_IN)) && ng > 0) {
      st = cat_group(out, group, ng, dim, start, len);
      for (int j = 0; j < ng; j++) ingot_release(group[j]);
      start += len;
      ng = 0, len = 0;
    }
    if (take && st == INGOT_OK) {
      if (!(group[ng] = as_dtype(ts[i], dt))) st = ingot_last_status();
      else len += ts[i]->shape[dim], ng++;
    }
  }
  for (int j = 0; j < ng; j++) ingot_release(group[j]);
  if (st != INGOT_OK) {
    ingot_release(out);
    return NULL;
  }
  return out;
}

ingot_tensor *ingot_stack(ingot_tensor *const *ts, int n, int dim) {
  if (n <= 0 || !ts) return ingot_fail(INGOT_ERR_ARG, "stack: expects a non-empty list of tensors");
  if (!check_tensors("stack", n, (const ingot_tensor *const *)ts)) return NULL;
  for (int i = 1; i < n; i++) {
    bool same = ts[i]->ndim == ts[0]->ndim;
    for (int d = 0; same && d < ts[0]->ndim; d++) same = ts[i]->shape[d] == ts[0]->shape[d];
    if (!same)
      return ingot_fail(INGOT_ERR_SHAPE,
                        "stack: expects each tensor to be equal size, but the "
                        "tensor at entry %d differs from the one at entry 0",
                        i);
  }
  if (ts[0]->ndim == INGOT_MAX_DIMS)
    return ingot_fail(INGOT_ERR_SHAPE, "stack: tensors have at most %d dims", INGOT_MAX_DIMS);
  if ((dim = normalize_dim("stack", dim, ts[0]->ndim + 1)) < 0) return NULL;
  ingot_tensor **us = calloc((size_t)n, sizeof *us);
  if (!us) return ingot_fail(INGOT_ERR_OOM, "stack: out of host memory");
  ingot_tensor *r = NULL;
  int made = 0;
  for (; made < n; made++)
    if (!(us[made] = ingot_unsqueeze(ts[made], dim))) break;
  if (made == n) r = ingot_cat(us, n, dim);
  for (int i = 0; i < made; i++) ingot_release(us[i]);
  free(us);
  return r;
}

/* One input, one fresh output of the same shape and dtype. */
static ingot_tensor *run_same_shape(ingot_op_args *a) {
  ingot_tensor *t = a->in[0];
  ingot_tensor *out = tensor_new(t->ndim, t->shape, t->dtype, t->device);
  if (!out) return NULL;
  a->nin = 1, a->nout = 1;
  a->out[0] = out;
  return dispatch_out(a);
}

ingot_tensor *ingot_flip(const ingot_tensor *t, const int *dims, int ndims) {
  if (!check_tensors("flip", 1, &t)) return NULL;
  uint32_t mask;
  /* Unlike reductions, an empty dims list flips nothing. */
  if (!dims || ndims == 0) mask = 0;
  else if (!dims_mask("flip", dims, ndims, t->ndim, &mask)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_FLIP, .dims = mask};
  a.in[0] = (ingot_tensor *)t;
  return run_same_shape(&a);
}

ingot_tensor *ingot_roll(const ingot_tensor *t, const int64_t *shifts, const int *dims, int ndims) {
  if (!check_tensors("roll", 1, &t)) return NULL;
  if (!shifts) return ingot_fail(INGOT_ERR_ARG, "roll: shifts is NULL");
  if (ndims < 0 || ndims > INGOT_MAX_DIMS || (ndims > 0 && !dims))
    return ingot_fail(INGOT_ERR_ARG, "roll: bad number of dims %d", ndims);
  if (ndims == 0 || t->ndim == 0) {
    if (ndims > 0 && normalize_dim("roll", dims[0], t->ndim) < 0) return NULL;
    /* Roll the flattened tensor, then restore the shape. */
    int64_t numel = ingot_numel(t);
    ingot_tensor *flat = ingot_reshape(t, 1, &numel);
    ingot_tensor *rolled = flat ? ingot_roll(flat, shifts, (int[]){0}, 1) : NULL;
    ingot_tensor *r = rolled ? ingot_reshape(rolled, t->ndim, t->shape) : NULL;
    ingot_release(flat);
    ingot_release(rolled);
    return r;
  }
  ingot_op_args a = {.op = INGOT_OP_ROLL};
  for (int i = 0; i < ndims; i++) {
    int d = normalize_dim("roll", dims[i], t->ndim);
    if (d < 0) return NULL;
    int64_t size = t->shape[d];
    if (size == 0) continue;
    /* Repeated dims add up, as PyTorch's roll applies them in turn. */
    a.iarg[d] = ((a.iarg[d] + shifts[i] % size) % size + size) % size;
  }
  a.in[0] = (ingot_tensor *)t;
  return run_same_shape(&a);
}

ingot_tensor *ingot_repeat(const ingot_tensor *t, const int64_t *repeats, int nrep) {
  if (!check_tensors("repeat", 1, &t)) return NULL;
  if (nrep < t->ndim || (nrep > 0 && !repeats))
    return ingot_fail(INGOT_ERR_ARG, "repeat: number of dimensions of repeat dims can not be "
                                     "smaller than number of dimensions of tensor");
  if (nrep > INGOT_MAX_DIMS)
    return ingot_fail(INGOT_ERR_ARG, "repeat: at most %d repeat dims", INGOT_MAX_DIMS);
  int64_t in_shape[INGOT_MAX_DIMS], in_strides[INGOT_MAX_DIMS], shape[INGOT_MAX_DIMS];
  int lead = nrep - t->ndim;
  ingot_op_args a = {.op = INGOT_OP_REPEAT, .nin = 1, .nout = 1};
  for (int d = 0; d < nrep; d++) {
    if (repeats[d] < 0)
      return ingot_fail(INGOT_ERR_ARG,
                        "repeat: trying to create tensor with negative dimension "
                        "%lld",
                        (long long)repeats[d]);
    in_shape[d] = d < lead ? 1 : t->shape[d - lead];
    in_strides[d] = d < lead ? 0 : t->strides[d - lead];
    if (in_shape[d] && repeats[d] > INT64_MAX / in_shape[d])
      return ingot_fail(INGOT_ERR_SHAPE, "repeat: result is too large");
    shape[d] = in_shape[d] * repeats[d];
    a.iarg[d] = repeats[d];
  }
  ingot_tensor *out = tensor_new(nrep, shape, t->dtype, t->device);
  if (!out) return NULL;
  if (ingot_numel(out) == 0) return out;
  ingot_tensor *in = tensor_view(t, nrep, in_shape, in_strides, t->offset);
  if (!in) {
    ingot_release(out);
    return NULL;
  }
  a.in[0] = in;
  a.out[0] = out;
  ingot_tensor *r = dispatch_out(&a);
  ingot_release(in);
  return r;
}

static ingot_tensor *triangle(const char *name, ingot_op op, const ingot_tensor *t, int64_t k) {
  if (!check_tensors(name, 1, &t)) return NULL;
  if (t->ndim < 2)
    return ingot_fail(INGOT_ERR_SHAPE, "%s: input tensor must have at least 2 dimensions", name);
  ingot_op_args a = {.op = op, .iarg = {k}};
  a.in[0] = (ingot_tensor *)t;
  return run_same_shape(&a);
}

ingot_tensor *ingot_tril(const ingot_tensor *t, int64_t k) {
  return triangle("tril", INGOT_OP_TRIL, t, k);
}

ingot_tensor *ingot_triu(const ingot_tensor *t, int64_t k) {
  return triangle("triu", INGOT_OP_TRIU, t, k);
}
