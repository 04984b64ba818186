"""posenc._core.cast: float32 (float64) values rounded once to the kernels'
element types, as NumPy's astype and ml_dtypes round them, on every path;
and the arguments it refuses, named."""

import ml_dtypes
import numpy as np
import pytest
from special_bits import SPECIAL_BITS

from posenc import _core


def _values(rng, n):
    """Normal values, values on bfloat16's halfway points (ties to even), zeros
    of both signs, float16's overflow and underflow, and float32's subnormals
    (bfloat16's too: its range is float32's), ties among them included, in
    runs of their own and amid normal values (the vector paths convert
    sixteen at a time, and some take a vector holding a subnormal apart)."""
    x = rng.standard_normal(n).astype(np.float32) * np.float32(1000)
    halfway = (np.arange(1, 40, dtype=np.float32) + np.float32(0.5)) * np.float32(2.0**-7)
    bits = rng.integers(1, 1 << 23, 64, dtype=np.uint32)
    bits[::4] = bits[::4] & ~np.uint32(0xFFFF) | np.uint32(0x8000)  # ties
    bits[1::4] |= np.uint32(1 << 31)  # negative
    subnormal = bits.view(np.float32)
    mixed = x[:64].copy()
    mixed[::7] = subnormal[::7]
    return np.concatenate(
        [x, halfway, -halfway, np.float32([0.0, -0.0, 65520.0, 1e-8]), subnormal, mixed]
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_cast_rounds_as_astype(dtype, simd, rng):
    x = np.concatenate(
        [_values(rng, 1000), np.array(SPECIAL_BITS["float32"][0], np.uint32).view(np.float32)]
    )
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    out = np.empty(x.shape, np.uint16 if dtype == "bfloat16" else dtype)
    _core.cast(x, out)
    got = out.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else out
    finite = np.isfinite(x)
    np.testing.assert_array_equal(
        got[finite].view(f"u{out.itemsize}"), want[finite].view(f"u{out.itemsize}")
    )
    # NaNs stay NaNs of the same sign, made quiet; infinities stay
    assert np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(x))
    assert np.array_equal(np.signbit(got.astype(np.float32)), np.signbit(x))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_dense_add_rounds_each_sum_once_on_every_path(dtype, simd, rng):
    # rel_dense_add (a dense term added into scores: pe_row_add's PE_ROW_SUM)
    # against the float32 sum of NumPy and ml_dtypes, rounded once
    x = _values(rng, 1000)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        scores = _values(rng, 1000)[::-1].astype(np_dtype)
        want = (scores.astype(np.float32) + x).astype(np_dtype)
    got = scores.copy()
    view = got.view(np.uint16) if dtype == "bfloat16" else got
    _core.rel_dense_add(x.reshape(1, 1, 1, -1), view.reshape(1, 1, 1, -1), False)
    ok = np.isfinite(want.astype(np.float32))
    u = f"u{got.itemsize}"
    np.testing.assert_array_equal(got[ok].view(u), want[ok].view(u))
    assert np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_row_kernels_give_the_same_bits_on_every_path(dtype, on_every_path, rng):
    # the cast, the dense add and the dense store on NaNs with payloads,
    # infinities, subnormals and ties: every path and thread count bit for bit
    # (a NaN never meets a NaN: which of two comes out is the compiler's)
    special = np.array(SPECIAL_BITS["float32"][0], np.uint32).view(np.float32)
    x = np.concatenate([_values(rng, 200), special, special[::-1]])
    y = _values(rng, 200)[::-1]
    y[5 : 5 + 2 * len(special)] = np.tile(special, 2)
    with np.errstate(invalid="ignore", over="ignore"):
        bits = np.concatenate([y, np.ones(2 * len(special), np.float32)]).astype(
            ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
        )

    def rows():
        out = np.empty(x.shape, np.uint16 if dtype == "bfloat16" else dtype)
        _core.cast(x, out)
        added = bits.copy().view(out.dtype)
        _core.rel_dense_add(x.reshape(1, 1, 1, -1), added.reshape(1, 1, 1, -1), False)
        stored = np.empty_like(out)
        _core.rel_dense_add(x.reshape(1, 1, 1, -1), stored.reshape(1, 1, 1, -1), True)
        return np.concatenate([out.view(np.uint16), added.view(np.uint16), stored.view(np.uint16)])

    results = on_every_path(rows)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_cast_float64_is_a_copy(simd, rng):
    x = rng.standard_normal(37)
    out = np.empty(37)
    _core.cast(x, out)
    np.testing.assert_array_equal(out, x)


def test_cast_matches_the_dense_store(rng):
    """The cast gives the bits rel_dense_add(term, out, True) gave."""
    x = _values(rng, 333)
    out = np.empty(x.shape, np.uint16)
    dense = np.empty(x.shape, np.uint16)
    _core.cast(x, out)
    _core.rel_dense_add(x.reshape(1, 1, 1, -1), dense.reshape(1, 1, 1, -1), True)
    np.testing.assert_array_equal(out, dense)


def test_cast_bad_arguments():
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="out must have dtype float16"):
        _core.cast(x, np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="x must have native dtype"):
        _core.cast(x.astype(np.float64), np.zeros(4, np.uint16))
    with pytest.raises(ValueError, match="out must have the length of x"):
        _core.cast(x, np.zeros(5, np.uint16))
    with pytest.raises(ValueError, match="out must not overlap x"):
        buf = np.zeros(8, np.float32)
        _core.cast(buf[:4], buf[2:6])
