"""Position-id samplers (randomized positions, PoSE): against the twins and
the papers' definitions, as positions of apply_rope, sinusoid and the
relative buckets; bad input refused."""

import numpy as np
import pytest

import posenc
from posenc import _reference_newer as reference
from posenc._samplers import pose_position_ids, randomized_position_ids


@pytest.mark.parametrize(
    "sampler, n, limit, batch, seed",
    [("randomized_position_ids", 6, 40, 3, 7), ("pose_position_ids", 8, 50, 4, 3)],
)
def test_matches_reference_row_by_row(sampler, n, limit, batch, seed):
    got = getattr(posenc._samplers, sampler)(n, limit, batch=batch, seed=seed)
    rng = np.random.default_rng(seed)
    want = np.stack([getattr(reference, sampler)(n, limit, rng) for _ in range(batch)])
    assert got.dtype == np.int64 and got.shape == (batch, n)
    np.testing.assert_array_equal(got, want)


# --- randomized positional encodings (Ruoss et al. 2023) ----------------------


def test_randomized_is_sorted_distinct_and_in_range():
    ids = randomized_position_ids(50, 64, batch=20, seed=1)
    assert (np.diff(ids, axis=-1) > 0).all()
    assert ids.min() >= 0 and ids.max() < 64


def test_randomized_full_draw_is_every_position():
    np.testing.assert_array_equal(randomized_position_ids(9, 9, seed=0), np.arange(9))
    assert randomized_position_ids(0, 5, seed=0).shape == (0,)


def test_randomized_covers_the_whole_range():
    # Positions are drawn from all of range(max_len), not only the first n.
    ids = randomized_position_ids(3, 30, batch=200, seed=2)
    assert set(np.unique(ids)) == set(range(30))


def test_randomized_deterministic_given_seed_and_generator():
    a = randomized_position_ids(5, 100, batch=2, seed=123)
    b = randomized_position_ids(5, 100, batch=2, seed=123)
    np.testing.assert_array_equal(a, b)
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(
        randomized_position_ids(5, 100, seed=g1), randomized_position_ids(5, 100, seed=g2)
    )
    # The caller's generator is advanced: a second draw differs.
    assert not np.array_equal(
        randomized_position_ids(5, 100, seed=g1), randomized_position_ids(5, 100, seed=5)
    )


# --- PoSE (Zhu et al. 2023) ---------------------------------------------------


def _chunks(row):
    """(length of the first chunk, skip of the second) of one PoSE row."""
    jumps = np.flatnonzero(np.diff(row) != 1)
    assert len(jumps) <= 1, row
    first = int(jumps[0]) + 1 if len(jumps) else len(row)
    return first, int(row[-1] - (len(row) - 1))


def test_pose_two_chunks_as_train_pose_draws_them():
    n, target = 9, 30
    ids = pose_position_ids(n, target, batch=400, seed=4)
    assert (ids[:, 0] == 0).all()  # the first chunk's skip is 0
    assert (np.diff(ids, axis=-1) >= 1).all() and ids.max() <= target - 1
    firsts, skips = zip(*(_chunks(r) for r in ids))
    # A row whose skip is 0 is one run, so its first chunk is not seen.
    seen = {f for f, s in zip(firsts, skips) if s}
    assert seen == set(range(1, (n + 1) // 2 + 1))  # randint(1, (n + 1) // 2)
    assert set(skips) == set(range(0, target - n + 1))  # randint(0, target - n)


def test_pose_hand_derived_edges():
    # n == target: no room to skip, the ids are 0..n-1.
    np.testing.assert_array_equal(pose_position_ids(5, 5, seed=0), np.arange(5))
    # n == 1: one token at 0 (first chunk of 1, empty second chunk).
    np.testing.assert_array_equal(
        pose_position_ids(1, 100, batch=3, seed=0), np.zeros((3, 1), np.int64)
    )


def test_pose_deterministic_given_seed():
    np.testing.assert_array_equal(
        pose_position_ids(16, 256, seed=9), pose_position_ids(16, 256, seed=9)
    )


# --- the ids work as positions -------------------------------------------------


@pytest.mark.parametrize("sampler", [randomized_position_ids, pose_position_ids])
def test_sampled_ids_work_as_positions(sampler):
    ids = sampler(6, 64, batch=2, seed=10)
    x = np.random.default_rng(11).normal(size=(2, 3, 6, 8))
    got = posenc.apply_rope(x, ids)
    want = posenc.reference.apply_rope(x, ids[:, None, :])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    table = posenc.sinusoid(ids[0], 8, dtype=np.float64)
    np.testing.assert_allclose(
        table, posenc.reference.sinusoid(ids[0].astype(float), 8), atol=1e-12
    )
    rel = ids[0][None, :] - ids[0][:, None]
    buckets = posenc.relative_position_bucket(
        rel, bidirectional=True, num_buckets=32, max_distance=64
    )
    want_b = posenc.reference.relative_position_bucket(
        rel, bidirectional=True, num_buckets=32, max_distance=64
    )
    np.testing.assert_array_equal(buckets, want_b)
    np.testing.assert_array_equal(
        posenc.deberta_log_bucket(rel, 8, 64), posenc.reference.deberta_log_bucket(rel, 8, 64)
    )


# --- bad input -------------------------------------------------------------------

BAD_INPUTS = [
    (randomized_position_ids, (11, 10), {}, ValueError, "n must be <= max_len"),
    (randomized_position_ids, (0, 0), {}, ValueError, "max_len"),
    (randomized_position_ids, (-1, 10), {}, ValueError, "n"),
    (randomized_position_ids, (2.0, 10), {}, TypeError, "n"),
    (randomized_position_ids, (2, 10), {"batch": 0}, ValueError, "batch"),
    (randomized_position_ids, (2, 10), {"seed": "x"}, TypeError, "seed"),
    (randomized_position_ids, (2, 10), {"seed": -1}, ValueError, "seed"),
    (randomized_position_ids, (2, 10), {"seed": np.random.RandomState(0)}, TypeError, "seed"),
    (pose_position_ids, (10, 9), {}, ValueError, "n must be <= target_len"),
    (pose_position_ids, (0, 9), {}, ValueError, "n"),
    (pose_position_ids, (4, "9"), {}, TypeError, "target_len"),
    (pose_position_ids, (4, 9), {"batch": -2}, ValueError, "batch"),
]


@pytest.mark.parametrize("sampler, args, kwargs, error, match", BAD_INPUTS)
def test_bad_input_names_the_argument(sampler, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        sampler(*args, **kwargs)


# --- integer arguments at int64's edges ------------------------------------------
#
# Every integer argument takes Python and NumPy integers of any size: a value
# the sampler can draw from is drawn (the twin's row the witness), any other
# is a ValueError naming the argument and its bound, a bool a TypeError.

I64 = 2**63 - 1
EDGE_ROWS = [
    # (sampler, argument, value, expected: "ok" or (exception, words))
    ("randomized", "n", I64, (ValueError, "n must be <= max_len")),
    ("randomized", "n", 2**63, (ValueError, "n must be <= max_len")),
    ("randomized", "n", np.uint64(2**64 - 1), (ValueError, "n must be <= max_len")),
    ("randomized", "n", -(2**63), (ValueError, "n must be >= 0")),
    ("randomized", "n", np.int8(-1), (ValueError, "n must be >= 0")),
    ("randomized", "n", True, (TypeError, "n must be an integer")),
    ("randomized", "max_len", I64, "ok"),
    ("randomized", "max_len", np.int64(I64), "ok"),
    ("randomized", "max_len", 2**63, (ValueError, r"max_len must be <= 2\*\*63 - 1")),
    ("randomized", "max_len", np.uint64(2**63), (ValueError, r"max_len must be <= 2\*\*63 - 1")),
    ("randomized", "max_len", 2**64, (ValueError, r"max_len must be <= 2\*\*63 - 1")),
    ("randomized", "max_len", -(2**63), (ValueError, "max_len must be >= 1")),
    ("randomized", "max_len", np.True_, (TypeError, "max_len must be an integer")),
    ("randomized", "batch", I64, (ValueError, "batch must be <= 65536")),
    ("randomized", "batch", 2**63, (ValueError, "batch must be <= 65536")),
    ("randomized", "batch", np.uint64(2**64 - 1), (ValueError, "batch must be <= 65536")),
    ("randomized", "batch", -(2**63), (ValueError, "batch must be >= 1")),
    ("randomized", "batch", True, (TypeError, "batch must be an integer")),
    ("randomized", "seed", I64, "ok"),
    ("randomized", "seed", 2**64, "ok"),
    ("randomized", "seed", np.uint64(2**64 - 1), "ok"),
    ("randomized", "seed", -(2**63), (ValueError, "seed must be >= 0")),
    ("randomized", "seed", np.int8(-1), (ValueError, "seed must be >= 0")),
    ("randomized", "seed", True, (TypeError, "seed must be an integer")),
    ("pose", "n", I64, (ValueError, "n must be <= target_len")),
    ("pose", "n", np.uint64(2**64 - 1), (ValueError, "n must be <= target_len")),
    ("pose", "n", -(2**63), (ValueError, "n must be >= 1")),
    ("pose", "n", np.bool_(False), (TypeError, "n must be an integer")),
    ("pose", "target_len", I64, "ok"),
    ("pose", "target_len", 2**63, "ok"),  # the largest id is 2**63 - 1
    ("pose", "target_len", np.uint64(2**63), "ok"),
    ("pose", "target_len", 2**63 + 1, (ValueError, r"target_len must be <= 2\*\*63")),
    ("pose", "target_len", 2**64, (ValueError, r"target_len must be <= 2\*\*63")),
    ("pose", "target_len", np.uint64(2**64 - 1), (ValueError, r"target_len must be <= 2\*\*63")),
    ("pose", "target_len", -(2**63), (ValueError, "target_len must be >= 1")),
    ("pose", "target_len", True, (TypeError, "target_len must be an integer")),
    ("pose", "batch", 2**63, (ValueError, "batch must be <= 65536")),
    ("pose", "batch", np.int64(-(2**63)), (ValueError, "batch must be >= 1")),
    ("pose", "seed", 2**63, "ok"),
    ("pose", "seed", np.int16(-5), (ValueError, "seed must be >= 0")),
]
EDGE_BASE = {"randomized": {"n": 3, "max_len": 10}, "pose": {"n": 3, "target_len": 10}}


@pytest.mark.parametrize(
    "sampler, name, value, expected",
    EDGE_ROWS,
    ids=[f"{s}-{n}-{type(v).__name__}({int(v)})" for s, n, v, _ in EDGE_ROWS],
)
def test_integer_arguments_at_the_int64_edges(sampler, name, value, expected):
    kwargs = {**EDGE_BASE[sampler], "seed": 7, name: value}
    function = {"randomized": randomized_position_ids, "pose": pose_position_ids}[sampler]
    if expected != "ok":
        error, words = expected
        with pytest.raises(error, match=words):
            function(**kwargs)
        return
    got = function(**kwargs)
    args = {k: int(v) for k, v in kwargs.items() if k != "seed"}
    twin = getattr(reference, f"{sampler}_position_ids")
    want = twin(*args.values(), np.random.default_rng(int(kwargs["seed"])))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    limit = args.get("max_len", args.get("target_len"))
    assert 0 <= got.min() and got.max() <= limit - 1


def test_a_batch_past_the_limit_is_drawn_in_calls_that_continue_one_generator():
    # the rows of batch=6 are those of two calls of 3 with one Generator
    whole = pose_position_ids(5, 40, batch=6, seed=np.random.default_rng(2))
    rng = np.random.default_rng(2)
    parts = [pose_position_ids(5, 40, batch=3, seed=rng) for _ in range(2)]
    np.testing.assert_array_equal(whole, np.concatenate(parts))
    with pytest.raises(ValueError, match="batch must be <= 65536"):
        randomized_position_ids(0, 5, batch=2**16 + 1)
    # a batch of ids too large for memory names both of its sizes
    with pytest.raises(ValueError, match="batch and n: "):
        randomized_position_ids(2**40, 2**41, batch=60000)
    with pytest.raises(ValueError, match="^n: "):
        randomized_position_ids(2**60, 2**61)
