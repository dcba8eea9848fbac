/* The public stream, event, graph and memory API (include/ingot/stream.h):
 * argument checks and bookkeeping here, the work in the backend's runtime
 * table (src/cuda/stream.c for CUDA). A backend without a runtime table (the
 * CPU) gets trivial streams: everything is synchronous, an event records a
 * host timestamp, memory statistics are zero.
 *
 * Current streams: each thread keeps, per device, the ingot_stream it made
 * current (NULL: the device's default stream) and tells the backend, whose
 * kernels read it. Graph capture needs a stream other than the default one:
 * ingot_graph_begin makes a private stream current for the capture and
 * ingot_graph_end restores the previous one.
 *
 * Pinned memory: the CPU backend frees host memory with its own free; a
 * pinned tensor's storage is registered here and the CPU backend's free is
 * wrapped once (the first time pinned memory is made) to hand pinned blocks
 * to the CUDA runtime instead. */
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "internal.h"

#define MAX_DEV 64

struct ingot_stream {
  ingot_device dev;
  void *handle; /* backend stream; NULL = default stream */
  bool is_default;
};

struct ingot_event {
  ingot_device dev;
  void *handle; /* backend event; NULL for trivial events */
  bool timing;
  bool recorded;
  double host_ms; /* trivial events: host time of the record */
};

struct ingot_graph {
  ingot_device dev;
  void *handle;
};

static ingot_stream default_streams[INGOT_DEVICE_KIND_COUNT][MAX_DEV];
static once_flag defaults_once = ONCE_FLAG_INIT;
static _Thread_local ingot_stream *current[INGOT_DEVICE_KIND_COUNT][MAX_DEV];
/* Per-thread capture state: the stream made current for it and the one before. */
static _Thread_local struct {
  bool active;
  ingot_stream *capture, *prev;
} capture[INGOT_DEVICE_KIND_COUNT][MAX_DEV];

static void init_defaults(void) {
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++)
    for (int i = 0; i < MAX_DEV; i++)
      default_streams[k][i] = (ingot_stream){{(ingot_device_kind)k, i}, NULL, true};
}

/* Backend of dev (NULL + error when absent or out of range). */
static const ingot_backend *dev_backend(const char *op, ingot_device dev) {
  const ingot_backend *be = backend_for(dev);
  if (!be) return fail_in(op);
  if (dev.index >= MAX_DEV)
    return ingot_fail(INGOT_ERR_DEVICE, "%s: device index %d is beyond %d", op, dev.index,
                      MAX_DEV - 1);
  return be;
}

static const ingot_runtime_ops *rt_of(const ingot_backend *be) { return be ? be->runtime : NULL; }

static double host_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- streams ---- */
ingot_stream *ingot_default_stream(ingot_device dev) {
  if (!dev_backend("default_stream", dev)) return NULL;
  call_once(&defaults_once, init_defaults);
  return &default_streams[dev.kind][dev.index];
}

ingot_stream *ingot_current_stream(ingot_device dev) {
  if (!dev_backend("current_stream", dev)) return NULL;
  ingot_stream *s = current[dev.kind][dev.index];
  return s ? s : ingot_default_stream(dev);
}

ingot_device ingot_stream_device(const ingot_stream *stream) {
  return stream ? stream->dev : INGOT_CPU;
}

ingot_stream *ingot_stream_create(ingot_device dev) {
  const ingot_backend *be = dev_backend("stream_create", dev);
  if (!be) return NULL;
  ingot_stream *s = calloc(1, sizeof *s);
  if (!s) return ingot_fail(INGOT_ERR_OOM, "stream_create: out of host memory");
  s->dev = dev;
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->stream_create && rt->stream_create(dev.index, &s->handle) != INGOT_OK) {
    free(s);
    return fail_in("stream_create");
  }
  return s;
}

static ingot_status set_current(ingot_stream *s) {
  const ingot_backend *be = dev_backend("set_current_stream", s->dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->set_current_stream) {
    ingot_status st = rt->set_current_stream(s->dev.index, s->handle);
    if (st) return st;
  }
  current[s->dev.kind][s->dev.index] = s->is_default ? NULL : s;
  return INGOT_OK;
}

void ingot_stream_destroy(ingot_stream *stream) {
  if (!stream || stream->is_default) return;
  const ingot_backend *be = backend_for(stream->dev);
  if (be && current[stream->dev.kind][stream->dev.index] == stream)
    set_current(ingot_default_stream(stream->dev));
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->stream_destroy) rt->stream_destroy(stream->dev.index, stream->handle);
  free(stream);
}

ingot_status ingot_set_current_stream(ingot_stream *stream) {
  if (!stream) return ingot_set_error(INGOT_ERR_ARG, "set_current_stream: NULL stream");
  return set_current(stream);
}

static ingot_status stream_arg(const char *op, ingot_stream *s, const ingot_backend **be) {
  if (!s) return ingot_set_error(INGOT_ERR_ARG, "%s: NULL stream", op);
  *be = dev_backend(op, s->dev);
  return *be ? INGOT_OK : ingot_last_status();
}

ingot_status ingot_stream_synchronize(ingot_stream *stream) {
  const ingot_backend *be = NULL;
  ingot_status st = stream_arg("stream_synchronize", stream, &be);
  if (st) return st;
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->stream_synchronize) return rt->stream_synchronize(stream->dev.index, stream->handle);
  return be->synchronize ? be->synchronize(stream->dev.index) : INGOT_OK;
}

bool ingot_stream_query(ingot_stream *stream) {
  const ingot_backend *be = NULL;
  if (stream_arg("stream_query", stream, &be)) return false;
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->stream_query) return rt->stream_query(stream->dev.index, stream->handle) == 1;
  return true;
}

ingot_status ingot_stream_wait_event(ingot_stream *stream, ingot_event *event) {
  const ingot_backend *be = NULL;
  ingot_status st = stream_arg("stream_wait_event", stream, &be);
  if (st) return st;
  if (!event) return ingot_set_error(INGOT_ERR_ARG, "stream_wait_event: NULL event");
  if (!ingot_device_equal(stream->dev, event->dev))
    return ingot_set_error(INGOT_ERR_DEVICE, "stream_wait_event: stream and event are on "
                           "different devices");
  const ingot_runtime_ops *rt = rt_of(be);
  if (!event->recorded || !event->handle || !rt || !rt->stream_wait_event) return INGOT_OK;
  return rt->stream_wait_event(stream->dev.index, stream->handle, event->handle);
}

ingot_status ingot_stream_wait_stream(ingot_stream *stream, ingot_stream *other) {
  const ingot_backend *be = NULL;
  ingot_status st = stream_arg("stream_wait_stream", stream, &be);
  if (st) return st;
  if (!other) return ingot_set_error(INGOT_ERR_ARG, "stream_wait_stream: NULL stream");
  if (!ingot_device_equal(stream->dev, other->dev))
    return ingot_set_error(INGOT_ERR_DEVICE, "stream_wait_stream: streams on different devices");
  if (stream == other || !rt_of(be)) return INGOT_OK;
  /* An event on other, waited on by stream; destroying it at once is fine
   * (the backend keeps it until the wait is resolved). */
  ingot_event *e = ingot_event_create(stream->dev, false);
  if (!e) return ingot_last_status();
  st = ingot_event_record(e, other);
  if (!st) st = ingot_stream_wait_event(stream, e);
  ingot_event_destroy(e);
  return st;
}

/* ---- events ---- */
ingot_event *ingot_event_create(ingot_device dev, bool enable_timing) {
  const ingot_backend *be = dev_backend("event_create", dev);
  if (!be) return NULL;
  ingot_event *e = calloc(1, sizeof *e);
  if (!e) return ingot_fail(INGOT_ERR_OOM, "event_create: out of host memory");
  e->dev = dev;
  e->timing = enable_timing;
  const ingot_runtime_ops *rt = rt_of(be);
  if (rt && rt->event_create && rt->event_create(dev.index, enable_timing, &e->handle) != INGOT_OK) {
    free(e);
    return fail_in("event_create");
  }
  return e;
}

void ingot_event_destroy(ingot_event *event) {
  if (!event) return;
  const ingot_runtime_ops *rt = rt_of(ingot_backend_get(event->dev.kind));
  if (event->handle && rt && rt->event_destroy) rt->event_destroy(event->dev.index, event->handle);
  free(event);
}

ingot_status ingot_event_record(ingot_event *event, ingot_stream *stream) {
  if (!event) return ingot_set_error(INGOT_ERR_ARG, "event_record: NULL event");
  if (!stream) stream = ingot_current_stream(event->dev);
  const ingot_backend *be = NULL;
  ingot_status st = stream_arg("event_record", stream, &be);
  if (st) return st;
  if (!ingot_device_equal(stream->dev, event->dev))
    return ingot_set_error(INGOT_ERR_DEVICE, "event_record: stream and event are on different "
                           "devices");
  const ingot_runtime_ops *rt = rt_of(be);
  if (event->handle && rt && rt->event_record) {
    st = rt->event_record(event->dev.index, event->handle, stream->handle);
    if (st) return st;
  } else {
    /* Trivial backend: the work before this point is done (or wait for it). */
    if (be->synchronize && (st = be->synchronize(event->dev.index)) != INGOT_OK) return st;
    event->host_ms = host_now_ms();
  }
  event->recorded = true;
  return INGOT_OK;
}

bool ingot_event_query(ingot_event *event) {
  if (!event) {
    ingot_set_error(INGOT_ERR_ARG, "event_query: NULL event");
    return false;
  }
  const ingot_runtime_ops *rt = rt_of(ingot_backend_get(event->dev.kind));
  if (!event->recorded || !event->handle || !rt || !rt->event_query) return true;
  return rt->event_query(event->dev.index, event->handle) == 1;
}

ingot_status ingot_event_synchronize(ingot_event *event) {
  if (!event) return ingot_set_error(INGOT_ERR_ARG, "event_synchronize: NULL event");
  const ingot_runtime_ops *rt = rt_of(ingot_backend_get(event->dev.kind));
  if (!event->recorded || !event->handle || !rt || !rt->event_synchronize) return INGOT_OK;
  return rt->event_synchronize(event->dev.index, event->handle);
}

ingot_status ingot_event_elapsed_ms(ingot_event *start, ingot_event *end, float *ms) {
  if (!start || !end || !ms) return ingot_set_error(INGOT_ERR_ARG, "event_elapsed_ms: NULL argument");
  if (!ingot_device_equal(start->dev, end->dev))
    return ingot_set_error(INGOT_ERR_DEVICE, "event_elapsed_ms: events on different devices");
  if (!start->timing || !end->timing)
    return ingot_set_error(INGOT_ERR_ARG, "event_elapsed_ms: events were created without timing");
  if (!start->recorded || !end->recorded)
    return ingot_set_error(INGOT_ERR_ARG, "event_elapsed_ms: both events must be recorded");
  const ingot_runtime_ops *rt = rt_of(ingot_backend_get(start->dev.kind));
  if (start->handle && end->handle && rt && rt->event_elapsed_ms)
    return rt->event_elapsed_ms(start->dev.index, start->handle, end->handle, ms);
  *ms = (float)(end->host_ms - start->host_ms);
  return INGOT_OK;
}

/* ---- memory ---- */
ingot_status ingot_memory_stats_get(ingot_device dev, ingot_memory_stats *out) {
  if (!out) return ingot_set_error(INGOT_ERR_ARG, "memory_stats: NULL output");
  const ingot_backend *be = dev_backend("memory_stats", dev);
  if (!be) return ingot_last_status();
  memset(out, 0, sizeof *out);
  const ingot_runtime_ops *rt = rt_of(be);
  return rt && rt->memory_stats ? rt->memory_stats(dev.index, out) : INGOT_OK;
}

ingot_status ingot_reset_peak_memory_stats(ingot_device dev) {
  const ingot_backend *be = dev_backend("reset_peak_memory_stats", dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  return rt && rt->reset_peak_stats ? rt->reset_peak_stats(dev.index) : INGOT_OK;
}

ingot_status ingot_empty_cache(ingot_device dev) {
  const ingot_backend *be = dev_backend("empty_cache", dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  return rt && rt->empty_cache ? rt->empty_cache(dev.index) : INGOT_OK;
}

ingot_status ingot_profiler_range(ingot_device dev, bool start) {
  const ingot_backend *be = dev_backend("profiler_range", dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  return rt && rt->profiler_range ? rt->profiler_range(dev.index, start) : INGOT_OK;
}

ingot_status ingot_set_memory_fraction(ingot_device dev, double fraction) {
  const ingot_backend *be = dev_backend("set_memory_fraction", dev);
  if (!be) return ingot_last_status();
  if (!(fraction > 0.0 && fraction <= 1.0))
    return ingot_set_error(INGOT_ERR_ARG, "set_memory_fraction: fraction must be in (0, 1], got %g",
                           fraction);
  const ingot_runtime_ops *rt = rt_of(be);
  return rt && rt->set_memory_fraction ? rt->set_memory_fraction(dev.index, fraction) : INGOT_OK;
}

ingot_status ingot_record_stream(ingot_tensor *t, ingot_stream *stream) {
  if (!t) return ingot_last_status() ? ingot_last_status()
                                     : ingot_set_error(INGOT_ERR_ARG, "record_stream: NULL tensor");
  const ingot_backend *be = NULL;
  ingot_status st = stream_arg("record_stream", stream, &be);
  if (st) return st;
  if (!ingot_device_equal(t->device, stream->dev))
    return ingot_set_error(INGOT_ERR_DEVICE, "record_stream: tensor and stream are on different "
                           "devices");
  const ingot_runtime_ops *rt = rt_of(be);
  if (!t->storage->data || !rt || !rt->record_stream) return INGOT_OK;
  return rt->record_stream(stream->dev.index, t->storage->data, stream->handle);
}

/* ---- pinned host memory ---- */
/* The CUDA runtime's page-locked allocator, if a CUDA device is present. */
static const ingot_runtime_ops *pinned_runtime(void) {
  const ingot_backend *cuda = ingot_backend_get(INGOT_DEVICE_CUDA);
  if (!cuda || cuda->device_count() <= 0 || !cuda->runtime || !cuda->runtime->host_alloc ||
      !cuda->runtime->host_free)
    return NULL;
  return cuda->runtime;
}

ingot_tensor *ingot_empty_pinned(int ndim, const int64_t *shape, ingot_dtype dt) {
  ingot_tensor *t = tensor_new(ndim, shape, dt, INGOT_CPU);
  if (!t) return fail_in("empty_pinned");
  const ingot_runtime_ops *rt = pinned_runtime();
  if (!rt || !t->storage->data) return t; /* no CUDA: ordinary memory */
  void *p = rt->host_alloc(t->storage->nbytes);
  if (!p) {
    ingot_release(t);
    return fail_in("empty_pinned");
  }
  /* Swap the fresh storage's memory for the pinned block. */
  ingot_backend_get(INGOT_DEVICE_CPU)->free(0, t->storage->data, t->storage->nbytes);
  t->storage->data = p;
  t->storage->deleter = rt->host_free;
  return t;
}

bool ingot_is_pinned(const ingot_tensor *t) {
  const ingot_runtime_ops *rt = t && t->device.kind == INGOT_DEVICE_CPU ? pinned_runtime() : NULL;
  return rt && t->storage->deleter == rt->host_free;
}

ingot_status ingot_copy_to_host_async(ingot_tensor *dst, const ingot_tensor *src) {
  const ingot_tensor *d = dst;
  if (!check_tensors("copy_to_host_async", 1, &d) ||
      !check_tensors("copy_to_host_async", 1, &src))
    return ingot_last_status();
  if (dst->device.kind != INGOT_DEVICE_CPU || dst->dtype != src->dtype ||
      ingot_numel(dst) != ingot_numel(src) || !ingot_is_contiguous(dst) ||
      !ingot_is_contiguous(src))
    return ingot_set_error(INGOT_ERR_ARG,
                           "copy_to_host_async: dst must be a contiguous CPU tensor of src's "
                           "dtype and size, src contiguous");
  size_t n = (size_t)ingot_numel(src) * ingot_dtype_size(src->dtype);
  const ingot_runtime_ops *rt =
      src->device.kind == INGOT_DEVICE_CPU ? NULL : rt_of(ingot_backend_get(src->device.kind));
  if (!rt || !rt->copy_to_host_async || !ingot_is_pinned(dst) || n == 0)
    return ingot_to_host(src, ingot_tensor_data(dst), n);
  return rt->copy_to_host_async(src->device.index, ingot_tensor_data(dst), ingot_tensor_data(src),
                                n);
}

/* ---- graphs ---- */
ingot_status ingot_graph_begin(ingot_device dev) {
  const ingot_backend *be = dev_backend("graph_begin", dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  if (!rt || !rt->graph_begin)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED, "graph_begin: the %s device has no graphs",
                           be->name);
  if (capture[dev.kind][dev.index].active)
    return ingot_set_error(INGOT_ERR_ARG, "graph_begin: a capture is already in progress on this "
                           "thread and device");
  ingot_stream *prev = ingot_current_stream(dev), *cap = NULL;
  if (prev->is_default) {
    /* The default (legacy) stream cannot be captured: use a private one. */
    cap = ingot_stream_create(dev);
    if (!cap) return ingot_last_status();
    ingot_status st = set_current(cap);
    if (st) {
      ingot_stream_destroy(cap);
      return st;
    }
  }
  ingot_stream *s = cap ? cap : prev;
  ingot_status st = rt->graph_begin(dev.index, s->handle);
  if (st) {
    if (cap) {
      set_current(prev);
      ingot_stream_destroy(cap);
    }
    return st;
  }
  capture[dev.kind][dev.index].active = true;
  capture[dev.kind][dev.index].capture = cap;
  capture[dev.kind][dev.index].prev = prev;
  return INGOT_OK;
}

ingot_graph *ingot_graph_end(ingot_device dev) {
  const ingot_backend *be = dev_backend("graph_end", dev);
  if (!be) return NULL;
  const ingot_runtime_ops *rt = rt_of(be);
  if (!capture[dev.kind][dev.index].active || !rt || !rt->graph_end)
    return ingot_fail(INGOT_ERR_ARG, "graph_end: no capture in progress on this thread and "
                      "device");
  ingot_stream *cap = capture[dev.kind][dev.index].capture;
  ingot_stream *prev = capture[dev.kind][dev.index].prev;
  ingot_stream *s = cap ? cap : prev;
  capture[dev.kind][dev.index].active = false;
  void *handle = NULL;
  ingot_status st = rt->graph_end(dev.index, s->handle, &handle);
  if (cap) {
    set_current(prev);
    ingot_stream_destroy(cap);
  }
  if (st) return NULL;
  ingot_graph *g = calloc(1, sizeof *g);
  if (!g) {
    rt->graph_destroy(dev.index, handle);
    return ingot_fail(INGOT_ERR_OOM, "graph_end: out of host memory");
  }
  g->dev = dev;
  g->handle = handle;
  return g;
}

ingot_status ingot_graph_replay(ingot_graph *graph) {
  if (!graph) return ingot_set_error(INGOT_ERR_ARG, "graph_replay: NULL graph");
  const ingot_backend *be = dev_backend("graph_replay", graph->dev);
  if (!be) return ingot_last_status();
  const ingot_runtime_ops *rt = rt_of(be);
  ingot_stream *s = ingot_current_stream(graph->dev);
  return rt->graph_replay(graph->dev.index, graph->handle, s->handle);
}

void ingot_graph_destroy(ingot_graph *graph) {
  if (!graph) return;
  const ingot_runtime_ops *rt = rt_of(ingot_backend_get(graph->dev.kind));
  if (rt && rt->graph_destroy) rt->graph_destroy(graph->dev.index, graph->handle);
  free(graph);
}
