/* Core internals shared by src/core and the in-tree backends: the tensor and
 * storage structs, allocation, views, dispatch and argument checks. */
#ifndef INGOT_CORE_INTERNAL_H
#define INGOT_CORE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ingot/ingot.h"

typedef struct ingot_storage {
  void *data; /* device (or host) memory */
  size_t nbytes;
  ingot_device device;
  atomic_int refcount;
  /* Set for memory that is not the backend's own (pinned host memory):
   * called instead of the backend's free. */
  void (*deleter)(void *data);
} ingot_storage;

struct ingot_tensor {
  int ndim;
  int64_t shape[INGOT_MAX_DIMS];
  int64_t strides[INGOT_MAX_DIMS]; /* in elements */
  int64_t offset;                  /* in elements */
  ingot_dtype dtype;
  ingot_device device;
  ingot_storage *storage;
  atomic_int refcount;
  bool wrapped_number; /* made from a C scalar: lowest promotion priority */
  int scope_depth;     /* -1 when not registered in a scope */
  int64_t scope_slot;
};

/* ---- errors (src/core/error.c) ---- */
/* Set the error and return NULL, for tensor-returning functions. */
void *ingot_fail(ingot_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Name op in the current error message (prefix "op: " unless there);
 * returns NULL. */
void *fail_in(const char *op);

/* ---- tensors (src/core/tensor.c) ---- */
/* Fresh contiguous tensor (uninitialised); checks sizes for overflow. */
ingot_tensor *tensor_new(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
/* New handle on base's storage with the given geometry. */
ingot_tensor *tensor_view(const ingot_tensor *base, int ndim, const int64_t *shape,
                          const int64_t *strides, int64_t offset);
/* A 2-D view of the same bytes as dtype dt (rows unchanged, last dim scaled
 * by the element sizes), or NULL (no error) when t is not 2-D with
 * contiguous rows whose bytes split evenly into dt (torch's Tensor.view(dtype)). */
ingot_tensor *tensor_view_as_dtype(const ingot_tensor *t, ingot_dtype dt);
/* Host copy of the storage span t covers, viewed as t; *lo is the span's
 * first element in t's storage. */
ingot_tensor *tensor_host_span(const ingot_tensor *t, int64_t *lo);
/* Contiguous strides for shape; returns numel. */
int64_t contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
int64_t shape_numel(int ndim, const int64_t *shape);
/* Host address of element 0 of a CPU tensor. */
static inline char *tensor_ptr(const ingot_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)ingot_dtype_size(t->dtype);
}

/* 0-dim tensor for a C scalar operand (int64 if integral, else float64),
 * flagged so that promotion treats it as a Python number. */
ingot_tensor *wrapped_scalar(double value, ingot_device dev);

/* ---- argument checks (src/core/check.c) ---- */
/* True when all n tensors are non-NULL (else keeps or sets an error) and on
 * one device (else sets an error naming op). */
bool check_tensors(const char *op, int n, const ingot_tensor *const *ts);
/* A caller-kept scratch tensor (counters, a mailbox): contiguous, 1-D, of
 * dtype dt and at least n elements; else an error "'name' must be contiguous
 * <dtype> [>= n] (why)" and false. */
bool check_scratch(const char *op, const char *name, const ingot_tensor *t, ingot_dtype dt,
                   int64_t n, const char *why);
/* Normalise dim into [0, ndim) (ndim 0 accepts -1 and 0); -1 + error if out of range. */
int normalize_dim(const char *op, int dim, int ndim);
/* Bitmask of dims (NULL/0 = all); returns false + error on bad or repeated dims. */
bool dims_mask(const char *op, const int *dims, int ndims, int tensor_ndim, uint32_t *mask);
/* Broadcast shapes a and b into out (ndim in *out_ndim); false + error if impossible. */
bool broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                      int *out_ndim, int64_t *out);
/* PyTorch's result_type over n operands (0-dim and wrapped scalars rank lower). */
ingot_dtype result_type(const char *op, int n, const ingot_tensor *const *ts);

/* Contiguous int64 version of an index tensor (int32 is widened); other
 * dtypes fail naming op (src/core/ops_index.c). */
ingot_tensor *as_index(const char *op, const ingot_tensor *idx);

/* ---- checks of the quantised products (src/core/ops_nn.c) ---- */
/* W [rows, S] u8 holding cols elements of ggml type per row; false + error naming op. */
bool check_qtable(const char *op, const ingot_tensor *w, int type, int64_t cols);
/* norm f32 [cols] with eps >= 0 and res f32 [yshape] (either NULL); false + error naming op. */
bool check_fused(const char *op, const ingot_tensor *norm, double eps, const ingot_tensor *res,
                 int64_t cols, const int64_t *yshape);

/* ---- dispatch (src/core/dispatch.c) ---- */
/* Run a->op on the inputs' device (or out[0]'s when there are no inputs),
 * through the CPU fallback when allowed. */
ingot_status dispatch(ingot_op_args *a);
/* Run a fully set-up op with one output: on failure releases out and
 * returns NULL, else returns out. */
ingot_tensor *dispatch_out(ingot_op_args *a);
/* Raw byte copies between any two devices. */
ingot_status copy_bytes(ingot_device dst_dev, void *dst, ingot_device src_dev, const void *src,
                        size_t nbytes);
/* Write src's values into the contiguous tensor dst (same numel; casts). */
ingot_status copy_into(ingot_tensor *dst, const ingot_tensor *src);
/* Backend for a device, or NULL + error if absent. */
const ingot_backend *backend_for(ingot_device dev);
/* backend_for(dev) when it has a kernel for each of the n ops (a composed
 * op's parts), else NULL + an error naming op and the missing one. */
const ingot_backend *backend_with(ingot_device dev, const char *op, int n, const ingot_op *ops);

/* ---- scopes (src/core/scope.c) ---- */
void scope_register(ingot_tensor *t);
void scope_forget(ingot_tensor *t);

/* ---- built-in backends (registered on first use) ---- */
void cpu_backend_init(ingot_backend *be);
#ifdef INGOT_HAVE_CUDA
void cuda_backend_init(ingot_backend *be);
#endif
void backends_ensure_init(void);

#endif
