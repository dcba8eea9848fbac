/* CPU kernel of sample_tokens (front: src/core/ops_sample.c): ingot_sample
 * itself on a copy of the logits, so the op and the host sampler agree by
 * construction; then the ring and the counter are advanced (and, from
 * ingot_sample_tokens_into, the token copied to tok and pos advanced). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static ingot_status k_sample_tokens(ingot_op_args *a) {
  int64_t v = ingot_numel(a->in[0]);
  int64_t *step = (int64_t *)ingot_tensor_data(a->in[1]);
  int32_t *hist = a->nin > 2 && a->in[2] ? (int32_t *)ingot_tensor_data(a->in[2]) : NULL;
  ingot_tensor *tok_out = a->nin > 3 ? a->in[3] : NULL, *pos = a->nin > 4 ? a->in[4] : NULL;
  int64_t w = hist ? ingot_numel(a->in[2]) : 0;
  ingot_sample_options o = {.temperature = (float)a->farg[0],
                            .top_k = (int)a->iarg[0],
                            .top_p = (float)a->farg[1],
                            .repeat_penalty = (float)a->farg[2],
                            .repeat_last_n = (int)(w < INT32_MAX ? w : INT32_MAX),
                            .seed = (uint64_t)a->iarg[1]};
  float *logits = malloc((size_t)v * sizeof *logits);
  if (!logits) return ingot_set_error(INGOT_ERR_OOM, "sample_tokens: out of memory");
  memcpy(logits, ingot_tensor_data(a->in[0]), (size_t)v * sizeof *logits);
  /* The penalty touches each distinct token of the window once: the ring's
   * order does not matter. */
  int32_t tok = ingot_sample(&o, logits, v, hist, w, (uint64_t)*step);
  free(logits);
  if (tok < 0) return ingot_last_status();
  *(int32_t *)ingot_tensor_data(a->out[0]) = tok;
  if (hist) hist[(uint64_t)*step % (uint64_t)w] = tok;
  *step += 1;
  if (tok_out && ingot_dtype_of(tok_out) == INGOT_I64) *(int64_t *)ingot_tensor_data(tok_out) = tok;
  if (tok_out && ingot_dtype_of(tok_out) == INGOT_I32) *(int32_t *)ingot_tensor_data(tok_out) = tok;
  if (pos) *(int32_t *)ingot_tensor_data(pos) += 1;
  return INGOT_OK;
}

void cpu_register_sample(ingot_backend *be) {
  be->kernels[INGOT_OP_SAMPLE_TOKENS] = k_sample_tokens;
}
