"""Property tests: random shapes, strides (negative and zero), orders, byte
orders and dtypes give the numbers of the NumPy reference."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rope_checks import tolerance

import posenc
from posenc import reference

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("POSENC_HYPOTHESIS_PROFILE", "ci"))

NUMERIC = st.sampled_from(
    ["<i1", "<i2", ">i4", "<i8", "<u1", ">u2", "<u4", "<f2", ">f4", "<f4", ">f8", "<f8"]
)


@st.composite
def strided_views(draw, dtype_strategy=NUMERIC, elements=None):
    """An array seen through a random view: steps (negative too), a
    transpose, or a broadcast (zero strides)."""
    dtype = np.dtype(draw(dtype_strategy))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
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
    if positions.ndim == 0 and positions.dtype.kind in "iu":
        positions = positions.astype(np.float64)  # a 0-d integer is a length (test_inputs.py)
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


# ---------------------------------------------------------------- rotary

FLOATS = st.sampled_from(["<f2", ">f2", "<f4", ">f4", "<f8", ">f8"])


@st.composite
def rope_inputs(draw):
    dtype = draw(FLOATS)
    lead = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    dim = 2 * draw(st.integers(1, 10))
    base = draw(
        hnp.arrays(
            dtype, lead + (dim,), elements=st.floats(-4, 4, width=8 * np.dtype(dtype).itemsize)
        )
    )
    how = draw(st.sampled_from(["plain", "reversed", "fortran", "padded"]))
    if how == "reversed":
        x = base[::-1]
    elif how == "fortran":
        x = np.asfortranarray(base)
    elif how == "padded":
        wide = np.zeros(lead + (dim + 2,), dtype)
        wide[..., 1 : dim + 1] = base
        x = wide[..., 1 : dim + 1]
    else:
        x = base
    return x


@given(
    x=rope_inputs(),
    layout=st.sampled_from(["half", "interleaved"]),
    partial=st.booleans(),
    inverse=st.booleans(),
    offset=st.integers(0, 1000),
    explicit=st.booleans(),
    data=st.data(),
)
def test_apply_rope_any_layout_matches_reference(
    x, layout, partial, inverse, offset, explicit, data
):
    dim = x.shape[-1]
    rotary_dim = 2 * data.draw(st.integers(1, dim // 2)) if partial else None
    kwargs = dict(layout=layout, rotary_dim=rotary_dim, inverse=inverse, offset=offset)
    if explicit:  # positions broadcast along some leading axes
        pshape = tuple(n if data.draw(st.booleans()) else 1 for n in x.shape[:-1])
        positions = data.draw(hnp.arrays(np.int32, pshape, elements=st.integers(0, 5000)))
        args = (x, positions)
    else:  # offset + arange along the sequence axis
        args = (x,)
        kwargs["seq_axis"] = -2
    before = x.copy()
    got = posenc.apply_rope(*args, **kwargs)
    want = reference.apply_rope(np.array(x, dtype=x.dtype.newbyteorder("=")), *args[1:], **kwargs)
    np.testing.assert_array_equal(x, before)  # the input is not touched
    assert got.shape == x.shape and got.dtype.itemsize == x.dtype.itemsize
    tol = tolerance(x, x.dtype.newbyteorder("=").type, positions_max=6000.0)
    err = np.abs(np.asarray(got, np.float64) - want)
    assert err.max(initial=0.0) <= tol


# ---------------------------------------------------------------- attention biases


@given(
    n_heads=st.integers(1, 6),
    q_len=st.integers(1, 12),
    extra=st.integers(0, 12),
    causal=st.booleans(),
    q_offset=st.one_of(st.none(), st.integers(-5, 30)),
    dtype=st.sampled_from(["f2", "f4", "f8"]),
    batch=st.sampled_from([(), (2,), (2, 1)]),
    layout=st.sampled_from(["C", "F", "swapped", "reversed"]),
)
def test_alibi_scores_any_layout_match_reference(
    n_heads, q_len, extra, causal, q_offset, dtype, batch, layout
):
    k_len = q_len + extra
    shape = batch + (n_heads, q_len, k_len)
    base = np.random.default_rng(q_len).standard_normal(shape).astype(dtype)
    if layout == "F":
        scores = np.asfortranarray(base)
    elif layout == "swapped":
        scores = base.astype(np.dtype(dtype).newbyteorder())
    elif layout == "reversed":
        scores = base[..., ::-1, :].copy()[..., ::-1, :]
    else:
        scores = base.copy()
    want = reference.alibi_bias(
        n_heads, q_len, k_len, causal=causal, q_offset=q_offset, scores=base.copy()
    )
    got = posenc.alibi_bias(n_heads, q_len, k_len, causal=causal, q_offset=q_offset, scores=scores)
    assert got is scores
    np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))


@given(
    num_buckets=st.integers(2, 40),
    n_heads=st.integers(1, 4),
    q_len=st.integers(1, 10),
    k_len=st.integers(1, 10),
    bidirectional=st.booleans(),
    max_distance=st.integers(41, 300),
    q_offset=st.integers(-20, 20),
    table_dtype=st.sampled_from(["<f4", ">f4", "<f8", "<f2"]),
    transpose=st.booleans(),
)
def test_t5_bias_any_table_layout_matches_reference(
    num_buckets,
    n_heads,
    q_len,
    k_len,
    bidirectional,
    max_distance,
    q_offset,
    table_dtype,
    transpose,
):
    values = np.random.default_rng(num_buckets).standard_normal((num_buckets, n_heads))
    table = values.astype(table_dtype)
    if transpose:
        table = np.asfortranarray(table)
    kw = dict(bidirectional=bidirectional, max_distance=max_distance, q_offset=q_offset)
    got = posenc.t5_bias(table, q_len, k_len, **kw)
    want = reference.t5_bias(
        np.array(table, dtype=table.dtype.newbyteorder("=")), q_len, k_len, **kw
    )
    np.testing.assert_array_equal(got, want)


@given(
    rel=strided_views(
        st.sampled_from(["<i8", ">i4", "<i2", ">i8"]),
        elements=st.integers(-5000, 5000),
    ),
    bidirectional=st.booleans(),
    num_buckets=st.integers(2, 64),
    max_distance=st.integers(65, 2000),
)
def test_relative_position_bucket_any_layout_matches_reference(
    rel, bidirectional, num_buckets, max_distance
):
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    got = posenc.relative_position_bucket(rel, **kw)
    want = reference.relative_position_bucket(np.ascontiguousarray(rel, dtype=np.int64), **kw)
    assert got.dtype == np.int64 and got.shape == rel.shape
    np.testing.assert_array_equal(got, want)
