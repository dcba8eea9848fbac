/* The warm-up forward made at load on a device (forward_dev.h): the first
 * prompt otherwise pays, inside its timing, for every first use on the
 * device: lazy loading of each kernel's module, the cuBLASLt handle, its
 * workspace and heuristic queries, and the caching allocator's growth
 * (llama.cpp makes the same kind of empty run at load). */
#include <stdlib.h>
#include <string.h>

#include "../core/internal.h"
#include "../core/env.h"
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
  if (!d || d->dev.kind == INGOT_DEVICE_CPU || ingot_env_on("INGOT_NO_WARMUP")) return INGOT_OK;
  /* A full chunk (the bf16 prefill products and the prefill attention at
   * the size a long prompt runs), a short prompt (the f32 products), one
   * token (the decode kernels). */
  const int64_t sizes[3] = {DEV_CHUNK, 16, 1}, room = m->cfg.ctx - m->n_past, past = m->n_past;
  if (room <= 0) return INGOT_OK;
  int32_t *ids = calloc((size_t)(room < DEV_CHUNK ? room : DEV_CHUNK), sizeof *ids); /* token 0 */
  if (!ids) return ingot_set_error(INGOT_ERR_OOM, "model warm-up: out of memory");
  ingot_status st = INGOT_OK;
  for (int i = 0; i < 3 && !st; i++) {
    st = dev_forward(m, ids, sizes[i] < room ? sizes[i] : room, NULL);
    m->n_past = past;
  }
  free(ids);
  if (!st) st = warm_sampler(d);
  if (!st) st = (ingot_status)ingot_synchronize(d->dev);
  return st;
}
