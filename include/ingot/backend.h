/* The backend seam: the op table a device backend fills, the argument block
 * every kernel receives, and registration. Core checks arguments, computes
 * output shapes and dtypes and allocates outputs before calling a kernel;
 * kernels only compute. Backends live in src/<name>/ (cpu, cuda) and may be
 * registered from outside the library (a test does). */
#ifndef INGOT_BACKEND_H
#define INGOT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "error.h"
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every dispatched op: X(ENUM, "name"). Views and shape bookkeeping are core
 * code and never reach a backend. */
#define INGOT_OP_LIST(X)                                                                   \
  X(COPY, "copy")                                                                          \
  X(FILL, "fill")                                                                          \
  X(ARANGE, "arange")                                                                      \
  X(LINSPACE, "linspace")                                                                  \
  X(EYE, "eye")                                                                            \
  X(RAND, "rand")                                                                          \
  X(RANDN, "randn")                                                                        \
  X(RANDINT, "randint")                                                                    \
  X(NEG, "neg")                                                                            \
  X(ABS, "abs")                                                                            \
  X(SIGN, "sign")                                                                          \
  X(EXP, "exp")                                                                            \
  X(EXP2, "exp2")                                                                          \
  X(LOG, "log")                                                                            \
  X(LOG2, "log2")                                                                          \
  X(LOG1P, "log1p")                                                                        \
  X(EXPM1, "expm1")                                                                        \
  X(SQRT, "sqrt")                                                                          \
  X(RSQRT, "rsqrt")                                                                        \
  X(RECIPROCAL, "reciprocal")                                                              \
  X(SIN, "sin")                                                                            \
  X(COS, "cos")                                                                            \
  X(TAN, "tan")                                                                            \
  X(TANH, "tanh")                                                                          \
  X(SIGMOID, "sigmoid")                                                                    \
  X(SILU, "silu")                                                                          \
  X(GELU, "gelu")                                                                          \
  X(GELU_TANH, "gelu_tanh")                                                                \
  X(RELU, "relu")                                                                          \
  X(ERF, "erf")                                                                            \
  X(FLOOR, "floor")                                                                        \
  X(CEIL, "ceil")                                                                          \
  X(ROUND, "round")                                                                        \
  X(TRUNC, "trunc")                                                                        \
  X(ISNAN, "isnan")                                                                        \
  X(ISINF, "isinf")                                                                        \
  X(ISFINITE, "isfinite")                                                                  \
  X(LOGICAL_NOT, "logical_not")                                                            \
  X(BITWISE_NOT, "bitwise_not")                                                            \
  X(ADD, "add")                                                                            \
  X(SUB, "sub")                                                                            \
  X(MUL, "mul")                                                                            \
  X(DIV, "div")                                                                            \
  X(FLOOR_DIVIDE, "floor_divide")                                                          \
  X(REMAINDER, "remainder")                                                                \
  X(POW, "pow")                                                                            \
  X(ATAN2, "atan2")                                                                        \
  X(MAXIMUM, "maximum")                                                                    \
  X(MINIMUM, "minimum")                                                                    \
  X(EQ, "eq")                                                                              \
  X(NE, "ne")                                                                              \
  X(LT, "lt")                                                                              \
  X(LE, "le")                                                                              \
  X(GT, "gt")                                                                              \
  X(GE, "ge")                                                                              \
  X(LOGICAL_AND, "logical_and")                                                            \
  X(LOGICAL_OR, "logical_or")                                                              \
  X(LOGICAL_XOR, "logical_xor")                                                            \
  X(BITWISE_AND, "bitwise_and")                                                            \
  X(BITWISE_OR, "bitwise_or")                                                              \
  X(BITWISE_XOR, "bitwise_xor")                                                            \
  X(LEFT_SHIFT, "left_shift")                                                              \
  X(RIGHT_SHIFT, "right_shift")                                                            \
  X(WHERE, "where")                                                                        \
  X(CLAMP, "clamp")                                                                        \
  X(SUM, "sum")                                                                            \
  X(MEAN, "mean")                                                                          \
  X(PROD, "prod")                                                                          \
  X(AMAX, "amax")                                                                          \
  X(AMIN, "amin")                                                                          \
  X(MAX_DIM, "max_dim")                                                                    \
  X(MIN_DIM, "min_dim")                                                                    \
  X(ARGMAX, "argmax")                                                                      \
  X(ARGMIN, "argmin")                                                                      \
  X(VAR, "var")                                                                            \
  X(STD, "std")                                                                            \
  X(NORM, "norm")                                                                          \
  X(LOGSUMEXP, "logsumexp")                                                                \
  X(ANY, "any")                                                                            \
  X(ALL, "all")                                                                            \
  X(CUMSUM, "cumsum")                                                                      \
  X(CUMPROD, "cumprod")                                                                    \
  X(SOFTMAX, "softmax")                                                                    \
  X(LOG_SOFTMAX, "log_softmax")                                                            \
  X(MATMUL, "matmul")                                                                      \
  X(CAT, "cat")                                                                            \
  X(FLIP, "flip")                                                                          \
  X(ROLL, "roll")                                                                          \
  X(REPEAT, "repeat")                                                                      \
  X(TRIL, "tril")                                                                          \
  X(TRIU, "triu")                                                                          \
  X(INDEX_SELECT, "index_select")                                                          \
  X(GATHER, "gather")                                                                      \
  X(SCATTER, "scatter")                                                                    \
  X(SCATTER_ADD, "scatter_add")                                                            \
  X(INDEX_PUT, "index_put")                                                                \
  X(MASKED_FILL, "masked_fill")                                                            \
  X(MASKED_SELECT, "masked_select")                                                        \
  X(NONZERO, "nonzero")                                                                    \
  X(EMBEDDING, "embedding")                                                                \
  X(TOPK, "topk")                                                                          \
  X(SORT, "sort")                                                                          \
  X(SCALED_MM, "scaled_mm")                                                                \
  /* linear algebra (contracts in src/core/ops_linalg*.c) */                               \
  X(LU_FACTOR, "lu_factor")                                                                \
  X(LU_UNPACK, "lu_unpack")                                                                \
  X(LU_SOLVE, "lu_solve")                                                                  \
  X(SOLVE_TRIANGULAR, "solve_triangular")                                                  \
  X(INV, "inv")                                                                            \
  X(DET, "det")                                                                            \
  X(CHOLESKY, "cholesky")                                                                  \
  X(CHOLESKY_SOLVE, "cholesky_solve")                                                      \
  X(QR, "qr")                                                                              \
  X(HOUSEHOLDER_PRODUCT, "householder_product")                                            \
  X(SVD, "svd")                                                                            \
  X(EIGH, "eigh")                                                                          \
  X(LSTSQ, "lstsq")                                                                        \
  X(CONJ, "conj")                                                                          \
  /* fused transformer ops (ingot/nn.h, contracts in src/core/ops_nn.c) */                \
  X(QMATMUL, "qmatmul")                                                                    \
  X(QGET_ROWS, "qget_rows")                                                                \
  X(RMS_NORM, "rms_norm")                                                                  \
  X(SWIGLU, "swiglu")                                                                      \
  /* model runtime decode path (include/ingot/attention.h, ingot_sample_tokens) */         \
  X(ROPE, "rope")                                                                          \
  X(KV_CACHE_WRITE, "kv_cache_write")                                                      \
  X(ATTENTION_CACHED, "attention_cached")                                                  \
  X(ROPE_KV_WRITE, "rope_kv_write")                                                        \
  X(QMATMUL_ROPE_KV, "qmatmul_rope_kv")                                                    \
  X(ROPE_KV_ATTENTION, "rope_kv_attention")                                                \
  X(QMATMUL_ROPE_KV_ATTENTION, "qmatmul_rope_kv_attention")                                \
  X(SAMPLE_TOKENS, "sample_tokens")                                                        \
  /* mixture of experts (src/core/ops_moe.c) */                                            \
  X(MOE_ROUTE, "moe_route")                                                                \
  X(MOE_GATE_UP, "moe_gate_up")                                                            \
  X(MOE_DOWN, "moe_down")                                                                  \
  X(MOE_BLOCK, "moe_block")

typedef enum ingot_op {
#define INGOT_OP_ENUM(e, s) INGOT_OP_##e,
  INGOT_OP_LIST(INGOT_OP_ENUM)
#undef INGOT_OP_ENUM
      INGOT_OP_COUNT
} ingot_op;

/* Name of an op as the support table and errors print it. */
const char *ingot_op_name(ingot_op op);

#define INGOT_OP_MAX_IN 8
#define INGOT_OP_MAX_OUT 4

/* What a kernel receives. Inputs may be strided (any strides, offset) and
 * already broadcast to the output shape where the op is elementwise; outputs
 * are fresh and contiguous, allocated by core on the inputs' device, unless
 * the op's comment in src/core/ says otherwise (ops with data-dependent sizes
 * allocate out[0] themselves). The meaning of iarg/farg/dims is per op and
 * written beside each op's front in src/core/. */
typedef struct ingot_op_args {
  ingot_op op;
  int nin, nout;
  ingot_tensor *in[INGOT_OP_MAX_IN];
  ingot_tensor *out[INGOT_OP_MAX_OUT];
  int64_t iarg[INGOT_MAX_DIMS];
  double farg[4];
  uint32_t dims; /* bitmask of dims (reductions, flip, ...) */
} ingot_op_args;

typedef ingot_status (*ingot_kernel_fn)(ingot_op_args *args);

/* Streams, events, memory and graphs of a backend (include/ingot/stream.h
 * dispatches here). Stream and event handles are opaque to core; the NULL
 * stream handle is the device's default stream. Query functions return 1
 * (done), 0 (busy) or -1 (error set). A backend without this table gets
 * trivial synchronous streams and events. */
typedef struct ingot_runtime_ops {
  ingot_status (*stream_create)(int index, void **stream);
  ingot_status (*stream_destroy)(int index, void *stream);
  /* The calling thread's current stream on the device (what kernels use). */
  ingot_status (*set_current_stream)(int index, void *stream);
  ingot_status (*stream_synchronize)(int index, void *stream);
  int (*stream_query)(int index, void *stream);
  ingot_status (*stream_wait_event)(int index, void *stream, void *event);
  ingot_status (*event_create)(int index, bool timing, void **event);
  ingot_status (*event_destroy)(int index, void *event);
  ingot_status (*event_record)(int index, void *event, void *stream);
  int (*event_query)(int index, void *event);
  ingot_status (*event_synchronize)(int index, void *event);
  ingot_status (*event_elapsed_ms)(int index, void *start, void *end, float *ms);
  /* Memory: stats of the device allocator, cache and limits. */
  ingot_status (*memory_stats)(int index, ingot_memory_stats *out);
  ingot_status (*reset_peak_stats)(int index);
  ingot_status (*empty_cache)(int index);
  ingot_status (*set_memory_fraction)(int index, double fraction);
  /* ptr: a pointer returned by alloc, also used by work on stream. */
  ingot_status (*record_stream)(int index, void *ptr, void *stream);
  /* Page-locked host memory (NULL + error on failure). */
  void *(*host_alloc)(size_t nbytes);
  void (*host_free)(void *ptr);
  /* Capture work queued on stream (never the default stream) into a graph. */
  ingot_status (*graph_begin)(int index, void *stream);
  ingot_status (*graph_end)(int index, void *stream, void **graph);
  ingot_status (*graph_replay)(int index, void *graph, void *stream);
  ingot_status (*graph_destroy)(int index, void *graph);
  /* Device-to-host copy queued on the current stream, no wait (dst pinned). */
  ingot_status (*copy_to_host_async)(int index, void *dst, const void *src, size_t nbytes);
  /* Start (start) or stop the capture range of an attached profiler. */
  ingot_status (*profiler_range)(int index, bool start);
} ingot_runtime_ops;

typedef struct ingot_backend {
  const char *name; /* "cpu", "cuda" */
  ingot_device_kind kind;
  int (*device_count)(void);
  int (*device_info)(int index, ingot_device_info *info);
  /* Raw memory: alloc returns NULL and sets an error on failure. */
  void *(*alloc)(int index, size_t nbytes);
  void (*free)(int index, void *ptr, size_t nbytes);
  /* Copies between host and device memory and within the device. */
  ingot_status (*copy_to_host)(int index, void *dst, const void *src, size_t nbytes);
  ingot_status (*copy_from_host)(int index, void *dst, const void *src, size_t nbytes);
  ingot_status (*copy_on_device)(int index, void *dst, const void *src, size_t nbytes);
  ingot_status (*synchronize)(int index);
  ingot_kernel_fn kernels[INGOT_OP_COUNT];
  /* Streams, events, memory statistics and graphs (NULL: trivial, synchronous). */
  const ingot_runtime_ops *runtime;
} ingot_backend;

/* Register (or replace, with NULL to remove) the backend of a device kind.
 * The table must outlive its registration. */
ingot_status ingot_backend_register(const ingot_backend *backend);
const ingot_backend *ingot_backend_get(ingot_device_kind kind);

/* For kernels: address of t's first element (device memory on devices). */
void *ingot_tensor_data(const ingot_tensor *t);
/* Set a failure message from a backend (printf-style); returns status. */
ingot_status ingot_set_error(ingot_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
