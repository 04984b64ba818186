"""bfloat16 everywhere float16 is accepted.

The references here are independent of the kernels and of posenc.reference:
float64 values computed with NumPy and rounded to bfloat16 once (to odd at
float32 first, then by ml_dtypes' own cast: ml_dtypes casts float64 through
float32 with two nearest-even roundings, which now and then misses the
nearest bfloat16), cases derived by hand, and posenc's float32 kernels
(tested elsewhere against float64) rounded by ml_dtypes' cast, which is what
computing in float32 and rounding once means.  The peers' formula and the
T5 gradient through transformers' own modules are in
tests/conformance/test_bfloat16_transformers.py.
"""

import subprocess
import sys

import numpy as np
import pytest

import posenc
from posenc import reference
from posenc._dtypes import BFLOAT16_BITS
from posenc._reference_rounding import bfloat16_bits
from posenc.bias import t5_bias_table_grad

ml_dtypes = pytest.importorskip("ml_dtypes")  # the test extra installs it
BF16 = np.dtype(ml_dtypes.bfloat16)
F32_TINY = np.float32(2.0**-149)


# ---------------------------------------------------------------- independent references


def round_once(x):
    """The bfloat16 nearest each float64 value, ties to even: rounded to odd
    at float32 (truncate toward zero, set the last bit if anything was lost),
    then to nearest even by ml_dtypes."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
    u = f.view(np.uint32).copy()
    lost = (back != x) & ~np.isnan(x)
    u[lost & (np.abs(back) > np.abs(x))] -= 1
    u[lost] |= 1
    return u.view(np.float32).astype(BF16)


def bits(a):
    return np.asarray(a).view(np.uint16)


def f64(a):
    """A bfloat16 (or any float) array as float64, exactly."""
    return np.asarray(a).astype(np.float64)


def assert_same_bits(actual, expected):
    """Equal bits, except that NaNs only need to be NaNs of the same sign
    (ml_dtypes' cast gives every NaN one canonical payload)."""
    a, e = f64(actual), f64(expected)
    nan = np.isnan(e)
    np.testing.assert_array_equal(np.isnan(a), nan)
    np.testing.assert_array_equal(np.signbit(a[nan]), np.signbit(e[nan]))
    np.testing.assert_array_equal(bits(actual)[~nan], bits(expected)[~nan])


def rotation64(x, pos, rotary=None, base=10000.0, layout="half"):
    """The exact rotation (in float64) of the bfloat16 rows x (..., dim) at
    pos (broadcasting against x.shape[:-1]), and the scale of each output's
    pair, max(|a|, |b|)."""
    x = f64(x)
    dim = x.shape[-1]
    r = rotary or dim
    inv = 1.0 / base ** (np.arange(0, r, 2, dtype=np.float64) / r)
    angle = np.asarray(pos, dtype=np.float64)[..., None] * inv
    c, s = np.cos(angle), np.sin(angle)
    if layout == "half":
        a, b = x[..., : r // 2], x[..., r // 2 : r]
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
    ra, rb = a * c - b * s, b * c + a * s
    scale = np.maximum(np.abs(a), np.abs(b))
    y, sc = x.copy(), np.zeros_like(x)
    if layout == "half":
        y[..., : r // 2], y[..., r // 2 : r] = ra, rb
        sc[..., : r // 2], sc[..., r // 2 : r] = scale, scale
    else:
        y[..., 0:r:2], y[..., 1:r:2] = ra, rb
        sc[..., 0:r:2], sc[..., 1:r:2] = scale, scale
    return y, sc


def bf16_ulp(v):
    """The spacing of bfloat16 at |v| (8 significant bits, 2**-133 below
    the normal range)."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.exp2(np.maximum(e, -126.0) - 7.0)


# ---------------------------------------------------------------- the reference's own rounding


def test_the_references_rounding_is_ml_dtypes_after_round_to_odd():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000) * np.exp2(rng.integers(-150, 129, 200_000))
    x = np.concatenate(
        [x, [0.0, -0.0, np.inf, -np.inf, 1 + 2**-8, 1 + 2**-8 + 2**-30, 3.3961e38, 2.0**-134]]
    )
    np.testing.assert_array_equal(bfloat16_bits(x), bits(round_once(x)))


def test_rounding_once_differs_from_rounding_through_float32_by_hand():
    # 1 + 2**-8 + 2**-30 is just above the midpoint of 1 and 1 + 2**-7: the
    # nearest bfloat16 is 1 + 2**-7; through float32 it is the midpoint,
    # which ties to even (1.0)
    x = 1 + 2.0**-8 + 2.0**-30
    assert f64(round_once(x)) == 1 + 2.0**-7
    assert f64(np.float32(x).astype(BF16)) == 1.0
    # an ALiBi value formed in float64 is rounded once: slope * -|d|, d = -1
    bias = posenc.alibi_bias(1, 1, 2, slopes=[-x], causal=False, q_offset=1, dtype="bfloat16")
    assert f64(bias[0, 0, 0]) == 1 + 2.0**-7


# ---------------------------------------------------------------- generated tables


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
@pytest.mark.parametrize("start", [0, 2**20 - 2048])
def test_sinusoid_bfloat16_is_the_float64_value_rounded_once(on_every_path, layout, start):
    pos = start + np.arange(2048.0)
    dim = 192
    w = 1.0 / 10000.0 ** (np.arange(0, dim, 2) / dim)
    angle = pos[:, None] * w
    if layout == "interleaved":
        exact = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(len(pos), dim)
    else:
        exact = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    expected = round_once(exact)
    for table in on_every_path(lambda: posenc.sinusoid(pos, dim, layout=layout, dtype="bfloat16")):
        assert table.dtype == BF16
        np.testing.assert_array_equal(bits(table), bits(expected))


def test_sinusoid_bfloat16_at_uneven_positions_is_rounded_once(on_every_path):
    pos = np.random.default_rng(1).uniform(0, 2**20, (17, 31))  # every value direct
    angle = pos[..., None] * (1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64))
    exact = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(pos.shape + (64,))
    for table in on_every_path(lambda: posenc.sinusoid(pos, 64, dtype="bf16")):
        assert table.shape == (17, 31, 64)
        np.testing.assert_array_equal(bits(table), bits(round_once(exact)))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_cos_sin_bfloat16_is_the_float64_value_rounded_once(on_every_path, layout):
    pos = np.concatenate([np.arange(1000.0), 2**20 - 1000 + np.arange(1000.0)])
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    inv, factor = posenc.rope_frequencies(128, scaling=scaling)  # transformers-checked elsewhere
    angle = pos[:, None] * inv
    rep = (
        (lambda t: np.concatenate([t, t], -1)) if layout == "half" else (lambda t: t.repeat(2, -1))
    )
    want_cos = round_once(rep(np.cos(angle) * factor))
    want_sin = round_once(rep(np.sin(angle) * factor))
    for cos, sin in on_every_path(
        lambda: posenc.rope_cos_sin(pos, 128, scaling=scaling, layout=layout, dtype=BF16)
    ):
        np.testing.assert_array_equal(bits(cos), bits(want_cos))
        np.testing.assert_array_equal(bits(sin), bits(want_sin))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_len, k_len, q_offset", [(70, 70, None), (1, 5000, None), (9, 40, -7)])
def test_alibi_bfloat16_is_the_float64_value_rounded_once(
    on_every_path, causal, q_len, k_len, q_offset
):
    n = 12  # not a power of two: BLOOM's interleaved slopes
    slopes = np.concatenate(
        [2.0 ** (-8.0 * np.arange(1, 9) / 8), 2.0 ** (-np.arange(1, 16, 2) / 2)]
    )
    slopes = slopes[:n]
    qo = k_len - q_len if q_offset is None else q_offset
    d = np.arange(k_len)[None, :] - (qo + np.arange(q_len)[:, None])
    exact = slopes[:, None, None] * (d if causal else -np.abs(d))[None]
    if causal:
        exact = np.where(d[None] > 0, -np.inf, exact)
    for bias in on_every_path(
        lambda: posenc.alibi_bias(n, q_len, k_len, causal=causal, q_offset=q_offset, dtype="bf16")
    ):
        np.testing.assert_array_equal(bits(bias), bits(round_once(exact)))


def t5_buckets(q_len, k_len, q_offset, bidirectional, num_buckets, max_distance):
    """T5's buckets of the (q, k) grid by posenc.reference's twin (compared
    with transformers' own in tests/conformance)."""
    d = np.arange(k_len)[None, :] - (q_offset + np.arange(q_len)[:, None])
    return reference.relative_position_bucket(
        d, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


def test_t5_bias_of_a_bfloat16_table_gathers_its_values(on_every_path):
    table = np.random.default_rng(2).standard_normal((32, 6)).astype(BF16)
    table[3, 1], table[5, 2], table[7, 0] = np.nan, -np.inf, -0.0
    buckets = t5_buckets(33, 300, 5, True, 32, 128)
    expected = np.moveaxis(table[buckets], -1, 0)
    for bias in on_every_path(lambda: posenc.t5_bias(table, 33, 300, q_offset=5)):
        assert bias.dtype == BF16
        np.testing.assert_array_equal(bits(bias), bits(expected))


# ---------------------------------------------------------------- apply_rope


def assert_one_rounding_of_exact(y, x, pos, **kw):
    """y is the exact rotation plus an error of float32 arithmetic, 2**-20
    max(|a|, |b|) at most, rounded once: between the nearest bfloat16 of the
    exact value minus that error and the one of the exact value plus it;
    and nearly always the nearest bfloat16 of the exact value itself.
    Returns the largest error in bfloat16 spacings at the scale of the
    inputs, max(|a|, |b|)."""
    exact, scale = rotation64(x, pos, **kw)
    slack = scale * 2.0**-20
    lo, hi = f64(round_once(exact - slack)), f64(round_once(exact + slack))
    got = f64(y)
    bad = ~((lo <= got) & (got <= hi))
    assert not bad.any(), (got[bad][:5], exact[bad][:5])
    nearest = bits(round_once(exact)) == bits(y)
    assert nearest.mean() > 0.999
    return np.max(np.abs(got - exact) / bf16_ulp(scale))


@pytest.mark.parametrize("start", [0, 4096, 2**16, 2**20 - 256])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_bfloat16_is_one_rounding_of_the_exact_rotation(simd, start, layout):
    x = np.random.default_rng(start).standard_normal((2, 8, 256, 128)).astype(BF16)
    pos = start + np.arange(256.0)
    y = posenc.apply_rope(x, pos, layout=layout)
    assert y.dtype == BF16
    ulps = assert_one_rounding_of_exact(y, x, pos, layout=layout)
    assert ulps <= 1.0 + 2.0**-12  # half a spacing of |y| <= sqrt(2) max(|a|, |b|), and the slack


def test_apply_rope_bfloat16_at_random_positions_up_to_2_20(simd):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 100, 96)).astype(BF16)
    pos = rng.integers(0, 2**20 + 1, (4, 100))  # per-batch position ids
    y = posenc.apply_rope(x, pos, rotary_dim=64)  # partial: the last 32 pass through
    assert_one_rounding_of_exact(y, x, pos[:, None, :], rotary=64)
    np.testing.assert_array_equal(bits(y[..., 64:]), bits(x[..., 64:]))


def special_rows(rng, shape):
    """bfloat16 rows with NaNs (quiet, signalling, negative), infinities,
    signed zeros, subnormals, the largest finite values, among normal ones."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    k = rng.permutation(flat.size)
    specials = np.array(
        [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.3895e38, -3.3895e38, 1e-39, -1e-40,
         2.0**-133, 5e-41, 1.1754944e-38],
        dtype=np.float32,
    )  # fmt: skip
    take = k[: 4 * len(specials)]
    flat[take] = np.tile(specials, 4)
    out = x.astype(BF16)
    b = bits(out).reshape(-1)
    b[k[-3:]] = [0x7F81, 0xFF81, 0x0001]  # a signalling NaN, its negative, the smallest subnormal
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dim", [64, 58])  # 58: the vector loops' tails too
def test_apply_rope_bfloat16_is_the_float32_rotation_rounded_once(on_every_path, layout, dim):
    # specials included: NaN stays NaN, infinities, -0.0, subnormals and
    # overflow to infinity as float32 arithmetic and one rounding say
    rng = np.random.default_rng(6)
    x = special_rows(rng, (3, 4, 300, dim))
    pos = np.concatenate([np.zeros(1), rng.uniform(0, 2**20, 299)])
    x32 = (bits(x).astype(np.uint32) << 16).view(np.float32)  # the same values, NaNs included
    want = posenc.apply_rope(x32, pos, layout=layout).astype(BF16)
    for y in on_every_path(lambda: posenc.apply_rope(x, pos, layout=layout)):
        assert_same_bits(y, want)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_bfloat16_subnormal_rows_are_rounded_once(on_every_path, layout):
    # rows of subnormals (both elements of each pair tiny): rotated results
    # that are themselves subnormal, which a vector path's conversion may
    # not take as zero; every other row normal, so vectors of each kind
    rng = np.random.default_rng(11)
    b = rng.integers(1, 0x80, (2, 64, 64), dtype=np.uint16) | (
        rng.integers(0, 2, (2, 64, 64), dtype=np.uint16) << 15
    )
    b[:, ::2] = bits(rng.standard_normal((2, 32, 64)).astype(BF16))
    x = b.view(BF16)
    pos = rng.uniform(0, 4096, 64)
    x32 = (b.astype(np.uint32) << 16).view(np.float32)
    want = posenc.apply_rope(x32, pos, layout=layout).astype(BF16)
    assert (np.abs(want[:, 1::2].astype(np.float32)) < 2.0**-126).mean() > 0.5
    for y in on_every_path(lambda: posenc.apply_rope(x, pos, layout=layout)):
        assert_same_bits(y, want)


def test_apply_rope_bfloat16_keeps_a_nan_quiet_with_its_sign_and_payload(simd):
    # pairs (x0, x2) and (x1, x3) at angle 0: a' = a c - b s and b' = b c +
    # a s are NaN when a is; the NaN of a comes out made quiet, with its
    # sign and its payload, never rounded to infinity
    x = np.zeros((2, 4), BF16)
    bits(x)[0] = [0x7F81, 0xFF81, 0x3F80, 0x4000]  # sNaN(1), -sNaN(1), 1.0, 2.0
    bits(x)[1] = [0x7FC5, 0xFFA3, 0x4000, 0xC000]  # qNaN(5), -sNaN(0x23), 2.0, -2.0
    y = posenc.apply_rope(x, positions=[0, 0])
    assert [list(r) for r in bits(y)] == [[0x7FC1, 0xFFC1, 0x7FC1, 0xFFC1], [0x7FC5, 0xFFE3] * 2]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_rope_nans_and_infinities_give_the_same_bits_on_both_paths(
    on_every_path, dtype, layout
):
    # a NaN (of either sign) or an infinity in either place of a pair: the
    # NaN passes through the rotation with its own sign on both paths (the
    # portable a c - b s negates s, never the product a NaN would be in)
    x = np.random.default_rng(16).standard_normal((2, 40, 32)).astype(np.float32)
    x[0, :, 3], x[0, :, 20], x[1, :, 0], x[1, :, 17] = np.nan, -np.nan, np.inf, -np.nan
    x = x.astype(dtype)
    results = on_every_path(lambda: posenc.apply_rope(x, layout=layout))
    for y in results[1:]:
        np.testing.assert_array_equal(y.view(np.uint8), results[0].view(np.uint8))


def test_apply_rope_bfloat16_same_bits_on_every_path_thread_count_and_layout(on_every_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 8, 4096, 128)).astype(BF16)  # 8 MiB: streamed stores
    ref = posenc.apply_rope(x)
    results = on_every_path(lambda: posenc.apply_rope(x))
    xt = np.ascontiguousarray(np.swapaxes(x, 1, 2))  # (batch, seq, heads, dim)
    results += [
        np.swapaxes(y, 1, 2) for y in on_every_path(lambda: posenc.apply_rope(xt, seq_axis=-3))
    ]

    def in_place():
        y = x.copy()
        return posenc.apply_rope(y, out=y)

    results += on_every_path(in_place)
    for y in results:
        np.testing.assert_array_equal(bits(y), bits(ref))
    inter = on_every_path(lambda: posenc.apply_rope(x[..., :96], layout="interleaved"))
    xt96 = np.ascontiguousarray(xt[..., :96])  # interleaved rows of 192 bytes, streamed in lanes
    inter += [
        np.swapaxes(y, 1, 2)
        for y in on_every_path(lambda: posenc.apply_rope(xt96, seq_axis=-3, layout="interleaved"))
    ]
    for y in inter[1:]:
        np.testing.assert_array_equal(bits(y), bits(inter[0]))
    whole = on_every_path(lambda: posenc.apply_rope(x, layout="interleaved"))  # streamed
    for y in whole[1:]:
        np.testing.assert_array_equal(bits(y), bits(whole[0]))


def test_apply_rope_bfloat16_out_and_aliasing_as_float16():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 64, 32)).astype(BF16)
    want = posenc.apply_rope(x)
    out = np.empty_like(x)
    assert posenc.apply_rope(x, out=out) is out
    np.testing.assert_array_equal(bits(out), bits(want))
    y = x.copy()
    assert posenc.apply_rope(y, out=y) is y  # in place
    np.testing.assert_array_equal(bits(y), bits(want))
    # an out that overlaps x other than as x itself: as if through a temporary
    buf = np.concatenate([x.reshape(-1), np.zeros(32, BF16)])
    src, dst = buf[:-32].reshape(x.shape), buf[32:].reshape(x.shape)
    posenc.apply_rope(src, out=dst)
    np.testing.assert_array_equal(bits(dst), bits(want))
    # odd layouts of x and out: the same numbers
    fo = np.asfortranarray(x)
    np.testing.assert_array_equal(bits(posenc.apply_rope(fo)), bits(want))
    rev = np.empty_like(x)[:, ::-1]
    posenc.apply_rope(x[:, ::-1], out=rev)
    np.testing.assert_array_equal(bits(rev), bits(want[:, ::-1]))
    # the inverse undoes the rotation within one rounding each way
    back = posenc.apply_rope(want, inverse=True)
    assert np.max(np.abs(f64(back) - f64(x))) <= 2 * np.max(bf16_ulp(f64(x)))


@pytest.mark.parametrize(
    "out, exc, words",
    [
        (np.empty((2, 3, 8), np.float16), TypeError, "out"),  # float16 is not bfloat16
        (np.empty((2, 3, 8), np.uint16), TypeError, "out"),
        (np.empty((2, 3, 8), BFLOAT16_BITS), TypeError, "out"),  # the other kind of bfloat16
        (np.empty((2, 3, 6), BF16), ValueError, "out"),
        ("read-only", ValueError, "out"),
        ([[0.0]], TypeError, "out"),
    ],
)
def test_apply_rope_bfloat16_bad_out_raises_before_writing(out, exc, words):
    x = np.ones((2, 3, 8), BF16)
    if isinstance(out, str):
        out = np.zeros_like(x)
        out.setflags(write=False)
    before = out.copy() if isinstance(out, np.ndarray) else None
    with pytest.raises(exc, match=words):
        posenc.apply_rope(x, out=out)
    if before is not None:
        np.testing.assert_array_equal(out.view(np.uint8), before.view(np.uint8))


def test_bfloat16_bits_are_not_taken_for_data_as_uint16():
    with pytest.raises(TypeError, match="x"):
        posenc.apply_rope(np.ones((2, 8), np.uint16))
    with pytest.raises(TypeError, match="table"):
        posenc.t5_bias(np.ones((32, 2), np.uint16), 3)
    with pytest.raises(TypeError, match="scores"):
        posenc.alibi_bias(2, 3, scores=np.zeros((2, 3, 3), np.uint16))


# ---------------------------------------------------------------- scores= adds


def scores_with_specials(rng, shape):
    s = rng.standard_normal(shape).astype(np.float32) * 4
    flat = s.reshape(-1)
    flat[rng.permutation(flat.size)[:9]] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-39,
                                             3.38e38, -3.38e38]  # fmt: skip
    return s.astype(BF16)


def test_alibi_scores_add_bfloat16_is_the_float32_sum_rounded_once(on_every_path):
    rng = np.random.default_rng(9)
    scores = scores_with_specials(rng, (2, 8, 100, 120))
    bias = posenc.alibi_bias(8, 100, 120, dtype="bfloat16")  # rounded once (tested above)
    want = (f64(scores).astype(np.float32) + f64(bias).astype(np.float32)).astype(BF16)
    with np.errstate(invalid="ignore"):
        assert_same_bits(scores + bias, want)  # which is ml_dtypes' own bfloat16 add

    def add():
        s = scores.copy()
        assert posenc.alibi_bias(8, 100, 120, scores=s) is s
        return s

    for got in on_every_path(add):
        assert_same_bits(got, want)


@pytest.mark.parametrize("table_dtype", [np.float32, BF16, np.float16])
def test_t5_scores_add_bfloat16_is_the_float32_sum_rounded_once(on_every_path, table_dtype):
    rng = np.random.default_rng(10)
    table = (rng.standard_normal((32, 4)) * 3).astype(table_dtype)
    scores = scores_with_specials(rng, (3, 4, 50, 170))
    buckets = t5_buckets(50, 170, 0, True, 32, 128)
    bias = round_once(f64(np.moveaxis(table[buckets], -1, 0)))  # the table rounded to bfloat16
    want = (f64(scores).astype(np.float32) + f64(bias).astype(np.float32)).astype(BF16)

    def add():
        s = scores.copy()
        return posenc.t5_bias(table, 50, 170, scores=s)

    for got in on_every_path(add):
        assert_same_bits(got, want)


def test_scores_add_bfloat16_rounds_to_nearest_even_by_hand():
    # a score plus the bias of one bucket (distance 0: bucket 0): halfway
    # cases tie to even, the largest finite value plus half its spacing
    # overflows, signed zeros and subnormals as float32 says
    table = np.zeros((32, 1), BF16)
    cases = [
        (1.0, 2.0**-8, 1.0),  # tie: down to even
        (1 + 2.0**-7, 2.0**-8, 1 + 2.0**-6),  # tie: up to even
        (-1.0, -(2.0**-8), -1.0),
        (1.0, 2.0**-8 + 2.0**-15, 1 + 2.0**-7),  # above the tie
        (3.3895313892515355e38, 2.0**119, np.inf),  # max + half a spacing: to even, infinity
        (3.3895313892515355e38, 2.0**118, 3.3895313892515355e38),
        (-0.0, -0.0, -0.0),
        (2.0**-126, -(2.0**-127), 2.0**-127),  # into the subnormals, exactly
    ]
    for s, b, want in cases:
        table[0, 0] = b
        assert f64(table[0, 0]) == b  # each bias exact in bfloat16
        sc = np.full((1, 1, 1, 1), s, np.float32).astype(BF16)
        out = f64(posenc.t5_bias(table, 1, 1, scores=sc))[0, 0, 0, 0]
        assert out == want and np.signbit(out) == np.signbit(want), (s, b, out)


def test_scores_add_bfloat16_on_strided_and_leading_axes():
    rng = np.random.default_rng(11)
    big = rng.standard_normal((2, 3, 6, 40, 90)).astype(BF16)
    view = big[:, ::-1, ::2, :, 5:75]  # negative and strided outer axes, offset rows
    expected = posenc.alibi_bias(3, 40, 70, scores=np.ascontiguousarray(view))
    untouched = big.copy()
    posenc.alibi_bias(3, 40, 70, scores=view)
    np.testing.assert_array_equal(bits(view), bits(expected))
    mask = np.ones(big.shape, bool)
    mask[:, ::-1, ::2, :, 5:75] = False
    np.testing.assert_array_equal(bits(big)[mask], bits(untouched)[mask])


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"dtype": "float16"}, TypeError, "dtype"),  # scores are bfloat16
        ({"dtype": "bfloat16"}, None, None),
        ({"dtype": "bf16"}, None, None),
        ({"dtype": BF16}, None, None),
        ({"dtype": BFLOAT16_BITS}, None, None),
    ],
)
def test_alibi_scores_dtype_must_name_bfloat16(kwargs, exc, words):
    scores = np.zeros((2, 3, 3), BF16)
    if exc is None:
        posenc.alibi_bias(2, 3, scores=scores, **kwargs)
        assert f64(scores[0, 1, 0]) == -0.0625
    else:
        with pytest.raises(exc, match=words):
            posenc.alibi_bias(2, 3, scores=scores, **kwargs)
        assert not bits(scores).any()


# ---------------------------------------------------------------- ml_dtypes and posenc's bits


def test_dtype_names_and_objects_of_bfloat16():
    for name in ["bfloat16", "bf16", ml_dtypes.bfloat16, BF16]:
        assert posenc.sinusoid(3, 4, dtype=name).dtype == BF16
        assert posenc.rope_cos_sin(3, 4, dtype=name)[0].dtype == BF16
        assert posenc.alibi_bias(2, 3, dtype=name).dtype == BF16
    out = np.empty((3, 4), BF16)
    assert posenc.sinusoid(3, 4, out=out) is out  # the dtype from out


def test_bfloat16_bits_arrays_give_bits_arrays_with_the_same_bits():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 20, 16)).astype(BF16)
    xb = x.view(BFLOAT16_BITS)
    y = posenc.apply_rope(xb, offset=7)
    assert y.dtype == BFLOAT16_BITS
    np.testing.assert_array_equal(bits(y), bits(posenc.apply_rope(x, offset=7)))
    t = posenc.sinusoid(5, 8, dtype=BFLOAT16_BITS)
    assert t.dtype == BFLOAT16_BITS
    np.testing.assert_array_equal(bits(t), bits(posenc.sinusoid(5, 8, dtype="bfloat16")))
    out = np.empty((5, 8), BFLOAT16_BITS)
    assert posenc.sinusoid(5, 8, dtype="bfloat16", out=out) is out  # out's kind of bfloat16
    cos, _ = posenc.rope_cos_sin(5, 8, dtype=BFLOAT16_BITS)
    np.testing.assert_array_equal(bits(cos), bits(posenc.rope_cos_sin(5, 8, dtype="bf16")[0]))
    a = posenc.alibi_bias(3, 4, 6, dtype=BFLOAT16_BITS)
    np.testing.assert_array_equal(bits(a), bits(posenc.alibi_bias(3, 4, 6, dtype="bf16")))
    table = rng.standard_normal((32, 3)).astype(BF16)
    tb = posenc.t5_bias(table.view(BFLOAT16_BITS), 4, 6)
    assert tb.dtype == BFLOAT16_BITS
    np.testing.assert_array_equal(bits(tb), bits(posenc.t5_bias(table, 4, 6)))
    s = rng.standard_normal((2, 3, 4, 6)).astype(BF16)
    sb = s.copy().view(BFLOAT16_BITS)
    posenc.t5_bias(table, 4, 6, scores=sb)
    np.testing.assert_array_equal(bits(sb), bits(posenc.t5_bias(table, 4, 6, scores=s)))


def test_without_ml_dtypes_a_bfloat16_name_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now fails
    for call in [
        lambda: posenc.sinusoid(4, 8, dtype="bfloat16"),
        lambda: posenc.rope_cos_sin(4, 8, dtype="bf16"),
        lambda: posenc.alibi_bias(2, 3, dtype="bfloat16"),
    ]:
        with pytest.raises(TypeError, match=r"dtype.*pip install 'posenc\[bfloat16\]'"):
            call()
    # posenc's own bits need nothing
    assert posenc.sinusoid(4, 8, dtype=BFLOAT16_BITS).dtype == BFLOAT16_BITS
    s = np.zeros((2, 3, 3), BFLOAT16_BITS)
    posenc.alibi_bias(2, 3, scores=s, dtype="bfloat16")
    assert bits(s)[0, 1, 0] == 0xBD80  # -0.0625


def test_import_posenc_does_not_import_ml_dtypes():
    code = (
        "import sys, numpy as np, posenc\n"
        "posenc.sinusoid(4, 8); posenc.apply_rope(np.ones((2, 4), np.float32))\n"
        "posenc.alibi_bias(2, 3, scores=np.zeros((2, 3, 3), np.float16))\n"
        "sys.exit('ml_dtypes' in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- T5's backward pass


def add_at(grad, q_offset, bidirectional, num_buckets, max_distance):
    """The table gradient by np.add.at, every element into its bucket, float64."""
    g = f64(grad)
    heads, q_len, k_len = g.shape[-3:]
    g = g.reshape((-1, heads, q_len, k_len))
    b = np.broadcast_to(
        t5_buckets(q_len, k_len, q_offset, bidirectional, num_buckets, max_distance), g.shape
    )
    h = np.broadcast_to(np.arange(heads)[:, None, None], g.shape)
    out, mag = np.zeros((num_buckets, heads)), np.zeros((num_buckets, heads))
    np.add.at(out, (b, h), g)
    np.add.at(mag, (b, h), np.abs(g))
    return out, mag, g.shape[0] * q_len + q_len + k_len


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, BF16])
@pytest.mark.parametrize(
    "shape, q_offset, bidirectional, num_buckets, max_distance",
    [
        ((4, 30, 50), 0, True, 32, 128),
        ((2, 3, 4, 70, 20), 11, False, 32, 20),
        ((1, 5, 1, 900), 899, False, 64, 300),  # a decoding step
        ((2, 2, 120, 130), -40, True, 7, 9),
    ],
)
def test_t5_table_grad_equals_add_at(
    simd, dtype, shape, q_offset, bidirectional, num_buckets, max_distance
):
    grad = np.random.default_rng(13).standard_normal(shape).astype(dtype)
    got = t5_bias_table_grad(
        grad, num_buckets, bidirectional=bidirectional, max_distance=max_distance, q_offset=q_offset
    )
    assert got.shape == (num_buckets, shape[-3])
    assert got.dtype == (np.float64 if dtype == np.float64 else np.float32)
    want, mag, n = add_at(grad, q_offset, bidirectional, num_buckets, max_distance)
    eps = 2.0**-53 if dtype == np.float64 else 2.0**-24
    assert np.all(np.abs(got - want) <= n * eps * mag)  # the docstring's bound
    np.testing.assert_array_equal(got == 0, mag == 0)  # buckets no distance reaches: 0


def test_t5_table_grad_same_bits_for_threads_paths_and_layouts(on_every_path):
    rng = np.random.default_rng(14)
    grad = rng.standard_normal((2, 8, 200, 300)).astype(np.float32)
    ref = t5_bias_table_grad(grad, 32)
    for got in on_every_path(lambda: t5_bias_table_grad(grad, 32)):
        np.testing.assert_array_equal(got, ref)
    # a strided view, a byte-swapped copy, a list: the same bits
    big = np.zeros((2, 8, 200, 310), np.float32)
    big[..., 5:305] = grad
    np.testing.assert_array_equal(t5_bias_table_grad(big[..., 5:305], 32), ref)
    np.testing.assert_array_equal(t5_bias_table_grad(grad.astype(">f4"), 32), ref)
    half = grad.astype(BF16)
    np.testing.assert_array_equal(
        t5_bias_table_grad(half, 32), t5_bias_table_grad(half.view(BFLOAT16_BITS), 32)
    )
    # a broadcast batch (stride 0) counts every batch
    one = grad[:1]
    np.testing.assert_array_equal(
        t5_bias_table_grad(np.broadcast_to(one, (3,) + one.shape[1:]), 32),
        t5_bias_table_grad(np.concatenate([one] * 3), 32),
    )


def test_t5_table_grad_is_the_transpose_of_t5_bias():
    # <t5_bias(T), G> = <T, grad(G)> for any table T: the adjoint, in float64
    rng = np.random.default_rng(15)
    table = rng.standard_normal((32, 5))
    grad = rng.standard_normal((2, 5, 40, 60))
    lhs = np.sum(posenc.t5_bias(table, 40, 60, q_offset=3, bidirectional=False) * grad)
    rhs = np.sum(table * t5_bias_table_grad(grad, 32, q_offset=3, bidirectional=False))
    assert abs(lhs - rhs) <= 1e-12 * np.sum(np.abs(grad))


@pytest.mark.parametrize(
    "grad, kwargs, exc, words",
    [
        (np.ones((3, 4)), {}, ValueError, "grad"),
        (np.ones((2, 3, 4), np.int32), {}, TypeError, "grad"),
        (np.ones((0, 3, 4)), {}, ValueError, "grad"),
        (np.ones((2, 3, 4)), {"num_buckets": 1}, ValueError, "num_buckets"),
        (np.ones((2, 3, 4)), {"max_distance": 8}, ValueError, "max_distance"),
        (np.ones((2, 3, 4)), {"bidirectional": 1}, TypeError, "bidirectional"),
        (np.ones((2, 3, 4)), {"q_offset": 2**60}, ValueError, "q_offset"),
        (np.ones((2, 3, 4)), {"num_buckets": 2.0}, TypeError, "num_buckets"),
    ],
)
def test_t5_table_grad_bad_input_names_the_argument(grad, kwargs, exc, words):
    args = {"num_buckets": 32, **kwargs}
    with pytest.raises(exc, match=words):
        t5_bias_table_grad(grad, args.pop("num_buckets"), **args)


def test_t5_table_grad_of_an_empty_batch_is_zero():
    got = t5_bias_table_grad(np.zeros((0, 3, 4, 5), np.float32), 32)
    np.testing.assert_array_equal(got, np.zeros((32, 3), np.float32))


@pytest.mark.parametrize("dtype", [BF16, BFLOAT16_BITS])
def test_bfloat16_tables_written_into_strided_out(dtype):
    # an out= the kernels cannot write directly goes through a temporary
    big = np.zeros((10, 16), dtype)
    view = big[::2, ::2]
    assert posenc.sinusoid(5, 8, out=view) is view
    np.testing.assert_array_equal(bits(big[::2, ::2]), bits(posenc.sinusoid(5, 8, dtype=dtype)))
    assert not bits(big[1::2]).any() and not bits(big[:, 1::2]).any()
    out = np.zeros((3, 5, 12), dtype)[:, :, ::2]
    posenc.alibi_bias(3, 5, 6, out=out)
    np.testing.assert_array_equal(bits(out), bits(posenc.alibi_bias(3, 5, 6, dtype=dtype)))
    table = np.random.default_rng(17).standard_normal((32, 3)).astype(BF16).view(dtype)
    out = np.zeros((3, 5, 12), dtype)[:, ::-1, ::2]
    posenc.t5_bias(table, 5, 6, out=out)
    np.testing.assert_array_equal(bits(out), bits(posenc.t5_bias(table, 5, 6)))


def test_the_numpy_twins_take_bfloat16_as_the_kernels_do():
    rng = np.random.default_rng(18)
    pos = rng.uniform(0, 5000, 300)
    for fast, slow in [
        (posenc.sinusoid(pos, 64, dtype="bf16"), reference.sinusoid(pos, 64, dtype="bf16")),
        (
            posenc.rope_cos_sin(pos, 64, dtype="bf16")[1],
            reference.rope_cos_sin(pos, 64, dtype="bf16")[1],
        ),
        (posenc.alibi_bias(6, 40, 90, dtype="bf16"), reference.alibi_bias(6, 40, 90, dtype="bf16")),
    ]:
        assert fast.dtype == slow.dtype == BF16
        np.testing.assert_array_equal(bits(fast), bits(slow))
    table = rng.standard_normal((32, 6)).astype(BF16)
    scores = rng.standard_normal((2, 6, 40, 90)).astype(BF16)
    np.testing.assert_array_equal(
        bits(posenc.t5_bias(table, 40, 90, scores=scores.copy())),
        bits(reference.t5_bias(table, 40, 90, scores=scores.copy())),
    )
    x = rng.standard_normal((2, 6, 40, 64)).astype(BF16).view(BFLOAT16_BITS)
    fast, slow = posenc.apply_rope(x, offset=3), reference.apply_rope(x, offset=3)
    assert fast.dtype == slow.dtype == BFLOAT16_BITS
    assert np.mean(bits(fast) == bits(slow)) > 0.999  # the twin rounds the exact rotation
    grad = rng.standard_normal((2, 6, 40, 90)).astype(BF16)
    np.testing.assert_allclose(
        t5_bias_table_grad(grad, 32), reference.t5_bias_table_grad(grad, 32), rtol=1e-5, atol=1e-4
    )


def _bfloat16_tables(values):
    """The bfloat16 table `values` as each library holds one: ml_dtypes'
    array, posenc's bits array, a torch tensor and a JAX array (those two
    when installed)."""
    tables = {"ml_dtypes": values, "bits": values.view(BFLOAT16_BITS)}
    try:
        import torch
    except ImportError:  # pragma: no cover - the test extra installs torch
        pass
    else:
        tables["torch"] = torch.from_numpy(values.view(np.int16).copy()).view(torch.bfloat16)
    try:
        import jax.numpy as jnp
    except ImportError:  # pragma: no cover - the test extra installs jax
        pass
    else:
        tables["jax"] = jnp.asarray(values)
    return tables


def test_the_probe_reads_a_bfloat16_table_as_its_exact_values():
    # each analysis on a bfloat16 table, of any library, is the analysis of
    # the same values in float32 (which holds every bfloat16 exactly)
    from posenc import probe

    rng = np.random.default_rng(19)
    values = rng.standard_normal((48, 16)).astype(BF16)
    exact = values.astype(np.float32)
    cos = probe.cosine_similarity(exact)
    info = probe.informativeness(exact)
    order = probe.relative_order_classification(exact, seed=0)
    for kind, table in _bfloat16_tables(values).items():
        np.testing.assert_array_equal(probe.cosine_similarity(table), cos, err_msg=kind)
        np.testing.assert_array_equal(
            probe.informativeness(table).singular_values, info.singular_values, err_msg=kind
        )
        got = probe.relative_order_classification(table, seed=0)
        np.testing.assert_array_equal(got.fold_errors, order.fold_errors, err_msg=kind)


def test_bfloat16_positions_and_slopes_are_read_as_their_exact_values():
    # as float16 positions are: the values they hold (257 is not one of
    # them), every library's bfloat16 alike; a NaN is refused as in float32
    values = np.array([0, 1.5, 7, 255, 256, 258, 3e4, 1e6]).astype(BF16)
    exact = values.astype(np.float32)
    x = np.random.default_rng(20).standard_normal((2, 8, 16)).astype(np.float32)
    want = [
        posenc.sinusoid(exact, 16),
        posenc.rope_cos_sin(exact, 16)[1],
        posenc.apply_rope(x, exact),
        posenc.alibi_bias(2, 3, 5, slopes=exact[1:3]),
    ]
    for kind, pos in _bfloat16_tables(values).items():
        got = [
            posenc.sinusoid(pos, 16),
            posenc.rope_cos_sin(pos, 16)[1],
            posenc.apply_rope(x, pos),
            posenc.alibi_bias(2, 3, 5, slopes=pos[1:3]),
        ]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w, err_msg=kind)
    nan = np.array([1.0, np.nan], np.float32).astype(BF16)
    with pytest.raises(ValueError, match="^positions must be finite"):
        posenc.sinusoid(nan, 16)


@pytest.mark.parametrize("fn", ["xl_relative_table", "tener_relative_table"])
def test_bfloat16_relative_tables_are_the_float64_tables_rounded_once(fn):
    # both tables are sines and cosines rounded once from float64 (no
    # double rounding through float32)
    args = (7, 19, 16) if fn == "xl_relative_table" else (19, 16)
    got = getattr(posenc, fn)(*args, dtype="bfloat16")
    assert got.dtype == BF16
    exact = getattr(posenc, fn)(*args, dtype="float64")
    np.testing.assert_array_equal(bits(got), bits(round_once(exact)))
