"""Error paths of every op in ops.h (and the tensor.h calls taking tensors):
a failing call raises IngotError whose message names the op, leaks no tensor
handle, and the process keeps working afterwards.

Ops that have no bad-dtype/shape case in PyTorch (exp, sin, ...) fail here
through a NULL input, which must name the op too."""
import math

import numpy as np
import pytest

from ingot_ctypes import expect_error, CPU, ID, IngotError, call, lib, out_ptr, take, tensor, to_numpy

# Fixtures live for the whole module, so that exceptions (whose tracebacks
# keep frames alive) cannot hold the only reference to a temporary.
F23 = tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
F234 = tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
F4 = tensor(np.arange(4, dtype=np.float32))
F0 = tensor(np.float32(1))
E03 = tensor(np.zeros((0, 3), np.float32))
C23 = tensor(np.ones((2, 3), np.complex64))
B23 = tensor(np.arange(6).reshape(2, 3) > 2)
I23 = tensor(np.zeros((2, 3), np.int64))
I4 = tensor(np.zeros(4, np.int64))
IDX = tensor(np.array([0, 1], np.int64))
IDXOOB = tensor(np.array([0, 5], np.int64))
IDX23OOB = tensor(np.array([[0, 1, 0], [1, 7, 0]], np.int64))
FIDX = tensor(np.zeros(2, np.float32))
HUGE = [1 << 40, 1 << 40]

UNARY = ["neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
         "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh",
         "relu", "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite",
         "logical_not", "bitwise_not"]
BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "atan2", "maximum",
          "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
          "logical_xor"]
BITS = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]


def c(name, *args):
    return lambda: call("ingot_" + name, *args)


# (case id, substring the message must contain, failing call)
CASES = []
for _n in UNARY:
    CASES.append((_n + "-null", _n, c(_n, None)))
CASES += [
    ("neg-bool", "neg", c("neg", B23)),
    ("bitwise_not-f32", "bitwise_not", c("bitwise_not", F23)),
    ("floor-complex", "floor", c("floor", C23)),
    ("relu-complex", "relu", c("relu", C23)),
    ("erf-complex", "erf", c("erf", C23)),
    ("gelu-complex", "gelu", c("gelu", C23)),
]
for _n in BINARY:
    CASES.append((_n + "-broadcast", _n, c(_n, F23, F4)))
    CASES.append((_n + "-null", _n, c(_n, F23, None)))
for _n in BITS:
    CASES.append((_n + "-broadcast", _n, c(_n, I23, I4)))
    CASES.append((_n + "-float", _n, c(_n, F23, F23)))
for _n in ["add", "sub", "mul", "div", "pow"]:
    CASES.append((_n + "_scalar-null", _n, c(_n + "_scalar", None, 1.0)))
CASES += [
    ("pow_scalar-int-negative", "pow", c("pow_scalar", I23, -1.0)),
    ("sub-bool", "sub", c("sub", B23, B23)),
    ("maximum-complex", "maximum", c("maximum", C23, C23)),
    ("where-float-cond", "where", c("where", F23, F23, F23)),
    ("where-broadcast", "where", c("where", B23, F23, F4)),
    ("clamp-complex", "clamp", c("clamp", C23, 0.0, 1.0)),
    # reductions: dim out of range, dtypes PyTorch refuses, empty reductions
    ("sum-dim", "sum", c("sum", F23, [5], 1, False)),
    ("sum-repeated-dim", "sum", c("sum", F23, [0, 0], 2, False)),
    ("mean-dim", "mean", c("mean", F23, [5], 1, False)),
    ("mean-int", "mean", c("mean", I23, None, 0, False)),
    ("prod-dim", "prod", c("prod", F23, [-3], 1, True)),
    ("amax-dim", "amax", c("amax", F23, [2], 1, False)),
    ("amax-empty", "amax", c("amax", E03, [0], 1, False)),
    ("amin-dim", "amin", c("amin", F23, [2], 1, False)),
    ("max_dim-dim", "max", c("max_dim", F23, 2, False, None)),
    ("max_dim-empty", "max", c("max_dim", E03, 0, False, None)),
    ("min_dim-dim", "min", c("min_dim", F23, -3, False, None)),
    ("argmax-dim", "argmax", c("argmax", F23, 2, False)),
    ("argmax-empty", "argmax", c("argmax", E03, 0, False)),
    ("argmin-dim", "argmin", c("argmin", F23, -3, False)),
    ("var-int", "var", c("var", I23, None, 0, 1.0, False)),
    ("var-dim", "var", c("var", F23, [5], 1, 1.0, False)),
    ("std-int", "std", c("std", I23, None, 0, 1.0, False)),
    ("norm-int", "norm", c("norm", I23, 2.0, None, 0, False)),
    ("norm-dim", "norm", c("norm", F23, 2.0, [5], 1, False)),
    ("logsumexp-dim", "logsumexp", c("logsumexp", F23, [5], 1, False)),
    ("any-dim", "any", c("any", F23, [5], 1, False)),
    ("all-dim", "all", c("all", F23, [5], 1, False)),
    ("cumsum-dim", "cumsum", c("cumsum", F23, 2)),
    ("cumprod-dim", "cumprod", c("cumprod", F23, -3)),
    ("softmax-dim", "softmax", c("softmax", F23, 2)),
    ("log_softmax-dim", "log_softmax", c("log_softmax", F23, 2)),
    # matrix products
    ("matmul-shape", "matmul", c("matmul", F23, F23)),
    ("matmul-0dim", "matmul", c("matmul", F0, F4)),
    ("bmm-2d", "bmm", c("bmm", F23, F23)),
    ("scaled_mm-dtype", "scaled_mm", c("scaled_mm", F23, F23, F0, F0, None, 7)),
    ("bmm-shape", "bmm", c("bmm", F234, F234)),
    # shape
    ("cat-shape", "cat", c("cat", [F23, F4], 2, 0)),
    ("cat-dim", "cat", c("cat", [F23, F23], 2, 2)),
    ("cat-empty-list", "cat", c("cat", [], 0, 0)),
    ("stack-shape", "stack", c("stack", [F23, F4], 2, 0)),
    ("stack-dim", "stack", c("stack", [F23, F23], 2, 3)),
    ("flip-dim", "flip", c("flip", F23, [2], 1)),
    ("flip-repeated", "flip", c("flip", F23, [0, 0], 2)),
    ("roll-dim", "roll", c("roll", F23, [1], [2], 1)),
    ("repeat-too-few", "repeat", c("repeat", F23, [2], 1)),
    ("repeat-negative", "repeat", c("repeat", F23, [1, -1], 2)),
    ("tril-1d", "tril", c("tril", F4, 0)),
    ("triu-1d", "triu", c("triu", F4, 0)),
    # indexing
    ("index_select-dim", "index_select", c("index_select", F23, 2, IDX)),
    ("index_select-float-index", "index_select", c("index_select", F23, 0, FIDX)),
    ("index_select-oob", "index_select", c("index_select", F23, 1, IDXOOB)),
    ("gather-oob", "gather", c("gather", F23, 0, IDX23OOB)),
    ("gather-ndim", "gather", c("gather", F23, 0, IDX)),
    ("scatter-oob", "scatter", c("scatter", F23, 0, IDX23OOB, F23)),
    ("scatter-dtype", "scatter", c("scatter", F23, 0, I23, C23)),
    ("scatter_add-oob", "scatter_add", c("scatter_add", F23, 1, IDX23OOB, F23)),
    ("scatter_add-dtype", "scatter_add", c("scatter_add", F23, 0, I23, C23)),
    ("index_put-oob", "index_put", c("index_put", F4, [IDXOOB], 1, FIDX, False)),
    ("index_put-dtype", "index_put", c("index_put", F23, [IDX], 1, C23, False)),
    ("index_put-float-index", "index_put", c("index_put", F23, [FIDX], 1, F23, False)),
    ("masked_fill-float-mask", "masked_fill", c("masked_fill", F23, F23, 0.0)),
    ("masked_fill-shape", "masked_fill", c("masked_fill", F4, B23, 0.0)),
    ("masked_select-float-mask", "masked_select", c("masked_select", F23, F23)),
    ("nonzero-null", "nonzero", c("nonzero", None)),
    ("embedding-1d-weight", "embedding", c("embedding", F4, IDX)),
    ("embedding-float-index", "embedding", c("embedding", F23, FIDX)),
    ("embedding-oob", "embedding", c("embedding", F23, IDXOOB)),
    # sorting
    ("topk-k", "topk", c("topk", F23, 4, 1, True, True, None)),
    ("topk-dim", "topk", c("topk", F23, 1, 2, True, True, None)),
    ("topk-complex", "topk", c("topk", C23, 1, 1, True, True, None)),
    ("sort-dim", "sort", c("sort", F23, 2, False, None)),
    ("sort-complex", "sort", c("sort", C23, 0, False, None)),
    ("argsort-dim", "argsort", c("argsort", F23, -3, False)),
    # tensor.h: creation, copies, views
    ("empty-overflow", "empty", c("empty", 2, HUGE, ID["float32"], CPU)),
    ("zeros-negative", "zeros", c("zeros", 2, [2, -1], ID["float32"], CPU)),
    ("ones-dtype", "ones", c("ones", 1, [2], 99, CPU)),
    ("full-ndim", "full", c("full", 9, [1] * 9, 0.0, ID["float32"], CPU)),
    ("arange-step", "arange", c("arange", 0.0, 1.0, 0.0, ID["float32"], CPU)),
    ("linspace-steps", "linspace", c("linspace", 0.0, 1.0, -1, ID["float32"], CPU)),
    ("eye-negative", "eye", c("eye", -1, -1, ID["float32"], CPU)),
    ("rand-int", "rand", c("rand", 1, [4], ID["int32"], CPU)),
    ("randn-int", "randn", c("randn", 1, [4], ID["int64"], CPU)),
    ("randint-range", "randint", c("randint", 5, 5, 1, [4], ID["int64"], CPU)),
    ("cast-dtype", "cast", c("cast", F23, 77)),
    ("clone-null", "clone", c("clone", None)),
    ("contiguous-null", "contiguous", c("contiguous", None)),
    ("copy_-shape", "copy_", c("copy_", I23, F4)),
    ("slice-step", "slice", c("slice", F23, 0, 0, 1, 0)),
    ("select-index", "select", c("select", F23, 0, 2)),
    ("narrow-range", "narrow", c("narrow", F23, 1, 2, 2)),
    ("transpose-dim", "transpose", c("transpose", F23, 0, 2)),
    ("permute-repeated", "permute", c("permute", F23, [0, 0])),
    ("expand-shape", "expand", c("expand", F23, 2, [2, 4])),
    ("squeeze-dim", "squeeze", c("squeeze", F23, 2)),
    ("unsqueeze-dim", "unsqueeze", c("unsqueeze", F23, 3)),
    ("reshape-numel", "reshape", c("reshape", F23, 1, [7])),
    ("view-numel", "view", c("view", F23, 1, [7])),
    ("flatten-order", "flatten", c("flatten", F234, 2, 1)),
    ("split-size", "split", c("split", F23, 0, 0, None, 4)),
    ("chunk-count", "chunk", c("chunk", F23, 0, 0, None, 4)),
]


@pytest.mark.parametrize("name,needle,fn", CASES, ids=[x[0] for x in CASES])
def test_failing_call(name, needle, fn):
    expect_error(needle, fn)


def test_every_op_has_a_case():
    """Each function declared in ops.h has a row above."""
    import os
    import re
    hdr = os.path.join(os.path.dirname(__file__), "..", "..", "include", "ingot", "ops.h")
    declared = set(re.findall(r"\bingot_(\w+)\(", open(hdr).read()))
    covered = {x[0].split("-")[0] for x in CASES}
    settings = {"set_allow_tf32", "get_allow_tf32"}  # take no tensors, cannot fail
    assert declared - covered - settings == set()


def test_out_slots_untouched_on_failure():
    for fn, args in [("max_dim", (F23, 5, False)), ("min_dim", (F23, 5, False)),
                     ("sort", (F23, 5, False)), ("topk", (F23, 9, 1, True, True))]:
        slot = out_ptr()
        live = lib.ingot_live_tensors()
        with pytest.raises(IngotError):
            call("ingot_" + fn, *args, slot)
        assert take(slot) is None
        assert lib.ingot_live_tensors() == live


def test_chain_keeps_first_error():
    """exp(reshape(bad)): the NULL fed to exp keeps reshape's message."""
    import ctypes
    lib.ingot_clear_error()
    lib.ingot_reshape.restype = ctypes.c_void_p
    lib.ingot_reshape.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    lib.ingot_exp.restype = ctypes.c_void_p
    lib.ingot_exp.argtypes = [ctypes.c_void_p]
    live = lib.ingot_live_tensors()
    shape = (ctypes.c_int64 * 1)(7)
    r = lib.ingot_exp(lib.ingot_reshape(F23.ptr, 1, shape))
    assert not r
    msg = lib.ingot_last_error().decode()
    assert "reshape" in msg and "exp" not in msg.split(":")[0]
    assert lib.ingot_live_tensors() == live
    lib.ingot_clear_error()


# After a failure, a correct call of the same family still works.
RECOVERY = [
    ("unary", c("bitwise_not", F23), lambda: to_numpy(call("ingot_exp", F4)),
     np.exp(np.arange(4, dtype=np.float32))),
    ("binary", c("add", F23, F4), lambda: to_numpy(call("ingot_add", F23, F23)),
     2 * np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("reduce", c("sum", F23, [5], 1, False), lambda: to_numpy(call("ingot_sum", F23, [1], 1, False)),
     np.array([3, 12], np.float32)),
    ("matmul", c("matmul", F23, F23),
     lambda: to_numpy(call("ingot_matmul", F23, call("ingot_transpose", F23, 0, 1))),
     np.array([[5, 14], [14, 50]], np.float32)),
    ("shape", c("cat", [F23, F4], 2, 0), lambda: to_numpy(call("ingot_flip", F4, [0], 1)),
     np.arange(4, dtype=np.float32)[::-1]),
    ("index", c("index_select", F23, 1, IDXOOB),
     lambda: to_numpy(call("ingot_index_select", F23, 1, IDX)),
     np.array([[0, 1], [3, 4]], np.float32)),
    ("sort", c("sort", F23, 2, False, None),
     lambda: to_numpy(call("ingot_argsort", F4, 0, True)), np.array([3, 2, 1, 0], np.int64)),
    ("creation", c("empty", 2, HUGE, ID["float32"], CPU),
     lambda: to_numpy(call("ingot_full", 2, [2, 2], 1.5, ID["float32"], CPU)),
     np.full((2, 2), 1.5, np.float32)),
    ("view", c("reshape", F23, 1, [7]), lambda: to_numpy(call("ingot_reshape", F23, 1, [6])),
     np.arange(6, dtype=np.float32)),
]


@pytest.mark.parametrize("family,bad,good,want", RECOVERY, ids=[r[0] for r in RECOVERY])
def test_works_after_failure(family, bad, good, want):
    live = lib.ingot_live_tensors()
    with pytest.raises(IngotError):
        bad()
    got = good()
    np.testing.assert_array_equal(got, want) if got.dtype.kind in "biu" else \
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert lib.ingot_live_tensors() == live
    assert not math.isnan(float(got.ravel()[0]))
