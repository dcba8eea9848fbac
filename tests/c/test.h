/* A tiny test framework: CHECK macros that count and report failures, and
 * TEST_MAIN's closing line "N passed, N failed" (the exit status is non-zero
 * when anything failed). */
#ifndef INGOT_TEST_H
#define INGOT_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (cond) {                                                                            \
      test_passed++;                                                                       \
    } else {                                                                               \
      test_failed++;                                                                       \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);             \
    }                                                                                      \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                 \
  do {                                                                                     \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                  \
    if (va_ == vb_) {                                                                      \
      test_passed++;                                                                       \
    } else {                                                                               \
      test_failed++;                                                                       \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a,    \
              #b, va_, vb_);                                                               \
    }                                                                                      \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
  do {                                                                                     \
    double va_ = (double)(a), vb_ = (double)(b);                                           \
    if (fabs(va_ - vb_) <= (tol)) {                                                        \
      test_passed++;                                                                       \
    } else {                                                                               \
      test_failed++;                                                                       \
      fprintf(stderr, "%s:%d: %s ~ %s failed: %.17g vs %.17g\n", __FILE__, __LINE__, #a,   \
              #b, va_, vb_);                                                               \
    }                                                                                      \
  } while (0)

/* a and b non-NULL strings, equal. */
#define CHECK_STR(a, b)                                                                    \
  do {                                                                                     \
    const char *sa_ = (a), *sb_ = (b);                                                     \
    if (sa_ && sb_ && !strcmp(sa_, sb_)) {                                                 \
      test_passed++;                                                                       \
    } else {                                                                               \
      test_failed++;                                                                       \
      fprintf(stderr, "%s:%d: %s == %s failed:\n  \"%s\"\n  \"%s\"\n", __FILE__, __LINE__, \
              #a, #b, sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                         \
    }                                                                                      \
  } while (0)

/* Substring check: needle occurs in hay. */
#define CHECK_HAS(hay, needle)                                                             \
  do {                                                                                     \
    const char *h_ = (hay), *n_ = (needle);                                                \
    if (h_ && n_ && strstr(h_, n_)) {                                                      \
      test_passed++;                                                                       \
    } else {                                                                               \
      test_failed++;                                                                       \
      fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,      \
              h_ ? h_ : "(null)", n_ ? n_ : "(null)");                                     \
    }                                                                                      \
  } while (0)

/* Print the summary line and give main's exit status. */
static inline int test_report(void) {
  fflush(stderr);
  printf("%d passed, %d failed\n", test_passed, test_failed);
  fflush(stdout);
  return test_failed ? 1 : 0;
}

#endif
