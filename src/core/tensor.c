/* Tensor handles and storage: allocation, reference counts, metadata, host
 * transfer, moves between devices and copies. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "numeric.h"

static atomic_llong live_tensors;

int64_t ingot_live_tensors(void) { return (int64_t)atomic_load(&live_tensors); }

int64_t shape_numel(int ndim, const int64_t *shape) {
  /* A zero size first: [2^62, 2^62, 0] is empty, not an overflow. */
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

int64_t contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  /* Unsigned: the strides of a huge empty tensor may wrap (they are never used). */
  uint64_t n = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = (int64_t)n;
    n *= shape[i] > 0 ? (uint64_t)shape[i] : 1;
  }
  return shape_numel(ndim, shape);
}

/* True when no size is negative and the element count fits in int64 (a zero
 * size anywhere makes it 0). */
static bool numel_fits(int ndim, const int64_t *shape) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) return false;
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return true;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (n > INT64_MAX / shape[i]) return false;
    n *= shape[i];
  }
  return true;
}

/* numel*elsize for shape, or -1 when a size is negative or the bytes overflow. */
static int64_t checked_nbytes(int ndim, const int64_t *shape, size_t elsize) {
  if (!numel_fits(ndim, shape)) return -1;
  int64_t n = shape_numel(ndim, shape);
  if (n > INT64_MAX / (int64_t)elsize) return -1;
  return n * (int64_t)elsize;
}

static ingot_tensor *handle_new(void) {
  ingot_tensor *t = calloc(1, sizeof *t);
  if (!t) return ingot_fail(INGOT_ERR_OOM, "out of host memory for a tensor handle");
  atomic_init(&t->refcount, 1);
  atomic_fetch_add(&live_tensors, 1);
  scope_register(t);
  return t;
}

ingot_tensor *tensor_new(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  if (ndim < 0 || ndim > INGOT_MAX_DIMS)
    return ingot_fail(INGOT_ERR_SHAPE, "tensors have 0 to %d dims, got %d", INGOT_MAX_DIMS, ndim);
  if (ndim > 0 && !shape) return ingot_fail(INGOT_ERR_ARG, "shape is NULL");
  if (dt < 0 || dt >= INGOT_DTYPE_COUNT) return ingot_fail(INGOT_ERR_DTYPE, "invalid dtype %d", dt);
  int64_t nbytes = checked_nbytes(ndim, shape, ingot_dtype_size(dt));
  if (nbytes < 0)
    return ingot_fail(INGOT_ERR_SHAPE, "invalid tensor size (a negative size, or more bytes "
                      "than 64-bit indexing allows)");
  const ingot_backend *be = backend_for(dev);
  if (!be) return NULL;
  ingot_storage *s = calloc(1, sizeof *s);
  if (!s) return ingot_fail(INGOT_ERR_OOM, "out of host memory");
  s->nbytes = (size_t)nbytes;
  s->device = dev;
  atomic_init(&s->refcount, 1);
  if (nbytes > 0) {
    s->data = be->alloc(dev.index, (size_t)nbytes);
    if (!s->data) {
      free(s);
      return NULL; /* the backend set the error */
    }
  }
  ingot_tensor *t = handle_new();
  if (!t) {
    if (s->data) be->free(dev.index, s->data, s->nbytes);
    free(s);
    return NULL;
  }
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  contiguous_strides(ndim, shape, t->strides);
  t->dtype = dt;
  t->device = dev;
  t->storage = s;
  return t;
}

ingot_tensor *tensor_view(const ingot_tensor *base, int ndim, const int64_t *shape,
                          const int64_t *strides, int64_t offset) {
  /* A view (expand) may not describe more elements than 64-bit indexing allows. */
  if (!numel_fits(ndim, shape))
    return ingot_fail(INGOT_ERR_SHAPE, "view: the shape has more elements than 64-bit "
                      "indexing allows (or a negative size)");
  ingot_tensor *t = handle_new();
  if (!t) return NULL;
  t->ndim = ndim;
  if (ndim) {
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
  }
  t->offset = offset;
  t->dtype = base->dtype;
  t->device = base->device;
  t->storage = base->storage;
  atomic_fetch_add(&t->storage->refcount, 1);
  return t;
}

ingot_tensor *tensor_view_as_dtype(const ingot_tensor *t, ingot_dtype dt) {
  const int64_t from = (int64_t)ingot_dtype_size(t->dtype), to = (int64_t)ingot_dtype_size(dt);
  if (t->ndim != 2 || t->strides[1] != 1 || (t->shape[1] * from) % to ||
      (t->strides[0] * from) % to || (t->offset * from) % to)
    return NULL;
  ingot_tensor *v = tensor_view(t, 2, (int64_t[]){t->shape[0], t->shape[1] * from / to},
                                (int64_t[]){t->strides[0] * from / to, 1}, t->offset * from / to);
  if (v) v->dtype = dt;
  return v;
}

ingot_tensor *ingot_retain(ingot_tensor *t) {
  if (t) atomic_fetch_add(&t->refcount, 1);
  return t;
}

void ingot_release(ingot_tensor *t) {
  if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
  scope_forget(t);
  ingot_storage *s = t->storage;
  if (atomic_fetch_sub(&s->refcount, 1) == 1) {
    if (s->data && s->deleter) {
      s->deleter(s->data);
    } else if (s->data) {
      const ingot_backend *be = ingot_backend_get(s->device.kind);
      if (be) be->free(s->device.index, s->data, s->nbytes);
    }
    free(s);
  }
  atomic_fetch_sub(&live_tensors, 1);
  free(t);
}

/* ---- metadata ---- */
int ingot_ndim(const ingot_tensor *t) { return t ? t->ndim : -1; }

int64_t ingot_size(const ingot_tensor *t, int dim) {
  if (!t) return -1;
  if (dim < 0) dim += t->ndim;
  return dim >= 0 && dim < t->ndim ? t->shape[dim] : -1;
}

const int64_t *ingot_shape(const ingot_tensor *t) { return t ? t->shape : NULL; }
const int64_t *ingot_strides(const ingot_tensor *t) { return t ? t->strides : NULL; }
int64_t ingot_offset(const ingot_tensor *t) { return t ? t->offset : -1; }
int64_t ingot_numel(const ingot_tensor *t) { return t ? shape_numel(t->ndim, t->shape) : -1; }
ingot_dtype ingot_dtype_of(const ingot_tensor *t) { return t ? t->dtype : INGOT_DTYPE_INVALID; }
ingot_device ingot_device_of(const ingot_tensor *t) { return t ? t->device : INGOT_CPU; }

bool ingot_is_contiguous(const ingot_tensor *t) {
  if (!t) return false;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] == 0) return true;
    if (t->shape[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

bool ingot_shares_storage(const ingot_tensor *a, const ingot_tensor *b) {
  return a && b && a->storage == b->storage;
}

void *ingot_tensor_data(const ingot_tensor *t) { return t ? tensor_ptr(t) : NULL; }

/* ---- moves ---- */
/* CPU copy of any tensor without running device kernels: copies the storage
 * span the view covers, then views it on the host. */
ingot_tensor *tensor_host_span(const ingot_tensor *t, int64_t *lo_out) {
  int64_t lo = t->offset, hi = t->offset, n = shape_numel(t->ndim, t->shape);
  for (int i = 0; i < t->ndim && n > 0; i++) {
    int64_t ext = t->strides[i] * (t->shape[i] - 1);
    if (ext < 0) lo += ext;
    else hi += ext;
  }
  int64_t span = n > 0 ? hi - lo + 1 : 0;
  ingot_tensor *flat = tensor_new(1, &span, t->dtype, INGOT_CPU);
  if (!flat) return NULL;
  size_t es = ingot_dtype_size(t->dtype);
  if (span > 0 &&
      copy_bytes(INGOT_CPU, flat->storage->data, t->device,
                 (char *)t->storage->data + lo * (int64_t)es, (size_t)span * es) != INGOT_OK) {
    ingot_release(flat);
    return NULL;
  }
  ingot_tensor *v = tensor_view(flat, t->ndim, t->shape, t->strides, t->offset - lo);
  ingot_release(flat);
  if (lo_out) *lo_out = lo;
  return v;
}

static ingot_tensor *to_cpu(const ingot_tensor *t) {
  if (t->device.kind == INGOT_DEVICE_CPU) return ingot_retain((ingot_tensor *)t);
  return tensor_host_span(t, NULL);
}

ingot_tensor *ingot_to(const ingot_tensor *t, ingot_device dev) {
  if (!check_tensors("to", 1, &t)) return NULL;
  if (ingot_device_equal(t->device, dev)) return ingot_retain((ingot_tensor *)t);
  if (!backend_for(dev)) return fail_in("to");
  ingot_tensor *host = to_cpu(t);
  if (!host || dev.kind == INGOT_DEVICE_CPU) return host;
  ingot_tensor *c = ingot_contiguous(host);
  ingot_release(host);
  if (!c) return NULL;
  ingot_tensor *out = tensor_new(c->ndim, c->shape, c->dtype, dev);
  if (out && copy_bytes(dev, out->storage->data, INGOT_CPU, tensor_ptr(c),
                        out->storage->nbytes) != INGOT_OK) {
    ingot_release(out);
    out = NULL;
  }
  ingot_release(c);
  return out;
}

ingot_status ingot_to_host(const ingot_tensor *t, void *dst, size_t nbytes) {
  if (!t) return ingot_last_status() ? ingot_last_status()
                                     : ingot_set_error(INGOT_ERR_ARG, "to_host: NULL tensor");
  size_t need = (size_t)ingot_numel(t) * ingot_dtype_size(t->dtype);
  if (nbytes != need)
    return ingot_set_error(INGOT_ERR_ARG, "to_host: buffer is %zu bytes, tensor needs %zu",
                           nbytes, need);
  if (need && !dst) return ingot_set_error(INGOT_ERR_ARG, "to_host: NULL buffer");
  if (!need) return INGOT_OK;
  if (ingot_is_contiguous(t))
    return copy_bytes(INGOT_CPU, dst, t->device, tensor_ptr(t), need);
  ingot_tensor *host = to_cpu(t);
  ingot_tensor *c = host ? ingot_contiguous(host) : NULL;
  ingot_release(host);
  if (!c) return ingot_last_status();
  memcpy(dst, tensor_ptr(c), need);
  ingot_release(c);
  return INGOT_OK;
}

double ingot_item(const ingot_tensor *t) {
  if (!check_tensors("item", 1, &t)) return NAN;
  if (ingot_numel(t) != 1) {
    ingot_set_error(INGOT_ERR_SHAPE, "item: tensor has %lld elements, expected 1",
                    (long long)ingot_numel(t));
    return NAN;
  }
  unsigned char buf[16];
  if (copy_bytes(INGOT_CPU, buf, t->device, tensor_ptr(t), ingot_dtype_size(t->dtype)) !=
      INGOT_OK)
    return NAN;
  return load_f64(t->dtype, buf);
}

ingot_tensor *ingot_from_host(const void *data, int ndim, const int64_t *shape, ingot_dtype dt,
                              ingot_device dev) {
  ingot_tensor *t = tensor_new(ndim, shape, dt, dev);
  if (!t) return fail_in("from_host");
  if (t->storage->nbytes && !data) {
    ingot_release(t);
    return ingot_fail(INGOT_ERR_ARG, "from_host: NULL data");
  }
  if (t->storage->nbytes &&
      copy_bytes(dev, t->storage->data, INGOT_CPU, data, t->storage->nbytes) != INGOT_OK) {
    ingot_release(t);
    return NULL;
  }
  return t;
}

/* ---- copies ---- */
static ingot_status run_copy(ingot_tensor *dst, const ingot_tensor *src) {
  ingot_op_args a = {.op = INGOT_OP_COPY, .nin = 1, .nout = 1};
  a.in[0] = (ingot_tensor *)src;
  a.out[0] = dst;
  return dispatch(&a);
}

ingot_status copy_into(ingot_tensor *dst, const ingot_tensor *src) {
  /* dst is contiguous with src's numel: view it with src's shape. */
  ingot_tensor *src_here = ingot_to(src, dst->device);
  if (!src_here) return ingot_last_status();
  int64_t strides[INGOT_MAX_DIMS];
  contiguous_strides(src->ndim, src->shape, strides);
  ingot_tensor *dv = tensor_view(dst, src->ndim, src->shape, strides, dst->offset);
  ingot_status st = dv ? run_copy(dv, src_here) : ingot_last_status();
  ingot_release(dv);
  ingot_release(src_here);
  return st;
}

/* A fresh contiguous copy of t converted to dt; errors name op. */
static ingot_tensor *copy_as(const ingot_tensor *t, ingot_dtype dt, const char *op) {
  ingot_tensor *out = tensor_new(t->ndim, t->shape, dt, t->device);
  if (!out) return fail_in(op);
  if (run_copy(out, t) != INGOT_OK) {
    ingot_release(out);
    return fail_in(op);
  }
  return out;
}

ingot_tensor *ingot_clone(const ingot_tensor *t) {
  return check_tensors("clone", 1, &t) ? copy_as(t, t->dtype, "clone") : NULL;
}

ingot_tensor *ingot_contiguous(const ingot_tensor *t) {
  if (!check_tensors("contiguous", 1, &t)) return NULL;
  if (ingot_is_contiguous(t)) return ingot_retain((ingot_tensor *)t);
  return copy_as(t, t->dtype, "contiguous");
}

ingot_tensor *ingot_cast(const ingot_tensor *t, ingot_dtype dt) {
  if (!check_tensors("cast", 1, &t)) return NULL;
  if (dt < 0 || dt >= INGOT_DTYPE_COUNT) return ingot_fail(INGOT_ERR_DTYPE, "cast: invalid dtype");
  return copy_as(t, dt, "cast");
}

ingot_status ingot_copy_(ingot_tensor *dst, const ingot_tensor *src) {
  if (!dst || !src)
    return ingot_last_status() ? ingot_last_status()
                               : ingot_set_error(INGOT_ERR_ARG, "copy_: NULL tensor");
  ingot_tensor *here = ingot_to(src, dst->device);
  ingot_tensor *e = here ? ingot_expand(here, dst->ndim, dst->shape) : NULL;
  ingot_release(here);
  if (!e) {
    fail_in("copy_");
    return ingot_last_status();
  }
  ingot_status st = run_copy(dst, e);
  ingot_release(e);
  return st;
}
