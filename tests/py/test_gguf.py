"""GGUF reader (src/model/gguf.c) against the `gguf` package: files written by
GGUFWriter read back (metadata values equal; tensors equal to
gguf.quants.dequantize), the real SmolLM2 file, and malformed files made by
corrupting valid ones (each must fail with an INGOT_ERR_IO message naming the
file, never crash). Tolerances: block formats dequantise bit-exactly to f32
(numpy's reference does the same f32 multiply-add); f16/bf16 outputs are the
f32 values rounded to nearest even, compared exactly."""
import ctypes
import os
import struct

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from refs import smollm2_path
from ingot_ctypes import CPU, ID, SIG, IngotError, P, I, I64, D, B, call, lib, sig, to_numpy

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
ERR_IO = 9
SZ = ctypes.c_size_t
CP = ctypes.c_char_p


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", CP), ("ndim", I), ("ne", I64 * 4), ("type", I), ("data", P),
                ("nbytes", SZ)]


sig("ingot_gguf_open", P, CP)
sig("ingot_gguf_close", None, P)
sig("ingot_gguf_version", ctypes.c_uint32, P)
sig("ingot_gguf_kv_count", I64, P)
sig("ingot_gguf_kv_key", CP, P, I64)
sig("ingot_gguf_find_kv", I64, P, CP)
sig("ingot_gguf_kv_type", I, P, I64)
sig("ingot_gguf_get_int", B, P, CP, ctypes.POINTER(I64))
sig("ingot_gguf_get_float", B, P, CP, ctypes.POINTER(D))
sig("ingot_gguf_get_string", P, P, CP, ctypes.POINTER(SZ))
sig("ingot_gguf_array_len", I64, P, CP)
sig("ingot_gguf_array_type", I, P, CP)
sig("ingot_gguf_array_string", P, P, CP, I64, ctypes.POINTER(SZ))
sig("ingot_gguf_array_int", B, P, CP, I64, ctypes.POINTER(I64))
sig("ingot_gguf_array_float", B, P, CP, I64, ctypes.POINTER(D))
sig("ingot_gguf_tensor_count", I64, P)
sig("ingot_gguf_find_tensor", I64, P, CP)
sig("ingot_gguf_tensor_info_get", B, P, I64, ctypes.POINTER(TensorInfo))
sig("ingot_gguf_load_tensor", P, P, CP, I, type(CPU))


def fn(name):
    f = getattr(lib, name)
    f.restype, f.argtypes = SIG[name]
    return f


class Gguf:
    """An open ingot_gguf handle with Python-friendly accessors."""

    def __init__(self, path):
        lib.ingot_clear_error()
        self.h = fn("ingot_gguf_open")(str(path).encode())
        if not self.h:
            raise IngotError(lib.ingot_last_error().decode(), lib.ingot_last_status())

    def close(self):
        if self.h:
            fn("ingot_gguf_close")(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def version(self):
        return fn("ingot_gguf_version")(self.h)

    def keys(self):
        n = fn("ingot_gguf_kv_count")(self.h)
        return [fn("ingot_gguf_kv_key")(self.h, i).decode() for i in range(n)]

    def kv_type(self, key):
        i = fn("ingot_gguf_find_kv")(self.h, key.encode())
        return None if i < 0 else fn("ingot_gguf_kv_type")(self.h, i)

    def get_int(self, key):
        v = I64()
        return v.value if fn("ingot_gguf_get_int")(self.h, key.encode(), ctypes.byref(v)) else None

    def get_float(self, key):
        v = D()
        return v.value if fn("ingot_gguf_get_float")(self.h, key.encode(), ctypes.byref(v)) \
            else None

    def get_string(self, key):
        n = SZ()
        p = fn("ingot_gguf_get_string")(self.h, key.encode(), ctypes.byref(n))
        return None if not p else ctypes.string_at(p, n.value).decode()

    def array(self, key):
        """The array's elements by its element type (None if not an array)."""
        k = key.encode()
        n = fn("ingot_gguf_array_len")(self.h, k)
        if n < 0:
            return None
        t = fn("ingot_gguf_array_type")(self.h, k)
        out = []
        for i in range(n):
            if t == V.STRING:
                ln = SZ()
                p = fn("ingot_gguf_array_string")(self.h, k, i, ctypes.byref(ln))
                out.append(ctypes.string_at(p, ln.value).decode())
            elif t in (V.FLOAT32, V.FLOAT64):
                v = D()
                assert fn("ingot_gguf_array_float")(self.h, k, i, ctypes.byref(v))
                out.append(v.value)
            else:
                v = I64()
                assert fn("ingot_gguf_array_int")(self.h, k, i, ctypes.byref(v))
                out.append(bool(v.value) if t == V.BOOL else v.value)
        return out

    def tensor_names(self):
        return [self.info(i).name.decode() for i in range(fn("ingot_gguf_tensor_count")(self.h))]

    def info(self, i):
        ti = TensorInfo()
        if isinstance(i, str):
            i = fn("ingot_gguf_find_tensor")(self.h, i.encode())
        assert fn("ingot_gguf_tensor_info_get")(self.h, i, ctypes.byref(ti))
        return ti

    def load(self, name, dt="float32"):
        return to_numpy(call("ingot_gguf_load_tensor", P(self.h), name.encode(), ID[dt], CPU))


def open_fails(path, *needles):
    """Opening path raises an IO error whose message names the file and each needle."""
    with pytest.raises(IngotError) as e:
        Gguf(path)
    msg = str(e.value)
    assert e.value.status == ERR_IO, msg
    assert str(path) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


# ---------------------------------------------------------------- written files

SCALARS = [  # (key, adder, value, value type)
    ("t.u8", "add_uint8", 200, V.UINT8), ("t.i8", "add_int8", -100, V.INT8),
    ("t.u16", "add_uint16", 60000, V.UINT16), ("t.i16", "add_int16", -30000, V.INT16),
    ("t.u32", "add_uint32", 4000000000, V.UINT32), ("t.i32", "add_int32", -2000000000, V.INT32),
    ("t.u64", "add_uint64", 2**63 - 5, V.UINT64), ("t.i64", "add_int64", -2**62 - 3, V.INT64),
    ("t.f32", "add_float32", 1.5e-5, V.FLOAT32), ("t.f64", "add_float64", 1e300 / 3, V.FLOAT64),
    ("t.bool", "add_bool", True, V.BOOL), ("t.false", "add_bool", False, V.BOOL),
    ("t.str", "add_string", "héllo <|im_start|>\n", V.STRING),
]
ARRAYS = [  # (key, values, element type)
    ("a.str", ["a", "", "ĠĠ", "<|endoftext|>", "x" * 300], V.STRING),
    ("a.u8", [0, 1, 255], V.UINT8), ("a.i8", [-128, 127], V.INT8),
    ("a.u16", [65535, 7], V.UINT16), ("a.i16", [-32768, 5], V.INT16),
    ("a.u32", [2**32 - 1], V.UINT32), ("a.i32", [-(2**31), 2**31 - 1, 0], V.INT32),
    ("a.u64", [2**63 - 1, 3], V.UINT64), ("a.i64", [-(2**63), 9], V.INT64),
    ("a.f32", [0.5, -2.25, 1e-3], V.FLOAT32), ("a.f64", [1e-300, -7.125], V.FLOAT64),
    ("a.bool", [True, False, True], V.BOOL),
]
NESTED = [[1, 2, 3], [4], [5, 6]]


def rng_tensor(rs, shape, scale=1.0):
    return (rs.standard_normal(shape) * scale).astype(np.float32)


def tensors_spec():
    rs = np.random.default_rng(0)
    return [  # (name, float data, ggml type)
        ("w.f32", rng_tensor(rs, (3, 5)), Q.F32),
        ("w.f32_1d", rng_tensor(rs, (7,)), Q.F32),
        ("w.f16", rng_tensor(rs, (2, 3, 4)), Q.F16),
        ("w.bf16", rng_tensor(rs, (4, 9), 100.0), Q.BF16),
        ("w.q8_0", rng_tensor(rs, (33, 64)), Q.Q8_0),
        ("w.q8_0_4d", rng_tensor(rs, (2, 3, 2, 32)), Q.Q8_0),
        ("w.q4_0", rng_tensor(rs, (5, 96)), Q.Q4_0),
        ("w.q4_1", rng_tensor(rs, (1000, 128), 0.1), Q.Q4_1),
    ]


def write_file(path, alignment=None, tensors=True, keys=True):
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    if keys:
        for key, adder, val, _ in SCALARS:
            getattr(w, adder)(key, val)
        for key, vals, t in ARRAYS:
            w.add_key_value(key, vals, V.ARRAY, sub_type=t)
        w.add_array("a.nested", NESTED)
    expect = {}
    if tensors:
        for name, x, t in tensors_spec():
            if t in (Q.F32, Q.F16):
                q = x.astype(np.float16 if t == Q.F16 else np.float32)
                w.add_tensor(name, q)
                want = q.astype(np.float32)
            else:
                q = gguf.quants.quantize(x, t)
                w.add_tensor(name, q, raw_dtype=t)
                want = gguf.quants.dequantize(q, t).astype(np.float32)
            assert want.shape == x.shape
            expect[name] = (want, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expect


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "all.gguf"
    return path, write_file(path)


def test_metadata_roundtrip(written):
    path, _ = written
    with Gguf(path) as g:
        assert g.version() == 3
        keys = g.keys()
        assert keys[0] == "general.architecture"
        assert keys[1:] == [k for k, *_ in SCALARS] + [k for k, *_ in ARRAYS] + ["a.nested"]
        assert g.get_string("general.architecture") == "llama"
        for key, _, val, t in SCALARS:
            assert g.kv_type(key) == t
            if t == V.STRING:
                assert g.get_string(key) == val
                assert g.get_int(key) is None and g.get_float(key) is None
            elif t in (V.FLOAT32, V.FLOAT64):
                want = float(np.float32(val)) if t == V.FLOAT32 else val
                assert g.get_float(key) == want
                assert g.get_int(key) is None and g.get_string(key) is None
            else:
                assert g.get_int(key) == int(val)
                if t != V.BOOL:
                    assert g.get_float(key) == float(val)
            assert g.array(key) is None
        for key, vals, t in ARRAYS:
            assert g.kv_type(key) == V.ARRAY
            assert fn("ingot_gguf_array_type")(g.h, key.encode()) == t
            got = g.array(key)
            if t == V.FLOAT32:
                vals = [float(np.float32(v)) for v in vals]
            assert got == vals, key
            assert g.get_int(key) is None and g.get_string(key) is None
        # nested array: its element type and length, elements not scalars
        k = b"a.nested"
        assert fn("ingot_gguf_array_type")(g.h, k) == V.ARRAY
        assert fn("ingot_gguf_array_len")(g.h, k) == 3
        assert not fn("ingot_gguf_array_int")(g.h, k, 0, ctypes.byref(I64()))
        # out of range / wrong type accessors fail quietly
        assert not fn("ingot_gguf_array_int")(g.h, b"a.u8", 3, ctypes.byref(I64()))
        assert not fn("ingot_gguf_array_int")(g.h, b"a.u8", -1, ctypes.byref(I64()))
        assert not fn("ingot_gguf_array_string")(g.h, b"a.str", 5, None)
        assert not fn("ingot_gguf_array_string")(g.h, b"a.u8", 0, None)
        assert not fn("ingot_gguf_array_float")(g.h, b"a.str", 0, ctypes.byref(D()))
        assert fn("ingot_gguf_array_len")(g.h, b"missing") == -1
        assert fn("ingot_gguf_array_type")(g.h, b"t.u8") == -1
        assert fn("ingot_gguf_find_kv")(g.h, b"missing") == -1
        assert fn("ingot_gguf_kv_key")(g.h, len(keys)) is None
        assert fn("ingot_gguf_kv_type")(g.h, -1) == -1
        assert g.get_int("missing") is None and g.get_string("missing") is None
        # integer arrays read as floats too
        v = D()
        assert fn("ingot_gguf_array_float")(g.h, b"a.i32", 0, ctypes.byref(v))
        assert v.value == -(2**31)


def test_tensors_roundtrip(written):
    path, expect = written
    with Gguf(path) as g:
        assert g.tensor_names() == [n for n, *_ in tensors_spec()]
        for name, (want, t) in expect.items():
            ti = g.info(name)
            assert ti.type == t and ti.ndim == want.ndim
            assert list(ti.ne[:ti.ndim]) == list(want.shape[::-1])
            assert all(v == 1 for v in ti.ne[ti.ndim:])
            row = gguf.constants.GGML_QUANT_SIZES[t]
            assert ti.nbytes == want.size // row[0] * row[1]
            got = g.load(name)
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_array_equal(got, want, err_msg=name)
            np.testing.assert_array_equal(g.load(name, "float16"), want.astype(np.float16))
            np.testing.assert_array_equal(g.load(name, "bfloat16").view(np.uint16),
                                          want.astype(ml_dtypes.bfloat16).view(np.uint16))
        # the raw bytes handed out are the file's bytes
        ti = g.info("w.f32")
        raw = np.frombuffer(ctypes.string_at(ti.data, ti.nbytes), np.float32)
        np.testing.assert_array_equal(raw, expect["w.f32"][0].ravel())
        assert fn("ingot_gguf_find_tensor")(g.h, b"nope") == -1
        assert not fn("ingot_gguf_tensor_info_get")(g.h, 8, ctypes.byref(TensorInfo()))
        with pytest.raises(IngotError, match="no tensor"):
            g.load("nope")
        with pytest.raises(IngotError, match="float64"):
            g.load("w.f32", "float64")


@pytest.mark.parametrize("alignment", [1, 8, 64, 4096])
def test_custom_alignment(tmp_path, alignment):
    path = tmp_path / "a.gguf"
    expect = write_file(path, alignment=alignment, keys=False)
    with Gguf(path) as g:
        assert g.get_int("general.alignment") == alignment
        base = g.info(0).data
        for name, (want, _) in expect.items():
            assert (g.info(name).data - base) % alignment == 0
            np.testing.assert_array_equal(g.load(name), want)


def test_no_tensors_and_version2(tmp_path):
    path = tmp_path / "k.gguf"
    write_file(path, tensors=False)
    with Gguf(path) as g:
        assert fn("ingot_gguf_tensor_count")(g.h) == 0
        assert g.get_int("t.i8") == -100
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    path.write_bytes(bytes(data))
    with Gguf(path) as g:
        assert g.version() == 2 and g.get_string("t.str") == SCALARS[-1][2]


# ---------------------------------------------------------------- SmolLM2

@pytest.fixture(scope="module")
def smollm():
    return smollm2_path()


def test_smollm2(smollm):
    ref = gguf.GGUFReader(smollm)
    with Gguf(smollm) as g:
        assert g.version() == 3
        assert g.get_string("general.architecture") == "llama"
        ints = {"llama.block_count": 30, "llama.embedding_length": 576,
                "llama.feed_forward_length": 1536, "llama.attention.head_count": 9,
                "llama.attention.head_count_kv": 3, "tokenizer.ggml.bos_token_id": 1,
                "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
                "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": 0}
        for k, v in ints.items():
            assert g.get_int(k) == v, k
        assert g.get_float("llama.rope.freq_base") == 100000.0
        assert abs(g.get_float("llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-12
        assert g.get_string("tokenizer.ggml.model") == "gpt2"
        assert g.get_string("tokenizer.ggml.pre") == "smollm"
        tmpl = g.get_string("tokenizer.chat_template")
        assert "<|im_start|>" in tmpl and "You are a helpful AI assistant named SmolLM" in tmpl
        k = b"tokenizer.ggml.tokens"
        assert fn("ingot_gguf_array_len")(g.h, k) == 49152
        assert fn("ingot_gguf_array_len")(g.h, b"tokenizer.ggml.merges") == 48900
        # every key and a sample of vocabulary entries agree with GGUFReader
        assert g.keys() == [f for f in ref.fields if not f.startswith("GGUF.")]
        toks = ref.fields["tokenizer.ggml.tokens"]
        for i in [0, 1, 2, 100, 12345, 49151]:
            ln = SZ()
            p = fn("ingot_gguf_array_string")(g.h, k, i, ctypes.byref(ln))
            assert ctypes.string_at(p, ln.value) == bytes(toks.parts[toks.data[i]])
        # tensors
        names = g.tensor_names()
        assert len(names) == 272 and "output.weight" not in names
        assert names == [t.name for t in ref.tensors]
        ti = g.info("token_embd.weight")
        assert ti.type == Q.Q8_0 and ti.ndim == 2 and list(ti.ne) == [576, 49152, 1, 1]
        types = {n: g.info(n).type for n in names}
        assert all(t == Q.F32 for n, t in types.items() if n.endswith("norm.weight"))
        assert all(t == Q.Q4_1 for n, t in types.items()
                   if n != "token_embd.weight" and not n.endswith("norm.weight"))
        by_name = {t.name: t for t in ref.tensors}
        for name in ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
                     "blk.3.attn_norm.weight", "output_norm.weight"]:
            rt = by_name[name]
            ti = g.info(name)
            assert ctypes.string_at(ti.data, 64) == bytes(rt.data.reshape(-1).view(np.uint8)[:64])
            assert ti.nbytes == rt.n_bytes
            want = gguf.quants.dequantize(rt.data, rt.tensor_type).astype(np.float32)
            got = g.load(name)
            assert got.shape == want.shape == tuple(int(x) for x in rt.shape[::-1])
            np.testing.assert_array_equal(got, want, err_msg=name)
        want = gguf.quants.dequantize(by_name["blk.0.ffn_up.weight"].data, Q.Q4_1)
        np.testing.assert_array_equal(g.load("blk.0.ffn_up.weight", "float16"),
                                      want.astype(np.float16))


# ---------------------------------------------------------------- malformed files

def fields(data):
    """Offsets of the header's fields in a valid GGUF file (a mini parser)."""
    off = {}
    pos = 24
    u32 = lambda p: struct.unpack_from("<I", data, p)[0]  # noqa: E731
    u64 = lambda p: struct.unpack_from("<Q", data, p)[0]  # noqa: E731
    nt, nkv = u64(8), u64(16)

    def skip_val(p, t):
        if t == V.STRING:
            return p + 8 + u64(p)
        if t == V.ARRAY:
            et, n = u32(p), u64(p + 4)
            p += 12
            for _ in range(n):
                p = skip_val(p, et)
            return p
        return p + {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]

    for _ in range(nkv):
        klen = u64(pos)
        key = data[pos + 8:pos + 8 + klen].decode()
        off[key] = pos
        p = pos + 8 + klen
        off[key + "/type"] = p
        off[key + "/val"] = p + 4
        pos = skip_val(p + 4, u32(p))
    for _ in range(nt):
        nlen = u64(pos)
        name = data[pos + 8:pos + 8 + nlen].decode()
        off["T" + name] = pos
        p = pos + 8 + nlen
        off["T" + name + "/ndim"] = p
        nd = u32(p)
        off["T" + name + "/ne"] = p + 4
        off["T" + name + "/type"] = p + 4 + 8 * nd
        off["T" + name + "/offset"] = p + 8 + 8 * nd
        pos = p + 16 + 8 * nd
    off["end_of_header"] = pos
    return off


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    path = d / "base.gguf"
    write_file(path)
    data = path.read_bytes()
    return d, data, fields(data)


def patched(d, data, edits, name="bad.gguf"):
    b = bytearray(data)
    for pos, fmt, val in edits:
        struct.pack_into(fmt, b, pos, val)
    p = d / name
    p.write_bytes(bytes(b))
    return p


def test_truncated_everywhere(base):
    d, data, off = base
    with Gguf(d / "base.gguf") as g:
        ends = [g.info(i).data + g.info(i).nbytes - g.info(0).data for i in range(8)]
    data_start = (off["end_of_header"] + 31) // 32 * 32  # tensor 0 is at offset 0
    need = data_start + max(ends)
    # every prefix of the header, then a stride through the tensor data; one
    # file shrunk in place (rewriting a file per cut is slow on some disks)
    cuts = list(range(0, off["end_of_header"] + 40)) + list(range(data_start, need, 97)) + \
        [need - 1]
    p = d / "trunc.gguf"
    p.write_bytes(data)
    fd = os.open(p, os.O_RDWR)
    try:
        for n in sorted(cuts, reverse=True):
            os.ftruncate(fd, n)
            msg = open_fails(p)
            assert any(w in msg for w in ("truncated", "past the end", "outside", "bad magic",
                                          "cannot fit", "larger than")), (n, msg)
    finally:
        os.close(fd)
    p.write_bytes(data[:need])
    Gguf(p).close()  # the padding after the last tensor is optional


def test_bad_header(base):
    d, data, off = base
    open_fails(patched(d, data, [(0, "4s", b"GGUX")]), "not a GGUF file")
    open_fails(patched(d, data, [(4, "<I", 1)]), "unsupported GGUF version 1")
    open_fails(patched(d, data, [(4, "<I", 4)]), "unsupported GGUF version 4")
    open_fails(patched(d, data, [(4, ">I", 3)]), "big-endian")
    for n in [2**63, 2**64 - 1, 2**40, len(data)]:
        open_fails(patched(d, data, [(16, "<Q", n)]), "cannot fit")
        open_fails(patched(d, data, [(8, "<Q", n)]), "cannot fit")
    # one more kv than present: the tensor infos are parsed as metadata
    open_fails(patched(d, data, [(16, "<Q", u64(data, 16) + 1)]))
    open_fails(patched(d, data, [(8, "<Q", u64(data, 8) + 1)]))
    # not files
    open_fails(d / "missing.gguf", "cannot open")
    open_fails(d, "not a regular file")
    (d / "empty.gguf").write_bytes(b"")
    open_fails(d / "empty.gguf", "truncated")


def u64(data, p):
    return struct.unpack_from("<Q", data, p)[0]


def test_bad_metadata(base):
    d, data, off = base
    for n in [2**64 - 1, 2**63, len(data), 2**32]:
        open_fails(patched(d, data, [(off["t.u8"], "<Q", n)]), "metadata key", "past the end")
        open_fails(patched(d, data, [(off["t.str/val"], "<Q", n)]), "string value")
        open_fails(patched(d, data, [(off["a.str/val"] + 4, "<Q", n)]), "a.str", "past the end")
        open_fails(patched(d, data, [(off["a.u64/val"] + 4, "<Q", n)]), "a.u64", "past the end")
        open_fails(patched(d, data, [(off["a.nested/val"] + 4, "<Q", n)]), "a.nested")
        # an inner array's count
        open_fails(patched(d, data, [(off["a.nested/val"] + 16, "<Q", n)]), "a.nested")
    # a string element running past the end inside a string array
    open_fails(patched(d, data, [(off["a.str/val"] + 12, "<Q", 2**62)]), "string array element")
    for t in [13, 99, 2**32 - 1]:
        open_fails(patched(d, data, [(off["t.u8/type"], "<I", t)]), "unknown value type")
        open_fails(patched(d, data, [(off["a.i32/val"], "<I", t)]), "unknown element type")
        open_fails(patched(d, data, [(off["a.nested/val"] + 12, "<I", t)]),
                   "unknown element type")
    # key with a NUL byte, empty key, duplicate key
    open_fails(patched(d, data, [(off["t.u8"] + 9, "B", 0)]), "NUL")
    open_fails(patched(d, data, [(off["t.i8"] + 8, "4s", b"t.u8")]), "duplicate metadata key")


def raw_gguf(kvs, version=3):
    """A tensor-less GGUF file from (key, type, packed value) triples."""
    b = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    for k, t, v in kvs:
        b += struct.pack("<Q", len(k)) + k.encode() + struct.pack("<I", t) + v
    return b


def test_nested_and_empty_arrays(base):
    d, *_ = base
    p = d / "raw.gguf"
    empty = struct.pack("<IQ", V.STRING, 0)
    deep = struct.pack("<IQ", V.UINT8, 1) + b"\x07"
    for _ in range(3):
        deep = struct.pack("<IQ", V.ARRAY, 1) + deep
    p.write_bytes(raw_gguf([("e", V.ARRAY, empty), ("d", V.ARRAY, deep)]))
    with Gguf(p) as g:
        assert fn("ingot_gguf_array_len")(g.h, b"e") == 0
        assert fn("ingot_gguf_array_type")(g.h, b"e") == V.STRING
        assert fn("ingot_gguf_array_string")(g.h, b"e", 0, None) is None
        assert fn("ingot_gguf_array_len")(g.h, b"d") == 1
    too_deep = struct.pack("<IQ", V.ARRAY, 1) + deep
    p.write_bytes(raw_gguf([("d", V.ARRAY, too_deep)]))
    open_fails(p, "nests arrays deeper")
    # a large count of empty nested arrays is bounded by the file size
    p.write_bytes(raw_gguf([("d", V.ARRAY, struct.pack("<IQ", V.ARRAY, 2**60))]))
    open_fails(p, "past the end")
    # general.alignment: must be a power-of-two integer
    for v in [(V.UINT32, struct.pack("<I", 3)), (V.UINT32, struct.pack("<I", 0)),
              (V.INT32, struct.pack("<i", -32)), (V.UINT64, struct.pack("<Q", 2**40))]:
        p.write_bytes(raw_gguf([("general.alignment", *v)]))
        open_fails(p, "power of two")
    p.write_bytes(raw_gguf([("general.alignment", V.STRING, struct.pack("<Q", 2) + b"32")]))
    open_fails(p, "not an integer")
    p.write_bytes(raw_gguf([("general.alignment", V.UINT32, struct.pack("<I", 16))]))
    with Gguf(p) as g:
        assert g.get_int("general.alignment") == 16


def test_bad_tensor_infos(base):
    d, data, off = base
    q8 = "Tw.q8_0"  # ne = [64, 33]
    open_fails(patched(d, data, [(off[q8 + "/ndim"], "<I", 0)]), "w.q8_0", "dims")
    open_fails(patched(d, data, [(off[q8 + "/ndim"], "<I", 5)]), "w.q8_0", "dims")
    open_fails(patched(d, data, [(off[q8 + "/ndim"], "<I", 2**31)]), "dims")
    open_fails(patched(d, data, [(off[q8 + "/ne"] + 8, "<Q", 0)]), "bad size 0 in dim 1")
    open_fails(patched(d, data, [(off[q8 + "/ne"] + 8, "<Q", 2**63)]), "bad size")
    open_fails(patched(d, data, [(off[q8 + "/ne"] + 8, "<Q", 2**50)]), "larger than the file")
    q4d = "Tw.q8_0_4d"  # ne = [32, 2, 3, 2]: product overflow
    open_fails(patched(d, data, [(off[q4d + "/ne"] + 8, "<Q", 2**40),
                                 (off[q4d + "/ne"] + 16, "<Q", 2**40)]), "bad size")
    for t in [4, 5, 31, 99, 2**32 - 1]:
        open_fails(patched(d, data, [(off[q8 + "/type"], "<I", t)]), "unknown ggml type")
    open_fails(patched(d, data, [(off[q8 + "/ne"], "<Q", 48)]), "not a multiple", "q8_0")
    open_fails(patched(d, data, [(off["Tw.q4_1/ne"], "<Q", 100)]), "not a multiple", "q4_1")
    o = u64(data, off[q8 + "/offset"])
    for delta in [1, 16, 31]:
        open_fails(patched(d, data, [(off[q8 + "/offset"], "<Q", o + delta)]), "alignment")
    for bad in [2**62, 2**64 - 32, len(data) // 32 * 32]:
        open_fails(patched(d, data, [(off[q8 + "/offset"], "<Q", bad)]), "outside")
    # duplicate tensor name (same length: rename w.f16 -> w.f32)
    open_fails(patched(d, data, [(off["Tw.f16"] + 8, "5s", b"w.f32")]), "duplicate tensor name")
    open_fails(patched(d, data, [(off["Tw.f16"] + 9, "B", 0)]), "NUL")
    open_fails(patched(d, data, [(off["Tw.f16"], "<Q", 2**64 - 1)]), "tensor name")


def test_unsupported_dequant_type(tmp_path):
    # I32 is a valid ggml type that has no float dequantisation here
    path = tmp_path / "i.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("ids", np.arange(8, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with Gguf(path) as g:
        assert g.info("ids").type == Q.I32
        with pytest.raises(IngotError, match="i32"):
            g.load("ids")
