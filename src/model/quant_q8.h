/* The int8-activation matvec of several matrices at once (quant_q8.c). */
#ifndef INGOT_QUANT_Q8_H
#define INGOT_QUANT_Q8_H

#include <stdint.h>

#include "ingot/backend.h"

#define Q8_MANY_MAX 4

/* y[i] = W[i] x for n <= Q8_MANY_MAX matrices of one type (Q4_0, Q4_1 or
 * Q8_0) and width cols sharing x [nx, cols] (a layer's Q, K, V or gate, up):
 * x quantised once, one worker-pool job over all rows. Arguments as checked
 * by ingot_ggml_matvec_q8 (cols > 0 a multiple of 32, 1 <= nx <= 64, rows >= 0). */
ingot_status q8_matvec_many(int n, int type, const void *const *w, const int64_t *rows,
                            int64_t cols, const float *x, int64_t nx, float *const *y);

#endif
