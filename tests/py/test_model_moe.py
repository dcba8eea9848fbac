"""qwen3_moe HF directories on the CPU (src/model/moe_block.c, model_hf.c).

Oracle: the float64 numpy forward of test_model_hf.py with its MLP replaced
by transformers' Qwen3MoeSparseMoeBlock written here in numpy: router logits,
softmax, top-k, renormalisation if norm_topk_prob, the weighted sum of the
chosen SwiGLU experts, and (Qwen2-MoE style) a shared expert scaled by
sigmoid(shared_expert_gate . x). Tiny random models are written as
safetensors (bf16 and f32; E = 4/8, k = 1/2, norm on/off, mlp_only_layers,
decoder_sparse_step, per-expert and fused expert tensors), and as GGUF
qwen3moe files (3-D expert tensors). test_matches_transformers_moe compares
with transformers itself and skips unless it imports (GPU machine)."""
import ctypes
import json

import ml_dtypes
import numpy as np
import pytest

from ingot_ctypes import lib
from test_model_hf import (PROMPT, Model, config, dense_mlp, random_weights, ref_greedy,
                           ref_logits, rel, tok_dir, write_model)  # noqa: F401 (tok_dir: fixture)

lib.ingot_model_layer_is_moe.restype = ctypes.c_bool
lib.ingot_model_layer_is_moe.argtypes = [ctypes.c_void_p, ctypes.c_int]


def moe_config(E=4, k=1, norm=False, **kw):
    c = config("qwen3", architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
               num_hidden_layers=3, num_experts=E, num_experts_per_tok=k, norm_topk_prob=norm,
               moe_intermediate_size=40, decoder_sparse_step=1, mlp_only_layers=[],
               router_aux_loss_coef=0.001, output_router_logits=False)
    c.update(kw)
    return {k_: v for k_, v in c.items() if v is not None}


def is_sparse(c, l):
    return (l not in c.get("mlp_only_layers", [])
            and (l + 1) % c.get("decoder_sparse_step", 1) == 0)


def moe_weights(c, seed):
    """Dense qwen3 weights with every sparse layer's MLP swapped for experts."""
    w = random_weights(dict(c, model_type="qwen3"), seed)
    rng = np.random.default_rng(seed + 1000)
    d, f, E = c["hidden_size"], c["moe_intermediate_size"], c["num_experts"]
    sf = c.get("shared_expert_intermediate_size", 0)

    def mat(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    for l in range(c["num_hidden_layers"]):
        if not is_sparse(c, l):
            continue
        p = f"model.layers.{l}.mlp."
        for n in ("gate_proj", "up_proj", "down_proj"):
            del w[p + n + ".weight"]
        w[p + "gate.weight"] = (2 * rng.standard_normal((E, d)) / np.sqrt(d)).astype(np.float32)
        for e in range(E):
            w[p + f"experts.{e}.gate_proj.weight"] = mat(f, d)
            w[p + f"experts.{e}.up_proj.weight"] = mat(f, d)
            w[p + f"experts.{e}.down_proj.weight"] = mat(d, f)
        if sf:
            w[p + "shared_expert.gate_proj.weight"] = mat(sf, d)
            w[p + "shared_expert.up_proj.weight"] = mat(sf, d)
            w[p + "shared_expert.down_proj.weight"] = mat(d, sf)
            w[p + "shared_expert_gate.weight"] = mat(1, d)
    return w


def silu_mlp(h, g, u, dn):
    a, b = h @ g.T, h @ u.T
    return (a / (1 + np.exp(-a)) * b) @ dn.T


def moe_mlp(c, w, l, h):
    """Qwen3MoeSparseMoeBlock.forward in numpy (float64)."""
    if not is_sparse(c, l):
        return dense_mlp(c, w, l, h)
    p = f"model.layers.{l}.mlp."
    k = c["num_experts_per_tok"]
    lg = h @ w[p + "gate.weight"].T
    pr = np.exp(lg - lg.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    sel = np.argsort(-pr, -1, kind="stable")[:, :k]
    wt = np.take_along_axis(pr, sel, -1)
    if c["norm_topk_prob"]:
        wt = wt / wt.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(k):
            e = sel[t, j]
            out[t] += wt[t, j] * silu_mlp(h[t], w[p + f"experts.{e}.gate_proj.weight"],
                                          w[p + f"experts.{e}.up_proj.weight"],
                                          w[p + f"experts.{e}.down_proj.weight"])
    if c.get("shared_expert_intermediate_size"):
        s = silu_mlp(h, w[p + "shared_expert.gate_proj.weight"],
                     w[p + "shared_expert.up_proj.weight"], w[p + "shared_expert.down_proj.weight"])
        out += s / (1 + np.exp(-(h @ w[p + "shared_expert_gate.weight"].T)))
    return out


def fuse_experts(c, w):
    """transformers >= 5's layout: mlp.experts.gate_up_proj [E, 2f, d], down_proj [E, d, f]."""
    w = dict(w)
    for l in range(c["num_hidden_layers"]):
        if not is_sparse(c, l):
            continue
        p = f"model.layers.{l}.mlp.experts."
        E = c["num_experts"]
        gu = [np.concatenate([w.pop(p + f"{e}.gate_proj.weight"), w.pop(p + f"{e}.up_proj.weight")])
              for e in range(E)]
        w[p + "gate_up_proj"] = np.stack(gu)
        w[p + "down_proj"] = np.stack([w.pop(p + f"{e}.down_proj.weight") for e in range(E)])
    return w


CASES = {
    "e4_k1": moe_config(4, 1),
    "e8_k2_norm": moe_config(8, 2, True),
    "e8_k2_nonorm_mlp_only": moe_config(8, 2, False, mlp_only_layers=[1]),
    "e4_k2_step2": moe_config(4, 2, True, decoder_sparse_step=2),
    "e8_k2_shared": moe_config(8, 2, False, shared_expert_intermediate_size=48),
    "e4_k4_all": moe_config(4, 4, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_f32_matches_numpy(tmp_path, tok_dir, name):
    c = CASES[name]
    w = moe_weights(c, seed=len(name))
    d = write_model(tmp_path / name, c, w, tok_dir)
    with Model(d) as m:
        for l in range(c["num_hidden_layers"]):
            assert lib.ingot_model_layer_is_moe(m.p, l) == is_sparse(c, l)
        assert not lib.ingot_model_layer_is_moe(m.p, c["num_hidden_layers"])
        want = ref_logits(c, w, PROMPT, moe_mlp)
        assert rel(m.logits(PROMPT), want) < 1e-4
        toks, sure = ref_greedy(c, w, PROMPT, 12, moe_mlp)
        assert sure >= 6
        assert m.greedy(PROMPT, 12)[:sure] == toks[:sure]
        # one token at a time through the KV cache: the same last logits
        lib.ingot_model_reset(m.p)
        for t in PROMPT[:-1]:
            m.logits([t], reset=False)
        assert rel(m.logits(PROMPT[-1:], reset=False), want) < 1e-4


@pytest.mark.parametrize("name", ["e4_k1", "e8_k2_norm"])
def test_bf16_matches_numpy(tmp_path, tok_dir, name):
    c = dict(CASES[name], torch_dtype="bfloat16")
    w = {k: v.astype(ml_dtypes.bfloat16) for k, v in moe_weights(c, seed=21).items()}
    d = write_model(tmp_path / name, c, w, tok_dir)
    with Model(d) as m:
        got = m.logits(PROMPT)
    # the reference on the same rounded weights; the float matvec rounds nothing else
    want = ref_logits(c, {k: v.astype(np.float32) for k, v in w.items()}, PROMPT, moe_mlp)
    assert rel(got, want) < 1e-4


def test_fused_expert_tensors(tmp_path, tok_dir):
    c = CASES["e8_k2_norm"]
    w = moe_weights(c, seed=5)
    with Model(write_model(tmp_path / "split", c, w, tok_dir)) as m:
        a = m.logits(PROMPT)
    with Model(write_model(tmp_path / "fused", c, fuse_experts(c, w), tok_dir, shards=2)) as m:
        b = m.logits(PROMPT)
    np.testing.assert_array_equal(a, b)


def test_unrouted_expert_never_contributes(tmp_path, tok_dir):
    """k = 1 and router rows r, -r, 0.5 r, 0: expert 3's logit 0 is always below
    max(r.h, -r.h), so it is never chosen and its NaN weights must not leak."""
    c = moe_config(4, 1, mlp_only_layers=[0, 2])
    w = moe_weights(c, seed=9)
    p = "model.layers.1.mlp."
    r = w[p + "gate.weight"][0]
    w[p + "gate.weight"] = np.stack([r, -r, 0.5 * r, 0 * r]).astype(np.float32)
    want = ref_logits(c, w, PROMPT, moe_mlp)
    for n in ("gate_proj", "up_proj", "down_proj"):
        w[p + f"experts.3.{n}.weight"][:] = np.nan
    with Model(write_model(tmp_path / "m", c, w, tok_dir)) as m:
        got = m.logits(PROMPT)
    assert np.isfinite(got).all()
    assert rel(got, want) < 1e-4


def break_config(**kw):
    return lambda c, w: c.update(kw)


def drop(name):
    return lambda c, w: w.pop(name)


def reshape(name):
    return lambda c, w: w.__setitem__(name, w[name][:, :-1].copy())


def fused_bad_shape(c, w):
    w.update(fuse_experts(c, w))
    n = "model.layers.0.mlp.experts.gate_up_proj"
    w[n] = w[n][:, :-2].copy()


ERRORS = [
    ("missing_expert", drop("model.layers.1.mlp.experts.2.up_proj.weight"),
     "missing tensor 'model.layers.1.mlp.experts.2.up_proj.weight'"),
    ("missing_router", drop("model.layers.0.mlp.gate.weight"),
     "missing tensor 'model.layers.0.mlp.gate.weight'"),
    ("expert_shape", reshape("model.layers.2.mlp.experts.0.down_proj.weight"),
     r"'model.layers.2.mlp.experts.0.down_proj.weight' has shape \[64, 39\], expected \[64, 40\]"),
    ("router_shape", break_config(num_experts=5), r"mlp.gate.weight' has shape \[4, 64\]"),
    ("k_gt_e", break_config(num_experts_per_tok=5), "num_experts_per_tok 5 > num_experts 4"),
    ("mlp_only_range", break_config(mlp_only_layers=[3]), "'mlp_only_layers' entries"),
    ("mlp_only_type", break_config(mlp_only_layers=1), "'mlp_only_layers' must be a list"),
    ("dense_layer_missing_mlp", break_config(mlp_only_layers=[1]),
     "missing tensor 'model.layers.1.mlp.gate_proj.weight'"),
    ("shared_missing", break_config(shared_expert_intermediate_size=48),
     "missing tensor 'model.layers.0.mlp.shared_expert.gate_proj.weight'"),
    ("fused_shape", fused_bad_shape, "gate_up_proj' has 3 dims, expected \\[4, 80, 64\\]"),
    ("bad_moe_dim", break_config(moe_intermediate_size=0), "'moe_intermediate_size' must be"),
]


@pytest.mark.parametrize("name,breaker,msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_load_errors(tmp_path, tok_dir, name, breaker, msg):
    c = moe_config(4, 2)
    w = moe_weights(c, 5)
    breaker(c, w)
    d = write_model(tmp_path / name, c, w, tok_dir)
    with pytest.raises(RuntimeError, match=msg):
        Model(d)


# ---- against transformers (skips here; run where torch + transformers exist) ----

def test_matches_transformers_moe(tmp_path, tok_dir):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen3MoeForCausalLM"):
        pytest.skip("this transformers has no Qwen3MoeForCausalLM")
    from transformers_ref import transformers_reference
    c = moe_config(8, 2, True, mlp_only_layers=[1])
    want, toks = transformers_reference("Qwen3MoeConfig", "Qwen3MoeForCausalLM", c,
                                        tmp_path / "tf", tok_dir, PROMPT, 32)
    with Model(tmp_path / "tf") as m:
        assert rel(m.logits(PROMPT), want) < 1e-4
        assert m.greedy(PROMPT, 32) == toks


# ---- GGUF qwen3moe (llama.cpp's layout: 3-D expert tensors, always renormalised) ----

def write_gguf(path, c, w, tok_dir, drop=None, exps_type=None):
    """exps_type: a gguf.GGMLQuantizationType for the expert tensors (else f32)."""
    gguf = pytest.importorskip("gguf")
    tk = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab = dict(tk["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in tk["added_tokens"]})
    toks = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        toks[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in tk["model"]["merges"]]
    special = {t["content"] for t in tk["added_tokens"]}
    g = gguf.GGUFWriter(str(path), "qwen3moe")
    a = "qwen3moe."
    for k, v in [("block_count", c["num_hidden_layers"]), ("embedding_length", c["hidden_size"]),
                 ("feed_forward_length", c["intermediate_size"]),
                 ("attention.head_count", c["num_attention_heads"]),
                 ("attention.head_count_kv", c["num_key_value_heads"]),
                 ("attention.key_length", c["head_dim"]), ("attention.value_length", c["head_dim"]),
                 ("context_length", c["max_position_embeddings"]),
                 ("expert_count", c["num_experts"]), ("expert_used_count", c["num_experts_per_tok"]),
                 ("expert_feed_forward_length", c["moe_intermediate_size"])]:
        g.add_uint32(a + k, v)
    g.add_float32(a + "attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    g.add_float32(a + "rope.freq_base", c["rope_theta"])
    g.add_tokenizer_model("gpt2")
    g.add_token_list(toks)
    g.add_token_types([3 if t in special else 1 for t in toks])
    g.add_token_merges(merges)
    g.add_eos_token_id(vocab["<|im_end|>"])
    per = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
           "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
           "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp"}
    g.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    g.add_tensor("output_norm.weight", w["model.norm.weight"])
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for hf, gg in per.items():
            g.add_tensor(f"blk.{l}.{gg}.weight", w[p + hf + ".weight"])
        for proj in ("gate", "up", "down"):
            if f"blk.{l}.ffn_{proj}_exps.weight" == drop:
                continue
            x = np.stack([w[p + f"mlp.experts.{e}.{proj}_proj.weight"]
                          for e in range(c["num_experts"])])
            if exps_type is not None:
                g.add_tensor(f"blk.{l}.ffn_{proj}_exps.weight",
                             gguf.quants.quantize(x, exps_type), raw_dtype=exps_type)
            else:
                g.add_tensor(f"blk.{l}.ffn_{proj}_exps.weight", x)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    return path


def test_gguf_qwen3moe_matches_hf(tmp_path, tok_dir):
    c = moe_config(8, 2, True)
    w = moe_weights(c, seed=13)
    want = ref_logits(c, w, PROMPT, moe_mlp)
    with Model(write_gguf(tmp_path / "m.gguf", c, w, tok_dir)) as m:
        assert all(lib.ingot_model_layer_is_moe(m.p, l) for l in range(c["num_hidden_layers"]))
        got = m.logits(PROMPT)
    assert rel(got, want) < 1e-4
    with Model(write_model(tmp_path / "hf", c, w, tok_dir)) as m:
        np.testing.assert_allclose(got, m.logits(PROMPT), rtol=0, atol=1e-5 * np.abs(want).max())


def test_gguf_qwen3moe_errors(tmp_path, tok_dir):
    c = moe_config(8, 2, True)
    w = moe_weights(c, seed=13)
    with pytest.raises(RuntimeError, match="missing tensor 'blk.2.ffn_down_exps.weight'"):
        Model(write_gguf(tmp_path / "x.gguf", c, w, tok_dir, drop="blk.2.ffn_down_exps.weight"))
    c2 = dict(c, moe_intermediate_size=41)  # the file says 41, the tensors hold 40
    with pytest.raises(RuntimeError, match=r"ffn_gate_exps.weight' has 3 dims \[64, 40, \.\.\.\], "
                                           r"expected \[64, 41, 8\]"):
        Model(write_gguf(tmp_path / "y.gguf", c2, w, tok_dir))
    c3 = dict(c, num_experts_per_tok=9)
    with pytest.raises(RuntimeError, match="expert_used_count 9 > expert_count 8"):
        Model(write_gguf(tmp_path / "z.gguf", c3, w, tok_dir))
