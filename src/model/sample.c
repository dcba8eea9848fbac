/* Token sampling: repetition penalty, temperature, top-k, top-p, then one
 * draw from a Philox counter stream keyed by (seed, step), so a run is
 * reproducible from its seed alone. */
#include <math.h>
#include <stdlib.h>

#include "../core/internal.h"
#include "../core/philox.h"
#include "ingot/model.h"

ingot_sample_options ingot_sample_defaults(void) {
  ingot_sample_options o = {0};
  o.temperature = 0.0f;
  o.top_k = 40;
  o.top_p = 0.95f;
  o.repeat_penalty = 1.0f;
  o.repeat_last_n = 64;
  o.seed = 0;
  return o;
}

typedef struct cand {
  float logit;
  int32_t id;
} cand;

/* Descending logit, ascending id on ties: a total order, so results do not
 * depend on the sort's stability. */
static int cand_cmp(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  if (a->logit > b->logit) return -1;
  if (a->logit < b->logit) return 1;
  return (a->id > b->id) - (a->id < b->id);
}

static int32_t argmax(const float *x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (x[i] > x[best] || (isnan(x[i]) && !isnan(x[best]))) best = i;
  return (int32_t)best;
}

/* Move the k best candidates to the front (unordered): quickselect. */
static void select_top(cand *c, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    cand pivot = c[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (cand_cmp(&c[i], &pivot) < 0) i++;
      while (cand_cmp(&c[j], &pivot) > 0) j--;
      if (i <= j) {
        cand t = c[i];
        c[i++] = c[j];
        c[j--] = t;
      }
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else break;
  }
}

static void apply_penalty(const ingot_sample_options *o, float *logits, int64_t vocab,
                          const int32_t *hist, int64_t nh) {
  if (!hist || nh <= 0 || o->repeat_penalty == 1.0f || !(o->repeat_penalty > 0)) return;
  int64_t win = o->repeat_last_n > 0 ? o->repeat_last_n : 64;
  int64_t start = nh > win ? nh - win : 0;
  for (int64_t i = start; i < nh; i++) {
    int32_t t = hist[i];
    if (t < 0 || t >= vocab) continue;
    bool seen = false; /* penalise each token once, however often it occurs */
    for (int64_t j = start; j < i && !seen; j++) seen = hist[j] == t;
    if (seen) continue;
    logits[t] = logits[t] > 0 ? logits[t] / o->repeat_penalty : logits[t] * o->repeat_penalty;
  }
}

int32_t ingot_sample(const ingot_sample_options *o, float *logits, int64_t vocab,
                     const int32_t *history, int64_t n_history, uint64_t step) {
  if (!o || !logits || vocab <= 0 || vocab > INT32_MAX) {
    ingot_fail(INGOT_ERR_ARG, "ingot_sample: bad arguments (vocab %lld)", (long long)vocab);
    return -1;
  }
  apply_penalty(o, logits, vocab, history, n_history);
  if (!(o->temperature > 0)) return argmax(logits, vocab);

  cand *c = malloc((size_t)vocab * sizeof *c);
  if (!c) {
    ingot_fail(INGOT_ERR_OOM, "ingot_sample: out of memory");
    return -1;
  }
  for (int64_t i = 0; i < vocab; i++) {
    float l = logits[i] / o->temperature;
    c[i].logit = isnan(l) ? -INFINITY : l;
    c[i].id = (int32_t)i;
  }
  int64_t n = vocab;
  if (o->top_k > 0 && o->top_k < n) {
    select_top(c, n, o->top_k);
    n = o->top_k;
  }
  qsort(c, (size_t)n, sizeof *c, cand_cmp);

  /* Softmax over the survivors (c[0] is the max), then the top-p cut. */
  double sum = 0;
  double *p = malloc((size_t)n * sizeof *p);
  if (!p) {
    free(c);
    ingot_fail(INGOT_ERR_OOM, "ingot_sample: out of memory");
    return -1;
  }
  for (int64_t i = 0; i < n; i++) sum += p[i] = exp((double)c[i].logit - (double)c[0].logit);
  if (o->top_p > 0 && o->top_p < 1) {
    double cum = 0;
    for (int64_t i = 0; i < n; i++) {
      cum += p[i] / sum;
      if (cum >= o->top_p) {
        n = i + 1;
        break;
      }
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++) sum += p[i];
  }

  /* 53-bit uniform from two words of block `step`. */
  philox4 b = philox4x32_10(o->seed, step);
  double u = (double)(((uint64_t)b.v[0] << 21) ^ (b.v[1] >> 11)) * 0x1p-53 * sum;
  int32_t tok = c[n - 1].id;
  double cum = 0;
  for (int64_t i = 0; i < n; i++) {
    cum += p[i];
    if (u < cum) {
      tok = c[i].id;
      break;
    }
  }
  free(p);
  free(c);
  return tok;
}
