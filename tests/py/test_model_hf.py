"""HF model directories (src/model/model_hf.c): config.json + safetensors
(single or sharded) + tokenizer.json, llama and qwen3 on the CPU.

Oracle: a numpy forward of the same architecture with HF semantics, written
here: RMSNorm, half-split RoPE (rotate_half; llama3 frequency scaling as in
transformers' _compute_llama3_parameters), QK-norm over head_dim before RoPE
(qwen3), grouped-query attention, SwiGLU, tied or untied LM head. Tiny random
models are written as safetensors by hand (tests/py/st_util.py). A last test
compares with transformers itself and skips unless transformers and torch
import (run it on the GPU machine)."""
import ctypes
import json
import os
import shutil

import ml_dtypes
import numpy as np
import pytest

from cuda_diff import needs_cuda
from ingot_ctypes import Device, lib
from st_util import write_sharded, write_st
from model_ctypes import TOKEN_FN, GenOpts, ModelHandle, SampleOpts  # noqa: F401

P, I64, I32, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
CPU = Device(0, 0)

tokenizers = pytest.importorskip("tokenizers")


VOCAB = 300
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def config(arch, **kw):
    c = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": VOCAB,
         "max_position_embeddings": 128, "bos_token_id": 1, "eos_token_id": 2,
         "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
         "torch_dtype": "float32"}
    if arch == "llama":
        c.update(architectures=["LlamaForCausalLM"], model_type="llama", mlp_bias=False)
    else:  # qwen3: explicit head_dim != hidden / heads, QK-norm, tied head
        c.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32,
                 tie_word_embeddings=True)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def random_weights(c, seed):
    rng = np.random.default_rng(seed)
    d, f, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]

    def mat(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((V, d)).astype(np.float32),
         "model.norm.weight": norm(d)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(V, d)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w.update({p + "input_layernorm.weight": norm(d), p + "post_attention_layernorm.weight": norm(d),
                  p + "self_attn.q_proj.weight": mat(nh * hd, d),
                  p + "self_attn.k_proj.weight": mat(nkv * hd, d),
                  p + "self_attn.v_proj.weight": mat(nkv * hd, d),
                  p + "self_attn.o_proj.weight": mat(d, nh * hd),
                  p + "mlp.gate_proj.weight": mat(f, d), p + "mlp.up_proj.weight": mat(f, d),
                  p + "mlp.down_proj.weight": mat(d, f)})
        if c["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
    return w


# ---- the numpy reference (float64) ----

def inv_freq(c):
    hd = c["head_dim"]
    rs = c.get("rope_scaling") or c.get("rope_parameters")  # the latter: transformers >= 5
    theta = c["rope_theta"] if "rope_theta" in c else rs["rope_theta"]
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wl = 2 * np.pi / inv
        ll = np.where(wl > old / lo, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * ll / factor + smooth * ll
        medium = ~(wl < old / hi) & ~(wl > old / lo)
        inv = np.where(medium, smoothed, ll)
    elif rs and rs.get("rope_type", rs.get("type")) == "linear":
        inv = inv / rs["factor"]
    return inv


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, inv):  # x [T, heads, hd], half-split pairs (HF rotate_half)
    a = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(a), np.cos(a)], -1)[:, None, :]
    sin = np.concatenate([np.sin(a), np.sin(a)], -1)[:, None, :]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def dense_mlp(c, w, l, h):
    p = f"model.layers.{l}.mlp."
    g, u = h @ w[p + "gate_proj.weight"].T, h @ w[p + "up_proj.weight"].T
    return (g / (1 + np.exp(-g)) * u) @ w[p + "down_proj.weight"].T


def ref_logits(c, w, ids, mlp=dense_mlp):
    """mlp(c, w, layer, h) -> the MLP output of layer for the normed h."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    T, eps, hd = len(ids), c["rms_norm_eps"], c["head_dim"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    inv, pos = inv_freq(c), np.arange(T, dtype=np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        if c["model_type"] in ("qwen3", "qwen3_moe"):
            q = rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + mlp(c, w, l, h)
    h = rms(x[-1], w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"]
    return h @ head.T


def ref_greedy(c, w, ids, n, mlp=dense_mlp):
    """Greedy tokens, and how many of them are decided by a clear margin."""
    ids, out, sure = list(ids), [], n
    for i in range(n):
        lg = ref_logits(c, w, np.array(ids), mlp)
        top = np.sort(lg)[-2:]
        if top[1] - top[0] < 1e-4 and sure == n:
            sure = i
        t = int(lg.argmax())
        out.append(t)
        ids.append(t)
    return out, sure


# ---- writing model directories ----

@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = ["the quick brown fox jumps over the lazy dog", "hello world, hello there",
            "the capital of france is paris", "in the beginning there was the word"] * 20
    tk.train_from_iterator(text, tr)
    assert tk.get_vocab_size() <= VOCAB
    d = tmp_path_factory.mktemp("tok")
    tk.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": TEMPLATE}))
    return d


def write_model(d, c, w, tok_dir, shards=0, convert=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(c))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, d / f)
    w = {k: (convert(k, v) if convert else v) for k, v in w.items()}
    if shards:
        write_sharded(d, w, shards)
    else:
        write_st(d / "model.safetensors", w)
    return d


class Model(ModelHandle):
    """A loaded model: on the CPU's raw path, the CPU's tensor forward
    ("tensor": INGOT_TENSOR_FORWARD=1 while loading) or cuda:0 ("cuda")."""
    vocab = VOCAB

    def __init__(self, d, path="raw"):
        lib.ingot_clear_error()
        old = os.environ.get("INGOT_TENSOR_FORWARD")
        os.environ["INGOT_TENSOR_FORWARD"] = "1" if path == "tensor" else "0"
        try:
            self.p = lib.ingot_model_load(str(d).encode(), Device(1, 0) if path == "cuda" else CPU)
        finally:
            if old is None:
                del os.environ["INGOT_TENSOR_FORWARD"]
            else:
                os.environ["INGOT_TENSOR_FORWARD"] = old
        if not self.p:
            raise RuntimeError(lib.ingot_last_error().decode())


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


PROMPT = np.array([5, 17, 250, 3, 99, 42, 7, 180, 11], np.int32)

ARCHS = {
    "llama": config("llama"),
    "llama_tied": config("llama", tie_word_embeddings=True),
    "llama3_rope": config("llama", rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}),
    "llama_linear_rope": config("llama", rope_scaling={"type": "linear", "factor": 2.0}),
    "qwen3": config("qwen3"),
    "qwen3_rope_parameters": config("qwen3", rope_theta=None, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "qwen3_untied": config("qwen3", tie_word_embeddings=False),
}


@pytest.mark.parametrize("path", ["raw", "tensor", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("name", list(ARCHS))
def test_f32_matches_numpy(tmp_path, tok_dir, name, path):
    c = ARCHS[name]
    w = random_weights(c, seed=len(name))
    d = write_model(tmp_path / name, c, w, tok_dir)
    with Model(d, path) as m:
        got = m.logits(PROMPT)
        want = ref_logits(c, w, PROMPT)
        assert rel(got, want) < 1e-4
        toks, sure = ref_greedy(c, w, PROMPT, 16)
        assert sure >= 8
        assert m.greedy(PROMPT, 16)[:sure] == toks[:sure]
        # token by token through the KV cache gives the same last logits
        lib.ingot_model_reset(m.p)
        for t in PROMPT[:-1]:
            m.logits([t], reset=False)
        assert rel(m.logits(PROMPT[-1:], reset=False), want) < 1e-4
        assert lib.ingot_model_n_past(m.p) == len(PROMPT)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_low_precision_weights(tmp_path, tok_dir, arch, dt):
    c = config(arch, torch_dtype="bfloat16" if dt == "bf16" else "float16")
    w = random_weights(c, seed=7)
    npdt = ml_dtypes.bfloat16 if dt == "bf16" else np.float16
    wq = {k: v.astype(npdt) for k, v in w.items()}
    d = write_model(tmp_path / arch, c, wq, tok_dir)
    with Model(d) as m:
        got = m.logits(PROMPT)
    # the reference on the same (rounded) weights; the matvec rounds nothing else
    # for f16 and may round activations for bf16: bf16 tolerance
    want = ref_logits(c, {k: v.astype(np.float32) for k, v in wq.items()}, PROMPT)
    assert rel(got, want) < (2e-2 if dt == "bf16" else 5e-3)


def test_f8_weights_with_scale(tmp_path, tok_dir):
    c = config("qwen3")
    w = random_weights(c, seed=11)
    f8 = {}
    for k, v in w.items():
        if k.endswith("_proj.weight"):
            scale = (np.abs(v).max(1) / 448).astype(np.float32)
            q = (v / scale[:, None]).astype(ml_dtypes.float8_e4m3fn)
            f8[k], f8[k + "_scale"] = q, scale
        else:
            f8[k] = v
    d = write_model(tmp_path / "f8", c, f8, tok_dir)
    deq = {k: (v.astype(np.float32) * f8[k + "_scale"][:, None] if k + "_scale" in f8 else v)
           for k, v in f8.items() if not k.endswith("_scale")}
    with Model(d) as m:
        assert rel(m.logits(PROMPT), ref_logits(c, deq, PROMPT)) < 1e-4


@pytest.mark.parametrize("shards", [2, 3])
def test_sharded_equals_single(tmp_path, tok_dir, shards):
    c = config("qwen3")
    w = random_weights(c, seed=3)
    with Model(write_model(tmp_path / "one", c, w, tok_dir)) as m:
        a = m.logits(PROMPT)
    with Model(write_model(tmp_path / "many", c, w, tok_dir, shards=shards)) as m:
        b = m.logits(PROMPT)
    np.testing.assert_array_equal(a, b)


def test_config_and_tokenizer(tmp_path, tok_dir):
    c = config("qwen3")
    d = write_model(tmp_path / "m", c, random_weights(c, 1), tok_dir)
    from tokenizers import Tokenizer
    ref = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    with Model(d) as m:
        assert lib.ingot_model_chat_template(m.p).decode() == TEMPLATE
        tok = lib.ingot_model_tokenizer(m.p)
        text = b"the quick brown fox said hello"
        buf = np.zeros(64, np.int32)
        n = lib.ingot_tokenize(tok, text, len(text), True, buf.ctypes.data, 64)
        assert list(buf[:n]) == ref.encode(text.decode()).ids


def break_config(**kw):
    def f(c, w):
        c.update(kw)
        for k, v in list(c.items()):
            if v is None:
                del c[k]
    return f


def drop(name):
    return lambda c, w: w.pop(name)


def reshape(name):
    return lambda c, w: w.__setitem__(name, w[name][:, :-1].copy())


def retype(name, dt):
    return lambda c, w: w.__setitem__(name, w[name].astype(dt))


ERRORS = [
    ("arch", break_config(model_type="mistral", architectures=["MistralForCausalLM"]),
     "model_type 'mistral' is not supported"),
    ("no_hidden", break_config(hidden_size=None), "missing 'hidden_size'"),
    ("neg_layers", break_config(num_hidden_layers=-1), "'num_hidden_layers' must be an integer"),
    ("heads", break_config(num_key_value_heads=3), "inconsistent"),
    ("act", break_config(hidden_act="gelu"), "hidden_act"),
    ("bias", break_config(attention_bias=True), "attention_bias = true is not supported"),
    ("swa", break_config(use_sliding_window=True), "use_sliding_window = true is not supported"),
    ("yarn", break_config(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
     "rope_scaling type 'yarn' is not supported"),
    ("eps", break_config(rms_norm_eps="x"), "'rms_norm_eps' must be a number"),
    ("missing", drop("model.layers.1.self_attn.q_proj.weight"),
     "missing tensor 'model.layers.1.self_attn.q_proj.weight'"),
    ("missing_qnorm", drop("model.layers.0.self_attn.q_norm.weight"),
     "missing tensor 'model.layers.0.self_attn.q_norm.weight'"),
    ("shape", reshape("model.layers.0.mlp.up_proj.weight"),
     r"'model.layers.0.mlp.up_proj.weight' has shape \[96, 63\], expected \[96, 64\]"),
    ("dtype", retype("model.layers.0.mlp.up_proj.weight", np.int32),
     "has dtype I32, not a supported weight type"),
    ("f8_noscale", retype("model.layers.0.mlp.up_proj.weight", ml_dtypes.float8_e4m3fn),
     "no per-row scale"),
    ("vocab", break_config(vocab_size=301), "has shape"),
]


@pytest.mark.parametrize("name,breaker,msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_load_errors(tmp_path, tok_dir, name, breaker, msg):
    c = config("qwen3")
    w = random_weights(c, 5)
    breaker(c, w)
    d = write_model(tmp_path / name, c, w, tok_dir)
    with pytest.raises(RuntimeError, match=msg):
        Model(d)


def test_dir_errors(tmp_path, tok_dir):
    c = config("llama")
    d = write_model(tmp_path / "m", c, random_weights(c, 2), tok_dir)
    (d / "tokenizer.json").unlink()
    with pytest.raises(RuntimeError, match="tokenizer.json"):
        Model(d)
    shutil.copy(tok_dir / "tokenizer.json", d / "tokenizer.json")
    (d / "config.json").write_text("{\"hidden_size\": ")
    with pytest.raises(RuntimeError, match="config.json: malformed JSON"):
        Model(d)
    (d / "config.json").unlink()
    with pytest.raises(RuntimeError, match="config.json: cannot read"):
        Model(d)
    (d / "config.json").write_text(json.dumps(c))
    (d / "model.safetensors").unlink()
    with pytest.raises(RuntimeError, match="no model.safetensors"):
        Model(d)


# ---- against transformers (skips here; run where torch + transformers exist) ----

@pytest.mark.parametrize("path", ["raw", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_matches_transformers(tmp_path, tok_dir, arch, path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    c = config(arch)
    c.pop("architectures"), c.pop("model_type"), c.pop("torch_dtype")
    if arch == "llama":
        cfg, cls = transformers.LlamaConfig(**c), transformers.LlamaForCausalLM
    else:
        if not hasattr(transformers, "Qwen3ForCausalLM"):
            pytest.skip("this transformers has no Qwen3")
        cfg, cls = transformers.Qwen3Config(**c), transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = cls(cfg).float().eval()
    with torch.no_grad():  # larger than HF's 0.02 init so the logits are not all ~0
        for n, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0, 1 / np.sqrt(p.shape[1]) if "embed" not in n else 1.0)
            else:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    d = tmp_path / arch
    model.save_pretrained(str(d), safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, d / f)
    ids = torch.tensor(PROMPT[None].astype(np.int64))
    with torch.no_grad():
        want = model(ids).logits[0, -1].double().numpy()
        toks, cur = [], ids
        for _ in range(16):
            t = int(model(cur).logits[0, -1].argmax())
            toks.append(t)
            cur = torch.cat([cur, torch.tensor([[t]])], 1)
    with Model(d, path) as m:
        assert rel(m.logits(PROMPT), want) < 1e-4
        assert m.greedy(PROMPT, 16) == toks
