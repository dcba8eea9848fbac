"""ctypes binding of libingot for the reference tests (numpy is the oracle).

Usage:
    from ingot_ctypes import lib, T, tensor, to_numpy, call, IngotError
    a = tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = call("ingot_exp", a)          # T, released when garbage collected
    np.testing.assert_allclose(to_numpy(b), np.exp(...))

`call(name, *args)` converts arguments: T -> tensor pointer, int -> int64 or
int (by the prototype below), float -> double, bool -> bool, lists of ints ->
int arrays, lists of T -> tensor-pointer arrays. A NULL result raises
IngotError carrying ingot_last_error().
"""
import ctypes
import os

import ml_dtypes
import numpy as np

_path = os.environ.get("INGOT_LIB") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "libingot.so")
lib = ctypes.CDLL(os.path.abspath(_path))

DTYPES = [
    np.dtype(np.bool_), np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int16),
    np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64),
    np.dtype(np.complex64), np.dtype(np.complex128),
    np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
]
NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
         "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]
ID = {n: i for i, n in enumerate(NAMES)}

P = ctypes.c_void_p
I = ctypes.c_int
I64 = ctypes.c_int64
D = ctypes.c_double
B = ctypes.c_bool


class Device(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int)]


CPU = Device(0, 0)


class IngotError(RuntimeError):
    def __init__(self, msg, status):
        super().__init__(msg)
        self.status = status


lib.ingot_last_error.restype = ctypes.c_char_p
lib.ingot_last_status.restype = I
lib.ingot_release.argtypes = [P]
lib.ingot_release.restype = None


def last_error():
    return lib.ingot_last_error().decode()


class T:
    """Owned reference to an ingot_tensor."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        if self.ptr and lib is not None:
            lib.ingot_release(self.ptr)
            self.ptr = None

    @property
    def _as_parameter_(self):
        return self.ptr

    @property
    def shape(self):
        n = lib.ingot_ndim(self.ptr)
        sh = lib.ingot_shape(self.ptr)
        return tuple(sh[i] for i in range(n))

    @property
    def strides(self):
        n = lib.ingot_ndim(self.ptr)
        st = lib.ingot_strides(self.ptr)
        return tuple(st[i] for i in range(n))

    @property
    def dtype(self):
        return DTYPES[lib.ingot_dtype_of(self.ptr)]

    @property
    def dtype_name(self):
        return NAMES[lib.ingot_dtype_of(self.ptr)]

    def numpy(self):
        return to_numpy(self)


_proto = {
    "ingot_ndim": (I, [P]),
    "ingot_shape": (ctypes.POINTER(I64), [P]),
    "ingot_strides": (ctypes.POINTER(I64), [P]),
    "ingot_offset": (I64, [P]),
    "ingot_numel": (I64, [P]),
    "ingot_dtype_of": (I, [P]),
    "ingot_is_contiguous": (B, [P]),
    "ingot_shares_storage": (B, [P, P]),
    "ingot_from_host": (P, [P, I, P, I, Device]),
    "ingot_to_host": (I, [P, P, ctypes.c_size_t]),
    "ingot_item": (D, [P]),
    "ingot_live_tensors": (I64, []),
    "ingot_promote_types": (I, [I, I]),
}


def declare(protos):
    """Set restype and argtypes of lib functions from {name: (restype, [argtypes])}."""
    for name, (restype, argtypes) in protos.items():
        getattr(lib, name).restype = restype
        getattr(lib, name).argtypes = argtypes


declare(_proto)


def tensor(arr, dtype=None, device=CPU):
    """ingot tensor holding a copy of arr (any numpy array; made contiguous)."""
    arr = np.asarray(arr)
    if dtype is not None:
        arr = arr.astype(dtype)
    arr = np.require(arr, requirements="C")
    dt = DTYPES.index(arr.dtype)
    shape = (I64 * max(arr.ndim, 1))(*arr.shape)
    p = lib.ingot_from_host(arr.ctypes.data_as(P), arr.ndim, shape, dt, device)
    if not p:
        raise IngotError(last_error(), lib.ingot_last_status())
    return T(p)


def to_numpy(t):
    """Contiguous numpy copy of an ingot tensor (any layout)."""
    out = np.empty(t.shape, dtype=t.dtype)
    st = lib.ingot_to_host(t.ptr, out.ctypes.data_as(P), out.nbytes)
    if st != 0:
        raise IngotError(last_error(), st)
    return out


def _arg(x):
    if isinstance(x, T):
        return P(x.ptr)
    if isinstance(x, Device):
        return x
    if isinstance(x, bool):
        return B(x)
    if isinstance(x, (int, np.integer)):
        return I64(int(x))
    if isinstance(x, (float, np.floating)):
        return D(float(x))
    if x is None:
        return P(None)
    if isinstance(x, (list, tuple)):
        if all(isinstance(v, T) for v in x):
            return (P * max(len(x), 1))(*[v.ptr for v in x])
        return (I64 * max(len(x), 1))(*[int(v) for v in x])
    return x


# Argument types by function; anything not listed falls back to the
# conversions of _arg (ints as int64). Declaring int (not int64) matters on
# the C side for `int dim` arguments, so list them here.
SIG = {}


def sig(name, restype, *argtypes):
    SIG[name] = (restype, list(argtypes))


IA = ctypes.POINTER(I)  # const int *
LA = ctypes.POINTER(I64)  # const int64_t *
TA = ctypes.POINTER(P)  # ingot_tensor *const *
OUT = P  # ingot_tensor **: pass out_ptr() (a pointer object is accepted as void *)

for _n in ["neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt",
           "rsqrt", "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "silu", "gelu",
           "gelu_tanh", "relu", "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf",
           "isfinite", "logical_not", "bitwise_not", "clone", "contiguous"]:
    sig("ingot_" + _n, P, P)
for _n in ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "atan2", "maximum",
           "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
           "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
           "right_shift", "matmul", "bmm"]:
    sig("ingot_" + _n, P, P, P)
for _n in ["add_scalar", "sub_scalar", "mul_scalar", "div_scalar", "pow_scalar"]:
    sig("ingot_" + _n, P, P, D)
sig("ingot_where", P, P, P, P)
sig("ingot_clamp", P, P, D, D)
sig("ingot_cast", P, P, I)
sig("ingot_to", P, P, Device)
sig("ingot_copy_", I, P, P)
for _n in ["sum", "mean", "prod", "amax", "amin", "logsumexp", "any", "all"]:
    sig("ingot_" + _n, P, P, IA, I, B)
sig("ingot_var", P, P, IA, I, D, B)
sig("ingot_std", P, P, IA, I, D, B)
sig("ingot_norm", P, P, D, IA, I, B)
sig("ingot_max_dim", P, P, I, B, OUT)
sig("ingot_min_dim", P, P, I, B, OUT)
sig("ingot_argmax", P, P, I, B)
sig("ingot_argmin", P, P, I, B)
for _n in ["cumsum", "cumprod", "softmax", "log_softmax"]:
    sig("ingot_" + _n, P, P, I)
sig("ingot_cat", P, TA, I, I)
sig("ingot_stack", P, TA, I, I)
sig("ingot_flip", P, P, IA, I)
sig("ingot_roll", P, P, LA, IA, I)
sig("ingot_repeat", P, P, LA, I)
sig("ingot_tril", P, P, I64)
sig("ingot_triu", P, P, I64)
sig("ingot_index_select", P, P, I, P)
sig("ingot_gather", P, P, I, P)
sig("ingot_scatter", P, P, I, P, P)
sig("ingot_scatter_add", P, P, I, P, P)
sig("ingot_index_put", P, P, TA, I, P, B)
sig("ingot_masked_fill", P, P, P, D)
sig("ingot_masked_select", P, P, P)
sig("ingot_nonzero", P, P)
sig("ingot_embedding", P, P, P)
sig("ingot_topk", P, P, I64, I, B, B, OUT)
sig("ingot_sort", P, P, I, B, OUT)
sig("ingot_argsort", P, P, I, B)
sig("ingot_slice", P, P, I, I64, I64, I64)
sig("ingot_select", P, P, I, I64)
sig("ingot_narrow", P, P, I, I64, I64)
sig("ingot_transpose", P, P, I, I)
sig("ingot_permute", P, P, IA)
sig("ingot_expand", P, P, I, LA)
sig("ingot_squeeze", P, P, I)
sig("ingot_unsqueeze", P, P, I)
sig("ingot_reshape", P, P, I, LA)
sig("ingot_view", P, P, I, LA)
sig("ingot_flatten", P, P, I, I)
sig("ingot_as_strided", P, P, I, LA, LA, I64)
sig("ingot_scaled_mm", P, P, P, P, P, P, I)
sig("ingot_qmatmul", P, P, P, I, I64)
sig("ingot_qmatmul_fused", P, P, P, I, I64, P, D, P)
sig("ingot_qmatmul_swiglu", P, P, P, I, I64, P)
sig("ingot_f8matmul_fused", P, P, P, P, I64, P, D, P)
sig("ingot_f8matmul_swiglu", P, P, P, P, I64, P)
sig("ingot_qget_rows", P, P, I, I64, P)
sig("ingot_rms_norm", P, P, P, D)
sig("ingot_swiglu", P, P, P)
sig("ingot_split", I, P, I64, I, OUT, I)
sig("ingot_chunk", I, P, I, I, OUT, I)
for _n in ["empty", "zeros", "ones"]:
    sig("ingot_" + _n, P, I, LA, I, Device)
sig("ingot_full", P, I, LA, D, I, Device)
sig("ingot_scalar", P, D, I, Device)
sig("ingot_arange", P, D, D, D, I, Device)
sig("ingot_linspace", P, D, D, I64, I, Device)
sig("ingot_eye", P, I64, I64, I, Device)
sig("ingot_rand", P, I, LA, I, Device)
sig("ingot_randn", P, I, LA, I, Device)
sig("ingot_randint", P, I64, I64, I, LA, I, Device)
sig("ingot_manual_seed", None, ctypes.c_uint64)


def _conv(x, ctype):
    if ctype is P:
        return None if x is None else (x.ptr if isinstance(x, T) else x)
    if ctype is IA:
        return None if x is None else (I * max(len(x), 1))(*x)
    if ctype is LA:
        return None if x is None else (I64 * max(len(x), 1))(*x)
    if ctype is TA:
        return (P * max(len(x), 1))(*[v.ptr if isinstance(v, T) else v for v in x])
    if ctype is OUT:
        return x  # a ctypes.byref(P()) or None
    return x


def call(name, *args):
    """Call an ingot function; tensor results come back as T (errors raise)."""
    f = getattr(lib, name)
    if name in SIG:
        restype, argtypes = SIG[name]
        f.restype, f.argtypes = restype, argtypes
        cargs = [_conv(a, t) for a, t in zip(args, argtypes)]
    else:
        f.restype = P
        cargs = [_arg(a) for a in args]
    lib.ingot_clear_error()
    r = f(*cargs)
    restype = SIG.get(name, (P,))[0]
    if restype is P:
        if not r:
            raise IngotError(last_error(), lib.ingot_last_status())
        return T(r)
    if restype is I and r != 0 and name not in ("ingot_split", "ingot_chunk"):
        raise IngotError(last_error(), r)
    if name in ("ingot_split", "ingot_chunk") and r < 0:
        raise IngotError(last_error(), lib.ingot_last_status())
    return r


def out_ptr():
    """An output slot for functions like ingot_max_dim(..., &indices)."""
    return ctypes.pointer(P())


def take(slot):
    """Wrap what a function wrote into an out_ptr() slot."""
    return T(slot.contents.value) if slot.contents.value else None


def strided(arr, dtype=None):
    """A non-contiguous ingot tensor equal to arr: built inside a larger
    buffer and viewed through ingot_slice with step 2 on the last dim."""
    arr = np.asarray(arr if dtype is None else np.asarray(arr).astype(dtype))
    if arr.ndim == 0:
        return tensor(arr)
    big = np.zeros(arr.shape[:-1] + (arr.shape[-1] * 2,), dtype=arr.dtype)
    big[..., ::2] = arr
    return call("ingot_slice", tensor(big), -1, 0, big.shape[-1], 2)


def transposed(arr, dtype=None):
    """A non-contiguous ingot tensor equal to arr (ndim >= 2): the transpose of
    a contiguous tensor holding arr's last two dims swapped."""
    arr = np.asarray(arr if dtype is None else np.asarray(arr).astype(dtype))
    base = tensor(np.ascontiguousarray(np.swapaxes(arr, -1, -2)))
    return call("ingot_transpose", base, -1, -2)


def expect_error(needle, fn):
    """fn() must fail with an IngotError whose message names needle (the op),
    a non-zero status, and no tensor left alive by the failed call."""
    import pytest
    live = lib.ingot_live_tensors()
    with pytest.raises(IngotError) as e:
        fn()
    msg = str(e.value)
    assert needle in msg, f"message does not name the op: {msg!r}"
    assert e.value.status != 0
    del e
    assert lib.ingot_live_tensors() == live
