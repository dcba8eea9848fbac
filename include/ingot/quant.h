/* GGML block formats (as stored in GGUF files) on the CPU: sizes, bit-exact
 * dequantisation (ggml's dequantize_row_*), and a matrix-vector product that
 * reads the quantised blocks directly (the decode hot path). */
#ifndef INGOT_QUANT_H
#define INGOT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids as in GGUF files */
enum {
  INGOT_GGML_F32 = 0,
  INGOT_GGML_F16 = 1,
  INGOT_GGML_Q4_0 = 2,
  INGOT_GGML_Q4_1 = 3,
  INGOT_GGML_Q5_0 = 6,
  INGOT_GGML_Q5_1 = 7,
  INGOT_GGML_Q8_0 = 8,
  INGOT_GGML_Q4_K = 12,
  INGOT_GGML_Q5_K = 13,
  INGOT_GGML_Q6_K = 14,
  INGOT_GGML_BF16 = 30
};

/* "q4_1", ...; NULL if unknown. */
const char *ingot_ggml_type_name(int type);
/* Elements per block (1 for F32/F16/BF16, 32, 256); 0 if unknown. */
int64_t ingot_ggml_block_size(int type);
/* Bytes per block; 0 if unknown. */
size_t ingot_ggml_type_size(int type);
/* Bytes of a row of ncols (a multiple of the block size); 0 if invalid. */
size_t ingot_ggml_row_size(int type, int64_t ncols);
/* n elements (a multiple of the block size) to float32. */
ingot_status ingot_ggml_dequantize(int type, const void *src, float *dst, int64_t n);
/* y[j*rows + r] = sum_c W[r, c] * x[j*cols + c] for j < nx (1..64): W given as
 * rows of quantised blocks (row r at (char*)w + r*row_size); multithreaded
 * over rows; reads the blocks directly (no dequantised copy of W). */
ingot_status ingot_ggml_matvec(int type, const void *w, int64_t rows, int64_t cols, const float *x,
                               int64_t nx, float *y);
/* ingot_ggml_matvec with row r at (char*)w + r*row_stride (row_stride >= the
 * row's bytes: padded rows; the padding is never read). */
ingot_status ingot_ggml_matvec_strided(int type, const void *w, size_t row_stride, int64_t rows,
                                       int64_t cols, const float *x, int64_t nx, float *y);
/* The same product with x rounded to int8 per 32-element block as llama.cpp
 * does (ggml's quantize_row_q8_1_ref: d = max|x|/127 and s = d * sum(q) kept
 * as f16, q = round(x / d)), then integer dot products per weight block:
 * d_w * d_x * sum(q_w q_x) (+ m_w * s_x for Q4_1). Faster and less exact
 * than ingot_ggml_matvec (each x off by up to 1/254 of its block's max |x|). Q4_0, Q4_1
 * and Q8_0; any other type falls back to ingot_ggml_matvec. */
ingot_status ingot_ggml_matvec_q8(int type, const void *w, int64_t rows, int64_t cols,
                                  const float *x, int64_t nx, float *y);

#ifdef __cplusplus
}
#endif
#endif
