/* Host side of the in-graph timeline (timeline.cuh): the device buffer, and
 * the records written at exit as raw cuda_tl_rec structs (128 bytes each,
 * little endian; bench/timeline.py summarises them). A diagnostic: compiled
 * in with -DINGOT_TIMELINE=ON only. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_kernels.h"

#ifdef INGOT_TIMELINE
static cuda_tl_rec *tl_recs;
static unsigned long long *tl_count;
static const char *tl_path;

static void tl_dump(void) {
  unsigned long long n = 0;
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(&n, tl_count, sizeof n, cudaMemcpyDeviceToHost) != cudaSuccess)
    return;
  if (n > CUDA_TL_CAP) n = CUDA_TL_CAP;
  cuda_tl_rec *h = malloc(n * sizeof *h + 1);
  FILE *f = fopen(tl_path, "wb");
  if (h && f && cudaMemcpy(h, tl_recs, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess)
    fwrite(h, sizeof *h, n, f);
  if (f) fclose(f);
  free(h);
}

bool cuda_timeline_buffers(cuda_tl_rec **recs, unsigned long long **count) {
  static int state; /* 0: not read yet, 1: on, -1: off */
  if (!state) {
    tl_path = getenv("INGOT_TIMELINE_OUT");
    state = -1;
    if (tl_path && *tl_path &&
        cudaMalloc((void **)&tl_recs, (size_t)CUDA_TL_CAP * sizeof *tl_recs) == cudaSuccess &&
        cudaMalloc((void **)&tl_count, sizeof *tl_count) == cudaSuccess &&
        cudaMemset(tl_count, 0, sizeof *tl_count) == cudaSuccess) {
      state = 1;
      atexit(tl_dump);
    } else {
      (void)cudaGetLastError();
    }
  }
  *recs = tl_recs;
  *count = tl_count;
  return state > 0;
}

void cuda_tl_attach_gemv(void);
void cuda_tl_attach_gemv_tc(void);
void cuda_tl_attach_attention(void);
void cuda_tl_attach_moe_block(void);
void cuda_tl_attach_sample(void);
void cuda_tl_attach_qgemv(void);

void cuda_timeline_attach_all(void) {
  cuda_tl_rec *r;
  unsigned long long *c;
  if (!cuda_timeline_buffers(&r, &c)) return;
  cuda_tl_attach_gemv();
  cuda_tl_attach_gemv_tc();
  cuda_tl_attach_attention();
  cuda_tl_attach_moe_block();
  cuda_tl_attach_sample();
  cuda_tl_attach_qgemv();
}
#else
bool cuda_timeline_buffers(cuda_tl_rec **recs, unsigned long long **count) {
  *recs = NULL;
  *count = NULL;
  return false;
}

void cuda_timeline_attach_all(void) {}
#endif
