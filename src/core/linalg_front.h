/* Helpers shared by the linear-algebra fronts (src/core/ops_linalg*.c):
 * argument checks, batch broadcasting and running a multi-output op. */
#ifndef INGOT_CORE_LINALG_FRONT_H
#define INGOT_CORE_LINALG_FRONT_H

#include "internal.h"

/* True when A is a batch of matrices (ndim >= 2) of f32/f64/c64/c128, square
 * when asked; else sets an error naming op. */
bool la_check(const char *op, const ingot_tensor *A, bool square);
/* True when A and B have one dtype (else an error naming op). */
bool la_same_dtype(const char *op, const ingot_tensor *A, const ingot_tensor *B);
/* Real dtype of a linalg dtype (f32 for c64, f64 for c128). */
ingot_dtype la_real_dtype(ingot_dtype dt);
/* Views of A and B whose batch dims (all but the last `am` and `bm` dims)
 * are broadcast to one shape, written to batch / *nbatch when given. */
bool la_broadcast(const char *op, const ingot_tensor *A, int am, const ingot_tensor *B, int bm,
                  ingot_tensor **Ae, ingot_tensor **Be, int *nbatch, int64_t *batch);
/* Fresh tensor of shape batch[0..nb) + tail[0..nt) on dev. */
ingot_tensor *la_new(int nb, const int64_t *batch, int nt, const int64_t *tail, ingot_dtype dt,
                     ingot_device dev);
/* Dispatch a (outputs set up); on failure release every output, prefix the
 * message with op and return false. */
bool la_run(const char *op, ingot_op_args *a);
/* inv without the singularity error: *info int32 [*] is each member's
 * getrf info (nonzero: singular, its inverse unspecified). */
ingot_tensor *linalg_inv_ex(const ingot_tensor *A, ingot_tensor **info);
/* Hand out[i] to *slot (or release it when slot is NULL). */
void la_give(ingot_tensor *t, ingot_tensor **slot);

#endif
