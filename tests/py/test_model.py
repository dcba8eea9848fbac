"""The llama transformer (src/model/llama.c), sampling (sample.c), the
generation loop and the `ingot generate` CLI.

Oracle: a numpy forward of the same llama written here, on the weights
dequantised by gguf.quants (llama.cpp's reference dequantisers), with RoPE on
adjacent pairs (llama.cpp's converter permutes Q/K so GGUF llama files use
ggml's "normal" rope). Error cases use tiny GGUF files made with gguf's writer.
"""
import ctypes
import os
import subprocess

import numpy as np
import pytest

from refs import smollm2_path
from ingot_ctypes import Device, lib
from model_ctypes import TOKEN_FN, GenOpts, GenStats, SampleOpts, tokenize  # noqa: F401

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CLI = os.path.join(ROOT, "build", "bin", "ingot")
P, I64, I32, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float

gguf = pytest.importorskip("gguf")


CPU = Device(0, 0)
PROMPT = "The capital of France is"  # a short prompt (~5-8 tokens)




@pytest.fixture(scope="module")
def path():
    return smollm2_path()


@pytest.fixture(scope="module")
def model(path):
    # The tight numpy comparisons need float activations (ingot_ggml_matvec),
    # not the default int8 ones; the switch is read when the model loads.
    old = os.environ.get("INGOT_EXACT_MATVEC")
    os.environ["INGOT_EXACT_MATVEC"] = "1"
    try:
        m = lib.ingot_model_load(path.encode(), CPU)
    finally:
        if old is None:
            del os.environ["INGOT_EXACT_MATVEC"]
        else:
            os.environ["INGOT_EXACT_MATVEC"] = old
    assert m, lib.ingot_last_error().decode()
    yield m
    lib.ingot_model_free(m)


def forward(m, ids, logits=True):
    ids = np.ascontiguousarray(ids, np.int32)
    out = np.zeros(49152, np.float32)
    st = lib.ingot_model_forward(m, ids.ctypes.data, len(ids), out.ctypes.data if logits else None)
    return st, out


# ---- the numpy reference ----

class Ref:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
                  for t in r.tensors}

        def val(k):
            f = r.fields[k]
            return f.parts[f.data[0]][0]
        self.L = int(val("llama.block_count"))
        self.nh = int(val("llama.attention.head_count"))
        self.nkv = int(val("llama.attention.head_count_kv"))
        self.dim = int(val("llama.embedding_length"))
        self.hd = self.dim // self.nh
        self.eps = float(val("llama.attention.layer_norm_rms_epsilon"))
        self.base = float(val("llama.rope.freq_base"))

    def rms(self, x, w):
        x = x.astype(np.float64)
        return (x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w).astype(np.float32)

    def rope(self, x, pos):  # x [T, heads, hd]; adjacent pairs
        inv = self.base ** (-np.arange(0, self.hd, 2) / self.hd)
        a = pos[:, None] * inv[None, :]
        c, s = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
        x0, x1 = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def logits(self, ids):
        w, T = self.w, len(ids)
        x = w["token_embd.weight"][ids]
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        for l in range(self.L):
            p = f"blk.{l}."
            h = self.rms(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(T, self.nh, self.hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(T, self.nkv, self.hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(T, self.nkv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            rep = self.nh // self.nkv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, v).reshape(T, self.dim)
            x = x + o @ w[p + "attn_output.weight"].T
            h = self.rms(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        h = self.rms(x[-1:], w["output_norm.weight"])
        return (h @ w["token_embd.weight"].T)[0]


@pytest.fixture(scope="module")
def ref(path):
    return Ref(path)


def close(a, b, tol=1e-3):
    """max |a - b| relative to the logits' scale (max |b|)."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_logits_match_numpy(model, ref):
    ids = tokenize(model, PROMPT)
    assert 4 <= len(ids) <= 12
    lib.ingot_model_reset(model)
    st, got = forward(model, ids)
    assert st == 0, lib.ingot_last_error().decode()
    want = ref.logits(ids)
    assert close(got, want) < 1e-3
    assert int(got.argmax()) == int(want.argmax())
    assert lib.ingot_model_n_past(model) == len(ids)


def test_long_context_logits_match_numpy(model, ref):
    """Attention over several key blocks (attn_cpu.c merges them)
    and two prompt chunks, then single-token steps past the blocks' edges."""
    ids = tokenize(model, (PROMPT + " Paris. The capital of Italy is Rome. ") * 12)
    ids = ids[:150]
    assert len(ids) == 150
    lib.ingot_model_reset(model)
    st, got = forward(model, ids[:129])
    assert st == 0, lib.ingot_last_error().decode()
    assert close(got, ref.logits(ids[:129])) < 1e-3
    for n in (130, 150):
        for t in ids[lib.ingot_model_n_past(model):n - 1]:
            assert forward(model, [t], logits=False)[0] == 0
        _, got = forward(model, ids[n - 1:n])
        want = ref.logits(ids[:n])
        assert close(got, want) < 1e-3
        assert int(got.argmax()) == int(want.argmax())


def test_chunked_and_incremental_agree(model):
    ids = tokenize(model, PROMPT + " Paris, and the capital of Germany is Berlin.")
    lib.ingot_model_reset(model)
    _, full = forward(model, ids)
    lib.ingot_model_reset(model)
    assert forward(model, ids[:3], logits=False)[0] == 0
    for t in ids[3:-1]:
        assert forward(model, [t], logits=False)[0] == 0
    _, inc = forward(model, ids[-1:])
    assert close(inc, full) < 1e-4
    # truncate + re-feed gives the same logits again
    assert lib.ingot_model_truncate(model, len(ids) - 2) == 0
    _, again = forward(model, ids[-2:])
    assert close(again, full) < 1e-4
    # prompts longer than one chunk (64 tokens)
    long_ids = np.tile(ids, 80 // len(ids) + 1)[:80]
    lib.ingot_model_reset(model)
    _, a = forward(model, long_ids)
    lib.ingot_model_reset(model)
    forward(model, long_ids[:50], logits=False)
    _, b = forward(model, long_ids[50:])
    assert close(a, b) < 1e-4


def test_greedy_continuation_matches_numpy(model, ref):
    ids = tokenize(model, PROMPT)
    want = list(ids)
    for _ in range(16):
        want.append(int(ref.logits(np.array(want)).argmax()))
    want = want[len(ids):]

    lib.ingot_model_reset(model)
    opts = lib.ingot_generate_defaults()
    opts.max_tokens = 16
    opts.stop_at_eos = False
    opts.sample.temperature = 0
    pieces = []
    cb = TOKEN_FN(lambda tok, s, n, u: pieces.append(ctypes.string_at(s, n)) or 0)
    out = np.zeros(16, np.int32)
    nout, stats = I64(), GenStats()
    st = lib.ingot_generate(model, ids.ctypes.data, len(ids), ctypes.byref(opts), cb, None,
                            out.ctypes.data, 16, ctypes.byref(nout), ctypes.byref(stats))
    assert st == 0, lib.ingot_last_error().decode()
    assert nout.value == 16 and out.tolist() == want
    assert len(pieces) == 16
    assert stats.prompt_tokens == len(ids) and stats.generated_tokens == 16
    assert stats.prompt_tps > 0 and stats.decode_tps > 0
    # the stop token is the only one not fed back: 16 generated, the last unfed
    assert lib.ingot_model_n_past(model) == len(ids) + 15


def test_forward_errors_keep_cache(model):
    lib.ingot_model_reset(model)
    ids = tokenize(model, PROMPT)
    forward(model, ids, logits=False)
    n = lib.ingot_model_n_past(model)
    assert forward(model, [1, 49152])[0] != 0
    assert "outside" in lib.ingot_last_error().decode()
    assert forward(model, [-1])[0] != 0
    assert forward(model, np.ones(3000, np.int32))[0] != 0  # past the 2048 context
    assert "context" in lib.ingot_last_error().decode()
    assert lib.ingot_model_n_past(model) == n
    assert lib.ingot_model_truncate(model, n + 1) != 0


# ---- sampling ----

def sample(logits, hist=(), step=0, **kw):
    o = lib.ingot_sample_defaults()
    for k, v in kw.items():
        setattr(o, k, v)
    lg = np.ascontiguousarray(logits, np.float32).copy()
    h = np.ascontiguousarray(hist, np.int32)
    return lib.ingot_sample(ctypes.byref(o), lg.ctypes.data, len(lg), h.ctypes.data, len(h), step), lg


def test_sample_greedy_and_determinism():
    rng = np.random.default_rng(0)
    lg = rng.standard_normal(1000).astype(np.float32)
    assert sample(lg)[0] == int(lg.argmax())
    assert sample(lg, temperature=1.0, top_k=1)[0] == int(lg.argmax())
    a = [sample(lg, step=s, temperature=1.0, seed=7)[0] for s in range(20)]
    b = [sample(lg, step=s, temperature=1.0, seed=7)[0] for s in range(20)]
    c = [sample(lg, step=s, temperature=1.0, seed=8)[0] for s in range(20)]
    assert a == b and a != c
    top5 = set(np.argsort(-lg)[:5].tolist())
    assert all(sample(lg, step=s, temperature=2.0, top_k=5)[0] in top5 for s in range(50))


def test_sample_distribution_and_top_p():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    lg = np.log(p)
    n = 4000
    got = np.bincount([sample(lg, step=s, temperature=1.0, top_k=0, top_p=1.0, seed=3)[0]
                       for s in range(n)], minlength=4) / n
    np.testing.assert_allclose(got, p, atol=0.03)
    # top_p 0.7: the nucleus is {0, 1} (0.5 + 0.3 >= 0.7), renormalised to 5/8, 3/8
    got = np.bincount([sample(lg, step=s, temperature=1.0, top_k=0, top_p=0.7, seed=3)[0]
                       for s in range(n)], minlength=4) / n
    assert got[2] == 0 and got[3] == 0
    np.testing.assert_allclose(got[:2], [0.625, 0.375], atol=0.03)


def test_sample_repeat_penalty():
    lg = np.array([2.0, 1.9, -1.0, 0.5], np.float32)
    tok, out = sample(lg, hist=[0, 2, 0], repeat_penalty=2.0)
    np.testing.assert_array_equal(out, np.float32([1.0, 1.9, -2.0, 0.5]))  # each token penalised once
    assert tok == 1
    # outside the window: no penalty
    tok, out = sample(lg, hist=[0, 3, 3], repeat_penalty=2.0, repeat_last_n=2)
    assert out[0] == 2.0 and out[3] == 0.25 and tok == 0


# ---- load errors: tiny GGUF files ----

def tiny_gguf(tmp_path, drop=None, bad=None, arch="llama"):
    dim, ffn, L, vocab = 32, 64, 2, 50
    w = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), arch)
    w.add_block_count(L)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(128)
    w.add_layer_norm_rms_eps(1e-5)
    shapes = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    for l in range(L):
        p = f"blk.{l}."
        shapes.update({p + "attn_norm.weight": (dim,), p + "ffn_norm.weight": (dim,),
                       p + "attn_q.weight": (dim, dim), p + "attn_k.weight": (16, dim),
                       p + "attn_v.weight": (16, dim), p + "attn_output.weight": (dim, dim),
                       p + "ffn_gate.weight": (ffn, dim), p + "ffn_up.weight": (ffn, dim),
                       p + "ffn_down.weight": (dim, ffn)})
    for name, shape in shapes.items():
        if name == drop:
            continue
        if name == bad:
            shape = (shape[0] + 1,) + shape[1:]
        w.add_tensor(name, np.zeros(shape, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / "tiny.gguf")


def load_error(path):
    m = lib.ingot_model_load(path.encode(), CPU)
    if m:
        lib.ingot_model_free(m)
        return None
    return lib.ingot_last_error().decode()


def test_load_errors(tmp_path, path):
    assert "blk.1.ffn_down.weight" in load_error(tiny_gguf(tmp_path, drop="blk.1.ffn_down.weight"))
    e = load_error(tiny_gguf(tmp_path, bad="blk.0.attn_k.weight"))
    assert "blk.0.attn_k.weight" in e and "shape" in e
    e = load_error(tiny_gguf(tmp_path, arch="gpt-neox"))
    assert "gpt-neox" in e and "not supported" in e
    assert load_error(str(tmp_path / "missing.gguf"))
    with open(path, "rb") as f:
        head = f.read(5_000_000)
    (tmp_path / "trunc.gguf").write_bytes(head)
    assert load_error(str(tmp_path / "trunc.gguf"))
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 10)
    assert load_error(str(tmp_path / "junk.gguf"))
    m = lib.ingot_model_load(path.encode(), Device(1, 99))  # no such device
    assert not m and "cuda:99" in lib.ingot_last_error().decode()


# ---- the CLI ----

def cli(*args, stdin=None):
    if not os.path.exists(CLI):
        pytest.skip("build/bin/ingot not built")
    return subprocess.run([CLI, *args], capture_output=True, text=True, input=stdin, timeout=300)


def test_cli_generate(path):
    r = cli("generate", "-m", path, "-p", "What is the capital of France? Answer in one sentence.",
            "-n", "12", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("prompt: ") and "tok/s; decode: " in last
    r = cli("generate", "-m", path, "-p", "What is the capital of France? Answer in one sentence.",
            "-n", "12", "--device", "cpu", "--exact")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


def test_cli_chat_keeps_conversation(path):
    r = cli("chat", "-m", path, "-n", "16", stdin="What is 2+2?\n\nAnd times 10?\n")
    assert r.returncode == 0, r.stderr
    stats = [l.split() for l in r.stderr.splitlines() if l.startswith("prompt: ")]
    assert len(stats) == 2 and len(r.stdout.strip().splitlines()) >= 2
    # the second turn feeds only what is new: the cached conversation is reused
    first_prompt, first_decode, second_prompt = int(stats[0][1]), int(stats[0][6]), int(stats[1][1])
    assert 0 < second_prompt < first_prompt + first_decode
    assert second_prompt < 30


def test_cli_errors(tmp_path, path):
    for sub in ("generate", "chat"):
        r = cli(sub, "--help")
        assert r.returncode == 0 and "usage: ingot " + sub in r.stdout
    r = cli("generate", "-m", str(tmp_path / "nope.gguf"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "t.gguf").write_bytes(open(path, "rb").read(1_000_000))
    r = cli("generate", "-m", str(tmp_path / "t.gguf"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    r = cli("generate", "--temp", "abc")
    assert r.returncode == 2
