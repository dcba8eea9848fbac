/* decode_qwen3moe_30b_a3b(_fp8) of WORKLOADS.md: the whole Qwen3-30B-A3B
 * network with random weights made on the device (ingot_model_random),
 * prompt 128 token ids, 64 new tokens greedy through ingot_generate (the
 * decode step replayed as a device graph). Decode tokens/s is that of the
 * steady state: every generation captures and instantiates its decode graph
 * at its first step (~1000 nodes, milliseconds, against ~2 ms a token), so a
 * run generates SHORT_TOKENS and then NEW_TOKENS tokens from the same prompt
 * and times the difference, NEW_TOKENS - SHORT_TOKENS steps that differ
 * only in their positions (the capture, the first step and the prompt
 * cancel). The median over runs after one warm-up run is reported; the
 * prompt's tokens/s and the plain 64-token rate (capture included) go to stderr.
 * INGOT_BENCH_PROFILE=1: the first timed run brackets one steady-state
 * decode step with ingot_profiler_range (for ncu --profile-from-start off;
 * docs/perf-notes.md says how). */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define PROMPT_TOKENS 128
#define NEW_TOKENS 64
#define SHORT_TOKENS 8

static ingot_model_config qwen3_30b_a3b(void) {
  return (ingot_model_config){.arch = INGOT_ARCH_QWEN3_MOE,
                              .arch_name = "qwen3_moe",
                              .n_layers = 48,
                              .dim = 2048,
                              .ffn_dim = 6144,
                              .n_heads = 32,
                              .n_kv_heads = 4,
                              .head_dim = 128,
                              .vocab = 151936,
                              .ctx_train = 40960,
                              .ctx = PROMPT_TOKENS + NEW_TOKENS,
                              .rms_eps = 1e-6f,
                              .rope_base = 1e6f,
                              .rope_neox = true,
                              .qk_norm = true,
                              .n_experts = 128,
                              .n_experts_used = 8,
                              .expert_ffn_dim = 768,
                              .norm_topk_prob = true};
}

/* Token callback of the profiled run: ingot_generate queues the step that
 * makes token i + 2 between its callbacks for tokens i and i + 1, so the
 * range from token PROFILE_AT to the next one holds exactly one decode step
 * (a graph replay, long after capture). */
#define PROFILE_AT 32
typedef struct profile_cb {
  ingot_device dev;
  int64_t n;
  bool failed;
} profile_cb;

static int profile_token(int32_t token, const char *piece, size_t len, void *user) {
  (void)token, (void)piece, (void)len;
  profile_cb *p = user;
  if (p->n == PROFILE_AT || p->n == PROFILE_AT + 1)
    p->failed |= ingot_profiler_range(p->dev, p->n == PROFILE_AT) != INGOT_OK;
  p->n++;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_decode_qwen3moe(bench_ctx *c, bool fp8) {
  const char *id = fp8 ? "decode_qwen3moe_30b_a3b_fp8" : "decode_qwen3moe_30b_a3b";
  if (c->dev.kind == INGOT_DEVICE_CPU || !bench_selected(c, id)) return;
  ingot_model_config cfg = qwen3_30b_a3b();
  /* fp8: experts and attention q/k/v/o f8e4m3fn with row scales (WORKLOADS.md);
   * router, embeddings and head bf16 */
  ingot_model *m = ingot_model_random(&cfg, fp8 ? INGOT_F8E4M3FN : INGOT_BF16, 1, c->dev);
  double *dec = calloc((size_t)c->runs, sizeof *dec);
  int32_t prompt[PROMPT_TOKENS], out[NEW_TOKENS];
  for (int i = 0; i < PROMPT_TOKENS; i++) prompt[i] = (int32_t)((i * 7919 + 13) % cfg.vocab);
  ingot_generate_options o = ingot_generate_defaults();
  o.stop_at_eos = false;
  o.sample.temperature = 0;
  bool ok = m && dec;
  double pre = 0, plain = 0;
  const char *pe = getenv("INGOT_BENCH_PROFILE");
  profile_cb prof = {.dev = c->dev};
  bool profile = pe && *pe && *pe != '0';
  for (int r = -1; r < c->runs && ok; r++) { /* r = -1: warm-up */
    ingot_generate_stats st[2];
    const int want[2] = {SHORT_TOKENS, NEW_TOKENS};
    for (int g = 0; g < 2 && ok; g++) {
      int64_t n = 0;
      o.max_tokens = want[g];
      ingot_model_reset(m);
      bool prof_now = profile && r == 0 && g == 1;
      ok = !ingot_generate(m, prompt, PROMPT_TOKENS, &o, prof_now ? profile_token : NULL,
                           prof_now ? &prof : NULL, out, NEW_TOKENS, &n, &st[g]) &&
           n == want[g] && !prof.failed;
    }
    if (ok && r >= 0) {
      dec[r] = st[1].decode_seconds - st[0].decode_seconds;
      pre += st[1].prompt_tps / c->runs;
      plain += st[1].decode_tps / c->runs;
    }
  }
  bench_result res = {.metric = "tokens/s", .reference_value = -1};
  snprintf(res.id, sizeof res.id, "%s", id);
  snprintf(res.shape, sizeof res.shape, "48L E128 top8 prompt%d +%d", PROMPT_TOKENS, NEW_TOKENS);
  snprintf(res.dtype, sizeof res.dtype, "%s", fp8 ? "float8_e4m3fn" : "bfloat16");
  ingot_device_str(c->dev, res.device, sizeof res.device);
  double t = -1;
  if (ok) {
    qsort(dec, (size_t)c->runs, sizeof *dec, cmp_double);
    t = dec[c->runs / 2];
    fprintf(stderr,
            "%s: prompt %.0f tokens/s (mean), decode %.1f tokens/s (median, steady state), "
            "%.1f tokens/s over all %d tokens (mean, graph capture included)\n",
            id, pre, (NEW_TOKENS - SHORT_TOKENS) / t, plain, NEW_TOKENS);
  }
  bench_record(c, &res, ok, t, -1, NEW_TOKENS - SHORT_TOKENS, 1.0);
  free(dec);
  ingot_model_free(m);
}
