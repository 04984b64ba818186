"""Rotary position embedding: apply_rope, rope_cos_sin, rope_frequencies.

The oracle is posenc.reference (float64, the obvious NumPy), itself checked
against transformers in tests/conformance; the frequencies against a second
reading of each family and against hand-derived values.
"""

import math

import numpy as np
import pytest
from optional import require
from rope_checks import assert_close_to_reference

import posenc
from posenc import _core, reference

DTYPES = [np.float16, np.float32, np.float64]
LAYOUTS = ["half", "interleaved"]

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


# ---------------------------------------------------------------- kernel vs reference

# (shape, seq_axis, rotary_dim): ranks 2 to 5, both sequence axes, partial
# rotary with vector bodies and scalar tails, sizes that take the threaded
# and tiled paths
CASES = [
    ((7, 64), -2, None),
    ((5, 20), -2, 12),
    ((2, 3, 17, 64), -2, None),
    ((2, 17, 3, 64), -3, None),
    ((2, 3, 4, 5, 38), -3, 30),
    ((2, 3, 4, 5, 38), -2, None),
    ((1, 8, 300, 64), -2, None),
    ((1, 300, 8, 64), -3, 48),
    ((3, 1500, 6), -2, None),
]


def test_float16_rotation_near_a_midpoint_is_within_one_ulp_of_the_rotated_value(simd):
    # the pair (0.2451, 0.2451) at position 2391 rotates to about
    # (-0.1078, -0.3294678), the second a hair from the midpoint between two
    # float16 values in the binade above |x|'s: the float64 reference and
    # posenc's float32 rotation round to the two sides, one ulp of the value
    # (2**-12) apart, more than one ulp of max|x| (2**-13)
    x = np.array([[0.2451, 0.2451]], np.float16)
    kw = dict(layout="half", rotary_dim=2, offset=195)
    got = posenc.apply_rope(x, np.array([2391], np.int32), **kw)
    want = reference.apply_rope(x, np.array([2391], np.int32), **kw)
    exact = reference.apply_rope(x.astype(np.float64), np.array([2391]), **kw)
    assert abs(exact[0, 1] - (-0.3294677734375)) < 1e-7  # the midpoint
    assert_close_to_reference(got, want, x, positions_max=2391)
    assert np.abs(got.astype(np.float64) - exact).max() <= 2.0**-12


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,seq_axis,rotary_dim", CASES)
def test_apply_rope_matches_reference(
    simd, threads, rng, layout, dtype, shape, seq_axis, rotary_dim
):
    x = rng.standard_normal(shape).astype(dtype)
    kw = dict(layout=layout, seq_axis=seq_axis, rotary_dim=rotary_dim, offset=5)
    got = posenc.apply_rope(x, **kw)
    want = reference.apply_rope(x, **kw)
    assert_close_to_reference(got, want, x, positions_max=5 + shape[seq_axis])
    if rotary_dim is not None:  # partial rotary: the rest passes through untouched
        np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


_LARGE = {}


def _large_case(layout, dtype, transposed):
    """A (2, 16, 1040, 136) array (or its (2, 1040, 16, 136) transpose) with
    rotary_dim 128: large enough (> 8 MiB) for non-temporal stores, and the
    head lanes of the (batch, heads, seq) layout; the reference is cached."""
    key = (layout, np.dtype(dtype).name, transposed)
    if key not in _LARGE:
        rng = np.random.default_rng(7)
        shape = (2, 1040, 16, 136) if transposed else (2, 16, 1040, 136)
        x = rng.standard_normal(shape).astype(dtype)
        kw = dict(layout=layout, rotary_dim=128, seq_axis=-3 if transposed else -2)
        _LARGE[key] = (x, kw, reference.apply_rope(x, **kw))
    return _LARGE[key]


@pytest.mark.parametrize("transposed", [False, True], ids=["heads-seq", "seq-heads"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_apply_rope_large_arrays_match_reference_out_of_place_and_in_place(
    simd, threads, layout, dtype, transposed
):
    x, kw, want = _large_case(layout, dtype, transposed)
    got = posenc.apply_rope(x, **kw)
    assert_close_to_reference(got, want, x, positions_max=1040)
    y = x.copy()
    assert posenc.apply_rope(y, out=y, **kw) is y
    np.testing.assert_array_equal(y, got)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_simd_paths_and_thread_counts_give_identical_bits(rng, on_every_path, layout, dtype):
    x = rng.standard_normal((2, 6, 700, 72)).astype(dtype)
    pos = rng.uniform(0, 5e5, (2, 1, 700))
    results = on_every_path(
        lambda: (
            posenc.apply_rope(x, pos, layout=layout, rotary_dim=64),
            posenc.rope_cos_sin(pos, 72, layout=layout, dtype=dtype),
        )
    )
    for rotated, (cos, sin) in results[1:]:
        np.testing.assert_array_equal(rotated, results[0][0])
        np.testing.assert_array_equal(cos, results[0][1][0])
        np.testing.assert_array_equal(sin, results[0][1][1])


# ---------------------------------------------------------------- positions


@pytest.mark.parametrize(
    "positions_shape,seq_axis",
    [
        ((), -2),  # one decoding step for every row
        ((9,), -2),  # per sequence
        ((2, 1, 9), -2),  # per batch: left padding
        ((2, 3, 9), -2),  # every row its own
        ((2, 9), -2),  # transformers' (batch, seq) position_ids
        ((9,), -3),  # (batch, seq, heads) layout
        ((2, 9), -3),
        ((2, 9, 1), -3),
        ((1, 1, 1), -2),
    ],
)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_broadcast_positions_match_reference(simd, rng, layout, positions_shape, seq_axis):
    shape = (2, 3, 9, 32) if seq_axis == -2 else (2, 9, 3, 32)
    x = rng.standard_normal(shape).astype(np.float32)
    pos = rng.integers(0, 4096, positions_shape)
    got = posenc.apply_rope(x, pos, layout=layout, seq_axis=seq_axis)
    want = reference.apply_rope(x, pos, layout=layout, seq_axis=seq_axis)
    assert_close_to_reference(got, want, x, positions_max=4096)


@pytest.mark.parametrize(
    "shape,positions_shape",
    [
        ((4, 64, 1, 128), ()),  # one decoding step: one position, rows split among threads
        ((16, 8, 1, 128), (16, 1, 1)),  # a step per sequence of a batch
        ((16, 8, 3, 128), (16, 1, 3)),  # few positions per batch, many batches
    ],
)
def test_decoding_steps_match_reference(simd, threads, rng, shape, positions_shape):
    x = rng.standard_normal(shape).astype(np.float32)
    pos = rng.integers(0, 100_000, positions_shape)
    got = posenc.apply_rope(x, pos, layout="interleaved")
    assert_close_to_reference(
        got, reference.apply_rope(x, pos, layout="interleaved"), x, positions_max=100_000
    )


def test_float_positions_interpolate_like_reference(simd, rng):
    x = rng.standard_normal((4, 16, 64))
    pos = rng.uniform(-100.0, 100.0, (4, 16))
    assert_close_to_reference(
        posenc.apply_rope(x, pos), reference.apply_rope(x, pos), x, positions_max=100
    )


def test_offset_shifts_default_positions(rng):
    x = rng.standard_normal((2, 4, 10, 16)).astype(np.float32)
    got = posenc.apply_rope(x, offset=37)
    want = posenc.apply_rope(x, np.arange(37, 47))
    np.testing.assert_array_equal(got, want)


def test_offset_is_added_to_given_positions(rng):
    x = rng.standard_normal((3, 10, 16))
    pos = rng.integers(0, 50, (3, 10))
    np.testing.assert_array_equal(
        posenc.apply_rope(x, pos, offset=-2.5), posenc.apply_rope(x, pos - 2.5)
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.astype(np.int32),
        lambda p: p.astype(np.uint16),
        lambda p: p.astype(">i8"),
        lambda p: p.astype(">f8"),
        lambda p: p.astype(np.float32),
        lambda p: np.ascontiguousarray(p[::-1])[::-1],
        lambda p: p.tolist(),
    ],
    ids=["int32", "uint16", "int64-be", "float64-be", "float32", "reversed-view", "list"],
)
def test_positions_of_any_dtype_and_layout_give_the_same_numbers(rng, make):
    x = rng.standard_normal((2, 5, 12, 32)).astype(np.float32)
    pos = rng.integers(0, 1000, (2, 1, 12))
    np.testing.assert_array_equal(posenc.apply_rope(x, make(pos)), posenc.apply_rope(x, pos))


# ---------------------------------------------------------------- layouts of x and out


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a[:, ::2],
        lambda a: a[::-1, :, ::-1],
        lambda a: np.asfortranarray(a),
        lambda a: a.transpose(1, 0, 2, 3),
        lambda a: a[..., ::2],
        lambda a: a.astype(a.dtype.newbyteorder(">")),
        lambda a: np.broadcast_to(a[:1], a.shape),
    ],
    ids=["step", "negative", "fortran", "transposed", "strided-last", "byteswapped", "zero-stride"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_byteswapped_inputs_give_contiguous_results(simd, rng, view, dtype):
    base = rng.standard_normal((4, 6, 20, 64)).astype(dtype)
    x = view(base)
    want = posenc.apply_rope(np.ascontiguousarray(x, dtype=dtype))
    got = posenc.apply_rope(x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "make_out",
    [
        lambda s, d: np.empty(s, d),
        lambda s, d: np.empty(s[::-1], d).T,
        lambda s, d: np.empty(s[:-1] + (2 * s[-1],), d)[..., ::2],
        lambda s, d: np.empty(s, np.dtype(d).newbyteorder(">")),
        lambda s, d: np.empty((s[0] * 2,) + s[1:], d)[::2],
    ],
    ids=["contiguous", "fortran", "strided-last", "byteswapped", "step"],
)
def test_out_of_any_layout_receives_the_result(rng, make_out):
    x = rng.standard_normal((3, 4, 10, 32)).astype(np.float32)
    out = make_out(x.shape, np.float32)
    assert posenc.apply_rope(x, out=out, layout="interleaved") is out
    np.testing.assert_array_equal(out, posenc.apply_rope(x, layout="interleaved"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_equals_out_of_place(simd, threads, rng, dtype, layout):
    x = rng.standard_normal((2, 5, 300, 48)).astype(dtype)
    want = posenc.apply_rope(x, layout=layout, rotary_dim=40)
    y = x.copy()
    assert posenc.apply_rope(y, out=y, layout=layout, rotary_dim=40) is y
    np.testing.assert_array_equal(y, want)


def test_in_place_on_a_strided_view_changes_only_the_view(rng):
    base = rng.standard_normal((4, 10, 32)).astype(np.float32)
    orig = base.copy()
    view = base[::2]
    want = posenc.apply_rope(view.copy())
    posenc.apply_rope(view, out=view)
    np.testing.assert_array_equal(base[::2], want)
    np.testing.assert_array_equal(base[1::2], orig[1::2])


def test_out_overlapping_x_gets_the_rotation_of_the_original_x(rng):
    base = rng.standard_normal((6, 8, 16))
    x, out = base[:5], base[1:]
    want = posenc.apply_rope(x.copy())
    posenc.apply_rope(x, out=out)
    np.testing.assert_array_equal(base[1:], want)


def test_empty_arrays_are_returned_empty():
    for shape in [(0, 8), (2, 0, 8), (3, 4, 0, 16)]:
        x = np.zeros(shape, np.float32)
        assert posenc.apply_rope(x).shape == shape
    cos, sin = posenc.rope_cos_sin(0, 8)
    assert cos.shape == sin.shape == (0, 8)


def test_array_likes_are_accepted():
    x = [[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    got = posenc.apply_rope(np.asarray(x), layout="interleaved")
    assert got.dtype == np.float64
    # position 1, pair (x0, x1) = (1, 0) rotated by 1 radian (theta_0 = 1)
    np.testing.assert_allclose(got[1, :2], [math.cos(1.0), math.sin(1.0)], rtol=1e-15)


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_inverse_undoes_the_rotation(rng, dtype, layout):
    x = rng.standard_normal((2, 4, 100, 64)).astype(dtype)
    pos = rng.integers(0, 100_000, (2, 1, 100))
    y = posenc.apply_rope(x, pos, layout=layout, scaling=YARN)
    back = posenc.apply_rope(y, pos, layout=layout, scaling=YARN, inverse=True)
    # yarn's attention factor scales each pass: undone up to its square
    af = posenc.rope_frequencies(64, scaling=YARN)[1]
    tol = {np.float16: 4e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
    np.testing.assert_allclose(back / af**2, x, atol=tol * np.abs(x).max() * 4)
    plain = posenc.apply_rope(
        posenc.apply_rope(x, pos, layout=layout), pos, layout=layout, inverse=True
    )
    np.testing.assert_allclose(plain, x, atol=tol * np.abs(x).max() * 4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_norm_of_each_rotated_pair_is_kept(rng, layout):
    x = rng.standard_normal((3, 50, 32))
    y = posenc.apply_rope(x, rng.uniform(0, 1e6, (3, 50)), layout=layout)
    if layout == "half":
        pairs_x, pairs_y = (x[..., :16], x[..., 16:]), (y[..., :16], y[..., 16:])
    else:
        pairs_x, pairs_y = (x[..., 0::2], x[..., 1::2]), (y[..., 0::2], y[..., 1::2])
    np.testing.assert_allclose(np.hypot(*pairs_y), np.hypot(*pairs_x), rtol=1e-14)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scores_depend_only_on_relative_position(rng, layout):
    q, k = rng.standard_normal((2, 64))
    m, n = np.array([7, 130, 5000]), np.array([3, 2, 4990])
    for s in [1, 17, 123_456]:
        a = np.einsum(
            "pd,pd->p",
            posenc.apply_rope(np.tile(q, (3, 1)), m, layout=layout),
            posenc.apply_rope(np.tile(k, (3, 1)), n, layout=layout),
        )
        b = np.einsum(
            "pd,pd->p",
            posenc.apply_rope(np.tile(q, (3, 1)), m + s, layout=layout),
            posenc.apply_rope(np.tile(k, (3, 1)), n + s, layout=layout),
        )
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_two_layouts_are_the_same_rotation_after_the_pair_permutation(rng, dtype):
    x = rng.standard_normal((3, 40, 64)).astype(dtype)
    # interleaved slot 2i <- half slot i, 2i+1 <- i + 32
    perm = np.stack([np.arange(32), np.arange(32) + 32], axis=-1).reshape(-1)
    half = posenc.apply_rope(x)
    inter = posenc.apply_rope(x[..., perm], layout="interleaved")
    np.testing.assert_array_equal(inter, half[..., perm])
    cos_h, sin_h = posenc.rope_cos_sin(40, 64, dtype=dtype)
    cos_i, sin_i = posenc.rope_cos_sin(40, 64, layout="interleaved", dtype=dtype)
    np.testing.assert_array_equal(cos_i, cos_h[..., perm])
    np.testing.assert_array_equal(sin_i, sin_h[..., perm])


def test_a_hand_rotated_pair(simd):
    # theta_i = 10000**(-2i/4) = (1, 0.01); position 3
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    c0, s0, c1, s1 = math.cos(3), math.sin(3), math.cos(0.03), math.sin(0.03)
    half = [1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 3 * c0 + 1 * s0, 4 * c1 + 2 * s1]
    inter = [1 * c0 - 2 * s0, 2 * c0 + 1 * s0, 3 * c1 - 4 * s1, 4 * c1 + 3 * s1]
    np.testing.assert_allclose(posenc.apply_rope(x, 3)[0], half, rtol=1e-15)
    np.testing.assert_allclose(posenc.apply_rope(x, 3, layout="interleaved")[0], inter, rtol=1e-15)


# ---------------------------------------------------------------- accuracy at long positions


@pytest.mark.parametrize("center", [10**6, 2**24])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cos_sin_float32_within_one_ulp_of_float64_at_long_positions(
    simd, ulp_distance, center, layout
):
    # "the float64 value": cos and sin in float64 (NumPy's) of the same float64
    # angles, pos * inv_freq; at 2**24 a one-ulp change of inv_freq moves the
    # angle by more than a float32 ulp of a value near zero
    pos = center + np.arange(-64, 64)
    inv_freq, _ = posenc.rope_frequencies(128, base=500000.0)
    angle = pos[:, None] * inv_freq
    ref_cos, ref_sin = np.cos(angle), np.sin(angle)
    if layout == "half":
        ref_cos, ref_sin = np.tile(ref_cos, 2), np.tile(ref_sin, 2)
    else:
        ref_cos, ref_sin = np.repeat(ref_cos, 2, -1), np.repeat(ref_sin, 2, -1)
    cos, sin = posenc.rope_cos_sin(pos, 128, base=500000.0, layout=layout)
    assert ulp_distance(cos, ref_cos, np.float32).max() <= 1.0
    assert ulp_distance(sin, ref_sin, np.float32).max() <= 1.0


def _cos_sin_seen_by_apply_rope(pos, dim, layout, **kw):
    """cos and sin as apply_rope rounds them for float32 data: rotating the
    pair (1, 0) gives (cos, sin) exactly."""
    half = dim // 2
    x = np.zeros((2, len(pos), dim), np.float32)
    if layout == "half":
        x[..., :half] = 1.0
        y = posenc.apply_rope(x, pos, layout=layout, **kw)
        return y[..., :half], y[..., half:]
    x[..., 0::2] = 1.0
    y = posenc.apply_rope(x, pos, layout=layout, **kw)
    return y[..., 0::2], y[..., 1::2]


@pytest.mark.parametrize("start", [0, 355 - 40, 2**20 - 7, 10**6, 3 * 10**6 + 1, -(10**5) - 3])
@pytest.mark.parametrize("step", [1, 3, -2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_rope_evenly_spaced_positions_within_one_ulp(
    simd, threads, ulp_distance, start, step, layout
):
    # evenly spaced positions take the rotation path: the float32 cos and sin
    # applied are still within 1 ulp of float64 cos/sin of the same angles
    # (355 is within 3e-5 of a multiple of pi: values near zero)
    pos = start + step * np.arange(300)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    inv_freq, factor = posenc.rope_frequencies(128, scaling=scaling)
    angle = pos[:, None] * inv_freq
    cos, sin = _cos_sin_seen_by_apply_rope(pos, 128, layout, scaling=scaling)
    for got in (cos[0], cos[1]):
        assert ulp_distance(got, np.cos(angle) * factor, np.float32).max() <= 1.0
    for got in (sin[0], sin[1]):
        assert ulp_distance(got, np.sin(angle) * factor, np.float32).max() <= 1.0


def test_evenly_spaced_positions_give_the_same_bits_on_every_path_and_layout(rng, on_every_path):
    # the rotation's anchors sit on a fixed grid of the sequence index,
    # whatever the tiling: both SIMD paths, 1 and 2 threads, both memory
    # layouts and any subset of heads agree
    x = rng.standard_normal((1, 8, 1000, 128)).astype(np.float32)
    xt = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    pos = 12345 + np.arange(1000)
    results = []
    for group in on_every_path(
        lambda: (
            posenc.apply_rope(x, pos),
            posenc.apply_rope(xt, pos, seq_axis=-3).transpose(0, 2, 1, 3),
            np.concatenate([posenc.apply_rope(x[:, h : h + 1], pos) for h in range(8)], 1),
        )
    ):
        results.extend(group)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@pytest.mark.parametrize("center", [10**6, 2**24])
def test_apply_rope_float32_within_1e_6_of_float64_at_long_positions(simd, rng, center):
    pos = center + np.arange(-128, 128)
    x = rng.standard_normal((2, 4, 256, 128)).astype(np.float32)
    got = posenc.apply_rope(x, pos)
    exact = reference.apply_rope(x.astype(np.float64), pos)
    err = np.abs(got - exact).max() / np.abs(x).max()
    assert err <= 1e-6


def _float32_phase_rope(x, pos, base=10000.0):
    """RoPE with the phase formed in float32, as many implementations do."""
    dim = x.shape[-1]
    inv_freq = (1.0 / base ** (np.arange(0, dim, 2) / dim)).astype(np.float32)
    angle = pos.astype(np.float32)[:, None] * inv_freq
    cos, sin = np.cos(angle), np.sin(angle)
    cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    rot = np.concatenate([-x[..., dim // 2 :], x[..., : dim // 2]], -1)
    return x * cos + rot * sin


@pytest.mark.parametrize("center", [10**6, 2**24])
def test_float64_phase_beats_a_float32_phase_by_orders_of_magnitude(rng, center):
    pos = center + np.arange(0, 256)
    x = rng.standard_normal((256, 128)).astype(np.float32)
    exact = reference.apply_rope(x.astype(np.float64), pos)
    err_posenc = np.abs(posenc.apply_rope(x, pos) - exact).max()
    err_f32_phase = np.abs(_float32_phase_rope(x, pos) - exact).max()
    assert err_f32_phase > 1e-3 * np.abs(x).max()  # the phase error is real at these positions
    assert err_posenc * 1000 < err_f32_phase


# ---------------------------------------------------------------- rope_cos_sin


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", [None, YARN, LLAMA3], ids=["default", "yarn", "llama3"])
def test_rope_cos_sin_matches_reference(simd, threads, ulp_distance, layout, dtype, scaling):
    pos = np.arange(3000).reshape(30, 100)
    cos, sin = posenc.rope_cos_sin(pos, 96, layout=layout, dtype=dtype, scaling=scaling)
    rcos, rsin = reference.rope_cos_sin(pos, 96, layout=layout, dtype=np.float64, scaling=scaling)
    assert cos.shape == sin.shape == (30, 100, 96) and cos.dtype == np.dtype(dtype)
    # within 1 ulp, except where the two readings' last-bit difference in
    # theta (times positions up to 3000) is larger than an ulp of a value near 0
    for got, want in [(cos, rcos), (sin, rsin)]:
        near = np.abs(got.astype(np.float64) - want) <= 1e-12
        if dtype == np.float64:
            assert near.all()
        else:
            assert np.all((ulp_distance(got, want, dtype) <= 1.0) | near)


def test_rope_cos_sin_of_an_int_is_positions_0_to_n_minus_1():
    cos, sin = posenc.rope_cos_sin(5, 8)
    c2, s2 = posenc.rope_cos_sin(np.arange(5), 8)
    np.testing.assert_array_equal(cos, c2)
    np.testing.assert_array_equal(sin, s2)
    np.testing.assert_array_equal(cos[0], np.ones(8, np.float32))
    np.testing.assert_array_equal(sin[0], np.zeros(8, np.float32))


def test_rope_cos_sin_rebuilds_apply_rope(rng):
    x = rng.standard_normal((5, 30, 64))
    pos = rng.integers(0, 10_000, (5, 30))
    cos, sin = posenc.rope_cos_sin(pos, 64, dtype=np.float64, scaling=YARN)
    rotated = np.concatenate([-x[..., 32:], x[..., :32]], -1)
    np.testing.assert_allclose(
        posenc.apply_rope(x, pos, scaling=YARN), x * cos + rotated * sin, rtol=1e-12, atol=1e-12
    )


# ---------------------------------------------------------------- rope_frequencies


def test_default_frequencies_by_hand():
    inv_freq, af = posenc.rope_frequencies(4)
    np.testing.assert_array_equal(inv_freq, [1.0, 0.01])
    assert af == 1.0 and inv_freq.dtype == np.float64
    inv_freq, _ = posenc.rope_frequencies(8, base=16.0)
    np.testing.assert_allclose(inv_freq, [1, 1 / 2, 1 / 4, 1 / 8], rtol=1e-15)


FAMILY_CASES = [
    None,
    {"rope_type": "default"},
    {"rope_type": "linear", "factor": 4.0},
    {"type": "linear", "factor": 2.5},
    {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096},
    dict(YARN),
    dict(YARN, beta_fast=16, beta_slow=2, truncate=False),
    dict(YARN, mscale=0.707, mscale_all_dim=0.707),
    dict(YARN, mscale=1.0, mscale_all_dim=0.8, attention_factor=None),
    dict(YARN, attention_factor=1.5),
    dict(LLAMA3),
    dict(LLAMA3, factor=32.0, original_max_position_embeddings=2048, rope_theta=500000.0),
    {"rope_type": "resonance"},
]


def test_resonance_rounds_each_wavelength_to_whole_positions():
    # by hand: d = 4, b = 100: theta = 1, 1/10; wavelengths 2 pi, 20 pi -> 6, 63
    inv_freq, af = posenc.rope_frequencies(4, base=100.0, scaling={"rope_type": "resonance"})
    np.testing.assert_allclose(inv_freq, [2 * np.pi / 6, 2 * np.pi / 63], rtol=1e-15)
    assert af == 1.0
    # the authors' expression (ResonanceRotaryEmbedding's buffers), in float64
    torch = require("torch")
    theta = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    want = 2 * math.pi / torch.round(2 * math.pi / theta)
    got, _ = posenc.rope_frequencies(64, base=10000.0, scaling={"rope_type": "resonance"})
    # (torch divides a number by a tensor through its reciprocal: 1 ulp)
    np.testing.assert_allclose(got, want.numpy(), rtol=3e-16, atol=0)
    np.testing.assert_array_equal(np.rint(2 * np.pi / got), torch.round(2 * math.pi / theta))
    # every pair repeats after its whole wavelength: cos and sin at p and p + lambda
    lam = np.rint(2 * np.pi / got[:4]).astype(np.int64)
    cos, sin = posenc.rope_cos_sin(
        np.array([3, *(3 + lam)]), 64, scaling={"rope_type": "resonance"}, dtype=np.float64
    )
    for i in range(4):
        np.testing.assert_allclose(cos[1 + i, i], cos[0, i], atol=1e-12)
        np.testing.assert_allclose(sin[1 + i, i], sin[0, i], atol=1e-12)
    with pytest.warns(UserWarning, match="resonance_scale"):  # a key no family reads
        posenc.rope_frequencies(8, scaling={"rope_type": "resonance", "resonance_scale": 2.0})


@pytest.mark.parametrize(
    "scaling", FAMILY_CASES, ids=lambda s: str(s and s.get("rope_type", s.get("type")))
)
@pytest.mark.parametrize("dim,base", [(64, 10000.0), (128, 500000.0), (96, 1e6), (32, 10.0)])
@pytest.mark.parametrize("seq_len", [None, 1000, 20000])
def test_frequencies_match_the_second_reading(scaling, dim, base, seq_len):
    if scaling and "rope_theta" in scaling:
        base = 10000.0  # the dict's rope_theta is the base
    got, af = posenc.rope_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)
    want, raf = reference.rope_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)
    assert got.shape == (dim // 2,)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert af == pytest.approx(raf, rel=1e-15)


def _longrope(n):
    rng = np.random.default_rng(3)
    return {
        "rope_type": "longrope",
        "short_factor": list(1 + rng.uniform(0, 0.2, n)),
        "long_factor": list(1 + rng.uniform(0, 8, n)),
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 131072,
    }


@pytest.mark.parametrize("seq_len", [None, 4096, 4097])
def test_longrope_matches_the_second_reading_and_switches_past_the_trained_length(seq_len):
    scaling = _longrope(48)
    got, af = posenc.rope_frequencies(96, scaling=scaling, seq_len=seq_len)
    want, _ = reference.rope_frequencies(96, scaling=scaling, seq_len=seq_len)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    factors = scaling["long_factor"] if seq_len == 4097 else scaling["short_factor"]
    np.testing.assert_allclose(got, posenc.rope_frequencies(96)[0] / factors, rtol=1e-15)
    assert af == math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))


def test_attention_factors_by_hand():
    assert posenc.rope_frequencies(64, scaling=YARN)[1] == 0.1 * math.log(4.0) + 1.0
    both = dict(YARN, mscale=0.707, mscale_all_dim=0.5)
    want = (0.1 * 0.707 * math.log(4.0) + 1.0) / (0.1 * 0.5 * math.log(4.0) + 1.0)
    assert posenc.rope_frequencies(64, scaling=both)[1] == want
    assert posenc.rope_frequencies(64, scaling=dict(YARN, attention_factor=0.9))[1] == 0.9
    # yarn without factor: max_position_embeddings / original
    implied = {k: v for k, v in YARN.items() if k != "factor"}
    implied["max_position_embeddings"] = 8192
    assert posenc.rope_frequencies(64, scaling=implied)[1] == 0.1 * math.log(4.0) + 1.0
    for family in ["linear", "dynamic", "llama3"]:
        assert (
            posenc.rope_frequencies(
                64, scaling=dict(LLAMA3, rope_type=family, max_position_embeddings=10)
            )[1]
            == 1.0
        )


def test_linear_divides_every_frequency_by_the_factor():
    np.testing.assert_allclose(
        posenc.rope_frequencies(64, scaling={"rope_type": "linear", "factor": 4.0})[0],
        posenc.rope_frequencies(64)[0] / 4.0,
        rtol=1e-15,
    )


def test_dynamic_grows_the_base_only_past_the_trained_length():
    s = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 2048}
    default = posenc.rope_frequencies(64)[0]
    np.testing.assert_array_equal(posenc.rope_frequencies(64, scaling=s)[0], default)
    np.testing.assert_array_equal(posenc.rope_frequencies(64, scaling=s, seq_len=2000)[0], default)
    grown = 10000.0 * (4.0 * 8192 / 2048 - 3.0) ** (64 / 62)
    np.testing.assert_allclose(
        posenc.rope_frequencies(64, scaling=s, seq_len=8192)[0],
        grown ** (-np.arange(0, 64, 2) / 64),
        rtol=1e-14,
    )


def test_llama3_keeps_high_and_divides_low_frequencies():
    inv, _ = posenc.rope_frequencies(128, base=500000.0, scaling=LLAMA3)
    theta = posenc.rope_frequencies(128, base=500000.0)[0]
    wavelen = 2 * np.pi / theta
    high, low = wavelen < 8192 / 4.0, wavelen > 8192 / 1.0
    assert high.any() and low.any() and (~high & ~low).any()
    np.testing.assert_array_equal(inv[high], theta[high])
    np.testing.assert_allclose(inv[low], theta[low] / 8.0, rtol=1e-15)
    mid = ~high & ~low
    assert np.all((inv[mid] < theta[mid]) & (inv[mid] > theta[mid] / 8.0))


def test_partial_rotary_factor_and_rope_theta_are_read_from_the_dict(rng):
    s = {"rope_type": "default", "partial_rotary_factor": 0.25, "rope_theta": 500000.0}
    inv, _ = posenc.rope_frequencies(128, scaling=s)
    np.testing.assert_array_equal(inv, posenc.rope_frequencies(32, base=500000.0)[0])
    cos, _ = posenc.rope_cos_sin(10, 128, scaling=s)
    assert cos.shape == (10, 32)
    x = rng.standard_normal((4, 10, 128))
    np.testing.assert_array_equal(
        posenc.apply_rope(x, scaling=s), posenc.apply_rope(x, base=500000.0, rotary_dim=32)
    )
    np.testing.assert_array_equal(
        posenc.apply_rope(x, scaling=s, rotary_dim=32), posenc.apply_rope(x, scaling=s)
    )


def test_apply_rope_takes_the_sequence_length_from_the_positions(rng):
    s = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 256}
    x = rng.standard_normal((2, 1000, 32))
    inv, _ = posenc.rope_frequencies(32, scaling=s, seq_len=1000)
    cos, sin = posenc.rope_cos_sin(np.arange(1000), 32, scaling=s, dtype=np.float64)
    np.testing.assert_allclose(cos[:, :16], np.cos(np.arange(1000)[:, None] * inv), atol=1e-12)
    rotated = np.concatenate([-x[..., 16:], x[..., :16]], -1)
    np.testing.assert_allclose(posenc.apply_rope(x, scaling=s), x * cos + rotated * sin, atol=1e-12)


LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 4,
    "long_factor": [2.0] * 4,
    "original_max_position_embeddings": 4096,
    "factor": 2.0,
}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}
# a wavelength 2 pi exactly on the edge of llama3's band, whose factors are equal
EDGE = dict(LLAMA3, low_freq_factor=1.0, high_freq_factor=1.0)
EDGE["original_max_position_embeddings"] = 2 * math.pi

# (id, rope_frequencies' dim, base, scaling, seq_len, words of the message):
# parameters that make the frequencies or the attention factor infinite,
# NaN, zero or negative (or a float64 overflow on the way) are refused by name
OUT_OF_RANGE = [
    ("linear factor tiny", 8, 1e4, {"rope_type": "linear", "factor": 1e-320}, None,
     r"scaling\['factor'\] must keep .* overflow to inf"),
    ("dynamic far positions", 8, 1e4, DYNAMIC, 10**300, "positions"),
    ("dynamic seq_len past floats", 8, 1e4, DYNAMIC, 10**400, "positions"),
    ("ntk_alpha huge", 8, 1e4, {"rope_type": "ntk_alpha", "alpha": 1e300}, None,
     r"scaling\['alpha'\]"),
    ("ntk_alpha tiny", 8, 1e4, {"rope_type": "ntk_alpha", "alpha": 1e-300}, None,
     r"scaling\['alpha'\]"),
    ("yarn factor tiny", 8, 1e4, dict(YARN, factor=1e-320), None, r"scaling\['factor'\]"),
    ("yarn beta_fast negative", 8, 1e4, dict(YARN, beta_fast=-1.0), None,
     r"scaling\['beta_fast'\] must be > 0"),
    ("yarn beta_slow huge", 8, 1e4, dict(YARN, beta_slow=1e308), None, r"scaling\['beta_slow'\]"),
    ("yarn mscale_all_dim zero scale", 8, 1e4,
     dict(YARN, factor=math.e, mscale=1.0, mscale_all_dim=-10.0), None,
     r"scaling\['mscale'\] = 1 and scaling\['mscale_all_dim'\] = -10"),
    ("yarn negative attention", 8, 1e4, dict(YARN, mscale=-100.0, mscale_all_dim=1.0), None,
     r"scaling\['mscale'\]"),
    ("yarn attention_factor 0", 8, 1e4, dict(YARN, attention_factor=0.0), None,
     r"scaling\['attention_factor'\] must be > 0"),
    ("yarn base 1", 8, 1.0, YARN, None, "base"),
    ("llama3 factor tiny", 128, 5e5, dict(LLAMA3, factor=1e-320), None, r"scaling\['factor'\]"),
    ("llama3 equal band factors", 2, 1e4, EDGE, None,
     r"scaling\['high_freq_factor'\] must differ from scaling\['low_freq_factor'\]"),
    ("longrope short_factor tiny", 8, 1e4, dict(LONGROPE, short_factor=[1e-320] * 4), None,
     r"scaling\['short_factor'\] .* overflow to inf"),
    ("longrope long_factor huge", 8, 1e4, dict(LONGROPE, long_factor=[1e308] * 4), 10**4,
     r"scaling\['long_factor'\] .* underflow to 0"),
    ("longrope trained length 1", 8, 1e4, dict(LONGROPE, original_max_position_embeddings=1),
     None, r"scaling\['original_max_position_embeddings'\]"),
    ("longrope attention_factor negative", 8, 1e4, dict(LONGROPE, attention_factor=-1.0), None,
     r"scaling\['attention_factor'\] must be > 0"),
    ("proportional factor tiny", 8, 1e4,
     {"rope_type": "proportional", "factor": 1e-320, "partial_rotary_factor": 0.5}, None,
     r"scaling\['factor'\]"),
    ("default base tiny", 1000, 5e-324, None, None, "base"),
]  # fmt: skip


@pytest.mark.parametrize(
    "dim, base, scaling, seq_len, words",
    [r[1:] for r in OUT_OF_RANGE],
    ids=[r[0] for r in OUT_OF_RANGE],
)
def test_scaling_parameters_out_of_range_are_refused_by_name(dim, base, scaling, seq_len, words):
    with pytest.raises(ValueError, match=words):
        posenc.rope_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)


def test_tables_and_rotations_with_a_parameter_out_of_range_are_refused(rng):
    # a factor of 1e-320 made every table NaN; positions of 1e300 an OverflowError
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    out = np.full_like(x, 7.0)
    linear = {"rope_type": "linear", "factor": 1e-320}
    with pytest.raises(ValueError, match=r"scaling\['factor'\]"):
        posenc.rope_cos_sin(4, 8, scaling=linear)
    with pytest.raises(ValueError, match=r"scaling\['factor'\]"):
        posenc.apply_rope(x, scaling=linear, out=out)
    with pytest.raises(ValueError, match="positions"):
        posenc.rope_cos_sin(np.array([1e300]), 8, scaling=DYNAMIC)
    with pytest.raises(ValueError, match="positions"):
        posenc.apply_rope(x, np.array([0.0, 1.0, 1e300]), scaling=DYNAMIC, out=out)
    assert (out == 7.0).all()


def test_dynamic_at_far_positions_is_computed_while_its_base_stays_finite():
    # with dim 1024 the base grows as n ** (1024/1022), finite at n = 1e300: by hand
    n = int(1e300) + 1
    got, _ = posenc.rope_frequencies(1024, scaling=DYNAMIC, seq_len=n)
    grown = 1e4 * (2.0 * n / 16 - 1.0) ** (1024 / 1022)
    np.testing.assert_allclose(got, grown ** (-np.arange(0, 1024, 2) / 1024), rtol=1e-13)
    cos, _ = posenc.rope_cos_sin(np.array([1e300]), 1024, scaling=DYNAMIC, dtype=np.float64)
    assert np.isfinite(cos).all()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(rotary_dim=7), ValueError, "rotary_dim"),
        (dict(rotary_dim=34), ValueError, "rotary_dim"),
        (dict(rotary_dim=0), ValueError, "rotary_dim"),
        (dict(rotary_dim=2.0), TypeError, "rotary_dim"),
        (dict(layout="neox"), ValueError, "layout"),
        (dict(layout=None), TypeError, "layout"),
        (dict(scaling={"rope_type": "ntk"}), ValueError, "rope_type"),
        (dict(scaling={"rope_type": "linear"}), ValueError, "factor"),
        (
            dict(scaling={"rope_type": "yarn", "factor": 2.0}),
            ValueError,
            "original_max_position_embeddings",
        ),
        (dict(scaling={"rope_type": "llama3", "factor": 8.0}), ValueError, "low_freq_factor"),
        (
            dict(scaling={"rope_type": "dynamic", "factor": 8.0}),
            ValueError,
            "max_position_embeddings",
        ),
        (
            dict(
                scaling={
                    "rope_type": "longrope",
                    "original_max_position_embeddings": 4,
                    "short_factor": [1.0] * 16,
                    "long_factor": [1.0] * 15,
                    "factor": 2.0,
                }
            ),
            ValueError,
            "long_factor",
        ),
        (dict(scaling={"rope_type": "linear", "factor": "2"}), TypeError, "factor"),
        (dict(scaling={"rope_type": "linear", "factor": -2.0}), ValueError, "factor"),
        (dict(scaling="linear"), TypeError, "scaling"),
        (dict(scaling={"rope_theta": 5e5}, base=1e4 + 1), ValueError, "rope_theta"),
        (dict(scaling={"partial_rotary_factor": 0.3}), ValueError, "partial_rotary_factor"),
        (dict(scaling={"partial_rotary_factor": 0.5}, rotary_dim=8), ValueError, "rotary_dim"),
        (dict(base=0.0), ValueError, "base"),
        (dict(base=float("nan")), ValueError, "base"),
        (dict(offset=float("inf")), ValueError, "offset"),
        (dict(seq_axis=-1), ValueError, "seq_axis"),
        (dict(seq_axis=3), ValueError, "seq_axis"),
        (dict(seq_axis=1.0), TypeError, "seq_axis"),
        (dict(inverse=1), TypeError, "inverse"),
        (dict(positions=np.zeros(4)), ValueError, "positions"),
        (dict(positions=np.zeros((1, 2, 3, 10))), ValueError, "positions"),
        (dict(positions=np.array([np.nan] * 10)), ValueError, "positions"),
        (dict(positions=np.zeros(10, complex)), TypeError, "positions"),
        (dict(positions=True), TypeError, "positions"),
        (dict(positions=np.zeros(10, bool)), TypeError, "positions"),
    ],
)
def test_bad_arguments_raise_and_leave_out_untouched(kwargs, exc, match):
    x = np.ones((2, 10, 32), np.float32)
    out = np.full_like(x, 7.0)
    with pytest.raises(exc, match=match):
        posenc.apply_rope(x, out=out, **kwargs)
    np.testing.assert_array_equal(out, np.full_like(x, 7.0))


@pytest.mark.parametrize(
    "out,exc,match",
    [
        (np.zeros((2, 10, 32), np.float64), TypeError, "out"),
        (np.zeros((2, 10, 30), np.float32), ValueError, "out"),
        (np.zeros((2, 10, 32), np.float32).tolist(), TypeError, "out"),
        (np.broadcast_to(np.zeros(32, np.float32), (2, 10, 32)), ValueError, "out"),
    ],
)
def test_a_wrong_out_raises(out, exc, match):
    with pytest.raises(exc, match=match):
        posenc.apply_rope(np.ones((2, 10, 32), np.float32), out=out)


@pytest.mark.parametrize(
    "x",
    [np.ones((3, 8), np.int64), np.ones((3, 8), np.complex64), np.ones((3, 8), bool), [["a"] * 8]],
)
def test_non_float_x_raises_type_error(x):
    with pytest.raises(TypeError, match="x must have dtype"):
        posenc.apply_rope(x)


def test_odd_dim_without_rotary_dim_raises():
    with pytest.raises(ValueError, match="rotary_dim"):
        posenc.apply_rope(np.ones((3, 9)))
    # an even rotary part of an odd dim is fine: the last feature passes through
    y = posenc.apply_rope(np.ones((3, 9)), rotary_dim=8)
    np.testing.assert_array_equal(y[:, 8], 1.0)


def test_scalar_x_raises():
    with pytest.raises(ValueError, match="x"):
        posenc.apply_rope(np.float32(1.0), 0)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: posenc.rope_frequencies(7), ValueError, "dim"),
        (lambda: posenc.rope_frequencies(0), ValueError, "dim"),
        (lambda: posenc.rope_frequencies(8.0), TypeError, "dim"),
        (lambda: posenc.rope_frequencies(8, seq_len=1.5), TypeError, "seq_len"),
        (lambda: posenc.rope_frequencies(8, seq_len=-1), ValueError, "seq_len"),
        (
            lambda: posenc.rope_frequencies(
                2, scaling={"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 8}
            ),
            ValueError,
            "dim",
        ),
        (lambda: posenc.rope_frequencies(8, scaling={"type": "su"}), ValueError, "rope_type"),
        (lambda: posenc.rope_cos_sin(10, 9), ValueError, "dim"),
        (lambda: posenc.rope_cos_sin(-1, 8), ValueError, "positions"),
        (lambda: posenc.rope_cos_sin(10, 8, dtype=np.int32), TypeError, "dtype"),
        (lambda: posenc.rope_cos_sin(10, 8, layout="concat"), ValueError, "layout"),
        (lambda: posenc.rope_cos_sin([np.inf], 8), ValueError, "positions"),
    ],
)
def test_bad_arguments_of_the_tables_raise(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _glue(*tail, x=None, positions=None, inv_freq=None, out=None, layout=0, factor=1.0):
    """_core.rope_apply's arguments: a (2, 8) float64 x into a new out,
    positions 0, frequencies 1 (each replaceable), not inverse, then `tail`
    (xPos's log zeta, centre and rate)."""
    return (
        np.ones((2, 8)) if x is None else x,
        np.zeros(2) if positions is None else positions,
        np.ones(4) if inv_freq is None else inv_freq,
        np.ones((2, 8)) if out is None else out,
        layout,
        factor,
        False,
        *tail,
    )


def _accepts_or_raises(fn, args, exc):
    """``fn(*args)`` succeeds when `exc` is None, else raises `exc`."""
    if exc is None:
        fn(*args)
        return
    with pytest.raises(exc):
        fn(*args)


@pytest.mark.parametrize(
    "args,exc",
    [
        (_glue(), None),
        (_glue(x=[[1.0] * 8], positions=np.zeros(1), out=np.ones((1, 8))), TypeError),
        (_glue(x=np.ones((2, 8), np.int32)), TypeError),
        (_glue(positions=np.zeros(3)), ValueError),
        (_glue(positions=np.zeros(2, np.float32)), TypeError),
        (_glue(inv_freq=np.ones(5)), ValueError),
        (_glue(inv_freq=np.ones(0)), ValueError),
        (_glue(out=np.ones((2, 8), np.float32)), TypeError),
        (_glue(factor=np.inf), ValueError),
        (_glue(out=np.ones((2, 16))[:, ::2]), ValueError),
        (_glue(out=np.ones((2, 8)).astype(">f8")), TypeError),
        ((np.ones(()), np.zeros(()), np.ones(1), np.ones(()), 0, 1.0, False), ValueError),
        (_glue(out=np.ones((2, 9))), ValueError),
        (_glue(layout=3), ValueError),
        # DeepSeek-V3's layout (2) cannot be written in place; xPos's log zeta, centre, rate
        (_glue(layout=2), None),
        (_glue(-np.ones(4)), None),
        (_glue(-np.ones(3)), ValueError),
        (_glue([1.0] * 4), TypeError),
        (_glue(np.ones(4), np.inf, 1.0), ValueError),
        (_glue(np.ones(4), 0.0, np.nan), ValueError),
    ],
)
def test_the_c_glue_checks_what_it_is_given(args, exc):
    _accepts_or_raises(_core.rope_apply, args, exc)


def test_the_c_glue_refuses_deepseeks_layout_in_place():
    x = np.ones((2, 8))
    with pytest.raises(ValueError, match="out must not be x"):
        _core.rope_apply(x, np.zeros(2), np.ones(4), x, 2, 1.0, False)


def _table_glue(*tail, width=8, layout=0):
    """_core.rope_table's arguments: positions 0, frequencies 1, (2, width)
    cos and sin tables, then `tail` (xPos's log zeta, centre and rate, then
    full)."""
    return (np.zeros(2), np.ones(4), np.ones((2, width)), np.ones((2, width)), layout, 1.0, *tail)


@pytest.mark.parametrize(
    "args,exc",
    [
        (_table_glue(), None),
        (_table_glue(None, 0.0, 0.0, False, width=4), None),
        (_table_glue(None, 0.0, 0.0, False), ValueError),
        (_table_glue(layout=2), ValueError),
        (_table_glue(np.ones(5), 0.0, 1.0), ValueError),
    ],
)
def test_the_c_glue_of_the_tables_checks_the_new_options(args, exc):
    _accepts_or_raises(_core.rope_table, args, exc)


def test_the_c_glue_refuses_out_partly_overlapping_x():
    buf = np.ones((3, 8))
    with pytest.raises(ValueError, match="overlap"):
        _core.rope_apply(buf[:2], np.zeros(2), np.ones(4), buf[1:], 0, 1.0, False)
    _core.rope_apply(buf, np.zeros(3), np.ones(4), buf, 0, 1.0, False)  # in place is fine
    np.testing.assert_array_equal(buf, 1.0)


def test_the_c_glue_of_the_tables_checks_what_it_is_given():
    ok = (np.zeros(3), np.ones(4), np.empty((3, 8)), np.empty((3, 8)), 0, 1.0)
    _core.rope_table(*ok)
    bad = [
        (
            (np.zeros(3), np.ones(4), np.empty((3, 8)), np.empty((3, 8), np.float32), 0, 1.0),
            TypeError,
        ),
        ((np.zeros(3), np.ones(4), np.empty((3, 6)), np.empty((3, 6)), 0, 1.0), ValueError),
        ((np.zeros(3), np.ones(4), np.empty((3, 8)), np.empty((3, 8)), 5, 1.0), ValueError),
        ((np.zeros((3, 1)), np.ones(4), np.empty((3, 8)), np.empty((3, 8)), 0, 1.0), ValueError),
    ]
    shared = np.empty((3, 8))
    bad.append(((np.zeros(3), np.ones(4), shared, shared, 0, 1.0), ValueError))
    for args, exc in bad:
        with pytest.raises(exc):
            _core.rope_table(*args)


# ---------------------------------------------------------------- positions in rows: M-RoPE, axial


def _rows(rng, n, shape, kind):
    """n rows of positions: "vision" (a text run, then patch coordinates
    that repeat and jump), "arange" (evenly spaced: the rotated tables) or
    "random"."""
    size = int(np.prod(shape))
    if kind == "arange":
        pos = np.arange(size, dtype=np.float64) + 1000
        return np.stack([pos + 3 * c for c in range(n)]).reshape((n,) + shape)
    if kind == "random":
        return rng.integers(0, 5000, (n,) + shape).astype(np.int64)
    seq = shape[-1]
    grid = np.arange(seq)
    rows = [np.where(grid < seq // 3, grid, seq // 3 + (grid // 5) * (c % 2) + (grid % 5) * c)
            for c in range(n)]  # fmt: skip
    return np.broadcast_to(np.stack(rows).reshape((n,) + (1,) * (len(shape) - 1) + (seq,)),
                           (n,) + shape)  # fmt: skip


# (x shape, seq_axis, rotary_dim, options, positions shape after the rows)
ROW_CASES = {
    "qwen2-vl": ((2, 3, 37, 64), -2, None, dict(mrope_section=[8, 12, 12]), (2, 37)),
    "qwen3-vl": ((2, 37, 3, 64), -3, None,
                 dict(mrope_section=[12, 10, 10], mrope_interleaved=True), (2, 37)),
    "partial": ((2, 3, 37, 40), -2, 32, dict(mrope_section=[4, 6, 6]), (37,)),
    "four-rows": ((1, 2, 37, 48), -2, None, dict(mrope_section=[3, 5, 7, 9]), (1, 37)),
    "qwen-vision": ((40, 5, 80), -3, None, dict(axial=2), (40,)),
    "uneven-axes": ((2, 3, 37, 34), -2, 32, dict(axial=[4, 12]), (2, 1, 37)),
    "3-d axial": ((2, 3, 37, 36), -2, None, dict(axial=3), (2, 3, 37)),
    "tiled": ((1, 8, 1040, 128), -2, None, dict(mrope_section=[16, 24, 24]), (1, 1040)),
}  # fmt: skip


@pytest.mark.parametrize("kind", ["vision", "arange", "random"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ROW_CASES)
def test_rows_of_positions_match_reference(simd, threads, rng, case, dtype, layout, kind):
    shape, seq_axis, rotary_dim, options, pshape = ROW_CASES[case]
    x = rng.standard_normal(shape).astype(dtype)
    n = len(options.get("mrope_section", [])) or (
        options["axial"] if isinstance(options["axial"], int) else len(options["axial"])
    )
    ids = _rows(rng, n, pshape, kind)
    kw = dict(layout=layout, seq_axis=seq_axis, rotary_dim=rotary_dim, **options)
    got = posenc.apply_rope(x, ids, **kw)
    want = reference.apply_rope(x, ids, **kw)
    assert_close_to_reference(got, want, x, positions_max=float(np.max(ids)))
    if rotary_dim is not None:
        np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])
    # an offset is added to every row
    np.testing.assert_array_equal(posenc.apply_rope(x, ids, offset=7, **kw),
                                  posenc.apply_rope(x, ids + 7, **kw))  # fmt: skip
    # in place, and the cos/sin tables
    y = x.copy()
    assert posenc.apply_rope(y, ids, out=y, **kw) is y
    np.testing.assert_array_equal(y, got)
    r = rotary_dim or shape[-1]
    tkw = {k: v for k, v in kw.items() if k not in ("seq_axis", "rotary_dim")}
    cos, sin = posenc.rope_cos_sin(ids, r, dtype=dtype, **tkw)
    wcos, wsin = reference.rope_cos_sin(ids, r, dtype=np.float64, **tkw)
    assert cos.shape == ids.shape[1:] + (r,)
    tol = {np.float16: 2.0**-11, np.float32: 2.0**-24, np.float64: 1e-15}[dtype]
    np.testing.assert_allclose(cos, wcos, rtol=0, atol=2 * tol + 2e-16 * np.max(ids))
    np.testing.assert_allclose(sin, wsin, rtol=0, atol=2 * tol + 2e-16 * np.max(ids))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_of_positions_give_the_same_bits_on_every_path_thread_count_and_layout(
    rng, on_every_path, layout, dtype
):
    # rows evenly spaced (the rotated tables) beside rows that are not
    x = rng.standard_normal((2, 6, 700, 72)).astype(dtype)
    arange = np.arange(700) + 4.5e5
    ids = np.stack([np.tile(arange, (2, 1)), rng.uniform(0, 5e5, (2, 700)),
                    np.tile(arange // 7, (2, 1))])  # fmt: skip
    kw = dict(layout=layout, rotary_dim=64, mrope_section=[10, 12, 10])
    results = on_every_path(
        lambda: (
            posenc.apply_rope(x, ids, **kw),
            posenc.rope_cos_sin(ids, 64, layout=layout, dtype=dtype, mrope_section=[10, 12, 10]),
            posenc.apply_rope(np.asfortranarray(x), ids, **kw),
            np.swapaxes(posenc.apply_rope(np.swapaxes(x, 1, 2), ids, seq_axis=-3, **kw), 1, 2),
        )
    )
    first = results[0][0]
    for rotated, (cos, sin), fortran, transposed in results:
        np.testing.assert_array_equal(rotated, first)
        np.testing.assert_array_equal(fortran, first)
        np.testing.assert_array_equal(transposed, first)
        np.testing.assert_array_equal(cos, results[0][1][0])
        np.testing.assert_array_equal(sin, results[0][1][1])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rows_of_positions_tables_within_one_ulp_at_2_24(simd, ulp_distance, dtype):
    # "the float64 value": NumPy's cos and sin of the same float64 angles,
    # each pair's row times inv_freq (as in the test of one row above); each
    # row rotated along the anchor grid near 2**24, one row jumping
    base = 2.0**24 - 300
    ids = np.stack([np.arange(600) + base, np.arange(600) * 3 + base / 2, (np.arange(600) // 4)])
    inv_freq, _ = posenc.rope_frequencies(64)
    runs = np.repeat([0, 1, 2], [10, 11, 11])
    woven = np.zeros(32, int)
    woven[1:30:3], woven[2:30:3] = 1, 2
    for kw, row in (
        (dict(mrope_section=[10, 11, 11]), runs),
        (dict(mrope_section=[12, 10, 10], mrope_interleaved=True), woven),
    ):
        angle = ids[row].T * inv_freq
        cos, sin = posenc.rope_cos_sin(ids, 64, dtype=dtype, **kw)
        assert ulp_distance(cos, np.tile(np.cos(angle), 2), dtype).max() <= 1
        assert ulp_distance(sin, np.tile(np.sin(angle), 2), dtype).max() <= 1


def test_three_equal_rows_are_plain_rope_bit_for_bit(rng):
    x = rng.standard_normal((2, 4, 300, 64)).astype(np.float32)
    # 2**23: one position per row is no longer rotated there (its fastest
    # pair turns too fast), but a row's slower pairs alone still would be
    for pos in (np.arange(300) + 17, rng.uniform(0, 1e5, 300), np.arange(300) + 2.0**23):
        ids = np.stack([pos, pos, pos])
        for kw in (dict(mrope_section=[16, 8, 8]), dict(mrope_section=[12, 10, 10],
                                                        mrope_interleaved=True)):  # fmt: skip
            np.testing.assert_array_equal(posenc.apply_rope(x, ids, **kw),
                                          posenc.apply_rope(x, pos))  # fmt: skip


def test_axial_rope_is_rotary_embedding_torch_axial_frequencies(rng):
    """rotary-embedding-torch: RotaryEmbedding(dim=16) with freqs_for="lang"
    and get_axial_freqs(H, W) gives each patch (i, j) the angles
    i * theta_k, each twice in a row, for its first 16 features and
    j * theta_k for the next 16, theta_k = 10000 ** (-2k / 16); its
    apply_rotary_emb rotates pairs (2k, 2k+1) (rotate_half of that
    library is GPT-J's every-two) and passes the rest through.  Written out
    here from that definition."""
    h, w, d = 5, 7, 16
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    freqs = np.concatenate(
        [np.repeat(rows[..., None] * theta, 2, -1), np.repeat(cols[..., None] * theta, 2, -1)], -1
    )  # (h, w, 2d)
    x = rng.standard_normal((3, h, w, 2 * d + 4))  # (heads, h, w, features)
    t = x[..., : 2 * d]
    pairs = t.reshape(t.shape[:-1] + (d, 2))
    turned = np.stack([-pairs[..., 1], pairs[..., 0]], -1).reshape(t.shape)
    want = np.concatenate([t * np.cos(freqs) + turned * np.sin(freqs), x[..., 2 * d :]], -1)
    ids = np.stack([rows, cols])  # (2, h, w): row and column of each patch
    got = posenc.apply_rope(x, ids[:, None], axial=2, layout="interleaved", rotary_dim=2 * d)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    # flattened patches, as a sequence
    flat = posenc.apply_rope(
        x.reshape(3, h * w, -1), ids.reshape(2, -1), axial=2, layout="interleaved", rotary_dim=32
    )
    np.testing.assert_array_equal(flat, got.reshape(3, h * w, -1))


def test_positions_in_any_memory_layout(rng):
    # transposed, Fortran-ordered and broadcast position arrays read as their values
    x = rng.standard_normal((2, 3, 9, 32))
    pos = rng.uniform(0, 100, (2, 3, 9))
    want = posenc.apply_rope(x, pos)
    for view in (np.asfortranarray(pos), pos.transpose(2, 0, 1).copy().transpose(1, 2, 0)):
        np.testing.assert_array_equal(posenc.apply_rope(x, view), want)
    np.testing.assert_array_equal(
        posenc.apply_rope(x, pos[:, 0].T.copy().T), posenc.apply_rope(x, pos[:, 0])
    )
    rows = rng.integers(0, 50, (3, 2, 9))
    want = posenc.apply_rope(x, rows, mrope_section=[4, 6, 6])
    for view in (np.asfortranarray(rows), np.broadcast_to(rows[:, :1], rows.shape)):
        np.testing.assert_array_equal(
            posenc.apply_rope(x, view, mrope_section=[4, 6, 6]),
            posenc.apply_rope(x, np.ascontiguousarray(view), mrope_section=[4, 6, 6]),
        )
    np.testing.assert_array_equal(
        posenc.apply_rope(x, np.asfortranarray(rows), mrope_section=[4, 6, 6]), want
    )


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_rows_of_positions_within_one_ulp_at_2_24(
    simd, threads, ulp_distance, interleaved
):
    # the cos and sin apply_rope applies (the rotation of unit pairs): rows
    # rotated along the anchor grid, a row of repeated positions (copied
    # within a cell), a row of scattered ones; each pair its row's angle
    n = 300
    rows = np.stack(
        [
            np.arange(n) + 2.0**24 - 150,
            (np.arange(n) // 3) * 7 + 2.0**23,
            np.arange(n) % 5 + 2.0**24,
        ]
    )
    sections = [12, 10, 10]
    row = np.repeat([0, 1, 2], sections)
    if interleaved:
        row = np.zeros(32, int)
        row[1:30:3], row[2:30:3] = 1, 2
    inv_freq, _ = posenc.rope_frequencies(64)
    angle = rows[row].T * inv_freq
    x = np.zeros((1, 1, n, 64), np.float32)
    x[..., :32] = 1.0
    y = posenc.apply_rope(x, rows, mrope_section=sections, mrope_interleaved=interleaved)[0, 0]
    assert ulp_distance(y[:, :32], np.cos(angle), np.float32).max() <= 1
    assert ulp_distance(y[:, 32:], np.sin(angle), np.float32).max() <= 1


# -- rope_cos_sin's seq_len and the device= in the signatures -------------------------


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16},
        {
            "rope_type": "longrope",
            "short_factor": [1.0] * 4,
            "long_factor": [2.0, 3.0, 4.0, 5.0],
            "max_position_embeddings": 64,
            "original_max_position_embeddings": 16,
        },
    ],
)
def test_rope_cos_sin_seq_len_decides_the_length_dependent_frequencies(scaling):
    pos = np.arange(8)
    inv_freq, attention = posenc.rope_frequencies(8, scaling=scaling, seq_len=40)
    angles = pos[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    cos, sin = posenc.rope_cos_sin(pos, 8, scaling=scaling, seq_len=40, dtype="float64")
    np.testing.assert_allclose(cos, np.cos(angles) * attention, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(angles) * attention, rtol=0, atol=1e-15)
    # without it, the length is max(positions) + 1 = 8: the trained frequencies
    short, _ = posenc.rope_cos_sin(pos, 8, scaling=scaling, dtype="float64")
    assert np.abs(short - cos).max() > 1e-3
    with pytest.raises(ValueError, match="seq_len"):
        posenc.rope_cos_sin(pos, 8, scaling=scaling, seq_len=-1)
    with pytest.raises(TypeError, match="seq_len"):
        posenc.rope_cos_sin(pos, 8, scaling=scaling, seq_len=4.5)


def test_rope_cos_sin_seq_len_is_ignored_by_the_other_families():
    want = posenc.rope_cos_sin(6, 8, scaling={"rope_type": "linear", "factor": 2.0})
    got = posenc.rope_cos_sin(6, 8, scaling={"rope_type": "linear", "factor": 2.0}, seq_len=99)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_every_routed_function_shows_its_device_parameter():
    import inspect

    names = [n for n in posenc.__all__ if hasattr(getattr(posenc, n), "__wrapped_numpy__")]
    assert "rope_cos_sin" in names and "apply_rope" in names and len(names) >= 15
    for name in names:
        params = inspect.signature(getattr(posenc, name)).parameters
        device = params.get("device")
        assert device is not None, name
        assert device.kind is inspect.Parameter.KEYWORD_ONLY and device.default is None, name
        assert list(params)[-1] == "device", name
    # and the parameter is accepted with NumPy input (None: NumPy arrays out)
    cos, _ = posenc.rope_cos_sin(4, 8, device=None)
    assert isinstance(cos, np.ndarray)
