"""Byte-level BPE tokenizer vs the HF `tokenizers` package (the oracle).

The reference is built from the SmolLM2 GGUF's own vocab and merges:
models.BPE + pre_tokenizers.Sequence([Digits(individual_digits=True),
ByteLevel(use_regex=True)]) -- llama.cpp maps tokenizer.ggml.pre "smollm" to
the StarCoder pre-tokenizer ("\\p{N}" split, then the GPT-2 regex), which is
what SmolLM's tokenizer.json has -- plus the 17 CONTROL tokens as special
added tokens. It is also saved as tokenizer.json to test the JSON loader, and
variants with the Llama-3 / Qwen2 Split regexes test the other patterns.
Ids must match exactly; decode(encode(x)) == x for every line.
"""
import ctypes
import json
import os
import random
import time

import numpy as np
import pytest

from refs import smollm2_path
from ingot_ctypes import lib

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
P, I, I64, B = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_bool
for name, res, args in [
    ("ingot_gguf_open", P, [ctypes.c_char_p]),
    ("ingot_gguf_close", None, [P]),
    ("ingot_tokenizer_from_gguf", P, [P]),
    ("ingot_tokenizer_from_json", P, [ctypes.c_char_p]),
    ("ingot_tokenizer_free", None, [P]),
    ("ingot_tokenizer_vocab_size", I64, [P]),
    ("ingot_tokenizer_bos", ctypes.c_int32, [P]),
    ("ingot_tokenizer_eos", ctypes.c_int32, [P]),
    ("ingot_tokenizer_is_special", B, [P, ctypes.c_int32]),
    ("ingot_tokenize", I64, [P, ctypes.c_char_p, ctypes.c_size_t, B, P, I64]),
    ("ingot_detokenize", I64, [P, P, I64, B, P, I64]),
    ("ingot_chat_template", I64, [P, P, I, ctypes.c_char_p, B, P, I64]),
]:
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = args

RE_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
RE_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
RE_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")




@pytest.fixture(scope="module")
def meta():
    r = gguf.GGUFReader(smollm2_path())
    f = r.fields
    return {
        "path": r.data.filename if hasattr(r.data, "filename") else smollm2_path(),
        "tokens": f["tokenizer.ggml.tokens"].contents(),
        "types": f["tokenizer.ggml.token_type"].contents(),
        "merges": f["tokenizer.ggml.merges"].contents(),
        "template": f["tokenizer.chat_template"].contents(),
    }


def hf_tokenizer(meta, pre, ignore_merges=False):
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(meta["tokens"], meta["types"]) if ty == 3]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tk


def smollm_pre():
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                             use_regex=True)])


def split_pre(regex):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


class Tok:
    def __init__(self, ptr):
        assert ptr, lib.ingot_last_error().decode()
        self.p = ptr

    def close(self):
        if self.p:
            lib.ingot_tokenizer_free(self.p)
            self.p = None

    def encode(self, text, parse_special=True):
        b = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        buf = (ctypes.c_int32 * 64)()
        n = lib.ingot_tokenize(self.p, b, len(b), parse_special, buf, 64)
        assert n >= 0, lib.ingot_last_error().decode()
        if n > 64:
            buf = (ctypes.c_int32 * n)()
            assert lib.ingot_tokenize(self.p, b, len(b), parse_special, buf, n) == n
        return list(buf[:n])

    def decode(self, ids, skip_special=False):
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        out = ctypes.create_string_buffer(16)
        n = lib.ingot_detokenize(self.p, arr, len(ids), skip_special, out, 16)
        if n < 0:
            raise ValueError(lib.ingot_last_error().decode())
        if n > 16:
            out = ctypes.create_string_buffer(n)
            assert lib.ingot_detokenize(self.p, arr, len(ids), skip_special, out, n) == n
        return out.raw[:n]


@pytest.fixture(scope="module")
def gguf_tok(meta):
    g = lib.ingot_gguf_open(meta["path"].encode())
    assert g, lib.ingot_last_error().decode()
    t = Tok(lib.ingot_tokenizer_from_gguf(g))
    lib.ingot_gguf_close(g)  # the tokenizer keeps its own copies
    yield t
    t.close()


@pytest.fixture(scope="module")
def ref(meta):
    return hf_tokenizer(meta, smollm_pre())


@pytest.fixture(scope="module")
def json_tok(ref, tmp_path_factory):
    d = tmp_path_factory.mktemp("smollm")
    ref.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}}))
    t = Tok(lib.ingot_tokenizer_from_json(str(d / "tokenizer.json").encode()))
    yield t
    t.close()


def corpus(n=3000, seed=1234):
    rng = random.Random(seed)
    words = ("the quick brown fox jumps over lazy dog I'M don't You'RE we'll they've she'd "
             "it's IT'S Hello, world! naïve café résumé Zürich façade coöperate " +
             "привет мир Москва ёлка 你好 世界 中文分词 日本語のテキスト 한국어 문장 "
             "مرحبا بالعالم שלום עולם ελληνικά Γειά σου हिन्दी ภาษาไทย").split(" ")
    emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🤖", "e\u0301", "a\u0308\u0323", "\u200b"]
    code = ["def f(x):\n    return x + 1\n", "\tif (a && b) {\n\t\tc = d[i];\n\t}\n",
            "for i in range(10):\n        print(i)", "x = {'a': [1, 2, 3]}  # comment",
            "#include <stdio.h>\nint main(void) { return 0; }", "  \t  mixed \t indent",
            "<html><body class=\"x\">&amp;</body></html>", "SELECT * FROM t WHERE id=42;"]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<|im_start",
                "<|im_end|><|im_start|>", "<jupyter_code>"]
    lines = ["", " ", "  ", "\n", "\n\n", "\t", " \n ", "a", "'s", "I'M", "don't", "DON'T",
             "12345678901234567890", "3.14159 2.71828 1,000,000", "0x7fffFFFF", "    ",
             "line1\r\nline2\r\n", "ab  cd   ef\n\n\ngh", "!!!???...", "\u00a0\u2003x", "x\u3000y"]
    for i in range(n):
        k = rng.randrange(9)
        if k == 0:
            line = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 20)))
        elif k == 1:
            line = rng.choice(code)
        elif k == 2:
            line = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 60)))
            line = rng.choice(["", "x", " ", "v"]) + line + rng.choice(["", ".5", " apples", "%"])
        elif k == 3:
            line = "".join(rng.choice(emoji + words[:8]) + rng.choice(["", " ", "  "])
                           for _ in range(rng.randrange(1, 8)))
        elif k == 4:
            line = "".join(rng.choice([" ", "  ", "\n", "\t", "\r\n", "x", "Y", ".", "\n\n  "])
                           for _ in range(rng.randrange(1, 25)))
        elif k == 5:
            parts = [rng.choice(words + specials) for _ in range(rng.randrange(1, 10))]
            line = rng.choice(["", " "]).join(parts)
        elif k == 6:
            line = "".join(chr(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xA0, 0x800),
                                           rng.randrange(0x800, 0xD800),
                                           rng.randrange(0xE000, 0xFFFE),
                                           rng.randrange(0x10000, 0x20000)]))
                           for _ in range(rng.randrange(1, 30)))
        elif k == 7:
            w = rng.choice(words)
            line = rng.choice([w.upper(), w.capitalize(), w]) + rng.choice(
                ["'s", "'S", "'ll", "'LL", "'Re", "'ve", "'d", "'m", "'t", " 's", "''"])
        else:
            line = rng.choice(words) * rng.randrange(1, 40)
        lines.append(line)
    return lines


LINES = corpus()


def check_against(tok, ref, lines, parse_special=True):
    ref.encode_special_tokens = not parse_special
    try:
        expect = [e.ids for e in ref.encode_batch(lines, add_special_tokens=False)]
    finally:
        ref.encode_special_tokens = False
    bad = [(l, tok.encode(l, parse_special), e) for l, e in zip(lines, expect)
           if tok.encode(l, parse_special) != e]
    assert not bad, f"{len(bad)} mismatches, first: {bad[0]!r}"


def test_metadata(gguf_tok, json_tok, meta):
    for t in (gguf_tok, json_tok):
        assert lib.ingot_tokenizer_vocab_size(t.p) == 49152
        assert lib.ingot_tokenizer_bos(t.p) == 1
        assert lib.ingot_tokenizer_eos(t.p) == 2
        special = [i for i in range(49152) if lib.ingot_tokenizer_is_special(t.p, i)]
        assert special == list(range(17))
        assert not lib.ingot_tokenizer_is_special(t.p, -1)
        assert not lib.ingot_tokenizer_is_special(t.p, 49152)


@pytest.mark.parametrize("parse_special", [True, False])
def test_gguf_matches_hf(gguf_tok, ref, parse_special):
    check_against(gguf_tok, ref, LINES, parse_special)


@pytest.mark.parametrize("parse_special", [True, False])
def test_json_matches_hf(json_tok, ref, parse_special):
    check_against(json_tok, ref, LINES, parse_special)


def test_roundtrip(gguf_tok):
    for line in LINES:
        for ps in (True, False):
            assert gguf_tok.decode(gguf_tok.encode(line, ps)) == line.encode(), repr(line)


def test_decode_matches_hf(gguf_tok, ref):
    rng = random.Random(5)
    for _ in range(200):
        ids = [rng.randrange(49152) for _ in range(rng.randrange(0, 20))]
        got = gguf_tok.decode(ids)
        # HF replaces invalid UTF-8 with U+FFFD; we keep the bytes.
        assert got.decode("utf-8", "replace") == ref.decode(ids, skip_special_tokens=False)
        assert (gguf_tok.decode(ids, skip_special=True).decode("utf-8", "replace")
                == ref.decode(ids, skip_special_tokens=True))
    # A multi-byte character split over tokens decodes to its bytes.
    ids = gguf_tok.encode("👨‍👩‍👧")
    assert b"".join(gguf_tok.decode([i]) for i in ids) == "👨‍👩‍👧".encode()


def test_special_tokens(gguf_tok):
    assert gguf_tok.encode("<|im_start|>user\nhi<|im_end|>")[:1] == [1]
    ids = gguf_tok.encode("<|im_start|>", parse_special=False)
    assert 1 not in ids and gguf_tok.decode(ids) == b"<|im_start|>"
    assert gguf_tok.decode([1, 2, 0], skip_special=True) == b""
    assert gguf_tok.decode([1, 2]) == b"<|im_start|><|im_end|>"
    assert gguf_tok.encode("") == []


# Bytes SmolLM2's vocabulary has no token for (HF drops them too: no unk).
MISSING = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2} | set(range(0xF5, 0x100))


def test_invalid_utf8_bytes(gguf_tok, ref):
    every = bytes(b for b in range(256) if b not in MISSING)
    for raw in [b"\xe4", b"abc\x80def", b"\xe4\xbd", b"ok \xc3(\xa9 x", every, every[::-1]]:
        ids = gguf_tok.encode(raw)
        assert gguf_tok.decode(ids) == raw
    # Unrepresentable bytes are dropped, as HF does.
    assert gguf_tok.decode(gguf_tok.encode(b"a\xffb\x04c")) == b"abc"
    assert gguf_tok.encode("a\x04b") == ref.encode("a\x04b", add_special_tokens=False).ids


def test_buffer_protocol(gguf_tok):
    text = "Hello world, this is a test of the buffer protocol."
    b = text.encode()
    full = gguf_tok.encode(text)
    buf = (ctypes.c_int32 * 3)(-7, -7, -7)
    assert lib.ingot_tokenize(gguf_tok.p, b, len(b), True, buf, 3) == len(full)
    assert list(buf) == full[:3]
    assert lib.ingot_tokenize(gguf_tok.p, b, len(b), True, None, 0) == len(full)
    arr = (ctypes.c_int32 * len(full))(*full)
    out = ctypes.create_string_buffer(b"#" * 8)
    assert lib.ingot_detokenize(gguf_tok.p, arr, len(full), False, out, 5) == len(b)
    assert out.raw[:5] == b[:5] and out.raw[5:8] == b"###"


def test_detokenize_bad_id(gguf_tok):
    out = ctypes.create_string_buffer(64)
    for bad in (-1, 49152, 1 << 30):
        arr = (ctypes.c_int32 * 2)(5, bad)
        assert lib.ingot_detokenize(gguf_tok.p, arr, 2, False, out, 64) == -1
        assert "out of range" in lib.ingot_last_error().decode()


@pytest.mark.parametrize("name,regex,ignore", [("llama3", RE_LLAMA3, True),
                                               ("qwen2", RE_QWEN2, False),
                                               ("gpt2", RE_GPT2, False)])
def test_json_split_variants(meta, tmp_path, name, regex, ignore):
    if name == "gpt2":
        pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pre = split_pre(regex)
    ref = hf_tokenizer(meta, pre, ignore_merges=ignore)
    ref.save(str(tmp_path / "tokenizer.json"))
    t = Tok(lib.ingot_tokenizer_from_json(str(tmp_path / "tokenizer.json").encode()))
    try:
        check_against(t, ref, LINES[:1500])
        assert lib.ingot_tokenizer_eos(t.p) == 0  # no config: "<|endoftext|>"
    finally:
        t.close()


def write_gguf(path, meta, pre, drop=None, n=None):
    w = gguf.GGUFWriter(str(path), "llama")
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre}
    toks = meta["tokens"] if n is None else meta["tokens"][:n]
    if drop != "model":
        w.add_string("tokenizer.ggml.model", kv["tokenizer.ggml.model"])
    w.add_string("tokenizer.ggml.pre", pre)
    if drop != "tokens":
        w.add_token_list(toks)
        w.add_token_types([int(x) for x in meta["types"][:len(toks)]])
    if drop != "merges":
        w.add_token_merges(meta["merges"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("pre,regex,ignore", [("llama-bpe", RE_LLAMA3, True),
                                              ("qwen2", RE_QWEN2, False),
                                              ("gpt2", None, False)])
def test_gguf_pre_variants(meta, tmp_path, pre, regex, ignore):
    write_gguf(tmp_path / "t.gguf", meta, pre)
    g = lib.ingot_gguf_open(str(tmp_path / "t.gguf").encode())
    assert g, lib.ingot_last_error().decode()
    t = Tok(lib.ingot_tokenizer_from_gguf(g))
    lib.ingot_gguf_close(g)
    try:
        p = (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True) if regex is None
             else split_pre(regex))
        check_against(t, hf_tokenizer(meta, p, ignore_merges=ignore), LINES[:1000])
    finally:
        t.close()


@pytest.mark.parametrize("drop,pre,msg", [("tokens", "smollm", "tokenizer.ggml.tokens"),
                                          ("merges", "smollm", "tokenizer.ggml.merges"),
                                          ("model", "smollm", "tokenizer.ggml.model"),
                                          (None, "nonesuch", "nonesuch")])
def test_gguf_errors(meta, tmp_path, drop, pre, msg):
    write_gguf(tmp_path / "t.gguf", meta, pre, drop=drop, n=300)
    g = lib.ingot_gguf_open(str(tmp_path / "t.gguf").encode())
    assert g, lib.ingot_last_error().decode()
    t = lib.ingot_tokenizer_from_gguf(g)
    lib.ingot_gguf_close(g)
    assert not t
    assert msg in lib.ingot_last_error().decode()


@pytest.mark.parametrize("content,msg", [
    ("{", "malformed JSON"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}} x', "malformed JSON"),
    ('{"model": {"type": "Unigram", "vocab": [], "merges": []}}', "not BPE"),
    ('{"model": {"type": "BPE", "vocab": [], "merges": []}}', "vocab"),
    ('{"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}}', "bad token id"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}}', "merge"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": null}',
     "pre_tokenizer"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, '
     '"pre_tokenizer": {"type": "Whitespace"}}', "Whitespace"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, '
     '"pre_tokenizer": {"type": "Digits", "individual_digits": true}}', "byte-level"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": '
     '{"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": false}}',
     "regex"),
    ('{"a": "\\q"}', "escape"),
])
def test_json_errors(tmp_path, content, msg):
    p = tmp_path / "tokenizer.json"
    p.write_text(content)
    assert not lib.ingot_tokenizer_from_json(str(p).encode())
    err = lib.ingot_last_error().decode()
    assert msg in err and "tokenizer.json" in err, err
    assert not lib.ingot_tokenizer_from_json(str(tmp_path / "missing.json").encode())
    assert "cannot read" in lib.ingot_last_error().decode()


def render_chatml_jinja(template, messages, add_generation_prompt):
    """The GGUF's Jinja template, evaluated by hand (it is fixed: checked below)."""
    assert "loop.first and messages[0]['role'] != 'system'" in template
    assert "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in template
    out = ""
    for i, m in enumerate(messages):
        if i == 0 and messages[0]["role"] != "system":
            out += ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                    "Hugging Face<|im_end|>\n")
        out += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>" + "\n"
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
    return out


def chat(messages, system, agp, cap=4096):
    n = len(messages)
    roles = (ctypes.c_char_p * max(n, 1))(*[m["role"].encode() for m in messages])
    contents = (ctypes.c_char_p * max(n, 1))(*[m["content"].encode() for m in messages])
    out = ctypes.create_string_buffer(cap)
    k = lib.ingot_chat_template(roles, contents, n, system.encode() if system else None, agp,
                                out, cap)
    assert k >= 0
    return out.raw[:min(k, cap)], k


@pytest.mark.parametrize("messages", [
    [],
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "ünïcode 👍\nmultiline"}],
])
@pytest.mark.parametrize("agp", [True, False])
def test_chat_template(meta, messages, agp):
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    expect = render_chatml_jinja(meta["template"], messages, agp).encode()
    got, k = chat(messages, system, agp)
    assert got == expect and k == len(expect)
    # Truncated output reports the full length.
    got, k = chat(messages, system, agp, cap=7)
    assert k == len(expect) and got == expect[:7]
    # No default system prompt.
    got, _ = chat(messages, None, agp)
    assert got == "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                          for m in messages).encode() + (b"<|im_start|>assistant\n" if agp else b"")


def test_encode_speed(gguf_tok, ref):
    """Throughput of a ~1 MB text (printed, not gated); ids still checked."""
    text = "\n".join(LINES)
    while len(text.encode()) < 1_000_000:
        text += "\n" + text
    b = text.encode()[:1_000_000].decode("utf-8", "ignore")
    t0 = time.perf_counter()
    ids = gguf_tok.encode(b)
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    expect = ref.encode(b, add_special_tokens=False).ids
    dt_hf = time.perf_counter() - t0
    assert ids == expect
    print(f"\nencode {len(b.encode())} bytes -> {len(ids)} tokens: {dt * 1e3:.1f} ms "
          f"({len(ids) / dt / 1e6:.2f} M tokens/s; HF tokenizers {len(ids) / dt_hf / 1e6:.2f} M/s)")
