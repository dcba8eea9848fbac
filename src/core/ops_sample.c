/* Front of the device sampler ingot_sample_tokens (include/ingot/model.h):
 * the sampling of src/model/sample.c as one op, so that a decode step keeps
 * its token, history and random counter on the device. */
#include "internal.h"

/* SAMPLE_TOKENS: in[0] = logits float32 [V] (contiguous), in[1] = step int64
 * [1] or [2] (step[0]: the Philox counter, the kernel adds 1; step[1]: zero,
 * scratch a kernel may use and leaves zero), in[2] = hist int32 [W] ring
 * (optional: nin 2 without it; the kernel writes the token at step % W);
 * farg[0] = temperature, farg[1] = top_p, farg[2] = repeat_penalty; iarg[0]
 * = top_k, iarg[1] = seed (bits); out[0] = int32 [1], the token. With nin 5
 * (ingot_sample_tokens_into): in[2] may be NULL (no ring), in[3] = tok
 * int64 or int32 [1] (or NULL) also gets the token, in[4] = pos int32 [1]
 * (or NULL) is incremented. */
static ingot_tensor *sample_tokens(const ingot_tensor *logits, const ingot_sample_options *o,
                                   ingot_tensor *hist, ingot_tensor *step, ingot_tensor *tok,
                                   ingot_tensor *pos) {
  const char *op = "sample_tokens";
  if (!o) return ingot_fail(INGOT_ERR_ARG, "sample_tokens: options are NULL");
  const ingot_tensor *ts[5] = {logits, step};
  int nts = 2;
  if (hist) ts[nts++] = hist;
  if (tok) ts[nts++] = tok;
  if (pos) ts[nts++] = pos;
  if (!check_tensors(op, nts, ts)) return NULL;
  if (tok && ((tok->dtype != INGOT_I64 && tok->dtype != INGOT_I32) || ingot_numel(tok) != 1 ||
              !ingot_is_contiguous(tok)))
    return ingot_fail(INGOT_ERR_DTYPE,
                      "sample_tokens: 'tok' must be one contiguous int64 or int32");
  if (pos && (pos->dtype != INGOT_I32 || ingot_numel(pos) != 1 || !ingot_is_contiguous(pos)))
    return ingot_fail(INGOT_ERR_DTYPE, "sample_tokens: 'pos' must be one contiguous int32");
  if (logits->dtype != INGOT_F32 || !ingot_is_contiguous(logits))
    return ingot_fail(INGOT_ERR_DTYPE, "sample_tokens: 'logits' must be contiguous float32");
  int64_t v = ingot_numel(logits);
  if (!(logits->ndim == 1 || (logits->ndim == 2 && logits->shape[0] == 1)) || v <= 0 ||
      v > INT32_MAX)
    return ingot_fail(INGOT_ERR_SHAPE, "sample_tokens: 'logits' must be [V] or [1, V], V > 0");
  if (step->dtype != INGOT_I64 || (ingot_numel(step) != 1 && ingot_numel(step) != 2) ||
      !ingot_is_contiguous(step))
    return ingot_fail(INGOT_ERR_DTYPE, "sample_tokens: 'step' must be one or two contiguous int64");
  if (hist && (hist->dtype != INGOT_I32 || hist->ndim != 1 || hist->shape[0] <= 0 ||
               !ingot_is_contiguous(hist)))
    return ingot_fail(INGOT_ERR_DTYPE,
                      "sample_tokens: 'hist' must be a contiguous int32 [W], "
                      "W > 0");
  if (o->temperature != o->temperature || o->top_p != o->top_p ||
      o->repeat_penalty != o->repeat_penalty)
    return ingot_fail(INGOT_ERR_ARG, "sample_tokens: NaN in the options");
  ingot_op_args a = {.op = INGOT_OP_SAMPLE_TOKENS, .nin = tok || pos ? 5 : hist ? 3 : 2, .nout = 1};
  a.in[0] = (ingot_tensor *)logits;
  a.in[1] = step;
  a.in[2] = hist;
  a.in[3] = tok;
  a.in[4] = pos;
  a.farg[0] = o->temperature;
  a.farg[1] = o->top_p;
  a.farg[2] = o->repeat_penalty;
  a.iarg[0] = o->top_k;
  a.iarg[1] = (int64_t)o->seed;
  a.out[0] = tensor_new(1, (int64_t[]){1}, INGOT_I32, logits->device);
  return a.out[0] ? dispatch_out(&a) : NULL;
}

ingot_tensor *ingot_sample_tokens(const ingot_tensor *logits, const ingot_sample_options *o,
                                  ingot_tensor *hist, ingot_tensor *step) {
  return sample_tokens(logits, o, hist, step, NULL, NULL);
}

ingot_tensor *ingot_sample_tokens_into(const ingot_tensor *logits, const ingot_sample_options *o,
                                       ingot_tensor *hist, ingot_tensor *step, ingot_tensor *tok,
                                       ingot_tensor *pos) {
  return sample_tokens(logits, o, hist, step, tok, pos);
}
