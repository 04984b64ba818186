"""The fuzzer of posenc.torch's modules (tests/fuzz_modules.py), run for a
couple of seconds with a fixed seed so that the normal test run exercises
it: awkward constructor arguments and inputs of every module, each call
against its oracle or refused with TypeError/ValueError."""

import io

import pytest

# the run's time for each generator (each is called first, then at random)
SECONDS_PER_GENERATOR = 0.2


def test_the_modules_fuzz_finds_nothing():
    pytest.importorskip("torch")
    import fuzz_api
    import fuzz_modules

    fails = fuzz_api.Failures()
    seconds = SECONDS_PER_GENERATOR * len(fuzz_modules.GENERATORS)
    counts = fuzz_modules.run(seconds, seed=0, fails=fails)
    # every module was called, and gave values as well as refusals
    assert {name for name, _ in counts} == set(fuzz_modules.GENERATORS)
    assert {kind for _, kind in counts} >= {"ok", "refused"}
    text = io.StringIO()
    fails.report(file=text)
    assert len(fails) == 0, "\n" + text.getvalue()


def test_a_wrong_module_is_reported(monkeypatch):
    """The fuzz catches a module whose numbers are off, by module and
    perturbation."""
    torch = pytest.importorskip("torch")
    import fuzz_api
    import fuzz_modules

    import posenc.torch as pt

    forward = pt.T5RelativeBias.forward
    monkeypatch.setattr(pt.T5RelativeBias, "forward",
                        lambda self, *args: forward(self, *args).flip(-1))  # fmt: skip
    fails = fuzz_api.Failures()
    rng = fuzz_modules.np.random.default_rng(0)
    for _ in range(40):
        fuzz_modules._attempt(fails, fuzz_modules.gen_t5(torch, rng, pt))
    assert fails.seen
    assert all(surface == "modules" and name == "T5RelativeBias"
               for surface, name, _, _ in fails.seen)  # fmt: skip
    assert any(what == "differs from the oracle" for _, _, _, what in fails.seen)


def test_a_slightly_wrong_new_module_is_reported(monkeypatch):
    """The fuzz catches CoPE's result off by a relative 2**-10 (within
    float16's and bfloat16's rounding, not float32's), by module."""
    torch = pytest.importorskip("torch")
    import fuzz_api
    import fuzz_modules

    import posenc.torch as pt

    forward = pt.CoPE.forward
    monkeypatch.setattr(pt.CoPE, "forward",
                        lambda self, *a, **k: forward(self, *a, **k) * (1 + 2**-10))  # fmt: skip
    fails = fuzz_api.Failures()
    rng = fuzz_modules.np.random.default_rng(0)
    for _ in range(40):
        fuzz_modules._attempt(fails, fuzz_modules.gen_cope(torch, rng, pt))
    assert fails.seen
    assert all(surface == "modules" and name == "CoPE" for surface, name, _, _ in fails.seen)
    assert all(what == "differs from the oracle" for _, _, _, what in fails.seen)
