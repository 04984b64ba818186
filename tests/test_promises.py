"""Documented promises tried hard: inputs that alias the array written.
(out= arrays whose elements share bytes are refused: test_bad_input.)"""

import numpy as np
import pytest

import posenc


def test_alibi_slopes_inside_out_are_read_before_out_is_written():
    out = np.zeros((2, 3, 3))
    out[0, 0, :2] = [0.5, 0.25]
    got = posenc.alibi_bias(2, 3, slopes=out[0, 0, :2], out=out)
    assert got is out
    np.testing.assert_array_equal(out, posenc.alibi_bias(2, 3, slopes=[0.5, 0.25], dtype="f8"))


def test_alibi_slopes_inside_scores_are_read_before_the_add():
    scores = np.ones((1, 2, 3, 3))
    scores[0, 1, 2, :2] = [0.5, 0.25]
    before = scores.copy()
    posenc.alibi_bias(2, 3, slopes=scores[0, 1, 2, :2], scores=scores)
    want = before + posenc.alibi_bias(2, 3, slopes=[0.5, 0.25], dtype="f8")
    np.testing.assert_array_equal(scores, want)


def test_a_t5_table_inside_scores_is_read_before_the_add():
    scores = np.zeros((4, 2, 3, 3), np.float32)
    table = scores.reshape(-1)[:64].reshape(32, 2)
    table[:] = np.arange(64).reshape(32, 2)
    want = scores + posenc.t5_bias(table.copy(), 3)
    posenc.t5_bias(table, 3, scores=scores)
    np.testing.assert_array_equal(scores, want)


NAN_BITS = np.array([0x7E00, 0x7E01, 0xFE23, 0x7FFF, 0x7C01, 0xFD55, 0x3C00, 0x7C00], np.uint16)


def _on_each_path(make):
    paths = posenc._core.simd_paths()
    before = posenc._core.simd_path()
    try:
        results = []
        for path in paths:
            posenc._core.set_simd(path)
            results.append(make())
        return results
    finally:
        posenc._core.set_simd(before)


def test_float16_nan_payloads_equal_numpys_add_on_every_path():
    # NumPy's float16 add keeps a NaN's top payload bits (and quiets it);
    # so do F16C's conversions, and so must the portable path
    def add():
        scores = np.broadcast_to(NAN_BITS.view(np.float16), (1, 2, 8, 8)).copy()
        posenc.alibi_bias(2, 8, scores=scores)
        return scores.view(np.uint16)

    start = np.broadcast_to(NAN_BITS.view(np.float16), (1, 2, 8, 8))
    with np.errstate(invalid="ignore"):
        want = (start + posenc.alibi_bias(2, 8, dtype="float16")).view(np.uint16)
    for got in _on_each_path(add):
        np.testing.assert_array_equal(got, want)


def test_float16_nan_payloads_of_apply_rope_are_the_same_on_every_path():
    x = np.broadcast_to(NAN_BITS.view(np.float16), (1, 2, 8, 8)).copy()
    results = _on_each_path(lambda: posenc.apply_rope(x).view(np.uint16))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    assert (results[0][..., 1] == 0x7E01).all()  # a payload kept through the rotation


def _mp_bucket(a, bidirectional, num_buckets, max_distance):
    """T5's bucket of distance a >= 0 on the side it lies, in 300-bit arithmetic."""
    mpmath = pytest.importorskip("mpmath")
    per_dir = num_buckets // 2 if bidirectional else num_buckets
    exact = per_dir // 2
    if a < exact:
        return a
    with mpmath.workprec(300):
        v = (per_dir - exact) * mpmath.log(mpmath.mpf(a) / exact)
        v /= mpmath.log(mpmath.mpf(max_distance) / exact)
        return min(exact + int(mpmath.floor(v)), per_dir - 1)


def test_t5_bucket_is_the_exact_one_where_float32_rounds_across_a_boundary():
    # 926 buckets, max_distance 31706, bidirectional, |d| = 20743: the exact
    # value is 211.99998854 buckets past the exact ones; float32 rounds the
    # product to 212.0
    got = posenc.relative_position_bucket(
        np.array([-20743, 20743, -20742, 20744]), num_buckets=926, max_distance=31706
    )
    want = [_mp_bucket(a, True, 926, 31706) for a in (20743, 20743, 20742, 20744)]
    np.testing.assert_array_equal(got, np.array(want) + [0, 463, 0, 463])
    assert want[0] == 231 + 211


def test_t5_buckets_equal_exact_arithmetic_around_every_step():
    # random configurations; every distance at and just below each step of
    # the bucket, where a rounded logarithm would decide wrongly
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(5)
    for _ in range(40):
        bidirectional = bool(rng.integers(2))
        num_buckets = int(rng.integers(4, 3000))
        per_dir = num_buckets // 2 if bidirectional else num_buckets
        exact = per_dir // 2
        max_distance = int(rng.integers(exact + 1, 10**6))
        n = per_dir - exact
        steps = []
        with mpmath.workprec(300):
            for k in rng.integers(1, max(n, 2), 8):
                t = exact * (mpmath.mpf(max_distance) / exact) ** (mpmath.mpf(int(k)) / n)
                steps += [int(mpmath.ceil(t)) - 1, int(mpmath.ceil(t))]
        dist = np.array(steps)
        sign = 1 if bidirectional else -1  # the decoder buckets keys before the query
        got = posenc.relative_position_bucket(
            sign * dist,
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )
        want = [_mp_bucket(int(a), bidirectional, num_buckets, max_distance) for a in dist]
        offset = per_dir if bidirectional else 0
        np.testing.assert_array_equal(got, np.array(want) + offset * (dist > 0))


def test_t5_bucket_steps_exactly_at_an_integer_threshold():
    # 16 exact buckets of 32, max_distance 16 * 3**4: bucket 16 + k starts at
    # 16 * 3**(k/4), an integer for k = 4 (48) and 8 (144)
    rel = -np.array([47, 48, 143, 144])
    got = posenc.relative_position_bucket(rel, bidirectional=False, max_distance=1296)
    np.testing.assert_array_equal(got, [19, 20, 23, 24])


def test_t5_thresholds_of_a_million_buckets_are_computed_once():
    # the thresholds of a configuration are cached: the second call is a lookup
    from posenc import _t5

    table = np.zeros((2**20, 1), np.float32)
    table[:, 0] = np.arange(2**20)
    kw = dict(max_distance=2**40, q_offset=300_000)  # distances past the 2**18 exact buckets
    first = posenc.t5_bias(table, 1, 2, **kw)
    misses = _t5._thresholds.cache_info().misses
    again = posenc.t5_bias(table, 1, 2, **kw)
    assert _t5._thresholds.cache_info().misses == misses
    np.testing.assert_array_equal(first, again)
    want = [_mp_bucket(a, True, 2**20, 2**40) for a in (300_000, 299_999)]
    np.testing.assert_array_equal(first[0, 0], want)


def test_rows_of_positions_inside_out_are_read_before_out_is_written():
    # M-RoPE's rows of positions living in the array rotated in place
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 16))
    x[0, 0, :3, :5] = np.arange(15).reshape(3, 5) * 7.0
    ids = x[0, 0, :3, :5]  # (3, 5): three rows of positions, a view of x
    want = posenc.apply_rope(x.copy(), ids.copy(), mrope_section=[4, 2, 2])
    got = posenc.apply_rope(x, ids, mrope_section=[4, 2, 2], out=x)
    assert got is x
    np.testing.assert_array_equal(x, want)
