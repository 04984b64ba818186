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
    of both signs, float16's overflow and underflow."""
    x = rng.standard_normal(n).astype(np.float32) * np.float32(1000)
    halfway = (np.arange(1, 40, dtype=np.float32) + np.float32(0.5)) * np.float32(2.0**-7)
    return np.concatenate([x, halfway, -halfway, np.float32([0.0, -0.0, 65520.0, 1e-8])])


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
