/* The CUDA backend: device discovery, device memory, copies and the kernel
 * table. Kernels live in the .cu files of this folder behind extern "C"
 * launchers (cuda_kernels.h). */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>

#include "../core/internal.h"
#include "../core/numeric.h"
#include "allocator.h"
#include "cuda_kernels.h"
#include "linalg_cuda.h"

static int device_total = -1;
static once_flag count_once = ONCE_FLAG_INIT;

static void count_devices(void) {
  int n = 0;
  /* No driver or no GPU reads as zero devices, never as a failure. */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  device_total = n;
}

static int cuda_count(void) {
  call_once(&count_once, count_devices);
  return device_total;
}

int cuda_coop_sms(int dev) {
  static _Atomic int cache[64]; /* SMs, -1 none, 0 not read yet; idempotent races */
  const bool slot = dev >= 0 && dev < 64;
  int v = slot ? atomic_load_explicit(&cache[dev], memory_order_relaxed) : 0;
  if (v) return v;
  int n = 0, coop = 0;
  if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    coop = 0;
  }
  v = coop && n > 0 ? n : -1;
  if (slot) atomic_store_explicit(&cache[dev], v, memory_order_relaxed);
  return v;
}

ingot_status cuda_check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return INGOT_OK;
  cudaGetLastError(); /* clear sticky-free errors so the process keeps working */
  return ingot_set_error(err == cudaErrorMemoryAllocation ? INGOT_ERR_OOM : INGOT_ERR_BACKEND,
                         "cuda: %s failed: %s", what, cudaGetErrorString(err));
}

static int cuda_info(int index, ingot_device_info *info) {
  struct cudaDeviceProp p;
  ingot_status st = cuda_check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  if (st) return st;
  snprintf(info->name, sizeof info->name, "%.127s", p.name);
  info->compute_units = p.multiProcessorCount;
  info->capability_major = p.major;
  info->capability_minor = p.minor;
  size_t free_b = 0, total_b = p.totalGlobalMem;
  if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    cudaGetLastError();
  info->total_memory = total_b;
  info->free_memory = free_b;
  return INGOT_OK;
}

/* Tensor memory: the caching allocator (allocator.c), on the current stream. */
static void *cuda_alloc(int index, size_t nbytes) {
  return cuda_caching_alloc(index, nbytes, cuda_current_stream(index));
}

static void cuda_free(int index, void *p, size_t nbytes) {
  (void)nbytes;
  cuda_caching_free(index, p);
}

/* True when host memory at p is page-locked (cudaHostAlloc/Register). */
static bool host_pinned(const void *p) {
  struct cudaPointerAttributes at;
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return at.type == cudaMemoryTypeHost;
}

/* Copies run on the current stream, so they are ordered after the kernels
 * that produced their source. Device-to-host waits for the copy (the data is
 * there on return); host-to-device from pinned memory is asynchronous, from
 * pageable memory it waits too (the host buffer may change right after). In
 * a graph capture nothing may wait: the copy is captured as it is. */
static ingot_status cuda_copy(int index, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind) {
  ingot_status st = cuda_use_device(index);
  if (st) return st;
  cudaStream_t s = cuda_current_stream(index);
  st = cuda_check(cudaMemcpyAsync(dst, src, n, kind, s), "cudaMemcpyAsync");
  if (st || cuda_thread_capturing(index) || kind == cudaMemcpyDeviceToDevice) return st;
  if (kind == cudaMemcpyHostToDevice && host_pinned(src)) return INGOT_OK;
  return cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

static ingot_status cuda_to_host(int index, void *dst, const void *src, size_t n) {
  return cuda_copy(index, dst, src, n, cudaMemcpyDeviceToHost);
}
static ingot_status cuda_from_host(int index, void *dst, const void *src, size_t n) {
  return cuda_copy(index, dst, src, n, cudaMemcpyHostToDevice);
}
static ingot_status cuda_on_device(int index, void *dst, const void *src, size_t n) {
  return cuda_copy(index, dst, src, n, cudaMemcpyDeviceToDevice);
}

static ingot_status cuda_sync(int index) {
  ingot_status st = cuda_use_device(index);
  return st ? st : cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

static ingot_status k_fill(ingot_op_args *a) {
  ingot_tensor *t = a->out[0];
  unsigned char pattern[16];
  store_f64(t->dtype, pattern, a->farg[0]);
  int64_t n = ingot_numel(t);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device(t->device.index);
  if (st) return st;
  return cuda_check(
      cuda_fill_pattern(ingot_tensor_data(t), pattern, (int)ingot_dtype_size(t->dtype), n,
                        cuda_current_stream(t->device.index)),
      "fill kernel");
}

static ingot_status k_copy(ingot_op_args *a) {
  ingot_tensor *dst = a->out[0], *src = a->in[0];
  int64_t n = ingot_numel(dst);
  if (n == 0) return INGOT_OK;
  ingot_status st = cuda_use_device(dst->device.index);
  if (st) return st;
  if (dst->dtype == src->dtype && ingot_is_contiguous(dst) && ingot_is_contiguous(src))
    return cuda_check(
        cudaMemcpyAsync(ingot_tensor_data(dst), ingot_tensor_data(src),
                        (size_t)n * ingot_dtype_size(dst->dtype), cudaMemcpyDeviceToDevice,
                        cuda_current_stream(dst->device.index)),
        "cudaMemcpyAsync");
  cuda_geom2 g = {.ndim = dst->ndim};
  for (int d = 0; d < dst->ndim; d++) {
    g.shape[d] = dst->shape[d];
    g.stride[0][d] = dst->strides[d];
    g.stride[1][d] = src->strides[d];
  }
  return cuda_check(cuda_copy_strided(ingot_tensor_data(dst), dst->dtype, ingot_tensor_data(src),
                                      src->dtype, &g, n, cuda_current_stream(dst->device.index)),
                    "copy kernel");
}

static ingot_status k_generate(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_status st = cuda_use_device(out->device.index);
  if (st) return st;
  return cuda_check(cuda_generate(ingot_tensor_data(out), a->op, out->dtype, ingot_numel(out),
                                  out->ndim == 2 ? out->shape[1] : 0, a->farg, a->iarg,
                                  cuda_current_stream(out->device.index)),
                    "generate kernel");
}

void cuda_backend_init(ingot_backend *be) {
  memset(be, 0, sizeof *be);
  be->name = "cuda";
  be->kind = INGOT_DEVICE_CUDA;
  be->device_count = cuda_count;
  be->device_info = cuda_info;
  be->alloc = cuda_alloc;
  be->free = cuda_free;
  be->copy_to_host = cuda_to_host;
  be->copy_from_host = cuda_from_host;
  be->copy_on_device = cuda_on_device;
  be->synchronize = cuda_sync;
  be->runtime = &cuda_runtime_ops;
  be->kernels[INGOT_OP_FILL] = k_fill;
  be->kernels[INGOT_OP_COPY] = k_copy;
  be->kernels[INGOT_OP_ARANGE] = k_generate;
  be->kernels[INGOT_OP_LINSPACE] = k_generate;
  be->kernels[INGOT_OP_EYE] = k_generate;
  be->kernels[INGOT_OP_RAND] = k_generate;
  be->kernels[INGOT_OP_RANDN] = k_generate;
  be->kernels[INGOT_OP_RANDINT] = k_generate;
  cuda_register_elementwise(be);
  cuda_register_reduce(be);
  cuda_register_shape(be);
  cuda_register_index(be);
  cuda_register_sort(be);
  cuda_register_matmul(be);
  cuda_register_linalg(be);
  cuda_register_attention(be);
  cuda_register_sample(be);
  cuda_register_nn(be);
  cuda_register_qgemv(be);
  cuda_register_moe(be);
  cuda_register_moe_block(be);
  cuda_timeline_attach_all(); /* a -DINGOT_TIMELINE=ON build only */
}
