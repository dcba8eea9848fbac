/* A small pool of worker threads for the many short parallel loops of CPU
 * decode (a few hundred a token, tens of microseconds each). Items are
 * claimed one at a time from a shared counter, so the calling thread does all
 * the work itself when a worker is descheduled (a busy machine) instead of
 * waiting at a barrier for it; idle workers spin briefly, then yield, then
 * sleep. OpenMP's default barrier spin made decode ~10x slower whenever
 * another process wanted one of the cores. */
#ifndef INGOT_CORE_WORKPOOL_H
#define INGOT_CORE_WORKPOOL_H

#include <stdint.h>

typedef void (*workpool_fn)(void *arg, int64_t item);

/* fn(arg, i) for every i in [0, n), spread over the pool (omp_get_max_threads()
 * threads, the caller one of them) and finished on return. Runs serially for
 * n < 2, with one thread, and when called from inside a pool loop or while
 * another thread's loop runs. */
void workpool_for(int64_t n, workpool_fn fn, void *arg);

#endif
