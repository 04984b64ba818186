"""Robustness across the public API: memory, reference counts, the GIL,
concurrent callers, and failed calls that must leave out= untouched.

Every public kernel is listed once in CALLS with a small valid call; the
tests below run over all of them.
"""

import contextlib
import gc
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import posenc
from posenc import probe

_X = np.random.default_rng(0).standard_normal((2, 4, 16, 32)).astype(np.float32)
_TABLE = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
_SCORES = np.zeros((2, 4, 16, 24), np.float32)
_E = np.random.default_rng(2).standard_normal((64, 16))

# name -> (function, args, kwargs, out shape, out dtype): a valid call; when a
# shape is given, its result can also be written to such an `out=` array.
CALLS = {
    "sinusoid": (posenc.sinusoid, (np.arange(37.0), 24), {}, (37, 24), np.float32),
    "apply_rope": (posenc.apply_rope, (_X,), {"offset": 5}, _X.shape, np.float32),
    "apply_rope positions": (
        posenc.apply_rope,
        (_X, np.arange(32.0).reshape(2, 1, 16)),
        {"layout": "interleaved", "rotary_dim": 16},
        _X.shape,
        np.float32,
    ),
    "rope_cos_sin": (posenc.rope_cos_sin, (np.arange(20.0), 32), {}, None, None),
    "rope_frequencies": (
        posenc.rope_frequencies,
        (64,),
        {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
        None,
        None,
    ),
    "alibi_bias": (posenc.alibi_bias, (4, 16, 24), {}, (4, 16, 24), np.float32),
    "alibi_bias scores": (posenc.alibi_bias, (4, 16, 24), {"scores": _SCORES}, None, None),
    "alibi_slopes": (posenc.alibi_slopes, (12,), {}, None, None),
    "t5_bias": (posenc.t5_bias, (_TABLE, 16, 24), {"q_offset": 3}, (4, 16, 24), np.float32),
    "t5_bias scores": (posenc.t5_bias, (_TABLE, 16, 24), {"scores": _SCORES}, None, None),
    "relative_position_bucket": (
        posenc.relative_position_bucket,
        (np.arange(-300, 300),),
        {},
        None,
        None,
    ),
    "relative_positions": (posenc.relative_positions, (16, 24), {"max_distance": 5}, None, None),
    "cosine_similarity": (probe.cosine_similarity, (_E,), {}, None, None),
    "informativeness": (probe.informativeness, (_E,), {}, None, None),
}

# name -> a call that does a lot of work in one kernel invocation
LONG_CALLS = {
    "sinusoid": lambda: posenc.sinusoid(np.linspace(0, 1e6, 1 << 16), 512, dtype="float64"),
    "apply_rope": lambda: posenc.apply_rope(
        np.ones((1, 8, 8192, 128)), np.random.default_rng(0).uniform(0, 1e6, 8192)
    ),
    "alibi_bias": lambda: posenc.alibi_bias(16, 1024, 4096, dtype="float64"),
    "t5_bias": lambda: posenc.t5_bias(_TABLE.astype(np.float64), 2048, 4096),
}


@contextlib.contextmanager
def _collecting_only_the_new():
    """gc.collect() within walks only the objects made within: what lived
    before is frozen out of the collector's sight (the whole test run's
    heap, which takes it a second or more to walk)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_reference_counts_unchanged_after_many_calls(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    arrays = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]
    out = np.empty(shape, dtype) if shape is not None else None
    watched = arrays + ([out] if out is not None else [])
    with _collecting_only_the_new():
        before = [sys.getrefcount(a) for a in watched]
        for _ in range(50):  # a reference kept a call: 50 more
            fn(*args, **kwargs)
            if out is not None:
                assert fn(*args, out=out, **kwargs) is out
        gc.collect()
        assert [sys.getrefcount(a) for a in watched] == before


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_memory_growth_over_repeated_calls(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    out = np.empty(shape, dtype) if shape is not None else None

    def call():
        fn(*args, **kwargs)
        if out is not None:
            fn(*args, out=out, **kwargs)

    for _ in range(50):  # warm caches (interned strings, dtype objects)
        call()
    # three rounds of 250 calls: a leak grows the traced memory in each, by
    # 16000 bytes or more at 64 bytes a call; a one-off allocation of the
    # interpreter's (a table growing once) shows in one round only
    calls = 250
    with _collecting_only_the_new():
        tracemalloc.start()
        try:
            for _ in range(100):
                call()
            gc.collect()
            traced = [tracemalloc.get_traced_memory()[0]]
            for _ in range(3):
                for _ in range(calls):
                    call()
                gc.collect()
                traced.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
    growth = [b - a for a, b in zip(traced, traced[1:])]
    assert min(growth) < 64 * calls, growth


@pytest.mark.parametrize("name", sorted(LONG_CALLS))
def test_kernel_releases_the_gil(name):
    # While one thread is inside a long kernel, this thread keeps running
    # Python.  If the kernel held the GIL, the loop below could not run until
    # the kernel had returned, and would count (almost) nothing.
    call = LONG_CALLS[name]
    call()  # warm up
    inside = threading.Event()
    done = threading.Event()

    def worker():
        for _ in range(3):
            inside.set()
            call()
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    inside.wait()
    count = 0
    while not done.is_set():
        count += 1
        done.wait(0.0001)
    t.join()
    assert count > 20


def _arrays(result):
    """The arrays of a result: an array, a tuple, or a small result object."""
    if isinstance(result, tuple):
        return [np.asarray(r) for r in result]
    if isinstance(result, np.ndarray):
        return [result]
    return [np.asarray(v) for v in vars(result).values()]


# calls that add into `scores` in place give a new result each time
PURE_CALLS = sorted(name for name, call in CALLS.items() if "scores" not in call[2])


@pytest.mark.parametrize("name", PURE_CALLS)
def test_concurrent_callers_get_the_single_thread_result(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    want = _arrays(fn(*args, **kwargs))
    results = [None] * 4
    errors = []

    def worker(i):
        try:
            for _ in range(30):
                results[i] = fn(*args, **kwargs)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        for got, exp in zip(_arrays(r), want):
            np.testing.assert_array_equal(got, exp)
