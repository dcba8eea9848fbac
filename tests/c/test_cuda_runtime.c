/* The CUDA runtime through the public API: caching-allocator statistics
 * across alloc/free/split/merge, stream-ordered reuse, empty_cache, the
 * memory-fraction limit, out of memory, streams and events, device graphs
 * (capture, private pool, replay with new inputs; softmax and top-k of the
 * decode vocabulary replayed against eager) and pinned memory.
 * Exits 77 ("skipped: no CUDA device") without a CUDA device. The stats
 * test runs first, while nothing else is allocated. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"
#include "test.h"

#define MiB ((int64_t)1 << 20)

static ingot_device G;

static ingot_memory_stats stats(void) {
  ingot_memory_stats s;
  memset(&s, 0, sizeof s);
  CHECK_EQ_INT(ingot_memory_stats(G, &s), INGOT_OK);
  return s;
}

static ingot_tensor *bytes(int64_t n) { return ingot_empty(1, &n, INGOT_U8, G); }

/* All n floats of t equal v. */
static bool all_equal_f32(const ingot_tensor *t, float v) {
  int64_t n = ingot_numel(t);
  float *h = malloc((size_t)n * sizeof *h);
  bool ok = h && ingot_to_host(t, h, (size_t)n * sizeof *h) == INGOT_OK;
  for (int64_t i = 0; ok && i < n; i++) ok = h[i] == v;
  free(h);
  return ok;
}

static void test_stats_split_merge(void) {
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  CHECK_EQ_INT(ingot_reset_peak_memory_stats(G), INGOT_OK);
  ingot_memory_stats s0 = stats();
  CHECK_EQ_INT(s0.allocated_bytes, 0);
  CHECK_EQ_INT(s0.reserved_bytes, 0);
  CHECK_EQ_INT(s0.active_bytes, 0);
  CHECK(s0.memory_limit > 0);

  /* 3 x 1 MiB (small): two share a 2 MiB segment, the third opens another. */
  ingot_tensor *a = bytes(MiB), *b = bytes(MiB), *c = bytes(MiB);
  CHECK(a && b && c);
  ingot_memory_stats s = stats();
  CHECK_EQ_INT(s.allocated_bytes, 3 * MiB);
  CHECK_EQ_INT(s.requested_bytes, 3 * MiB);
  CHECK_EQ_INT(s.active_bytes, 3 * MiB);
  CHECK_EQ_INT(s.reserved_bytes, 4 * MiB);
  CHECK_EQ_INT(s.num_allocs - s0.num_allocs, 2);
  CHECK_EQ_INT(s.num_segments, 2);
  CHECK_EQ_INT(s.num_blocks, 3);
  CHECK_EQ_INT((char *)ingot_tensor_data(b) - (char *)ingot_tensor_data(a), MiB);

  ingot_release(b); /* the middle one */
  s = stats();
  CHECK_EQ_INT(s.allocated_bytes, 2 * MiB);
  CHECK_EQ_INT(s.active_bytes, 2 * MiB);
  CHECK_EQ_INT(s.reserved_bytes, 4 * MiB);
  CHECK_EQ_INT(s.num_blocks, 2);
  CHECK_EQ_INT(s.peak_allocated_bytes, 3 * MiB);
  CHECK_EQ_INT(s.peak_reserved_bytes, 4 * MiB);

  ingot_release(c); /* its segment is fully free now (merged with its rest) */
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  s = stats();
  CHECK_EQ_INT(s.allocated_bytes, MiB);
  CHECK_EQ_INT(s.reserved_bytes, 2 * MiB);
  CHECK_EQ_INT(s.num_frees - s0.num_frees, 1);
  CHECK_EQ_INT(s.num_segments, 1);

  /* Rounding: 1000 bytes take 1024; requested counts what was asked. */
  ingot_tensor *r = bytes(1000);
  s = stats();
  CHECK_EQ_INT(s.allocated_bytes, MiB + 1024);
  CHECK_EQ_INT(s.requested_bytes, MiB + 1000);
  CHECK_EQ_INT(s.reserved_bytes, 2 * MiB); /* carved from a's segment (b's old space) */
  ingot_release(r);
  ingot_release(a);

  /* Split and merge: two 512 KiB blocks freed merge back with the rest, and
   * a 1 MiB request then starts at the segment's base. */
  ingot_tensor *x = bytes(512 * 1024), *y = bytes(512 * 1024);
  char *px = ingot_tensor_data(x);
  CHECK_EQ_INT((char *)ingot_tensor_data(y) - px, 512 * 1024);
  ingot_release(x);
  ingot_release(y);
  s = stats();
  CHECK_EQ_INT(s.allocated_bytes, 0);
  CHECK_EQ_INT(s.active_bytes, 0);
  ingot_tensor *z = bytes(MiB);
  CHECK((char *)ingot_tensor_data(z) == px);
  CHECK_EQ_INT(stats().num_allocs, s.num_allocs); /* no new segment */
  ingot_release(z);

  /* Large: 3 MiB rounds its segment to 4 MiB; the 1 MiB rest is not split off. */
  ingot_tensor *l = bytes(3 * MiB);
  s = stats();
  CHECK_EQ_INT(s.allocated_bytes, 4 * MiB);
  CHECK_EQ_INT(s.requested_bytes, 3 * MiB);
  ingot_release(l);
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  s = stats();
  CHECK_EQ_INT(s.reserved_bytes, 0);
  CHECK_EQ_INT(s.allocated_bytes, 0);
  CHECK_EQ_INT(s.num_segments, 0);
  CHECK_EQ_INT(s.peak_allocated_bytes, 4 * MiB);
  CHECK_EQ_INT(ingot_reset_peak_memory_stats(G), INGOT_OK);
  CHECK_EQ_INT(stats().peak_allocated_bytes, 0);
}

/* Queue some tens of milliseconds of fills on the current stream. */
static void busy(int rounds) {
  int64_t n = 512 * MiB; /* 2 GiB of f32 */
  for (int i = 0; i < rounds; i++) ingot_release(ingot_full(1, &n, (double)i, INGOT_F32, G));
}

static void test_stream_reuse(void) {
  ingot_stream *def = ingot_default_stream(G), *s = ingot_stream_create(G);
  CHECK(def && s);
  CHECK(ingot_current_stream(G) == def);
  /* Same stream: the block comes straight back. */
  ingot_tensor *t = bytes(4 * MiB);
  char *pt = ingot_tensor_data(t);
  ingot_release(t);
  t = bytes(4 * MiB);
  CHECK((char *)ingot_tensor_data(t) == pt);
  ingot_release(t);
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);

  /* Another stream never takes the default stream's freed block: neither
   * while the work queued before the free runs nor after it has finished. */
  busy(40);
  ingot_tensor *x = bytes(64 * MiB);
  char *px = ingot_tensor_data(x);
  ingot_release(x);
  CHECK_EQ_INT(ingot_set_current_stream(s), INGOT_OK);
  CHECK(ingot_current_stream(G) == s);
  int64_t allocs = stats().num_allocs;
  ingot_tensor *y = bytes(64 * MiB);
  char *py = ingot_tensor_data(y);
  CHECK(py != px);
  ingot_release(y); /* belongs to s */
  CHECK_EQ_INT(ingot_stream_synchronize(def), INGOT_OK);
  CHECK(ingot_stream_query(def));
  /* Now: s gets its own block back (same stream); the default stream's block
   * stays the default stream's, so the second request takes a new segment. */
  ingot_tensor *z = bytes(64 * MiB), *w = bytes(64 * MiB);
  CHECK((char *)ingot_tensor_data(z) == py);
  CHECK((char *)ingot_tensor_data(w) != px);
  CHECK_EQ_INT(stats().num_allocs - allocs, 2); /* y's and w's segments */
  ingot_release(z);
  ingot_release(w);
  CHECK_EQ_INT(ingot_set_current_stream(def), INGOT_OK);
  /* Back on the default stream: its own block comes back, not s's. */
  ingot_tensor *v = bytes(64 * MiB);
  CHECK((char *)ingot_tensor_data(v) == px);
  CHECK_EQ_INT(stats().num_allocs - allocs, 2);
  ingot_release(v);
  ingot_stream_destroy(s);
  CHECK(ingot_current_stream(G) == def);
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  CHECK_EQ_INT(stats().reserved_bytes, 0);
}

static void test_record_stream(void) {
  ingot_stream *s = ingot_stream_create(G);
  ingot_tensor *t = bytes(8 * MiB);
  char *pt = ingot_tensor_data(t);
  CHECK_EQ_INT(ingot_record_stream(t, s), INGOT_OK);
  busy(10); /* on the default stream, where t lives */
  CHECK_EQ_INT(ingot_set_current_stream(s), INGOT_OK);
  busy(10);
  CHECK_EQ_INT(ingot_set_current_stream(ingot_default_stream(G)), INGOT_OK);
  bool still_busy = !ingot_stream_query(s);
  ingot_release(t);
  if (still_busy) {
    ingot_memory_stats m = stats();
    CHECK_EQ_INT(m.active_bytes - m.allocated_bytes, 8 * MiB); /* freed, still in use */
    ingot_tensor *u = bytes(8 * MiB); /* not even its own stream may take it */
    CHECK((char *)ingot_tensor_data(u) != pt);
    ingot_release(u);
  }
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);
  ingot_tensor *v = bytes(8 * MiB);
  ingot_tensor *v2 = bytes(8 * MiB);
  CHECK((char *)ingot_tensor_data(v) == pt || (char *)ingot_tensor_data(v2) == pt);
  ingot_release(v);
  ingot_release(v2);
  ingot_memory_stats m = stats();
  CHECK_EQ_INT(m.active_bytes, m.allocated_bytes);
  ingot_stream_destroy(s);
}

static void test_fraction_and_oom(void) {
  ingot_memory_stats s0 = stats();
  /* Limit: 1% of the card (about 1.4 GB on an H200); 4 GiB must fail. */
  CHECK_EQ_INT(ingot_set_memory_fraction(G, 0.01), INGOT_OK);
  CHECK(stats().memory_limit > 0 && stats().memory_limit < s0.memory_limit);
  ingot_tensor *t = bytes(4096 * MiB);
  CHECK(t == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_OOM);
  CHECK_HAS(ingot_last_error(), "memory fraction limit");
  ingot_tensor *small = bytes(MiB); /* below the limit: fine */
  CHECK(small != NULL);
  ingot_release(small);
  CHECK_EQ_INT(ingot_set_memory_fraction(G, 1.0), INGOT_OK);
  CHECK(ingot_set_memory_fraction(G, 0.0) != INGOT_OK);
  CHECK(ingot_set_memory_fraction(G, 1.5) != INGOT_OK);

  /* More than the card holds: a clear error, consistent stats, then work goes on. */
  ingot_tensor *keep = bytes(3 * MiB);
  ingot_memory_stats s1 = stats();
  int64_t live = ingot_live_tensors();
  ingot_tensor *huge = bytes((int64_t)1 << 40);
  CHECK(huge == NULL);
  CHECK_EQ_INT(ingot_last_status(), INGOT_ERR_OOM);
  CHECK_HAS(ingot_last_error(), "out of memory");
  CHECK_HAS(ingot_last_error(), "tried to allocate 1.00 TiB (1099511627776 bytes)");
  CHECK_HAS(ingot_last_error(), "allocated");
  CHECK_HAS(ingot_last_error(), "reserved");
  CHECK_HAS(ingot_last_error(), "free of");
  CHECK_EQ_INT(ingot_live_tensors(), live);
  ingot_memory_stats s2 = stats();
  CHECK_EQ_INT(s2.num_ooms - s1.num_ooms, 1);
  CHECK_EQ_INT(s2.num_alloc_retries - s1.num_alloc_retries, 1);
  CHECK_EQ_INT(s2.allocated_bytes, s1.allocated_bytes);
  CHECK_EQ_INT(s2.reserved_bytes, 4 * MiB); /* only keep's segment is left */
  ingot_clear_error();
  ingot_tensor *ok = ingot_full(1, (int64_t[]){1 << 20}, 7, INGOT_F32, G);
  CHECK(ok && all_equal_f32(ok, 7.0f));
  ingot_release(ok);
  ingot_release(keep);
}

static void test_streams_events(void) {
  ingot_stream *def = ingot_default_stream(G);
  ingot_stream *s1 = ingot_stream_create(G), *s2 = ingot_stream_create(G);
  ingot_event *e = ingot_event_create(G, false);
  CHECK(s1 && s2 && e);
  int64_t n = 16 * MiB;
  /* s1 produces, s2 consumes after an event. */
  CHECK_EQ_INT(ingot_set_current_stream(s1), INGOT_OK);
  busy(5);
  ingot_tensor *a = ingot_full(1, &n, 3.0, INGOT_F32, G);
  CHECK_EQ_INT(ingot_event_record(e, NULL), INGOT_OK); /* NULL: s1, the current stream */
  CHECK_EQ_INT(ingot_set_current_stream(s2), INGOT_OK);
  CHECK_EQ_INT(ingot_stream_wait_event(s2, e), INGOT_OK);
  ingot_tensor *b = ingot_empty(1, &n, INGOT_F32, G);
  CHECK_EQ_INT(ingot_copy_(b, a), INGOT_OK);
  CHECK_EQ_INT(ingot_record_stream(a, s2), INGOT_OK); /* a (from s1) is read on s2 */
  ingot_release(a);
  CHECK_EQ_INT(ingot_stream_synchronize(s2), INGOT_OK);
  CHECK(ingot_stream_query(s2));
  CHECK(ingot_event_query(e));
  CHECK(all_equal_f32(b, 3.0f)); /* read on s2, the current stream */

  /* wait_stream: s2 waits for everything queued on s1 so far. */
  CHECK_EQ_INT(ingot_set_current_stream(s1), INGOT_OK);
  busy(5);
  ingot_tensor *c = ingot_full(1, &n, -1.5, INGOT_F32, G);
  CHECK_EQ_INT(ingot_stream_wait_stream(s2, s1), INGOT_OK);
  CHECK_EQ_INT(ingot_set_current_stream(s2), INGOT_OK);
  CHECK_EQ_INT(ingot_copy_(b, c), INGOT_OK);
  CHECK_EQ_INT(ingot_record_stream(c, s2), INGOT_OK);
  ingot_release(c);
  CHECK_EQ_INT(ingot_event_record(e, s2), INGOT_OK);
  CHECK_EQ_INT(ingot_event_synchronize(e), INGOT_OK);
  CHECK(all_equal_f32(b, -1.5f));
  CHECK_EQ_INT(ingot_set_current_stream(def), INGOT_OK);
  CHECK_EQ_INT(ingot_stream_wait_stream(def, s2), INGOT_OK);
  ingot_release(b);

  /* Timing events around work. */
  ingot_event *t0 = ingot_event_create(G, true), *t1 = ingot_event_create(G, true);
  CHECK_EQ_INT(ingot_event_record(t0, def), INGOT_OK);
  busy(10);
  CHECK_EQ_INT(ingot_event_record(t1, def), INGOT_OK);
  CHECK_EQ_INT(ingot_event_synchronize(t1), INGOT_OK);
  float ms = -1;
  CHECK_EQ_INT(ingot_event_elapsed_ms(t0, t1, &ms), INGOT_OK);
  CHECK(ms > 0);
  CHECK(ingot_event_elapsed_ms(e, t1, &ms) != INGOT_OK); /* e has no timing */
  ingot_event_destroy(t0);
  ingot_event_destroy(t1);
  ingot_event_destroy(e);
  /* Destroying the current stream falls back to the default stream. */
  CHECK_EQ_INT(ingot_set_current_stream(s1), INGOT_OK);
  ingot_stream_destroy(s1);
  CHECK(ingot_current_stream(G) == def);
  ingot_stream_destroy(s2);
  ingot_stream_destroy(def); /* ignored */
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);

  /* The CPU's trivial streams and events. */
  ingot_stream *cs = ingot_stream_create(INGOT_CPU);
  ingot_event *c0 = ingot_event_create(INGOT_CPU, true), *c1 = ingot_event_create(INGOT_CPU, true);
  CHECK(cs && c0 && c1);
  CHECK_EQ_INT(ingot_event_record(c0, cs), INGOT_OK);
  CHECK_EQ_INT(ingot_event_record(c1, NULL), INGOT_OK);
  CHECK(ingot_event_query(c1));
  CHECK(ingot_stream_query(cs));
  CHECK_EQ_INT(ingot_event_elapsed_ms(c0, c1, &ms), INGOT_OK);
  CHECK(ms >= 0);
  ingot_event_destroy(c0);
  ingot_event_destroy(c1);
  ingot_stream_destroy(cs);
}

static void test_graph(void) {
  int64_t n = 1000003;
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  ingot_memory_stats s0 = stats();
  ingot_tensor *x = ingot_full(1, &n, 1.0, INGOT_F32, G); /* the input, made before capture */
  ingot_tensor *out = ingot_empty(1, &n, INGOT_F64, G);
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);
  ingot_stream *def = ingot_current_stream(G);

  CHECK_EQ_INT(ingot_graph_begin(G), INGOT_OK);
  CHECK(ingot_current_stream(G) != def); /* a private capture stream */
  CHECK(ingot_graph_begin(G) != INGOT_OK);  /* no nesting */
  ingot_tensor *y = ingot_cast(x, INGOT_F64);             /* captured copy kernel */
  ingot_tensor *tmp = ingot_full(1, &n, 9.0, INGOT_F32, G); /* freed during capture */
  ingot_release(tmp);
  ingot_tensor *r = ingot_arange(0, (double)n, 1, INGOT_F32, G);
  CHECK_EQ_INT(ingot_copy_(out, y), INGOT_OK); /* into memory from outside the graph */
  ingot_memory_stats sc = stats();
  ingot_graph *g = ingot_graph_end(G);
  CHECK(g != NULL);
  CHECK(ingot_current_stream(G) == def);
  CHECK(sc.reserved_bytes > s0.reserved_bytes); /* the private pool */

  for (int round = 0; round < 3; round++) {
    float v = 2.5f * (float)round - 1.0f;
    ingot_tensor *nv = ingot_full(1, &n, v, INGOT_F32, G);
    CHECK_EQ_INT(ingot_copy_(x, nv), INGOT_OK); /* new input values, then replay */
    ingot_release(nv);
    CHECK_EQ_INT(ingot_graph_replay(g), INGOT_OK);
    double *h = malloc((size_t)n * sizeof *h);
    float *hr = malloc((size_t)n * sizeof *hr);
    CHECK_EQ_INT(ingot_to_host(out, h, (size_t)n * sizeof *h), INGOT_OK);
    CHECK_EQ_INT(ingot_to_host(r, hr, (size_t)n * sizeof *hr), INGOT_OK);
    bool ok = true, okr = true;
    for (int64_t i = 0; i < n; i++) {
      ok &= h[i] == (double)v;
      okr &= hr[i] == (float)i;
    }
    CHECK(ok);
    CHECK(okr);
    CHECK(all_equal_f32(x, v));
    free(h);
    free(hr);
  }
  /* Not capturing any more: new allocations come from the general pool. */
  ingot_tensor *after = bytes(MiB);
  CHECK(after != NULL);
  ingot_release(after);
  ingot_release(y);
  ingot_release(r);
  ingot_graph_destroy(g);
  ingot_release(x);
  ingot_release(out);
  CHECK_EQ_INT(ingot_empty_cache(G), INGOT_OK);
  ingot_memory_stats s1 = stats();
  CHECK_EQ_INT(s1.reserved_bytes, s0.reserved_bytes);
  CHECK_EQ_INT(s1.allocated_bytes, s0.allocated_bytes);

  /* Capture on a user stream stays on it. */
  ingot_stream *s = ingot_stream_create(G);
  CHECK_EQ_INT(ingot_set_current_stream(s), INGOT_OK);
  CHECK_EQ_INT(ingot_graph_begin(G), INGOT_OK);
  CHECK(ingot_current_stream(G) == s);
  ingot_tensor *f = ingot_full(1, &n, 4.0, INGOT_F32, G);
  ingot_graph *g2 = ingot_graph_end(G);
  CHECK(g2 != NULL);
  CHECK_EQ_INT(ingot_graph_replay(g2), INGOT_OK);
  CHECK_EQ_INT(ingot_stream_synchronize(s), INGOT_OK);
  CHECK(all_equal_f32(f, 4.0f));
  ingot_release(f);
  ingot_graph_destroy(g2);
  CHECK_EQ_INT(ingot_set_current_stream(ingot_default_stream(G)), INGOT_OK);
  ingot_stream_destroy(s);
  CHECK(ingot_graph_end(G) == NULL); /* nothing open */
  CHECK(ingot_graph_begin(INGOT_CPU) != INGOT_OK);
}

static void test_pinned(void) {
  int64_t n = 4 * MiB + 3;
  ingot_tensor *p = ingot_empty_pinned(1, &n, INGOT_F32);
  ingot_tensor *q = ingot_empty_pinned(1, &n, INGOT_F32);
  CHECK(p && q);
  CHECK(ingot_device_of(p).kind == INGOT_DEVICE_CPU);
  CHECK(ingot_is_pinned(p));
  ingot_tensor *plain = ingot_empty(1, &n, INGOT_F32, INGOT_CPU);
  CHECK(!ingot_is_pinned(plain));
  float *hp = ingot_tensor_data(p);
  for (int64_t i = 0; i < n; i++) hp[i] = (float)(i % 1000) * 0.5f;
  ingot_tensor *d = ingot_to(p, G); /* asynchronous from pinned memory */
  CHECK(d != NULL);
  CHECK_EQ_INT(ingot_to_host(d, ingot_tensor_data(q), (size_t)n * sizeof(float)), INGOT_OK);
  CHECK(memcmp(ingot_tensor_data(p), ingot_tensor_data(q), (size_t)n * sizeof(float)) == 0);
  /* CPU ops work on pinned tensors as on any other. */
  CHECK_EQ_INT(ingot_copy_(plain, p), INGOT_OK);
  CHECK(memcmp(ingot_tensor_data(plain), hp, (size_t)n * sizeof(float)) == 0);
  ingot_release(d);
  ingot_release(p);
  ingot_release(q);
  ingot_release(plain);
  ingot_tensor *z = ingot_empty_pinned(0, NULL, INGOT_F64);
  CHECK(z != NULL);
  ingot_release(z);
}

/* ingot_copy_to_host_async: into pinned memory the copy is queued (values
 * checked after an event recorded behind it), from a view and from a kernel's
 * output; into unpinned memory it waits; argument errors. */
static void test_copy_to_host_async(void) {
  int64_t n = 3 * MiB + 5;
  ingot_tensor *src = ingot_arange(0, (double)n, 1, INGOT_I32, G);
  ingot_tensor *pin = ingot_empty_pinned(1, (int64_t[]){n - 2}, INGOT_I32);
  ingot_tensor *plain = ingot_empty(1, (int64_t[]){1}, INGOT_I32, INGOT_CPU);
  ingot_event *ev = ingot_event_create(G, false);
  CHECK(src && pin && plain && ev);
  ingot_tensor *view = ingot_narrow(src, 0, 2, n - 2);
  for (int rep = 0; rep < 2; rep++) { /* the second into memory the first wrote */
    ingot_tensor *s2 = rep ? ingot_add_scalar(view, 7) : ingot_retain(view);
    CHECK_EQ_INT(ingot_copy_to_host_async(pin, s2), INGOT_OK);
    CHECK_EQ_INT(ingot_event_record(ev, NULL), INGOT_OK);
    CHECK_EQ_INT(ingot_event_synchronize(ev), INGOT_OK);
    const int32_t *h = ingot_tensor_data(pin);
    bool ok = true;
    for (int64_t i = 0; i < n - 2; i++) ok = ok && h[i] == (int32_t)(i + 2 + 7 * rep);
    CHECK(ok);
    ingot_release(s2);
  }
  /* unpinned destination: copies at once */
  ingot_tensor *one = ingot_narrow(src, 0, 9, 1);
  CHECK_EQ_INT(ingot_copy_to_host_async(plain, one), INGOT_OK);
  CHECK_EQ_INT(*(int32_t *)ingot_tensor_data(plain), 9);
  /* errors: a device destination, another dtype, another size */
  CHECK(ingot_copy_to_host_async(one, one) != INGOT_OK);
  ingot_tensor *f = ingot_zeros(1, (int64_t[]){1}, INGOT_F32, G);
  CHECK(ingot_copy_to_host_async(plain, f) != INGOT_OK);
  CHECK(ingot_copy_to_host_async(plain, view) != INGOT_OK);
  CHECK(strstr(ingot_last_error(), "copy_to_host_async") != NULL);
  ingot_release(f);
  ingot_release(one);
  ingot_release(view);
  ingot_event_destroy(ev);
  ingot_release(src);
  ingot_release(pin);
  ingot_release(plain);
}

/* True when a and b hold the same bytes (same shape and dtype, contiguous). */
static bool same_bytes(const ingot_tensor *a, const ingot_tensor *b) {
  size_t n = (size_t)ingot_numel(a) * ingot_dtype_size(ingot_dtype_of(a));
  if (ingot_numel(b) != ingot_numel(a) || ingot_dtype_of(b) != ingot_dtype_of(a)) return false;
  char *ha = malloc(n), *hb = malloc(n);
  bool ok = ha && hb && ingot_to_host(a, ha, n) == INGOT_OK &&
            ingot_to_host(b, hb, n) == INGOT_OK && memcmp(ha, hb, n) == 0;
  free(ha);
  free(hb);
  return ok;
}

/* Same float32 shape and every element within rtol of b (relative to |b|,
 * plus 1e-30 absolute: softmax values are positive and may be tiny). */
static bool close_f32(const ingot_tensor *a, const ingot_tensor *b, float rtol) {
  int64_t n = ingot_numel(a);
  if (ingot_numel(b) != n || ingot_dtype_of(a) != INGOT_F32 || ingot_dtype_of(b) != INGOT_F32)
    return false;
  float *ha = malloc((size_t)n * sizeof *ha), *hb = malloc((size_t)n * sizeof *hb);
  bool ok = ha && hb && ingot_to_host(a, ha, (size_t)n * sizeof *ha) == INGOT_OK &&
            ingot_to_host(b, hb, (size_t)n * sizeof *hb) == INGOT_OK;
  for (int64_t i = 0; ok && i < n; i++) ok = fabsf(ha[i] - hb[i]) <= rtol * fabsf(hb[i]) + 1e-30f;
  free(ha);
  free(hb);
  return ok;
}

/* The decode vocabulary ops (softmax, top-8) captured in a graph and replayed
 * on new inputs give the eager results (top-k exactly: selection is exact;
 * softmax within 1e-5: a capture may take another launch plan than eager),
 * at 1 and 64 rows of 151936. */
static void test_graph_vocab_ops(void) {
  for (int64_t rows = 1; rows <= 64; rows *= 64) {
    int64_t shape[2] = {rows, 151936};
    ingot_tensor *x = ingot_randn(2, shape, INGOT_F32, G);
    ingot_stream *s = ingot_stream_create(G);
    CHECK_EQ_INT(ingot_set_current_stream(s), INGOT_OK);
    CHECK_EQ_INT(ingot_graph_begin(G), INGOT_OK);
    ingot_tensor *sm = ingot_softmax(x, -1), *idx = NULL;
    ingot_tensor *tv = ingot_topk(x, 8, -1, true, true, &idx);
    ingot_graph *g = ingot_graph_end(G);
    CHECK(g && sm && tv && idx);
    for (int round = 0; round < 2 && g; round++) {
      ingot_tensor *nx = ingot_randn(2, shape, INGOT_F32, G);
      CHECK_EQ_INT(ingot_copy_(x, nx), INGOT_OK);
      CHECK_EQ_INT(ingot_graph_replay(g), INGOT_OK);
      ingot_tensor *esm = ingot_softmax(nx, -1), *eidx = NULL;
      ingot_tensor *etv = ingot_topk(nx, 8, -1, true, true, &eidx);
      CHECK(close_f32(sm, esm, 1e-5f));
      CHECK(same_bytes(tv, etv));
      CHECK(same_bytes(idx, eidx));
      ingot_release(esm);
      ingot_release(etv);
      ingot_release(eidx);
      ingot_release(nx);
    }
    CHECK_EQ_INT(ingot_stream_synchronize(s), INGOT_OK);
    ingot_release(sm);
    ingot_release(tv);
    ingot_release(idx);
    ingot_graph_destroy(g);
    CHECK_EQ_INT(ingot_set_current_stream(ingot_default_stream(G)), INGOT_OK);
    ingot_stream_destroy(s);
    ingot_release(x);
  }
}

/* The profiler range: start/stop succeed with no profiler attached (CUDA then
 * ignores them); work queued inside the range runs as ever. */
static void test_profiler_range(void) {
  CHECK_EQ_INT(ingot_profiler_range(G, true), INGOT_OK);
  ingot_tensor *t = ingot_full(1, (int64_t[]){4}, 2.0, INGOT_F32, G);
  float host[4] = {0};
  CHECK(t && ingot_to_host(t, host, sizeof host) == INGOT_OK && host[3] == 2.0f);
  CHECK_EQ_INT(ingot_profiler_range(G, false), INGOT_OK);
  CHECK_EQ_INT(ingot_profiler_range(ingot_cuda(99), true) != INGOT_OK, 1);
  ingot_release(t);
}

int main(void) {
  if (ingot_device_count(INGOT_DEVICE_CUDA) == 0) {
    printf("skipped: no CUDA device\n");
    return 77;
  }
  G = ingot_cuda(0);
  int64_t live0 = ingot_live_tensors();
  test_stats_split_merge();
  test_stream_reuse();
  test_record_stream();
  test_fraction_and_oom();
  test_streams_events();
  test_graph();
  test_graph_vocab_ops();
  test_pinned();
  test_copy_to_host_async();
  test_profiler_range();
  CHECK_EQ_INT(ingot_live_tensors(), live0);
  CHECK_EQ_INT(ingot_synchronize(G), INGOT_OK);
  ingot_memory_stats s = stats();
  CHECK_EQ_INT(s.allocated_bytes, 0);
  CHECK_EQ_INT(s.active_bytes, 0);
  return test_report();
}
