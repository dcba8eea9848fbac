/* Tensors: handles, ownership and scopes, creation, views, host transfer,
 * casts and random numbers.
 *
 * Ownership: every function that returns a tensor returns an owned reference
 * (release it with ingot_release), unless a scope is open: then the tensor is
 * also registered in the innermost scope and released at ingot_scope_end
 * unless ingot_keep() moved it out. Failing calls return NULL and set
 * ingot_last_error(); every function taking tensors returns NULL when given
 * NULL, so a chain is checked once at its end. */
#ifndef INGOT_TENSOR_H
#define INGOT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGOT_MAX_DIMS 8

typedef struct ingot_tensor ingot_tensor;

/* ---- metadata ---- */
int ingot_ndim(const ingot_tensor *t);
/* Size of dimension dim (negative counts from the end); -1 if out of range. */
int64_t ingot_size(const ingot_tensor *t, int dim);
/* Pointer to the ndim sizes / strides (in elements); valid while t lives. */
const int64_t *ingot_shape(const ingot_tensor *t);
const int64_t *ingot_strides(const ingot_tensor *t);
/* Offset of the first element into the storage, in elements. */
int64_t ingot_offset(const ingot_tensor *t);
int64_t ingot_numel(const ingot_tensor *t);
ingot_dtype ingot_dtype_of(const ingot_tensor *t);
ingot_device ingot_device_of(const ingot_tensor *t);
bool ingot_is_contiguous(const ingot_tensor *t);
/* True when a and b view the same storage. */
bool ingot_shares_storage(const ingot_tensor *a, const ingot_tensor *b);

/* ---- ownership ---- */
/* Add a reference; returns t. */
ingot_tensor *ingot_retain(ingot_tensor *t);
/* Drop a reference (NULL is ignored). */
void ingot_release(ingot_tensor *t);
/* Open a scope on this thread: tensors created until the matching
 * ingot_scope_end are released there. */
void ingot_scope_begin(void);
/* Close the innermost scope, releasing its tensors that were not kept. */
void ingot_scope_end(void);
/* Take t out of the innermost scope (into the enclosing one, if any);
 * returns t. */
ingot_tensor *ingot_keep(ingot_tensor *t);
/* Number of live tensor handles in the process (for leak checks). */
int64_t ingot_live_tensors(void);

/* ---- creation ---- */
/* Uninitialised tensor with the given sizes (ndim 0 makes a scalar). */
ingot_tensor *ingot_empty(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
ingot_tensor *ingot_zeros(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
ingot_tensor *ingot_ones(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
/* Every element set to value (converted to dt as a cast would). */
ingot_tensor *ingot_full(int ndim, const int64_t *shape, double value, ingot_dtype dt,
                         ingot_device dev);
/* 0-dim tensor holding value. */
ingot_tensor *ingot_scalar(double value, ingot_dtype dt, ingot_device dev);
/* Like t's shape, dtype and device. */
ingot_tensor *ingot_empty_like(const ingot_tensor *t);
ingot_tensor *ingot_zeros_like(const ingot_tensor *t);
ingot_tensor *ingot_full_like(const ingot_tensor *t, double value);
/* [start, end) in steps of step, as torch.arange. */
ingot_tensor *ingot_arange(double start, double end, double step, ingot_dtype dt,
                           ingot_device dev);
/* steps values evenly from start to end inclusive, as torch.linspace. */
ingot_tensor *ingot_linspace(double start, double end, int64_t steps, ingot_dtype dt,
                             ingot_device dev);
/* n×m identity (m < 0 means m = n). */
ingot_tensor *ingot_eye(int64_t n, int64_t m, ingot_dtype dt, ingot_device dev);
/* Copy of a contiguous row-major host buffer of numel*dtype_size bytes. */
ingot_tensor *ingot_from_host(const void *data, int ndim, const int64_t *shape, ingot_dtype dt,
                              ingot_device dev);
/* Copy t (any layout, any device) into a contiguous host buffer of nbytes. */
ingot_status ingot_to_host(const ingot_tensor *t, void *dst, size_t nbytes);
/* Value of a one-element tensor as a double (real part for complex). */
double ingot_item(const ingot_tensor *t);

/* ---- random: counter-based Philox4x32-10; a seed gives the same numbers on
 * every device. Each call draws from the global generator and advances it. ---- */
void ingot_manual_seed(uint64_t seed);
/* Uniform on [0, 1). */
ingot_tensor *ingot_rand(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
/* Standard normal (Box-Muller). */
ingot_tensor *ingot_randn(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev);
/* Integers uniform on [low, high). */
ingot_tensor *ingot_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                            ingot_dtype dt, ingot_device dev);

/* ---- copies and conversions ---- */
/* New tensor with t's values converted to dt (round to nearest even). */
ingot_tensor *ingot_cast(const ingot_tensor *t, ingot_dtype dt);
/* t on another device (a new reference to t if already there). */
ingot_tensor *ingot_to(const ingot_tensor *t, ingot_device dev);
/* A contiguous copy. */
ingot_tensor *ingot_clone(const ingot_tensor *t);
/* t itself (new reference) if contiguous, else a contiguous copy. */
ingot_tensor *ingot_contiguous(const ingot_tensor *t);
/* Write src (broadcast, converted) into dst in place. */
ingot_status ingot_copy_(ingot_tensor *dst, const ingot_tensor *src);

/* ---- views: share storage with the input ---- */
/* Elements start, start+step, ... < end of dim (negative start/end count from
 * the end and are clamped, as Python slices; step > 0). */
ingot_tensor *ingot_slice(const ingot_tensor *t, int dim, int64_t start, int64_t end,
                          int64_t step);
/* Remove dim by taking one index of it. */
ingot_tensor *ingot_select(const ingot_tensor *t, int dim, int64_t index);
/* length elements of dim from start. */
ingot_tensor *ingot_narrow(const ingot_tensor *t, int dim, int64_t start, int64_t length);
ingot_tensor *ingot_transpose(const ingot_tensor *t, int dim0, int dim1);
/* dims is a permutation of 0..ndim-1. */
ingot_tensor *ingot_permute(const ingot_tensor *t, const int *dims);
/* Broadcast to shape (-1 keeps a size); new leading dims allowed. */
ingot_tensor *ingot_expand(const ingot_tensor *t, int ndim, const int64_t *shape);
/* Remove dim if its size is 1 (dim = INGOT_ALL_DIMS removes every size-1 dim). */
ingot_tensor *ingot_squeeze(const ingot_tensor *t, int dim);
ingot_tensor *ingot_unsqueeze(const ingot_tensor *t, int dim);
/* New shape (one -1 allowed): a view when the strides allow, else a copy. */
ingot_tensor *ingot_reshape(const ingot_tensor *t, int ndim, const int64_t *shape);
/* Like reshape but fails instead of copying. */
ingot_tensor *ingot_view(const ingot_tensor *t, int ndim, const int64_t *shape);
/* View with explicit sizes, strides (elements, >= 0) and storage offset, as
 * torch.as_strided; fails if it would reach outside t's storage. */
ingot_tensor *ingot_as_strided(const ingot_tensor *t, int ndim, const int64_t *shape,
                               const int64_t *strides, int64_t offset);
/* Flatten dims start..end (inclusive) into one. */
ingot_tensor *ingot_flatten(const ingot_tensor *t, int start_dim, int end_dim);
/* Views of split_size-long pieces along dim (last may be shorter); writes at
 * most max_out pointers into out and returns the count (-1 on error). */
int ingot_split(const ingot_tensor *t, int64_t split_size, int dim, ingot_tensor **out,
                int max_out);
/* chunks pieces along dim as torch.chunk; returns the count (-1 on error). */
int ingot_chunk(const ingot_tensor *t, int chunks, int dim, ingot_tensor **out, int max_out);

#define INGOT_ALL_DIMS 0x7fff

#ifdef __cplusplus
}
#endif
#endif
