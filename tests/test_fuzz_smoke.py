"""The API fuzz's checking mode (tests/fuzz_api.py), run for a few seconds
per surface with a fixed seed, so that the normal test run exercises it:
structured calls of the relative terms, the RoPE variants and the RoPE
tools, perturbed (byte-swapped, strided, zero-stride, zero-size, huge,
non-finite), each compared with posenc.reference or the canonical call, or
required to raise TypeError/ValueError."""

import io

import fuzz_api
import numpy as np
import pytest

import posenc

SECONDS = 2.0


def run(surface):
    fails, counts = fuzz_api.check(SECONDS, seed=0, surfaces=(surface,))
    # every function of the surfaces was called at least once
    called = {name for name, _ in counts}
    assert called >= set(fuzz_api.GENERATORS) or surface == "jax", sorted(
        set(fuzz_api.GENERATORS) - called
    )
    text = io.StringIO()
    fails.report(file=text)
    assert len(fails) == 0, "\n" + text.getvalue()


def test_numpy_surface():
    run("numpy")


def test_torch_surface():
    pytest.importorskip("torch")
    run("torch")


def test_jax_surface():
    pytest.importorskip("jax")
    run("jax")


def test_a_wrong_result_is_reported():
    """The checking mode catches a function that differs from its oracle,
    one line per function, perturbation and outcome."""
    rng = np.random.default_rng(0)
    case = fuzz_api.Case(
        "shaw_key_term",
        ["q", "rel_keys"],
        {
            "q": fuzz_api.randn(rng, (1, 2, 3, 4), "float64") + 1,
            "rel_keys": fuzz_api.randn(rng, (5, 4), "float64") + 1,
            "max_distance": 2,
            "k_len": 4,
        },
        kinds={"q": "data", "rel_keys": "data"},
        tol="term",
    )

    def wrong(*args, **kwargs):
        return posenc.shaw_key_term(*args, **kwargs) * 1.001

    fails = fuzz_api.Failures()
    fuzz_api._check_canonical(fails, case, wrong)
    fuzz_api._check_canonical(fails, case, wrong)
    assert list(fails.seen) == [("numpy", "shaw_key_term", "canonical", "differs from the oracle")]
    fails = fuzz_api.Failures()
    fuzz_api._check_canonical(fails, case, posenc.shaw_key_term)
    assert len(fails) == 0
