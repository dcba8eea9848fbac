/* The generation loop: prefill the prompt, then sample / forward one token at
 * a time, streaming each token's text to a callback.
 *
 * On the tensor path (forward_dev.c) the token never leaves the device
 * except to be streamed: the sampler op writes it into the model's token
 * tensor (and the ring, slot g % window for generated token g), and the
 * decode step (forward that token at the device position, advance it,
 * sample the next) runs as one device graph, captured on the first step and
 * replayed after (INGOT_NO_GRAPH=1: launched op by op). The host never makes
 * the device wait: step g + 1 is queued before token g is read (an async
 * copy of its ring slot into pinned memory, then an event), so the device
 * runs the next step while the host streams this token. A step queued for a
 * token that turns out to stop the loop is wasted: its cache row lies past
 * n_past (the next call overwrites it) and the device position is reset by
 * the next call. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/internal.h"
#include "../core/env.h"
#include "forward_dev.h"
#include "model_internal.h"

/* State of the device sampler for one generate call. */
typedef struct dev_sampler {
  ingot_sample_options o;
  ingot_tensor *hist; /* int32 ring [window] */
  ingot_tensor *step; /* int64 [2]: the step, the sampler's arrival counter */
  ingot_graph *graph; /* the captured decode step (NULL: eager) */
  bool use_graph;
  ingot_tensor *tok_host; /* pinned int32 [2]: tokens g and g + 1 in flight */
  ingot_event *ready[2];  /* recorded after the copy into tok_host[g % 2] */
} dev_sampler;

/* d->tok = a token sampled from logits [1, vocab]; with advance, d->pos += 1
 * by the same launch. */
static ingot_status dev_sample(dev_model *d, dev_sampler *s, const ingot_tensor *logits,
                               bool advance) {
  ingot_scope_begin();
  ingot_tensor *t =
      ingot_sample_tokens_into(logits, &s->o, s->hist, s->step, d->tok, advance ? d->pos : NULL);
  ingot_status st = t ? INGOT_OK : ingot_last_status();
  ingot_scope_end();
  return st;
}

/* Forward, then sample straight from the step's logits (no copy into
 * d->logits); the sampler advances the position. */
static ingot_status dev_step(ingot_model *m, dev_sampler *s) {
  ingot_scope_begin();
  ingot_tensor *lg = NULL;
  ingot_status st = dev_forward_step(m, &lg);
  if (!st) st = dev_sample(m->devm, s, lg, true);
  ingot_scope_end();
  return st;
}

/* Run one decode step: through the graph (captured on first use) or eagerly. */
static ingot_status dev_decode(ingot_model *m, dev_sampler *s) {
  if (!s->use_graph) return dev_step(m, s);
  if (!s->graph) {
    ingot_device dev = m->devm->dev;
    ingot_status st = ingot_graph_begin(dev);
    if (st) return st;
    st = dev_step(m, s);
    ingot_graph *g = ingot_graph_end(dev); /* ends the capture on every path */
    if (st) {
      ingot_graph_destroy(g);
      return st;
    }
    if (!g) return ingot_last_status();
    s->graph = g;
  }
  return ingot_graph_replay(s->graph);
}

/* Ring of the last `win` prompt tokens laid out so that generated token g
 * lands at slot g % win (the sampler op writes it at step % win) and always
 * replaces the oldest entry. */
static ingot_status dev_sampler_init(ingot_model *m, dev_sampler *s, const ingot_sample_options *o,
                                     const int32_t *prompt, int64_t n, int64_t win) {
  memset(s, 0, sizeof *s);
  s->o = *o;
  s->use_graph = m->devm->dev.kind != INGOT_DEVICE_CPU && !ingot_env_on("INGOT_NO_GRAPH");
  int32_t *ring = malloc((size_t)win * sizeof *ring);
  if (!ring) return ingot_set_error(INGOT_ERR_OOM, "ingot_generate: out of memory");
  for (int64_t i = 0; i < win; i++) ring[i] = -1;
  for (int64_t j = 0; j < win && j < n; j++) ring[win - 1 - j] = prompt[n - 1 - j];
  s->hist = ingot_from_host(ring, 1, &win, INGOT_I32, m->devm->dev);
  free(ring);
  /* step[1]: the sampler's arrival counter (no memset a step) */
  s->step = ingot_zeros(1, (int64_t[]){2}, INGOT_I64, m->devm->dev);
  s->tok_host = ingot_empty_pinned(1, (int64_t[]){2}, INGOT_I32);
  for (int i = 0; i < 2; i++) s->ready[i] = ingot_event_create(m->devm->dev, false);
  return s->hist && s->step && s->tok_host && s->ready[0] && s->ready[1] ? INGOT_OK
                                                                         : ingot_last_status();
}

static void dev_sampler_free(dev_sampler *s) {
  ingot_graph_destroy(s->graph);
  ingot_release(s->hist);
  ingot_release(s->step);
  ingot_release(s->tok_host);
  for (int i = 0; i < 2; i++) ingot_event_destroy(s->ready[i]);
}

/* Queue the copy of generated token g (ring slot g % window) to the host. */
static ingot_status dev_fetch(dev_sampler *s, int64_t g) {
  int64_t win = ingot_shape(s->hist)[0];
  ingot_tensor *slot = ingot_narrow(s->hist, 0, g % win, 1);
  ingot_tensor *dst = ingot_narrow(s->tok_host, 0, g % 2, 1);
  ingot_status st = slot && dst ? ingot_copy_to_host_async(dst, slot) : ingot_last_status();
  ingot_release(slot);
  ingot_release(dst);
  return st ? st : ingot_event_record(s->ready[g % 2], NULL);
}

/* Token g, once its copy has landed. */
static ingot_status dev_token(dev_sampler *s, int64_t g, int32_t *tok) {
  ingot_status st = ingot_event_synchronize(s->ready[g % 2]);
  if (!st) *tok = ((const int32_t *)ingot_tensor_data(s->tok_host))[g % 2];
  return st;
}

/* After the prompt: the position of the next token on the device, and the
 * first token sampled. */
static ingot_status dev_start(ingot_model *m, dev_sampler *s) {
  dev_model *d = m->devm;
  int32_t p = (int32_t)m->n_past;
  ingot_tensor *hp = ingot_from_host(&p, 1, (int64_t[]){1}, INGOT_I32, d->dev);
  ingot_status st = hp ? ingot_copy_(d->pos, hp) : ingot_last_status();
  ingot_release(hp);
  if (!st) st = dev_sample(d, s, d->logits, false);
  if (!st) st = ingot_synchronize(d->dev); /* the prompt's time includes its device work */
  return st;
}

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
    ingot_fail(INGOT_ERR_ARG,
               "ingot_generate: the prompt (%lld tokens) does not fit in the "
               "context (%lld of %lld used)",
               (long long)n, (long long)m->n_past, (long long)m->cfg.ctx);
    return INGOT_ERR_ARG;
  }
  /* At most room + 1 tokens can be generated (the last one is not fed back). */
  int64_t max = o.max_tokens > 0 && o.max_tokens <= room + 1 ? o.max_tokens : room + 1;
  int64_t win = o.sample.repeat_last_n > 0 ? o.sample.repeat_last_n : 64;
  /* The host path samples from host logits and its own history; the device
   * path keeps both on the device (dev_sampler). */
  bool host = !m->devm;
  int32_t *hist = host ? malloc((size_t)(win + max + 1) * sizeof *hist) : NULL;
  float *logits = host ? malloc((size_t)m->cfg.vocab * sizeof *logits) : NULL;
  char piece[256];
  ingot_status st = INGOT_OK;
  dev_sampler ds = {0};
  if (host && (!hist || !logits)) {
    st = INGOT_ERR_OOM;
    ingot_fail(st, "ingot_generate: out of memory");
    goto done;
  }
  int64_t nh = 0;
  for (int64_t i = n > win ? n - win : 0; host && i < n; i++) hist[nh++] = prompt[i];
  if (!host && (st = dev_sampler_init(m, &ds, &o.sample, prompt, n, win))) goto done;

  double t0 = now();
  if ((st = ingot_model_forward(m, prompt, n, logits))) goto done;
  if (!host && (st = dev_start(m, &ds))) goto done;
  if (!host && (st = dev_fetch(&ds, 0))) goto done;
  double t1 = now();
  int64_t gen = 0, past0 = m->n_past;
  while (gen < max) {
    int32_t tok;
    /* Token gen is fed (producing gen + 1) iff the loop goes on after it:
     * on the device that step is queued before token gen is read. */
    bool feed = gen + 1 < max && past0 + gen < m->cfg.ctx;
    if (!host) {
      if (feed && ((st = dev_decode(m, &ds)) || (st = dev_fetch(&ds, gen + 1)))) goto done;
      if ((st = dev_token(&ds, gen, &tok))) goto done;
    } else if ((tok = ingot_sample(&o.sample, logits, m->cfg.vocab, hist, nh, (uint64_t)gen)) < 0) {
      st = ingot_last_status();
      goto done;
    }
    if (o.stop_at_eos && is_stop(m, tok)) break;
    if (out_tokens && gen < cap) out_tokens[gen] = tok;
    gen++;
    if (host) hist[nh++] = tok;
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
    if (!feed) break;
    if (!host) {
      m->n_past++; /* the step queued above fed tok */
    } else if ((st = ingot_model_forward(m, &tok, 1, logits))) {
      goto done;
    }
  }
  /* A step queued for a token that ended the loop still runs: wait for it so
   * nothing of this call is in flight on return. */
  if (!host && (st = ingot_synchronize(m->devm->dev))) goto done;
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
  dev_sampler_free(&ds);
  free(hist);
  free(logits);
  return st;
}
