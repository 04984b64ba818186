"""The fuzzer of posenc.torch's modules (tests/fuzz_modules.py), run for a
couple of seconds with a fixed seed so that the normal test run exercises
it: awkward constructor arguments and inputs of every module, each call
against its oracle or refused with TypeError/ValueError."""

import io

import pytest

SECONDS = 2.0


def test_the_modules_fuzz_finds_nothing():
    pytest.importorskip("torch")
    import fuzz_api
    import fuzz_modules

    fails = fuzz_api.Failures()
    counts = fuzz_modules.run(SECONDS, seed=0, fails=fails)
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
