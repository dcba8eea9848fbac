/* The CUDA caching allocator: device memory for tensors and kernel scratch,
 * modelled on PyTorch's CUDACachingAllocator (docs/cuda-runtime.md).
 *
 * - Segments come from plain cudaMalloc: 2 MiB for small requests (<= 1 MiB),
 *   the request rounded up to 2 MiB for large ones. Requests are rounded to
 *   512 B. A segment is carved into blocks (address-ordered list); a free
 *   block is split when the remainder is worth keeping (>= 512 B small,
 *   > 1 MiB large) and merged with free neighbours of its segment on free.
 * - Pools: every device has a general pool; every graph has a private pool
 *   that takes the allocations of its capture. Each pool has a small and a
 *   large free list sorted by (size, address); a request takes the first
 *   (best) fit it may use.
 * - Stream order (PyTorch's scheme): a block belongs to the stream it was
 *   allocated on. When it is freed it goes straight back to the pool as
 *   reusable by later work on that stream only (stream order makes that
 *   safe): no event, no CUDA call. Another stream never gets it; it
 *   allocates or splits its own blocks. (Blocks of a destroyed stream, whose
 *   work has finished, become usable by any stream.)
 * - A block that other streams used (record_stream) gets, at free time, one
 *   event per such stream and stays out of the pool (in the device's pending
 *   list, still counted active) until they have all completed; allocations
 *   check the pending list with cudaEventQuery (PyTorch's process_events: at
 *   most one not-ready query per stream) and return finished blocks to their
 *   stream's pool.
 * - Host cost: alloc and free of an ordinary block make no CUDA API call at
 *   all (no cudaSetDevice either): the device is set only before calls that
 *   depend on it (cudaMalloc, cudaFree, event creation/recording, device
 *   synchronisation, cudaMemGetInfo), all off the cache-hit path. Block
 *   structs are recycled, so a split/merge costs no malloc either.
 * - During a capture (on the capturing thread) no event is recorded or
 *   queried and nothing is cudaFree'd: both are illegal then. cudaMalloc is
 *   done in relaxed capture mode (the graph keeps the address; replays do not
 *   allocate).
 * - Out of memory (cudaMalloc failed, or the memory-fraction limit reached):
 *   synchronise, return finished pending blocks, free every fully free cached
 *   segment of the general pool, retry once, then fail with INGOT_ERR_OOM and
 *   a message with the sizes.
 * One mutex per device guards its state; statistics are exact under it. */
#include "allocator.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "cuda_kernels.h"

#define ROUND_BYTES ((size_t)512)
#define SMALL_SIZE ((size_t)1 << 20)   /* requests up to this are small */
#define SMALL_SEGMENT ((size_t)2 << 20) /* small blocks come from 2 MiB segments */
#define LARGE_ROUND ((size_t)2 << 20)   /* large segments: multiples of 2 MiB */
#define SPARE_BLOCKS 4096               /* recycled block structs kept per device */
#define NOT_READY_MAX 16                /* streams remembered per pending scan */

enum block_state {
  B_LIVE,    /* allocated */
  B_STREAM,  /* free, in its pool: reusable by work on b->stream only */
  B_ANY,     /* free, in its pool: reusable on any stream */
  B_PENDING  /* freed, other streams used it: out of the pools until all ev[] completed */
};

typedef struct segment segment;
typedef struct block block;

struct block {
  char *ptr;
  size_t size;      /* rounded */
  size_t requested; /* live blocks: bytes asked for */
  segment *seg;
  block *prev, *next;   /* neighbours in the segment (address order) */
  block *fprev, *fnext; /* free list; for B_PENDING (not deferred): the pending list */
  block *hnext;         /* live-block hash chain; spare list */
  enum block_state state;
  cudaStream_t stream;  /* allocation (owner) stream */
  cudaEvent_t *ev;      /* B_PENDING: events that must complete first ... */
  cudaStream_t *evs;    /* ... and the stream each was recorded on */
  int nev, evcap;
  cudaStream_t *uses; /* live: other streams using it (record_stream) */
  int nuses, usecap;
  bool deferred; /* freed during capture with other-stream uses: events later */
  bool orphan;   /* B_PENDING whose owner stream was destroyed: B_ANY when done */
};

struct segment {
  char *base;
  size_t size;
  bool small;
  int nlive; /* live blocks */
  cuda_pool *pool;
  block *first;
  segment *sprev, *snext;
};

struct cuda_pool {
  block *free_small, *free_large;
  segment *segs;
  bool dead;    /* private pool whose graph is gone */
  bool private_;
  cuda_pool *pnext; /* the device's private pools */
};

typedef struct dev_state {
  bool init;
  int index;
  cuda_pool general;
  block **buckets; /* live blocks by pointer */
  size_t nbuckets, nlive;
  size_t total_mem;
  double fraction;
  cudaEvent_t *evpool; /* idle events (disable-timing) for reuse */
  int nevpool, evpoolcap;
  block **deferred; /* freed during capture, events to record at capture end */
  int ndeferred, deferredcap;
  block *pend_head, *pend_tail; /* B_PENDING blocks in free order */
  block *spare;                 /* recycled block structs */
  int nspare;
  cuda_pool *private_pools;
  ingot_memory_stats st;
} dev_state;

static dev_state devs[CUDA_MAX_DEVICES];
static mtx_t locks[CUDA_MAX_DEVICES];
static once_flag locks_once = ONCE_FLAG_INIT;
static _Thread_local cuda_pool *capture_pool[CUDA_MAX_DEVICES];

static void init_locks(void) {
  for (int i = 0; i < CUDA_MAX_DEVICES; i++) mtx_init(&locks[i], mtx_plain);
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static void max_update(int64_t *peak, int64_t v) {
  if (v > *peak) *peak = v;
}

static void stats_changed(dev_state *d) {
  max_update(&d->st.peak_allocated_bytes, d->st.allocated_bytes);
  max_update(&d->st.peak_requested_bytes, d->st.requested_bytes);
  max_update(&d->st.peak_reserved_bytes, d->st.reserved_bytes);
  max_update(&d->st.peak_active_bytes, d->st.active_bytes);
}

static bool valid_device(int device) { return device >= 0 && device < CUDA_MAX_DEVICES; }

/* Make d's device current before a call that depends on it (cudaMalloc,
 * cudaFree, event creation, recording on the legacy default stream, device
 * synchronisation, cudaMemGetInfo). Never on the cache-hit path. */
static cudaError_t dev_set(const dev_state *d) { return cuda_use_device_rt(d->index); }

/* Lock and lazily initialise device state. */
static dev_state *lock_dev(int device) {
  call_once(&locks_once, init_locks);
  mtx_lock(&locks[device]);
  dev_state *d = &devs[device];
  if (!d->init) {
    memset(d, 0, sizeof *d);
    d->init = true;
    d->index = device;
    d->fraction = 1.0;
    dev_set(d);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      struct cudaDeviceProp p;
      if (cudaGetDeviceProperties(&p, device) == cudaSuccess) total_b = p.totalGlobalMem;
      else cudaGetLastError();
    }
    d->total_mem = total_b;
    d->nbuckets = 1024;
    d->buckets = calloc(d->nbuckets, sizeof *d->buckets);
    d->st.memory_limit = (int64_t)total_b;
  }
  return d;
}

static void unlock_dev(int device) { mtx_unlock(&locks[device]); }

/* ---- block structs (recycled: no malloc per split/merge) ---- */
static block *block_new(dev_state *d) {
  block *b = d->spare;
  if (!b) return calloc(1, sizeof *b);
  d->spare = b->hnext;
  d->nspare--;
  /* Keep the event/use arrays' capacity; everything else starts zeroed. */
  cudaEvent_t *ev = b->ev;
  cudaStream_t *evs = b->evs, *uses = b->uses;
  int evcap = b->evcap, usecap = b->usecap;
  memset(b, 0, sizeof *b);
  b->ev = ev, b->evs = evs, b->evcap = evcap;
  b->uses = uses, b->usecap = usecap;
  return b;
}

/* ---- live-block hash ---- */
static size_t hash_ptr(const void *p, size_t nb) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 9;
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 20) & (nb - 1);
}

static void hash_grow(dev_state *d) {
  size_t nb = d->nbuckets * 2;
  block **nbk = calloc(nb, sizeof *nbk);
  if (!nbk) return; /* keep the longer chains */
  for (size_t i = 0; i < d->nbuckets; i++) {
    block *b = d->buckets[i];
    while (b) {
      block *n = b->hnext;
      size_t h = hash_ptr(b->ptr, nb);
      b->hnext = nbk[h];
      nbk[h] = b;
      b = n;
    }
  }
  free(d->buckets);
  d->buckets = nbk;
  d->nbuckets = nb;
}

static void hash_insert(dev_state *d, block *b) {
  if (!d->buckets && !(d->buckets = calloc(d->nbuckets, sizeof *d->buckets)))
    return; /* out of host memory: the block stays untracked rather than crash */
  if (d->nlive + 1 > d->nbuckets * 2) hash_grow(d);
  size_t h = hash_ptr(b->ptr, d->nbuckets);
  b->hnext = d->buckets[h];
  d->buckets[h] = b;
  d->nlive++;
}

static block *hash_find(dev_state *d, const void *p, bool remove) {
  if (!d->buckets) return NULL;
  block **link = &d->buckets[hash_ptr(p, d->nbuckets)];
  for (block *b = *link; b; link = &b->hnext, b = b->hnext) {
    if (b->ptr == p) {
      if (remove) {
        *link = b->hnext;
        b->hnext = NULL;
        d->nlive--;
      }
      return b;
    }
  }
  return NULL;
}

/* ---- events (record_stream blocks only) ---- */
/* The caller made the device current. */
static cudaEvent_t event_get(dev_state *d) {
  if (d->nevpool) return d->evpool[--d->nevpool];
  cudaEvent_t e = NULL;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return e;
}

static void event_put(dev_state *d, cudaEvent_t e) {
  if (d->nevpool == d->evpoolcap) {
    int cap = d->evpoolcap ? d->evpoolcap * 2 : 64;
    cudaEvent_t *n = realloc(d->evpool, (size_t)cap * sizeof *n);
    if (!n) {
      cudaEventDestroy(e);
      return;
    }
    d->evpool = n;
    d->evpoolcap = cap;
  }
  d->evpool[d->nevpool++] = e;
}

static bool block_add_event(block *b, cudaEvent_t e, cudaStream_t s) {
  if (b->nev == b->evcap) {
    int cap = b->evcap ? b->evcap * 2 : 2;
    cudaEvent_t *n = realloc(b->ev, (size_t)cap * sizeof *n);
    if (!n) return false;
    b->ev = n; /* larger now; evcap grows once evs has too */
    cudaStream_t *ns = realloc(b->evs, (size_t)cap * sizeof *ns);
    if (!ns) return false;
    b->evs = ns;
    b->evcap = cap;
  }
  b->ev[b->nev] = e;
  b->evs[b->nev] = s;
  b->nev++;
  return true;
}

static void block_drop_events(dev_state *d, block *b) {
  for (int i = 0; i < b->nev; i++) event_put(d, b->ev[i]);
  b->nev = 0;
}

/* Record an event on s and attach it to b; false when that failed. The caller
 * made the device current (s may be the legacy default stream). */
static bool block_record(dev_state *d, block *b, cudaStream_t s) {
  cudaEvent_t e = event_get(d);
  if (!e) return false;
  if (cudaEventRecord(e, s) != cudaSuccess) {
    cudaGetLastError();
    event_put(d, e);
    return false;
  }
  if (!block_add_event(b, e, s)) {
    event_put(d, e);
    return false;
  }
  return true;
}

static void block_destroy(dev_state *d, block *b) {
  block_drop_events(d, b);
  if (d->nspare < SPARE_BLOCKS) {
    b->hnext = d->spare;
    d->spare = b;
    d->nspare++;
    return;
  }
  free(b->ev);
  free(b->evs);
  free(b->uses);
  free(b);
}

/* ---- free lists ---- */
static block **free_list(cuda_pool *p, bool small) {
  return small ? &p->free_small : &p->free_large;
}

static bool free_before(const block *a, const block *b) {
  return a->size < b->size || (a->size == b->size && a->ptr < b->ptr);
}

static void free_insert(block *b) {
  block **head = free_list(b->seg->pool, b->seg->small);
  block *prev = NULL, *cur = *head;
  while (cur && free_before(cur, b)) {
    prev = cur;
    cur = cur->fnext;
  }
  b->fprev = prev;
  b->fnext = cur;
  if (cur) cur->fprev = b;
  if (prev) prev->fnext = b;
  else *head = b;
}

static void free_remove(block *b) {
  block **head = free_list(b->seg->pool, b->seg->small);
  if (b->fprev) b->fprev->fnext = b->fnext;
  else *head = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  b->fprev = b->fnext = NULL;
}

/* Can free neighbours a (lower address) and b merge? */
static bool mergeable(const block *a, const block *b) {
  if (a->state == B_PENDING || b->state == B_PENDING) return false;
  if (a->state == B_LIVE || b->state == B_LIVE) return false;
  if (a->state == B_STREAM && b->state == B_STREAM) return a->stream == b->stream;
  return true;
}

/* Merge free b into free a (a is just below b); returns a. */
static block *merge_into(dev_state *d, block *a, block *b) {
  if (b->state == B_STREAM && a->state == B_ANY) {
    a->state = B_STREAM;
    a->stream = b->stream;
  }
  /* Blocks in the pools hold no events; keep any ordering all the same. */
  for (int i = 0; i < b->nev; i++) {
    if (!block_add_event(a, b->ev[i], b->evs[i])) {
      if (cudaEventSynchronize(b->ev[i]) != cudaSuccess) cudaGetLastError();
      event_put(d, b->ev[i]);
    }
  }
  b->nev = 0;
  a->size += b->size;
  a->next = b->next;
  if (b->next) b->next->prev = a;
  block_destroy(d, b);
  return a;
}

/* Put free block b (not in a list) into its pool, merging with free
 * neighbours of its segment. */
static void free_block_insert(dev_state *d, block *b) {
  if (b->prev && b->prev->state != B_LIVE && mergeable(b->prev, b)) {
    block *a = b->prev;
    free_remove(a);
    b = merge_into(d, a, b);
  }
  if (b->next && b->next->state != B_LIVE && mergeable(b, b->next)) {
    block *n = b->next;
    free_remove(n);
    b = merge_into(d, b, n);
  }
  free_insert(b);
}

/* Forget a private pool that holds no segment any more. */
static void pool_maybe_free(dev_state *d, cuda_pool *p) {
  if (!p->private_ || !p->dead || p->segs) return;
  for (cuda_pool **link = &d->private_pools; *link; link = &(*link)->pnext) {
    if (*link == p) {
      *link = p->pnext;
      break;
    }
  }
  free(p);
}

/* ---- segments ---- */
static void segment_unlink(cuda_pool *p, segment *s) {
  if (s->sprev) s->sprev->snext = s->snext;
  else p->segs = s->snext;
  if (s->snext) s->snext->sprev = s->sprev;
}

/* cudaFree an idle segment (every block in its pool's free lists; the caller
 * made sure no work uses it). */
static void segment_release(dev_state *d, segment *s) {
  cuda_pool *p = s->pool;
  for (block *b = s->first; b;) {
    block *n = b->next;
    free_remove(b);
    block_destroy(d, b);
    b = n;
  }
  segment_unlink(p, s);
  dev_set(d);
  if (cudaFree(s->base) != cudaSuccess) cudaGetLastError();
  d->st.reserved_bytes -= (int64_t)s->size;
  d->st.num_frees++;
  d->st.num_segments--;
  free(s);
}

/* No live block, none waiting for events (pending or deferred): every block
 * is in the pool's free lists. */
static bool segment_idle(const segment *s) {
  if (s->nlive) return false;
  for (const block *b = s->first; b; b = b->next)
    if (b->deferred || b->state == B_PENDING || b->state == B_LIVE) return false;
  return true;
}

/* Free every idle segment of p; the caller synchronised the device. */
static void pool_release_free_segments(dev_state *d, cuda_pool *p) {
  for (segment *s = p->segs; s;) {
    segment *n = s->snext;
    if (segment_idle(s)) segment_release(d, s);
    s = n;
  }
}

/* Free block b (in no list; active_bytes already settled) goes into its pool.
 * A dead graph's pool gives the segment back once it is idle. */
static void block_to_pool(dev_state *d, block *b, bool capturing) {
  segment *seg = b->seg; /* merging stays within the segment */
  cuda_pool *pool = seg->pool;
  free_block_insert(d, b);
  if (pool->dead && !capturing && segment_idle(seg)) {
    dev_set(d);
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    segment_release(d, seg);
    pool_maybe_free(d, pool);
  }
}

/* ---- pending (record_stream) blocks ---- */
static void pending_append(dev_state *d, block *b) {
  b->fnext = NULL;
  b->fprev = d->pend_tail;
  if (d->pend_tail) d->pend_tail->fnext = b;
  else d->pend_head = b;
  d->pend_tail = b;
}

static void pending_remove(dev_state *d, block *b) {
  if (b->fprev) b->fprev->fnext = b->fnext;
  else d->pend_head = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  else d->pend_tail = b->fprev;
  b->fprev = b->fnext = NULL;
}

/* All events of pending b have completed: back to its owner stream's pool
 * (any stream's when the owner is gone). Not while this thread captures. */
static void pending_finish(dev_state *d, block *b) {
  pending_remove(d, b);
  block_drop_events(d, b);
  b->state = b->orphan ? B_ANY : B_STREAM;
  b->orphan = false;
  d->st.active_bytes -= (int64_t)b->size;
  block_to_pool(d, b, false);
}

/* PyTorch's process_events: return pending blocks whose events completed.
 * Events on one stream complete in record order and the list is in record
 * order, so after a not-ready event on stream s later events on s are not
 * queried: at most one not-ready query per stream per call. */
static void pending_process(dev_state *d) {
  cudaStream_t not_ready[NOT_READY_MAX];
  int nnr = 0;
  for (block *b = d->pend_head; b;) {
    block *next = b->fnext; /* b may move; pending blocks are never freed by it */
    bool done = true;
    while (b->nev > 0) {
      int i = b->nev - 1;
      bool known = false;
      for (int k = 0; k < nnr && !known; k++) known = not_ready[k] == b->evs[i];
      if (known) {
        done = false;
        break;
      }
      cudaError_t err = cudaEventQuery(b->ev[i]);
      if (err == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: leave nothing for launch checks */
        if (nnr < NOT_READY_MAX) not_ready[nnr++] = b->evs[i];
        done = false;
        break;
      }
      if (err != cudaSuccess) cudaGetLastError(); /* a failed event: treat as passed */
      event_put(d, b->ev[i]);
      b->nev--;
    }
    if (done) pending_finish(d, b);
    b = next;
  }
}

/* The device was synchronised: every pending block's events have completed. */
static void pending_flush(dev_state *d) {
  while (d->pend_head) pending_finish(d, d->pend_head);
}

/* The whole-device cache flush of the OOM path and empty_cache. */
static void release_cached(dev_state *d) {
  dev_set(d);
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  pending_flush(d);
  pool_release_free_segments(d, &d->general);
}

/* cudaMalloc a segment for pool p; its single free block is returned
 * (not in any list), or NULL when the device (or the limit) refused. */
static block *segment_new(dev_state *d, cuda_pool *p, bool small, size_t size,
                          cudaStream_t s, bool capturing, cudaError_t *err) {
  *err = cudaSuccess;
  if ((double)d->st.reserved_bytes + (double)size > d->fraction * (double)d->total_mem) {
    *err = cudaErrorMemoryAllocation;
    return NULL;
  }
  segment *seg = calloc(1, sizeof *seg);
  block *b = block_new(d);
  if (!seg || !b) {
    free(seg);
    if (b) block_destroy(d, b);
    *err = cudaErrorMemoryAllocation;
    return NULL;
  }
  void *ptr = NULL;
  cudaError_t e = dev_set(d);
  if (e == cudaSuccess) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    e = cudaMalloc(&ptr, size);
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
  }
  if (e != cudaSuccess) {
    cudaGetLastError(); /* clear it: the process keeps working */
    free(seg);
    block_destroy(d, b);
    *err = e;
    return NULL;
  }
  seg->base = ptr;
  seg->size = size;
  seg->small = small;
  seg->pool = p;
  seg->first = b;
  seg->snext = p->segs;
  if (p->segs) p->segs->sprev = seg;
  p->segs = seg;
  b->ptr = ptr;
  b->size = size;
  b->seg = seg;
  b->state = B_STREAM;
  b->stream = s;
  d->st.reserved_bytes += (int64_t)size;
  d->st.num_allocs++;
  d->st.num_segments++;
  return b;
}

/* First block of the right list that fits and that work on s may use: its
 * own stream's or any stream's. Removed from its list. */
static block *find_free(cuda_pool *p, bool small, size_t size, cudaStream_t s) {
  for (block *b = *free_list(p, small); b; b = b->fnext) {
    if (b->size < size) continue;
    if (b->state == B_ANY || (b->state == B_STREAM && b->stream == s)) {
      free_remove(b);
      return b;
    }
  }
  return NULL;
}

static const char *fmt_bytes(char *buf, size_t n, double v) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  while (v >= 1024 && i < 6) v /= 1024, i++;
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
  return buf;
}

void *cuda_caching_alloc(int device, size_t nbytes, cudaStream_t s) {
  if (!valid_device(device)) {
    ingot_set_error(INGOT_ERR_DEVICE, "cuda:%d: device index out of range", device);
    return NULL;
  }
  dev_state *d = lock_dev(device);
  cuda_pool *pool = capture_pool[device] ? capture_pool[device] : &d->general;
  bool capturing = capture_pool[device] != NULL;
  /* record_stream blocks whose events completed go back to their pools. */
  if (d->pend_head && !capturing) pending_process(d);
  bool huge = nbytes > (SIZE_MAX >> 2);
  size_t size = huge ? 0 : round_up(nbytes ? nbytes : 1, ROUND_BYTES);
  bool small = !huge && size <= SMALL_SIZE;
  block *b = huge ? NULL : find_free(pool, small, size, s);
  cudaError_t err = cudaErrorMemoryAllocation;
  if (!b && !huge) {
    size_t seg_size = small ? SMALL_SEGMENT : round_up(size, LARGE_ROUND);
    b = segment_new(d, pool, small, seg_size, s, capturing, &err);
    if (!b && err == cudaErrorMemoryAllocation && !capturing) {
      /* Give the cache back to the device and try once more. */
      d->st.num_alloc_retries++;
      release_cached(d);
      b = find_free(pool, small, size, s); /* pending blocks may have come back */
      if (!b) b = segment_new(d, pool, small, seg_size, s, capturing, &err);
    }
  }
  if (!b) {
    d->st.num_ooms++;
    size_t free_b = 0, total_b = d->total_mem;
    if (!capturing && (dev_set(d) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b)))
      cudaGetLastError();
    char a[32], r[32], f[32], t[32], q[32], l[32];
    bool limited = d->fraction < 1.0;
    ingot_status st = err == cudaErrorMemoryAllocation ? INGOT_ERR_OOM : INGOT_ERR_BACKEND;
    ingot_set_error(st,
                    "cuda:%d: out of memory: tried to allocate %s (%zu bytes); %s allocated, "
                    "%s reserved by ingot, %s free of %s on the device%s%s%s%s",
                    device, fmt_bytes(q, sizeof q, (double)nbytes), nbytes,
                    fmt_bytes(a, sizeof a, (double)d->st.allocated_bytes),
                    fmt_bytes(r, sizeof r, (double)d->st.reserved_bytes),
                    fmt_bytes(f, sizeof f, (double)free_b), fmt_bytes(t, sizeof t, (double)total_b),
                    limited ? "; memory fraction limit " : "",
                    limited ? fmt_bytes(l, sizeof l, d->fraction * (double)d->total_mem) : "",
                    err == cudaErrorMemoryAllocation ? "" : "; cudaMalloc: ",
                    err == cudaErrorMemoryAllocation ? "" : cudaGetErrorString(err));
    unlock_dev(device);
    return NULL;
  }
  /* Split off the rest when it is worth keeping; it keeps b's free state. */
  size_t rest = b->size - size;
  if ((small && rest >= ROUND_BYTES) || (!small && rest > SMALL_SIZE)) {
    block *r = block_new(d);
    if (r) {
      r->ptr = b->ptr + size;
      r->size = rest;
      r->seg = b->seg;
      r->state = b->state;
      r->stream = b->stream;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      free_insert(r);
    }
  }
  block_drop_events(d, b); /* none: pooled blocks hold no events */
  b->state = B_LIVE;
  b->stream = s;
  b->requested = nbytes;
  b->nuses = 0;
  b->orphan = false;
  b->seg->nlive++;
  hash_insert(d, b);
  d->st.allocated_bytes += (int64_t)b->size;
  d->st.requested_bytes += (int64_t)nbytes;
  d->st.active_bytes += (int64_t)b->size;
  d->st.num_blocks++;
  stats_changed(d);
  void *p = b->ptr;
  unlock_dev(device);
  return p;
}

static bool defer_block(dev_state *d, block *b) {
  if (d->ndeferred == d->deferredcap) {
    int cap = d->deferredcap ? d->deferredcap * 2 : 16;
    block **n = realloc(d->deferred, (size_t)cap * sizeof *n);
    if (!n) return false;
    d->deferred = n;
    d->deferredcap = cap;
  }
  d->deferred[d->ndeferred++] = b;
  b->deferred = true;
  return true;
}

/* Record events on every stream that used b (record_stream) and put b in
 * the pending list. False (no events kept) when that failed. Not while this
 * thread captures. */
static bool block_record_uses(dev_state *d, block *b) {
  bool ok = dev_set(d) == cudaSuccess; /* a use may be the legacy default stream */
  for (int i = 0; ok && i < b->nuses; i++) ok = block_record(d, b, b->uses[i]);
  b->nuses = 0;
  if (!ok) {
    block_drop_events(d, b);
    return false;
  }
  b->state = B_PENDING;
  pending_append(d, b);
  return true;
}

void cuda_caching_free(int device, void *p) {
  if (!p || !valid_device(device)) return;
  dev_state *d = lock_dev(device);
  block *b = hash_find(d, p, true);
  if (!b) { /* not ours (or freed twice): nothing to do */
    unlock_dev(device);
    return;
  }
  bool capturing = capture_pool[device] != NULL;
  d->st.allocated_bytes -= (int64_t)b->size;
  d->st.requested_bytes -= (int64_t)b->requested;
  d->st.num_blocks--;
  b->seg->nlive--;
  b->requested = 0;
  if (b->nuses > 0) {
    /* Used by other streams: out of the pools (still active) until all of
     * them pass this point; its own stream's order covers the owner. */
    if (capturing) {
      b->state = B_PENDING;
      if (defer_block(d, b)) { /* keeps b->uses for cuda_capture_end */
        unlock_dev(device);
        return;
      }
      /* Cannot wait now: own stream only, like a capture free. */
      b->nuses = 0;
      b->state = B_STREAM;
    } else {
      if (block_record_uses(d, b)) {
        unlock_dev(device);
        return;
      }
      /* No event to wait on: wait for the whole device instead. */
      if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
      b->state = B_ANY;
    }
  } else {
    /* Stream order makes it safe for later work on b->stream: no event. */
    b->state = B_STREAM;
  }
  d->st.active_bytes -= (int64_t)b->size;
  block_to_pool(d, b, capturing);
  unlock_dev(device);
}

ingot_status cuda_caching_record_stream(int device, void *p, cudaStream_t s) {
  if (!valid_device(device)) return ingot_set_error(INGOT_ERR_DEVICE, "record_stream: bad device");
  dev_state *d = lock_dev(device);
  block *b = hash_find(d, p, false);
  ingot_status st = INGOT_OK;
  if (!b) {
    st = ingot_set_error(INGOT_ERR_ARG, "record_stream: memory not from the cuda:%d allocator",
                         device);
  } else if (s != b->stream) {
    bool seen = false;
    for (int i = 0; i < b->nuses; i++) seen |= b->uses[i] == s;
    if (!seen) {
      if (b->nuses == b->usecap) {
        int cap = b->usecap ? b->usecap * 2 : 2;
        cudaStream_t *n = realloc(b->uses, (size_t)cap * sizeof *n);
        if (!n) {
          unlock_dev(device);
          return ingot_set_error(INGOT_ERR_OOM, "record_stream: out of host memory");
        }
        b->uses = n;
        b->usecap = cap;
      }
      b->uses[b->nuses++] = s;
    }
  }
  unlock_dev(device);
  return st;
}

static void forget_in_pool(cuda_pool *p, cudaStream_t s) {
  for (segment *seg = p->segs; seg; seg = seg->snext) {
    for (block *b = seg->first; b; b = b->next) {
      /* Live and deferred blocks: s needs no event any more. */
      for (int i = 0; i < b->nuses; i++)
        if (b->uses[i] == s) b->uses[i] = b->uses[--b->nuses], i--;
      if (b->stream != s) continue;
      if (b->state == B_LIVE) {
        b->stream = 0; /* later frees order on the default stream */
      } else if (b->state == B_STREAM) {
        b->state = B_ANY; /* the stream's work has finished (it was synchronised) */
      } else if (b->state == B_PENDING) {
        b->orphan = true; /* any stream's once the other streams' events pass */
      }
    }
  }
}

void cuda_caching_forget_stream(int device, cudaStream_t s) {
  if (!valid_device(device) || !s) return;
  dev_state *d = lock_dev(device);
  forget_in_pool(&d->general, s);
  for (cuda_pool *p = d->private_pools; p; p = p->pnext) forget_in_pool(p, s);
  unlock_dev(device);
}

ingot_status cuda_caching_stats(int device, ingot_memory_stats *out) {
  if (!valid_device(device)) return ingot_set_error(INGOT_ERR_DEVICE, "memory_stats: bad device");
  if (cuda_use_device(device)) return ingot_last_status();
  dev_state *d = lock_dev(device);
  *out = d->st;
  out->memory_limit = (int64_t)(d->fraction * (double)d->total_mem);
  unlock_dev(device);
  return INGOT_OK;
}

ingot_status cuda_caching_reset_peaks(int device) {
  if (!valid_device(device)) return ingot_set_error(INGOT_ERR_DEVICE, "reset_peak: bad device");
  if (cuda_use_device(device)) return ingot_last_status();
  dev_state *d = lock_dev(device);
  d->st.peak_allocated_bytes = d->st.allocated_bytes;
  d->st.peak_requested_bytes = d->st.requested_bytes;
  d->st.peak_reserved_bytes = d->st.reserved_bytes;
  d->st.peak_active_bytes = d->st.active_bytes;
  unlock_dev(device);
  return INGOT_OK;
}

ingot_status cuda_caching_empty_cache(int device) {
  if (!valid_device(device)) return ingot_set_error(INGOT_ERR_DEVICE, "empty_cache: bad device");
  if (capture_pool[device])
    return ingot_set_error(INGOT_ERR_ARG, "empty_cache: not allowed during graph capture");
  if (cuda_use_device(device)) return ingot_last_status();
  dev_state *d = lock_dev(device);
  release_cached(d);
  unlock_dev(device);
  return INGOT_OK;
}

ingot_status cuda_caching_set_fraction(int device, double fraction) {
  if (!valid_device(device)) return ingot_set_error(INGOT_ERR_DEVICE, "memory_fraction: bad device");
  if (!(fraction > 0.0 && fraction <= 1.0))
    return ingot_set_error(INGOT_ERR_ARG, "set_memory_fraction: fraction must be in (0, 1], got %g",
                           fraction);
  if (cuda_use_device(device)) return ingot_last_status();
  dev_state *d = lock_dev(device);
  d->fraction = fraction;
  d->st.memory_limit = (int64_t)(fraction * (double)d->total_mem);
  unlock_dev(device);
  return INGOT_OK;
}

/* ---- private pools and capture ---- */
cuda_pool *cuda_pool_create(int device) {
  if (!valid_device(device)) return NULL;
  cuda_pool *p = calloc(1, sizeof *p);
  if (!p) {
    ingot_set_error(INGOT_ERR_OOM, "graph: out of host memory");
    return NULL;
  }
  p->private_ = true;
  dev_state *d = lock_dev(device);
  p->pnext = d->private_pools;
  d->private_pools = p;
  unlock_dev(device);
  return p;
}

void cuda_pool_release(int device, cuda_pool *pool) {
  if (!pool || !valid_device(device)) return;
  dev_state *d = lock_dev(device);
  dev_set(d);
  /* Replays may still be running in the pool's memory. */
  if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  /* The device is idle: pending blocks (of this pool too) are done. This
   * runs before the pool is marked dead, so none of its segments goes here. */
  pending_flush(d);
  pool->dead = true;
  pool_release_free_segments(d, pool);
  pool_maybe_free(d, pool);
  unlock_dev(device);
}

void cuda_capture_begin(int device, cuda_pool *pool) {
  if (valid_device(device)) capture_pool[device] = pool;
}

void cuda_capture_end(int device) {
  if (!valid_device(device)) return;
  capture_pool[device] = NULL;
  dev_state *d = lock_dev(device);
  /* Blocks freed during the capture that other streams used: record their
   * events now that recording is legal again. */
  for (int i = 0; i < d->ndeferred; i++) {
    block *b = d->deferred[i];
    b->deferred = false;
    if (b->state != B_PENDING) continue;
    if (block_record_uses(d, b)) continue;
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    b->state = B_ANY; /* the device is idle: any stream may take it */
    b->orphan = false;
    d->st.active_bytes -= (int64_t)b->size;
    block_to_pool(d, b, false);
  }
  d->ndeferred = 0;
  unlock_dev(device);
}

bool cuda_thread_capturing(int device) {
  return valid_device(device) && capture_pool[device] != NULL;
}
