"""The products of two bfloat16 operands (posenc._core.bf16_products, the
relative terms on bfloat16 inputs): formed as AVX-512 BF16's VDPBF16PS forms
them, on every path.

The witness is the instruction itself: on a CPU with AVX-512 BF16 the
"avx512" path runs it, and every path is held to the NumPy model of its
documented semantics below (Intel's pseudo-code: the pair's second product
added first, each addition rounded to nearest even, subnormal inputs as
zero, a result that rounds below float32's smallest normal flushed to
zero), cases of which are worked out by hand.
"""

import numpy as np
import pytest

import posenc
from posenc import _core, reference

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
TINY = 2.0**-126  # float32's smallest normal
CANONICAL_NAN = 0x7FC00000


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _values(u):
    """bfloat16 bits as float64, a subnormal as a zero of its sign (DAZ)."""
    u = u.astype(np.uint32)
    u = np.where(u & 0x7F80, u, u & 0x8000)
    with np.errstate(invalid="ignore"):
        return (u << 16).view(np.float32).astype(np.float64)


def _add(s, a, b):
    """s + a * b as one addition of the instruction (float32 s, float64 a
    and b, exact product): rounded once, tiny results flushed after
    rounding with the exponent unbounded."""
    with np.errstate(all="ignore"):
        r = s.astype(np.float64) + a * b  # 53 bits: the float32 rounding of r is that of the sum
        scaled = (r * 2.0**64).astype(np.float32)  # the rounding without the exponent's floor
        tiny = np.abs(r) < TINY
        flushed = np.where(
            np.abs(scaled) < np.float32(2.0**-62),
            np.copysign(np.float32(0), scaled),
            np.copysign(np.float32(TINY), scaled),
        )
        return np.where(tiny, flushed, r.astype(np.float32))


def _model(a, b, init=None):
    """The products of a (h, m, d) and b (h, n, d) (bfloat16 bits) by the
    instruction's rules, each sum starting at init (h, n) or +0."""
    A, B = _values(a), _values(b)
    h, m, d = a.shape
    s = np.zeros((h, m, b.shape[1]), np.float32)
    if init is not None:
        i32 = np.asarray(init, np.float32)
        s[...] = np.where(np.abs(i32) < TINY, np.copysign(np.float32(0), i32), i32)[:, None, :]
    for p in range(0, d, 2):
        for i in (p + 1, p):
            s = _add(s, A[:, :, None, i], B[:, None, :, i])
    s[np.isnan(s)] = np.uint32(CANONICAL_NAN).view(np.float32)
    return s


def _random_bits(rng, shape):
    """bfloat16 bits: a quarter anything (NaNs, infinities, subnormals), a
    quarter near the subnormal range, half around 1."""
    u = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
    kind = rng.integers(0, 4, shape)
    low = (u & 0x807F) | (rng.integers(0, 12, shape).astype(np.uint16) << 7)
    mid = (u & 0x807F) | (rng.integers(120, 134, shape).astype(np.uint16) << 7)
    return np.where(kind == 0, u, np.where(kind == 1, low, mid)).astype(np.uint16)


def _plain_bits(rng, shape, low=None):
    """bfloat16 bits the portable path adds as plain float32 (zeros,
    infinities, NaNs, magnitudes of 2**-50 and more: exponent fields 77 and
    up) or, given `low`, mostly of exponent fields low to low + 24 and 76
    (the products of those from 0 and from 100 fall near and among the
    subnormals)."""
    u = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
    sign, mant = u & 0x8000, u & 0x7F
    kind = rng.integers(0, 16, shape)
    exps = rng.integers(120, 134, shape) if low is None else rng.integers(low, low + 25, shape)
    edge = 77 if low is None else 76
    special = 0x7F80 | (0 if low is None else mant)  # infinities, and NaNs
    bits = np.where(kind == 0, sign, sign | (exps.astype(np.uint16) << 7) | mant)
    bits = np.where(kind == 1, sign | special, bits)
    return np.where(kind == 2, sign | (edge << 7) | mant, bits).astype(np.uint16)


@pytest.mark.parametrize("plain", [True, False])
def test_plain_and_near_subnormal_sums_on_every_path(simd, plain):
    # the portable path adds rows whose values cannot make a tiny sum as
    # plain float32 (four rows by 16 columns, vector code) and the others
    # one addition at a time: both the instruction's sums
    rng = np.random.default_rng(7)
    h, m, n, d = 2, 13, 37, 6
    a = _plain_bits(rng, (h, m, d), None if plain else 0)
    b = _plain_bits(rng, (h, n, d), None if plain else 100)
    init = (_plain_bits(rng, (h, n), None if plain else 0).astype(np.uint32) << 16).view(np.float32)
    for start in (None, init * np.float32(3)):
        out = np.full((h, m, n), 7.0, np.float32)
        _core.bf16_products(a, b, out, start)
        np.testing.assert_array_equal(_bits(out), _bits(_model(a, b, start)))


@pytest.mark.parametrize("shape", [(2, 13, 37, 6), (1, 9, 33, 64), (3, 17, 65, 2), (1, 1, 1, 130)])
@pytest.mark.parametrize("start", [False, True])
def test_products_follow_the_instruction_on_every_path(simd, shape, start):
    # tails of every tile (rows past 8 and 4, columns past 32, 16 and 8),
    # subnormal inputs and sums, infinities and NaNs of any payload
    h, m, n, d = shape
    rng = np.random.default_rng(d + m)
    a, b = _random_bits(rng, (h, m, d)), _random_bits(rng, (h, n, d))
    init = None
    if start:
        init = (_random_bits(rng, (h, n)).astype(np.uint32) << 16).view(np.float32)
        init[0, :3] = [1e-40, -1e-45, np.nan][:n]  # subnormal starts count as zero
    out = np.full((h, m, n), 7.0, np.float32)
    _core.bf16_products(a, b, out, init)
    np.testing.assert_array_equal(_bits(out), _bits(_model(a, b, init)))


def _one(a_pairs, b_pairs, init=None):
    a = np.array(a_pairs, np.float32).astype(BF16).view(np.uint16).reshape(1, 1, -1)
    b = np.array(b_pairs, np.float32).astype(BF16).view(np.uint16).reshape(1, 1, -1)
    out = np.empty((1, 1, 1), np.float32)
    start = None if init is None else np.array([[init]], np.float32)
    _core.bf16_products(a, b, out, start)
    return _bits(out)[0, 0, 0]


def test_hand_worked_cases(simd):
    # FLT_MIN - 1.25 * 2**-150 rounds to FLT_MIN - 2**-150 with the
    # exponent unbounded: tiny, so +0 (IEEE's subnormal rounding gives
    # 0x007FFFFF); FLT_MIN - 2**-151 is a tie that rounds up to FLT_MIN
    assert _one([0.0, -1.25 * 2.0**-75], [0.0, 2.0**-75], init=TINY) == 0
    assert _one([0.0, -(2.0**-75)], [0.0, 2.0**-76], init=TINY) == 0x00800000
    # the pair's second product first: 1 + (-1.5 * 2**-25) + 2**-25 is 1,
    # the other order 1 - 2**-24
    assert _one([2.0**-25, -1.5 * 2.0**-25], [1.0, 1.0], init=1.0) == _bits(1.0)
    # a subnormal input counts as zero, so does a subnormal start
    assert _one([2.0**-130, 0.0], [2.0**100, 0.0]) == 0
    assert _one([0.0, 2.0**-63], [0.0, 2.0**-63], init=1e-40) == 0x00800000
    # inf - inf: the quiet NaN 0x7FC00000 (the CPU's is negative)
    assert _one([np.inf, np.inf], [1.0, -1.0]) == CANONICAL_NAN
    # -0 + (+0 * x) is +0: the sum starts at +0 and -0 * 1 adds -0
    assert _one([-0.0, -0.0], [1.0, 1.0]) == 0


def test_bad_arguments_are_refused():
    a = np.zeros((2, 3, 4), np.uint16)
    b = np.zeros((2, 5, 4), np.uint16)
    out = np.zeros((2, 3, 5), np.float32)
    with pytest.raises(ValueError, match="even last axis"):
        _core.bf16_products(a[..., :3], b[..., :3], out)
    with pytest.raises(ValueError, match=r"b must have shape \(2, n, 4\)"):
        _core.bf16_products(a, b[:1], out)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 3, 5\)"):
        _core.bf16_products(a, b, out[:, :2])
    with pytest.raises(ValueError, match=r"init must have shape \(2, 5\)"):
        _core.bf16_products(a, b, out, np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="a must have native dtype"):
        _core.bf16_products(a.astype(np.float32), b, out)
    rows_overlap = np.lib.stride_tricks.as_strided(np.zeros(64, np.float32), (2, 3, 5), (60, 16, 4))
    with pytest.raises(ValueError, match="out must be laid out"):
        _core.bf16_products(a, b, rows_overlap)
    with pytest.raises(ValueError, match="overlap|share"):
        _core.bf16_products(out.view(np.uint16)[..., :4], b, out)


def _terms(rng):
    """Every relative term on bfloat16 inputs, into bfloat16 scores and as
    a new result, as callables giving arrays; r holds an infinite row,
    whose products go the sum's way (posenc.relative's biased_products)."""
    h, L, d = 3, 37, 16
    q, k = (rng.standard_normal((2, h, L, d)).astype(BF16) for _ in range(2))
    r = rng.standard_normal((h, 2 * L, d)).astype(BF16)
    r[1, 5, 3] = np.inf
    bias = rng.standard_normal((h, d)).astype(BF16)
    R = posenc.tener_relative_table(L, d).astype(BF16)
    pk, pq = (rng.standard_normal((h, 64, d)).astype(BF16) for _ in range(2))
    table = rng.standard_normal((2 * 8 + 1, d)).astype(BF16)
    scores = rng.standard_normal((2, h, L, L)).astype(BF16)
    rel = posenc
    return {
        "xl": lambda: rel.xl_position_term(q, r, bias=bias, scores=scores.copy()),
        "xl new": lambda: rel.xl_position_term(q, r, bias=bias),
        "tener": lambda: rel.tener_position_term(q, k, R, v=bias, key_term=True),
        "tener scores": lambda: rel.tener_scores(q, k, R, u=bias, v=bias),
        "deberta": lambda: rel.deberta_attention_bias(
            q,
            k,
            pos_key=pk,
            pos_query=pq,
            position_buckets=32,
            max_relative_positions=64,
            scores=scores.copy(),
        ),
        "shaw": lambda: rel.shaw_key_term(q, table, max_distance=8, scores=scores.copy()),
        "content": lambda: rel.xl_content_bias(k, bias, scores=scores.copy()),
    }


def test_relative_terms_give_the_same_bits_on_every_path(on_every_path):
    terms = _terms(np.random.default_rng(0))
    results = on_every_path(lambda: [np.asarray(f()).view(np.uint16) for f in terms.values()])
    for other in results[1:]:
        for name, a, b in zip(terms, results[0], other):
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_bias_products_keep_the_sums_infinities():
    # (q + bias) . r with an infinite element in a row of r: the sum's
    # infinity (or NaN where q + bias is 0 there), as float64 makes it,
    # and not the NaN of bias . r + q . r; the other columns as accurate
    # as float32 sums of exact products
    rng = np.random.default_rng(1)
    h, L, d = 2, 9, 8
    q = rng.standard_normal((h, L, d)).astype(BF16)
    bias = rng.standard_normal((h, d)).astype(BF16)
    bias[0, 2] = 0.0
    r = rng.standard_normal((h, 2 * L, d)).astype(BF16)
    r[0, 4, 2] = np.inf  # bias 0 there: bias . r alone would be NaN
    r[1, 6, 5] = -np.inf
    got = posenc.xl_position_term(q, r, bias=bias).astype(np.float64)
    want = reference.xl_position_term(
        q.astype(np.float64), r.astype(np.float64), bias=bias.astype(np.float64)
    )
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isinf(want).any()
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2.0**-8, atol=2.0**-20)


@pytest.mark.parametrize("by_key", [False, True])
def test_products_through_a_map_are_those_it_reads(simd, by_key):
    # with a gather's map, each group of rows makes only the columns its
    # windows of the map read: every product read equals the one made
    # without a map (maps of runs, clipped runs, -1 entries, scattered
    # columns; rows past several groups, a last group of fewer rows)
    rng = np.random.default_rng(3)
    h, m, other, n, d = 2, 45, 23, 70, 4
    a, b = _random_bits(rng, (h, m, d)), _random_bits(rng, (h, n, d))
    full = np.empty((h, m, n), np.float32)
    _core.bf16_products(a, b, full)
    entries = m + other - 1
    maps = [
        np.arange(entries, dtype=np.int64) % n,
        np.clip(np.arange(entries) - 20, 0, 30).astype(np.int64),
        np.where(np.arange(entries) % 7 == 3, -1, rng.integers(0, n, entries)).astype(np.int64),
        np.full(entries, -1, np.int64),
    ]
    for index in maps:
        out = np.full((h, m, n), np.nan, np.float32)
        _core.bf16_products(a, b, out, None, index, by_key)
        for r in range(m):
            start = r if by_key else m - 1 - r
            read = index[start : start + other]
            read = read[read >= 0]
            np.testing.assert_array_equal(_bits(out[:, r, read]), _bits(full[:, r, read]))
