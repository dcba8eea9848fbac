/* The generation loop: prefill the prompt, then sample / forward one token at
 * a time, streaming each token's text to a callback. */
#include <stdlib.h>
#include <time.h>

#include "../core/internal.h"
#include "model_internal.h"

ingot_generate_options ingot_generate_defaults(void) {
  ingot_generate_options o;
  o.max_tokens = 256;
  o.sample = ingot_sample_defaults();
  o.stop_at_eos = true;
  return o;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool is_stop(const ingot_model *m, int32_t t) {
  for (int i = 0; i < m->n_stop; i++)
    if (m->stop[i] == t) return true;
  return false;
}

ingot_status ingot_generate(ingot_model *m, const int32_t *prompt, int64_t n,
                            const ingot_generate_options *opts, ingot_token_fn cb, void *user,
                            int32_t *out_tokens, int64_t cap, int64_t *n_out,
                            ingot_generate_stats *stats) {
  if (n_out) *n_out = 0;
  if (stats) *stats = (ingot_generate_stats){0};
  if (!m || !prompt || n <= 0) {
    ingot_fail(INGOT_ERR_ARG, "ingot_generate: %s", !m ? "model is NULL" : "empty prompt");
    return INGOT_ERR_ARG;
  }
  ingot_generate_options o = opts ? *opts : ingot_generate_defaults();
  int64_t room = m->cfg.ctx - m->n_past - n; /* tokens that can still be fed after the prompt */
  if (room < 0) {
    ingot_fail(INGOT_ERR_ARG, "ingot_generate: the prompt (%lld tokens) does not fit in the "
               "context (%lld of %lld used)", (long long)n, (long long)m->n_past,
               (long long)m->cfg.ctx);
    return INGOT_ERR_ARG;
  }
  /* At most room + 1 tokens can be generated (the last one is not fed back). */
  int64_t max = o.max_tokens > 0 && o.max_tokens <= room + 1 ? o.max_tokens : room + 1;
  int64_t win = o.sample.repeat_last_n > 0 ? o.sample.repeat_last_n : 64;
  int32_t *hist = malloc((size_t)(win + max + 1) * sizeof *hist);
  float *logits = malloc((size_t)m->cfg.vocab * sizeof *logits);
  char piece[256];
  ingot_status st = INGOT_OK;
  if (!hist || !logits) {
    st = INGOT_ERR_OOM;
    ingot_fail(st, "ingot_generate: out of memory");
    goto done;
  }
  int64_t nh = 0;
  for (int64_t i = n > win ? n - win : 0; i < n; i++) hist[nh++] = prompt[i];

  double t0 = now();
  if ((st = ingot_model_forward(m, prompt, n, logits))) goto done;
  double t1 = now();
  int64_t gen = 0;
  while (gen < max) {
    int32_t tok = ingot_sample(&o.sample, logits, m->cfg.vocab, hist, nh, (uint64_t)gen);
    if (tok < 0) {
      st = ingot_last_status();
      goto done;
    }
    if (o.stop_at_eos && is_stop(m, tok)) break;
    if (out_tokens && gen < cap) out_tokens[gen] = tok;
    gen++;
    hist[nh++] = tok;
    /* Rows past the tokenizer's vocabulary (padding, e.g. Qwen3's 151936 rows
     * for 151669 tokens) have no text: an empty piece. */
    int64_t len = tok < ingot_tokenizer_vocab_size(m->tok)
                      ? ingot_detokenize(m->tok, &tok, 1, true, piece, sizeof piece)
                      : 0;
    if (len < 0) {
      st = ingot_last_status();
      goto done;
    }
    if (len > (int64_t)sizeof piece) len = sizeof piece; /* no token is this long in practice */
    if (cb && cb(tok, piece, (size_t)len, user)) break;
    if (gen >= max || m->n_past >= m->cfg.ctx) break;
    if ((st = ingot_model_forward(m, &tok, 1, logits))) goto done;
  }
  double t2 = now();
  if (n_out) *n_out = gen;
  if (stats) {
    stats->prompt_tokens = n;
    stats->generated_tokens = gen;
    stats->prompt_seconds = t1 - t0;
    stats->decode_seconds = t2 - t1;
    stats->prompt_tps = t1 > t0 ? (double)n / (t1 - t0) : 0;
    stats->decode_tps = t2 > t1 ? (double)gen / (t2 - t1) : 0;
  }
done:
  free(hist);
  free(logits);
  return st;
}
