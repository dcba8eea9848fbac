/* The warm-up forward made at load on a device (forward_dev.h): the first
 * prompt otherwise pays, inside its timing, for every first use on the
 * device: lazy loading of each kernel's module, the cuBLASLt handle, its
 * workspace and heuristic queries, and the caching allocator's growth
 * (llama.cpp makes the same kind of empty run at load). */
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "forward_dev.h"
#include "model_internal.h"

/* One draw of the device sampler, greedy and with temperature (different
 * kernels), from the warm-up's logits. */
static ingot_status warm_sampler(dev_model *d) {
  ingot_scope_begin();
  ingot_tensor *hist = ingot_full(1, (int64_t[]){1}, -1.0, INGOT_I32, d->dev);
  ingot_tensor *step = ingot_zeros(1, (int64_t[]){1}, INGOT_I64, d->dev);
  ingot_sample_options o = ingot_sample_defaults();
  ingot_status st = hist && step && ingot_sample_tokens(d->logits, &o, hist, step)
                        ? INGOT_OK
                        : ingot_last_status();
  o.temperature = 0.8f;
  if (!st && !ingot_sample_tokens(d->logits, &o, hist, step)) st = ingot_last_status();
  ingot_scope_end();
  return st;
}

ingot_status dev_model_warmup(ingot_model *m) {
  dev_model *d = m->devm;
  const char *no = getenv("INGOT_NO_WARMUP");
  if (!d || d->dev.kind == INGOT_DEVICE_CPU || (no && *no && strcmp(no, "0") != 0)) return INGOT_OK;
  /* A full chunk (the prefill products and attention at the size a long
   * prompt runs), then one token (the decode kernels). */
  int64_t room = m->cfg.ctx - m->n_past, n = room < DEV_CHUNK ? room : DEV_CHUNK;
  if (n <= 0) return INGOT_OK;
  int32_t *ids = calloc((size_t)n, sizeof *ids); /* token 0: any valid id does */
  if (!ids) return ingot_set_error(INGOT_ERR_OOM, "model warm-up: out of memory");
  int64_t past = m->n_past;
  ingot_status st = dev_forward(m, ids, n, NULL);
  m->n_past = past;
  if (!st) st = dev_forward(m, ids, 1, NULL);
  m->n_past = past;
  free(ids);
  if (!st) st = warm_sampler(d);
  if (!st) st = (ingot_status)ingot_synchronize(d->dev);
  return st;
}
