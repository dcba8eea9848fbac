"""`ingot quantize` / ingot_quantize_fp8 (src/model/quantize_fp8.c) and the
safetensors writer (src/model/safetensors_write.c).

Oracle: numpy + ml_dtypes quantizing the same weights (scale = amax(row) /
448 in f32, x / scale clipped to +-448, cast to float8_e4m3fn, which rounds
to nearest even): the written file must hold exactly those bytes. The
quantized model must then load and match the numpy forward of its
dequantised weights, and stay close to the original model."""
import ctypes
import json
import os
import resource
import signal
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest

from cuda_diff import needs_cuda
from ingot_ctypes import lib
from st_util import write_st
from test_model_hf import (PROMPT, Model, config, random_weights, ref_logits, rel, tok_dir,  # noqa: F401
                           write_model)
from test_model_moe import moe_config, moe_mlp, moe_weights


class QOpts(ctypes.Structure):
    _fields_ = [("skip_lm_head", ctypes.c_bool), ("progress", ctypes.c_void_p),
                ("progress_user", ctypes.c_void_p)]


class QStats(ctypes.Structure):
    _fields_ = [("tensors", ctypes.c_int64), ("quantized", ctypes.c_int64),
                ("bytes_in", ctypes.c_uint64), ("bytes_out", ctypes.c_uint64)]


lib.ingot_quantize_fp8.restype = ctypes.c_int
lib.ingot_quantize_fp8.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QOpts),
                                   ctypes.POINTER(QStats)]

CLI = os.path.join(os.path.dirname(os.path.abspath(lib._name)), "bin", "ingot")
NP = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
      "F8_E4M3": ml_dtypes.float8_e4m3fn, "F64": np.float64, "I32": np.int32}


def read_st(path):
    """{name: array}, metadata: an independent reader of the written file."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    data, out, end = raw[8 + n:], {}, 0
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], NP[v["dtype"]]).reshape(v["shape"])
        end = max(end, e)
    assert end == len(data)
    return out, meta


def quantize(src, dst, skip_head=False):
    st = QStats()
    lib.ingot_clear_error()
    rc = lib.ingot_quantize_fp8(str(src).encode(), str(dst).encode(),
                                ctypes.byref(QOpts(skip_head, None, None)), ctypes.byref(st))
    if rc:
        raise RuntimeError(lib.ingot_last_error().decode())
    return st


def np_quant(w):
    w = np.asarray(w, np.float32)
    amax = np.abs(w).max(1)
    scale = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
    q = np.clip(w / scale[:, None], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


def quantizable(name, a, skip_head):
    return (a.ndim == 2 and name.endswith(".weight") and "embed_tokens" not in name
            and not name.endswith((".mlp.gate.weight", ".shared_expert_gate.weight"))  # routers
            and not (skip_head and name == "lm_head.weight"))


def check_file(src_w, out_dir, skip_head):
    got, meta = read_st(out_dir / "model.safetensors")
    assert meta == {"format": "pt"}
    nq = 0
    for name, a in src_w.items():
        if quantizable(name, a, skip_head):
            nq += 1
            q, s = np_quant(a)
            assert got[name].dtype == ml_dtypes.float8_e4m3fn
            np.testing.assert_array_equal(got[name + "_scale"], s)
            np.testing.assert_array_equal(got[name].view(np.uint8), q.view(np.uint8))
            assert not np.isnan(got[name].astype(np.float32)).any()  # saturated, no NaN codes
        else:
            assert got[name].dtype == a.dtype
            np.testing.assert_array_equal(got[name].view(np.uint8), a.view(np.uint8))
    assert len(got) == len(src_w) + nq
    return got, nq


def dequant(got):
    return {k: (v.astype(np.float32) * got[k + "_scale"][:, None] if k + "_scale" in got
                else v.astype(np.float32)) for k, v in got.items() if not k.endswith("_scale")}


@pytest.mark.parametrize("dt", ["bf16", "f32", "f16"])
@pytest.mark.parametrize("skip_head", [False, True])
def test_dense_qwen3(tmp_path, tok_dir, dt, skip_head):
    c = config("qwen3", tie_word_embeddings=False)
    npdt = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16}[dt]
    w = {k: v.astype(npdt) for k, v in random_weights(c, seed=4).items()}
    # a row whose max maps to exactly 448, a zero row, a tiny row
    w["model.layers.0.mlp.up_proj.weight"][0, :3] = [1.0, -0.99999, 0.5]
    w["model.layers.0.mlp.up_proj.weight"][1] = 0
    w["model.layers.0.mlp.up_proj.weight"][2] *= npdt(1e-3)
    src = write_model(tmp_path / "src", c, w, tok_dir)
    st = quantize(src, tmp_path / "q", skip_head)
    got, nq = check_file(w, tmp_path / "q", skip_head)
    assert (st.tensors, st.quantized) == (len(w), nq)
    assert nq == 7 * c["num_hidden_layers"] + (0 if skip_head else 1)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "q" / f).read_bytes() == (src / f).read_bytes()
    with Model(tmp_path / "q") as m:
        got_l = m.logits(PROMPT)
    want = ref_logits(c, dequant(got), PROMPT)
    assert rel(got_l, want) < 1e-4
    # the tensor forward reads the f8 linears (q|k|v, o, gate|up, down, head) as
    # f8 rows with their scales (ingot_f8matmul_*): the same numbers
    with Model(tmp_path / "q", "tensor") as m:
        assert rel(m.logits(PROMPT), want) < 1e-4
    # the quantization error itself stays small next to the unquantized model
    with Model(src) as m:
        assert rel(got_l, m.logits(PROMPT)) < 0.1


@needs_cuda
@pytest.mark.parametrize("skip_head", [False, True])
def test_dense_qwen3_cuda(tmp_path, tok_dir, skip_head):
    """The quantized model on CUDA (f8 linears through the f8 GEMV, the head
    too unless skipped): within 1e-3 of the largest |logit| of the numpy
    forward of its dequantised weights (f32 sums in other orders)."""
    c = config("qwen3", tie_word_embeddings=False)
    w = {k: v.astype(ml_dtypes.bfloat16) for k, v in random_weights(c, seed=4).items()}
    quantize(write_model(tmp_path / "src", c, w, tok_dir), tmp_path / "q", skip_head)
    got, _ = check_file(w, tmp_path / "q", skip_head)
    with Model(tmp_path / "q", "cuda") as m:
        assert rel(m.logits(PROMPT), ref_logits(c, dequant(got), PROMPT)) < 1e-3


def test_moe_experts_quantized_router_kept(tmp_path, tok_dir):
    c = moe_config(8, 2, True, mlp_only_layers=[1], shared_expert_intermediate_size=48)
    w = {k: v.astype(ml_dtypes.bfloat16) for k, v in moe_weights(c, seed=2).items()}
    src = write_model(tmp_path / "src", c, w, tok_dir, shards=3)  # sharded in, one file out
    quantize(src, tmp_path / "q")
    got, _ = check_file(w, tmp_path / "q", False)
    assert got["model.layers.0.mlp.gate.weight"].dtype == ml_dtypes.bfloat16
    assert got["model.layers.0.mlp.shared_expert_gate.weight"].dtype == ml_dtypes.bfloat16
    assert got["model.layers.0.mlp.experts.7.down_proj.weight"].dtype == ml_dtypes.float8_e4m3fn
    with Model(tmp_path / "q") as m:
        assert rel(m.logits(PROMPT), ref_logits(c, dequant(got), PROMPT, moe_mlp)) < 1e-4


def test_cli(tmp_path, tok_dir):
    c = config("llama")
    w = {k: v.astype(ml_dtypes.bfloat16) for k, v in random_weights(c, seed=6).items()}
    src = write_model(tmp_path / "src", c, w, tok_dir)
    r = subprocess.run([CLI, "quantize", str(src), str(tmp_path / "q"), "--skip-lm-head"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "quantized to F8_E4M3" in r.stdout
    check_file(w, tmp_path / "q", True)
    r = subprocess.run([CLI, "quantize", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: ingot quantize IN_DIR OUT_DIR" in r.stdout
    r = subprocess.run([CLI, "quantize", str(src)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run([CLI, "quantize", str(src), str(tmp_path / "x"), "--bogus"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unexpected argument '--bogus'" in r.stderr
    r = subprocess.run([CLI, "quantize", str(tmp_path / "nope"), str(tmp_path / "y")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "nope" in r.stderr


def test_disk_full_leaves_no_file(tmp_path, tok_dir):
    c = config("llama")
    src = write_model(tmp_path / "src", c, random_weights(c, seed=8), tok_dir)

    def limit():  # a file size limit stands in for a full disk (EFBIG instead of ENOSPC)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    r = subprocess.run([CLI, "quantize", str(src), str(tmp_path / "q")], capture_output=True,
                       text=True, preexec_fn=limit)
    assert r.returncode == 1 and "write failed: File too large" in r.stderr
    assert not (tmp_path / "q" / "model.safetensors").exists()
    assert not (tmp_path / "q" / "model.safetensors.tmp").exists()


def test_errors(tmp_path, tok_dir):
    c = config("qwen3")
    w = random_weights(c, seed=1)
    with pytest.raises(RuntimeError, match="no model.safetensors"):
        quantize(tmp_path, tmp_path / "o0")
    src = write_model(tmp_path / "src", c, w, tok_dir)
    with pytest.raises(RuntimeError, match="output directory is the input directory"):
        quantize(src, src)
    bad = dict(w)
    bad["model.layers.0.mlp.up_proj.weight"] = w["model.layers.0.mlp.up_proj.weight"].astype(np.float64)
    write_model(tmp_path / "f64", c, bad, tok_dir)
    with pytest.raises(RuntimeError, match=r"'model.layers.0.mlp.up_proj.weight' has dtype F64"):
        quantize(tmp_path / "f64", tmp_path / "o1")
    bad["model.layers.0.mlp.up_proj.weight"] = w["model.layers.0.mlp.up_proj.weight"].copy()
    bad["model.layers.0.mlp.up_proj.weight"][5, 3] = np.inf
    write_model(tmp_path / "inf", c, bad, tok_dir)
    with pytest.raises(RuntimeError, match=r"up_proj.weight' row 5 holds NaN or inf"):
        quantize(tmp_path / "inf", tmp_path / "o2")
    assert not (tmp_path / "o2" / "model.safetensors").exists()
    (tmp_path / "o3").mkdir()
    (tmp_path / "o3" / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(RuntimeError, match="holds a model.safetensors.index.json"):
        quantize(src, tmp_path / "o3")


def test_writer_escapes_names(tmp_path, tok_dir):
    """Names with quotes and backslashes survive a copy through the writer."""
    d = tmp_path / "src"
    d.mkdir()
    odd = {'a"b\\c.bias': np.arange(5, dtype=np.float32), "x.y": np.ones((2, 3), np.int32)}
    write_st(d / "model.safetensors", odd)
    quantize(d, tmp_path / "q")
    got, _ = read_st(tmp_path / "q" / "model.safetensors")
    assert set(got) == set(odd)
    for k in odd:
        np.testing.assert_array_equal(got[k], odd[k])
