"""Property tests: random shapes, strides (negative and zero), orders, byte
orders and dtypes give the numbers of the NumPy reference."""

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
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


@st.composite
def evenly_spaced_rope_calls(draw):
    """An evenly spaced run of positions (default arange, an offset, a step,
    per-batch ids) on a (batch, heads, seq, dim) array, head dims up to 2050
    (rows past 4 KiB), and one way of laying the same values out."""
    dim = 2 * draw(st.sampled_from([4, 32, 64, 513, 1024, 1025]))
    batch, heads = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    seq = draw(st.integers(1, 100))
    start = draw(st.sampled_from([0, 7, 12345, 3_000_000, -100_000]))
    step = draw(st.sampled_from([1, 3, -2]))
    ids = draw(st.sampled_from(["none", "seq", "batch_seq"]))
    how = draw(st.sampled_from(["contiguous", "cache_view", "reversed_batch", "seq_major", "out"]))
    dtype = draw(st.sampled_from(["float32", "float16"]))
    return dim, batch, heads, seq, start, step, ids, how, dtype


@given(
    call=evenly_spaced_rope_calls(),
    layout=st.sampled_from(["half", "interleaved"]),
    seed=st.integers(0, 2**32 - 1),
)
# rows past 4 KiB once made tiles that were not whole cells of the grid
@example(
    call=(2048, 1, 4, 10, 3_000_000, 1, "none", "contiguous", "float32"), layout="half", seed=0
)
# (batch, seq) ids on one head: batch and seq were merged into one axis (and
# its grid) when the strides allowed it, not in a view or into a cache
@example(call=(256, 2, 1, 100, 3_000_000, 1, "batch_seq", "out", "float32"), layout="half", seed=1)
@example(
    call=(256, 2, 1, 100, 1_000_000, 3, "batch_seq", "cache_view", "float32"), layout="half", seed=2
)
@example(
    call=(256, 3, 1, 90, 3_000_000, 1, "batch_seq", "reversed_batch", "float16"),
    layout="interleaved",
    seed=3,
)
def test_apply_rope_bits_do_not_depend_on_threads_paths_or_layout(call, layout, seed):
    # float32 cos/sin of evenly spaced positions come from an anchor grid on
    # the sequence index: the same bits whatever the threads, the SIMD path,
    # the memory layout, merged axes or a view into a longer buffer
    dim, batch, heads, seq, start, step, ids, how, dtype = call
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, heads, seq, dim)).astype(dtype)
    pos = start + step * np.arange(seq)
    positions = {"none": None, "seq": pos, "batch_seq": np.tile(pos, (batch, 1))}[ids]
    offset = start if ids == "none" else 0
    if ids == "none" and step != 1:
        positions = pos
        offset = 0
    want = posenc.apply_rope(x, positions, offset=offset, layout=layout)

    def call_once():
        if how == "contiguous":
            return posenc.apply_rope(x, positions, offset=offset, layout=layout)
        if how == "cache_view":
            cache = np.zeros((batch, heads, seq + 37, dim), dtype)
            cache[:, :, :seq] = x
            return posenc.apply_rope(cache[:, :, :seq], positions, offset=offset, layout=layout)
        if how == "reversed_batch":
            p = positions if positions is None or positions.ndim == 1 else positions[::-1]
            got = posenc.apply_rope(x[::-1], p, offset=offset, layout=layout)
            return got[::-1]
        if how == "seq_major":
            xt = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
            got = posenc.apply_rope(xt, positions, offset=offset, layout=layout, seq_axis=-3)
            return got.transpose(0, 2, 1, 3)
        cache = np.zeros((batch, heads, seq + 5, dim), dtype)
        posenc.apply_rope(x, positions, offset=offset, layout=layout, out=cache[:, :, :seq])
        return cache[:, :, :seq]

    paths = posenc._core.simd_paths()
    before = posenc._core.simd_path()
    try:
        for path in paths:
            posenc._core.set_simd(path)
            for threads in (1, 2):
                posenc.set_num_threads(threads)
                np.testing.assert_array_equal(call_once(), want)
    finally:
        posenc._core.set_simd(before)
        posenc.set_num_threads(0)


@given(
    start=st.sampled_from([0, 1000, 3_100_000, 16_777_215, 2**24 + 17]),
    step=st.sampled_from([1, -1, 7, -97, 1000, -100_000, 1_000_000, -3_000_000]),
    n=st.integers(2, 200),
    half=st.sampled_from([1, 4, 64, 257]),
    dtype=st.sampled_from(["float32", "float16"]),
)
@example(start=3_100_000, step=-100_000, n=64, half=64, dtype="float32")
@example(start=0, step=1_000_000, n=64, half=64, dtype="float32")
def test_sinusoid_evenly_spaced_positions_within_1_ulp(start, step, n, half, dtype):
    # runs toward zero and across it, and large steps: the rotation's floor
    # must come from the largest |position| of the group, not the target's
    dim = 2 * half
    pos = start + step * np.arange(n, dtype=np.float64)
    got = posenc.sinusoid(pos, dim, dtype=dtype).astype(np.float64)
    w = 1.0 / 10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angle = pos[:, None] * w
    exact = np.stack([np.sin(angle), np.cos(angle)], -1).reshape(n, dim)
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
    assert (np.abs(got - exact) <= spacing).all(), np.max(np.abs(got - exact) / spacing)
