"""posenc.probe against the published figures and direct scikit-learn runs.

The witnesses: Wang & Chen's published sinusoid row (MAE 0.0, order error
5.08%), the protocol written out here with scikit-learn's own
``cross_val_score`` / ``KFold``, the normalised Gram matrix, NumPy's SVD, and
hand-derived values.
"""

import json
import sys

import child_process
import numpy as np
import pytest
from probe_protocol import direct_absolute, direct_order

import posenc
from posenc import probe

N, D = 512, 768


def paper_sinusoid(n, d):
    """PE(i, 2j) = sin(i / 10000^(2j/d)), PE(i, 2j+1) = cos(...), as the paper writes it."""
    table = np.empty((n, d))
    for j in range(d // 2):
        angle = np.arange(n) / 10000 ** (2 * j / d)
        table[:, 2 * j] = np.sin(angle)
        table[:, 2 * j + 1] = np.cos(angle)
    return table


@pytest.fixture(scope="module")
def sinusoid_report():
    # the baselines beside the figures: test_probe_baselines.py
    E = paper_sinusoid(N, D)
    return probe.report(E, name="sinusoid", seeds=10, progress=False, baselines=False)


@pytest.fixture(scope="module")
def gaussian():
    return np.random.default_rng(0).standard_normal((N, D))


# ---------------------------------------------------------------- the published row


def test_builtin_sinusoid_is_the_papers_interleaved_base_10000_table():
    table = posenc.sinusoid(N, D, dtype="float64")
    np.testing.assert_allclose(table, paper_sinusoid(N, D), rtol=0, atol=1e-12)


def test_sinusoid_absolute_mae_is_zero_for_every_seed_as_published(sinusoid_report):
    assert [r.mae for r in sinusoid_report.absolute] == [0.0] * 10
    assert sinusoid_report.mae == 0.0 and sinusoid_report.mae_std == 0.0
    np.testing.assert_array_equal(sinusoid_report.absolute[3].predictions, np.arange(N))


def test_sinusoid_order_error_over_ten_seeds_is_within_a_few_points_of_published_5_08(
    sinusoid_report,
):
    rates = np.array([r.error_rate for r in sinusoid_report.order])
    assert abs(rates.mean() - 0.0508) < 0.02
    assert rates.max() < 0.12
    # one draw of 512 pairs is noisy: the seeds do not all agree
    assert 0.005 < rates.std() < 0.03
    assert sinusoid_report.error_rate == pytest.approx(rates.mean())
    assert sinusoid_report.error_rate_std == pytest.approx(rates.std())


def test_sinusoid_report_figures_equal_direct_sklearn_runs_for_two_seeds(sinusoid_report):
    table = paper_sinusoid(N, D)
    for seed in (0, 7):
        expected = direct_order(table, seed)
        np.testing.assert_allclose(sinusoid_report.order[seed].fold_errors, expected, atol=1e-12)


# ---------------------------------------------------------------- against scikit-learn


def test_absolute_regression_equals_direct_sklearn_cross_val_score_on_gaussian(gaussian):
    result = probe.absolute_position_regression(gaussian, seed=0)
    expected = direct_absolute(gaussian, 0)
    np.testing.assert_allclose(result.fold_mae, expected, rtol=0, atol=1e-9)
    assert result.mae == pytest.approx(expected.mean(), abs=1e-9)


def test_order_classification_equals_direct_sklearn_cross_val_score_on_gaussian(gaussian):
    result = probe.relative_order_classification(gaussian, seed=0)
    expected = direct_order(gaussian, 0)
    np.testing.assert_allclose(result.fold_errors, expected, rtol=0, atol=1e-12)
    assert result.error_rate == pytest.approx(expected.mean(), abs=1e-12)


def test_gaussian_table_scores_like_guessing_and_far_above_sinusoid(gaussian, sinusoid_report):
    # E|U - V| for independent uniform positions is about n/3 (170.7 for 512)
    mae = probe.absolute_position_regression(gaussian, seed=0).mae
    assert 150 < mae < 200
    error = probe.relative_order_classification(gaussian, seed=0).error_rate
    assert 0.28 < error < 0.45
    assert error > 3 * sinusoid_report.error_rate


@pytest.mark.parametrize("seed", [0, 1, 5])
@pytest.mark.parametrize("shape", [(40, 6), (73, 30), (96, 200)])
def test_probes_equal_direct_sklearn_runs_on_small_tables(rng, shape, seed):
    E = np.cumsum(rng.standard_normal(shape), axis=0)  # positions a linear model can partly read
    a = probe.absolute_position_regression(E, seed=seed)
    np.testing.assert_allclose(a.fold_mae, direct_absolute(E, seed), atol=1e-9)
    o = probe.relative_order_classification(E, seed=seed)
    np.testing.assert_allclose(o.fold_errors, direct_order(E, seed), atol=1e-12)


def test_other_fold_counts_and_pair_counts_equal_direct_sklearn_runs(rng):
    E = np.cumsum(rng.standard_normal((61, 12)), axis=0)
    a = probe.absolute_position_regression(E, folds=3, seed=2)
    np.testing.assert_allclose(a.fold_mae, direct_absolute(E, 2, folds=3), atol=1e-9)
    o = probe.relative_order_classification(E, pairs=300, folds=7, seed=4)
    np.testing.assert_allclose(o.fold_errors, direct_order(E, 4, pairs=300, folds=7), atol=1e-12)
    assert len(o.pairs) == 300 and len(o.fold_errors) == 7


def _least_squares_pair(X, y):
    """(posenc's, scikit-learn's) intercept and intercept + coefficients: the
    predictions at the origin and at each unit vector."""
    from sklearn.linear_model import LinearRegression

    from posenc.probe._fits import least_squares_predictions

    points = np.vstack([np.zeros(X.shape[1]), np.eye(X.shape[1])])
    with _one_blas_thread():
        model = LinearRegression()
        ours = least_squares_predictions(X, y, points, model.tol)
        theirs = model.fit(X, y).predict(points)
    return ours, theirs


def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


@pytest.mark.parametrize(
    "kind, shape",
    [
        ("gaussian", (120, 40)),  # overdetermined
        ("gaussian", (120, 300)),  # underdetermined: the minimum-norm solution
        ("random walk", (120, 40)),  # smooth, as learned tables are
        ("random walk", (120, 300)),
    ],
)
def test_least_squares_fit_equals_linear_regression(rng, kind, shape):
    E = rng.standard_normal(shape)
    if kind == "random walk":
        E = np.cumsum(E, axis=0)
    y = rng.permutation(shape[0]).astype(np.float64)
    train = np.arange(shape[0]) % 5 != 0
    ours, theirs = _least_squares_pair(E[train], y[train])
    assert ours is not None
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9 * np.abs(theirs).max())


def test_least_squares_fit_of_a_rank_deficient_table_is_left_to_scikit_learn(rng):
    base = rng.standard_normal((80, 6))
    E = np.hstack([base, base[:, :3] * 2.0])  # rank 6 of 9 columns
    ours, _ = _least_squares_pair(E[:64], np.arange(64.0))
    assert ours is None
    result = probe.absolute_position_regression(E, seed=1)
    np.testing.assert_allclose(result.fold_mae, direct_absolute(E, 1), atol=1e-9)


@pytest.mark.parametrize(
    "kind, shape",
    [
        ("sinusoid", (N, D)),  # the folds QR refuses: singular values below the cut
        ("gaussian", (120, 300)),
        ("random walk", (120, 40)),  # smooth, as learned tables are
        ("random walk", (120, 300)),
    ],
)
def test_lstsq_fit_is_linear_regression_to_the_bit(rng, kind, shape):
    from sklearn.linear_model import LinearRegression

    from posenc.probe._fits import lstsq_predictions

    if kind == "sinusoid":
        E = posenc.sinusoid(*shape, dtype="float64")
    else:
        E = rng.standard_normal(shape)
        E = np.cumsum(E, axis=0) if kind == "random walk" else E
    order = rng.permutation(shape[0])
    X, y = E[order], order.astype(np.float64)
    train = np.arange(shape[0]) % 5 != 0
    with _one_blas_thread():
        model = LinearRegression()
        ours = lstsq_predictions(X[train], y[train], X[~train], model.tol)
        theirs = model.fit(X[train], y[train]).predict(X[~train])
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("threads", [1, 2])
def test_report_of_a_table_qr_refuses_equals_direct_sklearn_runs_for_every_seed(
    monkeypatch, rng, threads
):
    # seed 0's first fold is refused, so the report fits every other fold
    # and seed without trying QR: still scikit-learn's figures, on any thread count
    from posenc import _config

    monkeypatch.setattr(_config, "get_num_threads", lambda: threads)
    base = np.cumsum(rng.standard_normal((90, 6)), axis=0)
    E = np.hstack([base, base[:, :3] * 2.0])  # rank 6 of 9 columns
    r = probe.report(E, seeds=4, progress=False, extras=())
    for seed in range(4):
        np.testing.assert_allclose(r.absolute[seed].fold_mae, direct_absolute(E, seed), atol=1e-9)
    assert r.mae > 0


def test_least_squares_fits_of_the_sinusoid_are_left_to_scikit_learn():
    # LinearRegression hands lstsq cond=tol (1e-6): singular values below
    # 1e-6 of the largest are cut.  The 512 x 768 sinusoid's centred folds
    # have singular values below that (the float64 table written out and
    # posenc's float32 one alike), so their solution is scikit-learn's own.
    from posenc.probe._fits import least_squares_predictions

    order = np.random.default_rng(0).permutation(N)
    y = order.astype(np.float64)
    for E in (paper_sinusoid(N, D), posenc.sinusoid(N, D).astype(np.float64)):
        X = E[order]
        s = np.linalg.svd(X[:410] - X[:410].mean(axis=0), compute_uv=False)
        assert s[-2] < 1e-6 * s[0]
        assert least_squares_predictions(X[:410], y[:410], X[410:], 1e-6) is None


@pytest.mark.parametrize("seed", [3, 7])
def test_absolute_probe_of_the_paper_tables_equals_direct_sklearn_runs(gaussian, seed):
    # posenc's 512 x 768 sinusoid (centred folds of condition number ~1e9)
    # and the Gaussian table: every rounded prediction as scikit-learn's
    for E in (posenc.sinusoid(N, D).astype(np.float64), gaussian):
        result = probe.absolute_position_regression(E, seed=seed)
        np.testing.assert_allclose(result.fold_mae, direct_absolute(E, seed), atol=1e-9)


def test_absolute_predictions_are_the_rounded_held_out_predictions(rng):
    E = np.cumsum(rng.standard_normal((50, 8)), axis=0)
    result = probe.absolute_position_regression(E, seed=3)
    errors = np.abs(result.predictions - np.arange(50))
    # each row is scored once, by the fold that held it out
    order = np.random.default_rng(3).permutation(50)
    per_fold = [errors[order[k * 10 : (k + 1) * 10]].mean() for k in range(5)]
    np.testing.assert_allclose(result.fold_mae, per_fold)
    np.testing.assert_array_equal(result.predictions, np.rint(result.predictions))


def test_order_pairs_are_distinct_grid_cells_and_labels_are_j_after_i():
    E = posenc.sinusoid(30, 16, dtype="float64")
    result = probe.relative_order_classification(E, pairs=900, seed=1)
    cells = result.pairs[:, 0] * 30 + result.pairs[:, 1]
    np.testing.assert_array_equal(np.sort(cells), np.arange(900))  # the whole grid, once


def test_probes_are_deterministic_for_a_seed_and_vary_with_it(rng):
    E = np.cumsum(rng.standard_normal((80, 10)), axis=0)
    a, b = (probe.relative_order_classification(E, seed=4) for _ in range(2))
    np.testing.assert_array_equal(a.pairs, b.pairs)
    np.testing.assert_array_equal(a.fold_errors, b.fold_errors)
    c = probe.relative_order_classification(E, seed=5)
    assert not np.array_equal(a.pairs, c.pairs)
    p, q = (probe.absolute_position_regression(E, seed=4) for _ in range(2))
    np.testing.assert_array_equal(p.predictions, q.predictions)


def test_probes_give_the_same_figures_for_any_layout_and_dtype(rng):
    E = np.cumsum(rng.standard_normal((60, 12)), axis=0).astype(np.float32)
    expected_a = probe.absolute_position_regression(E, seed=2)
    expected_o = probe.relative_order_classification(E, seed=2)
    wide = np.zeros((60, 24), np.float32)
    wide[:, ::2] = E
    swapped = E.astype(E.dtype.newbyteorder()).copy()
    flipped = np.ascontiguousarray(E[::-1])[::-1]  # negative row stride, same table
    for variant in (np.asfortranarray(E), wide[:, ::2], swapped, flipped, E.astype(np.float64)):
        a = probe.absolute_position_regression(variant, seed=2)
        o = probe.relative_order_classification(variant, seed=2)
        np.testing.assert_array_equal(a.predictions, expected_a.predictions)
        np.testing.assert_array_equal(o.fold_errors, expected_o.fold_errors)


def test_results_print_the_headline_figure_first():
    E = posenc.sinusoid(40, 16, dtype="float64")
    assert repr(probe.absolute_position_regression(E)).startswith("AbsolutePositionResult(mae=0,")
    assert repr(probe.relative_order_classification(E)).startswith(
        "RelativeOrderResult(error_rate=0."
    )


# ---------------------------------------------------------------- cosine, spectrum


def test_cosine_similarity_equals_the_normalised_gram_matrix(rng):
    E = rng.standard_normal((37, 11))
    gram = E @ E.T
    norms = np.sqrt(np.diag(gram))
    np.testing.assert_allclose(
        probe.cosine_similarity(E), gram / np.outer(norms, norms), atol=1e-14
    )


def test_cosine_similarity_is_the_same_for_any_layout(rng):
    E = rng.standard_normal((20, 9))
    expected = probe.cosine_similarity(E)
    for variant in (np.asfortranarray(E), E.astype(">f8"), np.repeat(E, 2, axis=1)[:, ::2]):
        np.testing.assert_array_equal(probe.cosine_similarity(variant), expected)


def test_cosine_similarity_of_a_zero_row_is_zero():
    E = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    S = probe.cosine_similarity(E)
    np.testing.assert_array_equal(S[1], [0.0, 0.0, 0.0])
    assert S[0, 2] == pytest.approx(1 / np.sqrt(2))


def test_informativeness_shares_are_monotone_and_end_at_one(rng):
    E = rng.standard_normal((50, 30)) * np.geomspace(1, 1e-3, 30)
    info = probe.informativeness(E)
    s = np.linalg.svd(E, compute_uv=False)
    np.testing.assert_allclose(info.singular_values, s, rtol=1e-12)
    assert np.all(np.diff(info.cumulative_share) >= 0)
    assert info.cumulative_share[-1] == 1.0
    np.testing.assert_allclose(info.cumulative_share, np.cumsum(s**2) / np.sum(s**2), rtol=1e-12)


def test_informativeness_rank_for_finds_the_rank_of_a_low_rank_table(rng):
    E = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 20))  # rank 3
    info = probe.informativeness(E)
    assert info.rank_for(1 - 1e-9) == 3
    assert info.rank_for(1.0) <= 20
    shares = info.cumulative_share
    for share in (0.5, 0.9, 0.99):
        k = info.rank_for(share)
        assert shares[k - 1] >= share and (k == 1 or shares[k - 2] < share)


def test_informativeness_centered_removes_the_mean_row(rng):
    v = rng.standard_normal(12)
    E = np.outer(np.arange(30.0), v) + 5.0 * rng.standard_normal(12)  # rank 2, rank 1 centred
    assert probe.informativeness(E).rank_for(1 - 1e-9) == 2
    centred = probe.informativeness(E, center=True)
    assert centred.centered and centred.rank_for(1 - 1e-9) == 1


# ---------------------------------------------------------------- skip positions, RoPE decay


def test_skip_positions_index_every_kth_position():
    np.testing.assert_array_equal(probe.skip_positions(5, 3), [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(probe.skip_positions(4, 1), np.arange(4))
    table = posenc.sinusoid(probe.skip_positions(10, 4), 16)
    np.testing.assert_array_equal(table, posenc.sinusoid(40, 16)[::4])


def _decay_by_hand(dim, m, base=10000.0):
    theta = [base ** (-2 * i / dim) for i in range(dim // 2)]
    total, partial = 0.0, 0j
    for t in theta:
        partial += complex(np.cos(m * t), np.sin(m * t))
        total += abs(partial)
    return total / (dim // 2)


@pytest.mark.parametrize("dim,base", [(128, 10000.0), (64, 500.0), (2, 10000.0)])
def test_rope_long_term_decay_is_roformers_mean_partial_sum_bound(dim, base):
    bound = probe.rope_long_term_decay(dim, 300, base=base)
    assert bound.shape == (301,)
    assert bound[0] == pytest.approx((dim // 2 + 1) / 2)
    for m in (1, 17, 250, 300):
        assert bound[m] == pytest.approx(_decay_by_hand(dim, m, base), rel=1e-12)


def test_rope_long_term_decay_decays_with_distance():
    bound = probe.rope_long_term_decay(128, 250)
    assert bound[200:].max() < 0.5 * bound[0]
    assert bound[1] < bound[0]


def test_rope_long_term_decay_in_chunks_matches_one_block():
    bound = probe.rope_long_term_decay(16, 70000)
    for m in (0, 32767, 32768, 65536, 70000):
        assert bound[m] == pytest.approx(_decay_by_hand(16, m), rel=1e-9)


# ---------------------------------------------------------------- the report


def test_report_to_dict_is_json_and_holds_every_seed(sinusoid_report):
    data = json.loads(json.dumps(sinusoid_report.to_dict(), allow_nan=False))
    assert data["n_positions"] == N and data["dim"] == D and data["seeds"] == list(range(10))
    assert data["absolute_position"]["mae_per_seed"] == [0.0] * 10
    rates = [r.error_rate for r in sinusoid_report.order]
    assert data["relative_order"]["error_rate_per_seed"] == rates
    assert data["relative_order"]["error_rate"] == pytest.approx(np.mean(rates))
    assert data["informativeness"]["cumulative_share"][-1] == 1.0
    assert {r["embedding"] for r in data["published"]} == {"BERT", "RoBERTa", "GPT-2", "sinusoid"}


def test_report_markdown_sets_the_figures_beside_the_published_rows(sinusoid_report):
    text = sinusoid_report.to_markdown()
    rates = np.array([r.error_rate for r in sinusoid_report.order])
    assert f"| 0.00 ± 0.00 | {100 * rates.mean():.2f}% ± {100 * rates.std():.2f}% |" in text
    for row in (
        "| BERT (Wang & Chen 2020) | 34.14 | 19.72% |",
        "| GPT-2 (Wang & Chen 2020) | 1.03 ",
    ):
        assert row in text
    assert "| sinusoid (Wang & Chen 2020) | 0.00 | 5.08% |" in text
    assert "BERT" not in sinusoid_report.to_markdown(published=False)


def test_printing_a_report_shows_the_headline_figures(sinusoid_report):
    text = str(sinusoid_report)
    assert text.startswith("sinusoid: absolute MAE 0.00 ± 0.00, order error ")
    assert f"{100 * sinusoid_report.error_rate:.2f}%" in repr(sinusoid_report)


def test_report_plot_writes_one_png_and_leaves_the_global_backend_alone(sinusoid_report, tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    had_pyplot = "matplotlib.pyplot" in sys.modules
    path = tmp_path / "probe.png"
    assert sinusoid_report.plot(path) == path
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    assert matplotlib.get_backend() == backend
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot


def test_report_plot_refuses_a_format_matplotlib_cannot_write_before_drawing(
    sinusoid_report, tmp_path
):
    with pytest.raises(ValueError, match=r"plot: matplotlib cannot write \.xyz files .*\.png"):
        sinusoid_report.plot(tmp_path / "p.xyz")
    assert list(tmp_path.iterdir()) == []
    assert sinusoid_report.plot(tmp_path / "p.pdf").read_bytes().startswith(b"%PDF")
    assert sinusoid_report.plot(tmp_path / "p").read_bytes().startswith(b"\x89PNG")  # as named


def test_report_plot_of_a_tall_table_draws_every_kth_position_of_the_heatmap(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    E = np.cumsum(np.random.default_rng(3).standard_normal((2100, 4)), axis=0)
    report = probe.report(E, name="tall", seeds=1, progress=False, baselines=False)
    assert report.cosine.shape == (2100, 2100)  # the report keeps the whole map
    shown = []
    imshow = Axes.imshow
    monkeypatch.setattr(
        Axes, "imshow", lambda ax, X, **kw: shown.append(X.shape) or imshow(ax, X, **kw)
    )
    report.plot(tmp_path / "tall.png")
    assert shown == [(700, 700)]  # every 3rd of 2100 positions: at most 1024 a side


def test_report_draws_a_progress_bar_on_stderr_while_the_seeds_run(capsys, monkeypatch):
    import importlib

    E = posenc.sinusoid(30, 8, dtype="float64")
    probe.report(E, name="tiny", seeds=3, baselines=False)
    assert capsys.readouterr().err == ""  # stderr is not a terminal: no bar in a log
    monkeypatch.setattr(importlib.import_module("posenc.probe.report"), "_is_terminal", bool)
    probe.report(E, name="tiny", seeds=3, baselines=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert "probing tiny" in err and "seed 3/3" in err and err.endswith("\n")
    probe.report(E, name="tiny", seeds=2, progress=False)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "E,exc,pattern",
    [
        (np.zeros(10), ValueError, r"E must be a 2-D \(n_positions, dim\) array"),
        (np.zeros((4, 5, 6)), ValueError, r"E must be a 2-D \(n_positions, dim\) array"),
        (np.ones((10, 4), complex), TypeError, "E must hold real numbers"),
        (np.ones((10, 4), bool), TypeError, "E must hold real numbers"),
        (np.array([["a"] * 4] * 10), TypeError, "E must hold real numbers"),
        (np.full((10, 4), np.nan), ValueError, "E must be finite"),
        (np.full((10, 4), -np.inf), ValueError, "E must be finite"),
        (np.zeros((10, 0)), ValueError, "E must have at least one column"),
    ],
)
def test_bad_tables_raise_errors_naming_E(E, exc, pattern):
    functions = (
        probe.absolute_position_regression,
        probe.relative_order_classification,
        probe.cosine_similarity,
        probe.informativeness,
        lambda E: probe.report(E, name="x", progress=False),
    )
    for fn in functions:
        with pytest.raises(exc, match=pattern):
            fn(E)


def test_too_few_positions_for_the_folds_raise_errors():
    E = np.arange(12.0).reshape(4, 3)
    for fn in (probe.absolute_position_regression, probe.relative_order_classification):
        with pytest.raises(ValueError, match=r"folds must be <= the number of"):
            fn(E)
    with pytest.raises(ValueError, match="E must have at least 5 rows"):
        probe.report(E, name="x")


def test_bad_probe_options_raise_errors_naming_them():
    E = posenc.sinusoid(20, 8, dtype="float64")
    with pytest.raises(ValueError, match="folds must be >= 2"):
        probe.absolute_position_regression(E, folds=1)
    with pytest.raises(ValueError, match="folds must be <= "):
        probe.absolute_position_regression(E, folds=21)
    with pytest.raises(TypeError, match="folds must be an integer"):
        probe.absolute_position_regression(E, folds=2.5)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        probe.relative_order_classification(E, seed=-1)
    with pytest.raises(ValueError, match="pairs must be <= 400"):
        probe.relative_order_classification(E, pairs=401)
    with pytest.raises(ValueError, match="pairs: the training pairs of fold"):
        probe.relative_order_classification(np.ones((2, 3)), pairs=4, folds=2)
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        probe.report(E, name="x", seeds=0)
    with pytest.raises(TypeError, match="name must be a string"):
        probe.report(E, name=3)
    with pytest.raises(ValueError, match="share must be in"):
        probe.informativeness(E).rank_for(1.5)
    with pytest.raises(ValueError, match="E is all zeros"):
        probe.informativeness(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="k must be >= 1"):
        probe.skip_positions(4, 0)
    with pytest.raises(ValueError, match="dim must be a positive even"):
        probe.rope_long_term_decay(7, 10)
    with pytest.raises(ValueError, match="max_distance must be >= 0"):
        probe.rope_long_term_decay(8, -1)


# ---------------------------------------------------------------- optional dependencies


def test_importing_posenc_and_probe_imports_neither_sklearn_nor_matplotlib():
    code = (
        "import sys, posenc, posenc.probe; "
        "print(sorted(m for m in ('sklearn', 'matplotlib') if m in sys.modules))"
    )
    out = child_process.run("-c", code, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_sklearn_raises_import_error_naming_the_probe_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.linear_model", None)
    E = posenc.sinusoid(20, 8, dtype="float64")
    for fn in (probe.absolute_position_regression, probe.relative_order_classification):
        with pytest.raises(ImportError, match=r'scikit-learn.*pip install "posenc\[probe\]"'):
            fn(E)


def test_missing_matplotlib_raises_import_error_naming_the_probe_extra(monkeypatch, tmp_path):
    report = probe.report(
        posenc.sinusoid(20, 8, dtype="float64"), name="x", seeds=1, progress=False
    )
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'matplotlib.*pip install "posenc\[probe\]"'):
        report.plot(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------- loading tables


def test_load_reads_a_npy_file(tmp_path, rng):
    E = rng.standard_normal((12, 5)).astype(np.float32)
    np.save(tmp_path / "pe.npy", E)
    loaded = probe.load_position_embeddings(tmp_path / "pe.npy")
    np.testing.assert_array_equal(loaded, E)
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(probe.load_position_embeddings(str(tmp_path / "pe.npy")), E)


def test_load_finds_the_known_key_in_a_npz_file(tmp_path, rng):
    E = rng.standard_normal((12, 5))
    np.savez(tmp_path / "a.npz", **{"transformer.wpe.weight": E, "transformer.wte.weight": E.T})
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path / "a.npz"), E)
    np.savez(tmp_path / "one.npz", table=E)
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path / "one.npz"), E)
    got = probe.load_position_embeddings(tmp_path / "a.npz", key="transformer.wte.weight")
    np.testing.assert_array_equal(got, E.T)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_load_reads_a_safetensors_file_as_safetensors_writes_it(tmp_path, rng, dtype):
    from safetensors.numpy import save_file

    E = rng.standard_normal((20, 6)).astype(dtype)
    tensors = {
        "embeddings.word_embeddings.weight": rng.standard_normal((50, 6)).astype(dtype),
        "embeddings.position_embeddings.weight": E,
        "embeddings.position_ids": np.arange(20, dtype=np.int64)[None],
        "pooler.dense.bias": np.zeros(6, dtype),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "np"})
    loaded = probe.load_position_embeddings(tmp_path / "model.safetensors")
    np.testing.assert_array_equal(loaded, E)
    assert loaded.dtype == dtype
    got = probe.load_position_embeddings(
        tmp_path / "model.safetensors", key="embeddings.position_ids"
    )
    np.testing.assert_array_equal(got, np.arange(20)[None])


def test_load_finds_the_table_in_a_sharded_model_directory(tmp_path, rng):
    from safetensors.numpy import save_file

    E = rng.standard_normal((16, 4)).astype(np.float32)
    save_file({"h.0.mlp.weight": np.ones((4, 4), np.float32)}, str(tmp_path / "m-1.safetensors"))
    save_file({"transformer.wpe.weight": E}, str(tmp_path / "m-2.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    np.testing.assert_array_equal(probe.load_position_embeddings(tmp_path), E)


def test_load_takes_state_dicts_and_objects_with_state_dict(rng):
    E = rng.standard_normal((10, 3))
    nested = {"model": {"encoder": {"embeddings.position_embeddings.weight": E}}, "step": {}}
    np.testing.assert_array_equal(probe.load_position_embeddings(nested), E)

    class Model:
        def state_dict(self):
            return {"decoder.embed_positions.weight": E, "decoder.embed_tokens.weight": E.T}

    np.testing.assert_array_equal(probe.load_position_embeddings(Model()), E)
    np.testing.assert_array_equal(probe.load_position_embeddings(E), E)


def test_load_errors_list_the_keys_seen_and_name_the_problem(tmp_path, rng):
    E = rng.standard_normal((10, 3))
    with pytest.raises(ValueError, match=r"no position-embedding table found .*Keys seen: a, b"):
        probe.load_position_embeddings({"a": E, "b": E})
    with pytest.raises(ValueError, match=r"key 'c' not found in the state dict; keys seen: a, b"):
        probe.load_position_embeddings({"a": E, "b": E}, key="c")
    both = {"encoder.embed_positions.weight": E, "decoder.embed_positions.weight": E}
    with pytest.raises(ValueError, match="several position tables"):
        probe.load_position_embeddings(both)
    got = probe.load_position_embeddings(both, key="decoder.embed_positions.weight")
    np.testing.assert_array_equal(got, E)
    with pytest.raises(ValueError, match=r"the table under 'wpe.weight' must be 2-D"):
        probe.load_position_embeddings({"wpe.weight": np.zeros((2, 3, 4))})
    with pytest.raises(FileNotFoundError, match="no such file"):
        probe.load_position_embeddings(tmp_path / "missing.npy")
    (tmp_path / "x.txt").write_text("1 2 3")
    with pytest.raises(ValueError, match=r"is not a \.npy, \.npz, \.safetensors"):
        probe.load_position_embeddings(tmp_path / "x.txt")
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        probe.load_position_embeddings(tmp_path / "bad.safetensors")
    np.save(tmp_path / "pe.npy", E)
    with pytest.raises(ValueError, match="key must be None"):
        probe.load_position_embeddings(tmp_path / "pe.npy", key="wpe.weight")
    with pytest.raises(TypeError, match="source must be a path, a state dict"):
        probe.load_position_embeddings(3.5)
    with pytest.raises(ValueError, match="no .safetensors, .bin, .pt or .pth file"):
        probe.load_position_embeddings((tmp_path / "empty").mkdir() or tmp_path / "empty")


@pytest.mark.parametrize("threads", [1, 3])
def test_report_seeds_on_threads_give_the_figures_of_one_seed_at_a_time(monkeypatch, threads):
    from posenc import _config

    monkeypatch.setattr(_config, "get_num_threads", lambda: threads)
    E = np.cumsum(np.random.default_rng(3).standard_normal((60, 12)), axis=0)
    r = probe.report(E, seeds=4, progress=False, extras=())
    for seed in range(4):
        a = probe.absolute_position_regression(E, seed=seed)
        o = probe.relative_order_classification(E, seed=seed)
        assert r.absolute[seed].seed == seed and r.order[seed].seed == seed
        np.testing.assert_array_equal(r.absolute[seed].predictions, a.predictions)
        np.testing.assert_array_equal(r.order[seed].fold_errors, o.fold_errors)
