"""Robustness across the public API: memory, reference counts, the GIL,
concurrent callers, and failed calls that must leave out= untouched.

Every public kernel is listed once in CALLS with a small valid call; the
tests below run over all of them.
"""

import gc
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import posenc

# name -> (function, args, kwargs, out shape, out dtype): a valid call whose
# result can also be written to an `out=` array of that shape and dtype.
CALLS = {
    "sinusoid": (posenc.sinusoid, (np.arange(37.0), 24), {}, (37, 24), np.float32),
}

# name -> a call that does a lot of work in one kernel invocation
LONG_CALLS = {
    "sinusoid": lambda: posenc.sinusoid(np.linspace(0, 1e6, 1 << 16), 512, dtype="float64"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_reference_counts_unchanged_after_many_calls(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    out = np.empty(shape, dtype)
    before = [sys.getrefcount(a) for a in arrays] + [sys.getrefcount(out)]
    for _ in range(200):
        fn(*args, **kwargs)
        assert fn(*args, out=out, **kwargs) is out
    gc.collect()
    after = [sys.getrefcount(a) for a in arrays] + [sys.getrefcount(out)]
    assert after == before


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_memory_growth_over_repeated_calls(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    out = np.empty(shape, dtype)
    for _ in range(50):  # warm caches (interned strings, dtype objects)
        fn(*args, **kwargs)
    tracemalloc.start()
    try:
        first = None
        for i in range(2000):
            fn(*args, **kwargs)
            fn(*args, out=out, **kwargs)
            if i == 99:
                gc.collect()
                first = tracemalloc.get_traced_memory()[0]
        gc.collect()
        last = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert last - first < 64 * 1024


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


@pytest.mark.parametrize("name", sorted(CALLS))
def test_concurrent_callers_get_the_single_thread_result(name):
    fn, args, kwargs, shape, dtype = CALLS[name]
    want = fn(*args, **kwargs)
    results = [None] * 4
    errors = []

    def worker(i):
        try:
            for _ in range(50):
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
        np.testing.assert_array_equal(r, want)
