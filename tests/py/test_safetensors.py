"""safetensors reader and HF checkpoint directories (src/model/safetensors.c).

Files are written by hand (tests/py/st_util.py); the oracle is numpy on the
same arrays. Every malformed variant must give IngotError with a clear
message, no crash and no leak (conftest's no_leaks)."""
import ctypes
import json

import ml_dtypes
import numpy as np
import pytest

from ingot_ctypes import CPU, ID, Device, IngotError, T, last_error, lib, to_numpy
from st_util import pack, st_bytes, write_sharded, write_st

P, I64 = ctypes.c_void_p, ctypes.c_int64


class Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("dtype_name", ctypes.c_char_p),
                ("ndim", ctypes.c_int), ("shape", I64 * 8), ("numel", I64), ("data", P),
                ("nbytes", ctypes.c_size_t)]


for fn, res, args in [
    ("ingot_safetensors_open", P, [ctypes.c_char_p]),
    ("ingot_safetensors_close", None, [P]),
    ("ingot_safetensors_tensor_count", I64, [P]),
    ("ingot_safetensors_find", I64, [P, ctypes.c_char_p]),
    ("ingot_safetensors_info_get", ctypes.c_bool, [P, I64, ctypes.POINTER(Info)]),
    ("ingot_safetensors_metadata", ctypes.c_char_p, [P, ctypes.c_char_p]),
    ("ingot_safetensors_load_tensor", P, [P, ctypes.c_char_p, ctypes.c_int, Device]),
    ("ingot_checkpoint_open_dir", P, [ctypes.c_char_p]),
    ("ingot_checkpoint_close", None, [P]),
    ("ingot_checkpoint_tensor_count", I64, [P]),
    ("ingot_checkpoint_shard_count", I64, [P]),
    ("ingot_checkpoint_find", ctypes.c_bool, [P, ctypes.c_char_p, ctypes.POINTER(Info)]),
    ("ingot_checkpoint_info_get", ctypes.c_bool, [P, I64, ctypes.POINTER(Info)]),
    ("ingot_checkpoint_load_tensor", P, [P, ctypes.c_char_p, ctypes.c_int, Device]),
]:
    getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args


class ST:
    def __init__(self, path):
        lib.ingot_clear_error()
        self.p = lib.ingot_safetensors_open(str(path).encode())
        if not self.p:
            raise IngotError(last_error(), lib.ingot_last_status())

    def __enter__(self):
        return self

    def __exit__(self, *a):
        lib.ingot_safetensors_close(self.p)

    def info(self, name):
        i = lib.ingot_safetensors_find(self.p, name.encode())
        if i < 0:
            return None
        inf = Info()
        assert lib.ingot_safetensors_info_get(self.p, i, ctypes.byref(inf))
        return inf

    def load(self, name, dt):
        lib.ingot_clear_error()
        r = lib.ingot_safetensors_load_tensor(self.p, name.encode(), ID[dt], CPU)
        if not r:
            raise IngotError(last_error(), lib.ingot_last_status())
        t = T(r)
        return to_numpy(t)


class CK:
    def __init__(self, path):
        lib.ingot_clear_error()
        self.p = lib.ingot_checkpoint_open_dir(str(path).encode())
        if not self.p:
            raise IngotError(last_error(), lib.ingot_last_status())

    def __enter__(self):
        return self

    def __exit__(self, *a):
        lib.ingot_checkpoint_close(self.p)

    def load(self, name, dt):
        lib.ingot_clear_error()
        r = lib.ingot_checkpoint_load_tensor(self.p, name.encode(), ID[dt], CPU)
        if not r:
            raise IngotError(last_error(), lib.ingot_last_status())
        return to_numpy(T(r))


def sample_tensors(rng):
    return {
        "a.f32": rng.standard_normal((3, 5)).astype(np.float32),
        "b.f16": rng.standard_normal((7,)).astype(np.float16),
        "c.bf16": rng.standard_normal((2, 3, 4)).astype(ml_dtypes.bfloat16),
        "d.f8": rng.uniform(-8, 8, (4, 4)).astype(ml_dtypes.float8_e4m3fn),
        "e.i64": rng.integers(-1000, 1000, (6,)).astype(np.int64),
        "f.i32": rng.integers(-1000, 1000, (2, 2)).astype(np.int32),
        "g.u8": rng.integers(0, 255, (9,)).astype(np.uint8),
        "h.f64": rng.standard_normal((3,)),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
    }


@pytest.mark.parametrize("pad", [True, False])
def test_roundtrip(tmp_path, pad):
    rng = np.random.default_rng(0)
    ts = sample_tensors(rng)
    p = tmp_path / "x.safetensors"
    write_st(p, ts, metadata={"format": "pt", "note": "hi"}, pad=pad)
    with ST(p) as st:
        assert lib.ingot_safetensors_tensor_count(st.p) == len(ts)
        assert lib.ingot_safetensors_metadata(st.p, b"format") == b"pt"
        assert lib.ingot_safetensors_metadata(st.p, b"note") == b"hi"
        assert lib.ingot_safetensors_metadata(st.p, b"nope") is None
        assert st.info("missing") is None
        names = []
        for i in range(len(ts)):
            inf = Info()
            assert lib.ingot_safetensors_info_get(st.p, i, ctypes.byref(inf))
            names.append(inf.name.decode())
        assert names == sorted(ts)
        for name, arr in ts.items():
            inf = st.info(name)
            assert inf.name.decode() == name
            assert inf.ndim == arr.ndim and list(inf.shape[:arr.ndim]) == list(arr.shape)
            assert inf.numel == arr.size and inf.nbytes == arr.nbytes
            assert inf.dtype == ID[arr.dtype.name if arr.dtype.name != "bool" else "bool"]
            if arr.nbytes:
                assert ctypes.string_at(inf.data, inf.nbytes) == arr.tobytes()
            # native dtype: bit-exact; float32: exact for every source here
            got = st.load(name, arr.dtype.name)
            assert got.shape == arr.shape and got.tobytes() == arr.tobytes()
            np.testing.assert_array_equal(st.load(name, "float32"), arr.astype(np.float32))
        np.testing.assert_array_equal(st.load("a.f32", "bfloat16").astype(np.float32),
                                      ts["a.f32"].astype(ml_dtypes.bfloat16).astype(np.float32))
        with pytest.raises(IngotError, match="no tensor 'zz'"):
            st.load("zz", "float32")
    bad = Info()
    with ST(p) as st:
        assert not lib.ingot_safetensors_info_get(st.p, 99, ctypes.byref(bad))


def test_large_tensor(tmp_path):
    a = np.random.default_rng(1).standard_normal((300, 700)).astype(ml_dtypes.bfloat16)
    write_st(tmp_path / "x.safetensors", {"w": a})
    with ST(tmp_path / "x.safetensors") as st:
        np.testing.assert_array_equal(st.load("w", "float32"), a.astype(np.float32))


def entry(dtype="F32", shape=(2,), offs=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offs)}


MALFORMED = [
    ("short", b"\x01\x00", "too short"),
    ("hl_zero", pack(b"", b"", pad=False), "header length 0"),
    ("hl_past_end", b"\xff\x00\x00\x00\x00\x00\x00\x00{}", "header length 255"),
    ("hl_huge", b"\xff" * 8 + b"{}", "header length"),
    ("bad_json", pack('{"a": {"dtype": "F32",', bytes(8)), "malformed JSON header"),
    ("trailing", pack('{} x', b""), "malformed JSON header"),
    ("root_array", pack("[]", b""), "not a JSON object"),
    ("entry_not_obj", pack({"a": 3}, bytes(8)), "'a': header entry is not a JSON object"),
    ("no_dtype", pack({"a": {"shape": [2], "data_offsets": [0, 8]}}, bytes(8)), "'dtype'"),
    ("bad_dtype", pack({"a": entry(dtype="F4")}, bytes(8)), "unsupported dtype 'F4'"),
    ("no_shape", pack({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, bytes(8)), "'shape'"),
    ("neg_shape", pack({"a": entry(shape=(-2,))}, bytes(8)), "non-negative integers"),
    ("frac_shape", pack({"a": entry(shape=(1.5,))}, bytes(8)), "non-negative integers"),
    ("str_shape", pack({"a": entry(shape=("2",))}, bytes(8)), "non-negative integers"),
    ("many_dims", pack({"a": entry(shape=(1,) * 9, offs=(0, 4))}, bytes(4)), "at most 8"),
    ("overflow", pack({"a": entry(shape=(1 << 40, 1 << 40, 1 << 40))}, bytes(8)), "overflows"),
    ("no_offsets", pack({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)), "data_offsets"),
    ("offsets_3", pack({"a": entry(offs=(0, 4, 8))}, bytes(8)), "data_offsets"),
    ("offsets_rev", pack({"a": entry(offs=(8, 0))}, bytes(8)), "outside the data section"),
    ("offsets_past", pack({"a": entry(offs=(8, 16))}, bytes(8)), "outside the data section"),
    ("size_mismatch", pack({"a": entry(offs=(0, 4))}, bytes(8)), "span 4 bytes but F32 x 2"),
    ("overlap", pack({"a": entry(), "b": entry(offs=(4, 12))}, bytes(12)), "overlap"),
    ("duplicate", pack('{"a": %s, "a": %s}' % (json.dumps(entry()), json.dumps(entry(offs=(8, 16)))),
                       bytes(16)), "duplicate tensor 'a'"),
    ("meta_not_obj", pack({"__metadata__": [1]}, b""), "'__metadata__' is not a JSON object"),
    ("meta_value", pack({"__metadata__": {"k": 1}}, b""), "value of 'k' is not a string"),
]


@pytest.mark.parametrize("name,data,msg", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed(tmp_path, name, data, msg):
    p = tmp_path / f"{name}.safetensors"
    p.write_bytes(data)
    with pytest.raises(IngotError, match=msg) as e:
        ST(p)
    assert str(p) in str(e.value)


def test_open_errors(tmp_path):
    with pytest.raises(IngotError, match="cannot open"):
        ST(tmp_path / "nope.safetensors")
    with pytest.raises(IngotError, match="not a regular file"):
        ST(tmp_path)


def test_gaps_and_empty_allowed(tmp_path):
    # Holes between tensors and empty tensors anywhere are not errors.
    a = np.arange(2, dtype=np.float32)
    hdr = {"a": entry(offs=(8, 16)), "e": entry(shape=(0,), offs=(4, 4))}
    (tmp_path / "g.safetensors").write_bytes(pack(hdr, bytes(8) + a.tobytes()))
    with ST(tmp_path / "g.safetensors") as st:
        np.testing.assert_array_equal(st.load("a", "float32"), a)
        assert st.load("e", "float32").shape == (0,)


def make_ckpt(rng, n=7):
    return {f"model.layers.{i}.w": rng.standard_normal((i + 1, 3)).astype(np.float32)
            for i in range(n)}


def test_checkpoint_single(tmp_path):
    ts = make_ckpt(np.random.default_rng(2))
    write_st(tmp_path / "model.safetensors", ts)
    with CK(tmp_path) as ck:
        assert lib.ingot_checkpoint_tensor_count(ck.p) == len(ts)
        assert lib.ingot_checkpoint_shard_count(ck.p) == 1
        for n, a in ts.items():
            np.testing.assert_array_equal(ck.load(n, "float32"), a)
        inf = Info()
        assert not lib.ingot_checkpoint_find(ck.p, b"nope", ctypes.byref(inf))
        with pytest.raises(IngotError, match="no tensor 'nope'"):
            ck.load("nope", "float32")


@pytest.mark.parametrize("n_shards", [1, 2, 3])
def test_checkpoint_sharded(tmp_path, n_shards):
    ts = make_ckpt(np.random.default_rng(3))
    write_sharded(tmp_path, ts, n_shards)
    # an unrelated model.safetensors is ignored when the index exists
    write_st(tmp_path / "model.safetensors", {"junk": np.zeros(1, np.float32)})
    with CK(tmp_path) as ck:
        assert lib.ingot_checkpoint_tensor_count(ck.p) == len(ts)
        assert lib.ingot_checkpoint_shard_count(ck.p) == n_shards
        for n, a in ts.items():
            inf = Info()
            assert lib.ingot_checkpoint_find(ck.p, n.encode(), ctypes.byref(inf))
            assert inf.name.decode() == n
            np.testing.assert_array_equal(ck.load(n, "float32"), a)
        seen = []
        for i in range(len(ts)):
            inf = Info()
            assert lib.ingot_checkpoint_info_get(ck.p, i, ctypes.byref(inf))
            seen.append(inf.name.decode())
        assert seen == sorted(ts)


def index(d, wm):
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))


def test_checkpoint_errors(tmp_path):
    with pytest.raises(IngotError, match="no model.safetensors or model.safetensors.index.json"):
        CK(tmp_path)
    ts = make_ckpt(np.random.default_rng(4), 4)
    wm = write_sharded(tmp_path, ts, 2)
    cases = [
        ({**wm, "extra": wm["model.layers.0.w"]}, "'extra' is mapped to model-00001"),
        ({**wm, "x": "missing.safetensors"}, "missing.safetensors: cannot open"),
        ({**wm, "x": "../model-00001-of-00002.safetensors"}, "not a file name"),
        ({**wm, "x": 3}, "not a file name"),
        ({}, "'weight_map' is empty"),
    ]
    for m, msg in cases:
        index(tmp_path, m)
        with pytest.raises(IngotError, match=msg):
            CK(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": [1]}')
    with pytest.raises(IngotError, match="non-object 'weight_map'"):
        CK(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": ')
    with pytest.raises(IngotError, match="malformed JSON"):
        CK(tmp_path)
    # a malformed shard is reported with its own path
    index(tmp_path, wm)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(pack("[]", b""))
    with pytest.raises(IngotError, match="model-00002-of-00002.safetensors: the safetensors header"):
        CK(tmp_path)
