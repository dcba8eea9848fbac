/* The ingot command: info (version, build, devices, op support table),
 * generate and chat (a GGUF model on the CPU), quantize (HF model to FP8). */
#define _GNU_SOURCE /* getline, strdup, access */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingot/ingot.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ingot <command> [options]\n"
          "commands:\n"
          "  info      version, build options, devices and the op support table\n"
          "  devices   the devices this build can use\n"
          "  generate  complete a prompt with a GGUF model (ingot generate --help)\n"
          "  chat      talk to a GGUF model, one message a line on stdin\n"
          "  quantize  an HF safetensors model to FP8 weights (ingot quantize --help)\n"
          "  help      this text\n");
}

static void print_devices(void) {
  printf("devices:\n");
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++) {
    const ingot_backend *be = ingot_backend_get((ingot_device_kind)k);
    if (!be) continue;
    int n = be->device_count();
    if (n == 0) {
      printf("  %-8s none found\n", be->name);
      continue;
    }
    for (int i = 0; i < n; i++) {
      ingot_device dev = {(ingot_device_kind)k, i};
      ingot_device_info info;
      char name[32];
      ingot_device_str(dev, name, sizeof name);
      if (ingot_device_get_info(dev, &info) != INGOT_OK) {
        printf("  %-8s error: %s\n", name, ingot_last_error());
        continue;
      }
      printf("  %-8s %s, %d %s, %.1f GiB memory (%.1f GiB free)", name, info.name,
             info.compute_units, k == INGOT_DEVICE_CPU ? "threads" : "SMs",
             info.total_memory / 1073741824.0, info.free_memory / 1073741824.0);
      if (info.capability_major)
        printf(", compute capability %d.%d", info.capability_major, info.capability_minor);
      printf("\n");
    }
  }
  char buf[32];
  printf("default device: %s\n", ingot_device_str(ingot_default_device(), buf, sizeof buf));
}

/* ggml's test-backend-ops style: one row an op, one column a backend. */
static void print_support(void) {
  const ingot_backend *bes[INGOT_DEVICE_KIND_COUNT];
  int nb = 0;
  for (int k = 0; k < INGOT_DEVICE_KIND_COUNT; k++)
    if ((bes[nb] = ingot_backend_get((ingot_device_kind)k))) nb++;
  printf("op support (yes: native kernel; fallback: runs on the CPU when "
         "INGOT_ENABLE_CPU_FALLBACK=1; no: not available):\n");
  printf("  %-14s", "op");
  for (int b = 0; b < nb; b++) printf(" %-9s", bes[b]->name);
  printf("\n");
  const ingot_backend *cpu = ingot_backend_get(INGOT_DEVICE_CPU);
  int counts[INGOT_DEVICE_KIND_COUNT] = {0};
  for (int op = 0; op < INGOT_OP_COUNT; op++) {
    printf("  %-14s", ingot_op_name((ingot_op)op));
    for (int b = 0; b < nb; b++) {
      const char *s = bes[b]->kernels[op] ? "yes" : cpu->kernels[op] ? "fallback" : "no";
      if (bes[b]->kernels[op]) counts[b]++;
      printf(" %-9s", s);
    }
    printf("\n");
  }
  printf("  %-14s", "native total");
  for (int b = 0; b < nb; b++) printf(" %d/%-7d", counts[b], INGOT_OP_COUNT);
  printf("\n");
}

/* ---- generate / chat ---- */

#define DEFAULT_MODEL ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define SMOLLM_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

static void gen_usage(FILE *f, bool chat) {
  fprintf(f,
          "usage: ingot %s [options]\n"
          "%s"
          "options:\n"
          "  -m, --model PATH       GGUF model (default " DEFAULT_MODEL
          ", made by scripts/fetch-model)\n"
          "%s"
          "  -n, --max-tokens N     new tokens at most per answer (default 256; 0: until the "
          "context is full)\n"
          "  --device DEV           cpu or cuda (default: the best available)\n"
          "  --temp T               sampling temperature (default 0: greedy)\n"
          "  --top-k K              keep the K most likely tokens (default 40; 0: off)\n"
          "  --top-p P              nucleus sampling threshold (default 0.95; 1: off)\n"
          "  --repeat-penalty R     penalty on the last 64 tokens (default 1: off)\n"
          "  --seed S               random seed (default 0)\n"
          "  --ctx N                KV cache length (default 2048, at most the model's)\n"
          "  --system TEXT          system prompt (default: the model's own, if known)\n"
          "  --exact                float activations in linear layers (default: int8 as\n"
          "                         llama.cpp; also INGOT_EXACT_MATVEC=1)\n"
          "%s"
          "  -h, --help             this text\n",
          chat ? "chat" : "generate",
          chat ? "Reads one user message a line from stdin until EOF and answers each,\n"
                 "keeping the conversation (KV cache reused between turns).\n"
               : "Streams the completion of PROMPT to stdout; timings go to stderr.\n",
          chat ? "" : "  -p, --prompt TEXT      the prompt (default: \"Hello\")\n",
          chat ? "" : "  --no-chat              feed the prompt as raw text (no chat template)\n");
}

static void progress_bar(double f, void *user) {
  (void)user;
  int w = 40, n = (int)(f * w);
  fprintf(stderr, "\rloading [");
  for (int i = 0; i < w; i++) fputc(i < n ? '#' : ' ', stderr);
  fprintf(stderr, "] %3d%%", (int)(f * 100));
  if (f >= 1) fprintf(stderr, "\r%*s\r", w + 20, "");
  fflush(stderr);
}

typedef struct reply {
  char *text;
  size_t len, cap;
} reply;

static int on_token(int32_t tok, const char *piece, size_t len, void *user) {
  (void)tok;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  reply *r = user;
  if (r) {
    if (r->len + len + 1 > r->cap) {
      size_t cap = (r->len + len + 1) * 2;
      char *t = realloc(r->text, cap);
      if (!t) return 1;
      r->text = t;
      r->cap = cap;
    }
    memcpy(r->text + r->len, piece, len);
    r->len += len;
    r->text[r->len] = 0;
  }
  return 0;
}

static bool parse_i64(const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) return false;
  *out = v;
  return true;
}

static bool parse_f(const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e6) return false;
  *out = (float)v;
  return true;
}

/* Tokens of text (allocated), or NULL with an error. */
static int32_t *tokenize_all(const ingot_tokenizer *t, const char *text, bool special,
                             int64_t *n) {
  int64_t cap = (int64_t)strlen(text) + 16;
  int32_t *ids = malloc((size_t)cap * sizeof *ids);
  if (!ids) return NULL;
  *n = ingot_tokenize(t, text, strlen(text), special, ids, cap);
  if (*n < 0 || *n > cap) { /* at most one token a byte, plus specials */
    free(ids);
    return NULL;
  }
  return ids;
}

static char *apply_template(const char *const *roles, const char *const *contents, int n,
                            const char *system) {
  int64_t len = ingot_chat_template(roles, contents, n, system, true, NULL, 0);
  if (len < 0) return NULL;
  char *s = malloc((size_t)len + 1);
  if (s && ingot_chat_template(roles, contents, n, system, true, s, len + 1) != len) {
    free(s);
    return NULL;
  }
  return s;
}

static void print_stats(const ingot_generate_stats *s) {
  fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; decode: %lld tokens, %.1f tok/s\n",
          (long long)s->prompt_tokens, s->prompt_tps, (long long)s->generated_tokens,
          s->decode_tps);
}

static int fail_msg(const char *what) {
  fprintf(stderr, "ingot: %s%s%s\n", what, *ingot_last_error() ? ": " : "", ingot_last_error());
  return 1;
}

/* One chat turn: template the conversation, reuse the cached prefix, answer. */
static int chat_turn(ingot_model *m, const char **roles, const char **contents, int nmsg,
                     const char *system, const ingot_generate_options *go, int32_t **cache,
                     int64_t *ncache, reply *r) {
  ingot_tokenizer *tk = ingot_model_tokenizer(m);
  char *text = apply_template(roles, contents, nmsg, system);
  int64_t n;
  int32_t *ids = text ? tokenize_all(tk, text, true, &n) : NULL;
  free(text);
  if (!ids) return fail_msg("cannot tokenize the conversation");
  int64_t keep = 0;
  while (keep < *ncache && keep < n - 1 && (*cache)[keep] == ids[keep]) keep++;
  ingot_model_truncate(m, keep);
  int64_t room = ingot_model_get_config(m)->ctx - n;
  ingot_generate_options o = *go;
  if (room < 1) {
    free(ids);
    fprintf(stderr, "ingot: the conversation (%lld tokens) no longer fits in the context\n",
            (long long)n);
    return 1;
  }
  if (o.max_tokens <= 0 || o.max_tokens > room) o.max_tokens = room;
  int32_t *out = malloc((size_t)o.max_tokens * sizeof *out);
  int32_t *all = realloc(*cache, (size_t)(n + o.max_tokens) * sizeof *all);
  if (!out || !all) {
    free(ids);
    free(out);
    if (all) *cache = all;
    fprintf(stderr, "ingot: out of memory\n");
    return 1;
  }
  *cache = all;
  ingot_generate_stats st;
  int64_t got = 0;
  r->len = 0;
  if (r->text) r->text[0] = 0;
  ingot_status s =
      ingot_generate(m, ids + keep, n - keep, &o, on_token, r, out, o.max_tokens, &got, &st);
  printf("\n");
  fflush(stdout);
  if (s == INGOT_OK) {
    memcpy(all, ids, (size_t)n * sizeof *all);
    memcpy(all + n, out, (size_t)got * sizeof *all);
    *ncache = ingot_model_n_past(m); /* the cache holds the prompt and the fed tokens */
    st.prompt_tokens = n - keep;
    print_stats(&st);
  } else {
    *ncache = 0;
    ingot_model_reset(m);
  }
  free(ids);
  free(out);
  return s == INGOT_OK ? 0 : fail_msg("generation failed");
}

static int run_chat(ingot_model *m, const char *system, const ingot_generate_options *go) {
  const char **roles = NULL, **contents = NULL;
  char **owned = NULL;
  int nmsg = 0, cap = 0, rc = 0;
  int32_t *cache = NULL;
  int64_t ncache = 0;
  reply r = {0};
  char *line = NULL;
  size_t lcap = 0;
  bool tty = isatty(0);
  for (;;) {
    if (tty) fprintf(stderr, "> ");
    ssize_t len = getline(&line, &lcap, stdin);
    if (len < 0) break;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (!len) continue;
    if (nmsg + 2 > cap) {
      cap = cap ? 2 * cap : 16;
      const char **r2 = realloc(roles, (size_t)cap * sizeof *r2);
      if (r2) roles = r2;
      const char **c2 = realloc(contents, (size_t)cap * sizeof *c2);
      if (c2) contents = c2;
      char **o2 = realloc(owned, (size_t)cap * sizeof *o2);
      if (o2) owned = o2;
      if (!r2 || !c2 || !o2) {
        rc = fail_msg("out of memory");
        break;
      }
    }
    roles[nmsg] = "user";
    if (!(contents[nmsg] = owned[nmsg] = strdup(line))) {
      rc = fail_msg("out of memory");
      break;
    }
    nmsg++;
    if ((rc = chat_turn(m, roles, contents, nmsg, system, go, &cache, &ncache, &r))) break;
    roles[nmsg] = "assistant";
    if (!(contents[nmsg] = owned[nmsg] = strdup(r.text ? r.text : ""))) {
      rc = fail_msg("out of memory");
      break;
    }
    nmsg++;
  }
  for (int i = 0; i < nmsg; i++) free(owned[i]);
  free(owned);
  free(roles);
  free(contents);
  free(cache);
  free(r.text);
  free(line);
  return rc;
}

static int cmd_generate(int argc, char **argv, bool chat) {
  const char *model = DEFAULT_MODEL, *prompt = "Hello", *system = NULL, *devname = NULL;
  bool raw = false, have_system = false, exact = false;
  ingot_generate_options go = ingot_generate_defaults();
  int64_t ctx = 2048, v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      gen_usage(stdout, chat);
      return 0;
    }
    if (!strcmp(a, "--no-chat") && !chat) {
      raw = true;
      continue;
    }
    if (!strcmp(a, "--exact")) {
      exact = true;
      continue;
    }
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = val != NULL;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = val;
    else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && !chat) prompt = val;
    else if (!strcmp(a, "--system")) system = val, have_system = true;
    else if (!strcmp(a, "--device")) devname = val;
    else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens"))
      ok = ok && parse_i64(val, 0, &go.max_tokens);
    else if (!strcmp(a, "--ctx")) ok = ok && parse_i64(val, 1, &ctx);
    else if (!strcmp(a, "--seed")) ok = ok && parse_i64(val, 0, &v) && (go.sample.seed = (uint64_t)v, 1);
    else if (!strcmp(a, "--top-k"))
      ok = ok && parse_i64(val, 0, &v) && v <= 1 << 30 && (go.sample.top_k = (int)v, 1);
    else if (!strcmp(a, "--temp")) ok = ok && parse_f(val, &go.sample.temperature);
    else if (!strcmp(a, "--top-p")) ok = ok && parse_f(val, &go.sample.top_p);
    else if (!strcmp(a, "--repeat-penalty"))
      ok = ok && parse_f(val, &go.sample.repeat_penalty) && go.sample.repeat_penalty > 0;
    else {
      fprintf(stderr, "ingot %s: unknown option '%s'\n", chat ? "chat" : "generate", a);
      gen_usage(stderr, chat);
      return 2;
    }
    if (!ok) {
      fprintf(stderr, "ingot %s: %s needs a valid value%s%s\n", chat ? "chat" : "generate", a,
              val ? ", not " : "", val ? val : "");
      return 2;
    }
    i++;
  }
  ingot_device dev = ingot_default_device();
  if (devname && ingot_device_parse(devname, &dev)) {
    fprintf(stderr, "ingot: unknown device '%s' (cpu, cuda, cuda:N)\n", devname);
    return 2;
  }
  ingot_model_options mo = {.max_ctx = ctx, .exact_matvec = exact};
  if (isatty(2)) mo.progress = progress_bar;
  ingot_model *m = ingot_model_load_ex(model, dev, &mo);
  if (!m) {
    if (!strcmp(model, DEFAULT_MODEL) && access(model, F_OK))
      fprintf(stderr, "ingot: %s not found (run scripts/fetch-model)\n", model);
    else fprintf(stderr, "ingot: %s\n", ingot_last_error());
    return 1;
  }
  if (!have_system) {
    const char *t = ingot_model_chat_template(m);
    system = t && strstr(t, SMOLLM_SYSTEM) ? SMOLLM_SYSTEM : NULL;
  }
  int rc;
  if (chat) {
    rc = run_chat(m, system, &go);
  } else {
    const char *role = "user";
    char *text = raw ? strdup(prompt) : apply_template(&role, &prompt, 1, system);
    int64_t n = 0;
    int32_t *ids = text ? tokenize_all(ingot_model_tokenizer(m), text, !raw, &n) : NULL;
    free(text);
    ingot_generate_stats st;
    if (!ids) rc = fail_msg("cannot tokenize the prompt");
    else if (ingot_generate(m, ids, n, &go, on_token, NULL, NULL, 0, NULL, &st))
      rc = fail_msg("generation failed");
    else {
      printf("\n");
      fflush(stdout);
      print_stats(&st);
      rc = 0;
    }
    free(ids);
  }
  ingot_model_free(m);
  return rc;
}

static void quantize_usage(FILE *f) {
  fprintf(f,
          "usage: ingot quantize IN_DIR OUT_DIR [--skip-lm-head]\n"
          "Reads the HF model in IN_DIR (config.json, F32/F16/BF16 safetensors, single or\n"
          "sharded) and writes OUT_DIR/model.safetensors with every linear weight as\n"
          "F8_E4M3 and a per-output-row F32 scale '<name>_scale' beside it (embeddings,\n"
          "norms and MoE routers stay as they are), plus the other files of IN_DIR.\n"
          "  --skip-lm-head   keep lm_head.weight unquantized\n"
          "  -h, --help       this text\n");
}

static void progress_line(double f, void *user) {
  (void)user;
  fprintf(stderr, "\rquantizing: %3d%%", (int)(f * 100));
  if (f >= 1) fprintf(stderr, "\n");
}

static int cmd_quantize(int argc, char **argv) {
  const char *dirs[2] = {NULL, NULL};
  int nd = 0;
  ingot_quantize_options o = {0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      quantize_usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--skip-lm-head")) {
      o.skip_lm_head = true;
    } else if (argv[i][0] == '-' || nd == 2) {
      fprintf(stderr, "ingot quantize: unexpected argument '%s'\n", argv[i]);
      quantize_usage(stderr);
      return 2;
    } else {
      dirs[nd++] = argv[i];
    }
  }
  if (nd != 2) {
    quantize_usage(stderr);
    return 2;
  }
  if (isatty(2)) o.progress = progress_line;
  ingot_quantize_stats st;
  if (ingot_quantize_fp8(dirs[0], dirs[1], &o, &st)) {
    fprintf(stderr, "ingot: %s\n", ingot_last_error());
    return 1;
  }
  printf("%s: %lld tensors, %lld quantized to F8_E4M3; %.1f MiB -> %.1f MiB\n", dirs[1],
         (long long)st.tensors, (long long)st.quantized, st.bytes_in / 1048576.0,
         st.bytes_out / 1048576.0);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "info";
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "info")) {
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      printf("usage: ingot info\nPrints the version, build options, devices and the op "
             "support table.\n");
      return 0;
    }
    printf("ingot %s\nbuild: %s\n", ingot_version(), ingot_build_info());
    print_devices();
    print_support();
    return 0;
  }
  if (!strcmp(cmd, "devices")) {
    print_devices();
    return 0;
  }
  if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1, false);
  if (!strcmp(cmd, "chat")) return cmd_generate(argc - 1, argv + 1, true);
  if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
  fprintf(stderr, "ingot: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
