"""The probes' held-out split and probe families (posenc.probe.protocol),
each against scikit-learn run directly, fold by fold."""

import json

import numpy as np
import pytest
from optional import require

import posenc
from posenc import probe
from posenc.__main__ import main
from posenc.probe.protocol import heldout_pairs

require("sklearn")

E = np.cumsum(np.random.default_rng(11).standard_normal((60, 12)), axis=0)


def _direct_absolute(E, seed, split, make, folds=5):
    n = len(E)
    order = np.random.default_rng(seed).permutation(n) if split == "paper" else np.arange(n)
    X, y = E[order], order.astype(float)
    out = []
    bounds = np.cumsum([0] + [n // folds + (k < n % folds) for k in range(folds)])
    for k in range(folds):
        test = np.zeros(n, bool)
        test[bounds[k] : bounds[k + 1]] = True
        pred = make().fit(X[~test], y[~test]).predict(X[test])
        out.append(np.mean([abs(np.rint(p) - t) for p, t in zip(pred, y[test])]))
    return np.array(out)


def _makers(seed):
    from sklearn.linear_model import LinearRegression, Ridge
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.neural_network import MLPRegressor

    return {
        "linear": LinearRegression,
        "ridge": lambda: Ridge(alpha=1.0),
        "knn": lambda: KNeighborsRegressor(n_neighbors=5),
        "mlp": lambda: MLPRegressor(hidden_layer_sizes=(64,), max_iter=500, random_state=seed),
    }


@pytest.mark.parametrize("split", ["paper", "heldout"])
@pytest.mark.parametrize("regressor", ["linear", "ridge", "knn", "mlp"])
def test_absolute_probe_families_and_splits_equal_sklearn(split, regressor):
    r = probe.absolute_position_regression(E, seed=2, split=split, regressor=regressor)
    direct = _direct_absolute(E, 2, split, _makers(2)[regressor])
    np.testing.assert_allclose(r.fold_mae, direct, atol=1e-9 if regressor == "linear" else 0)
    assert (r.split, r.regressor) == (split, regressor)


def test_heldout_order_pairs_never_share_a_position_with_training():
    from sklearn.linear_model import LogisticRegression

    r = probe.relative_order_classification(E, seed=4, split="heldout")
    drawn = heldout_pairs(60, 60, 5, 4)
    errors = []
    for train, test in drawn:
        assert not set(train.ravel()) & set(test.ravel())
        X = lambda p: np.array([np.concatenate([E[i], E[j]]) for i, j in p])  # noqa: E731
        y = lambda p: np.array([j > i for i, j in p])  # noqa: E731
        model = LogisticRegression(max_iter=1000).fit(X(train), y(train))
        errors.append(np.mean(model.predict(X(test)) != y(test)))
    np.testing.assert_allclose(r.fold_errors, errors, atol=1e-12)
    np.testing.assert_array_equal(r.pairs, np.concatenate([t for _, t in drawn]))
    assert len(r.pairs) == 60 and r.split == "heldout"


def test_a_random_table_scores_near_chance_only_with_heldout_pairs():
    # the paper's split lets test pairs share positions with training pairs
    noise = np.random.default_rng(0).standard_normal((200, 64))
    paper = np.mean(
        [probe.relative_order_classification(noise, seed=s).error_rate for s in range(5)]
    )
    held = np.mean(
        [
            probe.relative_order_classification(noise, seed=s, split="heldout").error_rate
            for s in range(5)
        ]
    )
    assert paper < 0.45 and 0.4 < held < 0.6


def test_report_and_cli_record_the_protocol(tmp_path, capsys):
    S = posenc.sinusoid(40, 8, dtype="float64")
    r = probe.report(
        S,
        seeds=2,
        progress=False,
        split="heldout",
        regressor="ridge",
        folds=4,
        pairs=50,
        baselines=False,
    )
    p = r.to_dict()["protocol"]
    assert p == {
        "posenc_version": posenc.__version__,
        "seeds": 2,
        "split": "heldout",
        "regressor": "ridge",
        "folds": 4,
        "pairs": 50,
        "extras": ["properties", "toeplitz", "locality"],
        "baselines": False,
    }
    assert "ridge probes, 4-fold cross-validation (held-out positions)" in r.to_markdown()
    again = probe.report(
        S,
        seeds=p["seeds"],
        progress=False,
        split=p["split"],
        regressor=p["regressor"],
        folds=p["folds"],
        pairs=p["pairs"],
        baselines=p["baselines"],
    )
    assert again.to_dict() == r.to_dict()  # the JSON is enough to rerun it
    npy = tmp_path / "s.npy"
    np.save(npy, S)
    js = tmp_path / "s.json"
    args = [
        "probe",
        "--source",
        str(npy),
        "--seeds",
        "2",
        "--split",
        "heldout",
        "--regressor",
        "ridge",
        "--folds",
        "4",
        "--pairs",
        "50",
        "--no-baselines",
        "--analyses",
        "paper,properties,toeplitz,locality",
        "--json",
        str(js),
    ]
    assert main(args) == 0
    capsys.readouterr()
    data = json.loads(js.read_text())
    assert data["protocol"] == p
    assert data["absolute_position"]["mae"] == r.mae
    with pytest.raises(ValueError, match="split must be one of"):
        probe.report(S, split="random", progress=False)
    with pytest.raises(ValueError, match="regressor must be one of"):
        probe.absolute_position_regression(S, regressor="svm")
