"""KERPLE, Sandwich and FIRE (posenc.functional_bias) and their backward.

Checked against their float64 twins in posenc._reference_functional (bit for
bit once rounded), against witnesses written in torch from the papers and the
authors' modules (KERPLE's ParallelKerpleLog/Power, NeMo's Sandwich, FIRE's
module) with torch.autograd for the gradients, against finite differences,
and against hand-derived values.
"""

import math

import numpy as np
import pytest
from optional import require

from posenc import _core, _kerple_fire, reference
from posenc import _functional_grad as fg
from posenc import _reference_functional as rf
from posenc import functional_bias as fb

DTYPES = ["float16", "bfloat16", "float32", "float64"]


def np_dtype(name):
    if name == "bfloat16":
        return np.dtype(require("ml_dtypes").bfloat16)
    return np.dtype(name)


def assert_same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype.itemsize == expected.dtype.itemsize
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
    a = np.ascontiguousarray(actual, dtype=actual.dtype.newbyteorder("=")).view(bits)
    e = np.ascontiguousarray(expected, dtype=expected.dtype.newbyteorder("=")).view(bits)
    bad = np.flatnonzero((a != e).ravel())
    assert bad.size == 0, f"{bad.size} elements differ, first at {bad[:5]}"


def assert_matches(got, want, dtype, atol=1e-300):
    """float64: within a few ulps (log1p against the papers' log(1 + x));
    the other dtypes: the same bits once rounded."""
    if dtype == "float64":
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_allclose(got, want, rtol=4e-15, atol=atol)
    else:
        assert_same_bits(got, want)


def fire_params(rng, heads=3, width=8):
    return dict(
        w1=rng.normal(size=(width, 1)),
        b1=rng.normal(size=width),
        w2=rng.normal(size=(heads, width)),
        b2=rng.normal(size=heads),
        c=0.3,
        threshold=4.5,
    )


FIRE_KEYS = ("w1", "b1", "w2", "b2", "c", "threshold")

R1 = np.array([0.7, 1.3, 0.05])
R2 = np.array([0.4, 1.9, 1.0])


# ---------------------------------------------------------------- the oracle


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_offset", [None, 0, 5, -3])
def test_kerple_matches_reference_bit_for_bit(dtype, kind, causal, q_offset):
    dt = np_dtype(dtype)
    got = fb.kerple_bias(R1, R2, 5, 9, kind=kind, causal=causal, q_offset=q_offset, dtype=dt)
    want = rf.kerple_bias(R1, R2, 5, 9, kind=kind, causal=causal, q_offset=q_offset, dtype=dt)
    assert got.dtype == dt and got.shape == (3, 5, 9)
    assert_matches(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_offset", [None, 0, 7, -4])
def test_sandwich_matches_reference_bit_for_bit(dtype, causal, q_offset):
    dt = np_dtype(dtype)
    got = fb.sandwich_bias(4, 6, 10, dim=16, causal=causal, q_offset=q_offset, dtype=dt)
    want = rf.sandwich_bias(4, 6, 10, dim=16, causal=causal, q_offset=q_offset, dtype=dt)
    assert got.dtype == dt
    assert_same_bits(got, want)


def _accurate_sum(columns):
    """The sum of the float64 `columns` (a list of equal arrays) as if
    summed in twice float64's precision, then rounded (Ogita, Rump and
    Oishi's Sum2: each addition's error kept by TwoSum)."""
    s, err = columns[0].copy(), np.zeros_like(columns[0])
    for x in columns[1:]:
        t = s + x
        z = t - s
        err += (s - (t - z)) + (x - z)
        s = t
    return s + err


def test_sandwich_within_its_bound_at_long_distances():
    # one query over 100001 keys, distances 100000..0; the docstring's bound:
    # the sum less dim/2 within dim * 2**-52 of the exact sum at the float64
    # angles (NumPy's cosines, within an ulp each, summed twice as precisely)
    heads, dim, k = 2, 64, 100_001
    half = dim // 2
    w = 10000.0 ** (-2.0 * np.arange(1, half + 1) / dim)
    dist = np.arange(k - 1, -1, -1, dtype=np.float64)
    exact = _accurate_sum([np.cos(dist * f) for f in w] + [np.full(k, -half, np.float64)])
    got = fb.sandwich_bias(heads, 1, k, dim=dim, dtype="float64")[:, 0]
    one = fb.sandwich_bias(heads, 1, k, dim=dim, dtype="float32")[:, 0].astype(np.float64)
    for h in range(heads):
        scale = (h + 1) * 8 / heads
        want = exact / scale
        tol = dim * 2.0**-52 / scale + np.spacing(np.abs(want))
        assert (np.abs(got[h] - want) <= tol).all()
        # float32: the exact value rounded once, but where it lies within the
        # bound of a halfway point between two floats
        near = want.astype(np.float32).astype(np.float64)
        off = one[h] != near
        ulp = np.spacing(np.abs(near[off]).astype(np.float32)).astype(np.float64)
        assert (np.abs(one[h][off] - near[off]) <= ulp).all()
        assert (np.abs(want[off] - (one[h][off] + near[off]) / 2) <= tol[off]).all()
    for name in ["float32", "float16", "bfloat16"]:
        dt = np_dtype(name)
        ours = fb.sandwich_bias(heads, 1, k, dim=dim, dtype=dt)
        assert_same_bits(ours, rf.sandwich_bias(heads, 1, k, dim=dim, dtype=dt))
    # not causal, the query in the middle: each magnitude on both sides, the
    # same bits as the causal values at it
    both = fb.sandwich_bias(heads, 1, k, dim=dim, causal=False, q_offset=50_000, dtype="float64")
    assert_same_bits(both[:, 0, :50_001], got[:, 50_000:])
    assert_same_bits(both[:, 0, 50_000:], got[:, 50_000:][:, ::-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("q_offset", [None, 0, 6, -2])
def test_fire_matches_reference(dtype, causal, q_offset):
    p = fire_params(np.random.default_rng(1))
    dt = np_dtype(dtype)
    got = fb.fire_bias(**p, q_len=5, k_len=11, causal=causal, q_offset=q_offset, dtype=dt)
    want = rf.fire_bias(**p, q_len=5, k_len=11, causal=causal, q_offset=q_offset, dtype=dt)
    assert got.dtype == dt
    assert_matches(got, want, dtype)


def test_fire_in_many_tiles_equals_one_tile(monkeypatch):
    p = fire_params(np.random.default_rng(2), heads=2, width=4)
    whole = fb.fire_bias(**p, q_len=9, k_len=13, causal=False, dtype="float64")
    monkeypatch.setattr(_kerple_fire, "TILE", 16)  # tiles of 1 to 2 pairs
    assert len(list(fb.tiles(9, 13, 6))) > 20
    assert_same_bits(fb.fire_bias(**p, q_len=9, k_len=13, causal=False, dtype="float64"), whole)
    s = np.zeros((2, 2, 9, 13), np.float32)
    fb.fire_bias(**p, q_len=9, k_len=13, causal=False, scores=s)
    assert_same_bits(s[1], whole.astype(np.float32))


def _peak_bytes(call):
    import tracemalloc  # NumPy reports its allocations to it

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_adds_make_no_array_of_the_scores_size(monkeypatch):
    # 2 heads of 512 x 512 float32 scores (2 MiB): KERPLE and Sandwich add a view of
    # their 2 x 1023 vector, FIRE works in tiles (tiles made small here): no temporary
    # of one head (1 MiB in float32, 2 MiB in float64)
    monkeypatch.setattr(_kerple_fire, "TILE", 4096)
    s = np.zeros((2, 512, 512), np.float32)
    assert _peak_bytes(lambda: fb.kerple_bias(R1[:2], R2[:2], 512, scores=s)) < 500_000
    assert _peak_bytes(lambda: fb.sandwich_bias(2, 512, dim=64, scores=s)) < 500_000
    p = fire_params(np.random.default_rng(20), heads=2, width=8)
    assert _peak_bytes(lambda: fb.fire_bias(**p, q_len=512, scores=s)) < 500_000
    want = np.zeros((2, 512, 512), np.float32)
    rf.kerple_bias(R1[:2], R2[:2], 512, scores=want)
    rf.sandwich_bias(2, 512, dim=64, scores=want)
    rf.fire_bias(**p, q_len=512, scores=want)
    np.testing.assert_allclose(s, want, rtol=1e-6, atol=1e-6)


def test_bfloat16_add_in_several_row_blocks(monkeypatch):
    ml = require("ml_dtypes")
    rng = np.random.default_rng(3)
    s = rng.normal(size=(2, 3, 7, 9)).astype(ml.bfloat16)
    want = s.copy()
    rf.kerple_bias(R1, R2, 7, 9, scores=want)
    monkeypatch.setattr(_kerple_fire, "TILE", 20)  # two rows of the three heads at a time
    fb.kerple_bias(R1, R2, 7, 9, scores=s)
    assert_same_bits(s, want)


# ---------------------------------------------------------------- hand-derived


def test_kerple_log_with_unit_r1_at_e_minus_one_is_minus_one():
    # -1 * log(1 + (e - 1) * 1) = -1 at distance 1; 0 on the diagonal
    got = fb.kerple_bias([1.0], [math.e - 1], 2, dtype="float64")
    assert got[0, 1, 0] == pytest.approx(-1.0, rel=1e-15)
    assert got[0, 0, 0] == 0.0 and got[0, 1, 1] == 0.0
    assert got[0, 0, 1] == -np.inf  # causal: the future is masked


def test_kerple_power_hand_values():
    # -0.5 * 3 ** 2 = -4.5, -0.5 * 2 ** 2 = -2, bidirectional symmetric
    got = fb.kerple_bias([0.5], [2.0], 4, kind="power", causal=False, dtype="float64")
    assert got[0, 3, 0] == -4.5 and got[0, 0, 3] == -4.5 and got[0, 2, 0] == -2.0


def test_sandwich_with_two_dims_is_one_cosine():
    # d' = 2: (cos(delta / 10000) - 1) / ((h + 1) * 8 / H); H = 2
    got = fb.sandwich_bias(2, 1, 101, dim=2, q_offset=100, dtype="float64")
    for h, scale in enumerate([4.0, 8.0]):
        assert got[h, 0, 0] == pytest.approx((math.cos(0.01) - 1) / scale, rel=1e-12)
        assert got[h, 0, 100] == 0.0


def test_fire_hand_value():
    # one hidden unit and head, identity MLP: x(qpos 0, key 1) = log 2 / (log(1 + 3) + eps)
    got = fb.fire_bias(
        [[1.0]],
        [0.0],
        [[1.0]],
        [0.0],
        1.0,
        3.0,
        1,
        2,
        causal=False,
        q_offset=0,
        eps=1e-6,
        dtype="float64",
    )
    assert got[0, 0, 1] == pytest.approx(math.log(2) / (math.log(4) + 1e-6), rel=1e-15)
    assert got[0, 0, 0] == 0.0


def test_kerple_log_where_r2_times_the_distance_overflows():
    # -log(1 + 1e300 * 1e10) = -(300 + 10) ln 10: finite, though 1e310 is not
    got = fb.kerple_bias([1.0], [1e300], 1, 1, q_offset=10**10, dtype="float64")
    assert got[0, 0, 0] == pytest.approx(-310 * math.log(10), rel=1e-15)
    g_r1, g_r2 = fg.kerple_bias_grad(np.ones((1, 1, 1)), [1.0], [1e300], q_offset=10**10)
    assert g_r1[0] == pytest.approx(-310 * math.log(10), rel=1e-15)
    # -r1 d / (1 + r2 d) = -1 / (1e-10 + 1e300)
    assert g_r2[0] == pytest.approx(-1e-300, rel=1e-15)


def test_fire_where_c_times_the_distance_overflows():
    # x = log(1 + 1e300 * 1e10) / (log(1 + 1e300 * 1e10) + eps) at qpos 1e10 > L
    got = fb.fire_bias(
        [[1.0]], [0.0], [[1.0]], [0.0], 1e300, 3.0, 1, 1, q_offset=10**10, dtype="float64"
    )
    big = 310 * math.log(10)
    assert got[0, 0, 0] == pytest.approx(big / (big + 1e-6), rel=1e-15)


# ---------------------------------------------------------------- q_offset


@pytest.mark.parametrize("which", ["kerple", "sandwich", "fire"])
def test_a_decoding_step_is_the_last_row_of_the_full_bias(which):
    p = fire_params(np.random.default_rng(4))
    calls = {
        "kerple": lambda q, k, **kw: fb.kerple_bias(R1, R2, q, k, kind="power", **kw),
        "sandwich": lambda q, k, **kw: fb.sandwich_bias(3, q, k, dim=8, **kw),
        "fire": lambda q, k, **kw: fb.fire_bias(**p, q_len=q, k_len=k, **kw),
    }
    call = calls[which]
    full = call(12, 12, dtype="float64")
    assert_same_bits(call(1, 12, dtype="float64"), full[:, -1:, :])  # default q_offset
    assert_same_bits(call(3, 12, q_offset=4, dtype="float64"), full[:, 4:7, :])


# ---------------------------------------------------------------- scores=


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["kerple", "sandwich", "fire"])
def test_scores_in_place_equal_the_reference_add(dtype, which):
    rng = np.random.default_rng(5)
    p = fire_params(rng)
    dt = np_dtype(dtype)
    calls = {
        "kerple": (fb.kerple_bias, rf.kerple_bias, (R1, R2, 6, 8), {"kind": "log"}),
        "sandwich": (fb.sandwich_bias, rf.sandwich_bias, (3, 6, 8), {"dim": 12}),
        "fire": (fb.fire_bias, rf.fire_bias, tuple(p.values()) + (6, 8), {}),
    }
    ours, theirs, args, kw = calls[which]
    base = (rng.standard_normal((2, 3, 6, 8)) * 4).astype(dt)
    want = base.copy()
    theirs(*args, **kw, causal=False, scores=want)
    for layout in ["c", "transposed", "strided"]:
        s = base.copy()
        if layout == "transposed":  # F-order storage: non-contiguous last axis
            s = np.asfortranarray(base)
        elif layout == "strided":
            big = np.zeros((2, 3, 6, 16), dt)
            big[..., ::2] = base
            s = big[..., ::2]
        got = ours(*args, **kw, causal=False, scores=s)
        assert got is s
        assert_matches(s, want, dtype, atol=1e-14)  # float64: after the add's cancellation


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_is_written_with_the_tables_bits(dtype):
    dt = np_dtype(dtype)
    p = fire_params(np.random.default_rng(19))
    for ours, args, kw in [
        (fb.kerple_bias, (R1, R2, 4, 6), {"kind": "power"}),
        (fb.sandwich_bias, (3, 4, 6), {"dim": 6}),
        (fb.fire_bias, tuple(p.values()) + (4, 6), {}),
    ]:
        want = ours(*args, **kw, dtype=dt)
        out = np.full((3, 6, 4), np.nan, dt).transpose(0, 2, 1)  # strided
        assert ours(*args, **kw, out=out) is out
        assert_same_bits(out, want)


def test_scores_byte_swapped():
    rng = np.random.default_rng(6)
    base = rng.standard_normal((3, 5, 5))
    want = base.copy()
    rf.kerple_bias(R1, R2, 5, scores=want)
    s = base.astype(">f8")
    fb.kerple_bias(R1, R2, 5, scores=s)
    assert s.dtype == np.dtype(">f8")
    np.testing.assert_allclose(s.astype(np.float64), want, rtol=4e-15)


def test_causal_add_gives_minus_inf_in_the_future():
    s = np.zeros((3, 4, 4), np.float32)
    fb.sandwich_bias(3, 4, dim=8, scores=s)
    assert np.isneginf(s[:, 0, 1:]).all() and np.isfinite(s[:, 1:, 0]).all()


# ---------------------------------------------------------------- the C row kernels
# KERPLE and Sandwich go through _core.bias_given: float64 vectors, one
# value per distance, rounded once and written or added row by row; so do
# FIRE's rows of queries at or before its threshold (one normaliser).

GIVEN_GRIDS = [(5, 9, None), (9, 5, 7), (1, 12, None), (4, 4, -3), (6, 2, 30)]


def _given_calls(q, k, q_offset, causal):
    kw = dict(q_offset=q_offset, causal=causal)
    fire = tuple({**fire_params(np.random.default_rng(3)), "threshold": 6.5}.values())
    return [
        (fb.fire_bias, rf.fire_bias, fire + (q, k), kw),
        (fb.kerple_bias, rf.kerple_bias, (R1, R2, q, k), dict(kind="log", **kw)),
        (fb.kerple_bias, rf.kerple_bias, (R1, R2, q, k), dict(kind="power", **kw)),
        (fb.sandwich_bias, rf.sandwich_bias, (3, q, k), dict(dim=10, **kw)),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("grid", GIVEN_GRIDS)
def test_biases_by_distance_on_every_path_equal_the_reference(simd, threads, dtype, causal, grid):
    q, k, q_offset = grid
    dt = np_dtype(dtype)
    base = (np.random.default_rng(q * k).standard_normal((2, 3, q, k)) * 4).astype(dt)
    for ours, theirs, args, kw in _given_calls(q, k, q_offset, causal):
        # float64: FIRE's reference sums its MLP by a matrix product, a few ulps away
        atol = 1e-14 if ours is fb.fire_bias else 1e-300
        want = theirs(*args, **kw, dtype=dt)
        assert_matches(ours(*args, **kw, dtype=dt), want, dtype, atol)
        out = np.full((3, k, q), np.nan, dt).transpose(0, 2, 1)  # a strided last axis
        ours(*args, **kw, out=out)
        assert_matches(out, want, dtype, atol)
        one = np.full((3, 1, k), np.nan, dt)  # a single query: the vector written in place
        ours(*args[:-2], 1, k, **{**kw, "q_offset": 3}, out=one)
        want = theirs(*args[:-2], 1, k, **{**kw, "q_offset": 3}, dtype=dt)
        assert_matches(one, want, dtype, atol)
        want = base.copy()
        theirs(*args, **kw, scores=want)
        big = np.zeros((2, 5, q, k), dt)
        big[:, 1:4] = base
        for scores in (base.copy(), big[:, 1:4]):  # C-contiguous, and strided over the heads
            assert ours(*args, **kw, scores=scores) is scores
            assert_matches(scores, want, dtype, atol=1e-14)
        assert (big[:, 0] == 0).all() and (big[:, 4] == 0).all()


BITS = """
import hashlib
import numpy as np
import posenc
from posenc import functional_bias as fb
r1, r2 = np.array([0.7, 1.3, 0.05]), np.array([0.4, 1.9, 1.0])
digest = hashlib.sha256()
for dt in ["float16", "float32", "float64"]:
    for causal in (True, False):
        s = (np.random.default_rng(1).standard_normal((2, 3, 37, 70)) * 4).astype(dt)
        fb.kerple_bias(r1, r2, 37, 70, kind="power", causal=causal, scores=s)
        fb.sandwich_bias(3, 37, 70, dim=12, causal=causal, q_offset=50, scores=s)
        digest.update(s.tobytes())
        digest.update(fb.kerple_bias(r1, r2, 37, 70, causal=causal, dtype=dt).tobytes())
print(posenc.simd_path(), digest.hexdigest())
"""


def test_kerple_and_sandwich_portable_path_in_a_child_gives_the_same_bits():
    import child_process

    child_process.assert_every_path_gives_the_same_bits(BITS)


@pytest.mark.parametrize("q_offset", [0, 3, 9])
def test_fire_rows_before_the_threshold_equal_the_rows_made_one_by_one(q_offset):
    p = {**fire_params(np.random.default_rng(4)), "threshold": 7.0}
    got = fb.fire_bias(**p, q_len=6, k_len=13, causal=False, q_offset=q_offset, dtype="float64")
    qpos = q_offset + np.arange(6.0)
    for i in range(6):  # each row on its own, through the per-pair path
        x = fb.fire_inputs(qpos[i : i + 1], np.arange(13.0), p["c"], p["threshold"], 1e-6)[0]
        row = fb.fire_tile(x, p["w1"][:, 0], p["b1"], p["w2"], p["b2"])[:, 0]
        assert_same_bits(got[:, i], row)


def test_bias_given_refuses_bad_arguments_and_leaves_scores_untouched():
    scores = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    before = scores.copy()
    values = np.zeros((3, 8))
    for bad, exc, match in [
        (lambda: _core.bias_given(np.zeros((2, 8)), scores, True), ValueError, "values"),
        (lambda: _core.bias_given(np.zeros((3, 9)), scores, True), ValueError, "values"),
        (lambda: _core.bias_given(values.astype(np.float32), scores, True), TypeError, "values"),
        (lambda: _core.bias_given(values[:, ::2], scores, True), ValueError, "values"),
        (lambda: _core.bias_given(values, scores.astype(np.int32), True), TypeError, "scores"),
        (lambda: _core.bias_given(values, scores[0], True), ValueError, "scores"),
        (lambda: _core.bias_given(values, scores[..., ::-1], False), ValueError, "out"),
    ]:
        with pytest.raises(exc, match=match):
            bad()
        assert_same_bits(scores, before)
    shared = np.zeros(2 * 3 * 4 * 5)  # values that are bytes of the scores
    with pytest.raises(ValueError, match="values"):
        _core.bias_given(shared[:24].reshape(3, 8), shared.reshape(2, 3, 4, 5), True)
    assert (shared == 0).all()


# ---------------------------------------------------------------- FIRE's rows in C
# The rows of queries past FIRE's threshold go through _core.fire_rows: the
# MLP in float64 in fire_tile's operations and order, so its bits are those
# of the NumPy tiles (fire_inputs, fire_tile) on the whole grid.


def _rounded(values, dt):
    """float64 `values` rounded once to `dt` (beyond float16's range: inf)."""
    with np.errstate(over="ignore"):
        return reference._cast(values, dt)


def _fire_tiles(p, q, k, q_offset, causal, eps=1e-6):
    """FIRE by the NumPy tiles in one tile: float64 (heads, q, k), -inf
    after the query when causal."""
    q_offset = k - q if q_offset is None else q_offset
    qpos = q_offset + np.arange(q, dtype=np.float64)
    keys = np.arange(k, dtype=np.float64)
    x = fb.fire_inputs(qpos, keys, p["c"], p["threshold"], eps)[0]
    w1 = np.asarray(p["w1"], np.float64).reshape(-1)
    values = fb.fire_tile(x, w1, p["b1"], p["w2"], p["b2"])
    if causal:
        values[:, qpos[:, None] < keys[None, :]] = -np.inf
    return values


def _fire_mlps():
    """MLPs of 2, 4, 5 and 7 heads (every tail of the kernel's blocks of
    four heads), the last with a zero in b2 (every hidden unit summed)."""
    rng = np.random.default_rng(12)
    mlps = [fire_params(rng, heads, width) for heads, width in [(2, 8), (4, 5), (5, 7), (7, 33)]]
    mlps[-1]["b2"][2] = 0.0
    return mlps


# (q_len, k_len, q_offset, threshold): the threshold inside the queries,
# before them, after them; more queries than keys; a negative offset; keys
# over several chunks and tasks of the kernel
FIRE_GRIDS = [
    (9, 13, None, 6.5),
    (5, 11, 4, 1.0),
    (4, 7, None, 100.0),
    (12, 5, 2, 3.0),
    (6, 9, -3, 0.0),
    (9, 600, None, 595.5),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_fire_rows_in_c_equal_the_numpy_tiles_bit_for_bit(simd, threads, dtype, causal):
    dt = np_dtype(dtype)
    for p in _fire_mlps():
        heads = p["w2"].shape[0]
        for q, k, q_offset, threshold in FIRE_GRIDS:
            p["threshold"] = threshold
            kw = dict(causal=causal, q_offset=q_offset)
            tiles = _fire_tiles(p, q, k, q_offset, causal)
            want = _rounded(tiles, dt)
            assert_same_bits(fb.fire_bias(**p, q_len=q, k_len=k, **kw, dtype=dt), want)
            out = np.full((heads, k, q), np.nan, dt).transpose(0, 2, 1)  # a strided last axis
            fb.fire_bias(**p, q_len=q, k_len=k, **kw, out=out)
            assert_same_bits(out, want)
            base = (np.random.default_rng(q * k).standard_normal((2, heads, q, k)) * 4).astype(dt)
            with np.errstate(over="ignore"):
                want = reference._add_or_return(tiles, None, base.copy(), None)
            big = np.zeros((2, heads + 2, q, k), dt)
            big[:, 1:-1] = base
            scores = big[:, 1:-1]  # strided over the heads
            assert fb.fire_bias(**p, q_len=q, k_len=k, **kw, scores=scores) is scores
            assert_same_bits(scores, want)
            assert (big[:, 0] == 0).all() and (big[:, -1] == 0).all()


def test_fire_rows_keep_the_signed_zeros_of_the_numpy_tiles():
    # every hidden unit is 0 (x >= 0, w1 < 0, b1 = -0.0), so head 0 sums
    # 0 * -1 + 0 * -3 = -0.0 and head 1 0 * 2 + 0 * -1 = +0.0 before b2
    p = dict(w1=[[-1.0], [-2.0]], b1=np.array([-0.0, -0.0]), c=0.5, threshold=1.0)
    p["w2"] = np.array([[-1.0, -3.0], [2.0, -1.0]])
    for b2, heads in [
        ([-0.0, -0.0], [-0.0, 0.0]),
        ([0.0, -0.0], [0.0, 0.0]),
        ([0.25, -0.5], [0.25, -0.5]),
    ]:
        q = dict(p, b2=np.array(b2))
        got = fb.fire_bias(**q, q_len=6, k_len=9, causal=False, dtype="float64")  # qpos 3 to 8
        assert_same_bits(got, _fire_tiles(q, 6, 9, None, False))
        assert_same_bits(got, np.broadcast_to(np.array(heads)[:, None, None], (2, 6, 9)))


FIRE_BITS = """
import hashlib
import numpy as np
import posenc
rng = np.random.default_rng(5)
digest = hashlib.sha256()
for heads, width in [(6, 32), (3, 7)]:
    p = dict(w1=rng.normal(size=(width, 1)), b1=rng.normal(size=width),
             w2=rng.normal(size=(heads, width)), b2=rng.normal(size=heads), c=0.2, threshold=9.0)
    for b2 in (p["b2"], np.r_[0.0, p["b2"][1:]]):
        for n in (1, 2):
            posenc.set_num_threads(n)
            for dt in ["float16", "float32", "float64"]:
                for causal in (True, False):
                    s = np.random.default_rng(1).standard_normal((2, heads, 37, 70)).astype(dt)
                    posenc.fire_bias(**{**p, "b2": b2}, q_len=37, k_len=70, causal=causal, scores=s)
                    digest.update(s.tobytes())
                    t = posenc.fire_bias(**{**p, "b2": b2}, q_len=37, k_len=70, causal=causal,
                                         q_offset=50, dtype=dt)
                    digest.update(t.tobytes())
print(posenc.simd_path(), digest.hexdigest())
"""


def test_fire_portable_path_in_a_child_gives_the_same_bits():
    import child_process

    child_process.assert_every_path_gives_the_same_bits(FIRE_BITS)


def test_fire_rows_refuses_bad_arguments_and_leaves_scores_untouched():
    scores = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    before = scores.copy()
    norm, psi, w1, b1 = np.ones(4), np.zeros(8), np.ones(6), np.zeros(6)
    w2, b2 = np.ones((3, 6)), np.ones(3)
    args = (norm, psi, w1, b1, w2, b2, scores, 0, True, True)

    def call(**changes):
        names = ("norm", "psi", "w1", "b1", "w2", "b2", "dst", "q_offset", "causal", "add")
        values = dict(zip(names, args), **changes)
        return lambda: _core.fire_rows(*values.values())

    for bad, exc, match in [
        (call(norm=np.ones(5)), ValueError, "norm"),
        (call(norm=np.ones(4, np.float32)), TypeError, "norm"),
        (call(psi=np.zeros(9)), ValueError, "psi"),
        (call(psi=np.zeros(16)[::2]), ValueError, "psi"),
        (call(w1=np.ones(0)), ValueError, "w1"),
        (call(w1=np.ones((6, 1))), ValueError, "w1"),
        (call(b1=np.zeros(5)), ValueError, "b1"),
        (call(b1=[0.0] * 6), TypeError, "b1"),
        (call(w2=np.ones((2, 6))), ValueError, "w2"),
        (call(w2=np.ones((3, 5))), ValueError, "w2"),
        (call(w2=np.ones((6, 3)).T), ValueError, "w2"),
        (call(b2=np.ones(2)), ValueError, "b2"),
        (call(b2=np.ones(3, ">f8")), TypeError, "b2"),
        (call(dst=scores.astype(np.int32)), TypeError, "scores"),
        (call(dst=scores[0]), ValueError, "scores"),
        (call(dst=scores[..., ::-1], add=False), ValueError, "out"),
        (call(q_offset=2**60), ValueError, "q_offset"),
    ]:
        with pytest.raises(exc, match=match):
            bad()
        assert_same_bits(scores, before)
    shared = np.zeros(2 * 3 * 4 * 5)  # psi that is bytes of the scores
    with pytest.raises(ValueError, match="psi"):
        _core.fire_rows(norm, shared[:8], w1, b1, w2, b2, shared.reshape(2, 3, 4, 5), 0, 1, 1)
    assert (shared == 0).all()


# ---------------------------------------------------------------- bad input


def _bad_calls():
    p = fire_params(np.random.default_rng(7))

    def fire(**changes):
        q = {**p, **changes}
        return lambda s: fb.fire_bias(**q, q_len=4, k_len=4, scores=s)

    return [
        (lambda s: fb.kerple_bias([0.5, -1.0, 1.0], R2, 4, scores=s), ValueError, "r1"),
        (lambda s: fb.kerple_bias(R1, [0.5, 0.0, 1.0], 4, scores=s), ValueError, "r2"),
        (
            lambda s: fb.kerple_bias(R1, [0.5, 2.5, 1.0], 4, kind="power", scores=s),
            ValueError,
            "r2",
        ),
        (lambda s: fb.kerple_bias([0.5, np.nan, 1.0], R2, 4, scores=s), ValueError, "r1"),
        (lambda s: fb.kerple_bias(R1, [0.5, 1.0], 4, scores=s), ValueError, "r1 and r2"),
        (lambda s: fb.kerple_bias(R1[:2], R2[:2], 4, scores=s), ValueError, "scores"),
        (lambda s: fb.kerple_bias(R1.reshape(3, 1), R2, 4, scores=s), ValueError, "r1"),
        (lambda s: fb.kerple_bias(R1, R2, 4, kind="gauss", scores=s), ValueError, "kind"),
        (lambda s: fb.kerple_bias(R1 > 0, R2, 4, scores=s), TypeError, "r1"),
        (lambda s: fb.kerple_bias(R1, R2, 4, scores=s.astype(np.int32)), TypeError, "scores"),
        (lambda s: fb.kerple_bias(R1, R2, 4, scores=s.tolist()), TypeError, "scores"),
        (lambda s: fb.kerple_bias(R1, R2, 4, causal=1, scores=s), TypeError, "causal"),
        (lambda s: fb.kerple_bias(R1, R2, 4, dtype="float64", scores=s), TypeError, "dtype"),
        (lambda s: fb.kerple_bias(R1, R2, 5, 4, scores=s), ValueError, "q_offset"),
        (lambda s: fb.kerple_bias(R1, R2, 0, 4, scores=s), ValueError, "q_len"),
        (lambda s: fb.sandwich_bias(3, 4, dim=7, scores=s), ValueError, "dim"),
        (lambda s: fb.sandwich_bias(3, 4, dim=0, scores=s), ValueError, "dim"),
        (lambda s: fb.sandwich_bias(2, 4, dim=8, scores=s), ValueError, "scores"),
        (lambda s: fb.sandwich_bias(0, 4, dim=8, scores=s), ValueError, "n_heads"),
        (fire(w1=np.ones((8, 2))), ValueError, "w1"),
        (fire(b1=np.ones(7)), ValueError, "b1"),
        (fire(w2=np.ones((3, 7))), ValueError, "w2"),
        (fire(b2=np.ones(2)), ValueError, "b2"),
        (fire(w2=np.ones((2, 8)), b2=np.ones(2)), ValueError, "scores"),
        (fire(c=float("nan")), ValueError, "c"),
        (fire(threshold=-1.0), ValueError, "threshold"),
        (fire(b1=np.full(8, np.inf)), ValueError, "b1"),
        (fire(c="0.3"), TypeError, "c"),
        (lambda s: fb.fire_bias(**p, q_len=4, eps=0.0, scores=s), ValueError, "eps"),
        (lambda s: fb.kerple_bias(R1, R2, 4, scores=s, out=s[0]), ValueError, "out"),
        (lambda s: fb.sandwich_bias(3, 4, dim=4, out=s[0, :2]), ValueError, "out"),
        (lambda s: fb.sandwich_bias(3, 4, dim=4, out=s[0], dtype="float64"), TypeError, "out"),
    ]


@pytest.mark.parametrize("i", range(len(_bad_calls())))
def test_bad_input_is_refused_naming_the_argument_and_scores_are_untouched(i):
    call, error, name = _bad_calls()[i]
    s = np.random.default_rng(8).standard_normal((2, 3, 4, 4)).astype(np.float32)
    before = s.copy()
    with pytest.raises(error, match=name):
        call(s)
    assert_same_bits(s, before)


def test_read_only_scores_are_refused():
    s = np.zeros((3, 4, 4))
    s.flags.writeable = False
    with pytest.raises(ValueError, match="scores"):
        fb.kerple_bias(R1, R2, 4, scores=s)


def test_grad_functions_refuse_bad_input():
    p = fire_params(np.random.default_rng(9))
    with pytest.raises(ValueError, match="heads"):
        fg.kerple_bias_grad(np.ones((2, 4, 4)), R1, R2)
    with pytest.raises(ValueError, match="grad"):
        fg.kerple_bias_grad(np.ones((4, 4)), R1, R2)
    with pytest.raises(TypeError, match="grad"):
        fg.kerple_bias_grad(np.ones((3, 4, 4), np.int64), R1, R2)
    with pytest.raises(ValueError, match="heads"):
        fg.fire_bias_grad(np.ones((2, 4, 4)), **p)
    with pytest.raises(ValueError, match="r2"):
        fg.kerple_bias_grad(np.ones((3, 4, 4)), R1, -R2)


# ---------------------------------------------------------------- witnesses (torch)


def kerple_witness(torch, x, bias_p, bias_a, kind):
    """ParallelKerpleLog / ParallelKerplePower's forward, written from the
    paper and the authors' description: the tril'd distance matrix, the
    kernel on it, added to x (b, h, n, n)."""
    n = x.shape[-1]
    diff = torch.tril(torch.arange(n).view(n, 1).repeat(1, n) + torch.arange(0, -n, -1)).to(x.dtype)
    if kind == "log":
        bias = -bias_p * torch.log(1 + bias_a * diff)
    else:
        bias = -bias_a * diff.pow(bias_p)
    return x + bias


@pytest.mark.parametrize("kind", ["log", "power"])
def test_kerple_against_the_authors_formula_in_torch(kind):
    torch = require("torch")
    n, rng = 10, np.random.default_rng(10)
    r1, r2 = rng.uniform(0.1, 2.0, 4), rng.uniform(0.1, 2.0, 4)
    p, a = (r2, r1) if kind == "power" else (r1, r2)  # bias_p, bias_a
    x = torch.zeros(1, 4, n, n, dtype=torch.float64)
    bias_p = torch.tensor(p[:, None, None], requires_grad=True)
    bias_a = torch.tensor(a[:, None, None], requires_grad=True)
    witness = kerple_witness(torch, x, bias_p, bias_a, kind)
    lower = np.tril(np.ones((n, n), bool))
    for dtype, tol in [("float64", 1e-15), ("float32", 2**-24)]:
        ours = fb.kerple_bias(r1, r2, n, kind=kind, dtype=dtype).astype(np.float64)
        w = witness.detach().numpy()[0]
        err = np.abs(ours - w)[:, lower]
        assert err.max() <= tol * np.abs(w[:, lower]).max() + 1e-300, err.max()
        assert np.isneginf(ours[:, ~lower]).all()  # the authors' 0 there is masked
    # gradients: torch.autograd of the witness against the NumPy backward
    g = torch.tensor(rng.standard_normal((2, 4, n, n)))
    (witness * g).sum().backward()
    g_r1, g_r2 = fg.kerple_bias_grad(g.numpy(), r1, r2, kind=kind)
    want_p, want_a = bias_p.grad.numpy().ravel(), bias_a.grad.numpy().ravel()
    want_r1, want_r2 = (want_a, want_p) if kind == "power" else (want_p, want_a)
    np.testing.assert_allclose(g_r1, want_r1, rtol=1e-12)
    np.testing.assert_allclose(g_r2, want_r2, rtol=1e-12)
    # the authors' (n_heads, 1, 1) parameters go in as they are
    shaped = fg.kerple_bias_grad(g.numpy(), r1[:, None, None], r2[:, None, None], kind=kind)
    assert shaped[0].shape == (4, 1, 1)


def nemo_sandwich(torch, q, k, heads, hidden, bidirectional, dtype):
    """NeMo's SandwichRelativePositionEmbedding.forward written out (on CPU,
    in `dtype`): |i - j| from build_relative_position, its last q rows and
    k columns, tril'd unless bidirectional."""
    m = max(q, k)
    rel = torch.arange(1 - m, 1)[None, :].mul(-1)
    mem = torch.arange(1 - m, 1)[:, None].mul(-1)
    rel = torch.abs(mem - rel)[-q:, -k:]
    if not bidirectional:
        rel = torch.tril(rel)
    inv_freq = 1.0 / (10000 ** (2 * torch.arange(1, hidden / 2 + 1, dtype=dtype) / hidden))
    bias = torch.sum((rel[:, :, None].repeat(1, 1, len(inv_freq)) * inv_freq).cos(), axis=2)
    bias = bias.repeat(heads, 1, 1)
    scales = torch.arange(1, heads + 1, 1)[:, None, None]
    return ((bias - hidden / 2) / (scales * 8 / heads)).unsqueeze(0)


@pytest.mark.parametrize("q,k", [(9, 9), (1, 9), (4, 9)])
def test_sandwich_against_nemo_in_torch(q, k):
    torch = require("torch")
    heads, hidden = 4, 32
    w = nemo_sandwich(torch, q, k, heads, hidden, True, torch.float64).numpy()[0]
    np.testing.assert_allclose(
        fb.sandwich_bias(heads, q, k, dim=hidden, causal=False, dtype="float64"),
        w,
        rtol=1e-12,
        atol=1e-12,
    )
    ours = fb.sandwich_bias(heads, q, k, dim=hidden, dtype="float64")
    past = np.tril(np.ones((q, k), bool), k - q)  # keys j <= qpos = k - q + i
    np.testing.assert_allclose(ours[:, past], w[:, past], rtol=1e-12, atol=1e-12)
    assert np.isneginf(ours[:, ~past]).all()
    if q == k:  # NeMo's causal form gives the future distance 0 (bias 0) for its mask to hide
        causal = nemo_sandwich(torch, q, k, heads, hidden, False, torch.float64).numpy()[0]
        assert (causal[:, ~past] == 0).all()
        np.testing.assert_allclose(causal[:, past], w[:, past], rtol=0, atol=0)


def fire_witness(torch, heads, width, seq, params, init_l, l_mult, eps=1e-6):
    """FIRE's module from the paper (Li et al., 2024, its appendix code's
    forward written out): bias (1, heads, seq, seq) over positions 0..seq-1."""
    mlp = torch.nn.Sequential(
        torch.nn.Linear(1, width), torch.nn.ReLU(), torch.nn.Linear(width, heads)
    ).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.tensor(params["w1"]))
        mlp[0].bias.copy_(torch.tensor(params["b1"]))
        mlp[2].weight.copy_(torch.tensor(params["w2"]))
        mlp[2].bias.copy_(torch.tensor(params["b2"]))
    c = torch.nn.Parameter(torch.tensor(params["c"], dtype=torch.float64))
    init_L = torch.tensor(init_l, dtype=torch.float64)
    L_multiplier = torch.nn.Parameter(torch.tensor(l_mult, dtype=torch.float64))
    positions = torch.arange(seq, dtype=torch.float64)
    rel_distance = positions[:, None] - positions[None, :]
    threshold = torch.abs(L_multiplier * init_L)
    pos_normalizer = torch.max(positions, threshold)[:, None]
    rel_distance = torch.log(torch.abs(c * rel_distance) + 1)
    pos_normalizer = torch.log(torch.abs(c * pos_normalizer) + 1) + eps
    normalized = rel_distance / pos_normalizer
    bias = mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)
    return bias, mlp, c, L_multiplier


@pytest.mark.parametrize("c, l_mult", [(0.3, 0.75), (-0.7, 0.75), (0.3, 1.0)])
def test_fire_and_its_gradients_against_the_papers_module_in_torch(c, l_mult):
    # threshold 4.5: queries 0..4 use it; threshold 6.0: query 6 ties with
    # it, and torch's max gives the threshold half of that query's gradient
    torch = require("torch")
    heads, width, n = 3, 8, 12
    p = fire_params(np.random.default_rng(11), heads, width)
    p["c"] = c
    init_l = 6.0
    bias, mlp, c_t, l_t = fire_witness(torch, heads, width, n, p, init_l, l_mult)
    p["threshold"] = abs(init_l * l_mult)
    w = bias.detach().numpy()[0]
    for causal in [False, True]:
        ours = fb.fire_bias(**p, q_len=n, causal=causal, dtype="float64")
        keep = np.ones((n, n), bool) if not causal else np.tril(np.ones((n, n), bool))
        np.testing.assert_allclose(ours[:, keep], w[:, keep], rtol=1e-13, atol=1e-14)
    # gradients through the authors' parameters, upstream gradient on the past only
    g = np.random.default_rng(12).standard_normal((2, heads, n, n))
    g_past = g * np.tril(np.ones((n, n)))
    (bias * torch.tensor(g_past.sum(axis=0))).sum().backward()
    got = fg.fire_bias_grad(g, **p, causal=True)
    np.testing.assert_allclose(got[0], mlp[0].weight.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(got[1], mlp[0].bias.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(got[2], mlp[2].weight.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(got[3], mlp[2].bias.grad.numpy(), rtol=1e-11, atol=1e-12)
    assert got[4] == pytest.approx(c_t.grad.item(), rel=1e-11)
    # threshold = |L_multiplier * init_L|: d/dL_multiplier = init_L * d/dthreshold
    assert got[5] * init_l == pytest.approx(l_t.grad.item(), rel=1e-11)
    assert got[5] != 0.0


def test_fire_threshold_gradient_is_zero_when_every_query_is_past_it():
    p = fire_params(np.random.default_rng(13))
    p["threshold"] = 2.0
    g = np.ones((3, 4, 4))
    assert fg.fire_bias_grad(g, **p, q_offset=3)[5] == 0.0  # qpos 3..6 > 2
    assert fg.fire_bias_grad(g, **p, q_offset=2)[5] != 0.0  # qpos 2 ties: half of its share
    assert fg.fire_bias_grad(g, **p, q_offset=1)[5] != 0.0  # qpos 1 < 2


# ---------------------------------------------------------------- finite differences


def _central(f, x, h):
    grads = np.zeros(x.size)
    for n in range(x.size):
        up, down = x.copy(), x.copy()
        up.flat[n] += h
        down.flat[n] -= h
        grads[n] = (f(up) - f(down)) / (2 * h)
    return grads.reshape(x.shape)


@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_kerple_grad_against_finite_differences(kind, causal):
    rng = np.random.default_rng(14)
    g = rng.standard_normal((2, 3, 5, 8))
    r1, r2 = np.array([0.6, 1.1, 0.3]), np.array([0.5, 1.5, 0.9])

    def loss(a, b):
        bias = fb.kerple_bias(a, b, 5, 8, kind=kind, causal=causal, q_offset=4, dtype="float64")
        return float(np.sum(np.where(np.isinf(bias), 0.0, bias) * g))

    g_r1, g_r2 = fg.kerple_bias_grad(g, r1, r2, kind=kind, causal=causal, q_offset=4)
    np.testing.assert_allclose(g_r1, _central(lambda a: loss(a, r2), r1, 1e-6), rtol=1e-7)
    np.testing.assert_allclose(g_r2, _central(lambda b: loss(r1, b), r2, 1e-6), rtol=1e-7)


def test_kerple_grad_sums_by_columns_when_queries_outnumber_keys():
    rng = np.random.default_rng(15)
    g = rng.standard_normal((3, 9, 4))
    by_cols = fg.kerple_bias_grad(g, R1, R2, causal=False, q_offset=0)
    wide = fg.diagonal_sums(g)
    assert wide.shape == (3, 12)
    np.testing.assert_allclose(wide[:, 8], np.einsum("hii->h", g[:, :4, :]), rtol=1e-14)
    # transposed: 4 queries, 9 keys (summed by rows), the same |distances|
    by_rows = fg.kerple_bias_grad(g.transpose(0, 2, 1), R1, R2, causal=False, q_offset=0)
    np.testing.assert_allclose(by_cols[0], by_rows[0], rtol=1e-12)
    np.testing.assert_allclose(by_cols[1], by_rows[1], rtol=1e-12)


def test_fire_grad_against_finite_differences():
    rng = np.random.default_rng(16)
    p = fire_params(rng, heads=2, width=5)
    g = rng.standard_normal((2, 6, 7))
    names = ["w1", "b1", "w2", "b2", "c", "threshold"]

    def loss(**changes):
        bias = fb.fire_bias(
            **{**p, **changes}, q_len=6, k_len=7, q_offset=1, causal=False, dtype="float64"
        )
        return float(np.sum(bias * g))

    got = fg.fire_bias_grad(g, **p, q_offset=1, causal=False)
    for name, grad in zip(names, got):
        x = np.asarray(p[name], dtype=np.float64)
        num = _central(lambda y, name=name: loss(**{name: y if y.ndim else float(y)}), x, 1e-6)
        np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8, err_msg=name)


def test_grad_of_low_precision_scores_is_summed_in_float64():
    rng = np.random.default_rng(17)
    g = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    a = fg.kerple_bias_grad(g, R1, R2, kind="power")
    b = fg.kerple_bias_grad(g.astype(np.float64).sum(axis=0), R1, R2, kind="power")
    np.testing.assert_allclose(a[0], b[0], rtol=1e-13)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-13)


# ---------------------------------------------------------------- torch and JAX objects


def test_torch_tensors_in_and_out():
    torch = require("torch")
    got = fb.kerple_bias(torch.tensor(R1), torch.tensor(R2), 4, dtype=torch.float32)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert_same_bits(got.numpy(), rf.kerple_bias(R1, R2, 4))
    ml = require("ml_dtypes")
    s = (torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0)) * 4).bfloat16()
    want = s.float().numpy().astype(ml.bfloat16)  # exact: the same bfloat16 values
    out = fb.sandwich_bias(3, 4, dim=8, scores=s)  # bfloat16 tensors come in as bits
    assert out is s
    rf.sandwich_bias(3, 4, dim=8, scores=want)
    assert_same_bits(s.view(torch.int16).numpy(), want.view(np.int16))


@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_kerple_torch_autograd_passes_gradcheck(kind, causal):
    torch = require("torch")
    r1 = torch.tensor([0.5, 1.5, 0.25], dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor([0.75, 1.25, 1.9], dtype=torch.float64, requires_grad=True)
    scores = torch.randn(2, 3, 4, 6, dtype=torch.float64, requires_grad=True)

    def bias(s, a, b):
        out = fb.kerple_bias(a, b, 4, 6, kind=kind, causal=causal, scores=s.clone())
        # the future's -inf (causal) has no gradient: the past and present only
        return out[..., torch.ones(4, 6, dtype=torch.bool).tril(2)] if causal else out

    assert torch.autograd.gradcheck(bias, (scores, r1, r2))


def test_fire_torch_autograd_passes_gradcheck():
    torch = require("torch")
    p = fire_params(np.random.default_rng(21))
    args = [torch.tensor(np.asarray(p[k], np.float64), requires_grad=True) for k in FIRE_KEYS]
    args[-1] = torch.tensor(3.5, dtype=torch.float64, requires_grad=True)  # no tie with i

    def bias(*a):
        return fb.fire_bias(*a, 6, 6, causal=False, dtype=torch.float64)

    assert torch.autograd.gradcheck(bias, tuple(args))


def test_sandwich_scores_pass_their_gradient_through():
    torch = require("torch")
    scores = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    out = fb.sandwich_bias(3, 4, dim=8, causal=False, scores=scores.clone())
    out.backward(torch.ones_like(out))
    assert torch.equal(scores.grad, torch.ones_like(scores))


def test_compiled_and_jitted_biases_are_the_eager_ones():
    torch = require("torch")
    jax = require("jax")
    r1, r2 = torch.tensor(R1), torch.tensor(R2)
    compiled = torch.compile(lambda a, b: fb.kerple_bias(a, b, 4, 6), fullgraph=True)
    assert torch.equal(compiled(r1, r2), fb.kerple_bias(r1, r2, 4, 6))
    p = fire_params(np.random.default_rng(22))
    w = [torch.tensor(np.asarray(p[k])) for k in FIRE_KEYS[:4]]
    fire = torch.compile(lambda *a: fb.fire_bias(*a, 0.3, 3.5, 5, 5), fullgraph=True)
    assert torch.equal(fire(*w), fb.fire_bias(*w, 0.3, 3.5, 5, 5))
    # (JAX without x64 holds the parameters in float32)
    jitted = jax.jit(lambda a, b: fb.kerple_bias(a, b, 4, 6))(R1, R2)
    want = fb.kerple_bias(R1.astype(np.float32), R2.astype(np.float32), 4, 6)
    assert_same_bits(np.asarray(jitted), want)


def test_jax_gradients_are_torchs():
    torch = require("torch")
    jax = require("jax")
    if hasattr(jax, "enable_x64"):  # a context (jax.experimental's in older JAX)
        x64 = jax.enable_x64
    else:
        from jax.experimental import enable_x64 as x64
    with x64(True):
        a, b = jax.numpy.asarray(R1, np.float64), jax.numpy.asarray(R2, np.float64)
        got = jax.grad(
            lambda a, b: (fb.kerple_bias(a, b, 4, 6, causal=False, dtype=np.float64) ** 2).sum(),
            argnums=(0, 1),
        )(a, b)
    r1 = torch.tensor(R1, dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor(R2, dtype=torch.float64, requires_grad=True)
    (fb.kerple_bias(r1, r2, 4, 6, causal=False, dtype=torch.float64) ** 2).sum().backward()
    np.testing.assert_allclose(np.asarray(got[0]), r1.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got[1]), r2.grad.numpy(), rtol=1e-12)


def test_jax_arrays_in_and_out():
    jnp = require("jax.numpy")
    p = fire_params(np.random.default_rng(18))
    args = {k: jnp.asarray(v) for k, v in p.items()}
    got = fb.fire_bias(**args, q_len=5)
    want = rf.fire_bias(**p, q_len=5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- work bounded by the arguments


def test_sandwich_dim_up_to_65536_and_refused_past_it_naming_dim():
    # each distance takes dim / 2 cosines whatever the result's size: 2**40
    # was accepted and did not return
    for dim in (2**16 + 2, 2**40, 2**63 - 2, np.uint64(2**64 - 2)):
        with pytest.raises(ValueError, match="dim must be <= 65536"):
            fb.sandwich_bias(2, 3, dim=dim)
    dim = 2**16  # the limit: the formula, in float64 NumPy
    got = fb.sandwich_bias(2, 3, dim=dim, causal=False, dtype=np.float64)
    w = 10000.0 ** (-2.0 * np.arange(1, dim // 2 + 1) / dim)
    d = np.subtract.outer(np.arange(3.0), np.arange(3.0))
    base = np.cos(d[..., None] * w).sum(-1) - dim // 2
    want = base[None] / (np.arange(1, 3.0) * 8 / 2)[:, None, None]
    np.testing.assert_allclose(got, want, rtol=0, atol=dim * 2.0**-52 * 8)


@pytest.mark.parametrize("width", [8, 4096])
def test_fire_rows_by_distance_take_tiles_the_width_does_not_shrink(monkeypatch, width):
    # the MLP one hidden unit at a time over a tile of distances: as many
    # tiles for 4096 hidden units as for 8 (the tiles shrank with the width,
    # and a wide MLP made many small ones in Python)
    p = {**fire_params(np.random.default_rng(9), heads=2, width=width), "threshold": 1e9}
    calls = []
    tile = fb.fire_tile
    monkeypatch.setattr(fb, "fire_tile", lambda x, *a: calls.append(x.size) or tile(x, *a))
    got = fb.fire_bias(**p, q_len=300, k_len=300, dtype="float64")
    assert calls == [300]  # one tile: the 300 distances >= 0 (causal)
    # the values in float64 NumPy (the MLP as torch's Linear), of each distance
    # i - j once (a pair's bias is its distance's: the threshold is never
    # reached), laid out by distance
    d = np.arange(300.0)
    x = np.log1p(0.3 * d) / (np.log1p(0.3 * 1e9) + 1e-6)
    hidden = np.maximum(x[:, None] * p["w1"][:, 0] + p["b1"], 0.0)
    by_distance = hidden @ p["w2"].T + p["b2"]  # (distance, head)
    i, j = np.indices((300, 300))
    want = np.moveaxis(by_distance[np.abs(i - j)], -1, 0)
    want[:, np.triu_indices(300, 1)[0], np.triu_indices(300, 1)[1]] = -np.inf
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * width)
