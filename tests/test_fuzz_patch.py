"""posenc.hf.patch's fuzzer (tests/fuzz_patch.py) run for a few seconds with
a fixed seed, so that the normal test run exercises it: tiny transformers
models of every kind patch supports and some it refuses, patched,
unpatched, copied, pickled, saved, their configs and training flags
edited, each step checked against the unpatched model."""

import io

import fuzz_api
import fuzz_patch
from optional import require

SECONDS = 3.0


def test_fuzz_patch_finds_nothing():
    require("torch")
    require("transformers")
    fails = fuzz_api.Failures()
    counts = fuzz_patch.run(SECONDS, seed=0, fails=fails)
    assert sum(counts.values()) > 0
    text = io.StringIO()
    fails.report(file=text)
    assert len(fails) == 0, "\n" + text.getvalue()


def test_a_broken_unpatch_is_reported(monkeypatch):
    """An unpatch that leaves posenc's replacements in place is caught, by
    model, operation and outcome."""
    require("torch")
    require("transformers")
    import posenc.hf

    monkeypatch.setattr(posenc.hf._Change, "undo", lambda self: None)
    fails = fuzz_api.Failures()
    wanted = "unpatch: posenc objects left in an unpatched model"
    found = set()
    for seed in range(30):  # a second of fuzz at a time, until an unpatch has run
        fuzz_patch.run(1.0, seed=seed, fails=fails, names=["bloom"])
        found = {
            what for (surface, name, _, what) in fails.seen if (surface, name) == ("patch", "bloom")
        }
        if wanted in found:
            break
    assert wanted in found, found


def test_a_scaling_that_is_not_the_witnesss_is_reported(monkeypatch):
    """scaling= giving other numbers than transformers' model whose config
    carries it is caught: here the witness's linear factor is 3 where the
    patch's is 2."""
    require("torch")
    require("transformers")
    scalings = dict(fuzz_patch.SCALINGS, **{"linear:2": {"rope_type": "linear", "factor": 3.0}})
    monkeypatch.setattr(fuzz_patch, "SCALINGS", scalings)
    monkeypatch.setattr(fuzz_patch, "_POOL", {})  # scaled witnesses built anew
    fails = fuzz_api.Failures()
    wanted = "scaled logits off the scaled witness's"
    found = set()
    for seed in range(30):
        fuzz_patch.run(1.0, seed=seed, fails=fails, names=["llama"])
        found = {what for (surface, name, op, what) in fails.seen if op.endswith("linear:2")}
        if wanted in found:
            break
    assert wanted in found, found
