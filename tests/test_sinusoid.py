"""sinusoid(): the C kernel against the NumPy twin, hand-computed values,
float64 at long positions, and bad input."""

import math
import os

import child_process
import numpy as np
import pytest

import posenc
from posenc import _core, reference

DTYPES = ["float32", "float64", "float16"]
LAYOUTS = ["interleaved", "concat"]
# allowed difference from the NumPy reference, in ulps of the output dtype.
# float64: the reference's own np.sin/np.cos may be up to ~4 ulp off (NumPy 1.x
# on AVX-512 CPUs); posenc's 2-ulp bound is checked against 200-bit values below.
ULPS = {"float16": 1, "float32": 1, "float64": 4}


def frequencies(dim, base=10000.0):
    """The float64 frequencies 1 / base**(2i/dim), as transformers forms them."""
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def exact_entries(positions, dim, rows, cols, base=10000.0):
    """Interleaved table entries [rows, cols]: sin/cos of the float64 angle
    fl(position * frequency) (the spec's "float64 value"), evaluated with
    200-bit arithmetic."""
    mpmath = pytest.importorskip("mpmath")
    w = frequencies(dim, base)
    with mpmath.workprec(200):
        out = []
        for r, c in zip(rows, cols):
            angle = mpmath.mpf(float(np.float64(positions[r]) * w[c // 2]))
            out.append(float(mpmath.sin(angle) if c % 2 == 0 else mpmath.cos(angle)))
    return np.array(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n, dim", [(0, 8), (1, 2), (5, 6), (37, 16), (100, 130), (257, 512)])
def test_int_positions_match_reference(simd, threads, dtype, layout, n, dim, ulp_distance):
    got = posenc.sinusoid(n, dim, layout=layout, dtype=dtype)
    want = reference.sinusoid(n, dim, layout=layout, dtype="float64")
    assert got.shape == (n, dim) and got.dtype == np.dtype(dtype)
    assert (ulp_distance(got, want, dtype) <= ULPS[dtype]).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "positions",
    [
        np.float64(3.5),
        np.arange(10) * 2.5,  # the skip-position attack, k = 2.5
        np.arange(64).reshape(4, 16) * 3,  # evenly spaced, 2-D
        np.array([[0.25, 7.0, 1e5], [-3.0, 2.0**20, 12.5]]),
        np.arange(50, dtype=np.int32)[::-1],  # descending ints
        np.array([5, 5, 5, 5], dtype=np.uint16),  # step 0
        np.arange(24, dtype=np.float32).reshape(2, 3, 4) + 0.5,
    ],
)
def test_array_positions_match_reference(simd, threads, dtype, layout, positions, ulp_distance):
    dim = 20
    got = posenc.sinusoid(positions, dim, layout=layout, dtype=dtype)
    want = reference.sinusoid(positions, dim, layout=layout, dtype="float64")
    assert got.shape == np.shape(positions) + (dim,)
    assert (ulp_distance(got, want, dtype) <= ULPS[dtype]).all()


def test_random_positions_match_reference(simd, threads, rng, ulp_distance):
    pos = rng.uniform(-1e4, 1e6, size=(300,))
    for dtype in DTYPES:
        got = posenc.sinusoid(pos, 66, dtype=dtype, base=500.0)
        want = reference.sinusoid(pos, 66, base=500.0, dtype="float64")
        assert (ulp_distance(got, want, dtype) <= ULPS[dtype]).all()


def test_hand_computed_table():
    # dim 4: w_0 = 1, w_1 = 10000**(-2/4) = 0.01
    want = np.array(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)]
    )
    np.testing.assert_allclose(posenc.sinusoid(3, 4, dtype="float64"), want, rtol=0, atol=1e-16)
    concat = posenc.sinusoid(3, 4, layout="concat", dtype="float64")
    np.testing.assert_allclose(concat, want[:, [0, 2, 1, 3]], rtol=0, atol=1e-16)
    assert posenc.sinusoid(1, 6).tolist() == [[0.0, 1.0, 0.0, 1.0, 0.0, 1.0]]


@pytest.mark.parametrize("around", [2**20, 10**6, 2**24])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_long_positions_within_one_ulp_of_float64_value(simd, around, dtype, ulp_distance, rng):
    # An evenly spaced run (rotation path) and scattered positions (direct
    # path) near `around`; every entry below 1e-3 in magnitude (where the
    # rotation's phase would show) and a random sample, against 200-bit values.
    runs = [around - 512 + np.arange(1024.0), around - np.arange(0.0, 4096, 37)[::-1]]
    for pos in runs:
        got = posenc.sinusoid(pos, 256, dtype=dtype)
        small = np.nonzero(np.abs(got.astype(np.float64)) < 1e-3)
        rows = np.concatenate([small[0][:200], rng.integers(0, len(pos), 300)])
        cols = np.concatenate([small[1][:200], rng.integers(0, 256, 300)])
        exact = exact_entries(pos, 256, rows, cols)
        assert ulp_distance(got[rows, cols], exact, dtype).max() <= 1


def test_long_positions_float64_few_ulp(simd, ulp_distance, rng):
    pos = 2.0**24 - np.arange(300.0)
    got = posenc.sinusoid(pos, 128, dtype="float64")
    rows, cols = rng.integers(0, 300, 400), rng.integers(0, 128, 400)
    exact = exact_entries(pos, 128, rows, cols)
    assert ulp_distance(got[rows, cols], exact, "float64").max() <= 2


def test_float32_phase_loses_accuracy_where_posenc_does_not():
    # The common float32 formulation: angle = float32(p) * float32(w).
    pos = 2**24 - np.arange(64)
    w = frequencies(64)
    angle = pos[:, None] * w
    exact = np.stack([np.sin(angle), np.cos(angle)], -1).reshape(64, 64)
    phase32 = pos.astype(np.float32)[:, None] * w.astype(np.float32)
    naive = np.stack([np.sin(phase32), np.cos(phase32)], -1).reshape(64, 64)
    assert np.abs(naive - exact).max() > 0.1
    assert np.abs(posenc.sinusoid(pos, 64) - exact).max() < 1e-7


def test_positions_scalar_int_is_a_length_and_float_is_a_position():
    assert posenc.sinusoid(np.int64(4), 8).shape == (4, 8)
    assert posenc.sinusoid(4.0, 8).shape == (8,)
    np.testing.assert_array_equal(posenc.sinusoid(4.0, 8), posenc.sinusoid(5, 8)[4])


def test_base_changes_frequencies():
    got = posenc.sinusoid([1.0], 4, base=100.0, dtype="float64")[0]
    want = [math.sin(1), math.cos(1), math.sin(0.1), math.cos(0.1)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-16)


def test_dtype_follows_out_when_not_given():
    out = np.empty((5, 8), np.float16)
    assert posenc.sinusoid(5, 8, out=out).dtype == np.float16


SAME_BITS_CASES = [
    # rotated rows with the floor recomputed, float16 values under its normal
    # range (base 1e6), a column tail (dim 66, 18), a block of four (dim 8)
    (2.0**20 + 3 * np.arange(257.0), 66, 1e6),
    (300, 256, 1e6),
    (-37 + np.arange(100.0), 8, 10.0),
    (np.arange(70.0) * 0.25, 18, 30.0),
    # uneven positions: every row direct
    (np.array([0.0, 1.5, 7.25, 1e6, 3.0, 2.0**30]), 32, 10000.0),
    # 8 MiB: many cells on each thread
    (16384, 256, 10000.0),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_simd_path_gives_the_same_bits(on_every_path, dtype, layout):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")  # the test extra installs it
    for positions, dim, base in SAME_BITS_CASES:
        tables = on_every_path(
            lambda p=positions, d=dim, b=base: posenc.sinusoid(
                p, d, base=b, layout=layout, dtype=dtype
            )
        )
        for t in tables[1:]:
            np.testing.assert_array_equal(t.view(np.uint8), tables[0].view(np.uint8))
    # the rare values (float16's below its normal range) are among them
    small = np.abs(posenc.sinusoid(300, 256, base=1e6, dtype="float16").astype(np.float32))
    assert ((small > 0) & (small < 2**-14)).any()


# positions every kernel of a path meets rarely: at and past the
# reduction's bound (2**50: the C library's sin and cos), subnormal, signed
# zeros, and a float64 table (every value direct); sin and cos of the tiny
# angles are the subnormal values of every output type
SPECIAL_POSITIONS = np.array(
    [1.7e308, -1.7e308, 1e300, 2.0**50, -(2.0**50), 2.0**50 - 1, 5e-324, -0.0, 0.0]
    + [1e-310, 2.0**-1022, 1e-40, 3e-8, 3.0, -7.5, 1e15 + 0.5, 123456789.0]
)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [2, 16, 24, 34])
def test_every_simd_path_gives_the_same_bits_at_special_positions(
    on_every_path, dtype, layout, dim
):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    tables = on_every_path(
        lambda: posenc.sinusoid(SPECIAL_POSITIONS, dim, layout=layout, dtype=dtype)
    )
    for t in tables[1:]:
        np.testing.assert_array_equal(t.view(np.uint8), tables[0].view(np.uint8))
    # column 0 (frequency 1): the C library's sine past the bound, the tiny
    # angles' sines (themselves: subnormal in every output type), rounded once
    # (a zero, of either sign, gives +0)
    want = np.array([math.sin(p) + 0.0 for p in SPECIAL_POSITIONS]).astype(tables[0].dtype)
    np.testing.assert_array_equal(tables[0][:, 0].copy().view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_every_simd_path_gives_the_same_bits_past_the_caches(on_every_path, dtype):
    # 4096 x 1024 elements: 8 MiB and more, which a path may write with
    # non-temporal stores; rows starting off a cache line (a view 16 bytes in)
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
        import ml_dtypes

        dtype = ml_dtypes.bfloat16

    def make():
        buf = np.zeros(4096 * 1024 * np.dtype(dtype).itemsize + 64, np.uint8)
        at = (-buf.ctypes.data) % 64 + 16
        out = buf[at : at + 4096 * 1024 * np.dtype(dtype).itemsize].view(dtype)
        return posenc.sinusoid(4096, 1024, out=out.reshape(4096, 1024)).copy()

    tables = on_every_path(make)
    for t in tables[1:]:
        np.testing.assert_array_equal(t.view(np.uint8), tables[0].view(np.uint8))


# ---------------------------------------------------------------- out=


def out_arrays(shape, dtype):
    n, dim = shape
    yield np.empty(shape, dtype)
    yield np.empty(shape, dtype, order="F")
    yield np.empty((n, dim + 6), dtype)[:, 3 : 3 + dim]  # padded rows
    yield np.empty((2 * n, dim), dtype)[::2]  # every other row
    yield np.empty((n, dim), dtype)[::-1]  # negative row stride
    yield np.empty((n, 2 * dim), dtype)[:, ::2]  # strided last axis
    yield np.empty(shape, np.dtype(dtype).newbyteorder())  # byte-swapped


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_any_layout_gives_same_numbers(dtype):
    want = posenc.sinusoid(33, 18, dtype=dtype)
    for out in out_arrays((33, 18), dtype):
        res = posenc.sinusoid(33, 18, out=out)
        assert res is out
        np.testing.assert_array_equal(np.asarray(out, dtype=np.float64), want.astype(np.float64))


def test_out_with_nd_positions():
    pos = np.arange(12.0).reshape(3, 4)
    out = np.empty((3, 4, 10), np.float32)
    assert posenc.sinusoid(pos, 10, out=out) is out
    np.testing.assert_array_equal(out, posenc.sinusoid(pos, 10))
    big = np.zeros((3, 8, 10), np.float32)
    posenc.sinusoid(pos, 10, out=big[:, ::2])
    np.testing.assert_array_equal(big[:, ::2], out)
    assert not big[:, 1::2].any()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"dim": 7}, ValueError, "dim"),
        ({"dim": 0}, ValueError, "dim"),
        ({"dim": -4}, ValueError, "dim"),
        ({"dim": 8.0}, TypeError, "dim"),
        ({"dim": True}, TypeError, "dim"),
        ({"positions": -1}, ValueError, "positions"),
        ({"positions": ["a", "b"]}, TypeError, "positions"),
        ({"positions": np.array([1 + 2j])}, TypeError, "positions"),
        ({"positions": [0.0, np.nan]}, ValueError, "finite"),
        ({"positions": [np.inf]}, ValueError, "finite"),
        ({"positions": True}, TypeError, "positions"),
        ({"base": 0.0}, ValueError, "base"),
        ({"base": float("nan")}, ValueError, "base"),
        ({"base": "10000"}, TypeError, "base"),
        ({"layout": "half"}, ValueError, "layout"),
        ({"layout": 1}, TypeError, "layout"),
        ({"dtype": "int32"}, TypeError, "dtype"),
        ({"dtype": "complex64"}, TypeError, "dtype"),
    ],
)
def test_bad_arguments_raise_and_name_them(kwargs, exc, words):
    args = {"positions": 4, "dim": 8, **kwargs}
    with pytest.raises(exc, match=words):
        posenc.sinusoid(args.pop("positions"), args.pop("dim"), **args)


@pytest.mark.parametrize(
    "out, exc, words",
    [
        (np.zeros((4, 6), np.float32), ValueError, "shape"),
        (np.zeros((4, 8), np.int32), TypeError, "dtype"),
        (np.zeros((4, 8), np.float64), TypeError, "dtype"),
        ([[0.0] * 8] * 4, TypeError, "ndarray"),
    ],
)
def test_bad_out_raises(out, exc, words):
    with pytest.raises(exc, match=words):
        posenc.sinusoid(4, 8, dtype="float32", out=out)


def test_read_only_out_raises_and_is_untouched():
    out = np.full((4, 8), 7.0, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        posenc.sinusoid(4, 8, out=out)
    assert (out == 7.0).all()


def test_failed_call_leaves_out_unwritten():
    out = np.full((3, 8), 7.0, np.float32)
    with pytest.raises(ValueError):
        posenc.sinusoid([0.0, 1.0, np.nan], 8, out=out)
    with pytest.raises(TypeError):
        posenc.sinusoid(3, 8, layout=None, out=out)
    assert (out == 7.0).all()


def test_core_checks_its_arguments():
    pos, freq = np.arange(4.0), np.ones(2)
    out = np.empty((4, 4), np.float32)
    with pytest.raises(TypeError, match="positions"):
        _core.sinusoid([0.0], freq, out, 0)
    with pytest.raises(TypeError, match="positions"):
        _core.sinusoid(pos.astype(np.float32), freq, out, 0)
    with pytest.raises(ValueError, match="out must have shape"):
        _core.sinusoid(pos, freq, np.empty((4, 6), np.float32), 0)
    with pytest.raises(TypeError, match="out"):
        _core.sinusoid(pos, freq, np.empty((4, 4), np.int64), 0)
    with pytest.raises(ValueError, match="layout"):
        _core.sinusoid(pos, freq, out, 2)
    with pytest.raises(ValueError, match="contiguous"):
        _core.sinusoid(np.arange(8.0)[::2], freq, out, 0)
    shared = np.zeros(4 * 4 + 4)
    with pytest.raises(ValueError, match="overlap"):
        _core.sinusoid(shared[:4], freq, shared[2:18].reshape(4, 4), 0)


# ---------------------------------------------------------------- configuration


def run_python(code, **env):
    return child_process.run("-c", code, check=True, **env)


def test_posenc_simd_scalar_forces_portable_path():
    res = run_python("import posenc; print(posenc.simd_path())", POSENC_SIMD="scalar")
    assert res.stdout.strip() == "scalar"


def test_unknown_posenc_simd_warns_and_uses_auto():
    code = "import posenc; print(posenc.simd_path())"
    res = run_python(code, POSENC_SIMD="sse9", PYTHONWARNINGS="always")
    assert "POSENC_SIMD" in res.stderr
    assert res.stdout.strip() == _core.simd_cpu()


def test_omp_num_threads_is_honoured():
    res = run_python("import posenc; print(posenc.get_num_threads())", OMP_NUM_THREADS="1")
    assert res.stdout.strip() == "1"


def test_set_num_threads_round_trip():
    try:
        posenc.set_num_threads(3)  # at most the CPUs this process may run on
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        # a build without OpenMP runs every kernel on the calling thread
        assert posenc.get_num_threads() == (min(3, cpus) if _core.openmp else 1)
    finally:
        posenc.set_num_threads(0)
    with pytest.raises(ValueError, match="n"):
        posenc.set_num_threads(-1)
    with pytest.raises(TypeError, match="n"):
        posenc.set_num_threads(1.5)


def test_threadpoolctl_limits_posenc():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not _core.openmp:
        pytest.skip("built without OpenMP")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert posenc.get_num_threads() == 1


def test_show_config_and_info_command(capsys):
    posenc.show_config()
    text = capsys.readouterr().out
    assert posenc.__version__ in text and np.__version__ in text
    assert posenc.simd_path() in text and "thread" in text
    res = child_process.run("-m", "posenc", "info", check=True)
    assert res.stdout == text


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_huge_positions_still_reduce_correctly(simd, dtype, ulp_distance):
    # Past 2**50 radians the fast reduction gives way to the C library's:
    # the values stay sines and cosines of the float64 angle, never garbage.
    huge = [2.0**50, 2.0**52, 1e17, 1e20, 1e300, -3e18]
    runs = [np.array(huge), 2.0**52 + np.arange(40.0)]  # scattered, and evenly spaced
    for pos in runs:
        got = posenc.sinusoid(pos, 8, dtype=dtype)
        w = frequencies(8)
        angle = pos[:, None] * w
        exact = np.stack(
            [np.vectorize(math.sin)(angle), np.vectorize(math.cos)(angle)], axis=-1
        ).reshape(len(pos), 8)
        assert ulp_distance(got, exact, dtype).max() <= ULPS[dtype]
