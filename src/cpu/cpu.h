/* CPU backend internals: the strided N-d loop every elementwise kernel runs
 * on, dtype dispatch macros and registration hooks for each kernel family. */
#ifndef INGOT_CPU_H
#define INGOT_CPU_H

#include <complex.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/internal.h"
#include "../core/numeric.h"

/* Inner loop over n elements; ptrs[k] is operand k's first element and
 * strides[k] its step in bytes. */
typedef void (*cpu_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Run fn over every element of nops same-shaped tensors (any strides), in
 * parallel when large. ts[0] is usually the output. */
void cpu_foreach(int nops, ingot_tensor *const *ts, cpu_loop_fn fn, void *ctx);

/* The same over raw operands: base pointers and byte strides per operand. */
void cpu_foreach_raw(int nops, char *const *base, const int64_t (*strides)[INGOT_MAX_DIMS],
                     int ndim, const int64_t *shape, cpu_loop_fn fn, void *ctx);

/* Minimum elements per thread before work is split. */
#define CPU_GRAIN 32768

/* Host memory (src/cpu/host_cache.c): large blocks are cached after free. */
void *cpu_host_alloc(size_t nbytes);
void cpu_host_free(void *p, size_t nbytes);
void cpu_host_empty_cache(void);

/* y = x * inv_rms(x) * w over one row of n (f32 accumulation; x and y of
 * dtype dt, w of wdt): the RMS_NORM kernel's row, shared by fused norms. */
void cpu_rms_row(const void *xr, ingot_dtype dt, const void *wp, ingot_dtype wdt, int64_t n,
                 float eps, void *yr);

/* Number of threads kernels may use. */
int cpu_threads(void);

/* Run kernel on float32 stand-ins for every f16/bf16/f8 input and output,
 * then round the results back into the real outputs. */
ingot_status cpu_via_f32(ingot_op_args *a, ingot_kernel_fn kernel);
/* True when dt is stored in 16 or 8 bits and computed in float32. */
static inline bool cpu_is_lowp(ingot_dtype dt) {
  return dt == INGOT_F16 || dt == INGOT_BF16 || dt == INGOT_F8E4M3FN || dt == INGOT_F8E5M2;
}
/* Write src into dst element by element (any strides, casting). */
ingot_status cpu_copy(ingot_tensor *dst, const ingot_tensor *src);

typedef float _Complex c64_t;
typedef double _Complex c128_t;

/* X(dtype enum, C type) for every dtype computed natively. */
#define CPU_INT_TYPES(X)                                                                   \
  X(INGOT_U8, uint8_t) X(INGOT_I8, int8_t) X(INGOT_I16, int16_t) X(INGOT_I32, int32_t)     \
  X(INGOT_I64, int64_t)
#define CPU_FLOAT_TYPES(X) X(INGOT_F32, float) X(INGOT_F64, double)
#define CPU_COMPLEX_TYPES(X) X(INGOT_C64, c64_t) X(INGOT_C128, c128_t)

/* INGOT_OK when every int64 index of idx (contiguous) is in [0, size), else
 * INGOT_ERR_INDEX naming op, the first bad index and dim (src/cpu/index.c). */
ingot_status cpu_check_index(const char *op, const ingot_tensor *idx, int64_t size, int d);

/* Registration of each kernel family into the CPU table (one file each). */
void cpu_register_copy(ingot_backend *be);
void cpu_register_unary(ingot_backend *be);
void cpu_register_binary(ingot_backend *be);
void cpu_register_reduce(ingot_backend *be);
void cpu_register_matmul(ingot_backend *be);
void cpu_register_shape(ingot_backend *be);
void cpu_register_index(ingot_backend *be);
void cpu_register_sort(ingot_backend *be);
void cpu_register_scaled_mm(ingot_backend *be);
void cpu_register_linalg(ingot_backend *be);
void cpu_register_linalg_decomp(ingot_backend *be);
void cpu_register_attention(ingot_backend *be);
void cpu_register_sample(ingot_backend *be);
void cpu_register_nn(ingot_backend *be);
void cpu_register_moe(ingot_backend *be);

#endif
