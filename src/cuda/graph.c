/* CUDA graphs: capture of the work a thread queues on one stream
 * (cudaStreamCaptureModeThreadLocal), instantiation, replay and the graph's
 * private memory pool. Core (src/core/stream.c) makes sure the captured
 * stream is not the legacy default stream.
 *
 * Memory: while this thread captures on the device, every allocation (tensor
 * outputs and kernel scratch) comes from the graph's private pool; blocks
 * freed during capture go back to that pool and are reused by later captured
 * work in stream order. Replays write to exactly those addresses, so the pool
 * never gives memory to anyone else; its segments are freed when the graph is
 * destroyed (or, for blocks the caller still holds, when they are freed). */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "allocator.h"
#include "cuda_kernels.h"

typedef struct cuda_graph {
  int device;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_pool *pool;
} cuda_graph;

static _Thread_local cuda_pool *open_pool[CUDA_MAX_DEVICES];

ingot_status cuda_graph_begin(int index, void *stream) {
  if (index < 0 || index >= CUDA_MAX_DEVICES)
    return ingot_set_error(INGOT_ERR_DEVICE, "graph_begin: bad device cuda:%d", index);
  if (!stream)
    return ingot_set_error(INGOT_ERR_ARG, "graph_begin: cannot capture the legacy default stream");
  if (open_pool[index])
    return ingot_set_error(INGOT_ERR_ARG, "graph_begin: this thread is already capturing on "
                           "cuda:%d", index);
  ingot_status st = cuda_use_device(index);
  if (st) return st;
  cuda_pool *pool = cuda_pool_create(index);
  if (!pool) return ingot_last_status();
  st = cuda_check(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal),
                  "cudaStreamBeginCapture");
  if (st) {
    cuda_pool_release(index, pool);
    return st;
  }
  open_pool[index] = pool;
  cuda_capture_begin(index, pool);
  return INGOT_OK;
}

ingot_status cuda_graph_end(int index, void *stream, void **out) {
  if (index < 0 || index >= CUDA_MAX_DEVICES || !open_pool[index])
    return ingot_set_error(INGOT_ERR_ARG, "graph_end: no capture in progress on cuda:%d", index);
  cuda_pool *pool = open_pool[index];
  open_pool[index] = NULL;
  cudaSetDevice(index);
  cudaGraph_t g = NULL;
  cudaError_t err = cudaStreamEndCapture((cudaStream_t)stream, &g);
  cuda_capture_end(index);
  if (err != cudaSuccess) {
    ingot_status st = cuda_check(err, "cudaStreamEndCapture (an op in the capture may have "
                                      "used the host or another stream)");
    if (g) cudaGraphDestroy(g);
    cuda_pool_release(index, pool);
    return st;
  }
  cudaGraphExec_t exec = NULL;
  ingot_status st = cuda_check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cuda_graph *cg = st ? NULL : calloc(1, sizeof *cg);
  if (!cg) {
    if (!st) st = ingot_set_error(INGOT_ERR_OOM, "graph_end: out of host memory");
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cuda_pool_release(index, pool);
    return st;
  }
  cg->device = index;
  cg->graph = g;
  cg->exec = exec;
  cg->pool = pool;
  *out = cg;
  return INGOT_OK;
}

ingot_status cuda_graph_replay(int index, void *graph, void *stream) {
  cuda_graph *cg = graph;
  ingot_status st = cuda_use_device(index);
  return st ? st : cuda_check(cudaGraphLaunch(cg->exec, (cudaStream_t)stream), "cudaGraphLaunch");
}

ingot_status cuda_graph_destroy(int index, void *graph) {
  cuda_graph *cg = graph;
  if (!cg) return INGOT_OK;
  cudaSetDevice(index);
  /* Replays may be running: the pool's memory stays until the device is idle
   * (cuda_pool_release synchronises before freeing). */
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  if (cudaGraphExecDestroy(cg->exec) != cudaSuccess) cudaGetLastError();
  if (cudaGraphDestroy(cg->graph) != cudaSuccess) cudaGetLastError();
  cuda_pool_release(index, cg->pool);
  free(cg);
  return INGOT_OK;
}
