/* Loop generators shared by the unary and binary CPU kernels: each macro
 * defines a cpu_loop_fn whose contiguous case is a plain indexed loop the
 * compiler can vectorise, with a strided fallback. */
#ifndef INGOT_CPU_ELEMENTWISE_LOOP_H
#define INGOT_CPU_ELEMENTWISE_LOOP_H

#include "cpu.h"

#define EW_SZ(T) ((int64_t)sizeof(T))

/* out TO = EXPR(x) with x of type TI. */
#define EW_UNARY_LOOP(name, TI, TO, EXPR)                                                  \
  static void name(char **p, const int64_t *s, int64_t n, void *ctx) {                     \
    (void)ctx;                                                                             \
    if (s[0] == EW_SZ(TO) && s[1] == EW_SZ(TI)) {                                          \
      TO *restrict o_ = (TO *)p[0];                                                        \
      const TI *restrict i_ = (const TI *)p[1];                                            \
      for (int64_t i = 0; i < n; i++) {                                                    \
        TI x = i_[i];                                                                      \
        (void)x;                                                                           \
        o_[i] = (TO)(EXPR);                                                                \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                      \
      TI x = *(const TI *)(p[1] + i * s[1]);                                               \
      (void)x;                                                                             \
      *(TO *)(p[0] + i * s[0]) = (TO)(EXPR);                                               \
    }                                                                                      \
  }

/* out TO = EXPR(a, b) with a, b of type TI; fast paths for contiguous
 * operands and for a broadcast (stride-0) right operand. ctx is available
 * to EXPR as `ctx`. */
#define EW_BINARY_LOOP(name, TI, TO, EXPR)                                                 \
  static void name(char **p, const int64_t *s, int64_t n, void *ctx) {                     \
    (void)ctx;                                                                             \
    if (s[0] == EW_SZ(TO) && s[1] == EW_SZ(TI) && s[2] == EW_SZ(TI)) {                     \
      TO *restrict o_ = (TO *)p[0];                                                        \
      const TI *restrict x_ = (const TI *)p[1], *restrict y_ = (const TI *)p[2];           \
      for (int64_t i = 0; i < n; i++) {                                                    \
        TI a = x_[i], b = y_[i];                                                           \
        (void)a, (void)b;                                                                  \
        o_[i] = (TO)(EXPR);                                                                \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    if (s[0] == EW_SZ(TO) && s[1] == EW_SZ(TI) && s[2] == 0) {                             \
      TO *restrict o_ = (TO *)p[0];                                                        \
      const TI *restrict x_ = (const TI *)p[1];                                            \
      const TI b = *(const TI *)p[2];                                                      \
      for (int64_t i = 0; i < n; i++) {                                                    \
        TI a = x_[i];                                                                      \
        (void)a, (void)b;                                                                  \
        o_[i] = (TO)(EXPR);                                                                \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    for (int64_t i = 0; i < n; i++) {                                                      \
      TI a = *(const TI *)(p[1] + i * s[1]), b = *(const TI *)(p[2] + i * s[2]);           \
      (void)a, (void)b;                                                                    \
      *(TO *)(p[0] + i * s[0]) = (TO)(EXPR);                                               \
    }                                                                                      \
  }

#endif
