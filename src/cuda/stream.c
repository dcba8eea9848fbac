/* Current streams: per device and per thread; the legacy default stream
 * until the caller sets another. */
#include <cuda_runtime_api.h>

#include "cuda_kernels.h"

#define MAX_DEVICES 64

static _Thread_local cudaStream_t current[MAX_DEVICES];

cudaStream_t cuda_current_stream(int device) {
  return device >= 0 && device < MAX_DEVICES ? current[device] : 0;
}

void *cuda_scratch_alloc(int device, size_t nbytes, cudaStream_t s) {
  (void)s;
  void *p = NULL;
  if (cuda_check(cudaSetDevice(device), "cudaSetDevice")) return NULL;
  if (cuda_check(cudaMalloc(&p, nbytes ? nbytes : 1), "cudaMalloc (scratch)")) return NULL;
  return p;
}

void cuda_scratch_free(int device, void *p, cudaStream_t s) {
  /* The work that reads p is queued on s: wait for it before returning the
   * memory (the caching allocator replaces this with stream-ordered reuse). */
  cudaSetDevice(device);
  cudaStreamSynchronize(s);
  cudaFree(p);
}
