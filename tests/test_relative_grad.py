"""The gradients of posenc.relative's functions (posenc._grad).

Each term is linear in each of its array arguments taken alone, so the
central difference ``(f(x + D) - f(x - D)) / 2`` along any direction D is
exact but for rounding: in float64 it is the witness of ``<grad, D>``.  The
torch and JAX paths that call these gradients are tested in
tests/conformance/test_relative_grad_torch.py and tests/test_jax.py.
"""

import inspect

import numpy as np
import pytest

import posenc
from posenc import _core, _records
from posenc import _grad as rg

H, Q, K, D = 2, 9, 11, 4  # 9 rows: two blocks of at least 8 under a small budget


def _table(m):
    return posenc.tener_relative_table(m, D, dtype="float64")


# name, positional arguments, keyword arguments: shapes (tuples) become
# random float64 arrays, "scores" random scores of that shape
CASES = {
    "xl": ("xl_position_term", [(2, H, Q, D), (H, Q + K, D)], {"bias": (H, D), "k_len": K}),
    "xl scores broadcast": (
        "xl_position_term",
        [(1, H, Q, D), (H, Q + K, D)],
        {"bias": (H, D), "scores": (3, 2, H, Q, K)},
    ),
    "xl bi_data per batch": ("xl_position_term", [(2, H, Q, D), (2, H, Q + K, D)], {"k_len": K}),
    "xl causal": ("xl_position_term", [(2, H, Q, D), (H, K + 1, D)], {"k_len": K, "causal": True}),
    "xl memory offset": (
        "xl_position_term",
        [(2, H, Q, D), (H, Q + K + 3, D)],
        {"k_len": K, "q_offset": 3},
    ),
    "content": ("xl_content_bias", [(2, H, K, D), (H, D)], {}),
    "content scores": ("xl_content_bias", [(2, H, K, D), (H, D)], {"scores": (3, 2, H, Q, K)}),
    "tener": ("tener_position_term", [(2, H, Q, D), (2, H, Q, D), "table"], {"v": (H, D)}),
    "tener query only": (
        "tener_position_term",
        [(2, H, Q, D), (1, H, Q, D), "table"],
        {"key_term": False, "scores": (2, H, Q, Q)},
    ),
    "tener scores": (
        "tener_scores",
        [(2, H, Q, D), (2, H, Q, D), "table"],
        {"u": (H, D), "v": (H, D), "scale": True},
    ),
    "tener scores unscaled": ("tener_scores", [(2, H, Q, D), (1, H, Q, D), "table"], {}),
    "deberta buckets": (
        "deberta_attention_bias",
        [(2, H, Q, D), (2, H, K, D), (H, 8, D), (H, 8, D)],
        {"position_buckets": 4, "max_relative_positions": 16},
    ),
    "deberta c2p clipped": (
        "deberta_attention_bias",
        [(2, H, Q, D), (2, H, K, D), (H, 6, D)],
        {"max_relative_positions": 3, "q_offset": 2, "scores": (2, H, Q, K)},
    ),
    "deberta p2c": (
        "deberta_attention_bias",
        [(2, H, Q, D), (1, H, K, D), None, (H, 8, D)],
        {"position_buckets": 4, "max_relative_positions": 16, "scale_factor": 5},
    ),
    "shaw shared": ("shaw_key_term", [(2, H, Q, D), (5, D)], {"max_distance": 2, "k_len": K}),
    "shaw per head": (
        "shaw_key_term",
        [(2, H, Q, D), (H, 5, D)],
        {"max_distance": 2, "scores": (2, H, Q, K)},
    ),
    "shaw values": ("shaw_value_term", [(2, H, Q, K), (5, D)], {"max_distance": 2}),
    "shaw values per head": (
        "shaw_value_term",
        [(2, H, Q, K), (H, 7, D)],
        {"max_distance": 3, "q_offset": 1},
    ),
    "tupe": ("tupe_bias", [(H, Q + 1, D), (H, Q + 1, D)], {"rel_table": (9, H), "max_distance": 8}),
    "tupe tied": (
        "tupe_bias",
        [(H, Q, D), (H, Q, D)],
        {"rel_table": (8, H), "max_distance": 8, "untie_cls": False, "scores": (2, H, Q, Q)},
    ),
    "tupe no table": ("tupe_bias", [(H, Q + 1, D), (H, Q + 1, D)], {}),
}


def _make(rng, spec):
    if isinstance(spec, tuple):
        return rng.standard_normal(spec)
    if spec == "table":
        return _table(Q + 2)
    return spec


def _call(name, arguments, scores_shape):
    """The term alone (into zero scores when the call takes scores=)."""
    kwargs = dict(arguments)
    if scores_shape is not None:
        kwargs["scores"] = np.zeros(scores_shape)
    return getattr(posenc, name)(**kwargs)


@pytest.mark.parametrize("budget", [None, 64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_are_the_central_differences_of_the_term(case, budget, monkeypatch):
    # budget 64: products and gradients a block of 8 rows (or keys) and one
    # head at a time, the forward's blocks and the backward's
    if budget is not None:
        monkeypatch.setattr(posenc._relative_engine, "_BLOCK_BYTES", budget)
    rng = np.random.default_rng(len(case))
    name, args, kwargs = CASES[case]
    fn = getattr(posenc, name)
    names = list(inspect.signature(fn).parameters)
    arguments = {names[i]: _make(rng, a) for i, a in enumerate(args)}
    scores_shape = kwargs.get("scores")
    arguments.update({key: _make(rng, a) for key, a in kwargs.items() if key != "scores"})
    if scores_shape is not None:
        arguments["scores"] = rng.standard_normal(scores_shape)
    result = _call(name, {k: a for k, a in arguments.items() if k != "scores"}, scores_shape)
    grad = rng.standard_normal(result.shape)
    wanted = [a for a in _records.RECORDS[name].differentiable if arguments.get(a) is not None]
    given = dict(arguments)
    got = rg.grads(name, grad, wanted, (), given)
    for key, value in given.items():  # nothing the caller handed over was written
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, arguments[key])
    assert set(got) == set(wanted) - {"scores"}
    for key in got:
        assert got[key].shape == np.shape(arguments[key]) and got[key].dtype == np.float64
        for _ in range(2):
            step = rng.standard_normal(np.shape(arguments[key]))
            ends = []
            for sign in (1, -1):
                moved = {k: a for k, a in arguments.items() if k != "scores"}
                moved[key] = arguments[key] + sign * step
                ends.append(_call(name, moved, scores_shape))
            want = np.sum((ends[0] - ends[1]) / 2 * grad)
            scale = np.sum(np.abs(ends[0] - ends[1]) / 2 * np.abs(grad))
            assert abs(np.sum(got[key] * step) - want) <= 1e-12 * scale, key


def test_gradients_by_hand_for_one_query_and_two_keys():
    # Shaw, max_distance 1, one query at position 1 (q_offset default
    # k_len - q_len = 1): key 0 is at distance -1 (row 0), key 1 at 0 (row 1)
    q = np.array([[[[1.0, 2.0]]]])
    table = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    grad = np.array([[[[3.0, 4.0]]]])
    got = rg.grads(
        "shaw_key_term", grad, ["q", "rel_keys"], (q, table), {"max_distance": 1, "k_len": 2}
    )
    np.testing.assert_array_equal(got["q"], [[[[3.0, 4.0]]]])  # 3 * row 0 + 4 * row 1
    np.testing.assert_array_equal(got["rel_keys"], [[3.0, 6.0], [4.0, 8.0], [0.0, 0.0]])


def test_float32_inputs_get_float32_gradients_of_float32_precision():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, H, 40, 16)).astype(np.float32)
    r = rng.standard_normal((H, 80, 16)).astype(np.float32)
    grad = rng.standard_normal((2, H, 40, 40)).astype(np.float32)
    got = rg.grads("xl_position_term", grad, ["q", "r"], (q, r), {})
    wide = rg.grads("xl_position_term", grad.astype(np.float64), ["q", "r"], (q * 1.0, r * 1.0), {})
    for key in ("q", "r"):
        assert got[key].dtype == np.float32
        # sums of at most 80 products: within 80 float32 roundings of the sum of |terms|
        size = rg.grads(
            "xl_position_term",
            np.abs(grad.astype(np.float64)),
            [key],
            (np.abs(q * 1.0), np.abs(r * 1.0)),
            {},
        )[key]
        assert np.all(np.abs(got[key] - wide[key]) <= 80 * 2.0**-24 * size)


def test_an_incoming_gradient_of_another_shape_is_refused():
    q, r = np.ones((1, 2, 3, 4)), np.ones((2, 8, 4))
    with pytest.raises(ValueError, match=r"grad must have shape \(\.\.\., 2, 3, 5\)"):
        rg.grads("xl_position_term", np.ones((1, 2, 3, 4)), ["q"], (q, r), {"k_len": 5})
    with pytest.raises(ValueError, match=r"grad must have shape \(\.\.\., 2, 1, 3\)"):
        rg.grads(
            "xl_content_bias", np.ones((2, 1, 4)), ["k"], (np.ones((2, 3, 4)), np.ones((2, 4))), {}
        )
    with pytest.raises(ValueError, match="grad must have shape"):
        rg.grads(
            "shaw_value_term",
            np.ones((2, 3, 3)),
            ["weights"],
            (np.ones((2, 3, 3)), np.ones((3, 5))),
            {"max_distance": 1},
        )


def test_the_scores_get_no_gradient_of_their_own_here():
    # scores= passes the incoming gradient on unchanged: the interop layers
    # give it, grads() computes the others only
    q, r = np.ones((1, 1, 2, 2)), np.ones((1, 4, 2))
    got = rg.grads("xl_position_term", np.ones((1, 1, 2, 2)), ["scores"], (q, r), {})
    assert got == {}


def _random_map(rng, n, width):
    """A map of runs of slope 1, -1 and 0 and of -1s, as the terms make."""
    out, t = [], 0
    while t < n:
        length, slope = int(rng.integers(1, 9)), int(rng.integers(-1, 3))
        if slope == 2:
            out += [-1] * length
        else:
            start = int(rng.integers(0, width))
            out += [min(max(start + slope * m, 0), width - 1) for m in range(length)]
        t += length
    return np.array(out[:n], np.int64)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_scatter_by_query_reads_strided_rows_and_gives_the_same_bits_on_any_threads(dtype):
    # out[b, h, i, map[q_len - 1 - i + j]] += w[b, h, i, j]: NumPy's add.at
    # (to float32's rounding of sums in another order), and the same bits
    # on one thread as on two
    rng = np.random.default_rng(12)
    batch, heads, q_len, k_len, width = 2, 3, 150, 37, 23
    w = rng.standard_normal((batch, heads, q_len, k_len + 9)).astype(dtype)[..., 4 : 4 + k_len]
    index = _random_map(rng, q_len + k_len - 1, width)
    kind = np.float64 if dtype == "float64" else np.float32
    runs = []
    for single in (True, False):
        posenc.set_num_threads(2)
        out = np.zeros((batch, heads, q_len, width), kind)
        _core.rel_scatter_add(w, index, out, single, False)
        runs.append(out)
    posenc.set_num_threads(0)
    np.testing.assert_array_equal(
        runs[0].view(f"u{runs[0].itemsize}"), runs[1].view(f"u{runs[1].itemsize}")
    )
    want = np.zeros(runs[0].shape)
    i, j = np.meshgrid(np.arange(q_len), np.arange(k_len), indexing="ij")
    cols = index[q_len - 1 - i + j]
    keep = cols >= 0
    for b in range(batch):
        for h in range(heads):
            np.add.at(want[b, h], (i[keep], cols[keep]), w[b, h][keep].astype(np.float64))
    np.testing.assert_allclose(runs[0], want, rtol=0, atol=k_len * np.finfo(kind).eps * 8)


def _runs(index):
    """The map's runs as (start, end, first column, slope), slope 1, -1 or
    0 (the kernel's reading: a run of two or more steps of one slope)."""
    runs, t, n = [], 0, len(index)
    while t < n:
        e, slope = t + 1, 0
        if index[t] >= 0 and e < n and index[e] >= 0 and abs(int(index[e] - index[t])) <= 1:
            slope = int(index[e] - index[t])
            while e < n and index[e] >= 0 and index[e] == index[e - 1] + slope:
                e += 1
        elif index[t] < 0:
            while e < n and index[e] < 0:
                e += 1
        runs.append((t, e, int(index[t]), slope))
        t = e
    return runs


def _clipped_sum(x, kind):
    """A clipped run's sum as relative.h orders it: fewer than `lanes`
    weights in order from zero; else `lanes` running sums (16 for float32,
    8 for float64) over the whole groups, folded in halves to eight, those
    added pairwise, then the rest in order."""
    lanes = 16 if kind == np.float32 else 8
    one = kind(0)
    if len(x) < lanes:
        for v in x:
            one = kind(one + v)
        return one
    whole = len(x) // lanes * lanes
    a = np.zeros(lanes, kind)
    for m in range(0, whole, lanes):
        a = (a + x[m : m + lanes]).astype(kind)
    while len(a) > 8:
        a = (a[: len(a) // 2] + a[len(a) // 2 :]).astype(kind)
    one = kind(
        kind(kind(a[0] + a[4]) + kind(a[1] + a[5])) + kind(kind(a[2] + a[6]) + kind(a[3] + a[7]))
    )
    for v in x[whole:]:
        one = kind(one + v)
    return one


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scatter_by_query_sums_in_the_order_its_header_gives(dtype):
    # relative.h: by query, each entry in the order of j; a clipped run's
    # weights summed apart (_clipped_sum) and that sum added to the entry:
    # the same bits from a NumPy walk of the same runs, on maps with clipped
    # runs of every length around 8 and 16, runs of slope 1 and -1 of
    # lengths around the vectors' (each sum one add, in whatever order the
    # loop takes them), and weights of mixed magnitudes
    rng = np.random.default_rng(13)
    kind = np.dtype(dtype).type
    q_len, k_len, width = 200, 300, 80
    pieces = []
    for length in (1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40):
        pieces.append([int(rng.integers(0, width))] * length)
        run, slope = length + 2, 1 if length % 2 else -1
        start = int(rng.integers(0, width - run)) if slope > 0 else int(rng.integers(run, width))
        pieces.append([start + slope * m for m in range(run)])
    index = np.array(sum(pieces, []) * 2, np.int64)[: q_len + k_len - 1]
    assert len(index) == q_len + k_len - 1
    w = (rng.standard_normal((1, 2, q_len, k_len)) * 10.0 ** rng.integers(-3, 4, k_len)).astype(
        kind
    )
    out = rng.standard_normal((1, 2, q_len, width)).astype(kind)
    want = out.copy()
    _core.rel_scatter_add(w, index, out, True, False)
    runs = _runs(index)
    for h in range(2):
        for i in range(q_len):
            row, t0 = want[0, h, i], q_len - 1 - i
            for start, end, col, slope in runs:
                a, e = max(start, t0), min(end, t0 + k_len)
                if a >= e or col < 0:
                    continue
                x = w[0, h, i, a - t0 : e - t0]
                c = col + slope * (a - start)
                if slope == 0:
                    row[c] = kind(row[c] + _clipped_sum(x, kind))
                else:
                    for m, v in enumerate(x):
                        row[c + slope * m] = kind(row[c + slope * m] + v)
    np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))


def test_padded_rows_lie_an_odd_number_of_cache_lines_apart():
    from posenc._relative_engine import _padded_rows

    for width in (1, 15, 16, 17, 500, 512, 1503, 2047, 2048):
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            a = _padded_rows((3, 4, width), dtype)
            assert a.shape == (3, 4, width) and a.dtype == dtype and not a.any()
            assert a.strides[-1] == dtype.itemsize and a.strides[-2] >= width * dtype.itemsize
            assert a.strides[-2] % 64 == 0 and (a.strides[-2] // 64) % 2 == 1


def test_walked_products_give_every_load_along_the_run_half_a_line():
    # the by-key walk loads key j's products for queries [i, i + 8), i a
    # multiple of 8, from column map[q_len - 1 - i + j] (a run of slope -1)
    # or map[q_len - 8 - i + j] (slope 1): each such load starts at byte 0 or
    # 32 of a line, for every head, key and strip along the map's main run
    from posenc._relative_engine import _main_run, _walked_products

    f4 = np.dtype(np.float32)
    for q_len, keys, slope, start, length, lead in [
        (1024, 480, -1, 0, 1503, 1502),  # TENER's key term, a block of keys
        (37, 61, -1, 5, 80, 90),
        (64, 13, 1, 0, 76, 3),
        (40, 24, 1, 10, 50, 0),
        (300, 64, -1, 30, 150, 400),
    ]:
        n = q_len + keys - 1
        rng = np.random.default_rng(q_len + keys)
        index = rng.integers(-1, 30, n)  # elsewhere: short runs, and none
        run = lead + slope * np.arange(length)
        index[start : start + length] = run
        cols = int(index.max()) + 1
        for heads in (1, 3):
            assert _main_run(index) == (slope, lead - slope * start)
            p = _walked_products((heads, keys, cols), f4, _main_run(index), q_len)
            assert p.shape == (heads, keys, cols) and p.dtype == f4 and p.strides[-1] == 4
            sr, sh = p.strides[-2], p.strides[-3]
            assert sr >= 4 * cols and (sr + 4 * slope) % 64 == 0 and (sr + 4 * slope) // 64 % 2
            loads = 0
            for i in range(0, q_len - 7, 8):
                for j in range(keys):
                    t = q_len - 1 - i + j - (7 if slope > 0 else 0)
                    if start <= t - 7 and t + 7 < start + length:  # the whole block in the run
                        for h in range(heads):
                            at = p.ctypes.data + h * sh + j * sr + 4 * int(index[t])
                            assert at % 32 == 0, (q_len, keys, i, j, h)
                            loads += 1
            assert loads > 0
    # without a run of slope 1 or -1, or of float64: rows an odd number of lines apart
    index = np.repeat(np.arange(10), 7)
    for dtype in (f4, np.dtype(np.float64)):
        run = _main_run(index if dtype == f4 else np.arange(69))
        assert run == ((0, 0) if dtype == f4 else (1, 0))
        p = _walked_products((2, 30, 12), dtype, run, 40)
        assert p.shape == (2, 30, 12) and p.strides[-2] % 64 == 0 and p.strides[-2] // 64 % 2


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_scatter_by_key_is_np_add_at_in_the_order_of_the_queries(threads, dtype):
    # out[b, h, j, map[q_len - 1 - i + j]] += w[b, h, i, j], each entry summed
    # in the order of i: NumPy's add.at over (i, j) in that order, bit for bit;
    # w a strided view of whole rows
    rng = np.random.default_rng(11)
    batch, heads, q_len, k_len, width = 2, 3, 37, 150, 23
    base = rng.standard_normal((batch, heads, q_len, k_len + 9)).astype(dtype)
    w = base[..., 4 : 4 + k_len]
    index = _random_map(rng, q_len + k_len - 1, width)
    kind = np.float64 if dtype == "float64" else np.float32
    got = np.zeros((batch, heads, k_len, width), kind)
    _core.rel_scatter_add(w, index, got, False, True)
    want = np.zeros_like(got)
    i, j = np.meshgrid(np.arange(q_len), np.arange(k_len), indexing="ij")
    cols = index[q_len - 1 - i + j]
    keep = cols >= 0
    for b in range(batch):
        for h in range(heads):
            np.add.at(want[b, h], (j[keep], cols[keep]), w[b, h][keep].astype(kind))
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    assert np.array_equal(base[..., 4 : 4 + k_len], w)  # read, not written


@pytest.mark.parametrize("untie_cls", [True, False])
def test_tupe_bias_of_one_token_or_no_head_dim_has_zero_or_exact_gradients(untie_cls):
    # one row with untie_cls is [CLS] alone: an empty bias, zero gradients;
    # an empty head dim: no products, the table's gradient alone
    rng = np.random.default_rng(3)
    table = rng.standard_normal((7 if untie_cls else 6, H))
    for rows, d in [(1 if untie_cls else 0, D), (3, 0)]:
        pq, pk = rng.standard_normal((H, rows, d)), rng.standard_normal((H, rows, d))
        n = rows - 1 if untie_cls else rows
        grad = rng.standard_normal((H, n, n))
        got = rg.grads_of(
            "tupe_bias",
            ("pos_q", "pos_k", "rel_table"),
            grad,
            pos_q=pq,
            pos_k=pk,
            rel_table=table,
            untie_cls=untie_cls,
        )
        assert [g.shape for g in got] == [pq.shape, pk.shape, table.shape]
        np.testing.assert_array_equal(got[0], 0)
        np.testing.assert_array_equal(got[1], 0)
        # the table's gradient: the central difference along a direction
        step = rng.standard_normal(table.shape)

        f = [
            np.sum(grad * posenc.tupe_bias(pq, pk, rel_table=t, untie_cls=untie_cls))
            for t in (table + step, table - step)
        ]
        want = (f[0] - f[1]) / 2
        np.testing.assert_allclose(np.sum(got[2] * step), want, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("error")
def test_tener_scores_scaled_with_no_head_dim_has_empty_gradients_without_a_warning():
    # the scale 1 / sqrt(d) of no products is not read (as the forward skips it)
    q, k = np.ones((1, H, 3, 0)), np.ones((1, H, 3, 0))
    got = rg.grads_of(
        "tener_scores",
        ("q", "k"),
        np.ones((1, H, 3, 3)),
        q=q,
        k=k,
        table=np.ones((6, 0)),
        scale=True,
    )
    assert [g.shape for g in got] == [q.shape, k.shape]
