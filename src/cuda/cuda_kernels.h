/* extern "C" launchers of the CUDA kernels (.cu files in this folder). */
#ifndef INGOT_CUDA_KERNELS_H
#define INGOT_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ingot/backend.h"
#include "ingot/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread's current stream on a device (src/cuda/stream.c). */
cudaStream_t cuda_current_stream(int device);
/* Temporary device memory for a kernel, ordered on stream s (freed with
 * cuda_scratch_free on the same stream once the work using it is queued). */
void *cuda_scratch_alloc(int device, size_t nbytes, cudaStream_t s);
void cuda_scratch_free(int device, void *p, cudaStream_t s);

/* Kernel families (one .cu file each) fill their ops into the table. */
void cuda_register_elementwise(ingot_backend *be);
void cuda_register_reduce(ingot_backend *be);
void cuda_register_shape(ingot_backend *be);
void cuda_register_index(ingot_backend *be);
void cuda_register_sort(ingot_backend *be);
void cuda_register_matmul(ingot_backend *be);
void cuda_register_attention(ingot_backend *be);
void cuda_register_sample(ingot_backend *be);
void cuda_register_nn(ingot_backend *be);    /* nn.cu: RMS_NORM, SWIGLU */
void cuda_register_qgemv(ingot_backend *be); /* qgemv.cu: QMATMUL, QGET_ROWS, QMATMUL_ROPE_KV */

/* INGOT_OK when every index of idx (int64, contiguous, on the device) is in
 * [0, size); else INGOT_ERR_INDEX with embedding's message (src/cuda/index.cu:
 * one small D2H copy and a sync, skipped while capturing or with
 * INGOT_CUDA_CHECK_INDICES=0). */
ingot_status cuda_check_index_range(const char *op, const ingot_tensor *idx, int64_t size, int dim);
void cuda_register_moe(ingot_backend *be);
void cuda_register_moe_block(ingot_backend *be); /* moe_block.cu: MOE_BLOCK */

/* ATTENTION_CACHED for T > 1 query rows (src/cuda/attention_prefill.cu):
 * whether the tiled prefill kernel takes (T, head_dim D), and its launch on
 * s (q float32 [T, Hq, D], caches [ctx, Hkv, D] float32 or float16 (half),
 * pos int32 [T]; out float32 [T, Hq, D]). */
bool cuda_attention_prefill_handles(int T, int D);
/* y [m, n] f32 = x [m, k] . w [n, k]^T, x and w bf16 row-major, f32
 * accumulation, on stream s of device dev (cuBLASLt, src/cuda/matmul.cu);
 * *declined with INGOT_OK when cuBLASLt has no algorithm for it. */
ingot_status cuda_gemm_bf16_nt(int dev, cudaStream_t s, const void *x, const void *w, float *y,
                               int64_t m, int64_t n, int64_t k, bool *declined);
/* QMATMUL's y [M, N] = x [M, K] . deq(W)^T on bf16 tensor cores (f32
 * accumulation) when x has enough rows (src/cuda/qmatmul_prefill.cu): *done
 * false with nothing launched when it does not take the product. */
ingot_status cuda_qmatmul_prefill_bf16(const ingot_tensor *x, const ingot_tensor *w, int type,
                                       int64_t k, ingot_tensor *y, cudaStream_t s, bool *done);
cudaError_t cuda_attention_prefill(const float *q, const void *kc, const void *vc, bool half,
                                   const int32_t *pos, float *out, int T, int Hq, int Hkv, int D,
                                   int ctx, float scale, cudaStream_t s);

/* The multiprocessors of device dev when it can launch cooperative grids,
 * else -1 (also when the query fails); read once a device (src/cuda/cuda_backend.c). */
int cuda_coop_sms(int dev);
/* Map a CUDA error to an ingot status and message (INGOT_OK on success). */
ingot_status cuda_check(cudaError_t err, const char *what);
/* Make device current for this thread: cudaSetDevice only when cudaGetDevice
 * (a thread-local read in the runtime) says another one is (src/cuda/stream.c).
 * The _rt form returns the CUDA error (cleared) and sets no message. */
ingot_status cuda_use_device(int device);
cudaError_t cuda_use_device_rt(int device);
/* cuda_use_device for the device tensor t lives on (what every kernel entry does). */
static inline ingot_status cuda_use_device_of(const ingot_tensor *t) {
  return cuda_use_device(ingot_device_of(t).index);
}
/* Shape and per-operand strides (elements) of a two-operand op. */
typedef struct cuda_geom2 {
  int ndim;
  int64_t shape[8];
  int64_t stride[2][8]; /* [0] destination, [1] source */
} cuda_geom2;

/* dst[i] = (dst dtype) src[i] over the geometry g (n elements). */
cudaError_t cuda_copy_strided(void *dst, int dst_dt, const void *src, int src_dt,
                              const cuda_geom2 *g, int64_t n, cudaStream_t s);
/* Element-indexed generators (src/core/generate.h) into a contiguous out. */
cudaError_t cuda_generate(void *out, int op, int dt, int64_t n, int64_t cols, const double *farg,
                          const int64_t *iarg, cudaStream_t s);
/* Write n copies of an es-byte pattern (es = 1, 2, 4, 8 or 16) to dst. */
cudaError_t cuda_fill_pattern(void *dst, const void *pattern, int es, int64_t n, cudaStream_t s);

/* The in-graph timeline (timeline.cuh, a -DINGOT_TIMELINE=ON build): one
 * record per block of an instrumented kernel. */
#define CUDA_TL_MARKS 12 /* TL_MARK points a kernel at most */
typedef struct cuda_tl_rec {
  uint32_t kid, block, grid, nmarks;
  uint64_t t0, t1;              /* %globaltimer (ns) at entry and at thread 0's exit */
  uint64_t mark[CUDA_TL_MARKS]; /* TL_MARK points in between (nmarks of them) */
} cuda_tl_rec;
#define CUDA_TL_CAP (1u << 24)
/* The process's record buffer and counter on the device, allocated at the
 * first call when $INGOT_TIMELINE_OUT names the file written at exit; false
 * (nothing allocated) otherwise or in a build without the timeline. */
bool cuda_timeline_buffers(cuda_tl_rec **recs, unsigned long long **count);
/* Points every instrumented file's kernels at the buffer (backend setup). */
void cuda_timeline_attach_all(void);

#ifdef __cplusplus
}
#endif
#endif
