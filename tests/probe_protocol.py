"""The probing protocol of "What Do Position Embeddings Learn?" written
directly with scikit-learn, the witness for posenc.probe (a module shared
by the test files, not collected by pytest)."""

import numpy as np
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import make_scorer
from sklearn.model_selection import KFold, cross_val_score
from threadpoolctl import threadpool_limits


def _rounded_mae(y, pred):
    return np.mean(np.abs(np.rint(pred) - y))


def direct_absolute(E, seed, folds=5):
    """The protocol written with scikit-learn: fold MAEs of the shuffled rows."""
    order = np.random.default_rng(seed).permutation(len(E))
    scorer = make_scorer(_rounded_mae, greater_is_better=False)
    with threadpool_limits(1):  # only the speed: the problem is small
        scores = cross_val_score(
            LinearRegression(), E[order], order.astype(float), cv=KFold(folds), scoring=scorer
        )
    return -scores


def direct_order(E, seed, pairs=None, folds=5):
    """The protocol written with scikit-learn: fold error rates of the drawn pairs."""
    n = len(E)
    cells = np.random.default_rng(seed).choice(n * n, size=pairs or n, replace=False)
    i, j = cells // n, cells % n
    X = np.hstack([E[i], E[j]])
    with threadpool_limits(1):
        accuracy = cross_val_score(LogisticRegression(max_iter=1000), X, j > i, cv=KFold(folds))
    return 1 - accuracy
