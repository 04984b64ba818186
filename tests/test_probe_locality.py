"""probe.attention_locality_symmetry and probe.position_attention: Chen,
Varoquaux & Suchanek's locality and symmetry (Findings of EMNLP 2023) on
matrices whose figures are worked out by hand, and on the sinusoid, whose
position attention is provably symmetric about the diagonal."""

import json

import numpy as np
import pytest
from optional import require

import posenc
from posenc import probe

# Worked by hand: locality row by row 1, 0.6, 0.55, 0.65, 1 (sum 3.8, over 5
# rows); symmetry: rows 1 and 3 have one distance each (scaled to 0), row 2
# has |0.4 - 0.2| = 0.2 and |0.1 - 0.1| = 0, scaled to 1 and 0: 1 - 1/4.
HAND = np.array(
    [
        [1.0, 0.0, 0.0, 0.0, 0.0],
        [0.5, 0.2, 0.3, 0.0, 0.0],
        [0.1, 0.4, 0.2, 0.2, 0.1],
        [0.0, 0.0, 0.3, 0.3, 0.4],
        [0.0, 0.0, 0.0, 0.0, 1.0],
    ]
)


def test_a_hand_built_matrix_gives_the_figures_worked_by_hand():
    r = probe.attention_locality_symmetry(HAND)
    assert r.locality == pytest.approx(3.8 / 5, abs=1e-15)
    assert r.symmetry == pytest.approx(0.75, abs=1e-15)
    assert probe.attention_locality_symmetry(HAND, tolerance=0).symmetry == pytest.approx(0.75)
    assert r.n_positions == 5 and r.offsets.tolist() == list(range(-4, 5))
    assert r.mean_by_offset[4] == pytest.approx((1 + 0.2 + 0.2 + 0.3 + 1) / 5)


def test_the_identity_and_the_uniform_matrix():
    r = probe.attention_locality_symmetry(np.eye(6))
    assert (r.locality, r.symmetry) == (1.0, 1.0)
    # uniform over 3 positions: (1/9) * (1.75 + 2 + 1.75)
    r = probe.attention_locality_symmetry(np.full((3, 3), 1 / 3))
    assert r.locality == pytest.approx(5.5 / 9, abs=1e-15)
    assert r.symmetry == 1.0


def test_a_scaled_one_hot_table_has_the_closed_form_locality():
    # E = c I: logits c^2 / sqrt(n) on the diagonal, 0 elsewhere
    n, c = 7, 2.0
    a = c * c / np.sqrt(n)
    A = probe.position_attention(c * np.eye(n))
    z = np.exp(a) + n - 1
    np.testing.assert_allclose(np.diag(A), np.exp(a) / z, rtol=1e-14)
    i = np.arange(n)
    off = sum(2.0 ** -abs(p - q) for p in i for q in i if p != q)
    r = probe.attention_locality_symmetry(A)
    assert r.locality == pytest.approx((n * np.exp(a) + off) / (n * z), rel=1e-14)
    assert r.symmetry == 1.0  # every off-diagonal weight of a row is the same


def test_the_sinusoids_position_attention_is_symmetric_and_matches_the_formula():
    # E E^T of the sinusoid is sum_k cos(w_k (i - j)): even in i - j, so each
    # row's softmax weighs i - k and i + k alike
    E = posenc.sinusoid(64, 32, dtype="float64")
    A = probe.position_attention(E)
    logits = E @ E.T / np.sqrt(32)
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(A, expected, rtol=1e-12)
    r = probe.attention_locality_symmetry(A)
    assert r.symmetry == 1.0
    n = 64
    locality = np.mean([sum(A[i, j] / 2 ** abs(i - j) for j in range(n)) for i in range(n)])
    assert r.locality == pytest.approx(locality, rel=1e-12)
    # as the authors wrote it (no tolerance): their scaler's figure
    r0 = probe.attention_locality_symmetry(A, tolerance=0)
    assert r0.symmetry == pytest.approx(_authors_symmetry(A), rel=1e-12)


def _authors_symmetry(A):
    """The authors' symmetry: each row's left/right differences min-max scaled
    by scikit-learn's MinMaxScaler, one row at a time."""
    from sklearn.preprocessing import MinMaxScaler

    n = len(A)
    scaled = []
    for i in range(n):
        k = min(i, n - 1 - i)
        if k == 0:
            continue
        d = np.array([abs(A[i][i - m] - A[i][i + m]) for m in range(1, k + 1)])
        scaled.extend(MinMaxScaler().fit_transform(d[:, None])[:, 0])
    return 1 - np.mean(scaled)


def test_tolerance_0_is_the_authors_scaling_for_the_float64_sinusoid():
    require("sklearn")
    A = probe.position_attention(posenc.sinusoid(512, 768, dtype="float64"))
    r = probe.attention_locality_symmetry(A, tolerance=0)
    assert r.symmetry == pytest.approx(_authors_symmetry(A), rel=1e-12)
    assert round(r.symmetry, 4) == 0.9985
    # a row whose differences span less than 10 eps is left unscaled, as
    # MinMaxScaler leaves it; a wider span is scaled to [0, 1]
    A = np.full((5, 5), 0.2)
    A[2] = [0.2, 0.2 + 2e-16, 0.2 - 2e-16, 0.2, 0.2]
    assert probe.attention_locality_symmetry(A, tolerance=0).symmetry == pytest.approx(
        _authors_symmetry(A), abs=0
    )


def test_position_attention_takes_a_head_and_a_scale():
    rng = np.random.default_rng(0)
    E, W = rng.standard_normal((10, 4)), rng.standard_normal((4, 4))
    logits = 0.5 * E @ W @ E.T
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probe.position_attention(E, W=W, scale=0.5), expected, rtol=1e-12)


def test_bad_matrices_are_refused_by_name():
    with pytest.raises(ValueError, match="A must be a square matrix"):
        probe.attention_locality_symmetry(np.full((4, 3), 1 / 3))
    with pytest.raises(ValueError, match="row 1 sums to"):
        probe.attention_locality_symmetry(np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1.0]]))
    with pytest.raises(ValueError, match="negative"):
        probe.attention_locality_symmetry(np.array([[1, 0, 0], [1.5, -0.5, 0], [0, 0, 1.0]]))
    with pytest.raises(ValueError, match="at least 3"):
        probe.attention_locality_symmetry(np.eye(2))
    with pytest.raises(ValueError, match="tolerance"):
        probe.attention_locality_symmetry(np.eye(3), tolerance=-1)
    with pytest.raises(ValueError, match=r"W must have shape \(4, 4\)"):
        probe.position_attention(np.ones((5, 4)), W=np.eye(3))


def test_the_report_has_the_section_and_the_plot(tmp_path):
    E = posenc.sinusoid(32, 16, dtype="float64")
    r = probe.report(E, seeds=1, progress=False)
    expected = probe.attention_locality_symmetry(probe.position_attention(E))
    assert r.locality.locality == expected.locality and r.locality.symmetry == 1.0
    data = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert data["locality_symmetry"]["locality"] == expected.locality
    assert data["toeplitz"]["r2"] == pytest.approx(1.0, abs=1e-12)
    assert any(line.startswith("Chen et al. 2023") for line in r.summaries())
    only = probe.report(E, seeds=1, progress=False, extras=("locality",))
    assert only.properties is None and only.toeplitz is None and only.locality is not None
    with pytest.raises(ValueError, match="extras: unknown analysis 'nope'"):
        probe.report(E, seeds=1, progress=False, extras=("nope",))
    require("matplotlib")
    path = r.locality.plot(tmp_path / "loc.png")
    assert path.read_bytes().startswith(b"\x89PNG")
