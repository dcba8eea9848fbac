"""Dtype tables shared by the reference tests (by ingot dtype name)."""
import ml_dtypes
import numpy as np
from ingot_ctypes import DTYPES, NAMES

BF16 = np.dtype(ml_dtypes.bfloat16)
# ingot dtype name -> numpy dtype, for every ingot dtype
NP = dict(zip(NAMES, DTYPES))
INTS = ["uint8", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
# relative tolerances of the elementwise ops (see test_unary / test_binary)
RTOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 2e-6, "float64": 1e-12,
        "complex64": 1e-5, "complex128": 1e-12}
