"""The Hub fuzz (tests/fuzz_hub.py) run for a few seconds with a fixed seed,
so that the normal test run exercises it: every perturbation of a
checkpoint, a server, a model info and a name, read through
load_position_embeddings, HubTensors and ``posenc probe``, each call giving
what the checkpoint holds or refusing in one line naming the repository,
within its deadline."""

import io

import numpy as np
from optional import require

SECONDS = 3.0


def test_the_hub_path_against_a_hostile_server():
    require("huggingface_hub")
    import fuzz_api
    import fuzz_hub

    fails = fuzz_api.Failures()
    counts = fuzz_hub.run(SECONDS, seed=0, fails=fails)
    assert {kind for _, kind in counts} == set(fuzz_hub.PERTURBATIONS)
    assert {function for function, _ in counts} == set(fuzz_hub.CALLS)
    text = io.StringIO()
    fails.report(file=text)
    assert len(fails) == 0, "\n" + text.getvalue()


def test_what_the_fuzz_counts_as_a_failure():
    """The checks of one call: a wrong table, a table where only a refusal
    is right, an exception of another type, a message of several lines or
    without the repository, a call past its deadline; and what passes."""
    import fuzz_api
    import fuzz_hub

    c = fuzz_hub.Checkpoint({}, "wpe.weight", np.arange(6.0).reshape(3, 2), 48, None)
    refused = fuzz_hub.Checkpoint({}, "wpe.weight", None, 48, None, expect="refuse")
    cases = [
        (c, "table", np.arange(6.0).reshape(3, 2), 0.1, None),
        (c, "table", np.arange(6.0).reshape(3, 2) + 1, 0.1, "differs from the checkpoint"),
        (c, "table", np.arange(6, dtype=np.float32).reshape(3, 2), 0.1, "differs from"),
        (c, "table", np.arange(6.0).reshape(3, 2), 60.0, "overran its deadline"),
        (refused, "table", np.zeros((3, 2)), 0.1, "returned where only a refusal is right"),
        (refused, "raised", OSError("org/m: no"), 0.1, None),
        (refused, "raised", ValueError("org/m: no"), 0.1, None),
        (refused, "raised", TypeError("org/m: no"), 0.1, "raised TypeError"),
        (refused, "raised", OSError("org/m:\nno"), 0.1, "error not one printable line"),
        (refused, "raised", OSError("elsewhere: no"), 0.1, "error does not name the repository"),
        (c, "raised", OSError("org/m: no"), 0.1, "refused an honest checkpoint"),
        (refused, "cli", (1, "", "posenc probe: error: org/m: no\n"), 0.1, None),
        (refused, "cli", (1, "", "Traceback\n  ...\n"), 0.1, "exit status 1"),
        (refused, "cli", (0, "", ""), 0.1, "returned where only a refusal is right"),
    ]
    for checkpoint, outcome, value, elapsed, what in cases:
        fails = fuzz_api.Failures()
        function = "posenc probe" if outcome == "cli" else "load_position_embeddings"
        fuzz_hub._check(fails, function, "k", checkpoint, "org/m", outcome, value, elapsed)
        found = [key[3] for key in fails.seen]
        assert found == ([] if what is None else found) and (
            what is None or any(f.startswith(what) for f in found)
        ), (outcome, value, what, found)
