"""Property tests: random shapes, strides (negative and zero), orders, byte
orders and dtypes give the numbers of the NumPy reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import posenc
from posenc import reference

settings.register_profile("ci", max_examples=60, deadline=None)
settings.load_profile("ci")

NUMERIC = st.sampled_from(
    ["<i1", "<i2", ">i4", "<i8", "<u1", ">u2", "<u4", "<f2", ">f4", "<f4", ">f8", "<f8"]
)


@st.composite
def strided_views(draw, dtype_strategy=NUMERIC, max_dims=3, elements=None):
    """An array seen through a random view: steps (negative too), a
    transpose, or a broadcast (zero strides)."""
    dtype = np.dtype(draw(dtype_strategy))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=6))
    if elements is None:
        if dtype.kind == "f":
            bound = 6e4 if dtype.itemsize == 2 else 1e5
            elements = st.floats(-bound, bound, width=8 * dtype.itemsize)
        else:
            info = np.iinfo(dtype)
            elements = st.integers(max(info.min, -(10**5)), min(info.max, 10**5))
    base = draw(hnp.arrays(dtype, shape, elements=elements))
    how = draw(st.sampled_from(["plain", "steps", "transpose", "broadcast"]))
    if how == "steps" and base.ndim:
        steps = tuple(draw(st.sampled_from([1, 2, -1, -2])) for _ in range(base.ndim))
        return base[tuple(slice(None, None, s) for s in steps)]
    if how == "transpose":
        return base.T
    if how == "broadcast" and base.ndim and base.size:
        return np.broadcast_to(base[:1], (3,) + base.shape[1:])
    return base


@given(
    positions=strided_views(),
    half=st.integers(1, 12),
    layout=st.sampled_from(["interleaved", "concat"]),
    dtype=st.sampled_from(["float16", "float32", "float64"]),
)
def test_sinusoid_any_positions_layout_match_reference(positions, half, layout, dtype):
    dim = 2 * half
    got = posenc.sinusoid(positions, dim, layout=layout, dtype=dtype)
    contiguous = np.ascontiguousarray(positions, dtype=np.float64)
    want = reference.sinusoid(contiguous, dim, layout=layout, dtype="float64")
    assert got.shape == positions.shape + (dim,)
    # float64: the reference's np.sin may itself be ~4 ulp off (NumPy 1.x)
    ulps = 4 if dtype == "float64" else 1
    tol = ulps * np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    assert (np.abs(got.astype(np.float64) - want) <= tol).all()


@given(
    n=st.integers(0, 40),
    half=st.integers(1, 10),
    order=st.sampled_from(["C", "F"]),
    byteorder=st.sampled_from(["<", ">"]),
    row_step=st.sampled_from([1, 2, -1, -3]),
    col_step=st.sampled_from([1, 2, -1]),
    dtype=st.sampled_from(["f2", "f4", "f8"]),
)
def test_sinusoid_out_any_layout(n, half, order, byteorder, row_step, col_step, dtype):
    dim = 2 * half
    dt = np.dtype(byteorder + dtype)
    big = np.full((n * abs(row_step), dim * abs(col_step)), -7.0, dt, order=order)
    out = big[::row_step, ::col_step]
    assert out.shape == (n, dim)
    res = posenc.sinusoid(n, dim, out=out)
    assert res is out
    want = posenc.sinusoid(n, dim, dtype=dtype)
    np.testing.assert_array_equal(out.astype(np.float64), want.astype(np.float64))
    untouched = np.ones(big.shape, bool)
    untouched[::row_step, ::col_step] = False
    assert (big[untouched] == -7.0).all()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sinusoid_read_only_broadcast_positions(dtype):
    pos = np.broadcast_to(np.arange(5.0), (4, 5))
    assert not pos.flags.writeable
    got = posenc.sinusoid(pos, 8, dtype=dtype)
    np.testing.assert_array_equal(
        got, np.broadcast_to(posenc.sinusoid(5, 8, dtype=dtype), (4, 5, 8))
    )
