"""The API fuzz's checking mode (tests/fuzz_api.py), run for a few seconds
per surface with a fixed seed, so that the normal test run exercises it:
structured calls of the relative terms, the RoPE variants and the RoPE
tools, perturbed (byte-swapped, strided, zero-stride, zero-size, huge,
non-finite), each compared with posenc.reference or the canonical call, or
required to raise TypeError/ValueError."""

import io

import fuzz_api
import pytest

SECONDS = 3.0


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
    """The checking mode catches a function that differs from its oracle."""
    case = fuzz_api.GENERATORS["shaw_key_term"](
        fuzz_api.np.random.default_rng(0),
        fuzz_api._Sizes(fuzz_api.np.random.default_rng(0), False),
        "float64",
    )
    fails = fuzz_api.Failures()

    def wrong(*args, **kwargs):
        return fuzz_api.posenc.shaw_key_term(*args, **kwargs) * 1.001

    fuzz_api._check_canonical(fails, case, wrong)
    assert any(what == "differs from the oracle" for (*_, what) in fails.seen)
