"""Error paths of the fused ops in nn.h (test_errors.py's style): a failing
call raises IngotError whose message names the op, leaks no tensor handle,
and the library keeps working afterwards."""
import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda
from ingot_ctypes import expect_error, IngotError, call, lib, tensor, to_numpy

Q4_1, Q8_0, Q4_K, BAD_TYPE = 3, 8, 12, 5
# Fixtures live for the whole module (tracebacks cannot hold temporaries).
W = tensor(np.zeros((4, 40), np.uint8))  # Q4_1, 64 columns per row (2 blocks of 20 bytes)
W_SHORT = tensor(np.zeros((4, 39), np.uint8))  # rows shorter than a Q4_1 row of 64
W_PAD = tensor(np.zeros((4, 48), np.uint8))  # Q4_1 rows of 64 padded to 48 bytes
W_I8 = tensor(np.zeros((4, 40), np.int8))
W_1D = tensor(np.zeros(160, np.uint8))
X = tensor(np.ones((2, 64), np.float32))
X_BF16 = tensor(np.ones((2, 64), np.float32).astype(np.float16))
X_K = tensor(np.ones((2, 63), np.float32))
GU = tensor(np.ones((2, 128), np.float32))  # gate | up of 64 columns each
IDS = tensor(np.array([0, 3], np.int64))
IDS_OOB = tensor(np.array([0, 4], np.int64))
IDS_F = tensor(np.array([0.0], np.float32))
IDS_2D = tensor(np.zeros((1, 2), np.int64))
F = tensor(np.ones((3, 8), np.float32))
F_I32 = tensor(np.ones((3, 8), np.int32))
H = tensor(np.ones((3, 8), np.float16))
NW = tensor(np.ones(8, np.float32))
NW_BAD = tensor(np.ones(7, np.float32))
NW_F64 = tensor(np.ones(8, np.float64))
S0 = tensor(np.float32(1))
NW64 = tensor(np.ones(64, np.float32))
NW64_F64 = tensor(np.ones(64, np.float64))
RES = tensor(np.ones((2, 4), np.float32))
RES_BAD = tensor(np.ones((2, 5), np.float32))
RES_F16 = tensor(np.ones((2, 4), np.float16))
W8 = tensor(np.zeros((4, 64), np.uint8))  # f8e4m3fn rows of 64
SC = tensor(np.ones(4, np.float32))  # their scales
SC_BAD = tensor(np.ones(5, np.float32))
SC_F64 = tensor(np.ones(4, np.float64))


def c(name, *args):
    return lambda: call("ingot_" + name, *args)


CASES = [
    ("qmatmul-null", "qmatmul", c("qmatmul", None, W, Q4_1, 64)),
    ("qmatmul-type", "qmatmul", c("qmatmul", X, W, BAD_TYPE, 64)),
    ("qmatmul-cols-block", "qmatmul", c("qmatmul", X_K, W, Q4_1, 63)),
    ("qmatmul-cols-zero", "qmatmul", c("qmatmul", X, W, Q4_1, 0)),
    ("qmatmul-row-bytes", "qmatmul", c("qmatmul", X, W_SHORT, Q4_1, 64)),
    ("qmatmul-row-bytes-type", "qmatmul", c("qmatmul", X, W, Q8_0, 64)),
    ("qmatmul-kquant-cols", "qmatmul", c("qmatmul", X, W, Q4_K, 64)),
    ("qmatmul-w-dtype", "qmatmul", c("qmatmul", X, W_I8, Q4_1, 64)),
    ("qmatmul-w-1d", "qmatmul", c("qmatmul", X, W_1D, Q4_1, 64)),
    ("qmatmul-x-dtype", "qmatmul", c("qmatmul", X_BF16, W, Q4_1, 64)),
    ("qmatmul-x-cols", "qmatmul", c("qmatmul", X_K, W, Q4_1, 64)),
    ("qmatmul-x-1d", "qmatmul", c("qmatmul", NW, W, Q4_1, 64)),
    ("qmatmul_fused-null", "qmatmul_fused", c("qmatmul_fused", X, None, Q4_1, 64, NW64, 1e-5,
                                              None)),
    ("qmatmul_fused-row-bytes", "qmatmul_fused", c("qmatmul_fused", X, W_SHORT, Q4_1, 64, None,
                                                   0.0, None)),
    ("qmatmul_fused-norm-shape", "qmatmul_fused", c("qmatmul_fused", X, W_PAD, Q4_1, 64, NW, 1e-5,
                                                    None)),
    ("qmatmul_fused-norm-dtype", "qmatmul_fused", c("qmatmul_fused", X, W, Q4_1, 64, NW64_F64,
                                                    1e-5, None)),
    ("qmatmul_fused-eps", "qmatmul_fused", c("qmatmul_fused", X, W, Q4_1, 64, NW64, -1.0, None)),
    ("qmatmul_fused-eps-nan", "qmatmul_fused", c("qmatmul_fused", X, W, Q4_1, 64, NW64,
                                                 float("nan"), None)),
    ("qmatmul_fused-res-shape", "qmatmul_fused", c("qmatmul_fused", X, W, Q4_1, 64, None, 0.0,
                                                   RES_BAD)),
    ("qmatmul_fused-res-dtype", "qmatmul_fused", c("qmatmul_fused", X, W_PAD, Q4_1, 64, NW64,
                                                   1e-5, RES_F16)),
    ("qmatmul_fused-x-dtype", "qmatmul_fused", c("qmatmul_fused", X_BF16, W, Q4_1, 64, None, 0.0,
                                                 RES)),
    ("qmatmul_swiglu-null", "qmatmul_swiglu", c("qmatmul_swiglu", None, W, Q4_1, 64, None)),
    ("qmatmul_swiglu-x-cols", "qmatmul_swiglu", c("qmatmul_swiglu", X, W, Q4_1, 64, None)),
    ("qmatmul_swiglu-x-dtype", "qmatmul_swiglu", c("qmatmul_swiglu", X_BF16, W, Q4_1, 32, None)),
    ("qmatmul_swiglu-row-bytes", "qmatmul_swiglu", c("qmatmul_swiglu", GU, W_SHORT, Q4_1, 64,
                                                     None)),
    ("qmatmul_swiglu-res-shape", "qmatmul_swiglu", c("qmatmul_swiglu", GU, W, Q4_1, 64,
                                                     RES_BAD)),
    ("qmatmul_swiglu-res-dtype", "qmatmul_swiglu", c("qmatmul_swiglu", GU, W_PAD, Q4_1, 64,
                                                     RES_F16)),
    ("f8matmul_fused-null-scale", "f8matmul_fused", c("f8matmul_fused", X, W8, None, 64, None,
                                                      0.0, None)),
    ("f8matmul_fused-null-x", "f8matmul_fused", c("f8matmul_fused", None, W8, SC, 64, None, 0.0,
                                                  None)),
    ("f8matmul_fused-scale-shape", "f8matmul_fused", c("f8matmul_fused", X, W8, SC_BAD, 64, None,
                                                       0.0, None)),
    ("f8matmul_fused-scale-dtype", "f8matmul_fused", c("f8matmul_fused", X, W8, SC_F64, 64, None,
                                                       0.0, None)),
    ("f8matmul_fused-row-bytes", "f8matmul_fused", c("f8matmul_fused", X, W_SHORT, SC, 64, None,
                                                     0.0, None)),
    ("f8matmul_fused-w-dtype", "f8matmul_fused", c("f8matmul_fused", X, W_I8, SC, 64, None, 0.0,
                                                   None)),
    ("f8matmul_fused-w-1d", "f8matmul_fused", c("f8matmul_fused", X, W_1D, SC, 64, None, 0.0,
                                                None)),
    ("f8matmul_fused-cols-zero", "f8matmul_fused", c("f8matmul_fused", X, W8, SC, 0, None, 0.0,
                                                     None)),
    ("f8matmul_fused-x-cols", "f8matmul_fused", c("f8matmul_fused", X_K, W8, SC, 64, None, 0.0,
                                                  None)),
    ("f8matmul_fused-x-dtype", "f8matmul_fused", c("f8matmul_fused", X_BF16, W8, SC, 64, None,
                                                   0.0, None)),
    ("f8matmul_fused-norm-shape", "f8matmul_fused", c("f8matmul_fused", X, W8, SC, 64, NW, 1e-5,
                                                      None)),
    ("f8matmul_fused-eps", "f8matmul_fused", c("f8matmul_fused", X, W8, SC, 64, NW64, -1.0,
                                               None)),
    ("f8matmul_fused-res-shape", "f8matmul_fused", c("f8matmul_fused", X, W8, SC, 64, None, 0.0,
                                                     RES_BAD)),
    ("f8matmul_swiglu-null-scale", "f8matmul_swiglu", c("f8matmul_swiglu", GU, W8, None, 64,
                                                        None)),
    ("f8matmul_swiglu-x-cols", "f8matmul_swiglu", c("f8matmul_swiglu", X, W8, SC, 64, None)),
    ("f8matmul_swiglu-res-dtype", "f8matmul_swiglu", c("f8matmul_swiglu", GU, W8, SC, 64,
                                                       RES_F16)),
    ("qget_rows-null", "qget_rows", c("qget_rows", W, Q4_1, 64, None)),
    ("qget_rows-type", "qget_rows", c("qget_rows", W, BAD_TYPE, 64, IDS)),
    ("qget_rows-cols", "qget_rows", c("qget_rows", W, Q4_1, 48, IDS)),
    ("qget_rows-row-bytes", "qget_rows", c("qget_rows", W_SHORT, Q4_1, 64, IDS)),
    ("qget_rows-w-dtype", "qget_rows", c("qget_rows", W_I8, Q4_1, 64, IDS)),
    ("qget_rows-ids-dtype", "qget_rows", c("qget_rows", W, Q4_1, 64, IDS_F)),
    ("qget_rows-ids-2d", "qget_rows", c("qget_rows", W, Q4_1, 64, IDS_2D)),
    ("qget_rows-oob", "qget_rows", c("qget_rows", W, Q4_1, 64, IDS_OOB)),
    ("rms_norm-null", "rms_norm", c("rms_norm", None, NW, 1e-5)),
    ("rms_norm-dtype", "rms_norm", c("rms_norm", F_I32, NW, 1e-5)),
    ("rms_norm-w-dtype", "rms_norm", c("rms_norm", H, NW_F64, 1e-5)),
    ("rms_norm-w-dtype-mixed", "rms_norm", c("rms_norm", F, tensor(np.ones(8, np.float16)), 1e-5)),
    ("rms_norm-w-shape", "rms_norm", c("rms_norm", F, NW_BAD, 1e-5)),
    ("rms_norm-0d", "rms_norm", c("rms_norm", S0, NW, 1e-5)),
    ("rms_norm-eps", "rms_norm", c("rms_norm", F, NW, -1.0)),
    ("swiglu-null", "swiglu", c("swiglu", F, None)),
    ("swiglu-dtype", "swiglu", c("swiglu", F_I32, F_I32)),
    ("swiglu-mixed", "swiglu", c("swiglu", F, H)),
    ("swiglu-shape", "swiglu", c("swiglu", F, tensor(np.ones((8, 3), np.float32)))),
]


@pytest.mark.parametrize("name,needle,fn", CASES, ids=[x[0] for x in CASES])
def test_failing_call(name, needle, fn):
    expect_error(needle, fn)


def test_every_nn_op_has_a_case():
    import os
    import re
    hdr = os.path.join(os.path.dirname(__file__), "..", "..", "include", "ingot", "nn.h")
    declared = set(re.findall(r"^ingot_tensor \*ingot_(\w+)\(", open(hdr).read(), re.M))
    assert declared - {x[0].split("-")[0] for x in CASES} == set()


def test_works_after_failure():
    with pytest.raises(IngotError):
        call("ingot_qmatmul", X_K, W, Q4_1, 64)
    y = to_numpy(call("ingot_qmatmul", X, W, Q4_1, 64))  # zero blocks: d = m = 0
    np.testing.assert_array_equal(y, np.zeros((2, 4), np.float32))


@needs_cuda
@pytest.mark.parametrize("op", ["qmatmul", "qmatmul_fused", "qmatmul_fused_res", "qget_rows",
                                "rms_norm", "swiglu", "qmatmul_swiglu", "f8matmul_fused",
                                "f8matmul_swiglu"])
def test_device_mismatch(op):
    wd, fd = call("ingot_to", W, CUDA), call("ingot_to", F, CUDA)
    xd = call("ingot_to", X, CUDA)
    args = {"qmatmul": (X, wd, Q4_1, 64), "qget_rows": (wd, Q4_1, 64, IDS),
            "qmatmul_fused": (xd, wd, Q4_1, 64, NW64, 1e-5, None),
            "qmatmul_fused_res": (xd, wd, Q4_1, 64, None, 0.0, RES),
            "rms_norm": (fd, NW, 1e-5), "swiglu": (F, fd),
            "qmatmul_swiglu": (call("ingot_to", GU, CUDA), wd, Q4_1, 64, RES),
            "f8matmul_fused": (X, call("ingot_to", W8, CUDA), call("ingot_to", SC, CUDA), 64,
                               None, 0.0, None),
            "f8matmul_swiglu": (call("ingot_to", GU, CUDA), call("ingot_to", W8, CUDA), SC, 64,
                                None)}[op]
    live = lib.ingot_live_tensors()
    with pytest.raises(IngotError) as e:
        call("ingot_" + op.replace("_res", ""), *args)
    assert op.replace("_res", "") in str(e.value)
    del e
    assert lib.ingot_live_tensors() == live
