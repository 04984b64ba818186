"""The relative encodings inside attention: Transformer-XL / XLNet, TENER,
DeBERTa, Shaw et al. and TUPE (posenc.relative).

Each function is checked against its pure-NumPy twin in posenc.reference bit
for bit (one and two threads, every dtype, offsets, broadcasting), against
hand-derived values, and against its authors' formulas written here
independently from their code: TENER's ``_shift`` / ``_transpose_shift``
(pad and reshape), tensor2tensor's ``_generate_relative_positions_matrix``
and ``_relative_attention_inner``, and TUPE's fairseq encoder.  transformers'
XLNet and DeBERTa are the witnesses in tests/conformance.
"""

import math
import tracemalloc
import warnings

import numpy as np
import pytest
from special_bits import SPECIAL_BITS

import posenc
from posenc import _relative_engine as engine
from posenc import reference as ref
from posenc import relative as rel
from posenc._dtypes import narrow

DTYPES = ["float16", "float32", "float64"]


def same_bits(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(
        actual.view(f"u{actual.itemsize}"), expected.view(f"u{expected.itemsize}")
    )


def randn(rng, shape, dtype="float64"):
    """Normal values on a grid of 1/8 (|x| < 8): their products, and sums of
    up to 64 of them, are exact in float32, so the products BLAS makes for a
    block of rows have the twin's bits whatever order it sums in."""
    return (np.clip(np.round(rng.standard_normal(shape) * 8), -63, 63) / 8).astype(dtype)


def on_grid(table):
    """A table of values in [-1, 1] rounded to a grid of 1/64: with randn's
    queries, products and their sums over a head are exact in float32."""
    return np.round(table * 64) / 64


def noise(rng, shape, dtype="float64"):
    """Normal values with every bit: scores whose sums with a term round."""
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- Transformer-XL / XLNet


def test_xl_table_rows_are_the_sines_then_cosines_of_their_distance():
    table = posenc.xl_relative_table(3, 5, 8, dtype="float64")
    assert table.shape == (8, 8)  # distances 5 down to -2
    w = 10000.0 ** (-np.arange(4) * 2 / 8)
    for t, d in enumerate(range(5, -3, -1)):
        np.testing.assert_allclose(table[t], np.r_[np.sin(d * w), np.cos(d * w)], atol=1e-15)


def test_xl_uni_table_stops_at_distance_zero_and_bi_data_negates():
    uni = posenc.xl_relative_table(3, 5, 8, attn_type="uni", dtype="float64")
    assert uni.shape == (6, 8)
    np.testing.assert_array_equal(uni[-1], np.r_[np.zeros(4), np.ones(4)])
    both = posenc.xl_relative_table(3, 5, 8, bi_data=True, dtype="float64")
    assert both.shape == (2, 8, 8)
    np.testing.assert_array_equal(both[1, :, :4], -both[0, :, :4])
    np.testing.assert_array_equal(both[1, :, 4:], both[0, :, 4:])


def test_xl_clamp_len_repeats_the_clamped_rows():
    table = posenc.xl_relative_table(4, 6, 8, clamp_len=2, dtype="float64")
    np.testing.assert_array_equal(table[:5], np.broadcast_to(table[4], (5, 8)))  # 6..2 -> 2
    np.testing.assert_array_equal(table[-2:], np.broadcast_to(table[-2], (2, 8)))  # -2, -3 -> -2


@pytest.mark.parametrize("kw", [{}, {"attn_type": "uni"}, {"bi_data": True, "clamp_len": 3}])
def test_xl_table_equals_reference(kw):
    got = posenc.xl_relative_table(7, 19, 16, **kw)
    want = ref.xl_relative_table(7, 19, 16, **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=6e-8)


def test_xl_position_term_by_hand():
    # one head, head_dim 1: q_i = i + 1, r[t] = 10 ** t; the bi table of q=2, k=3
    # (rows t = 0..4 hold distances 3..-1).  Query 0 sits at 1: distances 1, 0, -1
    # to the keys, rows 2, 3, 4; query 1 at 2: distances 2, 1, 0, rows 1, 2, 3.
    q = np.array([[[1.0], [2.0]]])
    r = 10.0 ** np.arange(5)[None, :, None]
    got = posenc.xl_position_term(q, r)
    want = np.array([[[100, 1000, 10000], [2 * 10, 2 * 100, 2 * 1000]]])
    np.testing.assert_array_equal(got, want)
    # with v = 0.5: (q + v) . r
    got = posenc.xl_position_term(q, r, bias=[[0.5]])
    np.testing.assert_array_equal(got, (want / q[..., :1]) * (q[..., :1] + 0.5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "q_len, k_len, kw",
    [(5, 5, {}), (4, 11, {}), (1, 300, {}), (6, 9, {"q_offset": 1}), (7, 40, {"causal": True})],
)
def test_xl_position_term_equals_reference(threads, rng, dtype, q_len, k_len, kw):
    rows = k_len + (1 if kw.get("causal") else q_len) if "q_offset" not in kw else k_len + q_len + 4
    q = randn(rng, (2, 3, q_len, 8), dtype)
    r = randn(rng, (3, rows, 8), dtype)
    bias = randn(rng, (3, 8), dtype)
    got = posenc.xl_position_term(q, r, bias=bias, k_len=k_len, **kw)
    want = ref.xl_position_term(q, r, bias=bias, k_len=k_len, **kw)
    same_bits(got, want)
    scores = noise(rng, (2, 3, q_len, k_len), dtype)
    expected = ref.xl_position_term(q, r, bias=bias, k_len=k_len, scores=scores.copy(), **kw)
    assert posenc.xl_position_term(q, r, bias=bias, scores=scores, **kw) is scores
    same_bits(scores, expected)


XL_THREAD_BITS = """
import hashlib, sys
import numpy as np
import posenc
posenc.set_num_threads(int(sys.argv[1]))
rng = np.random.default_rng(7)
q = rng.standard_normal((1, 2, 768, 16)).astype(np.float32)
r = rng.standard_normal((2, 1536, 16)).astype(np.float32)
bias = rng.standard_normal((2, 16)).astype(np.float32)
scores = rng.standard_normal((1, 2, 768, 768)).astype(np.float32)
posenc.xl_position_term(q, r, bias=bias, scores=scores)
new = posenc.xl_position_term(q, r, bias=bias)
one = posenc.xl_position_term(q[..., :96, :], r[:, :192], bias=bias)  # one block
print(hashlib.sha256(scores.tobytes() + new.tobytes() + one.tobytes()).hexdigest())
"""


def test_xl_position_term_gives_the_same_bits_on_one_and_two_threads():
    # products made a block of rows at a time (768 queries: several blocks
    # per head; 96: one), gathered on posenc's 1 or 2 threads, values of
    # every bit;
    # BLAS's own threads fixed (OpenBLAS's products change bits with them)
    import child_process

    digests = [
        child_process.run(
            "-c",
            XL_THREAD_BITS,
            str(n),
            check=True,
            OMP_NUM_THREADS=str(n),
            OPENBLAS_NUM_THREADS="2",
        ).stdout.strip()
        for n in (1, 2)
    ]
    assert len(digests[0]) == 64 and digests[0] == digests[1]


def test_xl_position_term_causal_leaves_future_keys_alone(rng):
    q, r = noise(rng, (2, 4, 8)), noise(rng, (2, 7, 8))  # uni table of k_len 6
    scores = noise(rng, (2, 4, 6))
    before = scores.copy()
    posenc.xl_position_term(q, r, causal=True, scores=scores)
    qpos = 2 + np.arange(4)[:, None]
    future = np.arange(6)[None, :] > qpos
    np.testing.assert_array_equal(scores[:, future], before[:, future])
    assert (scores[:, ~future] != before[:, ~future]).all()


def test_xl_position_term_per_batch_tables_for_bi_data(rng):
    q, r = randn(rng, (2, 3, 4, 8)), randn(rng, (2, 3, 9, 8))  # one table per batch entry
    got = posenc.xl_position_term(q, r)
    for b in range(2):
        np.testing.assert_array_equal(got[b], posenc.xl_position_term(q[b], r[b]))


def test_xl_content_bias_is_u_dot_k_for_every_query(rng):
    k, u = randn(rng, (2, 3, 6, 4)), randn(rng, (3, 4))
    term = posenc.xl_content_bias(k, u)
    assert term.shape == (2, 3, 1, 6)
    np.testing.assert_allclose(term[..., 0, :], np.einsum("hd,bhkd->bhk", u, k), rtol=1e-14)
    scores = noise(rng, (2, 3, 5, 6))
    want = scores + term
    posenc.xl_content_bias(k, u, scores=scores)
    np.testing.assert_array_equal(scores, want)


# ---------------------------------------------------------------- TENER, against its code's shifts


def tener_embedding(num_embeddings, dim):
    """TENER's get_embedding, read from its code: positions (-num) // 2 ..
    num // 2 - 1, frequencies exp(-i ln(10000) / (half - 1)), sines then
    cosines; its origin_shift is num // 2 + 1."""
    half = dim // 2
    freq = np.exp(np.arange(half) * -(math.log(10000) / (half - 1)))
    pos = np.arange(-num_embeddings // 2, num_embeddings // 2)[:, None] * freq[None, :]
    return np.concatenate([np.sin(pos), np.cos(pos)], axis=1)


def tener_shift(bd):
    """TENER's _shift: pad a zero column, view as (2L + 1, L), drop the last
    row, view as (L, 2L), keep the last L columns."""
    *lead, n, two_n = bd.shape
    x = np.concatenate([bd, np.zeros((*lead, n, 1))], axis=-1).reshape(*lead, -1, n)
    return x[..., :-1, :].reshape(*lead, n, two_n)[..., n:]


def tener_transpose_shift(e):
    """TENER's _transpose_shift: pad, view as (2L + 1, L), rows 1, 3, 5, ...,
    transposed."""
    *lead, n, _ = e.shape
    x = np.concatenate([e, np.zeros((*lead, n, 1))], axis=-1).reshape(*lead, -1, n)
    return np.swapaxes(x[..., np.arange(n) * 2 + 1, :], -1, -2)


@pytest.mark.parametrize("scale", [False, True])
def test_tener_scores_equal_tener_code_semantics(rng, scale):
    batch, heads, length, d = 2, 3, 9, 8
    q, k = randn(rng, (batch, heads, length, d)), randn(rng, (batch, heads, length, d))
    u, v = randn(rng, (heads, d)), randn(rng, (heads, d))
    # TENER's forward: the module's 1200-position table, rows -length .. length - 1
    weights = tener_embedding(1201, d)  # init_size 1200 + 1 rows
    pos_embed = weights[np.arange(-length, length) + 1201 // 2 + 1]
    ac = (q + u[:, None]) @ np.swapaxes(k, -1, -2)
    b_ = q @ pos_embed.T
    d_ = (v @ pos_embed.T)[None, :, None]
    e_ = k @ pos_embed.T
    want = (ac + tener_shift(b_ + d_) + tener_transpose_shift(e_)) / (math.sqrt(d) if scale else 1)
    table = posenc.tener_relative_table(length, d, dtype="float64")
    np.testing.assert_allclose(table, pos_embed, rtol=0, atol=1e-14)
    got = posenc.tener_scores(q, k, table, u=u, v=v, scale=scale)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)
    got32 = posenc.tener_scores(
        q.astype("f4"), k.astype("f4"), table.astype("f4"), u=u, v=v, scale=scale
    )
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_tener_table_sines_flip_with_direction():
    table = posenc.tener_relative_table(6, 8, dtype="float64")
    for p in range(1, 6):
        np.testing.assert_array_equal(table[6 - p, :4], -table[6 + p, :4])
        np.testing.assert_array_equal(table[6 - p, 4:], table[6 + p, 4:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_tener_equals_reference(threads, rng, dtype):
    q, k = randn(rng, (2, 2, 33, 8), dtype), randn(rng, (2, 2, 33, 8), dtype)
    # more rows than needed, on a grid of 1/64: its products with the queries
    # are exact, whatever order BLAS sums them in
    table = on_grid(posenc.tener_relative_table(40, 8, dtype="float64")).astype(dtype)
    v = randn(rng, (2, 8), dtype)
    same_bits(
        posenc.tener_position_term(q, k, table, v=v), ref.tener_position_term(q, k, table, v=v)
    )
    same_bits(
        posenc.tener_position_term(q, k, table, key_term=False),
        ref.tener_position_term(q, k, table, key_term=False),
    )
    same_bits(
        posenc.tener_scores(q, k, table, u=v, v=v, scale=True),
        ref.tener_scores(q, k, table, u=v, v=v, scale=True),
    )


# ---------------------------------------------------------------- DeBERTa


def test_deberta_log_bucket_by_hand():
    # mid 4, max_position 16: |d| <= 4 stays; else 4 + ceil(ln(|d|/4) / ln(15/4) * 3)
    d = np.array([-20, -5, -4, -1, 0, 3, 4, 5, 6, 20, 100])
    want = np.array([-8, -5, -4, -1, 0, 3, 4, 5, 5, 8, 12])
    np.testing.assert_array_equal(posenc.deberta_log_bucket(d, 8, 16), want)
    np.testing.assert_array_equal(posenc.deberta_log_bucket(d, 8, 16, precision="float64"), want)


def test_deberta_relative_positions_are_query_minus_key():
    got = posenc.deberta_relative_positions(2, 4, q_offset=1)
    np.testing.assert_array_equal(got, [[1, 0, -1, -2], [2, 1, 0, -1]])
    np.testing.assert_array_equal(
        posenc.deberta_relative_positions(5, 7), -posenc.relative_positions(5, 7)
    )


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_deberta_buckets_equal_reference(precision):
    d = np.arange(-70000, 70001, 7)
    for size, top in [(256, 512), (32, 128), (10, 20)]:
        np.testing.assert_array_equal(
            posenc.deberta_log_bucket(d, size, top, precision=precision),
            ref.deberta_log_bucket(d, size, top, precision=precision),
        )


@pytest.mark.filterwarnings("error")
def test_deberta_float32_log_buckets_refused_where_their_logarithm_is_zero():
    # mid = 2**24: (max_position - 1) / mid = 1 + 2**-24 rounds to 1 in float32,
    # whose ln 0 would divide every bucket past mid (inf, then int64's least)
    with pytest.raises(ValueError, match="bucket_size 33554432 and max_position 16777218"):
        posenc.deberta_log_bucket([5, 2**24 + 1, 2**26], 2**25, 2**24 + 2)
    with pytest.raises(ValueError, match="bucket_size 33554432 and max_position 16777218"):
        posenc.deberta_relative_positions(
            2, bucket_size=2**25, max_position=2**24 + 2, q_offset=2**24 + 1
        )
    # distances up to mid are their own buckets: the logarithm is not needed
    d = np.array([-(2**24), -5, 0, 7, 2**24])
    np.testing.assert_array_equal(posenc.deberta_log_bucket(d, 2**25, 2**24 + 2), d)
    got = posenc.deberta_relative_positions(2, 3, bucket_size=2**25, max_position=2**24 + 2)
    np.testing.assert_array_equal(got, [[0, -1, -2], [1, 0, -1]])
    # in float64 the ratio is not 1; one more max_position (1 + 2**-23) in float32 neither
    d = np.array([5, 2**24 + 1, 2**26, -(2**40)])
    for top, precision in [(2**24 + 2, "float64"), (2**24 + 3, "float32")]:
        want = ref.deberta_log_bucket(d, 2**25, top, precision=precision)
        assert want.min() > -(2**62)
        np.testing.assert_array_equal(
            posenc.deberta_log_bucket(d, 2**25, top, precision=precision), want
        )


@pytest.mark.filterwarnings("error")
def test_deberta_float64_log_buckets_refused_past_int64():
    # mid = 2**30, ln((max_position - 1) / mid) = ln(1 + 2**-30): the bucket
    # ln(d / mid) / ln(1 + 2**-30) * (mid - 1) + mid passes 2**63 from d = 3200779275217
    last = 3200779275216
    d = np.array([last, -last, 5])
    want = ref.deberta_log_bucket(d, 2**31, 2**30 + 2, precision="float64")
    assert want[0] > 2**63 - 2**18
    np.testing.assert_array_equal(
        posenc.deberta_log_bucket(d, 2**31, 2**30 + 2, precision="float64"), want
    )
    for far in (last + 1, -(last + 1), 2**62):
        with pytest.raises(ValueError, match="max_position 1073741826: the float64 .* past int64"):
            posenc.deberta_log_bucket([5, far], 2**31, 2**30 + 2, precision="float64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "q_len, k_len, kw",
    [
        (12, 12, {"position_buckets": 4, "max_relative_positions": 10}),
        (7, 30, {"position_buckets": -1, "max_relative_positions": 6, "q_offset": 23}),
        (40, 40, {"position_buckets": 8, "max_relative_positions": 64}),
    ],
)
def test_deberta_attention_bias_equals_reference(threads, rng, dtype, q_len, k_len, kw):
    span = kw["position_buckets"] if kw["position_buckets"] > 0 else kw["max_relative_positions"]
    q, k = randn(rng, (2, 3, q_len, 8), dtype), randn(rng, (2, 3, k_len, 8), dtype)
    pk, pq = randn(rng, (3, 2 * span, 8), dtype), randn(rng, (3, 2 * span, 8), dtype)
    same_bits(
        posenc.deberta_attention_bias(q, k, pk, pq, **kw),
        ref.deberta_attention_bias(q, k, pk, pq, **kw),
    )
    same_bits(
        posenc.deberta_attention_bias(q, k, None, pq, **kw),
        ref.deberta_attention_bias(q, k, None, pq, **kw),
    )
    scores = noise(rng, (2, 3, q_len, k_len), dtype)
    want = ref.deberta_attention_bias(q, k, pk, None, scores=scores.copy(), **kw)
    posenc.deberta_attention_bias(q, k, pk, None, scores=scores, **kw)
    same_bits(scores, want)


def test_deberta_c2p_and_p2c_by_hand():
    # one head, head_dim 1, span 2 (no buckets): column c = clip(2 + (i - j), 0, 3)
    q = np.array([[[1.0], [2.0], [3.0]]])
    k = np.array([[[10.0], [20.0], [30.0]]])
    pk = np.array([[[1.0], [2.0], [3.0], [4.0]]])
    got = posenc.deberta_attention_bias(q, k, pk, None, max_relative_positions=2, scale_factor=1)
    c = np.clip(2 + np.arange(3)[:, None] - np.arange(3)[None, :], 0, 3)
    np.testing.assert_array_equal(got[0], q[0] * pk[0, c, 0])
    got = posenc.deberta_attention_bias(q, k, None, pk, max_relative_positions=2, scale_factor=1)
    np.testing.assert_array_equal(got[0], k[0, :, 0][None, :] * pk[0, c, 0])
    both = posenc.deberta_attention_bias(q, k, pk, pk, max_relative_positions=2)
    np.testing.assert_allclose(
        both[0], (q[0] * pk[0, c, 0] + k[0, :, 0][None, :] * pk[0, c, 0]) / math.sqrt(3), rtol=1e-15
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "q_len, k_len, kw",
    [
        (150, 203, {"position_buckets": 16, "max_relative_positions": 64}),
        (203, 150, {"position_buckets": 16, "max_relative_positions": 64, "q_offset": 20}),
        (67, 131, {"position_buckets": -1, "max_relative_positions": 40}),
        (131, 67, {"position_buckets": -1, "max_relative_positions": 40, "q_offset": 70}),
    ],
)
@pytest.mark.parametrize("budget", [None, 1 << 14, 1 << 8])
def test_deberta_c2p_and_p2c_in_one_pass_as_one_after_the_other(
    rng, monkeypatch, dtype, q_len, k_len, kw, budget
):
    # both terms added in one pass over the scores (a head per pass, or the
    # parts one at a time when a head's products exceed the budget) give
    # each score the bits of c2p added alone and then p2c: sizes past
    # several strips and blocks, partial ones at the edges
    if budget is not None:
        monkeypatch.setattr(engine, "_PAIR_BYTES", budget)
    span = kw["position_buckets"] if kw["position_buckets"] > 0 else kw["max_relative_positions"]
    q, k = randn(rng, (2, 3, q_len, 8), dtype), randn(rng, (2, 3, k_len, 8), dtype)
    pk, pq = randn(rng, (3, 2 * span, 8), dtype), randn(rng, (3, 2 * span, 8), dtype)
    scores = noise(rng, (2, 3, q_len, k_len), dtype)
    want = scores.copy()
    posenc.deberta_attention_bias(q, k, pk, None, scale_factor=3, scores=want, **kw)
    posenc.deberta_attention_bias(q, k, None, pq, scale_factor=3, scores=want, **kw)
    if kw["position_buckets"] < 0:  # the same written out: no buckets, clipped distances
        qpos = kw.get("q_offset", 0) + np.arange(q_len)
        c = np.clip(qpos[:, None] - np.arange(k_len)[None, :] + span, 0, 2 * span - 1)
        scale = np.sqrt(np.dtype(dtype).type(8) * np.dtype(dtype).type(3))
        c2p = np.take_along_axis(
            q @ np.swapaxes(pk, -1, -2), np.broadcast_to(c, q.shape[:-1] + (k_len,)), -1
        )
        p2c = np.take_along_axis(
            k @ np.swapaxes(pq, -1, -2), np.broadcast_to(c.T, k.shape[:-1] + (q_len,)), -1
        )
        by_hand = (scores + c2p / scale) + np.swapaxes(p2c, -1, -2) / scale
        same_bits(want, by_hand)
    assert posenc.deberta_attention_bias(q, k, pk, pq, scores=scores, **kw) is scores
    same_bits(scores, want)


def test_deberta_one_pass_gives_the_same_bits_on_every_path(on_every_path, rng, monkeypatch):
    # the fused kernel (both terms' products handed to one gather) on the
    # portable and vector paths, one thread and two, float32 and float64
    # scores, with buckets (runs of every kind) and without
    seen = []
    real = engine._core.rel_gather_add

    def spy(*args):
        seen.append(len(args) > 5)
        return real(*args)

    monkeypatch.setattr(engine._core, "rel_gather_add", spy)
    cases = []
    for dtype in ("float32", "float64"):
        for kw in (
            {"position_buckets": 16, "max_relative_positions": 64},
            {"position_buckets": -1, "max_relative_positions": 40, "q_offset": 9},
        ):
            span = 16 if kw["position_buckets"] > 0 else 40
            args = (
                noise(rng, (1, 2, 137, 8), dtype),
                noise(rng, (1, 2, 211, 8), dtype),
                noise(rng, (2, 2 * span, 8), dtype),
                noise(rng, (2, 2 * span, 8), dtype),
            )
            cases.append((args, kw, noise(rng, (1, 2, 137, 211), dtype)))

    def make():
        out = []
        for args, kw, base in cases:
            scores = base.copy()
            posenc.deberta_attention_bias(*args, scores=scores, **kw)
            out.append(scores)
        return out

    results = on_every_path(make)
    assert seen and all(seen)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            same_bits(b, a)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("walked", [False, True])
def test_a_group_of_products_is_divided_in_its_own_rows_only(dtype, walked):
    # the buffers of padded rows are reused by every group of heads; a group
    # smaller than the buffer divides its own rows (and the padding between
    # them) in one pass, never the rows a previous group left past its end
    dt = np.dtype(dtype)
    if walked:
        buf = engine._walked_products((4, 9, 13), dt, (-1, 20), 11)
    else:
        buf = engine._padded_rows((4, 9, 13), dt, np.empty)
    base = buf.base if buf.base.base is None else buf.base.base
    base[...] = 7.0
    left = np.arange(2 * 9 * 3, dtype=dt).reshape(2, 9, 3)
    right = np.arange(2 * 13 * 3, dtype=dt).reshape(2, 13, 3) / 3
    got = engine._block_products(left, right, dt.type(2), dt, buf[:2])
    np.testing.assert_array_equal(got, (left @ np.swapaxes(right, -1, -2)) / dt.type(2))
    np.testing.assert_array_equal(buf[2:], 7.0)  # the rows past the group: untouched
    assert engine._span(buf[:2]).size < base.size
    # a view of bytes is divided where it is, not through its base's elements
    raw = np.zeros(64, np.uint8)
    x = raw.view(dt)[1:3]
    assert engine._span(x) is x
    engine._block_products(
        np.ones((1, 2, 1), dt), np.ones((1, 1, 1), dt), dt.type(2), dt, x[None, :, None]
    )
    np.testing.assert_array_equal(x, 0.5)


# ---------------------------------------------------------------- Shaw et al. (tensor2tensor)


def t2t_relative_positions_matrix(length_q, length_k, max_relative_position):
    """_generate_relative_positions_matrix without the cache: the queries are
    the last length_q of the keys."""
    range_k = np.arange(length_k)
    range_q = range_k[-length_q:]
    distance = range_k[None, :] - range_q[:, None]
    return np.clip(distance, -max_relative_position, max_relative_position) + max_relative_position


def t2t_relative_attention_inner(x, y, z, transpose):
    """_relative_attention_inner: x (b, h, L, .), y (b, h, m, .), z (L, m, .)."""
    xy = x @ (np.swapaxes(y, -1, -2) if transpose else y)
    b, h, length = x.shape[:3]
    x_t = np.transpose(x, (2, 0, 1, 3)).reshape(length, b * h, -1)
    x_tz = x_t @ (np.swapaxes(z, -1, -2) if transpose else z)
    return xy + np.transpose(x_tz.reshape(length, b, h, -1), (1, 2, 0, 3))


@pytest.mark.parametrize("q_len, k_len, clip", [(6, 6, 2), (3, 9, 4), (1, 12, 3), (8, 8, 20)])
def test_shaw_terms_equal_tensor2tensor(rng, q_len, k_len, clip):
    b, h, d = 2, 3, 5
    q, k, values = (
        randn(rng, (b, h, q_len, d)),
        randn(rng, (b, h, k_len, d)),
        randn(rng, (b, h, k_len, d)),
    )
    a_k, a_v = randn(rng, (2 * clip + 1, d)), randn(rng, (2 * clip + 1, d))
    idx = t2t_relative_positions_matrix(q_len, k_len, clip)
    logits = t2t_relative_attention_inner(q, k, a_k[idx], True)
    got = q @ np.swapaxes(k, -1, -2)
    posenc.shaw_key_term(q, a_k, max_distance=clip, scores=got)
    np.testing.assert_allclose(got, logits, rtol=1e-13, atol=1e-13)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    out = t2t_relative_attention_inner(w, values, a_v[idx], False)
    mine = w @ values + posenc.shaw_value_term(w, a_v, max_distance=clip)
    np.testing.assert_allclose(mine, out, rtol=1e-13, atol=1e-14)
    w32 = w.astype(np.float32)
    got32 = posenc.shaw_value_term(w32, a_v.astype(np.float32), max_distance=clip)
    np.testing.assert_allclose(got32, out - w @ values, rtol=1e-5, atol=2e-6)


def test_shaw_key_term_by_hand():
    # q_len 2 of k_len 4 (queries at 2 and 3), clip 1, one head, head_dim 1
    q = np.array([[[1.0], [10.0]]])
    a_k = np.array([[100.0], [200.0], [300.0]])  # distances -1, 0, 1
    got = posenc.shaw_key_term(q, a_k, max_distance=1, k_len=4)
    want = np.array([[[100, 100, 200, 300], [1000, 1000, 1000, 2000]]])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shaw_equals_reference(threads, rng, dtype):
    q = randn(rng, (2, 4, 17, 8), dtype)
    a_k = randn(rng, (4, 7, 8), dtype)  # a table per head
    same_bits(
        posenc.shaw_key_term(q, a_k, max_distance=3, k_len=40),
        ref.shaw_key_term(q, a_k, max_distance=3, k_len=40),
    )
    w = rng.random((2, 4, 17, 40)).astype(dtype)
    a_v = randn(rng, (7, 8), dtype)
    got = posenc.shaw_value_term(w, a_v, max_distance=3, q_offset=5)
    want = ref.shaw_value_term(w, a_v, max_distance=3, q_offset=5)
    assert got.dtype == want.dtype
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-14}[dtype]
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), rtol=tol, atol=tol * 8)


# ---------------------------------------------------------------- TUPE, against its fairseq encoder


def tupe_bucket(relative_position, num_buckets, max_distance):
    """TUPE's relative_position_bucket (T5's), float32 logarithms as its code."""
    n = -relative_position
    num_buckets //= 2
    ret = (n < 0).astype(np.int64) * num_buckets
    n = np.abs(n)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 0 is a small distance
        large = max_exact + (
            np.log(n.astype(np.float32) / max_exact)
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(num_buckets - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return ret + np.where(n < max_exact, n, large)


def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def test_tupe_bias_equals_tupe_encoder(rng):
    n, dim, heads, bins, max_rel = 40, 24, 3, 32, 128
    table = randn(rng, (n + 7, dim))  # TUPE's pos embedding (max_seq_len + 1 rows)
    gamma, beta = 1 + 0.1 * randn(rng, dim), 0.1 * randn(rng, dim)
    w, bias = randn(rng, (2 * dim, dim)) * 0.2, randn(rng, 2 * dim) * 0.1  # pos_proj
    rel_weight = randn(rng, (bins + 1, heads))  # relative_attention_bias
    # the encoder's forward
    weight = layer_norm(table[: n + 1], gamma, beta)
    proj = (weight @ w.T + bias).reshape(n + 1, 2, heads, -1).transpose(1, 2, 0, 3)
    pos_q, pos_k = proj[0], proj[1]
    scaling = float(dim / heads * 2) ** -0.5
    abs_bias = (pos_q * scaling) @ np.swapaxes(pos_k, 1, 2)
    cls_2_other, other_2_cls = abs_bias[:, 0, 0].copy(), abs_bias[:, 1, 1].copy()
    abs_bias = abs_bias[:, 1:, 1:].copy()
    abs_bias[:, :, 0] = other_2_cls[:, None]
    abs_bias[:, 0, :] = cls_2_other[:, None]
    ctx, mem = np.arange(n)[:, None], np.arange(n)[None, :]
    bucket = tupe_bucket(mem - ctx, bins, max_rel)
    bucket[:, 0] = bins
    bucket[0, :] = bins // 2
    want = abs_bias + np.transpose(rel_weight[bucket], (2, 0, 1))
    got = posenc.tupe_bias(pos_q, pos_k, rel_table=rel_weight, max_distance=max_rel)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    got32 = posenc.tupe_bias(
        pos_q.astype("f4"), pos_k.astype("f4"), rel_table=rel_weight.astype("f4")
    )
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-5)
    # added into the scores of every layer, once computed
    scores = noise(rng, (2, heads, n, n))
    expected = scores + want
    posenc.tupe_bias(pos_q, pos_k, rel_table=rel_weight, scores=scores)
    np.testing.assert_allclose(scores, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("untie", [True, False])
def test_tupe_equals_reference(rng, untie):
    pq, pk = randn(rng, (4, 21, 16), "f4"), randn(rng, (4, 21, 16), "f4")
    table = randn(rng, (33 if untie else 32, 4), "f4")
    same_bits(
        posenc.tupe_bias(pq, pk, rel_table=table, untie_cls=untie),
        ref.tupe_bias(pq, pk, rel_table=table, untie_cls=untie),
    )
    same_bits(posenc.tupe_bias(pq, pk, untie_cls=untie), ref.tupe_bias(pq, pk, untie_cls=untie))


# ---------------------------------------------------------------- layouts, dtypes, bad input


@pytest.mark.parametrize("dtype", DTYPES)
def test_any_scores_layout_gives_the_contiguous_result(rng, dtype):
    q, r = randn(rng, (2, 3, 5, 8), dtype), randn(rng, (3, 12, 8), dtype)
    base = randn(rng, (2, 3, 5, 7), dtype)
    want = posenc.xl_position_term(q, r, scores=base.copy())
    layouts = [
        np.asfortranarray(base),
        base.astype(base.dtype.newbyteorder(">")),
        np.swapaxes(np.swapaxes(base, 0, 1).copy(), 0, 1),
    ]
    big = np.zeros((2, 3, 5, 14), dtype)
    big[..., ::2] = base
    layouts.append(big[..., ::2])
    for scores in layouts:
        posenc.xl_position_term(q, r, scores=scores)
        np.testing.assert_array_equal(np.asarray(scores, dtype), want)
    np.testing.assert_array_equal(big[..., 1::2], 0)


def _relative_calls(rng, dtype):
    """(name, call, inputs) for every relative function that reads float
    arrays: call(**inputs) gives its result (or the scores it adds into)."""
    h, d = 2, 8

    def x(*shape):
        return noise(rng, shape, dtype)

    t = posenc.tener_relative_table(6, d, dtype=dtype)
    return [
        (
            "xl_position_term",
            lambda q, r, bias: posenc.xl_position_term(q, r, bias=bias),
            {"q": x(2, h, 4, d), "r": x(h, 11, d), "bias": x(h, d)},
        ),
        (
            "xl_position_term scores",
            lambda q, r, scores: posenc.xl_position_term(q, r, scores=scores),
            {"q": x(2, h, 4, d), "r": x(h, 11, d), "scores": x(2, h, 4, 7)},
        ),
        ("xl_content_bias", posenc.xl_content_bias, {"k": x(2, h, 5, d), "bias": x(h, d)}),
        (
            "xl_content_bias scores",
            posenc.xl_content_bias,
            {"k": x(2, h, 5, d), "bias": x(h, d), "scores": x(2, h, 3, 5)},
        ),
        (
            "tener_position_term",
            posenc.tener_position_term,
            {"q": x(2, h, 6, d), "k": x(2, h, 6, d), "table": t, "v": x(h, d)},
        ),
        (
            "tener_position_term scores",
            posenc.tener_position_term,
            {"q": x(2, h, 6, d), "k": x(2, h, 6, d), "table": t, "scores": x(2, h, 6, 6)},
        ),
        (
            "tener_scores",
            lambda q, k, table, u, v: posenc.tener_scores(q, k, table, u=u, v=v, scale=True),
            {"q": x(2, h, 6, d), "k": x(2, h, 6, d), "table": t, "u": x(h, d), "v": x(h, d)},
        ),
        (
            "deberta_attention_bias",
            lambda q, k, pos_key, pos_query, scores: posenc.deberta_attention_bias(
                q,
                k,
                pos_key,
                pos_query,
                position_buckets=8,
                max_relative_positions=16,
                scores=scores,
            ),
            {
                "q": x(2, h, 5, d),
                "k": x(2, h, 7, d),
                "pos_key": x(h, 16, d),
                "pos_query": x(h, 16, d),
                "scores": x(2, h, 5, 7),
            },
        ),
        (
            "shaw_key_term",
            lambda q, rel_keys, scores: posenc.shaw_key_term(
                q, rel_keys, max_distance=2, scores=scores
            ),
            {"q": x(2, h, 4, d), "rel_keys": x(5, d), "scores": x(2, h, 4, 6)},
        ),
        (
            "shaw_value_term",
            lambda weights, rel_values: posenc.shaw_value_term(weights, rel_values, max_distance=2),
            {"weights": x(2, h, 4, 6), "rel_values": x(h, 5, d)},
        ),
        (
            "tupe_bias",
            lambda pos_q, pos_k, rel_table, scores: posenc.tupe_bias(
                pos_q, pos_k, rel_table=rel_table, max_distance=8, scores=scores
            ),
            {"pos_q": x(h, 7, d), "pos_k": x(h, 7, d), "rel_table": x(9, h), "scores": x(h, 6, 6)},
        ),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_byte_swapped_inputs_give_the_native_bits_and_dtype(rng, dtype):
    # a byte-swapped float64 (">f8" here) is float64: its products are made in
    # float64, as the native array's are, whichever of the inputs it is
    for name, call, inputs in _relative_calls(rng, dtype):
        want = call(**{k: a.copy() for k, a in inputs.items()})
        assert want.dtype.isnative
        swaps = [[k] for k in inputs] + [list(inputs)]
        for swapped in swaps:
            args = {k: a.copy() for k, a in inputs.items()}
            for k in swapped:
                args[k] = args[k].astype(args[k].dtype.newbyteorder("S"))
            got = call(**args)
            if "scores" in args:  # the scores themselves, in their own byte order
                assert got is args["scores"]
                got = got.astype(got.dtype.newbyteorder("="))
            try:
                same_bits(got, want)
            except AssertionError as exc:
                raise AssertionError(f"{name} with {swapped} byte-swapped: {exc}") from None


def test_float16_scores_get_the_term_rounded_to_float16_then_added(rng):
    q, r = randn(rng, (3, 5, 8), "f2"), randn(rng, (3, 12, 8), "f2")
    scores = noise(rng, (3, 5, 7), "f2")
    term = posenc.xl_position_term(q, r, k_len=7)
    assert term.dtype == np.float16
    want = scores + term  # NumPy's float16 add: the float32 sum rounded once
    posenc.xl_position_term(q, r, scores=scores)
    np.testing.assert_array_equal(scores, want)


def test_bad_input_is_refused_naming_the_argument(rng):
    q, r = randn(rng, (2, 4, 8)), randn(rng, (2, 10, 8))
    scores = noise(rng, (2, 4, 6))
    before = scores.copy()
    scores32 = scores.astype(np.float32)  # float32 scores: a float32 term
    cases = [
        (lambda: posenc.xl_position_term(q.astype(int), r), TypeError, "q"),
        (lambda: posenc.xl_position_term(q, r[..., :5]), ValueError, "r must have 8 columns"),
        (lambda: posenc.xl_position_term(q, r, bias=np.ones((3, 8))), ValueError, "bias"),
        (lambda: posenc.xl_position_term(q, r[:, :6], scores=scores), ValueError, "r has 6 rows"),
        (lambda: posenc.xl_position_term(q, r, scores=np.zeros((3, 4, 6))), ValueError, "scores"),
        (lambda: posenc.xl_position_term(q[None], r, scores=scores), ValueError, "scores"),
        (lambda: posenc.xl_position_term(q, r, scores=scores.astype(int)), TypeError, "scores"),
        (lambda: posenc.xl_position_term(q, r, scores=[[1.0]]), TypeError, "scores"),
        (lambda: posenc.xl_position_term(q, r, causal=1), TypeError, "causal"),
        (lambda: posenc.xl_relative_table(3, 4, 7), ValueError, "dim"),
        (lambda: posenc.xl_relative_table(3, 4, 8, attn_type="both"), ValueError, "attn_type"),
        (lambda: posenc.deberta_log_bucket([1.5], 8, 16), TypeError, "relative_pos"),
        (lambda: posenc.deberta_log_bucket([1], 8, 4), ValueError, "max_position"),
        (lambda: posenc.deberta_log_bucket([1], 8, 16, precision="half"), ValueError, "precision"),
        (lambda: posenc.deberta_log_bucket([1], 8, -1), ValueError, "max_position must be >= 1"),
        (
            lambda: posenc.deberta_relative_positions(3, bucket_size=8, max_position=-1),
            ValueError,
            "max_position must be >= 1 with bucket_size > 0, got -1; a DeBERTa config's",
        ),
        (
            lambda: posenc.deberta_attention_bias(
                q, q, r, position_buckets=4, max_relative_positions=-1
            ),
            ValueError,
            "max_relative_positions must be >= 1 with position_buckets > 0.*max_position_emb",
        ),
        (
            lambda: posenc.deberta_attention_bias(q, q, r, max_relative_positions=0),
            ValueError,
            "max_relative_positions must be >= 1, got 0; a DeBERTa config's",
        ),
        (
            lambda: posenc.deberta_attention_bias(q, q, max_relative_positions=4),
            ValueError,
            "pos_key",
        ),
        (
            lambda: posenc.deberta_attention_bias(q, q, r, max_relative_positions=4),
            ValueError,
            "pos_key must have 8 rows",
        ),
        (
            lambda: posenc.deberta_attention_bias(
                q, scores[..., None], r, max_relative_positions=5, scores=scores
            ),
            ValueError,
            "k must have",
        ),
        (  # a scale of float32's inf or 0, which would make the terms 0 or inf
            lambda: posenc.deberta_attention_bias(
                q.astype("f4"),
                q[:, :1].repeat(6, 1).astype("f4"),
                r.astype("f4"),
                max_relative_positions=5,
                scale_factor=1e300,
                scores=scores32,
            ),
            ValueError,
            r"scale_factor 1e\+300 gives a scale .* inf in float32",
        ),
        (
            lambda: posenc.deberta_attention_bias(
                q.astype("f4"),
                q[:, :1].repeat(6, 1).astype("f4"),
                None,
                r.astype("f4"),
                max_relative_positions=5,
                scale_factor=1e-300,
                scores=scores32,
            ),
            ValueError,
            "scale_factor 1e-300 gives a scale .* 0.0 in float32",
        ),
        (lambda: posenc.shaw_key_term(q, r, max_distance=2), ValueError, "rel_keys"),
        (lambda: posenc.shaw_key_term(q, r[0, :5], max_distance=-1), ValueError, "max_distance"),
        (
            lambda: posenc.shaw_value_term(scores, r[0, :5], max_distance=1),
            ValueError,
            "rel_values",
        ),
        (lambda: posenc.tener_relative_table(4, 2), ValueError, "dim"),
        (lambda: posenc.tener_position_term(q, q, r[0, :6]), ValueError, "table"),
        (lambda: posenc.tener_position_term(q, q[:, :3], r[0]), ValueError, "k must have"),
        (lambda: posenc.tupe_bias(q, r), ValueError, "pos_q and pos_k"),
        (lambda: posenc.xl_content_bias(q, None), TypeError, "bias must be an array"),
        (lambda: posenc.tupe_bias(q, q, rel_table=np.ones((5, 3))), ValueError, "rel_table"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind, match=words):
            call()
            pytest.fail(f"no error for the case about {words!r}")
    np.testing.assert_array_equal(scores, before)
    np.testing.assert_array_equal(scores32, before.astype(np.float32))
    readonly = scores.copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        posenc.xl_position_term(q, r, scores=readonly)


def _sized_calls(rng, B=2, H=2, Q=3, K=4, D=8):
    """{name: (axes, call)}: call(module) runs the function of that name in
    posenc or posenc.reference on inputs of batch B, heads H, queries Q, keys
    K, head dim D; `axes` are the sizes it has."""

    def x(*shape):
        return randn(rng, shape)

    L = Q
    table, rel_keys = x(10, D), x(5, D)
    return {
        "xl_position_term": (
            "BHQKD",
            lambda m: m.xl_position_term(x(B, H, Q, D), x(H, Q + K, D), bias=x(H, D), k_len=K),
        ),
        "xl_position_term causal": (
            "BHQKD",
            lambda m: m.xl_position_term(
                x(B, H, Q, D), x(H, K + 1, D), k_len=K, causal=True, scores=noise(rng, (B, H, Q, K))
            ),
        ),
        "xl_position_term no rows": (  # r without rows: no queries, no distances
            "BHKD",
            lambda m: m.xl_position_term(x(B, H, 0, D), x(H, 0, D), k_len=K, q_offset=0),
        ),
        "xl_content_bias": ("BHKD", lambda m: m.xl_content_bias(x(B, H, K, D), x(H, D))),
        "tener_position_term": (
            "BHQD",
            lambda m: m.tener_position_term(x(B, H, L, D), x(B, H, L, D), table, v=x(H, D)),
        ),
        "tener_position_term no rows": (
            "BHD",
            lambda m: m.tener_position_term(x(B, H, 0, D), x(B, H, 0, D), table[:0]),
        ),
        "tener_scores": (
            "BHQD",
            lambda m: m.tener_scores(
                x(B, H, L, D), x(B, H, L, D), table, u=x(H, D), v=x(H, D), scale=True
            ),
        ),
        "deberta_attention_bias": (
            "BHQKD",
            lambda m: m.deberta_attention_bias(
                x(B, H, Q, D),
                x(B, H, K, D),
                x(H, 16, D),
                x(H, 16, D),
                position_buckets=8,
                max_relative_positions=16,
            ),
        ),
        "shaw_key_term": (
            "BHQKD",
            lambda m: m.shaw_key_term(
                x(B, H, Q, D), rel_keys, max_distance=2, scores=noise(rng, (B, H, Q, K))
            ),
        ),
        "shaw_value_term": (
            "BHQKD",
            lambda m: m.shaw_value_term(x(B, H, Q, K), x(H, 5, D), max_distance=2),
        ),
        "tupe_bias": (
            "HQD",
            lambda m: m.tupe_bias(
                x(H, Q + 1, D), x(H, Q + 1, D), rel_table=x(9, H), max_distance=8
            ),
        ),
        "tupe_bias tied": (
            "HQD",
            lambda m: m.tupe_bias(x(H, Q, D), x(H, Q, D), untie_cls=False, scores=x(H, Q, Q)),
        ),
    }


_ZERO_AXES = [
    (name, axis)
    for name, (axes, _) in _sized_calls(np.random.default_rng(0)).items()
    for axis in axes
]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("name, axis", _ZERO_AXES)
def test_a_zero_length_axis_gives_the_twins_empty_or_zero_result(name, axis):
    # an empty batch, heads, queries or keys: an empty result; an empty head
    # dim: sums of no products, 0 (the scale of none is not 0 / 0), and what
    # is not a product (the scores, TUPE's relative bias) as it is
    results = []
    for module in (posenc, ref):
        rng = np.random.default_rng(7)  # the same inputs for both
        _, call = _sized_calls(rng, **{axis: 0})[name]
        results.append(call(module))
    got, want = results
    same_bits(got, want)
    products_alone = ["xl_position_term", "xl_content_bias", "tener_position_term"]
    products_alone += ["tener_scores", "deberta_attention_bias"]
    if axis == "D" and name in products_alone:
        assert got.size > 0
        np.testing.assert_array_equal(got, 0)


def test_sizes_are_checked_before_anything_of_their_size_is_made():
    q, r = np.ones((1, 2, 4, 8)), np.ones((2, 9, 8))
    too_large = "result: an array of shape .* would not fit in"
    for call in [
        lambda: posenc.xl_relative_table(2**62, dim=8),  # was an empty (0, 8)
        lambda: posenc.xl_relative_table(2**62, dim=8, bi_data=True),
        lambda: posenc.xl_relative_table(3, 2**62, dim=8, attn_type="uni"),
        lambda: posenc.xl_position_term(q, r, k_len=2**63),
        lambda: posenc.shaw_key_term(q, r[0, :5], max_distance=2, k_len=2**63),
        lambda: posenc.deberta_relative_positions(2**31, 2**31),
        # empty inputs whose results would be too large
        lambda: posenc.tupe_bias(np.ones((2**20, 2**21, 0)), np.ones((2**20, 2**21, 0))),
        lambda: posenc.tener_scores(
            np.ones((2**20, 1, 2**21, 0)), np.ones((1, 2**21, 0)), np.ones((2**22, 0))
        ),
    ]:
        with pytest.raises(ValueError, match=too_large):
            call()
    # the rows of r against the distances k_len asks for, from the sizes
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="r has 9 rows"):
            posenc.xl_position_term(q, r, k_len=2**22)
        with pytest.raises(ValueError, match="r has no rows"):
            posenc.xl_position_term(q, r[:, :0], k_len=2**22, causal=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    # an empty result of a declared length: nothing of that length made
    got = posenc.xl_position_term(q[:, :, :0], r, k_len=2**40)
    assert got.shape == (1, 2, 0, 2**40)
    got = posenc.shaw_key_term(q[:0], r[0, :5], max_distance=2, k_len=2**40, q_offset=0)
    assert got.shape == (0, 2, 4, 2**40)


def test_inputs_are_left_as_they_were(rng):
    q, k = randn(rng, (2, 9, 8)), randn(rng, (2, 9, 8))
    table = posenc.tener_relative_table(9, 8, dtype="float64")
    copies = [x.copy() for x in (q, k, table)]
    posenc.tener_scores(q, k, table, u=np.ones((2, 8)), v=np.ones((2, 8)))
    for x, c in zip((q, k, table), copies):
        np.testing.assert_array_equal(x, c)


def test_relative_functions_are_exported_and_wrapped_for_torch_and_jax():
    # every public function defined in posenc.relative, found in the module
    names = [
        name
        for name, obj in vars(rel).items()
        if not name.startswith("_")
        and callable(obj)
        and getattr(obj, "__module__", None) == "posenc.relative"
    ]
    assert len(names) == 12 and "tupe_bias" in names and "xl_relative_table" in names
    for name in names:
        fn = getattr(posenc, name)
        assert name in posenc.__all__ and fn is getattr(rel, name)
        assert hasattr(fn, "__wrapped_numpy__")


# ---------------------------------------------------------------- the gather kernel itself


def numpy_gather(scores, products, index, by_key):
    """scores[b, h, i, j] + products[b, h, i or j, index[q - 1 - i + j]],
    left as it was where the index is < 0: NumPy's own indexing and add (of
    float16 or ml_dtypes' bfloat16 for those scores: the product rounded to
    the scores' type, the two added in float32 and rounded once)."""
    q, k = scores.shape[-2:]
    t = q - 1 - np.arange(q)[:, None] + np.arange(k)[None, :]
    col = index[t]
    rows = np.broadcast_to(np.arange(k)[None, :] if by_key else np.arange(q)[:, None], (q, k))
    gathered = products[:, :, rows, np.maximum(col, 0)].astype(scores.dtype)
    return np.where(col >= 0, scores + gathered, scores)


def _gather_maps(q_len, k_len):
    """(map, width) pairs, each a kind of run the kernels treat their own way:
    DeBERTa's log buckets (short runs of slope 0 and -1 between a shift and
    clipped ends), a clipped reversed shift, entries < 0 (left alone) in some
    blocks only, Transformer-XL's shift (one run of slope 1) and TENER's key
    term (one of slope -1) with their tables' widths, a staircase of runs of
    slope 0 (many columns, each held for 24 distances: blocks of one column
    that the vector path by key reads from a copy of two columns at most),
    and an arbitrary map (columns far apart, entries < 0 here and there)."""
    n = q_len + k_len - 1
    t = np.arange(n) - (q_len - 1)
    arbitrary = np.random.default_rng(n).integers(-1, 40, n)
    maps = [
        (np.clip(posenc.deberta_log_bucket(-t, 16, 64) + 16, 0, 31), 32),
        (np.clip(t + 20, 0, 39)[::-1].copy(), 40),
        (np.where((t > 30) & (t < 90), -1, np.abs(t) % 40), 40),
        (np.arange(1, n + 1), n + 1),
        (n - np.arange(n), n + 1),
        (np.clip((t + 200) // 24, 0, 39), 40),
        (arbitrary, 40),
    ]
    return [(m.astype(np.int64), w) for m, w in maps]


def _bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("by_key", [False, True])
@pytest.mark.parametrize("q_len, k_len", [(150, 200), (200, 70), (64, 128), (67, 131), (9, 7)])
def test_gather_kernel_equals_numpy_across_tiles(simd, threads, rng, dtype, by_key, q_len, k_len):
    # several tiles and blocks of 8 x 8, partial ones at the edges (odd
    # lengths), every kind of run, on both paths: each score gets NumPy's
    # one add of its product
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    pdt = np.float64 if dtype == "float64" else np.float32
    rows = k_len if by_key else q_len
    for index, width in _gather_maps(q_len, k_len):
        products = randn(rng, (2, 3, rows, width), pdt)
        scores = noise(rng, (2, 3, q_len, k_len), np.float32).astype(sdt)
        want = numpy_gather(scores, products, index, by_key)
        rel._core.rel_gather_add(
            products,
            index,
            scores.view(f"u{sdt.itemsize}") if dtype == "bfloat16" else scores,
            by_key,
        )
        same_bits(scores, want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gather_kernel_gives_the_same_bits_on_every_path(on_every_path, dtype):
    # the vector path against the portable one (and one thread against two)
    # on sizes past several strips of blocks, for each kind of map; the
    # scores hold -0.0, infinities and NaNs, which no path may disturb
    # where the map leaves them alone; in bfloat16, NaNs of several
    # payloads (quiet and signalling) among the scores and the products,
    # each kept a NaN with its sign and top payload bits, the same on
    # every path
    q_len, k_len = 203, 261
    rng = np.random.default_rng(5)
    base = rng.standard_normal((1, 2, q_len, k_len)).astype(np.float32)
    base[0, 0, ::7, ::5] = -0.0
    base[0, 1, 3, :9] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e38, -1e38, 1e-45, -1e-45]
    if dtype == "bfloat16":
        base = base.astype(_bfloat16()).view(np.uint16)
        base[0, 1, 5, :4] = [0x7FC1, 0xFF81, 0x7F80, 0xFFA5]
    cases = []
    for index, width in _gather_maps(q_len, k_len):
        for by_key in (False, True):
            products = rng.standard_normal((1, 2, k_len if by_key else q_len, width))
            products = products.astype(np.float32)
            if dtype == "bfloat16":
                words = products.view(np.uint32)
                words[0, 0, 1, :4] = [0x7F800001, 0xFFC12345, 0x7FBFFFFF, 0xFF800000]
                products[0, 1, 2, :3] = [3.4e38, -3.4e38, 1e-40]  # to infinities, subnormal
            cases.append((products, index, by_key))

    _gathered_on_every_path(on_every_path, base, cases)


def _gathered_on_every_path(
    on_every_path, base, cases, kernel_view=lambda scores: scores, apart=lambda case: False
):
    """Each case (products, index, by_key) gathered into a copy of `base`
    (handed to the kernel as kernel_view gives it) on every path and thread
    count: the results of each, which give the first's bits but where
    apart(case) is True (those left to the caller)."""

    def make():
        out = []
        for products, index, by_key in cases:
            scores = base.copy()
            rel._core.rel_gather_add(products, index, kernel_view(scores), by_key)
            out.append(scores)
        return out

    results = on_every_path(make)
    for other in results[1:]:
        for case, a, b in zip(cases, results[0], other):
            keep = ~np.broadcast_to(apart(case), a.shape)
            same_bits(b[keep], a[keep])
    return results


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("by_key", [False, True])
def test_gather_keeps_each_nan_on_every_path(on_every_path, dtype, by_key):
    # infinities, NaNs of several payloads and ties of the rounding at every
    # lane of a vector of sixteen (bfloat16 rows by query take sixteen
    # scores at a time, in two halves of eight: 0-3 and 8-11, 4-7 and
    # 12-15), among the scores and the products: a NaN product into a score
    # that is a number comes out as its NaN in the scores' type (made quiet),
    # a NaN score with a product that is a number as that NaN made quiet,
    # the same bits on every path and thread count, and elsewhere the bits
    # of NumPy's add (numpy_gather); where the two are NaN, a NaN on every
    # path (which of the two is the compiler's order of the operands)
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    words = np.dtype(f"u{sdt.itemsize}")
    pdt = np.float64 if dtype == "float64" else np.float32
    special, quiet = SPECIAL_BITS[dtype]
    q_len, k_len = 32, 64
    rng = np.random.default_rng(16)
    base = rng.standard_normal((1, 1, q_len, k_len)).astype(sdt).view(words)
    for i in range(q_len):
        for block in range(k_len // 16):
            base[0, 0, i, 16 * block + (i + 5 * block) % 16] = special[(i + block) % len(special)]
    cases = []
    for index, width in _gather_maps(q_len, k_len):
        products = rng.standard_normal((1, 1, k_len if by_key else q_len, width)).astype(pdt)
        flat = products.reshape(-1)
        ties = [1 + 2.0**-8, -(1 + 3 * 2.0**-8), 1 + 2.0**-11, 2.0**-130]  # bfloat16, float16
        picks = np.array(ties + [3.4e38, -3.4e38, np.inf, np.nan], pdt)
        at = rng.choice(flat.size, flat.size // 8, replace=False)
        flat[at] = picks[np.arange(at.size) % picks.size]
        nan = 0xFFC12345 if pdt == np.float32 else 0xFFF8123456789ABC
        flat.view(f"u{flat.itemsize}")[at[::13]] = nan  # a NaN with a payload
        cases.append((products, index, by_key))

    t = q_len - 1 - np.arange(q_len)[:, None] + np.arange(k_len)[None, :]
    rows = np.broadcast_to(
        np.arange(k_len)[None, :] if by_key else np.arange(q_len)[:, None], t.shape
    )
    with np.errstate(invalid="ignore", over="ignore"):
        was_nan = np.isnan(base.view(sdt).astype(np.float64))[0, 0]

        def nan_product(case):
            products, index, _ = case
            return (index[t] >= 0) & np.isnan(products[0, 0, rows, np.maximum(index[t], 0)])

        results = _gathered_on_every_path(
            on_every_path,
            base,
            cases,
            lambda scores: scores if dtype == "bfloat16" else scores.view(sdt),
            lambda case: was_nan & nan_product(case),
        )
        met = np.zeros(2, int)  # NaNs meeting NaNs, NaN products meeting numbers
        for case, *every in zip(cases, *results):
            products, index, _ = case
            col, nan_p = index[t], nan_product(case)
            both = was_nan & nan_p
            met += [both.sum(), (nan_p & ~was_nan).sum()]
            for got in every:
                assert np.isnan(got[0, 0][both].view(sdt).astype(np.float64)).all()
            got = every[0][0, 0]
            want = numpy_gather(base.view(sdt), products, index, by_key)[0, 0]
            is_nan = np.isnan(want.astype(np.float64))
            np.testing.assert_array_equal(np.isnan(got.view(sdt).astype(np.float64)), is_nan)
            same_bits(got.view(sdt)[~is_nan], want[~is_nan])
            product = products[0, 0, rows, np.maximum(col, 0)]
            one = nan_p & ~was_nan
            np.testing.assert_array_equal(got[one], _quiet_nan_bits(product[one], sdt))
            score = was_nan & (col >= 0) & ~nan_p  # a NaN score, reached
            np.testing.assert_array_equal(got[score], base[0, 0][score] | words.type(quiet))
            left = was_nan & (col < 0)
            same_bits(got[left], base[0, 0][left])
        assert met.min() > 0


def _quiet_nan_bits(nans, sdt):
    """NaN products (float32, or float64 for float64 scores) as quiet NaNs of
    the scores' dtype, their sign and top payload bits kept (as F16C's
    conversion and half.h keep them)."""
    if nans.dtype == np.float64:
        return nans.view(np.uint64) | np.uint64(1 << 51)
    bits = nans.view(np.uint32)
    if sdt == np.float32:
        return bits | np.uint32(1 << 22)
    if sdt == np.float16:
        sign, payload = (bits >> 16) & 0x8000, (bits >> 13) & 0x3FF
        return (sign | 0x7C00 | payload | 0x200).astype(np.uint16)
    return ((bits >> 16) | 0x40).astype(np.uint16)


def test_inputs_that_share_memory_with_scores_are_read_as_they_were(rng):
    # queries, keys, tables and biases that are views of the scores written
    # in place: every term reads them as they were before the call, as
    # NumPy's ufuncs read overlapping inputs (the twin, given copies of
    # them, is the witness)
    def views(s):
        flat = s[0].reshape(2, 200, 8)
        return {
            "q": s[..., :8],
            "k": s[..., 8:16],
            "r": flat[:, :80],
            "v": s[0, :, 0, 16:24],
            "pk": flat[:, 100:116],
            "pq": flat[:, 120:136],
            "a": flat[0, 150:159],
        }

    table = on_grid(posenc.tener_relative_table(40, 8, dtype="float64")).astype(np.float32)
    buckets = {"position_buckets": 8, "max_relative_positions": 32}
    cases = [
        (posenc.xl_position_term, ref.xl_position_term, "q r", {}),
        (posenc.xl_position_term, ref.xl_position_term, "q r", {"bias": "v"}),
        (posenc.tener_position_term, ref.tener_position_term, "q k", {"table": table}),
        (posenc.deberta_attention_bias, ref.deberta_attention_bias, "q k pk pq", buckets),
        (posenc.shaw_key_term, ref.shaw_key_term, "q a", {"max_distance": 4}),
        (posenc.xl_content_bias, ref.xl_content_bias, "k v", {}),
    ]
    for mine, twin, names, kw in cases:
        scores = randn(rng, (1, 2, 40, 40), "float32")  # inputs on the grid: exact products
        before = views(scores.copy())
        args = [views(scores)[n] for n in names.split()]
        kw_mine = {key: views(scores)[x] if isinstance(x, str) else x for key, x in kw.items()}
        want = twin(
            *(before[n].copy() for n in names.split()),
            scores=np.array(scores),
            **{key: before[x].copy() if isinstance(x, str) else x for key, x in kw.items()},
        )
        assert mine(*args, scores=scores, **kw_mine) is scores
        same_bits(scores, want)


def numpy_dense_add(scores, term):
    """scores + term (float32, or float64 for float64 scores) as NumPy and
    ml_dtypes add them: the sum made in the term's type, rounded once."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (scores.astype(term.dtype) + term).astype(scores.dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("k_len", [1, 7, 8, 29, 37])
def test_dense_kernel_equals_numpy(simd, threads, rng, dtype, k_len):
    # a term of one row for every query, or of a row per query, its batch
    # broadcast or not, into scores whose rows lie apart (strided) and keys
    # past the last whole vector: each score gets NumPy's one rounding
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    tdt = np.float64 if dtype == "float64" else np.float32
    for term_shape in [(1, 3, 1, k_len), (2, 3, 1, k_len), (1, 3, 5, k_len), (2, 3, 5, k_len)]:
        term = noise(rng, term_shape, tdt)
        big = noise(rng, (2, 3, 5, k_len + 3), np.float32).astype(sdt)
        scores = big[..., :k_len]
        want = numpy_dense_add(scores, term)
        rel._core.rel_dense_add(
            term, scores.view(f"u{sdt.itemsize}") if dtype == "bfloat16" else scores
        )
        same_bits(scores, want)
        same_bits(big[..., k_len:], big[..., k_len:].copy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_dense_kernel_gives_the_same_bits_on_every_path(on_every_path, dtype):
    # the vector path against the portable one (and one thread against
    # two), and both against NumPy: sums that overflow to infinity, fall
    # to subnormals or cancel to -0.0, infinities, and NaNs of several
    # payloads (quiet and signalling) in the scores and in the term
    rng = np.random.default_rng(11)
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    top = float(np.finfo(np.float16).max) if dtype == "float16" else 3.0e38
    scores = rng.standard_normal((1, 2, 40, 53)).astype(np.float32).astype(sdt)
    term = rng.standard_normal((1, 2, 40, 53)).astype(np.float32)
    special = [top, -top, 1e-41, -0.0, 0.0, np.inf, -np.inf, np.nan, 1.0]
    # at the first lanes of a vector of sixteen (bfloat16 scores are added
    # sixteen at a time) and at its last
    for at in (0, 23):
        scores[0, 0, 0, at : at + 9] = np.array(special, np.float32).astype(sdt)
        term[0, 0, 0, at : at + 9] = [top, -top, -1e-42, -0.0, -0.0, -np.inf, 1.0, 2.0, np.nan]
    term[0, 0, 1, :4] = np.array([0x7F800001, 0xFFC12345, 0x7FBFFFFF, 0xFF800001], np.uint32).view(
        np.float32
    )
    bits = scores.view(f"u{sdt.itemsize}")
    if dtype != "float32":
        nans = {
            "bfloat16": [0x7FC1, 0xFF81, 0x7F80, 0xFFA5],
            "float16": [0x7E01, 0xFC00, 0x7D55, 0xFE00],
        }
        bits[0, 1, 2, :4] = nans[dtype]

    def make():
        out = scores.copy()
        rel._core.rel_dense_add(term, out.view(f"u{sdt.itemsize}") if dtype == "bfloat16" else out)
        return out

    results = on_every_path(make)
    want = numpy_dense_add(scores, term)
    nan = np.isnan(want.astype(np.float32))
    same_bits(results[0][~nan], want[~nan])
    assert np.array_equal(np.isnan(results[0].astype(np.float32)), nan)
    for other in results[1:]:
        same_bits(other, results[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dense_kernel_store_rounds_each_value_once_on_every_path(on_every_path, dtype):
    # store: the term's values written over the scores, each rounded once
    # as NumPy's astype rounds it (bfloat16 as narrow, ml_dtypes' rule):
    # ties to even, overflow to infinity, subnormals, -0.0 and NaNs of
    # several payloads, at both ends of a vector of sixteen and past the
    # last whole vector, a row of the term for every query or one for all
    rng = np.random.default_rng(12)
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    tdt = np.float64 if dtype == "float64" else np.float32
    # ties of bfloat16 and float16, float32's largest, its least subnormal,
    # -0.0, float16's overflow, the shared infinities and NaNs, and a NaN
    # whose payload lies below bfloat16's bits
    words = [0x3F808000, 0x3F818000, 0xBF808000, 0x7F7FFFFF, 0x00000001, 0x80000000]
    words += [0x3A801000, 0x477FF000, 0x477FE000] + SPECIAL_BITS["float32"][0] + [0x7F800001]
    with np.errstate(invalid="ignore"):  # signalling NaNs made quiet by the cast
        special = np.array(words, np.uint32).view(np.float32).astype(tdt)
    for rows in (5, 1):
        term = (rng.standard_normal((2, 3, rows, 45)) * 3).astype(tdt)
        term[0, 0, 0, :16] = special
        term[1, 2, rows - 1, 29:45] = special
        scores = rng.standard_normal((2, 3, 5, 45)).astype(np.float32).astype(sdt)

        def make(term=term, scores=scores):
            out = scores.copy()
            dst = out.view(f"u{sdt.itemsize}") if dtype == "bfloat16" else out
            rel._core.rel_dense_add(term, dst, True)
            return out

        results = on_every_path(make)
        full = np.broadcast_to(term, scores.shape)
        if dtype == "bfloat16":
            want = narrow(np.ascontiguousarray(full)).view(sdt)
        else:
            with np.errstate(over="ignore"):
                want = full.astype(sdt)
        nan = np.isnan(full)
        same_bits(results[0][~nan], want[~nan])
        assert np.array_equal(np.isnan(results[0].astype(np.float32)), nan)
        if dtype == "bfloat16":
            same_bits(results[0], want)
        for other in results[1:]:
            same_bits(other, results[0])


def test_a_new_bfloat16_result_is_the_float32_one_rounded_by_narrow(rng):
    # the dense kernel's store (_relative_engine.rounded) against narrow, the NumPy
    # twin: shapes of 0, 1 and more dimensions, any last axis
    for shape in [(), (0,), (7,), (3, 17), (2, 3, 4, 33)]:
        x = (rng.standard_normal(shape) * 100).astype(np.float32)
        got = engine.rounded(x, _bfloat16())
        assert got.dtype == _bfloat16() and got.shape == x.shape
        same_bits(got.view(np.uint16), narrow(x))


def _piecewise_map(rng, n, width):
    """A map of runs of random lengths (1 to 40) and slopes (-1, 0, 1), some
    left alone (-1), their columns near both ends of [0, width) as often as
    inside: the windows of eight entries the kernels classify fall within a
    run, across runs, against the last columns and over entries < 0."""
    out = np.empty(n, np.int64)
    t = 0
    while t < n:
        length = min(n - t, int(rng.integers(1, 41)))
        if rng.random() < 0.15:
            out[t : t + length] = -1
        else:
            slope = int(rng.integers(-1, 2))
            start = int(rng.choice([0, width - 1, int(rng.integers(0, width))]))
            out[t : t + length] = np.clip(start + slope * np.arange(length), 0, width - 1)
        t += length
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("by_key", [False, True])
def test_gather_kernel_equals_numpy_on_random_runs(simd, seed, by_key):
    # the runs, windows and blocks the kernels read the map into (runs of
    # every slope, short and long, entries < 0, columns at the table's last
    # ones) give every score NumPy's one add of its product
    rng = np.random.default_rng(seed)
    q_len, k_len = int(rng.integers(5, 90)), int(rng.integers(5, 90))
    width = int(rng.integers(1, 30))
    index = _piecewise_map(rng, q_len + k_len - 1, width)
    for dtype in (np.float32, np.float64):
        products = randn(rng, (1, 2, k_len if by_key else q_len, width), dtype)
        scores = noise(rng, (1, 2, q_len, k_len), dtype)
        want = numpy_gather(scores, products, index, by_key)
        rel._core.rel_gather_add(products, index, scores, by_key)
        same_bits(scores, want)


def _tail_map(rng, n, width):
    """A map of n entries made of pieces of every length 1..40 (shuffled),
    each of one kind in turn: a run of slope 1, of -1, of 0 (a clipped
    end), entries < 0, log buckets (short runs of slope 0 a column apart,
    windows of eight within 8 of their least) and columns far apart (the
    vector paths' gathers through the map)."""
    out = np.empty(n, np.int64)
    t, piece = 0, 0
    lengths = rng.permutation(np.arange(1, 41))
    while t < n:
        length = min(n - t, int(lengths[piece % 40]))
        kind, at = piece % 6, np.arange(length)
        start = int(rng.integers(length, width - length))
        if kind == 0:
            out[t : t + length] = start + at
        elif kind == 1:
            out[t : t + length] = start - at
        elif kind == 2:
            out[t : t + length] = start
        elif kind == 3:
            out[t : t + length] = -1
        elif kind == 4:
            out[t : t + length] = start + at // 3
        else:
            out[t : t + length] = rng.integers(0, width, length)
        t, piece = t + length, piece + 1
    return out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_gather_tails_of_every_width_give_the_same_bits_on_every_path(on_every_path, dtype):
    # pieces of the map of every length 1..40 and of every kind, met by
    # each row at another offset, into scores whose rows start at several
    # offsets within a cache line: every head and tail of a vector of 8 or
    # 16 scores (any lane count) on each path; among the scores and the
    # products infinities, NaNs of several payloads, subnormals, -0.0 and
    # ties of the rounding to float16 and bfloat16.  Each path and thread
    # count gives NumPy's bits where the result is a number, a NaN where it
    # is one, and every path the first's bits but where a NaN score meets a
    # NaN product (which of the two, the compilers' order of the operands)
    sdt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    words = np.dtype(f"u{sdt.itemsize}")
    pdt = np.float64 if dtype == "float64" else np.float32
    special, _ = SPECIAL_BITS[dtype]
    q_len, k_len, width, pad = 23, 141, 300, 21
    rng = np.random.default_rng(48)
    index = _tail_map(rng, q_len + k_len - 1, width)
    base = rng.standard_normal((1, 2, q_len, k_len + pad)).astype(sdt).view(words)
    flat = base.reshape(-1)
    at = rng.choice(flat.size, flat.size // 10, replace=False)
    flat[at] = np.array(special, words)[np.arange(at.size) % len(special)]
    tiny = np.array([1e-40, -1e-45, 6e-8, -0.0], np.float32).astype(sdt).view(words)
    flat[at[::7]] = tiny[np.arange(at[::7].size) % tiny.size]
    ties = [1 + 2.0**-8, -(1 + 3 * 2.0**-8), 1 + 2.0**-11, 2.0**-130, 1e-40, -0.0]
    picks = np.array(ties + [3.4e38, -3.4e38, np.inf, -np.inf, np.nan], pdt)
    cases = []
    for by_key in (False, True):
        products = rng.standard_normal((1, 2, k_len if by_key else q_len, width)).astype(pdt)
        flat = products.reshape(-1)
        at = rng.choice(flat.size, flat.size // 8, replace=False)
        flat[at] = picks[np.arange(at.size) % picks.size]
        nan = 0xFFC12345 if pdt == np.float32 else 0xFFF8123456789ABC
        flat.view(f"u{flat.itemsize}")[at[::11]] = nan
        for offset in (0, 1, 5, 11):  # the rows' first score within a line
            cases.append((products, by_key, offset))

    def make():
        out = []
        for products, by_key, offset in cases:
            scores = base.copy()
            view = scores[..., offset : offset + k_len]
            rel._core.rel_gather_add(
                products, index, view if dtype == "bfloat16" else view.view(sdt), by_key
            )
            out.append(view)
        return out

    t = q_len - 1 - np.arange(q_len)[:, None] + np.arange(k_len)[None, :]
    results = on_every_path(make)
    with np.errstate(invalid="ignore", over="ignore"):
        for n, (products, by_key, offset) in enumerate(cases):
            scores = base[..., offset : offset + k_len]
            rows = np.broadcast_to(
                np.arange(k_len)[None, :] if by_key else np.arange(q_len)[:, None], t.shape
            )
            reached = products[:, :, rows, np.maximum(index[t], 0)]
            both = np.isnan(scores.view(sdt).astype(np.float64)) & np.isnan(reached)
            both &= index[t] >= 0
            want = numpy_gather(scores.view(sdt), products, index, by_key)
            is_nan = np.isnan(want.astype(np.float64))
            for got in (r[n] for r in results):
                got = got.view(sdt)
                np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), is_nan)
                same_bits(got[~is_nan], want[~is_nan])
                same_bits(got[~both], results[0][n].view(sdt)[~both])


def test_gather_kernel_scratch_of_any_size_and_in_concurrent_calls(rng):
    # the kernel keeps its scratch memory between calls, for one call at a
    # time: maps longer than what it keeps, shorter ones after them, and
    # calls from several threads at once (each with its own scores) all
    # give NumPy's gather
    from concurrent.futures import ThreadPoolExecutor

    cases = []
    for q_len, k_len in [(3, 40000), (40, 30), (2, 20000), (150, 200), (9, 7)]:
        for index, width in _gather_maps(q_len, k_len)[:3]:
            for by_key in (False, True):
                products = randn(rng, (1, 2, k_len if by_key else q_len, width), np.float32)
                scores = noise(rng, (1, 2, q_len, k_len), np.float32)
                cases.append((products, index, scores, by_key))
    wants = [numpy_gather(s, p, m, b) for p, m, s, b in cases]

    def run(case):
        products, index, scores, by_key = case
        scores = scores.copy()
        rel._core.rel_gather_add(products, index, scores, by_key)
        return scores

    for case, want in zip(cases, wants):
        same_bits(run(case), want)
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(run, cases), wants):
                same_bits(got, want)


# ---------------------------------------------------------------- bfloat16 scores


def test_bfloat16_scores_get_each_term_rounded_then_added_by_ml_dtypes_rules(simd, rng):
    # the float32 twin's terms, each rounded to bfloat16 and added by
    # ml_dtypes' own bfloat16 add (a float32 sum rounded once), in the
    # order the function adds them: c2p, then p2c
    bf16 = _bfloat16()
    q, k = randn(rng, (2, 3, 37, 16), np.float32), randn(rng, (2, 3, 37, 16), np.float32)
    pk, pq = randn(rng, (3, 16, 16), np.float32), randn(rng, (3, 16, 16), np.float32)
    r = randn(rng, (3, 74, 16), np.float32)
    scores = noise(rng, (2, 3, 37, 37), np.float32).astype(bf16)
    opts = dict(position_buckets=8, max_relative_positions=16)
    c2p = ref.deberta_attention_bias(q, k, pk, None, scale_factor=3, **opts)
    p2c = ref.deberta_attention_bias(q, k, None, pq, scale_factor=3, **opts)
    got = posenc.deberta_attention_bias(q, k, pk, pq, scores=scores.copy(), **opts)
    same_bits(got, (scores + c2p.astype(bf16)) + p2c.astype(bf16))
    got = posenc.xl_position_term(q, r, scores=scores.copy())
    same_bits(got, scores + ref.xl_position_term(q, r).astype(bf16))
    # a term added with np.add's rule: the float32 sum rounded once
    u = randn(rng, (3, 16), np.float32)
    got = posenc.xl_content_bias(k, u, scores=scores.copy())
    want = (scores.astype(np.float32) + ref.xl_content_bias(k, u)).astype(bf16)
    same_bits(got, want)


def test_bfloat16_scores_in_a_non_contiguous_array_and_the_twin(rng):
    # a strided bfloat16 target is added into where it is; the NumPy twin
    # takes bfloat16 scores the same way
    bf16 = _bfloat16()
    q, a_k = randn(rng, (1, 2, 20, 8), np.float32), randn(rng, (9, 8), np.float32)
    big = noise(rng, (1, 2, 20, 50), np.float32).astype(bf16)
    scores, before = big[..., ::2], big[..., ::2].copy()
    want = before + ref.shaw_key_term(q, a_k, max_distance=4, k_len=25).astype(bf16)
    got = posenc.shaw_key_term(q, a_k, max_distance=4, scores=scores)
    assert got is scores
    same_bits(got, want)
    same_bits(ref.shaw_key_term(q, a_k, max_distance=4, scores=before), want)


def test_dense_terms_into_bfloat16_scores_round_the_float32_sum_once(rng):
    # xl_content_bias and tupe_bias add into bfloat16 scores a block of rows
    # at a time: every block (several per head here), strided scores and
    # leading axes get ml_dtypes' float32 sum rounded once
    bf16 = _bfloat16()
    k, u = randn(rng, (2, 3, 300, 8), np.float32), randn(rng, (3, 8), np.float32)  # exact terms
    big = noise(rng, (2, 3, 300, 600), np.float32).astype(bf16)
    scores, before = big[..., ::2], big[..., ::2].copy()
    got = posenc.xl_content_bias(k, u, scores=scores)
    assert got is scores
    same_bits(got, (before.astype(np.float32) + ref.xl_content_bias(k, u)).astype(bf16))
    p = noise(rng, (3, 301, 8), np.float32)
    table = noise(rng, (33, 3), np.float32)
    tscores = noise(rng, (3, 300, 300), np.float32).astype(bf16)
    want = (tscores.astype(np.float32) + posenc.tupe_bias(p, p, rel_table=table)).astype(bf16)
    same_bits(posenc.tupe_bias(p, p, rel_table=table, scores=tscores), want)


def test_bfloat16_scores_tensor_gets_torchs_own_bfloat16_add(rng):
    torch = pytest.importorskip("torch")
    q, r = randn(rng, (1, 2, 12, 8), np.float32), randn(rng, (2, 24, 8), np.float32)
    scores = torch.from_numpy(noise(rng, (1, 2, 12, 12), np.float32)).to(torch.bfloat16)
    term = torch.from_numpy(ref.xl_position_term(q, r))
    want = scores + term.to(torch.bfloat16)  # torch's bfloat16 add
    got = posenc.xl_position_term(torch.from_numpy(q), torch.from_numpy(r), scores=scores)
    assert got is scores and got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dense_terms_into_16_bit_tensors_are_torchs_add_of_the_float32_term(rng, dtype):
    # torch adds a float32 tensor into 16-bit scores in float32 and rounds
    # the sum once: xl_content_bias and tupe_bias give those bits
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    k, u = randn(rng, (1, 2, 37, 8), np.float32), randn(rng, (2, 8), np.float32)
    scores = torch.from_numpy(noise(rng, (1, 2, 5, 37), np.float32)).to(tdt)
    want = scores.clone().add_(torch.from_numpy(ref.xl_content_bias(k, u)))
    got = posenc.xl_content_bias(torch.from_numpy(k), torch.from_numpy(u), scores=scores)
    assert got is scores and torch.equal(got.view(torch.int16), want.view(torch.int16))
    p = noise(rng, (2, 38, 8), np.float32)
    scores = torch.from_numpy(noise(rng, (2, 37, 37), np.float32)).to(tdt)
    want = scores.clone().add_(torch.from_numpy(posenc.tupe_bias(p, p)))
    got = posenc.tupe_bias(torch.from_numpy(p), torch.from_numpy(p), scores=scores)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


# ---------------------------------------------------------------- bfloat16 inputs


def _bf16_cases(cast):
    """Each function on one set of values passed through `cast` (float32 in),
    as (name, call(module)) pairs."""
    rng = np.random.default_rng(7)
    x = {
        name: cast(noise(rng, shape, np.float32))
        for name, shape in [
            ("q", (2, 3, 19, 8)),
            ("k", (2, 3, 19, 8)),
            ("r", (3, 38, 8)),
            ("b", (3, 8)),
            ("pos", (3, 8, 8)),
            ("a", (9, 8)),
            ("p", (3, 20, 8)),
            ("t5", (33, 3)),
        ]
    }
    x["w"] = cast(np.abs(noise(rng, (2, 3, 19, 19), np.float32)))
    table = cast(posenc.tener_relative_table(19, 8))
    deb = dict(position_buckets=4, max_relative_positions=8)
    return [
        ("xl", lambda m: m.xl_position_term(x["q"], x["r"], bias=x["b"])),
        ("xl_content_bias", lambda m: m.xl_content_bias(x["k"], x["b"])),
        ("tener", lambda m: m.tener_position_term(x["q"], x["k"], table, v=x["b"])),
        ("tener_scores", lambda m: m.tener_scores(x["q"], x["k"], table, u=x["b"], scale=True)),
        ("deberta", lambda m: m.deberta_attention_bias(x["q"], x["k"], x["pos"], x["pos"], **deb)),
        ("shaw_key", lambda m: m.shaw_key_term(x["q"], x["a"], max_distance=4)),
        ("shaw_value", lambda m: m.shaw_value_term(x["w"], x["a"], max_distance=4)),
        ("tupe", lambda m: m.tupe_bias(x["p"], x["p"][:, ::-1], rel_table=x["t5"])),
    ]


@pytest.mark.parametrize("index", range(8))
def test_bfloat16_inputs_give_their_float32_result_rounded_once(threads, index):
    # bfloat16 queries, keys, tables and biases are read exactly (widened to
    # float32), the term formed in float32 as for float32 inputs, and a new
    # result rounded once to bfloat16: ml_dtypes' cast of the float32 result
    bf16 = _bfloat16()
    name, call = _bf16_cases(lambda x: x.astype(bf16))[index]
    _, wide = _bf16_cases(lambda x: x.astype(bf16).astype(np.float32))[index]
    got = call(posenc)
    assert got.dtype == bf16, name
    same_bits(got, wide(posenc).astype(bf16))
    # within one bfloat16 step of the float64 twin on the same exact values
    want = wide(ref).astype(np.float64)
    step = np.spacing(np.abs(want).astype(bf16)).astype(np.float64)
    assert np.all(np.abs(got.astype(np.float64) - want) <= step), name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_new_16_bit_result_is_the_float32_term_rounded_once(dtype):
    # the bits of the float32 term rounded once, across float16's overflow
    # and subnormals and bfloat16's tiny and huge values: a tiny negative
    # term is -0.0 (which a term rounded first and then added to +0.0
    # would not give)
    dt = _bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(21)
    scale = np.float32(2.0**-10 if dtype == "float16" else 2.0**-62)
    q = noise(rng, (2, 3, 40, 8), np.float32) * np.logspace(-3, 3, 40, dtype=np.float32)[:, None]
    r = noise(rng, (3, 80, 8), np.float32)
    a_k = noise(rng, (9, 8), np.float32)
    r, a_k = r.astype(dt), a_k.astype(dt)
    for qq in (q, q * scale, q * np.float32(300.0 if dtype == "float16" else 2.0**60)):
        with np.errstate(over="ignore"):
            x = qq.astype(dt)
        for term in (
            lambda x, up: posenc.xl_position_term(up(x), up(r)),
            lambda x, up: posenc.shaw_key_term(up(x), up(a_k), max_distance=4),
        ):
            with np.errstate(over="ignore", invalid="ignore"):  # infinities, inf - inf
                got = term(x, lambda a: a)
                want = term(x, lambda a: a.astype(np.float32)).astype(dt)
            same_bits(got, want)


def test_bfloat16_inputs_promote_as_torch_does(rng):
    bf16 = _bfloat16()
    q, r = noise(rng, (1, 2, 5, 8), np.float32), noise(rng, (2, 10, 8), np.float32)
    for other, want in [
        (bf16, bf16),
        (np.float16, np.float32),
        (np.float32, np.float32),
        (np.float64, np.float64),
    ]:
        got = posenc.xl_position_term(q.astype(bf16), r.astype(other))
        assert got.dtype == want, other
        assert posenc.xl_position_term(q.astype(other), r.astype(bf16)).dtype == want
    # float64 anywhere: the products in float64, as for float64 inputs
    got = posenc.xl_position_term(q.astype(bf16), r.astype(np.float64))
    same_bits(got, posenc.xl_position_term(q.astype(bf16).astype(np.float64), r.astype(np.float64)))


def test_bfloat16_inputs_into_bfloat16_scores_as_float32_inputs(rng):
    bf16 = _bfloat16()
    q, k = noise(rng, (2, 3, 17, 8), np.float32), noise(rng, (2, 3, 17, 8), np.float32)
    pk, pq = noise(rng, (3, 8, 8), np.float32), noise(rng, (3, 8, 8), np.float32)
    qb, kb, pkb, pqb = (x.astype(bf16) for x in (q, k, pk, pq))
    scores = noise(rng, (2, 3, 17, 17), np.float32).astype(bf16)
    deb = dict(position_buckets=4, max_relative_positions=8)
    got = posenc.deberta_attention_bias(qb, kb, pkb, pqb, scores=scores.copy(), **deb)
    wide = [x.astype(np.float32) for x in (qb, kb, pkb, pqb)]
    same_bits(got, posenc.deberta_attention_bias(*wide, scores=scores.copy(), **deb))


def test_bfloat16_tensors_in_give_bfloat16_tensors_out(rng):
    torch = pytest.importorskip("torch")
    q, r = noise(rng, (1, 2, 9, 8), np.float32), noise(rng, (2, 18, 8), np.float32)
    tq, tr = torch.from_numpy(q).bfloat16(), torch.from_numpy(r).bfloat16()
    got = posenc.xl_position_term(tq, tr)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    want = posenc.xl_position_term(tq.float().numpy(), tr.float().numpy())
    want = torch.from_numpy(want).to(torch.bfloat16)  # torch's cast: nearest, ties to even
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    table = posenc.tener_relative_table(9, 8, dtype=torch.bfloat16)
    assert table.dtype == torch.bfloat16
    assert torch.equal(table, torch.from_numpy(posenc.tener_relative_table(9, 8)).bfloat16())


def test_bfloat16_bits_round_to_nearest_even_and_keep_nans_by_hand():
    x = np.array(
        [1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -(1 + 2.0**-8), np.inf],
        np.float32,
    )
    # 1 + 2**-8 is a tie: down to even 1.0; 1 + 3 * 2**-8 a tie up to 1 + 2**-6 (even)
    np.testing.assert_array_equal(narrow(x), [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80])
    nan = np.array([0x7F800001, 0xFFC12345], np.uint32).view(np.float32)
    np.testing.assert_array_equal(narrow(nan), [0x7FC0, 0xFFC1])


# ---------------------------------------------------------------- blocks of products


@pytest.mark.parametrize("budget", [64, 2048, 40_000])
@pytest.mark.parametrize("sdt", ["float32", "float16", "float64"])
def test_terms_made_a_block_of_rows_at_a_time_equal_the_twin(
    threads, rng, monkeypatch, budget, sdt
):
    # products made and gathered a block of rows (or keys) at a time, and
    # heads grouped when theirs are small: the budget forces blocks of 8
    # rows, blocks of 8 to 40 rows, and groups of heads.  Every score is
    # added once, from the right column, blocks crossing the diagonal, the
    # causal and clipped edges and a batch whose inputs broadcast.
    monkeypatch.setattr(engine, "_BLOCK_BYTES", budget)
    q, k = randn(rng, (2, 3, 29, 8)), randn(rng, (1, 3, 29, 8))
    cases = [
        (posenc.xl_position_term, ref.xl_position_term, (q, randn(rng, (3, 58, 8))), {}),
        (
            posenc.xl_position_term,
            ref.xl_position_term,
            (q[:, :, :13], randn(rng, (3, 30, 8))),
            {"causal": True, "k_len": 29},
        ),
        (
            posenc.tener_position_term,
            ref.tener_position_term,
            (q, k, randn(rng, (64, 8))),
            {"v": randn(rng, (3, 8))},
        ),
        (
            posenc.deberta_attention_bias,
            ref.deberta_attention_bias,
            (q, k[:, :, :23], randn(rng, (3, 12, 8)), randn(rng, (2, 3, 12, 8))),
            {"position_buckets": 6, "max_relative_positions": 20, "q_offset": 3},
        ),
        (
            posenc.shaw_key_term,
            ref.shaw_key_term,
            (q, randn(rng, (9, 8))),
            {"max_distance": 4, "k_len": 35},
        ),
    ]
    for mine, twin, args, kw in cases:
        want = twin(*args, **kw)
        same_bits(mine(*args, **kw), want)
        scores = noise(rng, want.shape, sdt)[..., ::-1]  # strided, written where it is
        expected = twin(*args, scores=scores.copy(), **kw)
        assert mine(*args, scores=scores, **kw) is scores
        same_bits(scores, expected)


def test_blocks_of_products_stay_within_the_budget(rng, monkeypatch):
    # the products of a block are at most about the budget (one block of 8
    # rows when a row alone is more): Transformer-XL's (4, 512, 1024) term
    # is made from (8-row) blocks of its 1535 columns, never all 4 heads at once
    seen = []
    real = engine._core.rel_gather_add

    def spy(products, index, scores, by_key, single=False):
        seen.append((products.shape, single))
        return real(products, index, scores, by_key, single)

    monkeypatch.setattr(engine._core, "rel_gather_add", spy)
    monkeypatch.setattr(engine, "_BLOCK_BYTES", 1 << 16)
    q, r = randn(rng, (4, 512, 16), "float32"), randn(rng, (4, 1536, 16), "float32")
    got = posenc.xl_position_term(q, r, k_len=1024)
    same_bits(got, ref.xl_position_term(q, r, k_len=1024))
    rows = [s[0][-2] for s in seen]
    assert all(s[0][1] == 1 for s in seen)  # one head each
    assert sum(rows) == 4 * 512 and max(rows) == 8
    assert all(s[0][-1] == 8 + 1024 - 1 for s in seen)  # the block's columns only
    assert all(single for _, single in seen)
    seen.clear()
    monkeypatch.setattr(engine, "_BLOCK_BYTES", 1 << 30)
    posenc.xl_position_term(q, r, k_len=1024)
    assert [s[0] for s in seen] == [(1, 4, 512, 1535)] and not seen[0][1]


def test_float64_inputs_make_their_products_in_float64_before_float32_scores(monkeypatch):
    # q . r = (1 + 2**-30) - 1 = 2**-30 in float64, 0 if q were rounded to
    # float32 first: the term added into float32 scores is 2**-30
    monkeypatch.setattr(engine, "_BLOCK_BYTES", 64)  # blocks too
    q = np.zeros((1, 16, 2))
    q[..., 0], q[..., 1] = 1 + 2.0**-30, -1
    r = np.ones((1, 32, 2))
    scores = np.zeros((1, 16, 16), np.float32)
    posenc.xl_position_term(q, r, scores=scores)
    np.testing.assert_array_equal(scores, np.float32(2.0**-30))
    table = np.ones((32, 2))
    scores[...] = 0
    posenc.tener_position_term(np.zeros((1, 16, 2)), q, table, scores=scores)  # the key term
    np.testing.assert_array_equal(scores, np.float32(2.0**-30))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_xl_content_bias_added_by_the_kernel_as_np_add_adds(threads, rng, dtype):
    # the C kernel adds the row u . k into every row of the scores, with
    # np.add's bits, for every layout of scores and broadcast batch
    k, u = noise(rng, (1, 3, 9, 8), dtype), noise(rng, (3, 8), dtype)
    term = u[:, None, :] @ np.swapaxes(k, -1, -2)
    for shape in [(3, 6, 9), (2, 3, 6, 9), (2, 2, 3, 6, 9)]:
        scores = noise(rng, shape, dtype)
        want = scores + term[0]
        assert posenc.xl_content_bias(k[0], u, scores=scores) is scores
        same_bits(scores, want)
        big = noise(rng, shape[:-1] + (18,), dtype)
        strided, want = big[..., ::2], big[..., ::2] + term[0]
        posenc.xl_content_bias(k[0], u, scores=strided)
        same_bits(strided, want)
    half = noise(rng, (2, 3, 6, 9), "float16")
    want = (half.astype(dtype) + term).astype("float16")
    same_bits(posenc.xl_content_bias(k, u, scores=half), want)


# ---------------------------------------------------------------- infinities, layouts


def _product_calls(rng):
    """One small call of each relative term whose products BLAS makes:
    name -> (function, arrays, keywords)."""
    h, n, d = 2, 5, 4
    q, k = rng.standard_normal((1, h, n, d)), rng.standard_normal((1, h, n, d))
    table = posenc.tener_relative_table(n, d, dtype="float64")
    return {
        "xl_position_term": (posenc.xl_position_term, [q, rng.standard_normal((h, 2 * n, d))], {}),
        "xl_content_bias": (posenc.xl_content_bias, [k, rng.standard_normal((h, d))], {}),
        "tener_position_term": (posenc.tener_position_term, [q, k, table], {}),
        "tener_scores": (posenc.tener_scores, [q, k, table], {"scale": True}),
        "deberta_attention_bias": (
            posenc.deberta_attention_bias,
            [q, k],
            {
                "pos_key": rng.standard_normal((h, 8, d)),
                "pos_query": rng.standard_normal((h, 8, d)),
                "position_buckets": 4,
                "max_relative_positions": 16,
            },
        ),
        "shaw_key_term": (
            posenc.shaw_key_term,
            [q, rng.standard_normal((5, d))],
            {"max_distance": 2},
        ),
        "shaw_value_term": (
            posenc.shaw_value_term,
            [rng.standard_normal((1, h, n, n)), rng.standard_normal((5, d))],
            {"max_distance": 2},
        ),
        "tupe_bias": (
            posenc.tupe_bias,
            [rng.standard_normal((h, n, d)), rng.standard_normal((h, n, d))],
            {"untie_cls": False},
        ),
    }


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan, 1e308])
@pytest.mark.parametrize("name", sorted(_product_calls(np.random.default_rng(0))))
def test_infinities_in_the_data_give_ieee_results_without_a_warning(name, value):
    # inf * 0 in a product is NaN and 1e308 * 1e308 is inf, as the C kernels
    # give them: the same values as the NumPy twin, and no RuntimeWarning
    fn, arrays, kwargs = _product_calls(np.random.default_rng(1))[name]
    for i in range(len(arrays)):
        planted = [a.copy() for a in arrays]
        planted[i].reshape(-1)[::3] = value
        planted[i].reshape(-1)[1::3] = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = fn(*planted, **kwargs)
        with np.errstate(all="ignore"):
            want = getattr(ref, name)(*planted, **kwargs)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_any_layout_of_the_inputs_gives_the_bits_of_the_contiguous_call(dtype):
    layouts = {
        "fortran": np.asfortranarray,
        "strided": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
        "reversed": lambda a: np.flip(np.flip(a, -1).copy(), -1),
    }
    for name, call, inputs in _relative_calls(np.random.default_rng(2), dtype):
        if "scores" in inputs:  # the scores are written: each call its own copy
            inputs = {k: a.copy() if k == "scores" else a for k, a in inputs.items()}
        want = call(**{k: a.copy() for k, a in inputs.items()})
        for how, lay in layouts.items():
            for key in inputs:
                laid = {k: a.copy() for k, a in inputs.items()}
                laid[key] = lay(inputs[key])
                got = call(**laid)
                np.testing.assert_array_equal(got, want, err_msg=f"{name}: {key} {how}")
