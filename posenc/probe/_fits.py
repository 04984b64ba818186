"""The absolute-position probe's least-squares fit in LAPACK terms.

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

from typing import Optional

import numpy as np

from .._typing import NDArray
from ._optional import require

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
