"""Quality cost of FP8 weights (`ingot quantize`) on a real model: SmolLM2-135M
in bf16 against the same model quantized to F8_E4M3 with per-row scales.

usage: .venv/bin/python bench/fp8_quality.py [--tokens 256] [--work DIR] [--skip-lm-head]

There is no SmolLM2 HF checkpoint here, only the Q4_1 GGUF (.cache/models):
the script dequantises it with the gguf package into an HF-layout bf16
directory (Q/K rows un-permuted back to HF's half-split RoPE order,
config.json and tokenizer.json from the GGUF metadata), checks that this
directory reproduces the GGUF model's logits (up to bf16 rounding), runs `ingot quantize` on it,
then feeds the same token ids (a fixed text tokenized by ingot) one at a time
through both models on the CPU and prints, over every next-token position:
mean and max KL(bf16 || fp8), top-1 agreement, and each model's perplexity
on the text. Prints one JSON line at the end."""
import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
os.environ.setdefault("INGOT_LIB", os.path.join(ROOT, "build", "libingot.so"))

import ml_dtypes  # noqa: E402
from ingot_ctypes import Device, lib  # noqa: E402

TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from "
        "those used to make wine. Before his invention, books were copied by hand, a slow and "
        "costly process that kept written knowledge in the hands of a few monasteries, courts "
        "and universities. Within fifty years of the first printed Bible, presses were at work "
        "in more than two hundred European cities, and millions of volumes had been produced. "
        "Cheaper books changed how people learned to read, how scholars shared their results "
        "and how religious and political ideas spread. Newspapers appeared in the seventeenth "
        "century; by the nineteenth, steam-driven presses could print thousands of sheets an "
        "hour, and literacy rose across much of the world. Historians still debate how much "
        "the press caused these changes and how much it simply accelerated trends already "
        "under way, but few doubt that it was one of the most important technologies of the "
        "second millennium. Today the same questions are asked about the internet and about "
        "machine learning: which changes are new, which are old ones made faster, and who "
        "gains from them.")

P, I64 = ctypes.c_void_p, ctypes.c_int64
CPU = Device(0, 0)
for fn, res, args in [
    ("ingot_model_load", P, [ctypes.c_char_p, Device]),
    ("ingot_model_free", None, [P]),
    ("ingot_model_reset", None, [P]),
    ("ingot_model_forward", ctypes.c_int, [P, P, I64, P]),
    ("ingot_model_tokenizer", P, [P]),
    ("ingot_tokenize", I64, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, P, I64]),
    ("ingot_last_error", ctypes.c_char_p, []),
]:
    getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args


def load(path):
    m = lib.ingot_model_load(str(path).encode(), CPU)
    if not m:
        sys.exit(f"cannot load {path}: {lib.ingot_last_error().decode()}")
    return m


def gguf_to_hf(gguf_path, out):
    """The GGUF's weights dequantised to bf16 in HF names and layout."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    r = GGUFReader(gguf_path)

    def field(key):
        f = r.fields[key]
        if len(f.types) and f.types[0].name == "ARRAY":
            return [bytes(f.parts[i]).decode() if f.types[-1].name == "STRING"
                    else f.parts[i][0] for i in f.data]
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0].name == "STRING" else v[0].item()

    a = field("general.architecture")
    assert a == "llama", a
    nh, nkv = field(f"{a}.attention.head_count"), field(f"{a}.attention.head_count_kv")
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight":
             "model.norm.weight", "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
           "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]
        x = np.asarray(dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        if t.name.startswith("blk."):
            _, l, kind, _ = t.name.split(".")
            name = f"model.layers.{l}.{per[kind]}.weight"
            if kind in ("attn_q", "attn_k"):  # undo convert_hf_to_gguf's permute
                n = nh if kind == "attn_q" else nkv
                x = x.reshape(n, x.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(shape)
        else:
            name = names[t.name]
        w[name] = x.astype(ml_dtypes.bfloat16)
    vocab = w["model.embed_tokens.weight"].shape[0]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": field(f"{a}.embedding_length"),
           "intermediate_size": field(f"{a}.feed_forward_length"),
           "num_hidden_layers": field(f"{a}.block_count"), "num_attention_heads": nh,
           "num_key_value_heads": nkv, "rms_norm_eps": field(f"{a}.attention.layer_norm_rms_epsilon"),
           "rope_theta": field(f"{a}.rope.freq_base"), "vocab_size": vocab,
           "max_position_embeddings": field(f"{a}.context_length"), "hidden_act": "silu",
           "tie_word_embeddings": "lm_head.weight" not in w, "torch_dtype": "bfloat16",
           "bos_token_id": field("tokenizer.ggml.bos_token_id"),
           "eos_token_id": field("tokenizer.ggml.eos_token_id")}
    os.makedirs(out, exist_ok=True)
    from st_util import write_st
    write_st(os.path.join(out, "model.safetensors"), w, metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    toks, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True) for t, y in zip(toks, types) if y == 3])
    tk.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": toks[cfg["eos_token_id"]]}, f)


def logits_per_position(m, ids, vocab):
    """logits[i] = the model's logits after ids[0..i], one decode step each."""
    lib.ingot_model_reset(m)
    out = np.zeros((len(ids), vocab), np.float32)
    for i, t in enumerate(ids):
        one = np.array([t], np.int32)
        st = lib.ingot_model_forward(m, one.ctypes.data, 1, out[i].ctypes.data)
        assert st == 0, lib.ingot_last_error().decode()
    return out.astype(np.float64)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--work", default=None, help="keep the bf16 and fp8 directories here")
    ap.add_argument("--skip-lm-head", action="store_true")
    a = ap.parse_args()
    from refs import smollm2_path
    gguf = smollm2_path()
    work = a.work or tempfile.mkdtemp(prefix="fp8q-")
    bf16, fp8 = os.path.join(work, "bf16"), os.path.join(work, "fp8")
    gguf_to_hf(gguf, bf16)
    cli = os.path.join(os.path.dirname(os.environ["INGOT_LIB"]), "bin", "ingot")
    cmd = [cli, "quantize", bf16, fp8] + (["--skip-lm-head"] if a.skip_lm_head else [])
    subprocess.run(cmd, check=True)

    os.environ["INGOT_EXACT_MATVEC"] = "1"  # float activations in the GGUF model too
    g = load(gguf)
    tok = lib.ingot_model_tokenizer(g)
    buf = np.zeros(4096, np.int32)
    n = lib.ingot_tokenize(tok, TEXT.encode(), len(TEXT.encode()), True, buf.ctypes.data, 4096)
    ids = buf[:min(n, a.tokens)].copy()
    vocab = json.load(open(os.path.join(bf16, "config.json")))["vocab_size"]
    # the conversion itself: the bf16 directory gives the GGUF model's logits
    ref = logits_per_position(g, ids[:8], vocab)
    lib.ingot_model_free(g)
    mb = load(bf16)
    lb = logits_per_position(mb, ids, vocab)
    lib.ingot_model_free(mb)
    conv = float(np.abs(lb[:8] - ref).max() / np.abs(ref).max())
    mf = load(fp8)
    lf = logits_per_position(mf, ids, vocab)
    lib.ingot_model_free(mf)

    pb, pf = log_softmax(lb[:-1]), log_softmax(lf[:-1])
    kl = (np.exp(pb) * (pb - pf)).sum(-1)
    nxt = ids[1:]
    ppl_b = math.exp(-pb[np.arange(len(nxt)), nxt].mean())
    ppl_f = math.exp(-pf[np.arange(len(nxt)), nxt].mean())
    top1 = float((lb[:-1].argmax(-1) == lf[:-1].argmax(-1)).mean())
    res = {"model": os.path.basename(gguf), "positions": len(nxt),
           "gguf_vs_bf16_dir_rel": conv, "kl_mean": float(kl.mean()),
           "kl_max": float(kl.max()), "top1_agree": top1, "ppl_bf16": ppl_b, "ppl_fp8": ppl_f,
           "skip_lm_head": a.skip_lm_head}
    print(f"{len(nxt)} positions of a fixed text, SmolLM2-135M (from {res['model']})")
    print(f"  GGUF -> bf16 directory, max |logit diff| / max |logit|: {conv:.2e}")
    print(f"  KL(bf16 || fp8) mean {kl.mean():.5f} nats, max {kl.max():.4f}")
    print(f"  top-1 agreement {top1:.4f}")
    print(f"  perplexity bf16 {ppl_b:.3f}, fp8 {ppl_f:.3f} ({(ppl_f / ppl_b - 1) * 100:+.2f}%)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
