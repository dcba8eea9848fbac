"""Parity with llama.cpp (CPU build, through llama-cpp-python from
scripts/requirements-parity.txt) on the embedded SmolLM2 GGUF: the same token
ids from both tokenizers, close last-position logits, and the same greedy
continuation.

Tolerance: llama.cpp quantizes the activations to Q8_1 before its dot products
with the Q4_1 weights (and to Q8_0 for the Q8_0 LM head); ingot's default path
(ingot_ggml_matvec_q8) now does the same, which is what is compared here. The
logits still differ by a few 1e-2 of their scale (see LOGIT_TOL): the rest of
the computation differs (llama.cpp keeps an f16 KV cache, rounds activations
half-to-even in its SIMD quantizer, sums in other orders). Greedy tokens can
only differ where the top two logits are closer than that noise, which the
greedy test checks and reports.
"""
import ctypes
import os

import numpy as np
import pytest

from refs import smollm2_path
from ingot_ctypes import Device, lib
from model_ctypes import forward_logits, tokenize

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama_cpp is not importable (install scripts/requirements-parity.txt)")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
P, I64 = ctypes.c_void_p, ctypes.c_int64
CPU = Device(0, 0)

lib.ingot_chat_template.argtypes = [P, P, ctypes.c_int, ctypes.c_char_p, ctypes.c_bool, P, I64]
lib.ingot_chat_template.restype = I64

VOCAB = 49152
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# Measured max |ingot - llama.cpp| / max |llama.cpp logit| over PROMPTS with the int8
# path: 2.4e-2 .. 4.4e-2 (max abs 0.76..1.03; mean abs 0.13..0.35; correlation
# 0.9986..0.9993) -- no tighter than the exact float path (INGOT_EXACT_MATVEC=1):
# 1.9e-2 .. 4.6e-2 (max abs 0.62..1.15, mean abs 0.11..0.36). The greedy runs agree
# longer with the int8 path (see below). Tolerance with ~2x margin:
LOGIT_TOL = 0.1
# Two logits closer than this (logit units) are a near-tie that Q8_1 noise may swap
# (the measured mean abs noise is up to 0.36; swaps were seen at margins up to 0.35).
NEAR_TIE = 0.5
N_GREEDY = 32

PROMPTS = {
    "plain": (False, "The capital of France is"),
    "plain_code": (False, "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    "plain_unicode": (False, "Café, naïve façade — 東京 and emoji 🙂 cost 3.50€?"),
    "chat": (True, "What is the capital of France?"),
    "chat_story": (True, "Write a two-sentence story about a robot who learns to paint."),
}




@pytest.fixture(scope="module")
def path():
    return smollm2_path()


@pytest.fixture(scope="module")
def model(path):
    m = lib.ingot_model_load(path.encode(), CPU)
    assert m, lib.ingot_last_error().decode()
    yield m
    lib.ingot_model_free(m)


@pytest.fixture(scope="module")
def llm(path):
    return llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=2, logits_all=True,
                           verbose=False, seed=0)


def chat_text(user):
    roles = (ctypes.c_char_p * 1)(b"user")
    contents = (ctypes.c_char_p * 1)(user.encode())
    buf = ctypes.create_string_buffer(4096)
    n = lib.ingot_chat_template(roles, contents, 1, SYSTEM.encode(), True, buf, len(buf))
    assert 0 < n < len(buf)
    return buf.raw[:n].decode()


def prompt_text(key):
    chat, text = PROMPTS[key]
    return (chat_text(text) if chat else text), chat


def ingot_forward(m, ids):
    return forward_logits(m, ids, VOCAB)


def llama_last_logits(llm, ids):
    llm.reset()
    llm.eval([int(t) for t in ids])
    return np.array(llm.scores[llm.n_tokens - 1], np.float32)


def top2_margin(logits):
    a = np.sort(logits)[-2:]
    return float(a[1] - a[0])


@pytest.mark.parametrize("key", list(PROMPTS))
def test_tokenizer_ids_match(model, llm, key):
    text, special = prompt_text(key)
    ours = tokenize(model, text, special)
    theirs = llm.tokenize(text.encode(), add_bos=False, special=special)
    assert ours.tolist() == list(theirs)
    if special:  # the chat markers became single special tokens
        assert ours[0] == llm.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]


@pytest.mark.parametrize("key", list(PROMPTS))
def test_last_logits_close(model, llm, key):
    text, special = prompt_text(key)
    ids = tokenize(model, text, special)
    lib.ingot_model_reset(model)
    got = ingot_forward(model, ids)
    want = llama_last_logits(llm, ids)
    diff = np.abs(got - want)
    rel = float(diff.max() / np.abs(want).max())
    print(f"\n{key}: {len(ids)} tokens, max abs {diff.max():.4f}, rel {rel:.2e}, "
          f"mean abs {diff.mean():.4f}")
    corr = float(np.corrcoef(got, want)[0, 1])
    print(f"  correlation {corr:.6f}")
    assert rel < LOGIT_TOL
    assert corr > 0.995  # measured 0.9988 .. 0.9993
    # the winner agrees unless the race is inside the noise
    if top2_margin(want) > NEAR_TIE:
        assert int(got.argmax()) == int(want.argmax())


def greedy_both(m, llm, ids, n):
    """Greedy decoding run in lockstep: at each step both engines' argmax and
    top-2 margin are recorded, then both are fed llama.cpp's token (so one
    near-tie swap does not derail the rest of the comparison)."""
    lib.ingot_model_reset(m)
    ours, theirs = ingot_forward(m, ids), llama_last_logits(llm, ids)
    steps = []
    for _ in range(n):
        a, b = int(ours.argmax()), int(theirs.argmax())
        steps.append((a, b, top2_margin(ours), top2_margin(theirs)))
        ours = ingot_forward(m, [b])
        llm.eval([b])
        theirs = np.array(llm.scores[llm.n_tokens - 1], np.float32)
    return steps


@pytest.mark.parametrize("key", ["plain", "plain_code", "chat", "chat_story"])
def test_greedy_continuation_identical(model, llm, key):
    """32 greedy tokens (EOS not special-cased). The free-running continuations
    are identical up to the first step where the top-2 logits are within the
    Q8_1 noise (NEAR_TIE, in both engines); in lockstep (both fed llama.cpp's
    token) every step agrees except such near-ties. Measured with the int8
    path: 'plain', 'plain_code', 'chat_story' identical for all 32; 'chat'
    parts at step 19 (margins 0.02 / 0.19). (The exact float path parted at
    5, 12 and 0 for 'plain', 'plain_code' and 'chat'.)"""
    text, special = prompt_text(key)
    ids = tokenize(model, text, special)
    steps = greedy_both(model, llm, ids, N_GREEDY)
    ties = [(i, a, b, ma, mb) for i, (a, b, ma, mb) in enumerate(steps) if a != b]
    first = ties[0][0] if ties else N_GREEDY
    print(f"\n{key}: first {first} of {N_GREEDY} greedy tokens identical; lockstep "
          f"disagreements (step, ingot, llama.cpp, margin ingot, margin llama.cpp): "
          + ", ".join(f"({i}, {a}, {b}, {ma:.3f}, {mb:.3f})" for i, a, b, ma, mb in ties))
    for i, a, b, ma, mb in ties:
        assert min(ma, mb) < NEAR_TIE and max(ma, mb) < 2 * NEAR_TIE, \
            f"step {i}: ingot {a} vs llama.cpp {b} with top-2 margins {ma:.3f} / {mb:.3f}"
    assert len(ties) <= N_GREEDY // 8, f"{len(ties)} near-tie disagreements in {N_GREEDY}"
