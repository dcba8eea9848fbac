"""CUDA shape ops (cat, flip, roll, repeat, tril, triu) and indexing ops
(index_select, gather, scatter, scatter_add, index_put, masked_fill,
masked_select, nonzero, embedding) against the CPU backend via diff():
every op x representative dtypes, negative dims, strided / transposed /
expanded inputs, zero-size, large (> 2^20 elements), out-of-range and
negative index errors (both devices raise INGOT_ERR_INDEX), duplicates in
scatter_add / index_put accumulate. The CUDA accumulating kernels are
bit-identical to the CPU (sorted runs applied in index order, no float
atomics), so those cases compare with zero tolerance."""
import numpy as np
import pytest

from cuda_diff import CUDA, diff, needs_cuda, to_device
from ingot_ctypes import DTYPES, ID, IngotError, call, strided, tensor, transposed

pytestmark = needs_cuda

ERR_INDEX = 5
EXACT = (0.0, 0.0)
REP = ["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64"]
ALL = list(ID)
rng = np.random.default_rng(20240611)


def npdt(name):
    return DTYPES[ID[name]]


def rand(shape, dt, special=False):
    x = rng.integers(-8, 9, size=shape)
    if dt == "bool":
        return x > 0
    if dt == "uint8":
        return (x + 8).astype(np.uint8)
    if dt.startswith("complex"):
        v = (x + 1j * rng.integers(-8, 9, size=shape)).astype(npdt(dt))
    elif dt.startswith("float") or dt == "bfloat16":
        v = (x / 4.0 + rng.standard_normal(shape) * 0.01).astype(npdt(dt))
    else:
        return x.astype(npdt(dt))
    if special and v.size >= 4:
        flat = v.reshape(-1)
        flat[:4] = np.array([np.nan, np.inf, -np.inf, -0.0]).astype(flat.dtype) \
            if not dt.startswith("float8_e4") else np.array([np.nan, 448, -448, -0.0]).astype(flat.dtype)
    return v


def idx_t(a):
    return tensor(np.asarray(a, dtype=np.int64))


def both_raise(name, *args):
    """CPU and CUDA both fail with INGOT_ERR_INDEX."""
    with pytest.raises(IngotError) as e:
        call(name, *args)
    assert e.value.status == ERR_INDEX, str(e.value)
    dargs = [to_device(a) if hasattr(a, "ptr") else
             ([to_device(x) for x in a] if isinstance(a, list) and a and hasattr(a[0], "ptr")
              else a) for a in args]
    with pytest.raises(IngotError) as e2:
        call(name, *dargs)
    assert e2.value.status == ERR_INDEX, str(e2.value)
    assert str(e2.value) == str(e.value)


# ---------------------------------------------------------------- cat
@pytest.mark.parametrize("dt", ALL)
def test_cat_dtypes(dt):
    a, b, c = rand((3, 4, 5), dt, True), rand((3, 2, 5), dt), rand((3, 1, 5), dt)
    diff("ingot_cat", [tensor(a), tensor(b), tensor(c)], 3, 1)
    diff("ingot_cat", [tensor(a), tensor(a)], 2, -1)
    diff("ingot_cat", [tensor(a), tensor(a)], 2, 0)


@pytest.mark.parametrize("dt", REP)
def test_cat_strided_and_many(dt):
    a = rand((6, 7), dt)
    parts = [strided(a), transposed(a), tensor(a)]
    diff("ingot_cat", parts, 3, 0)
    diff("ingot_cat", parts, 3, -1)
    # more inputs than one kernel call takes (groups of 8), some empty
    many = [tensor(rand((2, k % 3), dt)) for k in range(19)]
    diff("ingot_cat", many, len(many), 1)


def test_cat_promotion_empty_large():
    diff("ingot_cat", [tensor(rand((2, 3), "int32")), tensor(rand((2, 3), "float16"))], 2, 0)
    diff("ingot_cat", [tensor(np.zeros((0,), np.float32)), tensor(rand((4,), "float32"))], 2, 0)
    diff("ingot_cat", [tensor(np.zeros((3, 0), np.float32)), tensor(np.zeros((3, 0), np.float32))],
         2, 1)
    big = rand((1 << 19, 3), "float32")
    diff("ingot_cat", [tensor(big), strided(big)], 2, 0)
    diff("ingot_cat", [tensor(big), transposed(rand((3, 1 << 19), "float32").T.copy())], 2, 1)


# ---------------------------------------------------------------- flip / roll
@pytest.mark.parametrize("dt", ALL)
def test_flip_dtypes(dt):
    a = rand((4, 5, 6), dt, True)
    for dims in ([0], [-1], [0, 2], [1, -3], [0, 1, 2], []):
        diff("ingot_flip", tensor(a), dims, len(dims))
    diff("ingot_flip", transposed(a), [0, 2], 2)
    diff("ingot_flip", strided(a), [-1], 1)


def test_flip_edge():
    diff("ingot_flip", tensor(np.float32(3.5)), [], 0)
    diff("ingot_flip", tensor(np.zeros((3, 0, 2), np.int64)), [1], 1)
    diff("ingot_flip", tensor(rand((1, 7, 1), "int64")), [0, 1, 2], 3)
    big = rand((1 << 11, 1 << 10), "bfloat16")
    diff("ingot_flip", tensor(big), [0], 1)
    diff("ingot_flip", transposed(big), [1], 1)
    diff("ingot_flip", tensor(rand((3,), "float32")), [3], 1)  # bad dim: both raise


@pytest.mark.parametrize("dt", REP + ["complex128", "int8", "float8_e5m2"])
def test_roll(dt):
    a = rand((4, 5, 6), dt, True)
    diff("ingot_roll", tensor(a), [1], [0], 1)
    diff("ingot_roll", tensor(a), [-2, 3], [-1, 1], 2)
    diff("ingot_roll", tensor(a), [7, -13, 1], [0, 1, 2], 3)
    diff("ingot_roll", tensor(a), [2, 3], [1, 1], 2)  # a repeated dim adds up
    diff("ingot_roll", tensor(a), [5], [], 0)  # flattened
    diff("ingot_roll", transposed(a), [1, -1], [0, 2], 2)
    diff("ingot_roll", strided(a), [3], [-1], 1)


def test_roll_edge():
    diff("ingot_roll", tensor(np.zeros((0, 3), np.float32)), [1], [0], 1)
    diff("ingot_roll", tensor(np.int32(4)), [1], [], 0)
    big = rand((1 << 21,), "int32")
    diff("ingot_roll", tensor(big), [12345], [0], 1)
    diff("ingot_roll", strided(big), [-(1 << 20) - 7], [0], 1)


# ---------------------------------------------------------------- repeat
@pytest.mark.parametrize("dt", REP + ["uint8", "complex128"])
def test_repeat(dt):
    a = rand((3, 4), dt, True)
    diff("ingot_repeat", tensor(a), [2, 3], 2)
    diff("ingot_repeat", tensor(a), [2, 1, 1], 3)
    diff("ingot_repeat", tensor(a), [1, 2, 3, 1], 4)
    diff("ingot_repeat", transposed(a), [3, 2], 2)
    diff("ingot_repeat", strided(a), [1, 4], 2)
    diff("ingot_repeat", tensor(a), [0, 2], 2)
    diff("ingot_repeat", tensor(rand((1, 5), dt)), [4, 1], 2)
    diff("ingot_repeat", tensor(a), [2], 1)  # too few repeats: both raise


def test_repeat_large_and_scalar():
    diff("ingot_repeat", tensor(np.float64(2.5)), [3, 2], 2)
    diff("ingot_repeat", tensor(rand((1024, 3), "float16")), [512, 2], 2)


# ---------------------------------------------------------------- tril / triu
@pytest.mark.parametrize("dt", ALL)
def test_tril_triu(dt):
    a = rand((2, 5, 7), dt, True)
    for k in (0, 1, -1, 3, -4, 100, -100, 2 ** 62, -2 ** 62):
        diff("ingot_tril", tensor(a), k)
        diff("ingot_triu", tensor(a), k)
    diff("ingot_tril", transposed(a), 1)
    diff("ingot_triu", strided(a), -1)


def test_tril_triu_edge():
    diff("ingot_tril", tensor(np.zeros((0, 4), np.float32)), 0)
    diff("ingot_triu", tensor(rand((1, 1, 6), "int64")), 0)
    diff("ingot_triu", tensor(rand((5,), "int64")), 0)  # 1-D: both raise
    big = rand((3, 700, 600), "float32")
    diff("ingot_tril", tensor(big), -5)
    diff("ingot_triu", transposed(big), 7)


# ---------------------------------------------------------------- index_select / gather
@pytest.mark.parametrize("dt", ALL)
def test_index_select(dt):
    a = rand((5, 7, 3), dt, True)
    for dim in (0, 1, 2, -1, -3):
        n = a.shape[dim]
        i = idx_t([n - 1, 0, 0, n // 2, 1 % n])
        diff("ingot_index_select", tensor(a), dim, i)
        diff("ingot_index_select", transposed(a), dim, i)
    diff("ingot_index_select", strided(a), 1, tensor(np.array([6, 2], np.int32)))
    diff("ingot_index_select", tensor(a), 0, idx_t(np.zeros(0)))


def test_index_select_edge_errors():
    diff("ingot_index_select", tensor(np.float32(7)), 0, idx_t([0]))
    a = tensor(rand((4, 3), "float32"))
    both_raise("ingot_index_select", a, 0, idx_t([0, 4]))
    both_raise("ingot_index_select", a, 1, idx_t([-1, 0]))
    both_raise("ingot_index_select", a, 0, idx_t([1, 2, 9, -3]))  # first bad named
    big = rand((1 << 12, 300), "float16")
    ii = rng.integers(0, 1 << 12, size=5000)
    diff("ingot_index_select", tensor(big), 0, idx_t(ii))
    diff("ingot_index_select", transposed(big), 1, idx_t(rng.integers(0, 300, size=4000)))


@pytest.mark.parametrize("dt", REP + ["int8", "complex128", "float8_e4m3fn"])
def test_gather(dt):
    a = rand((4, 6, 5), dt, True)
    for dim in (0, 1, -1):
        sh = [3, 3, 3]
        sh[dim] = 9
        i = rng.integers(0, a.shape[dim], size=sh)
        diff("ingot_gather", tensor(a), dim, idx_t(i))
        diff("ingot_gather", transposed(a), dim, idx_t(i))
        diff("ingot_gather", strided(a), dim, idx_t(i))
    diff("ingot_gather", tensor(a), 1, idx_t(np.zeros((4, 0, 5))))


def test_gather_edge_errors():
    diff("ingot_gather", tensor(np.int64(5)), 0, idx_t(np.zeros(3)))
    a = tensor(rand((3, 4), "float32"))
    both_raise("ingot_gather", a, 1, idx_t([[0, 4], [1, 1]]))
    both_raise("ingot_gather", a, 0, idx_t([[0, -1], [1, 1]]))
    big = rand((1 << 10, 1 << 11), "int32")
    diff("ingot_gather", tensor(big), 1, idx_t(rng.integers(0, 1 << 11, size=(1 << 10, 1500))))


# ---------------------------------------------------------------- scatter / scatter_add
@pytest.mark.parametrize("dt", ALL)
def test_scatter(dt):
    t = rand((5, 6), dt)
    src = rand((5, 6), dt, True)
    i = rng.integers(0, 5, size=(4, 6))  # duplicates along dim 0: the last wins
    diff("ingot_scatter", tensor(t), 0, idx_t(i), tensor(src), tol=EXACT)
    diff("ingot_scatter_add", tensor(t), 0, idx_t(i), tensor(src), tol=EXACT)
    j = rng.integers(0, 6, size=(5, 3))
    diff("ingot_scatter", transposed(t), -1, idx_t(j), strided(src), tol=EXACT)
    diff("ingot_scatter_add", transposed(t), -1, idx_t(j), transposed(src), tol=EXACT)


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "float16", "bfloat16", "float32",
                                "float64", "complex64", "bool"])
def test_scatter_add_heavy_duplicates(dt):
    # 1-D, many duplicates per target: accumulation order must match the CPU
    n = (1 << 20) + 3
    t = rand((100,), dt)
    src = rand((n,), dt)
    i = rng.integers(0, 100, size=n)
    diff("ingot_scatter_add", tensor(t), 0, idx_t(i), tensor(src), tol=EXACT)
    diff("ingot_scatter", tensor(t), 0, idx_t(i), tensor(src), tol=EXACT)
    t2 = rand((64, 40), dt)
    i2 = rng.integers(0, 64, size=(3000, 40))
    diff("ingot_scatter_add", tensor(t2), 0, idx_t(i2), tensor(rand((3000, 40), dt)), tol=EXACT)


def test_scatter_edge_errors():
    t = tensor(rand((3, 4), "float32"))
    s = tensor(rand((3, 4), "float32"))
    both_raise("ingot_scatter", t, 0, idx_t([[0, 3]]), s)
    both_raise("ingot_scatter_add", t, 1, idx_t([[0, -1]]), s)
    diff("ingot_scatter_add", t, 0, idx_t(np.zeros((0, 4))), s)
    diff("ingot_scatter", tensor(np.float32(1)), 0, idx_t(0), tensor(np.float32(5)))
    diff("ingot_scatter_add", tensor(np.float32(1)), 0, idx_t([0]), tensor(np.float32(5)))


# ---------------------------------------------------------------- index_put
@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("acc", [False, True])
def test_index_put(dt, acc):
    t = rand((5, 4, 3), dt)
    i0 = idx_t([0, 4, -1, 2, 0, 0])  # duplicates (0 three times, 4 twice via -1)
    i1 = idx_t([1, 3, 0, -4, 1, 1])
    diff("ingot_index_put", tensor(t), [i0], 1, tensor(rand((6, 4, 3), dt, True)), acc, tol=EXACT)
    diff("ingot_index_put", tensor(t), [i0, i1], 2, tensor(rand((6, 3), dt)), acc, tol=EXACT)
    diff("ingot_index_put", transposed(t), [i0, i1], 2, strided(rand((6, 3), dt)), acc, tol=EXACT)
    # broadcast value and broadcast indices
    diff("ingot_index_put", tensor(t), [idx_t([[0], [2]]), idx_t([1, 2, 3])], 2,
         tensor(rand((3,), dt)), acc, tol=EXACT)
    # bool mask
    m = tensor(rand((5, 4), "bool"))
    diff("ingot_index_put", tensor(t), [m], 1, tensor(rand((3,), dt)), acc, tol=EXACT)


@pytest.mark.parametrize("dt", ["int32", "int64", "float16", "bfloat16", "float32", "float64",
                                "complex64", "bool"])
def test_index_put_accumulate_heavy(dt):
    n = (1 << 20) + 1
    t = rand((50,), dt)
    i = idx_t(rng.integers(-50, 50, size=n))
    diff("ingot_index_put", tensor(t), [i], 1, tensor(rand((n,), dt)), True, tol=EXACT)
    diff("ingot_index_put", tensor(t), [i], 1, tensor(rand((n,), dt)), False, tol=EXACT)
    # embedding-backward shape: rows of 96
    t2 = rand((30, 96), dt)
    i2 = idx_t(rng.integers(0, 30, size=5000))
    diff("ingot_index_put", tensor(t2), [i2], 1, tensor(rand((5000, 96), dt)), True, tol=EXACT)


def test_index_put_edge_errors():
    t = tensor(rand((4, 3), "float32"))
    v = tensor(rand((2,), "float32"))
    both_raise("ingot_index_put", t, [idx_t([0, 4])], 1, tensor(rand((2, 3), "float32")), False)
    both_raise("ingot_index_put", t, [idx_t([0, -5])], 1, tensor(rand((2, 3), "float32")), True)
    both_raise("ingot_index_put", t, [idx_t([0, 1]), idx_t([2, 3])], 2, v, False)
    diff("ingot_index_put", t, [idx_t(np.zeros(0))], 1, tensor(np.float32(1)), True)
    diff("ingot_index_put", tensor(np.zeros((4, 0), np.float32)), [idx_t([1, 2])], 1,
         tensor(np.float32(1)), True)


# ---------------------------------------------------------------- masked_fill
@pytest.mark.parametrize("dt", ALL)
def test_masked_fill(dt):
    t = rand((6, 5), dt, True)
    m = rand((6, 5), "bool")
    for v in (1.5, -3.0, 0.0, float("nan"), float("inf")):
        if dt not in ("float16", "bfloat16", "float32", "float64", "complex64", "complex128") \
                and v != v:
            continue
        diff("ingot_masked_fill", tensor(t), tensor(m), v)
    diff("ingot_masked_fill", transposed(t), tensor(m), 2.0)
    diff("ingot_masked_fill", tensor(t), tensor(rand((5,), "bool")), 7.0)  # broadcast mask
    diff("ingot_masked_fill", strided(t), transposed(m), -1.0)
    diff("ingot_masked_fill", tensor(t), tensor(rand((6, 1), "bool")), 7.0)


def test_masked_fill_edge():
    diff("ingot_masked_fill", tensor(np.float32(2)), tensor(np.bool_(True)), 9.0)
    diff("ingot_masked_fill", tensor(np.zeros((0, 3), np.int32)), tensor(rand((3,), "bool")), 1.0)
    big = rand((1 << 21,), "float16")
    diff("ingot_masked_fill", tensor(big), tensor(rand((1 << 21,), "bool")), -2.0)


# ---------------------------------------------------------------- masked_select / nonzero
@pytest.mark.parametrize("dt", ALL)
def test_masked_select(dt):
    t = rand((7, 9), dt, True)
    m = rand((7, 9), "bool")
    diff("ingot_masked_select", tensor(t), tensor(m))
    diff("ingot_masked_select", transposed(t), tensor(m))
    diff("ingot_masked_select", tensor(t), tensor(rand((9,), "bool")))  # broadcast mask
    diff("ingot_masked_select", tensor(rand((9,), dt)), tensor(m))  # broadcast t
    diff("ingot_masked_select", strided(t), transposed(m))
    diff("ingot_masked_select", tensor(t), tensor(np.zeros((7, 9), bool)))
    diff("ingot_masked_select", tensor(t), tensor(np.ones((7, 9), bool)))


def test_masked_select_edge_large():
    diff("ingot_masked_select", tensor(np.float32(3)), tensor(np.bool_(True)))
    diff("ingot_masked_select", tensor(np.float32(3)), tensor(np.bool_(False)))
    diff("ingot_masked_select", tensor(np.zeros((0, 4), np.int64)), tensor(rand((4,), "bool")))
    n = (1 << 21) + 77
    diff("ingot_masked_select", tensor(rand((n,), "int64")), tensor(rng.random(n) < 0.3))
    diff("ingot_masked_select", transposed(rand((1500, 1001), "float32")),
         tensor(rng.random((1500, 1001)) < 0.5))


@pytest.mark.parametrize("dt", ALL)
def test_nonzero(dt):
    t = rand((5, 6, 4), dt, True)  # NaN counts, -0.0 does not
    diff("ingot_nonzero", tensor(t))
    diff("ingot_nonzero", transposed(t))
    diff("ingot_nonzero", strided(t))
    diff("ingot_nonzero", tensor(rand((13,), dt)))
    z = np.zeros((3, 4), dtype=npdt(dt))
    diff("ingot_nonzero", tensor(z))


def test_nonzero_edge_large():
    diff("ingot_nonzero", tensor(np.float32(0)))
    diff("ingot_nonzero", tensor(np.float32(-2)))
    diff("ingot_nonzero", tensor(np.zeros((0, 5), np.float32)))
    x = np.zeros(8, np.float32)
    x[1], x[3], x[5] = -0.0, np.nan, 1e-45  # subnormal counts
    diff("ingot_nonzero", tensor(x))
    big = (rng.random((1 << 10, 1 << 11)) < 0.01).astype(np.float16)
    diff("ingot_nonzero", tensor(big))
    diff("ingot_nonzero", transposed(big))
    expanded = call("ingot_expand", tensor(rand((1, 300), "int32")), 2, [4000, 300])
    diff("ingot_nonzero", expanded)


# ---------------------------------------------------------------- embedding
@pytest.mark.parametrize("dt", ALL)
def test_embedding(dt):
    w = rand((11, 7), dt, True)
    i = idx_t(rng.integers(0, 11, size=(3, 5)))
    diff("ingot_embedding", tensor(w), i)
    diff("ingot_embedding", transposed(w), i)  # strided rows
    diff("ingot_embedding", strided(w), i)
    diff("ingot_embedding", tensor(w), idx_t(4))  # 0-dim index
    diff("ingot_embedding", tensor(w), tensor(np.array([10, 0], np.int32)))


@pytest.mark.parametrize("d", [1, 3, 8, 16, 33, 64, 4096])
def test_embedding_row_widths(d):
    # row lengths that allow 1..16-byte vectors, and unaligned row starts
    for dt in ("bfloat16", "float32", "int8"):
        w = rand((50, d), dt)
        i = idx_t(rng.integers(0, 50, size=257))
        diff("ingot_embedding", tensor(w), i)
        wv = call("ingot_narrow", tensor(rand((50, d + 1), dt)), 1, 1, d)  # offset rows
        diff("ingot_embedding", wv, i)


def test_embedding_edge_errors():
    w = tensor(rand((6, 4), "float32"))
    both_raise("ingot_embedding", w, idx_t([0, 6]))
    both_raise("ingot_embedding", w, idx_t([[1, -1]]))
    diff("ingot_embedding", w, idx_t(np.zeros((0, 3))))
    diff("ingot_embedding", tensor(np.zeros((6, 0), np.float32)), idx_t([1, 2]))
    big = rand((1000, 1100), "bfloat16")
    diff("ingot_embedding", tensor(big), idx_t(rng.integers(0, 1000, size=2000)))
