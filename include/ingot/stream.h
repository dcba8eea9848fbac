/* Streams, events, device graphs (capture/replay), device memory statistics
 * and pinned host memory. The model is PyTorch's public CUDA stream API and
 * its caching allocator (see docs/cuda-runtime.md).
 *
 * Every device has a default stream (the legacy default stream on CUDA) and,
 * per thread, a current stream: ops enqueue their work on the current stream
 * of their device and return at once. On the CPU, streams and events are
 * trivial: work is synchronous, an event records a host timestamp. */
#ifndef INGOT_STREAM_H
#define INGOT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingot_stream ingot_stream;
typedef struct ingot_event ingot_event;
typedef struct ingot_graph ingot_graph;

/* ---- streams ---- */
/* A new stream on dev (owned: ingot_stream_destroy). On CUDA it does not
 * synchronise implicitly with the default stream (order work with events). */
ingot_stream *ingot_stream_create(ingot_device dev);
/* Waits for the stream's work, then destroys it; if it is this thread's
 * current stream, the default stream becomes current. NULL is ignored;
 * default streams are never destroyed. */
void ingot_stream_destroy(ingot_stream *stream);
/* The device's default stream (borrowed; NULL + error for a bad device). */
ingot_stream *ingot_default_stream(ingot_device dev);
/* This thread's current stream on dev (borrowed). */
ingot_stream *ingot_current_stream(ingot_device dev);
/* Make stream the current stream of its device for this thread. */
ingot_status ingot_set_current_stream(ingot_stream *stream);
ingot_device ingot_stream_device(const ingot_stream *stream);
/* Block the host until all work queued on stream has finished. */
ingot_status ingot_stream_synchronize(ingot_stream *stream);
/* True when all work queued on stream has finished (false on error too,
 * with the error set). */
bool ingot_stream_query(ingot_stream *stream);
/* Work queued on stream after this call waits for event (no host block). */
ingot_status ingot_stream_wait_event(ingot_stream *stream, ingot_event *event);
/* Work queued on stream after this call waits for all work queued on other
 * so far (no host block). */
ingot_status ingot_stream_wait_stream(ingot_stream *stream, ingot_stream *other);

/* ---- events ---- */
/* A new event on dev; enable_timing allows ingot_event_elapsed_ms. */
ingot_event *ingot_event_create(ingot_device dev, bool enable_timing);
void ingot_event_destroy(ingot_event *event);
/* Record event on stream (NULL: the current stream of the event's device). */
ingot_status ingot_event_record(ingot_event *event, ingot_stream *stream);
/* True when the work before the last record has finished (or it was never
 * recorded). */
bool ingot_event_query(ingot_event *event);
/* Block the host until the work before the last record has finished. */
ingot_status ingot_event_synchronize(ingot_event *event);
/* Milliseconds between two recorded timing events (end must have completed:
 * synchronize it first). */
ingot_status ingot_event_elapsed_ms(ingot_event *start, ingot_event *end, float *ms);

/* ---- device memory (the caching allocator) ---- */
typedef struct ingot_memory_stats {
  int64_t allocated_bytes; /* live blocks (sizes rounded to 512 B) */
  int64_t requested_bytes; /* live blocks, bytes as requested */
  int64_t reserved_bytes;  /* segments held from the device (cudaMalloc) */
  int64_t active_bytes;    /* live blocks + freed blocks still in use on other streams */
  int64_t peak_allocated_bytes;
  int64_t peak_requested_bytes;
  int64_t peak_reserved_bytes;
  int64_t peak_active_bytes;
  int64_t num_allocs;        /* device allocations (successful cudaMalloc calls) */
  int64_t num_frees;         /* device frees (cudaFree calls) */
  int64_t num_alloc_retries; /* device allocation failed: cache freed, retried */
  int64_t num_ooms;          /* allocations that failed with INGOT_ERR_OOM */
  int64_t num_segments;      /* segments held now */
  int64_t num_blocks;        /* live blocks now */
  int64_t memory_limit;      /* bytes reserved may reach (fraction x total) */
} ingot_memory_stats;

/* Statistics of dev's allocator (all zero on the CPU). */
ingot_status ingot_memory_stats_get(ingot_device dev, ingot_memory_stats *out);
#define ingot_memory_stats(dev, out) ingot_memory_stats_get((dev), (out))
/* Peaks := current values. */
ingot_status ingot_reset_peak_memory_stats(ingot_device dev);
/* Return every fully free cached segment to the device (synchronises dev). */
ingot_status ingot_empty_cache(ingot_device dev);
/* Limit the bytes this process reserves on dev to fraction x total memory
 * (0 < fraction <= 1; default 1). Allocations past it fail as out of memory. */
ingot_status ingot_set_memory_fraction(ingot_device dev, double fraction);
/* t's memory is also used by work queued on stream: when t's storage is
 * freed, its block is not reused until that work has finished (PyTorch's
 * record_stream). */
ingot_status ingot_record_stream(ingot_tensor *t, ingot_stream *stream);

/* Start (start = true) or stop the capture range of a profiler attached to the
 * process (cudaProfilerStart/Stop on CUDA, for ncu --profile-from-start off
 * or nsys --capture-range=cudaProfilerApi); does nothing on the CPU. */
ingot_status ingot_profiler_range(ingot_device dev, bool start);

/* ---- pinned host memory ---- */
/* Uninitialised CPU tensor in page-locked memory (cudaHostAlloc) when a CUDA
 * device is present, else in ordinary memory. Host-to-device copies from it
 * are asynchronous on the current stream. */
ingot_tensor *ingot_empty_pinned(int ndim, const int64_t *shape, ingot_dtype dt);
/* True when t is a CPU tensor in pinned memory. */
bool ingot_is_pinned(const ingot_tensor *t);
/* dst (a contiguous CPU tensor) = src (contiguous, same dtype and numel),
 * queued on the current stream of src's device without waiting when dst is
 * pinned: the values are there once an event recorded after this call has
 * completed. From the CPU, or into unpinned memory, it copies at once. */
ingot_status ingot_copy_to_host_async(ingot_tensor *dst, const ingot_tensor *src);

/* ---- device graphs (CUDA graphs) ---- */
/* Start capturing this thread's work on dev's current stream (when that is
 * the default stream, a private capture stream becomes current until
 * ingot_graph_end). Allocations during capture come from a private pool that
 * lives as long as the graph. Nothing runs until replay. */
ingot_status ingot_graph_begin(ingot_device dev);
/* End the capture; returns the instantiated graph (NULL + error on failure). */
ingot_graph *ingot_graph_end(ingot_device dev);
/* Launch the graph on the current stream of its device (no host sync). New
 * inputs: ingot_copy_ new values into the tensors used during capture first. */
ingot_status ingot_graph_replay(ingot_graph *graph);
/* Waits for the device, then frees the graph and its private pool. */
void ingot_graph_destroy(ingot_graph *graph);

#ifdef __cplusplus
}
#endif
#endif
