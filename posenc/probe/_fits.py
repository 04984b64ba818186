"""The absolute-position probe's folds (:func:`absolute_position_fit`, with
its result, :class:`AbsolutePositionResult`) and its least-squares fit in
LAPACK terms.

:func:`least_squares_predictions` computes what scikit-learn's
``LinearRegression`` computes (ordinary least squares with an intercept, the
minimum-norm solution when underdetermined) by one Householder QR instead of
an SVD: the same solution where scikit-learn's SVD cuts no singular value.
Where it would (below ``tol * max``: the 512 x 768 sinusoid's folds), it
returns None and the caller fits by :func:`lstsq_predictions`, scikit-learn's
own computation (its centring and its LAPACK call) without its checks and
copies, which stays the reference.

The relative-order probe keeps scikit-learn's ``LogisticRegression``: its
lbfgs stops at a gradient tolerance of 1e-4, before the optimum, and the
classes it predicts are those of where it stopped, not those of the optimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .._typing import NDArray
from ._common import fold_slices, format_floats, train_mask
from ._optional import one_thread, require
from .protocol import make_regressor

#: How far above scikit-learn's cut the smallest singular value must be
#: certified to lie for the QR solution to be the one it computes.
_MARGIN = 2.0


def lstsq_predictions(
    X: NDArray[np.float64], y: NDArray[np.float64], test: NDArray[np.float64], cut: float
) -> NDArray[np.float64]:
    """``LinearRegression(tol=cut).fit(X, y).predict(test)``, every step as
    scikit-learn takes it: the column means removed, ``scipy.linalg.lstsq``
    (gelsd, ``cond=cut``) of the centred data, then ``test @ w + intercept``;
    the same floating-point operations, so the same bits (the tests compare
    them), without the input checks and copies that cost a fold a quarter of
    its time."""
    linalg = require("scipy.linalg", "absolute_position_regression")  # scikit-learn's

    mean = X.mean(axis=0)
    y_mean = y.mean()
    w = linalg.lstsq(X - mean, y - y_mean, cond=cut, check_finite=False)[0]
    return test @ w + (y_mean - mean @ w)


def least_squares_predictions(
    X: NDArray[np.float64], y: NDArray[np.float64], test: NDArray[np.float64], cut: float
) -> Optional[NDArray[np.float64]]:
    """``LinearRegression().fit(X, y).predict(test)`` by one QR factorisation.

    The data are centred as scikit-learn centres them; the centred rows sum to
    zero, so one Householder reflection of the rows (``1/sqrt(m)`` onto the
    first axis) leaves a first row of zeros and an ``(m - 1) x d`` matrix ``Z``
    with the same least-squares solutions.  Overdetermined, ``w = R^-1 Q^T z``
    from ``Z = QR``; underdetermined, the minimum-norm ``w = Q R^-T z`` from
    ``Z^T = QR``.

    scikit-learn's lstsq treats the singular values below ``cut`` times the
    largest as zero (`cut`: ``LinearRegression``'s ``tol``, 1e-6, which it
    hands to lstsq as ``cond``).  The QR solution is that one only when no
    singular value is cut: certified by ``1 / (|R|_F |R^-1|_F)``, a lower
    bound of ``s_min / s_max``, at least ``_MARGIN * cut``; else None.
    """
    lapack = require("scipy.linalg.lapack", "absolute_position_regression")  # scikit-learn's

    m = X.shape[0]
    mean = X.mean(axis=0)
    Z = X - mean
    z = y - y.mean()
    # the reflection H = I - 2 v v^T / (v^T v), v = e_1 + 1/sqrt(m) (H 1/sqrt(m) = -e_1)
    v = np.full(m, 1.0 / np.sqrt(m))
    v[0] += 1.0
    scale = 2.0 / (v @ v)
    Z -= np.outer(v, scale * (v @ Z))
    z -= v * (scale * (v @ z))
    Z, z = Z[1:], z[1:]
    rows, cols = Z.shape
    if rows == 0:  # one training row: nothing to factor
        return None
    over = rows >= cols
    # Householder QR (Q kept as reflectors, applied by ormqr): of Z, or of Z^T
    A = np.asfortranarray(Z if over else Z.T)
    qr, tau, _, info = lapack.dgeqrf(A, lwork=64 * A.shape[1], overwrite_a=True)
    if info != 0:
        return None
    k = min(rows, cols)
    r = np.triu(qr[:k, :k])
    inverse, info = lapack.dtrtri(r)
    if info != 0:
        return None
    bound = 1.0 / (np.linalg.norm(r) * np.linalg.norm(inverse))
    if not bound > _MARGIN * cut:
        return None
    if over:  # w = R^-1 (Q^T z)[:k]
        qz, _, info = lapack.dormqr("L", "T", qr, tau, z[:, None].copy(order="F"), 64)
        w, info2 = lapack.dtrtrs(r, qz[:k])
    else:  # w = Q (R^-T z)
        t, info2 = lapack.dtrtrs(r, z[:, None], trans=1)
        padded = np.zeros((cols, 1), order="F")
        padded[:k] = t
        w, _, info = lapack.dormqr("L", "N", qr, tau, padded, 64)
    if info != 0 or info2 != 0:
        return None
    return (test - mean) @ w[:, 0] + y.mean()


@dataclass(frozen=True, repr=False)
class AbsolutePositionResult:
    """Result of :func:`absolute_position_regression`.

    Attributes
    ----------
    mae : float
        Mean absolute error in positions, averaged over the folds.
    fold_mae : ndarray of shape (folds,)
        The mean absolute error of each fold.
    predictions : ndarray of shape (n_positions,)
        ``predictions[p]``: the rounded position predicted for row ``p`` by
        the model that did not see it (so ``|predictions - arange(n)|`` are the
        scored errors).
    seed : int
        The seed of the shuffle.
    split, regressor : str
        The protocol (:mod:`posenc.probe.protocol`).
    """

    mae: float
    fold_mae: NDArray[np.float64]
    predictions: NDArray[np.float64]
    seed: int
    split: str = "paper"
    regressor: str = "linear"

    def __repr__(self) -> str:
        return (
            f"AbsolutePositionResult(mae={self.mae:.4g}, "
            f"fold_mae={format_floats(self.fold_mae, '.4g')}, seed={self.seed})"
        )


def absolute_position_fit(
    table: NDArray[np.float64],
    folds: int,
    seed: int,
    try_qr: bool = True,
    split: str = "paper",
    regressor: str = "linear",
) -> Tuple[AbsolutePositionResult, bool]:
    """:func:`~posenc.probe.absolute_position_regression` of a checked table,
    and whether a fold's QR fit was refused.

    Each fold is fitted by QR (:func:`least_squares_predictions`) while the
    certificate accepts it; once it refuses a fold (or with `try_qr` False)
    the folds after it are fitted as scikit-learn fits them
    (:func:`lstsq_predictions`).  Skipping the QR
    attempt only ever chooses that path, which is correct for every fold
    (QR is only a faster way to the same solution, where certified): it
    saves an attempt that the certificate would most likely refuse again,
    as the folds of one table (of any seed) are its rows less a fifth, with
    nearly the same singular values.
    """
    linear_model = require("sklearn.linear_model", "absolute_position_regression")
    n = table.shape[0]
    order = np.random.default_rng(seed).permutation(n) if split == "paper" else np.arange(n)
    X, y = table[order], order.astype(np.float64)
    predictions = np.empty(n)
    fold_mae = np.empty(folds)
    # the share of the largest singular value below which lstsq cuts
    cut = max(float(getattr(linear_model.LinearRegression(), "tol", 0.0)), np.finfo(float).eps)
    refused = False
    with one_thread():
        for k, test in enumerate(fold_slices(n, folds)):
            train = train_mask(n, test)
            predicted = None
            if regressor != "linear":
                model = make_regressor(regressor, seed).fit(X[train], y[train])
                predicted = np.asarray(model.predict(X[test]), dtype=np.float64)
            elif try_qr and not refused:
                predicted = least_squares_predictions(X[train], y[train], X[test], cut)
                refused = predicted is None
            if predicted is None:  # scikit-learn's SVD cuts a singular value: its solution
                predicted = lstsq_predictions(X[train], y[train], X[test], cut)
            rounded = np.rint(predicted)
            predictions[order[test]] = rounded
            fold_mae[k] = np.mean(np.abs(rounded - y[test]))
    result = AbsolutePositionResult(
        mae=float(np.mean(fold_mae)),
        fold_mae=fold_mae,
        predictions=predictions,
        seed=seed,
        split=split,
        regressor=regressor,
    )
    return result, refused
