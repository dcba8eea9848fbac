/* The decode worker pool (workpool.h). One job at a time, announced in
 * `claim` (generation << 32 | next item): a thread runs item i only after a
 * compare-and-swap moves the claim from (gen, i) to (gen, i + 1). The
 * submitter first closes the old job (a new generation with no claimable
 * item), then writes fn/arg/n, then opens the job (one more generation,
 * item 0): a claim that succeeds is thus one of the open job, and the
 * fn/arg/n its thread read (before the claim) are that job's. */
#include "workpool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SPIN_PAUSES 4000   /* ~20 us of polling before a worker starts yielding */
#define YIELDS 200         /* then sched_yield() rounds before it sleeps */
#define CLOSED 0xffffffffu /* the item of a closed job: never below n */

static struct {
  pthread_once_t once;
  int nthreads;
  pthread_mutex_t submit; /* one job at a time */
  pthread_mutex_t lock;   /* sleep / wake */
  pthread_cond_t wake;
  _Atomic int sleepers;
  _Atomic uint64_t claim; /* generation << 32 | next item */
  _Atomic int64_t n, done;
  _Atomic(workpool_fn) fn;
  _Atomic(void *) arg;
} P = {.once = PTHREAD_ONCE_INIT,
       .submit = PTHREAD_MUTEX_INITIALIZER,
       .lock = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local bool in_pool; /* a pool thread, or a caller inside a job */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Claim and run items of generation gen until none is left or the job
 * moved on. */
static void run_items(uint32_t gen) {
  workpool_fn fn = atomic_load_explicit(&P.fn, memory_order_acquire);
  void *arg = atomic_load_explicit(&P.arg, memory_order_acquire);
  const int64_t n = atomic_load_explicit(&P.n, memory_order_acquire);
  uint64_t c = atomic_load_explicit(&P.claim, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(c >> 32) != gen || (int64_t)(c & 0xffffffffu) >= n) return;
    if (!atomic_compare_exchange_weak_explicit(&P.claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    /* (gen, i) claimed: the job is unfinished, so fn/arg/n read above are its own */
    fn(arg, (int64_t)(c & 0xffffffffu));
    atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
    c = atomic_load_explicit(&P.claim, memory_order_acquire);
  }
}

static void *worker(void *unused) {
  (void)unused;
  in_pool = true;
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = seen;
    for (int k = 0; k < SPIN_PAUSES + YIELDS && gen == seen; k++) {
      if (k < SPIN_PAUSES)
        cpu_relax();
      else
        sched_yield();
      gen = (uint32_t)(atomic_load_explicit(&P.claim, memory_order_acquire) >> 32);
    }
    if (gen == seen) {
      pthread_mutex_lock(&P.lock);
      atomic_fetch_add(&P.sleepers, 1);
      while ((gen = (uint32_t)(atomic_load(&P.claim) >> 32)) == seen)
        pthread_cond_wait(&P.wake, &P.lock);
      atomic_fetch_sub(&P.sleepers, 1);
      pthread_mutex_unlock(&P.lock);
    }
    seen = gen;
    run_items(gen);
  }
  return NULL;
}

static void start(void) {
  int n = omp_get_max_threads();
  P.nthreads = 1;
  for (int i = 1; i < n; i++) {
    pthread_t t;
    pthread_attr_t a;
    if (pthread_attr_init(&a)) break;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    const bool ok = !pthread_create(&t, &a, worker, NULL);
    pthread_attr_destroy(&a);
    if (!ok) break; /* fewer workers: still correct */
    P.nthreads++;
  }
}

void workpool_for(int64_t n, workpool_fn fn, void *arg) {
  if (n > 1 && n <= INT32_MAX && !in_pool) {
    pthread_once(&P.once, start);
    if (P.nthreads > 1 && !pthread_mutex_trylock(&P.submit)) {
      const uint32_t gen = (uint32_t)(atomic_load(&P.claim) >> 32) + 2;
      atomic_store(&P.claim, (uint64_t)(gen - 1) << 32 | CLOSED);
      atomic_store_explicit(&P.fn, fn, memory_order_release);
      atomic_store_explicit(&P.arg, arg, memory_order_release);
      atomic_store_explicit(&P.n, n, memory_order_release);
      atomic_store_explicit(&P.done, 0, memory_order_relaxed);
      atomic_store(&P.claim, (uint64_t)gen << 32); /* seq_cst: ordered before the sleepers read */
      if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.lock);
      }
      in_pool = true;
      run_items(gen);
      in_pool = false;
      /* the items that workers claimed: short, so spin, yielding when slow */
      for (int k = 0; atomic_load_explicit(&P.done, memory_order_acquire) < n; k++)
        if (k < SPIN_PAUSES)
          cpu_relax();
        else
          sched_yield();
      pthread_mutex_unlock(&P.submit);
      return;
    }
  }
  for (int64_t i = 0; i < n; i++) fn(arg, i);
}
