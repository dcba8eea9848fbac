/* Matrix products: torch.matmul's shape rules (1-D promotion, batch
 * broadcasting, dtype promotion) and bmm, reduced to one batched kernel.
 *
 * Kernel contract for INGOT_OP_MATMUL:
 *   in[0]  A: [B, n, k], any strides (batch stride may be 0 for broadcast)
 *   in[1]  Bm: [B, k, m], any strides
 *   out[0] C: [B, n, m], fresh and contiguous
 *   All three have the same dtype: f16/bf16/f32/f64/c64/c128 or an integer
 *   type (u8..i64; integer products accumulate in int64 and wrap to the
 *   dtype). C[b] = A[b] · Bm[b]; k == 0 writes zeros. No iarg/farg. */
#include <string.h>

#include "internal.h"

static bool matmul_dtype_ok(const char *op, ingot_dtype dt) {
  if (dt == INGOT_BOOL || dt == INGOT_F8E4M3FN || dt == INGOT_F8E5M2) {
    ingot_set_error(INGOT_ERR_DTYPE, "%s: not implemented for '%s'", op, ingot_dtype_name(dt));
    return false;
  }
  return true;
}

/* t as dt: a new reference to t when it already has that dtype. */
static ingot_tensor *as_dtype(const ingot_tensor *t, ingot_dtype dt) {
  return t->dtype == dt ? ingot_retain((ingot_tensor *)t) : ingot_cast(t, dt);
}

/* Run the kernel on 3-D operands [B,n,k]·[B,k,m] into a new [B,n,m]. */
static ingot_tensor *run_bmm(ingot_tensor *a3, ingot_tensor *b3) {
  int64_t shape[3] = {a3->shape[0], a3->shape[1], b3->shape[2]};
  ingot_tensor *out = tensor_new(3, shape, a3->dtype, a3->device);
  if (!out) return NULL;
  ingot_op_args args = {.op = INGOT_OP_MATMUL, .nin = 2, .nout = 1};
  args.in[0] = a3;
  args.in[1] = b3;
  args.out[0] = out;
  return dispatch_out(&args);
}

static void *shape_mismatch(int64_t n, int64_t k, int64_t k2, int64_t m) {
  return ingot_fail(INGOT_ERR_SHAPE,
                    "matmul: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and "
                    "%lldx%lld)",
                    (long long)n, (long long)k, (long long)k2, (long long)m);
}

/* Operands after 1-D promotion: a2 is [..., n, k], b2 is [..., k, m]. */
static ingot_tensor *matmul_nd(const ingot_tensor *a2, const ingot_tensor *b2, int *out_ndim,
                               int64_t *out_shape) {
  int na = a2->ndim, nb = b2->ndim;
  int64_t n = a2->shape[na - 2], k = a2->shape[na - 1];
  int64_t k2 = b2->shape[nb - 2], m = b2->shape[nb - 1];
  if (k != k2) return shape_mismatch(n, k, k2, m);
  int nbatch;
  int64_t batch[INGOT_MAX_DIMS];
  if (!broadcast_shapes("matmul", na - 2, a2->shape, nb - 2, b2->shape, &nbatch, batch))
    return NULL;
  int64_t nb_total = shape_numel(nbatch, batch);
  memcpy(out_shape, batch, (size_t)nbatch * sizeof *batch);
  out_shape[nbatch] = n;
  out_shape[nbatch + 1] = m;
  *out_ndim = nbatch + 2;

  ingot_tensor *a3 = NULL, *b3 = NULL, *r = NULL;
  if (nb == 2 && na > 2) {
    /* A shared right matrix: fold a's batch into its rows, one large GEMM. */
    a3 = ingot_reshape(a2, 3, (int64_t[]){1, nb_total * n, k});
    b3 = ingot_reshape(b2, 3, (int64_t[]){1, k, m});
  } else {
    int64_t ea[INGOT_MAX_DIMS], eb[INGOT_MAX_DIMS];
    memcpy(ea, batch, (size_t)nbatch * sizeof *batch);
    memcpy(eb, batch, (size_t)nbatch * sizeof *batch);
    ea[nbatch] = n, ea[nbatch + 1] = k;
    eb[nbatch] = k, eb[nbatch + 1] = m;
    ingot_tensor *xa = ingot_expand(a2, nbatch + 2, ea);
    ingot_tensor *xb = ingot_expand(b2, nbatch + 2, eb);
    a3 = ingot_reshape(xa, 3, (int64_t[]){nb_total, n, k});
    b3 = ingot_reshape(xb, 3, (int64_t[]){nb_total, k, m});
    ingot_release(xa);
    ingot_release(xb);
  }
  if (a3 && b3) r = run_bmm(a3, b3);
  ingot_release(a3);
  ingot_release(b3);
  return r;
}

ingot_tensor *ingot_matmul(const ingot_tensor *a, const ingot_tensor *b) {
  const ingot_tensor *ts[2] = {a, b};
  if (!check_tensors("matmul", 2, ts)) return NULL;
  if (a->ndim == 0 || b->ndim == 0)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "matmul: both arguments need to be at least 1D, but they "
                      "are %dD and %dD",
                      a->ndim, b->ndim);
  ingot_dtype dt = result_type("matmul", 2, ts);
  if (dt == INGOT_DTYPE_INVALID || !matmul_dtype_ok("matmul", dt)) return NULL;
  if (a->ndim == 1 && b->ndim == 1 && a->shape[0] != b->shape[0])
    return ingot_fail(INGOT_ERR_SHAPE,
                      "matmul: inconsistent tensor size, expected tensor [%lld] "
                      "and src [%lld] to have the same number of elements, but got %lld and %lld "
                      "elements respectively",
                      (long long)a->shape[0], (long long)b->shape[0], (long long)a->shape[0],
                      (long long)b->shape[0]);

  ingot_tensor *ca = as_dtype(a, dt), *cb = as_dtype(b, dt);
  ingot_tensor *a2 = ca && a->ndim == 1 ? ingot_unsqueeze(ca, 0) : ingot_retain(ca);
  ingot_tensor *b2 = cb && b->ndim == 1 ? ingot_unsqueeze(cb, 1) : ingot_retain(cb);
  ingot_release(ca);
  ingot_release(cb);
  ingot_tensor *result = NULL;
  if (a2 && b2) {
    int nd = 0;
    int64_t shape[INGOT_MAX_DIMS];
    ingot_tensor *r = matmul_nd(a2, b2, &nd, shape);
    if (r) {
      /* Drop the dims that 1-D operands gained: n (from a) and m (from b). */
      int64_t fin[INGOT_MAX_DIMS];
      int nf = 0;
      for (int i = 0; i < nd - 2; i++) fin[nf++] = shape[i];
      if (a->ndim > 1) fin[nf++] = shape[nd - 2];
      if (b->ndim > 1) fin[nf++] = shape[nd - 1];
      result = ingot_reshape(r, nf, fin);
      ingot_release(r);
    }
  }
  ingot_release(a2);
  ingot_release(b2);
  return result;
}

ingot_tensor *ingot_bmm(const ingot_tensor *a, const ingot_tensor *b) {
  const ingot_tensor *ts[2] = {a, b};
  if (!check_tensors("bmm", 2, ts)) return NULL;
  if (a->ndim != 3) return ingot_fail(INGOT_ERR_SHAPE, "bmm: batch1 must be a 3D tensor");
  if (b->ndim != 3) return ingot_fail(INGOT_ERR_SHAPE, "bmm: batch2 must be a 3D tensor");
  if (b->shape[0] != a->shape[0] || b->shape[1] != a->shape[2])
    return ingot_fail(INGOT_ERR_SHAPE,
                      "bmm: expected size for first two dimensions of batch2 "
                      "tensor to be: [%lld, %lld] but got: [%lld, %lld]",
                      (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                      (long long)b->shape[1]);
  ingot_dtype dt = result_type("bmm", 2, ts);
  if (dt == INGOT_DTYPE_INVALID || !matmul_dtype_ok("bmm", dt)) return NULL;
  ingot_tensor *ca = as_dtype(a, dt), *cb = as_dtype(b, dt);
  ingot_tensor *r = ca && cb ? run_bmm(ca, cb) : NULL;
  ingot_release(ca);
  ingot_release(cb);
  return r;
}
