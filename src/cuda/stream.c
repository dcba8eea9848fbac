/* CUDA streams and events, the calling thread's current stream, kernel
 * scratch memory and the runtime table that include/ingot/stream.h reaches
 * through core (src/core/stream.c).
 *
 * - Current streams are per device and per thread; the legacy default stream
 *   (handle NULL) until the caller sets another. Every kernel launches on it.
 * - Streams made here are non-blocking (cudaStreamNonBlocking), as PyTorch's:
 *   they do not synchronise implicitly with the legacy default stream; order
 *   work between streams with events (ingot_stream_wait_event/stream).
 * - Scratch memory comes from the caching allocator on the kernel's stream,
 *   so a block freed on s is reused by later work on s with no host sync. */
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "allocator.h"
#include "cuda_kernels.h"

static _Thread_local cudaStream_t current[CUDA_MAX_DEVICES];

cudaStream_t cuda_current_stream(int device) {
  return device >= 0 && device < CUDA_MAX_DEVICES ? current[device] : 0;
}

void *cuda_scratch_alloc(int device, size_t nbytes, cudaStream_t s) {
  return cuda_caching_alloc(device, nbytes, s);
}

void cuda_scratch_free(int device, void *p, cudaStream_t s) {
  /* The block belongs to s (it was allocated there): the allocator hands it
   * only to work queued on s after this point (stream order). */
  (void)s;
  cuda_caching_free(device, p);
}

/* Not a cached copy of our own: other code in the process (user kernels, other
 * libraries) may set the device behind our back, and the runtime's own
 * thread-local answer costs nanoseconds, where cudaSetDevice costs far more. */
cudaError_t cuda_use_device_rt(int device) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == device) return cudaSuccess;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

ingot_status cuda_use_device(int device) {
  return cuda_check(cuda_use_device_rt(device), "cudaSetDevice");
}

static ingot_status set_dev(int index) { return cuda_use_device(index); }

static ingot_status rt_stream_create(int index, void **out) {
  ingot_status st = set_dev(index);
  if (st) return st;
  cudaStream_t s = NULL;
  st = cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  if (st) return st;
  *out = s;
  return INGOT_OK;
}

static ingot_status rt_stream_destroy(int index, void *stream) {
  if (!stream) return INGOT_OK; /* the default stream is never destroyed */
  ingot_status st = set_dev(index);
  if (st) return st;
  cudaStream_t s = (cudaStream_t)stream;
  /* Its work must finish first: blocks tagged with it become free to all. */
  st = cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cuda_caching_forget_stream(index, s);
  if (index >= 0 && index < CUDA_MAX_DEVICES && current[index] == s) current[index] = 0;
  ingot_status st2 = cuda_check(cudaStreamDestroy(s), "cudaStreamDestroy");
  return st ? st : st2;
}

static ingot_status rt_set_current(int index, void *stream) {
  if (index < 0 || index >= CUDA_MAX_DEVICES)
    return ingot_set_error(INGOT_ERR_DEVICE, "cuda:%d: device index out of range", index);
  current[index] = (cudaStream_t)stream;
  return INGOT_OK;
}

static ingot_status rt_stream_sync(int index, void *stream) {
  ingot_status st = set_dev(index);
  return st ? st : cuda_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

static int query_result(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    cudaGetLastError(); /* not an error: clear it */
    return 0;
  }
  cuda_check(err, what);
  return -1;
}

static int rt_stream_query(int index, void *stream) {
  if (set_dev(index)) return -1;
  return query_result(cudaStreamQuery((cudaStream_t)stream), "cudaStreamQuery");
}

static ingot_status rt_stream_wait_event(int index, void *stream, void *event) {
  ingot_status st = set_dev(index);
  return st ? st
            : cuda_check(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0),
                         "cudaStreamWaitEvent");
}

static ingot_status rt_event_create(int index, bool timing, void **out) {
  ingot_status st = set_dev(index);
  if (st) return st;
  cudaEvent_t e = NULL;
  st = cuda_check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
                  "cudaEventCreate");
  if (st) return st;
  *out = e;
  return INGOT_OK;
}

static ingot_status rt_event_destroy(int index, void *event) {
  ingot_status st = set_dev(index);
  return st ? st : cuda_check(cudaEventDestroy((cudaEvent_t)event), "cudaEventDestroy");
}

static ingot_status rt_event_record(int index, void *event, void *stream) {
  ingot_status st = set_dev(index);
  return st ? st
            : cuda_check(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
                         "cudaEventRecord");
}

static int rt_event_query(int index, void *event) {
  if (set_dev(index)) return -1;
  return query_result(cudaEventQuery((cudaEvent_t)event), "cudaEventQuery");
}

static ingot_status rt_event_sync(int index, void *event) {
  ingot_status st = set_dev(index);
  return st ? st : cuda_check(cudaEventSynchronize((cudaEvent_t)event), "cudaEventSynchronize");
}

static ingot_status rt_event_elapsed(int index, void *start, void *end, float *ms) {
  ingot_status st = set_dev(index);
  return st ? st
            : cuda_check(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end),
                         "cudaEventElapsedTime");
}

static ingot_status rt_record_stream(int index, void *ptr, void *stream) {
  return cuda_caching_record_stream(index, ptr, (cudaStream_t)stream);
}

static void *rt_host_alloc(size_t nbytes) {
  void *p = NULL;
  cudaError_t err = cudaHostAlloc(&p, nbytes ? nbytes : 1, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    ingot_set_error(err == cudaErrorMemoryAllocation ? INGOT_ERR_OOM : INGOT_ERR_BACKEND,
                    "cudaHostAlloc of %zu bytes failed: %s", nbytes, cudaGetErrorString(err));
    return NULL;
  }
  return p;
}

static void rt_host_free(void *p) {
  if (!p) return;
  /* An asynchronous copy from it may still be queued: let the device finish
   * first (not while this thread captures a graph: waiting is illegal then). */
  bool capturing = false;
  for (int i = 0; i < CUDA_MAX_DEVICES; i++) capturing |= cuda_thread_capturing(i);
  if (!capturing && cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

static ingot_status rt_copy_to_host_async(int index, void *dst, const void *src, size_t n) {
  ingot_status st = set_dev(index);
  return st ? st
            : cuda_check(
                  cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cuda_current_stream(index)),
                  "cudaMemcpyAsync");
}

static ingot_status rt_profiler_range(int index, bool start) {
  ingot_status st = set_dev(index);
  if (st) return st;
  return start ? cuda_check(cudaProfilerStart(), "cudaProfilerStart")
               : cuda_check(cudaProfilerStop(), "cudaProfilerStop");
}

const ingot_runtime_ops cuda_runtime_ops = {
    .stream_create = rt_stream_create,
    .stream_destroy = rt_stream_destroy,
    .set_current_stream = rt_set_current,
    .stream_synchronize = rt_stream_sync,
    .stream_query = rt_stream_query,
    .stream_wait_event = rt_stream_wait_event,
    .event_create = rt_event_create,
    .event_destroy = rt_event_destroy,
    .event_record = rt_event_record,
    .event_query = rt_event_query,
    .event_synchronize = rt_event_sync,
    .event_elapsed_ms = rt_event_elapsed,
    .memory_stats = cuda_caching_stats,
    .reset_peak_stats = cuda_caching_reset_peaks,
    .empty_cache = cuda_caching_empty_cache,
    .set_memory_fraction = cuda_caching_set_fraction,
    .record_stream = rt_record_stream,
    .host_alloc = rt_host_alloc,
    .host_free = rt_host_free,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_replay = cuda_graph_replay,
    .graph_destroy = cuda_graph_destroy,
    .copy_to_host_async = rt_copy_to_host_async,
    .profiler_range = rt_profiler_range,
};
