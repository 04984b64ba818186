"""Attention biases: ALiBi, T5 buckets and bias, Shaw's relative positions.

The kernels are checked against their pure-NumPy twins in posenc.reference
bit for bit (both SIMD paths, one and two threads, every dtype and option),
against hand-derived values, and for the properties the formulas imply.
transformers' own functions are the witness in tests/conformance.
"""

import numpy as np
import pytest
from special_bits import SPECIAL_BITS
from t5_models import BUCKET_CONFIGS as T5_BUCKETS
from t5_models import ONE_BUCKET_PER_DIRECTION

import posenc
from posenc import _core
from posenc import reference as ref

DTYPES = ["float16", "float32", "float64"]


def assert_same_bits(actual, expected):
    """Same shape, dtype and bits (so +0.0 and -0.0 differ, nan must match nan)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    a = np.ascontiguousarray(actual, dtype=actual.dtype.newbyteorder("="))
    e = np.ascontiguousarray(expected, dtype=expected.dtype.newbyteorder("="))
    if a.dtype.kind == "f":
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        a, e = a.view(bits), e.view(bits)
    mismatch = np.flatnonzero((a != e).ravel())
    assert mismatch.size == 0, (
        f"{mismatch.size} elements differ, first at flat index {mismatch[:5]}: "
        f"{actual.ravel()[mismatch[:5]]} != {expected.ravel()[mismatch[:5]]}"
    )


def random_scores(rng, shape, dtype):
    return (rng.standard_normal(shape) * 4).astype(dtype)


# ---------------------------------------------------------------- ALiBi: slopes


def test_alibi_slopes_for_eight_heads_are_the_papers_powers_of_one_half():
    assert_same_bits(posenc.alibi_slopes(8), 0.5 ** np.arange(1, 9))


def test_alibi_slopes_for_twelve_heads_append_every_other_slope_of_sixteen():
    sixteen = 2.0 ** (-0.5 * np.arange(1, 17))
    expected = np.concatenate([0.5 ** np.arange(1, 9), sixteen[0::2][:4]])
    np.testing.assert_allclose(posenc.alibi_slopes(12), expected, rtol=2e-16, atol=0)


@pytest.mark.parametrize("max_bias", [8.0, 4.0, 16.0, 1.5])
def test_alibi_slopes_match_reference_for_every_head_count(max_bias):
    for n in range(1, 130):
        got = posenc.alibi_slopes(n, max_bias=max_bias)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_allclose(got, ref.alibi_slopes(n, max_bias=max_bias), rtol=4e-16)


# ---------------------------------------------------------------- ALiBi: tables


ALIBI_SHAPES = [
    # (n_heads, q_len, k_len, q_offset)
    (4, 96, 100, None),  # queries are the newest 96 of 100 keys
    (3, 97, 97, None),
    (5, 1, 2049, None),  # one decoding step
    (8, 2, 5000, None),  # long enough for the threads to share the per-head vectors
    (2, 40, 33, 0),  # more queries than keys, at an explicit offset
    (6, 17, 50, -9),  # queries before the first key
    (1, 64, 640, 1000),  # queries after the last key
    (8, 1, 10001, None),  # a decoding step written straight into the rows, by both threads
    (3, 1, 9000, 5000),  # a decoding step with keys ahead of the query
    (2, 3, 50, 2**53 - 5),  # distances too large for float64 to count exactly
    (2, 1, 70, -(2**53) + 3),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_equals_reference_for_every_option(simd, threads, dtype, causal):
    for n_heads, q_len, k_len, q_offset in ALIBI_SHAPES:
        got = posenc.alibi_bias(
            n_heads, q_len, k_len, causal=causal, q_offset=q_offset, dtype=dtype
        )
        with np.errstate(over="ignore"):  # float16 of slope * 2**53 is inf
            want = ref.alibi_bias(
                n_heads, q_len, k_len, causal=causal, q_offset=q_offset, dtype=dtype
            )
        assert_same_bits(got, want)


def test_alibi_bias_with_user_slopes_equals_reference(simd):
    slopes = [0.3, -0.25, 1e-3, 7.0]
    got = posenc.alibi_bias(4, 30, 45, slopes=slopes, causal=False)
    assert_same_bits(got, ref.alibi_bias(4, 30, 45, slopes=slopes, causal=False))


@pytest.mark.parametrize("dtype", DTYPES)
def test_alibi_decoding_step_into_strided_out(simd, threads, dtype):
    # one query: each head's row is written directly, wherever it lies
    want = ref.alibi_bias(6, 1, 5003, dtype=dtype)
    base = np.full((6, 1, 2 * 5003), 7, dtype)
    out = base[::-1, :, 1::2]
    assert posenc.alibi_bias(6, 1, 5003, dtype=dtype, out=out) is out
    assert_same_bits(out, want)
    np.testing.assert_array_equal(base[..., 0::2], 7)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_large_alibi_fill_streams_the_same_values_as_reference(simd, threads, dtype):
    # > 8 MiB: the AVX2 path writes with non-temporal stores; an odd k_len
    # puts the rows at every alignment
    shape = (2, 1024, 2051) if dtype == "float32" else (4, 1024, 2051)
    got = posenc.alibi_bias(*shape, dtype=dtype)
    assert_same_bits(got, ref.alibi_bias(*shape, dtype=dtype))


def test_alibi_bias_default_offset_puts_queries_at_the_end_of_the_keys():
    bias = posenc.alibi_bias(8, 1, 10, dtype="float64")
    slopes = 0.5 ** np.arange(1, 9)
    np.testing.assert_array_equal(bias[:, 0, :], slopes[:, None] * (np.arange(10) - 9))


def test_alibi_rows_are_linear_in_distance_with_the_heads_slope():
    slopes = posenc.alibi_slopes(16)
    bias = posenc.alibi_bias(16, 50, 80, causal=False, q_offset=13, dtype="float64")
    for i in range(50):
        qpos = 13 + i
        # one step further from the query costs exactly one slope, on both sides
        left = np.diff(bias[:, i, : qpos + 1], axis=-1)
        right = np.diff(bias[:, i, qpos:], axis=-1)
        np.testing.assert_allclose(left, np.broadcast_to(slopes[:, None], left.shape), rtol=1e-12)
        np.testing.assert_allclose(
            right, np.broadcast_to(-slopes[:, None], right.shape), rtol=1e-12
        )
        assert (bias[:, i, qpos] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_alibi_equals_symmetric_on_and_below_the_diagonal_and_masks_above(dtype):
    causal = posenc.alibi_bias(6, 70, 90, causal=True, dtype=dtype)
    symmetric = posenc.alibi_bias(6, 70, 90, causal=False, dtype=dtype)
    qpos = 20 + np.arange(70)[:, None]
    past = np.broadcast_to(np.arange(90)[None, :] <= qpos, causal.shape)
    assert_same_bits(causal[past], symmetric[past])
    assert (causal[~past] == -np.inf).all()
    assert np.isfinite(symmetric).all()


# ---------------------------------------------------------------- ALiBi: scores=


def score_layouts(rng, lead, tail, dtype):
    """(name, scores array) pairs of one logical shape lead + tail in several layouts."""
    shape = lead + tail
    h, q, k = tail
    base = random_scores(rng, shape, dtype)
    yield "contiguous", base.copy()
    big = random_scores(rng, lead + (h, q + 3, k + 5), dtype)
    yield "strided rows", big[..., 1 : 1 + q, 2 : 2 + k]
    yield "reversed heads and rows", base.copy()[..., ::-1, ::-1, :]
    wide = random_scores(rng, (lead[0] * 2,) + lead[1:] + tail, dtype)
    yield "every other batch", wide[::2]
    swapped = np.moveaxis(random_scores(rng, lead[::-1] + tail, dtype), (0, 1), (1, 0))
    yield "transposed batch axes", swapped  # leading axes that cannot merge
    yield "fortran order", np.asfortranarray(base)  # a temporary
    yield "byte-swapped", base.astype(base.dtype.newbyteorder())  # a temporary
    yield "strided keys", random_scores(rng, shape[:-1] + (2 * k,), dtype)[..., ::2]  # a temporary


@pytest.mark.parametrize("dtype", DTYPES)
def test_alibi_scores_add_equals_reference_on_every_layout(simd, threads, dtype, rng):
    tail = (4, 33, 300)
    for name, scores in score_layouts(rng, (2, 3), tail, dtype):
        want = ref.alibi_bias(4, 33, 300, scores=scores.copy())
        got = posenc.alibi_bias(4, 33, 300, scores=scores)
        assert got is scores, name
        assert_same_bits(got, want)


def test_alibi_scores_add_works_without_batch_axes_and_with_an_offset(simd, rng):
    scores = random_scores(rng, (3, 20, 25), "float32")
    want = ref.alibi_bias(3, 20, 25, q_offset=30, causal=False, scores=scores.copy())
    assert_same_bits(posenc.alibi_bias(3, 20, 25, q_offset=30, causal=False, scores=scores), want)


def test_alibi_scores_add_equals_adding_the_table_in_the_scores_dtype(simd, rng):
    for dtype in DTYPES:
        scores = random_scores(rng, (2, 8, 64, 64), dtype)
        expected = scores + ref.alibi_bias(8, 64, 64, dtype=dtype)
        assert_same_bits(posenc.alibi_bias(8, 64, 64, scores=scores), expected)


def test_alibi_scores_add_of_minus_inf_follows_ieee_addition(simd):
    scores = np.zeros((1, 2, 2), np.float32)
    scores[0, 0, 1] = np.inf  # a future key: inf + -inf
    scores[0, 1, 0] = np.nan
    posenc.alibi_bias(1, 2, scores=scores)
    assert np.isnan(scores[0, 0, 1]) and np.isnan(scores[0, 1, 0])
    assert scores[0, 0, 0] == 0 and scores[0, 1, 1] == 0


def test_alibi_scores_of_size_zero_batch_are_left_alone():
    scores = np.zeros((0, 4, 3, 3), np.float32)
    assert posenc.alibi_bias(4, 3, scores=scores) is scores


# ---------------------------------------------------------------- ALiBi: out=


@pytest.mark.parametrize("dtype", DTYPES)
def test_alibi_out_in_any_layout_gets_the_same_values(simd, dtype):
    want = ref.alibi_bias(3, 40, 50, dtype=dtype)
    layouts = [
        np.empty((3, 40, 50), dtype),
        np.empty((3, 40, 50), dtype, order="F"),
        np.empty((3, 40, 50), np.dtype(dtype).newbyteorder()),
        np.empty((3, 45, 60), dtype)[:, 5:, 10:],
        np.empty((3, 40, 50), dtype)[::-1, ::-1],
    ]
    for out in layouts:
        assert posenc.alibi_bias(3, 40, 50, out=out) is out
        assert_same_bits(out, want)


def test_alibi_dtype_follows_out_when_not_given():
    out = np.empty((2, 3, 3), np.float64)
    posenc.alibi_bias(2, 3, out=out)
    assert_same_bits(out, ref.alibi_bias(2, 3, dtype="float64"))


# ---------------------------------------------------------------- T5 buckets

# T5's configurations and the ones only posenc defines
BUCKET_CONFIGS = T5_BUCKETS + ONE_BUCKET_PER_DIRECTION


@pytest.mark.parametrize("config", BUCKET_CONFIGS)
def test_relative_position_bucket_equals_reference(threads, config, rng):
    bidirectional, num_buckets, max_distance = config
    rel = np.concatenate(
        [
            np.arange(-5000, 5001),
            rng.integers(-(2**40), 2**40, 40000),
            [2**62, -(2**62), 2**63 - 1, -(2**63) + 1],
        ]
    )
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert_same_bits(
        posenc.relative_position_bucket(rel, **kw), ref.relative_position_bucket(rel, **kw)
    )


def test_relative_position_bucket_keeps_shape_and_takes_any_integer_dtype():
    rel = np.arange(-60, 60).reshape(4, 5, 6)
    want = ref.relative_position_bucket(rel)
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.dtype(">i4")):
        got = posenc.relative_position_bucket(rel.astype(dtype))
        assert got.dtype == np.int64
        assert_same_bits(got, want)
    assert_same_bits(posenc.relative_position_bucket(rel.T), want.T)
    assert_same_bits(posenc.relative_position_bucket(rel.tolist()), want)
    assert posenc.relative_position_bucket(-3).shape == ()


def test_relative_position_bucket_of_huge_unsigned_distances_is_the_last_bucket():
    rel = np.array([2**64 - 1, 2**63, 200], np.uint64)
    np.testing.assert_array_equal(posenc.relative_position_bucket(rel), [31, 31, 31])
    np.testing.assert_array_equal(
        posenc.relative_position_bucket(np.array([-(2**63)]), bidirectional=False), [31]
    )


def test_t5_small_distances_have_a_bucket_each():
    # T5: 16 buckets per direction, 8 exact ones
    rel = np.arange(-7, 8)
    expected = np.where(rel > 0, 16 + rel, -rel)
    np.testing.assert_array_equal(posenc.relative_position_bucket(rel), expected)
    # decoder: all 32 buckets look back, 16 exact; keys ahead share bucket 0
    rel = np.arange(-15, 10)
    expected = np.where(rel > 0, 0, -rel)
    np.testing.assert_array_equal(
        posenc.relative_position_bucket(rel, bidirectional=False), expected
    )


@pytest.mark.parametrize("config", BUCKET_CONFIGS)
def test_buckets_are_monotone_in_distance_and_saturate_at_max_distance(config):
    bidirectional, num_buckets, max_distance = config
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    dist = np.arange(0, max_distance + 3000)
    kw = dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    back = posenc.relative_position_bucket(-dist, **kw)
    assert (np.diff(back) >= 0).all()
    assert back[0] == 0 and back.min() >= 0
    assert (back[max_distance:] == per_dir - 1).all()
    assert back.max() == per_dir - 1
    ahead = posenc.relative_position_bucket(dist, **kw)
    if bidirectional:
        assert_same_bits(ahead[1:], back[1:] + per_dir)
    else:
        assert (ahead == 0).all()


# ---------------------------------------------------------------- T5 bias


T5_SHAPES = [
    # (q_len, k_len, q_offset)
    (96, 100, 0),
    (100, 80, 0),
    (1, 3000, 2999),  # one decoding step after a cache of 2999 tokens
    (1, 10001, 6000),  # a decoding step in several blocks, keys on both sides
    (2, 8000, 7998),  # long enough for the threads to share the per-distance work
    (40, 400, -150),
    (20, 20, 500),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_equals_reference_for_every_option(simd, threads, dtype, bidirectional, rng):
    table = rng.standard_normal((32, 6)).astype(dtype)
    for q_len, k_len, q_offset in T5_SHAPES:
        kw = dict(bidirectional=bidirectional, q_offset=q_offset)
        got = posenc.t5_bias(table, q_len, k_len, **kw)
        assert got.dtype == np.dtype(dtype)
        assert_same_bits(got, ref.t5_bias(table, q_len, k_len, **kw))


@pytest.mark.parametrize("dtype", DTYPES)
def test_t5_decoding_step_into_strided_out(simd, threads, dtype, rng):
    # one query: each head's row is written directly, wherever it lies
    table = rng.standard_normal((32, 6)).astype(dtype)
    want = ref.t5_bias(table, 1, 5003, bidirectional=False)
    base = np.full((6, 1, 2 * 5003), 7, dtype)
    out = base[::-1, :, 1::2]
    assert posenc.t5_bias(table, 1, 5003, bidirectional=False, out=out) is out
    assert_same_bits(out, want)
    np.testing.assert_array_equal(base[..., 0::2], 7)


def test_t5_bias_takes_any_table_layout_and_bucketing(simd, rng):
    table = rng.standard_normal((48, 5))
    want = ref.t5_bias(table, 50, 70, max_distance=300, q_offset=7)
    for tab in (
        np.asfortranarray(table),
        table.astype(">f8"),
        table.tolist(),
        np.repeat(table, 2, axis=1)[:, ::2],
    ):
        assert_same_bits(posenc.t5_bias(tab, 50, 70, max_distance=300, q_offset=7), want)


def test_large_t5_fill_streams_the_same_values_as_reference(simd, threads, rng):
    table = rng.standard_normal((32, 3)).astype(np.float32)
    assert_same_bits(posenc.t5_bias(table, 700, 1111), ref.t5_bias(table, 700, 1111))


def test_t5_bias_gathers_the_tables_row_of_each_bucket():
    table = np.arange(32 * 2, dtype=np.float64).reshape(32, 2)  # entry = 2 * bucket + head
    bias = posenc.t5_bias(table, 3, 300)
    for i, j in [(0, 0), (0, 1), (2, 0), (0, 8), (1, 9), (0, 299), (2, 130), (2, 1)]:
        bucket = ref.relative_position_bucket(j - i)
        assert bias[0, i, j] == 2 * bucket and bias[1, i, j] == 2 * bucket + 1


@pytest.mark.parametrize("scores_dtype", DTYPES)
@pytest.mark.parametrize("table_dtype", ["float32", "float64"])
def test_t5_scores_add_equals_reference_on_every_layout(
    simd, threads, scores_dtype, table_dtype, rng
):
    table = rng.standard_normal((32, 4)).astype(table_dtype)
    for name, scores in score_layouts(rng, (2, 2), (4, 31, 280), scores_dtype):
        want = ref.t5_bias(table, 31, 280, q_offset=5, scores=scores.copy())
        got = posenc.t5_bias(table, 31, 280, q_offset=5, scores=scores)
        assert got is scores, name
        assert_same_bits(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_t5_scores_add_keeps_each_nan_on_every_path(on_every_path, dtype):
    # NaN scores (quiet and signalling, either sign, with payloads) and NaN
    # table entries of other payloads: a NaN entry into a score that is a
    # number comes out as that NaN made quiet, a NaN score with an entry that
    # is a number as that NaN made quiet, the same bits on every path and
    # thread count; where the two are NaN, a NaN on every path (which of the
    # two is the compiler's order of the operands, as in NumPy)
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        sdt = np.dtype(ml_dtypes.bfloat16)
    else:
        sdt = np.dtype(dtype)
    words = np.dtype(f"u{sdt.itemsize}")
    specials, quiet = SPECIAL_BITS[dtype]
    nans, quiet = specials[2:5], words.type(quiet)
    rng = np.random.default_rng(3)
    table = rng.standard_normal((32, 4)).astype(sdt)
    table.view(words)[::3, ::2] = np.array(nans, words)[np.arange(11) % 3][:, None]
    base = random_scores(rng, (1, 4, 37, 53), np.float32).astype(sdt).view(words)
    base.reshape(-1)[::7] = np.array(nans, words)[np.arange(base.size)[::7] % 3]
    bias = np.broadcast_to(posenc.t5_bias(table, 37, 53).view(words), base.shape)
    with np.errstate(invalid="ignore"):
        was_nan = np.isnan(base.view(sdt).astype(np.float64))
        nan_bias = np.isnan(bias.view(sdt).astype(np.float64))
    both = was_nan & nan_bias
    assert both.any() and (was_nan & ~nan_bias).any() and (nan_bias & ~was_nan).any()

    def make():
        scores = base.copy().view(sdt)
        posenc.t5_bias(table, 37, 53, scores=scores)
        return [scores.view(words)]

    results = [got for (got,) in on_every_path(make)]
    for got in results:
        with np.errstate(invalid="ignore"):
            assert np.isnan(got[both].view(sdt).astype(np.float64)).all()
        assert_same_bits(got[~both], results[0][~both])
        np.testing.assert_array_equal(got[nan_bias & ~both], bias[nan_bias & ~both] | quiet)
        np.testing.assert_array_equal(got[was_nan & ~both], base[was_nan & ~both] | quiet)


def test_t5_out_in_any_layout_gets_the_same_values(simd, rng):
    table = rng.standard_normal((32, 3)).astype(np.float32)
    want = ref.t5_bias(table, 30, 40)
    for out in (
        np.empty((3, 30, 40), np.float32, order="F"),
        np.empty((3, 30, 40), ">f4"),
        np.empty((3, 35, 40), np.float32)[:, 5:],
    ):
        assert posenc.t5_bias(table, 30, 40, out=out) is out
        assert_same_bits(out, want)


# ---------------------------------------------------------------- Shaw et al.


@pytest.mark.parametrize("max_distance", [None, 0, 1, 4, 300])
def test_relative_positions_equal_reference(threads, max_distance):
    for q_len, k_len, q_offset in [(200, 300, 0), (5, 5, 0), (64, 1000, 936), (300, 200, -50)]:
        got = posenc.relative_positions(q_len, k_len, max_distance=max_distance, q_offset=q_offset)
        want = ref.relative_positions(q_len, k_len, max_distance=max_distance, q_offset=q_offset)
        assert_same_bits(got, want)


def test_relative_positions_hand_derived():
    np.testing.assert_array_equal(
        posenc.relative_positions(3, 4, max_distance=2),
        [[0, 1, 2, 2], [-1, 0, 1, 2], [-2, -1, 0, 1]],
    )
    np.testing.assert_array_equal(posenc.relative_positions(1, 3, q_offset=2), [[-2, -1, 0]])


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call",
    [
        lambda: posenc.alibi_bias(0, 4),
        lambda: posenc.alibi_bias(4, 0),
        lambda: posenc.alibi_bias(4, 3, -1),
        lambda: posenc.alibi_slopes(0),
        lambda: posenc.t5_bias(np.zeros((32, 4)), 0),
        lambda: posenc.t5_bias(np.zeros((32, 4)), 3, 0),
        lambda: posenc.relative_positions(0),
        lambda: posenc.relative_positions(3, -2),
    ],
)
def test_non_positive_sizes_raise_value_error(call):
    with pytest.raises(ValueError, match="q_len|k_len|n_heads"):
        call()


def test_sizes_of_the_wrong_kind_raise_type_error():
    with pytest.raises(TypeError, match="q_len"):
        posenc.alibi_bias(4, 3.0)
    with pytest.raises(TypeError, match="n_heads"):
        posenc.alibi_slopes(True)
    with pytest.raises(TypeError, match="causal"):
        posenc.alibi_bias(4, 3, causal="yes")
    with pytest.raises(TypeError, match="bidirectional"):
        posenc.relative_position_bucket([1], bidirectional=1)


def test_more_queries_than_keys_need_an_explicit_offset():
    with pytest.raises(ValueError, match="q_offset"):
        posenc.alibi_bias(4, 5, 3)
    assert posenc.alibi_bias(4, 5, 3, q_offset=0).shape == (4, 5, 3)
    with pytest.raises(ValueError, match="q_offset"):
        posenc.alibi_bias(4, 5, 5, q_offset=2**60)


@pytest.mark.parametrize("table", [np.zeros(32), np.zeros((2, 32, 4)), np.zeros(())])
def test_table_of_the_wrong_rank_raises_value_error(table):
    with pytest.raises(ValueError, match="table"):
        posenc.t5_bias(table, 4)


def test_table_of_integers_raises_type_error():
    with pytest.raises(TypeError, match="table"):
        posenc.t5_bias(np.zeros((32, 4), np.int32), 4)


def test_num_buckets_below_two_raise_value_error():
    with pytest.raises(ValueError, match="num_buckets"):
        posenc.relative_position_bucket([1, 2], num_buckets=1)
    with pytest.raises(ValueError, match="num_buckets"):
        posenc.t5_bias(np.zeros((1, 4)), 3)


def test_max_distance_within_the_exact_buckets_raises_value_error():
    with pytest.raises(ValueError, match="max_distance"):
        posenc.relative_position_bucket([1], num_buckets=32, max_distance=8)
    with pytest.raises(ValueError, match="max_distance"):
        posenc.t5_bias(np.zeros((32, 2)), 3, bidirectional=False, max_distance=16)
    with pytest.raises(ValueError, match="max_distance"):
        posenc.relative_positions(3, max_distance=-1)


def test_relative_positions_that_are_not_integers_raise_type_error():
    with pytest.raises(TypeError, match="relative_position"):
        posenc.relative_position_bucket([1.0, 2.0])
    with pytest.raises(TypeError, match="relative_position"):
        posenc.relative_position_bucket(np.array([True]))


BAD_SCORES = [
    (np.zeros((2, 4, 5, 6), np.float32), ValueError, "shape"),  # trailing shape (4, 5, 6)
    (np.zeros((4, 6, 7), np.float32), ValueError, "shape"),
    (np.zeros((6, 6), np.float32), ValueError, "shape"),
    (np.zeros((1, 4, 6, 6), np.int32), TypeError, "dtype"),
    (np.zeros((1, 4, 6, 6), np.complex64), TypeError, "dtype"),
    (np.zeros((1, 4, 6, 6)).tolist(), TypeError, "in place"),
]


@pytest.mark.parametrize("scores, error, match", BAD_SCORES)
def test_bad_scores_raise_and_nothing_is_written(scores, error, match):
    before = np.array(scores, copy=True)
    with pytest.raises(error, match=match):
        posenc.alibi_bias(4, 6, scores=scores)
    with pytest.raises(error, match=match):
        posenc.t5_bias(np.ones((32, 4), np.float32), 6, scores=scores)
    np.testing.assert_array_equal(np.asarray(scores), before)


def test_read_only_scores_and_conflicting_arguments_raise():
    scores = np.zeros((1, 4, 6, 6), np.float32)
    with pytest.raises(TypeError, match="dtype"):
        posenc.alibi_bias(4, 6, scores=scores, dtype="float16")
    with pytest.raises(ValueError, match="scores"):
        posenc.alibi_bias(4, 6, scores=scores, out=np.zeros((4, 6, 6), np.float32))
    with pytest.raises(ValueError, match="slopes"):
        posenc.alibi_bias(4, 6, scores=scores, slopes=[1, 2, 3])
    with pytest.raises(ValueError, match="slopes"):
        posenc.alibi_bias(4, 6, scores=scores, slopes=[1, 2, 3, np.nan])
    with pytest.raises(ValueError, match="slopes"):
        posenc.alibi_bias(4, 6, slopes=[1, 2, 3, 4], max_bias=4.0)
    scores.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        posenc.alibi_bias(4, 6, scores=scores)
    assert not scores.any()


def test_bad_out_raises_and_out_is_untouched():
    out = np.full((4, 6, 6), 7.0, np.float32)
    with pytest.raises(TypeError, match="out"):
        posenc.alibi_bias(4, 6, out=out, dtype="float64")
    with pytest.raises(ValueError, match="out"):
        posenc.alibi_bias(4, 6, 7, out=out)
    with pytest.raises(TypeError, match="out"):
        posenc.t5_bias(np.zeros((32, 4), np.float64), 6, out=out)
    assert (out == 7).all()


def test_the_c_glue_checks_what_it_is_given():
    slopes = np.ones(2)
    good = np.zeros((1, 2, 3, 3), np.float32)
    with pytest.raises(TypeError, match="scores"):
        _core.alibi(slopes, [[1.0]], 0, True, True)
    with pytest.raises(ValueError, match="4-dimensional"):
        _core.alibi(slopes, good[0], 0, True, True)
    with pytest.raises(TypeError, match="dtype"):
        _core.alibi(slopes, good.astype(np.int64), 0, True, True)
    with pytest.raises(ValueError, match="slopes"):
        _core.alibi(np.ones(3), good, 0, True, True)
    with pytest.raises(ValueError, match="last axis"):
        _core.alibi(slopes, np.zeros((1, 2, 3, 6), np.float32)[..., ::2], 0, True, True)
    overlapping = np.lib.stride_tricks.as_strided(good, (4, 2, 3, 3), (0,) + good.strides[1:])
    with pytest.raises(ValueError, match="overlapping"):
        _core.alibi(slopes, overlapping, 0, True, True)
    with pytest.raises(ValueError, match="q_offset"):
        _core.alibi(slopes, good, 2**60, True, True)
    none = np.zeros(0, np.int64)
    with pytest.raises(ValueError, match="columns"):
        _core.t5_bias(np.zeros((32, 3)), good, True, none, 0, True)
    for bad in ([8, 9], [9, 8], list(range(9, 17))):  # past the exact buckets, ordered, <= 7
        with pytest.raises(ValueError, match="thresholds"):
            _core.t5_bias(np.zeros((32, 2)), good, True, np.array(bad, np.int64), 0, True)
    with pytest.raises(TypeError, match="thresholds"):
        _core.t5_bias(np.zeros((32, 2)), good, True, np.zeros(2, np.int32), 0, True)
    with pytest.raises(ValueError, match="num_buckets"):
        _core.t5_buckets(np.zeros(3, np.int64), np.zeros(3, np.int64), True, 1, none)
    with pytest.raises(ValueError, match="length"):
        _core.t5_buckets(np.zeros(3, np.int64), np.zeros(2, np.int64), True, 32, none)
    with pytest.raises(ValueError, match="one head"):
        _core.relative_positions(np.zeros((1, 2, 3, 3), np.int64), -1, 0)
    assert not good.any()


# -- alibi_key_bias: BLOOM's and Falcon's per-key form -----------------------------------


def test_alibi_key_bias_is_slope_times_position_over_the_mask():
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 0, 1, 1]])
    slopes = np.array([0.5, 0.25, 0.3])
    got = posenc.alibi_key_bias(mask, 3, slopes=slopes, dtype="float64")
    pos = np.array([[0, 0, 0, 1, 2], [0, 1, 0, 2, 3]], np.float64)  # by hand
    np.testing.assert_array_equal(got, slopes[None, :, None, None] * pos[:, None, None, :])
    assert got.shape == (2, 3, 1, 5)
    assert posenc.alibi_key_bias(mask, 3).dtype == np.float32
    bools = posenc.alibi_key_bias(mask.astype(bool), 3, dtype="float64")
    np.testing.assert_array_equal(bools, posenc.alibi_key_bias(mask, 3, dtype="float64"))


def test_alibi_key_bias_bfloat16_is_one_rounding_of_the_float64_value():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    # slopes whose products fall between two float32s near a bfloat16 tie:
    # rounding through float32 to nearest would round twice
    tie = 1.0 + 2.0**-8  # halfway between two bfloat16s
    slopes = np.array([tie + 2.0**-40, tie - 2.0**-40, 1.0 + 2.0**-9])
    got = posenc.alibi_key_bias(np.ones((1, 2)), 3, slopes=slopes, dtype="bfloat16")
    assert got.dtype == ml_dtypes.bfloat16
    want = [1.0 + 2.0**-7, 1.0, 1.0]  # up, down (ties-to-even would give 1.0 for both)
    np.testing.assert_array_equal(got[0, :, 0, 1].astype(np.float64), want)


@pytest.mark.parametrize(
    "mask, kwargs, error, match",
    [
        (np.ones(4), {}, ValueError, "attention_mask must have shape \\(batch, k\\)"),
        (np.full((2, 3), 2), {}, ValueError, "attention_mask must hold only 0 and 1"),
        (np.ones((2, 3)), {"dtype": "int32"}, TypeError, "dtype"),
        (np.ones((2, 3)), {"slopes": [1.0, 2.0]}, ValueError, "slopes must have shape"),
        (np.ones((2, 3)), {"slopes": [1.0] * 3, "max_bias": 4.0}, ValueError, "slopes or max_bias"),
        (np.ones((2, 3)).astype(complex), {}, TypeError, "attention_mask"),
    ],
)
def test_alibi_key_bias_bad_input(mask, kwargs, error, match):
    with pytest.raises(error, match=match):
        posenc.alibi_key_bias(mask, 3, **kwargs)
    with pytest.raises(ValueError, match="n_heads"):
        posenc.alibi_key_bias(np.ones((2, 3)), 0)
