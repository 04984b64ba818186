"""The probes' protocol beyond the paper's: which positions the held-out
folds hold (`split`) and which family of probe reads them (`regressor`).

- ``split="paper"`` (the default): Wang & Chen's folds, of seeded-shuffled
  rows (absolute probe) or of drawn pairs (order probe).  A test pair of the
  order probe then shares its positions with training pairs.
- ``split="heldout"``: the test positions are never seen in training.  The
  absolute probe's folds are contiguous blocks of positions (no shuffle), so
  a fold's positions lie in a range no training row is in.  The order probe
  shuffles the positions by the seed, cuts them into `folds` groups, and for
  fold ``k`` draws its test pairs from group ``k`` alone and its training
  pairs from the other groups alone.

- ``regressor``: ``"linear"`` (the paper's: least squares, and logistic
  regression for the order), ``"ridge"`` (scikit-learn's ``Ridge`` and
  ``RidgeClassifier``, ``alpha=1``), ``"mlp"`` (``MLPRegressor`` and
  ``MLPClassifier``, one hidden layer of 64, up to 500 iterations, seeded),
  ``"knn"`` (``KNeighborsRegressor`` and ``KNeighborsClassifier``, 5
  neighbours).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from .._typing import NDArray
from ._common import fold_slices
from ._optional import require as _require

SPLITS: Tuple[str, ...] = ("paper", "heldout")
REGRESSORS: Tuple[str, ...] = ("linear", "ridge", "mlp", "knn")


def check_split(split: Any) -> str:
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def check_regressor(regressor: Any) -> str:
    if not isinstance(regressor, str) or regressor not in REGRESSORS:
        raise ValueError(f"regressor must be one of {', '.join(REGRESSORS)}, got {regressor!r}")
    return regressor


#: The probes beside the paper's linear ones, by `regressor`: the scikit-learn
#: module, its regressor (absolute probe) and classifier (order probe), and
#: their options (the MLP's seeded besides).
_ESTIMATORS: Dict[str, Tuple[str, Tuple[str, str], Dict[str, Any]]] = {
    "ridge": ("sklearn.linear_model", ("Ridge", "RidgeClassifier"), {"alpha": 1.0}),
    "mlp": (
        "sklearn.neural_network",
        ("MLPRegressor", "MLPClassifier"),
        {"hidden_layer_sizes": (64,), "max_iter": 500},
    ),
    "knn": (
        "sklearn.neighbors",
        ("KNeighborsRegressor", "KNeighborsClassifier"),
        {"n_neighbors": 5},
    ),
}


def _estimator(regressor: str, seed: int, classifier: bool) -> Any:
    module, names, options = _ESTIMATORS[regressor]
    made = getattr(_require(module, f"regressor={regressor!r}"), names[classifier])
    return made(**options, **({"random_state": seed} if regressor == "mlp" else {}))


def make_regressor(regressor: str, seed: int) -> Any:
    """The scikit-learn regressor of `regressor` (not ``"linear"``)."""
    return _estimator(regressor, seed, classifier=False)


def make_classifier(regressor: str, seed: int) -> Any:
    """The scikit-learn classifier of the order probe for `regressor`."""
    if regressor == "linear":
        return _require("sklearn.linear_model", "the order probe").LogisticRegression(max_iter=1000)
    return _estimator(regressor, seed, classifier=True)


def heldout_pairs(
    n: int, count: int, folds: int, seed: int
) -> List[Tuple[NDArray[np.int64], NDArray[np.int64]]]:
    """For each fold, ``(train pairs, test pairs)`` as (i, j) rows: the
    positions shuffled by `seed` and cut into `folds` groups; the fold's
    ``count // folds`` (or one more) test pairs drawn from its group's cells,
    the rest of `count` from the other groups' cells, each without
    replacement."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    groups = [order[s] for s in fold_slices(n, folds)]
    sizes = [s.stop - s.start for s in fold_slices(count, folds)]
    out = []
    for k, group in enumerate(groups):
        rest = np.concatenate([g for m, g in enumerate(groups) if m != k])
        out.append((_cells(rest, count - sizes[k], rng), _cells(group, sizes[k], rng)))
    return out


def _cells(positions: NDArray[np.int64], count: int, rng: Any) -> NDArray[np.int64]:
    m = len(positions)
    if count > m * m:
        raise ValueError(
            f"pairs: {count} pairs asked of {m} positions ({m * m} pairs): use fewer pairs "
            "or fewer folds"
        )
    cells = rng.choice(m * m, size=count, replace=False)
    i, j = np.divmod(cells, m)
    return np.stack([positions[i], positions[j]], axis=1).astype(np.int64)
