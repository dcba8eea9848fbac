"""qwen3_moe on the tensor forward (src/model/forward_moe.c): the sparse
layers through ingot_moe_route / ingot_moe_gate_up / ingot_moe_down.

Oracle: the raw CPU path (moe_block.c, itself checked against numpy and
transformers in test_model_moe.py) on the same tiny random HF models, loaded
with float activations (INGOT_EXACT_MATVEC=1). Tolerances: logits within
1e-4 of the largest |logit| on the CPU (the same f32 math summed in another
order), 1e-3 on CUDA (warp reductions); greedy tokens identical for 32 steps
(CUDA: up to the first step the raw path decides by less than 4x that
tolerance, at least 16), and on CUDA identical with the decode graph on
and off."""
import ml_dtypes
import numpy as np
import pytest

from cuda_diff import needs_cuda
from ingot_ctypes import lib
from test_model_hf import PROMPT, Model, rel, write_model, tok_dir  # noqa: F401 (fixture)
from test_model_moe import CASES, fuse_experts, moe_config, moe_weights, write_gguf

CPU_TOL, CUDA_TOL, STEPS = 1e-4, 1e-3, 32
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
RUNS = [(n, "f32") for n in CASES] + [("e4_k1", "bf16"), ("e8_k2_norm", "bf16"),
                                      ("e8_k2_nonorm_mlp_only", "bf16")]


@pytest.fixture(autouse=True)
def exact(monkeypatch):
    monkeypatch.setenv("INGOT_EXACT_MATVEC", "1")
    monkeypatch.delenv("INGOT_NO_GRAPH", raising=False)


def build(tmp_path, tok_dir, name, dt, fused=False):
    c = dict(CASES[name], torch_dtype="bfloat16" if dt == "bf16" else "float32")
    w = {k: v.astype(DTYPES[dt]) for k, v in moe_weights(c, seed=len(name) + 3).items()}
    return write_model(tmp_path / f"{name}_{dt}", c, fuse_experts(c, w) if fused else w, tok_dir)


def compare(d, path, tol, monkeypatch=None):
    with Model(d) as ref, Model(d, path) as m:
        for l in range(3):
            assert lib.ingot_model_layer_is_moe(m.p, l) == lib.ingot_model_layer_is_moe(ref.p, l)
        want = ref.logits(PROMPT)
        assert rel(m.logits(PROMPT), want) < tol
        # one token at a time through the KV cache: the same last logits
        lib.ingot_model_reset(m.p)
        for t in PROMPT[:-1]:
            m.logits([t], reset=False)
        assert rel(m.logits(PROMPT[-1:], reset=False), want) < tol
        assert lib.ingot_model_n_past(m.p) == len(PROMPT)
        toks = ref.greedy(PROMPT, STEPS)
        assert len(toks) == STEPS
        got = m.greedy(PROMPT, STEPS)
        n = decided(ref, PROMPT, toks, 4 * tol)
        assert n >= STEPS // 2
        assert got[:n] == toks[:n]
        if path != "cuda":  # the CPU agrees past near-ties too
            assert got == toks
        if monkeypatch is not None:  # CUDA: the decode graph off gives the same tokens
            monkeypatch.setenv("INGOT_NO_GRAPH", "1")
            assert m.greedy(PROMPT, STEPS) == got
            monkeypatch.delenv("INGOT_NO_GRAPH")


def decided(ref, prompt, toks, margin):
    """Steps whose greedy choice the raw path makes by more than margin x the
    largest |logit| (past a near-tie, CUDA's other summation order may pick
    the other token, and every later step differs)."""
    for i in range(len(toks)):
        lg = ref.logits(np.concatenate([prompt, toks[:i]]).astype(np.int32))
        a, b = np.sort(lg)[-2:]
        if b - a < margin * np.abs(lg).max():
            return i
    return len(toks)


@pytest.mark.parametrize("name,dt", RUNS, ids=[f"{n}-{d}" for n, d in RUNS])
def test_tensor_forward_matches_raw_path(tmp_path, tok_dir, name, dt):
    compare(build(tmp_path, tok_dir, name, dt), "tensor", CPU_TOL)


def test_tensor_forward_fused_experts(tmp_path, tok_dir):
    compare(build(tmp_path, tok_dir, "e8_k2_norm", "f32", fused=True), "tensor", CPU_TOL)


def test_f16_experts(tmp_path, tok_dir):
    c = dict(CASES["e8_k2_norm"], torch_dtype="float16")
    w = {k: v.astype(np.float16) for k, v in moe_weights(c, seed=2).items()}
    compare(write_model(tmp_path / "f16", c, w, tok_dir), "tensor", CPU_TOL)


def f8_model(tmp_path, tok_dir, name, only=""):
    """Every projection (experts, shared expert, attention, dense MLPs; with
    `only`, those whose name contains it; only="*": every 2-D weight, the
    embedding, head, routers and shared-expert gates too) as f8e4m3fn with a
    per-row f32 scale: the raw path reads their f32 dequantisation, the tensor
    forward the f8 experts with the scales (ingot_moe_* scale argument), the
    other f8 linears as f8 rows with their scales (ingot_f8matmul_*: q|k|v
    stacked; no host F32 copy made) and the embedding and routers as their
    f32 dequantisation."""
    c = CASES[name]
    f8 = {}
    for k, v in moe_weights(c, seed=8).items():
        if (v.ndim == 2 if only == "*" else k.endswith("_proj.weight") and only in k):
            scale = (np.abs(v).max(1) / 448).astype(np.float32)
            f8[k], f8[k + "_scale"] = (v / scale[:, None]).astype(ml_dtypes.float8_e4m3fn), scale
        else:
            f8[k] = v
    return write_model(tmp_path / f"f8_{name}_{only.replace('*', 'all')}", c, f8, tok_dir)


@pytest.mark.parametrize("name", ["e8_k2_norm", "e8_k2_shared"])
def test_f8_experts(tmp_path, tok_dir, name):
    compare(f8_model(tmp_path, tok_dir, name), "tensor", CPU_TOL)


# (name, only): f8 attention alone (float experts); every linear f8 with
# dense MLP layers among the sparse ones (gate|up stacked, f8matmul_swiglu);
# every 2-D weight f8 (head f8 on the device; embedding, routers as floats).
F8_LINEARS = [("e8_k2_norm", "self_attn"), ("e8_k2_nonorm_mlp_only", ""), ("e4_k2_step2", ""),
              ("e8_k2_shared", "*")]


@pytest.mark.parametrize("name,only", F8_LINEARS)
def test_f8_linears(tmp_path, tok_dir, name, only):
    compare(f8_model(tmp_path, tok_dir, name, only), "tensor", CPU_TOL)


def test_gguf_qwen3moe(tmp_path, tok_dir):
    c = moe_config(8, 2, True)
    compare(write_gguf(tmp_path / "m.gguf", c, moe_weights(c, seed=13), tok_dir), "tensor", CPU_TOL)


def test_gguf_quantized_experts_fail_clearly(tmp_path, tok_dir):
    """Q8_0 experts: the raw path runs them, the expert ops cannot read ggml
    blocks, so the tensor forward refuses the load (never a dense fallback)."""
    gguf = pytest.importorskip("gguf")
    c = moe_config(8, 2, True, moe_intermediate_size=64)  # rows of whole Q8_0 blocks
    d = write_gguf(tmp_path / "q8.gguf", c, moe_weights(c, seed=13), tok_dir,
                   exps_type=gguf.GGMLQuantizationType.Q8_0)
    with Model(d) as m:
        assert np.isfinite(m.logits(PROMPT)).all()
    with pytest.raises(RuntimeError, match="layer 0's experts are q8_0"):
        Model(d, "tensor")


def test_mixed_expert_dtypes_fail_clearly(tmp_path, tok_dir):
    """One expert in another dtype: the packed expert tensor cannot hold it, so
    loading on the tensor forward fails naming the layer (the raw path loads)."""
    c = moe_config(4, 2, True)
    w = moe_weights(c, seed=4)
    w["model.layers.1.mlp.experts.2.up_proj.weight"] = \
        w["model.layers.1.mlp.experts.2.up_proj.weight"].astype(ml_dtypes.bfloat16)
    d = write_model(tmp_path / "mixed", c, w, tok_dir)
    with Model(d):
        pass
    with pytest.raises(RuntimeError, match="layer 1's experts"):
        Model(d, "tensor")


def test_errors_leave_the_cache(tmp_path, tok_dir):
    with Model(build(tmp_path, tok_dir, "e8_k2_shared", "f32"), "tensor") as m:
        m.logits(PROMPT)
        bad = np.array([5, 10**6], np.int32)
        assert lib.ingot_model_forward(m.p, bad.ctypes.data, 2, None) != 0
        assert "outside" in lib.ingot_last_error().decode()
        assert lib.ingot_model_n_past(m.p) == len(PROMPT)


@needs_cuda
@pytest.mark.parametrize("name,dt", RUNS, ids=[f"{n}-{d}" for n, d in RUNS])
def test_cuda_matches_raw_path(tmp_path, tok_dir, monkeypatch, name, dt):
    compare(build(tmp_path, tok_dir, name, dt), "cuda", CUDA_TOL, monkeypatch)


@needs_cuda
def test_cuda_f16_and_fused(tmp_path, tok_dir, monkeypatch):
    compare(build(tmp_path, tok_dir, "e8_k2_shared", "f32", fused=True), "cuda", CUDA_TOL)
    c = dict(CASES["e4_k4_all"], torch_dtype="float16")
    w = {k: v.astype(np.float16) for k, v in moe_weights(c, seed=2).items()}
    compare(write_model(tmp_path / "f16", c, w, tok_dir), "cuda", CUDA_TOL, monkeypatch)


@needs_cuda
@pytest.mark.parametrize("name", ["e8_k2_norm", "e8_k2_shared"])
def test_cuda_f8_experts(tmp_path, tok_dir, monkeypatch, name):
    compare(f8_model(tmp_path, tok_dir, name), "cuda", CUDA_TOL, monkeypatch)



@needs_cuda
@pytest.mark.parametrize("name,only", F8_LINEARS)
def test_cuda_f8_linears(tmp_path, tok_dir, monkeypatch, name, only):
    compare(f8_model(tmp_path, tok_dir, name, only), "cuda", CUDA_TOL, monkeypatch)
