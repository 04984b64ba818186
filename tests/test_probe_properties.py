"""probe.position_properties: Wang et al.'s monotonicity, translation
invariance and symmetry, on tables whose answers are known exactly, and on a
random table against scipy's Spearman correlation and NumPy written out."""

import numpy as np
import pytest

import posenc
from posenc import probe


def _kernel_table(n, scale=5.0):
    """A table whose Gram matrix is exp(-|i - j| / scale): Toeplitz, strictly
    falling with the distance (its Cholesky factor)."""
    i = np.arange(n)
    return np.linalg.cholesky(np.exp(-np.abs(i[:, None] - i[None, :]) / scale))


def test_a_falling_toeplitz_gram_has_every_property_exactly():
    p = probe.position_properties(_kernel_table(40))
    assert p.monotonicity_forward == pytest.approx(1.0, abs=1e-12)
    assert p.monotonicity_backward == pytest.approx(1.0, abs=1e-12)
    assert p.translation_invariance == pytest.approx(1.0, abs=1e-12)
    assert p.symmetry == pytest.approx(1.0, abs=1e-12)
    assert p.max_offset == 39


def test_a_rising_proximity_has_monotonicity_minus_one():
    E = _kernel_table(30)
    p = probe.position_properties(E, W=-np.eye(30))
    assert p.monotonicity_forward == pytest.approx(-1.0, abs=1e-12)
    assert p.monotonicity_backward == pytest.approx(-1.0, abs=1e-12)
    assert p.translation_invariance == pytest.approx(1.0, abs=1e-12)


def test_an_antisymmetric_form_has_symmetry_minus_one():
    rng = np.random.default_rng(3)
    E, A = rng.standard_normal((12, 4)), rng.standard_normal((4, 4))
    assert probe.position_properties(E, W=A - A.T).symmetry == pytest.approx(-1.0, abs=1e-12)
    assert probe.position_properties(E).symmetry == 1.0  # the dot product


def test_the_sinusoid_is_translation_invariant():
    # sin(a) sin(b) + cos(a) cos(b) = cos(a - b): its Gram matrix is Toeplitz
    p = probe.position_properties(posenc.sinusoid(128, 64, dtype="float64"))
    assert p.translation_invariance == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("max_offset", [None, 7])
def test_a_random_table_matches_scipy_and_numpy_written_out(max_offset):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    n = 30
    E, W = rng.standard_normal((n, 6)), rng.standard_normal((6, 6))
    p = probe.position_properties(E, W=W, max_offset=max_offset)
    M = E @ W @ E.T
    k = n - 1 if max_offset is None else max_offset
    fwd, bwd = [], []
    for x in range(n):
        ahead = [M[x, x + m] for m in range(1, k + 1) if x + m < n]
        behind = [M[x, x - m] for m in range(1, k + 1) if x - m >= 0]
        if len(ahead) >= 3:
            fwd.append(stats.spearmanr(np.arange(len(ahead)), -np.array(ahead))[0])
        if len(behind) >= 3:
            bwd.append(stats.spearmanr(np.arange(len(behind)), -np.array(behind))[0])
    assert p.monotonicity_forward == pytest.approx(np.mean(fwd), abs=1e-12)
    assert p.monotonicity_backward == pytest.approx(np.mean(bwd), abs=1e-12)
    pairs = [(x, y) for x in range(n) for y in range(n) if 1 <= abs(y - x) <= k]
    values = np.array([M[x, y] for x, y in pairs])
    offsets = np.array([y - x for x, y in pairs])
    within = sum(
        ((values[offsets == m] - values[offsets == m].mean()) ** 2).sum() for m in set(offsets)
    )
    expected = 1 - within / ((values - values.mean()) ** 2).sum()
    assert p.translation_invariance == pytest.approx(expected, abs=1e-12)
    assert p.symmetry == pytest.approx((M * M.T).sum() / (M * M).sum(), abs=1e-12)
    assert p.max_offset == k


def test_ties_take_their_mean_rank_as_scipy_does():
    stats = pytest.importorskip("scipy.stats")
    E = np.repeat(np.eye(4), 3, axis=0)  # a proximity of 1 within blocks of 3, else 0
    p = probe.position_properties(E)
    M = E @ E.T
    rows = [
        stats.spearmanr(np.arange(11 - x), -M[x, x + 1 :])[0]
        for x in range(12)
        if 11 - x >= 3 and np.ptp(M[x, x + 1 :]) > 0
    ]
    assert p.monotonicity_forward == pytest.approx(np.mean(rows), abs=1e-12)


def test_bad_arguments_are_refused_by_name():
    E = np.random.default_rng(1).standard_normal((10, 4))
    with pytest.raises(ValueError, match=r"W must have shape \(4, 4\)"):
        probe.position_properties(E, W=np.eye(3))
    with pytest.raises(ValueError, match="max_offset"):
        probe.position_properties(E, max_offset=2)
    with pytest.raises(TypeError, match="max_offset"):
        probe.position_properties(E, max_offset=3.5)
    with pytest.raises(ValueError, match="E"):
        probe.position_properties(E[:4])


def test_the_plot_draws_the_mean_proximity_per_offset(tmp_path):
    pytest.importorskip("matplotlib")
    p = probe.position_properties(_kernel_table(20))
    # exact: the mean over x of exp(-|m| / 5) is exp(-|m| / 5), with no spread
    np.testing.assert_allclose(p.mean_by_offset, np.exp(-np.abs(p.offsets) / 5.0), atol=1e-12)
    np.testing.assert_allclose(p.std_by_offset, 0.0, atol=1e-12)
    fig = p.plot()
    lines = [line for ax in fig.axes for line in ax.get_lines()]
    drawn = np.concatenate([line.get_ydata() for line in lines])
    np.testing.assert_allclose(np.sort(drawn), np.sort(p.mean_by_offset), atol=1e-12)
    out = p.plot(tmp_path / "props.png")
    assert (tmp_path / "props.png").read_bytes().startswith(
        b"\x89PNG"
    ) and out == tmp_path / "props.png"


def test_the_report_holds_the_properties_and_its_json_too():
    E = _kernel_table(30)
    r = probe.report(E, seeds=1, progress=False)
    expected = probe.position_properties(E)
    assert r.properties.translation_invariance == expected.translation_invariance
    assert "translation invariance 1.000" in r.properties.summary()
    d = r.to_dict()["position_properties"]
    assert d["monotonicity_forward"] == pytest.approx(1.0, abs=1e-12)
    assert d["symmetry"] == 1.0


def test_the_command_line_prints_the_properties(tmp_path, capsys):
    from posenc.__main__ import main

    np.save(tmp_path / "k.npy", _kernel_table(30))
    args = ["--source", str(tmp_path / "k.npy"), "--seeds", "1", "--no-progress"]
    assert main(["probe", *args, "--analyses", "paper,properties"]) == 0
    out = capsys.readouterr().out
    assert (
        "Wang et al. 2021 properties (|offset| <= 29): monotonicity 1.000 forward, 1.000 "
        "backward; translation invariance 1.000; symmetry 1.000." in out
    )


# ---------------------------------------------------------------- Toeplitz fit


def test_a_toeplitz_matrix_is_fitted_exactly():
    i = np.arange(9)
    M = np.cos(0.3 * (i[:, None] - i[None, :])) + 0.1 * (i[None, :] - i[:, None])  # not symmetric
    fit = probe.toeplitz_fit(M)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(fit.toeplitz, M, atol=1e-12)
    np.testing.assert_allclose(fit.diagonal_means, np.cos(0.3 * -fit.offsets) + 0.1 * fit.offsets)
    # the sinusoid's Gram matrix is Toeplitz
    E = posenc.sinusoid(64, 32, dtype="float64")
    assert probe.toeplitz_fit(E @ E.T).r2 == pytest.approx(1.0, abs=1e-12)


def test_a_hand_built_matrix_gives_its_hand_computed_share():
    M = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0], [5.0, 2.0, 5.0]])
    # diagonals: main (1, 3, 5) -> 3; +1: (2, 4) -> 3; -1: (0, 2) -> 1; +2: 0; -2: 5
    T = np.array([[3.0, 3.0, 0.0], [1.0, 3.0, 3.0], [5.0, 1.0, 3.0]])
    fit = probe.toeplitz_fit(M)
    np.testing.assert_array_equal(fit.toeplitz, T)
    residual = ((M - T) ** 2).sum()  # 4 + 1 + 1 + 0 + 0 + 1 + 0 + 1 + 4 = 12
    total = ((M - M.mean()) ** 2).sum()  # mean 22/9
    assert residual == 12.0
    assert fit.r2 == pytest.approx(1 - 12.0 / total, abs=1e-15)


def test_a_random_matrix_is_far_from_toeplitz():
    M = np.random.default_rng(5).standard_normal((200, 200))
    fit = probe.toeplitz_fit(M)
    # E[r2] = (2n - 1 - 1) / (n^2 - 1): one mean per diagonal, of 2n - 1
    assert abs(fit.r2 - (2 * 200 - 2) / (200**2 - 1)) < 0.01


def test_toeplitz_plot_and_bad_input(tmp_path):
    pytest.importorskip("matplotlib")
    M = np.random.default_rng(6).standard_normal((6, 6))
    fit = probe.toeplitz_fit(M)
    fig = fit.plot(M)
    np.testing.assert_array_equal(fig.axes[1].images[0].get_array(), fit.toeplitz)
    assert fit.plot(M, tmp_path / "t.png") == tmp_path / "t.png"
    with pytest.raises(ValueError, match="M must be a square matrix"):
        probe.toeplitz_fit(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="M must have the fitted shape"):
        fit.plot(np.zeros((5, 5)))


def test_toeplitz_plot_colours_by_the_off_diagonal_entries():
    # a table whose Gram matrix has a diagonal far above the rest, as a
    # learned table's: the colour range is the off-diagonal 99th percentile
    pytest.importorskip("matplotlib")
    E = np.random.default_rng(7).standard_normal((60, 200))
    M = E @ E.T
    fit = probe.toeplitz_fit(M)
    off = sorted(abs(M[i][j]) for i in range(60) for j in range(60) if i != j)
    position = 0.99 * (len(off) - 1)  # the percentile by linear interpolation
    low = int(position)
    expected = off[low] + (position - low) * (off[low + 1] - off[low])
    fig = fit.plot(M)
    for ax in fig.axes[:3]:
        assert ax.images[0].get_clim() == pytest.approx((-expected, expected), rel=1e-12)
    assert expected < 0.3 * M.diagonal().min()  # the old range, the diagonal's, hid the rest
    shown = np.abs(M[~np.eye(60, dtype=bool)]) > 0.1 * expected
    assert shown.mean() > 0.5  # most off-diagonal cells are visibly coloured


# ---------------------------------------------------------------- RoPE frequency usage


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_usage_finds_the_one_pair_a_head_uses(layout):
    n_heads, head_dim, d_model = 2, 8, 5
    W = np.zeros((n_heads * head_dim, d_model))
    # head 1 uses pair 3 only: rows 3 and 7 (half) or 6 and 7 (interleaved)
    a, b = (3, 7) if layout == "half" else (6, 7)
    W[head_dim + a] = [3.0, 0, 0, 0, 0]
    W[head_dim + b] = [0, 4.0, 0, 0, 0]
    W[0] = 1.0  # head 0: row 0, pair 0 in either layout
    u = probe.rope_frequency_usage([W, 2 * W], n_heads, layout=layout)
    expected = np.zeros((2, n_heads, head_dim // 2))
    expected[0, 1, 3], expected[0, 0, 0] = 5.0, np.sqrt(5.0)
    expected[1] = 2 * expected[0]
    np.testing.assert_allclose(u.usage, expected, atol=1e-12)
    np.testing.assert_allclose(u.share()[:, 1], np.eye(4)[[3, 3]], atol=1e-12)
    np.testing.assert_allclose(u.frequencies, 10000.0 ** (-np.arange(4) / 4))


def test_rope_usage_of_a_random_weight_matches_numpy_written_out(tmp_path):
    pytest.importorskip("matplotlib")
    W = np.random.default_rng(2).standard_normal((12, 7))  # 3 heads of 4
    u = probe.rope_frequency_usage(W, 3)
    for h in range(3):
        for k in range(2):
            rows = W[[4 * h + k, 4 * h + k + 2]]
            assert u.usage[0, h, k] == pytest.approx(np.linalg.norm(rows), abs=1e-12)
    fig = u.plot()
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), u.share().reshape(3, 2))
    with pytest.raises(ValueError, match="do not split into n_heads=5"):
        probe.rope_frequency_usage(W, 5)
    with pytest.raises(ValueError, match="layout"):
        probe.rope_frequency_usage(W, 3, layout="neox")


@pytest.mark.parametrize("layers, heads", [(2, 4), (32, 32), (400, 2)])
def test_rope_usage_heat_maps_stay_within_4096_pixels(layers, heads):
    pytest.importorskip("matplotlib")
    from posenc.probe.rope_usage import RopeActivationUsage, RopeFrequencyUsage

    rng = np.random.default_rng(8)
    usage = RopeFrequencyUsage(
        rng.random((layers, heads, 4)), 10000.0 ** -(np.arange(4) / 4), "half"
    )
    for dpi in (110, 300):
        fig = usage.plot(dpi=dpi)
        width, height = fig.get_size_inches() * dpi
        assert width <= 4096 and height <= 4096
        drawn = fig.axes[0].images[0].get_array()
        share = usage.share()
        if layers * heads <= 192:  # one row per head
            np.testing.assert_array_equal(drawn, share.reshape(layers * heads, 4))
        elif layers <= 192:  # one row per layer: the mean over its heads
            expected = [
                [np.mean([share[i, h, k] for h in range(heads)]) for k in range(4)]
                for i in range(layers)
            ]
            np.testing.assert_allclose(drawn, expected, rtol=1e-12)
            assert "mean over its" in fig.axes[0].get_ylabel()
        else:  # blocks of layers
            block = -(-layers // 192)
            expected = [share[i : i + block].mean(axis=(0, 1)) for i in range(0, layers, block)]
            np.testing.assert_allclose(drawn, expected, rtol=1e-12)
    both = RopeActivationUsage(usage, usage, 10)
    width, height = both.plot(dpi=110).get_size_inches() * 110
    assert width <= 4096 and height <= 4096
