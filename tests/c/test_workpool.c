/* The decode worker pool (src/core/workpool.c): every item of every job runs
 * exactly once, across many back-to-back jobs (a late worker must never run
 * an item of a finished or of the next job), nested calls, and jobs submitted
 * from two threads at once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../../src/core/workpool.h"
#include "test.h"

#define MAXN 1000

typedef struct job {
  _Atomic int hits[MAXN];
  int64_t n;
  int nested; /* items that run a nested workpool_for */
} job;

static void count(void *arg, int64_t i) {
  job *j = arg;
  atomic_fetch_add(&j->hits[i], 1);
}

static void count_nested(void *arg, int64_t i) {
  job *j = arg;
  atomic_fetch_add(&j->hits[i], 1);
  if (i < j->nested) {
    job inner = {.n = 5};
    workpool_for(inner.n, count, &inner);
    for (int k = 0; k < 5; k++) atomic_fetch_add(&j->hits[i], atomic_load(&inner.hits[k]) - 1);
  }
}

/* Runs jobs of sizes 0..MAXN-ish; returns the number of wrong hit counts. */
static int run_jobs(int rounds, workpool_fn fn, int nested) {
  static const int64_t sizes[] = {0, 1, 2, 3, 7, 16, 17, 64, 333, MAXN};
  int bad = 0;
  for (int r = 0; r < rounds; r++) {
    const int64_t n = sizes[r % (int)(sizeof sizes / sizeof sizes[0])];
    static _Thread_local job j;
    j.n = n;
    j.nested = nested;
    for (int64_t i = 0; i < MAXN; i++) atomic_store(&j.hits[i], 0);
    workpool_for(n, fn, &j);
    for (int64_t i = 0; i < MAXN; i++) bad += atomic_load(&j.hits[i]) != (i < n);
  }
  return bad;
}

static void *other_thread(void *res) {
  *(int *)res = run_jobs(2000, count, 0);
  return NULL;
}

int main(void) {
  CHECK_EQ_INT(run_jobs(20000, count, 0), 0);
  CHECK_EQ_INT(run_jobs(200, count_nested, 3), 0);
  pthread_t t;
  int other = -1;
  CHECK_EQ_INT(pthread_create(&t, NULL, other_thread, &other), 0);
  CHECK_EQ_INT(run_jobs(2000, count, 0), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(other, 0);
  return test_report();
}
