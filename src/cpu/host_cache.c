/* Host memory for CPU tensors: 64-byte aligned; blocks of 4 MiB and more
 * are 2 MiB-aligned, backed by huge pages where the kernel allows, and kept
 * in a small cache after release so that a steady stream of same-sized
 * outputs (a decode loop, a benchmark) does not fault fresh pages in on
 * every op. The cache is off under AddressSanitizer so that it cannot hide a
 * use after free. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cpu.h"

#define BIG_BLOCK ((size_t)4 << 20)
#define BIG_ALIGN ((size_t)2 << 20)
#define CACHE_SLOTS 32
#define CACHE_LIMIT ((size_t)1 << 30) /* bytes kept at most */

#if defined(__SANITIZE_ADDRESS__)
#define CACHE_ON 0
#else
#define CACHE_ON 1
#endif

static struct {
  void *ptr[CACHE_SLOTS];
  size_t size[CACHE_SLOTS];
  int count;
  size_t bytes;
  pthread_mutex_t lock;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t rounded(size_t nbytes, size_t align) { return (nbytes + align - 1) & ~(align - 1); }

static void *cache_take(size_t n) {
  void *p = NULL;
  pthread_mutex_lock(&cache.lock);
  for (int i = 0; i < cache.count; i++) {
    if (cache.size[i] == n) {
      p = cache.ptr[i];
      cache.bytes -= n;
      cache.count--;
      cache.ptr[i] = cache.ptr[cache.count];
      cache.size[i] = cache.size[cache.count];
      break;
    }
  }
  pthread_mutex_unlock(&cache.lock);
  return p;
}

static void cache_flush(void) {
  pthread_mutex_lock(&cache.lock);
  for (int i = 0; i < cache.count; i++) free(cache.ptr[i]);
  cache.count = 0;
  cache.bytes = 0;
  pthread_mutex_unlock(&cache.lock);
}

void *cpu_host_alloc(size_t nbytes) {
  size_t align = nbytes >= BIG_BLOCK ? BIG_ALIGN : 64;
  size_t n = rounded(nbytes, align);
  if (n < nbytes) {
    ingot_set_error(INGOT_ERR_OOM, "cpu: out of memory allocating %zu bytes", nbytes);
    return NULL;
  }
  void *p = CACHE_ON && align == BIG_ALIGN ? cache_take(n) : NULL;
  if (p) return p;
  p = aligned_alloc(align, n);
  if (!p && CACHE_ON) { /* give the cache back and retry once */
    cache_flush();
    p = aligned_alloc(align, n);
  }
  if (!p) ingot_set_error(INGOT_ERR_OOM, "cpu: out of memory allocating %zu bytes", nbytes);
  else if (align == BIG_ALIGN) madvise(p, n, MADV_HUGEPAGE);
  return p;
}

void cpu_host_free(void *p, size_t nbytes) {
  size_t n = rounded(nbytes, BIG_ALIGN);
  if (CACHE_ON && p && nbytes >= BIG_BLOCK) {
    pthread_mutex_lock(&cache.lock);
    bool kept = cache.count < CACHE_SLOTS && cache.bytes + n <= CACHE_LIMIT;
    if (kept) {
      cache.ptr[cache.count] = p;
      cache.size[cache.count++] = n;
      cache.bytes += n;
    }
    pthread_mutex_unlock(&cache.lock);
    if (kept) return;
  }
  free(p);
}

void cpu_host_empty_cache(void) { cache_flush(); }
