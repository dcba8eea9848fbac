/* The CUDA caching allocator (allocator.c), the runtime table glue
 * (stream.c, graph.c) and what they share. Host code, C11. */
#ifndef INGOT_CUDA_ALLOCATOR_H
#define INGOT_CUDA_ALLOCATOR_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#include "ingot/backend.h"
#include "ingot/stream.h"

#define CUDA_MAX_DEVICES 64

/* Device memory of at least nbytes for work on stream s (NULL + error, OOM
 * with sizes in the message, on failure). While this thread captures a graph
 * on device, it comes from the graph's private pool. */
void *cuda_caching_alloc(int device, size_t nbytes, cudaStream_t s);
/* Return p to its pool: reusable at once by later work on its allocation
 * stream, never by another stream (no CUDA call). If other streams used it
 * (record_stream), it is held back until events recorded on them now have
 * completed, then returns to its allocation stream's pool. */
void cuda_caching_free(int device, void *p);
/* p (a live allocation) is also used by work on s. */
ingot_status cuda_caching_record_stream(int device, void *p, cudaStream_t s);
/* s is about to be destroyed (its work has finished): forget it. */
void cuda_caching_forget_stream(int device, cudaStream_t s);

ingot_status cuda_caching_stats(int device, ingot_memory_stats *out);
ingot_status cuda_caching_reset_peaks(int device);
ingot_status cuda_caching_empty_cache(int device);
ingot_status cuda_caching_set_fraction(int device, double fraction);

/* Private pools of graphs. */
typedef struct cuda_pool cuda_pool;
cuda_pool *cuda_pool_create(int device);
/* The graph is gone (and the device idle): free the pool's segments now or,
 * for those still holding live blocks, when their last block is freed. */
void cuda_pool_release(int device, cuda_pool *pool);
/* This thread captures on device: its allocations come from pool, no event
 * is recorded or queried and nothing is freed to the device until the end. */
void cuda_capture_begin(int device, cuda_pool *pool);
void cuda_capture_end(int device);
bool cuda_thread_capturing(int device);

/* Graph runtime functions (graph.c). */
ingot_status cuda_graph_begin(int index, void *stream);
ingot_status cuda_graph_end(int index, void *stream, void **graph);
ingot_status cuda_graph_replay(int index, void *graph, void *stream);
ingot_status cuda_graph_destroy(int index, void *graph);

/* The CUDA runtime table (stream.c). */
extern const ingot_runtime_ops cuda_runtime_ops;

#endif
