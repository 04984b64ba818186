"""probe.report's baselines: every figure beside the same measure on a
random table with the table's row norms and on the table's rows shuffled,
each recomputed here from its definition, and the baselines the probe guide
states measured in this run."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from optional import require
from probe_protocol import direct_absolute, direct_order

import posenc
from posenc import probe

require("sklearn")

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "probe.md"


def _random_like(E, seed):
    """The random table, row by row: a Gaussian row scaled to E's row norm."""
    g = np.random.default_rng([seed, 0]).standard_normal(E.shape)
    return np.array([g[p] * (np.linalg.norm(E[p]) / np.linalg.norm(g[p])) for p in range(len(E))])


def _shuffled(E, seed):
    perm = np.random.default_rng([seed, 1]).permutation(len(E))
    return np.array([E[perm[p]] for p in range(len(E))])


def _locality(A):
    n = len(A)
    return np.mean([sum(A[i][j] / 2 ** abs(i - j) for j in range(n)) for i in range(n)])


def _toeplitz_r2(M):
    n = len(M)
    means = {
        k: np.mean([M[i][i + k] for i in range(max(0, -k), min(n, n - k))])
        for k in range(-n + 1, n)
    }
    residual = sum((M[i][j] - means[j - i]) ** 2 for i in range(n) for j in range(n))
    return 1 - residual / np.sum((M - M.mean()) ** 2)


def test_a_random_tables_perfect_locality_is_shown_beside_its_noise(tmp_path):
    # a Gaussian table: softmax(E E^T / sqrt(d)) is nearly the identity, so
    # locality and symmetry are near 1, and so are they on any table like it
    E = np.random.default_rng(3).standard_normal((40, 64))
    r = probe.report(E, name="gauss", seeds=2, progress=False)
    assert r.locality.locality > 0.95
    for kind, make in (("random", _random_like), ("shuffled", _shuffled)):
        b = r.baselines[kind]
        for seed in (0, 1):
            T = make(E, seed)
            A = probe.position_attention(T)
            assert b["locality"].per_seed[seed] == pytest.approx(_locality(A), rel=1e-12)
            np.testing.assert_allclose(
                np.mean(direct_absolute(T, seed)), b["mae"].per_seed[seed], atol=1e-9
            )
            np.testing.assert_allclose(
                np.mean(direct_order(T, seed)), b["order_error"].per_seed[seed], atol=1e-12
            )
            assert b["toeplitz_r2"].per_seed[seed] == pytest.approx(_toeplitz_r2(T @ T.T), rel=1e-9)
        assert b["locality"].mean == pytest.approx(np.mean(b["locality"].per_seed))
        assert b["locality"].std == pytest.approx(np.std(b["locality"].per_seed))
    # printed beside the figures: in the sentences, the table and the JSON
    lines = r.summaries()
    at = next(i for i, x in enumerate(lines) if x.startswith("Chen et al. 2023"))
    noise = lines[at + 1]
    random_loc = r.baselines["random"]["locality"]
    assert f"locality {random_loc.mean:.3f} ± {random_loc.std:.3f}" in noise
    table = r.to_markdown(published=False)
    mae = r.baselines["shuffled"]["mae"]
    assert f"| noise: rows shuffled (posenc, seeds 0-1) | {mae.mean:.2f} ± {mae.std:.2f} |" in table
    data = json.loads(json.dumps(r.to_dict()))
    assert data["baselines"]["random"]["locality"]["per_seed"] == list(random_loc.per_seed)
    assert probe.report(E, seeds=1, progress=False, baselines=False).baselines is None


def _stated(pattern):
    found = re.search(pattern, GUIDE.read_text(encoding="utf-8"))
    assert found, pattern
    return [float(x) for x in found.groups()]


def test_the_guides_baselines_are_measured():
    # a random 512 x 768 table (unit-variance Gaussian rows, the norms kept),
    # seeds 0-9: the order error and the Toeplitz share the guide states
    E = np.random.default_rng(0).standard_normal((512, 768))
    errors, r2 = [], []
    for seed in range(10):
        T = _random_like(E, seed)
        errors.append(100 * np.mean(direct_order(T, seed)))
        r2.append(probe.toeplitz_fit(T @ T.T).r2)
    mean, std = _stated(r"a random table scores ([\d.]+)% ± ([\d.]+)% on the order probe")
    assert (mean, std) == (round(np.mean(errors), 1), round(np.std(errors), 1))
    (share,) = _stated(r"a random table's Gram matrix scores ([\d.]+)")
    assert share == round(np.mean(r2), 3)
    S = posenc.sinusoid(512, 768, dtype="float64")
    (shuffled,) = _stated(r"the sinusoid's rows shuffled score ([\d.]+)")
    assert shuffled == round(
        np.mean([probe.toeplitz_fit(_shuffled(S, s) @ _shuffled(S, s).T).r2 for s in range(10)]), 3
    )


def test_the_analyses_without_the_probes_print_their_noise_too(tmp_path, capsys):
    from posenc.__main__ import main

    E = np.cumsum(np.random.default_rng(5).standard_normal((30, 8)), axis=0)
    npy, js = tmp_path / "e.npy", tmp_path / "e.json"
    np.save(npy, E)
    args = ["probe", "--source", str(npy), "--analyses", "toeplitz,locality", "--seeds", "2"]
    assert main([*args, "--json", str(js)]) == 0
    out = capsys.readouterr().out.splitlines()
    data = json.loads(js.read_text())["baselines"]
    for kind, make in (("random", _random_like), ("shuffled", _shuffled)):
        for seed in (0, 1):
            T = make(E, seed)
            A = probe.position_attention(T)
            assert data[kind]["locality"]["per_seed"][seed] == pytest.approx(
                _locality(A), rel=1e-12
            )
            assert data[kind]["toeplitz_r2"]["per_seed"][seed] == pytest.approx(
                _toeplitz_r2(T @ T.T), rel=1e-9
            )
    at = next(i for i, x in enumerate(out) if x.startswith("Wennberg & Henter 2021"))
    assert out[at + 1].startswith("  noise (same measure, seeds 0-1): random table")
    assert main([*args, "--no-baselines"]) == 0
    assert "noise" not in capsys.readouterr().out
