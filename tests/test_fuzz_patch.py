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
