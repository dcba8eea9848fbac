/* Tensor creation: empty/zeros/ones/full, ranges, eye, host buffers and
 * random draws. Values are written by the device's FILL/ARANGE/... kernels. */
#include <math.h>

#include "internal.h"

static ingot_tensor *run_fill(ingot_tensor *t, ingot_op op, double f0, double f1,
                              const char *name) {
  if (!t) return fail_in(name);
  ingot_op_args a = {.op = op, .nout = 1, .farg = {f0, f1}};
  a.out[0] = t;
  return dispatch_out(&a);
}

ingot_tensor *ingot_empty(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  ingot_tensor *t = tensor_new(ndim, shape, dt, dev);
  return t ? t : fail_in("empty");
}

static ingot_tensor *filled(const char *name, int ndim, const int64_t *shape, double value,
                            ingot_dtype dt, ingot_device dev) {
  return run_fill(tensor_new(ndim, shape, dt, dev), INGOT_OP_FILL, value, 0, name);
}

ingot_tensor *ingot_full(int ndim, const int64_t *shape, double value, ingot_dtype dt,
                         ingot_device dev) {
  return filled("full", ndim, shape, value, dt, dev);
}

ingot_tensor *ingot_zeros(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  return filled("zeros", ndim, shape, 0.0, dt, dev);
}

ingot_tensor *ingot_ones(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  return filled("ones", ndim, shape, 1.0, dt, dev);
}

ingot_tensor *ingot_scalar(double value, ingot_dtype dt, ingot_device dev) {
  return filled("scalar", 0, NULL, value, dt, dev);
}

ingot_tensor *ingot_empty_like(const ingot_tensor *t) {
  if (!check_tensors("empty_like", 1, &t)) return NULL;
  return tensor_new(t->ndim, t->shape, t->dtype, t->device);
}

ingot_tensor *ingot_zeros_like(const ingot_tensor *t) {
  if (!check_tensors("zeros_like", 1, &t)) return NULL;
  return ingot_full_like(t, 0.0);
}

ingot_tensor *ingot_full_like(const ingot_tensor *t, double value) {
  if (!check_tensors("full_like", 1, &t)) return NULL;
  return ingot_full(t->ndim, t->shape, value, t->dtype, t->device);
}

ingot_tensor *ingot_arange(double start, double end, double step, ingot_dtype dt,
                           ingot_device dev) {
  if (!isfinite(start) || !isfinite(end) || !isfinite(step))
    return ingot_fail(INGOT_ERR_ARG, "arange: unsupported range %g -> %g (step %g)", start, end,
                      step);
  if (step == 0) return ingot_fail(INGOT_ERR_ARG, "arange: step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start))
    return ingot_fail(INGOT_ERR_ARG, "arange: upper bound and larger bound inconsistent with "
                      "step sign");
  double n = ceil((end - start) / step);
  if (n > 9.0e18) return ingot_fail(INGOT_ERR_ARG, "arange: too many elements");
  int64_t len = (int64_t)n;
  return run_fill(tensor_new(1, &len, dt, dev), INGOT_OP_ARANGE, start, step, "arange");
}

ingot_tensor *ingot_linspace(double start, double end, int64_t steps, ingot_dtype dt,
                             ingot_device dev) {
  if (steps < 0) return ingot_fail(INGOT_ERR_ARG, "linspace: number of steps must be non-negative");
  return run_fill(tensor_new(1, &steps, dt, dev), INGOT_OP_LINSPACE, start, end, "linspace");
}

ingot_tensor *ingot_eye(int64_t n, int64_t m, ingot_dtype dt, ingot_device dev) {
  if (m < 0) m = n;
  if (n < 0) return ingot_fail(INGOT_ERR_ARG, "eye: n must be non-negative, got %lld", (long long)n);
  return run_fill(tensor_new(2, (int64_t[]){n, m}, dt, dev), INGOT_OP_EYE, 0, 0, "eye");
}

/* ---- random ---- */
static _Atomic uint64_t rng_seed = 67280421310721u;
static _Atomic uint64_t rng_offset = 0;

void ingot_manual_seed(uint64_t seed) {
  atomic_store(&rng_seed, seed);
  atomic_store(&rng_offset, 0);
}

static ingot_tensor *draw(ingot_op op, int64_t low, int64_t high, int ndim, const int64_t *shape,
                          ingot_dtype dt, ingot_device dev) {
  ingot_tensor *t = tensor_new(ndim, shape, dt, dev);
  if (!t) return fail_in(ingot_op_name(op));
  int64_t n = ingot_numel(t) * (ingot_dtype_is_complex(dt) ? 2 : 1);
  /* Reserve counter blocks: 4 values a block (randint: 2). */
  uint64_t blocks = (uint64_t)(op == INGOT_OP_RANDINT ? (n + 1) / 2 : (n + 3) / 4);
  ingot_op_args a = {.op = op, .nout = 1};
  a.iarg[0] = (int64_t)atomic_load(&rng_seed);
  a.iarg[1] = (int64_t)atomic_fetch_add(&rng_offset, blocks);
  a.iarg[2] = low;
  a.iarg[3] = high;
  a.out[0] = t;
  return dispatch_out(&a);
}

ingot_tensor *ingot_rand(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  if (!ingot_dtype_is_floating(dt) && !ingot_dtype_is_complex(dt))
    return ingot_fail(INGOT_ERR_DTYPE, "rand: expected a floating dtype, got %s",
                      ingot_dtype_name(dt));
  return draw(INGOT_OP_RAND, 0, 0, ndim, shape, dt, dev);
}

ingot_tensor *ingot_randn(int ndim, const int64_t *shape, ingot_dtype dt, ingot_device dev) {
  if (!ingot_dtype_is_floating(dt) && !ingot_dtype_is_complex(dt))
    return ingot_fail(INGOT_ERR_DTYPE, "randn: expected a floating dtype, got %s",
                      ingot_dtype_name(dt));
  return draw(INGOT_OP_RANDN, 0, 0, ndim, shape, dt, dev);
}

ingot_tensor *ingot_randint(int64_t low, int64_t high, int ndim, const int64_t *shape,
                            ingot_dtype dt, ingot_device dev) {
  if (high <= low)
    return ingot_fail(INGOT_ERR_ARG, "randint: expected low < high, got [%lld, %lld)",
                      (long long)low, (long long)high);
  if (dt == INGOT_BOOL || ingot_dtype_is_complex(dt))
    return ingot_fail(INGOT_ERR_DTYPE, "randint: unsupported dtype %s", ingot_dtype_name(dt));
  return draw(INGOT_OP_RANDINT, low, high, ndim, shape, dt, dev);
}

ingot_tensor *wrapped_scalar(double value, ingot_device dev) {
  bool integral = isfinite(value) && value == trunc(value) && fabs(value) < 9.0e18;
  ingot_tensor *t = ingot_scalar(value, integral ? INGOT_I64 : INGOT_F64, dev);
  if (t) t->wrapped_number = true;
  return t;
}
