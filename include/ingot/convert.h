/* Converting model checkpoints: FP8 weight quantization of an HF directory
 * (src/model/quantize_fp8.c; the `ingot quantize` command). */
#ifndef INGOT_CONVERT_H
#define INGOT_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingot_quantize_options {
  bool skip_lm_head;          /* keep lm_head.weight in its input dtype */
  ingot_progress_fn progress; /* fraction of tensors written; may be NULL */
  void *progress_user;
} ingot_quantize_options;

typedef struct ingot_quantize_stats {
  int64_t tensors, quantized;   /* tensors read, of which quantized to FP8 */
  uint64_t bytes_in, bytes_out; /* tensor data read and written */
} ingot_quantize_stats;

/* Read the HF checkpoint in in_dir (F32/F16/BF16 safetensors, single or
 * sharded) and write out_dir/model.safetensors (created, single file) with
 * every 2-D linear weight "*.weight" (attention, MLP, experts; not
 * embeddings, norms, MoE routers, or lm_head with skip_lm_head) as F8_E4M3
 * with a per-output-row F32 scale "<name>_scale" = amax(row) / 448 (1 for an
 * all-zero row); values x / scale rounded to nearest even, saturated to
 * +-448. Other tensors are copied as they are, as are the other files of
 * in_dir (config.json, tokenizer files). opts and stats may be NULL. Errors:
 * unreadable input, a weight of another dtype or with NaN/inf, out_dir the
 * same as in_dir, write failures (no partial model.safetensors is left). */
ingot_status ingot_quantize_fp8(const char *in_dir, const char *out_dir,
                                const ingot_quantize_options *opts, ingot_quantize_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
